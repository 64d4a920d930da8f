//! The agent runtime driven through its library API on real local clusters: revisions
//! (older ignored, same a no-op, newer applied right after the reconcile in flight), the
//! status reported as each action starts (Flux's pre-action patch),
//! deletion, rejected plans, a state too large for a Secret, and the metrics it counts.

mod common;

use std::sync::Arc;
use std::time::Duration;

use flotilla_agent::charts::LocalCharts;
use flotilla_agent::reconcile::Context;
use flotilla_agent::reconcile::render::ChartRenderer;
use flotilla_agent::runtime::{Agent, AgentHandle, AgentOptions, Reports};
use flotilla_agent::storage::{SecretStorage, status_of};
use flotilla_agent::telemetry::Metrics;
use flotilla_chart::release::Status;
use flotilla_core::agent::{
    Command, DeleteOutcome, DeleteRequest, ObjectKey, Report, StatusReport,
};
use flotilla_core::ids::PlanRevision;
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition};
use flotilla_core::plan::ReleasePlan;
use flotilla_core::release::Step;
use flotilla_tests::{Cluster, ClusterOptions};

use common::Hr;

/// An agent on `cluster` with state in `default`, serving charts from `charts`.
async fn agent(
    cluster: &Cluster,
    charts: Arc<LocalCharts>,
    metrics: Option<Metrics>,
) -> anyhow::Result<(AgentHandle, Reports)> {
    let ctx = Context::new(
        cluster.client().await?,
        "default",
        Arc::new(ChartRenderer::default()),
    );
    let options = AgentOptions {
        metrics,
        backoff: flotilla_agent::runtime::queue::Backoff {
            base: Duration::from_millis(200),
            max: Duration::from_secs(2),
            jitter: 0.1,
        },
        ..AgentOptions::default()
    };
    Ok(Agent::start(ctx, charts, options).await?)
}

/// The plan of `hr` at `revision`, its chart registered in `charts`.
fn plan(charts: &LocalCharts, hr: Hr, revision: u64) -> ReleasePlan {
    let file = hr.plan();
    charts.insert(file.plan.chart.digest.clone(), file.chart);
    let mut plan = file.plan;
    plan.revision = PlanRevision::new(revision);
    plan
}

/// The next report, failing after `within`.
async fn next(reports: &mut Reports, within: Duration) -> anyhow::Result<Report> {
    match tokio::time::timeout(within, reports.recv()).await {
        Ok(Some(r)) => Ok(r),
        Ok(None) => anyhow::bail!("the report stream ended"),
        Err(_) => anyhow::bail!("no report within {within:?}"),
    }
}

/// The next status report, the in-action ones included (events skipped).
async fn next_any_status(reports: &mut Reports) -> anyhow::Result<StatusReport> {
    loop {
        match next(reports, Duration::from_secs(120)).await? {
            Report::Status(s) => return Ok(*s),
            Report::Event { .. } => {}
            other => anyhow::bail!("expected a status, got {other:?}"),
        }
    }
}

/// The next status report that ends a reconcile (events and the statuses reported as an
/// action starts skipped).
async fn next_status(reports: &mut Reports) -> anyhow::Result<StatusReport> {
    loop {
        let s = next_any_status(reports).await?;
        if !matches!(s.step, Step::Run { .. }) {
            return Ok(s);
        }
    }
}

/// The status reported as an action starts: Flux's pre-action patch.
async fn next_in_action(reports: &mut Reports) -> anyhow::Result<StatusReport> {
    let s = next_any_status(reports).await?;
    anyhow::ensure!(
        matches!(s.step, Step::Run { .. }),
        "expected the status of an action starting, got {:?}: {:#?}",
        s.step,
        s.status.conditions
    );
    Ok(s)
}

/// `(status, reason, message, observedGeneration)` of a condition.
fn cond(s: &StatusReport, type_: &str) -> Option<(ConditionStatus, String, String, i64)> {
    s.status.conditions.get_condition(type_).map(|c| {
        (
            c.status,
            c.reason.clone(),
            c.message.clone(),
            c.observed_generation,
        )
    })
}

/// No report other than events within `wait`.
async fn quiet(reports: &mut Reports, wait: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, reports.recv()).await {
            Err(_) => return Ok(()),
            Ok(Some(Report::Event { .. })) => {}
            Ok(other) => anyhow::bail!("expected no report, got {other:?}"),
        }
    }
}

fn ready(status: &StatusReport) -> bool {
    status.status.conditions.is_true(condition::READY)
}

#[tokio::test]
async fn revisions_older_are_ignored_the_same_is_a_no_op_and_a_newer_one_runs_right_after_the_reconcile_in_flight()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("rt-revisions")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let charts = Arc::new(LocalCharts::new());
    let (agent, mut reports) = agent(&cluster, charts.clone(), None).await?;
    let key = ObjectKey {
        namespace: "default".parse()?,
        name: "demo".parse()?,
    };

    // Revision 5 installs. Before the install runs, its status is reported as Flux patches
    // it: Ready=Unknown and Reconciling with the action and its timeout.
    let v5 = plan(&charts, Hr::new("demo", "ok").interval("1h"), 5);
    agent.upsert(v5.clone())?;
    let starting = next_in_action(&mut reports).await?;
    assert_eq!(starting.plan_revision, PlanRevision::new(5));
    let running = "Running 'install' action with timeout of 30s".to_owned();
    assert_eq!(
        cond(&starting, condition::READY),
        Some((
            ConditionStatus::Unknown,
            "Progressing".into(),
            running.clone(),
            1
        ))
    );
    assert_eq!(
        cond(&starting, condition::RECONCILING),
        Some((ConditionStatus::True, "Progressing".into(), running, 1))
    );
    assert_eq!(
        starting.status.observed_generation, 0,
        "nothing observed yet"
    );
    let s = next_status(&mut reports).await?;
    assert!(s.seq > starting.seq);
    assert_eq!(s.plan_revision, PlanRevision::new(5));
    assert!(ready(&s), "{:#?}", s.status.conditions);
    let first_seq = s.seq;

    // An older revision is ignored, the same one is a no-op: nothing runs, nothing reports.
    let mut v4 = plan(&charts, Hr::new("demo", "ok").generation(9), 4);
    v4.revision = PlanRevision::new(4);
    agent.upsert(v4)?;
    agent.upsert(v5.clone())?;
    quiet(&mut reports, Duration::from_secs(3)).await?;
    let held = agent.held();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].revision, PlanRevision::new(5));
    assert_eq!(held[0].object, key);
    assert!(held[0].status_digest.is_some());

    // Revision 6 upgrades to a chart that never becomes ready, with tests: while its
    // upgrade waits, revision 7 arrives. The upgrade finishes (it times out), the test is
    // not started, and revision 7 runs right after.
    let v6 = plan(
        &charts,
        Hr::new("demo", "never-ready")
            .generation(2)
            .timeout(Some("8s"))
            .spec("  test:\n    enable: true"),
        6,
    );
    agent.upsert(v6)?;
    // The status while the upgrade waits for pods that never get ready: Ready=Unknown,
    // Reconciling "Running 'upgrade' action with timeout of 8s", generation 1 still the
    // observed one and the install's Released kept.
    let waiting = next_in_action(&mut reports).await?;
    assert_eq!(waiting.plan_revision, PlanRevision::new(6));
    let running = "Running 'upgrade' action with timeout of 8s".to_owned();
    assert_eq!(
        cond(&waiting, condition::READY),
        Some((
            ConditionStatus::Unknown,
            "Progressing".into(),
            running.clone(),
            2
        ))
    );
    assert_eq!(
        cond(&waiting, condition::RECONCILING),
        Some((ConditionStatus::True, "Progressing".into(), running, 2))
    );
    assert_eq!(waiting.status.observed_generation, 1);
    assert_eq!(
        cond(&waiting, condition::RELEASED).map(|c| (c.0, c.1)),
        Some((ConditionStatus::True, "InstallSucceeded".into()))
    );
    let client = cluster.client().await?;
    let records = SecretStorage::new(client.clone(), "default");
    flotilla_tests::wait::until(
        "the upgrade of revision 6 to start",
        Duration::from_secs(60),
        || {
            let records = records.clone();
            async move {
                Ok(records
                    .last("demo")
                    .await?
                    .filter(|r| status_of(r) == Status::PendingUpgrade))
            }
        },
    )
    .await?;
    let v7 = plan(&charts, Hr::new("demo", "ok").generation(3), 7);
    agent.upsert(v7)?;
    let s6 = next_status(&mut reports).await?;
    assert_eq!(s6.plan_revision, PlanRevision::new(6));
    assert!(s6.seq > waiting.seq && waiting.seq > first_seq);
    // The upgrade failed (no retries): stalled, and no Reconciling is left behind.
    assert_eq!(s6.step, Step::Stalled, "{:#?}", s6.status.conditions);
    assert_eq!(cond(&s6, condition::RECONCILING), None);
    assert_eq!(
        cond(&s6, condition::READY).map(|c| (c.0, c.1)),
        Some((ConditionStatus::False, "UpgradeFailed".into()))
    );
    let s7 = next_status(&mut reports).await?;
    assert_eq!(s7.plan_revision, PlanRevision::new(7));
    assert!(s7.seq > s6.seq, "sequence numbers grow");
    assert!(ready(&s7), "{:#?}", s7.status.conditions);
    let history = flotilla_tests::tools::helm_history(&kubeconfig, "demo", "default")?;
    let statuses: Vec<(i64, &str)> = history.iter().map(|(v, s, _)| (*v, s.as_str())).collect();
    assert_eq!(
        statuses,
        [(1, "superseded"), (2, "failed"), (3, "deployed")],
        "{history:#?}"
    );
    Ok(())
}

#[tokio::test]
async fn delete_uninstalls_and_reports_deleted_and_a_bad_plan_is_rejected_naming_the_field()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("rt-delete")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let charts = Arc::new(LocalCharts::new());
    let metrics = Metrics::new();
    let (agent, mut reports) = agent(&cluster, charts.clone(), Some(metrics.clone())).await?;

    let p = plan(&charts, Hr::new("gone", "ok"), 1);
    let key = p.object.key();
    agent.upsert(p)?;
    assert!(ready(&next_status(&mut reports).await?));

    // A plan with a zero interval is refused, naming the field; the held plan is kept.
    let mut bad = plan(&charts, Hr::new("gone", "ok").generation(2), 2);
    bad.options.interval = flotilla_core::duration::GoDuration::from_secs(0);
    agent.upsert(bad)?;
    match next(&mut reports, Duration::from_secs(10)).await? {
        Report::Rejected {
            object,
            revision,
            error,
        } => {
            assert_eq!(object, key);
            assert_eq!(revision, PlanRevision::new(2));
            assert!(error.contains("spec.interval"), "{error}");
            assert!(error.contains("default/gone"), "{error}");
        }
        other => anyhow::bail!("expected a rejection, got {other:?}"),
    }
    assert_eq!(agent.held()[0].revision, PlanRevision::new(1));

    agent.send(Command::Delete(DeleteRequest {
        object: key.clone(),
        revision: PlanRevision::new(3),
        uninstall: Some(Default::default()),
    }))?;
    loop {
        match next(&mut reports, Duration::from_secs(60)).await? {
            Report::Deleted {
                object,
                revision,
                outcome,
            } => {
                assert_eq!(object, key);
                assert_eq!(revision, PlanRevision::new(3));
                assert_eq!(outcome, DeleteOutcome::Uninstalled);
                break;
            }
            Report::Event { .. } => {}
            other => anyhow::bail!("expected Deleted, got {other:?}"),
        }
    }
    assert!(agent.held().is_empty());
    let history = flotilla_tests::tools::helm_history(&kubeconfig, "gone", "default");
    assert!(
        history.is_err() || history?.is_empty(),
        "the release is gone"
    );
    let client = cluster.client().await?;
    let store = flotilla_agent::reconcile::state::StateStore::new(client, "default");
    assert!(store.load(&key).await?.is_none(), "the plan is forgotten");

    // Deleting what is not held is already done.
    agent.send(Command::Delete(DeleteRequest {
        object: key.clone(),
        revision: PlanRevision::new(4),
        uninstall: None,
    }))?;
    match next(&mut reports, Duration::from_secs(10)).await? {
        Report::Deleted { outcome, .. } => assert_eq!(outcome, DeleteOutcome::Forgotten),
        other => anyhow::bail!("expected Deleted, got {other:?}"),
    }

    // What the runtime counted.
    let text = metrics.encode()?;
    for want in [
        "flotilla_agent_plans_held 0",
        "flotilla_agent_action_total{action=\"install\",result=\"success\"} 1",
        "flotilla_agent_action_total{action=\"uninstall\",result=\"success\"} 1",
        "flotilla_agent_reconcile_duration_seconds_count{result=\"success\"} 1",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    agent.shutdown()?;
    assert!(
        tokio::time::timeout(Duration::from_secs(10), reports.recv())
            .await?
            .is_none(),
        "the report stream ends after a shutdown"
    );
    Ok(())
}

#[tokio::test]
async fn a_plan_too_large_for_a_secret_is_refused_with_a_condition_and_the_release_is_untouched()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("rt-large")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let charts = Arc::new(LocalCharts::new());
    let (agent, mut reports) = agent(&cluster, charts.clone(), None).await?;

    let p = plan(&charts, Hr::new("big", "ok"), 1);
    agent.upsert(p)?;
    assert!(ready(&next_status(&mut reports).await?));

    // 2 MiB of values that do not compress.
    let mut rng = fastrand::Rng::with_seed(42);
    let noise: String = (0..2 << 20).map(|_| rng.alphanumeric()).collect();
    let mut huge = plan(&charts, Hr::new("big", "ok").generation(2), 2);
    huge.values = serde_json::json!({"noise": noise});
    huge.config_digest = flotilla_core::digest::config_digest(&huge.values);
    agent.upsert(huge)?;
    let mut rejected = None;
    let mut status = None;
    while rejected.is_none() || status.is_none() {
        match next(&mut reports, Duration::from_secs(30)).await? {
            Report::Rejected { error, .. } => rejected = Some(error),
            Report::Status(s) => status = Some(*s),
            Report::Event { .. } => {}
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }
    let error = rejected.expect("set above");
    assert!(error.contains("default/big"), "{error}");
    assert!(error.contains("Secret"), "{error}");
    let status = status.expect("set above");
    let ready = status
        .status
        .conditions
        .get_condition(condition::READY)
        .expect("a Ready condition");
    assert_eq!(ready.status, ConditionStatus::False);
    assert_eq!(ready.message, error);
    assert_eq!(status.plan_revision, PlanRevision::new(1));
    assert_eq!(status.step, Step::Stalled);
    assert_eq!(agent.held()[0].revision, PlanRevision::new(1));
    let history = flotilla_tests::tools::helm_history(&kubeconfig, "big", "default")?;
    assert_eq!(history.len(), 1, "{history:#?}");
    assert_eq!(history[0].1, "deployed");
    Ok(())
}

#[tokio::test]
async fn a_reconcile_request_runs_at_once_and_the_drift_it_finds_is_counted_detected_and_corrected()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("rt-drift")).await?;
    let client = cluster.client().await?;
    let charts = Arc::new(LocalCharts::new());
    let metrics = Metrics::new();
    let (agent, mut reports) = agent(&cluster, charts.clone(), Some(metrics.clone())).await?;
    let p = plan(
        &charts,
        Hr::new("drifty", "drift")
            .interval("1h")
            .spec("  driftDetection:\n    mode: enabled"),
        1,
    );
    let key = p.object.key();
    agent.upsert(p)?;
    assert!(ready(&next_status(&mut reports).await?));

    // Someone deletes an object of the release; a reconcile request (the interval is an
    // hour away) finds and corrects it.
    let configs: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "default");
    configs
        .delete("demo-config", &kube::api::DeleteParams::default())
        .await?;
    agent.send(Command::Reconcile(key))?;
    let s = next_status(&mut reports).await?;
    assert!(ready(&s), "{:#?}", s.status.conditions);
    assert!(configs.get_opt("demo-config").await?.is_some(), "recreated");
    let text = metrics.encode()?;
    for want in [
        "flotilla_agent_drift_detected_total 1",
        "flotilla_agent_drift_corrected_total 1",
        "flotilla_agent_plans_held 1",
        "flotilla_agent_reconcile_duration_seconds_count{result=\"success\"} 2",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    Ok(())
}
