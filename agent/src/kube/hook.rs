//! Running one Helm hook: delete the previous object (`before-hook-creation`), create the
//! hook, watch it until a Job completes or fails or a Pod succeeds or fails (every other kind
//! is done once created), record the times and phase, and apply the delete policies.
//!
//! Ordering hooks by weight and event, and persisting `last_run` in the release record, is
//! the caller's part.
//!
//! A failed Pod hook, or the pods of a failed Job hook, come back with their log
//! ([`HookRun::logs`]), in Helm v4's form (`helm test --logs`: `POD LOGS: <pod>` and what
//! its containers printed), for the failure message and Event. Each pod's log is cut to
//! its last [`POD_LOG_CAP`] bytes. A log that cannot be read says so in Helm's words
//! (`unable to get pod logs for <pod>: <why>`). What a log holds is what the pod printed,
//! no more: it reaches whoever reads the HelmRelease's status and Events, so a chart whose
//! hook prints a Secret's value shows it there as `kubectl logs` would; the agent adds
//! nothing of its own to it and never writes it to its own log.

use std::ops::ControlFlow;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::api::{
    DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams,
};
use kube::core::ApiResource;
use serde_json::Value;
use tokio::time::Instant;

use super::apply::{HelmReleaseRef, with_owner_labels};
use super::wait::{Observation, WaitError, watch_objects};
use super::{
    ApiFailure, ClusterApi, FIELD_MANAGER, HOOK_DELETE_POLICY_ANNOTATION, ObjectRef, Resource,
};

/// Most bytes of one pod's log kept for a failure message: the end of the log, where the
/// error usually is. Helm copies the whole log; a HelmRelease condition message holds at most
/// 32768 bytes (Flux's and our limit) and must keep room for Flux's text, Helm's debug log
/// and more than one pod, so 4 KiB: about fifty lines of a stack trace or a script's output.
pub const POD_LOG_CAP: usize = 4096;

/// Lines asked of the API server per container (`tailLines`), so a long log is not read
/// whole to keep its end: more than [`POD_LOG_CAP`] lines are more than the cap's bytes.
const POD_LOG_TAIL_LINES: i64 = POD_LOG_CAP as i64 + 1;

/// Room for the line saying the log was cut, within [`POD_LOG_CAP`].
const CUT_NOTE_ROOM: usize = 64;

/// The line before a cut log's end.
pub const CUT_NOTE: &str = "[earlier output not shown]";

/// A hook delete policy (`helm.sh/hook-delete-policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookDeletePolicy {
    /// Delete the previous object before creating the hook (the default).
    BeforeHookCreation,
    /// Delete the hook once it succeeded.
    HookSucceeded,
    /// Delete the hook once it failed.
    HookFailed,
}

impl HookDeletePolicy {
    /// Parses the annotation's comma-separated list (trimmed, any case); unknown entries are
    /// ignored, as Helm ignores them.
    pub fn parse_list(value: &str) -> Vec<HookDeletePolicy> {
        value
            .split(',')
            .filter_map(|p| match p.trim().to_ascii_lowercase().as_str() {
                "before-hook-creation" => Some(HookDeletePolicy::BeforeHookCreation),
                "hook-succeeded" => Some(HookDeletePolicy::HookSucceeded),
                "hook-failed" => Some(HookDeletePolicy::HookFailed),
                _ => None,
            })
            .collect()
    }

    /// Helm's name for the policy.
    pub fn as_str(self) -> &'static str {
        match self {
            HookDeletePolicy::BeforeHookCreation => "before-hook-creation",
            HookDeletePolicy::HookSucceeded => "hook-succeeded",
            HookDeletePolicy::HookFailed => "hook-failed",
        }
    }
}

/// A hook run's phase (Helm's `HookPhase`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookPhase {
    /// Not known.
    Unknown,
    /// Created, not finished.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Finished unsuccessfully (or timed out).
    Failed,
}

impl HookPhase {
    /// Helm's name for the phase, as stored in the release record.
    pub fn as_str(self) -> &'static str {
        match self {
            HookPhase::Unknown => "Unknown",
            HookPhase::Running => "Running",
            HookPhase::Succeeded => "Succeeded",
            HookPhase::Failed => "Failed",
        }
    }
}

/// How to run a hook.
#[derive(Clone, Debug)]
pub struct HookOptions {
    /// How long the hook may take to finish (Helm's per-hook `--timeout`); also bounds the
    /// deletions the policies ask for.
    pub timeout: Duration,
    /// Delete policies; `None` reads them from the object's annotation. Empty means
    /// `before-hook-creation`, as in Helm.
    pub delete_policies: Option<Vec<HookDeletePolicy>>,
    /// The owning HelmRelease; its labels go on the hook object.
    pub owner: Option<HelmReleaseRef>,
    /// Leave `hook-succeeded` deletion to the caller ([`ClusterApi::delete_hook`]): Helm
    /// deletes succeeded hooks only once every hook of the event succeeded.
    pub defer_succeeded_deletion: bool,
    /// The field manager.
    pub field_manager: String,
    /// Create the hook with a server-side apply (true, the default) or a plain create
    /// (Helm 4 creates hooks as the action applies: client-side for a `csa` release).
    pub server_side: bool,
}

impl HookOptions {
    /// Options with a timeout, policies from the annotation, no owner.
    pub fn new(timeout: Duration) -> HookOptions {
        HookOptions {
            timeout,
            delete_policies: None,
            owner: None,
            defer_succeeded_deletion: false,
            field_manager: FIELD_MANAGER.to_owned(),
            server_side: true,
        }
    }
}

/// What running a hook did (Helm's `last_run` plus details).
#[derive(Clone, Debug)]
pub struct HookRun {
    /// The hook object.
    pub object: ObjectRef,
    /// When it was created.
    pub started_at: Timestamp,
    /// When it finished (also set when it failed).
    pub completed_at: Option<Timestamp>,
    /// How it ended.
    pub phase: HookPhase,
    /// Why it failed: the Job's or Pod's reason, the failed container's reason and message.
    pub failure: Option<String>,
    /// Whether it failed by not finishing in time (rather than by failing).
    pub timed_out: bool,
    /// Whether a delete policy removed it afterwards.
    pub deleted: bool,
    /// For a failed Pod hook, or Job hook with pods: their logs, each `POD LOGS: <pod>`
    /// then what it printed (at most [`POD_LOG_CAP`] bytes of it), blank-line separated.
    pub logs: Option<String>,
}

/// Errors running a hook (a hook that runs and fails is not an error: see [`HookRun`]).
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The previous object could not be deleted.
    #[error("{object}: deleting the previous hook object")]
    DeletePrevious {
        /// The hook.
        object: ObjectRef,
        /// The API server's answer.
        #[source]
        source: ApiFailure,
    },
    /// The previous object was not gone in time.
    #[error("{object}: waiting for the previous hook object to be gone")]
    PreviousNotGone {
        /// The hook.
        object: ObjectRef,
        /// What the wait saw.
        #[source]
        source: WaitError,
    },
    /// The hook could not be created.
    #[error("{object}{}: creating the hook", .source_name.as_deref().map(|s| format!(" (from {s})")).unwrap_or_default())]
    Create {
        /// The hook.
        object: ObjectRef,
        /// Its template.
        source_name: Option<String>,
        /// The API server's answer.
        #[source]
        source: ApiFailure,
    },
    /// A delete policy could not be applied.
    #[error("{object}: deleting the hook ({policy})")]
    Delete {
        /// The hook.
        object: ObjectRef,
        /// The policy being applied.
        policy: &'static str,
        /// The API server's answer.
        #[source]
        source: ApiFailure,
    },
}

impl HookError {
    /// A short, bounded name for the failure (a metric label).
    pub fn kind(&self) -> &'static str {
        match self {
            HookError::DeletePrevious { .. } => "delete_previous",
            HookError::PreviousNotGone { .. } => "previous_not_gone",
            HookError::Create { .. } => "create",
            HookError::Delete { .. } => "delete",
        }
    }

    /// Whether retrying later may help.
    pub fn is_transient(&self) -> bool {
        match self {
            HookError::DeletePrevious { source, .. }
            | HookError::Create { source, .. }
            | HookError::Delete { source, .. } => source.is_transient(),
            HookError::PreviousNotGone { .. } => true,
        }
    }
}

/// How a watched hook stands.
enum Outcome {
    Running,
    Succeeded,
    Failed(String),
}

fn conditions_true<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == "True")
}

fn reason_message(v: &Value) -> String {
    let reason = v["reason"].as_str().unwrap_or("");
    let message = v["message"].as_str().unwrap_or("");
    match (reason.is_empty(), message.is_empty()) {
        (false, false) => format!("{reason}: {message}"),
        (false, true) => reason.to_owned(),
        (true, false) => message.to_owned(),
        (true, true) => String::new(),
    }
}

fn judge(kind: &str, obj: &DynamicObject) -> Outcome {
    let Ok(json) = serde_json::to_value(obj) else {
        return Outcome::Running;
    };
    match kind {
        "Job" => {
            if conditions_true(&json, "Complete").is_some() {
                Outcome::Succeeded
            } else if let Some(c) = conditions_true(&json, "Failed") {
                Outcome::Failed(reason_message(c))
            } else {
                Outcome::Running
            }
        }
        "Pod" => match json.pointer("/status/phase").and_then(Value::as_str) {
            Some("Succeeded") => Outcome::Succeeded,
            Some("Failed") => Outcome::Failed(pod_failure(&json)),
            _ => Outcome::Running,
        },
        _ => Outcome::Succeeded,
    }
}

/// Why a pod failed: the first container (init containers first) that terminated with a
/// non-zero code or is stuck waiting, else the pod's own reason.
pub fn pod_failure(pod: &Value) -> String {
    let statuses = ["initContainerStatuses", "containerStatuses"]
        .iter()
        .filter_map(|k| {
            pod.pointer(&format!("/status/{k}"))
                .and_then(Value::as_array)
        })
        .flatten();
    for cs in statuses {
        let name = cs["name"].as_str().unwrap_or("?");
        let state = &cs["state"];
        if let Some(t) = state.get("terminated")
            && t["exitCode"].as_i64().unwrap_or(0) != 0
        {
            let mut out = format!(
                "container {name:?} terminated: {} (exit code {})",
                t["reason"].as_str().unwrap_or("Error"),
                t["exitCode"].as_i64().unwrap_or(0)
            );
            if let Some(m) = t["message"].as_str().filter(|m| !m.is_empty()) {
                out.push_str(": ");
                out.push_str(m.trim());
            }
            return out;
        }
        if let Some(w) = state.get("waiting")
            && w["reason"]
                .as_str()
                .is_some_and(|r| r != "ContainerCreating" && r != "PodInitializing")
        {
            return format!("container {name:?} waiting: {}", reason_message(w));
        }
    }
    let own = reason_message(&pod["status"]);
    if own.is_empty() {
        "pod failed".to_owned()
    } else {
        own
    }
}

impl ClusterApi {
    /// Runs one hook object (resolved, namespace defaulted) and reports how it went.
    ///
    /// Errors are for what stops the hook from running at all (creation refused, previous
    /// object not deletable); a hook that runs and fails, or times out, comes back as
    /// [`HookPhase::Failed`] with the reason.
    pub async fn run_hook(
        &self,
        hook: &Resource,
        options: &HookOptions,
    ) -> Result<HookRun, HookError> {
        let object = hook.object_ref();
        let mut policies = options.delete_policies.clone().unwrap_or_else(|| {
            hook.annotation(HOOK_DELETE_POLICY_ANNOTATION)
                .map(HookDeletePolicy::parse_list)
                .unwrap_or_default()
        });
        if policies.is_empty() {
            policies.push(HookDeletePolicy::BeforeHookCreation);
        }
        let name = hook.name();
        if policies.contains(&HookDeletePolicy::BeforeHookCreation) && !name.is_empty() {
            self.delete_hook_object(hook)
                .await
                .map_err(|source| HookError::DeletePrevious {
                    object: object.clone(),
                    source,
                })?;
            self.wait_deleted(std::slice::from_ref(hook), options.timeout)
                .await
                .map_err(|source| HookError::PreviousNotGone {
                    object: object.clone(),
                    source,
                })?;
        }

        let started_at = Timestamp::now();
        let desired = with_owner_labels(&hook.object, options.owner.as_ref());
        let api = hook.api(&self.client);
        let created = if name.is_empty() {
            api.create(&PostParams::default(), &desired).await
        } else if !options.server_side {
            let params = PostParams {
                field_manager: Some(options.field_manager.clone()),
                ..PostParams::default()
            };
            api.create(&params, &desired).await
        } else {
            // Strict field validation, as Helm 4 creates hooks (`kube.Client.Create`'s default).
            let params = PatchParams::apply(&options.field_manager)
                .force()
                .validation_strict();
            api.patch(&name, &params, &Patch::Apply(&desired)).await
        }
        .map_err(|e| HookError::Create {
            object: object.clone(),
            source_name: hook.source.clone(),
            source: ApiFailure(e),
        })?;
        let mut running = hook.clone();
        running.object = created;
        if running.object.types.is_none() {
            running.object.types = hook.object.types.clone();
        }
        let object = running.object_ref();

        let (phase, failure, timed_out) = self.watch_hook(&running, options.timeout).await;
        tracing::debug!(hook = %object, phase = phase.as_str(), "hook finished");
        let completed_at = Some(Timestamp::now());
        // Before any delete policy removes the pods, as Helm outputs them.
        let logs = if phase == HookPhase::Failed {
            self.hook_logs(&running).await
        } else {
            None
        };
        let mut run = HookRun {
            object,
            started_at,
            completed_at,
            phase,
            failure,
            timed_out,
            deleted: false,
            logs,
        };
        let (policy, wanted) = match phase {
            HookPhase::Failed => (
                HookDeletePolicy::HookFailed,
                policies.contains(&HookDeletePolicy::HookFailed),
            ),
            _ => (
                HookDeletePolicy::HookSucceeded,
                policies.contains(&HookDeletePolicy::HookSucceeded)
                    && !options.defer_succeeded_deletion,
            ),
        };
        if wanted && hook.kind() != "CustomResourceDefinition" {
            self.delete_hook_object(&running)
                .await
                .map_err(|source| HookError::Delete {
                    object: run.object.clone(),
                    policy: policy.as_str(),
                    source,
                })?;
            run.deleted = true;
        }
        Ok(run)
    }

    /// Deletes a hook object (background propagation; gone already is fine). CRD hooks are
    /// never deleted, as in Helm. Returns whether a delete request was made.
    pub async fn delete_hook(&self, hook: &Resource) -> Result<bool, HookError> {
        if hook.kind() == "CustomResourceDefinition" {
            return Ok(false);
        }
        self.delete_hook_object(hook)
            .await
            .map_err(|source| HookError::Delete {
                object: hook.object_ref(),
                policy: HookDeletePolicy::HookSucceeded.as_str(),
                source,
            })?;
        Ok(true)
    }

    async fn delete_hook_object(&self, hook: &Resource) -> Result<(), ApiFailure> {
        match hook
            .api(&self.client)
            .delete(&hook.name(), &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(ApiFailure(e)),
        }
    }

    /// How the hook ended, why it failed, and whether by not finishing in time.
    async fn watch_hook(
        &self,
        hook: &Resource,
        timeout: Duration,
    ) -> (HookPhase, Option<String>, bool) {
        let kind = hook.kind().to_owned();
        if kind != "Job" && kind != "Pod" {
            return (HookPhase::Succeeded, None, false);
        }
        let mut outcome = Outcome::Running;
        let mut last = String::from("not observed yet");
        let finished = watch_objects(
            &self.client,
            std::slice::from_ref(hook),
            Instant::now() + timeout,
            |_, obs| {
                match obs {
                    Observation::Present(obj) => {
                        outcome = judge(&kind, obj);
                        last = describe_running(&kind, obj);
                    }
                    Observation::Gone => {
                        outcome = Outcome::Failed("deleted before it finished".to_owned());
                    }
                    Observation::WatchFailed(message) => last = message,
                }
                match outcome {
                    Outcome::Running => ControlFlow::Continue(()),
                    _ => ControlFlow::Break(()),
                }
            },
        )
        .await;
        match outcome {
            Outcome::Succeeded => (HookPhase::Succeeded, None, false),
            Outcome::Failed(why) => {
                let mut why = if why.is_empty() {
                    "failed".to_owned()
                } else {
                    why
                };
                if kind == "Job"
                    && let Some(pod) = self.failed_job_pod(hook).await
                {
                    why = format!("{why}; {pod}");
                }
                (HookPhase::Failed, Some(why), false)
            }
            Outcome::Running if !finished => (
                HookPhase::Failed,
                Some(format!(
                    "timed out after {timeout:?} waiting for it to finish: {last}"
                )),
                true,
            ),
            Outcome::Running => (HookPhase::Unknown, None, false),
        }
    }

    /// The logs of a failed hook's pods: the Pod itself, or every pod of a Job (Helm's
    /// `job-name` pods, found here by the Job's uid so an earlier Job's are not taken).
    async fn hook_logs(&self, hook: &Resource) -> Option<String> {
        let ns = hook.namespace()?;
        let pods: Vec<Value> = match hook.kind() {
            "Pod" => vec![serde_json::to_value(&hook.object).ok()?],
            "Job" => self
                .job_pods(hook)
                .await?
                .iter()
                .filter_map(|p| serde_json::to_value(p).ok())
                .collect(),
            _ => return None,
        };
        let mut blocks = Vec::new();
        for pod in &pods {
            let Some(name) = pod.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            let containers: Vec<&str> = pod
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map(|cs| cs.iter().filter_map(|c| c["name"].as_str()).collect())
                .unwrap_or_default();
            blocks.push(self.pod_log(ns, name, &containers).await);
        }
        (!blocks.is_empty()).then(|| blocks.join("\n\n"))
    }

    /// One pod's log as Helm prints it: `POD LOGS: <pod>`, then what each container printed
    /// (in order, as Helm's hook output copies them one after the other), cut to its end.
    async fn pod_log(&self, namespace: &str, pod: &str, containers: &[&str]) -> String {
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.client.clone(), namespace);
        let mut text = Vec::new();
        for container in containers {
            let params = LogParams {
                container: Some((*container).to_owned()),
                tail_lines: Some(POD_LOG_TAIL_LINES),
                ..LogParams::default()
            };
            if let Err(e) = read_tail(&api, pod, &params, &mut text).await {
                // Helm's words: the API server's own message, as client-go hands it over
                // (no HTTP code after it).
                let why = match e {
                    kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
                    e => super::error_chain(&ApiFailure(e)),
                };
                return format!("POD LOGS: {pod}\nunable to get pod logs for {pod}: {why}");
            }
        }
        let text = String::from_utf8_lossy(&text);
        format!("POD LOGS: {pod}\n{}", cut_log(&text).trim_end_matches('\n'))
    }

    /// The pods of a Job (by its uid label).
    async fn job_pods(&self, job: &Resource) -> Option<Vec<DynamicObject>> {
        let ns = job.namespace()?;
        let uid = job.object.metadata.uid.as_deref()?;
        let pods: kube::Api<DynamicObject> =
            kube::Api::namespaced_with(self.client.clone(), ns, &pod_resource());
        let selector = format!("batch.kubernetes.io/controller-uid={uid}");
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .ok()?;
        Some(list.items)
    }

    /// The failure of a failed pod of a Job (found by the Job's uid label, so pods of an
    /// earlier Job of the same name are not mistaken for it), when one can be found.
    async fn failed_job_pod(&self, job: &Resource) -> Option<String> {
        let pods = self.job_pods(job).await?;
        pods.iter().find_map(|p| {
            let json = serde_json::to_value(p).ok()?;
            (json.pointer("/status/phase") == Some(&Value::from("Failed")))
                .then(|| format!("pod {}: {}", p.name_any(), pod_failure(&json)))
        })
    }
}

fn pod_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".to_owned(),
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        plural: "pods".to_owned(),
    }
}

/// Appends a container's log to `out`, keeping at most twice [`POD_LOG_CAP`] bytes of its
/// end in memory (enough for [`cut_log`] to see that it is longer than the cap).
async fn read_tail(
    api: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    pod: &str,
    params: &LogParams,
    out: &mut Vec<u8>,
) -> Result<(), kube::Error> {
    use futures::AsyncReadExt as _;
    let mut stream = Box::pin(api.log_stream(pod, params).await?);
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(kube::Error::ReadEvents)?;
        if n == 0 {
            return Ok(());
        }
        out.extend_from_slice(&chunk[..n]);
        if out.len() > 2 * POD_LOG_CAP {
            out.drain(..out.len() - 2 * POD_LOG_CAP);
        }
    }
}

/// A log cut to at most [`POD_LOG_CAP`] bytes: its end, from the first whole line, after
/// [`CUT_NOTE`]. A log within the cap is returned as it is.
pub fn cut_log(log: &str) -> String {
    if log.len() <= POD_LOG_CAP {
        return log.to_owned();
    }
    let mut start = log.len() - (POD_LOG_CAP - CUT_NOTE_ROOM);
    while !log.is_char_boundary(start) {
        start += 1;
    }
    if let Some(nl) = log[start..].find('\n')
        && start + nl + 1 < log.len()
    {
        start += nl + 1;
    }
    format!("{CUT_NOTE}\n{}", &log[start..])
}

fn describe_running(kind: &str, obj: &DynamicObject) -> String {
    let Ok(json) = serde_json::to_value(obj) else {
        return String::new();
    };
    match kind {
        "Job" => format!(
            "{} active, {} succeeded, {} failed",
            json.pointer("/status/active")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            json.pointer("/status/succeeded")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            json.pointer("/status/failed")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        ),
        _ => format!(
            "phase {}",
            json.pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_within_the_cap_is_kept_whole_and_a_longer_one_keeps_its_end_from_a_whole_line() {
        let short = "one\ntwo\n";
        assert_eq!(cut_log(short), short);
        let exact = "x".repeat(POD_LOG_CAP);
        assert_eq!(cut_log(&exact), exact);

        let long: String = (0..1000).map(|i| format!("line {i:04}\n")).collect();
        let cut = cut_log(&long);
        assert!(cut.len() <= POD_LOG_CAP, "{} bytes", cut.len());
        assert!(cut.ends_with("line 0999\n"), "the end is kept");
        let (note, rest) = cut.split_once('\n').expect("a note line");
        assert!(rest.starts_with("line "), "from a whole line: {rest:.20}");
        assert!(long.ends_with(rest));
        assert_eq!(note, CUT_NOTE);
    }

    #[test]
    fn a_long_log_without_newlines_or_with_multibyte_text_is_cut_on_a_character_boundary() {
        let long = "é".repeat(POD_LOG_CAP);
        let cut = cut_log(&long);
        assert!(cut.len() <= POD_LOG_CAP);
        assert!(cut.ends_with('é'));
    }
}
