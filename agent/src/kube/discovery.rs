//! GVK to resource and scope, through API discovery, cached per group-version.
//!
//! A lookup that misses the cache asks the API server for that group-version again, so kinds
//! added by a CRD applied moments ago become resolvable as soon as the API server serves them.
//!
//! This is why `spec.persistentClient` changes nothing here. In Flux (helm-controller
//! v1.6.3, `internal/kube/client.go`) it only decides whether the discovery client and
//! REST mapper of one reconciliation are kept between the steps of its Helm actions (true,
//! the default) or made anew for each; kept ones may miss a kind a template CRD added
//! moments ago (a post-install hook of that kind then fails, the trade-off its API doc
//! names). This cache is kept, as `true` keeps it, and never answers "no such kind" from
//! memory, as `false` never does: both settings behave as `false` would where they differ,
//! without its cost, so the agent reads the field and does not act on it.

use std::collections::HashMap;
use std::sync::Arc;

use kube::Client;
use kube::api::{ApiResource, GroupVersionKind};
use kube::core::GroupVersion;
use kube::discovery::Scope;
use tokio::sync::Mutex;

use super::ApiFailure;
use super::manifest::ManifestObject;
use super::{ClusterApi, ObjectRef, Resource};

/// Errors resolving an object's kind.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The API server does not serve this kind (Helm's wording).
    #[error(
        "{object}: resource mapping not found for name: {name:?} namespace: {namespace:?} from {source_name:?}: no matches for kind {kind:?} in version {api_version:?}; ensure CRDs are installed first"
    )]
    NoMatch {
        /// The object.
        object: ObjectRef,
        /// Its name.
        name: String,
        /// Its namespace as written (`""` when not set).
        namespace: String,
        /// The template it came from (`""` when unknown).
        source_name: String,
        /// The kind.
        kind: String,
        /// The apiVersion.
        api_version: String,
    },
    /// Discovery itself failed.
    #[error("{object}: discovering API resources for {api_version:?}")]
    Api {
        /// The object being resolved.
        object: ObjectRef,
        /// The group-version asked for.
        api_version: String,
        /// The request's failure.
        #[source]
        source: ApiFailure,
    },
}

/// A resolved kind: its resource and whether it is namespaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedKind {
    /// Group, version, kind and plural.
    pub api_resource: ApiResource,
    /// Whether objects of the kind live in namespaces.
    pub namespaced: bool,
}

type GroupVersionResources = Arc<Vec<ResolvedKind>>;

/// The discovery cache of one cluster. Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct ApiCatalog {
    client: Client,
    cache: Arc<Mutex<HashMap<String, GroupVersionResources>>>,
}

impl std::fmt::Debug for ApiCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiCatalog").finish_non_exhaustive()
    }
}

impl ApiCatalog {
    /// An empty cache for `client`'s cluster.
    pub fn new(client: Client) -> ApiCatalog {
        ApiCatalog {
            client,
            cache: Arc::default(),
        }
    }

    /// The same cache, asking the API server with `client`.
    pub fn with_client(&self, client: Client) -> ApiCatalog {
        ApiCatalog {
            client,
            cache: self.cache.clone(),
        }
    }

    /// Resolves a GVK: from the cache, else by asking the API server for its group-version.
    /// `Ok(None)` when the API server does not serve the kind.
    pub async fn lookup(&self, gvk: &GroupVersionKind) -> Result<Option<ResolvedKind>, ApiFailure> {
        let api_version = gvk.api_version();
        let cached = self.cache.lock().await.get(&api_version).cloned();
        if let Some(found) = cached.as_deref().and_then(|r| find(r, &gvk.kind)) {
            return Ok(Some(found));
        }
        let fresh = self.refresh(gvk).await?;
        Ok(find(&fresh, &gvk.kind))
    }

    /// Asks the API server for the resources of `gvk`'s group-version and caches them.
    pub async fn refresh(
        &self,
        gvk: &GroupVersionKind,
    ) -> Result<GroupVersionResources, ApiFailure> {
        let gv = GroupVersion::gv(&gvk.group, &gvk.version);
        let resources = match kube::discovery::pinned_group(&self.client, &gv).await {
            Ok(group) => group
                .versioned_resources(&gvk.version)
                .into_iter()
                .map(|(api_resource, caps)| ResolvedKind {
                    api_resource,
                    namespaced: caps.scope == Scope::Namespaced,
                })
                .collect(),
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(e) => return Err(ApiFailure(e)),
        };
        let resources = Arc::new(resources);
        self.cache
            .lock()
            .await
            .insert(gvk.api_version(), resources.clone());
        Ok(resources)
    }

    /// Forgets everything (after CRDs were removed, say).
    pub async fn invalidate(&self) {
        self.cache.lock().await.clear();
    }
}

fn find(resources: &[ResolvedKind], kind: &str) -> Option<ResolvedKind> {
    resources
        .iter()
        .find(|r| r.api_resource.kind == kind)
        .cloned()
}

impl ClusterApi {
    /// Resolves a manifest object against the cluster's API: finds its resource and scope,
    /// sets the namespace of a namespaced object without one to `default_namespace`, and
    /// clears it on cluster-scoped objects (as `kubectl` and Helm do).
    pub async fn resolve(
        &self,
        obj: &ManifestObject,
        default_namespace: &str,
    ) -> Result<Resource, DiscoveryError> {
        let resolved = self
            .catalog
            .lookup(&obj.gvk)
            .await
            .map_err(|e| DiscoveryError::Api {
                object: obj.object_ref(),
                api_version: obj.gvk.api_version(),
                source: e,
            })?;
        let Some(resolved) = resolved else {
            return Err(no_match(obj));
        };
        let mut object = obj.object.clone();
        if resolved.namespaced {
            if object
                .metadata
                .namespace
                .as_deref()
                .is_none_or(str::is_empty)
            {
                object.metadata.namespace = Some(default_namespace.to_owned());
            }
        } else {
            object.metadata.namespace = None;
        }
        Ok(Resource {
            source: obj.source.clone(),
            api_resource: resolved.api_resource,
            namespaced: resolved.namespaced,
            object,
        })
    }

    /// Resolves every object, stopping at the first error.
    pub async fn resolve_all(
        &self,
        objects: &[ManifestObject],
        default_namespace: &str,
    ) -> Result<Vec<Resource>, DiscoveryError> {
        let mut out = Vec::with_capacity(objects.len());
        for obj in objects {
            out.push(self.resolve(obj, default_namespace).await?);
        }
        Ok(out)
    }
}

impl ClusterApi {
    /// Waits until discovery serves every served version of the established CRDs given
    /// (the API server publishes a new CRD's API shortly after it is established), then
    /// forgets the cached `.Capabilities`, so the next render sees the new API versions.
    /// Helm's install does not wait for this, so its render may miss a CRD it has just
    /// installed; this makes the agent's render see it.
    pub async fn wait_discovered(
        &self,
        crds: &[Resource],
        timeout: std::time::Duration,
    ) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        for crd in crds {
            let spec = crd.object.data.get("spec");
            let text = |v: Option<&serde_json::Value>| {
                v.and_then(|v| v.as_str()).unwrap_or_default().to_owned()
            };
            let group = text(spec.and_then(|s| s.get("group")));
            let kind = text(
                spec.and_then(|s| s.get("names"))
                    .and_then(|n| n.get("kind")),
            );
            let versions = spec
                .and_then(|s| s.get("versions"))
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
                .filter(|v| v.get("served").and_then(|s| s.as_bool()) == Some(true))
                .map(|v| text(v.get("name")));
            for version in versions {
                let gvk = GroupVersionKind::gvk(&group, &version, &kind);
                loop {
                    match self.catalog.lookup(&gvk).await {
                        Ok(Some(_)) => break,
                        Ok(None) if tokio::time::Instant::now() < deadline => {
                            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                        }
                        Ok(None) => {
                            return Err(format!(
                                "{}: established, but {}/{version} {kind} is not served after {timeout:?}",
                                crd.object_ref(),
                                group
                            ));
                        }
                        Err(e) => {
                            return Err(format!(
                                "{}: {}",
                                crd.object_ref(),
                                super::error_chain(&e)
                            ));
                        }
                    }
                }
            }
        }
        self.invalidate_capabilities().await;
        Ok(())
    }
}

pub(crate) fn no_match(obj: &ManifestObject) -> DiscoveryError {
    DiscoveryError::NoMatch {
        object: obj.object_ref(),
        name: obj.object.metadata.name.clone().unwrap_or_default(),
        namespace: obj.object.metadata.namespace.clone().unwrap_or_default(),
        source_name: obj.source_name().to_owned(),
        kind: obj.gvk.kind.clone(),
        api_version: obj.gvk.api_version(),
    }
}
