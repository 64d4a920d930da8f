//! The `.Capabilities` cache against real local clusters: a chart whose templates are gated on
//! the API version of a CRD in its own `crds/` renders as the real helm v4 install renders it
//! (helm installs CRDs before it discovers the capabilities), even when the agent had cached
//! the cluster's capabilities before the CRD existed; and the cache is discovered again after
//! its TTL, after an apply fails on a kind that is not served, and after the agent deletes a
//! CRD.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flotilla_agent::kube::ReleaseRef;
use flotilla_agent::kube::manifest::parse_manifest;
use flotilla_agent::kube::{ApplyOptions, DeleteOptions, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL};
use flotilla_agent::reconcile::plan_file::PlanFile;
use flotilla_agent::reconcile::render::ChartRenderer;
use flotilla_agent::reconcile::{Context, reconcile};
use flotilla_tests::tools::{self, helm_in as helm, kubectl_in as kubectl};
use flotilla_tests::{Cluster, ClusterOptions};

use common::{Hr, charts};

/// A manifest's objects as (template, object), without the owner labels (and without a
/// `labels` map they leave empty).
fn without_origin_labels(
    manifest: &str,
) -> anyhow::Result<Vec<(Option<String>, serde_json::Value)>> {
    let mut out = Vec::new();
    for o in parse_manifest(manifest)? {
        let mut object = o.object;
        if let Some(labels) = object.metadata.labels.as_mut() {
            labels.remove(OWNER_NAME_LABEL);
            labels.remove(OWNER_NAMESPACE_LABEL);
            if labels.is_empty() {
                object.metadata.labels = None;
            }
        }
        out.push((o.source, serde_json::to_value(&object)?));
    }
    Ok(out)
}

/// HelmRelease `default/<name>` installing release `<name>` from `chart`.
fn plan(name: &str, chart: &str) -> PlanFile {
    Hr::new(name, chart).timeout(Some("60s")).plan()
}

/// A served, established CRD `<plural>.late.flotilla.dev` of kind `kind`, version v1.
fn add_crd(kubeconfig: &Path, plural: &str, kind: &str) -> anyhow::Result<()> {
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.late.flotilla.dev
spec:
  group: late.flotilla.dev
  scope: Namespaced
  names: {{kind: {kind}, plural: {plural}}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"
    );
    kubectl(kubeconfig, &["apply", "-f", "-"], Some(&crd))?;
    tools::wait_established(
        kubeconfig,
        &[&format!("crd/{plural}.late.flotilla.dev")],
        Duration::from_secs(30),
    )
}

/// Waits (up to 10 s) until the API server's own discovery serves `kind` in
/// `late.flotilla.dev/v1`, so a fresh discovery by the agent must see it.
fn served(kubeconfig: &Path, kind: &str) -> anyhow::Result<()> {
    for _ in 0..50 {
        let out = tools::run(
            &tools::kubectl()?,
            &["get", "--raw", "/apis/late.flotilla.dev/v1"],
            kubeconfig,
            None,
        )?;
        if out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains(&format!("\"kind\":\"{kind}\""))
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    anyhow::bail!("late.flotilla.dev/v1 {kind} is not served after 10 s")
}

#[tokio::test]
async fn templates_gated_on_a_crd_of_the_same_release_render_as_helm_install_renders_them()
-> anyhow::Result<()> {
    let clusters = Cluster::start_many("caps-crd", 2).await?;
    let (reference, workload) = (&clusters[0], &clusters[1]);

    // The reference: helm v4 installs the chart into a cluster without the CRD. Helm
    // discovers right after the CRD is established, before the API server may publish it,
    // so its render can miss the CRD: then the attempt is undone (release and CRD) and
    // made again, until helm renders what it means to.
    let chart = charts().join("crd-gated");
    let chart = chart.to_str().expect("UTF-8 path");
    let mut expected = String::new();
    for _ in 0..5 {
        helm(
            reference.kubeconfig(),
            &["install", "gated", chart, "-n", "default"],
        )?;
        expected = helm(
            reference.kubeconfig(),
            &["get", "manifest", "gated", "-n", "default"],
        )?;
        if expected.contains("kind: Gadget") {
            break;
        }
        helm(
            reference.kubeconfig(),
            &["uninstall", "gated", "-n", "default"],
        )?;
        kubectl(
            reference.kubeconfig(),
            &["delete", "crd", "gadgets.gated.flotilla.dev", "--wait"],
            None,
        )?;
    }
    // Helm saw the CRD it installed (so the comparison is not vacuous).
    assert!(
        expected.contains("kind: Gadget") && expected.contains("gadgetKind: \"true\""),
        "{expected}"
    );

    // The agent has discovered the workload cluster's capabilities before the CRD existed.
    let client = workload.client().await?;
    let ctx = Context::new(client, "default", Arc::new(ChartRenderer::default()));
    let before = ctx.cluster.capabilities().await?;
    assert!(
        !before
            .api_versions
            .iter()
            .any(|v| v.starts_with("gated.flotilla.dev/")),
        "{:?}",
        before.api_versions
    );
    assert_eq!(ctx.cluster.capabilities_discoveries(), 1);

    let p = plan("gated", "crd-gated");
    let report = reconcile(&ctx, &p.plan, &p.chart).await?;
    assert_eq!(
        report.actions,
        ["install"],
        "{:#?}",
        report.status.conditions
    );
    // Applying the chart's CRDs (and waiting until discovery serves them) made the render
    // discover again, once.
    assert_eq!(ctx.cluster.capabilities_discoveries(), 2);

    // The release the agent stored, read by the real helm CLI, is what helm install made,
    // object for object, once the origin labels are taken off (the agent adds them as
    // Flux's last post-renderer does; the plain helm CLI has none).
    let got = helm(
        workload.kubeconfig(),
        &["get", "manifest", "gated", "-n", "default"],
    )?;
    assert!(got.contains(OWNER_NAME_LABEL), "{got}");
    assert_eq!(
        without_origin_labels(&got)?,
        without_origin_labels(&expected)?,
        "the agent and helm install rendered differently"
    );
    kubectl(
        workload.kubeconfig(),
        &[
            "get",
            "gadgets.gated.flotilla.dev",
            "gated-gadget",
            "-n",
            "default",
        ],
        None,
    )?;

    // A second render within the TTL reuses the cached capabilities.
    let again = ctx.cluster.capabilities().await?;
    assert_eq!(ctx.cluster.capabilities_discoveries(), 2);
    assert!(
        again
            .api_versions
            .iter()
            .any(|v| v == "gated.flotilla.dev/v1/Gadget")
    );
    Ok(())
}

#[tokio::test]
async fn cached_capabilities_are_discovered_again_after_the_ttl_and_after_an_unserved_kind()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("caps-refresh")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let client = cluster.client().await?;
    let has = |caps: &flotilla_chart::render::Capabilities, kind: &str| {
        caps.api_versions
            .iter()
            .any(|v| *v == format!("late.flotilla.dev/v1/{kind}"))
    };

    // The default TTL: a CRD someone else installs is not seen while the cache is fresh...
    let ctx = Context::new(
        client.clone(),
        "default",
        Arc::new(ChartRenderer::default()),
    );
    let cluster_api = &ctx.cluster;
    assert!(!has(&cluster_api.capabilities().await?, "Sprocket"));
    add_crd(&kubeconfig, "sprockets", "Sprocket")?;
    served(&kubeconfig, "Sprocket")?;
    assert!(!has(&cluster_api.capabilities().await?, "Sprocket"));
    assert_eq!(cluster_api.capabilities_discoveries(), 1);

    // ... until an apply fails on a kind the API server does not serve: the templates may
    // have been rendered for an API that changed, so the next render discovers again.
    let unserved = parse_manifest(
        "---\n# Source: t/templates/w.yaml\napiVersion: late.flotilla.dev/v7\nkind: Sprocket\nmetadata:\n  name: s\n",
    )?;
    let options = ApplyOptions::new(ReleaseRef {
        name: "t".to_owned(),
        namespace: "default".to_owned(),
    });
    let failure = match cluster_api.apply(&unserved, &options).await {
        Ok(report) => panic!("applied an unserved kind: {report:?}"),
        Err(f) => f,
    };
    assert_eq!(failure.error.kind(), "unknown_kind", "{failure}");
    assert!(has(&cluster_api.capabilities().await?, "Sprocket"));
    assert_eq!(cluster_api.capabilities_discoveries(), 2);

    // A short TTL (sharing the same cache): discovered again once it has passed.
    let short = ctx
        .cluster
        .clone()
        .with_capabilities_ttl(Duration::from_secs(1));
    assert!(!has(&short.capabilities().await?, "Cog"));
    let discoveries = short.capabilities_discoveries();
    add_crd(&kubeconfig, "cogs", "Cog")?;
    served(&kubeconfig, "Cog")?;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(has(&short.capabilities().await?, "Cog"));
    assert_eq!(short.capabilities_discoveries(), discoveries + 1);

    // The agent deleting a CRD (default TTL again, the cache fresh): discovered again at once.
    assert!(has(&cluster_api.capabilities().await?, "Cog"));
    let discoveries = cluster_api.capabilities_discoveries();
    let crd = parse_manifest(
        "---\n# Source: t/crds/cogs.yaml\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: cogs.late.flotilla.dev\n",
    )?;
    let delete = DeleteOptions {
        wait: Some(Duration::from_secs(30)),
        ..DeleteOptions::default()
    };
    let report = cluster_api.delete(&crd, "default", &delete).await?;
    assert_eq!(report.deleted.len(), 1, "{report:?}");
    cluster_api.capabilities().await?;
    assert_eq!(cluster_api.capabilities_discoveries(), discoveries + 1);
    Ok(())
}
