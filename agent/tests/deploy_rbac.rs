//! The agent binary under exactly the ServiceAccount and RBAC of the `flotilla-agent` chart
//! (`deploy/charts/flotilla-agent`): the chart's ServiceAccount, Roles and bindings are
//! rendered by the reference `helm template` (workload grant: `tests/deploy-rbac-values.yaml`,
//! a known chart's rules instead of cluster-admin) and applied to a workload cluster; the agent
//! authenticates with a token of that ServiceAccount from the TokenRequest API (so the API
//! server authorizes it as the ServiceAccount, not by impersonation), joins a hub, and
//! installs, upgrades (hooks and a test each time) and uninstalls a release in a namespace
//! it creates. Nothing it asks is refused: its debug logs hold no `forbidden`. Without the
//! chart's ClusterRole (kube-system's UID), the same agent cannot join: its rules are needed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_core::agent::{Command as AgentCommand, DeleteOutcome, DeleteRequest, Report};
use flotilla_core::ids::{ClusterId, PlanRevision};
use flotilla_core::meta::{Conditions as _, condition};
use flotilla_core::plan::ReleasePlan;
use flotilla_hub::link::{AgentLink, Links as _, TargetId};
use flotilla_hub::session::{MemoryArchives, SessionConfig, SessionHub, tokens};
use flotilla_tests::{Cluster, rbac, tools};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Secret};
use kube::api::{Api, ListParams, PostParams};

use common::{Hr, collect};

/// The agent's namespace, as the chart is installed.
const NAMESPACE: &str = "flotilla-system";
/// The chart's ServiceAccount with release name `flotilla-agent`.
const SERVICE_ACCOUNT: &str = "flotilla-agent";
/// Where the release goes (created by the agent: install.createNamespace).
const APPS: &str = "apps";
const TIMEOUT: Duration = Duration::from_secs(120);

type Reports = flotilla_hub::link::ReportReceiver;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The chart's ServiceAccount and RBAC, rendered by the reference helm.
fn chart_rbac() -> anyhow::Result<String> {
    chart_rbac_with(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/deploy-rbac-values.yaml"))
}

/// The chart's ServiceAccount and RBAC with the values of `values`.
fn chart_rbac_with(values: &Path) -> anyhow::Result<String> {
    rbac::chart_rbac(
        &workspace().join("deploy/charts/flotilla-agent"),
        "flotilla-agent",
        NAMESPACE,
        values,
    )
}

#[test]
fn the_charts_defaults_bind_no_cluster_admin_only_the_value_that_asks_does() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // The values the chart requires, nothing of rbac.
    let required =
        "hub:\n  url: https://hub:9443\n  caPin: sha256:00\n  existingTokenSecret: mine\n";
    let defaults = dir.path().join("defaults.yaml");
    std::fs::write(&defaults, required)?;
    let rbac = chart_rbac_with(&defaults)?;
    anyhow::ensure!(
        !rbac.contains("cluster-admin") && !rbac.contains("-workload"),
        "the defaults grant no workload rights:\n{rbac}"
    );
    let asked = dir.path().join("asked.yaml");
    std::fs::write(
        &asked,
        format!("{required}rbac:\n  workload:\n    clusterAdmin: true\n"),
    )?;
    let rbac = chart_rbac_with(&asked)?;
    anyhow::ensure!(rbac.contains("name: cluster-admin"), "{rbac}");
    Ok(())
}

fn agent(
    kubeconfig: &Path,
    cache: &Path,
    args: &[&str],
) -> anyhow::Result<(Child, Arc<Mutex<String>>)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flotilla-agent"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env("RUST_LOG", "debug")
        .env("FLOTILLA_CHART_CACHE", cache)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let logs = collect(child.stderr.take().expect("piped"));
    Ok((child, logs))
}

/// The agent's link once its session is up; fails when the agent exits first.
async fn connected(
    hub: &SessionHub,
    cluster: &ClusterId,
    child: &mut Child,
    within: Duration,
) -> anyhow::Result<Arc<dyn AgentLink>> {
    let links = hub.links();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(exit) = child.try_wait()? {
            anyhow::bail!("the agent exited ({exit})");
        }
        if let Some(link) = links
            .link(&TargetId::Cluster(cluster.clone()))
            .filter(|l| l.connected())
        {
            return Ok(link);
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("no session within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for the status of `plan` at its revision with Ready and TestSuccess true; fails on
/// a status of that revision that is not ready (what failed is in its conditions).
async fn ready(reports: &mut Reports, plan: &ReleasePlan) -> anyhow::Result<()> {
    let key = plan.object.key();
    tokio::time::timeout(TIMEOUT, async {
        loop {
            let Some(r) = reports.recv().await else {
                anyhow::bail!("the report sink closed");
            };
            let Report::Status(s) = r.report else {
                continue;
            };
            if s.object.key() != key || s.plan_revision != plan.revision {
                continue;
            }
            let conditions = &s.status.conditions;
            if conditions.is_true(condition::READY) {
                anyhow::ensure!(
                    conditions.is_true(condition::TEST_SUCCESS),
                    "ready without a passing test: {conditions:#?}"
                );
                return Ok(());
            }
            if !conditions.is_true(condition::RECONCILING) {
                anyhow::bail!("revision {} failed: {conditions:#?}", plan.revision);
            }
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("revision {} not ready within {TIMEOUT:?}", plan.revision))?
}

async fn greeting(client: &kube::Client) -> anyhow::Result<Option<String>> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), APPS)
        .get_opt("web-config")
        .await?;
    Ok(cm
        .and_then(|c| c.data)
        .and_then(|d| d.get("greeting").cloned()))
}

#[tokio::test]
async fn the_agent_under_the_charts_service_account_and_rbac_installs_upgrades_tests_and_uninstalls_and_is_refused_nothing()
-> anyhow::Result<()> {
    let mut clusters = Cluster::start_many("agent-rbac", 2).await?;
    let work_cluster = clusters.pop().expect("two clusters");
    let mgmt_cluster = clusters.pop().expect("two clusters");
    let mgmt = mgmt_cluster.client().await?;
    let work = work_cluster.client().await?;
    let ns = |name: &str| -> anyhow::Result<Namespace> {
        Ok(serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
        }))?)
    };

    // The hub: the ManagedCluster CRD, a session server, a bootstrap token.
    let crds: Vec<_> = flotilla_api::crd::all()
        .into_iter()
        .filter(|c| c.spec.names.kind == "ManagedCluster")
        .collect();
    flotilla_tests::crds::install(&mgmt, "flotilla-agent-tests", &crds).await?;
    Api::<Namespace>::all(mgmt.clone())
        .create(&PostParams::default(), &ns(NAMESPACE)?)
        .await?;
    let spec = |greeting: &str| {
        format!(
            "  install:\n    createNamespace: true\n  test:\n    enable: true\n  values:\n    greeting: {greeting}\n"
        )
    };
    let v1 = Hr::new("web", "rbac-e2e")
        .namespace(APPS)
        .interval("1h")
        .spec(&spec("hello"))
        .plan();
    let v2 = Hr::new("web", "rbac-e2e")
        .namespace(APPS)
        .interval("1h")
        .generation(2)
        .spec(&spec("bonjour"))
        .plan();
    let archives = Arc::new(MemoryArchives::of([v1.archive.clone(), v2.archive.clone()]));
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
    let new_token = || async {
        let token = tokens::create(
            mgmt.clone(),
            NAMESPACE,
            &tokens::TokenOptions {
                uses: Some(1),
                auto_accept: true,
                ..tokens::TokenOptions::new(tokens::TokenScope::Cluster("edge".into()))
            },
        )
        .await?
        .expose();
        anyhow::Ok(token)
    };
    let hub_url = format!("https://127.0.0.1:{}", hub.local_addr().port());
    let pin = hub.ca().pin().to_string();

    // The workload cluster: the chart's ServiceAccount and RBAC, nothing else.
    Api::<Namespace>::all(work.clone())
        .create(&PostParams::default(), &ns(NAMESPACE)?)
        .await?;
    let admin = work_cluster.kubeconfig().to_owned();
    let rbac = chart_rbac()?;
    for kind in [
        "kind: ServiceAccount",
        "kind: Role",
        "kind: ClusterRole",
        "kind: RoleBinding",
    ] {
        anyhow::ensure!(
            rbac.contains(kind),
            "{kind} missing from the chart's RBAC:\n{rbac}"
        );
    }
    anyhow::ensure!(
        !rbac.contains("cluster-admin"),
        "the test's values replace cluster-admin:\n{rbac}"
    );
    let dir = tempfile::tempdir()?;
    let sa_kubeconfig = dir.path().join("service-account.kubeconfig");
    // The kubeconfig is the ServiceAccount, and what the chart does not grant is refused.
    rbac::service_account_kubeconfig(
        &admin,
        &work,
        &rbac,
        NAMESPACE,
        SERVICE_ACCOUNT,
        &sa_kubeconfig,
    )
    .await?;
    let denied = tools::run(&tools::kubectl()?, &["get", "nodes"], &sa_kubeconfig, None)?;
    anyhow::ensure!(
        !denied.status.success() && tools::text(&denied).contains("forbidden"),
        "the ServiceAccount may list nodes: {}",
        tools::text(&denied)
    );

    // Join, install, upgrade, uninstall.
    let cache = dir.path().join("charts");
    let token = new_token().await?;
    // The token in a file, not on the command line.
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token)?;
    let token_file = token_file.to_str().expect("a UTF-8 path").to_owned();
    let join = [
        "join",
        "--namespace",
        NAMESPACE,
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
    ];
    let (mut child, logs) = agent(&sa_kubeconfig, &cache, &join)?;
    let edge = ClusterId::new("edge")?;
    let result = async {
        let link = connected(&hub, &edge, &mut child, Duration::from_secs(90)).await?;
        link.send(AgentCommand::Upsert(Box::new(v1.plan.clone())))?;
        ready(&mut reports, &v1.plan).await?;
        anyhow::ensure!(greeting(&work).await?.as_deref() == Some("hello"));
        let mut v2_plan = v2.plan.clone();
        v2_plan.revision = PlanRevision::new(v1.plan.revision.get() + 1);
        link.send(AgentCommand::Upsert(Box::new(v2_plan.clone())))?;
        ready(&mut reports, &v2_plan).await?;
        anyhow::ensure!(greeting(&work).await?.as_deref() == Some("bonjour"));
        let history = tools::helm_history(&admin, "web", APPS)?;
        let statuses: Vec<(i64, &str)> = history.iter().map(|(v, s, _)| (*v, s.as_str())).collect();
        anyhow::ensure!(
            statuses == [(1, "superseded"), (2, "deployed")],
            "{history:#?}"
        );
        let hook = Api::<ConfigMap>::namespaced(work.clone(), APPS)
            .get("web-done")
            .await?;
        anyhow::ensure!(
            hook.data
                .and_then(|d| d.get("greeting").cloned())
                .as_deref()
                == Some("bonjour"),
            "the post-upgrade hook ran"
        );
        let key = v1.plan.object.key();
        let revision = PlanRevision::new(v2_plan.revision.get() + 1);
        link.send(AgentCommand::Delete(DeleteRequest {
            object: key.clone(),
            revision,
            uninstall: Some(Default::default()),
        }))?;
        tokio::time::timeout(TIMEOUT, async {
            loop {
                let Some(r) = reports.recv().await else {
                    anyhow::bail!("the report sink closed");
                };
                if let Report::Deleted {
                    object, outcome, ..
                } = r.report
                    && object == key
                {
                    anyhow::ensure!(outcome == DeleteOutcome::Uninstalled, "{outcome:?}");
                    return Ok(());
                }
            }
        })
        .await??;
        anyhow::ensure!(greeting(&work).await?.is_none(), "uninstalled");
        let records = Api::<Secret>::namespaced(work.clone(), APPS)
            .list(&ListParams::default().labels("owner=helm,name=web"))
            .await?;
        anyhow::ensure!(records.items.is_empty(), "the release records are gone");
        let events = Api::<Event>::namespaced(work.clone(), APPS)
            .list(&ListParams::default())
            .await?;
        anyhow::ensure!(
            events
                .items
                .iter()
                .any(|e| e.involved_object.kind.as_deref() == Some("HelmRelease")),
            "the agent recorded the release's Events"
        );
        Ok(())
    }
    .await;
    flotilla_tests::process::terminate(child.id());
    let status = tokio::task::spawn_blocking(move || child.wait()).await??;
    let text = logs.lock().expect("not poisoned").clone();
    if let Err(e) = result {
        anyhow::bail!("{e:#}\nagent logs:\n{text}");
    }
    anyhow::ensure!(status.success(), "exit on SIGTERM: {status}\n{text}");
    // An API server's refusal is a 403 whose reason is Forbidden and whose message says
    // "forbidden"; the agent logs every failed request.
    let refused: Vec<&str> = text
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("forbidden"))
        .collect();
    anyhow::ensure!(
        refused.is_empty(),
        "the agent was refused something:\n{}",
        refused.join("\n")
    );

    // Without the chart's ClusterRole (the cluster's identity: kube-system's UID), a new
    // join fails. (Its Role's Secrets are also granted by this workload grant, which
    // covers Helm's records in every namespace, so the Role is not what is taken away.)
    tools::kubectl_in(
        &admin,
        &["delete", "clusterrolebinding", "flotilla-agent"],
        None,
    )?;
    Api::<Secret>::namespaced(work.clone(), NAMESPACE)
        .delete("flotilla-agent-identity", &Default::default())
        .await?;
    let token = new_token().await?;
    std::fs::write(dir.path().join("token"), &token)?;
    let (mut child, logs) = agent(&sa_kubeconfig, &cache, &join)?;
    let exit = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Some(exit) = child.try_wait()? {
                return anyhow::Ok(exit);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let text = logs.lock().expect("not poisoned").clone();
    match exit {
        Ok(exit) => anyhow::ensure!(!exit?.success(), "joined without its ClusterRole:\n{text}"),
        Err(_) => {
            child.kill()?;
            child.wait()?;
            anyhow::bail!("still running 60 s after joining without its ClusterRole:\n{text}");
        }
    }
    anyhow::ensure!(text.contains("forbidden"), "refused by RBAC:\n{text}");
    hub.stop().await;
    Ok(())
}
