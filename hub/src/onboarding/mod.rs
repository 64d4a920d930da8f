//! Cluster API driven onboarding: every selected Cluster API `Cluster` becomes a
//! ManagedCluster, gets a Flotilla agent installed through its kubeconfig once its control
//! plane is up, and from then on is reached only through that agent's outbound session.
//!
//! # Configuration: hub flags
//!
//! An operator of Cluster API already says which Clusters a controller takes with a
//! namespace and a label selector (`kubectl get clusters -A -l env=prod`), so import is
//! hub configuration, not an object:
//!
//! | flag | meaning |
//! |---|---|
//! | `--capi-import` | turn import on (needs `--grpc-addr`: imported clusters join over the session) |
//! | `--capi-import-selector SEL` | label selector on `Cluster` objects, kubectl syntax (`env=prod,tier in (a,b)`); default: every Cluster |
//! | `--capi-import-namespace-selector SEL` | label selector on the Clusters' Namespaces; default: every namespace |
//! | `--capi-hub-url URL` | the session URL the agents dial (`https://hub.example:9443`) |
//! | `--capi-agent-image IMAGE` | the agent image (`registry/flotilla-agent:tag`) |
//! | `--capi-agent-namespace NS` | where the agent goes in each workload cluster (default `flotilla-system`) |
//! | `--capi-agent-values FILE` | values of the agent chart merged under the hub's (e.g. `rbac.workload`) |
//! | `--capi-agent-join-timeout D` | how long an installed agent has to join (default `10m`) |
//! | `--capi-agent-upgrade-parallelism N` | agent upgrades in flight at once (default `1`) |
//! | `--capi-agent-upgrade-timeout D` | how long an upgraded agent has to reconnect before the rollout stops (default `10m`) |
//! | `--capi-resync-interval D` | how often every imported Cluster is looked at again (default `30s`) |
//!
//! The selectors are sent to the API server (the Clusters are watched with the label
//! selector; the Namespaces are read with theirs), so a hub never holds the Clusters it does
//! not import. A hub without `--capi-import`, or without the Cluster API CRDs, runs
//! unchanged: the controller looks for `clusters.cluster.x-k8s.io` (`v1beta2`) every minute
//! and starts watching once it is served.
//!
//! # The ManagedCluster of a Cluster
//!
//! - **Name**: `<namespace>.<name>` of the Cluster ([`managed_cluster_name`]). ManagedClusters
//!   are cluster-scoped and Clusters are not; a namespace holds no dot, so the name is
//!   unambiguous, and it is a valid DNS subdomain (a ManagedCluster name) for every Cluster.
//! - **Labels**: the Cluster's labels, except those of Flotilla's own prefixes
//!   (`fleet.flotilla.dev/`, `capi.fleet.flotilla.dev/`: a Cluster's author cannot forge
//!   them), plus `capi.fleet.flotilla.dev/namespace`, `capi.fleet.flotilla.dev/cluster`,
//!   `capi.fleet.flotilla.dev/cluster-class` (the topology's ClusterClass, when there is
//!   one), `capi.fleet.flotilla.dev/imported: "true"` and, while the Cluster is paused,
//!   `capi.fleet.flotilla.dev/paused: "true"`. They are server-side applied with their own
//!   field manager ([`IMPORT_FIELD_MANAGER`]): a label removed from the Cluster goes from
//!   the ManagedCluster, a label an administrator adds to the ManagedCluster stays.
//! - **Link**: annotations `capi.fleet.flotilla.dev/cluster-ref` (`<namespace>/<name>`) and
//!   `capi.fleet.flotilla.dev/cluster-uid`. Kubernetes' garbage collector cannot do the
//!   deletion (a cluster-scoped object may not have a namespaced owner), so the controller
//!   does: a Cluster being deleted, gone, or recreated with another UID has its
//!   ManagedCluster deleted (an imported ManagedCluster whose Cluster is not seen is looked
//!   up at every resync, so a deletion while the hub was down is caught too). A Cluster
//!   that stops matching the selectors keeps its ManagedCluster, no longer updated. A
//!   ManagedCluster of that name not made by import is never taken over.
//! - **Acceptance**: created accepted (selecting the Cluster is the operator's acceptance);
//!   afterwards `spec.accepted` is the administrator's again.
//!
//! # Bootstrap
//!
//! When the Cluster reports `status.initialization.controlPlaneInitialized` (or any older
//! field [`crate::capi::control_plane_initialized`] reads) and its `<name>-kubeconfig`
//! Secret holds a kubeconfig the hub's [`crate::kubeconfig_policy`] accepts, the hub makes a
//! bootstrap token bound to the ManagedCluster's name, single-use, expiring with the join
//! timeout, and server-side applies into the workload cluster (field manager
//! `flotilla-hub`) the agent chart `deploy/charts/flotilla-agent` rendered by the
//! project's renderer ([`bootstrap`]): the namespace, ServiceAccount, RBAC, the token
//! Secret and the Deployment, with `--ca-hash` pinning the hub's CA. The ManagedCluster's
//! `AgentBootstrap` condition says the step ([`decide::Step`]); the attempts are recorded
//! in its annotations. An agent that has not joined by the deadline is bootstrapped once
//! more (a new token, a restarted Deployment); after that the condition reports
//! `AgentNeverConnected` and nothing more is tried until the ManagedCluster's
//! `capi.fleet.flotilla.dev/bootstrap-attempts` annotation is removed.
//!
//! Once the ManagedCluster's `Joined` condition is true (the agent registered and holds a
//! certificate: a join, not the session of the moment, so an agent that is disconnected
//! for a while is never reinstalled behind the administrator's back) the controller reads
//! the kubeconfig again only for an agent upgrade (below), and deletes the bootstrap token: HelmReleases and set children whose `clusterRef` names the
//! ManagedCluster go over the agent's session, as for any agent cluster.
//!
//! # Agent upgrades
//!
//! The kubeconfig is used after the join for one thing: upgrading the agents the hub
//! installed when `--capi-agent-image` changes ([`upgrade`]). The image installed is
//! recorded on the ManagedCluster (`capi.fleet.flotilla.dev/agent-image`); at every resync
//! the joined, unpaused ManagedClusters whose record differs are upgraded in name order, at
//! most `--capi-agent-upgrade-parallelism` in flight: the agent chart is rendered again
//! with the new image and applied (without the token Secret: a joined agent starts from
//! its identity), `agent-upgrading-to` and `agent-upgraded-at` are recorded, and the
//! upgrade stays in flight until the agent's session comes up again after it (and, when
//! the tag names a version, `status.agentVersion` is that version). An agent is upgraded
//! while its session is up, over a session to this hub process (after a hub restart, once
//! the agent reconnected), so the reconnect after the re-apply is the upgraded agent's. An
//! agent not back by `--capi-agent-upgrade-timeout` gets `agent-upgrade-failed: <image>`
//! and the condition `AgentUpgrade` `False`, reason `UpgradeNotReconnected`, naming the image; as a
//! failed wave does, that stops the rollout of the image: the upgrades in flight are
//! followed to their end, none starts until the record goes (the agent comes back at the
//! image's version after all, the administrator removes the annotation to upgrade that
//! cluster again, or another image is configured). [`upgrade`] has the rules. An upgrade
//! in flight sets `AgentUpgrade` `False`, reason `Upgrading` (with its deadline); a
//! successful one `True`, `Upgraded`; one that cannot be applied (the kubeconfig refused,
//! the workload cluster unreachable) `False`, `UpgradeNotApplied` with the error, tried
//! again at the next resync.
//!
//! # The kubeconfig Secret
//!
//! Nothing made from a kubeconfig is kept: the `<name>-kubeconfig` Secret is read again for
//! each step that needs it (every look before the join, each bootstrap, each agent
//! upgrade), and its client dropped after that step. A Secret that rotates (a new
//! credential, the old one revoked) is therefore used at the next step, and a
//! `KubeconfigInvalid` condition clears at the first look after the Secret is fixed (at
//! most `--capi-resync-interval` later: Secrets are not watched, so a hub never holds the
//! Secrets of the management cluster in memory).
//!
//! # Lifecycle
//!
//! A Cluster with `spec.paused` is what Cluster API means by it: no controller acts on it.
//! The ManagedCluster is labelled paused and its condition says so; nothing is installed,
//! and the HelmReleases that target it are held as if suspended (the plan goes to the
//! agent with `suspend` set, a Normal `TargetPaused` Event says why) until it is unpaused.
//!
//! A Cluster being deleted has its ManagedCluster deleted; a HelmRelease that targets a
//! ManagedCluster being deleted or gone is let go by its finalizer without an uninstall
//! (the workload cluster goes too), with a Normal `TargetDeleted` Event, so its deletion
//! never waits for an agent that will not answer.
//!
//! The parts: [`decide`] (pure, table-tested), [`bootstrap`] (render and apply the agent),
//! [`controller`] (watch, observe, act; [`controller::run`] is the supervised task).

pub mod bootstrap;
pub mod controller;
pub mod decide;
pub mod upgrade;
mod view;

use std::path::PathBuf;
use std::time::Duration;

pub use controller::run;
pub use view::ImportedClusters;

/// The field manager of the labels and link annotations import keeps on a ManagedCluster.
pub const IMPORT_FIELD_MANAGER: &str = "flotilla-hub-capi-import";

/// Label and annotation prefix of import.
pub const PREFIX: &str = "capi.fleet.flotilla.dev/";
/// Label: the ManagedCluster was made by import.
pub const LABEL_IMPORTED: &str = "capi.fleet.flotilla.dev/imported";
/// Label: the Cluster's namespace.
pub const LABEL_NAMESPACE: &str = "capi.fleet.flotilla.dev/namespace";
/// Label: the Cluster's name.
pub const LABEL_CLUSTER: &str = "capi.fleet.flotilla.dev/cluster";
/// Label: the Cluster's ClusterClass.
pub const LABEL_CLUSTER_CLASS: &str = "capi.fleet.flotilla.dev/cluster-class";
/// Label: the Cluster is paused.
pub const LABEL_PAUSED: &str = "capi.fleet.flotilla.dev/paused";
/// Annotation: `<namespace>/<name>` of the Cluster.
pub const ANNOTATION_CLUSTER_REF: &str = "capi.fleet.flotilla.dev/cluster-ref";
/// Annotation: the Cluster's UID.
pub const ANNOTATION_CLUSTER_UID: &str = "capi.fleet.flotilla.dev/cluster-uid";
/// Annotation: how many times the agent was installed.
pub const ANNOTATION_ATTEMPTS: &str = "capi.fleet.flotilla.dev/bootstrap-attempts";
/// Annotation: when the agent was last installed (RFC 3339).
pub const ANNOTATION_BOOTSTRAPPED_AT: &str = "capi.fleet.flotilla.dev/bootstrapped-at";
/// Annotation: the id of the last bootstrap token (the id only).
pub const ANNOTATION_TOKEN_ID: &str = "capi.fleet.flotilla.dev/bootstrap-token-id";
/// Annotation: the agent image the hub last installed (and, after an upgrade, saw
/// reconnecting).
pub const ANNOTATION_AGENT_IMAGE: &str = "capi.fleet.flotilla.dev/agent-image";
/// Annotation: the agent image an upgrade in flight re-applied.
pub const ANNOTATION_UPGRADING: &str = "capi.fleet.flotilla.dev/agent-upgrading-to";
/// Annotation: when that upgrade was applied (RFC 3339).
pub const ANNOTATION_UPGRADED_AT: &str = "capi.fleet.flotilla.dev/agent-upgraded-at";
/// Annotation: the agent image whose upgrade did not reconnect by its deadline (the
/// rollout of that image stops; removing it upgrades this cluster again).
pub const ANNOTATION_UPGRADE_FAILED: &str = "capi.fleet.flotilla.dev/agent-upgrade-failed";
/// The ManagedCluster condition saying the onboarding step.
pub const CONDITION: &str = "AgentBootstrap";
/// The ManagedCluster condition saying how the last agent upgrade by the hub went.
pub const CONDITION_UPGRADE: &str = "AgentUpgrade";

/// The ManagedCluster name of Cluster `namespace/name` (see the module docs).
pub fn managed_cluster_name(namespace: &str, name: &str) -> String {
    format!("{namespace}.{name}")
}

/// How import runs (the hub's `--capi-*` flags).
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// `--capi-import-selector`: label selector of Clusters (kubectl syntax); empty: all.
    pub cluster_selector: String,
    /// `--capi-import-namespace-selector`: label selector of their Namespaces; empty: all.
    pub namespace_selector: String,
    /// `--capi-hub-url`: the session server the agents dial.
    pub hub_url: String,
    /// The pin of the hub's CA (`sha256:<hex>`), the agents' `--ca-hash`.
    pub ca_pin: String,
    /// The hub's namespace (bootstrap tokens live there).
    pub hub_namespace: String,
    /// `--capi-agent-image`: `repository[:tag]`.
    pub agent_image: String,
    /// `--capi-agent-namespace`.
    pub agent_namespace: String,
    /// `--capi-agent-values`: a values file of the agent chart.
    pub agent_values: Option<PathBuf>,
    /// `--capi-agent-join-timeout`.
    pub join_timeout: Duration,
    /// `--capi-agent-upgrade-parallelism`: agent upgrades in flight at once (at least 1).
    pub upgrade_parallelism: usize,
    /// `--capi-agent-upgrade-timeout`: how long an upgraded agent has to reconnect.
    pub upgrade_timeout: Duration,
    /// When the hub process started (Unix seconds): agents are upgraded over sessions to
    /// it only ([`upgrade::plan`]).
    pub hub_started_at: i64,
    /// How many times an agent is installed before the hub gives up (2: once more).
    pub max_attempts: u32,
    /// How often every imported Cluster is looked at again (deadlines, deletions missed).
    pub resync: Duration,
    /// How long the controller waits between looks for the Cluster API CRD.
    pub crd_poll: Duration,
    /// What a kubeconfig Secret may ask of the hub.
    pub kubeconfig_policy: crate::kubeconfig_policy::KubeconfigPolicy,
}

impl Default for ImportOptions {
    fn default() -> Self {
        Self {
            cluster_selector: String::new(),
            namespace_selector: String::new(),
            hub_url: String::new(),
            ca_pin: String::new(),
            hub_namespace: "flotilla-system".into(),
            agent_image: "localhost:5000/flotilla/flotilla-agent:0.1.0".into(),
            agent_namespace: "flotilla-system".into(),
            agent_values: None,
            join_timeout: Duration::from_secs(600),
            upgrade_parallelism: 1,
            upgrade_timeout: Duration::from_secs(600),
            hub_started_at: 0,
            max_attempts: 2,
            resync: Duration::from_secs(30),
            crd_poll: Duration::from_secs(60),
            kubeconfig_policy: Default::default(),
        }
    }
}
