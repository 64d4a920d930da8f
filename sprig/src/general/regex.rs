//! Regular expressions with Go's RE2 syntax and semantics on top of the `regex` and
//! `regex-lite` crates: the pattern is translated first (Go's ASCII-only `\d \s \w \b`, octal
//! escapes, `\Q…\E`, literal braces that do not form a repetition), Go's parse errors are
//! reproduced for the common mistakes, and replacement templates are expanded with Go's
//! `$name`/`${name}` rules.
//!
//! A chart calls a handful of patterns on short texts, so compiling them is most of what they
//! cost: `regex` builds several engines per pattern (~0.1-0.2 ms each at the start of a
//! process), `regex-lite` one, about ten times cheaper. Both have Go's leftmost-first
//! semantics and the same syntax for what [`Pattern`] gives `regex-lite`: patterns without
//! Unicode classes or case folding (which it does not have) and with small counted
//! repetitions (so that no size limit could tell the two apart). Texts longer than
//! [`LITE_HAYSTACK`] are searched by `regex`, compiled on first need, whose lazy DFA is the
//! faster on long texts.

use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

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
                re.find_all(s, limit)
                    .into_iter()
                    .map(|m| s[m].to_string())
                    .collect(),
            ))
        });
    }
    for (name, get) in [("regexFind", panicking as Getter), ("mustRegexFind", must)] {
        add(map, name, Signature::fixed([Str, Str]), move |a| {
            let re = get(arg_str(a, 0))?;
            let s = arg_str(a, 1);
            Ok(Value::from(re.find(s).map_or("", |m| &s[m])))
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

type Getter = fn(&str) -> Result<Arc<Pattern>, FuncError>;

/// `regexp.Compile`, returning its error.
fn must(pattern: &str) -> Result<Arc<Pattern>, FuncError> {
    compile(pattern).map_err(FuncError::new)
}

/// `regexp.MustCompile`, whose panic text the template reports.
fn panicking(pattern: &str) -> Result<Arc<Pattern>, FuncError> {
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
type Compiled = Result<Arc<Pattern>, String>;

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
fn compile_uncached(pattern: &str) -> Result<Pattern, String> {
    Pattern::build(translate(pattern)?, pattern)
}

/// The `regex` crate's compilation of a translated pattern, with Go's messages for its errors.
fn compile_full(translated: &str, pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(translated)
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

/// Texts from this length on are searched with the `regex` crate (see the module
/// documentation): `regex-lite` has no DFA, and its search slows with the text's length.
const LITE_HAYSTACK: usize = 4096;

/// The product of a pattern's counted repetitions up to which `regex-lite` is used: far below
/// what makes Go or `regex` refuse a pattern as too large, whatever the rest of a pattern
/// that fits the cache ([`CACHED_PATTERN_LEN`]).
const LITE_REPEAT_PRODUCT: u64 = 1000;

/// The translated pattern as `regex-lite` reads it with the same meaning, when it can: no
/// Unicode class (`\p`), no case-insensitive flag (Go folds case by Unicode's rules,
/// `regex-lite` only ASCII letters), a short text and small counted repetitions. The ASCII
/// word boundaries translated as `(?-u:\b)` are `regex-lite`'s own `\b`.
fn lite_form(translated: &str) -> Option<String> {
    if translated.len() > CACHED_PATTERN_LEN {
        return None;
    }
    let b = translated.as_bytes();
    let mut product: u64 = 1;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => match b.get(i + 1) {
                Some(b'p' | b'P') => return None,
                Some(b'x') if b.get(i + 2) == Some(&b'{') => {
                    i += translated[i..].find('}')? + 1;
                    continue;
                }
                _ => i += 2,
            },
            b'(' if b.get(i + 1) == Some(&b'?') => {
                let flags = translated[i + 2..]
                    .bytes()
                    .take_while(|c| b"imsU-".contains(c));
                if flags.take_while(|&c| c != b'-').any(|c| c == b'i') {
                    return None;
                }
                i += 2;
            }
            b'{' => {
                let end = i + translated[i..].find('}')?;
                let body = &translated[i + 1..end];
                let count = body
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(|n| n.parse::<u64>().ok())
                    .try_fold(1u64, |m, n| Some(m.max(n?)))?;
                product = product.saturating_mul(count.max(1));
                if product > LITE_REPEAT_PRODUCT {
                    return None;
                }
                i = end + 1;
            }
            _ => i += 1,
        }
    }
    Some(
        translated
            .replace("(?-u:\\b)", "\\b")
            .replace("(?-u:\\B)", "\\B"),
    )
}

/// A compiled Go pattern (see the module documentation for its two engines).
#[derive(Debug)]
pub struct Pattern {
    engines: Engines,
    /// The pattern in the `regex` crate's syntax.
    translated: String,
}

/// A [`Pattern`]'s compiled forms.
#[derive(Debug)]
enum Engines {
    /// The `regex-lite` form, and the `regex` crate's, compiled the first time a long text is
    /// searched.
    Lite(regex_lite::Regex, OnceLock<regex::Regex>),
    /// The `regex` crate's form alone, for a pattern `regex-lite` is not given.
    Full(regex::Regex),
}

/// The engine searching a given text.
enum Engine<'p> {
    Lite(&'p regex_lite::Regex),
    Full(&'p regex::Regex),
}

/// `$body` with `$re` bound to the engine [`Pattern::engine`] picks for `$text` (the two
/// crates' types differ, their methods are the same).
macro_rules! with_engine {
    ($pattern:expr, $text:expr, |$re:ident| $body:expr) => {
        match $pattern.engine($text) {
            Engine::Lite($re) => $body,
            Engine::Full($re) => $body,
        }
    };
}

impl Pattern {
    /// A pattern already in the `regex` crate's syntax (as Go's is translated), such as a
    /// JSON schema's `pattern`; `None` when it does not compile.
    pub fn from_translated(translated: &str) -> Option<Pattern> {
        Pattern::build(translated.to_owned(), translated).ok()
    }

    /// Compiles `translated`; errors name `pattern`, the text as written.
    fn build(translated: String, pattern: &str) -> Result<Pattern, String> {
        if let Some(lite) = lite_form(&translated)
            && let Ok(lite) = regex_lite::Regex::new(&lite)
        {
            return Ok(Pattern {
                engines: Engines::Lite(lite, OnceLock::new()),
                translated,
            });
        }
        let full = compile_full(&translated, pattern)?;
        Ok(Pattern {
            engines: Engines::Full(full),
            translated,
        })
    }

    fn engine(&self, text: &str) -> Engine<'_> {
        match &self.engines {
            Engines::Lite(lite, _) if text.len() < LITE_HAYSTACK => Engine::Lite(lite),
            Engines::Lite(lite, full) => match self.full(full) {
                Some(full) => Engine::Full(full),
                None => Engine::Lite(lite),
            },
            Engines::Full(full) => Engine::Full(full),
        }
    }

    /// The `regex` crate's form, compiled on first use (`None` only if it refuses what
    /// `regex-lite` took, which its size limit far above ours rules out).
    fn full<'p>(&self, slot: &'p OnceLock<regex::Regex>) -> Option<&'p regex::Regex> {
        if let Some(full) = slot.get() {
            return Some(full);
        }
        let full = compile_full(&self.translated, "").ok()?;
        Some(slot.get_or_init(|| full))
    }

    /// `Regexp.MatchString`.
    pub fn is_match(&self, text: &str) -> bool {
        with_engine!(self, text, |re| re.is_match(text))
    }

    /// The leftmost-first match (`Regexp.FindStringIndex`).
    pub fn find(&self, text: &str) -> Option<Range<usize>> {
        with_engine!(self, text, |re| re.find(text).map(|m| m.range()))
    }

    /// Up to `limit` successive matches, as Go's `FindAllStringIndex` finds them.
    fn find_all(&self, text: &str, limit: usize) -> Vec<Range<usize>> {
        with_engine!(self, text, |re| re
            .find_iter(text)
            .take(limit)
            .map(|m| m.range())
            .collect())
    }

    /// Every match with its groups (`None`: a group that did not take part).
    fn captures_all(&self, text: &str) -> Vec<Vec<Option<Range<usize>>>> {
        with_engine!(self, text, |re| re
            .captures_iter(text)
            .map(|c| c.iter().map(|g| g.map(|m| m.range())).collect())
            .collect())
    }

    #[cfg(test)]
    fn is_lite(&self) -> bool {
        matches!(self.engines, Engines::Lite(..))
    }

    /// The groups' names, group 0 first (the same in both forms).
    fn group_names(&self) -> Vec<Option<&str>> {
        match &self.engines {
            Engines::Lite(lite, _) => lite.capture_names().collect(),
            Engines::Full(full) => full.capture_names().collect(),
        }
    }
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
fn replace_all(re: &Pattern, src: &str, repl: &str, literal: bool) -> String {
    let mut out = String::with_capacity(src.len());
    let mut last = 0;
    if literal || !repl.contains('$') {
        for m in re.find_all(src, usize::MAX) {
            out.push_str(&src[last..m.start]);
            out.push_str(repl);
            last = m.end;
        }
    } else {
        let names = re.group_names();
        for groups in re.captures_all(src) {
            let Some(Some(m)) = groups.first() else {
                continue;
            };
            out.push_str(&src[last..m.start]);
            expand(&groups, src, &names, repl, &mut out);
            last = m.end;
        }
    }
    out.push_str(&src[last..]);
    out
}

/// Go's `Regexp.expand`: `groups` are a match's groups in `src`.
fn expand(
    groups: &[Option<Range<usize>>],
    src: &str,
    names: &[Option<&str>],
    template: &str,
    out: &mut String,
) {
    let group = |i: usize| groups.get(i).cloned().flatten().map(|r| &src[r]);
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
        let found = if num >= 0 {
            usize::try_from(num).ok().and_then(group)
        } else {
            names.iter().position(|n| *n == Some(name)).and_then(group)
        };
        if let Some(g) = found {
            out.push_str(g);
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
fn split(re: &Pattern, pattern: &str, s: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    if !pattern.is_empty() && s.is_empty() {
        return vec![String::new()];
    }
    let limit = if n < 0 { usize::MAX } else { n as usize };
    let mut out = Vec::new();
    let (mut beg, mut end) = (0usize, 0usize);
    for m in re.find_all(s, limit) {
        if n > 0 && out.len() as i64 == n - 1 {
            break;
        }
        end = m.start;
        if m.end != 0 {
            out.push(s[beg..end].to_string());
        }
        beg = m.end;
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

    /// Patterns given to `regex-lite` find what the `regex` crate finds, groups included, on
    /// texts of ASCII and non-ASCII letters, spaces and new lines (generated patterns; the Go
    /// goldens of `tests/fixtures/regex` check both against Go itself).
    #[test]
    fn patterns_given_to_regex_lite_match_as_the_regex_crate_does() {
        let atoms = [
            "a",
            "b",
            ".",
            "\\d",
            "\\w",
            "\\W",
            "\\s",
            "\\b",
            "\\B",
            "[a-c]",
            "[^b]",
            "(a|b)",
            "(?P<n>a+)",
            "é",
            "^",
            "$",
            "[[:alpha:]]",
            "\\.",
            "x{2}",
            "(?s:.)",
            "(?m:^)",
            "(?m:$)",
            "(?U:a+)",
            "(b*)",
            "\\A",
            "\\z",
            "[\\w-]",
            "(?:ab|a)",
            "\\x{e9}",
        ];
        let ops = ["", "", "*", "+", "?", "*?", "+?", "{1,3}", "{2}", "{0,}"];
        let texts = [
            "",
            "a",
            "ab ba",
            "aab\nbba",
            "éa b_c.d",
            "x1y22 z",
            "aaaa",
            "b\n\na",
            "xx-é\té",
            "ba\r\nab é",
        ];
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let (mut lite, mut compared) = (0, 0);
        for _ in 0..3000 {
            let mut pattern = String::new();
            for _ in 0..1 + next(4) {
                pattern.push_str(atoms[next(atoms.len())]);
                pattern.push_str(ops[next(ops.len())]);
            }
            let Ok(p) = compile_uncached(&pattern) else {
                continue;
            };
            compared += 1;
            if !p.is_lite() {
                continue;
            }
            lite += 1;
            let full = Pattern {
                engines: Engines::Full(compile_full(&p.translated, &pattern).expect("compiles")),
                translated: p.translated.clone(),
            };
            for t in texts {
                assert_eq!(p.is_match(t), full.is_match(t), "{pattern:?} on {t:?}");
                assert_eq!(p.find(t), full.find(t), "{pattern:?} on {t:?}");
                assert_eq!(
                    p.find_all(t, usize::MAX),
                    full.find_all(t, usize::MAX),
                    "{pattern:?} on {t:?}"
                );
                assert_eq!(
                    p.captures_all(t),
                    full.captures_all(t),
                    "{pattern:?} on {t:?}"
                );
                assert_eq!(
                    replace_all(&p, t, "<$1>", false),
                    replace_all(&full, t, "<$1>", false)
                );
            }
            assert_eq!(p.group_names(), full.group_names());
        }
        assert!(
            compared > 1500 && lite * 10 > compared * 9,
            "{lite} of {compared}"
        );
    }

    #[test]
    fn unicode_classes_case_folding_and_big_repetitions_stay_with_the_regex_crate() {
        for pattern in [
            "\\pL",
            "\\p{Greek}",
            "(?i)k",
            "(?mi:a)",
            "(a{20}){100}",
            "(a{40}){40}",
        ] {
            let p = compile_uncached(pattern).expect("compiles");
            assert!(!p.is_lite(), "{pattern}");
        }
        for pattern in ["(?m-i:a)", "a{10}b{10}c{10}", "\\bx\\B", "\\x{41}"] {
            let p = compile_uncached(pattern).expect("compiles");
            assert!(p.is_lite(), "{pattern}");
        }
        // (?i) folds by Unicode's rules in Go: `k` matches the Kelvin sign.
        assert!(
            compile_uncached("(?i)k")
                .expect("compiles")
                .is_match("\u{212A}")
        );
    }

    #[test]
    fn long_texts_are_searched_by_the_regex_crate_with_the_same_result() {
        let p = compile_uncached("(b+)c").expect("compiles");
        let full_compiled =
            |p: &Pattern| matches!(&p.engines, Engines::Lite(_, f) if f.get().is_some());
        assert!(p.is_lite() && !full_compiled(&p));
        let long = format!("{}abbc{}", "a".repeat(LITE_HAYSTACK), "x".repeat(10));
        assert_eq!(p.find(&long), Some(LITE_HAYSTACK + 1..LITE_HAYSTACK + 4));
        assert!(full_compiled(&p));
        assert_eq!(replace_all(&p, &long, "[$1]", false).len(), long.len() + 1);
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
