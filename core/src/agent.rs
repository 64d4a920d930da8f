//! The agent runtime's messages as domain types: what an agent is told ([`Command`]), what
//! it reports ([`Report`]) and what it holds ([`HeldPlan`]).
//!
//! The runtime (`flotilla_agent::runtime`) takes commands and yields reports; its clients
//! are the hub's session (which maps these onto the wire in `flotilla-proto`), the hub's
//! in-process push agents (in-memory channels) and plan-file mode. Nothing here is a wire
//! type.
//!
//! Guarantees the runtime gives about these messages:
//!
//! - Plan revisions are monotonic per HelmRelease: an [`Command::Upsert`] older than the
//!   held revision is ignored, the same revision is a no-op, a newer one supersedes the held
//!   plan (a reconcile of the old one in flight finishes its current Helm action first).
//! - `seq` of [`StatusReport`] grows by one per report of a HelmRelease for the life of the
//!   agent's state (it is persisted), so a receiver keeps the report with the highest
//!   `(plan_revision, seq)` and drops the others.
//! - A [`Report::Deleted`] is sent once the release is uninstalled (or there was nothing to
//!   uninstall) and the agent has forgotten the plan: what a hub finalizer waits for.
//! - A [`Command::Preview`] is answered by exactly one [`Report::Preview`] with its id
//!   (a diff, or why there is none, within the runtime's preview timeout); it changes
//!   nothing: no held plan, no revision, no Helm storage, no live object.

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::ids::{ChartDigest, Namespace, ObjectName, PlanRevision};
use crate::plan::{ObjectRef, ReleasePlan};
use crate::preview::{PreviewReport, PreviewRequest};
use crate::release::{Event, Step};
use crate::spec::Uninstall;
use crate::status::HelmReleaseStatus;

/// The key of a HelmRelease on the hub: `namespace/name` (the uid is not part of it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    /// Namespace of the HelmRelease.
    pub namespace: Namespace,
    /// Name of the HelmRelease.
    pub name: ObjectName,
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl ObjectRef {
    /// The key of the HelmRelease.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// A request to forget a HelmRelease's plan, uninstalling its release first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteRequest {
    /// The HelmRelease.
    pub object: ObjectKey,
    /// The revision of the deletion: older than the held plan's, it is ignored.
    pub revision: PlanRevision,
    /// `spec.uninstall` of the deleted HelmRelease; `None` forgets the plan without
    /// uninstalling (Flux skips the uninstall of a suspended HelmRelease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uninstall: Option<Uninstall>,
}

/// What an agent is told.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Hold this plan and reconcile it now (when it is newer than the held one).
    Upsert(Box<ReleasePlan>),
    /// Uninstall and forget a HelmRelease.
    Delete(DeleteRequest),
    /// Reconcile a held plan now (`reconcile.fluxcd.io/requestedAt` without a new plan).
    Reconcile(ObjectKey),
    /// Say what reconciling this plan would do, without doing it: answered by a
    /// [`Report::Preview`] of the same id. The plan is not held.
    Preview(PreviewRequest),
    /// Stop taking work, let in-flight actions finish, persist state and end the report
    /// stream.
    Shutdown,
}

/// How a deletion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DeleteOutcome {
    /// The release was uninstalled.
    Uninstalled,
    /// Nothing to uninstall (never installed, suspended, or uninstall not asked for).
    Forgotten,
}

/// The status of a HelmRelease after a reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusReport {
    /// The HelmRelease.
    pub object: ObjectRef,
    /// The plan revision the status is for.
    pub plan_revision: PlanRevision,
    /// Sequence number, growing per HelmRelease.
    pub seq: u64,
    /// The HelmRelease status.
    pub status: HelmReleaseStatus,
    /// How the reconcile ended.
    pub step: Step,
}

/// What an agent reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// A new status.
    Status(Box<StatusReport>),
    /// A Kubernetes Event for the HelmRelease, as Flux records it.
    Event {
        /// The HelmRelease.
        object: ObjectRef,
        /// The plan revision it happened under.
        plan_revision: PlanRevision,
        /// The event.
        event: Event,
    },
    /// The HelmRelease's release is gone and its plan forgotten.
    Deleted {
        /// The HelmRelease.
        object: ObjectKey,
        /// The revision of the deletion.
        revision: PlanRevision,
        /// How it ended.
        outcome: DeleteOutcome,
    },
    /// A plan the agent refuses; `error` names the field.
    Rejected {
        /// The HelmRelease.
        object: ObjectKey,
        /// The refused revision.
        revision: PlanRevision,
        /// Why, naming the field.
        error: String,
    },
    /// The answer to a [`Command::Preview`].
    Preview(Box<PreviewReport>),
}

impl Report {
    /// The HelmRelease a report is about.
    pub fn object(&self) -> ObjectKey {
        match self {
            Report::Status(s) => s.object.key(),
            Report::Event { object, .. } => object.key(),
            Report::Deleted { object, .. } | Report::Rejected { object, .. } => object.clone(),
            Report::Preview(p) => p.object.clone(),
        }
    }
}

/// A plan an agent holds, as its session's Hello lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldPlan {
    /// The HelmRelease.
    pub object: ObjectKey,
    /// The held revision.
    pub revision: PlanRevision,
    /// The chart the plan needs.
    pub chart: ChartDigest,
    /// Digest of the last status reported ([`status_digest`]); `None` before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_digest: Option<Digest>,
}

/// The digest of a status, as [`HeldPlan::status_digest`] carries it: sha256 of its JSON.
pub fn status_digest(status: &HelmReleaseStatus) -> Digest {
    // A status is plain data: serializing it cannot fail.
    let json = serde_json::to_vec(status).unwrap_or_default();
    crate::digest::Algorithm::Sha256.digest(&json)
}
