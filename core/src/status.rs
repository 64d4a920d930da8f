//! The observed state of a HelmRelease: conditions, history snapshots, failure counters,
//! last attempted and last handled fields.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::duration::GoDuration;
use crate::meta::{Condition, Timestamp, is_zero_i64};

/// The snapshot `apiVersion` Flux writes since v1.5 (digest verification applies).
pub const SNAPSHOT_API_VERSION: &str = "v2";
/// How many snapshots a history keeps when no previous good release bounds it.
pub const MAX_HISTORY_SNAPSHOTS: usize = 5;

/// The status of a HelmRelease.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("default" = {"observedGeneration": -1}))
)]
#[serde(rename_all = "camelCase")]
pub struct HelmReleaseStatus {
    /// Last generation that reached Ready or stalled.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub observed_generation: i64,
    /// Digest of `spec.postRenderers` at the last summary.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub observed_post_renderers_digest: String,
    /// Digest of `spec.commonMetadata` at the last summary.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub observed_common_metadata_digest: String,
    /// Generation of the last release attempt.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub last_attempted_generation: i64,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `namespace/name` of the HelmChart made from `spec.chart`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub helm_chart: String,
    /// Namespace of the Helm storage in use.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 63)))]
    pub storage_namespace: String,
    /// Release snapshots, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Snapshot>,
    /// Objects applied by the release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<ResourceInventory>,
    /// `install` or `upgrade`: selects the active remediation and retry strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(schema_with = "install_or_upgrade"))]
    pub last_attempted_release_action: Option<ReleaseAction>,
    /// Duration of the last release action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub last_attempted_release_action_duration: Option<GoDuration>,
    /// All failures since the last reset.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub failures: i64,
    /// Install failures since the last reset.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub install_failures: i64,
    /// Upgrade failures since the last reset.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub upgrade_failures: i64,
    /// Chart version of the last attempt.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_attempted_revision: String,
    /// OCI artifact digest of the last attempt.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_attempted_revision_digest: String,
    /// Deprecated SHA-1 values checksum; always cleared.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_attempted_values_checksum: String,
    /// Deprecated; always cleared.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub last_release_revision: i64,
    /// Config digest of the values of the last attempt.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_attempted_config_digest: String,
    /// Last `reconcile.fluxcd.io/resetAt` value handled.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_handled_reset_at: String,
    /// Last `reconcile.fluxcd.io/requestedAt` value handled.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_handled_reconcile_at: String,
    /// Last `reconcile.fluxcd.io/forceAt` value handled.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_handled_force_at: String,
    /// The hub's plan for this HelmRelease, recorded by the hub's status writer for the
    /// children of a HelmReleaseSet (not a Flux field; agents never set it): lets a
    /// restarted hub give an unchanged plan its old revision without an annotation write
    /// per plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanRecord>,
}

/// A plan revision and the digest of the plan it was given to (`status.plan`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PlanRecord {
    /// The plan revision.
    pub revision: u64,
    /// `sha256:<hex>` of the plan with its revision zeroed.
    #[cfg_attr(feature = "schema", schemars(length(max = 71)))]
    pub digest: String,
}

impl HelmReleaseStatus {
    /// Zeroes the three failure counters.
    pub fn clear_failures(&mut self) {
        self.failures = 0;
        self.install_failures = 0;
        self.upgrade_failures = 0;
    }

    /// The newest snapshot.
    pub fn latest(&self) -> Option<&Snapshot> {
        self.history.iter().max_by_key(|s| s.version)
    }

    /// Sorts the history newest first (by version).
    pub fn sort_history(&mut self) {
        self.history.sort_by_key(|s| std::cmp::Reverse(s.version));
    }

    /// The rollback target: the newest older snapshot that is `deployed` or `superseded`
    /// and, unless `ignore_tests`, has no failed test.
    pub fn previous(&self, ignore_tests: bool) -> Option<&Snapshot> {
        let mut sorted: Vec<&Snapshot> = self.history.iter().collect();
        sorted.sort_by_key(|s| std::cmp::Reverse(s.version));
        sorted
            .into_iter()
            .skip(1)
            .find(|s| s.is_good_rollback_target(ignore_tests))
    }

    /// Flux's `Truncate`: keep everything up to and including the previous good snapshot;
    /// when there is none, keep the newest five.
    pub fn truncate_history(&mut self, ignore_tests: bool) {
        if self.history.len() < 2 {
            return;
        }
        self.sort_history();
        if let Some(pos) = self
            .history
            .iter()
            .skip(1)
            .position(|s| s.is_good_rollback_target(ignore_tests))
        {
            self.history.truncate(pos + 2);
            return;
        }
        self.history.truncate(MAX_HISTORY_SNAPSHOTS);
    }

    /// Flux's `TruncateIgnoringPreviousSnapshots`: keep the newest five.
    pub fn truncate_history_ignoring_previous(&mut self) {
        self.sort_history();
        self.history.truncate(MAX_HISTORY_SNAPSHOTS);
    }
}

/// `lastAttemptedReleaseAction` holds only the two actions that select a remediation.
#[cfg(feature = "schema")]
fn install_or_upgrade(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "enum": ["install", "upgrade"]})
}

/// A recorded release action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseAction {
    /// `install`.
    Install,
    /// `upgrade`.
    Upgrade,
    /// `rollback`.
    Rollback,
    /// `uninstall`.
    Uninstall,
    /// `uninstall-remediation`.
    UninstallRemediation,
}

impl ReleaseAction {
    /// The API string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Install => "install",
            Self::Upgrade => "upgrade",
            Self::Rollback => "rollback",
            Self::Uninstall => "uninstall",
            Self::UninstallRemediation => "uninstall-remediation",
        }
    }
}

impl fmt::Display for ReleaseAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The status of a Helm release record (Helm's `release.Status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StorageStatus {
    /// `unknown`.
    Unknown,
    /// `deployed`.
    Deployed,
    /// `uninstalled`.
    Uninstalled,
    /// `superseded`.
    Superseded,
    /// `failed`.
    Failed,
    /// `uninstalling`.
    Uninstalling,
    /// `pending-install`.
    PendingInstall,
    /// `pending-upgrade`.
    PendingUpgrade,
    /// `pending-rollback`.
    PendingRollback,
}

impl StorageStatus {
    /// Helm's string for the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Deployed => "deployed",
            Self::Uninstalled => "uninstalled",
            Self::Superseded => "superseded",
            Self::Failed => "failed",
            Self::Uninstalling => "uninstalling",
            Self::PendingInstall => "pending-install",
            Self::PendingUpgrade => "pending-upgrade",
            Self::PendingRollback => "pending-rollback",
        }
    }

    /// True for the three `pending-*` statuses (Helm's `IsPending`).
    pub fn is_pending(self) -> bool {
        matches!(
            self,
            Self::PendingInstall | Self::PendingUpgrade | Self::PendingRollback
        )
    }

    /// Parses Helm's string.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "unknown" => Self::Unknown,
            "deployed" => Self::Deployed,
            "uninstalled" => Self::Uninstalled,
            "superseded" => Self::Superseded,
            "failed" => Self::Failed,
            "uninstalling" => Self::Uninstalling,
            "pending-install" => Self::PendingInstall,
            "pending-upgrade" => Self::PendingUpgrade,
            "pending-rollback" => Self::PendingRollback,
            _ => return None,
        })
    }
}

impl fmt::Display for StorageStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A snapshot of one release version, as recorded in `status.history`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Snapshot format; `v2` enables digest verification.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// Digest of the release observation.
    pub digest: String,
    /// Release name.
    pub name: String,
    /// Release namespace.
    pub namespace: String,
    /// Release version.
    pub version: u32,
    /// Release status (Helm string).
    pub status: String,
    /// The action that produced this snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ReleaseAction>,
    /// Chart name.
    pub chart_name: String,
    /// Chart version.
    pub chart_version: String,
    /// App version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub app_version: String,
    /// Digest of the release's values.
    pub config_digest: String,
    /// First deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_deployed: Option<Timestamp>,
    /// Last deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_deployed: Option<Timestamp>,
    /// Deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<Timestamp>,
    /// Test hook results; absent when tests never ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_hooks: Option<BTreeMap<String, TestHookStatus>>,
    /// OCI artifact digest of the chart.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub oci_digest: String,
}

impl Snapshot {
    /// `<namespace>/<name>.v<version>`.
    pub fn full_release_name(&self) -> String {
        format!("{}/{}.v{}", self.namespace, self.name, self.version)
    }

    /// `<chartName>@<chartVersion>`.
    pub fn versioned_chart_name(&self) -> String {
        format!("{}@{}", self.chart_name, self.chart_version)
    }

    /// True when any test hook is in `phase`.
    pub fn has_test_in_phase(&self, phase: HookPhase) -> bool {
        self.test_hooks
            .iter()
            .flat_map(|m| m.values())
            .any(|h| h.phase == Some(phase))
    }

    /// Flux's `HasBeenTested`: no map means untested; an empty map or any failed hook
    /// means tested; otherwise tested only when every hook succeeded.
    pub fn has_been_tested(&self) -> bool {
        let Some(hooks) = &self.test_hooks else {
            return false;
        };
        if hooks.is_empty() || self.has_test_in_phase(HookPhase::Failed) {
            return true;
        }
        hooks
            .values()
            .all(|h| h.phase == Some(HookPhase::Succeeded))
    }

    /// True when this snapshot is the given release version.
    pub fn targets(&self, name: &str, namespace: &str, version: u32) -> bool {
        self.name == name && self.namespace == namespace && self.version == version
    }

    fn is_good_rollback_target(&self, ignore_tests: bool) -> bool {
        (self.status == StorageStatus::Deployed.as_str()
            || self.status == StorageStatus::Superseded.as_str())
            && (ignore_tests || !self.has_test_in_phase(HookPhase::Failed))
    }
}

/// The phase of a Helm hook run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum HookPhase {
    /// `Unknown`.
    Unknown,
    /// `Running`.
    Running,
    /// `Succeeded`.
    Succeeded,
    /// `Failed`.
    Failed,
}

/// The last run of a test hook; Flux writes `null` for a hook that never ran.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", from = "Option<TestHookStatusWire>")]
pub struct TestHookStatus {
    /// When it last started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_started: Option<Timestamp>,
    /// When it last completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_completed: Option<Timestamp>,
    /// Its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<HookPhase>,
}

#[derive(Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
struct TestHookStatusWire {
    #[serde(default)]
    last_started: Option<Timestamp>,
    #[serde(default)]
    last_completed: Option<Timestamp>,
    #[serde(default)]
    phase: Option<HookPhase>,
}

impl From<Option<TestHookStatusWire>> for TestHookStatus {
    fn from(w: Option<TestHookStatusWire>) -> Self {
        w.map(|w| TestHookStatus {
            last_started: w.last_started,
            last_completed: w.last_completed,
            phase: w.phase,
        })
        .unwrap_or_default()
    }
}

/// Objects applied by a release.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResourceInventory {
    /// Entries.
    pub entries: Vec<ResourceRef>,
}

/// One object of the inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// `<namespace>_<name>_<group>_<kind>`.
    pub id: String,
    /// API version.
    #[serde(rename = "v")]
    pub version: String,
}

/// The kinds whose names may hold `:` (RBAC); cli-utils writes it as `__` in an id.
const RBAC_KINDS: [&str; 4] = ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"];
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

impl ResourceRef {
    /// The entry Flux records for an object (cli-utils' `ObjMetadata.String()`): id
    /// `<namespace>_<name>_<group>_<kind>` (empty namespace for cluster-scoped objects,
    /// empty group for the core group, `:` in RBAC names written `__`), and the version
    /// part of `api_version` (`apps/v1` → `v1`).
    pub fn new(namespace: &str, name: &str, api_version: &str, kind: &str) -> ResourceRef {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let name = if group == RBAC_GROUP && RBAC_KINDS.contains(&kind) {
            name.replace(':', "__")
        } else {
            name.to_owned()
        };
        ResourceRef {
            id: format!("{namespace}_{name}_{group}_{kind}"),
            version: version.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ResourceRef;

    #[test]
    fn inventory_ids_are_namespace_name_group_kind_as_flux_writes_them() {
        let cases = [
            // (namespace, name, apiVersion, kind) → (id, v)
            (
                ("default", "web", "apps/v1", "Deployment"),
                ("default_web_apps_Deployment", "v1"),
            ),
            (
                ("default", "web-config", "v1", "ConfigMap"),
                ("default_web-config__ConfigMap", "v1"),
            ),
            (("", "web", "v1", "Namespace"), ("_web__Namespace", "v1")),
            (
                (
                    "",
                    "widgets.example.dev",
                    "apiextensions.k8s.io/v1",
                    "CustomResourceDefinition",
                ),
                (
                    "_widgets.example.dev_apiextensions.k8s.io_CustomResourceDefinition",
                    "v1",
                ),
            ),
            (
                (
                    "",
                    "system:web",
                    "rbac.authorization.k8s.io/v1",
                    "ClusterRole",
                ),
                ("_system__web_rbac.authorization.k8s.io_ClusterRole", "v1"),
            ),
            (
                ("default", "a:b", "example.dev/v1beta1", "Widget"),
                ("default_a:b_example.dev_Widget", "v1beta1"),
            ),
        ];
        for ((ns, name, api_version, kind), (id, v)) in cases {
            let r = ResourceRef::new(ns, name, api_version, kind);
            assert_eq!((r.id.as_str(), r.version.as_str()), (id, v), "{name}");
        }
    }
}
