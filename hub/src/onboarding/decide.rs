//! The pure part of import: from what was observed of a Cluster, its kubeconfig Secret and
//! its ManagedCluster, what to do next ([`decide`]). The controller reads, calls this, and
//! does what it says.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{
    ANNOTATION_CLUSTER_REF, ANNOTATION_CLUSTER_UID, LABEL_CLUSTER, LABEL_CLUSTER_CLASS,
    LABEL_IMPORTED, LABEL_NAMESPACE, LABEL_PAUSED, PREFIX,
};

/// What the controller knows of a Cluster API `Cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterView {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its topology's ClusterClass name.
    pub class: Option<String>,
    /// `spec.paused`.
    pub paused: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The control plane is initialized.
    pub control_plane_initialized: bool,
    /// The Cluster matches the import selectors (it may exist unselected).
    pub selected: bool,
}

/// What the controller knows of the Cluster's kubeconfig Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeconfigState {
    /// Not read (nothing needs it).
    NotRead,
    /// No such Secret.
    Missing {
        /// `namespace/name` of the Secret.
        secret: String,
    },
    /// Refused: the sentence names the Secret and its key, and quotes nothing of it.
    Invalid(String),
    /// A client can be made from it.
    Usable,
}

/// A recorded bootstrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// How many times the agent was installed.
    pub count: u32,
    /// When it was last installed, Unix seconds.
    pub at: i64,
}

/// What the controller knows of the ManagedCluster of the Cluster's name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ManagedView {
    /// Its link annotations: `(namespace/name, uid)` of the Cluster it was imported from;
    /// `None`: not made by import.
    pub imported_from: Option<(String, String)>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The `Joined` condition is true.
    pub joined: bool,
    /// The bootstrap recorded in its annotations.
    pub bootstrap: Option<Attempt>,
    /// The labels import applied (what it sees now, for "changed?").
    pub labels: BTreeMap<String, String>,
}

/// The onboarding step, as the `AgentBootstrap` condition says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The Cluster is paused.
    Paused,
    /// The control plane is not initialized.
    WaitingForControlPlane,
    /// The kubeconfig Secret does not exist (yet).
    WaitingForKubeconfig {
        /// `namespace/name`.
        secret: String,
    },
    /// The kubeconfig Secret was refused.
    KubeconfigInvalid(String),
    /// Install the agent now (attempt `attempt`).
    Bootstrap {
        /// 1 for the first.
        attempt: u32,
    },
    /// Installed; waiting for the agent to join until `deadline` (Unix seconds).
    WaitingForAgent {
        /// The attempt that installed it.
        attempt: u32,
        /// Unix seconds.
        deadline: i64,
    },
    /// The agent joined.
    Joined,
    /// Installed `attempts` times; it never joined.
    AgentNeverConnected {
        /// How many times.
        attempts: u32,
    },
}

impl Step {
    /// The condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Paused => "Paused",
            Self::WaitingForControlPlane => "WaitingForControlPlane",
            Self::WaitingForKubeconfig { .. } => "WaitingForKubeconfig",
            Self::KubeconfigInvalid(_) => "KubeconfigInvalid",
            Self::Bootstrap { .. } => "Bootstrapping",
            Self::WaitingForAgent { .. } => "WaitingForAgent",
            Self::Joined => "Joined",
            Self::AgentNeverConnected { .. } => "AgentNeverConnected",
        }
    }
}

/// What to do with the ManagedCluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManagedAction {
    /// Nothing.
    Leave,
    /// Create it (accepted) when missing, and apply these labels and link annotations.
    Ensure {
        /// Its labels (import's).
        labels: BTreeMap<String, String>,
        /// Its link annotations.
        annotations: BTreeMap<String, String>,
    },
    /// Delete it.
    Delete,
    /// An object of that name was not made by import (or from another Cluster): left alone;
    /// the sentence says why.
    Conflict(String),
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The ManagedCluster.
    pub managed: ManagedAction,
    /// The step to record (and, for [`Step::Bootstrap`], to do).
    pub step: Option<Step>,
    /// When to look again (besides the resync).
    pub requeue: Option<Duration>,
}

/// The timing of bootstrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long an installed agent has to join.
    pub join_timeout: Duration,
    /// Installs before giving up.
    pub max_attempts: u32,
}

/// The labels import gives the ManagedCluster of `cluster`.
pub fn desired_labels(cluster: &ClusterView) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = cluster
        .labels
        .iter()
        .filter(|(k, _)| !is_reserved(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(LABEL_IMPORTED.into(), "true".into());
    // A name longer than a label value allows (a ClusterClass name may have 253
    // characters) is left out rather than failing every apply.
    let mut put = |key: &str, value: &str| {
        if is_label_value(value) {
            labels.insert(key.to_owned(), value.to_owned());
        }
    };
    put(LABEL_NAMESPACE, &cluster.namespace);
    put(LABEL_CLUSTER, &cluster.name);
    if let Some(class) = &cluster.class {
        put(LABEL_CLUSTER_CLASS, class);
    }
    if cluster.paused {
        labels.insert(LABEL_PAUSED.into(), "true".into());
    }
    labels
}

/// A valid, non-empty label value: at most 63 characters of `[A-Za-z0-9_.-]`, starting and
/// ending with an alphanumeric character.
fn is_label_value(v: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !v.is_empty()
        && v.len() <= 63
        && alnum(v.chars().next())
        && alnum(v.chars().last())
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Labels a Cluster may not set on its ManagedCluster: Flotilla's own.
fn is_reserved(key: &str) -> bool {
    let prefix = key.split_once('/').map_or("", |(p, _)| p);
    prefix == "fleet.flotilla.dev"
        || prefix.ends_with(".fleet.flotilla.dev")
        || key.starts_with(PREFIX)
}

fn link_annotations(cluster: &ClusterView) -> BTreeMap<String, String> {
    [
        (
            ANNOTATION_CLUSTER_REF.to_owned(),
            format!("{}/{}", cluster.namespace, cluster.name),
        ),
        (ANNOTATION_CLUSTER_UID.to_owned(), cluster.uid.clone()),
    ]
    .into()
}

/// The next step for Cluster `key` (`namespace/name`): `cluster` is `None` when it does not
/// exist; `managed` when its ManagedCluster does. `now` is Unix seconds.
pub fn decide(
    key: &str,
    cluster: Option<&ClusterView>,
    managed: Option<&ManagedView>,
    kubeconfig: &KubeconfigState,
    now: i64,
    timing: Timing,
) -> Decision {
    let leave = |step: Option<Step>, requeue: Option<Duration>| Decision {
        managed: ManagedAction::Leave,
        step,
        requeue,
    };
    let ours = managed.and_then(|m| m.imported_from.as_ref());
    // Whether the ManagedCluster is this Cluster's (by name; the UID is checked below).
    let from_this = ours.is_some_and(|(r, _)| r == key);
    if let Some(m) = managed
        && !from_this
    {
        let why = match &m.imported_from {
            None => format!(
                "ManagedCluster exists and was not imported from a Cluster; Cluster {key} is not imported"
            ),
            Some((other, _)) => format!(
                "ManagedCluster was imported from Cluster {other}; Cluster {key} is not imported"
            ),
        };
        return Decision {
            managed: ManagedAction::Conflict(why),
            step: None,
            requeue: None,
        };
    }
    let Some(cluster) = cluster else {
        // Gone: its ManagedCluster goes too.
        return Decision {
            managed: if from_this && !managed.is_some_and(|m| m.deleting) {
                ManagedAction::Delete
            } else {
                ManagedAction::Leave
            },
            step: None,
            requeue: None,
        };
    };
    let recreated = ours.is_some_and(|(_, uid)| !uid.is_empty() && *uid != cluster.uid);
    if cluster.deleting || recreated {
        let managed_action = match managed {
            Some(m) if !m.deleting => ManagedAction::Delete,
            _ => ManagedAction::Leave,
        };
        return Decision {
            managed: managed_action,
            step: None,
            // A recreated Cluster is imported again once the old object is gone.
            requeue: recreated.then_some(Duration::from_secs(5)),
        };
    }
    if managed.is_some_and(|m| m.deleting) {
        return leave(None, Some(Duration::from_secs(5)));
    }
    if !cluster.selected {
        return leave(None, None);
    }
    let ensure = ManagedAction::Ensure {
        labels: desired_labels(cluster),
        annotations: link_annotations(cluster),
    };
    let with = |step: Step, requeue: Option<Duration>| Decision {
        managed: ensure.clone(),
        step: Some(step),
        requeue,
    };
    if cluster.paused {
        return with(Step::Paused, None);
    }
    if managed.is_some_and(|m| m.joined) {
        return with(Step::Joined, None);
    }
    if !cluster.control_plane_initialized {
        return with(Step::WaitingForControlPlane, None);
    }
    match kubeconfig {
        KubeconfigState::Missing { secret } => {
            return with(
                Step::WaitingForKubeconfig {
                    secret: secret.clone(),
                },
                None,
            );
        }
        KubeconfigState::Invalid(why) => return with(Step::KubeconfigInvalid(why.clone()), None),
        KubeconfigState::NotRead | KubeconfigState::Usable => {}
    }
    let Some(attempt) = managed.and_then(|m| m.bootstrap) else {
        return with(Step::Bootstrap { attempt: 1 }, None);
    };
    let deadline = attempt
        .at
        .saturating_add(i64::try_from(timing.join_timeout.as_secs()).unwrap_or(i64::MAX));
    if now < deadline {
        let left = u64::try_from(deadline - now).unwrap_or(0);
        return with(
            Step::WaitingForAgent {
                attempt: attempt.count,
                deadline,
            },
            Some(Duration::from_secs(left.max(1))),
        );
    }
    if attempt.count < timing.max_attempts {
        return with(
            Step::Bootstrap {
                attempt: attempt.count + 1,
            },
            None,
        );
    }
    with(
        Step::AgentNeverConnected {
            attempts: attempt.count,
        },
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "fleet/edge-1";
    const TIMING: Timing = Timing {
        join_timeout: Duration::from_secs(600),
        max_attempts: 2,
    };

    fn cluster() -> ClusterView {
        ClusterView {
            namespace: "fleet".into(),
            name: "edge-1".into(),
            uid: "u1".into(),
            labels: [("env".into(), "prod".into())].into(),
            class: Some("quick-start".into()),
            selected: true,
            ..Default::default()
        }
    }

    fn initialized() -> ClusterView {
        ClusterView {
            control_plane_initialized: true,
            ..cluster()
        }
    }

    fn ours() -> ManagedView {
        ManagedView {
            imported_from: Some((KEY.into(), "u1".into())),
            ..Default::default()
        }
    }

    fn step(d: &Decision) -> Option<&Step> {
        d.step.as_ref()
    }

    #[test]
    fn the_labels_are_the_clusters_with_namespace_class_and_no_forged_flotilla_label() {
        let mut c = cluster();
        c.labels
            .insert("fleet.flotilla.dev/owner".into(), "x".into());
        c.labels
            .insert("capi.fleet.flotilla.dev/imported".into(), "false".into());
        c.paused = true;
        let labels = desired_labels(&c);
        let want: BTreeMap<String, String> = [
            ("env", "prod"),
            (LABEL_IMPORTED, "true"),
            (LABEL_NAMESPACE, "fleet"),
            (LABEL_CLUSTER, "edge-1"),
            (LABEL_CLUSTER_CLASS, "quick-start"),
            (LABEL_PAUSED, "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(labels, want);
    }

    #[test]
    fn a_class_name_too_long_for_a_label_is_left_out() {
        let c = ClusterView {
            class: Some("c".repeat(64)),
            ..cluster()
        };
        assert!(!desired_labels(&c).contains_key(LABEL_CLUSTER_CLASS));
        let c = ClusterView {
            class: Some(String::new()),
            ..cluster()
        };
        assert!(!desired_labels(&c).contains_key(LABEL_CLUSTER_CLASS));
    }

    #[test]
    fn the_steps_in_order() {
        let missing = KubeconfigState::Missing {
            secret: "fleet/edge-1-kubeconfig".into(),
        };
        let joined = ManagedView {
            joined: true,
            ..ours()
        };
        let at = |count, at| ManagedView {
            bootstrap: Some(Attempt { count, at }),
            ..ours()
        };
        let paused = ClusterView {
            paused: true,
            ..initialized()
        };
        let invalid = KubeconfigState::Invalid(
            "kubeConfig Secret fleet/edge-1-kubeconfig key \"value\": bad".into(),
        );
        #[allow(clippy::type_complexity)]
        let table: Vec<(
            &str,
            ClusterView,
            Option<ManagedView>,
            KubeconfigState,
            i64,
            Step,
        )> = vec![
            (
                "new cluster",
                cluster(),
                None,
                KubeconfigState::NotRead,
                0,
                Step::WaitingForControlPlane,
            ),
            (
                "paused wins",
                paused,
                Some(at(1, 0)),
                KubeconfigState::Usable,
                10_000,
                Step::Paused,
            ),
            (
                "no secret",
                initialized(),
                Some(ours()),
                missing.clone(),
                0,
                Step::WaitingForKubeconfig {
                    secret: "fleet/edge-1-kubeconfig".into(),
                },
            ),
            (
                "bad secret",
                initialized(),
                Some(ours()),
                invalid.clone(),
                0,
                Step::KubeconfigInvalid(
                    "kubeConfig Secret fleet/edge-1-kubeconfig key \"value\": bad".into(),
                ),
            ),
            (
                "first install",
                initialized(),
                None,
                KubeconfigState::Usable,
                0,
                Step::Bootstrap { attempt: 1 },
            ),
            (
                "waiting",
                initialized(),
                Some(at(1, 100)),
                KubeconfigState::Usable,
                400,
                Step::WaitingForAgent {
                    attempt: 1,
                    deadline: 700,
                },
            ),
            (
                "deadline passed: once more",
                initialized(),
                Some(at(1, 100)),
                KubeconfigState::Usable,
                700,
                Step::Bootstrap { attempt: 2 },
            ),
            (
                "second wait",
                initialized(),
                Some(at(2, 700)),
                KubeconfigState::Usable,
                701,
                Step::WaitingForAgent {
                    attempt: 2,
                    deadline: 1300,
                },
            ),
            (
                "given up",
                initialized(),
                Some(at(2, 700)),
                KubeconfigState::Usable,
                1300,
                Step::AgentNeverConnected { attempts: 2 },
            ),
            (
                "joined: the kubeconfig is not needed",
                initialized(),
                Some(joined),
                KubeconfigState::NotRead,
                0,
                Step::Joined,
            ),
        ];
        for (name, c, m, kc, now, want) in table {
            let d = decide(KEY, Some(&c), m.as_ref(), &kc, now, TIMING);
            assert_eq!(step(&d), Some(&want), "{name}");
            assert!(
                matches!(d.managed, ManagedAction::Ensure { .. }),
                "{name}: {:?}",
                d.managed
            );
        }
    }

    #[test]
    fn a_waiting_agent_is_looked_at_again_at_its_deadline() {
        let m = ManagedView {
            bootstrap: Some(Attempt { count: 1, at: 100 }),
            ..ours()
        };
        let d = decide(
            KEY,
            Some(&initialized()),
            Some(&m),
            &KubeconfigState::Usable,
            650,
            TIMING,
        );
        assert_eq!(d.requeue, Some(Duration::from_secs(50)));
    }

    #[test]
    fn a_deleted_or_deleting_or_recreated_cluster_deletes_its_managed_cluster() {
        let kc = KubeconfigState::NotRead;
        let gone = decide(KEY, None, Some(&ours()), &kc, 0, TIMING);
        assert_eq!(gone.managed, ManagedAction::Delete);
        let deleting = ClusterView {
            deleting: true,
            ..initialized()
        };
        let d = decide(KEY, Some(&deleting), Some(&ours()), &kc, 0, TIMING);
        assert_eq!(d.managed, ManagedAction::Delete);
        assert_eq!(d.step, None);
        let recreated = ClusterView {
            uid: "u2".into(),
            ..initialized()
        };
        let d = decide(KEY, Some(&recreated), Some(&ours()), &kc, 0, TIMING);
        assert_eq!(d.managed, ManagedAction::Delete);
        assert!(d.requeue.is_some());
        // Already being deleted: nothing more.
        let m = ManagedView {
            deleting: true,
            ..ours()
        };
        assert_eq!(
            decide(KEY, None, Some(&m), &kc, 0, TIMING).managed,
            ManagedAction::Leave
        );
        let d = decide(KEY, Some(&initialized()), Some(&m), &kc, 0, TIMING);
        assert_eq!(d.managed, ManagedAction::Leave);
        assert_eq!(d.step, None);
        // No ManagedCluster and no Cluster: nothing.
        assert_eq!(
            decide(KEY, None, None, &kc, 0, TIMING).managed,
            ManagedAction::Leave
        );
    }

    #[test]
    fn a_managed_cluster_not_imported_from_this_cluster_is_never_taken_over() {
        let by_hand = ManagedView::default();
        let d = decide(
            KEY,
            Some(&initialized()),
            Some(&by_hand),
            &KubeconfigState::Usable,
            0,
            TIMING,
        );
        assert!(matches!(d.managed, ManagedAction::Conflict(_)), "{d:?}");
        assert_eq!(d.step, None);
        let other = ManagedView {
            imported_from: Some(("other/edge-1".into(), "u9".into())),
            ..Default::default()
        };
        let d = decide(
            KEY,
            None,
            Some(&other),
            &KubeconfigState::NotRead,
            0,
            TIMING,
        );
        let ManagedAction::Conflict(why) = d.managed else {
            panic!("{d:?}")
        };
        assert!(why.contains("other/edge-1"), "{why}");
    }

    #[test]
    fn an_unselected_cluster_keeps_its_managed_cluster_untouched() {
        let c = ClusterView {
            selected: false,
            ..initialized()
        };
        let d = decide(
            KEY,
            Some(&c),
            Some(&ours()),
            &KubeconfigState::NotRead,
            0,
            TIMING,
        );
        assert_eq!(d.managed, ManagedAction::Leave);
        assert_eq!(d.step, None);
    }

    #[test]
    fn the_name_rule_is_namespace_dot_name() {
        assert_eq!(
            super::super::managed_cluster_name("fleet", "edge-1"),
            "fleet.edge-1"
        );
        flotilla_core::ids::ClusterId::new(super::super::managed_cluster_name(
            &"n".repeat(63),
            &"c".repeat(63),
        ))
        .unwrap();
    }
}
