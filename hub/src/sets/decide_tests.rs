use super::*;
use flotilla_core::set::WaveStatus;
use serde_json::json;

fn child(generation: i64, observed: i64, conditions: Value) -> HelmRelease {
    serde_json::from_value(json!({
        "apiVersion": "helm.flotilla.dev/v1", "kind": "HelmRelease",
        "metadata": {"name": "web-edge-1", "namespace": "apps", "generation": generation,
            "labels": {REVISION_LABEL: "0123456789"},
            "annotations": {PROMOTED_AT_ANNOTATION: "2026-01-01T00:00:00Z"}},
        "spec": {"interval": "5m"},
        "status": {"observedGeneration": observed, "conditions": conditions},
    }))
    .unwrap()
}

fn cond(t: &str, status: &str, reason: &str, generation: i64, at: &str) -> Value {
    json!({"type": t, "status": status, "reason": reason, "message": format!("{t} {reason}"),
        "observedGeneration": generation, "lastTransitionTime": at})
}

const T1: &str = "2026-01-01T00:01:00Z";
const T2: &str = "2026-01-01T00:02:00Z";

fn ready_since(at: &str) -> ChildHealth {
    ChildHealth::Ready {
        since: Timestamp::new(at).unwrap(),
    }
}

#[test]
fn a_childs_health_is_its_state_at_its_current_generation() {
    let failed = |m: &str| ChildHealth::Failed { message: m.into() };
    let cases: Vec<(&str, HelmRelease, ChildHealth)> = vec![
        (
            "Ready for its generation",
            child(
                2,
                2,
                json!([cond("Ready", "True", "UpgradeSucceeded", 2, T1)]),
            ),
            ready_since(T1),
        ),
        (
            "Ready for an older generation: the new spec is not reached yet",
            child(
                3,
                2,
                json!([cond("Ready", "True", "UpgradeSucceeded", 2, T1)]),
            ),
            ChildHealth::Progressing,
        ),
        (
            "reconciling again on an unchanged spec, Released at this generation: still Ready",
            child(
                2,
                2,
                json!([
                    cond("Ready", "Unknown", "Progressing", 2, T2),
                    cond("Reconciling", "True", "Progressing", 2, T2),
                    cond("Released", "True", "UpgradeSucceeded", 2, T1),
                ]),
            ),
            ready_since(T1),
        ),
        (
            "reconciling a new generation: progressing",
            child(
                3,
                2,
                json!([
                    cond("Ready", "Unknown", "Progressing", 3, T2),
                    cond("Released", "True", "UpgradeSucceeded", 2, T1),
                ]),
            ),
            ChildHealth::Progressing,
        ),
        (
            "Stalled: failed, with the Ready message",
            child(
                2,
                2,
                json!([
                    cond("Ready", "False", "RetriesExceeded", 2, T1),
                    cond("Stalled", "True", "RetriesExceeded", 2, T1),
                ]),
            ),
            failed("Ready RetriesExceeded"),
        ),
        (
            "remediation failed without Stalled",
            child(
                2,
                2,
                json!([cond("Ready", "False", "RollbackFailed", 2, T1)]),
            ),
            failed("Ready RollbackFailed"),
        ),
        (
            "Remediated False",
            child(
                2,
                2,
                json!([
                    cond("Ready", "False", "UpgradeFailed", 2, T1),
                    cond("Remediated", "False", "RollbackFailed", 2, T1),
                ]),
            ),
            failed("Ready UpgradeFailed"),
        ),
        (
            "an upgrade failure being retried: progressing",
            child(
                2,
                2,
                json!([cond("Ready", "False", "UpgradeFailed", 2, T1)]),
            ),
            ChildHealth::Progressing,
        ),
        (
            "a Stalled of an older generation does not fail the new one",
            child(
                3,
                2,
                json!([
                    cond("Ready", "Unknown", "Progressing", 3, T2),
                    cond("Stalled", "True", "RetriesExceeded", 2, T1),
                ]),
            ),
            ChildHealth::Progressing,
        ),
        (
            "Ready but tests failed: not Ready",
            child(
                2,
                2,
                json!([
                    cond("Ready", "True", "UpgradeSucceeded", 2, T1),
                    cond("TestSuccess", "False", "TestFailed", 2, T1),
                ]),
            ),
            ChildHealth::Progressing,
        ),
        (
            "no status yet",
            child(1, 0, json!([])),
            ChildHealth::Progressing,
        ),
    ];
    for (what, hr, want) in cases {
        assert_eq!(child_health(&hr), want, "{what}");
    }
}

#[test]
fn a_childs_memory_is_its_revision_label_and_promotion_time_malformed_as_none() {
    let mut hr = child(1, 0, json!([]));
    let o = child_observation(&hr);
    assert_eq!(o.revision, Some(SetRevision::new("0123456789").unwrap()));
    assert_eq!(
        o.promoted_at,
        Some(Timestamp::new("2026-01-01T00:00:00Z").unwrap())
    );
    hr.labels_mut()
        .insert(REVISION_LABEL.into(), "NOT-A-REV".into());
    hr.annotations_mut()
        .insert(PROMOTED_AT_ANNOTATION.into(), "yesterday".into());
    let o = child_observation(&hr);
    assert_eq!((o.revision, o.promoted_at), (None, None));
}

fn facts(accepted: bool, deleting: bool) -> ClusterFacts {
    ClusterFacts {
        name: "edge-1".into(),
        accepted,
        deleting,
        connected: true,
        ..Default::default()
    }
}

#[test]
fn availability_is_deleting_then_paused_when_not_accepted_or_suspended() {
    let suspend = |s: Option<bool>| TargetCustomization {
        suspend: s,
        ..Default::default()
    };
    let cases = [
        (facts(true, false), None, Availability::Active),
        (facts(false, false), None, Availability::Paused),
        (facts(true, true), None, Availability::Deleting),
        (facts(false, true), None, Availability::Deleting),
        (
            facts(true, false),
            Some(suspend(Some(true))),
            Availability::Paused,
        ),
        (
            facts(true, false),
            Some(suspend(Some(false))),
            Availability::Active,
        ),
        (
            facts(true, false),
            Some(suspend(None)),
            Availability::Active,
        ),
    ];
    for (f, c, want) in cases {
        assert_eq!(availability(&f, c.as_ref()), want, "{f:?} {c:?}");
    }
}

#[test]
fn a_child_whose_cluster_left_is_uninstalled_or_orphaned_and_one_whose_cluster_is_gone_dropped() {
    use StopMatchingPolicy::{Orphan, Uninstall};
    let live = facts(true, false);
    let deleting = facts(true, true);
    let cases = [
        (true, Some(&live), Uninstall, ChildFate::Keep),
        (true, Some(&live), Orphan, ChildFate::Keep),
        (false, Some(&live), Uninstall, ChildFate::Uninstall),
        (false, Some(&live), Orphan, ChildFate::Orphan),
        (true, Some(&deleting), Uninstall, ChildFate::Drop),
        (false, Some(&deleting), Orphan, ChildFate::Drop),
        (false, None, Uninstall, ChildFate::Drop),
        (true, None, Orphan, ChildFate::Drop),
    ];
    for (targeted, cluster, policy, want) in cases {
        assert_eq!(
            child_fate(targeted, cluster, policy),
            want,
            "{targeted} {cluster:?} {policy:?}"
        );
    }
}

#[test]
fn a_spec_differs_when_a_field_the_set_writes_was_changed_not_when_one_was_defaulted() {
    let desired = json!({"interval": "5m", "values": {"a": 1, "b": {"c": "x"}},
        "install": {"remediation": {"retries": 3}}, "dependsOn": [{"name": "db"}]});
    let cases = [
        ("identical", desired.clone(), false),
        (
            "defaulted fields added",
            json!({"interval": "5m", "timeout": "5m", "values": {"a": 1, "b": {"c": "x"}},
                "install": {"remediation": {"retries": 3}, "crds": "Create"},
                "dependsOn": [{"name": "db", "namespace": "apps"}]}),
            false,
        ),
        (
            "a value changed by hand",
            json!({"interval": "5m", "values": {"a": 2, "b": {"c": "x"}},
                "install": {"remediation": {"retries": 3}}, "dependsOn": [{"name": "db"}]}),
            true,
        ),
        (
            "a field removed",
            json!({"interval": "5m", "values": {"a": 1, "b": {"c": "x"}}, "dependsOn": [{"name": "db"}]}),
            true,
        ),
        (
            "a list entry added",
            json!({"interval": "5m", "values": {"a": 1, "b": {"c": "x"}},
                "install": {"remediation": {"retries": 3}}, "dependsOn": [{"name": "db"}, {"name": "cache"}]}),
            true,
        ),
        (
            "suspended by hand",
            {
                let mut v = desired.clone();
                v["suspend"] = json!(true);
                v
            },
            false,
        ),
    ];
    for (what, actual, want) in cases {
        assert_eq!(spec_differs(&desired, &actual), want, "{what}");
    }
    // Suspend is a field the set writes when it is set (a customization): then it differs.
    let mut d2 = desired.clone();
    d2["suspend"] = json!(false);
    let mut a2 = desired;
    a2["suspend"] = json!(true);
    assert!(spec_differs(&d2, &a2));
}

#[test]
fn revisions_are_numbered_up_and_trimmed_to_the_limit_keeping_current_and_update() {
    let r = |name: &str, number| StoredRevision {
        name: name.into(),
        number,
    };
    let existing = vec![
        r("s-a", 1),
        r("s-b", 2),
        r("s-c", 3),
        r("s-d", 4),
        r("s-e", 5),
    ];
    assert_eq!(next_revision_number(&existing), 6);
    assert_eq!(next_revision_number(&[]), 1);
    let keep = |names: &[&str]| names.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let cases: Vec<(Vec<String>, u32, Vec<&str>)> = vec![
        (keep(&[]), 5, vec![]),
        (keep(&[]), 2, vec!["s-a", "s-b", "s-c"]),
        // current (old) and update kept beyond the limit
        (keep(&["s-a", "s-e"]), 1, vec!["s-b", "s-c"]),
        (keep(&["s-e"]), 0, vec!["s-a", "s-b", "s-c", "s-d"]),
    ];
    for (keep, limit, want) in cases {
        assert_eq!(
            revisions_to_trim(&existing, &keep, limit),
            want,
            "{keep:?} {limit}"
        );
    }
}

fn wave(name: &str, state: WaveState) -> WaveStatus {
    WaveStatus {
        name: name.into(),
        state,
        clusters: 2,
        updated: 0,
        ready: 0,
        failed: 0,
        in_flight: 0,
        soak_until: None,
    }
}

fn status(
    rev: &str,
    waves: Vec<WaveStatus>,
    paused: Option<&str>,
    ready: Option<&str>,
) -> HelmReleaseSetStatus {
    let now = Timestamp::new(T1).unwrap();
    let mut s = HelmReleaseSetStatus {
        update_revision: Some(SetRevision::new(rev).unwrap()),
        waves,
        ..Default::default()
    };
    if let Some(r) = paused {
        s.conditions.set_condition(
            set_conditions::ROLLOUT_PAUSED,
            ConditionStatus::True,
            r,
            format!("paused: {r}"),
            1,
            &now,
        );
    }
    if let Some(r) = ready {
        s.conditions.set_condition(
            condition::READY,
            ConditionStatus::True,
            r,
            "all done".into(),
            1,
            &now,
        );
    }
    s
}

#[test]
fn events_say_wave_started_completed_paused_aborted_and_rollout_completed_once() {
    use WaveState::*;
    const R1: &str = "1111111111";
    const R2: &str = "2222222222";
    let reasons = |e: Vec<SetEvent>| {
        e.into_iter()
            .map(|e| (e.reason, e.warning))
            .collect::<Vec<_>>()
    };
    let started = (event_reason::WAVE_STARTED, false);
    let completed = (event_reason::WAVE_COMPLETED, false);
    let paused = (event_reason::ROLLOUT_PAUSED, false);
    let breach = (event_reason::ROLLOUT_PAUSED, true);
    let aborted = (event_reason::ROLLOUT_ABORTED, true);
    let done = (event_reason::ROLLOUT_COMPLETED, false);
    let cases = vec![
        (
            "the first wave starts",
            status(R1, vec![], None, None),
            status(
                R1,
                vec![wave("canary", Progressing), wave("rest", Pending)],
                None,
                None,
            ),
            false,
            vec![started],
        ),
        (
            "no change, no Event",
            status(R1, vec![wave("canary", Progressing)], None, None),
            status(R1, vec![wave("canary", Progressing)], None, None),
            false,
            vec![],
        ),
        (
            "the canary completes and waits for approval",
            status(
                R1,
                vec![wave("canary", Progressing), wave("rest", Pending)],
                None,
                None,
            ),
            status(
                R1,
                vec![wave("canary", AwaitingApproval), wave("rest", Pending)],
                Some("AwaitingApproval"),
                None,
            ),
            false,
            vec![completed, paused],
        ),
        (
            "approved: the next wave starts, the canary stays completed",
            status(
                R1,
                vec![wave("canary", AwaitingApproval), wave("rest", Pending)],
                Some("AwaitingApproval"),
                None,
            ),
            status(
                R1,
                vec![wave("canary", Complete), wave("rest", Progressing)],
                None,
                None,
            ),
            false,
            vec![started],
        ),
        (
            "the last wave completes: the rollout too",
            status(
                R1,
                vec![wave("canary", Complete), wave("rest", Progressing)],
                None,
                None,
            ),
            status(
                R1,
                vec![wave("canary", Complete), wave("rest", Complete)],
                None,
                Some("RolloutComplete"),
            ),
            false,
            vec![completed, done],
        ),
        (
            "a breach pauses, with a Warning",
            status(R1, vec![wave("canary", Progressing)], None, None),
            status(
                R1,
                vec![wave("canary", Failed)],
                Some("MaxFailuresExceeded"),
                None,
            ),
            false,
            vec![breach],
        ),
        (
            "an abort",
            status(
                R1,
                vec![wave("canary", Failed)],
                Some("MaxFailuresExceeded"),
                None,
            ),
            status(R1, vec![wave("canary", RollingBack)], None, None),
            true,
            vec![aborted],
        ),
        (
            "a new revision starts from nothing",
            status(
                R1,
                vec![wave("canary", Complete)],
                None,
                Some("RolloutComplete"),
            ),
            status(R2, vec![wave("canary", Progressing)], None, None),
            false,
            vec![started],
        ),
    ];
    for (what, before, after, abort, want) in cases {
        assert_eq!(reasons(set_events(&before, &after, abort)), want, "{what}");
    }
}

#[test]
fn a_refused_spec_is_ready_false_stalled_true_with_the_message_capped() {
    let mut s = HelmReleaseSetStatus::default();
    let now = Timestamp::new(T1).unwrap();
    s.conditions.set_condition(
        condition::RECONCILING,
        ConditionStatus::True,
        "Progressing",
        "x".into(),
        1,
        &now,
    );
    invalid_spec_status(
        &mut s,
        "HelmReleaseSet a/b: spec.clusterSelector: bad",
        2,
        &now,
    );
    let ready = s.conditions.get_condition(condition::READY).unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str(), ready.message.as_str()),
        (
            ConditionStatus::False,
            "InvalidSpec",
            "HelmReleaseSet a/b: spec.clusterSelector: bad"
        )
    );
    assert!(s.conditions.is_true(condition::STALLED));
    assert!(s.conditions.get_condition(condition::RECONCILING).is_none());
    assert_eq!(s.observed_generation, 2);
    invalid_spec_status(&mut s, &"é".repeat(1000), 2, &now);
    assert!(
        s.conditions.message_of(condition::READY).len()
            <= flotilla_core::set::MAX_STATUS_MESSAGE_LEN
    );
}

#[test]
fn clusters_left_out_by_tenancy_are_named_in_a_condition_that_goes_when_they_do() {
    let now = Timestamp::new("2026-01-02T03:04:05Z").unwrap();
    let mut status = HelmReleaseSetStatus::default();
    super::denied_condition(&mut status, "team-a", &[], 1, &now);
    assert!(
        status
            .conditions
            .get_condition(super::CLUSTERS_DENIED)
            .is_none()
    );

    let denied = vec![
        "edge-2".to_owned(),
        "edge-1".to_owned(),
        "edge-1".to_owned(),
    ];
    super::denied_condition(&mut status, "team-a", &denied, 2, &now);
    let c = status
        .conditions
        .get_condition(super::CLUSTERS_DENIED)
        .expect("set");
    assert_eq!(c.status, ConditionStatus::True);
    assert_eq!(c.reason, "AccessDenied");
    assert_eq!(
        c.message,
        "2 selected cluster(s) left out: namespace 'team-a' is not bound to ManagedCluster 'edge-1', 'edge-2'; create a ManagedClusterBinding that selects both"
    );

    let many: Vec<String> = (0..25).map(|i| format!("edge-{i:02}")).collect();
    super::denied_condition(&mut status, "team-a", &many, 3, &now);
    let c = status
        .conditions
        .get_condition(super::CLUSTERS_DENIED)
        .expect("set");
    assert!(
        c.message.starts_with("25 selected cluster(s)"),
        "{}",
        c.message
    );
    assert!(c.message.contains("'edge-09' and 15 more"), "{}", c.message);

    super::denied_condition(&mut status, "team-a", &[], 4, &now);
    assert!(
        status
            .conditions
            .get_condition(super::CLUSTERS_DENIED)
            .is_none()
    );
}
