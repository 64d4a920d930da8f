//! The agent's reconcile of one release plan: core's IO-free driver
//! ([`flotilla_core::release::Driver`]) decides, this module carries it out.
//!
//! ```text
//! Driver::new(plan, status)                    core: begin_reconcile (counters, target change)
//! loop match driver.next() {
//!     Observe     => observe(..)               IO: Helm storage (newest, rollback target)
//!     DetectDrift => drift::detect(..)         IO: server-side dry-run diff
//!     Persist     => state.save(..)            IO: before each action, and at the end
//!     Run(action) => executor.run(..)          IO: render, hooks, apply, wait, records
//!     Done        => break
//! }
//! driver.finish(); post events; report          observedGeneration, events
//! ```
//!
//! - [`observe`] reads the newest release record and the rollback target from Helm storage
//!   ([`crate::storage`]); the controller state comes from its Secret ([`state`]).
//! - [`actions::Executor`] runs install, upgrade, test, rollback, uninstall and unlock,
//!   writing release records with Helm's statuses.
//! - The controller state is persisted before every action (and at the end), so an agent
//!   killed mid-action resumes from the decision that started it (a release left
//!   `pending-*` is unlocked by the state machine). Writes that change nothing are skipped
//!   by the store.
//! - [`reconcile_until`] stops at a safe point (before an action) when asked: the runtime
//!   uses it for superseded plans and for shutdown.
//! - Rendering is behind [`render::Renderer`].
//! - With `spec.serviceAccountName`, actions (and their Helm storage writes) run as that
//!   ServiceAccount ([`Context::action_cluster`]); observing uses the agent's identity.
//! - [`delete_release`] uninstalls the release of a deleted HelmRelease and forgets it.
//! - [`plan_file`] reads the plan files of `flotilla-agent apply`.
//!
//! - Drift detection and correction ([`crate::drift`]) run when core asks for them
//!   (`DetectDrift`, `CorrectDrift`), as the plan's actions' identity; the diffs found by
//!   detection are what the correction applies.
//! - The report's events are posted as Kubernetes Events ([`crate::events`]).
//! - Rendering sees the cluster as Helm's install and upgrade do: `.Capabilities` from
//!   discovery and `lookup` answered by the cluster ([`crate::kube::capabilities`]), with
//!   the action's identity. `upgrade.preserveValues` (Helm's `--reuse-values`),
//!   `install.replace`, `disableSchemaValidation` and `spec.commonMetadata` are honoured.
//! - `spec.postRenderers` (kustomize patches and images, `flotilla_chart::postrender`) run
//!   over the rendered templates, hooks in the same stream (`postRenderStrategy: combined`,
//!   the default), in one of their own (`separate`) or not at all (`nohooks`), before
//!   `spec.commonMetadata`, as helm-controller chains them.
//! - A failed hook's or test pod's log follows the failure message in the status and Event
//!   (`POD LOGS: <pod>`, capped: `crate::kube::hook`).
//!
//! Not here yet: client-side apply and `force`, and the inventory in the status.

// Errors name their object for people; they are built on the failure path only, so their
// size does not matter.
#![allow(clippy::result_large_err)]

pub mod actions;
pub mod inventory;
pub mod plan_file;
pub mod render;
pub mod state;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flotilla_chart::Chart;
use flotilla_core::agent::DeleteOutcome;
use flotilla_core::meta::Timestamp;
use flotilla_core::plan::{ReleasePlan, ReleaseRecord};
use flotilla_core::release::{self, Action, Driver, Event, Next, Step, apply_outcome};
use flotilla_core::status::HelmReleaseStatus;
use kube::Client;

use crate::kube::ClusterApi;
use crate::storage::{SecretStorage, StorageError};
use actions::{Executor, record_of};
use render::Renderer;
use state::{StateError, StateStore};

/// What a reconcile needs besides the plan and chart.
#[derive(Clone, Debug)]
pub struct Context {
    /// The workload cluster.
    pub cluster: ClusterApi,
    /// Controller state Secrets in the agent's namespace.
    pub state: StateStore,
    /// The renderer.
    pub renderer: Arc<dyn Renderer>,
    /// The configuration `cluster` was built from, to impersonate a plan's
    /// `spec.serviceAccountName`; `None` refuses plans that name one.
    pub config: Option<kube::Config>,
    /// Posts the Kubernetes Events (and remembers similar ones, to combine them).
    pub events: crate::events::Recorder,
}

impl Context {
    /// A context for a cluster client, keeping controller state in `agent_namespace`.
    /// Plans naming a ServiceAccount are refused (no configuration to impersonate from).
    pub fn new(client: Client, agent_namespace: &str, renderer: Arc<dyn Renderer>) -> Context {
        Context {
            cluster: ClusterApi::new(client.clone()),
            state: StateStore::new(client, agent_namespace),
            renderer,
            config: None,
            events: Default::default(),
        }
    }

    /// A context for a client configuration; actions of plans naming a ServiceAccount run
    /// as that ServiceAccount.
    pub fn from_config(
        config: kube::Config,
        agent_namespace: &str,
        renderer: Arc<dyn Renderer>,
    ) -> Result<Context, kube::Error> {
        let client = Client::try_from(config.clone())?;
        Ok(Context {
            config: Some(config),
            ..Context::new(client, agent_namespace, renderer)
        })
    }

    /// The cluster a plan's actions run against: impersonating `spec.serviceAccountName`
    /// (in the HelmRelease's namespace) when it is set, else the agent's own identity.
    /// Helm storage is written with the same identity.
    pub fn action_cluster(&self, plan: &ReleasePlan) -> Result<ClusterApi, ReconcileError> {
        let Some(sa) = plan.options.service_account_name.as_deref() else {
            return Ok(self.cluster.clone());
        };
        let Some(config) = &self.config else {
            return Err(ReconcileError::Impersonation {
                object: object_key(plan),
                message: format!(
                    "spec.serviceAccountName: cannot act as {sa:?}: this agent has no client configuration to impersonate from"
                ),
            });
        };
        let client = crate::kube::impersonate::service_account_client(
            config,
            plan.object.namespace.as_str(),
            sa,
        )
        .map_err(|e| ReconcileError::Impersonation {
            object: object_key(plan),
            message: format!("spec.serviceAccountName: {}", crate::kube::error_chain(&e)),
        })?;
        Ok(self.cluster.acting_as(client))
    }
}

/// Errors that stop a reconcile before the state machine could finish it. Action
/// failures are not errors: they are outcomes recorded in the status.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The controller state could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// Helm storage could not be read.
    #[error("HelmRelease {object}: reading Helm storage")]
    Storage {
        /// `namespace/name` of the HelmRelease.
        object: String,
        /// What failed.
        #[source]
        source: StorageError,
    },
    /// A stored release could not be summarized.
    #[error("HelmRelease {object}: {message}")]
    Record {
        /// `namespace/name` of the HelmRelease.
        object: String,
        /// What is wrong with it.
        message: String,
    },
    /// The ServiceAccount of `spec.serviceAccountName` cannot be impersonated.
    #[error("HelmRelease {object}: {message}")]
    Impersonation {
        /// `namespace/name` of the HelmRelease.
        object: String,
        /// Why.
        message: String,
    },
}

impl ReconcileError {
    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ReconcileError::State(e) => e.kind(),
            ReconcileError::Storage { source, .. } => source.kind(),
            ReconcileError::Record { .. } => "record",
            ReconcileError::Impersonation { .. } => "impersonation",
        }
    }

    /// Whether retrying with backoff may help.
    pub fn is_transient(&self) -> bool {
        match self {
            ReconcileError::State(e) => e.is_transient(),
            ReconcileError::Storage { source, .. } => source.is_transient(),
            ReconcileError::Record { .. } | ReconcileError::Impersonation { .. } => false,
        }
    }
}

/// What one reconcile did.
#[derive(Debug, Clone)]
pub struct ReconcileReport {
    /// How it ended: `Done` (requeue after `spec.interval`), `Requeue` (backoff),
    /// `RetryAfter`, `Stalled` (wait for a change) or `Failed` (backoff).
    pub step: Step,
    /// The status after it (also persisted).
    pub status: HelmReleaseStatus,
    /// The actions run, in order (`install`, `upgrade`, `test`, ...).
    pub actions: Vec<&'static str>,
    /// The Kubernetes Events Flux would record.
    pub events: Vec<Event>,
}

impl ReconcileReport {
    /// When to reconcile again: `None` for a stall (only a change helps).
    pub fn requeue_after(&self, interval: Duration, backoff: Duration) -> Option<Duration> {
        match &self.step {
            Step::Done => Some(interval),
            Step::RetryAfter(d) => Some(d.get()),
            Step::Requeue | Step::Failed(_) | Step::Run { .. } => Some(backoff),
            Step::Stalled => None,
        }
    }
}

fn object_key(plan: &ReleasePlan) -> String {
    format!("{}/{}", plan.object.namespace, plan.object.name)
}

/// Now, as core wants it (whole seconds, UTC).
pub fn now() -> Timestamp {
    let t = k8s_openapi::jiff::Timestamp::now().to_string();
    Timestamp::new(t)
        .map(|t| t.to_kubernetes())
        .unwrap_or_else(|_| Timestamp::new("1970-01-01T00:00:00Z").expect("a valid timestamp"))
}

/// Reads what a decision needs from Helm storage: the newest release record and the
/// record of `rollback_version`, both summarized against the controller `status`.
pub async fn observe(
    ctx: &Context,
    plan: &ReleasePlan,
    status: &HelmReleaseStatus,
    rollback_version: Option<u32>,
) -> Result<(Option<ReleaseRecord>, Option<ReleaseRecord>), ReconcileError> {
    let records = SecretStorage::new(
        ctx.cluster.client().clone(),
        plan.release.storage_namespace.as_str(),
    );
    let storage_error = |source| ReconcileError::Storage {
        object: object_key(plan),
        source,
    };
    let record_error = |e: crate::storage::observation::RecordError| ReconcileError::Record {
        object: object_key(plan),
        message: e.to_string(),
    };
    let current = records
        .last(plan.release.name.as_str())
        .await
        .map_err(storage_error)?
        .map(|r| record_of(&r, status))
        .transpose()
        .map_err(record_error)?;
    let rollback_target = match rollback_version {
        Some(version) => match records
            .get(plan.release.name.as_str(), i64::from(version))
            .await
        {
            Ok(r) => Some(record_of(&r, status).map_err(record_error)?),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(storage_error(e)),
        },
        None => None,
    };
    Ok((current, rollback_target))
}

/// One reconcile of a plan with its chart: core's [`Driver`] decides, this carries it out
/// (observes Helm storage, detects drift, persists the status, runs the actions).
pub async fn reconcile(
    ctx: &Context,
    plan: &ReleasePlan,
    chart: &Chart,
) -> Result<ReconcileReport, ReconcileError> {
    reconcile_until(ctx, plan, chart, &AtomicBool::new(false), &|_| {}).await
}

/// The status as it stands when an action starts (persisted just before): Flux patches it
/// then, so a long action shows `Ready=Unknown` and `Reconciling=True` "Running '<action>'
/// action with timeout of <t>" while it runs.
#[derive(Debug, Clone, Copy)]
pub struct InAction<'a> {
    /// The status.
    pub status: &'a HelmReleaseStatus,
    /// The action about to run.
    pub action: &'a Action,
    /// Its timeout.
    pub timeout: flotilla_core::duration::GoDuration,
}

/// [`reconcile`], stopping at the next safe point once `stop` is set: before starting
/// another Helm action, never inside one. A stopped reconcile ends with [`Step::Requeue`]
/// (the runtime runs the newer plan, or nothing when shutting down). `in_action` is told
/// the status before each action runs (after `stop` was checked).
#[tracing::instrument(skip_all, fields(release = %plan.release.qualified(), object = %object_key(plan)))]
pub async fn reconcile_until(
    ctx: &Context,
    plan: &ReleasePlan,
    chart: &Chart,
    stop: &AtomicBool,
    in_action: &(dyn Fn(InAction<'_>) + Send + Sync),
) -> Result<ReconcileReport, ReconcileError> {
    let status = ctx
        .state
        .load(&plan.object.key())
        .await?
        .map(|s| s.status)
        .unwrap_or_default();
    // The plan is recorded before anything is decided (a no-op when it is already), so a
    // restart resumes this plan, suspended or not.
    ctx.state.save(plan, &status).await?;
    let cluster = ctx.action_cluster(plan)?;
    let exec = Executor {
        cluster: &cluster,
        records: SecretStorage::new(
            cluster.client().clone(),
            plan.release.storage_namespace.as_str(),
        ),
        renderer: ctx.renderer.clone(),
        plan,
        chart,
        drift: Default::default(),
    };
    let mut driver = Driver::new(plan, status);
    loop {
        match driver.next(&now()) {
            Next::Observe { rollback_version } => {
                let (current, rollback_target) =
                    observe(ctx, plan, driver.status(), rollback_version).await?;
                driver.observed(current, rollback_target);
            }
            Next::DetectDrift => driver.drift(exec.detect_drift().await),
            Next::Persist => {
                ctx.state.save(plan, driver.status()).await?;
                driver.persisted();
            }
            Next::Run { action, timeout } => {
                if stop.load(Ordering::SeqCst) {
                    tracing::info!("stopping at a safe point: superseded or shutting down");
                    driver.stop();
                    continue;
                }
                tracing::info!(action = action.name(), "running action");
                in_action(InAction {
                    status: driver.status(),
                    action: &action,
                    timeout,
                });
                let outcome = exec.run(&action, timeout.get(), driver.status()).await;
                driver.completed(&action, &outcome, &now());
            }
            Next::Done(_) => break,
        }
    }
    let finished = driver.finish();
    if let Some(reset) = finished.reset {
        tracing::info!(%reset, "failure counters reset");
    }
    post_events(ctx, plan, &finished.events).await;
    Ok(ReconcileReport {
        step: finished.step,
        status: finished.status,
        actions: finished.actions,
        events: finished.events,
    })
}

/// The HelmRelease is gone (Flux's `reconcileDelete`): uninstalls its release with
/// `spec.uninstall` (nothing when the plan is suspended or was never installed), then
/// forgets its controller state. When the uninstall fails, the state is kept with the
/// failure recorded and the report's step is `Failed` (retry later). An uninstall needs no
/// chart: `chart` may be `None` when it is no longer available.
#[tracing::instrument(skip_all, fields(release = %plan.release.qualified(), object = %object_key(plan)))]
pub async fn delete_release(
    ctx: &Context,
    plan: &ReleasePlan,
    chart: Option<&Chart>,
) -> Result<(ReconcileReport, DeleteOutcome), ReconcileError> {
    // Uninstalling reads the release from storage only; the executor's chart is unused.
    let placeholder;
    let chart = match chart {
        Some(chart) => chart,
        None => {
            placeholder = Chart::new(flotilla_chart::Metadata::default());
            &placeholder
        }
    };
    let mut status = ctx
        .state
        .load(&plan.object.key())
        .await?
        .map(|s| s.status)
        .unwrap_or_default();
    let Some(action) = release::uninstall_for_deletion(plan, &status) else {
        ctx.state.delete(&plan.object.key()).await?;
        let report = ReconcileReport {
            step: Step::Done,
            status,
            actions: Vec::new(),
            events: Vec::new(),
        };
        return Ok((report, DeleteOutcome::Forgotten));
    };
    let storage_namespace = match &action {
        Action::Uninstall {
            storage_namespace, ..
        } => storage_namespace.clone(),
        _ => plan.release.storage_namespace.to_string(),
    };
    let cluster = ctx.action_cluster(plan)?;
    let exec = Executor {
        cluster: &cluster,
        records: SecretStorage::new(cluster.client().clone(), &storage_namespace),
        renderer: ctx.renderer.clone(),
        plan,
        chart,
        drift: Default::default(),
    };
    let outcome = exec.run(&action, action.timeout(plan).get(), &status).await;
    let applied = apply_outcome(plan, &action, &outcome, &mut status, &now());
    let step = match applied.returned_error {
        Some(message) => {
            ctx.state.save(plan, &status).await?;
            Step::Failed(release::ReconcileError::Action {
                action: action.name(),
                message,
                transient: applied.transient,
            })
        }
        None => {
            ctx.state.delete(&plan.object.key()).await?;
            Step::Done
        }
    };
    post_events(ctx, plan, &applied.events).await;
    let report = ReconcileReport {
        step,
        status,
        actions: vec![action.name()],
        events: applied.events,
    };
    Ok((report, DeleteOutcome::Uninstalled))
}

/// Logs the events and posts them to the workload cluster ([`crate::events`]; failures are
/// logged, never returned).
async fn post_events(ctx: &Context, plan: &ReleasePlan, events: &[Event]) {
    for e in events {
        tracing::info!(reason = %e.reason, "event");
    }
    ctx.events
        .record(ctx.cluster.client(), ctx.state.namespace(), plan, events)
        .await;
}
