//! The `valuesFrom` cache: the data of the ConfigMaps and Secrets HelmReleases reference,
//! kept between reconciles and kept current by the controller's metadata watches on
//! ConfigMaps and Secrets (the watches that already enqueue the HelmReleases using an
//! object when it changes).
//!
//! Only referenced objects are held: an entry is made by the first reconcile that reads
//! the object (one API call), then served from memory until the watch says the object
//! changed. Entries are never logged, and `Debug` shows no data.
//!
//! When an entry is current:
//! - **A change seen by the watch invalidates before it triggers.** The watch event is
//!   applied to the cache ([`ValuesCache::observe`]) in the watch stream, before the stream
//!   yields the object to the mapper that enqueues its HelmReleases: a reconcile triggered
//!   by a change always reads after the cache has dropped the old data.
//! - **A read racing a change is not cached stale.** A read marks its entry as being
//!   fetched ([`ValuesCache::begin`]); a watch event for the object during the read records
//!   the event's `resourceVersion`; the result is cached only when no event came or the last
//!   one is the version read (else the next reconcile reads again). A relist of the watch
//!   (`Init`, after a desync) drops every entry of that kind and every read in flight.
//! - **A change of the HelmRelease itself reads fresh.** The watches of HelmReleases and of
//!   ConfigMaps/Secrets are separate streams, so the HelmRelease event of an edit made
//!   right after a value change may arrive first. A reconcile of a HelmRelease whose
//!   generation or request tokens (`reconcile.fluxcd.io/requestedAt`, `forceAt`, `resetAt`)
//!   differ from those of its last values read bypasses the cache (and refreshes it), as
//!   Flux's uncached client always reads: `kubectl apply` of a value then of the
//!   HelmRelease, or a value change followed by `flotilla reconcile hr`, plans the new value
//!   at once. Interval reconciles, retries, dependency requeues and reconciles triggered by
//!   a source or chart change read the cache.
//! - An object missing from the API is cached as missing (a creation is a watch event).

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex};

use flotilla_api::HelmRelease;
use flotilla_core::agent::ObjectKey;
use flotilla_core::spec::ValuesReferenceKind;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;
use kube::{Client, ResourceExt as _};

/// The data of a ConfigMap (`.data` as bytes) or Secret (`.data` decoded) by key.
pub type Data = BTreeMap<String, Vec<u8>>;

/// An object as read: its `resourceVersion` and data, or `None` when it does not exist.
pub type Read = Option<(String, Arc<Data>)>;

/// `(kind tag, namespace, name)`: `ValuesReferenceKind` is not `Hash`.
type Key = (u8, String, String);

fn tag(kind: ValuesReferenceKind) -> u8 {
    match kind {
        ValuesReferenceKind::ConfigMap => 0,
        ValuesReferenceKind::Secret => 1,
    }
}

enum Entry {
    /// The object as last read (`None`: it does not exist).
    Cached(Read),
    /// Being read by fetch `id`; `seen` is the last watch event during the read:
    /// `Some(Some(rv))` a change to `rv`, `Some(None)` a deletion.
    Fetching {
        id: u64,
        seen: Option<Option<String>>,
    },
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    next_id: u64,
    /// Bumped by each relist of a watch: reads begun before it are not cached.
    epoch: u64,
    /// Per HelmRelease: [`request_hash`] at its last values read.
    read_for: HashMap<ObjectKey, u64>,
}

/// The cache (see the module docs). Shared by the reconciles and the watches.
#[derive(Default)]
pub struct ValuesCache {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for ValuesCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries = self.lock().entries.len();
        f.debug_struct("ValuesCache")
            .field("entries", &entries)
            .finish_non_exhaustive()
    }
}

/// A read in flight, from [`ValuesCache::begin`] to [`ValuesCache::finish`].
#[derive(Debug)]
pub struct Ticket {
    key: Key,
    id: u64,
    epoch: u64,
}

/// What of a HelmRelease makes its next values read bypass the cache: its generation and
/// its request tokens.
pub fn request_hash(hr: &HelmRelease) -> u64 {
    let mut h = DefaultHasher::new();
    hr.metadata.generation.hash(&mut h);
    for (k, v) in hr.annotations() {
        if k.starts_with("reconcile.fluxcd.io/") {
            k.hash(&mut h);
            v.hash(&mut h);
        }
    }
    h.finish()
}

impl ValuesCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the values read of `release` may use the cache: its [`request_hash`] is the
    /// one of its last read.
    pub fn may_use(&self, release: &ObjectKey, request_hash: u64) -> bool {
        self.lock().read_for.get(release) == Some(&request_hash)
    }

    /// Records that `release` read its values at `request_hash`.
    pub fn read_done(&self, release: &ObjectKey, request_hash: u64) {
        self.lock().read_for.insert(release.clone(), request_hash);
    }

    /// Forgets `release` (deleted).
    pub fn forget(&self, release: &ObjectKey) {
        self.lock().read_for.remove(release);
    }

    /// The cached object `kind` `namespace/name`: `None` when not cached, `Some(None)` when
    /// cached as missing.
    pub fn get(&self, kind: ValuesReferenceKind, namespace: &str, name: &str) -> Option<Read> {
        match self
            .lock()
            .entries
            .get(&(tag(kind), namespace.to_owned(), name.to_owned()))?
        {
            Entry::Cached(read) => Some(read.clone()),
            Entry::Fetching { .. } => None,
        }
    }

    /// Starts a read of `kind` `namespace/name` from the API.
    pub fn begin(&self, kind: ValuesReferenceKind, namespace: &str, name: &str) -> Ticket {
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        let key = (tag(kind), namespace.to_owned(), name.to_owned());
        inner
            .entries
            .insert(key.clone(), Entry::Fetching { id, seen: None });
        Ticket {
            key,
            id,
            epoch: inner.epoch,
        }
    }

    /// Ends the read of `ticket` with what it read: cached unless the watch saw another
    /// version during the read, a relist happened, or a later read of the object began.
    pub fn finish(&self, ticket: Ticket, read: &Read) {
        let mut inner = self.lock();
        let relisted = inner.epoch != ticket.epoch;
        let Some(Entry::Fetching { id, seen }) = inner.entries.get(&ticket.key) else {
            return;
        };
        if *id != ticket.id {
            return;
        }
        let version = read.as_ref().map(|(rv, _)| rv.clone());
        let current = match seen {
            None => true,
            Some(seen) => *seen == version,
        };
        if current && !relisted {
            inner
                .entries
                .insert(ticket.key, Entry::Cached(read.clone()));
        } else {
            inner.entries.remove(&ticket.key);
        }
    }

    /// Applies a watch event of the `kind` metadata watch.
    pub fn observe<K>(&self, kind: ValuesReferenceKind, event: &Event<PartialObjectMeta<K>>)
    where
        PartialObjectMeta<K>: kube::Resource,
    {
        match event {
            Event::Apply(o) | Event::InitApply(o) => {
                self.changed(kind, o, Some(o.resource_version().unwrap_or_default()))
            }
            Event::Delete(o) => self.changed(kind, o, None),
            Event::Init => {
                let mut inner = self.lock();
                inner.epoch += 1;
                inner.entries.retain(|(k, _, _), _| *k != tag(kind));
            }
            Event::InitDone => {}
        }
    }

    fn changed<O: kube::Resource>(
        &self,
        kind: ValuesReferenceKind,
        object: &O,
        version: Option<String>,
    ) {
        let key = (
            tag(kind),
            object.meta().namespace.clone().unwrap_or_default(),
            object.meta().name.clone().unwrap_or_default(),
        );
        let mut inner = self.lock();
        match inner.entries.get_mut(&key) {
            None => {}
            Some(Entry::Fetching { seen, .. }) => *seen = Some(version),
            Some(Entry::Cached(read)) => {
                let cached = read.as_ref().map(|(rv, _)| rv);
                if cached != version.as_ref() {
                    inner.entries.remove(&key);
                }
            }
        }
    }
}

/// Reads ConfigMap (`.data` as bytes) or Secret (`.data` decoded, `stringData` first)
/// `namespace/name` from the API.
pub async fn read(
    client: &Client,
    kind: ValuesReferenceKind,
    namespace: &str,
    name: &str,
) -> Result<Read, kube::Error> {
    Ok(match kind {
        ValuesReferenceKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            api.get_opt(name).await?.map(|c| {
                let rv = c.resource_version().unwrap_or_default();
                (rv, Arc::new(crate::util::config_map_bytes(c)))
            })
        }
        ValuesReferenceKind::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            api.get_opt(name).await?.map(|s| {
                let rv = s.resource_version().unwrap_or_default();
                (rv, Arc::new(crate::util::secret_bytes(s)))
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CM: ValuesReferenceKind = ValuesReferenceKind::ConfigMap;
    const SECRET: ValuesReferenceKind = ValuesReferenceKind::Secret;

    fn meta(name: &str, rv: &str) -> PartialObjectMeta<ConfigMap> {
        let mut m = PartialObjectMeta::<ConfigMap>::default();
        m.metadata.namespace = Some("ns".into());
        m.metadata.name = Some(name.into());
        m.metadata.resource_version = Some(rv.into());
        m
    }

    fn found(rv: &str, value: &str) -> Read {
        let mut data = Data::new();
        data.insert("values.yaml".into(), value.as_bytes().to_vec());
        Some((rv.into(), Arc::new(data)))
    }

    fn value(read: Option<Read>) -> Option<Option<String>> {
        read.map(|r| r.map(|(_, d)| String::from_utf8_lossy(&d["values.yaml"]).into_owned()))
    }

    #[test]
    fn a_read_is_cached_until_the_watch_sees_another_version_of_the_object() {
        let cache = ValuesCache::default();
        assert!(cache.get(CM, "ns", "v").is_none());
        let t = cache.begin(CM, "ns", "v");
        assert!(cache.get(CM, "ns", "v").is_none(), "not served while read");
        cache.finish(t, &found("5", "a: 1"));
        assert_eq!(value(cache.get(CM, "ns", "v")), Some(Some("a: 1".into())));
        // The same version (a relist's InitApply, a late event of the version read): kept.
        cache.observe(CM, &Event::Apply(meta("v", "5")));
        cache.observe(CM, &Event::InitApply(meta("v", "5")));
        assert!(cache.get(CM, "ns", "v").is_some());
        // Another kind or another object: kept.
        cache.observe(SECRET, &Event::Apply(meta("v", "6")));
        cache.observe(CM, &Event::Apply(meta("w", "6")));
        assert!(cache.get(CM, "ns", "v").is_some());
        // A new version: dropped before the event goes on to trigger the reconcile.
        cache.observe(CM, &Event::Apply(meta("v", "6")));
        assert!(cache.get(CM, "ns", "v").is_none());
    }

    #[test]
    fn a_missing_object_is_cached_as_missing_until_it_is_created_and_a_deletion_drops_it() {
        let cache = ValuesCache::default();
        let t = cache.begin(SECRET, "ns", "v");
        cache.finish(t, &None);
        assert_eq!(value(cache.get(SECRET, "ns", "v")), Some(None));
        cache.observe(SECRET, &Event::Apply(meta("v", "1")));
        assert!(cache.get(SECRET, "ns", "v").is_none());
        let t = cache.begin(SECRET, "ns", "v");
        cache.finish(t, &found("1", "a: 1"));
        cache.observe(SECRET, &Event::Delete(meta("v", "1")));
        assert!(cache.get(SECRET, "ns", "v").is_none());
    }

    #[test]
    fn a_read_that_races_a_change_is_not_cached_unless_it_read_the_version_the_watch_saw() {
        let cache = ValuesCache::default();
        // The object changed during the read, the read returned the older version.
        let t = cache.begin(CM, "ns", "v");
        cache.observe(CM, &Event::Apply(meta("v", "7")));
        cache.finish(t, &found("6", "old"));
        assert!(cache.get(CM, "ns", "v").is_none());
        // The read returned the version the watch saw: current.
        let t = cache.begin(CM, "ns", "v");
        cache.observe(CM, &Event::Apply(meta("v", "7")));
        cache.finish(t, &found("7", "new"));
        assert_eq!(value(cache.get(CM, "ns", "v")), Some(Some("new".into())));
        // Deleted during a read that found it.
        cache.observe(CM, &Event::Apply(meta("v", "8")));
        let t = cache.begin(CM, "ns", "v");
        cache.observe(CM, &Event::Delete(meta("v", "8")));
        cache.finish(t, &found("8", "gone"));
        assert!(cache.get(CM, "ns", "v").is_none());
    }

    #[test]
    fn a_relist_drops_the_entries_of_its_kind_and_the_reads_in_flight_and_a_later_read_wins() {
        let cache = ValuesCache::default();
        for kind in [CM, SECRET] {
            let t = cache.begin(kind, "ns", "v");
            cache.finish(t, &found("1", "a"));
        }
        let in_flight = cache.begin(CM, "ns", "w");
        cache.observe(CM, &Event::<PartialObjectMeta<ConfigMap>>::Init);
        assert!(cache.get(CM, "ns", "v").is_none());
        assert!(cache.get(SECRET, "ns", "v").is_some());
        cache.finish(in_flight, &found("2", "b"));
        assert!(cache.get(CM, "ns", "w").is_none());
        // Two reads of one object: the one begun last decides.
        let first = cache.begin(CM, "ns", "x");
        let second = cache.begin(CM, "ns", "x");
        cache.finish(first, &found("3", "first"));
        assert!(cache.get(CM, "ns", "x").is_none());
        cache.finish(second, &found("3", "second"));
        assert_eq!(value(cache.get(CM, "ns", "x")), Some(Some("second".into())));
    }

    #[test]
    fn a_new_generation_or_request_token_makes_the_next_read_bypass_the_cache() {
        let cache = ValuesCache::default();
        let mut hr: HelmRelease = serde_json::from_value(serde_json::json!({
            "apiVersion": "helm.flotilla.dev/v1",
            "kind": "HelmRelease",
            "metadata": {"name": "podinfo", "namespace": "ns", "generation": 1},
            "spec": {
                "interval": "10m",
                "chart": {"spec": {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}},
            },
        }))
        .expect("a HelmRelease");
        let key = ObjectKey {
            namespace: "ns".parse().expect("a valid namespace"),
            name: "podinfo".parse().expect("a valid name"),
        };
        assert!(!cache.may_use(&key, request_hash(&hr)), "never read");
        cache.read_done(&key, request_hash(&hr));
        assert!(cache.may_use(&key, request_hash(&hr)));
        hr.metadata.generation = Some(2);
        assert!(!cache.may_use(&key, request_hash(&hr)));
        cache.read_done(&key, request_hash(&hr));
        hr.metadata.annotations = Some(
            [(
                "reconcile.fluxcd.io/requestedAt".to_owned(),
                "now".to_owned(),
            )]
            .into(),
        );
        assert!(!cache.may_use(&key, request_hash(&hr)));
        cache.read_done(&key, request_hash(&hr));
        // A status write or another annotation changes nothing.
        hr.metadata.annotations = Some(
            [
                (
                    "reconcile.fluxcd.io/requestedAt".to_owned(),
                    "now".to_owned(),
                ),
                ("example.dev/note".to_owned(), "x".to_owned()),
            ]
            .into(),
        );
        hr.metadata.resource_version = Some("99".into());
        assert!(cache.may_use(&key, request_hash(&hr)));
        cache.forget(&key);
        assert!(!cache.may_use(&key, request_hash(&hr)));
    }
}
