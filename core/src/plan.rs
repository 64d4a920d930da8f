//! The release plan the hub sends to an agent, and what the agent observes before each
//! decision.
//!
//! A [`ReleasePlan`] is the hub's resolved desired state of one release: identities,
//! chart artifact and digest, composed values and their config digest, the spec fields an
//! agent needs to run Helm actions, and the request tokens of the annotations. It is built
//! once from a [`HelmRelease`] with [`ReleasePlan::from_helm_release`].
//!
//! [`Observed`] is what the agent saw in its cluster: the newest release record in Helm
//! storage, the record of the rollback target, the drift detection result, and the
//! controller state (the HelmRelease status the agent keeps beside the plan).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::digest::{self, Digest};
use crate::duration::GoDuration;
use crate::ids::{
    ChartDigest, ClusterId, IdError, Namespace, ObjectName, PlanRevision, ReleaseName,
};
use crate::meta::Timestamp;
use crate::observation::{HOOK_EVENT_TEST, Observation};
use crate::spec::{
    CommonMetadata, CustomHealthCheck, DriftDetection, FORCE_REQUEST_ANNOTATION, HelmRelease,
    Install, PostRenderStrategy, PostRenderer, RECONCILE_REQUEST_ANNOTATION,
    RESET_REQUEST_ANNOTATION, Rollback, SpecError, Test, Uninstall, Upgrade, WaitStrategy,
};
use crate::status::{
    HelmReleaseStatus, HookPhase, ReleaseAction, SNAPSHOT_API_VERSION, Snapshot, StorageStatus,
    TestHookStatus,
};

/// Why a plan could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The HelmRelease is invalid.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// An identity derived from the HelmRelease is invalid.
    #[error("HelmRelease {object}: {field}: {source}")]
    Identity {
        /// `namespace/name` of the HelmRelease.
        object: String,
        /// The field the identity came from.
        field: &'static str,
        /// What was wrong.
        source: IdError,
    },
    /// The values are not a JSON object.
    #[error("HelmRelease {object}: composed values must be an object")]
    ValuesNotObject {
        /// `namespace/name` of the HelmRelease.
        object: String,
    },
}

/// The HelmRelease object a plan belongs to, on the hub.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    /// Namespace of the HelmRelease.
    pub namespace: Namespace,
    /// Name of the HelmRelease.
    pub name: ObjectName,
    /// `metadata.uid` of the HelmRelease, when known (Events name it in `involvedObject`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// Where the release lives in the workload cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseTarget {
    /// Helm release name (shortened).
    pub name: ReleaseName,
    /// Namespace of the release's objects.
    pub namespace: Namespace,
    /// Namespace of the Helm storage Secrets.
    pub storage_namespace: Namespace,
}

impl ReleaseTarget {
    /// `<namespace>/<name>`, as Flux writes it in failure messages.
    pub fn qualified(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The chart artifact of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChartArtifact {
    /// Chart name (`Chart.yaml` `name`).
    pub name: String,
    /// Chart version, with `+<digest12>` when the chart came from an OCI source.
    pub version: String,
    /// App version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_version: Option<String>,
    /// Content digest of the chart archive (cache key, `GetChart`).
    pub digest: ChartDigest,
    /// OCI artifact digest of the source, recorded in `lastAttemptedRevisionDigest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci_digest: Option<String>,
}

/// The `reconcile.fluxcd.io/*` annotation values at plan time.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestTokens {
    /// `reconcile.fluxcd.io/requestedAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<String>,
    /// `reconcile.fluxcd.io/forceAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_at: Option<String>,
    /// `reconcile.fluxcd.io/resetAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_at: Option<String>,
}

impl RequestTokens {
    /// Reads the tokens from object annotations.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Self {
        Self {
            requested_at: annotations.get(RECONCILE_REQUEST_ANNOTATION).cloned(),
            force_at: annotations.get(FORCE_REQUEST_ANNOTATION).cloned(),
            reset_at: annotations.get(RESET_REQUEST_ANNOTATION).cloned(),
        }
    }
}

/// The spec fields the agent needs to run Helm actions and decide.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseOptions {
    /// `spec.interval`: how often the agent reconciles the release when nothing asks it to
    /// (with jitter); `0s` in a plan is refused by the agent.
    #[serde(default)]
    pub interval: GoDuration,
    /// `spec.suspend`.
    #[serde(default)]
    pub suspend: bool,
    /// `spec.timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
    /// `spec.maxHistory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_history: Option<i32>,
    /// `spec.serviceAccountName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// `spec.persistentClient`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_client: Option<bool>,
    /// `spec.install`.
    #[serde(default)]
    pub install: Install,
    /// `spec.upgrade`.
    #[serde(default)]
    pub upgrade: Upgrade,
    /// `spec.test`.
    #[serde(default)]
    pub test: Test,
    /// `spec.rollback`.
    #[serde(default)]
    pub rollback: Rollback,
    /// `spec.uninstall`.
    #[serde(default)]
    pub uninstall: Uninstall,
    /// `spec.driftDetection`.
    #[serde(default)]
    pub drift_detection: DriftDetection,
    /// `spec.postRenderers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_renderers: Option<Vec<PostRenderer>>,
    /// `spec.commonMetadata`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_metadata: Option<CommonMetadata>,
    /// `spec.postRenderStrategy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_render_strategy: Option<PostRenderStrategy>,
    /// `spec.waitStrategy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_strategy: Option<WaitStrategy>,
    /// `spec.healthCheckExprs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_check_exprs: Vec<CustomHealthCheck>,
}

impl ReleaseOptions {
    /// `spec.timeout`, 5m when unset.
    pub fn timeout(&self) -> GoDuration {
        self.timeout.unwrap_or(crate::spec::DEFAULT_TIMEOUT)
    }
}

/// A release plan: the hub's resolved desired state of one release on one cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleasePlan {
    /// The HelmRelease this plan is for.
    pub object: ObjectRef,
    /// `metadata.generation` of the HelmRelease.
    pub generation: i64,
    /// Plan revision, monotonic per release.
    pub revision: PlanRevision,
    /// Target cluster (`spec.clusterRef` naming a ManagedCluster); `None` for push-mode
    /// targets (kubeConfig, Cluster API `Cluster`, the hub's own cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterId>,
    /// Release identity.
    pub release: ReleaseTarget,
    /// Chart artifact.
    pub chart: ChartArtifact,
    /// Composed values (valuesFrom, then inline). May hold Secret data: never log.
    pub values: Value,
    /// Config digest of `values`.
    pub config_digest: Digest,
    /// Digest of `spec.postRenderers` (`""` when unset).
    #[serde(default)]
    pub post_renderers_digest: String,
    /// Digest of `spec.commonMetadata` (`""` when unset).
    #[serde(default)]
    pub common_metadata_digest: String,
    /// Spec fields for the actions.
    pub options: ReleaseOptions,
    /// Annotation request tokens.
    #[serde(default)]
    pub requests: RequestTokens,
}

impl ReleasePlan {
    /// Builds the plan of a HelmRelease for a resolved chart and composed values.
    pub fn from_helm_release(
        hr: &HelmRelease,
        revision: PlanRevision,
        chart: ChartArtifact,
        values: Value,
    ) -> Result<Self, PlanError> {
        hr.validate()?;
        let object_key = hr.key();
        let id_err = |field: &'static str| {
            let object = object_key.clone();
            move |source| PlanError::Identity {
                object,
                field,
                source,
            }
        };
        let values = match values {
            Value::Null => Value::Object(Default::default()),
            v @ Value::Object(_) => v,
            _ => return Err(PlanError::ValuesNotObject { object: object_key }),
        };
        let spec = &hr.spec;
        let object = ObjectRef {
            namespace: Namespace::new(hr.metadata.namespace.clone().unwrap_or_default())
                .map_err(id_err("metadata.namespace"))?,
            name: ObjectName::new(hr.metadata.name.clone().unwrap_or_default())
                .map_err(id_err("metadata.name"))?,
            uid: hr.metadata.uid.clone().filter(|u| !u.is_empty()),
        };
        let release = ReleaseTarget {
            name: hr.release_name().map_err(id_err("spec.releaseName"))?,
            namespace: Namespace::new(hr.release_namespace())
                .map_err(id_err("spec.targetNamespace"))?,
            storage_namespace: Namespace::new(hr.storage_namespace())
                .map_err(id_err("spec.storageNamespace"))?,
        };
        let cluster = spec
            .cluster_ref
            .as_ref()
            .filter(|c| c.cluster_api().is_none())
            .map(|c| ClusterId::new(c.name.clone()))
            .transpose()
            .map_err(id_err("spec.clusterRef.name"))?;
        Ok(Self {
            object,
            generation: hr.generation(),
            revision,
            cluster,
            release,
            chart,
            config_digest: digest::config_digest(&values),
            values,
            post_renderers_digest: digest::post_renderers_digest(spec.post_renderers.as_ref()),
            common_metadata_digest: digest::common_metadata_digest(spec.common_metadata.as_ref()),
            options: ReleaseOptions {
                interval: spec.interval,
                suspend: spec.suspend,
                timeout: spec.timeout,
                max_history: spec.max_history,
                service_account_name: spec.service_account_name.clone(),
                persistent_client: spec.persistent_client,
                install: spec.install(),
                upgrade: spec.upgrade(),
                test: spec.test(),
                rollback: spec.rollback(),
                uninstall: spec.uninstall(),
                drift_detection: spec.drift_detection(),
                post_renderers: spec.post_renderers.clone(),
                common_metadata: spec.common_metadata.clone(),
                post_render_strategy: spec.post_render_strategy,
                wait_strategy: spec.wait_strategy,
                health_check_exprs: spec.health_check_exprs.clone(),
            },
            requests: RequestTokens::from_annotations(&hr.metadata.annotations),
        })
    }
}

/// A Helm release record as the agent read it from storage (or as an action wrote it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseRecord {
    /// Release name.
    pub name: ReleaseName,
    /// Release namespace.
    pub namespace: Namespace,
    /// Release version.
    pub version: u32,
    /// Release status.
    pub status: StorageStatus,
    /// Chart name.
    pub chart_name: String,
    /// Chart version.
    pub chart_version: String,
    /// App version (`""` when unset).
    #[serde(default)]
    pub app_version: String,
    /// Config digest of the values stored in the release.
    pub config_digest: Digest,
    /// Digest of Flux's observation of the release ([`Observation::digest`]), computed
    /// with the OCI digest given by [`crate::release::observation_oci_digest`].
    pub digest: Digest,
    /// First deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_deployed: Option<Timestamp>,
    /// Last deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_deployed: Option<Timestamp>,
    /// Deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<Timestamp>,
    /// Every test hook of the release with its last run (unfiltered).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub test_hooks: BTreeMap<String, TestHookStatus>,
}

/// Why a stored release could not be summarized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The release name is not a valid release name.
    #[error("release name: {0}")]
    Name(#[source] IdError),
    /// The release namespace is not a valid namespace.
    #[error("release namespace: {0}")]
    Namespace(#[source] IdError),
    /// The status is not one Helm writes.
    #[error("release {0:?} has unknown status {1:?}")]
    Status(String, String),
    /// A timestamp is not RFC 3339.
    #[error("release {0:?}: {1}")]
    Time(String, #[source] crate::meta::TimestampError),
}

impl ReleaseRecord {
    /// Summarizes a release read from storage, given as Flux's (unfiltered) observation of
    /// it: the digest is that of the observation with test hooks removed and `oci_digest`
    /// set (see [`crate::release::observation_oci_digest`]); the test hooks are the hooks
    /// with the `test` event.
    pub fn from_observation(release: &Observation, oci_digest: &str) -> Result<Self, RecordError> {
        let name = ReleaseName::new(release.name.clone()).map_err(RecordError::Name)?;
        let namespace =
            Namespace::new(release.namespace.clone()).map_err(RecordError::Namespace)?;
        let status = StorageStatus::parse(&release.info.status).ok_or_else(|| {
            RecordError::Status(release.name.clone(), release.info.status.clone())
        })?;
        let time = |t: &Option<String>| -> Result<Option<Timestamp>, RecordError> {
            t.as_deref()
                .map(|t| {
                    Timestamp::new(t)
                        .map(|t| t.to_kubernetes())
                        .map_err(|e| RecordError::Time(release.name.clone(), e))
                })
                .transpose()
        };
        let mut test_hooks = BTreeMap::new();
        for hook in release.hooks.iter().flatten() {
            if hook.events.iter().any(|e| e == HOOK_EVENT_TEST) {
                let run = &hook.last_run;
                test_hooks.insert(
                    hook.name.clone(),
                    TestHookStatus {
                        last_started: time(&run.started_at)?,
                        last_completed: time(&run.completed_at)?,
                        phase: match run.phase.as_str() {
                            "Unknown" => Some(HookPhase::Unknown),
                            "Running" => Some(HookPhase::Running),
                            "Succeeded" => Some(HookPhase::Succeeded),
                            "Failed" => Some(HookPhase::Failed),
                            _ => None,
                        },
                    },
                );
            }
        }
        let observed = Observation {
            oci_digest: oci_digest.to_owned(),
            ..release.clone()
        }
        .observed();
        Ok(Self {
            name,
            namespace,
            version: release.version,
            status,
            chart_name: release.chart_metadata.name.clone(),
            chart_version: release.chart_metadata.version.clone(),
            app_version: release.chart_metadata.app_version.clone(),
            config_digest: digest::config_digest(release.config.as_ref().unwrap_or(&Value::Null)),
            digest: observed.digest(),
            first_deployed: time(&release.info.first_deployed)?,
            last_deployed: time(&release.info.last_deployed)?,
            deleted: time(&release.info.deleted)?,
            test_hooks,
        })
    }

    /// `<namespace>/<name>.v<version>`.
    pub fn full_name(&self) -> String {
        format!("{}/{}.v{}", self.namespace, self.name, self.version)
    }

    /// True when this record is the release version `snapshot` describes.
    pub fn is(&self, snapshot: &Snapshot) -> bool {
        snapshot.targets(self.name.as_str(), self.namespace.as_str(), self.version)
    }

    /// The history snapshot of this record (no test hooks: those are recorded by tests).
    pub fn to_snapshot(&self, action: Option<ReleaseAction>, oci_digest: &str) -> Snapshot {
        Snapshot {
            api_version: SNAPSHOT_API_VERSION.to_owned(),
            digest: self.digest.to_string(),
            name: self.name.to_string(),
            namespace: self.namespace.to_string(),
            version: self.version,
            status: self.status.as_str().to_owned(),
            action,
            chart_name: self.chart_name.clone(),
            chart_version: self.chart_version.clone(),
            app_version: self.app_version.clone(),
            config_digest: self.config_digest.to_string(),
            first_deployed: self.first_deployed.clone(),
            last_deployed: self.last_deployed.clone(),
            deleted: self.deleted.clone(),
            test_hooks: None,
            oci_digest: oci_digest.to_owned(),
        }
    }
}

/// The result of drift detection, as the agent observed it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "result")]
pub enum DriftObservation {
    /// Detection has not run for this observation. The decision asks for it
    /// ([`crate::release::Action::DetectDrift`]) when it is needed.
    #[default]
    NotChecked,
    /// The cluster matches the stored manifest (excluded objects aside).
    NoDrift,
    /// Objects were found changed or removed.
    Drifted {
        /// One line per object: `Kind/ns/name changed (A additions, C changes, R removals)`,
        /// `Kind/ns/name removed`, `Kind/ns/name excluded`.
        summary: String,
    },
    /// Detection failed without finding changes.
    Error {
        /// The error.
        message: String,
    },
}

/// What the agent observed before a decision.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observed {
    /// The newest record of the release in storage, in any status (Helm's `Last`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<ReleaseRecord>,
    /// The storage record of the rollback target's version
    /// ([`crate::release::rollback_candidate`]), `None` when it is gone from storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_target: Option<ReleaseRecord>,
    /// Drift detection result.
    #[serde(default)]
    pub drift: DriftObservation,
    /// The controller state: the HelmRelease status the agent keeps beside the plan.
    #[serde(default)]
    pub status: HelmReleaseStatus,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::Hook;
    use serde_json::json;

    fn stored() -> Observation {
        serde_json::from_value(json!({
            "name": "podinfo", "version": 2, "namespace": "default",
            "info": {"first_deployed": "2024-05-07T04:54:21.5+02:00",
                     "last_deployed": "2024-05-07T05:00:00Z", "status": "deployed"},
            "chartMetadata": {"name": "podinfo", "version": "6.5.3", "appVersion": "6.5.3"},
            "config": {"replicaCount": 2},
            "manifest": "kind: Deployment\n",
            "hooks": [
                {"name": "podinfo-test", "events": ["test"],
                 "last_run": {"started_at": "2024-05-07T05:01:00Z", "completed_at": "2024-05-07T05:01:09Z", "phase": "Succeeded"}},
                {"name": "migrate", "events": ["pre-upgrade"], "last_run": {"phase": ""}}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn stored_release_is_summarized_with_flux_digests() {
        let rec = ReleaseRecord::from_observation(&stored(), "sha256:abc").unwrap();
        assert_eq!(rec.full_name(), "default/podinfo.v2");
        assert_eq!(rec.status, StorageStatus::Deployed);
        assert_eq!(rec.chart_version, "6.5.3");
        assert_eq!(
            rec.config_digest,
            digest::config_digest(&json!({"replicaCount": 2}))
        );
        assert_eq!(
            rec.first_deployed.as_ref().map(Timestamp::as_str),
            Some("2024-05-07T02:54:21Z")
        );
        assert_eq!(
            rec.test_hooks["podinfo-test"].phase,
            Some(HookPhase::Succeeded)
        );
        // The digest ignores test hooks and includes the OCI digest.
        let mut without_tests = stored();
        without_tests.hooks = Some(vec![Hook {
            name: "migrate".into(),
            events: vec!["pre-upgrade".into()],
            ..Hook::default()
        }]);
        without_tests.oci_digest = "sha256:abc".into();
        assert_eq!(rec.digest, without_tests.digest());
        let other_oci = ReleaseRecord::from_observation(&stored(), "").unwrap();
        assert_ne!(other_oci.digest, rec.digest);
        // A manual test run changes hook results, not the digest.
        let mut retested = stored();
        if let Some(h) = retested.hooks.as_mut() {
            h[0].last_run.phase = "Failed".into();
        }
        assert_eq!(
            ReleaseRecord::from_observation(&retested, "sha256:abc")
                .unwrap()
                .digest,
            rec.digest
        );
    }

    #[test]
    fn stored_release_with_an_unknown_status_is_refused() {
        let mut s = stored();
        s.info.status = "exploded".into();
        assert!(matches!(
            ReleaseRecord::from_observation(&s, ""),
            Err(RecordError::Status(..))
        ));
    }
}
