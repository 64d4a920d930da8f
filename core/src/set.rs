//! The HelmReleaseSet API (`helm.flotilla.dev/v1alpha1`): one declaration fanned out to
//! every matching cluster as one ordinary child HelmRelease per cluster, rolled out wave by
//! wave by [`crate::rollout`].
//!
//! This module holds the spec and status as serde types (their CRD schema is derived with
//! the `schema` feature, as [`crate::spec`]'s is) and the pure functions the controller
//! needs around them:
//!
//! - [`HelmReleaseSetSpec::validate`]: the checks the schema cannot make (selectors, unique
//!   wave names, percentages), each error naming its field;
//! - [`select_clusters`]: which ManagedClusters the set targets (`clusterSelector` OR
//!   `clusterNames`, minus `excludeClusters`), sorted by name;
//! - [`TargetCustomization::first_match`]: the customization of a cluster, first match wins;
//! - [`child_name`]: the child's deterministic name (`<set>-<cluster>`, hashed past 63
//!   characters, always a DNS-1123 label);
//! - [`HelmReleaseSetSpec::revision`]: the set revision, a stable digest of everything that
//!   shapes a child (template, `valuesTemplate`, `targetCustomizations`), named as
//!   StatefulSet names its ControllerRevisions;
//! - [`child_spec`]: the child's HelmRelease spec for one cluster and one revision.
//!
//! # Guarantees
//!
//! - **Deterministic.** Every function here is a function of its arguments: same inputs,
//!   same selection order, same names, same revision, on every hub and after a restart.
//! - **Revisions ignore what does not shape a child.** Selector, rollout settings and wave
//!   approvals are not part of the revision: editing them never starts a new rollout. Map
//!   key order never changes a revision (keys are hashed sorted).
//! - **Names are DNS-1123 labels of at most 63 characters.** A name that would be longer,
//!   or that contains a character a label cannot (a `.` of a cluster name), is cut and
//!   suffixed with a hash of `(set, cluster)`, so two distinct pairs that shorten alike
//!   still get distinct names. `<set>-<cluster>` itself is not injective (`a-b` + `c` and
//!   `a` + `b-c`): the controller must own children by their labels and owner reference,
//!   never by name alone ([`SET_LABEL`], [`CLUSTER_LABEL`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::digest::{SortedValue, go_json};
use crate::duration::GoDuration;
use crate::ids::{self, DNS1123_LABEL_MAX_LEN};
use crate::meta::{Condition, Timestamp};
use crate::selector::{LabelSelector, SelectorError};
use crate::spec::{ClusterReference, ClusterReferenceKind, HelmReleaseSpec};

/// Label on every child naming its set.
pub const SET_LABEL: &str = "helm.flotilla.dev/set";
/// Label on every child naming its cluster (the ManagedCluster's name).
pub const CLUSTER_LABEL: &str = "helm.flotilla.dev/cluster";
/// Label on every child naming the set revision its spec was rendered from.
pub const REVISION_LABEL: &str = "helm.flotilla.dev/set-revision";
/// Annotation on every child: when the revision it carries was promoted to it (RFC 3339).
/// The rollout engine measures `progressDeadline` from it.
pub const PROMOTED_AT_ANNOTATION: &str = "helm.flotilla.dev/promoted-at";

/// Default `rollout.maxNewPerReconcile`: children created or promoted per decision.
pub const DEFAULT_MAX_NEW_PER_RECONCILE: u32 = 50;
/// Default `maxConcurrency` of a wave: 10% of its clusters (never less than one).
pub const DEFAULT_MAX_CONCURRENCY: IntOrPercent = IntOrPercent::Percent(10);
/// Default `progressDeadline` of a wave: 15 minutes from promotion to Ready.
pub const DEFAULT_PROGRESS_DEADLINE: GoDuration = GoDuration::from_mins(15);
/// Default `revisionHistoryLimit`.
pub const DEFAULT_REVISION_HISTORY_LIMIT: u32 = 5;
/// Most waves a set may declare.
pub const MAX_WAVES: usize = 64;
/// Name of the wave that takes every cluster no declared wave matches.
pub const FINAL_WAVE_NAME: &str = "unmatched";
/// Most entries of `status.failedClusters`.
pub const MAX_FAILED_CLUSTERS: usize = 20;
/// Longest message kept in `status.failedClusters[].message` and in the set's conditions.
pub const MAX_STATUS_MESSAGE_LEN: usize = 512;

fn is_false(b: &bool) -> bool {
    !*b
}

/// A count or a percentage (`3`, `"25%"`), Kubernetes' IntOrString as Deployments and
/// OCM's rollout strategy use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntOrPercent {
    /// An absolute number of clusters.
    Count(u32),
    /// A percentage of the wave's clusters, 0 to 100.
    Percent(u8),
}

/// The pattern of an IntOrPercent written as a string.
pub const INT_OR_PERCENT_PATTERN: &str = r"^([0-9]+|(100|[1-9]?[0-9])%)$";

impl IntOrPercent {
    /// The number this stands for out of `total`: a percentage rounds down.
    pub fn of(self, total: usize) -> usize {
        match self {
            IntOrPercent::Count(n) => n as usize,
            IntOrPercent::Percent(p) => total * usize::from(p) / 100,
        }
    }

    fn parse(s: &str) -> Option<IntOrPercent> {
        if let Some(p) = s.strip_suffix('%') {
            let p: u8 = p.parse().ok()?;
            (p <= 100).then_some(IntOrPercent::Percent(p))
        } else {
            s.parse().ok().map(IntOrPercent::Count)
        }
    }
}

impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrPercent::Count(n) => write!(f, "{n}"),
            IntOrPercent::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Serialize for IntOrPercent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            IntOrPercent::Count(n) => s.serialize_u32(*n),
            IntOrPercent::Percent(_) => s.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrPercent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = IntOrPercent;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative integer or a percentage such as \"25%\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<IntOrPercent, E> {
                u32::try_from(v)
                    .map(IntOrPercent::Count)
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<IntOrPercent, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("{v} is negative")))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<IntOrPercent, E> {
                if v.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&v) {
                    Ok(IntOrPercent::Count(v as u32))
                } else {
                    Err(E::custom(format!("{v} is not a non-negative integer")))
                }
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<IntOrPercent, E> {
                IntOrPercent::parse(v).ok_or_else(|| {
                    E::custom(format!(
                        "{v:?} is neither a non-negative integer nor a percentage from 0% to 100%"
                    ))
                })
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for IntOrPercent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "IntOrPercent".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "x-kubernetes-int-or-string": true,
            "pattern": INT_OR_PERCENT_PATTERN,
        })
    }
}

/// What happens to a cluster's child when the cluster stops matching the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum StopMatchingPolicy {
    /// Delete the child: the release is uninstalled from the cluster.
    #[default]
    Uninstall,
    /// Release the child (owner reference and set labels removed): the release stays.
    Orphan,
}

/// How a revision reaches the clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum RolloutStrategy {
    /// Wave by wave, each bounded by its `maxConcurrency` and `maxFailures`.
    #[default]
    Progressive,
    /// Every cluster at once, bounded only by `maxNewPerReconcile`; failures are reported,
    /// never stop it.
    AllAtOnce,
}

/// What a breach of a wave's `maxFailures` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum OnFailure {
    /// Promote nothing more while the breach holds.
    #[default]
    Pause,
    /// Stop, and put `currentRevision` back on every cluster already promoted, newest wave
    /// first, through the waves' budgets.
    AbortAndRollback,
}

/// The gate at the end of a wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum GateType {
    /// The next wave starts once this one is complete and soaked.
    #[default]
    Auto,
    /// The next wave also waits until `approvedRevision` equals `status.updateRevision`.
    Manual,
}

/// One wave of a progressive rollout.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Wave {
    /// Name of the wave, unique in the set.
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(min = 1, max = 63),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
        )
    )]
    pub name: String,
    /// The clusters of the wave, among those the set selects; a cluster belongs to the
    /// first wave it matches. Unset or `{}`: every cluster no earlier wave took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// Clusters promoted at once in this wave (a count, or a percentage of the wave's
    /// clusters rounded down, never less than one); defaults to 10%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<IntOrPercent>,
    /// Failed or timed-out clusters the wave tolerates (a count or a percentage rounded
    /// down); one more is a breach and triggers `onFailure`. Defaults to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<IntOrPercent>,
    /// Time from a cluster's promotion to its child being Ready, after which the cluster
    /// is timed out (a failure); defaults to 15m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline: Option<GoDuration>,
    /// Time the whole wave must stay Ready before the next wave starts; defaults to 0s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_soak_time: Option<GoDuration>,
    /// `Auto` (default) or `Manual`: a manual gate holds the next wave until
    /// `approvedRevision` names the revision being rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateType>,
    /// The revision approved past a `Manual` gate (`flotilla rollout approve` sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = 63)))]
    pub approved_revision: Option<String>,
}

impl Wave {
    /// `maxConcurrency`, defaulted.
    pub fn max_concurrency(&self) -> IntOrPercent {
        self.max_concurrency.unwrap_or(DEFAULT_MAX_CONCURRENCY)
    }
    /// `maxFailures`, defaulted.
    pub fn max_failures(&self) -> IntOrPercent {
        self.max_failures.unwrap_or(IntOrPercent::Count(0))
    }
    /// `progressDeadline`, defaulted.
    pub fn progress_deadline(&self) -> GoDuration {
        self.progress_deadline.unwrap_or(DEFAULT_PROGRESS_DEADLINE)
    }
    /// `minSoakTime`, defaulted.
    pub fn min_soak_time(&self) -> GoDuration {
        self.min_soak_time.unwrap_or(GoDuration::from_secs(0))
    }
    /// `gate`, defaulted.
    pub fn gate(&self) -> GateType {
        self.gate.unwrap_or_default()
    }
}

/// How revisions roll out.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// `Progressive` (default) or `AllAtOnce`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RolloutStrategy>,
    /// Most children created or promoted per reconcile, whatever the strategy; defaults
    /// to 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub max_new_per_reconcile: Option<u32>,
    /// The waves, in order. Clusters no wave matches form a final wave named `unmatched`
    /// with the default settings (never skipped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", schemars(length(max = 64)))]
    #[cfg_attr(
        feature = "schema",
        schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))
    )]
    pub waves: Vec<Wave>,
    /// Promote nothing while true (clusters already promoted finish).
    #[serde(default, skip_serializing_if = "is_false")]
    pub paused: bool,
    /// `Pause` (default) or `AbortAndRollback`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
    /// Set revisions kept in history (ControllerRevisions); defaults to 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(max = 100)))]
    pub revision_history_limit: Option<u32>,
}

impl RolloutSpec {
    /// `strategy`, defaulted.
    pub fn strategy(&self) -> RolloutStrategy {
        self.strategy.unwrap_or_default()
    }
    /// `maxNewPerReconcile`, defaulted.
    pub fn max_new_per_reconcile(&self) -> u32 {
        self.max_new_per_reconcile
            .unwrap_or(DEFAULT_MAX_NEW_PER_RECONCILE)
    }
    /// `onFailure`, defaulted.
    pub fn on_failure(&self) -> OnFailure {
        self.on_failure.unwrap_or_default()
    }
    /// `revisionHistoryLimit`, defaulted.
    pub fn revision_history_limit(&self) -> u32 {
        self.revision_history_limit
            .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT)
    }
}

/// Labels and annotations of every child.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels added to each child (the set's own labels win on conflict).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to each child.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The HelmRelease every child is made from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct HelmReleaseTemplate {
    /// Labels and annotations of the children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// A HelmRelease spec without `clusterRef` (the set sets it per cluster) and without
    /// `kubeConfig` (exclusive with `clusterRef`).
    #[cfg_attr(feature = "schema", schemars(schema_with = "template_spec_schema"))]
    pub spec: HelmReleaseSpec,
}

/// The HelmRelease spec schema minus `clusterRef`, `kubeConfig` and the CEL rule naming
/// them: the API server then refuses (or, without strict field validation, prunes) both.
#[cfg(feature = "schema")]
fn template_spec_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<HelmReleaseSpec>();
    if let Some(obj) = schema.as_object_mut() {
        if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
            props.remove("clusterRef");
            props.remove("kubeConfig");
        }
        if let Some(rules) = obj
            .get_mut("x-kubernetes-validations")
            .and_then(Value::as_array_mut)
        {
            rules.retain(|r| {
                let rule = r["rule"].as_str().unwrap_or_default();
                !rule.contains("clusterRef") && !rule.contains("kubeConfig")
            });
        }
        obj.insert(
            "description".into(),
            "A HelmRelease spec (helm.flotilla.dev/v1) without clusterRef and kubeConfig.".into(),
        );
    }
    schema
}

/// An override for the clusters a selector matches; the first matching entry wins.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TargetCustomization {
    /// Name of the customization, for status and messages.
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(min = 1, max = 63),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
        )
    )]
    pub name: String,
    /// The clusters it applies to (`{}`: all).
    pub cluster_selector: LabelSelector,
    /// Values merged over the template's values and the rendered `valuesTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(schema_with = "free_form_values"))]
    pub values: Option<Value>,
    /// Chart version (semver range) replacing the template's `chart.spec.version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 128)))]
    pub chart_version: Option<String>,
    /// Sets the child's `suspend`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// No child for these clusters (an existing one is handled as by
    /// `stopMatchingPolicy`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub do_not_deploy: bool,
}

#[cfg(feature = "schema")]
fn free_form_values(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Values (a JSON object) merged over the template's values.",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

impl TargetCustomization {
    /// The first customization whose selector matches `labels` (Fleet's `FirstMatch`).
    pub fn first_match<'a>(
        customizations: &'a [TargetCustomization],
        labels: &BTreeMap<String, String>,
    ) -> Option<&'a TargetCustomization> {
        customizations
            .iter()
            .find(|c| c.cluster_selector.matches(labels))
    }
}

/// The desired state of a HelmReleaseSet.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct HelmReleaseSetSpec {
    /// The ManagedClusters targeted by label. Unset: only `clusterNames`; `{}`: every
    /// cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// ManagedClusters targeted by name, whatever their labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(max = 10000),
            inner(
                length(min = 1, max = 253),
                regex(
                    pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
                )
            )
        )
    )]
    pub cluster_names: Vec<String>,
    /// ManagedClusters never targeted, even when selected or named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(max = 10000),
            inner(
                length(min = 1, max = 253),
                regex(
                    pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
                )
            )
        )
    )]
    pub exclude_clusters: Vec<String>,
    /// The HelmRelease each cluster gets.
    pub template: HelmReleaseTemplate,
    /// A Go template rendered on the hub per cluster (context `.Cluster`, `.ClusterName`,
    /// `.ClusterLabels`, `.ClusterAnnotations`); its YAML output is merged over the
    /// template's values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = 262144)))]
    pub values_template: Option<String>,
    /// Ordered overrides by cluster selector; the first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", schemars(length(max = 64)))]
    pub target_customizations: Vec<TargetCustomization>,
    /// `Uninstall` (default) or `Orphan`: the fate of a child whose cluster stops matching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_matching_policy: Option<StopMatchingPolicy>,
    /// How revisions roll out; defaults to one progressive wave of every cluster at 10%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
}

/// Why a HelmReleaseSet spec was refused; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetSpecError {
    /// A label selector is invalid.
    #[error("HelmReleaseSet {object}: {field}.{source}")]
    Selector {
        /// `namespace/name`.
        object: String,
        /// Path of the selector (`spec.clusterSelector`).
        field: String,
        /// What is wrong inside it.
        #[source]
        source: SelectorError,
    },
    /// Any other invalid field.
    #[error("HelmReleaseSet {object}: {field}: {message}")]
    Field {
        /// `namespace/name`.
        object: String,
        /// Path of the field.
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl HelmReleaseSetSpec {
    /// `stopMatchingPolicy`, defaulted.
    pub fn stop_matching_policy(&self) -> StopMatchingPolicy {
        self.stop_matching_policy.unwrap_or_default()
    }

    /// The rollout settings, defaulted when absent.
    pub fn rollout(&self) -> RolloutSpec {
        self.rollout.clone().unwrap_or_default()
    }

    /// The checks the CRD schema cannot make; `object` (`namespace/name`) prefixes every
    /// message. The template spec's own HelmRelease rules are checked on each child
    /// (`spec::HelmRelease::validate`).
    pub fn validate(&self, object: &str) -> Result<(), SetSpecError> {
        let selector = |field: String, s: &LabelSelector| {
            s.validate().map_err(|source| SetSpecError::Selector {
                object: object.to_owned(),
                field,
                source,
            })
        };
        let field = |field: String, message: String| SetSpecError::Field {
            object: object.to_owned(),
            field,
            message,
        };
        if let Some(s) = &self.cluster_selector {
            selector("spec.clusterSelector".into(), s)?;
        }
        for (list, names) in [
            ("clusterNames", &self.cluster_names),
            ("excludeClusters", &self.exclude_clusters),
        ] {
            for (i, n) in names.iter().enumerate() {
                ids::check_dns1123_subdomain("cluster name", n)
                    .map_err(|e| field(format!("spec.{list}[{i}]"), e.to_string()))?;
            }
        }
        if self.template.spec.cluster_ref.is_some() {
            return Err(field(
                "spec.template.spec.clusterRef".into(),
                "must not be set: the set sets it for each cluster".into(),
            ));
        }
        if self.template.spec.kube_config.is_some() {
            return Err(field(
                "spec.template.spec.kubeConfig".into(),
                "must not be set: children are delivered through clusterRef".into(),
            ));
        }
        for (i, c) in self.target_customizations.iter().enumerate() {
            let at = format!("spec.targetCustomizations[{i}]");
            ids::check_dns1123_label("customization name", &c.name)
                .map_err(|e| field(format!("{at}.name"), e.to_string()))?;
            selector(format!("{at}.clusterSelector"), &c.cluster_selector)?;
            if c.values.as_ref().is_some_and(|v| !v.is_object()) {
                return Err(field(format!("{at}.values"), "must be an object".into()));
            }
        }
        if let Some(r) = &self.rollout {
            let mut seen = std::collections::BTreeSet::new();
            if r.waves.len() > MAX_WAVES {
                return Err(field(
                    "spec.rollout.waves".into(),
                    format!("at most {MAX_WAVES} waves, found {}", r.waves.len()),
                ));
            }
            for (i, w) in r.waves.iter().enumerate() {
                let at = format!("spec.rollout.waves[{i}]");
                ids::check_dns1123_label("wave name", &w.name)
                    .map_err(|e| field(format!("{at}.name"), e.to_string()))?;
                if w.name == FINAL_WAVE_NAME {
                    return Err(field(
                        format!("{at}.name"),
                        format!("{FINAL_WAVE_NAME:?} is reserved for the clusters no wave matches"),
                    ));
                }
                if !seen.insert(w.name.as_str()) {
                    return Err(field(
                        format!("{at}.name"),
                        format!("wave {:?} is declared twice", w.name),
                    ));
                }
                if let Some(s) = &w.cluster_selector {
                    selector(format!("{at}.clusterSelector"), s)?;
                }
                if let Some(c) = w.max_concurrency
                    && matches!(c, IntOrPercent::Count(0) | IntOrPercent::Percent(0))
                {
                    return Err(field(
                        format!("{at}.maxConcurrency"),
                        "must be at least 1 or 1%: 0 would never promote".into(),
                    ));
                }
            }
            if r.max_new_per_reconcile == Some(0) {
                return Err(field(
                    "spec.rollout.maxNewPerReconcile".into(),
                    "must be at least 1".into(),
                ));
            }
        }
        Ok(())
    }

    /// The set revision: the first 10 hex characters of the SHA-256 of the Go-JSON
    /// encoding, keys sorted, of `{template, valuesTemplate, targetCustomizations}`.
    pub fn revision(&self) -> SetRevision {
        let data = serde_json::json!({
            "template": self.template,
            "valuesTemplate": self.values_template,
            "targetCustomizations": self.target_customizations,
        });
        let bytes = go_json(&SortedValue(&data)).expect("JSON values always encode");
        let hex = ids::hex_lower(&Sha256::digest(bytes));
        SetRevision(hex[..SetRevision::LEN].to_owned())
    }
}

/// A set revision: 10 lower-case hex characters ([`HelmReleaseSetSpec::revision`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SetRevision(String);

impl SetRevision {
    /// Length of a revision.
    pub const LEN: usize = 10;

    /// Parses a revision (as read from a child's label or the set's status).
    pub fn new(value: impl Into<String>) -> Result<Self, ids::IdError> {
        let value = value.into();
        if value.len() == Self::LEN
            && value
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(SetRevision(value))
        } else {
            Err(ids::IdError::NotDns1123Label {
                kind: "set revision",
                value,
            })
        }
    }

    /// The text form.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name of the ControllerRevision holding it: `<set>-<revision>`.
    pub fn controller_revision_name(&self, set: &str) -> String {
        format!("{set}-{}", self.0)
    }
}

impl fmt::Display for SetRevision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for SetRevision {
    type Error = ids::IdError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        SetRevision::new(value)
    }
}

impl From<SetRevision> for String {
    fn from(r: SetRevision) -> String {
        r.0
    }
}

/// Length of the hash suffix of a shortened child name.
const CHILD_HASH_LEN: usize = 10;

/// The child's name: `<set>-<cluster>` when that is a DNS-1123 label of at most 63
/// characters; otherwise the name with every character a label cannot hold replaced by
/// `-`, cut to 52 characters (trailing `-` dropped), then `-` and the first 10 hex
/// characters of the SHA-256 of `<set>/<cluster>`.
pub fn child_name(set: &str, cluster: &str) -> String {
    let plain = format!("{set}-{cluster}");
    if ids::check_dns1123_label("child name", &plain).is_ok() {
        return plain;
    }
    let hex = ids::hex_lower(&Sha256::digest(format!("{set}/{cluster}").as_bytes()));
    let keep = DNS1123_LABEL_MAX_LEN - CHILD_HASH_LEN - 1;
    let mut head: String = plain
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .take(keep)
        .collect();
    while head.ends_with('-') {
        head.pop();
    }
    while head.starts_with('-') {
        head.remove(0);
    }
    if head.is_empty() {
        return hex[..CHILD_HASH_LEN].to_owned();
    }
    format!("{head}-{}", &hex[..CHILD_HASH_LEN])
}

/// A ManagedCluster as selection and templating see it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterInfo {
    /// The ManagedCluster's name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// The clusters a set targets, sorted by name: those its `clusterSelector` matches or
/// its `clusterNames` name, minus `excludeClusters`. A name in `clusterNames` with no
/// ManagedCluster is not returned (the controller reports it). Call
/// [`HelmReleaseSetSpec::validate`] first: an invalid selector matches literally.
pub fn select_clusters<'a>(
    spec: &HelmReleaseSetSpec,
    clusters: &'a [ClusterInfo],
) -> Vec<&'a ClusterInfo> {
    let mut out: Vec<&ClusterInfo> = clusters
        .iter()
        .filter(|c| {
            let named = spec.cluster_names.iter().any(|n| n == &c.name);
            let selected = spec
                .cluster_selector
                .as_ref()
                .is_some_and(|s| s.matches(&c.labels));
            let excluded = spec.exclude_clusters.iter().any(|n| n == &c.name);
            (named || selected) && !excluded
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// The child HelmRelease spec of one cluster: the template's spec with `clusterRef` to the
/// ManagedCluster, `releaseName` defaulted to the set's release name
/// (`[targetNamespace-]<set>`, so every cluster gets the same Helm release), `values` =
/// template values ⊕ `rendered_values` (the cluster's rendered `valuesTemplate`) ⊕ the
/// customization's values (later wins, maps merged recursively), and the customization's
/// chart version and `suspend` applied.
pub fn child_spec(
    spec: &HelmReleaseSetSpec,
    set_name: &str,
    cluster: &str,
    customization: Option<&TargetCustomization>,
    rendered_values: Option<&serde_json::Map<String, Value>>,
) -> HelmReleaseSpec {
    let mut child = spec.template.spec.clone();
    child.cluster_ref = Some(ClusterReference {
        kind: Some(ClusterReferenceKind::ManagedCluster),
        name: cluster.to_owned(),
    });
    child.kube_config = None;
    if child.release_name.as_deref().is_none_or(str::is_empty) {
        let full = match child.target_namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{ns}-{set_name}"),
            _ => set_name.to_owned(),
        };
        child.release_name = Some(ids::shorten_release_name(&full));
    }
    let mut values = match child.values.take() {
        Some(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    if let Some(r) = rendered_values {
        merge_into(&mut values, r);
    }
    if let Some(c) = customization {
        if let Some(Value::Object(m)) = &c.values {
            merge_into(&mut values, m);
        }
        if let Some(v) = &c.chart_version
            && let Some(chart) = child.chart.as_mut()
        {
            chart.spec.version = Some(v.clone());
        }
        if let Some(s) = c.suspend {
            child.suspend = s;
        }
    }
    child.values = (!values.is_empty()).then_some(Value::Object(values));
    child
}

/// Helm's `MergeMaps`: `over` wins; maps on both sides merge recursively.
fn merge_into(base: &mut serde_json::Map<String, Value>, over: &serde_json::Map<String, Value>) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(Value::Object(b)), Value::Object(o)) => merge_into(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Status

/// The rollout counters of a set: counts only, whatever the fleet's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RolloutCounters {
    /// Clusters the set targets and deploys to (deleting clusters excluded).
    pub desired: u32,
    /// Clusters whose child carries the update revision.
    pub updated: u32,
    /// Updated clusters whose child is Ready.
    pub ready: u32,
    /// Updated clusters whose child failed (Stalled, remediation failed) or whose values
    /// did not render.
    pub failed: u32,
    /// Updated clusters not Ready within `progressDeadline`.
    pub timed_out: u32,
    /// Clusters not yet at the update revision.
    pub pending: u32,
    /// Clusters paused (ManagedCluster or customization): skipped, holding no slot.
    pub paused: u32,
    /// Clusters whose agent is not connected.
    pub unreachable: u32,
}

/// Where a wave stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum WaveState {
    /// Not started: an earlier wave is not through.
    Pending,
    /// Promoting or waiting for its clusters.
    Progressing,
    /// Complete, waiting for `minSoakTime`.
    Soaking,
    /// Complete and soaked, waiting for a `Manual` gate's approval.
    AwaitingApproval,
    /// Through: complete, soaked, gate open.
    Complete,
    /// More failures than `maxFailures`.
    Failed,
    /// `AbortAndRollback`: putting the current revision back.
    RollingBack,
    /// `AbortAndRollback` done for this wave.
    RolledBack,
}

/// The progress of one wave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct WaveStatus {
    /// Name of the wave (`unmatched` for the final wave).
    pub name: String,
    /// Where the wave stands.
    pub state: WaveState,
    /// Clusters in the wave.
    pub clusters: u32,
    /// Clusters at the update revision.
    pub updated: u32,
    /// Updated and Ready.
    pub ready: u32,
    /// Failed, timed out included.
    pub failed: u32,
    /// Promoted and not yet Ready, failed or timed out.
    pub in_flight: u32,
    /// When the soak ends (state `Soaking`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak_until: Option<Timestamp>,
}

/// Why a cluster counts as failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum FailureReason {
    /// The child is Stalled or its remediation failed.
    ReleaseFailed,
    /// The child was not Ready within `progressDeadline`.
    ProgressDeadlineExceeded,
    /// The cluster's `valuesTemplate` did not render.
    RenderFailed,
}

/// One failed cluster (the list is capped; the child has the detail).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FailedCluster {
    /// The ManagedCluster.
    pub cluster: String,
    /// Its wave.
    pub wave: String,
    /// Why it failed.
    pub reason: FailureReason,
    /// A short message (at most 512 characters).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// The observed state of a HelmReleaseSet.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(extend("default" = {"observedGeneration": -1})))]
#[serde(rename_all = "camelCase")]
pub struct HelmReleaseSetStatus {
    /// The last generation the controller handled.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    /// `Ready`, `Reconciling`, `Stalled`, `RolloutProgressing`, `RolloutPaused`,
    /// `RolloutDegraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(
        feature = "schema",
        schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))
    )]
    pub conditions: Vec<Condition>,
    /// The revision every cluster was at when the last rollout completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<SetRevision>,
    /// The revision being rolled out (the spec's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<SetRevision>,
    /// The update revision whose rollout was aborted (`AbortAndRollback`); it is not
    /// promoted again until the spec makes a new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted_revision: Option<SetRevision>,
    /// Counters over the targeted clusters.
    #[serde(default)]
    pub summary: RolloutCounters,
    /// Progress of each wave, in order (the final `unmatched` wave last).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waves: Vec<WaveStatus>,
    /// The first wave not through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_wave: Option<String>,
    /// Up to 20 failed clusters, by wave then name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", schemars(length(max = 20)))]
    pub failed_clusters: Vec<FailedCluster>,
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for SetRevision {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SetRevision".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": "^[0-9a-f]{10}$"})
    }
}

#[cfg(test)]
mod tests;
