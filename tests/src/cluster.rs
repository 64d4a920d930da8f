//! One local Kubernetes cluster made of real upstream parts, on loopback.
//!
//! [`Cluster::start`] runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
//! kwok with their own data directory, ports and certificates, registers fake nodes that kwok
//! keeps Ready, and returns once the cluster serves: `/readyz` is ok, every node is Ready and
//! untainted, and the `default` ServiceAccount exists (so pods can be created). Dropping the
//! [`Cluster`] stops every process and removes the directory.
//!
//! Pods move through the lifecycle written in `tests/kwok/stages.yaml`: workload pods become
//! Ready, Job pods and Helm hook pods succeed, `flotilla.dev/test-outcome: fail` makes them
//! fail, `flotilla.dev/never-ready: "true"` keeps a pod from ever becoming Ready.
//!
//! Pod logs: the fake nodes' kubelet is kwok's server on a loopback port (node address
//! 127.0.0.1, `daemonEndpoints.kubeletEndpoint.Port`), so `GET pods/{name}/log` goes the real
//! way, kube-apiserver to the node. kwok runs no containers: what a container printed is
//! what [`Cluster::serve_pod_log`] gave it (a kwok `Logs` object naming the pod and a file of
//! CRI log lines); a pod without one has no log, and the API server answers the request with
//! kwok's error, as it would for a node that cannot serve it.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::pki::Pki;
use crate::process::{Supervised, tail};

/// The kwok stages: how fake nodes and pods move through their lifecycle.
const KWOK_STAGES: &str = include_str!("../kwok/stages.yaml");

/// kwok's `Logs` kind (namespaced, named after the pod it serves the log of); written for the
/// harness with only the fields kwok reads.
const KWOK_LOGS_CRD: &str = include_str!("../kwok/logs-crd.json");

/// Annotation by which kwok recognises the nodes it manages.
const KWOK_NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// How a cluster is started.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Name used in the kubeconfig (cluster, user and context) and in the directory name.
    pub name: String,
    /// Number of fake nodes.
    pub nodes: usize,
    /// Directory under which the cluster's own directory is made (default: the temp dir).
    pub parent_dir: Option<PathBuf>,
    /// Keep the processes running after this program exits (`cargo xtask cluster up`).
    pub detached: bool,
    /// How long to wait for the cluster to serve.
    pub timeout: Duration,
    /// Write kube-apiserver's audit log (every request at level `Metadata`, JSON lines) to
    /// [`Cluster::audit_log`].
    pub audit_log: bool,
    /// Only etcd and kube-apiserver: no controller manager, scheduler, kwok nor nodes, so
    /// nothing runs pods, finalizes namespaces or collects garbage, and no `default`
    /// ServiceAccount is made. About half the CPU of a whole cluster, for tests that only
    /// need an API server (an agent whose releases do not wait for pods).
    pub api_server_only: bool,
}

impl ClusterOptions {
    pub fn named(name: &str) -> ClusterOptions {
        ClusterOptions {
            name: name.to_owned(),
            nodes: 1,
            parent_dir: None,
            detached: false,
            timeout: Duration::from_secs(120),
            audit_log: false,
            api_server_only: false,
        }
    }
}

/// A running local cluster; stopped and removed when dropped.
#[derive(Debug)]
pub struct Cluster {
    name: String,
    dir: PathBuf,
    kubeconfig: PathBuf,
    server: String,
    /// In start order; stopped in reverse.
    processes: Vec<Supervised>,
    keep_dir: bool,
    started_in: Duration,
}

/// Where the upstream binaries are: `$FLOTILLA_UPSTREAM_BIN`, or what `tools/build-upstream`
/// prints (it builds them on first use and caches them).
pub fn upstream_bin_dir() -> anyhow::Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    crate::tools::script_output(&DIR, "FLOTILLA_UPSTREAM_BIN", "tools/build-upstream")
}

/// The Kubernetes version the local clusters run (`v1.35.4`): the `k8s.io/kubernetes` version
/// pinned in `tests/upstream/kubernetes/go.mod`, which `tools/build-upstream` stamps into the
/// binaries, so `/version`, `kubectl version` and `.Capabilities.KubeVersion` report it.
pub fn pinned_kubernetes_version() -> anyhow::Result<String> {
    let go_mod = workspace_root().join("tests/upstream/kubernetes/go.mod");
    let text = std::fs::read_to_string(&go_mod)
        .with_context(|| format!("reading {}", go_mod.display()))?;
    kubernetes_version_in_go_mod(&text)
        .map(str::to_owned)
        .with_context(|| format!("{}: no requirement of k8s.io/kubernetes", go_mod.display()))
}

/// The version of the `k8s.io/kubernetes` requirement in a go.mod's text, whether it is a
/// `require` line of its own or a line of a `require ( ... )` block.
fn kubernetes_version_in_go_mod(text: &str) -> Option<&str> {
    text.lines().find_map(|line| {
        let line = line.trim();
        let line = line.strip_prefix("require ").unwrap_or(line).trim_start();
        let version = line
            .strip_prefix("k8s.io/kubernetes ")?
            .split_whitespace()
            .next()?;
        version.starts_with('v').then_some(version)
    })
}

/// The repository root (this crate lives in `tests/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives one level below the workspace root")
        .to_owned()
}

impl Cluster {
    /// Starts a cluster and waits until it serves.
    pub async fn start(options: ClusterOptions) -> anyhow::Result<Cluster> {
        match Cluster::start_once(&options).await {
            // An upstream process that crashed while the cluster booted (seen: kwok v0.8.0
            // panicking in its CEL set-up, once in some hundred starts on a loaded machine)
            // is a start-up flake of that binary, not of the code under test: one more try,
            // in a new directory, on new ports. A timeout or an API error is not retried.
            Err(e) if !options.detached && format!("{e:#}").contains(" exited (") => {
                eprintln!("flotilla-tests: {e:#}\nflotilla-tests: starting the cluster once more");
                Cluster::start_once(&options).await
            }
            other => other,
        }
    }

    async fn start_once(options: &ClusterOptions) -> anyhow::Result<Cluster> {
        let options = options.clone();
        let started = Instant::now();
        let bin = upstream_bin_dir()?;
        let parent = options
            .parent_dir
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&parent)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("flotilla-{}-", options.name))
            .tempdir_in(&parent)?
            .keep();
        let mut cluster = Cluster {
            name: options.name.clone(),
            kubeconfig: dir.join("kubeconfig"),
            dir,
            server: String::new(),
            processes: Vec::new(),
            keep_dir: options.detached || std::env::var_os("FLOTILLA_KEEP_CLUSTERS").is_some(),
            started_in: Duration::ZERO,
        };
        let deadline = Instant::now() + options.timeout;
        cluster
            .boot(&bin, &options, deadline)
            .await
            .with_context(|| {
                format!(
                    "starting local cluster {:?} (logs in {})",
                    options.name,
                    cluster.dir.join("logs").display()
                )
            })?;
        cluster.started_in = started.elapsed();
        Ok(cluster)
    }

    /// Starts `count` clusters side by side, named `{prefix}-0`, `{prefix}-1`, ...
    pub async fn start_many(prefix: &str, count: usize) -> anyhow::Result<Vec<Cluster>> {
        let starts =
            (0..count).map(|i| Cluster::start(ClusterOptions::named(&format!("{prefix}-{i}"))));
        futures::future::join_all(starts)
            .await
            .into_iter()
            .collect()
    }

    async fn boot(
        &mut self,
        bin: &Path,
        options: &ClusterOptions,
        deadline: Instant,
    ) -> anyhow::Result<()> {
        let dir = self.dir.clone();
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let pki = Pki::write(&dir.join("pki"))?;
        let etcd_client = free_port()?;
        let etcd_peer = free_port()?;
        let apiserver = free_port()?;
        let controller_manager = free_port()?;
        let scheduler = free_port()?;
        let kwok_server = free_port()?;
        self.server = format!("https://127.0.0.1:{apiserver}");
        std::fs::write(&self.kubeconfig, self.kubeconfig_yaml(&pki))?;
        let kubeconfig = path_str(&self.kubeconfig)?.to_owned();
        let detached = options.detached;

        let etcd_url = format!("http://127.0.0.1:{etcd_client}");
        let peer_url = format!("http://127.0.0.1:{etcd_peer}");
        self.spawn(
            bin,
            "etcd",
            vec![
                "--name=flotilla".into(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=flotilla={peer_url}"),
                "--unsafe-no-fsync=true".into(),
                "--quota-backend-bytes=1073741824".into(),
                "--log-level=warn".into(),
            ],
            detached,
        )?;
        self.wait_for("etcd to listen", deadline, |_| async move {
            Ok(TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], etcd_client))).is_ok())
        })
        .await?;

        let mut audit = Vec::new();
        if options.audit_log {
            let policy = dir.join("audit-policy.yaml");
            std::fs::write(
                &policy,
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n",
            )?;
            audit = vec![
                format!("--audit-policy-file={}", policy.display()),
                format!("--audit-log-path={}", self.audit_log().display()),
                "--audit-log-format=json".into(),
                "--audit-log-mode=blocking".into(),
            ];
        }
        self.spawn(
            bin,
            "kube-apiserver",
            audit.into_iter().chain([
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={apiserver}"),
                format!("--cert-dir={}", dir.join("apiserver").display()),
                format!("--tls-cert-file={}", pki.serving_cert.display()),
                format!("--tls-private-key-file={}", pki.serving_key.display()),
                format!("--client-ca-file={}", pki.ca_cert.display()),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                // The issuer (the default), and the server's own address: the audience of
                // the hub's workload identity tokens for a target (its address).
                format!(
                    "--api-audiences=https://kubernetes.default.svc.cluster.local,https://127.0.0.1:{apiserver}"
                ),
                format!("--service-account-key-file={}", pki.sa_pub.display()),
                format!(
                    "--service-account-signing-key-file={}",
                    pki.sa_key.display()
                ),
                "--service-cluster-ip-range=10.0.0.0/16".into(),
                "--authorization-mode=RBAC".into(),
                "--allow-privileged=true".into(),
                "--enable-priority-and-fairness=false".into(),
                "--profiling=false".into(),
                "--event-ttl=1h".into(),
                // The fake nodes' only address that leads to their kubelet (kwok's server).
                "--kubelet-preferred-address-types=InternalIP".into(),
                "--v=0".into(),
            ]).collect(),
            detached,
        )?;
        let client = self.client().await?;
        self.wait_for("kube-apiserver to be ready", deadline, |_| {
            let client = client.clone();
            async move {
                let request = http::Request::get("/readyz").body(Vec::new())?;
                Ok(client
                    .request_text(request)
                    .await
                    .is_ok_and(|body| body.trim() == "ok"))
            }
        })
        .await?;
        if options.api_server_only {
            return Ok(());
        }

        let ca_cert = pki.ca_cert.display().to_string();
        let ca_key = pki.ca_key.display().to_string();
        self.spawn(
            bin,
            "kube-controller-manager",
            vec![
                format!("--kubeconfig={kubeconfig}"),
                format!("--authentication-kubeconfig={kubeconfig}"),
                format!("--authorization-kubeconfig={kubeconfig}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={controller_manager}"),
                format!("--cert-dir={}", dir.join("controller-manager").display()),
                "--leader-elect=false".into(),
                format!("--root-ca-file={ca_cert}"),
                format!(
                    "--service-account-private-key-file={}",
                    pki.sa_key.display()
                ),
                format!("--cluster-signing-cert-file={ca_cert}"),
                format!("--cluster-signing-key-file={ca_key}"),
                "--use-service-account-credentials=false".into(),
                "--kube-api-qps=200".into(),
                "--kube-api-burst=400".into(),
                "--profiling=false".into(),
                "--v=0".into(),
            ],
            detached,
        )?;
        self.spawn(
            bin,
            "kube-scheduler",
            vec![
                format!("--kubeconfig={kubeconfig}"),
                format!("--authentication-kubeconfig={kubeconfig}"),
                format!("--authorization-kubeconfig={kubeconfig}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={scheduler}"),
                format!("--cert-dir={}", dir.join("scheduler").display()),
                "--leader-elect=false".into(),
                "--kube-api-qps=200".into(),
                "--kube-api-burst=400".into(),
                "--profiling=false".into(),
                "--v=0".into(),
            ],
            detached,
        )?;
        let crds: Api<kube::api::DynamicObject> = Api::all_with(
            client.clone(),
            &kube::api::ApiResource {
                group: "apiextensions.k8s.io".into(),
                version: "v1".into(),
                api_version: "apiextensions.k8s.io/v1".into(),
                kind: "CustomResourceDefinition".into(),
                plural: "customresourcedefinitions".into(),
            },
        );
        let logs_crd: kube::api::DynamicObject = serde_json::from_str(KWOK_LOGS_CRD)?;
        crds.create(&PostParams::default(), &logs_crd).await?;
        self.wait_for("kwok's Logs CRD to be established", deadline, |_| {
            let crds = crds.clone();
            async move {
                let crd = crds.get("logs.kwok.x-k8s.io").await?;
                Ok(crd.data["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Established" && c["status"] == "True")
                    }))
            }
        })
        .await?;
        let stages = dir.join("kwok-stages.yaml");
        std::fs::write(&stages, KWOK_STAGES)?;
        self.spawn(
            bin,
            "kwok",
            vec![
                format!("--kubeconfig={kubeconfig}"),
                format!("--config={}", stages.display()),
                "--manage-all-nodes=false".into(),
                format!(
                    "--manage-nodes-with-annotation-selector={}={}",
                    KWOK_NODE_ANNOTATION.0, KWOK_NODE_ANNOTATION.1
                ),
                // The address and port the API server reaches the "kubelet" (this server) on.
                "--node-ip=127.0.0.1".into(),
                format!("--node-port={kwok_server}"),
                "--enable-crds=Logs".into(),
                "--cidr=10.244.0.0/16".into(),
                "--node-lease-duration-seconds=40".into(),
                format!("--server-address=127.0.0.1:{kwok_server}"),
            ],
            detached,
        )?;

        let nodes: Api<Node> = Api::all(client.clone());
        for i in 0..options.nodes {
            let node: Node = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": format!("kwok-node-{i}"),
                    "annotations": { KWOK_NODE_ANNOTATION.0: KWOK_NODE_ANNOTATION.1 },
                    "labels": {
                        "kubernetes.io/hostname": format!("kwok-node-{i}"),
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                    },
                },
            }))?;
            nodes.create(&PostParams::default(), &node).await?;
        }
        self.wait_for("the nodes to be Ready", deadline, |_| {
            let nodes = nodes.clone();
            async move {
                let list = nodes.list(&Default::default()).await?;
                Ok(!list.items.is_empty() && list.items.iter().all(node_is_ready))
            }
        })
        .await?;
        let service_accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        self.wait_for("the default ServiceAccount", deadline, |_| {
            let service_accounts = service_accounts.clone();
            async move { Ok(service_accounts.get_opt("default").await?.is_some()) }
        })
        .await?;
        Ok(())
    }

    fn spawn(
        &mut self,
        bin: &Path,
        name: &str,
        args: Vec<String>,
        detached: bool,
    ) -> anyhow::Result<()> {
        let log = self.dir.join("logs").join(format!("{name}.log"));
        let process = Supervised::start(name, &bin.join(name), &args, &log, detached)?;
        self.processes.push(process);
        Ok(())
    }

    /// Polls `check` until it returns true, failing fast when a process of the cluster died.
    async fn wait_for<F, Fut>(
        &mut self,
        what: &str,
        deadline: Instant,
        check: F,
    ) -> anyhow::Result<()>
    where
        F: Fn(()) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<bool>>,
    {
        let mut last_error = None;
        loop {
            for process in &mut self.processes {
                process.check_running()?;
            }
            match check(()).await {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => last_error = Some(e),
            }
            if Instant::now() > deadline {
                let logs = self
                    .processes
                    .iter()
                    .map(|p| {
                        let log = self.dir.join("logs").join(format!("{}.log", p.name()));
                        format!("--- {} ---\n{}", p.name(), tail(&log, 10))
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                match last_error {
                    Some(e) => bail!("timed out waiting for {what}: last error: {e:#}\n{logs}"),
                    None => bail!("timed out waiting for {what}\n{logs}"),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn kubeconfig_yaml(&self, pki: &Pki) -> String {
        let name = &self.name;
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {name}-admin\n  user:\n    client-certificate: {cert}\n    client-key: {key}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-admin\ncurrent-context: {name}\n",
            server = self.server,
            ca = pki.ca_cert.display(),
            cert = pki.admin_cert.display(),
            key = pki.admin_key.display(),
        )
    }

    /// A client with cluster-admin rights.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where kube-apiserver writes its audit log (with [`ClusterOptions::audit_log`]).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("logs").join("audit.log")
    }

    /// The admin kubeconfig; works with kubectl and helm.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// `https://127.0.0.1:PORT`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Makes every container of pod `namespace/pod` (one that exists now or is created later)
    /// print `text` (stdout), as the API server's `pods/{pod}/log` serves it: the text goes
    /// into a file of CRI log lines in the cluster's directory and a kwok `Logs` object of the
    /// pod's name points kwok's server at it.
    pub async fn serve_pod_log(
        &self,
        namespace: &str,
        pod: &str,
        text: &str,
    ) -> anyhow::Result<()> {
        let dir = self.dir.join("pod-logs");
        std::fs::create_dir_all(&dir)?;
        let file = dir.join(format!("{namespace}_{pod}.log"));
        let now = k8s_openapi::jiff::Timestamp::now();
        let mut cri = String::new();
        let mut rest = text;
        while !rest.is_empty() {
            let (line, tag, next) = match rest.split_once('\n') {
                Some((line, next)) => (line, "F", next),
                None => (rest, "P", ""),
            };
            cri.push_str(&format!("{now} stdout {tag} {line}\n"));
            rest = next;
        }
        std::fs::write(&file, cri).with_context(|| format!("writing {}", file.display()))?;
        let logs: Api<kube::api::DynamicObject> = Api::namespaced_with(
            self.client().await?,
            namespace,
            &kube::api::ApiResource {
                group: "kwok.x-k8s.io".into(),
                version: "v1alpha1".into(),
                api_version: "kwok.x-k8s.io/v1alpha1".into(),
                kind: "Logs".into(),
                plural: "logs".into(),
            },
        );
        let object: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": { "name": pod, "namespace": namespace },
            "spec": { "logs": [{ "logsFile": path_str(&file)? }] },
        }))?;
        logs.create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating kwok Logs {namespace}/{pod}"))?;
        Ok(())
    }

    /// The cluster's directory: kubeconfig, pki/, logs/, etcd/.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long [`Cluster::start`] took.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Process ids, in start order (etcd first).
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.processes
            .iter()
            .filter_map(|p| p.pid().map(|pid| (p.name().to_owned(), pid)))
            .collect()
    }

    /// Leaves the processes running and the directory in place; writes `pids` into the
    /// directory so [`stop_detached`] can stop them later. Returns the directory.
    pub fn detach(mut self) -> anyhow::Result<PathBuf> {
        self.detach_in_place()
    }

    /// [`Cluster::detach`] of a cluster held in a larger value (a fleet).
    pub fn detach_in_place(&mut self) -> anyhow::Result<PathBuf> {
        let mut pids = String::new();
        for process in std::mem::take(&mut self.processes) {
            let name = process.name().to_owned();
            if let Some(pid) = process.release() {
                pids.push_str(&format!("{name} {pid}\n"));
            }
        }
        std::fs::write(self.dir.join("pids"), pids)?;
        self.keep_dir = true;
        Ok(self.dir.clone())
    }
}

/// Stops the processes of a detached cluster directory (see [`Cluster::detach`]) and removes it.
pub fn stop_detached(dir: &Path) -> anyhow::Result<()> {
    let pids = std::fs::read_to_string(dir.join("pids"))
        .with_context(|| format!("{} is not a detached cluster", dir.display()))?;
    let pids: Vec<u32> = pids
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1)?.parse().ok())
        .collect();
    for pid in pids.iter().rev() {
        crate::process::terminate(*pid);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|pid| crate::process::alive(*pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for pid in &pids {
        if crate::process::alive(*pid) {
            crate::process::kill(*pid);
        }
    }
    std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        while let Some(mut process) = self.processes.pop() {
            process.stop(Duration::from_secs(3));
        }
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn node_is_ready(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| !t.is_empty());
    ready && !tainted
}

/// A loopback port nobody in this process was handed before and that is free right now.
pub fn free_port() -> anyhow::Result<u16> {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT
        .lock()
        .map_err(|_| anyhow::anyhow!("port registry lock poisoned"))?;
    for _ in 0..100 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return Ok(port);
        }
    }
    bail!("no free loopback port found")
}

fn path_str(path: &Path) -> anyhow::Result<&str> {
    path.to_str()
        .with_context(|| format!("{} is not valid UTF-8", path.display()))
}

#[cfg(test)]
mod tests {
    use super::kubernetes_version_in_go_mod;

    #[test]
    fn the_kubernetes_version_is_read_from_a_require_line_or_a_require_block() {
        let line = "module m\n\ngo 1.25.0\n\nrequire k8s.io/kubernetes v1.35.4\n\nrequire (\n\tk8s.io/api v0.35.4 // indirect\n)\n";
        assert_eq!(kubernetes_version_in_go_mod(line), Some("v1.35.4"));
        let block = "module m\n\nrequire (\n\tk8s.io/kubernetes-sigs v9.9.9\n\tk8s.io/kubernetes v1.34.2 // indirect\n)\n";
        assert_eq!(kubernetes_version_in_go_mod(block), Some("v1.34.2"));
        assert_eq!(
            kubernetes_version_in_go_mod("require k8s.io/api v0.35.4\n"),
            None
        );
    }

    #[test]
    fn the_pinned_kubernetes_version_is_the_one_of_the_upstream_go_mod() {
        let version =
            super::pinned_kubernetes_version().expect("the go.mod pins k8s.io/kubernetes");
        assert!(version.starts_with("v1."), "{version}");
    }
}
