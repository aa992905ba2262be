//! Placeholder until the torture harness lands.
fn main() {}
