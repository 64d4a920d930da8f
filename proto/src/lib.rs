//! The wire contract between the hub and its agents (package `flotilla.agent.v1`).
//!
//! The source of truth is `proto/flotilla/agent/v1/agent.proto`. The Rust code in `src/gen/`
//! is generated from it by `cargo xtask gen` (prost and tonic, compiled with protox, so no
//! system `protoc` is needed) and committed; `cargo xtask gen-check` fails when it is stale.
//!
//! Wire types stop at the edge: [`convert`] turns them into the domain types of
//! `flotilla-core` (`TryFrom<v1::ReleasePlan> for ReleasePlan`, refusing bad input with an
//! [`convert::InvalidMessage`] naming the field) and back, and no prost type travels further.

pub mod convert;
pub mod preview;
pub mod session;

/// The shared byte buffer of `bytes` fields sent to many peers (`PlanUpsert.chart_archive`).
pub use prost::bytes::Bytes;

/// Messages and the `Hub` service of `flotilla.agent.v1`.
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic,
    rust_2018_idioms
)]
pub mod v1 {
    include!("gen/flotilla.agent.v1.rs");
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::v1::{self, hub_message};

    fn plan() -> v1::ReleasePlan {
        v1::ReleasePlan {
            object: Some(v1::ObjectRef {
                namespace: "apps".into(),
                name: "podinfo".into(),
                uid: "9b0e4c9e-3f7a-4a39-9d55-0c1e5e0b7a21".into(),
            }),
            revision: 7,
            generation: 3,
            release: Some(v1::ReleaseTarget {
                name: "apps-podinfo".into(),
                namespace: "apps".into(),
                storage_namespace: "apps".into(),
            }),
            values_json: br#"{"replicaCount":2}"#.to_vec(),
            config_digest: "sha256:abc".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_plan_upsert_survives_the_wire() {
        let message = v1::HubMessage {
            kind: Some(hub_message::Kind::PlanUpsert(v1::PlanUpsert {
                plan: Some(plan()),
                chart_archive: prost::bytes::Bytes::from_static(b"\x1f\x8b archive"),
            })),
        };
        let bytes = message.encode_to_vec();
        assert_eq!(v1::HubMessage::decode(bytes.as_slice()), Ok(message));
    }

    #[test]
    fn a_newer_peer_with_unknown_fields_is_still_understood() {
        let mut bytes = plan().encode_to_vec();
        // Field 99, varint 1: what a later, additive version of the contract could send.
        bytes.extend_from_slice(&[0x98, 0x06, 0x01]);
        let decoded =
            v1::ReleasePlan::decode(bytes.as_slice()).expect("unknown fields are skipped");
        assert_eq!(decoded, plan());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(v1::ReleasePlan::decode(&[0xff, 0xff, 0xff][..]).is_err());
    }
}
