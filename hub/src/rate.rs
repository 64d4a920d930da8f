//! A token bucket: the one rate limit of the hub's inputs (Events per HelmRelease, `Renew`
//! per session, `Register` per hub). Pure: the caller passes the clock.

use std::time::{Duration, Instant};

/// `burst` tokens, refilled at `per_second`.
#[derive(Debug, Clone, Copy)]
pub struct TokenBucket {
    burst: f64,
    per_second: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(burst: f64, per_second: f64, now: Instant) -> Self {
        TokenBucket {
            burst,
            per_second,
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.at = now;
    }

    /// Takes one token if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Takes one token now, or reserves the next one if it comes within `max_wait`:
    /// returns how long to wait before going ahead (zero when a token was there), `None`
    /// when the wait would be longer. Reserving spends ahead, so at most
    /// `per_second * max_wait` callers wait at any time.
    pub fn reserve(&mut self, now: Instant, max_wait: Duration) -> Option<Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Some(Duration::ZERO);
        }
        if self.per_second <= 0.0 {
            return None;
        }
        let wait = Duration::from_secs_f64((1.0 - self.tokens) / self.per_second);
        if wait > max_wait {
            return None;
        }
        self.tokens -= 1.0;
        Some(wait)
    }

    /// Whether the bucket is full again at `now` (as good as a new one).
    pub fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= self.burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_its_burst_then_its_rate() {
        let now = Instant::now();
        let mut b = TokenBucket::new(3.0, 0.5, now);
        assert_eq!((0..10).filter(|_| b.take(now)).count(), 3);
        assert!(!b.is_full(now));
        let later = now + Duration::from_secs(4);
        assert_eq!((0..10).filter(|_| b.take(later)).count(), 2);
        assert!(b.is_full(later + Duration::from_secs(60)));
    }

    #[test]
    fn reserving_waits_for_the_next_tokens_up_to_a_bound() {
        let now = Instant::now();
        let mut b = TokenBucket::new(1.0, 10.0, now);
        let max = Duration::from_secs(1);
        assert_eq!(b.reserve(now, max), Some(Duration::ZERO));
        let waits: Vec<_> = std::iter::from_fn(|| b.reserve(now, max)).collect();
        // 10 a second for 1 s: ten callers wait, the 1st 0.1 s ... the 10th 1 s.
        assert_eq!(waits.len(), 10);
        assert!(waits.windows(2).all(|w| w[0] < w[1]));
        assert!(waits[9] <= max);
        assert_eq!(b.reserve(now, max), None);
    }
}
