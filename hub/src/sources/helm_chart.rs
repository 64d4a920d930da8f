//! The HelmChart controller for charts of HTTP(S) HelmRepositories: resolves `spec.chart`
//! at `spec.version` (default `*`) from the index the HelmRepository controller holds
//! ([`Indexes`]), downloads the archive (checked against the index's digest), puts it in the
//! hub's content-addressed chart store (which the in-process agents read and remote agents
//! fetch from by digest; an archive the store holds already, by the index's digest, is not
//! downloaded again for another HelmChart), and writes `status.artifact` (revision = the chart version,
//! digest = `sha256:` of the archive).
//!
//! A HelmChart is reconciled when it changes, when its HelmRepository's status changes (a
//! new index), and every `spec.interval`. A chart already in the store is not downloaded
//! again. A failed download keeps the last artifact (`FetchFailed=True`, `Ready=False`).

use std::sync::Arc;
use std::time::Duration;

use flotilla_agent::charts::{CachedCharts, NoFetcher};
use flotilla_api::source::Artifact;
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

use super::helm_repository::{FETCH_FAILED, Indexes};
use crate::util::{self, error_chain, jitter};

/// Ready reason of a pulled chart (Flux's `ChartPullSucceeded`).
pub const CHART_PULL_SUCCEEDED: &str = "ChartPullSucceeded";
/// Reason of a failed download (Flux's `ChartPullError`).
pub const CHART_PULL_ERROR: &str = "ChartPullError";
/// Reason of a chart or version not in the index (Flux's `InvalidChartReference`).
pub const INVALID_CHART_REFERENCE: &str = "InvalidChartReference";
/// Reason of a HelmChart asking for `valuesFiles`, which the hub does not merge yet.
pub const VALUES_FILES_NOT_SUPPORTED: &str = "ValuesFilesNotSupported";
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
    let repos: Api<HelmRepository> = Api::all(ctx.client.clone());
    controller
        .watches(repos, watcher::Config::default(), move |repo| {
            let ns = repo.namespace().unwrap_or_default();
            let name = repo.name_any();
            store
                .state()
                .into_iter()
                .filter(|c| {
                    c.namespace().as_deref() == Some(ns.as_str())
                        && c.spec.source_ref.kind == SourceKind::HelmRepository
                        && c.spec.source_ref.name == name
                })
                .map(|c| ObjectRef::from_obj(&*c))
                .collect::<Vec<_>>()
        })
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
    fetch: bool,
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
    match result {
        Ok(None) => {}
        Ok(Some((artifact, source_revision))) => {
            status.observed_chart_name = Some(chart.spec.chart.clone());
            status.observed_source_artifact_revision = Some(source_revision);
            status.url = Some(artifact.url.clone());
            status.artifact = Some(artifact);
        }
        Err(f) => {
            tracing::warn!(chart = %object, reason = f.reason, message = %f.message, "chart not pulled");
            if f.fetch {
                status.conditions.set_condition(
                    FETCH_FAILED,
                    ConditionStatus::True,
                    f.reason,
                    f.message.clone(),
                    generation,
                    &now,
                );
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
            return Ok(Action::requeue(jitter(
                interval.min(Duration::from_secs(30)),
                ctx.jitter,
            )));
        }
    }
    if let Some(artifact) = &status.artifact {
        let message = format!(
            "pulled '{}' chart with version '{}'",
            status
                .observed_chart_name
                .as_deref()
                .unwrap_or(&chart.spec.chart),
            artifact.revision
        );
        status.conditions.delete_condition(FETCH_FAILED);
        status.conditions.delete_condition(condition::STALLED);
        status.conditions.delete_condition(condition::RECONCILING);
        status.conditions.set_condition(
            condition::READY,
            ConditionStatus::True,
            CHART_PULL_SUCCEEDED,
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

/// Resolves and downloads the chart: the new artifact and the index revision it came
/// from, `None` when the current artifact is still the one the index picks.
async fn pull(
    chart: &HelmChart,
    ctx: &ChartContext,
    status: &HelmChartStatus,
) -> Result<Option<(Artifact, String)>, Failure> {
    let ns = chart.namespace().unwrap_or_default();
    let source = &chart.spec.source_ref;
    if source.kind != SourceKind::HelmRepository {
        return Err(Failure {
            reason: SOURCE_UNAVAILABLE,
            message: format!(
                "unsupported source kind '{:?}': only HelmRepository is served",
                source.kind
            ),
            fetch: false,
        });
    }
    if !chart.spec.values_files.is_empty() {
        // Not served yet: refusing is better than installing without the values asked for.
        return Err(Failure {
            reason: VALUES_FILES_NOT_SUPPORTED,
            message: "spec.valuesFiles is not supported yet: remove it, or move those values to \
                      the HelmRelease's values or valuesFrom"
                .into(),
            fetch: false,
        });
    }
    let Some(held) = ctx.indexes.get(&ns, &source.name) else {
        return Err(Failure {
            reason: SOURCE_UNAVAILABLE,
            message: format!(
                "HelmRepository '{ns}/{}' has no index yet (not found, not ready, or of type oci)",
                source.name
            ),
            fetch: false,
        });
    };
    let version = chart.spec.version.as_deref().unwrap_or("*");
    let resolving = std::time::Instant::now();
    let cv = held
        .index
        .resolve(&chart.spec.chart, version)
        .map_err(|e| Failure {
            reason: INVALID_CHART_REFERENCE,
            message: e.condition_message(),
            fetch: false,
        })?;
    ctx.metrics
        .observe_step("index_resolve", resolving.elapsed());
    let expected = cv.digest();
    if let (Some(current), Some(expected)) = (&status.artifact, &expected)
        && current.digest == expected.as_str()
        && current.revision == cv.version()
        && ctx.charts.cached_size(expected).is_some()
    {
        return Ok(None);
    }
    let url = cv
        .chart_url(&held.client.repository_url())
        .map_err(|e| Failure {
            reason: CHART_PULL_ERROR,
            message: format!(
                "failed to get chart version for remote reference: {}",
                error_chain(&e)
            ),
            fetch: true,
        })?;
    let artifact = |digest: &ChartDigest, size: u64| Artifact {
        path: format!(
            "helmchart/{ns}/{}/{}-{}.tgz",
            chart.name_any(),
            cv.name(),
            cv.version()
        ),
        url: url.clone(),
        revision: cv.version().to_owned(),
        digest: digest.as_str().to_owned(),
        last_update_time: util::now(),
        size: i64::try_from(size).ok(),
        metadata: Default::default(),
    };
    // The archive the index names is in the store already (the HelmChart of another
    // HelmRelease of this chart version pulled it): no download. The store is content
    // addressed and verifies what it serves.
    if let Some(expected) = &expected
        && let Some(size) = ctx.charts.cached_size(expected)
    {
        tracing::debug!(
            chart = %format!("{ns}/{}", chart.name_any()),
            version = cv.version(),
            digest = %expected,
            "chart already in the store"
        );
        return Ok(Some((artifact(expected, size), held.revision.clone())));
    }
    let bytes = held
        .client
        .fetch_chart(&url, expected.as_ref())
        .await
        .map_err(|e| Failure {
            reason: CHART_PULL_ERROR,
            message: format!(
                "failed to download chart for remote reference: {}",
                error_chain(&e)
            ),
            fetch: true,
        })?;
    let size = bytes.len() as u64;
    let (bytes, loaded) = tokio::task::spawn_blocking(move || {
        let loaded = flotilla_chart::load_archive(&bytes);
        (bytes, loaded)
    })
    .await
    .map_err(|e| Failure {
        reason: CHART_PULL_ERROR,
        message: format!("failed to load chart: {e}"),
        fetch: true,
    })?;
    let loaded = loaded.map_err(|e| Failure {
        reason: CHART_PULL_ERROR,
        message: format!("failed to load chart: {}", error_chain(&e)),
        fetch: true,
    })?;
    let digest: ChartDigest = ctx
        .charts
        .insert(bytes, loaded)
        .await
        .map_err(|e| Failure {
            reason: CHART_PULL_ERROR,
            message: format!("failed to store chart: {}", error_chain(&e)),
            fetch: true,
        })?;
    tracing::info!(
        chart = %format!("{ns}/{}", chart.name_any()),
        version = cv.version(),
        digest = %digest,
        "chart pulled into the store"
    );
    Ok(Some((artifact(&digest, size), held.revision.clone())))
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
