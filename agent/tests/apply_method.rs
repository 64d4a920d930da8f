//! `spec.install.serverSideApply`, `spec.upgrade.serverSideApply` and `upgrade.force` against
//! real local clusters, each scenario run twice on one cluster: by the agent from a
//! HelmRelease plan and by the reference helm v4 CLI with the flags Flux passes for the same
//! spec, then the two releases compared (recorded `apply_method`, what the objects hold,
//! which managers own their fields with which operation). Between the steps another client
//! (kubectl) changes the objects, as people do. Each test starts its own cluster.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use flotilla_agent::kube::{FIELD_MANAGER, ORIGIN_FIELD_MANAGER};
use flotilla_agent::reconcile::render::ChartRenderer;
use flotilla_agent::storage::SecretStorage;
use flotilla_tests::tools;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;

use common::{Hr, run};

const INSTALL_VALUES: &str = "labels:\n  tier: web\ndata:\n  a: \"1\"\n  b: \"2\"\nenv:\n- name: A\n  value: \"1\"\n- name: B\n  value: \"2\"\n";
/// The chart drops the `tier` label, data key `b` and env var `B`, and changes `a` and `A`.
const UPGRADE_VALUES: &str = "labels: {}\ndata:\n  a: \"10\"\nenv:\n- name: A\n  value: \"10\"\n";
/// [`UPGRADE_VALUES`] and one more data key (changing `serverSideApply` alone does not
/// upgrade, in Flux as here: the values must change).
const MORE_VALUES: &str =
    "labels: {}\ndata:\n  a: \"10\"\n  c: \"3\"\nenv:\n- name: A\n  value: \"10\"\n";

/// The plan of HelmRelease `name` on chart `csa` with `values` (YAML at column 0) and more
/// `spec` lines.
fn plan(name: &str, generation: i64, values: &str, spec: &str) -> Hr {
    let values: String = values.lines().map(|l| format!("    {l}\n")).collect();
    Hr::new(name, "csa")
        .generation(generation)
        .spec(&format!("{spec}  values:\n{values}"))
}

fn chart() -> String {
    common::charts()
        .join("csa")
        .to_str()
        .expect("the repo path is UTF-8")
        .to_owned()
}

/// Runs helm with `values` in a file.
fn helm(kubeconfig: &Path, args: &[&str], values: &str) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values)?;
    let mut args = args.to_vec();
    let file = file.to_str().expect("a temporary path is UTF-8");
    args.extend(["-f", file]);
    tools::helm_in(kubeconfig, &args)
}

/// What another client does between releases: a label and a data key on the ConfigMap (with
/// `kubectl label` and `kubectl patch`), an env var on the Deployment (`kubectl set env`).
/// Release `agent` installed by the agent and `byhelm` by the helm CLI, both without
/// server-side apply, from [`INSTALL_VALUES`].
async fn install_client_side(
    ctx: &flotilla_agent::reconcile::Context,
    kubeconfig: &Path,
    chart: &str,
) -> anyhow::Result<()> {
    let install = plan(
        "agent",
        1,
        INSTALL_VALUES,
        "  install:\n    serverSideApply: false\n",
    );
    assert_eq!(run(ctx, &install.plan()).await?.actions, ["install"]);
    helm(
        kubeconfig,
        &["install", "byhelm", chart, "--server-side=false"],
        INSTALL_VALUES,
    )?;
    Ok(())
}

fn other_client_changes(kubeconfig: &Path, release: &str) -> anyhow::Result<()> {
    let config = format!("configmap/{release}-config");
    tools::kubectl_in(kubeconfig, &["label", &config, "team=ops"], None)?;
    tools::kubectl_in(
        kubeconfig,
        &[
            "patch",
            &config,
            "--type",
            "merge",
            "-p",
            r#"{"data":{"extra":"kept"}}"#,
        ],
        None,
    )?;
    tools::kubectl_in(
        kubeconfig,
        &[
            "set",
            "env",
            &format!("deployment/{release}"),
            "-c",
            "app",
            "C=3",
        ],
        None,
    )?;
    Ok(())
}

/// What a release's objects hold, without what names the release: the ConfigMap's label
/// keys (Helm's and the chart's, not Flotilla's owner labels) and data, the Deployment's env
/// (name=value, `RELEASE` left out), and the (manager, operation) pairs of both (but the
/// Deployment controller's).
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    labels: BTreeSet<String>,
    data: Vec<(String, String)>,
    env: Vec<String>,
    config_managers: BTreeSet<(String, String)>,
    deployment_managers: BTreeSet<(String, String)>,
}

fn managers(
    fields: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>>,
) -> BTreeSet<(String, String)> {
    fields
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.subresource.as_deref().is_none_or(str::is_empty))
        // The Deployment controller writes its revision annotation when it gets to it.
        .filter(|e| e.manager.as_deref() != Some("kube-controller-manager"))
        // The agent's origin labels (filtered from the labels below) have a manager of their
        // own under server-side apply, which the helm CLI's release does not have
        // (agent/tests/release_fidelity.rs checks it).
        .filter(|e| e.manager.as_deref() != Some(ORIGIN_FIELD_MANAGER))
        .map(|e| {
            (
                e.manager.unwrap_or_default(),
                e.operation.unwrap_or_default(),
            )
        })
        .collect()
}

async fn shape(client: &Client, release: &str) -> anyhow::Result<Shape> {
    let config = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .get(&format!("{release}-config"))
        .await?;
    let deployment = Api::<Deployment>::namespaced(client.clone(), "default")
        .get(release)
        .await?;
    let env = deployment
        .spec
        .and_then(|s| s.template.spec)
        .map(|s| s.containers)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|c| c.env.unwrap_or_default())
        .filter(|e| e.name != "RELEASE")
        .map(|e| format!("{}={}", e.name, e.value.unwrap_or_default()))
        .collect();
    Ok(Shape {
        labels: config
            .metadata
            .labels
            .unwrap_or_default()
            .into_keys()
            .filter(|k| !k.starts_with("helm.flotilla.dev/"))
            .collect(),
        data: config.data.unwrap_or_default().into_iter().collect(),
        env,
        config_managers: managers(config.metadata.managed_fields),
        deployment_managers: managers(deployment.metadata.managed_fields),
    })
}

async fn apply_method(client: &Client, release: &str) -> anyhow::Result<String> {
    let last = SecretStorage::new(client.clone(), "default")
        .last(release)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no record of {release}"))?;
    Ok(last.apply_method)
}

fn set(pairs: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

fn strings(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn data(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[tokio::test]
async fn client_side_apply_records_csa_prunes_what_the_chart_dropped_keeps_other_clients_fields_and_hands_them_over_when_enabled()
-> anyhow::Result<()> {
    let (cluster, ctx) = common::start("csa-modes", Arc::new(ChartRenderer::default())).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let client = cluster.client().await?;
    let chart = chart();

    // Install without server-side apply: created with POST, the writes are helm's Update
    // operations, the record says csa.
    install_client_side(&ctx, &kubeconfig, &chart).await?;
    let installed = shape(&client, "agent").await?;
    assert_eq!(
        installed.config_managers,
        set(&[(FIELD_MANAGER, "Update")]),
        "{installed:?}"
    );
    assert_eq!(
        installed.deployment_managers,
        set(&[(FIELD_MANAGER, "Update")])
    );
    assert_eq!(installed.env, ["A=1", "B=2"]);
    assert_eq!(installed, shape(&client, "byhelm").await?);
    assert_eq!(apply_method(&client, "agent").await?, "csa");
    assert_eq!(apply_method(&client, "byhelm").await?, "csa");

    // Another client adds fields; the upgrade (serverSideApply unset: auto, on a csa
    // release) is a client-side three-way merge: what the chart dropped is deleted, what
    // it changed is set, what the other client added stays.
    other_client_changes(&kubeconfig, "agent")?;
    other_client_changes(&kubeconfig, "byhelm")?;
    let upgrade = plan("agent", 2, UPGRADE_VALUES, "");
    assert_eq!(run(&ctx, &upgrade.plan()).await?.actions, ["upgrade"]);
    helm(&kubeconfig, &["upgrade", "byhelm", &chart], UPGRADE_VALUES)?;
    let upgraded = shape(&client, "agent").await?;
    assert_eq!(
        upgraded.labels,
        strings(&["app", "app.kubernetes.io/managed-by", "team"])
    );
    assert_eq!(upgraded.data, data(&[("a", "10"), ("extra", "kept")]));
    assert_eq!(upgraded.env, ["A=10", "C=3"]);
    assert_eq!(
        upgraded.config_managers,
        set(&[
            (FIELD_MANAGER, "Update"),
            ("kubectl-label", "Update"),
            ("kubectl-patch", "Update"),
        ])
    );
    assert_eq!(upgraded, shape(&client, "byhelm").await?);
    assert_eq!(apply_method(&client, "agent").await?, "csa");
    assert_eq!(apply_method(&client, "byhelm").await?, "csa");

    // `enabled` moves the release to server-side apply: helm's Update fields become its
    // Apply fields (so the next drop from the chart is pruned), the other clients' stay.
    let enabled = plan(
        "agent",
        3,
        MORE_VALUES,
        "  upgrade:\n    serverSideApply: enabled\n",
    );
    assert_eq!(run(&ctx, &enabled.plan()).await?.actions, ["upgrade"]);
    helm(
        &kubeconfig,
        &[
            "upgrade",
            "byhelm",
            &chart,
            "--server-side=true",
            "--force-conflicts",
        ],
        MORE_VALUES,
    )?;
    let handed_over = shape(&client, "agent").await?;
    assert_eq!(
        handed_over.config_managers,
        set(&[
            (FIELD_MANAGER, "Apply"),
            ("kubectl-label", "Update"),
            ("kubectl-patch", "Update"),
        ])
    );
    assert_eq!(
        handed_over.data,
        data(&[("a", "10"), ("c", "3"), ("extra", "kept")])
    );
    assert_eq!(handed_over.env, ["A=10", "C=3"]);
    assert_eq!(handed_over, shape(&client, "byhelm").await?);
    assert_eq!(apply_method(&client, "agent").await?, "ssa");
    assert_eq!(apply_method(&client, "byhelm").await?, "ssa");

    // And auto on an ssa release stays ssa.
    let auto = plan("agent", 4, INSTALL_VALUES, "");
    let report = run(&ctx, &auto.plan()).await?;
    assert_eq!(report.actions, ["upgrade"], "{:#?}", report.status);
    assert_eq!(apply_method(&client, "agent").await?, "ssa");
    assert_eq!(
        shape(&client, "agent").await?.data,
        data(&[("a", "1"), ("b", "2"), ("extra", "kept")])
    );
    Ok(())
}

#[tokio::test]
async fn upgrade_force_replaces_objects_of_a_client_side_release_and_is_ignored_under_server_side_apply()
-> anyhow::Result<()> {
    let (cluster, ctx) = common::start("csa-force", Arc::new(ChartRenderer::default())).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let client = cluster.client().await?;
    let chart = chart();

    install_client_side(&ctx, &kubeconfig, &chart).await?;
    other_client_changes(&kubeconfig, "agent")?;
    other_client_changes(&kubeconfig, "byhelm")?;

    // `upgrade.force` on a csa release: Flux passes Helm's ForceReplace, a PUT of the new
    // objects, so what the other client added is gone too.
    let forced = plan("agent", 2, UPGRADE_VALUES, "  upgrade:\n    force: true\n");
    assert_eq!(run(&ctx, &forced.plan()).await?.actions, ["upgrade"]);
    helm(
        &kubeconfig,
        &["upgrade", "byhelm", &chart, "--force-replace"],
        UPGRADE_VALUES,
    )?;
    let replaced = shape(&client, "agent").await?;
    assert_eq!(
        replaced.labels,
        strings(&["app", "app.kubernetes.io/managed-by"])
    );
    assert_eq!(replaced.data, data(&[("a", "10")]));
    assert_eq!(replaced.env, ["A=10"]);
    assert_eq!(replaced.config_managers, set(&[(FIELD_MANAGER, "Update")]));
    assert_eq!(replaced, shape(&client, "byhelm").await?);
    assert_eq!(apply_method(&client, "agent").await?, "csa");

    // Under server-side apply Flux does not pass ForceReplace (Helm refuses both together):
    // the object is applied, not replaced, and another client's label stays.
    other_client_changes(&kubeconfig, "agent")?;
    let ssa_forced = plan(
        "agent",
        3,
        INSTALL_VALUES,
        "  upgrade:\n    force: true\n    serverSideApply: enabled\n",
    );
    assert_eq!(run(&ctx, &ssa_forced.plan()).await?.actions, ["upgrade"]);
    let applied = shape(&client, "agent").await?;
    assert!(applied.labels.contains("team"), "{applied:?}");
    assert!(applied.labels.contains("tier"), "{applied:?}");
    assert_eq!(
        applied.data,
        data(&[("a", "1"), ("b", "2"), ("extra", "kept")])
    );
    assert_eq!(apply_method(&client, "agent").await?, "ssa");
    Ok(())
}

#[tokio::test]
async fn a_remediating_rollback_resolves_auto_against_the_revision_it_returns_to_and_rollback_force_replaces()
-> anyhow::Result<()> {
    let (cluster, ctx) = common::start("csa-rollback", Arc::new(ChartRenderer::default())).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let client = cluster.client().await?;
    let chart = chart();

    install_client_side(&ctx, &kubeconfig, &chart).await?;
    other_client_changes(&kubeconfig, "agent")?;
    other_client_changes(&kubeconfig, "byhelm")?;

    // A server-side upgrade that never gets ready (the harness's pods with this label never
    // get ready) fails
    // and is remediated by a rollback to revision 1: `auto` follows revision 1 (csa), not
    // the failed revision 2 (ssa), and `rollback.force` replaces the objects.
    let never_ready =
        format!("{INSTALL_VALUES}replicas: 1\npodLabels:\n  flotilla.dev/never-ready: \"true\"\n");
    let broken = plan(
        "agent",
        2,
        &never_ready,
        "  upgrade:\n    serverSideApply: enabled\n    timeout: 6s\n    remediation:\n      retries: 1\n  rollback:\n    force: true\n",
    );
    let report = run(&ctx, &broken.plan()).await?;
    assert_eq!(
        report.actions,
        ["upgrade", "rollback"],
        "{:#?}",
        report.status
    );
    let failed = helm(
        &kubeconfig,
        &[
            "upgrade",
            "byhelm",
            &chart,
            "--server-side=true",
            "--force-conflicts",
            "--wait=watcher",
            "--timeout=6s",
        ],
        &never_ready,
    );
    assert!(failed.is_err(), "helm's upgrade got ready: {failed:?}");
    tools::helm_in(&kubeconfig, &["rollback", "byhelm", "1", "--force-replace"])?;

    for release in ["agent", "byhelm"] {
        let history = SecretStorage::new(client.clone(), "default")
            .history(release)
            .await?;
        let methods: Vec<(i64, &str)> = history
            .iter()
            .map(|r| (r.version, r.apply_method.as_str()))
            .collect();
        assert_eq!(methods, [(1, "csa"), (2, "ssa"), (3, "csa")], "{release}");
    }
    let rolled_back = shape(&client, "agent").await?;
    assert_eq!(
        rolled_back.labels,
        strings(&["app", "app.kubernetes.io/managed-by", "tier"])
    );
    assert_eq!(rolled_back.data, data(&[("a", "1"), ("b", "2")]));
    assert_eq!(rolled_back.env, ["A=1", "B=2"]);
    assert_eq!(rolled_back, shape(&client, "byhelm").await?);
    Ok(())
}
