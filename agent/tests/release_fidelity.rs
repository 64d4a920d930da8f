//! Flux fidelity of what the agent leaves behind, against real local clusters: the
//! `status.inventory` of its releases, the origin labels of the stored manifest, hooks and
//! chart CRDs, and releases the plain helm CLI (the reference helm
//! v4, without `--force-conflicts`) upgrades and rolls back as if helm had made them. Each
//! test starts its own cluster.

mod common;

use std::sync::Arc;

use flotilla_agent::kube::apply::{ApplyOptions, ReleaseRef};
use flotilla_agent::kube::manifest::parse_manifest;
use flotilla_agent::kube::{
    FIELD_MANAGER, ORIGIN_FIELD_MANAGER, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
};
use flotilla_agent::reconcile::delete_release;
use flotilla_agent::reconcile::render::{ChartRenderer, LiteralRenderer};
use flotilla_core::meta::{ConditionStatus, condition, reason};
use flotilla_core::release::Step;
use flotilla_core::status::ResourceInventory;
use flotilla_tests::tools;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};

use common::{Hr, run};

/// The inventory as (id, v) pairs, in order.
fn entries(inventory: Option<&ResourceInventory>) -> Vec<(String, String)> {
    inventory
        .map(|i| {
            i.entries
                .iter()
                .map(|e| (e.id.clone(), e.version.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(id, v)| ((*id).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn the_inventory_lists_manifest_objects_then_chart_crds_without_hooks_and_uninstall_clears_it()
-> anyhow::Result<()> {
    let (_cluster, ctx) = common::start("fid-inventory", Arc::new(LiteralRenderer)).await?;

    // A chart with a CRD in crds/ and a custom resource of it, in a target namespace: the
    // namespaced custom resource gets the release namespace, the CRD none.
    let widgets = Hr::new("widgets", "with-crd")
        .spec("  targetNamespace: apps\n  install:\n    createNamespace: true")
        .plan();
    let report = run(&ctx, &widgets).await?;
    assert_eq!(report.actions, ["install"]);
    assert_eq!(
        entries(report.status.inventory.as_ref()),
        pairs(&[
            ("apps_gizmo_example.flotilla.dev_Widget", "v1"),
            (
                "_widgets.example.flotilla.dev_apiextensions.k8s.io_CustomResourceDefinition",
                "v1"
            ),
        ])
    );

    // A chart with a test hook: the hook is not in the inventory; objects come in the
    // manifest's (install) order, core-group objects with an empty group.
    let demo = Hr::new("demo", "ok").plan();
    let report = run(&ctx, &demo).await?;
    assert_eq!(report.actions, ["install"]);
    let installed = pairs(&[
        ("default_demo-config__ConfigMap", "v1"),
        ("default_demo_apps_Deployment", "v1"),
    ]);
    assert_eq!(entries(report.status.inventory.as_ref()), installed);

    // An upgrade rebuilds it from the record it wrote.
    let upgraded = Hr::new("demo", "ok")
        .generation(2)
        .spec("  values:\n    any: change")
        .plan();
    let report = run(&ctx, &upgraded).await?;
    assert_eq!(report.actions, ["upgrade"]);
    assert_eq!(entries(report.status.inventory.as_ref()), installed);

    let (report, _) = delete_release(&ctx, &upgraded.plan, Some(&upgraded.chart)).await?;
    assert_eq!(report.actions, ["uninstall"]);
    assert_eq!(report.status.inventory, None);
    Ok(())
}

/// `.spec.replicas` of the release's Deployments, by name.
async fn replicas(deployments: &Api<Deployment>) -> anyhow::Result<Vec<(String, i32)>> {
    let list = deployments
        .list(&ListParams::default().labels("app.kubernetes.io/instance=demo"))
        .await?;
    Ok(list
        .items
        .into_iter()
        .map(|d| {
            (
                d.metadata.name.unwrap_or_default(),
                d.spec.and_then(|s| s.replicas).unwrap_or_default(),
            )
        })
        .collect())
}

fn all(n: i32) -> Vec<(String, i32)> {
    ["backend", "cache", "frontend"]
        .iter()
        .map(|c| (format!("demo-podinfo-like-{c}"), n))
        .collect()
}

fn demo(generation: i64, replicas: i32) -> common::Hr {
    Hr::new("demo", "podinfo-like")
        .generation(generation)
        .spec(&format!(
            "  install:\n    disableWait: true\n  upgrade:\n    disableWait: true\n  values:\n    replicaCount: {replicas}"
        ))
}

#[tokio::test]
async fn plain_helm_rollback_and_upgrade_operate_an_agent_release_and_the_agent_adopts_it_again()
-> anyhow::Result<()> {
    let (cluster, ctx) = common::start("fid-helm-cli", Arc::new(ChartRenderer::default())).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client().await?, "default");

    assert_eq!(run(&ctx, &demo(1, 1).plan()).await?.actions, ["install"]);
    let second = demo(2, 2).plan();
    assert_eq!(run(&ctx, &second).await?.actions, ["upgrade"]);
    assert_eq!(replicas(&deployments).await?, all(2));

    // helm's own field manager owns what the agent applied: no conflict on .spec.replicas.
    tools::helm_in(&kubeconfig, &["rollback", "demo", "1"])?;
    assert_eq!(replicas(&deployments).await?, all(1));
    let chart = common::charts().join("podinfo-like");
    let chart = chart.to_str().expect("the repo path is UTF-8");
    tools::helm_in(
        &kubeconfig,
        &[
            "upgrade",
            "demo",
            chart,
            "--reuse-values",
            "--set",
            "replicaCount=3",
        ],
    )?;
    assert_eq!(replicas(&deployments).await?, all(3));
    let history: Vec<(i64, String, String)> = tools::helm_history(&kubeconfig, "demo", "default")?;
    let statuses: Vec<(i64, &str)> = history.iter().map(|(v, s, _)| (*v, s.as_str())).collect();
    assert_eq!(
        statuses,
        [
            (1, "superseded"),
            (2, "superseded"),
            (3, "superseded"),
            (4, "deployed")
        ],
        "{history:?}"
    );

    // The agent finds a release it did not make and adopts it with an upgrade.
    let report = run(&ctx, &second).await?;
    assert_eq!(report.actions, ["upgrade"]);
    assert_eq!(report.step, Step::Done);
    assert_eq!(
        common::expect_condition(&report, condition::READY),
        (
            reason::UPGRADE_SUCCEEDED,
            ConditionStatus::True,
            "Helm upgrade succeeded for release default/demo.v5 with chart podinfo-like@6.5.3"
        )
    );
    assert_eq!(replicas(&deployments).await?, all(2));
    assert_eq!(entries(report.status.inventory.as_ref()).len(), 9);

    // And helm carries on again, plainly.
    tools::helm_in(&kubeconfig, &["rollback", "demo", "4"])?;
    assert_eq!(replicas(&deployments).await?, all(3));

    // Every server-side applied field of the Deployments is helm's, but for the owner
    // labels, which the origin manager holds too.
    let origin_only = serde_json::json!({"f:metadata": {"f:labels": {
        format!("f:{OWNER_NAME_LABEL}"): {},
        format!("f:{OWNER_NAMESPACE_LABEL}"): {},
    }}});
    for d in deployments
        .list(&ListParams::default().labels("app.kubernetes.io/instance=demo"))
        .await?
    {
        let mut appliers: Vec<_> = d
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.operation.as_deref() == Some("Apply"))
            .map(|e| (e.manager.unwrap_or_default(), e.fields_v1.map(|f| f.0)))
            .collect();
        appliers.sort_by(|a, b| a.0.cmp(&b.0));
        let names: Vec<&str> = appliers.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(
            names,
            [ORIGIN_FIELD_MANAGER, FIELD_MANAGER],
            "{:?}",
            d.metadata.name
        );
        assert_eq!(appliers[0].1.as_ref(), Some(&origin_only));
    }
    Ok(())
}

#[tokio::test]
async fn objects_an_earlier_agent_applied_as_flotilla_become_helms_on_the_next_apply()
-> anyhow::Result<()> {
    let (cluster, ctx) = common::start("fid-managers", Arc::new(LiteralRenderer)).await?;
    let manifest =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n";
    let release = ReleaseRef {
        name: "web".to_owned(),
        namespace: "default".to_owned(),
    };
    let mut earlier = ApplyOptions::new(release.clone());
    earlier.field_manager = "flotilla".to_owned();
    earlier.previous_managers.clear();
    ctx.cluster
        .apply(&parse_manifest(manifest)?, &earlier)
        .await?;

    ctx.cluster
        .apply(&parse_manifest(manifest)?, &ApplyOptions::new(release))
        .await?;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client().await?, "default");
    let managers: Vec<_> = cms
        .get("settings")
        .await?
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            (
                e.manager.unwrap_or_default(),
                e.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(managers, [(FIELD_MANAGER.to_owned(), "Apply".to_owned())]);

    // So helm's manager changes the value without forcing a conflict.
    let changed = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"a": "2"},
    });
    cms.patch(
        "settings",
        &kube::api::PatchParams::apply(FIELD_MANAGER),
        &kube::api::Patch::Apply(&changed),
    )
    .await?;
    assert_eq!(
        cms.get("settings").await?.data.unwrap_or_default()["a"],
        "2"
    );
    Ok(())
}

/// `kind/name` of an object and its two origin labels.
type Origin = (String, Option<String>, Option<String>);

/// The origin labels of every object of a manifest (`helm get manifest` or `helm get
/// hooks`).
fn origin_labels(manifest: &str) -> anyhow::Result<Vec<Origin>> {
    Ok(parse_manifest(manifest)?
        .into_iter()
        .map(|o| {
            let labels = o.object.metadata.labels.unwrap_or_default();
            (
                format!(
                    "{}/{}",
                    o.gvk.kind,
                    o.object.metadata.name.unwrap_or_default()
                ),
                labels.get(OWNER_NAME_LABEL).cloned(),
                labels.get(OWNER_NAMESPACE_LABEL).cloned(),
            )
        })
        .collect())
}

fn labelled(objects: &[&str], name: &str) -> Vec<Origin> {
    objects
        .iter()
        .map(|o| {
            (
                (*o).to_owned(),
                Some(name.to_owned()),
                Some("default".to_owned()),
            )
        })
        .collect()
}

/// The live ConfigMap's origin labels and whether the origin manager applied them.
async fn live_origin(
    cms: &Api<ConfigMap>,
    name: &str,
) -> anyhow::Result<(Option<String>, Option<String>, bool)> {
    let live = cms.get(name).await?;
    let labels = live.metadata.labels.unwrap_or_default();
    let by_origin_manager = live
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .any(|e| e.manager.as_deref() == Some(ORIGIN_FIELD_MANAGER));
    Ok((
        labels.get(OWNER_NAME_LABEL).cloned(),
        labels.get(OWNER_NAMESPACE_LABEL).cloned(),
        by_origin_manager,
    ))
}

#[tokio::test]
async fn the_stored_manifest_and_hooks_carry_the_origin_labels_a_plain_helm_upgrade_keeps_them_live_and_chart_crds_get_only_them()
-> anyhow::Result<()> {
    let (cluster, ctx) = common::start("fid-origin", Arc::new(ChartRenderer::default())).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client().await?, "default");

    // Flux's OriginLabels post-renderer runs last: it wins over commonMetadata's value of
    // the same key, and goes over hooks too (postRenderStrategy unset: Helm 4's combined).
    let web = Hr::new("web", "with-hook")
        .spec("  commonMetadata:\n    labels:\n      helm.flotilla.dev/name: not-this\n      tier: common")
        .plan();
    assert_eq!(run(&ctx, &web).await?.actions, ["install"]);
    let manifest = tools::helm_in(&kubeconfig, &["get", "manifest", "web"])?;
    assert_eq!(
        origin_labels(&manifest)?,
        labelled(&["ConfigMap/web-plain"], "web"),
        "{manifest}"
    );
    assert!(manifest.contains("tier: common"), "{manifest}");
    let hooks = tools::helm_in(&kubeconfig, &["get", "hooks", "web"])?;
    assert_eq!(
        origin_labels(&hooks)?,
        labelled(&["ConfigMap/web-hooked"], "web"),
        "{hooks}"
    );
    let origin = (Some("web".to_owned()), Some("default".to_owned()), true);
    assert_eq!(live_origin(&cms, "web-plain").await?, origin);
    let hook = cms
        .get("web-hooked")
        .await?
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(hook.get(OWNER_NAME_LABEL).map(String::as_str), Some("web"));

    // A plain helm upgrade renders without Flux's post-renderer: its manifest has no origin
    // labels (as under Flux), yet the live object keeps them, as Flux's (another manager's).
    let chart = common::charts().join("with-hook");
    let chart = chart.to_str().expect("the repo path is UTF-8");
    tools::helm_in(&kubeconfig, &["upgrade", "web", chart, "--reuse-values"])?;
    let manifest = tools::helm_in(&kubeconfig, &["get", "manifest", "web"])?;
    assert_eq!(
        origin_labels(&manifest)?,
        [("ConfigMap/web-plain".to_owned(), None, None)],
        "{manifest}"
    );
    assert_eq!(live_origin(&cms, "web-plain").await?, origin);

    // helm rollback to the agent's revision restores its manifest, labels included.
    tools::helm_in(&kubeconfig, &["rollback", "web", "1"])?;
    let manifest = tools::helm_in(&kubeconfig, &["get", "manifest", "web", "--revision", "3"])?;
    assert_eq!(
        origin_labels(&manifest)?,
        labelled(&["ConfigMap/web-plain"], "web"),
        "{manifest}"
    );
    assert_eq!(live_origin(&cms, "web-plain").await?, origin);

    // With postRenderStrategy nohooks, hooks are not post-rendered: no origin labels, stored
    // or live.
    let quiet = Hr::new("quiet", "with-hook")
        .spec("  postRenderStrategy: nohooks")
        .plan();
    assert_eq!(run(&ctx, &quiet).await?.actions, ["install"]);
    let hooks = tools::helm_in(&kubeconfig, &["get", "hooks", "quiet"])?;
    assert_eq!(
        origin_labels(&hooks)?,
        [("ConfigMap/quiet-hooked".to_owned(), None, None)],
        "{hooks}"
    );
    let live_hook = cms.get("quiet-hooked").await?;
    let hook = live_hook.metadata.labels.clone().unwrap_or_default();
    assert_eq!(hook.get(OWNER_NAME_LABEL), None, "{:?}", live_hook.metadata);
    let manifest = tools::helm_in(&kubeconfig, &["get", "manifest", "quiet"])?;
    assert_eq!(
        origin_labels(&manifest)?,
        labelled(&["ConfigMap/quiet-plain"], "quiet"),
        "{manifest}"
    );

    // A chart's crds/ get the origin labels (Flux's setOriginVisitor) and none of Helm's
    // release metadata, which Helm and Flux do not put on them.
    let widgets = Hr::new("widgets", "with-crd").plan();
    assert_eq!(run(&ctx, &widgets).await?.actions, ["install"]);
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client().await?);
    let crd = crds.get("widgets.example.flotilla.dev").await?;
    let labels = crd.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
        [
            (OWNER_NAME_LABEL, "widgets"),
            (OWNER_NAMESPACE_LABEL, "default")
        ],
        "{labels:?}"
    );
    let annotations = crd.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.keys().any(|k| k.starts_with("meta.helm.sh/")),
        "{annotations:?}"
    );
    Ok(())
}
