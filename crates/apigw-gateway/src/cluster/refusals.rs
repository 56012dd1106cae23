//! How a watcher's failures are told: a refusal by the cluster's authorization (403) names the
//! verb and resource to grant once, at warn, and a resource the cluster does not serve (404: a
//! CRD not installed, such as `APIServiceBackend` before the chart's CRDs) says so once; both
//! are then told only at debug while they last (facts of the install, not news every backoff).
//! Any other failure is a warning each time. One [`WatchErrors`] per watched resource.

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
        let code = refusal(e);
        if code.is_none() {
            self.refused = false;
            tracing::warn!(resource = %self.resource, error = %e, "watching the cluster; retrying");
            return;
        }
        if self.refused {
            tracing::debug!(resource = %self.resource, error = %e, "still refused");
            return;
        }
        self.refused = true;
        if code == Some(404) {
            tracing::warn!(
                resource = %self.resource,
                error = %e,
                "the cluster does not serve {}: install its CRD (the chart's crds/ has apigw's) \
                 to use it; retrying quietly",
                self.resource
            );
            return;
        }
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

/// 403 or 404 when the cluster answered so: an answer of the install, not of the moment.
fn refusal(e: &watcher::Error) -> Option<u16> {
    let status = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.as_ref(),
        watcher::Error::WatchError(s) => s.as_ref(),
        _ => return None,
    };
    matches!(status.code, 403 | 404).then_some(status.code)
}
