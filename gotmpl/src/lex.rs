//! The lexer: template text to tokens, following Go's `text/template/parse/lex.go`
//! (Go ≥ 1.22 behaviour: trim markers with any ASCII space, newlines inside actions,
//! `break`/`continue` keywords, `=` assignment, `_` separators and `0o`/`0b` prefixes).

use std::borrow::Cow;

/// Kinds of tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ItemType {
    Error,
    Bool,
    Char,
    CharConstant,
    Complex,
    Assign,
    Declare,
    Eof,
    Field,
    Identifier,
    LeftDelim,
    LeftParen,
    Number,
    Pipe,
    RawString,
    RightDelim,
    RightParen,
    Space,
    String,
    Text,
    Variable,
    // Keywords.
    Block,
    Break,
    Continue,
    Dot,
    Define,
    Else,
    End,
    If,
    Nil,
    Range,
    Template,
    With,
}

impl ItemType {
    fn is_keyword(self) -> bool {
        matches!(
            self,
            ItemType::Block
                | ItemType::Break
                | ItemType::Continue
                | ItemType::Dot
                | ItemType::Define
                | ItemType::Else
                | ItemType::End
                | ItemType::If
                | ItemType::Nil
                | ItemType::Range
                | ItemType::Template
                | ItemType::With
        )
    }
}

/// A token: its type, byte offset, text and the line it starts on.
#[derive(Clone, Debug)]
pub(crate) struct Item<'a> {
    pub typ: ItemType,
    pub pos: usize,
    /// Borrowed from the input (owned only for error messages), so tokens copy cheaply.
    pub val: Cow<'a, str>,
    pub line: usize,
}

impl std::fmt::Display for Item<'_> {
    /// Go's `item.String()`, used in "unexpected X in Y" messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.typ {
            ItemType::Eof => f.write_str("EOF"),
            ItemType::Error => f.write_str(&self.val),
            t if t.is_keyword() => write!(f, "<{}>", self.val),
            _ => {
                if self.val.chars().count() > 10 {
                    let head: String = self.val.chars().take(10).collect();
                    write!(f, "{}...", crate::gofmt::quote(&head))
                } else {
                    f.write_str(&crate::gofmt::quote(&self.val))
                }
            }
        }
    }
}

const LEFT_DELIM: &str = "{{";

/// `haystack.find(needle)` for a short ASCII needle: a byte search for its first byte, then a
/// comparison (the generic substring search costs more on template text).
fn find_ascii(haystack: &str, needle: &str) -> Option<usize> {
    let first = char::from(*needle.as_bytes().first()?);
    let mut from = 0;
    while let Some(i) = haystack[from..].find(first) {
        let at = from + i;
        if haystack[at..].starts_with(needle) {
            return Some(at);
        }
        // `first` is ASCII, so the next byte starts a character.
        from = at + 1;
    }
    None
}
const RIGHT_DELIM: &str = "}}";
const LEFT_COMMENT: &str = "/*";
const RIGHT_COMMENT: &str = "*/";

fn is_space(c: Option<char>) -> bool {
    matches!(c, Some(' ' | '\t' | '\r' | '\n'))
}

fn is_alnum(c: Option<char>) -> bool {
    match c {
        Some(c) => c == '_' || c.is_alphabetic() || c.is_numeric(),
        None => false,
    }
}

fn has_left_trim_marker(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && b[0] == b'-' && matches!(b[1], b' ' | b'\t' | b'\r' | b'\n')
}

fn has_right_trim_marker(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && matches!(b[0], b' ' | b'\t' | b'\r' | b'\n') && b[1] == b'-'
}

const TRIM_MARKER_LEN: usize = 2;

fn right_trim_len(s: &str) -> usize {
    s.len() - s.trim_end_matches([' ', '\t', '\r', '\n']).len()
}

fn left_trim_len(s: &str) -> usize {
    s.len() - s.trim_start_matches([' ', '\t', '\r', '\n']).len()
}

#[derive(Clone, Copy)]
enum State {
    Text,
    LeftDelim,
    Comment,
    RightDelim,
    InsideAction,
    Space,
    Identifier,
    Field,
    Variable,
    Char,
    Number,
    Quote,
    RawQuote,
}

/// Lexes the whole input. The sequence ends with an `Eof` or an `Error` item.
pub(crate) fn lex(input: &str, break_ok: bool, continue_ok: bool) -> Vec<Item<'_>> {
    let mut l = Lexer {
        input,
        pos: 0,
        start: 0,
        line: 1,
        start_line: 1,
        at_eof: false,
        paren_depth: 0,
        items: Vec::new(),
        break_ok,
        continue_ok,
    };
    let mut state = Some(State::Text);
    while let Some(s) = state {
        state = l.step(s);
    }
    l.items
}

struct Lexer<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    line: usize,
    start_line: usize,
    at_eof: bool,
    paren_depth: i64,
    items: Vec<Item<'a>>,
    break_ok: bool,
    continue_ok: bool,
}

impl<'a> Lexer<'a> {
    fn next(&mut self) -> Option<char> {
        match self.input[self.pos..].chars().next() {
            None => {
                self.at_eof = true;
                None
            }
            Some(c) => {
                self.pos += c.len_utf8();
                if c == '\n' {
                    self.line += 1;
                }
                Some(c)
            }
        }
    }

    fn peek(&self) -> Option<char> {
        self.input[self.pos..].chars().next()
    }

    fn backup(&mut self) {
        if !self.at_eof
            && self.pos > 0
            && let Some(c) = self.input[..self.pos].chars().next_back()
        {
            self.pos -= c.len_utf8();
            if c == '\n' {
                self.line -= 1;
            }
        }
        self.at_eof = false;
    }

    fn this_item(&mut self, typ: ItemType) -> Item<'a> {
        let item = Item {
            typ,
            pos: self.start,
            val: Cow::Borrowed(&self.input[self.start..self.pos]),
            line: self.start_line,
        };
        self.start = self.pos;
        self.start_line = self.line;
        item
    }

    fn emit(&mut self, typ: ItemType) {
        let item = self.this_item(typ);
        self.items.push(item);
    }

    fn ignore(&mut self) {
        self.line += self.input[self.start..self.pos]
            .bytes()
            .filter(|&b| b == b'\n')
            .count();
        self.start = self.pos;
        self.start_line = self.line;
    }

    fn accept(&mut self, valid: &str) -> bool {
        match self.next() {
            Some(c) if valid.contains(c) => true,
            _ => {
                self.backup();
                false
            }
        }
    }

    fn accept_run(&mut self, valid: &str) {
        loop {
            match self.next() {
                Some(c) if valid.contains(c) => {}
                _ => {
                    self.backup();
                    return;
                }
            }
        }
    }

    fn errorf(&mut self, msg: String) -> Option<State> {
        self.items.push(Item {
            typ: ItemType::Error,
            pos: self.start,
            val: Cow::Owned(msg),
            line: self.start_line,
        });
        None
    }

    fn at_right_delim(&self) -> (bool, bool) {
        let rest = &self.input[self.pos..];
        if has_right_trim_marker(rest) && rest[TRIM_MARKER_LEN..].starts_with(RIGHT_DELIM) {
            return (true, true);
        }
        if rest.starts_with(RIGHT_DELIM) {
            return (true, false);
        }
        (false, false)
    }

    fn at_terminator(&self) -> bool {
        let r = self.peek();
        if is_space(r) {
            return true;
        }
        match r {
            None | Some('.' | ',' | '|' | ':' | ')' | '(') => true,
            Some(c) => RIGHT_DELIM.starts_with(c),
        }
    }

    fn step(&mut self, s: State) -> Option<State> {
        match s {
            State::Text => self.lex_text(),
            State::LeftDelim => self.lex_left_delim(),
            State::Comment => self.lex_comment(),
            State::RightDelim => self.lex_right_delim(),
            State::InsideAction => self.lex_inside_action(),
            State::Space => self.lex_space(),
            State::Identifier => self.lex_identifier(),
            State::Field => self.lex_field_or_variable(ItemType::Field),
            State::Variable => {
                if self.at_terminator() {
                    self.emit(ItemType::Variable);
                    return Some(State::InsideAction);
                }
                self.lex_field_or_variable(ItemType::Variable)
            }
            State::Char => self.lex_char(),
            State::Number => self.lex_number(),
            State::Quote => self.lex_quote(),
            State::RawQuote => self.lex_raw_quote(),
        }
    }

    fn lex_text(&mut self) -> Option<State> {
        if let Some(x) = find_ascii(&self.input[self.pos..], LEFT_DELIM) {
            if x > 0 {
                self.pos += x;
                let delim_end = self.pos + LEFT_DELIM.len();
                let trim = if has_left_trim_marker(&self.input[delim_end..]) {
                    right_trim_len(&self.input[self.start..self.pos])
                } else {
                    0
                };
                self.pos -= trim;
                self.line += self.input[self.start..self.pos]
                    .bytes()
                    .filter(|&b| b == b'\n')
                    .count();
                let item = self.this_item(ItemType::Text);
                self.pos += trim;
                self.ignore();
                if !item.val.is_empty() {
                    self.items.push(item);
                }
            }
            return Some(State::LeftDelim);
        }
        self.pos = self.input.len();
        if self.pos > self.start {
            self.line += self.input[self.start..self.pos]
                .bytes()
                .filter(|&b| b == b'\n')
                .count();
            self.emit(ItemType::Text);
        }
        self.emit(ItemType::Eof);
        None
    }

    fn lex_left_delim(&mut self) -> Option<State> {
        self.pos += LEFT_DELIM.len();
        let trim = has_left_trim_marker(&self.input[self.pos..]);
        let after = if trim { TRIM_MARKER_LEN } else { 0 };
        if self.input[self.pos + after..].starts_with(LEFT_COMMENT) {
            self.pos += after;
            self.ignore();
            return Some(State::Comment);
        }
        let item = self.this_item(ItemType::LeftDelim);
        self.items.push(item);
        self.pos += after;
        self.ignore();
        self.paren_depth = 0;
        Some(State::InsideAction)
    }

    fn lex_comment(&mut self) -> Option<State> {
        self.pos += LEFT_COMMENT.len();
        let Some(x) = find_ascii(&self.input[self.pos..], RIGHT_COMMENT) else {
            return self.errorf("unclosed comment".to_string());
        };
        self.pos += x + RIGHT_COMMENT.len();
        let (delim, trim) = self.at_right_delim();
        if !delim {
            return self.errorf("comment ends before closing delimiter".to_string());
        }
        // The comment item is not emitted (Go only emits it with ParseComments).
        self.line += self.input[self.start..self.pos]
            .bytes()
            .filter(|&b| b == b'\n')
            .count();
        self.start = self.pos;
        self.start_line = self.line;
        if trim {
            self.pos += TRIM_MARKER_LEN;
        }
        self.pos += RIGHT_DELIM.len();
        if trim {
            self.pos += left_trim_len(&self.input[self.pos..]);
        }
        self.ignore();
        Some(State::Text)
    }

    fn lex_right_delim(&mut self) -> Option<State> {
        let (_, trim) = self.at_right_delim();
        if trim {
            self.pos += TRIM_MARKER_LEN;
            self.ignore();
        }
        self.pos += RIGHT_DELIM.len();
        self.emit(ItemType::RightDelim);
        if trim {
            self.pos += left_trim_len(&self.input[self.pos..]);
            self.ignore();
        }
        Some(State::Text)
    }

    fn lex_inside_action(&mut self) -> Option<State> {
        let (delim, _) = self.at_right_delim();
        if delim {
            if self.paren_depth == 0 {
                return Some(State::RightDelim);
            }
            return self.errorf("unclosed left paren".to_string());
        }
        let r = self.next();
        match r {
            None => self.errorf("unclosed action".to_string()),
            Some(c) if is_space(Some(c)) => {
                self.backup();
                Some(State::Space)
            }
            Some('=') => {
                self.emit(ItemType::Assign);
                Some(State::InsideAction)
            }
            Some(':') => {
                if self.next() != Some('=') {
                    return self.errorf("expected :=".to_string());
                }
                self.emit(ItemType::Declare);
                Some(State::InsideAction)
            }
            Some('|') => {
                self.emit(ItemType::Pipe);
                Some(State::InsideAction)
            }
            Some('"') => Some(State::Quote),
            Some('`') => Some(State::RawQuote),
            Some('$') => Some(State::Variable),
            Some('\'') => Some(State::Char),
            Some('.') => {
                if let Some(&b) = self.input.as_bytes().get(self.pos)
                    && !b.is_ascii_digit()
                {
                    return Some(State::Field);
                }
                self.backup();
                Some(State::Number)
            }
            Some(c) if c == '+' || c == '-' || c.is_ascii_digit() => {
                self.backup();
                Some(State::Number)
            }
            Some(c) if is_alnum(Some(c)) => {
                self.backup();
                Some(State::Identifier)
            }
            Some('(') => {
                self.paren_depth += 1;
                self.emit(ItemType::LeftParen);
                Some(State::InsideAction)
            }
            Some(')') => {
                self.paren_depth -= 1;
                if self.paren_depth < 0 {
                    return self.errorf("unexpected right paren".to_string());
                }
                self.emit(ItemType::RightParen);
                Some(State::InsideAction)
            }
            Some(c) if c.is_ascii() && !c.is_ascii_control() => {
                self.emit(ItemType::Char);
                Some(State::InsideAction)
            }
            Some(c) => self.errorf(format!(
                "unrecognized character in action: {}",
                unicode_hash(c)
            )),
        }
    }

    fn lex_space(&mut self) -> Option<State> {
        let mut n = 0;
        while is_space(self.peek()) {
            self.next();
            n += 1;
        }
        // A trim-marked right delimiter starts with a space: " -}}".
        let before = &self.input[self.pos - 1..];
        if has_right_trim_marker(before) && before[TRIM_MARKER_LEN..].starts_with(RIGHT_DELIM) {
            self.backup();
            if n == 1 {
                return Some(State::RightDelim);
            }
        }
        self.emit(ItemType::Space);
        Some(State::InsideAction)
    }

    fn lex_identifier(&mut self) -> Option<State> {
        loop {
            let r = self.next();
            if is_alnum(r) {
                continue;
            }
            self.backup();
            if !self.at_terminator() {
                return self.errorf(format!("bad character {}", unicode_hash_opt(r)));
            }
            let word = &self.input[self.start..self.pos];
            let typ = match word {
                "block" => ItemType::Block,
                "break" if self.break_ok => ItemType::Break,
                "continue" if self.continue_ok => ItemType::Continue,
                "define" => ItemType::Define,
                "else" => ItemType::Else,
                "end" => ItemType::End,
                "if" => ItemType::If,
                "range" => ItemType::Range,
                "nil" => ItemType::Nil,
                "template" => ItemType::Template,
                "with" => ItemType::With,
                "true" | "false" => ItemType::Bool,
                _ => ItemType::Identifier,
            };
            self.emit(typ);
            return Some(State::InsideAction);
        }
    }

    fn lex_field_or_variable(&mut self, typ: ItemType) -> Option<State> {
        if self.at_terminator() {
            self.emit(if typ == ItemType::Variable {
                ItemType::Variable
            } else {
                ItemType::Dot
            });
            return Some(State::InsideAction);
        }
        let mut r;
        loop {
            r = self.next();
            if !is_alnum(r) {
                self.backup();
                break;
            }
        }
        if !self.at_terminator() {
            return self.errorf(format!("bad character {}", unicode_hash_opt(r)));
        }
        self.emit(typ);
        Some(State::InsideAction)
    }

    fn lex_char(&mut self) -> Option<State> {
        loop {
            match self.next() {
                Some('\\') => {
                    let r = self.next();
                    if r.is_some() && r != Some('\n') {
                        continue;
                    }
                    return self.errorf("unterminated character constant".to_string());
                }
                None | Some('\n') => {
                    return self.errorf("unterminated character constant".to_string());
                }
                Some('\'') => break,
                _ => {}
            }
        }
        self.emit(ItemType::CharConstant);
        Some(State::InsideAction)
    }

    fn scan_number(&mut self) -> bool {
        self.accept("+-");
        let mut digits = "0123456789_";
        if self.accept("0") {
            if self.accept("xX") {
                digits = "0123456789abcdefABCDEF_";
            } else if self.accept("oO") {
                digits = "01234567_";
            } else if self.accept("bB") {
                digits = "01_";
            }
        }
        self.accept_run(digits);
        if self.accept(".") {
            self.accept_run(digits);
        }
        if digits.len() == 11 && self.accept("eE") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        if digits.len() == 23 && self.accept("pP") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        self.accept("i");
        if is_alnum(self.peek()) {
            self.next();
            return false;
        }
        true
    }

    fn lex_number(&mut self) -> Option<State> {
        if !self.scan_number() {
            let text = crate::gofmt::quote(&self.input[self.start..self.pos]);
            return self.errorf(format!("bad number syntax: {text}"));
        }
        if matches!(self.peek(), Some('+' | '-')) {
            if !self.scan_number() || !self.input[..self.pos].ends_with('i') {
                let text = crate::gofmt::quote(&self.input[self.start..self.pos]);
                return self.errorf(format!("bad number syntax: {text}"));
            }
            self.emit(ItemType::Complex);
        } else {
            self.emit(ItemType::Number);
        }
        Some(State::InsideAction)
    }

    fn lex_quote(&mut self) -> Option<State> {
        loop {
            match self.next() {
                Some('\\') => {
                    let r = self.next();
                    if r.is_some() && r != Some('\n') {
                        continue;
                    }
                    return self.errorf("unterminated quoted string".to_string());
                }
                None | Some('\n') => return self.errorf("unterminated quoted string".to_string()),
                Some('"') => break,
                _ => {}
            }
        }
        self.emit(ItemType::String);
        Some(State::InsideAction)
    }

    fn lex_raw_quote(&mut self) -> Option<State> {
        loop {
            match self.next() {
                None => return self.errorf("unterminated raw quoted string".to_string()),
                Some('`') => break,
                _ => {}
            }
        }
        self.emit(ItemType::RawString);
        Some(State::InsideAction)
    }
}

/// Go's `%#U`: `U+0041 'A'`.
pub(crate) fn unicode_hash(c: char) -> String {
    if crate::gofmt::is_print(c) {
        format!("U+{:04X} '{c}'", c as u32)
    } else {
        format!("U+{:04X}", c as u32)
    }
}

fn unicode_hash_opt(c: Option<char>) -> String {
    match c {
        Some(c) => unicode_hash(c),
        None => "U+FFFFFFFFFFFFFFFF".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_ascii_agrees_with_str_find() {
        for hay in ["", "{", "a{b{{c", "{{", "é{ü{{", "x*/", "*", "/*/"] {
            for needle in [LEFT_DELIM, RIGHT_COMMENT] {
                assert_eq!(
                    find_ascii(hay, needle),
                    hay.find(needle),
                    "{hay:?} {needle:?}"
                );
            }
        }
    }

    fn types(s: &str) -> Vec<ItemType> {
        lex(s, true, true).into_iter().map(|i| i.typ).collect()
    }

    #[test]
    fn trim_markers_remove_surrounding_whitespace() {
        let items = lex("a  \n{{- 3 -}}\n\t b", true, true);
        let texts: Vec<&str> = items
            .iter()
            .filter(|i| i.typ == ItemType::Text)
            .map(|i| i.val.as_ref())
            .collect();
        assert_eq!(texts, ["a", "b"]);
    }

    #[test]
    fn minus_without_space_is_a_number() {
        use ItemType::*;
        assert_eq!(types("{{-3}}"), [LeftDelim, Number, RightDelim, Eof]);
    }

    #[test]
    fn fields_are_separate_tokens() {
        use ItemType::*;
        assert_eq!(
            types("{{.a.b}}"),
            [LeftDelim, Field, Field, RightDelim, Eof]
        );
        assert_eq!(
            types("{{$x.a}}"),
            [LeftDelim, Variable, Field, RightDelim, Eof]
        );
    }

    #[test]
    fn break_is_an_identifier_when_a_function_has_that_name() {
        use ItemType::*;
        assert_eq!(lex("{{break}}", false, true)[1].typ, Identifier);
        assert_eq!(types("{{break}}"), [LeftDelim, Break, RightDelim, Eof]);
    }

    #[test]
    fn lexer_errors_have_go_messages() {
        let last = |s: &str| {
            lex(s, true, true)
                .pop()
                .map(|i| i.val.into_owned())
                .unwrap_or_default()
        };
        assert_eq!(last("{{"), "unclosed action");
        assert_eq!(last("{{\"abc"), "unterminated quoted string");
        assert_eq!(last("{{`abc"), "unterminated raw quoted string");
        assert_eq!(last("{{/* x"), "unclosed comment");
        assert_eq!(
            last("{{/* x */ }}"),
            "comment ends before closing delimiter"
        );
        assert_eq!(last("{{3x}}"), "bad number syntax: \"3x\"");
        assert_eq!(last("{{ ) }}"), "unexpected right paren");
        assert_eq!(last("{{ ( }}"), "unclosed left paren");
        assert_eq!(
            last("{{ \u{1} }}"),
            "unrecognized character in action: U+0001"
        );
        assert_eq!(last("{{ .a# }}"), "bad character U+0023 '#'");
    }
}
