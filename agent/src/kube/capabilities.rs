//! What rendering learns from the cluster, as Helm's install and upgrade do:
//! `.Capabilities` from discovery ([`ClusterApi::capabilities`]) and the `lookup` template
//! function answered by the live cluster ([`ClusterLookup`]).
//!
//! `.Capabilities.KubeVersion` is the server's `/version` (`gitVersion`, `major`, `minor`
//! as reported). `.Capabilities.APIVersions` holds every served `group/version` and every
//! `group/version/Kind` of its resources (subresources included), as Helm's
//! `GetVersionSet` builds it from `ServerGroupsAndResources`.
//!
//! Discovery costs N+2 requests, so its result is cached per cluster (shared by every
//! [`ClusterApi`] clone and by the clients acting as a plan's ServiceAccount, see
//! [`ClusterApi::acting_as`]) and discovered again:
//!
//! - when it is older than the cluster's TTL ([`DEFAULT_CAPABILITIES_TTL`],
//!   [`ClusterApi::with_capabilities_ttl`]): APIs installed by someone else show up then;
//! - at once after this agent applied or deleted a `CustomResourceDefinition` or an
//!   `APIService` (the chart's `crds/` before rendering, as Helm's install does, so the
//!   templates of the same release see the new API versions);
//! - at once after an apply failed because a kind is not served (the templates may have been
//!   rendered for an API that is gone: the next render must not trust the cache).
//!
//! [`ClusterApi::invalidate_discovery`] forgets it (and the kind catalog) by hand.
//!
//! `lookup apiVersion kind namespace name` resolves the kind through discovery (a
//! subresource never matches), then gets the object (`name` set) or lists the kind (`name`
//! empty; across all namespaces when `namespace` is empty); a namespace given for a
//! cluster-scoped kind is ignored. NotFound is an empty map; any other failure aborts
//! rendering with its message. The client is the action's own, so a plan's
//! `spec.serviceAccountName` applies to lookups too.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use flotilla_chart::render::{Capabilities, HelmVersion, KubeVersion};
use kube::api::{DynamicObject, GetParams, ListParams};
use kube::core::{GroupVersionKind, Request};
use serde_json::{Map, Value};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::{ApiFailure, ClusterApi, error_chain};

/// How long discovered `.Capabilities` are reused by default.
pub const DEFAULT_CAPABILITIES_TTL: Duration = Duration::from_secs(300);

/// The cached `.Capabilities` of one cluster. Clones share the cache.
#[derive(Clone, Default)]
pub(crate) struct CapabilitiesCache {
    /// The last discovery and when it finished. The lock is held while discovering, so
    /// concurrent renders wait for one discovery instead of each running their own.
    slot: Arc<Mutex<Option<(Instant, Capabilities)>>>,
    /// How many discoveries ran (for tests and measurements).
    discoveries: Arc<AtomicU64>,
}

impl CapabilitiesCache {
    async fn clear(&self) {
        *self.slot.lock().await = None;
    }
}

/// Whether applying or deleting an object of this kind changes what the API server serves.
pub(crate) fn changes_discovery(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("apiextensions.k8s.io", "CustomResourceDefinition")
            | ("apiregistration.k8s.io", "APIService")
    )
}

impl ClusterApi {
    /// `.Capabilities` of this cluster: its version and every API version and kind it
    /// serves, from the cache when it is fresh (see the module docs), else discovered (N+2
    /// requests: `/version`, `/api`, `/apis` and one per group version).
    pub async fn capabilities(&self) -> Result<Capabilities, ApiFailure> {
        let mut slot = self.capabilities.slot.lock().await;
        if let Some((at, caps)) = &*slot
            && at.elapsed() < self.capabilities_ttl
        {
            return Ok(caps.clone());
        }
        *slot = None;
        let caps = self.discover_capabilities().await?;
        self.capabilities
            .discoveries
            .fetch_add(1, Ordering::Relaxed);
        *slot = Some((Instant::now(), caps.clone()));
        Ok(caps)
    }

    /// How many times this cluster's `.Capabilities` were discovered (not served from the
    /// cache) since the cache was made.
    pub fn capabilities_discoveries(&self) -> u64 {
        self.capabilities.discoveries.load(Ordering::Relaxed)
    }

    /// Forgets the cached `.Capabilities` and the kind catalog: the next render and the
    /// next kind resolution ask the API server again.
    pub async fn invalidate_discovery(&self) {
        self.capabilities.clear().await;
        self.catalog.invalidate().await;
    }

    /// Forgets the cached `.Capabilities` only (the kind catalog refreshes a group-version
    /// on a miss by itself).
    pub(crate) async fn invalidate_capabilities(&self) {
        self.capabilities.clear().await;
    }

    /// Discovery itself, uncached.
    async fn discover_capabilities(&self) -> Result<Capabilities, ApiFailure> {
        let client = &self.client;
        let info = client.apiserver_version().await.map_err(ApiFailure)?;
        let mut set = BTreeSet::new();
        let mut group_versions = Vec::new();
        for v in client
            .list_core_api_versions()
            .await
            .map_err(ApiFailure)?
            .versions
        {
            group_versions.push(v);
        }
        for g in client.list_api_groups().await.map_err(ApiFailure)?.groups {
            group_versions.extend(g.versions.into_iter().map(|v| v.group_version));
        }
        for gv in group_versions {
            let resources = if gv.contains('/') {
                client.list_api_group_resources(&gv).await
            } else {
                client.list_core_api_resources(&gv).await
            };
            let resources = match resources {
                Ok(r) => r,
                // An aggregated API that is unavailable is left out, as Helm does with
                // discovery's partial results.
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 503 => {
                    set.insert(gv);
                    continue;
                }
                Err(e) => return Err(ApiFailure(e)),
            };
            for r in resources.resources {
                set.insert(format!("{gv}/{}", r.kind));
            }
            set.insert(gv);
        }
        Ok(Capabilities {
            kube_version: KubeVersion {
                version: info.git_version,
                normalized: String::new(),
                major: info.major,
                minor: info.minor,
            },
            api_versions: set.into_iter().collect(),
            helm_version: HelmVersion::reference(),
        })
    }
}

/// `lookup` against a live cluster. Rendering is synchronous, so it must run off the
/// runtime's threads (`spawn_blocking`); each call blocks on the runtime `handle`.
#[derive(Clone)]
pub struct ClusterLookup {
    cluster: ClusterApi,
    handle: tokio::runtime::Handle,
}

impl std::fmt::Debug for ClusterLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterLookup").finish_non_exhaustive()
    }
}

impl ClusterLookup {
    /// Lookups through `cluster`, driven by the current runtime. Panics outside a runtime
    /// (a programming error: the agent always renders inside one).
    pub fn new(cluster: ClusterApi) -> ClusterLookup {
        ClusterLookup {
            cluster,
            handle: tokio::runtime::Handle::current(),
        }
    }

    /// The lookup itself, asynchronously.
    pub async fn lookup_async(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Map<String, Value>, String> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let resolved = self
            .cluster
            .catalog()
            .lookup(&gvk)
            .await
            .map_err(|e| format!("lookup {api_version} {kind}: {}", error_chain(&e)))?;
        let Some(resolved) = resolved else {
            return Err(format!(
                "lookup {api_version} {kind}: the server has no resource of kind {kind:?} in {api_version:?}"
            ));
        };
        let ns = (resolved.namespaced && !namespace.is_empty()).then_some(namespace);
        let url = <DynamicObject as kube::Resource>::url_path(&resolved.api_resource, ns);
        let request = Request::new(url);
        let http = if name.is_empty() {
            request.list(&ListParams::default())
        } else {
            request.get(name, &GetParams::default())
        }
        .map_err(|e| format!("lookup {api_version} {kind} {name:?}: {e}"))?;
        match self.cluster.client().request::<Value>(http).await {
            Ok(Value::Object(m)) => Ok(m),
            Ok(_) => Err(format!(
                "lookup {api_version} {kind} {name:?}: the server answered with something other than an object"
            )),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Map::new()),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl flotilla_chart::render::Lookup for ClusterLookup {
    fn lookup(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Map<String, Value>, String> {
        self.handle
            .block_on(self.lookup_async(api_version, kind, namespace, name))
    }
}
