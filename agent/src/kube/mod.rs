//! Kubernetes executor primitives: what the agent does to a workload cluster.
//!
//! The input is already-rendered manifest text (Helm's release manifest: multi-document YAML
//! with `# Source:` comments). The flow a release action follows:
//!
//! 1. [`manifest::parse_manifest`] splits the text as Helm does and turns each document into a
//!    [`ManifestObject`] (a `DynamicObject` with its GVK and source template).
//! 2. [`ClusterApi::resolve`] maps each GVK to its resource and scope through API discovery
//!    ([`discovery::ApiCatalog`], cached and refreshed on a miss) and defaults namespaces,
//!    giving [`Resource`]s.
//! 3. [`ClusterApi::apply`] applies them in Helm's install order with Helm's and
//!    Flotilla's ownership metadata, after the ownership checks, server-side or client-side
//!    with Helm's three-way patches ([`apply`], [`patch`]).
//! 4. [`ClusterApi::wait_ready`] waits for them with kstatus rules ([`status`], [`wait`]),
//!    driven by watches.
//! 5. [`ClusterApi::run_hook`] runs one hook ([`hook`]); [`ClusterApi::delete`] removes
//!    objects in Helm's uninstall order ([`delete`]).
//!
//! Rendering asks the cluster too: [`ClusterApi::capabilities`] (cached, with its refresh
//! rules) and [`ClusterLookup`] ([`capabilities`]).
//!
//! Every error names the object it is about (`Deployment default/web: ...`); errors expose
//! `kind()` (a bounded label) and `is_transient()`; [`error_chain`] prints an error with its
//! sources. [`impersonate`] builds clients acting as a ServiceAccount
//! (`spec.serviceAccountName`).
//!
//! [`crate::drift`] builds drift detection on [`ClusterApi::dry_run_apply`].
//!
//! Not here (yet): hook ordering by event and weight and persisting `last_run` (the caller
//! drives [`ClusterApi::run_hook`]), hook output logs (`helm.sh/hook-output-log-policy`),
//! Helm 4's retry of applies that hit ResourceQuota conflicts.

pub mod apply;
pub mod capabilities;
pub mod delete;
pub mod discovery;
pub mod hook;
pub mod impersonate;
pub mod manifest;
pub mod patch;
pub mod status;
pub mod wait;

mod object;

pub use apply::{ApplyOptions, ApplyReport, HelmReleaseRef, ReleaseRef};
pub use capabilities::{ClusterLookup, DEFAULT_CAPABILITIES_TTL};
pub use delete::{DeleteOptions, DeleteReport, Propagation};
pub use discovery::ApiCatalog;
pub use hook::{HookDeletePolicy, HookOptions, HookPhase, HookRun};
pub use manifest::{KindOrder, ManifestObject};
pub use object::{ApiFailure, ObjectRef, Resource, api_error, api_status, error_chain};
pub use status::{Status, StatusResult};
pub use wait::WaitOptions;

use kube::Client;

/// The field manager release objects are applied with (install, upgrade, rollback, hooks,
/// drift detection and correction): Helm's own. The helm CLI names its manager after its
/// binary (`helm`) and applies without forcing conflicts, so a release the agent made is
/// upgraded and rolled back by a plain `helm upgrade` or `helm rollback` as one helm made
/// (with another manager, every field the agent set conflicts). Flux does the same with
/// `kube.ManagedFieldsManager`, set to `helm-controller`; the agent forces conflicts, as
/// Flux does for server-side applies.
pub const FIELD_MANAGER: &str = "helm";
/// The field manager that also applies the owner labels ([`OWNER_NAME_LABEL`],
/// [`OWNER_NAMESPACE_LABEL`]) of release objects, once per object: a plain `helm upgrade`
/// (manager [`FIELD_MANAGER`], a chart rendered without them) would otherwise remove them,
/// where Flux's stay (its manager, `helm-controller`, is not the helm CLI's).
pub const ORIGIN_FIELD_MANAGER: &str = "flotilla-origin";
/// The field manager of the agent's own objects (its controller-state Secrets).
pub const AGENT_FIELD_MANAGER: &str = "flotilla";
/// Field managers earlier agents applied release objects with; their fields are handed to
/// [`FIELD_MANAGER`] on the next apply ([`ApplyOptions::previous_managers`]).
pub const PREVIOUS_FIELD_MANAGERS: &[&str] = &["flotilla"];
/// Helm's label marking objects it manages.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Helm's annotation naming the owning release.
pub const RELEASE_NAME_ANNOTATION: &str = "meta.helm.sh/release-name";
/// Helm's annotation naming the owning release's namespace.
pub const RELEASE_NAMESPACE_ANNOTATION: &str = "meta.helm.sh/release-namespace";
/// Flotilla's label naming the owning HelmRelease.
pub const OWNER_NAME_LABEL: &str = "helm.flotilla.dev/name";
/// Flotilla's label naming the owning HelmRelease's namespace.
pub const OWNER_NAMESPACE_LABEL: &str = "helm.flotilla.dev/namespace";
/// Helm's resource policy annotation (`keep`).
pub const RESOURCE_POLICY_ANNOTATION: &str = "helm.sh/resource-policy";
/// Helm's hook delete policy annotation.
pub const HOOK_DELETE_POLICY_ANNOTATION: &str = "helm.sh/hook-delete-policy";

/// One workload cluster as the executor sees it: a client and its discovery caches (the
/// kind catalog and `.Capabilities`).
///
/// Cheap to clone; clones share the discovery caches.
#[derive(Clone)]
pub struct ClusterApi {
    client: Client,
    catalog: ApiCatalog,
    capabilities: capabilities::CapabilitiesCache,
    capabilities_ttl: std::time::Duration,
    /// The merge strategies of built-in kinds (the OpenAPI v2 document), read once.
    patch_schema: std::sync::Arc<tokio::sync::OnceCell<std::sync::Arc<patch::PatchSchema>>>,
}

impl std::fmt::Debug for ClusterApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterApi").finish_non_exhaustive()
    }
}

impl ClusterApi {
    /// Wraps a client (for example one from [`impersonate::service_account_client`]).
    pub fn new(client: Client) -> ClusterApi {
        ClusterApi {
            catalog: ApiCatalog::new(client.clone()),
            client,
            capabilities: Default::default(),
            capabilities_ttl: capabilities::DEFAULT_CAPABILITIES_TTL,
            patch_schema: Default::default(),
        }
    }

    /// The same cluster reached with another client (a plan's ServiceAccount, say), sharing
    /// the discovery caches: what a cluster serves does not depend on who asks.
    pub fn acting_as(&self, client: Client) -> ClusterApi {
        ClusterApi {
            catalog: self.catalog.with_client(client.clone()),
            client,
            capabilities: self.capabilities.clone(),
            capabilities_ttl: self.capabilities_ttl,
            patch_schema: self.patch_schema.clone(),
        }
    }

    /// Reuses discovered `.Capabilities` for `ttl` (see [`capabilities`]); zero discovers
    /// them for every render, as Helm does for every action.
    pub fn with_capabilities_ttl(mut self, ttl: std::time::Duration) -> ClusterApi {
        self.capabilities_ttl = ttl;
        self
    }

    /// The client requests go through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The discovery cache.
    pub fn catalog(&self) -> &ApiCatalog {
        &self.catalog
    }

    /// The merge strategies of the built-in kinds, from the cluster's OpenAPI v2 document
    /// (read on first use, then kept: built-in kinds change only with the API server).
    pub async fn patch_schema(&self) -> Result<std::sync::Arc<patch::PatchSchema>, ApiFailure> {
        self.patch_schema
            .get_or_try_init(|| async {
                let request = http::Request::get("/openapi/v2")
                    .header(http::header::ACCEPT, "application/json")
                    .body(Vec::new())
                    .expect("a fixed GET request is valid");
                let document: serde_json::Value =
                    self.client.request(request).await.map_err(ApiFailure)?;
                Ok(std::sync::Arc::new(patch::PatchSchema::from_openapi_v2(
                    document,
                )))
            })
            .await
            .cloned()
    }
}
