//! The few Go `fmt` renderings Helm's messages contain about decoded JSON values: `%v`,
//! `%T`, `%t`. Quoting (`%q`) is `flotilla_gotmpl::gofmt::quote`.

use serde_json::Value;

/// Go's `fmt.Sprintf("%v", v)` for a value decoded into `interface{}`.
pub fn go_v(v: &Value) -> String {
    let mut out = String::new();
    push_v(&mut out, v);
    out
}

fn push_v(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_number(n)),
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                push_v(out, item);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push_str("map[");
            for (i, (k, v)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                push_v(out, v);
            }
            out.push(']');
        }
    }
}

/// `%v` of a number: int64 as decimal, float64 in Go's `%g` shortest form.
pub fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        flotilla_yaml::go_format_float_g(n.as_f64().unwrap_or(0.0), false)
    }
}

/// Go's dynamic type name of a decoded value, as `%T` prints it.
pub fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "nil",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Go's `%t` verb applied to a decoded value (`%!t(string=x)` for non-bools).
pub fn go_t(v: &Value) -> String {
    match v {
        Value::Bool(b) => b.to_string(),
        Value::Null => "%!t(<nil>)".to_owned(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(go_t).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(m) => {
            let parts: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("%!t(string={k}):{}", go_t(v)))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
        other => format!("%!t({}={})", go_type(other), go_v(other)),
    }
}

/// A non-string YAML key as `sigs.k8s.io/yaml` turns it into a JSON key (the library already
/// does this; kept for keys that reach us unconverted).
pub(crate) fn yaml_key_string(k: &flotilla_yaml::Value) -> String {
    use flotilla_yaml::Value as Y;
    match k {
        Y::String(s) => s.clone(),
        Y::Bool(b) => b.to_string(),
        Y::Int(i) => i.to_string(),
        Y::Uint(u) => u.to_string(),
        Y::Float(f) => flotilla_yaml::go_format_float_g(*f, true),
        Y::Null => "null".to_owned(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v_formats_like_go() {
        assert_eq!(go_v(&json!({})), "map[]");
        assert_eq!(
            go_v(&json!({"b": [1.5, "x", null], "a": true})),
            "map[a:true b:[1.5 x <nil>]]"
        );
        assert_eq!(go_v(&json!(1e6)), "1e+06");
        assert_eq!(go_v(&json!(3)), "3");
    }

    #[test]
    fn t_formats_like_go() {
        assert_eq!(go_t(&json!("x")), "%!t(string=x)");
    }
}
