//! Digests as Flux computes them (OCI `go-digest` form, `<algorithm>:<lower-case hex>`).
//!
//! - [`config_digest`]: the digest of release values. Flux (`chartutil.DigestValues`) hashes
//!   the go-yaml v2 encoding of the values with keys sorted recursively; empty values hash
//!   the empty input. This module reproduces that encoding with `flotilla-yaml`'s go-yaml v2
//!   emitter (the JSON values become `sigs.k8s.io/yaml`'s YAML objects: integral numbers
//!   as ints, maps sorted by key bytes), so digests match the ones the Go controller writes
//!   to `status.history[].configDigest` and `status.lastAttemptedConfigDigest`.
//! - [`post_renderers_digest`] and [`common_metadata_digest`]: the digest of Go's
//!   `encoding/json` output (HTML-escaped, trailing newline) of those spec fields, or `""`
//!   when the field is unset.
//! - [`go_json_digest`]: the same encoding for any serializable value whose fields are
//!   declared in Go's field order; the snapshot digest of a release is this function
//!   applied to its [`crate::observation::Observation`].

use std::fmt;
use std::str::FromStr;

use flotilla_yaml::gojson::GoFormatter;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256, Sha384, Sha512};

use crate::ids::hex_lower;
use crate::spec::{CommonMetadata, PostRenderer};

/// The digest of empty input with SHA-256, Flux's config digest of empty values.
pub const EMPTY_SHA256: &str =
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// A supported digest algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// SHA-256 (Flux's default, `--snapshot-digest-algo=sha256`).
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
}

impl Algorithm {
    /// The algorithm's name in a digest string.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "sha256",
            Self::Sha384 => "sha384",
            Self::Sha512 => "sha512",
        }
    }

    fn hex_len(self) -> usize {
        match self {
            Self::Sha256 => 64,
            Self::Sha384 => 96,
            Self::Sha512 => 128,
        }
    }

    /// Hashes `bytes`.
    pub fn digest(self, bytes: &[u8]) -> Digest {
        let hex = match self {
            Self::Sha256 => hex_lower(&Sha256::digest(bytes)),
            Self::Sha384 => hex_lower(&Sha384::digest(bytes)),
            Self::Sha512 => hex_lower(&Sha512::digest(bytes)),
        };
        Digest {
            algorithm: self,
            hex,
        }
    }
}

/// Why a digest string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// No `algorithm:` prefix.
    #[error("invalid digest {0:?}: expected <algorithm>:<hex>")]
    Format(String),
    /// An algorithm this crate cannot compute (e.g. `blake3`, or the legacy `sha1`).
    #[error("invalid digest {0:?}: unsupported algorithm")]
    UnsupportedAlgorithm(String),
    /// The hex part has the wrong length or characters.
    #[error("invalid digest {0:?}: malformed hex")]
    Hex(String),
}

/// A content digest: `<algorithm>:<lower-case hex>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest {
    algorithm: Algorithm,
    hex: String,
}

impl Digest {
    /// Parses `<algorithm>:<hex>`.
    pub fn parse(s: &str) -> Result<Self, DigestError> {
        let (algo, hex) = s
            .split_once(':')
            .ok_or_else(|| DigestError::Format(s.to_owned()))?;
        let algorithm = match algo {
            "sha256" => Algorithm::Sha256,
            "sha384" => Algorithm::Sha384,
            "sha512" => Algorithm::Sha512,
            _ => return Err(DigestError::UnsupportedAlgorithm(s.to_owned())),
        };
        if hex.len() != algorithm.hex_len()
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(DigestError::Hex(s.to_owned()));
        }
        Ok(Self {
            algorithm,
            hex: hex.to_owned(),
        })
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The hex part.
    pub fn hex(&self) -> &str {
        &self.hex
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm.name(), self.hex)
    }
}

impl FromStr for Digest {
    type Err = DigestError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<String> for Digest {
    type Error = DigestError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.to_string()
    }
}

/// The text Flux hashes for a config digest: go-yaml v2 of the sorted values, or the
/// empty string for empty values.
pub fn canonical_values_yaml(values: &Value) -> String {
    match values {
        Value::Object(m) if !m.is_empty() => sorted_values_yaml(m),
        Value::Object(_) | Value::Null => String::new(),
        // Values are always a map in Helm; anything else is hashed under a placeholder
        // key-less document so the function stays total.
        other => {
            let mut m = Map::new();
            m.insert(String::new(), other.clone());
            sorted_values_yaml(&m)
        }
    }
}

/// go-yaml v2's `Marshal` of the `yaml.MapSlice` Flux builds: every map sorted by key bytes.
fn sorted_values_yaml(m: &Map<String, Value>) -> String {
    flotilla_yaml::to_string_with(&yaml_object(m), flotilla_yaml::KeyOrder::Insertion)
        // JSON values never nest deeper than the emitter allows (serde_json's own recursion
        // limit is lower) and hold no invalid UTF-8, so encoding cannot fail.
        .unwrap_or_default()
}

fn yaml_object(m: &Map<String, Value>) -> flotilla_yaml::Value {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    flotilla_yaml::Value::Map(
        keys.into_iter()
            .map(|k| (flotilla_yaml::Value::from(k.as_str()), yaml_value(&m[k])))
            .collect(),
    )
}

/// `sigs.k8s.io/yaml`'s `JSONObjectToYAMLObject` for one value: a float64 that is a whole
/// number becomes an int (a uint64 above int64's range), as go-yaml would read it back;
/// other floats are written with Go's `%g`.
fn yaml_value(v: &Value) -> flotilla_yaml::Value {
    use flotilla_yaml::Value as Y;
    match v {
        Value::Null => Y::Null,
        Value::Bool(b) => Y::Bool(*b),
        // Flux decodes values into `float64` first, so big integers lose precision there too.
        Value::Number(n) => whole_float(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Y::from(s.as_str()),
        Value::Array(items) => Y::Seq(items.iter().map(yaml_value).collect()),
        Value::Object(m) => yaml_object(m),
    }
}

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss
)]
fn whole_float(f: f64) -> flotilla_yaml::Value {
    use flotilla_yaml::Value as Y;
    if f.fract() == 0.0 {
        // 2^63 and 2^64 are exact in f64.
        let two_63 = -(i64::MIN as f64);
        if (-two_63..two_63).contains(&f) {
            return Y::Int(f as i64);
        }
        if (0.0..2.0 * two_63).contains(&f) {
            return Y::Uint(f as u64);
        }
    }
    Y::Float(f)
}

/// Flux's config digest of release values with SHA-256.
pub fn config_digest(values: &Value) -> Digest {
    config_digest_with(Algorithm::Sha256, values)
}

/// Flux's config digest of release values with the given algorithm.
pub fn config_digest_with(algorithm: Algorithm, values: &Value) -> Digest {
    algorithm.digest(canonical_values_yaml(values).as_bytes())
}

/// Flux's `VerifyValues`: re-hashes `values` with the algorithm named in `digest`.
/// An unparseable or unsupported digest never verifies.
pub fn verify_values(digest: &str, values: &Value) -> bool {
    match Digest::parse(digest) {
        Ok(d) => config_digest_with(d.algorithm(), values) == d,
        Err(_) => false,
    }
}

/// Go's `encoding/json.Encoder.Encode` output for `value`: HTML characters escaped,
/// U+2028/U+2029 escaped, Go float formatting, and a trailing newline. Struct fields come
/// out in declaration order; maps must be ordered (e.g. `BTreeMap`) to match Go's sorted
/// keys, and `serde_json::Value`s should be wrapped in [`SortedValue`] (their key order
/// depends on serde_json's `preserve_order` feature, which any crate in a build can turn
/// on).
pub fn go_json<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
    value.serialize(&mut ser)?;
    out.push(b'\n');
    Ok(out)
}

/// A `serde_json::Value` that serializes its objects with keys in byte order, as Go
/// encodes `map[string]interface{}`.
#[derive(Debug, Clone, Copy)]
pub struct SortedValue<'a>(pub &'a Value);

impl Serialize for SortedValue<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                let mut map = serializer.serialize_map(Some(keys.len()))?;
                for k in keys {
                    map.serialize_entry(k, &SortedValue(&m[k]))?;
                }
                map.end()
            }
            Value::Array(a) => {
                let mut seq = serializer.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(&SortedValue(v))?;
                }
                seq.end()
            }
            // Go decodes JSON numbers into float64 before encoding them again.
            Value::Number(n) => match n.as_f64() {
                Some(f) => serializer.serialize_f64(f),
                None => n.serialize(serializer),
            },
            other => other.serialize(serializer),
        }
    }
}

/// SHA-256 of [`go_json`]: the digest Flux computes for observations and spec fields.
pub fn go_json_digest<T: Serialize + ?Sized>(value: &T) -> Result<Digest, serde_json::Error> {
    Ok(Algorithm::Sha256.digest(&go_json(value)?))
}

/// `status.observedPostRenderersDigest` for `spec.postRenderers`: `""` when unset.
pub fn post_renderers_digest(post_renderers: Option<&Vec<PostRenderer>>) -> String {
    match post_renderers {
        None => String::new(),
        Some(p) => go_json_digest(p).map(|d| d.to_string()).unwrap_or_default(),
    }
}

/// `status.observedCommonMetadataDigest` for `spec.commonMetadata`: `""` when unset.
pub fn common_metadata_digest(common_metadata: Option<&CommonMetadata>) -> String {
    match common_metadata {
        None => String::new(),
        Some(c) => go_json_digest(c).map(|d| d.to_string()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[test]
    fn config_digest_matches_the_flux_chartutil_vector() {
        let v = json!({"replicas": 3, "image": {"tag": "latest", "repository": "nginx"},
            "ports": [{"protocol": "TCP", "port": 8080}, {"port": 9090, "protocol": "UDP"}]});
        assert_eq!(
            config_digest(&v).to_string(),
            "sha256:fcdc2b0de1581a3633ada4afee3f918f6eaa5b5ab38c3fef03d5b48d3f85d9f6"
        );
        assert!(verify_values(
            "sha256:fcdc2b0de1581a3633ada4afee3f918f6eaa5b5ab38c3fef03d5b48d3f85d9f6",
            &v
        ));
    }

    #[test]
    fn empty_values_digest_the_empty_input() {
        assert_eq!(config_digest(&json!({})).to_string(), EMPTY_SHA256);
        assert_eq!(config_digest(&Value::Null).to_string(), EMPTY_SHA256);
    }

    #[test]
    fn values_verify_with_the_algorithm_named_in_the_digest() {
        let v = json!({"a": 1});
        let d = config_digest_with(Algorithm::Sha512, &v);
        assert!(d.to_string().starts_with("sha512:"));
        assert!(verify_values(&d.to_string(), &v));
        assert!(!verify_values(&d.to_string(), &json!({"a": 2})));
        assert!(!verify_values("sha1:abc", &v));
        assert!(!verify_values("garbage", &v));
    }

    #[test]
    fn digests_parse_and_refuse_malformed_text() {
        assert!(Digest::parse(EMPTY_SHA256).is_ok());
        assert!(matches!(
            Digest::parse("sha256"),
            Err(DigestError::Format(_))
        ));
        assert!(matches!(
            Digest::parse("blake3:00"),
            Err(DigestError::UnsupportedAlgorithm(_))
        ));
        assert!(matches!(
            Digest::parse("sha256:ABCD"),
            Err(DigestError::Hex(_))
        ));
    }

    #[test]
    fn go_json_escapes_html_and_ends_with_a_newline() {
        let mut m = BTreeMap::new();
        m.insert("b", "<a&b>");
        m.insert("a", "x\u{2028}");
        assert_eq!(
            String::from_utf8(go_json(&m).unwrap()).unwrap(),
            "{\"a\":\"x\\u2028\",\"b\":\"\\u003ca\\u0026b\\u003e\"}\n"
        );
    }

    /// `tests/data/go_json_vectors.json` holds inputs and what Go's
    /// `json.NewEncoder(w).Encode` wrote for them (decoded into `interface{}` first).
    #[test]
    fn go_json_matches_go_encoding_json_vectors() {
        #[derive(serde::Deserialize)]
        struct V {
            input: Value,
            output: String,
        }
        let vectors: Vec<V> =
            serde_json::from_str(include_str!("../tests/data/go_json_vectors.json")).unwrap();
        assert!(!vectors.is_empty());
        for v in vectors {
            let ours = String::from_utf8(go_json(&SortedValue(&v.input)).unwrap()).unwrap();
            assert_eq!(ours, v.output);
        }
    }

    #[test]
    fn go_json_formats_floats_like_go() {
        let json = |f: f64| String::from_utf8(go_json(&f).unwrap()).unwrap();
        assert_eq!(json(1e21), "1e+21\n");
        assert_eq!(json(1e20), "100000000000000000000\n");
        assert_eq!(json(0.0000001), "1e-7\n");
        assert_eq!(json(0.5), "0.5\n");
        assert_eq!(json(0.0), "0\n");
    }

    #[test]
    fn unset_post_renderers_and_common_metadata_digest_to_empty() {
        assert_eq!(post_renderers_digest(None), "");
        assert_eq!(common_metadata_digest(None), "");
    }

    #[test]
    fn post_renderers_digest_hashes_the_go_json_of_the_list() {
        let prs: Vec<PostRenderer> = serde_json::from_value(json!([{"kustomize": {
            "patches": [{"patch": "- op: add", "target": {"kind": "Deployment", "name": "x"}}],
            "images": [{"name": "nginx", "newTag": "1.25"}]}}]))
        .unwrap();
        let text = String::from_utf8(go_json(&prs).unwrap()).unwrap();
        assert_eq!(
            text,
            "[{\"kustomize\":{\"patches\":[{\"patch\":\"- op: add\",\"target\":{\"kind\":\"Deployment\",\"name\":\"x\"}}],\"images\":[{\"name\":\"nginx\",\"newTag\":\"1.25\"}]}}]\n"
        );
        assert_eq!(
            post_renderers_digest(Some(&prs)),
            Algorithm::Sha256.digest(text.as_bytes()).to_string()
        );
    }

    #[test]
    fn empty_optional_strings_are_left_out_like_go_omitempty() {
        let with_empty: Vec<PostRenderer> = serde_json::from_value(json!([{"kustomize": {
            "images": [{"name": "nginx", "newName": "", "newTag": "1.25"}],
            "patches": [{"patch": "p", "target": {"kind": "Deployment", "name": ""}}]}}]))
        .unwrap();
        let without: Vec<PostRenderer> = serde_json::from_value(json!([{"kustomize": {
            "images": [{"name": "nginx", "newTag": "1.25"}],
            "patches": [{"patch": "p", "target": {"kind": "Deployment"}}]}}]))
        .unwrap();
        assert_eq!(
            post_renderers_digest(Some(&with_empty)),
            post_renderers_digest(Some(&without))
        );
    }

    #[test]
    fn common_metadata_digest_hashes_annotations_then_labels() {
        let cm: CommonMetadata = serde_json::from_value(
            json!({"labels": {"b": "2", "a": "1"}, "annotations": {"x": "y"}}),
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(go_json(&cm).unwrap()).unwrap(),
            "{\"annotations\":{\"x\":\"y\"},\"labels\":{\"a\":\"1\",\"b\":\"2\"}}\n"
        );
    }
}
