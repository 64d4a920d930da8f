//! The Flotilla hub: the IO shell in the management cluster.
//!
//! It will hold the HelmRelease, HelmRepository and ManagedCluster controllers, chart sources,
//! values and target resolution, the gRPC server agents dial into (mutual TLS), and the status
//! writer that turns agent reports into HelmRelease status and Events.
//!
//! Where to start (the pure parts, table-tested without a cluster):
//! - [`values::compose`]: a HelmRelease's values from `valuesFrom` and `spec.values`,
//!   exactly as Flux composes them.
//! - [`sources::index`]: a Helm repository's `index.yaml` and the chart version a
//!   HelmRelease's `chart.spec.version` picks from it, as Flux's source-controller picks it.

pub mod sources;
pub mod values;
