//! The seam between the HelmRelease controller and the agents that carry out its plans.
//!
//! Every target of a HelmRelease is served by an agent runtime (`flotilla_agent::runtime`):
//! an in-process one for push-mode targets (the hub's own cluster, a kubeConfig Secret, a
//! Cluster API cluster) or a remote one behind a gRPC session (`spec.clusterRef`). The
//! controller does not know which: it resolves a [`TargetId`], asks the [`Links`] registry for
//! that target's [`AgentLink`], sends [`Command`]s through it, and reads every target's
//! [`Report`]s from one stream of [`TargetReport`]s, which the status writer merges into
//! HelmRelease status.
//!
//! Contract of a link (both kinds keep it):
//! - [`AgentLink::send`] never blocks and never loses the latest command of a HelmRelease:
//!   a link holds the desired state of its target (the newest plan per HelmRelease, minus
//!   deletions) and delivers it when it can. A remote link whose agent is offline keeps it
//!   and sends the difference when the agent reconnects (the session's resync); a newer plan
//!   for a HelmRelease replaces an unsent older one.
//! - [`AgentLink::connected`] says whether an agent is there now, so the controller can
//!   report `Ready=False` with "no agent connected" instead of waiting silently.
//! - Reports arrive at least once; receivers drop stale ones by `(plan_revision, seq)`.
//!
//! Plugging in remote agents (the session server):
//! - implement [`Links`]: `link(&TargetId::Cluster(id))` returns that cluster's
//!   [`AgentLink`] once its ManagedCluster is accepted, connected or not (a `None` makes the
//!   HelmRelease `Ready=False` "no agent connected for cluster X" and nothing is sent; a link
//!   that is not [`connected`](AgentLink::connected) takes the plan and the condition says
//!   the same until it connects). It may also answer `link(&TargetId::KubeConfig { .. })`
//!   with the connected agent of the cluster that kubeconfig reaches (matched by the
//!   `kube-system` namespace UID): `push::HubLinks` prefers a connected remote link to a
//!   push agent for such a target;
//! - forward each agent's reports into the [`ReportSink`] from
//!   `run::HubConfig::report_sink`, tagged with the link's target;
//! - put the registry in `run::HubConfig::remote` before `run::Hub::start`.
//!
//! The HelmRelease controller then sends `Command::Upsert` (and `Command::Delete` from the
//! finalizer, waiting for the agent's `Report::Deleted`) through the link, and looks again
//! every `--requeue-dependency` while the link is not connected.

use std::fmt;
use std::sync::Arc;

use flotilla_core::agent::{Command, HeldPlan, Report};
use flotilla_core::ids::ClusterId;

/// Which agent serves a HelmRelease.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TargetId {
    /// The hub's own cluster, served by an in-process agent (no `clusterRef`, no
    /// `kubeConfig`).
    Local,
    /// A cluster reached with the kubeconfig in a Secret (`spec.kubeConfig.secretRef`, or a
    /// Cluster API `<cluster>-kubeconfig` Secret), served in push mode unless an agent of that
    /// cluster is connected.
    KubeConfig {
        /// Namespace of the Secret (the HelmRelease's).
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// The key holding the kubeconfig (`spec.kubeConfig.secretRef.key`); `None` reads
        /// `value`, else `value.yaml`.
        key: Option<String>,
    },
    /// A cluster reached with a workload identity token (`spec.kubeConfig.configMapRef`,
    /// provider `generic`; see `workload_identity`), served in push mode.
    KubeConfigMap {
        /// Namespace of the ConfigMap (the HelmRelease's).
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
    },
    /// A registered cluster (`spec.clusterRef`), served by its connected agent.
    Cluster(ClusterId),
}

impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetId::Local => f.write_str("the hub's cluster"),
            TargetId::KubeConfig {
                namespace,
                name,
                key,
            } => {
                write!(f, "kubeConfig Secret {namespace}/{name}")?;
                match key {
                    Some(key) => write!(f, " (key {key})"),
                    None => Ok(()),
                }
            }
            TargetId::KubeConfigMap { namespace, name } => {
                write!(f, "kubeConfig ConfigMap {namespace}/{name}")
            }
            TargetId::Cluster(id) => write!(f, "cluster {id}"),
        }
    }
}

/// A report from the agent serving `target`.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetReport {
    /// The target the report came from.
    pub target: TargetId,
    /// The report.
    pub report: Report,
}

/// The sending end every link forwards its agent's reports into: a bounded, coalescing
/// queue ([`crate::reports`]).
pub use crate::reports::{ReportReceiver, ReportSink, report_channel};

/// The agent serving one target, as the controller sees it.
pub trait AgentLink: Send + Sync + fmt::Debug {
    /// Hands a command to the target's agent (see the module docs for the delivery rules).
    fn send(&self, command: Command) -> Result<(), LinkClosed>;

    /// Whether an agent is attached to this link right now.
    fn connected(&self) -> bool;

    /// The plans the agent last said it holds (its Hello, or the in-process runtime's view).
    fn held(&self) -> Vec<HeldPlan>;
}

/// A link that was dropped (its target is gone or the hub is stopping).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the agent link of {target} is closed")]
pub struct LinkClosed {
    /// The target of the closed link.
    pub target: TargetId,
}

/// Where the controller finds the link of a target.
pub trait Links: Send + Sync + fmt::Debug {
    /// The link of `target`, if the hub has one (a remote cluster's link exists once its
    /// ManagedCluster is accepted, connected or not).
    fn link(&self, target: &TargetId) -> Option<Arc<dyn AgentLink>>;
}
