//! The set controller's decisions beyond [`flotilla_core::rollout::decide`], pure and
//! table-tested: a child's health and memory (revision, promotion time), a cluster's
//! availability, the fate of a child whose cluster left the set, whether a child's spec was
//! edited by hand, which ControllerRevisions to trim, and the Events a status change makes.

use std::collections::BTreeMap;

use flotilla_api::{HelmRelease, ManagedCluster};
use flotilla_core::meta::{
    Condition, ConditionStatus, Conditions as _, Timestamp, condition, reason,
};
use flotilla_core::rollout::{
    Availability, ChildHealth, ChildObservation, conditions as set_conditions,
};
use flotilla_core::set::{
    HelmReleaseSetStatus, PROMOTED_AT_ANNOTATION, REVISION_LABEL, SetRevision, StopMatchingPolicy,
    TargetCustomization, WaveState,
};
use kube::ResourceExt as _;
use serde_json::Value;

/// Reasons of a Ready=False child whose remediation failed (Flux's terminal reasons).
const REMEDIATION_FAILED: [&str; 4] = [
    reason::RETRIES_EXCEEDED,
    reason::ROLLBACK_FAILED,
    reason::UNINSTALL_FAILED,
    reason::MISSING_ROLLBACK_TARGET,
];

/// The most of a child's message kept in the set's status.
const CHILD_MESSAGE_LEN: usize = 256;

fn short(message: &str) -> String {
    let one_line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(CHILD_MESSAGE_LEN) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}

/// A child's health at its current generation (the engine's [`ChildHealth`]):
///
/// - **Failed** when `Stalled` is True, or `Ready` is False with a reason of failed
///   remediation (`RetriesExceeded`, `RollbackFailed`, `UninstallFailed`,
///   `MissingRollbackTarget`) or a False `Remediated` condition, for its generation;
/// - **Ready** when `Ready` is True for its generation (and `TestSuccess` is not False);
///   also when it reached Ready at this generation (`status.observedGeneration` is the
///   generation, `Released` True) and is merely reconciling again (`Ready` Unknown): an
///   interval or drift reconcile of an unchanged spec is not a new rollout. `since` is the
///   time it became Ready (the `Released` condition's transition when `Ready` is Unknown);
/// - **Progressing** otherwise (a new generation not reached yet, or not reported).
pub fn child_health(child: &HelmRelease) -> ChildHealth {
    let generation = child.metadata.generation.unwrap_or_default();
    let Some(status) = child.status.as_ref() else {
        return ChildHealth::Progressing;
    };
    let at_gen = |c: &Condition| c.observed_generation == generation || c.observed_generation == 0;
    let get = |t: &str| status.conditions.get_condition(t).filter(|&c| at_gen(c));
    let ready = get(condition::READY);
    if let Some(stalled) = get(condition::STALLED)
        && stalled.status == ConditionStatus::True
    {
        let message = ready
            .filter(|r| !r.message.is_empty())
            .map_or(stalled.message.as_str(), |r| r.message.as_str());
        return ChildHealth::Failed {
            message: short(message),
        };
    }
    if let Some(r) = ready
        && r.status == ConditionStatus::False
        && (REMEDIATION_FAILED.contains(&r.reason.as_str())
            || get(condition::REMEDIATED).is_some_and(|c| c.status == ConditionStatus::False))
    {
        return ChildHealth::Failed {
            message: short(&r.message),
        };
    }
    let tests_failed =
        get(condition::TEST_SUCCESS).is_some_and(|c| c.status == ConditionStatus::False);
    match ready {
        Some(r) if r.status == ConditionStatus::True && !tests_failed => ChildHealth::Ready {
            since: r.last_transition_time.clone(),
        },
        Some(r)
            if r.status == ConditionStatus::Unknown
                && status.observed_generation == generation
                && !tests_failed =>
        {
            match get(condition::RELEASED).filter(|c| c.status == ConditionStatus::True) {
                Some(released) => ChildHealth::Ready {
                    since: released.last_transition_time.clone(),
                },
                None => ChildHealth::Progressing,
            }
        }
        _ => ChildHealth::Progressing,
    }
}

/// What the engine remembers of a child: its revision label (malformed: none), its
/// promotion time (malformed: none) and its health.
pub fn child_observation(child: &HelmRelease) -> ChildObservation {
    ChildObservation {
        revision: child_revision(child),
        promoted_at: child
            .annotations()
            .get(PROMOTED_AT_ANNOTATION)
            .and_then(|t| Timestamp::new(t.clone()).ok()),
        health: child_health(child),
    }
}

/// The child's [`REVISION_LABEL`], if it is a revision.
pub fn child_revision(child: &HelmRelease) -> Option<SetRevision> {
    child
        .labels()
        .get(REVISION_LABEL)
        .and_then(|r| SetRevision::new(r.clone()).ok())
}

/// What of a ManagedCluster the rollout reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterFacts {
    /// Name.
    pub name: String,
    /// Labels (selection, waves, customizations, templates).
    pub labels: BTreeMap<String, String>,
    /// Annotations (templates).
    pub annotations: BTreeMap<String, String>,
    /// `spec.accepted`.
    pub accepted: bool,
    /// It has a deletion timestamp.
    pub deleting: bool,
    /// Its agent is connected.
    pub connected: bool,
}

impl ClusterFacts {
    /// The facts of a ManagedCluster.
    pub fn of(mc: &ManagedCluster) -> ClusterFacts {
        ClusterFacts {
            name: mc.name_any(),
            labels: mc.labels().clone(),
            annotations: mc.annotations().clone(),
            accepted: mc.spec.accepted,
            deleting: mc.metadata.deletion_timestamp.is_some(),
            connected: mc
                .status
                .as_ref()
                .and_then(|s| s.connection.as_ref())
                .is_some_and(|c| c.state == flotilla_api::fleet::ConnectionState::Connected),
        }
    }
}

/// A cluster's part in the rollout: **Deleting** while its ManagedCluster is being deleted
/// (its child is dropped without an uninstall, never a failure); **Paused** when the
/// ManagedCluster is not accepted (the hub delivers nothing to it: it must not hold a slot
/// nor run out a deadline) or its customization sets `suspend: true`; else **Active**.
pub fn availability(
    cluster: &ClusterFacts,
    customization: Option<&TargetCustomization>,
) -> Availability {
    if cluster.deleting {
        Availability::Deleting
    } else if !cluster.accepted || customization.and_then(|c| c.suspend) == Some(true) {
        Availability::Paused
    } else {
        Availability::Active
    }
}

/// What happens to an existing child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildFate {
    /// Its cluster is targeted: the rollout decides.
    Keep,
    /// Deleted; the HelmRelease finalizer uninstalls the release (`Uninstall`).
    Uninstall,
    /// Labels and owner reference removed; the release stays, managed by hand (`Orphan`).
    Orphan,
    /// Its ManagedCluster is being deleted (or gone): suspended, then deleted, so the
    /// HelmRelease finalizer forgets the plan without an uninstall (the cluster is gone).
    Drop,
}

/// The fate of a child: `targeted` (its cluster is selected, permitted and deployed to),
/// `cluster` (its ManagedCluster, if one exists) and the set's `stopMatchingPolicy`.
pub fn child_fate(
    targeted: bool,
    cluster: Option<&ClusterFacts>,
    policy: StopMatchingPolicy,
) -> ChildFate {
    match cluster {
        None => ChildFate::Drop,
        Some(c) if c.deleting => ChildFate::Drop,
        Some(_) if targeted => ChildFate::Keep,
        Some(_) => match policy {
            StopMatchingPolicy::Uninstall => ChildFate::Uninstall,
            StopMatchingPolicy::Orphan => ChildFate::Orphan,
        },
    }
}

/// Whether the child's spec (`actual`, as read) differs from what the set writes
/// (`desired`): every field of `desired` must be in `actual` with the same value (maps
/// compared key by key, so fields the API server defaults are not a difference; lists
/// element by element, with equal lengths). A hand edit of a field the set writes is a
/// difference; a field the set does not write is the editor's.
pub fn spec_differs(desired: &Value, actual: &Value) -> bool {
    !contains(actual, desired)
}

fn contains(actual: &Value, desired: &Value) -> bool {
    match (actual, desired) {
        (_, Value::Null) => true,
        (Value::Object(a), Value::Object(d)) => d
            .iter()
            .all(|(k, v)| contains(a.get(k).unwrap_or(&Value::Null), v)),
        (Value::Array(a), Value::Array(d)) => {
            a.len() == d.len() && a.iter().zip(d).all(|(x, y)| contains(x, y))
        }
        (a, d) => a == d,
    }
}

/// A ControllerRevision of a set: its name and its `revision` number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRevision {
    /// The object's name (`<set>-<revision>`).
    pub name: String,
    /// Its sequence number.
    pub number: i64,
}

/// The number of a new ControllerRevision: one above the highest.
pub fn next_revision_number(existing: &[StoredRevision]) -> i64 {
    existing.iter().map(|r| r.number).max().unwrap_or(0) + 1
}

/// The ControllerRevisions to delete: all but the `limit` highest numbers, never one named
/// in `keep` (the current and update revisions, which rollbacks and children read).
pub fn revisions_to_trim(existing: &[StoredRevision], keep: &[String], limit: u32) -> Vec<String> {
    let mut sorted: Vec<&StoredRevision> = existing.iter().collect();
    sorted.sort_by(|a, b| b.number.cmp(&a.number).then(a.name.cmp(&b.name)));
    let mut kept = 0usize;
    let mut out = Vec::new();
    for r in sorted {
        if keep.contains(&r.name) {
            continue;
        }
        if kept < limit as usize {
            kept += 1;
        } else {
            out.push(r.name.clone());
        }
    }
    out.sort();
    out
}

/// An Event on the set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetEvent {
    /// Warning or Normal.
    pub warning: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// The note.
    pub message: String,
}

/// Reasons of the set's Events.
pub mod event_reason {
    /// A wave began promoting the update revision.
    pub const WAVE_STARTED: &str = "WaveStarted";
    /// A wave's clusters are all at the update revision and healthy.
    pub const WAVE_COMPLETED: &str = "WaveCompleted";
    /// Promotion stopped: a manual gate, `spec.rollout.paused` or a breach.
    pub const ROLLOUT_PAUSED: &str = "RolloutPaused";
    /// `AbortAndRollback` began putting the current revision back.
    pub const ROLLOUT_ABORTED: &str = "RolloutAborted";
    /// Every wave is through.
    pub const ROLLOUT_COMPLETED: &str = "RolloutCompleted";
    /// The spec was refused.
    pub const INVALID_SPEC: &str = "InvalidSpec";
}

fn started(s: WaveState) -> bool {
    !matches!(s, WaveState::Pending)
}

fn complete(s: WaveState) -> bool {
    matches!(
        s,
        WaveState::Soaking | WaveState::AwaitingApproval | WaveState::Complete
    )
}

/// The Events of a status change, `before` (as read) to `after` (to be written); `aborted`
/// when this reconcile recorded the abort. Waves are compared by name, and only within one
/// update revision (a new revision starts from nothing).
pub fn set_events(
    before: &HelmReleaseSetStatus,
    after: &HelmReleaseSetStatus,
    aborted: bool,
) -> Vec<SetEvent> {
    let revision = after
        .update_revision
        .as_ref()
        .map_or("", SetRevision::as_str);
    let same_rollout = before.update_revision == after.update_revision;
    let mut out = Vec::new();
    for w in &after.waves {
        let was = same_rollout
            .then(|| before.waves.iter().find(|b| b.name == w.name))
            .flatten()
            .map(|b| b.state);
        if started(w.state)
            && !matches!(w.state, WaveState::RollingBack | WaveState::RolledBack)
            && was.is_none_or(|s| !started(s))
            && !complete(w.state)
        {
            out.push(SetEvent {
                warning: false,
                reason: event_reason::WAVE_STARTED,
                message: format!(
                    "Wave {} started: rolling out revision {revision} to {} clusters",
                    w.name, w.clusters
                ),
            });
        }
        if complete(w.state) && was.is_none_or(|s| !complete(s)) && w.clusters > 0 {
            out.push(SetEvent {
                warning: false,
                reason: event_reason::WAVE_COMPLETED,
                message: format!(
                    "Wave {} completed: {}/{} clusters ready at revision {revision}",
                    w.name, w.ready, w.clusters
                ),
            });
        }
    }
    let paused = |s: &HelmReleaseSetStatus| {
        s.conditions
            .get_condition(set_conditions::ROLLOUT_PAUSED)
            .filter(|c| c.status == ConditionStatus::True)
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    if let Some((r, message)) = paused(after)
        && (!same_rollout || paused(before).as_ref().map(|p| &p.0) != Some(&r))
    {
        out.push(SetEvent {
            warning: r == flotilla_core::rollout::reason::MAX_FAILURES_EXCEEDED,
            reason: event_reason::ROLLOUT_PAUSED,
            message,
        });
    }
    if aborted {
        out.push(SetEvent {
            warning: true,
            reason: event_reason::ROLLOUT_ABORTED,
            message: format!(
                "Rollout of revision {revision} aborted: rolling back to revision {}",
                after
                    .current_revision
                    .as_ref()
                    .map_or("(none)", SetRevision::as_str)
            ),
        });
    }
    let complete_now = |s: &HelmReleaseSetStatus| {
        s.conditions
            .get_condition(condition::READY)
            .is_some_and(|c| {
                c.status == ConditionStatus::True
                    && c.reason == flotilla_core::rollout::reason::ROLLOUT_COMPLETE
            })
    };
    if complete_now(after) && (!same_rollout || !complete_now(before)) {
        out.push(SetEvent {
            warning: false,
            reason: event_reason::ROLLOUT_COMPLETED,
            message: after.conditions.message_of(condition::READY).to_owned(),
        });
    }
    out
}

/// The status of a set whose spec was refused: `Ready=False`, `Stalled=True`, reason
/// `InvalidSpec`, the message naming the field; `Reconciling` removed; the revisions and
/// rollout progress left as they were (no child is touched).
pub fn invalid_spec_status(
    status: &mut HelmReleaseSetStatus,
    message: &str,
    generation: i64,
    now: &Timestamp,
) {
    let message = short_status(message);
    for (t, s) in [
        (condition::READY, ConditionStatus::False),
        (condition::STALLED, ConditionStatus::True),
    ] {
        status.conditions.set_condition(
            t,
            s,
            super::INVALID_SPEC,
            message.clone(),
            generation,
            now,
        );
    }
    status.conditions.delete_condition(condition::RECONCILING);
    status.observed_generation = generation;
}

/// The condition type saying which selected clusters tenancy leaves out (issue 29, point
/// 5): True with reason `AccessDenied` while some are, removed when none are. The rollout
/// goes on for the others.
pub const CLUSTERS_DENIED: &str = "ClustersDenied";

/// Sets or removes [`CLUSTERS_DENIED`] for the clusters (sorted, by name) that the set's
/// `namespace` is not bound to.
pub fn denied_condition(
    status: &mut HelmReleaseSetStatus,
    namespace: &str,
    denied: &[String],
    generation: i64,
    now: &Timestamp,
) {
    if denied.is_empty() {
        status.conditions.delete_condition(CLUSTERS_DENIED);
        return;
    }
    let mut names: Vec<&str> = denied.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    const SHOWN: usize = 10;
    let mut list = names
        .iter()
        .take(SHOWN)
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        list.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    let message = format!(
        "{} selected cluster(s) left out: namespace '{namespace}' is not bound to ManagedCluster {list}; create a ManagedClusterBinding that selects both",
        names.len()
    );
    status.conditions.set_condition(
        CLUSTERS_DENIED,
        ConditionStatus::True,
        crate::tenancy::ACCESS_DENIED,
        short_status(&message),
        generation,
        now,
    );
}

/// `message` within [`flotilla_core::set::MAX_STATUS_MESSAGE_LEN`] bytes, cut on a
/// character boundary and ended with `…` when cut.
fn short_status(message: &str) -> String {
    let max = flotilla_core::set::MAX_STATUS_MESSAGE_LEN;
    if message.len() <= max {
        return message.to_owned();
    }
    let mut end = max - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
