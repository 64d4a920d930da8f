//! Recording what an action did: history snapshots, counters, conditions and events, with
//! Flux's messages.

use std::collections::BTreeMap;

use super::{
    Action, ERR_NO_LATEST, ERR_NO_STORAGE_UPDATE, ERR_RELEASE_MISMATCH, Remediation,
    UninstallCause, fmt_install_success, fmt_test_pending, fmt_upgrade_success,
    observation_oci_digest, summarize,
};
use crate::duration::GoDuration;
use crate::meta::{ConditionStatus, Conditions, Timestamp, condition, reason};
use crate::plan::{ReleasePlan, ReleaseRecord};
use crate::status::{HelmReleaseStatus, ReleaseAction, ResourceInventory, Snapshot, StorageStatus};

/// Annotation keys Flux puts on its events (kept for notification tooling).
pub mod event_annotation {
    /// Chart version.
    pub const REVISION: &str = "helm.toolkit.fluxcd.io/revision";
    /// Config digest.
    pub const TOKEN: &str = "helm.toolkit.fluxcd.io/token";
    /// App version.
    pub const APP_VERSION: &str = "helm.toolkit.fluxcd.io/app-version";
    /// OCI artifact digest.
    pub const OCI_DIGEST: &str = "helm.toolkit.fluxcd.io/oci-digest";
}

/// What happened when an action ran.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// The action's error, `None` on success. For drift correction: the correction errors,
    /// one per line.
    pub error: Option<String>,
    /// Whether retrying the action may succeed with nothing changed (a timeout, an API
    /// server that was unavailable), as the executor judges its `error`; `false` without
    /// one. It makes [`crate::release::ReconcileError::is_transient`] truthful.
    pub error_is_transient: bool,
    /// Every release record the action wrote to storage (any order).
    pub writes: Vec<ReleaseRecord>,
    /// How long the action took.
    pub duration: Option<GoDuration>,
    /// Uninstall or unlock found no release in storage.
    pub release_not_found: bool,
    /// Helm's debug log of a failed action, appended to its Warning event.
    pub logs: Option<String>,
    /// Drift correction: the change set applied, one line per object.
    pub changes: Option<String>,
    /// Install, upgrade and rollback: the inventory of the last record the action wrote
    /// (its manifest's objects but hooks, then the chart's CRDs), as Flux rebuilds it on
    /// every release write. `None` keeps the status's (no write, or it could not be built).
    pub inventory: Option<ResourceInventory>,
}

impl Outcome {
    /// A successful action that wrote `writes`.
    pub fn succeeded(writes: Vec<ReleaseRecord>) -> Self {
        Self {
            writes,
            ..Self::default()
        }
    }

    /// A failed action that still wrote `writes`.
    pub fn failed(error: impl Into<String>, writes: Vec<ReleaseRecord>) -> Self {
        Self {
            error: Some(error.into()),
            writes,
            ..Self::default()
        }
    }

    /// An uninstall or unlock that found no release.
    pub fn not_found() -> Self {
        Self {
            release_not_found: true,
            ..Self::default()
        }
    }
}

/// The type of a Kubernetes Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// A Kubernetes Event to record on the HelmRelease, as Flux emits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub type_: EventType,
    /// Reason, e.g. `InstallSucceeded`.
    pub reason: String,
    /// Message.
    pub message: String,
    /// Annotations (revision, token, app version, OCI digest).
    pub annotations: BTreeMap<String, String>,
}

/// The effect of an outcome.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// The error the action reconciler returns (Flux returns it only when storage did not
    /// change, except for unlock and uninstall); `None` lets the loop go on.
    pub returned_error: Option<String>,
    /// Whether `returned_error` is transient: it is the action's own error and
    /// [`Outcome::error_is_transient`] says so. Core's errors (release mismatch, no storage
    /// update, no current release) are not: they last until storage or the status changes.
    pub transient: bool,
    /// Events to record.
    pub events: Vec<Event>,
}

fn meta(
    revision: &str,
    token: &str,
    app_version: &str,
    oci_digest: &str,
) -> BTreeMap<String, String> {
    [
        (event_annotation::REVISION, revision),
        (event_annotation::TOKEN, token),
        (event_annotation::APP_VERSION, app_version),
        (event_annotation::OCI_DIGEST, oci_digest),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

pub(super) fn snapshot_meta(s: &Snapshot) -> BTreeMap<String, String> {
    meta(
        &s.chart_version,
        &s.config_digest,
        &s.app_version,
        &s.oci_digest,
    )
}

fn with_logs(msg: &str, logs: Option<&str>) -> String {
    match logs {
        Some(l) if !l.is_empty() => format!("{msg}\n\nLast Helm logs:\n\n{l}"),
        _ => msg.to_owned(),
    }
}

fn latest_digest(status: &HelmReleaseStatus) -> Option<String> {
    status.latest().map(|s| s.digest.clone())
}

/// Records the newest write as a new snapshot and refreshes the first older one found in
/// history, as Flux's `observedReleases.recordOnObject` does for install and upgrade.
fn record_release_writes(
    status: &mut HelmReleaseStatus,
    writes: &[ReleaseRecord],
    action: ReleaseAction,
) {
    let mut sorted: Vec<&ReleaseRecord> = writes.iter().collect();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.version));
    sorted.dedup_by_key(|r| r.version);
    let Some((newest, older)) = sorted.split_first() else {
        return;
    };
    let oci = status.last_attempted_revision_digest.clone();
    status
        .history
        .insert(0, newest.to_snapshot(Some(action), &oci));
    for rec in older {
        if let Some(i) = status.history.iter().position(|s| rec.is(s)) {
            let snap = &status.history[i];
            let mut new = rec.to_snapshot(None, &snap.oci_digest.clone());
            new.test_hooks = snap.test_hooks.clone();
            status.history[i] = new;
            return;
        }
    }
}

/// Replaces the snapshot each write targets. `action` is the new snapshot's action
/// (`None` keeps the old one); test hooks are kept when `keep_test_hooks`.
fn record_writes_in_place(
    status: &mut HelmReleaseStatus,
    writes: &[ReleaseRecord],
    action: Option<ReleaseAction>,
    keep_test_hooks: bool,
) {
    for rec in writes {
        if let Some(i) = status.history.iter().position(|s| rec.is(s)) {
            let snap = &status.history[i];
            let act = action.or(snap.action);
            let mut new = rec.to_snapshot(act, &snap.oci_digest.clone());
            if keep_test_hooks {
                new.test_hooks = snap.test_hooks.clone();
            }
            status.history[i] = new;
        }
    }
}

/// Flux's inventory observer: every release write rebuilds `status.inventory`.
fn record_inventory(status: &mut HelmReleaseStatus, outcome: &Outcome) {
    if outcome.writes.is_empty() {
        return;
    }
    if let Some(inventory) = &outcome.inventory {
        status.inventory = Some(inventory.clone());
    }
}

struct Recorder<'a> {
    plan: &'a ReleasePlan,
    outcome: &'a Outcome,
    now: &'a Timestamp,
    events: Vec<Event>,
}

impl<'a> Recorder<'a> {
    fn error(&self) -> Option<&'a str> {
        let outcome: &'a Outcome = self.outcome;
        outcome.error.as_deref().map(str::trim)
    }

    fn set(
        &self,
        status: &mut HelmReleaseStatus,
        type_: &str,
        st: ConditionStatus,
        r: &str,
        msg: String,
    ) {
        status
            .conditions
            .set_condition(type_, st, r, msg, self.plan.generation, self.now);
    }

    fn event(
        &mut self,
        type_: EventType,
        reason: &str,
        message: String,
        annotations: BTreeMap<String, String>,
    ) {
        self.events.push(Event {
            type_,
            reason: reason.to_owned(),
            message,
            annotations,
        });
    }

    fn release(&mut self, act: ReleaseAction, status: &mut HelmReleaseStatus) -> Option<String> {
        let install = act == ReleaseAction::Install;
        status.last_attempted_release_action = Some(act);
        if install {
            status.history.clear();
        }
        status.conditions.delete_condition(condition::TEST_SUCCESS);
        status.conditions.delete_condition(condition::REMEDIATED);
        if self.outcome.duration.is_some() {
            status.last_attempted_release_action_duration = self.outcome.duration;
        }
        record_release_writes(status, &self.outcome.writes, act);
        record_inventory(status, self.outcome);
        let plan = self.plan;
        let result = if let Some(e) = self.error() {
            let (verb, r) = if install {
                ("install", reason::INSTALL_FAILED)
            } else {
                ("upgrade", reason::UPGRADE_FAILED)
            };
            let msg = format!(
                "Helm {verb} failed for release {} with chart {}@{}: {e}",
                plan.release.qualified(),
                plan.chart.name,
                plan.chart.version
            );
            status.failures += 1;
            self.set(
                status,
                condition::RELEASED,
                ConditionStatus::False,
                r,
                msg.clone(),
            );
            let annotations = meta(
                &plan.chart.version,
                &plan.config_digest.to_string(),
                plan.chart.app_version.as_deref().unwrap_or_default(),
                &status.last_attempted_revision_digest,
            );
            self.event(
                EventType::Warning,
                r,
                with_logs(&msg, self.outcome.logs.as_deref()),
                annotations,
            );
            if self.outcome.writes.is_empty() {
                Some(e.to_owned())
            } else {
                let rem = if install {
                    Remediation::install(plan)
                } else {
                    Remediation::upgrade(plan)
                };
                rem.increment(status);
                None
            }
        } else {
            if let Some(cur) = status.latest().cloned() {
                let (r, msg) = if install {
                    (reason::INSTALL_SUCCEEDED, fmt_install_success(&cur))
                } else {
                    (reason::UPGRADE_SUCCEEDED, fmt_upgrade_success(&cur))
                };
                self.set(
                    status,
                    condition::RELEASED,
                    ConditionStatus::True,
                    r,
                    msg.clone(),
                );
                if plan.options.test.enable && !cur.has_been_tested() {
                    self.set(
                        status,
                        condition::TEST_SUCCESS,
                        ConditionStatus::Unknown,
                        reason::AWAITING_TESTS,
                        fmt_test_pending(&cur),
                    );
                }
                self.event(EventType::Normal, r, msg, snapshot_meta(&cur));
            }
            let retry = if install {
                plan.options.install.retry()
            } else {
                plan.options.upgrade.retry()
            };
            if retry.is_some() {
                status.clear_failures();
            }
            None
        };
        summarize(plan, status, self.now);
        result
    }

    fn test(&mut self, status: &mut HelmReleaseStatus) -> Option<String> {
        let result = self.test_inner(status);
        summarize(self.plan, status, self.now);
        result
    }

    fn test_inner(&mut self, status: &mut HelmReleaseStatus) -> Option<String> {
        let plan = self.plan;
        let Some(cur) = status.latest().cloned() else {
            return Some(format!("{ERR_NO_LATEST}: required for test"));
        };
        let mut error = self.error().map(str::to_owned);
        for rec in &self.outcome.writes {
            if !rec.is(&cur) {
                error = Some(format!(
                    "{ERR_RELEASE_MISMATCH}: tested release {} != current release {}",
                    rec.full_name(),
                    cur.full_release_name()
                ));
                continue;
            }
            if let Some(i) = status.history.iter().position(|s| rec.is(s)) {
                let mut snap = rec.to_snapshot(cur.action, &cur.oci_digest);
                let hooks = rec
                    .test_hooks
                    .iter()
                    .filter(|(name, _)| plan.options.test.selects(name))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                snap.test_hooks = Some(hooks);
                status.history[i] = snap;
            }
        }
        let latest = status.latest().cloned().unwrap_or(cur);
        if let Some(e) = error {
            let msg = format!(
                "Helm test failed for release {} with chart {}: {}",
                latest.full_release_name(),
                latest.versioned_chart_name(),
                e.trim()
            );
            status.failures += 1;
            self.set(
                status,
                condition::TEST_SUCCESS,
                ConditionStatus::False,
                reason::TEST_FAILED,
                msg.clone(),
            );
            self.event(
                EventType::Warning,
                reason::TEST_FAILED,
                msg,
                snapshot_meta(&latest),
            );
            if !latest.has_been_tested() {
                return Some(e);
            }
            if let Some(rem) = Remediation::active(plan, status)
                && !rem.ignore_test_failures(plan.options.test.ignore_failures)
            {
                rem.increment(status);
            }
            return None;
        }
        let hooks = match latest.test_hooks.as_ref().map_or(0, BTreeMap::len) {
            0 => "no test hooks".to_owned(),
            1 => "1 test hook completed successfully".to_owned(),
            n => format!("{n} test hooks completed successfully"),
        };
        let msg = format!(
            "Helm test succeeded for release {} with chart {}: {hooks}",
            latest.full_release_name(),
            latest.versioned_chart_name()
        );
        self.set(
            status,
            condition::TEST_SUCCESS,
            ConditionStatus::True,
            reason::TEST_SUCCEEDED,
            msg.clone(),
        );
        self.event(
            EventType::Normal,
            reason::TEST_SUCCEEDED,
            msg,
            snapshot_meta(&latest),
        );
        None
    }

    fn rollback(&mut self, target: &Snapshot, status: &mut HelmReleaseStatus) -> Option<String> {
        let result = self.rollback_inner(target, status);
        summarize(self.plan, status, self.now);
        result
    }

    fn rollback_inner(
        &mut self,
        target: &Snapshot,
        status: &mut HelmReleaseStatus,
    ) -> Option<String> {
        let before = latest_digest(status);
        if let Some(cur) = status.latest()
            && (cur.name != target.name || cur.namespace != target.namespace)
        {
            return Some(format!(
                "{ERR_RELEASE_MISMATCH}: previous release name or namespace {} does not match current {}",
                target.full_release_name(),
                cur.full_release_name()
            ));
        }
        // Snapshots of rewritten versions get action `rollback`; the new version is
        // prepended, with action `rollback` too: Helm writes it twice (created
        // `pending-rollback`, then updated `deployed` or `failed`), and Flux's observer
        // rewrites a version it already holds with the rollback action. Flux leaves the new
        // snapshot's OCI digest empty; Flotilla records the one its observation digest was
        // computed with, so that it verifies.
        for rec in &self.outcome.writes {
            if let Some(i) = status.history.iter().position(|s| rec.is(s)) {
                let snap = &status.history[i];
                let mut new =
                    rec.to_snapshot(Some(ReleaseAction::Rollback), &snap.oci_digest.clone());
                new.test_hooks = snap.test_hooks.clone();
                status.history[i] = new;
            } else {
                let oci = observation_oci_digest(status, rec.version).to_owned();
                let action = (rec.status != StorageStatus::PendingRollback)
                    .then_some(ReleaseAction::Rollback);
                status.history.insert(0, rec.to_snapshot(action, &oci));
            }
        }
        status.sort_history();
        record_inventory(status, self.outcome);
        let annotations = snapshot_meta(target);
        let (name, chart) = (target.full_release_name(), target.versioned_chart_name());
        if let Some(e) = self.error() {
            let msg =
                format!("Helm rollback to previous release {name} with chart {chart} failed: {e}");
            status.failures += 1;
            self.set(
                status,
                condition::REMEDIATED,
                ConditionStatus::False,
                reason::ROLLBACK_FAILED,
                msg.clone(),
            );
            let logged = with_logs(&msg, self.outcome.logs.as_deref());
            self.event(
                EventType::Warning,
                reason::ROLLBACK_FAILED,
                logged,
                annotations,
            );
            let after = latest_digest(status);
            return (after.is_none() || after == before).then(|| e.to_owned());
        }
        let msg = format!("Helm rollback to previous release {name} with chart {chart} succeeded");
        self.set(
            status,
            condition::REMEDIATED,
            ConditionStatus::True,
            reason::ROLLBACK_SUCCEEDED,
            msg.clone(),
        );
        self.event(
            EventType::Normal,
            reason::ROLLBACK_SUCCEEDED,
            msg,
            annotations,
        );
        None
    }

    /// Uninstall remediation; unlike the other actions it does not summarize.
    fn uninstall_remediation(&mut self, status: &mut HelmReleaseStatus) -> Option<String> {
        let Some(cur) = status.latest().cloned() else {
            return Some(format!("{ERR_NO_LATEST}: required to uninstall"));
        };
        let mut error = self.error().map(str::to_owned);
        record_writes_in_place(
            status,
            &self.outcome.writes,
            Some(ReleaseAction::UninstallRemediation),
            true,
        );
        if let Some(rec) = self.outcome.writes.iter().find(|r| !r.is(&cur)) {
            error = Some(format!(
                "{ERR_RELEASE_MISMATCH}: uninstalled release {} != current release {}",
                rec.full_name(),
                cur.full_release_name()
            ));
        }
        let unchanged = latest_digest(status).as_deref() == Some(cur.digest.as_str());
        if error.is_none() && unchanged {
            error = Some(format!(
                "uninstall completed with error: {ERR_NO_STORAGE_UPDATE}"
            ));
        }
        let latest = status.latest().cloned().unwrap_or(cur);
        let (name, chart) = (latest.full_release_name(), latest.versioned_chart_name());
        if let Some(e) = error {
            let msg = format!(
                "Helm uninstall remediation for release {name} with chart {chart} failed: {}",
                e.trim()
            );
            status.failures += 1;
            self.set(
                status,
                condition::REMEDIATED,
                ConditionStatus::False,
                reason::UNINSTALL_FAILED,
                msg.clone(),
            );
            let logged = with_logs(&msg, self.outcome.logs.as_deref());
            self.event(
                EventType::Warning,
                reason::UNINSTALL_FAILED,
                logged,
                snapshot_meta(&latest),
            );
            return unchanged.then_some(e);
        }
        let msg =
            format!("Helm uninstall remediation for release {name} with chart {chart} succeeded");
        self.set(
            status,
            condition::REMEDIATED,
            ConditionStatus::True,
            reason::UNINSTALL_SUCCEEDED,
            msg.clone(),
        );
        self.event(
            EventType::Normal,
            reason::UNINSTALL_SUCCEEDED,
            msg,
            snapshot_meta(&latest),
        );
        None
    }

    fn unlock(&mut self, pending: StorageStatus, status: &mut HelmReleaseStatus) -> Option<String> {
        let result = self.unlock_inner(pending, status);
        summarize(self.plan, status, self.now);
        result
    }

    fn unlock_inner(
        &mut self,
        pending: StorageStatus,
        status: &mut HelmReleaseStatus,
    ) -> Option<String> {
        if self.outcome.release_not_found {
            return None;
        }
        // The release as found, with its snapshot's OCI digest when it has one.
        let cur = self
            .outcome
            .writes
            .first()
            .map(|r| r.to_snapshot(None, observation_oci_digest(status, r.version)))
            .or_else(|| status.latest().cloned());
        let Some(cur) = cur else {
            return self.error().map(str::to_owned);
        };
        let (name, chart) = (cur.full_release_name(), cur.versioned_chart_name());
        if let Some(e) = self.error() {
            let msg = format!(
                "Unlock of Helm release {name} with chart {chart} in {pending} state failed: {e}"
            );
            status.failures += 1;
            self.set(
                status,
                condition::RELEASED,
                ConditionStatus::False,
                reason::PENDING_RELEASE,
                msg.clone(),
            );
            self.event(
                EventType::Warning,
                reason::PENDING_RELEASE,
                msg,
                snapshot_meta(&cur),
            );
            return Some(e.to_owned());
        }
        // Flux's unlock observer keeps the snapshot's action and drops its test hooks.
        record_writes_in_place(status, &self.outcome.writes, None, false);
        let msg = format!("Unlocked Helm release {name} with chart {chart} in {pending} state");
        self.set(
            status,
            condition::RELEASED,
            ConditionStatus::False,
            reason::PENDING_RELEASE,
            msg.clone(),
        );
        self.event(
            EventType::Normal,
            reason::PENDING_RELEASE,
            msg,
            snapshot_meta(&cur),
        );
        None
    }

    fn uninstall(
        &mut self,
        cause: UninstallCause,
        status: &mut HelmReleaseStatus,
    ) -> Option<String> {
        let result = self.uninstall_inner(status);
        summarize(self.plan, status, self.now);
        if result.is_none() {
            // The old release is gone: forget it, so that the next reconcile installs
            // fresh (target change) or the finalizer can go (deletion).
            status.history.clear();
            status.clear_failures();
            status.storage_namespace.clear();
            if cause == UninstallCause::Deletion {
                status.inventory = None;
            }
        }
        result
    }

    fn uninstall_inner(&mut self, status: &mut HelmReleaseStatus) -> Option<String> {
        let Some(cur) = status.latest().cloned() else {
            return Some(format!("{ERR_NO_LATEST}: required to uninstall"));
        };
        let gone = |msg: String| (ConditionStatus::False, reason::UNINSTALL_SUCCEEDED, msg);
        if self.outcome.release_not_found {
            let (st, r, msg) = gone(format!(
                "Release {} was not found, assuming it is uninstalled",
                cur.full_release_name()
            ));
            self.set(status, condition::RELEASED, st, r, msg);
            return None;
        }
        if self.plan.options.uninstall.keep_history
            && self
                .error()
                .is_some_and(|e| e.contains("is already deleted"))
        {
            let (st, r, msg) = gone(format!(
                "Release {} was already uninstalled",
                cur.full_release_name()
            ));
            self.set(status, condition::RELEASED, st, r, msg);
            return None;
        }
        let mut error = self.error().map(str::to_owned);
        record_writes_in_place(
            status,
            &self.outcome.writes,
            Some(ReleaseAction::Uninstall),
            true,
        );
        if let Some(rec) = self.outcome.writes.iter().find(|r| !r.is(&cur)) {
            error = Some(format!(
                "{ERR_RELEASE_MISMATCH}: uninstalled release {} != current release {}",
                rec.full_name(),
                cur.full_release_name()
            ));
        }
        if error.is_none()
            && latest_digest(status).as_deref() == Some(cur.digest.as_str())
            && cur.status != StorageStatus::Uninstalled.as_str()
        {
            error = Some(format!(
                "uninstall completed with error: {ERR_NO_STORAGE_UPDATE}"
            ));
        }
        let latest = status.latest().cloned().unwrap_or(cur);
        let (name, chart) = (latest.full_release_name(), latest.versioned_chart_name());
        if let Some(e) = error {
            let msg = format!(
                "Helm uninstall failed for release {name} with chart {chart}: {}",
                e.trim()
            );
            status.failures += 1;
            self.set(
                status,
                condition::RELEASED,
                ConditionStatus::False,
                reason::UNINSTALL_FAILED,
                msg.clone(),
            );
            let logged = with_logs(&msg, self.outcome.logs.as_deref());
            self.event(
                EventType::Warning,
                reason::UNINSTALL_FAILED,
                logged,
                snapshot_meta(&latest),
            );
            return Some(e);
        }
        status.inventory = None;
        let msg = format!("Helm uninstall succeeded for release {name} with chart {chart}");
        self.set(
            status,
            condition::RELEASED,
            ConditionStatus::False,
            reason::UNINSTALL_SUCCEEDED,
            msg.clone(),
        );
        self.event(
            EventType::Normal,
            reason::UNINSTALL_SUCCEEDED,
            msg,
            snapshot_meta(&latest),
        );
        None
    }

    /// Drift correction reports through events only and never fails the loop.
    fn correct_drift(&mut self, status: &mut HelmReleaseStatus) -> Option<String> {
        // Flux's `CorrectClusterDrift.Reconcile` marks this inside the action, after the
        // loop's pre-action patch: while the correction runs, `Ready` is still what it was.
        self.set(
            status,
            condition::READY,
            ConditionStatus::Unknown,
            reason::PROGRESSING,
            "correcting cluster drift".into(),
        );
        // Without a current release there is nothing to report (and no error).
        let cur = status.latest()?;
        let changes = self.outcome.changes.as_deref().filter(|c| !c.is_empty());
        let name = cur.full_release_name();
        if let Some(e) = self.error() {
            let mut msg = String::from("Failed to ");
            if changes.is_some() {
                msg.push_str("partially ");
            }
            msg.push_str(&format!("correct cluster state of release {name}:\n{e}"));
            if let Some(c) = changes {
                msg.push_str(&format!("\n\nSuccessful corrections:\n{c}"));
            }
            self.event(
                EventType::Warning,
                "DriftCorrectionFailed",
                msg,
                snapshot_meta(cur),
            );
        } else if let Some(c) = changes {
            let msg = format!("Cluster state of release {name} has been corrected:\n{c}");
            self.event(EventType::Normal, "DriftCorrected", msg, snapshot_meta(cur));
        }
        None
    }
}

/// Applies the outcome of `action` to the status: snapshots, counters and conditions,
/// with Flux's messages, and the events Flux would emit. Says whether the action
/// reconciler returns an error (which ends the reconcile with a backoff).
pub fn apply_outcome(
    plan: &ReleasePlan,
    action: &Action,
    outcome: &Outcome,
    status: &mut HelmReleaseStatus,
    now: &Timestamp,
) -> Applied {
    let mut rec = Recorder {
        plan,
        outcome,
        now,
        events: Vec::new(),
    };
    let returned_error = match action {
        Action::Install => rec.release(ReleaseAction::Install, status),
        Action::Upgrade { .. } => rec.release(ReleaseAction::Upgrade, status),
        Action::Test => rec.test(status),
        Action::Rollback { target } => rec.rollback(target, status),
        Action::UninstallRemediation => rec.uninstall_remediation(status),
        Action::Unlock { status: pending } => rec.unlock(*pending, status),
        Action::Uninstall { cause, .. } => rec.uninstall(*cause, status),
        Action::CorrectDrift { .. } => rec.correct_drift(status),
        Action::DetectDrift | Action::None(_) | Action::Stalled(_) | Action::Error(_) => None,
    };
    // The recorders return the action's error as given (trimmed) or one of their own.
    let transient = outcome.error_is_transient
        && returned_error.is_some()
        && returned_error.as_deref() == rec.error();
    Applied {
        returned_error,
        transient,
        events: rec.events,
    }
}
