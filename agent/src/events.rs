//! Kubernetes Events for what a reconcile did (the events core's state machine records,
//! with Flux's reasons, types, messages and annotations), posted to the workload cluster.
//!
//! Each event is a `core/v1` Event about the plan's HelmRelease (`involvedObject`:
//! `helm.toolkit.fluxcd.io/v2` `HelmRelease` `namespace/name`), from component
//! `flotilla-agent`, as client-go's recorder writes them: `count`, `firstTimestamp` and
//! `lastTimestamp`, and a repeat of the same event (same object, type, reason and message)
//! counted on the existing Event rather than posted again.
//!
//! The Event lives in the HelmRelease's namespace when the workload cluster has it (the
//! API server requires an old-style Event to be in its object's namespace). When it does
//! not (the HelmRelease lives on the hub), the Event goes to the agent's namespace as a
//! new-style Event (`eventTime`, `reportingController`, `action`), which may name an object
//! of another namespace; its message is cut to the 1024 bytes such Events allow.
//!
//! Posting is best effort: failures are logged and never fail a reconcile.

use flotilla_core::plan::ReleasePlan;
use flotilla_core::release::{Event, EventType};
use k8s_openapi::api::core::v1::{Event as KubeEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use crate::kube::ApiFailure;

/// The component events are reported by.
pub const COMPONENT: &str = "flotilla-agent";
/// The API version events name their HelmRelease with.
pub const HELM_RELEASE_API_VERSION: &str = "helm.toolkit.fluxcd.io/v2";
/// New-style Events allow this many bytes of message.
const NOTE_LENGTH_LIMIT: usize = 1024;

/// Posts `events` about `plan`'s HelmRelease; `agent_namespace` takes them when the
/// HelmRelease's namespace does not exist in the cluster. Failures are logged.
pub async fn record(client: &Client, agent_namespace: &str, plan: &ReleasePlan, events: &[Event]) {
    for e in events {
        if let Err(err) = record_one(client, agent_namespace, plan, e).await {
            tracing::warn!(
                reason = %e.reason,
                object = %format!("{}/{}", plan.object.namespace, plan.object.name),
                error = %err,
                "posting a Kubernetes Event failed"
            );
        }
    }
}

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// FNV-1a, 64 bits: a stable name for one kind of event.
fn fnv64(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn type_str(t: EventType) -> &'static str {
    match t {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// The Event posted for `e` in `namespace` (old-style when it is the HelmRelease's own).
pub fn event_object(plan: &ReleasePlan, e: &Event, namespace: &str) -> KubeEvent {
    let hr_namespace = plan.object.namespace.as_str();
    let hr_name = plan.object.name.as_str();
    let type_ = type_str(e.type_);
    let key = fnv64(&[hr_namespace, hr_name, type_, &e.reason, &e.message]);
    let t = now();
    let same_namespace = namespace == hr_namespace;
    let mut message = e.message.clone();
    if !same_namespace && message.len() > NOTE_LENGTH_LIMIT {
        let mut cut = NOTE_LENGTH_LIMIT;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    KubeEvent {
        metadata: ObjectMeta {
            name: Some(format!("{hr_name}.{key:016x}")),
            namespace: Some(namespace.to_owned()),
            annotations: (!e.annotations.is_empty()).then(|| e.annotations.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(HELM_RELEASE_API_VERSION.to_owned()),
            kind: Some("HelmRelease".to_owned()),
            name: Some(hr_name.to_owned()),
            namespace: Some(hr_namespace.to_owned()),
            ..ObjectReference::default()
        },
        type_: Some(type_.to_owned()),
        reason: Some(e.reason.clone()),
        message: Some(message),
        count: Some(1),
        first_timestamp: Some(Time(t)),
        last_timestamp: Some(Time(t)),
        source: Some(EventSource {
            component: Some(COMPONENT.to_owned()),
            host: None,
        }),
        reporting_component: Some(COMPONENT.to_owned()),
        reporting_instance: (!same_namespace).then(|| COMPONENT.to_owned()),
        action: (!same_namespace).then(|| "Reconcile".to_owned()),
        event_time: (!same_namespace).then_some(MicroTime(t)),
        ..KubeEvent::default()
    }
}

async fn record_one(
    client: &Client,
    agent_namespace: &str,
    plan: &ReleasePlan,
    e: &Event,
) -> Result<(), ApiFailure> {
    let hr_namespace = plan.object.namespace.as_str();
    match post(client, plan, e, hr_namespace).await {
        Err(f) if f.is_not_found() && hr_namespace != agent_namespace => {
            post(client, plan, e, agent_namespace).await
        }
        other => other,
    }
}

/// Creates the Event, or counts a repeat on the existing one.
async fn post(
    client: &Client,
    plan: &ReleasePlan,
    e: &Event,
    namespace: &str,
) -> Result<(), ApiFailure> {
    let api: Api<KubeEvent> = Api::namespaced(client.clone(), namespace);
    let event = event_object(plan, e, namespace);
    let name = event.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), &event).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = api.get(&name).await?;
            let patch = serde_json::json!({
                "count": existing.count.unwrap_or(1) + 1,
                "lastTimestamp": Time(now()),
            });
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            Ok(())
        }
        Err(err) => Err(ApiFailure(err)),
    }
}
