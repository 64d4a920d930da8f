//! Test-only support: real local Kubernetes control planes, several side by side.
//!
//! Start at [`cluster::Cluster::start`]: it runs upstream etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok on loopback ports with their own
//! certificates and data directory, and tears all of it down when dropped. The chart sources
//! the hub fetches from are real servers too ([`servers`]): Helm repositories served by nginx
//! and the CNCF distribution registry for OCI.

pub mod bins;
pub mod capi;
pub mod capi_kubelet;
pub mod cluster;
pub mod conformance;
pub mod crds;
pub mod fleet;
pub mod flux;
pub mod http;
pub mod image;
pub mod messages;
pub mod monitoring;
pub mod pki;
pub mod process;
pub mod rbac;
pub mod servers;
pub mod tools;
pub mod wait;

pub use cluster::{Cluster, ClusterOptions};
pub use futures::future::join_all;
