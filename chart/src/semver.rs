//! The parts of `Masterminds/semver/v3` Helm relies on: lenient `NewVersion` and constraint
//! checks (`IsCompatibleRange`).

use std::cmp::Ordering;
use std::sync::LazyLock;

use regex::Regex;

/// A parsed version (Masterminds' lenient form: `v` prefix, missing minor/patch allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    major: u64,
    minor: u64,
    patch: u64,
    pre: String,
}

static VERSION_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"^v?(0|[1-9]\d*)(?:\.(0|[1-9]\d*))?(?:\.(0|[1-9]\d*))?",
        r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?",
        r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
    ))
    .expect("static regex")
});

const CV: &str = r"v?([0-9|x|X|\*]+)(\.[0-9|x|X|\*]+)?(\.[0-9|x|X|\*]+)?(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?";
const OPS: &str = r"=||!=|>|<|>=|=>|<=|=<|~|~>|\^";

static CONSTRAINT_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!(r"^\s*({OPS})\s*({CV})\s*$")).expect("static regex"));
static RANGE_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!(r"\s*({CV})\s+-\s+({CV})\s*")).expect("static regex"));
static FIND_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!(r"({OPS})\s*({CV})")).expect("static regex"));
static VALID_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"^(\s*({OPS})\s*({CV})\s*)((?:\s+|,\s*)({OPS})\s*({CV})\s*)*$"
    ))
    .expect("static regex")
});

impl Version {
    /// `semver.NewVersion`.
    pub fn parse(s: &str) -> Option<Version> {
        let c = VERSION_RE.captures(s)?;
        let num = |i: usize| -> Option<u64> {
            match c.get(i) {
                Some(m) => m.as_str().parse().ok(),
                None => Some(0),
            }
        };
        Some(Version {
            major: num(1)?,
            minor: num(2)?,
            patch: num(3)?,
            pre: c.get(4).map(|m| m.as_str().to_owned()).unwrap_or_default(),
        })
    }

    fn compare(&self, o: &Version) -> Ordering {
        self.major
            .cmp(&o.major)
            .then(self.minor.cmp(&o.minor))
            .then(self.patch.cmp(&o.patch))
            .then_with(|| match (self.pre.is_empty(), o.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => compare_pre(&self.pre, &o.pre),
            })
    }
}

fn compare_pre(a: &str, b: &str) -> Ordering {
    let ap: Vec<&str> = a.split('.').collect();
    let bp: Vec<&str> = b.split('.').collect();
    for i in 0..ap.len().max(bp.len()) {
        let s = ap.get(i).copied().unwrap_or("");
        let o = bp.get(i).copied().unwrap_or("");
        let d = compare_pre_part(s, o);
        if d != Ordering::Equal {
            return d;
        }
    }
    Ordering::Equal
}

fn compare_pre_part(s: &str, o: &str) -> Ordering {
    if s == o {
        return Ordering::Equal;
    }
    if s.is_empty() {
        return Ordering::Less;
    }
    if o.is_empty() {
        return Ordering::Greater;
    }
    match (s.parse::<u64>(), o.parse::<u64>()) {
        (Err(_), Err(_)) => {
            if s > o {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
        (Ok(_), Err(_)) => Ordering::Less,
        (Err(_), Ok(_)) => Ordering::Greater,
        (Ok(a), Ok(b)) => {
            if a > b {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Constraint {
    con: Version,
    op: String,
    minor_dirty: bool,
    patch_dirty: bool,
    dirty: bool,
}

/// A parsed constraint (`||` of `,`/space-separated ands).
#[derive(Debug, Clone)]
pub struct Constraints {
    ors: Vec<Vec<Constraint>>,
    has_pre: Vec<bool>,
}

fn is_x(s: &str) -> bool {
    matches!(s, "x" | "X" | "*")
}

fn parse_constraint(s: &str) -> Option<Constraint> {
    if s.is_empty() {
        return Some(Constraint {
            con: Version::parse("0.0.0")?,
            op: String::new(),
            minor_dirty: false,
            patch_dirty: false,
            dirty: true,
        });
    }
    let m = CONSTRAINT_RE.captures(s)?;
    let g = |i: usize| m.get(i).map_or("", |x| x.as_str());
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
        g(2).to_owned()
    };
    Some(Constraint {
        con: Version::parse(&ver)?,
        op: g(1).to_owned(),
        minor_dirty,
        patch_dirty,
        dirty,
    })
}

fn rewrite_range(s: &str) -> String {
    let mut out = s.to_owned();
    for c in RANGE_RE.captures_iter(s) {
        let whole = c.get(0).map_or("", |m| m.as_str());
        let a = c.get(1).map_or("", |m| m.as_str());
        let b = c.get(11).map_or("", |m| m.as_str());
        out = out.replacen(whole, &format!(">= {a}, <= {b} "), 1);
    }
    out
}

impl Constraints {
    /// `semver.NewConstraint`.
    pub fn parse(s: &str) -> Option<Constraints> {
        let s = rewrite_range(s);
        let mut ors = Vec::new();
        let mut has_pre = Vec::new();
        for part in s.split("||") {
            if !VALID_RE.is_match(part) {
                return None;
            }
            let mut found: Vec<&str> = FIND_RE.find_iter(part).map(|m| m.as_str()).collect();
            if found.is_empty() {
                found.push(part);
            }
            let mut group = Vec::new();
            let mut pre = false;
            for f in found {
                let c = parse_constraint(f)?;
                pre |= !c.con.pre.is_empty();
                group.push(c);
            }
            ors.push(group);
            has_pre.push(pre);
        }
        Some(Constraints { ors, has_pre })
    }

    /// `Constraints.Check`.
    pub fn check(&self, v: &Version) -> bool {
        self.ors
            .iter()
            .zip(&self.has_pre)
            .any(|(group, pre)| group.iter().all(|c| c.check(v, *pre)))
    }
}

impl Constraint {
    fn check(&self, v: &Version, include_pre: bool) -> bool {
        if !v.pre.is_empty() && !include_pre {
            return false;
        }
        let c = &self.con;
        match self.op.as_str() {
            "" | "=" => {
                if self.dirty {
                    self.tilde(v)
                } else {
                    v.compare(c) == Ordering::Equal
                }
            }
            "!=" => {
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
                            return compare_pre(&v.pre, &c.pre) != Ordering::Equal;
                        }
                        return false;
                    }
                }
                v.compare(c) != Ordering::Equal
            }
            ">" => {
                if !self.dirty {
                    return v.compare(c) == Ordering::Greater;
                }
                if v.major > c.major {
                    true
                } else if v.major < c.major || self.minor_dirty {
                    false
                } else if self.patch_dirty {
                    v.minor > c.minor
                } else {
                    v.compare(c) == Ordering::Greater
                }
            }
            "<" => v.compare(c) == Ordering::Less,
            ">=" | "=>" => v.compare(c) != Ordering::Less,
            "<=" | "=<" => {
                if !self.dirty {
                    return v.compare(c) != Ordering::Greater;
                }
                !(v.major > c.major || v.major == c.major && v.minor > c.minor && !self.minor_dirty)
            }
            "~" | "~>" => self.tilde(v),
            "^" => {
                if v.compare(c) == Ordering::Less {
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
            _ => false,
        }
    }

    fn tilde(&self, v: &Version) -> bool {
        let c = &self.con;
        if v.compare(c) == Ordering::Less {
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

/// Helm's `IsCompatibleRange(constraint, version)`.
pub fn is_compatible_range(constraint: &str, version: &str) -> bool {
    match (Constraints::parse(constraint), Version::parse(version)) {
        (Some(c), Some(v)) => c.check(&v),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_leniently() {
        assert!(Version::parse("1.2").is_some());
        assert!(Version::parse("v1.2.3-rc.1+b").is_some());
        assert!(Version::parse("01.2.3").is_none());
        assert!(Version::parse("1.2.3.4").is_none());
        assert!(Version::parse("").is_none());
    }

    #[test]
    fn constraints_match_masterminds() {
        let cases = [
            ("~1.2.3", "1.2.9", true),
            ("~1.2.3", "1.3.0", false),
            ("^1.2.3", "1.9.0", true),
            ("^1.2.3", "2.0.0", false),
            ("^0.2.3", "0.2.9", true),
            ("^0.2.3", "0.3.0", false),
            (">=1.0.0 <2.0.0", "1.5.0", true),
            (">=1.0.0, <2.0.0", "2.0.0", false),
            ("1.x", "1.9.9", true),
            ("1.x", "2.0.0", false),
            ("*", "3.4.5", true),
            ("", "3.4.5", false),
            ("1.2.3 - 1.4.5", "1.4.5", true),
            ("1.2.3 - 1.4.5", "1.4.6", false),
            ("<1 || >=3", "3.1.0", true),
            ("<1 || >=3", "2.0.0", false),
            ("1.0.0", "1.0.0", true),
            (">=1.0.0", "1.1.0-rc.1", false),
            (">=1.0.0-0", "1.1.0-rc.1", true),
            ("2.31.x", "2.31.4", true),
            ("garbage", "1.0.0", false),
        ];
        for (c, v, want) in cases {
            assert_eq!(is_compatible_range(c, v), want, "{c} {v}");
        }
    }
}
