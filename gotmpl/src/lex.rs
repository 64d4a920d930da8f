//! The lexer: template text to tokens, following Go's `text/template/parse/lex.go`
//! (Go ≥ 1.22 behaviour: trim markers with any ASCII space, newlines inside actions,
//! `break`/`continue` keywords, `=` assignment, `_` separators and `0o`/`0b` prefixes).

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

/// A token: its type, byte offset, text and the line it starts on. Tokens borrow the input
/// and are `Copy`; an `Error` token's message is kept by the [`Lexer`] ([`Lexer::error`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item<'a> {
    pub typ: ItemType,
    pub pos: usize,
    pub val: &'a str,
    pub line: usize,
}

impl Item<'_> {
    /// Go's `item.String()`, used in "unexpected X in Y" messages; `error` is the lexer's
    /// message for an `Error` token.
    pub(crate) fn describe(&self, error: &str) -> String {
        match self.typ {
            ItemType::Eof => "EOF".to_string(),
            ItemType::Error => error.to_string(),
            t if t.is_keyword() => format!("<{}>", self.val),
            _ => {
                if self.val.chars().count() > 10 {
                    let head: String = self.val.chars().take(10).collect();
                    format!("{}...", crate::gofmt::quote(&head))
                } else {
                    crate::gofmt::quote(self.val)
                }
            }
        }
    }
}

const LEFT_DELIM: &str = "{{";

/// The offset of the next `{{` in `haystack`: a byte search for `{`, then a look at the next
/// byte (the generic substring search costs more on template text).
fn find_left_delim(haystack: &str) -> Option<usize> {
    let haystack = haystack.as_bytes();
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'{', &haystack[from..]) {
        let at = from + i;
        if haystack.get(at + 1) == Some(&b'{') {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The offset of the next `*/` in `haystack`.
fn find_right_comment(haystack: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, RIGHT_COMMENT.as_bytes())
}

const RIGHT_DELIM: &str = "}}";
const LEFT_COMMENT: &str = "/*";
const RIGHT_COMMENT: &str = "*/";

fn is_space_byte(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_alnum(c: Option<char>) -> bool {
    match c {
        Some(c) if c.is_ascii() => c == '_' || c.is_ascii_alphanumeric(),
        Some(c) => c.is_alphabetic() || c.is_numeric(),
        None => false,
    }
}

fn has_left_trim_marker(b: &[u8]) -> bool {
    b.len() >= 2 && b[0] == b'-' && is_space_byte(b[1])
}

fn has_right_trim_marker(b: &[u8]) -> bool {
    b.len() >= 2 && is_space_byte(b[0]) && b[1] == b'-'
}

const TRIM_MARKER_LEN: usize = 2;

fn right_trim_len(b: &[u8]) -> usize {
    b.iter().rev().take_while(|&&c| is_space_byte(c)).count()
}

fn left_trim_len(b: &[u8]) -> usize {
    b.iter().take_while(|&&c| is_space_byte(c)).count()
}

fn count_newlines(b: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', b).count()
}

/// What a state function did: emit a token, or reach text again without one (after a
/// comment).
enum Step<'a> {
    Emit(Item<'a>),
    Text,
}

/// Bytes that continue an identifier, a field or a variable name (ASCII letters, digits,
/// `_`); other characters are decided by [`is_alnum`].
const ALNUM: [bool; 128] = {
    let mut t = [false; 128];
    let mut b = 0;
    while b < 128 {
        t[b] = (b as u8).is_ascii_alphanumeric() || b == b'_' as usize;
        b += 1;
    }
    t
};

/// Go's lexer, run on demand: [`Lexer::next_item`] runs the state machine until it yields
/// one token (Go runs it as a coroutine feeding the parser). After `Eof` or an `Error` it
/// keeps returning `Eof` at offset 0.
pub(crate) struct Lexer<'a> {
    input: &'a str,
    bytes: &'a [u8],
    pos: usize,
    start: usize,
    line: usize,
    start_line: usize,
    at_eof: bool,
    paren_depth: i64,
    inside_action: bool,
    /// Set once `Eof` or an `Error` was returned: the line of that token.
    finished: Option<usize>,
    error: String,
    break_ok: bool,
    continue_ok: bool,
}

/// Lexes the whole input. The sequence ends with an `Eof` or an `Error` item.
#[cfg(test)]
pub(crate) fn lex(input: &str, break_ok: bool, continue_ok: bool) -> (Vec<Item<'_>>, String) {
    let mut l = Lexer::new(input, break_ok, continue_ok);
    let mut items = Vec::new();
    loop {
        let item = l.next_item();
        items.push(item);
        if matches!(item.typ, ItemType::Eof | ItemType::Error) {
            return (items, l.error);
        }
    }
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(input: &'a str, break_ok: bool, continue_ok: bool) -> Self {
        Lexer {
            input,
            bytes: input.as_bytes(),
            pos: 0,
            start: 0,
            line: 1,
            start_line: 1,
            at_eof: false,
            paren_depth: 0,
            inside_action: false,
            finished: None,
            error: String::new(),
            break_ok,
            continue_ok,
        }
    }

    /// The message of the `Error` token, once one was returned.
    pub(crate) fn error(&self) -> &str {
        &self.error
    }

    /// The next token.
    pub(crate) fn next_item(&mut self) -> Item<'a> {
        if let Some(line) = self.finished {
            return Item {
                typ: ItemType::Eof,
                pos: 0,
                val: "",
                line,
            };
        }
        loop {
            let step = if self.inside_action {
                self.lex_inside_action()
            } else {
                self.lex_text()
            };
            if let Step::Emit(item) = step {
                if matches!(item.typ, ItemType::Eof | ItemType::Error) {
                    self.finished = Some(item.line);
                }
                return item;
            }
        }
    }

    fn next(&mut self) -> Option<char> {
        match self.bytes.get(self.pos) {
            None => {
                self.at_eof = true;
                None
            }
            Some(&b) if b < 0x80 => {
                self.pos += 1;
                if b == b'\n' {
                    self.line += 1;
                }
                Some(char::from(b))
            }
            Some(_) => {
                let c = self.input[self.pos..].chars().next()?;
                self.pos += c.len_utf8();
                Some(c)
            }
        }
    }

    fn peek(&self) -> Option<char> {
        match self.bytes.get(self.pos) {
            None => None,
            Some(&b) if b < 0x80 => Some(char::from(b)),
            Some(_) => self.input[self.pos..].chars().next(),
        }
    }

    fn peek_byte(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn backup(&mut self) {
        if !self.at_eof && self.pos > 0 {
            let b = self.bytes[self.pos - 1];
            if b < 0x80 {
                self.pos -= 1;
                if b == b'\n' {
                    self.line -= 1;
                }
            } else if let Some(c) = self.input[..self.pos].chars().next_back() {
                self.pos -= c.len_utf8();
            }
        }
        self.at_eof = false;
    }

    fn this_item(&mut self, typ: ItemType) -> Item<'a> {
        let item = Item {
            typ,
            pos: self.start,
            val: &self.input[self.start..self.pos],
            line: self.start_line,
        };
        self.start = self.pos;
        self.start_line = self.line;
        item
    }

    /// Emits the pending token.
    fn emit(&mut self, typ: ItemType) -> Step<'a> {
        Step::Emit(self.this_item(typ))
    }

    fn ignore(&mut self) {
        self.line += count_newlines(&self.bytes[self.start..self.pos]);
        self.start = self.pos;
        self.start_line = self.line;
    }

    /// Consumes one byte if it is one of `valid` (all ASCII).
    fn accept(&mut self, valid: &[u8]) -> bool {
        match self.peek_byte() {
            Some(b) if valid.contains(&b) => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }

    fn accept_run(&mut self, valid: &[u8]) {
        while self.accept(valid) {}
    }

    fn errorf(&mut self, msg: String) -> Step<'a> {
        self.error = msg;
        Step::Emit(Item {
            typ: ItemType::Error,
            pos: self.start,
            val: "",
            line: self.start_line,
        })
    }

    fn at_right_delim(&self) -> (bool, bool) {
        let rest = &self.bytes[self.pos..];
        if has_right_trim_marker(rest) && rest[TRIM_MARKER_LEN..].starts_with(b"}}") {
            return (true, true);
        }
        if rest.starts_with(b"}}") {
            return (true, false);
        }
        (false, false)
    }

    fn at_terminator(&self) -> bool {
        match self.peek_byte() {
            None => true,
            Some(b) => {
                is_space_byte(b) || matches!(b, b'.' | b',' | b'|' | b':' | b')' | b'(' | b'}')
            }
        }
    }

    fn lex_text(&mut self) -> Step<'a> {
        if let Some(x) = find_left_delim(&self.input[self.pos..]) {
            if x > 0 {
                self.pos += x;
                let delim_end = self.pos + LEFT_DELIM.len();
                let trim = if has_left_trim_marker(&self.bytes[delim_end..]) {
                    right_trim_len(&self.bytes[self.start..self.pos])
                } else {
                    0
                };
                self.pos -= trim;
                self.line += count_newlines(&self.bytes[self.start..self.pos]);
                let item = self.this_item(ItemType::Text);
                self.pos += trim;
                self.ignore();
                if !item.val.is_empty() {
                    return Step::Emit(item);
                }
            }
            return self.lex_left_delim();
        }
        self.pos = self.input.len();
        if self.pos > self.start {
            self.line += count_newlines(&self.bytes[self.start..self.pos]);
            return self.emit(ItemType::Text);
        }
        self.emit(ItemType::Eof)
    }

    fn lex_left_delim(&mut self) -> Step<'a> {
        self.pos += LEFT_DELIM.len();
        let trim = has_left_trim_marker(&self.bytes[self.pos..]);
        let after = if trim { TRIM_MARKER_LEN } else { 0 };
        if self.bytes[self.pos + after..].starts_with(LEFT_COMMENT.as_bytes()) {
            self.pos += after;
            self.ignore();
            return self.lex_comment();
        }
        let item = self.this_item(ItemType::LeftDelim);
        self.inside_action = true;
        self.pos += after;
        self.ignore();
        self.paren_depth = 0;
        Step::Emit(item)
    }

    fn lex_comment(&mut self) -> Step<'a> {
        self.pos += LEFT_COMMENT.len();
        let Some(x) = find_right_comment(&self.bytes[self.pos..]) else {
            return self.errorf("unclosed comment".to_string());
        };
        self.pos += x + RIGHT_COMMENT.len();
        let (delim, trim) = self.at_right_delim();
        if !delim {
            return self.errorf("comment ends before closing delimiter".to_string());
        }
        // The comment item is not emitted (Go only emits it with ParseComments).
        self.line += count_newlines(&self.bytes[self.start..self.pos]);
        self.start = self.pos;
        self.start_line = self.line;
        if trim {
            self.pos += TRIM_MARKER_LEN;
        }
        self.pos += RIGHT_DELIM.len();
        if trim {
            self.pos += left_trim_len(&self.bytes[self.pos..]);
        }
        self.ignore();
        Step::Text
    }

    fn lex_right_delim(&mut self) -> Step<'a> {
        let (_, trim) = self.at_right_delim();
        if trim {
            self.pos += TRIM_MARKER_LEN;
            self.ignore();
        }
        self.pos += RIGHT_DELIM.len();
        let item = self.this_item(ItemType::RightDelim);
        if trim {
            self.pos += left_trim_len(&self.bytes[self.pos..]);
            self.ignore();
        }
        self.inside_action = false;
        Step::Emit(item)
    }

    fn lex_inside_action(&mut self) -> Step<'a> {
        let (delim, _) = self.at_right_delim();
        if delim {
            if self.paren_depth == 0 {
                return self.lex_right_delim();
            }
            return self.errorf("unclosed left paren".to_string());
        }
        let Some(b) = self.peek_byte() else {
            return self.errorf("unclosed action".to_string());
        };
        if b >= 0x80 {
            let Some(c) = self.peek() else {
                return self.errorf("unclosed action".to_string());
            };
            if is_alnum(Some(c)) {
                return self.lex_identifier();
            }
            return self.errorf(format!(
                "unrecognized character in action: {}",
                unicode_hash(c)
            ));
        }
        match b {
            b' ' | b'\t' | b'\r' | b'\n' => self.lex_space(),
            b'+' | b'-' | b'0'..=b'9' => self.lex_number(),
            _ if ALNUM[usize::from(b)] => self.lex_identifier(),
            _ => {
                self.pos += 1;
                match b {
                    b'=' => self.emit(ItemType::Assign),
                    b':' => {
                        if self.next() != Some('=') {
                            return self.errorf("expected :=".to_string());
                        }
                        self.emit(ItemType::Declare)
                    }
                    b'|' => self.emit(ItemType::Pipe),
                    b'"' => self.lex_quote(),
                    b'`' => self.lex_raw_quote(),
                    b'$' => {
                        if self.at_terminator() {
                            return self.emit(ItemType::Variable);
                        }
                        self.lex_field_or_variable(ItemType::Variable)
                    }
                    b'\'' => self.lex_char(),
                    b'.' => {
                        if let Some(b) = self.peek_byte()
                            && !b.is_ascii_digit()
                        {
                            return self.lex_field_or_variable(ItemType::Field);
                        }
                        self.pos -= 1;
                        self.lex_number()
                    }
                    b'(' => {
                        self.paren_depth += 1;
                        self.emit(ItemType::LeftParen)
                    }
                    b')' => {
                        self.paren_depth -= 1;
                        if self.paren_depth < 0 {
                            return self.errorf("unexpected right paren".to_string());
                        }
                        self.emit(ItemType::RightParen)
                    }
                    _ if !b.is_ascii_control() => self.emit(ItemType::Char),
                    _ => self.errorf(format!(
                        "unrecognized character in action: {}",
                        unicode_hash(char::from(b))
                    )),
                }
            }
        }
    }

    fn lex_space(&mut self) -> Step<'a> {
        let n = left_trim_len(&self.bytes[self.pos..]);
        self.line += count_newlines(&self.bytes[self.pos..self.pos + n]);
        self.pos += n;
        // A trim-marked right delimiter starts with a space: " -}}".
        let before = &self.bytes[self.pos - 1..];
        if has_right_trim_marker(before) && before[TRIM_MARKER_LEN..].starts_with(b"}}") {
            self.backup();
            if n == 1 {
                return self.lex_right_delim();
            }
        }
        self.emit(ItemType::Space)
    }

    /// Consumes a run of alphanumeric characters and returns the first other one (not
    /// consumed).
    fn scan_alnum(&mut self) -> Option<char> {
        loop {
            let run = self.bytes[self.pos..]
                .iter()
                .position(|&b| b >= 0x80 || !ALNUM[usize::from(b)]);
            let Some(run) = run else {
                self.pos = self.bytes.len();
                return None;
            };
            self.pos += run;
            let b = self.bytes[self.pos];
            if b < 0x80 {
                return Some(char::from(b));
            }
            let c = self.peek()?;
            if !is_alnum(Some(c)) {
                return Some(c);
            }
            self.pos += c.len_utf8();
        }
    }

    fn lex_identifier(&mut self) -> Step<'a> {
        let r = self.scan_alnum();
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
        self.emit(typ)
    }

    fn lex_field_or_variable(&mut self, typ: ItemType) -> Step<'a> {
        if self.at_terminator() {
            return self.emit(if typ == ItemType::Variable {
                ItemType::Variable
            } else {
                ItemType::Dot
            });
        }
        let r = self.scan_alnum();
        if !self.at_terminator() {
            return self.errorf(format!("bad character {}", unicode_hash_opt(r)));
        }
        self.emit(typ)
    }

    fn lex_char(&mut self) -> Step<'a> {
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
        self.emit(ItemType::CharConstant)
    }

    fn scan_number(&mut self) -> bool {
        const DECIMAL: &[u8] = b"0123456789_";
        const HEX: &[u8] = b"0123456789abcdefABCDEF_";
        self.accept(b"+-");
        let mut digits = DECIMAL;
        if self.accept(b"0") {
            if self.accept(b"xX") {
                digits = HEX;
            } else if self.accept(b"oO") {
                digits = b"01234567_";
            } else if self.accept(b"bB") {
                digits = b"01_";
            }
        }
        self.accept_run(digits);
        if self.accept(b".") {
            self.accept_run(digits);
        }
        if digits.len() == DECIMAL.len() && self.accept(b"eE") {
            self.accept(b"+-");
            self.accept_run(DECIMAL);
        }
        if digits.len() == HEX.len() && self.accept(b"pP") {
            self.accept(b"+-");
            self.accept_run(DECIMAL);
        }
        self.accept(b"i");
        if is_alnum(self.peek()) {
            self.next();
            return false;
        }
        true
    }

    fn lex_number(&mut self) -> Step<'a> {
        if !self.scan_number() {
            let text = crate::gofmt::quote(&self.input[self.start..self.pos]);
            return self.errorf(format!("bad number syntax: {text}"));
        }
        if matches!(self.peek_byte(), Some(b'+' | b'-')) {
            if !self.scan_number() || !self.input[..self.pos].ends_with('i') {
                let text = crate::gofmt::quote(&self.input[self.start..self.pos]);
                return self.errorf(format!("bad number syntax: {text}"));
            }
            self.emit(ItemType::Complex)
        } else {
            self.emit(ItemType::Number)
        }
    }

    fn lex_quote(&mut self) -> Step<'a> {
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
        self.emit(ItemType::String)
    }

    fn lex_raw_quote(&mut self) -> Step<'a> {
        loop {
            match self.next() {
                None => return self.errorf("unterminated raw quoted string".to_string()),
                Some('`') => break,
                _ => {}
            }
        }
        self.emit(ItemType::RawString)
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
    fn delimiter_searches_agree_with_str_find() {
        for hay in [
            "", "{", "a{b{{c", "{{", "{{{", "é{ü{{", "x*/", "*", "/*/", "**/",
        ] {
            assert_eq!(find_left_delim(hay), hay.find(LEFT_DELIM), "{hay:?}");
            assert_eq!(
                find_right_comment(hay.as_bytes()),
                hay.find(RIGHT_COMMENT),
                "{hay:?}"
            );
        }
    }

    fn types(s: &str) -> Vec<ItemType> {
        lex(s, true, true).0.into_iter().map(|i| i.typ).collect()
    }

    #[test]
    fn trim_markers_remove_surrounding_whitespace() {
        let (items, _) = lex("a  \n{{- 3 -}}\n\t b", true, true);
        let texts: Vec<&str> = items
            .iter()
            .filter(|i| i.typ == ItemType::Text)
            .map(|i| i.val)
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
        assert_eq!(lex("{{break}}", false, true).0[1].typ, Identifier);
        assert_eq!(types("{{break}}"), [LeftDelim, Break, RightDelim, Eof]);
    }

    #[test]
    fn lexer_errors_have_go_messages() {
        let last = |s: &str| {
            let (items, error) = lex(s, true, true);
            assert_eq!(items.last().map(|i| i.typ), Some(ItemType::Error), "{s:?}");
            error
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
