//! The hub's metrics and probe server: `/metrics` (OpenMetrics text), `/healthz` and
//! `/readyz`, over plain HTTP/1.1.
//!
//! Series (registered once, in [`HubMetrics::new`]):
//! - `flotilla_hub_reconcile_duration_seconds{controller,result}`: one reconcile of a
//!   HelmRelease (`helmrelease`), by result: `success` (plan sent), `not_ready` (a hub
//!   condition: source, values, dependency, target), `error` (an API or link failure);
//! - `flotilla_hub_reconciles_total{controller,result}`: the same, counted.

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

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The hub's metrics. Cheap to clone; clones share the registry.
#[derive(Clone)]
pub struct HubMetrics {
    registry: Arc<Registry>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
    reconciles: Family<Labels, Counter>,
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
        }
    }

    /// Records one reconcile of `controller` that ended with `result` after `seconds`.
    pub fn observe(&self, controller: &'static str, result: &'static str, seconds: f64) {
        let labels = Labels { controller, result };
        self.duration.get_or_create(&labels).observe(seconds);
        self.reconciles.get_or_create(&labels).inc();
    }

    /// The OpenMetrics text of every series.
    pub fn encode(&self) -> Result<String, fmt::Error> {
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
