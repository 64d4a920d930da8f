//! JSON as Go's `encoding/json` writes it: struct fields in declaration order (serde's
//! derive order), map keys sorted, `<`, `>`, `&`, U+2028 and U+2029 escaped as `\u003c`…,
//! `\b`/`\f` short escapes, and float64 in Go's format (`1e+21`, `1e-7`, `1000000`).

use std::io;

use serde::Serialize;
use serde_json::ser::{CharEscape, Formatter};

/// A `serde_json` formatter with Go's escaping and float rules.
#[derive(Debug, Clone, Copy, Default)]
pub struct GoFormatter;

impl Formatter for GoFormatter {
    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        match crate::goformat::format_json_float(value) {
            Some(s) => writer.write_all(s.as_bytes()),
            None => Err(io::Error::other(format!(
                "json: unsupported value: {}",
                crate::goformat::format_g(value, false)
            ))),
        }
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f32) -> io::Result<()> {
        self.write_f64(writer, f64::from(value))
    }

    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let esc = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            writer.write_all(&fragment.as_bytes()[start..i])?;
            writer.write_all(esc.as_bytes())?;
            start = i + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }

    /// A byte string (`serialize_bytes`) is a Go `string` that may not be UTF-8: written as
    /// a JSON string, each byte of an invalid sequence as `\ufffd` (as `encoding/json`).
    fn write_byte_array<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        value: &[u8],
    ) -> io::Result<()> {
        writer.write_all(b"\"")?;
        let mut rest = value;
        while !rest.is_empty() {
            let (valid, skip) = match std::str::from_utf8(rest) {
                Ok(s) => (s, 0),
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    let skip = e.error_len().unwrap_or(bad.len());
                    (std::str::from_utf8(good).unwrap_or_default(), skip)
                }
            };
            self.write_go_text(writer, valid)?;
            for _ in 0..skip {
                writer.write_all(b"\\ufffd")?;
            }
            rest = &rest[valid.len() + skip..];
        }
        writer.write_all(b"\"")
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        char_escape: CharEscape,
    ) -> io::Result<()> {
        let s: String = match char_escape {
            CharEscape::Quote => "\\\"".into(),
            CharEscape::ReverseSolidus => "\\\\".into(),
            CharEscape::Solidus => "/".into(),
            CharEscape::Backspace => "\\b".into(),
            CharEscape::FormFeed => "\\f".into(),
            CharEscape::LineFeed => "\\n".into(),
            CharEscape::CarriageReturn => "\\r".into(),
            CharEscape::Tab => "\\t".into(),
            CharEscape::AsciiControl(b) => format!("\\u{b:04x}"),
        };
        writer.write_all(s.as_bytes())
    }
}

impl GoFormatter {
    /// The inside of a JSON string holding `text`, escaped as `encoding/json` escapes it.
    fn write_go_text<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        text: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, b) in text.bytes().enumerate() {
            let esc = match b {
                b'"' => CharEscape::Quote,
                b'\\' => CharEscape::ReverseSolidus,
                b'\x08' => CharEscape::Backspace,
                b'\x0c' => CharEscape::FormFeed,
                b'\n' => CharEscape::LineFeed,
                b'\r' => CharEscape::CarriageReturn,
                b'\t' => CharEscape::Tab,
                0..0x20 => CharEscape::AsciiControl(b),
                _ => continue,
            };
            self.write_string_fragment(writer, &text[start..i])?;
            self.write_char_escape(writer, esc)?;
            start = i + 1;
        }
        self.write_string_fragment(writer, &text[start..])
    }
}

/// `json.Marshal(v)`.
pub fn to_vec<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
    v.serialize(&mut ser)?;
    Ok(out)
}

/// `json.Marshal(v)` as a string.
pub fn to_string<T: Serialize + ?Sized>(v: &T) -> Result<String, serde_json::Error> {
    // Serializer output is always UTF-8.
    Ok(String::from_utf8_lossy(&to_vec(v)?).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escapes_and_floats_like_go() {
        let v = json!({"b": "<a href=\"x\">&amp;</a>\u{2028}\u{8}\u{c}\u{1}\u{7f}", "a": [1e6, 1.5, 1e21, 1e-7, 3, -0.0, 100]});
        assert_eq!(
            to_string(&v).unwrap(),
            r#"{"a":[1000000,1.5,1e+21,1e-7,3,-0,100],"b":"\u003ca href=\"x\"\u003e\u0026amp;\u003c/a\u003e\u2028\b\f\u0001"#.to_owned() + "\u{7f}\"}"
        );
    }
}
