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

/// A loopback address with a port free right now.
fn free_addr() -> anyhow::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}

/// The body of `GET http://addr/path` once the server answers 200.
async fn get_ok(addr: &str, path: &str) -> anyhow::Result<String> {
    flotilla_tests::wait::until(&format!("GET {path}"), Duration::from_secs(30), || async {
        match reqwest::get(format!("http://{addr}{path}")).await {
            Ok(r) if r.status().is_success() => Ok(Some(r.text().await?)),
            Ok(r) => anyhow::bail!("status {}", r.status()),
            Err(e) => Err(e.into()),
        }
    })
    .await
}

#[tokio::test]
async fn the_binary_serves_a_helm_release_and_exits_cleanly_on_sigterm() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("hub-binary")).await?;
    install_crds(&cluster.client().await?).await?;
    let repo = HelmRepoServer::start(RepoOptions::named("hub-binary")).await?;
    repo.publish(&podinfo_chart())?;
    let artifacts = tempfile::tempdir()?;
    let probes = free_addr()?;
    // The session server keeps the hub's CA in its namespace (made by the deployment).
    kubectl_in(
        cluster.kubeconfig(),
        &["create", "namespace", "flotilla-system"],
        None,
    )?;
    let grpc = free_addr()?;
    let mut hub = Command::new(env!("CARGO_BIN_EXE_flotilla-hub"))
        .args(["--metrics-addr", &probes])
        .args(["--grpc-addr", &grpc, "--grpc-san", "127.0.0.1"])
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
        assert_eq!(get_ok(&probes, "/healthz").await?, "ok");
        assert_eq!(get_ok(&probes, "/readyz").await?, "ok");
        let metrics = get_ok(&probes, "/metrics").await?;
        let successes = metrics
            .lines()
            .find(|l| {
                l.starts_with("flotilla_hub_reconciles_total{") && l.contains("result=\"success\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or_default();
        assert!(successes >= 1.0, "{metrics}");
        assert!(metrics.contains("flotilla_hub_reconcile_duration_seconds_bucket"));
        // The agents' session server: the hub CA made on first start, the port listening.
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(cluster.client().await?, "flotilla-system");
        let ca = secrets.get("flotilla-hub-ca").await?;
        assert!(ca.data.is_some_and(|d| d.contains_key("tls.crt")));
        tokio::net::TcpStream::connect(&grpc).await?;
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

/// Starts a `flotilla-hub` replica with leader election on short timings.
fn replica(cluster: &Cluster, artifacts: &std::path::Path) -> anyhow::Result<std::process::Child> {
    Ok(Command::new(env!("CARGO_BIN_EXE_flotilla-hub"))
        .args(["--metrics-addr", &free_addr()?])
        .args(["--kubeconfig"])
        .arg(cluster.kubeconfig())
        .args(["--artifact-dir"])
        .arg(artifacts)
        .args(["--concurrency", "2", "--requeue-dependency", "2s"])
        .args(["--graceful-shutdown-timeout", "20s", "--leader-elect"])
        .args(["--leader-election-namespace", "default"])
        .args(["--leader-election-lease-duration", "4s"])
        .args(["--leader-election-renew-deadline", "3s"])
        .args(["--leader-election-retry-period", "1s"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()?)
}

#[tokio::test]
async fn of_two_replicas_one_acts_and_the_standby_takes_over_when_the_leader_is_killed()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("hub-leader")).await?;
    install_crds(&cluster.client().await?).await?;
    let repo = HelmRepoServer::start(RepoOptions::named("hub-leader")).await?;
    repo.publish(&podinfo_chart())?;
    let (dir_a, dir_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let mut replicas = vec![
        replica(&cluster, dir_a.path())?,
        replica(&cluster, dir_b.path())?,
    ];

    let result = async {
        kubectl_in(
            cluster.kubeconfig(),
            &["apply", "-f", "-"],
            Some(&podinfo_release(
                &repo.url(),
                "podinfo",
                "  values:\n    replicaCount: 1",
            )),
        )?;
        let hrs: Api<HelmRelease> = Api::namespaced(cluster.client().await?, "default");
        ready(&hrs, "podinfo").await?;

        // Kill the holder of the lease without a chance to release it.
        let holder = kubectl_in(
            cluster.kubeconfig(),
            &[
                "get",
                "lease",
                "flotilla-hub-leader-election",
                "-n",
                "default",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ],
            None,
        )?;
        let pid: u32 = holder
            .rsplit_once('_')
            .and_then(|(_, pid)| pid.trim().parse().ok())
            .ok_or_else(|| anyhow::anyhow!("holder identity {holder:?} ends with no pid"))?;
        let leader = replicas
            .iter()
            .position(|r| r.id() == pid)
            .ok_or_else(|| anyhow::anyhow!("the lease holder {holder} is none of the replicas"))?;
        let mut killed = replicas.remove(leader);
        let kill = killed.kill();
        killed.wait()?;
        kill?;

        // The standby holds the lease within 15 s of the kill (the bound; the lease
        // lasts 4 s), measured on the lease itself: the upgrade that follows runs at the
        // speed of the machine's other work and is not part of the hand-over.
        let killed_at = Instant::now();
        let standby = replicas
            .first()
            .map(|r| format!("_{}", r.id()))
            .ok_or_else(|| anyhow::anyhow!("no standby replica left"))?;
        flotilla_tests::wait::until(
            "the standby to hold the lease",
            Duration::from_secs(60),
            || async {
                let holder = kubectl_in(
                    cluster.kubeconfig(),
                    &[
                        "get",
                        "lease",
                        "flotilla-hub-leader-election",
                        "-n",
                        "default",
                        "-o",
                        "jsonpath={.spec.holderIdentity}",
                    ],
                    None,
                )?;
                Ok(holder.trim().ends_with(&standby).then_some(()))
            },
        )
        .await?;
        let took = killed_at.elapsed();
        assert!(took < Duration::from_secs(15), "the standby took {took:?}");

        // The standby acts on the next change: one upgrade, no action twice.
        kubectl_in(
            cluster.kubeconfig(),
            &["apply", "-f", "-"],
            Some(&podinfo_release(
                &repo.url(),
                "podinfo",
                "  values:\n    replicaCount: 2",
            )),
        )?;
        common::wait_for_history(cluster.kubeconfig(), "podinfo", 2).await?;
        ready(&hrs, "podinfo").await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let history =
            flotilla_tests::tools::helm_history(cluster.kubeconfig(), "podinfo", "default")?;
        assert_eq!(history.len(), 2, "{history:?}");
        anyhow::Ok(())
    }
    .await;

    for mut r in replicas {
        let _ = Command::new("kill")
            .args(["-TERM", &r.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while r.try_wait()?.is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if r.try_wait()?.is_none() {
            r.kill()?;
        }
    }
    result
}
