//! The hub side of [`crate::link`] for registered clusters: one [`Mailbox`] per accepted
//! ManagedCluster, and [`RemoteLinks`], the registry of them.
//!
//! A mailbox holds the cluster's **desired state** (the newest plan per HelmRelease, and
//! deletions not yet confirmed), what its agent said it **holds**, and a set of **pending**
//! HelmReleases to send. A message is built from the desired state when it is taken off the
//! pending set, not when the controller sends: so a newer plan replaces an unsent older one,
//! and the queue of a session is bounded by its number of HelmReleases however fast plans
//! change. Each session drains its own mailbox, so a slow agent holds up nobody else.
//!
//! With no agent connected the mailbox keeps collecting; a Hello ([`Mailbox::resync`]) marks
//! pending exactly what differs from what the agent holds (upserts for missing or older
//! revisions, deletions it still holds), and lists the statuses the hub wants again (held
//! plans whose status digest differs from the last status the hub forwarded).
//!
//! The mailbox also remembers which chart archives the agent holds, as far as the hub knows
//! (its Hello's cached digests, then every archive sent with a plan or served by `GetChart`):
//! a hint, so a plan whose chart the agent lacks carries the archive and one it has does
//! not. An agent whose cache lost an archive still fetches it with `GetChart`.
//!
//! Reports from a cluster are forwarded to the [`ReportSink`] tagged with the cluster the
//! session's certificate names, never with anything the agent says, and only for
//! HelmReleases this cluster was given: a cluster cannot report for another's releases.
//! Nor for a plan revision the hub never sent it: the mailbox remembers the newest
//! revision it sent per HelmRelease (or the agent's Hello showed it holds, up to the
//! newest the hub has), and drops (and counts) a report or ack for a newer one.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use flotilla_core::agent::{Command, DeleteOutcome, DeleteRequest, HeldPlan, ObjectKey, Report};
use flotilla_core::digest::Digest;
use flotilla_core::ids::{ChartDigest, ClusterId, PlanRevision};
use flotilla_core::plan::ReleasePlan;
use flotilla_core::preview::{FEATURE as PREVIEW_FEATURE, PreviewError, PreviewRequest};
use tokio::sync::Notify;

use crate::link::{AgentLink, LinkClosed, Links, ReportSink, TargetId, TargetReport};
use crate::telemetry::Dropped;

/// What the hub wants a cluster to hold for one HelmRelease.
#[derive(Debug, Clone, PartialEq)]
pub enum Desired {
    /// This plan.
    Plan(Arc<ReleasePlan>),
    /// Nothing: uninstall (or forget), until the agent confirms.
    Delete(DeleteRequest),
}

/// A message for the agent, built when it is taken off the pending set.
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    /// Hold this plan.
    Upsert(Arc<ReleasePlan>),
    /// Delete a release.
    Delete(DeleteRequest),
    /// Reconcile a held plan now.
    Reconcile(ObjectKey),
    /// Preview a plan.
    Preview(PreviewRequest),
}

#[derive(Debug, Default)]
struct State {
    desired: BTreeMap<ObjectKey, Desired>,
    pending: BTreeSet<ObjectKey>,
    reconcile: BTreeSet<ObjectKey>,
    held: BTreeMap<ObjectKey, HeldPlan>,
    status_digests: BTreeMap<ObjectKey, Digest>,
    /// The newest revision sent to the agent per HelmRelease (a plan or a deletion), or
    /// its Hello showed it holds: reports for newer ones are dropped.
    sent: BTreeMap<ObjectKey, PlanRevision>,
    /// Chart archives the agent holds, as far as the hub knows (at most
    /// [`MAX_AGENT_CHARTS`]).
    agent_charts: BTreeSet<ChartDigest>,
    /// Whether the attached agent's Hello listed the `preview` feature.
    agent_previews: bool,
    /// Previews to send (at most [`MAX_QUEUED_PREVIEWS`]).
    previews: VecDeque<PreviewRequest>,
    /// The charts of the last [`MAX_QUEUED_PREVIEWS`] previews sent: the agent may fetch
    /// them with `GetChart` though no plan needs them.
    preview_charts: VecDeque<ChartDigest>,
}

/// The most previews waiting to be sent to one agent.
pub const MAX_QUEUED_PREVIEWS: usize = 16;

/// The most chart digests a mailbox remembers its agent holding.
pub const MAX_AGENT_CHARTS: usize = 1024;

/// The link of one registered cluster.
#[derive(Debug)]
pub struct Mailbox {
    cluster: ClusterId,
    state: Mutex<State>,
    notify: Notify,
    /// The id of the attached session; 0 when none.
    session: AtomicU64,
    closed: AtomicBool,
    reports: ReportSink,
}

impl Mailbox {
    /// An empty mailbox for `cluster`, forwarding into `reports`.
    pub fn new(cluster: ClusterId, reports: ReportSink) -> Self {
        Self {
            cluster,
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            session: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            reports,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cluster.
    pub fn cluster(&self) -> &ClusterId {
        &self.cluster
    }

    /// Attaches session `id` (non-zero), replacing any other (its writer sees
    /// [`Mailbox::is_attached`] turn false and ends).
    pub fn attach(&self, id: u64) {
        self.session.store(id, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Detaches session `id` if it is still the attached one.
    pub fn detach(&self, id: u64) {
        let _ = self
            .session
            .compare_exchange(id, 0, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Whether session `id` is the attached one.
    pub fn is_attached(&self, id: u64) -> bool {
        self.session.load(Ordering::SeqCst) == id && !self.closed.load(Ordering::SeqCst)
    }

    /// Closes the mailbox (its ManagedCluster is gone): sends fail, sessions end.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Waits until something is pending or the attachment changes.
    pub async fn changed(&self) {
        self.notify.notified().await;
    }

    /// The Hello of a new session: records what the agent holds, marks pending what
    /// differs and returns the HelmReleases whose status the hub wants again. Deletions of
    /// releases the agent does not hold are confirmed at once (forwarded as
    /// [`Report::Deleted`], outcome `Forgotten`). `cached_charts` are the chart archives
    /// the agent says it holds (the last [`MAX_AGENT_CHARTS`] are kept).
    pub fn resync(&self, held: Vec<HeldPlan>, cached_charts: Vec<ChartDigest>) -> Vec<ObjectKey> {
        let mut confirmed = Vec::new();
        let mut wanted = Vec::new();
        {
            let mut s = self.lock();
            s.held = held.into_iter().map(|h| (h.object.clone(), h)).collect();
            let skip = cached_charts.len().saturating_sub(MAX_AGENT_CHARTS);
            s.agent_charts = cached_charts.into_iter().skip(skip).collect();
            s.pending.clear();
            let State {
                desired,
                pending,
                held,
                status_digests,
                sent,
                ..
            } = &mut *s;
            desired.retain(|key, d| match d {
                Desired::Plan(plan) => {
                    match held.get(key) {
                        Some(h) if h.revision >= plan.revision => {
                            // Held at the newest revision the hub has: sent (by this hub
                            // or an earlier one), and nothing newer ever was.
                            let seen = sent.entry(key.clone()).or_insert(plan.revision);
                            *seen = (*seen).max(plan.revision);
                            if h.revision == plan.revision
                                && h.status_digest.is_some()
                                && h.status_digest.as_ref() != status_digests.get(key)
                            {
                                wanted.push(key.clone());
                            }
                        }
                        _ => {
                            pending.insert(key.clone());
                        }
                    }
                    true
                }
                Desired::Delete(req) => {
                    if held.contains_key(key) {
                        pending.insert(key.clone());
                        true
                    } else {
                        confirmed.push(req.clone());
                        sent.remove(key);
                        false
                    }
                }
            });
        }
        for req in confirmed {
            self.forward(Report::Deleted {
                object: req.object,
                revision: req.revision,
                outcome: DeleteOutcome::Forgotten,
            });
        }
        wanted
    }

    /// Records the features the attached agent's Hello lists (`preview`); previews queued
    /// for an agent without it are answered unsupported.
    pub fn set_features(&self, features: &[String]) {
        let previews = features.iter().any(|f| f == PREVIEW_FEATURE);
        let refused: Vec<PreviewRequest> = {
            let mut s = self.lock();
            s.agent_previews = previews;
            if previews {
                Vec::new()
            } else {
                s.previews.drain(..).collect()
            }
        };
        for r in refused {
            self.forward(crate::previews::answer_of(&r, self.unsupported()));
        }
    }

    fn unsupported(&self) -> PreviewError {
        PreviewError::Unsupported(format!(
            "the agent of cluster {} does not support previews (it is older than this hub); upgrade the agent.",
            self.cluster
        ))
    }

    /// Takes the next message for the agent off the pending set.
    pub fn next_outgoing(&self) -> Option<Outgoing> {
        let mut s = self.lock();
        if let Some(p) = s.previews.pop_front() {
            return Some(Outgoing::Preview(p));
        }
        if let Some(key) = s.reconcile.pop_first() {
            return Some(Outgoing::Reconcile(key));
        }
        while let Some(key) = s.pending.pop_first() {
            let (outgoing, revision) = match s.desired.get(&key) {
                Some(Desired::Plan(p)) => (Outgoing::Upsert(p.clone()), p.revision),
                Some(Desired::Delete(d)) => (Outgoing::Delete(d.clone()), d.revision),
                None => continue,
            };
            let seen = s.sent.entry(key).or_insert(revision);
            *seen = (*seen).max(revision);
            return Some(outgoing);
        }
        None
    }

    /// Whether the hub sent this cluster `key` at `revision` or later.
    fn was_sent(s: &State, key: &ObjectKey, revision: PlanRevision) -> bool {
        s.sent.get(key).is_some_and(|sent| revision <= *sent)
    }

    /// The agent acknowledged holding `key` at `revision` (ignored, and counted, for a
    /// revision the hub never sent it).
    pub fn acked(&self, key: ObjectKey, revision: PlanRevision) {
        let mut s = self.lock();
        if !Self::was_sent(&s, &key, revision) {
            drop(s);
            self.reports.count_dropped(Dropped::UnsentRevision);
            return;
        }
        let chart = match s.desired.get(&key) {
            Some(Desired::Plan(p)) => Some(p.chart.digest.clone()),
            _ => s.held.get(&key).map(|h| h.chart.clone()),
        };
        if let Some(chart) = chart {
            let status_digest = s.held.get(&key).and_then(|h| h.status_digest.clone());
            s.held.insert(
                key.clone(),
                HeldPlan {
                    object: key,
                    revision,
                    chart,
                    status_digest,
                },
            );
        }
    }

    /// Forwards a report of this cluster's agent, if it is about a HelmRelease this
    /// cluster was given, at a revision the hub sent it; returns whether it was forwarded
    /// (a report dropped is counted).
    pub fn report(&self, report: Report) -> bool {
        if let Report::Preview(_) = report {
            // Answers go to their waiter, which checks the cluster, id and HelmRelease.
            self.forward(report);
            return true;
        }
        let key = report.object();
        let revision = match &report {
            Report::Status(s) => s.plan_revision,
            Report::Event { plan_revision, .. } => *plan_revision,
            Report::Deleted { revision, .. } | Report::Rejected { revision, .. } => *revision,
            Report::Preview(_) => return false,
        };
        {
            let mut s = self.lock();
            if !s.desired.contains_key(&key) {
                drop(s);
                self.reports.count_dropped(Dropped::NotGiven);
                return false;
            }
            if !Self::was_sent(&s, &key, revision) {
                drop(s);
                self.reports.count_dropped(Dropped::UnsentRevision);
                return false;
            }
            match &report {
                Report::Status(status) => {
                    let digest = flotilla_core::agent::status_digest(&status.status);
                    if let Some(h) = s.held.get_mut(&key) {
                        h.status_digest = Some(digest.clone());
                    }
                    s.status_digests.insert(key.clone(), digest);
                }
                Report::Deleted { revision, .. } => {
                    if matches!(s.desired.get(&key), Some(Desired::Delete(d)) if d.revision <= *revision)
                    {
                        s.desired.remove(&key);
                        s.status_digests.remove(&key);
                        s.sent.remove(&key);
                    }
                    s.held.remove(&key);
                }
                Report::Event { .. } | Report::Rejected { .. } | Report::Preview(_) => {}
            }
        }
        self.forward(report);
        true
    }

    /// The sink this mailbox forwards into (tests read its drop counts).
    #[cfg(test)]
    pub(crate) fn reports_for_tests(&self) -> &ReportSink {
        &self.reports
    }

    /// Counts an input of this cluster's agent dropped before it reached the mailbox.
    pub fn count_dropped(&self, reason: Dropped) {
        self.reports.count_dropped(reason);
    }

    fn forward(&self, report: Report) {
        let _ = self.reports.send(TargetReport {
            target: TargetId::Cluster(self.cluster.clone()),
            report,
        });
    }

    /// Whether a plan of this cluster needs the chart `digest`.
    pub fn needs_chart(&self, digest: &flotilla_core::ids::ChartDigest) -> bool {
        let s = self.lock();
        s.preview_charts.contains(digest)
            || s.desired
                .values()
                .any(|d| matches!(d, Desired::Plan(p) if p.chart.digest == *digest))
    }

    /// Whether the agent holds the chart archive `digest`, as far as the hub knows.
    pub fn agent_has_chart(&self, digest: &ChartDigest) -> bool {
        self.lock().agent_charts.contains(digest)
    }

    /// The agent was sent (with a plan, or by `GetChart`) the chart archive `digest`.
    pub fn agent_got_chart(&self, digest: &ChartDigest) {
        let mut s = self.lock();
        if s.agent_charts.insert(digest.clone()) && s.agent_charts.len() > MAX_AGENT_CHARTS {
            // A hint: forgetting one costs at most an archive sent again.
            let forget = s.agent_charts.iter().find(|d| *d != digest).cloned();
            if let Some(forget) = forget {
                s.agent_charts.remove(&forget);
            }
        }
    }

    /// How many plans the agent holds, as the hub last heard.
    pub fn held_count(&self) -> usize {
        self.lock().held.len()
    }
}

impl AgentLink for Mailbox {
    fn send(&self, command: Command) -> Result<(), LinkClosed> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(LinkClosed {
                target: TargetId::Cluster(self.cluster.clone()),
            });
        }
        {
            let mut s = self.lock();
            match command {
                Command::Upsert(plan) => {
                    let key = plan.object.key();
                    let newer = match s.desired.get(&key) {
                        Some(Desired::Plan(p)) => plan.revision > p.revision,
                        Some(Desired::Delete(d)) => plan.revision > d.revision,
                        None => true,
                    };
                    if newer {
                        s.desired
                            .insert(key.clone(), Desired::Plan(Arc::new(*plan)));
                        s.pending.insert(key);
                    }
                }
                Command::Delete(req) => {
                    let key = req.object.clone();
                    s.desired.insert(key.clone(), Desired::Delete(req));
                    s.pending.insert(key);
                }
                Command::Reconcile(key) => {
                    if matches!(s.desired.get(&key), Some(Desired::Plan(_))) {
                        s.reconcile.insert(key);
                    }
                }
                Command::Preview(request) => {
                    let refusal = if !self.connected() {
                        Some(PreviewError::Failed(format!(
                            "no agent of cluster {} is connected to preview with.",
                            self.cluster
                        )))
                    } else if !s.agent_previews {
                        Some(self.unsupported())
                    } else if s.previews.len() >= MAX_QUEUED_PREVIEWS {
                        Some(PreviewError::Failed(format!(
                            "{MAX_QUEUED_PREVIEWS} previews already wait to be sent to cluster {}; try again shortly.",
                            self.cluster
                        )))
                    } else {
                        let chart = request.plan.chart.digest.clone();
                        if !s.preview_charts.contains(&chart) {
                            if s.preview_charts.len() >= MAX_QUEUED_PREVIEWS {
                                s.preview_charts.pop_front();
                            }
                            s.preview_charts.push_back(chart);
                        }
                        s.previews.push_back(request.clone());
                        None
                    };
                    if let Some(error) = refusal {
                        drop(s);
                        self.forward(crate::previews::answer_of(&request, error));
                        return Ok(());
                    }
                }
                // A remote agent's life is its own: the session ends, the agent stays.
                Command::Shutdown => return Ok(()),
            }
        }
        self.notify.notify_waiters();
        self.notify.notify_one();
        Ok(())
    }

    fn connected(&self) -> bool {
        self.session.load(Ordering::SeqCst) != 0 && !self.closed.load(Ordering::SeqCst)
    }

    fn held(&self) -> Vec<HeldPlan> {
        self.lock().held.values().cloned().collect()
    }
}

/// The links of registered clusters: [`Links`] for [`TargetId::Cluster`] (every other
/// target is `None`: the controller routes those to its push links).
#[derive(Debug)]
pub struct RemoteLinks {
    mailboxes: RwLock<HashMap<ClusterId, (Arc<Mailbox>, bool)>>,
    reports: ReportSink,
}

impl RemoteLinks {
    /// An empty registry whose mailboxes forward into `reports`.
    pub fn new(reports: ReportSink) -> Self {
        Self {
            mailboxes: RwLock::new(HashMap::new()),
            reports,
        }
    }

    /// The mailbox of `cluster`, made when missing; `accepted` says whether
    /// [`Links::link`] hands it out.
    pub fn ensure(&self, cluster: &ClusterId, accepted: bool) -> Arc<Mailbox> {
        let mut map = self
            .mailboxes
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = map.entry(cluster.clone()).or_insert_with(|| {
            (
                Arc::new(Mailbox::new(cluster.clone(), self.reports.clone())),
                accepted,
            )
        });
        entry.1 = accepted;
        entry.0.clone()
    }

    /// The mailbox of `cluster`, accepted or not.
    pub fn mailbox(&self, cluster: &ClusterId) -> Option<Arc<Mailbox>> {
        self.mailboxes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(cluster)
            .map(|(m, _)| m.clone())
    }

    /// Forgets `cluster` (its ManagedCluster was deleted): its mailbox is closed.
    pub fn remove(&self, cluster: &ClusterId) {
        let removed = self
            .mailboxes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(cluster);
        if let Some((m, _)) = removed {
            m.close();
        }
    }
}

impl Links for RemoteLinks {
    fn link(&self, target: &TargetId) -> Option<Arc<dyn AgentLink>> {
        let TargetId::Cluster(id) = target else {
            return None;
        };
        let map = self
            .mailboxes
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        match map.get(id) {
            Some((m, true)) => Some(m.clone() as Arc<dyn AgentLink>),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use flotilla_core::agent::StatusReport;
    use flotilla_core::ids::{ChartDigest, PlanRevision};
    use flotilla_core::plan::ChartArtifact;
    use flotilla_core::release::Step;
    use flotilla_core::spec::HelmRelease;
    use flotilla_core::status::HelmReleaseStatus;
    use serde_json::json;
    use std::time::Duration;

    use super::*;
    use crate::link::{ReportReceiver, report_channel};

    fn plan(name: &str, revision: u64) -> ReleasePlan {
        let hr = HelmRelease::from_value(json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": name, "namespace": "apps", "generation": 1},
            "spec": {"interval": "5m", "chartRef": {"kind": "OCIRepository", "name": "podinfo"}}
        }))
        .expect("a valid HelmRelease");
        let chart = ChartArtifact {
            name: "podinfo".into(),
            version: "6.5.3".into(),
            app_version: None,
            digest: ChartDigest::of_bytes(b"podinfo"),
            oci_digest: None,
        };
        ReleasePlan::from_helm_release(&hr, PlanRevision::new(revision), chart, json!({}))
            .expect("a plan")
    }

    fn mailbox() -> (Mailbox, ReportReceiver) {
        let (tx, rx) = report_channel();
        (Mailbox::new(ClusterId::new("edge").unwrap(), tx), rx)
    }

    fn held(p: &ReleasePlan, revision: u64, digest: Option<Digest>) -> HeldPlan {
        HeldPlan {
            object: p.object.key(),
            revision: PlanRevision::new(revision),
            chart: p.chart.digest.clone(),
            status_digest: digest,
        }
    }

    fn status(p: &ReleasePlan, seq: u64) -> Report {
        Report::Status(Box::new(StatusReport {
            object: p.object.clone(),
            plan_revision: p.revision,
            seq,
            status: HelmReleaseStatus::default(),
            step: Step::Done,
        }))
    }

    #[tokio::test]
    async fn a_preview_goes_to_an_agent_that_lists_the_feature_and_is_answered_unsupported_otherwise()
     {
        let (tx, _rx) = report_channel();
        let m = Mailbox::new(ClusterId::new("edge").unwrap(), tx.clone());
        let target = TargetId::Cluster(ClusterId::new("edge").unwrap());
        let p = plan("a", 1);
        let ask = |wait| {
            crate::previews::ask(
                tx.previews(),
                &m,
                &target,
                p.clone(),
                Duration::from_millis(wait),
            )
        };
        // No agent connected: a failure at once.
        let e = ask(5000).await.unwrap_err().to_string();
        assert_eq!(e, "no agent of cluster edge is connected to preview with.");
        // An older agent: its Hello lists no features.
        m.attach(1);
        m.set_features(&[]);
        match ask(5000).await {
            Err(PreviewError::Unsupported(m)) => assert_eq!(
                m,
                "the agent of cluster edge does not support previews (it is older than this hub); upgrade the agent."
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(m.next_outgoing(), None, "nothing is sent to it");
        // An agent that lists it gets the request, and the chart may be fetched.
        m.set_features(&["preview".to_owned()]);
        let e = ask(1000).await.unwrap_err().to_string();
        assert_eq!(
            e,
            "the agent of cluster edge did not answer the preview within 1s."
        );
        match m.next_outgoing() {
            Some(Outgoing::Preview(r)) => {
                assert_eq!(r.plan.object, p.object);
                assert_eq!(r.id.len(), 24);
            }
            other => panic!("{other:?}"),
        }
        assert!(m.needs_chart(&p.chart.digest));
        assert!(
            tx.previews().is_empty(),
            "the caller that gave up is forgotten"
        );
    }

    #[test]
    fn a_newer_plan_replaces_an_unsent_older_one() {
        let (m, _rx) = mailbox();
        m.send(Command::Upsert(Box::new(plan("a", 1)))).unwrap();
        m.send(Command::Upsert(Box::new(plan("a", 2)))).unwrap();
        m.send(Command::Upsert(Box::new(plan("a", 1)))).unwrap();
        match m.next_outgoing() {
            Some(Outgoing::Upsert(p)) => assert_eq!(p.revision, PlanRevision::new(2)),
            other => panic!("expected revision 2, got {other:?}"),
        }
        assert_eq!(m.next_outgoing(), None);
    }

    #[test]
    fn the_charts_an_agent_holds_come_from_its_hello_and_what_it_was_sent_and_stay_bounded() {
        let (m, _rx) = mailbox();
        let digest = |i: usize| ChartDigest::of_bytes(format!("archive {i}").as_bytes());
        assert!(!m.agent_has_chart(&digest(0)));
        // A Hello listing more than the bound keeps the most recently used (the last).
        let listed: Vec<ChartDigest> = (0..MAX_AGENT_CHARTS + 5).map(digest).collect();
        m.resync(Vec::new(), listed);
        assert!(!m.agent_has_chart(&digest(4)));
        assert!(m.agent_has_chart(&digest(5)));
        assert!(m.agent_has_chart(&digest(MAX_AGENT_CHARTS + 4)));
        // One sent since: known, and the set stays at its bound.
        let sent = digest(MAX_AGENT_CHARTS + 100);
        m.agent_got_chart(&sent);
        assert!(m.agent_has_chart(&sent));
        assert_eq!(m.lock().agent_charts.len(), MAX_AGENT_CHARTS);
        // The next session's Hello is the truth again (its cache may have lost some).
        m.resync(Vec::new(), vec![digest(1)]);
        assert!(m.agent_has_chart(&digest(1)));
        assert!(!m.agent_has_chart(&sent));
    }

    #[test]
    fn a_resync_sends_exactly_what_differs_and_asks_for_unknown_statuses() {
        let (m, mut rx) = mailbox();
        let (same, older, missing) = (plan("same", 3), plan("older", 5), plan("missing", 1));
        for p in [&same, &older, &missing] {
            m.send(Command::Upsert(Box::new(p.clone()))).unwrap();
        }
        let gone = DeleteRequest {
            object: plan("gone", 1).object.key(),
            revision: PlanRevision::new(2),
            uninstall: None,
        };
        let still_held = DeleteRequest {
            object: plan("held", 1).object.key(),
            revision: PlanRevision::new(2),
            uninstall: None,
        };
        m.send(Command::Delete(gone.clone())).unwrap();
        m.send(Command::Delete(still_held.clone())).unwrap();
        let digest = flotilla_core::agent::status_digest(&HelmReleaseStatus::default());
        let wanted = m.resync(
            vec![
                held(&same, 3, Some(digest)),
                held(&older, 4, None),
                held(&plan("held", 1), 1, None),
            ],
            Vec::new(),
        );
        assert_eq!(wanted, vec![same.object.key()]);
        let mut sent = Vec::new();
        while let Some(o) = m.next_outgoing() {
            sent.push(o);
        }
        assert_eq!(
            sent,
            vec![
                Outgoing::Delete(still_held),
                Outgoing::Upsert(Arc::new(missing)),
                Outgoing::Upsert(Arc::new(older)),
            ]
        );
        // The deletion the agent no longer holds is confirmed at once.
        let confirmed = rx.try_recv().expect("a Deleted report");
        assert!(
            matches!(confirmed.report, Report::Deleted { ref object, .. } if *object == gone.object)
        );
    }

    #[test]
    fn reports_are_forwarded_only_for_releases_the_cluster_was_given_and_tagged_with_it() {
        let (m, mut rx) = mailbox();
        let given = plan("given", 1);
        m.send(Command::Upsert(Box::new(given.clone()))).unwrap();
        // Sent to the agent (a report is taken only for a revision the hub sent).
        assert!(m.next_outgoing().is_some());
        assert!(m.report(status(&given, 1)));
        let r = rx.try_recv().unwrap();
        assert_eq!(r.target, TargetId::Cluster(ClusterId::new("edge").unwrap()));
        assert!(!m.report(status(&plan("foreign", 1), 1)));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn links_hand_out_a_cluster_only_while_it_is_accepted_and_never_other_targets() {
        let (tx, _rx) = report_channel();
        let links = RemoteLinks::new(tx);
        let id = ClusterId::new("edge").unwrap();
        links.ensure(&id, false);
        assert!(links.link(&TargetId::Cluster(id.clone())).is_none());
        links.ensure(&id, true);
        let link = links
            .link(&TargetId::Cluster(id.clone()))
            .expect("accepted");
        assert!(!link.connected());
        assert!(links.link(&TargetId::Local).is_none());
        links.remove(&id);
        assert!(link.send(Command::Upsert(Box::new(plan("a", 1)))).is_err());
    }

    #[test]
    fn reports_and_acks_for_a_revision_never_sent_are_dropped_and_counted() {
        let (m, mut rx) = mailbox();
        let p = plan("given", 3);
        m.send(Command::Upsert(Box::new(p.clone()))).unwrap();
        // Given, not sent yet: nothing at revision 3 is taken.
        assert!(!m.report(status(&p, 1)));
        m.acked(p.object.key(), PlanRevision::new(3));
        assert_eq!(m.held_count(), 0);
        assert!(m.next_outgoing().is_some());
        assert!(m.report(status(&p, 1)));
        assert!(rx.try_recv().is_ok());
        // A revision the hub never made, and an older one it did send before.
        let mut ahead = plan("given", 4);
        ahead.revision = PlanRevision::new(u64::MAX);
        assert!(!m.report(status(&ahead, 2)));
        assert!(m.report(status(&plan("given", 2), 3)));
        m.acked(p.object.key(), PlanRevision::new(u64::MAX));
        assert!(
            m.held()
                .iter()
                .all(|h| h.revision != PlanRevision::new(u64::MAX))
        );
        assert!(rx.try_recv().is_ok());
        assert!(rx.try_recv().is_err());
        assert_eq!(m.reports.dropped(Dropped::UnsentRevision), 4);
        // A Hello showing the newest revision held counts it as sent.
        let (m, _rx) = mailbox();
        m.send(Command::Upsert(Box::new(p.clone()))).unwrap();
        m.resync(vec![held(&p, 3, None)], Vec::new());
        assert_eq!(m.next_outgoing(), None);
        assert!(m.report(status(&p, 1)));
    }
}
