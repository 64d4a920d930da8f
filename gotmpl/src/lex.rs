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

/// A token: its type and its text as a byte range of the input (12 bytes, `Copy`); an
/// `Error` token's message is kept by the [`Lexer`] ([`Lexer::error`]). The line a token
/// starts on is only needed for error messages: [`line_at`] counts it from the offset.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item {
    pub typ: ItemType,
    pos: u32,
    len: u32,
}

/// The line (from 1) of byte offset `pos` of `input`: Go's lexer counts the newlines it
/// passes, so a token's line is one more than the newlines before it.
pub(crate) fn line_at(input: &str, pos: usize) -> usize {
    1 + count_newlines(&input.as_bytes()[..pos.min(input.len())])
}

impl Item {
    /// A token of `len` bytes at `pos` (the lexer's input is shorter than 2^32 bytes).
    pub(crate) fn new(typ: ItemType, pos: usize, len: usize) -> Self {
        debug_assert!(pos + len <= u32::MAX as usize);
        Item {
            typ,
            pos: pos as u32,
            len: len as u32,
        }
    }

    /// The offset of the token in the input.
    pub(crate) fn pos(&self) -> usize {
        self.pos as usize
    }

    /// The offset just past the token.
    pub(crate) fn end(&self) -> usize {
        (self.pos + self.len) as usize
    }

    /// The token's text; `input` is the lexer's input.
    pub(crate) fn val<'s>(&self, input: &'s str) -> &'s str {
        &input[self.pos()..self.end()]
    }

    /// Go's `item.String()`, used in "unexpected X in Y" messages; `input` is the lexer's
    /// input, `error` its message for an `Error` token.
    pub(crate) fn describe(&self, input: &str, error: &str) -> String {
        let val = self.val(input);
        match self.typ {
            ItemType::Eof => "EOF".to_string(),
            ItemType::Error => error.to_string(),
            t if t.is_keyword() => format!("<{val}>"),
            _ => {
                if val.chars().count() > 10 {
                    let head: String = val.chars().take(10).collect();
                    format!("{}...", crate::gofmt::quote(&head))
                } else {
                    crate::gofmt::quote(val)
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

/// Bytes of a run of ASCII spaces at the start of `b`.
fn space_run(b: &[u8]) -> usize {
    let mut n = 0;
    while n < b.len() && is_space_byte(b[n]) {
        n += 1;
    }
    n
}

/// What a state function did: emit a token, or reach text again without one (after a
/// comment).
enum Step {
    Emit(Item),
    Text,
}

/// Bytes that continue an identifier, a field or a variable name (ASCII letters, digits,
/// `_`); other characters (bytes from 0x80) are decided by [`is_alnum`].
const ALNUM: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 128 {
        t[b] = (b as u8).is_ascii_alphanumeric() || b == b'_' as usize;
        b += 1;
    }
    t
};

/// Go's lexer, run on demand: [`Lexer::next_item`] runs the state machine until it yields
/// one token (Go runs it as a coroutine feeding the parser). After `Eof` or an `Error` it
/// keeps returning `Eof` at the offset of that token (so that it has the same line).
pub(crate) struct Lexer<'a> {
    input: &'a str,
    bytes: &'a [u8],
    pos: usize,
    start: usize,
    at_eof: bool,
    paren_depth: i64,
    inside_action: bool,
    /// Set once `Eof` or an `Error` was returned: the offset of that token.
    finished: Option<usize>,
    error: String,
    break_ok: bool,
    continue_ok: bool,
}

/// Lexes the whole input. The sequence ends with an `Eof` or an `Error` item.
#[cfg(test)]
pub(crate) fn lex(input: &str, break_ok: bool, continue_ok: bool) -> (Vec<Item>, String) {
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
    pub(crate) fn next_item(&mut self) -> Item {
        if let Some(pos) = self.finished {
            return Item::new(ItemType::Eof, pos, 0);
        }
        loop {
            let step = if self.inside_action {
                self.lex_inside_action()
            } else {
                self.lex_text()
            };
            if let Step::Emit(item) = step {
                if matches!(item.typ, ItemType::Eof | ItemType::Error) {
                    self.finished = Some(item.pos());
                }
                return item;
            }
        }
    }

    /// The next token that is not a space, and whether a space token came before it: what
    /// [`Lexer::next_item`] would give after any `Space` token, without making that token.
    pub(crate) fn next_non_space(&mut self) -> (Item, bool) {
        let skipped = self.inside_action && self.finished.is_none() && self.skip_space();
        (self.next_item(), skipped)
    }

    /// Whether the input continues with `b` (a look at the next token's first byte).
    pub(crate) fn at_byte(&self, b: u8) -> bool {
        self.finished.is_none() && self.bytes.get(self.pos) == Some(&b)
    }

    /// Passes the spaces a `Space` token would hold (inside an action): a run of spaces,
    /// less its last one when a trim-marked right delimiter (" -}}") follows, as
    /// [`Lexer::lex_space`] does.
    fn skip_space(&mut self) -> bool {
        let rest = &self.bytes[self.pos..];
        let n = space_run(rest);
        if n == 0 {
            return false;
        }
        let after = &rest[n..];
        let keep = usize::from(after.first() == Some(&b'-') && after[1..].starts_with(b"}}"));
        if n == keep {
            return false;
        }
        self.pos += n - keep;
        self.start = self.pos;
        true
    }

    fn next(&mut self) -> Option<char> {
        match self.bytes.get(self.pos) {
            None => {
                self.at_eof = true;
                None
            }
            Some(&b) if b < 0x80 => {
                self.pos += 1;
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
            } else if let Some(c) = self.input[..self.pos].chars().next_back() {
                self.pos -= c.len_utf8();
            }
        }
        self.at_eof = false;
    }

    fn this_item(&mut self, typ: ItemType) -> Item {
        let item = Item::new(typ, self.start, self.pos - self.start);
        self.start = self.pos;
        item
    }

    /// Emits the pending token.
    fn emit(&mut self, typ: ItemType) -> Step {
        Step::Emit(self.this_item(typ))
    }

    fn ignore(&mut self) {
        self.start = self.pos;
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

    fn errorf(&mut self, msg: String) -> Step {
        self.error = msg;
        Step::Emit(Item::new(ItemType::Error, self.start, 0))
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

    fn lex_text(&mut self) -> Step {
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
                let item = self.this_item(ItemType::Text);
                self.pos += trim;
                self.ignore();
                if item.len > 0 {
                    return Step::Emit(item);
                }
            }
            return self.lex_left_delim();
        }
        self.pos = self.input.len();
        if self.pos > self.start {
            return self.emit(ItemType::Text);
        }
        self.emit(ItemType::Eof)
    }

    fn lex_left_delim(&mut self) -> Step {
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

    fn lex_comment(&mut self) -> Step {
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
        self.start = self.pos;
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

    /// The right delimiter at the current position (`trim`: with its trim marker, " -}}").
    fn lex_right_delim(&mut self, trim: bool) -> Step {
        if self.paren_depth != 0 {
            return self.errorf("unclosed left paren".to_string());
        }
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

    fn lex_inside_action(&mut self) -> Step {
        let Some(&b) = self.bytes.get(self.pos) else {
            return self.errorf("unclosed action".to_string());
        };
        match b {
            b' ' | b'\t' | b'\r' | b'\n' => {
                let rest = &self.bytes[self.pos + 1..];
                if rest.first() == Some(&b'-') && rest[1..].starts_with(b"}}") {
                    return self.lex_right_delim(true);
                }
                self.lex_space()
            }
            b'}' if self.bytes.get(self.pos + 1) == Some(&b'}') => self.lex_right_delim(false),
            b'+' | b'-' | b'0'..=b'9' => self.lex_number(),
            _ if ALNUM[usize::from(b)] => self.lex_identifier(),
            0x80.. => {
                let Some(c) = self.peek() else {
                    return self.errorf("unclosed action".to_string());
                };
                if is_alnum(Some(c)) {
                    return self.lex_identifier();
                }
                self.errorf(format!(
                    "unrecognized character in action: {}",
                    unicode_hash(c)
                ))
            }
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

    fn lex_space(&mut self) -> Step {
        let n = space_run(&self.bytes[self.pos..]);
        self.pos += n;
        // A trim-marked right delimiter starts with a space: " -}}".
        let before = &self.bytes[self.pos - 1..];
        if has_right_trim_marker(before) && before[TRIM_MARKER_LEN..].starts_with(b"}}") {
            self.backup();
            if n == 1 {
                return self.lex_right_delim(true);
            }
        }
        self.emit(ItemType::Space)
    }

    /// Consumes a run of alphanumeric characters and returns the first other one (not
    /// consumed).
    fn scan_alnum(&mut self) -> Option<char> {
        loop {
            let bytes = self.bytes;
            let mut i = self.pos;
            while i < bytes.len() && ALNUM[usize::from(bytes[i])] {
                i += 1;
            }
            self.pos = i;
            let &b = bytes.get(i)?;
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

    fn lex_identifier(&mut self) -> Step {
        let r = self.scan_alnum();
        if !self.at_terminator() {
            return self.errorf(format!("bad character {}", unicode_hash_opt(r)));
        }
        let word = &self.input[self.start..self.pos];
        // Keywords by length and first byte, then the whole word.
        let typ = match (word.len(), word.as_bytes().first()) {
            (2, Some(b'i')) if word == "if" => ItemType::If,
            (3, Some(b'e')) if word == "end" => ItemType::End,
            (3, Some(b'n')) if word == "nil" => ItemType::Nil,
            (4, Some(b'e')) if word == "else" => ItemType::Else,
            (4, Some(b'w')) if word == "with" => ItemType::With,
            (4, Some(b't')) if word == "true" => ItemType::Bool,
            (5, Some(b'b')) if word == "block" => ItemType::Block,
            (5, Some(b'b')) if word == "break" && self.break_ok => ItemType::Break,
            (5, Some(b'r')) if word == "range" => ItemType::Range,
            (5, Some(b'f')) if word == "false" => ItemType::Bool,
            (6, Some(b'd')) if word == "define" => ItemType::Define,
            (8, Some(b't')) if word == "template" => ItemType::Template,
            (8, Some(b'c')) if word == "continue" && self.continue_ok => ItemType::Continue,
            _ => ItemType::Identifier,
        };
        self.emit(typ)
    }

    fn lex_field_or_variable(&mut self, typ: ItemType) -> Step {
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

    fn lex_char(&mut self) -> Step {
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

    fn lex_number(&mut self) -> Step {
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

    fn lex_quote(&mut self) -> Step {
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

    fn lex_raw_quote(&mut self) -> Step {
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
        let src = "a  \n{{- 3 -}}\n\t b";
        let (items, _) = lex(src, true, true);
        let texts: Vec<&str> = items
            .iter()
            .filter(|i| i.typ == ItemType::Text)
            .map(|i| i.val(src))
            .collect();
        assert_eq!(texts, ["a", "b"]);
    }

    const SAMPLES: &[&str] = &[
        "a {{ .a.b  $x | f 1 \"s\" }} b",
        "{{- .a -}}\n{{ .b  -}} x {{  -3 }}{{ f  (g  .x) }}",
        "{{ $x, $y := range .l }}\n{{ end }}{{/* c */}}{{ .a\n\n  -}}",
        "{{ .a \t\r\n -}}",
        "{{ f\n .a \n",
        "{{ \"open",
    ];

    #[test]
    fn skipping_spaces_gives_the_other_tokens_and_where_spaces_were() {
        for src in SAMPLES {
            let (items, _) = lex(src, true, true);
            let mut want = Vec::new();
            let mut spaced = false;
            for i in &items {
                if i.typ == ItemType::Space {
                    spaced = true;
                } else {
                    want.push((i.typ, i.pos(), i.end(), spaced));
                    spaced = false;
                }
            }
            let mut l = Lexer::new(src, true, true);
            let mut got = Vec::new();
            loop {
                let (i, spaced) = l.next_non_space();
                got.push((i.typ, i.pos(), i.end(), spaced));
                if matches!(i.typ, ItemType::Eof | ItemType::Error) {
                    break;
                }
            }
            assert_eq!(got, want, "{src:?}");
        }
    }

    #[test]
    fn a_token_line_counts_the_newlines_before_it() {
        assert_eq!(line_at("a\nb\n", 0), 1);
        assert_eq!(line_at("a\nb\n", 2), 2);
        assert_eq!(line_at("a\nb\n", 4), 3);
        assert_eq!(line_at("a\nb\n", 99), 3);
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
