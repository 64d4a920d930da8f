//! Kubernetes label selectors (`metav1.LabelSelector`): `matchLabels` and
//! `matchExpressions`, validated as the API server validates them and matched as
//! `metav1.LabelSelectorAsSelector` matches them.
//!
//! This is the structured form (the one objects carry in their spec). The text form
//! (`a=b,c in (x)`) that kustomize targets use is parsed where it is used (the chart's
//! post-renderers, the agent's drift-ignore rules).
//!
//! Semantics, as Kubernetes defines them:
//! - every `matchLabels` pair and every expression must hold (AND);
//! - an empty selector (`{}`) matches every set of labels; "no selector" is the caller's
//!   `Option::None` and matches nothing;
//! - `In` holds when the key is present with one of the values; `NotIn` when the key is
//!   absent or its value is none of them; `Exists` / `DoesNotExist` on the key alone;
//! - `In` and `NotIn` need at least one value, `Exists` and `DoesNotExist` none.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Why a selector was refused. The message names the field, relative to the selector
/// (`matchExpressions[1].values`); the caller prefixes the selector's own path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A label key is not a qualified name.
    #[error(
        "{field}: invalid label key {key:?}: a qualified name is an optional DNS subdomain prefix and '/', then at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
    )]
    Key {
        /// Where the key is.
        field: String,
        /// The key.
        key: String,
    },
    /// A label value is not valid.
    #[error(
        "{field}: invalid label value {value:?}: must be 63 characters or less, and consist of alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
    )]
    Value {
        /// Where the value is.
        field: String,
        /// The value.
        value: String,
    },
    /// `In`/`NotIn` without values, or `Exists`/`DoesNotExist` with values.
    #[error("{field}: {message}")]
    Values {
        /// Where the values are.
        field: String,
        /// What is wrong.
        message: &'static str,
    },
}

/// The operator of a [`LabelSelectorRequirement`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum LabelSelectorOperator {
    /// The key is present with one of the values.
    In,
    /// The key is absent, or present with none of the values.
    NotIn,
    /// The key is present.
    Exists,
    /// The key is absent.
    DoesNotExist,
}

/// One expression of a label selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// The label key the expression applies to.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 317)))]
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: LabelSelectorOperator,
    /// Values for `In` and `NotIn` (at least one); empty for `Exists` and `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A label selector: `matchLabels` and `matchExpressions`, all of which must hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must be present with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Expressions that must all hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

impl LabelSelector {
    /// A selector of `matchLabels` only.
    pub fn labels<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> LabelSelector {
        LabelSelector {
            match_labels: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            match_expressions: Vec::new(),
        }
    }

    /// True for `{}`, which matches everything.
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Checks keys, values and operators as the API server does
    /// (`ValidateLabelSelector`); the first error is returned.
    pub fn validate(&self) -> Result<(), SelectorError> {
        for (k, v) in &self.match_labels {
            check_key(&format!("matchLabels[{k:?}]"), k)?;
            check_value(&format!("matchLabels[{k:?}]"), v)?;
        }
        for (i, r) in self.match_expressions.iter().enumerate() {
            let field = format!("matchExpressions[{i}]");
            check_key(&format!("{field}.key"), &r.key)?;
            match r.operator {
                LabelSelectorOperator::In | LabelSelectorOperator::NotIn => {
                    if r.values.is_empty() {
                        return Err(SelectorError::Values {
                            field: format!("{field}.values"),
                            message: "must be specified when `operator` is 'In' or 'NotIn'",
                        });
                    }
                }
                LabelSelectorOperator::Exists | LabelSelectorOperator::DoesNotExist => {
                    if !r.values.is_empty() {
                        return Err(SelectorError::Values {
                            field: format!("{field}.values"),
                            message: "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                        });
                    }
                }
            }
            for (j, v) in r.values.iter().enumerate() {
                check_value(&format!("{field}.values[{j}]"), v)?;
            }
        }
        Ok(())
    }

    /// Whether `labels` satisfy the selector. An invalid selector is matched literally;
    /// call [`LabelSelector::validate`] first to refuse it.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

impl LabelSelectorRequirement {
    /// Whether `labels` satisfy this expression.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            LabelSelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            LabelSelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            LabelSelectorOperator::Exists => value.is_some(),
            LabelSelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

fn name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn check_key(field: &str, key: &str) -> Result<(), SelectorError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok =
        prefix.is_none_or(|p| crate::ids::check_dns1123_subdomain("label key prefix", p).is_ok());
    if prefix_ok && name_part_ok(name) {
        Ok(())
    } else {
        Err(SelectorError::Key {
            field: field.to_owned(),
            key: key.to_owned(),
        })
    }
}

fn check_value(field: &str, value: &str) -> Result<(), SelectorError> {
    if value.is_empty() || name_part_ok(value) {
        Ok(())
    } else {
        Err(SelectorError::Value {
            field: field.to_owned(),
            value: value.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LabelSelectorOperator::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, operator: LabelSelectorOperator, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![LabelSelectorRequirement {
                key: key.into(),
                operator,
                values: values.iter().map(|v| (*v).to_owned()).collect(),
            }],
        }
    }

    #[test]
    fn each_operator_matches_as_kubernetes_defines_it() {
        let eu = labels(&[("region", "eu"), ("tier", "prod")]);
        let bare = labels(&[]);
        let cases = [
            (expr("region", In, &["eu", "us"]), true, false),
            (expr("region", In, &["us"]), false, false),
            (expr("region", NotIn, &["us"]), true, true),
            (expr("region", NotIn, &["eu"]), false, true),
            (expr("region", Exists, &[]), true, false),
            (expr("region", DoesNotExist, &[]), false, true),
            (LabelSelector::labels([("tier", "prod")]), true, false),
            (LabelSelector::labels([("tier", "dev")]), false, false),
            (LabelSelector::default(), true, true),
        ];
        for (selector, on_eu, on_bare) in cases {
            assert_eq!(selector.matches(&eu), on_eu, "{selector:?} on eu");
            assert_eq!(
                selector.matches(&bare),
                on_bare,
                "{selector:?} on no labels"
            );
        }
    }

    #[test]
    fn labels_and_expressions_must_all_hold() {
        let mut s = LabelSelector::labels([("tier", "prod")]);
        s.match_expressions = expr("region", In, &["eu"]).match_expressions;
        assert!(s.matches(&labels(&[("tier", "prod"), ("region", "eu")])));
        assert!(!s.matches(&labels(&[("tier", "prod"), ("region", "us")])));
        assert!(!s.matches(&labels(&[("region", "eu")])));
    }

    #[test]
    fn invalid_selectors_are_refused_naming_the_field() {
        let cases = [
            (
                expr("region", In, &[]),
                "matchExpressions[0].values: must be specified",
            ),
            (
                expr("region", Exists, &["x"]),
                "matchExpressions[0].values: may not",
            ),
            (
                expr("-bad", Exists, &[]),
                "matchExpressions[0].key: invalid label key \"-bad\"",
            ),
            (
                expr("Ex.com/x", Exists, &[]),
                "invalid label key \"Ex.com/x\"",
            ),
            (
                expr("a", In, &["b c"]),
                "matchExpressions[0].values[0]: invalid label value",
            ),
            (
                LabelSelector::labels([("a", "x".repeat(64))]),
                "matchLabels[\"a\"]: invalid label value",
            ),
        ];
        for (selector, want) in cases {
            let err = selector.validate().unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
        for ok in [
            expr("example.com/ring", In, &["canary", ""]),
            expr("a_b.c", DoesNotExist, &[]),
            LabelSelector::labels([("kubernetes.io/os", "linux")]),
        ] {
            ok.validate().unwrap();
        }
    }

    #[test]
    fn a_selector_reads_and_writes_kubernetes_json() {
        let json = serde_json::json!({
            "matchLabels": {"tier": "prod"},
            "matchExpressions": [{"key": "ring", "operator": "NotIn", "values": ["canary"]}],
        });
        let s: LabelSelector = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(s.match_expressions[0].operator, NotIn);
        assert_eq!(serde_json::to_value(&s).unwrap(), json);
        let err = serde_json::from_value::<LabelSelector>(serde_json::json!({
            "matchExpressions": [{"key": "a", "operator": "Has"}],
        }))
        .unwrap_err();
        assert!(err.to_string().contains("unknown variant `Has`"), "{err}");
    }
}
