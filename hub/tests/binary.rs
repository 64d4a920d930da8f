//! The `flotilla-hub` binary on a real cluster: it serves a HelmRelease from its kubeconfig
//! and stops cleanly on SIGTERM.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flotilla_api::HelmRelease;
use flotilla_tests::servers::{HelmRepoServer, RepoOptions};
use flotilla_tests::tools::kubectl_in;
use flotilla_tests::{Cluster, ClusterOptions};
use kube::api::Api;

use common::{helm_list, install_crds, podinfo_chart, podinfo_release, ready};

#[tokio::test]
async fn the_binary_serves_a_helm_release_and_exits_cleanly_on_sigterm() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("hub-binary")).await?;
    install_crds(&cluster.client().await?).await?;
    let repo = HelmRepoServer::start(RepoOptions::named("hub-binary")).await?;
    repo.publish(&podinfo_chart())?;
    let artifacts = tempfile::tempdir()?;
    let mut hub = Command::new(env!("CARGO_BIN_EXE_flotilla-hub"))
        .args(["--kubeconfig"])
        .arg(cluster.kubeconfig())
        .args(["--artifact-dir"])
        .arg(artifacts.path())
        .args(["--concurrency", "2", "--requeue-dependency", "2s"])
        .args(["--graceful-shutdown-timeout", "20s"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()?;

    let result = async {
        kubectl_in(
            cluster.kubeconfig(),
            &["apply", "-f", "-"],
            Some(&podinfo_release(&repo.url(), "podinfo", "")),
        )?;
        let hrs: Api<HelmRelease> = Api::namespaced(cluster.client().await?, "default");
        ready(&hrs, "podinfo").await?;
        assert_eq!(helm_list(cluster.kubeconfig())?, vec!["podinfo".to_owned()]);
        anyhow::Ok(())
    }
    .await;

    let kill = Command::new("kill")
        .args(["-TERM", &hub.id().to_string()])
        .status()?;
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = hub.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            hub.kill()?;
            anyhow::bail!("flotilla-hub did not stop within 60s of SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    result?;
    assert!(status.success(), "flotilla-hub exited with {status}");
    Ok(())
}
