//! A whole Flotilla fleet on this machine, as `cargo xtask up` brings it up and the end-to-end
//! suite runs it: a management cluster with the hub's CRDs, the hub (`flotilla-hub`, a host
//! process: kwok nodes run no containers) serving agent sessions over mutual TLS, a Helm
//! repository (nginx) and an OCI registry (distribution) holding the example chart, and one
//! workload cluster per agent, each agent (`flotilla-agent join`) registered with a bootstrap
//! token made by the real `flotilla token create`.
//!
//! Everything runs from the programs an operator runs; nothing of the hub or the agent is
//! linked into this crate. Dropping the [`Fleet`] stops every process and removes the
//! directories; [`Fleet::detach`] leaves it running for [`stop_detached`].

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use flotilla_api::{HelmRelease, ManagedCluster};
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition};
use kube::api::Api;

use crate::bins::Binaries;
use crate::cluster::{Cluster, ClusterOptions, free_port, workspace_root};
use crate::process::{Supervised, tail};
use crate::servers::{HelmRepoServer, OciRegistry, RegistryOptions, RepoOptions};
use crate::tools::kubectl_in;

/// The hub's namespace: its CA Secret and the bootstrap tokens.
pub const HUB_NAMESPACE: &str = "flotilla-system";
/// The agents' namespace in each workload cluster.
pub const AGENT_NAMESPACE: &str = "flotilla-system";
/// The example chart of this repository.
pub const EXAMPLE_CHART: &str = "examples/charts/hello";
/// The example HelmReleases (with `${REPO_URL}` and `${OCI_URL}` to fill in).
pub const EXAMPLE_RELEASES: &str = "examples/fleet/hello.yaml";

/// The ManagedClusterBinding of the local fleet: every namespace to every ManagedCluster.
const FLEET_BINDING: &str = r#"apiVersion: fleet.flotilla.dev/v1
kind: ManagedClusterBinding
metadata:
  name: flotilla-fleet-everything
spec:
  namespaceSelector: {}
  clusterSelector: {}
"#;
/// The OCI repository of the example chart in the registry.
const OCI_REPO: &str = "charts";

/// How a [`Fleet`] is started.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// Names the clusters' directories (`<name>-hub`, `<name>-<workload>`).
    pub name: String,
    /// The ManagedCluster names of the workload clusters, one agent each.
    pub workloads: Vec<String>,
    /// Where the fleet's directories go (default: the temp dir).
    pub parent_dir: Option<PathBuf>,
    /// Keep everything running after this program exits (`cargo xtask up`).
    pub detached: bool,
    /// `RUST_LOG` of the hub and the agents.
    pub log_level: String,
    /// The hub's extra flags (`${HUB_URL}` in one is replaced by the session URL).
    pub hub_args: Vec<String>,
    /// The agents' extra flags (after `join` or `run`).
    pub agent_args: Vec<String>,
    /// Print what is being done, for people watching (`cargo xtask up`).
    pub verbose: bool,
}

impl FleetOptions {
    /// A hub and two workload clusters, `workload-a` and `workload-b`.
    pub fn named(name: &str) -> FleetOptions {
        FleetOptions {
            name: name.to_owned(),
            workloads: vec!["workload-a".to_owned(), "workload-b".to_owned()],
            parent_dir: None,
            detached: false,
            log_level: "info".to_owned(),
            hub_args: Vec::new(),
            agent_args: Vec::new(),
            verbose: false,
        }
    }
}

/// One workload cluster and its agent.
#[derive(Debug)]
pub struct Workload {
    /// The ManagedCluster name.
    pub name: String,
    pub cluster: Cluster,
    agent: Option<Supervised>,
    log: PathBuf,
    chart_cache: PathBuf,
}

impl Workload {
    /// The agent's log file (its latest run).
    pub fn agent_log(&self) -> &Path {
        &self.log
    }

    /// The agent's pid while it runs.
    pub fn agent_pid(&self) -> Option<u32> {
        self.agent.as_ref().and_then(Supervised::pid)
    }
}

/// A running fleet; stopped and removed when dropped.
#[derive(Debug)]
pub struct Fleet {
    options: FleetOptions,
    binaries: Binaries,
    dir: PathBuf,
    keep_dir: bool,
    pub mgmt: Cluster,
    pub workloads: Vec<Workload>,
    pub repo: HelmRepoServer,
    pub registry: OciRegistry,
    hub: Option<Supervised>,
    hub_log: PathBuf,
    grpc_port: u16,
    metrics_port: u16,
    ca_pin: String,
}

impl Fleet {
    /// Starts the clusters, the chart sources, the hub and the agents, and returns once every
    /// agent's ManagedCluster is joined and available. The example chart is published to the
    /// repository and pushed to the registry; no HelmRelease is created
    /// ([`Fleet::apply_examples`] does).
    pub async fn start(binaries: Binaries, options: FleetOptions) -> anyhow::Result<Fleet> {
        let started = Instant::now();
        let dir = match &options.parent_dir {
            Some(parent) => {
                let dir = parent.join(format!("{}-fleet", options.name));
                std::fs::create_dir_all(&dir)?;
                dir
            }
            None => tempfile::Builder::new()
                .prefix(&format!("flotilla-fleet-{}-", options.name))
                .tempdir()?
                .keep(),
        };
        let verbose = options.verbose;
        let say = move |what: &str| {
            if verbose {
                eprintln!("[{:>5.1}s] {what}", started.elapsed().as_secs_f64());
            }
        };
        say(&format!(
            "starting {} clusters (the hub's and {}), the Helm repository and the OCI registry",
            options.workloads.len() + 1,
            options.workloads.join(", ")
        ));
        let cluster_options = |suffix: &str| {
            let mut o = ClusterOptions::named(&format!("{}-{suffix}", options.name));
            o.parent_dir = options.parent_dir.clone();
            o.detached = options.detached;
            o
        };
        let starts = std::iter::once(cluster_options("hub"))
            .chain(options.workloads.iter().map(|w| cluster_options(w)))
            .map(Cluster::start);
        let mut repo_options = RepoOptions::named(&options.name);
        repo_options.detached = options.detached;
        repo_options.parent_dir = options.parent_dir.clone();
        let registry_options = RegistryOptions {
            detached: options.detached,
            parent_dir: options.parent_dir.clone(),
            ..RegistryOptions::default()
        };
        let (clusters, repo, registry) = tokio::join!(
            futures::future::join_all(starts),
            HelmRepoServer::start(repo_options),
            OciRegistry::start(registry_options),
        );
        let mut clusters = clusters.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        let (repo, registry) = (repo?, registry?);
        let mgmt = clusters.remove(0);
        say("clusters up; publishing the example chart");
        let chart = workspace_root().join(EXAMPLE_CHART);
        repo.publish(&chart)?;
        registry.push(&chart, OCI_REPO)?;

        say("installing the CRDs on the hub's cluster");
        kubectl_in(
            mgmt.kubeconfig(),
            &[
                "apply",
                "--server-side",
                "--field-manager=flotilla-fleet",
                "-f",
                &path_str(&workspace_root().join("deploy/crds"))?,
            ],
            None,
        )?;
        create_namespace(mgmt.kubeconfig(), HUB_NAMESPACE)?;
        crate::tools::wait_established(
            mgmt.kubeconfig(),
            &["crd", "--all"],
            std::time::Duration::from_secs(60),
        )?;
        // Tenancy: the local fleet lets every namespace deliver to every workload cluster
        // (the tests and benches use namespaces of their own; the example releases come with
        // a binding of their own as well).
        kubectl_in(
            mgmt.kubeconfig(),
            &["apply", "-f", "-"],
            Some(FLEET_BINDING),
        )?;

        let workloads = options
            .workloads
            .iter()
            .zip(clusters)
            .map(|(name, cluster)| Workload {
                log: dir.join(format!("agent-{name}.log")),
                chart_cache: dir.join(format!("agent-{name}-charts")),
                name: name.clone(),
                cluster,
                agent: None,
            })
            .collect();
        let mut fleet = Fleet {
            binaries,
            hub_log: dir.join("hub.log"),
            dir,
            keep_dir: false,
            mgmt,
            workloads,
            repo,
            registry,
            hub: None,
            grpc_port: free_port()?,
            metrics_port: free_port()?,
            ca_pin: String::new(),
            options,
        };
        say("starting the hub");
        fleet.start_hub().await?;
        say("creating a bootstrap token (flotilla token create)");
        let join = fleet.flotilla(&[
            "token",
            "create",
            "--hub-url",
            &fleet.hub_url(),
            "--uses",
            &fleet.workloads.len().to_string(),
            "--auto-accept",
            // One token for every workload of the fleet: the documented use of any-cluster.
            "--any-cluster",
            "--ttl",
            "1h",
        ])?;
        let (token, pin) = parse_join_command(&join)?;
        fleet.ca_pin = pin;
        for i in 0..fleet.workloads.len() {
            say(&format!(
                "joining the agent of {} (flotilla-agent join)",
                fleet.workloads[i].name
            ));
            create_namespace(fleet.workloads[i].cluster.kubeconfig(), AGENT_NAMESPACE)?;
            fleet.start_agent(i, Some(&token))?;
        }
        for i in 0..fleet.workloads.len() {
            fleet.wait_joined(i).await?;
        }
        say("every agent joined");
        Ok(fleet)
    }

    /// The directory of the fleet's logs and state.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The hub's cluster's kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        self.mgmt.kubeconfig()
    }

    /// The message scan ([`crate::messages::scan`]) of the hub's cluster and of every
    /// workload cluster (the agents' Events): fails on a message with a `Debug` shape.
    pub async fn scan_messages(&self) -> anyhow::Result<()> {
        crate::messages::scan(&self.mgmt.client().await?).await?;
        for w in &self.workloads {
            crate::messages::scan(&w.cluster.client().await?)
                .await
                .map_err(|e| anyhow::anyhow!("workload cluster {}: {e}", w.name))?;
        }
        Ok(())
    }

    /// The programs the fleet runs.
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// `https://127.0.0.1:PORT`: the hub's session server.
    pub fn hub_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.grpc_port)
    }

    /// `127.0.0.1:PORT`: the hub's /metrics, /healthz and /readyz.
    pub fn hub_metrics_addr(&self) -> String {
        format!("127.0.0.1:{}", self.metrics_port)
    }

    /// The hub's `/metrics` text.
    pub fn hub_metrics(&self) -> anyhow::Result<String> {
        crate::http::get(&self.hub_metrics_addr(), "/metrics")
    }

    /// The value of `series` (name and labels exactly as exported) in the hub's metrics.
    pub fn hub_metric(&self, series: &str) -> anyhow::Result<Option<f64>> {
        Ok(crate::http::sample(&self.hub_metrics()?, series))
    }

    /// The hub's CA pin (`sha256:<hex>`).
    pub fn ca_pin(&self) -> &str {
        &self.ca_pin
    }

    /// The hub's log file.
    pub fn hub_log(&self) -> &Path {
        &self.hub_log
    }

    /// The hub's pid while it runs.
    pub fn hub_pid(&self) -> Option<u32> {
        self.hub.as_ref().and_then(Supervised::pid)
    }

    /// The workload named `name`.
    pub fn workload(&self, name: &str) -> anyhow::Result<&Workload> {
        self.workloads
            .iter()
            .find(|w| w.name == name)
            .with_context(|| format!("no workload cluster {name:?}"))
    }

    /// The example chart's `oci://` URL (the repository, without a tag).
    pub fn oci_chart_url(&self) -> String {
        format!("{}/hello", self.registry.oci_url(OCI_REPO))
    }

    /// Starts the hub (again, after [`Fleet::stop_hub`]) and waits until its session server
    /// accepts connections and its CA Secret exists. The hub's log is appended to.
    pub async fn start_hub(&mut self) -> anyhow::Result<()> {
        let mut args = vec![
            "--kubeconfig".to_owned(),
            path_str(self.mgmt.kubeconfig())?,
            "--artifact-dir".to_owned(),
            path_str(&self.dir.join("hub-artifacts"))?,
            "--metrics-addr".to_owned(),
            self.hub_metrics_addr(),
            "--grpc-addr".to_owned(),
            format!("127.0.0.1:{}", self.grpc_port),
            "--grpc-san".to_owned(),
            "127.0.0.1".to_owned(),
            "--grpc-san".to_owned(),
            "localhost".to_owned(),
        ];
        // `${HUB_URL}` in a flag is the session URL (its port is picked at start).
        let url = self.hub_url();
        args.extend(
            self.options
                .hub_args
                .iter()
                .map(|a| a.replace("${HUB_URL}", &url)),
        );
        let mut hub = Supervised::start_with_env(
            "flotilla-hub",
            &self.binaries.hub,
            &args,
            &[("RUST_LOG", self.options.log_level.as_str())],
            &self.hub_log,
            self.options.detached,
        )?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.grpc_port));
        loop {
            hub.check_running()?;
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "the hub did not serve sessions on {addr} within 60 s; the end of {}:\n{}",
                    self.hub_log.display(),
                    tail(&self.hub_log, 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.hub = Some(hub);
        Ok(())
    }

    /// The hub's extra flags, to change between [`Fleet::stop_hub`] and [`Fleet::start_hub`].
    pub fn hub_args_mut(&mut self) -> &mut Vec<String> {
        &mut self.options.hub_args
    }

    /// Stops the hub (SIGTERM, then SIGKILL after 10 s).
    pub fn stop_hub(&mut self) {
        if let Some(mut hub) = self.hub.take() {
            hub.stop(Duration::from_secs(10));
        }
    }

    /// Starts workload `i`'s agent: `join` with `token`, else `run` (the identity is in its
    /// cluster). Its log is appended to.
    fn start_agent(&mut self, i: usize, token: Option<&str>) -> anyhow::Result<()> {
        let workload = &self.workloads[i];
        let mut args: Vec<String> = match token {
            Some(_) => vec![
                "join".to_owned(),
                "--hub".to_owned(),
                self.hub_url(),
                "--ca-hash".to_owned(),
                self.ca_pin.clone(),
                "--cluster-name".to_owned(),
                workload.name.clone(),
            ],
            None => vec!["run".to_owned()],
        };
        args.extend([
            "--namespace".to_owned(),
            AGENT_NAMESPACE.to_owned(),
            "--kubeconfig".to_owned(),
            path_str(workload.cluster.kubeconfig())?,
            "--chart-cache".to_owned(),
            path_str(&workload.chart_cache)?,
        ]);
        args.extend(self.options.agent_args.iter().cloned());
        let mut env = vec![("RUST_LOG", self.options.log_level.as_str())];
        if let Some(token) = token {
            // In the environment, not on the command line `ps` shows.
            env.push(("FLOTILLA_BOOTSTRAP_TOKEN", token));
        }
        let agent = Supervised::start_with_env(
            &format!("flotilla-agent-{}", workload.name),
            &self.binaries.agent,
            &args,
            &env,
            &workload.log,
            self.options.detached,
        )?;
        self.workloads[i].agent = Some(agent);
        Ok(())
    }

    fn index(&self, name: &str) -> anyhow::Result<usize> {
        self.workloads
            .iter()
            .position(|w| w.name == name)
            .with_context(|| format!("no workload cluster {name:?}"))
    }

    /// Kills workload `name`'s agent with SIGKILL.
    pub fn kill_agent(&mut self, name: &str) -> anyhow::Result<()> {
        let i = self.index(name)?;
        if let Some(agent) = self.workloads[i].agent.take()
            && let Some(pid) = agent.release()
        {
            crate::process::kill(pid);
            let deadline = Instant::now() + Duration::from_secs(10);
            while crate::process::alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Stops workload `name`'s agent with SIGTERM (up to 30 s to finish what it does).
    pub fn stop_agent(&mut self, name: &str) -> anyhow::Result<()> {
        let i = self.index(name)?;
        if let Some(mut agent) = self.workloads[i].agent.take() {
            agent.stop(Duration::from_secs(30));
        }
        Ok(())
    }

    /// Starts workload `name`'s agent again with `flotilla-agent run` and waits until its
    /// session is up.
    pub async fn restart_agent(&mut self, name: &str) -> anyhow::Result<()> {
        let i = self.index(name)?;
        self.start_agent(i, None)?;
        self.wait_joined(i).await
    }

    /// Starts workload `name`'s agent again with `flotilla-agent join` and `token` (a new
    /// bootstrap token) and waits until its session is up.
    pub async fn rejoin_agent(&mut self, name: &str, token: &str) -> anyhow::Result<()> {
        let i = self.index(name)?;
        self.start_agent(i, Some(token))?;
        self.wait_joined(i).await
    }

    /// Starts workload `name`'s agent again with `flotilla-agent run`, not waiting for a
    /// session.
    pub fn start_agent_run(&mut self, name: &str) -> anyhow::Result<()> {
        let i = self.index(name)?;
        self.start_agent(i, None)
    }

    /// Waits until workload `i`'s ManagedCluster is joined and its agent connected.
    async fn wait_joined(&mut self, i: usize) -> anyhow::Result<()> {
        let api: Api<ManagedCluster> = Api::all(self.mgmt.client().await?);
        let name = self.workloads[i].name.clone();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(agent) = self.workloads[i].agent.as_mut() {
                agent.check_running()?;
            }
            if let Ok(Some(mc)) = api.get_opt(&name).await {
                let status = mc.status.unwrap_or_default();
                if status
                    .conditions
                    .is_true(flotilla_api::fleet::condition::JOINED)
                    && status
                        .conditions
                        .is_true(flotilla_api::fleet::condition::AVAILABLE)
                {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "ManagedCluster {name} was not joined and available within 120 s; the end of {}:\n{}\nthe end of {}:\n{}",
                    self.workloads[i].log.display(),
                    tail(&self.workloads[i].log, 20),
                    self.hub_log.display(),
                    tail(&self.hub_log, 20),
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Runs the real `flotilla` CLI against the hub's cluster; its stdout, or an error with
    /// its output.
    pub fn flotilla(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.flotilla_output(args)?;
        if !out.status.success() {
            bail!(
                "flotilla {} failed ({}):\n{}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs the real `flotilla` CLI against the hub's cluster.
    pub fn flotilla_output(&self, args: &[&str]) -> anyhow::Result<Output> {
        Command::new(&self.binaries.cli)
            .args(args)
            .env("KUBECONFIG", self.mgmt.kubeconfig())
            .output()
            .with_context(|| format!("running {}", self.binaries.cli.display()))
    }

    /// The example HelmReleases (`examples/fleet/hello.yaml`) with this fleet's sources.
    pub fn example_releases(&self) -> anyhow::Result<String> {
        let path = workspace_root().join(EXAMPLE_RELEASES);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(text
            .replace("${REPO_URL}", &self.repo.url())
            .replace("${OCI_URL}", &self.oci_chart_url()))
    }

    /// Applies `manifests` to the hub's cluster (server-side).
    pub fn apply(&self, manifests: &str) -> anyhow::Result<()> {
        kubectl_in(
            self.mgmt.kubeconfig(),
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=flotilla-fleet",
                "-f",
                "-",
            ],
            Some(manifests),
        )?;
        Ok(())
    }

    /// Waits until each HelmRelease `namespace/name` is Ready=True for its generation;
    /// calls `progress` with the names not Ready yet whenever that set changes.
    pub async fn wait_ready(
        &self,
        releases: &[(&str, &str)],
        timeout: Duration,
        mut progress: impl FnMut(&[String]),
    ) -> anyhow::Result<Vec<HelmRelease>> {
        let client = self.mgmt.client().await?;
        let deadline = Instant::now() + timeout;
        let mut last: Option<Vec<String>> = None;
        loop {
            let mut waiting = Vec::new();
            let mut ready = Vec::new();
            for (namespace, name) in releases {
                let api: Api<HelmRelease> = Api::namespaced(client.clone(), namespace);
                match api.get_opt(name).await {
                    Ok(Some(hr)) if is_ready(&hr) => ready.push(hr),
                    Ok(Some(hr)) => waiting.push(format!(
                        "{namespace}/{name}: {}",
                        ready_message(&hr).unwrap_or_else(|| "no Ready condition yet".to_owned())
                    )),
                    Ok(None) => waiting.push(format!("{namespace}/{name}: not found")),
                    Err(e) => waiting.push(format!("{namespace}/{name}: {e}")),
                }
            }
            if waiting.is_empty() {
                return Ok(ready);
            }
            if last.as_ref() != Some(&waiting) {
                progress(&waiting);
                last = Some(waiting.clone());
            }
            if Instant::now() > deadline {
                bail!(
                    "not Ready within {timeout:?}:\n  {}\nthe end of {}:\n{}",
                    waiting.join("\n  "),
                    self.hub_log.display(),
                    tail(&self.hub_log, 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Leaves everything running (`cargo xtask up`): writes the pids of the hub, the agents
    /// and the servers into the fleet's directory, detaches the clusters, and returns the
    /// fleet's directory. [`stop_detached`] stops it.
    pub fn detach(mut self) -> anyhow::Result<PathBuf> {
        let mut pids = String::new();
        // `stop_detached` stops them last first: the agents, the hub, then the servers.
        let mut add = |name: &str, pid: Option<u32>| {
            if let Some(pid) = pid {
                pids.push_str(&format!("{name} {pid}\n"));
            }
        };
        let (repo_dir, pid) = self.repo.detach();
        add("nginx", pid);
        let (registry_dir, pid) = self.registry.detach();
        add("registry", pid);
        add(
            "flotilla-hub",
            self.hub.as_mut().and_then(Supervised::disown),
        );
        for workload in &mut self.workloads {
            let name = format!("flotilla-agent-{}", workload.name);
            add(&name, workload.agent.as_mut().and_then(Supervised::disown));
        }
        std::fs::write(self.dir.join("pids"), pids)?;
        std::fs::write(
            self.dir.join("server-dirs"),
            format!("{}\n{}\n", repo_dir.display(), registry_dir.display()),
        )?;
        self.mgmt.detach_in_place()?;
        for workload in &mut self.workloads {
            workload.cluster.detach_in_place()?;
        }
        self.keep_dir = true;
        Ok(self.dir.clone())
    }
}

/// Stops a fleet left running by [`Fleet::detach`] (its processes, then its servers'
/// directories); the clusters' directories are stopped with [`crate::cluster::stop_detached`].
pub fn stop_detached(dir: &Path) -> anyhow::Result<()> {
    let server_dirs = std::fs::read_to_string(dir.join("server-dirs")).unwrap_or_default();
    crate::cluster::stop_detached(dir)?;
    for line in server_dirs.lines().filter(|l| !l.is_empty()) {
        let _ = std::fs::remove_dir_all(line);
    }
    Ok(())
}

fn is_ready(hr: &HelmRelease) -> bool {
    hr.status.as_ref().is_some_and(|s| {
        s.observed_generation == hr.metadata.generation.unwrap_or_default()
            && s.conditions.is_true(condition::READY)
    })
}

fn ready_message(hr: &HelmRelease) -> Option<String> {
    let c = hr
        .status
        .as_ref()?
        .conditions
        .get_condition(condition::READY)?;
    Some(match c.status {
        ConditionStatus::True => format!("Ready ({})", c.message),
        _ => format!("{}: {}", c.reason, c.message),
    })
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for workload in &mut self.workloads {
            if let Some(mut agent) = workload.agent.take() {
                agent.stop(Duration::from_secs(5));
            }
        }
        self.stop_hub();
        // FLOTILLA_KEEP_LOGS keeps the logs of a failed test to read.
        if !self.keep_dir && std::env::var_os("FLOTILLA_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `kubectl get -o jsonpath=TEMPLATE` (e.g. `{.spec.replicas}`) of the example's Deployment,
/// `hello/hello`, in the cluster of `kubeconfig`.
pub fn hello_deployment(kubeconfig: &Path, template: &str) -> anyhow::Result<String> {
    kubectl_in(
        kubeconfig,
        &[
            "get",
            "deployment",
            "hello",
            "-n",
            "hello",
            "-o",
            &format!("jsonpath={template}"),
        ],
        None,
    )
}

/// The token and the CA pin of the join command `flotilla token create` prints
/// (`FLOTILLA_BOOTSTRAP_TOKEN=<token> flotilla-agent join ... --ca-hash <pin> ...`).
pub fn parse_join_command(printed: &str) -> anyhow::Result<(String, String)> {
    let words: Vec<&str> = printed.split_whitespace().collect();
    let pin = words
        .iter()
        .position(|w| *w == "--ca-hash")
        .and_then(|i| words.get(i + 1))
        .map(|w| (*w).to_owned())
        .context("`flotilla token create` printed no --ca-hash")?;
    let token = words
        .iter()
        .find_map(|w| w.strip_prefix("FLOTILLA_BOOTSTRAP_TOKEN="))
        .map(str::to_owned)
        .context("`flotilla token create` printed no FLOTILLA_BOOTSTRAP_TOKEN=")?;
    Ok((token, pin))
}

fn create_namespace(kubeconfig: &Path, name: &str) -> anyhow::Result<()> {
    let manifest = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n");
    kubectl_in(
        kubeconfig,
        &[
            "apply",
            "--server-side",
            "--field-manager=flotilla-fleet",
            "-f",
            "-",
        ],
        Some(&manifest),
    )?;
    Ok(())
}

fn path_str(path: &Path) -> anyhow::Result<String> {
    path.to_str()
        .map(str::to_owned)
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

#[cfg(test)]
mod tests {
    use super::parse_join_command;

    #[test]
    fn the_token_and_pin_are_read_from_the_printed_join_command() {
        let printed = "FLOTILLA_BOOTSTRAP_TOKEN=abcdef.0123456789abcdef flotilla-agent join --hub https://127.0.0.1:1 --ca-hash sha256:00 --cluster-name a";
        assert_eq!(
            parse_join_command(printed).unwrap(),
            ("abcdef.0123456789abcdef".into(), "sha256:00".into())
        );
        assert!(parse_join_command("flotilla-agent join --hub x").is_err());
    }
}
