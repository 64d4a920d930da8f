//! Conversions between the wire messages and the domain types of `flotilla-core`, at the
//! edge.
//!
//! Down (hub to agent), a [`v1::ReleasePlan`] becomes a [`plan::ReleasePlan`] with
//! `TryFrom`: every identity is parsed once, the values and options JSON are decoded, and the
//! config digest is checked against the values. Up (agent to hub), the status, its history
//! snapshots and conditions, and Events go the other way with `From`, and back with `TryFrom`
//! for the hub. A refused message is an [`InvalidMessage`] naming the field
//! (`plan.spec.install.remediation.retries: invalid type: string "x", expected i64`).
//!
//! What the wire does not carry: `status.helmChart` (the hub's own HelmChart reference) and
//! the two deprecated status fields Flux always clears (`lastAttemptedValuesChecksum`,
//! `lastReleaseRevision`); they come back empty.

use std::collections::BTreeMap;

use flotilla_core::digest::{self, Digest};
use flotilla_core::duration::GoDuration;
use flotilla_core::ids::{
    ChartDigest, ClusterId, Namespace, ObjectName, PlanRevision, ReleaseName,
};
use flotilla_core::meta::{Condition, ConditionStatus, Timestamp};
use flotilla_core::plan::{self, ChartArtifact, ReleaseOptions, ReleaseTarget, RequestTokens};
use flotilla_core::release::{Event, EventType};
use flotilla_core::status::{
    HelmReleaseStatus, HookPhase, ReleaseAction, ResourceInventory, ResourceRef, Snapshot,
    TestHookStatus,
};
use serde_json::Value;

use crate::v1;

/// A wire message the domain refuses: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidMessage {
    /// The field's path, e.g. `plan.release.name` or `plan.spec.install.remediation.retries`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl InvalidMessage {
    pub(crate) fn new(field: impl Into<String>, message: impl ToString) -> Self {
        Self {
            field: field.into(),
            message: message.to_string(),
        }
    }

    pub(crate) fn missing(field: impl Into<String>) -> Self {
        Self::new(field, "required")
    }
}

fn some_if_set(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn timestamp(field: &str, s: String) -> Result<Option<Timestamp>, InvalidMessage> {
    if s.is_empty() {
        return Ok(None);
    }
    Timestamp::new(s)
        .map(Some)
        .map_err(|e| InvalidMessage::new(field, e))
}

fn timestamp_text(t: Option<Timestamp>) -> String {
    t.map(String::from).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Plans: hub -> agent.

impl From<plan::ObjectRef> for v1::ObjectRef {
    fn from(o: plan::ObjectRef) -> Self {
        Self {
            namespace: o.namespace.into(),
            name: o.name.into(),
            uid: o.uid.unwrap_or_default(),
        }
    }
}

pub(crate) fn object_ref(
    field: &str,
    o: Option<v1::ObjectRef>,
) -> Result<plan::ObjectRef, InvalidMessage> {
    let o = o.ok_or_else(|| InvalidMessage::missing(field))?;
    Ok(plan::ObjectRef {
        namespace: Namespace::new(o.namespace)
            .map_err(|e| InvalidMessage::new(format!("{field}.namespace"), e))?,
        name: ObjectName::new(o.name)
            .map_err(|e| InvalidMessage::new(format!("{field}.name"), e))?,
        uid: (!o.uid.is_empty()).then_some(o.uid),
    })
}

impl TryFrom<v1::ObjectRef> for plan::ObjectRef {
    type Error = InvalidMessage;

    fn try_from(o: v1::ObjectRef) -> Result<Self, Self::Error> {
        object_ref("object", Some(o))
    }
}

impl From<plan::ReleasePlan> for v1::ReleasePlan {
    fn from(p: plan::ReleasePlan) -> Self {
        Self {
            object: Some(p.object.into()),
            revision: p.revision.get(),
            generation: p.generation,
            release: Some(v1::ReleaseTarget {
                name: p.release.name.into(),
                namespace: p.release.namespace.into(),
                storage_namespace: p.release.storage_namespace.into(),
            }),
            chart: Some(v1::ChartArtifact {
                name: p.chart.name,
                version: p.chart.version,
                app_version: p.chart.app_version.unwrap_or_default(),
                digest: p.chart.digest.into(),
                oci_digest: p.chart.oci_digest.unwrap_or_default(),
            }),
            values_json: serde_json::to_vec(&p.values).expect("a JSON value always serializes"),
            config_digest: p.config_digest.into(),
            post_renderers_digest: p.post_renderers_digest,
            common_metadata_digest: p.common_metadata_digest,
            options_json: serde_json::to_vec(&p.options)
                .expect("the options are plain data and always serialize"),
            requests: Some(v1::RequestTokens {
                requested_at: p.requests.requested_at.unwrap_or_default(),
                force_at: p.requests.force_at.unwrap_or_default(),
                reset_at: p.requests.reset_at.unwrap_or_default(),
            }),
            cluster_id: p.cluster.map(String::from).unwrap_or_default(),
        }
    }
}

impl TryFrom<v1::ReleasePlan> for plan::ReleasePlan {
    type Error = InvalidMessage;

    fn try_from(p: v1::ReleasePlan) -> Result<Self, Self::Error> {
        let object = object_ref("plan.object", p.object)?;
        if p.revision == 0 {
            return Err(InvalidMessage::new(
                "plan.revision",
                "must be at least 1 (revisions start at 1)",
            ));
        }
        let release = p
            .release
            .ok_or_else(|| InvalidMessage::missing("plan.release"))?;
        let release = ReleaseTarget {
            name: ReleaseName::new(release.name)
                .map_err(|e| InvalidMessage::new("plan.release.name", e))?,
            namespace: Namespace::new(release.namespace)
                .map_err(|e| InvalidMessage::new("plan.release.namespace", e))?,
            storage_namespace: Namespace::new(release.storage_namespace)
                .map_err(|e| InvalidMessage::new("plan.release.storage_namespace", e))?,
        };
        let chart = p
            .chart
            .ok_or_else(|| InvalidMessage::missing("plan.chart"))?;
        if chart.name.is_empty() {
            return Err(InvalidMessage::missing("plan.chart.name"));
        }
        if chart.version.is_empty() {
            return Err(InvalidMessage::missing("plan.chart.version"));
        }
        let chart = ChartArtifact {
            name: chart.name,
            version: chart.version,
            app_version: some_if_set(chart.app_version),
            digest: ChartDigest::new(chart.digest)
                .map_err(|e| InvalidMessage::new("plan.chart.digest", e))?,
            oci_digest: some_if_set(chart.oci_digest),
        };
        let values = if p.values_json.is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_slice(&p.values_json) {
                Ok(v @ Value::Object(_)) => v,
                Ok(Value::Null) => Value::Object(Default::default()),
                Ok(_) => {
                    return Err(InvalidMessage::new(
                        "plan.values_json",
                        "must be a JSON object",
                    ));
                }
                // serde_json's message has the line and column; it never quotes the input,
                // so no Secret data reaches the error.
                Err(e) => return Err(InvalidMessage::new("plan.values_json", e)),
            }
        };
        let config_digest = Digest::parse(&p.config_digest)
            .map_err(|e| InvalidMessage::new("plan.config_digest", e))?;
        if digest::config_digest_with(config_digest.algorithm(), &values) != config_digest {
            return Err(InvalidMessage::new(
                "plan.config_digest",
                format!("{config_digest} is not the digest of the plan's values"),
            ));
        }
        let options = if p.options_json.is_empty() {
            ReleaseOptions::default()
        } else {
            let mut de = serde_json::Deserializer::from_slice(&p.options_json);
            let options: ReleaseOptions =
                serde_path_to_error::deserialize(&mut de).map_err(|e| {
                    let path = e.path().to_string();
                    let field = if path == "." {
                        "plan.spec".to_owned()
                    } else {
                        format!("plan.spec.{path}")
                    };
                    InvalidMessage::new(field, e.into_inner())
                })?;
            de.end()
                .map_err(|e| InvalidMessage::new("plan.options_json", e))?;
            options
        };
        let requests = p.requests.unwrap_or_default();
        Ok(Self {
            object,
            generation: p.generation,
            revision: PlanRevision::new(p.revision),
            cluster: some_if_set(p.cluster_id)
                .map(ClusterId::new)
                .transpose()
                .map_err(|e| InvalidMessage::new("plan.cluster_id", e))?,
            release,
            chart,
            values,
            config_digest,
            post_renderers_digest: p.post_renderers_digest,
            common_metadata_digest: p.common_metadata_digest,
            options,
            requests: RequestTokens {
                requested_at: some_if_set(requests.requested_at),
                force_at: some_if_set(requests.force_at),
                reset_at: some_if_set(requests.reset_at),
            },
        })
    }
}

// ---------------------------------------------------------------------------------------
// Status: agent -> hub.

fn condition_status_text(s: ConditionStatus) -> &'static str {
    match s {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

impl From<Condition> for v1::Condition {
    fn from(c: Condition) -> Self {
        Self {
            r#type: c.type_,
            status: condition_status_text(c.status).to_owned(),
            reason: c.reason,
            message: c.message,
            observed_generation: c.observed_generation,
            last_transition_time: c.last_transition_time.into(),
        }
    }
}

fn condition(field: &str, c: v1::Condition) -> Result<Condition, InvalidMessage> {
    if c.r#type.is_empty() {
        return Err(InvalidMessage::missing(format!("{field}.type")));
    }
    let status = match c.status.as_str() {
        "True" => ConditionStatus::True,
        "False" => ConditionStatus::False,
        "Unknown" => ConditionStatus::Unknown,
        other => {
            return Err(InvalidMessage::new(
                format!("{field}.status"),
                format!("{other:?} is not one of \"True\", \"False\", \"Unknown\""),
            ));
        }
    };
    let last_transition_time = Timestamp::new(c.last_transition_time)
        .map_err(|e| InvalidMessage::new(format!("{field}.last_transition_time"), e))?;
    Ok(Condition {
        type_: c.r#type,
        status,
        observed_generation: c.observed_generation,
        last_transition_time,
        reason: c.reason,
        message: c.message,
    })
}

impl TryFrom<v1::Condition> for Condition {
    type Error = InvalidMessage;

    fn try_from(c: v1::Condition) -> Result<Self, Self::Error> {
        condition("condition", c)
    }
}

fn hook_phase_text(p: HookPhase) -> &'static str {
    match p {
        HookPhase::Unknown => "Unknown",
        HookPhase::Running => "Running",
        HookPhase::Succeeded => "Succeeded",
        HookPhase::Failed => "Failed",
    }
}

fn release_action(field: &str, s: &str) -> Result<Option<ReleaseAction>, InvalidMessage> {
    Ok(Some(match s {
        "" => return Ok(None),
        "install" => ReleaseAction::Install,
        "upgrade" => ReleaseAction::Upgrade,
        "rollback" => ReleaseAction::Rollback,
        "uninstall" => ReleaseAction::Uninstall,
        "uninstall-remediation" => ReleaseAction::UninstallRemediation,
        other => {
            return Err(InvalidMessage::new(
                field,
                format!("unknown release action {other:?}"),
            ));
        }
    }))
}

impl From<Snapshot> for v1::Snapshot {
    fn from(s: Snapshot) -> Self {
        let has_test_hooks = s.test_hooks.is_some();
        Self {
            api_version: s.api_version,
            digest: s.digest,
            name: s.name,
            namespace: s.namespace,
            version: s.version,
            status: s.status,
            chart_name: s.chart_name,
            chart_version: s.chart_version,
            app_version: s.app_version,
            config_digest: s.config_digest,
            first_deployed: timestamp_text(s.first_deployed),
            last_deployed: timestamp_text(s.last_deployed),
            deleted: timestamp_text(s.deleted),
            test_hooks: s
                .test_hooks
                .unwrap_or_default()
                .into_iter()
                .map(|(name, h)| {
                    let hook = v1::TestHookStatus {
                        last_started: timestamp_text(h.last_started),
                        last_completed: timestamp_text(h.last_completed),
                        phase: h.phase.map(hook_phase_text).unwrap_or_default().to_owned(),
                    };
                    (name, hook)
                })
                .collect(),
            oci_digest: s.oci_digest,
            action: s.action.map(|a| a.as_str().to_owned()).unwrap_or_default(),
            has_test_hooks,
        }
    }
}

fn snapshot(field: &str, s: v1::Snapshot) -> Result<Snapshot, InvalidMessage> {
    let test_hooks = if s.has_test_hooks || !s.test_hooks.is_empty() {
        let mut hooks = BTreeMap::new();
        for (name, h) in s.test_hooks {
            let hf = format!("{field}.test_hooks[{name:?}]");
            let phase = match h.phase.as_str() {
                "" => None,
                "Unknown" => Some(HookPhase::Unknown),
                "Running" => Some(HookPhase::Running),
                "Succeeded" => Some(HookPhase::Succeeded),
                "Failed" => Some(HookPhase::Failed),
                other => {
                    return Err(InvalidMessage::new(
                        format!("{hf}.phase"),
                        format!("unknown hook phase {other:?}"),
                    ));
                }
            };
            let hook = TestHookStatus {
                last_started: timestamp(&format!("{hf}.last_started"), h.last_started)?,
                last_completed: timestamp(&format!("{hf}.last_completed"), h.last_completed)?,
                phase,
            };
            hooks.insert(name, hook);
        }
        Some(hooks)
    } else {
        None
    };
    Ok(Snapshot {
        api_version: s.api_version,
        digest: s.digest,
        name: s.name,
        namespace: s.namespace,
        version: s.version,
        status: s.status,
        action: release_action(&format!("{field}.action"), &s.action)?,
        chart_name: s.chart_name,
        chart_version: s.chart_version,
        app_version: s.app_version,
        config_digest: s.config_digest,
        first_deployed: timestamp(&format!("{field}.first_deployed"), s.first_deployed)?,
        last_deployed: timestamp(&format!("{field}.last_deployed"), s.last_deployed)?,
        deleted: timestamp(&format!("{field}.deleted"), s.deleted)?,
        test_hooks,
        oci_digest: s.oci_digest,
    })
}

impl TryFrom<v1::Snapshot> for Snapshot {
    type Error = InvalidMessage;

    fn try_from(s: v1::Snapshot) -> Result<Self, Self::Error> {
        snapshot("snapshot", s)
    }
}

impl From<HelmReleaseStatus> for v1::ReleaseStatus {
    fn from(s: HelmReleaseStatus) -> Self {
        let has_inventory = s.inventory.is_some();
        Self {
            observed_generation: s.observed_generation,
            conditions: s.conditions.into_iter().map(Into::into).collect(),
            history: s.history.into_iter().map(Into::into).collect(),
            failures: s.failures,
            install_failures: s.install_failures,
            upgrade_failures: s.upgrade_failures,
            last_attempted_generation: s.last_attempted_generation,
            last_attempted_revision: s.last_attempted_revision,
            last_attempted_revision_digest: s.last_attempted_revision_digest,
            last_attempted_config_digest: s.last_attempted_config_digest,
            last_attempted_release_action: s
                .last_attempted_release_action
                .map(|a| a.as_str().to_owned())
                .unwrap_or_default(),
            last_attempted_release_action_duration: s
                .last_attempted_release_action_duration
                .map(String::from)
                .unwrap_or_default(),
            last_handled_reconcile_at: s.last_handled_reconcile_at,
            last_handled_force_at: s.last_handled_force_at,
            last_handled_reset_at: s.last_handled_reset_at,
            storage_namespace: s.storage_namespace,
            observed_post_renderers_digest: s.observed_post_renderers_digest,
            observed_common_metadata_digest: s.observed_common_metadata_digest,
            inventory: s
                .inventory
                .map(|i| i.entries)
                .unwrap_or_default()
                .into_iter()
                .map(|r| v1::InventoryEntry {
                    id: r.id,
                    version: r.version,
                })
                .collect(),
            has_inventory,
        }
    }
}

impl TryFrom<v1::ReleaseStatus> for HelmReleaseStatus {
    type Error = InvalidMessage;

    fn try_from(s: v1::ReleaseStatus) -> Result<Self, Self::Error> {
        let conditions = s
            .conditions
            .into_iter()
            .enumerate()
            .map(|(i, c)| condition(&format!("status.conditions[{i}]"), c))
            .collect::<Result<_, _>>()?;
        let history = s
            .history
            .into_iter()
            .enumerate()
            .map(|(i, h)| snapshot(&format!("status.history[{i}]"), h))
            .collect::<Result<_, _>>()?;
        let inventory = (s.has_inventory || !s.inventory.is_empty()).then(|| ResourceInventory {
            entries: s
                .inventory
                .into_iter()
                .map(|e| ResourceRef {
                    id: e.id,
                    version: e.version,
                })
                .collect(),
        });
        let last_attempted_release_action = release_action(
            "status.last_attempted_release_action",
            &s.last_attempted_release_action,
        )?;
        let last_attempted_release_action_duration =
            some_if_set(s.last_attempted_release_action_duration)
                .map(|d| GoDuration::parse(&d))
                .transpose()
                .map_err(|e| {
                    InvalidMessage::new("status.last_attempted_release_action_duration", e)
                })?;
        Ok(Self {
            observed_generation: s.observed_generation,
            observed_post_renderers_digest: s.observed_post_renderers_digest,
            observed_common_metadata_digest: s.observed_common_metadata_digest,
            last_attempted_generation: s.last_attempted_generation,
            conditions,
            helm_chart: String::new(),
            storage_namespace: s.storage_namespace,
            history,
            inventory,
            last_attempted_release_action,
            last_attempted_release_action_duration,
            failures: s.failures,
            install_failures: s.install_failures,
            upgrade_failures: s.upgrade_failures,
            last_attempted_revision: s.last_attempted_revision,
            last_attempted_revision_digest: s.last_attempted_revision_digest,
            last_attempted_values_checksum: String::new(),
            last_release_revision: 0,
            last_attempted_config_digest: s.last_attempted_config_digest,
            last_handled_reset_at: s.last_handled_reset_at,
            last_handled_reconcile_at: s.last_handled_reconcile_at,
            last_handled_force_at: s.last_handled_force_at,
            // The hub's record; never on the wire.
            plan: None,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Events: agent -> hub.

/// An Event of a release with the HelmRelease it is about and when it happened: what the
/// wire's `Event` carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEvent {
    /// The HelmRelease on the hub.
    pub object: plan::ObjectRef,
    /// When the agent recorded it.
    pub time: Timestamp,
    /// Type, reason, message and annotations.
    pub event: Event,
}

impl From<ObjectEvent> for v1::Event {
    fn from(e: ObjectEvent) -> Self {
        Self {
            object: Some(e.object.into()),
            r#type: match e.event.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .to_owned(),
            reason: e.event.reason,
            message: e.event.message,
            time: e.time.into(),
            annotations: e.event.annotations.into_iter().collect(),
            plan_revision: 0,
        }
    }
}

impl TryFrom<v1::Event> for ObjectEvent {
    type Error = InvalidMessage;

    fn try_from(e: v1::Event) -> Result<Self, Self::Error> {
        let object = object_ref("event.object", e.object)?;
        let type_ = match e.r#type.as_str() {
            "Normal" => EventType::Normal,
            "Warning" => EventType::Warning,
            other => {
                return Err(InvalidMessage::new(
                    "event.type",
                    format!("{other:?} is not \"Normal\" or \"Warning\""),
                ));
            }
        };
        if e.reason.is_empty() {
            return Err(InvalidMessage::missing("event.reason"));
        }
        let time = Timestamp::new(e.time).map_err(|err| InvalidMessage::new("event.time", err))?;
        Ok(Self {
            object,
            time,
            event: Event {
                type_,
                reason: e.reason,
                message: e.message,
                annotations: e.annotations.into_iter().collect(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use flotilla_core::ids::{ChartDigest, PlanRevision};
    use flotilla_core::meta::{Condition, ConditionStatus, Timestamp};
    use flotilla_core::plan::{self, ChartArtifact};
    use flotilla_core::release::{Event, EventType};
    use flotilla_core::spec::HelmRelease;
    use flotilla_core::status::{
        HelmReleaseStatus, HookPhase, ReleaseAction, ResourceInventory, ResourceRef, Snapshot,
        TestHookStatus,
    };
    use serde_json::json;

    use super::{InvalidMessage, ObjectEvent};
    use crate::v1;

    /// A change to a wire message that makes it invalid.
    type Edit<M> = Box<dyn FnOnce(&mut M)>;

    fn domain_plan() -> plan::ReleasePlan {
        let hr = HelmRelease::from_value(json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {
                "name": "podinfo", "namespace": "apps", "generation": 4,
                "annotations": {"reconcile.fluxcd.io/requestedAt": "now",
                                "reconcile.fluxcd.io/forceAt": "now"}
            },
            "spec": {
                "interval": "5m",
                "chartRef": {"kind": "OCIRepository", "name": "podinfo"},
                "clusterRef": {"name": "edge-1"},
                "targetNamespace": "web",
                "storageNamespace": "helm",
                "timeout": "90s",
                "maxHistory": 3,
                "serviceAccountName": "deployer",
                "install": {"replace": true, "crds": "CreateReplace",
                            "remediation": {"retries": 3}},
                "upgrade": {"preserveValues": true, "disableSchemaValidation": true,
                            "remediation": {"retries": -1, "strategy": "uninstall"}},
                "test": {"enable": true, "ignoreFailures": true},
                "driftDetection": {"mode": "enabled",
                                   "ignore": [{"paths": ["/spec/replicas"]}]},
                "commonMetadata": {"labels": {"team": "web"},
                                   "annotations": {"owner": "ops"}},
                "postRenderers": [{"kustomize": {"images": [{"name": "nginx", "newTag": "1.27"}]}}]
            }
        }))
        .expect("a valid HelmRelease");
        let chart = ChartArtifact {
            name: "podinfo".into(),
            version: "6.5.3+0123456789ab".into(),
            app_version: Some("6.5.3".into()),
            digest: ChartDigest::of_bytes(b"podinfo-6.5.3.tgz"),
            oci_digest: Some("sha256:0123456789ab".into()),
        };
        let values = json!({"replicaCount": 2, "ingress": {"hosts": ["a", "b"]}});
        plan::ReleasePlan::from_helm_release(&hr, PlanRevision::new(7), chart, values)
            .expect("a plan")
    }

    fn ts(s: &str) -> Timestamp {
        Timestamp::new(s).expect("a valid timestamp")
    }

    fn domain_status() -> HelmReleaseStatus {
        let snapshot =
            |version: u32, status: &str, hooks: Option<BTreeMap<String, TestHookStatus>>| {
                Snapshot {
                    api_version: "v2".into(),
                    digest: format!("sha256:{version:064x}"),
                    name: "apps-podinfo".into(),
                    namespace: "web".into(),
                    version,
                    status: status.into(),
                    action: Some(ReleaseAction::Upgrade),
                    chart_name: "podinfo".into(),
                    chart_version: "6.5.3".into(),
                    app_version: "6.5.3".into(),
                    config_digest: "sha256:abc".into(),
                    first_deployed: Some(ts("2026-11-01T10:00:00Z")),
                    last_deployed: Some(ts("2026-11-02T10:00:00Z")),
                    deleted: None,
                    test_hooks: hooks,
                    oci_digest: String::new(),
                }
            };
        let mut hooks = BTreeMap::new();
        hooks.insert(
            "podinfo-test".to_owned(),
            TestHookStatus {
                last_started: Some(ts("2026-11-02T10:00:05Z")),
                last_completed: Some(ts("2026-11-02T10:00:09Z")),
                phase: Some(HookPhase::Succeeded),
            },
        );
        hooks.insert("never-run".to_owned(), TestHookStatus::default());
        HelmReleaseStatus {
            observed_generation: 4,
            observed_post_renderers_digest: "sha256:pr".into(),
            observed_common_metadata_digest: "sha256:cm".into(),
            last_attempted_generation: 4,
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: ConditionStatus::True,
                observed_generation: 4,
                last_transition_time: ts("2026-11-02T10:00:10Z"),
                reason: "UpgradeSucceeded".into(),
                message: "Helm upgrade succeeded".into(),
            }],
            helm_chart: String::new(),
            storage_namespace: "helm".into(),
            // Newest tested with hooks, then tested with none (empty map), then untested.
            history: vec![
                snapshot(3, "deployed", Some(hooks)),
                snapshot(2, "superseded", Some(BTreeMap::new())),
                snapshot(1, "superseded", None),
            ],
            inventory: Some(ResourceInventory {
                entries: vec![ResourceRef {
                    id: "web_podinfo_apps_Deployment".into(),
                    version: "v1".into(),
                }],
            }),
            last_attempted_release_action: Some(ReleaseAction::Upgrade),
            last_attempted_release_action_duration: Some(
                "1m30s".parse().expect("a valid duration"),
            ),
            failures: 2,
            install_failures: 0,
            upgrade_failures: 1,
            last_attempted_revision: "6.5.3".into(),
            last_attempted_revision_digest: "sha256:0123".into(),
            last_attempted_values_checksum: String::new(),
            last_release_revision: 0,
            last_attempted_config_digest: "sha256:abc".into(),
            last_handled_reset_at: "r".into(),
            last_handled_reconcile_at: "now".into(),
            last_handled_force_at: "now".into(),
            plan: None,
        }
    }

    /// Through the wire bytes and back.
    fn over_the_wire<M: prost::Message + Default>(m: M) -> M {
        M::decode(m.encode_to_vec().as_slice()).expect("what we encode decodes")
    }

    #[test]
    fn a_plan_survives_the_wire_field_for_field() {
        let plan = domain_plan();
        let back = plan::ReleasePlan::try_from(over_the_wire(v1::ReleasePlan::from(plan.clone())))
            .expect("our own plan is valid");
        assert_eq!(back, plan);
        assert!(back.options.install.replace);
        assert_eq!(back.cluster.as_ref().map(|c| c.as_str()), Some("edge-1"));
    }

    #[test]
    fn a_plan_without_options_values_or_tokens_gets_the_defaults() {
        let mut wire = v1::ReleasePlan::from(domain_plan());
        wire.values_json.clear();
        wire.options_json.clear();
        wire.requests = None;
        wire.cluster_id.clear();
        wire.config_digest = flotilla_core::digest::config_digest(&json!({})).into();
        let plan = plan::ReleasePlan::try_from(wire).expect("a minimal plan is valid");
        assert_eq!(plan.values, json!({}));
        assert_eq!(plan.options, plan::ReleaseOptions::default());
        assert_eq!(plan.requests, plan::RequestTokens::default());
        assert_eq!(plan.cluster, None);
    }

    fn refused(edit: impl FnOnce(&mut v1::ReleasePlan)) -> InvalidMessage {
        let mut wire = v1::ReleasePlan::from(domain_plan());
        edit(&mut wire);
        plan::ReleasePlan::try_from(wire).expect_err("the plan must be refused")
    }

    #[test]
    fn bad_plans_are_refused_naming_the_field() {
        let options_with = |patch: serde_json::Value| {
            let mut options: serde_json::Value =
                serde_json::from_slice(&v1::ReleasePlan::from(domain_plan()).options_json)
                    .expect("options are JSON");
            json_patch(&mut options, patch);
            serde_json::to_vec(&options).expect("JSON")
        };
        let cases: Vec<(Edit<v1::ReleasePlan>, &str, &str)> = vec![
            (Box::new(|p| p.object = None), "plan.object", "required"),
            (
                Box::new(|p| p.object.as_mut().expect("set").name = "Not_A_Name".into()),
                "plan.object.name",
                "Not_A_Name",
            ),
            (Box::new(|p| p.revision = 0), "plan.revision", "at least 1"),
            (Box::new(|p| p.release = None), "plan.release", "required"),
            (
                Box::new(|p| p.release.as_mut().expect("set").name = "x".repeat(54)),
                "plan.release.name",
                "53",
            ),
            (
                Box::new(|p| p.release.as_mut().expect("set").storage_namespace.clear()),
                "plan.release.storage_namespace",
                "empty",
            ),
            (Box::new(|p| p.chart = None), "plan.chart", "required"),
            (
                Box::new(|p| p.chart.as_mut().expect("set").version.clear()),
                "plan.chart.version",
                "required",
            ),
            (
                Box::new(|p| p.chart.as_mut().expect("set").digest = "md5:abc".into()),
                "plan.chart.digest",
                "md5:abc",
            ),
            (
                Box::new(|p| p.values_json = b"[1, 2]".to_vec()),
                "plan.values_json",
                "must be a JSON object",
            ),
            (
                Box::new(|p| p.values_json = b"{\"a\": ".to_vec()),
                "plan.values_json",
                "EOF",
            ),
            (
                Box::new(|p| p.config_digest = "sha256:nothex".into()),
                "plan.config_digest",
                "malformed hex",
            ),
            (
                Box::new(|p| {
                    p.config_digest = flotilla_core::digest::config_digest(&json!({"x": 1})).into()
                }),
                "plan.config_digest",
                "is not the digest of the plan's values",
            ),
            (
                Box::new(move |p| {
                    p.options_json =
                        options_with(json!({"install": {"remediation": {"retries": "three"}}}))
                }),
                "plan.spec.install.remediation.retries",
                "invalid type: string \"three\"",
            ),
            (
                Box::new(|p| p.options_json = b"{\"timeout\": \"ten minutes\"}".to_vec()),
                "plan.spec.timeout",
                "ten minutes",
            ),
            (
                Box::new(|p| p.options_json = b"\"fast\"".to_vec()),
                "plan.spec",
                "invalid type: string \"fast\"",
            ),
            (
                Box::new(|p| p.options_json = b"{} {}".to_vec()),
                "plan.options_json",
                "trailing characters",
            ),
            (
                Box::new(|p| p.cluster_id = "Edge_1".into()),
                "plan.cluster_id",
                "Edge_1",
            ),
        ];
        for (edit, field, needle) in cases {
            let err = refused(edit);
            assert_eq!(err.field, field, "{err}");
            assert!(
                err.message.contains(needle),
                "{err} should mention {needle:?}"
            );
            assert!(err.to_string().starts_with(&format!("{field}: ")), "{err}");
        }
    }

    fn json_patch(target: &mut serde_json::Value, patch: serde_json::Value) {
        match (target, patch) {
            (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    json_patch(t.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (t, p) => *t = p,
        }
    }

    #[test]
    fn a_status_survives_the_wire_field_for_field() {
        let status = domain_status();
        let back =
            HelmReleaseStatus::try_from(over_the_wire(v1::ReleaseStatus::from(status.clone())))
                .expect("our own status is valid");
        assert_eq!(back, status);
        // The three meanings of test hooks survive: untested, tested without hooks, hooks.
        assert!(!back.history[2].has_been_tested());
        assert!(back.history[1].has_been_tested());
        assert_eq!(
            back.history[0].test_hooks.as_ref().map(BTreeMap::len),
            Some(2)
        );
    }

    #[test]
    fn no_inventory_and_an_empty_inventory_stay_apart() {
        for inventory in [None, Some(ResourceInventory::default())] {
            let status = HelmReleaseStatus {
                inventory: inventory.clone(),
                ..HelmReleaseStatus::default()
            };
            let back = HelmReleaseStatus::try_from(over_the_wire(v1::ReleaseStatus::from(status)))
                .expect("valid");
            assert_eq!(back.inventory, inventory);
        }
    }

    #[test]
    fn bad_statuses_are_refused_naming_the_field() {
        let cases: Vec<(Edit<v1::ReleaseStatus>, &str, &str)> = vec![
            (
                Box::new(|s| s.conditions[0].status = "Yes".into()),
                "status.conditions[0].status",
                "\"Yes\"",
            ),
            (
                Box::new(|s| s.conditions[0].last_transition_time = "yesterday".into()),
                "status.conditions[0].last_transition_time",
                "RFC 3339",
            ),
            (
                Box::new(|s| s.conditions[0].r#type.clear()),
                "status.conditions[0].type",
                "required",
            ),
            (
                Box::new(|s| s.history[1].action = "reinstall".into()),
                "status.history[1].action",
                "reinstall",
            ),
            (
                Box::new(|s| s.history[0].last_deployed = "2026-13".into()),
                "status.history[0].last_deployed",
                "RFC 3339",
            ),
            (
                Box::new(|s| {
                    s.history[0]
                        .test_hooks
                        .get_mut("podinfo-test")
                        .expect("set")
                        .phase = "Done".into()
                }),
                "status.history[0].test_hooks[\"podinfo-test\"].phase",
                "Done",
            ),
            (
                Box::new(|s| s.last_attempted_release_action_duration = "90".into()),
                "status.last_attempted_release_action_duration",
                "90",
            ),
            (
                Box::new(|s| s.last_attempted_release_action = "test".into()),
                "status.last_attempted_release_action",
                "test",
            ),
        ];
        for (edit, field, needle) in cases {
            let mut wire = v1::ReleaseStatus::from(domain_status());
            edit(&mut wire);
            let err = HelmReleaseStatus::try_from(wire).expect_err("the status must be refused");
            assert_eq!(err.field, field, "{err}");
            assert!(
                err.message.contains(needle),
                "{err} should mention {needle:?}"
            );
        }
    }

    fn domain_event() -> ObjectEvent {
        ObjectEvent {
            object: domain_plan().object,
            time: ts("2026-11-02T10:00:10Z"),
            event: Event {
                type_: EventType::Warning,
                reason: "UpgradeFailed".into(),
                message: "Helm upgrade failed for release web/apps-podinfo".into(),
                annotations: BTreeMap::from([(
                    "helm.toolkit.fluxcd.io/revision".to_owned(),
                    "6.5.3".to_owned(),
                )]),
            },
        }
    }

    #[test]
    fn an_event_survives_the_wire_and_bad_ones_are_refused() {
        let event = domain_event();
        let back = ObjectEvent::try_from(over_the_wire(v1::Event::from(event.clone())))
            .expect("our own event is valid");
        assert_eq!(back, event);

        let cases: Vec<(Edit<v1::Event>, &str)> = vec![
            (Box::new(|e| e.r#type = "Error".into()), "event.type"),
            (Box::new(|e| e.reason.clear()), "event.reason"),
            (Box::new(|e| e.time = "now".into()), "event.time"),
            (Box::new(|e| e.object = None), "event.object"),
        ];
        for (edit, field) in cases {
            let mut wire = v1::Event::from(domain_event());
            edit(&mut wire);
            let err = ObjectEvent::try_from(wire).expect_err("the event must be refused");
            assert_eq!(err.field, field, "{err}");
        }
    }

    #[test]
    fn a_condition_and_a_snapshot_convert_on_their_own() {
        let status = domain_status();
        let c = status.conditions[0].clone();
        assert_eq!(Condition::try_from(v1::Condition::from(c.clone())), Ok(c));
        let s = status.history[0].clone();
        assert_eq!(Snapshot::try_from(v1::Snapshot::from(s.clone())), Ok(s));
        let err = Snapshot::try_from(v1::Snapshot {
            deleted: "never".into(),
            ..Default::default()
        })
        .expect_err("refused");
        assert_eq!(err.field, "snapshot.deleted");
    }
}
