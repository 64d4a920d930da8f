//! The fleet subcommands: `get`, `reconcile`, `suspend`, `resume`, `debug`, `token create`
//! (`rollout` is [`crate::rollout`])
//! and `cluster accept|unaccept|approve|revoke`, talking to the hub's management cluster as the flux CLI talks to
//! Flux.
//!
//! Output follows the flux CLI: tables with upper-case headers, `►` for what is being done,
//! `◎` while waiting, `✔` when it worked and `✗` with exit code 1 when it did not. Every
//! error names the object and the namespace; nothing from a Secret is ever printed except
//! the join command of a new token, which is what `token create` is for, and the composed
//! values of `debug hr --show-values`, which is what that flag asks for (as `flux debug hr
//! --show-values`, it warns so in its help).

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use flotilla_api::HelmRelease;
use flotilla_api::fleet::ManagedCluster;
use flotilla_api::source::HelmRepository;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, Resource as _, ResourceExt as _};
use serde_json::{Value, json};

/// The annotation `flotilla reconcile` sets, as `flux reconcile` does.
pub const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";
/// The annotation of `reconcile --force`.
pub const FORCE_AT: &str = "reconcile.fluxcd.io/forceAt";
/// The annotation of `reconcile --reset`.
pub const RESET_AT: &str = "reconcile.fluxcd.io/resetAt";

/// Where the management cluster is.
#[derive(Debug, Clone, Args)]
pub struct KubeArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
}

/// `flotilla get ...`
#[derive(Debug, Subcommand)]
pub enum Get {
    /// HelmReleases: READY, MESSAGE, REVISION, SUSPENDED, CLUSTER.
    #[command(name = "helmreleases", visible_alias = "hr", alias = "helmrelease")]
    HelmReleases(Scope),
    /// HelmReleaseSets: REVISION, WAVE, UPDATED, PAUSED, READY, MESSAGE.
    #[command(
        name = "helmreleasesets",
        visible_alias = "hrs",
        alias = "helmreleaseset"
    )]
    HelmReleaseSets(Scope),
    /// Sources.
    #[command(subcommand)]
    Sources(GetSources),
    /// ManagedClusters: the agents' clusters, accepted or not.
    #[command(name = "clusters", alias = "cluster")]
    Clusters(ClusterList),
}

/// `flotilla get clusters [-o wide]`.
#[derive(Debug, Clone, Default, Args)]
pub struct ClusterList {
    /// `wide`: also the newest certificate's serial and key, and a registration waiting
    /// for acceptance or for its key's approval (what `cluster approve` approves); `json`
    /// or `yaml`: the ManagedClusters as a `v1` `List`, for scripts.
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<ClusterOutput>,
}

/// The forms of `get clusters`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClusterOutput {
    /// More columns.
    Wide,
    /// The ManagedClusters as a JSON `List`.
    Json,
    /// The ManagedClusters as a YAML `List`.
    Yaml,
}

/// `flotilla get sources ...`
#[derive(Debug, Subcommand)]
pub enum GetSources {
    /// HelmRepositories.
    Helm(Scope),
}

/// Which namespaces a listing covers.
#[derive(Debug, Clone, Args)]
pub struct Scope {
    /// The namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only objects with these labels (`key=value,key2`, as `kubectl -l`): `get hr -l
    /// helm.flotilla.dev/set=NAME` lists a HelmReleaseSet's children.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// `json` or `yaml`: the objects as a `v1` `List` (as `kubectl get -o json|yaml`,
    /// without managedFields), for scripts; default a table.
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<ListOutput>,
}

/// The machine-readable forms of `get`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ListOutput {
    /// One JSON document.
    Json,
    /// One YAML document.
    Yaml,
}

/// Writes `items` as a `v1` `List` in `format`: each with its `apiVersion` and `kind`,
/// without `metadata.managedFields` (as `kubectl get -o json|yaml` prints them).
pub(crate) fn print_list<K>(
    out: &mut dyn Write,
    items: &[K],
    format: ListOutput,
) -> Result<(), Failed>
where
    K: kube::Resource<DynamicType = ()> + serde::Serialize,
{
    let items: Vec<Value> = items
        .iter()
        .map(|item| {
            let mut v = serde_json::to_value(item)?;
            if let Some(o) = v.as_object_mut() {
                o.insert("apiVersion".into(), K::api_version(&()).into());
                o.insert("kind".into(), K::kind(&()).into());
            }
            if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
            Ok(v)
        })
        .collect::<Result<_, serde_json::Error>>()?;
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    match format {
        ListOutput::Json => writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?,
        ListOutput::Yaml => write!(out, "{}", to_yaml(&list)?)?,
    }
    Ok(())
}

impl Scope {
    /// The list parameters of the scope's label selector.
    pub fn list_params(&self) -> ListParams {
        match &self.selector {
            Some(s) => ListParams::default().labels(s),
            None => ListParams::default(),
        }
    }
}

/// A HelmRelease named on the command line.
#[derive(Debug, Clone, Args)]
pub struct Named {
    /// The HelmRelease's name.
    pub name: String,
    /// Its namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// How long to wait for the result.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// `flotilla reconcile hr NAME`.
#[derive(Debug, Clone, Args)]
pub struct ReconcileArgs {
    /// The HelmRelease.
    #[command(flatten)]
    pub release: Named,
    /// Reconcile the chart's source first (its HelmRepository).
    #[arg(long)]
    pub with_source: bool,
    /// Run a Helm install or upgrade now even if nothing changed (`forceAt`).
    #[arg(long)]
    pub force: bool,
    /// Reset the failure counters so that exhausted retries start again (`resetAt`).
    #[arg(long)]
    pub reset: bool,
}

/// `flotilla reconcile ...`
#[derive(Debug, Subcommand)]
pub enum ReconcileKind {
    /// Asks for a reconcile of a HelmRelease and waits for its result.
    #[command(name = "helmrelease", visible_alias = "hr")]
    HelmRelease(ReconcileArgs),
}

/// `flotilla suspend|resume ...`
#[derive(Debug, Subcommand)]
pub enum ReleaseKind {
    /// A HelmRelease.
    #[command(name = "helmrelease", visible_alias = "hr")]
    HelmRelease(Named),
}

/// `flotilla debug ...`
#[derive(Debug, Subcommand)]
pub enum DebugKind {
    /// Troubleshoot a HelmRelease: its status, or the values the hub composes for it.
    ///
    /// WARNING: --show-values prints sensitive information if Kubernetes Secrets are
    /// referenced in the HelmRelease's .spec.valuesFrom field.
    #[command(name = "helmrelease", visible_alias = "hr")]
    HelmRelease(DebugArgs),
}

/// `flotilla debug hr NAME`.
#[derive(Debug, Clone, Args)]
pub struct DebugArgs {
    /// The HelmRelease's name.
    pub name: String,
    /// Its namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Print the status of the HelmRelease.
    #[arg(long)]
    pub show_status: bool,
    /// Print the final values of the Helm release, composed from the ConfigMaps and Secrets
    /// of `valuesFrom` and the inline values as the hub composes them.
    #[arg(long)]
    pub show_values: bool,
}

/// `flotilla token ...`
#[derive(Debug, Subcommand)]
pub enum Token {
    /// Creates a bootstrap token and prints the agent's join command (with the CA pin).
    Create(TokenCreate),
}

/// `flotilla token create`: `--cluster-name NAME` or `--any-cluster`, one of them.
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("scope").required(true).args(["cluster_name", "any_cluster"])))]
pub struct TokenCreate {
    /// The hub's gRPC address as agents reach it (`https://host:port`).
    #[arg(long)]
    pub hub_url: String,
    /// How long the token is valid (`0` for ever).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub ttl: Duration,
    /// How many clusters may join with it (`0` for no limit).
    #[arg(long, default_value_t = 1)]
    pub uses: u32,
    /// ManagedClusters it creates are accepted at once.
    #[arg(long)]
    pub auto_accept: bool,
    /// The only cluster name it may register (and the name in the printed command).
    #[arg(long)]
    pub cluster_name: Option<String>,
    /// Any cluster name instead: one token for many new clusters (a fleet joining at
    /// once). It cannot register an existing cluster it did not create.
    #[arg(long)]
    pub any_cluster: bool,
    /// The hub's namespace (its CA Secret and tokens live there).
    #[arg(long, default_value = "flotilla-system")]
    pub hub_namespace: String,
    /// The hub CA Secret's name.
    #[arg(long, default_value = "flotilla-hub-ca")]
    pub ca_secret: String,
}

/// `flotilla cluster ...`
#[derive(Debug, Subcommand)]
pub enum ClusterCmd {
    /// Accepts a ManagedCluster: the hub issues its agent's certificate and sends it plans.
    Accept {
        /// The ManagedCluster.
        name: String,
    },
    /// Stops sending plans to a ManagedCluster and ends its session.
    Unaccept {
        /// The ManagedCluster.
        name: String,
    },
    /// Approves a new key for a ManagedCluster (a reinstalled agent): its agent's next
    /// registration gets a certificate. The key shown by `get clusters -o wide`; check it
    /// against the agent's log before approving.
    Approve {
        /// The ManagedCluster.
        name: String,
        /// The key, sha256:<hex> (default: the pending registration's).
        #[arg(long)]
        fingerprint: Option<String>,
    },
    /// Revokes a certificate of a ManagedCluster, by serial, or every certificate of a key
    /// by its fingerprint; the cluster stays accepted, the session using it ends.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["serial", "fingerprint"])))]
    Revoke {
        /// The ManagedCluster.
        name: String,
        /// The certificate's serial (hex, as `get clusters -o wide` shows it).
        #[arg(long)]
        serial: Option<String>,
        /// The key's fingerprint, sha256:<hex>.
        #[arg(long)]
        fingerprint: Option<String>,
    },
}

/// A fleet command, ready to run.
#[derive(Debug)]
pub enum FleetCommand {
    /// `get`.
    Get(Get),
    /// `reconcile hr`.
    Reconcile(ReconcileArgs),
    /// `suspend hr`.
    Suspend(Named),
    /// `resume hr`.
    Resume(Named),
    /// `debug hr`.
    Debug(DebugArgs),
    /// `token create`.
    TokenCreate(TokenCreate),
    /// `cluster accept|unaccept`.
    Cluster(ClusterCmd),
    /// `rollout status|pause|resume|approve|abort`.
    Rollout(crate::rollout::Rollout),
    /// `version` (the agents' part; the client's line is printed before).
    Version,
}

/// `flotilla version [--client]`.
#[derive(Debug, Clone, Args)]
pub struct VersionArgs {
    /// Only this client's version: no cluster is asked.
    #[arg(long)]
    pub client: bool,
}

/// A failure, printed as `✗ <message>`.
#[derive(Debug)]
pub struct Failed(pub String);

impl<E: std::error::Error + 'static> From<E> for Failed {
    fn from(e: E) -> Self {
        Failed(error_chain(&e))
    }
}

/// An error and its causes, each once; an API error as `<message> (HTTP <code>)`, never
/// kube's `Debug` of it (the hub's and agent's one formatter).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    flotilla_hub::util::error_chain(e)
}

use flotilla_hub::util::api_error;

/// Parses `5m`, `30s`, `1h30m`, `250ms` (Go's duration syntax, as the flux CLI).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    flotilla_core::duration::GoDuration::parse(text)
        .map(flotilla_core::duration::GoDuration::get)
        .map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// Runs a fleet command; returns the exit code.
pub fn run(
    command: FleetCommand,
    kube: &KubeArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "✗ cannot start: {e}");
            return 1;
        }
    };
    let result = runtime.block_on(async {
        let client = client(kube).await?;
        execute(client, command, out).await
    });
    match result {
        Ok(()) => 0,
        Err(Failed(message)) => {
            let _ = out.flush();
            let _ = writeln!(err, "✗ {message}");
            1
        }
    }
}

pub(crate) async fn client(kube: &KubeArgs) -> Result<Client, Failed> {
    let config = match &kube.kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| Failed(format!("kubeconfig {}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| Failed(format!("kubeconfig {}: {e}", path.display())))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| Failed(format!("no cluster configuration: {e}")))?,
    };
    Client::try_from(config).map_err(|e| Failed(format!("cannot build a client: {e}")))
}

async fn execute(client: Client, command: FleetCommand, out: &mut dyn Write) -> Result<(), Failed> {
    match command {
        FleetCommand::Get(Get::HelmReleases(scope)) => get_helm_releases(client, &scope, out).await,
        FleetCommand::Get(Get::HelmReleaseSets(scope)) => {
            crate::rollout::get_sets(client, &scope, out).await
        }
        FleetCommand::Rollout(cmd) => crate::rollout::execute(client, cmd, out).await,
        FleetCommand::Get(Get::Sources(GetSources::Helm(scope))) => {
            get_helm_repositories(client, &scope, out).await
        }
        FleetCommand::Get(Get::Clusters(list)) => get_clusters(client, &list, out).await,
        FleetCommand::Reconcile(args) => reconcile(client, &args, out).await,
        FleetCommand::Suspend(named) => set_suspended(client, &named, true, out).await,
        FleetCommand::Resume(named) => {
            set_suspended(client.clone(), &named, false, out).await?;
            let token = now_token();
            annotate(
                &releases(&client, &named.namespace),
                &named.name,
                &[REQUESTED_AT],
                &token,
            )
            .await
            .map_err(|e| object_error("HelmRelease", &named.namespace, &named.name, e))?;
            wait_handled(client, &named, &token, out).await
        }
        FleetCommand::Debug(args) => debug_helm_release(client, &args, out).await,
        FleetCommand::Version => agent_versions(client, out).await,
        FleetCommand::TokenCreate(args) => token_create(client, &args, out).await,
        FleetCommand::Cluster(ClusterCmd::Accept { name }) => {
            accept(client, &name, true, out).await
        }
        FleetCommand::Cluster(ClusterCmd::Unaccept { name }) => {
            accept(client, &name, false, out).await
        }
        FleetCommand::Cluster(ClusterCmd::Approve { name, fingerprint }) => {
            approve(client, &name, fingerprint.as_deref(), out).await
        }
        FleetCommand::Cluster(ClusterCmd::Revoke {
            name,
            serial,
            fingerprint,
        }) => {
            revoke(
                client,
                &name,
                serial.as_deref(),
                fingerprint.as_deref(),
                out,
            )
            .await
        }
    }
}

fn releases(client: &Client, namespace: &str) -> Api<HelmRelease> {
    Api::namespaced(client.clone(), namespace)
}

pub(crate) fn object_error(kind: &str, namespace: &str, name: &str, e: kube::Error) -> Failed {
    match &e {
        kube::Error::Api(status) if status.code == 404 => {
            Failed(format!("{kind} {name} not found in namespace {namespace}"))
        }
        _ => Failed(format!("{kind} {namespace}/{name}: {}", error_chain(&e))),
    }
}

/// The token `reconcile` writes: the time, as `flux reconcile` writes it (RFC 3339, nanoseconds).
fn now_token() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

async fn annotate<K>(api: &Api<K>, name: &str, keys: &[&str], token: &str) -> Result<K, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let annotations: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| ((*k).to_owned(), json!(token)))
        .collect();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "annotations": annotations } })),
    )
    .await
}

/// The HelmRelease's status as JSON (`{}` when it has none).
fn status_json(hr: &HelmRelease) -> Value {
    hr.status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_else(|| json!({}))
}

fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

fn field<'a>(v: Option<&'a Value>, key: &str) -> &'a str {
    v.and_then(|v| v.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// READY of a listing: the Ready condition's status, `Unknown` without one.
fn ready_and_message(status: &Value) -> (String, String) {
    match condition(status, "Ready") {
        Some(c) => (
            field(Some(c), "status").to_owned(),
            field(Some(c), "message").to_owned(),
        ),
        None => ("Unknown".to_owned(), "waiting to be reconciled".to_owned()),
    }
}

/// REVISION: the chart version of the latest release, else the last attempted one.
fn revision(status: &Value) -> String {
    let latest = status
        .get("history")
        .and_then(Value::as_array)
        .and_then(|h| h.first())
        .and_then(|s| s.get("chartVersion"))
        .and_then(Value::as_str);
    latest
        .or_else(|| status.get("lastAttemptedRevision").and_then(Value::as_str))
        .unwrap_or("")
        .to_owned()
}

/// Prints rows as the flux CLI does: tab-separated columns padded to their widths.
pub(crate) fn table(
    out: &mut dyn Write,
    header: &[&str],
    rows: &[Vec<String>],
) -> Result<(), Failed> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let mut line = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        for (i, cell) in cells.iter().enumerate() {
            if i == last {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}\t", width = widths[i]);
            }
        }
        text.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out.write_all(text.as_bytes())?;
    Ok(())
}

async fn get_helm_releases(
    client: Client,
    scope: &Scope,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    let api: Api<HelmRelease> = if scope.all_namespaces {
        Api::all(client)
    } else {
        Api::namespaced(client, &scope.namespace)
    };
    let list = api.list(&scope.list_params()).await?;
    if let Some(format) = scope.output {
        return print_list(out, &list.items, format);
    }
    if list.items.is_empty() {
        let _ = writeln!(out, "no HelmRelease objects found in {}", where_(scope));
        return Ok(());
    }
    let mut rows = Vec::new();
    for hr in &list.items {
        let status = status_json(hr);
        let (ready, message) = ready_and_message(&status);
        let spec = serde_json::to_value(&hr.spec).unwrap_or_default();
        let name = spec
            .pointer("/clusterRef/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        // A Cluster API Cluster shows with its kind, a ManagedCluster by its name alone.
        let cluster = match spec.pointer("/clusterRef/kind").and_then(Value::as_str) {
            Some("Cluster") => format!("Cluster/{name}"),
            _ => name.to_owned(),
        };
        let suspended = spec
            .get("suspend")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let mut row = Vec::new();
        if scope.all_namespaces {
            row.push(hr.namespace().unwrap_or_default());
        }
        row.extend([
            hr.name_any(),
            revision(&status),
            suspended.to_string(),
            ready,
            message,
            cluster,
        ]);
        rows.push(row);
    }
    let mut header = vec![];
    if scope.all_namespaces {
        header.push("NAMESPACE");
    }
    header.extend([
        "NAME",
        "REVISION",
        "SUSPENDED",
        "READY",
        "MESSAGE",
        "CLUSTER",
    ]);
    // The message is the widest column: keep it readable by putting CLUSTER before it.
    let message_at = header.len() - 2;
    header.swap(message_at, message_at + 1);
    for row in &mut rows {
        row.swap(message_at, message_at + 1);
    }
    table(out, &header, &rows)
}

fn where_(scope: &Scope) -> String {
    if scope.all_namespaces {
        "any namespace".to_owned()
    } else {
        format!("{} namespace", scope.namespace)
    }
}

async fn get_helm_repositories(
    client: Client,
    scope: &Scope,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    let api: Api<HelmRepository> = if scope.all_namespaces {
        Api::all(client)
    } else {
        Api::namespaced(client, &scope.namespace)
    };
    let list = api.list(&scope.list_params()).await?;
    if let Some(format) = scope.output {
        return print_list(out, &list.items, format);
    }
    if list.items.is_empty() {
        let _ = writeln!(out, "no HelmRepository objects found in {}", where_(scope));
        return Ok(());
    }
    let mut rows = Vec::new();
    for repo in &list.items {
        let status = repo
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or_else(|| json!({}));
        let (ready, message) = ready_and_message(&status);
        let spec = serde_json::to_value(&repo.spec).unwrap_or_default();
        let mut row = Vec::new();
        if scope.all_namespaces {
            row.push(repo.namespace().unwrap_or_default());
        }
        row.extend([
            repo.name_any(),
            status
                .pointer("/artifact/revision")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            spec.get("suspend")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string(),
            ready,
            message,
        ]);
        rows.push(row);
    }
    let mut header = vec![];
    if scope.all_namespaces {
        header.push("NAMESPACE");
    }
    header.extend(["NAME", "REVISION", "SUSPENDED", "READY", "MESSAGE"]);
    table(out, &header, &rows)
}

async fn get_clusters(
    client: Client,
    list_args: &ClusterList,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    let wide = list_args.output == Some(ClusterOutput::Wide);
    let api: Api<ManagedCluster> = Api::all(client);
    let list = api.list(&ListParams::default()).await?;
    match list_args.output {
        Some(ClusterOutput::Json) => return print_list(out, &list.items, ListOutput::Json),
        Some(ClusterOutput::Yaml) => return print_list(out, &list.items, ListOutput::Yaml),
        _ => {}
    }
    if list.items.is_empty() {
        let _ = writeln!(out, "no ManagedCluster objects found");
        return Ok(());
    }
    let mut rows = Vec::new();
    for cluster in &list.items {
        let status = cluster
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or_else(|| json!({}));
        let cond = |kind: &str| {
            condition(&status, kind)
                .map(|c| field(Some(c), "status").to_owned())
                .unwrap_or_else(|| "Unknown".to_owned())
        };
        let available = condition(&status, "Available");
        let mut row = vec![
            cluster.name_any(),
            cluster.spec.accepted.to_string(),
            cond("Joined"),
            cond("Available"),
            status
                .get("plansHeld")
                .map(|v| v.to_string())
                .unwrap_or_default(),
        ];
        if wide {
            let typed = cluster.status.as_ref();
            let certificate = typed.and_then(|s| s.certificate.as_ref());
            let pending = typed.and_then(|s| s.pending_registration.as_ref());
            row.extend([
                certificate.map(|c| c.serial.clone()).unwrap_or_default(),
                certificate
                    .map(|c| c.key_fingerprint.clone())
                    .unwrap_or_default(),
                pending
                    .map(|p| format!("{} ({})", p.key_fingerprint, p.reason))
                    .unwrap_or_default(),
            ]);
        }
        row.push(field(available, "message").to_owned());
        rows.push(row);
    }
    let mut header = vec!["NAME", "ACCEPTED", "JOINED", "AVAILABLE", "PLANS"];
    if wide {
        header.extend(["SERIAL", "KEY", "PENDING KEY"]);
    }
    header.push("MESSAGE");
    table(out, &header, &rows)
}

/// `agent <cluster>: flotilla-agent <version>` per ManagedCluster, as its agent reported
/// it at its last session.
async fn agent_versions(client: Client, out: &mut dyn Write) -> Result<(), Failed> {
    let api: Api<ManagedCluster> = Api::all(client);
    let list = api.list(&ListParams::default()).await.map_err(|e| {
        Failed(api_error(
            "listing",
            "ManagedClusters",
            "on the hub's cluster",
            &e,
        ))
    })?;
    for cluster in &list.items {
        let version = cluster
            .status
            .as_ref()
            .and_then(|s| s.agent_version.as_deref());
        match version {
            Some(v) => writeln!(out, "agent {}: flotilla-agent {v}", cluster.name_any())?,
            None => writeln!(
                out,
                "agent {}: not reported (never connected)",
                cluster.name_any()
            )?,
        }
    }
    Ok(())
}

async fn reconcile(
    client: Client,
    args: &ReconcileArgs,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    let named = &args.release;
    let api = releases(&client, &named.namespace);
    let hr = api
        .get(&named.name)
        .await
        .map_err(|e| object_error("HelmRelease", &named.namespace, &named.name, e))?;
    let spec = serde_json::to_value(&hr.spec).unwrap_or_default();
    if spec.get("suspend").and_then(Value::as_bool) == Some(true) {
        return Err(Failed(format!(
            "HelmRelease {} in namespace {} is suspended: resume it first",
            named.name, named.namespace
        )));
    }
    let token = now_token();
    if args.with_source {
        reconcile_source(&client, &hr, &spec, &token, out).await?;
    }
    let mut keys = vec![REQUESTED_AT];
    if args.force {
        keys.push(FORCE_AT);
    }
    if args.reset {
        keys.push(RESET_AT);
    }
    writeln!(
        out,
        "► annotating HelmRelease {} in {} namespace",
        named.name, named.namespace
    )?;
    annotate(&api, &named.name, &keys, &token)
        .await
        .map_err(|e| object_error("HelmRelease", &named.namespace, &named.name, e))?;
    writeln!(out, "✔ HelmRelease annotated")?;
    wait_handled(client, named, &token, out).await
}

/// `debug hr`: the status (YAML), then `---`, then the composed values (YAML), as `flux
/// debug hr` prints them. The values are composed here, with the caller's credentials, by
/// the hub's own composition ([`flotilla_hub::values::compose`]).
async fn debug_helm_release(
    client: Client,
    args: &DebugArgs,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    if !args.show_status && !args.show_values {
        return Err(Failed(
            "either --show-status or --show-values must be set".into(),
        ));
    }
    let hr = releases(&client, &args.namespace)
        .get(&args.name)
        .await
        .map_err(|e| object_error("HelmRelease", &args.namespace, &args.name, e))?;
    if args.show_status {
        write!(out, "{}", to_yaml(&status_json(&hr))?)?;
        if args.show_values {
            writeln!(out, "---")?;
        }
    }
    if args.show_values {
        let values = composed_values(&client, &hr, &args.namespace).await?;
        write!(out, "{}", to_yaml(&values)?)?;
    }
    Ok(())
}

/// The values of `hr` composed from its `valuesFrom` objects (read from `namespace`) and
/// its inline values.
async fn composed_values(
    client: &Client,
    hr: &HelmRelease,
    namespace: &str,
) -> Result<Value, Failed> {
    use flotilla_core::spec::ValuesReferenceKind;
    use flotilla_hub::values::{self, Source};
    let mut found = Vec::new();
    for (kind, name) in values::referenced_objects(&hr.spec.values_from) {
        let (what, data) = match kind {
            ValuesReferenceKind::ConfigMap => (
                "ConfigMap",
                flotilla_hub::util::config_map_data(client, namespace, name).await,
            ),
            ValuesReferenceKind::Secret => (
                "Secret",
                flotilla_hub::util::secret_data(client, namespace, name).await,
            ),
        };
        let data =
            data.map_err(|e| Failed(format!("{what} {namespace}/{name}: {}", error_chain(&e))))?;
        found.push(((kind, name.to_owned()), data));
    }
    let key = flotilla_hub::status::key_of(hr).ok_or_else(|| {
        Failed(format!(
            "HelmRelease {namespace}/{}: not a valid object name",
            hr.name_any()
        ))
    })?;
    let composed = values::compose(
        &key,
        &hr.spec.values_from,
        |kind, name| match found.iter().find(|((k, n), _)| *k == kind && n == name) {
            Some((_, Some(data))) => Source::Found(data),
            _ => Source::NotFound,
        },
        hr.spec.values.as_ref(),
    )
    .map_err(|e| Failed(e.to_string()))?;
    Ok(Value::Object(composed.values))
}

/// `sigs.k8s.io/yaml.Marshal` of a JSON value, as the flux CLI prints objects.
fn to_yaml(v: &Value) -> Result<String, Failed> {
    let json = serde_json::to_string(v)?;
    let yaml = flotilla_yaml::from_str(&json)?;
    Ok(flotilla_yaml::sigs::marshal(&yaml)?)
}

/// Annotates the HelmRepository behind `spec.chart` and waits until it has handled the
/// request (`status.lastHandledReconcileAt`).
async fn reconcile_source(
    client: &Client,
    hr: &HelmRelease,
    spec: &Value,
    token: &str,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    let Some(source) = spec.pointer("/chart/spec/sourceRef") else {
        return Ok(());
    };
    if source.get("kind").and_then(Value::as_str) != Some("HelmRepository") {
        return Ok(());
    }
    let name = source.get("name").and_then(Value::as_str).unwrap_or("");
    let namespace = source
        .get("namespace")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| hr.namespace())
        .unwrap_or_default();
    let api: Api<HelmRepository> = Api::namespaced(client.clone(), &namespace);
    writeln!(
        out,
        "► annotating HelmRepository {name} in {namespace} namespace"
    )?;
    annotate(&api, name, &[REQUESTED_AT], token)
        .await
        .map_err(|e| object_error("HelmRepository", &namespace, name, e))?;
    writeln!(out, "◎ waiting for HelmRepository reconciliation")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let repo = api
            .get(name)
            .await
            .map_err(|e| object_error("HelmRepository", &namespace, name, e))?;
        let status = repo
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or_else(|| json!({}));
        if status.get("lastHandledReconcileAt").and_then(Value::as_str) == Some(token) {
            let (ready, message) = ready_and_message(&status);
            if ready == "True" {
                writeln!(
                    out,
                    "✔ fetched revision {}",
                    field(status.get("artifact"), "revision")
                )?;
                return Ok(());
            }
            return Err(Failed(format!(
                "HelmRepository {namespace}/{name}: {message}"
            )));
        }
        if Instant::now() > deadline {
            return Err(Failed(format!(
                "HelmRepository {namespace}/{name}: the request was not handled in time"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the HelmRelease has handled `token` and its Ready condition says how it went.
async fn wait_handled(
    client: Client,
    named: &Named,
    token: &str,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    writeln!(out, "◎ waiting for HelmRelease reconciliation")?;
    let api = releases(&client, &named.namespace);
    let deadline = Instant::now() + named.timeout;
    loop {
        let hr = api
            .get(&named.name)
            .await
            .map_err(|e| object_error("HelmRelease", &named.namespace, &named.name, e))?;
        let status = status_json(&hr);
        let handled = status.get("lastHandledReconcileAt").and_then(Value::as_str) == Some(token);
        let generation = hr.meta().generation.unwrap_or(0);
        let observed = status
            .get("observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or(-1);
        let reconciling =
            condition(&status, "Reconciling").is_some_and(|c| field(Some(c), "status") == "True");
        if handled && observed >= generation && !reconciling {
            let (ready, message) = ready_and_message(&status);
            match ready.as_str() {
                "True" => {
                    writeln!(out, "✔ applied revision {}", revision(&status))?;
                    return Ok(());
                }
                "False" => {
                    return Err(Failed(format!(
                        "HelmRelease {}/{}: {message}",
                        named.namespace, named.name
                    )));
                }
                _ => {}
            }
        }
        if Instant::now() > deadline {
            let (_, message) = ready_and_message(&status);
            return Err(Failed(format!(
                "HelmRelease {}/{}: timed out after {:?} waiting for the reconciliation ({message})",
                named.namespace, named.name, named.timeout
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn set_suspended(
    client: Client,
    named: &Named,
    suspend: bool,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    let verb = if suspend { "suspending" } else { "resuming" };
    writeln!(
        out,
        "► {verb} HelmRelease {} in {} namespace",
        named.name, named.namespace
    )?;
    releases(&client, &named.namespace)
        .patch(
            &named.name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "suspend": suspend } })),
        )
        .await
        .map_err(|e| object_error("HelmRelease", &named.namespace, &named.name, e))?;
    writeln!(
        out,
        "✔ HelmRelease {}",
        if suspend { "suspended" } else { "resumed" }
    )?;
    Ok(())
}

async fn token_create(
    client: Client,
    args: &TokenCreate,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    use flotilla_hub::session::{pki, tokens};
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), &args.hub_namespace);
    let ca = secrets
        .get(&args.ca_secret)
        .await
        .map_err(|e| object_error("Secret", &args.hub_namespace, &args.ca_secret, e))?;
    let cert = ca
        .data
        .as_ref()
        .and_then(|d| d.get(pki::TLS_CERT_KEY))
        .ok_or_else(|| {
            Failed(format!(
                "Secret {}/{} has no key {:?}: is it the hub's CA?",
                args.hub_namespace,
                args.ca_secret,
                pki::TLS_CERT_KEY
            ))
        })?;
    let pem = String::from_utf8_lossy(&cert.0);
    let der = pem_certificate_der(&pem).ok_or_else(|| {
        Failed(format!(
            "Secret {}/{}: {:?} holds no PEM certificate",
            args.hub_namespace,
            args.ca_secret,
            pki::TLS_CERT_KEY
        ))
    })?;
    let pin = pki::CaPin::of_certificate(&der)?;
    let scope = match (&args.cluster_name, args.any_cluster) {
        (Some(name), false) => {
            flotilla_core::ids::ClusterId::new(name.clone())
                .map_err(|e| Failed(format!("--cluster-name '{name}': {e}")))?;
            tokens::TokenScope::Cluster(name.clone())
        }
        (None, true) => tokens::TokenScope::AnyCluster,
        _ => {
            return Err(Failed(
                "give --cluster-name NAME (the token registers that cluster only) or --any-cluster (any name: many new clusters at once)"
                    .into(),
            ));
        }
    };
    let options = tokens::TokenOptions {
        scope,
        ttl: (!args.ttl.is_zero()).then_some(args.ttl),
        uses: (args.uses > 0).then_some(args.uses),
        auto_accept: args.auto_accept,
    };
    let token = tokens::create(client, &args.hub_namespace, &options).await?;
    let cluster = args.cluster_name.as_deref().unwrap_or("<cluster-name>");
    writeln!(
        out,
        "{}",
        tokens::join_command(&args.hub_url, &token, &pin.to_string(), cluster)
    )?;
    Ok(())
}

/// The DER of the first `CERTIFICATE` block of a PEM text.
fn pem_certificate_der(pem: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let start = pem.find("-----BEGIN CERTIFICATE-----")? + "-----BEGIN CERTIFICATE-----".len();
    let end = start + pem[start..].find("-----END CERTIFICATE-----")?;
    let body: String = pem[start..end].split_whitespace().collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

async fn accept(
    client: Client,
    name: &str,
    accepted: bool,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    flotilla_hub::session::registry::set_accepted(client, name, accepted)
        .await
        .map_err(|e| match &e {
            kube::Error::Api(status) if status.code == 404 => {
                Failed(format!("ManagedCluster {name} not found"))
            }
            _ => Failed(format!("ManagedCluster {name}: {}", error_chain(&e))),
        })?;
    writeln!(
        out,
        "✔ ManagedCluster {name} {}",
        if accepted {
            "accepted"
        } else {
            "no longer accepted"
        }
    )?;
    Ok(())
}

fn cluster_error(name: &str, e: kube::Error) -> Failed {
    match &e {
        kube::Error::Api(status) if status.code == 404 => {
            Failed(format!("ManagedCluster {name} not found"))
        }
        _ => Failed(format!("ManagedCluster {name}: {}", error_chain(&e))),
    }
}

async fn approve(
    client: Client,
    name: &str,
    fingerprint: Option<&str>,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    use flotilla_hub::session::pki::KeyFingerprint;
    let api: Api<ManagedCluster> = Api::all(client);
    let mc = api.get(name).await.map_err(|e| cluster_error(name, e))?;
    let pending = mc
        .status
        .as_ref()
        .and_then(|s| s.pending_registration.as_ref());
    let text = match (fingerprint, pending) {
        (Some(f), _) => f.to_owned(),
        (None, Some(p)) => p.key_fingerprint.clone(),
        (None, None) => {
            return Err(Failed(format!(
                "ManagedCluster {name} has no registration waiting for approval: give the key with --fingerprint sha256:<hex>"
            )));
        }
    };
    let key = KeyFingerprint::parse(&text).map_err(|e| Failed(format!("--fingerprint: {e}")))?;
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"approvedKeyFingerprint": key.as_str()}})),
    )
    .await
    .map_err(|e| cluster_error(name, e))?;
    writeln!(
        out,
        "✔ ManagedCluster {name}: key {key} approved; the agent holding it gets a certificate at its next registration attempt"
    )?;
    if let Some(old) = mc
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .filter(|c| c.key_fingerprint != key.as_str())
    {
        writeln!(
            out,
            "  the certificates of the earlier key stay valid until they expire: flotilla cluster revoke {name} --fingerprint {}",
            old.key_fingerprint
        )?;
    }
    Ok(())
}

async fn revoke(
    client: Client,
    name: &str,
    serial: Option<&str>,
    fingerprint: Option<&str>,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    use flotilla_hub::session::pki;
    let (field, value, what) = match (serial, fingerprint) {
        (Some(s), None) => (
            "revokedSerials",
            pki::normalize_serial(s).map_err(|e| Failed(format!("--serial: {e}")))?,
            "certificate",
        ),
        (None, Some(f)) => (
            "revokedKeyFingerprints",
            pki::KeyFingerprint::parse(f)
                .map_err(|e| Failed(format!("--fingerprint: {e}")))?
                .to_string(),
            "key",
        ),
        _ => return Err(Failed("give --serial or --fingerprint, one of them".into())),
    };
    let api: Api<ManagedCluster> = Api::all(client);
    // Read, append, write with the resourceVersion read: a concurrent change is a 409,
    // read again.
    for _ in 0..5 {
        let mc = api.get(name).await.map_err(|e| cluster_error(name, e))?;
        let spec = serde_json::to_value(&mc.spec).unwrap_or_else(|_| json!({}));
        let mut list: Vec<String> = spec
            .get(field)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default();
        if list.contains(&value) {
            writeln!(
                out,
                "✔ ManagedCluster {name}: {what} {value} was already revoked"
            )?;
            return Ok(());
        }
        list.push(value.clone());
        let mut spec_patch = serde_json::Map::new();
        spec_patch.insert(field.to_owned(), json!(list));
        let patch = json!({
            "metadata": {"resourceVersion": mc.metadata.resource_version},
            "spec": spec_patch,
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {
                writeln!(
                    out,
                    "✔ ManagedCluster {name}: {what} {value} revoked; a session using it ends, and the cluster stays accepted"
                )?;
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(cluster_error(name, e)),
        }
    }
    Err(Failed(format!(
        "ManagedCluster {name} kept changing while revoking; try again"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_and_flux_read_them() {
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(
            parse_duration("5 minutes")
                .unwrap_err()
                .contains("\"5 minutes\"")
        );
    }

    #[test]
    fn the_revision_is_the_latest_release_s_chart_version() {
        let status = json!({
            "history": [{"chartVersion": "6.5.1"}, {"chartVersion": "6.5.0"}],
            "lastAttemptedRevision": "6.6.0"
        });
        assert_eq!(revision(&status), "6.5.1");
        assert_eq!(
            revision(&json!({"lastAttemptedRevision": "6.6.0"})),
            "6.6.0"
        );
        assert_eq!(revision(&json!({})), "");
    }

    #[test]
    fn tables_pad_every_column_but_the_last() {
        let mut out = Vec::new();
        table(
            &mut out,
            &["NAME", "READY", "MESSAGE"],
            &[vec![
                "podinfo".into(),
                "True".into(),
                "Helm install succeeded".into(),
            ]],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "NAME   \tREADY\tMESSAGE\npodinfo\tTrue \tHelm install succeeded\n"
        );
    }

    #[test]
    fn a_pem_certificate_block_is_decoded() {
        let pem = "junk\n-----BEGIN CERTIFICATE-----\nAQID\nBA==\n-----END CERTIFICATE-----\n";
        assert_eq!(pem_certificate_der(pem), Some(vec![1, 2, 3, 4]));
        assert_eq!(pem_certificate_der("nothing"), None);
    }
}
