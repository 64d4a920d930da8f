//! Readiness: kstatus's status computation (the rules Helm 4's `watcher` wait and Flux use),
//! on the JSON form of an object. Pure: no cluster, no clock unless asked for.
//!
//! Order of the rules: deletion timestamp ⇒ `Terminating`; an observed generation behind the
//! generation ⇒ `InProgress`; `Reconciling=True` ⇒ `InProgress`; `Stalled=True` ⇒ `Failed`;
//! then the kind's own rule; then, for kinds without one, a `Ready` condition; else `Current`.

use std::fmt;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// A kstatus status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Reconciled and ready.
    Current,
    /// Still being reconciled.
    InProgress,
    /// Reconciliation failed and will not recover by waiting.
    Failed,
    /// Being deleted.
    Terminating,
    /// The object does not exist.
    NotFound,
    /// Not observed yet, or its status cannot be computed.
    Unknown,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Current => "Current",
            Status::InProgress => "InProgress",
            Status::Failed => "Failed",
            Status::Terminating => "Terminating",
            Status::NotFound => "NotFound",
            Status::Unknown => "Unknown",
        })
    }
}

/// A status and the reason for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusResult {
    /// The status.
    pub status: Status,
    /// Why, for people (`Available: 0/1 replicas`).
    pub message: String,
}

impl StatusResult {
    fn new(status: Status, message: impl Into<String>) -> StatusResult {
        StatusResult {
            status,
            message: message.into(),
        }
    }

    fn current(message: impl Into<String>) -> StatusResult {
        StatusResult::new(Status::Current, message)
    }

    fn in_progress(message: impl Into<String>) -> StatusResult {
        StatusResult::new(Status::InProgress, message)
    }

    fn failed(message: impl Into<String>) -> StatusResult {
        StatusResult::new(Status::Failed, message)
    }

    /// A not-found result.
    pub fn not_found() -> StatusResult {
        StatusResult::new(Status::NotFound, "not found")
    }

    /// Whether this is `Current`.
    pub fn is_current(&self) -> bool {
        self.status == Status::Current
    }
}

/// How Jobs are judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum JobRule {
    /// kstatus: a Job that has started is `Current`, a failed one `Failed`.
    #[default]
    Started,
    /// Helm's `--wait-for-jobs` reader: `Current` only once `Complete=True`.
    Complete,
}

/// How long a pod may stay unschedulable before it counts as `Failed`.
pub const SCHEDULE_WINDOW_SECONDS: i64 = 15;

/// The status of an object (its JSON form, with `apiVersion` and `kind`), now.
pub fn compute(obj: &Value, jobs: JobRule) -> StatusResult {
    compute_at(obj, jobs, Timestamp::now())
}

/// [`compute`] with the current time given (for the pod scheduling window).
pub fn compute_at(obj: &Value, jobs: JobRule, now: Timestamp) -> StatusResult {
    if let Some(res) = generic(obj) {
        return res;
    }
    let group = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.rsplit_once('/').map(|(g, _)| g))
        .unwrap_or("");
    let kind = str_at(obj, &["kind"]).unwrap_or("");
    match (group, kind) {
        ("", "Service") => service(obj),
        ("", "Pod") => pod(obj, now),
        ("", "Secret" | "ConfigMap") | ("batch", "CronJob") => {
            StatusResult::current("always ready")
        }
        ("", "PersistentVolumeClaim") => pvc(obj),
        ("apps", "StatefulSet") => stateful_set(obj),
        ("apps" | "extensions", "DaemonSet") => daemon_set(obj),
        ("apps" | "extensions", "Deployment") => deployment(obj),
        ("apps" | "extensions", "ReplicaSet") => replica_set(obj),
        ("policy", "PodDisruptionBudget") => {
            StatusResult::current("allowed disruptions have been computed")
        }
        ("batch", "Job") => match jobs {
            JobRule::Started => job(obj),
            JobRule::Complete => job_complete(obj),
        },
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(obj),
        _ => ready_condition(obj).unwrap_or_else(|| StatusResult::current("resource is current")),
    }
}

/// The status by Helm's legacy ready checker (`waitStrategy: legacy`, Helm 3's `--wait`):
/// the kinds it knows are judged by their rule above, kinds it does not know (custom
/// resources, no `Ready` condition looked at) are ready as they are, and only a failed
/// Job is `Failed` (the legacy checker polls the others until the deadline).
pub fn compute_legacy(obj: &Value, jobs: JobRule) -> StatusResult {
    let group = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.rsplit_once('/').map(|(g, _)| g))
        .unwrap_or("");
    let kind = str_at(obj, &["kind"]).unwrap_or("");
    let known = matches!(
        (group, kind),
        (
            "",
            "Service" | "Pod" | "PersistentVolumeClaim" | "ReplicationController"
        ) | ("apps", "StatefulSet")
            | (
                "apps" | "extensions",
                "DaemonSet" | "Deployment" | "ReplicaSet"
            )
            | ("batch", "Job")
            | ("apiextensions.k8s.io", "CustomResourceDefinition")
    );
    if !known {
        return StatusResult::current("legacy wait: kind without a readiness rule");
    }
    let result = compute(obj, jobs);
    if result.status == Status::Failed && !(group == "batch" && kind == "Job") {
        return StatusResult::in_progress(result.message);
    }
    result
}

fn at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, key| v.get(*key))
}

fn str_at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(obj, path).and_then(Value::as_str)
}

fn int_at(obj: &Value, path: &[&str]) -> Option<i64> {
    at(obj, path).and_then(|v| {
        v.as_i64()
            .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
    })
}

fn int_or(obj: &Value, path: &[&str], default: i64) -> i64 {
    int_at(obj, path).unwrap_or(default)
}

/// One entry of `status.conditions`.
#[derive(Debug, Clone, Copy)]
struct Condition<'a> {
    type_: &'a str,
    status: &'a str,
    reason: &'a str,
    message: &'a str,
}

fn conditions(obj: &Value) -> Vec<Condition<'_>> {
    at(obj, &["status", "conditions"])
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|c| {
                    Some(Condition {
                        type_: c.get("type")?.as_str()?,
                        status: c.get("status").and_then(Value::as_str).unwrap_or(""),
                        reason: c.get("reason").and_then(Value::as_str).unwrap_or(""),
                        message: c.get("message").and_then(Value::as_str).unwrap_or(""),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<Condition<'a>> {
    conditions(obj).into_iter().find(|c| c.type_ == type_)
}

fn has_condition(obj: &Value, type_: &str, status: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c.status == status)
}

fn reason_and_message(c: &Condition<'_>) -> String {
    match (c.reason.is_empty(), c.message.is_empty()) {
        (false, false) => format!("{}: {}", c.reason, c.message),
        (false, true) => c.reason.to_owned(),
        (true, false) => c.message.to_owned(),
        (true, true) => format!("{}={}", c.type_, c.status),
    }
}

fn generic(obj: &Value) -> Option<StatusResult> {
    if str_at(obj, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_empty()) {
        return Some(StatusResult::new(
            Status::Terminating,
            "resource scheduled for deletion",
        ));
    }
    if let (Some(generation), Some(observed)) = (
        int_at(obj, &["metadata", "generation"]),
        int_at(obj, &["status", "observedGeneration"]),
    ) && generation != observed
    {
        return Some(StatusResult::in_progress(format!(
            "generation is {generation}, but latest observed generation is {observed}"
        )));
    }
    for c in conditions(obj) {
        if c.type_ == "Reconciling" && c.status == "True" {
            return Some(StatusResult::in_progress(reason_and_message(&c)));
        }
        if c.type_ == "Stalled" && c.status == "True" {
            return Some(StatusResult::failed(reason_and_message(&c)));
        }
    }
    None
}

fn ready_condition(obj: &Value) -> Option<StatusResult> {
    let c = condition(obj, "Ready")?;
    Some(if c.status == "True" {
        StatusResult::current("Ready")
    } else {
        StatusResult::in_progress(format!("not Ready: {}", reason_and_message(&c)))
    })
}

fn deployment(obj: &Value) -> StatusResult {
    // Without a progress deadline the controller never reports progress: count it as done.
    let mut progressing =
        int_at(obj, &["spec", "progressDeadlineSeconds"]).is_none_or(|d| d == i64::from(i32::MAX));
    let mut available = false;
    for c in conditions(obj) {
        match c.type_ {
            "Progressing" if c.reason == "ProgressDeadlineExceeded" => {
                return StatusResult::failed(format!("progress deadline exceeded: {}", c.message));
            }
            "Progressing" if c.status == "True" && c.reason == "NewReplicaSetAvailable" => {
                progressing = true;
            }
            "Available" if c.status == "True" => available = true,
            _ => {}
        }
    }
    let spec = int_or(obj, &["spec", "replicas"], 1);
    let replicas = int_or(obj, &["status", "replicas"], 0);
    let updated = int_or(obj, &["status", "updatedReplicas"], 0);
    let ready = int_or(obj, &["status", "readyReplicas"], 0);
    let avail = int_or(obj, &["status", "availableReplicas"], 0);
    if spec > replicas {
        return StatusResult::in_progress(format!("Replicas: {replicas}/{spec} replicas"));
    }
    if spec > updated {
        return StatusResult::in_progress(format!("Updated: {updated}/{spec} replicas"));
    }
    if replicas > spec {
        return StatusResult::in_progress(format!(
            "Pending termination: {} replicas",
            replicas - spec
        ));
    }
    if updated > avail {
        return StatusResult::in_progress(format!("Available: {avail}/{updated} replicas"));
    }
    if spec > ready {
        return StatusResult::in_progress(format!("Ready: {ready}/{spec} replicas"));
    }
    if !progressing {
        return StatusResult::in_progress("new ReplicaSet not available yet");
    }
    if !available {
        return StatusResult::in_progress("Deployment not Available");
    }
    StatusResult::current(format!("Deployment is available: {replicas} replicas"))
}

fn replica_set(obj: &Value) -> StatusResult {
    if has_condition(obj, "ReplicaFailure", "True") {
        return StatusResult::in_progress("replica failure: check the pods");
    }
    let spec = int_or(obj, &["spec", "replicas"], 1);
    let replicas = int_or(obj, &["status", "replicas"], 0);
    let ready = int_or(obj, &["status", "readyReplicas"], 0);
    let avail = int_or(obj, &["status", "availableReplicas"], 0);
    let labelled = int_or(obj, &["status", "fullyLabeledReplicas"], 0);
    if spec > labelled {
        return StatusResult::in_progress(format!("Labelled: {labelled}/{spec} replicas"));
    }
    if spec > avail {
        return StatusResult::in_progress(format!("Available: {avail}/{spec} replicas"));
    }
    if spec > ready {
        return StatusResult::in_progress(format!("Ready: {ready}/{spec} replicas"));
    }
    if replicas > spec {
        return StatusResult::in_progress(format!(
            "Pending termination: {} replicas",
            replicas - spec
        ));
    }
    StatusResult::current(format!("ReplicaSet is available: {replicas} replicas"))
}

fn stateful_set(obj: &Value) -> StatusResult {
    if str_at(obj, &["spec", "updateStrategy", "type"]) == Some("OnDelete") {
        return StatusResult::current("StatefulSet uses the OnDelete update strategy");
    }
    let spec = int_or(obj, &["spec", "replicas"], 1);
    let ready = int_or(obj, &["status", "readyReplicas"], 0);
    let current = int_or(obj, &["status", "currentReplicas"], 0);
    let updated = int_or(obj, &["status", "updatedReplicas"], 0);
    let replicas = int_or(obj, &["status", "replicas"], 0);
    let partition = int_at(
        obj,
        &["spec", "updateStrategy", "rollingUpdate", "partition"],
    );
    if spec > replicas {
        return StatusResult::in_progress(format!("Replicas: {replicas}/{spec} replicas"));
    }
    if spec > ready {
        return StatusResult::in_progress(format!("Ready: {ready}/{spec} replicas"));
    }
    if replicas > spec {
        return StatusResult::in_progress(format!(
            "Pending termination: {} replicas",
            replicas - spec
        ));
    }
    if let Some(partition) = partition {
        if updated < spec - partition {
            return StatusResult::in_progress(format!(
                "partitioned rollout: updated {updated}/{} replicas",
                spec - partition
            ));
        }
        return StatusResult::current(format!("partitioned rollout complete: {updated} updated"));
    }
    if spec > current {
        return StatusResult::in_progress(format!("Current: {current}/{spec} replicas"));
    }
    if str_at(obj, &["status", "currentRevision"]) != str_at(obj, &["status", "updateRevision"]) {
        return StatusResult::in_progress("waiting for the update revision to become current");
    }
    StatusResult::current(format!(
        "all replicas scheduled as expected: {replicas} replicas"
    ))
}

fn daemon_set(obj: &Value) -> StatusResult {
    if int_at(obj, &["metadata", "generation"]).is_none() {
        return StatusResult::in_progress("DaemonSet metadata.generation not set");
    }
    if int_at(obj, &["status", "observedGeneration"]).is_none() {
        return StatusResult::in_progress("DaemonSet status.observedGeneration not set");
    }
    let Some(desired) = int_at(obj, &["status", "desiredNumberScheduled"]) else {
        return StatusResult::in_progress("status.desiredNumberScheduled not set");
    };
    let current = int_or(obj, &["status", "currentNumberScheduled"], 0);
    let updated = int_or(obj, &["status", "updatedNumberScheduled"], 0);
    let avail = int_or(obj, &["status", "numberAvailable"], 0);
    let ready = int_or(obj, &["status", "numberReady"], 0);
    if desired > current {
        return StatusResult::in_progress(format!("Current: {current}/{desired} pods"));
    }
    if desired > updated {
        return StatusResult::in_progress(format!("Updated: {updated}/{desired} pods"));
    }
    if desired > avail {
        return StatusResult::in_progress(format!("Available: {avail}/{desired} pods"));
    }
    if desired > ready {
        return StatusResult::in_progress(format!("Ready: {ready}/{desired} pods"));
    }
    StatusResult::current(format!("all pods scheduled as expected: {desired} pods"))
}

fn pvc(obj: &Value) -> StatusResult {
    match str_at(obj, &["status", "phase"]) {
        Some("Bound") => StatusResult::current("PVC is Bound"),
        phase => StatusResult::in_progress(format!(
            "PVC is not Bound: phase {}",
            phase.unwrap_or("unknown")
        )),
    }
}

fn pod(obj: &Value, now: Timestamp) -> StatusResult {
    match str_at(obj, &["status", "phase"]).unwrap_or("") {
        "Succeeded" => StatusResult::current("pod has completed successfully"),
        "Failed" => StatusResult::current("pod has completed, but not successfully"),
        "Running" => {
            if has_condition(obj, "Ready", "True") {
                return StatusResult::current("pod is Ready");
            }
            let crashing: Vec<&str> = at(obj, &["status", "containerStatuses"])
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|cs| {
                    str_at(cs, &["state", "waiting", "reason"]) == Some("CrashLoopBackOff")
                })
                .filter_map(|cs| cs.get("name").and_then(Value::as_str))
                .collect();
            if !crashing.is_empty() {
                return StatusResult::failed(format!(
                    "containers in CrashLoopBackOff: {}",
                    crashing.join(",")
                ));
            }
            match condition(obj, "Ready") {
                Some(c) if !c.message.is_empty() => StatusResult::in_progress(format!(
                    "pod is running but not Ready: {}",
                    c.message
                )),
                _ => StatusResult::in_progress("pod is running but not Ready"),
            }
        }
        "Pending" => {
            let unschedulable = condition(obj, "PodScheduled")
                .is_some_and(|c| c.status == "False" && c.reason == "Unschedulable");
            if !unschedulable {
                return StatusResult::in_progress("pod is Pending");
            }
            let created = str_at(obj, &["metadata", "creationTimestamp"])
                .and_then(|t| t.parse::<Timestamp>().ok());
            let within_window =
                created.is_some_and(|c| now.as_second() - c.as_second() < SCHEDULE_WINDOW_SECONDS);
            if within_window {
                StatusResult::in_progress("pod has not been scheduled yet")
            } else {
                let why = condition(obj, "PodScheduled")
                    .map(|c| c.message)
                    .unwrap_or("");
                StatusResult::failed(format!("pod could not be scheduled: {why}"))
            }
        }
        "" => StatusResult::in_progress("pod phase not available yet"),
        other => StatusResult::new(Status::Unknown, format!("unknown pod phase {other}")),
    }
}

fn job_counts(obj: &Value) -> (i64, i64, i64, i64) {
    let parallelism = int_or(obj, &["spec", "parallelism"], 1);
    (
        int_or(obj, &["spec", "completions"], parallelism),
        int_or(obj, &["status", "succeeded"], 0),
        int_or(obj, &["status", "active"], 0),
        int_or(obj, &["status", "failed"], 0),
    )
}

fn job_failed(obj: &Value) -> Option<StatusResult> {
    let c = condition(obj, "Failed").filter(|c| c.status == "True")?;
    let (completions, _, _, failed) = job_counts(obj);
    Some(StatusResult::failed(format!(
        "Job failed ({failed} failed, {completions} completions wanted): {}",
        reason_and_message(&c)
    )))
}

fn job(obj: &Value) -> StatusResult {
    let (completions, succeeded, active, failed) = job_counts(obj);
    if has_condition(obj, "Complete", "True") {
        return StatusResult::current(format!(
            "Job completed: {succeeded}/{completions} succeeded"
        ));
    }
    if let Some(res) = job_failed(obj) {
        return res;
    }
    if has_condition(obj, "Suspended", "True") {
        return StatusResult::current("Job is suspended");
    }
    if str_at(obj, &["status", "startTime"]).is_none_or(str::is_empty) {
        return StatusResult::in_progress("Job not started");
    }
    StatusResult::current(format!(
        "Job in progress: {succeeded} succeeded, {active} active, {failed} failed"
    ))
}

fn job_complete(obj: &Value) -> StatusResult {
    let (completions, succeeded, active, failed) = job_counts(obj);
    if has_condition(obj, "Complete", "True") {
        return StatusResult::current(format!(
            "Job completed: {succeeded}/{completions} succeeded"
        ));
    }
    if let Some(res) = job_failed(obj) {
        return res;
    }
    StatusResult::in_progress(format!(
        "Job not complete: {succeeded}/{completions} succeeded, {active} active, {failed} failed"
    ))
}

fn service(obj: &Value) -> StatusResult {
    if str_at(obj, &["spec", "type"]) != Some("LoadBalancer") {
        return StatusResult::current("Service is ready");
    }
    if str_at(obj, &["spec", "clusterIP"]).is_none_or(str::is_empty) {
        return StatusResult::in_progress("LoadBalancer Service has no cluster IP yet");
    }
    // Helm's own rule on top of kstatus's: a load balancer is ready once it has an address.
    let has = |path: &[&str]| {
        at(obj, path)
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    };
    if has(&["spec", "externalIPs"]) || has(&["status", "loadBalancer", "ingress"]) {
        StatusResult::current("Service is ready")
    } else {
        StatusResult::in_progress("LoadBalancer Service has no ingress address yet")
    }
}

fn crd(obj: &Value) -> StatusResult {
    for c in conditions(obj) {
        if c.type_ == "NamesAccepted" && c.status == "False" {
            return StatusResult::failed(reason_and_message(&c));
        }
        if c.type_ == "Established" {
            if c.status == "False" && c.reason != "Installing" {
                return StatusResult::failed(reason_and_message(&c));
            }
            if c.status == "True" {
                return StatusResult::current("CRD is established");
            }
        }
    }
    StatusResult::in_progress("CRD is not established yet")
}
