//! Agent upgrades by the hub (pure): when `--capi-agent-image` changes, which of the agents
//! the hub installed to re-apply now ([`plan`]), a few at a time, each counted in flight
//! until its agent reconnects after the re-apply (at the image's version, when the tag is
//! one).
//!
//! The record is on the ManagedCluster: [`super::ANNOTATION_AGENT_IMAGE`] (the image last
//! installed and seen reconnecting), [`super::ANNOTATION_UPGRADING`] (the image being
//! rolled out) and [`super::ANNOTATION_UPGRADED_AT`] (when it was applied).

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
    /// When the session came up (Unix seconds), while it is up.
    pub connected_since: Option<i64>,
    /// The version the agent reports.
    pub agent_version: Option<String>,
}

/// One thing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeAction {
    /// Re-apply the agent with the configured image through the Cluster's kubeconfig.
    Start(String),
    /// The agent reconnected after the upgrade: record the image as installed.
    Done(String),
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

/// Whether `c`'s agent came back after the upgrade to `image` applied at `at`.
fn reconnected(c: &AgentView, image: &str, at: i64) -> bool {
    let back = c.connected_since.is_some_and(|since| since >= at);
    let version = match tag_version(image) {
        Some(want) => c
            .agent_version
            .as_deref()
            .is_some_and(|v| v.strip_prefix('v').unwrap_or(v) == want),
        None => true,
    };
    back && version
}

/// The actions of one round for the configured `image`, at most `parallel` upgrades in
/// flight (at least one). Only joined agents the hub installed, not paused nor being
/// deleted, are upgraded; an agent not yet joined gets the image at its next bootstrap.
pub fn plan(clusters: &[AgentView], image: &str, parallel: usize) -> Vec<UpgradeAction> {
    let mut actions = Vec::new();
    let mut in_flight = 0usize;
    let mut candidates: Vec<&AgentView> = Vec::new();
    for c in clusters {
        if !c.bootstrapped || !c.joined || c.deleting || c.paused {
            continue;
        }
        match &c.upgrading {
            Some((to, at)) if to == image => {
                if reconnected(c, image, *at) {
                    actions.push(UpgradeAction::Done(c.name.clone()));
                } else {
                    in_flight += 1;
                }
            }
            // Upgrading to an image no longer configured: upgrade again.
            Some(_) => candidates.push(c),
            None if c.installed.as_deref() != Some(image) => candidates.push(c),
            None => {}
        }
    }
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    let room = parallel.max(1).saturating_sub(in_flight);
    actions.extend(
        candidates
            .into_iter()
            .take(room)
            .map(|c| UpgradeAction::Start(c.name.clone())),
    );
    actions
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
            assert_eq!(plan(&clusters, NEW, parallel), want, "{name}");
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
            plan(std::slice::from_ref(&c), image, 1),
            vec![UpgradeAction::Done("a".into())]
        );
        let c = AgentView {
            connected_since: Some(199),
            ..c
        };
        assert_eq!(plan(&[c], image, 1), vec![]);
    }
}
