//! Deletion in Helm's uninstall order, honouring `helm.sh/resource-policy: keep`, with a
//! chosen propagation policy and an optional watch-driven wait until the objects are gone.

use std::fmt;
use std::time::Duration;

use kube::ResourceExt as _;
use kube::api::{DeleteParams, DynamicObject, PropagationPolicy};

use super::apply::{HelmReleaseRef, ReleaseRef, other_owner, ownership_problems};
use super::capabilities::changes_discovery;
use super::discovery::DiscoveryError;
use super::manifest::{KindOrder, ManifestObject};
use super::wait::WaitError;
use super::{ApiFailure, ClusterApi, ObjectRef, RESOURCE_POLICY_ANNOTATION, Resource};

/// Deletion propagation (Helm's `--cascade`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents are deleted by the garbage collector afterwards (Helm's default).
    #[default]
    Background,
    /// The object stays until its dependents are deleted.
    Foreground,
    /// Dependents are left behind.
    Orphan,
}

/// How to delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// Propagation policy.
    pub propagation: Propagation,
    /// When set, wait this long for the deleted objects to be gone.
    pub wait: Option<Duration>,
    /// When set, live objects without this release's Helm metadata are left alone and
    /// reported as not owned (Helm's newest uninstall does the same).
    pub release: Option<ReleaseRef>,
    /// When set, live objects whose Flotilla labels name another HelmRelease are left alone
    /// and reported as not owned.
    pub owner: Option<HelmReleaseRef>,
}

/// What a deletion did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteReport {
    /// Objects a delete request was accepted for.
    pub deleted: Vec<ObjectRef>,
    /// Objects kept because of `helm.sh/resource-policy: keep` (in the manifest or live).
    pub kept: Vec<ObjectRef>,
    /// Objects that did not exist (or whose kind is no longer served).
    pub not_found: Vec<ObjectRef>,
    /// Objects left alone because they belong to another release or HelmRelease.
    pub not_owned: Vec<ObjectRef>,
}

/// One object that could not be deleted.
#[derive(Debug)]
pub struct ObjectFailure {
    /// The object.
    pub object: ObjectRef,
    /// The API server's answer.
    pub error: ApiFailure,
}

impl fmt::Display for ObjectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.error)
    }
}

/// Errors of a deletion.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    /// Some objects could not be deleted (the others were).
    #[error("deletion finished with {} error(s): [{}]", .failures.len(), join(.failures))]
    Failed {
        /// What was done.
        report: DeleteReport,
        /// Each failure.
        failures: Vec<ObjectFailure>,
    },
    /// Deleted objects were still present when the wait ended.
    #[error("waiting for deleted objects to be gone")]
    Wait {
        /// What was done.
        report: DeleteReport,
        /// What the wait saw.
        #[source]
        source: WaitError,
    },
}

impl DeleteError {
    /// What was done before the error.
    pub fn report(&self) -> &DeleteReport {
        match self {
            DeleteError::Failed { report, .. } | DeleteError::Wait { report, .. } => report,
        }
    }

    /// A short, bounded name for the failure (a metric label).
    pub fn kind(&self) -> &'static str {
        match self {
            DeleteError::Failed { .. } => "delete",
            DeleteError::Wait { .. } => "deletion_timeout",
        }
    }

    /// Whether retrying later may help.
    pub fn is_transient(&self) -> bool {
        match self {
            DeleteError::Failed { failures, .. } => failures.iter().all(|f| f.error.is_transient()),
            DeleteError::Wait { .. } => true,
        }
    }
}

fn join(failures: &[ObjectFailure]) -> String {
    failures
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether an object carries `helm.sh/resource-policy: keep` (trimmed, any case).
pub fn has_keep_policy(object: &DynamicObject) -> bool {
    object
        .annotations()
        .get(RESOURCE_POLICY_ANNOTATION)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("keep"))
}

/// The objects of `previous` that `current` no longer holds (an upgrade's leftovers), by
/// Helm's identity: group, kind, namespace and name; a changed version is the same object.
pub fn removed_objects(previous: &[Resource], current: &[Resource]) -> Vec<Resource> {
    let key = |r: &Resource| {
        (
            r.api_resource.group.clone(),
            r.api_resource.kind.clone(),
            r.namespace().map(str::to_owned),
            r.name(),
        )
    };
    let kept: std::collections::HashSet<_> = current.iter().map(key).collect();
    previous
        .iter()
        .filter(|r| !kept.contains(&key(r)))
        .cloned()
        .collect()
}

impl ClusterApi {
    /// Deletes manifest objects (uninstall, or objects dropped by an upgrade): resolves them
    /// against `release_namespace`, skipping kinds no longer served, then
    /// [`delete_resources`](Self::delete_resources).
    pub async fn delete(
        &self,
        objects: &[ManifestObject],
        release_namespace: &str,
        options: &DeleteOptions,
    ) -> Result<DeleteReport, DeleteError> {
        let mut resources = Vec::new();
        let mut unserved = Vec::new();
        let mut failures = Vec::new();
        for obj in objects {
            match self.resolve(obj, release_namespace).await {
                Ok(r) => resources.push(r),
                Err(DiscoveryError::NoMatch { object, .. }) => unserved.push(object),
                Err(DiscoveryError::Api { object, source, .. }) => failures.push(ObjectFailure {
                    object,
                    error: source,
                }),
            }
        }
        let result = self.delete_resources(&resources, options).await;
        match result {
            Ok(mut report) if failures.is_empty() => {
                report.not_found.extend(unserved);
                Ok(report)
            }
            Ok(mut report) => {
                report.not_found.extend(unserved);
                Err(DeleteError::Failed { report, failures })
            }
            Err(DeleteError::Failed {
                mut report,
                failures: more,
            }) => {
                report.not_found.extend(unserved);
                failures.extend(more);
                Err(DeleteError::Failed { report, failures })
            }
            Err(DeleteError::Wait { mut report, source }) => {
                report.not_found.extend(unserved);
                Err(DeleteError::Wait { report, source })
            }
        }
    }

    /// Deletes resolved objects in Helm's uninstall order. Objects with the keep policy (as
    /// given, or on the live object) are left alone; missing ones are reported as not found.
    /// Failures do not stop the others; they are reported together. Deleting a CRD or an
    /// APIService makes the next render discover `.Capabilities` again.
    pub async fn delete_resources(
        &self,
        resources: &[Resource],
        options: &DeleteOptions,
    ) -> Result<DeleteReport, DeleteError> {
        let result = self.delete_in_order(resources, options).await;
        if resources
            .iter()
            .any(|r| changes_discovery(&r.api_resource.group, &r.api_resource.kind))
        {
            self.invalidate_discovery().await;
        }
        result
    }

    async fn delete_in_order(
        &self,
        resources: &[Resource],
        options: &DeleteOptions,
    ) -> Result<DeleteReport, DeleteError> {
        let mut ordered: Vec<&Resource> = resources.iter().collect();
        KindOrder::Uninstall.sort(&mut ordered, |r| r.kind());
        let params = DeleteParams {
            propagation_policy: Some(match options.propagation {
                Propagation::Background => PropagationPolicy::Background,
                Propagation::Foreground => PropagationPolicy::Foreground,
                Propagation::Orphan => PropagationPolicy::Orphan,
            }),
            ..DeleteParams::default()
        };
        let mut report = DeleteReport::default();
        let mut failures = Vec::new();
        let mut deleted = Vec::new();
        for resource in ordered {
            let object = resource.object_ref();
            if has_keep_policy(&resource.object) {
                report.kept.push(object);
                continue;
            }
            let api = resource.api(&self.client);
            let name = resource.name();
            match api.get_opt(&name).await {
                Ok(None) => {
                    report.not_found.push(object);
                    continue;
                }
                Ok(Some(live)) if has_keep_policy(&live) => {
                    report.kept.push(object);
                    continue;
                }
                Ok(Some(live))
                    if options
                        .release
                        .as_ref()
                        .is_some_and(|r| !ownership_problems(&live, r).is_empty())
                        || options
                            .owner
                            .as_ref()
                            .is_some_and(|o| other_owner(&live, o).is_some()) =>
                {
                    report.not_owned.push(object);
                    continue;
                }
                Ok(Some(_)) => {}
                Err(e) => {
                    failures.push(ObjectFailure {
                        object,
                        error: ApiFailure(e),
                    });
                    continue;
                }
            }
            match api.delete(&name, &params).await {
                Ok(_) => {
                    tracing::debug!(object = %object, "object deleted");
                    report.deleted.push(object);
                    deleted.push(resource.clone());
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    report.not_found.push(object)
                }
                Err(e) => failures.push(ObjectFailure {
                    object,
                    error: ApiFailure(e),
                }),
            }
        }
        if !failures.is_empty() {
            return Err(DeleteError::Failed { report, failures });
        }
        if let Some(timeout) = options.wait
            && let Err(source) = self.wait_deleted(&deleted, timeout).await
        {
            return Err(DeleteError::Wait { report, source });
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ApiResource;

    use super::*;

    fn resource(version: &str, kind: &str, name: &str) -> Resource {
        let api_version = format!("apps/{version}");
        Resource {
            source: None,
            api_resource: ApiResource {
                group: "apps".to_owned(),
                version: version.to_owned(),
                api_version: api_version.clone(),
                kind: kind.to_owned(),
                plural: format!("{}s", kind.to_lowercase()),
            },
            namespaced: true,
            object: serde_json::from_value(serde_json::json!({
                "apiVersion": api_version, "kind": kind,
                "metadata": {"name": name, "namespace": "default"},
            }))
            .expect("a valid object"),
        }
    }

    #[test]
    fn objects_dropped_from_the_manifest_are_removed_whatever_their_version() {
        let previous = [
            resource("v1", "Deployment", "web"),
            resource("v1beta2", "StatefulSet", "db"),
            resource("v1", "DaemonSet", "agent"),
        ];
        let current = [
            resource("v1", "Deployment", "web"),
            resource("v1", "StatefulSet", "db"),
        ];
        let removed: Vec<String> = removed_objects(&previous, &current)
            .iter()
            .map(|r| r.object_ref().to_string())
            .collect();
        assert_eq!(removed, ["DaemonSet default/agent"]);
    }

    #[test]
    fn the_keep_policy_is_read_trimmed_and_in_any_case() {
        let mut r = resource("v1", "Deployment", "web");
        assert!(!has_keep_policy(&r.object));
        r.object
            .annotations_mut()
            .insert(RESOURCE_POLICY_ANNOTATION.to_owned(), " KEEP".to_owned());
        assert!(has_keep_policy(&r.object));
    }
}
