//! The HelmRepository controller for HTTP(S) repositories: fetches each repository's
//! `index.yaml` once per `spec.interval` and keeps the parsed index in memory
//! ([`Indexes`]), shared by every HelmChart of that repository.
//!
//! Status, as Flux's source-controller writes it: `Ready` (`Succeeded`, "stored artifact:
//! revision 'sha256:…'"), `FetchFailed` and `Stalled` on errors, `artifact.revision` = the
//! index digest, `observedGeneration`. A failed fetch keeps the last index: HelmCharts go on
//! resolving from it, and the `Ready=False` message says that it is kept.
//!
//! An index is fetched when the repository is new to the hub, when its generation changed,
//! when a `reconcile.fluxcd.io/requestedAt` token is new, or when `interval` has passed;
//! any other event (our own status write, say) only requeues for the rest of the interval.
//! OCI repositories (`type: oci`) have no index: the HelmChart controller reads them itself;
//! here their held index (if the type changed) is dropped and their status emptied.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use flotilla_api::source::{Artifact, HelmRepositoryType};
use flotilla_api::{HelmRepository, HelmRepositoryStatus};
use flotilla_core::meta::{Condition, ConditionStatus, Conditions as _, condition};
use flotilla_core::spec::RECONCILE_REQUEST_ANNOTATION;
use futures::StreamExt as _;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};

use super::http::{DEFAULT_TIMEOUT, FetchError, Limits, RepositoryAuth, RepositoryClient};
use super::index::{Index, IndexError};
use crate::util::{self, error_chain, jitter};

/// Flux's default `HelmRepository.spec.interval` when unset.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(600);
/// `FetchFailed`: the last fetch failed.
pub const FETCH_FAILED: &str = "FetchFailed";
/// Ready reason of a stored artifact.
pub const SUCCEEDED: &str = "Succeeded";
/// Reason of a failed index fetch (Flux's `IndexationFailed`).
pub const INDEXATION_FAILED: &str = "IndexationFailed";
/// Reason of unusable credentials (Flux's `AuthenticationFailed`).
pub const AUTHENTICATION_FAILED: &str = "AuthenticationFailed";

/// `namespace/name` of a source object.
pub type SourceKey = (String, String);

/// A fetched, parsed index.
#[derive(Debug)]
pub struct HeldIndex {
    /// The index.
    pub index: Index,
    /// `sha256:<hex>` of the index bytes.
    pub revision: String,
    /// The client that fetched it (and downloads its charts).
    pub client: RepositoryClient,
    /// The generation it was fetched for.
    generation: i64,
    /// The requestedAt token handled by the fetch.
    requested_at: Option<String>,
    /// When it was fetched.
    fetched: Instant,
}

/// The indexes of every HTTP repository, by `namespace/name`. Indexes live in memory: a
/// hub that starts holds none until the HelmRepository controller fetched each again, and
/// [`Indexes::loaded`] tells when one first arrives (the HelmChart controller reconciles that
/// repository's charts then, though the repository's status did not change).
#[derive(Debug)]
pub struct Indexes {
    held: RwLock<HashMap<SourceKey, Arc<HeldIndex>>>,
    loaded: tokio::sync::broadcast::Sender<SourceKey>,
}

impl Default for Indexes {
    fn default() -> Self {
        Self {
            held: RwLock::default(),
            loaded: tokio::sync::broadcast::channel(256).0,
        }
    }
}

impl Indexes {
    /// The repositories whose index is loaded for the first time from now on (a receiver
    /// that lags skips some: their charts are reconciled at their next requeue anyway).
    pub fn loaded(&self) -> tokio::sync::broadcast::Receiver<SourceKey> {
        self.loaded.subscribe()
    }

    /// The index held for repository `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<HeldIndex>> {
        self.held
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    fn put(&self, key: SourceKey, index: Arc<HeldIndex>) {
        let previous = self
            .held
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), index);
        // A new revision changes the repository's status, whose watch reconciles the
        // charts: only a first load (a hub that started) is told here.
        if previous.is_none() {
            let _ = self.loaded.send(key);
        }
    }

    fn remove(&self, key: &SourceKey) {
        self.held
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

/// Why a HelmRepository reconcile failed (its status says so too).
#[derive(Debug, thiserror::Error)]
pub enum RepositoryError {
    /// The Kubernetes API failed.
    #[error("HelmRepository {object}: {what}")]
    Kube {
        /// `namespace/name`.
        object: String,
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: kube::Error,
    },
}

impl RepositoryError {
    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        "kube"
    }

    /// Whether a retry may help.
    pub fn is_transient(&self) -> bool {
        true
    }
}

/// What the controller needs.
pub struct RepositoryContext {
    /// The hub's cluster.
    pub client: Client,
    /// Where indexes are kept.
    pub indexes: Arc<Indexes>,
    /// Size limits of downloads.
    pub limits: Limits,
    /// Interval jitter fraction.
    pub jitter: f64,
    /// The interval of a repository that sets none.
    pub default_interval: Duration,
}

impl std::fmt::Debug for RepositoryContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepositoryContext").finish_non_exhaustive()
    }
}

/// Runs the HelmRepository controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<RepositoryContext>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<HelmRepository> = Api::all(ctx.client.clone());
    Controller::new(api, watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %error_chain(&e), "HelmRepository reconcile");
            }
        })
        .await;
}

fn error_policy(_: Arc<HelmRepository>, e: &RepositoryError, _: Arc<RepositoryContext>) -> Action {
    tracing::warn!(error = %error_chain(e), "HelmRepository reconcile failed");
    Action::requeue(Duration::from_secs(10))
}

/// The repository's auth from its `secretRef` and `certSecretRef`; `Err` is the condition
/// message.
async fn auth(client: &Client, repo: &HelmRepository) -> Result<RepositoryAuth, String> {
    let ns = repo.namespace().unwrap_or_default();
    let mut auth = RepositoryAuth {
        pass_credentials: repo.spec.pass_credentials,
        ..Default::default()
    };
    let read = |name: String| {
        let ns = ns.clone();
        async move {
            util::secret_data(client, &ns, &name)
                .await
                .map_err(|e| format!("failed to get secret '{ns}/{name}': {}", error_chain(&e)))?
                .ok_or_else(|| {
                    format!("failed to get secret '{ns}/{name}': secrets \"{name}\" not found")
                })
        }
    };
    if let Some(r) = &repo.spec.secret_ref {
        let data = read(r.name.clone()).await?;
        let text = |k: &str| data.get(k).map(|v| String::from_utf8_lossy(v).into_owned());
        match (text("username"), text("password")) {
            (Some(u), Some(p)) => auth.basic = Some((u, p)),
            (None, None) => {}
            _ => {
                return Err(format!(
                    "invalid '{}' secret data: required fields 'username' and 'password'",
                    r.name
                ));
            }
        }
        auth.ca_pem = data.get("ca.crt").cloned();
        if let (Some(c), Some(k)) = (data.get("tls.crt"), data.get("tls.key")) {
            auth.client_cert = Some((c.clone(), k.clone()));
        }
    }
    if let Some(r) = &repo.spec.cert_secret_ref {
        let data = read(r.name.clone()).await?;
        if let Some(ca) = data.get("ca.crt") {
            auth.ca_pem = Some(ca.clone());
        }
        if let (Some(c), Some(k)) = (data.get("tls.crt"), data.get("tls.key")) {
            auth.client_cert = Some((c.clone(), k.clone()));
        }
    }
    Ok(auth)
}

/// Why a fetch failed, for the condition.
#[derive(Debug, thiserror::Error)]
enum FetchIndexError {
    #[error("failed to fetch Helm repository index: {}", error_chain(.0))]
    Fetch(#[source] FetchError),
    #[error("failed to load Helm repository from index YAML: {}", error_chain(.0))]
    Parse(#[source] IndexError),
}

async fn reconcile(
    repo: Arc<HelmRepository>,
    ctx: Arc<RepositoryContext>,
) -> Result<Action, RepositoryError> {
    let ns = repo.namespace().unwrap_or_default();
    let name = repo.name_any();
    let key = (ns.clone(), name.clone());
    if repo.metadata.deletion_timestamp.is_some() {
        ctx.indexes.remove(&key);
        return Ok(Action::await_change());
    }
    if repo.spec.suspend {
        return Ok(Action::await_change());
    }
    if repo.spec.type_ == Some(HelmRepositoryType::Oci) {
        // An OCI repository is only data for its HelmCharts: no index, no status (Flux's
        // migration to a static object empties the status of a repository switched to oci).
        ctx.indexes.remove(&key);
        // (The CRD defaults `observedGeneration` to -1: that alone is an empty status.)
        if repo.status.as_ref().is_some_and(|s| {
            s.artifact.is_some()
                || s.url.is_some()
                || !s.conditions.is_empty()
                || s.last_handled_reconcile_at.is_some()
        }) {
            let api: Api<HelmRepository> = Api::namespaced(ctx.client.clone(), &ns);
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "status": null })),
            )
            .await
            .map_err(|source| RepositoryError::Kube {
                object: format!("{ns}/{name}"),
                what: "emptying the status of an OCI repository",
                source,
            })?;
        }
        return Ok(Action::await_change());
    }
    let interval = repo
        .spec
        .interval
        .map(|i| i.get())
        .unwrap_or(ctx.default_interval);
    let generation = repo.metadata.generation.unwrap_or_default();
    let requested_at = repo
        .annotations()
        .get(RECONCILE_REQUEST_ANNOTATION)
        .cloned();
    let held = ctx.indexes.get(&ns, &name);
    if let Some(h) = &held {
        let age = h.fetched.elapsed();
        if h.generation == generation && h.requested_at == requested_at && age < interval {
            return Ok(Action::requeue(jitter(interval - age, ctx.jitter)));
        }
    }

    let object = format!("{ns}/{name}");
    let mut status = repo.status.clone().unwrap_or_default();
    let now = util::now();
    let result: Result<Arc<HeldIndex>, (String, String)> = async {
        let auth = auth(&ctx.client, &repo)
            .await
            .map_err(|m| (AUTHENTICATION_FAILED.to_owned(), m))?;
        let timeout = repo
            .spec
            .timeout
            .map(|t| t.get())
            .unwrap_or(DEFAULT_TIMEOUT);
        let client =
            RepositoryClient::new(&repo.spec.url, auth, timeout, ctx.limits).map_err(|e| {
                (
                    INDEXATION_FAILED.to_owned(),
                    FetchIndexError::Fetch(e).to_string(),
                )
            })?;
        let bytes = client.fetch_index().await.map_err(|e| {
            (
                INDEXATION_FAILED.to_owned(),
                FetchIndexError::Fetch(e).to_string(),
            )
        })?;
        let revision = flotilla_core::ids::ChartDigest::of_bytes(&bytes)
            .as_str()
            .to_owned();
        let index = tokio::task::spawn_blocking(move || Index::parse(&bytes))
            .await
            .map_err(|e| (INDEXATION_FAILED.to_owned(), e.to_string()))?
            .map_err(|e| {
                (
                    INDEXATION_FAILED.to_owned(),
                    FetchIndexError::Parse(e).to_string(),
                )
            })?;
        Ok(Arc::new(HeldIndex {
            index,
            revision,
            client,
            generation,
            requested_at: requested_at.clone(),
            fetched: Instant::now(),
        }))
    }
    .await;

    match result {
        Ok(index) => {
            let url = index.client.repository_url();
            let same = status
                .artifact
                .as_ref()
                .is_some_and(|a| a.revision == index.revision);
            if !same {
                tracing::info!(repository = %object, revision = %index.revision, "fetched a new repository index");
                status.artifact = Some(Artifact {
                    path: format!(
                        "helmrepository/{ns}/{name}/index-{}.yaml",
                        index.revision.trim_start_matches("sha256:")
                    ),
                    url: format!("{}/index.yaml", url.trim_end_matches('/')),
                    revision: index.revision.clone(),
                    digest: index.revision.clone(),
                    last_update_time: now.clone(),
                    size: None,
                    metadata: Default::default(),
                });
            }
            status.url = Some(url);
            status.conditions.delete_condition(FETCH_FAILED);
            status.conditions.delete_condition(condition::STALLED);
            status.conditions.delete_condition(condition::RECONCILING);
            status.conditions.set_condition(
                condition::READY,
                ConditionStatus::True,
                SUCCEEDED,
                format!("stored artifact: revision '{}'", index.revision),
                generation,
                &now,
            );
            ctx.indexes.put(key, index);
        }
        Err((reason, message)) => {
            let message = match &held {
                Some(h) => format!(
                    "{message}; the last index (revision '{}') is kept",
                    h.revision
                ),
                None => message,
            };
            tracing::warn!(repository = %object, reason, message, "repository index fetch failed");
            status.conditions.set_condition(
                FETCH_FAILED,
                ConditionStatus::True,
                &reason,
                message.clone(),
                generation,
                &now,
            );
            status.conditions.set_condition(
                condition::READY,
                ConditionStatus::False,
                &reason,
                message,
                generation,
                &now,
            );
            // Retry sooner than the interval, as Flux's backoff would, but keep the held
            // index's schedule: mark it stale so the next reconcile fetches.
        }
    }
    status.observed_generation = generation;
    status.last_handled_reconcile_at = requested_at;
    write_status(&ctx.client, &repo, &status, &object).await?;
    let failed = status.conditions.is_true(FETCH_FAILED);
    Ok(if failed {
        Action::requeue(jitter(interval.min(Duration::from_secs(30)), ctx.jitter))
    } else {
        Action::requeue(jitter(interval, ctx.jitter))
    })
}

async fn write_status(
    client: &Client,
    repo: &HelmRepository,
    status: &HelmRepositoryStatus,
    object: &str,
) -> Result<(), RepositoryError> {
    if repo.status.as_ref() == Some(status) {
        return Ok(());
    }
    let api: Api<HelmRepository> =
        Api::namespaced(client.clone(), &repo.namespace().unwrap_or_default());
    api.patch_status(
        &repo.name_any(),
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .map_err(|source| RepositoryError::Kube {
        object: object.to_owned(),
        what: "writing the status",
        source,
    })?;
    Ok(())
}

/// The `Ready` condition of a status, if any (for the HelmChart controller's messages).
pub fn ready_condition(status: Option<&HelmRepositoryStatus>) -> Option<&Condition> {
    status.and_then(|s| s.conditions.get_condition(condition::READY))
}
