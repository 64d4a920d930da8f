//! How the agent waits for a release, against a real local cluster: `spec.healthCheckExprs`
//! (CEL `current`/`inProgress`/`failed` over custom resources, Flux v2.7), `spec.waitStrategy`
//! (`poller` = kstatus, `legacy` = Helm's legacy ready checker) and paused Deployments,
//! which neither waits for. The chart `custom-health` holds a `Gadget` custom resource whose
//! status the chart itself sets (its CRD has no status subresource), and optionally a
//! paused Deployment whose pods would never become ready.

mod common;

use std::sync::Arc;
use std::time::Instant;

use flotilla_agent::reconcile::render::ChartRenderer;
use flotilla_core::meta::{ConditionStatus, condition, reason};

use common::{Hr, expect_condition, run};

fn gadget(name: &str, timeout: &str, spec: &str) -> Hr {
    Hr::new(name, "custom-health")
        .timeout(Some(timeout))
        .spec(spec)
}

const READY_BY_PHASE: &str = "  healthCheckExprs:
  - apiVersion: example.flotilla.dev/v1
    kind: Gadget
    current: status.phase == 'Ready'
    failed: status.phase == 'Failed'
";

#[tokio::test]
async fn health_check_exprs_decide_readiness_of_custom_resources_and_a_failed_expression_fails_fast()
-> anyhow::Result<()> {
    let (_cluster, ctx) = common::start("wait-cel", Arc::new(ChartRenderer::default())).await?;

    // kstatus alone: the Gadget's Ready=False keeps it InProgress until the timeout.
    let plain = gadget("plain", "4s", "  values:\n    ready: \"False\"").plan();
    let report = run(&ctx, &plain).await?;
    let (why, status, message) = expect_condition(&report, condition::READY);
    assert_eq!(
        (why, status),
        (reason::INSTALL_FAILED, ConditionStatus::False)
    );
    assert!(
        message.contains("timeout waiting for: [Gadget/default/plain status: 'InProgress']"),
        "{message}"
    );

    // The CEL check of the kind replaces kstatus: phase Ready is current, whatever the
    // Ready condition says.
    let by_phase = gadget(
        "by-phase",
        "20s",
        &format!("{READY_BY_PHASE}  values:\n    ready: \"False\""),
    )
    .plan();
    let report = run(&ctx, &by_phase).await?;
    assert_eq!(report.actions, ["install"]);
    let (why, status, _) = expect_condition(&report, condition::READY);
    assert_eq!(
        (why, status),
        (reason::INSTALL_SUCCEEDED, ConditionStatus::True)
    );

    // `failed` true: the wait ends at once, long before the 60s timeout.
    let started = Instant::now();
    let failing = gadget(
        "failing",
        "60s",
        &format!("{READY_BY_PHASE}  values:\n    phase: Failed"),
    )
    .plan();
    let report = run(&ctx, &failing).await?;
    let (why, status, message) = expect_condition(&report, condition::READY);
    assert_eq!(
        (why, status),
        (reason::INSTALL_FAILED, ConditionStatus::False)
    );
    assert!(
        message.contains(
            "failed early due to stalled resources: [Gadget/default/failing status: 'Failed']"
        ),
        "{message}"
    );
    assert!(started.elapsed().as_secs() < 30, "failed fast");

    // Neither true (and no inProgress): InProgress until the timeout, in Flux's words (the
    // expression waited on is not in the message, as in Flux's).
    let pending = gadget(
        "pending",
        "4s",
        &format!("{READY_BY_PHASE}  values:\n    phase: Pending"),
    )
    .plan();
    let report = run(&ctx, &pending).await?;
    let (why, _, message) = expect_condition(&report, condition::READY);
    assert_eq!(why, reason::INSTALL_FAILED);
    assert!(
        message.contains("timeout waiting for: [Gadget/default/pending status: 'InProgress']"),
        "{message}"
    );
    Ok(())
}

#[tokio::test]
async fn the_legacy_wait_strategy_does_not_wait_for_custom_resources_and_paused_deployments_are_not_waited_for()
-> anyhow::Result<()> {
    let (_cluster, ctx) = common::start("wait-legacy", Arc::new(ChartRenderer::default())).await?;

    // legacy (Helm's legacy ready checker): a custom resource is ready as it is, and the CEL
    // checks are not used (as in Flux, they are kstatus status readers).
    let legacy = gadget(
        "legacy",
        "20s",
        &format!(
            "  waitStrategy:\n    name: legacy\n{READY_BY_PHASE}  values:\n    ready: \"False\"\n    phase: Pending"
        ),
    )
    .plan();
    let report = run(&ctx, &legacy).await?;
    assert_eq!(report.actions, ["install"]);
    let (why, status, _) = expect_condition(&report, condition::READY);
    assert_eq!(
        (why, status),
        (reason::INSTALL_SUCCEEDED, ConditionStatus::True)
    );

    // poller (spelled out): the same release waits, and times out.
    let poller = gadget(
        "poller",
        "4s",
        "  waitStrategy:\n    name: poller\n  values:\n    ready: \"False\"",
    )
    .plan();
    let report = run(&ctx, &poller).await?;
    let (why, _, _) = expect_condition(&report, condition::READY);
    assert_eq!(why, reason::INSTALL_FAILED);

    // A paused Deployment (its pods could never be ready, the controller does not even
    // roll it out) is skipped by both strategies.
    for (name, strategy) in [("paused-poller", "poller"), ("paused-legacy", "legacy")] {
        let paused = gadget(
            name,
            "20s",
            &format!(
                "  waitStrategy:\n    name: {strategy}\n  values:\n    pausedDeployment: true"
            ),
        )
        .plan();
        let report = run(&ctx, &paused).await?;
        assert_eq!(report.actions, ["install"], "{strategy}");
        let (why, status, message) = expect_condition(&report, condition::READY);
        assert_eq!(
            (why, status),
            (reason::INSTALL_SUCCEEDED, ConditionStatus::True),
            "{strategy}: {message}"
        );
    }
    Ok(())
}
