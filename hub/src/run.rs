//! The hub process: wires the chart store, the source controllers, the HelmRelease and
//! HelmReleaseSet controllers, the status writer and the push agents together ([`Hub::start`]), and stops
//! them in order ([`Hub::stop`]): controllers first (no new plans), then the in-process
//! agents (in-flight Helm actions finish and are recorded), then the status writer once the
//! last reports are written.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use flotilla_agent::charts::{CachedCharts, ChartError, ChartSource, NoFetcher};
use flotilla_agent::runtime::AgentOptions;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::controller::{self, ControllerOptions};
use crate::kubeconfig_policy::KubeconfigPolicy;
use crate::link::{Links, ReportReceiver, ReportSink, TargetId, report_channel};
use crate::push::{HubLinks, PushAgents, PushOptions};
use crate::sources::helm_chart::{self, ChartContext};
use crate::sources::helm_repository::{self, Indexes, RepositoryContext};
use crate::sources::http::Limits;
use crate::sources::oci_repository;
use crate::status::StatusBook;
use crate::supervisor::Supervisor;
use crate::util::error_chain;

/// How the hub runs.
pub struct HubConfig {
    /// A kubeconfig file for the hub's cluster; `None` infers (in-cluster, `KUBECONFIG`,
    /// `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    /// HelmRelease reconciles at the same time (sources get the same).
    pub concurrency: u16,
    /// The interval of a HelmRepository that sets none.
    pub default_interval: Duration,
    /// Requeue of dependencies and sources not ready.
    pub requeue_dependency: Duration,
    /// Interval jitter fraction.
    pub jitter: f64,
    /// The chart store's directory.
    pub artifact_dir: PathBuf,
    /// The chart store's bound, in bytes.
    pub artifact_max_bytes: u64,
    /// Namespace of the in-process agents' state in each target cluster.
    pub agent_namespace: String,
    /// The in-process agents' options.
    pub agent: AgentOptions,
    /// What a kubeconfig Secret target may ask of the hub (the `--insecure-kubeconfig-*`
    /// flags; everything refused by default).
    pub kubeconfig_policy: KubeconfigPolicy,
    /// The remote agents' registry (the session server), when there is one. Its links
    /// forward their agents' reports into [`HubConfig::report_sink`].
    pub remote: Option<Arc<dyn Links>>,
    /// Where reconciles are counted (serve them with [`crate::telemetry::serve`]).
    pub metrics: crate::telemetry::HubMetrics,
    /// The namespace of the plan-epoch ConfigMap ([`crate::controller::epoch`]); `None`:
    /// no epoch, each new plan revision is written to its HelmRelease before the plan is
    /// sent. Claimed at start; a claim that fails falls back to no epoch, with a warning.
    pub plan_epoch_namespace: Option<String>,
    /// Where the controllers and the status writer report their end
    /// ([`crate::supervisor`]); the binary shares one with its probe and session servers.
    pub supervisor: Supervisor,
    /// A test hook run at the start of every HelmRelease reconcile
    /// ([`ControllerOptions::fault`]); `None` (no flag sets it) outside tests.
    pub reconcile_fault: Option<controller::ReconcileFault>,
    /// Tenancy: `--no-cross-namespace-refs`, `--default-service-account`,
    /// `--allow-local-target` ([`crate::tenancy`]). The local target is off by default.
    pub tenancy: crate::tenancy::TenancyOptions,
    /// Cluster API import (`--capi-import`, [`crate::onboarding`]); `None`: off.
    pub capi_import: Option<crate::onboarding::ImportOptions>,
    /// The queue every agent's reports go through to the status writer (bounded and
    /// coalescing: [`crate::reports`]).
    reports: (ReportSink, ReportReceiver),
}

impl std::fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubConfig")
            .field("kubeconfig", &self.kubeconfig)
            .field("concurrency", &self.concurrency)
            .field("artifact_dir", &self.artifact_dir)
            .field("agent_namespace", &self.agent_namespace)
            .finish_non_exhaustive()
    }
}

impl HubConfig {
    /// Defaults for the hub's own cluster at `kubeconfig`, storing charts in
    /// `artifact_dir`.
    pub fn new(kubeconfig: Option<PathBuf>, artifact_dir: PathBuf) -> HubConfig {
        HubConfig {
            kubeconfig,
            concurrency: 4,
            default_interval: helm_repository::DEFAULT_INTERVAL,
            requeue_dependency: Duration::from_secs(30),
            jitter: 0.05,
            artifact_dir,
            artifact_max_bytes: 1 << 30,
            agent_namespace: "flotilla-system".into(),
            agent: AgentOptions::default(),
            kubeconfig_policy: KubeconfigPolicy::default(),
            remote: None,
            metrics: Default::default(),
            plan_epoch_namespace: None,
            supervisor: Supervisor::default(),
            reconcile_fault: None,
            tenancy: Default::default(),
            capi_import: None,
            reports: report_channel(),
        }
    }

    /// Where agents' reports go: a remote registry built before [`Hub::start`] takes a
    /// clone and forwards each connected agent's reports into it, tagged with its target.
    pub fn report_sink(&self) -> ReportSink {
        self.reports.0.clone()
    }
}

/// Why the hub could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig")]
    KubeConfig(#[source] kube::config::KubeconfigError),
    /// No configuration could be inferred.
    #[error("inferring the cluster configuration")]
    Infer(#[source] kube::config::InferConfigError),
    /// The client could not be built.
    #[error("building the Kubernetes client")]
    Client(#[source] kube::Error),
    /// The chart store could not be opened.
    #[error("opening the chart store")]
    Store(#[source] ChartError),
}

/// The configuration and a client for the hub's cluster: from `kubeconfig`, else inferred
/// (in-cluster, `KUBECONFIG`, `~/.kube/config`).
pub async fn connect(
    kubeconfig: Option<&std::path::Path>,
) -> Result<(kube::Config, Client), StartError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(StartError::KubeConfig)?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(StartError::KubeConfig)?
        }
        None => kube::Config::infer().await.map_err(StartError::Infer)?,
    };
    let client = Client::try_from(config.clone()).map_err(StartError::Client)?;
    Ok((config, client))
}

/// A running hub.
#[derive(Debug)]
pub struct Hub {
    stop: CancellationToken,
    controllers: JoinSet<()>,
    writer: tokio::task::JoinHandle<()>,
    push: Arc<PushAgents>,
    grace: Duration,
    supervisor: Supervisor,
    /// The chart store (shared with the in-process agents).
    pub charts: Arc<CachedCharts<NoFetcher>>,
}

impl Hub {
    /// Starts every controller on the current runtime.
    pub async fn start(config: HubConfig) -> Result<Hub, StartError> {
        let (kube_config, client) = connect(config.kubeconfig.as_deref()).await?;
        // Indexing the store reads its directory: start-up only.
        let charts = Arc::new(
            CachedCharts::new(
                config.artifact_dir.clone(),
                config.artifact_max_bytes,
                NoFetcher,
            )
            .map_err(StartError::Store)?,
        );
        let (report_tx, report_rx) = config.reports;
        report_rx.count_into(config.metrics.clone());
        // Unbounded with a reason: the status writer sends one key per report it handled
        // (its input is the bounded report queue, handled at most
        // `status::MAX_REPORTS_IN_FLIGHT` at a time), and the controller drains it into its
        // scheduler at once, which keeps one entry per HelmRelease.
        let (trigger_tx, trigger_rx) = mpsc::unbounded_channel();
        let book = Arc::new(StatusBook::new(client.clone(), trigger_tx));
        let preview_sink = report_tx.clone();
        let push = Arc::new(PushAgents::new(
            kube_config,
            client.clone(),
            charts.clone() as Arc<dyn ChartSource>,
            report_tx,
            PushOptions {
                agent_namespace: config.agent_namespace.clone(),
                agent: config.agent.clone(),
                kubeconfig: config.kubeconfig_policy,
            },
        ));
        let links = Arc::new(HubLinks {
            push: push.clone(),
            remote: config.remote.clone(),
        });
        let supervisor = config.supervisor.clone();
        let writer =
            tokio::spawn(supervisor.critical("status-writer", book.clone().run(report_rx)));
        let stop = CancellationToken::new();
        let grace = config.agent.shutdown_grace;
        let indexes = Arc::new(Indexes::default());
        let mut controllers = JoinSet::new();
        controllers.spawn(supervisor.critical(
            "helmrepository-controller",
            helm_repository::run(
                Arc::new(RepositoryContext {
                    client: client.clone(),
                    indexes: indexes.clone(),
                    limits: Limits::default(),
                    jitter: config.jitter,
                    default_interval: config.default_interval,
                }),
                config.concurrency,
                stop.clone().cancelled_owned(),
            ),
        ));
        controllers.spawn(supervisor.critical(
            "helmchart-controller",
            helm_chart::run(
                Arc::new(ChartContext {
                    client: client.clone(),
                    indexes,
                    charts: charts.clone(),
                    jitter: config.jitter,
                    metrics: config.metrics.clone(),
                    oci_limits: Default::default(),
                }),
                config.concurrency,
                stop.clone().cancelled_owned(),
            ),
        ));
        // The OCIRepository reconciler ends only when aborted: it stops with the others.
        let oci = oci_repository::run(
            client.clone(),
            charts.clone(),
            oci_repository::Options::default(),
        );
        let oci_stop = stop.clone();
        controllers.spawn(supervisor.critical("ocirepository-controller", async move {
            tokio::select! {
                () = oci => {}
                () = oci_stop.cancelled() => {}
            }
        }));
        let mut ctx = controller::Context::new(
            client,
            links,
            book,
            charts.clone(),
            ControllerOptions {
                concurrency: config.concurrency,
                requeue_dependency: config.requeue_dependency,
                jitter: config.jitter,
                watch_managed_clusters: config.remote.is_some(),
                fault: config.reconcile_fault.clone(),
                ..ControllerOptions::default()
            },
        );
        ctx.metrics = config.metrics.clone();
        let tenancy = Arc::new(crate::tenancy::Tenancy::new(config.tenancy.clone()));
        ctx.tenancy = tenancy.clone();
        let tenancy_watch = tenancy.run(ctx.client.clone());
        let tenancy_stop = stop.clone();
        controllers.spawn(async move {
            tokio::select! {
                () = tenancy_watch => {}
                () = tenancy_stop.cancelled() => {}
            }
        });
        if let Some(namespace) = &config.plan_epoch_namespace {
            match controller::epoch::claim(ctx.client.clone(), namespace).await {
                Ok(epoch) => {
                    tracing::info!(
                        epoch,
                        "plan epoch claimed: plan revisions are recorded after sending"
                    );
                    ctx.set_plan_epoch(epoch);
                }
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), kind = e.kind(), "no plan epoch: each new plan revision is recorded before sending");
                }
            }
        }
        let imported = crate::onboarding::ImportedClusters::default();
        if let Some(remote) = config.remote.clone() {
            let tenancy = ctx.tenancy.clone();
            config
                .metrics
                .set_cluster_sampler(move || cluster_counts(&tenancy.clusters(), &remote));
        }
        let mut sets = crate::sets::Context::new(
            ctx.client.clone(),
            ctx.tenancy.clone(),
            imported.clone(),
            crate::sets::SetOptions {
                concurrency: config.concurrency.div_ceil(2).max(1),
                ..Default::default()
            },
        );
        sets.metrics = Some(config.metrics.clone());
        controllers.spawn(supervisor.critical(
            "helmreleaseset-controller",
            crate::sets::run(Arc::new(sets), stop.clone().cancelled_owned()),
        ));
        if let Some(import) = config.capi_import.clone() {
            controllers.spawn(supervisor.critical(
                "capi-import",
                crate::onboarding::run(ctx.client.clone(), import, imported, stop.clone()),
            ));
        }
        let ctx = Arc::new(ctx);
        controllers.spawn(supervisor.critical(
            "helmreleasepreview-controller",
            controller::preview::run(ctx.clone(), preview_sink, stop.clone().cancelled_owned()),
        ));
        controllers.spawn(supervisor.critical(
            "helmrelease-controller",
            controller::run(ctx, trigger_rx, stop.clone().cancelled_owned()),
        ));
        tracing::info!(concurrency = config.concurrency, "hub started");
        Ok(Hub {
            stop,
            controllers,
            writer,
            push,
            grace,
            supervisor,
            charts,
        })
    }

    /// Stops the hub: controllers finish their reconciles, the in-process agents their
    /// Helm actions, and the status writer the last reports.
    pub async fn stop(mut self) {
        self.supervisor.stopping();
        self.stop.cancel();
        // Controllers end their reconciles on the cancellation; one that does not within the
        // agents' grace period (a request that never answers) is aborted, so a stop always ends.
        let controllers = &mut self.controllers;
        let joined = async { while controllers.join_next().await.is_some() {} };
        if tokio::time::timeout(self.grace + Duration::from_secs(5), joined)
            .await
            .is_err()
        {
            tracing::error!(
                remaining = self.controllers.len(),
                "controllers did not stop within the grace period; aborted"
            );
            self.controllers.abort_all();
            while self.controllers.join_next().await.is_some() {}
        }
        self.push.shutdown();
        // The writer ends when every agent's report forwarder has ended (each holds a
        // sender); a remote registry may hold senders for good, so it gets the agents'
        // grace period and a little more.
        drop(self.push);
        let mut writer = self.writer;
        if tokio::time::timeout(self.grace + Duration::from_secs(5), &mut writer)
            .await
            .is_err()
        {
            writer.abort();
        }
        tracing::info!("hub stopped");
    }

    /// Waits until a critical task of the hub's supervisor ([`HubConfig::supervisor`]: the
    /// controllers, the status writer, and whatever else shares it) ends on its own (a
    /// failure: they end on [`Hub::stop`] only); the first one that did.
    pub async fn wait(&mut self) -> crate::supervisor::TaskEnded {
        self.supervisor.failed().await
    }

    /// A handle that stops the hub's controllers when cancelled.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }
}

/// ManagedClusters by `spec.accepted` and whether their agent holds a session
/// (`flotilla_hub_managed_clusters`).
fn cluster_counts(
    clusters: &[Arc<flotilla_api::ManagedCluster>],
    remote: &Arc<dyn Links>,
) -> crate::telemetry::ClusterCounts {
    let mut c = crate::telemetry::ClusterCounts::default();
    for mc in clusters {
        let accepted = mc.spec.accepted;
        let connected = mc
            .metadata
            .name
            .clone()
            .and_then(|n| flotilla_core::ids::ClusterId::new(n).ok())
            .and_then(|id| remote.link(&TargetId::Cluster(id)))
            .is_some_and(|link| link.connected());
        match (accepted, connected) {
            (true, true) => c.accepted_connected += 1,
            (true, false) => c.accepted_disconnected += 1,
            (false, true) => c.pending_connected += 1,
            (false, false) => c.pending_disconnected += 1,
        }
    }
    c
}
