//! The hub's metrics and probe server: `/metrics` (OpenMetrics text), `/healthz` and
//! `/readyz`, over plain HTTP/1.1.
//!
//! Series (registered once, in [`HubMetrics::new`]):
//! - `flotilla_hub_reconcile_duration_seconds{controller,result}`: one reconcile of a
//!   HelmRelease (`helmrelease`), by result: `success` (plan sent), `not_ready` (a hub
//!   condition: source, values, dependency, target), `error` (an API or link failure);
//! - `flotilla_hub_reconciles_total{controller,result}`: the same, counted;
//! - `flotilla_hub_plan_build_seconds{step}`: the hub's own work for one plan, by step:
//!   `source` (the HelmRelease's HelmChart applied and its artifact read, or its chartRef
//!   read), `chart` (the chart's metadata from the store), `values` (valuesFrom read and
//!   composed), `plan` (the plan built and digested), and `total` (all of these, plus
//!   `dependsOn` and the target: from the start of the plan to the plan revision, before it
//!   is recorded and sent); and `index_resolve` (a HelmChart's version constraint resolved
//!   against its repository's index, by the HelmChart controller). Finer buckets than the
//!   reconcile series: most steps take well under a millisecond or one API round trip;
//! - `flotilla_hub_values_reads_total{source}`: `valuesFrom` objects read for a reconcile,
//!   from the values cache (`cache`) or the API (`api`; see `controller::values_cache`);
//! - `flotilla_hub_queue_depth{controller}`: HelmReleases waiting for a reconcile worker
//!   (asked for or due, not started; see `controller::queue`), sampled when scraped;
//! - `flotilla_hub_helmreleases{ready}`: HelmReleases by the status of their `Ready`
//!   condition (`True`, `False`, `Unknown`; `Unknown` too when there is none yet), from the
//!   controller's cache, sampled when scraped;
//! - `flotilla_hub_agent_sessions`: agent sessions up (their Hello accepted);
//! - `flotilla_hub_chart_archives_sent_total{how}`: chart archives sent to agents, `with_plan`
//!   (inside a plan, the agent holding no copy as far as the hub knew) or by `get_chart`
//!   (a `GetChart` transfer served to its end);
//! - `flotilla_hub_cluster_heartbeat_writes_total{result}`: ManagedCluster heartbeat writes
//!   due, `written` or `deferred` to a later status tick by the hub-wide budget;
//! - `flotilla_hub_helmreleasesets{condition,reason}`: HelmReleaseSets whose condition
//!   `condition` is True, by its reason (`RolloutPaused` with `MaxFailuresExceeded` is a
//!   rollout stopped by failures), from the set controller's cache, sampled when scraped;
//! - `flotilla_hub_managed_clusters{accepted,connected}`: ManagedClusters by
//!   `spec.accepted` and whether their agent holds a session now, sampled when scraped.
//!
//! `deploy/monitoring/` holds alert rules and a dashboard on these series (and the
//! agent's), tested with `promtool test rules`.

use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    controller: &'static str,
    result: &'static str,
}

/// Buckets of the plan-build steps: 25 µs to 2.5 s.
const STEP_BUCKETS: [f64; 15] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 2.5,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    step: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReadyLabels {
    ready: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HowLabels {
    how: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    condition: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    accepted: &'static str,
    connected: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Why the hub dropped or refused something an agent (or anyone on the network) sent
/// (`flotilla_hub_agent_input_dropped_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dropped {
    /// A status report older than one already queued for its HelmRelease.
    Stale,
    /// An Event over its HelmRelease's rate limit.
    EventRate,
    /// A report that found its HelmRelease's queue (or the whole report queue) full.
    QueueFull,
    /// A report or ack for a plan revision the hub never sent to that cluster.
    UnsentRevision,
    /// A report for a HelmRelease the cluster was not given.
    NotGiven,
    /// A report that does not decode (a field missing or malformed).
    Invalid,
    /// A `Register` call over the hub's rate.
    RegisterRate,
    /// A `Register` call while too many were in flight.
    RegisterConcurrency,
    /// A `Renew` over the session's rate.
    RenewRate,
}

impl Dropped {
    /// Every reason, in the order of their labels.
    pub const ALL: [Dropped; 9] = [
        Dropped::Stale,
        Dropped::EventRate,
        Dropped::QueueFull,
        Dropped::UnsentRevision,
        Dropped::NotGiven,
        Dropped::Invalid,
        Dropped::RegisterRate,
        Dropped::RegisterConcurrency,
        Dropped::RenewRate,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Dropped::Stale => "stale",
            Dropped::EventRate => "event_rate",
            Dropped::QueueFull => "queue_full",
            Dropped::UnsentRevision => "unsent_revision",
            Dropped::NotGiven => "not_given",
            Dropped::Invalid => "invalid",
            Dropped::RegisterRate => "register_rate",
            Dropped::RegisterConcurrency => "register_concurrency",
            Dropped::RenewRate => "renew_rate",
        }
    }
}

/// How a chart archive went to an agent (`flotilla_hub_chart_archives_sent_total{how}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartSent {
    /// Inside a `PlanUpsert`.
    WithPlan,
    /// A `GetChart` transfer served to its end.
    GetChart,
}

impl ChartSent {
    fn label(self) -> &'static str {
        match self {
            ChartSent::WithPlan => "with_plan",
            ChartSent::GetChart => "get_chart",
        }
    }
}

/// The values of the gauges sampled at scrape time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// HelmReleases waiting for a reconcile worker.
    pub queue_depth: usize,
    /// HelmReleases whose `Ready` condition is `True`.
    pub ready_true: usize,
    /// HelmReleases whose `Ready` condition is `False`.
    pub ready_false: usize,
    /// HelmReleases whose `Ready` condition is `Unknown` or missing.
    pub ready_unknown: usize,
}

type Sampler = Box<dyn Fn() -> Sample + Send + Sync>;

/// ManagedClusters by `spec.accepted` and session (`flotilla_hub_managed_clusters`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterCounts {
    /// Accepted, with a session up.
    pub accepted_connected: usize,
    /// Accepted, without a session.
    pub accepted_disconnected: usize,
    /// Not accepted, with a session (a pending agent's, refused work).
    pub pending_connected: usize,
    /// Not accepted, without a session.
    pub pending_disconnected: usize,
}

/// HelmReleaseSets with a True condition, by `(condition type, reason)`.
pub type SetConditionCounts = std::collections::BTreeMap<(String, String), usize>;

type SetSampler = Box<dyn Fn() -> SetConditionCounts + Send + Sync>;
type ClusterSampler = Box<dyn Fn() -> ClusterCounts + Send + Sync>;

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

fn step_histogram() -> Histogram {
    Histogram::new(STEP_BUCKETS)
}

/// The steps of `flotilla_hub_plan_build_seconds`.
pub const PLAN_STEPS: [&str; 6] = [
    "source",
    "chart",
    "values",
    "plan",
    "total",
    "index_resolve",
];

/// The hub's metrics. Cheap to clone; clones share the registry.
#[derive(Clone)]
pub struct HubMetrics {
    registry: Arc<Registry>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
    reconciles: Family<Labels, Counter>,
    plan_build: Family<StepLabels, Histogram, fn() -> Histogram>,
    queue_depth: Family<ControllerLabels, Gauge>,
    releases: Family<ReadyLabels, Gauge>,
    values_reads: Family<SourceLabels, Counter>,
    sessions: Gauge,
    charts_sent: Family<HowLabels, Counter>,
    heartbeat_writes: Family<WriteLabels, Counter>,
    dropped: Family<ReasonLabels, Counter>,
    sets: Family<ConditionLabels, Gauge>,
    clusters: Family<ClusterLabels, Gauge>,
    sampler: Arc<std::sync::Mutex<Option<Sampler>>>,
    set_sampler: Arc<std::sync::Mutex<Option<SetSampler>>>,
    cluster_sampler: Arc<std::sync::Mutex<Option<ClusterSampler>>>,
}

impl fmt::Debug for HubMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubMetrics").finish_non_exhaustive()
    }
}

impl Default for HubMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl HubMetrics {
    /// Registers every series.
    pub fn new() -> HubMetrics {
        let mut registry = Registry::default();
        let duration = Family::new_with_constructor(histogram as fn() -> Histogram);
        registry.register_with_unit(
            "flotilla_hub_reconcile_duration",
            "Duration of one reconcile, by controller and result",
            Unit::Seconds,
            duration.clone(),
        );
        let reconciles = Family::<Labels, Counter>::default();
        registry.register(
            "flotilla_hub_reconciles",
            "Reconciles, by controller and result",
            reconciles.clone(),
        );
        let plan_build = Family::new_with_constructor(step_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "flotilla_hub_plan_build",
            "The hub's work for one plan, by step",
            Unit::Seconds,
            plan_build.clone(),
        );
        for step in PLAN_STEPS {
            let _ = plan_build.get_or_create(&StepLabels { step });
        }
        let queue_depth = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "flotilla_hub_queue_depth",
            "Objects waiting for a reconcile worker, by controller",
            queue_depth.clone(),
        );
        let _ = queue_depth.get_or_create(&ControllerLabels {
            controller: "helmrelease",
        });
        let releases = Family::<ReadyLabels, Gauge>::default();
        registry.register(
            "flotilla_hub_helmreleases",
            "HelmReleases by the status of their Ready condition",
            releases.clone(),
        );
        for ready in ["True", "False", "Unknown"] {
            let _ = releases.get_or_create(&ReadyLabels { ready });
        }
        let values_reads = Family::<SourceLabels, Counter>::default();
        registry.register(
            "flotilla_hub_values_reads",
            "valuesFrom objects read, from the values cache or the API",
            values_reads.clone(),
        );
        for source in ["cache", "api"] {
            let _ = values_reads.get_or_create(&SourceLabels { source });
        }
        let sessions = Gauge::default();
        registry.register(
            "flotilla_hub_agent_sessions",
            "Agent sessions up (their Hello accepted)",
            sessions.clone(),
        );
        let charts_sent = Family::<HowLabels, Counter>::default();
        registry.register(
            "flotilla_hub_chart_archives_sent",
            "Chart archives sent to agents, with a plan or by GetChart",
            charts_sent.clone(),
        );
        for how in [ChartSent::WithPlan, ChartSent::GetChart] {
            let _ = charts_sent.get_or_create(&HowLabels { how: how.label() });
        }
        let heartbeat_writes = Family::<WriteLabels, Counter>::default();
        registry.register(
            "flotilla_hub_cluster_heartbeat_writes",
            "ManagedCluster heartbeat writes due, written or deferred by the hub-wide budget",
            heartbeat_writes.clone(),
        );
        for result in ["written", "deferred"] {
            let _ = heartbeat_writes.get_or_create(&WriteLabels { result });
        }
        let dropped = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "flotilla_hub_agent_input_dropped",
            "Agent reports, registrations and renewals the hub dropped or refused, by reason",
            dropped.clone(),
        );
        for reason in Dropped::ALL {
            let _ = dropped.get_or_create(&ReasonLabels {
                reason: reason.label(),
            });
        }
        let sets = Family::<ConditionLabels, Gauge>::default();
        registry.register(
            "flotilla_hub_helmreleasesets",
            "HelmReleaseSets whose condition is True, by condition type and reason",
            sets.clone(),
        );
        let clusters = Family::<ClusterLabels, Gauge>::default();
        registry.register(
            "flotilla_hub_managed_clusters",
            "ManagedClusters by spec.accepted and whether their agent holds a session",
            clusters.clone(),
        );
        for accepted in ["true", "false"] {
            for connected in ["true", "false"] {
                let _ = clusters.get_or_create(&ClusterLabels {
                    accepted,
                    connected,
                });
            }
        }
        for result in ["success", "not_ready", "error"] {
            let labels = Labels {
                controller: "helmrelease",
                result,
            };
            let _ = duration.get_or_create(&labels);
            let _ = reconciles.get_or_create(&labels);
        }
        HubMetrics {
            registry: Arc::new(registry),
            duration,
            reconciles,
            plan_build,
            queue_depth,
            releases,
            values_reads,
            sessions,
            charts_sent,
            heartbeat_writes,
            dropped,
            sets,
            clusters,
            sampler: Arc::new(std::sync::Mutex::new(None)),
            set_sampler: Arc::new(std::sync::Mutex::new(None)),
            cluster_sampler: Arc::new(std::sync::Mutex::new(None)),
        }
    }

    /// An agent session came up (`up`) or ended.
    pub fn session(&self, up: bool) {
        if up {
            self.sessions.inc();
        } else {
            self.sessions.dec();
        }
    }

    /// Agent sessions up.
    pub fn sessions(&self) -> i64 {
        self.sessions.get()
    }

    /// Counts one chart archive sent to an agent.
    pub fn chart_sent(&self, how: ChartSent) {
        self.charts_sent
            .get_or_create(&HowLabels { how: how.label() })
            .inc();
    }

    /// Chart archives sent to agents so far, `how`.
    pub fn charts_sent(&self, how: ChartSent) -> u64 {
        self.charts_sent
            .get_or_create(&HowLabels { how: how.label() })
            .get()
    }

    /// Counts one ManagedCluster heartbeat write that was due: `written`, or deferred.
    pub fn heartbeat_write(&self, written: bool) {
        let result = if written { "written" } else { "deferred" };
        self.heartbeat_writes
            .get_or_create(&WriteLabels { result })
            .inc();
    }

    /// Counts one input dropped or refused for `reason`.
    pub fn dropped(&self, reason: Dropped) {
        self.dropped
            .get_or_create(&ReasonLabels {
                reason: reason.label(),
            })
            .inc();
    }

    /// Inputs dropped or refused so far for `reason`.
    pub fn dropped_total(&self, reason: Dropped) -> u64 {
        self.dropped
            .get_or_create(&ReasonLabels {
                reason: reason.label(),
            })
            .get()
    }

    /// Sets what fills the queue-depth and releases-by-Ready gauges at each scrape (the
    /// HelmRelease controller sets it when it starts).
    pub fn set_sampler(&self, sampler: impl Fn() -> Sample + Send + Sync + 'static) {
        *self.sampler.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(sampler));
    }

    /// Sets what fills `flotilla_hub_helmreleasesets` at each scrape (the set controller).
    pub fn set_set_sampler(
        &self,
        sampler: impl Fn() -> SetConditionCounts + Send + Sync + 'static,
    ) {
        *self.set_sampler.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(sampler));
    }

    /// Sets what fills `flotilla_hub_managed_clusters` at each scrape (the session server).
    pub fn set_cluster_sampler(&self, sampler: impl Fn() -> ClusterCounts + Send + Sync + 'static) {
        *self
            .cluster_sampler
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Box::new(sampler));
    }

    fn sample_fleet(&self) {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        if let Some(sampler) = &*self.set_sampler.lock().unwrap_or_else(|p| p.into_inner()) {
            let counts = sampler();
            // Conditions no set holds any more are dropped, not left at their last value.
            self.sets.clear();
            for ((condition, reason), n) in counts {
                self.sets
                    .get_or_create(&ConditionLabels { condition, reason })
                    .set(gauge(n));
            }
        }
        if let Some(sampler) = &*self
            .cluster_sampler
            .lock()
            .unwrap_or_else(|p| p.into_inner())
        {
            let c = sampler();
            for (accepted, connected, n) in [
                ("true", "true", c.accepted_connected),
                ("true", "false", c.accepted_disconnected),
                ("false", "true", c.pending_connected),
                ("false", "false", c.pending_disconnected),
            ] {
                self.clusters
                    .get_or_create(&ClusterLabels {
                        accepted,
                        connected,
                    })
                    .set(gauge(n));
            }
        }
    }

    fn sample(&self) {
        self.sample_fleet();
        let sample = match &*self.sampler.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(sampler) => sampler(),
            None => return,
        };
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.queue_depth
            .get_or_create(&ControllerLabels {
                controller: "helmrelease",
            })
            .set(gauge(sample.queue_depth));
        for (ready, n) in [
            ("True", sample.ready_true),
            ("False", sample.ready_false),
            ("Unknown", sample.ready_unknown),
        ] {
            self.releases
                .get_or_create(&ReadyLabels { ready })
                .set(gauge(n));
        }
    }

    /// Records one plan-build `step` (one of [`PLAN_STEPS`]) that took `elapsed`.
    pub fn observe_step(&self, step: &'static str, elapsed: Duration) {
        self.plan_build
            .get_or_create(&StepLabels { step })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts the `valuesFrom` objects of one reconcile: `cached` from the values cache,
    /// `read` from the API.
    pub fn values_reads(&self, cached: u64, read: u64) {
        self.values_reads
            .get_or_create(&SourceLabels { source: "cache" })
            .inc_by(cached);
        self.values_reads
            .get_or_create(&SourceLabels { source: "api" })
            .inc_by(read);
    }

    /// Records one reconcile of `controller` that ended with `result` after `seconds`.
    pub fn observe(&self, controller: &'static str, result: &'static str, seconds: f64) {
        let labels = Labels { controller, result };
        self.duration.get_or_create(&labels).observe(seconds);
        self.reconciles.get_or_create(&labels).inc();
    }

    /// The OpenMetrics text of every series.
    pub fn encode(&self) -> Result<String, fmt::Error> {
        self.sample();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

fn respond(
    req: &Request<Incoming>,
    metrics: &HubMetrics,
    ready: &AtomicBool,
) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: String, content_type: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    };
    const PLAIN: &str = "text/plain; charset=utf-8";
    match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok".into(), PLAIN),
        "/readyz" if ready.load(Ordering::SeqCst) => text(StatusCode::OK, "ok".into(), PLAIN),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "starting".into(), PLAIN),
        "/metrics" => match metrics.encode() {
            Ok(body) => text(
                StatusCode::OK,
                body,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            ),
            Err(_) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding failed".into(),
                PLAIN,
            ),
        },
        _ => text(StatusCode::NOT_FOUND, "not found".into(), PLAIN),
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until `shutdown` is cancelled;
/// `/readyz` answers `ok` once `ready` is set.
pub async fn serve(
    addr: SocketAddr,
    metrics: HubMetrics,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");
    loop {
        let (stream, _) = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a probe connection failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        let metrics = metrics.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let response = respond(&req, &metrics, &ready);
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_conditions_and_clusters_are_sampled_at_each_scrape_and_gone_conditions_dropped() {
        let metrics = HubMetrics::new();
        let text = metrics.encode().expect("encoded");
        assert!(
            text.contains("flotilla_hub_managed_clusters{accepted=\"true\",connected=\"false\"} 0"),
            "{text}"
        );
        let paused = Arc::new(AtomicBool::new(true));
        let p = paused.clone();
        metrics.set_set_sampler(move || {
            let mut counts = SetConditionCounts::new();
            counts.insert(("Ready".into(), "RolloutComplete".into()), 4);
            if p.load(Ordering::SeqCst) {
                counts.insert(("RolloutPaused".into(), "MaxFailuresExceeded".into()), 1);
            }
            counts
        });
        metrics.set_cluster_sampler(|| ClusterCounts {
            accepted_connected: 3,
            accepted_disconnected: 1,
            pending_connected: 0,
            pending_disconnected: 2,
        });
        let text = metrics.encode().expect("encoded");
        for line in [
            "flotilla_hub_helmreleasesets{condition=\"Ready\",reason=\"RolloutComplete\"} 4",
            "flotilla_hub_helmreleasesets{condition=\"RolloutPaused\",reason=\"MaxFailuresExceeded\"} 1",
            "flotilla_hub_managed_clusters{accepted=\"true\",connected=\"true\"} 3",
            "flotilla_hub_managed_clusters{accepted=\"true\",connected=\"false\"} 1",
            "flotilla_hub_managed_clusters{accepted=\"false\",connected=\"false\"} 2",
        ] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
        paused.store(false, Ordering::SeqCst);
        let text = metrics.encode().expect("encoded");
        assert!(!text.contains("MaxFailuresExceeded"), "{text}");
        assert!(text.contains("reason=\"RolloutComplete\"} 4"), "{text}");
    }

    #[test]
    fn queue_depth_and_releases_by_ready_are_sampled_at_each_scrape() {
        let metrics = HubMetrics::new();
        let text = metrics.encode().expect("encoded");
        assert!(
            text.contains("flotilla_hub_queue_depth{controller=\"helmrelease\"} 0"),
            "{text}"
        );
        let depth = Arc::new(std::sync::atomic::AtomicUsize::new(3));
        let d = depth.clone();
        metrics.set_sampler(move || Sample {
            queue_depth: d.load(Ordering::SeqCst),
            ready_true: 5,
            ready_false: 2,
            ready_unknown: 1,
        });
        let text = metrics.encode().expect("encoded");
        for line in [
            "flotilla_hub_queue_depth{controller=\"helmrelease\"} 3",
            "flotilla_hub_helmreleases{ready=\"True\"} 5",
            "flotilla_hub_helmreleases{ready=\"False\"} 2",
            "flotilla_hub_helmreleases{ready=\"Unknown\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
        depth.store(0, Ordering::SeqCst);
        let text = metrics.encode().expect("encoded");
        assert!(
            text.contains("flotilla_hub_queue_depth{controller=\"helmrelease\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn plan_build_steps_are_exported_by_step_with_sub_millisecond_buckets() {
        let metrics = HubMetrics::new();
        metrics.observe_step("values", Duration::from_micros(80));
        let text = metrics.encode().expect("encoded");
        for step in PLAN_STEPS {
            assert!(
                text.contains(&format!(
                    "flotilla_hub_plan_build_seconds_count{{step=\"{step}\"}}"
                )),
                "{step} missing from {text}"
            );
        }
        assert!(
            text.contains(
                "flotilla_hub_plan_build_seconds_bucket{le=\"0.0001\",step=\"values\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("flotilla_hub_plan_build_seconds_bucket{le=\"5e-5\",step=\"values\"} 0")
                || text.contains(
                    "flotilla_hub_plan_build_seconds_bucket{le=\"0.00005\",step=\"values\"} 0"
                ),
            "{text}"
        );
    }
}
