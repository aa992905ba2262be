//! The slothqueue binary.
fn main() {}
