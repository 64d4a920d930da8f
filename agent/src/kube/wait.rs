//! Watch-driven waits: until a set of objects is ready (kstatus `Current`), or gone.
//!
//! One watch per resource type and namespace (narrowed to the name when it holds one object)
//! feeds every change to a status computation; nothing polls. A wait ends at the first
//! `Failed` object, when every object is satisfied, or at the deadline, with an error naming
//! each object still waited for and why.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::ControlFlow;
use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt as _};
use tokio::time::Instant;

use super::status::{self, JobRule, Status, StatusResult};
use super::{ClusterApi, ObjectRef, Resource};

/// How to wait for readiness.
#[derive(Clone, Debug)]
pub struct WaitOptions {
    /// How long to wait in all.
    pub timeout: Duration,
    /// Wait for Jobs to complete (Helm's `--wait-for-jobs`; Flux's `disableWaitForJobs:
    /// false`). When false, a Job counts as ready once it has started (kstatus's rule).
    pub wait_for_jobs: bool,
}

impl WaitOptions {
    /// Waits up to `timeout`, Jobs included (Flux's default).
    pub fn new(timeout: Duration) -> WaitOptions {
        WaitOptions {
            timeout,
            wait_for_jobs: true,
        }
    }
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
}

impl WaitError {
    /// A short, bounded name for the failure (a metric label).
    pub fn kind(&self) -> &'static str {
        match self {
            WaitError::Failed(_) => "failed",
            WaitError::Timeout(_) => "timeout",
            WaitError::DeletionTimeout(_) => "deletion_timeout",
        }
    }

    /// Whether waiting longer may help (a timeout), as opposed to a failed object.
    pub fn is_transient(&self) -> bool {
        !matches!(self, WaitError::Failed(_))
    }

    /// The objects the wait ended without.
    pub fn not_ready(&self) -> &[NotReady] {
        match self {
            WaitError::Failed(one) => std::slice::from_ref(one),
            WaitError::Timeout(all) | WaitError::DeletionTimeout(all) => all,
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
    match serde_json::to_value(obj) {
        Ok(mut json) => {
            if let Some(map) = json.as_object_mut() {
                map.entry("apiVersion")
                    .or_insert_with(|| target.api_resource.api_version.clone().into());
                map.entry("kind")
                    .or_insert_with(|| target.api_resource.kind.clone().into());
            }
            status::compute(&json, jobs)
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
        let jobs = if options.wait_for_jobs {
            JobRule::Complete
        } else {
            JobRule::Started
        };
        let deadline = Instant::now() + options.timeout;
        // Objects already `Current` as the API server returned them (the apply response:
        // ConfigMaps, Services, RBAC, unchanged workloads) need no watch; only the others
        // are watched. A stale "failed" in a response is not trusted: those are watched.
        let mut states: Vec<StatusResult> = Vec::with_capacity(targets.len());
        let mut watched: Vec<Resource> = Vec::new();
        let mut index: Vec<usize> = Vec::new();
        for (i, target) in targets.iter().enumerate() {
            let state = object_status(&target.object, target, jobs);
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
                Observation::Present(obj) => object_status(obj, &targets[i], jobs),
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
