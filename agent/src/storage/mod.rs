//! Helm-compatible release storage: the Secret driver (`helm.sh/release.v1` Secrets named
//! `sh.helm.release.v1.<name>.v<N>`), history pruning and the status transitions of actions.
//!
//! Records written here are read by the `helm` CLI (v3 and v4) and records Helm wrote are
//! read here: the record codec is [`flotilla_chart::release`], this module adds the
//! Kubernetes side.
//!
//! Start at [`SecretStorage`]:
//! - reads: [`SecretStorage::get`], [`SecretStorage::history`], [`SecretStorage::last`],
//!   [`SecretStorage::deployed`], [`SecretStorage::deployed_all`], [`SecretStorage::list`];
//! - writes: [`SecretStorage::create`] (optionally pruning first, see [`prune`]),
//!   [`SecretStorage::update`], [`SecretStorage::delete`];
//! - what actions do to records: [`transitions`] (pure functions, then the driver calls that
//!   apply them, including [`SecretStorage::unlock`] for a release left pending by a crash);
//! - what an action wrote: a [`Journal`] ([`SecretStorage::with_journal`]);
//! - what core sees of a record: [`observation`] (Flux's observation, whose digest the
//!   status carries).
//!
//! Guarantees and assumptions, as in Helm's `pkg/storage`:
//! - Labels: `name`, `owner=helm`, `status`, `version`, plus `createdAt` (create) or
//!   `modifiedAt` (update) in Unix seconds, after the release's own labels. [`get`] returns
//!   the record with Helm's system labels removed from [`Release::labels`]; queries
//!   ([`history`], [`deployed`], [`list`]) keep every label of the Secret, as Helm's `Query`
//!   does, so updating a record read from a query keeps its `createdAt`.
//! - An update replaces the whole Secret (no resourceVersion precondition), like Helm's.
//! - Unlike Helm, which skips records it cannot decode, the release-scoped reads fail with an
//!   error naming the Secret: acting on a partial history could reuse a revision number or
//!   prune the wrong record. [`list`] (all releases) reports unreadable Secrets next to the
//!   records it could read. Nothing here deletes a Secret it could not decode.
//! - A record must sit under the key its own name and version give (`Mismatch` otherwise).
//!
//! [`get`]: SecretStorage::get
//! [`history`]: SecretStorage::history
//! [`deployed`]: SecretStorage::deployed
//! [`list`]: SecretStorage::list

pub mod observation;
pub mod prune;
pub mod transitions;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use flotilla_chart::release::{self as record, CodecError, Release, Status, StorageOp};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};

use crate::kube::{ApiFailure, ObjectRef};

/// The value of the `owner` label on every record.
pub const OWNER: &str = "helm";
/// The data key holding the encoded record.
pub const RELEASE_KEY: &str = "release";

/// A storage failure. Every variant names the Secret, the release or the query.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The record does not exist.
    #[error("{secret}: not found")]
    NotFound {
        /// The Secret.
        secret: ObjectRef,
    },
    /// Creating a record whose Secret already exists (another writer got there first).
    #[error("{secret}: already exists")]
    AlreadyExists {
        /// The Secret.
        secret: ObjectRef,
    },
    /// A request about one Secret failed.
    #[error("{secret}: {action}")]
    Api {
        /// The Secret.
        secret: ObjectRef,
        /// `get`, `create`, `update` or `delete`.
        action: &'static str,
        /// The API failure.
        #[source]
        source: Box<ApiFailure>,
    },
    /// Listing Secrets failed.
    #[error("Secrets in namespace {namespace} with labels {selector}: list")]
    List {
        /// The namespace.
        namespace: String,
        /// The label selector.
        selector: String,
        /// The API failure.
        #[source]
        source: Box<ApiFailure>,
    },
    /// The Secret has no `release` key (not a Helm record).
    #[error("{secret}: no \"release\" key in data, not a Helm release record")]
    MissingRecord {
        /// The Secret.
        secret: ObjectRef,
    },
    /// The record could not be decoded.
    #[error("{secret}: cannot decode the release record")]
    Decode {
        /// The Secret.
        secret: ObjectRef,
        /// What the codec said.
        #[source]
        source: CodecError,
    },
    /// The record holds another release or revision than its Secret's name says.
    #[error("{secret}: holds the record of {found}")]
    Mismatch {
        /// The Secret.
        secret: ObjectRef,
        /// The key the record's own name and revision give.
        found: String,
    },
    /// The record could not be encoded.
    #[error("release {name:?} revision {version}: cannot encode the record")]
    Encode {
        /// Release name.
        name: String,
        /// Revision.
        version: i64,
        /// What the codec said.
        #[source]
        source: CodecError,
    },
    /// A release name that cannot be a label value (so no record can carry it).
    #[error("release name {name:?}: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// A revision below 1.
    #[error("release {name:?}: invalid revision {version}")]
    InvalidVersion {
        /// Release name.
        name: String,
        /// The revision.
        version: i64,
    },
    /// Pruning the history failed for some records (the others were deleted).
    #[error("release {name:?}: pruning history: {count} deletion error(s), the first")]
    Prune {
        /// Release name.
        name: String,
        /// How many deletions failed.
        count: usize,
        /// The first failure.
        #[source]
        first: Box<StorageError>,
    },
}

impl StorageError {
    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StorageError::NotFound { .. } => "not_found",
            StorageError::AlreadyExists { .. } => "already_exists",
            StorageError::Api { .. } | StorageError::List { .. } => "api",
            StorageError::MissingRecord { .. }
            | StorageError::Decode { .. }
            | StorageError::Mismatch { .. } => "unreadable_record",
            StorageError::Encode { .. } => "encode",
            StorageError::InvalidName { .. } | StorageError::InvalidVersion { .. } => "invalid",
            StorageError::Prune { .. } => "prune",
        }
    }

    /// Whether retrying later may help.
    pub fn is_transient(&self) -> bool {
        match self {
            StorageError::Api { source, .. } | StorageError::List { source, .. } => {
                source.is_transient()
            }
            StorageError::AlreadyExists { .. } => true,
            StorageError::Prune { first, .. } => first.is_transient(),
            _ => false,
        }
    }

    /// Whether the record did not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, StorageError::NotFound { .. })
    }
}

/// What [`SecretStorage::list`] found: the records it decoded and the Secrets it could not.
#[derive(Debug, Default)]
pub struct Listing {
    /// Decoded records, by name then revision.
    pub releases: Vec<Release>,
    /// Secrets labelled `owner=helm` that are not readable records.
    pub unreadable: Vec<StorageError>,
}

/// The records written through a journaled [`SecretStorage`] (created or updated, in write
/// order): what an action reports it wrote. Clones share the journal.
#[derive(Clone, Default)]
pub struct Journal(Arc<Mutex<Vec<Release>>>);

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Records hold values: only their number is shown.
        let records = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        f.debug_struct("Journal")
            .field("records", &records)
            .finish()
    }
}

impl Journal {
    /// Adds a record as the action leaves it without writing it (an uninstalled record the
    /// action then purged).
    pub fn push(&self, rls: &Release) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(rls.clone());
    }

    /// The record written last, as written.
    pub fn last(&self) -> Option<Release> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .last()
            .cloned()
    }

    /// The last state of each record, by revision.
    pub fn last_by_version(&self) -> BTreeMap<i64, Release> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|r| (r.version, r.clone()))
            .collect()
    }
}

/// Helm's Secret storage driver for one namespace (the release storage namespace).
#[derive(Clone)]
pub struct SecretStorage {
    api: Api<Secret>,
    namespace: String,
    journal: Option<Journal>,
}

impl std::fmt::Debug for SecretStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretStorage")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// `IsValidLabelValue`: at most 63 characters, alphanumeric at both ends, `-_.` inside.
pub fn check_label_value(value: &str) -> Result<(), &'static str> {
    if value.len() > 63 {
        return Err("must be no more than 63 characters to be a label value");
    }
    let bytes = value.as_bytes();
    let inner_ok = bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ends_ok = bytes.first().is_none_or(u8::is_ascii_alphanumeric)
        && bytes.last().is_none_or(u8::is_ascii_alphanumeric);
    if inner_ok && ends_ok {
        Ok(())
    } else {
        Err(
            "a label value must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        )
    }
}

fn check_name(name: &str) -> Result<(), StorageError> {
    if name.is_empty() {
        return Err(StorageError::InvalidName {
            name: name.to_owned(),
            reason: "must not be empty",
        });
    }
    check_label_value(name).map_err(|reason| StorageError::InvalidName {
        name: name.to_owned(),
        reason,
    })
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The status of a record, `unknown` when it has none.
pub fn status_of(rls: &Release) -> Status {
    rls.info
        .as_ref()
        .and_then(|i| i.status.clone())
        .unwrap_or(Status::Unknown)
}

/// The record in a Secret, checked against the Secret's name. `labels` are left empty.
pub fn decode_secret(secret: &Secret, namespace: &str) -> Result<Release, StorageError> {
    let key = secret.metadata.name.clone().unwrap_or_default();
    let secret_ref = secret_ref(
        secret.metadata.namespace.as_deref().unwrap_or(namespace),
        &key,
    );
    let Some(data) = secret.data.as_ref().and_then(|d| d.get(RELEASE_KEY)) else {
        return Err(StorageError::MissingRecord { secret: secret_ref });
    };
    // The value is ASCII base64; anything else fails the base64 step with the codec's message.
    let text = String::from_utf8_lossy(&data.0);
    let rls = record::decode_release(&text).map_err(|source| StorageError::Decode {
        secret: secret_ref.clone(),
        source,
    })?;
    let found = record::secret_name(&rls.name, rls.version);
    if found != key {
        return Err(StorageError::Mismatch {
            secret: secret_ref,
            found,
        });
    }
    Ok(rls)
}

/// The Secret holding `rls` in `namespace`, as Helm's `newSecretsObject` builds it for a
/// create or an update (labels: the release's own, then the system labels, then `createdAt`
/// or `modifiedAt`).
pub fn record_secret(
    rls: &Release,
    namespace: &str,
    op: StorageOp,
) -> Result<Secret, StorageError> {
    check_name(&rls.name)?;
    if rls.version < 1 {
        return Err(StorageError::InvalidVersion {
            name: rls.name.clone(),
            version: rls.version,
        });
    }
    let parts = record::secret_for(rls, op).map_err(|source| StorageError::Encode {
        name: rls.name.clone(),
        version: rls.version,
        source,
    })?;
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(parts.name),
            namespace: Some(namespace.to_owned()),
            labels: Some(parts.labels),
            ..ObjectMeta::default()
        },
        type_: Some(parts.secret_type.to_owned()),
        data: Some(BTreeMap::from([(
            RELEASE_KEY.to_owned(),
            ByteString(parts.release.into_bytes()),
        )])),
        ..Secret::default()
    })
}

fn secret_ref(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        api_version: "v1".to_owned(),
        kind: "Secret".to_owned(),
        namespace: Some(namespace.to_owned()),
        name: name.to_owned(),
    }
}

fn sort_by_version(releases: &mut [Release]) {
    releases.sort_by(|a, b| a.name.cmp(&b.name).then(a.version.cmp(&b.version)));
}

impl SecretStorage {
    /// The driver for records in `namespace`.
    pub fn new(client: Client, namespace: &str) -> SecretStorage {
        SecretStorage {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            journal: None,
        }
    }

    /// This driver, recording in `journal` every record it creates or updates (the
    /// transitions' writes included).
    pub fn with_journal(&self, journal: &Journal) -> SecretStorage {
        SecretStorage {
            journal: Some(journal.clone()),
            ..self.clone()
        }
    }

    fn journal(&self, rls: &Release) {
        if let Some(journal) = &self.journal {
            journal.push(rls);
        }
    }

    /// The storage namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// How messages name the record of `name` at `version`.
    pub fn secret_ref(&self, name: &str, version: i64) -> ObjectRef {
        secret_ref(&self.namespace, &record::secret_name(name, version))
    }

    /// `Get`: the record of `name` at `version`, with Helm's system labels filtered out of
    /// its labels.
    pub async fn get(&self, name: &str, version: i64) -> Result<Release, StorageError> {
        let secret_ref = self.secret_ref(name, version);
        let secret = match self.api.get(&secret_ref.name).await {
            Ok(s) => s,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(StorageError::NotFound { secret: secret_ref });
            }
            Err(e) => {
                return Err(StorageError::Api {
                    secret: secret_ref,
                    action: "get",
                    source: Box::new(e.into()),
                });
            }
        };
        let mut rls = decode_secret(&secret, &self.namespace)?;
        rls.labels = record::filter_system_labels(&secret.metadata.labels.unwrap_or_default());
        Ok(rls)
    }

    async fn query(&self, selector: String) -> Result<Vec<Secret>, StorageError> {
        match self
            .api
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(list) => Ok(list.items),
            Err(e) => Err(StorageError::List {
                namespace: self.namespace.clone(),
                selector,
                source: Box::new(e.into()),
            }),
        }
    }

    /// Decodes every Secret of a release-scoped query, failing on the first unreadable one.
    fn decode_all(&self, secrets: Vec<Secret>) -> Result<Vec<Release>, StorageError> {
        let mut out = Vec::with_capacity(secrets.len());
        for secret in secrets {
            let mut rls = decode_secret(&secret, &self.namespace)?;
            rls.labels = secret.metadata.labels.unwrap_or_default();
            out.push(rls);
        }
        sort_by_version(&mut out);
        Ok(out)
    }

    /// `History`: every record of `name` (labels `name=<name>,owner=helm`), oldest first.
    /// Empty when the release has none.
    pub async fn history(&self, name: &str) -> Result<Vec<Release>, StorageError> {
        check_name(name)?;
        let secrets = self.query(format!("name={name},owner={OWNER}")).await?;
        self.decode_all(secrets)
    }

    /// `Last`: the record with the highest revision, whatever its status.
    pub async fn last(&self, name: &str) -> Result<Option<Release>, StorageError> {
        Ok(self.history(name).await?.pop())
    }

    /// `DeployedAll`: the records labelled `status=deployed`, oldest first.
    pub async fn deployed_all(&self, name: &str) -> Result<Vec<Release>, StorageError> {
        check_name(name)?;
        let secrets = self
            .query(format!("name={name},owner={OWNER},status=deployed"))
            .await?;
        self.decode_all(secrets)
    }

    /// `Deployed`: the deployed record; when several are (concurrent writers), the highest
    /// revision.
    pub async fn deployed(&self, name: &str) -> Result<Option<Release>, StorageError> {
        Ok(self.deployed_all(name).await?.pop())
    }

    /// `List`: every record in the namespace (label `owner=helm`), by name then revision,
    /// and the Secrets carrying that label that are not readable records.
    pub async fn list(&self) -> Result<Listing, StorageError> {
        let secrets = self.query(format!("owner={OWNER}")).await?;
        let mut listing = Listing::default();
        for secret in secrets {
            match decode_secret(&secret, &self.namespace) {
                Ok(mut rls) => {
                    rls.labels = secret.metadata.labels.unwrap_or_default();
                    listing.releases.push(rls);
                }
                Err(e) => listing.unreadable.push(e),
            }
        }
        sort_by_version(&mut listing.releases);
        Ok(listing)
    }

    /// `Create`: a new record (label `createdAt`). Fails with
    /// [`StorageError::AlreadyExists`] when the revision is taken.
    pub async fn create(&self, rls: &Release) -> Result<(), StorageError> {
        let secret = record_secret(rls, &self.namespace, StorageOp::Create { at: unix_now() })?;
        let secret_ref = self.secret_ref(&rls.name, rls.version);
        match self.api.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                self.journal(rls);
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Err(StorageError::AlreadyExists { secret: secret_ref })
            }
            Err(e) => Err(StorageError::Api {
                secret: secret_ref,
                action: "create",
                source: Box::new(e.into()),
            }),
        }
    }

    /// Helm's `Storage.Create` with `MaxHistory = max_history`: when it is above 0, the
    /// oldest records are pruned first so that, with the new one, at most `max_history`
    /// remain (never the latest deployed one; see [`prune::least_recent`]). Returns the
    /// revisions pruned.
    pub async fn create_with_max_history(
        &self,
        rls: &Release,
        max_history: usize,
    ) -> Result<Vec<i64>, StorageError> {
        let pruned = match max_history {
            0 => Vec::new(),
            max => self.remove_least_recent(&rls.name, max - 1).await?,
        };
        self.create(rls).await?;
        Ok(pruned)
    }

    /// Helm's `removeLeastRecent`: deletes the oldest records until at most `maximum` are
    /// left, keeping the latest deployed one. Deletion failures do not stop the others; they
    /// are reported together. Returns the revisions deleted.
    pub async fn remove_least_recent(
        &self,
        name: &str,
        maximum: usize,
    ) -> Result<Vec<i64>, StorageError> {
        let history = self.history(name).await?;
        if history.len() <= maximum {
            return Ok(Vec::new());
        }
        let deployed = self.deployed(name).await?.map(|r| r.version);
        let doomed = prune::least_recent(&history, deployed, maximum);
        let mut deleted = Vec::with_capacity(doomed.len());
        let mut errors = Vec::new();
        for version in doomed {
            match self.delete(name, version).await {
                Ok(_) => deleted.push(version),
                Err(e) => errors.push(e),
            }
        }
        tracing::debug!(
            release = name,
            pruned = deleted.len(),
            errors = errors.len(),
            "pruned release history"
        );
        let count = errors.len();
        match errors.into_iter().next() {
            None => Ok(deleted),
            Some(first) if count == 1 => Err(first),
            Some(first) => Err(StorageError::Prune {
                name: name.to_owned(),
                count,
                first: Box::new(first),
            }),
        }
    }

    /// `Update`: rewrites the record (label `modifiedAt`), replacing the whole Secret.
    pub async fn update(&self, rls: &Release) -> Result<(), StorageError> {
        let secret = record_secret(rls, &self.namespace, StorageOp::Update { at: unix_now() })?;
        let secret_ref = self.secret_ref(&rls.name, rls.version);
        match self
            .api
            .replace(&secret_ref.name, &PostParams::default(), &secret)
            .await
        {
            Ok(_) => {
                self.journal(rls);
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                Err(StorageError::NotFound { secret: secret_ref })
            }
            Err(e) => Err(StorageError::Api {
                secret: secret_ref,
                action: "update",
                source: Box::new(e.into()),
            }),
        }
    }

    /// `Delete`: removes the record of `name` at `version` and returns it. The record is
    /// read first: a Secret that is not a readable record is left alone.
    pub async fn delete(&self, name: &str, version: i64) -> Result<Release, StorageError> {
        let rls = self.get(name, version).await?;
        let secret_ref = self.secret_ref(name, version);
        match self
            .api
            .delete(&secret_ref.name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(rls),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                Err(StorageError::NotFound { secret: secret_ref })
            }
            Err(e) => Err(StorageError::Api {
                secret: secret_ref,
                action: "delete",
                source: Box::new(e.into()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_chart::release::Info;

    fn secret(name: &str, data: Option<&[u8]>) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            data: data.map(|d| BTreeMap::from([(RELEASE_KEY.to_owned(), ByteString(d.to_vec()))])),
            ..Secret::default()
        }
    }

    fn release(name: &str, version: i64) -> Release {
        Release {
            name: name.to_owned(),
            version,
            info: Some(Info {
                status: Some(Status::Deployed),
                ..Info::default()
            }),
            ..Release::default()
        }
    }

    #[test]
    fn label_values_follow_kubernetes_rules() {
        for ok in ["", "a", "my-release", "a.b_c-9", &"x".repeat(63)] {
            assert_eq!(check_label_value(ok), Ok(()), "{ok}");
        }
        for bad in ["-a", "a-", "a b", "a/b", &"x".repeat(64), "é"] {
            assert!(check_label_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_secret_without_a_release_key_is_not_a_record() {
        let err = decode_secret(&secret("sh.helm.release.v1.x.v1", None), "apps").unwrap_err();
        assert_eq!(
            err.to_string(),
            "Secret apps/sh.helm.release.v1.x.v1: no \"release\" key in data, not a Helm release record"
        );
    }

    #[test]
    fn garbled_data_is_an_error_naming_the_secret() {
        for data in [
            &b"not base64 at all!"[..],
            b"\xff\xfe",
            b"H4sIAAAA",
            b"e30K",
        ] {
            let err =
                decode_secret(&secret("sh.helm.release.v1.x.v2", Some(data)), "apps").unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("Secret apps/sh.helm.release.v1.x.v2: "),
                "{err}"
            );
            assert_eq!(err.kind(), "unreadable_record");
        }
    }

    #[test]
    fn a_huge_release_record_is_refused_naming_the_secret_without_decoding_it_all() {
        use std::io::Write as _;
        // 100 MiB of JSON in well under a Secret's 1 MiB.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(b"{\"name\":\"x\",\"manifest\":\"").unwrap();
        let block = vec![b'a'; 1 << 20];
        for _ in 0..100 {
            gz.write_all(&block).unwrap();
        }
        gz.write_all(b"\"}").unwrap();
        let bomb = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            gz.finish().unwrap(),
        );
        assert!(bomb.len() < 1 << 20);
        let err = decode_secret(
            &secret("sh.helm.release.v1.x.v1", Some(bomb.as_bytes())),
            "apps",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Secret apps/sh.helm.release.v1.x.v1: cannot decode the release record"
        );
        assert!(
            matches!(
                err,
                StorageError::Decode {
                    source: CodecError::TooLarge,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.kind(), "unreadable_record");
    }

    #[test]
    fn a_record_under_another_key_is_a_mismatch() {
        let enc = record::encode_release(&release("x", 3)).unwrap();
        let ok = decode_secret(
            &secret("sh.helm.release.v1.x.v3", Some(enc.as_bytes())),
            "a",
        );
        assert_eq!(ok.unwrap().version, 3);
        let err = decode_secret(
            &secret("sh.helm.release.v1.x.v4", Some(enc.as_bytes())),
            "a",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Secret a/sh.helm.release.v1.x.v4: holds the record of sh.helm.release.v1.x.v3"
        );
    }

    #[test]
    fn a_record_secret_carries_helms_labels_over_the_releases_own() {
        let mut r = release("web", 4);
        r.labels = BTreeMap::from(
            [("team", "payments"), ("status", "mine"), ("createdAt", "1")]
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        let s = record_secret(&r, "apps", StorageOp::Create { at: 1_763_700_000 }).unwrap();
        assert_eq!(
            s.metadata.name.as_deref(),
            Some("sh.helm.release.v1.web.v4")
        );
        assert_eq!(s.metadata.namespace.as_deref(), Some("apps"));
        assert_eq!(s.type_.as_deref(), Some("helm.sh/release.v1"));
        let labels = s.metadata.labels.clone().unwrap_or_default();
        let want = [
            ("createdAt", "1763700000"),
            ("name", "web"),
            ("owner", "helm"),
            ("status", "deployed"),
            ("team", "payments"),
            ("version", "4"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        assert_eq!(labels, BTreeMap::from(want));
        let mut back = decode_secret(&s, "apps").unwrap();
        assert!(back.labels.is_empty(), "labels are not in the JSON");
        back.labels = r.labels.clone();
        assert_eq!(back, r);

        let update = record_secret(&r, "apps", StorageOp::Update { at: 7 }).unwrap();
        let labels = update.metadata.labels.unwrap_or_default();
        assert_eq!(labels.get("modifiedAt").map(String::as_str), Some("7"));
        assert_eq!(
            labels.get("createdAt").map(String::as_str),
            Some("1"),
            "a createdAt carried in the release's labels stays, as with Helm"
        );
    }

    #[test]
    fn records_that_no_label_can_name_are_refused_before_any_request() {
        for (name, version, want) in [
            ("", 1, "release name \"\": must not be empty"),
            (
                "Web_",
                1,
                "release name \"Web_\": a label value must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            ),
            ("web", 0, "release \"web\": invalid revision 0"),
        ] {
            let err = record_secret(&release(name, version), "apps", StorageOp::Create { at: 0 })
                .unwrap_err();
            assert_eq!(err.to_string(), want);
            assert_eq!(err.kind(), "invalid");
        }
    }

    #[test]
    fn a_journal_keeps_the_last_state_of_each_revision_and_shows_no_values() {
        let journal = Journal::default();
        let shared = journal.clone();
        let mut v2 = release("web", 2);
        v2.config.insert("password".to_owned(), "hunter2".into());
        journal.push(&release("web", 1));
        shared.push(&v2);
        v2.info = Some(Info {
            status: Some(Status::Failed),
            ..Info::default()
        });
        journal.push(&v2);
        let last = journal.last_by_version();
        assert_eq!(last.keys().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(status_of(&last[&2]), Status::Failed, "the last write wins");
        assert_eq!(format!("{journal:?}"), "Journal { records: 3 }");
    }

    #[test]
    fn records_are_sorted_by_name_then_revision() {
        let mut v = vec![release("b", 1), release("a", 10), release("a", 9)];
        sort_by_version(&mut v);
        let keys: Vec<_> = v.iter().map(|r| (r.name.as_str(), r.version)).collect();
        assert_eq!(keys, [("a", 9), ("a", 10), ("b", 1)]);
    }
}
