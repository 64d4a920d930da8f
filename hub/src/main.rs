//! `flotilla-hub`: the hub's controllers in one process.

fn main() {}
