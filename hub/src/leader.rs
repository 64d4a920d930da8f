//! Lease-based leader election, as client-go's `leaderelection` does it: of the hub
//! replicas, only the holder of a `coordination.k8s.io/v1` Lease runs the controllers and
//! the in-process agents; the others wait and take over when the holder stops renewing.
//!
//! - **Acquire**: the Lease is created if missing; a Lease held by another identity is
//!   taken once its record (holder and renew time) has not changed for
//!   `lease_duration`, as *this* replica observed it (client-go's rule: no clock comparison
//!   across machines). Every write is a replace with the read `resourceVersion`, so two
//!   candidates cannot both win.
//! - **Hold**: the holder renews every `retry_period`; when it cannot renew for
//!   `renew_deadline`, it has lost the Lease ([`Elector::hold`] returns) and must stop acting
//!   at once (the binary exits, as controller-runtime does).
//! - **Release**: a graceful stop empties the holder so a standby takes over at once.
//!
//! With the defaults (15 s lease, 10 s renew deadline, 2 s retry) a standby takes over
//! within about 15 s of the leader being killed.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::time::Instant;

use crate::util::error_chain;

/// The timings of an election.
#[derive(Debug, Clone, Copy)]
pub struct ElectionTimings {
    /// How long a Lease not renewed stays held.
    pub lease_duration: Duration,
    /// How long the holder keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// The wait between tries.
    pub retry_period: Duration,
}

impl Default for ElectionTimings {
    fn default() -> Self {
        ElectionTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One candidate of an election.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: ElectionTimings,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .field("timings", &self.timings)
            .finish_non_exhaustive()
    }
}

/// What a try found.
enum Try {
    /// We hold the Lease now.
    Held,
    /// Another identity holds it; its record as read.
    Other(Option<(String, Option<MicroTime>)>),
}

impl Elector {
    /// A candidate `identity` for Lease `namespace/name`.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: impl Into<String>,
        timings: ElectionTimings,
    ) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.into(),
            timings,
        }
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits until this candidate holds the Lease.
    pub async fn acquire(&self) {
        // The other holder's record and when we first saw it.
        let mut observed: Option<((String, Option<MicroTime>), Instant)> = None;
        loop {
            let expired = observed
                .as_ref()
                .is_some_and(|(_, at)| at.elapsed() >= self.timings.lease_duration);
            match self.try_hold(expired).await {
                Ok(Try::Held) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became the leader");
                    return;
                }
                Ok(Try::Other(record)) => match (record, &observed) {
                    (Some(r), Some((seen, _))) if *seen == r => {}
                    (Some(r), _) => observed = Some((r, Instant::now())),
                    (None, _) => observed = None,
                },
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %error_chain(&e), "leader election: lease not acquired")
                }
            }
            tokio::time::sleep(self.timings.retry_period).await;
        }
    }

    /// Renews the Lease while held; returns once it is lost (not renewed within the renew
    /// deadline, or taken by another identity).
    pub async fn hold(&self) {
        let mut last_renew = Instant::now();
        loop {
            tokio::time::sleep(self.timings.retry_period).await;
            match self.try_hold(false).await {
                Ok(Try::Held) => last_renew = Instant::now(),
                Ok(Try::Other(_)) => {
                    tracing::error!(lease = %self.name, identity = %self.identity, "leadership lost: another replica holds the lease");
                    return;
                }
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %error_chain(&e), "leader election: renewal failed");
                    if last_renew.elapsed() >= self.timings.renew_deadline {
                        tracing::error!(lease = %self.name, identity = %self.identity, "leadership lost: no renewal within the deadline");
                        return;
                    }
                }
            }
        }
    }

    /// Gives the Lease up (a graceful stop), so a standby takes over at once.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.name, "leadership released"),
            Err(e) => {
                tracing::warn!(lease = %self.name, error = %error_chain(&e), "releasing the lease failed")
            }
        }
    }

    /// One try: create, renew or (when `expired` or empty) take the Lease.
    async fn try_hold(&self, expired: bool) -> Result<Try, kube::Error> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let duration = i32::try_from(self.timings.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Try::Held),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Try::Other(None)),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(self.identity.as_str());
        if !ours && holder.is_some() && !expired {
            return Ok(Try::Other(holder.map(|h| (h, spec.renew_time.clone()))));
        }
        if !ours {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(duration);
        spec.renew_time = Some(now);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Try::Held),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Try::Other(None)),
            Err(e) => Err(e),
        }
    }
}
