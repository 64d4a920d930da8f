//! Reading YAML the way go-yaml v2 does: saphyr-parser supplies the event stream, this module
//! builds go-yaml's node tree (anchors registered before children, as go-yaml does) and
//! decodes it into [`Value`]s with go-yaml v2's rules (`decode.go`): YAML 1.1 resolution of
//! plain scalars, tags, merge keys, aliases with the "billion laughs" guard.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError};

use crate::resolve::{self, BINARY_TAG, MERGE_TAG, Resolved};
use crate::{Error, Mapping, Value};

/// Character-index to text lookups for positions that mostly increase: amortised linear, and
/// constant time for ASCII text, where character and byte indices are the same.
#[derive(Default)]
struct CharCursor {
    chars: usize,
    bytes: usize,
    ascii: bool,
}

impl CharCursor {
    fn new(src: &str) -> CharCursor {
        CharCursor {
            ascii: src.is_ascii(),
            ..CharCursor::default()
        }
    }

    /// Byte offset of a character index (the end of the text when past it).
    fn byte_at(&mut self, src: &str, char_index: usize) -> usize {
        match self.char_at(src, char_index) {
            Some(_) => self.bytes,
            None => src.len(),
        }
    }

    fn char_at(&mut self, src: &str, char_index: usize) -> Option<char> {
        if self.ascii {
            let b = *src.as_bytes().get(char_index)?;
            self.chars = char_index;
            self.bytes = char_index;
            return Some(char::from(b));
        }
        // Walk back from the current position when asked for an earlier character.
        while char_index < self.chars {
            let prev = src.get(..self.bytes)?.chars().next_back()?;
            self.bytes -= prev.len_utf8();
            self.chars -= 1;
        }
        let rest = src.get(self.bytes..)?;
        for (n, (b, c)) in (self.chars..).zip(rest.char_indices()) {
            if n == char_index {
                self.chars = n;
                self.bytes += b;
                return Some(c);
            }
        }
        None
    }
}

/// A flow collection starting where libyaml's scanner requires a simple key (at the
/// indentation of the enclosing block mapping, in key position) must close on its line.
fn note_required_flow_key(
    pending: &mut Option<(usize, usize)>,
    doc: Option<&Doc>,
    stack: &[usize],
    span: &saphyr_parser::Span,
    flow: bool,
) {
    if pending.is_some() || !flow {
        return;
    }
    let Some(doc) = doc else { return };
    let Some(parent) = stack.last().and_then(|&p| doc.nodes.get(p)) else {
        return;
    };
    // libyaml's rule is by column only: `flow_level == 0 && indent == column`.
    if matches!(parent.kind, Kind::Map(_)) && !parent.flow && parent.col == span.start.col() {
        *pending = Some((span.start.line(), doc.nodes.len()));
    }
}

/// saphyr may fail before it reports a flow collection's start. If the next token after the
/// last event opens a flow collection where libyaml requires a simple key, and the failure is
/// on a later line, libyaml's own error is the stale key's: returns the collection's line.
fn flow_key_before_error(
    src: &str,
    doc: Option<&Doc>,
    stack: &[usize],
    last_end: usize,
    e: &ScanError,
) -> Option<usize> {
    let doc = doc?;
    let parent = stack.last().and_then(|&p| doc.nodes.get(p))?;
    if !matches!(parent.kind, Kind::Map(_)) || parent.flow {
        return None;
    }
    let from = byte_offset(src, last_end);
    let rest = src.get(from..)?;
    // Line (1-based) and column of `from`.
    let before = &src[..from];
    let mut line = before.matches('\n').count() + 1;
    let mut col = before.rsplit('\n').next().map_or(0, |l| l.chars().count());
    let mut in_comment = false;
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            // The value indicator after the last key.
            ':' if chars.peek().is_none_or(|n| n.is_whitespace()) => {}
            '\n' => {
                line += 1;
                col = 0;
                in_comment = false;
                continue;
            }
            _ if in_comment => {}
            ' ' | '\t' | '\r' => {}
            '#' => in_comment = true,
            '[' | '{' => {
                return (col == parent.col && e.marker().line() > line).then_some(line);
            }
            _ => return None,
        }
        col += 1;
    }
    None
}

/// libyaml's error for a required simple key left without `:` on its line: reported at the
/// first token of a later line.
fn stale_key_error(src: &str, line: usize) -> Error {
    let next = src
        .lines()
        .enumerate()
        .skip(line)
        .find(|(_, l)| {
            let t = l.trim_start_matches([' ', '\t']);
            !t.is_empty() && !t.starts_with('#')
        })
        .map_or(line, |(n, _)| n);
    Error::yaml(Some(next + 1), "could not find expected ':'")
}

/// libyaml forgets a possible simple key once the scanner is more than 1024 characters past
/// its start, so a longer implicit key ends in an error.
const SIMPLE_KEY_LIMIT: usize = 1024;

/// The error libyaml gives for an implicit mapping key longer than [`SIMPLE_KEY_LIMIT`].
fn check_long_key(
    src: &str,
    doc: Option<&Doc>,
    stack: &[usize],
    span: &saphyr_parser::Span,
) -> Result<(), Error> {
    let Some(doc) = doc else { return Ok(()) };
    let Some(parent) = stack.last().and_then(|&p| doc.nodes.get(p)) else {
        return Ok(());
    };
    let Kind::Map(children) = &parent.kind else {
        return Ok(());
    };
    if children.len() % 2 != 0 {
        return Ok(()); // a value, not a key
    }
    let end = byte_offset(src, span.end.index());
    let after = src.get(end..).unwrap_or_default();
    let spaces = after
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .count();
    if !after[spaces..].starts_with(':') {
        return Ok(()); // an explicit `? key`, or no value indicator
    }
    let colon = span.end.index() + spaces;
    if span.start.index() + SIMPLE_KEY_LIMIT >= colon {
        return Ok(());
    }
    let line0 = span.end.line().saturating_sub(1);
    let flow = src
        .get(byte_offset(src, parent.start)..)
        .is_some_and(|s| s.starts_with('{'));
    Err(if flow {
        Error::yaml(
            Some(line0).filter(|l| *l != 0),
            "did not find expected ',' or '}'",
        )
    } else {
        Error::yaml(
            Some(line0 + 1).filter(|_| line0 != 0),
            "mapping values are not allowed in this context",
        )
    })
}

/// Deepest nesting of collections accepted in a document (go-yaml v2 has no limit; this one
/// keeps the recursive decoder and emitter far from the end of the stack).
pub const MAX_DEPTH: usize = 1000;

#[derive(Debug)]
enum Kind {
    Scalar {
        value: String,
        /// Long-form tag, `!` for the non-specific tag, empty for none.
        tag: String,
        /// go-yaml's `implicit` (libyaml's `plain_implicit`): plain and untagged, or `!`.
        implicit: bool,
    },
    Seq(Vec<usize>),
    /// Keys and values alternate.
    Map(Vec<usize>),
    Alias {
        target: usize,
        name: String,
    },
}

#[derive(Debug)]
struct Node {
    kind: Kind,
    /// Character index where the node starts in the source.
    start: usize,
    /// Column of the start.
    col: usize,
    /// A flow collection (`[...]`, `{...}`).
    flow: bool,
}

/// One document's node tree.
struct Doc {
    nodes: Vec<Node>,
    root: Option<usize>,
}

/// Options for decoding.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DecodeOptions {
    /// go-yaml `UnmarshalStrict`: a repeated key is an error.
    pub(crate) strict: bool,
}

fn tag_string(tag: Option<&saphyr_parser::Tag>) -> String {
    match tag {
        None => String::new(),
        Some(t) => format!("{}{}", t.handle, t.suffix),
    }
}

/// Byte offset of a character index.
fn byte_offset(src: &str, char_index: usize) -> usize {
    src.char_indices()
        .nth(char_index)
        .map_or(src.len(), |(b, _)| b)
}

/// The anchor or alias name starting at `char_index` (pointing at `&` or `*`).
fn name_at(src: &str, char_index: usize) -> String {
    name_at_byte(src, byte_offset(src, char_index))
}

/// [`name_at`] for a byte offset.
fn name_at_byte(src: &str, start: usize) -> String {
    let rest = src.get(start..).unwrap_or("");
    let rest = rest.strip_prefix(['*', '&']).unwrap_or(rest);
    rest.chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, ',' | '[' | ']' | '{' | '}'))
        .collect()
}

/// go-yaml v2's message for a scanner or parser error, and whether it is a scanner error
/// (go-yaml numbers scanner error lines from 1, parser error lines from 0).
fn translate(info: &str) -> (String, bool) {
    // Parser errors of libyaml, by the text saphyr gives them.
    const PARSER: &[(&str, &str)] = &[
        (
            "while parsing a block mapping, did not find expected key",
            "did not find expected key",
        ),
        (
            "while parsing a block collection, did not find expected '-' indicator",
            "did not find expected '-' indicator",
        ),
        (
            "while parsing a flow sequence, expected ',' or ']'",
            "did not find expected ',' or ']'",
        ),
        (
            "while parsing a flow mapping, did not find expected ',' or '}'",
            "did not find expected ',' or '}'",
        ),
        (
            "while parsing a node, did not find expected node content",
            "did not find expected node content",
        ),
        (
            "did not find expected <document start>",
            "did not find expected <document start>",
        ),
        (
            "did not find expected <document-start>",
            "did not find expected <document start>",
        ),
        (
            "found incompatible YAML document",
            "found incompatible YAML document",
        ),
        (
            "duplicate version directive",
            "found duplicate %YAML directive",
        ),
        ("the handle wasn't declared", "found undefined tag handle"),
    ];
    const SCANNER: &[(&str, &str)] = &[
        ("simple key expect ':'", "could not find expected ':'"),
        ("simple key expected", "could not find expected ':'"),
        (
            "tabs disallowed within this context (block indentation)",
            "found character that cannot start any token",
        ),
        (
            "tabs disallowed in this context",
            "found character that cannot start any token",
        ),
        (
            "tab cannot be used as indentation",
            "found character that cannot start any token",
        ),
        ("invalid indentation", "did not find expected key"),
    ];
    for (from, to) in PARSER {
        if info == *from {
            return ((*to).to_owned(), false);
        }
    }
    for (from, to) in SCANNER {
        if info == *from {
            return ((*to).to_owned(), true);
        }
    }
    if info == "while scanning a plain scalar, found a tab" {
        return (
            "found a tab character that violates indentation".to_owned(),
            true,
        );
    }
    if info.ends_with("did not find expected hexadecimal number") {
        // go-yaml's spelling.
        return ("did not find expected hexdecimal number".to_owned(), true);
    }
    if info.starts_with("unexpected character") {
        return (
            "found character that cannot start any token".to_owned(),
            true,
        );
    }
    // saphyr's scanner words some of its errors "while parsing ...".
    if info.starts_with("while parsing a quoted scalar") || info.starts_with("while parsing a tag")
    {
        let problem = info.split_once(", ").map_or(info, |(_, p)| p);
        return (problem.to_owned(), true);
    }
    if info.starts_with("while parsing") {
        let problem = info.split_once(", ").map_or(info, |(_, p)| p);
        return (problem.to_owned(), false);
    }
    let problem = if info.starts_with("while scanning") {
        info.split_once(", ").map_or(info, |(_, p)| p)
    } else {
        info
    };
    (problem.to_owned(), true)
}

/// The 0-based line of the first escape libyaml does not know in the double-quoted scalar
/// at or after byte `from`.
fn bad_escape_line(src: &str, from: usize) -> Option<usize> {
    let rest = src.get(from..)?;
    let open = rest.find('"')?;
    let mut escaped = false;
    for (i, c) in rest[open + 1..].char_indices() {
        if escaped {
            let known = matches!(
                c,
                '0' | 'a'
                    | 'b'
                    | 't'
                    | '\t'
                    | 'n'
                    | 'v'
                    | 'f'
                    | 'r'
                    | 'e'
                    | ' '
                    | '"'
                    | '\''
                    | '\\'
                    | 'N'
                    | '_'
                    | 'L'
                    | 'P'
                    | 'x'
                    | 'u'
                    | 'U'
            );
            if !known {
                let at = from + open + 1 + i;
                return Some(src[..at].matches('\n').count());
            }
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '"' => return None,
            _ => {}
        }
    }
    None
}

/// Whether libyaml's scanner refuses to start a token with `c` (its plain-scalar rule).
fn cannot_start_token(c: char, flow: bool) -> bool {
    matches!(c, '@' | '`' | '%') || (flow && matches!(c, '|' | '>'))
}

fn scan_error(src: &str, e: &ScanError, ctx: Context) -> Error {
    let info = e.info();
    let mark = e.marker();
    if info == "while parsing node, found unknown anchor" {
        return Error::yaml(
            None,
            format!("unknown anchor '{}' referenced", name_at(src, mark.index())),
        );
    }
    let (mut problem, mut scanner) = match info {
        // libyaml ends a block scalar at a line indented less than its first lines; the
        // line then fails to fit the enclosing collection.
        "wrongly indented line in block scalar" => {
            (ctx.after_node().unexpected_token().to_owned(), false)
        }
        // A `]` or `}` outside any flow collection: libyaml's parser finds an unexpected token.
        "misplaced bracket" => (ctx.unexpected_token().to_owned(), false),
        // Repair found no closing quote: libyaml runs into the end of the stream.
        "invalid indentation in quoted scalar" => {
            ("found unexpected end of stream".to_owned(), true)
        }
        // saphyr stops on the text after a closing quote; libyaml's parser then finds a
        // token the collection cannot take.
        "invalid trailing content after double-quoted scalar" => {
            (ctx.after_node().unexpected_token().to_owned(), false)
        }
        // libyaml lets a `-` entry reach its flow parser, which then misses node content.
        "\"-\" is only valid inside a block" => {
            ("did not find expected node content".to_owned(), false)
        }
        // libyaml reads `x: y` inside a flow sequence as a key the sequence cannot hold.
        "illegal placement of ':' indicator" => {
            ("did not find expected ',' or ']'".to_owned(), false)
        }
        _ => translate(info),
    };
    if !scanner && problem.starts_with("did not find expected") {
        // Where saphyr's parser stops on a character libyaml's scanner would not even start
        // a token with, libyaml reports the scanner error.
        let at = src
            .get(byte_offset(src, mark.index())..)
            .and_then(|s| s.trim_start_matches([' ', ',']).chars().next());
        if at.is_some_and(|c| cannot_start_token(c, ctx.flow())) {
            problem = "found character that cannot start any token".to_owned();
            scanner = true;
        }
    }
    // go-yaml's `fail()`: the 0-based line of the problem, printed only when it is not 0,
    // plus one for scanner errors.
    let mut line0 = mark.line().saturating_sub(1);
    if problem == "found unexpected end of stream" {
        // libyaml reports it where the stream ends.
        line0 = src.matches('\n').count();
    }
    if problem == "found unknown escape character"
        && let Some(l) = bad_escape_line(src, byte_offset(src, mark.index()))
    {
        line0 = l;
    }
    if problem == "found a tab character that violates indentation" {
        // libyaml points at the tab, saphyr at the scalar.
        if let Some(n) = src
            .lines()
            .enumerate()
            .skip(line0)
            .find(|(_, l)| l.trim_start_matches(' ').starts_with('\t'))
            .map(|(n, _)| n)
        {
            line0 = n;
        }
    }
    let line = match (line0, scanner) {
        (0, _) => None,
        (l, true) => Some(l + 1),
        (l, false) => Some(l),
    };
    Error::yaml(line, problem)
}

/// libyaml only knows the `%YAML` and `%TAG` directives; saphyr accepts any. Checks the
/// directives before the first document.
fn check_directives(src: &str) -> Result<(), Error> {
    for (n, line) in src.lines().enumerate() {
        let t = line.trim_end();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if t == "..." || t.starts_with("... ") {
            // A document end before any document: libyaml looks for node content.
            let line = if n == 0 { None } else { Some(n) };
            return Err(Error::yaml(line, "did not find expected node content"));
        }
        let Some(rest) = t.strip_prefix('%') else {
            return Ok(());
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        if name == "YAML" {
            // go-yaml v2 accepts only `%YAML 1.1`.
            let version = rest[name.len()..]
                .split_whitespace()
                .next()
                .unwrap_or_default();
            if version != "1.1" {
                let line = if n == 0 { None } else { Some(n) };
                return Err(Error::yaml(line, "found incompatible YAML document"));
            }
            continue;
        }
        if name != "TAG" {
            let line = if n == 0 { None } else { Some(n + 1) };
            return Err(Error::yaml(line, "found unknown directive name"));
        }
    }
    Ok(())
}

/// go-yaml's reader checks: the characters libyaml refuses anywhere in the input.
fn check_characters(src: &str) -> Result<(), Error> {
    if src
        .bytes()
        .all(|b| matches!(b, 0x09 | 0x0A | 0x0D | 0x20..=0x7E))
    {
        return Ok(());
    }
    for c in src.chars() {
        let v = u32::from(c);
        let ok = matches!(v, 0x09 | 0x0A | 0x0D | 0x20..=0x7E | 0x85 | 0xA0..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10_FFFF);
        if !ok {
            return Err(Error::yaml(None, "control characters are not allowed"));
        }
    }
    Ok(())
}

/// Input bytes to text as go-yaml's reader does (UTF-8 only; a UTF-8 BOM is skipped).
pub(crate) fn bytes_to_str(input: &[u8]) -> Result<&str, Error> {
    match std::str::from_utf8(input) {
        Ok(s) => Ok(s),
        Err(e) => {
            let bad = input.get(e.valid_up_to()).copied().unwrap_or(0);
            let leading_ok = bad & 0xE0 == 0xC0 || bad & 0xF0 == 0xE0 || bad & 0xF8 == 0xF0;
            let problem = if leading_ok {
                "invalid trailing UTF-8 octet"
            } else {
                "invalid leading UTF-8 octet"
            };
            Err(Error::yaml(None, problem))
        }
    }
}

/// Parses documents into node trees; `first_only` stops after the first one (yaml.Unmarshal).
fn parse_docs(src: &str, first_only: bool) -> Result<Vec<Doc>, Error> {
    check_characters(src)?;
    check_directives(src)?;
    // Copied only when it has to be rewritten.
    let mut text: std::borrow::Cow<'_, str> = src.strip_prefix('\u{feff}').unwrap_or(src).into();
    if text.contains('\u{85}') {
        // libyaml reads NEL as a line break and stores it as LF, everywhere; saphyr (YAML
        // 1.2) does not. Characters keep their indices.
        text = text.replace('\u{85}', "\n").into();
    }
    let mut repairs = 0;
    // A private-use character absent from the input stands in for a `-` saphyr refuses.
    let used: std::collections::HashSet<char> = if text.is_ascii() {
        Default::default()
    } else {
        text.chars()
            .filter(|c| ('\u{e000}'..='\u{f8ff}').contains(c))
            .collect()
    };
    let placeholder = ('\u{e000}'..='\u{f8ff}').find(|c| !used.contains(c));
    loop {
        match parse_docs_once(&text, first_only, placeholder) {
            Ok(docs) => return Ok(docs),
            Err(Failure::Other(e)) => return Err(e),
            Err(Failure::Repair(fixed)) => {
                if !may_repair(repairs, text.len()) {
                    return Err(Error::yaml(
                        None,
                        "too many anchors or aliases to read like libyaml",
                    ));
                }
                repairs += 1;
                text = fixed.into();
            }
            Err(Failure::Scan(e, ctx, block_col)) => {
                if first_only
                    && e.info() == "invalid content after document end marker"
                    && let Some(end) = document_end_marker(&text, &e)
                {
                    // libyaml ends the first document at `...`; yaml.Unmarshal reads no
                    // further.
                    text.to_mut().truncate(end);
                    continue;
                }
                if may_repair(repairs, text.len())
                    && let Some(fixed) = repair(&text, &e, placeholder, block_col)
                    && *fixed != *text
                {
                    repairs += 1;
                    text = fixed.into();
                    continue;
                }
                return Err(scan_error(&text, &e, ctx));
            }
        }
    }
}

/// Byte offset just past the `...` that starts the line of `e`.
fn document_end_marker(src: &str, e: &ScanError) -> Option<usize> {
    let at = byte_offset(src, e.marker().index());
    let line_start = src[..at].rfind('\n').map_or(0, |n| n + 1);
    src[line_start..]
        .starts_with("...")
        .then_some(line_start + 3)
}

/// How many saphyr-vs-libyaml differences one input may need smoothing over.
const MAX_REPAIRS: usize = 64;

/// Hard cap on repairs, whatever the input size.
const MAX_REPAIRS_TOTAL: usize = 2000;

/// Each repair re-reads the whole input: beyond [`MAX_REPAIRS`], repairs continue while
/// the text re-read stays under 32 MiB in total, up to [`MAX_REPAIRS_TOTAL`].
fn may_repair(done: usize, len: usize) -> bool {
    done < MAX_REPAIRS || (done < MAX_REPAIRS_TOTAL && done.saturating_mul(len.max(1)) < 32 << 20)
}

enum Failure {
    /// With the column of the innermost block collection, if any.
    Scan(ScanError, Context, Option<usize>),
    Other(Error),
    /// The source rewritten so that saphyr sees the tokens libyaml sees.
    Repair(String),
}

/// The innermost open collection when an error happened (libyaml words its parser errors
/// after it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Context {
    Top,
    BlockMap,
    /// A block mapping that has its key and waits for the value.
    BlockMapValue,
    BlockSeq,
    FlowMap,
    FlowSeq,
}

impl Context {
    fn flow(self) -> bool {
        matches!(self, Context::FlowMap | Context::FlowSeq)
    }

    /// The context once the node being read is complete (a mapping value read: a key next).
    fn after_node(self) -> Context {
        match self {
            Context::BlockMapValue => Context::BlockMap,
            other => other,
        }
    }

    /// libyaml's parser error when a token does not fit this collection.
    fn unexpected_token(self) -> &'static str {
        match self {
            Context::Top => "did not find expected <document start>",
            Context::BlockMap => "did not find expected key",
            Context::BlockMapValue => "did not find expected node content",
            Context::BlockSeq => "did not find expected '-' indicator",
            Context::FlowMap => "did not find expected ',' or '}'",
            Context::FlowSeq => "did not find expected ',' or ']'",
        }
    }
}

fn context_of(src: &str, doc: Option<&Doc>, stack: &[usize]) -> Context {
    let Some(doc) = doc else {
        return Context::Top;
    };
    let Some(node) = stack.last().and_then(|&i| doc.nodes.get(i)) else {
        return Context::Top;
    };
    let first = src
        .get(byte_offset(src, node.start)..)
        .and_then(|s| s.chars().next());
    match (&node.kind, first) {
        (Kind::Map(_), Some('{')) => Context::FlowMap,
        (Kind::Seq(_), Some('[')) => Context::FlowSeq,
        (Kind::Map(children), _) if children.len() % 2 == 1 => Context::BlockMapValue,
        (Kind::Map(_), _) => Context::BlockMap,
        // saphyr starts an indentless sequence (`key:\n- a` at the key's column) after its
        // first `- `, a nested one at its `-`. libyaml ends an indentless sequence at the
        // first token that is not `-`, and the mapping then misses a key.
        (Kind::Seq(_), Some('-')) => Context::BlockSeq,
        (Kind::Seq(_), _) => Context::BlockMap,
        _ => Context::BlockSeq,
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Other(e)
    }
}

fn char_to_byte(src: &str, char_index: usize) -> usize {
    byte_offset(src, char_index)
}

fn is_anchor_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// libyaml skips tabs before a token only in flow context or after an indicator on the same
/// line: a tab in the indentation of a block line cannot start a token.
fn check_leading_tab(
    src: &str,
    cursor: &mut CharCursor,
    doc: Option<&Doc>,
    stack: &[usize],
    event: &Event<'_>,
    span: &saphyr_parser::Span,
) -> Result<(), Failure> {
    if !matches!(
        event,
        Event::Scalar(..) | Event::Alias(_) | Event::SequenceStart(..) | Event::MappingStart(..)
    ) {
        return Ok(());
    }
    let in_flow = doc
        .and_then(|d| stack.last().and_then(|&i| d.nodes.get(i)))
        .is_some_and(|n| n.flow);
    if in_flow {
        return Ok(());
    }
    let at = cursor.byte_at(src, span.start.index());
    let line_start = src[..at].rfind('\n').map_or(0, |n| n + 1);
    let lead = &src[line_start..at];
    if !lead.contains('\t') || !lead.chars().all(|c| c == ' ' || c == '\t') {
        return Ok(());
    }
    let line0 = src[..line_start].matches('\n').count();
    Err(Failure::Other(Error::yaml(
        (line0 != 0).then_some(line0 + 1),
        "found character that cannot start any token",
    )))
}

/// A `:` where a block mapping wants its next key: saphyr reads an empty key, libyaml's
/// parser wants a key token first (unless `?` introduced an explicit empty key).
fn check_empty_block_key(
    src: &str,
    cursor: &mut CharCursor,
    doc: Option<&Doc>,
    stack: &[usize],
    span: &saphyr_parser::Span,
) -> Result<(), Failure> {
    let Some(parent) = doc.and_then(|d| stack.last().and_then(|&i| d.nodes.get(i))) else {
        return Ok(());
    };
    let Kind::Map(children) = &parent.kind else {
        return Ok(());
    };
    if parent.flow || children.len() % 2 != 0 {
        return Ok(());
    }
    let at = cursor.byte_at(src, span.start.index());
    if !src[at..].starts_with(':') {
        return Ok(());
    }
    let before = src[..at].trim_end_matches([' ', '\t', '\r', '\n']);
    if before.ends_with('?') {
        return Ok(());
    }
    let line0 = span.start.line().saturating_sub(1);
    Err(Failure::Other(Error::yaml(
        (line0 != 0).then_some(line0),
        "did not find expected key",
    )))
}

/// After a block scalar in a block mapping at column `C`, libyaml wants the next line at a
/// column up to `C`; a line between `C` and the scalar's indentation ends the scalar and then
/// is no key. saphyr may read further before failing, so the error is reported here.
fn check_after_block_scalar(
    src: &str,
    cursor: &mut CharCursor,
    doc: Option<&Doc>,
    stack: &[usize],
    span: &saphyr_parser::Span,
) -> Result<(), Failure> {
    let Some(parent) = doc.and_then(|d| stack.last().and_then(|&i| d.nodes.get(i))) else {
        return Ok(());
    };
    if !matches!(parent.kind, Kind::Map(_)) || parent.flow {
        return Ok(());
    }
    let end = cursor.byte_at(src, span.end.index());
    let mut line_start = src[..end].rfind('\n').map_or(0, |n| n + 1);
    let mut line0 = span.end.line().saturating_sub(1);
    if !src[line_start..end].chars().all(|c| c == ' ') {
        // The scalar ends inside its last line: look from the next one.
        match src[end..].find('\n') {
            Some(n) => {
                line_start = end + n + 1;
                line0 += 1;
            }
            None => return Ok(()),
        }
    }
    for line in src[line_start..].split('\n') {
        let trimmed = line.trim_start_matches(' ');
        let t = trimmed.trim_end_matches(['\r', ' ', '\t']);
        if t.is_empty() || t.starts_with('#') {
            line0 += 1;
            continue;
        }
        let indent = line.len() - trimmed.len();
        if indent > parent.col {
            if t.chars()
                .next()
                .is_some_and(|c| cannot_start_token(c, false))
            {
                return Err(Failure::Other(Error::yaml(
                    (line0 != 0).then_some(line0 + 1),
                    "found character that cannot start any token",
                )));
            }
            return Err(Failure::Other(Error::yaml(
                (line0 != 0).then_some(line0),
                "did not find expected key",
            )));
        }
        break;
    }
    Ok(())
}

/// Byte offset of the first token after character index `from`, past white space, comments
/// and the `-`, `?`, `:` indicators.
fn next_token_at(src: &str, cursor: &mut CharCursor, from: usize) -> Option<usize> {
    let start = cursor.byte_at(src, from);
    let rest = src.get(start..)?;
    let mut chars = rest.char_indices().peekable();
    let mut in_comment = false;
    while let Some((i, c)) = chars.next() {
        match c {
            '\n' => in_comment = false,
            _ if in_comment => {}
            ' ' | '\t' | '\r' => {}
            '#' => in_comment = true,
            '-' | '?' | ':' if chars.peek().is_none_or(|(_, n)| n.is_whitespace()) => {}
            _ => return Some(start + i),
        }
    }
    None
}

/// Applies [`check_anchor_token`] to an event's anchor or alias.
fn check_event_anchor(
    src: &str,
    cursor: &mut CharCursor,
    event: &Event<'_>,
    span: &saphyr_parser::Span,
    known: &mut std::collections::HashSet<String>,
) -> Result<(), Failure> {
    let (anchored, alias) = match event {
        Event::Scalar(_, _, a, _) | Event::SequenceStart(a, _) | Event::MappingStart(a, _) => {
            (*a > 0, false)
        }
        Event::Alias(_) => (true, true),
        _ => (false, false),
    };
    if !anchored {
        return Ok(());
    }
    let from = cursor.byte_at(src, span.start.index());
    let to = cursor.byte_at(src, span.end.index()).max(from);
    let marker = if alias { '*' } else { '&' };
    let Some(at) = src
        .get(from..to)
        .and_then(|s| s.find(marker))
        .map(|i| from + i)
    else {
        return Ok(());
    };
    let name = check_anchor_token(src, at, known, alias)?;
    if !alias {
        known.insert(name);
    }
    Ok(())
}

/// Reads the anchor (`&`) or alias (`*`) token at byte `at` as libyaml scans it: names are
/// `[0-9A-Za-z_-]+` and must be followed by a blank or one of `?:,]}%@``. saphyr takes any
/// non-space run, so where they part, this says what libyaml does: an error, or a rewrite of
/// the source (a space after libyaml's name) after which saphyr agrees.
fn check_anchor_token(
    src: &str,
    at: usize,
    known: &std::collections::HashSet<String>,
    alias: bool,
) -> Result<String, Failure> {
    let rest = src.get(at + 1..).unwrap_or_default();
    let saphyr_len: usize = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, ',' | '[' | ']' | '{' | '}'))
        .map(char::len_utf8)
        .sum();
    let name: String = rest.chars().take_while(|c| is_anchor_char(*c)).collect();
    let follower = rest[name.len()..].chars().next();
    // The line is only needed for an error; counting is linear, so it is done lazily.
    let scanner_line = || {
        let line0 = src[..at].matches('\n').count();
        (line0 != 0).then_some(line0 + 1)
    };
    let follower_ok = follower.is_none_or(|c| {
        c.is_whitespace() || matches!(c, '?' | ':' | ',' | ']' | '}' | '%' | '@' | '`')
    });
    if name.is_empty() || !follower_ok {
        return Err(Failure::Other(Error::yaml(
            scanner_line(),
            "did not find expected alphabetic or numeric character",
        )));
    }
    if alias && !known.contains(&name) {
        return Err(Failure::Other(Error::yaml(
            None,
            format!("unknown anchor '{name}' referenced"),
        )));
    }
    if name.len() < saphyr_len {
        match follower {
            Some('%' | '@' | '`') => {
                return Err(Failure::Other(Error::yaml(
                    scanner_line(),
                    "found character that cannot start any token",
                )));
            }
            Some(_) => {
                let split = at + 1 + name.len();
                let mut out = String::with_capacity(src.len() + 1);
                out.push_str(&src[..split]);
                out.push(' ');
                out.push_str(&src[split..]);
                return Err(Failure::Repair(out));
            }
            None => {}
        }
    }
    Ok(name)
}

/// libyaml does not ask continuation lines of a quoted scalar to be indented; saphyr does.
/// Indents them (leading white space of a continuation line is not part of the value).
fn repair_quoted_indentation(src: &str, at: usize) -> Option<String> {
    let quote = src.get(at..)?.chars().next()?;
    if quote != '"' && quote != '\'' {
        return None;
    }
    let line_start = src[..at].rfind('\n').map_or(0, |n| n + 1);
    let col = src[line_start..at].chars().count();
    let pad = " ".repeat(col + 1);
    let mut out = String::with_capacity(src.len() + 64);
    out.push_str(&src[..=at]);
    let body = &src[at + 1..];
    let mut chars = body.char_indices().peekable();
    let mut end = None;
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            ('"', '\\') => {
                chars.next();
            }
            ('\'', '\'') if chars.peek().is_some_and(|(_, n)| *n == '\'') => {
                chars.next();
            }
            (q, c) if c == q => {
                end = Some(i);
                break;
            }
            _ => {}
        }
    }
    let end = end?;
    let inner = &body[..end];
    let mut changed = false;
    for (n, line) in inner.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
            let t = line.trim_end_matches('\r');
            if (t.starts_with("---") || t.starts_with("..."))
                && t[3..].chars().next().is_none_or(char::is_whitespace)
            {
                return None; // libyaml: unexpected document indicator
            }
            let have = line.chars().take_while(|c| *c == ' ').count();
            if !line.trim().is_empty() && have < pad.len() {
                out.push_str(&pad[have..]);
                changed = true;
            }
        }
        out.push_str(line);
    }
    out.push_str(&body[end..]);
    changed.then_some(out)
}

/// Rewrites `src` where saphyr (YAML 1.2) refuses what libyaml (YAML 1.1, go-yaml v2)
/// accepts, without changing what the document means; `None` when the error is real.
fn repair(
    src: &str,
    e: &ScanError,
    placeholder: Option<char>,
    block_col: Option<usize>,
) -> Option<String> {
    let at = char_to_byte(src, e.marker().index());
    match e.info() {
        // libyaml does not ask lines inside a flow collection to be indented past the
        // enclosing block; saphyr does. Indenting them changes nothing else.
        "invalid indentation in flow construct" => {
            let line_start = src[..at].rfind('\n').map_or(0, |n| n + 1);
            let indent = src[line_start..].chars().take_while(|c| *c == ' ').count();
            let want = block_col.map_or(1, |c| c + 1);
            if indent >= want {
                return None;
            }
            let mut out = String::with_capacity(src.len() + want);
            out.push_str(&src[..line_start]);
            out.push_str(&" ".repeat(want - indent));
            out.push_str(&src[line_start..]);
            Some(out)
        }
        // libyaml reads `-` before a flow indicator as (part of) a plain scalar; saphyr
        // refuses. The `-` becomes a placeholder, turned back when the scalar is read.
        "plain scalar cannot start with '-' followed by ,[]{}" => {
            let p = placeholder?;
            if !src.get(at..)?.starts_with('-') {
                return None;
            }
            let mut out = String::with_capacity(src.len() + 2);
            out.push_str(&src[..at]);
            out.push(p);
            out.push_str(&src[at + 1..]);
            Some(out)
        }
        "invalid indentation in quoted scalar" => repair_quoted_indentation(src, at),
        // libyaml takes a tab as the separator after `:` and `-`.
        "':' must be followed by a valid YAML whitespace"
        | "'-' must be followed by a valid YAML whitespace" => {
            let indicator = if e.info().starts_with("':'") {
                ':'
            } else {
                '-'
            };
            let head = src.get(..at)?;
            let pos = head.rfind(indicator)?;
            let tail = src.get(pos + 1..)?;
            let tabs = tail.chars().take_while(|c| *c == '\t' || *c == ' ').count();
            if tabs == 0 {
                return None;
            }
            let mut out = String::with_capacity(src.len());
            out.push_str(&src[..=pos]);
            out.push_str(&" ".repeat(tabs));
            out.push_str(&tail[tabs..]);
            Some(out)
        }
        // libyaml starts a comment at `#` right after a quoted scalar.
        "comments must be separated from other tokens by whitespace" => {
            let rest = src.get(at..)?;
            let hash = at + rest.find('#')?;
            let line_end = src[hash..]
                .find(['\n', '\r'])
                .map_or(src.len(), |n| hash + n);
            let mut out = String::with_capacity(src.len() + 1);
            out.push_str(&src[..hash]);
            out.push(' ');
            out.push_str(&src[hash..line_end]);
            out.push_str(&src[line_end..]);
            Some(out)
        }
        // libyaml knows `\'` and a backslash before a tab in double-quoted scalars.
        "while parsing a quoted scalar, found unknown escape character" => {
            let rest = src.get(at..)?;
            let mut chars = rest.char_indices();
            let (_, quote) = chars.next()?;
            if quote != '"' {
                return None;
            }
            let mut escaped = false;
            for (i, c) in chars {
                if escaped {
                    let replacement = match c {
                        '\'' => "x27",
                        '\t' => "t",
                        _ => {
                            escaped = false;
                            continue;
                        }
                    };
                    let p = at + i;
                    let mut out = String::with_capacity(src.len() + 3);
                    out.push_str(&src[..p]);
                    out.push_str(replacement);
                    out.push_str(&src[p + c.len_utf8()..]);
                    return Some(out);
                }
                match c {
                    '\\' => escaped = true,
                    '"' => return None,
                    _ => {}
                }
            }
            None
        }
        _ => None,
    }
}

/// libyaml has no `\/` escape; saphyr has. `raw` is a double-quoted scalar's source text.
fn check_double_quoted_escapes(raw: &str, line0: usize) -> Result<(), Error> {
    let mut escaped = false;
    let mut line = line0;
    for c in raw.chars().skip(1) {
        if c == '\n' {
            line += 1;
        }
        if escaped {
            if c == '/' {
                let l = if line == 0 { None } else { Some(line + 1) };
                return Err(Error::yaml(l, "found unknown escape character"));
            }
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '"' => break,
            _ => {}
        }
    }
    Ok(())
}

fn parse_docs_once(
    src_for_parser: &str,
    first_only: bool,
    placeholder: Option<char>,
) -> Result<Vec<Doc>, Failure> {
    // Byte offset of every character, built only when a `\/` escape may need checking.
    let char_offsets: Option<Vec<usize>> = src_for_parser
        .contains("\\/")
        .then(|| src_for_parser.char_indices().map(|(b, _)| b).collect());
    let mut parser = Parser::new_from_str(src_for_parser);
    let mut docs = Vec::new();
    let mut cur: Option<Doc> = None;
    let mut stack: Vec<usize> = Vec::new();
    // Keys of an open mapping are attached in order; this is just `children.push`.
    let mut anchors: HashMap<usize, usize> = HashMap::new();
    let mut cursor = CharCursor::new(src_for_parser);
    // A flow collection that libyaml scans as a required simple key: (line, node).
    let mut pending: Option<(usize, usize)> = None;
    let mut last_end = 0usize;
    // libyaml's names of the anchors defined so far in the document.
    let mut anchor_names: std::collections::HashSet<String> = Default::default();
    // saphyr reads a missing final line break as present; libyaml does not, so a block
    // scalar whose last content line ends the input has no final newline.
    let total_chars = if cursor.ascii {
        src_for_parser.len()
    } else {
        src_for_parser.chars().count()
    };
    let last_line = src_for_parser
        .rsplit(['\n', '\r'])
        .next()
        .unwrap_or_default();
    let ends_inside_content = !last_line.trim_matches([' ', '\t']).is_empty();
    let ends_with_break = src_for_parser.ends_with(['\n', '\r']);
    while let Some(next) = parser.next_event() {
        let (event, span) = match next {
            Ok(x) => x,
            Err(e) => {
                if e.info() == "while parsing node, found unknown anchor" {
                    let at = byte_offset(src_for_parser, e.marker().index());
                    if src_for_parser.get(at..).is_some_and(|r| r.starts_with('*')) {
                        let name = check_anchor_token(src_for_parser, at, &anchor_names, true)?;
                        return Err(Error::yaml(
                            None,
                            format!("unknown anchor '{name}' referenced"),
                        )
                        .into());
                    }
                }
                if let Some((line, _)) = pending
                    && e.marker().line() > line
                {
                    return Err(stale_key_error(src_for_parser, line).into());
                }
                // An anchor or alias ending at `:` for libyaml that saphyr read on and failed
                // on before reporting it.
                if let Some(at) = next_token_at(src_for_parser, &mut cursor, last_end)
                    && let Some(marker @ ('*' | '&')) = src_for_parser[at..].chars().next()
                    && src_for_parser[at + 1..]
                        .trim_start_matches(is_anchor_char)
                        .starts_with(':')
                {
                    check_anchor_token(src_for_parser, at, &anchor_names, marker == '*')?;
                }
                if let Some(line) =
                    flow_key_before_error(src_for_parser, cur.as_ref(), &stack, last_end, &e)
                {
                    return Err(stale_key_error(src_for_parser, line).into());
                }
                let ctx = context_of(src_for_parser, cur.as_ref(), &stack);
                let block_col = cur.as_ref().and_then(|d| {
                    stack
                        .iter()
                        .rev()
                        .filter_map(|&i| d.nodes.get(i))
                        .find(|n| !n.flow)
                        .map(|n| n.col)
                });
                return Err(Failure::Scan(e, ctx, block_col));
            }
        };
        if let Some((line, _)) = pending
            && span.start.line() > line
        {
            return Err(stale_key_error(src_for_parser, line).into());
        }
        last_end = span.end.index();
        check_leading_tab(
            src_for_parser,
            &mut cursor,
            cur.as_ref(),
            &stack,
            &event,
            &span,
        )?;
        check_event_anchor(
            src_for_parser,
            &mut cursor,
            &event,
            &span,
            &mut anchor_names,
        )?;
        match event {
            Event::StreamStart | Event::Nothing => {}
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                anchor_names.clear();
                cur = Some(Doc {
                    nodes: Vec::new(),
                    root: None,
                });
                stack.clear();
                anchors.clear();
            }
            Event::DocumentEnd => {
                if let Some(d) = cur.take() {
                    docs.push(d);
                }
                if first_only {
                    break;
                }
            }
            Event::Scalar(value, style, anchor, tag) => {
                if span.end.index() - span.start.index() > SIMPLE_KEY_LIMIT - 8 {
                    check_long_key(src_for_parser, cur.as_ref(), &stack, &span)?;
                }
                if let Some(offsets) = &char_offsets
                    && style == ScalarStyle::DoubleQuoted
                {
                    let from = offsets
                        .get(span.start.index())
                        .copied()
                        .unwrap_or(src_for_parser.len());
                    check_double_quoted_escapes(
                        src_for_parser.get(from..).unwrap_or_default(),
                        span.start.line().saturating_sub(1),
                    )?;
                }
                if style == ScalarStyle::Plain
                    && let Some(c) = value.chars().next()
                {
                    let flow = stack
                        .last()
                        .and_then(|&i| cur.as_ref().and_then(|d| d.nodes.get(i)))
                        .is_some_and(|n| n.flow);
                    let in_flow_seq = flow
                        && stack
                            .last()
                            .and_then(|&i| cur.as_ref().and_then(|d| d.nodes.get(i)))
                            .is_some_and(|n| matches!(n.kind, Kind::Seq(_)));
                    if c == ':' && in_flow_seq {
                        // libyaml reads `:` in flow context as a value indicator, which a
                        // flow sequence entry cannot start with.
                        let line0 = span.start.line().saturating_sub(1);
                        return Err(Error::yaml(
                            (line0 != 0).then_some(line0),
                            "did not find expected node content",
                        )
                        .into());
                    }
                    if cannot_start_token(c, flow) {
                        let line0 = span.start.line().saturating_sub(1);
                        return Err(Error::yaml(
                            (line0 != 0).then_some(line0 + 1),
                            "found character that cannot start any token",
                        )
                        .into());
                    }
                }
                if value.is_empty() && style == ScalarStyle::Plain && anchor == 0 && tag.is_none() {
                    check_empty_block_key(
                        src_for_parser,
                        &mut cursor,
                        cur.as_ref(),
                        &stack,
                        &span,
                    )?;
                }
                if matches!(style, ScalarStyle::Literal | ScalarStyle::Folded) {
                    check_after_block_scalar(
                        src_for_parser,
                        &mut cursor,
                        cur.as_ref(),
                        &stack,
                        &span,
                    )?;
                }
                let mut value = value.into_owned();
                if let Some(p) = placeholder
                    && value.contains(p)
                {
                    value = value.replace(p, "-");
                }
                if matches!(style, ScalarStyle::Literal | ScalarStyle::Folded)
                    && span.end.index() >= total_chars
                    && !ends_with_break
                {
                    // The last line has no line break: libyaml adds none for it, saphyr
                    // does (a blank last line even counts as one more line for saphyr).
                    let extra = if ends_inside_content {
                        value.ends_with('\n')
                    } else {
                        value.ends_with("\n\n")
                            || spaces_are_last_content(
                                src_for_parser,
                                cursor.byte_at(src_for_parser, span.start.index()),
                                last_line,
                                &value,
                            )
                    };
                    if extra {
                        value.pop();
                    }
                }
                let tag = tag_string(tag.as_deref());
                let implicit = (style == ScalarStyle::Plain && tag.is_empty()) || tag == "!";
                let kind = Kind::Scalar {
                    value,
                    tag,
                    implicit,
                };
                add_node(
                    (span.start, false),
                    &mut cur,
                    &mut stack,
                    &mut anchors,
                    kind,
                    anchor,
                    false,
                )?;
            }
            Event::SequenceStart(anchor, _) => {
                let flow = cursor.char_at(src_for_parser, span.start.index()) == Some('[');
                note_required_flow_key(&mut pending, cur.as_ref(), &stack, &span, flow);
                add_node(
                    (span.start, flow),
                    &mut cur,
                    &mut stack,
                    &mut anchors,
                    Kind::Seq(Vec::new()),
                    anchor,
                    true,
                )?;
            }
            Event::MappingStart(anchor, _) => {
                let flow = cursor.char_at(src_for_parser, span.start.index()) == Some('{');
                note_required_flow_key(&mut pending, cur.as_ref(), &stack, &span, flow);
                add_node(
                    (span.start, flow),
                    &mut cur,
                    &mut stack,
                    &mut anchors,
                    Kind::Map(Vec::new()),
                    anchor,
                    true,
                )?;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((line, idx)) = pending
                    && stack.last() == Some(&idx)
                    && span.start.line() == line
                {
                    pending = None;
                }
                stack.pop();
            }
            Event::Alias(id) => {
                let at = cursor.byte_at(src_for_parser, span.start.index());
                let name = name_at_byte(src_for_parser, at);
                let Some(&target) = anchors.get(&id) else {
                    return Err(
                        Error::yaml(None, format!("unknown anchor '{name}' referenced")).into(),
                    );
                };
                add_node(
                    (span.start, false),
                    &mut cur,
                    &mut stack,
                    &mut anchors,
                    Kind::Alias { target, name },
                    0,
                    false,
                )?;
            }
        }
    }
    Ok(docs)
}

#[allow(clippy::too_many_arguments)]
fn add_node(
    at: (saphyr_parser::Marker, bool),
    cur: &mut Option<Doc>,
    stack: &mut Vec<usize>,
    anchors: &mut HashMap<usize, usize>,
    kind: Kind,
    anchor: usize,
    container: bool,
) -> Result<(), Error> {
    let Some(doc) = cur.as_mut() else {
        return Err(Error::yaml(None, "did not find expected <document start>"));
    };
    let idx = doc.nodes.len();
    doc.nodes.push(Node {
        kind,
        start: at.0.index(),
        col: at.0.col(),
        flow: at.1,
    });
    if anchor > 0 {
        anchors.insert(anchor, idx);
    }
    match stack.last() {
        None => doc.root = Some(idx),
        Some(&parent) => match &mut doc.nodes[parent].kind {
            Kind::Seq(children) | Kind::Map(children) => children.push(idx),
            _ => {}
        },
    }
    if container {
        stack.push(idx);
        if stack.len() > MAX_DEPTH {
            return Err(Error::yaml(
                None,
                format!("exceeded max depth of {MAX_DEPTH}"),
            ));
        }
    }
    Ok(())
}

// ---- decoding ----------------------------------------------------------------------------

/// A hashable stand-in for a Go map key (equal exactly when Go's `==` says so; NaN never).
#[derive(Hash, PartialEq, Eq)]
enum KeyRepr {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(u64),
    Str(String),
    Bytes(Vec<u8>),
}

fn key_repr(v: &Value) -> Option<KeyRepr> {
    Some(match v {
        Value::Null => KeyRepr::Null,
        Value::Bool(b) => KeyRepr::Bool(*b),
        Value::Int(i) => KeyRepr::Int(*i),
        Value::Uint(u) => KeyRepr::Uint(*u),
        Value::Float(f) if f.is_nan() => return None,
        // +0 and -0 are the same Go key.
        Value::Float(f) => KeyRepr::Float(if *f == 0.0 { 0 } else { f.to_bits() }),
        Value::String(s) => KeyRepr::Str(s.clone()),
        Value::Bytes(b) => KeyRepr::Bytes(b.clone()),
        Value::Seq(_) | Value::Map(_) => return None,
    })
}

/// A mapping under construction. Small mappings are searched key by key; from
/// [`MapBuilder::LINEAR`] entries on, a key index is kept.
#[derive(Default)]
struct MapBuilder {
    map: Mapping,
    index: Option<HashMap<KeyRepr, usize>>,
}

impl MapBuilder {
    const LINEAR: usize = 16;

    /// The position of a key equal to `key` (Go's `==`).
    fn find(&mut self, key: &Value) -> Option<usize> {
        if self.map.len() < Self::LINEAR {
            return self.map.position(key);
        }
        let map = &self.map;
        let index = self.index.get_or_insert_with(|| {
            let mut index = HashMap::with_capacity(map.len() * 2);
            for (i, k) in map.keys().enumerate() {
                if let Some(r) = key_repr(k) {
                    index.entry(r).or_insert(i);
                }
            }
            index
        });
        key_repr(key).and_then(|r| index.get(&r).copied())
    }

    /// Appends a key that [`MapBuilder::find`] did not find.
    fn push(&mut self, key: Value, value: Value) {
        if let Some(index) = self.index.as_mut()
            && let Some(r) = key_repr(&key)
        {
            index.insert(r, self.map.len());
        }
        self.map.push_unchecked(key, value);
    }
}

struct Decoder<'a> {
    doc: &'a Doc,
    opts: DecodeOptions,
    decode_count: u64,
    alias_count: u64,
    alias_depth: u64,
    in_alias: Vec<usize>,
    depth: usize,
}

#[allow(clippy::cast_precision_loss)]
fn allowed_alias_ratio(decode_count: u64) -> f64 {
    const LOW: u64 = 400_000;
    const HIGH: u64 = 4_000_000;
    if decode_count <= LOW {
        0.99
    } else if decode_count >= HIGH {
        0.10
    } else {
        0.99 - 0.89 * ((decode_count - LOW) as f64 / (HIGH - LOW) as f64)
    }
}

fn go_quote_key(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => u.to_string(),
        Value::Float(f) => crate::goformat::format_g(*f, false),
        Value::Bool(b) => b.to_string(),
        Value::Null => "interface {}(nil)".to_owned(),
        _ => "...".to_owned(),
    }
}

impl<'a> Decoder<'a> {
    fn node(&self, idx: usize) -> Result<&Node, Error> {
        self.doc
            .nodes
            .get(idx)
            .ok_or_else(|| Error::raw("yaml: internal error: dangling node"))
    }

    fn count(&mut self) -> Result<(), Error> {
        self.decode_count += 1;
        if self.alias_depth > 0 {
            self.alias_count += 1;
        }
        #[allow(clippy::cast_precision_loss)]
        if self.alias_count > 100
            && self.decode_count > 1000
            && (self.alias_count as f64 / self.decode_count as f64)
                > allowed_alias_ratio(self.decode_count)
        {
            return Err(Error::yaml(None, "document contains excessive aliasing"));
        }
        Ok(())
    }

    fn decode(&mut self, idx: usize) -> Result<Value, Error> {
        self.count()?;
        self.depth += 1;
        if self.depth > MAX_DEPTH * 4 {
            return Err(Error::yaml(
                None,
                format!("exceeded max depth of {MAX_DEPTH}"),
            ));
        }
        let out = self.decode_inner(idx);
        self.depth -= 1;
        out
    }

    fn decode_inner(&mut self, idx: usize) -> Result<Value, Error> {
        let doc: &'a Doc = self.doc;
        let node = doc
            .nodes
            .get(idx)
            .ok_or_else(|| Error::raw("yaml: internal error: dangling node"))?;
        match &node.kind {
            Kind::Alias { target, name } => {
                let (target, name) = (*target, name.clone());
                if self.in_alias.contains(&idx) {
                    return Err(Error::yaml(
                        None,
                        format!("anchor '{name}' value contains itself"),
                    ));
                }
                self.in_alias.push(idx);
                self.alias_depth += 1;
                let v = self.decode(target);
                self.alias_depth -= 1;
                self.in_alias.pop();
                v
            }
            Kind::Scalar {
                value,
                tag,
                implicit,
            } => scalar(value, tag, *implicit),
            Kind::Seq(children) => {
                let mut out = Vec::with_capacity(children.len());
                for &c in children {
                    out.push(self.decode(c)?);
                }
                Ok(Value::Seq(out))
            }
            Kind::Map(children) => {
                let mut b = MapBuilder::default();
                self.mapping_into(children, &mut b)?;
                Ok(Value::Map(b.map))
            }
        }
    }

    fn is_merge(&self, idx: usize) -> bool {
        matches!(
            self.doc.nodes.get(idx).map(|n| &n.kind),
            Some(Kind::Scalar { value, tag, implicit }) if value == "<<" && (*implicit || tag == MERGE_TAG)
        )
    }

    fn mapping_into(&mut self, children: &[usize], b: &mut MapBuilder) -> Result<(), Error> {
        for pair in children.chunks(2) {
            let (k, v) = (pair[0], pair.get(1).copied());
            if self.is_merge(k) {
                if let Some(v) = v {
                    self.merge(v, b)?;
                }
                continue;
            }
            let key = self.decode(k)?;
            if matches!(key, Value::Seq(_) | Value::Map(_)) {
                return Err(Error::yaml(
                    None,
                    format!(
                        "invalid map key: {}",
                        crate::goformat::go_sharp_v(&key, false)
                    ),
                ));
            }
            let value = match v {
                Some(v) => self.decode(v)?,
                None => Value::Null,
            };
            self.set(b, key, value)?;
        }
        Ok(())
    }

    fn set(&mut self, b: &mut MapBuilder, key: Value, value: Value) -> Result<(), Error> {
        match b.find(&key) {
            Some(pos) => {
                if self.opts.strict {
                    return Err(Error::raw(format!(
                        "yaml: unmarshal errors:\n  key {} already set in map",
                        go_quote_key(&key)
                    )));
                }
                b.map.set_at(pos, value);
            }
            None => b.push(key, value),
        }
        Ok(())
    }

    fn merge(&mut self, idx: usize, b: &mut MapBuilder) -> Result<(), Error> {
        let want_map = || {
            Error::yaml(
                None,
                "map merge requires map or sequence of maps as the value",
            )
        };
        let is_map_target = |d: &Self, i: usize| -> Result<bool, Error> {
            Ok(match &d.node(i)?.kind {
                Kind::Map(_) => true,
                Kind::Alias { target, .. } => matches!(d.node(*target)?.kind, Kind::Map(_)),
                _ => false,
            })
        };
        match &self.node(idx)?.kind {
            Kind::Map(_) | Kind::Alias { .. } => {
                if !is_map_target(self, idx)? {
                    return Err(want_map());
                }
                self.merge_one(idx, b)
            }
            Kind::Seq(children) => {
                let children = children.clone();
                for &c in children.iter().rev() {
                    if !is_map_target(self, c)? {
                        return Err(want_map());
                    }
                    self.merge_one(c, b)?;
                }
                Ok(())
            }
            Kind::Scalar { .. } => Err(want_map()),
        }
    }

    /// `d.unmarshal(n, out)` with `out` the map being built: the mapping's pairs are set into
    /// it (an alias is followed with the alias bookkeeping).
    fn merge_one(&mut self, idx: usize, b: &mut MapBuilder) -> Result<(), Error> {
        self.count()?;
        match &self.node(idx)?.kind {
            Kind::Alias { target, name } => {
                let (target, name) = (*target, name.clone());
                if self.in_alias.contains(&idx) {
                    return Err(Error::yaml(
                        None,
                        format!("anchor '{name}' value contains itself"),
                    ));
                }
                self.in_alias.push(idx);
                self.alias_depth += 1;
                let r = self.merge_one(target, b);
                self.alias_depth -= 1;
                self.in_alias.pop();
                r
            }
            Kind::Map(children) => {
                let children = children.clone();
                self.depth += 1;
                if self.depth > MAX_DEPTH * 4 {
                    return Err(Error::yaml(
                        None,
                        format!("exceeded max depth of {MAX_DEPTH}"),
                    ));
                }
                let r = self.mapping_into(&children, b);
                self.depth -= 1;
                r
            }
            _ => Err(Error::yaml(
                None,
                "map merge requires map or sequence of maps as the value",
            )),
        }
    }
}

/// Go's base64.StdEncoding.DecodeString (padding required; `\r` and `\n` ignored).
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let mut vals = Vec::with_capacity(s.len());
    for c in s.bytes() {
        match c {
            b'\r' | b'\n' => {}
            b'A'..=b'Z' => vals.push(Some(c - b'A')),
            b'a'..=b'z' => vals.push(Some(c - b'a' + 26)),
            b'0'..=b'9' => vals.push(Some(c - b'0' + 52)),
            b'+' => vals.push(Some(62)),
            b'/' => vals.push(Some(63)),
            b'=' => vals.push(None),
            _ => return None,
        }
    }
    if !vals.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(vals.len() / 4 * 3);
    let n = vals.len();
    for (qi, q) in vals.chunks(4).enumerate() {
        let last = (qi + 1) * 4 == n;
        let pads = q.iter().rev().take_while(|v| v.is_none()).count();
        if pads > 2 || (pads > 0 && !last) || q[..4 - pads].iter().any(Option::is_none) {
            return None;
        }
        let d: Vec<u32> = q.iter().map(|v| u32::from(v.unwrap_or(0))).collect();
        let word = (d[0] << 18) | (d[1] << 12) | (d[2] << 6) | d[3];
        let bytes = [(word >> 16) as u8, (word >> 8) as u8, word as u8];
        out.extend_from_slice(&bytes[..3 - pads]);
    }
    Some(out)
}

fn scalar(value: &str, tag: &str, implicit: bool) -> Result<Value, Error> {
    if tag.is_empty() && !implicit {
        return Ok(Value::String(value.to_owned()));
    }
    if tag.is_empty() {
        // Plain and untagged: resolution alone, no tag to compare.
        return Ok(crate::block::plain_value(value));
    }
    let (rtag, resolved) =
        resolve::resolve_tagged(tag, value).map_err(|e| Error::yaml(None, e.message))?;
    if rtag == BINARY_TAG {
        let data = decode_base64(value)
            .ok_or_else(|| Error::yaml(None, "!!binary value contains invalid base64 data"))?;
        return Ok(match String::from_utf8(data) {
            Ok(s) => Value::String(s),
            Err(e) => Value::Bytes(e.into_bytes()),
        });
    }
    Ok(match resolved {
        Resolved::Null => Value::Null,
        Resolved::Bool(b) => Value::Bool(b),
        Resolved::Int(i) => Value::Int(i),
        Resolved::Uint(u) => Value::Uint(u),
        Resolved::Float(f) => Value::Float(f),
        Resolved::Str | Resolved::Timestamp | Resolved::Merge => Value::String(value.to_owned()),
    })
}

fn decode_doc(doc: &Doc, opts: DecodeOptions) -> Result<Value, Error> {
    let Some(root) = doc.root else {
        return Ok(Value::Null);
    };
    let mut d = Decoder {
        doc,
        opts,
        decode_count: 1, // the document node itself
        alias_count: 0,
        alias_depth: 0,
        in_alias: Vec::new(),
        depth: 0,
    };
    d.decode(root)
}

/// Whether the block scalar whose node starts at byte `at` of `src` (saphyr's span: its first
/// line that is not blank, or its anchor or tag when it has one) ends the input with a last
/// line of spaces longer than its indentation: libyaml reads those extra spaces as the
/// scalar's last content, with no line break after them, where saphyr's `value` ends with
/// them and one. The indentation is the first content line's, less the spaces that line
/// keeps in `value` (an explicit indentation indicator leaves some).
fn spaces_are_last_content(src: &str, at: usize, last_line: &str, value: &str) -> bool {
    let Some(before) = src.get(..at) else {
        return false;
    };
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    // The header (the line with the `|` or `>` indicator) and where the content starts.
    let at_line = src[at..].lines().next().unwrap_or_default();
    let at_content = before[line_start..].bytes().all(|b| b == b' ')
        && (value.starts_with(at_line) || !at_line.starts_with(['&', '!']));
    let (header, content) = if at_content {
        // The span starts at the content: the header is the last line before it that is
        // not blank.
        let header = before[..line_start]
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default();
        (header, line_start)
    } else {
        // The span starts at an anchor or a tag (the value does not start with it), on the
        // key's line or after it: the indicator follows them.
        let Some(found) = indicator_after_properties(src, at) else {
            return false;
        };
        found
    };
    let indicators = header
        .rfind(['|', '>'])
        .map_or("", |i| &header[i..])
        .split(['#', ' '])
        .next()
        .unwrap_or_default();
    if indicators.is_empty() {
        return false;
    }
    let spaces = |l: &str| l.bytes().take_while(|&b| b == b' ').count();
    let first = src[content..]
        .lines()
        .find(|l| l.bytes().any(|b| b != b' '));
    let indent = match first {
        Some(first) => {
            let Some(kept) = value.lines().find(|l| l.bytes().any(|b| b != b' ')) else {
                return false;
            };
            let Some(indent) = spaces(first).checked_sub(spaces(kept)) else {
                return false;
            };
            indent
        }
        // Only lines of spaces: the indentation is the explicit indicator's, counted from
        // the enclosing collection's column (none: nothing to go by).
        None => {
            let Some(m) = indicators.bytes().find_map(|b| (b as char).to_digit(10)) else {
                return false;
            };
            let Some(n) = enclosing_column(header) else {
                return false;
            };
            n + m as usize
        }
    };
    last_line.len() > indent
        && last_line.bytes().all(|b| b == b' ')
        && value
            .strip_suffix('\n')
            .is_some_and(|v| v.ends_with(&last_line[indent..]))
}

/// The column of the block collection a block scalar's header line (`key: |2`, `- |2`,
/// `- key: |2`) puts the scalar in, from which an explicit indentation indicator counts: the
/// key's, or for a sequence entry that is the scalar itself, its `-`'s. `None` for a header
/// with neither (a scalar at the document's top level).
fn enclosing_column(header: &str) -> Option<usize> {
    let mut col = header.bytes().take_while(|&b| b == b' ').count();
    let mut dash = None;
    loop {
        let rest = &header[col..];
        if rest.starts_with("- ") {
            dash = Some(col);
            col += 1 + rest[1..].bytes().take_while(|&b| b == b' ').count();
            continue;
        }
        return if rest.starts_with(['|', '>', '&', '!']) {
            dash
        } else {
            Some(col)
        };
    }
}

/// From an anchor or tag at byte `at`: the header line holding the block indicator that
/// follows the node's properties (`&a`, `!!str`, on this line or the next ones), and the
/// byte where the content starts (the line after it).
fn indicator_after_properties(src: &str, at: usize) -> Option<(&str, usize)> {
    let mut i = at;
    let bytes = src.as_bytes();
    loop {
        while i < bytes.len() && matches!(bytes[i], b' ' | b'\n' | b'\r') {
            i += 1;
        }
        match bytes.get(i)? {
            b'&' | b'!' => {
                while i < bytes.len() && !matches!(bytes[i], b' ' | b'\n' | b'\r') {
                    i += 1;
                }
            }
            b'|' | b'>' => break,
            _ => return None,
        }
    }
    let line_start = src[..i].rfind('\n').map_or(0, |k| k + 1);
    let line_end = src[i..].find('\n').map(|k| i + k)?;
    Some((&src[line_start..line_end], line_end + 1))
}

/// `yaml.Unmarshal` into `interface{}`: the first document, `Null` when there is none.
/// Plain block-style documents are read by the fast path of `block.rs`.
pub(crate) fn unmarshal(src: &str, opts: DecodeOptions) -> Result<Value, Error> {
    if !opts.strict
        && let Some(v) = crate::block::block_value(src)
    {
        return Ok(v);
    }
    unmarshal_parsed(src, opts)
}

/// [`unmarshal`] through the full parser.
pub(crate) fn unmarshal_parsed(src: &str, opts: DecodeOptions) -> Result<Value, Error> {
    let docs = parse_docs(src, true)?;
    match docs.first() {
        None => Ok(Value::Null),
        Some(doc) => decode_doc(doc, opts),
    }
}

/// Whether decoding `doc` cannot fail, whatever part of it is decoded: no aliases (nor so any
/// aliasing limit), no explicit tags (nor so tag mismatches or bad `!!binary`), no merge
/// keys and only scalars as map keys. Plain scalars always resolve.
fn decodes_without_error(doc: &Doc) -> bool {
    doc.nodes.iter().all(|n| match &n.kind {
        Kind::Alias { .. } => false,
        Kind::Scalar { value, tag, .. } => tag.is_empty() && value != "<<",
        Kind::Seq(_) => true,
        Kind::Map(children) => children
            .iter()
            .step_by(2)
            .all(|&k| matches!(doc.nodes.get(k).map(|n| &n.kind), Some(Kind::Scalar { .. }))),
    })
}

/// [`unmarshal`] when only some top-level keys of a mapping are wanted: the whole first
/// document is parsed (every parse error is reported), then, when its decoding cannot fail,
/// only the pairs whose key is one of `keys` are decoded; otherwise the whole document is.
pub(crate) fn unmarshal_keys(src: &str, keys: &[&str]) -> Result<Value, Error> {
    // Plain block-style documents: only the wanted entries go through the parser.
    match crate::head::block_head(src, keys) {
        Some(crate::head::Head::Empty) => return Ok(Value::Null),
        Some(crate::head::Head::Entries(text)) if text.is_empty() => {
            return Ok(Value::Map(Mapping::new()));
        }
        Some(crate::head::Head::Entries(text)) => {
            if let Ok(v @ Value::Map(_)) = unmarshal(&text, DecodeOptions::default()) {
                return Ok(v);
            }
        }
        None => {}
    }
    unmarshal_keys_parsed(src, keys)
}

/// [`unmarshal_keys`] through the full parser.
pub(crate) fn unmarshal_keys_parsed(src: &str, keys: &[&str]) -> Result<Value, Error> {
    let docs = parse_docs(src, true)?;
    let Some(doc) = docs.first() else {
        return Ok(Value::Null);
    };
    let opts = DecodeOptions::default();
    let children = match doc.root.and_then(|r| doc.nodes.get(r)) {
        Some(Node {
            kind: Kind::Map(children),
            ..
        }) if decodes_without_error(doc) => children,
        _ => return decode_doc(doc, opts),
    };
    let mut d = Decoder {
        doc,
        opts,
        decode_count: 1,
        alias_count: 0,
        alias_depth: 0,
        in_alias: Vec::new(),
        depth: 0,
    };
    let mut b = MapBuilder::default();
    for pair in children.chunks(2) {
        let key = d.decode(pair[0])?;
        if matches!(&key, Value::String(k) if keys.contains(&k.as_str())) {
            let value = match pair.get(1) {
                Some(&v) => d.decode(v)?,
                None => Value::Null,
            };
            d.set(&mut b, key, value)?;
        }
    }
    Ok(Value::Map(b.map))
}

/// Every document of a stream, as repeated `yaml.Decoder.Decode` calls return them.
pub(crate) fn unmarshal_all(src: &str, opts: DecodeOptions) -> Result<Vec<Value>, Error> {
    let docs = parse_docs(src, false)?;
    docs.iter().map(|d| decode_doc(d, opts)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block scalar ending the input with a last line of spaces beyond its indentation and
    /// no line break: those spaces end the value (helm v4.1.4's `fromYaml`, on documents the
    /// fast path leaves to the parser because of the anchored mapping).
    #[test]
    fn spaces_on_a_last_line_without_a_break_end_a_block_scalar() {
        let x = |body: &str| {
            let src = format!("a: &x\n  b: 1\n{body}");
            match unmarshal_parsed(&src, DecodeOptions::default()) {
                Ok(Value::Map(m)) => format!("{:?}", m.get_str("x")),
                other => panic!("{other:?}"),
            }
        };
        let s = |v: &str| format!("{:?}", Some(&Value::String(v.into())));
        assert_eq!(x("x: |\n  a\n    "), s("a\n  "));
        assert_eq!(x("x: |\n  a\n     "), s("a\n   "));
        assert_eq!(x("x: |\n  a\n    \n  "), s("a\n  \n"));
        assert_eq!(x("x: |\n  a  \n "), s("a  \n"));
        assert_eq!(x("x: >\n  a\n    "), s("a\n  "));
        assert_eq!(x("x: |+\n  a\n    "), s("a\n  "));
        assert_eq!(x("x: |-\n  a\n    "), s("a\n  "));
        // Explicit indentation indicators, anchors and tags (helm v4.1.4's `fromYaml`).
        assert_eq!(x("x: |2\n   a\n     "), s(" a\n   "));
        assert_eq!(x("x: |2\n   a\n     \n    "), s(" a\n   \n  "));
        assert_eq!(x("x: |+2\n   a\n     "), s(" a\n   "));
        assert_eq!(x("x: |2\n   a\n   \n  "), s(" a\n \n"));
        assert_eq!(x("x: &q |\n  a\n    "), s("a\n  "));
        assert_eq!(x("x: !!str |2\n   a\n     "), s(" a\n   "));
        assert_eq!(x("x:\n  &q |\n  a\n    "), s("a\n  "));
        assert_eq!(x("x: |\n  &a |\n  b\n    "), s("&a |\nb\n  "));
    }

    #[test]
    fn reading_some_keys_gives_what_reading_all_gives() {
        let keys = ["apiVersion", "kind", "metadata"];
        let docs = [
            "",
            "# only a comment\n",
            "null",
            "- a\n- b\n",
            "kind: A\napiVersion: v1\nmetadata:\n  name: x\n  annotations:\n    a: 1\nspec:\n  x: [1, 2]\n",
            "kind: A\nkind: B\nmetadata: {name: y}\n",
            "kind: A\nspec: &a {x: 1}\nother: *a\n",
            "kind: A\nspec:\n  <<: {x: 1}\n",
            "kind: A\nspec:\n  <<: 3\n",
            "kind: A\nspec: !!int abc\n",
            "kind: A\nspec: !!binary '@@'\n",
            "kind: A\n? [a]\n: b\n",
            "kind: A\nspec: [1, {a: b}]\nmetadata: ~\n",
            "kind: 3\napiVersion: 1.5\nmetadata:\n  name: true\n",
            "kind: A\nspec: :\n  - x\n",
            "kind: A\n  bad: indentation\n",
            "kind: A\nspec: 'unterminated\n",
            "a: b\n---\nkind: Second\n",
        ];
        for doc in docs {
            let all = unmarshal(doc, DecodeOptions::default());
            let some = unmarshal_keys(doc, &keys);
            match (&all, &some) {
                (Ok(Value::Map(a)), Ok(Value::Map(s))) => {
                    for k in keys {
                        assert_eq!(a.get_str(k), s.get_str(k), "{doc:?} key {k}");
                    }
                }
                _ => assert_eq!(format!("{all:?}"), format!("{some:?}"), "{doc:?}"),
            }
        }
    }

    #[test]
    fn base64_like_go() {
        assert_eq!(decode_base64("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(decode_base64("aGVs\nbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(decode_base64("aGVsbG8"), None);
        assert_eq!(decode_base64("aG=sbG8="), None);
    }
}
