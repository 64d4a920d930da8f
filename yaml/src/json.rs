//! The `sigs.k8s.io/yaml` layer Helm goes through: YAML → JSON → Go values on input
//! (`Unmarshal`), Go values → JSON → go-yaml v2 on output (`Marshal`, Helm's `toYaml`).
//!
//! Nothing here writes JSON text: the JSON round trip is applied to [`Value`]s directly, with
//! Go's rules for what survives it.

use crate::goformat::{format_g, format_json_float, go_sharp_v};
use crate::resolve::{self, Resolved};
use crate::{Error, Mapping, Value};

/// A string-keyed mapping under construction: a repeated key replaces the value in place
/// (Go map semantics). Small mappings are searched in place; a hash index of the keys is
/// built once a mapping grows past [`KeyedMap::LINEAR`] entries.
#[derive(Default)]
struct KeyedMap {
    entries: Vec<(String, Value)>,
    index: Option<std::collections::HashMap<String, usize>>,
}

impl KeyedMap {
    /// Entries searched one by one before the index is built.
    const LINEAR: usize = 16;

    fn insert(&mut self, key: String, value: Value) {
        let found = match &self.index {
            Some(index) => index.get(&key).copied(),
            None => self.entries.iter().position(|(k, _)| *k == key),
        };
        if let Some(i) = found {
            if let Some(slot) = self.entries.get_mut(i) {
                slot.1 = value;
            }
            return;
        }
        if let Some(index) = &mut self.index {
            index.insert(key.clone(), self.entries.len());
        }
        self.entries.push((key, value));
        if self.index.is_none() && self.entries.len() > Self::LINEAR {
            self.index = Some(
                self.entries
                    .iter()
                    .enumerate()
                    .map(|(i, (k, _))| (k.clone(), i))
                    .collect(),
            );
        }
    }

    fn finish(self) -> Mapping {
        Mapping::from_entries_unchecked(
            self.entries
                .into_iter()
                .map(|(k, v)| (Value::String(k), v))
                .collect(),
        )
    }
}

/// Go's handling of invalid UTF-8 when it converts bytes to runes or writes JSON: each invalid
/// byte becomes U+FFFD.
pub(crate) fn go_lossy_utf8(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    let mut rest = b;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                break;
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(good).unwrap_or_default());
                out.push('\u{FFFD}');
                rest = bad.get(1..).unwrap_or_default();
            }
        }
    }
    out
}

fn unsupported_float(f: f64) -> Error {
    Error::raw(format!("json: unsupported value: {}", format_g(f, false)))
}

/// `convertToJSONableObject` followed by `json.Marshal` and `json.Unmarshal` into
/// `interface{}`: keys become strings, every number a float64.
fn yaml_to_json_value(v: Value) -> Result<Value, Error> {
    Ok(match v {
        Value::Int(i) =>
        {
            #[allow(clippy::cast_precision_loss)]
            Value::Float(i as f64)
        }
        Value::Uint(u) =>
        {
            #[allow(clippy::cast_precision_loss)]
            Value::Float(u as f64)
        }
        // Non-finite floats are refused by `json.Marshal`, in its (sorted) order: see
        // `check_finite`.
        Value::Float(f) => Value::Float(f),
        Value::Bytes(b) => Value::String(go_lossy_utf8(&b)),
        Value::Seq(items) => Value::Seq(
            items
                .into_iter()
                .map(yaml_to_json_value)
                .collect::<Result<_, _>>()?,
        ),
        // String keys are unique already (the decoder merged repeats): no index needed.
        Value::Map(m) if m.keys().all(|k| matches!(k, Value::String(_))) => {
            Value::Map(Mapping::from_entries_unchecked(
                m.into_iter()
                    .map(|(k, v)| Ok((k, yaml_to_json_value(v)?)))
                    .collect::<Result<Vec<_>, Error>>()?,
            ))
        }
        Value::Map(m) => {
            let mut out = KeyedMap::default();
            for (k, v) in m {
                let key = match &k {
                    Value::String(s) => s.clone(),
                    Value::Bytes(b) => go_lossy_utf8(b),
                    Value::Int(i) => i.to_string(),
                    Value::Float(f) => {
                        let s = format_g(*f, true);
                        match s.as_str() {
                            "+Inf" => ".inf".to_owned(),
                            "-Inf" => "-.inf".to_owned(),
                            "NaN" => ".nan".to_owned(),
                            _ => s,
                        }
                    }
                    Value::Bool(b) => b.to_string(),
                    other => {
                        return Err(Error::raw(format!(
                            "unsupported map key of type: {}, key: {}, value: {}",
                            match other {
                                Value::Null => "%!s(<nil>)",
                                o => o.go_type_name(),
                            },
                            go_sharp_v(other, false),
                            go_sharp_v(&v, false),
                        )));
                    }
                };
                out.insert(key, yaml_to_json_value(v)?);
            }
            Value::Map(out.finish())
        }
        other => other,
    })
}

/// The error `json.Marshal` gives for the first NaN or infinity it meets: it walks maps in
/// byte-wise key order.
fn check_finite(v: &Value) -> Result<(), Error> {
    // Almost every document has no such float: find that out without ordering any map.
    fn all_finite(v: &Value) -> bool {
        match v {
            Value::Float(f) => f.is_finite(),
            Value::Seq(items) => items.iter().all(all_finite),
            Value::Map(m) => m.iter().all(|(_, v)| all_finite(v)),
            _ => true,
        }
    }
    if all_finite(v) {
        return Ok(());
    }
    match v {
        Value::Float(f) if !f.is_finite() => Err(unsupported_float(*f)),
        Value::Seq(items) => items.iter().try_for_each(check_finite),
        Value::Map(m) => {
            let mut entries: Vec<(&Value, &Value)> = m.iter().collect();
            entries.sort_by_key(|e| json_key(e.0));
            entries.into_iter().try_for_each(|(_, v)| check_finite(v))
        }
        _ => Ok(()),
    }
}

fn json_key(k: &Value) -> Vec<u8> {
    match k {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Bytes(b) => go_lossy_utf8(b).into_bytes(),
        _ => Vec::new(),
    }
}

/// `sigs.k8s.io/yaml.Unmarshal(y, &interface{})`: go-yaml v2 reads the first document, keys
/// are turned into strings and every number into a float64 by the JSON round trip. Errors
/// read `error converting YAML to JSON: yaml: line N: ...`.
pub fn unmarshal(src: &str) -> Result<Value, Error> {
    let v = crate::parse::unmarshal(src, crate::parse::DecodeOptions::default())
        .map_err(|e| e.wrap("error converting YAML to JSON"))?;
    let j = yaml_to_json_value(v).map_err(|e| e.wrap("error converting YAML to JSON"))?;
    check_finite(&j).map_err(|e| e.wrap("error converting YAML to JSON"))?;
    Ok(j)
}

/// [`unmarshal`] for raw bytes (go-yaml's reader errors on invalid UTF-8).
pub fn unmarshal_bytes(src: &[u8]) -> Result<Value, Error> {
    let s = crate::parse::bytes_to_str(src).map_err(|e| e.wrap("error converting YAML to JSON"))?;
    unmarshal(s)
}

/// `sigs.k8s.io/yaml.YAMLToJSON` as a value: the JSON-able form (string keys, float
/// numbers) of the first document.
pub fn yaml_to_json(src: &str) -> Result<Value, Error> {
    let v = crate::parse::unmarshal(src, crate::parse::DecodeOptions::default())?;
    let j = yaml_to_json_value(v)?;
    check_finite(&j)?;
    Ok(j)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Seq(_) => "array",
        Value::Map(_) => "object",
        Value::String(_) | Value::Bytes(_) => "string",
        Value::Bool(_) => "bool",
        _ => "number",
    }
}

/// `sigs.k8s.io/yaml.Unmarshal` into `map[string]interface{}` (Helm's values files and
/// `fromYaml`). A null document is an empty map.
pub fn unmarshal_map(src: &str) -> Result<Mapping, Error> {
    match unmarshal(src)? {
        Value::Null => Ok(Mapping::new()),
        Value::Map(m) => Ok(m),
        other => Err(Error::raw(format!(
            "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            json_kind(&other)
        ))),
    }
}

/// `sigs.k8s.io/yaml.Unmarshal` into `[]interface{}` (Helm's `fromYamlArray`). A null
/// document is an empty list.
pub fn unmarshal_seq(src: &str) -> Result<Vec<Value>, Error> {
    match unmarshal(src)? {
        Value::Null => Ok(Vec::new()),
        Value::Seq(s) => Ok(s),
        other => Err(Error::raw(format!(
            "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {} into Go value of type []interface {{}}",
            json_kind(&other)
        ))),
    }
}

/// What a value becomes after `json.Marshal` and go-yaml v2 reading the JSON back
/// (`JSONToYAML`'s decode step): integral-looking numbers are ints, others floats; keys must
/// be strings. Strings are moved, not copied, unless folding changes them.
fn json_round_trip(v: Value) -> Result<Value, Error> {
    Ok(match v {
        Value::Null => Value::Null,
        Value::Bool(b) => Value::Bool(b),
        Value::Int(i) => Value::Int(i),
        Value::Uint(u) => match i64::try_from(u) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Uint(u),
        },
        Value::Float(f) => {
            let text = format_json_float(f)
                .ok_or_else(|| unsupported_float(f).wrap("error marshaling into JSON"))?;
            match resolve::resolve_plain(&text) {
                Resolved::Int(i) => Value::Int(i),
                Resolved::Uint(u) => Value::Uint(u),
                Resolved::Float(g) => Value::Float(g),
                _ => Value::Float(f),
            }
        }
        Value::String(s) => {
            check_json_text(&s)?;
            Value::String(fold_nel_owned(s))
        }
        Value::Bytes(b) => Value::String(fold_nel(&go_lossy_utf8(&b))),
        Value::Seq(items) => Value::Seq(
            items
                .into_iter()
                .map(json_round_trip)
                .collect::<Result<_, _>>()?,
        ),
        Value::Map(m) => {
            let mut out = KeyedMap::default();
            for (k, v) in m {
                let key = match k {
                    Value::String(s) => {
                        check_json_text(&s)?;
                        check_json_key_length(&s)?;
                        fold_nel_owned(s)
                    }
                    Value::Bytes(b) => fold_nel(&go_lossy_utf8(&b)),
                    _ => {
                        return Err(Error::raw(
                            "error marshaling into JSON: json: unsupported type: map[interface {}]interface {}",
                        ));
                    }
                };
                out.insert(key, json_round_trip(v)?);
            }
            Value::Map(out.finish())
        }
    })
}

/// [`fold_nel`] keeping the string when there is nothing to fold.
fn fold_nel_owned(s: String) -> String {
    if !s.as_bytes().contains(&0x85) || !s.contains('\u{85}') {
        return s;
    }
    fold_nel(&s)
}

/// Go's JSON encoder writes U+0085 (NEL) raw; go-yaml then reads it inside a double-quoted
/// scalar as a line break and folds it: spaces around the break vanish, one break becomes a
/// space, `n` consecutive breaks become `n - 1` newlines.
fn fold_nel(s: &str) -> String {
    if !s.as_bytes().contains(&0x85) || !s.contains('\u{85}') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    let mut pending_spaces = String::new();
    while let Some(c) = chars.next() {
        match c {
            ' ' => pending_spaces.push(' '),
            '\u{85}' => {
                pending_spaces.clear();
                let mut breaks = 1;
                while let Some(&n) = chars.peek() {
                    match n {
                        ' ' => {
                            chars.next();
                        }
                        '\u{85}' => {
                            breaks += 1;
                            chars.next();
                        }
                        _ => break,
                    }
                }
                if breaks == 1 {
                    out.push(' ');
                } else {
                    for _ in 1..breaks {
                        out.push('\n');
                    }
                }
            }
            c => {
                out.push_str(&pending_spaces);
                pending_spaces.clear();
                out.push(c);
            }
        }
    }
    out.push_str(&pending_spaces);
    out
}

/// go-yaml reads the JSON back with libyaml, which forgets a possible simple key once it is
/// more than 1024 characters behind: a key whose JSON form (quotes and escapes included) is
/// longer than that cannot be read back.
fn check_json_key_length(s: &str) -> Result<(), Error> {
    let mut len = 2usize;
    for c in s.chars() {
        len += match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => 6,
            c if u32::from(c) < 0x20 => 6,
            _ => 1,
        };
    }
    if len > 1024 {
        return Err(Error::yaml(None, "did not find expected ',' or '}'"));
    }
    Ok(())
}

/// Characters Go's JSON encoder writes raw that go-yaml's reader then refuses.
fn check_json_text(s: &str) -> Result<(), Error> {
    let bad = if s.is_ascii() {
        memchr::memchr(0x7F, s.as_bytes()).is_some()
    } else {
        s.chars().any(|c| {
            let v = u32::from(c);
            v == 0x7F || (0x80..=0x9F).contains(&v) && v != 0x85 || v == 0xFFFE || v == 0xFFFF
        })
    };
    if bad {
        return Err(Error::yaml(None, "control characters are not allowed"));
    }
    Ok(())
}

/// `sigs.k8s.io/yaml.Marshal(v)`: the YAML Helm's `toYaml` prints (before Helm trims the
/// final newline). `v` stands for the Go value handed to `json.Marshal`: maps must have
/// string keys, NaN and infinities are refused.
pub fn marshal(v: &Value) -> Result<String, Error> {
    marshal_owned(v.clone())
}

/// [`marshal`] of a value the caller no longer needs (its strings are reused).
pub fn marshal_owned(v: Value) -> Result<String, Error> {
    check_finite(&v).map_err(|e| e.wrap("error marshaling into JSON"))?;
    let j = json_round_trip(v)?;
    crate::to_string(&j)
}

/// Helm's `toYaml`: [`marshal`] with one trailing newline removed. Helm turns an error into
/// an empty string; callers decide.
pub fn helm_to_yaml(v: &Value) -> Result<String, Error> {
    helm_to_yaml_owned(v.clone())
}

/// [`helm_to_yaml`] of a value the caller no longer needs (its strings are reused).
pub fn helm_to_yaml_owned(v: Value) -> Result<String, Error> {
    let mut s = marshal_owned(v)?;
    if s.ends_with('\n') {
        s.pop();
    }
    Ok(s)
}
