//! The per-release controller state, kept in the workload cluster so an agent restart
//! resumes where it stopped: one Secret per release in the agent's namespace holding the
//! plan (with its values, hence a Secret) and the HelmRelease status core computes
//! (counters, history snapshots, handled tokens, conditions).
//!
//! The Secret is named `flotilla-release-<namespace>-<name>` after the HelmRelease, typed
//! [`STATE_SECRET_TYPE`], labelled with the HelmRelease's owner labels. Its data keys are
//! `plan` and `status`, both JSON. Nothing here logs the contents.

// Errors name their object for people; they are built on the failure path only, so their
// size does not matter.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;

use flotilla_core::plan::{ObjectRef, ReleasePlan};
use flotilla_core::status::HelmReleaseStatus;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};

use crate::kube::{ApiFailure, FIELD_MANAGER, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL};

/// The `type` of controller state Secrets.
pub const STATE_SECRET_TYPE: &str = "flotilla.dev/release-state";
/// Label marking controller state Secrets.
pub const STATE_LABEL: &str = "flotilla.dev/release-state";

/// Errors reading or writing the controller state; each names the HelmRelease.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The API server refused a request.
    #[error("HelmRelease {object}: {op} of its state Secret {namespace}/{secret}")]
    Api {
        /// `namespace/name` of the HelmRelease.
        object: String,
        /// The agent namespace.
        namespace: String,
        /// The Secret.
        secret: String,
        /// `read`, `write` or `delete`.
        op: &'static str,
        /// The API server's answer.
        #[source]
        source: ApiFailure,
    },
    /// The stored state does not decode.
    #[error("HelmRelease {object}: state Secret {namespace}/{secret}: key {key:?} does not decode")]
    Decode {
        /// `namespace/name` of the HelmRelease.
        object: String,
        /// The agent namespace.
        namespace: String,
        /// The Secret.
        secret: String,
        /// The data key.
        key: &'static str,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
}

impl StateError {
    /// A bounded label.
    pub fn kind(&self) -> &'static str {
        match self {
            StateError::Api { .. } => "state_api",
            StateError::Decode { .. } => "state_decode",
        }
    }

    /// Whether a retry may help.
    pub fn is_transient(&self) -> bool {
        match self {
            StateError::Api { source, .. } => source.is_transient(),
            StateError::Decode { .. } => false,
        }
    }
}

/// What was persisted for one release.
#[derive(Debug, Clone, PartialEq)]
pub struct PersistedState {
    /// The plan last reconciled.
    pub plan: ReleasePlan,
    /// The controller state after it.
    pub status: HelmReleaseStatus,
}

/// The controller state Secrets of one agent namespace.
#[derive(Clone)]
pub struct StateStore {
    api: Api<Secret>,
    namespace: String,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// The state Secret's name for a HelmRelease.
pub fn secret_name(object: &ObjectRef) -> String {
    format!("flotilla-release-{}-{}", object.namespace, object.name)
}

fn object_key(object: &ObjectRef) -> String {
    format!("{}/{}", object.namespace, object.name)
}

impl StateStore {
    /// The store in the agent's namespace.
    pub fn new(client: Client, namespace: &str) -> StateStore {
        StateStore {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
        }
    }

    /// The agent namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn api_error(&self, object: &ObjectRef, op: &'static str, e: kube::Error) -> StateError {
        StateError::Api {
            object: object_key(object),
            namespace: self.namespace.clone(),
            secret: secret_name(object),
            op,
            source: ApiFailure(e),
        }
    }

    /// The persisted state of a HelmRelease, `None` when there is none.
    pub async fn load(&self, object: &ObjectRef) -> Result<Option<PersistedState>, StateError> {
        let name = secret_name(object);
        let Some(secret) = self
            .api
            .get_opt(&name)
            .await
            .map_err(|e| self.api_error(object, "read", e))?
        else {
            return Ok(None);
        };
        let data = secret.data.unwrap_or_default();
        let decode = |key: &'static str| -> Result<Option<&[u8]>, StateError> {
            Ok(data.get(key).map(|b| b.0.as_slice()))
        };
        let err = |key: &'static str, source| StateError::Decode {
            object: object_key(object),
            namespace: self.namespace.clone(),
            secret: name.clone(),
            key,
            source,
        };
        let (Some(plan), status) = (decode("plan")?, decode("status")?) else {
            return Ok(None);
        };
        let plan: ReleasePlan = serde_json::from_slice(plan).map_err(|e| err("plan", e))?;
        let status: HelmReleaseStatus = match status {
            Some(s) => serde_json::from_slice(s).map_err(|e| err("status", e))?,
            None => HelmReleaseStatus::default(),
        };
        Ok(Some(PersistedState { plan, status }))
    }

    /// Writes the plan and status (server-side apply of the whole Secret).
    pub async fn save(
        &self,
        plan: &ReleasePlan,
        status: &HelmReleaseStatus,
    ) -> Result<(), StateError> {
        let object = &plan.object;
        let name = secret_name(object);
        let encode = |v: serde_json::Result<Vec<u8>>| {
            // Plans and statuses are plain data: serializing them cannot fail.
            ByteString(v.unwrap_or_default())
        };
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (STATE_LABEL.to_owned(), "true".to_owned()),
                    (OWNER_NAME_LABEL.to_owned(), object.name.to_string()),
                    (
                        OWNER_NAMESPACE_LABEL.to_owned(),
                        object.namespace.to_string(),
                    ),
                ])),
                ..ObjectMeta::default()
            },
            type_: Some(STATE_SECRET_TYPE.to_owned()),
            data: Some(BTreeMap::from([
                ("plan".to_owned(), encode(serde_json::to_vec(plan))),
                ("status".to_owned(), encode(serde_json::to_vec(status))),
            ])),
            ..Secret::default()
        };
        let mut secret_json = serde_json::to_value(&secret).unwrap_or_default();
        if let Some(obj) = secret_json.as_object_mut() {
            obj.insert("apiVersion".into(), "v1".into());
            obj.insert("kind".into(), "Secret".into());
        }
        self.api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&secret_json),
            )
            .await
            .map_err(|e| self.api_error(object, "write", e))?;
        Ok(())
    }

    /// Forgets a HelmRelease (after its uninstall on deletion).
    pub async fn delete(&self, object: &ObjectRef) -> Result<(), StateError> {
        match self
            .api
            .delete(&secret_name(object), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(self.api_error(object, "delete", e)),
        }
    }
}
