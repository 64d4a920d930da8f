//! Conversions of the session's messages (`Session` stream) between the wire and the agent
//! runtime's domain types (`flotilla_core::agent`), at the edge.
//!
//! - Down: [`DeleteRequest`] and [`v1::PlanDelete`] both ways (plans themselves are in
//!   [`crate::convert`]).
//! - Up: every [`Report`] becomes one [`v1::AgentMessage`] ([`report_message`]) and back
//!   ([`report_from_message`]); [`HeldPlan`] both ways for the Hello.
//!
//! A report's [`Step`] travels as a small tagged form (`step`, `step_detail`,
//! `step_error_kind`, `step_transient`): the hub needs to know how the reconcile ended, not
//! the action that was running, so `Step::Run` comes back as `run` and an action error keeps
//! its message, kind and transience.

use flotilla_core::agent::{
    DeleteOutcome, DeleteRequest, HeldPlan, ObjectKey, Report, StatusReport,
};
use flotilla_core::digest::Digest;
use flotilla_core::duration::GoDuration;
use flotilla_core::ids::{ChartDigest, Namespace, ObjectName, PlanRevision};
use flotilla_core::meta::Timestamp;
use flotilla_core::release::{ReconcileError, Step};
use flotilla_core::spec::Uninstall;

use crate::convert::{InvalidMessage, ObjectEvent, object_ref};
use crate::v1::{self, agent_message};

/// The wire reference of a HelmRelease known by key only.
pub fn key_ref(key: &ObjectKey) -> v1::ObjectRef {
    v1::ObjectRef {
        namespace: key.namespace.to_string(),
        name: key.name.to_string(),
        uid: String::new(),
    }
}

/// The key of a wire reference, `field` naming it in errors.
pub fn object_key(field: &str, o: Option<v1::ObjectRef>) -> Result<ObjectKey, InvalidMessage> {
    let o = o.ok_or_else(|| InvalidMessage::missing(field))?;
    Ok(ObjectKey {
        namespace: Namespace::new(o.namespace)
            .map_err(|e| InvalidMessage::new(format!("{field}.namespace"), e))?,
        name: ObjectName::new(o.name)
            .map_err(|e| InvalidMessage::new(format!("{field}.name"), e))?,
    })
}

impl From<HeldPlan> for v1::HeldPlan {
    fn from(h: HeldPlan) -> Self {
        Self {
            object: Some(key_ref(&h.object)),
            revision: h.revision.get(),
            chart_digest: h.chart.to_string(),
            status_digest: h.status_digest.map(|d| d.to_string()).unwrap_or_default(),
        }
    }
}

impl TryFrom<v1::HeldPlan> for HeldPlan {
    type Error = InvalidMessage;

    fn try_from(h: v1::HeldPlan) -> Result<Self, Self::Error> {
        Ok(Self {
            object: object_key("heldPlan.object", h.object)?,
            revision: PlanRevision::new(h.revision),
            chart: ChartDigest::new(h.chart_digest)
                .map_err(|e| InvalidMessage::new("heldPlan.chartDigest", e))?,
            status_digest: if h.status_digest.is_empty() {
                None
            } else {
                Some(
                    Digest::parse(&h.status_digest)
                        .map_err(|e| InvalidMessage::new("heldPlan.statusDigest", e))?,
                )
            },
        })
    }
}

impl From<DeleteRequest> for v1::PlanDelete {
    fn from(d: DeleteRequest) -> Self {
        let (uninstall, uninstall_options_json) = match &d.uninstall {
            // A plain struct of strings, numbers and booleans: serializing cannot fail.
            Some(u) => (true, serde_json::to_vec(u).unwrap_or_default()),
            None => (false, Vec::new()),
        };
        Self {
            object: Some(key_ref(&d.object)),
            uninstall,
            uninstall_options_json,
            revision: d.revision.get(),
        }
    }
}

impl TryFrom<v1::PlanDelete> for DeleteRequest {
    type Error = InvalidMessage;

    fn try_from(d: v1::PlanDelete) -> Result<Self, Self::Error> {
        let uninstall = if d.uninstall {
            let options: Uninstall = if d.uninstall_options_json.is_empty() {
                Uninstall::default()
            } else {
                serde_json::from_slice(&d.uninstall_options_json)
                    .map_err(|e| InvalidMessage::new("planDelete.uninstallOptionsJson", e))?
            };
            Some(options)
        } else {
            None
        };
        Ok(Self {
            object: object_key("planDelete.object", d.object)?,
            revision: PlanRevision::new(d.revision),
            uninstall,
        })
    }
}

/// The action names a failed step may carry (`ReconcileError::Action::action` is static).
const ACTION_NAMES: [&str; 9] = [
    "install",
    "upgrade",
    "test",
    "rollback",
    "uninstall",
    "unlock",
    "detectDrift",
    "correctDrift",
    "action",
];

fn step_fields(step: &Step) -> (&'static str, String, String, bool) {
    match step {
        Step::Run { action, .. } => ("run", format!("{action:?}"), String::new(), false),
        Step::Done => ("done", String::new(), String::new(), false),
        Step::Requeue => ("requeue", String::new(), String::new(), false),
        Step::RetryAfter(d) => ("retryAfter", d.to_string(), String::new(), false),
        Step::Stalled => ("stalled", String::new(), String::new(), false),
        Step::Failed(e) => (
            "failed",
            e.to_string(),
            e.kind().to_owned(),
            e.is_transient(),
        ),
    }
}

fn step_from_fields(r: &v1::StatusReport) -> Result<Step, InvalidMessage> {
    Ok(match r.step.as_str() {
        "done" | "" => Step::Done,
        // The hub only needs to know that an action was running.
        "run" | "requeue" => Step::Requeue,
        "retryAfter" => Step::RetryAfter(
            GoDuration::parse(&r.step_detail)
                .map_err(|e| InvalidMessage::new("status.stepDetail", e))?,
        ),
        "stalled" => Step::Stalled,
        "failed" => Step::Failed(if r.step_error_kind == "state" {
            ReconcileError::State(r.step_detail.clone())
        } else {
            ReconcileError::Action {
                action: ACTION_NAMES
                    .iter()
                    .find(|n| **n == r.step_error_kind)
                    .copied()
                    .unwrap_or("action"),
                message: r.step_detail.clone(),
                transient: r.step_transient,
            }
        }),
        other => {
            return Err(InvalidMessage::new(
                "status.step",
                format!("unknown step {other:?}"),
            ));
        }
    })
}

impl From<StatusReport> for v1::StatusReport {
    fn from(s: StatusReport) -> Self {
        let (step, step_detail, step_error_kind, step_transient) = step_fields(&s.step);
        Self {
            object: Some(s.object.into()),
            plan_revision: s.plan_revision.get(),
            status: Some(s.status.into()),
            seq: s.seq,
            step: step.to_owned(),
            step_detail,
            step_error_kind,
            step_transient,
        }
    }
}

impl TryFrom<v1::StatusReport> for StatusReport {
    type Error = InvalidMessage;

    fn try_from(r: v1::StatusReport) -> Result<Self, Self::Error> {
        let step = step_from_fields(&r)?;
        let status = r
            .status
            .ok_or_else(|| InvalidMessage::missing("status.status"))?
            .try_into()?;
        Ok(Self {
            object: object_ref("status.object", r.object)?,
            plan_revision: PlanRevision::new(r.plan_revision),
            seq: r.seq,
            status,
            step,
        })
    }
}

/// The message carrying `report`; `now` stamps an Event (the runtime's events carry no time).
pub fn report_message(report: Report, now: &Timestamp) -> v1::AgentMessage {
    let kind = match report {
        Report::Status(s) => agent_message::Kind::Status((*s).into()),
        Report::Event {
            object,
            plan_revision,
            event,
        } => {
            let mut wire: v1::Event = ObjectEvent {
                object,
                time: now.clone(),
                event,
            }
            .into();
            wire.plan_revision = plan_revision.get();
            agent_message::Kind::Event(wire)
        }
        Report::Deleted {
            object,
            revision,
            outcome,
        } => agent_message::Kind::Deleted(v1::ReleaseDeleted {
            object: Some(key_ref(&object)),
            revision: revision.get(),
            uninstalled: outcome == DeleteOutcome::Uninstalled,
        }),
        Report::Rejected {
            object,
            revision,
            error,
        } => agent_message::Kind::Rejected(v1::PlanRejected {
            object: Some(key_ref(&object)),
            revision: revision.get(),
            error,
        }),
        Report::Preview(p) => agent_message::Kind::Preview((*p).into()),
    };
    v1::AgentMessage { kind: Some(kind) }
}

/// The report an agent message carries, if it is one (status, event, deletion, rejection,
/// preview).
pub fn report_from_message(kind: agent_message::Kind) -> Option<Result<Report, InvalidMessage>> {
    Some(match kind {
        agent_message::Kind::Status(s) => {
            StatusReport::try_from(s).map(|s| Report::Status(Box::new(s)))
        }
        agent_message::Kind::Event(e) => {
            let plan_revision = PlanRevision::new(e.plan_revision);
            ObjectEvent::try_from(e).map(|e| Report::Event {
                object: e.object,
                plan_revision,
                event: e.event,
            })
        }
        agent_message::Kind::Deleted(d) => {
            object_key("deleted.object", d.object).map(|object| Report::Deleted {
                object,
                revision: PlanRevision::new(d.revision),
                outcome: if d.uninstalled {
                    DeleteOutcome::Uninstalled
                } else {
                    DeleteOutcome::Forgotten
                },
            })
        }
        agent_message::Kind::Rejected(r) => {
            object_key("rejected.object", r.object).map(|object| Report::Rejected {
                object,
                revision: PlanRevision::new(r.revision),
                error: r.error,
            })
        }
        agent_message::Kind::Preview(p) => {
            flotilla_core::preview::PreviewReport::try_from(p).map(|p| Report::Preview(Box::new(p)))
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ObjectKey {
        ObjectKey {
            namespace: Namespace::new("apps").unwrap(),
            name: ObjectName::new("podinfo").unwrap(),
        }
    }

    #[test]
    fn a_deletion_keeps_its_revision_and_uninstall_options() {
        let d = DeleteRequest {
            object: key(),
            revision: PlanRevision::new(9),
            uninstall: Some(Uninstall::default()),
        };
        let wire: v1::PlanDelete = d.clone().into();
        assert!(wire.uninstall);
        assert_eq!(DeleteRequest::try_from(wire).unwrap(), d);
        let forget = DeleteRequest {
            uninstall: None,
            ..d
        };
        assert_eq!(
            DeleteRequest::try_from(v1::PlanDelete::from(forget.clone())).unwrap(),
            forget
        );
    }

    #[test]
    fn a_held_plan_survives_the_wire_with_and_without_a_status_digest() {
        let h = HeldPlan {
            object: key(),
            revision: PlanRevision::new(3),
            chart: ChartDigest::of_bytes(b"chart"),
            status_digest: None,
        };
        assert_eq!(
            HeldPlan::try_from(v1::HeldPlan::from(h.clone())).unwrap(),
            h
        );
        let with = HeldPlan {
            status_digest: Some(flotilla_core::digest::Algorithm::Sha256.digest(b"s")),
            ..h
        };
        assert_eq!(
            HeldPlan::try_from(v1::HeldPlan::from(with.clone())).unwrap(),
            with
        );
    }

    #[test]
    fn a_rejection_and_a_deletion_come_back_as_the_same_reports() {
        let now = Timestamp::new("2026-01-02T03:04:05Z").unwrap();
        for report in [
            Report::Rejected {
                object: key(),
                revision: PlanRevision::new(2),
                error: "plan.values: bad".into(),
            },
            Report::Deleted {
                object: key(),
                revision: PlanRevision::new(4),
                outcome: DeleteOutcome::Uninstalled,
            },
        ] {
            let message = report_message(report.clone(), &now);
            let back = report_from_message(message.kind.unwrap()).unwrap().unwrap();
            assert_eq!(back, report);
        }
    }

    #[test]
    fn a_failed_step_keeps_its_message_kind_and_transience() {
        let wire = v1::StatusReport {
            step: "failed".into(),
            step_detail: "upgrade: timed out".into(),
            step_error_kind: "upgrade".into(),
            step_transient: true,
            ..Default::default()
        };
        assert_eq!(
            step_from_fields(&wire).unwrap(),
            Step::Failed(ReconcileError::Action {
                action: "upgrade",
                message: "upgrade: timed out".into(),
                transient: true,
            })
        );
    }
}
