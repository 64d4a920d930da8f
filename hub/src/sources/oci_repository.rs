//! The `OCIRepository` reconciler: a chart pushed to an OCI registry, resolved by tag,
//! semver range or digest, pulled into the hub's chart store and reported in the object's
//! status as Flux's source-controller reports it. Also the OCI half of a `HelmChart` whose
//! `HelmRepository` has `type: oci` ([`helm_repository_client`], which the HelmChart
//! reconciler calls; [`fetch_helm_repository_chart`] is the whole fetch in one call).
//!
//! Where to start: [`run`] (the hub binary wires it with a client, the store and
//! [`Options`]); one pass is [`reconcile_once`].
//!
//! One reconcile, as source-controller's `reconcileSource`/`reconcileArtifact`:
//! 1. The URL is read; an invalid one (or an invalid `ref.digest` or `ref.semver`) is
//!    `Stalled=True` and not retried until the spec changes (Flux stalls on the URL only and
//!    retries the others with backoff; nothing but a spec change can fix them).
//! 2. `secretRef` (a `kubernetes.io/dockerconfigjson` Secret; `username`/`password` keys are
//!    read too) and `certSecretRef` (`ca.crt`, `tls.crt`, `tls.key`) are read; `insecure`
//!    allows plain HTTP, and skips certificate verification when there is no
//!    `certSecretRef` (Flux's rule). Failures: `AuthenticationFailed`.
//! 3. The reference: `ref.digest`, else the highest tag matching `ref.semver` (`_` read as
//!    `+` when `layerSelector.mediaType` is the Helm chart layer's, as Flux does), else
//!    `ref.tag`, else `latest`. Failures: `ReadOperationFailed`.
//! 4. The manifest (digest verified); the revision is `<tag>@sha256:<hex>` or
//!    `sha256:<hex>`. Failures: `OCIPullFailed`. When the revision and the layer selector
//!    are those of the artifact in the status and the store still holds its archive, the
//!    artifact is up to date: nothing is pulled. With `ref.digest` the revision is known
//!    without asking the registry (as in Flux), so an up-to-date artifact stays Ready
//!    through a registry outage.
//! 5. The layer (`layerSelector.mediaType`, else the first), digest- and size-checked, must
//!    load as a Helm chart archive; it is stored in the hub's [`ChartStore`]. The compressed
//!    layer is stored as it is (Flux's `copy`; `extract` would unpack it, but the hub's
//!    artifacts are chart archives either way). Failures: `OCILayerOperationFailed`, and
//!    `ArchiveOperationFailed` for the store.
//!
//! Status, as Flux writes it: success → `Ready=True` and `ArtifactInStorage=True`, reason
//! `Succeeded`, message `stored artifact for digest '<revision>'`; `FetchFailed`,
//! `ArtifactOutdated`, `Reconciling` and `Stalled` removed; `observedGeneration`,
//! `observedLayerSelector`, `artifact` (`revision`, `digest` = the stored archive's sha256,
//! `size`, `path` `ocirepository/<ns>/<name>/<archive hex>.tgz`, `url` under
//! [`Options::artifact_url_base`], `metadata` = the manifest's annotations, and
//! `lastUpdateTime`, changed only when the archive changes). Failure → `FetchFailed=True` (or
//! `StorageOperationFailed=True`) and `Ready=False` with the reason and message of the step;
//! `Reconciling=True` with `ProgressingWithRetry`, or `Stalled=True`. The artifact of the
//! last success stays in the status and in the store (a registry outage does not take it
//! away), and `Ready`'s message says so: `...; the last artifact '<revision>' is still
//! served`. A new generation first gets `Reconciling=True` (`Progressing`,
//! `processing object: new generation N -> M`).
//!
//! Scheduling (by [`run`]; the watch's events for our own status patches do not fetch
//! again): success → again after `interval`; a transient failure (connection, timeout,
//! 5xx) → after [`Options::retry_interval`] (at most `interval`); another failure → after
//! `interval`; stalled or suspended → on the next change of the object.
//!
//! Events (by [`run`]): `NewArtifact` (`stored artifact with revision '<revision>' from
//! '<url>'`) when the artifact changes, and a Warning with the reason and message of each
//! failure (the recorder folds repeats into a series).
//!
//! A new `reconcile.fluxcd.io/requestedAt` token fetches at once and is recorded in
//! `status.lastHandledReconcileAt`.
//! Not done: Flux's event annotations (revision, digest), jitter of the
//! interval, finalizers (the store is content-addressed and bounded: an artifact outlives
//! its object until it is evicted), and Secret watches (a changed Secret is read at the next
//! interval).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_agent::charts::{CachedCharts, ChartError, NoFetcher};
use flotilla_api::source::Artifact;
use flotilla_api::{HelmRepository, OCIRepository, OCIRepositoryStatus};
use flotilla_chart::{Chart, LoadError};
use flotilla_core::ids::ChartDigest;
use flotilla_core::meta::{ConditionStatus, Conditions as _, Timestamp, condition};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, Resource as _, ResourceExt as _};
use tracing::Instrument as _;

use super::http::{self, RepositoryAuth};
use super::oci::{
    self, HELM_CHART_LAYER_MEDIA_TYPE, OciClient, OciError, OciLimits, OciUrl, Reference,
};

/// The hub's chart store: archives by sha256, on disk, bounded.
pub type ChartStore = CachedCharts<NoFetcher>;

/// The field manager of the status patches.
pub const FIELD_MANAGER: &str = "flotilla-hub";

/// Condition types of Flux's sources besides `Ready`, `Reconciling` and `Stalled`.
pub mod condition_type {
    /// The last fetch failed.
    pub const FETCH_FAILED: &str = "FetchFailed";
    /// The artifact is in the store.
    pub const ARTIFACT_IN_STORAGE: &str = "ArtifactInStorage";
    /// A newer revision exists than the artifact's.
    pub const ARTIFACT_OUTDATED: &str = "ArtifactOutdated";
    /// Storing the artifact failed.
    pub const STORAGE_OPERATION_FAILED: &str = "StorageOperationFailed";
}

/// Condition reasons of Flux's sources.
pub mod reason {
    #![allow(missing_docs)]
    pub const SUCCEEDED: &str = "Succeeded";
    pub const PROGRESSING: &str = "Progressing";
    pub const PROGRESSING_WITH_RETRY: &str = "ProgressingWithRetry";
    pub const AUTHENTICATION_FAILED: &str = "AuthenticationFailed";
    pub const URL_INVALID: &str = "URLInvalid";
    pub const READ_OPERATION_FAILED: &str = "ReadOperationFailed";
    pub const OCI_PULL_FAILED: &str = "OCIPullFailed";
    pub const OCI_LAYER_OPERATION_FAILED: &str = "OCILayerOperationFailed";
    pub const ARCHIVE_OPERATION_FAILED: &str = "ArchiveOperationFailed";
    pub const PATCH_OPERATION_FAILED: &str = "PatchOperationFailed";
}

/// How the reconciler runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Watch this namespace only (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Where the hub serves artifacts; an artifact's `url` is `<base>/<path>`.
    pub artifact_url_base: String,
    /// The delay before retrying after a transient failure (at most the object's interval).
    pub retry_interval: Duration,
    /// The size limits of registry answers.
    pub limits: OciLimits,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            namespace: None,
            artifact_url_base: "http://flotilla-hub.flotilla-system.svc/artifacts".to_owned(),
            retry_interval: Duration::from_secs(10),
            limits: OciLimits::default(),
        }
    }
}

/// Why a source could not be fetched. `Display` is the whole condition message (Flux's
/// texts): it includes its cause, which is therefore not chained as `source()`.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The URL is invalid.
    #[error("URL validation failed for '{url}': {cause}")]
    InvalidUrl {
        /// The object's URL.
        url: String,
        /// Why.
        cause: OciError,
    },
    /// A referenced Secret cannot be read.
    #[error("failed to get credential: failed to get secret '{secret}' ({field}): {cause}")]
    Secret {
        /// `namespace/name` of the Secret.
        secret: String,
        /// `spec.secretRef` or `spec.certSecretRef`.
        field: &'static str,
        /// The API error.
        cause: kube::Error,
    },
    /// A Secret's content cannot be used.
    #[error("failed to get credential: Secret '{secret}' ({field}): {reason}")]
    SecretContent {
        /// `namespace/name` of the Secret.
        secret: String,
        /// `spec.secretRef` or `spec.certSecretRef`.
        field: &'static str,
        /// Why (never the content).
        reason: String,
    },
    /// The client (TLS) cannot be made.
    #[error("failed to generate transport for '{url}': {cause}")]
    Transport {
        /// The object's URL.
        url: String,
        /// Why.
        cause: OciError,
    },
    /// The tag or digest to pull cannot be determined.
    #[error("failed to determine the artifact tag for '{url}': {cause}")]
    Reference {
        /// The object's URL.
        url: String,
        /// Why.
        cause: OciError,
    },
    /// The manifest cannot be fetched.
    #[error("failed to determine artifact digest: {cause}")]
    Manifest {
        /// Why.
        cause: OciError,
    },
    /// The layer cannot be fetched.
    #[error("failed to pull artifact from '{url}': {cause}")]
    Pull {
        /// The object's URL.
        url: String,
        /// Why.
        cause: OciError,
    },
    /// No layer to take.
    #[error("{reason}")]
    Layer {
        /// Flux's text.
        reason: String,
    },
    /// The layer is not a chart archive.
    #[error("the layer of {reference} is not a Helm chart archive: {cause}")]
    NotAChart {
        /// `oci://host/repo:tag` or `@digest`.
        reference: String,
        /// The loader's error.
        cause: LoadError,
    },
    /// The store refused the archive.
    #[error("unable to copy artifact to storage: {cause}")]
    Store {
        /// The store's error.
        cause: ChartError,
    },
    /// Resolving or pulling a HelmChart's chart failed.
    #[error("{cause}")]
    Chart {
        /// Why.
        cause: OciError,
    },
    /// The status could not be written.
    #[error("failed to patch the status of {object}: {cause}")]
    Patch {
        /// `namespace/name`.
        object: String,
        /// The API error.
        cause: kube::Error,
    },
}

impl SourceError {
    /// The condition reason (Flux's).
    pub fn reason(&self) -> &'static str {
        match self {
            SourceError::InvalidUrl { .. } => reason::URL_INVALID,
            SourceError::Secret { .. }
            | SourceError::SecretContent { .. }
            | SourceError::Transport { .. } => reason::AUTHENTICATION_FAILED,
            SourceError::Reference { .. } => reason::READ_OPERATION_FAILED,
            SourceError::Manifest { .. } | SourceError::Pull { .. } => reason::OCI_PULL_FAILED,
            SourceError::Layer { .. } | SourceError::NotAChart { .. } => {
                reason::OCI_LAYER_OPERATION_FAILED
            }
            SourceError::Store { .. } => reason::ARCHIVE_OPERATION_FAILED,
            SourceError::Chart { cause } => match cause {
                OciError::Unauthorized { .. } | OciError::InvalidCredentials { .. } => {
                    reason::AUTHENTICATION_FAILED
                }
                _ => reason::OCI_PULL_FAILED,
            },
            SourceError::Patch { .. } => reason::PATCH_OPERATION_FAILED,
        }
    }

    /// A short machine-readable name, for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceError::InvalidUrl { .. } => "InvalidUrl",
            SourceError::Secret { .. } => "SecretUnreadable",
            SourceError::SecretContent { .. } => "InvalidSecret",
            SourceError::Transport { cause, .. }
            | SourceError::Reference { cause, .. }
            | SourceError::Manifest { cause }
            | SourceError::Pull { cause, .. }
            | SourceError::Chart { cause } => cause.kind(),
            SourceError::Layer { .. } => "NoLayer",
            SourceError::NotAChart { .. } => "NotAChart",
            SourceError::Store { .. } => "StoreFailed",
            SourceError::Patch { .. } => "PatchFailed",
        }
    }

    /// Whether retrying soon may help without a change to the objects.
    pub fn is_transient(&self) -> bool {
        match self {
            SourceError::Secret { cause, .. } | SourceError::Patch { cause, .. } => {
                !matches!(cause, kube::Error::Api(s) if s.code == 404 || s.code == 403)
            }
            SourceError::Transport { cause, .. }
            | SourceError::Reference { cause, .. }
            | SourceError::Manifest { cause }
            | SourceError::Pull { cause, .. }
            | SourceError::Chart { cause } => cause.is_transient(),
            SourceError::Store { .. } => true,
            SourceError::InvalidUrl { .. }
            | SourceError::SecretContent { .. }
            | SourceError::Layer { .. }
            | SourceError::NotAChart { .. } => false,
        }
    }

    /// Whether the spec itself is wrong: `Stalled`, no retry until it changes.
    pub fn is_stalling(&self) -> bool {
        match self {
            SourceError::InvalidUrl { .. } => true,
            SourceError::Reference { cause, .. } | SourceError::Chart { cause } => {
                cause.is_spec_error()
            }
            _ => false,
        }
    }

    /// The condition type a failure sets to `True`.
    fn failure_condition(&self) -> &'static str {
        match self {
            SourceError::Store { .. } => condition_type::STORAGE_OPERATION_FAILED,
            _ => condition_type::FETCH_FAILED,
        }
    }
}

/// Runs the reconciler until the watch ends (it does not end on its own; abort the task to
/// stop it). Watch errors are logged and retried with backoff by kube-runtime.
pub async fn run(client: Client, store: Arc<ChartStore>, options: Options) {
    let api: Api<OCIRepository> = match &options.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let client_for_events = client.clone();
    let context = Arc::new(Context {
        client,
        store,
        options,
        due: Mutex::new(HashMap::new()),
        recorder: Recorder::new(
            client_for_events,
            Reporter {
                controller: FIELD_MANAGER.to_owned(),
                instance: None,
            },
        ),
    });
    Controller::new(api, watcher::Config::default())
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => {
                    tracing::debug!(object = %object, "OCIRepository reconciled");
                }
                Err(kube::runtime::controller::Error::ReconcilerFailed(error, object)) => {
                    tracing::warn!(
                        object = %object,
                        kind = error.kind(),
                        error = %error,
                        "OCIRepository reconcile failed"
                    );
                }
                Err(error) => tracing::warn!(error = %error, "OCIRepository controller error"),
            }
        })
        .await;
}

/// What [`run`] shares between reconciles.
struct Context {
    client: Client,
    store: Arc<ChartStore>,
    options: Options,
    /// When each object (`namespace`, `name`) is next due, for the generation it was
    /// reconciled at (`None`: on the next spec change). The watch also reports our own
    /// status patches; those events find the object not due and do not fetch again.
    due: Mutex<HashMap<ObjectKey, Due>>,
    /// Records the object's Events (`NewArtifact`, and a Warning per failure).
    recorder: Recorder,
}

/// `(namespace, name)`.
type ObjectKey = (String, String);

/// The generation and `requestedAt` token reconciled, and when the object is next due
/// (`None`: on a spec change or a new token).
type Due = (i64, Option<String>, Option<Instant>);

/// The object's `reconcile.fluxcd.io/requestedAt` token (`flux reconcile source oci`).
fn requested_at(object: &OCIRepository) -> Option<String> {
    object
        .annotations()
        .get("reconcile.fluxcd.io/requestedAt")
        .cloned()
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("store", &self.store)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

async fn reconcile(
    object: Arc<OCIRepository>,
    context: Arc<Context>,
) -> Result<Action, SourceError> {
    let key = (object.namespace().unwrap_or_default(), object.name_any());
    let generation = object.metadata.generation.unwrap_or(0);
    let token = requested_at(&object);
    let due = lock(&context.due).get(&key).cloned();
    if let Some((seen, seen_token, at)) = due
        && seen == generation
        && seen_token == token
    {
        match at {
            None => return Ok(Action::await_change()),
            Some(at) => {
                let now = Instant::now();
                if now < at {
                    return Ok(Action::requeue(at - now));
                }
            }
        }
    }
    let span = tracing::info_span!(
        "reconcile",
        kind = "OCIRepository",
        namespace = %key.0,
        name = %key.1,
        generation
    );
    let result = reconcile_once(&context.client, &context.store, &context.options, &object)
        .instrument(span)
        .await;
    let next = match &result {
        Ok(done) if done.action == Action::await_change() => None,
        Ok(_) => Some(Instant::now() + object.spec.interval.get()),
        Err(error) => Some(Instant::now() + retry_after(&object, error, &context.options)),
    };
    lock(&context.due).insert(key.clone(), (generation, token, next));
    let before = object.status.as_ref().and_then(|s| s.artifact.as_ref());
    let event = match &result {
        Ok(Reconciled {
            artifact: Some(artifact),
            ..
        }) if before
            .is_none_or(|b| b.digest != artifact.digest || b.revision != artifact.revision) =>
        {
            tracing::info!(
                namespace = %key.0,
                name = %key.1,
                revision = %artifact.revision,
                digest = %artifact.digest,
                "OCIRepository has a new artifact"
            );
            Some(Event {
                type_: EventType::Normal,
                reason: "NewArtifact".to_owned(),
                note: Some(format!(
                    "stored artifact with revision '{}' from '{}'",
                    artifact.revision, object.spec.url
                )),
                action: "Reconcile".to_owned(),
                secondary: None,
            })
        }
        Ok(_) => None,
        Err(error) => Some(Event {
            type_: EventType::Warning,
            reason: error.reason().to_owned(),
            note: Some(error.to_string()),
            action: "Reconcile".to_owned(),
            secondary: None,
        }),
    };
    if let Some(event) = event
        && let Err(error) = context
            .recorder
            .publish(&event, &object.object_ref(&()))
            .await
    {
        tracing::warn!(
            object = %format!("{}/{}", key.0, key.1),
            error = %error,
            "cannot record an Event"
        );
    }
    result.map(|done| done.action)
}

fn error_policy(object: Arc<OCIRepository>, error: &SourceError, context: Arc<Context>) -> Action {
    Action::requeue(retry_after(&object, error, &context.options))
}

/// The delay before the next attempt after `error`.
fn retry_after(object: &OCIRepository, error: &SourceError, options: &Options) -> Duration {
    let interval = object.spec.interval.get();
    if error.is_transient() {
        options.retry_interval.min(interval)
    } else {
        interval
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a successful [`reconcile_once`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Reconciled {
    /// When to look again: after the interval, or on the next change when suspended or
    /// stalled.
    pub action: Action,
    /// The artifact in the status afterwards.
    pub artifact: Option<Artifact>,
}

/// One reconcile of `object`: fetch, store, write the status. `Ok` with the next check;
/// `Err` after a failure that was written to the status (retry per
/// [`SourceError::is_transient`]).
pub async fn reconcile_once(
    client: &Client,
    store: &ChartStore,
    options: &Options,
    object: &OCIRepository,
) -> Result<Reconciled, SourceError> {
    let done = |action: Action, artifact: Option<Artifact>| Ok(Reconciled { action, artifact });
    if object.spec.suspend {
        return done(
            Action::await_change(),
            object.status.as_ref().and_then(|s| s.artifact.clone()),
        );
    }
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let api: Api<OCIRepository> = Api::namespaced(client.clone(), &namespace);
    let generation = object.metadata.generation.unwrap_or(0);
    let mut status = object.status.clone().unwrap_or_default();
    if let Some(token) = requested_at(object) {
        status.last_handled_reconcile_at = Some(token);
    }

    if status.observed_generation != generation {
        let now = now();
        status.conditions.set_condition(
            condition::RECONCILING,
            ConditionStatus::True,
            reason::PROGRESSING,
            format!(
                "processing object: new generation {} -> {generation}",
                status.observed_generation
            ),
            generation,
            &now,
        );
        if status.conditions.get_condition(condition::READY).is_none() {
            status.conditions.set_condition(
                condition::READY,
                ConditionStatus::Unknown,
                reason::PROGRESSING,
                "reconciliation in progress".to_owned(),
                generation,
                &now,
            );
        }
        patch_status(&api, &namespace, &name, &status).await?;
    }

    let result = fetch(client, store, options, object, &status).await;
    let now = now();
    let conditions = &mut status.conditions;
    match result {
        Ok(fetched) => {
            let message = format!("stored artifact for digest '{}'", fetched.artifact.revision);
            for gone in [
                condition_type::FETCH_FAILED,
                condition_type::ARTIFACT_OUTDATED,
                condition_type::STORAGE_OPERATION_FAILED,
                condition::RECONCILING,
                condition::STALLED,
            ] {
                conditions.delete_condition(gone);
            }
            for type_ in [condition_type::ARTIFACT_IN_STORAGE, condition::READY] {
                conditions.set_condition(
                    type_,
                    ConditionStatus::True,
                    reason::SUCCEEDED,
                    message.clone(),
                    generation,
                    &now,
                );
            }
            status.observed_generation = generation;
            status.observed_layer_selector = object.spec.layer_selector.clone();
            status.url = Some(fetched.artifact.url.clone());
            status.artifact = Some(fetched.artifact);
            patch_status(&api, &namespace, &name, &status).await?;
            done(Action::requeue(object.spec.interval.get()), status.artifact)
        }
        Err(error) => {
            let message = error.to_string();
            conditions.set_condition(
                error.failure_condition(),
                ConditionStatus::True,
                error.reason(),
                message.clone(),
                generation,
                &now,
            );
            let ready_message = match &status.artifact {
                Some(last) => format!(
                    "{message}; the last artifact '{}' is still served",
                    last.revision
                ),
                None => message.clone(),
            };
            status.conditions.set_condition(
                condition::READY,
                ConditionStatus::False,
                error.reason(),
                ready_message.clone(),
                generation,
                &now,
            );
            if error.is_stalling() {
                status.conditions.delete_condition(condition::RECONCILING);
                status.conditions.set_condition(
                    condition::STALLED,
                    ConditionStatus::True,
                    error.reason(),
                    message,
                    generation,
                    &now,
                );
                status.observed_generation = generation;
            } else {
                status.conditions.delete_condition(condition::STALLED);
                status.conditions.set_condition(
                    condition::RECONCILING,
                    ConditionStatus::True,
                    reason::PROGRESSING_WITH_RETRY,
                    ready_message,
                    generation,
                    &now,
                );
            }
            patch_status(&api, &namespace, &name, &status).await?;
            if error.is_stalling() {
                done(Action::await_change(), status.artifact)
            } else {
                Err(error)
            }
        }
    }
}

/// A fetched (or kept) artifact.
struct Fetched {
    artifact: Artifact,
}

async fn fetch(
    client: &Client,
    store: &ChartStore,
    options: &Options,
    object: &OCIRepository,
    status: &OCIRepositoryStatus,
) -> Result<Fetched, SourceError> {
    let spec = &object.spec;
    let namespace = object.namespace().unwrap_or_default();
    let url = OciUrl::parse(&spec.url).map_err(|cause| SourceError::InvalidUrl {
        url: spec.url.clone(),
        cause,
    })?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let mut auth = RepositoryAuth::default();
    if let Some(reference) = &spec.secret_ref {
        let data = secret_data(&secrets, &namespace, &reference.name, "spec.secretRef").await?;
        auth.basic = oci::registry_credentials(&data, url.registry()).map_err(|e| {
            SourceError::SecretContent {
                secret: format!("{namespace}/{}", reference.name),
                field: "spec.secretRef",
                reason: e.to_string(),
            }
        })?;
    }
    if let Some(reference) = &spec.cert_secret_ref {
        let data = secret_data(&secrets, &namespace, &reference.name, "spec.certSecretRef").await?;
        apply_tls_secret(&mut auth, &data).map_err(|reason| SourceError::SecretContent {
            secret: format!("{namespace}/{}", reference.name),
            field: "spec.certSecretRef",
            reason,
        })?;
    } else {
        auth.insecure_skip_verify = spec.insecure;
    }
    let timeout = spec.timeout.map_or(http::DEFAULT_TIMEOUT, |t| t.get());
    let oci = OciClient::new(&spec.url, auth, spec.insecure, timeout, options.limits).map_err(
        |cause| SourceError::Transport {
            url: spec.url.clone(),
            cause,
        },
    )?;

    let layer_type = spec
        .layer_selector
        .as_ref()
        .and_then(|s| s.media_type.as_deref());
    let reference = spec.reference.clone().unwrap_or_default();
    let reference_error = |cause| SourceError::Reference {
        url: spec.url.clone(),
        cause,
    };
    let reference = if let Some(digest) = reference.digest.filter(|d| !d.is_empty()) {
        Reference::digest(&digest).map_err(reference_error)?
    } else if let Some(semver) = reference.semver.filter(|s| !s.is_empty()) {
        let underscore_is_plus = layer_type == Some(HELM_CHART_LAYER_MEDIA_TYPE);
        Reference::Tag(
            oci.resolve_semver(&semver, underscore_is_plus)
                .await
                .map_err(reference_error)?,
        )
    } else {
        let tag = reference.tag.filter(|t| !t.is_empty());
        Reference::tag(tag.as_deref().unwrap_or(oci::DEFAULT_TAG)).map_err(reference_error)?
    };
    // The artifact in the status is up to date when its revision is the one wanted (known
    // without a request for a digest, from the manifest for a tag), the layer selector did
    // not change and the store still has its archive.
    let up_to_date = async |revision: &str| {
        if let Some(last) = &status.artifact
            && last.revision == revision
            && status.observed_layer_selector == spec.layer_selector
            && let Ok(digest) = ChartDigest::new(last.digest.clone())
            && store.get(&digest).await.is_ok()
        {
            return Some(last.clone());
        }
        None
    };
    if let Reference::Digest(digest) = &reference
        && let Some(artifact) = up_to_date(digest.as_str()).await
    {
        return Ok(Fetched { artifact });
    }
    let manifest = oci
        .fetch_manifest(&reference)
        .await
        .map_err(|cause| SourceError::Manifest { cause })?;
    let tag = match &reference {
        Reference::Tag(tag) => Some(tag.as_str()),
        Reference::Digest(_) => None,
    };
    let revision = oci::revision(tag, &manifest.digest);
    if let Some(artifact) = up_to_date(&revision).await {
        return Ok(Fetched { artifact });
    }

    let shown = format!("{url}{reference}");
    let layer = manifest
        .select_layer(layer_type)
        .map_err(|reason| SourceError::Layer { reason })?
        .clone();
    let archive = oci
        .fetch_blob(&layer, "layer", options.limits.max_chart_size)
        .await
        .map_err(|cause| SourceError::Pull {
            url: spec.url.clone(),
            cause,
        })?;
    let (digest, size) = store_archive(store, archive, &shown).await?;
    let path = format!(
        "ocirepository/{namespace}/{}/{}.tgz",
        object.name_any(),
        digest.hex()
    );
    let unchanged = status
        .artifact
        .as_ref()
        .filter(|last| last.digest == digest.as_str() && last.revision == revision);
    let artifact = Artifact {
        url: format!("{}/{path}", options.artifact_url_base.trim_end_matches('/')),
        path,
        revision,
        digest: digest.to_string(),
        last_update_time: unchanged.map_or_else(now, |last| last.last_update_time.clone()),
        size: i64::try_from(size).ok(),
        metadata: manifest.annotations.clone(),
    };
    Ok(Fetched { artifact })
}

/// Loads the archive as a chart (off the async workers) and puts it in the store.
async fn store_archive(
    store: &ChartStore,
    archive: Vec<u8>,
    reference: &str,
) -> Result<(ChartDigest, u64), SourceError> {
    let size = archive.len() as u64;
    let (archive, chart) = load_chart(archive, reference).await?;
    let digest = store
        .insert(archive, chart)
        .await
        .map_err(|cause| SourceError::Store { cause })?;
    Ok((digest, size))
}

async fn load_chart(archive: Vec<u8>, reference: &str) -> Result<(Vec<u8>, Chart), SourceError> {
    let loaded = tokio::task::spawn_blocking(move || {
        let chart = flotilla_chart::load_archive(&archive);
        (archive, chart)
    })
    .await
    .map_err(|e| SourceError::Layer {
        reason: format!("the chart loader task failed: {e}"),
    })?;
    match loaded {
        (archive, Ok(chart)) => Ok((archive, chart)),
        (_, Err(cause)) => Err(SourceError::NotAChart {
            reference: reference.to_owned(),
            cause,
        }),
    }
}

async fn secret_data(
    secrets: &Api<Secret>,
    namespace: &str,
    name: &str,
    field: &'static str,
) -> Result<BTreeMap<String, Vec<u8>>, SourceError> {
    let secret = secrets
        .get(name)
        .await
        .map_err(|cause| SourceError::Secret {
            secret: format!("{namespace}/{name}"),
            field,
            cause,
        })?;
    Ok(secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect())
}

/// `ca.crt`, and `tls.crt` with `tls.key`, of a TLS Secret (Flux's keys).
fn apply_tls_secret(
    auth: &mut RepositoryAuth,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<(), String> {
    auth.ca_pem = data.get("ca.crt").cloned();
    match (data.get("tls.crt"), data.get("tls.key")) {
        (Some(cert), Some(key)) => auth.client_cert = Some((cert.clone(), key.clone())),
        (None, None) => {}
        _ => {
            return Err("found one of tls.crt or tls.key but not both".to_owned());
        }
    }
    if auth.ca_pem.is_none() && auth.client_cert.is_none() {
        return Err("no ca.crt, tls.crt or tls.key key".to_owned());
    }
    Ok(())
}

async fn patch_status(
    api: &Api<OCIRepository>,
    namespace: &str,
    name: &str,
    status: &OCIRepositoryStatus,
) -> Result<(), SourceError> {
    let patch = serde_json::json!({ "status": status });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|cause| SourceError::Patch {
            object: format!("{namespace}/{name}"),
            cause,
        })?;
    Ok(())
}

/// Now, whole seconds, UTC.
fn now() -> Timestamp {
    let text = k8s_openapi::jiff::Timestamp::now().to_string();
    Timestamp::new(text)
        .map(|t| t.to_kubernetes())
        .unwrap_or_else(|_| Timestamp::new("1970-01-01T00:00:00Z").expect("a valid timestamp"))
}

// ---------------------------------------------------------------------------------------
// HelmChart of an OCI HelmRepository

/// A chart of a `HelmRepository` of `type: oci`, resolved, pulled and stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciChartArtifact {
    /// The chart name asked for.
    pub name: String,
    /// The version resolved (with `+` when it has build metadata).
    pub version: String,
    /// `oci://host/path/<chart>:<tag>`.
    pub reference: String,
    /// The manifest digest.
    pub manifest_digest: ChartDigest,
    /// The stored archive's digest (what agents fetch).
    pub digest: ChartDigest,
    /// The archive's size in bytes.
    pub size: u64,
}

/// The chart `chart` at `version` (a HelmChart's `spec.version`: a version, or a
/// constraint, `*` or empty for the latest stable) from the OCI `repository`, as
/// source-controller's HelmChart reconciler gets it from an OCI `HelmRepository`: the
/// repository's `secretRef` (dockerconfigjson or `username`/`password`) and
/// `certSecretRef` are read, `insecure` allows plain HTTP (no certificate verification is
/// skipped), `timeout` applies (60s by default); the version is resolved with
/// [`OciClient::resolve_chart_version`], the chart pulled from `<url>/<chart>:<tag>` (the
/// version with `+` as `_`; the manifest must be a Helm chart's; digests and sizes
/// checked), loaded, and put in `store`.
///
/// Errors are [`SourceError`]s; their `Display` is the text for the HelmChart's
/// condition and [`SourceError::reason`] its reason. The HelmChart reconciler uses the two
/// halves ([`helm_repository_client`], then resolution and pull) to skip the pull of a
/// version it already holds and to apply `valuesFiles`.
pub async fn fetch_helm_repository_chart(
    client: &Client,
    store: &ChartStore,
    repository: &HelmRepository,
    chart: &str,
    version: &str,
    limits: OciLimits,
) -> Result<OciChartArtifact, SourceError> {
    let oci = helm_repository_client(client, repository, chart, limits).await?;
    pull_oci_chart(&oci, chart, version, store).await
}

/// The client of chart `chart` of the OCI `repository` (`<url>/<chart>`), as
/// source-controller's HelmChart reconciler makes it: the repository's `secretRef`
/// (dockerconfigjson or `username`/`password`) and `certSecretRef` are read, `insecure`
/// allows plain HTTP (no certificate verification is skipped), `timeout` applies (60s by
/// default). Resolve the version with [`OciClient::resolve_chart_version`] and pull with
/// [`oci::version_tag`].
pub async fn helm_repository_client(
    client: &Client,
    repository: &HelmRepository,
    chart: &str,
    limits: OciLimits,
) -> Result<OciClient, SourceError> {
    let spec = &repository.spec;
    let namespace = repository.namespace().unwrap_or_default();
    let url = OciUrl::parse(&spec.url)
        .and_then(|u| u.join(chart))
        .map_err(|cause| SourceError::InvalidUrl {
            url: spec.url.clone(),
            cause,
        })?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let mut auth = RepositoryAuth::default();
    if let Some(reference) = &spec.secret_ref {
        let data = secret_data(&secrets, &namespace, &reference.name, "spec.secretRef").await?;
        auth.basic = oci::registry_credentials(&data, url.registry()).map_err(|e| {
            SourceError::SecretContent {
                secret: format!("{namespace}/{}", reference.name),
                field: "spec.secretRef",
                reason: e.to_string(),
            }
        })?;
    }
    if let Some(reference) = &spec.cert_secret_ref {
        let data = secret_data(&secrets, &namespace, &reference.name, "spec.certSecretRef").await?;
        apply_tls_secret(&mut auth, &data).map_err(|reason| SourceError::SecretContent {
            secret: format!("{namespace}/{}", reference.name),
            field: "spec.certSecretRef",
            reason,
        })?;
    }
    let timeout = spec.timeout.map_or(http::DEFAULT_TIMEOUT, |t| t.get());
    oci_client(&url.to_string(), auth, spec.insecure, timeout, limits)
}

fn oci_client(
    chart_repository: &str,
    auth: RepositoryAuth,
    insecure: bool,
    timeout: Duration,
    limits: OciLimits,
) -> Result<OciClient, SourceError> {
    OciClient::new(chart_repository, auth, insecure, timeout, limits).map_err(|cause| match cause {
        OciError::InvalidUrl { .. } => SourceError::InvalidUrl {
            url: chart_repository.to_owned(),
            cause,
        },
        cause => SourceError::Transport {
            url: chart_repository.to_owned(),
            cause,
        },
    })
}

/// Resolves `version` in the chart repository of `oci`, pulls the chart and stores it.
async fn pull_oci_chart(
    oci: &OciClient,
    chart: &str,
    version: &str,
    store: &ChartStore,
) -> Result<OciChartArtifact, SourceError> {
    let version = oci
        .resolve_chart_version(version)
        .await
        .map_err(|cause| SourceError::Chart { cause })?;
    let reference = Reference::Tag(oci::version_tag(&version));
    let pulled = oci
        .pull_chart(&reference)
        .await
        .map_err(|cause| SourceError::Chart { cause })?;
    let shown = format!("{}{reference}", oci.url());
    let (digest, size) = store_archive(store, pulled.archive, &shown).await?;
    Ok(OciChartArtifact {
        name: chart.to_owned(),
        version,
        reference: shown,
        manifest_digest: pulled.manifest.digest,
        digest,
        size,
    })
}

/// [`fetch_helm_repository_chart`] without Kubernetes: `chart_repository` is the chart's
/// own repository (`oci://host/path/<chart>`), `auth` its credentials and TLS settings.
#[allow(clippy::too_many_arguments)]
pub async fn fetch_oci_chart(
    chart_repository: &str,
    auth: RepositoryAuth,
    insecure: bool,
    timeout: Duration,
    limits: OciLimits,
    chart: &str,
    version: &str,
    store: &ChartStore,
) -> Result<OciChartArtifact, SourceError> {
    let oci = oci_client(chart_repository, auth, insecure, timeout, limits)?;
    pull_oci_chart(&oci, chart, version, store).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_secret_needs_both_halves_of_a_client_certificate() {
        let mut auth = RepositoryAuth::default();
        let only_cert = BTreeMap::from([("tls.crt".to_owned(), b"CERT".to_vec())]);
        assert_eq!(
            apply_tls_secret(&mut auth, &only_cert),
            Err("found one of tls.crt or tls.key but not both".to_owned())
        );
        let ca = BTreeMap::from([("ca.crt".to_owned(), b"CA".to_vec())]);
        apply_tls_secret(&mut auth, &ca).expect("a CA alone");
        assert_eq!(auth.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert!(apply_tls_secret(&mut auth, &BTreeMap::new()).is_err());
    }

    #[test]
    fn failures_map_to_flux_reasons_and_retry_rules() {
        let url = "oci://r/x".to_owned();
        let invalid = SourceError::InvalidUrl {
            url: url.clone(),
            cause: OciUrl::parse("oci://r").expect_err("no path"),
        };
        assert_eq!(invalid.reason(), "URLInvalid");
        assert!(invalid.is_stalling() && !invalid.is_transient());
        assert_eq!(
            invalid.to_string(),
            "URL validation failed for 'oci://r/x': invalid OCI URL oci://r: the repository path is empty"
        );
        let down = SourceError::Manifest {
            cause: OciError::Connect {
                url: "http://r/v2/x/manifests/latest".to_owned(),
                reason: "connection refused".to_owned(),
            },
        };
        assert_eq!(down.reason(), "OCIPullFailed");
        assert!(down.is_transient() && !down.is_stalling());
        let semver = SourceError::Reference {
            url,
            cause: oci::select_semver_tag(&[], "nope", false).expect_err("invalid"),
        };
        assert_eq!(semver.reason(), "ReadOperationFailed");
        assert!(semver.is_stalling());
    }
}
