//! Sprig's `semver` and `semverCompare`, on a port of `Masterminds/semver/v3` v3.4.0 (the
//! version Helm v4.1 links): lenient `NewVersion` (optional `v`, missing minor/patch, leading
//! zeros coerced), `NewConstraint` (operators, `x`/`*` wildcards, `~`, `^`, hyphen ranges,
//! comma/space AND, `||` OR) and `Constraints.Check` with its prerelease rule: a prerelease
//! version only satisfies an OR group that itself names a prerelease.

use std::cmp::Ordering;
use std::fmt;
use std::sync::{Arc, LazyLock};

use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Function, Object, Signature, Value};
use regex::Regex;

/// Go's `\s` (ASCII whitespace without `\v`); Rust's `\s` would be Unicode.
const WS: &str = r"[\t\n\f\r ]";

const LOOSE_VERSION: &str = concat!(
    r"v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?",
    r"(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?",
    r"(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
);

const CV: &str = concat!(
    r"v?([0-9|x|X|\*]+)(\.[0-9|x|X|\*]+)?(\.[0-9|x|X|\*]+)?",
    r"(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?",
    r"(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
);

const OPS: &str = r"=||!=|>|<|>=|=>|<=|=<|~|~>|\^";

static LOOSE_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!("^{LOOSE_VERSION}$")).expect("static regex"));
static CONSTRAINT_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(r"^{WS}*({OPS}){WS}*({CV}){WS}*$")).expect("static regex")
});
static RANGE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(r"{WS}*({CV}){WS}+-{WS}+({CV}){WS}*")).expect("static regex")
});
static FIND_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!(r"({OPS}){WS}*({CV})")).expect("static regex"));
static VALID_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"^({WS}*({OPS}){WS}*({CV}){WS}*)((?:{WS}+|,{WS}*)({OPS}){WS}*({CV}){WS}*)*$"
    ))
    .expect("static regex")
});

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
        let Some(m) = LOOSE_RE.captures(v) else {
            return Err("invalid semantic version".into());
        };
        let group = |i: usize| m.get(i).map(|g| g.as_str()).unwrap_or("");
        let major = parse_segment(group(1))?;
        let minor = match group(2) {
            "" => 0,
            s => parse_segment(s.trim_start_matches('.'))?,
        };
        let patch = match group(3) {
            "" => 0,
            s => parse_segment(s.trim_start_matches('.'))?,
        };
        let pre = group(5).to_string();
        let metadata = group(8).to_string();
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

fn rewrite_range(input: &str) -> String {
    let mut out = input.to_string();
    for m in RANGE_RE.captures_iter(input) {
        let (Some(all), Some(a), Some(b)) = (m.get(0), m.get(1), m.get(11)) else {
            continue;
        };
        let t = format!(">= {}, <= {} ", a.as_str(), b.as_str());
        out = out.replacen(all.as_str(), &t, 1);
    }
    out
}

fn parse_constraint(c: &str) -> Result<Constraint, String> {
    if c.is_empty() {
        return Ok(Constraint {
            con: Version::parse("0.0.0").map_err(|_| "constraint parser error".to_string())?,
            op: Op::TildeOrEqual,
            minor_dirty: false,
            dirty: true,
            patch_dirty: false,
        });
    }
    let Some(m) = CONSTRAINT_RE.captures(c) else {
        return Err(format!("improper constraint: {c}"));
    };
    let g = |i: usize| m.get(i).map(|x| x.as_str()).unwrap_or("");
    let (mut minor_dirty, mut patch_dirty, mut dirty) = (false, false, false);
    let ver = if is_x(g(3)) || g(3).is_empty() {
        dirty = true;
        format!("0.0.0{}", g(6))
    } else if is_x(g(4).trim_start_matches('.')) || g(4).is_empty() {
        minor_dirty = true;
        dirty = true;
        format!("{}.0.0{}", g(3), g(6))
    } else if is_x(g(5).trim_start_matches('.')) || g(5).is_empty() {
        dirty = true;
        patch_dirty = true;
        format!("{}{}.0{}", g(3), g(4), g(6))
    } else {
        g(2).to_string()
    };
    let con = Version::parse(&ver).map_err(|_| "constraint parser error".to_string())?;
    Ok(Constraint {
        con,
        op: Op::parse(g(1)).ok_or_else(|| format!("improper constraint: {c}"))?,
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
            if !VALID_RE.is_match(or) {
                return Err(format!("improper constraint: {or}"));
            }
            let mut found: Vec<&str> = FIND_RE.find_iter(or).map(|m| m.as_str()).collect();
            if found.is_empty() {
                found.push(or);
            }
            let mut result = Vec::with_capacity(found.len());
            let mut has_pre = false;
            for s in found {
                let pc = parse_constraint(s)?;
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
}
