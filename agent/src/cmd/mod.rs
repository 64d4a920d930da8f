//! The `flotilla-agent` binary's commands, behind its short `main.rs`: plan-file mode
//! ([`apply`]) and the long-lived agent ([`run`]). Both are clients of [`crate::runtime`];
//! what they share (cluster configuration, the metrics and health endpoint) is here.
//!
//! These are command implementations: they report to people through `anyhow` errors.

pub mod apply;
pub mod run;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;

use crate::charts::CachedCharts;
use crate::reconcile::Context;
use crate::reconcile::render::ChartRenderer;
use crate::session::charts::HubCharts;
use crate::telemetry::{Health, Metrics};

/// The agent's chart cache: archives by sha256 on disk, fetched from the hub when the agent
/// runs with one (plan-file mode fills it itself; without a hub a missing chart is not
/// found).
pub type ChartCache = CachedCharts<HubCharts>;

/// How many bytes of chart archives the cache keeps.
pub const CHART_CACHE_BYTES: u64 = 512 << 20;

/// The chart cache in `dir`, by default `$XDG_CACHE_HOME/flotilla-agent/charts` (or
/// `~/.cache/...`, or the temporary directory when there is no home).
pub fn chart_cache(dir: Option<&Path>) -> anyhow::Result<Arc<ChartCache>> {
    let dir = match dir {
        Some(dir) => dir.to_owned(),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(std::path::PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir)
            .join("flotilla-agent/charts"),
    };
    let cache = CachedCharts::new(dir.clone(), CHART_CACHE_BYTES, HubCharts::new())
        .with_context(|| format!("opening the chart cache {}", dir.display()))?;
    Ok(Arc::new(cache))
}

/// The client configuration: `kubeconfig` when given, else the usual inference
/// (`$KUBECONFIG`, `~/.kube/config`, then the in-cluster ServiceAccount).
pub async fn kube_config(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Config> {
    match kubeconfig {
        Some(path) => kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .with_context(|| format!("kubeconfig {}", path.display())),
        None => kube::Config::infer()
            .await
            .context("no --kubeconfig, and neither $KUBECONFIG, ~/.kube/config nor an in-cluster ServiceAccount gave a cluster configuration"),
    }
}

/// The reconcile context for a cluster configuration, keeping state in `namespace`.
pub fn context(
    config: kube::Config,
    namespace: &str,
    capabilities_ttl: std::time::Duration,
) -> anyhow::Result<Context> {
    let mut ctx = Context::from_config(config, namespace, Arc::new(ChartRenderer::default()))
        .context("building the Kubernetes client")?;
    ctx.cluster = ctx.cluster.with_capabilities_ttl(capabilities_ttl);
    Ok(ctx)
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until `shutdown` is cancelled;
/// logs the address it listens on (useful with port 0).
pub async fn serve_telemetry(
    addr: SocketAddr,
    metrics: Metrics,
    health: Health,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let shutdown = shutdown.cancelled_owned();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr} for metrics and health"))?;
    let bound = listener.local_addr()?;
    tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz");
    Ok(tokio::spawn(async move {
        if let Err(e) = crate::telemetry::serve(listener, metrics, health, shutdown).await {
            tracing::warn!(error = %e, "the metrics and health server stopped");
        }
    }))
}
