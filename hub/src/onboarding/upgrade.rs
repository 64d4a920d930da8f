//! Agent upgrades by the hub (pure): when `--capi-agent-image` changes, which of the agents
//! the hub installed to re-apply now ([`plan`]), a few at a time, each counted in flight
//! until its agent reconnects after the re-apply (at the image's version, when the tag is
//! one), or until `--capi-agent-upgrade-timeout` passes without that: then the upgrade did
//! not reconnect, and the rollout of that image stops.
//!
//! The record is on the ManagedCluster: [`super::ANNOTATION_AGENT_IMAGE`] (the image last
//! installed and seen reconnecting), [`super::ANNOTATION_UPGRADING`] (the image being
//! rolled out), [`super::ANNOTATION_UPGRADED_AT`] (when it was applied) and
//! [`super::ANNOTATION_UPGRADE_FAILED`] (the image whose upgrade did not reconnect).
//!
//! # A bad image stops the rollout
//!
//! An agent that does not come back at the new image is most likely the image's fault (it
//! does not start, cannot reach the hub, or reports another version), so it would fail on
//! every cluster: like a failed wave of a HelmReleaseSet, the first upgrade past its deadline
//! stops the rollout. Upgrades already in flight are still followed to their end; no new one
//! starts while any cluster's record says its upgrade to the configured image did not
//! reconnect. The rollout resumes when that record goes: the agent comes back at the image's
//! version after all (a slow start), an administrator removes the annotation (that cluster
//! is upgraded again, first), or another image is configured (a record of an image no longer
//! configured stops nothing).

use std::time::Duration;

/// What the upgrade round knows of one imported ManagedCluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentView {
    /// The ManagedCluster's name.
    pub name: String,
    /// The hub installed its agent (a bootstrap is recorded).
    pub bootstrapped: bool,
    /// The agent joined (`Joined` true).
    pub joined: bool,
    /// Being deleted.
    pub deleting: bool,
    /// The Cluster is paused: the hub does nothing to it.
    pub paused: bool,
    /// The image last installed (and, after an upgrade, seen reconnecting).
    pub installed: Option<String>,
    /// The upgrade in flight: the image and when it was applied (Unix seconds).
    pub upgrading: Option<(String, i64)>,
    /// The image whose upgrade did not reconnect by its deadline.
    pub failed: Option<String>,
    /// When the session came up (Unix seconds), while it is up.
    pub connected_since: Option<i64>,
    /// The version the agent reports.
    pub agent_version: Option<String>,
}

/// The rollout being planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rollout<'a> {
    /// The configured image (`--capi-agent-image`).
    pub image: &'a str,
    /// Upgrades in flight at once (`--capi-agent-upgrade-parallelism`; 0 is 1).
    pub parallel: usize,
    /// How long an upgraded agent has to reconnect (`--capi-agent-upgrade-timeout`).
    pub timeout: Duration,
    /// Now, Unix seconds.
    pub now: i64,
    /// When this hub started (Unix seconds): an agent is upgraded only over a session that
    /// came up since (see [`plan`]).
    pub sessions_since: i64,
}

/// One thing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeAction {
    /// Re-apply the agent with the configured image through the Cluster's kubeconfig.
    Start(String),
    /// The agent reconnected after the upgrade: record the image as installed.
    Done(String),
    /// The agent did not reconnect by the deadline: record the failure (the rollout of the
    /// image stops).
    NotReconnected {
        /// The ManagedCluster.
        name: String,
        /// When the upgrade was applied (Unix seconds).
        applied_at: i64,
    },
}

/// The outcome of one round.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Round {
    /// What to do now.
    pub actions: Vec<UpgradeAction>,
    /// The ManagedClusters whose upgrade to the configured image did not reconnect (those
    /// of this round's [`UpgradeAction::NotReconnected`] included): while there is one, no
    /// upgrade starts.
    pub stopped_by: Vec<String>,
    /// How many agents still wait for an upgrade that is not started.
    pub waiting: usize,
}

/// The version an image's tag names (`repo:v0.2.0` → `0.2.0`), if it names one.
pub fn tag_version(image: &str) -> Option<String> {
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    let tag = &image[slash..].rsplit_once(':')?.1;
    let v = tag.strip_prefix('v').unwrap_or(tag);
    let mut parts = v.splitn(3, '.');
    let numeric =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let (a, b) = (parts.next(), parts.next());
    (numeric(a) && numeric(b)).then(|| v.to_owned())
}

/// Whether `c`'s agent reports the version `image`'s tag names (`false` for a tag that
/// names none).
fn at_version(c: &AgentView, image: &str) -> bool {
    tag_version(image).is_some_and(|want| {
        c.agent_version
            .as_deref()
            .is_some_and(|v| v.strip_prefix('v').unwrap_or(v) == want)
    })
}

/// Whether `c`'s agent came back after the upgrade to `image` applied at `at`.
fn reconnected(c: &AgentView, image: &str, at: i64) -> bool {
    let back = c.connected_since.is_some_and(|since| since >= at);
    back && (tag_version(image).is_none() || at_version(c, image))
}

/// The actions of one round of `rollout`. Only joined agents the hub installed, not paused
/// nor being deleted, are upgraded; an agent not yet joined gets the image at its next
/// bootstrap. Candidates start in name order, up to the room `parallel` leaves beside the
/// upgrades in flight, and none while the rollout is stopped (module docs).
///
/// A candidate starts only while its session is up, came up since this hub started, and
/// came up before this second: the reconnect an upgrade waits for is a session that came
/// up at or after the re-apply, so the session of the moment must be older than the
/// re-apply (to the second: the times are those of the API), and not one from before a
/// hub restart that the agent has yet to replace (its reconnect to this hub would look
/// like the upgraded agent's).
pub fn plan(clusters: &[AgentView], rollout: Rollout<'_>) -> Round {
    let image = rollout.image;
    let timeout = i64::try_from(rollout.timeout.as_secs()).unwrap_or(i64::MAX);
    let mut round = Round::default();
    let mut in_flight = 0usize;
    let mut candidates: Vec<&AgentView> = Vec::new();
    for c in clusters {
        if !c.bootstrapped || !c.joined || c.deleting || c.paused {
            continue;
        }
        let failed_here = c.failed.as_deref() == Some(image);
        match &c.upgrading {
            Some((to, at)) if to == image => {
                if reconnected(c, image, *at) {
                    round.actions.push(UpgradeAction::Done(c.name.clone()));
                } else if failed_here {
                    round.stopped_by.push(c.name.clone());
                } else if rollout.now >= at.saturating_add(timeout) {
                    round.actions.push(UpgradeAction::NotReconnected {
                        name: c.name.clone(),
                        applied_at: *at,
                    });
                    round.stopped_by.push(c.name.clone());
                } else {
                    in_flight += 1;
                }
            }
            // Upgrading to an image no longer configured: upgrade again.
            Some(_) => candidates.push(c),
            // Failed, and back at the image's version after all: done.
            None if failed_here && at_version(c, image) => {
                round.actions.push(UpgradeAction::Done(c.name.clone()));
            }
            None if failed_here => round.stopped_by.push(c.name.clone()),
            None if c.installed.as_deref() != Some(image) => candidates.push(c),
            None => {}
        }
    }
    let ready = |c: &&AgentView| {
        c.connected_since
            .is_some_and(|since| since >= rollout.sessions_since && since < rollout.now)
    };
    let not_ready = candidates.iter().filter(|c| !ready(c)).count();
    candidates.retain(ready);
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    round.stopped_by.sort();
    let room = if round.stopped_by.is_empty() {
        rollout.parallel.max(1).saturating_sub(in_flight)
    } else {
        0
    };
    round.waiting = candidates.len().saturating_sub(room) + not_ready;
    round.actions.extend(
        candidates
            .into_iter()
            .take(room)
            .map(|c| UpgradeAction::Start(c.name.clone())),
    );
    round
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEW: &str = "registry.example/flotilla-agent:v0.2.0";
    const OLD: &str = "registry.example/flotilla-agent:v0.1.0";

    fn joined(name: &str) -> AgentView {
        AgentView {
            name: name.into(),
            bootstrapped: true,
            joined: true,
            installed: Some(OLD.into()),
            connected_since: Some(100),
            agent_version: Some("0.1.0".into()),
            ..Default::default()
        }
    }

    fn start(n: &str) -> UpgradeAction {
        UpgradeAction::Start(n.into())
    }

    /// Applied at 200; the deadline is 800.
    const TIMEOUT: Duration = Duration::from_secs(600);

    fn rollout(image: &str, parallel: usize) -> Rollout<'_> {
        Rollout {
            image,
            parallel,
            timeout: TIMEOUT,
            now: 300,
            sessions_since: 50,
        }
    }

    #[test]
    fn a_tag_names_a_version_only_when_it_is_one() {
        assert_eq!(tag_version(NEW).as_deref(), Some("0.2.0"));
        assert_eq!(tag_version("r:5000/a:1.2").as_deref(), Some("1.2"));
        assert_eq!(tag_version("localhost:5000/agent").as_deref(), None);
        assert_eq!(tag_version("r/agent:test").as_deref(), None);
        assert_eq!(tag_version("r/agent:latest").as_deref(), None);
    }

    #[test]
    fn the_upgrade_table_rolls_a_few_at_a_time_and_waits_for_each_reconnect() {
        let upgrading = |name: &str, since: i64, version: &str| AgentView {
            upgrading: Some((NEW.into(), 200)),
            connected_since: Some(since),
            agent_version: Some(version.into()),
            ..joined(name)
        };
        let cases: Vec<(&str, Vec<AgentView>, usize, Vec<UpgradeAction>)> = vec![
            (
                "unchanged: nothing",
                vec![AgentView {
                    installed: Some(NEW.into()),
                    ..joined("a")
                }],
                1,
                vec![],
            ),
            (
                "changed: the first by name, one at a time",
                vec![joined("c"), joined("a"), joined("b")],
                1,
                vec![start("a")],
            ),
            (
                "two at a time",
                vec![joined("c"), joined("a"), joined("b")],
                2,
                vec![start("a"), start("b")],
            ),
            (
                "zero is one",
                vec![joined("a"), joined("b")],
                0,
                vec![start("a")],
            ),
            (
                "one in flight, not back: the next waits",
                vec![upgrading("a", 100, "0.1.0"), joined("b")],
                1,
                vec![],
            ),
            (
                "back, at the old version: still in flight",
                vec![upgrading("a", 250, "0.1.0"), joined("b")],
                1,
                vec![],
            ),
            (
                "back at the new version: done, and the next starts",
                vec![upgrading("a", 250, "0.2.0"), joined("b")],
                1,
                vec![UpgradeAction::Done("a".into()), start("b")],
            ),
            (
                "in flight to an image no longer configured: again",
                vec![AgentView {
                    upgrading: Some((OLD.into(), 200)),
                    ..joined("a")
                }],
                1,
                vec![start("a")],
            ),
            (
                "not joined, not installed by the hub, paused, deleting: left alone",
                vec![
                    AgentView {
                        joined: false,
                        ..joined("a")
                    },
                    AgentView {
                        bootstrapped: false,
                        ..joined("b")
                    },
                    AgentView {
                        paused: true,
                        ..joined("c")
                    },
                    AgentView {
                        deleting: true,
                        ..joined("d")
                    },
                ],
                4,
                vec![],
            ),
            (
                "no image recorded (installed before the record): upgraded",
                vec![AgentView {
                    installed: None,
                    ..joined("a")
                }],
                1,
                vec![start("a")],
            ),
        ];
        for (name, clusters, parallel, want) in cases {
            assert_eq!(
                plan(&clusters, rollout(NEW, parallel)).actions,
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn a_tag_that_is_no_version_waits_for_the_reconnect_only() {
        let image = "registry.example/flotilla-agent:test-2";
        let c = AgentView {
            upgrading: Some((image.into(), 200)),
            connected_since: Some(200),
            ..joined("a")
        };
        assert_eq!(
            plan(std::slice::from_ref(&c), rollout(image, 1)).actions,
            vec![UpgradeAction::Done("a".into())]
        );
        let c = AgentView {
            connected_since: Some(199),
            ..c
        };
        assert_eq!(plan(&[c], rollout(image, 1)).actions, vec![]);
    }

    #[test]
    fn an_upgrade_that_does_not_reconnect_by_its_deadline_stops_the_rollout() {
        let upgrading = |name: &str| AgentView {
            upgrading: Some((NEW.into(), 200)),
            ..joined(name)
        };
        let failed = |name: &str| AgentView {
            failed: Some(NEW.into()),
            ..joined(name)
        };
        let not_reconnected = |n: &str| UpgradeAction::NotReconnected {
            name: n.into(),
            applied_at: 200,
        };
        #[allow(clippy::type_complexity)]
        let cases: Vec<(
            &str,
            Vec<AgentView>,
            usize,
            i64,
            Vec<UpgradeAction>,
            Vec<&str>,
        )> = vec![
            (
                "before the deadline: in flight",
                vec![upgrading("a"), joined("b")],
                1,
                799,
                vec![],
                vec![],
            ),
            (
                "at the deadline: not reconnected, and nothing starts",
                vec![upgrading("a"), joined("b")],
                1,
                800,
                vec![not_reconnected("a")],
                vec!["a"],
            ),
            (
                "room for more, but stopped: nothing starts",
                vec![upgrading("a"), joined("b"), joined("c")],
                3,
                800,
                vec![not_reconnected("a")],
                vec!["a"],
            ),
            (
                "recorded failed: still stopped",
                vec![failed("a"), joined("b")],
                1,
                5000,
                vec![],
                vec!["a"],
            ),
            (
                "stopped, an upgrade in flight is still followed to its end",
                vec![
                    failed("a"),
                    AgentView {
                        connected_since: Some(250),
                        agent_version: Some("0.2.0".into()),
                        ..upgrading("b")
                    },
                    upgrading("c"),
                    joined("d"),
                ],
                4,
                900,
                vec![UpgradeAction::Done("b".into()), not_reconnected("c")],
                vec!["a", "c"],
            ),
            (
                "failed, then back at the new version after all: done, the rollout resumes",
                vec![
                    AgentView {
                        agent_version: Some("0.2.0".into()),
                        ..failed("a")
                    },
                    joined("b"),
                ],
                1,
                5000,
                vec![UpgradeAction::Done("a".into()), start("b")],
                vec![],
            ),
            (
                "a failure of an image no longer configured stops nothing",
                vec![
                    AgentView {
                        failed: Some(OLD.into()),
                        ..joined("a")
                    },
                    joined("b"),
                ],
                2,
                5000,
                vec![start("a"), start("b")],
                vec![],
            ),
        ];
        for (name, clusters, parallel, now, want, stopped) in cases {
            let round = plan(
                &clusters,
                Rollout {
                    now,
                    ..rollout(NEW, parallel)
                },
            );
            assert_eq!(round.actions, want, "{name}");
            assert_eq!(round.stopped_by, stopped, "{name}");
        }
    }

    #[test]
    fn a_removed_failure_record_makes_the_cluster_a_candidate_again_in_name_order() {
        // The failure annotation removed: the cluster is a candidate again (its installed
        // image is the old one), first by name.
        let clusters = vec![joined("b"), joined("a")];
        let round = plan(
            &clusters,
            Rollout {
                now: 5000,
                ..rollout(NEW, 1)
            },
        );
        assert_eq!(round.actions, vec![start("a")]);
        assert_eq!(round.waiting, 1);
    }

    #[test]
    fn an_agent_is_upgraded_only_over_a_session_older_than_the_apply_and_newer_than_the_hub() {
        let since = |name: &str, t: Option<i64>| AgentView {
            connected_since: t,
            ..joined(name)
        };
        // The hub started at 50, now is 300.
        let cases = [
            ("a session from before the hub restarted", Some(40), vec![]),
            ("a session that came up this second", Some(300), vec![]),
            ("disconnected", None, vec![]),
            (
                "a session to this hub, older than now",
                Some(299),
                vec![start("a")],
            ),
        ];
        for (name, t, want) in cases {
            let round = plan(&[since("a", t)], rollout(NEW, 1));
            assert_eq!(round.actions, want, "{name}");
            assert_eq!(round.waiting, 1 - round.actions.len(), "{name}");
        }
    }
}
