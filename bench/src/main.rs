//! Placeholder until the bench harness lands.
fn main() {}
