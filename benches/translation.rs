//! Translation benchmarks (filled in below).
fn main() {}
