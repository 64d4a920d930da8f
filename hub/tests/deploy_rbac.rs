//! The hub binary under exactly the ServiceAccount and RBAC of the `flotilla-hub` chart
//! (`deploy/charts/flotilla-hub`): the chart's ServiceAccount, Roles and bindings are rendered
//! by the reference `helm template` (local-target grant: `tests/deploy-rbac-values.yaml`,
//! podinfo's kinds instead of cluster-admin) and applied; the hub authenticates with a token
//! of that ServiceAccount from the TokenRequest API, elects itself leader, fetches podinfo
//! from a Helm repository, and installs, upgrades and (on deletion of the HelmRelease)
//! uninstalls it in its own cluster. Nothing it asks is refused: its logs hold no
//! `forbidden`.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use flotilla_api::HelmRelease;
use flotilla_tests::servers::{HelmRepoServer, RepoOptions};
use flotilla_tests::{Cluster, ClusterOptions, rbac, tools, wait};
use kube::api::Api;

use common::{install_crds, podinfo_chart, podinfo_release, ready};

const NAMESPACE: &str = "flotilla-system";
const SERVICE_ACCOUNT: &str = "flotilla-hub";

/// The chart's ServiceAccount and RBAC, rendered by the reference helm.
fn chart_rbac() -> anyhow::Result<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    chart_rbac_with(&manifest.join("tests/deploy-rbac-values.yaml"))
}

/// The chart's ServiceAccount and RBAC with the values of `values`.
fn chart_rbac_with(values: &Path) -> anyhow::Result<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    rbac::chart_rbac(
        &manifest.join("../deploy/charts/flotilla-hub"),
        "flotilla-hub",
        NAMESPACE,
        values,
    )
}

#[test]
fn the_charts_defaults_bind_no_cluster_admin_and_grant_no_local_target_only_the_values_that_ask_do()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let values = |name: &str, text: &str| -> anyhow::Result<String> {
        let path = dir.path().join(name);
        std::fs::write(&path, text)?;
        chart_rbac_with(&path)
    };
    let defaults = values("defaults.yaml", "{}\n")?;
    anyhow::ensure!(
        !defaults.contains("cluster-admin") && !defaults.contains("-local-target"),
        "the defaults grant nothing for the hub's own cluster:\n{defaults}"
    );
    anyhow::ensure!(
        !defaults.contains("name: flotilla-hub-agent"),
        "no in-process agent state without the local target:\n{defaults}"
    );
    // cluster-admin only when the local target is on and the value asks for it.
    let asked = "rbac:\n  localTarget:\n    clusterAdmin: true\n";
    let without_target = values("asked.yaml", asked)?;
    anyhow::ensure!(
        !without_target.contains("cluster-admin"),
        "{without_target}"
    );
    let with_target = values(
        "asked-local.yaml",
        &format!("hub:\n  allowLocalTarget: true\n{asked}"),
    )?;
    anyhow::ensure!(with_target.contains("name: cluster-admin"), "{with_target}");
    Ok(())
}

#[tokio::test]
async fn the_hub_under_the_charts_service_account_and_rbac_installs_upgrades_and_uninstalls_and_is_refused_nothing()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("hub-rbac")).await?;
    let client = cluster.client().await?;
    let admin = cluster.kubeconfig().to_owned();
    install_crds(&client).await?;
    let repo = HelmRepoServer::start(RepoOptions::named("hub-rbac")).await?;
    repo.publish(&podinfo_chart())?;
    tools::kubectl_in(&admin, &["create", "namespace", NAMESPACE], None)?;
    let rbac = chart_rbac()?;
    anyhow::ensure!(
        !rbac.contains("cluster-admin"),
        "the test's values replace cluster-admin:\n{rbac}"
    );
    let dir = tempfile::tempdir()?;
    let sa_kubeconfig = dir.path().join("service-account.kubeconfig");
    rbac::service_account_kubeconfig(
        &admin,
        &client,
        &rbac,
        NAMESPACE,
        SERVICE_ACCOUNT,
        &sa_kubeconfig,
    )
    .await?;

    // The hub as the chart runs it (the flags of templates/deployment.yaml that this
    // binary has), logs in a file.
    let log_path = dir.path().join("hub.log");
    let log = std::fs::File::create(&log_path)?;
    let probes = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut hub = Command::new(env!("CARGO_BIN_EXE_flotilla-hub"))
        .arg("--kubeconfig")
        .arg(&sa_kubeconfig)
        .args(["--metrics-addr", &probes.to_string()])
        .arg("--artifact-dir")
        .arg(dir.path().join("artifacts"))
        .args(["--agent-namespace", NAMESPACE, "--leader-elect"])
        .arg("--allow-local-target")
        .args([
            "--requeue-dependency",
            "2s",
            "--graceful-shutdown-timeout",
            "20s",
        ])
        .env("POD_NAMESPACE", NAMESPACE)
        .env("RUST_LOG", "info,flotilla_hub=debug,flotilla_agent=debug")
        .env("NO_COLOR", "1")
        .env_remove("KUBECONFIG")
        // The hub logs to stdout.
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;

    let result = async {
        let hrs: Api<HelmRelease> = Api::namespaced(client.clone(), "default");
        tools::kubectl_in(
            &admin,
            &["apply", "-f", "-"],
            Some(&podinfo_release(&repo.url(), "podinfo", "")),
        )?;
        ready(&hrs, "podinfo").await?;
        tools::kubectl_in(
            &admin,
            &["apply", "-f", "-"],
            Some(&podinfo_release(
                &repo.url(),
                "podinfo",
                "  values:\n    replicaCount: 2",
            )),
        )?;
        ready(&hrs, "podinfo").await?;
        let history = tools::helm_history(&admin, "podinfo", "default")?;
        let statuses: Vec<&str> = history.iter().map(|(_, s, _)| s.as_str()).collect();
        anyhow::ensure!(statuses == ["superseded", "deployed"], "{history:#?}");
        let lease = tools::kubectl_in(
            &admin,
            &[
                "get",
                "lease",
                "flotilla-hub-leader-election",
                "-n",
                NAMESPACE,
                "-o",
                "name",
            ],
            None,
        )?;
        anyhow::ensure!(!lease.trim().is_empty(), "the hub holds its Lease");
        tools::kubectl_in(
            &admin,
            &[
                "delete",
                "helmrelease",
                "podinfo",
                "-n",
                "default",
                "--wait=false",
            ],
            None,
        )?;
        wait::until(
            "the HelmRelease to be gone",
            Duration::from_secs(120),
            || async { Ok(hrs.get_opt("podinfo").await?.is_none().then_some(())) },
        )
        .await?;
        let history = tools::helm_history(&admin, "podinfo", "default");
        anyhow::ensure!(
            history.is_err() || history?.is_empty(),
            "the release is uninstalled"
        );
        anyhow::Ok(())
    }
    .await;
    flotilla_tests::process::terminate(hub.id());
    let status = tokio::task::spawn_blocking(move || hub.wait()).await??;
    let text = std::fs::read_to_string(&log_path)?;
    if let Err(e) = result {
        anyhow::bail!("{e:#}\nhub logs:\n{text}");
    }
    anyhow::ensure!(status.success(), "exit on SIGTERM: {status}\n{text}");
    let refused: Vec<&str> = text
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("forbidden"))
        .collect();
    anyhow::ensure!(
        refused.is_empty(),
        "the hub was refused something:\n{}",
        refused.join("\n")
    );
    Ok(())
}
