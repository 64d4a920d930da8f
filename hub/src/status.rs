//! The status writer: the one place that writes HelmRelease `.status`.
//!
//! Two things feed it:
//! - the agents' [`TargetReport`]s ([`StatusBook::run`]): a status report replaces the
//!   agent-owned part of the status (conditions, history, failure counters,
//!   `lastAttempted*`, `lastHandled*`, `observedGeneration`, `storageNamespace`,
//!   inventory), unless it is stale: reports older than the newest seen, by
//!   `(plan revision, seq)`, are dropped; agent Events are relayed as Kubernetes Events on
//!   the HelmRelease (except for the hub's own cluster, where the in-process agent already
//!   posted them on the HelmRelease's namespace); `Deleted` is remembered for the
//!   finalizer; `Rejected` becomes a `Ready=False`, `Stalled=True` condition (reason
//!   `PlanRejected`) that stands until the agent reports on a newer plan;
//! - the HelmRelease controller's hub-side outcome ([`StatusBook::set_hub`]):
//!   `status.helmChart` and a hub condition (source not ready, values error, dependency not
//!   ready, no agent connected), which overrides the agent's `Ready` until the controller
//!   clears it by sending a plan; "no agent connected" also ends with the first status
//!   report from the cluster's agent (and the controller is asked to look again), so a
//!   reconnecting agent's status shows at once, not at the controller's next requeue.
//!   A hub condition cleared before the agent ever reported stays until that first report
//!   (Flux keeps conditions until replaced), and `observedGeneration` never goes down.
//!
//! - the controller's plan record of a HelmReleaseSet's child ([`StatusBook::planned`]):
//!   `status.plan` (revision and digest of the plan sent last), written with the next
//!   status write rather than as a write of its own.
//!
//! The whole status is written with server-side apply under the hub's field manager, so
//! what an agent cleared (history on uninstall, say) is cleared on the object too. Writes of
//! one HelmRelease are serialized; different HelmReleases write in parallel. Reports of one
//! HelmRelease that arrive in a burst are coalesced: each is merged into the writer's view
//! in order, and only the last of those waiting writes (latest wins: one write, not one
//! per report). Nothing from
//! values reaches a status, an Event or a log line here: the agent's messages never carry
//! values, and hub conditions name objects and keys, not data.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use flotilla_api::HelmRelease;
use flotilla_core::agent::{ObjectKey, Report};
use flotilla_core::ids::PlanRevision;
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition};
use flotilla_core::release::EventType;
use flotilla_core::status::{HelmReleaseStatus, PlanRecord};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use kube::{Client, Resource as _, ResourceExt as _};
use tokio::sync::mpsc;

use crate::link::{ReportReceiver, TargetId, TargetReport};
use crate::util::{self, FIELD_MANAGER, error_chain};

/// Reports the writer merges at the same time; the rest wait in the report queue, where
/// they coalesce (latest per object).
pub const MAX_REPORTS_IN_FLIGHT: usize = 64;

/// Reason of a plan the agent refused (the message names the field).
pub const PLAN_REJECTED: &str = "PlanRejected";

/// A hub-side outcome that overrides the agent's `Ready` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubCondition {
    /// Flux's reason (`SourceNotReady`, `ValuesError`, ...).
    pub reason: String,
    /// The message (names objects and fields, never values).
    pub message: String,
    /// Also `Stalled=True` (a configuration error no retry fixes).
    pub stalled: bool,
    /// The generation the outcome is for.
    pub generation: i64,
    /// Cleared by the first status report of a cluster's agent (the controller's "no agent
    /// connected"): the writer needs no knowledge of the controller's reasons.
    pub cleared_by_agent_report: bool,
}

/// What the writer knows of one HelmRelease.
#[derive(Debug, Default)]
struct Entry {
    /// The agent-owned status: the last report's, or the object's when the hub started.
    agent: HelmReleaseStatus,
    /// The newest report's `(plan revision, seq)`.
    last: Option<(PlanRevision, u64)>,
    /// The hub-side override.
    hub: Option<HubCondition>,
    /// `status.helmChart`.
    helm_chart: String,
    /// The last status written.
    written: Option<HelmReleaseStatus>,
    /// The uid of the object (to name it in Events).
    uid: Option<String>,
    /// Whether `agent` was seeded (from the object or a report).
    seeded: bool,
    /// The generation observed while suspended (Flux patches `observedGeneration` then).
    suspended: Option<i64>,
    /// The last plan the agent refused, and the condition saying why; it stands until the
    /// agent reports on a newer plan.
    rejected: Option<(PlanRevision, HubCondition)>,
    /// `status.plan`: the object's when the hub started, then the controller's.
    plan: Option<PlanRecord>,
}

/// The status writer (see the module docs).
pub struct StatusBook {
    client: Client,
    recorder: Recorder,
    entries: Mutex<HashMap<ObjectKey, Arc<tokio::sync::Mutex<Entry>>>>,
    deleted: Mutex<HashMap<ObjectKey, PlanRevision>>,
    /// Plan records handed in by the controller, taken by the next write.
    planned: Mutex<HashMap<ObjectKey, PlanRecord>>,
    trigger: mpsc::UnboundedSender<ObjectKey>,
    /// Reports per HelmRelease received and not yet merged (a burst: only the last writes).
    queued: Mutex<HashMap<ObjectKey, usize>>,
}

impl fmt::Debug for StatusBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatusBook").finish_non_exhaustive()
    }
}

/// Why a status write failed.
#[derive(Debug, thiserror::Error)]
#[error("HelmRelease {object}: writing the status")]
pub struct StatusError {
    /// The HelmRelease.
    pub object: ObjectKey,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

impl StatusBook {
    /// A writer on the hub's cluster; `trigger` receives the HelmReleases the controller
    /// should reconcile again (a deletion finished, a plan was rejected).
    pub fn new(client: Client, trigger: mpsc::UnboundedSender<ObjectKey>) -> StatusBook {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "flotilla-hub".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        StatusBook {
            client,
            recorder,
            entries: Mutex::new(HashMap::new()),
            deleted: Mutex::new(HashMap::new()),
            planned: Mutex::new(HashMap::new()),
            trigger,
            queued: Mutex::new(HashMap::new()),
        }
    }

    fn entry(&self, key: &ObjectKey) -> Arc<tokio::sync::Mutex<Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_default()
            .clone()
    }

    /// Records the controller's outcome for `hr` and writes the status: `hub` overrides
    /// `Ready` (`None` clears the override), `helm_chart` is `status.helmChart`.
    pub async fn set_hub(
        &self,
        hr: &HelmRelease,
        key: &ObjectKey,
        hub: Option<HubCondition>,
        helm_chart: String,
    ) -> Result<(), StatusError> {
        let entry = self.entry(key);
        let mut e = entry.lock().await;
        seed(&mut e, hr);
        if e.hub == hub
            && e.helm_chart == helm_chart
            && e.suspended.is_none()
            && e.written.is_some()
        {
            return Ok(());
        }
        set_hub_outcome(&mut e, hub);
        e.helm_chart = helm_chart;
        self.write(key, &mut e).await
    }

    /// Records that `hr` is suspended: its generation counts as observed.
    pub async fn suspended(&self, hr: &HelmRelease, key: &ObjectKey) -> Result<(), StatusError> {
        let entry = self.entry(key);
        let mut e = entry.lock().await;
        seed(&mut e, hr);
        e.suspended = hr.metadata.generation;
        self.write(key, &mut e).await
    }

    /// The revision of the last `Deleted` report of `key`.
    pub fn deleted(&self, key: &ObjectKey) -> Option<PlanRevision> {
        self.deleted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .copied()
    }

    /// Records the plan last sent for `key` (a HelmReleaseSet's child): the next status
    /// write carries it as `status.plan`. Never waits: the write that takes it may be the
    /// one an agent report causes.
    pub fn planned(&self, key: &ObjectKey, record: PlanRecord) {
        self.planned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), record);
    }

    /// Forgets a HelmRelease that is gone.
    pub fn forget(&self, key: &ObjectKey) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        self.deleted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        self.planned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Consumes the agents' reports until every sender is dropped. Reports of different
    /// HelmReleases are handled in parallel; those of one HelmRelease take its entry's lock
    /// in turn (a report that loses the race to a newer one is dropped as stale), and the
    /// status is written by the last report of a burst only. At most
    /// [`MAX_REPORTS_IN_FLIGHT`] are handled at once: the others wait in the queue, which
    /// keeps the latest per object.
    pub async fn run(self: Arc<Self>, mut reports: ReportReceiver) {
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            while tasks.len() >= MAX_REPORTS_IN_FLIGHT {
                tasks.join_next().await;
            }
            let Some(report) = reports.recv().await else {
                break;
            };
            let book = self.clone();
            let key = report.report.object();
            *self
                .queued
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(key.clone())
                .or_default() += 1;
            tasks.spawn(async move {
                let entry = book.entry(&key);
                let mut guard = entry.lock().await;
                let last_of_burst = {
                    let mut queued = book.queued.lock().unwrap_or_else(|p| p.into_inner());
                    let left = queued.get_mut(&key).map(|n| {
                        *n = n.saturating_sub(1);
                        *n
                    });
                    if left == Some(0) {
                        queued.remove(&key);
                    }
                    left.unwrap_or(0) == 0
                };
                let result = match book.apply(&key, &mut guard, report).await {
                    // Nothing known of the object yet (an Event first): nothing to write.
                    Ok(()) if last_of_burst && guard.seeded => {
                        book.write(&key, &mut guard).await
                    }
                    other => other,
                };
                if let Err(e) = result {
                    tracing::warn!(object = %key, error = %error_chain(&e), "HelmRelease status not written");
                }
            });
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Merges `report` into the writer's view of `key` (the caller writes the status).
    async fn apply(
        &self,
        key: &ObjectKey,
        e: &mut Entry,
        report: TargetReport,
    ) -> Result<(), StatusError> {
        let TargetReport { target, report } = report;
        match report {
            Report::Status(s) => {
                let at = (s.plan_revision, s.seq);
                if e.last.is_some_and(|last| at <= last) {
                    tracing::debug!(object = %key, revision = %s.plan_revision, seq = s.seq, "stale status report dropped");
                    return Ok(());
                }
                if !e.seeded {
                    self.seed_from_cluster(key, e).await;
                }
                e.last = Some(at);
                if e.rejected
                    .as_ref()
                    .is_some_and(|(r, _)| s.plan_revision > *r)
                {
                    e.rejected = None;
                }
                take_agent_status(e, s.status);
                e.seeded = true;
                // A cluster's agent reporting is connected: the controller's "no agent
                // connected" (set while it was away) no longer holds. The controller looks
                // again and sets what does.
                if matches!(target, TargetId::Cluster(_))
                    && e.hub.as_ref().is_some_and(|h| h.cleared_by_agent_report)
                {
                    e.hub = None;
                    let _ = self.trigger.send(key.clone());
                }
                Ok(())
            }
            Report::Event { event, .. } => {
                if target != TargetId::Local {
                    self.relay(key, e, &event).await;
                }
                Ok(())
            }
            Report::Deleted {
                revision, outcome, ..
            } => {
                tracing::info!(object = %key, %revision, ?outcome, "release deleted by its agent");
                self.deleted
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.clone(), revision);
                let _ = self.trigger.send(key.clone());
                Ok(())
            }
            Report::Rejected {
                revision, error, ..
            } => {
                tracing::warn!(object = %key, %revision, "plan rejected by its agent");
                if !e.seeded {
                    self.seed_from_cluster(key, e).await;
                }
                let generation = e.agent.observed_generation;
                e.rejected = Some((
                    revision,
                    HubCondition {
                        reason: PLAN_REJECTED.into(),
                        message: error,
                        stalled: true,
                        generation,
                        cleared_by_agent_report: false,
                    },
                ));
                Ok(())
            }
            // Answers to previews go to their waiters (`ReportSink::send`), never here.
            Report::Preview(_) => Ok(()),
        }
    }

    async fn seed_from_cluster(&self, key: &ObjectKey, e: &mut Entry) {
        let api: Api<HelmRelease> = Api::namespaced(self.client.clone(), key.namespace.as_str());
        match api.get_opt(key.name.as_str()).await {
            Ok(Some(hr)) => seed(e, &hr),
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(object = %key, error = %error_chain(&err), "reading the HelmRelease failed")
            }
        }
    }

    /// The status to write: the agent's, with the hub's fields and override.
    fn merged(e: &Entry) -> HelmReleaseStatus {
        let mut status = e.agent.clone();
        status.helm_chart = e.helm_chart.clone();
        if e.plan.is_some() {
            status.plan = e.plan.clone();
        }
        if let Some(g) = e.suspended {
            status.observed_generation = status.observed_generation.max(g);
        }
        if let Some(hub) = e.hub.as_ref().or(e.rejected.as_ref().map(|(_, c)| c)) {
            let now = util::now();
            status.conditions.set_condition(
                condition::READY,
                ConditionStatus::False,
                &hub.reason,
                hub.message.clone(),
                hub.generation,
                &now,
            );
            if hub.stalled {
                status.conditions.set_condition(
                    condition::STALLED,
                    ConditionStatus::True,
                    &hub.reason,
                    hub.message.clone(),
                    hub.generation,
                    &now,
                );
            }
            status.conditions.delete_condition(condition::RECONCILING);
        }
        status
    }

    async fn write(&self, key: &ObjectKey, e: &mut Entry) -> Result<(), StatusError> {
        if let Some(plan) = self
            .planned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
        {
            e.plan = Some(plan.clone());
        }
        let status = Self::merged(e);
        if e.written.as_ref() == Some(&status) {
            return Ok(());
        }
        let api: Api<HelmRelease> = Api::namespaced(self.client.clone(), key.namespace.as_str());
        let patch = serde_json::json!({
            "apiVersion": HelmRelease::api_version(&()),
            "kind": HelmRelease::kind(&()),
            "status": status,
        });
        match api
            .patch_status(
                key.name.as_str(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            Ok(_) => {
                e.written = Some(status);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(source) => Err(StatusError {
                object: key.clone(),
                source,
            }),
        }
    }

    /// Posts a hub-side Event on `hr` (Flux's reasons: `ValuesError`, ...).
    pub async fn event(&self, hr: &HelmRelease, warning: bool, reason: &str, message: &str) {
        let Some(key) = key_of(hr) else { return };
        let e = Entry {
            uid: hr.uid(),
            ..Default::default()
        };
        let event = flotilla_core::release::Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_owned(),
            message: message.to_owned(),
            annotations: Default::default(),
        };
        self.relay(&key, &e, &event).await;
    }

    async fn relay(&self, key: &ObjectKey, e: &Entry, event: &flotilla_core::release::Event) {
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(HelmRelease::api_version(&()).into_owned()),
            kind: Some(HelmRelease::kind(&()).into_owned()),
            namespace: Some(key.namespace.to_string()),
            name: Some(key.name.to_string()),
            uid: e.uid.clone(),
            ..Default::default()
        };
        let ev = KubeEvent {
            type_: match event.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: event.reason.clone(),
            note: Some(event.message.chars().take(1024).collect()),
            action: event.reason.clone(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&ev, &reference).await {
            tracing::warn!(object = %key, reason = %event.reason, error = %error_chain(&err), "relaying an agent Event failed");
        }
    }
}

/// Records the controller's outcome (`None` when the plan went out). Flux keeps every
/// condition until something replaces it: a hub condition cleared before the agent ever
/// reported (the plan it waited for went out now) stays, as the agent's status, until the
/// agent's first report (which comes as its first action starts, with `Ready=Unknown`) —
/// not an empty status in between. A suspended generation stays observed.
fn set_hub_outcome(e: &mut Entry, hub: Option<HubCondition>) {
    if hub.is_none() && e.hub.is_some() && e.last.is_none() {
        let helm_chart = std::mem::take(&mut e.helm_chart);
        e.agent = StatusBook::merged(e);
        e.agent.helm_chart.clear();
        e.helm_chart = helm_chart;
    }
    if let Some(g) = e.suspended.take() {
        e.agent.observed_generation = e.agent.observed_generation.max(g);
    }
    e.hub = hub;
}

/// Takes an agent's status report. `observedGeneration` never goes down: Flux only ever
/// sets it to the object's generation, which only grows, and an agent that has not yet
/// finished a reconcile of a plan reports the one it last finished (or none), not what the
/// hub observed meanwhile (a suspended generation).
fn take_agent_status(e: &mut Entry, status: HelmReleaseStatus) {
    let floor = e.agent.observed_generation;
    e.agent = status;
    e.agent.observed_generation = e.agent.observed_generation.max(floor);
}

/// Seeds an entry from the object, once.
fn seed(e: &mut Entry, hr: &HelmRelease) {
    if e.uid.is_none() {
        e.uid = hr.uid();
    }
    if e.seeded {
        return;
    }
    let mut status = hr.status.clone().unwrap_or_default();
    e.helm_chart = std::mem::take(&mut status.helm_chart);
    e.plan = status.plan.take();
    // A hub condition written before a restart is the controller's to set again.
    e.agent = status;
    e.seeded = true;
}

/// `namespace/name` of a HelmRelease as an [`ObjectKey`], `None` when the object is not
/// named properly.
pub fn key_of(hr: &HelmRelease) -> Option<ObjectKey> {
    Some(ObjectKey {
        namespace: hr.namespace()?.parse().ok()?,
        name: hr.name_any().parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(
        status: &HelmReleaseStatus,
        type_: &str,
    ) -> Option<(ConditionStatus, String, String, i64)> {
        status.conditions.get_condition(type_).map(|c| {
            (
                c.status,
                c.reason.clone(),
                c.message.clone(),
                c.observed_generation,
            )
        })
    }

    /// An agent status: Ready=True, Released=True and Reconciling=True at generation 2.
    fn agent() -> HelmReleaseStatus {
        let now = util::now();
        let mut status = HelmReleaseStatus {
            observed_generation: 2,
            ..Default::default()
        };
        for (type_, reason) in [
            (condition::READY, "UpgradeSucceeded"),
            (condition::RELEASED, "UpgradeSucceeded"),
            (condition::RECONCILING, "Progressing"),
        ] {
            status.conditions.set_condition(
                type_,
                ConditionStatus::True,
                reason,
                "from the agent".into(),
                2,
                &now,
            );
        }
        status
    }

    fn hub(reason: &str, stalled: bool) -> HubCondition {
        HubCondition {
            reason: reason.into(),
            message: format!("{reason} message"),
            stalled,
            generation: 3,
            cleared_by_agent_report: false,
        }
    }

    #[test]
    fn without_a_hub_condition_the_agents_status_is_written_with_the_hubs_helm_chart() {
        let e = Entry {
            agent: agent(),
            helm_chart: "default/default-podinfo".into(),
            ..Default::default()
        };
        let merged = StatusBook::merged(&e);
        assert_eq!(merged.helm_chart, "default/default-podinfo");
        assert_eq!(merged.conditions, e.agent.conditions);
        assert_eq!(merged.observed_generation, 2);
    }

    #[test]
    fn a_hub_condition_overrides_ready_drops_reconciling_and_leaves_the_agents_other_conditions() {
        let e = Entry {
            agent: agent(),
            hub: Some(hub("SourceNotReady", false)),
            ..Default::default()
        };
        let merged = StatusBook::merged(&e);
        assert_eq!(
            condition(&merged, condition::READY),
            Some((
                ConditionStatus::False,
                "SourceNotReady".into(),
                "SourceNotReady message".into(),
                3
            ))
        );
        assert_eq!(condition(&merged, condition::RECONCILING), None);
        assert_eq!(condition(&merged, condition::STALLED), None, "not terminal");
        assert_eq!(
            condition(&merged, condition::RELEASED).map(|c| c.0),
            Some(ConditionStatus::True),
            "Released stays the agent's"
        );
    }

    #[test]
    fn a_terminal_hub_condition_also_sets_stalled() {
        let e = Entry {
            agent: agent(),
            hub: Some(hub("InvalidSpec", true)),
            ..Default::default()
        };
        let merged = StatusBook::merged(&e);
        assert_eq!(
            condition(&merged, condition::STALLED),
            Some((
                ConditionStatus::True,
                "InvalidSpec".into(),
                "InvalidSpec message".into(),
                3
            ))
        );
    }

    #[test]
    fn a_rejected_plan_stands_when_the_hub_has_no_condition_and_the_hubs_wins_over_it() {
        let rejected = (PlanRevision::new(4), hub(PLAN_REJECTED, true));
        let e = Entry {
            agent: agent(),
            rejected: Some(rejected.clone()),
            ..Default::default()
        };
        let merged = StatusBook::merged(&e);
        assert_eq!(
            condition(&merged, condition::READY).map(|c| c.1),
            Some(PLAN_REJECTED.to_owned())
        );
        assert!(merged.conditions.is_true(condition::STALLED));
        let e = Entry {
            agent: agent(),
            rejected: Some(rejected),
            hub: Some(hub("ValuesError", false)),
            ..Default::default()
        };
        let merged = StatusBook::merged(&e);
        assert_eq!(
            condition(&merged, condition::READY).map(|c| c.1),
            Some("ValuesError".to_owned())
        );
    }

    #[test]
    fn a_hub_condition_cleared_before_the_agent_ever_reported_stays_until_its_first_report() {
        let mut e = Entry {
            hub: Some(hub("SourceNotReady", false)),
            helm_chart: "default/default-podinfo".into(),
            ..Default::default()
        };
        set_hub_outcome(&mut e, None);
        let merged = StatusBook::merged(&e);
        assert_eq!(
            condition(&merged, condition::READY).map(|c| (c.0, c.1)),
            Some((ConditionStatus::False, "SourceNotReady".into())),
            "the earlier Ready=False is not wiped when the plan goes out"
        );
        assert_eq!(merged.helm_chart, "default/default-podinfo");
        // The agent's first report (its install starting) replaces it.
        let mut starting = HelmReleaseStatus::default();
        starting.conditions.set_condition(
            condition::READY,
            ConditionStatus::Unknown,
            "Progressing",
            "Running 'install' action with timeout of 5m0s".into(),
            3,
            &util::now(),
        );
        e.last = Some((PlanRevision::new(1), 1));
        take_agent_status(&mut e, starting);
        let merged = StatusBook::merged(&e);
        assert_eq!(
            condition(&merged, condition::READY).map(|c| c.0),
            Some(ConditionStatus::Unknown)
        );
        // Once the agent has reported, its status is what a cleared hub condition leaves.
        e.hub = Some(hub("ValuesError", false));
        set_hub_outcome(&mut e, None);
        assert_eq!(
            condition(&StatusBook::merged(&e), condition::READY).map(|c| c.1),
            Some("Progressing".into())
        );
    }

    #[test]
    fn observed_generation_never_goes_down_when_a_suspension_ends_or_the_agent_reports() {
        let mut e = Entry {
            agent: agent(),
            suspended: Some(5),
            ..Default::default()
        };
        // Resumed: the plan of generation 6 goes out; 5 stays observed until the agent
        // finishes a reconcile of 6.
        set_hub_outcome(&mut e, None);
        assert_eq!(StatusBook::merged(&e).observed_generation, 5);
        take_agent_status(&mut e, agent());
        assert_eq!(StatusBook::merged(&e).observed_generation, 5);
        let mut done = agent();
        done.observed_generation = 6;
        take_agent_status(&mut e, done);
        assert_eq!(StatusBook::merged(&e).observed_generation, 6);
    }

    #[test]
    fn a_suspended_generation_counts_as_observed_never_lowering_it() {
        let mut e = Entry {
            agent: agent(),
            suspended: Some(5),
            ..Default::default()
        };
        assert_eq!(StatusBook::merged(&e).observed_generation, 5);
        e.suspended = Some(1);
        assert_eq!(StatusBook::merged(&e).observed_generation, 2);
    }

    #[test]
    fn the_plan_record_survives_an_agent_report_and_a_seed_from_the_object() {
        let record = PlanRecord {
            revision: 7,
            digest: "sha256:00".into(),
        };
        // Seeded from an object whose status holds a record: kept apart from the agent's
        // part, and written back with every merge.
        let mut e = Entry::default();
        let mut hr: HelmRelease = serde_json::from_value(serde_json::json!({
            "apiVersion": "helm.flotilla.dev/v1", "kind": "HelmRelease",
            "metadata": {"name": "web-a", "namespace": "apps"},
            "spec": {"interval": "1m", "chart": {"spec": {"chart": "c", "sourceRef": {"kind": "HelmRepository", "name": "r"}}}},
        }))
        .unwrap();
        hr.status = Some(HelmReleaseStatus {
            plan: Some(record.clone()),
            ..agent()
        });
        seed(&mut e, &hr);
        assert_eq!(StatusBook::merged(&e).plan, Some(record.clone()));
        // An agent report replaces the agent's part (which never has one).
        e.agent = agent();
        assert_eq!(StatusBook::merged(&e).plan, Some(record));
        // Without a record, none is invented.
        let e = Entry {
            agent: agent(),
            ..Default::default()
        };
        assert_eq!(StatusBook::merged(&e).plan, None);
    }
}
