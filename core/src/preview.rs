//! The preview contract: what an agent is asked ([`PreviewRequest`]) and answers
//! ([`PreviewReport`]) when the hub wants to know what the next reconcile of a plan would
//! do on its cluster, without doing it ([`ReleaseDiff`]).
//!
//! A preview's plan is never held, persisted or applied: it changes no revision, writes no
//! Helm storage and changes no live object. The per-object diffing is [`crate::diff`]'s;
//! this module holds the whole answer and bounds it ([`ReleaseDiff::bounded`]): at most
//! [`MAX_DIFF_BYTES`] of diff text, [`MAX_OBJECTS`] objects and [`MAX_VALUE_PATHS`] value
//! paths, with `truncated` set and the digest of the whole kept, so two previews of the same
//! change compare equal however large they are.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::agent::ObjectKey;
use crate::diff::{Change, ObjectDiff, ObjectRef, PathChange, Truncated};
use crate::plan::ReleasePlan;

/// The feature an agent's Hello lists when it answers previews.
pub const FEATURE: &str = "preview";

/// Bytes of unified diff text a [`ReleaseDiff`] carries at most.
pub const MAX_DIFF_BYTES: usize = 256 * 1024;

/// Objects (and hooks) a [`ReleaseDiff`] lists at most.
pub const MAX_OBJECTS: usize = 2048;

/// Value paths a [`ReleaseDiff`] lists at most.
pub const MAX_VALUE_PATHS: usize = 1024;

/// Characters of a preview id at most.
pub const MAX_ID_LEN: usize = 64;

/// A chart's name and version.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ChartVersion {
    /// Chart name.
    pub name: String,
    /// Chart version.
    pub version: String,
}

impl fmt::Display for ChartVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

/// The chart of the release now (`None`: not installed) and of the change.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ChartChange {
    /// The chart of the stored release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<ChartVersion>,
    /// The chart of the plan.
    pub to: ChartVersion,
}

impl ChartChange {
    /// Whether the chart (name or version) changes.
    pub fn changed(&self) -> bool {
        self.from.as_ref() != Some(&self.to)
    }
}

/// A hook of the new render (hooks run on every upgrade; they are listed, not diffed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct HookRef {
    /// The hook object.
    pub object: ObjectRef,
    /// Its events (`pre-upgrade`, `test`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
}

/// One value path that changes (never the value: values may hold Secret data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ValueChange {
    /// `image.tag`, `hosts[0]`.
    pub path: String,
    /// How it changes.
    pub change: PathChange,
}

/// What the next reconcile of a plan would do on one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReleaseDiff {
    /// The release's objects (the new render's and the stored ones it drops), in manifest
    /// order, deletions last.
    #[serde(default)]
    pub objects: Vec<ObjectDiff>,
    /// Hooks of the new render other than tests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookRef>,
    /// Test hooks of the new render.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<HookRef>,
    /// The user values that change against the stored release's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<ValueChange>,
    /// The chart change.
    #[serde(default)]
    pub chart: ChartChange,
    /// Whether objects, value paths or diff text were cut to fit the bounds.
    #[serde(default)]
    pub truncated: bool,
    /// `sha256:<hex>` of the whole answer before any cut.
    #[serde(default)]
    pub digest: String,
}

impl ReleaseDiff {
    /// The answer from its parts, cut to the bounds (module docs), with the digest of the
    /// whole.
    pub fn bounded(
        objects: Vec<ObjectDiff>,
        hooks: Vec<HookRef>,
        tests: Vec<HookRef>,
        values: Vec<ValueChange>,
        chart: ChartChange,
    ) -> ReleaseDiff {
        let mut whole = ReleaseDiff {
            objects,
            hooks,
            tests,
            values,
            chart,
            truncated: false,
            digest: String::new(),
        };
        // Plain data: serializing cannot fail.
        let json = serde_json::to_vec(&whole).unwrap_or_default();
        whole.digest = format!("sha256:{:x}", Sha256::digest(&json));
        let mut truncated = false;
        if whole.objects.len() > MAX_OBJECTS {
            whole.objects.truncate(MAX_OBJECTS);
            truncated = true;
        }
        let hook_room = MAX_OBJECTS.saturating_sub(whole.objects.len());
        if whole.hooks.len() + whole.tests.len() > hook_room {
            whole.hooks.truncate(hook_room);
            whole
                .tests
                .truncate(hook_room.saturating_sub(whole.hooks.len()));
            truncated = true;
        }
        if whole.values.len() > MAX_VALUE_PATHS {
            whole.values.truncate(MAX_VALUE_PATHS);
            truncated = true;
        }
        let mut budget = MAX_DIFF_BYTES;
        for o in &mut whole.objects {
            let cut = Truncated::new(&o.diff, budget);
            budget -= cut.text.len();
            if cut.truncated {
                truncated = true;
                o.diff = cut.text;
            }
        }
        whole.truncated = truncated;
        whole
    }

    /// Whether the next reconcile would change anything: an object created, updated or
    /// deleted, a value or the chart changed.
    pub fn has_changes(&self) -> bool {
        self.objects.iter().any(|o| o.change != Change::Unchanged)
            || !self.values.is_empty()
            || self.chart.changed()
    }

    /// How many objects have each change: `(create, update, delete, unchanged)`.
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let n = |c| self.objects.iter().filter(|o| o.change == c).count();
        (
            n(Change::Create),
            n(Change::Update),
            n(Change::Delete),
            n(Change::Unchanged),
        )
    }
}

/// Why a preview has no diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PreviewError {
    /// The agent cannot serve this preview (an older agent, or a plan it cannot preview):
    /// a sentence.
    Unsupported(String),
    /// The preview failed: a sentence naming the object or field.
    Failed(String),
}

impl fmt::Display for PreviewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PreviewError::Unsupported(m) | PreviewError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PreviewError {}

/// A request to preview a plan.
#[derive(Clone, PartialEq)]
pub struct PreviewRequest {
    /// Chosen by the requester (at most [`MAX_ID_LEN`] characters); the report carries it.
    pub id: String,
    /// The plan to preview: never held, persisted or applied.
    pub plan: Box<ReleasePlan>,
    /// The key Secret values are digested with ([`crate::diff::Masker`]), fresh per
    /// preview.
    pub mask_key: [u8; 32],
}

impl fmt::Debug for PreviewRequest {
    /// Neither the key nor the plan's values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreviewRequest")
            .field("id", &self.id)
            .field("object", &self.plan.object.key().to_string())
            .finish_non_exhaustive()
    }
}

/// The answer to a [`PreviewRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct PreviewReport {
    /// The request's id.
    pub id: String,
    /// The HelmRelease of the plan.
    pub object: ObjectKey,
    /// The diff, or why there is none.
    pub result: Result<ReleaseDiff, PreviewError>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, change: Change, diff: &str) -> ObjectDiff {
        ObjectDiff {
            object: ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("apps".into()),
                name: name.into(),
            },
            change,
            diff: diff.into(),
        }
    }

    fn chart(version: &str) -> ChartVersion {
        ChartVersion {
            name: "web".into(),
            version: version.into(),
        }
    }

    #[test]
    fn changes_are_objects_values_or_the_chart() {
        let same = ChartChange {
            from: Some(chart("1.0.0")),
            to: chart("1.0.0"),
        };
        let quiet = ReleaseDiff::bounded(
            vec![object("a", Change::Unchanged, "")],
            vec![],
            vec![],
            vec![],
            same.clone(),
        );
        assert!(!quiet.has_changes());
        let updated = ReleaseDiff::bounded(
            vec![object("a", Change::Update, "-x\n+y\n")],
            vec![],
            vec![],
            vec![],
            same.clone(),
        );
        assert!(updated.has_changes());
        assert_eq!(updated.counts(), (0, 1, 0, 0));
        let value = ReleaseDiff::bounded(
            vec![],
            vec![],
            vec![],
            vec![ValueChange {
                path: "a".into(),
                change: PathChange::Added,
            }],
            same,
        );
        assert!(value.has_changes());
        let bumped = ChartChange {
            from: Some(chart("1.0.0")),
            to: chart("1.1.0"),
        };
        assert!(bumped.changed());
        assert!(
            ChartChange {
                from: None,
                to: chart("1.0.0")
            }
            .changed(),
            "a first install changes the chart"
        );
    }

    #[test]
    fn a_large_diff_is_cut_to_the_budget_and_keeps_the_digest_of_the_whole() {
        let line = format!("+{}\n", "x".repeat(1023));
        let big = line.repeat(200); // 200 KiB per object
        let objects = || {
            vec![
                object("a", Change::Update, &big),
                object("b", Change::Update, &big),
            ]
        };
        let cut = ReleaseDiff::bounded(objects(), vec![], vec![], vec![], ChartChange::default());
        assert!(cut.truncated);
        let text: usize = cut.objects.iter().map(|o| o.diff.len()).sum();
        assert!(text <= MAX_DIFF_BYTES, "{text}");
        assert_eq!(cut.objects[0].diff, big, "the first fits whole");
        assert!(cut.objects[1].diff.len() < big.len());
        assert!(cut.objects[1].diff.ends_with('\n'), "cut on a line");
        let again = ReleaseDiff::bounded(objects(), vec![], vec![], vec![], ChartChange::default());
        assert_eq!(cut.digest, again.digest);
        let mut other = objects();
        other[1].diff.push_str("+y\n");
        let differs = ReleaseDiff::bounded(other, vec![], vec![], vec![], ChartChange::default());
        assert_ne!(
            differs.digest, cut.digest,
            "a change past the cut changes the digest"
        );
        assert!(cut.digest.starts_with("sha256:"));
    }

    #[test]
    fn too_many_objects_and_paths_are_cut() {
        let objects: Vec<ObjectDiff> = (0..MAX_OBJECTS + 5)
            .map(|i| object(&format!("o{i}"), Change::Create, ""))
            .collect();
        let values: Vec<ValueChange> = (0..MAX_VALUE_PATHS + 1)
            .map(|i| ValueChange {
                path: format!("p{i}"),
                change: PathChange::Changed,
            })
            .collect();
        let hooks = vec![HookRef {
            object: object("h", Change::Create, "").object,
            events: vec!["pre-upgrade".into()],
        }];
        let d = ReleaseDiff::bounded(objects, hooks, vec![], values, ChartChange::default());
        assert!(d.truncated);
        assert_eq!(d.objects.len(), MAX_OBJECTS);
        assert!(d.hooks.is_empty());
        assert_eq!(d.values.len(), MAX_VALUE_PATHS);
        let small = ReleaseDiff::bounded(
            vec![object("a", Change::Create, "+a\n")],
            vec![],
            vec![],
            vec![],
            ChartChange::default(),
        );
        assert!(!small.truncated);
    }

    #[test]
    fn a_request_never_prints_its_key_or_values() {
        let hr = crate::spec::HelmRelease::from_json_str(
            r#"{"metadata": {"name": "web", "namespace": "apps", "generation": 1},
                "spec": {"interval": "10m", "values": {"password": "hunter2"},
                         "chartRef": {"kind": "OCIRepository", "name": "web"}}}"#,
        )
        .expect("a HelmRelease");
        let chart = crate::plan::ChartArtifact {
            name: "web".into(),
            version: "1.0.0".into(),
            app_version: None,
            digest: crate::ids::ChartDigest::of_bytes(b"web"),
            oci_digest: None,
        };
        let values = hr.spec.values.clone().unwrap_or_default();
        let plan =
            ReleasePlan::from_helm_release(&hr, crate::ids::PlanRevision::FIRST, chart, values)
                .expect("a plan");
        let r = PreviewRequest {
            id: "p-1".into(),
            plan: Box::new(plan),
            mask_key: [0xab; 32],
        };
        let text = format!("{r:?}");
        assert!(text.contains("p-1"), "{text}");
        assert!(!text.contains("171") && !text.contains("hunter2"), "{text}");
    }
}
