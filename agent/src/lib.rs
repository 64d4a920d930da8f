//! The Flotilla agent: the IO shell that executes release plans in one workload cluster.
//!
//! Start at [`runtime`]: the long-lived agent that holds many plans (persisted in the
//! cluster), schedules their reconciles and is driven by commands; plan-file mode and the
//! hub are its clients ([`cmd`] holds the binary's commands). Decisions come from
//! `flotilla-core`; rendering comes from `flotilla-chart`.
//!
//! - [`reconcile`] carries out core's reconcile driver for one plan; [`reconcile::state`] is
//!   the plan store; [`storage`] is Helm's own release storage.
//! - [`kube`]: the Kubernetes executor primitives (manifest to objects, API discovery,
//!   server-side apply with Helm's ownership rules, deletion, kstatus readiness and
//!   watch-driven waits, hook execution, ServiceAccount impersonation).
//! - [`drift`] detects and corrects drift as Flux does, [`events`] posts the Kubernetes
//!   Events.
//! - [`charts`] gives the chart of a plan (local charts, or a verified on-disk cache of
//!   fetched archives).
//! - [`schema_refs`] fetches the remote documents a chart's `values.schema.json` `$ref`s
//!   (the agent validates values as it renders).
//! - [`telemetry`] holds the metrics, the probe server and the log subscriber; [`memory`]
//!   returns freed heap pages to the kernel when the agent goes idle.

pub mod cel;
pub mod charts;
pub mod cmd;
pub mod drift;
pub mod events;
pub mod kube;
pub mod memory;
pub mod preview;
pub mod reconcile;
pub mod runtime;
pub mod schema_refs;
pub mod session;
pub mod storage;
pub mod telemetry;
