//! Domain types shared by the hub and the agent, free of IO.
//!
//! Start with [`release`]: the release state machine's pure decision function
//! [`release::next_action`] and its companion [`release::apply_outcome`], table-tested
//! without a cluster. The data they work on:
//!
//! - [`ids`]: identities parsed once (`ReleaseName` with Flux's 53-character rule,
//!   `ClusterId`, `PlanRevision`, `ChartDigest`, `Namespace`, `ObjectName`).
//! - [`spec`]: the HelmRelease v2 API as serde types, with field-naming validation.
//! - [`status`]: the HelmRelease status: conditions, history snapshots, counters.
//! - [`plan`]: the `ReleasePlan` the hub sends and the `Observed` state the agent reads.
//! - [`digest`]: config, post-renderer and JSON digests as Flux computes them;
//!   [`observation`]: the release observation behind snapshot digests.
//! - [`duration`], [`meta`]: Go durations, timestamps, object metadata, conditions.

#![forbid(unsafe_code)]

pub mod digest;
pub mod duration;
mod goyaml;
pub mod ids;
pub mod meta;
pub mod observation;
pub mod plan;
pub mod release;
pub mod spec;
pub mod status;
