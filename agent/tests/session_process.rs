//! The `flotilla-agent` binary joined to a hub, as an operator runs it, on real local
//! clusters: `flotilla-agent join` registers with a bootstrap token and the CA pin, runs the
//! plan the hub sends through its link (its chart's archive sent along, into the agent's
//! cache, and counted in its metrics) and reports back; killed with SIGKILL and started
//! again with `flotilla-agent run` (no token), it reconnects with the identity kept in its
//! cluster, still holds the plan, and its Hello lists the cached chart, so a new plan on
//! that chart comes without the archive; SIGTERM exits 0. Its debug logs hold no token, key or
//! plan value.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_api::ManagedCluster;
use flotilla_core::agent::{Command as AgentCommand, Report};
use flotilla_core::ids::ClusterId;
use flotilla_core::meta::{Conditions as _, condition};
use flotilla_hub::link::{AgentLink, Links as _, TargetId};
use flotilla_hub::session::{MemoryArchives, SessionConfig, SessionHub, tokens};
use flotilla_hub::telemetry::ChartSent;
use flotilla_tests::{Cluster, wait};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};

use common::{Hr, collect};

const MARKER: &str = "flotilla-process-marker-51d0";
const TIMEOUT: Duration = Duration::from_secs(60);

async fn install_managed_cluster_crd(client: &kube::Client) -> anyhow::Result<()> {
    let crd = flotilla_api::crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == "ManagedCluster")
        .expect("the ManagedCluster CRD is generated");
    let name = crd.metadata.name.clone().expect("generated CRDs are named");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        &name,
        &PatchParams::apply("flotilla-agent-tests"),
        &Patch::Apply(&crd),
    )
    .await?;
    let api: Api<ManagedCluster> = Api::all(client.clone());
    wait::until("ManagedClusters to be served", TIMEOUT, || async {
        Ok(api.list(&Default::default()).await.ok().map(|_| ()))
    })
    .await
}

fn agent(
    kubeconfig: &Path,
    cache: &Path,
    args: &[&str],
) -> anyhow::Result<(Child, Arc<Mutex<String>>)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flotilla-agent"))
        .args(args)
        .env("RUST_LOG", "debug")
        .env("FLOTILLA_CHART_CACHE", cache)
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let logs = collect(child.stderr.take().expect("piped"));
    Ok((child, logs))
}

/// The agent's chart archives received with plans, from its `/metrics` (the address it
/// logged when started with `--metrics-addr 127.0.0.1:0`): (cached, rejected).
fn charts_received(logs: &Arc<Mutex<String>>) -> anyhow::Result<(f64, f64)> {
    let address = {
        let logs = logs.lock().expect("not poisoned");
        let line = logs
            .lines()
            .find(|l| l.contains("serving /metrics"))
            .ok_or_else(|| anyhow::anyhow!("the agent logged no metrics address"))?;
        // A text log line: `... serving /metrics address=127.0.0.1:PORT`.
        line.split_whitespace()
            .find_map(|field| field.strip_prefix("address="))
            .ok_or_else(|| anyhow::anyhow!("no address in {line}"))?
            .to_owned()
    };
    let text = flotilla_tests::http::get(&address, "/metrics")?;
    let series = |result: &str| {
        let name = format!("flotilla_agent_chart_archives_received_total{{result=\"{result}\"}}");
        flotilla_tests::http::sample(&text, &name)
            .ok_or_else(|| anyhow::anyhow!("no {name} in\n{text}"))
    };
    Ok((series("cached")?, series("rejected")?))
}

async fn connected(
    hub: &SessionHub,
    cluster: &ClusterId,
    child: &mut Child,
    logs: &Arc<Mutex<String>>,
) -> anyhow::Result<Arc<dyn AgentLink>> {
    let links = hub.links();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let result = loop {
        if let Some(exit) = child.try_wait()? {
            break Err(anyhow::anyhow!("the agent exited ({exit})"));
        }
        if let Some(link) = links
            .link(&TargetId::Cluster(cluster.clone()))
            .filter(|l| l.connected())
        {
            break Ok(link);
        }
        if tokio::time::Instant::now() > deadline {
            break Err(anyhow::anyhow!("no session within 90 s"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if result.is_err() {
        eprintln!("{}", logs.lock().expect("not poisoned"));
    }
    result
}

#[tokio::test]
async fn the_agent_binary_joins_runs_the_hubs_plan_reports_back_and_after_sigkill_reconnects_with_run_and_no_token()
-> anyhow::Result<()> {
    let mut clusters = Cluster::start_many("agent-join", 2).await?;
    let work_cluster = clusters.pop().expect("two clusters");
    let mgmt_cluster = clusters.pop().expect("two clusters");
    let mgmt = mgmt_cluster.client().await?;
    let work = work_cluster.client().await?;
    install_managed_cluster_crd(&mgmt).await?;
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flotilla-system"}
    }))?;
    Api::<Namespace>::all(mgmt.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    // The chart is on the hub only: it goes to the agent with the plan.
    let dir = tempfile::tempdir()?;
    let cache = dir.path().join("charts");
    let file = Hr::new("demo", "ok")
        .interval("1h")
        .spec(&format!("  values:\n    marker: {MARKER}\n"))
        .plan();
    let archives = Arc::new(MemoryArchives::of([file.archive.clone()]));
    let (reports_tx, mut reports) = flotilla_hub::link::report_channel();
    let hub = SessionHub::start(
        mgmt.clone(),
        SessionConfig {
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(4),
            status_interval: Duration::from_secs(1),
            ..SessionConfig::default()
        },
        tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        reports_tx,
        archives,
    )
    .await?;
    let token = tokens::create(
        mgmt.clone(),
        "flotilla-system",
        &tokens::TokenOptions {
            uses: Some(1),
            auto_accept: true,
            ..tokens::TokenOptions::new(tokens::TokenScope::Cluster("edge".into()))
        },
    )
    .await?
    .expose();

    let hub_url = format!("https://127.0.0.1:{}", hub.local_addr().port());
    let pin = hub.ca().pin().to_string();
    let kubeconfig = work_cluster.kubeconfig().to_owned();
    // The token in a file, not on the command line.
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token)?;
    let token_file = token_file.to_str().expect("a UTF-8 path").to_owned();

    // `run` before any join: it runs on the plans held and says how to join.
    let (mut child, not_joined_logs) =
        agent(&kubeconfig, &cache, &["run", "--namespace", "default"])?;
    let deadline = std::time::Instant::now() + TIMEOUT;
    let said = loop {
        if let Some(exit) = child.try_wait()? {
            anyhow::bail!("`run` without an identity exited ({exit})");
        }
        let logs = not_joined_logs.lock().expect("not poisoned").clone();
        if let Some(line) = logs.lines().find(|l| l.contains("not joined to a hub")) {
            break line.to_owned();
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "`run` did not say it has not joined:\n{logs}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        said.contains("default/flotilla-agent-identity")
            && said.contains("flotilla-agent join --hub")
            && said.contains("then `flotilla-agent run` resumes from the stored identity"),
        "{said}"
    );
    child.kill()?;
    child.wait()?;

    let (mut child, join_logs) = agent(
        &kubeconfig,
        &cache,
        &[
            "join",
            "--namespace",
            "default",
            "--hub",
            &hub_url,
            "--token-file",
            &token_file,
            "--ca-hash",
            &pin,
            "--cluster-name",
            "edge",
            "--heartbeat-interval",
            "1s",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
    )?;
    let edge = ClusterId::new("edge")?;
    let link = connected(&hub, &edge, &mut child, &join_logs).await?;
    link.send(AgentCommand::Upsert(Box::new(file.plan.clone())))?;
    let key = file.plan.object.key();
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let Some(r) = reports.recv().await else {
                anyhow::bail!("the report sink closed");
            };
            assert_eq!(r.target, TargetId::Cluster(edge.clone()));
            if let Report::Status(s) = r.report
                && s.object.key() == key
                && s.status.conditions.is_true(condition::READY)
            {
                return Ok(());
            }
        }
    })
    .await??;

    let hex = file
        .plan
        .chart
        .digest
        .as_str()
        .trim_start_matches("sha256:");
    assert!(
        cache.join(format!("{hex}.tgz")).exists(),
        "the chart sent by the hub is in the agent's cache"
    );
    let metrics = hub.metrics().clone();
    let sent = || {
        (
            metrics.charts_sent(ChartSent::WithPlan),
            metrics.charts_sent(ChartSent::GetChart),
        )
    };
    assert_eq!(
        sent(),
        (1, 0),
        "the archive went with the plan, no GetChart"
    );
    assert_eq!(
        charts_received(&join_logs)?,
        (1.0, 0.0),
        "the agent counts the archive it checked and cached"
    );

    // SIGKILL, then `run` with no token: the identity is in the cluster.
    child.kill()?;
    child.wait()?;
    let mailbox = hub.links().mailbox(&edge).expect("edge's mailbox");
    wait::until("the hub to see the agent gone", TIMEOUT, || async {
        Ok((!mailbox.connected()).then_some(()))
    })
    .await?;
    let (mut child, run_logs) = agent(
        &kubeconfig,
        &cache,
        &[
            "run",
            "--namespace",
            "default",
            "--metrics-addr",
            "127.0.0.1:0",
        ],
    )?;
    let link = connected(&hub, &edge, &mut child, &run_logs).await?;
    assert!(
        link.held()
            .iter()
            .any(|h| h.object == key && h.revision == file.plan.revision)
    );
    // A new revision on the same chart: the restarted agent's Hello listed it, so the
    // plan goes without the archive and the agent reconciles it from its cache.
    let mut next = file.plan.clone();
    next.revision = flotilla_core::ids::PlanRevision::new(file.plan.revision.get() + 1);
    link.send(AgentCommand::Upsert(Box::new(next.clone())))?;
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let Some(r) = reports.recv().await else {
                anyhow::bail!("the report sink closed");
            };
            if let Report::Status(s) = r.report
                && s.object.key() == key
                && s.plan_revision == next.revision
                && s.status.conditions.is_true(condition::READY)
            {
                return Ok(());
            }
        }
    })
    .await??;
    assert_eq!(sent(), (1, 0));
    assert_eq!(
        charts_received(&run_logs)?,
        (0.0, 0.0),
        "the restarted agent received no archive"
    );

    // SIGTERM: exits 0.
    flotilla_tests::process::terminate(child.id());
    let status = tokio::task::spawn_blocking(move || child.wait()).await??;
    assert!(status.success(), "{status}");

    // Nothing secret in the agent's debug logs.
    let identity = Api::<Secret>::namespaced(work.clone(), "default")
        .get("flotilla-agent-identity")
        .await?;
    let key_pem = String::from_utf8(identity.data.expect("data")["tls.key"].0.clone())?;
    let key_line = key_pem
        .lines()
        .find(|l| !l.starts_with("-----"))
        .expect("a PEM body")
        .to_owned();
    for logs in [&join_logs, &run_logs] {
        let text = logs.lock().expect("not poisoned").clone();
        assert!(text.contains("session up"), "{text}");
        for (what, secret) in [
            ("the token", token.as_str()),
            ("the token's secret", &token[7..]),
            ("a plan value", MARKER),
            ("the agent's key", key_line.as_str()),
        ] {
            assert!(!text.contains(secret), "{what} appears in the agent's logs");
        }
    }
    hub.stop().await;
    Ok(())
}
