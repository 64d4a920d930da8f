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
//! - [`agent`]: the agent runtime's commands, reports and held plans; [`preview`]: what a
//!   preview asks and answers ([`diff`]: the per-object diff it is built from).
//! - [`duration`], [`meta`]: Go durations, timestamps, object metadata, conditions.
//! - [`set`]: the HelmReleaseSet API (fleet rollout): spec, status, cluster selection,
//!   child names, set revisions; [`rollout`]: its pure decision function
//!   [`rollout::decide`]; [`selector`]: Kubernetes label selectors.

//!
//! ```
//! use flotilla_core::ids::{ChartDigest, PlanRevision};
//! use flotilla_core::plan::{ChartArtifact, Observed, ReleasePlan};
//! use flotilla_core::release::{self, Action};
//! use flotilla_core::spec::HelmRelease;
//!
//! let hr = HelmRelease::from_json_str(r#"{
//!     "metadata": {"name": "podinfo", "namespace": "default", "generation": 1},
//!     "spec": {"interval": "10m", "values": {"replicaCount": 2},
//!              "chartRef": {"kind": "OCIRepository", "name": "podinfo"}}
//! }"#)?;
//! let chart = ChartArtifact {
//!     name: "podinfo".into(),
//!     version: "6.5.3".into(),
//!     app_version: None,
//!     digest: ChartDigest::of_bytes(b"podinfo-6.5.3.tgz"),
//!     oci_digest: None,
//! };
//! let values = hr.spec.values.clone().unwrap_or_default();
//! let plan = ReleasePlan::from_helm_release(&hr, PlanRevision::FIRST, chart, values)?;
//! assert_eq!(plan.release.name.as_str(), "podinfo");
//!
//! // Nothing in Helm storage yet: install.
//! assert_eq!(release::next_action(&plan, &Observed::default()), Action::Install);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

pub mod agent;
pub mod api_status;
pub mod diff;
pub mod digest;
pub mod duration;
pub mod ids;
pub mod meta;
pub mod observation;
pub mod plan;
pub mod preview;
pub mod release;
pub mod rollout;
pub mod selector;
pub mod set;
pub mod spec;
pub mod status;
