//! A YAML writer for JSON values that reproduces the output of go-yaml v2
//! (`go.yaml.in/yaml/v2` 2.4, the encoder Flux's `chartutil.DigestValues` hashes), for the
//! block style it uses: maps with keys sorted in byte order, 2-space indentation,
//! sequences not indented under their key, scalars quoted when YAML 1.1 would read them as
//! something other than a string, literal blocks for multi-line strings, and plain
//! scalars folded at 80 columns.
//!
//! Covered: the quoting decisions of go-yaml's `resolve` (bools in every YAML 1.1
//! spelling, nulls, ints in every base, floats, base-60 floats, timestamps) and of
//! libyaml's scalar analysis (indicators, leading/trailing blanks, special characters),
//! double-quoted escapes, literal block hints and chomping, and Go's number formatting.
//! Checked against golden vectors generated with go-yaml v2.4.3 itself
//! (`tests/config_digest_vectors.rs`).

use serde_json::{Map, Number, Value};

const BEST_WIDTH: usize = 80;
const INDENT: usize = 2;

/// Writes a top-level JSON object the way go-yaml v2 marshals the equivalent
/// `yaml.MapSlice` with sorted keys.
pub(crate) fn to_yaml(map: &Map<String, Value>) -> String {
    let mut e = Emitter::default();
    if map.is_empty() {
        e.push("{}");
        e.newline();
        return e.out;
    }
    e.map_entries(map, 0, false);
    e.out
}

#[derive(Default)]
struct Emitter {
    out: String,
    column: usize,
}

impl Emitter {
    fn push(&mut self, s: &str) {
        self.out.push_str(s);
        self.column += s.chars().count();
    }

    fn push_char(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn newline(&mut self) {
        self.out.push('\n');
        self.column = 0;
    }

    /// Ends the line of a scalar, unless the scalar itself ended with a line break (as
    /// literal blocks do): libyaml only breaks before the next node when not already at
    /// the start of a line.
    fn end_line(&mut self) {
        if self.column > 0 {
            self.newline();
        }
    }

    fn indent_to(&mut self, indent: usize) {
        while self.column < indent {
            self.push_char(' ');
        }
    }

    /// Writes the entries of a map whose keys sit at column `indent`. When `inline` is
    /// true the first key continues the current line (a map inside a sequence item).
    fn map_entries(&mut self, map: &Map<String, Value>, indent: usize, inline: bool) {
        let mut keys: Vec<&String> = map.keys().collect();
        keys.sort();
        for (i, key) in keys.into_iter().enumerate() {
            if i > 0 || !inline {
                self.indent_to(indent);
            }
            // libyaml writes keys over 128 bytes or with line breaks as complex keys
            // (`? key` then `: value`); their values start on the `:` line.
            if key.len() > 128 || key.chars().any(is_break) {
                self.push("? ");
                self.scalar_string(key, indent + INDENT, false);
                self.end_line();
                self.indent_to(indent);
                self.push_char(':');
                match &map[key] {
                    Value::Object(m) if !m.is_empty() => {
                        self.indent_to(indent + INDENT);
                        self.map_entries(m, indent + INDENT, true);
                    }
                    Value::Array(a) if !a.is_empty() => self.seq_items(a, indent + INDENT),
                    v => {
                        self.push_char(' ');
                        self.leaf(v, indent + INDENT);
                        self.end_line();
                    }
                }
                continue;
            }
            self.scalar_string(key, indent, true);
            self.push_char(':');
            match &map[key] {
                Value::Object(m) if !m.is_empty() => {
                    self.newline();
                    self.map_entries(m, indent + INDENT, false);
                }
                Value::Array(a) if !a.is_empty() => {
                    self.newline();
                    self.seq_items(a, indent);
                }
                v => {
                    self.push_char(' ');
                    self.leaf(v, indent + INDENT);
                    self.end_line();
                }
            }
        }
    }

    /// Writes the items of a sequence whose dashes sit at column `indent`.
    fn seq_items(&mut self, items: &[Value], indent: usize) {
        for (i, item) in items.iter().enumerate() {
            if i > 0 || self.column < indent {
                self.indent_to(indent);
            }
            self.push("- ");
            match item {
                Value::Object(m) if !m.is_empty() => self.map_entries(m, indent + INDENT, true),
                Value::Array(a) if !a.is_empty() => self.seq_items(a, indent + INDENT),
                v => {
                    self.leaf(v, indent + INDENT);
                    self.end_line();
                }
            }
        }
    }

    /// Writes a scalar or an empty collection; continuation lines go to `indent`.
    fn leaf(&mut self, v: &Value, indent: usize) {
        match v {
            Value::Null => self.push("null"),
            Value::Bool(b) => self.push(if *b { "true" } else { "false" }),
            Value::Number(n) => {
                let s = number(n);
                self.push(&s);
            }
            Value::String(s) => self.scalar_string(s, indent, false),
            Value::Object(_) => self.push("{}"),
            Value::Array(_) => self.push("[]"),
        }
    }

    fn scalar_string(&mut self, s: &str, indent: usize, simple_key: bool) {
        let a = analyze(s);
        let can_use_plain = resolves_to_str(s) && !is_base60_float(s);
        let style = if s.contains('\n') {
            if a.block_allowed && !simple_key {
                Style::Literal
            } else {
                Style::Double
            }
        } else if can_use_plain {
            if !a.block_plain_allowed || (s.is_empty() && simple_key) {
                if a.single_quoted_allowed {
                    Style::Single
                } else {
                    Style::Double
                }
            } else {
                Style::Plain
            }
        } else {
            Style::Double
        };
        match style {
            Style::Plain => self.plain(s, indent, !simple_key),
            Style::Single => self.single(s, indent, !simple_key),
            Style::Double => self.double(s, indent, !simple_key),
            Style::Literal => self.literal(s, indent),
        }
    }

    /// libyaml's `write_indent`: a line break unless already at the indentation, then
    /// spaces up to it.
    fn write_indent(&mut self, indent: usize) {
        if self.column > indent {
            self.newline();
        }
        self.indent_to(indent);
    }

    /// Writes a line break character other than `\n` as itself (libyaml's `WRITE_BREAK`).
    fn write_break(&mut self, c: char) {
        self.out.push(c);
        self.column = 0;
    }

    fn plain(&mut self, s: &str, indent: usize, allow_breaks: bool) {
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                let next_is_space = chars.get(i + 1) == Some(&' ');
                if allow_breaks && !spaces && self.column > BEST_WIDTH && !next_is_space {
                    self.write_indent(indent);
                } else {
                    self.push_char(' ');
                }
                spaces = true;
            } else {
                self.push_char(c);
                spaces = false;
            }
        }
    }

    fn single(&mut self, s: &str, indent: usize, allow_breaks: bool) {
        self.push_char('\'');
        let chars: Vec<char> = s.chars().collect();
        let (mut spaces, mut breaks) = (false, false);
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                let next_is_space = chars.get(i + 1) == Some(&' ');
                if allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i != 0
                    && i + 1 != chars.len()
                    && !next_is_space
                {
                    self.write_indent(indent);
                } else {
                    self.push_char(' ');
                }
                spaces = true;
            } else if is_break(c) {
                if !breaks && c == '\n' {
                    self.newline();
                }
                if c == '\n' {
                    self.newline();
                } else {
                    self.write_break(c);
                }
                breaks = true;
            } else {
                if breaks {
                    self.write_indent(indent);
                }
                if c == '\'' {
                    self.push("''");
                } else {
                    self.push_char(c);
                }
                spaces = false;
                breaks = false;
            }
        }
        self.push_char('\'');
    }

    fn double(&mut self, s: &str, indent: usize, allow_breaks: bool) {
        self.push_char('"');
        let bom = s.starts_with('\u{feff}');
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            let code = c as u32;
            // go-yaml's `is_bom` looks at the start of the string, not at position `i`:
            // a string starting with a BOM has every character escaped.
            if bom || !is_printable(c) || is_break(c) || c == '"' || c == '\\' {
                let esc = match c {
                    '\0' => "\\0".to_owned(),
                    '\u{7}' => "\\a".to_owned(),
                    '\u{8}' => "\\b".to_owned(),
                    '\t' => "\\t".to_owned(),
                    '\n' => "\\n".to_owned(),
                    '\u{b}' => "\\v".to_owned(),
                    '\u{c}' => "\\f".to_owned(),
                    '\r' => "\\r".to_owned(),
                    '\u{1b}' => "\\e".to_owned(),
                    '"' => "\\\"".to_owned(),
                    '\\' => "\\\\".to_owned(),
                    '\u{85}' => "\\N".to_owned(),
                    '\u{a0}' => "\\_".to_owned(),
                    '\u{2028}' => "\\L".to_owned(),
                    '\u{2029}' => "\\P".to_owned(),
                    _ if code <= 0xFF => format!("\\x{code:02X}"),
                    _ if code <= 0xFFFF => format!("\\u{code:04X}"),
                    _ => format!("\\U{code:08X}"),
                };
                self.push(&esc);
                spaces = false;
            } else if c == ' ' {
                if allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i != 0
                    && i + 1 != chars.len()
                {
                    self.write_indent(indent);
                    if chars.get(i + 1) == Some(&' ') {
                        self.push_char('\\');
                    }
                } else {
                    self.push_char(' ');
                }
                spaces = true;
            } else {
                self.push_char(c);
                spaces = false;
            }
        }
        self.push_char('"');
    }

    fn literal(&mut self, s: &str, indent: usize) {
        self.push_char('|');
        let chars: Vec<char> = s.chars().collect();
        if matches!(chars.first(), Some(&c) if c == ' ' || is_break(c)) {
            self.push(&INDENT.to_string());
        }
        match chars.as_slice() {
            [.., last] if !is_break(*last) => self.push_char('-'),
            [_] => self.push_char('+'),
            [.., before, _] if is_break(*before) => self.push_char('+'),
            _ => {}
        }
        self.newline();
        let mut at_line_start = true;
        for &c in &chars {
            if c == '\n' {
                self.newline();
                at_line_start = true;
            } else if is_break(c) {
                self.write_break(c);
                at_line_start = true;
            } else {
                if at_line_start {
                    self.indent_to(indent);
                    at_line_start = false;
                }
                self.push_char(c);
            }
        }
    }
}

enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

/// Go's formatting of the numbers `sigs.k8s.io/yaml` hands to go-yaml. Values reach Flux
/// as JSON decoded into `float64`; `JSONObjectToYAMLObject` turns integral ones into
/// `int64` (or `uint64`), and go-yaml writes the rest with
/// `strconv.FormatFloat(f, 'g', -1, 64)`.
fn number(n: &Number) -> String {
    let f = n.as_f64().unwrap_or(0.0);
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        };
    }
    if f.fract() == 0.0 {
        // 2^63 and 2^64 are exact in f64.
        let two_63 = -(i64::MIN as f64);
        if (-two_63..two_63).contains(&f) {
            return (f as i64).to_string();
        }
        if (0.0..2.0 * two_63).contains(&f) {
            return (f as u64).to_string();
        }
    }
    go_format_g(f)
}

/// `strconv.FormatFloat(f, 'g', -1, 64)`.
pub(crate) fn go_format_g(f: f64) -> String {
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        format!("{f}")
    }
}

struct Analysis {
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_blank_or_end(c: Option<char>) -> bool {
    match c {
        None => true,
        Some(c) => c == ' ' || c == '\t' || is_break(c) || c == '\0',
    }
}

/// libyaml's `is_printable`, as go-yaml implements it on UTF-8 bytes.
fn is_printable(c: char) -> bool {
    let u = c as u32;
    u == 0x0A
        || (0x20..=0x7E).contains(&u)
        || (0xA0..=0xD7FF).contains(&u)
        || ((0xE000..=0xFFFD).contains(&u) && u != 0xFEFF)
}

/// libyaml's `yaml_emitter_analyze_scalar`, for the block context.
fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: false,
        };
    }
    let chars: Vec<char> = s.chars().collect();
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let mut special = false;
    let mut line_breaks = false;
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut previous_space, mut previous_break) = (false, false);
    let mut preceded_by_whitespace = true;
    for (i, &c) in chars.iter().enumerate() {
        let followed_by_whitespace = is_blank_or_end(chars.get(i + 1).copied());
        let first = i == 0;
        let last = i + 1 == chars.len();
        if first {
            if "#,[]{}&*!|>'\"%@`".contains(c) {
                block_indicators = true;
            }
            if (c == '?' || c == ':') && followed_by_whitespace {
                block_indicators = true;
            }
            if c == '-' && followed_by_whitespace {
                block_indicators = true;
            }
        } else {
            if c == ':' && followed_by_whitespace {
                block_indicators = true;
            }
            if c == '#' && preceded_by_whitespace {
                block_indicators = true;
            }
        }
        if !is_printable(c) {
            special = true;
        }
        if is_break(c) {
            line_breaks = true;
        }
        if c == ' ' {
            if first {
                leading_space = true;
            }
            if last {
                trailing_space = true;
            }
            if previous_break {
                break_space = true;
            }
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            if first {
                leading_break = true;
            }
            if last {
                trailing_break = true;
            }
            if previous_space {
                space_break = true;
            }
            previous_break = true;
            previous_space = false;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = is_blank_or_end(Some(c));
    }
    let mut a = Analysis {
        block_plain_allowed: true,
        single_quoted_allowed: true,
        block_allowed: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.block_plain_allowed = false;
    }
    if trailing_space {
        a.block_allowed = false;
    }
    if break_space {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
    }
    if space_break || special {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
        a.block_allowed = false;
    }
    if line_breaks {
        a.block_plain_allowed = false;
    }
    if block_indicators {
        a.block_plain_allowed = false;
    }
    a
}

/// True when go-yaml v2's `resolve` reads the plain scalar `s` as a string.
fn resolves_to_str(s: &str) -> bool {
    if s.is_empty() {
        return false; // null
    }
    // go-yaml only looks these up for strings whose first character hints at them, which
    // is why `<<` (the merge key) resolves to a plain string.
    const SPECIAL: [&str; 36] = [
        "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "n", "N", "no", "No", "NO", "off", "Off",
        "OFF", "true", "True", "TRUE", "false", "False", "FALSE", "null", "Null", "NULL", "~",
        ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
    ];
    if SPECIAL.contains(&s) || matches!(s, "-.Inf" | "-.INF") {
        return false;
    }
    let first = s.as_bytes()[0];
    match first {
        b'.' => !is_go_float(s),
        b'+' | b'-' | b'0'..=b'9' => {
            if is_timestamp(s) {
                return false;
            }
            let plain: String = s.chars().filter(|&c| c != '_').collect();
            !(is_go_int(&plain)
                || (is_yaml_style_float(&plain) && is_go_float(&plain))
                || is_binary(&plain))
        }
        _ => true,
    }
}

fn is_binary(s: &str) -> bool {
    let body = s.strip_prefix("-0b").or_else(|| s.strip_prefix("0b"));
    body.is_some_and(|b| !b.is_empty() && b.bytes().all(|c| c == b'0' || c == b'1'))
}

/// `strconv.ParseInt(s, 0, 64)` or `ParseUint(s, 0, 64)` succeeding (underscores removed).
fn is_go_int(s: &str) -> bool {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits) =
        if let Some(d) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, d)
        } else if let Some(d) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
            (2, d)
        } else if let Some(d) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
            (8, d)
        } else if body.len() > 1 && body.starts_with('0') {
            (8, &body[1..])
        } else {
            (10, body)
        };
    if digits.is_empty() {
        return false;
    }
    match u64::from_str_radix(digits, radix) {
        Ok(v) => !neg || v <= (i64::MAX as u64) + 1,
        Err(_) => false,
    }
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            digits(&mut i);
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// `strconv.ParseFloat(s, 64)` succeeding, for the decimal forms YAML scalars take.
fn is_go_float(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if matches!(body, "inf" | "infinity" | "nan") {
        return true;
    }
    is_yaml_style_float(s)
        || (s.starts_with(['+', '-', '.'])
            && s.parse::<f64>().is_ok()
            && !s.contains(['i', 'n', 'I', 'N']))
}

/// go-yaml v2's `parseTimestamp` formats: `2006-1-2T15:4:5.999999999Z07:00` (also `t`),
/// `2006-1-2 15:4:5.999999999`, `2006-1-2`.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let num = |i: &mut usize, min: usize, max: usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() && *i - start < max {
            *i += 1;
        }
        *i - start >= min
    };
    if !num(&mut i, 4, 4) || b.get(i) != Some(&b'-') {
        return false;
    }
    i += 1;
    if !num(&mut i, 1, 2) || b.get(i) != Some(&b'-') {
        return false;
    }
    i += 1;
    if !num(&mut i, 1, 2) {
        return false;
    }
    if i == b.len() {
        return true;
    }
    let sep = b[i];
    if !(sep == b'T' || sep == b't' || sep == b' ') {
        return false;
    }
    i += 1;
    for k in 0..3 {
        if !num(&mut i, 1, 2) {
            return false;
        }
        if k < 2 {
            if b.get(i) != Some(&b':') {
                return false;
            }
            i += 1;
        }
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !num(&mut i, 1, 9) {
            return false;
        }
    }
    if i == b.len() {
        return sep == b' ';
    }
    if sep == b' ' {
        return false;
    }
    match b[i] {
        b'Z' => i + 1 == b.len(),
        b'+' | b'-' => {
            i += 1;
            num(&mut i, 2, 2) && b.get(i) == Some(&b':') && {
                i += 1;
                num(&mut i, 2, 2) && i == b.len()
            }
        }
        _ => false,
    }
}

/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`
fn is_base60_float(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || !s.contains(':') {
        return false;
    }
    let mut i = 0;
    if b[0] == b'+' || b[0] == b'-' {
        i += 1;
    }
    if i >= b.len() || !b[i].is_ascii_digit() {
        return false;
    }
    i += 1;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
        i += 1;
    }
    let mut groups = 0;
    while i < b.len() && b[i] == b':' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() && i - start < 2 {
            i += 1;
        }
        let n = i - start;
        if n == 0 || (n == 2 && b[start] > b'5') {
            return false;
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
            i += 1;
        }
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn yaml(v: Value) -> String {
        match v {
            Value::Object(m) => to_yaml(&m),
            _ => unreachable!("tests pass objects"),
        }
    }

    #[test]
    fn chartutil_vector_is_reproduced() {
        let v = json!({"replicas": 3, "image": {"tag": "latest", "repository": "nginx"},
            "ports": [{"protocol": "TCP", "port": 8080}, {"port": 9090, "protocol": "UDP"}]});
        assert_eq!(
            yaml(v),
            "image:\n  repository: nginx\n  tag: latest\nports:\n- port: 8080\n  protocol: TCP\n- port: 9090\n  protocol: UDP\nreplicas: 3\n"
        );
    }

    #[test]
    fn strings_yaml11_would_misread_are_double_quoted() {
        let v = json!({"a": "true", "b": "yes", "c": "1", "d": "0x1F", "e": "1.5", "f": "",
            "g": "~", "h": "1:20", "i": "2024-01-02", "j": "on", "k": "1e3", "l": ".5",
            "m": "plain", "n": "-", "o": "0b101", "p": "12_000"});
        assert_eq!(
            yaml(v),
            "a: \"true\"\nb: \"yes\"\nc: \"1\"\nd: \"0x1F\"\ne: \"1.5\"\nf: \"\"\ng: \"~\"\nh: \"1:20\"\ni: \"2024-01-02\"\nj: \"on\"\nk: \"1e3\"\nl: \".5\"\nm: plain\n\"n\": '-'\no: \"0b101\"\np: \"12_000\"\n"
        );
    }

    #[test]
    fn indicators_and_blanks_force_single_quotes() {
        let v = json!({"a": "key: value", "b": " lead", "c": "trail ", "d": "*star",
            "e": "a # comment", "f": "it's", "g": "a:b", "h": "-x"});
        assert_eq!(
            yaml(v),
            "a: 'key: value'\nb: ' lead'\nc: 'trail '\nd: '*star'\ne: 'a # comment'\nf: it's\ng: a:b\nh: -x\n"
        );
    }

    #[test]
    fn multi_line_strings_are_literal_blocks() {
        let v = json!({"a": "line1\nline2\n", "b": "x\ny", "c": "x\n\n", "d": {"e": "p\nq\n"}});
        assert_eq!(
            yaml(v),
            "a: |\n  line1\n  line2\nb: |-\n  x\n  y\nc: |+\n  x\n\nd:\n  e: |\n    p\n    q\n"
        );
    }

    #[test]
    fn control_characters_are_escaped_in_double_quotes() {
        let v = json!({"a": "tab\there", "b": "trailing space \nx"});
        assert_eq!(yaml(v), "a: \"tab\\there\"\nb: \"trailing space \\nx\"\n");
    }

    #[test]
    fn numbers_are_written_the_go_way() {
        let v = json!({"a": 1.0, "b": 0.5, "c": 0.00001, "d": 1234567.5, "e": -3, "f": null,
            "g": true, "h": [], "i": {}});
        assert_eq!(
            yaml(v),
            "a: 1\nb: 0.5\nc: 1e-05\nd: 1.2345675e+06\ne: -3\nf: null\ng: true\nh: []\ni: {}\n"
        );
    }

    #[test]
    fn integers_beyond_float_precision_are_written_as_go_reads_them() {
        let v: Value =
            serde_json::from_str(r#"{"a": 12345678901234567890, "b": 9007199254740993}"#).unwrap();
        assert_eq!(yaml(v), "a: 12345678901234567168\nb: 9007199254740992\n");
    }

    #[test]
    fn nested_sequences_and_maps_are_laid_out_like_go_yaml() {
        let v = json!({"a": [[1, 2], {"b": [3]}], "k": {"z": 1, "a": 2}});
        assert_eq!(
            yaml(v),
            "a:\n- - 1\n  - 2\n- b:\n  - 3\nk:\n  a: 2\n  z: 1\n"
        );
    }

    #[test]
    fn long_plain_scalars_fold_after_column_80() {
        let words = vec!["word"; 30].join(" ");
        let out = yaml(json!({ "k": words }));
        let first = out.lines().next().unwrap();
        assert!(first.len() > 80 && first.len() <= 86, "{first:?}");
        assert!(out.lines().nth(1).unwrap().starts_with("  word"), "{out:?}");
    }

    #[test]
    fn keys_are_sorted_in_byte_order_and_quoted_like_values() {
        let v = json!({"b": 1, "B": 2, "on": 3, "a b": 4});
        assert_eq!(yaml(v), "B: 2\na b: 4\nb: 1\n\"on\": 3\n");
    }
}
