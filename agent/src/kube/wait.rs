//! Watch-driven waits: until a set of objects is ready (kstatus `Current`), or gone.
//!
//! One watch per resource type and namespace (narrowed to the name when it holds one object)
//! feeds every change to a status computation; nothing polls. A wait ends at the first
//! `Failed` object, when every object is satisfied, or at the deadline, with an error naming
//! each object still waited for and why.
//!
//! The strategy (`spec.waitStrategy`, Flux's `internal/action/wait.go`): `poller` (the
//! default; Helm 4's `watcher`) judges objects by kstatus, custom resources covered by
//! `spec.healthCheckExprs` by their CEL checks ([`crate::cel`]), and fails fast;
//! `legacy` is Helm's legacy ready checker: kinds it does not know (custom resources) are
//! ready as they are, no CEL checks, and only a failed Job ends the wait early. Both skip
//! paused Deployments (`spec.paused: true`), as Helm and Flux do: a paused rollout never
//! progresses.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use flotilla_core::spec::{CustomHealthCheck, WaitStrategy, WaitStrategyName};

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt as _};
use tokio::time::Instant;

use super::status::{self, JobRule, Status, StatusResult};
use super::{ClusterApi, ObjectRef, Resource};
use crate::cel::{CelError, HealthChecks};

/// How to wait for readiness.
#[derive(Clone, Debug)]
pub struct WaitOptions {
    /// How long to wait in all.
    pub timeout: Duration,
    /// Wait for Jobs to complete (Helm's `--wait-for-jobs`; Flux's `disableWaitForJobs:
    /// false`). When false, a Job counts as ready once it has started (kstatus's rule).
    pub wait_for_jobs: bool,
    /// Helm's legacy ready checker instead of kstatus (`spec.waitStrategy.name: legacy`).
    pub legacy: bool,
    /// The CEL health checks of `spec.healthCheckExprs` (not used by `legacy`).
    pub health_checks: Arc<HealthChecks>,
}

impl WaitOptions {
    /// Waits up to `timeout`, Jobs included (Flux's default), with kstatus and no CEL
    /// checks.
    pub fn new(timeout: Duration) -> WaitOptions {
        WaitOptions {
            timeout,
            wait_for_jobs: true,
            legacy: false,
            health_checks: Arc::default(),
        }
    }

    /// These options with a plan's `spec.waitStrategy` and `spec.healthCheckExprs`.
    pub fn with_strategy(
        mut self,
        strategy: Option<WaitStrategy>,
        checks: &[CustomHealthCheck],
    ) -> Result<WaitOptions, CelError> {
        self.legacy = strategy.is_some_and(|s| s.name == WaitStrategyName::Legacy);
        if !checks.is_empty() {
            self.health_checks = Arc::new(HealthChecks::new(checks)?);
        }
        Ok(self)
    }

    /// The status of a live object (its JSON form, with `apiVersion` and `kind`) by these
    /// options' rules.
    pub fn status(&self, obj: &serde_json::Value) -> StatusResult {
        let jobs = if self.wait_for_jobs {
            JobRule::Complete
        } else {
            JobRule::Started
        };
        if is_paused_deployment(obj) {
            return StatusResult {
                status: Status::Current,
                message: "Deployment is paused".to_owned(),
            };
        }
        if self.legacy {
            return status::compute_legacy(obj, jobs);
        }
        if let Some(result) = self.health_checks.evaluate(obj) {
            return result;
        }
        status::compute(obj, jobs)
    }
}

/// A Deployment with `spec.paused: true` (Helm and Flux do not wait for it).
fn is_paused_deployment(obj: &serde_json::Value) -> bool {
    let api = obj.get("apiVersion").and_then(serde_json::Value::as_str);
    let kind = obj.get("kind").and_then(serde_json::Value::as_str);
    matches!(api, Some("apps/v1" | "extensions/v1beta1" | "apps/v1beta2"))
        && kind == Some("Deployment")
        && obj
            .pointer("/spec/paused")
            .and_then(serde_json::Value::as_bool)
            == Some(true)
}

/// An object a wait ended without.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotReady {
    /// The object.
    pub object: ObjectRef,
    /// Its last known status.
    pub status: Status,
    /// Why it is not ready.
    pub message: String,
}

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Status::InProgress => write!(f, "{}: {}", self.object, self.message),
            other => write!(f, "{}: {other}: {}", self.object, self.message),
        }
    }
}

impl NotReady {
    /// The object as Flux's waiter (`fluxcd/pkg/ssa`, which helm-controller waits with)
    /// names it in its errors: `<Kind>/<namespace>/<name> status: '<Status>'`.
    pub fn flux_form(&self) -> String {
        waited_form(&self.object, self.status)
    }
}

/// `<Kind>/<namespace>/<name> status: '<Status>'` (no namespace segment for cluster-scoped
/// objects): how Flux's waiter names an object it waited for in vain.
pub fn waited_form(object: &ObjectRef, status: Status) -> String {
    match object.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => {
            format!("{}/{ns}/{} status: '{status}'", object.kind, object.name)
        }
        _ => format!("{}/{} status: '{status}'", object.kind, object.name),
    }
}

/// Flux's list of the objects a wait ended without: `[a, b]`, in Flux's form. Why each is
/// not ready ([`NotReady::message`]) is for the logs: Flux's message does not carry it.
fn list(items: &[NotReady]) -> String {
    let parts: Vec<String> = items.iter().map(NotReady::flux_form).collect();
    format!("[{}]", parts.join(", "))
}

/// Errors of a wait.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// An object reached a state it will not leave by waiting (Flux's text).
    #[error("failed early due to stalled resources: [{}]", .0.flux_form())]
    Failed(NotReady),
    /// The deadline passed first (Flux's text).
    #[error("timeout waiting for: {}", list(.0))]
    Timeout(Vec<NotReady>),
    /// Objects were still present at the deadline.
    #[error("timeout waiting for deletion of: {}", list(.0))]
    DeletionTimeout(Vec<NotReady>),
    /// `spec.healthCheckExprs` does not compile (the hub stalls such a HelmRelease before
    /// it reaches an agent; a plan file may still hold one).
    #[error(transparent)]
    InvalidHealthCheck(#[from] CelError),
}

impl WaitError {
    /// A short, bounded name for the failure (a metric label).
    pub fn kind(&self) -> &'static str {
        match self {
            WaitError::Failed(_) => "failed",
            WaitError::Timeout(_) => "timeout",
            WaitError::DeletionTimeout(_) => "deletion_timeout",
            WaitError::InvalidHealthCheck(_) => "invalid_health_check",
        }
    }

    /// Whether waiting longer may help (a timeout), as opposed to a failed object.
    pub fn is_transient(&self) -> bool {
        !matches!(
            self,
            WaitError::Failed(_) | WaitError::InvalidHealthCheck(_)
        )
    }

    /// The objects the wait ended without.
    pub fn not_ready(&self) -> &[NotReady] {
        match self {
            WaitError::Failed(one) => std::slice::from_ref(one),
            WaitError::Timeout(all) | WaitError::DeletionTimeout(all) => all,
            WaitError::InvalidHealthCheck(_) => &[],
        }
    }
}

/// What a watch saw of one object.
#[derive(Clone, Debug)]
pub(crate) enum Observation<'a> {
    /// The object as it is now.
    Present(&'a DynamicObject),
    /// The object does not exist.
    Gone,
    /// The watch failed (it retries with backoff).
    WatchFailed(String),
}

/// Watches `targets` until `on_change` breaks or `deadline` passes; `true` when it broke.
pub(crate) async fn watch_objects<F>(
    client: &Client,
    targets: &[Resource],
    deadline: Instant,
    mut on_change: F,
) -> bool
where
    F: FnMut(usize, Observation<'_>) -> ControlFlow<()>,
{
    // Group targets by resource type and namespace, then watch each object by name (a
    // field selector: the API server sends only that object's events) unless a group names
    // more than MAX_NAMED_WATCHES objects; then one watch of the whole namespace serves the
    // group. A namespace-wide watch of a busy namespace streams every change of every
    // object of that type to every reconcile waiting in it (measured with 200 releases in
    // one namespace: most of the agent's peak heap and of the API server's CPU).
    const MAX_NAMED_WATCHES: usize = 16;
    struct Group {
        api: Api<DynamicObject>,
        by_name: HashMap<String, Vec<usize>>,
        seen: HashSet<String>,
    }
    let mut groups: Vec<Group> = Vec::new();
    let mut keys: HashMap<(String, String, String, Option<String>), usize> = HashMap::new();
    for (i, r) in targets.iter().enumerate() {
        let key = (
            r.api_resource.group.clone(),
            r.api_resource.version.clone(),
            r.api_resource.plural.clone(),
            r.namespace().map(str::to_owned),
        );
        let g = *keys.entry(key).or_insert_with(|| {
            groups.push(Group {
                api: r.api(client),
                by_name: HashMap::new(),
                seen: HashSet::new(),
            });
            groups.len() - 1
        });
        groups[g].by_name.entry(r.name()).or_default().push(i);
    }
    let mut groups: Vec<Group> = groups
        .into_iter()
        .flat_map(|group| {
            if group.by_name.len() > MAX_NAMED_WATCHES {
                return vec![group];
            }
            group
                .by_name
                .into_iter()
                .map(|(name, indices)| Group {
                    api: group.api.clone(),
                    by_name: HashMap::from([(name, indices)]),
                    seen: HashSet::new(),
                })
                .collect()
        })
        .collect();
    let streams = groups.iter().enumerate().map(|(g, group)| {
        let mut config = watcher::Config::default();
        if group.by_name.len() == 1
            && let Some(name) = group.by_name.keys().next()
        {
            config = config.fields(&format!("metadata.name={name}"));
        }
        watcher::watcher(group.api.clone(), config)
            .default_backoff()
            .map(move |event| (g, event))
            .boxed()
    });
    let mut events = futures::stream::select_all(streams);
    loop {
        let next = match tokio::time::timeout_at(deadline, events.next()).await {
            Err(_) | Ok(None) => return false,
            Ok(Some(next)) => next,
        };
        let (g, event) = next;
        let group = &mut groups[g];
        let mut flow = ControlFlow::Continue(());
        let mut deliver = |indices: Option<&Vec<usize>>, obs: Observation<'_>| {
            for &i in indices.into_iter().flatten() {
                if flow.is_continue() {
                    flow = on_change(i, obs.clone());
                }
            }
        };
        match event {
            Ok(Event::Init) => group.seen.clear(),
            Ok(Event::InitApply(obj)) => {
                let name = obj.name_any();
                deliver(group.by_name.get(&name), Observation::Present(&obj));
                group.seen.insert(name);
            }
            Ok(Event::InitDone) => {
                for (name, indices) in &group.by_name {
                    if !group.seen.contains(name) {
                        deliver(Some(indices), Observation::Gone);
                    }
                }
            }
            Ok(Event::Apply(obj)) => {
                deliver(
                    group.by_name.get(&obj.name_any()),
                    Observation::Present(&obj),
                );
            }
            Ok(Event::Delete(obj)) => {
                deliver(group.by_name.get(&obj.name_any()), Observation::Gone);
            }
            Err(e) => {
                let all: Vec<usize> = group.by_name.values().flatten().copied().collect();
                deliver(
                    Some(&all),
                    Observation::WatchFailed(format!("watch failed: {e}")),
                );
            }
        }
        if flow.is_break() {
            return true;
        }
    }
}

/// The kstatus result of a live object of `target`'s resource. Objects from list responses
/// carry no `apiVersion`/`kind`; the target's are used then.
pub fn object_status(obj: &DynamicObject, target: &Resource, jobs: JobRule) -> StatusResult {
    let options = WaitOptions {
        wait_for_jobs: jobs == JobRule::Complete,
        ..WaitOptions::new(Duration::ZERO)
    };
    object_status_with(obj, target, &options)
}

/// [`object_status`] by the rules of `options` (strategy, CEL health checks).
pub fn object_status_with(
    obj: &DynamicObject,
    target: &Resource,
    options: &WaitOptions,
) -> StatusResult {
    match serde_json::to_value(obj) {
        Ok(mut json) => {
            if let Some(map) = json.as_object_mut() {
                map.entry("apiVersion")
                    .or_insert_with(|| target.api_resource.api_version.clone().into());
                map.entry("kind")
                    .or_insert_with(|| target.api_resource.kind.clone().into());
            }
            options.status(&json)
        }
        Err(e) => StatusResult {
            status: Status::Unknown,
            message: format!("cannot read the object: {e}"),
        },
    }
}

impl ClusterApi {
    /// Waits until every object is `Current` (kstatus), returning the first `Failed` one as
    /// soon as it fails, or on timeout every object not ready and why.
    pub async fn wait_ready(
        &self,
        targets: &[Resource],
        options: &WaitOptions,
    ) -> Result<(), WaitError> {
        let deadline = Instant::now() + options.timeout;
        // Objects already `Current` as the API server returned them (the apply response:
        // ConfigMaps, Services, RBAC, unchanged workloads) need no watch; only the others
        // are watched. A stale "failed" in a response is not trusted: those are watched.
        let mut states: Vec<StatusResult> = Vec::with_capacity(targets.len());
        let mut watched: Vec<Resource> = Vec::new();
        let mut index: Vec<usize> = Vec::new();
        for (i, target) in targets.iter().enumerate() {
            let state = object_status_with(&target.object, target, options);
            if state.is_current() {
                states.push(state);
            } else {
                states.push(StatusResult {
                    status: Status::Unknown,
                    message: "not observed yet".to_owned(),
                });
                watched.push(target.clone());
                index.push(i);
            }
        }
        if watched.is_empty() {
            return Ok(());
        }
        let mut failed = None;
        watch_objects(&self.client, &watched, deadline, |w, obs| {
            let i = index[w];
            states[i] = match obs {
                Observation::Present(obj) => object_status_with(obj, &targets[i], options),
                Observation::Gone => StatusResult::not_found(),
                Observation::WatchFailed(message) => StatusResult {
                    status: Status::Unknown,
                    message,
                },
            };
            if states[i].status == Status::Failed {
                failed = Some(i);
                return ControlFlow::Break(());
            }
            if states.iter().all(StatusResult::is_current) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .await;
        if let Some(i) = failed {
            return Err(WaitError::Failed(not_ready(&targets[i], &states[i])));
        }
        let pending: Vec<NotReady> = targets
            .iter()
            .zip(&states)
            .filter(|(_, s)| !s.is_current())
            .map(|(t, s)| not_ready(t, s))
            .collect();
        if pending.is_empty() {
            Ok(())
        } else {
            Err(WaitError::Timeout(pending))
        }
    }

    /// Waits until none of the objects exists any more.
    pub async fn wait_deleted(
        &self,
        targets: &[Resource],
        timeout: Duration,
    ) -> Result<(), WaitError> {
        if targets.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let mut states: Vec<StatusResult> = targets
            .iter()
            .map(|_| StatusResult {
                status: Status::Unknown,
                message: "not observed yet".to_owned(),
            })
            .collect();
        watch_objects(&self.client, targets, deadline, |i, obs| {
            states[i] = match obs {
                Observation::Present(obj) => StatusResult {
                    status: if obj.metadata.deletion_timestamp.is_some() {
                        Status::Terminating
                    } else {
                        Status::Current
                    },
                    message: match &obj.metadata.finalizers {
                        Some(f) if !f.is_empty() => {
                            format!("still present, finalizers: {}", f.join(", "))
                        }
                        _ => "still present".to_owned(),
                    },
                },
                Observation::Gone => StatusResult::not_found(),
                Observation::WatchFailed(message) => StatusResult {
                    status: Status::Unknown,
                    message,
                },
            };
            if states.iter().all(|s| s.status == Status::NotFound) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .await;
        let pending: Vec<NotReady> = targets
            .iter()
            .zip(&states)
            .filter(|(_, s)| s.status != Status::NotFound)
            .map(|(t, s)| not_ready(t, s))
            .collect();
        if pending.is_empty() {
            Ok(())
        } else {
            Err(WaitError::DeletionTimeout(pending))
        }
    }
}

fn not_ready(target: &Resource, state: &StatusResult) -> NotReady {
    NotReady {
        object: target.object_ref(),
        status: state.status,
        message: state.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(paused: bool) -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "generation": 1},
            "spec": {"paused": paused, "replicas": 1, "progressDeadlineSeconds": 600},
            "status": {"observedGeneration": 1, "replicas": 0},
        })
    }

    fn widget_not_ready() -> serde_json::Value {
        json!({
            "apiVersion": "example.dev/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "status": {"phase": "Ready", "conditions": [{"type": "Ready", "status": "False"}]},
        })
    }

    #[test]
    fn each_strategy_judges_objects_by_its_own_rules() {
        let poller = WaitOptions::new(Duration::ZERO);
        let legacy = WaitOptions::new(Duration::ZERO)
            .with_strategy(
                Some(WaitStrategy {
                    name: WaitStrategyName::Legacy,
                }),
                &[],
            )
            .expect("no checks");
        let checks = [CustomHealthCheck {
            api_version: "example.dev/v1".to_owned(),
            kind: Some("Widget".to_owned()),
            current: "status.phase == 'Ready'".to_owned(),
            in_progress: None,
            failed: None,
        }];
        let cel = WaitOptions::new(Duration::ZERO)
            .with_strategy(None, &checks)
            .expect("valid");
        let legacy_cel = WaitOptions::new(Duration::ZERO)
            .with_strategy(
                Some(WaitStrategy {
                    name: WaitStrategyName::Legacy,
                }),
                &checks,
            )
            .expect("valid");
        let crash = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "c", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
        });
        let failed_job = json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "status": {"conditions": [{"type": "Failed", "status": "True"}]},
        });
        let cases = [
            (
                "paused Deployment, poller",
                &poller,
                deployment(true),
                Status::Current,
            ),
            (
                "paused Deployment, legacy",
                &legacy,
                deployment(true),
                Status::Current,
            ),
            (
                "rolling Deployment, poller",
                &poller,
                deployment(false),
                Status::InProgress,
            ),
            (
                "rolling Deployment, legacy",
                &legacy,
                deployment(false),
                Status::InProgress,
            ),
            (
                "custom resource, poller",
                &poller,
                widget_not_ready(),
                Status::InProgress,
            ),
            (
                "custom resource, legacy",
                &legacy,
                widget_not_ready(),
                Status::Current,
            ),
            (
                "custom resource, CEL",
                &cel,
                widget_not_ready(),
                Status::Current,
            ),
            (
                "custom resource, legacy ignores CEL",
                &legacy_cel,
                widget_not_ready(),
                Status::Current,
            ),
            (
                "crashing pod, poller fails fast",
                &poller,
                crash.clone(),
                Status::Failed,
            ),
            (
                "crashing pod, legacy waits",
                &legacy,
                crash,
                Status::InProgress,
            ),
            (
                "failed Job, legacy fails",
                &legacy,
                failed_job,
                Status::Failed,
            ),
        ];
        for (name, options, obj, want) in cases {
            let got = options.status(&obj);
            assert_eq!(got.status, want, "{name}: {}", got.message);
        }
    }

    #[test]
    fn invalid_health_checks_are_an_error_that_waiting_does_not_cure() {
        let checks = [CustomHealthCheck {
            api_version: "example.dev/v1".to_owned(),
            kind: None,
            current: "status.(".to_owned(),
            in_progress: None,
            failed: None,
        }];
        let err = WaitOptions::new(Duration::ZERO)
            .with_strategy(None, &checks)
            .map_err(WaitError::from)
            .expect_err("does not parse");
        assert!(!err.is_transient());
        assert_eq!(err.kind(), "invalid_health_check");
    }
}
