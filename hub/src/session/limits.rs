//! What one peer may cost the session server: message sizes, streams per connection, TLS
//! handshake and request deadlines, and the gate in front of `Register`.
//!
//! `Register` needs no client certificate, so anyone who reaches the port can call it; each
//! call that gets through reads (and may write) the management API. The [`RegisterGate`]
//! lets through [`RegisterLimits::per_second`] calls a second (after a burst), each caller
//! waiting at most [`RegisterLimits::max_wait`] for its turn, and at most
//! [`RegisterLimits::concurrency`] at once; every other call is refused with
//! `RESOURCE_EXHAUSTED` before anything is read (agents retry with backoff). A connect storm
//! of honest agents waits its turn; a flood is refused at the cost of a token bucket.

use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};

use crate::rate::TokenBucket;
use crate::telemetry::Dropped;

/// The largest agent message the hub decodes (a status report with a large inventory fits
/// many times over).
pub const MAX_AGENT_MESSAGE: usize = 4 << 20;
/// The largest message the hub encodes: a plan with its values and a chart archive of one
/// `GetChart` chunk (the agent's decoding limit is the same).
pub const MAX_HUB_MESSAGE: usize = 16 << 20;
/// HTTP/2 streams one connection may have open (an agent uses a session and a chart
/// transfer or two).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 16;
/// How long a TLS handshake may take: a connection idle before it is closed then.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a unary call (or a stream's first answer) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// HTTP/2 keepalive: a connection that does not answer a ping within
/// [`HTTP2_KEEPALIVE_TIMEOUT`] is closed.
pub const HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// See [`HTTP2_KEEPALIVE_INTERVAL`].
pub const HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest header list a request may carry.
pub const MAX_HEADER_LIST_SIZE: u32 = 16 << 10;

/// How many `Register` calls the hub takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RegisterLimits {
    /// Calls a second, past the burst.
    pub per_second: f64,
    /// Calls at once after a quiet time.
    pub burst: f64,
    /// Calls served at the same time.
    pub concurrency: usize,
    /// The longest a call waits for its turn before it is refused.
    pub max_wait: Duration,
}

impl Default for RegisterLimits {
    fn default() -> Self {
        RegisterLimits {
            per_second: 100.0,
            burst: 200.0,
            concurrency: 16,
            max_wait: Duration::from_secs(5),
        }
    }
}

/// The gate in front of `Register` (see the module docs).
#[derive(Debug)]
pub struct RegisterGate {
    limits: RegisterLimits,
    bucket: std::sync::Mutex<TokenBucket>,
    running: Semaphore,
}

impl RegisterGate {
    /// A gate with `limits`, its bucket full.
    pub fn new(limits: RegisterLimits) -> Self {
        RegisterGate {
            limits,
            bucket: std::sync::Mutex::new(TokenBucket::new(
                limits.burst.max(1.0),
                limits.per_second,
                Instant::now(),
            )),
            running: Semaphore::new(limits.concurrency.max(1)),
        }
    }

    /// Waits for this call's turn; the permit is held while the call runs. Refused (with
    /// the reason counted) when the turn would come later than `max_wait`.
    pub async fn enter(&self) -> Result<SemaphorePermit<'_>, Dropped> {
        let wait = self
            .bucket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .reserve(Instant::now(), self.limits.max_wait)
            .ok_or(Dropped::RegisterRate)?;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        match tokio::time::timeout(self.limits.max_wait, self.running.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(Dropped::RegisterConcurrency),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_flood_of_registrations_is_refused_past_the_burst_and_the_wait_and_runs_a_few_at_once()
     {
        let gate = std::sync::Arc::new(RegisterGate::new(RegisterLimits {
            per_second: 10.0,
            burst: 5.0,
            concurrency: 2,
            max_wait: Duration::from_secs(1),
        }));
        let outcomes = futures::future::join_all((0..100).map(|_| {
            let gate = gate.clone();
            async move {
                let permit = gate.enter().await;
                // A slow call holds its permit.
                if permit.is_ok() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                permit.map(|_| ()).err()
            }
        }))
        .await;
        let admitted = outcomes.iter().filter(|o| o.is_none()).count();
        let rate = outcomes
            .iter()
            .filter(|o| **o == Some(Dropped::RegisterRate))
            .count();
        // The burst and one second of the rate; the other 85 refused at once.
        assert_eq!(admitted, 15);
        assert_eq!(rate, 85);
        assert_eq!(gate.running.available_permits(), 2);
    }
}
