//! YAML exactly as Helm reads and writes it, in pure Rust.
//!
//! Helm parses values and manifests with go-yaml v2 (YAML 1.1 scalar resolution, through
//! `sigs.k8s.io/yaml`) and prints `toYaml` with go-yaml v2's emitter (80-column folding,
//! sorted keys, its own quoting rules). This crate reproduces both, byte for byte.
//!
//! Where to start:
//! - [`Value`] / [`Mapping`]: the data model (what go-yaml v2 decodes into `interface{}`).
//! - [`from_str`] / [`from_str_all`]: go-yaml v2 `yaml.Unmarshal` (ints and floats kept apart,
//!   any scalar as a key).
//! - [`sigs::unmarshal`], [`sigs::unmarshal_map`]: `sigs.k8s.io/yaml.Unmarshal`, what Helm
//!   uses for values files and `fromYaml` (string keys, every number a float64).
//! - [`sigs::marshal`], [`sigs::helm_to_yaml`]: `sigs.k8s.io/yaml.Marshal` and Helm's `toYaml`.
//! - [`to_string`]: go-yaml v2 `yaml.Marshal` of a Go value directly.
//!
//! The event stream comes from `saphyr-parser` (a YAML 1.2 scanner); typing, tags, anchors,
//! merge keys and error texts follow go-yaml v2. Inputs are bounded: nesting deeper than
//! [`MAX_DEPTH`] and alias expansion beyond go-yaml's ratio are errors, never a crash.

mod emit;
mod error;
mod goformat;
mod json;
mod parse;
mod resolve;
mod sort;
mod value;

pub use emit::KeyOrder;
pub use error::Error;
pub use goformat::{format_g as go_format_float_g, format_json_float as go_format_json_float};
pub use parse::MAX_DEPTH;
pub use sort::go_yaml_key_cmp;
pub use value::{Mapping, Value};

/// The `sigs.k8s.io/yaml` functions Helm calls.
pub mod sigs {
    pub use crate::json::{
        helm_to_yaml, marshal, unmarshal, unmarshal_bytes, unmarshal_map, unmarshal_seq,
        yaml_to_json,
    };
}

/// go-yaml v2 `yaml.Unmarshal(src, &interface{})`: the first document (`Null` for an empty
/// stream), with ints, floats and non-string keys as go-yaml produces them. Repeated keys:
/// the last value wins, in the first key's position.
pub fn from_str(src: &str) -> Result<Value, Error> {
    parse::unmarshal(src, parse::DecodeOptions::default())
}

/// go-yaml v2 `yaml.UnmarshalStrict`: as [`from_str`], but a repeated key is an error.
pub fn from_str_strict(src: &str) -> Result<Value, Error> {
    parse::unmarshal(src, parse::DecodeOptions { strict: true })
}

/// [`from_str`] for raw bytes: invalid UTF-8 is go-yaml's reader error.
pub fn from_slice(src: &[u8]) -> Result<Value, Error> {
    from_str(parse::bytes_to_str(src)?)
}

/// Every document of a stream, as successive `yaml.Decoder.Decode` calls yield them.
pub fn from_str_all(src: &str) -> Result<Vec<Value>, Error> {
    parse::unmarshal_all(src, parse::DecodeOptions::default())
}

/// go-yaml v2 `yaml.Marshal(v)` of a Go value: maps sorted with go-yaml's key order, block
/// style, final newline.
pub fn to_string(v: &Value) -> Result<String, Error> {
    to_string_with(v, KeyOrder::GoYaml)
}

/// [`to_string`] choosing the map order ([`KeyOrder::Insertion`] is go-yaml's `MapSlice`).
pub fn to_string_with(v: &Value, order: KeyOrder) -> Result<String, Error> {
    let mut e = emit::Emitter::new(order);
    e.document(v)?;
    e.finish()
}
