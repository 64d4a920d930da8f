//! Go's `strconv.FormatFloat` in the shapes Helm's YAML path uses.

/// Shortest decimal digits of `f` (no sign) and the decimal point position: the value is
/// `0.d1d2d3... * 10^dp`. Zero is `("0", 1)`.
fn shortest_digits(f: f64, bits32: bool) -> (Vec<u8>, i32) {
    let s = if bits32 {
        // Narrowing is the point: Go formats the value as a float32.
        #[allow(clippy::cast_possible_truncation)]
        let g = f as f32;
        format!("{:e}", g.abs())
    } else {
        format!("{:e}", f.abs())
    };
    let (mant, exp) = s.split_once('e').unwrap_or((s.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: Vec<u8> = mant.bytes().filter(u8::is_ascii_digit).collect();
    (digits, exp + 1)
}

fn special(f: f64) -> Option<&'static str> {
    if f.is_nan() {
        Some("NaN")
    } else if f.is_infinite() {
        Some(if f > 0.0 { "+Inf" } else { "-Inf" })
    } else {
        None
    }
}

fn push_e(out: &mut String, digits: &[u8], dp: i32) {
    out.push(char::from(digits.first().copied().unwrap_or(b'0')));
    if digits.len() > 1 {
        out.push('.');
        for &d in &digits[1..] {
            out.push(char::from(d));
        }
    }
    out.push('e');
    let mut exp = if digits == [b'0'] { 0 } else { dp - 1 };
    if exp < 0 {
        out.push('-');
        exp = -exp;
    } else {
        out.push('+');
    }
    if exp < 10 {
        out.push('0');
    }
    out.push_str(&exp.to_string());
}

fn push_f(out: &mut String, digits: &[u8], dp: i32) {
    let nd = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let digit_at = |i: i32| -> char {
        if i >= 0 && i < nd {
            char::from(digits[usize::try_from(i).unwrap_or(0)])
        } else {
            '0'
        }
    };
    if dp > 0 {
        for i in 0..dp {
            out.push(digit_at(i));
        }
    } else {
        out.push('0');
    }
    let prec = (nd - dp).max(0);
    if prec > 0 {
        out.push('.');
        for i in 1..=prec {
            out.push(digit_at(dp + i - 1));
        }
    }
}

/// `strconv.FormatFloat(f, 'g', -1, 64)` (or 32 when `bits32`).
pub fn format_g(f: f64, bits32: bool) -> String {
    // A float64 formatted as 32-bit is rounded to float32 first (1e100 becomes +Inf).
    #[allow(clippy::cast_possible_truncation)]
    let as_f32 = f64::from(f as f32);
    if let Some(s) = special(if bits32 { as_f32 } else { f }) {
        return s.to_owned();
    }
    let (digits, dp) = shortest_digits(f, bits32);
    let mut out = String::new();
    if f.is_sign_negative() {
        out.push('-');
    }
    let is_zero = digits == [b'0'];
    let exp = if is_zero { 0 } else { dp - 1 };
    if !(-4..6).contains(&exp) {
        push_e(&mut out, &digits, dp);
    } else if is_zero {
        out.push('0');
    } else {
        push_f(&mut out, &digits, dp);
    }
    out
}

/// What Go's `encoding/json` writes for a float64 (`None` for NaN and infinities, which it
/// refuses).
pub fn format_json_float(f: f64) -> Option<String> {
    if !f.is_finite() {
        return None;
    }
    let (digits, dp) = shortest_digits(f, false);
    let mut out = String::new();
    if f.is_sign_negative() {
        out.push('-');
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        push_e(&mut out, &digits, dp);
        // Go cleans e-09 up to e-9.
        let b = out.as_bytes();
        let n = b.len();
        if n >= 4 && b[n - 4] == b'e' && b[n - 3] == b'-' && b[n - 2] == b'0' {
            out.remove(n - 2);
        }
    } else if digits == [b'0'] {
        out.push('0');
    } else {
        push_f(&mut out, &digits, dp);
    }
    Some(out)
}

/// Go's `strconv.Quote`: printable runes as they are, escapes for the rest.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%#v` of a decoded value (inside an `interface{}` container when `nested`).
pub(crate) fn go_sharp_v(v: &crate::Value, nested: bool) -> String {
    use crate::Value;
    match v {
        Value::Null => {
            if nested {
                "interface {}(nil)".to_owned()
            } else {
                "<nil>".to_owned()
            }
        }
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => format!("0x{u:x}"),
        Value::Float(f) => format_g(*f, false),
        Value::String(s) => go_quote(s),
        Value::Bytes(b) => go_quote(&crate::json::go_lossy_utf8(b)),
        Value::Seq(items) => {
            let inner: Vec<String> = items.iter().map(|i| go_sharp_v(i, true)).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        Value::Map(m) => {
            let mut entries: Vec<(String, String)> = m
                .iter()
                .map(|(k, v)| (go_sharp_v(k, true), go_sharp_v(v, true)))
                .collect();
            entries.sort();
            let inner: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            format!("map[interface {{}}]interface {{}}{{{}}}", inner.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_g_matches_go() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (1.5, "1.5"),
            (100000.0, "100000"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e21, "1e+21"),
            (1e100, "1e+100"),
            (0.1, "0.1"),
            (123456.789, "123456.789"),
            (-2.5e-7, "-2.5e-07"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ];
        for (f, want) in cases {
            assert_eq!(format_g(*f, false), *want, "{f}");
        }
        assert!(format_g(f64::NAN, false) == "NaN");
        assert_eq!(format_g(0.1, true), "0.1");
        assert_eq!(format_g(1.1, true), "1.1");
        assert_eq!(format_g(1e100, true), "+Inf");
        assert_eq!(format_g(123_456_789.0, true), "1.2345679e+08");
    }

    #[test]
    fn json_float_matches_go() {
        let cases: &[(f64, &str)] = &[
            (3.0, "3"),
            (1e6, "1000000"),
            (1.5, "1.5"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1e-7, "1e-7"),
            (0.000001, "0.000001"),
            (-0.0, "-0"),
            (123456789.5, "123456789.5"),
        ];
        for (f, want) in cases {
            assert_eq!(format_json_float(*f).as_deref(), Some(*want), "{f}");
        }
        assert_eq!(format_json_float(f64::NAN), None);
    }
}
