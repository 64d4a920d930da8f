use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;

use super::*;

const T0: i64 = 1_780_000_000;

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_unix_seconds(secs)
}

fn rev(c: char) -> SetRevision {
    SetRevision::new(c.to_string().repeat(10)).unwrap()
}

fn u() -> SetRevision {
    rev('b')
}

fn c() -> SetRevision {
    rev('a')
}

fn wave(name: &str, ring: Option<&str>, concurrency: u32, failures: u32) -> WavePlan {
    WavePlan {
        name: name.into(),
        selector: ring.map(|r| LabelSelector::labels([("ring", r)])),
        max_concurrency: Some(IntOrPercent::Count(concurrency)),
        max_failures: Some(IntOrPercent::Count(failures)),
        progress_deadline: Duration::from_secs(600),
        min_soak_time: Duration::ZERO,
        gate_open: true,
        manual_gate: false,
    }
}

fn final_wave() -> WavePlan {
    wave(FINAL_WAVE_NAME, None, 100, 0)
}

fn plan(waves: Vec<WavePlan>) -> RolloutPlan {
    RolloutPlan {
        strategy: RolloutStrategy::Progressive,
        waves,
        paused: false,
        on_failure: OnFailure::Pause,
        max_new_per_reconcile: 50,
        current_revision: Some(c()),
        update_revision: u(),
        aborted: false,
    }
}

fn cluster(name: &str, ring: &str) -> ClusterObservation {
    ClusterObservation {
        name: name.into(),
        labels: [("ring".to_owned(), ring.to_owned())].into(),
        availability: Availability::Active,
        reachable: true,
        render_error: None,
        child: Some(child(
            c(),
            T0 - 3600,
            ChildHealth::Ready {
                since: ts(T0 - 3000),
            },
        )),
    }
}

fn child(revision: SetRevision, promoted: i64, health: ChildHealth) -> ChildObservation {
    ChildObservation {
        revision: Some(revision),
        promoted_at: Some(ts(promoted)),
        health,
    }
}

fn ready_since(secs: i64) -> ChildHealth {
    ChildHealth::Ready { since: ts(secs) }
}

fn failed() -> ChildHealth {
    ChildHealth::Failed {
        message: "upgrade retries exhausted".into(),
    }
}

/// The cluster at the update revision with the given health, promoted at `promoted`.
fn at_u(mut obs: ClusterObservation, promoted: i64, health: ChildHealth) -> ClusterObservation {
    obs.child = Some(child(u(), promoted, health));
    obs
}

fn promoted(d: &Decisions) -> Vec<(&str, &str, PromotionKind)> {
    d.promotions
        .iter()
        .map(|p| (p.cluster.as_str(), p.revision.as_str(), p.kind))
        .collect()
}

fn condition<'a>(d: &'a Decisions, type_: &str) -> Option<&'a ConditionReport> {
    d.report.conditions.iter().find(|c| c.type_ == type_)
}

fn state_of(d: &Decisions, wave: &str) -> WaveState {
    d.report
        .waves
        .iter()
        .find(|w| w.name == wave)
        .unwrap_or_else(|| panic!("no wave {wave}"))
        .state
}

const U: &str = "bbbbbbbbbb";
const C: &str = "aaaaaaaaaa";

#[test]
fn never_more_than_max_concurrency_in_flight_in_a_wave() {
    let p = plan(vec![wave("canary", Some("canary"), 3, 0), final_wave()]);
    let mut obs: Vec<_> = (0..10)
        .map(|i| cluster(&format!("c{i}"), "canary"))
        .collect();
    obs[4] = at_u(obs[4].clone(), T0 - 60, ChildHealth::Progressing);
    let d = decide(&p, &obs, &ts(T0));
    assert_eq!(
        promoted(&d),
        [
            ("c0", U, PromotionKind::Update),
            ("c1", U, PromotionKind::Update)
        ]
    );
    assert_eq!(state_of(&d, "canary"), WaveState::Progressing);
    // The in-flight cluster's deadline is when the clock changes the decision.
    assert_eq!(d.requeue_after, Some(Duration::from_secs(540)));
}

#[test]
fn a_percentage_rounds_down_but_never_below_one() {
    let mut w = wave("eu", None, 0, 0);
    w.max_concurrency = Some(IntOrPercent::Percent(25));
    let p = plan(vec![w.clone()]);
    let obs: Vec<_> = (0..3).map(|i| cluster(&format!("c{i}"), "x")).collect();
    assert_eq!(decide(&p, &obs, &ts(T0)).promotions.len(), 1);
    let obs: Vec<_> = (0..9).map(|i| cluster(&format!("c{i}"), "x")).collect();
    assert_eq!(decide(&p, &obs, &ts(T0)).promotions.len(), 2);
}

#[test]
fn the_next_wave_waits_until_the_wave_is_complete_and_soaked() {
    let mut canary = wave("canary", Some("canary"), 1, 0);
    canary.min_soak_time = Duration::from_secs(600);
    let p = plan(vec![canary, wave("rest", None, 5, 0)]);
    let in_flight = vec![
        at_u(cluster("c0", "canary"), T0 - 60, ChildHealth::Progressing),
        cluster("r0", "prod"),
    ];
    let d = decide(&p, &in_flight, &ts(T0));
    assert!(d.promotions.is_empty(), "{:?}", d.promotions);
    assert_eq!(state_of(&d, "rest"), WaveState::Pending);

    let soaking = vec![
        at_u(cluster("c0", "canary"), T0 - 120, ready_since(T0 - 60)),
        cluster("r0", "prod"),
    ];
    let d = decide(&p, &soaking, &ts(T0));
    assert!(d.promotions.is_empty());
    assert_eq!(state_of(&d, "canary"), WaveState::Soaking);
    assert_eq!(d.requeue_after, Some(Duration::from_secs(540)));
    assert_eq!(d.report.waves[0].soak_until, Some(ts(T0 + 540)));
    assert_eq!(condition(&d, "Ready").unwrap().reason, reason::WAVE_SOAKING);

    let d = decide(&p, &soaking, &ts(T0 + 540));
    assert_eq!(promoted(&d), [("r0", U, PromotionKind::Update)]);
    assert_eq!(state_of(&d, "canary"), WaveState::Complete);
    assert_eq!(d.report.current_wave.as_deref(), Some("rest"));
}

#[test]
fn nothing_is_promoted_after_a_breach_with_pause() {
    let p = plan(vec![wave("canary", Some("canary"), 2, 0), final_wave()]);
    let obs = vec![
        at_u(cluster("c0", "canary"), T0 - 60, failed()),
        cluster("c1", "canary"),
        cluster("r0", "prod"),
    ];
    let d = decide(&p, &obs, &ts(T0));
    assert!(d.promotions.is_empty(), "{:?}", d.promotions);
    assert!(!d.abort && !d.completed);
    assert_eq!(state_of(&d, "canary"), WaveState::Failed);
    let stalled = condition(&d, "Stalled").unwrap();
    assert_eq!(
        (stalled.status, stalled.reason),
        (ConditionStatus::True, reason::MAX_FAILURES_EXCEEDED)
    );
    assert!(
        stalled
            .message
            .contains("Wave canary: 1 of 2 clusters failed, more than maxFailures 0"),
        "{}",
        stalled.message
    );
    assert_eq!(
        condition(&d, "RolloutPaused").unwrap().status,
        ConditionStatus::True
    );
    assert_eq!(
        condition(&d, "RolloutDegraded").unwrap().status,
        ConditionStatus::True
    );
    assert_eq!(d.report.failed_clusters[0].cluster, "c0");
    assert_eq!(
        d.report.failed_clusters[0].reason,
        FailureReason::ReleaseFailed
    );
}

#[test]
fn failures_within_max_failures_let_the_wave_complete() {
    let p = plan(vec![wave("canary", Some("canary"), 2, 1), final_wave()]);
    let obs = vec![
        at_u(cluster("c0", "canary"), T0 - 60, failed()),
        at_u(cluster("c1", "canary"), T0 - 60, ready_since(T0 - 30)),
        cluster("r0", "prod"),
    ];
    let d = decide(&p, &obs, &ts(T0));
    assert_eq!(promoted(&d), [("r0", U, PromotionKind::Update)]);
    let degraded = condition(&d, "RolloutDegraded").unwrap();
    assert_eq!(
        (degraded.status, degraded.reason),
        (ConditionStatus::True, reason::CLUSTERS_FAILED)
    );
}

#[test]
fn a_paused_cluster_holds_no_slot_and_does_not_block_its_wave() {
    let p = plan(vec![wave("eu", Some("eu"), 1, 0), final_wave()]);
    let mut paused = at_u(cluster("a", "eu"), T0 - 60, ChildHealth::Progressing);
    paused.availability = Availability::Paused;
    let mut paused_behind = cluster("b", "eu");
    paused_behind.availability = Availability::Paused;
    let obs = vec![
        paused.clone(),
        paused_behind.clone(),
        cluster("c", "eu"),
        cluster("r", "prod"),
    ];
    let d = decide(&p, &obs, &ts(T0));
    assert_eq!(promoted(&d), [("c", U, PromotionKind::Update)]);
    assert_eq!(d.report.summary.paused, 2);
    let done = vec![
        paused,
        paused_behind,
        at_u(cluster("c", "eu"), T0 - 60, ready_since(T0 - 10)),
        cluster("r", "prod"),
    ];
    let d = decide(&p, &done, &ts(T0));
    assert_eq!(promoted(&d), [("r", U, PromotionKind::Update)]);
}

#[test]
fn a_deleted_cluster_is_dropped_and_never_counted_as_a_failure() {
    let p = plan(vec![wave("eu", None, 1, 0)]);
    let mut gone = at_u(cluster("a", "eu"), T0 - 6000, failed());
    gone.availability = Availability::Deleting;
    let d = decide(&p, &[gone, cluster("b", "eu")], &ts(T0));
    assert_eq!(promoted(&d), [("b", U, PromotionKind::Update)]);
    assert_eq!(d.report.summary.desired, 1);
    assert_eq!(d.report.summary.failed, 0);
}

#[test]
fn an_offline_cluster_keeps_its_slot_until_its_deadline_then_times_out() {
    let p = plan(vec![wave("eu", None, 1, 1)]);
    let mut offline = at_u(cluster("a", "eu"), T0 - 300, ChildHealth::Progressing);
    offline.reachable = false;
    let obs = vec![offline, cluster("b", "eu")];
    let d = decide(&p, &obs, &ts(T0));
    assert!(d.promotions.is_empty());
    assert_eq!(d.report.summary.unreachable, 1);
    assert_eq!(d.requeue_after, Some(Duration::from_secs(300)));

    // Past its deadline it is timed out: a failure that frees its slot.
    let d = decide(&p, &obs, &ts(T0 + 300));
    assert_eq!(d.timed_out, ["a"]);
    assert_eq!(promoted(&d), [("b", U, PromotionKind::Update)]);
    assert_eq!(d.report.summary.timed_out, 1);
    assert_eq!(
        d.report.failed_clusters[0].reason,
        FailureReason::ProgressDeadlineExceeded
    );
    let degraded = condition(&d, "RolloutDegraded").unwrap();
    assert_eq!(degraded.reason, reason::PROGRESS_DEADLINE_EXCEEDED);

    // With no failure tolerated, the timeout is a breach.
    let strict = plan(vec![wave("eu", None, 1, 0)]);
    let d = decide(&strict, &obs, &ts(T0 + 300));
    assert!(d.promotions.is_empty());
    assert_eq!(
        condition(&d, "Stalled").unwrap().reason,
        reason::MAX_FAILURES_EXCEEDED
    );
}

#[test]
fn a_child_without_its_promotion_time_counts_as_promoted_long_ago() {
    let p = plan(vec![wave("eu", None, 1, 1)]);
    let mut obs = at_u(cluster("a", "eu"), T0, ChildHealth::Progressing);
    obs.child.as_mut().unwrap().promoted_at = None;
    let d = decide(&p, &[obs, cluster("b", "eu")], &ts(T0));
    assert_eq!(d.timed_out, ["a"]);
    assert_eq!(promoted(&d), [("b", U, PromotionKind::Update)]);
}

#[test]
fn clusters_are_promoted_by_name_reachable_first_whatever_the_input_order() {
    let p = plan(vec![wave("eu", None, 3, 0)]);
    let mut offline = cluster("a", "eu");
    offline.reachable = false;
    let obs = vec![
        cluster("d", "eu"),
        offline,
        cluster("c", "eu"),
        cluster("b", "eu"),
    ];
    let d = decide(&p, &obs, &ts(T0));
    assert_eq!(
        promoted(&d),
        [
            ("b", U, PromotionKind::Update),
            ("c", U, PromotionKind::Update),
            ("d", U, PromotionKind::Update)
        ]
    );
    let mut reversed = obs.clone();
    reversed.reverse();
    assert_eq!(decide(&p, &reversed, &ts(T0)), d);
}

#[test]
fn clusters_matching_no_wave_go_to_the_final_wave_after_the_declared_ones() {
    let p = plan(vec![wave("canary", Some("canary"), 5, 0), final_wave()]);
    let obs = vec![cluster("x", "none"), cluster("c0", "canary")];
    let d = decide(&p, &obs, &ts(T0));
    assert_eq!(promoted(&d), [("c0", U, PromotionKind::Update)]);
    assert_eq!(d.report.waves.len(), 2);
    assert_eq!(d.report.waves[1].name, FINAL_WAVE_NAME);
    assert_eq!(d.report.waves[1].clusters, 1);
    assert_eq!(state_of(&d, FINAL_WAVE_NAME), WaveState::Pending);

    let obs = vec![
        cluster("x", "none"),
        at_u(cluster("c0", "canary"), T0 - 60, ready_since(T0 - 1)),
    ];
    let d = decide(&p, &obs, &ts(T0));
    assert_eq!(promoted(&d), [("x", U, PromotionKind::Update)]);
    // An empty final wave is not reported.
    let d = decide(&p, &[cluster("c0", "canary")], &ts(T0));
    assert_eq!(d.report.waves.len(), 1);
}

#[test]
fn a_manual_gate_waits_for_an_approval_of_the_exact_revision() {
    let spec = |approved: Option<&str>| HelmReleaseSetSpec {
        rollout: Some(crate::set::RolloutSpec {
            waves: vec![Wave {
                name: "canary".into(),
                cluster_selector: Some(LabelSelector::labels([("ring", "canary")])),
                gate: Some(GateType::Manual),
                approved_revision: approved.map(str::to_owned),
                ..Wave::default()
            }],
            ..Default::default()
        }),
        ..HelmReleaseSetSpec::default()
    };
    let update = spec(None).revision();
    let status = HelmReleaseSetStatus {
        current_revision: Some(c()),
        ..Default::default()
    };
    let obs = |rev: &SetRevision| {
        let mut canary = cluster("c0", "canary");
        canary.child = Some(child(rev.clone(), T0 - 60, ready_since(T0 - 30)));
        vec![canary, cluster("r0", "prod")]
    };
    for approved in [None, Some(C)] {
        let p = RolloutPlan::new(&spec(approved), &status);
        assert_eq!(
            p.update_revision, update,
            "approvals are not part of the revision"
        );
        let d = decide(&p, &obs(&p.update_revision), &ts(T0));
        assert!(d.promotions.is_empty(), "{approved:?}: {:?}", d.promotions);
        assert_eq!(state_of(&d, "canary"), WaveState::AwaitingApproval);
        let paused = condition(&d, "RolloutPaused").unwrap();
        assert_eq!(
            (paused.status, paused.reason),
            (ConditionStatus::True, reason::AWAITING_APPROVAL)
        );
        assert!(condition(&d, "Reconciling").is_none());
    }
    let p = RolloutPlan::new(&spec(Some(update.as_str())), &status);
    let d = decide(&p, &obs(&update), &ts(T0));
    assert_eq!(
        promoted(&d),
        [("r0", update.as_str(), PromotionKind::Update)]
    );
}

#[test]
fn all_at_once_is_bounded_by_max_new_per_reconcile_and_never_stops_on_failures() {
    let mut p = plan(vec![WavePlan {
        max_concurrency: None,
        max_failures: None,
        ..wave(ALL_AT_ONCE_WAVE_NAME, None, 0, 0)
    }]);
    p.strategy = RolloutStrategy::AllAtOnce;
    p.max_new_per_reconcile = 4;
    let mut obs: Vec<_> = (0..10).map(|i| cluster(&format!("c{i}"), "x")).collect();
    obs[9] = at_u(obs[9].clone(), T0 - 60, failed());
    let d = decide(&p, &obs, &ts(T0));
    assert_eq!(d.promotions.len(), 4);
    assert!(condition(&d, "Stalled").is_none());
    assert_eq!(
        condition(&d, "Reconciling").unwrap().status,
        ConditionStatus::True
    );
}

#[test]
fn max_new_per_reconcile_bounds_a_progressive_wave_too() {
    let mut p = plan(vec![wave("eu", None, 100, 0)]);
    p.max_new_per_reconcile = 2;
    let obs: Vec<_> = (0..10).map(|i| cluster(&format!("c{i}"), "x")).collect();
    assert_eq!(decide(&p, &obs, &ts(T0)).promotions.len(), 2);
}

#[test]
fn paused_rollout_promotes_nothing() {
    let mut p = plan(vec![wave("eu", None, 100, 0)]);
    p.paused = true;
    let d = decide(&p, &[cluster("a", "x")], &ts(T0));
    assert!(d.promotions.is_empty());
    let paused = condition(&d, "RolloutPaused").unwrap();
    assert_eq!(
        (paused.status, paused.reason),
        (ConditionStatus::True, reason::ROLLOUT_PAUSED)
    );
    assert_eq!(
        condition(&d, "Ready").unwrap().status,
        ConditionStatus::False
    );
}

/// What the controller's promotions do to the observation.
fn apply(obs: &mut [ClusterObservation], d: &Decisions, now: i64) {
    for p in &d.promotions {
        let o = obs.iter_mut().find(|o| o.name == p.cluster).unwrap();
        o.child = Some(child(p.revision.clone(), now, ChildHealth::Progressing));
    }
}

#[test]
fn a_restart_resumes_at_the_same_point_and_promotes_nothing_twice() {
    let p = plan(vec![
        wave("canary", Some("canary"), 1, 0),
        wave("rest", None, 2, 0),
    ]);
    let mut obs = vec![
        cluster("c0", "canary"),
        cluster("r0", "prod"),
        cluster("r1", "prod"),
        cluster("r2", "prod"),
    ];
    let first = decide(&p, &obs, &ts(T0));
    // Deciding again on the same observation decides the same (re-applying is a no-op).
    assert_eq!(decide(&p, &obs, &ts(T0)), first);
    apply(&mut obs, &first, T0);
    // The "restarted" controller sees the child at U and promotes nobody else yet.
    let again = decide(&p, &obs, &ts(T0 + 5));
    assert!(again.promotions.is_empty(), "{:?}", again.promotions);
    obs[0].child.as_mut().unwrap().health = ready_since(T0 + 30);
    let next = decide(&p, &obs, &ts(T0 + 60));
    assert_eq!(
        promoted(&next),
        [
            ("r0", U, PromotionKind::Update),
            ("r1", U, PromotionKind::Update)
        ]
    );
    apply(&mut obs, &next, T0 + 60);
    let after = decide(&p, &obs, &ts(T0 + 61));
    assert!(after.promotions.is_empty());
    assert_eq!(after.report.current_wave.as_deref(), Some("rest"));
}

#[test]
fn abort_and_rollback_puts_the_current_revision_back_newest_wave_first_within_budget() {
    let mut p = plan(vec![
        wave("canary", Some("canary"), 1, 0),
        wave("rest", None, 2, 0),
    ]);
    p.on_failure = OnFailure::AbortAndRollback;
    let mut obs = vec![
        at_u(cluster("c0", "canary"), T0 - 900, ready_since(T0 - 800)),
        at_u(cluster("r0", "prod"), T0 - 60, failed()),
        at_u(cluster("r1", "prod"), T0 - 60, ChildHealth::Progressing),
        at_u(cluster("r2", "prod"), T0 - 60, ready_since(T0 - 5)),
        cluster("r3", "prod"),
    ];
    let d = decide(&p, &obs, &ts(T0));
    assert!(d.abort, "the breach starts the abort");
    assert_eq!(
        promoted(&d),
        [
            ("r0", C, PromotionKind::Rollback),
            ("r1", C, PromotionKind::Rollback)
        ]
    );
    assert_eq!(state_of(&d, "rest"), WaveState::RollingBack);
    assert_eq!(
        condition(&d, "Reconciling").unwrap().reason,
        reason::ROLLING_BACK
    );

    // The controller recorded the abort and applied the rollbacks.
    p.aborted = true;
    apply(&mut obs, &d, T0);
    let d = decide(&p, &obs, &ts(T0 + 1));
    assert!(!d.abort);
    assert!(
        d.promotions.is_empty(),
        "two rollbacks in flight fill the wave: {:?}",
        d.promotions
    );
    for o in &mut obs[1..3] {
        o.child.as_mut().unwrap().health = ready_since(T0 + 30);
    }
    let d = decide(&p, &obs, &ts(T0 + 60));
    assert_eq!(promoted(&d), [("r2", C, PromotionKind::Rollback)]);
    apply(&mut obs, &d, T0 + 60);
    obs[3].child.as_mut().unwrap().health = ready_since(T0 + 90);
    // Only once the newest wave is back does the canary go back.
    let d = decide(&p, &obs, &ts(T0 + 120));
    assert_eq!(promoted(&d), [("c0", C, PromotionKind::Rollback)]);
    assert_eq!(state_of(&d, "canary"), WaveState::RollingBack);
    assert_eq!(state_of(&d, "rest"), WaveState::RolledBack);
    apply(&mut obs, &d, T0 + 120);
    let d = decide(&p, &obs, &ts(T0 + 130));
    assert!(d.promotions.is_empty());
    let stalled = condition(&d, "Stalled").unwrap();
    assert_eq!(stalled.reason, reason::ROLLOUT_ABORTED);
    assert!(!d.completed);
}

#[test]
fn abort_without_a_previous_revision_pauses() {
    let mut p = plan(vec![wave("canary", Some("canary"), 1, 0), final_wave()]);
    p.on_failure = OnFailure::AbortAndRollback;
    p.current_revision = None;
    let obs = vec![
        at_u(cluster("c0", "canary"), T0 - 60, failed()),
        cluster("r0", "prod"),
    ];
    let d = decide(&p, &obs, &ts(T0));
    assert!(!d.abort);
    assert!(d.promotions.is_empty());
    assert!(
        condition(&d, "Stalled")
            .unwrap()
            .message
            .contains("no previous revision")
    );
}

#[test]
fn a_cluster_joining_a_wave_not_yet_open_gets_the_current_revision() {
    let p = plan(vec![wave("canary", Some("canary"), 1, 0), final_wave()]);
    let mut newcomer = cluster("n0", "prod");
    newcomer.child = None;
    let mut canary_new = cluster("c1", "canary");
    canary_new.child = None;
    let obs = vec![
        at_u(cluster("c0", "canary"), T0 - 60, ChildHealth::Progressing),
        canary_new,
        newcomer,
    ];
    let d = decide(&p, &obs, &ts(T0));
    // The canary wave is full (one in flight): its newcomer waits for a slot at U.
    assert_eq!(promoted(&d), [("n0", C, PromotionKind::Create)]);
    // A first rollout has no current revision: nothing is created ahead of its wave.
    let mut first = p.clone();
    first.current_revision = None;
    assert!(decide(&first, &obs, &ts(T0)).promotions.is_empty());
}

#[test]
fn a_render_failure_fails_only_its_cluster_once_its_wave_opens() {
    let p = plan(vec![wave("canary", Some("canary"), 1, 0), final_wave()]);
    let mut bad = cluster("r0", "prod");
    bad.render_error =
        Some("template: valuesTemplate:1:3: map has no entry for key \"zone\"".into());
    let obs = vec![cluster("c0", "canary"), bad.clone()];
    let d = decide(&p, &obs, &ts(T0));
    assert_eq!(promoted(&d), [("c0", U, PromotionKind::Update)]);
    assert!(
        condition(&d, "Stalled").is_none(),
        "a later wave's error does not stop the canary"
    );
    assert_eq!(
        d.report.failed_clusters[0].reason,
        FailureReason::RenderFailed
    );

    let obs = vec![
        at_u(cluster("c0", "canary"), T0 - 60, ready_since(T0 - 1)),
        bad,
    ];
    let d = decide(&p, &obs, &ts(T0));
    assert!(d.promotions.is_empty());
    assert_eq!(state_of(&d, FINAL_WAVE_NAME), WaveState::Failed);
}

#[test]
fn a_complete_rollout_is_ready_and_recorded() {
    let p = plan(vec![wave("canary", Some("canary"), 1, 0), final_wave()]);
    let obs = vec![
        at_u(cluster("c0", "canary"), T0 - 60, ready_since(T0 - 50)),
        at_u(cluster("r0", "prod"), T0 - 40, ready_since(T0 - 30)),
    ];
    let d = decide(&p, &obs, &ts(T0));
    assert!(d.completed && d.promotions.is_empty());
    let ready = condition(&d, "Ready").unwrap();
    assert_eq!(
        (ready.status, ready.reason),
        (ConditionStatus::True, reason::ROLLOUT_COMPLETE)
    );
    assert!(condition(&d, "Reconciling").is_none() && condition(&d, "Stalled").is_none());
    assert_eq!(d.report.current_wave, None);
    let s = d.report.summary;
    assert_eq!((s.desired, s.updated, s.ready, s.pending), (2, 2, 2, 0));

    let mut status = HelmReleaseSetStatus::default();
    status.conditions.set_condition(
        "Stalled",
        ConditionStatus::True,
        "MaxFailuresExceeded",
        "old".into(),
        1,
        &ts(T0 - 100),
    );
    d.report.write_to(&mut status, 3, &ts(T0));
    assert!(status.conditions.is_true("Ready"));
    assert!(status.conditions.get_condition("Stalled").is_none());
    assert_eq!(status.summary.ready, 2);
}

#[test]
fn the_status_stays_under_64_kib_at_10000_clusters() {
    let waves: Vec<WavePlan> = (0..crate::set::MAX_WAVES)
        .map(|i| {
            wave(
                &format!("{i:02}-{}", "w".repeat(60)),
                Some(&format!("r{i}")),
                10,
                0,
            )
        })
        .chain(std::iter::once(final_wave()))
        .collect();
    let p = plan(waves);
    let obs: Vec<_> = (0..10_000)
        .map(|i| {
            let name = format!("{i:05}-{}", "c".repeat(240));
            let mut o = at_u(cluster(&name, &format!("r{}", i % 70)), T0 - 60, failed());
            o.child.as_mut().unwrap().health = ChildHealth::Failed {
                message: "x".repeat(40_000),
            };
            o
        })
        .collect();
    let d = decide(&p, &obs, &ts(T0));
    assert_eq!(
        d.report.failed_clusters.len(),
        crate::set::MAX_FAILED_CLUSTERS
    );
    let mut status = HelmReleaseSetStatus {
        observed_generation: 12,
        current_revision: Some(c()),
        update_revision: Some(u()),
        aborted_revision: Some(u()),
        ..Default::default()
    };
    d.report.write_to(&mut status, 12, &ts(T0));
    let bytes = serde_json::to_vec(&status).unwrap().len();
    assert!(bytes < 64 * 1024, "status is {bytes} bytes");
    assert_eq!(status.summary.failed, 10_000);
}

// ---------------------------------------------------------------------------------------
// Properties over random observations.

#[derive(Debug, Clone)]
struct Case {
    plan: RolloutPlan,
    observed: Vec<ClusterObservation>,
    now: i64,
}

fn health() -> impl Strategy<Value = ChildHealth> {
    prop_oneof![
        Just(ChildHealth::Progressing),
        (0i64..2000).prop_map(|a| ChildHealth::Ready { since: ts(T0 - a) }),
        Just(ChildHealth::Failed {
            message: "failed".into()
        }),
    ]
}

fn observation(i: usize) -> impl Strategy<Value = ClusterObservation> {
    (
        0u8..4,
        prop_oneof![6 => Just(Availability::Active), 1 => Just(Availability::Paused), 1 => Just(Availability::Deleting)],
        any::<bool>(),
        prop::option::weighted(0.1, Just("render failed".to_owned())),
        prop::option::of((prop_oneof![Just('a'), Just('b'), Just('c')], 0i64..2000, health())),
    )
        .prop_map(move |(ring, availability, reachable, render_error, child)| ClusterObservation {
            name: format!("c{i:02}"),
            labels: BTreeMap::from([("ring".to_owned(), ring.to_string())]),
            availability,
            reachable,
            render_error,
            child: child.map(|(r, age, health)| ChildObservation {
                revision: Some(rev(r)),
                promoted_at: Some(ts(T0 - age)),
                health,
            }),
        })
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec((1u32..4, 0u32..2, 0u64..300, any::<bool>()), 1..4),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        1usize..6,
        (0usize..25).prop_flat_map(|n| (0..n).map(observation).collect::<Vec<_>>()),
    )
        .prop_map(
            |(waves, all_at_once, paused, abort_on_failure, aborted, max_new, observed)| {
                let mut ws: Vec<WavePlan> = waves
                    .iter()
                    .enumerate()
                    .map(|(i, &(conc, fail, soak, gate))| WavePlan {
                        min_soak_time: Duration::from_secs(soak),
                        gate_open: gate,
                        manual_gate: !gate,
                        ..wave(&format!("w{i}"), Some(&i.to_string()), conc, fail)
                    })
                    .collect();
                ws.push(final_wave());
                let mut p = plan(ws);
                if all_at_once {
                    p.strategy = RolloutStrategy::AllAtOnce;
                    p.waves = vec![WavePlan {
                        max_concurrency: None,
                        max_failures: None,
                        ..wave(ALL_AT_ONCE_WAVE_NAME, None, 0, 0)
                    }];
                }
                p.paused = paused;
                p.on_failure = if abort_on_failure {
                    OnFailure::AbortAndRollback
                } else {
                    OnFailure::Pause
                };
                p.aborted = aborted && abort_on_failure && !all_at_once;
                p.max_new_per_reconcile = max_new;
                Case {
                    plan: p,
                    observed,
                    now: T0,
                }
            },
        )
}

fn wave_index(plan: &RolloutPlan, o: &ClusterObservation) -> usize {
    plan.waves
        .iter()
        .position(|w| w.selector.as_ref().is_none_or(|s| s.matches(&o.labels)))
        .unwrap_or(plan.waves.len() - 1)
}

proptest! {
    #[test]
    fn decisions_keep_every_rule(case in case()) {
        let Case { plan, observed, now } = case;
        let d = decide(&plan, &observed, &ts(now));
        let u = &plan.update_revision;
        prop_assert!(d.promotions.len() <= plan.max_new_per_reconcile);
        let by_name: BTreeMap<&str, &ClusterObservation> =
            observed.iter().map(|o| (o.name.as_str(), o)).collect();
        let mut names = std::collections::BTreeSet::new();
        for p in &d.promotions {
            prop_assert!(names.insert(p.cluster.as_str()), "{} promoted twice", p.cluster);
            let o = by_name[p.cluster.as_str()];
            prop_assert_eq!(o.availability, Availability::Active, "{} is not active", p.cluster);
            if p.kind == PromotionKind::Create {
                prop_assert!(o.child.is_none());
            }
        }
        let to_u: Vec<&Promotion> = d.promotions.iter().filter(|p| &p.revision == u).collect();
        let active = |o: &&ClusterObservation| o.availability == Availability::Active;
        let at = |o: &ClusterObservation, r: &SetRevision| {
            o.child.as_ref().is_some_and(|c| c.revision.as_ref() == Some(r))
        };
        if !to_u.is_empty() {
            prop_assert!(!plan.paused);
            prop_assert!(!plan.aborted);
            prop_assert!(!d.abort);
            prop_assert!(condition(&d, "Stalled").is_none(), "promoted during a breach");
            // One wave only, and every earlier wave is done.
            let waves: std::collections::BTreeSet<&str> = to_u.iter().map(|p| p.wave.as_str()).collect();
            prop_assert_eq!(waves.len(), 1);
            let j = plan.waves.iter().position(|w| waves.contains(w.name.as_str())).unwrap();
            for o in observed.iter().filter(active) {
                let i = wave_index(&plan, o);
                if i < j {
                    prop_assert!(at(o, u) || o.render_error.is_some(), "{} of wave {i} is behind while wave {j} is promoted", o.name);
                    let in_flight = o.child.as_ref().is_some_and(|c| c.health == ChildHealth::Progressing)
                        && now < o.child.as_ref().unwrap().promoted_at.as_ref().unwrap().unix_seconds()
                            + plan.waves[i].progress_deadline.as_secs() as i64;
                    prop_assert!(!in_flight, "{} of wave {i} is in flight", o.name);
                }
            }
            for i in 0..j {
                prop_assert!(plan.waves[i].gate_open, "wave {i}'s gate is closed");
            }
            // Concurrency: in flight after the promotions stays within the limit.
            let w = &plan.waves[j];
            if let Some(limit) = w.max_concurrency {
                let members: Vec<&ClusterObservation> = observed
                    .iter()
                    .filter(|o| o.availability != Availability::Deleting && wave_index(&plan, o) == j)
                    .collect();
                let limit = limit.of(members.len()).max(1);
                let in_flight = members
                    .iter()
                    .filter(|o| o.availability == Availability::Active && at(o, u))
                    .filter(|o| {
                        let c = o.child.as_ref().unwrap();
                        c.health == ChildHealth::Progressing
                            && now < c.promoted_at.as_ref().unwrap().unix_seconds() + w.progress_deadline.as_secs() as i64
                    })
                    .count();
                prop_assert!(in_flight + to_u.len() <= limit, "{in_flight} + {} > {limit}", to_u.len());
            }
        }
        for p in d.promotions.iter().filter(|p| p.kind == PromotionKind::Rollback) {
            prop_assert_eq!(Some(&p.revision), plan.current_revision.as_ref());
            prop_assert!(at(by_name[p.cluster.as_str()], u));
        }

        // Deterministic: the order of the observations does not matter.
        let mut reversed = observed.clone();
        reversed.reverse();
        prop_assert_eq!(&decide(&plan, &reversed, &ts(now)), &d);

        // Applying the promotions and deciding again promotes none of them twice.
        let mut after = observed.clone();
        apply(&mut after, &d, now);
        let mut plan2 = plan.clone();
        plan2.aborted |= d.abort;
        let again = decide(&plan2, &after, &ts(now));
        for p in &again.promotions {
            prop_assert!(!names.contains(p.cluster.as_str()), "{} promoted again", p.cluster);
        }
    }
}
