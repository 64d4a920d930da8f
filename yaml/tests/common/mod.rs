//! Helpers shared by the integration tests.

#![allow(dead_code)]

use flotilla_yaml::{Value, go_format_json_float};
use std::path::{Path, PathBuf};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Go's `encoding/json.Marshal` of the value (Helm's `toJson`): keys sorted byte-wise,
/// HTML-safe escapes, Go float formatting.
pub fn go_json(v: &Value) -> Option<String> {
    let mut out = String::new();
    go_json_into(v, &mut out)?;
    Some(out)
}

fn go_json_into(v: &Value, out: &mut String) -> Option<()> {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Uint(u) => out.push_str(&u.to_string()),
        Value::Float(f) => out.push_str(&go_format_json_float(*f)?),
        Value::String(s) => json_string(s, out),
        Value::Bytes(b) => json_string(&String::from_utf8_lossy(b), out),
        Value::Seq(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                go_json_into(item, out)?;
            }
            out.push(']');
        }
        Value::Map(m) => {
            let mut entries: Vec<(&str, &Value)> = m
                .iter()
                .map(|(k, v)| (k.as_str().unwrap_or(""), v))
                .collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (n, (k, v)) in entries.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                json_string(k, out);
                out.push(':');
                go_json_into(v, out)?;
            }
            out.push('}');
        }
    }
    Some(())
}

/// Helm's `fromYaml`: the map, or `{"Error": message}`.
pub fn helm_from_yaml(src: &str) -> Value {
    Value::Map(flotilla_yaml::helm::from_yaml(src))
}

/// Helm's `fromYamlArray`: the list, or `[message]`.
pub fn helm_from_yaml_array(src: &str) -> Value {
    Value::Seq(flotilla_yaml::helm::from_yaml_array(src))
}

/// Helm's `toYaml`: errors print as the empty string.
pub fn helm_to_yaml(v: &Value) -> String {
    flotilla_yaml::helm::to_yaml(v)
}
