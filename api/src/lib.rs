//! The hub's Kubernetes API: the custom resources users and agents work with, as Rust types,
//! and the CustomResourceDefinitions generated from them.
//!
//! - [`helm`]: `HelmRelease` (`helm.flotilla.dev/v1`), Flux's HelmRelease v2 plus
//!   `spec.clusterRef`; spec and status are flotilla-core's types.
//! - [`source`]: `HelmRepository`, `HelmChart`, `OCIRepository` (`source.flotilla.dev/v1`),
//!   Flux source v1 field names, with the resolved chart [`source::Artifact`] in the status.
//! - [`set`]: `HelmReleaseSet` (`helm.flotilla.dev/v1alpha1`), one HelmRelease per matching
//!   cluster, rolled out in waves; spec and status are flotilla-core's [`flotilla_core::set`].
//! - [`preview`]: `HelmReleasePreview` (`helm.flotilla.dev/v1alpha1`), a preview of one
//!   HelmRelease's next reconcile, answered by the hub in its status.
//! - [`fleet`]: `ManagedCluster` (`fleet.flotilla.dev/v1`), one per workload cluster.
//! - [`tenancy`]: `ManagedClusterBinding` (`fleet.flotilla.dev/v1`, cluster-scoped), which
//!   namespaces may deliver to which ManagedClusters.
//! - [`crd`]: the CRDs ([`crd::all`]) and their YAML, committed under `deploy/crds/`.
//!
//! Validation lives in the schemas (OpenAPI patterns, enums, lengths, CEL rules as Flux's
//! CRDs have them), so the API server refuses a bad object before any controller sees it.
//! This crate is pure: `kube` with its `derive` feature only (kube-core and the derive
//! macro), no client.

#![forbid(unsafe_code)]

pub mod crd;
pub mod fleet;
pub mod helm;
pub mod preview;
pub mod set;
pub mod source;
pub mod tenancy;

pub use fleet::{ManagedCluster, ManagedClusterSpec, ManagedClusterStatus};
pub use helm::{HelmRelease, HelmReleaseSpec};
pub use preview::{HelmReleasePreview, HelmReleasePreviewSpec, HelmReleasePreviewStatus};
pub use set::{HelmReleaseSet, HelmReleaseSetSpec};
pub use source::{
    HelmChart, HelmChartSpec, HelmChartStatus, HelmRepository, HelmRepositorySpec,
    HelmRepositoryStatus, OCIRepository, OCIRepositorySpec, OCIRepositoryStatus,
};
pub use tenancy::{ManagedClusterBinding, ManagedClusterBindingSpec};
