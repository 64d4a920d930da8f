//! Flux's observation of a Helm release, whose digest is `status.history[].digest`.
//!
//! The observation carries the release's name, version, info, chart metadata, user
//! values, manifest, hooks (without test hooks, so that running `helm test` by hand does
//! not change it), namespace and the chart's OCI digest. Its digest is the SHA-256 of Go's
//! `encoding/json` output, which this module reproduces: field order, omitted empty
//! fields, `null` for absent values and hooks, times in Go's RFC 3339 form, and Go's
//! escaping and number format ([`crate::digest::go_json`]).
//!
//! The types decode from the JSON of a Helm release record (`info`, `chart.metadata`,
//! `config`, `hooks` as Helm stores them), so the agent can build an observation from the
//! record it read from storage.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::digest::{self, Digest, SortedValue};

/// Helm's hook event of test hooks.
pub const HOOK_EVENT_TEST: &str = "test";

/// An observation of one release version.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observation {
    /// Release name.
    pub name: String,
    /// Release version.
    pub version: u32,
    /// Release info.
    #[serde(default)]
    pub info: ReleaseInfo,
    /// Chart metadata (`Chart.yaml`).
    #[serde(default)]
    pub chart_metadata: ChartMetadata,
    /// User-supplied values; `None` is written as `null`.
    #[serde(default, serialize_with = "sorted_option")]
    pub config: Option<Value>,
    /// Rendered manifest.
    #[serde(default)]
    pub manifest: String,
    /// Hooks; `None` is written as `null`.
    #[serde(default)]
    pub hooks: Option<Vec<Hook>>,
    /// Release namespace.
    #[serde(default)]
    pub namespace: String,
    /// OCI artifact digest of the chart.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub oci_digest: String,
}

fn sorted_option<S: Serializer>(v: &Option<Value>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        None => s.serialize_none(),
        Some(v) => SortedValue(v).serialize(s),
    }
}

impl Observation {
    /// Applies Flux's `ObserveRelease` rules: empty values become `null`, and test hooks
    /// are dropped (no hooks left is `null`).
    pub fn observed(mut self) -> Self {
        if matches!(&self.config, Some(Value::Object(m)) if m.is_empty())
            || matches!(self.config, Some(Value::Null))
        {
            self.config = None;
        }
        self.hooks = self.hooks.and_then(|hooks| {
            let kept: Vec<Hook> = hooks
                .into_iter()
                .filter(|h| !h.events.iter().any(|e| e == HOOK_EVENT_TEST))
                .collect();
            (!kept.is_empty()).then_some(kept)
        });
        self
    }

    /// The SHA-256 digest of the observation's Go JSON encoding.
    pub fn digest(&self) -> Digest {
        digest::go_json_digest(self).expect("an observation always serializes")
    }
}

/// Helm's release `Info`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ReleaseInfo {
    /// First deployed (RFC 3339).
    #[serde(default, with = "go_time", skip_serializing_if = "Option::is_none")]
    pub first_deployed: Option<String>,
    /// Last deployed (RFC 3339).
    #[serde(default, with = "go_time", skip_serializing_if = "Option::is_none")]
    pub last_deployed: Option<String>,
    /// Deleted (RFC 3339).
    #[serde(default, with = "go_time", skip_serializing_if = "Option::is_none")]
    pub deleted: Option<String>,
    /// Description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Status (Helm string).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// Notes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
    /// Resources (status display only; normally absent).
    #[serde(
        default,
        serialize_with = "sorted_option",
        skip_serializing_if = "Option::is_none"
    )]
    pub resources: Option<Value>,
}

/// A Helm hook.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Hook {
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Template path.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// Manifest.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub manifest: String,
    /// Events (`pre-install`, `test`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// Last run.
    #[serde(default)]
    pub last_run: HookExecution,
    /// Weight.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub weight: i64,
    /// Delete policies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete_policies: Vec<String>,
    /// Output log policies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_log_policies: Vec<String>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// The last run of a hook.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HookExecution {
    /// Start.
    #[serde(default, with = "go_time", skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Completion.
    #[serde(default, with = "go_time", skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// Phase (`Unknown`, `Running`, `Succeeded`, `Failed`, or empty).
    #[serde(default)]
    pub phase: String,
}

/// Helm chart v2 `Metadata`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChartMetadata {
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Home page.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub home: String,
    /// Source URLs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// Version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Description.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Keywords.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keywords: Vec<String>,
    /// Maintainers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maintainers: Vec<Maintainer>,
    /// Icon URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub icon: String,
    /// Chart API version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// Condition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub condition: String,
    /// Tags.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tags: String,
    /// App version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub app_version: String,
    /// Deprecated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deprecated: bool,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Kubernetes version constraint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kube_version: String,
    /// Dependencies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<Dependency>,
    /// Chart type.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
}

/// A chart maintainer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Maintainer {
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Email.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub email: String,
    /// URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
}

/// A chart dependency.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Dependency {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Version constraint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Repository URL (always written).
    #[serde(default)]
    pub repository: String,
    /// Condition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub condition: String,
    /// Tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Enabled.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enabled: bool,
    /// Import values.
    #[serde(
        default,
        rename = "import-values",
        serialize_with = "sorted_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub import_values: Vec<Value>,
    /// Alias.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub alias: String,
}

fn sorted_list<S: Serializer>(v: &[Value], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(v.len()))?;
    for item in v {
        seq.serialize_element(&SortedValue(item))?;
    }
    seq.end()
}

/// Go's `time.Time` JSON form (RFC 3339 with nanoseconds, trailing zeros trimmed, `Z` for
/// a zero offset); empty strings decode as absent, as Helm's decoder treats them.
pub mod go_time {
    use super::*;

    /// Normalizes an RFC 3339 timestamp to the form Go writes it in.
    pub fn normalize(ts: &str) -> String {
        let (main, offset) = match ts
            .char_indices()
            .skip(19)
            .find(|(_, c)| matches!(c, 'Z' | 'z' | '+' | '-'))
        {
            Some((i, _)) => ts.split_at(i),
            None => (ts, ""),
        };
        let main = match main.split_once('.') {
            Some((whole, frac)) => {
                let frac = frac.trim_end_matches('0');
                if frac.is_empty() {
                    whole.to_owned()
                } else {
                    format!("{whole}.{frac}")
                }
            }
            None => main.to_owned(),
        };
        let offset = match offset {
            "z" | "Z" | "+00:00" | "-00:00" => "Z",
            o => o,
        };
        let main = main.replacen('t', "T", 1);
        format!("{main}{offset}")
    }

    /// Serializes a normalized timestamp.
    pub fn serialize<S: Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(t) => s.serialize_str(&normalize(t)),
            None => s.serialize_none(),
        }
    }

    /// Deserializes a timestamp, `""` and `null` as absent.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Out {
        json: String,
        digest: String,
    }

    /// Inputs and the JSON and digest Go's `encoding/json` produced for them when decoded
    /// into Helm v4.2.1's `Info`, `chart.Metadata` and `Hook` types in Flux's observation
    /// field order.
    #[test]
    fn observation_digests_match_go() {
        let inputs: Vec<Observation> =
            serde_json::from_str(include_str!("../tests/data/go_observation_inputs.json")).unwrap();
        let outputs: Vec<Out> =
            serde_json::from_str(include_str!("../tests/data/go_observation_digests.json"))
                .unwrap();
        assert_eq!(inputs.len(), outputs.len());
        for (i, (obs, out)) in inputs.iter().zip(&outputs).enumerate() {
            let ours = String::from_utf8(digest::go_json(obs).unwrap()).unwrap();
            assert_eq!(ours, out.json, "observation {i}");
            assert_eq!(obs.digest().to_string(), out.digest, "observation {i}");
        }
    }

    #[test]
    fn observing_drops_test_hooks_and_empty_values() {
        let obs: Observation = serde_json::from_value(serde_json::json!({
            "name": "x", "version": 1, "config": {},
            "hooks": [{"name": "t", "events": ["test"]}, {"name": "p", "events": ["pre-install"]}]
        }))
        .unwrap();
        let o = obs.clone().observed();
        assert_eq!(o.config, None);
        assert_eq!(o.hooks.as_ref().map(|h| h.len()), Some(1));
        let only_tests = Observation {
            hooks: Some(vec![Hook {
                events: vec!["test".into()],
                ..Hook::default()
            }]),
            ..obs
        }
        .observed();
        assert_eq!(only_tests.hooks, None);
        let text = String::from_utf8(digest::go_json(&only_tests).unwrap()).unwrap();
        assert!(text.contains("\"config\":null"), "{text}");
        assert!(text.contains("\"hooks\":null"), "{text}");
    }

    #[test]
    fn times_are_written_the_go_way() {
        for (input, go) in [
            ("2024-01-02T03:04:05.000000000Z", "2024-01-02T03:04:05Z"),
            ("2024-01-02T03:04:05.5+00:00", "2024-01-02T03:04:05.5Z"),
            (
                "2024-01-02T03:04:05.120-07:30",
                "2024-01-02T03:04:05.12-07:30",
            ),
            ("2024-01-02T03:04:05Z", "2024-01-02T03:04:05Z"),
        ] {
            assert_eq!(go_time::normalize(input), go);
        }
    }
}
