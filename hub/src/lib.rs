//! The Flotilla hub: the IO shell in the management cluster.
//!
//! It will hold the HelmRelease, HelmRepository and ManagedCluster controllers, chart sources,
//! values and target resolution, the gRPC server agents dial into (mutual TLS), and the status
//! writer that turns agent reports into HelmRelease status and Events.
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

pub mod controller;
pub mod link;
pub mod push;
pub mod run;
pub mod sources;
pub mod status;
pub mod util;
pub mod values;
