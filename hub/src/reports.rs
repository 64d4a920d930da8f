//! The queue every agent's reports go through to the status writer: bounded, coalescing,
//! and fair between HelmReleases.
//!
//! What an agent sends is a peer's input: a broken or hostile agent can send reports
//! faster than the status writer writes them, or send nothing but Events. So the queue
//! keeps **the latest per object**, not every report:
//! - a status report replaces the status report already queued for its HelmRelease (by
//!   `(plan revision, seq)`; an older one is dropped as stale), unless a `Deleted` or
//!   `Rejected` came after it, so the writer still sees those in order;
//! - Events pass a **token bucket per HelmRelease** ([`EVENT_BURST`], then
//!   [`EVENTS_PER_SECOND`]); the excess is dropped and counted;
//! - at most [`MAX_QUEUED_PER_OBJECT`] reports wait per HelmRelease (a full one drops its
//!   oldest Event, else its oldest report) and at most [`MAX_QUEUED_OBJECTS`] HelmReleases
//!   have reports waiting;
//! - the writer takes one report per HelmRelease in turn, so a flood on one does not delay
//!   the others.
//!
//! A [`Report::Preview`] skips the queue: it goes to the waiter of its request
//! ([`ReportSink::previews`], [`crate::previews`]).
//!
//! Every drop is counted (`flotilla_hub_agent_input_dropped_total{reason}`, see
//! [`Dropped`]). [`ReportSink::send`] never blocks; [`ReportReceiver::recv`] ends once
//! every sink is dropped and the queue is empty.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use flotilla_core::agent::{ObjectKey, Report};
use tokio::sync::Notify;

use crate::link::{TargetId, TargetReport};
use crate::rate::TokenBucket;
use crate::telemetry::{Dropped, HubMetrics};

/// The most reports waiting for one HelmRelease.
pub const MAX_QUEUED_PER_OBJECT: usize = 16;
/// The most HelmReleases with reports waiting.
pub const MAX_QUEUED_OBJECTS: usize = 1 << 16;
/// Events one HelmRelease may send at once.
pub const EVENT_BURST: f64 = 32.0;
/// Events one HelmRelease may send a second, past the burst.
pub const EVENTS_PER_SECOND: f64 = 1.0;
/// Buckets kept before the full ones (equal to new) are forgotten.
const BUCKETS_KEPT: usize = 4096;

type Key = (TargetId, ObjectKey);

/// The queue's state: pure, driven with an explicit clock.
#[derive(Debug, Default)]
struct Queue {
    /// Reports waiting, per target and HelmRelease.
    queued: HashMap<Key, VecDeque<Report>>,
    /// The keys with reports waiting, in turn.
    ready: VecDeque<Key>,
    /// Event buckets per HelmRelease.
    buckets: HashMap<ObjectKey, TokenBucket>,
    /// Reports waiting in all.
    len: usize,
}

impl Queue {
    /// Queues `report`; returns what was dropped to make it fit (the report itself, or an
    /// older one it replaced or pushed out).
    fn push(&mut self, report: TargetReport, now: Instant) -> Option<Dropped> {
        let TargetReport { target, report } = report;
        let object = report.object();
        if matches!(report, Report::Event { .. }) {
            if !self.buckets.contains_key(&object) && self.buckets.len() >= BUCKETS_KEPT {
                self.buckets.retain(|_, b| !b.is_full(now));
            }
            let bucket = self
                .buckets
                .entry(object.clone())
                .or_insert_with(|| TokenBucket::new(EVENT_BURST, EVENTS_PER_SECOND, now));
            if !bucket.take(now) {
                return Some(Dropped::EventRate);
            }
        }
        let key = (target, object);
        if !self.queued.contains_key(&key) && self.queued.len() >= MAX_QUEUED_OBJECTS {
            return Some(Dropped::QueueFull);
        }
        let queue = self.queued.entry(key.clone()).or_default();
        if let Report::Status(new) = &report
            && let Some(i) = queue
                .iter()
                .rposition(|r| !matches!(r, Report::Event { .. }))
            && let Report::Status(old) = &queue[i]
        {
            if (new.plan_revision, new.seq) > (old.plan_revision, old.seq) {
                queue[i] = report;
                return None;
            }
            return Some(Dropped::Stale);
        }
        let mut dropped = None;
        if queue.len() >= MAX_QUEUED_PER_OBJECT {
            let oldest = queue
                .iter()
                .position(|r| matches!(r, Report::Event { .. }))
                .unwrap_or(0);
            queue.remove(oldest);
            self.len -= 1;
            dropped = Some(Dropped::QueueFull);
        }
        if queue.is_empty() {
            self.ready.push_back(key);
        }
        queue.push_back(report);
        self.len += 1;
        dropped
    }

    /// The next report, one HelmRelease after the other.
    fn pop(&mut self) -> Option<TargetReport> {
        let key = self.ready.pop_front()?;
        let queue = self
            .queued
            .get_mut(&key)
            .expect("a ready key has reports queued");
        let report = queue.pop_front().expect("a ready key has reports queued");
        self.len -= 1;
        if queue.is_empty() {
            self.queued.remove(&key);
        } else {
            self.ready.push_back(key.clone());
        }
        Some(TargetReport {
            target: key.0,
            report,
        })
    }
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    notify: Notify,
    senders: AtomicUsize,
    receiver_alive: std::sync::atomic::AtomicBool,
    counts: [AtomicU64; Dropped::ALL.len()],
    metrics: OnceLock<HubMetrics>,
    previews: crate::previews::Previews,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count(&self, reason: Dropped) {
        let i = Dropped::ALL
            .iter()
            .position(|r| *r == reason)
            .expect("every reason is in Dropped::ALL");
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        if let Some(metrics) = self.metrics.get() {
            metrics.dropped(reason);
        }
    }
}

/// A new report queue: the sending end for the agents' links, the receiving end for the
/// status writer.
pub fn report_channel() -> (ReportSink, ReportReceiver) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::default()),
        notify: Notify::new(),
        senders: AtomicUsize::new(1),
        receiver_alive: std::sync::atomic::AtomicBool::new(true),
        counts: Default::default(),
        metrics: OnceLock::new(),
        previews: Default::default(),
    });
    (
        ReportSink {
            shared: shared.clone(),
        },
        ReportReceiver { shared },
    )
}

/// The receiving end is gone (the status writer stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the status writer is gone")]
pub struct ReportsClosed;

/// Why [`ReportReceiver::try_recv`] returned nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TryRecvError {
    /// Nothing queued now.
    #[error("no report queued")]
    Empty,
    /// Nothing queued and every sink dropped.
    #[error("every report sink is gone")]
    Disconnected,
}

/// The sending end every link forwards its agent's reports into (cheap to clone).
#[derive(Debug)]
pub struct ReportSink {
    shared: Arc<Shared>,
}

impl Clone for ReportSink {
    fn clone(&self) -> Self {
        self.shared.senders.fetch_add(1, Ordering::SeqCst);
        ReportSink {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for ReportSink {
    fn drop(&mut self) {
        if self.shared.senders.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.shared.notify.notify_one();
        }
    }
}

impl ReportSink {
    /// Queues `report` (see the module docs for what is kept); never blocks. Fails only
    /// when the receiving end is gone.
    pub fn send(&self, report: TargetReport) -> Result<(), ReportsClosed> {
        if !self.shared.receiver_alive.load(Ordering::SeqCst) {
            return Err(ReportsClosed);
        }
        let report = match report {
            TargetReport {
                target,
                report: Report::Preview(p),
            } => {
                if !self.shared.previews.answer(&target, *p) {
                    tracing::debug!(%target, "dropped a preview answer nobody waits for");
                }
                return Ok(());
            }
            other => other,
        };
        let dropped = self.shared.lock().push(report, Instant::now());
        if let Some(reason) = dropped {
            self.shared.count(reason);
        }
        self.shared.notify.notify_one();
        Ok(())
    }

    /// The previews waiting for an answer: a [`Report::Preview`] sent here goes to its
    /// waiter, never into the queue ([`crate::previews`]).
    pub fn previews(&self) -> &crate::previews::Previews {
        &self.shared.previews
    }

    /// Counts an input dropped before it reached the queue (a report for a revision never
    /// sent, say), with the queue's own.
    pub fn count_dropped(&self, reason: Dropped) {
        self.shared.count(reason);
    }

    /// Inputs dropped so far for `reason`, by this queue and its senders.
    pub fn dropped(&self, reason: Dropped) -> u64 {
        let i = Dropped::ALL
            .iter()
            .position(|r| *r == reason)
            .expect("every reason is in Dropped::ALL");
        self.shared.counts[i].load(Ordering::Relaxed)
    }

    /// Reports waiting.
    pub fn len(&self) -> usize {
        self.shared.lock().len
    }

    /// Whether no report waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts the drops into `metrics` too, from now on (the first call wins).
    pub fn count_into(&self, metrics: HubMetrics) {
        let _ = self.shared.metrics.set(metrics);
    }
}

/// The receiving end: the status writer's.
#[derive(Debug)]
pub struct ReportReceiver {
    shared: Arc<Shared>,
}

impl Drop for ReportReceiver {
    fn drop(&mut self) {
        self.shared.receiver_alive.store(false, Ordering::SeqCst);
    }
}

impl ReportReceiver {
    /// The previews waiting for an answer (the same registry as the sinks').
    pub fn previews(&self) -> &crate::previews::Previews {
        &self.shared.previews
    }

    /// The next report; `None` once every sink is dropped and nothing is queued.
    pub async fn recv(&mut self) -> Option<TargetReport> {
        loop {
            match self.try_recv() {
                Ok(report) => return Some(report),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) => self.shared.notify.notified().await,
            }
        }
    }

    /// The next report, if one is queued now.
    pub fn try_recv(&mut self) -> Result<TargetReport, TryRecvError> {
        if let Some(report) = self.shared.lock().pop() {
            return Ok(report);
        }
        if self.shared.senders.load(Ordering::SeqCst) == 0 {
            // A send racing the last drop: look once more.
            return self.shared.lock().pop().ok_or(TryRecvError::Disconnected);
        }
        Err(TryRecvError::Empty)
    }

    /// Counts the drops into `metrics` too, from now on (the first call wins).
    pub fn count_into(&self, metrics: HubMetrics) {
        let _ = self.shared.metrics.set(metrics);
    }

    /// Reports waiting.
    pub fn len(&self) -> usize {
        self.shared.lock().len
    }

    /// Whether no report waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use flotilla_core::agent::StatusReport;
    use flotilla_core::ids::{ClusterId, PlanRevision};
    use flotilla_core::plan::ObjectRef;
    use flotilla_core::release::{Event, EventType, Step};
    use flotilla_core::status::HelmReleaseStatus;

    use super::*;

    fn object(name: &str) -> ObjectRef {
        ObjectRef {
            namespace: "apps".parse().unwrap(),
            name: name.parse().unwrap(),
            uid: None,
        }
    }

    fn target() -> TargetId {
        TargetId::Cluster(ClusterId::new("edge").unwrap())
    }

    fn status(name: &str, revision: u64, seq: u64) -> TargetReport {
        TargetReport {
            target: target(),
            report: Report::Status(Box::new(StatusReport {
                object: object(name),
                plan_revision: PlanRevision::new(revision),
                seq,
                status: HelmReleaseStatus::default(),
                step: Step::Done,
            })),
        }
    }

    fn event(name: &str, n: usize) -> TargetReport {
        TargetReport {
            target: target(),
            report: Report::Event {
                object: object(name),
                plan_revision: PlanRevision::new(1),
                event: Event {
                    type_: EventType::Normal,
                    reason: "Flood".into(),
                    message: format!("event {n}"),
                    annotations: Default::default(),
                },
            },
        }
    }

    fn rejected(name: &str, revision: u64) -> TargetReport {
        TargetReport {
            target: target(),
            report: Report::Rejected {
                object: object(name).key(),
                revision: PlanRevision::new(revision),
                error: "spec.x: bad".into(),
            },
        }
    }

    fn at(report: &TargetReport) -> Option<(u64, u64)> {
        match &report.report {
            Report::Status(s) => Some((s.plan_revision.get(), s.seq)),
            _ => None,
        }
    }

    #[test]
    fn status_reports_of_one_release_coalesce_to_the_newest_and_an_older_one_is_stale() {
        let mut q = Queue::default();
        let now = Instant::now();
        for seq in 1..=1000 {
            assert_eq!(q.push(status("a", 1, seq), now), None);
        }
        assert_eq!(q.push(status("a", 1, 3), now), Some(Dropped::Stale));
        assert_eq!(q.len, 1);
        assert_eq!(q.pop().as_ref().and_then(at), Some((1, 1000)));
        assert!(q.pop().is_none());
    }

    #[test]
    fn a_status_after_a_rejection_is_queued_behind_it_not_merged_before_it() {
        let mut q = Queue::default();
        let now = Instant::now();
        q.push(status("a", 4, 1), now);
        q.push(rejected("a", 5), now);
        q.push(status("a", 6, 1), now);
        q.push(status("a", 6, 2), now);
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order.len(), 3);
        assert_eq!(at(&order[0]), Some((4, 1)));
        assert!(matches!(order[1].report, Report::Rejected { .. }));
        assert_eq!(at(&order[2]), Some((6, 2)));
    }

    #[test]
    fn events_of_one_release_pass_a_token_bucket_and_the_rest_are_dropped() {
        let mut q = Queue::default();
        let now = Instant::now();
        let mut dropped = 0;
        let mut passed = 0;
        for n in 0..100_000 {
            match q.push(event("a", n), now) {
                Some(Dropped::EventRate) => dropped += 1,
                _ => passed += 1,
            }
            if let Some(r) = q.pop() {
                assert!(matches!(r.report, Report::Event { .. }));
            }
        }
        assert_eq!(passed, EVENT_BURST as usize);
        assert_eq!(dropped, 100_000 - EVENT_BURST as usize);
        // Another release has its own bucket; time refills.
        assert_eq!(q.push(event("b", 0), now), None);
        let later = now + Duration::from_secs(5);
        for n in 0..5 {
            assert_eq!(q.push(event("a", n), later), None, "token {n}");
        }
        assert_eq!(q.push(event("a", 6), later), Some(Dropped::EventRate));
    }

    #[test]
    fn a_release_holds_at_most_its_bound_and_a_full_queue_drops_events_first() {
        let mut q = Queue::default();
        let now = Instant::now();
        for revision in 1..=MAX_QUEUED_PER_OBJECT as u64 - 1 {
            q.push(rejected("a", revision), now);
        }
        q.push(event("a", 0), now);
        assert_eq!(q.len, MAX_QUEUED_PER_OBJECT);
        assert_eq!(q.push(rejected("a", 100), now), Some(Dropped::QueueFull));
        assert_eq!(q.len, MAX_QUEUED_PER_OBJECT);
        let all: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert!(
            all.iter()
                .all(|r| matches!(r.report, Report::Rejected { .. }))
        );
        assert_eq!(q.push(rejected("a", 101), now), None);
    }

    #[test]
    fn the_writer_takes_one_report_per_release_in_turn() {
        let mut q = Queue::default();
        let now = Instant::now();
        for n in 0..5 {
            q.push(event("flood", n), now);
        }
        q.push(status("quiet", 1, 1), now);
        let first: Vec<_> = std::iter::from_fn(|| q.pop())
            .take(2)
            .map(|r| r.report.object().name.to_string())
            .collect();
        assert_eq!(first, ["flood", "quiet"]);
    }

    #[tokio::test]
    async fn the_receiver_ends_when_every_sink_is_gone_and_the_queue_is_drained() {
        let (sink, mut rx) = report_channel();
        let other = sink.clone();
        sink.send(status("a", 1, 1)).unwrap();
        drop(sink);
        other.send(status("b", 1, 1)).unwrap();
        drop(other);
        assert!(rx.recv().await.is_some());
        assert!(rx.recv().await.is_some());
        assert!(rx.recv().await.is_none());
        let (sink, rx) = report_channel();
        drop(rx);
        assert_eq!(sink.send(status("a", 1, 1)), Err(ReportsClosed));
    }

    #[tokio::test]
    async fn drops_are_counted_by_reason() {
        let (sink, _rx) = report_channel();
        let metrics = HubMetrics::new();
        sink.count_into(metrics.clone());
        for n in 0..(EVENT_BURST as usize + 10) {
            sink.send(event("a", n)).unwrap();
        }
        assert_eq!(sink.dropped(Dropped::EventRate), 10);
        assert_eq!(metrics.dropped_total(Dropped::EventRate), 10);
        assert_eq!(sink.len(), MAX_QUEUED_PER_OBJECT);
        assert_eq!(
            sink.dropped(Dropped::QueueFull),
            EVENT_BURST as u64 - MAX_QUEUED_PER_OBJECT as u64
        );
    }
}
