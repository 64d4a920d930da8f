//! Conversions shared by the families: Sprig's `strval`/`strslice`, `spf13/cast` (v1.7.0)
//! `ToInt64`/`ToInt`/`ToFloat64`, `reflect`-based emptiness, Go's `strconv` integer parsing and
//! the runtime panic texts Sprig's Go code produces.

use flotilla_gotmpl::gofmt::sprint_value;
use flotilla_gotmpl::{ElemType, FuncError, GoKind, List, Value};

/// The panic of `reflect.TypeOf(nil).Kind()` (and of any nil dereference).
pub(crate) const NIL_DEREF: &str =
    "runtime error: invalid memory address or nil pointer dereference";

/// Largest string or list a function builds; Go would try to allocate it and die, we fail.
pub(crate) const MAX_BUILD: usize = 256 << 20;

/// Argument `i` as a string (the signature guarantees it; anything else reads as empty).
pub(crate) fn arg_str(args: &[Value], i: usize) -> &str {
    args.get(i).and_then(Value::as_str).unwrap_or_default()
}

/// Argument `i` as an `int`/`int64` (guaranteed by the signature).
pub(crate) fn arg_int(args: &[Value], i: usize) -> i64 {
    match args.get(i) {
        Some(Value::Int(n) | Value::Int64(n)) => *n,
        _ => 0,
    }
}

/// A Go string built from bytes that may not be valid UTF-8 (kept as they are).
pub(crate) fn bytes_value(b: &[u8]) -> Value {
    Value::go_string(b)
}

/// The bytes of argument `i`, a Go string (an [`ArgType::GoString`](flotilla_gotmpl::ArgType)
/// parameter).
pub(crate) fn arg_bytes(args: &[Value], i: usize) -> &[u8] {
    args.get(i).and_then(Value::as_go_bytes).unwrap_or_default()
}

/// A `[]string`.
pub(crate) fn string_list(items: Vec<String>) -> Value {
    Value::List(List::typed(
        items.into_iter().map(Value::from).collect(),
        ElemType::String,
    ))
}

/// Sprig's `strval` as a Go string: strings (UTF-8 or not) and `[]byte` keep their bytes;
/// else [`strval`].
pub(crate) fn strval_go(v: &Value) -> Value {
    match v {
        Value::String(_) | Value::RawString(_) => v.clone(),
        Value::Bytes(b) => Value::go_string(b),
        other => Value::from(strval(other)),
    }
}

/// Sprig's `strval`: strings as-is, `[]byte` as text, Stringers by `String()`, else `%v`.
pub(crate) fn strval(v: &Value) -> String {
    match v {
        Value::String(s) => s.to_string(),
        Value::RawString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Object(o) => o.display(),
        other => sprint_value(other),
    }
}

/// The elements of a slice-kinded value (`reflect.Slice`/`reflect.Array`).
pub(crate) fn slice_items(v: &Value) -> Option<Vec<Value>> {
    match v {
        Value::List(l) => Some(l.to_vec()),
        Value::Bytes(b) => Some(b.iter().map(|x| Value::Uint8(*x)).collect()),
        Value::Object(o) if o.kind() == GoKind::Slice => o.list_items(),
        _ => None,
    }
}

/// Sprig's `strslice` (`toStrings`).
pub(crate) fn strslice(v: &Value) -> Vec<String> {
    if let Value::List(l) = v
        && l.elem() == ElemType::String
    {
        return l.items().iter().map(strval).collect();
    }
    match slice_items(v) {
        Some(items) => items.iter().filter(|x| !x.is_nil()).map(strval).collect(),
        None if v.is_nil() => Vec::new(),
        None => vec![strval(v)],
    }
}

/// `reflect.TypeOf(v).Kind().String()`, with the panic Go raises for nil.
pub(crate) fn kind_of_or_panic(v: &Value) -> Result<&'static str, FuncError> {
    if v.is_nil() {
        return Err(FuncError::new(NIL_DEREF));
    }
    Ok(v.kind().name())
}

/// Sprig's `empty`: nil, zero numbers, `false`, empty strings/slices/maps; structs and
/// non-nil pointers are never empty.
pub(crate) fn is_empty(v: &Value) -> bool {
    match v {
        Value::Nil => true,
        Value::Bool(b) => !b,
        Value::Int(i) | Value::Int64(i) => *i == 0,
        Value::Uint64(u) => *u == 0,
        Value::Uint8(u) => *u == 0,
        Value::Float(f) => *f == 0.0,
        Value::String(s) => s.is_empty(),
        Value::Bytes(b) | Value::RawString(b) => b.is_empty(),
        Value::List(l) => l.is_empty(),
        Value::Map(m) => m.is_empty(),
        Value::Object(o) => match o.kind() {
            GoKind::Map => o.map_entries().is_none_or(|e| e.is_empty()),
            GoKind::Slice => o.list_items().is_none_or(|e| e.is_empty()),
            _ => false,
        },
    }
}

/// Go's `int64(f)` on amd64: truncation, and the "integer indefinite" value for NaN and
/// out-of-range inputs.
pub(crate) fn f64_to_i64(f: f64) -> i64 {
    // 2^63 as a float64: the first value out of range in either direction.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if f.is_nan() || !(-LIMIT..LIMIT).contains(&f) {
        i64::MIN
    } else {
        f.trunc() as i64
    }
}

/// `cast.ToInt64` (errors read as 0). `cast.ToInt` is the same on 64-bit platforms.
pub(crate) fn to_int64(v: &Value) -> i64 {
    match v {
        Value::Int(i) | Value::Int64(i) => *i,
        Value::Uint64(u) => *u as i64,
        Value::Uint8(u) => i64::from(*u),
        Value::Float(f) => f64_to_i64(*f),
        Value::String(s) => parse_int(trim_zero_decimal(s), 0).unwrap_or(0),
        Value::Bool(b) => i64::from(*b),
        _ => 0,
    }
}

/// `cast.ToFloat64` (errors read as 0).
pub(crate) fn to_float64(v: &Value) -> f64 {
    match v {
        Value::Int(i) | Value::Int64(i) => *i as f64,
        Value::Uint64(u) => *u as f64,
        Value::Uint8(u) => f64::from(*u),
        Value::Float(f) => *f,
        Value::String(s) => parse_float(s).unwrap_or(0.0),
        Value::Bool(b) => f64::from(u8::from(*b)),
        _ => 0.0,
    }
}

/// cast's `trimZeroDecimal`: `"1.0"` → `"1"`, `"1.00"` → `"1"`, anything else unchanged.
fn trim_zero_decimal(s: &str) -> &str {
    let b = s.as_bytes();
    let mut found_zero = false;
    for i in (1..=b.len()).rev() {
        match b[i - 1] {
            b'.' => {
                if found_zero {
                    return &s[..i - 1];
                }
            }
            b'0' => found_zero = true,
            _ => return s,
        }
    }
    s
}

/// Go's `underscoreOK`: underscores only between digits or after a base prefix.
fn underscore_ok(s: &str) -> bool {
    let mut b = s.as_bytes();
    if let [b'-' | b'+', rest @ ..] = b {
        b = rest;
    }
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1] | 0x20, b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = b[1] | 0x20 == b'x';
    }
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() || hex && (b'a'..=b'f').contains(&(c | 0x20)) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
        i += 1;
    }
    saw != b'_'
}

/// Why `strconv.ParseInt` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumErr {
    Syntax,
    Range,
}

/// `strconv.ParseInt(s, base, 64)`; base 0 detects `0x`/`0o`/`0b`/leading-`0` prefixes and
/// allows underscores.
pub(crate) fn parse_int(s0: &str, base: u32) -> Result<i64, NumErr> {
    if s0.is_empty() {
        return Err(NumErr::Syntax);
    }
    let (neg, s) = match s0.as_bytes()[0] {
        b'-' => (true, &s0[1..]),
        b'+' => (false, &s0[1..]),
        _ => (false, s0),
    };
    let u = parse_uint(s, base)?;
    let cutoff = 1u64 << 63;
    if !neg && u >= cutoff {
        return Err(NumErr::Range);
    }
    if neg && u > cutoff {
        return Err(NumErr::Range);
    }
    Ok(if neg {
        (u as i64).wrapping_neg()
    } else {
        u as i64
    })
}

fn parse_uint(s0: &str, base: u32) -> Result<u64, NumErr> {
    if s0.is_empty() {
        return Err(NumErr::Syntax);
    }
    let base0 = base == 0;
    let mut s = s0.as_bytes();
    let mut base = base;
    if base == 0 {
        base = 10;
        if s[0] == b'0' {
            if s.len() >= 3 && matches!(s[1] | 0x20, b'b' | b'o' | b'x') {
                base = match s[1] | 0x20 {
                    b'b' => 2,
                    b'o' => 8,
                    _ => 16,
                };
                s = &s[2..];
            } else {
                base = 8;
                s = &s[1..];
            }
        }
    }
    let mut n: u64 = 0;
    let mut underscores = false;
    let mut range_err = false;
    for &c in s {
        if c == b'_' && base0 {
            underscores = true;
            continue;
        }
        let d = match c {
            b'0'..=b'9' => u32::from(c - b'0'),
            b'a'..=b'z' | b'A'..=b'Z' => u32::from((c | 0x20) - b'a') + 10,
            _ => return Err(NumErr::Syntax),
        };
        if d >= base {
            return Err(NumErr::Syntax);
        }
        if range_err {
            continue;
        }
        match n
            .checked_mul(u64::from(base))
            .and_then(|x| x.checked_add(u64::from(d)))
        {
            Some(x) => n = x,
            None => range_err = true,
        }
    }
    if underscores && !underscore_ok(s0) {
        return Err(NumErr::Syntax);
    }
    if range_err {
        return Err(NumErr::Range);
    }
    Ok(n)
}

/// `strconv.ParseFloat(s, 64)` for decimal input (`inf`/`nan` spellings included); hex
/// floats and out-of-range values fail.
pub(crate) fn parse_float(s: &str) -> Option<f64> {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = body.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        return s.parse::<f64>().ok();
    }
    if lower.starts_with("0x") {
        return None;
    }
    if !body
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-' | b'_'))
    {
        return None;
    }
    let cleaned: String = if s.contains('_') {
        if !underscore_ok(s) {
            return None;
        }
        s.chars().filter(|&c| c != '_').collect()
    } else {
        s.to_string()
    };
    let f: f64 = cleaned.parse().ok()?;
    if f.is_infinite() { None } else { Some(f) }
}

/// Go's `unicode.IsSpace`.
pub(crate) fn is_go_space(c: char) -> bool {
    c.is_whitespace()
}

/// `unicode.ToUpper` (simple case mapping: one rune to one rune).
pub(crate) fn to_upper(c: char) -> char {
    let mut it = c.to_uppercase();
    match (it.next(), it.next()) {
        (Some(u), None) => u,
        _ => c,
    }
}

/// `unicode.ToLower` (simple case mapping).
pub(crate) fn to_lower(c: char) -> char {
    if c == '\u{130}' {
        return 'i';
    }
    let mut it = c.to_lowercase();
    match (it.next(), it.next()) {
        (Some(l), None) => l,
        _ => c,
    }
}

/// `unicode.IsUpper` (category Lu).
pub(crate) fn is_upper(c: char) -> bool {
    // Rust's Uppercase property also covers Other_Uppercase (Roman numerals, circled and
    // squared letters), which are not in category Lu.
    c.is_ascii_uppercase()
        || c.is_uppercase()
            && to_lower(c) != c
            && !c.is_numeric()
            && !matches!(c as u32, 0x24B6..=0x24CF | 0x1F130..=0x1F189)
}

/// `unicode.IsLower` (category Ll).
pub(crate) fn is_lower(c: char) -> bool {
    c.is_lowercase() && (to_upper(c) != c || c.is_ascii_lowercase())
}

/// `unicode.IsPunct` (category P); exact for ASCII, an approximation beyond.
pub(crate) fn is_punct(c: char) -> bool {
    if c.is_ascii() {
        return matches!(
            c,
            '!' | '"'
                | '#'
                | '%'
                | '&'
                | '\''
                | '('
                | ')'
                | '*'
                | ','
                | '-'
                | '.'
                | '/'
                | ':'
                | ';'
                | '?'
                | '@'
                | '['
                | '\\'
                | ']'
                | '_'
                | '{'
                | '}'
        );
    }
    matches!(c,
        '\u{a1}' | '\u{a7}' | '\u{ab}' | '\u{b6}' | '\u{b7}' | '\u{bb}' | '\u{bf}'
        | '\u{2010}'..='\u{2027}' | '\u{2030}'..='\u{205e}' | '\u{3001}'..='\u{3003}'
        | '\u{3008}'..='\u{3011}')
}

/// Fills `buf` from the operating system's cryptographic source (Go's `crypto/rand`).
pub(crate) fn random_fill(buf: &mut [u8]) -> Result<(), FuncError> {
    getrandom::getrandom(buf).map_err(|e| FuncError::new(format!("crypto/rand: {e}")))
}

/// A uniform random integer in `[0, n)` (`n > 0`), by rejection sampling.
pub(crate) fn random_below(n: u64) -> Result<u64, FuncError> {
    if n <= 1 {
        return Ok(0);
    }
    let zone = u64::MAX - (u64::MAX % n + 1) % n;
    loop {
        let mut b = [0u8; 8];
        random_fill(&mut b)?;
        let x = u64::from_le_bytes(b);
        if x <= zone {
            return Ok(x % n);
        }
    }
}
