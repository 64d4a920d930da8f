//! Who may register as a ManagedCluster: the pure rule `Register` follows once the token
//! is redeemed ([`decide`]), and the per-cluster limit on certificate renewals
//! ([`RenewLimiter`]).
//!
//! A registration carries a redeemed token ([`Grant`]) and the key of its CSR. The rule:
//!
//! - **No ManagedCluster**: created (accepted when the token auto-accepts), unless the token
//!   registered that name before: the object was deleted since, and a deleted cluster is
//!   not created again by an old token (a new token registers it).
//! - **Being deleted**: refused.
//! - **The token**: the one that created the object (its annotation), or one bound to this
//!   cluster's name. An `--any-cluster` token cannot take over a cluster it did not create.
//! - **The key**: the cluster's key — of its newest certificate, or before any, the key of
//!   the registration that created the object — unless that newest certificate or the key
//!   is revoked; or the key an administrator approved (`spec.approvedKeyFingerprint`). The
//!   CSR's signature proves the agent holds it. Any other key waits, pending, for
//!   `flotilla cluster approve`; a revoked key is refused.
//! - **Acceptance**: `spec.accepted` is the administrator's alone; a token's auto-accept
//!   applies when the object is created, never to an existing one.
//!
//! So an impostor holding some valid token but not the cluster's key gets no certificate,
//! and the real agent's session is untouched.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use flotilla_api::ManagedCluster;
use flotilla_api::fleet::annotation;
use flotilla_core::ids::ClusterId;

use super::pki::KeyFingerprint;
use super::tokens::Grant;

/// What the rule needs of an existing ManagedCluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Existing {
    /// `spec.accepted`.
    pub accepted: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The token that created it (its annotation).
    pub created_by_token: Option<String>,
    /// The key of its newest certificate, or else the key that created it.
    pub cluster_key: Option<String>,
    /// The newest certificate's serial is revoked.
    pub newest_revoked: bool,
    /// `spec.approvedKeyFingerprint`.
    pub approved_key: Option<String>,
    /// `spec.revokedKeyFingerprints`.
    pub revoked_keys: Vec<String>,
}

impl Existing {
    /// The rule's view of `mc`.
    pub fn of(mc: &ManagedCluster) -> Self {
        let annotations = mc.metadata.annotations.as_ref();
        let annotated = |key: &str| annotations.and_then(|a| a.get(key)).cloned();
        let newest = mc.status.as_ref().and_then(|s| s.certificate.as_ref());
        Self {
            accepted: mc.spec.accepted,
            deleting: mc.metadata.deletion_timestamp.is_some(),
            created_by_token: annotated(annotation::BOOTSTRAP_TOKEN_ID),
            cluster_key: newest
                .map(|c| c.key_fingerprint.clone())
                .or_else(|| annotated(annotation::BOOTSTRAP_KEY_FINGERPRINT)),
            newest_revoked: newest.is_some_and(|c| mc.spec.revoked_serials.contains(&c.serial)),
            approved_key: mc.spec.approved_key_fingerprint.clone(),
            revoked_keys: mc.spec.revoked_key_fingerprints.clone(),
        }
    }
}

/// Why a registration waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// `spec.accepted` is false; `key_approval` says whether its key needs approval too.
    NotAccepted {
        /// The key is not the cluster's.
        key_approval: bool,
    },
    /// Accepted, but the key is not the cluster's and no administrator approved it.
    KeyNotApproved,
}

impl Waiting {
    /// The reason recorded in `status.pendingRegistration.reason`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::NotAccepted { .. } => "NotAccepted",
            Self::KeyNotApproved => "KeyNotApproved",
        }
    }
}

/// Why a registration is refused for good.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The token registered this name before and the ManagedCluster is gone.
    #[error(
        "ManagedCluster {cluster} registered with bootstrap token {token_id} before and has been deleted since; a deleted cluster joins again with a new token (flotilla token create --cluster-name {cluster})"
    )]
    Deleted {
        /// The cluster.
        cluster: ClusterId,
        /// The token id.
        token_id: String,
    },
    /// Being deleted.
    #[error("ManagedCluster {0} is being deleted")]
    Deleting(ClusterId),
    /// An any-cluster token that did not create the object.
    #[error(
        "ManagedCluster {cluster} exists and was not created with bootstrap token {token_id}, which is not bound to it; register it again with a token made for it (flotilla token create --cluster-name {cluster})"
    )]
    OtherToken {
        /// The cluster.
        cluster: ClusterId,
        /// The token id.
        token_id: String,
    },
    /// The key is revoked.
    #[error(
        "the key {key} is revoked for ManagedCluster {cluster} (spec.revokedKeyFingerprints); the agent needs a new key"
    )]
    KeyRevoked {
        /// The cluster.
        cluster: ClusterId,
        /// The key.
        key: KeyFingerprint,
    },
}

impl Refusal {
    /// A bounded label for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Deleted { .. } => "deleted",
            Self::Deleting(_) => "deleting",
            Self::OtherToken { .. } => "otherToken",
            Self::KeyRevoked { .. } => "keyRevoked",
        }
    }
}

/// What `Register` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Create the ManagedCluster (accepted or not), then decide again.
    Create {
        /// `spec.accepted` of the new object.
        accepted: bool,
    },
    /// Answer pending.
    Wait(Waiting),
    /// Issue the certificate.
    Issue,
    /// Refuse.
    Refuse(Refusal),
}

/// The rule (see the module's documentation).
pub fn decide(
    cluster: &ClusterId,
    existing: Option<&Existing>,
    grant: &Grant,
    key: &KeyFingerprint,
) -> Decision {
    let Some(existing) = existing else {
        if grant.registered_before {
            return Decision::Refuse(Refusal::Deleted {
                cluster: cluster.clone(),
                token_id: grant.token_id.clone(),
            });
        }
        return Decision::Create {
            accepted: grant.auto_accept,
        };
    };
    if existing.deleting {
        return Decision::Refuse(Refusal::Deleting(cluster.clone()));
    }
    let creator = existing.created_by_token.as_deref() == Some(grant.token_id.as_str());
    if !creator && !grant.bound {
        return Decision::Refuse(Refusal::OtherToken {
            cluster: cluster.clone(),
            token_id: grant.token_id.clone(),
        });
    }
    if existing.revoked_keys.iter().any(|k| k == key.as_str()) {
        return Decision::Refuse(Refusal::KeyRevoked {
            cluster: cluster.clone(),
            key: key.clone(),
        });
    }
    let own_key = match &existing.cluster_key {
        // An object made by hand, no certificate yet: the bound token is the invitation.
        None => true,
        Some(k) => k == key.as_str() && !existing.newest_revoked,
    };
    let approved = existing.approved_key.as_deref() == Some(key.as_str());
    let key_ok = own_key || approved;
    match (existing.accepted, key_ok) {
        (false, _) => Decision::Wait(Waiting::NotAccepted {
            key_approval: !key_ok,
        }),
        (true, false) => Decision::Wait(Waiting::KeyNotApproved),
        (true, true) => Decision::Issue,
    }
}

/// The shortest time between two renewals of one cluster's certificate: a tenth of the
/// certificate's lifetime (an agent renews once, two thirds in), between 1 s and 10 min.
pub fn renew_interval(lifetime: Duration) -> Duration {
    (lifetime / 10).clamp(Duration::from_secs(1), Duration::from_secs(600))
}

/// At most one renewal per cluster per interval.
#[derive(Debug)]
pub struct RenewLimiter {
    interval: Duration,
    last: Mutex<HashMap<ClusterId, Instant>>,
}

impl RenewLimiter {
    /// One renewal per `interval` per cluster.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Takes `cluster`'s renewal at `now`, or says how long until the next is allowed.
    pub fn try_take(&self, cluster: &ClusterId, now: Instant) -> Result<(), Duration> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = last.get(cluster) {
            let since = now.saturating_duration_since(*at);
            if since < self.interval {
                return Err(self.interval - since);
            }
        }
        last.insert(cluster.clone(), now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> KeyFingerprint {
        KeyFingerprint::of_spki(&[n])
    }

    fn grant(token: &str, bound: bool) -> Grant {
        Grant {
            token_id: token.into(),
            auto_accept: true,
            bound,
            registered_before: false,
        }
    }

    fn accepted(cluster_key: &KeyFingerprint) -> Existing {
        Existing {
            accepted: true,
            created_by_token: Some("tok001".into()),
            cluster_key: Some(cluster_key.to_string()),
            ..Existing::default()
        }
    }

    #[test]
    fn a_new_cluster_is_created_accepted_as_the_token_says_but_never_again_once_deleted() {
        let c = ClusterId::new("edge-1").unwrap();
        assert_eq!(
            decide(&c, None, &grant("tok001", false), &key(1)),
            Decision::Create { accepted: true }
        );
        let manual = Grant {
            auto_accept: false,
            ..grant("tok001", true)
        };
        assert_eq!(
            decide(&c, None, &manual, &key(1)),
            Decision::Create { accepted: false }
        );
        let again = Grant {
            registered_before: true,
            ..grant("tok001", false)
        };
        assert!(matches!(
            decide(&c, None, &again, &key(1)),
            Decision::Refuse(Refusal::Deleted { .. })
        ));
    }

    #[test]
    fn an_accepted_cluster_registers_again_only_with_its_own_key_or_an_approved_one() {
        let c = ClusterId::new("edge-1").unwrap();
        let mine = accepted(&key(1));
        // The impostor: the creating any-cluster token, another key.
        assert_eq!(
            decide(&c, Some(&mine), &grant("tok001", false), &key(2)),
            Decision::Wait(Waiting::KeyNotApproved)
        );
        // A token bound to the name, another key: still approval.
        assert_eq!(
            decide(&c, Some(&mine), &grant("tok002", true), &key(2)),
            Decision::Wait(Waiting::KeyNotApproved)
        );
        // Its own key (the CSR proves it holds it), with either token.
        assert_eq!(
            decide(&c, Some(&mine), &grant("tok001", false), &key(1)),
            Decision::Issue
        );
        assert_eq!(
            decide(&c, Some(&mine), &grant("tok002", true), &key(1)),
            Decision::Issue
        );
        // The administrator approved key 2.
        let approved = Existing {
            approved_key: Some(key(2).to_string()),
            ..mine.clone()
        };
        assert_eq!(
            decide(&c, Some(&approved), &grant("tok001", false), &key(2)),
            Decision::Issue
        );
        assert_eq!(
            decide(&c, Some(&approved), &grant("tok001", false), &key(3)),
            Decision::Wait(Waiting::KeyNotApproved)
        );
    }

    #[test]
    fn an_any_cluster_token_cannot_take_over_a_cluster_it_did_not_create() {
        let c = ClusterId::new("edge-1").unwrap();
        let mine = accepted(&key(1));
        assert!(matches!(
            decide(&c, Some(&mine), &grant("tok999", false), &key(1)),
            Decision::Refuse(Refusal::OtherToken { .. })
        ));
        let by_hand = Existing {
            created_by_token: None,
            cluster_key: None,
            ..mine
        };
        assert!(matches!(
            decide(&c, Some(&by_hand), &grant("tok999", false), &key(1)),
            Decision::Refuse(Refusal::OtherToken { .. })
        ));
        // A bound token registers an object made by hand, which has no key yet.
        assert_eq!(
            decide(&c, Some(&by_hand), &grant("tok999", true), &key(7)),
            Decision::Issue
        );
    }

    #[test]
    fn auto_accept_never_accepts_an_existing_cluster() {
        let c = ClusterId::new("edge-1").unwrap();
        let unaccepted = Existing {
            accepted: false,
            ..accepted(&key(1))
        };
        assert_eq!(
            decide(&c, Some(&unaccepted), &grant("tok001", false), &key(1)),
            Decision::Wait(Waiting::NotAccepted {
                key_approval: false
            })
        );
        assert_eq!(
            decide(&c, Some(&unaccepted), &grant("tok001", false), &key(2)),
            Decision::Wait(Waiting::NotAccepted { key_approval: true })
        );
    }

    #[test]
    fn a_revoked_key_is_refused_and_a_revoked_newest_certificate_needs_approval() {
        let c = ClusterId::new("edge-1").unwrap();
        let revoked_key = Existing {
            revoked_keys: vec![key(1).to_string()],
            approved_key: Some(key(1).to_string()),
            ..accepted(&key(1))
        };
        assert!(matches!(
            decide(&c, Some(&revoked_key), &grant("tok001", false), &key(1)),
            Decision::Refuse(Refusal::KeyRevoked { .. })
        ));
        let revoked_serial = Existing {
            newest_revoked: true,
            ..accepted(&key(1))
        };
        assert_eq!(
            decide(&c, Some(&revoked_serial), &grant("tok001", false), &key(1)),
            Decision::Wait(Waiting::KeyNotApproved)
        );
        let deleting = Existing {
            deleting: true,
            ..accepted(&key(1))
        };
        assert!(matches!(
            decide(&c, Some(&deleting), &grant("tok001", false), &key(1)),
            Decision::Refuse(Refusal::Deleting(_))
        ));
    }

    #[test]
    fn renewals_are_limited_per_cluster() {
        let limiter = RenewLimiter::new(Duration::from_secs(60));
        let a = ClusterId::new("a").unwrap();
        let b = ClusterId::new("b").unwrap();
        let t0 = Instant::now();
        assert_eq!(limiter.try_take(&a, t0), Ok(()));
        assert_eq!(
            limiter.try_take(&a, t0 + Duration::from_secs(10)),
            Err(Duration::from_secs(50))
        );
        assert_eq!(limiter.try_take(&b, t0 + Duration::from_secs(10)), Ok(()));
        assert_eq!(limiter.try_take(&a, t0 + Duration::from_secs(60)), Ok(()));
        assert_eq!(
            renew_interval(Duration::from_secs(24 * 3600)),
            Duration::from_secs(600)
        );
        assert_eq!(
            renew_interval(Duration::from_secs(3)),
            Duration::from_secs(1)
        );
    }
}
