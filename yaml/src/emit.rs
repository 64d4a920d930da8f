//! go-yaml's encoder (`encode.go`) and emitter (`emitterc.go`, a libyaml port), written as a
//! walk over a [`Value`] tree that keeps the emitter's state variables and decisions.
//!
//! Both major versions are here, as a [`Flavor`]: they share the libyaml emitter and differ
//! in a handful of decisions, each marked where it is taken:
//! - width: v2 folds lines at 80 columns, v3 never folds (`best_width` left at -1);
//! - indentation: v2 indents by 2 and writes a block sequence inside a mapping without
//!   indenting it (`key:\n- a`); v3 indents by the encoder's `SetIndent` (4 by default),
//!   aligns nested mappings and sequences to multiples of it, indents sequences inside
//!   mappings (`key:\n  - a`) unless `CompactSeqIndent` is set, and indents anything nested
//!   in a sequence item by 2 (past the `- `);
//! - scalars: v3 treats a tab as allowed in block scalars (v2 escapes it in a double-quoted
//!   string), and writes no space before an empty plain scalar;
//! - key order: v3's `keyList.Less` differs after a run of equal digits ([`Sorter`]).

use crate::resolve::{self, BINARY_TAG, Resolved};
use crate::sort::Sorter;
use crate::{Error, Value};

/// Which go-yaml's emitter to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// go-yaml v2 (`yaml.Marshal`): indent 2, width 80.
    V2,
    /// go-yaml v3's `Encoder`: `SetIndent(indent)` (clamped to 2..=9 as libyaml does), no
    /// line folding, and `CompactSeqIndent` when `compact_seq` is set.
    V3 { indent: u8, compact_seq: bool },
}

/// go-yaml v3's `best_width` of -1, which libyaml turns into the largest int.
const UNLIMITED_WIDTH: i64 = (1 << 31) - 1;
/// Deepest nesting the emitter walks (it recurses once per level).
pub(crate) const MAX_EMIT_DEPTH: usize = 1000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
}

/// A scalar event as the encoder builds it.
struct Scalar<'a> {
    value: std::borrow::Cow<'a, [u8]>,
    /// Long-form tag, empty when implicit.
    tag: &'static str,
    style: Style,
}

#[derive(Default)]
struct Analysis {
    multiline: bool,
    flow_plain_allowed: bool,
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

/// How maps are ordered on output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrder {
    /// go-yaml v2's order for Go maps (`sorter.go`); what `yaml.Marshal` of a map does.
    GoYaml,
    /// The mapping's own order (go-yaml's `MapSlice`).
    Insertion,
}

pub(crate) struct Emitter {
    flavor: Flavor,
    best_indent: i64,
    best_width: i64,
    out: Vec<u8>,
    column: i64,
    indent: i64,
    indents: Vec<i64>,
    flow_level: i64,
    whitespace: bool,
    indention: bool,
    open_ended: bool,
    root_context: bool,
    sequence_context: bool,
    mapping_context: bool,
    simple_key_context: bool,
    order: KeyOrder,
    depth: usize,
}

fn at(b: &[u8], i: usize) -> u8 {
    b.get(i).copied().unwrap_or(0)
}

fn width(b: u8) -> usize {
    if b & 0x80 == 0 {
        1
    } else if b & 0xE0 == 0xC0 {
        2
    } else if b & 0xF0 == 0xE0 {
        3
    } else if b & 0xF8 == 0xF0 {
        4
    } else {
        0
    }
}

fn is_printable(b: &[u8], i: usize) -> bool {
    let c = at(b, i);
    let c1 = at(b, i + 1);
    let c2 = at(b, i + 2);
    c == 0x0A
        || (0x20..=0x7E).contains(&c)
        || (c == 0xC2 && c1 >= 0xA0)
        || (c > 0xC2 && c < 0xED)
        || (c == 0xED && c1 < 0xA0)
        || c == 0xEE
        || (c == 0xEF && !(c1 == 0xBB && c2 == 0xBF) && !(c1 == 0xBF && (c2 == 0xBE || c2 == 0xBF)))
}

fn is_space(b: &[u8], i: usize) -> bool {
    at(b, i) == b' '
}

fn is_blank(b: &[u8], i: usize) -> bool {
    matches!(at(b, i), b' ' | b'\t')
}

fn is_break(b: &[u8], i: usize) -> bool {
    let c = at(b, i);
    c == b'\r'
        || c == b'\n'
        || (c == 0xC2 && at(b, i + 1) == 0x85)
        || (c == 0xE2 && at(b, i + 1) == 0x80 && (at(b, i + 2) == 0xA8 || at(b, i + 2) == 0xA9))
}

fn is_blankz(b: &[u8], i: usize) -> bool {
    is_blank(b, i) || is_break(b, i) || at(b, i) == 0
}

/// go-yaml's `is_bom` looks at the start of the buffer whatever the index.
fn is_bom(b: &[u8]) -> bool {
    at(b, 0) == 0xEF && at(b, 1) == 0xBB && at(b, 2) == 0xBF
}

fn is_alpha(b: &[u8], i: usize) -> bool {
    let c = at(b, i);
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

/// Printable ASCII that `analyze_scalar` has nothing to note about past the first character:
/// not a blank, and not one of the indicators it looks at there (`,?[]{}:#`).
const ORDINARY: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0x21;
    while c <= 0x7E {
        t[c] = !matches!(
            c as u8,
            b',' | b'?' | b'[' | b']' | b'{' | b'}' | b':' | b'#'
        );
        c += 1;
    }
    t
};

/// `yaml_emitter_analyze_scalar`; `tabs_in_blocks` is v3's rule that a tab does not rule
/// out a block scalar (v2 counts it as a special character).
fn analyze_scalar(value: &[u8], tabs_in_blocks: bool) -> Analysis {
    if value.is_empty() {
        return Analysis {
            multiline: false,
            flow_plain_allowed: false,
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: false,
        };
    }
    let mut block_indicators = false;
    let mut flow_indicators = false;
    let mut line_breaks = false;
    let mut special_characters = false;
    let mut leading_space = false;
    let mut leading_break = false;
    let mut trailing_space = false;
    let mut trailing_break = false;
    let mut break_space = false;
    let mut space_break = false;
    let mut previous_space = false;
    let mut previous_break = false;

    if value.starts_with(b"---") || value.starts_with(b"...") {
        block_indicators = true;
        flow_indicators = true;
    }
    let mut tab_characters = false;
    let mut preceded_by_whitespace = true;
    let mut i = 0;
    while i < value.len() {
        if i > 0 && ORDINARY[usize::from(value[i])] {
            // A run of printable ASCII that is neither blank nor an indicator past the
            // first character: it only clears the state the previous character left.
            i += 1;
            while i < value.len() && ORDINARY[usize::from(value[i])] {
                i += 1;
            }
            previous_space = false;
            previous_break = false;
            preceded_by_whitespace = false;
            continue;
        }
        // The other common ASCII characters past the first, as the general code below
        // takes them.
        if i > 0 {
            let last = i + 1 == value.len();
            match value[i] {
                b' ' => {
                    trailing_space |= last;
                    break_space |= previous_break;
                    previous_space = true;
                    previous_break = false;
                    preceded_by_whitespace = true;
                    i += 1;
                    continue;
                }
                b'\n' => {
                    line_breaks = true;
                    trailing_break |= last;
                    space_break |= previous_space;
                    previous_space = false;
                    previous_break = true;
                    preceded_by_whitespace = true;
                    i += 1;
                    continue;
                }
                c @ (b',' | b'?' | b'[' | b']' | b'{' | b'}' | b':') => {
                    flow_indicators = true;
                    if c == b':' && (last || matches!(value[i + 1], b' ' | b'\t')) {
                        block_indicators = true;
                    }
                    previous_space = false;
                    previous_break = false;
                    preceded_by_whitespace = false;
                    i += 1;
                    continue;
                }
                _ => {}
            }
        }
        let w = width(value[i]).max(1);
        let followed_by_whitespace = i + w >= value.len() || is_blank(value, i + w);
        if i == 0 {
            match value[i] {
                b'#' | b',' | b'[' | b']' | b'{' | b'}' | b'&' | b'*' | b'!' | b'|' | b'>'
                | b'\'' | b'"' | b'%' | b'@' | b'`' => {
                    flow_indicators = true;
                    block_indicators = true;
                }
                b'?' | b':' => {
                    flow_indicators = true;
                    if followed_by_whitespace {
                        block_indicators = true;
                    }
                }
                b'-' if followed_by_whitespace => {
                    flow_indicators = true;
                    block_indicators = true;
                }
                _ => {}
            }
        } else {
            match value[i] {
                b',' | b'?' | b'[' | b']' | b'{' | b'}' => flow_indicators = true,
                b':' => {
                    flow_indicators = true;
                    if followed_by_whitespace {
                        block_indicators = true;
                    }
                }
                b'#' if preceded_by_whitespace => {
                    flow_indicators = true;
                    block_indicators = true;
                }
                _ => {}
            }
        }
        if tabs_in_blocks && value[i] == b'\t' {
            tab_characters = true;
        } else if !is_printable(value, i) {
            special_characters = true;
        }
        if is_space(value, i) {
            if i == 0 {
                leading_space = true;
            }
            if i + w == value.len() {
                trailing_space = true;
            }
            if previous_break {
                break_space = true;
            }
            previous_space = true;
            previous_break = false;
        } else if is_break(value, i) {
            line_breaks = true;
            if i == 0 {
                leading_break = true;
            }
            if i + w == value.len() {
                trailing_break = true;
            }
            if previous_space {
                space_break = true;
            }
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = is_blankz(value, i);
        i += w;
    }
    let mut a = Analysis {
        multiline: line_breaks,
        flow_plain_allowed: true,
        block_plain_allowed: true,
        single_quoted_allowed: true,
        block_allowed: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.flow_plain_allowed = false;
        a.block_plain_allowed = false;
    }
    if trailing_space {
        a.block_allowed = false;
    }
    if break_space {
        a.flow_plain_allowed = false;
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
    }
    if space_break || tab_characters || special_characters {
        a.flow_plain_allowed = false;
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
    }
    if space_break || special_characters {
        a.block_allowed = false;
    }
    if line_breaks {
        a.flow_plain_allowed = false;
        a.block_plain_allowed = false;
    }
    if flow_indicators {
        a.flow_plain_allowed = false;
    }
    if block_indicators {
        a.block_plain_allowed = false;
    }
    a
}

/// Tag handle and suffix after the default `%TAG` directives (`!` and `!!`).
fn split_tag(tag: &str) -> (&'static str, &str) {
    if let Some(rest) = tag.strip_prefix(resolve::TAG_PREFIX) {
        ("!!", rest)
    } else if let Some(rest) = tag.strip_prefix('!') {
        ("!", rest)
    } else {
        ("", tag)
    }
}

/// Base64 broken into 70-character lines the way go-yaml's `encodeBase64` does.
fn encode_base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut enc = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b0 = u32::from(chunk[0]);
        let b1 = u32::from(chunk.get(1).copied().unwrap_or(0));
        let b2 = u32::from(chunk.get(2).copied().unwrap_or(0));
        let n = (b0 << 16) | (b1 << 8) | b2;
        let idx = |shift: u32| char::from(ALPHABET[((n >> shift) & 63) as usize]);
        enc.push(idx(18));
        enc.push(idx(12));
        enc.push(if chunk.len() > 1 { idx(6) } else { '=' });
        enc.push(if chunk.len() > 2 { idx(0) } else { '=' });
    }
    const LINE: usize = 70;
    let lines = enc.len() / LINE + 1;
    if lines <= 1 {
        return enc;
    }
    let mut out = String::with_capacity(enc.len() + lines);
    let bytes = enc.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let j = (i + LINE).min(bytes.len());
        out.push_str(&enc[i..j]);
        out.push('\n');
        i = j;
    }
    out
}

impl Emitter {
    pub(crate) fn new(order: KeyOrder) -> Self {
        Emitter::with_flavor(Flavor::V2, order)
    }

    pub(crate) fn with_flavor(flavor: Flavor, order: KeyOrder) -> Self {
        let (best_indent, best_width) = match flavor {
            Flavor::V2 => (2, 80),
            // yaml_emitter_emit_stream_start: an indent outside 2..=9 becomes 2.
            Flavor::V3 { indent, .. } if (2..=9).contains(&indent) => {
                (i64::from(indent), UNLIMITED_WIDTH)
            }
            Flavor::V3 { .. } => (2, UNLIMITED_WIDTH),
        };
        Emitter {
            flavor,
            best_indent,
            best_width,
            out: Vec::new(),
            column: 0,
            indent: -1,
            indents: Vec::new(),
            flow_level: 0,
            whitespace: true,
            indention: true,
            open_ended: false,
            root_context: false,
            sequence_context: false,
            mapping_context: false,
            simple_key_context: false,
            order,
            depth: 0,
        }
    }

    pub(crate) fn finish(self) -> Result<String, Error> {
        String::from_utf8(self.out).map_err(|_| Error::raw("yaml: emitter produced invalid UTF-8"))
    }

    /// One document, as `yaml.Marshal` writes it (implicit start and end).
    pub(crate) fn document(&mut self, v: &Value) -> Result<(), Error> {
        self.indent = -1;
        self.emit_node(v, true, false, false, false)?;
        // DOCUMENT-END, implicit.
        self.write_indent();
        self.open_ended = false;
        Ok(())
    }

    // ---- low-level writers -------------------------------------------------------------

    fn put(&mut self, c: u8) {
        self.out.push(c);
        self.column += 1;
    }

    /// A line break; both versions end up with `indention` set after one (v3 sets it here,
    /// v2 in every caller).
    fn put_break(&mut self) {
        self.out.push(b'\n');
        self.column = 0;
        self.indention = true;
    }

    fn write(&mut self, s: &[u8], i: &mut usize) {
        let w = width(s[*i]).max(1);
        let end = (*i + w).min(s.len());
        self.out.extend_from_slice(&s[*i..end]);
        self.column += 1;
        *i = end;
    }

    /// [`Self::write`] of the characters from `*i` up to the next line break (and space,
    /// when `stop_at_space`), at least one: ASCII stretches are copied at once.
    fn write_run(&mut self, s: &[u8], i: &mut usize, stop_at_space: bool) {
        let start = *i;
        let mut columns = 0;
        loop {
            let c = s[*i];
            if c < 0x80 {
                *i += 1;
            } else {
                *i = (*i + width(c).max(1)).min(s.len());
            }
            columns += 1;
            match s.get(*i) {
                None | Some(b'\n' | b'\r' | 0xC2 | 0xE2) => break,
                Some(b' ') if stop_at_space => break,
                _ => {}
            }
        }
        self.out.extend_from_slice(&s[start..*i]);
        self.column += columns;
    }

    fn write_all(&mut self, s: &[u8]) {
        let mut i = 0;
        while i < s.len() {
            self.write(s, &mut i);
        }
    }

    fn write_break(&mut self, s: &[u8], i: &mut usize) {
        if s[*i] == b'\n' {
            self.put_break();
            *i += 1;
        } else {
            self.write(s, i);
            self.column = 0;
        }
    }

    /// `yaml_emitter_increase_indent`. `compact_seq` is v3's `CompactSeqIndent` adjustment
    /// for a block sequence that is a mapping value.
    fn increase_indent(&mut self, flow: bool, indentless: bool, compact_seq: bool) {
        self.indents.push(self.indent);
        if self.indent < 0 {
            self.indent = if flow { self.best_indent } else { 0 };
        } else if !indentless {
            match self.flavor {
                Flavor::V2 => self.indent += self.best_indent,
                Flavor::V3 { .. } => {
                    // The state on top of the stack is the parent's: inside a block sequence
                    // item, content starts past the "- "; elsewhere it aligns to the indent.
                    if self.sequence_context && self.flow_level == 0 {
                        self.indent += 2;
                    } else {
                        self.indent = self.best_indent
                            * ((self.indent + self.best_indent) / self.best_indent);
                        if compact_seq {
                            self.indent -= 2;
                        }
                    }
                }
            }
        }
    }

    fn pop_indent(&mut self) {
        self.indent = self.indents.pop().unwrap_or(-1);
    }

    fn write_indent(&mut self) {
        let indent = self.indent.max(0);
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        while self.column < indent {
            self.put(b' ');
        }
        self.whitespace = true;
        self.indention = true;
    }

    fn write_indicator(
        &mut self,
        indicator: &[u8],
        need_whitespace: bool,
        is_whitespace: bool,
        is_indention: bool,
    ) {
        if need_whitespace && !self.whitespace {
            self.put(b' ');
        }
        self.write_all(indicator);
        self.whitespace = is_whitespace;
        self.indention = self.indention && is_indention;
        self.open_ended = false;
    }

    fn write_tag_handle(&mut self, value: &[u8]) {
        if !self.whitespace {
            self.put(b' ');
        }
        self.write_all(value);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_tag_content(&mut self, value: &[u8], need_whitespace: bool) {
        if need_whitespace && !self.whitespace {
            self.put(b' ');
        }
        let mut i = 0;
        while i < value.len() {
            let must_write = matches!(
                value[i],
                b';' | b'/'
                    | b'?'
                    | b':'
                    | b'@'
                    | b'&'
                    | b'='
                    | b'+'
                    | b'$'
                    | b','
                    | b'_'
                    | b'.'
                    | b'~'
                    | b'*'
                    | b'\''
                    | b'('
                    | b')'
                    | b'['
                    | b']'
            ) || is_alpha(value, i);
            if must_write {
                self.write(value, &mut i);
            } else {
                let w = width(value[i]).max(1);
                for _ in 0..w {
                    let octet = at(value, i);
                    i += 1;
                    self.put(b'%');
                    let hex = |c: u8| if c < 10 { c + b'0' } else { c + b'A' - 10 };
                    self.put(hex(octet >> 4));
                    self.put(hex(octet & 0x0f));
                }
            }
        }
        self.whitespace = false;
        self.indention = false;
    }

    // ---- nodes ---------------------------------------------------------------------------

    fn emit_node(
        &mut self,
        v: &Value,
        root: bool,
        sequence: bool,
        mapping: bool,
        simple_key: bool,
    ) -> Result<(), Error> {
        self.root_context = root;
        self.sequence_context = sequence;
        self.mapping_context = mapping;
        self.simple_key_context = simple_key;
        match v {
            Value::Seq(items) => {
                self.enter()?;
                if self.flow_level > 0 || items.is_empty() {
                    self.flow_sequence(items)?;
                } else {
                    self.block_sequence(items)?;
                }
                self.depth -= 1;
                Ok(())
            }
            Value::Map(m) => {
                self.enter()?;
                let mut entries: Vec<(&Value, &Value)> = m.iter().collect();
                if self.order == KeyOrder::GoYaml {
                    sort_refs(&mut entries, self.sorter());
                }
                if self.flow_level > 0 || entries.is_empty() {
                    self.flow_mapping(&entries)?;
                } else {
                    self.block_mapping(&entries)?;
                }
                self.depth -= 1;
                Ok(())
            }
            scalar => {
                let s = encode_scalar(scalar)?;
                self.emit_scalar(&s);
                Ok(())
            }
        }
    }

    fn tabs_in_blocks(&self) -> bool {
        matches!(self.flavor, Flavor::V3 { .. })
    }

    fn sorter(&self) -> Sorter {
        match self.flavor {
            Flavor::V2 => Sorter::V2,
            Flavor::V3 { .. } => Sorter::V3,
        }
    }

    fn enter(&mut self) -> Result<(), Error> {
        self.depth += 1;
        if self.depth > MAX_EMIT_DEPTH {
            return Err(Error::raw(format!(
                "yaml: exceeded max depth of {MAX_EMIT_DEPTH}"
            )));
        }
        Ok(())
    }

    fn block_sequence(&mut self, items: &[Value]) -> Result<(), Error> {
        match self.flavor {
            Flavor::V2 => {
                self.increase_indent(false, self.mapping_context && !self.indention, false)
            }
            Flavor::V3 { compact_seq, .. } => {
                let compact =
                    self.mapping_context && (self.column == 0 || !self.indention) && compact_seq;
                self.increase_indent(false, false, compact);
            }
        }
        for item in items {
            self.write_indent();
            self.write_indicator(b"-", true, false, true);
            self.emit_node(item, false, true, false, false)?;
        }
        self.pop_indent();
        Ok(())
    }

    fn flow_sequence(&mut self, items: &[Value]) -> Result<(), Error> {
        self.write_indicator(b"[", true, true, false);
        self.increase_indent(true, false, false);
        self.flow_level += 1;
        for (n, item) in items.iter().enumerate() {
            if n > 0 {
                self.write_indicator(b",", false, false, false);
            }
            if self.column > self.best_width {
                self.write_indent();
            }
            self.emit_node(item, false, true, false, false)?;
        }
        self.flow_level -= 1;
        self.pop_indent();
        self.write_indicator(b"]", false, false, false);
        Ok(())
    }

    fn block_mapping(&mut self, entries: &[(&Value, &Value)]) -> Result<(), Error> {
        self.increase_indent(false, false, false);
        for (k, v) in entries {
            self.write_indent();
            if check_simple_key(k, self.tabs_in_blocks())? {
                self.emit_node(k, false, false, true, true)?;
                self.write_indicator(b":", false, false, false);
            } else {
                self.write_indicator(b"?", true, false, true);
                self.emit_node(k, false, false, true, false)?;
                self.write_indent();
                self.write_indicator(b":", true, false, true);
            }
            self.emit_node(v, false, false, true, false)?;
        }
        self.pop_indent();
        Ok(())
    }

    fn flow_mapping(&mut self, entries: &[(&Value, &Value)]) -> Result<(), Error> {
        self.write_indicator(b"{", true, true, false);
        self.increase_indent(true, false, false);
        self.flow_level += 1;
        for (n, (k, v)) in entries.iter().enumerate() {
            if n > 0 {
                self.write_indicator(b",", false, false, false);
            }
            if self.column > self.best_width {
                self.write_indent();
            }
            if check_simple_key(k, self.tabs_in_blocks())? {
                self.emit_node(k, false, false, true, true)?;
                self.write_indicator(b":", false, false, false);
            } else {
                self.write_indicator(b"?", true, false, false);
                self.emit_node(k, false, false, true, false)?;
                if self.column > self.best_width {
                    self.write_indent();
                }
                self.write_indicator(b":", true, false, false);
            }
            self.emit_node(v, false, false, true, false)?;
        }
        self.flow_level -= 1;
        self.pop_indent();
        self.write_indicator(b"}", false, false, false);
        Ok(())
    }

    fn emit_scalar(&mut self, ev: &Scalar<'_>) {
        let analysis = analyze_scalar(&ev.value, self.tabs_in_blocks());
        // analyze_event: a tag is recorded only when the scalar is not implicit.
        let (mut handle, suffix): (&[u8], &[u8]) = if ev.tag.is_empty() {
            (b"", b"")
        } else {
            let (h, s) = split_tag(ev.tag);
            (h.as_bytes(), s.as_bytes())
        };
        let implicit = ev.tag.is_empty();
        // select_scalar_style
        let no_tag = handle.is_empty() && suffix.is_empty();
        let mut style = ev.style;
        if self.simple_key_context && analysis.multiline {
            style = Style::DoubleQuoted;
        }
        if style == Style::Plain {
            if (self.flow_level > 0 && !analysis.flow_plain_allowed)
                || (self.flow_level == 0 && !analysis.block_plain_allowed)
            {
                style = Style::SingleQuoted;
            }
            if ev.value.is_empty() && (self.flow_level > 0 || self.simple_key_context) {
                style = Style::SingleQuoted;
            }
            if no_tag && !implicit {
                style = Style::SingleQuoted;
            }
        }
        if style == Style::SingleQuoted && !analysis.single_quoted_allowed {
            style = Style::DoubleQuoted;
        }
        if style == Style::Literal
            && (!analysis.block_allowed || self.flow_level > 0 || self.simple_key_context)
        {
            style = Style::DoubleQuoted;
        }
        if no_tag && !implicit && style != Style::Plain {
            handle = b"!";
        }
        // process_tag
        if !handle.is_empty() || !suffix.is_empty() {
            if !handle.is_empty() {
                self.write_tag_handle(handle);
                if !suffix.is_empty() {
                    self.write_tag_content(suffix, false);
                }
            } else {
                self.write_indicator(b"!<", true, false, false);
                self.write_tag_content(suffix, false);
                self.write_indicator(b">", false, false, false);
            }
        }
        self.increase_indent(true, false, false);
        let allow_breaks = !self.simple_key_context;
        match style {
            Style::Plain => self.write_plain(&ev.value, allow_breaks),
            Style::SingleQuoted => self.write_single_quoted(&ev.value, allow_breaks),
            Style::DoubleQuoted => self.write_double_quoted(&ev.value, allow_breaks),
            Style::Literal => self.write_literal(&ev.value),
        }
        self.pop_indent();
    }

    fn write_plain(&mut self, value: &[u8], allow_breaks: bool) {
        // v3 writes nothing at all for an empty plain scalar.
        let writes = !value.is_empty() || self.flavor == Flavor::V2;
        if !self.whitespace && writes {
            self.put(b' ');
        }
        let mut spaces = false;
        let mut breaks = false;
        let mut i = 0;
        while i < value.len() {
            if is_space(value, i) {
                if allow_breaks
                    && !spaces
                    && self.column > self.best_width
                    && !is_space(value, i + 1)
                {
                    self.write_indent();
                    i += 1;
                } else {
                    self.write(value, &mut i);
                }
                spaces = true;
            } else if is_break(value, i) {
                if !breaks && value[i] == b'\n' {
                    self.put_break();
                }
                self.write_break(value, &mut i);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                self.write_run(value, &mut i, true);
                self.indention = false;
                spaces = false;
                breaks = false;
            }
        }
        if writes {
            self.whitespace = false;
        }
        self.indention = false;
        if self.root_context {
            self.open_ended = true;
        }
    }

    fn write_single_quoted(&mut self, value: &[u8], allow_breaks: bool) {
        self.write_indicator(b"'", true, false, false);
        let mut spaces = false;
        let mut breaks = false;
        let mut i = 0;
        while i < value.len() {
            if is_space(value, i) {
                if allow_breaks
                    && !spaces
                    && self.column > self.best_width
                    && i > 0
                    && i < value.len() - 1
                    && !is_space(value, i + 1)
                {
                    self.write_indent();
                    i += 1;
                } else {
                    self.write(value, &mut i);
                }
                spaces = true;
            } else if is_break(value, i) {
                if !breaks && value[i] == b'\n' {
                    self.put_break();
                }
                self.write_break(value, &mut i);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                if value[i] == b'\'' {
                    self.put(b'\'');
                }
                self.write(value, &mut i);
                self.indention = false;
                spaces = false;
                breaks = false;
            }
        }
        self.write_indicator(b"'", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_double_quoted(&mut self, value: &[u8], allow_breaks: bool) {
        let mut spaces = false;
        self.write_indicator(b"\"", true, false, false);
        let mut i = 0;
        while i < value.len() {
            if !is_printable(value, i)
                || is_bom(value)
                || is_break(value, i)
                || value[i] == b'"'
                || value[i] == b'\\'
            {
                let octet = value[i];
                let (w, mut v): (usize, u32) = if octet & 0x80 == 0 {
                    (1, u32::from(octet & 0x7F))
                } else if octet & 0xE0 == 0xC0 {
                    (2, u32::from(octet & 0x1F))
                } else if octet & 0xF0 == 0xE0 {
                    (3, u32::from(octet & 0x0F))
                } else if octet & 0xF8 == 0xF0 {
                    (4, u32::from(octet & 0x07))
                } else {
                    (1, u32::from(octet))
                };
                for k in 1..w {
                    v = (v << 6) + (u32::from(at(value, i + k)) & 0x3F);
                }
                i += w;
                self.put(b'\\');
                match v {
                    0x00 => self.put(b'0'),
                    0x07 => self.put(b'a'),
                    0x08 => self.put(b'b'),
                    0x09 => self.put(b't'),
                    0x0A => self.put(b'n'),
                    0x0B => self.put(b'v'),
                    0x0C => self.put(b'f'),
                    0x0D => self.put(b'r'),
                    0x1B => self.put(b'e'),
                    0x22 => self.put(b'"'),
                    0x5C => self.put(b'\\'),
                    0x85 => self.put(b'N'),
                    0xA0 => self.put(b'_'),
                    0x2028 => self.put(b'L'),
                    0x2029 => self.put(b'P'),
                    _ => {
                        let digits: u32 = if v <= 0xFF {
                            self.put(b'x');
                            2
                        } else if v <= 0xFFFF {
                            self.put(b'u');
                            4
                        } else {
                            self.put(b'U');
                            8
                        };
                        for k in (0..digits).rev() {
                            let digit = ((v >> (k * 4)) & 0x0F) as u8;
                            self.put(if digit < 10 {
                                digit + b'0'
                            } else {
                                digit + b'A' - 10
                            });
                        }
                    }
                }
                spaces = false;
            } else if is_space(value, i) {
                if allow_breaks
                    && !spaces
                    && self.column > self.best_width
                    && i > 0
                    && i < value.len() - 1
                {
                    self.write_indent();
                    if is_space(value, i + 1) {
                        self.put(b'\\');
                    }
                    i += 1;
                } else {
                    self.write(value, &mut i);
                }
                spaces = true;
            } else {
                self.write(value, &mut i);
                spaces = false;
            }
        }
        self.write_indicator(b"\"", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_block_scalar_hints(&mut self, value: &[u8]) {
        if is_space(value, 0) || is_break(value, 0) {
            let hint = [b'0' + u8::try_from(self.best_indent).unwrap_or(2)];
            self.write_indicator(&hint, false, false, false);
        }
        self.open_ended = false;
        let mut chomp: Option<u8> = None;
        if value.is_empty() {
            chomp = Some(b'-');
        } else {
            let mut i = value.len() - 1;
            while i > 0 && value[i] & 0xC0 == 0x80 {
                i -= 1;
            }
            if !is_break(value, i) {
                chomp = Some(b'-');
            } else if i == 0 {
                chomp = Some(b'+');
                self.open_ended = true;
            } else {
                i -= 1;
                while i > 0 && value[i] & 0xC0 == 0x80 {
                    i -= 1;
                }
                if is_break(value, i) {
                    chomp = Some(b'+');
                    self.open_ended = true;
                }
            }
        }
        if let Some(c) = chomp {
            self.write_indicator(&[c], false, false, false);
        }
    }

    fn write_literal(&mut self, value: &[u8]) {
        self.write_indicator(b"|", true, false, false);
        self.write_block_scalar_hints(value);
        self.put_break();
        self.indention = true;
        self.whitespace = true;
        let mut breaks = true;
        let mut i = 0;
        while i < value.len() {
            if is_break(value, i) {
                self.write_break(value, &mut i);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                self.write_run(value, &mut i, false);
                self.indention = false;
                breaks = false;
            }
        }
    }
}

fn sort_refs(entries: &mut [(&Value, &Value)], sorter: Sorter) {
    crate::sort::sort_refs_as(sorter, entries);
}

/// `check_simple_key` for a key node.
fn check_simple_key(k: &Value, tabs_in_blocks: bool) -> Result<bool, Error> {
    match k {
        Value::Seq(s) => Ok(s.is_empty()),
        Value::Map(m) => Ok(m.is_empty()),
        scalar => {
            let s = encode_scalar(scalar)?;
            let a = analyze_scalar(&s.value, tabs_in_blocks);
            if a.multiline {
                return Ok(false);
            }
            let (h, suf) = if s.tag.is_empty() {
                ("", "")
            } else {
                split_tag(s.tag)
            };
            Ok(h.len() + suf.len() + s.value.len() <= 128)
        }
    }
}

/// The scalar event go-yaml v2's encoder makes for a scalar value.
fn encode_scalar(v: &Value) -> Result<Scalar<'_>, Error> {
    let plain = |s: String| Scalar {
        value: s.into_bytes().into(),
        tag: "",
        style: Style::Plain,
    };
    Ok(match v {
        Value::Null => plain("null".to_owned()),
        Value::Bool(b) => plain(if *b { "true" } else { "false" }.to_owned()),
        Value::Int(i) => plain(i.to_string()),
        Value::Uint(u) => plain(u.to_string()),
        Value::Float(f) => {
            let s = crate::goformat::format_g(*f, false);
            plain(match s.as_str() {
                "+Inf" => ".inf".to_owned(),
                "-Inf" => "-.inf".to_owned(),
                "NaN" => ".nan".to_owned(),
                _ => s,
            })
        }
        Value::String(s) => string_scalar(s),
        Value::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => string_scalar(s),
            Err(_) => {
                let enc = encode_base64(b);
                let style = if enc.contains('\n') {
                    Style::Literal
                } else {
                    Style::Plain
                };
                Scalar {
                    value: enc.into_bytes().into(),
                    tag: BINARY_TAG,
                    style,
                }
            }
        },
        Value::Seq(_) | Value::Map(_) => {
            return Err(Error::raw("yaml: internal error: container as scalar"));
        }
    })
}

/// `encoder.stringv` for a valid UTF-8 string without an explicit tag.
fn string_scalar(s: &str) -> Scalar<'_> {
    let can_use_plain = resolve::resolve_plain(s) == Resolved::Str && !resolve::is_base60_float(s);
    let style = if s.contains('\n') {
        Style::Literal
    } else if can_use_plain {
        Style::Plain
    } else {
        Style::DoubleQuoted
    };
    Scalar {
        value: s.as_bytes().into(),
        tag: "",
        style,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_lines() {
        assert_eq!(encode_base64(b"hello"), "aGVsbG8=");
        let long = encode_base64(&[0xff; 60]);
        assert!(long.ends_with('\n'));
        assert_eq!(long.lines().next().map(str::len), Some(70));
    }
}
