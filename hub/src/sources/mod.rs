//! Chart sources: where a HelmRelease's chart comes from.
//!
//! - [`helm_repository`]: the HelmRepository controller (HTTP repositories): one index fetch
//!   per interval, held in memory for every HelmChart of the repository.
//! - [`helm_chart`]: the HelmChart controller: resolves a chart from the held index (or the
//!   tags of an OCI repository), applies `valuesFiles`, and puts the archive in the hub's
//!   chart store.
//! - [`http`]: fetching a Helm repository's index and chart archives over HTTP(S), with the
//!   repository's auth, TLS, timeout and size limits.
//! - [`index`]: a Helm repository's `index.yaml` and chart version resolution (pure).
//! - [`oci`]: Helm charts in OCI registries (tags, manifests, chart layers; auth and TLS),
//!   tag and version selection, and helm-controller's digest-in-the-chart-version rule.
//! - [`oci_repository`]: the `OCIRepository` reconciler, and the OCI half of a HelmChart's
//!   fetch ([`oci_repository::fetch_helm_repository_chart`]).
//! - [`url`]: the index's URL and chart URLs resolved against the repository URL, as Go's
//!   `net/url` resolves them (pure).
//! - [`values_files`]: a HelmChart's `valuesFiles` merged into the chart's `values.yaml`, and
//!   the chart packaged anew (pure).

pub mod helm_chart;
pub mod helm_repository;
pub mod http;
pub mod index;
pub mod oci;
pub mod oci_repository;
pub mod url;
pub mod values_files;
