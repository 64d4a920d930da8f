//! The agent's operability surface: Prometheus metrics, the health and readiness probes, and
//! the log subscriber.
//!
//! The binary calls [`init_logging`] first, builds one [`Metrics`] (every series is registered
//! there, once) and one [`Health`], hands clones of both to the runtime, and runs [`serve`] on
//! its probe port until shutdown:
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! use flotilla_agent::telemetry::{self, Health, LogFormat, Metrics};
//!
//! telemetry::init_logging(LogFormat::Json).expect("no other subscriber is installed");
//! let metrics = Metrics::new();
//! let health = Health::new();
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:9090").await?;
//! let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
//! let server = tokio::spawn(telemetry::serve(listener, metrics.clone(), health.clone(), async {
//!     let _ = stop_rx.await;
//! }));
//! // ... the runtime reconciles, calling `metrics.observe_reconcile(..)`, `metrics.action(..)`,
//! // and `health.set_ready(true)` once it can do its job ...
//! let _ = stop_tx.send(());
//! server.await.expect("the server task does not panic")?;
//! # Ok(())
//! # }
//! ```
//!
//! [`Metrics`] lists the series; [`serve`] the endpoints; [`init_logging`] the `RUST_LOG`
//! rules.

mod http;
mod logging;
mod metrics;

pub use http::{Health, serve};
pub use logging::{LogFormat, LoggingError, init_logging};
pub use metrics::{ChartReceived, Metrics};
