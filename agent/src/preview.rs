//! The preview: what the next reconcile of a plan would do to this cluster, object by
//! object, without doing it (`flotilla diff hr`).
//!
//! [`preview`] renders the plan exactly as its next install or upgrade would
//! ([`Executor::render_next`]: values reused per `upgrade.preserveValues`, post-renderers,
//! `spec.commonMetadata`, origin labels, `.Capabilities` and `lookup` from this cluster),
//! then, for each rendered object (and each CRD the action's policy would apply):
//!
//! 1. reads the live object and asks the API server for a server-side dry-run apply of the
//!    desired one, as drift detection does ([`crate::drift`]): the answer carries what
//!    defaulting and mutating admission would make of it, so a field set to its default
//!    compares equal;
//! 2. compares the two normalised ([`flotilla_core::diff::object_diff`]: server fields
//!    dropped, Secret values replaced by digests keyed with the request's key): `Create`,
//!    `Update` with a unified diff, or `Unchanged`.
//!
//! Objects of the stored release's manifest the new render lacks are `Delete` (unless
//! `helm.sh/resource-policy: keep` keeps them, as Helm does); hooks and tests are listed
//! apart; the values diff is against the stored release's config and the chart change is
//! from its chart. The answer is bounded ([`ReleaseDiff::bounded`]).
//!
//! Nothing is written: Helm storage is only read, the plan is not held or persisted, and a
//! dry-run apply changes no object. Known limit: the dry run is a server-side apply under
//! Flotilla's field manager, so for a release applied client-side, a field the new chart
//! drops but another manager also owns shows as kept.

use std::collections::BTreeSet;

use flotilla_chart::Chart;
use flotilla_chart::release::{HookEvent, Release};
use flotilla_core::diff::{Change, Masker, ObjectDiff, ObjectRef, object_diff, values_diff};
use flotilla_core::plan::ReleasePlan;
use flotilla_core::preview::{
    ChartChange, ChartVersion, HookRef, PreviewError, PreviewRequest, ReleaseDiff, ValueChange,
};
use flotilla_core::spec::CrdsPolicy;
use futures::StreamExt as _;
use serde_json::Value;

use crate::charts::ChartSource;
use crate::drift::{dry_run_error, normalize_resource, subject, to_json};
use crate::kube::apply::{ApplyError, ApplyOptions, HelmReleaseRef, ReleaseRef};
use crate::kube::manifest::{ManifestObject, parse_manifest};
use crate::kube::{ClusterApi, Resource, error_chain};
use crate::reconcile::Context;
use crate::reconcile::actions::Executor;
use crate::storage::{SecretStorage, status_of};

/// How many objects are diffed at once.
const DIFF_CONCURRENCY: usize = 8;

/// How many times an object is read and dry-run to see one version.
const SAME_VERSION_ATTEMPTS: u32 = 3;

/// Helm's annotation keeping an object its release no longer renders.
const RESOURCE_POLICY_ANNOTATION: &str = "helm.sh/resource-policy";

/// Answers a [`PreviewRequest`]: the plan's chart from `charts`, then [`preview_plan`].
pub async fn preview(
    ctx: &Context,
    charts: &dyn ChartSource,
    request: &PreviewRequest,
) -> Result<ReleaseDiff, PreviewError> {
    let plan = &request.plan;
    let chart = charts.chart(&plan.chart).await.map_err(|e| {
        PreviewError::Failed(format!(
            "the chart {} {} of HelmRelease {} is not available: {}.",
            plan.chart.name,
            plan.chart.version,
            plan.object.key(),
            error_chain(&e)
        ))
    })?;
    let chart = crate::runtime::at_plan_version(chart, &plan.chart.version);
    preview_plan(ctx, plan, &chart, &Masker::new(request.mask_key)).await
}

fn failed(plan: &ReleasePlan, what: &str, detail: impl std::fmt::Display) -> PreviewError {
    PreviewError::Failed(format!(
        "the preview of HelmRelease {} failed {what}: {detail}.",
        plan.object.key()
    ))
}

/// What reconciling `plan` with `chart` would do now (module docs).
pub async fn preview_plan(
    ctx: &Context,
    plan: &ReleasePlan,
    chart: &Chart,
    masker: &Masker,
) -> Result<ReleaseDiff, PreviewError> {
    let cluster = ctx
        .action_cluster(plan)
        .map_err(|e| failed(plan, "to act as the plan's identity", error_chain(&e)))?;
    let records = SecretStorage::new(
        cluster.client().clone(),
        plan.release.storage_namespace.as_str(),
    );
    let history = records
        .history(plan.release.name.as_str())
        .await
        .map_err(|e| failed(plan, "reading Helm storage", error_chain(&e)))?;
    let current = current_release(&history);
    let exec = Executor {
        cluster: &cluster,
        records,
        renderer: ctx.renderer.clone(),
        plan,
        chart,
        drift: Default::default(),
    };
    let next = exec
        .render_next(current)
        .await
        .map_err(|e| failed(plan, "rendering the chart", error_chain(&e)))?;
    let namespace = plan.release.namespace.as_str();
    let options = ApplyOptions::new(ReleaseRef {
        name: plan.release.name.to_string(),
        namespace: namespace.to_owned(),
    })
    .owned_by(HelmReleaseRef {
        name: plan.object.name.to_string(),
        namespace: plan.object.namespace.to_string(),
    });
    let mut crd_options = options.clone();
    crd_options.release_metadata = false;

    let rendered = parse_manifest(&next.rendered.manifest)
        .map_err(|e| failed(plan, "reading the rendered manifest", e))?;
    let resources = resolve_all(&cluster, &rendered, namespace, plan).await?;
    let crds = resolve_all(&cluster, &next.crds, namespace, plan).await?;

    // (object, is a CRD)
    let mut jobs: Vec<(Resource, bool)> = crds.into_iter().map(|r| (r, true)).collect();
    let wanted: BTreeSet<(String, String, Option<String>, String)> =
        resources.iter().map(identity).collect();
    jobs.extend(resources.into_iter().map(|r| (r, false)));
    let create_only = next.crd_policy == CrdsPolicy::Create;
    let (cluster_ref, options_ref, crd_options_ref) = (&cluster, &options, &crd_options);
    let results: Vec<Result<Option<ObjectDiff>, String>> =
        futures::stream::iter(jobs.into_iter().map(|(r, crd)| async move {
            let (options, create_only) = if crd {
                (crd_options_ref, create_only)
            } else {
                (options_ref, false)
            };
            diff_rendered(cluster_ref, r, options, create_only, masker).await
        }))
        .buffered(DIFF_CONCURRENCY)
        .collect()
        .await;
    let mut objects = Vec::new();
    for r in results {
        match r {
            Ok(Some(d)) => objects.push(d),
            Ok(None) => {}
            Err(e) => return Err(failed(plan, "diffing an object", e)),
        }
    }

    // What the upgrade would prune: the stored manifest's objects the render lacks.
    if let Some(current) = current {
        let stored = parse_manifest(&current.manifest)
            .map_err(|e| failed(plan, "reading the stored release's manifest", e))?;
        let stored = resolve_all(&cluster, &stored, &current.namespace, plan).await?;
        for r in stored {
            if wanted.contains(&identity(&r)) {
                continue;
            }
            let live = cluster
                .get(&r)
                .await
                .map_err(|e| failed(plan, "reading an object", error_chain(&e)))?;
            let Some(live) = live else { continue };
            let kept = live
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(RESOURCE_POLICY_ANNOTATION))
                .is_some_and(|v| v == "keep");
            if kept {
                continue;
            }
            let live = to_json(&live, &r).map_err(|e| failed(plan, "diffing an object", e))?;
            let Some(reference) = ObjectRef::of(&live) else {
                continue;
            };
            objects.push(object_diff(reference, Some(&live), None, masker));
        }
    }

    let (mut hooks, mut tests) = (Vec::new(), Vec::new());
    for h in &next.rendered.hooks {
        let object = crate::kube::manifest::parse_document(&h.manifest, Some(&h.path), &h.path)
            .ok()
            .flatten()
            .and_then(|o| serde_json::to_value(&o.object).ok())
            .and_then(|v| ObjectRef::of(&v))
            .unwrap_or_else(|| ObjectRef {
                api_version: String::new(),
                kind: h.kind.clone(),
                namespace: Some(namespace.to_owned()),
                name: h.name.clone(),
            });
        let object = ObjectRef {
            namespace: object.namespace.or_else(|| Some(namespace.to_owned())),
            ..object
        };
        let entry = HookRef {
            object,
            events: h.events.iter().map(|e| e.as_str().to_owned()).collect(),
        };
        if h.events.contains(&HookEvent::Test) {
            tests.push(entry);
        } else {
            hooks.push(entry);
        }
    }

    let old_values = Value::Object(current.map(|c| c.config.clone()).unwrap_or_default());
    let values = values_diff(&old_values, &Value::Object(next.values.clone()))
        .into_iter()
        .map(|(path, change)| ValueChange { path, change })
        .collect();
    let chart_change = ChartChange {
        from: current
            .and_then(|c| c.chart.as_ref())
            .and_then(|c| c.metadata.as_ref())
            .map(|m| ChartVersion {
                name: m.name.clone(),
                version: m.version.clone(),
            }),
        to: ChartVersion {
            name: next.chart.metadata.name.clone(),
            version: next.chart.metadata.version.clone(),
        },
    };
    Ok(ReleaseDiff::bounded(
        objects,
        hooks,
        tests,
        values,
        chart_change,
    ))
}

/// The release an upgrade would start from: the newest record when it is deployed, else the
/// newest deployed one, else the newest (a failed install); `None` when there is no history
/// or only an uninstalled release (an install would run).
fn current_release(history: &[Release]) -> Option<&Release> {
    use flotilla_chart::release::Status;
    let newest = history.iter().max_by_key(|r| r.version)?;
    if status_of(newest) == Status::Uninstalled {
        return None;
    }
    if status_of(newest) == Status::Deployed {
        return Some(newest);
    }
    history
        .iter()
        .filter(|r| status_of(r) == Status::Deployed)
        .max_by_key(|r| r.version)
        .or(Some(newest))
}

/// `(group, kind, namespace, name)` of a resolved object.
fn identity(r: &Resource) -> (String, String, Option<String>, String) {
    (
        r.api_resource.group.clone(),
        r.kind().to_owned(),
        r.namespace().map(str::to_owned),
        r.name(),
    )
}

async fn resolve_all(
    cluster: &ClusterApi,
    objects: &[ManifestObject],
    namespace: &str,
    plan: &ReleasePlan,
) -> Result<Vec<Resource>, PreviewError> {
    let mut out = Vec::with_capacity(objects.len());
    for o in objects {
        let mut r = cluster.resolve(o, namespace).await.map_err(|e| {
            failed(
                plan,
                &format!("resolving {} {}", o.gvk.kind, o.object_ref()),
                error_chain(&e),
            )
        })?;
        normalize_resource(&mut r);
        out.push(r);
    }
    Ok(out)
}

/// One rendered object against the cluster; `None` for a CRD the `Create` policy would not
/// touch (it exists).
async fn diff_rendered(
    cluster: &ClusterApi,
    resource: Resource,
    options: &ApplyOptions,
    create_only: bool,
    masker: &Masker,
) -> Result<Option<ObjectDiff>, String> {
    // The read and the dry run are two requests: a controller writing the object between
    // them (a Deployment's revision annotation) would show as a change; they are made again
    // until both saw the same resourceVersion, a few times at most (as drift detection does).
    let mut attempts = 0;
    let (live, desired) = loop {
        attempts += 1;
        let live = cluster.get(&resource).await.map_err(|e| error_chain(&e))?;
        if create_only && live.is_some() {
            return Ok(None);
        }
        let desired = match cluster.dry_run_apply(&resource, options).await {
            Ok(d) => d,
            // A namespace the release would create first: the object as rendered.
            Err(ApplyError::Apply { source, .. }) if live.is_none() && source.is_not_found() => {
                crate::kube::apply::with_release_metadata(&resource.object, options)
            }
            Err(ApplyError::Apply { source, .. }) => {
                return Err(dry_run_error(&resource, &source));
            }
            Err(e) => return Err(format!("{}: {}", subject(&resource), error_chain(&e))),
        };
        let same = live
            .as_ref()
            .is_none_or(|l| l.metadata.resource_version == desired.metadata.resource_version);
        if same || attempts >= SAME_VERSION_ATTEMPTS {
            break (live, to_json(&desired, &resource)?);
        }
    };
    let mut desired = desired;
    crate::drift::normalize::dry_run(&mut desired);
    let live = live.map(|l| to_json(&l, &resource)).transpose()?;
    let reference = ObjectRef::of(&desired).ok_or_else(|| {
        format!(
            "{}: the dry-run answer has no kind or name",
            subject(&resource)
        )
    })?;
    let mut d = object_diff(reference, live.as_ref(), Some(&desired), masker);
    if live.is_none() {
        d.change = Change::Create;
    }
    Ok(Some(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(version: i64, status: &str) -> Release {
        serde_json::from_value(serde_json::json!({
            "name": "web", "namespace": "apps", "version": version,
            "info": {"status": status},
        }))
        .expect("a release")
    }

    #[test]
    fn the_upgrade_starts_from_the_newest_deployed_release() {
        assert!(current_release(&[]).is_none());
        let h = [release(1, "superseded"), release(2, "deployed")];
        assert_eq!(current_release(&h).map(|r| r.version), Some(2));
        let h = [release(1, "deployed"), release(2, "failed")];
        assert_eq!(current_release(&h).map(|r| r.version), Some(1));
        let h = [release(1, "failed")];
        assert_eq!(current_release(&h).map(|r| r.version), Some(1));
        let h = [release(1, "deployed"), release(2, "uninstalled")];
        assert!(current_release(&h).is_none(), "an install would run");
    }
}
