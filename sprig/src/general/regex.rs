//! Regular expressions with Go's RE2 syntax and semantics on top of the `regex` crate: the
//! pattern is translated first (Go's ASCII-only `\d \s \w \b`, octal escapes, `\Q…\E`,
//! literal braces that do not form a repetition), Go's parse errors are reproduced for the
//! common mistakes, and replacement templates are expanded with Go's `$name`/`${name}` rules.

use std::sync::{Arc, Mutex};

use flotilla_gotmpl::gofmt::quote;
use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Signature, Value};

use super::{add, arg_int, arg_str, string_list};

use ArgType::{Int, String as Str};

pub(crate) fn register(map: &mut FuncMap) {
    add(map, "regexMatch", Signature::fixed([Str, Str]), |a| {
        Ok(Value::Bool(
            compile(arg_str(a, 0)).is_ok_and(|re| re.is_match(arg_str(a, 1))),
        ))
    });
    add(map, "mustRegexMatch", Signature::fixed([Str, Str]), |a| {
        Ok(Value::Bool(must(arg_str(a, 0))?.is_match(arg_str(a, 1))))
    });
    for (name, get) in [
        ("regexFindAll", panicking as Getter),
        ("mustRegexFindAll", must),
    ] {
        add(map, name, Signature::fixed([Str, Str, Int]), move |a| {
            let re = get(arg_str(a, 0))?;
            let n = arg_int(a, 2);
            let s = arg_str(a, 1);
            let limit = if n < 0 { usize::MAX } else { n as usize };
            Ok(string_list(
                re.find_iter(s)
                    .take(limit)
                    .map(|m| m.as_str().to_string())
                    .collect(),
            ))
        });
    }
    for (name, get) in [("regexFind", panicking as Getter), ("mustRegexFind", must)] {
        add(map, name, Signature::fixed([Str, Str]), move |a| {
            let re = get(arg_str(a, 0))?;
            Ok(Value::from(
                re.find(arg_str(a, 1)).map_or("", |m| m.as_str()),
            ))
        });
    }
    for (name, get, literal) in [
        ("regexReplaceAll", panicking as Getter, false),
        ("mustRegexReplaceAll", must, false),
        ("regexReplaceAllLiteral", panicking, true),
        ("mustRegexReplaceAllLiteral", must, true),
    ] {
        add(map, name, Signature::fixed([Str, Str, Str]), move |a| {
            let re = get(arg_str(a, 0))?;
            Ok(Value::from(replace_all(
                &re,
                arg_str(a, 1),
                arg_str(a, 2),
                literal,
            )))
        });
    }
    for (name, get) in [
        ("regexSplit", panicking as Getter),
        ("mustRegexSplit", must),
    ] {
        add(map, name, Signature::fixed([Str, Str, Int]), move |a| {
            let pattern = arg_str(a, 0);
            let re = get(pattern)?;
            Ok(string_list(split(
                &re,
                pattern,
                arg_str(a, 1),
                arg_int(a, 2),
            )))
        });
    }
    add(map, "regexQuoteMeta", Signature::fixed([Str]), |a| {
        let mut out = String::new();
        for c in arg_str(a, 0).chars() {
            if "\\.+*?()|[]{}^$".contains(c) {
                out.push('\\');
            }
            out.push(c);
        }
        Ok(Value::from(out))
    });
}

type Getter = fn(&str) -> Result<Arc<regex::Regex>, FuncError>;

/// `regexp.Compile`, returning its error.
fn must(pattern: &str) -> Result<Arc<regex::Regex>, FuncError> {
    compile(pattern).map_err(FuncError::new)
}

/// `regexp.MustCompile`, whose panic text the template reports.
fn panicking(pattern: &str) -> Result<Arc<regex::Regex>, FuncError> {
    compile(pattern)
        .map_err(|e| FuncError::new(format!("regexp: Compile({}): {e}", go_quote(pattern))))
}

/// regexp's `quote`: backquoted when possible.
fn go_quote(s: &str) -> String {
    let can_backquote = s
        .chars()
        .all(|c| c != '`' && c != '\u{feff}' && (c == '\t' || !c.is_control()));
    if can_backquote {
        format!("`{s}`")
    } else {
        quote(s)
    }
}

fn syntax(code: &str, expr: &str) -> String {
    format!("error parsing regexp: {code}: `{expr}`")
}

/// How many compiled patterns [`compile`] keeps. Charts use a handful of patterns, called
/// once per item of a list or per include; more distinct patterns than this empty the cache.
const CACHED_PATTERNS: usize = 32;

/// Longer patterns are compiled on every call, as in Go, rather than kept.
const CACHED_PATTERN_LEN: usize = 1024;

/// Patterns already compiled, with their result (errors too), shared by every render of the
/// process: a pattern's compilation does not depend on anything but its text.
static COMPILED: Mutex<Vec<(Box<str>, Compiled)>> = Mutex::new(Vec::new());

/// A compiled pattern, or Go's error for it.
type Compiled = Result<Arc<regex::Regex>, String>;

/// Compiles a Go regular expression, or returns the one compiled earlier from the same
/// text (Go's Sprig compiles on every call; the result is the same).
pub(crate) fn compile(pattern: &str) -> Compiled {
    let cached = |cache: &[(Box<str>, Compiled)]| {
        cache
            .iter()
            .find(|(p, _)| **p == *pattern)
            .map(|(_, re)| re.clone())
    };
    if let Some(re) = cached(&COMPILED.lock().unwrap_or_else(|p| p.into_inner())) {
        return re;
    }
    // Compiled without the lock held, so other renders are not kept waiting.
    let re = compile_uncached(pattern).map(Arc::new);
    if pattern.len() > CACHED_PATTERN_LEN {
        return re;
    }
    let mut cache = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    if cached(&cache).is_some() {
        return re;
    }
    if cache.len() >= CACHED_PATTERNS {
        cache.clear();
    }
    cache.push((Box::from(pattern), re.clone()));
    re
}

/// Compiles a Go regular expression.
fn compile_uncached(pattern: &str) -> Result<regex::Regex, String> {
    let translated = translate(pattern)?;
    regex::RegexBuilder::new(&translated)
        .size_limit(64 << 20)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => syntax("expression too large", pattern),
            other => {
                let msg = other.to_string();
                let last = msg
                    .lines()
                    .rev()
                    .find(|l| l.starts_with("error:"))
                    .unwrap_or("error: invalid");
                syntax(last.trim_start_matches("error: "), pattern)
            }
        })
}

fn push_hex(out: &mut String, c: char) {
    out.push_str(&format!("\\x{{{:x}}}", c as u32));
}

/// Translates Go's syntax to the `regex` crate's, reporting Go's errors.
fn translate(p: &str) -> Result<String, String> {
    let chars: Vec<char> = p.chars().collect();
    let mut out = String::with_capacity(p.len() + 16);
    let mut i = 0;
    let mut depth = 0usize;
    // Whether the last item can take a repetition operator, and the text of the last
    // operator when it was one (for nested-repetition errors).
    let mut can_repeat = false;
    let mut last_op: Option<String> = None;
    let mut names: Vec<String> = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                i += 1;
                let Some(&e) = chars.get(i) else {
                    return Err(syntax("trailing backslash at end of expression", ""));
                };
                i += 1;
                match e {
                    'd' => out.push_str("[0-9]"),
                    'D' => out.push_str("[^0-9]"),
                    's' => out.push_str("[\\t\\n\\x0C\\r ]"),
                    'S' => out.push_str("[^\\t\\n\\x0C\\r ]"),
                    'w' => out.push_str("[0-9A-Za-z_]"),
                    'W' => out.push_str("[^0-9A-Za-z_]"),
                    'b' => out.push_str("(?-u:\\b)"),
                    'B' => out.push_str("(?-u:\\B)"),
                    'A' | 'z' => {
                        out.push('\\');
                        out.push(e);
                        can_repeat = false;
                        last_op = None;
                        continue;
                    }
                    'Q' => {
                        let mut lit = String::new();
                        while i < chars.len() {
                            if chars[i] == '\\' && chars.get(i + 1) == Some(&'E') {
                                i += 2;
                                break;
                            }
                            lit.push(chars[i]);
                            i += 1;
                        }
                        for l in lit.chars() {
                            push_hex(&mut out, l);
                        }
                    }
                    _ => i = escape(&chars, i, e, &mut out, false)?,
                }
                can_repeat = true;
                last_op = None;
            }
            '[' => {
                i = class(&chars, i, &mut out)?;
                can_repeat = true;
                last_op = None;
            }
            '(' => {
                let start = i;
                if chars.get(i + 1) == Some(&'?') {
                    // Flags or a named group.
                    let mut j = i + 2;
                    match chars.get(j) {
                        Some('P') | Some('<') => {
                            if chars.get(j) == Some(&'P') {
                                j += 1;
                            }
                            if chars.get(j) != Some(&'<') {
                                // Go reads `P` as an unknown flag and stops there.
                                let end = j.min(chars.len());
                                return Err(syntax(
                                    "invalid or unsupported Perl syntax",
                                    &chars[start..end].iter().collect::<String>(),
                                ));
                            }
                            let name_start = j + 1;
                            let mut k = name_start;
                            while k < chars.len() && chars[k] != '>' {
                                k += 1;
                            }
                            let name: String =
                                chars[name_start..k.min(chars.len())].iter().collect();
                            if k >= chars.len()
                                || name.is_empty()
                                || !name.chars().all(|c| c == '_' || c.is_alphanumeric())
                            {
                                let end = (k + 1).min(chars.len());
                                return Err(syntax(
                                    "invalid named capture",
                                    &chars[start..end].iter().collect::<String>(),
                                ));
                            }
                            // Go allows a name twice (the first group wins in
                            // replacements); the regex crate does not.
                            if names.contains(&name) {
                                out.push_str(&format!("(?P<flotilla_dup_{}>", names.len()));
                            } else {
                                out.push_str(&format!("(?P<{name}>"));
                            }
                            names.push(name);
                            i = k + 1;
                            depth += 1;
                            can_repeat = false;
                            last_op = None;
                            continue;
                        }
                        _ => {
                            while j < chars.len() && "imsU-".contains(chars[j]) {
                                j += 1;
                            }
                            match chars.get(j) {
                                Some(':') => {
                                    depth += 1;
                                    out.extend(&chars[i..=j]);
                                    i = j + 1;
                                    can_repeat = false;
                                }
                                Some(')') if j > i + 2 => {
                                    out.extend(&chars[i..=j]);
                                    i = j + 1;
                                    can_repeat = false;
                                }
                                _ => {
                                    let end = (j + 1).min(chars.len());
                                    return Err(syntax(
                                        "invalid or unsupported Perl syntax",
                                        &chars[start..end].iter().collect::<String>(),
                                    ));
                                }
                            }
                            last_op = None;
                            continue;
                        }
                    }
                }
                depth += 1;
                out.push('(');
                i += 1;
                can_repeat = false;
                last_op = None;
            }
            ')' => {
                if depth == 0 {
                    return Err(syntax("unexpected )", p));
                }
                depth -= 1;
                out.push(')');
                i += 1;
                can_repeat = true;
                last_op = None;
            }
            '|' => {
                out.push('|');
                i += 1;
                can_repeat = false;
                last_op = None;
            }
            '*' | '+' | '?' | '{' => {
                let (op_len, valid) = if c == '{' {
                    repeat_len(&chars, i)?
                } else {
                    (1, true)
                };
                if !valid {
                    out.push_str("\\{");
                    i += 1;
                    can_repeat = true;
                    last_op = None;
                    continue;
                }
                let mut op: String = chars[i..i + op_len].iter().collect();
                let mut next = i + op_len;
                if chars.get(next) == Some(&'?') {
                    op.push('?');
                    next += 1;
                }
                if let Some(prev) = &last_op {
                    return Err(syntax(
                        "invalid nested repetition operator",
                        &format!("{prev}{}", &op[..op_len]),
                    ));
                }
                if !can_repeat {
                    return Err(syntax(
                        "missing argument to repetition operator",
                        &op[..op_len],
                    ));
                }
                out.push_str(&op);
                i = next;
                last_op = Some(op);
            }
            '}' => {
                out.push_str("\\}");
                i += 1;
                can_repeat = true;
                last_op = None;
            }
            '^' | '$' | '.' => {
                out.push(c);
                i += 1;
                can_repeat = true;
                last_op = None;
            }
            _ => {
                out.push(c);
                i += 1;
                can_repeat = true;
                last_op = None;
            }
        }
    }
    if depth > 0 {
        return Err(syntax("missing closing )", p));
    }
    Ok(out)
}

/// The length of a `{n}`, `{n,}` or `{n,m}` operator at `i`, or `(1, false)` when the brace
/// is a literal. Counts over 1000 are Go's `invalid repeat count`.
fn repeat_len(chars: &[char], i: usize) -> Result<(usize, bool), String> {
    let mut j = i + 1;
    let num = |j: &mut usize| -> Option<u64> {
        let s = *j;
        while *j < chars.len() && chars[*j].is_ascii_digit() {
            *j += 1;
        }
        if *j == s {
            return None;
        }
        let txt: String = chars[s..*j].iter().collect();
        Some(txt.parse::<u64>().unwrap_or(u64::MAX))
    };
    let Some(lo) = num(&mut j) else {
        return Ok((1, false));
    };
    let mut hi = Some(lo);
    if chars.get(j) == Some(&',') {
        j += 1;
        hi = if chars.get(j) == Some(&'}') {
            None
        } else {
            match num(&mut j) {
                Some(h) => Some(h),
                None => return Ok((1, false)),
            }
        };
    }
    if chars.get(j) != Some(&'}') {
        return Ok((1, false));
    }
    let len = j + 1 - i;
    if lo > 1000 || hi.is_some_and(|h| h > 1000 || h < lo) {
        return Err(syntax(
            "invalid repeat count",
            &chars[i..i + len].iter().collect::<String>(),
        ));
    }
    Ok((len, true))
}

/// An escape other than the class shorthands; `i` is just past the escaped char `e`.
fn escape(
    chars: &[char],
    mut i: usize,
    e: char,
    out: &mut String,
    in_class: bool,
) -> Result<usize, String> {
    let bad = |end: usize| {
        let start = i - 2;
        Err(syntax(
            "invalid escape sequence",
            &chars[start..end.min(chars.len())]
                .iter()
                .collect::<String>(),
        ))
    };
    match e {
        '1'..='7' if !chars.get(i).is_some_and(|c| ('0'..='7').contains(c)) => return bad(i),
        '0'..='7' => {
            let mut v = e.to_digit(8).unwrap_or(0);
            for _ in 0..2 {
                match chars.get(i).and_then(|c| c.to_digit(8)) {
                    Some(d) => {
                        v = v * 8 + d;
                        i += 1;
                    }
                    None => break,
                }
            }
            push_hex(out, char::from_u32(v).unwrap_or('\0'));
        }
        'x' => {
            if chars.get(i) == Some(&'{') {
                let mut j = i + 1;
                while j < chars.len() && chars[j].is_ascii_hexdigit() {
                    j += 1;
                }
                if chars.get(j) != Some(&'}') || j == i + 1 {
                    return bad(j + 1);
                }
                let hex: String = chars[i + 1..j].iter().collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(c) => push_hex(out, c),
                    None => return bad(j + 1),
                }
                i = j + 1;
            } else {
                let hex: String = chars
                    .get(i..i + 2)
                    .map(|s| s.iter().collect())
                    .unwrap_or_default();
                match (hex.len() == 2)
                    .then(|| u32::from_str_radix(&hex, 16).ok())
                    .flatten()
                {
                    Some(v) => push_hex(out, char::from_u32(v).unwrap_or('\0')),
                    None => return bad(i + 2),
                }
                i += 2;
            }
        }
        'a' => out.push_str("\\x07"),
        'f' => out.push_str("\\x0C"),
        't' => out.push_str("\\t"),
        'n' => out.push_str("\\n"),
        'r' => out.push_str("\\r"),
        'v' => out.push_str("\\x0B"),
        'p' | 'P' => {
            out.push('\\');
            out.push(e);
            if chars.get(i) == Some(&'{') {
                let mut j = i;
                while j < chars.len() && chars[j] != '}' {
                    j += 1;
                }
                if j >= chars.len() {
                    return Err(syntax(
                        "invalid character class range",
                        &chars[i - 2..].iter().collect::<String>(),
                    ));
                }
                out.extend(&chars[i..=j]);
                i = j + 1;
            } else if let Some(&c) = chars.get(i) {
                out.push(c);
                i += 1;
            } else {
                return Err(syntax(
                    "invalid character class range",
                    &chars[i - 2..].iter().collect::<String>(),
                ));
            }
        }
        c if c.is_ascii() && !c.is_ascii_alphanumeric() => push_hex(out, c),
        _ => return bad(i),
    }
    let _ = in_class;
    Ok(i)
}

/// A bracketed class starting at `i` (`[`); returns the index past it.
fn class(chars: &[char], start: usize, out: &mut String) -> Result<usize, String> {
    let mut i = start + 1;
    out.push('[');
    if chars.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    let mut first = true;
    // After a class shorthand (`\w`, `[:alpha:]`) a `-` cannot start a range: Go reads it as
    // a literal hyphen (`[\w-.]`), while Rust would read a range, so it is escaped.
    let mut after_shorthand = false;
    loop {
        let Some(&c) = chars.get(i) else {
            return Err(syntax(
                "missing closing ]",
                &chars[start..].iter().collect::<String>(),
            ));
        };
        if c == ']' && !first {
            out.push(']');
            return Ok(i + 1);
        }
        first = false;
        if c == '-' && after_shorthand {
            out.push_str("\\-");
            i += 1;
            after_shorthand = false;
            continue;
        }
        after_shorthand = false;
        match c {
            '[' if chars.get(i + 1) == Some(&':') => {
                let rest: String = chars[i..].iter().collect();
                let known = |name: &str| {
                    let name = name.strip_prefix('^').unwrap_or(name);
                    [
                        "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower",
                        "print", "punct", "space", "upper", "word", "xdigit",
                    ]
                    .contains(&name)
                };
                if let Some(end) = rest.find(":]")
                    && !known(&rest[2..end])
                {
                    return Err(syntax("invalid character class range", &rest[..end + 2]));
                }
                match rest.find(":]") {
                    Some(end) => {
                        let len = rest[..end + 2].chars().count();
                        out.extend(&chars[i..i + len]);
                        i += len;
                        after_shorthand = true;
                    }
                    None => {
                        out.push_str("\\[");
                        i += 1;
                    }
                }
            }
            '\\' => {
                let Some(&e) = chars.get(i + 1) else {
                    return Err(syntax(
                        "missing closing ]",
                        &chars[start..].iter().collect::<String>(),
                    ));
                };
                i += 2;
                after_shorthand = matches!(e, 'd' | 'D' | 's' | 'S' | 'w' | 'W');
                match e {
                    'd' => out.push_str("0-9"),
                    'D' => out.push_str("[^0-9]"),
                    's' => out.push_str("\\t\\n\\x0C\\r "),
                    'S' => out.push_str("[^\\t\\n\\x0C\\r ]"),
                    'w' => out.push_str("0-9A-Za-z_"),
                    'W' => out.push_str("[^0-9A-Za-z_]"),
                    _ => i = escape(chars, i, e, out, true)?,
                }
            }
            '[' | '&' | '~' | ']' => {
                push_hex(out, c);
                i += 1;
            }
            '-' if chars.get(i + 1) == Some(&'-') => {
                push_hex(out, c);
                i += 1;
            }
            _ => {
                // A literal range lo-hi must be ordered.
                if chars.get(i + 1) == Some(&'-')
                    && let Some(&hi) = chars.get(i + 2)
                    && hi != ']'
                    && hi != '\\'
                    && hi != '['
                    && hi < c
                {
                    return Err(syntax(
                        "invalid character class range",
                        &chars[i..i + 3].iter().collect::<String>(),
                    ));
                }
                out.push(c);
                i += 1;
            }
        }
    }
}

/// `Regexp.ReplaceAllString` / `ReplaceAllLiteralString`.
fn replace_all(re: &regex::Regex, src: &str, repl: &str, literal: bool) -> String {
    let names: Vec<Option<&str>> = re.capture_names().collect();
    let mut out = String::with_capacity(src.len());
    let mut last = 0;
    for caps in re.captures_iter(src) {
        let Some(m) = caps.get(0) else { continue };
        out.push_str(&src[last..m.start()]);
        if literal {
            out.push_str(repl);
        } else {
            expand(&caps, &names, repl, &mut out);
        }
        last = m.end();
    }
    out.push_str(&src[last..]);
    out
}

/// Go's `Regexp.expand`.
fn expand(caps: &regex::Captures<'_>, names: &[Option<&str>], template: &str, out: &mut String) {
    let mut t = template;
    while let Some(pos) = t.find('$') {
        out.push_str(&t[..pos]);
        t = &t[pos + 1..];
        if let Some(rest) = t.strip_prefix('$') {
            out.push('$');
            t = rest;
            continue;
        }
        let Some((name, rest)) = extract(t) else {
            out.push('$');
            continue;
        };
        t = rest;
        let mut num: i64 = 0;
        for b in name.bytes() {
            if !b.is_ascii_digit() || num >= 100_000_000 {
                num = -1;
                break;
            }
            num = num * 10 + i64::from(b - b'0');
        }
        if name.starts_with('0') && name.len() > 1 {
            num = -1;
        }
        let group = if num >= 0 {
            usize::try_from(num).ok().and_then(|n| caps.get(n))
        } else {
            names
                .iter()
                .position(|n| *n == Some(name))
                .and_then(|i| caps.get(i))
        };
        if let Some(g) = group {
            out.push_str(g.as_str());
        }
    }
    out.push_str(t);
}

fn extract(s: &str) -> Option<(&str, &str)> {
    let (brace, body) = match s.strip_prefix('{') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let end = body
        .char_indices()
        .find(|&(_, c)| !(c.is_alphabetic() || c.is_numeric() || c == '_'))
        .map_or(body.len(), |(i, _)| i);
    if end == 0 {
        return None;
    }
    let name = &body[..end];
    if brace {
        body[end..].strip_prefix('}').map(|rest| (name, rest))
    } else {
        Some((name, &body[end..]))
    }
}

/// `Regexp.Split`.
fn split(re: &regex::Regex, pattern: &str, s: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    if !pattern.is_empty() && s.is_empty() {
        return vec![String::new()];
    }
    let limit = if n < 0 { usize::MAX } else { n as usize };
    let mut out = Vec::new();
    let (mut beg, mut end) = (0usize, 0usize);
    for m in re.find_iter(s).take(limit) {
        if n > 0 && out.len() as i64 == n - 1 {
            break;
        }
        end = m.start();
        if m.end() != 0 {
            out.push(s[beg..end].to_string());
        }
        beg = m.end();
    }
    if end != s.len() {
        out.push(s[beg..].to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache is process-wide: these tests take turns so one does not empty it under the
    /// other.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn a_pattern_is_compiled_once_and_its_error_kept() {
        let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let a = compile("^a(b+)c$").expect("compiles");
        let b = compile("^a(b+)c$").expect("compiles");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(b.is_match("abbc"));
        let e1 = compile("a(b").expect_err("unbalanced");
        assert_eq!(compile("a(b").expect_err("unbalanced"), e1);
        assert_eq!(e1, compile_uncached("a(b").expect_err("unbalanced"));
    }

    #[test]
    fn more_patterns_than_the_cache_holds_still_compile_correctly() {
        let _turn = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        for i in 0..(3 * CACHED_PATTERNS) {
            let re = compile(&format!("^x{{{i}}}$")).expect("compiles");
            assert!(re.is_match(&"x".repeat(i)));
            assert!(!re.is_match(&"x".repeat(i + 1)));
        }
        let long = format!("^{}$", "y".repeat(CACHED_PATTERN_LEN));
        let a = compile(&long).expect("compiles");
        assert!(a.is_match(&"y".repeat(CACHED_PATTERN_LEN)));
        assert!(!Arc::ptr_eq(&a, &compile(&long).expect("compiles")));
    }
}
