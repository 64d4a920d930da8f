//! The chart source of a HelmRelease: the managed HelmChart of `spec.chart`, the
//! `chartRef` OCIRepository or HelmChart, their artifacts and the chart loaded from the
//! hub's chart store.

use super::*;

/// The HelmChart `ns/name` from the watch's store when this controller last applied the
/// same object (`desired`, a hash of it) and the store holds the generation that apply
/// produced: nothing to apply. Anything else (first reconcile after a start, a spec or label
/// change, another writer's change, a deleted HelmChart, a store behind the apply) is `None`.
pub(super) fn unchanged_helm_chart(
    ctx: &Context,
    want: &str,
    namespace: &str,
    name: &str,
    desired: u64,
) -> Option<HelmChart> {
    let (hash, generation) = *ctx
        .applied_charts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(want)?;
    if hash != desired {
        return None;
    }
    let cached = ctx
        .helm_charts
        .get()?
        .get(&ObjectRef::new(name).within(namespace))?;
    (cached.metadata.generation == Some(generation) && cached.metadata.deletion_timestamp.is_none())
        .then(|| (*cached).clone())
}

/// The namespace and name of the HelmChart the controller manages for `template` of
/// HelmRelease `key`: `<ns>-<name>` in the namespace of the template's source.
pub(super) fn managed_helm_chart(
    template: &flotilla_core::spec::HelmChartTemplate,
    key: &ObjectKey,
) -> (String, String) {
    let ns = key.namespace.as_str();
    let src_ns = template
        .spec
        .source_ref
        .namespace
        .clone()
        .unwrap_or_else(|| ns.to_owned());
    (src_ns, format!("{ns}-{}", key.name))
}

/// The kind of a chart template's source, as Flux names it in messages.
pub(super) fn source_kind_name(kind: flotilla_core::spec::SourceKind) -> &'static str {
    use flotilla_core::spec::SourceKind;
    match kind {
        SourceKind::HelmRepository => "HelmRepository",
        SourceKind::GitRepository => "GitRepository",
        SourceKind::Bucket => "Bucket",
    }
}

/// The chart artifact of a source.
pub(super) struct SourceArtifact {
    pub(super) digest: ChartDigest,
    /// The artifact revision of an `OCIRepository` (`<tag>@<digest>` or `<digest>`): the
    /// chart's version gets its digest ([`chart_artifact`]).
    pub(super) oci_revision: Option<String>,
    /// `HelmChart 'ns/name'` or `OCIRepository 'ns/name'`, for messages.
    pub(super) what: String,
}

pub(super) async fn source(
    hr: &HelmRelease,
    key: &ObjectKey,
    ctx: &Context,
    helm_chart: &mut String,
) -> Result<SourceArtifact, Result<Stop, ReconcileError>> {
    let ns = key.namespace.as_str();
    let not_ready = |what: String, msg: String| {
        Ok(decide::source_not_ready(
            &what,
            &msg,
            jitter(ctx.options.requeue_dependency, ctx.options.jitter),
        ))
    };
    let bad_digest = |what: &str, digest: &str| {
        Ok(Stop::new(
            reason::ARTIFACT_FAILED,
            format!("{what} artifact digest '{digest}' is not a sha256 digest"),
        ))
    };
    if let Some(template) = &hr.spec.chart {
        let (src_ns, name) = managed_helm_chart(template, key);
        let want = format!("{src_ns}/{name}");
        if !helm_chart.is_empty() && *helm_chart != want {
            delete_helm_chart(ctx, hr, helm_chart).await;
        }
        let created = *helm_chart != want;
        let mut labels: BTreeMap<String, String> = template
            .metadata
            .as_ref()
            .map(|m| m.labels.clone())
            .unwrap_or_default();
        labels.insert(OWNER_NAME_LABEL.into(), key.name.to_string());
        labels.insert(OWNER_NAMESPACE_LABEL.into(), ns.to_owned());
        let annotations = template
            .metadata
            .as_ref()
            .map(|m| m.annotations.clone())
            .unwrap_or_default();
        let spec = HelmChartSpec {
            chart: template.spec.chart.clone(),
            version: Some(template.spec.version().to_owned()),
            source_ref: LocalHelmChartSourceReference {
                api_version: template.spec.source_ref.api_version.clone(),
                kind: template.spec.source_ref.kind,
                name: template.spec.source_ref.name.clone(),
            },
            interval: template.spec.interval.unwrap_or(hr.spec.interval),
            reconcile_strategy: Some(
                template
                    .spec
                    .reconcile_strategy
                    .unwrap_or(ReconcileStrategy::ChartVersion),
            ),
            values_files: template.spec.values_files.clone(),
            ignore_missing_values_files: template.spec.ignore_missing_values_files,
            suspend: false,
            verify: template.spec.verify.clone(),
        };
        let mut object = serde_json::json!({
            "apiVersion": HelmChart::api_version(&()),
            "kind": HelmChart::kind(&()),
            "metadata": {"name": name, "namespace": src_ns, "labels": labels},
            "spec": spec,
        });
        // An empty map would make every apply a write (the server drops it when storing,
        // so the applied object never equals the stored one), and every write a watch event.
        if !annotations.is_empty() {
            object["metadata"]["annotations"] = serde_json::json!(annotations);
        }
        let desired = {
            let mut hasher = DefaultHasher::new();
            object.to_string().hash(&mut hasher);
            hasher.finish()
        };
        let hc = match unchanged_helm_chart(ctx, &want, &src_ns, &name, desired) {
            Some(hc) if !created => hc,
            _ => {
                let api: Api<HelmChart> = Api::namespaced(ctx.client.clone(), &src_ns);
                let hc = api
                    .patch(
                        &name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(&object),
                    )
                    .await
                    .map_err(|e| Err(kube_err(key, "applying the HelmChart")(e)))?;
                tracing::trace!(chart = %want, resource_version = ?hc.metadata.resource_version, "HelmChart applied");
                if let Some(generation) = hc.metadata.generation {
                    ctx.applied_charts
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(want.clone(), (desired, generation));
                }
                hc
            }
        };
        // Flux's `HelmChartCreated` / `HelmChartConfigured` Events (helm-controller's
        // HelmChartTemplate, type Trace, posted as Normal): created when the status named no
        // chart of this HelmRelease yet, configured when a spec change (a generation past
        // the first) is not observed by the source controller yet. Unchanged: no Event. (A
        // reconcile before the source controller caught up repeats the same Event, which
        // counts on the existing one.)
        let observed = hc.status.as_ref().map_or(0, |s| s.observed_generation);
        let generation = hc.metadata.generation.unwrap_or_default();
        let action = if created {
            Some(("HelmChartCreated", "Created"))
        } else if generation > 1 && generation > observed {
            Some(("HelmChartConfigured", "Configured"))
        } else {
            None
        };
        if let Some((reason, verb)) = action {
            let message = format!(
                "{verb} HelmChart/{want} with SourceRef '{}/{src_ns}/{}'",
                source_kind_name(template.spec.source_ref.kind),
                template.spec.source_ref.name
            );
            ctx.book.event(hr, false, reason, &message).await;
        }
        *helm_chart = want.clone();
        let what = format!("HelmChart '{want}'");
        let status = hc.status.clone().unwrap_or_default();
        source_ready(
            hc.metadata.generation,
            status.observed_generation,
            &status.conditions,
            status.artifact.as_ref(),
        )
        .map_err(|m| not_ready(what.clone(), m))?;
        let artifact = status.artifact.expect("checked by source_ready");
        let digest = ChartDigest::new(artifact.digest.clone())
            .map_err(|_| bad_digest(&what, &artifact.digest))?;
        return Ok(SourceArtifact {
            digest,
            oci_revision: None,
            what,
        });
    }
    if !helm_chart.is_empty() {
        delete_helm_chart(ctx, hr, helm_chart).await;
        helm_chart.clear();
    }
    let Some(r) = &hr.spec.chart_ref else {
        return Err(Ok(Stop::new(
            INVALID_SPEC,
            "invalid Chart reference: exactly one of spec.chart and spec.chartRef must be set"
                .into(),
        )
        .stalled()));
    };
    let src_ns = r.namespace.clone().unwrap_or_else(|| ns.to_owned());
    let what_get = |kind: &str, e: kube::Error| {
        Ok(Stop::new(
            reason::ARTIFACT_FAILED,
            format!(
                "could not get Source object: {kind} '{src_ns}/{}': {}",
                r.name,
                error_chain(&e)
            ),
        )
        .requeue(ctx.options.requeue_dependency))
    };
    match r.kind {
        ChartRefKind::OCIRepository => {
            let api: Api<OCIRepository> = Api::namespaced(ctx.client.clone(), &src_ns);
            let o = api
                .get(&r.name)
                .await
                .map_err(|e| what_get("OCIRepository", e))?;
            let what = format!("OCIRepository '{src_ns}/{}'", r.name);
            let status = o.status.clone().unwrap_or_default();
            source_ready(
                o.metadata.generation,
                status.observed_generation,
                &status.conditions,
                status.artifact.as_ref(),
            )
            .map_err(|m| not_ready(what.clone(), m))?;
            let artifact = status.artifact.expect("checked by source_ready");
            let digest = ChartDigest::new(artifact.digest.clone())
                .map_err(|_| bad_digest(&what, &artifact.digest))?;
            Ok(SourceArtifact {
                digest,
                oci_revision: Some(artifact.revision),
                what,
            })
        }
        _ => {
            let api: Api<HelmChart> = Api::namespaced(ctx.client.clone(), &src_ns);
            let hc = api
                .get(&r.name)
                .await
                .map_err(|e| what_get("HelmChart", e))?;
            let what = format!("HelmChart '{src_ns}/{}'", r.name);
            let status = hc.status.clone().unwrap_or_default();
            source_ready(
                hc.metadata.generation,
                status.observed_generation,
                &status.conditions,
                status.artifact.as_ref(),
            )
            .map_err(|m| not_ready(what.clone(), m))?;
            let artifact = status.artifact.expect("checked by source_ready");
            let digest = ChartDigest::new(artifact.digest.clone())
                .map_err(|_| bad_digest(&what, &artifact.digest))?;
            Ok(SourceArtifact {
                digest,
                oci_revision: None,
                what,
            })
        }
    }
}

/// Deletes the managed HelmChart `ns/name` of `hr`; Flux's `HelmChartDeleted` Event when
/// it was there.
pub(super) async fn delete_helm_chart(ctx: &Context, hr: &HelmRelease, namespaced: &str) {
    let Some((ns, name)) = namespaced.split_once('/') else {
        return;
    };
    let api: Api<HelmChart> = Api::namespaced(ctx.client.clone(), ns);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(chart = namespaced, "managed HelmChart deleted");
            let message = format!("deleted HelmChart '{namespaced}'");
            ctx.book
                .event(hr, false, "HelmChartDeleted", &message)
                .await;
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            tracing::warn!(chart = namespaced, error = %error_chain(&e), "deleting the managed HelmChart failed")
        }
    }
}

/// The chart of the artifact from the store, as the plan names it.
pub(super) async fn load_chart(
    artifact: &SourceArtifact,
    ctx: &Context,
    hr: &HelmRelease,
) -> Result<ChartArtifact, Result<Stop, ReconcileError>> {
    let chart = match ctx.charts.get(&artifact.digest).await {
        Ok(chart) => chart,
        Err(ChartError::NotFound { .. }) => {
            // The store lost it (a new artifact directory, say): ask the source again.
            if hr.spec.chart.is_some() {
                request_reconcile_of_helm_chart(ctx, hr).await;
            }
            let after = ctx.options.requeue_dependency;
            return Err(Ok(Stop::new(
                reason::ARTIFACT_FAILED,
                format!(
                    "Source not ready: artifact not found. Retrying in {}",
                    flotilla_core::duration::GoDuration::from(after)
                ),
            )
            .requeue(after)));
        }
        Err(e) => {
            return Err(Ok(Stop::new(
                reason::ARTIFACT_FAILED,
                format!(
                    "Could not load chart: {} ({})",
                    error_chain(&e),
                    artifact.what
                ),
            )
            .requeue(ctx.options.requeue_dependency)));
        }
    };
    chart_artifact(
        &chart.metadata.name,
        &chart.metadata.version,
        &chart.metadata.app_version,
        artifact,
    )
}

/// The chart as the plan names it: from an `OCIRepository`, its version with the
/// revision's digest as build metadata, by helm-controller's rule
/// ([`chart_version_with_digest`](crate::sources::oci::chart_version_with_digest), the one
/// copy of it), and `ChartMutateError` when the revision does not fit the chart.
pub(super) fn chart_artifact(
    name: &str,
    version: &str,
    app_version: &str,
    artifact: &SourceArtifact,
) -> Result<ChartArtifact, Result<Stop, ReconcileError>> {
    let (version, oci_digest) = match &artifact.oci_revision {
        Some(revision) => {
            let (version, digest) =
                crate::sources::oci::chart_version_with_digest(version, revision).map_err(|e| {
                    Ok(Stop::new(
                        reason::CHART_MUTATE_ERROR,
                        format!("{e} ({})", artifact.what),
                    ))
                })?;
            (version, Some(digest))
        }
        None => (version.to_owned(), None),
    };
    Ok(ChartArtifact {
        name: name.to_owned(),
        version,
        app_version: Some(app_version.to_owned()).filter(|a| !a.is_empty()),
        digest: artifact.digest.clone(),
        oci_digest,
    })
}

pub(super) async fn request_reconcile_of_helm_chart(ctx: &Context, hr: &HelmRelease) {
    let Some(status) = &hr.status else { return };
    let Some((ns, name)) = status.helm_chart.split_once('/') else {
        return;
    };
    let api: Api<HelmChart> = Api::namespaced(ctx.client.clone(), ns);
    let patch = serde_json::json!({"metadata": {"annotations": {
        RECONCILE_REQUEST_ANNOTATION: util::now().as_str(),
    }}});
    if let Err(e) = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::debug!(chart = %status.helm_chart, error = %error_chain(&e), "requesting a HelmChart reconcile failed");
    }
}
