//! The fleet rollout engine: which clusters of a HelmReleaseSet get which revision now,
//! decided purely.
//!
//! The controller observes, [`decide`] decides, the controller acts:
//!
//! ```text
//! let plan = RolloutPlan::new(&set.spec, &status);            pure: spec + status → plan
//! let observed: Vec<ClusterObservation> = ...;                IO: ManagedClusters + children
//! let d = rollout::decide(&plan, &observed, &now);            pure
//! if d.abort { status.aborted_revision = Some(plan.update_revision.clone()) }   write status FIRST
//! for p in &d.promotions { apply child p.cluster at p.revision, promoted-at = now }  IO
//! if d.completed { status.current_revision = Some(plan.update_revision.clone()) }
//! d.report.write_to(&mut status, generation, &now);           counters, waves, conditions
//! requeue after d.requeue_after (or the periodic interval)
//! ```
//!
//! A *promotion* is writing a child's spec rendered from a revision, with the revision in
//! the child's [`crate::set::REVISION_LABEL`] and the time in
//! [`crate::set::PROMOTED_AT_ANNOTATION`]. Those two fields are the engine's memory: it
//! keeps none of its own.
//!
//! # Rules
//!
//! Clusters are put in waves: the first declared wave whose selector matches (no selector,
//! or `{}`, matches all), else the final wave [`crate::set::FINAL_WAVE_NAME`], which is
//! reported like any other and never skipped. Within a wave, clusters are ordered reachable
//! first, then by name. With `AllAtOnce` there is one wave, `all`, without a concurrency or
//! failure limit.
//!
//! A cluster of the wave, against the update revision `U`, is:
//! - *paused* (ManagedCluster or customization paused): never promoted, holds no slot,
//!   neither blocks nor fails its wave;
//! - *ready* / *failed*: its child is at `U` and Ready / Stalled or failed remediation;
//! - *in flight*: its child is at `U`, neither, and promoted less than `progressDeadline`
//!   ago (an unreachable cluster stays in flight: it keeps its slot and its deadline runs);
//! - *timed out*: the same, `progressDeadline` or more ago (a failure; the slot is freed);
//! - *render-failed*: `U`'s values do not render for it (a failure once its wave is open);
//! - *pending*: anything else.
//!
//! A wave is *complete* when nothing in it is pending or in flight and its failures
//! (failed + timed out + render-failed) are within `maxFailures`; *soaked* when
//! `minSoakTime` has passed since its last cluster became Ready; *through* when also its
//! gate is `Auto` or its `approvedRevision` is `U`. The *current wave* is the first wave not
//! through. More failures than `maxFailures` in any wave is a *breach*.
//!
//! # Guarantees
//!
//! - **Bounded concurrency.** Promotions to `U` happen only in the current wave, and never
//!   bring its in-flight clusters above `maxConcurrency` (a percentage of the wave's
//!   clusters rounded down, at least one).
//! - **Wave order.** No cluster of wave k+1 is promoted to `U` unless waves 0..=k are
//!   complete, soaked and past their gates in the same observation. A cluster that joins a
//!   through wave makes it current again, and later waves wait for it.
//! - **Breach stops.** With `onFailure: Pause`, nothing is promoted to `U` while a breach
//!   holds. With `AbortAndRollback`, the breach sets [`Decisions::abort`]; from then on
//!   (`status.abortedRevision == U`) clusters at `U` are put back on `currentRevision`,
//!   newest wave first, a wave at a time, within each wave's `maxConcurrency`; `U` is never
//!   promoted again. Without a `currentRevision` (a first rollout) there is nothing to
//!   roll back to, and abort behaves as pause.
//! - **Pause.** `rollout.paused` promotes nothing to `U`; clusters in flight finish.
//! - **Bounded writes.** At most `maxNewPerReconcile` promotions per decision, every kind
//!   counted.
//! - **Deterministic and idempotent.** The decision is a function of the plan, the
//!   observations (in any order) and `now`. A promotion changes what is observed (the child
//!   is then at the revision), so once applied it is never decided again: a controller
//!   restarted mid-rollout resumes at the same point, promotes no cluster twice and skips no
//!   wave. Deciding twice on the same observation decides the same promotions, which
//!   re-applying makes no-ops.
//! - **No hang on one cluster.** Every promoted cluster is ready, failed or timed out
//!   within `progressDeadline`; a deleted cluster (the caller marks it
//!   [`Availability::Deleting`]) is dropped from the rollout and never counts as a failure.
//! - **Small status.** The report holds counters, one entry per wave and at most
//!   [`crate::set::MAX_FAILED_CLUSTERS`] failed clusters, with messages capped at
//!   [`crate::set::MAX_STATUS_MESSAGE_LEN`]: its size does not grow with the fleet.
//!
//! New clusters that have no child yet and whose wave is not open for `U` get a child at
//! `currentRevision` (within `maxNewPerReconcile`), so a cluster that joins mid-rollout gets
//! its wave's revision.
//!
//! # Assumptions
//!
//! - The caller passes every cluster the set targets and deploys to (selection done,
//!   `doNotDeploy` removed), once each.
//! - [`ChildHealth`] is the child's state at its current generation: `Ready` when its
//!   `Ready` condition is True for its generation (and `TestSuccess` where tests are on),
//!   `Failed` when it is Stalled or its remediation failed, `Progressing` otherwise.
//! - Clocks are the caller's: `now` and the promotion times.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::meta::{ConditionStatus, Conditions as _, Timestamp, condition};
use crate::selector::LabelSelector;
use crate::set::{
    FINAL_WAVE_NAME, FailedCluster, FailureReason, GateType, HelmReleaseSetSpec,
    HelmReleaseSetStatus, IntOrPercent, MAX_FAILED_CLUSTERS, MAX_STATUS_MESSAGE_LEN, OnFailure,
    RolloutCounters, RolloutStrategy, SetRevision, Wave, WaveState, WaveStatus,
};

/// Condition types of a HelmReleaseSet, beyond `Ready`, `Reconciling` and `Stalled`.
pub mod conditions {
    /// True while the update revision is being promoted.
    pub const ROLLOUT_PROGRESSING: &str = "RolloutProgressing";
    /// True while promotion is held: by the spec, a manual gate or a breach.
    pub const ROLLOUT_PAUSED: &str = "RolloutPaused";
    /// True while some cluster failed or timed out, or after an abort.
    pub const ROLLOUT_DEGRADED: &str = "RolloutDegraded";
    /// Every condition type the set controller owns.
    pub const OWNED: [&str; 6] = [
        crate::meta::condition::READY,
        crate::meta::condition::RECONCILING,
        crate::meta::condition::STALLED,
        ROLLOUT_PROGRESSING,
        ROLLOUT_PAUSED,
        ROLLOUT_DEGRADED,
    ];
}

/// Reasons of the set's conditions.
pub mod reason {
    /// Every wave is through at the update revision.
    pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
    /// A wave is promoting or waiting for its clusters.
    pub const PROGRESSING: &str = "Progressing";
    /// A wave is complete and soaking.
    pub const WAVE_SOAKING: &str = "WaveSoaking";
    /// A manual gate waits for approval of the update revision.
    pub const AWAITING_APPROVAL: &str = "AwaitingApproval";
    /// `spec.rollout.paused` is true.
    pub const ROLLOUT_PAUSED: &str = "RolloutPaused";
    /// Not paused.
    pub const NOT_PAUSED: &str = "NotPaused";
    /// A wave has more failures than its `maxFailures`.
    pub const MAX_FAILURES_EXCEEDED: &str = "MaxFailuresExceeded";
    /// `AbortAndRollback` is putting the current revision back.
    pub const ROLLING_BACK: &str = "RollingBack";
    /// `AbortAndRollback` finished.
    pub const ROLLOUT_ABORTED: &str = "RolloutAborted";
    /// Some clusters failed (within tolerance, or not).
    pub const CLUSTERS_FAILED: &str = "ClustersFailed";
    /// Every failure is a timeout.
    pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    /// No cluster failed.
    pub const NO_FAILURES: &str = "NoFailures";
    /// The set targets no cluster.
    pub const NO_CLUSTERS: &str = "NoClusters";
}

/// Name of the single wave of `AllAtOnce`.
pub const ALL_AT_ONCE_WAVE_NAME: &str = "all";

/// One wave, resolved from the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WavePlan {
    /// Wave name.
    pub name: String,
    /// Its selector (`None` or `{}`: every cluster an earlier wave did not take).
    pub selector: Option<LabelSelector>,
    /// In-flight limit; `None`: unlimited.
    pub max_concurrency: Option<IntOrPercent>,
    /// Tolerated failures; `None`: unlimited (no breach).
    pub max_failures: Option<IntOrPercent>,
    /// From promotion to Ready.
    pub progress_deadline: Duration,
    /// From the last Ready to through.
    pub min_soak_time: Duration,
    /// Whether the wave's gate lets the next wave start (Auto, or Manual approved for the
    /// update revision).
    pub gate_open: bool,
    /// Whether the gate is manual (for reporting).
    pub manual_gate: bool,
}

impl WavePlan {
    fn from_wave(w: &Wave, update: &SetRevision) -> WavePlan {
        let manual = w.gate() == GateType::Manual;
        WavePlan {
            name: w.name.clone(),
            selector: w.cluster_selector.clone(),
            max_concurrency: Some(w.max_concurrency()),
            max_failures: Some(w.max_failures()),
            progress_deadline: w.progress_deadline().get(),
            min_soak_time: w.min_soak_time().get(),
            gate_open: !manual || w.approved_revision.as_deref() == Some(update.as_str()),
            manual_gate: manual,
        }
    }
}

/// Everything the engine needs from the set: strategy, waves (the final wave included),
/// revisions and the latched abort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutPlan {
    /// `Progressive` or `AllAtOnce`.
    pub strategy: RolloutStrategy,
    /// The waves in order; the last one has no selector (the final wave).
    pub waves: Vec<WavePlan>,
    /// `spec.rollout.paused`.
    pub paused: bool,
    /// What a breach does.
    pub on_failure: OnFailure,
    /// Most promotions per decision.
    pub max_new_per_reconcile: usize,
    /// `status.currentRevision`: what the last completed rollout left everywhere.
    pub current_revision: Option<SetRevision>,
    /// The spec's revision, being rolled out.
    pub update_revision: SetRevision,
    /// `status.abortedRevision == update_revision`.
    pub aborted: bool,
}

impl RolloutPlan {
    /// The plan of a set: its spec (validated, [`HelmReleaseSetSpec::validate`]) and the
    /// revisions and abort recorded in its status.
    pub fn new(spec: &HelmReleaseSetSpec, status: &HelmReleaseSetStatus) -> RolloutPlan {
        let rollout = spec.rollout();
        let update_revision = spec.revision();
        let waves = match rollout.strategy() {
            RolloutStrategy::AllAtOnce => vec![WavePlan {
                name: ALL_AT_ONCE_WAVE_NAME.into(),
                selector: None,
                max_concurrency: None,
                max_failures: None,
                progress_deadline: crate::set::DEFAULT_PROGRESS_DEADLINE.get(),
                min_soak_time: Duration::ZERO,
                gate_open: true,
                manual_gate: false,
            }],
            RolloutStrategy::Progressive => rollout
                .waves
                .iter()
                .map(|w| WavePlan::from_wave(w, &update_revision))
                .chain(std::iter::once(WavePlan::from_wave(
                    &Wave {
                        name: FINAL_WAVE_NAME.into(),
                        ..Wave::default()
                    },
                    &update_revision,
                )))
                .collect(),
        };
        RolloutPlan {
            strategy: rollout.strategy(),
            waves,
            paused: rollout.paused,
            on_failure: rollout.on_failure(),
            max_new_per_reconcile: rollout.max_new_per_reconcile() as usize,
            current_revision: status.current_revision.clone(),
            aborted: status.aborted_revision.as_ref() == Some(&update_revision),
            update_revision,
        }
    }
}

/// Whether a cluster takes part in the rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Availability {
    /// Normal.
    #[default]
    Active,
    /// Paused (`ManagedCluster` paused, or a customization's `suspend`): skipped, no slot.
    Paused,
    /// The ManagedCluster is being deleted: its child is dropped without an uninstall, and
    /// the cluster is out of the rollout.
    Deleting,
}

/// The state of a child at its current generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildHealth {
    /// Neither Ready nor failed (yet).
    Progressing,
    /// `Ready` is True; `since` is its last transition time.
    Ready {
        /// When it became Ready.
        since: Timestamp,
    },
    /// Stalled, or its remediation failed.
    Failed {
        /// The child's Ready message, short.
        message: String,
    },
}

/// A child HelmRelease as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildObservation {
    /// The revision in its [`crate::set::REVISION_LABEL`] (`None`: missing or malformed,
    /// treated as any revision other than the update revision).
    pub revision: Option<SetRevision>,
    /// Its [`crate::set::PROMOTED_AT_ANNOTATION`] (`None`: missing, counted as promoted
    /// long ago, so a child not Ready is timed out).
    pub promoted_at: Option<Timestamp>,
    /// Its health.
    pub health: ChildHealth,
}

/// One targeted cluster as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterObservation {
    /// The ManagedCluster's name.
    pub name: String,
    /// Its labels (waves select on them).
    pub labels: BTreeMap<String, String>,
    /// Active, paused or deleting.
    pub availability: Availability,
    /// Whether its agent is connected.
    pub reachable: bool,
    /// Why the update revision's values do not render for it, if they do not.
    pub render_error: Option<String>,
    /// Its child, if it has one.
    pub child: Option<ChildObservation>,
}

/// What a promotion does to the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PromotionKind {
    /// The cluster has no child: create it.
    Create,
    /// Move the child to the update revision.
    Update,
    /// `AbortAndRollback`: move the child back to the current revision.
    Rollback,
}

/// One child to write now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promotion {
    /// The cluster.
    pub cluster: String,
    /// Its wave.
    pub wave: String,
    /// The revision to render the child from.
    pub revision: SetRevision,
    /// Create, update or roll back.
    pub kind: PromotionKind,
}

/// A condition to set (`Reconciling` and `Stalled` are only listed when True; the caller
/// deletes the owned types not listed: [`RolloutReport::write_to`] does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionReport {
    /// Condition type.
    pub type_: &'static str,
    /// Status.
    pub status: ConditionStatus,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Message, at most [`MAX_STATUS_MESSAGE_LEN`] bytes.
    pub message: String,
}

/// What the set's status should say.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RolloutReport {
    /// Counters.
    pub summary: RolloutCounters,
    /// Per-wave progress (the final wave only when it has clusters).
    pub waves: Vec<WaveStatus>,
    /// The first wave not through.
    pub current_wave: Option<String>,
    /// Failed clusters, capped.
    pub failed_clusters: Vec<FailedCluster>,
    /// Conditions.
    pub conditions: Vec<ConditionReport>,
}

impl RolloutReport {
    /// Writes the report into a status: counters, waves, current wave, failed clusters,
    /// and the conditions (set for `generation` at `now`; owned types not reported are
    /// deleted).
    pub fn write_to(&self, status: &mut HelmReleaseSetStatus, generation: i64, now: &Timestamp) {
        status.summary = self.summary;
        status.waves = self.waves.clone();
        status.current_wave = self.current_wave.clone();
        status.failed_clusters = self.failed_clusters.clone();
        for type_ in conditions::OWNED {
            match self.conditions.iter().find(|c| c.type_ == type_) {
                Some(c) => status.conditions.set_condition(
                    c.type_,
                    c.status,
                    c.reason,
                    c.message.clone(),
                    generation,
                    now,
                ),
                None => status.conditions.delete_condition(type_),
            }
        }
    }
}

/// The engine's decision.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decisions {
    /// Children to write now, in order.
    pub promotions: Vec<Promotion>,
    /// Clusters timed out at the update revision, by name.
    pub timed_out: Vec<String>,
    /// A breach under `AbortAndRollback` was just found: record
    /// `status.abortedRevision = updateRevision` before applying the promotions.
    pub abort: bool,
    /// Every wave is through at the update revision: record
    /// `status.currentRevision = updateRevision`.
    pub completed: bool,
    /// When the clock alone changes the decision next (a deadline or a soak ending).
    pub requeue_after: Option<Duration>,
    /// The status to write.
    pub report: RolloutReport,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Class {
    Paused,
    Pending,
    RenderFailed(String),
    InFlight { deadline: i64 },
    Ready { since: i64 },
    Failed(String),
    TimedOut,
}

struct Member<'a> {
    obs: &'a ClusterObservation,
    class: Class,
}

struct WaveView<'a> {
    plan: &'a WavePlan,
    members: Vec<Member<'a>>,
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// The time a child's promotion is counted from.
fn promoted_at(child: &ChildObservation) -> i64 {
    child
        .promoted_at
        .as_ref()
        .map_or(i64::MIN / 2, Timestamp::unix_seconds)
}

fn classify(obs: &ClusterObservation, update: &SetRevision, deadline: Duration, now: i64) -> Class {
    if obs.availability == Availability::Paused {
        return Class::Paused;
    }
    match &obs.child {
        Some(child) if child.revision.as_ref() == Some(update) => match &child.health {
            ChildHealth::Ready { since } => Class::Ready {
                since: since.unix_seconds(),
            },
            ChildHealth::Failed { message } => Class::Failed(message.clone()),
            ChildHealth::Progressing => {
                let deadline = promoted_at(child).saturating_add(secs(deadline));
                if now >= deadline {
                    Class::TimedOut
                } else {
                    Class::InFlight { deadline }
                }
            }
        },
        _ => match &obs.render_error {
            Some(e) => Class::RenderFailed(e.clone()),
            None => Class::Pending,
        },
    }
}

/// Per-wave figures.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    size: usize,
    active: usize,
    updated: usize,
    ready: usize,
    failed: usize,
    timed_out: usize,
    render_failed: usize,
    in_flight: usize,
    pending: usize,
    last_ready: Option<i64>,
    next_deadline: Option<i64>,
}

impl Tally {
    fn of(view: &WaveView<'_>) -> Tally {
        let mut t = Tally {
            size: view.members.len(),
            ..Tally::default()
        };
        for m in &view.members {
            if m.class != Class::Paused {
                t.active += 1;
            }
            match &m.class {
                Class::Paused => {}
                Class::Pending => t.pending += 1,
                Class::RenderFailed(_) => t.render_failed += 1,
                Class::InFlight { deadline } => {
                    t.in_flight += 1;
                    t.next_deadline = Some(t.next_deadline.map_or(*deadline, |d| d.min(*deadline)));
                }
                Class::Ready { since } => {
                    t.ready += 1;
                    t.last_ready = Some(t.last_ready.map_or(*since, |s| s.max(*since)));
                }
                Class::Failed(_) => t.failed += 1,
                Class::TimedOut => t.timed_out += 1,
            }
            if matches!(
                m.class,
                Class::InFlight { .. } | Class::Ready { .. } | Class::Failed(_) | Class::TimedOut
            ) {
                t.updated += 1;
            }
        }
        t
    }

    fn failures(&self) -> usize {
        self.failed + self.timed_out + self.render_failed
    }

    fn limit(&self, plan: &WavePlan) -> usize {
        plan.max_concurrency
            .map_or(usize::MAX, |c| c.of(self.size).max(1))
    }

    fn breached(&self, plan: &WavePlan) -> bool {
        plan.max_failures
            .is_some_and(|m| self.failures() > m.of(self.size))
    }

    fn complete(&self, plan: &WavePlan) -> bool {
        self.pending == 0 && self.in_flight == 0 && !self.breached(plan)
    }

    fn soak_until(&self, plan: &WavePlan) -> Option<i64> {
        self.last_ready
            .map(|r| r.saturating_add(secs(plan.min_soak_time)))
    }
}

fn cap(mut s: String) -> String {
    if s.len() > MAX_STATUS_MESSAGE_LEN {
        let mut cut = MAX_STATUS_MESSAGE_LEN - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// The overall phase, for conditions.
enum Phase {
    NoClusters,
    Complete,
    Progressing { wave: usize, soaking: bool },
    AwaitingApproval { wave: usize },
    Paused,
    Breached { wave: usize, no_previous: bool },
    RollingBack { wave: usize },
    RolledBack,
}

/// Decides what to promote now. See the module documentation for the rules and
/// guarantees.
pub fn decide(plan: &RolloutPlan, observed: &[ClusterObservation], now: &Timestamp) -> Decisions {
    let now_s = now.unix_seconds();
    let update = &plan.update_revision;

    // Waves and their members, in deterministic order.
    let mut views: Vec<WaveView<'_>> = plan
        .waves
        .iter()
        .map(|p| WaveView {
            plan: p,
            members: Vec::new(),
        })
        .collect();
    if views.is_empty() {
        return Decisions::default();
    }
    let mut sorted: Vec<&ClusterObservation> = observed
        .iter()
        .filter(|o| o.availability != Availability::Deleting)
        .collect();
    sorted.sort_by(|a, b| (!a.reachable, &a.name).cmp(&(!b.reachable, &b.name)));
    let mut seen = std::collections::BTreeSet::new();
    sorted.retain(|o| seen.insert(o.name.as_str()));
    let last = views.len() - 1;
    for obs in sorted {
        let idx = views
            .iter()
            .position(|v| {
                v.plan
                    .selector
                    .as_ref()
                    .is_none_or(|s| s.matches(&obs.labels))
            })
            .unwrap_or(last);
        let class = classify(obs, update, views[idx].plan.progress_deadline, now_s);
        views[idx].members.push(Member { obs, class });
    }
    let mut tallies: Vec<Tally> = views.iter().map(Tally::of).collect();
    // The first wave not through. A render failure counts against its wave only once the
    // wave is open (every earlier wave through): before, it is pending.
    let through = |t: &Tally, p: &WavePlan| {
        let soaked = t.soak_until(p).is_none_or(|s| now_s >= s);
        t.complete(p) && soaked && p.gate_open
    };
    let current = tallies
        .iter()
        .zip(&views)
        .position(|(t, v)| !through(t, v.plan));
    if let Some(c) = current {
        for t in &mut tallies[c + 1..] {
            t.pending += t.render_failed;
            t.render_failed = 0;
        }
    }

    let mut d = Decisions::default();
    let mut budget = plan.max_new_per_reconcile;
    let mut requeue: Option<i64> = None;
    let mut wake = |at: i64| {
        if at > now_s {
            requeue = Some(requeue.map_or(at, |r: i64| r.min(at)));
        }
    };

    let progressive = plan.strategy == RolloutStrategy::Progressive;
    let breach = if progressive {
        tallies
            .iter()
            .zip(&views)
            .position(|(t, v)| t.breached(v.plan))
    } else {
        None
    };
    let rollback_to = plan.current_revision.as_ref().filter(|c| *c != update);
    let aborting = progressive
        && rollback_to.is_some()
        && (plan.aborted || (breach.is_some() && plan.on_failure == OnFailure::AbortAndRollback));
    d.abort = aborting && !plan.aborted;
    let hold = aborting || plan.paused || breach.is_some();

    let mut states: Vec<WaveState> = vec![WaveState::Pending; views.len()];
    let phase: Phase;
    if let Some(back) = rollback_to.filter(|_| aborting) {
        // The newest wave with clusters still at the update revision first, a wave at a
        // time, within the wave's concurrency.
        let still_updated = |v: &WaveView<'_>| {
            v.members
                .iter()
                .any(|m| m.class != Class::Paused && at_revision(m.obs, update))
        };
        for (i, v) in views.iter().enumerate() {
            states[i] = if still_updated(v) {
                WaveState::RollingBack
            } else {
                WaveState::RolledBack
            };
        }
        if let Some(r) = views.iter().rposition(still_updated) {
            let v = &views[r];
            let deadline = secs(v.plan.progress_deadline);
            let in_flight_back = v
                .members
                .iter()
                .filter(|m| m.class != Class::Paused)
                .filter_map(|m| {
                    let child = m.obs.child.as_ref()?;
                    let at = promoted_at(child).saturating_add(deadline);
                    (child.revision.as_ref() == Some(back)
                        && child.health == ChildHealth::Progressing
                        && now_s < at)
                        .then_some(at)
                })
                .inspect(|at| wake(*at))
                .count();
            let slots = tallies[r].limit(v.plan).saturating_sub(in_flight_back);
            for m in v
                .members
                .iter()
                .filter(|m| m.class != Class::Paused && at_revision(m.obs, update))
                .take(slots.min(budget))
            {
                d.promotions.push(Promotion {
                    cluster: m.obs.name.clone(),
                    wave: v.plan.name.clone(),
                    revision: back.clone(),
                    kind: PromotionKind::Rollback,
                });
                budget -= 1;
            }
            phase = Phase::RollingBack { wave: r };
        } else {
            phase = Phase::RolledBack;
        }
    } else {
        for (i, (t, v)) in tallies.iter().zip(&views).enumerate() {
            states[i] = if progressive && t.breached(v.plan) {
                WaveState::Failed
            } else if current.is_none_or(|c| i < c) {
                WaveState::Complete
            } else if Some(i) == current {
                if !t.complete(v.plan) {
                    WaveState::Progressing
                } else if t.soak_until(v.plan).is_some_and(|s| now_s < s) {
                    WaveState::Soaking
                } else {
                    WaveState::AwaitingApproval
                }
            } else {
                WaveState::Pending
            };
        }
        if let Some(c) = current
            && !hold
        {
            let (t, v) = (&tallies[c], &views[c]);
            let slots = t.limit(v.plan).saturating_sub(t.in_flight);
            for m in v
                .members
                .iter()
                .filter(|m| m.class == Class::Pending)
                .take(slots.min(budget))
            {
                d.promotions.push(Promotion {
                    cluster: m.obs.name.clone(),
                    wave: v.plan.name.clone(),
                    revision: update.clone(),
                    kind: if m.obs.child.is_some() {
                        PromotionKind::Update
                    } else {
                        PromotionKind::Create
                    },
                });
                budget -= 1;
            }
        }
        phase = if let Some(b) = breach {
            Phase::Breached {
                wave: b,
                no_previous: plan.on_failure == OnFailure::AbortAndRollback,
            }
        } else if tallies.iter().all(|t| t.size == 0) {
            Phase::NoClusters
        } else if let Some(c) = current {
            if plan.paused {
                Phase::Paused
            } else if states[c] == WaveState::AwaitingApproval {
                Phase::AwaitingApproval { wave: c }
            } else {
                Phase::Progressing {
                    wave: c,
                    soaking: states[c] == WaveState::Soaking,
                }
            }
        } else {
            Phase::Complete
        };
        d.completed = current.is_none() && breach.is_none();
    }

    // A cluster without a child whose wave is not open for the update revision gets the
    // current revision: a cluster joining mid-rollout gets its wave's revision.
    if let Some(cur) = plan.current_revision.as_ref().filter(|c| *c != update) {
        for (i, v) in views.iter().enumerate() {
            if !hold && current == Some(i) {
                continue;
            }
            for m in v.members.iter().filter(|m| {
                m.obs.child.is_none() && m.class != Class::Paused && m.obs.render_error.is_none()
            }) {
                if budget == 0 {
                    break;
                }
                d.promotions.push(Promotion {
                    cluster: m.obs.name.clone(),
                    wave: v.plan.name.clone(),
                    revision: cur.clone(),
                    kind: PromotionKind::Create,
                });
                budget -= 1;
            }
        }
    }

    // Deadlines and soaks that will change the decision.
    for (i, (t, v)) in tallies.iter().zip(&views).enumerate() {
        if let Some(dl) = t.next_deadline {
            wake(dl);
        }
        if states[i] == WaveState::Soaking
            && let Some(s) = t.soak_until(v.plan)
        {
            wake(s);
        }
    }
    d.requeue_after = requeue.map(|r| Duration::from_secs(u64::try_from(r - now_s).unwrap_or(0)));

    // Report.
    let mut summary = RolloutCounters::default();
    let mut failed_clusters = Vec::new();
    for (i, (t, v)) in tallies.iter().zip(&views).enumerate() {
        summary.desired += t.size as u32;
        summary.updated += t.updated as u32;
        summary.ready += t.ready as u32;
        summary.failed += (t.failed + t.render_failed) as u32;
        summary.timed_out += t.timed_out as u32;
        summary.pending += t.pending as u32;
        summary.paused += (t.size - t.active) as u32;
        for m in &v.members {
            if !m.obs.reachable {
                summary.unreachable += 1;
            }
            let failure = match &m.class {
                Class::Failed(msg) => Some((FailureReason::ReleaseFailed, msg.clone())),
                Class::RenderFailed(msg) => Some((FailureReason::RenderFailed, msg.clone())),
                Class::TimedOut => Some((
                    FailureReason::ProgressDeadlineExceeded,
                    format!(
                        "not Ready within progressDeadline {}",
                        crate::duration::GoDuration::new(v.plan.progress_deadline)
                    ),
                )),
                _ => None,
            };
            if let Some((reason, message)) = failure {
                if reason == FailureReason::ProgressDeadlineExceeded {
                    d.timed_out.push(m.obs.name.clone());
                }
                if failed_clusters.len() < MAX_FAILED_CLUSTERS {
                    failed_clusters.push(FailedCluster {
                        cluster: m.obs.name.clone(),
                        wave: v.plan.name.clone(),
                        reason,
                        message: cap(message),
                    });
                }
            }
        }
        let is_final = i == last && progressive;
        if is_final && t.size == 0 && views.len() > 1 {
            continue;
        }
        d.report.waves.push(WaveStatus {
            name: v.plan.name.clone(),
            state: states[i],
            clusters: t.size as u32,
            updated: t.updated as u32,
            ready: t.ready as u32,
            failed: t.failures() as u32,
            in_flight: t.in_flight as u32,
            soak_until: if states[i] == WaveState::Soaking {
                t.soak_until(v.plan).map(Timestamp::from_unix_seconds)
            } else {
                None
            },
        });
    }
    d.timed_out.sort();
    d.report.summary = summary;
    d.report.current_wave = match phase {
        Phase::RollingBack { wave } => Some(views[wave].plan.name.clone()),
        Phase::RolledBack | Phase::Complete | Phase::NoClusters => None,
        _ => current.map(|c| views[c].plan.name.clone()),
    };
    d.report.failed_clusters = failed_clusters;
    d.report.conditions = conditions_for(plan, &phase, &views, &tallies, &summary);
    d
}

fn at_revision(obs: &ClusterObservation, rev: &SetRevision) -> bool {
    obs.child
        .as_ref()
        .is_some_and(|c| c.revision.as_ref() == Some(rev))
}

fn cond(
    type_: &'static str,
    status: ConditionStatus,
    reason: &'static str,
    message: String,
) -> ConditionReport {
    ConditionReport {
        type_,
        status,
        reason,
        message: cap(message),
    }
}

fn conditions_for(
    plan: &RolloutPlan,
    phase: &Phase,
    views: &[WaveView<'_>],
    tallies: &[Tally],
    s: &RolloutCounters,
) -> Vec<ConditionReport> {
    use ConditionStatus::{False, True};
    let u = &plan.update_revision;
    let wave_msg = |w: usize| {
        let (t, v) = (&tallies[w], &views[w]);
        format!(
            "wave {} ({}/{}): {}/{} clusters updated, {} ready, {} failed",
            v.plan.name,
            w + 1,
            views.len(),
            t.updated,
            t.size,
            t.ready,
            t.failures()
        )
    };
    let mut out = Vec::new();
    let ready;
    let progressing;
    let paused;
    let mut reconciling = None;
    let mut stalled = None;
    match phase {
        Phase::NoClusters => {
            let m = "No cluster matches the set".to_owned();
            ready = cond(condition::READY, True, reason::NO_CLUSTERS, m.clone());
            progressing = cond(
                conditions::ROLLOUT_PROGRESSING,
                False,
                reason::NO_CLUSTERS,
                m,
            );
            paused = cond(
                conditions::ROLLOUT_PAUSED,
                False,
                reason::NOT_PAUSED,
                "Rollout is not paused".into(),
            );
        }
        Phase::Complete => {
            let m = format!(
                "Revision {u} is rolled out to {} clusters, {} ready",
                s.desired, s.ready
            );
            ready = cond(condition::READY, True, reason::ROLLOUT_COMPLETE, m.clone());
            progressing = cond(
                conditions::ROLLOUT_PROGRESSING,
                False,
                reason::ROLLOUT_COMPLETE,
                m,
            );
            paused = cond(
                conditions::ROLLOUT_PAUSED,
                False,
                reason::NOT_PAUSED,
                "Rollout is not paused".into(),
            );
        }
        Phase::Progressing { wave, soaking } => {
            let (r, m) = if *soaking {
                (
                    reason::WAVE_SOAKING,
                    format!(
                        "Rolling out revision {u}: {} is complete and soaking",
                        wave_msg(*wave)
                    ),
                )
            } else {
                (
                    reason::PROGRESSING,
                    format!("Rolling out revision {u}: {}", wave_msg(*wave)),
                )
            };
            ready = cond(condition::READY, False, r, m.clone());
            reconciling = Some(cond(condition::RECONCILING, True, r, m.clone()));
            progressing = cond(conditions::ROLLOUT_PROGRESSING, True, r, m);
            paused = cond(
                conditions::ROLLOUT_PAUSED,
                False,
                reason::NOT_PAUSED,
                "Rollout is not paused".into(),
            );
        }
        Phase::AwaitingApproval { wave } => {
            let m = format!(
                "Wave {} is complete; the next wave waits for approval of revision {u}",
                views[*wave].plan.name
            );
            ready = cond(
                condition::READY,
                False,
                reason::AWAITING_APPROVAL,
                m.clone(),
            );
            progressing = cond(
                conditions::ROLLOUT_PROGRESSING,
                False,
                reason::AWAITING_APPROVAL,
                m.clone(),
            );
            paused = cond(
                conditions::ROLLOUT_PAUSED,
                True,
                reason::AWAITING_APPROVAL,
                m,
            );
        }
        Phase::Paused => {
            let m = format!("Rollout of revision {u} is paused (spec.rollout.paused)");
            ready = cond(condition::READY, False, reason::ROLLOUT_PAUSED, m.clone());
            progressing = cond(
                conditions::ROLLOUT_PROGRESSING,
                False,
                reason::ROLLOUT_PAUSED,
                m.clone(),
            );
            paused = cond(conditions::ROLLOUT_PAUSED, True, reason::ROLLOUT_PAUSED, m);
        }
        Phase::Breached { wave, no_previous } => {
            let (t, v) = (&tallies[*wave], &views[*wave]);
            let mut m = format!(
                "Wave {}: {} of {} clusters failed, more than maxFailures {}; rollout of revision {u} paused",
                v.plan.name,
                t.failures(),
                t.size,
                v.plan.max_failures.map_or(0, |f| f.of(t.size)),
            );
            if *no_previous {
                m.push_str(" (no previous revision to roll back to)");
            }
            ready = cond(
                condition::READY,
                False,
                reason::MAX_FAILURES_EXCEEDED,
                m.clone(),
            );
            stalled = Some(cond(
                condition::STALLED,
                True,
                reason::MAX_FAILURES_EXCEEDED,
                m.clone(),
            ));
            progressing = cond(
                conditions::ROLLOUT_PROGRESSING,
                False,
                reason::MAX_FAILURES_EXCEEDED,
                m.clone(),
            );
            paused = cond(
                conditions::ROLLOUT_PAUSED,
                True,
                reason::MAX_FAILURES_EXCEEDED,
                m,
            );
        }
        Phase::RollingBack { wave } => {
            let back = plan
                .current_revision
                .as_ref()
                .map_or("", SetRevision::as_str);
            let m = format!(
                "Rollout of revision {u} aborted; rolling wave {} back to revision {back}",
                views[*wave].plan.name
            );
            ready = cond(condition::READY, False, reason::ROLLING_BACK, m.clone());
            reconciling = Some(cond(
                condition::RECONCILING,
                True,
                reason::ROLLING_BACK,
                m.clone(),
            ));
            progressing = cond(
                conditions::ROLLOUT_PROGRESSING,
                False,
                reason::ROLLOUT_ABORTED,
                m,
            );
            paused = cond(
                conditions::ROLLOUT_PAUSED,
                False,
                reason::NOT_PAUSED,
                "Rollout is not paused".into(),
            );
        }
        Phase::RolledBack => {
            let back = plan
                .current_revision
                .as_ref()
                .map_or("", SetRevision::as_str);
            let m = format!(
                "Rollout of revision {u} aborted after failures; clusters are back on revision {back}"
            );
            ready = cond(condition::READY, False, reason::ROLLOUT_ABORTED, m.clone());
            stalled = Some(cond(
                condition::STALLED,
                True,
                reason::ROLLOUT_ABORTED,
                m.clone(),
            ));
            progressing = cond(
                conditions::ROLLOUT_PROGRESSING,
                False,
                reason::ROLLOUT_ABORTED,
                m,
            );
            paused = cond(
                conditions::ROLLOUT_PAUSED,
                False,
                reason::NOT_PAUSED,
                "Rollout is not paused".into(),
            );
        }
    }
    let failures = s.failed + s.timed_out;
    let degraded = match phase {
        Phase::RollingBack { .. } | Phase::RolledBack => cond(
            conditions::ROLLOUT_DEGRADED,
            True,
            reason::ROLLOUT_ABORTED,
            format!("Rollout of revision {u} aborted; {failures} clusters failed"),
        ),
        _ if failures == 0 => cond(
            conditions::ROLLOUT_DEGRADED,
            False,
            reason::NO_FAILURES,
            "No cluster failed".into(),
        ),
        Phase::Breached { .. } => cond(
            conditions::ROLLOUT_DEGRADED,
            True,
            reason::MAX_FAILURES_EXCEEDED,
            format!("{} clusters failed, {} timed out", s.failed, s.timed_out),
        ),
        _ => cond(
            conditions::ROLLOUT_DEGRADED,
            True,
            if s.failed == 0 {
                reason::PROGRESS_DEADLINE_EXCEEDED
            } else {
                reason::CLUSTERS_FAILED
            },
            format!("{} clusters failed, {} timed out", s.failed, s.timed_out),
        ),
    };
    out.push(ready);
    out.extend(reconciling);
    out.extend(stalled);
    out.push(progressing);
    out.push(paused);
    out.push(degraded);
    out
}

#[cfg(test)]
mod tests;
