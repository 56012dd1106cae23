//! Cluster mode: what apigw reads from and writes to a Kubernetes API server with the `kube`
//! crate. Each piece stands alone and is wired into the gateway by configuration:
//!
//! - [`client`]: the [`kube::Client`] from `--kubeconfig` or the in-cluster service account.
//! - [`apiservices`]: a watcher/reflector over `apiregistration.k8s.io/v1` APIServices feeding the
//!   [`apigw_registry::Registry`], with a readiness latch after the first full list.
//! - [`services`]: `<name>.<namespace>.svc:<port>` to addresses through Services (ClusterIP) or
//!   their EndpointSlices (`--enable-aggregator-routing`), from reflector caches.
//! - [`tokenreview`]: bearer tokens checked with TokenReview, with a bounded TTL cache.
//! - [`lease`]: leader election with a `coordination.k8s.io/v1` Lease.
//! - [`status`]: availability conditions written back to APIService status by the leader.
//! - [`cache`]: the bounded TTL cache the two reviewers share.
//! - [`refusals`]: a watcher's failures told once when the cluster refuses a permission.

pub mod apiservices;
pub mod client;
pub mod flowcontrol;
pub mod lease;
mod refusals;
pub mod services;
mod settings;
pub use settings::{ClusterFlags, ClusterSettings, LeaderElection};
pub mod status;
pub mod tokenreview;

pub use apiservices::ApiServiceSource;
pub use client::client;
pub use lease::{LeaderElector, LeaseSettings};
pub use services::{RoutingMode, ServiceResolver};
pub use status::StatusWriter;
pub use tokenreview::TokenReviewer;

/// Errors of cluster mode; each names what was being done.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("{what}: {message}")]
    Config { what: String, message: String },
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
}

impl ClusterError {
    pub(crate) fn config(what: String, e: impl std::fmt::Display) -> Self {
        Self::Config {
            what,
            message: e.to_string(),
        }
    }

    pub(crate) fn api(what: impl Into<String>, source: kube::Error) -> Self {
        Self::Api {
            what: what.into(),
            source,
        }
    }
}
