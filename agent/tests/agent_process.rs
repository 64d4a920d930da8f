//! The `flotilla-agent` binary as an operator runs it, on real local clusters: an agent
//! holding 20 plans killed with SIGKILL and restarted with no input resumes all of them
//! from the cluster (no extra Helm revision; its metrics endpoint says so); SIGTERM during
//! an upgrade lets the upgrade finish and exits 0 with nothing left `pending-*`; a
//! directory of plans with a malformed one reconciles the others and names the bad file
//! and field.

mod common;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flotilla_agent::storage::{SecretStorage, status_of};
use flotilla_chart::release::Status;
use flotilla_tests::{Cluster, ClusterOptions, tools};

use common::Hr;

fn agent_command(kubeconfig: &Path, cache: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flotilla-agent"));
    c.arg("--log-format")
        .arg("json")
        .env("RUST_LOG", "flotilla_agent=info")
        .env("FLOTILLA_CHART_CACHE", cache)
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::null());
    c
}

/// Reads a child's stream on a thread, line by line, into a shared buffer.
fn collect(
    stream: impl std::io::Read + Send + 'static,
) -> std::sync::Arc<std::sync::Mutex<String>> {
    let out = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = out.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            let mut s = sink.lock().expect("not poisoned");
            s.push_str(&line);
            s.push('\n');
        }
    });
    out
}

/// Waits until `check` holds on the collected text.
fn wait_for(
    what: &str,
    text: &std::sync::Arc<std::sync::Mutex<String>>,
    child: &mut Child,
    within: Duration,
    check: impl Fn(&str) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        if check(&text.lock().expect("not poisoned")) {
            return Ok(());
        }
        if let Some(exit) = child.try_wait()? {
            anyhow::bail!("agent exited ({exit}) before {what}");
        }
        if Instant::now() > deadline {
            anyhow::bail!("{what}: not within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The metrics text of the agent listening on `addr`.
fn scrape(addr: &str) -> anyhow::Result<String> {
    flotilla_tests::http::get(addr, "/metrics")
}

/// The value of a sample line `name value` in a metrics text.
fn sample(text: &str, name: &str) -> Option<f64> {
    flotilla_tests::http::sample(text, name)
}

#[tokio::test]
async fn an_agent_holding_20_plans_killed_with_sigkill_resumes_them_all_with_no_input()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("agent-resume")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let dir = tempfile::tempdir()?;
    let cache = dir.path().join("charts");
    let plans = dir.path().join("plans");
    std::fs::create_dir_all(&plans)?;
    let names: Vec<String> = (0..20).map(|i| format!("r{i:02}")).collect();
    for name in &names {
        Hr::new(name, "podinfo-like")
            .interval("1h")
            .write(&plans.join(format!("{name}.yaml")))?;
    }

    let kc = kubeconfig.clone();
    let (cache2, plans2, names2) = (cache.clone(), plans.clone(), names.clone());
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        // Plan-file mode installs all 20, then is killed without warning.
        let mut child = agent_command(&kc, &cache2)
            .args(["apply", "--watch", "--concurrency", "8"])
            .arg(&plans2)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdout = collect(child.stdout.take().expect("piped"));
        let _stderr = collect(child.stderr.take().expect("piped"));
        let result = wait_for(
            "20 releases installed",
            &stdout,
            &mut child,
            Duration::from_secs(240),
            |out| {
                let docs: Vec<&str> = out.split("---\n").collect();
                names2.iter().all(|n| {
                    docs.iter().any(|d| {
                        d.contains(&format!("name: {n}\n"))
                            && d.contains("reason: InstallSucceeded")
                    })
                })
            },
        );
        child.kill()?;
        child.wait()?;
        result
    })
    .await??;

    // Restarted with no plan files: `run` resumes all 20 from the plan store.
    let kc = kubeconfig.clone();
    let cache2 = cache.clone();
    let metrics = tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
        let mut child = agent_command(&kc, &cache2)
            .args([
                "run",
                "--namespace",
                "default",
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = collect(child.stderr.take().expect("piped"));
        let result = (|| -> anyhow::Result<String> {
            wait_for(
                "the metrics address",
                &stderr,
                &mut child,
                Duration::from_secs(30),
                |e| e.contains("serving /metrics"),
            )?;
            let logs = stderr.lock().expect("not poisoned").clone();
            let line = logs
                .lines()
                .find(|l| l.contains("serving /metrics"))
                .expect("waited for it");
            let value: serde_json::Value = serde_json::from_str(line)?;
            let addr = value["address"]
                .as_str()
                .ok_or_else(|| anyhow::anyhow!("no address in {line}"))?
                .to_owned();
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let text = scrape(&addr)?;
                let done = sample(
                    &text,
                    "flotilla_agent_reconcile_duration_seconds_count{result=\"success\"}",
                )
                .unwrap_or_default();
                if done >= 20.0 {
                    return Ok(text);
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "not all resumed:\n{text}\n{}",
                    stderr.lock().expect("not poisoned")
                );
                std::thread::sleep(Duration::from_millis(500));
            }
        })();
        child.kill()?;
        child.wait()?;
        result
    })
    .await??;
    assert_eq!(
        sample(&metrics, "flotilla_agent_plans_held"),
        Some(20.0),
        "{metrics}"
    );
    assert!(
        !metrics.contains("flotilla_agent_action_total{action=\"install\""),
        "nothing is installed again:\n{metrics}"
    );
    for name in &names {
        let history = tools::helm_history(&kubeconfig, name, "default")?;
        assert_eq!(history.len(), 1, "{name}: {history:#?}");
        assert_eq!(history[0].1, "deployed", "{name}: {history:#?}");
    }
    Ok(())
}

#[tokio::test]
async fn sigterm_during_an_upgrade_lets_it_finish_and_exits_0_with_nothing_pending()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("agent-sigterm")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let client = cluster.client().await?;
    let dir = tempfile::tempdir()?;
    let cache = dir.path().join("charts");
    let v1 = dir.path().join("v1.yaml");
    Hr::new("demo", "ok").write(&v1)?;
    // v2's pods never become ready until the test lets them: the upgrade waits.
    let v2 = dir.path().join("v2.yaml");
    Hr::new("demo", "never-ready")
        .generation(2)
        .timeout(Some("2m"))
        .write(&v2)?;

    let (kc, cache2) = (kubeconfig.clone(), cache.clone());
    let out = tokio::task::spawn_blocking(move || {
        agent_command(&kc, &cache2).arg("apply").arg(&v1).output()
    })
    .await??;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut child = agent_command(&kubeconfig, &cache)
        .args(["apply", "--watch"])
        .arg(&v2)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = collect(child.stderr.take().expect("piped"));
    let records = SecretStorage::new(client.clone(), "default");
    flotilla_tests::wait::until("the pending upgrade", Duration::from_secs(60), || {
        let records = records.clone();
        async move {
            Ok(records
                .last("demo")
                .await?
                .filter(|r| status_of(r) == Status::PendingUpgrade))
        }
    })
    .await?;
    flotilla_tests::process::terminate(child.id());
    // The agent waits for the upgrade: still running a while after SIGTERM.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        child.try_wait()?.is_none(),
        "the agent left with the upgrade in flight"
    );
    // Let the pods become ready: the upgrade's wait ends and it is recorded.
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), "default");
    deployments
        .patch(
            "demo",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({
                "spec": {"template": {"metadata": {"labels": {"flotilla.dev/never-ready": "false"}}}}
            })),
        )
        .await?;
    let exit = tokio::task::spawn_blocking(move || -> anyhow::Result<std::process::ExitStatus> {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(exit) = child.try_wait()? {
                return Ok(exit);
            }
            if Instant::now() > deadline {
                child.kill()?;
                anyhow::bail!("still running 90s after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    })
    .await??;
    let logs = stderr.lock().expect("not poisoned").clone();
    assert!(exit.success(), "exit {exit}:\n{logs}");
    let history = tools::helm_history(&kubeconfig, "demo", "default")?;
    let statuses: Vec<(i64, &str)> = history.iter().map(|(v, s, _)| (*v, s.as_str())).collect();
    assert_eq!(
        statuses,
        [(1, "superseded"), (2, "deployed")],
        "{history:#?}\n{logs}"
    );
    Ok(())
}

#[tokio::test]
async fn a_directory_with_one_malformed_plan_reconciles_the_others_and_names_the_bad_one()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("agent-baddir")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let dir = tempfile::tempdir()?;
    let plans: PathBuf = dir.path().join("plans");
    std::fs::create_dir_all(&plans)?;
    // Charts whose objects are named after the release: two releases do not fight over them.
    Hr::new("good-a", "values-echo-1").write(&plans.join("a.yaml"))?;
    Hr::new("good-c", "values-echo-1").write(&plans.join("c.yaml"))?;
    std::fs::write(
        plans.join("b.yaml"),
        "apiVersion: helm.flotilla.dev/v1\nkind: HelmRelease\nmetadata: {name: bad}\nspec: {interval: 1m, timeout: soon}\nchart: {path: /nonexistent}\n",
    )?;
    let cache = dir.path().join("charts");
    let out = tokio::task::spawn_blocking(move || {
        agent_command(&kubeconfig, &cache)
            .arg("apply")
            .arg(&plans)
            .output()
    })
    .await??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "one plan was bad:\n{stderr}");
    assert!(stderr.contains("b.yaml: "), "{stderr}");
    assert!(stderr.contains("spec.timeout"), "{stderr}");
    assert!(stderr.contains("1 plan(s) did not reconcile"), "{stderr}");
    assert!(
        !stderr.contains("Debug") && !stderr.contains("Failed("),
        "{stderr}"
    );
    for name in ["good-a", "good-c"] {
        let doc = stdout
            .split("---\n")
            .find(|d| d.contains(&format!("name: {name}\n")))
            .unwrap_or_else(|| panic!("no status for {name}:\n{stdout}"));
        assert!(doc.contains("kind: HelmRelease"), "{doc}");
        assert!(doc.contains("reason: InstallSucceeded"), "{doc}");
    }
    Ok(())
}
