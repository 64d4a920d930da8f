//! A fast path for reading a few top-level keys of a document ([`crate::from_str_keys`]).
//!
//! Helm reads the head of every rendered manifest (`apiVersion`, `kind`, `metadata`), and
//! it needs the whole document to be valid YAML. Running the full parser over a
//! thousand-line CustomResourceDefinition to read ten lines of it is most of the work of
//! `helm template` on big charts, so this module scans the plain block-style YAML that
//! templates produce line by line, proves it well formed for libyaml and decodable without
//! error, and hands only the text of the wanted top-level entries to the full parser.
//!
//! The scanner accepts a deliberately small subset, one where libyaml, saphyr and this crate
//! cannot disagree: block mappings and sequences indented with spaces, plain, quoted and
//! literal or folded scalars, single-line flow collections of scalars, comments. Anything
//! else (anchors, aliases, tags, explicit keys, directives, document markers, tabs outside
//! block scalar text, flow collections over several lines, indentation indicators, plain
//! scalars holding `: `, keys over 1000 bytes, control or line-separator characters) makes
//! it answer `None`, and the caller parses the whole document as before: errors are always
//! the full parser's.

/// What the scanner found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Head {
    /// No content at all (blank lines and comments): the document is null.
    Empty,
    /// A block mapping at column 0 that decodes without error; the text of its entries whose
    /// key is one of the wanted keys, in document order (empty when there is none).
    Entries(String),
}

/// Deepest nesting followed; deeper documents go to the full parser.
const MAX_NESTING: usize = 200;
/// Longest key accepted (libyaml's simple keys stop at 1024 characters).
const MAX_KEY_BYTES: usize = 1000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Frame {
    Map(usize),
    Seq(usize),
}

impl Frame {
    fn indent(self) -> usize {
        match self {
            Frame::Map(i) | Frame::Seq(i) => i,
        }
    }
}

/// What the previous lines left open.
#[derive(Clone, Copy)]
enum Open {
    Nothing,
    /// A key or `-` with nothing after it: the value may follow on the next lines. The
    /// column of the owner (the mapping's or the `-`), and whether the owner is a mapping.
    Value {
        parent: usize,
        in_map: bool,
    },
    /// A plain scalar that may go on on lines indented more than `parent`.
    Plain {
        parent: usize,
    },
    /// A quoted scalar not closed yet.
    Quoted {
        parent: usize,
        quote: u8,
    },
    /// A literal or folded scalar: its lines are those indented at least `indent` (found
    /// on its first non-blank line), blank lines up to then being at most `blank` wide.
    Block {
        parent: usize,
        indent: Option<usize>,
        blank: usize,
    },
}

/// Scans `src` (one document, as split by Helm) and, when it is within the accepted subset,
/// returns the text of its top-level entries whose key is one of `keys`.
pub(crate) fn block_head(src: &str, keys: &[&str]) -> Option<Head> {
    if !characters_ok(src) {
        return None;
    }
    let mut s = Scanner {
        stack: Vec::new(),
        open: Open::Nothing,
        entries: Vec::new(),
        keys,
    };
    let mut offset = 0;
    let bytes = src.as_bytes();
    loop {
        let end = memchr::memchr(b'\n', &bytes[offset..]).map_or(bytes.len(), |n| offset + n);
        s.line(&bytes[offset..end], offset)?;
        if end == bytes.len() {
            break;
        }
        offset = end + 1;
    }
    if matches!(s.open, Open::Quoted { .. }) {
        return None;
    }
    if s.stack.is_empty() {
        return Some(Head::Empty);
    }
    let mut text = String::new();
    for (n, &(start, wanted)) in s.entries.iter().enumerate() {
        if wanted {
            let end = s.entries.get(n + 1).map_or(src.len(), |e| e.0);
            text.push_str(&src[start..end]);
        }
    }
    Some(Head::Entries(text))
}

/// Only the characters every reader takes the same way: printable ASCII, tabs, line feeds,
/// and non-ASCII text that libyaml allows and does not read as a line break or a BOM.
pub(crate) fn characters_ok(src: &str) -> bool {
    /// Bytes looked at together: the loop over a block has a fixed trip count and no
    /// branch, so it compiles to a few vector compares (SSE2) instead of a test a byte.
    const BLOCK: usize = 32;
    let ascii_bad = |b: u8| (b < 0x20 && b != b'\t' && b != b'\n') || b == 0x7F;
    let bytes = src.as_bytes();
    // Every non-ASCII character before `next` is checked; `next` is a character boundary,
    // and the bytes from it to the block being looked at are ASCII.
    let mut next = 0;
    // Checks the non-ASCII characters from `from` (the first non-ASCII byte of a block, so
    // a character start when at or after `next`) to past `end` (the block's end).
    let mut non_ascii = |from: usize, end: usize| -> bool {
        let start = from.max(next);
        if start >= end {
            return true;
        }
        let Some(rest) = src.get(start..) else {
            return false;
        };
        for (i, c) in rest.char_indices() {
            let v = u32::from(c);
            if v < 0x80 {
                if start + i >= end {
                    next = start + i;
                    return true;
                }
            } else if !matches!(v, 0xA0..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10_FFFF)
                || matches!(v, 0x2028 | 0x2029 | 0xFEFF)
            {
                return false;
            }
        }
        next = src.len();
        true
    };
    let mut blocks = bytes.chunks_exact(BLOCK);
    for (n, block) in (&mut blocks).enumerate() {
        let (bad, high) = block.iter().fold((false, 0u8), |(bad, high), &b| {
            (bad | ascii_bad(b), high | (b & 0x80))
        });
        if bad {
            return false;
        }
        if high != 0 {
            let at = n * BLOCK;
            let first = block.iter().position(|&b| b >= 0x80).unwrap_or(0);
            if !non_ascii(at + first, at + BLOCK) {
                return false;
            }
        }
    }
    let tail = bytes.len() - blocks.remainder().len();
    let rest = blocks.remainder();
    if rest.iter().any(|&b| ascii_bad(b)) {
        return false;
    }
    rest.iter()
        .position(|&b| b >= 0x80)
        .is_none_or(|first| non_ascii(tail + first, bytes.len()))
}

struct Scanner<'k> {
    stack: Vec<Frame>,
    open: Open,
    /// Top-level entries: byte offset of the key's line, and whether the key is wanted.
    entries: Vec<(usize, bool)>,
    keys: &'k [&'k str],
}

pub(crate) fn indent_of(line: &[u8]) -> usize {
    // Eight bytes at a time: manifests are indented deeply (CRD schemas by 20 and more).
    const SPACES: u64 = u64::from_ne_bytes([b' '; 8]);
    let mut n = 0;
    while let Some(word) = line.get(n..n + 8) {
        let other = u64::from_le_bytes(word.try_into().expect("8 bytes")) ^ SPACES;
        if other != 0 {
            // The lowest non-zero byte is the first that is not a space.
            return n + (other.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + line[n..].iter().take_while(|&&b| b == b' ').count()
}

impl Scanner<'_> {
    fn line(&mut self, b: &[u8], offset: usize) -> Option<()> {
        if b.starts_with(b"---") || b.starts_with(b"...") {
            return None;
        }
        let indent = indent_of(b);
        let blank = indent == b.len();
        match self.open {
            Open::Block {
                parent,
                indent: block_indent,
                blank: widest,
            } => match block_indent {
                Some(bi) if blank || indent >= bi => return Some(()),
                None if blank => {
                    self.open = Open::Block {
                        parent,
                        indent: None,
                        blank: widest.max(indent),
                    };
                    return Some(());
                }
                None if indent > parent && b[indent] != b'\t' => {
                    if widest > indent {
                        return None;
                    }
                    self.open = Open::Block {
                        parent,
                        indent: Some(indent),
                        blank: widest,
                    };
                    return Some(());
                }
                // A tab where the scalar's indentation is expected, or text after the
                // scalar (handled below).
                _ if b[indent..].first() == Some(&b'\t') => return None,
                // An empty scalar after blank lines wider than its owner: left to the full
                // parser.
                None if widest > parent => return None,
                _ => self.open = Open::Nothing,
            },
            Open::Quoted { parent, quote } => {
                if blank {
                    return Some(());
                }
                if indent <= parent || b[indent] == b'\t' {
                    return None;
                }
                return match quoted_end(b, indent, quote)? {
                    Some(end) => {
                        after_node(&b[end..])?;
                        self.open = Open::Nothing;
                        Some(())
                    }
                    None => Some(()),
                };
            }
            Open::Plain { parent } => {
                if blank {
                    return Some(());
                }
                if b[indent] == b'#' {
                    self.open = Open::Nothing;
                    return Some(());
                }
                if indent > parent {
                    if b[indent] == b'\t' {
                        return None;
                    }
                    if !continuation_start(&b[indent..]) {
                        return None;
                    }
                    let (_, commented) = plain_end(b, indent)?;
                    if commented {
                        self.open = Open::Nothing;
                    }
                    return Some(());
                }
                self.open = Open::Nothing;
            }
            Open::Nothing | Open::Value { .. } => {}
        }
        if blank {
            return Some(());
        }
        let rest = &b[indent..];
        if rest[0] == b'\t' {
            return None;
        }
        if rest[0] == b'#' {
            return Some(());
        }
        let dash = rest == b"-" || rest.starts_with(b"- ");
        // The key at `indent` when already read (the first key of a nested mapping).
        let mut known_key = None;
        if let Open::Value { parent, in_map } = self.open {
            self.open = Open::Nothing;
            if indent > parent && !dash {
                match key_at(b, indent) {
                    // The value on a line of its own (`resources:` then `  {}`).
                    None => return self.value(b, indent, parent, in_map),
                    Some(k) => known_key = Some(k),
                }
            }
            if indent > parent || (indent == parent && in_map && dash) {
                self.push(if dash {
                    Frame::Seq(indent)
                } else {
                    Frame::Map(indent)
                })?;
            }
        }
        if self.stack.is_empty() {
            if indent != 0 {
                return None;
            }
            self.push(Frame::Map(0))?;
        }
        while self.stack.last().is_some_and(|f| f.indent() > indent) {
            self.stack.pop();
        }
        if let [.., Frame::Map(m), Frame::Seq(s)] = self.stack[..]
            && m == indent
            && s == indent
            && !dash
        {
            // The end of a sequence indented as its mapping's keys.
            self.stack.pop();
        }
        match *self.stack.last()? {
            Frame::Map(i) if i == indent => {
                let (key_end, wanted) = self.key(b, indent, known_key)?;
                if self.stack.len() == 1 {
                    self.entries.push((offset, wanted));
                }
                self.value(b, key_end, indent, true)
            }
            Frame::Seq(i) if i == indent && dash => self.entry(b, indent),
            _ => None,
        }
    }

    fn push(&mut self, f: Frame) -> Option<()> {
        if self.stack.len() >= MAX_NESTING {
            return None;
        }
        self.stack.push(f);
        Some(())
    }

    /// A key at `at`: the offset just past its `:`, and whether it is a top-level key that
    /// is wanted.
    fn key<'b>(
        &self,
        b: &'b [u8],
        at: usize,
        known: Option<(Option<&'b [u8]>, usize)>,
    ) -> Option<(usize, bool)> {
        let (text, end) = match known {
            Some(k) => k,
            None => key_at(b, at)?,
        };
        if self.stack.len() != 1 {
            return Some((end, false));
        }
        // A top-level key that would need decoding to be compared: left to the full parser.
        let text = text?;
        Some((end, self.keys.iter().any(|k| k.as_bytes() == text)))
    }

    /// A sequence entry `-` at `dash`.
    fn entry(&mut self, b: &[u8], dash: usize) -> Option<()> {
        let after = dash + 1;
        let gap = b[after..].iter().take_while(|&&c| c == b' ').count();
        let at = after + gap;
        match b.get(at) {
            None | Some(b'#') => {
                self.open = Open::Value {
                    parent: dash,
                    in_map: false,
                };
                Some(())
            }
            Some(b'\t') => None,
            // A sequence in a sequence on one line: left to the full parser.
            Some(b'-') if matches!(b.get(at + 1), None | Some(b' ' | b'\t')) => None,
            Some(_) => match key_at(b, at) {
                Some((_, end)) => {
                    self.push(Frame::Map(at))?;
                    self.value(b, end, at, true)
                }
                None => self.value(b, after, dash, false),
            },
        }
    }

    /// The value after a key's `:` or a `-` (from `from`), owned by a collection at column
    /// `parent`.
    fn value(&mut self, b: &[u8], from: usize, parent: usize, in_map: bool) -> Option<()> {
        let gap = b[from..].iter().take_while(|&&c| c == b' ').count();
        let at = from + gap;
        let Some(&c) = b.get(at) else {
            self.open = Open::Value { parent, in_map };
            return Some(());
        };
        match c {
            b'#' => {
                self.open = Open::Value { parent, in_map };
                Some(())
            }
            b'|' | b'>' => {
                block_header(&b[at + 1..])?;
                self.open = Open::Block {
                    parent,
                    indent: None,
                    blank: 0,
                };
                Some(())
            }
            b'"' | b'\'' => {
                match quoted_end(b, at + 1, c)? {
                    Some(end) => after_node(&b[end..])?,
                    None => self.open = Open::Quoted { parent, quote: c },
                }
                Some(())
            }
            b'[' | b'{' => {
                let end = flow(b, at, 0)?;
                after_node(&b[end..])
            }
            _ => {
                if !plain_start(&b[at..], false) {
                    return None;
                }
                let (_, commented) = plain_end(b, at)?;
                self.open = if commented {
                    Open::Nothing
                } else {
                    Open::Plain { parent }
                };
                Some(())
            }
        }
    }
}

/// Whether a plain scalar may start here: a letter, a digit, or one of a few punctuation
/// characters that no reader takes for an indicator (`-` only before a non-blank).
pub(crate) fn plain_start(rest: &[u8], flow: bool) -> bool {
    match rest.first() {
        Some(c) if c.is_ascii_alphanumeric() || *c >= 0x80 => true,
        Some(b'_' | b'.' | b'/' | b'$' | b'(' | b')' | b'~' | b'+' | b'=' | b'^' | b';') => true,
        Some(b'<') => !flow && rest.get(1) != Some(&b'<'),
        Some(b'-') => rest
            .get(1)
            .is_some_and(|c| !(matches!(c, b' ' | b'\t') || flow && b",[]{}".contains(c))),
        _ => false,
    }
}

/// Whether a line may go on with a plain scalar: in block context only a comment, a tab or
/// an indicator followed by a blank could end it.
pub(crate) fn continuation_start(rest: &[u8]) -> bool {
    !matches!(
        rest,
        [b'#' | b'\t', ..] | [b'-' | b'?' | b':'] | [b'-' | b'?' | b':', b' ' | b'\t', ..]
    )
}

/// The end of a block plain scalar starting at `at` (not holding `: `, not ending with `:`,
/// no tab): `(end, whether a comment follows)`.
pub(crate) fn plain_end(b: &[u8], at: usize) -> Option<(usize, bool)> {
    let mut i = at;
    while let Some(n) = memchr::memchr3(b':', b'#', b'\t', &b[i..]) {
        i += n;
        match b[i] {
            b'\t' => return None,
            b':' if i + 1 == b.len() || b[i + 1] == b' ' => return None,
            b'#' if b[i - 1] == b' ' => return Some((i, true)),
            _ => {}
        }
        i += 1;
    }
    Some((b.len(), false))
}

/// A key at `at` followed by `:` and a blank or the end of the line: its text when it needs
/// no decoding (plain, or quoted without escapes) and the offset past the `:`. `None` when
/// the line holds no key there (or one outside the subset).
pub(crate) fn key_at(b: &[u8], at: usize) -> Option<(Option<&[u8]>, usize)> {
    let colon = match b[at] {
        q @ (b'"' | b'\'') => {
            let end = quoted_end(b, at + 1, q)??;
            if b.get(end) != Some(&b':') {
                return None;
            }
            end
        }
        _ => {
            if !plain_start(&b[at..], false) || b[at] == b'<' {
                return None;
            }
            let mut i = at;
            loop {
                // Keys are short: a plain loop beats setting up a vector search.
                i += b[i..]
                    .iter()
                    .position(|&c| matches!(c, b':' | b'#' | b'\t'))?;
                match b[i] {
                    b'\t' => return None,
                    b':' if matches!(b.get(i + 1), None | Some(b' ')) => break,
                    b'#' if b[i - 1] == b' ' => return None,
                    _ => i += 1,
                }
            }
            if b[i - 1] == b' ' {
                return None;
            }
            i
        }
    };
    if colon - at > MAX_KEY_BYTES || !matches!(b.get(colon + 1), None | Some(b' ')) {
        return None;
    }
    let raw = &b[at..colon];
    let text = match raw[0] {
        b'"' | b'\'' => {
            let inner = &raw[1..raw.len() - 1];
            (!inner.contains(&b'\\') && !inner.contains(&b'\'')).then_some(inner)
        }
        _ => Some(raw),
    };
    Some((text, colon + 1))
}

/// After a complete node on its line: blanks, then a comment or nothing.
pub(crate) fn after_node(rest: &[u8]) -> Option<()> {
    let gap = rest.iter().take_while(|&&c| c == b' ').count();
    match rest.get(gap) {
        None => Some(()),
        Some(b'#') if gap > 0 => Some(()),
        _ => None,
    }
}

/// A block scalar header after `|` or `>`: an optional chomping indicator, then blanks and
/// an optional comment. Indentation indicators are left to the full parser.
pub(crate) fn block_header(rest: &[u8]) -> Option<()> {
    let rest = match rest.first() {
        Some(b'-' | b'+') => &rest[1..],
        _ => rest,
    };
    after_node(rest)
}

/// Scans a quoted scalar's text from `from` on one line: `Some(Some(end))` when it closes
/// (`end` just past the quote), `Some(None)` when the line ends first, `None` for an escape
/// outside the subset.
pub(crate) fn quoted_end(b: &[u8], from: usize, quote: u8) -> Option<Option<usize>> {
    let mut i = from;
    while i < b.len() {
        i += match memchr::memchr3(quote, b'\\', b'\t', &b[i..]) {
            Some(n) => n,
            None => return Some(None),
        };
        let c = b[i];
        if c == quote {
            if quote == b'\'' && b.get(i + 1) == Some(&b'\'') {
                i += 2;
                continue;
            }
            return Some(Some(i + 1));
        }
        if c == b'\t' {
            return None;
        }
        if quote == b'"' && c == b'\\' {
            let digits = match b.get(i + 1) {
                // An escaped line break.
                None => return Some(None),
                Some(
                    b'\\' | b'"' | b'n' | b't' | b'r' | b'0' | b'a' | b'b' | b'e' | b'f' | b'v'
                    | b' ',
                ) => 0,
                Some(b'x') => 2,
                Some(b'u') => 4,
                Some(b'U') => 8,
                _ => return None,
            };
            let hex = b.get(i + 2..i + 2 + digits)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            if digits > 0 {
                let v = u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                if char::from_u32(v).is_none() || matches!(v, 0x85 | 0x2028 | 0x2029) {
                    return None;
                }
            }
            i += 2 + digits;
            continue;
        }
        i += 1;
    }
    Some(None)
}

/// A flow collection starting at `at` (`[` or `{`) and closing on the same line: the offset
/// just past its end. Entries are scalars (plain without `:`, or quoted) and collections;
/// mapping entries are `key: value`.
fn flow(b: &[u8], at: usize, depth: usize) -> Option<usize> {
    if depth >= 20 {
        return None;
    }
    let (close, is_map) = match b[at] {
        b'[' => (b']', false),
        _ => (b'}', true),
    };
    let skip = |i: usize| i + b[i..].iter().take_while(|&&c| c == b' ').count();
    let mut i = skip(at + 1);
    if b.get(i) == Some(&close) {
        return Some(i + 1);
    }
    loop {
        if is_map {
            let start = i;
            i = flow_scalar(b, i)?;
            if i - start > MAX_KEY_BYTES || b.get(i) != Some(&b':') || b.get(i + 1) != Some(&b' ') {
                return None;
            }
            i = skip(i + 1);
        }
        i = match b.get(i)? {
            b'[' | b'{' => flow(b, i, depth + 1)?,
            _ => flow_scalar(b, i)?,
        };
        i = skip(i);
        match b.get(i)? {
            b',' => {
                i = skip(i + 1);
                if matches!(b.get(i), Some(b']' | b'}' | b',')) {
                    return None;
                }
            }
            c if *c == close => return Some(i + 1),
            _ => return None,
        }
    }
}

/// A scalar inside a flow collection: quoted on one line, or plain without `:` (but the
/// `: ` after a key), `#` and flow indicators. Returns the offset past it (blanks after a
/// plain scalar are not part of it).
pub(crate) fn flow_scalar(b: &[u8], at: usize) -> Option<usize> {
    if let q @ (b'"' | b'\'') = *b.get(at)? {
        return quoted_end(b, at + 1, q)?;
    }
    if !plain_start(&b[at..], true) {
        return None;
    }
    let mut i = at;
    let mut end = at;
    while let Some(&c) = b.get(i) {
        match c {
            b',' | b'[' | b']' | b'{' | b'}' => break,
            b':' if b.get(i + 1) == Some(&b' ') && end == i => break,
            b':' | b'#' | b'\t' | b'"' | b'\'' => return None,
            b' ' => i += 1,
            _ => {
                i += 1;
                end = i;
            }
        }
    }
    Some(end)
}

#[cfg(test)]
pub(crate) mod tests {
    //! The fast path against the full parser: wherever [`block_head`] answers, the full
    //! parser must read the document without error and find the same head.

    use super::*;
    use crate::Value;

    #[test]
    fn indentation_is_counted_as_byte_by_byte() {
        for len in 0..40 {
            for spaces in 0..=len {
                for other in [b'a', b'\t', b'\n', 0x80] {
                    let mut line = vec![b' '; len];
                    if spaces < len {
                        line[spaces] = other;
                        // Spaces after the first other byte do not count.
                        line[len - 1] = if len - 1 > spaces {
                            b' '
                        } else {
                            line[len - 1]
                        };
                    }
                    assert_eq!(indent_of(&line), spaces, "{line:?}");
                }
            }
        }
    }

    #[test]
    fn characters_ok_takes_each_character_on_its_own() {
        // The rule, one character at a time.
        let one = |c: char| {
            matches!(c, '\t' | '\n' | ' '..='~')
                || matches!(u32::from(c), 0xA0..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10_FFFF)
                    && !matches!(c, '\u{2028}' | '\u{2029}' | '\u{FEFF}')
        };
        let pieces = [
            "a", " ", "\t", "\n", "\r", "\u{7f}", "\u{1}", "é", "\u{85}", "\u{a0}", "\u{2028}",
            "\u{feff}", "€", "😀", "\u{fffe}", "~",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            // Short texts, and texts over several blocks of the vector loop.
            let len = if seed.is_multiple_of(4) {
                (seed % 160) as usize
            } else {
                (seed % 24) as usize
            };
            let mut text = String::new();
            let mut r = seed;
            for _ in 0..len {
                r = r.rotate_left(5).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                // Mostly plain text, so that whole blocks of the vector loop are seen.
                // (Rarer special pieces in long texts, so that some pass.)
                let spread = if len > 24 { 64 } else { 4 };
                let p = (r >> 32) as usize % (pieces.len() * spread);
                text.push_str(pieces.get(p).copied().unwrap_or("x"));
            }
            assert_eq!(characters_ok(&text), text.chars().all(one), "{text:?}");
        }
    }
    #[test]
    fn characters_ok_across_block_boundaries() {
        // A character of each width at every offset around the 32-byte blocks, then a bad
        // character or none after it.
        for c in ["é", "€", "😀", "\u{2028}", "\u{feff}", "\u{85}"] {
            for pad in 0..70 {
                for after in ["", "x", "\u{1}", "\u{2029}", "y\u{7f}", "\u{a0}"] {
                    let text = format!("{}{c}{}{after}", "a".repeat(pad), "b".repeat(pad % 7));
                    let expected = !["\u{2028}", "\u{feff}", "\u{85}"].contains(&c)
                        && !["\u{1}", "\u{2029}", "y\u{7f}"].contains(&after);
                    assert_eq!(characters_ok(&text), expected, "{text:?}");
                }
            }
        }
    }

    use crate::parse::{DecodeOptions, unmarshal, unmarshal_keys, unmarshal_keys_parsed};
    use std::path::{Path, PathBuf};

    const KEYS: [&str; 3] = ["apiVersion", "kind", "metadata"];

    /// `../shared/charts`, the corpus of real charts (also read by `block.rs`'s tests).
    pub(crate) fn shared_charts() -> PathBuf {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/charts");
        assert!(
            dir.is_dir(),
            "the chart corpus is expected at {}",
            dir.display()
        );
        dir
    }

    /// Every file below `dir`, in sorted order.
    pub(crate) fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                files_under(&p, out);
            } else {
                out.push(p);
            }
        }
    }

    /// Reproducible pseudo-random indices (xorshift) for the mutant tests here and in
    /// `block.rs`.
    pub(crate) struct Rng(pub(crate) u64);

    impl Rng {
        /// An index below `n` (0 when `n` is 0).
        pub(crate) fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n.max(1) as u64) as usize
        }
    }

    /// One small edit of `b`, chosen among the first `kinds` of: a byte of `inserts` inserted,
    /// a byte removed, a byte replaced by one of `inserts`, the edited line's indentation
    /// grown or shrunk by one space.
    pub(crate) fn mutate(b: &mut Vec<u8>, inserts: &[u8], kinds: usize, rng: &mut Rng) {
        let at = rng.below(b.len());
        match rng.below(kinds) {
            0 => b.insert(at, inserts[rng.below(inserts.len())]),
            1 => {
                b.remove(at);
            }
            2 => b[at] = inserts[rng.below(inserts.len())],
            _ => {
                let line = b[..at]
                    .iter()
                    .rposition(|&c| c == b'\n')
                    .map_or(0, |n| n + 1);
                if rng.below(2) == 0 {
                    b.insert(line, b' ');
                } else if b.get(line) == Some(&b' ') {
                    b.remove(line);
                }
            }
        }
    }

    /// Documents as Helm splits rendered files: on `---` lines, trimmed, empty ones dropped.
    fn split(text: &str) -> Vec<String> {
        let mut docs = Vec::new();
        let mut cur = String::new();
        for line in text.split('\n') {
            if line.trim_end() == "---" {
                docs.push(std::mem::take(&mut cur));
            } else {
                cur.push_str(line);
                cur.push('\n');
            }
        }
        docs.push(cur);
        docs.into_iter()
            .map(|d| d.trim().to_string())
            .filter(|d| !d.is_empty())
            .collect()
    }

    /// Every document of the corpus goldens (real `helm template` output) and of the charts'
    /// YAML files.
    fn corpus_docs() -> Vec<String> {
        let mut files = Vec::new();
        files_under(&shared_charts(), &mut files);
        let mut docs = Vec::new();
        for f in files {
            let name = f.to_string_lossy();
            if !(name.ends_with(".yaml") || name.ends_with(".yml")) || name.contains("/templates/")
            {
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(&f) {
                docs.extend(split(&text));
            }
        }
        docs
    }

    /// The fuzz corpus of the YAML reader (inputs that found new paths in it).
    fn fuzz_docs() -> Vec<String> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/yaml_values");
        let mut files = Vec::new();
        files_under(&dir, &mut files);
        files
            .iter()
            .filter_map(|f| std::fs::read(f).ok())
            .filter_map(|b| String::from_utf8(b).ok())
            .collect()
    }

    /// Whether the fast path answered; when it did, it is checked against the full parser.
    fn check(doc: &str) -> bool {
        let Some(head) = block_head(doc, &KEYS) else {
            return false;
        };
        let full = unmarshal_keys_parsed(doc, &KEYS);
        let Ok(full) = full else {
            panic!("the fast path accepted a document the parser refuses ({full:?}):\n{doc}");
        };
        let fast = match head {
            Head::Empty => Value::Null,
            Head::Entries(t) if t.is_empty() => Value::Map(crate::Mapping::new()),
            Head::Entries(t) => unmarshal(&t, DecodeOptions::default())
                .unwrap_or_else(|e| panic!("the head text does not parse ({e}):\n{t}")),
        };
        assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{doc}");
        assert_eq!(
            format!("{:?}", unmarshal_keys(doc, &KEYS)),
            format!("{:?}", Ok::<_, crate::Error>(full))
        );
        true
    }

    #[test]
    fn corpus_heads_match_the_full_parser_and_mostly_take_the_fast_path() {
        let docs = corpus_docs();
        assert!(docs.len() > 1000, "only {} corpus documents", docs.len());
        let fast = docs.iter().filter(|d| check(d)).count();
        // What falls back is reported so a regression of the subset shows.
        let slow: Vec<&String> = docs
            .iter()
            .filter(|d| block_head(d, &KEYS).is_none())
            .collect();
        for d in slow.iter().take(20) {
            let lines: Vec<&str> = d.split('\n').collect();
            let k = (1..=lines.len())
                .find(|&k| block_head(&lines[..k].join("\n"), &KEYS).is_none())
                .unwrap_or(0);
            eprintln!("FALLBACK {:?}", lines.get(k.wrapping_sub(1)));
        }
        eprintln!("{fast} of {} corpus documents on the fast path", docs.len());
        assert!(fast * 100 >= docs.len() * 95, "{fast} of {}", docs.len());
    }

    #[test]
    fn fuzz_corpus_heads_match_the_full_parser() {
        let docs = fuzz_docs();
        assert!(docs.len() > 100, "only {} fuzz inputs", docs.len());
        let fast = docs.iter().filter(|d| check(d)).count();
        eprintln!("{fast} of {} fuzz inputs on the fast path", docs.len());
    }

    /// Small edits of corpus documents (a character inserted, removed or replaced, a line
    /// indented differently): most are invalid or unusual, and wherever the fast path still
    /// answers, the full parser agrees.
    #[test]
    fn mutated_corpus_documents_never_fool_the_fast_path() {
        const INSERTS: &[u8] = b" \t:#-?&*!|>'\"[]{},%@`\\\n.~";
        let docs = corpus_docs();
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut answered = 0;
        let mut tried = 0;
        for doc in docs.iter().step_by(3) {
            let doc: String = doc.chars().take(3000).collect();
            if !doc.is_ascii() || doc.is_empty() {
                continue;
            }
            for _ in 0..30 {
                let mut b = doc.clone().into_bytes();
                mutate(&mut b, INSERTS, 4, &mut rng);
                let Ok(m) = String::from_utf8(b) else {
                    continue;
                };
                tried += 1;
                if check(&m) {
                    answered += 1;
                }
            }
        }
        eprintln!("{answered} of {tried} mutants on the fast path");
        assert!(tried > 10_000);
    }

    #[test]
    fn unusual_documents_go_to_the_full_parser() {
        for doc in [
            "kind: A\nspec: &a {x: 1}\n",
            "kind: A\nspec: *a\n",
            "kind: !!str A\n",
            "? kind\n: A\n",
            "kind: A\n\tspec: 1\n",
            "kind: A\nspec: [1,\n  2]\n",
            "kind: |2\n   A\n",
            "kind: a: b\n",
            "- a\n",
            "  kind: A\n",
            "%YAML 1.1\n---\nkind: A\n",
            "kind: A\n...\n",
            "\"ki\\u006ed\": A\n",
            "kind: A\r\n",
            "kind: \"A\nB\"\nx: 1\n",
            "kind: A\nspec: {a: http://x}\n",
            "kind: A\u{1}\n",
            "kind: A\u{7f}\n",
            "kind: A\u{2028}B\n",
            "kind: \u{feff}A\n",
            "kind: A\u{85}\n",
        ] {
            assert_eq!(block_head(doc, &KEYS), None, "{doc:?}");
        }
    }

    #[test]
    fn heads_of_plain_documents_are_their_entries() {
        let doc = "# c\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  annotations:\n    a: |\n      text\n\ndata:\n  k: \"v\"\n  l: [a, 'b', {c: d}]\n  m: >-\n    folded\n    text\n";
        assert_eq!(
            block_head(doc, &KEYS),
            Some(Head::Entries(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  annotations:\n    a: |\n      text\n\n"
                    .to_string()
            ))
        );
        assert_eq!(block_head("# only\n\n", &KEYS), Some(Head::Empty));
        assert!(check(
            "kind: Zürich\nmetadata:\n  name: \"日本\"\ndata:\n  x: ÿ € 😀\n"
        ));
        assert_eq!(
            block_head("spec:\n- a\n- b: c\n  d: e\n", &KEYS),
            Some(Head::Entries(String::new()))
        );
        assert!(check("kind: A\nmetadata:\n  name: a\n    b\nspec: 1\n"));
        assert!(check("kind: A\nlist:\n- x\n-\n  y: 1\n- z\n"));
        assert!(!check("kind: A\nlist:\n- - z\n"));
    }
}
