//! A fast path for decoding a whole document ([`crate::from_str`] and everything built on it,
//! values files first).
//!
//! Values files are plain block-style YAML: nested mappings and sequences, plain and quoted
//! scalars, literal and folded block scalars, one-line flow collections, comments. This
//! module reads that subset line by line straight into [`Value`]s, with the same scalar
//! resolution and repeated-key rule as the full decoder, and answers `None` for anything
//! outside it (the same subset as the head reader in `head.rs`, whose line tests it reuses,
//! plus anchors on one-line scalars and aliases of them; anything else is left: anchors on
//! collections or keys, aliases of collections, merge keys, tags, explicit keys,
//! directives, document markers, tabs, multi-line
//! quoted scalars or flow collections, block scalar indentation indicators, plain scalars
//! holding `: `, keys over 1000 bytes, control or line-separator characters, a root that is
//! not a collection at column 0). The caller then runs the full parser, so every error is
//! still the full parser's.

use crate::head::{
    after_node, block_header, characters_ok, continuation_start, flow_scalar, indent_of, key_at,
    plain_end, plain_start, quoted_end,
};
use crate::resolve::{self, Resolved};
use crate::{Mapping, Value};

/// Deepest nesting of block collections followed; deeper documents go to the full parser.
const MAX_NESTING: usize = 200;
/// Deepest nesting of one-line flow collections (as the head reader's).
const MAX_FLOW_NESTING: usize = 20;
/// Longest flow mapping key accepted (as the head reader's block keys).
const MAX_KEY_BYTES: usize = 1000;
/// Most entries of one mapping: a repeated key is looked for by a linear search, so larger
/// mappings go to the full parser, whose decoder indexes keys (no quadratic time on hostile
/// input).
const MAX_MAP_ENTRIES: usize = 512;
/// Most anchors and most aliases in one document: an alias is looked up by a linear search
/// of the anchors, so more go to the full parser.
const MAX_ANCHORS: usize = 64;
const MAX_ALIASES: usize = 256;

/// The first (only) document of `src` decoded as go-yaml v2 decodes it into `interface{}`,
/// when `src` is within the subset; `None` otherwise.
pub(crate) fn block_value(src: &str) -> Option<Value> {
    let bytes = src.as_bytes();
    if memchr::memchr(b'\t', bytes).is_some() || !characters_ok(src) {
        return None;
    }
    let mut lines = Vec::with_capacity(bytes.len() / 32 + 1);
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', bytes).chain(std::iter::once(bytes.len())) {
        // Both ends are at ASCII line feeds (or the end), so on character boundaries.
        let line = src.get(start..end)?;
        if line.starts_with("---") || line.starts_with("...") {
            return None;
        }
        lines.push(line);
        start = end + 1;
    }
    let mut r = Reader {
        lines,
        n: 0,
        depth: 0,
        anchors: Vec::new(),
        aliases: 0,
    };
    r.skip_void();
    let Some(first) = r.line() else {
        return Some(Value::Null);
    };
    let b = first.as_bytes();
    let v = if indent_of(b) != 0 {
        return None;
    } else if matches!(b[0], b'[' | b'{') {
        // A one-line flow collection (`{}` for an empty values file).
        let (v, end) = flow(first, 0, 0)?;
        after_node(&b[end..])?;
        r.n += 1;
        v
    } else if is_dash(b, 0) {
        r.seq(0, false)?
    } else {
        key_at(b, 0)?;
        r.map(0)?
    };
    r.skip_void();
    (r.n >= r.lines.len()).then_some(v)
}

/// A `-` entry indicator at `at`.
fn is_dash(b: &[u8], at: usize) -> bool {
    b.get(at) == Some(&b'-') && matches!(b.get(at + 1), None | Some(b' '))
}

fn spaces(b: &[u8]) -> usize {
    b.iter().take_while(|&&c| c == b' ').count()
}

/// What go-yaml v2 decodes a plain, untagged scalar to.
pub(crate) fn plain_value(s: &str) -> Value {
    match resolve::resolve_plain(s) {
        Resolved::Null => Value::Null,
        Resolved::Bool(b) => Value::Bool(b),
        Resolved::Int(i) => Value::Int(i),
        Resolved::Uint(u) => Value::Uint(u),
        Resolved::Float(f) => Value::Float(f),
        Resolved::Str | Resolved::Timestamp | Resolved::Merge => Value::String(s.to_owned()),
    }
}

/// The text of a quoted scalar (`inner` is between the quotes, on one line, already checked
/// by [`quoted_end`]).
fn unquote(inner: &str, quote: u8) -> Option<String> {
    if quote == b'\'' {
        return Some(inner.replace("''", "'"));
    }
    let mut out = String::with_capacity(inner.len());
    let mut rest = inner;
    while let Some(p) = rest.find('\\') {
        out.push_str(rest.get(..p)?);
        let (c, used) = match *rest.as_bytes().get(p + 1)? {
            b'\\' => ('\\', 2),
            b'"' => ('"', 2),
            b'n' => ('\n', 2),
            b't' => ('\t', 2),
            b'r' => ('\r', 2),
            b'0' => ('\0', 2),
            b'a' => ('\u{7}', 2),
            b'b' => ('\u{8}', 2),
            b'e' => ('\u{1b}', 2),
            b'f' => ('\u{c}', 2),
            b'v' => ('\u{b}', 2),
            b' ' => (' ', 2),
            e @ (b'x' | b'u' | b'U') => {
                let digits = match e {
                    b'x' => 2,
                    b'u' => 4,
                    _ => 8,
                };
                let hex = rest.get(p + 2..p + 2 + digits)?;
                if !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                    return None;
                }
                let v = u32::from_str_radix(hex, 16).ok()?;
                (char::from_u32(v)?, 2 + digits)
            }
            _ => return None,
        };
        out.push(c);
        rest = rest.get(p + used..)?;
    }
    out.push_str(rest);
    Some(out)
}

/// A quoted scalar starting at `at` and closing on the same line: its text and the offset
/// past the closing quote.
fn quoted(l: &str, at: usize) -> Option<(String, usize)> {
    let b = l.as_bytes();
    let q = *b.get(at)?;
    let end = quoted_end(b, at + 1, q)??;
    Some((unquote(l.get(at + 1..end - 1)?, q)?, end))
}

/// Sets `key` in `m` as go-yaml's decoder does: a repeated key keeps its first position and
/// takes the last value. `None` once the mapping is too large for the fast path.
fn insert(m: &mut Mapping, key: Value, value: Value) -> Option<()> {
    if m.len() >= MAX_MAP_ENTRIES {
        return None;
    }
    m.insert(key, value);
    Some(())
}

/// A one-line flow collection at `at` (`[` or `{`, as the head reader accepts them): its
/// value and the offset past its end.
fn flow(l: &str, at: usize, depth: usize) -> Option<(Value, usize)> {
    if depth >= MAX_FLOW_NESTING {
        return None;
    }
    let b = l.as_bytes();
    let is_map = *b.get(at)? == b'{';
    let close = if is_map { b'}' } else { b']' };
    let skip = |i: usize| i + spaces(b.get(i..).unwrap_or_default());
    let mut items = Vec::new();
    let mut map = Mapping::new();
    let mut i = skip(at + 1);
    if b.get(i) != Some(&close) {
        loop {
            let key = if is_map {
                let (k, end) = flow_scalar_value(l, i)?;
                // libyaml forgets a possible key that started over 1024 characters back.
                if end - i > MAX_KEY_BYTES
                    || b.get(end) != Some(&b':')
                    || b.get(end + 1) != Some(&b' ')
                {
                    return None;
                }
                i = skip(end + 1);
                Some(k)
            } else {
                None
            };
            let (v, end) = match b.get(i)? {
                b'[' | b'{' => flow(l, i, depth + 1)?,
                _ => flow_scalar_value(l, i)?,
            };
            match key {
                Some(k) => insert(&mut map, k, v)?,
                None => items.push(v),
            }
            i = skip(end);
            match *b.get(i)? {
                b',' => {
                    i = skip(i + 1);
                    if matches!(b.get(i), Some(b']' | b'}' | b',')) {
                        return None;
                    }
                }
                c if c == close => break,
                _ => return None,
            }
        }
    }
    let v = if is_map {
        Value::Map(map)
    } else {
        Value::Seq(items)
    };
    Some((v, i + 1))
}

/// A scalar inside a flow collection (see [`flow_scalar`]): its value and end.
fn flow_scalar_value(l: &str, at: usize) -> Option<(Value, usize)> {
    let b = l.as_bytes();
    if matches!(b.get(at), Some(b'"' | b'\'')) {
        let (text, end) = quoted(l, at)?;
        return Some((Value::String(text), end));
    }
    let end = flow_scalar(b, at)?;
    Some((plain_value(l.get(at..end)?), end))
}

/// Block scalar chomping.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Chomp {
    Strip,
    Clip,
    Keep,
}

struct Reader<'a> {
    lines: Vec<&'a str>,
    /// The current line.
    n: usize,
    depth: usize,
    /// The anchors met so far (on scalars only), in document order: an alias names the
    /// latest of that name, as libyaml's parser keeps it.
    anchors: Vec<(&'a str, Value)>,
    aliases: usize,
}

/// The end of an anchor or alias name starting at `at`: libyaml's `[0-9A-Za-z_-]+` (which
/// every reader of this crate takes alike; other names are left to the full parser).
fn anchor_name_end(b: &[u8], at: usize) -> Option<usize> {
    let n = b
        .get(at..)?
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'))
        .count();
    (n > 0).then_some(at + n)
}

impl<'a> Reader<'a> {
    fn line(&self) -> Option<&'a str> {
        self.lines.get(self.n).copied()
    }

    /// Skips blank and comment-only lines.
    fn skip_void(&mut self) {
        while let Some(l) = self.line() {
            let b = l.as_bytes();
            let i = indent_of(b);
            if i == b.len() || b[i] == b'#' {
                self.n += 1;
            } else {
                break;
            }
        }
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_NESTING).then_some(())
    }

    /// A block mapping with its keys at column `col`, the first one on the current line
    /// (maybe after a `- `).
    fn map(&mut self, col: usize) -> Option<Value> {
        self.enter()?;
        let mut m = Mapping::new();
        let mut first = true;
        loop {
            if !first {
                self.skip_void();
                let Some(l) = self.line() else { break };
                let ind = indent_of(l.as_bytes());
                if ind < col {
                    break;
                }
                if ind > col {
                    return None;
                }
            }
            first = false;
            let l = self.line()?;
            let b = l.as_bytes();
            let (raw, after) = key_at(b, col)?;
            let key = match (b[col], raw) {
                (b'"' | b'\'', Some(text)) => {
                    Value::String(std::str::from_utf8(text).ok()?.to_owned())
                }
                (b'"' | b'\'', None) => Value::String(quoted(l, col)?.0),
                (_, Some(text)) => plain_value(std::str::from_utf8(text).ok()?),
                (_, None) => return None,
            };
            let value = self.inline_value(l, after, col, true)?;
            insert(&mut m, key, value)?;
        }
        self.depth -= 1;
        Some(Value::Map(m))
    }

    /// A block sequence with its `-` at column `col`, the first one on the current line.
    /// `indentless`: it is a mapping value at the mapping's own column, so a line at `col`
    /// without a `-` ends it.
    fn seq(&mut self, col: usize, indentless: bool) -> Option<Value> {
        self.enter()?;
        let mut items = Vec::new();
        loop {
            self.skip_void();
            let Some(l) = self.line() else { break };
            let b = l.as_bytes();
            let ind = indent_of(b);
            if ind < col {
                break;
            }
            if ind > col {
                return None;
            }
            if !is_dash(b, col) {
                if indentless {
                    break;
                }
                return None;
            }
            let at = col + 1 + spaces(&b[col + 1..]);
            let item = match b.get(at) {
                None | Some(b'#') => {
                    self.n += 1;
                    self.block_node(col, false)?
                }
                // A sequence in a sequence on one line: left to the full parser.
                Some(b'-') if matches!(b.get(at + 1), None | Some(b' ')) => return None,
                Some(_) if key_at(b, at).is_some() => self.map(at)?,
                Some(_) => self.scalar(l, at, col)?,
            };
            items.push(item);
        }
        self.depth -= 1;
        Some(Value::Seq(items))
    }

    /// The value after a key's `:` (from offset `from` of line `l`), in a mapping at column
    /// `parent`.
    fn inline_value(
        &mut self,
        l: &'a str,
        from: usize,
        parent: usize,
        in_map: bool,
    ) -> Option<Value> {
        let b = l.as_bytes();
        let at = from + spaces(&b[from..]);
        match b.get(at) {
            None | Some(b'#') => {
                self.n += 1;
                self.block_node(parent, in_map)
            }
            Some(_) => self.scalar(l, at, parent),
        }
    }

    /// A node that starts on a later line (after `key:` or `-` with nothing else), owned by
    /// a collection at column `parent`; null when there is none.
    fn block_node(&mut self, parent: usize, in_map: bool) -> Option<Value> {
        self.skip_void();
        let Some(l) = self.line() else {
            return Some(Value::Null);
        };
        let b = l.as_bytes();
        let ind = indent_of(b);
        let dash = is_dash(b, ind);
        if ind > parent {
            if dash {
                return self.seq(ind, false);
            }
            if key_at(b, ind).is_some() {
                return self.map(ind);
            }
            return self.scalar(l, ind, parent);
        }
        if ind == parent && in_map && dash {
            return self.seq(ind, true);
        }
        Some(Value::Null)
    }

    /// A scalar or flow collection at `at` of the current line, owned by a collection at
    /// column `parent`; consumes its lines.
    fn scalar(&mut self, l: &'a str, at: usize, parent: usize) -> Option<Value> {
        let b = l.as_bytes();
        match b[at] {
            c @ (b'|' | b'>') => {
                let rest = &b[at + 1..];
                block_header(rest)?;
                let chomp = match rest.first() {
                    Some(b'-') => Chomp::Strip,
                    Some(b'+') => Chomp::Keep,
                    _ => Chomp::Clip,
                };
                self.n += 1;
                self.block_scalar(c == b'|', chomp, parent)
                    .map(Value::String)
            }
            b'"' | b'\'' => {
                let (text, end) = quoted(l, at)?;
                after_node(&b[end..])?;
                self.n += 1;
                Some(Value::String(text))
            }
            b'[' | b'{' => {
                let (v, end) = flow(l, at, 0)?;
                after_node(&b[end..])?;
                self.n += 1;
                Some(v)
            }
            b'&' => self.anchored(l, at, parent),
            b'*' => {
                let end = anchor_name_end(b, at + 1)?;
                after_node(&b[end..])?;
                let name = l.get(at + 1..end)?;
                self.aliases += 1;
                if self.aliases > MAX_ALIASES {
                    return None;
                }
                // An unknown anchor is the full parser's error.
                let (_, v) = self.anchors.iter().rev().find(|(n, _)| *n == name)?;
                let v = v.clone();
                self.n += 1;
                Some(v)
            }
            _ => self.plain(l, at, parent),
        }
    }

    /// An anchor at `at` (`&name`), followed on its line by the plain or quoted scalar it
    /// names; an anchor on anything else (a collection, a block scalar, an empty node) is
    /// left to the full parser.
    fn anchored(&mut self, l: &'a str, at: usize, parent: usize) -> Option<Value> {
        let b = l.as_bytes();
        let end = anchor_name_end(b, at + 1)?;
        let name = l.get(at + 1..end)?;
        let node = end + spaces(&b[end..]);
        if node == end || self.anchors.len() >= MAX_ANCHORS {
            return None;
        }
        match b.get(node) {
            Some(b'"' | b'\'') => {}
            Some(_) if plain_start(&b[node..], false) => {}
            _ => return None,
        }
        let v = self.scalar(l, node, parent)?;
        self.anchors.push((name, v.clone()));
        Some(v)
    }

    /// A plain scalar at `at`, going on over the following lines indented more than
    /// `parent` (folded as YAML folds them: one line break is a space, `n` blank lines are
    /// `n` line breaks).
    fn plain(&mut self, l: &'a str, at: usize, parent: usize) -> Option<Value> {
        let b = l.as_bytes();
        if !plain_start(&b[at..], false) {
            return None;
        }
        let (end, commented) = plain_end(b, at)?;
        let first = l.get(at..end)?.trim_end_matches(' ');
        self.n += 1;
        if commented {
            return Some(plain_value(first));
        }
        let mut text: Option<String> = None;
        let mut blank = 0usize;
        let mut k = self.n;
        while let Some(c) = self.lines.get(k) {
            let cb = c.as_bytes();
            let ind = indent_of(cb);
            if ind == cb.len() {
                blank += 1;
                k += 1;
                continue;
            }
            if ind <= parent || cb[ind] == b'#' {
                break;
            }
            if !continuation_start(&cb[ind..]) {
                return None;
            }
            let (end, commented) = plain_end(cb, ind)?;
            let t = text.get_or_insert_with(|| first.to_owned());
            if blank == 0 {
                t.push(' ');
            } else {
                for _ in 0..blank {
                    t.push('\n');
                }
            }
            t.push_str(c.get(ind..end)?.trim_end_matches(' '));
            blank = 0;
            k += 1;
            self.n = k;
            if commented {
                break;
            }
        }
        Some(match text {
            None => plain_value(first),
            Some(t) => match plain_value(&t) {
                Value::String(_) => Value::String(t),
                other => other,
            },
        })
    }

    /// Eats indentation (up to `indent` when known, 0 for not yet) and blank lines from
    /// the current line on, as libyaml's `scan_block_scalar_breaks`: returns the column
    /// reached on the line it stops at and whether that line is the input's end (no line
    /// break after it), counting the blank lines eaten in `breaks`.
    fn block_breaks(
        &mut self,
        indent: usize,
        max_indent: &mut usize,
        breaks: &mut usize,
    ) -> Option<(usize, bool)> {
        loop {
            let Some(l) = self.line() else {
                return Some((0, true));
            };
            let l = l.as_bytes();
            let sp = indent_of(l);
            let col = if indent == 0 { sp } else { sp.min(indent) };
            *max_indent = (*max_indent).max(col);
            let last = self.n + 1 >= self.lines.len();
            if col == l.len() && !last {
                *breaks += 1;
                self.n += 1;
                continue;
            }
            return Some((col, col == l.len() && last));
        }
    }

    /// The text of a literal (`|`) or folded (`>`) block scalar whose header was on the
    /// previous line, owned by a collection at column `parent` (libyaml's
    /// `scan_block_scalar` with an automatic indentation).
    fn block_scalar(&mut self, literal: bool, chomp: Chomp, parent: usize) -> Option<String> {
        let mut out = String::new();
        let mut max_indent = 0;
        let mut trailing = 0;
        let (mut col, mut at_end) = self.block_breaks(0, &mut max_indent, &mut trailing)?;
        // Blank lines wider than the first text line: left to the full parser.
        if max_indent > col && !at_end {
            return None;
        }
        let indent = max_indent.max(parent + 1);
        if col < indent && max_indent > parent {
            return None;
        }
        let mut leading_break = false;
        let mut leading_blank = false;
        while col == indent && !at_end {
            let l = self.line()?;
            let b = l.as_bytes();
            let trailing_blank = b.get(col) == Some(&b' ');
            if !literal && leading_break && !leading_blank && !trailing_blank {
                if trailing == 0 {
                    out.push(' ');
                }
            } else if leading_break {
                out.push('\n');
            }
            leading_break = false;
            for _ in 0..trailing {
                out.push('\n');
            }
            trailing = 0;
            leading_blank = trailing_blank;
            out.push_str(l.get(col..)?);
            self.n += 1;
            if self.n >= self.lines.len() {
                break;
            }
            leading_break = true;
            (col, at_end) = self.block_breaks(indent, &mut max_indent, &mut trailing)?;
        }
        if chomp != Chomp::Strip && leading_break {
            out.push('\n');
        }
        if chomp == Chomp::Keep {
            for _ in 0..trailing {
                out.push('\n');
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    //! The fast path against the full parser: wherever [`block_value`] answers, the full
    //! parser must read the document without error to the same value.

    use super::*;
    use crate::head::tests::{Rng, files_under, mutate, shared_charts};
    use crate::parse::{DecodeOptions, unmarshal_parsed};
    use std::path::{Path, PathBuf};

    /// Documents as Helm's values loader splits a stream: on `---` lines.
    fn split(text: &str) -> Vec<String> {
        let mut docs = vec![String::new()];
        for line in text.split_inclusive('\n') {
            if line.starts_with("---") && line[3..].trim_end().is_empty() {
                docs.push(String::new());
            } else if let Some(d) = docs.last_mut() {
                d.push_str(line);
            }
        }
        docs.retain(|d| !d.is_empty());
        docs
    }

    /// Every document of the YAML files of the shared charts (values files of the charts,
    /// their subcharts and the cases, Chart.yaml, CRDs) and of the golden outputs, by file.
    fn corpus() -> Vec<(PathBuf, Vec<String>)> {
        let dir = shared_charts();
        let mut files = Vec::new();
        files_under(&dir, &mut files);
        files
            .into_iter()
            .filter(|f| {
                let name = f.to_string_lossy();
                (name.ends_with(".yaml") || name.ends_with(".yml")) && !name.contains("/templates/")
            })
            .filter_map(|f| {
                let text = std::fs::read_to_string(&f).ok()?;
                Some((f, split(&text)))
            })
            .collect()
    }

    /// Whether the fast path answered; when it did, it is checked against the full parser.
    fn check(doc: &str) -> bool {
        let Some(fast) = block_value(doc) else {
            return false;
        };
        match unmarshal_parsed(doc, DecodeOptions::default()) {
            Ok(full) => assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{doc}"),
            Err(e) => panic!("the fast path accepted a document the parser refuses ({e}):\n{doc}"),
        }
        true
    }

    #[test]
    fn values_files_of_the_corpus_match_the_full_parser_and_take_the_fast_path() {
        let corpus = corpus();
        let mut values = 0;
        let mut values_fast = 0;
        let mut docs = 0;
        let mut docs_fast = 0;
        for (file, file_docs) in &corpus {
            let name = file.to_string_lossy();
            let is_values = name.ends_with("values.yaml") || name.contains("/values/");
            for d in file_docs {
                let fast = check(d);
                docs += 1;
                docs_fast += usize::from(fast);
                if is_values {
                    values += 1;
                    values_fast += usize::from(fast);
                    if !fast {
                        // The first line whose prefix leaves the subset, to see what is
                        // missing.
                        let lines: Vec<&str> = d.split_inclusive('\n').collect();
                        let k = (1..=lines.len())
                            .find(|&k| block_value(&lines[..k].concat()).is_none())
                            .unwrap_or(0);
                        eprintln!("FALLBACK {name}:{k}: {:?}", lines.get(k.wrapping_sub(1)));
                    }
                }
            }
        }
        eprintln!(
            "{values_fast} of {values} values documents, {docs_fast} of {docs} documents on the fast path"
        );
        assert!(values > 50, "only {values} values documents");
        assert!(
            values_fast * 100 >= values * 90,
            "{values_fast} of {values}"
        );
    }

    #[test]
    fn fuzz_corpus_matches_the_full_parser() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/yaml_values");
        let mut files = Vec::new();
        files_under(&dir, &mut files);
        let docs: Vec<String> = files
            .iter()
            .filter_map(|f| std::fs::read(f).ok())
            .filter_map(|b| String::from_utf8(b).ok())
            .collect();
        assert!(docs.len() > 100, "only {} fuzz inputs", docs.len());
        let fast = docs.iter().filter(|d| check(d)).count();
        eprintln!("{fast} of {} fuzz inputs on the fast path", docs.len());
    }

    /// Small edits of corpus values documents (a character inserted, removed or replaced, a
    /// line indented differently): wherever the fast path still answers, the full parser
    /// agrees.
    #[test]
    fn mutated_values_documents_never_fool_the_fast_path() {
        const INSERTS: &[u8] = b" \t:#-?&*!|>+'\"[]{},%@`\\\n.~0123yn";
        // Judged by the path inside the corpus: the checkout's own path may contain "values".
        let docs: Vec<String> = corpus()
            .into_iter()
            .filter(|(f, _)| {
                let path = f.to_string_lossy();
                path.rsplit("shared/charts/")
                    .next()
                    .is_some_and(|p| p.contains("values"))
            })
            .flat_map(|(_, d)| d)
            .collect();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut answered = 0;
        let mut tried = 0;
        for doc in &docs {
            // Windows of a few dozen lines keep the run short and the edits dense.
            let lines: Vec<&str> = doc.split_inclusive('\n').collect();
            for start in (0..lines.len()).step_by(40) {
                let window: String = lines[start..(start + 60).min(lines.len())].concat();
                if !window.is_ascii() || window.is_empty() {
                    continue;
                }
                for _ in 0..12 {
                    let mut b = window.clone().into_bytes();
                    for _ in 0..=rng.below(2) {
                        mutate(&mut b, INSERTS, 4, &mut rng);
                        if b.is_empty() {
                            break;
                        }
                    }
                    let Ok(m) = String::from_utf8(b) else {
                        continue;
                    };
                    tried += 1;
                    if check(&m) {
                        answered += 1;
                    }
                }
            }
        }
        eprintln!("{answered} of {tried} mutants on the fast path");
        assert!(tried > 5_000, "only {tried} mutants");
    }

    #[test]
    fn block_scalars_fold_and_chomp_as_the_full_parser() {
        let heads = ["|", "|-", "|+", ">", ">-", ">+"];
        let bodies = [
            "  a\n  b\n",
            "  a\n\n  b\n\n\n",
            "  a\n    b\n  c\n",
            "  a\n  b\n    c\n  d\n\n  e\n",
            "\n\n  a\n",
            "  a\n   \n  b\n",
            "    a\n  \n    b\n",
            "  a\n  b",
            "  a\n  b\n  ",
            "",
            "\n",
            "\n\n",
            "  # not a comment\n  x\n",
            "   lead\n  less\n",
        ];
        let mut fast = 0;
        for h in heads {
            for body in bodies {
                for tail in ["", "next: 1\n", "  # c\nnext: 1\n", "\nnext: 1\n"] {
                    for (pre, post) in [("k: ", ""), ("- k: ", ""), ("l:\n- ", "")] {
                        let indented: String = if pre.starts_with("- ") {
                            body.split_inclusive('\n')
                                .map(|l| {
                                    if l.trim().is_empty() {
                                        l.to_owned()
                                    } else {
                                        format!("  {l}")
                                    }
                                })
                                .collect()
                        } else {
                            body.to_owned()
                        };
                        let tail = if pre.starts_with("- ") {
                            tail.replace("next", "- next")
                        } else {
                            tail.to_owned()
                        };
                        let doc = format!("{pre}{h}\n{indented}{tail}{post}");
                        if check(&doc) {
                            fast += 1;
                        }
                    }
                }
            }
        }
        assert!(fast > 500, "{fast}");
    }

    #[test]
    fn plain_values_resolve_as_go_yaml_v2() {
        let doc = "a: yes\nb: off\nc: 0x1F\nd: 0o17\ne: 1_000\nf: 1.5e3\ng: ~\nh: 2001-12-14\ni: .inf\nj: -.NaN\nk: 012\nl: '1'\nm: \"x\\u00e9\\n\"\nn: [1, 'a', {b: c}]\no: {}\np:\nq: 18446744073709551615\n1: int key\ntrue: bool key\nr: plain\n  folded\n\n  text\n";
        assert!(check(doc), "{doc}");
        assert!(check("a: 1\na: 2\nb: 3\n"));
        assert!(
            check("- a\n-\n  b: 1\n  c:\n  - x\n  - y\n- \n- - z\n")
                || block_value("- - z\n").is_none()
        );
    }

    #[test]
    fn anchored_scalars_and_their_aliases_decode_as_the_full_parser() {
        for doc in [
            "a: &x 1\nb: *x\n",
            "port: &p 9121\npath: &s /metrics\nsm:\n  path: *s\n  port: *p\n",
            "a: &x 'q'\nb: *x # c\nc:\n- *x\n- &y \"d\\n\"\n- *y\n",
            "a: &x yes\nb: &x ~\nc: *x\n",
            "a: &x-1_B plain\n  folded\nb:\n  c: *x-1_B\n",
            "- &x 1\n- *x\n- k: *x\n",
            "a: &x 1 # c\nb: *x\n",
        ] {
            assert!(check(doc), "{doc:?}");
        }
        let many: String = (0..=MAX_ALIASES).map(|i| format!("k{i}: *x\n")).collect();
        assert!(block_value(&format!("a: &x 1\n{many}")).is_none());
        assert!(check(&format!("a: &x 1\n{}", &many[..many.len() / 2])));
    }

    /// Small edits of documents full of anchors and aliases (as redis-ha's and
    /// alertmanager's values use them): wherever the fast path still answers, the full
    /// parser agrees.
    #[test]
    fn mutated_anchor_documents_never_fool_the_fast_path() {
        const INSERTS: &[u8] = b" :#-&*!|>'\"[]{},.~0xy_\n";
        let docs = [
            "exporter:\n  port: &exporter_port 9121\n  path: &path /metrics\n  name: &n 'x'\nsm:\n  endpoints:\n  - port: *exporter_port\n    path: *path\n  - *n\n  - &m \"q\"\n  - *m\nother: *exporter_port\n",
            "containerPortName: &containerPortName http\nservice:\n  port: *containerPortName\n  list:\n  - &a yes\n  - *a\n  more: &b 1.5 # c\n  again: *b\n",
        ];
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let (mut tried, mut answered) = (0, 0);
        for doc in docs {
            assert!(check(doc), "{doc}");
            for _ in 0..3000 {
                let mut b = doc.as_bytes().to_vec();
                for _ in 0..=rng.below(2) {
                    mutate(&mut b, INSERTS, 3, &mut rng);
                }
                let m = String::from_utf8(b).expect("ASCII edits of ASCII");
                tried += 1;
                answered += usize::from(check(&m));
            }
        }
        eprintln!("{answered} of {tried} anchor mutants on the fast path");
        assert!(answered > 1000, "{answered} of {tried}");
    }

    #[test]
    fn huge_mappings_go_to_the_full_parser() {
        let small: String = (0..MAX_MAP_ENTRIES)
            .map(|i| format!("k{i}: {i}\n"))
            .collect();
        assert!(block_value(&small).is_some());
        let big = format!("{small}last: 1\n");
        assert!(block_value(&big).is_none());
        let flow = format!(
            "{{{}}}",
            (0..=MAX_MAP_ENTRIES)
                .map(|i| format!("k{i}: {i}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        assert!(block_value(&flow).is_none());
    }

    #[test]
    fn unusual_documents_go_to_the_full_parser() {
        for doc in [
            "a: &x\n  b: 1\nc: *x\n",
            "a: &x [1]\nb: *x\n",
            "a: &x |\n  t\nb: *x\n",
            "a: *x\n",
            "a: &x 1\nb: *y\n",
            "a: &x.y 1\nb: *x.y\n",
            "a: &x 1\nb: *x:\n",
            "a: &x 1\nb: *x#c\n",
            "a: &x &y 1\n",
            "a: &x *y\n",
            "&x a: 1\n",
            "a: &x 1\n*x : 2\n",
            "a: [&x 1, *x]\n",
            "a: &x 1\n<<: *x\n",
            "a: !!str 1\n",
            "? a\n: 1\n",
            "a: 1\n\tb: 2\n",
            "a: [1,\n  2]\n",
            "a: |2\n   x\n",
            "a: b: c\n",
            "  a: 1\n",
            "%YAML 1.1\n---\na: 1\n",
            "a: 1\n---\nb: 2\n",
            "a: \"x\n  y\"\n",
            "<<: {a: 1}\n",
            "plain scalar\n",
            "a: 1\r\n",
            "a:\n  - x\n  b: 1\n",
            &format!("a: {{{}: 1}}\n", "k".repeat(1100)),
        ] {
            assert_eq!(block_value(doc), None, "{doc:?}");
        }
    }
}
