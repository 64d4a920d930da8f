//! Helm's `toToml` (BurntSushi/toml's encoder layout: plain keys first, then tables, nested
//! tables indented two spaces per level, floats always with a decimal point) and `fromToml`.

use flotilla_gotmpl::{Map, Value};

/// `toToml v`: the TOML text, or the encoder's error text (Helm returns it as the result).
pub(crate) fn encode(v: &Value) -> Result<String, String> {
    let Some(m) = as_table(v) else {
        return Err("toml: top-level values must be Go maps or structs".to_string());
    };
    let mut enc = Encoder::default();
    enc.map(&[], &m)?;
    Ok(enc.out)
}

#[derive(Default)]
struct Encoder {
    out: String,
}

fn as_table(v: &Value) -> Option<Vec<(String, Value)>> {
    match v {
        Value::Map(m) => Some(m.entries()),
        Value::Object(o) => o.map_entries(),
        _ => None,
    }
}

fn is_table_array(v: &Value) -> bool {
    match v {
        Value::List(l) => !l.is_empty() && l.items().iter().all(|x| as_table(x).is_some()),
        _ => false,
    }
}

fn bare(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn key_part(k: &str) -> String {
    if bare(k) { k.to_string() } else { quote(k) }
}

fn key_path(key: &[String]) -> String {
    key.iter()
        .map(|k| key_part(k))
        .collect::<Vec<_>>()
        .join(".")
}

fn indent(key: &[String]) -> String {
    "  ".repeat(key.len().saturating_sub(1))
}

impl Encoder {
    fn newline(&mut self) {
        if !self.out.is_empty() {
            self.out.push('\n');
        }
    }

    fn map(&mut self, key: &[String], entries: &[(String, Value)]) -> Result<(), String> {
        let (mut direct, mut sub): (Vec<_>, Vec<_>) = entries
            .iter()
            .filter(|(_, v)| !v.is_nil())
            .partition(|(_, v)| as_table(v).is_none() && !is_table_array(v));
        direct.sort_by(|a, b| a.0.cmp(&b.0));
        sub.sort_by(|a, b| a.0.cmp(&b.0));
        for (k, v) in direct.into_iter().chain(sub) {
            let mut child = key.to_vec();
            child.push(k.clone());
            self.encode(&child, v)?;
        }
        Ok(())
    }

    fn encode(&mut self, key: &[String], v: &Value) -> Result<(), String> {
        if let Some(entries) = as_table(v) {
            if key.len() == 1 {
                self.newline();
            }
            self.out
                .push_str(&format!("{}[{}]", indent(key), key_path(key)));
            self.newline();
            return self.map(key, &entries);
        }
        if is_table_array(v) {
            for item in v.as_list().map(|l| l.to_vec()).unwrap_or_default() {
                let entries = as_table(&item).unwrap_or_default();
                self.newline();
                self.out
                    .push_str(&format!("{}[[{}]]", indent(key), key_path(key)));
                self.newline();
                self.map(key, &entries)?;
            }
            return Ok(());
        }
        let last = key.last().map(|k| key_part(k)).unwrap_or_default();
        self.out.push_str(&format!("{}{} = ", indent(key), last));
        let text = element(v)?;
        self.out.push_str(&text);
        self.newline();
        Ok(())
    }
}

fn element(v: &Value) -> Result<String, String> {
    Ok(match v {
        Value::Bool(b) => b.to_string(),
        Value::Int(i) | Value::Int64(i) => i.to_string(),
        Value::Uint64(u) => u.to_string(),
        Value::Uint8(u) => u.to_string(),
        Value::Float(f) => {
            if f.is_nan() {
                "nan".to_string()
            } else if f.is_infinite() {
                if *f > 0.0 { "inf" } else { "-inf" }.to_string()
            } else {
                let s = flotilla_gotmpl::gofmt::format_float(*f, 'f', None);
                if s.contains('.') { s } else { format!("{s}.0") }
            }
        }
        Value::String(s) => quote(s),
        Value::Bytes(b) | Value::RawString(b) => quote(&String::from_utf8_lossy(b)),
        Value::List(l) => {
            let items = l
                .items()
                .iter()
                .map(element)
                .collect::<Result<Vec<_>, _>>()?;
            format!("[{}]", items.join(", "))
        }
        Value::Map(_) | Value::Object(_) => match as_table(v) {
            Some(entries) => {
                let mut sorted: Vec<_> = entries.into_iter().filter(|(_, x)| !x.is_nil()).collect();
                sorted.sort_by(|a, b| a.0.cmp(&b.0));
                let parts = sorted
                    .iter()
                    .map(|(k, x)| Ok(format!("{} = {}", key_part(k), element(x)?)))
                    .collect::<Result<Vec<_>, String>>()?;
                format!("{{{}}}", parts.join(", "))
            }
            None => quote(&flotilla_gotmpl::gofmt::sprint_value(v)),
        },
        Value::Nil => return Err("toml: cannot encode a nil value".to_string()),
    })
}

/// `fromToml s`: a map, or `{"Error": message}`.
pub(crate) fn decode(s: &str) -> Map {
    match s.parse::<::toml::Table>() {
        Ok(t) => table_to_map(&t),
        Err(e) => {
            let m = Map::new();
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or_default().trim();
            m.insert("Error", Value::string(format!("toml: {first}")));
            m
        }
    }
}

fn table_to_map(t: &::toml::Table) -> Map {
    let m = Map::new();
    for (k, v) in t {
        m.insert(k.clone(), toml_value(v));
    }
    m
}

fn toml_value(v: &::toml::Value) -> Value {
    match v {
        ::toml::Value::String(s) => Value::string(s),
        ::toml::Value::Integer(i) => Value::Int64(*i),
        ::toml::Value::Float(f) => Value::Float(*f),
        ::toml::Value::Boolean(b) => Value::Bool(*b),
        ::toml::Value::Datetime(d) => Value::string(d.to_string()),
        ::toml::Value::Array(a) => Value::list(a.iter().map(toml_value).collect()),
        ::toml::Value::Table(t) => Value::Map(table_to_map(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_come_after_plain_keys_and_are_indented() {
        let v = super::super::convert::json_to_value(&serde_json::json!({
            "mast": {"sail": "white"}, "name": "x", "n": 3.0
        }));
        assert_eq!(
            encode(&v).expect("encodes"),
            "n = 3.0\nname = \"x\"\n\n[mast]\n  sail = \"white\"\n"
        );
    }

    #[test]
    fn from_toml_reads_tables_and_reports_errors() {
        let m = decode("a = 1\n[b]\nc = \"d\"\n");
        assert_eq!(m.get("a").map(|v| v.type_name()).as_deref(), Some("int64"));
        assert!(decode("a = ").contains_key("Error"));
    }
}
