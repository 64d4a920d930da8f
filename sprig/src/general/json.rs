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
        Value::RawString(b) => quote(b, out, html),
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
    let mut rest = s;
    while !rest.is_empty() {
        let (text, skip) = match std::str::from_utf8(rest) {
            Ok(text) => (text, 0),
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                let skip = e.error_len().unwrap_or(bad.len());
                (std::str::from_utf8(good).unwrap_or_default(), skip)
            }
        };
        quote_text(text, out, html);
        // encoding/json: each byte of an invalid UTF-8 sequence is `\ufffd`.
        for _ in 0..skip {
            out.push_str("\\ufffd");
        }
        rest = &rest[text.len() + skip..];
    }
    out.push('"');
}

fn quote_text(text: &str, out: &mut String, html: bool) {
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
}

/// Registers `mustFromJson` (`json.Unmarshal` into `interface{}`; Helm's own `fromJson`
/// replaces Sprig's, so only the `must` variant is Sprig's).
pub(crate) fn register_decode(map: &mut FuncMap) {
    add(
        map,
        "mustFromJson",
        Signature::fixed([ArgType::String]),
        |a| unmarshal(super::arg_str(a, 0)).map_err(FuncError::new),
    );
}

const EOF: &str = "unexpected end of JSON input";

/// `json.Unmarshal(data, &interface{})` with Go's syntax error texts.
pub(crate) fn unmarshal(src: &str) -> Result<Value, String> {
    let mut p = Parser {
        b: src.as_bytes(),
        i: 0,
    };
    let v = p.value(0)?;
    p.ws();
    if let Some(c) = p.peek() {
        return Err(invalid(c, "after top-level value"));
    }
    Ok(v)
}

/// encoding/json's `quoteChar`.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => "'\\''".to_string(),
        b'"' => "'\"'".to_string(),
        _ => {
            let q = flotilla_gotmpl::gofmt::quote(&char::from(c).to_string());
            format!("'{}'", &q[1..q.len() - 1])
        }
    }
}

fn invalid(c: u8, context: &str) -> String {
    format!("invalid character {} {context}", quote_char(c))
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.i += 1;
        }
    }

    fn next_ws(&mut self) -> Result<u8, String> {
        self.ws();
        self.peek().ok_or_else(|| EOF.to_string())
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_VALUE_DEPTH {
            return Err("exceeded max depth".to_string());
        }
        let c = self.next_ws()?;
        match c {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(Value::from),
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.literal("true", Value::Bool(true)),
            b'f' => self.literal("false", Value::Bool(false)),
            b'n' => self.literal("null", Value::Nil),
            _ => Err(invalid(c, "looking for beginning of value")),
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, String> {
        self.i += 1;
        for expect in word.bytes().skip(1) {
            // At the end, Go's scanner feeds a space to the state machine.
            match self.peek().or(Some(b' ')) {
                None => return Err(EOF.to_string()),
                Some(c) if c == expect => self.i += 1,
                Some(c) => {
                    return Err(invalid(
                        c,
                        &format!("in literal {word} (expecting {})", quote_char(expect)),
                    ));
                }
            }
        }
        Ok(v)
    }

    fn object(&mut self, depth: usize) -> Result<Value, String> {
        self.i += 1;
        let m = flotilla_gotmpl::Map::new();
        let mut c = self.next_ws()?;
        if c == b'}' {
            self.i += 1;
            return Ok(Value::Map(m));
        }
        loop {
            if c != b'"' {
                return Err(invalid(c, "looking for beginning of object key string"));
            }
            let key = self.string()?;
            let c2 = self.next_ws()?;
            if c2 != b':' {
                return Err(invalid(c2, "after object key"));
            }
            self.i += 1;
            let v = self.value(depth + 1)?;
            m.insert(key, v);
            match self.next_ws()? {
                b',' => {
                    self.i += 1;
                    c = self.next_ws()?;
                }
                b'}' => {
                    self.i += 1;
                    return Ok(Value::Map(m));
                }
                other => return Err(invalid(other, "after object key:value pair")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, String> {
        self.i += 1;
        let mut items = Vec::new();
        if self.next_ws()? == b']' {
            self.i += 1;
            return Ok(Value::list(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            match self.next_ws()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Ok(Value::list(items));
                }
                other => return Err(invalid(other, "after array element")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let mut v = 0u32;
        for _ in 0..4 {
            let c = self.peek().unwrap_or(b' ');
            let d = (c as char)
                .to_digit(16)
                .ok_or_else(|| invalid(c, "in \\u hexadecimal character escape"))?;
            v = v * 16 + d;
            self.i += 1;
        }
        Ok(v)
    }

    /// A string literal starting at the opening quote.
    fn string(&mut self) -> Result<String, String> {
        self.i += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = self.peek().ok_or_else(|| EOF.to_string())?;
            self.i += 1;
            match c {
                b'"' => return Ok(String::from_utf8_lossy(&out).into_owned()),
                b'\\' => {
                    let e = self.peek().unwrap_or(b' ');
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            if (0xD800..0xDC00).contains(&hi)
                                && self.b.get(self.i..self.i + 2) == Some(b"\\u")
                            {
                                let save = self.i;
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                                        .unwrap_or('\u{fffd}')
                                } else {
                                    self.i = save;
                                    '\u{fffd}'
                                }
                            } else {
                                char::from_u32(hi).unwrap_or('\u{fffd}')
                            }
                        }
                        other => return Err(invalid(other, "in string escape code")),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                c if c < 0x20 => return Err(invalid(c, "in string literal")),
                c => out.push(c),
            }
        }
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
            match self.peek().or(Some(b' ')) {
                None => return Err(EOF.to_string()),
                Some(b'0'..=b'9') => {}
                Some(c) => return Err(invalid(c, "in numeric literal")),
            }
        }
        if self.peek() == Some(b'0') {
            self.i += 1;
        } else {
            self.digits();
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            match self.peek().or(Some(b' ')) {
                None => return Err(EOF.to_string()),
                Some(b'0'..=b'9') => self.digits(),
                Some(c) => return Err(invalid(c, "after decimal point in numeric literal")),
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            match self.peek().or(Some(b' ')) {
                None => return Err(EOF.to_string()),
                Some(b'0'..=b'9') => self.digits(),
                Some(c) => return Err(invalid(c, "in exponent of numeric literal")),
            }
        }
        let text = std::str::from_utf8(&self.b[start..self.i]).unwrap_or("0");
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Value::Float(f)),
            _ => Err(format!(
                "json: cannot unmarshal number {text} into Go value of type float64"
            )),
        }
    }
}
