//! The plan-revision epoch: a counter in a ConfigMap of the hub's namespace, incremented
//! once each time a hub starts its HelmRelease controller.
//!
//! Plan revisions must grow across hub restarts: an agent ignores a plan whose revision is
//! not above the one it holds, so a restarted hub that handed out a revision again for a
//! different plan would never get that plan applied. Without an epoch the revision is
//! written to the HelmRelease (an annotation) *before* the plan is sent: one API write in
//! the path of every plan change. With an epoch, every revision this hub hands out is at
//! least [`floor`] of its epoch, above every revision an earlier hub can have handed out
//! (an earlier epoch's revisions stay below the next floor unless one HelmRelease changed
//! [`EPOCH_SPAN`] times under one hub), so the annotation can be written after the plan
//! is sent, off the path: it only lets a restarted hub send the same revision for an
//! unchanged plan.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

/// The ConfigMap holding the epoch (key `epoch`).
pub const EPOCH_CONFIGMAP: &str = "flotilla-hub-plan-epoch";
/// The revisions each epoch has: epoch `e` hands out revisions from `e * EPOCH_SPAN`.
pub const EPOCH_SPAN: u64 = 1_000_000_000;
/// How many times a claim retries after losing a race to another writer.
const ATTEMPTS: usize = 5;

/// Why the epoch could not be claimed.
#[derive(Debug, thiserror::Error)]
pub enum EpochError {
    /// The API server refused or failed.
    #[error("ConfigMap {namespace}/flotilla-hub-plan-epoch: {what}")]
    Kube {
        /// The hub's namespace.
        namespace: String,
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// `data.epoch` is not a number.
    #[error("ConfigMap {namespace}/flotilla-hub-plan-epoch: data.epoch is not a whole number")]
    Invalid {
        /// The hub's namespace.
        namespace: String,
    },
    /// Every attempt lost a race to another writer.
    #[error(
        "ConfigMap {namespace}/flotilla-hub-plan-epoch: changed by another writer 5 times in a row"
    )]
    Contended {
        /// The hub's namespace.
        namespace: String,
    },
}

impl EpochError {
    /// A short name of the error, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            EpochError::Kube { .. } => "Kube",
            EpochError::Invalid { .. } => "Invalid",
            EpochError::Contended { .. } => "Contended",
        }
    }
}

/// The lowest plan revision of `epoch` (0 for epoch 0: no epoch).
pub fn floor(epoch: u64) -> u64 {
    epoch.saturating_mul(EPOCH_SPAN)
}

/// The next revision after `current` for a hub whose revisions start at `floor`.
pub fn next_revision(current: u64, floor: u64) -> u64 {
    (current + 1).max(floor)
}

/// Claims the next epoch in `namespace`: reads the ConfigMap's epoch (0 when there is
/// none), writes one more (an update guarded by the resource version, or a create) and
/// returns it. Two hubs claiming at once get different epochs.
pub async fn claim(client: kube::Client, namespace: &str) -> Result<u64, EpochError> {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let kube_err = |what: &'static str| {
        move |source| EpochError::Kube {
            namespace: namespace.to_owned(),
            what,
            source,
        }
    };
    for _ in 0..ATTEMPTS {
        let current = api
            .get_opt(EPOCH_CONFIGMAP)
            .await
            .map_err(kube_err("reading the plan epoch"))?;
        let result = match current {
            None => {
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(EPOCH_CONFIGMAP.to_owned()),
                        namespace: Some(namespace.to_owned()),
                        ..ObjectMeta::default()
                    },
                    data: Some([("epoch".to_owned(), "1".to_owned())].into()),
                    ..ConfigMap::default()
                };
                api.create(&PostParams::default(), &cm).await.map(|_| 1)
            }
            Some(mut cm) => {
                let epoch = cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get("epoch"))
                    .map(|e| e.trim().parse::<u64>())
                    .transpose()
                    .map_err(|_| EpochError::Invalid {
                        namespace: namespace.to_owned(),
                    })?
                    .unwrap_or(0)
                    + 1;
                cm.data
                    .get_or_insert_with(Default::default)
                    .insert("epoch".to_owned(), epoch.to_string());
                api.replace(EPOCH_CONFIGMAP, &PostParams::default(), &cm)
                    .await
                    .map(|_| epoch)
            }
        };
        match result {
            Ok(epoch) => return Ok(epoch),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(kube_err("writing the plan epoch")(e)),
        }
    }
    Err(EpochError::Contended {
        namespace: namespace.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_epochs_revisions_start_above_every_revision_of_the_earlier_ones() {
        assert_eq!(next_revision(0, floor(0)), 1);
        assert_eq!(next_revision(41, floor(0)), 42);
        // An earlier hub (no epoch, or epoch 1) handed out small revisions.
        assert_eq!(next_revision(42, floor(2)), 2 * EPOCH_SPAN);
        assert_eq!(next_revision(floor(1) + 7, floor(2)), 2 * EPOCH_SPAN);
        // Within an epoch, revisions count up.
        assert_eq!(next_revision(2 * EPOCH_SPAN, floor(2)), 2 * EPOCH_SPAN + 1);
    }
}
