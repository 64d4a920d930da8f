//! The runtime's keyed work queue: when each release is due, which may start, and how long a
//! failing one waits. Pure: time is passed in, randomness comes from a seedable generator,
//! so every rule is unit-tested without a clock.
//!
//! - One entry per key: scheduling a key that is already due earlier keeps the earlier time
//!   (duplicates merge), scheduling it earlier moves it up.
//! - A key that is running is never handed out again until [`WorkQueue::finish`]; work
//!   scheduled for it meanwhile runs right after it finishes (`rerun`).
//! - Ready keys are handed out in due order (ties by key), at most `concurrency` at a time
//!   (the caller checks [`WorkQueue::running`]).
//! - [`Backoff`] is controller-runtime's per-item exponential limiter: `base * 2^failures`
//!   capped at `max`, with jitter, reset by a success.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// Exponential backoff per failure count, capped, with jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub base: Duration,
    /// The longest delay.
    pub max: Duration,
    /// Fraction of each delay added at random: `0.1` waits between 100% and 110%.
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(300),
            jitter: 0.1,
        }
    }
}

impl Backoff {
    /// The delay after `failures` consecutive failures (1 = the first), before jitter.
    pub fn delay(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(30);
        self.base.saturating_mul(1 << exp).min(self.max)
    }

    /// The delay with jitter drawn from `rng`.
    pub fn delay_jittered(&self, failures: u32, rng: &mut fastrand::Rng) -> Duration {
        with_jitter(self.delay(failures), self.jitter, rng)
    }
}

/// `d` plus up to `fraction * d` drawn from `rng` (so a fleet of releases with the same
/// interval spreads out instead of waking together).
pub fn with_jitter(d: Duration, fraction: f64, rng: &mut fastrand::Rng) -> Duration {
    if fraction <= 0.0 || d.is_zero() {
        return d;
    }
    d + d.mul_f64(fraction * rng.f64())
}

/// When each key is due, and which are running.
#[derive(Debug)]
pub struct WorkQueue<K: Ord + Hash + Clone> {
    /// Due keys by time (ties by key).
    due: BTreeSet<(Instant, K)>,
    /// The due time of each queued key.
    at: HashMap<K, Instant>,
    /// Running keys, and whether they must run again at once when they finish.
    running: BTreeMap<K, bool>,
}

impl<K: Ord + Hash + Clone> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue {
            due: BTreeSet::new(),
            at: HashMap::new(),
            running: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Hash + Clone> WorkQueue<K> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `key` due at `when`, unless it is already due earlier. A running key instead
    /// runs again right after it finishes when `when` is not later than `now`; a later time
    /// is kept for after it finishes.
    pub fn schedule(&mut self, key: K, when: Instant, now: Instant) {
        if let Some(rerun) = self.running.get_mut(&key)
            && when <= now
        {
            *rerun = true;
            return;
        }
        match self.at.get(&key) {
            Some(&t) if t <= when => {}
            Some(&t) => {
                self.due.remove(&(t, key.clone()));
                self.due.insert((when, key.clone()));
                self.at.insert(key, when);
            }
            None => {
                self.due.insert((when, key.clone()));
                self.at.insert(key, when);
            }
        }
    }

    /// Replaces the due time of `key` by `when` (later or earlier).
    pub fn reschedule(&mut self, key: K, when: Instant) {
        self.remove(&key);
        self.due.insert((when, key.clone()));
        self.at.insert(key, when);
    }

    /// Forgets a queued key (a running one stays running, without a rerun).
    pub fn remove(&mut self, key: &K) {
        if let Some(t) = self.at.remove(key) {
            self.due.remove(&(t, key.clone()));
        }
        if let Some(rerun) = self.running.get_mut(key) {
            *rerun = false;
        }
    }

    /// The first key due at `now` that is not running, marked running.
    pub fn pop_ready(&mut self, now: Instant) -> Option<K> {
        let (when, key) = self
            .due
            .iter()
            .find(|(when, key)| *when <= now && !self.running.contains_key(key))?
            .clone();
        self.due.remove(&(when, key.clone()));
        self.at.remove(&key);
        self.running.insert(key.clone(), false);
        Some(key)
    }

    /// Marks `key` finished; true when work for it came in while it ran (run it again now).
    pub fn finish(&mut self, key: &K) -> bool {
        self.running.remove(key).unwrap_or(false)
    }

    /// When the next queued key not running is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.due
            .iter()
            .find(|(_, key)| !self.running.contains_key(key))
            .map(|(when, _)| *when)
    }

    /// How many keys are running.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Whether `key` is running.
    pub fn is_running(&self, key: &K) -> bool {
        self.running.contains_key(key)
    }

    /// How many keys wait (queued, not running), due or not.
    pub fn queued(&self) -> usize {
        self.at.len()
    }

    /// How many queued keys are due at `now` (the queue depth a metric shows).
    pub fn due_at(&self, now: Instant) -> usize {
        self.due
            .iter()
            .take_while(|(when, _)| *when <= now)
            .filter(|(_, key)| !self.running.contains_key(key))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        Instant::now()
    }

    #[test]
    fn duplicates_merge_and_the_earlier_time_wins() {
        let now = t0();
        let mut q = WorkQueue::new();
        q.schedule("a", now + Duration::from_secs(10), now);
        q.schedule("a", now + Duration::from_secs(20), now);
        assert_eq!(q.queued(), 1);
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(10)));
        q.schedule("a", now, now);
        assert_eq!(q.queued(), 1);
        assert_eq!(q.next_due(), Some(now));
        assert_eq!(q.pop_ready(now), Some("a"));
        assert_eq!(q.pop_ready(now), None);
    }

    #[test]
    fn keys_come_out_in_due_order_and_not_before_they_are_due() {
        let now = t0();
        let mut q = WorkQueue::new();
        q.schedule("late", now + Duration::from_secs(5), now);
        q.schedule("b", now, now);
        q.schedule("a", now, now);
        assert_eq!(q.due_at(now), 2);
        assert_eq!(q.pop_ready(now), Some("a"));
        assert_eq!(q.pop_ready(now), Some("b"));
        assert_eq!(q.pop_ready(now), None);
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(5)));
        assert_eq!(q.pop_ready(now + Duration::from_secs(5)), Some("late"));
        assert_eq!(q.running(), 3);
    }

    #[test]
    fn a_running_key_is_not_handed_out_twice_and_reruns_after_a_request_that_came_meanwhile() {
        let now = t0();
        let mut q = WorkQueue::new();
        q.schedule("a", now, now);
        assert_eq!(q.pop_ready(now), Some("a"));
        // Two requests while it runs: merged into one rerun.
        q.schedule("a", now, now);
        q.schedule("a", now, now);
        assert_eq!(q.pop_ready(now), None);
        assert!(q.finish(&"a"));
        assert!(!q.is_running(&"a"));
        // Without a request it does not rerun.
        q.schedule("a", now, now);
        assert_eq!(q.pop_ready(now), Some("a"));
        assert!(!q.finish(&"a"));
    }

    #[test]
    fn a_later_time_for_a_running_key_waits_until_it_finishes() {
        let now = t0();
        let mut q = WorkQueue::new();
        q.schedule("a", now, now);
        assert_eq!(q.pop_ready(now), Some("a"));
        q.schedule("a", now + Duration::from_secs(60), now);
        assert_eq!(
            q.next_due(),
            None,
            "the running key's next time is not handed out"
        );
        assert!(!q.finish(&"a"));
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(60)));
    }

    #[test]
    fn removing_a_key_forgets_it_and_its_rerun() {
        let now = t0();
        let mut q = WorkQueue::new();
        q.schedule("a", now, now);
        q.schedule("b", now, now);
        q.remove(&"a");
        assert_eq!(q.pop_ready(now), Some("b"));
        q.schedule("b", now, now);
        q.remove(&"b");
        assert!(!q.finish(&"b"));
        assert_eq!(q.queued(), 0);
    }

    #[test]
    fn reschedule_moves_a_key_later() {
        let now = t0();
        let mut q = WorkQueue::new();
        q.schedule("a", now, now);
        q.reschedule("a", now + Duration::from_secs(3));
        assert_eq!(q.pop_ready(now), None);
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(3)));
    }

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap() {
        let b = Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
            jitter: 0.0,
        };
        let delays: Vec<u64> = (1..=8).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(b.delay(1000), Duration::from_secs(60));
    }

    #[test]
    fn jitter_stays_within_its_fraction_and_spreads() {
        let mut rng = fastrand::Rng::with_seed(7);
        let d = Duration::from_secs(100);
        let samples: Vec<Duration> = (0..200).map(|_| with_jitter(d, 0.1, &mut rng)).collect();
        assert!(
            samples
                .iter()
                .all(|s| *s >= d && *s <= d + Duration::from_secs(10))
        );
        let distinct: BTreeSet<_> = samples.iter().collect();
        assert!(
            distinct.len() > 100,
            "jitter should spread: {}",
            distinct.len()
        );
        assert_eq!(with_jitter(d, 0.0, &mut rng), d);
    }
}
