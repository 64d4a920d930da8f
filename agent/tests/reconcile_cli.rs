//! `flotilla-agent apply` on plan files: a release installed and tested on a real local
//! cluster, its status printed as YAML; a bad plan file refused naming the field.

use std::path::Path;
use std::process::Command;

use flotilla_tests::{Cluster, ClusterOptions};

fn plans() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plans")
}

#[tokio::test]
async fn apply_installs_and_tests_a_plan_file_and_prints_the_status_as_yaml() -> anyhow::Result<()>
{
    let cluster = Cluster::start(ClusterOptions::named("rec-cli")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let plan = plans().join("demo.yaml");
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
    assert!(stdout.starts_with("---\n"), "{stdout}");
    for want in [
        "reason: InstallSucceeded",
        "reason: TestSucceeded",
        "status: deployed",
        "storageNamespace: default",
    ] {
        assert!(stdout.contains(want), "{want:?} missing from:\n{stdout}");
    }
    assert!(
        !stdout.contains("greeting"),
        "values are never printed:\n{stdout}"
    );
    Ok(())
}

#[test]
fn apply_refuses_a_bad_plan_file_naming_the_field() -> anyhow::Result<()> {
    let output = Command::new(env!("CARGO_BIN_EXE_flotilla-agent"))
        .args(["apply", "--kubeconfig", "/nonexistent"])
        .arg(plans().join("bad-chart.yaml"))
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("bad-chart.yaml: chart.path: required"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn apply_watch_reconciles_until_sigterm() -> anyhow::Result<()> {
    use std::io::{BufRead as _, BufReader};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let cluster = Cluster::start(ClusterOptions::named("rec-watch")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let plan = plans().join("demo.yaml");
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_flotilla-agent"))
            .arg("apply")
            .arg("--watch")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg(&plan)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped stdout");
        let mut seen = false;
        for line in BufReader::new(stdout).lines() {
            if line?.contains("reason: InstallSucceeded") {
                seen = true;
                break;
            }
        }
        assert!(seen, "the first reconcile printed its status");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()?;
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(exit) = child.try_wait()? {
                assert!(exit.success(), "exit on SIGTERM: {exit}");
                return Ok(());
            }
            if Instant::now() > deadline {
                child.kill()?;
                anyhow::bail!("still running 20s after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await??;
    Ok(())
}
