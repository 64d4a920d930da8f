//! Polling helpers for tests: wait for a condition on a cluster, with a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` every 100 ms until it returns `Some`, or fails after `timeout` naming `what`
/// and the last error seen.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        // A check that never answers (a request to an API server that hangs) fails at the
        // deadline too, with a minute's grace for one that is merely slow.
        let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(60);
        match tokio::time::timeout(left, check()).await {
            Ok(Ok(Some(value))) => return Ok(value),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => last_error = Some(e),
            Err(_) => anyhow::bail!(
                "timed out after {timeout:?} waiting for {what}: a check did not answer"
            ),
        }
        if Instant::now() > deadline {
            match last_error {
                Some(e) => anyhow::bail!("timed out after {timeout:?} waiting for {what}: {e:#}"),
                None => anyhow::bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
