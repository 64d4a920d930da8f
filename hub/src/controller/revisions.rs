//! Plan revisions: the revision of a plan by its digest, recorded in the HelmRelease's
//! annotations before sending (no epoch) or after, in the background (with an epoch); a
//! HelmReleaseSet's child records it in `status.plan` instead, with the status write its
//! agent's report causes ([`Recording::Status`]): one API write fewer per cluster and
//! revision on the fleet's path.

use super::*;

/// The revision of the plan of `digest` ([`plan_digest`]): the recorded one when the plan
/// is unchanged, else the next one. Without a plan epoch the next one is recorded on the
/// object first; with one, the second value is true: record it after sending
/// ([`record_revision_later`]).
pub(super) async fn plan_revision(
    hr: &HelmRelease,
    key: &ObjectKey,
    ctx: &Context,
    digest: &str,
) -> Result<(PlanRevision, bool), ReconcileError> {
    let recorded = recorded(hr);
    let known = ctx
        .revisions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(key)
        .cloned();
    let (rev, held_digest) = match known {
        Some(k) if k.0 >= recorded.0 => k,
        _ => recorded,
    };
    if rev > 0 && held_digest == digest {
        return Ok((PlanRevision::new(rev), false));
    }
    let next = epoch::next_revision(rev, ctx.plan_floor);
    if ctx.plan_floor > 0 {
        ctx.revisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), (next, digest.to_owned()));
        return Ok((PlanRevision::new(next), true));
    }
    let api: Api<HelmRelease> = Api::namespaced(ctx.client.clone(), key.namespace.as_str());
    api.patch(
        key.name.as_str(),
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
            PLAN_REVISION_ANNOTATION: next.to_string(),
            PLAN_DIGEST_ANNOTATION: digest,
        }}})),
    )
    .await
    .map_err(kube_err(key, "recording the plan revision"))?;
    ctx.revisions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone(), (next, digest.to_owned()));
    Ok((PlanRevision::new(next), false))
}

/// Writes the plan-revision annotations of `key` in the background (at most
/// [`REVISION_WRITERS`] at once). Skipped when a newer revision was handed out before its
/// turn: that one's write records it. A failed write is logged; monotonicity does not
/// depend on it (the plan epoch does), only a restarted hub's re-use of the revision of
/// an unchanged plan.
pub(super) fn record_revision_later(ctx: &Context, key: &ObjectKey, revision: u64, digest: String) {
    let (client, revisions, writers, key) = (
        ctx.client.clone(),
        ctx.revisions.clone(),
        ctx.revision_writers.clone(),
        key.clone(),
    );
    ctx.background.spawn(async move {
        let Ok(_permit) = writers.acquire_owned().await else {
            return;
        };
        let current = revisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .map(|(r, _)| *r);
        if current != Some(revision) {
            return;
        }
        let api: Api<HelmRelease> = Api::namespaced(client, key.namespace.as_str());
        let result = api
            .patch(
                key.name.as_str(),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                    PLAN_REVISION_ANNOTATION: revision.to_string(),
                    PLAN_DIGEST_ANNOTATION: digest,
                }}})),
            )
            .await;
        match result {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                tracing::warn!(object = %key, revision, error = %error_chain(&e), "recording the plan revision");
            }
        }
    });
}

/// sha256 of the plan's JSON with its revision zeroed.
pub(super) fn plan_digest(plan: &ReleasePlan) -> String {
    let mut p = plan.clone();
    p.revision = PlanRevision::new(0);
    let json = serde_json::to_vec(&p).unwrap_or_default();
    ChartDigest::of_bytes(&json).as_str().to_owned()
}

/// Where a HelmRelease's plan revision is recorded after sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recording {
    /// The plan-revision annotations ([`record_revision_later`]).
    Annotations,
    /// `status.plan`, by the status writer ([`crate::status::StatusBook::planned`]): for the
    /// children of a HelmReleaseSet, whose controller owner is the set.
    Status,
}

impl Recording {
    /// How `hr`'s revisions are recorded.
    pub(super) fn of(hr: &HelmRelease) -> Recording {
        let set_child = hr.owner_references().iter().any(|o| {
            o.controller == Some(true)
                && o.kind == "HelmReleaseSet"
                && o.api_version.split('/').next() == Some("helm.flotilla.dev")
        });
        if set_child {
            Recording::Status
        } else {
            Recording::Annotations
        }
    }
}

/// The recorded `(revision, digest)` of `hr`: the annotations' or `status.plan`'s, the newer
/// one (`(0, "")` when none).
fn recorded(hr: &HelmRelease) -> (u64, String) {
    let annotations = hr.annotations();
    let from_annotations = (
        annotations
            .get(PLAN_REVISION_ANNOTATION)
            .and_then(|r| r.parse::<u64>().ok())
            .unwrap_or(0),
        annotations
            .get(PLAN_DIGEST_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
    );
    match hr.status.as_ref().and_then(|s| s.plan.as_ref()) {
        Some(p) if p.revision > from_annotations.0 => (p.revision, p.digest.clone()),
        _ => from_annotations,
    }
}

/// The recorded plan revision of `hr` (0 when none).
pub(super) fn recorded_revision(hr: &HelmRelease, key: &ObjectKey, ctx: &Context) -> u64 {
    let recorded = recorded(hr).0;
    let known = ctx
        .revisions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(key)
        .map(|k| k.0)
        .unwrap_or(0);
    recorded.max(known)
}
