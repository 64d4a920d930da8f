//! The status while an action runs and after it failed, as Flux's `AtomicRelease` loop
//! writes them (`internal/reconcile/atomic_release.go`, helm-controller v1.6.3):
//!
//! - before each action the loop marks `Reconciling=True` (`Progressing`, "Running
//!   '<name>' action with timeout of <t>") and, for a release action (install, upgrade),
//!   `Ready=Unknown` with the same reason and message, then patches the object; nothing else
//!   changes (the earlier conditions and `observedGeneration` stay);
//! - after a failure, `Reconciling` stays only where the loop leaves it: the action's
//!   reconciler returned an error (the "Running" one stays, the controller retries with
//!   backoff), or the loop requeues (`ProgressingWithRetry`); a stall
//!   (`conditions.MarkStalled` deletes `Reconciling`) or a finished loop
//!   (`conditions.Delete`) leaves none.

use super::*;

/// An action as it started.
struct Started {
    name: &'static str,
    timeout: GoDuration,
    /// The status before the decision that chose it.
    before: HelmReleaseStatus,
    /// The status persisted (and reported) for it.
    at: HelmReleaseStatus,
}

/// A failure put in place of an action's outcome (the simulator does not run it).
type Inject = fn(&mut Sim, &Action) -> Option<Outcome>;

fn none(_: &mut Sim, _: &Action) -> Option<Outcome> {
    None
}

/// One reconcile as the agent runs it, recording every action's start.
fn run(sim: &mut Sim, inject: Inject) -> (Step, Vec<Started>) {
    let t = now();
    let plan = sim.plan.clone();
    let mut driver = Driver::new(&plan, sim.status.clone());
    let mut before = driver.status().clone();
    let mut started = Vec::new();
    loop {
        match driver.next(&t) {
            Next::Observe { .. } => {
                sim.status = driver.status().clone();
                before = sim.status.clone();
                let o = sim.observe(DriftObservation::NotChecked);
                driver.observed(o.current, o.rollback_target);
            }
            Next::DetectDrift => driver.drift(sim.drift.clone()),
            Next::Persist => driver.persisted(),
            Next::Run { action, timeout } => {
                started.push(Started {
                    name: action.name(),
                    timeout,
                    before: before.clone(),
                    at: driver.status().clone(),
                });
                sim.status = driver.status().clone();
                let outcome = match inject(sim, &action) {
                    Some(o) => o,
                    None => sim.execute(&action),
                };
                driver.completed(&action, &outcome, &t);
            }
            Next::Done(_) => break,
        }
        assert!(started.len() < 20, "runaway loop");
    }
    let finished = driver.finish();
    sim.status = finished.status;
    (finished.step, started)
}

fn with_status(mut sim: Sim, f: impl FnOnce(&mut HelmReleaseStatus)) -> Sim {
    f(&mut sim.status);
    sim
}

fn installed_sim(spec: Value) -> Sim {
    let mut sim = Sim::new(plan_with(spec));
    installed(&mut sim);
    sim
}

fn upgraded(spec: Value, behaviours: &[Behaviour]) -> Sim {
    let mut sim = installed_sim(spec);
    bump_chart(&mut sim, "6.6.0");
    sim.script(behaviours);
    sim
}

fn drifted(summary: &str) -> Sim {
    let mut sim = installed_sim(json!({"driftDetection": {"mode": "enabled"}}));
    sim.drift = DriftObservation::Drifted {
        summary: summary.into(),
    };
    sim
}

/// A reconcile where Helm storage holds a `pending-upgrade` v2 (an agent killed mid-upgrade).
fn locked() -> Sim {
    let mut sim = installed_sim(json!({}));
    let pending = record(2, StorageStatus::PendingUpgrade, "6.5.0", &desired_values());
    sim.put(pending);
    sim
}

fn ready(status: &HelmReleaseStatus) -> Option<(ConditionStatus, String, String)> {
    status
        .conditions
        .get_condition(condition::READY)
        .map(|c| (c.status, c.reason.clone(), c.message.clone()))
}

/// A row: a reconcile, the actions it starts and the first one's `Reconciling` message.
struct Starts {
    what: &'static str,
    sim: Sim,
    behaviours: &'static [Behaviour],
    names: &'static [&'static str],
    first_message: &'static str,
}

#[test]
fn every_action_starts_with_reconciling_running_it_and_release_actions_with_ready_unknown() {
    let rows = vec![
        Starts {
            what: "an install after an earlier Ready=False",
            sim: with_status(Sim::new(plan_with(json!({}))), |s| {
                s.observed_generation = 1;
                s.conditions.set_condition(
                    condition::READY,
                    ConditionStatus::False,
                    "ArtifactFailed",
                    "Source not ready: artifact not found. Retrying in 30s".into(),
                    1,
                    &now(),
                );
            }),
            behaviours: &[],
            names: &["install"],
            first_message: "Running 'install' action with timeout of 5m0s",
        },
        Starts {
            what: "an install with spec.timeout",
            sim: Sim::new(plan_with(json!({"timeout": "90s"}))),
            behaviours: &[],
            names: &["install"],
            first_message: "Running 'install' action with timeout of 1m30s",
        },
        Starts {
            what: "an upgrade of a Ready release",
            sim: upgraded(json!({}), &[]),
            behaviours: &[],
            names: &["upgrade"],
            first_message: "Running 'upgrade' action with timeout of 5m0s",
        },
        Starts {
            what: "the test after an install",
            sim: Sim::new(plan_with(
                json!({"test": {"enable": true, "timeout": "1m"}}),
            )),
            behaviours: &[],
            names: &["install", "test"],
            first_message: "Running 'install' action with timeout of 5m0s",
        },
        Starts {
            what: "a rollback after a failed upgrade",
            sim: upgraded(
                json!({"upgrade": {"remediation": {"retries": 1}, "timeout": "2m"}, "rollback": {"timeout": "3m"}}),
                &[],
            ),
            behaviours: &[Behaviour::FailWritten],
            names: &["upgrade", "rollback"],
            first_message: "Running 'upgrade' action with timeout of 2m0s",
        },
        Starts {
            what: "an uninstall remediation after a failed install",
            sim: Sim::new(plan_with(
                json!({"install": {"remediation": {"retries": 1}}}),
            )),
            behaviours: &[Behaviour::FailWritten],
            names: &["install", "uninstall"],
            first_message: "Running 'install' action with timeout of 5m0s",
        },
        Starts {
            what: "a drift correction",
            sim: drifted("Deployment/default/podinfo removed"),
            behaviours: &[],
            names: &["correct cluster drift"],
            first_message: "Running 'correct cluster drift' action with timeout of 5m0s",
        },
        Starts {
            what: "an unlock of a pending release",
            sim: locked(),
            behaviours: &[],
            names: &["unlock", "upgrade"],
            first_message: "Running 'unlock' action with timeout of 5m0s",
        },
    ];
    for Starts {
        what,
        mut sim,
        behaviours,
        names,
        first_message,
    } in rows
    {
        sim.script(behaviours);
        let generation = sim.plan.generation;
        let (_, started) = run(&mut sim, none);
        let got: Vec<&str> = started.iter().map(|s| s.name).collect();
        assert_eq!(got, names, "{what}");
        assert_eq!(
            cond(&started[0].at, condition::RECONCILING).message,
            first_message,
            "{what}"
        );
        for s in &started {
            let msg = format!("Running '{}' action with timeout of {}", s.name, s.timeout);
            let rec = cond(&s.at, condition::RECONCILING);
            assert_eq!(
                (
                    rec.status,
                    rec.reason.as_str(),
                    rec.message.as_str(),
                    rec.observed_generation
                ),
                (
                    ConditionStatus::True,
                    reason::PROGRESSING,
                    msg.as_str(),
                    generation
                ),
                "{what}: {}",
                s.name
            );
            let release = matches!(s.name, "install" | "upgrade");
            let expected_ready = if release {
                Some((
                    ConditionStatus::Unknown,
                    reason::PROGRESSING.to_owned(),
                    msg,
                ))
            } else {
                ready(&s.before)
            };
            assert_eq!(ready(&s.at), expected_ready, "{what}: {}", s.name);
            assert_eq!(
                s.at.observed_generation, s.before.observed_generation,
                "{what}: {}: observedGeneration is kept",
                s.name
            );
            for c in s.before.conditions.iter() {
                if c.type_ == condition::STALLED || c.type_ == condition::REMEDIATED {
                    continue;
                }
                assert!(
                    s.at.conditions.get_condition(&c.type_).is_some(),
                    "{what}: {}: {} was wiped when the action started",
                    s.name,
                    c.type_
                );
            }
        }
    }
}

#[test]
fn an_upgrade_in_flight_shows_the_earlier_generation_observed_and_the_last_release_kept() {
    let mut sim = upgraded(json!({}), &[]);
    let (_, started) = run(&mut sim, none);
    let at = &started[0].at;
    assert_eq!(at.observed_generation, 1);
    assert_eq!(sim.plan.generation, 2);
    let released = cond(at, condition::RELEASED);
    assert_eq!(
        (released.status, released.reason.as_str()),
        (ConditionStatus::True, reason::INSTALL_SUCCEEDED)
    );
    // Done: the generation is observed.
    assert_eq!(sim.status.observed_generation, 2);
}

fn fail_unlock(_: &mut Sim, a: &Action) -> Option<Outcome> {
    matches!(a, Action::Unlock { .. }).then(|| {
        Outcome::failed(
            "Operation cannot be fulfilled: the object has been modified",
            vec![],
        )
    })
}

fn fail_uninstall_remediation(_: &mut Sim, a: &Action) -> Option<Outcome> {
    matches!(a, Action::UninstallRemediation)
        .then(|| Outcome::failed("uninstall: timed out waiting for the condition", vec![]))
}

/// The correction fails and the drift stays.
fn fail_correction(_: &mut Sim, a: &Action) -> Option<Outcome> {
    matches!(a, Action::CorrectDrift { .. }).then(|| Outcome {
        error: Some("Deployment/default/podinfo patch failure: admission webhook denied".into()),
        ..Outcome::default()
    })
}

/// The correction fails for one object; what it corrected was all the drift there was.
fn fail_correction_partly(sim: &mut Sim, a: &Action) -> Option<Outcome> {
    let Action::CorrectDrift { .. } = a else {
        return None;
    };
    sim.drift = DriftObservation::NoDrift;
    Some(Outcome {
        error: Some("ConfigMap/default/podinfo patch failure: admission webhook denied".into()),
        changes: Some("Deployment/default/podinfo configured".into()),
        ..Outcome::default()
    })
}

/// A row: a reconcile in which an action fails, and how the reconcile must end.
struct Fails {
    what: &'static str,
    sim: Sim,
    behaviours: &'static [Behaviour],
    inject: Inject,
    ends: fn(&Step) -> bool,
}

#[test]
fn after_every_failed_action_reconciling_stays_only_where_fluxs_loop_leaves_it() {
    let rows = vec![
        Fails {
            what: "install failed after writing its release, no retries: stalled",
            sim: Sim::new(plan_with(json!({}))),
            behaviours: &[Behaviour::FailWritten],
            inject: none,
            ends: |s| *s == Step::Stalled,
        },
        Fails {
            what: "install failed before any write: the error is returned",
            sim: Sim::new(plan_with(json!({}))),
            behaviours: &[Behaviour::FailUnwritten],
            inject: none,
            ends: |s| matches!(s, Step::Failed(_)),
        },
        Fails {
            what: "upgrade failed, no retries: stalled",
            sim: upgraded(json!({}), &[]),
            behaviours: &[Behaviour::FailWritten],
            inject: none,
            ends: |s| *s == Step::Stalled,
        },
        Fails {
            what: "upgrade failed, rolled back, retries left: requeued",
            sim: upgraded(json!({"upgrade": {"remediation": {"retries": 1}}}), &[]),
            behaviours: &[Behaviour::FailWritten],
            inject: none,
            ends: |s| *s == Step::Requeue,
        },
        Fails {
            what: "upgrade failed, the rollback failed too, no retries left: stalled",
            sim: upgraded(
                json!({"upgrade": {"remediation": {"retries": 0, "remediateLastFailure": true}}}),
                &[],
            ),
            behaviours: &[Behaviour::FailWritten, Behaviour::FailWritten],
            inject: none,
            ends: |s| *s == Step::Stalled,
        },
        Fails {
            what: "the test failed, no retries: stalled",
            sim: Sim::new(plan_with(json!({"test": {"enable": true}}))),
            behaviours: &[Behaviour::Succeed, Behaviour::FailWritten],
            inject: none,
            ends: |s| *s == Step::Stalled,
        },
        Fails {
            what: "install failed, its uninstall remediation failed: the error is returned",
            sim: Sim::new(plan_with(
                json!({"install": {"remediation": {"retries": 1}}}),
            )),
            behaviours: &[Behaviour::FailWritten],
            inject: fail_uninstall_remediation,
            ends: |s| matches!(s, Step::Failed(_)),
        },
        Fails {
            what: "the unlock failed: the error is returned",
            sim: locked(),
            behaviours: &[],
            inject: fail_unlock,
            ends: |s| matches!(s, Step::Failed(_)),
        },
        Fails {
            what: "the drift correction failed and the drift stays: requeued",
            sim: drifted("Deployment/default/podinfo changed (0 additions, 1 changes, 0 removals)"),
            behaviours: &[],
            inject: fail_correction,
            ends: |s| *s == Step::Requeue,
        },
        Fails {
            what: "the drift correction failed in part, the drift is gone: done",
            sim: drifted("Deployment/default/podinfo changed (0 additions, 1 changes, 0 removals)"),
            behaviours: &[],
            inject: fail_correction_partly,
            ends: |s| *s == Step::Done,
        },
        Fails {
            what: "install failed with RetryOnFailure: retried after the interval",
            sim: Sim::new(plan_with(
                json!({"install": {"strategy": {"name": "RetryOnFailure", "retryInterval": "1m"}}}),
            )),
            behaviours: &[Behaviour::FailWritten],
            inject: none,
            ends: |s| matches!(s, Step::RetryAfter(_)),
        },
    ];
    for Fails {
        what,
        mut sim,
        behaviours,
        inject,
        ends,
    } in rows
    {
        sim.script(behaviours);
        let (step, started) = run(&mut sim, inject);
        assert!(ends(&step), "{what}: {step:?}");
        let last = started.last().expect("an action ran");
        let reconciling = sim
            .status
            .conditions
            .get_condition(condition::RECONCILING)
            .map(|c| (c.reason.clone(), c.message.clone()));
        let ready_message = sim
            .status
            .conditions
            .message_of(condition::READY)
            .to_owned();
        let expected = match &step {
            // The action's reconciler returned its error: Flux returns it as is.
            Step::Failed(_) => Some((
                reason::PROGRESSING.to_owned(),
                format!(
                    "Running '{}' action with timeout of {}",
                    last.name, last.timeout
                ),
            )),
            Step::Requeue => Some((reason::PROGRESSING_WITH_RETRY.to_owned(), ready_message)),
            Step::RetryAfter(d) => Some((
                reason::PROGRESSING_WITH_RETRY.to_owned(),
                format!("retrying after {d}"),
            )),
            Step::Done | Step::Stalled | Step::Run { .. } => None,
        };
        assert_eq!(reconciling, expected, "{what}");
        if step == Step::Stalled {
            assert!(sim.status.conditions.is_true(condition::STALLED), "{what}");
        }
    }
}

/// Flux marks `Ready=Unknown` "correcting cluster drift" inside `CorrectClusterDrift`
/// (`correct_cluster_drift.go`), after the loop's pre-action patch: a failed correction
/// whose drift stays requeues with that as `Reconciling`'s message, never leaving
/// "Running 'correct cluster drift' action".
#[test]
fn a_failed_drift_correction_leaves_no_running_reconciling() {
    let mut sim = drifted("Deployment/default/podinfo removed");
    let (step, started) = run(&mut sim, fail_correction);
    assert_eq!(step, Step::Requeue);
    assert_eq!(
        ready(&started[0].at).map(|r| r.0),
        Some(ConditionStatus::True),
        "Ready is untouched while the correction runs"
    );
    let rec = cond(&sim.status, condition::RECONCILING);
    assert_eq!(
        (rec.reason.as_str(), rec.message.as_str()),
        (reason::PROGRESSING_WITH_RETRY, "correcting cluster drift")
    );
    assert_eq!(
        ready(&sim.status),
        Some((
            ConditionStatus::Unknown,
            reason::PROGRESSING.to_owned(),
            "correcting cluster drift".to_owned()
        ))
    );
}

/// A reconcile stopped after deciding but before running (a newer plan, a shutdown) undoes
/// the decision: no `Reconciling` for an action that never ran, no `forceAt` token recorded
/// as handled for it.
#[test]
fn a_stop_before_the_action_runs_undoes_its_decision() {
    let mut sim = installed_sim(json!({}));
    sim.plan.requests.force_at = Some("now".into());
    sim.plan.requests.requested_at = Some("now".into());
    let before = sim.status.clone();
    let t = now();
    let plan = sim.plan.clone();
    let mut driver = Driver::new(&plan, sim.status.clone());
    let step = loop {
        match driver.next(&t) {
            Next::Observe { .. } => {
                let o = sim.observe(DriftObservation::NotChecked);
                driver.observed(o.current, o.rollback_target);
            }
            Next::DetectDrift => driver.drift(DriftObservation::NoDrift),
            Next::Persist => driver.persisted(),
            Next::Run { action, .. } => {
                assert_eq!(
                    action,
                    Action::Upgrade {
                        cause: UpgradeCause::Forced
                    }
                );
                assert_eq!(
                    driver
                        .status()
                        .conditions
                        .message_of(condition::RECONCILING),
                    "Running 'upgrade' action with timeout of 5m0s"
                );
                driver.stop();
            }
            Next::Done(step) => break step,
        }
    };
    assert_eq!(step, Step::Requeue);
    let done = driver.finish();
    assert!(done.actions.is_empty());
    assert_eq!(done.status.conditions, before.conditions);
    assert_eq!(
        done.status.last_handled_force_at, before.last_handled_force_at,
        "the token was not handled"
    );
}
