//! The reconcile executor against real local clusters: plan files with the plain charts of
//! `tests/charts`, core's state machine deciding, Helm storage and the controller state
//! kept in the cluster. Each test starts its own cluster.

mod common;

use std::sync::Arc;

use flotilla_agent::reconcile::plan_file::PlanFile;
use flotilla_agent::reconcile::render::{ChartRenderer, LiteralRenderer};
use flotilla_agent::reconcile::state::{StateStore, secret_name};
use flotilla_agent::reconcile::{Context, ReconcileReport, delete_release};
use flotilla_agent::storage::transitions::set_status;
use flotilla_agent::storage::{SecretStorage, status_of};
use flotilla_chart::release::{HookEvent, HookPhase, Status};
use flotilla_core::meta::{ConditionStatus, condition, reason};
use flotilla_core::release::Step;
use flotilla_tests::{Cluster, ClusterOptions};

use common::{Hr, run};

/// HelmRelease `default/demo` with `chart` and extra spec lines.
fn plan(chart: &str, generation: i64, spec: &str) -> PlanFile {
    Hr::new("demo", chart)
        .generation(generation)
        .timeout(Some("20s"))
        .spec(spec)
        .plan()
}

async fn start(name: &str) -> anyhow::Result<(Cluster, Context)> {
    common::start(name, Arc::new(LiteralRenderer)).await
}

/// A fresh context (as a restarted agent would build it).
async fn context(cluster: &Cluster) -> anyhow::Result<Context> {
    Ok(Context::new(
        cluster.client().await?,
        "default",
        Arc::new(LiteralRenderer),
    ))
}

fn cond<'a>(report: &'a ReconcileReport, type_: &str) -> (&'a str, ConditionStatus, &'a str) {
    common::expect_condition(report, type_)
}

async fn storage(ctx: &Context) -> anyhow::Result<Vec<(i64, String, String)>> {
    let store = SecretStorage::new(ctx.cluster.client().clone(), "default");
    Ok(store
        .history("demo")
        .await?
        .into_iter()
        .map(|r| {
            let info = r.info.clone().unwrap_or_default();
            (r.version, status_of(&r).to_string(), info.description)
        })
        .collect())
}

#[tokio::test]
async fn install_then_upgrade_on_a_values_change() -> anyhow::Result<()> {
    let (_cluster, ctx) = start("rec-upgrade").await?;
    let first = plan("ok", 1, "  values:\n    greeting: hello");
    let report = run(&ctx, &first).await?;
    assert_eq!(report.actions, ["install"]);
    assert_eq!(report.step, Step::Done);
    assert_eq!(
        cond(&report, condition::READY),
        (
            reason::INSTALL_SUCCEEDED,
            ConditionStatus::True,
            "Helm install succeeded for release default/demo.v1 with chart demo@0.1.0"
        )
    );
    assert_eq!(
        storage(&ctx).await?,
        [(1, "deployed".into(), "Install complete".into())]
    );

    let second = plan("ok", 2, "  values:\n    greeting: bonjour");
    let report = run(&ctx, &second).await?;
    assert_eq!(report.actions, ["upgrade"]);
    assert_eq!(
        cond(&report, condition::RELEASED),
        (
            reason::UPGRADE_SUCCEEDED,
            ConditionStatus::True,
            "Helm upgrade succeeded for release default/demo.v2 with chart demo@0.1.0"
        )
    );
    assert_eq!(report.status.observed_generation, 2);
    assert_eq!(
        storage(&ctx).await?,
        [
            (1, "superseded".into(), "Install complete".into()),
            (2, "deployed".into(), "Upgrade complete".into())
        ]
    );
    // Nothing changed: the next reconcile does nothing.
    let report = run(&ctx, &second).await?;
    assert!(report.actions.is_empty(), "{:?}", report.actions);
    Ok(())
}

#[tokio::test]
async fn a_failing_pre_install_hook_fails_the_install_is_remediated_then_stalls_across_a_restart()
-> anyhow::Result<()> {
    let (cluster, ctx) = start("rec-hook").await?;
    let p = plan(
        "pre-install-fails",
        1,
        "  install:\n    remediation:\n      retries: 1",
    );
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["install", "uninstall"]);
    assert_eq!(report.step, Step::Requeue);
    let (r, st, msg) = cond(&report, condition::RELEASED);
    assert_eq!((r, st), (reason::INSTALL_FAILED, ConditionStatus::False));
    assert!(
        msg.starts_with("Helm install failed for release default/demo with chart demo@0.1.2: failed pre-install: failed early due to stalled resources: [Pod/default/demo-migrate status: 'Failed']"),
        "{msg}"
    );
    assert_eq!(
        cond(&report, condition::REMEDIATED).0,
        reason::UNINSTALL_SUCCEEDED
    );
    assert_eq!(report.status.install_failures, 1);
    assert!(
        storage(&ctx).await?.is_empty(),
        "the uninstall remediation purged the history"
    );

    // An agent restart: a new context reads the counters back from the state Secret.
    drop(ctx);
    let ctx = context(&cluster).await?;
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["install"]);
    assert_eq!(report.step, Step::Stalled);
    assert_eq!(report.status.install_failures, 2);
    assert_eq!(
        cond(&report, condition::STALLED),
        (
            reason::RETRIES_EXCEEDED,
            ConditionStatus::True,
            "Failed to install after 2 attempt(s)"
        )
    );
    let stored = storage(&ctx).await?;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].1, "failed");
    assert!(
        stored[0]
            .2
            .starts_with("Release \"demo\" failed: failed pre-install"),
        "{}",
        stored[0].2
    );
    Ok(())
}

#[tokio::test]
async fn a_failing_test_pod_is_test_failed_and_recorded_in_the_release() -> anyhow::Result<()> {
    let (_cluster, ctx) = start("rec-test").await?;
    let p = plan("test-fails", 1, "  test:\n    enable: true");
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["install", "test"]);
    let (r, st, msg) = cond(&report, condition::TEST_SUCCESS);
    assert_eq!((r, st), (reason::TEST_FAILED, ConditionStatus::False));
    assert!(
        msg.starts_with("Helm test failed for release default/demo.v1 with chart demo@0.1.1: failed early due to stalled resources: [Pod/default/demo-test status: 'Failed']"),
        "{msg}"
    );
    assert_eq!(cond(&report, condition::READY).0, reason::TEST_FAILED);
    let snapshot = &report.status.history[0];
    let hooks = snapshot.test_hooks.clone().unwrap_or_default();
    assert_eq!(
        hooks.get("demo-test").and_then(|h| h.phase),
        Some(flotilla_core::status::HookPhase::Failed)
    );
    let store = SecretStorage::new(ctx.cluster.client().clone(), "default");
    let rls = store.last("demo").await?.expect("the release");
    let hook = rls
        .hooks
        .iter()
        .find(|h| h.events.contains(&HookEvent::Test))
        .expect("the test hook");
    assert_eq!(hook.last_run.phase, Some(HookPhase::Failed));
    assert!(!hook.last_run.started_at.is_zero() && !hook.last_run.completed_at.is_zero());
    Ok(())
}

#[tokio::test]
async fn an_upgrade_wait_timeout_names_the_object_and_is_remediated_by_rollback()
-> anyhow::Result<()> {
    let (_cluster, ctx) = start("rec-rollback").await?;
    let report = run(&ctx, &plan("ok", 1, "")).await?;
    assert_eq!(report.actions, ["install"]);

    let broken = plan(
        "never-ready",
        2,
        "  upgrade:\n    timeout: 6s\n    remediation:\n      retries: 1",
    );
    let report = run(&ctx, &broken).await?;
    assert_eq!(report.actions, ["upgrade", "rollback"]);
    assert_eq!(report.step, Step::Requeue);
    let (r, _, msg) = cond(&report, condition::RELEASED);
    assert_eq!(r, reason::UPGRADE_FAILED);
    assert!(
        msg.contains("timeout waiting for: [Deployment/default/demo status: 'InProgress']"),
        "{msg}"
    );
    assert_eq!(
        cond(&report, condition::REMEDIATED),
        (
            reason::ROLLBACK_SUCCEEDED,
            ConditionStatus::True,
            "Helm rollback to previous release default/demo.v1 with chart demo@0.1.0 succeeded"
        )
    );
    let stored = storage(&ctx).await?;
    assert_eq!(
        stored
            .iter()
            .map(|(v, s, _)| (*v, s.as_str()))
            .collect::<Vec<_>>(),
        [(1, "superseded"), (2, "failed"), (3, "deployed")]
    );
    assert_eq!(stored[2].2, "Rollback to 1");
    Ok(())
}

#[tokio::test]
async fn a_pending_upgrade_left_by_a_crash_is_unlocked_then_upgraded_without_rollback()
-> anyhow::Result<()> {
    let (_cluster, ctx) = start("rec-pending").await?;
    let p = plan("ok", 1, "");
    run(&ctx, &p).await?;
    // The crash: an upgrade wrote its pending record and died.
    let store = SecretStorage::new(ctx.cluster.client().clone(), "default");
    let mut pending = store.last("demo").await?.expect("v1");
    pending.version = 2;
    set_status(&mut pending, Status::PendingUpgrade, "Preparing upgrade");
    store.create(&pending).await?;

    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["unlock", "upgrade"]);
    assert_eq!(report.step, Step::Done);
    assert_eq!(cond(&report, condition::READY).1, ConditionStatus::True);
    assert_eq!(
        storage(&ctx).await?,
        [
            (1, "superseded".into(), "Install complete".into()),
            (
                2,
                "failed".into(),
                "Release unlocked from stale 'pending-upgrade' state".into()
            ),
            (3, "deployed".into(), "Upgrade complete".into()),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_restarted_agent_resumes_from_the_persisted_state() -> anyhow::Result<()> {
    let (cluster, ctx) = start("rec-restart").await?;
    let p = plan("ok", 1, "  test:\n    enable: true");
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["install", "test"]);
    assert_eq!(cond(&report, condition::READY).1, ConditionStatus::True);

    drop(ctx);
    let ctx = context(&cluster).await?;
    let state = StateStore::new(cluster.client().await?, "default");
    let persisted = state
        .load(&p.plan.object.key())
        .await?
        .expect("state Secret");
    assert_eq!(persisted.status, report.status);
    let name = secret_name(&p.plan.object.key());
    assert!(name.starts_with("flotilla-release-default-demo-"), "{name}");
    let again = run(&ctx, &p).await?;
    assert!(
        again.actions.is_empty(),
        "no action after a restart: {:?}",
        again.actions
    );
    assert_eq!(again.status.history, report.status.history);
    Ok(())
}

#[tokio::test]
async fn deleting_the_helm_release_uninstalls_the_release_and_forgets_its_state()
-> anyhow::Result<()> {
    let (cluster, ctx) = start("rec-delete").await?;
    let p = plan("ok", 1, "");
    assert_eq!(run(&ctx, &p).await?.actions, ["install"]);
    let configs: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(cluster.client().await?, "default");
    assert!(configs.get_opt("demo-config").await?.is_some());

    let (report, _) = delete_release(&ctx, &p.plan, Some(&p.chart)).await?;
    assert_eq!(report.actions, ["uninstall"]);
    assert_eq!(report.step, Step::Done);
    assert_eq!(
        cond(&report, condition::RELEASED),
        (
            reason::UNINSTALL_SUCCEEDED,
            ConditionStatus::False,
            "Helm uninstall succeeded for release default/demo.v1 with chart demo@0.1.0"
        )
    );
    assert!(storage(&ctx).await?.is_empty(), "history purged");
    assert!(configs.get_opt("demo-config").await?.is_none());
    let state = StateStore::new(cluster.client().await?, "default");
    assert!(
        state.load(&p.plan.object.key()).await?.is_none(),
        "state forgotten"
    );
    Ok(())
}

#[tokio::test]
async fn a_replacing_install_keeps_every_record_as_max_history_applies_to_upgrades_only()
-> anyhow::Result<()> {
    let (_cluster, ctx) = start("rec-max-history").await?;
    let spec =
        "  maxHistory: 1\n  install:\n    replace: true\n  uninstall:\n    keepHistory: true";
    let first = plan("ok", 1, spec);
    assert_eq!(run(&ctx, &first).await?.actions, ["install"]);
    let (report, _) = delete_release(&ctx, &first.plan, Some(&first.chart)).await?;
    assert_eq!(report.actions, ["uninstall"]);
    assert_eq!(
        storage(&ctx).await?,
        [(1, "uninstalled".into(), "Uninstallation complete".into())]
    );

    // The HelmRelease again: the uninstalled release is replaced by an install, which, as
    // Helm's and Flux's, prunes nothing (maxHistory 1 would have deleted revision 1).
    let again = plan("ok", 2, spec);
    assert_eq!(run(&ctx, &again).await?.actions, ["install"]);
    assert_eq!(
        storage(&ctx).await?,
        [
            (1, "superseded".into(), "superseded by new release".into()),
            (2, "deployed".into(), "Install complete".into())
        ]
    );
    // An upgrade prunes to maxHistory, keeping the deployed record it replaces... and
    // nothing else.
    let third = plan(
        "ok",
        3,
        &format!("{spec}\n  values:\n    greeting: bonjour"),
    );
    assert_eq!(run(&ctx, &third).await?.actions, ["upgrade"]);
    let versions: Vec<i64> = storage(&ctx).await?.iter().map(|r| r.0).collect();
    assert_eq!(versions, [2, 3]);
    Ok(())
}

#[tokio::test]
async fn install_creates_the_target_namespace_and_the_chart_crds_before_the_custom_resources()
-> anyhow::Result<()> {
    let (cluster, ctx) = start("rec-crds").await?;
    let p = plan(
        "with-crd",
        1,
        "  targetNamespace: apps\n  install:\n    createNamespace: true",
    );
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["install"]);
    assert_eq!(
        cond(&report, condition::READY),
        (
            reason::INSTALL_SUCCEEDED,
            ConditionStatus::True,
            "Helm install succeeded for release apps/apps-demo.v1 with chart widgets@1.0.0"
        )
    );
    let client = cluster.client().await?;
    let widget = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "example.flotilla.dev",
        "v1",
        "Widget",
    ));
    let widgets: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client, "apps", &widget);
    let gizmo = widgets.get("gizmo").await?;
    assert_eq!(gizmo.data["spec"]["size"], 3);
    // The release lives in the target namespace, its storage beside the HelmRelease.
    let store = SecretStorage::new(ctx.cluster.client().clone(), "default");
    let rls = store.last("apps-demo").await?.expect("the release record");
    assert_eq!(rls.namespace, "apps");
    assert!(
        !rls.manifest.contains("CustomResourceDefinition"),
        "CRDs are not in the manifest"
    );
    Ok(())
}

#[tokio::test]
async fn an_upgrade_deletes_the_objects_the_new_chart_no_longer_has() -> anyhow::Result<()> {
    let (cluster, ctx) = start("rec-removed").await?;
    assert_eq!(run(&ctx, &plan("ok", 1, "")).await?.actions, ["install"]);
    let configs: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(cluster.client().await?, "default");
    assert!(configs.get_opt("demo-config").await?.is_some());
    let report = run(&ctx, &plan("smaller", 2, "")).await?;
    assert_eq!(report.actions, ["upgrade"]);
    assert_eq!(cond(&report, condition::READY).0, reason::UPGRADE_SUCCEEDED);
    assert!(configs.get_opt("demo-config").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn test_filters_leave_out_excluded_test_hooks() -> anyhow::Result<()> {
    let (_cluster, ctx) = start("rec-filter").await?;
    let p = plan(
        "test-fails",
        1,
        "  test:\n    enable: true\n    filters:\n    - name: demo-test\n      exclude: true",
    );
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["install", "test"]);
    assert_eq!(
        cond(&report, condition::TEST_SUCCESS),
        (
            reason::TEST_SUCCEEDED,
            ConditionStatus::True,
            "Helm test succeeded for release default/demo.v1 with chart demo@0.1.1: no test hooks"
        )
    );
    let store = SecretStorage::new(ctx.cluster.client().clone(), "default");
    let rls = store.last("demo").await?.expect("the release");
    assert_eq!(
        rls.hooks[0].last_run.phase, None,
        "the excluded test never ran"
    );
    Ok(())
}

#[tokio::test]
async fn a_failed_upgrade_with_cleanup_on_fail_deletes_what_it_created_and_stalls()
-> anyhow::Result<()> {
    let (cluster, ctx) = start("rec-cleanup").await?;
    assert_eq!(run(&ctx, &plan("ok", 1, "")).await?.actions, ["install"]);
    let broken = plan(
        "never-ready",
        2,
        "  upgrade:\n    timeout: 4s\n    cleanupOnFail: true",
    );
    let report = run(&ctx, &broken).await?;
    assert_eq!(report.actions, ["upgrade"]);
    assert_eq!(report.step, Step::Stalled);
    assert_eq!(cond(&report, condition::RELEASED).0, reason::UPGRADE_FAILED);
    assert_eq!(
        cond(&report, condition::STALLED).2,
        "Failed to upgrade after 1 attempt(s)"
    );
    let configs: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(cluster.client().await?, "default");
    assert!(
        configs.get_opt("demo-extra").await?.is_none(),
        "the object the failed upgrade created is gone"
    );
    assert!(configs.get_opt("demo-config").await?.is_some());
    Ok(())
}

#[tokio::test]
async fn actions_run_as_the_service_account_the_plan_names() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("rec-sa")).await?;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(cluster.kubeconfig())?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let ctx = Context::from_config(config, "default", Arc::new(LiteralRenderer))?;
    // A ServiceAccount without any RBAC: its install is refused by the API server.
    let p = plan("ok", 1, "  serviceAccountName: nobody");
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["install"]);
    assert!(matches!(report.step, Step::Failed(_)), "{:?}", report.step);
    let (r, _, msg) = cond(&report, condition::RELEASED);
    assert_eq!(r, reason::INSTALL_FAILED);
    assert!(
        msg.contains("system:serviceaccount:default:nobody"),
        "{msg}"
    );
    assert!(storage(&ctx).await?.is_empty(), "nothing was written");

    // Without a configuration to impersonate from, the plan is refused outright.
    let plain = context(&cluster).await?;
    let err = run(&plain, &p).await.expect_err("refused");
    assert!(err.to_string().contains("spec.serviceAccountName"), "{err}");
    Ok(())
}

#[tokio::test]
async fn a_templated_chart_is_rendered_with_its_values_installed_and_tested() -> anyhow::Result<()>
{
    let cluster = Cluster::start(ClusterOptions::named("rec-render")).await?;
    let ctx = Context::new(
        cluster.client().await?,
        "default",
        Arc::new(ChartRenderer::default()),
    );
    let p = plan(
        "../../../tests/charts/hello",
        1,
        "  test:\n    enable: true\n  values:\n    testOutcome: fail",
    );
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["install", "test"]);
    assert_eq!(
        cond(&report, condition::RELEASED).0,
        reason::INSTALL_SUCCEEDED
    );
    let (r, _, msg) = cond(&report, condition::TEST_SUCCESS);
    assert_eq!(
        r,
        reason::TEST_FAILED,
        "the value labelled the test pod to fail"
    );
    // Flux's text, then the test pod's log (none served here: Helm's "unable to get").
    assert!(
        msg.contains(
            ": failed early due to stalled resources: [Pod/default/demo-hello-test status: 'Failed']\n\nPOD LOGS: demo-hello-test\n"
        ),
        "{msg}"
    );
    let store = SecretStorage::new(ctx.cluster.client().clone(), "default");
    let rls = store.last("demo").await?.expect("the release");
    assert!(
        rls.manifest
            .contains("# Source: hello/templates/deployment.yaml")
    );
    assert_eq!(rls.config["testOutcome"], "fail");
    Ok(())
}

/// Reconciles until the step is no longer a requeue (at most `max` times); every action run.
async fn settle(
    ctx: &Context,
    p: &PlanFile,
    max: usize,
) -> anyhow::Result<(Vec<String>, ReconcileReport)> {
    let mut actions = Vec::new();
    for _ in 0..max {
        let report = run(ctx, p).await?;
        actions.extend(report.actions.iter().map(|a| (*a).to_owned()));
        if report.step != Step::Requeue {
            return Ok((actions, report));
        }
    }
    anyhow::bail!("still requeued after {max} reconciles: {actions:?}")
}

/// `(version, status, chart name)` of each record of release `name` in `namespace`.
async fn charts_in_storage(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<(i64, String, String)>> {
    let store = SecretStorage::new(ctx.cluster.client().clone(), namespace);
    Ok(store
        .history(name)
        .await?
        .into_iter()
        .map(|r| {
            let chart = r
                .chart
                .as_ref()
                .and_then(|c| c.metadata.as_ref())
                .map(|m| m.name.clone())
                .unwrap_or_default();
            (r.version, status_of(&r).to_string(), chart)
        })
        .collect())
}

async fn deployment_uid(ctx: &Context, namespace: &str) -> anyhow::Result<String> {
    let api: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(ctx.cluster.client().clone(), namespace);
    Ok(api.get("demo").await?.metadata.uid.unwrap_or_default())
}

/// Flux v1.6.3 (`HelmReleaseReconciler.reconcileRelease`, `action.ReleaseTargetChanged`): a
/// new chart name is a new release target. With `upgrade.chartNameChangeStrategy: Reinstall`
/// (the default) the old release is uninstalled (its records purged, the status history
/// cleared) and the new chart installed as revision 1, its objects created anew; with
/// `InPlaceUpdate` the release is upgraded to revision 2 and its objects kept.
#[tokio::test]
async fn a_chart_name_change_reinstalls_the_release_by_default_and_upgrades_it_in_place_with_in_place_update()
-> anyhow::Result<()> {
    let (_cluster, ctx) = start("rec-chartname").await?;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(ctx.cluster.client().clone());
    namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(serde_json::json!({ "metadata": { "name": "inplace" } }))?,
        )
        .await?;

    // Reinstall (the default).
    let (actions, _) = settle(&ctx, &plan("ok", 1, ""), 3).await?;
    assert_eq!(actions, ["install"]);
    let before = deployment_uid(&ctx, "default").await?;
    let (actions, report) = settle(&ctx, &plan("renamed", 2, ""), 3).await?;
    assert_eq!(actions, ["uninstall", "install"]);
    assert_eq!(
        cond(&report, condition::READY),
        (
            reason::INSTALL_SUCCEEDED,
            ConditionStatus::True,
            "Helm install succeeded for release default/demo.v1 with chart demo-renamed@0.1.0"
        )
    );
    let history: Vec<(u32, String, String)> = report
        .status
        .history
        .iter()
        .map(|s| (s.version, s.status.clone(), s.chart_name.clone()))
        .collect();
    assert_eq!(history, [(1, "deployed".into(), "demo-renamed".into())]);
    assert_eq!(
        charts_in_storage(&ctx, "default", "demo").await?,
        [(1, "deployed".into(), "demo-renamed".into())]
    );
    assert_ne!(
        deployment_uid(&ctx, "default").await?,
        before,
        "the uninstall deleted the Deployment and the install created it again"
    );

    // InPlaceUpdate: an upgrade of the same release.
    let in_place = |chart: &str, generation: i64| {
        Hr::new("demo", chart)
            .namespace("inplace")
            .generation(generation)
            .timeout(Some("20s"))
            .spec("  upgrade:\n    chartNameChangeStrategy: InPlaceUpdate")
            .plan()
    };
    let (actions, _) = settle(&ctx, &in_place("ok", 1), 3).await?;
    assert_eq!(actions, ["install"]);
    let before = deployment_uid(&ctx, "inplace").await?;
    let (actions, report) = settle(&ctx, &in_place("renamed", 2), 3).await?;
    assert_eq!(actions, ["upgrade"]);
    assert_eq!(
        cond(&report, condition::READY),
        (
            reason::UPGRADE_SUCCEEDED,
            ConditionStatus::True,
            "Helm upgrade succeeded for release inplace/demo.v2 with chart demo-renamed@0.1.0"
        )
    );
    let history: Vec<(u32, String, String)> = report
        .status
        .history
        .iter()
        .map(|s| (s.version, s.status.clone(), s.chart_name.clone()))
        .collect();
    assert_eq!(
        history,
        [
            (2, "deployed".into(), "demo-renamed".into()),
            (1, "superseded".into(), "demo".into())
        ]
    );
    assert_eq!(
        charts_in_storage(&ctx, "inplace", "demo").await?,
        [
            (1, "superseded".into(), "demo".into()),
            (2, "deployed".into(), "demo-renamed".into())
        ]
    );
    assert_eq!(
        deployment_uid(&ctx, "inplace").await?,
        before,
        "upgraded in place: the same Deployment"
    );
    let config: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(ctx.cluster.client().clone(), "inplace");
    assert_eq!(
        config.get("demo-config").await?.data.unwrap_or_default()["greeting"],
        "hello from demo-renamed"
    );
    Ok(())
}
