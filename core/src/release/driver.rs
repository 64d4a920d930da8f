//! One reconcile as an IO-free driver: it says what to do next, the caller does it and
//! hands back what it saw. The agent runs it against a cluster; core's tests run it against
//! a simulated Helm storage. Both only dispatch; the loop itself lives here once.
//!
//! ```text
//! let mut d = Driver::new(&plan, status);          // begin_reconcile
//! loop {
//!     match d.next(&now) {
//!         Next::Observe { .. }      => d.observed(current, rollback_target),
//!         Next::DetectDrift        => d.drift(observation),
//!         Next::Persist            => { persist(d.status()); d.persisted() }
//!         Next::Run { action, .. } => d.completed(&action, run(action), &now),
//!         Next::Done(step)         => break,
//!     }
//! }
//! let done = d.finish();                            // finish_reconcile: status, events
//! ```
//!
//! Guarantees:
//!
//! - [`Next::Persist`] comes before every [`Next::Run`] whose status changed since the last
//!   persist, and before [`Next::Done`]: an agent killed during an action restarts from the
//!   decision that started it (a release left `pending-*` is then unlocked), and nothing
//!   is written twice for one decision.
//! - Drift detection is asked for at most once per observation; its result is used by the
//!   next decision only.
//! - A reconcile takes at most [`MAX_DECISIONS`] decisions; past that it ends with a
//!   [`Step::Failed`] (core's loop always ends well before).
//! - [`Driver::stop`] ends the reconcile at a safe point (between actions) with
//!   [`Step::Requeue`]; a decision whose action has not started is undone.

use crate::meta::Timestamp;
use crate::plan::{DriftObservation, Observed, ReleasePlan, ReleaseRecord};
use crate::status::HelmReleaseStatus;

use super::{
    Action, AtomicRelease, Begin, Event, Outcome, ReconcileError, ResetReason, Step, apply_outcome,
    begin_reconcile, finish_reconcile, rollback_candidate,
};

/// The most decisions one reconcile takes.
pub const MAX_DECISIONS: usize = 16;

/// What the caller does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Read the newest release record from Helm storage and, when `rollback_version` is
    /// set, the record of that version; then call [`Driver::observed`]. Records are
    /// summarized against [`Driver::status`].
    Observe {
        /// The version of the rollback target to read, if any.
        rollback_version: Option<u32>,
    },
    /// Run drift detection on the current release, then call [`Driver::drift`].
    DetectDrift,
    /// Persist [`Driver::status`], then call [`Driver::persisted`].
    Persist,
    /// Run the action within `timeout`, then call [`Driver::completed`].
    Run {
        /// The action.
        action: Action,
        /// Its timeout.
        timeout: crate::duration::GoDuration,
    },
    /// The reconcile is over: call [`Driver::finish`].
    Done(Step),
}

/// Where the driver is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Needs an observation.
    Observe,
    /// Has an observation; decides next.
    Decide(Box<Observed>),
    /// Decided to run this action (persist first when dirty).
    Act(Action, crate::duration::GoDuration),
    /// Over (the status is final once persisted).
    Ended(Step),
}

/// The end of a reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// How it ended.
    pub step: Step,
    /// The status after it (persist it).
    pub status: HelmReleaseStatus,
    /// The Kubernetes Events Flux would record, oldest first.
    pub events: Vec<Event>,
    /// The actions run, in order.
    pub actions: Vec<&'static str>,
    /// Why the failure counters were reset at the start, if they were.
    pub reset: Option<ResetReason>,
}

/// One reconcile of a plan (see the module docs).
#[derive(Debug)]
pub struct Driver<'p> {
    plan: &'p ReleasePlan,
    status: HelmReleaseStatus,
    atomic: AtomicRelease,
    phase: Phase,
    drift: DriftObservation,
    dirty: bool,
    decisions: usize,
    actions: Vec<&'static str>,
    events: Vec<Event>,
    reset: Option<ResetReason>,
    /// The action in flight uninstalls the previous release target.
    uninstalling_previous: bool,
    /// The status and the number of events before the decision that chose the action not
    /// run yet: a stop before it runs undoes the decision.
    before_decision: Option<(HelmReleaseStatus, usize)>,
}

impl<'p> Driver<'p> {
    /// Starts a reconcile of `plan` from the persisted `status` ([`begin_reconcile`]).
    pub fn new(plan: &'p ReleasePlan, mut status: HelmReleaseStatus) -> Self {
        let mut driver = Driver {
            plan,
            status: HelmReleaseStatus::default(),
            atomic: AtomicRelease::new(),
            phase: Phase::Observe,
            drift: DriftObservation::NotChecked,
            dirty: true,
            decisions: 0,
            actions: Vec::new(),
            events: Vec::new(),
            reset: None,
            uninstalling_previous: false,
            before_decision: None,
        };
        match begin_reconcile(plan, &mut status) {
            Begin::Suspended => {
                // Flux returns before any work: nothing changes, nothing is written.
                driver.phase = Phase::Ended(Step::Done);
                driver.dirty = false;
            }
            Begin::UninstallPrevious(action) => {
                let timeout = action.timeout(plan);
                driver.phase = Phase::Act(action, timeout);
                driver.uninstalling_previous = true;
            }
            Begin::Proceed { reset } => driver.reset = reset,
        }
        driver.status = status;
        driver
    }

    /// Ends the reconcile with `step` ([`finish_reconcile`]); the status is then final.
    fn end(&mut self, step: Step) {
        finish_reconcile(self.plan, &mut self.status, &step);
        self.events.extend(self.atomic.take_events());
        self.phase = Phase::Ended(step);
        self.dirty = true;
    }

    /// The status as it stands.
    pub fn status(&self) -> &HelmReleaseStatus {
        &self.status
    }

    /// What to do next.
    pub fn next(&mut self, now: &Timestamp) -> Next {
        loop {
            match &self.phase {
                Phase::Observe => {
                    return Next::Observe {
                        rollback_version: rollback_candidate(self.plan, &self.status)
                            .map(|s| s.version),
                    };
                }
                Phase::Decide(_) => {
                    self.decisions += 1;
                    if self.decisions > MAX_DECISIONS {
                        self.end(Step::Failed(ReconcileError::State(format!(
                            "reconcile did not settle after {MAX_DECISIONS} decisions"
                        ))));
                        continue;
                    }
                    let Phase::Decide(mut observed) =
                        std::mem::replace(&mut self.phase, Phase::Observe)
                    else {
                        continue;
                    };
                    self.before_decision = Some((self.status.clone(), self.atomic.events.len()));
                    observed.status = std::mem::take(&mut self.status);
                    let step = self.atomic.step(self.plan, &mut observed, now);
                    self.status = observed.status;
                    self.dirty = true;
                    match step {
                        Step::Run {
                            action: Action::DetectDrift,
                            ..
                        } => return Next::DetectDrift,
                        Step::Run { action, timeout } => self.phase = Phase::Act(action, timeout),
                        stop => self.end(stop),
                    }
                }
                Phase::Act(action, timeout) => {
                    if self.dirty {
                        return Next::Persist;
                    }
                    return Next::Run {
                        action: action.clone(),
                        timeout: *timeout,
                    };
                }
                Phase::Ended(step) => {
                    if self.dirty {
                        return Next::Persist;
                    }
                    return Next::Done(step.clone());
                }
            }
        }
    }

    /// What Helm storage holds: the newest record and the rollback target's record.
    pub fn observed(
        &mut self,
        current: Option<ReleaseRecord>,
        rollback_target: Option<ReleaseRecord>,
    ) {
        let drift = std::mem::take(&mut self.drift);
        self.phase = Phase::Decide(Box::new(Observed {
            current,
            rollback_target,
            drift,
            status: HelmReleaseStatus::default(),
        }));
    }

    /// The result of drift detection; the next decision uses it (after a fresh
    /// observation).
    pub fn drift(&mut self, observation: DriftObservation) {
        self.drift = observation;
        self.phase = Phase::Observe;
    }

    /// The status as [`Driver::status`] shows it was persisted.
    pub fn persisted(&mut self) {
        self.dirty = false;
    }

    /// An action's outcome.
    pub fn completed(&mut self, action: &Action, outcome: &Outcome, now: &Timestamp) {
        self.actions.push(action.name());
        self.dirty = true;
        self.drift = DriftObservation::NotChecked;
        if std::mem::take(&mut self.uninstalling_previous) {
            // The uninstall of a previous release target ends the reconcile.
            let applied = apply_outcome(self.plan, action, outcome, &mut self.status, now);
            self.events.extend(applied.events);
            self.end(Step::Requeue);
            return;
        }
        match self
            .atomic
            .complete(self.plan, action, outcome, &mut self.status, now)
        {
            Some(stop) => self.end(stop),
            None => self.phase = Phase::Observe,
        }
    }

    /// Stops at this safe point (no action runs any more): the reconcile ends with
    /// [`Step::Requeue`] once the status is persisted.
    pub fn stop(&mut self) {
        if matches!(self.phase, Phase::Ended(_)) {
            return;
        }
        if matches!(self.phase, Phase::Act(..))
            && !self.uninstalling_previous
            && let Some((status, events)) = self.before_decision.take()
        {
            // The action was decided but does not run: nothing of that decision stands (no
            // `Reconciling` "Running '<action>' action" for an action that never ran, no
            // `forceAt` token consumed for nothing), as Flux's loop, which checks for
            // cancellation before deciding, leaves it.
            self.status = status;
            self.atomic.events.truncate(events);
        }
        self.end(Step::Requeue);
    }

    /// The end of the reconcile, after [`Next::Done`]: the status to report (as persisted)
    /// and the events to record. Called earlier, it ends as [`Driver::stop`] does.
    pub fn finish(mut self) -> Finished {
        self.stop();
        let step = match self.phase {
            Phase::Ended(step) => step,
            _ => Step::Requeue,
        };
        Finished {
            step,
            status: self.status,
            events: self.events,
            actions: self.actions,
            reset: self.reset,
        }
    }
}
