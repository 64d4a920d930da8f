//! Sprig's `semver` and `semverCompare`, on a port of `Masterminds/semver/v3` v3.4.0 (the
//! version Helm v4.1 links): lenient `NewVersion` (optional `v`, missing minor/patch, leading
//! zeros coerced), `NewConstraint` (operators, `x`/`*` wildcards, `~`, `^`, hyphen ranges,
//! comma/space AND, `||` OR) and `Constraints.Check` with its prerelease rule: a prerelease
//! version only satisfies an OR group that itself names a prerelease.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Function, Object, Signature, Value};

// Masterminds parses with regular expressions; compiling them cost more than the rest of
// reading a small chart. The scanners below accept exactly the same texts and yield the same
// sub-matches. The patterns they implement (Go RE2, leftmost-first):
//
//   version     ^v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?(-(ID(\.ID)*))?(\+(ID(\.ID)*))?$
//   cv          v?(SEG+)(\.SEG+)?(\.SEG+)?(-(ID(\.ID)*))?(\+(ID(\.ID)*))?
//   constraint  ^\s*(OP)\s*(cv)\s*$
//   valid AND   ^(\s*(OP)\s*(cv)\s*)((?:\s+|,\s*)(OP)\s*(cv)\s*)*$
//   hyphen      \s*(cv)\s+-\s+(cv)\s*      (unanchored, every match)
//
// with ID = [0-9A-Za-z-]+, SEG = [0-9|x|X|*] (the `|` is a literal there), \s = [\t\n\f\r ]
// and OP one of `` = != > < >= => <= =< ~ ~> ^``. In each, taking every optional part
// greedily yields the longest match, and no part can contain whitespace, `,` or an operator
// character, which is what lets a left-to-right scan replace the backtracking.

/// Go's `\s`: ASCII whitespace without `\v`.
fn is_ws(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ')
}

/// A character of a prerelease or metadata identifier.
fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}

/// A character of a constraint's version segment (`[0-9|x|X|\*]`).
fn is_constraint_seg(b: u8) -> bool {
    b.is_ascii_digit() || matches!(b, b'x' | b'X' | b'*' | b'|')
}

fn is_op_char(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'>' | b'<' | b'~' | b'^')
}

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while s.get(i).is_some_and(|&b| is_ws(b)) {
        i += 1;
    }
    i
}

fn run(s: &[u8], mut i: usize, class: fn(u8) -> bool) -> usize {
    while s.get(i).is_some_and(|&b| class(b)) {
        i += 1;
    }
    i
}

/// `ID(\.ID)*` from `i`: its end, or `None` when no identifier starts there.
fn dotted_idents(s: &[u8], i: usize) -> Option<usize> {
    let mut end = run(s, i, is_ident);
    if end == i {
        return None;
    }
    while s.get(end) == Some(&b'.') {
        let next = run(s, end + 1, is_ident);
        if next == end + 1 {
            break;
        }
        end = next;
    }
    Some(end)
}

/// The sub-matches of one version text (`version` or `cv` above), as byte ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
struct VersionSpan {
    /// The whole match, `v` and metadata included.
    all: Range<usize>,
    major: Range<usize>,
    /// Without the leading `.`.
    minor: Option<Range<usize>>,
    /// Without the leading `.`.
    patch: Option<Range<usize>>,
    /// Without the leading `-`.
    pre: Option<Range<usize>>,
    /// Without the leading `+`.
    meta: Option<Range<usize>>,
}

/// The greedy (and longest) match of `v?(SEG+)(\.SEG+)?(\.SEG+)?(-…)?(\+…)?` at `start`.
fn scan_version(s: &[u8], start: usize, seg: fn(u8) -> bool) -> Option<VersionSpan> {
    let mut i = start;
    if s.get(i) == Some(&b'v') {
        i += 1;
    }
    let end = run(s, i, seg);
    if end == i {
        return None;
    }
    let major = i..end;
    i = end;
    let dotted = |i: &mut usize| {
        if s.get(*i) != Some(&b'.') {
            return None;
        }
        let end = run(s, *i + 1, seg);
        if end == *i + 1 {
            return None;
        }
        let r = *i + 1..end;
        *i = end;
        Some(r)
    };
    let minor = dotted(&mut i);
    let patch = if minor.is_some() {
        dotted(&mut i)
    } else {
        None
    };
    let tail = |i: &mut usize, lead: u8| {
        if s.get(*i) != Some(&lead) {
            return None;
        }
        let end = dotted_idents(s, *i + 1)?;
        let r = *i + 1..end;
        *i = end;
        Some(r)
    };
    let pre = tail(&mut i, b'-');
    let meta = tail(&mut i, b'+');
    Some(VersionSpan {
        all: start..i,
        major,
        minor,
        patch,
        pre,
        meta,
    })
}

/// A parsed version (`*semver.Version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    major: u64,
    minor: u64,
    patch: u64,
    pre: String,
    metadata: String,
    original: String,
}

/// `strconv.ParseUint(s, 10, 64)` errors as Masterminds wraps them.
fn parse_segment(s: &str) -> Result<u64, String> {
    s.parse::<u64>().map_err(|_| {
        format!(
            "error parsing version segment: strconv.ParseUint: parsing {}: value out of range",
            go_quote(s)
        )
    })
}

/// `strconv.Quote` for the ASCII digit strings that reach it.
fn go_quote(s: &str) -> String {
    format!("\"{s}\"")
}

const ALLOWED: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789";

fn only_digits(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit())
}

fn validate_prerelease(p: &str) -> Result<(), String> {
    for part in p.split('.') {
        if part.is_empty() {
            return Err("invalid prerelease string".into());
        } else if only_digits(part) {
            if part.len() > 1 && part.starts_with('0') {
                return Err("version segment starts with 0".into());
            }
        } else if !part.chars().all(|c| ALLOWED.contains(c)) {
            return Err("invalid prerelease string".into());
        }
    }
    Ok(())
}

fn validate_metadata(m: &str) -> Result<(), String> {
    for part in m.split('.') {
        if part.is_empty() || !part.chars().all(|c| ALLOWED.contains(c)) {
            return Err("invalid metadata string".into());
        }
    }
    Ok(())
}

impl Version {
    /// `semver.NewVersion` (with `CoerceNewVersion`, the default).
    pub fn parse(v: &str) -> Result<Version, String> {
        let b = v.as_bytes();
        let m = match scan_version(b, 0, |b| b.is_ascii_digit()) {
            Some(m) if m.all.end == b.len() => m,
            _ => return Err("invalid semantic version".into()),
        };
        let group = |r: &Option<Range<usize>>| r.clone().map_or("", |r| &v[r]);
        let major = parse_segment(&v[m.major.clone()])?;
        let minor = match group(&m.minor) {
            "" => 0,
            s => parse_segment(s)?,
        };
        let patch = match group(&m.patch) {
            "" => 0,
            s => parse_segment(s)?,
        };
        let pre = group(&m.pre).to_string();
        let metadata = group(&m.meta).to_string();
        if !pre.is_empty() {
            validate_prerelease(&pre)?;
        }
        if !metadata.is_empty() {
            validate_metadata(&metadata)?;
        }
        Ok(Version {
            major,
            minor,
            patch,
            pre,
            metadata,
            original: v.to_string(),
        })
    }

    /// The major version.
    pub fn major(&self) -> u64 {
        self.major
    }

    /// The minor version.
    pub fn minor(&self) -> u64 {
        self.minor
    }

    /// The patch version.
    pub fn patch(&self) -> u64 {
        self.patch
    }

    /// The prerelease part (without `-`).
    pub fn prerelease(&self) -> &str {
        &self.pre
    }

    /// The build metadata (without `+`).
    pub fn metadata(&self) -> &str {
        &self.metadata
    }

    /// The text that was parsed.
    pub fn original(&self) -> &str {
        &self.original
    }

    /// `Version.Compare`: -1, 0 or 1 (metadata ignored).
    pub fn compare(&self, o: &Version) -> i64 {
        let seg = self
            .major
            .cmp(&o.major)
            .then(self.minor.cmp(&o.minor))
            .then(self.patch.cmp(&o.patch));
        if seg != Ordering::Equal {
            return ord(seg);
        }
        match (self.pre.is_empty(), o.pre.is_empty()) {
            (true, true) => 0,
            (true, false) => 1,
            (false, true) => -1,
            (false, false) => compare_prerelease(&self.pre, &o.pre),
        }
    }

    fn equal(&self, o: &Version) -> bool {
        self.compare(o) == 0
    }
}

fn ord(o: Ordering) -> i64 {
    match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}

fn compare_prerelease(v: &str, o: &str) -> i64 {
    let sp: Vec<&str> = v.split('.').collect();
    let op: Vec<&str> = o.split('.').collect();
    for i in 0..sp.len().max(op.len()) {
        let d = compare_pre_part(
            sp.get(i).copied().unwrap_or(""),
            op.get(i).copied().unwrap_or(""),
        );
        if d != 0 {
            return d;
        }
    }
    0
}

fn compare_pre_part(s: &str, o: &str) -> i64 {
    if s == o {
        return 0;
    }
    if s.is_empty() {
        return -1;
    }
    if o.is_empty() {
        return 1;
    }
    match (s.parse::<u64>(), o.parse::<u64>()) {
        (Err(_), Err(_)) => {
            if s > o {
                1
            } else {
                -1
            }
        }
        // o is not numeric, s is: numbers sort first.
        (Ok(_), Err(_)) => -1,
        (Err(_), Ok(_)) => 1,
        (Ok(si), Ok(oi)) => {
            if si > oi {
                1
            } else {
                -1
            }
        }
    }
}

impl fmt::Display for Version {
    /// `Version.String()`: canonical `MAJOR.MINOR.PATCH[-PRE][+META]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.pre.is_empty() {
            write!(f, "-{}", self.pre)?;
        }
        if !self.metadata.is_empty() {
            write!(f, "+{}", self.metadata)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    TildeOrEqual,
    NotEqual,
    Greater,
    Less,
    GreaterEqual,
    LessEqual,
    Tilde,
    Caret,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "" | "=" => Op::TildeOrEqual,
            "!=" => Op::NotEqual,
            ">" => Op::Greater,
            "<" => Op::Less,
            ">=" | "=>" => Op::GreaterEqual,
            "<=" | "=<" => Op::LessEqual,
            "~" | "~>" => Op::Tilde,
            "^" => Op::Caret,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone)]
struct Constraint {
    con: Version,
    op: Op,
    minor_dirty: bool,
    dirty: bool,
    patch_dirty: bool,
}

/// A parsed constraint set (`*semver.Constraints`).
#[derive(Debug, Clone)]
pub struct Constraints {
    groups: Vec<(Vec<Constraint>, bool)>,
}

fn is_x(s: &str) -> bool {
    matches!(s, "x" | "*" | "X")
}

/// The states of a left-to-right match of `cv` (a DFA: each character has one successor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cv {
    Start,
    V,
    Major,
    Dot1,
    Minor,
    Dot2,
    Patch,
    PreStart,
    Pre,
    PreDot,
    MetaStart,
    Meta,
    MetaDot,
}

const CV_STATES: usize = 13;

impl Cv {
    fn step(self, b: u8) -> Option<Cv> {
        use Cv::*;
        let seg = is_constraint_seg(b);
        let ident = is_ident(b);
        Some(match (self, b) {
            (Start, b'v') => V,
            (Start | V, _) if seg => Major,
            (Major, _) if seg => Major,
            (Minor, _) if seg => Minor,
            (Patch, _) if seg => Patch,
            (Dot1, _) if seg => Minor,
            (Dot2, _) if seg => Patch,
            (Major, b'.') => Dot1,
            (Minor, b'.') => Dot2,
            (Major | Minor | Patch, b'-') => PreStart,
            (Major | Minor | Patch | Pre, b'+') => MetaStart,
            (PreStart | Pre | PreDot, _) if ident => Pre,
            (Pre, b'.') => PreDot,
            (MetaStart | Meta | MetaDot, _) if ident => Meta,
            (Meta, b'.') => MetaDot,
            _ => return None,
        })
    }

    fn accepting(self) -> bool {
        matches!(self, Cv::Major | Cv::Minor | Cv::Patch | Cv::Pre | Cv::Meta)
    }
}

/// One match of the hyphen-range pattern: the whole match and its two versions.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HyphenRange {
    all: Range<usize>,
    low: Range<usize>,
    high: Range<usize>,
}

/// Every match of `\s*(cv)\s+-\s+(cv)\s*`, leftmost first and without overlap, as Go's
/// `FindAllStringSubmatch` returns them. The first version is found in one pass: for every
/// state of `cv` the leftmost start that reaches it is kept, so at each whitespace the
/// leftmost version ending there is known without trying every start.
fn hyphen_ranges(s: &[u8]) -> Vec<HyphenRange> {
    let mut found = Vec::new();
    let mut from = 0;
    let mut starts: [Option<usize>; CV_STATES] = [None; CV_STATES];
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if is_ws(b) {
            let low = starts
                .iter()
                .enumerate()
                .filter_map(|(st, p)| p.filter(|_| CV_ORDER[st].accepting()))
                .min();
            if let Some((p, tail)) = low.zip(hyphen_tail(s, i)) {
                let mut q = p;
                while q > from && is_ws(s[q - 1]) {
                    q -= 1;
                }
                found.push(HyphenRange {
                    all: q..tail.end,
                    low: p..i,
                    high: tail.high,
                });
                from = tail.end;
                i = from;
                starts = [None; CV_STATES];
                continue;
            }
        }
        let mut next: [Option<usize>; CV_STATES] = [None; CV_STATES];
        let mut advance = |state: Cv, p: usize| {
            if let Some(t) = state.step(b) {
                let slot = &mut next[t as usize];
                *slot = Some(slot.map_or(p, |q| q.min(p)));
            }
        };
        for (st, p) in starts.iter().enumerate() {
            if let Some(p) = *p {
                advance(CV_ORDER[st], p);
            }
        }
        advance(Cv::Start, i);
        starts = next;
        i += 1;
    }
    found
}

/// The states in `Cv as usize` order.
const CV_ORDER: [Cv; CV_STATES] = [
    Cv::Start,
    Cv::V,
    Cv::Major,
    Cv::Dot1,
    Cv::Minor,
    Cv::Dot2,
    Cv::Patch,
    Cv::PreStart,
    Cv::Pre,
    Cv::PreDot,
    Cv::MetaStart,
    Cv::Meta,
    Cv::MetaDot,
];

struct HyphenTail {
    high: Range<usize>,
    end: usize,
}

/// `\s+-\s+(cv)\s*` at `i`.
fn hyphen_tail(s: &[u8], i: usize) -> Option<HyphenTail> {
    let dash = skip_ws(s, i);
    if dash == i || s.get(dash) != Some(&b'-') {
        return None;
    }
    let v = skip_ws(s, dash + 1);
    if v == dash + 1 {
        return None;
    }
    let high = scan_version(s, v, is_constraint_seg)?.all;
    Some(HyphenTail {
        end: skip_ws(s, high.end),
        high,
    })
}

/// Masterminds' `rewriteRange`: each `A - B` becomes `>= A, <= B `, replacing the first
/// occurrence of the matched text (which, as there, may be an earlier copy of it).
fn rewrite_range(input: &str) -> Cow<'_, str> {
    let ranges = hyphen_ranges(input.as_bytes());
    if ranges.is_empty() {
        return Cow::Borrowed(input);
    }
    let mut out = input.to_string();
    for r in ranges {
        let t = format!(">= {}, <= {} ", &input[r.low], &input[r.high]);
        out = out.replacen(&input[r.all], &t, 1);
    }
    Cow::Owned(out)
}

/// One `op cv` of an AND group (sub-matches of the `constraint` pattern).
struct Item<'a> {
    op: Op,
    /// The version text as written (`v` and metadata included).
    all: &'a str,
    major: &'a str,
    /// With its leading `.` (empty when absent), as Masterminds' sub-match.
    minor: &'a str,
    patch: &'a str,
    /// With its leading `-`.
    pre: &'a str,
}

/// Splits one `||` alternative into its constraints as the `valid AND` pattern accepts them
/// and `findConstraintRegex` finds them; `None` when the pattern does not match.
fn and_items(group: &str) -> Option<Vec<Item<'_>>> {
    let s = group.as_bytes();
    let mut items = Vec::new();
    let mut i = skip_ws(s, 0);
    loop {
        let op_end = run(s, i, is_op_char);
        let op = Op::parse(&group[i..op_end])?;
        let m = scan_version(s, skip_ws(s, op_end), is_constraint_seg)?;
        let with_lead = |r: &Option<Range<usize>>, lead: usize| {
            r.as_ref().map_or("", |r| &group[r.start - lead..r.end])
        };
        items.push(Item {
            op,
            all: &group[m.all.clone()],
            major: &group[m.major.clone()],
            minor: with_lead(&m.minor, 1),
            patch: with_lead(&m.patch, 1),
            pre: with_lead(&m.pre, 1),
        });
        let after = skip_ws(s, m.all.end);
        if after == s.len() {
            return Some(items);
        }
        if s[after] == b',' {
            i = skip_ws(s, after + 1);
        } else if after > m.all.end {
            i = after;
        } else {
            return None;
        }
    }
}

/// Masterminds' `parseConstraint` from the sub-matches: `x`, `X`, `*` or a missing part
/// makes the constraint "dirty" and zero-fills the version it compares with.
fn parse_constraint(item: &Item<'_>) -> Result<Constraint, String> {
    let (mut minor_dirty, mut patch_dirty, mut dirty) = (false, false, false);
    let minor = item.minor.strip_prefix('.').unwrap_or("");
    let patch = item.patch.strip_prefix('.').unwrap_or("");
    let ver = if is_x(item.major) {
        dirty = true;
        Cow::Owned(format!("0.0.0{}", item.pre))
    } else if is_x(minor) || item.minor.is_empty() {
        minor_dirty = true;
        dirty = true;
        Cow::Owned(format!("{}.0.0{}", item.major, item.pre))
    } else if is_x(patch) || item.patch.is_empty() {
        dirty = true;
        patch_dirty = true;
        Cow::Owned(format!("{}{}.0{}", item.major, item.minor, item.pre))
    } else {
        Cow::Borrowed(item.all)
    };
    let con = Version::parse(&ver).map_err(|_| "constraint parser error".to_string())?;
    Ok(Constraint {
        con,
        op: item.op,
        minor_dirty,
        dirty,
        patch_dirty,
    })
}

impl Constraints {
    /// `semver.NewConstraint`.
    pub fn parse(c: &str) -> Result<Constraints, String> {
        let c = rewrite_range(c);
        let mut groups = Vec::new();
        for or in c.split("||") {
            let items = and_items(or).ok_or_else(|| format!("improper constraint: {or}"))?;
            let mut result = Vec::with_capacity(items.len());
            let mut has_pre = false;
            for item in &items {
                let pc = parse_constraint(item)?;
                if !pc.con.pre.is_empty() {
                    has_pre = true;
                }
                result.push(pc);
            }
            groups.push((result, has_pre));
        }
        Ok(Constraints { groups })
    }

    /// `Constraints.Check`.
    pub fn check(&self, v: &Version) -> bool {
        self.groups
            .iter()
            .any(|(group, pre)| group.iter().all(|c| c.check(v, *pre)))
    }
}

impl Constraint {
    fn check(&self, v: &Version, include_pre: bool) -> bool {
        if !v.pre.is_empty() && !include_pre {
            return false;
        }
        let c = &self.con;
        match self.op {
            Op::NotEqual => {
                if self.dirty {
                    if c.major != v.major {
                        return true;
                    }
                    if c.minor != v.minor && !self.minor_dirty {
                        return true;
                    } else if self.minor_dirty {
                        return false;
                    } else if c.patch != v.patch && !self.patch_dirty {
                        return true;
                    } else if self.patch_dirty {
                        if !v.pre.is_empty() || !c.pre.is_empty() {
                            return compare_prerelease(&v.pre, &c.pre) != 0;
                        }
                        return false;
                    }
                }
                !v.equal(c)
            }
            Op::Greater => {
                if !self.dirty {
                    return v.compare(c) == 1;
                }
                if v.major > c.major {
                    true
                } else if v.major < c.major || self.minor_dirty {
                    false
                } else if self.patch_dirty {
                    v.minor > c.minor
                } else {
                    v.compare(c) == 1
                }
            }
            Op::Less => v.compare(c) < 0,
            Op::GreaterEqual => v.compare(c) >= 0,
            Op::LessEqual => {
                if !self.dirty {
                    return v.compare(c) <= 0;
                }
                !(v.major > c.major
                    || (v.major == c.major && v.minor > c.minor && !self.minor_dirty))
            }
            Op::Tilde => self.tilde(v),
            Op::TildeOrEqual => {
                if self.dirty {
                    self.tilde(v)
                } else {
                    v.equal(c)
                }
            }
            Op::Caret => {
                if v.compare(c) < 0 {
                    return false;
                }
                if c.major > 0 || self.minor_dirty {
                    return v.major == c.major;
                }
                if v.major > 0 {
                    return false;
                }
                if c.minor > 0 || self.patch_dirty {
                    return v.minor == c.minor;
                }
                if v.minor > 0 {
                    return false;
                }
                c.patch == v.patch
            }
        }
    }

    fn tilde(&self, v: &Version) -> bool {
        let c = &self.con;
        if v.compare(c) < 0 {
            return false;
        }
        if c.major == 0 && c.minor == 0 && c.patch == 0 && !self.minor_dirty && !self.patch_dirty {
            return true;
        }
        if v.major != c.major {
            return false;
        }
        v.minor == c.minor || self.minor_dirty
    }
}

/// Sprig's `semverCompare`.
pub fn semver_compare(constraint: &str, version: &str) -> Result<bool, String> {
    let c = Constraints::parse(constraint)?;
    let v = Version::parse(version)?;
    Ok(c.check(&v))
}

/// The Go type name of a version object.
pub const VERSION_TYPE: &str = "*semver.Version";

impl Object for Version {
    fn type_name(&self) -> String {
        VERSION_TYPE.to_string()
    }

    fn method(&self, name: &str) -> Option<Signature> {
        match name {
            "Major" | "Minor" | "Patch" | "Prerelease" | "Metadata" | "Original" | "String" => {
                Some(Signature::fixed([]))
            }
            "Compare" | "LessThan" | "LessThanEqual" | "GreaterThan" | "GreaterThanEqual"
            | "Equal" => Some(Signature::fixed([ArgType::Object(VERSION_TYPE)])),
            _ => None,
        }
    }

    fn call_method(&self, name: &str, args: &[Value]) -> Result<Value, FuncError> {
        let other = || -> Result<Version, FuncError> {
            match args.first() {
                Some(Value::Object(o)) => Version::parse(&o.display())
                    .map(|mut v| {
                        // Re-parse of String() loses Original, which comparisons ignore.
                        v.original.clear();
                        v
                    })
                    .map_err(FuncError::new),
                _ => Err(FuncError::new(
                    "runtime error: invalid memory address or nil pointer dereference",
                )),
            }
        };
        Ok(match name {
            "Major" => Value::Uint64(self.major()),
            "Minor" => Value::Uint64(self.minor()),
            "Patch" => Value::Uint64(self.patch()),
            "Prerelease" => Value::string(self.prerelease()),
            "Metadata" => Value::string(self.metadata()),
            "Original" => Value::string(self.original()),
            "String" => Value::string(self.to_string()),
            "Compare" => Value::Int(self.compare(&other()?)),
            "LessThan" => Value::Bool(self.compare(&other()?) < 0),
            "LessThanEqual" => Value::Bool(self.compare(&other()?) <= 0),
            "GreaterThan" => Value::Bool(self.compare(&other()?) > 0),
            "GreaterThanEqual" => Value::Bool(self.compare(&other()?) >= 0),
            "Equal" => match args.first() {
                Some(Value::Object(_)) => Value::Bool(self.equal(&other()?)),
                _ => Value::Bool(false),
            },
            _ => return Err(FuncError::new(format!("method {name} not implemented"))),
        })
    }

    fn display(&self) -> String {
        self.to_string()
    }

    fn marshal(&self) -> Option<Value> {
        Some(Value::string(self.to_string()))
    }
}

pub(crate) fn register(map: &mut FuncMap) {
    map.insert(
        "semver",
        Function::new(Signature::fixed([ArgType::String]), |args| {
            let s = args[0].as_str().unwrap_or_default();
            let v = Version::parse(s).map_err(FuncError::new)?;
            Ok(Value::Object(Arc::new(v)))
        }),
    );
    map.insert(
        "semverCompare",
        Function::new(
            Signature::fixed([ArgType::String, ArgType::String]),
            |args| {
                let c = args[0].as_str().unwrap_or_default();
                let v = args[1].as_str().unwrap_or_default();
                semver_compare(c, v)
                    .map(Value::Bool)
                    .map_err(FuncError::new)
            },
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constraint_table() {
        let cases: &[(&str, &str, bool)] = &[
            (">=1.21-0", "v1.21.0", true),
            (">=1.21-0", "v1.20.5-eks-1234", false),
            (">=1.21-0", "v1.22.1-gke.100", true),
            (">=1.21.0", "v1.22.1-gke.100", false),
            ("^1.2.3", "1.9.0", true),
            ("^1.2.3", "2.0.0", false),
            ("^0.2.3", "0.2.9", true),
            ("^0.2.3", "0.3.0", false),
            ("^0.0.3", "0.0.4", false),
            ("~1.2.3", "1.2.9", true),
            ("~1.2.3", "1.3.0", false),
            ("1.2.x", "1.2.7", true),
            ("1.2.x", "1.3.0", false),
            ("*", "5.0.0", true),
            ("1.2 - 1.4.5", "1.4.5", true),
            ("1.2 - 1.4.5", "1.4.6", false),
            (">1.0 <2.0 || >=3", "3.1.0", true),
            (">1.0, <2.0", "2.0.0", false),
            ("!=1.2.3", "1.2.3", false),
            ("!=1.2.x", "1.2.3", false),
            ("<=1.2", "1.2.9", true),
            (">1.2", "1.2.9", false),
            (">1.2", "1.3.0", true),
        ];
        for (c, v, want) in cases {
            assert_eq!(semver_compare(c, v), Ok(*want), "{c} vs {v}");
        }
    }

    #[test]
    fn errors() {
        assert_eq!(
            semver_compare(">=1.21-0", "bad"),
            Err("invalid semantic version".into())
        );
        assert_eq!(
            semver_compare("=>>1", "1.0.0"),
            Err("improper constraint: =>>1".into())
        );
        assert_eq!(
            Version::parse("1.2.3-01").map(|v| v.to_string()),
            Err("version segment starts with 0".into())
        );
        assert_eq!(
            Version::parse("v01.02.003").map(|v| v.to_string()),
            Ok("1.2.3".into())
        );
    }

    #[test]
    fn version_edge_cases() {
        let ok = |v: &str, want: &str| {
            assert_eq!(
                Version::parse(v).map(|v| v.to_string()),
                Ok(want.into()),
                "{v}"
            );
        };
        ok("v1.2.3", "1.2.3");
        ok("1", "1.0.0");
        ok("1.2", "1.2.0");
        ok("v2", "2.0.0");
        ok("1.2.3-rc.1+build.5", "1.2.3-rc.1+build.5");
        ok("1.2-rc", "1.2.0-rc");
        ok("1+meta", "1.0.0+meta");
        ok("1.2.3-0", "1.2.3-0");
        ok("1.2.3-0a.01b", "1.2.3-0a.01b");
        ok("1.2.3+007", "1.2.3+007");
        ok("1.2.3----x", "1.2.3----x");
        ok("001.002.003", "1.2.3");
        let err = |v: &str, want: &str| {
            assert_eq!(
                Version::parse(v).map(|v| v.to_string()),
                Err(want.into()),
                "{v}"
            );
        };
        err("", "invalid semantic version");
        err("v", "invalid semantic version");
        err("vv1", "invalid semantic version");
        err("V1.2.3", "invalid semantic version");
        err(" 1.2.3", "invalid semantic version");
        err("1.2.3 ", "invalid semantic version");
        err("1.2.3.4", "invalid semantic version");
        err("1..2", "invalid semantic version");
        err("1.2.3-", "invalid semantic version");
        err("1.2.3-a..b", "invalid semantic version");
        err("1.2.3+", "invalid semantic version");
        err("1.2.3+a.", "invalid semantic version");
        err("1.x", "invalid semantic version");
        err("1.2.3-é", "invalid semantic version");
        err("1.2.3-01", "version segment starts with 0");
        err("1.2.3-rc.00+b", "version segment starts with 0");
        err(
            "18446744073709551616",
            "error parsing version segment: strconv.ParseUint: parsing \"18446744073709551616\": value out of range",
        );
        err(
            "1.99999999999999999999-01",
            "error parsing version segment: strconv.ParseUint: parsing \"99999999999999999999\": value out of range",
        );
        ok("18446744073709551615", "18446744073709551615.0.0");
    }

    #[test]
    fn constraint_edge_cases() {
        let cases: &[(&str, &str, Result<bool, &str>)] = &[
            // operators and their aliases
            ("=1.2.3", "1.2.3", Ok(true)),
            ("=>1.2", "1.2.0", Ok(true)),
            ("=<1.2", "1.2.9", Ok(true)),
            ("~>1.2", "1.2.9", Ok(true)),
            ("~>1.2", "1.3.0", Ok(false)),
            ("~1", "1.9.0", Ok(true)),
            ("~1", "2.0.0", Ok(false)),
            ("^0.0", "0.0.9", Ok(true)),
            ("^0", "0.9.0", Ok(true)),
            ("^0.x", "1.0.0", Ok(false)),
            ("!=1.x", "2.0.0", Ok(true)),
            ("!=1.x", "1.5.0", Ok(false)),
            (">1.x", "2.0.0", Ok(true)),
            (">1.x", "1.9.0", Ok(false)),
            // spaces between operator and version, commas, tabs, v prefixes
            (">= 1.2 , < 2", "1.9.9", Ok(true)),
            ("\t>=v1.2\n<v2\t", "1.9.9", Ok(true)),
            (">=1.2,<2", "2.0.0", Ok(false)),
            ("1.2 1.2.0", "1.2.0", Ok(true)),
            // x-ranges
            ("1.X", "1.4.0", Ok(true)),
            ("1.*.*", "1.4.0", Ok(true)),
            ("X", "9.9.9", Ok(true)),
            ("x.x.x", "0.0.1", Ok(true)),
            ("1.2.*-beta", "1.2.3-beta.2", Ok(true)),
            // OR groups; a prerelease only satisfies a group naming one
            ("1.x || 3.x", "3.1.0", Ok(true)),
            ("1.x||3.x", "2.1.0", Ok(false)),
            ("<2 || >=3.0.0-0", "3.0.0-rc.1", Ok(true)),
            ("<2 || >=3.0.0", "3.1.0-rc.1", Ok(false)),
            // hyphen ranges, also inside a larger constraint
            ("1.2.3 - 2.3.4", "2.3.4", Ok(true)),
            ("1.2.3 - 2.3", "2.3.9", Ok(true)),
            ("1 - 2 || 4 - 5", "4.5.0", Ok(true)),
            (
                ">=0.1 1.2.3 - 2.3.4",
                "2.0.0",
                Err("improper constraint: >=0.1>= 1.2.3, <= 2.3.4 "),
            ),
            (">=0.1, 1.2.3 - 2.3.4", "2.0.0", Ok(true)),
            ("1.2.3\t-\t2", "2.0.0", Ok(true)),
            // metadata is ignored when comparing
            ("1.2.3+a", "1.2.3+b", Ok(true)),
            // errors keep Masterminds' wording
            ("", "1.0.0", Err("improper constraint: ")),
            ("1.2 ||", "1.0.0", Err("improper constraint: ")),
            ("  ", "1.0.0", Err("improper constraint:   ")),
            ("==1", "1.0.0", Err("improper constraint: ==1")),
            ("> =1", "1.0.0", Err("improper constraint: > =1")),
            ("1.2.3.4", "1.0.0", Err("improper constraint: 1.2.3.4")),
            ("1,,2", "1.0.0", Err("improper constraint: 1,,2")),
            ("1,", "1.0.0", Err("improper constraint: 1,")),
            ("v", "1.0.0", Err("improper constraint: v")),
            (
                "1.2.3.4 - 5",
                "1.0.0",
                Err("improper constraint: 1.>= 2.3.4, <= 5 "),
            ),
            ("x1", "1.0.0", Err("constraint parser error")),
            ("1|2", "1.0.0", Err("constraint parser error")),
            ("1.2.3-01", "1.0.0", Err("constraint parser error")),
            (
                "99999999999999999999",
                "1.0.0",
                Err("constraint parser error"),
            ),
            (">=1", "1.2.3.4", Err("invalid semantic version")),
        ];
        for (c, v, want) in cases {
            let got = semver_compare(c, v);
            assert_eq!(got, want.map_err(str::to_string), "{c:?} vs {v:?}");
        }
    }

    #[test]
    fn hyphen_range_matches_are_leftmost_and_disjoint() {
        let texts = |s: &str| -> Vec<(String, String, String)> {
            hyphen_ranges(s.as_bytes())
                .into_iter()
                .map(|r| {
                    (
                        s[r.all].to_string(),
                        s[r.low].to_string(),
                        s[r.high].to_string(),
                    )
                })
                .collect()
        };
        let t = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        assert_eq!(texts("1 - 2"), vec![t("1 - 2", "1", "2")]);
        assert_eq!(texts(" >= 1 - 2 "), vec![t(" 1 - 2 ", "1", "2")]);
        assert_eq!(texts("a.1.2 - 3"), vec![t("1.2 - 3", "1.2", "3")]);
        assert_eq!(texts("1.2.3.4 - 5"), vec![t("2.3.4 - 5", "2.3.4", "5")]);
        assert_eq!(texts("1 - 2 - 3"), vec![t("1 - 2 ", "1", "2")]);
        assert_eq!(
            texts("1 - 2 3 - 4"),
            vec![t("1 - 2 ", "1", "2"), t("3 - 4", "3", "4")]
        );
        assert_eq!(texts("1-2 - 3"), vec![t("1-2 - 3", "1-2", "3")]);
        assert_eq!(texts("1 -2"), vec![]);
        assert_eq!(texts("1 - v"), vec![]);
    }

    /// The scanners against Masterminds' own patterns (compiled here with the `regex` crate,
    /// which has Go's leftmost-first semantics) on generated texts: same acceptance, same
    /// sub-matches, same result.
    mod against_the_patterns {
        use super::*;
        use regex::Regex;

        const WS: &str = r"[\t\n\f\r ]";
        const LOOSE: &str = r"v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?";
        const CV: &str = r"v?([0-9|x|X|\*]+)(\.[0-9|x|X|\*]+)?(\.[0-9|x|X|\*]+)?(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?";
        const OPS: &str = r"=||!=|>|<|>=|=>|<=|=<|~|~>|\^";

        struct Patterns {
            loose: Regex,
            constraint: Regex,
            range: Regex,
            find: Regex,
            valid: Regex,
        }

        fn patterns() -> Patterns {
            let re = |p: String| Regex::new(&p).expect("Masterminds' pattern");
            Patterns {
                loose: re(format!("^{LOOSE}$")),
                constraint: re(format!(r"^{WS}*({OPS}){WS}*({CV}){WS}*$")),
                range: re(format!(r"{WS}*({CV}){WS}+-{WS}+({CV}){WS}*")),
                find: re(format!(r"({OPS}){WS}*({CV})")),
                valid: re(format!(
                    r"^({WS}*({OPS}){WS}*({CV}){WS}*)((?:{WS}+|,{WS}*)({OPS}){WS}*({CV}){WS}*)*$"
                )),
            }
        }

        /// NewVersion's sub-matches through the pattern: (major, minor, patch, pre, meta).
        fn loose_groups(p: &Patterns, v: &str) -> Option<[String; 5]> {
            let m = p.loose.captures(v)?;
            let g = |i: usize| m.get(i).map_or("", |g| g.as_str()).to_string();
            Some([
                g(1),
                g(2).trim_start_matches('.').to_string(),
                g(3).trim_start_matches('.').to_string(),
                g(5),
                g(8),
            ])
        }

        fn scanned_groups(v: &str) -> Option<[String; 5]> {
            let m = scan_version(v.as_bytes(), 0, |b| b.is_ascii_digit())
                .filter(|m| m.all.end == v.len())?;
            let g = |r: &Option<Range<usize>>| r.clone().map_or("", |r| &v[r]).to_string();
            Some([
                v[m.major].to_string(),
                g(&m.minor),
                g(&m.patch),
                g(&m.pre),
                g(&m.meta),
            ])
        }

        /// NewConstraint through the patterns, down to each constraint's sub-matches.
        fn pattern_items(p: &Patterns, c: &str) -> Result<Vec<Vec<[String; 6]>>, String> {
            let mut o = c.to_string();
            for m in p.range.captures_iter(c) {
                let g = |i: usize| m.get(i).map_or("", |g| g.as_str());
                o = o.replacen(g(0), &format!(">= {}, <= {} ", g(1), g(11)), 1);
            }
            let mut groups = Vec::new();
            for or in o.split("||") {
                if !p.valid.is_match(or) {
                    return Err(format!("improper constraint: {or}"));
                }
                let mut items = Vec::new();
                for found in p.find.find_iter(or) {
                    let m = p
                        .constraint
                        .captures(found.as_str())
                        .expect("a found constraint matches the constraint pattern");
                    let g = |i: usize| m.get(i).map_or("", |g| g.as_str()).to_string();
                    items.push([g(1), g(2), g(3), g(4), g(5), g(6)]);
                }
                groups.push(items);
            }
            Ok(groups)
        }

        fn scanned_items(c: &str) -> Result<Vec<Vec<[String; 6]>>, String> {
            let o = rewrite_range(c);
            let mut groups = Vec::new();
            for or in o.split("||") {
                let items = and_items(or).ok_or_else(|| format!("improper constraint: {or}"))?;
                groups.push(
                    items
                        .iter()
                        .map(|it| {
                            let op_text = match it.op {
                                Op::TildeOrEqual => "=",
                                Op::NotEqual => "!=",
                                Op::Greater => ">",
                                Op::Less => "<",
                                Op::GreaterEqual => ">=",
                                Op::LessEqual => "<=",
                                Op::Tilde => "~",
                                Op::Caret => "^",
                            };
                            [
                                op_text.to_string(),
                                it.all.to_string(),
                                it.major.to_string(),
                                it.minor.to_string(),
                                it.patch.to_string(),
                                it.pre.to_string(),
                            ]
                        })
                        .collect(),
                );
            }
            Ok(groups)
        }

        /// The pattern's operator text, by meaning (aliases folded as `constraintOps` does).
        fn fold_op(items: &mut [Vec<[String; 6]>]) {
            for group in items {
                for item in group {
                    let op = match Op::parse(&item[0]).expect("a matched operator") {
                        Op::TildeOrEqual => "=",
                        Op::NotEqual => "!=",
                        Op::Greater => ">",
                        Op::Less => "<",
                        Op::GreaterEqual => ">=",
                        Op::LessEqual => "<=",
                        Op::Tilde => "~",
                        Op::Caret => "^",
                    };
                    item[0] = op.to_string();
                }
            }
        }

        struct Rng(u64);
        impl Rng {
            fn next(&mut self) -> u64 {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                self.0
            }
            fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
                xs[(self.next() % xs.len() as u64) as usize]
            }
        }

        /// Texts made of the pieces semver syntax is made of, glued at random.
        fn generated(n: usize) -> Vec<String> {
            let pieces: &[&str] = &[
                "1",
                "0",
                "01",
                "2",
                "10",
                "99999999999999999999",
                ".",
                ".",
                ".",
                "-",
                "-",
                "+",
                "x",
                "X",
                "*",
                "|",
                "||",
                "v",
                "a",
                "rc",
                "é",
                " ",
                " ",
                "\t",
                ",",
                ", ",
                " - ",
                "=",
                "!=",
                ">",
                "<",
                ">=",
                "=>",
                "<=",
                "=<",
                "~",
                "~>",
                "^",
                "==",
                "1.2.3",
                "v1.2",
                "1.x",
                "-0",
                "+b.1",
                "\u{b}",
            ];
            let mut rng = Rng(0x2545_f491_4f6c_dd1d);
            (0..n)
                .map(|_| {
                    let len = (rng.next() % 9) as usize;
                    (0..len).map(|_| rng.pick(pieces)).collect()
                })
                .collect()
        }

        #[test]
        fn versions_scan_as_the_pattern_matches() {
            let p = patterns();
            for v in generated(40_000) {
                assert_eq!(scanned_groups(&v), loose_groups(&p, &v), "{v:?}");
            }
        }

        #[test]
        fn constraints_split_as_the_patterns_find() {
            let p = patterns();
            for c in generated(40_000) {
                let mut want = pattern_items(&p, &c);
                if let Ok(items) = &mut want {
                    fold_op(items);
                }
                assert_eq!(scanned_items(&c), want, "{c:?}");
            }
        }

        #[test]
        fn hyphen_ranges_are_the_pattern_matches() {
            let p = patterns();
            for c in generated(40_000) {
                let want: Vec<_> = p
                    .range
                    .captures_iter(&c)
                    .map(|m| {
                        let r = |i: usize| m.get(i).map(|g| g.range());
                        (r(0), r(1), r(11))
                    })
                    .collect();
                let got: Vec<_> = hyphen_ranges(c.as_bytes())
                    .into_iter()
                    .map(|h| (Some(h.all), Some(h.low), Some(h.high)))
                    .collect();
                assert_eq!(got, want, "{c:?}");
            }
        }
    }
}
