//! Domain types shared by the hub and the agent, free of IO.
//!
//! This crate will hold the identities (`ClusterId`, `ReleaseName`, `PlanRevision`,
//! `ChartDigest`), the HelmRelease v2 spec as plain Rust types, release plans and status
//! snapshots, and the release state machine's pure decision function
//! (`release::next_action(&plan, &observed)`), table-tested without a cluster.

