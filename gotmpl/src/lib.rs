//! Go's `text/template` and the Sprig function library, as Helm uses them, in pure Rust.
//!
//! Start at the lexer and parser (template text to a tree), then the executor (tree plus data
//! to text) with Go's value model and printing rules. No IO, no async.
