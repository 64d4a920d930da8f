//! The HelmChart controller: resolves `spec.chart` at `spec.version` (default `*`) from its
//! HelmRepository, as Flux's source-controller does, and puts the chart in the hub's
//! content-addressed chart store (which the in-process agents read and remote agents fetch
//! from by digest), then writes `status.artifact` (revision = the chart version, digest =
//! `sha256:` of the archive).
//!
//! - An HTTP(S) repository: the version is resolved in the index the HelmRepository
//!   controller holds ([`Indexes`]); the archive is downloaded and checked against the
//!   index's digest. An archive the store holds already, by the index's digest, is not
//!   downloaded again for another HelmChart.
//! - An OCI repository (`type: oci`, which has no index and no artifact of its own): the
//!   client is made from the repository's URL, Secrets, `insecure` and `timeout`
//!   ([`oci_repository::helm_repository_client`]); a version is taken as it is, a
//!   constraint is resolved over the tags of `<url>/<chart>`; the chart is pulled from
//!   `<url>/<chart>:<version>` (digests checked). Credential and TLS failures are
//!   `AuthenticationFailed`, as in Flux.
//! - `spec.valuesFiles` (other than just `values.yaml`): the chart is packaged anew with the
//!   files merged into its `values.yaml` and the generation in its version
//!   ([`values_files`]): revision `<version>+<generation>`, the new archive's digest,
//!   `Ready` reason `ChartPackageSucceeded`; a build failure is `BuildFailed=True` (and
//!   `Stalled=True` when only a spec change can fix it).
//!
//! A HelmChart is reconciled when it changes, when its HelmRepository changes (a new index),
//! when this hub loads its repository's index (after a start, when the repository's status
//! does not change; until then a HelmChart whose repository is Ready waits without touching
//! its status), and every `spec.interval`. The current artifact is kept, without a
//! download, while the source resolves to its revision and the store holds it. A failed fetch keeps the last
//! artifact (`FetchFailed=True`, `Ready=False`).

use std::sync::Arc;
use std::time::Duration;

use flotilla_agent::charts::{CachedCharts, NoFetcher};
use flotilla_api::source::{Artifact, HelmRepositoryType};
use flotilla_api::{HelmChart, HelmChartStatus, HelmRepository};
use flotilla_core::ids::ChartDigest;
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition};
use flotilla_core::spec::{RECONCILE_REQUEST_ANNOTATION, SourceKind};
use futures::StreamExt as _;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};

use super::helm_repository::{AUTHENTICATION_FAILED, FETCH_FAILED, HeldIndex, Indexes};
use super::oci::{self, OciClient, OciError, OciLimits, Reference};
use super::oci_repository;
use super::values_files::{self, ValuesFilesError};
use crate::util::{self, error_chain, jitter};

/// Ready reason of a pulled chart (Flux's `ChartPullSucceeded`).
pub const CHART_PULL_SUCCEEDED: &str = "ChartPullSucceeded";
/// Reason of a failed download (Flux's `ChartPullError`).
pub const CHART_PULL_ERROR: &str = "ChartPullError";
/// Reason of a chart or version not in the index (Flux's `InvalidChartReference`).
pub const INVALID_CHART_REFERENCE: &str = "InvalidChartReference";
/// Ready reason of a chart packaged with its values files (Flux's `ChartPackageSucceeded`).
pub const CHART_PACKAGE_SUCCEEDED: &str = "ChartPackageSucceeded";
/// `BuildFailed`: the chart could not be built (values files).
pub const BUILD_FAILED: &str = "BuildFailed";
/// The backstop retry of a HelmChart waiting for its repository's index to be loaded (the
/// load itself triggers it at once).
const INDEX_LOADING_RETRY: Duration = Duration::from_secs(5);

/// Reason of an HTTP HelmRepository without an index yet (Flux's `NoSourceArtifact`).
pub const NO_SOURCE_ARTIFACT: &str = "NoSourceArtifact";
/// Reason of a source that has no artifact to resolve from yet.
pub const SOURCE_UNAVAILABLE: &str = "SourceUnavailable";

/// What the controller needs.
pub struct ChartContext {
    /// The hub's cluster.
    pub client: Client,
    /// The repositories' indexes.
    pub indexes: Arc<Indexes>,
    /// The chart store.
    pub charts: Arc<CachedCharts<NoFetcher>>,
    /// Interval jitter fraction.
    pub jitter: f64,
    /// Where index resolutions are timed.
    pub metrics: crate::telemetry::HubMetrics,
    /// Size limits of OCI registry answers (charts of `type: oci` repositories).
    pub oci_limits: OciLimits,
}

/// Why a HelmChart reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum ChartReconcileError {
    /// The Kubernetes API failed.
    #[error("HelmChart {object}: writing the status")]
    Status {
        /// `namespace/name`.
        object: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
}

impl ChartReconcileError {
    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        "kube"
    }

    /// Whether a retry may help.
    pub fn is_transient(&self) -> bool {
        true
    }
}

impl std::fmt::Debug for ChartContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChartContext").finish_non_exhaustive()
    }
}

/// Runs the HelmChart controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<ChartContext>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<HelmChart> = Api::all(ctx.client.clone());
    let controller = Controller::new(api, watcher::Config::default());
    let store = controller.store();
    let charts_of = move |ns: &str, name: &str| {
        store
            .state()
            .into_iter()
            .filter(|c| {
                c.namespace().as_deref() == Some(ns)
                    && c.spec.source_ref.kind == SourceKind::HelmRepository
                    && c.spec.source_ref.name == name
            })
            .map(|c| ObjectRef::from_obj(&*c))
            .collect::<Vec<_>>()
    };
    let on_repository = charts_of.clone();
    // An index loaded for the first time in this process: after a hub restart the repositories'
    // statuses do not change (same artifact), so their watch says nothing.
    let loaded = futures::stream::unfold(ctx.indexes.loaded(), |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(key) => return Some((key, rx)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .flat_map(move |(ns, name)| futures::stream::iter(charts_of(&ns, &name)));
    let repos: Api<HelmRepository> = Api::all(ctx.client.clone());
    controller
        .watches(repos, watcher::Config::default(), move |repo| {
            on_repository(&repo.namespace().unwrap_or_default(), &repo.name_any())
        })
        .reconcile_on(loaded)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %error_chain(&e), "HelmChart reconcile");
            }
        })
        .await;
}

fn error_policy(_: Arc<HelmChart>, e: &ChartReconcileError, _: Arc<ChartContext>) -> Action {
    tracing::warn!(error = %error_chain(e), "HelmChart reconcile failed");
    Action::requeue(Duration::from_secs(10))
}

/// A failure, as the condition says it.
struct Failure {
    reason: &'static str,
    message: String,
    /// The condition that is set to `True` besides `Ready=False`: `FetchFailed` for a
    /// failed fetch, `BuildFailed` for a failed build (values files), none otherwise.
    condition: Option<&'static str>,
    /// Only a change of the HelmChart can fix it (Flux's `Stalled`).
    stalled: bool,
    /// Not a failure: the repository is Ready with an index this hub has not loaded yet
    /// (it just started). The status is left as it is; the chart is reconciled when the
    /// index arrives ([`Indexes::loaded`]).
    loading: bool,
}

impl Failure {
    fn new(reason: &'static str, message: String) -> Failure {
        Failure {
            reason,
            message,
            condition: None,
            stalled: false,
            loading: false,
        }
    }

    fn fetch(reason: &'static str, message: String) -> Failure {
        Failure {
            condition: Some(FETCH_FAILED),
            ..Failure::new(reason, message)
        }
    }
}

/// A new artifact.
struct Pulled {
    artifact: Artifact,
    /// The source artifact's revision (an HTTP repository's index); none for OCI.
    source_revision: Option<String>,
    /// What the Ready message says ([`summary`]).
    message: String,
    /// The values files that made the packaged `values.yaml`.
    merged: Vec<String>,
}

async fn reconcile(
    chart: Arc<HelmChart>,
    ctx: Arc<ChartContext>,
) -> Result<Action, ChartReconcileError> {
    if chart.metadata.deletion_timestamp.is_some() || chart.spec.suspend {
        return Ok(Action::await_change());
    }
    let ns = chart.namespace().unwrap_or_default();
    let name = chart.name_any();
    let object = format!("{ns}/{name}");
    let generation = chart.metadata.generation.unwrap_or_default();
    let interval = chart.spec.interval.get();
    let mut status = chart.status.clone().unwrap_or_default();
    let now = util::now();

    let result = pull(&chart, &ctx, &status).await;
    let message = match result {
        Ok(None) => up_to_date_summary(&chart, &status),
        Ok(Some(pulled)) => {
            status.observed_chart_name = Some(chart.spec.chart.clone());
            status.observed_source_artifact_revision = pulled.source_revision;
            status.observed_values_files = if chart.spec.ignore_missing_values_files {
                pulled.merged
            } else {
                Vec::new()
            };
            status.url = Some(pulled.artifact.url.clone());
            status.artifact = Some(pulled.artifact);
            Some(pulled.message)
        }
        Err(f) if f.loading => {
            tracing::debug!(chart = %object, message = %f.message, "waiting for the repository's index");
            return Ok(Action::requeue(INDEX_LOADING_RETRY));
        }
        Err(f) => {
            tracing::warn!(chart = %object, reason = f.reason, message = %f.message, "chart not pulled");
            for other in [FETCH_FAILED, BUILD_FAILED] {
                if Some(other) != f.condition {
                    status.conditions.delete_condition(other);
                }
            }
            if let Some(c) = f.condition {
                status.conditions.set_condition(
                    c,
                    ConditionStatus::True,
                    f.reason,
                    f.message.clone(),
                    generation,
                    &now,
                );
            }
            if f.stalled {
                status.conditions.set_condition(
                    condition::STALLED,
                    ConditionStatus::True,
                    f.reason,
                    f.message.clone(),
                    generation,
                    &now,
                );
            } else {
                status.conditions.delete_condition(condition::STALLED);
            }
            status.conditions.set_condition(
                condition::READY,
                ConditionStatus::False,
                f.reason,
                f.message,
                generation,
                &now,
            );
            status.observed_generation = generation;
            write_status(&ctx.client, &chart, &status, &object).await?;
            let retry = if f.stalled {
                interval
            } else {
                interval.min(Duration::from_secs(30))
            };
            return Ok(Action::requeue(jitter(retry, ctx.jitter)));
        }
    };
    if let Some(message) = message {
        let reason = if values_files::effective(&chart.spec.values_files).is_empty() {
            CHART_PULL_SUCCEEDED
        } else {
            CHART_PACKAGE_SUCCEEDED
        };
        status.conditions.delete_condition(FETCH_FAILED);
        status.conditions.delete_condition(BUILD_FAILED);
        status.conditions.delete_condition(condition::STALLED);
        status.conditions.delete_condition(condition::RECONCILING);
        status.conditions.set_condition(
            condition::READY,
            ConditionStatus::True,
            reason,
            message,
            generation,
            &now,
        );
    }
    status.observed_generation = generation;
    status.last_handled_reconcile_at = chart
        .annotations()
        .get(RECONCILE_REQUEST_ANNOTATION)
        .cloned();
    write_status(&ctx.client, &chart, &status, &object).await?;
    Ok(Action::requeue(jitter(interval, ctx.jitter)))
}

/// Flux's `Build.Summary`: `pulled 'hello' chart with version '0.1.0'`, or `packaged ...`
/// with `and merged values files [a.yaml b.yaml]` when values files made the chart.
fn summary(name: &str, version: &str, packaged: bool, merged: &[String]) -> String {
    let action = if packaged { "packaged" } else { "pulled" };
    let mut s = format!("{action} '{name}' chart with version '{version}'");
    if !merged.is_empty() {
        s.push_str(&format!(" and merged values files [{}]", merged.join(" ")));
    }
    s
}

/// The Ready message of an artifact that is still current (Flux's cached build: the values
/// files it reports are those observed, else those asked for).
fn up_to_date_summary(chart: &HelmChart, status: &HelmChartStatus) -> Option<String> {
    let artifact = status.artifact.as_ref()?;
    let files = values_files::effective(&chart.spec.values_files);
    let merged = if status.observed_values_files.is_empty() {
        files
    } else {
        &status.observed_values_files
    };
    Some(summary(
        status
            .observed_chart_name
            .as_deref()
            .unwrap_or(&chart.spec.chart),
        &artifact.revision,
        !files.is_empty(),
        merged,
    ))
}

/// Where a HelmChart's chart comes from.
enum Source {
    /// An HTTP(S) repository's held index.
    Index(Arc<HeldIndex>),
    /// An OCI repository (`type: oci`): no index; tags are listed.
    Oci(OciClient),
}

/// The chart version to fetch, and where from.
enum Resolved {
    Index {
        held: Arc<HeldIndex>,
        version: String,
        url: String,
        expected: Option<ChartDigest>,
        source_revision: String,
    },
    Oci {
        oci: OciClient,
        version: String,
    },
}

impl Resolved {
    fn version(&self) -> &str {
        match self {
            Resolved::Index { version, .. } | Resolved::Oci { version, .. } => version,
        }
    }
}

/// The HelmRepository of `chart` as a [`Source`].
async fn source(chart: &HelmChart, ctx: &ChartContext) -> Result<Source, Failure> {
    let ns = chart.namespace().unwrap_or_default();
    let name = &chart.spec.source_ref.name;
    if let Some(held) = ctx.indexes.get(&ns, name) {
        return Ok(Source::Index(held));
    }
    let api: Api<HelmRepository> = Api::namespaced(ctx.client.clone(), &ns);
    let repository = match api.get_opt(name).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return Err(Failure::fetch(
                SOURCE_UNAVAILABLE,
                format!("failed to get source: HelmRepository '{ns}/{name}' not found"),
            ));
        }
        Err(e) => {
            return Err(Failure::fetch(
                SOURCE_UNAVAILABLE,
                format!(
                    "failed to get source: HelmRepository '{ns}/{name}': {}",
                    error_chain(&e)
                ),
            ));
        }
    };
    if repository.spec.type_ != Some(HelmRepositoryType::Oci) {
        // A suspended repository is not fetched: its index will not come.
        let ready = !repository.spec.suspend
            && repository
                .status
                .as_ref()
                .is_some_and(|s| s.artifact.is_some() && s.conditions.is_true(condition::READY));
        if ready {
            return Err(Failure {
                loading: true,
                ..Failure::new(
                    NO_SOURCE_ARTIFACT,
                    format!("the index of HelmRepository '{ns}/{name}' is not loaded yet"),
                )
            });
        }
        return Err(Failure::fetch(
            NO_SOURCE_ARTIFACT,
            format!("no artifact available for HelmRepository source '{name}'"),
        ));
    }
    let client = oci_repository::helm_repository_client(
        &ctx.client,
        &repository,
        &chart.spec.chart,
        ctx.oci_limits,
    )
    .await
    .map_err(|e| Failure {
        stalled: e.is_stalling(),
        ..Failure::fetch(e.reason(), e.to_string())
    })?;
    Ok(Source::Oci(client))
}

/// A failed OCI resolution or pull, as Flux's HelmChart reconciler words it: credential
/// and TLS problems are `AuthenticationFailed` ("failed to authenticate with the Helm
/// repository: ..."), an unknown version `InvalidChartReference`, others `ChartPullError`.
fn oci_failure(step: &str, e: &OciError) -> Failure {
    let message = format!("{step}: {}", error_chain(e));
    match e {
        OciError::Unauthorized { .. }
        | OciError::InvalidCredentials { .. }
        | OciError::Tls { .. }
        | OciError::InvalidTlsConfig { .. } => Failure::fetch(
            AUTHENTICATION_FAILED,
            format!("failed to authenticate with the Helm repository: {message}"),
        ),
        OciError::NoTags { .. }
        | OciError::NoVersionMatch { .. }
        | OciError::InvalidVersion { .. }
        | OciError::InvalidTag { .. } => Failure::fetch(INVALID_CHART_REFERENCE, message),
        _ => Failure::fetch(CHART_PULL_ERROR, message),
    }
}

/// Resolves and downloads the chart (and applies `valuesFiles`): the new artifact, `None`
/// when the current artifact is still the one the source picks.
async fn pull(
    chart: &HelmChart,
    ctx: &ChartContext,
    status: &HelmChartStatus,
) -> Result<Option<Pulled>, Failure> {
    let ns = chart.namespace().unwrap_or_default();
    if chart.spec.source_ref.kind != SourceKind::HelmRepository {
        return Err(Failure::new(
            SOURCE_UNAVAILABLE,
            format!(
                "unsupported source kind '{:?}': only HelmRepository is served",
                chart.spec.source_ref.kind
            ),
        ));
    }
    let generation = chart.metadata.generation.unwrap_or_default();
    let files = values_files::effective(&chart.spec.values_files);
    let source = source(chart, ctx).await?;
    let version = chart.spec.version.as_deref().unwrap_or("*");
    let resolving = std::time::Instant::now();
    let resolved = match source {
        Source::Index(held) => {
            let cv = held
                .index
                .resolve(&chart.spec.chart, version)
                .map_err(|e| Failure::new(INVALID_CHART_REFERENCE, e.condition_message()))?;
            ctx.metrics
                .observe_step("index_resolve", resolving.elapsed());
            let url = cv.chart_url(&held.client.repository_url()).map_err(|e| {
                Failure::fetch(
                    CHART_PULL_ERROR,
                    format!(
                        "failed to get chart version for remote reference: {}",
                        error_chain(&e)
                    ),
                )
            })?;
            let (version, expected) = (cv.version().to_owned(), cv.digest());
            let source_revision = held.revision.clone();
            Resolved::Index {
                held,
                version,
                url,
                expected,
                source_revision,
            }
        }
        Source::Oci(oci) => {
            let version = oci
                .resolve_chart_version(version)
                .await
                .map_err(|e| oci_failure("failed to get chart version for remote reference", &e))?;
            Resolved::Oci { oci, version }
        }
    };
    // The revision the artifact will have: the version, with the generation when values
    // files are merged (Flux's `VersionMetadata`).
    let revision = if files.is_empty() {
        resolved.version().to_owned()
    } else {
        values_files::version_with_generation(resolved.version(), generation)
            .map_err(build_failure)?
    };
    if let Some(current) = &status.artifact
        && current.revision == revision
        && status.observed_chart_name.as_deref() == Some(chart.spec.chart.as_str())
        && ChartDigest::new(current.digest.clone())
            .ok()
            .is_some_and(|d| ctx.charts.cached_size(&d).is_some())
    {
        let current_digest = match &resolved {
            // Without values files the artifact is the repository's archive: it must be
            // the one the index lists now (a version may be re-published).
            Resolved::Index {
                expected: Some(expected),
                ..
            } if files.is_empty() => current.digest == expected.as_str(),
            // With them, a new generation is a new build (Flux's `Force`).
            _ => files.is_empty() || status.observed_generation == generation,
        };
        if current_digest {
            return Ok(None);
        }
    }
    let name = chart.name_any();
    let chart_name = chart.spec.chart.clone();
    let artifact = |url: &str, revision: &str, digest: &ChartDigest, size: u64| Artifact {
        path: format!("helmchart/{ns}/{name}/{chart_name}-{revision}.tgz"),
        url: url.to_owned(),
        revision: revision.to_owned(),
        digest: digest.as_str().to_owned(),
        last_update_time: util::now(),
        size: i64::try_from(size).ok(),
        metadata: Default::default(),
    };
    let (archive, url, source_revision) = match &resolved {
        Resolved::Index {
            held,
            version,
            url,
            expected,
            source_revision,
        } => {
            // The archive the index names is in the store already (the HelmChart of
            // another HelmRelease of this chart version pulled it): no download. The store
            // is content addressed and verifies what it serves.
            if files.is_empty()
                && let Some(expected) = expected
                && let Some(size) = ctx.charts.cached_size(expected)
            {
                tracing::debug!(chart = %format!("{ns}/{name}"), version, digest = %expected, "chart already in the store");
                return Ok(Some(Pulled {
                    artifact: artifact(url, version, expected, size),
                    source_revision: Some(source_revision.clone()),
                    message: summary(&chart_name, version, false, &[]),
                    merged: Vec::new(),
                }));
            }
            let bytes = held
                .client
                .fetch_chart(url, expected.as_ref())
                .await
                .map_err(|e| {
                    Failure::fetch(
                        CHART_PULL_ERROR,
                        format!(
                            "failed to download chart for remote reference: {}",
                            error_chain(&e)
                        ),
                    )
                })?;
            (bytes, url.clone(), Some(source_revision.clone()))
        }
        Resolved::Oci { oci, version } => {
            let reference = Reference::Tag(oci::version_tag(version));
            let pulled = oci
                .pull_chart(&reference)
                .await
                .map_err(|e| oci_failure("failed to download chart for remote reference", &e))?;
            (pulled.archive, format!("{}{reference}", oci.url()), None)
        }
    };
    let values_files = files.to_vec();
    let ignore_missing = chart.spec.ignore_missing_values_files;
    let version = revision.clone();
    let built = tokio::task::spawn_blocking(move || {
        build(archive, &values_files, ignore_missing, &version)
    })
    .await
    .map_err(|e| Failure::fetch(CHART_PULL_ERROR, format!("failed to load chart: {e}")))??;
    let size = built.archive.len() as u64;
    let digest: ChartDigest = ctx
        .charts
        .insert(built.archive, built.chart)
        .await
        .map_err(|e| {
            Failure::fetch(
                CHART_PULL_ERROR,
                format!("failed to store chart: {}", error_chain(&e)),
            )
        })?;
    tracing::info!(
        chart = %format!("{ns}/{name}"),
        version = %revision,
        digest = %digest,
        "chart pulled into the store"
    );
    Ok(Some(Pulled {
        artifact: artifact(&url, &revision, &digest, size),
        source_revision,
        message: summary(&chart_name, &revision, !files.is_empty(), &built.merged),
        merged: built.merged,
    }))
}

/// A chart ready for the store.
struct Built {
    archive: Vec<u8>,
    chart: flotilla_chart::Chart,
    merged: Vec<String>,
}

/// Loads the archive and, with values files, packages it anew at `version`
/// ([`values_files::package`]).
fn build(
    archive: Vec<u8>,
    files: &[String],
    ignore_missing: bool,
    version: &str,
) -> Result<Built, Failure> {
    let loaded = flotilla_chart::load_archive(&archive).map_err(|e| {
        Failure::fetch(
            CHART_PULL_ERROR,
            format!("failed to load chart: {}", error_chain(&e)),
        )
    })?;
    match values_files::package(&archive, &loaded, files, ignore_missing, version)
        .map_err(build_failure)?
    {
        None => Ok(Built {
            archive,
            chart: loaded,
            merged: Vec::new(),
        }),
        Some(packaged) => {
            let chart = flotilla_chart::load_archive(&packaged.archive).map_err(|e| {
                build_failure(ValuesFilesError::Package(format!(
                    "failed to load the packaged chart: {}",
                    error_chain(&e)
                )))
            })?;
            Ok(Built {
                archive: packaged.archive,
                chart,
                merged: packaged.merged,
            })
        }
    }
}

fn build_failure(e: ValuesFilesError) -> Failure {
    Failure {
        reason: e.reason(),
        message: e.to_string(),
        condition: Some(BUILD_FAILED),
        stalled: e.is_persistent(),
        loading: false,
    }
}

async fn write_status(
    client: &Client,
    chart: &HelmChart,
    status: &HelmChartStatus,
    object: &str,
) -> Result<(), ChartReconcileError> {
    if chart.status.as_ref() == Some(status) {
        return Ok(());
    }
    let api: Api<HelmChart> =
        Api::namespaced(client.clone(), &chart.namespace().unwrap_or_default());
    api.patch_status(
        &chart.name_any(),
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .map_err(|source| ChartReconcileError::Status {
        object: object.to_owned(),
        source,
    })?;
    Ok(())
}
