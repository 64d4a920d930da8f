//! The Flotilla hub: the IO shell in the management cluster.
//!
//! It holds the HelmRelease, HelmRepository and HelmChart controllers, chart sources, values
//! and target resolution, the in-process (push-mode) agents, and the status writer that turns
//! agent reports into HelmRelease status and Events; the gRPC server agents dial into
//! (mutual TLS) plugs in through [`link::Links`].
//!
//! The process ([`run::Hub::start`], the `flotilla-hub` binary):
//!
//! ```text
//! HelmRepository ─► sources::helm_repository (index per interval, in memory)
//! HelmChart      ─► sources::helm_chart (resolve, download, chart store by sha256)
//! HelmReleaseSet ─► sets (select, render, rollout::decide) ─► child HelmReleases
//! HelmRelease    ─► controller (dependsOn, source, values, target, plan revision)
//!                     └─► push::HubLinks ─► AgentLink::send(Command)   (push agent | remote)
//! agents' Reports ─► link::ReportSink ─► status::StatusBook ─► .status + Events
//! ```
//!
//! - [`link`]: the seam between the controller and the agents (read it first).
//! - [`controller`]: the HelmRelease controller, in Flux's reconcile order.
//! - [`sets`]: the HelmReleaseSet controller: one child HelmRelease per targeted cluster,
//!   rolled out in waves by `flotilla_core::rollout::decide`.
//! - [`push`]: in-process agents for the hub's cluster and kubeconfig Secrets, and
//!   [`push::HubLinks`], which also asks a remote registry.
//! - [`kubeconfig_policy`]: what a kubeconfig Secret may ask of the hub (no commands, no
//!   files of the hub's host, no proxy, no unverified TLS unless an opt-in flag says so).
//! - [`capi`]: Cluster API `Cluster` targets (their kubeconfig Secret, once the control
//!   plane is initialized).
//! - [`onboarding`]: Cluster API import: each selected `Cluster` becomes a ManagedCluster
//!   and gets an agent installed through its kubeconfig, then is reached over the session.
//! - [`status`]: the one writer of HelmRelease status.
//! - [`run`]: wiring and shutdown order.
//! - [`leader`]: Lease-based leader election of the hub replicas.
//! - [`tenancy`]: which namespaces may deliver to which ManagedClusters (bindings),
//!   `--no-cross-namespace-refs`, `--default-service-account`, the local target.
//!
//! Where to start (the pure parts, table-tested without a cluster; the IO edge reads the
//! objects and the index and hands them in):
//! - [`values::compose`]: a HelmRelease's values from `valuesFrom` and `spec.values`,
//!   exactly as Flux's helm-controller composes them (with its `targetPath` quirk).
//!   [`values::referenced_objects`] lists the ConfigMaps and Secrets to read first.
//! - [`sources::index::Index`]: a Helm repository's `index.yaml`, and
//!   [`Index::resolve`](sources::index::Index::resolve), the chart version a
//!   `chart.spec.version` constraint picks, as Flux's source-controller picks it; then the
//!   archive's URL and digest.
//! - [`sources::url`]: the index URL and chart URLs, resolved as Go's `net/url` does.
//! - [`sources::oci`]: charts in OCI registries: [`OciClient`](sources::oci::OciClient)
//!   (tags, manifests, chart layers by digest; basic, dockerconfigjson and token auth; TLS),
//!   tag and version selection, and
//!   [`chart_version_with_digest`](sources::oci::chart_version_with_digest), the
//!   `+<digest12>` helm-controller appends to the version of a chart from an OCIRepository.
//! - [`sources::oci_repository`]: the `OCIRepository` reconciler
//!   ([`run`](sources::oci_repository::run)) and
//!   [`fetch_helm_repository_chart`](sources::oci_repository::fetch_helm_repository_chart)
//!   for a HelmChart of an OCI HelmRepository.
//! - [`session`]: the agents' gRPC server (bootstrap tokens, the hub CA, mutual TLS,
//!   ManagedCluster admission, resync) and [`session::RemoteLinks`], the
//!   [`link::Links`] of `TargetId::Cluster` targets.

pub mod controller;
pub mod kubeconfig_policy;
pub mod leader;
pub mod onboarding;
pub mod previews;
pub mod push;
pub mod rate;
pub mod reports;
pub mod run;
pub mod session;
pub mod sets;
pub mod sources;
pub mod status;
pub mod supervisor;
pub mod targets;
pub mod telemetry;
pub mod tenancy;
pub mod util;
pub mod values;

pub use targets::{capi, link, workload_identity};
