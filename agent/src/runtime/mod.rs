//! The agent runtime: a long-lived agent that holds many release plans, reconciles each on
//! its own schedule, survives restarts, and is driven by commands.
//!
//! ```text
//! Agent::start(ctx, charts, options) -> (AgentHandle, Reports)
//!   AgentHandle::send(Command::Upsert | Delete | Reconcile | Preview | Shutdown)
//!   Reports: Stream<Item = Report::Status | Event | Deleted | Rejected | Preview>
//! ```
//!
//! Its clients are plan-file mode (`flotilla-agent apply`), the hub's in-process push agents
//! and the hub session; none of them sees how it works inside:
//!
//! - **One supervisor task** owns every held plan and the [`queue::WorkQueue`]; reconciles
//!   run as tasks on the multi-threaded runtime, at most `concurrency` at a time, one per
//!   HelmRelease at a time. Rendering and release decoding run on blocking threads, so
//!   command handling (and a session's heartbeats) never wait behind them.
//! - **When a release runs**: at once for a new revision, a deletion or a
//!   [`Command::Reconcile`]; after `spec.interval` (with jitter) when it is done; after the
//!   retry interval the state machine asks for; after a capped exponential backoff (with
//!   jitter) when it failed; never again when it stalled, until something changes.
//! - **Revisions are monotonic**: an older plan is ignored, the same one is a no-op, a newer
//!   one supersedes the held plan. A reconcile of the old plan in flight stops at its next
//!   safe point (between two Helm actions, never inside one) and the new plan runs right
//!   after it.
//! - **State lives in the workload cluster** ([`crate::reconcile::state`]): each reconcile
//!   persists its plan and status; on start the runtime lists the store and resumes every
//!   held plan (and every deletion in progress) with no hub and no files.
//! - **Shutdown** ([`Command::Shutdown`]): no new work starts; reconciles in flight stop at
//!   their next safe point, so a Helm action that has started finishes and is recorded, and
//!   the report stream ends when they have. Past the grace period the rest are aborted (the
//!   release may then be left `pending-*`, which the next start unlocks).
//! - **Status while an action runs**: before each Helm action a reconcile reports the
//!   status it persisted for it (`Ready=Unknown`, `Reconciling=True` "Running 'install'
//!   action with timeout of 5m0s", the earlier conditions and `observedGeneration` kept), as
//!   Flux patches it before the action; its step is [`Step::Run`]. The final report follows
//!   with a higher `seq`; an in-action report that arrives after it is dropped.
//! - **Previews** ([`Command::Preview`]) run as their own tasks, at most [`MAX_PREVIEWS`] at
//!   a time and [`PREVIEW_TIMEOUT`] each, beside the reconcile slots: a preview never holds
//!   a plan, persists state or writes Helm storage ([`crate::preview`]).
//! - **Failures become status**: a reconcile that cannot run (chart not available, state
//!   store, impersonation) reports a `Ready=False` condition naming the cause, and is retried
//!   with backoff.

pub mod queue;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use flotilla_core::agent::{
    Command, DeleteOutcome, DeleteRequest, HeldPlan, ObjectKey, Report, StatusReport, status_digest,
};
use flotilla_core::digest::{self, Digest};
use flotilla_core::ids::PlanRevision;
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition, reason};
use flotilla_core::plan::ReleasePlan;
use flotilla_core::preview::{PreviewError, PreviewReport, PreviewRequest};
use flotilla_core::release::{self, Action, Step};
use flotilla_core::status::HelmReleaseStatus;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::charts::{ChartError, ChartSource};
use crate::reconcile::state::{PersistedState, StateError};
use crate::reconcile::{self, Context, ReconcileError, ReconcileReport};
use crate::telemetry::Metrics;
use flotilla_chart::Chart;
use queue::{Backoff, WorkQueue, with_jitter};

/// Previews a runtime runs at once; more are answered "try again" at once.
pub const MAX_PREVIEWS: usize = 4;

/// How long a preview may take before it is answered with a failure (the hub waits 60 s).
pub const PREVIEW_TIMEOUT: Duration = Duration::from_secs(45);

/// How the runtime behaves.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// How many releases reconcile at the same time.
    pub concurrency: usize,
    /// The wait after consecutive failures.
    pub backoff: Backoff,
    /// Fraction of `spec.interval` (and of retry intervals) added at random.
    pub interval_jitter: f64,
    /// List the plan store on start and resume every held plan.
    pub resume: bool,
    /// Reconcile again after `spec.interval`, retries and backoff; `false` runs each plan
    /// once per command (plan-file mode without `--watch`).
    pub requeue: bool,
    /// How long reconciles in flight may take to reach a safe point after a shutdown.
    pub shutdown_grace: Duration,
    /// Where the runtime counts what it does; `None` counts nothing.
    pub metrics: Option<Metrics>,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            concurrency: 8,
            backoff: Backoff::default(),
            interval_jitter: 0.05,
            resume: true,
            requeue: true,
            shutdown_grace: Duration::from_secs(300),
            metrics: None,
        }
    }
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The plan store could not be listed.
    #[error("listing the plan store")]
    Store(#[source] StateError),
}

/// The runtime has stopped and takes no more commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the agent runtime has stopped")]
pub struct Stopped;

/// Drives a running agent: sends it commands and lists what it holds. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AgentHandle {
    commands: mpsc::UnboundedSender<Command>,
    held: Arc<Mutex<BTreeMap<ObjectKey, HeldPlan>>>,
}

impl AgentHandle {
    /// Sends a command.
    pub fn send(&self, command: Command) -> Result<(), Stopped> {
        self.commands.send(command).map_err(|_| Stopped)
    }

    /// Sends [`Command::Upsert`].
    pub fn upsert(&self, plan: ReleasePlan) -> Result<(), Stopped> {
        self.send(Command::Upsert(Box::new(plan)))
    }

    /// Sends [`Command::Shutdown`].
    pub fn shutdown(&self) -> Result<(), Stopped> {
        self.send(Command::Shutdown)
    }

    /// The plans held, with their revisions and the digest of the last status reported,
    /// ordered by HelmRelease.
    pub fn held(&self) -> Vec<HeldPlan> {
        self.held
            .lock()
            .map(|h| h.values().cloned().collect())
            .unwrap_or_default()
    }
}

/// The runtime's reports, in the order they happened; ends after a shutdown.
#[derive(Debug)]
pub struct Reports {
    rx: mpsc::UnboundedReceiver<Report>,
}

impl Reports {
    /// The next report; `None` once the runtime has stopped.
    pub async fn recv(&mut self) -> Option<Report> {
        self.rx.recv().await
    }
}

impl futures::Stream for Reports {
    type Item = Report;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Report>> {
        self.rx.poll_recv(cx)
    }
}

/// The other end of an [`AgentHandle`] and its [`Reports`] when no runtime is behind them
/// ([`external`]): its holder receives the commands, keeps the list of held plans and sends
/// the reports. Simulated agents use it (`cargo xtask bench-sessions` drives the real
/// session client with it); the agent itself never does.
#[derive(Debug)]
pub struct ExternalAgent {
    commands: mpsc::UnboundedReceiver<Command>,
    reports: mpsc::UnboundedSender<Report>,
    held: Arc<Mutex<BTreeMap<ObjectKey, HeldPlan>>>,
}

impl ExternalAgent {
    /// The next command; `None` once every [`AgentHandle`] is dropped.
    pub async fn recv(&mut self) -> Option<Command> {
        self.commands.recv().await
    }

    /// Records `plan` as held (what [`AgentHandle::held`] lists).
    pub fn hold(&self, plan: HeldPlan) {
        if let Ok(mut held) = self.held.lock() {
            held.insert(plan.object.clone(), plan);
        }
    }

    /// Forgets the held plan of `object`.
    pub fn forget(&self, object: &ObjectKey) {
        if let Ok(mut held) = self.held.lock() {
            held.remove(object);
        }
    }

    /// Sends a report; fails once the [`Reports`] are dropped.
    pub fn report(&self, report: Report) -> Result<(), Stopped> {
        self.reports.send(report).map_err(|_| Stopped)
    }
}

/// An [`AgentHandle`] and [`Reports`] with an [`ExternalAgent`] instead of a runtime.
pub fn external() -> (AgentHandle, Reports, ExternalAgent) {
    // Unbounded with a reason: as in `Agent::start` (the external agent stands in for the
    // runtime in tests and benchmarks).
    let (command_tx, command_rx) = mpsc::unbounded_channel();
    let (report_tx, report_rx) = mpsc::unbounded_channel();
    let held = Arc::new(Mutex::new(BTreeMap::new()));
    (
        AgentHandle {
            commands: command_tx,
            held: held.clone(),
        },
        Reports { rx: report_rx },
        ExternalAgent {
            commands: command_rx,
            reports: report_tx,
            held,
        },
    )
}

/// The agent runtime.
#[derive(Debug)]
pub struct Agent;

impl Agent {
    /// Starts the runtime on the current tokio runtime: lists the plan store (when
    /// `options.resume`), schedules every held plan, and runs until [`Command::Shutdown`]
    /// or until every [`AgentHandle`] is dropped.
    pub async fn start(
        ctx: Context,
        charts: Arc<dyn ChartSource>,
        options: AgentOptions,
    ) -> Result<(AgentHandle, Reports), StartError> {
        // Unbounded with a reason. Commands: the supervisor takes each at once, without an
        // await, into its per-release state (the newest plan per HelmRelease), so the
        // channel holds what arrived since its last turn; the session feeds it one command
        // per hub message, and those are bounded by HTTP/2 flow control and the hub's
        // coalescing mailbox. Reports: this runtime's own, a handful per reconcile, which
        // run at most `options.concurrency` at a time; the session's forwarder keeps the
        // latest status per release.
        let (command_tx, command_rx) = mpsc::unbounded_channel();
        let (report_tx, report_rx) = mpsc::unbounded_channel();
        // In-action statuses: one per Helm action started, each sent before the action
        // runs, from at most `options.concurrency` reconciles.
        let (in_action_tx, in_action_rx) = mpsc::unbounded_channel();
        let held = Arc::new(Mutex::new(BTreeMap::new()));
        let mut supervisor = Supervisor {
            ctx: Arc::new(ctx),
            charts,
            options,
            releases: BTreeMap::new(),
            queue: WorkQueue::new(),
            tasks: JoinSet::new(),
            previews: JoinSet::new(),
            reports: report_tx,
            in_action: in_action_tx,
            held: held.clone(),
            rng: fastrand::Rng::new(),
            stopping: None,
        };
        if supervisor.options.resume {
            supervisor.resume().await?;
        }
        tokio::spawn(supervisor.run(command_rx, in_action_rx));
        Ok((
            AgentHandle {
                commands: command_tx,
                held,
            },
            Reports { rx: report_rx },
        ))
    }
}

/// Set by the supervisor when a reconcile in flight should stop at its next safe point.
pub type StopFlag = Arc<AtomicBool>;

/// The status of a reconcile in flight as an action starts, sent by its task to the
/// supervisor, which reports it (with the next `seq`) while that reconcile still runs.
#[derive(Debug)]
struct InActionStatus {
    key: Arc<ObjectKey>,
    /// The reconcile's stop flag: it names the reconcile (a report of one that has ended
    /// is dropped).
    run: StopFlag,
    status: HelmReleaseStatus,
    step: Step,
}

/// A HelmRelease the runtime holds.
#[derive(Debug)]
struct Held {
    /// The HelmRelease, shared with the queue.
    key: Arc<ObjectKey>,
    /// The newest plan accepted.
    plan: Arc<ReleasePlan>,
    /// The last status known (reported or resumed).
    status: StoredStatus,
    /// The last report's sequence number.
    seq: u64,
    /// Whether `status` was reported (its digest is the held plan's status digest).
    reported: bool,
    /// A deletion asked for.
    deleting: Option<DeleteRequest>,
    /// Consecutive failed reconciles.
    failures: u32,
    /// The reconcile in flight: the revision it runs and its stop flag.
    running: Option<(PlanRevision, StopFlag)>,
}

impl Held {
    fn new(key: &ObjectKey, plan: ReleasePlan, status: HelmReleaseStatus, seq: u64) -> Held {
        Held {
            key: Arc::new(key.clone()),
            plan: Arc::new(plan),
            status: StoredStatus::new(&status),
            seq,
            reported: false,
            deleting: None,
            failures: 0,
            running: None,
        }
    }

    fn summary(&self, key: &ObjectKey) -> HeldPlan {
        HeldPlan {
            object: key.clone(),
            revision: self.plan.revision,
            chart: self.plan.chart.digest.clone(),
            status_digest: self.status_digest(),
        }
    }

    /// The digest of the last status reported, if any ([`status_digest`]).
    fn status_digest(&self) -> Option<Digest> {
        self.reported.then(|| self.status.digest())
    }
}

/// A status as the runtime holds it between reconciles: its JSON, in one allocation.
///
/// A [`HelmReleaseStatus`] is dozens of small strings and vectors (conditions, history,
/// inventory, digests). Held as they are, each release keeps them for a whole interval,
/// allocated in the middle of the rendering garbage of the burst that produced them, and
/// those few live bytes keep most of the heap's pages resident after the burst (the
/// allocator can only give back pages with nothing live on them). Measured with
/// `cargo xtask bench-agent` (README, "Measurements"; docs/measurements.md). The status is
/// only read back when a reconcile cannot run, for a deletion and for a plan's size check.
#[derive(Debug, Default)]
struct StoredStatus(Box<[u8]>);

impl StoredStatus {
    fn new(status: &HelmReleaseStatus) -> StoredStatus {
        match serde_json::to_vec(status) {
            Ok(json) => StoredStatus(json.into_boxed_slice()),
            Err(e) => {
                // Not reachable: a status is strings, numbers and string-keyed maps.
                tracing::error!(error = %e, "a status does not encode as JSON; holding an empty one");
                StoredStatus::default()
            }
        }
    }

    /// The status's [`status_digest`], from the JSON held (the same bytes it hashes).
    fn digest(&self) -> Digest {
        if self.0.is_empty() {
            return status_digest(&HelmReleaseStatus::default());
        }
        digest::Algorithm::Sha256.digest(&self.0)
    }

    fn get(&self) -> HelmReleaseStatus {
        if self.0.is_empty() {
            return HelmReleaseStatus::default();
        }
        serde_json::from_slice(&self.0).unwrap_or_else(|e| {
            // Not reachable: the bytes are a status's own JSON (the plan store reads the
            // same JSON back on every start).
            tracing::error!(error = %e, "a held status does not decode; using an empty one");
            HelmReleaseStatus::default()
        })
    }
}

/// What a task ended with.
enum Finished {
    Reconciled {
        revision: PlanRevision,
        started: Instant,
        result: Result<ReconcileReport, RunError>,
    },
    Deleted {
        request: DeleteRequest,
        result: Result<(ReconcileReport, DeleteOutcome), RunError>,
    },
}

/// Why a reconcile could not run to its end.
#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error("could not load chart: {0}")]
    Chart(#[source] ChartError),
    #[error(transparent)]
    Reconcile(ReconcileError),
    #[error("HelmRelease {object}: the reconcile panicked: {message}")]
    Panicked { object: ObjectKey, message: String },
}

impl RunError {
    fn kind(&self) -> &'static str {
        match self {
            RunError::Chart(e) => e.kind(),
            RunError::Reconcile(e) => e.kind(),
            RunError::Panicked { .. } => "panicked",
        }
    }

    /// The condition reason Flux uses for this kind of failure.
    fn reason(&self) -> &'static str {
        match self {
            RunError::Chart(_) => reason::ARTIFACT_FAILED,
            RunError::Reconcile(ReconcileError::Impersonation { .. }) => reason::REST_CLIENT_ERROR,
            RunError::Reconcile(_) | RunError::Panicked { .. } => reason::RECONCILE_ERROR,
        }
    }
}

struct Supervisor {
    ctx: Arc<Context>,
    charts: Arc<dyn ChartSource>,
    options: AgentOptions,
    releases: BTreeMap<ObjectKey, Held>,
    /// Keyed by each [`Held::key`]: rescheduling clones an `Arc`, not two strings.
    queue: WorkQueue<Arc<ObjectKey>>,
    tasks: JoinSet<(Arc<ObjectKey>, Finished)>,
    /// Previews in flight (at most [`MAX_PREVIEWS`]), apart from the reconcile slots.
    previews: JoinSet<PreviewReport>,
    reports: mpsc::UnboundedSender<Report>,
    in_action: mpsc::UnboundedSender<InActionStatus>,
    held: Arc<Mutex<BTreeMap<ObjectKey, HeldPlan>>>,
    rng: fastrand::Rng,
    /// Set once shutting down: the deadline of the grace period.
    stopping: Option<Instant>,
}

impl Supervisor {
    /// Loads every persisted plan and schedules it now.
    async fn resume(&mut self) -> Result<(), StartError> {
        let (states, broken) = self.ctx.state.list().await.map_err(StartError::Store)?;
        for e in broken {
            tracing::warn!(error = %crate::kube::error_chain(&e), "a persisted plan does not decode; it is skipped");
        }
        let now = Instant::now();
        for PersistedState {
            plan,
            status,
            seq,
            deleting,
        } in states
        {
            let key = plan.object.key();
            let mut held = Held::new(&key, plan, status, seq);
            held.deleting = deleting;
            self.queue.schedule(held.key.clone(), now, now);
            self.releases.insert(key.clone(), held);
            self.publish(&key);
        }
        tracing::info!(plans = self.releases.len(), "resumed the persisted plans");
        self.gauges();
        Ok(())
    }

    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut in_action: mpsc::UnboundedReceiver<InActionStatus>,
    ) {
        let mut commands_open = true;
        loop {
            self.start_due();
            if self.stopping.is_some() && self.tasks.is_empty() {
                break;
            }
            if !commands_open && self.tasks.is_empty() && self.stopping.is_none() {
                // Every handle is gone: nobody can stop us or read what we hold; finish
                // what runs and stop.
                self.begin_shutdown();
                continue;
            }
            // With every slot taken a due key can only start when a task ends: waiting for
            // its (past) due time as well would wake the loop at once, over and over, and
            // spin a core for as long as the slots stay full.
            let next_due =
                if self.stopping.is_some() || self.tasks.len() >= self.options.concurrency {
                    None
                } else {
                    self.queue.next_due()
                };
            let grace_end = self.stopping;
            tokio::select! {
                command = commands.recv(), if commands_open => match command {
                    Some(command) => self.command(command),
                    None => {
                        commands_open = false;
                        if self.tasks.is_empty() {
                            self.begin_shutdown();
                        }
                    }
                },
                Some(joined) = self.tasks.join_next() => self.joined(joined),
                Some(status) = in_action.recv() => self.in_action(status),
                Some(done) = self.previews.join_next() => match done {
                    Ok(report) => self.report(Report::Preview(Box::new(report))),
                    Err(e) => tracing::warn!(error = %e, "a preview task ended without an answer"),
                },
                () = sleep_until(next_due) => {}
                () = sleep_until(grace_end) => {
                    tracing::warn!(
                        running = self.tasks.len(),
                        "shutdown grace period over; aborting the reconciles still running"
                    );
                    self.tasks.abort_all();
                    while self.tasks.join_next().await.is_some() {}
                    break;
                }
            }
        }
        tracing::info!("agent runtime stopped");
    }

    fn begin_shutdown(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        tracing::info!(
            running = self.tasks.len(),
            grace = ?self.options.shutdown_grace,
            "shutting down: no new work; waiting for the reconciles in flight"
        );
        self.stopping = Some(Instant::now() + self.options.shutdown_grace);
        for held in self.releases.values() {
            if let Some((_, stop)) = &held.running {
                stop.store(true, Ordering::SeqCst);
            }
        }
    }

    fn command(&mut self, command: Command) {
        let now = Instant::now();
        match command {
            Command::Upsert(plan) => self.upsert(*plan, now),
            Command::Delete(request) => self.delete(request, now),
            Command::Reconcile(key) => {
                if let Some(held) = self.releases.get(&key) {
                    self.queue.schedule(held.key.clone(), now, now);
                } else {
                    tracing::debug!(object = %key, "reconcile requested for a plan not held");
                }
            }
            Command::Preview(request) => self.preview(request),
            Command::Shutdown => self.begin_shutdown(),
        }
        self.gauges();
    }

    /// Starts a preview (nothing held, nothing persisted): answered at once when the agent
    /// is shutting down, already runs [`MAX_PREVIEWS`], or refuses the plan; else by the
    /// preview task within [`PREVIEW_TIMEOUT`].
    fn preview(&mut self, request: PreviewRequest) {
        let object = request.plan.object.key();
        let answer = |result| {
            Report::Preview(Box::new(PreviewReport {
                id: request.id.clone(),
                object: object.clone(),
                result: Err(result),
            }))
        };
        if self.stopping.is_some() {
            self.report(answer(PreviewError::Failed(
                "the agent is shutting down and takes no previews.".into(),
            )));
            return;
        }
        if self.previews.len() >= MAX_PREVIEWS {
            self.report(answer(PreviewError::Failed(format!(
                "the agent is already running {MAX_PREVIEWS} previews; try again shortly."
            ))));
            return;
        }
        if let Err(e) = validate(&request.plan) {
            self.report(answer(PreviewError::Failed(format!(
                "the plan of the preview is refused: {e}."
            ))));
            return;
        }
        let ctx = self.ctx.clone();
        let charts = self.charts.clone();
        self.previews.spawn(async move {
            use futures::FutureExt as _;
            let work = crate::preview::preview(&ctx, charts.as_ref(), &request);
            let result = match tokio::time::timeout(
                PREVIEW_TIMEOUT,
                std::panic::AssertUnwindSafe(work).catch_unwind(),
            )
            .await
            {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => Err(PreviewError::Failed(format!(
                    "the preview of HelmRelease {object} failed: the agent hit a bug (a panic)."
                ))),
                Err(_) => Err(PreviewError::Failed(format!(
                    "the preview of HelmRelease {object} did not finish within {}s.",
                    PREVIEW_TIMEOUT.as_secs()
                ))),
            };
            PreviewReport {
                id: request.id,
                object,
                result,
            }
        });
    }

    fn reject(&self, key: ObjectKey, revision: PlanRevision, error: String) {
        tracing::warn!(object = %key, %revision, %error, "plan rejected");
        self.report(Report::Rejected {
            object: key,
            revision,
            error,
        });
    }

    fn upsert(&mut self, plan: ReleasePlan, now: Instant) {
        let key = plan.object.key();
        let revision = plan.revision;
        if let Some(held) = self.releases.get(&key) {
            let floor = held
                .deleting
                .as_ref()
                .map_or(held.plan.revision, |d| d.revision.max(held.plan.revision));
            if revision < floor {
                tracing::debug!(object = %key, %revision, held = %floor, "older plan ignored");
                return;
            }
            if revision == held.plan.revision && held.deleting.is_none() {
                tracing::debug!(object = %key, %revision, "plan already held");
                return;
            }
        }
        if let Err(error) = validate(&plan) {
            self.reject(key, revision, error);
            return;
        }
        let state = PersistedState {
            plan,
            status: self
                .releases
                .get(&key)
                .map(|h| h.status.get())
                .unwrap_or_default(),
            seq: self.releases.get(&key).map_or(0, |h| h.seq),
            deleting: None,
        };
        if let Err(e) = self.ctx.state.check_size(&state) {
            // The working release and its held plan stay as they are.
            let error = e.to_string();
            self.reject(key.clone(), revision, error.clone());
            if let Some(held) = self.releases.get_mut(&key) {
                let mut status = held.status.get();
                mark_not_ready(&mut status, &held.plan, reason::STATE_ERROR, error);
                held.status = StoredStatus::new(&status);
                held.seq += 1;
                held.reported = true;
                let report = StatusReport {
                    object: held.plan.object.clone(),
                    plan_revision: held.plan.revision,
                    seq: held.seq,
                    status,
                    step: Step::Stalled,
                };
                self.report(Report::Status(Box::new(report)));
            }
            return;
        }
        tracing::info!(object = %key, %revision, "plan accepted");
        match self.releases.get_mut(&key) {
            Some(held) => {
                held.plan = Arc::new(state.plan);
                held.deleting = None;
                held.failures = 0;
                if let Some((_, stop)) = &held.running {
                    stop.store(true, Ordering::SeqCst);
                }
            }
            None => {
                let held = Held::new(&key, state.plan, state.status, state.seq);
                self.releases.insert(key.clone(), held);
            }
        }
        if let Some(held) = self.releases.get(&key) {
            self.queue.schedule(held.key.clone(), now, now);
        }
        self.publish(&key);
    }

    fn delete(&mut self, request: DeleteRequest, now: Instant) {
        let key = request.object.clone();
        let Some(held) = self.releases.get_mut(&key) else {
            // Nothing held: the deletion is already done (at-least-once delivery).
            self.report(Report::Deleted {
                object: key,
                revision: request.revision,
                outcome: DeleteOutcome::Forgotten,
            });
            return;
        };
        if request.revision < held.plan.revision {
            tracing::debug!(object = %key, revision = %request.revision, held = %held.plan.revision, "older deletion ignored");
            return;
        }
        if held
            .deleting
            .as_ref()
            .is_some_and(|d| d.revision >= request.revision)
        {
            return;
        }
        tracing::info!(object = %key, revision = %request.revision, "deletion accepted");
        held.deleting = Some(request);
        held.failures = 0;
        if let Some((_, stop)) = &held.running {
            stop.store(true, Ordering::SeqCst);
        }
        let key = held.key.clone();
        self.queue.schedule(key, now, now);
    }

    /// Starts due work up to the concurrency bound (none while stopping).
    fn start_due(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        let now = Instant::now();
        while self.tasks.len() < self.options.concurrency {
            let Some(key) = self.queue.pop_ready(now) else {
                break;
            };
            let Some(held) = self.releases.get_mut(key.as_ref()) else {
                self.queue.finish(&key);
                continue;
            };
            let stop: StopFlag = Arc::new(AtomicBool::new(false));
            held.running = Some((held.plan.revision, stop.clone()));
            let ctx = self.ctx.clone();
            let charts = self.charts.clone();
            let plan = held.plan.clone();
            let span = tracing::info_span!("reconcile", object = %key, revision = %plan.revision);
            let task_key = key.clone();
            match held.deleting.clone() {
                Some(request) => {
                    let state = PersistedState {
                        plan: (*plan).clone(),
                        status: held.status.get(),
                        seq: held.seq,
                        deleting: Some(request.clone()),
                    };
                    let object = key.clone();
                    self.tasks.spawn(tracing::Instrument::instrument(
                        async move {
                            let result =
                                catch_panic(&object, run_delete(&ctx, charts.as_ref(), state))
                                    .await;
                            (task_key, Finished::Deleted { request, result })
                        },
                        span,
                    ));
                }
                None => {
                    let in_action = self.in_action.clone();
                    self.tasks.spawn(tracing::Instrument::instrument(
                        async move {
                            let started = Instant::now();
                            let report = |a: reconcile::InAction<'_>| {
                                let _ = in_action.send(InActionStatus {
                                    key: task_key.clone(),
                                    run: stop.clone(),
                                    status: a.status.clone(),
                                    step: Step::Run {
                                        action: in_action_step(a.action),
                                        timeout: a.timeout,
                                    },
                                });
                            };
                            let result = catch_panic(
                                &task_key,
                                run_reconcile(&ctx, charts.as_ref(), &plan, &stop, &report),
                            )
                            .await;
                            (
                                task_key,
                                Finished::Reconciled {
                                    revision: plan.revision,
                                    started,
                                    result,
                                },
                            )
                        },
                        span,
                    ));
                }
            }
        }
        self.gauges();
    }

    fn joined(&mut self, joined: Result<(Arc<ObjectKey>, Finished), tokio::task::JoinError>) {
        let (key, finished) = match joined {
            Ok(done) => done,
            Err(e) => {
                // Tasks catch their panics; only an abort ends one without a result.
                tracing::warn!(error = %e, "a reconcile task ended without a result");
                return;
            }
        };
        let rerun = self.queue.finish(&key);
        let Some(held) = self.releases.get_mut(key.as_ref()) else {
            return;
        };
        held.running = None;
        let now = Instant::now();
        let next = match finished {
            Finished::Reconciled {
                revision,
                started,
                result,
            } => self.reconciled(&key, revision, started, result),
            Finished::Deleted { request, result } => self.deleted(&key, request, result),
        };
        if self.tasks.is_empty() {
            // Idle until the next is due: what rendering and applying freed goes back to
            // the kernel instead of staying in the allocator's arenas.
            crate::memory::release_free_memory();
        }
        if self.releases.contains_key(key.as_ref()) {
            if rerun || next == Next::Now {
                self.queue.schedule(key, now, now);
            } else if let (Next::After(d), true) = (next, self.options.requeue) {
                self.queue.reschedule(key, now + d);
            }
        }
        self.gauges();
    }

    /// Reports the status of a reconcile in flight as an action starts, unless that
    /// reconcile has ended (its final report is newer).
    fn in_action(&mut self, s: InActionStatus) {
        let Some(held) = self.releases.get_mut(s.key.as_ref()) else {
            return;
        };
        let Some((revision, run)) = &held.running else {
            return;
        };
        if !Arc::ptr_eq(run, &s.run) {
            return;
        }
        let revision = *revision;
        held.status = StoredStatus::new(&s.status);
        held.seq += 1;
        held.reported = true;
        let report = StatusReport {
            object: held.plan.object.clone(),
            plan_revision: revision,
            seq: held.seq,
            status: s.status,
            step: s.step,
        };
        self.report(Report::Status(Box::new(report)));
        let key = s.key;
        self.publish(&key);
    }

    /// Records a finished reconcile; says when to run it again.
    fn reconciled(
        &mut self,
        key: &ObjectKey,
        revision: PlanRevision,
        started: Instant,
        result: Result<ReconcileReport, RunError>,
    ) -> Next {
        let elapsed = started.elapsed();
        let Some(held) = self.releases.get_mut(key) else {
            return Next::Never;
        };
        let newer = held.plan.revision != revision || held.deleting.is_some();
        let plan = held.plan.clone();
        let (status, step, events) = match result {
            Ok(report) => {
                let failed = matches!(report.step, Step::Failed(_) | Step::Requeue);
                held.failures = if failed { held.failures + 1 } else { 0 };
                tracing::info!(
                    object = %key,
                    revision = %revision,
                    elapsed_ms = elapsed.as_millis() as u64,
                    actions = ?report.actions,
                    step = %step_summary(&report.step),
                    "reconciled"
                );
                if let Some(m) = &self.options.metrics {
                    m.observe_reconcile(step_result(&report.step), elapsed.as_secs_f64());
                    for action in &report.actions {
                        m.action(action, !failed);
                    }
                    if report
                        .events
                        .iter()
                        .any(|e| e.reason == reason::DRIFT_DETECTED)
                    {
                        m.drift_detected();
                    }
                    let correction = Action::CorrectDrift {
                        summary: String::new(),
                    };
                    if !failed && report.actions.contains(&correction.name()) {
                        m.drift_corrected();
                    }
                }
                (report.status, report.step, report.events)
            }
            Err(e) => {
                held.failures += 1;
                tracing::warn!(
                    object = %key,
                    revision = %revision,
                    elapsed_ms = elapsed.as_millis() as u64,
                    kind = e.kind(),
                    error = %crate::kube::error_chain(&e),
                    "reconcile failed"
                );
                if let Some(m) = &self.options.metrics {
                    m.observe_reconcile("failure", elapsed.as_secs_f64());
                    m.reconcile_error(e.kind());
                }
                let mut status = held.status.get();
                let message = crate::kube::error_chain(&e);
                mark_not_ready(&mut status, &plan, e.reason(), message.clone());
                let step = Step::Failed(release::ReconcileError::State(message));
                (status, step, Vec::new())
            }
        };
        let failures = held.failures;
        held.status = StoredStatus::new(&status);
        held.seq += 1;
        held.reported = true;
        let seq = held.seq;
        for event in events {
            self.report(Report::Event {
                object: plan.object.clone(),
                plan_revision: revision,
                event,
            });
        }
        let next = if newer {
            Next::Now
        } else {
            match &step {
                Step::Done => Next::After(with_jitter(
                    plan.options.interval.get(),
                    self.options.interval_jitter,
                    &mut self.rng,
                )),
                Step::RetryAfter(d) => Next::After(with_jitter(
                    d.get(),
                    self.options.interval_jitter,
                    &mut self.rng,
                )),
                Step::Requeue | Step::Failed(_) | Step::Run { .. } => {
                    Next::After(self.options.backoff.delay_jittered(failures, &mut self.rng))
                }
                Step::Stalled => Next::Never,
            }
        };
        self.report(Report::Status(Box::new(StatusReport {
            object: plan.object.clone(),
            plan_revision: revision,
            seq,
            status,
            step,
        })));
        self.publish(key);
        next
    }

    /// Records a finished deletion; says when to try again.
    fn deleted(
        &mut self,
        key: &ObjectKey,
        request: DeleteRequest,
        result: Result<(ReconcileReport, DeleteOutcome), RunError>,
    ) -> Next {
        let Some(held) = self.releases.get_mut(key) else {
            return Next::Never;
        };
        if held.deleting.as_ref() != Some(&request) {
            // A newer plan arrived while uninstalling: it runs next.
            return Next::Now;
        }
        match result {
            Ok((report, outcome)) if matches!(report.step, Step::Done) => {
                tracing::info!(object = %key, ?outcome, "deleted");
                if let Some(m) = &self.options.metrics {
                    for action in &report.actions {
                        m.action(action, true);
                    }
                }
                let plan = held.plan.clone();
                for event in report.events {
                    self.report(Report::Event {
                        object: plan.object.clone(),
                        plan_revision: request.revision,
                        event,
                    });
                }
                if let Some(held) = self.releases.remove(key) {
                    self.queue.remove(&held.key);
                }
                if let Ok(mut h) = self.held.lock() {
                    h.remove(key);
                }
                self.report(Report::Deleted {
                    object: key.clone(),
                    revision: request.revision,
                    outcome,
                });
                Next::Never
            }
            Ok((report, _)) => {
                held.failures += 1;
                let failures = held.failures;
                held.status = StoredStatus::new(&report.status);
                held.seq += 1;
                held.reported = true;
                let plan = held.plan.clone();
                let seq = held.seq;
                for event in report.events {
                    self.report(Report::Event {
                        object: plan.object.clone(),
                        plan_revision: request.revision,
                        event,
                    });
                }
                self.report(Report::Status(Box::new(StatusReport {
                    object: plan.object.clone(),
                    plan_revision: plan.revision,
                    seq,
                    status: report.status,
                    step: report.step,
                })));
                Next::After(self.options.backoff.delay_jittered(failures, &mut self.rng))
            }
            Err(e) => {
                held.failures += 1;
                let failures = held.failures;
                tracing::warn!(object = %key, kind = e.kind(), error = %crate::kube::error_chain(&e), "deletion failed");
                if let Some(m) = &self.options.metrics {
                    m.reconcile_error(e.kind());
                }
                Next::After(self.options.backoff.delay_jittered(failures, &mut self.rng))
            }
        }
    }

    fn report(&self, report: Report) {
        // The receiver may be gone (a client that only sends): reports are then dropped.
        let _ = self.reports.send(report);
    }

    /// Mirrors a release into what [`AgentHandle::held`] lists.
    fn publish(&self, key: &ObjectKey) {
        let Some(held) = self.releases.get(key) else {
            return;
        };
        if let Ok(mut h) = self.held.lock() {
            // Only what changed is replaced: new copies of the unchanged strings would be
            // more small allocations kept for an interval amid what the reconcile freed.
            match h.get_mut(key) {
                Some(old) => {
                    old.revision = held.plan.revision;
                    if old.chart != held.plan.chart.digest {
                        old.chart = held.plan.chart.digest.clone();
                    }
                    let status_digest = held.status_digest();
                    if old.status_digest != status_digest {
                        old.status_digest = status_digest;
                    }
                }
                None => {
                    h.insert(key.clone(), held.summary(key));
                }
            }
        }
    }

    fn gauges(&self) {
        if let Some(m) = &self.options.metrics {
            m.set_plans_held(self.releases.len());
            m.set_queue_depth(self.queue.due_at(Instant::now()));
        }
    }
}

/// When to run a release again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Now,
    After(Duration),
    Never,
}

/// Runs a task's work, turning a panic into an error (the release is retried with backoff
/// instead of being left marked running).
async fn catch_panic<T>(
    object: &ObjectKey,
    work: impl std::future::Future<Output = Result<T, RunError>>,
) -> Result<T, RunError> {
    use futures::FutureExt as _;
    match std::panic::AssertUnwindSafe(work).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            Err(RunError::Panicked {
                object: object.clone(),
                message,
            })
        }
    }
}

async fn sleep_until(when: Option<Instant>) {
    match when {
        Some(when) => tokio::time::sleep_until(when).await,
        None => std::future::pending().await,
    }
}

/// What makes a plan unacceptable, naming the field.
fn validate(plan: &ReleasePlan) -> Result<(), String> {
    let object = plan.object.key();
    if plan.options.interval.get().is_zero() {
        return Err(format!(
            "HelmRelease {object}: spec.interval: must be greater than 0s"
        ));
    }
    if !plan.values.is_object() {
        return Err(format!("HelmRelease {object}: values: must be an object"));
    }
    if !digest::verify_values(&plan.config_digest.to_string(), &plan.values) {
        return Err(format!(
            "HelmRelease {object}: configDigest: {} is not the digest of the plan's values",
            plan.config_digest
        ));
    }
    Ok(())
}

/// Sets `Ready=False` (and `Reconciling` off) for a failure the state machine never saw.
fn mark_not_ready(
    status: &mut HelmReleaseStatus,
    plan: &ReleasePlan,
    reason: &str,
    message: String,
) {
    let now = reconcile::now();
    status.conditions.set_condition(
        condition::READY,
        ConditionStatus::False,
        reason,
        message,
        plan.generation,
        &now,
    );
    status.conditions.delete_condition(condition::RECONCILING);
}

/// One line for a step, for logs and plan-file mode.
pub fn step_summary(step: &Step) -> String {
    match step {
        Step::Done => "done".to_owned(),
        Step::Requeue => "requeue".to_owned(),
        Step::RetryAfter(d) => format!("retry after {d}"),
        Step::Stalled => "stalled".to_owned(),
        Step::Failed(e) => format!("{} failed: {}", e.kind(), e),
        Step::Run { action, .. } => format!("running {}", action.name()),
    }
}

/// The `result` label of a reconcile.
fn step_result(step: &Step) -> &'static str {
    match step {
        Step::Done | Step::RetryAfter(_) => "success",
        Step::Stalled => "stalled",
        Step::Requeue | Step::Failed(_) | Step::Run { .. } => "failure",
    }
}

/// The action of an in-action report's step, without a drift summary (the report carries
/// the status; the summary, one line per object, is in the `DriftDetected` Event).
fn in_action_step(action: &Action) -> Action {
    match action {
        Action::CorrectDrift { .. } => Action::CorrectDrift {
            summary: String::new(),
        },
        other => other.clone(),
    }
}

async fn run_reconcile(
    ctx: &Context,
    charts: &dyn ChartSource,
    plan: &ReleasePlan,
    stop: &StopFlag,
    in_action: &(dyn Fn(reconcile::InAction<'_>) + Send + Sync),
) -> Result<ReconcileReport, RunError> {
    let chart = charts.chart(&plan.chart).await.map_err(RunError::Chart)?;
    let chart = at_plan_version(chart, &plan.chart.version);
    reconcile::reconcile_until(ctx, plan, &chart, stop, in_action)
        .await
        .map_err(RunError::Reconcile)
}

/// The chart as the plan names it: an OCI-sourced chart's version carries the artifact
/// digest as build metadata (`6.5.2+0cc9a8446c95`, Flux's `mutateChartWithSourceRevision`),
/// which the release records and `.Chart.Version` renders. Without it the stored release
/// would never match the plan and every reconcile would upgrade again.
pub(crate) fn at_plan_version(chart: Arc<Chart>, version: &str) -> Arc<Chart> {
    if version.is_empty() || chart.metadata.version == version {
        return chart;
    }
    let mut chart = Arc::unwrap_or_clone(chart);
    chart.metadata.version = version.to_owned();
    Arc::new(chart)
}

async fn run_delete(
    ctx: &Context,
    charts: &dyn ChartSource,
    state: PersistedState,
) -> Result<(ReconcileReport, DeleteOutcome), RunError> {
    // The deletion is recorded first, so an agent restarted mid-uninstall goes on with it.
    ctx.state
        .put(&state)
        .await
        .map_err(|e| RunError::Reconcile(ReconcileError::State(e)))?;
    let plan = &state.plan;
    let request = state.deleting.as_ref().expect("a deletion's state says so");
    let mut plan = plan.clone();
    match &request.uninstall {
        Some(uninstall) => plan.options.uninstall = uninstall.clone(),
        None => plan.options.suspend = true,
    }
    let chart = match charts.chart(&plan.chart).await {
        Ok(chart) => Some(at_plan_version(chart, &plan.chart.version)),
        Err(e) => {
            tracing::debug!(error = %crate::kube::error_chain(&e), "uninstalling without the chart");
            None
        }
    };
    reconcile::delete_release(ctx, &plan, chart.as_deref())
        .await
        .map_err(RunError::Reconcile)
}

#[cfg(test)]
mod tests {
    use flotilla_core::agent::DeleteOutcome;
    use flotilla_core::ids::{ChartDigest, Namespace, ObjectName};

    use super::*;

    #[test]
    fn a_held_status_reads_back_as_the_status_it_was_stored_from() {
        let status: HelmReleaseStatus = serde_json::from_value(serde_json::json!({
            "observedGeneration": 3,
            "lastAttemptedGeneration": 3,
            "conditions": [
                {"type": "Ready", "status": "True", "observedGeneration": 3,
                 "lastTransitionTime": "2026-11-27T09:38:01Z", "reason": "InstallSucceeded",
                 "message": "Helm install succeeded for release default/web.v1 with chart podinfo@6.14.1"},
                {"type": "Released", "status": "True", "observedGeneration": 3,
                 "lastTransitionTime": "2026-11-27T09:38:00Z", "reason": "InstallSucceeded",
                 "message": "Helm install succeeded"}
            ],
            "helmChart": "flux-system/default-web",
            "storageNamespace": "default",
            "history": [{
                "apiVersion": "v2", "digest": format!("sha256:{}", "a".repeat(64)),
                "name": "web", "namespace": "default", "version": 1, "status": "deployed",
                "chartName": "podinfo", "chartVersion": "6.14.1", "appVersion": "6.14.1",
                "configDigest": format!("sha256:{}", "b".repeat(64)),
                "firstDeployed": "2026-11-27T09:37:58Z", "lastDeployed": "2026-11-27T09:37:58Z",
                "testHooks": {"web-test": {"phase": "Succeeded",
                    "lastStarted": "2026-11-27T09:38:00Z", "lastCompleted": "2026-11-27T09:38:01Z"}}
            }],
            "inventory": {"entries": [
                {"id": "default_web_apps_Deployment", "v": "v1"},
                {"id": "default_web__Service", "v": "v1"}
            ]},
            "lastAttemptedReleaseAction": "install",
            "failures": 1,
            "installFailures": 1,
            "lastAttemptedRevision": "6.14.1",
            "lastAttemptedValuesChecksum": "c".repeat(40),
            "lastReleaseRevision": 1,
            "lastAttemptedConfigDigest": format!("sha256:{}", "b".repeat(64)),
            "lastHandledReconcileAt": "2026-11-27T09:37:00Z"
        }))
        .expect("a status in Flux's JSON");
        assert!(!status.history.is_empty() && status.inventory.is_some());
        assert_eq!(StoredStatus::new(&status).get(), status);
        assert_eq!(StoredStatus::new(&status).digest(), status_digest(&status));
        assert_eq!(
            StoredStatus::default().digest(),
            status_digest(&HelmReleaseStatus::default())
        );
        assert_eq!(StoredStatus::default().get(), HelmReleaseStatus::default());
        assert_eq!(
            StoredStatus::new(&HelmReleaseStatus::default()).get(),
            HelmReleaseStatus::default()
        );
    }

    #[tokio::test]
    async fn an_external_agent_receives_the_handles_commands_and_what_it_holds_and_reports_is_what_the_handle_and_reports_show()
     {
        let (handle, mut reports, mut external) = external();
        let key = ObjectKey {
            namespace: Namespace::new("apps").unwrap(),
            name: ObjectName::new("web").unwrap(),
        };
        handle.send(Command::Reconcile(key.clone())).unwrap();
        assert_eq!(external.recv().await, Some(Command::Reconcile(key.clone())));

        let held = HeldPlan {
            object: key.clone(),
            revision: PlanRevision::new(3),
            chart: ChartDigest::new(format!("sha256:{}", "b".repeat(64))).unwrap(),
            status_digest: None,
        };
        external.hold(held.clone());
        assert_eq!(handle.held(), vec![held]);
        external.forget(&key);
        assert!(handle.held().is_empty());

        let deleted = Report::Deleted {
            object: key,
            revision: PlanRevision::new(4),
            outcome: DeleteOutcome::Forgotten,
        };
        external.report(deleted.clone()).unwrap();
        assert_eq!(reports.recv().await, Some(deleted));

        drop(handle);
        assert_eq!(external.recv().await, None);
        drop(reports);
        assert!(
            external
                .report(Report::Rejected {
                    object: ObjectKey {
                        namespace: Namespace::new("apps").unwrap(),
                        name: ObjectName::new("web").unwrap(),
                    },
                    revision: PlanRevision::new(5),
                    error: "spec.chart".into(),
                })
                .is_err()
        );
    }
}
