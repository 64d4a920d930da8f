//! One reconcile of a HelmRelease: its steps in Flux's order ([`reconcile`],
//! `plan_and_send`), the hub conditions that stop it (`Stop`), and its error policy.

use super::*;

/// [`reconcile`], in its span, timed and counted by result, its panics caught (as the
/// agent's runtime catches its own: a panic becomes [`ReconcileError::Panicked`], retried
/// with backoff, and the controller goes on with the other objects).
pub(super) async fn measured(
    hr: Arc<HelmRelease>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    use futures::FutureExt as _;
    use tracing::Instrument as _;
    let object = ObjectRef::from_obj(&*hr);
    ctx.queue.started(&object);
    let started = std::time::Instant::now();
    let span = tracing::info_span!(
        "reconcile",
        object = %format!("{}/{}", hr.namespace().unwrap_or_default(), hr.name_any()),
        generation = hr.metadata.generation.unwrap_or_default(),
    );
    let key = key_of(&hr);
    let mut label = "success";
    let result = std::panic::AssertUnwindSafe(reconcile(hr.clone(), ctx.clone(), &mut label))
        .catch_unwind()
        .instrument(span)
        .await
        .unwrap_or_else(|panic| {
            Err(ReconcileError::Panicked {
                object: format!("{}/{}", hr.namespace().unwrap_or_default(), hr.name_any()),
                message: crate::supervisor::panic_message(&*panic),
            })
        });
    match (&result, &key) {
        (Err(_), _) => label = "error",
        (Ok(_), Some(key)) => {
            ctx.failures
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(key);
        }
        (Ok(_), None) => {}
    }
    ctx.metrics
        .observe("helmrelease", label, started.elapsed().as_secs_f64());
    result
}

pub(super) fn error_policy(hr: Arc<HelmRelease>, e: &ReconcileError, ctx: Arc<Context>) -> Action {
    let failures = match key_of(&hr) {
        Some(key) => {
            let mut failures = ctx.failures.lock().unwrap_or_else(|p| p.into_inner());
            let n = failures.entry(key).or_default();
            *n = n.saturating_add(1);
            *n
        }
        None => 1,
    };
    let after = ctx
        .options
        .backoff
        .delay_jittered(failures, &mut fastrand::Rng::new());
    tracing::warn!(
        object = %format!("{}/{}", hr.namespace().unwrap_or_default(), hr.name_any()),
        kind = e.kind(),
        failures,
        retry_after = ?after,
        error = %error_chain(e),
        "HelmRelease reconcile failed"
    );
    ctx.queue.requeue(&ObjectRef::from_obj(&*hr), after)
}

/// The Event reason of a HelmRelease held because its target ManagedCluster is paused.
pub(super) const TARGET_PAUSED: &str = "TargetPaused";

/// Whether ManagedCluster `name` is paused ([`crate::onboarding::LABEL_PAUSED`]). The
/// tenancy store answers; a "paused" from it is confirmed by a read of the cluster's
/// metadata from the API server: the store is a watch of its own and may not have seen yet
/// the label's removal whose event queued this reconcile, and a hold decided on that stale
/// value would stand until the next trigger (seen: a release held for its whole interval
/// after its Cluster was unpaused). Only paused clusters cost the read, so the common case
/// makes no extra request. The store answers when the read fails.
async fn target_paused(ctx: &Context, name: &str) -> bool {
    if !ctx.tenancy.cluster_paused(name).await {
        return false;
    }
    let api: Api<ManagedCluster> = Api::all(ctx.client.clone());
    match tokio::time::timeout(Duration::from_secs(10), api.get_metadata_opt(name)).await {
        Ok(Ok(Some(mc))) => mc
            .labels()
            .get(crate::onboarding::LABEL_PAUSED)
            .is_some_and(|v| v == "true"),
        Ok(Ok(None)) => false,
        Ok(Err(_)) | Err(_) => true,
    }
}

pub(super) async fn reconcile(
    hr: Arc<HelmRelease>,
    ctx: Arc<Context>,
    label: &mut &'static str,
) -> Result<Action, ReconcileError> {
    let Some(key) = key_of(&hr) else {
        return Ok(Action::await_change());
    };
    if let Some(fault) = &ctx.options.fault {
        (fault.0)(&hr);
    }
    let deleting = hr.metadata.deletion_timestamp.is_some();
    let target_paused = match target_of(&hr) {
        Ok(TargetId::Cluster(id)) if !deleting && !hr.spec.suspend => {
            target_paused(&ctx, id.as_str()).await
        }
        _ => false,
    };
    let entry = decide::entry(
        deleting,
        hr.finalizers().iter().any(|f| f == FINALIZER),
        hr.spec.suspend,
        target_paused,
    );
    let add_finalizer = match entry {
        decide::Entry::Finalize => return finalize(&hr, &key, &ctx).await,
        decide::Entry::Suspended { add_finalizer, .. }
        | decide::Entry::Reconcile { add_finalizer } => add_finalizer,
    };
    if add_finalizer {
        let api: Api<HelmRelease> = Api::namespaced(ctx.client.clone(), key.namespace.as_str());
        let mut finalizers = hr.finalizers().to_vec();
        finalizers.push(FINALIZER.to_owned());
        api.patch(
            key.name.as_str(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {
                    "finalizers": finalizers,
                    "resourceVersion": hr.resource_version(),
                }
            })),
        )
        .await
        .map_err(kube_err(&key, "adding the finalizer"))?;
    }
    if let decide::Entry::Suspended { by_target, .. } = entry {
        // A paused target: the object is held as if `spec.suspend` were set (the plan goes
        // out suspended), and an Event says why.
        let held;
        let hr = if by_target {
            let mut h = (*hr).clone();
            h.spec.suspend = true;
            held = h;
            let cluster = hr
                .spec
                .cluster_ref
                .as_ref()
                .map(|c| c.name.as_str())
                .unwrap_or_default();
            tracing::info!(object = %key, %cluster, "target ManagedCluster paused; held as suspended");
            ctx.book
                .event(
                    &hr,
                    false,
                    TARGET_PAUSED,
                    &format!(
                        "ManagedCluster '{cluster}' (spec.clusterRef) is paused (its Cluster API Cluster has spec.paused): the release is held as if suspended"
                    ),
                )
                .await;
            &held
        } else {
            &*hr
        };
        // Flux does nothing for a suspended object; here the agent holds the plan and would
        // go on reconciling it (interval, drift), so it is told: the plan goes out with
        // `suspend` set when it can be built, and nothing is reported when it cannot.
        let mut helm_chart = hr
            .status
            .as_ref()
            .map(|s| s.helm_chart.clone())
            .unwrap_or_default();
        match plan_and_send(hr, &key, &ctx, &mut helm_chart).await {
            Ok(_) => {
                tracing::debug!(object = %key, "suspended; the agent holds the plan suspended")
            }
            Err(Ok(stop)) => {
                tracing::debug!(object = %key, reason = stop.reason, "suspended; plan not built")
            }
            Err(Err(e)) => {
                tracing::debug!(object = %key, error = %error_chain(&e), "suspended; plan not sent")
            }
        }
        // As Flux: a suspended object's generation counts as observed.
        ctx.book.suspended(hr, &key).await?;
        return Ok(Action::await_change());
    }
    let generation = hr.metadata.generation.unwrap_or_default();
    let helm_chart_before = hr
        .status
        .as_ref()
        .map(|s| s.helm_chart.clone())
        .unwrap_or_default();
    let mut helm_chart = helm_chart_before.clone();
    let outcome = plan_and_send(&hr, &key, &ctx, &mut helm_chart).await;
    let interval = hr.spec.interval.get();
    let stop = match outcome {
        Err(Err(e)) => {
            if helm_chart != helm_chart_before {
                ctx.book.set_hub(&hr, &key, None, helm_chart).await.ok();
            }
            return Err(e);
        }
        Ok(hub) => Err(hub),
        Err(Ok(stop)) => Ok(stop),
    };
    let after = match &stop {
        Err(hub) => decide::after(Ok(hub.clone()), generation, ctx.options.requeue_dependency),
        Ok(stop) => decide::after(Err(stop), generation, ctx.options.requeue_dependency),
    };
    if let Ok(stop) = &stop {
        *label = "not_ready";
        tracing::info!(object = %key, reason = stop.reason, message = %stop.message, "HelmRelease not ready");
        if let Some(warning) = stop.event {
            let message = stop.event_message.as_deref().unwrap_or(&stop.message);
            ctx.book.event(&hr, warning, stop.reason, message).await;
        }
    }
    ctx.book.set_hub(&hr, &key, after.hub, helm_chart).await?;
    Ok(match after.requeue {
        decide::Requeue::After(d) => ctx.queue.requeue(&hr_ref(&key), d),
        decide::Requeue::Interval => ctx
            .queue
            .requeue(&hr_ref(&key), jitter(interval, ctx.options.jitter)),
        decide::Requeue::Never => Action::await_change(),
    })
}

/// The plan of `hr` as a reconcile builds it (spec checked, tenancy admitted, dependencies
/// ready, source artifact, chart, values, target and its link), with revision 0 and
/// nothing sent: the reconcile's ([`plan_and_send`]) and the preview's
/// ([`super::preview`]). `Err(Ok(stop))` for a hub-side condition, `Err(Err(e))` for a
/// failure to retry.
pub(super) async fn build_plan(
    hr: &HelmRelease,
    key: &ObjectKey,
    ctx: &Context,
    helm_chart: &mut String,
) -> Result<Built, Result<Stop, ReconcileError>> {
    let started = std::time::Instant::now();
    let mut core = hr
        .to_core()
        .map_err(|e| Ok(Stop::new(INVALID_SPEC, e.to_string()).stalled()))?;
    core.spec.service_account_name = crate::tenancy::service_account(
        core.spec.service_account_name.as_deref(),
        ctx.tenancy.options.default_service_account.as_deref(),
    );
    let ns = key.namespace.as_str();
    let capi_cluster = hr.spec.cluster_ref.as_ref().and_then(|c| c.cluster_api());

    // As Flux, before the dependencies: expressions that do not parse stall the object.
    flotilla_agent::cel::HealthChecks::new(&hr.spec.health_check_exprs)
        .map_err(|e| Ok(Stop::invalid_cel(&e)))?;

    let target = target_of(hr).map_err(Ok)?;
    ctx.tenancy
        .admit(hr, &target)
        .await
        .map_err(|d| Ok(Stop::denied(&d, ctx.options.requeue_dependency)))?;

    dependencies(hr, key, ctx).await.map_err(Ok)?;

    let step = std::time::Instant::now();
    let artifact = source(hr, key, ctx, helm_chart).await?;
    ctx.metrics.observe_step("source", step.elapsed());
    let step = std::time::Instant::now();
    let chart = load_chart(&artifact, ctx, hr).await?;
    ctx.metrics.observe_step("chart", step.elapsed());

    let step = std::time::Instant::now();
    let values = compose_values(hr, key, ctx).await?;
    ctx.metrics.observe_step("values", step.elapsed());

    if let Some(cluster) = capi_cluster {
        cluster_api_gate(ctx, ns, cluster).await.map_err(Ok)?;
    }
    if hr.spec.cluster_ref.is_none()
        && let Some(cm) = hr
            .spec
            .kube_config
            .as_ref()
            .and_then(|k| k.config_map_ref.as_ref())
    {
        // Checked here (as Flux's REST client getter, after the values) so a bad ConfigMap
        // is a condition naming its key; the push agent reads it again when it starts.
        let data = util::config_map_data(&ctx.client, ns, &cm.name)
            .await
            .map_err(|e| crate::workload_identity::ProviderError::Read {
                namespace: ns.to_owned(),
                name: cm.name.clone(),
                reason: error_chain(&e),
            });
        if let Err(e) = data.and_then(|d| crate::workload_identity::parse(ns, &cm.name, d.as_ref()))
        {
            return Err(Ok(Stop::new(reason::REST_CLIENT_ERROR, e.to_string())
                .requeue(ctx.options.requeue_dependency)));
        }
    }
    let link = match ctx.links.resolve(&target).await {
        Ok(link) => link,
        Err(TargetError::NotConnected { cluster }) => {
            return Err(Ok(Stop::new(
                AGENT_NOT_CONNECTED,
                format!("no agent connected for cluster {cluster}"),
            )
            .requeue(ctx.options.requeue_dependency)));
        }
        Err(TargetError::Push(e)) => {
            return Err(Ok(Stop::new(reason::REST_CLIENT_ERROR, e.to_string())
                .requeue(ctx.options.requeue_dependency)));
        }
    };

    let step = std::time::Instant::now();
    let plan = ReleasePlan::from_helm_release(&core, PlanRevision::new(0), chart, values)
        .map_err(|e| Ok(Stop::new(INVALID_SPEC, e.to_string()).stalled()))?;
    ctx.metrics.observe_step("plan", step.elapsed());
    ctx.metrics.observe_step("total", started.elapsed());
    Ok(Built {
        plan,
        core,
        target,
        link,
    })
}

/// What [`build_plan`] built: the plan (revision 0), the core object it was built from,
/// the target and its link.
pub(super) struct Built {
    pub(super) plan: ReleasePlan,
    pub(super) core: flotilla_core::spec::HelmRelease,
    pub(super) target: TargetId,
    pub(super) link: Arc<dyn crate::link::AgentLink>,
}

/// `Ok(hub condition)` once the plan is sent; `Err(Ok(stop))` for a hub-side condition,
/// `Err(Err(e))` for a failure to retry.
pub(super) async fn plan_and_send(
    hr: &HelmRelease,
    key: &ObjectKey,
    ctx: &Context,
    helm_chart: &mut String,
) -> Result<Option<HubCondition>, Result<Stop, ReconcileError>> {
    ctx.refs.set(key, references(hr, key));
    let Built {
        mut plan,
        core,
        target,
        link,
    } = build_plan(hr, key, ctx, helm_chart).await?;
    let digest = plan_digest(&plan);
    let (revision, record_after_send) = plan_revision(hr, key, ctx, &digest).await.map_err(Err)?;
    plan.revision = revision;

    // A change of cluster: the old target's agent uninstalls.
    let previous = ctx
        .targets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone(), target.clone());
    if let Some(previous) = decide::target_change(previous.as_ref(), &target).cloned()
        && let Some(old) = ctx.links.link(&previous)
    {
        tracing::info!(object = %key, from = %previous, to = %target, "target changed: the old target uninstalls");
        let _ = old.send(Command::Delete(DeleteRequest {
            object: key.clone(),
            revision,
            uninstall: Some(core.spec.uninstall()),
        }));
        retire_if_unused(ctx, &previous);
    }

    tracing::debug!(object = %key, %revision, target = %target, "plan sent");
    link.send(Command::Upsert(Box::new(plan)))
        .map_err(|source| {
            Err(ReconcileError::Link {
                object: key.to_string(),
                source,
            })
        })?;
    if record_after_send {
        match revisions::Recording::of(hr) {
            revisions::Recording::Annotations => {
                record_revision_later(ctx, key, revision.get(), digest)
            }
            revisions::Recording::Status => ctx.book.planned(
                key,
                flotilla_core::status::PlanRecord {
                    revision: revision.get(),
                    digest,
                },
            ),
        }
    }
    if let TargetId::Cluster(id) = &target
        && !link.connected()
    {
        return Ok(Some(decide::agent_not_connected(
            id,
            hr.metadata.generation.unwrap_or_default(),
        )));
    }
    Ok(None)
}

/// Every object a reconcile of `hr` reads whose change must reconcile it again (the keys
/// of [`RefIndex`]): its `valuesFrom` ConfigMaps and Secrets, its managed HelmChart or its
/// `chartRef`, its `kubeConfig.configMapRef` ConfigMap (workload identity) and the
/// `<cluster>-kubeconfig` Secret of a Cluster API `clusterRef`. One list, set once per
/// reconcile: a later step must not replace it with a part of it.
pub(super) fn references(hr: &HelmRelease, key: &ObjectKey) -> Vec<String> {
    let ns = key.namespace.as_str();
    let mut refs: Vec<String> = values::referenced_objects(&hr.spec.values_from)
        .into_iter()
        .map(|(kind, name)| ref_key(kind_name(kind), ns, name))
        .collect();
    if let Some(template) = &hr.spec.chart {
        let (src_ns, name) = managed_helm_chart(template, key);
        refs.push(ref_key("HelmChart", &src_ns, &name));
    }
    if let Some(r) = &hr.spec.chart_ref {
        let kind = match r.kind {
            ChartRefKind::OCIRepository => "OCIRepository",
            _ => "HelmChart",
        };
        refs.push(ref_key(kind, r.namespace.as_deref().unwrap_or(ns), &r.name));
    }
    if let Some(cm) = hr
        .spec
        .kube_config
        .as_ref()
        .and_then(|k| k.config_map_ref.as_ref())
    {
        refs.push(ref_key("ConfigMap", ns, &cm.name));
    }
    if let Some(cluster) = hr.spec.cluster_ref.as_ref().and_then(|c| c.cluster_api()) {
        refs.push(ref_key(
            "Secret",
            ns,
            &crate::capi::kubeconfig_secret_name(cluster),
        ));
    }
    refs
}

pub(super) fn kind_name(kind: ValuesReferenceKind) -> &'static str {
    match kind {
        ValuesReferenceKind::ConfigMap => "ConfigMap",
        ValuesReferenceKind::Secret => "Secret",
    }
}

pub(super) async fn dependencies(
    hr: &HelmRelease,
    key: &ObjectKey,
    ctx: &Context,
) -> Result<(), Stop> {
    for dep in &hr.spec.depends_on {
        let ns = dep
            .namespace
            .clone()
            .unwrap_or_else(|| key.namespace.to_string());
        let api: Api<HelmRelease> = Api::namespaced(ctx.client.clone(), &ns);
        let read = match api.get(&dep.name).await {
            Err(e) => decide::Dependency::Unreadable {
                error: error_chain(&e),
            },
            Ok(d) => match dep.ready_expr.as_deref().filter(|e| !e.is_empty()) {
                // As Flux without its AdditiveCELDependencyCheck gate: the expression alone
                // decides.
                Some(source) => decide::Dependency::Expr(ready_by_expr(hr, &d, source)),
                None => decide::Dependency::Read {
                    generation: d.metadata.generation,
                    observed_generation: d.status.as_ref().map(|s| s.observed_generation),
                    ready: d
                        .status
                        .as_ref()
                        .is_some_and(|s| s.conditions.is_true(condition::READY)),
                },
            },
        };
        decide::dependency(&ns, &dep.name, &read, ctx.options.requeue_dependency)?;
    }
    Ok(())
}

/// `dependsOn[].readyExpr` over `self` (the HelmRelease) and `dep` (the dependency), as
/// Flux's `evalReadyExpr`: compiled with those two variables only, a boolean result.
pub(super) fn ready_by_expr(
    hr: &HelmRelease,
    dep: &HelmRelease,
    source: &str,
) -> Result<bool, decide::ReadyExpr> {
    use flotilla_agent::cel::{CelError, Expression};
    let name = dep.metadata.name.as_deref().unwrap_or_default();
    let expr = Expression::compile_bool(source, &["self", "dep"]).map_err(|e| {
        // Flux wraps it: "failed to evaluate dependency <name>: <err>".
        decide::ReadyExpr::Terminal(
            CelError::Dependency {
                name: name.to_owned(),
                source: Box::new(e),
            }
            .to_string(),
        )
    })?;
    let json = |o: &HelmRelease| serde_json::to_value(o).unwrap_or(Value::Null);
    let (me, it) = (json(hr), json(dep));
    expr.evaluate_bool(&[("self", &me), ("dep", &it)])
        .map_err(|e| decide::ReadyExpr::Evaluate(e.to_string()))
}

/// A valuesFrom object read: kind and name, and its data (`None`: not found).
pub(super) type ReadObject = (
    (ValuesReferenceKind, String),
    Option<Arc<values_cache::Data>>,
);

/// Reads the valuesFrom objects (from [`Context::values_cache`] when it may serve this
/// reconcile, else from the API, refreshing the cache) and composes the values.
pub(super) async fn compose_values(
    hr: &HelmRelease,
    key: &ObjectKey,
    ctx: &Context,
) -> Result<Value, Result<Stop, ReconcileError>> {
    let ns = key.namespace.as_str();
    let cache = &ctx.values_cache;
    let request = values_cache::request_hash(hr);
    let may_use_cache = cache.may_use(key, request);
    let mut found: Vec<ReadObject> = Vec::new();
    let (mut hits, mut reads) = (0u64, 0u64);
    for (kind, name) in values::referenced_objects(&hr.spec.values_from) {
        let cached = if may_use_cache {
            cache.get(kind, ns, name)
        } else {
            None
        };
        let read = match cached {
            Some(read) => {
                hits += 1;
                read
            }
            None => {
                reads += 1;
                let ticket = cache.begin(kind, ns, name);
                let read = values_cache::read(&ctx.client, kind, ns, name)
                    .await
                    .map_err(|e| {
                        Ok(Stop::new(
                            reason::VALUES_ERROR,
                            format!(
                                "could not resolve {} chart values reference '{ns}/{name}': {}",
                                kind_name(kind),
                                error_chain(&e)
                            ),
                        )
                        .warning()
                        .requeue(ctx.options.requeue_dependency))
                    })?;
                cache.finish(ticket, &read);
                read
            }
        };
        found.push(((kind, name.to_owned()), read.map(|(_, data)| data)));
    }
    cache.read_done(key, request);
    ctx.metrics.values_reads(hits, reads);
    let composed = values::compose(
        key,
        &hr.spec.values_from,
        |kind, name| match found.iter().find(|((k, n), _)| *k == kind && n == name) {
            Some((_, Some(data))) => Source::Found(data.as_ref()),
            _ => Source::NotFound,
        },
        hr.spec.values.as_ref(),
    )
    .map_err(|e| {
        tracing::warn!(object = %key, error = %e, "values not composed");
        Ok(Stop::new(
            reason::VALUES_ERROR,
            format!("{}: {}", e.at(), e.condition_message()),
        )
        .warning()
        .requeue(ctx.options.requeue_dependency))
    })?;
    for s in &composed.skipped {
        tracing::info!(object = %key, skipped = %s, "optional values reference skipped");
    }
    Ok(Value::Object(composed.values))
}
