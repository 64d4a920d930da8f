//! The HelmReleasePreview controller (`flotilla diff hr`): answers each new
//! `HelmReleasePreview` with what the next reconcile of its HelmRelease would do on its
//! target.
//!
//! ```text
//! observe  -> the HelmReleasePreview (watched; one without a Ready condition is new) and
//!             its HelmRelease; spec.spec, when set, replaces the HelmRelease's spec
//! decide   -> intake: a missing HelmRelease, a spec.spec that does not decode or changes
//!             spec.chart (its managed HelmChart would be rewritten) is answered at once;
//!             conditions_of: the answer as Ready True/False with a sentence
//! act      -> the plan built exactly as the HelmRelease controller builds it
//!             (build_plan: tenancy, dependencies, source, chart, values, target), sent as
//!             Command::Preview with a fresh random mask key (crate::previews::ask, 60 s),
//!             the status written (conditions, target, the bounded ReleaseDiff)
//! expire   -> every minute, previews older than EXPIRY (10 minutes) are deleted
//! ```
//!
//! The plan of a preview is never sent as an upsert, gets no revision and is not recorded:
//! the HelmRelease and its target are left as they are. At most [`CONCURRENT`] previews
//! run at once; the others wait for the next event of their object (a relist).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_api::preview::{HelmReleasePreview, HelmReleasePreviewStatus};
use flotilla_core::meta::ConditionStatus;
use flotilla_core::preview::{PreviewError, ReleaseDiff};

use super::*;
use crate::link::ReportSink;

/// Previews older than this are deleted.
pub const EXPIRY: Duration = Duration::from_secs(600);

/// Previews answered at once.
pub const CONCURRENT: usize = 8;

/// Reason of a preview whose agent cannot serve it.
pub const UNSUPPORTED: &str = "Unsupported";

/// Reason of a preview that failed.
pub const PREVIEW_FAILED: &str = "PreviewFailed";

/// Reason of a preview answered.
pub const PREVIEWED: &str = "Previewed";

/// The Ready condition of an answer: `(status, reason, message)`.
pub fn conditions_of(
    target: &str,
    result: &Result<ReleaseDiff, PreviewError>,
) -> (ConditionStatus, &'static str, String) {
    match result {
        Ok(d) => {
            let (create, update, delete, _) = d.counts();
            let message = if d.has_changes() {
                format!(
                    "Previewed on {target}: {create} to create, {update} to update, {delete} to delete, {} value paths changed{}",
                    d.values.len(),
                    if d.chart.changed() {
                        format!(", chart {}", d.chart.to)
                    } else {
                        String::new()
                    }
                )
            } else {
                format!("Previewed on {target}: no change")
            };
            (ConditionStatus::True, PREVIEWED, message)
        }
        Err(PreviewError::Unsupported(m)) => (ConditionStatus::False, UNSUPPORTED, m.clone()),
        Err(PreviewError::Failed(m)) => (ConditionStatus::False, PREVIEW_FAILED, m.clone()),
    }
}

/// Whether a preview created at `created` (seconds since the epoch) has expired at `now`.
pub fn expired(created: i64, now: i64) -> bool {
    now.saturating_sub(created) >= EXPIRY.as_secs() as i64
}

/// The HelmRelease to preview: `live`, or `live` with `spec` (a whole HelmRelease spec)
/// instead of its own. Refuses a spec that does not decode or changes `spec.chart`.
pub fn intake(live: &HelmRelease, spec: Option<&Value>) -> Result<HelmRelease, PreviewError> {
    let Some(spec) = spec else {
        return Ok(live.clone());
    };
    let mut hr = live.clone();
    hr.spec = serde_json::from_value(spec.clone())
        .map_err(|e| PreviewError::Failed(format!("spec.spec is not a HelmRelease spec: {e}.")))?;
    // The live object carries the API server's defaults: a file that leaves them out
    // names the same chart when every field it sets is the live one's.
    let file_chart = spec.get("chart").cloned().unwrap_or(Value::Null);
    let live_chart = serde_json::to_value(&live.spec.chart).unwrap_or(Value::Null);
    if subset(&file_chart, &live_chart) {
        hr.spec.chart = live.spec.chart.clone();
    }
    if hr.spec.chart != live.spec.chart {
        return Err(PreviewError::Unsupported(
            "spec.spec changes spec.chart, which a preview cannot check without rewriting the HelmRelease's managed HelmChart; preview a change of values or spec.chartRef, or apply the chart change."
                .into(),
        ));
    }
    Ok(hr)
}

/// Whether every field set in `part` has the same value in `whole` (objects compared
/// field by field, anything else by equality).
fn subset(part: &Value, whole: &Value) -> bool {
    match (part, whole) {
        (Value::Object(p), Value::Object(w)) => p
            .iter()
            .all(|(k, v)| w.get(k).is_some_and(|wv| subset(v, wv))),
        (p, w) => p == w,
    }
}

/// Runs the controller until `stop`.
pub async fn run(
    ctx: Arc<Context>,
    sink: ReportSink,
    stop: tokio_util::sync::WaitForCancellationFutureOwned,
) {
    let api: Api<HelmReleasePreview> = Api::all(ctx.client.clone());
    let running: Arc<Mutex<HashSet<String>>> = Default::default();
    let slots = Arc::new(tokio::sync::Semaphore::new(CONCURRENT));
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
    let mut expiry = tokio::time::interval(Duration::from_secs(60));
    let mut stop = std::pin::pin!(stop);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = expiry.tick() => expire(&ctx).await,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            event = events.next() => match event {
                Some(Ok(p)) => {
                    let answered = p
                        .status
                        .as_ref()
                        .is_some_and(|s| s.conditions.get_condition(condition::READY).is_some());
                    let uid = p.metadata.uid.clone().unwrap_or_default();
                    if answered || uid.is_empty() {
                        continue;
                    }
                    if !running.lock().unwrap_or_else(|e| e.into_inner()).insert(uid.clone()) {
                        continue;
                    }
                    let Ok(permit) = slots.clone().try_acquire_owned() else {
                        running.lock().unwrap_or_else(|e| e.into_inner()).remove(&uid);
                        continue;
                    };
                    let (ctx, sink, running) = (ctx.clone(), sink.clone(), running.clone());
                    tasks.spawn(async move {
                        answer(&ctx, &sink, &p).await;
                        running.lock().unwrap_or_else(|e| e.into_inner()).remove(&uid);
                        drop(permit);
                    });
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %error_chain(&e), "HelmReleasePreview watch");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                // A watch does not end; should it, the controller idles until stopped
                // rather than fail the hub.
                None => {
                    (&mut stop).await;
                    break;
                }
            },
        }
    }
    tasks.abort_all();
}

/// Answers one preview and writes its status.
async fn answer(ctx: &Context, sink: &ReportSink, p: &HelmReleasePreview) {
    let (Some(ns), Some(name)) = (p.metadata.namespace.as_deref(), p.metadata.name.as_deref())
    else {
        return;
    };
    let (target, result) = preview_of(ctx, sink, ns, p).await;
    let (status, reason, message) =
        conditions_of(target.as_deref().unwrap_or("its target"), &result);
    tracing::info!(preview = %format!("{ns}/{name}"), reason, %message, "preview answered");
    let condition = Condition {
        type_: condition::READY.to_owned(),
        status,
        observed_generation: p.metadata.generation.unwrap_or_default(),
        last_transition_time: util::now(),
        reason: reason.to_owned(),
        message,
    };
    let status = HelmReleasePreviewStatus {
        conditions: vec![condition],
        target,
        diff: result.ok(),
    };
    let api: Api<HelmReleasePreview> = Api::namespaced(ctx.client.clone(), ns);
    let patch = serde_json::json!({ "status": status });
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(preview = %format!("{ns}/{name}"), error = %error_chain(&e), "writing the preview's status failed");
    }
}

async fn preview_of(
    ctx: &Context,
    sink: &ReportSink,
    ns: &str,
    p: &HelmReleasePreview,
) -> (Option<String>, Result<ReleaseDiff, PreviewError>) {
    let hr_name = &p.spec.helm_release_name;
    let api: Api<HelmRelease> = Api::namespaced(ctx.client.clone(), ns);
    let live = match api.get_opt(hr_name).await {
        Ok(Some(hr)) => hr,
        Ok(None) => {
            return (
                None,
                Err(PreviewError::Failed(format!(
                    "HelmRelease {ns}/{hr_name} does not exist."
                ))),
            );
        }
        Err(e) => {
            return (
                None,
                Err(PreviewError::Failed(format!(
                    "reading HelmRelease {ns}/{hr_name} failed: {}.",
                    error_chain(&e)
                ))),
            );
        }
    };
    let hr = match intake(&live, p.spec.spec.as_ref()) {
        Ok(hr) => hr,
        Err(e) => return (None, Err(e)),
    };
    let Some(key) = key_of(&hr) else {
        return (
            None,
            Err(PreviewError::Failed(format!(
                "HelmRelease {ns}/{hr_name} has no name."
            ))),
        );
    };
    let mut helm_chart = live
        .status
        .as_ref()
        .map(|s| s.helm_chart.clone())
        .unwrap_or_default();
    let built = match build_plan(&hr, &key, ctx, &mut helm_chart).await {
        Ok(b) => b,
        Err(Ok(stop)) => {
            return (
                None,
                Err(PreviewError::Failed(format!(
                    "the plan of HelmRelease {key} cannot be built: {}",
                    stop.message
                ))),
            );
        }
        Err(Err(e)) => {
            return (
                None,
                Err(PreviewError::Failed(format!(
                    "the plan of HelmRelease {key} cannot be built: {}.",
                    error_chain(&e)
                ))),
            );
        }
    };
    let target = built.target.to_string();
    // The wire wants a revision; the preview's is never held or recorded.
    let mut plan = built.plan;
    plan.revision = PlanRevision::FIRST;
    let result = crate::previews::ask(
        sink.previews(),
        built.link.as_ref(),
        &built.target,
        plan,
        crate::previews::PREVIEW_WAIT,
    )
    .await;
    (Some(target), result)
}

/// Deletes the previews older than [`EXPIRY`].
async fn expire(ctx: &Context) {
    let api: Api<HelmReleasePreview> = Api::all(ctx.client.clone());
    let list = match api.list_metadata(&Default::default()).await {
        Ok(l) => l,
        Err(e) => {
            tracing::debug!(error = %error_chain(&e), "listing HelmReleasePreviews");
            return;
        }
    };
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    for p in list.items {
        let Some(created) = p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second())
        else {
            continue;
        };
        if !expired(created, now) {
            continue;
        }
        let (Some(ns), Some(name)) = (p.metadata.namespace.as_deref(), p.metadata.name.as_deref())
        else {
            continue;
        };
        let api: Api<HelmReleasePreview> = Api::namespaced(ctx.client.clone(), ns);
        if let Err(e) = api.delete(name, &DeleteParams::default()).await {
            tracing::debug!(preview = %format!("{ns}/{name}"), error = %error_chain(&e), "deleting an expired preview");
        }
    }
}

#[cfg(test)]
mod preview_tests {
    use flotilla_core::diff::{Change, ObjectDiff, ObjectRef};

    use super::*;

    fn hr(chart_version: &str) -> HelmRelease {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "helm.flotilla.dev/v1", "kind": "HelmRelease",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"interval": "5m", "chart": {"spec": {"chart": "web", "version": chart_version,
                     "sourceRef": {"kind": "HelmRepository", "name": "r"}}},
                     "values": {"a": 1}}
        }))
        .unwrap()
    }

    #[test]
    fn answers_become_ready_conditions_with_a_sentence() {
        let quiet = ReleaseDiff::default();
        let (s, r, m) = conditions_of(
            "cluster edge-1",
            &Ok(ReleaseDiff {
                chart: flotilla_core::preview::ChartChange {
                    from: Some(Default::default()),
                    to: Default::default(),
                },
                ..quiet
            }),
        );
        assert_eq!(
            (s, r, m.as_str()),
            (
                ConditionStatus::True,
                PREVIEWED,
                "Previewed on cluster edge-1: no change"
            )
        );
        let changed = ReleaseDiff::bounded(
            vec![ObjectDiff {
                object: ObjectRef {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: Some("apps".into()),
                    name: "c".into(),
                },
                change: Change::Update,
                diff: "-a\n+b\n".into(),
            }],
            vec![],
            vec![],
            vec![],
            Default::default(),
        );
        let (_, _, m) = conditions_of("cluster edge-1", &Ok(changed));
        assert!(
            m.starts_with("Previewed on cluster edge-1: 0 to create, 1 to update, 0 to delete"),
            "{m}"
        );
        let (s, r, m) = conditions_of("x", &Err(PreviewError::Unsupported("old agent.".into())));
        assert_eq!(
            (s, r, m.as_str()),
            (ConditionStatus::False, UNSUPPORTED, "old agent.")
        );
    }

    #[test]
    fn previews_expire_after_ten_minutes() {
        assert!(!expired(1000, 1000 + 599));
        assert!(expired(1000, 1000 + 600));
        assert!(!expired(1000, 0), "a clock behind");
    }

    #[test]
    fn a_spec_to_preview_replaces_the_live_one_but_may_not_change_the_chart() {
        let live = hr("1.0.0");
        assert_eq!(intake(&live, None).unwrap(), live);
        let mut spec = serde_json::to_value(&live.spec).unwrap();
        spec["values"] = serde_json::json!({"a": 2});
        let previewed = intake(&live, Some(&spec)).unwrap();
        assert_eq!(previewed.spec.values, Some(serde_json::json!({"a": 2})));
        assert_eq!(previewed.metadata, live.metadata);
        let bumped = serde_json::to_value(&hr("2.0.0").spec).unwrap();
        assert!(matches!(
            intake(&live, Some(&bumped)),
            Err(PreviewError::Unsupported(_))
        ));
        // Leaving out what the API server defaults is no change of the chart.
        let mut defaulted = live.clone();
        defaulted.spec.chart.as_mut().unwrap().spec.interval = Some(
            flotilla_core::duration::GoDuration::from(Duration::from_secs(60)),
        );
        let mut file = serde_json::to_value(&live.spec).unwrap();
        file["values"] = serde_json::json!({"a": 3});
        assert_eq!(
            intake(&defaulted, Some(&file)).unwrap().spec.chart,
            defaulted.spec.chart
        );
        let bad = serde_json::json!({"interval": 5});
        let e = intake(&live, Some(&bad)).unwrap_err().to_string();
        assert!(
            e.starts_with("spec.spec is not a HelmRelease spec: "),
            "{e}"
        );
    }
}
