//! The set controller's writes: its children (server-side apply, drop, orphan, delete),
//! its ControllerRevisions, its status and its Events. Thin: each is one or two API calls;
//! what to write is decided by the callers and [`super::decide`].

use std::collections::BTreeMap;

use flotilla_api::{HelmRelease, HelmReleaseSet};
use flotilla_core::set::{
    CLUSTER_LABEL, HelmReleaseSetSpec, HelmReleaseSetStatus, PROMOTED_AT_ANNOTATION,
    REVISION_LABEL, SET_LABEL, SetRevision,
};
use flotilla_core::spec::HelmReleaseSpec;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource as _, ResourceExt as _};
use serde_json::{Value, json};

use super::{Context, SetError, StoredRevision, kube_err, owner_reference};
use crate::util::{FIELD_MANAGER, error_chain};

/// The child HelmRelease of `cluster` as the set applies it: the template's labels and
/// annotations, then the set's own ([`SET_LABEL`], [`CLUSTER_LABEL`], [`REVISION_LABEL`],
/// [`PROMOTED_AT_ANNOTATION`]: the set's win), the set as controller owner, and `spec`.
pub(super) fn child_object(
    set: &HelmReleaseSet,
    name: &str,
    cluster: &str,
    revision: &SetRevision,
    promoted_at: &str,
    spec: &HelmReleaseSpec,
) -> Value {
    let meta = set.spec.template.metadata.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = meta.labels;
    labels.insert(SET_LABEL.into(), set.name_any());
    labels.insert(CLUSTER_LABEL.into(), cluster.into());
    labels.insert(REVISION_LABEL.into(), revision.to_string());
    let mut annotations: BTreeMap<String, String> = meta.annotations;
    annotations.insert(PROMOTED_AT_ANNOTATION.into(), promoted_at.into());
    json!({
        "apiVersion": HelmRelease::api_version(&()),
        "kind": HelmRelease::kind(&()),
        "metadata": {
            "name": name,
            "namespace": set.namespace(),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": owner_reference(set).into_iter().collect::<Vec<_>>(),
        },
        "spec": spec,
    })
}

/// Server-side applies a child (forced: the set owns the fields it writes; a hand edit of
/// one is put back).
pub(super) async fn apply_child(
    ctx: &Context,
    set: &HelmReleaseSet,
    name: &str,
    object: &Value,
) -> Result<(), SetError> {
    let api: Api<HelmRelease> =
        Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(kube_err(
        &set.key(),
        format!("applying child HelmRelease {name}"),
    ))?;
    Ok(())
}

fn tolerate_gone(r: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    }
}

/// Deletes a child; its finalizer uninstalls the release (`stopMatchingPolicy: Uninstall`).
pub(super) async fn delete_child(
    ctx: &Context,
    set: &HelmReleaseSet,
    child: &HelmRelease,
) -> Result<(), SetError> {
    let api: Api<HelmRelease> =
        Api::namespaced(ctx.client.clone(), &child.namespace().unwrap_or_default());
    tolerate_gone(
        api.delete(&child.name_any(), &DeleteParams::default())
            .await
            .map(|_| ()),
    )
    .map_err(kube_err(
        &set.key(),
        format!("deleting child HelmRelease {}", child.name_any()),
    ))
}

/// Drops a child without an uninstall (its ManagedCluster is being deleted): `suspend:
/// true`, then delete; the HelmRelease finalizer lets a suspended object go without
/// uninstalling (see the module docs).
pub(super) async fn drop_child(
    ctx: &Context,
    set: &HelmReleaseSet,
    child: &HelmRelease,
) -> Result<(), SetError> {
    let api: Api<HelmRelease> =
        Api::namespaced(ctx.client.clone(), &child.namespace().unwrap_or_default());
    let name = child.name_any();
    if !child.spec.suspend {
        tolerate_gone(
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"suspend": true}})),
            )
            .await
            .map(|_| ()),
        )
        .map_err(kube_err(
            &set.key(),
            format!("suspending child HelmRelease {name} before dropping it"),
        ))?;
    }
    delete_child(ctx, set, child).await
}

/// Leaves a child alone for good (`stopMatchingPolicy: Orphan`): the set's labels and its
/// owner reference removed (guarded by the read `resourceVersion`), the release untouched.
pub(super) async fn orphan_child(
    ctx: &Context,
    set: &HelmReleaseSet,
    child: &HelmRelease,
) -> Result<(), SetError> {
    let api: Api<HelmRelease> =
        Api::namespaced(ctx.client.clone(), &child.namespace().unwrap_or_default());
    let uid = set.uid();
    let owners: Vec<_> = child
        .owner_references()
        .iter()
        .filter(|o| Some(&o.uid) != uid.as_ref())
        .cloned()
        .collect();
    let patch = json!({
        "metadata": {
            "resourceVersion": child.resource_version(),
            "labels": {SET_LABEL: null, CLUSTER_LABEL: null, REVISION_LABEL: null},
            "annotations": {PROMOTED_AT_ANNOTATION: null},
            "ownerReferences": owners,
        }
    });
    tolerate_gone(
        api.patch(
            &child.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map(|_| ()),
    )
    .map_err(kube_err(
        &set.key(),
        format!("orphaning child HelmRelease {}", child.name_any()),
    ))
}

/// The set's ControllerRevisions (by [`SET_LABEL`] and owner).
pub(super) async fn list_revisions(
    ctx: &Context,
    set: &HelmReleaseSet,
) -> Result<Vec<ControllerRevision>, SetError> {
    let api: Api<ControllerRevision> =
        Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    let list = api
        .list(&ListParams::default().labels(&format!("{SET_LABEL}={}", set.name_any())))
        .await
        .map_err(kube_err(&set.key(), "listing ControllerRevisions"))?;
    let uid = set.uid();
    Ok(list
        .items
        .into_iter()
        .filter(|r| {
            r.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == uid.as_ref())
        })
        .collect())
}

/// Name and number of a ControllerRevision.
pub(super) fn stored(r: &ControllerRevision) -> StoredRevision {
    StoredRevision {
        name: r.name_any(),
        number: r.revision,
    }
}

/// What a ControllerRevision holds: the parts of the spec that make the revision.
fn revision_data(spec: &HelmReleaseSetSpec) -> Value {
    json!({
        "template": spec.template,
        "valuesTemplate": spec.values_template,
        "targetCustomizations": spec.target_customizations,
    })
}

/// The spec a ControllerRevision holds (only what shapes a child; the rest defaulted),
/// checked against the revision it is named for.
pub(super) fn revision_spec(
    r: &ControllerRevision,
    revision: &SetRevision,
) -> Result<HelmReleaseSetSpec, String> {
    let data = r.data.as_ref().ok_or_else(|| "no data".to_owned())?;
    let spec: HelmReleaseSetSpec =
        serde_json::from_value(data.0.clone()).map_err(|e| format!("unreadable data: {e}"))?;
    if &spec.revision() != revision {
        return Err(format!(
            "holds revision {}, not {revision}",
            spec.revision()
        ));
    }
    Ok(spec)
}

/// Creates the ControllerRevision of `revision` (an existing one is left as it is).
pub(super) async fn create_revision(
    ctx: &Context,
    set: &HelmReleaseSet,
    revision: &SetRevision,
    number: i64,
) -> Result<ControllerRevision, SetError> {
    let api: Api<ControllerRevision> =
        Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    let name = revision.controller_revision_name(&set.name_any());
    let object = ControllerRevision {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            namespace: set.namespace(),
            labels: Some([(SET_LABEL.to_owned(), set.name_any())].into()),
            owner_references: owner_reference(set).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(RawExtension(revision_data(&set.spec))),
        revision: number,
    };
    match api.create(&PostParams::default(), &object).await {
        Ok(r) => Ok(r),
        Err(kube::Error::Api(s)) if s.code == 409 => api.get(&name).await.map_err(kube_err(
            &set.key(),
            format!("reading ControllerRevision {name}"),
        )),
        Err(e) => Err(kube_err(
            &set.key(),
            format!("creating ControllerRevision {name}"),
        )(e)),
    }
}

/// Deletes ControllerRevisions past the history limit.
pub(super) async fn delete_revisions(ctx: &Context, set: &HelmReleaseSet, names: &[String]) {
    let api: Api<ControllerRevision> =
        Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    for name in names {
        if let Err(e) = tolerate_gone(api.delete(name, &DeleteParams::default()).await.map(|_| ()))
        {
            tracing::warn!(object = %set.key(), revision = %name, error = %error_chain(&e), "trimming a ControllerRevision failed");
        }
    }
}

/// Writes the set's status (server-side apply of the status subresource, forced).
pub(super) async fn write_status(
    ctx: &Context,
    set: &HelmReleaseSet,
    status: &HelmReleaseSetStatus,
) -> Result<(), SetError> {
    let api: Api<HelmReleaseSet> =
        Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": HelmReleaseSet::api_version(&()),
        "kind": HelmReleaseSet::kind(&()),
        "status": status,
    });
    match api
        .patch_status(
            &set.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(kube_err(&set.key(), "writing the status")(e)),
    }
}

/// Posts an Event on the set, within its rate ([`Context::may_send_event`]; past it the
/// Event is dropped and logged).
pub(super) async fn event(ctx: &Context, set: &HelmReleaseSet, e: &super::SetEvent) {
    let key = set.key();
    if !ctx.may_send_event(&key) {
        tracing::debug!(object = %key, reason = e.reason, "Event dropped: the set's Event rate is exceeded");
        return;
    }
    let ev = Event {
        type_: if e.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: e.reason.to_owned(),
        note: Some(e.message.chars().take(1024).collect()),
        action: e.reason.to_owned(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&ev, &set.object_ref(&())).await {
        tracing::warn!(object = %key, reason = e.reason, error = %error_chain(&err), "posting an Event on the set failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_carries_the_sets_labels_over_the_templates_and_the_set_as_controller() {
        let set: HelmReleaseSet = serde_json::from_value(json!({
            "apiVersion": "helm.flotilla.dev/v1alpha1", "kind": "HelmReleaseSet",
            "metadata": {"name": "web", "namespace": "apps", "uid": "u-1"},
            "spec": {
                "clusterSelector": {},
                "template": {
                    "metadata": {"labels": {"team": "a", SET_LABEL: "spoofed"}, "annotations": {"note": "x"}},
                    "spec": {"interval": "5m", "chart": {"spec": {"chart": "hello",
                        "sourceRef": {"kind": "HelmRepository", "name": "examples"}}}},
                },
            },
        }))
        .unwrap();
        let rev = SetRevision::new("0123456789").unwrap();
        let spec = flotilla_core::set::child_spec(&set.spec, "web", "edge-1", None, None);
        let obj = child_object(
            &set,
            "web-edge-1",
            "edge-1",
            &rev,
            "2026-01-01T00:00:00Z",
            &spec,
        );
        assert_eq!(obj["metadata"]["labels"][SET_LABEL], "web");
        assert_eq!(obj["metadata"]["labels"]["team"], "a");
        assert_eq!(obj["metadata"]["labels"][CLUSTER_LABEL], "edge-1");
        assert_eq!(obj["metadata"]["labels"][REVISION_LABEL], "0123456789");
        assert_eq!(
            obj["metadata"]["annotations"][PROMOTED_AT_ANNOTATION],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(obj["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(obj["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(obj["spec"]["clusterRef"]["name"], "edge-1");
        assert_eq!(obj["spec"]["releaseName"], "web");
    }

    #[test]
    fn a_controller_revision_gives_back_the_spec_of_its_revision() {
        let spec: HelmReleaseSetSpec = serde_json::from_value(json!({
            "clusterSelector": {"matchLabels": {"a": "b"}},
            "template": {"spec": {"interval": "5m"}},
            "valuesTemplate": "message: {{ .ClusterName }}",
        }))
        .unwrap();
        let rev = spec.revision();
        let cr = ControllerRevision {
            data: Some(RawExtension(revision_data(&spec))),
            ..Default::default()
        };
        let back = revision_spec(&cr, &rev).unwrap();
        assert_eq!(back.values_template, spec.values_template);
        assert_eq!(back.revision(), rev);
        let other = SetRevision::new("ffffffffff").unwrap();
        assert!(
            revision_spec(&cr, &other)
                .unwrap_err()
                .contains("not ffffffffff")
        );
    }
}
