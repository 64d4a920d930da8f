//! Sprig's own JSON encoders, which Helm keeps (Helm overrides only `toJson`, `fromJson` and
//! `mustToJson`): `toPrettyJson`/`mustToPrettyJson` (`json.MarshalIndent(v, "", "  ")`,
//! HTML-safe escaping) and `toRawJson`/`mustToRawJson` (an `Encoder` with HTML escaping off,
//! trailing newline trimmed; `toRawJson` panics on error). Output follows `encoding/json`:
//! sorted map keys, Go's float formatting, `[]byte` as base64, U+2028/U+2029 escaped.

use flotilla_gotmpl::gofmt::format_float;
use flotilla_gotmpl::value::MAX_VALUE_DEPTH;
use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Signature, Value};

use super::add;

pub(crate) fn register(map: &mut FuncMap) {
    let sig = || Signature::fixed([ArgType::Any]);
    add(map, "toPrettyJson", sig(), |a| {
        Ok(Value::from(marshal(&a[0], true, true).unwrap_or_default()))
    });
    add(map, "mustToPrettyJson", sig(), |a| {
        marshal(&a[0], true, true)
            .map(Value::from)
            .map_err(FuncError::new)
    });
    for name in ["toRawJson", "mustToRawJson"] {
        add(map, name, sig(), |a| {
            marshal(&a[0], false, false)
                .map(Value::from)
                .map_err(FuncError::new)
        });
    }
}

/// `encoding/json` output of `v`; `pretty` indents by two spaces, `html` escapes `<>&`.
pub(crate) fn marshal(v: &Value, pretty: bool, html: bool) -> Result<String, String> {
    let mut out = String::new();
    encode(v, &mut out, pretty, html, 0)?;
    Ok(out)
}

fn newline(out: &mut String, depth: usize) {
    out.push('\n');
    for _ in 0..depth {
        out.push_str("  ");
    }
}

fn encode(
    v: &Value,
    out: &mut String,
    pretty: bool,
    html: bool,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_VALUE_DEPTH {
        return Err(format!(
            "json: unsupported value: encountered a cycle via {}",
            v.type_name()
        ));
    }
    match v {
        Value::Nil => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) | Value::Int64(i) => out.push_str(&i.to_string()),
        Value::Uint64(u) => out.push_str(&u.to_string()),
        Value::Uint8(u) => out.push_str(&u.to_string()),
        Value::Float(f) => out.push_str(&json_float(*f)?),
        Value::String(s) => quote(s.as_bytes(), out, html),
        Value::Bytes(b) => {
            out.push('"');
            out.push_str(&super::encoding::b64_encode(b));
            out.push('"');
        }
        Value::List(l) => {
            if l.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in l.items().iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if pretty {
                    newline(out, depth + 1);
                }
                encode(item, out, pretty, html, depth + 1)?;
            }
            if pretty {
                newline(out, depth);
            }
            out.push(']');
        }
        Value::Map(m) => {
            let entries = m.entries();
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if pretty {
                    newline(out, depth + 1);
                }
                quote(k.as_bytes(), out, html);
                out.push(':');
                if pretty {
                    out.push(' ');
                }
                encode(item, out, pretty, html, depth + 1)?;
            }
            if pretty {
                newline(out, depth);
            }
            out.push('}');
        }
        Value::Object(o) => match o.marshal() {
            Some(inner) => encode(&inner, out, pretty, html, depth + 1)?,
            None => return Err(format!("json: unsupported type: {}", o.type_name())),
        },
    }
    Ok(())
}

/// `encoding/json`'s float format: `'f'` unless the magnitude is below 1e-6 or at least
/// 1e21, then `'e'` with a one-digit negative exponent kept short (`1e-7`).
fn json_float(f: f64) -> Result<String, String> {
    if !f.is_finite() {
        return Err(format!(
            "json: unsupported value: {}",
            format_float(f, 'g', None)
        ));
    }
    let abs = f.abs();
    let exp = abs != 0.0 && !(1e-6..1e21).contains(&abs);
    let mut s = format_float(f, if exp { 'e' } else { 'f' }, None);
    if exp {
        let b = s.as_bytes();
        let n = b.len();
        if n >= 4 && b[n - 4] == b'e' && b[n - 3] == b'-' && b[n - 2] == b'0' {
            s.remove(n - 2);
        }
    }
    Ok(s)
}

/// `encodeState.string`.
fn quote(s: &[u8], out: &mut String, html: bool) {
    out.push('"');
    let text = String::from_utf8_lossy(s);
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' if html => out.push_str(&format!("\\u{:04x}", c as u32)),
            '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}
