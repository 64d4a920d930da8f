//! What fails in an action ([`ActionError`]).
//!
//! An action's error becomes `Outcome.error`, which core puts into status conditions and
//! Events (`Helm upgrade failed for release default/web with chart web@1.0.0: <error>`) and
//! into the failed record's description (`Upgrade "web" failed: <error>`). So each
//! variant's `Display` is the whole message, in Helm's and Flux's words, the chain of the
//! error it wraps included; the wrapped error is kept (for [`ActionError::kind`] and
//! [`ActionError::is_transient`]) but not returned as `source()`, which would print it
//! twice.

use flotilla_chart::coalesce::CoalesceError;
use flotilla_chart::release::HookEvent;

use crate::kube::apply::ApplyError;
use crate::kube::delete::DeleteError;
use crate::kube::discovery::DiscoveryError;
use crate::kube::hook::HookError;
use crate::kube::manifest::ManifestError;
use crate::kube::status::Status;
use crate::kube::wait::{WaitError, waited_form};
use crate::kube::{ApiFailure, ObjectRef, error_chain};
use crate::reconcile::render::RenderError;
use crate::storage::StorageError;
use crate::storage::observation::RecordError;
use crate::storage::transitions::TransitionError;

/// Why an action failed.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// A drift correction came with no detection before it to say what to correct.
    #[error("drift correction needs the diffs of a drift detection first")]
    DriftNotDetected,
    /// Discovering the cluster's API for `.Capabilities` failed.
    #[error("discovering the cluster's capabilities: {}", error_chain(.error))]
    Capabilities {
        /// The discovery request's failure.
        error: ApiFailure,
    },
    /// The chart could not be rendered, or its `crds/` read.
    #[error("{}", error_chain(.error))]
    Render {
        /// The renderer's error.
        error: RenderError,
    },
    /// The rendering task ended without a result (it panicked, or the runtime is stopping).
    #[error("rendering stopped: {error}")]
    RenderStopped {
        /// The task's end.
        error: tokio::task::JoinError,
    },
    /// `spec.commonMetadata` could not be set on a rendered document.
    #[error("post-render commonMetadata: {}{message}", hook_prefix(.hook))]
    CommonMetadata {
        /// The hook whose manifest it was; `None`: the release manifest.
        hook: Option<String>,
        /// Why.
        message: String,
    },
    /// The HelmRelease's owner labels could not be set on a rendered document.
    #[error("post-render origin labels: {}{message}", hook_prefix(.hook))]
    OriginLabels {
        /// The hook whose manifest it was; `None`: the release manifest.
        hook: Option<String>,
        /// Why.
        message: String,
    },
    /// A manifest (rendered, stored, of a hook or a CRD) is not a list of Kubernetes
    /// objects.
    #[error("{}", error_chain(.error))]
    Manifest {
        /// The parse error (names the document and template).
        error: ManifestError,
    },
    /// An object's kind could not be resolved against the cluster's API.
    #[error("{}", error_chain(.error))]
    Discovery {
        /// The discovery error (names the object).
        error: DiscoveryError,
    },
    /// Reading or writing Helm storage failed.
    #[error("{}", error_chain(.error))]
    Storage {
        /// The storage error (names the Secret or the query).
        error: StorageError,
    },
    /// The history does not allow the action (Helm's words: no deployed release, another
    /// operation in progress, no such revision).
    #[error("{error}")]
    Transition {
        /// What the history lacks.
        error: TransitionError,
    },
    /// Install: the name has a history that `install.replace` does not allow to take over.
    #[error("release name check failed: cannot reuse a name that is still in use")]
    NameInUse {
        /// Release name.
        name: String,
    },
    /// The release has no record in storage (test, uninstall, unlock).
    #[error("release: not found: {name}")]
    ReleaseNotFound {
        /// Release name.
        name: String,
    },
    /// Uninstall with `keepHistory` of a release already uninstalled.
    #[error("the release named \"{name}\" is already deleted")]
    AlreadyDeleted {
        /// Release name.
        name: String,
    },
    /// `upgrade.preserveValues`: the current release's values could not be rebuilt.
    #[error("failed to rebuild old values: {error}")]
    ReuseValues {
        /// The coalescing error.
        error: CoalesceError,
    },
    /// `install.createNamespace`: creating the release namespace failed.
    #[error("creating namespace {namespace}: {}", .error.0)]
    CreateNamespace {
        /// The namespace.
        namespace: String,
        /// The API server's answer.
        error: ApiFailure,
    },
    /// A CRD of the chart could not be read or applied.
    #[error("{}", error_chain(.error))]
    CrdApply {
        /// The apply error (names the CRD).
        error: ApplyError,
    },
    /// An applied CRD did not become established.
    #[error("{}", error_chain(.error))]
    CrdWait {
        /// What the wait saw.
        error: WaitError,
    },
    /// An established CRD's API is not served (yet), or discovery failed asking.
    #[error("{message}")]
    CrdNotServed {
        /// Names the CRD and the version.
        message: String,
    },
    /// Applying the release's objects failed.
    #[error("{}", error_chain(.error))]
    Apply {
        /// The apply error (names the object).
        error: ApplyError,
    },
    /// Deleting objects failed (those the new manifest no longer has, or the uninstalled
    /// release's).
    #[error("{}", error_chain(.error))]
    Delete {
        /// The deletion error (names each object).
        error: DeleteError,
    },
    /// The applied objects did not become ready: one failed, or the timeout passed.
    #[error("{}", error_chain(.error))]
    Wait {
        /// What the wait saw.
        error: WaitError,
    },
    /// A hook ran and failed (or did not finish in time). The message is Helm v4's for the
    /// event (`failed pre-install: `, `pre-upgrade hooks failed: `, none for tests,
    /// rollbacks and deletions) around Flux's waiter's error, as helm-controller reports it:
    /// `failed early due to stalled resources: [Pod/ns/name status: 'Failed']`, or
    /// `timeout waiting for: [Pod/ns/name status: 'InProgress']`.
    #[error("{}{}", hook_failure_prefix(event), hook_wait_error(object, *timed_out))]
    HookFailed {
        /// The event whose hooks ran.
        event: HookEvent,
        /// The hook object.
        object: ObjectRef,
        /// The Job's or Pod's reason (for the log; Flux's message does not carry it).
        reason: String,
        /// It did not finish in time.
        timed_out: bool,
        /// The hook's pods' logs (`POD LOGS: <pod>` blocks, capped), for the failure
        /// message and Event: not in `Display`, which also makes the failed record's
        /// description (Helm's holds no log); [`ActionError::pod_logs`] gives them.
        logs: Option<String>,
    },
    /// A hook could not be run.
    #[error("failed {event}: {}", error_chain(.error))]
    Hook {
        /// The event whose hooks ran.
        event: HookEvent,
        /// Why the hook could not run.
        error: HookError,
    },
    /// Uninstall went to the end with errors (deletions, post-delete hooks).
    #[error("uninstallation completed with {} error(s): {}", .errors.len(), join(.errors))]
    Uninstall {
        /// Each error.
        errors: Vec<ActionError>,
    },
    /// A record the action wrote could not be summarized for core.
    #[error("{error}")]
    Record {
        /// Why.
        error: RecordError,
    },
}

/// What Helm v4 puts before a failed hook's error, by event (`install.go`, `upgrade.go`;
/// tests, rollbacks and deletions return the error as it is).
fn hook_failure_prefix(event: &HookEvent) -> &'static str {
    match event {
        HookEvent::PreInstall => "failed pre-install: ",
        HookEvent::PostInstall => "failed post-install: ",
        HookEvent::PreUpgrade => "pre-upgrade hooks failed: ",
        HookEvent::PostUpgrade => "post-upgrade hooks failed: ",
        _ => "",
    }
}

/// Flux's waiter's error for a hook that failed or did not finish in time.
fn hook_wait_error(object: &ObjectRef, timed_out: bool) -> String {
    if timed_out {
        format!(
            "timeout waiting for: [{}]",
            waited_form(object, Status::InProgress)
        )
    } else {
        format!(
            "failed early due to stalled resources: [{}]",
            waited_form(object, Status::Failed)
        )
    }
}

fn hook_prefix(hook: &Option<String>) -> String {
    hook.as_deref()
        .map(|h| format!("hook {h}: "))
        .unwrap_or_default()
}

/// The errors of one action as `Outcome.error` carries them: `; `-separated.
pub(super) fn join(errors: &[ActionError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl ActionError {
    /// The pod logs of a failed hook (this error's, or the first of an uninstall's that has
    /// them), in Helm's form, to follow the message in the status and Event.
    pub fn pod_logs(&self) -> Option<&str> {
        match self {
            ActionError::HookFailed { logs, .. } => logs.as_deref(),
            ActionError::Uninstall { errors } => errors.iter().find_map(ActionError::pod_logs),
            _ => None,
        }
    }

    /// A short, bounded name for the failure (a metric label).
    pub fn kind(&self) -> &'static str {
        match self {
            ActionError::DriftNotDetected => "drift_not_detected",
            ActionError::Capabilities { .. } => "capabilities",
            ActionError::Render { .. } | ActionError::RenderStopped { .. } => "render",
            ActionError::CommonMetadata { .. } | ActionError::OriginLabels { .. } => "post_render",
            ActionError::Manifest { .. } => "manifest",
            ActionError::Discovery { .. } => "discovery",
            ActionError::Storage { .. } => "storage",
            ActionError::Transition { error } => error.kind(),
            ActionError::NameInUse { .. } => "name_in_use",
            ActionError::ReleaseNotFound { .. } => "release_not_found",
            ActionError::AlreadyDeleted { .. } => "already_deleted",
            ActionError::ReuseValues { .. } => "values",
            ActionError::CreateNamespace { .. } => "namespace",
            ActionError::CrdApply { .. }
            | ActionError::CrdWait { .. }
            | ActionError::CrdNotServed { .. } => "crd",
            ActionError::Apply { .. } => "apply",
            ActionError::Delete { .. } => "delete",
            ActionError::Wait { error } => match error {
                WaitError::Failed(_) | WaitError::InvalidHealthCheck(_) => "wait_failed",
                WaitError::Timeout(_) | WaitError::DeletionTimeout(_) => "timeout",
            },
            ActionError::HookFailed { .. } => "hook_failed",
            ActionError::Hook { .. } => "hook",
            ActionError::Uninstall { .. } => "uninstall",
            ActionError::Record { .. } => "record",
        }
    }

    /// Whether retrying the action may succeed with nothing changed: a timeout, an API
    /// server that was unavailable or throttling, a lock held by another action. A chart
    /// that does not render, an object the API server refuses, a failed hook or object
    /// need a change first.
    pub fn is_transient(&self) -> bool {
        match self {
            ActionError::Capabilities { error } | ActionError::CreateNamespace { error, .. } => {
                error.is_transient()
            }
            ActionError::Discovery { error } => match error {
                DiscoveryError::Api { source, .. } => source.is_transient(),
                DiscoveryError::NoMatch { .. } => false,
            },
            ActionError::Storage { error } => error.is_transient(),
            ActionError::Transition { error } => error.is_transient(),
            ActionError::CrdApply { error } | ActionError::Apply { error } => error.is_transient(),
            ActionError::CrdWait { error } | ActionError::Wait { error } => error.is_transient(),
            ActionError::CrdNotServed { .. } => true,
            ActionError::Delete { error } => error.is_transient(),
            ActionError::Hook { error, .. } => error.is_transient(),
            ActionError::Uninstall { errors } => errors.iter().all(ActionError::is_transient),
            ActionError::DriftNotDetected
            | ActionError::Render { .. }
            | ActionError::RenderStopped { .. }
            | ActionError::CommonMetadata { .. }
            | ActionError::OriginLabels { .. }
            | ActionError::Manifest { .. }
            | ActionError::NameInUse { .. }
            | ActionError::ReleaseNotFound { .. }
            | ActionError::AlreadyDeleted { .. }
            | ActionError::ReuseValues { .. }
            | ActionError::HookFailed { .. }
            | ActionError::Record { .. } => false,
        }
    }
}

impl From<StorageError> for ActionError {
    fn from(error: StorageError) -> Self {
        ActionError::Storage { error }
    }
}

impl From<TransitionError> for ActionError {
    fn from(error: TransitionError) -> Self {
        ActionError::Transition { error }
    }
}

impl From<ManifestError> for ActionError {
    fn from(error: ManifestError) -> Self {
        ActionError::Manifest { error }
    }
}

impl From<DiscoveryError> for ActionError {
    fn from(error: DiscoveryError) -> Self {
        ActionError::Discovery { error }
    }
}

impl From<RecordError> for ActionError {
    fn from(error: RecordError) -> Self {
        ActionError::Record { error }
    }
}

#[cfg(test)]
mod tests {
    use flotilla_chart::release::Status;

    use super::*;
    use crate::kube::wait::NotReady;

    fn api(code: u16, message: &str) -> ApiFailure {
        ApiFailure(kube::Error::Api(
            kube::core::Status::failure(message, "Reason")
                .with_code(code)
                .boxed(),
        ))
    }

    fn object(kind: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: Some("default".into()),
            name: name.into(),
        }
    }

    fn secret() -> ObjectRef {
        object("Secret", "sh.helm.release.v1.web.v2")
    }

    #[test]
    fn messages_are_helms_and_fluxs_and_name_what_failed() {
        // (error, message, kind, transient)
        let cases: Vec<(ActionError, &str, &str, bool)> = vec![
            (
                TransitionError::NoDeployedReleases { name: "web".into() }.into(),
                "\"web\" has no deployed releases",
                "no_deployed_releases",
                false,
            ),
            (
                TransitionError::Locked {
                    name: "web".into(),
                    version: 2,
                    status: Status::PendingUpgrade,
                }
                .into(),
                "another operation (install/upgrade/rollback) is in progress",
                "locked",
                true,
            ),
            (
                TransitionError::NoRevision {
                    name: "web".into(),
                    version: 7,
                }
                .into(),
                "release has no 7 version",
                "no_revision",
                false,
            ),
            (
                ActionError::NameInUse { name: "web".into() },
                "release name check failed: cannot reuse a name that is still in use",
                "name_in_use",
                false,
            ),
            (
                ActionError::ReleaseNotFound { name: "web".into() },
                "release: not found: web",
                "release_not_found",
                false,
            ),
            (
                ActionError::AlreadyDeleted { name: "web".into() },
                "the release named \"web\" is already deleted",
                "already_deleted",
                false,
            ),
            (
                ActionError::HookFailed {
                    event: HookEvent::PreInstall,
                    object: object("Pod", "web-migrate"),
                    reason: "container \"migrate\" terminated: Error (exit code 1)".into(),
                    timed_out: false,
                    logs: None,
                },
                "failed pre-install: failed early due to stalled resources: [Pod/default/web-migrate status: 'Failed']",
                "hook_failed",
                false,
            ),
            (
                ActionError::HookFailed {
                    event: HookEvent::PreUpgrade,
                    object: object("Job", "web-migrate"),
                    reason: "timed out".into(),
                    timed_out: true,
                    logs: None,
                },
                "pre-upgrade hooks failed: timeout waiting for: [Job/default/web-migrate status: 'InProgress']",
                "hook_failed",
                false,
            ),
            (
                ActionError::HookFailed {
                    event: HookEvent::Test,
                    object: object("Pod", "web-test"),
                    reason: "container \"test\" terminated: Error (exit code 1)".into(),
                    timed_out: false,
                    logs: None,
                },
                "failed early due to stalled resources: [Pod/default/web-test status: 'Failed']",
                "hook_failed",
                false,
            ),
            (
                ActionError::Hook {
                    event: HookEvent::Test,
                    error: HookError::Create {
                        object: object("Pod", "web-test"),
                        source_name: None,
                        source: api(503, "etcdserver: leader changed"),
                    },
                },
                "failed test: Pod default/web-test: creating the hook: etcdserver: leader changed (HTTP 503)",
                "hook",
                true,
            ),
            (
                StorageError::Api {
                    secret: secret(),
                    action: "update",
                    source: Box::new(api(500, "internal error")),
                }
                .into(),
                "Secret default/sh.helm.release.v1.web.v2: update: internal error (HTTP 500)",
                "storage",
                true,
            ),
            (
                StorageError::Api {
                    secret: secret(),
                    action: "create",
                    source: Box::new(api(403, "forbidden")),
                }
                .into(),
                "Secret default/sh.helm.release.v1.web.v2: create: forbidden (HTTP 403)",
                "storage",
                false,
            ),
            (
                ActionError::Capabilities {
                    error: api(503, "unavailable"),
                },
                "discovering the cluster's capabilities: unavailable (HTTP 503)",
                "capabilities",
                true,
            ),
            (
                ActionError::CommonMetadata {
                    hook: Some("web-migrate".into()),
                    message: "bad YAML".into(),
                },
                "post-render commonMetadata: hook web-migrate: bad YAML",
                "post_render",
                false,
            ),
            (
                ActionError::CommonMetadata {
                    hook: None,
                    message: "bad YAML".into(),
                },
                "post-render commonMetadata: bad YAML",
                "post_render",
                false,
            ),
            (
                ActionError::Wait {
                    error: WaitError::Timeout(vec![NotReady {
                        object: object("Deployment", "web"),
                        status: crate::kube::Status::InProgress,
                        message: "0/1 replicas ready".into(),
                    }]),
                },
                "timeout waiting for: [Deployment/default/web status: 'InProgress']",
                "timeout",
                true,
            ),
            (
                ActionError::Wait {
                    error: WaitError::Failed(NotReady {
                        object: object("Job", "web"),
                        status: crate::kube::Status::Failed,
                        message: "BackoffLimitExceeded".into(),
                    }),
                },
                "failed early due to stalled resources: [Job/default/web status: 'Failed']",
                "wait_failed",
                false,
            ),
            (
                ActionError::Uninstall {
                    errors: vec![
                        ActionError::Wait {
                            error: WaitError::DeletionTimeout(vec![]),
                        },
                        ActionError::HookFailed {
                            event: HookEvent::PostDelete,
                            object: object("Job", "web-cleanup"),
                            reason: "failed".into(),
                            timed_out: false,
                            logs: Some("POD LOGS: web-cleanup\nboom".into()),
                        },
                    ],
                },
                "uninstallation completed with 2 error(s): timeout waiting for deletion of: []; failed early due to stalled resources: [Job/default/web-cleanup status: 'Failed']",
                "uninstall",
                false,
            ),
            (
                ActionError::Record {
                    error: RecordError::InvalidVersion {
                        name: "web".into(),
                        version: -1,
                    },
                },
                "release \"web\" has an invalid version -1",
                "record",
                false,
            ),
        ];
        for (error, message, kind, transient) in cases {
            assert_eq!(error.to_string(), message);
            assert_eq!(
                error_chain(&error),
                message,
                "no source: the chain is in the message once"
            );
            assert_eq!(
                (error.kind(), error.is_transient()),
                (kind, transient),
                "{message}"
            );
        }

        // Creating the namespace has always shown kube's own text of the error.
        let forbidden = api(403, "namespaces is forbidden");
        let kube_text = forbidden.0.to_string();
        let error = ActionError::CreateNamespace {
            namespace: "apps".into(),
            error: forbidden,
        };
        assert_eq!(
            error.to_string(),
            format!("creating namespace apps: {kube_text}")
        );
        assert_eq!((error.kind(), error.is_transient()), ("namespace", false));
    }

    #[test]
    fn a_failed_hooks_pod_logs_stay_out_of_the_message_and_are_found_through_an_uninstall() {
        let failed = ActionError::HookFailed {
            event: HookEvent::Test,
            object: object("Pod", "web-test"),
            reason: "failed".into(),
            timed_out: false,
            logs: Some("POD LOGS: web-test\nassertion failed".into()),
        };
        assert!(!failed.to_string().contains("POD LOGS"));
        assert_eq!(
            failed.pod_logs(),
            Some("POD LOGS: web-test\nassertion failed")
        );
        let uninstall = ActionError::Uninstall {
            errors: vec![ActionError::DriftNotDetected, failed],
        };
        assert_eq!(
            uninstall.pod_logs(),
            Some("POD LOGS: web-test\nassertion failed")
        );
        assert_eq!(ActionError::DriftNotDetected.pod_logs(), None);
    }
}
