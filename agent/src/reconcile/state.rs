//! The per-release plan store, kept in the workload cluster so an agent restart resumes
//! every held plan with no hub and no files: one Secret per HelmRelease in the agent's
//! namespace holding the plan (with its values, hence a Secret), the HelmRelease status
//! core computes (counters, history snapshots, handled tokens, conditions), the sequence
//! number of the last status report and a deletion in progress.
//!
//! - Names: `flotilla-release-<prefix>-<hash>`, where `<prefix>` is a readable, DNS-safe
//!   prefix of `<namespace>-<name>` (at most [`NAME_PREFIX_MAX`] characters) and `<hash>`
//!   the first 16 hex digits of the sha256 of `<namespace>/<name>`: always a valid Secret
//!   name, at most 253 characters, and HelmReleases whose joined names coincide (`a-b/c`,
//!   `a/b-c`) get different Secrets ([`secret_name`]).
//! - Secrets are typed [`STATE_SECRET_TYPE`], labelled [`STATE_LABEL`]` = "true"` (what
//!   [`StateStore::list`] selects) and with the HelmRelease's owner labels (its name only
//!   when it fits a label value), and annotated [`OBJECT_ANNOTATION`]` = <namespace>/<name>`.
//!   The stored plan is the source of truth for the key.
//! - Data: [`STATE_KEY`] holds the gzip-compressed JSON of the whole [`PersistedState`],
//!   [`FORMAT_KEY`] the format version ([`FORMAT`]). A state whose compressed form exceeds
//!   [`STATE_LIMIT`] (a Secret holds 1 MiB) is refused with [`StateError::TooLarge`] before
//!   anything is written ([`StateStore::check_size`]).
//! - Optimistic concurrency: the store remembers, per HelmRelease, the `resourceVersion`
//!   and the digest of the state it last read or wrote. Writes create the Secret when none
//!   is known and replace it with that `resourceVersion` otherwise; deletes carry it as a
//!   precondition. A Secret changed by someone else since makes the write a
//!   [`StateError::Conflict`] (transient: the next attempt reads again).
//! - A write of the state last read or written is skipped: no API call.
//!
//! Nothing here logs or puts in an error the contents of a state.

// Errors name their object for people; they are built on the failure path only, so their
// size does not matter.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::sync::{Arc, Mutex, PoisonError};

use flotilla_core::agent::{DeleteRequest, ObjectKey};
use flotilla_core::digest::Algorithm;
use flotilla_core::plan::ReleasePlan;
use flotilla_core::status::HelmReleaseStatus;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use serde::{Deserialize, Serialize};

use crate::kube::{AGENT_FIELD_MANAGER, ApiFailure, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL};

/// The `type` of controller state Secrets.
pub const STATE_SECRET_TYPE: &str = "flotilla.dev/release-state";
/// Label marking controller state Secrets (value `"true"`).
pub const STATE_LABEL: &str = "flotilla.dev/release-state";
/// Annotation holding the HelmRelease's `namespace/name` (for people: the stored plan is
/// the source of truth).
pub const OBJECT_ANNOTATION: &str = "flotilla.dev/helm-release";
/// Data key of the gzip-compressed JSON state.
pub const STATE_KEY: &str = "state";
/// Data key of the format version.
pub const FORMAT_KEY: &str = "format";
/// The format version this agent writes and reads.
pub const FORMAT: &str = "1";
/// The most bytes of compressed state a Secret is given: the API server refuses Secrets
/// whose data exceeds 1 MiB; 16 KiB are left for the other key and slack.
pub const STATE_LIMIT: usize = 1024 * 1024 - 16 * 1024;
/// The most bytes of uncompressed JSON state: a bound on what decoding a Secret may
/// allocate (a few bytes of gzip can expand to a great many).
pub const JSON_LIMIT: usize = 256 * 1024 * 1024;
/// The longest readable prefix in a Secret name.
pub const NAME_PREFIX_MAX: usize = 100;
/// Hex digits of the name hash in a Secret name.
const NAME_HASH_LEN: usize = 16;
const NAME_START: &str = "flotilla-release-";
/// The longest label value.
const LABEL_VALUE_MAX: usize = 63;
/// Secrets per page when listing.
const LIST_PAGE: u32 = 50;

/// Why a state Secret does not decode. Never carries the contents.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// A data key is missing.
    #[error("no data key {key:?}")]
    Missing {
        /// The key.
        key: &'static str,
    },
    /// The format version is not [`FORMAT`].
    #[error("data key {FORMAT_KEY:?} is not format {FORMAT} (the one this agent reads)")]
    Format,
    /// The state is not gzip.
    #[error("data key {STATE_KEY:?} is not gzip")]
    Gzip(#[source] std::io::Error),
    /// The state expands beyond [`JSON_LIMIT`].
    #[error(
        "data key {STATE_KEY:?} expands to more than {} of JSON",
        human_size(JSON_LIMIT)
    )]
    Expands,
    /// The JSON does not decode; only where is kept (serde's messages may quote values).
    #[error("data key {STATE_KEY:?}: JSON {category} error at line {line} column {column}")]
    Json {
        /// `syntax`, `data`, `eof` or `io`.
        category: &'static str,
        /// Line of the error.
        line: usize,
        /// Column of the error.
        column: usize,
    },
}

/// Errors reading or writing the controller state; each names the HelmRelease (when
/// known) and the Secret.
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
    /// Listing the state Secrets failed.
    #[error("listing the state Secrets of namespace {namespace}")]
    List {
        /// The agent namespace.
        namespace: String,
        /// The API server's answer.
        #[source]
        source: ApiFailure,
    },
    /// The stored state does not decode.
    #[error("{}state Secret {namespace}/{secret} does not decode", helm_release_prefix(.object))]
    Decode {
        /// `namespace/name` of the HelmRelease, when known (asked for, or the Secret's
        /// annotation).
        object: Option<String>,
        /// The agent namespace.
        namespace: String,
        /// The Secret.
        secret: String,
        /// What is wrong.
        #[source]
        source: DecodeError,
    },
    /// The Secret holds the state of another HelmRelease than its name says (a hash
    /// collision, or a Secret copied by hand).
    #[error(
        "HelmRelease {object}: state Secret {namespace}/{secret} holds the state of HelmRelease {found}"
    )]
    Mismatch {
        /// `namespace/name` of the HelmRelease asked for, or the Secret's annotation when
        /// listing.
        object: String,
        /// The agent namespace.
        namespace: String,
        /// The Secret.
        secret: String,
        /// `namespace/name` of the plan it holds.
        found: String,
    },
    /// The Secret changed (or went) since this store last read or wrote it.
    #[error(
        "HelmRelease {object}: {op} of its state Secret {namespace}/{secret} refused: it changed since it was read"
    )]
    Conflict {
        /// `namespace/name` of the HelmRelease.
        object: String,
        /// The agent namespace.
        namespace: String,
        /// The Secret.
        secret: String,
        /// `write` or `delete`.
        op: &'static str,
    },
    /// The encoded state does not fit in a Secret.
    #[error("HelmRelease {object}: state is {}", too_large(*.size, *.limit))]
    TooLarge {
        /// `namespace/name` of the HelmRelease.
        object: String,
        /// Its size in bytes: compressed, or the JSON when `limit` is [`JSON_LIMIT`].
        size: usize,
        /// The limit it exceeds: [`STATE_LIMIT`] or [`JSON_LIMIT`].
        limit: usize,
    },
}

fn helm_release_prefix(object: &Option<String>) -> String {
    match object {
        Some(o) => format!("HelmRelease {o}: "),
        None => String::new(),
    }
}

fn too_large(size: usize, limit: usize) -> String {
    if limit == JSON_LIMIT {
        format!(
            "{} of JSON, more than the {} an agent reads back",
            human_size(size),
            human_size(limit)
        )
    } else {
        format!(
            "{} compressed, more than the {} a Secret holds",
            human_size(size),
            human_size(limit)
        )
    }
}

/// `1.3 MiB`, `1008 KiB`, `12 bytes`.
fn human_size(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    // Sizes here are far below 2^52: the conversions are exact enough for one decimal.
    if bytes >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    } else if bytes >= KIB {
        format!("{} KiB", bytes.div_ceil(KIB))
    } else {
        format!("{bytes} bytes")
    }
}

impl StateError {
    /// A bounded label.
    pub fn kind(&self) -> &'static str {
        match self {
            StateError::Api { .. } | StateError::List { .. } => "state_api",
            StateError::Decode { .. } | StateError::Mismatch { .. } => "state_decode",
            StateError::Conflict { .. } => "state_conflict",
            StateError::TooLarge { .. } => "state_too_large",
        }
    }

    /// Whether a retry may help.
    pub fn is_transient(&self) -> bool {
        match self {
            StateError::Api { source, .. } | StateError::List { source, .. } => {
                source.is_transient()
            }
            StateError::Conflict { .. } => true,
            StateError::Decode { .. }
            | StateError::Mismatch { .. }
            | StateError::TooLarge { .. } => false,
        }
    }
}

/// What is persisted for one release.
#[derive(Debug, Clone, PartialEq)]
pub struct PersistedState {
    /// The plan last reconciled (or accepted).
    pub plan: ReleasePlan,
    /// The controller state after it.
    pub status: HelmReleaseStatus,
    /// Sequence number of the last status report (grows per release).
    pub seq: u64,
    /// A deletion in progress.
    pub deleting: Option<DeleteRequest>,
}

/// The stored JSON, written from borrows.
#[derive(Serialize)]
struct StoredRef<'a> {
    plan: &'a ReleasePlan,
    status: &'a HelmReleaseStatus,
    seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    deleting: Option<&'a DeleteRequest>,
}

/// The stored JSON, read.
#[derive(Deserialize)]
struct Stored {
    plan: ReleasePlan,
    #[serde(default)]
    status: HelmReleaseStatus,
    #[serde(default)]
    seq: u64,
    #[serde(default)]
    deleting: Option<DeleteRequest>,
}

/// What the store remembers of a Secret it last read or wrote.
#[derive(Debug, Clone)]
struct Known {
    resource_version: String,
    /// Digest of the state's JSON; `None` when it did not decode.
    digest: Option<StateDigest>,
    seq: u64,
    deleting: Option<DeleteRequest>,
}

/// The controller state Secrets of one agent namespace. Clones share what the store
/// remembers of the Secrets.
#[derive(Clone)]
pub struct StateStore {
    api: Api<Secret>,
    namespace: String,
    known: Arc<Mutex<HashMap<ObjectKey, Known>>>,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// The state Secret's name for a HelmRelease: `flotilla-release-<prefix>-<hash>` (see
/// the module documentation); a valid Secret name of at most 253 characters.
pub fn secret_name(object: &ObjectKey) -> String {
    let joined = format!("{}-{}", object.namespace, object.name);
    let mut prefix: String = joined
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' => c,
            _ => '-',
        })
        .take(NAME_PREFIX_MAX)
        .collect();
    let kept = prefix.trim_end_matches('-').len();
    prefix.truncate(kept);
    let hash = Algorithm::Sha256.digest(object.to_string().as_bytes());
    let hash = &hash.hex()[..NAME_HASH_LEN];
    if prefix.is_empty() {
        format!("{NAME_START}{hash}")
    } else {
        format!("{NAME_START}{prefix}-{hash}")
    }
}

fn to_json(
    plan: &ReleasePlan,
    status: &HelmReleaseStatus,
    seq: u64,
    deleting: Option<&DeleteRequest>,
) -> Vec<u8> {
    serde_json::to_vec(&StoredRef {
        plan,
        status,
        seq,
        deleting,
    })
    .expect("a state is plain data with string map keys: it serializes")
}

/// The sha256 of a state's JSON, what a write of the same state skips on. Held as its
/// bytes, not as a hex [`flotilla_core::digest::Digest`]: no allocation per release kept
/// between writes.
type StateDigest = [u8; 32];

fn digest_of(json: &[u8]) -> StateDigest {
    use sha2::Digest as _;
    sha2::Sha256::digest(json).into()
}

/// Compresses the JSON and checks both sizes.
fn compress(object: &ObjectKey, json: &[u8]) -> Result<Vec<u8>, StateError> {
    if json.len() > JSON_LIMIT {
        return Err(StateError::TooLarge {
            object: object.to_string(),
            size: json.len(),
            limit: JSON_LIMIT,
        });
    }
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::default());
    gz.write_all(json)
        .expect("compressing into memory cannot fail");
    let gzip = gz.finish().expect("compressing into memory cannot fail");
    if gzip.len() > STATE_LIMIT {
        return Err(StateError::TooLarge {
            object: object.to_string(),
            size: gzip.len(),
            limit: STATE_LIMIT,
        });
    }
    Ok(gzip)
}

/// Encodes a state as it is stored (gzip-compressed JSON), refusing one too large.
fn encode(state: &PersistedState) -> Result<Vec<u8>, StateError> {
    let json = to_json(
        &state.plan,
        &state.status,
        state.seq,
        state.deleting.as_ref(),
    );
    compress(&state.plan.object.key(), &json)
}

/// Decodes a Secret's data: the state and the digest of its JSON.
fn decode(
    data: &BTreeMap<String, ByteString>,
) -> Result<(PersistedState, StateDigest), DecodeError> {
    let format = data
        .get(FORMAT_KEY)
        .ok_or(DecodeError::Missing { key: FORMAT_KEY })?;
    if format.0 != FORMAT.as_bytes() {
        return Err(DecodeError::Format);
    }
    let gzip = data
        .get(STATE_KEY)
        .ok_or(DecodeError::Missing { key: STATE_KEY })?;
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(gzip.0.as_slice())
        .take(JSON_LIMIT as u64 + 1)
        .read_to_end(&mut json)
        .map_err(DecodeError::Gzip)?;
    if json.len() > JSON_LIMIT {
        return Err(DecodeError::Expands);
    }
    let stored: Stored = serde_json::from_slice(&json).map_err(|e| DecodeError::Json {
        category: match e.classify() {
            serde_json::error::Category::Io => "io",
            serde_json::error::Category::Syntax => "syntax",
            serde_json::error::Category::Data => "data",
            serde_json::error::Category::Eof => "eof",
        },
        line: e.line(),
        column: e.column(),
    })?;
    let state = PersistedState {
        plan: stored.plan,
        status: stored.status,
        seq: stored.seq,
        deleting: stored.deleting,
    };
    Ok((state, digest_of(&json)))
}

/// The Secret of a state.
fn secret_of(
    object: &ObjectKey,
    namespace: &str,
    gzip: Vec<u8>,
    resource_version: Option<String>,
) -> Secret {
    let mut labels = BTreeMap::from([
        (STATE_LABEL.to_owned(), "true".to_owned()),
        (
            OWNER_NAMESPACE_LABEL.to_owned(),
            object.namespace.to_string(),
        ),
    ]);
    // An object name is a DNS subdomain: a valid label value when short enough.
    if object.name.as_str().len() <= LABEL_VALUE_MAX {
        labels.insert(OWNER_NAME_LABEL.to_owned(), object.name.to_string());
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(object)),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                OBJECT_ANNOTATION.to_owned(),
                object.to_string(),
            )])),
            resource_version,
            ..ObjectMeta::default()
        },
        type_: Some(STATE_SECRET_TYPE.to_owned()),
        data: Some(BTreeMap::from([
            (STATE_KEY.to_owned(), ByteString(gzip)),
            (
                FORMAT_KEY.to_owned(),
                ByteString(FORMAT.as_bytes().to_vec()),
            ),
        ])),
        ..Secret::default()
    }
}

fn is_code(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl StateStore {
    /// The store in the agent's namespace.
    pub fn new(client: Client, namespace: &str) -> StateStore {
        StateStore {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            known: Arc::default(),
        }
    }

    /// The agent namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Known>> {
        // The map is consistent after any panic (single inserts and removes).
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn remember(&self, object: &ObjectKey, known: Known) {
        let mut map = self.known();
        match map.get_mut(object) {
            // The key already held is kept: a new copy would be one more small allocation
            // living until the next write, amid a reconcile's garbage (see
            // `crate::memory`).
            Some(old) => *old = known,
            None => {
                map.insert(object.clone(), known);
            }
        }
    }

    fn forget(&self, object: &ObjectKey) {
        self.known().remove(object);
    }

    fn api_error(&self, object: &ObjectKey, op: &'static str, e: kube::Error) -> StateError {
        StateError::Api {
            object: object.to_string(),
            namespace: self.namespace.clone(),
            secret: secret_name(object),
            op,
            source: ApiFailure(e),
        }
    }

    fn conflict(&self, object: &ObjectKey, op: &'static str) -> StateError {
        self.forget(object);
        StateError::Conflict {
            object: object.to_string(),
            namespace: self.namespace.clone(),
            secret: secret_name(object),
            op,
        }
    }

    /// Decodes a Secret read from the API, remembering it under `object` (the key asked
    /// for, or the one its name says).
    fn read(&self, object: &ObjectKey, secret: Secret) -> Result<PersistedState, StateError> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let resource_version = secret.metadata.resource_version.clone().unwrap_or_default();
        let decoded = decode(&secret.data.unwrap_or_default());
        let (state, digest) = match decoded {
            Ok(d) => d,
            Err(source) => {
                // Remembered, so a whole new state can replace it.
                self.remember(
                    object,
                    Known {
                        resource_version,
                        digest: None,
                        seq: 0,
                        deleting: None,
                    },
                );
                return Err(StateError::Decode {
                    object: Some(object.to_string()),
                    namespace: self.namespace.clone(),
                    secret: name,
                    source,
                });
            }
        };
        let found = state.plan.object.key();
        if &found != object {
            // Remembered too: the name is this HelmRelease's, a new state may replace it.
            self.remember(
                object,
                Known {
                    resource_version,
                    digest: None,
                    seq: 0,
                    deleting: None,
                },
            );
            return Err(StateError::Mismatch {
                object: object.to_string(),
                namespace: self.namespace.clone(),
                secret: name,
                found: found.to_string(),
            });
        }
        self.remember(
            object,
            Known {
                resource_version,
                digest: Some(digest),
                seq: state.seq,
                deleting: state.deleting.clone(),
            },
        );
        Ok(state)
    }

    /// Every persisted state in the namespace (by label), for resuming on start. A Secret
    /// that does not decode (or holds another HelmRelease's state than its name says) is
    /// an error in the second vector, naming the Secret; the others still load.
    pub async fn list(&self) -> Result<(Vec<PersistedState>, Vec<StateError>), StateError> {
        let mut states = Vec::new();
        let mut errors = Vec::new();
        let mut params = ListParams::default()
            .labels(&format!("{STATE_LABEL}=true"))
            .limit(LIST_PAGE);
        loop {
            let page = self.api.list(&params).await.map_err(|e| StateError::List {
                namespace: self.namespace.clone(),
                source: ApiFailure(e),
            })?;
            for secret in page.items {
                match self.read_listed(secret) {
                    Ok(state) => states.push(state),
                    Err(e) => errors.push(e),
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params.continue_token = Some(token),
                None => break,
            }
        }
        Ok((states, errors))
    }

    fn read_listed(&self, secret: Secret) -> Result<PersistedState, StateError> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let annotated = secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(OBJECT_ANNOTATION))
            .cloned();
        let (state, digest) =
            decode(secret.data.as_ref().unwrap_or(&BTreeMap::new())).map_err(|source| {
                StateError::Decode {
                    object: annotated.clone(),
                    namespace: self.namespace.clone(),
                    secret: name.clone(),
                    source,
                }
            })?;
        let object = state.plan.object.key();
        if secret_name(&object) != name {
            return Err(StateError::Mismatch {
                object: annotated.unwrap_or_else(|| "(not annotated)".to_owned()),
                namespace: self.namespace.clone(),
                secret: name,
                found: object.to_string(),
            });
        }
        self.remember(
            &object,
            Known {
                resource_version: secret.metadata.resource_version.unwrap_or_default(),
                digest: Some(digest),
                seq: state.seq,
                deleting: state.deleting.clone(),
            },
        );
        Ok(state)
    }

    /// The persisted state of a HelmRelease, `None` when there is none.
    pub async fn load(&self, object: &ObjectKey) -> Result<Option<PersistedState>, StateError> {
        let name = secret_name(object);
        let Some(secret) = self
            .api
            .get_opt(&name)
            .await
            .map_err(|e| self.api_error(object, "read", e))?
        else {
            self.forget(object);
            return Ok(None);
        };
        self.read(object, secret).map(Some)
    }

    /// Writes the plan and status, keeping the stored `seq` and `deleting` (those this
    /// store last read or wrote; read first when it knows none). A stored state that does
    /// not decode has none to keep: that is the read's error, and only [`Self::put`]
    /// replaces it.
    pub async fn save(
        &self,
        plan: &ReleasePlan,
        status: &HelmReleaseStatus,
    ) -> Result<(), StateError> {
        let object = plan.object.key();
        let mut known = self.known().get(&object).cloned();
        if known.as_ref().is_none_or(|k| k.digest.is_none()) {
            self.load(&object).await?;
            known = self.known().get(&object).cloned();
        }
        let (seq, deleting) = known
            .as_ref()
            .map(|k| (k.seq, k.deleting.as_ref()))
            .unwrap_or_default();
        let json = to_json(plan, status, seq, deleting);
        self.write(&object, known.as_ref(), json, seq, deleting.cloned())
            .await
    }

    /// Writes a whole state.
    pub async fn put(&self, state: &PersistedState) -> Result<(), StateError> {
        let object = state.plan.object.key();
        let known = self.known().get(&object).cloned();
        let json = to_json(
            &state.plan,
            &state.status,
            state.seq,
            state.deleting.as_ref(),
        );
        self.write(
            &object,
            known.as_ref(),
            json,
            state.seq,
            state.deleting.clone(),
        )
        .await
    }

    /// Creates or replaces the Secret with `json`, unless it is what `known` holds.
    async fn write(
        &self,
        object: &ObjectKey,
        known: Option<&Known>,
        json: Vec<u8>,
        seq: u64,
        deleting: Option<DeleteRequest>,
    ) -> Result<(), StateError> {
        let digest = digest_of(&json);
        if known.and_then(|k| k.digest.as_ref()) == Some(&digest) {
            return Ok(());
        }
        let gzip = compress(object, &json)?;
        drop(json);
        let name = secret_name(object);
        let params = PostParams {
            field_manager: Some(AGENT_FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        let result = match known {
            Some(k) => {
                let secret = secret_of(
                    object,
                    &self.namespace,
                    gzip,
                    Some(k.resource_version.clone()),
                );
                self.api.replace(&name, &params, &secret).await
            }
            None => {
                let secret = secret_of(object, &self.namespace, gzip, None);
                self.api.create(&params, &secret).await
            }
        };
        match result {
            Ok(written) => {
                self.remember(
                    object,
                    Known {
                        resource_version: written.metadata.resource_version.unwrap_or_default(),
                        digest: Some(digest),
                        seq,
                        deleting,
                    },
                );
                Ok(())
            }
            // 409: changed since read (replace) or created by someone else (create);
            // 404: deleted since read.
            Err(e) if is_code(&e, 409) || (known.is_some() && is_code(&e, 404)) => {
                Err(self.conflict(object, "write"))
            }
            Err(e) => Err(self.api_error(object, "write", e)),
        }
    }

    /// Forgets a HelmRelease (after its uninstall on deletion), with the
    /// `resourceVersion` last read or written as a precondition when there is one.
    pub async fn delete(&self, object: &ObjectKey) -> Result<(), StateError> {
        let resource_version = self.known().get(object).map(|k| k.resource_version.clone());
        let params = DeleteParams {
            preconditions: resource_version.map(|rv| Preconditions {
                resource_version: Some(rv),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(&secret_name(object), &params).await {
            Ok(_) => {
                self.forget(object);
                Ok(())
            }
            Err(e) if is_code(&e, 404) => {
                self.forget(object);
                Ok(())
            }
            Err(e) if is_code(&e, 409) => Err(self.conflict(object, "delete")),
            Err(e) => Err(self.api_error(object, "delete", e)),
        }
    }

    /// Encodes a state as it would be stored and checks it fits, without writing: a plan
    /// too large to persist is refused before it replaces a working one.
    pub fn check_size(&self, state: &PersistedState) -> Result<(), StateError> {
        encode(state).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use flotilla_core::ids::{PlanRevision, check_dns1123_subdomain};
    use flotilla_core::plan::ChartArtifact;
    use flotilla_core::spec::HelmRelease;
    use serde_json::{Value, json};

    use super::*;

    fn key(namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            namespace: namespace.parse().expect("a namespace"),
            name: name.parse().expect("an object name"),
        }
    }

    fn plan(namespace: &str, name: &str, values: Value) -> ReleasePlan {
        let hr = HelmRelease::from_value(json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": name, "namespace": namespace, "generation": 3},
            "spec": {
                "interval": "5m",
                "chart": {"spec": {"chart": "demo", "sourceRef": {"kind": "HelmRepository", "name": "demo"}}},
            }
        }))
        .expect("a HelmRelease");
        let chart = ChartArtifact {
            name: "demo".into(),
            version: "1.0.0".into(),
            app_version: None,
            digest: flotilla_core::ids::ChartDigest::of_bytes(b"demo"),
            oci_digest: None,
        };
        ReleasePlan::from_helm_release(&hr, PlanRevision::FIRST, chart, values).expect("a plan")
    }

    fn state(values: Value) -> PersistedState {
        let plan = plan("default", "demo", values);
        PersistedState {
            deleting: Some(DeleteRequest {
                object: plan.object.key(),
                revision: PlanRevision::FIRST,
                uninstall: None,
            }),
            plan,
            status: HelmReleaseStatus {
                observed_generation: 2,
                ..HelmReleaseStatus::default()
            },
            seq: 7,
        }
    }

    /// `len` characters of `[A-Za-z0-9_-]` from a xorshift generator: all but
    /// incompressible.
    fn noise(len: usize) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(ALPHABET[(x % 64) as usize])
            })
            .collect()
    }

    #[test]
    fn names_that_joined_the_same_under_the_old_scheme_get_different_secrets() {
        let a = secret_name(&key("a-b", "c"));
        let b = secret_name(&key("a", "b-c"));
        assert_ne!(a, b);
        assert!(a.starts_with("flotilla-release-a-b-c-"), "{a}");
        assert!(b.starts_with("flotilla-release-a-b-c-"), "{b}");
        for name in [&a, &b] {
            check_dns1123_subdomain("Secret name", name).expect("a valid Secret name");
        }
    }

    #[test]
    fn the_name_of_the_longest_helm_release_is_a_bounded_valid_secret_name() {
        let long_ns = "n".repeat(63);
        let long_name = format!("{}.{}", "x".repeat(126), "y".repeat(126));
        assert_eq!(long_name.len(), 253);
        let first = secret_name(&key(&long_ns, &long_name));
        let other = secret_name(&key(
            &long_ns,
            &format!("{}.{}", "x".repeat(126), "z".repeat(126)),
        ));
        for name in [&first, &other] {
            assert!(name.len() <= 253, "{} characters", name.len());
            check_dns1123_subdomain("Secret name", name).expect("a valid Secret name");
        }
        assert_ne!(
            first, other,
            "names sharing a long prefix differ by their hash"
        );
    }

    #[test]
    fn a_name_is_stable_readable_and_ends_with_sixteen_hex_digits() {
        let name = secret_name(&key("default", "podinfo.web"));
        assert_eq!(name, secret_name(&key("default", "podinfo.web")));
        let (prefix, hash) = name.rsplit_once('-').expect("a hash suffix");
        assert_eq!(prefix, "flotilla-release-default-podinfo-web");
        assert_eq!(hash.len(), 16);
        assert!(
            hash.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }

    #[test]
    fn a_state_round_trips_through_its_encoding() {
        let state = state(json!({"replicas": 2, "nested": {"list": [1, "two", null]}}));
        let gzip = encode(&state).expect("fits");
        let secret = secret_of(&state.plan.object.key(), "flotilla", gzip, None);
        let data = secret.data.expect("data");
        assert_eq!(data[FORMAT_KEY].0, b"1");
        assert_eq!(&data[STATE_KEY].0[..2], &[0x1f, 0x8b], "gzip");
        let (decoded, digest) = decode(&data).expect("decodes");
        assert_eq!(decoded, state);
        let json = to_json(
            &state.plan,
            &state.status,
            state.seq,
            state.deleting.as_ref(),
        );
        assert_eq!(
            digest,
            digest_of(&json),
            "the digest a write of the same state skips on"
        );
    }

    #[test]
    fn a_secret_is_labelled_for_listing_and_annotated_with_its_helm_release() {
        let long = "x".repeat(64);
        let secret = secret_of(&key("apps", &long), "flotilla", Vec::new(), None);
        let labels = secret.metadata.labels.expect("labels");
        assert_eq!(labels[STATE_LABEL], "true");
        assert_eq!(labels[OWNER_NAMESPACE_LABEL], "apps");
        assert!(
            !labels.contains_key(OWNER_NAME_LABEL),
            "a name longer than a label value is only in the annotation"
        );
        let annotations = secret.metadata.annotations.expect("annotations");
        assert_eq!(annotations[OBJECT_ANNOTATION], format!("apps/{long}"));
        assert_eq!(secret.type_.as_deref(), Some(STATE_SECRET_TYPE));

        let secret = secret_of(&key("apps", "web"), "flotilla", Vec::new(), None);
        assert_eq!(
            secret.metadata.labels.expect("labels")[OWNER_NAME_LABEL],
            "web"
        );
    }

    #[test]
    fn a_state_larger_than_a_secret_holds_is_refused_as_too_large() {
        let state = state(json!({"blob": noise(2 * 1024 * 1024)}));
        let err = encode(&state).expect_err("too large");
        let StateError::TooLarge {
            object,
            size,
            limit,
        } = &err
        else {
            panic!("not TooLarge: {err}");
        };
        assert_eq!(object, "default/demo");
        assert_eq!(*limit, STATE_LIMIT);
        assert!(*size > STATE_LIMIT);
        assert_eq!(err.kind(), "state_too_large");
        assert!(!err.is_transient());
        let message = err.to_string();
        assert!(
            message.starts_with("HelmRelease default/demo: state is 1.")
                && message.ends_with(" MiB compressed, more than the 1008 KiB a Secret holds"),
            "{message}"
        );
    }

    #[test]
    fn a_large_but_compressible_state_fits() {
        let state = state(json!({"blob": "a".repeat(4 * 1024 * 1024)}));
        assert!(encode(&state).is_ok());
    }

    #[test]
    fn garbage_data_does_not_decode_and_the_error_quotes_no_contents() {
        let data = |state: &[u8], format: &[u8]| {
            BTreeMap::from([
                (STATE_KEY.to_owned(), ByteString(state.to_vec())),
                (FORMAT_KEY.to_owned(), ByteString(format.to_vec())),
            ])
        };
        assert!(matches!(
            decode(&data(b"not gzip", b"1")),
            Err(DecodeError::Gzip(_))
        ));
        assert!(matches!(decode(&data(b"", b"2")), Err(DecodeError::Format)));
        assert!(matches!(
            decode(&BTreeMap::new()),
            Err(DecodeError::Missing { key: "format" })
        ));
        let compress_raw = |json: &[u8]| {
            let mut gz = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::default());
            gz.write_all(json).expect("in memory");
            gz.finish().expect("in memory")
        };
        let err = decode(&data(&compress_raw(br#"{"plan": "secret-value"}"#), b"1"))
            .expect_err("not a plan");
        assert!(matches!(
            err,
            DecodeError::Json {
                category: "data",
                ..
            }
        ));
        assert!(!err.to_string().contains("secret-value"), "{err}");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_size(STATE_LIMIT), "1008 KiB");
        assert_eq!(human_size(1024 * 1024 * 13 / 10), "1.3 MiB");
        assert_eq!(human_size(12), "12 bytes");
    }
}
