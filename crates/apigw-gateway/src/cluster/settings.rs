//! Cluster-mode settings: where the Kubernetes API is, how to route to services, and the
//! timing of the Lease election. Defaults and their rules live only here.

use std::path::PathBuf;
use std::time::Duration;

/// Cluster mode: where the Kubernetes API is and how to route to services.
#[derive(Debug, Clone, Default)]
pub struct ClusterSettings {
    /// None: the in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    pub aggregator_routing: bool,
    pub leader_election: LeaderElection,
}

/// Timing of the Lease election among replicas, with kube's `--leader-elect-*` names and
/// client-go's defaults and rules: lease duration > renew deadline > 1.2 x retry period > 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderElection {
    /// Others take the Lease when it was not renewed for this long.
    pub lease_duration: Duration,
    /// The leader stops leading when it could not renew for this long.
    pub renew_deadline: Duration,
    /// How often every replica tries to acquire or renew.
    pub retry_period: Duration,
}

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaderElection {
    /// client-go's checks (`NewLeaderElector`), plus a whole second at least, since the Lease
    /// holds its duration in seconds; by flag name.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.lease_duration < Duration::from_secs(1) {
            out.push(("leader-elect-lease-duration", "must be 1s or more".into()));
        }
        if self.lease_duration <= self.renew_deadline {
            out.push((
                "leader-elect-lease-duration",
                format!(
                    "must be greater than --leader-elect-renew-deadline ({:?})",
                    self.renew_deadline
                ),
            ));
        }
        if self.retry_period.is_zero() {
            out.push(("leader-elect-retry-period", "must be more than 0".into()));
        } else if self.renew_deadline.as_secs_f64() <= self.retry_period.as_secs_f64() * 1.2 {
            out.push((
                "leader-elect-renew-deadline",
                format!(
                    "must be greater than 1.2 x --leader-elect-retry-period ({:?})",
                    self.retry_period
                ),
            ));
        }
        out
    }
}
