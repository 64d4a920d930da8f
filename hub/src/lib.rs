//! The Flotilla hub: the IO shell in the management cluster.
//!
//! It will hold the HelmRelease, HelmRepository and ManagedCluster controllers, chart sources,
//! values and target resolution, the gRPC server agents dial into (mutual TLS), and the status
//! writer that turns agent reports into HelmRelease status and Events.
