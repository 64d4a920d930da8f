//! How actions move records through statuses, as Helm's actions and Flux's Unlock do. The
//! executor ([`crate::reconcile::actions`]) makes every status change, description, revision
//! number and rollback record through this module.
//!
//! The pure part decides (which record an upgrade starts from, what a rollback record holds,
//! which status and description a record gets); the [`SecretStorage`] methods at the end
//! write the result:
//!
//! | action | new record | success | failure |
//! |---|---|---|---|
//! | install | [`next_version`], `pending-install`, [`INSTALL_UNDERWAY`]; with `replace`, the last record (unless `failed`) → `superseded`, [`SUPERSEDED_BY_NEW_RELEASE`] | every other `deployed` → `superseded`, new `deployed`, [`INSTALL_COMPLETE`] ([`SecretStorage::mark_deployed`]) | `failed`, [`release_failed`] ([`SecretStorage::mark_failed`]) |
//! | upgrade | from [`upgrade_base`], [`next_version`], `pending-upgrade`, [`PREPARING_UPGRADE`] | every other `deployed` → `superseded`, new `deployed`, [`UPGRADE_COMPLETE`] | `failed`, [`upgrade_failed`] |
//! | rollback | [`rollback_from_history`]: `pending-rollback`, [`rollback_to`] | every other `deployed` → `superseded`, new `deployed` (description kept) | the last record, when `deployed` → `superseded` ([`superseded_by`]); new `failed`, [`rollback_failed`] |
//! | uninstall | last → `uninstalling`, [`UNINSTALL_IN_PROGRESS`] ([`SecretStorage::mark_uninstalling`]) | `uninstalled`, [`UNINSTALL_COMPLETE`], every other `deployed` → `superseded`; without history, every record purged ([`SecretStorage::finish_uninstall`]) | |
//! | unlock | last `pending-*` → `failed`, [`unlocked`] ([`unlock`], [`SecretStorage::unlock`]) | | |
//!
//! A superseded record keeps its description (Helm's upgrade and rollback do not change
//! it); only `install --replace` writes [`SUPERSEDED_BY_NEW_RELEASE`]. Helm's install does
//! not supersede older `deployed` records (there are none unless `replace` took over a
//! `failed` last record); [`SecretStorage::mark_deployed`] does, so one record at most is
//! `deployed`. [`TransitionError`]s print Helm's messages.

use flotilla_chart::release::{Info, Release, Status};
use flotilla_chart::time::GoTime;

use super::{SecretStorage, StorageError, status_of};

/// Description of a new install record.
pub const INSTALL_UNDERWAY: &str = "Initial install underway";
/// Description of a successful install.
pub const INSTALL_COMPLETE: &str = "Install complete";
/// Description of a new upgrade record.
pub const PREPARING_UPGRADE: &str = "Preparing upgrade";
/// Description of a successful upgrade.
pub const UPGRADE_COMPLETE: &str = "Upgrade complete";
/// Description of a record being uninstalled.
pub const UNINSTALL_IN_PROGRESS: &str = "Deletion in progress (or silently failed)";
/// Description of an uninstalled record (kept with `keepHistory`).
pub const UNINSTALL_COMPLETE: &str = "Uninstallation complete";
/// Description `install --replace` gives the record it replaces.
pub const SUPERSEDED_BY_NEW_RELEASE: &str = "superseded by new release";

/// `Release "<name>" failed: <err>` (install).
pub fn release_failed(name: &str, err: &str) -> String {
    format!("Release {name:?} failed: {err}")
}

/// `Upgrade "<name>" failed: <err>`.
pub fn upgrade_failed(name: &str, err: &str) -> String {
    format!("Upgrade {name:?} failed: {err}")
}

/// `Rollback to <N>`.
pub fn rollback_to(version: i64) -> String {
    format!("Rollback to {version}")
}

/// `Rollback "<name>" failed: <err>`.
pub fn rollback_failed(name: &str, err: &str) -> String {
    format!("Rollback {name:?} failed: {err}")
}

/// Flux's Unlock description: `Release unlocked from stale '<status>' state`.
pub fn unlocked(status: &Status) -> String {
    format!("Release unlocked from stale '{status}' state")
}

/// Why an action cannot start from the stored history. The messages are Helm's.
#[derive(Debug, thiserror::Error)]
pub enum TransitionError {
    /// Nothing to upgrade or roll back from.
    #[error("\"{name}\" has no deployed releases")]
    NoDeployedReleases {
        /// Release name.
        name: String,
    },
    /// The last record is pending: another action holds the release (or crashed, see
    /// [`SecretStorage::unlock`]).
    #[error("another operation (install/upgrade/rollback) is in progress")]
    Locked {
        /// Release name.
        name: String,
        /// The pending revision.
        version: i64,
        /// Its status.
        status: Status,
    },
    /// The rollback target is not in the history.
    #[error("release has no {version} version")]
    NoRevision {
        /// Release name.
        name: String,
        /// The missing revision.
        version: i64,
    },
}

impl TransitionError {
    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            TransitionError::NoDeployedReleases { .. } => "no_deployed_releases",
            TransitionError::Locked { .. } => "locked",
            TransitionError::NoRevision { .. } => "no_revision",
        }
    }

    /// Whether retrying later may help: a lock is released when its action ends (or is
    /// unlocked); a missing release or revision stays missing.
    pub fn is_transient(&self) -> bool {
        matches!(self, TransitionError::Locked { .. })
    }
}

/// Helm's `SetStatus`: status and description, nothing else.
pub fn set_status(rls: &mut Release, status: Status, description: impl Into<String>) {
    let info = rls.info.get_or_insert_with(Info::default);
    info.status = Some(status);
    info.description = description.into();
}

/// Flux's Unlock on a record: a pending record becomes `failed` with [`unlocked`] as its
/// description. Returns the status it had, or `None` (record untouched) when it was not
/// pending.
pub fn unlock(rls: &mut Release) -> Option<Status> {
    let status = status_of(rls);
    if !status.is_pending() {
        return None;
    }
    let description = unlocked(&status);
    set_status(rls, Status::Failed, description);
    Some(status)
}

/// The revision the next record of this history gets (1 for a new release).
pub fn next_version(history: &[Release]) -> i64 {
    history.iter().map(|r| r.version).max().unwrap_or(0) + 1
}

/// The record Helm's upgrade starts from (`currentRelease`), given the history (any order):
/// the last record when it is deployed, else the highest deployed one, else the last one
/// when it failed or was superseded. A pending last record is a lock.
pub fn upgrade_base<'h>(
    name: &str,
    history: &'h [Release],
) -> Result<&'h Release, TransitionError> {
    let no_deployed = || TransitionError::NoDeployedReleases {
        name: name.to_owned(),
    };
    let last = history
        .iter()
        .max_by_key(|r| r.version)
        .ok_or_else(no_deployed)?;
    let status = status_of(last);
    if status.is_pending() {
        return Err(TransitionError::Locked {
            name: name.to_owned(),
            version: last.version,
            status,
        });
    }
    if status == Status::Deployed {
        return Ok(last);
    }
    if let Some(deployed) = history
        .iter()
        .filter(|r| status_of(r) == Status::Deployed)
        .max_by_key(|r| r.version)
    {
        return Ok(deployed);
    }
    match status {
        Status::Failed | Status::Superseded => Ok(last),
        _ => Err(no_deployed()),
    }
}

/// Helm's rollback record: revision `last.version + 1`, chart, values, manifest, hooks,
/// labels and notes copied from `target` (no re-render), `pending-rollback` with
/// [`rollback_to`], first deployment from `last`, last deployment `now`.
pub fn rollback_record(last: &Release, target: &Release, now: GoTime) -> Release {
    let first_deployed = last
        .info
        .as_ref()
        .map_or(GoTime::ZERO, |i| i.first_deployed);
    Release {
        name: last.name.clone(),
        namespace: last.namespace.clone(),
        chart: target.chart.clone(),
        config: target.config.clone(),
        info: Some(Info {
            first_deployed,
            last_deployed: now,
            status: Some(Status::PendingRollback),
            notes: target
                .info
                .as_ref()
                .map(|i| i.notes.clone())
                .unwrap_or_default(),
            description: rollback_to(target.version),
            ..Info::default()
        }),
        version: last.version + 1,
        labels: target.labels.clone(),
        manifest: target.manifest.clone(),
        hooks: target.hooks.clone(),
        apply_method: target.apply_method.clone(),
    }
}

/// A rollback, as Helm's `prepareRollback` finds it in the history.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollback<'h> {
    /// The last record (the one rolled back from).
    pub last: &'h Release,
    /// The record rolled back to.
    pub target: &'h Release,
    /// The new record ([`rollback_record`]).
    pub record: Release,
}

/// Helm's `prepareRollback` on `history` (any order): the rollback to revision `version`
/// (0: the one before the last). As in Helm, a pending last record does not stop it.
pub fn rollback_from_history<'h>(
    name: &str,
    history: &'h [Release],
    version: i64,
    now: GoTime,
) -> Result<Rollback<'h>, TransitionError> {
    let last = history.iter().max_by_key(|r| r.version).ok_or_else(|| {
        TransitionError::NoDeployedReleases {
            name: name.to_owned(),
        }
    })?;
    let version = if version == 0 {
        last.version - 1
    } else {
        version
    };
    let target = history
        .iter()
        .find(|r| r.version == version)
        .ok_or_else(|| TransitionError::NoRevision {
            name: name.to_owned(),
            version,
        })?;
    Ok(Rollback {
        last,
        target,
        record: rollback_record(last, target, now),
    })
}

/// The records a successful action supersedes: every `deployed` one other than `keep`.
pub fn superseded_by(deployed: &[Release], keep: i64) -> Vec<Release> {
    deployed
        .iter()
        .filter(|r| r.version != keep && status_of(r) == Status::Deployed)
        .map(|r| {
            let mut r = r.clone();
            let description = r.info.as_ref().map(|i| i.description.clone());
            set_status(&mut r, Status::Superseded, description.unwrap_or_default());
            r
        })
        .collect()
}

/// What [`SecretStorage::unlock`] found and did.
#[derive(Debug, Clone, PartialEq)]
pub enum Unlock {
    /// The release has no records.
    NotFound,
    /// The last record is not pending: nothing written.
    NotPending,
    /// The last record was pending and is now `failed`.
    Unlocked {
        /// The record as written.
        release: Box<Release>,
        /// The pending status it had.
        previous: Status,
    },
}

impl SecretStorage {
    /// Flux's Unlock, for a release left pending (after a crash of whoever held it): when the
    /// last record is `pending-install`, `pending-upgrade` or `pending-rollback`, it is
    /// marked `failed` with `Release unlocked from stale '<status>' state` ([`unlock`]), so
    /// the next action (an upgrade) can proceed.
    pub async fn unlock(&self, name: &str) -> Result<Unlock, StorageError> {
        let Some(mut rls) = self.last(name).await? else {
            return Ok(Unlock::NotFound);
        };
        let Some(previous) = unlock(&mut rls) else {
            return Ok(Unlock::NotPending);
        };
        self.update(&rls).await?;
        tracing::info!(release = name, revision = rls.version, status = %previous, "release unlocked");
        Ok(Unlock::Unlocked {
            release: Box::new(rls),
            previous,
        })
    }

    /// Success of install, upgrade or rollback: every other `deployed` record of the release
    /// becomes `superseded` (its description kept), then `rls` becomes `deployed` with
    /// `description`. Returns the revisions superseded.
    pub async fn mark_deployed(
        &self,
        rls: &mut Release,
        description: impl Into<String>,
    ) -> Result<Vec<i64>, StorageError> {
        let others = superseded_by(&self.deployed_all(&rls.name).await?, rls.version);
        for other in &others {
            self.update(other).await?;
        }
        set_status(rls, Status::Deployed, description);
        self.update(rls).await?;
        Ok(others.iter().map(|r| r.version).collect())
    }

    /// Failure of an action: `rls` becomes `failed` with `description`.
    pub async fn mark_failed(
        &self,
        rls: &mut Release,
        description: impl Into<String>,
    ) -> Result<(), StorageError> {
        set_status(rls, Status::Failed, description);
        self.update(rls).await
    }

    /// Start of an uninstall: `rls` (the last record) becomes `uninstalling` with
    /// [`UNINSTALL_IN_PROGRESS`] and deletion time `now`.
    pub async fn mark_uninstalling(
        &self,
        rls: &mut Release,
        now: GoTime,
    ) -> Result<(), StorageError> {
        set_status(rls, Status::Uninstalling, UNINSTALL_IN_PROGRESS);
        if let Some(info) = rls.info.as_mut() {
            info.deleted = now;
        }
        self.update(rls).await
    }

    /// End of an uninstall: `rls` becomes `uninstalled` with [`UNINSTALL_COMPLETE`]. With
    /// `keep_history` it is written and every other `deployed` record becomes `superseded`;
    /// without, every record of the release is deleted ([`SecretStorage::purge`]) and `rls`
    /// is left as Helm's uninstall returns it.
    pub async fn finish_uninstall(
        &self,
        rls: &mut Release,
        keep_history: bool,
    ) -> Result<(), StorageError> {
        set_status(rls, Status::Uninstalled, UNINSTALL_COMPLETE);
        if !keep_history {
            self.purge(&rls.name).await?;
            return Ok(());
        }
        self.update(rls).await?;
        for other in superseded_by(&self.deployed_all(&rls.name).await?, rls.version) {
            self.update(&other).await?;
        }
        Ok(())
    }

    /// Deletes every record of the release (uninstall without history). Returns the
    /// revisions deleted; a record already gone (deleted by someone else meanwhile) is not
    /// one of them and is no error. Stops at the first failure; an unreadable record fails
    /// the history read, so nothing is deleted then.
    pub async fn purge(&self, name: &str) -> Result<Vec<i64>, StorageError> {
        let mut deleted = Vec::new();
        for rls in self.history(name).await? {
            match self.delete(name, rls.version).await {
                Ok(_) => deleted.push(rls.version),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(version: i64, status: Status, description: &str) -> Release {
        Release {
            name: "web".to_owned(),
            namespace: "apps".to_owned(),
            version,
            info: Some(Info {
                status: Some(status),
                description: description.to_owned(),
                first_deployed: GoTime::from_unix(1_000 + version, 0),
                notes: format!("notes {version}"),
                ..Info::default()
            }),
            manifest: format!("manifest {version}"),
            ..Release::default()
        }
    }

    #[test]
    fn a_pending_record_is_unlocked_as_flux_does() {
        for status in [
            Status::PendingInstall,
            Status::PendingUpgrade,
            Status::PendingRollback,
        ] {
            let mut r = rec(2, status.clone(), "Preparing upgrade");
            assert_eq!(unlock(&mut r), Some(status.clone()));
            let info = r.info.unwrap();
            assert_eq!(info.status, Some(Status::Failed));
            assert_eq!(
                info.description,
                format!("Release unlocked from stale '{status}' state")
            );
        }
        let mut r = rec(2, Status::Deployed, "Upgrade complete");
        assert_eq!(unlock(&mut r), None);
        assert_eq!(r, rec(2, Status::Deployed, "Upgrade complete"));
    }

    #[test]
    fn descriptions_are_helms() {
        assert_eq!(
            upgrade_failed("web", "timed out"),
            "Upgrade \"web\" failed: timed out"
        );
        assert_eq!(release_failed("web", "x"), "Release \"web\" failed: x");
        assert_eq!(rollback_failed("web", "x"), "Rollback \"web\" failed: x");
        assert_eq!(rollback_to(3), "Rollback to 3");
    }

    #[test]
    fn upgrades_start_from_the_record_helm_would_pick() {
        use Status::*;
        // (statuses of revisions 1.., Ok(base revision) or Err(message))
        let cases: &[(&[Status], Result<i64, &str>)] = &[
            (&[Deployed], Ok(1)),
            (&[Superseded, Deployed], Ok(2)),
            (&[Superseded, Deployed, Failed], Ok(2)),
            (&[Failed], Ok(1)),
            (&[Superseded, Superseded], Ok(2)),
            (&[Failed, Failed], Ok(2)),
            (
                &[Deployed, PendingUpgrade],
                Err("another operation (install/upgrade/rollback) is in progress"),
            ),
            (&[Uninstalled], Err("\"web\" has no deployed releases")),
            (&[], Err("\"web\" has no deployed releases")),
        ];
        for (statuses, want) in cases {
            let history: Vec<Release> = statuses
                .iter()
                .zip(1..)
                .map(|(s, v)| rec(v, s.clone(), ""))
                .collect();
            let got = upgrade_base("web", &history)
                .map(|r| r.version)
                .map_err(|e| e.to_string());
            assert_eq!(got, want.map_err(str::to_owned), "{statuses:?}");
        }
    }

    #[test]
    fn a_lock_is_transient_and_a_missing_release_or_revision_is_not() {
        let name = || "web".to_owned();
        let cases = [
            (
                TransitionError::NoDeployedReleases { name: name() },
                "no_deployed_releases",
                false,
            ),
            (
                TransitionError::Locked {
                    name: name(),
                    version: 2,
                    status: Status::PendingRollback,
                },
                "locked",
                true,
            ),
            (
                TransitionError::NoRevision {
                    name: name(),
                    version: 3,
                },
                "no_revision",
                false,
            ),
        ];
        for (error, kind, transient) in cases {
            assert_eq!(
                (error.kind(), error.is_transient()),
                (kind, transient),
                "{error}"
            );
        }
    }

    #[test]
    fn a_rollback_record_copies_the_target_and_continues_the_history() {
        let history = vec![
            rec(1, Status::Superseded, "Install complete"),
            rec(2, Status::Superseded, "Upgrade complete"),
            rec(3, Status::Deployed, "Upgrade complete"),
        ];
        let now = GoTime::from_unix(9_999, 5);
        let rollback = rollback_from_history("web", &history, 1, now).unwrap();
        assert_eq!((rollback.last.version, rollback.target.version), (3, 1));
        let r = rollback.record;
        assert_eq!(r.version, 4);
        assert_eq!(r.manifest, "manifest 1");
        let info = r.info.as_ref().unwrap();
        assert_eq!(info.status, Some(Status::PendingRollback));
        assert_eq!(info.description, "Rollback to 1");
        assert_eq!(info.first_deployed, GoTime::from_unix(1_003, 0));
        assert_eq!(info.last_deployed, now);
        assert_eq!(info.notes, "notes 1");
        let previous = rollback_from_history("web", &history, 0, now).unwrap();
        assert_eq!(previous.record.manifest, "manifest 2");
        assert_eq!(
            rollback_from_history("web", &history, 7, now)
                .unwrap_err()
                .to_string(),
            "release has no 7 version"
        );
        assert_eq!(
            rollback_from_history("web", &[], 1, now)
                .unwrap_err()
                .to_string(),
            "\"web\" has no deployed releases"
        );
        // Helm rolls back from a pending last record too (Flux unlocks before it would).
        let mut pending = history.clone();
        pending.push(rec(4, Status::PendingUpgrade, "Preparing upgrade"));
        let from_pending = rollback_from_history("web", &pending, 3, now).unwrap();
        assert_eq!(from_pending.record.version, 5);
    }

    #[test]
    fn success_supersedes_every_other_deployed_record_keeping_descriptions() {
        let deployed = vec![
            rec(2, Status::Deployed, "Install complete"),
            rec(3, Status::Deployed, "Upgrade complete"),
            rec(4, Status::Deployed, "Rollback to 2"),
        ];
        let out = superseded_by(&deployed, 4);
        let got: Vec<_> = out
            .iter()
            .map(|r| {
                let i = r.info.as_ref().unwrap();
                (r.version, i.status.clone().unwrap(), i.description.as_str())
            })
            .collect();
        assert_eq!(
            got,
            [
                (2, Status::Superseded, "Install complete"),
                (3, Status::Superseded, "Upgrade complete")
            ]
        );
        assert_eq!(next_version(&deployed), 5);
        assert_eq!(next_version(&[]), 1);
    }
}
