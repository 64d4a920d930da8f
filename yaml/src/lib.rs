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
//! - [`to_string_v3`]: a go-yaml v3 `yaml.Encoder` (Helm's `toYamlPretty`, kyaml's output).
//! - [`gojson`]: JSON text as Go's `encoding/json` writes it (a `serde_json` formatter), for
//!   Helm's `toJson` and Flux's digests.
//! - [`helm`]: Helm's `toYaml`, `mustToYaml`, `fromYaml`, `fromYamlArray` as Helm shapes them
//!   (errors as values).
//!
//! How reading works: `saphyr-parser` (a maintained pure-Rust YAML 1.2 scanner/parser)
//! supplies events with scalar styles, tags and positions; this crate builds go-yaml v2's node
//! tree from them and decodes it with go-yaml v2's rules (`resolve.go`, `decode.go`). Where
//! saphyr's YAML 1.2 scanner and libyaml's YAML 1.1 scanner disagree, the differences known
//! from differential testing are smoothed over: the input is rewritten where libyaml accepts
//! what saphyr refuses (tab separators, `#` right after a quote, `\'` escapes, unindented
//! continuation lines, `-` before a flow indicator, anchor names ending at `:`), and libyaml's
//! own rules are checked where saphyr is laxer (the 1024-character simple-key limit, stale
//! multi-line flow keys, `\/` escapes, anchor name characters, tokens that cannot start with
//! `@`, `` ` ``, `%`). Error texts are go-yaml's, with its line numbering (1-based for scanner
//! errors, 0-based for parser errors, none on the first line).
//!
//! How writing works: a port of go-yaml's encoder and libyaml emitter state (indentation,
//! `whitespace`/`indention` flags, 80-column folding, `analyze_scalar` and style selection,
//! key order from `sorter.go` run through Go's pdqsort so even its non-transitive cases sort
//! as Go sorts them), plus the JSON round trip `sigs.k8s.io/yaml` adds. go-yaml v2 and v3
//! share that emitter and differ in a few decisions (indentation of sequences in mappings,
//! no folding in v3, tabs, one key-order rule), kept as one code path with a flavour.
//!
//! Fidelity, measured against the real helm binary (see `tests/`): every document of the
//! shared chart corpus goldens (1175) and every YAML file of those charts (545) gives
//! byte-identical `fromYaml | toJson` and `fromYaml | toYaml`; so do the fixture chart's 268
//! `toYaml` and 239 `fromYaml` cases, 400 random documents and 400 random values. Error texts
//! match helm for 291 of 300 randomly mutated documents (the rest are listed in
//! `tests/helm_fixture.rs`).
//!
//! Inputs are bounded: nesting deeper than [`MAX_DEPTH`] and alias expansion beyond go-yaml's
//! ratio are errors, never a crash.
//!
//! Known gaps: raw U+2028 and U+2029 are line breaks to libyaml (YAML 1.1) but not to saphyr,
//! so documents containing them unescaped may read differently (escaped forms are fine; raw
//! U+0085 is handled); a tab on the last line after a block scalar is accepted; `?x` inside a
//! flow collection is a plain scalar here, a key to libyaml; some malformed documents fail
//! with a different message or line than go-yaml's (about 4–6% of random mutations); map key
//! sorting classifies non-ASCII letters and digits with Rust's Unicode properties, close to
//! but not exactly Go's `unicode.IsLetter`/`IsDigit`; nesting is limited to [`MAX_DEPTH`]
//! (go-yaml v2 has no limit); each rewrite re-reads the input, so their number is bounded
//! (a few hundred to 2000, by input size) and an input needing more fails.
//! go-yaml v3 output ([`to_string_v3`], Helm's `toYamlPretty`) matches helm v4.1.4 on all 268
//! fixture values (`tests/helm_fixture.rs`, 65 of them printed differently from v2) and on
//! template literals, byte slices and objects (`chart`'s `pretty` render fixture).
//!
//! Not here: go-yaml v3's decoder and `yaml.Node` (comments, anchors, explicit styles), Go's
//! `time.Time` (go-yaml writes it plain; passed as a string it comes out quoted) and
//! `float32` values, Go structs.

mod block;
mod emit;
mod error;
mod goformat;
pub mod gojson;
mod head;
pub mod helm;
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

/// For differential tests and fuzzing: the two ways [`from_str`] reads a document.
#[doc(hidden)]
pub mod testing {
    use crate::{Error, Value};

    /// The block-style fast path alone: `None` when the document is outside its subset.
    pub fn fast_path(src: &str) -> Option<Value> {
        crate::block::block_value(src)
    }

    /// The full parser alone.
    pub fn full_parser(src: &str) -> Result<Value, Error> {
        crate::parse::unmarshal_parsed(src, crate::parse::DecodeOptions::default())
    }
}

/// The `sigs.k8s.io/yaml` functions Helm calls.
pub mod sigs {
    pub use crate::json::{
        helm_to_yaml, helm_to_yaml_owned, marshal, marshal_owned, unmarshal, unmarshal_bytes,
        unmarshal_map, unmarshal_seq, yaml_to_json,
    };
}

/// go-yaml v2 `yaml.Unmarshal(src, &interface{})`: the first document (`Null` for an empty
/// stream), with ints, floats and non-string keys as go-yaml produces them. Repeated keys:
/// the last value wins, in the first key's position.
pub fn from_str(src: &str) -> Result<Value, Error> {
    parse::unmarshal(src, parse::DecodeOptions::default())
}

/// [`from_str`] for a reader of a few top-level keys (Helm's `SimpleHead`): the whole first
/// document is parsed and any error [`from_str`] would give is given, but when the document
/// is a mapping whose decoding cannot fail (no aliases, explicit tags or merge keys), only
/// the pairs whose key is one of `keys` are decoded into the returned mapping.
pub fn from_str_keys(src: &str, keys: &[&str]) -> Result<Value, Error> {
    parse::unmarshal_keys(src, keys)
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

/// Settings of a go-yaml v3 `yaml.Encoder`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V3Options {
    /// `SetIndent(n)`: `0` is go-yaml's default of 4; values outside `2..=9` become 2, as
    /// libyaml clamps them.
    pub indent: u8,
    /// `CompactSeqIndent()`: a block sequence that is a mapping value starts at the key's
    /// column (`key:\n- a`) instead of one indent further.
    pub compact_seq_indent: bool,
    /// Map order: [`KeyOrder::GoYaml`] is what encoding a Go map does (v3's `keyList`).
    pub order: KeyOrder,
}

impl Default for V3Options {
    fn default() -> Self {
        V3Options {
            indent: 4,
            compact_seq_indent: false,
            order: KeyOrder::GoYaml,
        }
    }
}

/// go-yaml v3: `yaml.NewEncoder(w)` with `opts`, then one `Encode(v)` of a Go value: block
/// style, no line folding, final newline. Helm's `toYamlPretty` is this with indent 2
/// ([`helm::to_yaml_pretty`]); kustomize's kyaml output is indent 2 with compact sequences.
pub fn to_string_v3(v: &Value, opts: V3Options) -> Result<String, Error> {
    let indent = if opts.indent == 0 { 4 } else { opts.indent };
    let flavor = emit::Flavor::V3 {
        indent,
        compact_seq: opts.compact_seq_indent,
    };
    let mut e = emit::Emitter::with_flavor(flavor, opts.order);
    e.document(v)?;
    e.finish()
}
