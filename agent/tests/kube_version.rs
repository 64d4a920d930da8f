//! The Kubernetes version the agent renders for, against real local clusters: the test
//! clusters report the version pinned in `tests/upstream/kubernetes/go.mod`, the agent's
//! `.Capabilities.KubeVersion` is that version as helm install sees it, and a real chart that
//! sets `kubeVersion` (podinfo, from the shared chart corpus) installs through
//! `flotilla-agent apply` and through the real `helm install`, its pods made Ready by kwok.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use flotilla_agent::reconcile::render::ChartRenderer;
use flotilla_agent::reconcile::{Context, reconcile};
use flotilla_tests::cluster::{pinned_kubernetes_version, workspace_root};
use flotilla_tests::tools::helm_in as helm;
use flotilla_tests::{Cluster, ClusterOptions, wait};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use common::{Hr, charts};

/// The data of ConfigMap `default/<name>`.
async fn config_map_data(
    client: &kube::Client,
    name: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    Ok(api.get(name).await?.data.unwrap_or_default())
}

/// The real podinfo chart of the shared corpus (`shared/charts/podinfo/chart` beside the
/// repository); its absence is a failure, not a skip.
fn podinfo_chart() -> PathBuf {
    let chart = workspace_root().join("../shared/charts/podinfo/chart");
    assert!(
        chart.join("Chart.yaml").is_file(),
        "the podinfo chart of the corpus is expected at {}",
        chart.display()
    );
    chart
}

/// Waits until Deployment `<namespace>/<name>` has all its replicas available.
async fn available(client: &kube::Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let what = format!("Deployment {namespace}/{name} to be available");
    wait::until(&what, Duration::from_secs(60), || async {
        let d = api.get(name).await?;
        let wanted = d.spec.and_then(|s| s.replicas).unwrap_or(1);
        let ready = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
        Ok((wanted > 0 && ready == wanted).then_some(()))
    })
    .await
}

#[tokio::test]
async fn the_agent_renders_for_the_pinned_kubernetes_version_as_helm_install_does()
-> anyhow::Result<()> {
    let pinned = pinned_kubernetes_version()?;
    let cluster = Cluster::start(ClusterOptions::named("kube-version")).await?;
    let client = cluster.client().await?;
    let ctx = Context::new(
        client.clone(),
        "default",
        Arc::new(ChartRenderer::default()),
    );

    // What the agent's renderer is given.
    let caps = ctx.cluster.capabilities().await?;
    let kube = &caps.kube_version;
    assert_eq!(kube.version, pinned);
    assert_eq!(kube.string(), pinned);
    let mut parts = pinned.trim_start_matches('v').split('.');
    assert_eq!(
        (Some(kube.major.as_str()), Some(kube.minor.as_str())),
        (parts.next(), parts.next()),
        "{kube:?}"
    );

    // The reference: helm v4 installs the chart (its kubeVersion constraint checked against
    // the cluster) and records the version it rendered for.
    let chart = charts().join("kube-version");
    helm(
        cluster.kubeconfig(),
        &[
            "install",
            "reference",
            chart.to_str().expect("UTF-8 path"),
            "-n",
            "default",
        ],
    )?;
    let expected = config_map_data(&client, "reference-gate").await?;
    assert_eq!(expected["version"], pinned, "{expected:?}");
    assert_eq!(expected["gitVersion"], pinned, "{expected:?}");
    assert_eq!(expected["printed"], pinned, "{expected:?}");

    let p = Hr::new("agent", "kube-version").plan();
    let report = reconcile(&ctx, &p.plan, &p.chart).await?;
    assert_eq!(
        report.actions,
        ["install"],
        "{:#?}",
        report.status.conditions
    );
    let seen = config_map_data(&client, "agent-gate").await?;
    assert_eq!(
        seen, expected,
        "the agent and helm install rendered differently"
    );
    Ok(())
}

#[tokio::test]
async fn podinfo_installs_through_the_agent_and_through_helm_install() -> anyhow::Result<()> {
    let chart = podinfo_chart();
    let chart_yaml = std::fs::read_to_string(chart.join("Chart.yaml"))?;
    assert!(
        chart_yaml.contains("\nkubeVersion:"),
        "podinfo sets kubeVersion (so the cluster's version is checked):\n{chart_yaml}"
    );
    let cluster = Cluster::start(ClusterOptions::named("podinfo")).await?;
    let client = cluster.client().await?;

    // The agent: `flotilla-agent apply` on a plan file naming the chart by its absolute path.
    let plan = cluster.dir().join("podinfo.yaml");
    Hr::new("podinfo", chart.to_str().expect("UTF-8 path"))
        .timeout(Some("90s"))
        .write(&plan)?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_flotilla-agent"))
            .arg("apply")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg(&plan)
            .output()
    })
    .await??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for want in ["reason: InstallSucceeded", "status: deployed"] {
        assert!(stdout.contains(want), "{want:?} missing from:\n{stdout}");
    }
    available(&client, "default", "podinfo").await?;

    // The real helm install, into a namespace of its own, waiting for the release's
    // resources as the agent does.
    helm(
        cluster.kubeconfig(),
        &[
            "install",
            "podinfo",
            chart.to_str().expect("UTF-8 path"),
            "-n",
            "reference",
            "--create-namespace",
            "--wait",
            "--timeout",
            "90s",
        ],
    )?;
    let status = helm(
        cluster.kubeconfig(),
        &["status", "podinfo", "-n", "reference", "-o", "json"],
    )?;
    let status: serde_json::Value = serde_json::from_str(&status)?;
    assert_eq!(status["info"]["status"], "deployed", "{status}");
    available(&client, "reference", "podinfo").await?;
    Ok(())
}
