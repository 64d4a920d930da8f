//! The Flotilla agent: the IO shell that executes release plans in one workload cluster.
//!
//! It will hold the plan store, the executor (server-side apply, hooks, waits, tests, drift),
//! the Helm-compatible storage driver and the session to the hub. Decisions come from
//! `flotilla-core`; rendering comes from `flotilla-chart`.
//!
//! What exists today is [`kube`]: the Kubernetes executor primitives (manifest to objects,
//! API discovery, server-side apply with Helm's ownership rules, deletion, kstatus readiness
//! and watch-driven waits, hook execution, ServiceAccount impersonation). Start at
//! [`kube::ClusterApi`]. [`reconcile`] runs a plan through core's state machine,
//! [`drift`] detects and corrects drift as Flux does, [`events`] posts the Kubernetes Events,
//! [`memory`] returns freed heap pages to the kernel when the agent goes idle, [`charts`]
//! gives the chart of a plan (local charts, or a verified on-disk cache of fetched archives).

pub mod charts;
pub mod drift;
pub mod events;
pub mod kube;
pub mod memory;
pub mod reconcile;
pub mod storage;
