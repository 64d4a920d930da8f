//! Kubernetes Events for what a reconcile did (the events core's state machine records,
//! with Flux's reasons, types, messages and annotations), posted to the workload cluster.
//!
//! Each event is a `core/v1` Event about the plan's HelmRelease (`involvedObject`:
//! `helm.flotilla.dev/v1` `HelmRelease` `namespace/name`, and its `uid` when the plan
//! knows it: the group and version of Flotilla's HelmRelease CRD, the object the plan was
//! made from, as Flux's Events name `helm.toolkit.fluxcd.io/v2`, its own), from component `flotilla-agent`, as client-go's recorder writes them: `count`,
//! `firstTimestamp` and `lastTimestamp`, and a repeat of the same event (same object and
//! uid, type, reason and message) counted on the existing Event (`count` + 1, a new
//! `lastTimestamp`) rather than posted again. The Event's name is derived from that key, so
//! repeats are counted across agent restarts too; a HelmRelease recreated with a new uid
//! starts new Events, as client-go's key includes the uid.
//!
//! The Event lives in the HelmRelease's namespace when the workload cluster has it (the
//! API server requires an old-style Event to be in its object's namespace). When it does
//! not (the HelmRelease lives on the hub), the Event goes to the agent's namespace as a
//! new-style Event (`eventTime`, `reportingController`, `action`), which may name an object
//! of another namespace; its message is cut to the 1024 bytes such Events allow.
//!
//! Posting is best effort: failures (an identity that may not create Events, say) are
//! logged as warnings naming the HelmRelease and reason, and never fail a reconcile.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_core::plan::ReleasePlan;
use flotilla_core::release::{Event, EventType};
use k8s_openapi::api::core::v1::{Event as KubeEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use crate::kube::ApiFailure;

/// The component events are reported by.
pub const COMPONENT: &str = "flotilla-agent";
/// The API version events name their HelmRelease with: that of Flotilla's HelmRelease CRD
/// (`flotilla_api::HelmRelease`), whatever API version a plan file was written with.
pub const HELM_RELEASE_API_VERSION: &str = "helm.flotilla.dev/v1";
/// New-style Events allow this many bytes of message.
const NOTE_LENGTH_LIMIT: usize = 1024;

/// After this many distinct messages of one HelmRelease, type and reason, further ones are
/// combined into one Event (client-go's `maxEvents`).
pub const MAX_SIMILAR_EVENTS: usize = 10;
/// Similar events are counted while they come less than this apart (client-go's
/// `maxIntervalInSeconds`).
pub const SIMILAR_EVENTS_WINDOW: Duration = Duration::from_secs(600);
/// The message prefix of a combined Event.
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";
/// At most this many (HelmRelease, type, reason) groups are remembered.
const SIMILAR_GROUPS_LIMIT: usize = 4096;

/// Posts Events as client-go's recorder (which Flux's uses) does: a repeat of the same
/// event is counted on its Event, and once [`MAX_SIMILAR_EVENTS`] distinct messages of one
/// HelmRelease, type and reason came within [`SIMILAR_EVENTS_WINDOW`] of each other, the
/// next ones are counted on one combined Event whose message is [`COMBINED_PREFIX`] and the
/// latest message (client-go's `EventAggregator`). Cheap to clone; clones share what was
/// seen.
#[derive(Clone, Default)]
pub struct Recorder {
    similar: Arc<Mutex<HashMap<u64, Similar>>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

/// The distinct messages of one group and when the last one came.
struct Similar {
    messages: HashSet<u64>,
    last: Instant,
}

impl Recorder {
    /// Posts `events` about `plan`'s HelmRelease; `agent_namespace` takes them when the
    /// HelmRelease's namespace does not exist in the cluster. Failures are logged.
    pub async fn record(
        &self,
        client: &Client,
        agent_namespace: &str,
        plan: &ReleasePlan,
        events: &[Event],
    ) {
        for e in events {
            let combined = self.is_combined(plan, e, Instant::now());
            if let Err(err) = record_one(client, agent_namespace, plan, e, combined).await {
                tracing::warn!(
                    reason = %e.reason,
                    object = %format!("{}/{}", plan.object.namespace, plan.object.name),
                    error = %crate::kube::error_chain(&err),
                    "posting a Kubernetes Event failed"
                );
            }
        }
    }

    /// Whether `e`, coming at `at`, is posted as the combined Event of its group (client-go's
    /// `EventAggregate`): its message joins the group's distinct messages (the group starts
    /// afresh when its last event is older than the window); at the limit one message is
    /// forgotten and the event is combined.
    pub fn is_combined(&self, plan: &ReleasePlan, e: &Event, at: Instant) -> bool {
        self.aggregate(group_key(plan, e), &e.message, at)
    }

    fn aggregate(&self, group: u64, message: &str, at: Instant) -> bool {
        let message = fnv64(&[message]);
        let mut similar = self.similar.lock().unwrap_or_else(|p| p.into_inner());
        if similar.len() >= SIMILAR_GROUPS_LIMIT && !similar.contains_key(&group) {
            similar.retain(|_, s| at.saturating_duration_since(s.last) <= SIMILAR_EVENTS_WINDOW);
            if similar.len() >= SIMILAR_GROUPS_LIMIT {
                similar.clear();
            }
        }
        let entry = similar.entry(group).or_insert_with(|| Similar {
            messages: HashSet::new(),
            last: at,
        });
        if at.saturating_duration_since(entry.last) > SIMILAR_EVENTS_WINDOW {
            entry.messages.clear();
        }
        entry.messages.insert(message);
        entry.last = at;
        if entry.messages.len() < MAX_SIMILAR_EVENTS {
            return false;
        }
        if let Some(any) = entry.messages.iter().next().copied() {
            entry.messages.remove(&any);
        }
        true
    }
}

/// The key of a HelmRelease, type and reason (client-go's aggregate key; the source is
/// always this agent).
fn group_key(plan: &ReleasePlan, e: &Event) -> u64 {
    fnv64(&[
        plan.object.namespace.as_str(),
        plan.object.name.as_str(),
        plan.object.uid.as_deref().unwrap_or_default(),
        type_str(e.type_),
        &e.reason,
    ])
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

/// The Event posted for `e` in `namespace` (old-style when it is the HelmRelease's own);
/// `combined`: as its group's combined Event ([`Recorder`]).
pub fn event_object(plan: &ReleasePlan, e: &Event, namespace: &str, combined: bool) -> KubeEvent {
    let hr_namespace = plan.object.namespace.as_str();
    let hr_name = plan.object.name.as_str();
    let type_ = type_str(e.type_);
    let key = match (plan.object.uid.as_deref(), combined) {
        (_, true) => group_key(plan, e) ^ fnv64(&[COMBINED_PREFIX]),
        (Some(uid), false) => fnv64(&[hr_namespace, hr_name, uid, type_, &e.reason, &e.message]),
        (None, false) => fnv64(&[hr_namespace, hr_name, type_, &e.reason, &e.message]),
    };
    let t = now();
    let same_namespace = namespace == hr_namespace;
    let mut message = if combined {
        format!("{COMBINED_PREFIX}{}", e.message)
    } else {
        e.message.clone()
    };
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
            uid: plan.object.uid.clone(),
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
    combined: bool,
) -> Result<(), ApiFailure> {
    let hr_namespace = plan.object.namespace.as_str();
    match post(client, plan, e, hr_namespace, combined).await {
        Err(f) if f.is_not_found() && hr_namespace != agent_namespace => {
            post(client, plan, e, agent_namespace, combined).await
        }
        other => other,
    }
}

/// Creates the Event, or counts a repeat on the existing one (with the latest message, which
/// differs for a combined Event).
async fn post(
    client: &Client,
    plan: &ReleasePlan,
    e: &Event,
    namespace: &str,
    combined: bool,
) -> Result<(), ApiFailure> {
    let api: Api<KubeEvent> = Api::namespaced(client.clone(), namespace);
    let event = event_object(plan, e, namespace, combined);
    let name = event.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), &event).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = api.get(&name).await?;
            let patch = serde_json::json!({
                "count": existing.count.unwrap_or(1) + 1,
                "lastTimestamp": Time(now()),
                "message": event.message,
            });
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            Ok(())
        }
        Err(err) => Err(ApiFailure(err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_name_the_api_version_of_flotillas_helm_release_crd() {
        use kube::Resource as _;
        assert_eq!(
            HELM_RELEASE_API_VERSION,
            flotilla_api::HelmRelease::api_version(&())
        );
    }

    #[test]
    fn the_tenth_distinct_message_of_a_group_within_the_window_is_combined() {
        let recorder = Recorder::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        for i in 0..9 {
            assert!(
                !recorder.aggregate(1, &format!("m{i}"), at(i)),
                "message {i}"
            );
        }
        // Another group is counted apart.
        assert!(!recorder.aggregate(2, "m9", at(9)));
        assert!(recorder.aggregate(1, "m9", at(9)));
        // At the limit one message was forgotten: new messages keep being combined.
        assert!(recorder.aggregate(1, "m10", at(10)));
    }

    #[test]
    fn repeats_of_one_message_are_never_combined() {
        let recorder = Recorder::default();
        let t0 = Instant::now();
        for i in 0..50 {
            assert!(!recorder.aggregate(1, "same", t0 + Duration::from_secs(i)));
        }
    }

    #[test]
    fn a_group_quiet_for_longer_than_the_window_starts_afresh() {
        let recorder = Recorder::default();
        let t0 = Instant::now();
        // Nine messages, each within ten minutes of the previous one, over 40 minutes.
        for i in 0..9u64 {
            assert!(!recorder.aggregate(1, &format!("m{i}"), t0 + Duration::from_secs(i * 300)));
        }
        let later =
            t0 + Duration::from_secs(8 * 300) + SIMILAR_EVENTS_WINDOW + Duration::from_secs(1);
        assert!(!recorder.aggregate(1, "m9", later));
    }
}
