//! Targets: where a HelmRelease's plan goes, and the seam to the agents that serve them.
//!
//! - [`link`]: the seam between the controller and the agents ([`link::TargetId`],
//!   [`link::AgentLink`], [`link::Links`]: the link registry the controller asks).
//! - [`capi`]: Cluster API `Cluster` targets (their kubeconfig Secret, once the control
//!   plane is initialized).
//! - [`workload_identity`]: `spec.kubeConfig.configMapRef` targets (provider `generic`: a
//!   ServiceAccount token for the target).
//!
//! The controller's resolution of a HelmRelease to its target is
//! `controller::target`; the in-process agents serving push targets are in
//! [`crate::push`]. The modules are re-exported at the crate root (`crate::link`,
//! `crate::capi`, `crate::workload_identity`).

pub mod capi;
pub mod link;
pub mod workload_identity;
