//! String functions: Go's `strings` package, goutils (`abbrev`, `initials`, `wrap`,
//! `nospace`, `swapcase`, `untitle`, random strings) and xstrings (case conversions,
//! `shuffle`).

use flotilla_gotmpl::gofmt::{quote, quote_bytes, sprint_value};
use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Map, MapType, Signature, Value};

use super::{
    MAX_BUILD, add, arg_int, arg_str, bytes_value, is_go_space, is_lower, is_upper, strslice,
    strval, strval_go, to_lower, to_upper, xstrings,
};

use ArgType::{Any, Int, String as Str};

/// Appends `%v` of `v`: a Go string's bytes as they are, anything else as printed.
fn push_printed(out: &mut Vec<u8>, v: &Value) {
    match v.as_go_bytes() {
        Some(b) => out.extend_from_slice(b),
        None => out.extend_from_slice(sprint_value(v).as_bytes()),
    }
}

pub(crate) fn register(map: &mut FuncMap) {
    let s1 = || Signature::fixed([Str]);
    let s2 = || Signature::fixed([Str, Str]);
    let str_fn = |map: &mut FuncMap, name: &str, f: fn(&str) -> String| {
        add(map, name, s1(), move |a| Ok(Value::from(f(arg_str(a, 0)))));
    };
    add(map, "hello", Signature::fixed([]), |_| {
        Ok(Value::from("Hello!"))
    });
    str_fn(map, "trim", |s| s.trim_matches(is_go_space).to_string());
    str_fn(map, "upper", |s| s.chars().map(to_upper).collect());
    str_fn(map, "lower", |s| s.chars().map(to_lower).collect());
    str_fn(map, "title", title);
    str_fn(map, "untitle", untitle);
    str_fn(map, "nospace", delete_white_space);
    str_fn(map, "initials", initials);
    str_fn(map, "swapcase", swap_case);
    str_fn(map, "shuffle", xstrings::shuffle);
    str_fn(map, "snakecase", |s| xstrings::to_snake_kebab(s, '_'));
    str_fn(map, "kebabcase", |s| xstrings::to_snake_kebab(s, '-'));
    str_fn(map, "camelcase", xstrings::to_pascal_case);
    for name in ["trimAll", "trimall"] {
        add(map, name, s2(), |a| {
            let cut = arg_str(a, 0);
            Ok(Value::from(arg_str(a, 1).trim_matches(|c| cut.contains(c))))
        });
    }
    add(map, "trimSuffix", s2(), |a| {
        let s = arg_str(a, 1);
        Ok(Value::from(s.strip_suffix(arg_str(a, 0)).unwrap_or(s)))
    });
    add(map, "trimPrefix", s2(), |a| {
        let s = arg_str(a, 1);
        Ok(Value::from(s.strip_prefix(arg_str(a, 0)).unwrap_or(s)))
    });
    add(map, "contains", s2(), |a| {
        Ok(Value::Bool(arg_str(a, 1).contains(arg_str(a, 0))))
    });
    add(map, "hasPrefix", s2(), |a| {
        Ok(Value::Bool(arg_str(a, 1).starts_with(arg_str(a, 0))))
    });
    add(map, "hasSuffix", s2(), |a| {
        Ok(Value::Bool(arg_str(a, 1).ends_with(arg_str(a, 0))))
    });
    add(map, "abbrev", Signature::fixed([Int, Str]), |a| {
        let (w, s) = (arg_int(a, 0), arg_str(a, 1));
        if w < 4 {
            return Ok(Value::from(s));
        }
        Ok(abbreviate_full(s.as_bytes(), 0, w).map_or(Value::from(""), |b| bytes_value(&b)))
    });
    add(map, "abbrevboth", Signature::fixed([Int, Int, Str]), |a| {
        let (l, r, s) = (arg_int(a, 0), arg_int(a, 1), arg_str(a, 2));
        if r < 4 || l > 0 && r < 7 {
            return Ok(Value::from(s));
        }
        Ok(abbreviate_full(s.as_bytes(), l, r).map_or(Value::from(""), |b| bytes_value(&b)))
    });
    add(map, "trunc", Signature::fixed([Int, Str]), |a| {
        let (c, s) = (arg_int(a, 0), arg_str(a, 1).as_bytes());
        let len = s.len() as i64;
        Ok(if c < 0 && len + c > 0 {
            bytes_value(&s[(len + c) as usize..])
        } else if c >= 0 && len > c {
            bytes_value(&s[..c as usize])
        } else {
            bytes_value(s)
        })
    });
    add(map, "substr", Signature::fixed([Int, Int, Str]), |a| {
        substr(arg_int(a, 0), arg_int(a, 1), arg_str(a, 2).as_bytes()).map(|b| bytes_value(&b))
    });
    add(map, "repeat", Signature::fixed([Int, Str]), |a| {
        let (n, s) = (arg_int(a, 0), arg_str(a, 1));
        if n < 0 {
            return Err(FuncError::new("strings: negative Repeat count"));
        }
        let total = (s.len() as u128) * (n as u128);
        if total > MAX_BUILD as u128 {
            return Err(FuncError::new("strings: Repeat output length overflow"));
        }
        Ok(Value::from(s.repeat(n as usize)))
    });
    for (name, set) in [
        ("randAlphaNum", RandSet::AlphaNum),
        ("randAlpha", RandSet::Alpha),
        ("randNumeric", RandSet::Numeric),
        ("randAscii", RandSet::Ascii),
    ] {
        add(map, name, Signature::fixed([Int]), move |a| {
            random_string(arg_int(a, 0), set).map(Value::from)
        });
    }
    add(map, "wrap", Signature::fixed([Int, Str]), |a| {
        Ok(bytes_value(&wrap_custom(
            arg_str(a, 1).as_bytes(),
            arg_int(a, 0),
            b"",
            false,
        )))
    });
    add(map, "wrapWith", Signature::fixed([Int, Str, Str]), |a| {
        let out = wrap_custom(
            arg_str(a, 2).as_bytes(),
            arg_int(a, 0),
            arg_str(a, 1).as_bytes(),
            true,
        );
        Ok(bytes_value(&out))
    });
    add(map, "quote", Signature::variadic([], Any), |a| {
        let parts: Vec<String> = a
            .iter()
            .filter(|v| !v.is_nil())
            .map(|v| match strval_go(v) {
                // `%q` escapes each byte of an invalid sequence as `\xNN`.
                Value::RawString(b) => quote_bytes(&b),
                other => quote(other.as_str().unwrap_or_default()),
            })
            .collect();
        Ok(Value::from(parts.join(" ")))
    });
    // `squote` and `cat` print with `%v`, which keeps a Go string's bytes.
    add(map, "squote", Signature::variadic([], Any), |a| {
        let mut out = Vec::new();
        for v in a.iter().filter(|v| !v.is_nil()) {
            if !out.is_empty() {
                out.push(b' ');
            }
            out.push(b'\'');
            push_printed(&mut out, v);
            out.push(b'\'');
        }
        Ok(Value::go_string_owned(out))
    });
    add(map, "cat", Signature::variadic([], Any), |a| {
        let mut out = Vec::new();
        for (i, v) in a.iter().filter(|v| !v.is_nil()).enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            push_printed(&mut out, v);
        }
        Ok(Value::go_string_owned(out))
    });
    add(
        map,
        "indent",
        Signature::fixed([Int, ArgType::GoString]),
        |a| indent_value(arg_int(a, 0), &a[1], false),
    );
    add(
        map,
        "nindent",
        Signature::fixed([Int, ArgType::GoString]),
        |a| indent_value(arg_int(a, 0), &a[1], true),
    );
    add(map, "replace", Signature::fixed([Str, Str, Str]), |a| {
        let (src, old, new) = (arg_str(a, 2), arg_str(a, 0), arg_str(a, 1));
        let count = if old.is_empty() {
            src.chars().count() + 1
        } else {
            src.matches(old).count()
        };
        if (count as u128) * (new.len() as u128) + src.len() as u128 > MAX_BUILD as u128 {
            return Err(FuncError::new("strings: Replace output length overflow"));
        }
        Ok(Value::from(go_replace(src, old, new)))
    });
    add(map, "plural", Signature::fixed([Str, Str, Int]), |a| {
        Ok(Value::from(if arg_int(a, 2) == 1 {
            arg_str(a, 0)
        } else {
            arg_str(a, 1)
        }))
    });
    add(map, "toString", Signature::fixed([Any]), |a| {
        Ok(strval_go(&a[0]))
    });
    add(map, "toStrings", Signature::fixed([Any]), |a| {
        Ok(super::string_list(strslice(&a[0])))
    });
    add(map, "join", Signature::fixed([Str, Any]), |a| {
        Ok(Value::from(strslice(&a[1]).join(arg_str(a, 0))))
    });
    add(map, "sortAlpha", Signature::fixed([Any]), |a| {
        let mut items = if super::slice_items(&a[0]).is_some() {
            strslice(&a[0])
        } else {
            vec![strval(&a[0])]
        };
        items.sort();
        Ok(super::string_list(items))
    });
    add(map, "split", s2(), |a| {
        Ok(parts_map(go_split(arg_str(a, 1), arg_str(a, 0), -1)))
    });
    add(map, "splitn", Signature::fixed([Str, Int, Str]), |a| {
        Ok(parts_map(go_split(
            arg_str(a, 2),
            arg_str(a, 0),
            arg_int(a, 1),
        )))
    });
    add(map, "splitList", s2(), |a| {
        Ok(super::string_list(
            go_split(arg_str(a, 1), arg_str(a, 0), -1)
                .into_iter()
                .map(str::to_string)
                .collect(),
        ))
    });
}

/// `{"_0": p0, "_1": p1, ...}` as a `map[string]string`.
fn parts_map(parts: Vec<&str>) -> Value {
    let m = Map::new().with_type(MapType::StringValues);
    for (i, p) in parts.into_iter().enumerate() {
        m.insert(format!("_{i}"), Value::from(p));
    }
    Value::Map(m)
}

/// Go's `strings.SplitN(s, sep, n)` (`n < 0`: all parts; `n == 0`: none; empty `sep`
/// splits into runes).
pub(crate) fn go_split<'a>(s: &'a str, sep: &str, n: i64) -> Vec<&'a str> {
    if n == 0 {
        return Vec::new();
    }
    if sep.is_empty() {
        let mut out = Vec::new();
        let mut rest = s;
        while !rest.is_empty() {
            if n > 0 && out.len() as i64 == n - 1 {
                out.push(rest);
                return out;
            }
            let len = rest.chars().next().map_or(1, char::len_utf8);
            out.push(&rest[..len]);
            rest = &rest[len..];
        }
        return out;
    }
    if n < 0 {
        s.split(sep).collect()
    } else {
        s.splitn(usize::try_from(n).unwrap_or(usize::MAX), sep)
            .collect()
    }
}

/// `strings.Replace(s, old, new, -1)`, including Go's rule for an empty `old` (insert `new`
/// before every rune and at the end).
pub(crate) fn go_replace(s: &str, old: &str, new: &str) -> String {
    if old.is_empty() {
        let mut out = String::with_capacity(s.len() + new.len() * (s.len() + 1));
        out.push_str(new);
        for c in s.chars() {
            out.push(c);
            out.push_str(new);
        }
        return out;
    }
    s.replace(old, new)
}

/// `indent` (and, with `newline_first`, `nindent`): `pad + strings.Replace(s, "\n", "\n" +
/// pad, -1)` with `pad` n spaces, built in one pass into a string of the final size.
/// `indent`/`nindent` of a Go string: text is indented as text (not validated again); a
/// string that is not UTF-8 keeps its bytes.
fn indent_value(n: i64, s: &Value, newline_first: bool) -> Result<Value, FuncError> {
    match s {
        Value::RawString(b) => {
            let (pad, lines) = indent_pad(n, b)?;
            let mut out =
                Vec::with_capacity(usize::from(newline_first) + b.len() + pad.len() * lines);
            if newline_first {
                out.push(b'\n');
            }
            for (i, line) in b.split(|&c| c == b'\n').enumerate() {
                if i > 0 {
                    out.push(b'\n');
                }
                out.extend_from_slice(pad.as_bytes());
                out.extend_from_slice(line);
            }
            Ok(Value::go_string_owned(out))
        }
        _ => {
            let text = s.as_str().unwrap_or_default();
            let (pad, lines) = indent_pad(n, text.as_bytes())?;
            let mut out =
                String::with_capacity(usize::from(newline_first) + text.len() + pad.len() * lines);
            if newline_first {
                out.push('\n');
            }
            for (i, line) in text.split('\n').enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                out.push_str(&pad);
                out.push_str(line);
            }
            Ok(Value::from(out))
        }
    }
}

/// The padding `indent` puts before each line of `s` and the number of lines, after Go's
/// `strings.Repeat` checks.
fn indent_pad(n: i64, s: &[u8]) -> Result<(std::borrow::Cow<'static, str>, usize), FuncError> {
    if n < 0 {
        return Err(FuncError::new("strings: negative Repeat count"));
    }
    let lines = s.iter().filter(|&&b| b == b'\n').count() + 1;
    if (n as u128) * lines as u128 + s.len() as u128 > MAX_BUILD as u128 {
        return Err(FuncError::new("strings: Repeat output length overflow"));
    }
    const SPACES: &str = "                                                                ";
    let n = n as usize;
    let pad = match SPACES.get(..n) {
        Some(p) => std::borrow::Cow::Borrowed(p),
        None => std::borrow::Cow::Owned(" ".repeat(n)),
    };
    Ok((pad, lines))
}

/// Go's `s[start:end]` slicing panics, as `substr` meets them.
fn substr(start: i64, end: i64, s: &[u8]) -> Result<Vec<u8>, FuncError> {
    let len = s.len() as i64;
    let oob = |msg: String| {
        Err(FuncError::new(format!(
            "runtime error: slice bounds out of range {msg}"
        )))
    };
    if start < 0 {
        // s[:end]
        if end < 0 {
            return oob(format!("[:{end}]"));
        }
        if end > len {
            return oob(format!("[:{end}] with length {len}"));
        }
        return Ok(s[..end as usize].to_vec());
    }
    if end < 0 || end > len {
        // s[start:]
        if start > len {
            return oob(format!("[{start}:{len}]"));
        }
        return Ok(s[start as usize..].to_vec());
    }
    if start > end {
        return oob(format!("[{start}:{end}]"));
    }
    Ok(s[start as usize..end as usize].to_vec())
}

/// Go's deprecated `strings.Title`.
fn title(s: &str) -> String {
    fn is_separator(c: char) -> bool {
        if c.is_ascii() {
            return !(c.is_ascii_alphanumeric() || c == '_');
        }
        if c.is_alphabetic() || c.is_numeric() {
            return false;
        }
        is_go_space(c)
    }
    let mut prev = ' ';
    s.chars()
        .map(|c| {
            let out = if is_separator(prev) { to_title(c) } else { c };
            prev = c;
            out
        })
        .collect()
}

/// `unicode.ToTitle`: the upper case, except for the digraphs that have a title case.
pub(crate) fn to_title(c: char) -> char {
    match c {
        '\u{1c4}'..='\u{1c6}' => '\u{1c5}',
        '\u{1c7}'..='\u{1c9}' => '\u{1c8}',
        '\u{1ca}'..='\u{1cc}' => '\u{1cb}',
        '\u{1f1}'..='\u{1f3}' => '\u{1f2}',
        _ => to_upper(c),
    }
}

/// goutils `Uncapitalize` with no delimiters: the first rune of every whitespace-separated
/// word is lowered.
fn untitle(s: &str) -> String {
    let mut next = true;
    s.chars()
        .map(|c| {
            if is_go_space(c) {
                next = true;
                c
            } else if next {
                next = false;
                to_lower(c)
            } else {
                c
            }
        })
        .collect()
}

/// goutils `DeleteWhiteSpace`: walks bytes, each read as a Latin-1 rune.
fn delete_white_space(s: &str) -> String {
    let keep: Vec<u8> = s.bytes().filter(|&b| !is_go_space(char::from(b))).collect();
    if keep.len() == s.len() {
        return s.to_string();
    }
    keep.into_iter().map(char::from).collect()
}

/// goutils `Initials`: the first byte (as a Latin-1 rune) after each whitespace run.
fn initials(s: &str) -> String {
    let mut out = String::new();
    let mut gap = true;
    for b in s.bytes() {
        let c = char::from(b);
        if is_go_space(c) {
            gap = true;
        } else if gap {
            out.push(c);
            gap = false;
        }
    }
    out
}

/// goutils `SwapCase`: upper/title → lower; lower → title after whitespace, else upper.
fn swap_case(s: &str) -> String {
    let mut ws = true;
    s.chars()
        .map(|c| {
            if is_upper(c) || is_title_case(c) {
                ws = false;
                to_lower(c)
            } else if is_lower(c) {
                let out = if ws { to_title(c) } else { to_upper(c) };
                ws = false;
                out
            } else {
                ws = is_go_space(c);
                c
            }
        })
        .collect()
}

fn is_title_case(c: char) -> bool {
    matches!(c, '\u{1c5}' | '\u{1c8}' | '\u{1cb}' | '\u{1f2}')
        || ('\u{1f88}'..='\u{1faf}').contains(&c) && (c as u32 & 0xf) >= 8
        || matches!(c, '\u{1fbc}' | '\u{1fcc}' | '\u{1ffc}')
}

/// goutils `AbbreviateFull` on bytes; `None` where it returns an error (Sprig prints "").
fn abbreviate_full(s: &[u8], offset: i64, max_width: i64) -> Option<Vec<u8>> {
    if s.is_empty() {
        return Some(Vec::new());
    }
    if max_width < 4 {
        return None;
    }
    let len = s.len() as i64;
    if len <= max_width {
        return Some(s.to_vec());
    }
    let mut offset = offset.min(len);
    if len - offset < max_width - 3 {
        offset = len - (max_width - 3);
    }
    let marker = b"...";
    if offset <= 4 {
        let mut out = s[..(max_width - 3) as usize].to_vec();
        out.extend_from_slice(marker);
        return Some(out);
    }
    if max_width < 7 {
        return None;
    }
    if offset + max_width - 3 < len {
        let inner = abbreviate_full(&s[offset as usize..], 0, max_width - 3).unwrap_or_default();
        let mut out = marker.to_vec();
        out.extend(inner);
        return Some(out);
    }
    let mut out = marker.to_vec();
    out.extend_from_slice(&s[(len - (max_width - 3)) as usize..]);
    Some(out)
}

/// goutils `WrapCustom` on bytes.
fn wrap_custom(s: &[u8], width: i64, sep: &[u8], wrap_long: bool) -> Vec<u8> {
    if s.is_empty() {
        return Vec::new();
    }
    let sep: &[u8] = if sep.is_empty() { b"\n" } else { sep };
    let width = width.max(1) as usize;
    let len = s.len();
    let mut offset = 0usize;
    let mut out = Vec::with_capacity(len + len / width * sep.len());
    while len - offset > width {
        if s[offset] == b' ' {
            offset += 1;
            continue;
        }
        let end = (width + offset + 1).min(len);
        let space = s[offset..end].iter().rposition(|&b| b == b' ');
        if let Some(rel) = space {
            let at = offset + rel;
            out.extend_from_slice(&s[offset..at]);
            out.extend_from_slice(sep);
            offset = at + 1;
        } else if wrap_long {
            out.extend_from_slice(&s[offset..offset + width]);
            out.extend_from_slice(sep);
            offset += width;
        } else {
            let end = width + offset;
            match s[end..].iter().position(|&b| b == b' ') {
                None => {
                    out.extend_from_slice(&s[offset..]);
                    offset = len;
                }
                Some(i) => {
                    let at = end + i;
                    out.extend_from_slice(&s[offset..at]);
                    out.extend_from_slice(sep);
                    offset = at + 1;
                }
            }
        }
    }
    out.extend_from_slice(&s[offset.min(len)..]);
    out
}

#[derive(Clone, Copy)]
enum RandSet {
    AlphaNum,
    Alpha,
    Numeric,
    Ascii,
}

fn random_string(count: i64, set: RandSet) -> Result<String, FuncError> {
    if count <= 0 {
        return Ok(String::new());
    }
    if count as u64 > MAX_BUILD as u64 {
        return Err(FuncError::new(
            "randomstringutils: requested length too large",
        ));
    }
    let alphabet: Vec<u8> = match set {
        RandSet::AlphaNum => (b'a'..=b'z')
            .chain(b'A'..=b'Z')
            .chain(b'0'..=b'9')
            .collect(),
        RandSet::Alpha => (b'a'..=b'z').chain(b'A'..=b'Z').collect(),
        RandSet::Numeric => (b'0'..=b'9').collect(),
        RandSet::Ascii => (32u8..=126).collect(),
    };
    // Uniform choice by rejection over random bytes (every alphabet is shorter than 256).
    let n = alphabet.len();
    let zone = 256 - 256 % n;
    let mut out = String::with_capacity(count as usize);
    let mut buf = vec![0u8; (count as usize).clamp(16, 1 << 16)];
    while out.len() < count as usize {
        super::random_fill(&mut buf)?;
        for &b in &buf {
            if usize::from(b) < zone {
                out.push(char::from(alphabet[usize::from(b) % n]));
                if out.len() == count as usize {
                    break;
                }
            }
        }
    }
    Ok(out)
}
