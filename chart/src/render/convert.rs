//! Conversions between the value models: `serde_json` values (what the chart crate computes),
//! template values ([`flotilla_gotmpl::Value`]) and the go-yaml model Helm's `toYaml` prints,
//! plus Go's `encoding/json` output for `toJson`.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use flotilla_gotmpl::value::MAX_VALUE_DEPTH;
use flotilla_gotmpl::{Map, MapType, Value};
use serde::ser::{Error as _, SerializeMap, SerializeSeq};

/// The Go type name of chart values (`common.Values`).
pub(crate) const VALUES_TYPE: &str = "common.Values";

/// JSON values as Go holds them once decoded: `float64` for JSON/YAML numbers, `int64` for
/// `--set` integers (kept as integers in `serde_json`).
pub(crate) fn json_to_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => {
            if n.is_f64() {
                Value::Float(n.as_f64().unwrap_or(0.0))
            } else if let Some(i) = n.as_i64() {
                Value::Int64(i)
            } else if let Some(u) = n.as_u64() {
                Value::Uint64(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(0.0))
            }
        }
        serde_json::Value::String(s) => Value::string(s),
        serde_json::Value::Array(items) => Value::list(items.iter().map(json_to_value).collect()),
        serde_json::Value::Object(m) => Value::Map(json_map_to_map(m)),
    }
}

/// [`json_to_value`] of a value the caller no longer needs: keys are moved, not copied.
pub(crate) fn json_into_value(v: serde_json::Value) -> Value {
    match v {
        serde_json::Value::Array(items) => {
            Value::list(items.into_iter().map(json_into_value).collect())
        }
        serde_json::Value::Object(m) => Value::Map(json_map_into_map(m)),
        other => json_to_value(&other),
    }
}

/// [`json_map_to_map`] of a map the caller no longer needs.
pub(crate) fn json_map_into_map(m: serde_json::Map<String, serde_json::Value>) -> Map {
    Map::from_entries(
        m.into_iter()
            .map(|(k, v)| (k, json_into_value(v)))
            .collect::<BTreeMap<_, _>>(),
    )
}

/// A JSON object as a `map[string]interface {}`.
pub(crate) fn json_map_to_map(m: &serde_json::Map<String, serde_json::Value>) -> Map {
    Map::from_entries(
        m.iter()
            .map(|(k, v)| (k.clone(), json_to_value(v)))
            .collect::<BTreeMap<_, _>>(),
    )
}

/// A JSON object as Helm's `common.Values`.
pub(crate) fn values_map(m: &serde_json::Map<String, serde_json::Value>) -> Map {
    json_map_to_map(m).with_type(MapType::Named(Arc::from(VALUES_TYPE)))
}

/// [`values_map`] of values the caller no longer needs.
pub(crate) fn into_values_map(m: serde_json::Map<String, serde_json::Value>) -> Map {
    json_map_into_map(m).with_type(MapType::Named(Arc::from(VALUES_TYPE)))
}

/// Why a value cannot be encoded (Go's `json.Marshal` errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EncodeError(pub(crate) String);

/// `json.Marshal(v)` followed by go-yaml reading it back, as the go-yaml model: what
/// `sigs.k8s.io/yaml.Marshal` hands its emitter.
pub(crate) fn value_to_yaml(v: &Value) -> Result<flotilla_yaml::Value, EncodeError> {
    to_yaml_at(v, Path::ThroughJson, 0)
}

/// A template value as go-yaml v3's encoder sees the Go value itself (`toYamlPretty`): no
/// JSON round trip, so ints stay ints, floats keep Go's `%g` form (`1e+06`), NaN and
/// infinities are written (`.nan`, `.inf`), and a `[]byte` is a sequence of numbers.
/// Objects are encoded through their text form or entries; structs are not modelled, and a
/// `time.Time` comes out quoted where go-yaml writes it plain (the YAML model has no
/// timestamp scalar).
pub(crate) fn value_to_go_yaml(v: &Value) -> Result<flotilla_yaml::Value, EncodeError> {
    to_yaml_at(v, Path::Direct, 0)
}

/// How a Go value reaches go-yaml.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    /// `sigs.k8s.io/yaml`: `encoding/json` first (finite floats only, `[]byte` as base64,
    /// objects through their JSON form).
    ThroughJson,
    /// go-yaml v3's encoder on the value itself.
    Direct,
}

fn to_yaml_at(v: &Value, path: Path, depth: usize) -> Result<flotilla_yaml::Value, EncodeError> {
    use flotilla_yaml::Value as Y;
    if depth > MAX_VALUE_DEPTH {
        return Err(EncodeError(match path {
            Path::ThroughJson => "json: unsupported value: encountered a cycle".to_string(),
            Path::Direct => format!("yaml: value nested deeper than {MAX_VALUE_DEPTH} levels"),
        }));
    }
    let seq = |items: &[Value]| -> Result<Y, EncodeError> {
        items
            .iter()
            .map(|x| to_yaml_at(x, path, depth + 1))
            .collect::<Result<_, _>>()
            .map(Y::Seq)
    };
    let map = |entries: Vec<(String, Value)>| -> Result<Y, EncodeError> {
        let mut out = flotilla_yaml::Mapping::new();
        for (k, x) in entries {
            out.insert(Y::String(k), to_yaml_at(&x, path, depth + 1)?);
        }
        Ok(Y::Map(out))
    };
    Ok(match v {
        Value::Nil => Y::Null,
        Value::Bool(b) => Y::Bool(*b),
        Value::Int(i) | Value::Int64(i) => Y::Int(*i),
        Value::Uint64(u) => match i64::try_from(*u) {
            Ok(i) => Y::Int(i),
            Err(_) => Y::Uint(*u),
        },
        Value::Uint8(u) => Y::Int(i64::from(*u)),
        Value::Float(f) if path == Path::ThroughJson && !f.is_finite() => {
            return Err(EncodeError(format!(
                "json: unsupported value: {}",
                flotilla_gotmpl::gofmt::format_float(*f, 'g', None)
            )));
        }
        Value::Float(f) => Y::Float(*f),
        Value::String(s) => Y::String(s.to_string()),
        // encoding/json (the path Helm's `toYaml` takes) writes U+FFFD for invalid UTF-8.
        Value::RawString(b) => Y::String(String::from_utf8_lossy(b).into_owned()),
        Value::Bytes(b) => match path {
            Path::ThroughJson => Y::String(base64::engine::general_purpose::STANDARD.encode(b)),
            Path::Direct => Y::Seq(b.iter().map(|x| Y::Int(i64::from(*x))).collect()),
        },
        Value::List(l) => seq(l.items())?,
        Value::Map(m) => map(m.entries())?,
        Value::Object(o) => match path {
            Path::ThroughJson => match (o.marshal(), o.map_entries()) {
                (Some(m), _) => to_yaml_at(&m, path, depth + 1)?,
                (None, Some(entries)) => map(entries)?,
                (None, None) => {
                    return Err(EncodeError(format!(
                        "json: unsupported type: {}",
                        o.type_name()
                    )));
                }
            },
            Path::Direct => {
                if let Some(entries) = o.map_entries() {
                    map(entries)?
                } else if let Some(items) = o.list_items() {
                    seq(&items)?
                } else if let Some(Value::String(s)) = o.marshal() {
                    // time.Time (RFC 3339 with nanoseconds) and text marshalers.
                    Y::String(s.to_string())
                } else {
                    return Err(EncodeError(format!(
                        "cannot marshal type: {}",
                        o.type_name()
                    )));
                }
            }
        },
    })
}

/// A template value serialised the way Go's `encoding/json` sees it.
pub(crate) struct GoJson<'a>(pub(crate) &'a Value, pub(crate) usize);

impl serde::Serialize for GoJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let depth = self.1;
        if depth > MAX_VALUE_DEPTH {
            return Err(S::Error::custom(
                "json: unsupported value: encountered a cycle",
            ));
        }
        match self.0 {
            Value::Nil => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Int(i) | Value::Int64(i) => s.serialize_i64(*i),
            Value::Uint64(u) => s.serialize_u64(*u),
            Value::Uint8(u) => s.serialize_u8(*u),
            Value::Float(f) => s.serialize_f64(*f),
            Value::String(x) => s.serialize_str(x),
            // Written by `GoFormatter::write_byte_array`: a JSON string, each byte of an
            // invalid UTF-8 sequence `\ufffd`, as encoding/json writes it.
            Value::RawString(b) => s.serialize_bytes(b),
            Value::Bytes(b) => {
                s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b))
            }
            Value::List(l) => {
                let mut seq = s.serialize_seq(Some(l.len()))?;
                for x in l.items() {
                    seq.serialize_element(&GoJson(x, depth + 1))?;
                }
                seq.end()
            }
            Value::Map(m) => {
                let entries = m.entries();
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, x) in &entries {
                    map.serialize_entry(k, &GoJson(x, depth + 1))?;
                }
                map.end()
            }
            Value::Object(o) => match (o.marshal(), o.map_entries()) {
                (Some(m), _) => GoJson(&m, depth + 1).serialize(s),
                (None, Some(entries)) => {
                    let mut map = s.serialize_map(Some(entries.len()))?;
                    for (k, x) in &entries {
                        map.serialize_entry(k, &GoJson(x, depth + 1))?;
                    }
                    map.end()
                }
                (None, None) => Err(S::Error::custom(format!(
                    "json: unsupported type: {}",
                    o.type_name()
                ))),
            },
        }
    }
}

/// Go's `json.Marshal(v)` as text.
pub(crate) fn go_json(v: &Value) -> Result<String, String> {
    flotilla_yaml::gojson::to_string(&GoJson(v, 0)).map_err(|e| e.to_string())
}

/// Decodes JSON text as Go's `json.Unmarshal` into `interface{}` (numbers are `float64`),
/// with Go's error wording for the common cases.
pub(crate) fn go_json_decode(text: &str) -> Result<Value, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => Ok(json_to_value_floats(&v)),
        Err(e) => Err(go_json_error(text, &e)),
    }
}

fn json_to_value_floats(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::Array(items) => {
            Value::list(items.iter().map(json_to_value_floats).collect())
        }
        serde_json::Value::Object(m) => Value::Map(Map::from_entries(
            m.iter()
                .map(|(k, v)| (k.clone(), json_to_value_floats(v)))
                .collect(),
        )),
        other => json_to_value(other),
    }
}

/// Go's `encoding/json` messages for the usual syntax errors.
fn go_json_error(text: &str, e: &serde_json::Error) -> String {
    if text.trim().is_empty() || e.is_eof() {
        return "unexpected end of JSON input".to_string();
    }
    // Locate the offending byte from serde's line/column.
    let mut offset = 0usize;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if i + 1 == e.line() {
            offset += e.column().saturating_sub(1);
            break;
        }
        offset += line.len();
    }
    let c = text[offset.min(text.len())..].chars().next();
    match c {
        Some(c) => {
            let shown = match c {
                '\'' => "'\\''".to_string(),
                '"' => "'\"'".to_string(),
                c if c.is_control() => format!("'\\x{:02x}'", c as u32),
                c => format!("'{c}'"),
            };
            if e.classify() == serde_json::error::Category::Syntax
                && e.to_string().starts_with("trailing characters")
            {
                format!("invalid character {shown} after top-level value")
            } else {
                format!("invalid character {shown} looking for beginning of value")
            }
        }
        None => "unexpected end of JSON input".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_integers_stay_int64_and_yaml_numbers_float64() {
        let v = json_to_value(&serde_json::json!({"a": 1.0, "b": 2}));
        let m = v.as_map().expect("map");
        assert_eq!(m.get("a").expect("a").type_name(), "float64");
        assert_eq!(m.get("b").expect("b").type_name(), "int64");
    }

    #[test]
    fn go_json_sorts_keys_and_escapes_html() {
        let v = json_to_value(&serde_json::json!({"b": "<x>", "a": 1.5, "c": 3.0}));
        assert_eq!(
            go_json(&v).expect("encodes"),
            r#"{"a":1.5,"b":"\u003cx\u003e","c":3}"#
        );
        assert_eq!(go_json(&Value::Nil).expect("null"), "null");
    }

    #[test]
    fn json_decode_errors_read_like_go() {
        assert_eq!(
            go_json_decode("").unwrap_err(),
            "unexpected end of JSON input"
        );
        assert_eq!(
            go_json_decode("x").unwrap_err(),
            "invalid character 'x' looking for beginning of value"
        );
    }
}
