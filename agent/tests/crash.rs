//! The real `flotilla-agent apply` killed with SIGKILL in the middle of an upgrade, then
//! started again: the release left `pending-upgrade` is recovered as Flux recovers it
//! (unlocked and marked failed, then upgraded again), and the real `helm history` agrees
//! with what the agent recorded.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use flotilla_agent::reconcile::state::StateStore;
use flotilla_agent::storage::{SecretStorage, status_of};
use flotilla_chart::release::Status;
use flotilla_core::agent::ObjectKey;
use flotilla_tests::{Cluster, ClusterOptions, tools};

use common::Hr;

/// Writes the plan file of HelmRelease `default/demo` (generation 2 once upgraded).
fn write_plan(dir: &Path, chart: &str, generation: i64, spec: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("plan-{generation}.yaml"));
    Hr::new("demo", chart)
        .generation(generation)
        .timeout(None)
        .spec(spec)
        .write(&path)?;
    Ok(path)
}

fn agent(kubeconfig: &Path, plan: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flotilla-agent"));
    c.arg("apply")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg(plan)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// `helm history demo` as (revision, status, description).
fn helm_history(kubeconfig: &Path) -> anyhow::Result<Vec<(i64, String, String)>> {
    tools::helm_history(kubeconfig, "demo", "default")
}

#[tokio::test]
async fn an_agent_killed_mid_upgrade_recovers_the_pending_release_on_restart() -> anyhow::Result<()>
{
    let cluster = Cluster::start(ClusterOptions::named("crash")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let dir = tempfile::tempdir()?;
    let client = cluster.client().await?;
    let store = SecretStorage::new(client.clone(), "default");

    // v1 installed and ready.
    let first = write_plan(dir.path(), "ok", 1, "  timeout: 30s")?;
    let out = {
        let mut c = agent(&kubeconfig, &first);
        tokio::task::spawn_blocking(move || c.output()).await??
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The upgrade waits (its pod never becomes ready, the timeout is long): kill the agent
    // once Helm storage shows the pending record.
    let waiting = write_plan(
        dir.path(),
        "never-ready",
        2,
        "  timeout: 10m\n  upgrade:\n    remediation:\n      retries: 1",
    )?;
    let mut child = agent(&kubeconfig, &waiting).spawn()?;
    let records = &store;
    let pending = flotilla_tests::wait::until(
        "the upgrade's pending-upgrade record",
        Duration::from_secs(60),
        || async move {
            let last = records.last("demo").await?;
            Ok(last.filter(|r| status_of(r) == Status::PendingUpgrade))
        },
    )
    .await;
    child.kill()?; // SIGKILL: no handler, no cleanup.
    let killed = child.wait()?;
    let pending = pending?;
    assert_eq!(pending.version, 2);
    assert!(!killed.success());
    assert_eq!(
        helm_history(&kubeconfig)?,
        [
            (1, "deployed".into(), "Install complete".into()),
            (2, "pending-upgrade".into(), "Preparing upgrade".into()),
        ],
        "the real helm sees the release locked"
    );

    // Restarted with the same plan (a shorter timeout, so the retried upgrade fails
    // quickly). As Flux: the stale lock is released (v2 marked failed); the history the
    // agent kept (v1) no longer matches storage, so the release is unmanaged, its history
    // is cleared and it is upgraded again (v3), which fails; with no history left there is
    // no rollback target, so remediation stalls.
    let retry = write_plan(
        dir.path(),
        "never-ready",
        2,
        "  timeout: 6s\n  upgrade:\n    remediation:\n      retries: 1",
    )?;
    let out = {
        let mut c = agent(&kubeconfig, &retry);
        tokio::task::spawn_blocking(move || c.output()).await??
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let history = helm_history(&kubeconfig)?;
    let context = format!("{history:#?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let statuses: Vec<(i64, &str)> = history.iter().map(|(v, s, _)| (*v, s.as_str())).collect();
    assert_eq!(
        statuses,
        [(1, "deployed"), (2, "failed"), (3, "failed")],
        "{context}"
    );
    assert_eq!(
        history[1].2,
        "Release unlocked from stale 'pending-upgrade' state"
    );
    assert!(
        history[2]
            .2
            .starts_with("Upgrade \"demo\" failed: timeout waiting for"),
        "{context}"
    );
    assert!(
        !out.status.success(),
        "a stalled release is not a success: {context}"
    );
    assert!(
        stdout.contains("reason: MissingRollbackTarget"),
        "{context}"
    );

    // The chart is fixed (a new generation): the release is upgraded and ready again.
    let fixed = write_plan(dir.path(), "ok", 3, "  timeout: 30s")?;
    let out = {
        let mut c = agent(&kubeconfig, &fixed);
        tokio::task::spawn_blocking(move || c.output()).await??
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let history = helm_history(&kubeconfig)?;
    let context = format!("{history:#?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(out.status.success(), "{context}");
    let statuses: Vec<(i64, &str)> = history.iter().map(|(v, s, _)| (*v, s.as_str())).collect();
    assert_eq!(
        statuses,
        [
            (1, "superseded"),
            (2, "failed"),
            (3, "failed"),
            (4, "deployed")
        ],
        "{context}"
    );
    assert_eq!(history[3].2, "Upgrade complete");
    assert!(stdout.contains("reason: UpgradeSucceeded"), "{context}");

    // What the agent recorded agrees with what helm reads from storage.
    let state = StateStore::new(client.clone(), "default")
        .load(&ObjectKey {
            namespace: "default".parse()?,
            name: "demo".parse()?,
        })
        .await?
        .expect("the agent's state");
    let latest = state.status.latest().expect("a snapshot");
    assert_eq!((latest.version, latest.status.as_str()), (4, "deployed"));
    assert!(!state.status.history.is_empty());
    for snapshot in &state.status.history {
        let helm = history
            .iter()
            .find(|(v, _, _)| *v == i64::from(snapshot.version))
            .expect("every snapshot is in helm's history");
        assert_eq!(snapshot.status, helm.1, "v{}", snapshot.version);
    }
    Ok(())
}
