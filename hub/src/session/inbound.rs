//! What a session does with one agent message, without IO: decoded and checked against
//! the session's [`Mailbox`], so that the whole of it can be table-tested and fuzzed
//! without a cluster. The session loop (`server`) does the IO the answer asks for (a
//! `Pong`, a certificate signed).
//!
//! Every field is untrusted: a message that does not decode ends the session with one
//! sentence naming the field (a second Hello, an ack naming no HelmRelease, a CSR that is
//! not text), or, for a report, is dropped and counted
//! (`flotilla_hub_agent_input_dropped_total{reason="invalid"}`); reports for HelmReleases
//! the cluster was not given, or for revisions it was never sent, are dropped by the
//! mailbox. Nothing here allocates more than the message it was given.

use flotilla_core::agent::HeldPlan;
use flotilla_core::ids::{ChartDigest, PlanRevision};
use flotilla_proto::convert::InvalidMessage;
use flotilla_proto::session::{object_key, report_from_message};
use flotilla_proto::v1::{self, agent_message};

use super::mailbox::Mailbox;
use crate::telemetry::Dropped;

/// What the session owes the agent for a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// Nothing.
    Done,
    /// A `Pong` with this nonce.
    Pong(u64),
    /// A certificate for this CSR (PEM text), if the session's renewals allow.
    Renew(String),
}

/// A message that ends the session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InboundError {
    /// A Hello after the first message.
    #[error("a session has one Hello, first")]
    SecondHello,
    /// A field that does not decode.
    #[error(transparent)]
    Invalid(#[from] InvalidMessage),
    /// A held plan of the Hello that does not decode.
    #[error("hello: {0}")]
    Hello(InvalidMessage),
    /// A Renew whose CSR is not text.
    #[error("renew.csr_pem is not PEM text")]
    RenewNotPem,
    /// A Hello whose cached chart digest does not parse.
    #[error("hello.cachedChartDigests[{index}]: {message}")]
    CachedDigest {
        /// The position in the list.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

/// What the Hello says the agent holds.
#[derive(Debug, Clone, PartialEq)]
pub struct HelloState {
    /// The plans held.
    pub held: Vec<HeldPlan>,
    /// The chart archives cached.
    pub cached: Vec<ChartDigest>,
}

/// Decodes the plans and charts of a Hello.
pub fn hello(hello: &mut v1::Hello) -> Result<HelloState, InboundError> {
    let mut held = Vec::with_capacity(hello.held_plans.len());
    for h in std::mem::take(&mut hello.held_plans) {
        held.push(HeldPlan::try_from(h).map_err(InboundError::Hello)?);
    }
    let mut cached = Vec::with_capacity(hello.cached_chart_digests.len());
    for (index, d) in std::mem::take(&mut hello.cached_chart_digests)
        .into_iter()
        .enumerate()
    {
        cached.push(ChartDigest::new(d).map_err(|e| InboundError::CachedDigest {
            index,
            message: e.to_string(),
        })?);
    }
    Ok(HelloState { held, cached })
}

/// Applies one message after the Hello to `mailbox`: acks and reports go in (or are
/// dropped and counted), and the answer owed is returned.
pub fn accept(mailbox: &Mailbox, message: v1::AgentMessage) -> Result<Inbound, InboundError> {
    let Some(kind) = message.kind else {
        return Ok(Inbound::Done);
    };
    match kind {
        agent_message::Kind::Hello(_) => Err(InboundError::SecondHello),
        agent_message::Kind::Ping(p) => Ok(Inbound::Pong(p.nonce)),
        agent_message::Kind::Pong(_) => Ok(Inbound::Done),
        agent_message::Kind::Ack(a) => {
            let key = object_key("ack.object", a.object)?;
            mailbox.acked(key, PlanRevision::new(a.revision));
            Ok(Inbound::Done)
        }
        agent_message::Kind::Renew(r) => String::from_utf8(r.csr_pem)
            .map(Inbound::Renew)
            .map_err(|_| InboundError::RenewNotPem),
        other => {
            match report_from_message(other) {
                Some(Ok(report)) => {
                    let key = report.object();
                    if !mailbox.report(report) {
                        tracing::debug!(cluster = %mailbox.cluster(), object = %key, "dropped a report for a HelmRelease or revision this cluster was not given");
                    }
                }
                Some(Err(e)) => {
                    mailbox.count_dropped(Dropped::Invalid);
                    tracing::debug!(cluster = %mailbox.cluster(), error = %e, "dropped an invalid report");
                }
                None => {}
            }
            Ok(Inbound::Done)
        }
    }
}

#[cfg(test)]
mod tests {
    use flotilla_core::agent::Command;
    use flotilla_core::ids::ClusterId;
    use flotilla_core::plan::{ChartArtifact, ReleasePlan};
    use flotilla_core::spec::HelmRelease;
    use serde_json::json;

    use super::*;
    use crate::link::{AgentLink as _, report_channel};
    use crate::reports::ReportReceiver;

    fn mailbox_with_a_sent_plan() -> (Mailbox, ReportReceiver) {
        let (sink, rx) = report_channel();
        let m = Mailbox::new(ClusterId::new("edge").unwrap(), sink);
        let hr = HelmRelease::from_value(json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": "a", "namespace": "apps", "generation": 1},
            "spec": {"interval": "5m", "chartRef": {"kind": "OCIRepository", "name": "podinfo"}}
        }))
        .unwrap();
        let chart = ChartArtifact {
            name: "podinfo".into(),
            version: "6.5.3".into(),
            app_version: None,
            digest: ChartDigest::of_bytes(b"podinfo"),
            oci_digest: None,
        };
        let plan =
            ReleasePlan::from_helm_release(&hr, PlanRevision::new(1), chart, json!({})).unwrap();
        m.send(Command::Upsert(Box::new(plan))).unwrap();
        assert!(m.next_outgoing().is_some());
        (m, rx)
    }

    fn message(kind: agent_message::Kind) -> v1::AgentMessage {
        v1::AgentMessage { kind: Some(kind) }
    }

    fn object(name: &str) -> Option<v1::ObjectRef> {
        Some(v1::ObjectRef {
            namespace: "apps".into(),
            name: name.into(),
            uid: String::new(),
        })
    }

    fn event(name: &str, revision: u64) -> agent_message::Kind {
        agent_message::Kind::Event(v1::Event {
            object: object(name),
            r#type: "Normal".into(),
            reason: "InstallSucceeded".into(),
            message: "installed".into(),
            time: "2026-01-02T03:04:05Z".into(),
            plan_revision: revision,
            ..Default::default()
        })
    }

    #[test]
    fn each_message_gets_its_answer_or_ends_the_session_naming_the_field() {
        let (m, mut rx) = mailbox_with_a_sent_plan();
        let cases: Vec<(agent_message::Kind, Result<Inbound, &str>)> = vec![
            (
                agent_message::Kind::Ping(v1::Ping { nonce: 7 }),
                Ok(Inbound::Pong(7)),
            ),
            (
                agent_message::Kind::Pong(v1::Pong { nonce: 7 }),
                Ok(Inbound::Done),
            ),
            (
                agent_message::Kind::Renew(v1::RenewCertificate {
                    csr_pem: b"-----BEGIN CERTIFICATE REQUEST-----".to_vec(),
                }),
                Ok(Inbound::Renew("-----BEGIN CERTIFICATE REQUEST-----".into())),
            ),
            (
                agent_message::Kind::Renew(v1::RenewCertificate {
                    csr_pem: vec![0xff, 0xfe],
                }),
                Err("renew.csr_pem is not PEM text"),
            ),
            (
                agent_message::Kind::Hello(v1::Hello::default()),
                Err("a session has one Hello, first"),
            ),
            (
                agent_message::Kind::Ack(v1::PlanAck {
                    object: None,
                    revision: 1,
                }),
                Err("ack.object: required"),
            ),
            (event("a", 1), Ok(Inbound::Done)),
        ];
        for (kind, expected) in cases {
            let got = accept(&m, message(kind)).map_err(|e| e.to_string());
            assert_eq!(got, expected.map_err(str::to_owned));
        }
        assert!(rx.try_recv().is_ok(), "the event was forwarded");
        assert_eq!(
            accept(&m, v1::AgentMessage { kind: None }),
            Ok(Inbound::Done)
        );
    }

    #[test]
    fn reports_that_do_not_decode_or_are_not_the_clusters_are_dropped_and_counted() {
        let (m, mut rx) = mailbox_with_a_sent_plan();
        let invalid = agent_message::Kind::Event(v1::Event {
            object: None,
            ..Default::default()
        });
        for kind in [invalid, event("other", 1), event("a", 2)] {
            assert_eq!(accept(&m, message(kind)), Ok(Inbound::Done));
        }
        assert!(rx.try_recv().is_err());
        let sink = m.reports_for_tests();
        assert_eq!(sink.dropped(Dropped::Invalid), 1);
        assert_eq!(sink.dropped(Dropped::NotGiven), 1);
        assert_eq!(sink.dropped(Dropped::UnsentRevision), 1);
    }

    #[test]
    fn a_hello_with_a_bad_digest_names_its_position() {
        let mut hello = v1::Hello {
            cached_chart_digests: vec![ChartDigest::of_bytes(b"x").to_string(), "md5:1".into()],
            ..Default::default()
        };
        let err = super::hello(&mut hello).unwrap_err().to_string();
        assert!(err.starts_with("hello.cachedChartDigests[1]: "), "{err}");
        let mut hello = v1::Hello {
            held_plans: vec![v1::HeldPlan::default()],
            ..Default::default()
        };
        let err = super::hello(&mut hello).unwrap_err().to_string();
        assert!(err.starts_with("hello: "), "{err}");
    }
}
