//! go-yaml v2's implicit typing of scalars (YAML 1.1 flavoured), `resolve.go`.

/// Long form of the core tags go-yaml v2 knows.
pub(crate) const TAG_PREFIX: &str = "tag:yaml.org,2002:";
pub(crate) const STR_TAG: &str = "tag:yaml.org,2002:str";
pub(crate) const BOOL_TAG: &str = "tag:yaml.org,2002:bool";
pub(crate) const INT_TAG: &str = "tag:yaml.org,2002:int";
pub(crate) const FLOAT_TAG: &str = "tag:yaml.org,2002:float";
pub(crate) const NULL_TAG: &str = "tag:yaml.org,2002:null";
pub(crate) const TIMESTAMP_TAG: &str = "tag:yaml.org,2002:timestamp";
pub(crate) const BINARY_TAG: &str = "tag:yaml.org,2002:binary";
pub(crate) const MERGE_TAG: &str = "tag:yaml.org,2002:merge";

/// What a scalar resolves to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Resolved {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str,
    /// Looks like a timestamp; decoding into `interface{}` keeps the text.
    Timestamp,
    Merge,
}

impl Resolved {
    pub(crate) fn tag(&self) -> &'static str {
        match self {
            Resolved::Null => NULL_TAG,
            Resolved::Bool(_) => BOOL_TAG,
            Resolved::Int(_) | Resolved::Uint(_) => INT_TAG,
            Resolved::Float(_) => FLOAT_TAG,
            Resolved::Str => STR_TAG,
            Resolved::Timestamp => TIMESTAMP_TAG,
            Resolved::Merge => MERGE_TAG,
        }
    }
}

/// `!!int` for the long form, anything else unchanged.
pub(crate) fn short_tag(tag: &str) -> String {
    match tag.strip_prefix(TAG_PREFIX) {
        Some(rest) => format!("!!{rest}"),
        None => tag.to_owned(),
    }
}

fn lookup_map(s: &str) -> Option<Resolved> {
    Some(match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            Resolved::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            Resolved::Bool(false)
        }
        "" | "~" | "null" | "Null" | "NULL" => Resolved::Null,
        ".nan" | ".NaN" | ".NAN" => Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Resolved::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Resolved::Float(f64::NEG_INFINITY),
        "<<" => Resolved::Merge,
        _ => return None,
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Hint {
    None,
    Sign,
    Digit,
    Map,
    Dot,
}

fn hint(s: &str) -> Hint {
    match s.as_bytes().first() {
        None => Hint::Map, // "" is in the map
        Some(b'+' | b'-') => Hint::Sign,
        Some(b'0'..=b'9') => Hint::Digit,
        Some(b'y' | b'Y' | b'n' | b'N' | b't' | b'T' | b'f' | b'F' | b'o' | b'O' | b'~') => {
            Hint::Map
        }
        Some(b'.') => Hint::Dot,
        _ => Hint::None,
    }
}

/// Resolution of a plain, untagged scalar.
pub(crate) fn resolve_plain(s: &str) -> Resolved {
    resolve_hinted(s, true)
}

fn resolve_hinted(s: &str, try_timestamp: bool) -> Resolved {
    let h = hint(s);
    if h == Hint::None {
        return Resolved::Str;
    }
    if let Some(r) = lookup_map(s) {
        return r;
    }
    match h {
        Hint::Dot => {
            if let Some(f) = go_parse_float(s) {
                return Resolved::Float(f);
            }
        }
        Hint::Digit | Hint::Sign => {
            if try_timestamp && is_timestamp(s) {
                return Resolved::Timestamp;
            }
            let plain: std::borrow::Cow<'_, str> = if s.contains('_') {
                s.chars().filter(|&c| c != '_').collect::<String>().into()
            } else {
                s.into()
            };
            if let Some(i) = go_parse_int(&plain) {
                return Resolved::Int(i);
            }
            if let Some(u) = go_parse_uint(&plain) {
                return Resolved::Uint(u);
            }
            if yaml_style_float(&plain)
                && let Some(f) = go_parse_float(&plain)
            {
                return Resolved::Float(f);
            }
            if let Some(rest) = plain.strip_prefix("0b") {
                if let Some(v) = parse_radix_i64(rest, 2, false) {
                    return Resolved::Int(v);
                }
                if let Some(v) = parse_radix_u64(rest, 2) {
                    return Resolved::Uint(v);
                }
            } else if let Some(rest) = plain.strip_prefix("-0b")
                && let Some(v) = parse_radix_i64(rest, 2, true)
            {
                return Resolved::Int(v);
            }
        }
        Hint::Map | Hint::None => {}
    }
    Resolved::Str
}

/// Error from resolving an explicitly tagged scalar.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TagMismatch {
    pub(crate) message: String,
}

/// go-yaml v2 `resolve(tag, in)`: the tag it ends up with and the value. `tag` is in long
/// form or empty. Unknown tags keep the text as a string.
pub(crate) fn resolve_tagged(tag: &str, s: &str) -> Result<(String, Resolved), TagMismatch> {
    let resolvable = matches!(
        tag,
        "" | STR_TAG | BOOL_TAG | INT_TAG | FLOAT_TAG | NULL_TAG | TIMESTAMP_TAG
    );
    if !resolvable {
        return Ok((tag.to_owned(), Resolved::Str));
    }
    let r = if tag == STR_TAG {
        Resolved::Str
    } else {
        resolve_hinted(s, tag.is_empty() || tag == TIMESTAMP_TAG)
    };
    let rtag = r.tag();
    if tag.is_empty() || tag == rtag || tag == STR_TAG {
        return Ok((rtag.to_owned(), r));
    }
    if tag == FLOAT_TAG
        && let Resolved::Int(i) = r
    {
        #[allow(clippy::cast_precision_loss)]
        return Ok((FLOAT_TAG.to_owned(), Resolved::Float(i as f64)));
    }
    Err(TagMismatch {
        message: format!(
            "cannot decode {} `{}` as a {}",
            short_tag(rtag),
            s,
            short_tag(tag)
        ),
    })
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Go `strconv.ParseFloat(s, 64)` for decimal syntax; `None` on syntax or range errors.
fn go_parse_float(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    // Rust accepts "inf"/"nan" spellings Go also accepts, but go-yaml only calls this on
    // strings starting with '.', a digit or a sign followed by the float regex.
    if s.contains(['_', 'x', 'X', 'p', 'P', 'i', 'I', 'n', 'N']) {
        return None;
    }
    if b.is_empty() {
        return None;
    }
    let f: f64 = s.parse().ok()?;
    if f.is_infinite() {
        return None; // ErrRange
    }
    Some(f)
}

/// Go `strconv.ParseInt(s, 0, 64)` (underscores already removed).
fn go_parse_int(s: &str) -> Option<i64> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (digits, radix) = split_base_prefix(body)?;
    parse_radix_i64(digits, radix, neg)
}

/// Go `strconv.ParseUint(s, 0, 64)` (no sign allowed).
fn go_parse_uint(s: &str) -> Option<u64> {
    let (digits, radix) = split_base_prefix(s)?;
    parse_radix_u64(digits, radix)
}

fn split_base_prefix(s: &str) -> Option<(&str, u32)> {
    let b = s.as_bytes();
    if b.is_empty() {
        return None;
    }
    if b[0] == b'0' && b.len() > 1 {
        if b.len() >= 3 {
            match b[1].to_ascii_lowercase() {
                b'b' => return Some((&s[2..], 2)),
                b'o' => return Some((&s[2..], 8)),
                b'x' => return Some((&s[2..], 16)),
                _ => {}
            }
        }
        return Some((&s[1..], 8));
    }
    Some((s, 10))
}

fn parse_radix_u64(digits: &str, radix: u32) -> Option<u64> {
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

fn parse_radix_i64(digits: &str, radix: u32, neg: bool) -> Option<i64> {
    let u = parse_radix_u64(digits, radix)?;
    if neg {
        if u <= i64::MAX as u64 + 1 {
            Some(0i64.wrapping_sub_unsigned(u))
        } else {
            None
        }
    } else {
        i64::try_from(u).ok()
    }
}

/// `isBase60Float` of go-yaml v2's encoder:
/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`.
pub(crate) fn is_base60_float(s: &str) -> bool {
    let b = s.as_bytes();
    let Some(&c) = b.first() else {
        return false;
    };
    if !(c == b'+' || c == b'-' || c.is_ascii_digit()) || !s.contains(':') {
        return false;
    }
    let mut i = 0;
    if c == b'+' || c == b'-' {
        i += 1;
    }
    if !b.get(i).is_some_and(u8::is_ascii_digit) {
        return false;
    }
    i += 1;
    while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'_') {
        i += 1;
    }
    let mut groups = 0;
    while b.get(i) == Some(&b':') {
        i += 1;
        // [0-5]?[0-9]: one or two digits, the first of two being 0-5.
        let d1 = b.get(i).copied();
        let d2 = b.get(i + 1).copied();
        match (d1, d2) {
            (Some(x), Some(y)) if (b'0'..=b'5').contains(&x) && y.is_ascii_digit() => {
                // Prefer two digits, but backtrack to one when what follows two is invalid.
                let after_two = b.get(i + 2).copied();
                if matches!(after_two, None | Some(b':' | b'.')) {
                    i += 2;
                } else {
                    i += 1;
                }
            }
            (Some(x), _) if x.is_ascii_digit() => i += 1,
            _ => return false,
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'_') {
            i += 1;
        }
    }
    i == b.len()
}

/// go-yaml v2 `parseTimestamp`: does `s` parse with one of its `time.Parse` layouts?
pub(crate) fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let lead = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if lead != 4 || b.get(4) != Some(&b'-') {
        return false;
    }
    // Layouts: date, then optionally [Tt]time zone | ' ' time.
    let Some((year, month, day, rest)) = parse_date(b) else {
        return false;
    };
    if day < 1 || day > days_in(month, year) {
        return false;
    }
    if rest.is_empty() {
        return true;
    }
    match rest[0] {
        b'T' | b't' => match parse_time(&rest[1..]) {
            Some(tail) => parse_zone(tail),
            None => false,
        },
        b' ' => matches!(parse_time(&rest[1..]), Some(tail) if tail.is_empty()),
        _ => false,
    }
}

/// Go's `getnum(value, false)`: one or two digits.
fn getnum(b: &[u8]) -> Option<(u32, &[u8])> {
    let d0 = *b.first()?;
    if !d0.is_ascii_digit() {
        return None;
    }
    match b.get(1) {
        Some(d1) if d1.is_ascii_digit() => {
            Some((u32::from(d0 - b'0') * 10 + u32::from(d1 - b'0'), &b[2..]))
        }
        _ => Some((u32::from(d0 - b'0'), &b[1..])),
    }
}

fn parse_date(b: &[u8]) -> Option<(u32, u32, u32, &[u8])> {
    let year = b[..4]
        .iter()
        .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'));
    let rest = b.get(5..)?;
    let (month, rest) = getnum(rest)?;
    if !(1..=12).contains(&month) {
        return None;
    }
    let rest = rest.strip_prefix(b"-")?;
    let (day, rest) = getnum(rest)?;
    Some((year, month, day, rest))
}

fn parse_time(b: &[u8]) -> Option<&[u8]> {
    let (h, rest) = getnum(b)?;
    if h > 23 {
        return None;
    }
    let rest = rest.strip_prefix(b":")?;
    let (m, rest) = getnum(rest)?;
    if m > 59 {
        return None;
    }
    let rest = rest.strip_prefix(b":")?;
    let (s, mut rest) = getnum(rest)?;
    if s > 59 {
        return None;
    }
    if rest.len() >= 2 && matches!(rest[0], b'.' | b',') && rest[1].is_ascii_digit() {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        rest = &rest[1 + n..];
    }
    Some(rest)
}

fn parse_zone(b: &[u8]) -> bool {
    if b == b"Z" {
        return true;
    }
    if b.len() != 6 || b[3] != b':' || !matches!(b[0], b'+' | b'-') {
        return false;
    }
    let two = |x: &[u8]| -> Option<u32> {
        if x.iter().all(u8::is_ascii_digit) {
            Some(u32::from(x[0] - b'0') * 10 + u32::from(x[1] - b'0'))
        } else {
            None
        }
    };
    matches!((two(&b[1..3]), two(&b[4..6])), (Some(h), Some(m)) if h <= 24 && m <= 60)
}

fn days_in(month: u32, year: u32) -> u32 {
    match month {
        2 => {
            if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) {
                29
            } else {
                28
            }
        }
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_scalars_resolve_like_go_yaml_v2() {
        use Resolved::*;
        let cases: Vec<(&str, Resolved)> = vec![
            ("", Null),
            ("~", Null),
            ("null", Null),
            ("NULL", Null),
            ("nULL", Str),
            ("yes", Bool(true)),
            ("Y", Bool(true)),
            ("off", Bool(false)),
            ("oFF", Str),
            ("1", Int(1)),
            ("+1", Int(1)),
            ("-1", Int(-1)),
            ("0777", Int(511)),
            ("0o17", Int(15)),
            ("0x1F", Int(31)),
            ("0b101", Int(5)),
            ("-0b101", Int(-5)),
            ("1_000", Int(1000)),
            ("08", Float(8.0)),
            ("1.5", Float(1.5)),
            ("1.", Float(1.0)),
            (".5", Float(0.5)),
            ("1e3", Float(1000.0)),
            ("1e400", Str),
            ("9223372036854775808", Uint(9_223_372_036_854_775_808)),
            ("99999999999999999999", Float(1e20)),
            (".inf", Float(f64::INFINITY)),
            ("-.inf", Float(f64::NEG_INFINITY)),
            ("2001-12-14", Timestamp),
            ("2001-12-14t21:59:43.10Z", Timestamp),
            ("2001-12-14 21:59:43.10", Timestamp),
            ("2001-02-30", Str),
            ("1:20", Str),
            ("<<", Str),
            ("0x", Str),
            ("-", Str),
            ("+", Str),
            ("1.2.3", Str),
            ("abc", Str),
        ];
        for (s, want) in cases {
            let got = resolve_plain(s);
            match (&got, &want) {
                (Float(a), Float(b)) if a.is_nan() && b.is_nan() => {}
                _ => assert_eq!(got, want, "{s:?}"),
            }
        }
        assert!(matches!(resolve_plain(".nan"), Float(f) if f.is_nan()));
    }

    #[test]
    fn tagged_scalars() {
        assert_eq!(
            resolve_tagged(INT_TAG, "foo").unwrap_err().message,
            "cannot decode !!str `foo` as a !!int"
        );
        assert_eq!(
            resolve_tagged(FLOAT_TAG, "1").unwrap().1,
            Resolved::Float(1.0)
        );
        assert_eq!(resolve_tagged(STR_TAG, "1").unwrap().1, Resolved::Str);
        assert_eq!(resolve_tagged("!foo", "1").unwrap().1, Resolved::Str);
    }

    #[test]
    fn base60() {
        assert!(is_base60_float("1:20"));
        assert!(is_base60_float("190:20:30.15"));
        assert!(is_base60_float("-1:2"));
        assert!(!is_base60_float("1:60"));
        assert!(!is_base60_float("1:"));
        assert!(!is_base60_float("a:1"));
    }
}
