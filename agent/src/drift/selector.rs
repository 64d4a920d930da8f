//! Ignore-rule targets: `spec.driftDetection.ignore[].target`, a kustomize-style selector.
//!
//! `group`, `version`, `kind`, `name` and `namespace` are regular expressions matched
//! against the whole value (anchored, as Flux anchors them); `labelSelector` and
//! `annotationSelector` are Kubernetes label selector expressions
//! (`app=web,tier!=cache,env in (a,b),!legacy,release`).

use std::collections::BTreeMap;

use flotilla_core::spec::Selector;
use regex::Regex;

/// A compiled selector.
#[derive(Clone, Debug)]
pub struct CompiledSelector {
    group: Option<Regex>,
    version: Option<Regex>,
    kind: Option<Regex>,
    name: Option<Regex>,
    namespace: Option<Regex>,
    labels: Option<LabelSelector>,
    annotations: Option<LabelSelector>,
}

/// What a selector is matched against.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// API group (`""` for the core group).
    pub group: &'a str,
    /// API version.
    pub version: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Name.
    pub name: &'a str,
    /// Namespace (`""` when cluster-scoped).
    pub namespace: &'a str,
    /// Labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Annotations.
    pub annotations: &'a BTreeMap<String, String>,
}

impl CompiledSelector {
    /// Compiles a selector; the error names the field (`kind: invalid regular expression ...`).
    pub fn new(s: &Selector) -> Result<CompiledSelector, String> {
        fn re(field: &str, pattern: &Option<String>) -> Result<Option<Regex>, String> {
            match pattern.as_deref() {
                None | Some("") => Ok(None),
                Some(p) => Regex::new(&format!("^(?:{p})$"))
                    .map(Some)
                    .map_err(|e| format!("{field}: invalid regular expression {p:?}: {e}")),
            }
        }
        fn sel(field: &str, expr: &Option<String>) -> Result<Option<LabelSelector>, String> {
            match expr.as_deref() {
                None | Some("") => Ok(None),
                Some(e) => LabelSelector::parse(e)
                    .map(Some)
                    .map_err(|m| format!("{field}: invalid selector {e:?}: {m}")),
            }
        }
        Ok(CompiledSelector {
            group: re("group", &s.group)?,
            version: re("version", &s.version)?,
            kind: re("kind", &s.kind)?,
            name: re("name", &s.name)?,
            namespace: re("namespace", &s.namespace)?,
            labels: sel("labelSelector", &s.label_selector)?,
            annotations: sel("annotationSelector", &s.annotation_selector)?,
        })
    }

    /// Whether the object matches every field set.
    pub fn matches(&self, t: &Target<'_>) -> bool {
        let re = |r: &Option<Regex>, v: &str| r.as_ref().is_none_or(|r| r.is_match(v));
        re(&self.namespace, t.namespace)
            && re(&self.name, t.name)
            && re(&self.group, t.group)
            && re(&self.version, t.version)
            && re(&self.kind, t.kind)
            && self.labels.as_ref().is_none_or(|s| s.matches(t.labels))
            && self
                .annotations
                .as_ref()
                .is_none_or(|s| s.matches(t.annotations))
    }
}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    DoesNotExist(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed label selector: every requirement must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h,i>1,j<2`.
    pub fn parse(expr: &str) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        if expr.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for part in split_requirements(expr)? {
            let part = part.trim();
            if part.is_empty() {
                return Err("empty requirement".to_owned());
            }
            reqs.push(parse_requirement(part)?);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether a label (or annotation) set satisfies every requirement.
    pub fn matches(&self, set: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => set.contains_key(k),
            Requirement::DoesNotExist(k) => !set.contains_key(k),
            Requirement::In(k, vs) => set.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => set.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::GreaterThan(k, n) => set
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::LessThan(k, n) => set
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        })
    }
}

/// Splits on commas outside parentheses.
fn split_requirements(expr: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in expr.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| "unbalanced \")\"".to_owned())?;
            }
            ',' if depth == 0 => {
                parts.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced \"(\"".to_owned());
    }
    parts.push(&expr[start..]);
    Ok(parts)
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters.
fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: lowercase labels of `[a-z0-9]([-a-z0-9]*[a-z0-9])?` joined by dots,
/// at most 253 characters.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name.
fn check_key(key: &str) -> Result<String, String> {
    let key = key.trim();
    let valid = match key.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(key),
    };
    if valid {
        Ok(key.to_owned())
    } else {
        Err(format!("invalid key {key:?}"))
    }
}

/// A label value: empty, or a name.
fn check_value(value: &str) -> Result<String, String> {
    let value = value.trim();
    if value.is_empty() || is_label_name(value) {
        Ok(value.to_owned())
    } else {
        Err(format!("invalid value {value:?}"))
    }
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesized value list, found {rest:?}"))?;
    inner.split(',').map(check_value).collect()
}

fn parse_requirement(part: &str) -> Result<Requirement, String> {
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(check_key(key)?));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(Requirement::NotIn(check_key(k)?, vec![check_value(v)?]));
    }
    if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Ok(Requirement::In(check_key(k)?, vec![check_value(v)?]));
    }
    for (op, greater) in [('>', true), ('<', false)] {
        if let Some((k, v)) = part.split_once(op) {
            let n: i64 = check_value(v)?
                .parse()
                .map_err(|_| format!("{op} needs an integer, found {:?}", v.trim()))?;
            let k = check_key(k)?;
            return Ok(if greater {
                Requirement::GreaterThan(k, n)
            } else {
                Requirement::LessThan(k, n)
            });
        }
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words[..] {
        let rest = rest.trim_start();
        if let Some(set) = rest.strip_prefix("notin") {
            return Ok(Requirement::NotIn(check_key(key)?, parse_set(set)?));
        }
        if let Some(set) = rest.strip_prefix("in") {
            return Ok(Requirement::In(check_key(key)?, parse_set(set)?));
        }
        return Err(format!("unknown operator in {part:?}"));
    }
    Ok(Requirement::Exists(check_key(part)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn label_selectors_follow_kubernetes_semantics() {
        let labels = set(&[("app", "web"), ("tier", "front"), ("n", "5")]);
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (api, web)", true),
            ("app notin (api,web)", false),
            ("missing notin (x)", true),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier=back", false),
            ("n>4,n<6", true),
            ("n>5", false),
        ];
        for (expr, want) in cases {
            let sel = LabelSelector::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
            assert_eq!(sel.matches(&labels), want, "{expr}");
        }
    }

    #[test]
    fn bad_selectors_say_what_is_wrong() {
        for (expr, want) in [
            ("app in web", "parenthesized"),
            ("a b", "unknown operator"),
            ("app in (a", "unbalanced"),
            ("n>x", "integer"),
            ("=x", "invalid key"),
            ("a,,b", "empty requirement"),
        ] {
            let err = LabelSelector::parse(expr).unwrap_err();
            assert!(err.contains(want), "{expr}: {err}");
        }
    }

    #[test]
    fn regexes_are_anchored_and_errors_name_the_field() {
        let s = CompiledSelector::new(&Selector {
            kind: Some("Deploy".to_owned()),
            ..Selector::default()
        })
        .unwrap();
        let empty = BTreeMap::new();
        let t = |kind| Target {
            group: "apps",
            version: "v1",
            kind,
            name: "web",
            namespace: "default",
            labels: &empty,
            annotations: &empty,
        };
        assert!(
            !s.matches(&t("Deployment")),
            "anchored: Deploy is not Deployment"
        );
        assert!(s.matches(&t("Deploy")));
        let err = CompiledSelector::new(&Selector {
            name: Some("(".to_owned()),
            ..Selector::default()
        })
        .unwrap_err();
        assert!(
            err.starts_with("name: invalid regular expression \"(\""),
            "{err}"
        );
    }
}
