//! The HelmRelease controller's queue depth, as `/metrics` reports it
//! (`flotilla_hub_queue_depth{controller="helmrelease"}`): the HelmReleases that wait for a
//! reconcile worker.
//!
//! kube-runtime's scheduler keeps its queue to itself, so the controller tells this book
//! what goes in and out, as controller-runtime's workqueue counts its items: a HelmRelease
//! is waiting from the moment a reconcile is asked for it (its own watch event, a change
//! of an object it uses, the status writer's request) or its requeue time passes, until a
//! worker starts its reconcile. Asking twice counts once, as the scheduler merges requests.
//! A request for an object the controller's cache does not hold is not counted (the
//! controller drops it too).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flotilla_api::HelmRelease;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};

#[derive(Debug, Default)]
struct Book {
    /// Asked for and not started.
    requested: HashSet<ObjectRef<HelmRelease>>,
    /// When each requeue is due (a reconcile that ended with a requeue).
    due: HashMap<ObjectRef<HelmRelease>, Instant>,
}

/// What waits for a reconcile worker.
#[derive(Debug, Default)]
pub struct ReconcileQueue {
    book: Mutex<Book>,
}

impl ReconcileQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A reconcile of `object` was asked for.
    pub fn requested(&self, object: &ObjectRef<HelmRelease>) {
        self.lock().requested.insert(object.clone());
    }

    /// A worker started the reconcile of `object`.
    pub fn started(&self, object: &ObjectRef<HelmRelease>) {
        let mut book = self.lock();
        book.requested.remove(object);
        book.due.remove(object);
    }

    /// The reconcile of `object` ended asking to run again after `after`: the action.
    pub fn requeue(&self, object: &ObjectRef<HelmRelease>, after: Duration) -> Action {
        self.lock()
            .due
            .insert(object.clone(), Instant::now() + after);
        Action::requeue(after)
    }

    /// The HelmReleases waiting now, among those `cache` holds (others are forgotten).
    pub fn depth(&self, cache: &Store<HelmRelease>) -> usize {
        let now = Instant::now();
        let mut book = self.lock();
        book.requested.retain(|o| cache.get(o).is_some());
        book.due.retain(|o, _| cache.get(o).is_some());
        let Book { requested, due } = &*book;
        requested.len()
            + due
                .iter()
                .filter(|(o, at)| **at <= now && !requested.contains(*o))
                .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    fn hr(name: &str) -> HelmRelease {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "helm.flotilla.dev/v1",
            "kind": "HelmRelease",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"interval": "10m", "chart": {"spec": {
                "chart": "podinfo",
                "sourceRef": {"kind": "HelmRepository", "name": "podinfo"},
            }}},
        }))
        .expect("a HelmRelease")
    }

    #[test]
    fn requests_count_once_until_started_and_due_requeues_count_but_not_earlier() {
        let (cache, mut writer) = reflector::store::<HelmRelease>();
        for name in ["a", "b", "c"] {
            writer.apply_watcher_event(&Event::Apply(hr(name)));
        }
        let r = |n: &str| ObjectRef::new(n).within("default");
        let q = ReconcileQueue::default();
        assert_eq!(q.depth(&cache), 0);

        q.requested(&r("a"));
        q.requested(&r("a"));
        q.requested(&r("b"));
        assert_eq!(q.depth(&cache), 2, "asking twice counts once");
        q.started(&r("a"));
        assert_eq!(q.depth(&cache), 1);

        let _ = q.requeue(&r("a"), Duration::ZERO);
        let _ = q.requeue(&r("c"), Duration::from_secs(600));
        assert_eq!(q.depth(&cache), 2, "a is due, c is not yet");
        q.requested(&r("a"));
        assert_eq!(q.depth(&cache), 2, "due and asked for counts once");
        q.started(&r("a"));
        q.started(&r("b"));
        assert_eq!(q.depth(&cache), 0);

        q.requested(&r("gone"));
        assert_eq!(
            q.depth(&cache),
            0,
            "an object the cache lacks is not counted"
        );
    }
}
