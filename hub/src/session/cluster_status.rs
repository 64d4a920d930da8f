//! Writes a ManagedCluster's status: what registration and sessions learn about the agent.
//!
//! Every write is a merge patch of the status subresource with the fields it knows. A
//! [`write`] reads the object first so a condition keeps its transition time while its
//! state holds; a [`heartbeat`] (the time and the plans held, nothing else) is one patch
//! without the read: a connected fleet's steady state costs one write per cluster per
//! heartbeat interval, not a read and a write.

use flotilla_api::ManagedCluster;
use flotilla_api::fleet::{AgentConnection, ConnectionState, condition};
use flotilla_core::meta::{Condition, ConditionStatus, Conditions as _, Timestamp};
use kube::Api;
use kube::api::{Patch, PatchParams};

/// The fields a write sets (`None`: left as they are).
#[derive(Debug, Default, Clone)]
pub struct StatusUpdate {
    /// `status.clusterUID`.
    pub cluster_uid: Option<String>,
    /// `status.agentVersion`.
    pub agent_version: Option<String>,
    /// `status.kubernetesVersion`.
    pub kubernetes_version: Option<String>,
    /// `status.certificateExpiry`.
    pub certificate_expiry: Option<Timestamp>,
    /// `status.plansHeld`.
    pub plans_held: Option<i64>,
    /// Sets `status.lastHeartbeatTime` to now.
    pub heartbeat: bool,
    /// `status.connection` (and the `Available` condition with it).
    pub connection: Option<ConnectionState>,
    /// The `Joined` condition: status, reason, message.
    pub joined: Option<(ConditionStatus, &'static str, String)>,
}

/// Now, as a Kubernetes timestamp.
pub fn now() -> Timestamp {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    at(secs)
}

/// A time as a Kubernetes timestamp (whole seconds, UTC).
pub fn at(unix_secs: u64) -> Timestamp {
    let dt = time::OffsetDateTime::from_unix_timestamp(i64::try_from(unix_secs).unwrap_or(0))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let text = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        dt.year(),
        u8::from(dt.month()),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    );
    // The format above is always a valid RFC 3339 timestamp.
    Timestamp::new(text).expect("a formatted UTC time is a valid timestamp")
}

/// Writes `status.lastHeartbeatTime` (now) and `status.plansHeld` of ManagedCluster `name`
/// in one merge patch, without reading it first. Failures are logged, never fatal to a
/// session; a ManagedCluster deleted meanwhile is not recreated (a patch of a missing object
/// is a 404).
pub async fn heartbeat(api: &Api<ManagedCluster>, name: &str, plans_held: Option<i64>) {
    let mut patch = serde_json::Map::new();
    patch.insert("lastHeartbeatTime".into(), now().as_str().into());
    if let Some(n) = plans_held {
        patch.insert("plansHeld".into(), n.into());
    }
    let result = api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": patch })),
        )
        .await;
    match result {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            tracing::warn!(cluster = name, error = %e, "writing the ManagedCluster heartbeat");
        }
    }
}

/// Writes `update` into ManagedCluster `name`'s status. Failures are logged (a status write
/// is retried by the next one), never fatal to a session.
pub async fn write(api: &Api<ManagedCluster>, name: &str, update: StatusUpdate) {
    if let Err(e) = try_write(api, name, update).await {
        tracing::warn!(cluster = name, error = %e, "writing the ManagedCluster status");
    }
}

async fn try_write(
    api: &Api<ManagedCluster>,
    name: &str,
    update: StatusUpdate,
) -> Result<(), kube::Error> {
    let Some(mc) = api.get_opt(name).await? else {
        return Ok(());
    };
    let now = now();
    let generation = mc.metadata.generation.unwrap_or(0);
    let status = mc.status.clone().unwrap_or_default();
    let mut conditions: Vec<Condition> = status.conditions.clone();
    if mc.spec.accepted {
        conditions.set_condition(
            condition::ACCEPTED,
            ConditionStatus::True,
            "Accepted",
            "the cluster is accepted: it receives plans".into(),
            generation,
            &now,
        );
    } else {
        conditions.set_condition(
            condition::ACCEPTED,
            ConditionStatus::False,
            "NotAccepted",
            format!("waiting for an administrator to accept it (flotilla cluster accept {name}, or set spec.accepted)"),
            generation,
            &now,
        );
    }
    if let Some((s, reason, message)) = &update.joined {
        conditions.set_condition(
            condition::JOINED,
            *s,
            reason,
            message.clone(),
            generation,
            &now,
        );
    }
    let mut patch = serde_json::Map::new();
    if let Some(state) = update.connection {
        let (s, reason, message) = match state {
            ConnectionState::Connected => (
                ConditionStatus::True,
                "SessionUp",
                "the agent's session is up".to_owned(),
            ),
            ConnectionState::Disconnected => (
                ConditionStatus::False,
                "SessionDown",
                "no session with the agent".to_owned(),
            ),
        };
        conditions.set_condition(condition::AVAILABLE, s, reason, message, generation, &now);
        let changed = status.connection.as_ref().map(|c| c.state) != Some(state);
        let connection = AgentConnection {
            state,
            last_transition_time: if changed {
                Some(now.clone())
            } else {
                status
                    .connection
                    .as_ref()
                    .and_then(|c| c.last_transition_time.clone())
            },
        };
        patch.insert(
            "connection".into(),
            serde_json::to_value(connection).unwrap_or_default(),
        );
    }
    patch.insert("observedGeneration".into(), generation.into());
    patch.insert(
        "conditions".into(),
        serde_json::to_value(&conditions).unwrap_or_default(),
    );
    if let Some(v) = update.cluster_uid {
        patch.insert("clusterUID".into(), v.into());
    }
    if let Some(v) = update.agent_version {
        patch.insert("agentVersion".into(), v.into());
    }
    if let Some(v) = update.kubernetes_version {
        patch.insert("kubernetesVersion".into(), v.into());
    }
    if let Some(v) = update.certificate_expiry {
        patch.insert("certificateExpiry".into(), v.as_str().into());
    }
    if let Some(v) = update.plans_held {
        patch.insert("plansHeld".into(), v.into());
    }
    if update.heartbeat {
        patch.insert("lastHeartbeatTime".into(), now.as_str().into());
    }
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": patch })),
    )
    .await?;
    Ok(())
}
