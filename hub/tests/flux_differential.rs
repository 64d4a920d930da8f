//! Flux as the judge (issue 21, item 10): the real Flux helm-controller v1.6.3 and
//! source-controller v1.9.6 (built from their Go modules by `tools/build-flux`, run as host
//! processes) and Flotilla's hub (in this process, with its in-process agent on its own
//! cluster) play the same scenarios, each on a local cluster of the harness, with the same
//! chart (`examples/charts/hello`) from the same real Helm repository (nginx). At each
//! checkpoint of a scenario both sides are read the same way, and must agree on:
//!
//! - the HelmRelease status: conditions (type, status, reason, message, observed generation),
//!   history snapshots (name, namespace, version, status, chart name and version, app version,
//!   config digest, test hooks and their phases), failure counters, `lastAttempted*`,
//!   `lastHandled*`, `observedGeneration`, `storageNamespace`, `helmChart`, inventory;
//! - the Events on the HelmRelease: the distinct (type, reason, message) seen so far;
//! - Helm's storage: `helm history` (revision, status, description).
//!
//! Only the differences of [`ALLOWED`] are tolerated, each with the reason it is allowed;
//! everything else fails the test with both sides' values. What is never compared (timestamps
//! and what derives from them, the action's duration) is dropped by [`normalize`], which says
//! why; Flux's Events of failed actions lose the Helm SDK debug log Flux appends to them
//! ([`HELM_LOGS`]). The API groups differ by construction (`helm.toolkit.fluxcd.io/v2` and
//! `source.toolkit.fluxcd.io/v1` against `helm.flotilla.dev/v1` and `source.flotilla.dev/v1`)
//! and appear in nothing compared. Everything else — every condition's message, every
//! Event's text, every Helm storage description — must be Flux's, character for character.
//!
//! `FLUXDIFF_ONLY=install,drift` plays only the scenarios of those namespaces;
//! `FLUXDIFF_DUMP=1` prints both sides' checkpoints. Flux's logs stay in the directory the
//! failure message names.
//!
//! Pods and test pods fail the kwok way (`tests/kwok/stages.yaml`): pods labelled
//! `flotilla.dev/never-ready` never become Ready, test pods labelled
//! `flotilla.dev/test-outcome: fail` fail.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use flotilla_hub::run::Hub;
use flotilla_tests::flux::{self, FluxControllers, FluxOptions};
use flotilla_tests::servers::{HelmRepoServer, RepoOptions};
use flotilla_tests::tools::helm_in;
use flotilla_tests::{Cluster, ClusterOptions, wait};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

/// How long one step of a scenario may take on either side.
const STEP_TIMEOUT: Duration = Duration::from_secs(240);
/// The HelmRelease every scenario plays, in the scenario's namespace.
const RELEASE: &str = "hello";
/// The HelmRepository every scenario's chart comes from, in the scenario's namespace.
const REPOSITORY: &str = "charts";
/// The field manager of the test's writes.
const MANAGER: &str = "flux-differential";

/// Who plays a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Player {
    Flux,
    Flotilla,
}

impl Player {
    fn helm_release(self) -> ApiResource {
        let group = match self {
            Player::Flux => ("helm.toolkit.fluxcd.io", "v2"),
            Player::Flotilla => ("helm.flotilla.dev", "v1"),
        };
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group.0, group.1, "HelmRelease"),
            "helmreleases",
        )
    }

    fn helm_repository(self) -> ApiResource {
        let group = match self {
            Player::Flux => ("source.toolkit.fluxcd.io", "v1"),
            Player::Flotilla => ("source.flotilla.dev", "v1"),
        };
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group.0, group.1, "HelmRepository"),
            "helmrepositories",
        )
    }
}

/// One player's cluster.
#[derive(Clone)]
struct Side {
    player: Player,
    client: kube::Client,
    kubeconfig: PathBuf,
    repo_url: String,
}

/// What both sides saw at one checkpoint of a scenario.
#[derive(Debug, Clone)]
struct Checkpoint {
    name: &'static str,
    /// The normalized HelmRelease status (`null` once the object is gone).
    status: Value,
    /// `Type Reason: message` of every distinct Event on the HelmRelease so far, sorted.
    events: BTreeSet<String>,
    /// `helm history` as `revision status: description`.
    storage: Vec<String>,
}

/// One scenario played by one side.
struct Play {
    side: Side,
    namespace: String,
    checkpoints: Vec<Checkpoint>,
}

/// The scenarios of issue 21, item 10.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Install,
    Upgrade,
    InstallFailingWithRetries,
    UpgradeFailingRolledBack,
    UpgradeFailingUninstalled,
    TestFailureIgnored,
    TestFailureNotIgnored,
    Drift,
    Suspend,
    Uninstall,
}

const SCENARIOS: [Scenario; 10] = [
    Scenario::Install,
    Scenario::Upgrade,
    Scenario::InstallFailingWithRetries,
    Scenario::UpgradeFailingRolledBack,
    Scenario::UpgradeFailingUninstalled,
    Scenario::TestFailureIgnored,
    Scenario::TestFailureNotIgnored,
    Scenario::Drift,
    Scenario::Suspend,
    Scenario::Uninstall,
];

impl Scenario {
    /// The scenario's namespace (the same on both clusters).
    fn namespace(self) -> &'static str {
        match self {
            Scenario::Install => "install",
            Scenario::Upgrade => "upgrade",
            Scenario::InstallFailingWithRetries => "install-retries",
            Scenario::UpgradeFailingRolledBack => "upgrade-rollback",
            Scenario::UpgradeFailingUninstalled => "upgrade-uninstall",
            Scenario::TestFailureIgnored => "test-ignored",
            Scenario::TestFailureNotIgnored => "test-failed",
            Scenario::Drift => "drift",
            Scenario::Suspend => "suspend",
            Scenario::Uninstall => "uninstall",
        }
    }
}

/// A difference between Flux and Flotilla that is allowed, and why.
struct Allowed {
    /// The scenario (its namespace), or `*` for every scenario.
    scenario: &'static str,
    /// The start of the difference's path (`status.conditions.Ready.message`, `events`, ...).
    path: &'static str,
    /// What the difference's text must contain to be allowed (`""`: any).
    contains: &'static str,
    /// Why Flotilla differs on purpose.
    why: &'static str,
}

/// The documented differences.
const ALLOWED: &[Allowed] = &[
    Allowed {
        scenario: "*",
        path: "",
        contains: THROTTLED,
        why: "Flux's Kubernetes client throttles its own requests (client-go's rate limiter); when the \
          action's deadline falls while a request waits for its turn, Helm reports the \
          throttle instead of the wait's timeout. Flotilla's client does not throttle, so it \
          reports the timeout (`timeout waiting for: [...]`) on every attempt.",
    },
    Allowed {
        scenario: "*",
        path: "",
        contains: POD_LOGS,
        why: "issue 21 item 4 asks for the log of a failed hook or test pod in the failure message \
          and Event, as Helm v4 prints it (`POD LOGS: <pod>` then the log, capped); Flux \
          v1.6.3 omits it (it never sets Helm's HookOutputFunc, which discards hook logs by \
          default, nor reads test pods' logs). \
          Flotilla's block follows Flux's message whole, so it is cut off Flotilla's \
          condition and Event messages before they are compared (see `strip_pod_logs`).",
    },
];

/// What starts the pod-log block Flotilla puts after a failed hook's message ([`ALLOWED`]).
const POD_LOGS: &str = "\n\nPOD LOGS: ";

/// Cuts the pod-log block ([`POD_LOGS`] to the end, or to Helm's log) off every condition
/// and Event message of a Flotilla checkpoint; Flux's messages never have one. Returns what
/// was cut, for the log.
fn strip_pod_logs(flotilla: &mut Checkpoint) -> Vec<String> {
    fn cut(message: &str) -> Option<(String, String)> {
        let start = message.find(POD_LOGS)?;
        let end = message[start..]
            .find(HELM_LOGS)
            .map_or(message.len(), |i| start + i);
        let kept = format!("{}{}", &message[..start], &message[end..]);
        Some((kept, message[start..end].to_owned()))
    }
    let mut stripped = Vec::new();
    if let Some(conditions) = flotilla
        .status
        .get_mut("conditions")
        .and_then(Value::as_object_mut)
    {
        for (ty, c) in conditions.iter_mut() {
            if let Some((kept, block)) = c["message"].as_str().and_then(cut) {
                stripped.push(format!(
                    "status.conditions.{ty}.message: flotilla adds {block:?}"
                ));
                c["message"] = Value::String(kept);
            }
        }
    }
    let events = std::mem::take(&mut flotilla.events);
    for event in events {
        match cut(&event) {
            Some((kept, block)) => {
                stripped.push(format!("events: flotilla adds {block:?} to {kept:?}"));
                flotilla.events.insert(kept);
            }
            None => {
                flotilla.events.insert(event);
            }
        }
    }
    stripped
}

/// What Flux's Helm reports when the action's deadline passes while its Kubernetes client
/// holds a request back (see [`ALLOWED`]).
const THROTTLED: &str =
    "client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline";

/// Flux's Events whose failure is [`THROTTLED`] stand for Flotilla's Event of the same type,
/// reason and message up to the error, when that one reports the wait's timeout: the same
/// failure, told by Flux's throttled client instead of its waiter ([`ALLOWED`] says why).
/// Returns the pairs made, for the log.
fn pair_throttled(flux: &mut Checkpoint, flotilla: &Checkpoint) -> Vec<String> {
    let mut paired = Vec::new();
    let throttled: Vec<String> = flux
        .events
        .iter()
        .filter(|e| e.contains(THROTTLED))
        .cloned()
        .collect();
    for event in throttled {
        let prefix = &event[..event.find(THROTTLED).unwrap_or_default()];
        let timeout = flotilla.events.iter().find(|f| {
            f.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with("timeout waiting for: "))
        });
        if let Some(timeout) = timeout {
            paired.push(format!(
                "events: flux={event:?} stands for flotilla={timeout:?}"
            ));
            flux.events.remove(&event);
            flux.events.insert(timeout.clone());
        }
    }
    paired
}

/// The HelmRelease's spec shared by every scenario, before the scenario's own fields.
fn base_spec() -> Value {
    json!({
        "interval": "10m",
        "timeout": "60s",
        "chart": {
            "spec": {
                "chart": "hello",
                "version": "0.1.0",
                "sourceRef": { "kind": "HelmRepository", "name": REPOSITORY },
                "interval": "10m",
            }
        },
        "values": { "message": "first" },
    })
}

/// `patch` merged into `base` (JSON merge patch semantics, `null` removes).
fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(k);
                } else {
                    merge(b.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (b, p) => *b = p.clone(),
    }
}

impl Play {
    fn new(side: Side, scenario: Scenario) -> Play {
        Play {
            side,
            namespace: scenario.namespace().to_owned(),
            checkpoints: Vec::new(),
        }
    }

    fn releases(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.side.client.clone(),
            &self.namespace,
            &self.side.player.helm_release(),
        )
    }

    /// Creates the namespace, the HelmRepository and the HelmRelease with `spec` merged over
    /// [`base_spec`].
    async fn create(&self, spec: Value) -> anyhow::Result<()> {
        let ns = &self.namespace;
        let params = PatchParams::apply(MANAGER).force();
        let namespaces: Api<Namespace> = Api::all(self.side.client.clone());
        namespaces
            .patch(
                ns,
                &params,
                &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns }
                })),
            )
            .await
            .with_context(|| format!("creating the namespace {ns}"))?;
        let repository = self.side.player.helm_repository();
        let repositories: Api<DynamicObject> =
            Api::namespaced_with(self.side.client.clone(), ns, &repository);
        repositories
            .patch(
                REPOSITORY,
                &params,
                &Patch::Apply(json!({
                    "apiVersion": repository.api_version,
                    "kind": "HelmRepository",
                    "metadata": { "name": REPOSITORY, "namespace": ns },
                    "spec": { "url": self.side.repo_url, "interval": "10m" },
                })),
            )
            .await
            .with_context(|| format!("creating the HelmRepository {ns}/{REPOSITORY}"))?;
        let mut full = base_spec();
        merge(&mut full, &spec);
        let release = self.side.player.helm_release();
        self.releases()
            .patch(
                RELEASE,
                &params,
                &Patch::Apply(json!({
                    "apiVersion": release.api_version,
                    "kind": "HelmRelease",
                    "metadata": { "name": RELEASE, "namespace": ns },
                    "spec": full,
                })),
            )
            .await
            .with_context(|| format!("creating the HelmRelease {ns}/{RELEASE}"))?;
        Ok(())
    }

    /// Merges `patch` into the HelmRelease's spec.
    async fn patch_spec(&self, patch: Value) -> anyhow::Result<()> {
        self.releases()
            .patch(
                RELEASE,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": patch })),
            )
            .await
            .with_context(|| format!("patching the spec of {}/{RELEASE}", self.namespace))?;
        Ok(())
    }

    /// Sets `reconcile.fluxcd.io/requestedAt` to `token` (`flux reconcile hr`).
    async fn request_reconcile(&self, token: &str) -> anyhow::Result<()> {
        self.releases()
            .patch(
                RELEASE,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": { "annotations": { "reconcile.fluxcd.io/requestedAt": token } }
                })),
            )
            .await
            .with_context(|| format!("annotating {}/{RELEASE}", self.namespace))?;
        Ok(())
    }

    /// Waits until `check` holds for the HelmRelease (the whole object as JSON).
    async fn until(&self, what: &str, check: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
        let api = self.releases();
        let check = &check;
        let what = format!(
            "{:?}: {}/{RELEASE}: {what}",
            self.side.player, self.namespace
        );
        let waited = wait::until(&what, STEP_TIMEOUT, || {
            let api = api.clone();
            async move {
                let hr = serde_json::to_value(api.get(RELEASE).await?)?;
                Ok(check(&hr).then_some(hr))
            }
        })
        .await;
        match waited {
            Ok(hr) => Ok(hr),
            Err(e) => {
                let status = api
                    .get(RELEASE)
                    .await
                    .ok()
                    .and_then(|o| o.data.get("status").cloned());
                Err(e.context(format!(
                    "its status: {}",
                    serde_json::to_string_pretty(&status).unwrap_or_default()
                )))
            }
        }
    }

    /// Waits until the HelmRelease is gone.
    async fn until_gone(&self) -> anyhow::Result<()> {
        let api = self.releases();
        wait::until(
            &format!(
                "{:?}: {}/{RELEASE} deleted",
                self.side.player, self.namespace
            ),
            STEP_TIMEOUT,
            || async { Ok(api.get_opt(RELEASE).await?.is_none().then_some(())) },
        )
        .await
    }

    /// Records a checkpoint: the status, the Events and Helm's storage as they are now.
    async fn checkpoint(&mut self, name: &'static str) -> anyhow::Result<()> {
        let status = self
            .releases()
            .get_opt(RELEASE)
            .await?
            .and_then(|o| o.data.get("status").cloned())
            .map_or(Value::Null, normalize);
        let events = events(&self.side.client, &self.namespace).await?;
        let storage = storage(&self.side, &self.namespace)?;
        self.checkpoints.push(Checkpoint {
            name,
            status,
            events,
            storage,
        });
        Ok(())
    }
}

/// `Type Reason: message` of every distinct Event about the HelmRelease in `namespace`.
async fn events(client: &kube::Client, namespace: &str) -> anyhow::Result<BTreeSet<String>> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=HelmRelease,involvedObject.name={RELEASE}"
        )))
        .await
        .with_context(|| format!("listing the Events in {namespace}"))?;
    Ok(list
        .items
        .into_iter()
        .map(|e| {
            let message = e.message.unwrap_or_default();
            // Flux appends its Helm SDK's debug log to the Event of a failed action; Flotilla
            // runs no Helm SDK, so has no such log (the condition and Event say the same).
            let message = match message.split_once(HELM_LOGS) {
                Some((before, _)) => before.to_owned(),
                None => message,
            };
            format!(
                "{} {}: {}",
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                message
            )
        })
        .collect())
}

/// What Flux puts between a failed action's message and its Helm SDK's log in an Event.
const HELM_LOGS: &str = "\n\nLast Helm logs:";

/// `helm history` of the release as `revision status: description` (empty when there is
/// no release).
fn storage(side: &Side, namespace: &str) -> anyhow::Result<Vec<String>> {
    let out = match helm_in(
        &side.kubeconfig,
        &["history", RELEASE, "-n", namespace, "-o", "json"],
    ) {
        Ok(out) => out,
        Err(e) if format!("{e:#}").contains("not found") => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let history: Value = serde_json::from_str(&out)?;
    Ok(history
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            format!(
                "{} {} {}: {}",
                h["revision"],
                h["chart"].as_str().unwrap_or_default(),
                h["status"].as_str().unwrap_or_default(),
                h["description"].as_str().unwrap_or_default()
            )
        })
        .collect())
}

/// The status with what is never compared dropped, and lists keyed for a readable diff:
/// - timestamps (`lastTransitionTime`, `firstDeployed`, `lastDeployed`, `deleted`, a test
///   hook's `lastStarted`/`lastCompleted`): when things happened differs from run to run;
/// - a history snapshot's `digest`: Flux's digest of the whole Helm release object, whose
///   timestamps differ from run to run;
/// - `lastAttemptedReleaseActionDuration`: how long the action took on this machine;
/// - conditions keyed by type (their order is not part of the API).
fn normalize(mut status: Value) -> Value {
    if let Some(conditions) = status.get_mut("conditions").map(Value::take) {
        let keyed: serde_json::Map<String, Value> = conditions
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let mut c = c.clone();
                if let Some(c) = c.as_object_mut() {
                    c.remove("lastTransitionTime");
                }
                (c["type"].as_str().unwrap_or_default().to_owned(), c)
            })
            .collect();
        status["conditions"] = Value::Object(keyed);
    }
    if let Some(status) = status.as_object_mut() {
        status.remove("lastAttemptedReleaseActionDuration");
    }
    if let Some(history) = status.get_mut("history").and_then(Value::as_array_mut) {
        for snapshot in history.iter_mut().filter_map(Value::as_object_mut) {
            for key in ["firstDeployed", "lastDeployed", "deleted", "digest"] {
                snapshot.remove(key);
            }
            if let Some(hooks) = snapshot.get_mut("testHooks").and_then(Value::as_object_mut) {
                for hook in hooks.values_mut().filter_map(Value::as_object_mut) {
                    hook.remove("lastStarted");
                    hook.remove("lastCompleted");
                }
            }
        }
    }
    status
}

/// The differences of two JSON values as `path: flux=... flotilla=...` lines.
fn diff(path: &str, flux: &Value, flotilla: &Value, out: &mut Vec<String>) {
    match (flux, flotilla) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                diff(
                    &format!("{path}.{k}"),
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, out);
            }
        }
        (a, b) if a != b => out.push(format!("{path}: flux={a} flotilla={b}")),
        _ => {}
    }
}

/// The differences of one checkpoint.
fn compare(flux: &Checkpoint, flotilla: &Checkpoint) -> Vec<String> {
    let mut out = Vec::new();
    diff("status", &flux.status, &flotilla.status, &mut out);
    for e in flux.events.difference(&flotilla.events) {
        out.push(format!("events: only flux: {e}"));
    }
    for e in flotilla.events.difference(&flux.events) {
        out.push(format!("events: only flotilla: {e}"));
    }
    if flux.storage.len() != flotilla.storage.len() {
        out.push(format!(
            "storage: flux={:?} flotilla={:?}",
            flux.storage, flotilla.storage
        ));
    } else {
        for (a, b) in flux.storage.iter().zip(&flotilla.storage) {
            if a != b {
                out.push(format!("storage: flux={a:?} flotilla={b:?}"));
            }
        }
    }
    out
}

/// Whether a difference of `scenario` is allowed by [`ALLOWED`].
fn allowed(scenario: &str, difference: &str) -> Option<&'static Allowed> {
    ALLOWED.iter().find(|a| {
        (a.scenario == "*" || a.scenario == scenario)
            && difference.starts_with(a.path)
            && difference.contains(a.contains)
    })
}

fn conditions(hr: &Value) -> &Value {
    &hr["status"]["conditions"]
}

fn condition<'a>(hr: &'a Value, ty: &str) -> Option<&'a Value> {
    conditions(hr)
        .as_array()?
        .iter()
        .find(|c| c["type"].as_str() == Some(ty))
}

fn has_condition(hr: &Value, ty: &str, status: &str, reason: Option<&str>) -> bool {
    condition(hr, ty).is_some_and(|c| {
        c["status"].as_str() == Some(status)
            && reason.is_none_or(|r| c["reason"].as_str() == Some(r))
    })
}

/// Ready=True for the object's generation.
fn ready(hr: &Value) -> bool {
    observed(hr) && has_condition(hr, "Ready", "True", None)
}

/// The status observed the object's generation.
fn observed(hr: &Value) -> bool {
    hr["status"]["observedGeneration"] == hr["metadata"]["generation"]
}

fn stalled(hr: &Value) -> bool {
    has_condition(hr, "Stalled", "True", None)
}

/// The latest history snapshot's Helm release version.
fn latest_version(hr: &Value) -> i64 {
    hr["status"]["history"][0]["version"]
        .as_i64()
        .unwrap_or_default()
}

/// Values that keep the release's pods unready (the kwok stage `flotilla.dev/never-ready`).
fn never_ready() -> Value {
    json!({ "podLabels": { "flotilla.dev/never-ready": "true" } })
}

/// Plays `scenario` on one side.
async fn play(scenario: Scenario, play: &mut Play) -> anyhow::Result<()> {
    match scenario {
        Scenario::Install => {
            play.create(json!({})).await?;
            play.until("Ready", ready).await?;
            play.checkpoint("installed").await?;
        }
        Scenario::Upgrade => {
            play.create(json!({})).await?;
            play.until("Ready", ready).await?;
            play.checkpoint("installed").await?;
            play.patch_spec(json!({ "values": { "message": "second" } }))
                .await?;
            play.until("upgraded on values", |hr| {
                ready(hr) && latest_version(hr) == 2
            })
            .await?;
            play.checkpoint("upgraded on values").await?;
            play.patch_spec(json!({ "chart": { "spec": { "version": "0.1.1" } } }))
                .await?;
            play.until("upgraded to chart 0.1.1", |hr| {
                ready(hr) && latest_version(hr) == 3
            })
            .await?;
            play.checkpoint("upgraded on the chart version").await?;
        }
        Scenario::InstallFailingWithRetries => {
            play.create(json!({
                "timeout": "10s",
                "install": { "remediation": { "retries": 2 } },
                "values": never_ready(),
            }))
            .await?;
            play.until("Stalled", |hr| observed(hr) && stalled(hr))
                .await?;
            play.checkpoint("retries exhausted").await?;
        }
        Scenario::UpgradeFailingRolledBack => {
            play.create(json!({
                "upgrade": { "remediation": { "retries": 1, "strategy": "rollback" } },
            }))
            .await?;
            play.until("Ready", ready).await?;
            play.patch_spec(json!({ "timeout": "10s", "values": never_ready() }))
                .await?;
            // While the upgrade waits for pods that never get ready: what each side
            // patched before the action (Ready=Unknown, Reconciling "Running 'upgrade'
            // ...", the install's conditions and observedGeneration kept), once Helm
            // storage holds the pending upgrade on that side.
            play.until("the upgrade running", |hr| {
                condition(hr, "Reconciling").is_some_and(|c| {
                    c["message"].as_str() == Some("Running 'upgrade' action with timeout of 10s")
                })
            })
            .await?;
            let (side, namespace) = (&play.side, play.namespace.clone());
            wait::until(
                &format!("{:?}: the pending upgrade in Helm storage", side.player),
                STEP_TIMEOUT,
                || {
                    let pending = storage(side, &namespace)
                        .map(|s| s.iter().any(|r| r.contains("pending-upgrade")));
                    async move { Ok(pending?.then_some(())) }
                },
            )
            .await?;
            play.checkpoint("upgrade running").await?;
            play.until("Stalled", |hr| observed(hr) && stalled(hr))
                .await?;
            play.checkpoint("rolled back, retries exhausted").await?;
        }
        Scenario::UpgradeFailingUninstalled => {
            play.create(json!({
                "upgrade": { "remediation": {
                    "retries": 0, "remediateLastFailure": true, "strategy": "uninstall"
                } },
            }))
            .await?;
            play.until("Ready", ready).await?;
            play.patch_spec(json!({ "timeout": "10s", "values": never_ready() }))
                .await?;
            play.until("Stalled", |hr| observed(hr) && stalled(hr))
                .await?;
            play.checkpoint("uninstalled, retries exhausted").await?;
        }
        Scenario::TestFailureIgnored => {
            play.create(json!({
                "test": { "enable": true, "ignoreFailures": true },
                "values": { "tests": { "podLabels": { "flotilla.dev/test-outcome": "fail" } } },
            }))
            .await?;
            play.until("Ready with a failed test", |hr| {
                ready(hr) && has_condition(hr, "TestSuccess", "False", None)
            })
            .await?;
            play.checkpoint("installed, test failed").await?;
        }
        Scenario::TestFailureNotIgnored => {
            play.create(json!({
                "test": { "enable": true },
                "values": { "tests": { "podLabels": { "flotilla.dev/test-outcome": "fail" } } },
            }))
            .await?;
            play.until("Stalled", |hr| observed(hr) && stalled(hr))
                .await?;
            play.checkpoint("test failed").await?;
        }
        Scenario::Drift => {
            play.create(json!({ "driftDetection": { "mode": "enabled" } }))
                .await?;
            play.until("Ready", ready).await?;
            play.checkpoint("installed").await?;
            let configmaps: Api<ConfigMap> =
                Api::namespaced(play.side.client.clone(), &play.namespace);
            configmaps
                .patch(
                    RELEASE,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "data": { "message": "drifted" } })),
                )
                .await
                .context("changing the release's ConfigMap")?;
            play.request_reconcile("drift-1").await?;
            play.until("handled the request", |hr| {
                hr["status"]["lastHandledReconcileAt"] == "drift-1" && ready(hr)
            })
            .await?;
            wait::until(
                &format!("{:?}: the ConfigMap corrected", play.side.player),
                STEP_TIMEOUT,
                || async {
                    let cm = configmaps.get(RELEASE).await?;
                    let message = cm.data.and_then(|d| d.get("message").cloned());
                    Ok((message.as_deref() == Some("first")).then_some(()))
                },
            )
            .await?;
            play.checkpoint("drift corrected").await?;
        }
        Scenario::Suspend => {
            play.create(json!({})).await?;
            play.until("Ready", ready).await?;
            play.patch_spec(json!({ "suspend": true })).await?;
            play.until("suspended", observed).await?;
            play.patch_spec(json!({ "values": { "message": "while suspended" } }))
                .await?;
            tokio::time::sleep(Duration::from_secs(5)).await;
            play.checkpoint("suspended, values changed").await?;
            play.patch_spec(json!({ "suspend": false })).await?;
            play.until("resumed and upgraded", |hr| {
                ready(hr) && latest_version(hr) == 2
            })
            .await?;
            play.checkpoint("resumed").await?;
        }
        Scenario::Uninstall => {
            play.create(json!({})).await?;
            play.until("Ready", ready).await?;
            play.releases()
                .delete(RELEASE, &DeleteParams::default())
                .await?;
            play.until_gone().await?;
            play.checkpoint("deleted").await?;
        }
    }
    Ok(())
}

/// Both clusters, the repository, the hub and Flux's controllers.
struct Env {
    flux_cluster: Cluster,
    flotilla_cluster: Cluster,
    repo: HelmRepoServer,
    hub: Option<Hub>,
    _artifacts: tempfile::TempDir,
    controllers: FluxControllers,
}

impl Env {
    async fn start() -> anyhow::Result<Env> {
        common::init_logging();
        // Built first (minutes the first time; cached in ~/.cache/flotilla/flux).
        let bin = flux::bin_dir()?;
        let (flux_cluster, flotilla_cluster, repo) = tokio::join!(
            Cluster::start(ClusterOptions::named("fluxdiff-flux")),
            Cluster::start(ClusterOptions::named("fluxdiff-flotilla")),
            HelmRepoServer::start(RepoOptions::named("fluxdiff")),
        );
        let (flux_cluster, flotilla_cluster, repo) = (flux_cluster?, flotilla_cluster?, repo?);
        let chart = flotilla_tests::cluster::workspace_root().join("examples/charts/hello");
        repo.publish_version(&chart, "0.1.0")?;
        repo.publish_version(&chart, "0.1.1")?;

        flux::install_crds(&flux_cluster)?;
        let namespaces: Api<Namespace> = Api::all(flux_cluster.client().await?);
        namespaces
            .patch(
                flux::RUNTIME_NAMESPACE,
                &PatchParams::apply(MANAGER),
                &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": { "name": flux::RUNTIME_NAMESPACE }
                })),
            )
            .await?;
        let dir = tempfile::Builder::new()
            .prefix("flotilla-fluxdiff-")
            .tempdir()?
            .keep();
        let options = FluxOptions {
            concurrency: Some(10),
            // Retries come as soon as Flotilla's (whose backoff the hub's config caps at 5 s).
            helm_args: vec!["--max-retry-delay=5s".to_owned()],
            source_args: vec!["--max-retry-delay=5s".to_owned()],
        };
        let controllers = FluxControllers::start(&bin, &flux_cluster, &options, &dir)?;

        common::install_crds(&flotilla_cluster.client().await?).await?;
        let artifacts = tempfile::tempdir()?;
        let mut config = common::hub_config(&flotilla_cluster, artifacts.path());
        config.concurrency = 10;
        config.agent.concurrency = 10;
        let hub = Hub::start(config).await?;
        Ok(Env {
            flux_cluster,
            flotilla_cluster,
            repo,
            hub: Some(hub),
            _artifacts: artifacts,
            controllers,
        })
    }

    async fn side(&self, player: Player) -> anyhow::Result<Side> {
        let cluster = match player {
            Player::Flux => &self.flux_cluster,
            Player::Flotilla => &self.flotilla_cluster,
        };
        Ok(Side {
            player,
            client: cluster.client().await?,
            kubeconfig: cluster.kubeconfig().to_owned(),
            repo_url: self.repo.url(),
        })
    }
}

/// Plays `scenario` on both sides at once; the differences not allowed, and the allowed ones
/// with their reasons.
async fn judge(
    scenario: Scenario,
    flux: Side,
    flotilla: Side,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let mut on_flux = Play::new(flux, scenario);
    let mut on_flotilla = Play::new(flotilla, scenario);
    let (a, b) = tokio::join!(
        play(scenario, &mut on_flux),
        play(scenario, &mut on_flotilla)
    );
    a.with_context(|| format!("{scenario:?} on Flux"))?;
    b.with_context(|| format!("{scenario:?} on Flotilla"))?;
    let ns = scenario.namespace();
    if std::env::var_os("FLUXDIFF_DUMP").is_some() {
        for (x, y) in on_flux.checkpoints.iter().zip(&on_flotilla.checkpoints) {
            eprintln!(
                "fluxdiff: {ns} / {}\n  flux: {:#}\n  events: {:#?}\n  storage: {:?}\n  flotilla: {:#}\n  events: {:#?}\n  storage: {:?}",
                x.name, x.status, x.events, x.storage, y.status, y.events, y.storage
            );
        }
    }
    let mut failures = Vec::new();
    let mut tolerated = Vec::new();
    for (x, y) in on_flux
        .checkpoints
        .iter_mut()
        .zip(on_flotilla.checkpoints.iter_mut())
    {
        for p in strip_pod_logs(y) {
            let why = allowed(ns, POD_LOGS).map_or("", |a| a.why);
            tolerated.push(format!("{ns} / {}: {p}\n    allowed: {why}", x.name));
        }
        for p in pair_throttled(x, y) {
            let why = allowed(ns, THROTTLED).map_or("", |a| a.why);
            tolerated.push(format!("{ns} / {}: {p}\n    allowed: {why}", x.name));
        }
        for d in compare(x, y) {
            let line = format!("{ns} / {}: {d}", x.name);
            match allowed(ns, &d) {
                Some(a) => tolerated.push(format!("{line}\n    allowed: {}", a.why)),
                None => failures.push(line),
            }
        }
    }
    Ok((failures, tolerated))
}

#[tokio::test]
async fn flux_and_flotilla_agree_on_status_history_counters_and_events_in_every_scenario()
-> anyhow::Result<()> {
    let started = Instant::now();
    let mut env = Env::start().await?;
    eprintln!("fluxdiff: environment up in {:.1?}", started.elapsed());
    let flux = env.side(Player::Flux).await?;
    let flotilla = env.side(Player::Flotilla).await?;
    let only: Option<String> = std::env::var("FLUXDIFF_ONLY").ok();
    let judged = futures::future::join_all(
        SCENARIOS
            .into_iter()
            .filter(|s| {
                only.as_deref()
                    .is_none_or(|o| o.split(',').any(|o| o == s.namespace()))
            })
            .map(|s| {
                let (flux, flotilla) = (flux.clone(), flotilla.clone());
                async move {
                    let t = Instant::now();
                    let r = judge(s, flux, flotilla).await;
                    eprintln!("fluxdiff: {s:?} played in {:.1?}", t.elapsed());
                    (s, r)
                }
            }),
    )
    .await;
    env.controllers.check_running()?;
    let mut failures = Vec::new();
    let mut errors = Vec::new();
    let mut per_scenario = BTreeMap::new();
    for (scenario, result) in judged {
        match result {
            Ok((f, tolerated)) => {
                for t in &tolerated {
                    eprintln!("fluxdiff: {t}");
                }
                per_scenario.insert(scenario.namespace(), f.len());
                failures.extend(f);
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    eprintln!(
        "fluxdiff: differences per scenario: {per_scenario:?}; all played in {:.1?}",
        started.elapsed()
    );
    if let Some(hub) = env.hub.take() {
        hub.stop().await;
    }
    assert!(
        errors.is_empty() && failures.is_empty(),
        "Flux's logs: {}\n{} scenario(s) could not be played:\n{}\n{} difference(s) not allowed:\n{}",
        env.controllers.dir().display(),
        errors.len(),
        errors.join("\n"),
        failures.len(),
        failures.join("\n")
    );
    Ok(())
}
