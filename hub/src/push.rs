//! Push mode: in-process agents for the targets that have no agent of their own, and
//! [`HubLinks`], the [`Links`] the HelmRelease controller uses (push agents plus an optional
//! registry of remote agents).
//!
//! [`PushAgents`] runs one `flotilla_agent::runtime` [`Agent`] per target: the hub's own
//! cluster ([`TargetId::Local`]) or a cluster reached with a kubeconfig Secret
//! ([`TargetId::KubeConfig`]: its `key`, else `value`, else `value.yaml`, as Flux reads it),
//! or a cluster reached with a workload identity token ([`TargetId::KubeConfigMap`], see
//! `workload_identity`). An agent is started when a
//! HelmRelease first needs it ([`PushAgents::ensure`]) and shut down when no HelmRelease
//! uses it any more ([`PushAgents::retire`]). Its reports go into the hub's [`ReportSink`]
//! tagged with the target; its charts come from the hub's chart store (the same
//! `Arc<dyn ChartSource>` the HelmChart controller fills); its state lives in the target
//! cluster, in the agent namespace, as a remote agent's does, so an in-process agent
//! restarted with the hub resumes its plans.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use flotilla_agent::charts::ChartSource;
use flotilla_agent::reconcile::Context;
use flotilla_agent::reconcile::render::ChartRenderer;
use flotilla_agent::runtime::{Agent, AgentHandle, AgentOptions};
use flotilla_core::agent::{Command, HeldPlan};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::kubeconfig_policy::{self, KubeconfigPolicy, Refusal};
use crate::link::{AgentLink, LinkClosed, Links, ReportSink, TargetId, TargetReport};
use crate::util::{self, error_chain};

/// Why a target's agent could not be started.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The kubeconfig Secret is missing, or has neither key.
    #[error("kubeConfig Secret {namespace}/{name}: {reason}")]
    KubeConfigSecret {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The kubeconfig does not make a client (`reason` quotes nothing of the Secret).
    #[error("kubeConfig Secret {namespace}/{name} key \"{key}\": invalid kubeconfig: {reason}")]
    InvalidKubeConfig {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// The key read.
        key: String,
        /// Why.
        reason: String,
    },
    /// The kubeconfig asks for what the hub's [`KubeconfigPolicy`] refuses.
    #[error("kubeConfig Secret {namespace}/{name} key \"{key}\": {refusal}")]
    RefusedKubeConfig {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// The key read.
        key: String,
        /// The field refused and why.
        refusal: Refusal,
    },
    /// The agent runtime did not start (its plan store could not be listed).
    #[error("starting the in-process agent of {target}: {reason}")]
    Start {
        /// The target.
        target: TargetId,
        /// Why.
        reason: String,
    },
    /// A `spec.kubeConfig.configMapRef` target gives no client (its message is the
    /// condition's).
    #[error(transparent)]
    Provider(#[from] crate::workload_identity::ProviderError),
    /// A workload identity token could not be kept for the target's client.
    #[error("{target}: {reason}")]
    Token {
        /// The target.
        target: TargetId,
        /// Why.
        reason: String,
    },
    /// Remote targets are not served in push mode.
    #[error("{target} is not served in push mode")]
    NotPush {
        /// The target.
        target: TargetId,
    },
}

impl PushError {
    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            PushError::KubeConfigSecret { .. } => "kubeconfig_secret",
            PushError::InvalidKubeConfig { .. } => "invalid_kubeconfig",
            PushError::RefusedKubeConfig { .. } => "refused_kubeconfig",
            PushError::Start { .. } => "agent_start",
            PushError::Provider(e) => e.kind(),
            PushError::Token { .. } => "token",
            PushError::NotPush { .. } => "not_push",
        }
    }

    /// Whether a retry may help (a Secret may appear, a cluster may come back).
    pub fn is_transient(&self) -> bool {
        !matches!(self, PushError::NotPush { .. })
    }
}

/// How push agents run.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// Namespace of the agents' state Secrets in each target cluster (created if missing).
    pub agent_namespace: String,
    /// The runtime's options.
    pub agent: AgentOptions,
    /// What a kubeconfig Secret may ask of the hub (the `--insecure-kubeconfig-*` flags).
    pub kubeconfig: KubeconfigPolicy,
}

/// The in-process agent of one target.
pub struct PushLink {
    target: TargetId,
    handle: AgentHandle,
    /// The renewal of its workload identity token, if it has one.
    renewal: Option<Renewal>,
}

/// A token file kept current by a task; stopped (and the file removed) with its agent.
struct Renewal {
    task: tokio::task::AbortHandle,
    file: std::path::PathBuf,
}

impl PushLink {
    fn stop(&self) {
        let _ = self.handle.shutdown();
        if let Some(r) = &self.renewal {
            r.task.abort();
            let _ = std::fs::remove_file(&r.file);
        }
    }
}

impl fmt::Debug for PushLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PushLink")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl AgentLink for PushLink {
    fn send(&self, command: Command) -> Result<(), LinkClosed> {
        self.handle.send(command).map_err(|_| LinkClosed {
            target: self.target.clone(),
        })
    }

    fn connected(&self) -> bool {
        true
    }

    fn held(&self) -> Vec<HeldPlan> {
        self.handle.held()
    }
}

/// The in-process agents of the hub, by target.
pub struct PushAgents {
    hub_config: kube::Config,
    hub_client: Client,
    charts: Arc<dyn ChartSource>,
    sink: ReportSink,
    options: PushOptions,
    agents: Mutex<HashMap<TargetId, Arc<PushLink>>>,
    starting: tokio::sync::Mutex<()>,
    /// The hub's own user name in its cluster, asked once (workload identity refuses it).
    hub_user: tokio::sync::OnceCell<String>,
}

impl fmt::Debug for PushAgents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PushAgents")
            .field("targets", &self.targets())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl PushAgents {
    /// Push agents for the hub's cluster (`hub_config`) and the kubeconfig Secrets in it,
    /// reading charts from `charts` and reporting into `sink`.
    pub fn new(
        hub_config: kube::Config,
        hub_client: Client,
        charts: Arc<dyn ChartSource>,
        sink: ReportSink,
        options: PushOptions,
    ) -> PushAgents {
        PushAgents {
            hub_config,
            hub_client,
            charts,
            sink,
            options,
            agents: Mutex::new(HashMap::new()),
            starting: tokio::sync::Mutex::new(()),
            hub_user: tokio::sync::OnceCell::new(),
        }
    }

    /// The targets with a running agent.
    pub fn targets(&self) -> Vec<TargetId> {
        let mut t: Vec<_> = self.lock().keys().cloned().collect();
        t.sort();
        t
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TargetId, Arc<PushLink>>> {
        self.agents.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The agent of `target`, started if it is not running.
    pub async fn ensure(&self, target: &TargetId) -> Result<Arc<dyn AgentLink>, PushError> {
        if let Some(link) = self.lock().get(target) {
            return Ok(link.clone());
        }
        let _starting = self.starting.lock().await;
        if let Some(link) = self.lock().get(target) {
            return Ok(link.clone());
        }
        let mut renewal = None;
        let config = match target {
            TargetId::Local => self.hub_config.clone(),
            TargetId::KubeConfig {
                namespace,
                name,
                key,
            } => self.kubeconfig(namespace, name, key.as_deref()).await?,
            TargetId::KubeConfigMap { namespace, name } => {
                let (config, r) = self.workload_identity(target, namespace, name).await?;
                renewal = Some(r);
                config
            }
            TargetId::Cluster(_) => {
                return Err(PushError::NotPush {
                    target: target.clone(),
                });
            }
        };
        let stop_renewal = |r: &Option<Renewal>| {
            if let Some(r) = r {
                r.task.abort();
                let _ = std::fs::remove_file(&r.file);
            }
        };
        let start_err = |reason: String| PushError::Start {
            target: target.clone(),
            reason,
        };
        let started = async {
            let ctx = Context::from_config(
                config,
                &self.options.agent_namespace,
                Arc::new(ChartRenderer::default()),
            )
            .map_err(|e| start_err(error_chain(&e)))?;
            ensure_namespace(ctx.cluster.client(), &self.options.agent_namespace)
                .await
                .map_err(start_err)?;
            Agent::start(ctx, self.charts.clone(), self.options.agent.clone())
                .await
                .map_err(|e| start_err(error_chain(&e)))
        }
        .await;
        let (handle, mut reports) = match started {
            Ok(started) => started,
            Err(e) => {
                stop_renewal(&renewal);
                return Err(e);
            }
        };
        let sink = self.sink.clone();
        let t = target.clone();
        tokio::spawn(async move {
            while let Some(report) = reports.recv().await {
                if sink
                    .send(TargetReport {
                        target: t.clone(),
                        report,
                    })
                    .is_err()
                {
                    break;
                }
            }
            tracing::debug!(target = %t, "in-process agent's reports ended");
        });
        tracing::info!(target = %target, "in-process agent started");
        let link = Arc::new(PushLink {
            target: target.clone(),
            handle,
            renewal,
        });
        self.lock().insert(target.clone(), link.clone());
        Ok(link)
    }

    /// Stops the agent of `target` (in-flight actions finish first; its plans stay in its
    /// cluster).
    pub fn retire(&self, target: &TargetId) {
        if let Some(link) = self.lock().remove(target) {
            link.stop();
            tracing::info!(target = %target, "in-process agent retired: no HelmRelease uses it");
        }
    }

    /// Stops every agent.
    pub fn shutdown(&self) {
        for (target, link) in self.lock().drain() {
            link.stop();
            tracing::info!(target = %target, "in-process agent stopping");
        }
    }

    async fn kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        key: Option<&str>,
    ) -> Result<kube::Config, PushError> {
        kubeconfig_secret_config(
            &self.hub_client,
            &self.options.kubeconfig,
            namespace,
            name,
            key,
        )
        .await
    }
}

/// The client configuration of kubeconfig Secret `namespace/name` of the hub's cluster (its
/// `key`, else `value`, else `value.yaml`), checked by `policy` before any client exists.
/// No message quotes the Secret (see `kubeconfig_policy`); each names the Secret and key.
pub async fn kubeconfig_secret_config(
    hub_client: &Client,
    policy: &KubeconfigPolicy,
    namespace: &str,
    name: &str,
    key: Option<&str>,
) -> Result<kube::Config, PushError> {
    let secret_err = |reason: String| PushError::KubeConfigSecret {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        reason,
    };
    let data = util::secret_data(hub_client, namespace, name)
        .await
        .map_err(|e| secret_err(error_chain(&e)))?
        .ok_or_else(|| secret_err("not found".into()))?;
    let key = kubeconfig_key(&data, key).map_err(secret_err)?;
    let raw = data[key].as_slice();
    let invalid = |reason: String| PushError::InvalidKubeConfig {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        key: key.to_owned(),
        reason,
    };
    let text = std::str::from_utf8(raw).map_err(|_| invalid("not UTF-8".into()))?;
    // Checked before any client exists: the policy decides what the hub may do for
    // the Secret's author.
    let kubeconfig =
        Kubeconfig::from_yaml(text).map_err(|e| invalid(kubeconfig_policy::load_error(&e)))?;
    policy
        .check(&kubeconfig)
        .map_err(|refusal| PushError::RefusedKubeConfig {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.to_owned(),
            refusal,
        })?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| invalid(kubeconfig_policy::load_error(&e)))
}

impl PushAgents {
    /// The client configuration of a `spec.kubeConfig.configMapRef` target (ConfigMap
    /// `namespace/name`, provider `generic`): a token of its ServiceAccount from the hub's
    /// cluster, in a file only the hub's user reads, renewed by a task until the agent stops.
    async fn workload_identity(
        &self,
        target: &TargetId,
        namespace: &str,
        name: &str,
    ) -> Result<(kube::Config, Renewal), PushError> {
        use crate::workload_identity as wi;
        let data = util::config_map_data(&self.hub_client, namespace, name)
            .await
            .map_err(|e| wi::ProviderError::Read {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                reason: error_chain(&e),
            })?;
        let generic = wi::parse(namespace, name, data.as_ref())?;
        let hub_user = self
            .hub_user
            .get_or_try_init(|| wi::hub_user(&self.hub_client))
            .await
            .map_err(|e| wi::ProviderError::HubIdentity {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                reason: util::api_error("creating", "SelfSubjectReview", "for the hub", &e),
            })?
            .clone();
        wi::refuse_hub_identity(namespace, name, &generic, &hub_user)?;
        let (token, lifetime) = wi::mint(&self.hub_client, namespace, name, &generic).await?;
        let token_err = |reason: String| PushError::Token {
            target: target.clone(),
            reason,
        };
        let file = token_dir()
            .map_err(|e| token_err(format!("the token directory: {e}")))?
            .join(format!("{namespace}_{name}.token"));
        wi::write_token(&file, &token).map_err(|e| token_err(format!("writing the token: {e}")))?;
        drop(token);
        let config = match wi::client_config(&generic, &file) {
            Ok(config) => config,
            Err(reason) => {
                let _ = std::fs::remove_file(&file);
                return Err(token_err(reason));
            }
        };
        let (client, t, path) = (self.hub_client.clone(), target.clone(), file.clone());
        // The client sends the token to the first address: every renewed token is for it.
        let audiences = generic.audiences.clone();
        let (namespace, name) = (namespace.to_owned(), name.to_owned());
        let task = tokio::spawn(async move {
            let mut after = wi::renew_after(lifetime);
            loop {
                tokio::time::sleep(after).await;
                // The ConfigMap as it is now: a new audience or ServiceAccount applies at the
                // next renewal.
                let current = match util::config_map_data(&client, &namespace, &name).await {
                    Ok(data) => wi::parse(&namespace, &name, data.as_ref()).and_then(|mut g| {
                        wi::refuse_hub_identity(&namespace, &name, &g, &hub_user)?;
                        g.audiences = audiences.clone();
                        Ok(g)
                    }),
                    Err(e) => Err(wi::ProviderError::Read {
                        namespace: namespace.clone(),
                        name: name.clone(),
                        reason: error_chain(&e),
                    }),
                };
                let minted = match current {
                    Ok(generic) => wi::mint(&client, &namespace, &name, &generic).await,
                    Err(e) => Err(e),
                };
                after = match minted {
                    Ok((token, lifetime)) => match wi::write_token(&path, &token) {
                        Ok(()) => wi::renew_after(lifetime),
                        Err(e) => {
                            tracing::warn!(target = %t, error = %e, "writing the renewed token failed");
                            std::time::Duration::from_secs(30)
                        }
                    },
                    Err(e) => {
                        tracing::warn!(target = %t, error = %e, "renewing the workload identity token failed");
                        std::time::Duration::from_secs(30)
                    }
                };
            }
        });
        Ok((
            config,
            Renewal {
                task: task.abort_handle(),
                file,
            },
        ))
    }
}

/// The directory of the workload identity tokens: private to the hub's user, one per hub
/// process.
fn token_dir() -> std::io::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("flotilla-hub-{}-tokens", std::process::id()));
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(&dir)?;
    Ok(dir)
}

/// The kubeconfig in a Secret's data, as Flux reads `spec.kubeConfig.secretRef`: `key` when
/// given (and only it), else `value`, else `value.yaml`; `Err` says what is missing.
#[cfg(test)]
fn kubeconfig_bytes<'a>(
    data: &'a std::collections::BTreeMap<String, Vec<u8>>,
    key: Option<&str>,
) -> Result<&'a [u8], String> {
    kubeconfig_key(data, key).map(|k| data[k].as_slice())
}

/// The key of the kubeconfig in a Secret's data (see `kubeconfig_bytes`).
fn kubeconfig_key<'a>(
    data: &'a std::collections::BTreeMap<String, Vec<u8>>,
    key: Option<&str>,
) -> Result<&'a str, String> {
    let present = |k: &str| data.get_key_value(k).map(|(k, _)| k.as_str());
    match key.filter(|k| !k.is_empty()) {
        Some(key) => present(key)
            .ok_or_else(|| format!("has no key '{key}' (spec.kubeConfig.secretRef.key)")),
        None => present("value")
            .or_else(|| present("value.yaml"))
            .ok_or_else(|| "has neither key 'value' nor 'value.yaml'".to_owned()),
    }
}

impl Links for PushAgents {
    fn link(&self, target: &TargetId) -> Option<Arc<dyn AgentLink>> {
        self.lock()
            .get(target)
            .map(|l| l.clone() as Arc<dyn AgentLink>)
    }
}

/// Creates `name` when missing; `Err` is the sentence naming the call that failed.
async fn ensure_namespace(client: &Client, name: &str) -> Result<(), String> {
    let api: Api<Namespace> = Api::all(client.clone());
    let found = api
        .get_opt(name)
        .await
        .map_err(|e| util::api_error("getting", "Namespace", name, &e))?;
    if found.is_some() {
        return Ok(());
    }
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(util::api_error("creating", "Namespace", name, &e)),
    }
}

/// Why a HelmRelease's target has no link.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// `spec.clusterRef` names a cluster whose agent is not connected (or not registered).
    #[error("no agent connected for cluster {cluster}")]
    NotConnected {
        /// The cluster.
        cluster: String,
    },
    /// The push agent could not start.
    #[error(transparent)]
    Push(#[from] PushError),
}

/// The links the HelmRelease controller uses: push agents for the hub's cluster and
/// kubeconfig Secrets, and an optional registry of remote agents (the session server) for
/// `spec.clusterRef` targets, which is also asked first for a kubeconfig target (a cluster
/// with its own connected agent is served by it).
#[derive(Debug)]
pub struct HubLinks {
    /// The in-process agents.
    pub push: Arc<PushAgents>,
    /// The remote agents, once the session server exists.
    pub remote: Option<Arc<dyn Links>>,
}

impl HubLinks {
    /// The link serving `target`: a connected remote agent if the registry has one, else
    /// a push agent (started if needed); for a `clusterRef` target, the registry's link
    /// (connected or not: it keeps the commands until its agent connects).
    pub async fn resolve(&self, target: &TargetId) -> Result<Arc<dyn AgentLink>, TargetError> {
        let remote = self.remote.as_ref().and_then(|r| r.link(target));
        match target {
            TargetId::Cluster(id) => remote.ok_or_else(|| TargetError::NotConnected {
                cluster: id.to_string(),
            }),
            TargetId::KubeConfig { .. } | TargetId::KubeConfigMap { .. } | TargetId::Local => {
                match remote {
                    Some(link) if link.connected() => Ok(link),
                    _ => Ok(self.push.ensure(target).await?),
                }
            }
        }
    }
}

impl Links for HubLinks {
    fn link(&self, target: &TargetId) -> Option<Arc<dyn AgentLink>> {
        let remote = self.remote.as_ref().and_then(|r| r.link(target));
        match (target, remote) {
            (TargetId::Cluster(_), remote) => remote,
            (_, Some(link)) if link.connected() => Some(link),
            _ => self.push.link(target),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn the_kubeconfig_is_the_given_key_only_else_value_else_value_yaml() {
        let data = |keys: &[&str]| -> BTreeMap<String, Vec<u8>> {
            keys.iter()
                .map(|k| ((*k).to_owned(), k.as_bytes().to_vec()))
                .collect()
        };
        let both = data(&["value", "value.yaml", "edge.yaml"]);
        assert_eq!(kubeconfig_bytes(&both, None), Ok(&b"value"[..]));
        assert_eq!(kubeconfig_bytes(&both, Some("")), Ok(&b"value"[..]));
        assert_eq!(
            kubeconfig_bytes(&both, Some("edge.yaml")),
            Ok(&b"edge.yaml"[..])
        );
        assert_eq!(
            kubeconfig_bytes(&data(&["value.yaml"]), None),
            Ok(&b"value.yaml"[..])
        );
        assert_eq!(
            kubeconfig_bytes(&data(&["value"]), Some("value.yaml")),
            Err("has no key 'value.yaml' (spec.kubeConfig.secretRef.key)".to_owned()),
            "a key given is the only one read"
        );
        assert_eq!(
            kubeconfig_bytes(&data(&["other"]), None),
            Err("has neither key 'value' nor 'value.yaml'".to_owned())
        );
    }
}
