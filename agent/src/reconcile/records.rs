//! The release records the executor reads and writes: Helm's `sh.helm.release.v1.*` Secrets
//! in the storage namespace, encoded with `flotilla_chart::release` so the real `helm` CLI
//! reads them.
//!
//! This is the small part of Helm's Secret driver the executor needs (history, last, get,
//! create with history pruning, update, delete). The full driver with pending-release
//! recovery lives in `crate::storage`; the executor moves onto it once it lands.

// Errors name their object for people; they are built on the failure path only, so their
// size does not matter.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;

use flotilla_chart::release::{
    self as codec, CodecError, Release, SECRET_TYPE, Status, StorageOp, decode_release,
    filter_system_labels, secret_for,
};
use flotilla_chart::time::GoTime;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt as _};

use crate::kube::ApiFailure;

/// Errors of the release records; each names the release (and version).
#[derive(Debug, thiserror::Error)]
pub enum RecordStoreError {
    /// The API server refused a request.
    #[error("release {name:?} in namespace {namespace}: {op} of its storage Secrets")]
    Api {
        /// Release name.
        name: String,
        /// Storage namespace.
        namespace: String,
        /// What was being done (`list`, `create v3`, ...).
        op: String,
        /// The API server's answer.
        #[source]
        source: ApiFailure,
    },
    /// A stored record does not decode.
    #[error("release Secret {namespace}/{secret}: cannot decode the release")]
    Decode {
        /// Storage namespace.
        namespace: String,
        /// The Secret.
        secret: String,
        /// The codec's error.
        #[source]
        source: CodecError,
    },
    /// A record could not be encoded.
    #[error("release {name:?} v{version}: cannot encode the release")]
    Encode {
        /// Release name.
        name: String,
        /// Version.
        version: i64,
        /// The codec's error.
        #[source]
        source: CodecError,
    },
}

impl RecordStoreError {
    /// A bounded label.
    pub fn kind(&self) -> &'static str {
        match self {
            RecordStoreError::Api { .. } => "storage_api",
            RecordStoreError::Decode { .. } => "storage_decode",
            RecordStoreError::Encode { .. } => "storage_encode",
        }
    }

    /// Whether a retry may help.
    pub fn is_transient(&self) -> bool {
        match self {
            RecordStoreError::Api { source, .. } => source.is_transient(),
            RecordStoreError::Decode { .. } | RecordStoreError::Encode { .. } => false,
        }
    }
}

/// Helm storage of one namespace.
#[derive(Clone)]
pub struct RecordStore {
    api: Api<Secret>,
    namespace: String,
}

impl std::fmt::Debug for RecordStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl RecordStore {
    /// The storage of `namespace`.
    pub fn new(client: Client, namespace: &str) -> RecordStore {
        RecordStore {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
        }
    }

    fn api_error(&self, name: &str, op: impl Into<String>, e: kube::Error) -> RecordStoreError {
        RecordStoreError::Api {
            name: name.to_owned(),
            namespace: self.namespace.clone(),
            op: op.into(),
            source: ApiFailure(e),
        }
    }

    /// Every record of a release, oldest first (Helm's `History`).
    pub async fn history(&self, name: &str) -> Result<Vec<Release>, RecordStoreError> {
        let params = ListParams::default().labels(&format!("name={name},owner=helm"));
        let list = self
            .api
            .list(&params)
            .await
            .map_err(|e| self.api_error(name, "list", e))?;
        let mut out = Vec::with_capacity(list.items.len());
        for secret in list.items {
            out.push(self.decode(&secret)?);
        }
        out.sort_by_key(|r| r.version);
        Ok(out)
    }

    /// The newest record in any status (Helm's `Last`).
    pub async fn last(&self, name: &str) -> Result<Option<Release>, RecordStoreError> {
        Ok(self.history(name).await?.pop())
    }

    /// One version.
    pub async fn get(&self, name: &str, version: i64) -> Result<Option<Release>, RecordStoreError> {
        let secret = codec::secret_name(name, version);
        match self
            .api
            .get_opt(&secret)
            .await
            .map_err(|e| self.api_error(name, format!("get v{version}"), e))?
        {
            Some(s) => Ok(Some(self.decode(&s)?)),
            None => Ok(None),
        }
    }

    fn decode(&self, secret: &Secret) -> Result<Release, RecordStoreError> {
        let decode_error = |source| RecordStoreError::Decode {
            namespace: self.namespace.clone(),
            secret: secret.name_any(),
            source,
        };
        let data = secret
            .data
            .as_ref()
            .and_then(|d| d.get("release"))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default();
        let mut rls = decode_release(&data).map_err(decode_error)?;
        rls.labels = filter_system_labels(secret.labels());
        Ok(rls)
    }

    fn secret(&self, rls: &Release, op: StorageOp) -> Result<Secret, RecordStoreError> {
        let parts = secret_for(rls, op).map_err(|source| RecordStoreError::Encode {
            name: rls.name.clone(),
            version: rls.version,
            source,
        })?;
        Ok(Secret {
            metadata: ObjectMeta {
                name: Some(parts.name),
                namespace: Some(self.namespace.clone()),
                labels: Some(parts.labels),
                ..ObjectMeta::default()
            },
            type_: Some(SECRET_TYPE.to_owned()),
            data: Some(BTreeMap::from([(
                "release".to_owned(),
                ByteString(parts.release.into_bytes()),
            )])),
            ..Secret::default()
        })
    }

    /// Creates a record (Helm's `Create`), then prunes the history to `max_history`
    /// records when it is positive: the oldest go first, never the newest deployed one.
    pub async fn create(&self, rls: &Release, max_history: i32) -> Result<(), RecordStoreError> {
        let secret = self.secret(rls, StorageOp::Create { at: unix_now() })?;
        self.api
            .create(&PostParams::default(), &secret)
            .await
            .map_err(|e| self.api_error(&rls.name, format!("create v{}", rls.version), e))?;
        if max_history > 0 {
            self.prune(&rls.name, max_history as usize).await?;
        }
        Ok(())
    }

    async fn prune(&self, name: &str, max: usize) -> Result<(), RecordStoreError> {
        let history = self.history(name).await?;
        if history.len() <= max {
            return Ok(());
        }
        let last_deployed = history
            .iter()
            .rev()
            .find(|r| status_of(r) == Some(&Status::Deployed))
            .map(|r| r.version);
        let newest = history.last().map(|r| r.version);
        let mut excess = history.len() - max;
        for r in &history {
            if excess == 0 {
                break;
            }
            if Some(r.version) == last_deployed || Some(r.version) == newest {
                continue;
            }
            self.delete(name, r.version).await?;
            excess -= 1;
        }
        Ok(())
    }

    /// Rewrites a record (Helm's `Update`).
    pub async fn update(&self, rls: &Release) -> Result<(), RecordStoreError> {
        let mut secret = self.secret(rls, StorageOp::Update { at: unix_now() })?;
        let op = format!("update v{}", rls.version);
        let name = secret.name_any();
        let live = self
            .api
            .get(&name)
            .await
            .map_err(|e| self.api_error(&rls.name, op.clone(), e))?;
        secret.metadata.resource_version = live.metadata.resource_version;
        self.api
            .replace(&name, &PostParams::default(), &secret)
            .await
            .map_err(|e| self.api_error(&rls.name, op, e))?;
        Ok(())
    }

    /// Deletes one record; a missing one is fine.
    pub async fn delete(&self, name: &str, version: i64) -> Result<(), RecordStoreError> {
        match self
            .api
            .delete(&codec::secret_name(name, version), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(self.api_error(name, format!("delete v{version}"), e)),
        }
    }
}

/// A record's status.
pub fn status_of(rls: &Release) -> Option<&Status> {
    rls.info.as_ref().and_then(|i| i.status.as_ref())
}

/// Sets a record's status and description.
pub fn set_status(rls: &mut Release, status: Status, description: impl Into<String>) {
    let info = rls.info.get_or_insert_with(Default::default);
    info.status = Some(status);
    info.description = description.into();
}

fn unix_now() -> i64 {
    GoTime::now().unix_secs
}
