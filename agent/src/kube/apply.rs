//! Applying a release's objects in Helm's install order, with Helm's ownership metadata and
//! checks and Flotilla's HelmRelease owner labels, server-side or client-side as Helm 4 does.
//!
//! Every object is written with one field manager ([`FIELD_MANAGER`]). Before an existing
//! object is written it must belong to the release (Helm's `managed-by` label and release
//! annotations) unless [`ApplyOptions::take_ownership`] is set, and it must not belong to
//! another HelmRelease (Flotilla's owner labels) in any case. Then, by
//! [`ApplyOptions::method`]:
//!
//! - [`ApplyMethod::ServerSide`] (Helm 4's default, release `apply_method: ssa`): a
//!   server-side apply, conflicts forced (as Flux does) and strict field validation;
//! - [`ApplyMethod::ClientSide`] (`--server-side=false`, release `apply_method: csa`): a
//!   missing object is created (POST; Helm 4 writes no `last-applied-configuration`
//!   annotation), an existing one patched with the three-way patch of [`super::patch`]
//!   (original = the object in the previous release's manifest, or the live object when the
//!   previous release did not have it, as Helm does), or, with
//!   [`ClientSideApply::force_replace`] (Helm's `ForceReplace`, Flux's `upgrade.force` and
//!   `rollback.force`), replaced (PUT of the new object at the live resource version). The
//!   writes are `Update` operations of the field manager.

// Errors name their object (and template) for people; they are built on the failure path
// only, so their size does not matter.
#![allow(clippy::result_large_err)]

use std::fmt;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use tokio::time::Instant;

use super::capabilities::changes_discovery;
use super::discovery::{DiscoveryError, no_match};
use super::manifest::{KindOrder, ManifestObject};
use super::wait::{WaitError, WaitOptions};
use super::{
    ApiFailure, ClusterApi, FIELD_MANAGER, MANAGED_BY_LABEL, ORIGIN_FIELD_MANAGER,
    OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL, ObjectRef, PREVIOUS_FIELD_MANAGERS,
    RELEASE_NAME_ANNOTATION, RELEASE_NAMESPACE_ANNOTATION, Resource,
};

/// The Helm release objects belong to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseRef {
    /// The release name.
    pub name: String,
    /// The release namespace (also the default namespace of namespaced objects).
    pub namespace: String,
}

/// How many objects of one kind are applied at once.
pub const APPLY_CONCURRENCY: usize = 8;

/// The HelmRelease that owns a release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelmReleaseRef {
    /// The HelmRelease's name.
    pub name: String,
    /// The HelmRelease's namespace.
    pub namespace: String,
}

impl fmt::Display for HelmReleaseRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// How to apply.
#[derive(Clone, Debug)]
pub struct ApplyOptions {
    /// The release the objects belong to.
    pub release: ReleaseRef,
    /// The HelmRelease owning the release; its labels go on every object.
    pub owner: Option<HelmReleaseRef>,
    /// Helm's `--take-ownership`: adopt existing objects that lack the release's metadata.
    pub take_ownership: bool,
    /// Whether Helm's release metadata (the `managed-by` label, the release annotations)
    /// goes on every object (default). Not for a chart's `crds/`: Helm and Flux create those
    /// as they are written, Flux adding only its origin labels ([`owner`](Self::owner)).
    pub release_metadata: bool,
    /// The field manager (default [`FIELD_MANAGER`]).
    pub field_manager: String,
    /// How long to wait for a CRD applied earlier in the same call to serve its kind.
    pub crd_timeout: Duration,
    /// Field managers of earlier client-side applies (`Update` operations) whose fields are
    /// handed to [`field_manager`](Self::field_manager) before applying, as Helm 4 does when
    /// a release moves to server-side apply, so fields dropped from the chart are pruned.
    /// Default: `helm` (the Helm CLI) and `helm-controller` (Flux).
    pub csa_managers: Vec<String>,
    /// Field managers of earlier server-side applies (`Apply` operations) whose fields are
    /// handed to [`field_manager`](Self::field_manager) the same way: releases applied by
    /// agents that used another manager ([`PREVIOUS_FIELD_MANAGERS`]) become the helm
    /// CLI's to change. Default: [`PREVIOUS_FIELD_MANAGERS`].
    pub previous_managers: Vec<String>,
    /// Server-side or client-side apply.
    pub method: ApplyMethod,
}

/// How objects are written (Helm 4's `ServerSideApply` and the release's `apply_method`).
#[derive(Clone, Debug, Default)]
pub enum ApplyMethod {
    /// Server-side apply (`ssa`).
    #[default]
    ServerSide,
    /// Client-side apply (`csa`).
    ClientSide(ClientSideApply),
}

impl ApplyMethod {
    /// Server-side apply when `server_side`, else client-side apply of `client_side`.
    pub fn of(server_side: bool, client_side: ClientSideApply) -> ApplyMethod {
        if server_side {
            ApplyMethod::ServerSide
        } else {
            ApplyMethod::ClientSide(client_side)
        }
    }

    /// What Helm 4 records in the release: `ssa` or `csa`.
    pub fn record_value(&self) -> &'static str {
        match self {
            ApplyMethod::ServerSide => "ssa",
            ApplyMethod::ClientSide(_) => "csa",
        }
    }
}

/// How a client-side apply patches existing objects.
#[derive(Clone, Debug, Default)]
pub struct ClientSideApply {
    /// The originals of the three-way patches: the objects of the release being replaced
    /// (upgrade, rollback), or the new objects themselves (install adopting existing
    /// objects, as Helm's install does). An object without an original is patched with the
    /// live object as its original, as Helm does.
    pub originals: Vec<ManifestObject>,
    /// Replace existing objects (PUT) rather than patch them (Helm's `ForceReplace`).
    pub force_replace: bool,
    /// A three-way JSON merge patch for custom resources too, rather than Helm's two-way
    /// one (Helm's install taking ownership of existing objects).
    pub three_way_for_custom_resources: bool,
}

impl ApplyOptions {
    /// Options for `release`, no owner, no take-over.
    pub fn new(release: ReleaseRef) -> ApplyOptions {
        ApplyOptions {
            release,
            owner: None,
            take_ownership: false,
            release_metadata: true,
            field_manager: FIELD_MANAGER.to_owned(),
            crd_timeout: Duration::from_secs(60),
            csa_managers: vec!["helm".to_owned(), "helm-controller".to_owned()],
            previous_managers: PREVIOUS_FIELD_MANAGERS
                .iter()
                .map(|m| (*m).to_owned())
                .collect(),
            method: ApplyMethod::ServerSide,
        }
    }

    /// The same options with an owning HelmRelease.
    pub fn owned_by(mut self, owner: HelmReleaseRef) -> ApplyOptions {
        self.owner = Some(owner);
        self
    }

    fn params(&self) -> PatchParams {
        PatchParams::apply(&self.field_manager)
            .force()
            .validation_strict()
    }
}

/// What an apply did.
#[derive(Clone, Debug, Default)]
pub struct ApplyReport {
    /// Objects that did not exist before.
    pub created: Vec<ObjectRef>,
    /// Objects that existed and were updated.
    pub updated: Vec<ObjectRef>,
    /// Every object applied, as the API server returned it, in apply order (to wait on).
    pub applied: Vec<Resource>,
}

/// Errors of an apply; each names its object.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The object's kind is not served.
    #[error(transparent)]
    Resolve(#[from] DiscoveryError),
    /// The object exists and does not carry the release's metadata (Helm's check).
    #[error(
        "{object}: exists and cannot be imported into the current release: invalid ownership metadata; {}",
        .problems.join("; ")
    )]
    NotOwned {
        /// The object.
        object: ObjectRef,
        /// Each mismatch, in Helm's words.
        problems: Vec<String>,
    },
    /// The object belongs to another HelmRelease.
    #[error("{object}: belongs to HelmRelease {other}, not to HelmRelease {ours}")]
    OwnedByOther {
        /// The object.
        object: ObjectRef,
        /// The HelmRelease named by its labels.
        other: String,
        /// The HelmRelease applying.
        ours: HelmReleaseRef,
    },
    /// Reading the live object failed.
    #[error("{object}{}: reading the live object", from(.source_name))]
    Get {
        /// The object.
        object: ObjectRef,
        /// Its template.
        source_name: Option<String>,
        /// The failure.
        #[source]
        source: ApiFailure,
    },
    /// The API server refused the object.
    #[error("{object}{}: apply failed", from(.source_name))]
    Apply {
        /// The object.
        object: ObjectRef,
        /// Its template.
        source_name: Option<String>,
        /// The API server's answer.
        #[source]
        source: ApiFailure,
    },
    /// Handing client-side managed fields to the apply manager failed.
    #[error("{object}: converting client-side managed fields to server-side apply")]
    UpgradeManagedFields {
        /// The object.
        object: ObjectRef,
        /// The API server's answer.
        #[source]
        source: ApiFailure,
    },
    /// Reading the cluster's OpenAPI document (the merge strategies of a client-side patch)
    /// failed.
    #[error("{object}: reading the cluster's OpenAPI v2 document for a strategic merge patch")]
    OpenApi {
        /// The object being patched.
        object: ObjectRef,
        /// The failure.
        #[source]
        source: ApiFailure,
    },
    /// A client-side apply patch could not be built from the object.
    #[error("{object}: building the client-side apply patch: {reason}")]
    Patch {
        /// The object.
        object: ObjectRef,
        /// Why.
        reason: String,
    },
    /// A CRD applied in the same call did not become established.
    #[error("{object}: waiting for its CustomResourceDefinition")]
    CrdNotEstablished {
        /// The custom resource.
        object: ObjectRef,
        /// What the wait saw.
        #[source]
        source: WaitError,
    },
}

fn from(source: &Option<String>) -> String {
    source
        .as_deref()
        .map(|s| format!(" (from {s})"))
        .unwrap_or_default()
}

impl ApplyError {
    /// The object the error is about.
    pub fn object(&self) -> &ObjectRef {
        match self {
            ApplyError::Resolve(DiscoveryError::NoMatch { object, .. })
            | ApplyError::Resolve(DiscoveryError::Api { object, .. })
            | ApplyError::NotOwned { object, .. }
            | ApplyError::OwnedByOther { object, .. }
            | ApplyError::Get { object, .. }
            | ApplyError::Apply { object, .. }
            | ApplyError::UpgradeManagedFields { object, .. }
            | ApplyError::OpenApi { object, .. }
            | ApplyError::Patch { object, .. }
            | ApplyError::CrdNotEstablished { object, .. } => object,
        }
    }

    /// A short, bounded name for the failure (a metric label).
    pub fn kind(&self) -> &'static str {
        match self {
            ApplyError::Resolve(DiscoveryError::NoMatch { .. }) => "unknown_kind",
            ApplyError::Resolve(DiscoveryError::Api { .. }) => "discovery",
            ApplyError::NotOwned { .. } => "not_owned",
            ApplyError::OwnedByOther { .. } => "owned_by_other",
            ApplyError::Get { .. } => "get",
            ApplyError::Apply { .. } => "apply",
            ApplyError::UpgradeManagedFields { .. } => "managed_fields",
            ApplyError::OpenApi { .. } => "openapi",
            ApplyError::Patch { .. } => "patch",
            ApplyError::CrdNotEstablished { .. } => "crd_not_established",
        }
    }

    /// Whether retrying later may succeed without a change of the input.
    pub fn is_transient(&self) -> bool {
        match self {
            ApplyError::Get { source, .. }
            | ApplyError::Apply { source, .. }
            | ApplyError::UpgradeManagedFields { source, .. }
            | ApplyError::OpenApi { source, .. } => source.is_transient(),
            ApplyError::Resolve(DiscoveryError::Api { source, .. }) => source.is_transient(),
            ApplyError::CrdNotEstablished { .. } => true,
            ApplyError::Resolve(DiscoveryError::NoMatch { .. })
            | ApplyError::NotOwned { .. }
            | ApplyError::Patch { .. }
            | ApplyError::OwnedByOther { .. } => false,
        }
    }
}

/// A failed apply: the error and what was applied before it.
#[derive(Debug)]
pub struct ApplyFailure {
    /// What was applied before the failure (Helm's `Result.Created` for `--cleanup-on-fail`).
    pub report: ApplyReport,
    /// The failure.
    pub error: ApplyError,
}

impl fmt::Display for ApplyFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for ApplyFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

/// The object with Helm's release metadata (unless [`ApplyOptions::release_metadata`] is off)
/// and Flotilla's owner labels added: what is sent to the API server (the stored manifest
/// carries the owner labels already, added by the executor's last post-render step, but not
/// Helm's metadata, as Helm stores it).
pub fn with_release_metadata(object: &DynamicObject, options: &ApplyOptions) -> DynamicObject {
    let mut object = with_owner_labels(object, options.owner.as_ref());
    if !options.release_metadata {
        return object;
    }
    let labels = object.labels_mut();
    labels.insert(MANAGED_BY_LABEL.to_owned(), "Helm".to_owned());
    let annotations = object.annotations_mut();
    annotations.insert(
        RELEASE_NAME_ANNOTATION.to_owned(),
        options.release.name.clone(),
    );
    annotations.insert(
        RELEASE_NAMESPACE_ANNOTATION.to_owned(),
        options.release.namespace.clone(),
    );
    object
}

/// Flotilla's owner labels on an object, added when an owner is given (hooks get these but
/// not Helm's release metadata).
pub(crate) fn with_owner_labels(
    object: &DynamicObject,
    owner: Option<&HelmReleaseRef>,
) -> DynamicObject {
    let mut object = object.clone();
    if let Some(owner) = owner {
        let labels = object.labels_mut();
        labels.insert(OWNER_NAME_LABEL.to_owned(), owner.name.clone());
        labels.insert(OWNER_NAMESPACE_LABEL.to_owned(), owner.namespace.clone());
    }
    object
}

/// Helm's ownership check of a live object: the list of mismatches, empty when it belongs to
/// the release.
pub fn ownership_problems(live: &DynamicObject, release: &ReleaseRef) -> Vec<String> {
    let mut problems = Vec::new();
    let mut check = |what: &str, value: Option<&String>, key: &str, want: &str| match value {
        None => problems.push(format!(
            "{what} validation error: missing key {key:?}: must be set to {want:?}"
        )),
        Some(v) if v != want => problems.push(format!(
            "{what} validation error: key {key:?} must equal {want:?}: current value is {v:?}"
        )),
        Some(_) => {}
    };
    check(
        "label",
        live.labels().get(MANAGED_BY_LABEL),
        MANAGED_BY_LABEL,
        "Helm",
    );
    check(
        "annotation",
        live.annotations().get(RELEASE_NAME_ANNOTATION),
        RELEASE_NAME_ANNOTATION,
        &release.name,
    );
    check(
        "annotation",
        live.annotations().get(RELEASE_NAMESPACE_ANNOTATION),
        RELEASE_NAMESPACE_ANNOTATION,
        &release.namespace,
    );
    problems
}

/// The HelmRelease a live object's owner labels name, when it is not `ours`.
pub fn other_owner(live: &DynamicObject, ours: &HelmReleaseRef) -> Option<String> {
    let name = live.labels().get(OWNER_NAME_LABEL);
    let namespace = live.labels().get(OWNER_NAMESPACE_LABEL);
    if name.is_none() && namespace.is_none() {
        return None;
    }
    if name == Some(&ours.name) && namespace == Some(&ours.namespace) {
        return None;
    }
    Some(format!(
        "{}/{}",
        namespace.map_or("?", String::as_str),
        name.map_or("?", String::as_str)
    ))
}

/// Whether [`ORIGIN_FIELD_MANAGER`] applied both owner labels of `object`.
fn owns_origin_labels(object: &DynamicObject) -> bool {
    object
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| {
            e.manager.as_deref() == Some(ORIGIN_FIELD_MANAGER)
                && e.operation.as_deref() == Some("Apply")
        })
        .any(|e| {
            let labels = e
                .fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:metadata"))
                .and_then(|m| m.get("f:labels"));
            [OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL]
                .iter()
                .all(|l| labels.is_some_and(|ls| ls.get(format!("f:{l}")).is_some()))
        })
}

fn check_existing(
    resource: &Resource,
    live: &DynamicObject,
    options: &ApplyOptions,
) -> Result<(), ApplyError> {
    if let Some(ours) = &options.owner
        && let Some(other) = other_owner(live, ours)
    {
        return Err(ApplyError::OwnedByOther {
            object: resource.object_ref(),
            other,
            ours: ours.clone(),
        });
    }
    if !options.take_ownership {
        let problems = ownership_problems(live, &options.release);
        if !problems.is_empty() {
            return Err(ApplyError::NotOwned {
                object: resource.object_ref(),
                problems,
            });
        }
    }
    Ok(())
}

async fn get_live(
    client: &Client,
    resource: &Resource,
) -> Result<Option<DynamicObject>, ApplyError> {
    resource
        .api(client)
        .get_opt(&resource.name())
        .await
        .map_err(|e| ApplyError::Get {
            object: resource.object_ref(),
            source_name: resource.source.clone(),
            source: ApiFailure(e),
        })
}

impl ClusterApi {
    /// Applies a manifest's objects in Helm's install order.
    ///
    /// First every object is resolved, so an unknown kind stops the apply before anything is
    /// written (kinds defined by a CRD of the same manifest are let through). Then runs of
    /// objects of one kind are applied concurrently (at most [`APPLY_CONCURRENCY`] at a time),
    /// one kind after the other, as Helm batches them: each object is resolved again (waiting,
    /// for a kind from a CRD of this manifest, until the CRD is established and served), its
    /// ownership checked, and applied by [`ApplyOptions::method`]. Stops after the first
    /// kind with an error, reporting what was applied.
    ///
    /// Applying a CRD or an APIService, and failing because a kind is not served, make the
    /// next render discover `.Capabilities` again ([`super::capabilities`]).
    pub async fn apply(
        &self,
        objects: &[ManifestObject],
        options: &ApplyOptions,
    ) -> Result<ApplyReport, ApplyFailure> {
        let result = self.apply_in_order(objects, options).await;
        let (report, unserved_kind) = match &result {
            Ok(report) => (report, false),
            Err(failure) => (
                &failure.report,
                matches!(
                    failure.error,
                    ApplyError::Resolve(DiscoveryError::NoMatch { .. })
                ),
            ),
        };
        if unserved_kind
            || report
                .applied
                .iter()
                .any(|r| changes_discovery(&r.api_resource.group, &r.api_resource.kind))
        {
            self.invalidate_capabilities().await;
        }
        result
    }

    async fn apply_in_order(
        &self,
        objects: &[ManifestObject],
        options: &ApplyOptions,
    ) -> Result<ApplyReport, ApplyFailure> {
        let mut ordered: Vec<&ManifestObject> = objects.iter().collect();
        KindOrder::Install.sort(&mut ordered, |o| o.gvk.kind.as_str());
        let mut report = ApplyReport::default();

        let defined_by_crds: Vec<(String, String)> = objects
            .iter()
            .filter(|o| o.gvk.kind == "CustomResourceDefinition")
            .filter_map(|o| {
                let spec = o.object.data.get("spec")?;
                Some((
                    spec.get("group")?.as_str()?.to_owned(),
                    spec.get("names")?.get("kind")?.as_str()?.to_owned(),
                ))
            })
            .collect();
        for obj in &ordered {
            match self.resolve(obj, &options.release.namespace).await {
                Err(DiscoveryError::NoMatch { .. })
                    if defined_by_crds
                        .iter()
                        .any(|(g, k)| *g == obj.gvk.group && *k == obj.gvk.kind) => {}
                Err(e) => {
                    return Err(ApplyFailure {
                        report,
                        error: e.into(),
                    });
                }
                Ok(_) => {}
            }
        }

        let mut crds: Vec<Resource> = Vec::new();
        for batch in ordered.chunk_by(|a, b| a.gvk.kind == b.gvk.kind) {
            let crds_so_far = &crds;
            // The futures are made first: a stream holding the mapping closure (generic
            // over its argument's lifetimes) keeps the whole reconcile future from being
            // provably `Send`.
            let applies: Vec<_> = batch
                .iter()
                .map(|obj| self.resolve_and_apply(obj, options, crds_so_far))
                .collect();
            let results: Vec<Result<(Resource, bool), ApplyError>> = futures::stream::iter(applies)
                .buffered(APPLY_CONCURRENCY)
                .collect()
                .await;
            let mut first_error = None;
            let mut new_crds = Vec::new();
            for result in results {
                match result {
                    Ok((applied, existed)) => {
                        let object = applied.object_ref();
                        if existed {
                            report.updated.push(object);
                        } else {
                            report.created.push(object);
                        }
                        if applied.kind() == "CustomResourceDefinition" {
                            new_crds.push(applied.clone());
                        }
                        report.applied.push(applied);
                    }
                    Err(error) => {
                        first_error.get_or_insert(error);
                    }
                }
            }
            if let Some(error) = first_error {
                return Err(ApplyFailure { report, error });
            }
            crds.extend(new_crds);
        }
        Ok(report)
    }

    /// Resolves `obj`; when its kind is not served but a CRD applied in this call defines
    /// it, waits for that CRD and for discovery to serve the kind.
    /// Resolves and applies one object.
    async fn resolve_and_apply(
        &self,
        obj: &ManifestObject,
        options: &ApplyOptions,
        crds: &[Resource],
    ) -> Result<(Resource, bool), ApplyError> {
        let resource = self.resolve_applying(obj, options, crds).await?;
        self.apply_one(&resource, options).await
    }

    async fn resolve_applying(
        &self,
        obj: &ManifestObject,
        options: &ApplyOptions,
        crds: &[Resource],
    ) -> Result<Resource, ApplyError> {
        match self.resolve(obj, &options.release.namespace).await {
            Err(DiscoveryError::NoMatch { .. }) => {}
            other => return Ok(other?),
        }
        let defining: Vec<Resource> = crds
            .iter()
            .filter(|crd| {
                let spec = crd.object.data.get("spec");
                spec.and_then(|s| s.get("group")).and_then(|g| g.as_str()) == Some(&obj.gvk.group)
                    && spec
                        .and_then(|s| s.get("names"))
                        .and_then(|n| n.get("kind"))
                        .and_then(|k| k.as_str())
                        == Some(&obj.gvk.kind)
            })
            .cloned()
            .collect();
        if defining.is_empty() {
            return Err(no_match(obj).into());
        }
        let deadline = Instant::now() + options.crd_timeout;
        self.wait_ready(&defining, &WaitOptions::new(options.crd_timeout))
            .await
            .map_err(|source| ApplyError::CrdNotEstablished {
                object: obj.object_ref(),
                source,
            })?;
        // Established CRDs show up in discovery shortly after; ask again until they do.
        loop {
            match self.resolve(obj, &options.release.namespace).await {
                Err(DiscoveryError::NoMatch { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                other => return Ok(other?),
            }
        }
    }

    /// Applies one resolved object (ownership checks included). Returns the object as the API
    /// server returned it and whether it existed before.
    pub async fn apply_one(
        &self,
        resource: &Resource,
        options: &ApplyOptions,
    ) -> Result<(Resource, bool), ApplyError> {
        let desired = with_release_metadata(&resource.object, options);
        let api = resource.api(&self.client);
        let name = resource.name();
        if name.is_empty() {
            // Only a generateName: server-side apply needs a name, so create it.
            let params = match &options.method {
                ApplyMethod::ServerSide => PostParams::default(),
                ApplyMethod::ClientSide(_) => post_params(options),
            };
            let created = api
                .create(&params, &desired)
                .await
                .map_err(|e| apply_error(resource, e))?;
            return Ok((with_object(resource, created), false));
        }
        let live = match get_live(&self.client, resource).await {
            Err(ApplyError::Get { source, .. }) if source.is_not_found() => {
                if let Some(gone) = self.kind_gone(resource).await {
                    return Err(gone);
                }
                get_live(&self.client, resource).await?
            }
            other => other?,
        };
        if let Some(live) = &live {
            check_existing(resource, live, options)?;
        }
        if let ApplyMethod::ClientSide(csa) = &options.method {
            return self
                .client_side_apply(resource, &desired, live, csa, options)
                .await;
        }
        if let Some(live) = &live {
            self.upgrade_client_side_fields(resource, live, options)
                .await?;
        }
        let applied = match api
            .patch(&name, &options.params(), &Patch::Apply(&desired))
            .await
        {
            Ok(applied) => applied,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                // The kind may be gone since it was cached (a CRD deleted): ask discovery again.
                return Err(match self.kind_gone(resource).await {
                    Some(gone) => gone,
                    None => apply_error(resource, kube::Error::Api(status)),
                });
            }
            Err(e) => return Err(apply_error(resource, e)),
        };
        let applied = match &options.owner {
            Some(owner) if !owns_origin_labels(&applied) => {
                self.apply_origin_labels(resource, owner).await?
            }
            _ => applied,
        };
        tracing::debug!(object = %resource.object_ref(), created = live.is_none(), "object applied");
        Ok((with_object(resource, applied), live.is_some()))
    }

    /// Helm 4's client-side apply of one object (see the module documentation): POST when
    /// it does not exist, else PUT (`force_replace`) or the three-way patch (nothing sent
    /// when the patch is empty).
    async fn client_side_apply(
        &self,
        resource: &Resource,
        desired: &DynamicObject,
        live: Option<DynamicObject>,
        csa: &ClientSideApply,
        options: &ApplyOptions,
    ) -> Result<(Resource, bool), ApplyError> {
        let api = resource.api(&self.client);
        let name = resource.name();
        let Some(live) = live else {
            let created = match api.create(&post_params(options), desired).await {
                Ok(created) => created,
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    return Err(match self.kind_gone(resource).await {
                        Some(gone) => gone,
                        None => apply_error(resource, kube::Error::Api(status)),
                    });
                }
                Err(e) => return Err(apply_error(resource, e)),
            };
            tracing::debug!(object = %resource.object_ref(), "object created (client-side apply)");
            return Ok((with_object(resource, created), false));
        };
        if csa.force_replace {
            let mut replacement = desired.clone();
            replacement.metadata.resource_version = live.metadata.resource_version.clone();
            let replaced = api
                .replace(&name, &post_params(options), &replacement)
                .await
                .map_err(|e| apply_error(resource, e))?;
            tracing::debug!(object = %resource.object_ref(), "object replaced (client-side apply)");
            return Ok((with_object(resource, replaced), true));
        }
        let json = |o: &DynamicObject| {
            serde_json::to_value(o).map_err(|e| ApplyError::Patch {
                object: resource.object_ref(),
                reason: e.to_string(),
            })
        };
        let modified = json(desired)?;
        let current = json(&live)?;
        let original = match original_of(resource, &csa.originals, &options.release.namespace) {
            Some(o) => json(o)?,
            // Helm: "resource exists on cluster but not in original release, using cluster
            // state as baseline".
            None => current.clone(),
        };
        let group = resource.api_resource.group.as_str();
        let (patch, strategic) = if is_built_in_group(group) {
            let schema = self
                .patch_schema()
                .await
                .map_err(|source| ApplyError::OpenApi {
                    object: resource.object_ref(),
                    source,
                })?;
            let cursor = schema
                .kind(
                    group,
                    &resource.api_resource.version,
                    &resource.api_resource.kind,
                )
                .unwrap_or_default();
            (
                super::patch::three_way(&original, &modified, &current, cursor),
                true,
            )
        } else if csa.three_way_for_custom_resources {
            (
                super::patch::three_way(
                    &original,
                    &modified,
                    &current,
                    super::patch::Cursor::none(),
                ),
                false,
            )
        } else {
            (super::patch::two_way_merge(&original, &modified), false)
        };
        if patch.as_object().is_some_and(serde_json::Map::is_empty) {
            tracing::debug!(object = %resource.object_ref(), "no changes (client-side apply)");
            return Ok((with_object(resource, live), true));
        }
        let params = PatchParams {
            field_manager: Some(options.field_manager.clone()),
            ..PatchParams::default()
        };
        let patch = if strategic {
            Patch::Strategic(patch)
        } else {
            Patch::Merge(patch)
        };
        let patched = api
            .patch(&name, &params, &patch)
            .await
            .map_err(|e| apply_error(resource, e))?;
        tracing::debug!(object = %resource.object_ref(), "object patched (client-side apply)");
        Ok((with_object(resource, patched), true))
    }

    /// Applies the owner labels alone with [`ORIGIN_FIELD_MANAGER`], so they stay when the
    /// helm CLI's manager applies a manifest without them (a plain `helm upgrade`), as
    /// Flux's do (owned by `helm-controller`, which the helm CLI is not).
    async fn apply_origin_labels(
        &self,
        resource: &Resource,
        owner: &HelmReleaseRef,
    ) -> Result<DynamicObject, ApplyError> {
        let api = resource.api(&self.client);
        let mut body = DynamicObject::new(&resource.name(), &resource.api_resource);
        body.metadata.namespace = None;
        let labels = body.labels_mut();
        labels.insert(OWNER_NAME_LABEL.to_owned(), owner.name.clone());
        labels.insert(OWNER_NAMESPACE_LABEL.to_owned(), owner.namespace.clone());
        api.patch(
            &resource.name(),
            &PatchParams::apply(ORIGIN_FIELD_MANAGER)
                .force()
                .validation_strict(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(|e| apply_error(resource, e))
    }

    /// Hands the fields of earlier client-side managers to the apply manager (see
    /// [`ApplyOptions::csa_managers`]) with a merge patch conditional on the resource version.
    async fn upgrade_client_side_fields(
        &self,
        resource: &Resource,
        live: &DynamicObject,
        options: &ApplyOptions,
    ) -> Result<(), ApplyError> {
        let mut entries = live.metadata.managed_fields.clone().unwrap_or_default();
        let mut changed = false;
        let earlier = options
            .csa_managers
            .iter()
            .map(|m| (m, "Update"))
            .chain(options.previous_managers.iter().map(|m| (m, "Apply")));
        for (manager, operation) in earlier {
            if manager == &options.field_manager && operation == "Apply" {
                continue;
            }
            if let Some(upgraded) =
                fold_managed_fields(&entries, manager, operation, &options.field_manager)
            {
                entries = upgraded;
                changed = true;
            }
        }
        if !changed {
            return Ok(());
        }
        let patch = serde_json::json!({
            "metadata": {
                "managedFields": entries,
                "resourceVersion": live.metadata.resource_version,
            }
        });
        resource
            .api(&self.client)
            .patch(
                &resource.name(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| ApplyError::UpgradeManagedFields {
                object: resource.object_ref(),
                source: ApiFailure(e),
            })?;
        Ok(())
    }

    /// After a 404: the unknown-kind error when fresh discovery no longer serves the kind (a
    /// CRD deleted since it was cached), else `None` (a missing namespace, say).
    async fn kind_gone(&self, resource: &Resource) -> Option<ApplyError> {
        let gvk = kube::api::GroupVersionKind::gvk(
            &resource.api_resource.group,
            &resource.api_resource.version,
            &resource.api_resource.kind,
        );
        let fresh = self.catalog.refresh(&gvk).await.ok()?;
        if fresh.iter().any(|r| r.api_resource.kind == gvk.kind) {
            return None;
        }
        let obj = ManifestObject {
            source: resource.source.clone(),
            gvk,
            object: resource.object.clone(),
        };
        Some(no_match(&obj).into())
    }

    /// A server-side apply dry run of one resolved object, with the release metadata added:
    /// the object as it would be after the apply (for drift detection). No ownership checks.
    pub async fn dry_run_apply(
        &self,
        resource: &Resource,
        options: &ApplyOptions,
    ) -> Result<DynamicObject, ApplyError> {
        let desired = with_release_metadata(&resource.object, options);
        resource
            .api(&self.client)
            .patch(
                &resource.name(),
                &options.params().dry_run(),
                &Patch::Apply(&desired),
            )
            .await
            .map_err(|e| apply_error(resource, e))
    }

    /// The live object of a resource, `None` when it does not exist.
    pub async fn get(&self, resource: &Resource) -> Result<Option<DynamicObject>, ApplyError> {
        get_live(&self.client, resource).await
    }
}

/// client-go's `csaupgrade`: the managed fields with the `Update` entries of `csa_manager`
/// (no subresource) folded into the `Apply` entry of `ssa_manager` (the newest `csa_manager`
/// entry becomes it when there is none); `None` when there is nothing to convert.
pub fn upgrade_managed_fields(
    entries: &[ManagedFieldsEntry],
    csa_manager: &str,
    ssa_manager: &str,
) -> Option<Vec<ManagedFieldsEntry>> {
    fold_managed_fields(entries, csa_manager, "Update", ssa_manager)
}

/// [`upgrade_managed_fields`] for the entries of `manager` with `operation` (`Update` for a
/// client-side manager, `Apply` for an earlier server-side one).
pub fn fold_managed_fields(
    entries: &[ManagedFieldsEntry],
    manager: &str,
    operation: &str,
    ssa_manager: &str,
) -> Option<Vec<ManagedFieldsEntry>> {
    let is = |e: &ManagedFieldsEntry, manager: &str, operation: &str| {
        e.manager.as_deref() == Some(manager)
            && e.operation.as_deref() == Some(operation)
            && e.subresource.as_deref().is_none_or(str::is_empty)
    };
    if !entries.iter().any(|e| is(e, manager, operation)) {
        return None;
    }
    let mut entries = entries.to_vec();
    let target = match entries.iter().position(|e| is(e, ssa_manager, "Apply")) {
        Some(i) => i,
        None => {
            let i = entries.iter().position(|e| is(e, manager, operation))?;
            entries[i].manager = Some(ssa_manager.to_owned());
            entries[i].operation = Some("Apply".to_owned());
            i
        }
    };
    let api_version = entries[target].api_version.clone();
    if let Some(j) = entries
        .iter()
        .position(|e| is(e, manager, operation) && e.api_version == api_version)
    {
        let extra = entries[j].fields_v1.clone().map(|f| f.0);
        let into = entries[target]
            .fields_v1
            .get_or_insert_with(|| FieldsV1(serde_json::json!({})));
        if let Some(extra) = extra {
            union_fields(&mut into.0, extra);
        }
        entries[target].fields_type = Some("FieldsV1".to_owned());
    }
    entries.retain(|e| !is(e, manager, operation));
    Some(entries)
}

/// The union of two `FieldsV1` tries.
fn union_fields(into: &mut serde_json::Value, from: serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(existing) => union_fields(existing, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (into, from) => {
            if into.is_null() {
                *into = from;
            }
        }
    }
}

/// Create and replace parameters of a client-side apply: the field manager.
fn post_params(options: &ApplyOptions) -> PostParams {
    PostParams {
        field_manager: Some(options.field_manager.clone()),
        ..PostParams::default()
    }
}

/// The API groups of the kinds client-go's scheme knows (with the CRD API, which Helm adds):
/// Helm 4 patches these with a strategic merge patch, everything else with a JSON merge
/// patch.
pub const BUILT_IN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiserverinternal.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "extensions",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

fn is_built_in_group(group: &str) -> bool {
    BUILT_IN_GROUPS.contains(&group)
}

/// The object of the previous release's manifest that `resource` replaces: same group,
/// kind, name and (defaulted) namespace.
fn original_of<'a>(
    resource: &Resource,
    originals: &'a [ManifestObject],
    release_namespace: &str,
) -> Option<&'a DynamicObject> {
    let name = resource.name();
    originals
        .iter()
        .find(|o| {
            o.gvk.group == resource.api_resource.group
                && o.gvk.kind == resource.api_resource.kind
                && o.object.metadata.name.as_deref() == Some(name.as_str())
                && (!resource.namespaced
                    || o.object
                        .metadata
                        .namespace
                        .as_deref()
                        .filter(|ns| !ns.is_empty())
                        .unwrap_or(release_namespace)
                        == resource.namespace().unwrap_or(release_namespace))
        })
        .map(|o| &o.object)
}

fn apply_error(resource: &Resource, e: kube::Error) -> ApplyError {
    ApplyError::Apply {
        object: resource.object_ref(),
        source_name: resource.source.clone(),
        source: ApiFailure(e),
    }
}

fn with_object(resource: &Resource, mut object: DynamicObject) -> Resource {
    if object.types.is_none() {
        object.types = resource.object.types.clone();
    }
    Resource {
        source: resource.source.clone(),
        api_resource: resource.api_resource.clone(),
        namespaced: resource.namespaced,
        object,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(manager: &str, operation: &str, fields: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: Some("v1".to_owned()),
            fields_type: Some("FieldsV1".to_owned()),
            fields_v1: Some(FieldsV1(fields)),
            manager: Some(manager.to_owned()),
            operation: Some(operation.to_owned()),
            ..ManagedFieldsEntry::default()
        }
    }

    #[test]
    fn client_side_fields_become_the_apply_managers_and_the_update_entry_goes() {
        let entries = vec![
            entry(
                "flotilla",
                "Apply",
                serde_json::json!({"f:data": {"f:a": {}}}),
            ),
            entry(
                "helm",
                "Update",
                serde_json::json!({"f:data": {"f:old": {}}}),
            ),
            entry(
                "kubectl-edit",
                "Update",
                serde_json::json!({"f:data": {"f:x": {}}}),
            ),
        ];
        let upgraded = upgrade_managed_fields(&entries, "helm", "flotilla").unwrap();
        assert_eq!(upgraded.len(), 2);
        assert_eq!(
            upgraded[0].fields_v1.as_ref().unwrap().0,
            serde_json::json!({"f:data": {"f:a": {}, "f:old": {}}})
        );
        assert_eq!(upgraded[1].manager.as_deref(), Some("kubectl-edit"));
    }

    #[test]
    fn without_an_apply_entry_the_client_side_entry_is_renamed() {
        let entries = vec![entry("helm", "Update", serde_json::json!({"f:data": {}}))];
        let upgraded = upgrade_managed_fields(&entries, "helm", "flotilla").unwrap();
        assert_eq!(upgraded.len(), 1);
        assert_eq!(upgraded[0].manager.as_deref(), Some("flotilla"));
        assert_eq!(upgraded[0].operation.as_deref(), Some("Apply"));
    }

    #[test]
    fn fields_an_earlier_server_side_manager_applied_become_the_new_managers() {
        let entries = vec![
            entry("helm", "Apply", serde_json::json!({"f:data": {"f:a": {}}})),
            entry(
                "flotilla",
                "Apply",
                serde_json::json!({"f:data": {"f:a": {}, "f:b": {}}}),
            ),
            entry(
                "kubectl",
                "Update",
                serde_json::json!({"f:data": {"f:x": {}}}),
            ),
        ];
        let folded = fold_managed_fields(&entries, "flotilla", "Apply", "helm").unwrap();
        let managers: Vec<_> = folded.iter().filter_map(|e| e.manager.as_deref()).collect();
        assert_eq!(managers, ["helm", "kubectl"]);
        assert_eq!(
            folded[0].fields_v1.as_ref().unwrap().0,
            serde_json::json!({"f:data": {"f:a": {}, "f:b": {}}})
        );
        // Objects only the earlier manager applied are handed over whole.
        let only = vec![entry(
            "flotilla",
            "Apply",
            serde_json::json!({"f:data": {}}),
        )];
        let folded = fold_managed_fields(&only, "flotilla", "Apply", "helm").unwrap();
        assert_eq!(folded[0].manager.as_deref(), Some("helm"));
        assert_eq!(folded[0].operation.as_deref(), Some("Apply"));
    }

    #[test]
    fn nothing_is_converted_without_client_side_entries() {
        let entries = vec![entry("flotilla", "Apply", serde_json::json!({}))];
        assert!(upgrade_managed_fields(&entries, "helm", "flotilla").is_none());
    }

    #[test]
    fn helm_ownership_mismatches_are_listed_in_helms_words() {
        let live: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "c",
                "labels": {"app.kubernetes.io/managed-by": "Helm"},
                "annotations": {"meta.helm.sh/release-name": "other", "meta.helm.sh/release-namespace": "default"},
            },
        }))
        .unwrap();
        let release = ReleaseRef {
            name: "web".to_owned(),
            namespace: "default".to_owned(),
        };
        assert_eq!(
            ownership_problems(&live, &release),
            [
                "annotation validation error: key \"meta.helm.sh/release-name\" must equal \"web\": current value is \"other\""
            ]
        );
    }
}
