//! Test-only support: real local Kubernetes control planes, several side by side.
//!
//! Start at [`cluster::Cluster::start`]: it runs upstream etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok on loopback ports with their own
//! certificates and data directory, and tears all of it down when dropped.

pub mod cluster;
pub mod conformance;
pub mod pki;
pub mod process;
pub mod tools;
pub mod wait;

pub use cluster::{Cluster, ClusterOptions};
pub use futures::future::join_all;
