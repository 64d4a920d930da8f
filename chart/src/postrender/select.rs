//! Target selection as kustomize does it: group, version, kind, name and namespace are
//! regular expressions anchored at both ends (an empty one matches everything); the name and
//! namespace match either the object's original or current value, and a namespaced object
//! without a namespace is in `default`; label and annotation selectors use the Kubernetes
//! label selector syntax (`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`,
//! `a>1`, `a<1`, joined by commas).

use flotilla_yaml::Value;
use regex::Regex;

use super::{Resource, Selector, effective_namespace, split_api_version};

/// A compiled [`Selector`].
#[derive(Debug)]
pub(super) struct Compiled {
    group: Option<Regex>,
    version: Option<Regex>,
    kind: Option<Regex>,
    name: Option<Regex>,
    namespace: Option<Regex>,
    labels: Vec<Requirement>,
    annotations: Vec<Requirement>,
}

fn anchored(field: &str, pattern: &str) -> Result<Option<Regex>, String> {
    if pattern.is_empty() {
        return Ok(None);
    }
    Regex::new(&format!("^(?:{pattern})$"))
        .map(Some)
        .map_err(|e| format!("target.{field} {pattern:?} is not a valid regular expression: {e}"))
}

impl Compiled {
    pub(super) fn new(s: &Selector) -> Result<Self, String> {
        Ok(Compiled {
            group: anchored("group", &s.group)?,
            version: anchored("version", &s.version)?,
            kind: anchored("kind", &s.kind)?,
            name: anchored("name", &s.name)?,
            namespace: anchored("namespace", &s.namespace)?,
            labels: parse_selector(&s.label_selector)
                .map_err(|e| format!("target.labelSelector {:?}: {e}", s.label_selector))?,
            annotations: parse_selector(&s.annotation_selector).map_err(|e| {
                format!("target.annotationSelector {:?}: {e}", s.annotation_selector)
            })?,
        })
    }

    pub(super) fn matches(&self, r: &Resource) -> bool {
        let (api_version, kind) = (r.api_version(), r.kind());
        if let Some(re) = &self.namespace {
            let original = effective_namespace(api_version, kind, &r.original_namespace);
            let current = effective_namespace(api_version, kind, r.namespace());
            if !re.is_match(original) && !re.is_match(current) {
                return false;
            }
        }
        if let Some(re) = &self.name
            && !re.is_match(&r.original_name)
            && !re.is_match(r.name())
        {
            return false;
        }
        let (group, version) = split_api_version(api_version);
        for (re, value) in [
            (&self.group, group),
            (&self.version, version),
            (&self.kind, kind),
        ] {
            if let Some(re) = re
                && !re.is_match(value)
            {
                return false;
            }
        }
        let meta = r.object.get_str("metadata").and_then(Value::as_map);
        let labels = meta.and_then(|m| m.get_str("labels"));
        let annotations = meta.and_then(|m| m.get_str("annotations"));
        self.labels.iter().all(|q| q.matches(labels))
            && self.annotations.iter().all(|q| q.matches(annotations))
    }
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Gt(String, i64),
    Lt(String, i64),
}

impl Requirement {
    fn matches(&self, set: Option<&Value>) -> bool {
        let get = |k: &str| -> Option<String> {
            set.and_then(Value::as_map)
                .and_then(|m| m.get_str(k))
                .map(super::scalar_text)
        };
        match self {
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::In(k, vals) => get(k).is_some_and(|v| vals.contains(&v)),
            Requirement::NotIn(k, vals) => get(k).is_none_or(|v| !vals.contains(&v)),
            Requirement::Gt(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::Lt(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

fn valid_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix
        && (p.is_empty()
            || p.len() > 253
            || !p
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'))
    {
        return Err(format!(
            "invalid label key {k:?}: the prefix must be a DNS subdomain"
        ));
    }
    if name.is_empty() || name.len() > 63 || !valid_value_chars(name) {
        return Err(format!(
            "invalid label key {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

fn valid_value_chars(v: &str) -> bool {
    let b = v.as_bytes();
    b.iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

fn valid_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    if v.len() > 63 || !valid_value_chars(v) {
        return Err(format!(
            "invalid label value {v:?}: must be 63 characters or less, and consist of alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
        ));
    }
    Ok(())
}

/// Splits on commas that are not inside parentheses.
fn split_requirements(s: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| "unbalanced ')'".to_owned())?;
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    out.push(&s[start..]);
    Ok(out)
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised list of values, found {rest:?}"))?;
    let mut vals = Vec::new();
    for v in inner.split(',') {
        let v = v.trim();
        valid_value(v)?;
        vals.push(v.to_owned());
    }
    Ok(vals)
}

fn is_word(s: &str, word: &str) -> Option<usize> {
    // `key in (..)`: the operator word must be surrounded by spaces or followed by '('.
    let mut from = 0;
    while let Some(pos) = s[from..].find(word) {
        let at = from + pos;
        let before = s[..at].chars().last();
        let after = s[at + word.len()..].chars().next();
        if before.is_some_and(char::is_whitespace)
            && after.is_some_and(|c| c.is_whitespace() || c == '(')
        {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// Parses a Kubernetes label selector; an empty one has no requirements.
fn parse_selector(s: &str) -> Result<Vec<Requirement>, String> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for part in split_requirements(s)? {
        let part = part.trim();
        if part.is_empty() {
            return Err("found an empty requirement".into());
        }
        let req = if let Some(at) = is_word(part, "notin") {
            let key = part[..at].trim();
            valid_key(key)?;
            Requirement::NotIn(key.to_owned(), parse_set(&part[at + 5..])?)
        } else if let Some(at) = is_word(part, "in") {
            let key = part[..at].trim();
            valid_key(key)?;
            Requirement::In(key.to_owned(), parse_set(&part[at + 2..])?)
        } else if let Some((k, v)) = part.split_once("!=") {
            let (k, v) = (k.trim(), v.trim());
            valid_key(k)?;
            valid_value(v)?;
            Requirement::NotIn(k.to_owned(), vec![v.to_owned()])
        } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            let (k, v) = (k.trim(), v.trim());
            valid_key(k)?;
            valid_value(v)?;
            Requirement::In(k.to_owned(), vec![v.to_owned()])
        } else if let Some((k, v)) = part.split_once('>') {
            let k = k.trim();
            valid_key(k)?;
            let n = v.trim().parse().map_err(|_| {
                format!("for 'Gt', 'Lt' operators, the value must be an integer: {part:?}")
            })?;
            Requirement::Gt(k.to_owned(), n)
        } else if let Some((k, v)) = part.split_once('<') {
            let k = k.trim();
            valid_key(k)?;
            let n = v.trim().parse().map_err(|_| {
                format!("for 'Gt', 'Lt' operators, the value must be an integer: {part:?}")
            })?;
            Requirement::Lt(k.to_owned(), n)
        } else if let Some(k) = part.strip_prefix('!') {
            let k = k.trim();
            valid_key(k)?;
            Requirement::NotExists(k.to_owned())
        } else {
            if part.contains(char::is_whitespace) {
                return Err(format!("unexpected text in requirement {part:?}"));
            }
            valid_key(part)?;
            Requirement::Exists(part.to_owned())
        };
        out.push(req);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Value {
        Value::Map(
            pairs
                .iter()
                .map(|(k, v)| (Value::String((*k).into()), Value::String((*v).into())))
                .collect(),
        )
    }

    fn sel(s: &str, set: &Value) -> bool {
        parse_selector(s)
            .expect("valid selector")
            .iter()
            .all(|q| q.matches(Some(set)))
    }

    #[test]
    fn label_selector_operators() {
        let set = labels(&[("app", "web"), ("tier", "front"), ("n", "5")]);
        assert!(sel("app=web", &set));
        assert!(sel("app==web,tier", &set));
        assert!(sel("app != db", &set));
        assert!(sel("missing!=x", &set));
        assert!(sel("app in (web, api),!missing", &set));
        assert!(sel("tier notin (back)", &set));
        assert!(sel("missing notin (back)", &set));
        assert!(sel("n>4,n<6", &set));
        assert!(!sel("app=db", &set));
        assert!(!sel("app in (db)", &set));
        assert!(!sel("!app", &set));
        assert!(!sel("n>5", &set));
        assert!(sel("", &set));
    }

    #[test]
    fn bad_label_selectors_are_errors() {
        assert!(parse_selector("app in web").is_err());
        assert!(parse_selector("app=(x").is_err());
        assert!(parse_selector("a b").is_err());
        assert!(parse_selector("n>x").is_err());
        assert!(parse_selector("app=web,").is_err());
    }
}
