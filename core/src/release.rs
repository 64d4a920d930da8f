//! The release state machine: what to do next with one Helm release, decided purely.
//!
//! This is Flux helm-controller's `DetermineReleaseState`, `actionForState` and
//! `AtomicRelease` loop, rewritten as functions of values. The agent observes, this module
//! decides, the agent acts, and this module records the outcome in the status:
//!
//! ```text
//! match begin_reconcile(&plan, &mut status) {     once per reconcile
//!     Begin::Suspended => return,
//!     Begin::UninstallPrevious(action) => run it, apply_outcome(..), requeue,
//!     Begin::Proceed { .. } => {}
//! }
//! let mut atomic = AtomicRelease::new();
//! let mut drift = DriftObservation::NotChecked;
//! let stop = loop {
//!     let mut observed = Observed { current, rollback_target, drift, status };  IO: Helm storage
//!     let step = atomic.step(&plan, &mut observed, now);     pure: decide + record the decision
//!     status = observed.status;
//!     match step {
//!         Step::Run { action: Action::DetectDrift, .. } => drift = detect(),     IO: dry-run diff
//!         Step::Run { action, timeout } => {
//!             let outcome = execute(&action, timeout);        IO: Helm action
//!             drift = DriftObservation::NotChecked;
//!             if let Some(stop) = atomic.complete(&plan, &action, &outcome, &mut status, now) {
//!                 break stop;
//!             }
//!         }
//!         stop => break stop,                      Done | Requeue | RetryAfter | Stalled | Failed
//!     }
//! };
//! finish_reconcile(&plan, &mut status, &stop);    observedGeneration, lastHandledReconcileAt
//! record(atomic.take_events());                   Kubernetes Events
//! ```
//!
//! [`next_action`] is the decision alone; [`apply_outcome`] is the status update alone.
//! Both are total: every combination of plan and observation maps to one [`Action`], and
//! every outcome to one status.
//!
//! # Guarantees
//!
//! - **At most one action of each kind per reconcile.** [`AtomicRelease`] never runs two
//!   release actions (install, upgrade, uninstall), two tests or two drift corrections in
//!   one reconcile, and it always stops after a remediation (rollback or uninstall). A
//!   reconcile can still chain unlock → upgrade → test → drift correction.
//! - **Bounded retries.** With `retries: N ≥ 0`, an install or upgrade is attempted at most
//!   `N + 1` times between counter resets; then the release is [`Action::Stalled`] until
//!   the spec, chart, values or a `resetAt`/`forceAt` token changes. Negative retries
//!   remediate forever. The `RetryOnFailure` strategy never remediates and never stalls.
//! - **Counters reset on change.** A new generation, chart version or config digest, or a
//!   handled `resetAt` token, zeroes the failure counters before anything is decided.
//! - **Tokens are consumed once.** A `forceAt` token is honoured in at most one decision:
//!   its value is recorded in `lastHandledForceAt` the first time it is evaluated.
//! - **Stale locks are broken.** A release left `pending-*` (e.g. by an agent killed
//!   mid-action) is unlocked, marked `failed`, and then upgraded in the same reconcile.
//! - **Only observed releases are trusted.** When the newest storage record does not match
//!   the digest of the newest history snapshot, the release is treated as unmanaged: its
//!   history is dropped and it is adopted with an upgrade. A rollback target that vanished
//!   or changed in storage is never rolled back to; the upgrade is retried instead.
//! - **Exact Flux messages and reasons** on the `Ready`, `Released`, `TestSuccess`,
//!   `Remediated`, `Reconciling`, `Stalled` and `Drifted` conditions.
//!
//! # Assumptions
//!
//! - The agent holds the controller state ([`Observed::status`]) durably beside the plan,
//!   and calls [`begin_reconcile`] once at the start of each reconcile, before deciding.
//! - `Observed::current` is Helm's `Last` for the plan's release name in the plan's storage
//!   namespace, and its `digest` was computed with the OCI digest given by
//!   [`observation_oci_digest`]. `Observed::rollback_target` is the storage record of the
//!   version [`rollback_candidate`] names (`None` when it is gone).
//! - Drift detection is run only when asked for ([`Action::DetectDrift`]) and its result is
//!   put in `Observed::drift` before deciding again; the agent resets it to
//!   [`DriftObservation::NotChecked`] after any action.
//! - The outcome of an action lists every release record the action wrote to storage
//!   ([`Outcome::writes`]); an empty list means storage did not change.
//! - Clocks are the caller's: timestamps come in as `now`.
//! - Feature gates of the Go controller are fixed at their defaults (notably
//!   `DefaultToRetryOnFailure=false` and `UseHelm3Defaults=false`).

use std::fmt;

use crate::digest::{self, Digest};
use crate::duration::GoDuration;
use crate::meta::{ConditionStatus, Conditions, Timestamp, condition, reason};
use crate::plan::{DriftObservation, Observed, ReleasePlan, ReleaseRecord};
use crate::spec::{DriftDetectionMode, RemediationStrategy};
use crate::status::{
    HelmReleaseStatus, ReleaseAction, SNAPSHOT_API_VERSION, Snapshot, StorageStatus,
};

// Error texts of Flux's sentinel errors, which surface in reasons and messages.
const ERR_RELEASE_DISAPPEARED: &str = "release disappeared from storage";
const ERR_RELEASE_NOT_OBSERVED: &str = "release not observed to be made for object";
const ERR_RELEASE_DIGEST: &str = "release digest verification error";
const ERR_RELEASE_MISMATCH: &str = "release mismatch";
const ERR_NO_LATEST: &str = "no latest release";
const ERR_NO_STORAGE_UPDATE: &str = "release not updated in Helm storage";

/// The state of a release, as Flux's `DetermineReleaseState` classifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseState {
    /// No release in storage, or only an uninstalled one.
    Absent {
        /// Why.
        reason: &'static str,
    },
    /// A release exists that this controller did not observe making (or whose history
    /// does not verify).
    Unmanaged {
        /// Why.
        reason: String,
    },
    /// The newest release is `pending-*`.
    Locked {
        /// Its status.
        status: StorageStatus,
    },
    /// The chart, values, post renderers or common metadata changed.
    OutOfSync {
        /// Why.
        reason: &'static str,
    },
    /// The cluster state differs from the stored manifest.
    Drifted {
        /// Per-object summary.
        summary: String,
    },
    /// Tests are enabled and have not run for the current release.
    Untested,
    /// Drift detection is enabled and has not run for this observation.
    DriftUnchecked,
    /// Nothing to do.
    InSync,
    /// The release failed (in storage, or its tests).
    Failed {
        /// Why (empty for a `failed` storage status).
        reason: String,
    },
    /// The state cannot be determined.
    Unknown {
        /// The error.
        error: String,
    },
}

impl fmt::Display for ReleaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Absent { reason } => write!(f, "Absent: {reason}"),
            Self::Unmanaged { reason } => write!(f, "Unmanaged: {reason}"),
            Self::Locked { status } => write!(f, "Locked: release with status '{status}'"),
            Self::OutOfSync { reason } => write!(f, "OutOfSync: {reason}"),
            Self::Drifted { .. } => f.write_str("Drifted"),
            Self::Untested => f.write_str("Untested"),
            Self::DriftUnchecked => f.write_str("DriftUnchecked"),
            Self::InSync => f.write_str("InSync"),
            Self::Failed { reason } => write!(f, "Failed: {reason}"),
            Self::Unknown { error } => write!(f, "Unknown: {error}"),
        }
    }
}

/// Why an upgrade was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeCause {
    /// Adopting an unmanaged release (history dropped).
    Adopt,
    /// The desired state changed.
    OutOfSync(&'static str),
    /// A `forceAt` token was handled.
    Forced,
    /// `RetryOnFailure` retries a failed release with an upgrade.
    RetryFailed,
    /// A failed release with no active remediation (no install or upgrade attempted).
    NoActiveRemediation,
    /// A failed release whose counters were reset by a change.
    FailuresReset,
    /// The rollback target is gone or changed in storage.
    RollbackTargetUnverified(&'static str),
}

/// Why an uninstall (not a remediation) was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UninstallCause {
    /// The HelmRelease is being deleted.
    Deletion,
    /// The storage namespace, release namespace, release name or chart name changed.
    ReleaseTargetChanged,
}

/// Why nothing needs doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The release matches the desired state.
    InSync,
    /// Drift was found and `driftDetection.mode` is `warn`.
    DriftWarned,
    /// `spec.suspend` is set.
    Suspended,
}

/// Why the release stalled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stall {
    /// The active remediation's retries are exhausted.
    RetriesExceeded {
        /// `cannot install release`, `cannot upgrade release`, `cannot remediate failed
        /// release`, or `after remediation`.
        context: &'static str,
    },
    /// The rollback target is missing from history.
    MissingRollbackTarget,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Helm install.
    Install,
    /// Helm upgrade.
    Upgrade {
        /// Why.
        cause: UpgradeCause,
    },
    /// Helm test of the current release.
    Test,
    /// Remediation: Helm rollback to `target`.
    Rollback {
        /// The snapshot of the release version to roll back to.
        target: Box<Snapshot>,
    },
    /// Remediation: Helm uninstall of the current release.
    UninstallRemediation,
    /// Mark the `pending-*` release `failed`.
    Unlock {
        /// The pending status found.
        status: StorageStatus,
    },
    /// Helm uninstall of a release this object no longer wants.
    Uninstall {
        /// Why.
        cause: UninstallCause,
        /// Release name (shortened) to uninstall.
        name: String,
        /// Storage namespace it lives in.
        storage_namespace: String,
    },
    /// Run drift detection and decide again with its result in `Observed::drift`.
    DetectDrift,
    /// Correct drift by applying the stored manifest's objects.
    CorrectDrift {
        /// The drift summary.
        summary: String,
    },
    /// Nothing to do.
    None(Settled),
    /// Retries exhausted or no way to remediate: wait for a change.
    Stalled(Stall),
    /// The state could not be determined (`Ready=False StateError`, retried with backoff).
    Error(String),
}

/// The kind of action, as the loop's "one per kind" rule counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionKind {
    /// Install, upgrade, uninstall.
    Release,
    /// Rollback or uninstall remediation.
    Remediate,
    /// Test.
    Test,
    /// Unlock.
    Unlock,
    /// Drift correction.
    DriftCorrection,
}

impl Action {
    /// The kind of an executable action; `None` for decisions that run nothing.
    pub fn kind(&self) -> Option<ActionKind> {
        Some(match self {
            Self::Install | Self::Upgrade { .. } | Self::Uninstall { .. } => ActionKind::Release,
            Self::Rollback { .. } | Self::UninstallRemediation => ActionKind::Remediate,
            Self::Test => ActionKind::Test,
            Self::Unlock { .. } => ActionKind::Unlock,
            Self::CorrectDrift { .. } => ActionKind::DriftCorrection,
            Self::DetectDrift | Self::None(_) | Self::Stalled(_) | Self::Error(_) => return None,
        })
    }

    /// The name Flux uses in messages (`install`, `upgrade`, `test`, `rollback`,
    /// `uninstall`, `unlock`, `correct cluster drift`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Install => "install",
            Self::Upgrade { .. } => "upgrade",
            Self::Test => "test",
            Self::Rollback { .. } => "rollback",
            Self::UninstallRemediation | Self::Uninstall { .. } => "uninstall",
            Self::Unlock { .. } => "unlock",
            Self::CorrectDrift { .. } => "correct cluster drift",
            Self::DetectDrift => "detect cluster drift",
            Self::None(_) => "none",
            Self::Stalled(_) => "stalled",
            Self::Error(_) => "error",
        }
    }

    /// The timeout the action runs with.
    pub fn timeout(&self, plan: &ReleasePlan) -> GoDuration {
        let o = &plan.options;
        let d = o.timeout();
        match self {
            Self::Install => o.install.timeout.unwrap_or(d),
            Self::Upgrade { .. } => o.upgrade.timeout.unwrap_or(d),
            Self::Test => o.test.timeout.unwrap_or(d),
            Self::Rollback { .. } => o.rollback.timeout.unwrap_or(d),
            Self::UninstallRemediation => o.uninstall.timeout.unwrap_or(d),
            _ => d,
        }
    }
}

/// A remediation configuration, resolved with its defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remediation {
    /// Which counter it uses.
    pub action: ReleaseAction,
    /// Retries (negative: unlimited).
    pub retries: i64,
    /// `ignoreTestFailures` as configured.
    pub ignore_test_failures: Option<bool>,
    /// `remediateLastFailure` with its default.
    pub remediate_last_failure: bool,
    /// Strategy (`uninstall` for installs).
    pub strategy: RemediationStrategy,
}

impl Remediation {
    /// The install remediation of a plan.
    pub fn install(plan: &ReleasePlan) -> Self {
        let r = plan.options.install.remediation();
        Self {
            action: ReleaseAction::Install,
            retries: r.retries,
            ignore_test_failures: r.ignore_test_failures,
            remediate_last_failure: r.remediate_last_failure(),
            strategy: RemediationStrategy::Uninstall,
        }
    }

    /// The upgrade remediation of a plan.
    pub fn upgrade(plan: &ReleasePlan) -> Self {
        let r = plan.options.upgrade.remediation();
        Self {
            action: ReleaseAction::Upgrade,
            retries: r.retries,
            ignore_test_failures: r.ignore_test_failures,
            remediate_last_failure: r.remediate_last_failure(),
            strategy: r.strategy(),
        }
    }

    /// The remediation selected by `status.lastAttemptedReleaseAction`.
    pub fn active(plan: &ReleasePlan, status: &HelmReleaseStatus) -> Option<Self> {
        match status.last_attempted_release_action {
            Some(ReleaseAction::Install) => Some(Self::install(plan)),
            Some(ReleaseAction::Upgrade) => Some(Self::upgrade(plan)),
            _ => None,
        }
    }

    /// The counter this remediation reads.
    pub fn failure_count(&self, status: &HelmReleaseStatus) -> i64 {
        match self.action {
            ReleaseAction::Install => status.install_failures,
            _ => status.upgrade_failures,
        }
    }

    fn increment(&self, status: &mut HelmReleaseStatus) {
        match self.action {
            ReleaseAction::Install => status.install_failures += 1,
            _ => status.upgrade_failures += 1,
        }
    }

    /// `retries >= 0 && failures > retries`: negative retries never exhaust.
    pub fn retries_exhausted(&self, status: &HelmReleaseStatus) -> bool {
        self.retries >= 0 && self.failure_count(status) > self.retries
    }

    /// Whether test failures are ignored, defaulting to `spec.test.ignoreFailures`.
    pub fn ignore_test_failures(&self, default: bool) -> bool {
        self.ignore_test_failures.unwrap_or(default)
    }

    fn is_uninstall_after_upgrade(&self) -> bool {
        self.action == ReleaseAction::Upgrade && self.strategy == RemediationStrategy::Uninstall
    }
}

/// The retry interval of the active `RetryOnFailure` strategy, if any.
pub fn active_retry(plan: &ReleasePlan, status: &HelmReleaseStatus) -> Option<GoDuration> {
    match status.last_attempted_release_action {
        Some(ReleaseAction::Install) => plan.options.install.retry(),
        Some(ReleaseAction::Upgrade) => plan.options.upgrade.retry(),
        _ => None,
    }
}

fn ignore_failures_for(plan: &ReleasePlan, status: &HelmReleaseStatus) -> bool {
    let default = plan.options.test.ignore_failures;
    Remediation::active(plan, status).map_or(default, |r| r.ignore_test_failures(default))
}

/// Flux's `HandleAnnotationRequest` check: the request token equals `requestedAt`, the
/// reconcile request was not handled yet, and the token was not handled before.
fn request_pending(
    token: Option<&str>,
    requested_at: Option<&str>,
    last_handled_reconcile: &str,
    last_handled: &str,
) -> bool {
    match (token, requested_at) {
        (Some(t), Some(r)) => t == r && last_handled_reconcile != r && last_handled != t,
        _ => false,
    }
}

/// True when a `forceAt` request is pending for this decision.
pub fn force_requested(plan: &ReleasePlan, status: &HelmReleaseStatus) -> bool {
    request_pending(
        plan.requests.force_at.as_deref(),
        plan.requests.requested_at.as_deref(),
        &status.last_handled_reconcile_at,
        &status.last_handled_force_at,
    )
}

/// The snapshot a rollback remediation would target; the agent reads its storage record
/// into [`Observed::rollback_target`].
pub fn rollback_candidate<'a>(
    plan: &ReleasePlan,
    status: &'a HelmReleaseStatus,
) -> Option<&'a Snapshot> {
    let ignore = Remediation::upgrade(plan).ignore_test_failures(plan.options.test.ignore_failures);
    status.previous(ignore)
}

/// The OCI digest Flux puts in the observation whose digest verifies or records a
/// release version: the snapshot's own for versions already in history, else the
/// attempted one (`status.lastAttemptedRevisionDigest`).
pub fn observation_oci_digest(status: &HelmReleaseStatus, version: u32) -> &str {
    status
        .history
        .iter()
        .find(|s| s.version == version)
        .map_or(status.last_attempted_revision_digest.as_str(), |s| {
            s.oci_digest.as_str()
        })
}

/// Verifies a storage record against the snapshot that claims it (`VerifyReleaseObject`).
fn verify_record(snapshot: &Snapshot, record: &ReleaseRecord) -> Result<(), &'static str> {
    if snapshot.api_version != SNAPSHOT_API_VERSION {
        return Ok(());
    }
    let expected = Digest::parse(&snapshot.digest).map_err(|_| ERR_RELEASE_DIGEST)?;
    if record.digest != expected {
        return Err(ERR_RELEASE_NOT_OBSERVED);
    }
    Ok(())
}

/// Flux's `DetermineReleaseState`.
pub fn determine_state(plan: &ReleasePlan, observed: &Observed) -> ReleaseState {
    let status = &observed.status;
    let Some(rls) = &observed.current else {
        return ReleaseState::Absent {
            reason: "no release in storage for object",
        };
    };
    if rls.status.is_pending() {
        return ReleaseState::Locked { status: rls.status };
    }
    let Some(cur) = status.latest() else {
        return if rls.status == StorageStatus::Uninstalled {
            ReleaseState::Absent {
                reason: "found uninstalled release in storage",
            }
        } else {
            ReleaseState::Unmanaged {
                reason: "found existing release in storage".into(),
            }
        };
    };
    if let Err(e) = verify_record(cur, rls) {
        return ReleaseState::Unmanaged { reason: e.into() };
    }
    match rls.status {
        StorageStatus::Failed => {
            return ReleaseState::Failed {
                reason: String::new(),
            };
        }
        StorageStatus::Uninstalled => {
            return ReleaseState::Absent {
                reason: "found uninstalled release in storage",
            };
        }
        StorageStatus::Deployed => {}
        other => {
            return ReleaseState::Unknown {
                error: format!("unable to determine state for release with status '{other}'"),
            };
        }
    }
    if rls.chart_name != plan.chart.name || rls.chart_version != plan.chart.version {
        return ReleaseState::OutOfSync {
            reason: "release chart changed",
        };
    }
    if !digest::verify_values(&cur.config_digest, &plan.values) {
        return ReleaseState::OutOfSync {
            reason: "release config values changed",
        };
    }
    if status.observed_generation != plan.generation {
        if plan.post_renderers_digest != status.observed_post_renderers_digest {
            return ReleaseState::OutOfSync {
                reason: "postrenderers digest has changed",
            };
        }
        if plan.common_metadata_digest != status.observed_common_metadata_digest {
            return ReleaseState::OutOfSync {
                reason: "common metadata digest has changed",
            };
        }
    }
    let test = &plan.options.test;
    if test.enable {
        if !cur.has_been_tested() {
            return ReleaseState::Untested;
        }
        if let Some(rem) = Remediation::active(plan, status)
            && !rem.ignore_test_failures(test.ignore_failures)
            && cur.has_test_in_phase(crate::status::HookPhase::Failed)
        {
            return ReleaseState::Failed {
                reason: "release has test in failed phase".into(),
            };
        }
    }
    if plan.options.drift_detection.mode().detects() {
        return match &observed.drift {
            DriftObservation::NotChecked => ReleaseState::DriftUnchecked,
            DriftObservation::NoDrift => ReleaseState::InSync,
            DriftObservation::Drifted { summary } => ReleaseState::Drifted {
                summary: summary.clone(),
            },
            DriftObservation::Error { message } => ReleaseState::Unknown {
                error: format!("unable to determine cluster state: {message}"),
            },
        };
    }
    ReleaseState::InSync
}

/// A decision: the state seen and the action chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The release state.
    pub state: ReleaseState,
    /// The action.
    pub action: Action,
}

/// Flux's `actionForState` on top of [`determine_state`].
pub fn decide(plan: &ReleasePlan, observed: &Observed) -> Decision {
    if plan.options.suspend {
        return Decision {
            state: ReleaseState::InSync,
            action: Action::None(Settled::Suspended),
        };
    }
    let state = determine_state(plan, observed);
    let action = action_for_state(plan, observed, &state);
    Decision { state, action }
}

/// The next action for a plan and an observation. Pure and total.
pub fn next_action(plan: &ReleasePlan, observed: &Observed) -> Action {
    decide(plan, observed).action
}

fn action_for_state(plan: &ReleasePlan, observed: &Observed, state: &ReleaseState) -> Action {
    let status = &observed.status;
    let force = force_requested(plan, status);
    match state {
        ReleaseState::Unknown { error } => Action::Error(error.clone()),
        ReleaseState::DriftUnchecked => Action::DetectDrift,
        ReleaseState::InSync => {
            if force {
                Action::Upgrade {
                    cause: UpgradeCause::Forced,
                }
            } else {
                Action::None(Settled::InSync)
            }
        }
        ReleaseState::Locked { status } => Action::Unlock { status: *status },
        ReleaseState::Absent { .. } => {
            if Remediation::install(plan).retries_exhausted(status) && !force {
                Action::Stalled(Stall::RetriesExceeded {
                    context: "cannot install release",
                })
            } else {
                Action::Install
            }
        }
        ReleaseState::Unmanaged { .. } => Action::Upgrade {
            cause: UpgradeCause::Adopt,
        },
        ReleaseState::OutOfSync { reason } => {
            if Remediation::upgrade(plan).retries_exhausted(status) {
                if force {
                    Action::Upgrade {
                        cause: UpgradeCause::Forced,
                    }
                } else {
                    Action::Stalled(Stall::RetriesExceeded {
                        context: "cannot upgrade release",
                    })
                }
            } else {
                Action::Upgrade {
                    cause: UpgradeCause::OutOfSync(reason),
                }
            }
        }
        ReleaseState::Drifted { summary } => {
            if plan.options.drift_detection.mode() == DriftDetectionMode::Enabled {
                Action::CorrectDrift {
                    summary: summary.clone(),
                }
            } else {
                Action::None(Settled::DriftWarned)
            }
        }
        ReleaseState::Untested => Action::Test,
        ReleaseState::Failed { .. } => failed_action(plan, observed, force),
    }
}

fn failed_action(plan: &ReleasePlan, observed: &Observed, force: bool) -> Action {
    let status = &observed.status;
    if active_retry(plan, status).is_some() {
        return Action::Upgrade {
            cause: UpgradeCause::RetryFailed,
        };
    }
    let Some(rem) = Remediation::active(plan, status) else {
        return Action::Upgrade {
            cause: UpgradeCause::NoActiveRemediation,
        };
    };
    if rem.failure_count(status) <= 0 {
        return Action::Upgrade {
            cause: UpgradeCause::FailuresReset,
        };
    }
    if force {
        return Action::Upgrade {
            cause: UpgradeCause::Forced,
        };
    }
    if rem.retries_exhausted(status) && !rem.remediate_last_failure {
        return Action::Stalled(Stall::RetriesExceeded {
            context: "cannot remediate failed release",
        });
    }
    match rem.strategy {
        RemediationStrategy::Uninstall => Action::UninstallRemediation,
        RemediationStrategy::Rollback => {
            let ignore = rem.ignore_test_failures(plan.options.test.ignore_failures);
            let Some(prev) = status.previous(ignore) else {
                return Action::Stalled(Stall::MissingRollbackTarget);
            };
            let verified = match &observed.rollback_target {
                Some(rec) if rec.is(prev) => verify_record(prev, rec),
                _ => Err(ERR_RELEASE_DISAPPEARED),
            };
            match verified {
                Ok(()) => Action::Rollback {
                    target: Box::new(prev.clone()),
                },
                Err(e) => Action::Upgrade {
                    cause: UpgradeCause::RollbackTargetUnverified(e),
                },
            }
        }
    }
}

fn fmt_install_success(cur: &Snapshot) -> String {
    format!(
        "Helm install succeeded for release {} with chart {}",
        cur.full_release_name(),
        cur.versioned_chart_name()
    )
}

fn fmt_upgrade_success(cur: &Snapshot) -> String {
    format!(
        "Helm upgrade succeeded for release {} with chart {}",
        cur.full_release_name(),
        cur.versioned_chart_name()
    )
}

fn fmt_test_pending(cur: &Snapshot) -> String {
    format!(
        "Helm release {} with chart {} is awaiting tests",
        cur.full_release_name(),
        cur.versioned_chart_name()
    )
}

/// Flux's `replaceCondition`: turn `Remediated` into `Released=True UpgradeSucceeded`,
/// keeping its transition time.
fn replace_remediated_with_released(
    plan: &ReleasePlan,
    status: &mut HelmReleaseStatus,
    now: &Timestamp,
) {
    let Some(rem) = status
        .conditions
        .get_condition(condition::REMEDIATED)
        .cloned()
    else {
        return;
    };
    if rem.status != ConditionStatus::True {
        return;
    }
    let Some(cur) = status.latest().cloned() else {
        return;
    };
    status.conditions.delete_condition(condition::RELEASED);
    status.conditions.set_condition_at(
        condition::RELEASED,
        ConditionStatus::True,
        reason::UPGRADE_SUCCEEDED,
        fmt_upgrade_success(&cur),
        plan.generation,
        now,
        Some(rem.last_transition_time),
    );
    status.conditions.delete_condition(condition::REMEDIATED);
}

/// Applies the status effects of a decision, as `actionForState` and the loop do before
/// running the action: the `forceAt` token is consumed, history is truncated or dropped,
/// and the `Released`, `Remediated`, `Drifted`, `Stalled` and `Ready` conditions follow the
/// state.
pub fn apply_decision(
    plan: &ReleasePlan,
    decision: &Decision,
    status: &mut HelmReleaseStatus,
    now: &Timestamp,
) -> Vec<Event> {
    let g = plan.generation;
    let mut events = Vec::new();
    match (&decision.state, &decision.action) {
        (_, Action::None(Settled::Suspended)) | (_, Action::DetectDrift) => return events,
        (ReleaseState::Unknown { error }, _) => {
            status.conditions.set_condition(
                condition::READY,
                ConditionStatus::False,
                reason::STATE_ERROR,
                format!("Could not determine release state: {error}"),
                g,
                now,
            );
            return events;
        }
        _ => {}
    }
    // The force token is consumed whenever the annotation is evaluated.
    if let Some(force_at) = &plan.requests.force_at {
        status.last_handled_force_at = force_at.clone();
    }
    match &decision.state {
        ReleaseState::InSync => {
            if active_retry(plan, status).is_some() {
                status.truncate_history_ignoring_previous();
            } else {
                let ignore = ignore_failures_for(plan, status);
                status.truncate_history(ignore);
            }
            if matches!(decision.action, Action::None(_)) {
                replace_remediated_with_released(plan, status, now);
                let ready_true = status.conditions.is_true(condition::READY);
                let released_true = status.conditions.is_true(condition::RELEASED);
                if !ready_true || !released_true {
                    let cur = status.latest().cloned();
                    let fix = match status.conditions.reason_of(condition::RELEASED) {
                        reason::INSTALL_FAILED => Some((reason::INSTALL_SUCCEEDED, true)),
                        reason::UPGRADE_FAILED => Some((reason::UPGRADE_SUCCEEDED, false)),
                        _ => None,
                    };
                    if let (Some((r, install)), Some(cur)) = (fix, cur) {
                        let msg = if install {
                            fmt_install_success(&cur)
                        } else {
                            fmt_upgrade_success(&cur)
                        };
                        status.conditions.set_condition(
                            condition::RELEASED,
                            ConditionStatus::True,
                            r,
                            msg,
                            g,
                            now,
                        );
                        summarize(plan, status, now);
                    }
                }
                if plan.options.drift_detection.mode().detects() {
                    status.conditions.set_condition(
                        condition::DRIFTED,
                        ConditionStatus::False,
                        reason::NO_DRIFT_DETECTED,
                        "No drift detected against the cluster state".into(),
                        g,
                        now,
                    );
                }
            }
        }
        ReleaseState::Unmanaged { .. } => status.history.clear(),
        ReleaseState::Drifted { summary } => {
            let latest = status.latest().cloned();
            let name = latest
                .as_ref()
                .map(Snapshot::full_release_name)
                .unwrap_or_default();
            let msg = format!(
                "Cluster state of release {name} has drifted from the desired state:\n{summary}"
            );
            status.conditions.set_condition(
                condition::DRIFTED,
                ConditionStatus::True,
                reason::DRIFT_DETECTED,
                msg.clone(),
                g,
                now,
            );
            // Flux records this one with a plain `Eventf`: no revision or token annotations.
            events.push(Event {
                type_: EventType::Warning,
                reason: reason::DRIFT_DETECTED.to_owned(),
                message: msg,
                annotations: Default::default(),
            });
        }
        ReleaseState::Untested => replace_remediated_with_released(plan, status, now),
        ReleaseState::Failed { .. } => {
            if active_retry(plan, status).is_some() {
                status.truncate_history_ignoring_previous();
            } else if matches!(
                decision.action,
                Action::Rollback { .. }
                    | Action::UninstallRemediation
                    | Action::Stalled(Stall::MissingRollbackTarget)
                    | Action::Upgrade {
                        cause: UpgradeCause::RollbackTargetUnverified(_)
                    }
            ) {
                let ignore = ignore_failures_for(plan, status);
                status.truncate_history(ignore);
            }
        }
        _ => {}
    }
    if let Action::Stalled(stall) = &decision.action {
        let (r, msg) = stall_condition(plan, status, stall);
        mark_stalled(status, r, msg, g, now);
    }
    events
}

fn stall_condition(
    plan: &ReleasePlan,
    status: &HelmReleaseStatus,
    stall: &Stall,
) -> (&'static str, String) {
    match stall {
        Stall::RetriesExceeded { .. } => (reason::RETRIES_EXCEEDED, retries_exceeded_message(plan, status)),
        Stall::MissingRollbackTarget => (
            reason::MISSING_ROLLBACK_TARGET,
            "Failed to perform remediation: missing target release for rollback: cannot remediate failed release".into(),
        ),
    }
}

fn retries_exceeded_message(plan: &ReleasePlan, status: &HelmReleaseStatus) -> String {
    let action = status
        .last_attempted_release_action
        .map(ReleaseAction::as_str)
        .unwrap_or_default();
    let count = Remediation::active(plan, status).map_or(0, |r| r.failure_count(status));
    format!("Failed to {action} after {count} attempt(s)")
}

fn mark_stalled(status: &mut HelmReleaseStatus, r: &str, msg: String, g: i64, now: &Timestamp) {
    status.conditions.delete_condition(condition::RECONCILING);
    status
        .conditions
        .set_condition(condition::STALLED, ConditionStatus::True, r, msg, g, now);
}

fn mark_reconciling(status: &mut HelmReleaseStatus, r: &str, msg: String, g: i64, now: &Timestamp) {
    status.conditions.delete_condition(condition::STALLED);
    status.conditions.set_condition(
        condition::RECONCILING,
        ConditionStatus::True,
        r,
        msg,
        g,
        now,
    );
}

/// Flux's `summarize`: derives `Ready` from `Remediated`, `TestSuccess` and `Released`,
/// removes `Stalled` when ready, and records the observed post-renderer and
/// common-metadata digests.
pub fn summarize(plan: &ReleasePlan, status: &mut HelmReleaseStatus, now: &Timestamp) {
    let test = &plan.options.test;
    let candidates: &[&str] = if test.enable && !test.ignore_failures {
        &[
            condition::REMEDIATED,
            condition::TEST_SUCCESS,
            condition::RELEASED,
        ]
    } else {
        &[condition::REMEDIATED, condition::RELEASED]
    };
    if !test.enable {
        status.conditions.delete_condition(condition::TEST_SUCCESS);
    }
    // Flux stable-sorts the conditions with a comparator that is not a strict order
    // (`i < j` iff `i` is a candidate and `j` is not, or both are and `i` has an observed
    // generation at least `j`'s and comes first in the candidate list), then takes the
    // first. Go's `sort.SliceStable` is an insertion sort at this size; replay it.
    let pos = |t: &str| candidates.iter().position(|c| *c == t);
    let less = |a: &crate::meta::Condition, b: &crate::meta::Condition| match (
        pos(&a.type_),
        pos(&b.type_),
    ) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(pa), Some(pb)) => a.observed_generation >= b.observed_generation && pa < pb,
    };
    let mut sorted: Vec<&crate::meta::Condition> = status.conditions.iter().collect();
    for i in 1..sorted.len() {
        let mut j = i;
        while j > 0 && less(sorted[j], sorted[j - 1]) {
            sorted.swap(j, j - 1);
            j -= 1;
        }
    }
    if let Some(first) = sorted.first().copied() {
        let mut st = first.status;
        if first.type_ == condition::REMEDIATED {
            st = ConditionStatus::False;
        }
        let (r, msg) = (first.reason.clone(), first.message.clone());
        if st == ConditionStatus::True {
            status.conditions.delete_condition(condition::STALLED);
        }
        status
            .conditions
            .set_condition(condition::READY, st, &r, msg, plan.generation, now);
    }
    status.observed_post_renderers_digest = plan.post_renderers_digest.clone();
    status.observed_common_metadata_digest = plan.common_metadata_digest.clone();
}

/// Why counters were reset at the start of a reconcile (`MustResetFailures`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    /// `generation differs from last attempt`.
    Generation,
    /// `chart version differs from last attempt`.
    ChartVersion,
    /// `values differ from last attempt`.
    Values,
    /// `reset requested through annotation`.
    Requested,
}

impl fmt::Display for ResetReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Generation => "generation differs from last attempt",
            Self::ChartVersion => "chart version differs from last attempt",
            Self::Values => "values differ from last attempt",
            Self::Requested => "reset requested through annotation",
        })
    }
}

/// What [`begin_reconcile`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// `spec.suspend` is set: do nothing (Flux returns before any work).
    Suspended,
    /// The release target changed: run this uninstall of the old release, apply its
    /// outcome, and requeue; nothing else happens in this reconcile.
    UninstallPrevious(Action),
    /// Go on deciding. `reset` says whether (and why) the counters were zeroed.
    Proceed {
        /// Why the failure counters were reset, if they were.
        reset: Option<ResetReason>,
    },
}

/// The start of a reconcile, before any decision: detects a release target change, sets
/// `storageNamespace`, resets counters when the generation, chart version or values
/// changed or a `resetAt` token is pending (consuming it), and records the attempt
/// (`lastAttemptedGeneration`, `Revision`, `RevisionDigest`, `ConfigDigest`).
pub fn begin_reconcile(plan: &ReleasePlan, status: &mut HelmReleaseStatus) -> Begin {
    if plan.options.suspend {
        return Begin::Suspended;
    }
    if let Some(action) = release_target_change(plan, status) {
        return Begin::UninstallPrevious(action);
    }
    status.storage_namespace = plan.release.storage_namespace.to_string();

    let reset_requested = request_pending(
        plan.requests.reset_at.as_deref(),
        plan.requests.requested_at.as_deref(),
        &status.last_handled_reconcile_at,
        &status.last_handled_reset_at,
    );
    if let Some(reset_at) = &plan.requests.reset_at {
        status.last_handled_reset_at = reset_at.clone();
    }
    let reset = if status.last_attempted_generation != plan.generation {
        Some(ResetReason::Generation)
    } else if status.last_attempted_revision != plan.chart.version {
        Some(ResetReason::ChartVersion)
    } else if !status.last_attempted_config_digest.is_empty()
        && !digest::verify_values(&status.last_attempted_config_digest, &plan.values)
    {
        Some(ResetReason::Values)
    } else if !status.last_attempted_config_digest.is_empty()
        || status.last_attempted_values_checksum.is_empty()
    {
        reset_requested.then_some(ResetReason::Requested)
    } else {
        // Only the legacy SHA-1 checksum is known; it cannot be verified here.
        Some(ResetReason::Values)
    };
    if reset.is_some() {
        status.clear_failures();
    }
    status.last_attempted_generation = plan.generation;
    status.last_attempted_revision = plan.chart.version.clone();
    status.last_attempted_revision_digest = plan.chart.oci_digest.clone().unwrap_or_default();
    status.last_attempted_config_digest = plan.config_digest.to_string();
    status.last_attempted_values_checksum.clear();
    status.last_release_revision = 0;
    Begin::Proceed { reset }
}

fn release_target_change(plan: &ReleasePlan, status: &HelmReleaseStatus) -> Option<Action> {
    let cur = status.latest()?;
    if status.storage_namespace.is_empty() {
        return None;
    }
    let changed = status.storage_namespace != plan.release.storage_namespace.as_str()
        || cur.namespace != plan.release.namespace.as_str()
        || cur.name != plan.release.name.as_str()
        || (plan.options.upgrade.chart_name_change_strategy()
            == crate::spec::ChartNameChangeStrategy::Reinstall
            && cur.chart_name != plan.chart.name);
    changed.then(|| Action::Uninstall {
        cause: UninstallCause::ReleaseTargetChanged,
        name: cur.name.clone(),
        storage_namespace: status.storage_namespace.clone(),
    })
}

/// The uninstall to run when the HelmRelease is deleted; `None` when it was never
/// installed (no storage namespace recorded) or is suspended.
pub fn uninstall_for_deletion(plan: &ReleasePlan, status: &HelmReleaseStatus) -> Option<Action> {
    if plan.options.suspend || status.storage_namespace.is_empty() {
        return None;
    }
    Some(Action::Uninstall {
        cause: UninstallCause::Deletion,
        name: status
            .latest()
            .map_or_else(|| plan.release.name.to_string(), |s| s.name.clone()),
        storage_namespace: status.storage_namespace.clone(),
    })
}

/// What the agent does next in a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Run the action, then call [`AtomicRelease::complete`]. For
    /// [`Action::DetectDrift`], run detection, put the result in `Observed::drift` and
    /// call [`AtomicRelease::step`] again.
    Run {
        /// The action.
        action: Action,
        /// Its timeout.
        timeout: GoDuration,
    },
    /// Done: requeue after `spec.interval`.
    Done,
    /// Requeue with backoff (Flux's `ErrMustRequeue`).
    Requeue,
    /// Requeue after the retry interval (`RetryOnFailure`).
    RetryAfter(GoDuration),
    /// Terminal until something changes; no requeue.
    Stalled,
    /// An error: requeue with backoff.
    Failed(ReconcileError),
}

/// Why a reconcile ended in error (retried with backoff).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileError {
    /// The release state could not be determined.
    #[error("cannot determine release state: {0}")]
    State(String),
    /// An action failed without changing Helm storage (or, for unlock and uninstall, at
    /// all); the message is the action's.
    #[error("{message}")]
    Action {
        /// The action's name (`install`, `upgrade`, `test`, ...).
        action: &'static str,
        /// The action's error.
        message: String,
        /// Whether retrying may succeed with nothing changed ([`Applied::transient`]: the
        /// executor's judgement of its error; core's own errors are not transient).
        transient: bool,
    },
}

impl ReconcileError {
    /// A bounded label for metrics: `state`, or the action's name.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::State(_) => "state",
            Self::Action { action, .. } => action,
        }
    }

    /// Whether retrying with backoff may help without a change of the plan or the cluster.
    /// An unknown release state (storage or cluster unreadable) is; an action's error is
    /// when the executor said so. Both are retried with backoff either way; this tells a
    /// failure worth waiting out from one that needs the user.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::State(_) => true,
            Self::Action { transient, .. } => *transient,
        }
    }
}

/// One reconcile's pass through the state machine (Flux's `AtomicRelease` loop).
#[derive(Debug, Clone, Default)]
pub struct AtomicRelease {
    performed: Vec<ActionKind>,
    events: Vec<Event>,
}

impl AtomicRelease {
    /// A fresh loop for one reconcile.
    pub fn new() -> Self {
        Self::default()
    }

    /// The kinds of action run so far.
    pub fn performed(&self) -> &[ActionKind] {
        &self.performed
    }

    /// The events recorded since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Decides, records the decision's effects in `observed.status`, and says what to do.
    pub fn step(&mut self, plan: &ReleasePlan, observed: &mut Observed, now: &Timestamp) -> Step {
        let decision = decide(plan, observed);
        let events = apply_decision(plan, &decision, &mut observed.status, now);
        self.events.extend(events);
        let status = &mut observed.status;
        let g = plan.generation;
        let action = decision.action;
        match &action {
            Action::Error(e) => {
                return Step::Failed(ReconcileError::State(e.clone()));
            }
            Action::Stalled(_) => return Step::Stalled,
            Action::None(Settled::Suspended) => return Step::Done,
            Action::None(_) => {
                status.conditions.delete_condition(condition::RECONCILING);
                summarize(plan, status, now);
                return Step::Done;
            }
            Action::DetectDrift => {
                let timeout = action.timeout(plan);
                return Step::Run { action, timeout };
            }
            _ => {}
        }
        let Some(kind) = action.kind() else {
            return Step::Done;
        };
        if self.performed.contains(&kind) {
            if let Some(interval) = active_retry(plan, status) {
                mark_reconciling(
                    status,
                    reason::PROGRESSING_WITH_RETRY,
                    format!("retrying after {interval}"),
                    g,
                    now,
                );
                return Step::RetryAfter(interval);
            }
            let exhausted =
                Remediation::active(plan, status).is_some_and(|r| r.retries_exhausted(status));
            if !exhausted {
                let msg = status.conditions.message_of(condition::READY).to_owned();
                mark_reconciling(status, reason::PROGRESSING_WITH_RETRY, msg, g, now);
                return Step::Requeue;
            }
            status.conditions.delete_condition(condition::RECONCILING);
            return Step::Done;
        }
        let timeout = action.timeout(plan);
        let msg = format!(
            "Running '{}' action with timeout of {timeout}",
            action.name()
        );
        mark_reconciling(status, reason::PROGRESSING, msg.clone(), g, now);
        if kind == ActionKind::Release {
            status.conditions.set_condition(
                condition::READY,
                ConditionStatus::Unknown,
                reason::PROGRESSING,
                msg,
                g,
                now,
            );
        }
        Step::Run { action, timeout }
    }

    /// Records an action's outcome. `None` means go on: observe again and call
    /// [`AtomicRelease::step`]; `Some` ends the reconcile.
    pub fn complete(
        &mut self,
        plan: &ReleasePlan,
        action: &Action,
        outcome: &Outcome,
        status: &mut HelmReleaseStatus,
        now: &Timestamp,
    ) -> Option<Step> {
        let g = plan.generation;
        let applied = apply_outcome(plan, action, outcome, status, now);
        self.events.extend(applied.events);
        if let Some(e) = applied.returned_error {
            if let Some(interval) = active_retry(plan, status) {
                mark_reconciling(
                    status,
                    reason::PROGRESSING_WITH_RETRY,
                    format!("retrying after {interval}"),
                    g,
                    now,
                );
                return Some(Step::RetryAfter(interval));
            }
            if status.conditions.is_true(condition::READY) {
                status.conditions.set_condition(
                    condition::READY,
                    ConditionStatus::False,
                    reason::RECONCILE_ERROR,
                    e.clone(),
                    g,
                    now,
                );
            }
            return Some(Step::Failed(ReconcileError::Action {
                action: action.name(),
                message: e,
                transient: applied.transient,
            }));
        }
        if let Action::Uninstall { .. } = action {
            // A release-target change or a deletion ends the reconcile here.
            return Some(Step::Requeue);
        }
        let kind = action.kind()?;
        if kind == ActionKind::Remediate {
            if let Some(interval) = active_retry(plan, status) {
                mark_reconciling(
                    status,
                    reason::PROGRESSING_WITH_RETRY,
                    format!("retrying after {interval}"),
                    g,
                    now,
                );
                return Some(Step::RetryAfter(interval));
            }
            let rem = Remediation::active(plan, status);
            let must_requeue = match rem {
                None => true,
                Some(r) => !r.retries_exhausted(status) || r.is_uninstall_after_upgrade(),
            };
            if must_requeue {
                let msg = status.conditions.message_of(condition::READY).to_owned();
                mark_reconciling(status, reason::PROGRESSING_WITH_RETRY, msg, g, now);
                return Some(Step::Requeue);
            }
            let msg = retries_exceeded_message(plan, status);
            mark_stalled(status, reason::RETRIES_EXCEEDED, msg, g, now);
            return Some(Step::Stalled);
        }
        self.performed.push(kind);
        None
    }
}

/// The end of a reconcile: records the handled `requestedAt` token and, unless the
/// reconcile ended with an error or an immediate requeue, the observed generation (Flux
/// observes it on success, on a scheduled retry and on a terminal stall).
pub fn finish_reconcile(plan: &ReleasePlan, status: &mut HelmReleaseStatus, step: &Step) {
    if let Some(r) = &plan.requests.requested_at {
        status.last_handled_reconcile_at = r.clone();
    }
    if matches!(step, Step::Done | Step::Stalled | Step::RetryAfter(_)) {
        status.observed_generation = plan.generation;
    }
}

pub mod driver;
mod outcome;
pub use driver::{Driver, Finished, Next};
pub use outcome::{Applied, Event, EventType, Outcome, apply_outcome};

#[cfg(test)]
mod tests;
