//! YAML exactly as Helm reads and writes it, in pure Rust.
//!
//! Helm parses values and manifests with go-yaml v2 (YAML 1.1 scalar resolution, through
//! `sigs.k8s.io/yaml`) and prints `toYaml` with go-yaml v2's emitter (80-column folding,
//! sorted keys, its own quoting rules). This crate reproduces both, byte for byte.
