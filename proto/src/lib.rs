//! The wire contract between the hub and its agents (package `flotilla.agent.v1`).
//!
//! This crate will hold the `.proto` files, the generated prost/tonic code (committed, with a
//! staleness check) and the `TryFrom` conversions between wire messages and the domain types of
//! `flotilla-core`. No wire type travels past a handler. Nothing is defined yet: the messages
//! land with the agent's plan and status (issue 4) and the hub session.
