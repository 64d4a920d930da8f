//! Writes a ManagedCluster's status: what registration and sessions learn about the agent.
//!
//! Every write is a merge patch of the status subresource with the fields it knows. A
//! [`write`] reads the object first so a condition keeps its transition time while its
//! state holds; a [`heartbeat`] (the time and the plans held, nothing else) is one patch
//! without the read: a connected fleet's steady state costs one write per cluster per
//! heartbeat interval, not a read and a write. Heartbeats are bookkeeping: they draw on one
//! hub-wide [`WriteBudget`], so a thousand sessions changing `plansHeld` together (a rollout)
//! spread their writes out instead of competing with the HelmRelease controller's.

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

/// A token bucket of heartbeat writes shared by every session of the hub: `rate` writes a
/// second, at most `rate` in a burst. A session that finds it empty leaves its heartbeat to
/// its next status tick (the field is for people and tools; the hub's own liveness is the
/// session).
#[derive(Debug)]
pub struct WriteBudget {
    rate: f64,
    state: std::sync::Mutex<(f64, std::time::Instant)>,
}

impl WriteBudget {
    /// A full bucket of `rate` writes a second (at least one).
    pub fn new(rate: f64) -> Self {
        let rate = if rate.is_finite() { rate.max(1.0) } else { 1.0 };
        Self {
            rate,
            state: std::sync::Mutex::new((rate, std::time::Instant::now())),
        }
    }

    /// Takes one write if the bucket holds one.
    pub fn try_take(&self) -> bool {
        self.try_take_at(std::time::Instant::now())
    }

    fn try_take_at(&self, now: std::time::Instant) -> bool {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (tokens, last) = &mut *state;
        let refill = now.saturating_duration_since(*last).as_secs_f64() * self.rate;
        *tokens = (*tokens + refill).min(self.rate);
        *last = now.max(*last);
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
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

/// Records `issued` as ManagedCluster `name`'s newest certificate (`status.certificate`)
/// and clears its pending registration. Unlike the other writes this one must succeed
/// before the agent is given the certificate: `Renew` and registrations by key rely on it.
pub async fn record_certificate(
    api: &Api<ManagedCluster>,
    name: &str,
    issued: &super::pki::IssuedCertificate,
) -> Result<(), kube::Error> {
    let secs = issued
        .not_after
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let certificate = flotilla_api::fleet::CertificateRecord {
        serial: issued.serial.clone(),
        key_fingerprint: issued.key_fingerprint.to_string(),
        not_after: Some(at(secs)),
    };
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": {
            "certificate": certificate,
            "pendingRegistration": null,
        }})),
    )
    .await
    .map(|_| ())
}

/// Records a registration waiting for an administrator (`status.pendingRegistration`),
/// unless `current` already says the same (an agent polling costs no write). Failures are
/// logged.
pub async fn record_pending(
    api: &Api<ManagedCluster>,
    name: &str,
    current: Option<&flotilla_api::fleet::PendingRegistration>,
    key: &super::pki::KeyFingerprint,
    token_id: &str,
    reason: &str,
) {
    if current.is_some_and(|p| {
        p.key_fingerprint == key.as_str()
            && p.reason == reason
            && p.token_id.as_deref() == Some(token_id)
    }) {
        return;
    }
    let pending = flotilla_api::fleet::PendingRegistration {
        key_fingerprint: key.to_string(),
        token_id: Some(token_id.to_owned()),
        reason: reason.to_owned(),
        last_request_time: Some(now()),
    };
    if let Err(e) = api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": { "pendingRegistration": pending } })),
        )
        .await
    {
        tracing::warn!(cluster = name, error = %e, "recording a pending registration");
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
        // A `Connected` write is a session's first (it comes up once): a session replacing
        // another is a reconnect too, so while connected the time is when the current
        // session came up (agent upgrades by the hub wait for it: `crate::onboarding`).
        let changed = state == ConnectionState::Connected
            || status.connection.as_ref().map(|c| c.state) != Some(state);
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::WriteBudget;

    #[test]
    fn the_heartbeat_budget_allows_its_rate_in_a_burst_then_refills_at_that_rate() {
        let budget = WriteBudget::new(20.0);
        let start = Instant::now();
        let burst = (0..100).filter(|_| budget.try_take_at(start)).count();
        assert_eq!(burst, 20, "a full bucket holds one second of writes");
        assert!(!budget.try_take_at(start + Duration::from_millis(10)));
        // Half a second refills ten.
        let later = start + Duration::from_millis(500);
        assert_eq!((0..100).filter(|_| budget.try_take_at(later)).count(), 10);
        // Never more than the bucket, however long it waited.
        let much_later = later + Duration::from_secs(3600);
        assert_eq!(
            (0..100).filter(|_| budget.try_take_at(much_later)).count(),
            20
        );
        // A clock read earlier than the last one takes nothing back.
        assert!(!budget.try_take_at(later));
    }

    #[test]
    fn a_heartbeat_budget_below_one_write_a_second_still_writes() {
        for rate in [0.0, -3.0, f64::NAN] {
            let budget = WriteBudget::new(rate);
            assert!(budget.try_take_at(Instant::now()), "rate {rate}");
        }
    }
}
