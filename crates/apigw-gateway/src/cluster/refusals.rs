//! How a watcher's failures are told: a refusal by the cluster's authorization (403) names the
//! verb and resource to grant once, at warn, and then only at debug while it lasts (a missing
//! permission is a fact of the install, not news every backoff); any other failure is a warning
//! each time. One [`WatchErrors`] per watched resource.

use kube::runtime::watcher;

/// The state of one watcher's error reports.
#[derive(Debug)]
pub struct WatchErrors {
    /// `group/resource` as RBAC names it (`flowcontrol.apiserver.k8s.io/flowschemas`).
    resource: String,
    refused: bool,
}

impl WatchErrors {
    pub fn new(group: &str, plural: &str) -> Self {
        let resource = if group.is_empty() {
            plural.to_string()
        } else {
            format!("{group}/{plural}")
        };
        Self {
            resource,
            refused: false,
        }
    }

    /// Reports `e`, once while the cluster keeps refusing.
    pub fn report(&mut self, e: &watcher::Error) {
        if !forbidden(e) {
            self.refused = false;
            tracing::warn!(resource = %self.resource, error = %e, "watching the cluster; retrying");
            return;
        }
        if self.refused {
            tracing::debug!(resource = %self.resource, error = %e, "still refused");
            return;
        }
        self.refused = true;
        tracing::warn!(
            resource = %self.resource,
            error = %e,
            "the cluster refuses apigw list and watch on {}: grant get, list and watch on it to \
             apigw's service account (the chart's ClusterRole does); retrying quietly",
            self.resource
        );
    }

    /// The watch works again.
    pub fn recovered(&mut self) {
        if std::mem::take(&mut self.refused) {
            tracing::info!(resource = %self.resource, "the cluster now allows the watch");
        }
    }
}

/// True when the cluster answered 403.
fn forbidden(e: &watcher::Error) -> bool {
    let status = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.as_ref(),
        watcher::Error::WatchError(s) => s.as_ref(),
        _ => return false,
    };
    status.code == 403
}
