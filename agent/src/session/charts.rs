//! Chart archives from the hub: [`HubCharts`], the [`ArchiveFetcher`] behind the agent's
//! chart cache, over the session's `GetChart` stream.
//!
//! Before a session is configured ([`HubCharts::enable`]) it behaves as
//! [`crate::charts::NoFetcher`] (a missing chart is `NotFound`: plan-file mode). Once the
//! agent runs with a hub, a fetch while the hub is away is a transient `Fetch` error (the
//! runtime retries it with backoff), and a transfer cut short resumes at the offset it
//! reached, up to four attempts. The cache verifies the digest of what arrives.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use flotilla_core::ids::ChartDigest;
use flotilla_proto::v1;
use futures::future::BoxFuture;
use tonic::transport::Channel;

use crate::charts::{ArchiveFetcher, ChartError};

/// The most a chart archive may be (the cache bound).
const MAX_ARCHIVE: u64 = crate::cmd::CHART_CACHE_BYTES;

/// Fetches chart archives from the hub over the session's connection. Cheap to clone:
/// clones share the connection slot.
#[derive(Clone, Default)]
pub struct HubCharts {
    channel: Arc<Mutex<Option<Channel>>>,
    enabled: Arc<AtomicBool>,
}

impl std::fmt::Debug for HubCharts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubCharts")
            .field("enabled", &self.enabled.load(Ordering::Relaxed))
            .field("connected", &self.connected())
            .finish()
    }
}

impl HubCharts {
    /// A fetcher with no hub yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The agent runs with a hub: charts come from it.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::SeqCst);
    }

    /// The session is up on `channel`.
    pub fn connect(&self, channel: Channel) {
        *self.channel.lock().unwrap_or_else(PoisonError::into_inner) = Some(channel);
    }

    /// The session is down.
    pub fn disconnect(&self) {
        *self.channel.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn connected(&self) -> bool {
        self.channel
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    fn current(&self) -> Option<Channel> {
        self.channel
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    async fn fetch_from_hub(&self, digest: &ChartDigest) -> Result<Vec<u8>, ChartError> {
        let fetch_error = |message: String| ChartError::Fetch {
            digest: digest.clone(),
            message,
        };
        let mut bytes: Vec<u8> = Vec::new();
        let mut total: Option<u64> = None;
        let mut last_error = String::new();
        for _ in 0..4 {
            let Some(channel) = self.current() else {
                return Err(fetch_error("not connected to the hub".into()));
            };
            let response = super::tls::hub_client(channel)
                .get_chart(v1::GetChartRequest {
                    digest: digest.to_string(),
                    offset: bytes.len() as u64,
                })
                .await;
            let mut stream = match response {
                Ok(r) => r.into_inner(),
                Err(s) if s.code() == tonic::Code::NotFound => {
                    return Err(ChartError::NotFound {
                        digest: digest.clone(),
                    });
                }
                Err(s) => {
                    last_error = format!("{:?}: {}", s.code(), s.message());
                    continue;
                }
            };
            loop {
                match stream.message().await {
                    Ok(Some(chunk)) => {
                        if chunk.total_size > 0 {
                            if chunk.total_size > MAX_ARCHIVE {
                                return Err(fetch_error(format!(
                                    "the archive is {} bytes, more than the cache holds",
                                    chunk.total_size
                                )));
                            }
                            total = Some(chunk.total_size);
                        }
                        bytes.extend_from_slice(&chunk.data);
                        if total.is_some_and(|t| bytes.len() as u64 > t) {
                            return Err(fetch_error(
                                "the hub sent more than the archive's size".into(),
                            ));
                        }
                    }
                    Ok(None) => {
                        if total.is_none_or(|t| bytes.len() as u64 == t) {
                            return Ok(bytes);
                        }
                        last_error = "the transfer ended early".into();
                        break;
                    }
                    Err(s) => {
                        last_error = format!("{:?}: {}", s.code(), s.message());
                        break;
                    }
                }
            }
        }
        Err(fetch_error(last_error))
    }
}

impl ArchiveFetcher for HubCharts {
    fn fetch<'a>(&'a self, digest: &'a ChartDigest) -> BoxFuture<'a, Result<Vec<u8>, ChartError>> {
        Box::pin(async move {
            if !self.enabled.load(Ordering::SeqCst) {
                return Err(ChartError::NotFound {
                    digest: digest.clone(),
                });
            }
            self.fetch_from_hub(digest).await
        })
    }
}
