//! What rendering learns from the cluster, as Helm's install and upgrade do:
//! `.Capabilities` from discovery ([`ClusterApi::capabilities`]) and the `lookup` template
//! function answered by the live cluster ([`ClusterLookup`]).
//!
//! `.Capabilities.KubeVersion` is the server's `/version` (`gitVersion`, `major`, `minor`
//! as reported). `.Capabilities.APIVersions` holds every served `group/version` and every
//! `group/version/Kind` of its resources (subresources included), as Helm's
//! `GetVersionSet` builds it from `ServerGroupsAndResources`.
//!
//! `lookup apiVersion kind namespace name` resolves the kind through discovery (a
//! subresource never matches), then gets the object (`name` set) or lists the kind (`name`
//! empty; across all namespaces when `namespace` is empty); a namespace given for a
//! cluster-scoped kind is ignored. NotFound is an empty map; any other failure aborts
//! rendering with its message. The client is the action's own, so a plan's
//! `spec.serviceAccountName` applies to lookups too.

use std::collections::BTreeSet;

use flotilla_chart::render::{Capabilities, HelmVersion, KubeVersion};
use kube::api::{DynamicObject, GetParams, ListParams};
use kube::core::{GroupVersionKind, Request};
use serde_json::{Map, Value};

use super::{ApiFailure, ClusterApi, error_chain};

impl ClusterApi {
    /// `.Capabilities` of this cluster: its version and every API version and kind it
    /// serves (N+2 discovery requests: `/version`, `/api`, `/apis` and one per group
    /// version).
    pub async fn capabilities(&self) -> Result<Capabilities, ApiFailure> {
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
