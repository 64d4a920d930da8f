//! Which clusters may hold a session: the hub's in-memory view of the ManagedClusters, kept
//! by a watch, and the admission rule every session is checked against when it starts and
//! again whenever a ManagedCluster changes.
//!
//! A certificate is admitted when its ManagedCluster exists, is not being deleted, is
//! accepted, has the `metadata.uid` the certificate was issued for, and lists neither the
//! certificate's serial (`spec.revokedSerials`) nor its key (`spec.revokedKeyFingerprints`).
//! Un-accepting, revoking or deleting bumps [`Registry::subscribe`]'s counter; each session
//! re-checks and ends itself, so revocation is immediate, not at the certificate's expiry.
//! (A session also ends when its certificate expires: the TLS handshake checked its dates
//! once, the session keeps a timer.)

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use flotilla_api::ManagedCluster;
use flotilla_core::ids::ClusterId;
use futures::StreamExt as _;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::watch;

use super::mailbox::RemoteLinks;
use super::pki::ClusterIdentity;

/// Sets `spec.accepted` of ManagedCluster `name` (`flotilla cluster accept NAME`, or
/// `false` to stop delivery and end its session).
pub async fn set_accepted(
    client: kube::Client,
    name: &str,
    accepted: bool,
) -> Result<ManagedCluster, kube::Error> {
    Api::<ManagedCluster>::all(client)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"accepted": accepted}})),
        )
        .await
}

/// What the hub knows of one ManagedCluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRecord {
    /// `metadata.uid`.
    pub uid: String,
    /// `spec.accepted`.
    pub accepted: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `spec.revokedSerials`.
    pub revoked_serials: Vec<String>,
    /// `spec.revokedKeyFingerprints`.
    pub revoked_keys: Vec<String>,
}

/// Why a certificate is not admitted (the message goes back to the agent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No ManagedCluster of that name.
    #[error("ManagedCluster {0} does not exist")]
    Unknown(ClusterId),
    /// The certificate was issued to an earlier ManagedCluster of the same name.
    #[error("the certificate of cluster {0} was issued to a deleted ManagedCluster of that name")]
    OtherIncarnation(ClusterId),
    /// Being deleted.
    #[error("ManagedCluster {0} is being deleted")]
    Deleting(ClusterId),
    /// `spec.accepted` is false.
    #[error("ManagedCluster {0} is not accepted")]
    NotAccepted(ClusterId),
    /// The certificate's serial or key is revoked.
    #[error("the certificate {serial} of cluster {cluster} is revoked")]
    Revoked {
        /// The cluster.
        cluster: ClusterId,
        /// The certificate's serial.
        serial: String,
    },
}

/// The ManagedClusters, as sessions need them.
#[derive(Debug)]
pub struct Registry {
    clusters: RwLock<HashMap<ClusterId, ClusterRecord>>,
    changes: watch::Sender<u64>,
    /// Turns true once the watch has listed every ManagedCluster.
    synced: watch::Sender<bool>,
    links: Arc<RemoteLinks>,
}

impl Registry {
    /// An empty registry keeping `links` in step (a mailbox per ManagedCluster, handed out
    /// once accepted).
    pub fn new(links: Arc<RemoteLinks>) -> Self {
        Self {
            clusters: RwLock::new(HashMap::new()),
            changes: watch::channel(0).0,
            synced: watch::channel(false).0,
            links,
        }
    }

    /// Waits until the watch has listed every ManagedCluster once (at most `timeout`);
    /// says whether it has. Until then a cluster the API server has is unknown here: its
    /// agent is refused and its HelmReleases have no link.
    pub async fn wait_synced(&self, timeout: std::time::Duration) -> bool {
        let mut synced = self.synced.subscribe();
        tokio::time::timeout(timeout, synced.wait_for(|s| *s))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Whether a session of `identity` may run now.
    pub fn admits(&self, identity: &ClusterIdentity) -> Result<(), Refusal> {
        let map = self.clusters.read().unwrap_or_else(PoisonError::into_inner);
        let id = identity.cluster.clone();
        let record = map.get(&id).ok_or_else(|| Refusal::Unknown(id.clone()))?;
        if record.uid != identity.incarnation {
            return Err(Refusal::OtherIncarnation(id));
        }
        if record.deleting {
            return Err(Refusal::Deleting(id));
        }
        if !record.accepted {
            return Err(Refusal::NotAccepted(id));
        }
        if record.revoked_serials.contains(&identity.serial)
            || record
                .revoked_keys
                .iter()
                .any(|k| k == identity.key_fingerprint.as_str())
        {
            return Err(Refusal::Revoked {
                cluster: id,
                serial: identity.serial.clone(),
            });
        }
        Ok(())
    }

    /// The record of `cluster`.
    pub fn get(&self, cluster: &ClusterId) -> Option<ClusterRecord> {
        self.clusters
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(cluster)
            .cloned()
    }

    /// A counter that grows on every change of a ManagedCluster.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Records a ManagedCluster as the API server has it.
    pub fn apply(&self, mc: &ManagedCluster) {
        let (Some(name), Some(uid)) = (mc.metadata.name.as_deref(), mc.metadata.uid.as_deref())
        else {
            return;
        };
        let Ok(id) = ClusterId::new(name) else {
            return;
        };
        let record = ClusterRecord {
            uid: uid.to_owned(),
            accepted: mc.spec.accepted,
            deleting: mc.metadata.deletion_timestamp.is_some(),
            revoked_serials: mc.spec.revoked_serials.clone(),
            revoked_keys: mc.spec.revoked_key_fingerprints.clone(),
        };
        let changed = {
            let mut map = self
                .clusters
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            map.insert(id.clone(), record.clone()) != Some(record.clone())
        };
        if record.deleting {
            self.links.remove(&id);
        } else {
            self.links.ensure(&id, record.accepted);
        }
        if changed {
            self.changes.send_modify(|n| *n += 1);
        }
    }

    /// Forgets a deleted ManagedCluster.
    pub fn forget(&self, name: &str) {
        let Ok(id) = ClusterId::new(name) else {
            return;
        };
        let removed = self
            .clusters
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id)
            .is_some();
        self.links.remove(&id);
        if removed {
            self.changes.send_modify(|n| *n += 1);
        }
    }

    fn retain(&self, names: &std::collections::HashSet<String>) {
        let gone: Vec<ClusterId> = self
            .clusters
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .filter(|k| !names.contains(k.as_str()))
            .cloned()
            .collect();
        for id in gone {
            self.forget(id.as_str());
        }
    }

    /// Watches the ManagedClusters until the task is dropped, retrying with the watcher's
    /// default backoff.
    pub async fn run(self: Arc<Self>, client: kube::Client) {
        let api: Api<ManagedCluster> = Api::all(client);
        let mut seen = std::collections::HashSet::new();
        let stream = watcher::watcher(api, watcher::Config::default());
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(mc)) => self.apply(&mc),
                Ok(watcher::Event::Delete(mc)) => {
                    if let Some(name) = mc.metadata.name.as_deref() {
                        self.forget(name);
                    }
                }
                Ok(watcher::Event::Init) => seen.clear(),
                Ok(watcher::Event::InitApply(mc)) => {
                    if let Some(name) = &mc.metadata.name {
                        seen.insert(name.clone());
                    }
                    self.apply(&mc);
                }
                Ok(watcher::Event::InitDone) => {
                    self.retain(&seen);
                    self.synced.send_replace(true);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "watching ManagedClusters");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        }
    }
}
