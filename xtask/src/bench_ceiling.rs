//! The management API server's own ceiling for the writes of a wave (the last phase of
//! `cargo xtask bench-rollout`).
//!
//! A wave of a values change costs, per cluster, the writes the hub makes for it: the set
//! controller's server-side apply of the child's spec, then the status writer's server-side
//! apply of the child's status when the agent reports. However fast the engine, a wave
//! cannot end before the management API server has taken those writes. This phase measures
//! how long the API server alone needs for them, with the hub stopped (`SIGSTOP`, so no
//! controller reacts and nothing else writes): for each wave size, as many HelmReleases
//! shaped like the children (their spec, labels and status copied, in a namespace of their
//! own) get the same two writes with the hub's own concurrency ([`SPEC_WRITES_IN_FLIGHT`]
//! spec writes, then each one's status write, [`STATUS_WRITES_IN_FLIGHT`] at once). A
//! wave's span less its soak, less this ceiling, is the engine's own overhead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use tokio::sync::Semaphore;

use crate::bench_sim::helm_release_resource;

/// The set controller's promotions in flight (`PROMOTION_WRITES_IN_FLIGHT` in
/// `hub/src/sets/reconcile.rs`: the default `maxNewPerReconcile`).
pub const SPEC_WRITES_IN_FLIGHT: usize = flotilla_core::set::DEFAULT_MAX_NEW_PER_RECONCILE as usize;
/// The status writer's reports in flight (`MAX_REPORTS_IN_FLIGHT` in `hub/src/status.rs`).
pub const STATUS_WRITES_IN_FLIGHT: usize = 64;
/// The namespace of the ceiling's objects.
const NAMESPACE: &str = "bench-ceiling";
/// Their field manager.
const MANAGER: &str = "bench-ceiling";

/// What the API server took for one wave's writes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ceiling {
    /// Objects (clusters of the wave).
    pub objects: usize,
    /// From the first write to the last answer.
    pub took: Duration,
}

/// The object to apply for copy `i` of `template` (a child), round `round`: its spec with a
/// changed value, its labels less the set's, and (for `status`) its status with a changed
/// digest, as the status writer's write of a new report changes it.
fn shaped(template: &DynamicObject, i: usize, round: usize, status: bool) -> serde_json::Value {
    let name = format!("ceiling-{i:04}");
    let labels: serde_json::Map<String, serde_json::Value> = template
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("helm.flotilla.dev/"))
        .map(|(k, v)| (k, v.into()))
        .collect();
    let mut o = serde_json::json!({
        "apiVersion": "helm.flotilla.dev/v1",
        "kind": "HelmRelease",
        "metadata": { "name": name, "labels": labels },
    });
    if status {
        let mut s = template
            .data
            .get("status")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        s["lastAttemptedConfigDigest"] = format!("sha256:{round:064x}").into();
        o["status"] = s;
    } else {
        let mut spec = template
            .data
            .get("spec")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        // A suspended copy: were a controller to see it, it would not act.
        spec["suspend"] = true.into();
        spec["values"] = serde_json::json!({ "message": format!("ceiling round {round} on {i}") });
        o["spec"] = spec;
    }
    o
}

async fn apply(
    api: &Api<DynamicObject>,
    body: &serde_json::Value,
    status: bool,
) -> anyhow::Result<()> {
    let name = body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let params = PatchParams::apply(MANAGER).force();
    let result = if status {
        api.patch_status(&name, &params, &Patch::Apply(body)).await
    } else {
        api.patch(&name, &params, &Patch::Apply(body)).await
    };
    result
        .map(drop)
        .with_context(|| format!("applying HelmRelease {NAMESPACE}/{name} (status: {status})"))
}

/// One round over the first `objects` copies: each a spec write then a status write.
async fn round(
    api: &Api<DynamicObject>,
    templates: &[DynamicObject],
    objects: usize,
    round: usize,
) -> anyhow::Result<Duration> {
    let spec = Arc::new(Semaphore::new(SPEC_WRITES_IN_FLIGHT));
    let status = Arc::new(Semaphore::new(STATUS_WRITES_IN_FLIGHT));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..objects {
        let template = &templates[i % templates.len()];
        let (spec_body, status_body) = (
            shaped(template, i, round, false),
            shaped(template, i, round, true),
        );
        let (api, spec, status) = (api.clone(), spec.clone(), status.clone());
        tasks.spawn(async move {
            {
                let _permit = spec.acquire().await?;
                apply(&api, &spec_body, false).await?;
            }
            let _permit = status.acquire().await?;
            apply(&api, &status_body, true).await
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a ceiling write task")??;
    }
    Ok(started.elapsed())
}

/// Sends `signal` (`STOP`, `CONT`) to `pid`.
fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .context("running kill")?;
    anyhow::ensure!(status.success(), "kill -{signal} {pid} failed");
    Ok(())
}

/// Measures the ceiling for waves of `sizes` clusters, shaped like `children`, with the hub
/// (`hub_pid`) stopped meanwhile and resumed after.
pub async fn measure(
    client: &kube::Client,
    hub_pid: u32,
    children: &[DynamicObject],
    sizes: &[usize],
) -> anyhow::Result<Vec<Ceiling>> {
    anyhow::ensure!(
        !children.is_empty(),
        "no child to shape the ceiling's objects on"
    );
    crate::bench_common::ensure_namespace(client, NAMESPACE).await?;
    signal(hub_pid, "STOP")?;
    let result = async {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), NAMESPACE, &helm_release_resource());
        let most = sizes.iter().copied().max().unwrap_or(0);
        // The objects exist first (untimed), as the children do before a values change.
        round(&api, children, most, 0).await?;
        let mut out = Vec::new();
        for (k, &objects) in sizes.iter().enumerate() {
            let took = round(&api, children, objects, k + 1).await?;
            out.push(Ceiling { objects, took });
        }
        anyhow::Ok(out)
    }
    .await;
    let resumed = signal(hub_pid, "CONT");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces
        .delete(NAMESPACE, &DeleteParams::background())
        .await;
    let out = result?;
    resumed?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child() -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "helm.flotilla.dev/v1",
            "kind": "HelmRelease",
            "metadata": {
                "name": "fleet-sim-0001",
                "namespace": "bench",
                "labels": { "helm.flotilla.dev/set": "fleet", "team": "web" },
            },
            "spec": { "interval": "1h", "clusterRef": { "name": "sim-0001" }, "values": { "message": "x" } },
            "status": { "observedGeneration": 2, "lastAttemptedConfigDigest": "sha256:00" },
        }))
        .unwrap()
    }

    #[test]
    fn a_copy_has_the_childs_shape_without_the_sets_labels_and_changes_each_round() {
        let c = child();
        let spec = shaped(&c, 7, 1, false);
        assert_eq!(spec["metadata"]["name"], "ceiling-0007");
        assert_eq!(
            spec["metadata"]["labels"],
            serde_json::json!({ "team": "web" })
        );
        assert_eq!(spec["spec"]["clusterRef"]["name"], "sim-0001");
        assert_eq!(spec["spec"]["suspend"], true);
        assert!(spec.get("status").is_none());
        assert_ne!(
            spec["spec"]["values"],
            shaped(&c, 7, 2, false)["spec"]["values"]
        );
        let status = shaped(&c, 7, 1, true);
        assert!(status.get("spec").is_none());
        assert_eq!(status["status"]["observedGeneration"], 2);
        assert_ne!(
            status["status"]["lastAttemptedConfigDigest"],
            shaped(&c, 7, 2, true)["status"]["lastAttemptedConfigDigest"]
        );
    }
}
