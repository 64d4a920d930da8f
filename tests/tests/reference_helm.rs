//! The local clusters serve the real `helm` and `kubectl`: a chart written in this repo is
//! installed by `helm install`, its test hook passes `helm test`, and the failing variant
//! (kwok's `flotilla.dev/test-outcome: fail` label) makes `helm test` fail.

use std::path::Path;
use std::process::Output;

use flotilla_tests::cluster::workspace_root;
use flotilla_tests::tools::{self, text};
use flotilla_tests::{Cluster, ClusterOptions};

fn run(program: &Path, args: &[&str], kubeconfig: &Path) -> anyhow::Result<Output> {
    tools::run(program, args, kubeconfig, None)
}

#[tokio::test]
async fn kubectl_sees_ready_kwok_nodes() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("kubectl")).await?;
    let out = run(
        &tools::kubectl()?,
        &["get", "nodes", "--no-headers"],
        cluster.kubeconfig(),
    )?;
    assert!(out.status.success(), "{}", text(&out));
    let listing = text(&out);
    assert!(
        listing.contains("kwok-node-0") && listing.contains(" Ready "),
        "{listing}"
    );
    Ok(())
}

#[tokio::test]
async fn helm_installs_the_hello_chart_and_its_test_passes_or_fails_as_labelled()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("helm")).await?;
    let helm = tools::helm()?;
    let chart = workspace_root().join("tests/charts/hello");
    let chart = chart.to_str().expect("the repo path is UTF-8");
    let kubeconfig = cluster.kubeconfig();

    let install = run(
        &helm,
        &["install", "good", chart, "--wait", "--timeout", "60s"],
        kubeconfig,
    )?;
    assert!(install.status.success(), "helm install: {}", text(&install));
    let test = run(&helm, &["test", "good", "--timeout", "60s"], kubeconfig)?;
    assert!(test.status.success(), "helm test: {}", text(&test));
    assert!(
        text(&test).contains("Phase:          Succeeded"),
        "{}",
        text(&test)
    );

    let install = run(
        &helm,
        &[
            "install",
            "bad",
            chart,
            "--set",
            "testOutcome=fail",
            "--wait",
            "--timeout",
            "60s",
        ],
        kubeconfig,
    )?;
    assert!(install.status.success(), "helm install: {}", text(&install));
    let test = run(&helm, &["test", "bad", "--timeout", "60s"], kubeconfig)?;
    assert!(
        !test.status.success(),
        "helm test should fail: {}",
        text(&test)
    );
    assert!(text(&test).contains("failed"), "{}", text(&test));

    let list = run(&helm, &["list", "--short"], kubeconfig)?;
    assert_eq!(
        String::from_utf8_lossy(&list.stdout)
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["bad", "good"]
    );
    Ok(())
}
