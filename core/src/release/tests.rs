//! Table tests of the decision function and scenario tests of whole reconciles against a
//! simulated Helm storage.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Value, json};

use super::*;
use crate::digest::Algorithm;
use crate::ids::{ChartDigest, Namespace, PlanRevision, ReleaseName};
use crate::meta::Condition;
use crate::plan::{ChartArtifact, ReleaseRecord};
use crate::spec::HelmRelease;
use crate::status::{HookPhase, ResourceInventory, ResourceRef, TestHookStatus};

// ---------------------------------------------------------------------------------------
// Fixtures

fn now() -> Timestamp {
    Timestamp::new("2026-01-01T00:00:00Z").unwrap()
}

fn hr(spec_extra: Value) -> HelmRelease {
    let mut spec = json!({
        "interval": "10m",
        "chart": {"spec": {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}},
        "values": {"replicaCount": 2}
    });
    if let (Value::Object(s), Value::Object(extra)) = (&mut spec, spec_extra) {
        s.extend(extra);
    }
    HelmRelease::from_value(json!({
        "apiVersion": "helm.flotilla.dev/v1",
        "kind": "HelmRelease",
        "metadata": {"name": "podinfo", "namespace": "default", "generation": 1},
        "spec": spec
    }))
    .unwrap()
}

fn chart(version: &str) -> ChartArtifact {
    ChartArtifact {
        name: "podinfo".into(),
        version: version.into(),
        app_version: Some(version.into()),
        digest: ChartDigest::of_bytes(version.as_bytes()),
        oci_digest: None,
    }
}

fn plan_with(spec_extra: Value) -> ReleasePlan {
    let h = hr(spec_extra);
    let values = h.spec.values.clone().unwrap_or(json!({}));
    ReleasePlan::from_helm_release(&h, PlanRevision::FIRST, chart("6.5.0"), values).unwrap()
}

fn plan() -> ReleasePlan {
    plan_with(json!({}))
}

/// A stand-in for the observation digest: any change of the observed fields changes it.
fn observation_digest(r: &ReleaseRecord, oci: &str) -> Digest {
    let text = format!(
        "{}|{}|{}|{}|{}|{}|{}",
        r.name, r.version, r.status, r.chart_name, r.chart_version, r.config_digest, oci
    );
    Algorithm::Sha256.digest(text.as_bytes())
}

fn record(
    version: u32,
    status: StorageStatus,
    chart_version: &str,
    values: &Value,
) -> ReleaseRecord {
    let mut r = ReleaseRecord {
        name: ReleaseName::new("podinfo").unwrap(),
        namespace: Namespace::new("default").unwrap(),
        version,
        status,
        chart_name: "podinfo".into(),
        chart_version: chart_version.into(),
        app_version: chart_version.into(),
        config_digest: digest::config_digest(values),
        digest: Algorithm::Sha256.digest(b""),
        first_deployed: Some(now()),
        last_deployed: Some(now()),
        deleted: None,
        test_hooks: BTreeMap::new(),
    };
    r.digest = observation_digest(&r, "");
    r
}

fn desired_values() -> Value {
    json!({"replicaCount": 2})
}

fn deployed(version: u32) -> ReleaseRecord {
    record(version, StorageStatus::Deployed, "6.5.0", &desired_values())
}

fn snap(r: &ReleaseRecord, action: Option<ReleaseAction>) -> Snapshot {
    r.to_snapshot(action, "")
}

fn tested(mut s: Snapshot, phase: HookPhase) -> Snapshot {
    let mut hooks = BTreeMap::new();
    hooks.insert(
        "podinfo-test".to_owned(),
        TestHookStatus {
            last_started: Some(now()),
            last_completed: Some(now()),
            phase: Some(phase),
        },
    );
    s.test_hooks = Some(hooks);
    s
}

fn observed(current: Option<ReleaseRecord>, history: Vec<Snapshot>) -> Observed {
    Observed {
        current,
        rollback_target: None,
        drift: DriftObservation::NotChecked,
        status: HelmReleaseStatus {
            history,
            observed_generation: 1,
            last_attempted_generation: 1,
            last_attempted_revision: "6.5.0".into(),
            last_attempted_config_digest: digest::config_digest(&desired_values()).to_string(),
            storage_namespace: "default".into(),
            ..HelmReleaseStatus::default()
        },
    }
}

/// A healthy v1 release recorded in history.
fn in_sync() -> Observed {
    let cur = deployed(1);
    let s = snap(&cur, Some(ReleaseAction::Install));
    let mut o = observed(Some(cur), vec![s]);
    o.status.last_attempted_release_action = Some(ReleaseAction::Install);
    o
}

/// v2 failed after an upgrade from the deployed v1.
fn failed_upgrade(upgrade_failures: i64) -> Observed {
    let v1 = record(1, StorageStatus::Superseded, "6.4.0", &desired_values());
    let v2 = record(2, StorageStatus::Failed, "6.5.0", &desired_values());
    let mut o = observed(
        Some(v2.clone()),
        vec![
            snap(&v2, Some(ReleaseAction::Upgrade)),
            snap(&v1, Some(ReleaseAction::Install)),
        ],
    );
    o.rollback_target = Some(v1);
    o.status.last_attempted_release_action = Some(ReleaseAction::Upgrade);
    o.status.upgrade_failures = upgrade_failures;
    o.status.failures = upgrade_failures;
    o
}

/// v1 failed on install.
fn failed_install(install_failures: i64) -> Observed {
    let v1 = record(1, StorageStatus::Failed, "6.5.0", &desired_values());
    let mut o = observed(
        Some(v1.clone()),
        vec![snap(&v1, Some(ReleaseAction::Install))],
    );
    o.status.last_attempted_release_action = Some(ReleaseAction::Install);
    o.status.install_failures = install_failures;
    o.status.failures = install_failures;
    o
}

fn upgrade(cause: UpgradeCause) -> Action {
    Action::Upgrade { cause }
}

fn retries_exceeded(context: &'static str) -> Action {
    Action::Stalled(Stall::RetriesExceeded { context })
}

fn cond<'a>(status: &'a HelmReleaseStatus, t: &str) -> &'a Condition {
    status
        .conditions
        .get_condition(t)
        .unwrap_or_else(|| panic!("no {t} condition in {:#?}", status.conditions))
}

// ---------------------------------------------------------------------------------------
// Table: state → action

#[test]
fn decision_table_covers_every_state_of_the_reference() {
    let rollback_to_v1 = |o: &Observed| Action::Rollback {
        target: Box::new(o.status.history[1].clone()),
    };
    type Case = (
        &'static str,
        ReleasePlan,
        Observed,
        Box<dyn Fn(&Observed) -> Action>,
    );
    let fixed = |a: Action| -> Box<dyn Fn(&Observed) -> Action> { Box::new(move |_| a.clone()) };
    let cases: Vec<Case> = vec![
        (
            "no release in storage is installed",
            plan(),
            observed(None, vec![]),
            fixed(Action::Install),
        ),
        (
            "an uninstalled release without history is installed again",
            plan(),
            observed(
                Some(record(3, StorageStatus::Uninstalled, "6.5.0", &json!({}))),
                vec![],
            ),
            fixed(Action::Install),
        ),
        (
            "an uninstalled release of ours is installed again",
            plan(),
            {
                let r = record(1, StorageStatus::Uninstalled, "6.5.0", &desired_values());
                observed(Some(r.clone()), vec![snap(&r, None)])
            },
            fixed(Action::Install),
        ),
        (
            "a release made outside flotilla is adopted with an upgrade",
            plan(),
            observed(Some(deployed(4)), vec![]),
            fixed(upgrade(UpgradeCause::Adopt)),
        ),
        (
            "a release whose digest does not match our snapshot is adopted",
            plan(),
            {
                let mut o = in_sync();
                o.status.history[0].digest = Algorithm::Sha256.digest(b"other").to_string();
                o
            },
            fixed(upgrade(UpgradeCause::Adopt)),
        ),
        (
            "a snapshot with an unparseable digest is adopted",
            plan(),
            {
                let mut o = in_sync();
                o.status.history[0].digest = "nonsense".into();
                o
            },
            fixed(upgrade(UpgradeCause::Adopt)),
        ),
        (
            "a legacy snapshot skips digest verification",
            plan(),
            {
                let mut o = in_sync();
                o.status.history[0].digest = "nonsense".into();
                o.status.history[0].api_version = String::new();
                o
            },
            fixed(Action::None(Settled::InSync)),
        ),
        (
            "pending install is unlocked",
            plan(),
            observed(
                Some(record(
                    1,
                    StorageStatus::PendingInstall,
                    "6.5.0",
                    &json!({}),
                )),
                vec![],
            ),
            fixed(Action::Unlock {
                status: StorageStatus::PendingInstall,
            }),
        ),
        (
            "pending upgrade is unlocked even with history",
            plan(),
            {
                let mut o = in_sync();
                o.current = Some(record(
                    2,
                    StorageStatus::PendingUpgrade,
                    "6.5.0",
                    &desired_values(),
                ));
                o
            },
            fixed(Action::Unlock {
                status: StorageStatus::PendingUpgrade,
            }),
        ),
        (
            "pending rollback is unlocked",
            plan(),
            observed(
                Some(record(
                    3,
                    StorageStatus::PendingRollback,
                    "6.5.0",
                    &json!({}),
                )),
                vec![],
            ),
            fixed(Action::Unlock {
                status: StorageStatus::PendingRollback,
            }),
        ),
        (
            "a superseded newest release cannot be classified",
            plan(),
            {
                let mut o = in_sync();
                let r = record(1, StorageStatus::Superseded, "6.5.0", &desired_values());
                o.status.history = vec![snap(&r, None)];
                o.current = Some(r);
                o
            },
            fixed(Action::Error(
                "unable to determine state for release with status 'superseded'".into(),
            )),
        ),
        (
            "an in-sync release needs nothing",
            plan(),
            in_sync(),
            fixed(Action::None(Settled::InSync)),
        ),
        (
            "a new chart version upgrades",
            plan(),
            {
                let mut o = in_sync();
                let r = record(1, StorageStatus::Deployed, "6.4.0", &desired_values());
                o.status.history = vec![snap(&r, None)];
                o.current = Some(r);
                o
            },
            fixed(upgrade(UpgradeCause::OutOfSync("release chart changed"))),
        ),
        (
            "changed values upgrade",
            plan(),
            {
                let mut o = in_sync();
                let r = record(
                    1,
                    StorageStatus::Deployed,
                    "6.5.0",
                    &json!({"replicaCount": 1}),
                );
                o.status.history = vec![snap(&r, None)];
                o.current = Some(r);
                o
            },
            fixed(upgrade(UpgradeCause::OutOfSync(
                "release config values changed",
            ))),
        ),
        (
            "changed post renderers upgrade once the generation moved",
            plan_with(
                json!({"postRenderers": [{"kustomize": {"images": [{"name": "x", "newTag": "2"}]}}]}),
            ),
            {
                let mut o = in_sync();
                o.status.observed_generation = 0;
                o
            },
            fixed(upgrade(UpgradeCause::OutOfSync(
                "postrenderers digest has changed",
            ))),
        ),
        (
            "changed post renderers are ignored while the generation is observed",
            plan_with(
                json!({"postRenderers": [{"kustomize": {"images": [{"name": "x", "newTag": "2"}]}}]}),
            ),
            in_sync(),
            fixed(Action::None(Settled::InSync)),
        ),
        (
            "changed common metadata upgrade once the generation moved",
            plan_with(json!({"commonMetadata": {"labels": {"team": "a"}}})),
            {
                let mut o = in_sync();
                o.status.observed_generation = 0;
                o
            },
            fixed(upgrade(UpgradeCause::OutOfSync(
                "common metadata digest has changed",
            ))),
        ),
        (
            "an untested release is tested",
            plan_with(json!({"test": {"enable": true}})),
            in_sync(),
            fixed(Action::Test),
        ),
        (
            "a release with running tests is still untested",
            plan_with(json!({"test": {"enable": true}})),
            {
                let mut o = in_sync();
                o.status.history[0] = tested(o.status.history[0].clone(), HookPhase::Running);
                o
            },
            fixed(Action::Test),
        ),
        (
            "a release with passed tests is in sync",
            plan_with(json!({"test": {"enable": true}})),
            {
                let mut o = in_sync();
                o.status.history[0] = tested(o.status.history[0].clone(), HookPhase::Succeeded);
                o
            },
            fixed(Action::None(Settled::InSync)),
        ),
        (
            "a failed test is remediated like a failed install",
            plan_with(
                json!({"test": {"enable": true}, "install": {"remediation": {"retries": 1}}}),
            ),
            {
                let mut o = in_sync();
                o.status.history[0] = tested(o.status.history[0].clone(), HookPhase::Failed);
                o.status.install_failures = 1;
                o
            },
            fixed(Action::UninstallRemediation),
        ),
        (
            "a failed test is ignored with test.ignoreFailures",
            plan_with(json!({"test": {"enable": true, "ignoreFailures": true}})),
            {
                let mut o = in_sync();
                o.status.history[0] = tested(o.status.history[0].clone(), HookPhase::Failed);
                o
            },
            fixed(Action::None(Settled::InSync)),
        ),
        (
            "remediation.ignoreTestFailures overrides test.ignoreFailures",
            plan_with(json!({"test": {"enable": true, "ignoreFailures": true},
                "install": {"remediation": {"ignoreTestFailures": false}}})),
            {
                let mut o = in_sync();
                o.status.history[0] = tested(o.status.history[0].clone(), HookPhase::Failed);
                o.status.install_failures = 1;
                o
            },
            fixed(retries_exceeded("cannot remediate failed release")),
        ),
        (
            "drift detection is asked for before declaring in sync",
            plan_with(json!({"driftDetection": {"mode": "enabled"}})),
            in_sync(),
            fixed(Action::DetectDrift),
        ),
        (
            "no drift is in sync",
            plan_with(json!({"driftDetection": {"mode": "enabled"}})),
            {
                let mut o = in_sync();
                o.drift = DriftObservation::NoDrift;
                o
            },
            fixed(Action::None(Settled::InSync)),
        ),
        (
            "drift is corrected in enabled mode",
            plan_with(json!({"driftDetection": {"mode": "enabled"}})),
            {
                let mut o = in_sync();
                o.drift = DriftObservation::Drifted {
                    summary:
                        "Deployment/default/podinfo changed (0 additions, 1 changes, 0 removals)"
                            .into(),
                };
                o
            },
            fixed(Action::CorrectDrift {
                summary: "Deployment/default/podinfo changed (0 additions, 1 changes, 0 removals)"
                    .into(),
            }),
        ),
        (
            "drift is only reported in warn mode",
            plan_with(json!({"driftDetection": {"mode": "warn"}})),
            {
                let mut o = in_sync();
                o.drift = DriftObservation::Drifted {
                    summary: "x".into(),
                };
                o
            },
            fixed(Action::None(Settled::DriftWarned)),
        ),
        (
            "a drift detection error is a state error",
            plan_with(json!({"driftDetection": {"mode": "warn"}})),
            {
                let mut o = in_sync();
                o.drift = DriftObservation::Error {
                    message: "forbidden".into(),
                };
                o
            },
            fixed(Action::Error(
                "unable to determine cluster state: forbidden".into(),
            )),
        ),
        (
            "disabled drift detection never asks",
            plan_with(json!({"driftDetection": {"mode": "disabled"}})),
            in_sync(),
            fixed(Action::None(Settled::InSync)),
        ),
        (
            "a failed upgrade without remediation config stalls",
            plan(),
            failed_upgrade(1),
            fixed(retries_exceeded("cannot remediate failed release")),
        ),
        (
            "a failed upgrade with retries left rolls back to the previous release",
            plan_with(json!({"upgrade": {"remediation": {"retries": 3}}})),
            failed_upgrade(1),
            Box::new(rollback_to_v1),
        ),
        (
            "negative retries remediate forever",
            plan_with(json!({"upgrade": {"remediation": {"retries": -1}}})),
            failed_upgrade(1000),
            Box::new(rollback_to_v1),
        ),
        (
            "exhausted retries remediate the last failure when asked",
            plan_with(
                json!({"upgrade": {"remediation": {"retries": 1, "remediateLastFailure": true}}}),
            ),
            failed_upgrade(2),
            Box::new(rollback_to_v1),
        ),
        (
            "upgrade retries imply remediating the last failure",
            plan_with(json!({"upgrade": {"remediation": {"retries": 2}}})),
            failed_upgrade(3),
            Box::new(rollback_to_v1),
        ),
        (
            "remediateLastFailure false stalls once retries are exhausted",
            plan_with(
                json!({"upgrade": {"remediation": {"retries": 2, "remediateLastFailure": false}}}),
            ),
            failed_upgrade(3),
            fixed(retries_exceeded("cannot remediate failed release")),
        ),
        (
            "the uninstall strategy uninstalls a failed upgrade",
            plan_with(json!({"upgrade": {"remediation": {"retries": 1, "strategy": "uninstall"}}})),
            failed_upgrade(1),
            fixed(Action::UninstallRemediation),
        ),
        (
            "a missing rollback target stalls",
            plan_with(json!({"upgrade": {"remediation": {"retries": 1}}})),
            {
                let mut o = failed_upgrade(1);
                o.status.history.truncate(1);
                o
            },
            fixed(Action::Stalled(Stall::MissingRollbackTarget)),
        ),
        (
            "a rollback target gone from storage is upgraded instead",
            plan_with(json!({"upgrade": {"remediation": {"retries": 1}}})),
            {
                let mut o = failed_upgrade(1);
                o.rollback_target = None;
                o
            },
            fixed(upgrade(UpgradeCause::RollbackTargetUnverified(
                ERR_RELEASE_DISAPPEARED,
            ))),
        ),
        (
            "a rollback target changed in storage is upgraded instead",
            plan_with(json!({"upgrade": {"remediation": {"retries": 1}}})),
            {
                let mut o = failed_upgrade(1);
                if let Some(t) = o.rollback_target.as_mut() {
                    t.digest = Algorithm::Sha256.digest(b"tampered");
                }
                o
            },
            fixed(upgrade(UpgradeCause::RollbackTargetUnverified(
                ERR_RELEASE_NOT_OBSERVED,
            ))),
        ),
        (
            "a previous release with failed tests is no rollback target",
            plan_with(json!({"upgrade": {"remediation": {"retries": 1}}})),
            {
                let mut o = failed_upgrade(1);
                o.status.history[1] = tested(o.status.history[1].clone(), HookPhase::Failed);
                o
            },
            fixed(Action::Stalled(Stall::MissingRollbackTarget)),
        ),
        (
            "a failed install with retries left is uninstalled",
            plan_with(json!({"install": {"remediation": {"retries": 2}}})),
            failed_install(1),
            fixed(Action::UninstallRemediation),
        ),
        (
            "a failed install with the default remediation stalls",
            plan(),
            failed_install(1),
            fixed(retries_exceeded("cannot remediate failed release")),
        ),
        (
            "the retry strategy upgrades a failed install",
            plan_with(json!({"install": {"strategy": {"name": "RetryOnFailure"}}})),
            failed_install(7),
            fixed(upgrade(UpgradeCause::RetryFailed)),
        ),
        (
            "a failed release nobody attempted is upgraded",
            plan(),
            {
                let mut o = failed_upgrade(1);
                o.status.last_attempted_release_action = None;
                o
            },
            fixed(upgrade(UpgradeCause::NoActiveRemediation)),
        ),
        (
            "a failed release after a counter reset is upgraded",
            plan(),
            failed_upgrade(0),
            fixed(upgrade(UpgradeCause::FailuresReset)),
        ),
        (
            "install retries exhausted stall an absent release",
            plan_with(json!({"install": {"remediation": {"retries": 2}}})),
            {
                let mut o = observed(None, vec![]);
                o.status.install_failures = 3;
                o.status.last_attempted_release_action = Some(ReleaseAction::Install);
                o
            },
            fixed(retries_exceeded("cannot install release")),
        ),
        (
            "upgrade retries exhausted stall an out-of-sync release",
            plan(),
            {
                let mut o = in_sync();
                let r = record(1, StorageStatus::Deployed, "6.4.0", &desired_values());
                o.status.history = vec![snap(&r, None)];
                o.current = Some(r);
                o.status.upgrade_failures = 1;
                o
            },
            fixed(retries_exceeded("cannot upgrade release")),
        ),
        (
            "a suspended release does nothing",
            plan_with(json!({"suspend": true})),
            observed(None, vec![]),
            fixed(Action::None(Settled::Suspended)),
        ),
    ];
    for (name, plan, observed, expected) in cases {
        let want = expected(&observed);
        assert_eq!(next_action(&plan, &observed), want, "{name}");
    }
}

fn with_force(mut plan: ReleasePlan, token: &str) -> ReleasePlan {
    plan.requests.requested_at = Some(token.into());
    plan.requests.force_at = Some(token.into());
    plan
}

#[test]
fn force_annotation_installs_when_install_retries_are_exhausted() {
    let p = with_force(plan(), "t1");
    let mut o = observed(None, vec![]);
    o.status.install_failures = 5;
    o.status.last_attempted_release_action = Some(ReleaseAction::Install);
    assert_eq!(next_action(&p, &o), Action::Install);
}

#[test]
fn force_annotation_upgrades_an_exhausted_out_of_sync_release() {
    let p = with_force(plan(), "t1");
    let mut o = in_sync();
    let r = record(1, StorageStatus::Deployed, "6.4.0", &desired_values());
    o.status.history = vec![snap(&r, None)];
    o.current = Some(r);
    o.status.upgrade_failures = 9;
    assert_eq!(next_action(&p, &o), upgrade(UpgradeCause::Forced));
}

#[test]
fn force_annotation_upgrades_a_failed_release_instead_of_stalling() {
    let p = with_force(plan(), "t1");
    assert_eq!(
        next_action(&p, &failed_upgrade(1)),
        upgrade(UpgradeCause::Forced)
    );
}

#[test]
fn force_annotation_upgrades_an_in_sync_release_once() {
    let p = with_force(plan(), "t1");
    let mut o = in_sync();
    let d = decide(&p, &o);
    assert_eq!(d.action, upgrade(UpgradeCause::Forced));
    apply_decision(&p, &d, &mut o.status, &now());
    assert_eq!(o.status.last_handled_force_at, "t1");
    assert_eq!(next_action(&p, &o), Action::None(Settled::InSync));
}

#[test]
fn force_annotation_needs_a_matching_unhandled_reconcile_request() {
    let mut p = with_force(plan(), "t1");
    p.requests.requested_at = Some("t0".into());
    assert_eq!(next_action(&p, &in_sync()), Action::None(Settled::InSync));

    let p = with_force(plan(), "t1");
    let mut o = in_sync();
    o.status.last_handled_reconcile_at = "t1".into();
    assert_eq!(next_action(&p, &o), Action::None(Settled::InSync));
}

#[test]
fn unmanaged_release_loses_its_history_when_adopted() {
    let p = plan();
    let mut o = in_sync();
    o.status.history[0].digest = Algorithm::Sha256.digest(b"other").to_string();
    let d = decide(&p, &o);
    apply_decision(&p, &d, &mut o.status, &now());
    assert!(o.status.history.is_empty());
}

#[test]
fn stalled_decision_marks_stalled_with_the_attempt_count() {
    let p = plan();
    let mut o = failed_upgrade(1);
    let d = decide(&p, &o);
    apply_decision(&p, &d, &mut o.status, &now());
    let s = cond(&o.status, condition::STALLED);
    assert_eq!(s.reason, reason::RETRIES_EXCEEDED);
    assert_eq!(s.message, "Failed to upgrade after 1 attempt(s)");
}

#[test]
fn missing_rollback_target_stalls_with_the_flux_message() {
    let p = plan_with(json!({"upgrade": {"remediation": {"retries": 1}}}));
    let mut o = failed_upgrade(1);
    o.status.history.truncate(1);
    let d = decide(&p, &o);
    apply_decision(&p, &d, &mut o.status, &now());
    let s = cond(&o.status, condition::STALLED);
    assert_eq!(s.reason, reason::MISSING_ROLLBACK_TARGET);
    assert_eq!(
        s.message,
        "Failed to perform remediation: missing target release for rollback: cannot remediate failed release"
    );
}

#[test]
fn state_errors_set_ready_false_with_state_error() {
    let p = plan();
    let mut o = in_sync();
    let r = record(1, StorageStatus::Superseded, "6.5.0", &desired_values());
    o.status.history = vec![snap(&r, None)];
    o.current = Some(r);
    let d = decide(&p, &o);
    apply_decision(&p, &d, &mut o.status, &now());
    let ready = cond(&o.status, condition::READY);
    assert_eq!(ready.status, ConditionStatus::False);
    assert_eq!(ready.reason, reason::STATE_ERROR);
    assert_eq!(
        ready.message,
        "Could not determine release state: unable to determine state for release with status 'superseded'"
    );
}

#[test]
fn drifted_release_gets_a_drifted_condition() {
    let p = plan_with(json!({"driftDetection": {"mode": "warn"}}));
    let mut o = in_sync();
    o.drift = DriftObservation::Drifted {
        summary: "Deployment/default/podinfo removed".into(),
    };
    let d = decide(&p, &o);
    apply_decision(&p, &d, &mut o.status, &now());
    let c = cond(&o.status, condition::DRIFTED);
    assert_eq!(c.status, ConditionStatus::True);
    assert_eq!(
        c.message,
        "Cluster state of release default/podinfo.v1 has drifted from the desired state:\nDeployment/default/podinfo removed"
    );
}

#[test]
fn in_sync_history_is_truncated_to_the_previous_good_release() {
    let p = plan();
    let v1 = record(1, StorageStatus::Superseded, "6.3.0", &desired_values());
    let v2 = record(2, StorageStatus::Superseded, "6.4.0", &desired_values());
    let v3 = deployed(3);
    let mut o = observed(
        Some(v3.clone()),
        vec![snap(&v3, None), snap(&v2, None), snap(&v1, None)],
    );
    let d = decide(&p, &o);
    assert_eq!(d.action, Action::None(Settled::InSync));
    apply_decision(&p, &d, &mut o.status, &now());
    let versions: Vec<u32> = o.status.history.iter().map(|s| s.version).collect();
    assert_eq!(versions, [3, 2]);
}

#[test]
fn rollback_candidate_skips_failed_releases() {
    let p = plan();
    let v1 = deployed(1);
    let v2 = record(2, StorageStatus::Failed, "6.5.0", &desired_values());
    let v3 = record(3, StorageStatus::Failed, "6.5.0", &desired_values());
    let o = observed(
        Some(v3.clone()),
        vec![snap(&v3, None), snap(&v2, None), snap(&v1, None)],
    );
    assert_eq!(
        rollback_candidate(&p, &o.status).map(|s| s.version),
        Some(1)
    );
}

// ---------------------------------------------------------------------------------------
// Counters and tokens at the start of a reconcile

#[test]
fn new_generation_resets_the_failure_counters() {
    let mut p = plan();
    p.generation = 2;
    let mut st = failed_upgrade(3).status;
    assert_eq!(
        begin_reconcile(&p, &mut st),
        Begin::Proceed {
            reset: Some(ResetReason::Generation)
        }
    );
    assert_eq!((st.failures, st.upgrade_failures), (0, 0));
    assert_eq!(st.last_attempted_generation, 2);
}

#[test]
fn new_chart_version_resets_the_failure_counters() {
    let mut p = plan();
    p.chart = chart("6.6.0");
    let mut st = failed_upgrade(3).status;
    assert_eq!(
        begin_reconcile(&p, &mut st),
        Begin::Proceed {
            reset: Some(ResetReason::ChartVersion)
        }
    );
    assert_eq!(st.upgrade_failures, 0);
    assert_eq!(st.last_attempted_revision, "6.6.0");
}

#[test]
fn changed_values_reset_the_failure_counters() {
    let mut p = plan();
    p.values = json!({"replicaCount": 3});
    p.config_digest = digest::config_digest(&p.values);
    let mut st = failed_upgrade(3).status;
    assert_eq!(
        begin_reconcile(&p, &mut st),
        Begin::Proceed {
            reset: Some(ResetReason::Values)
        }
    );
    assert_eq!(st.last_attempted_config_digest, p.config_digest.to_string());
}

#[test]
fn reset_annotation_resets_the_failure_counters_once() {
    let mut p = plan();
    p.requests.requested_at = Some("r1".into());
    p.requests.reset_at = Some("r1".into());
    let mut st = failed_upgrade(3).status;
    assert_eq!(
        begin_reconcile(&p, &mut st),
        Begin::Proceed {
            reset: Some(ResetReason::Requested)
        }
    );
    assert_eq!(st.last_handled_reset_at, "r1");
    st.upgrade_failures = 2;
    assert_eq!(begin_reconcile(&p, &mut st), Begin::Proceed { reset: None });
    assert_eq!(st.upgrade_failures, 2);
}

#[test]
fn unchanged_desired_state_keeps_the_counters() {
    let p = plan();
    let mut st = failed_upgrade(3).status;
    assert_eq!(begin_reconcile(&p, &mut st), Begin::Proceed { reset: None });
    assert_eq!(st.upgrade_failures, 3);
}

#[test]
fn changed_release_name_uninstalls_the_old_release_first() {
    let p = plan_with(json!({"releaseName": "renamed"}));
    let mut st = in_sync().status;
    match begin_reconcile(&p, &mut st) {
        Begin::UninstallPrevious(Action::Uninstall {
            cause,
            name,
            storage_namespace,
        }) => {
            assert_eq!(cause, UninstallCause::ReleaseTargetChanged);
            assert_eq!(name, "podinfo");
            assert_eq!(storage_namespace, "default");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn changed_chart_name_reinstalls_unless_updated_in_place() {
    let mut p = plan();
    p.chart.name = "podinfo-ng".into();
    let mut st = in_sync().status;
    assert!(matches!(
        begin_reconcile(&p, &mut st),
        Begin::UninstallPrevious(_)
    ));

    let mut p = plan_with(json!({"upgrade": {"chartNameChangeStrategy": "InPlaceUpdate"}}));
    p.chart.name = "podinfo-ng".into();
    let mut st = in_sync().status;
    assert!(matches!(
        begin_reconcile(&p, &mut st),
        Begin::Proceed { .. }
    ));
}

#[test]
fn deletion_of_a_never_installed_release_uninstalls_nothing() {
    let p = plan();
    assert_eq!(
        uninstall_for_deletion(&p, &HelmReleaseStatus::default()),
        None
    );
    assert!(uninstall_for_deletion(&p, &in_sync().status).is_some());
}

// ---------------------------------------------------------------------------------------
// Scenarios: whole reconciles against a simulated Helm storage

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    Succeed,
    /// Fails after writing a failed release (or failed test results).
    FailWritten,
    /// Fails before touching storage.
    FailUnwritten,
}

fn sim_inventory(version: u32) -> ResourceInventory {
    ResourceInventory {
        entries: vec![ResourceRef::new(
            "default",
            &format!("podinfo-v{version}"),
            "apps/v1",
            "Deployment",
        )],
    }
}

#[derive(Debug)]
struct Sim {
    plan: ReleasePlan,
    status: HelmReleaseStatus,
    storage: Vec<ReleaseRecord>,
    drift: DriftObservation,
    behaviours: VecDeque<Behaviour>,
    log: Vec<String>,
    /// How many times the driver asked for the status to be persisted.
    persists: usize,
}

impl Sim {
    fn new(plan: ReleasePlan) -> Self {
        Self {
            plan,
            status: HelmReleaseStatus::default(),
            storage: Vec::new(),
            drift: DriftObservation::NoDrift,
            behaviours: VecDeque::new(),
            log: Vec::new(),
            persists: 0,
        }
    }

    fn script(&mut self, b: &[Behaviour]) {
        self.behaviours.extend(b.iter().copied());
    }

    fn current(&self) -> Option<&ReleaseRecord> {
        self.storage.iter().max_by_key(|r| r.version)
    }

    fn seal(&self, mut r: ReleaseRecord) -> ReleaseRecord {
        let oci = observation_oci_digest(&self.status, r.version).to_owned();
        r.digest = observation_digest(&r, &oci);
        r
    }

    fn observe(&self, drift: DriftObservation) -> Observed {
        let rollback_target = rollback_candidate(&self.plan, &self.status).and_then(|s| {
            self.storage
                .iter()
                .find(|r| r.version == s.version)
                .cloned()
        });
        Observed {
            current: self.current().cloned().map(|r| self.seal(r)),
            rollback_target: rollback_target.map(|r| self.seal(r)),
            drift,
            status: self.status.clone(),
        }
    }

    fn next_behaviour(&mut self) -> Behaviour {
        self.behaviours.pop_front().unwrap_or(Behaviour::Succeed)
    }

    fn put(&mut self, r: ReleaseRecord) -> ReleaseRecord {
        let r = self.seal(r);
        self.storage.retain(|x| x.version != r.version);
        self.storage.push(r.clone());
        r
    }

    fn new_release(&mut self, b: Behaviour) -> Outcome {
        let version = self.current().map_or(1, |c| c.version + 1);
        match b {
            Behaviour::FailUnwritten => Outcome::failed("rendering failed", vec![]),
            Behaviour::FailWritten => {
                let r = record(
                    version,
                    StorageStatus::Failed,
                    &self.plan.chart.version,
                    &self.plan.values,
                );
                let w = self.put(r);
                Outcome::failed("timed out waiting for the condition", vec![w])
            }
            Behaviour::Succeed => {
                let mut writes = Vec::new();
                if let Some(mut prev) = self
                    .storage
                    .iter()
                    .find(|r| r.status == StorageStatus::Deployed)
                    .cloned()
                {
                    prev.status = StorageStatus::Superseded;
                    writes.push(self.put(prev));
                }
                let r = record(
                    version,
                    StorageStatus::Deployed,
                    &self.plan.chart.version,
                    &self.plan.values,
                );
                writes.push(self.put(r));
                Outcome::succeeded(writes)
            }
        }
    }

    /// Runs the action; a release write reports the inventory of the newest record (one
    /// Deployment named after its version).
    fn execute(&mut self, action: &Action) -> Outcome {
        let mut outcome = self.execute_action(action);
        let releases = matches!(
            action,
            Action::Install | Action::Upgrade { .. } | Action::Rollback { .. }
        );
        if releases && let Some(v) = outcome.writes.iter().map(|w| w.version).max() {
            outcome.inventory = Some(sim_inventory(v));
        }
        outcome
    }

    fn execute_action(&mut self, action: &Action) -> Outcome {
        self.log.push(action.name().to_owned());
        match action {
            Action::Install | Action::Upgrade { .. } => {
                let b = self.next_behaviour();
                self.new_release(b)
            }
            Action::Test => {
                let b = self.next_behaviour();
                let Some(mut cur) = self.current().cloned() else {
                    return Outcome::failed("no release", vec![]);
                };
                let phase = if b == Behaviour::Succeed {
                    HookPhase::Succeeded
                } else {
                    HookPhase::Failed
                };
                cur.test_hooks.insert(
                    "podinfo-test".into(),
                    TestHookStatus {
                        last_started: Some(now()),
                        last_completed: Some(now()),
                        phase: Some(phase),
                    },
                );
                let w = self.put(cur);
                if b == Behaviour::Succeed {
                    Outcome::succeeded(vec![w])
                } else {
                    Outcome::failed("1 error occurred:\n\t* pod podinfo-test failed", vec![w])
                }
            }
            Action::Rollback { target } => {
                let b = self.next_behaviour();
                let Some(t) = self
                    .storage
                    .iter()
                    .find(|r| r.version == target.version)
                    .cloned()
                else {
                    return Outcome::failed("release not found", vec![]);
                };
                let version = self.current().map_or(1, |c| c.version + 1);
                let mut writes = Vec::new();
                if let Some(mut cur) = self.current().cloned() {
                    cur.status = StorageStatus::Superseded;
                    writes.push(self.put(cur));
                }
                let mut new = t.clone();
                new.version = version;
                new.status = if b == Behaviour::Succeed {
                    StorageStatus::Deployed
                } else {
                    StorageStatus::Failed
                };
                new.test_hooks.clear();
                writes.push(self.put(new));
                if b == Behaviour::Succeed {
                    Outcome::succeeded(writes)
                } else {
                    Outcome::failed("rollback failed", writes)
                }
            }
            Action::UninstallRemediation | Action::Uninstall { .. } => {
                let Some(mut cur) = self.current().cloned() else {
                    return Outcome::not_found();
                };
                cur.status = StorageStatus::Uninstalled;
                let w = self.seal(cur);
                self.storage.clear();
                Outcome::succeeded(vec![w])
            }
            Action::Unlock { .. } => {
                let Some(mut cur) = self.current().cloned() else {
                    return Outcome::not_found();
                };
                cur.status = StorageStatus::Failed;
                let w = self.put(cur);
                Outcome::succeeded(vec![w])
            }
            Action::CorrectDrift { .. } => {
                self.drift = DriftObservation::NoDrift;
                Outcome::succeeded(vec![])
            }
            other => panic!("not executable: {other:?}"),
        }
    }

    /// One reconcile, as the agent runs it: the driver decides, the simulator acts.
    fn reconcile(&mut self) -> Step {
        let t = now();
        let plan = self.plan.clone();
        let mut driver = Driver::new(&plan, self.status.clone());
        loop {
            match driver.next(&t) {
                Next::Observe { .. } => {
                    self.status = driver.status().clone();
                    let observed = self.observe(DriftObservation::NotChecked);
                    driver.observed(observed.current, observed.rollback_target);
                }
                Next::DetectDrift => driver.drift(self.drift.clone()),
                Next::Persist => {
                    self.persists += 1;
                    driver.persisted();
                }
                Next::Run { action, .. } => {
                    self.status = driver.status().clone();
                    let outcome = self.execute(&action);
                    driver.completed(&action, &outcome, &t);
                }
                Next::Done(_) => break,
            }
            assert!(self.log.len() < 50, "runaway loop: {:?}", self.log);
        }
        let finished = driver.finish();
        self.status = finished.status;
        finished.step
    }

    fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }
}

#[test]
fn the_driver_persists_before_each_action_and_at_the_end_only() {
    let mut sim = Sim::new(plan_with(json!({"test": {"enable": true}})));
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["install", "test"]);
    // Before the install, before the test, and the final status.
    assert_eq!(sim.persists, 3);
    sim.persists = 0;
    // In sync: one decision, one write of the final status.
    assert_eq!(sim.reconcile(), Step::Done);
    assert!(sim.take_log().is_empty());
    assert_eq!(sim.persists, 1);
}

#[test]
fn a_suspended_plan_is_neither_acted_on_nor_persisted() {
    let mut sim = Sim::new(plan_with(json!({"suspend": true})));
    assert_eq!(sim.reconcile(), Step::Done);
    assert!(sim.take_log().is_empty());
    assert_eq!(sim.persists, 0);
    assert_eq!(sim.status, HelmReleaseStatus::default());
}

#[test]
fn a_driver_stopped_at_a_safe_point_runs_nothing_more_and_requeues() {
    let p = plan_with(json!({"test": {"enable": true}}));
    let t = now();
    let mut driver = Driver::new(&p, HelmReleaseStatus::default());
    assert!(matches!(driver.next(&t), Next::Observe { .. }));
    driver.observed(None, None);
    assert_eq!(driver.next(&t), Next::Persist);
    driver.persisted();
    assert!(matches!(
        driver.next(&t),
        Next::Run {
            action: Action::Install,
            ..
        }
    ));
    driver.completed(
        &Action::Install,
        &Outcome::succeeded(vec![record(
            1,
            StorageStatus::Deployed,
            "6.5.0",
            &desired_values(),
        )]),
        &t,
    );
    // The test would come next: stop here instead.
    driver.stop();
    assert_eq!(driver.next(&t), Next::Persist);
    driver.persisted();
    assert_eq!(driver.next(&t), Next::Done(Step::Requeue));
    let finished = driver.finish();
    assert_eq!(finished.actions, ["install"]);
    assert_eq!(finished.step, Step::Requeue);
    assert_eq!(finished.status.history.len(), 1);
}

#[test]
fn new_release_is_installed_and_ready_in_one_reconcile() {
    let mut sim = Sim::new(plan());
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["install"]);
    let released = cond(&sim.status, condition::RELEASED);
    assert_eq!(released.reason, reason::INSTALL_SUCCEEDED);
    assert_eq!(
        released.message,
        "Helm install succeeded for release default/podinfo.v1 with chart podinfo@6.5.0"
    );
    let ready = cond(&sim.status, condition::READY);
    assert_eq!(ready.status, ConditionStatus::True);
    assert_eq!(ready.message, released.message);
    assert!(
        sim.status
            .conditions
            .get_condition(condition::RECONCILING)
            .is_none()
    );
    assert_eq!(sim.status.history.len(), 1);
    assert_eq!(sim.status.history[0].action, Some(ReleaseAction::Install));
    assert_eq!(sim.status.observed_generation, 1);
    assert_eq!(sim.status.storage_namespace, "default");
    assert_eq!(
        sim.status.last_attempted_release_action,
        Some(ReleaseAction::Install)
    );

    assert_eq!(sim.reconcile(), Step::Done);
    assert!(sim.take_log().is_empty(), "an in-sync release runs nothing");
}

#[test]
fn install_then_test_run_in_the_same_reconcile() {
    let mut sim = Sim::new(plan_with(json!({"test": {"enable": true}})));
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["install", "test"]);
    let ready = cond(&sim.status, condition::READY);
    assert_eq!(ready.reason, reason::TEST_SUCCEEDED);
    assert_eq!(
        ready.message,
        "Helm test succeeded for release default/podinfo.v1 with chart podinfo@6.5.0: 1 test hook completed successfully"
    );
    assert_eq!(
        sim.status.history[0].test_hooks.as_ref().map(|h| h.len()),
        Some(1)
    );
}

#[test]
fn install_awaiting_tests_reports_it_until_tested() {
    let p = plan_with(json!({"test": {"enable": true}}));
    let mut st = HelmReleaseStatus::default();
    let w = record(1, StorageStatus::Deployed, "6.5.0", &desired_values());
    apply_outcome(
        &p,
        &Action::Install,
        &Outcome::succeeded(vec![w]),
        &mut st,
        &now(),
    );
    let t = cond(&st, condition::TEST_SUCCESS);
    assert_eq!(t.status, ConditionStatus::Unknown);
    assert_eq!(t.reason, reason::AWAITING_TESTS);
    assert_eq!(
        t.message,
        "Helm release default/podinfo.v1 with chart podinfo@6.5.0 is awaiting tests"
    );
    assert_eq!(cond(&st, condition::READY).status, ConditionStatus::Unknown);
}

#[test]
fn install_retries_exhausted_stalls_the_release() {
    let mut sim = Sim::new(plan());
    sim.script(&[Behaviour::FailWritten]);
    assert_eq!(sim.reconcile(), Step::Stalled);
    assert_eq!(sim.take_log(), ["install"]);
    assert_eq!((sim.status.failures, sim.status.install_failures), (1, 1));
    let stalled = cond(&sim.status, condition::STALLED);
    assert_eq!(stalled.reason, reason::RETRIES_EXCEEDED);
    assert_eq!(stalled.message, "Failed to install after 1 attempt(s)");
    let ready = cond(&sim.status, condition::READY);
    assert_eq!(ready.status, ConditionStatus::False);
    assert_eq!(ready.reason, reason::INSTALL_FAILED);
    assert_eq!(
        ready.message,
        "Helm install failed for release default/podinfo with chart podinfo@6.5.0: timed out waiting for the condition"
    );
    assert_eq!(sim.status.observed_generation, 1, "stalled is terminal");

    // Nothing changes until the desired state or a token does.
    assert_eq!(sim.reconcile(), Step::Stalled);
    assert!(sim.take_log().is_empty());
}

#[test]
fn install_retries_uninstall_between_attempts_then_stall() {
    let mut sim = Sim::new(plan_with(
        json!({"install": {"remediation": {"retries": 1}}}),
    ));
    sim.script(&[Behaviour::FailWritten, Behaviour::FailWritten]);
    // Attempt 1 fails, is uninstalled, and the reconcile requeues.
    assert_eq!(sim.reconcile(), Step::Requeue);
    assert_eq!(sim.take_log(), ["install", "uninstall"]);
    let remediated = cond(&sim.status, condition::REMEDIATED);
    assert_eq!(remediated.reason, reason::UNINSTALL_SUCCEEDED);
    assert_eq!(
        remediated.message,
        "Helm uninstall remediation for release default/podinfo.v1 with chart podinfo@6.5.0 succeeded"
    );
    assert_eq!(
        cond(&sim.status, condition::READY).status,
        ConditionStatus::False
    );
    assert_eq!(
        cond(&sim.status, condition::RECONCILING).reason,
        reason::PROGRESSING_WITH_RETRY
    );
    // Attempt 2 fails; retries are exhausted and remediateLastFailure is false.
    assert_eq!(sim.reconcile(), Step::Stalled);
    assert_eq!(sim.take_log(), ["install"]);
    assert_eq!(
        cond(&sim.status, condition::STALLED).message,
        "Failed to install after 2 attempt(s)"
    );
}

#[test]
fn install_failure_without_a_stored_release_backs_off_without_counting() {
    let mut sim = Sim::new(plan());
    sim.script(&[Behaviour::FailUnwritten]);
    match sim.reconcile() {
        Step::Failed(e) => {
            assert_eq!(e.to_string(), "rendering failed");
            assert_eq!(e.kind(), "install");
            assert!(
                !e.is_transient(),
                "the simulated executor did not say it was"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!((sim.status.failures, sim.status.install_failures), (1, 0));
    assert_eq!(
        sim.status.observed_generation, 0,
        "errors do not observe the generation"
    );
    // The next attempt succeeds.
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["install", "install"]);
}

#[test]
fn negative_retries_remediate_forever() {
    let mut sim = Sim::new(plan_with(
        json!({"install": {"remediation": {"retries": -1}}}),
    ));
    sim.script(&[Behaviour::FailWritten; 25]);
    for round in 0..25 {
        assert_eq!(sim.reconcile(), Step::Requeue, "round {round}");
        assert_eq!(sim.take_log(), ["install", "uninstall"], "round {round}");
    }
    assert_eq!(sim.status.install_failures, 25);
    assert!(
        sim.status
            .conditions
            .get_condition(condition::STALLED)
            .is_none()
    );
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["install"]);
}

fn installed(sim: &mut Sim) {
    assert_eq!(sim.reconcile(), Step::Done);
    sim.take_log();
}

fn bump_chart(sim: &mut Sim, version: &str) {
    sim.plan.chart = chart(version);
    sim.plan.generation += 1;
}

#[test]
fn failed_upgrade_with_default_remediation_stalls_and_keeps_the_failed_release() {
    let mut sim = Sim::new(plan());
    installed(&mut sim);
    bump_chart(&mut sim, "6.6.0");
    sim.script(&[Behaviour::FailWritten]);
    assert_eq!(sim.reconcile(), Step::Stalled);
    assert_eq!(sim.take_log(), ["upgrade"]);
    assert_eq!(
        cond(&sim.status, condition::STALLED).message,
        "Failed to upgrade after 1 attempt(s)"
    );
    assert_eq!(sim.current().map(|r| r.status), Some(StorageStatus::Failed));
    assert_eq!(
        cond(&sim.status, condition::READY).message,
        "Helm upgrade failed for release default/podinfo with chart podinfo@6.6.0: timed out waiting for the condition"
    );
}

#[test]
fn failed_upgrade_with_three_retries_rolls_back_between_attempts_then_stalls() {
    let mut sim = Sim::new(plan_with(
        json!({"upgrade": {"remediation": {"retries": 3}}}),
    ));
    installed(&mut sim);
    bump_chart(&mut sim, "6.6.0");
    use Behaviour::{FailWritten, Succeed};
    // Upgrade attempts fail; the rollbacks between them succeed.
    sim.script(&[
        FailWritten,
        Succeed,
        FailWritten,
        Succeed,
        FailWritten,
        Succeed,
        FailWritten,
        Succeed,
    ]);
    for attempt in 1..=3 {
        assert_eq!(sim.reconcile(), Step::Requeue, "attempt {attempt}");
        assert_eq!(sim.take_log(), ["upgrade", "rollback"], "attempt {attempt}");
        assert_eq!(sim.status.upgrade_failures, attempt);
        let remediated = cond(&sim.status, condition::REMEDIATED);
        assert_eq!(remediated.reason, reason::ROLLBACK_SUCCEEDED);
        // The target is the newest good release: v1, then the rollbacks v3 and v5.
        let target = if attempt == 1 { 1 } else { 2 * attempt - 1 };
        assert_eq!(
            remediated.message,
            format!(
                "Helm rollback to previous release default/podinfo.v{target} with chart podinfo@6.5.0 succeeded"
            )
        );
        let ready = cond(&sim.status, condition::READY);
        assert_eq!(
            ready.status,
            ConditionStatus::False,
            "Remediated forces Ready=False"
        );
        assert_eq!(ready.reason, reason::ROLLBACK_SUCCEEDED);
    }
    // The fourth attempt fails too: remediateLastFailure defaults to true with retries,
    // so the release is rolled back once more and then stalls.
    assert_eq!(sim.reconcile(), Step::Stalled);
    assert_eq!(sim.take_log(), ["upgrade", "rollback"]);
    assert_eq!(
        cond(&sim.status, condition::STALLED).message,
        "Failed to upgrade after 4 attempt(s)"
    );
    assert_eq!(
        sim.current().map(|r| r.chart_version.as_str()),
        Some("6.5.0")
    );
    assert_eq!(
        sim.current().map(|r| r.status),
        Some(StorageStatus::Deployed)
    );
}

#[test]
fn upgrade_remediated_by_uninstall_requeues_even_when_exhausted_and_reinstalls() {
    let mut sim = Sim::new(plan_with(json!({
        "upgrade": {"remediation": {"retries": 0, "remediateLastFailure": true, "strategy": "uninstall"}}
    })));
    installed(&mut sim);
    bump_chart(&mut sim, "6.6.0");
    sim.script(&[Behaviour::FailWritten]);
    assert_eq!(sim.reconcile(), Step::Requeue);
    assert_eq!(sim.take_log(), ["upgrade", "uninstall"]);
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["install"]);
    assert_eq!(
        sim.current().map(|r| r.chart_version.as_str()),
        Some("6.6.0")
    );
}

#[test]
fn pending_upgrade_left_by_a_crash_is_unlocked_then_upgraded() {
    let mut sim = Sim::new(plan());
    installed(&mut sim);
    bump_chart(&mut sim, "6.6.0");
    // The agent died mid-upgrade: v2 is pending-upgrade and was never recorded.
    let v2 = record(2, StorageStatus::PendingUpgrade, "6.6.0", &desired_values());
    sim.put(v2);
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["unlock", "upgrade"]);
    assert_eq!(
        sim.current().map(|r| (r.version, r.status)),
        Some((3, StorageStatus::Deployed))
    );
    assert_eq!(
        cond(&sim.status, condition::READY).status,
        ConditionStatus::True
    );
    assert_eq!(
        cond(&sim.status, condition::RELEASED).message,
        "Helm upgrade succeeded for release default/podinfo.v3 with chart podinfo@6.6.0"
    );
}

#[test]
fn unlock_reports_the_pending_state_it_broke() {
    let p = plan();
    let mut st = in_sync().status;
    let w = record(1, StorageStatus::Failed, "6.5.0", &desired_values());
    let applied = apply_outcome(
        &p,
        &Action::Unlock {
            status: StorageStatus::PendingInstall,
        },
        &Outcome::succeeded(vec![w]),
        &mut st,
        &now(),
    );
    assert_eq!(applied.returned_error, None);
    let released = cond(&st, condition::RELEASED);
    assert_eq!(released.reason, reason::PENDING_RELEASE);
    assert_eq!(
        released.message,
        "Unlocked Helm release default/podinfo.v1 with chart podinfo@6.5.0 in pending-install state"
    );
    assert_eq!(st.history[0].status, "failed");
}

#[test]
fn retry_on_failure_retries_after_the_interval_without_remediation() {
    let mut sim = Sim::new(plan_with(json!({
        "install": {"strategy": {"name": "RetryOnFailure", "retryInterval": "1m"}},
        "upgrade": {"strategy": {"name": "RetryOnFailure", "retryInterval": "1m"}}
    })));
    sim.script(&[Behaviour::FailWritten, Behaviour::FailWritten]);
    // The failed install is retried with an upgrade, but not twice in one reconcile.
    assert_eq!(sim.reconcile(), Step::RetryAfter(GoDuration::from_secs(60)));
    assert_eq!(sim.take_log(), ["install"]);
    let rec = cond(&sim.status, condition::RECONCILING);
    assert_eq!(rec.reason, reason::PROGRESSING_WITH_RETRY);
    assert_eq!(rec.message, "retrying after 1m0s");
    assert!(
        sim.status
            .conditions
            .get_condition(condition::STALLED)
            .is_none()
    );
    assert_eq!(sim.reconcile(), Step::RetryAfter(GoDuration::from_secs(60)));
    assert_eq!(sim.take_log(), ["upgrade"]);
    assert_eq!(sim.status.failures, 2);
    // The retried upgrade succeeds and clears the counters.
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["upgrade"]);
    assert_eq!(sim.status.failures, 0);
}

#[test]
fn reset_annotation_unstalls_an_exhausted_release() {
    let mut sim = Sim::new(plan());
    sim.script(&[Behaviour::FailWritten]);
    assert_eq!(sim.reconcile(), Step::Stalled);
    sim.take_log();
    sim.plan.requests.requested_at = Some("now".into());
    sim.plan.requests.reset_at = Some("now".into());
    assert_eq!(sim.reconcile(), Step::Done);
    // With zeroed counters the failed install is retried as an upgrade.
    assert_eq!(sim.take_log(), ["upgrade"]);
    assert_eq!(sim.status.last_handled_reset_at, "now");
    assert_eq!(sim.status.last_handled_reconcile_at, "now");
    assert!(
        sim.status
            .conditions
            .get_condition(condition::STALLED)
            .is_none()
    );
}

#[test]
fn force_annotation_upgrades_an_in_sync_release_in_one_reconcile() {
    let mut sim = Sim::new(plan());
    installed(&mut sim);
    sim.plan.requests.requested_at = Some("f1".into());
    sim.plan.requests.force_at = Some("f1".into());
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["upgrade"]);
    assert_eq!(sim.status.last_handled_force_at, "f1");
    assert_eq!(sim.reconcile(), Step::Done);
    assert!(
        sim.take_log().is_empty(),
        "a handled token is not honoured twice"
    );
}

#[test]
fn values_change_upgrades_and_resets_counters() {
    let mut sim = Sim::new(plan());
    installed(&mut sim);
    sim.plan.values = json!({"replicaCount": 5});
    sim.plan.config_digest = digest::config_digest(&sim.plan.values);
    sim.plan.generation += 1;
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["upgrade"]);
    assert_eq!(
        sim.status.history[0].config_digest,
        sim.plan.config_digest.to_string()
    );
    assert_eq!(sim.status.history[1].status, "superseded");
}

#[test]
fn failed_test_is_remediated_and_retried_within_the_budget() {
    let mut sim = Sim::new(plan_with(json!({
        "test": {"enable": true},
        "install": {"remediation": {"retries": 1}}
    })));
    sim.script(&[Behaviour::Succeed, Behaviour::FailWritten]);
    assert_eq!(sim.reconcile(), Step::Requeue);
    assert_eq!(sim.take_log(), ["install", "test", "uninstall"]);
    assert_eq!(sim.status.install_failures, 1);
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["install", "test"]);
    assert_eq!(
        cond(&sim.status, condition::READY).reason,
        reason::TEST_SUCCEEDED
    );
}

#[test]
fn failed_test_is_reported_but_ignored_with_ignore_failures() {
    let mut sim = Sim::new(plan_with(
        json!({"test": {"enable": true, "ignoreFailures": true}}),
    ));
    sim.script(&[Behaviour::Succeed, Behaviour::FailWritten]);
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["install", "test"]);
    let t = cond(&sim.status, condition::TEST_SUCCESS);
    assert_eq!(t.status, ConditionStatus::False);
    assert_eq!(
        t.message,
        "Helm test failed for release default/podinfo.v1 with chart podinfo@6.5.0: 1 error occurred:\n\t* pod podinfo-test failed"
    );
    let ready = cond(&sim.status, condition::READY);
    assert_eq!(ready.status, ConditionStatus::True);
    assert_eq!(ready.reason, reason::INSTALL_SUCCEEDED);
    assert_eq!(sim.status.install_failures, 0);
    assert_eq!(sim.status.failures, 1);
}

#[test]
fn drift_is_detected_and_corrected_then_in_sync() {
    let mut sim = Sim::new(plan_with(json!({"driftDetection": {"mode": "enabled"}})));
    installed(&mut sim);
    sim.drift = DriftObservation::Drifted {
        summary: "Deployment/default/podinfo changed (0 additions, 1 changes, 0 removals)".into(),
    };
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["correct cluster drift"]);
    let drifted = cond(&sim.status, condition::DRIFTED);
    assert_eq!(drifted.status, ConditionStatus::False);
    assert_eq!(drifted.reason, reason::NO_DRIFT_DETECTED);
    assert_eq!(
        cond(&sim.status, condition::READY).status,
        ConditionStatus::True
    );
}

#[test]
fn persistent_drift_is_corrected_once_per_reconcile() {
    let mut sim = Sim::new(plan_with(json!({"driftDetection": {"mode": "enabled"}})));
    installed(&mut sim);
    let summary = "Deployment/default/podinfo removed".to_owned();
    sim.drift = DriftObservation::Drifted {
        summary: summary.clone(),
    };
    // A correction that does not stick.
    let t = now();
    begin_reconcile(&sim.plan, &mut sim.status);
    let mut atomic = AtomicRelease::new();
    let mut o = sim.observe(sim.drift.clone());
    let action = match atomic.step(&sim.plan, &mut o, &t) {
        Step::Run { action, .. } => action,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        action,
        Action::CorrectDrift {
            summary: summary.clone()
        }
    );
    let mut st = o.status;
    // Flux marks `Ready=Unknown` "correcting cluster drift" inside the action
    // (`correct_cluster_drift.go`), not in the loop's pre-action patch.
    assert_eq!(
        cond(&st, condition::READY).status,
        ConditionStatus::True,
        "Ready is untouched when the correction starts"
    );
    assert_eq!(
        atomic.complete(&sim.plan, &action, &Outcome::succeeded(vec![]), &mut st, &t),
        None
    );
    assert_eq!(
        cond(&st, condition::READY).message,
        "correcting cluster drift"
    );
    let mut o = sim.observe(sim.drift.clone());
    o.status = st;
    assert_eq!(atomic.step(&sim.plan, &mut o, &t), Step::Requeue);
}

#[test]
fn drift_warning_leaves_ready_untouched() {
    let mut sim = Sim::new(plan_with(json!({"driftDetection": {"mode": "warn"}})));
    installed(&mut sim);
    sim.drift = DriftObservation::Drifted {
        summary: "Deployment/default/podinfo removed".into(),
    };
    assert_eq!(sim.reconcile(), Step::Done);
    assert!(sim.take_log().is_empty());
    assert_eq!(
        cond(&sim.status, condition::DRIFTED).status,
        ConditionStatus::True
    );
    assert_eq!(
        cond(&sim.status, condition::READY).status,
        ConditionStatus::True
    );
}

#[test]
fn rollback_result_matching_the_new_desired_state_becomes_released() {
    let mut sim = Sim::new(plan_with(
        json!({"upgrade": {"remediation": {"retries": 1}}}),
    ));
    installed(&mut sim);
    bump_chart(&mut sim, "6.6.0");
    sim.script(&[Behaviour::FailWritten]);
    assert_eq!(sim.reconcile(), Step::Requeue);
    assert_eq!(sim.take_log(), ["upgrade", "rollback"]);
    // The user reverts to the chart the rollback restored.
    bump_chart(&mut sim, "6.5.0");
    assert_eq!(sim.reconcile(), Step::Done);
    assert!(sim.take_log().is_empty());
    assert!(
        sim.status
            .conditions
            .get_condition(condition::REMEDIATED)
            .is_none()
    );
    let released = cond(&sim.status, condition::RELEASED);
    assert_eq!(released.reason, reason::UPGRADE_SUCCEEDED);
    assert_eq!(
        released.message,
        "Helm upgrade succeeded for release default/podinfo.v3 with chart podinfo@6.5.0"
    );
    assert_eq!(
        cond(&sim.status, condition::READY).status,
        ConditionStatus::True
    );
}

#[test]
fn a_rollbacks_new_version_and_the_versions_it_rewrote_are_recorded_with_action_rollback() {
    // Flux's observer sees the new version twice (created pending-rollback, then updated),
    // so its snapshot, like the superseded one, carries the rollback action.
    let mut sim = Sim::new(plan_with(
        json!({"upgrade": {"remediation": {"retries": 1}}}),
    ));
    installed(&mut sim);
    bump_chart(&mut sim, "6.6.0");
    sim.script(&[Behaviour::FailWritten]);
    assert_eq!(sim.reconcile(), Step::Requeue);
    assert_eq!(sim.take_log(), ["upgrade", "rollback"]);
    let actions: Vec<(u32, Option<ReleaseAction>)> = sim
        .status
        .history
        .iter()
        .map(|s| (s.version, s.action))
        .collect();
    assert_eq!(
        actions,
        [
            (3, Some(ReleaseAction::Rollback)),
            (2, Some(ReleaseAction::Rollback)),
            (1, Some(ReleaseAction::Install)),
        ]
    );
}

#[test]
fn release_target_change_uninstalls_then_installs_fresh() {
    let mut sim = Sim::new(plan());
    installed(&mut sim);
    let mut p = plan_with(json!({"releaseName": "podinfo"}));
    p.release.storage_namespace = Namespace::new("helm-storage").unwrap();
    sim.plan = p;
    assert_eq!(sim.reconcile(), Step::Requeue);
    assert_eq!(sim.take_log(), ["uninstall"]);
    assert!(sim.status.history.is_empty());
    assert_eq!(sim.status.storage_namespace, "");
    assert_eq!(
        cond(&sim.status, condition::RELEASED).message,
        "Helm uninstall succeeded for release default/podinfo.v1 with chart podinfo@6.5.0"
    );
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["install"]);
    assert_eq!(sim.status.storage_namespace, "helm-storage");
}

#[test]
fn uninstall_of_a_vanished_release_assumes_it_is_gone() {
    let p = plan();
    let mut st = in_sync().status;
    let action = uninstall_for_deletion(&p, &st).unwrap();
    let applied = apply_outcome(&p, &action, &Outcome::not_found(), &mut st, &now());
    assert_eq!(applied.returned_error, None);
    assert!(st.history.is_empty());
    assert_eq!(
        cond(&st, condition::RELEASED).message,
        "Release default/podinfo.v1 was not found, assuming it is uninstalled"
    );
}

#[test]
fn failed_rollback_that_changed_storage_lets_the_loop_stop_as_remediated() {
    let p = plan_with(json!({"upgrade": {"remediation": {"retries": 1}}}));
    let o = failed_upgrade(1);
    let mut st = o.status.clone();
    let target = Box::new(st.history[1].clone());
    let v3 = record(3, StorageStatus::Failed, "6.4.0", &desired_values());
    let applied = apply_outcome(
        &p,
        &Action::Rollback { target },
        &Outcome::failed("timed out", vec![v3]),
        &mut st,
        &now(),
    );
    assert_eq!(applied.returned_error, None);
    let c = cond(&st, condition::REMEDIATED);
    assert_eq!(c.reason, reason::ROLLBACK_FAILED);
    assert_eq!(
        c.message,
        "Helm rollback to previous release default/podinfo.v1 with chart podinfo@6.4.0 failed: timed out"
    );
    assert_eq!(st.failures, 2);
}

#[test]
fn summary_prefers_test_results_over_release_results_when_tests_count() {
    let p = plan_with(json!({"test": {"enable": true}}));
    let mut st = HelmReleaseStatus::default();
    let t = now();
    st.conditions.set_condition(
        condition::RELEASED,
        ConditionStatus::True,
        reason::INSTALL_SUCCEEDED,
        "r".into(),
        1,
        &t,
    );
    st.conditions.set_condition(
        condition::TEST_SUCCESS,
        ConditionStatus::False,
        reason::TEST_FAILED,
        "t".into(),
        1,
        &t,
    );
    summarize(&p, &mut st, &t);
    let ready = cond(&st, condition::READY);
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::False, reason::TEST_FAILED)
    );

    let p = plan();
    summarize(&p, &mut st, &t);
    assert!(
        st.conditions
            .get_condition(condition::TEST_SUCCESS)
            .is_none()
    );
    assert_eq!(
        cond(&st, condition::READY).reason,
        reason::INSTALL_SUCCEEDED
    );
}

#[test]
fn action_timeouts_fall_back_to_the_spec_timeout() {
    let p = plan_with(
        json!({"timeout": "7m", "install": {"timeout": "1m"}, "test": {"timeout": "30s"}}),
    );
    assert_eq!(Action::Install.timeout(&p).to_string(), "1m0s");
    assert_eq!(upgrade(UpgradeCause::Adopt).timeout(&p).to_string(), "7m0s");
    assert_eq!(Action::Test.timeout(&p).to_string(), "30s");
    assert_eq!(plan().options.timeout().to_string(), "5m0s");
}

#[test]
fn suspended_release_is_left_alone() {
    let mut sim = Sim::new(plan_with(json!({"suspend": true})));
    assert_eq!(sim.reconcile(), Step::Done);
    assert!(sim.take_log().is_empty());
    assert!(sim.storage.is_empty());
}

#[test]
fn retry_strategy_on_install_only_does_not_cover_the_upgrade_retry() {
    // The failed install is retried with an upgrade; once that upgrade fails, the active
    // strategy is the upgrade's, which remediates (and, with no retries, stalls).
    let mut sim = Sim::new(plan_with(
        json!({"install": {"strategy": {"name": "RetryOnFailure"}}}),
    ));
    sim.script(&[Behaviour::FailWritten, Behaviour::FailWritten]);
    assert_eq!(sim.reconcile(), Step::RetryAfter(GoDuration::from_mins(5)));
    assert_eq!(
        sim.status.observed_generation, 1,
        "a scheduled retry observes the generation"
    );
    assert_eq!(sim.reconcile(), Step::Stalled);
    assert_eq!(sim.take_log(), ["install", "upgrade"]);
    assert_eq!(
        cond(&sim.status, condition::STALLED).message,
        "Failed to upgrade after 1 attempt(s)"
    );
}

#[test]
fn install_events_carry_the_flux_annotations() {
    let p = plan();
    let mut st = HelmReleaseStatus::default();
    begin_reconcile(&p, &mut st);
    let w = record(1, StorageStatus::Deployed, "6.5.0", &desired_values());
    let applied = apply_outcome(
        &p,
        &Action::Install,
        &Outcome::succeeded(vec![w]),
        &mut st,
        &now(),
    );
    assert_eq!(applied.events.len(), 1);
    let e = &applied.events[0];
    assert_eq!(e.type_, EventType::Normal);
    assert_eq!(e.reason, reason::INSTALL_SUCCEEDED);
    assert_eq!(
        e.message,
        "Helm install succeeded for release default/podinfo.v1 with chart podinfo@6.5.0"
    );
    assert_eq!(e.annotations["helm.toolkit.fluxcd.io/revision"], "6.5.0");
    assert_eq!(e.annotations["helm.toolkit.fluxcd.io/app-version"], "6.5.0");
    assert_eq!(
        e.annotations["helm.toolkit.fluxcd.io/token"],
        digest::config_digest(&desired_values()).to_string()
    );
    assert!(
        !e.annotations
            .contains_key("helm.toolkit.fluxcd.io/oci-digest")
    );
}

#[test]
fn failure_events_append_the_helm_logs() {
    let p = plan();
    let mut st = HelmReleaseStatus::default();
    let outcome = Outcome {
        logs: Some("wait: deployment not ready".into()),
        ..Outcome::failed("context deadline exceeded", vec![])
    };
    let applied = apply_outcome(&p, &upgrade(UpgradeCause::Adopt), &outcome, &mut st, &now());
    assert_eq!(
        applied.returned_error.as_deref(),
        Some("context deadline exceeded")
    );
    let e = &applied.events[0];
    assert_eq!(e.type_, EventType::Warning);
    assert_eq!(e.reason, reason::UPGRADE_FAILED);
    assert_eq!(
        e.message,
        "Helm upgrade failed for release default/podinfo with chart podinfo@6.5.0: context deadline exceeded\n\nLast Helm logs:\n\nwait: deployment not ready"
    );
    // The condition message has no logs.
    assert_eq!(
        cond(&st, condition::RELEASED).message,
        "Helm upgrade failed for release default/podinfo with chart podinfo@6.5.0: context deadline exceeded"
    );
}

#[test]
fn drift_detection_and_correction_are_reported_as_events() {
    let p = plan_with(json!({"driftDetection": {"mode": "enabled"}}));
    let mut o = in_sync();
    o.drift = DriftObservation::Drifted {
        summary: "Deployment/default/podinfo removed".into(),
    };
    let mut atomic = AtomicRelease::new();
    let action = match atomic.step(&p, &mut o, &now()) {
        Step::Run { action, .. } => action,
        other => panic!("{other:?}"),
    };
    let events = atomic.take_events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].type_, events[0].reason.as_str()),
        (EventType::Warning, "DriftDetected")
    );
    assert!(
        events[0].annotations.is_empty(),
        "Flux records DriftDetected without annotations"
    );

    let done = Outcome {
        changes: Some("Deployment/default/podinfo created".into()),
        ..Outcome::default()
    };
    atomic.complete(&p, &action, &done, &mut o.status, &now());
    let events = atomic.take_events();
    assert_eq!(events[0].reason, "DriftCorrected");
    assert_eq!(
        events[0].message,
        "Cluster state of release default/podinfo.v1 has been corrected:\nDeployment/default/podinfo created"
    );

    let partial = Outcome {
        error: Some("Secret/default/x: forbidden".into()),
        changes: Some("Deployment/default/podinfo created".into()),
        ..Outcome::default()
    };
    let applied = apply_outcome(&p, &action, &partial, &mut o.status, &now());
    assert_eq!(
        applied.returned_error, None,
        "drift correction never fails the loop"
    );
    assert_eq!(applied.events[0].reason, "DriftCorrectionFailed");
    assert_eq!(
        applied.events[0].message,
        "Failed to partially correct cluster state of release default/podinfo.v1:\nSecret/default/x: forbidden\n\nSuccessful corrections:\nDeployment/default/podinfo created"
    );
}

/// Exhaustive check of invariants over a grid of observations and configurations.
#[test]
fn decision_invariants_hold_over_the_whole_grid() {
    let statuses = [
        None,
        Some(StorageStatus::Deployed),
        Some(StorageStatus::Failed),
        Some(StorageStatus::Uninstalled),
        Some(StorageStatus::Superseded),
        Some(StorageStatus::PendingInstall),
        Some(StorageStatus::PendingUpgrade),
        Some(StorageStatus::PendingRollback),
        Some(StorageStatus::Uninstalling),
        Some(StorageStatus::Unknown),
    ];
    let actions = [
        None,
        Some(ReleaseAction::Install),
        Some(ReleaseAction::Upgrade),
    ];
    let mut checked = 0;
    for retries in [-1i64, 0, 2] {
        for strategy in ["rollback", "uninstall"] {
            for retry_on_failure in [false, true] {
                let strategy_json = if retry_on_failure {
                    json!({"name": "RetryOnFailure"})
                } else {
                    json!({"name": "RemediateOnFailure"})
                };
                let p = plan_with(json!({
                    "install": {"remediation": {"retries": retries}, "strategy": strategy_json},
                    "upgrade": {"remediation": {"retries": retries, "strategy": strategy}, "strategy": strategy_json},
                    "test": {"enable": true}
                }));
                for st in statuses {
                    for with_history in [false, true] {
                        for last in actions {
                            for failures in [0i64, 1, 5] {
                                for force in [false, true] {
                                    let cur = st.map(|s| record(2, s, "6.5.0", &desired_values()));
                                    let prev = deployed(1);
                                    let history = match (&cur, with_history) {
                                        (Some(c), true) => vec![snap(c, last), snap(&prev, None)],
                                        _ => vec![],
                                    };
                                    let mut o = observed(cur, history);
                                    o.rollback_target = Some(prev);
                                    o.status.last_attempted_release_action = last;
                                    o.status.install_failures = failures;
                                    o.status.upgrade_failures = failures;
                                    let p = if force {
                                        with_force(p.clone(), "f")
                                    } else {
                                        p.clone()
                                    };
                                    let d = decide(&p, &o);
                                    checked += 1;
                                    let ctx = format!(
                                        "{st:?} history={with_history} last={last:?} failures={failures} retries={retries} strategy={strategy} retry={retry_on_failure} force={force} -> {:?}",
                                        d.action
                                    );
                                    // Negative retries never exhaust.
                                    if retries < 0 {
                                        assert!(
                                            !matches!(
                                                d.action,
                                                Action::Stalled(Stall::RetriesExceeded { .. })
                                            ),
                                            "{ctx}"
                                        );
                                    }
                                    // A retry strategy never remediates.
                                    if retry_on_failure && last.is_some() {
                                        assert!(
                                            !matches!(
                                                d.action,
                                                Action::Rollback { .. }
                                                    | Action::UninstallRemediation
                                            ),
                                            "{ctx}"
                                        );
                                    }
                                    // Pending releases are always unlocked first.
                                    if st.is_some_and(StorageStatus::is_pending) {
                                        assert!(matches!(d.action, Action::Unlock { .. }), "{ctx}");
                                    }
                                    // Nothing is installed over a live release.
                                    if matches!(
                                        st,
                                        Some(StorageStatus::Deployed | StorageStatus::Failed)
                                    ) {
                                        assert!(d.action != Action::Install, "{ctx}");
                                    }
                                    // A force request never stalls on exhausted retries.
                                    if force {
                                        assert!(
                                            !matches!(
                                                d.action,
                                                Action::Stalled(Stall::RetriesExceeded { .. })
                                            ),
                                            "{ctx}"
                                        );
                                    }
                                    // The loop driver accepts every decision.
                                    let mut o2 = o.clone();
                                    let _ = AtomicRelease::new().step(&p, &mut o2, &now());
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 3 * 2 * 2 * 10 * 2 * 3 * 3 * 2);
}

#[test]
fn release_installed_by_the_helm_cli_is_adopted_with_an_upgrade() {
    let mut sim = Sim::new(plan());
    // `helm install` made v1 with other values; nothing in history.
    sim.put(record(
        1,
        StorageStatus::Deployed,
        "6.5.0",
        &json!({"replicaCount": 9}),
    ));
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["upgrade"]);
    assert_eq!(
        sim.status.history.len(),
        1,
        "the foreign v1 is not in our history"
    );
    assert_eq!(sim.status.history[0].version, 2);
    assert_eq!(sim.status.history[0].action, Some(ReleaseAction::Upgrade));
}

#[test]
fn upgrade_whose_tests_fail_is_rolled_back() {
    let mut sim = Sim::new(plan_with(json!({
        "test": {"enable": true},
        "upgrade": {"remediation": {"retries": 1}}
    })));
    installed(&mut sim);
    bump_chart(&mut sim, "6.6.0");
    use Behaviour::{FailWritten, Succeed};
    // upgrade ok, test fails, rollback ok.
    sim.script(&[Succeed, FailWritten, Succeed]);
    assert_eq!(sim.reconcile(), Step::Requeue);
    assert_eq!(sim.take_log(), ["upgrade", "test", "rollback"]);
    assert_eq!(sim.status.upgrade_failures, 1);
    assert_eq!(
        cond(&sim.status, condition::REMEDIATED).message,
        "Helm rollback to previous release default/podinfo.v1 with chart podinfo@6.5.0 succeeded"
    );
    // The rolled-back release is untested and the desired chart still differs: the
    // next reconcile upgrades again (and, tests passing, is ready).
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["upgrade", "test"]);
    assert_eq!(
        cond(&sim.status, condition::READY).reason,
        reason::TEST_SUCCEEDED
    );
}

#[test]
fn failed_rollback_that_left_storage_unchanged_backs_off() {
    let p = plan_with(json!({"upgrade": {"remediation": {"retries": 1}}}));
    let mut o = failed_upgrade(1);
    let mut atomic = AtomicRelease::new();
    let action = match atomic.step(&p, &mut o, &now()) {
        Step::Run { action, .. } => action,
        other => panic!("{other:?}"),
    };
    assert!(matches!(action, Action::Rollback { .. }));
    let stop = atomic.complete(
        &p,
        &action,
        &Outcome::failed("release podinfo failed: timed out", vec![]),
        &mut o.status,
        &now(),
    );
    assert_eq!(
        stop,
        Some(Step::Failed(ReconcileError::Action {
            action: "rollback",
            message: "release podinfo failed: timed out".into(),
            transient: false,
        }))
    );
    assert_eq!(o.status.failures, 2);
}

#[test]
fn reconcile_errors_are_transient_only_when_retrying_may_help() {
    // (outcome error, executor says transient, returned error, error transient)
    let p = plan();
    let cases: &[(Option<&str>, bool, Option<&str>, bool)] = &[
        // A failure before any write, judged transient (an API server that was down).
        (
            Some("connection refused"),
            true,
            Some("connection refused"),
            true,
        ),
        // The same failure judged permanent (a chart that does not render).
        (
            Some("rendering failed"),
            false,
            Some("rendering failed"),
            false,
        ),
        // Trimmed as the recorders return it, it is still the action's error.
        (Some("timed out\n"), true, Some("timed out"), true),
    ];
    for (error, transient, want, want_transient) in cases {
        let outcome = Outcome {
            error: error.map(str::to_owned),
            error_is_transient: *transient,
            ..Outcome::default()
        };
        let applied = apply_outcome(
            &p,
            &Action::Install,
            &outcome,
            &mut HelmReleaseStatus::default(),
            &now(),
        );
        assert_eq!(applied.returned_error.as_deref(), *want, "{error:?}");
        assert_eq!(applied.transient, *want_transient, "{error:?}");
    }

    // Core's own error (no current release to test) is not transient, even when the
    // executor called its own error transient.
    let outcome = Outcome {
        error: Some("connection refused".into()),
        error_is_transient: true,
        ..Outcome::default()
    };
    let applied = apply_outcome(
        &p,
        &Action::Test,
        &outcome,
        &mut HelmReleaseStatus::default(),
        &now(),
    );
    assert_eq!(
        applied.returned_error.as_deref(),
        Some(format!("{ERR_NO_LATEST}: required for test").as_str())
    );
    assert!(!applied.transient);

    // Through the loop: the flag reaches the reconcile error.
    let mut sim = Sim::new(plan());
    let mut atomic = AtomicRelease::new();
    let mut observed = sim.observe(DriftObservation::NoDrift);
    let action = match atomic.step(&sim.plan, &mut observed, &now()) {
        Step::Run { action, .. } => action,
        other => panic!("{other:?}"),
    };
    sim.status = observed.status;
    let outcome = Outcome {
        error: Some("connection refused".into()),
        error_is_transient: true,
        ..Outcome::default()
    };
    match atomic.complete(&sim.plan, &action, &outcome, &mut sim.status, &now()) {
        Some(Step::Failed(e)) => {
            assert_eq!(e.kind(), "install");
            assert!(e.is_transient());
        }
        other => panic!("{other:?}"),
    }
    assert!(ReconcileError::State("storage unreadable".into()).is_transient());
}

#[test]
fn deleting_the_helm_release_uninstalls_it_and_forgets_the_history() {
    let mut sim = Sim::new(plan());
    installed(&mut sim);
    let action = uninstall_for_deletion(&sim.plan, &sim.status).unwrap();
    assert_eq!(action.name(), "uninstall");
    let outcome = sim.execute(&action);
    let mut atomic = AtomicRelease::new();
    assert_eq!(
        atomic.complete(&sim.plan, &action, &outcome, &mut sim.status, &now()),
        Some(Step::Requeue)
    );
    assert!(sim.storage.is_empty());
    assert!(sim.status.history.is_empty());
    assert_eq!(sim.status.storage_namespace, "");
    let released = cond(&sim.status, condition::RELEASED);
    assert_eq!(
        (released.status, released.reason.as_str()),
        (ConditionStatus::False, reason::UNINSTALL_SUCCEEDED)
    );
    let events = atomic.take_events();
    assert_eq!(events[0].reason, reason::UNINSTALL_SUCCEEDED);
}

#[test]
fn a_state_error_ends_the_reconcile_with_a_backoff() {
    let mut sim = Sim::new(plan_with(json!({"driftDetection": {"mode": "enabled"}})));
    installed(&mut sim);
    sim.drift = DriftObservation::Error {
        message: "the server could not find the requested resource".into(),
    };
    match sim.reconcile() {
        Step::Failed(e) => {
            assert_eq!(e.kind(), "state");
            assert_eq!(
                e.to_string(),
                "cannot determine release state: unable to determine cluster state: the server could not find the requested resource"
            );
        }
        other => panic!("{other:?}"),
    }
    let ready = cond(&sim.status, condition::READY);
    assert_eq!(ready.reason, reason::STATE_ERROR);
}

#[test]
fn running_actions_mark_reconciling_and_release_actions_mark_ready_unknown() {
    let p = plan_with(json!({"install": {"timeout": "2m"}}));
    let mut o = observed(None, vec![]);
    let mut atomic = AtomicRelease::new();
    let step = atomic.step(&p, &mut o, &now());
    assert_eq!(
        step,
        Step::Run {
            action: Action::Install,
            timeout: GoDuration::from_secs(120)
        }
    );
    let r = cond(&o.status, condition::RECONCILING);
    assert_eq!(r.reason, reason::PROGRESSING);
    assert_eq!(r.message, "Running 'install' action with timeout of 2m0s");
    let ready = cond(&o.status, condition::READY);
    assert_eq!(ready.status, ConditionStatus::Unknown);
    assert_eq!(ready.message, r.message);
}

#[test]
fn the_inventory_is_rebuilt_on_every_release_write_and_cleared_on_uninstall() {
    let mut sim = Sim::new(plan_with(
        json!({"upgrade": {"remediation": {"retries": 1, "strategy": "rollback"}}}),
    ));
    assert_eq!(sim.reconcile(), Step::Done);
    assert_eq!(sim.take_log(), ["install"]);
    assert_eq!(sim.status.inventory, Some(sim_inventory(1)));

    // A failed upgrade that wrote its record: the inventory is that record's.
    sim.plan = plan_with(json!({
        "upgrade": {"remediation": {"retries": 1, "strategy": "rollback"}},
        "values": {"replicaCount": 3}
    }));
    sim.plan.generation = 2;
    sim.script(&[Behaviour::FailWritten]);
    assert_eq!(sim.reconcile(), Step::Requeue);
    assert_eq!(sim.take_log(), ["upgrade", "rollback"]);
    // The rollback wrote v3 last.
    assert_eq!(sim.status.inventory, Some(sim_inventory(3)));

    // A failure before any write keeps it.
    sim.script(&[Behaviour::FailUnwritten]);
    assert!(matches!(sim.reconcile(), Step::Failed(_)));
    assert_eq!(sim.take_log(), ["upgrade"]);
    assert_eq!(sim.status.inventory, Some(sim_inventory(3)));

    // An action that writes no release record (a test) keeps it.
    let mut status = sim.status.clone();
    let test = Outcome {
        inventory: Some(ResourceInventory::default()),
        ..Outcome::succeeded(vec![])
    };
    apply_outcome(&sim.plan, &Action::Test, &test, &mut status, &now());
    assert_eq!(status.inventory, Some(sim_inventory(3)));

    // Uninstall clears it.
    let action = uninstall_for_deletion(&sim.plan, &sim.status).unwrap();
    let outcome = sim.execute(&action);
    apply_outcome(&sim.plan, &action, &outcome, &mut sim.status, &now());
    assert_eq!(sim.status.inventory, None);
}

/// Flux (`atomic_release.go`) leaves `Reconciling` as it was set before an action whose
/// reconciler returns an error (a release that failed before Helm storage changed): the
/// loop returns the error without `conditions.Delete`, and the controller requeues with
/// backoff, still reconciling. Core does the same; a failed upgrade that wrote its record
/// and has no retries left is stalled instead, and `Reconciling` goes.
#[test]
fn a_failed_upgrade_keeps_reconciling_only_while_it_is_retried_as_flux_does() {
    let mut sim = Sim::new(plan());
    installed(&mut sim);
    let mut p = plan_with(json!({"values": {"replicaCount": 3}}));
    p.generation = 2;
    sim.plan = p.clone();

    sim.script(&[Behaviour::FailUnwritten]);
    assert!(matches!(sim.reconcile(), Step::Failed(_)));
    let ready = cond(&sim.status, condition::READY);
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::False, reason::UPGRADE_FAILED)
    );
    let rec = cond(&sim.status, condition::RECONCILING);
    assert_eq!(
        (rec.reason.as_str(), rec.message.as_str()),
        (
            reason::PROGRESSING,
            "Running 'upgrade' action with timeout of 5m0s"
        )
    );

    sim.script(&[Behaviour::FailWritten]);
    assert_eq!(sim.reconcile(), Step::Stalled);
    let ready = cond(&sim.status, condition::READY);
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::False, reason::UPGRADE_FAILED)
    );
    assert!(
        sim.status
            .conditions
            .get_condition(condition::RECONCILING)
            .is_none()
    );
    assert_eq!(
        cond(&sim.status, condition::STALLED).message,
        "Failed to upgrade after 1 attempt(s)"
    );
}

/// Flux's loop determines the state again after `CorrectClusterDrift` (drift detection runs
/// in `DetermineReleaseState`), finds it in sync and marks `Drifted=False NoDriftDetected`;
/// only the `DriftDetected` and `DriftCorrected` events tell that drift was corrected.
#[test]
fn corrected_drift_leaves_no_drift_detected_and_the_events_tell_as_flux_does() {
    let mut sim = Sim::new(plan_with(json!({"driftDetection": {"mode": "enabled"}})));
    installed(&mut sim);
    sim.drift = DriftObservation::Drifted {
        summary: "Deployment/default/podinfo removed".into(),
    };
    let t = now();
    let plan = sim.plan.clone();
    let mut driver = Driver::new(&plan, sim.status.clone());
    let mut corrected = false;
    loop {
        match driver.next(&t) {
            Next::Observe { .. } => {
                let o = sim.observe(DriftObservation::NotChecked);
                driver.observed(o.current, o.rollback_target);
            }
            Next::DetectDrift => driver.drift(sim.drift.clone()),
            Next::Persist => driver.persisted(),
            Next::Run { action, .. } => {
                assert!(matches!(action, Action::CorrectDrift { .. }), "{action:?}");
                let mut outcome = sim.execute(&action);
                outcome.changes = Some("Deployment/default/podinfo created".into());
                driver.completed(&action, &outcome, &t);
                corrected = true;
            }
            Next::Done(step) => {
                assert_eq!(step, Step::Done);
                break;
            }
        }
    }
    assert!(corrected);
    let done = driver.finish();
    let drifted = cond(&done.status, condition::DRIFTED);
    assert_eq!(
        (
            drifted.status,
            drifted.reason.as_str(),
            drifted.message.as_str()
        ),
        (
            ConditionStatus::False,
            reason::NO_DRIFT_DETECTED,
            "No drift detected against the cluster state"
        )
    );
    let events: Vec<(&str, &str)> = done
        .events
        .iter()
        .map(|e| (e.reason.as_str(), e.message.as_str()))
        .collect();
    assert_eq!(
        events,
        [
            (
                reason::DRIFT_DETECTED,
                "Cluster state of release default/podinfo.v1 has drifted from the desired state:\nDeployment/default/podinfo removed"
            ),
            (
                "DriftCorrected",
                "Cluster state of release default/podinfo.v1 has been corrected:\nDeployment/default/podinfo created"
            ),
        ]
    );
}

mod in_action;
