//! `cargo xtask up --capi`: Cluster API onboarding on this machine, the way
//! `hub/tests/capi_onboarding.rs` runs it, left running to look at.
//!
//! No Cluster API provider runs here, so this plays the two roles the test harness plays
//! and nothing else:
//!
//! - **the providers**: for each of three local workload clusters it writes a
//!   `cluster.x-k8s.io/v1beta2` `Cluster` (labelled `env=prod`) and its `<name>-kubeconfig`
//!   Secret into the management cluster, then marks the control plane initialized;
//! - **the kubelet**: once the hub has applied the agent Deployment into a workload cluster
//!   (through that kubeconfig), it runs the real `flotilla-agent` as a host process with that
//!   Deployment's arguments, environment and ServiceAccount token
//!   (`flotilla_tests::capi_kubelet`), detached, once.
//!
//! Everything else is the real hub with `--capi-import`: it imports the Clusters as
//! ManagedClusters, bootstraps the agents, and the HelmReleaseSet `capi-demo/hello`
//! (`env=prod`) reaches each cluster as its agent joins. Then every process is left running
//! (pids in the directories under `.flotilla/env/`) and `cargo xtask down` stops them: the
//! fleet's (hub, servers), each cluster's, and the agents' (`capi-agents/pids`). Nothing
//! stays in the foreground: the kubelet's part is done once the agents run. A step that
//! needs it again (an agent re-bootstrapped after its join timeout, an agent upgrade by a
//! hub restarted with another image) is not played: `cargo xtask up --capi` again starts
//! afresh.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use flotilla_api::{HelmRelease, ManagedCluster};
use flotilla_core::meta::Conditions as _;
use flotilla_tests::bins;
use flotilla_tests::capi::{self, provider};
use flotilla_tests::capi_kubelet;
use flotilla_tests::cluster::{Cluster, ClusterOptions};
use flotilla_tests::fleet::{AGENT_NAMESPACE, Fleet, FleetOptions};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams};

/// The namespace of the Clusters and of the set.
const NAMESPACE: &str = "capi-demo";
/// The Clusters.
const CLUSTERS: [&str; 3] = ["prod-a", "prod-b", "prod-c"];
/// The set.
const SET: &str = "hello";
/// How long each step may take.
const STEP: Duration = Duration::from_secs(300);

/// The HelmRepository and the HelmReleaseSet every `env=prod` ManagedCluster gets.
fn set_manifests(repo_url: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
---
apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: examples
  namespace: {NAMESPACE}
spec:
  interval: 5m
  url: {repo_url}
---
apiVersion: helm.flotilla.dev/v1alpha1
kind: HelmReleaseSet
metadata:
  name: {SET}
  namespace: {NAMESPACE}
spec:
  clusterSelector:
    matchLabels: {{env: prod}}
  template:
    spec:
      interval: 10m
      releaseName: hello
      targetNamespace: hello
      storageNamespace: hello
      install:
        createNamespace: true
      chart:
        spec:
          chart: hello
          version: "0.1.x"
          sourceRef:
            kind: HelmRepository
            name: examples
  valuesTemplate: |
    message: "Hello from {{{{ .ClusterName }}}}"
  rollout:
    strategy: AllAtOnce
"#
    )
}

/// `cargo xtask up --capi` into `dir` (`.flotilla/env/`, emptied by `down` before).
pub fn run(dir: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    eprintln!(
        "xtask up --capi: building flotilla-hub, flotilla-agent and flotilla (the dev build the tests run; no images)"
    );
    let binaries = bins::build(bins::Progress::Show)?;
    let tools = flotilla_tests::tools::reference_tools_dir()?;
    eprintln!("xtask up --capi: fetching the Cluster API CRDs (once, then cached)");
    capi::crd_dir()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let up = runtime.block_on(up(dir, binaries, started))?;
    eprintln!(
        "xtask up --capi: up in {:.0?}: a management cluster with the hub, {} Cluster API clusters, the set's releases Ready\n",
        started.elapsed(),
        up.workloads.len()
    );
    print_tour(&up, &tools)
}

/// What [`up`] left running.
struct Up {
    hub_kubeconfig: PathBuf,
    hub_log: PathBuf,
    cli: PathBuf,
    /// The directories of the binaries, for `PATH`.
    bin_path: String,
    /// `(Cluster name, workload kubeconfig, agent log)`.
    workloads: Vec<(String, PathBuf, PathBuf)>,
}

async fn up(dir: &Path, binaries: bins::Binaries, started: Instant) -> anyhow::Result<Up> {
    let say = |what: &str| eprintln!("[{:>5.1}s] {what}", started.elapsed().as_secs_f64());
    let values = dir.join("capi-agent-values.yaml");
    // The agents install the example chart anywhere: the agent chart's own switch.
    std::fs::write(&values, "rbac:\n  workload:\n    clusterAdmin: true\n")?;
    let mut options = FleetOptions::named("flotilla");
    options.workloads = Vec::new();
    options.parent_dir = Some(dir.to_owned());
    options.detached = true;
    options.verbose = true;
    if let Ok(filter) = std::env::var("RUST_LOG")
        && !filter.trim().is_empty()
    {
        options.log_level = filter;
    }
    options.hub_args = vec![
        "--capi-import".to_owned(),
        "--capi-import-selector=env=prod".to_owned(),
        "--capi-hub-url=${HUB_URL}".to_owned(),
        "--capi-agent-image=localhost:5000/flotilla/flotilla-agent:dev".to_owned(),
        "--capi-resync-interval=5s".to_owned(),
        format!("--capi-agent-values={}", values.display()),
    ];
    let starts = CLUSTERS.iter().map(|name| {
        let mut o = ClusterOptions::named(&format!("flotilla-capi-{name}"));
        o.parent_dir = Some(dir.to_owned());
        o.detached = true;
        Cluster::start(o)
    });
    say(&format!(
        "starting the workload clusters of Clusters {} beside the fleet",
        CLUSTERS.join(", ")
    ));
    let (fleet, workloads) = tokio::join!(
        Fleet::start(binaries.clone(), options),
        flotilla_tests::join_all(starts),
    );
    let fleet = fleet?;
    let mut workloads = workloads.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    // From here on, an error leaves everything running to look at (`down` stops it).
    let result = onboard(&fleet, &workloads, &binaries, dir, &say).await;
    let up = Up {
        hub_kubeconfig: fleet.kubeconfig().to_owned(),
        hub_log: fleet.hub_log().to_owned(),
        cli: fleet.binaries().cli.clone(),
        bin_path: fleet.binaries().search_path(),
        workloads: CLUSTERS
            .iter()
            .zip(&workloads)
            .map(|(name, w)| {
                (
                    (*name).to_owned(),
                    w.kubeconfig().to_owned(),
                    agents_dir(dir).join(name).join("agent.log"),
                )
            })
            .collect(),
    };
    fleet.detach()?;
    for workload in &mut workloads {
        workload.detach_in_place()?;
    }
    result.with_context(|| {
        format!(
            "the Cluster API demo did not come up; it is left running to look at (hub log {}; KUBECONFIG={}); `cargo xtask down` stops it",
            up.hub_log.display(),
            up.hub_kubeconfig.display()
        )
    })?;
    Ok(up)
}

/// Where the agents the harness runs as the kubelet keep their volumes, logs and `pids`.
fn agents_dir(dir: &Path) -> PathBuf {
    dir.join("capi-agents")
}

/// The providers' and the kubelet's parts, then waits for the set's releases.
async fn onboard(
    fleet: &Fleet,
    workloads: &[Cluster],
    binaries: &bins::Binaries,
    dir: &Path,
    say: &impl Fn(&str),
) -> anyhow::Result<()> {
    say("installing the Cluster API CRDs; applying the HelmReleaseSet capi-demo/hello (env=prod)");
    capi::install_crds(fleet.kubeconfig())?;
    fleet.apply(&set_manifests(&fleet.repo.url()))?;
    say("as the providers: the Clusters and their kubeconfig Secrets, control planes initialized");
    let mut manifests = Vec::new();
    for (name, workload) in CLUSTERS.iter().zip(workloads) {
        let labels = serde_json::json!({"env": "prod", "demo": "capi"});
        manifests.push(provider::cluster(NAMESPACE, name, labels, workload)?);
        manifests.push(provider::kubeconfig_secret(
            NAMESPACE,
            name,
            &provider::inline_kubeconfig(workload)?,
        ));
    }
    fleet.apply(&manifests.join("\n---\n"))?;
    for name in CLUSTERS {
        provider::mark_initialized(fleet.kubeconfig(), NAMESPACE, name)?;
    }
    let agents = agents_dir(dir);
    std::fs::create_dir_all(&agents)?;
    let mut pids = String::new();
    for (name, workload) in CLUSTERS.iter().zip(workloads) {
        say(&format!(
            "waiting for the hub to install the agent of Cluster {name} (through its kubeconfig)"
        ));
        let deployments: Api<Deployment> =
            Api::namespaced(workload.client().await?, AGENT_NAMESPACE);
        until(&format!("the agent Deployment of {name}"), || async {
            Ok(deployments.get_opt("flotilla-agent").await?.is_some())
        })
        .await?;
        say(&format!(
            "as the kubelet: running the agent Deployment of {name} as a host process"
        ));
        let mut pod = capi_kubelet::run_deployment_with(
            workload,
            AGENT_NAMESPACE,
            "flotilla-agent",
            &binaries.agent,
            &agents.join(name),
            true,
        )
        .await?;
        if let Some(pid) = pod.process.disown() {
            pids.push_str(&format!("agent-pod-{name} {pid}\n"));
            // Written as it goes: an interrupted `up` leaves nothing `down` cannot find.
            std::fs::write(agents.join("pids"), &pids)?;
        }
    }
    let client = fleet.mgmt.client().await?;
    let mcs: Api<ManagedCluster> = Api::all(client.clone());
    for name in CLUSTERS {
        // The hub's naming rule (`flotilla_hub::onboarding::managed_cluster_name`).
        let mc = format!("{NAMESPACE}.{name}");
        say(&format!("waiting for ManagedCluster {mc} to be joined"));
        until(&format!("ManagedCluster {mc} joined"), || async {
            Ok(mcs.get_opt(&mc).await?.is_some_and(|m| {
                m.status
                    .is_some_and(|s| s.conditions.is_true(flotilla_api::fleet::condition::JOINED))
            }))
        })
        .await?;
    }
    let children: Api<HelmRelease> = Api::namespaced(client, NAMESPACE);
    let selector =
        ListParams::default().labels(&format!("{}={SET}", flotilla_core::set::SET_LABEL));
    until("a child HelmRelease of the set per cluster", || async {
        Ok(children.list(&selector).await?.items.len() == CLUSTERS.len())
    })
    .await?;
    let names: Vec<String> = children
        .list(&selector)
        .await?
        .items
        .into_iter()
        .filter_map(|hr| hr.metadata.name)
        .collect();
    let keys: Vec<(&str, &str)> = names.iter().map(|n| (NAMESPACE, n.as_str())).collect();
    fleet
        .wait_ready(&keys, STEP, |waiting| {
            say(&format!("waiting for {}", waiting.join("; ")))
        })
        .await?;
    Ok(())
}

/// Polls `check` every half second until it is true, for at most [`STEP`].
async fn until<F, Fut>(what: &str, check: F) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + STEP;
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) if Instant::now() > deadline => return Err(e.context(what.to_owned())),
            Err(_) => {}
        }
        anyhow::ensure!(Instant::now() <= deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn print_tour(up: &Up, tools: &Path) -> anyhow::Result<()> {
    let kubectl = tools.join("kubectl");
    let helm = tools.join("helm");
    let show = |title: &str, command: &mut Command| -> anyhow::Result<()> {
        println!("$ {title}");
        let out = command.output()?;
        print!("{}", String::from_utf8_lossy(&out.stdout));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        println!();
        Ok(())
    };
    show(
        "kubectl get clusters.cluster.x-k8s.io -A",
        Command::new(&kubectl)
            .args(["get", "clusters.cluster.x-k8s.io", "-A"])
            .env("KUBECONFIG", &up.hub_kubeconfig),
    )?;
    show(
        "flotilla get clusters",
        Command::new(&up.cli)
            .args(["get", "clusters"])
            .env("KUBECONFIG", &up.hub_kubeconfig),
    )?;
    show(
        &format!("kubectl get helmreleases -n {NAMESPACE}"),
        Command::new(&kubectl)
            .args(["get", "helmreleases", "-n", NAMESPACE])
            .env("KUBECONFIG", &up.hub_kubeconfig),
    )?;
    for (name, kubeconfig, _) in &up.workloads {
        show(
            &format!("helm list -A   # on the workload cluster of Cluster {name}"),
            Command::new(&helm)
                .args(["list", "-A"])
                .env("KUBECONFIG", kubeconfig),
        )?;
    }
    let (a_name, a_kubeconfig, _) = &up.workloads[0];
    println!("What to try next (the tools are in {}):", tools.display());
    println!("  export PATH={}:{}:$PATH", tools.display(), up.bin_path);
    println!(
        "  export KUBECONFIG={}   # the management cluster (the hub's)",
        up.hub_kubeconfig.display()
    );
    println!("  # where each cluster is in its onboarding (the AgentBootstrap condition):");
    println!(
        "  kubectl get managedclusters -o custom-columns=NAME:.metadata.name,STEP:'.status.conditions[?(@.type==\"AgentBootstrap\")].reason'"
    );
    println!("  # a new value for every cluster of the set, over the agents' sessions:");
    println!(
        "  kubectl -n {NAMESPACE} patch helmreleaseset {SET} --type merge -p '{{\"spec\":{{\"valuesTemplate\":\"message: Changed on {{{{ .ClusterName }}}}\"}}}}'"
    );
    println!(
        "  helm --kubeconfig {} get values hello -n hello",
        a_kubeconfig.display()
    );
    println!("  # pause Cluster {a_name}: its release is held as if suspended");
    println!(
        "  kubectl -n {NAMESPACE} patch clusters.cluster.x-k8s.io {a_name} --type merge -p '{{\"spec\":{{\"paused\":true}}}}'"
    );
    println!("  # delete it: its ManagedCluster goes, its child is dropped without an uninstall");
    println!("  kubectl -n {NAMESPACE} delete clusters.cluster.x-k8s.io {a_name}");
    println!(
        "Logs: {} (hub), {} (the agent of {a_name}; the others beside it)",
        up.hub_log.display(),
        up.workloads[0].2.display()
    );
    println!("Stop everything with: cargo xtask down");
    Ok(())
}
