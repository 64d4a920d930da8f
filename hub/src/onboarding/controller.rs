//! The import controller: waits for the Cluster API CRD, watches the selected `Cluster`
//! objects (`cluster.x-k8s.io/v1beta2`), and for each one observes the Cluster, its
//! ManagedCluster and (only while the agent has not joined) its kubeconfig Secret, asks
//! [`decide`](super::decide::decide), and acts. Every imported Cluster is looked at again
//! every [`ImportOptions::resync`] (deadlines; Clusters deleted while the hub was not
//! watching).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_api::ManagedCluster;
use flotilla_api::fleet::condition;
use flotilla_core::meta::{ConditionStatus, Conditions as _};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams,
};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::bootstrap::{self, AgentInstall};
use super::decide::{
    self, Attempt, ClusterView, Decision, KubeconfigState, ManagedAction, ManagedView, Step, Timing,
};
use super::*;
use crate::push::{PushError, kubeconfig_secret_config};
use crate::session::tokens;
use crate::util::{FIELD_MANAGER, api_error, error_chain};

/// How many Clusters are reconciled at once.
const CONCURRENCY: usize = 4;
/// The wait after a failed step.
const RETRY: Duration = Duration::from_secs(30);

/// The Cluster API `Cluster` resource the controller watches.
pub fn cluster_resource() -> ApiResource {
    ApiResource {
        group: crate::capi::GROUP.into(),
        version: "v1beta2".into(),
        api_version: format!("{}/v1beta2", crate::capi::GROUP),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    }
}

struct Ctx {
    client: Client,
    options: ImportOptions,
    operator_values: flotilla_chart::Values,
    store: Store<DynamicObject>,
    resource: ApiResource,
    /// What was last applied to each ManagedCluster (labels and annotations), to skip
    /// applies that change nothing.
    applied: Mutex<HashMap<String, String>>,
    /// Conflicts already logged.
    conflicts: Mutex<HashSet<String>>,
}

/// Runs import until `stop` is cancelled. With an unreadable `--capi-agent-values` (the
/// binary checks it at start) it logs an error and imports nothing.
///
/// Once Cluster API is served, the watched Clusters are published in `view` for the
/// HelmReleaseSet controller (`.Cluster` of a `valuesTemplate`).
pub async fn run(
    client: Client,
    options: ImportOptions,
    view: super::ImportedClusters,
    stop: CancellationToken,
) {
    let operator_values = match &options.agent_values {
        None => flotilla_chart::Values::new(),
        Some(path) => match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| bootstrap::operator_values(&t))
        {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "--capi-agent-values: cannot be read; Cluster API import is off");
                stop.cancelled().await;
                return;
            }
        },
    };
    let resource = cluster_resource();
    // A hub without Cluster API runs unchanged: look for the CRD now and then.
    loop {
        match client.list_api_group_resources(&resource.api_version).await {
            Ok(list) if list.resources.iter().any(|r| r.name == "clusters") => break,
            Ok(_) => {
                tracing::debug!(
                    "Cluster API ({}) is not served; looking again later",
                    resource.api_version
                );
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                tracing::debug!(
                    "Cluster API ({}) is not served; looking again later",
                    resource.api_version
                );
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "looking for Cluster API");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(options.crd_poll) => {}
        }
    }
    tracing::info!(
        selector = %options.cluster_selector,
        namespace_selector = %options.namespace_selector,
        "Cluster API is served: importing Clusters"
    );
    let writer = reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    view.publish(store.clone());
    let mut config = watcher::Config::default();
    if !options.cluster_selector.is_empty() {
        config = config.labels(&options.cluster_selector);
    }
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut events = Box::pin(reflector::reflector(writer, watcher(api, config)).default_backoff());
    let ctx = Arc::new(Ctx {
        client,
        options,
        operator_values,
        store,
        resource,
        applied: Mutex::default(),
        conflicts: Mutex::default(),
    });
    let mut pending: HashMap<String, Instant> = HashMap::new();
    let mut resync = tokio::time::interval(ctx.options.resync);
    loop {
        let next = pending.values().min().copied();
        let due = async move {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            event = events.next() => match event {
                Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o))) => {
                    pending.insert(key_of(&o), Instant::now());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::warn!(error = %error_chain(&e), "watching Cluster API Clusters"),
                None => return,
            },
            _ = resync.tick() => {
                // Everything is due now (an agent that joined is seen here: the
                // ManagedCluster's conditions are not watched).
                let now = Instant::now();
                for o in ctx.store.state() {
                    pending.insert(key_of(&o), now);
                }
                for key in imported_keys(&ctx.client).await {
                    pending.insert(key, now);
                }
                upgrade_round(&ctx).await;
            }
            () = due => {
                let now = Instant::now();
                let keys: Vec<String> = pending.iter().filter(|(_, at)| **at <= now).map(|(k, _)| k.clone()).collect();
                for k in &keys {
                    pending.remove(k);
                }
                let results: Vec<(String, Option<Duration>)> = futures::stream::iter(keys)
                    .map(|key| {
                        let ctx = ctx.clone();
                        async move {
                            let requeue = reconcile(&ctx, &key).await;
                            (key, requeue)
                        }
                    })
                    .buffer_unordered(CONCURRENCY)
                    .collect()
                    .await;
                for (key, requeue) in results {
                    if let Some(after) = requeue {
                        let at = Instant::now() + after;
                        let slot = pending.entry(key).or_insert(at);
                        *slot = (*slot).min(at);
                    }
                }
            }
        }
    }
}

fn key_of(o: &DynamicObject) -> String {
    format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())
}

/// The Clusters of the imported ManagedClusters (their link annotation).
async fn imported_keys(client: &Client) -> Vec<String> {
    let api: Api<ManagedCluster> = Api::all(client.clone());
    match api
        .list_metadata(&ListParams::default().labels(&format!("{LABEL_IMPORTED}=true")))
        .await
    {
        Ok(list) => list
            .items
            .iter()
            .filter_map(|m| m.annotations().get(ANNOTATION_CLUSTER_REF).cloned())
            .filter(|k| k.contains('/'))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "listing imported ManagedClusters");
            Vec::new()
        }
    }
}

/// Reconciles Cluster `key`; returns when to look again (besides the resync).
async fn reconcile(ctx: &Ctx, key: &str) -> Option<Duration> {
    match reconcile_inner(ctx, key).await {
        Ok(requeue) => requeue,
        Err(e) => {
            tracing::warn!(cluster = key, error = %e, "Cluster API import");
            Some(RETRY)
        }
    }
}

async fn reconcile_inner(ctx: &Ctx, key: &str) -> Result<Option<Duration>, String> {
    let (namespace, name) = key.split_once('/').ok_or("not namespace/name")?;
    let mc_name = managed_cluster_name(namespace, name);
    let cluster = observe_cluster(ctx, namespace, name).await?;
    let mcs: Api<ManagedCluster> = Api::all(ctx.client.clone());
    let managed_obj = mcs
        .get_opt(&mc_name)
        .await
        .map_err(|e| api_error("getting", "ManagedCluster", &mc_name, &e))?;
    let managed = managed_obj.as_ref().map(managed_view);
    let needs_kubeconfig = cluster
        .as_ref()
        .is_some_and(|c| c.selected && c.control_plane_initialized && !c.paused && !c.deleting)
        && !managed.as_ref().is_some_and(|m| m.joined);
    let secret = crate::capi::kubeconfig_secret_name(name);
    let (kubeconfig, client_config) = if needs_kubeconfig {
        match kubeconfig_secret_config(
            &ctx.client,
            &ctx.options.kubeconfig_policy,
            namespace,
            &secret,
            None,
        )
        .await
        {
            Ok(config) => (KubeconfigState::Usable, Some(config)),
            Err(PushError::KubeConfigSecret { reason, .. }) if reason == "not found" => (
                KubeconfigState::Missing {
                    secret: format!("{namespace}/{secret}"),
                },
                None,
            ),
            Err(e) => (KubeconfigState::Invalid(e.to_string()), None),
        }
    } else {
        (KubeconfigState::NotRead, None)
    };
    let timing = Timing {
        join_timeout: ctx.options.join_timeout,
        max_attempts: ctx.options.max_attempts,
    };
    let decision = decide::decide(
        key,
        cluster.as_ref(),
        managed.as_ref(),
        &kubeconfig,
        unix_now(),
        timing,
    );
    let token_id = managed_obj
        .as_ref()
        .and_then(|m| m.annotations().get(ANNOTATION_TOKEN_ID).cloned());
    act(ctx, key, &mc_name, decision, client_config, token_id).await
}

async fn observe_cluster(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
) -> Result<Option<ClusterView>, String> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &ctx.resource);
    let Some(obj) = api
        .get_opt(name)
        .await
        .map_err(|e| api_error("getting", "Cluster", &format!("{namespace}/{name}"), &e))?
    else {
        return Ok(None);
    };
    let watched = ctx
        .store
        .get(&ObjectRef::new_with(name, ctx.resource.clone()).within(namespace))
        .is_some();
    let selected = watched && namespace_selected(ctx, namespace).await?;
    let doc = serde_json::to_value(&obj).unwrap_or(Value::Null);
    let class = doc["spec"]["topology"]["classRef"]["name"]
        .as_str()
        .or_else(|| doc["spec"]["topology"]["class"].as_str())
        .map(str::to_owned);
    Ok(Some(ClusterView {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: obj.uid().unwrap_or_default(),
        labels: obj.labels().clone(),
        class,
        paused: doc["spec"]["paused"].as_bool() == Some(true),
        deleting: obj.metadata.deletion_timestamp.is_some(),
        control_plane_initialized: crate::capi::control_plane_initialized(&doc),
        selected,
    }))
}

async fn namespace_selected(ctx: &Ctx, namespace: &str) -> Result<bool, String> {
    if ctx.options.namespace_selector.is_empty() {
        return Ok(true);
    }
    // The API server matches the selector.
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let list = api
        .list_metadata(
            &ListParams::default()
                .labels(&ctx.options.namespace_selector)
                .fields(&format!("metadata.name={namespace}")),
        )
        .await
        .map_err(|e| api_error("listing", "Namespace", namespace, &e))?;
    Ok(!list.items.is_empty())
}

fn managed_view(mc: &ManagedCluster) -> ManagedView {
    let annotations = mc.annotations();
    let imported_from = annotations.get(ANNOTATION_CLUSTER_REF).map(|r| {
        (
            r.clone(),
            annotations
                .get(ANNOTATION_CLUSTER_UID)
                .cloned()
                .unwrap_or_default(),
        )
    });
    let bootstrap = annotations
        .get(ANNOTATION_ATTEMPTS)
        .and_then(|c| c.parse::<u32>().ok())
        .map(|count| Attempt {
            count,
            at: annotations
                .get(ANNOTATION_BOOTSTRAPPED_AT)
                .and_then(|t| parse_rfc3339(t))
                .unwrap_or(0),
        });
    let joined = mc
        .status
        .as_ref()
        .is_some_and(|s| s.conditions.is_true(condition::JOINED));
    ManagedView {
        imported_from,
        deleting: mc.metadata.deletion_timestamp.is_some(),
        joined,
        bootstrap,
        labels: mc.labels().clone(),
    }
}

async fn act(
    ctx: &Ctx,
    key: &str,
    mc_name: &str,
    decision: Decision,
    client_config: Option<kube::Config>,
    token_id: Option<String>,
) -> Result<Option<Duration>, String> {
    let mcs: Api<ManagedCluster> = Api::all(ctx.client.clone());
    match &decision.managed {
        ManagedAction::Leave => {}
        ManagedAction::Conflict(why) => {
            let first = ctx
                .conflicts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key.to_owned());
            if first {
                tracing::warn!(cluster = key, managed_cluster = mc_name, "{why}");
            }
            return Ok(None);
        }
        ManagedAction::Delete => {
            match mcs.delete(mc_name, &DeleteParams::default()).await {
                Ok(_) => tracing::info!(
                    cluster = key,
                    managed_cluster = mc_name,
                    "Cluster deleted: its ManagedCluster is deleted"
                ),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(api_error("deleting", "ManagedCluster", mc_name, &e)),
            }
            ctx.applied
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(mc_name);
        }
        ManagedAction::Ensure {
            labels,
            annotations,
        } => {
            ensure_managed(ctx, &mcs, mc_name, labels, annotations).await?;
        }
    }
    let Some(step) = decision.step else {
        return Ok(decision.requeue);
    };
    let (step, requeue) = match step {
        Step::Bootstrap { attempt } => {
            match bootstrap_agent(ctx, key, mc_name, attempt, client_config).await {
                Ok(deadline) => (
                    Step::WaitingForAgent { attempt, deadline },
                    Some(ctx.options.join_timeout),
                ),
                Err(e) => {
                    write_condition(ctx, mc_name, ConditionStatus::False, "BootstrapFailed", format!("installing the agent (attempt {attempt} of {}) through the kubeconfig of Cluster {key}: {e}", ctx.options.max_attempts)).await?;
                    return Ok(Some(RETRY));
                }
            }
        }
        Step::Joined => {
            if let Some(id) = token_id {
                retire_token(ctx, mc_name, &id).await?;
            }
            (Step::Joined, decision.requeue)
        }
        other => (other, decision.requeue),
    };
    let (status, message) = message_of(ctx, key, &step);
    write_condition(ctx, mc_name, status, step.reason(), message).await?;
    Ok(requeue)
}

fn message_of(ctx: &Ctx, key: &str, step: &Step) -> (ConditionStatus, String) {
    let max = ctx.options.max_attempts;
    let ns = &ctx.options.agent_namespace;
    let text = match step {
        Step::Paused => {
            format!("Cluster {key} is paused (spec.paused): the hub installs nothing into it")
        }
        Step::WaitingForControlPlane => format!(
            "waiting for the control plane of Cluster {key} to be initialized (status.initialization.controlPlaneInitialized)"
        ),
        Step::WaitingForKubeconfig { secret } => {
            format!("waiting for the kubeconfig Secret {secret} of Cluster {key}")
        }
        Step::KubeconfigInvalid(why) => format!("Cluster {key}: {why}"),
        Step::Bootstrap { attempt } => format!("installing the agent (attempt {attempt} of {max})"),
        Step::WaitingForAgent { attempt, deadline } => format!(
            "the agent is installed in namespace {ns} (attempt {attempt} of {max}); waiting for it to join until {}",
            rfc3339(*deadline)
        ),
        Step::Joined => {
            return (
                ConditionStatus::True,
                "the agent joined: the hub reaches the cluster over the agent's session only"
                    .into(),
            );
        }
        Step::AgentNeverConnected { attempts } => format!(
            "the agent was installed {attempts} times in namespace {ns} and never joined; see its logs in the workload cluster, then remove annotation {ANNOTATION_ATTEMPTS} to try again"
        ),
    };
    (ConditionStatus::False, text)
}

async fn ensure_managed(
    ctx: &Ctx,
    mcs: &Api<ManagedCluster>,
    name: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<(), String> {
    if mcs
        .get_metadata_opt(name)
        .await
        .map_err(|e| api_error("getting", "ManagedCluster", name, &e))?
        .is_none()
    {
        // Created accepted; `spec.accepted` is the administrator's afterwards (an `Update`
        // entry, which import's applies never remove).
        let mc = ManagedCluster {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            spec: flotilla_api::fleet::ManagedClusterSpec {
                accepted: true,
                ..Default::default()
            },
            status: None,
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        ctx.applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        match mcs.create(&params, &mc).await {
            Ok(_) => tracing::info!(managed_cluster = name, "imported a Cluster API Cluster"),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(api_error("creating", "ManagedCluster", name, &e)),
        }
    }
    let body = json!({
        "apiVersion": "fleet.flotilla.dev/v1",
        "kind": "ManagedCluster",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
    });
    let fingerprint = body.to_string();
    if ctx
        .applied
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        == Some(&fingerprint)
    {
        return Ok(());
    }
    mcs.patch(
        name,
        &PatchParams::apply(IMPORT_FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(|e| api_error("applying", "ManagedCluster", name, &e))?;
    ctx.applied
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.to_owned(), fingerprint);
    Ok(())
}

/// Makes a token and installs the agent; returns the join deadline (Unix seconds).
async fn bootstrap_agent(
    ctx: &Ctx,
    key: &str,
    mc_name: &str,
    attempt: u32,
    client_config: Option<kube::Config>,
) -> Result<i64, String> {
    let mut config = client_config.ok_or("no kubeconfig")?;
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(30));
    let workload = Client::try_from(config)
        .map_err(|e| format!("building the client: {}", error_chain(&e)))?;
    let options = tokens::TokenOptions {
        scope: tokens::TokenScope::Cluster(mc_name.to_owned()),
        ttl: Some(ctx.options.join_timeout),
        uses: Some(1),
        auto_accept: false,
    };
    let token = tokens::create(ctx.client.clone(), &ctx.options.hub_namespace, &options)
        .await
        .map_err(|e| format!("making a bootstrap token: {e}"))?;
    let install = AgentInstall {
        hub_url: ctx.options.hub_url.clone(),
        ca_pin: ctx.options.ca_pin.clone(),
        cluster_name: mc_name.to_owned(),
        token: token.expose(),
        image: ctx.options.agent_image.clone(),
        namespace: ctx.options.agent_namespace.clone(),
        operator_values: ctx.operator_values.clone(),
        attempt,
    };
    let applied = match bootstrap::render(&install) {
        Ok(objects) => bootstrap::apply(&workload, &objects, &install.namespace).await,
        Err(e) => Err(e),
    };
    drop(install);
    if let Err(e) = applied {
        // The token was never handed over: it goes.
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.options.hub_namespace);
        let _ = secrets
            .delete(&token.secret_name(), &DeleteParams::default())
            .await;
        return Err(e);
    }
    let now = unix_now();
    let patch = json!({"metadata": {"annotations": {
        ANNOTATION_ATTEMPTS: attempt.to_string(),
        ANNOTATION_BOOTSTRAPPED_AT: rfc3339(now),
        ANNOTATION_TOKEN_ID: token.id(),
        ANNOTATION_AGENT_IMAGE: ctx.options.agent_image,
        ANNOTATION_UPGRADING: null,
        ANNOTATION_UPGRADED_AT: null,
    }}});
    let mcs: Api<ManagedCluster> = Api::all(ctx.client.clone());
    mcs.patch(mc_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| api_error("annotating", "ManagedCluster", mc_name, &e))?;
    tracing::info!(
        cluster = key,
        managed_cluster = mc_name,
        attempt,
        token_id = token.id(),
        "agent installed through the Cluster's kubeconfig"
    );
    Ok(now.saturating_add(i64::try_from(ctx.options.join_timeout.as_secs()).unwrap_or(i64::MAX)))
}

/// One round of agent upgrades ([`super::upgrade::plan`]) over the imported
/// ManagedClusters; failures are logged and retried at the next round.
async fn upgrade_round(ctx: &Ctx) {
    use super::upgrade::{self, AgentView, UpgradeAction};
    let mcs: Api<ManagedCluster> = Api::all(ctx.client.clone());
    let list = match mcs
        .list(&ListParams::default().labels(&format!("{LABEL_IMPORTED}=true")))
        .await
    {
        Ok(l) => l.items,
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "listing imported ManagedClusters for agent upgrades");
            return;
        }
    };
    let views: Vec<AgentView> = list.iter().map(agent_view).collect();
    let image = &ctx.options.agent_image;
    let round = upgrade::plan(
        &views,
        upgrade::Rollout {
            image,
            parallel: ctx.options.upgrade_parallelism,
            timeout: ctx.options.upgrade_timeout,
            now: unix_now(),
            sessions_since: ctx.options.hub_started_at,
        },
    );
    if !round.stopped_by.is_empty() && round.waiting > 0 {
        tracing::debug!(
            %image,
            stopped_by = ?round.stopped_by,
            waiting = round.waiting,
            "the agent upgrade rollout is stopped: an upgraded agent did not reconnect"
        );
    }
    for action in round.actions {
        let result = match &action {
            UpgradeAction::Done(name) => {
                let patch = json!({"metadata": {"annotations": {
                    ANNOTATION_AGENT_IMAGE: image,
                    ANNOTATION_UPGRADING: null,
                    ANNOTATION_UPGRADED_AT: null,
                    ANNOTATION_UPGRADE_FAILED: null,
                }}});
                match mcs
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {
                        tracing::info!(managed_cluster = %name, %image, "agent upgraded: it reconnected");
                        write_condition_of(
                            ctx,
                            name,
                            CONDITION_UPGRADE,
                            ConditionStatus::True,
                            "Upgraded",
                            format!("the agent was upgraded to image {image} and reconnected"),
                        )
                        .await
                    }
                    Err(e) => Err(api_error("annotating", "ManagedCluster", name, &e)),
                }
            }
            UpgradeAction::NotReconnected { name, applied_at } => {
                not_reconnected(ctx, &mcs, name, *applied_at, round.waiting).await
            }
            UpgradeAction::Start(name) => match list.iter().find(|m| m.name_any() == *name) {
                // Not applied (a kubeconfig refused or unreachable): said on the
                // ManagedCluster, and tried again at the next round.
                Some(mc) => match start_upgrade(ctx, mc).await {
                    Err(e) => {
                        let said = write_condition_of(
                            ctx,
                            name,
                            CONDITION_UPGRADE,
                            ConditionStatus::False,
                            "UpgradeNotApplied",
                            format!("the agent upgrade to image {image} could not be applied: {e}"),
                        )
                        .await;
                        Err(match said {
                            Ok(()) => e,
                            Err(also) => format!("{e}; {also}"),
                        })
                    }
                    ok => ok,
                },
                None => Ok(()),
            },
        };
        if let Err(e) = result {
            tracing::warn!(action = ?action, error = %e, "agent upgrade");
        }
    }
}

/// Records that the upgrade of ManagedCluster `name` to the configured image, applied at
/// `applied_at`, did not reconnect: the failure annotation (which stops the rollout), the
/// in-flight annotations removed, and the `AgentUpgrade` condition.
async fn not_reconnected(
    ctx: &Ctx,
    mcs: &Api<ManagedCluster>,
    name: &str,
    applied_at: i64,
    waiting: usize,
) -> Result<(), String> {
    let image = &ctx.options.agent_image;
    let patch = json!({"metadata": {"annotations": {
        ANNOTATION_UPGRADE_FAILED: image,
        ANNOTATION_UPGRADING: null,
        ANNOTATION_UPGRADED_AT: null,
    }}});
    mcs.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| api_error("annotating", "ManagedCluster", name, &e))?;
    let timeout = flotilla_core::duration::GoDuration::new(ctx.options.upgrade_timeout);
    tracing::warn!(
        managed_cluster = %name,
        %image,
        waiting,
        "agent upgrade did not reconnect by its deadline; the rollout of this image stops"
    );
    write_condition_of(
        ctx,
        name,
        CONDITION_UPGRADE,
        ConditionStatus::False,
        "UpgradeNotReconnected",
        format!(
            "the agent upgrade to image {image}, applied at {}, did not reconnect within {timeout}; \
             the rollout of this image to the other clusters is stopped ({waiting} waiting). \
             See the agent's log in the workload cluster; remove annotation \
             {ANNOTATION_UPGRADE_FAILED} to upgrade this cluster again, or configure another image",
            rfc3339(applied_at)
        ),
    )
    .await
}

fn agent_view(mc: &ManagedCluster) -> super::upgrade::AgentView {
    let a = mc.annotations();
    let status = mc.status.as_ref();
    let connected_since = status
        .and_then(|s| s.connection.as_ref())
        .filter(|c| c.state == flotilla_api::fleet::ConnectionState::Connected)
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or(0, |t| t.unix_seconds())
        });
    super::upgrade::AgentView {
        name: mc.name_any(),
        bootstrapped: a.contains_key(ANNOTATION_ATTEMPTS),
        joined: status.is_some_and(|s| s.conditions.is_true(condition::JOINED)),
        deleting: mc.metadata.deletion_timestamp.is_some(),
        paused: mc.labels().get(LABEL_PAUSED).is_some_and(|v| v == "true"),
        installed: a.get(ANNOTATION_AGENT_IMAGE).cloned(),
        failed: a.get(ANNOTATION_UPGRADE_FAILED).cloned(),
        upgrading: a.get(ANNOTATION_UPGRADING).map(|i| {
            (
                i.clone(),
                a.get(ANNOTATION_UPGRADED_AT)
                    .and_then(|t| parse_rfc3339(t))
                    .unwrap_or(0),
            )
        }),
        connected_since,
        agent_version: status.and_then(|s| s.agent_version.clone()),
    }
}

/// Re-applies the agent chart with the configured image through the Cluster's kubeconfig
/// (all but the token Secret), then records the upgrade in flight.
async fn start_upgrade(ctx: &Ctx, mc: &ManagedCluster) -> Result<(), String> {
    let mc_name = mc.name_any();
    let key = mc
        .annotations()
        .get(ANNOTATION_CLUSTER_REF)
        .cloned()
        .ok_or("no Cluster link")?;
    let (namespace, name) = key
        .split_once('/')
        .ok_or("a Cluster link not namespace/name")?;
    let secret = crate::capi::kubeconfig_secret_name(name);
    let mut config = kubeconfig_secret_config(
        &ctx.client,
        &ctx.options.kubeconfig_policy,
        namespace,
        &secret,
        None,
    )
    .await
    .map_err(|e| format!("upgrading the agent of Cluster {key}: {e}"))?;
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(30));
    let workload = Client::try_from(config)
        .map_err(|e| format!("building the client: {}", error_chain(&e)))?;
    let attempt = mc
        .annotations()
        .get(ANNOTATION_ATTEMPTS)
        .and_then(|c| c.parse::<u32>().ok())
        .unwrap_or(1);
    let install = AgentInstall {
        hub_url: ctx.options.hub_url.clone(),
        ca_pin: ctx.options.ca_pin.clone(),
        cluster_name: mc_name.clone(),
        // Rendered, never applied: the token Secret is left out below.
        token: "unused".into(),
        image: ctx.options.agent_image.clone(),
        namespace: ctx.options.agent_namespace.clone(),
        operator_values: ctx.operator_values.clone(),
        attempt,
    };
    let objects: Vec<Value> = bootstrap::render(&install)?
        .into_iter()
        .filter(|o| o["kind"] != "Secret")
        .collect();
    bootstrap::apply(&workload, &objects, &install.namespace)
        .await
        .map_err(|e| format!("upgrading the agent of Cluster {key}: {e}"))?;
    let now = unix_now();
    let patch = json!({"metadata": {"annotations": {
        ANNOTATION_UPGRADING: ctx.options.agent_image,
        ANNOTATION_UPGRADED_AT: rfc3339(now),
        ANNOTATION_UPGRADE_FAILED: null,
    }}});
    let mcs: Api<ManagedCluster> = Api::all(ctx.client.clone());
    mcs.patch(&mc_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| api_error("annotating", "ManagedCluster", &mc_name, &e))?;
    tracing::info!(
        cluster = %key,
        managed_cluster = %mc_name,
        image = %ctx.options.agent_image,
        "agent upgrade applied through the Cluster's kubeconfig; waiting for it to reconnect"
    );
    let deadline = now
        .saturating_add(i64::try_from(ctx.options.upgrade_timeout.as_secs()).unwrap_or(i64::MAX));
    write_condition_of(
        ctx,
        &mc_name,
        CONDITION_UPGRADE,
        ConditionStatus::False,
        "Upgrading",
        format!(
            "the agent is being upgraded to image {}; waiting for it to reconnect until {}",
            ctx.options.agent_image,
            rfc3339(deadline)
        ),
    )
    .await
}

/// Deletes the bootstrap token `id` once the agent joined (it is never needed again: a
/// joined agent starts from its identity), then forgets it.
async fn retire_token(ctx: &Ctx, mc_name: &str, id: &str) -> Result<(), String> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.options.hub_namespace);
    let secret = format!("{}{id}", tokens::SECRET_PREFIX);
    match secrets.delete(&secret, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(api_error("deleting", "Secret", &secret, &e)),
    }
    let patch = json!({"metadata": {"annotations": {ANNOTATION_TOKEN_ID: null}}});
    let mcs: Api<ManagedCluster> = Api::all(ctx.client.clone());
    mcs.patch(mc_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| api_error("annotating", "ManagedCluster", mc_name, &e))?;
    tracing::info!(
        managed_cluster = mc_name,
        token_id = id,
        "the agent joined: its bootstrap token is deleted"
    );
    Ok(())
}

/// Sets the `AgentBootstrap` condition (a merge patch of the conditions at the read
/// resource version: a concurrent status write makes it conflict, and it is retried).
async fn write_condition(
    ctx: &Ctx,
    name: &str,
    status: ConditionStatus,
    reason: &str,
    message: String,
) -> Result<(), String> {
    write_condition_of(ctx, name, CONDITION, status, reason, message).await
}

/// Sets condition `type_` of ManagedCluster `name` (as [`write_condition`]).
async fn write_condition_of(
    ctx: &Ctx,
    name: &str,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: String,
) -> Result<(), String> {
    let mcs: Api<ManagedCluster> = Api::all(ctx.client.clone());
    for _ in 0..3 {
        let Some(mc) = mcs
            .get_opt(name)
            .await
            .map_err(|e| api_error("getting", "ManagedCluster", name, &e))?
        else {
            return Ok(());
        };
        let mut conditions = mc.status.clone().unwrap_or_default().conditions;
        let before = conditions.clone();
        let generation = mc.metadata.generation.unwrap_or(0);
        conditions.set_condition(
            type_,
            status,
            reason,
            message.clone(),
            generation,
            &crate::util::now(),
        );
        if conditions == before {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"resourceVersion": mc.resource_version()},
            "status": {"conditions": conditions},
        });
        match mcs
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => {
                return Err(api_error(
                    "writing the status of",
                    "ManagedCluster",
                    name,
                    &e,
                ));
            }
        }
    }
    Err(format!(
        "writing the status of ManagedCluster {name}: conflicts"
    ))
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
}

fn rfc3339(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

fn parse_rfc3339(s: &str) -> Option<i64> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.unix_timestamp())
}
