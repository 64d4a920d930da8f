//! Helm charts in pure Rust: loading (directory or archive), values coalescing, rendering
//! through `flotilla-gotmpl` with Helm's functions, hooks, manifest ordering, post-renderers
//! and the Helm release record codec.
