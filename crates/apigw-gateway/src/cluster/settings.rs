//! Cluster-mode settings: where the Kubernetes API is, how to route to services, and the
//! timing of the Lease election, and their `serve` flags. Defaults and their rules live only
//! here.

use apigw_core::duration::format_duration;
use apigw_core::settings::Cx;
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

apigw_core::section! {
    /// [`ClusterSettings`].
    pub struct ClusterFlags {
        /// Cluster mode with this kubeconfig: APIServices, Services and EndpointSlices from the
        /// cluster, TokenReview for bearer tokens, status written back.
        #[arg(long, help_heading = "Cluster mode", display_order = 22)]
        pub kubeconfig: Option<PathBuf> = "kubeconfig",
        /// Cluster mode with the in-cluster service account (inside a Pod).
        #[arg(long, help_heading = "Cluster mode", display_order = 23)]
        pub cluster_mode: bool = "clusterMode",
        /// In cluster mode, route to ready EndpointSlice endpoints instead of the Service's ClusterIP.
        #[arg(long, help_heading = "Cluster mode", display_order = 24)]
        pub enable_aggregator_routing: bool = "enableAggregatorRouting",
        /// In cluster mode, how long other replicas wait after the Lease was last renewed before
        /// taking it.
        #[arg(long, help_heading = "Cluster mode", display_order = 25)]
        pub leader_elect_lease_duration: Option<String> = "leaderElectLeaseDuration",
        /// In cluster mode, how long the leader keeps leading without a successful renewal.
        #[arg(long, help_heading = "Cluster mode", display_order = 26)]
        pub leader_elect_renew_deadline: Option<String> = "leaderElectRenewDeadline",
        /// In cluster mode, how often each replica tries to acquire or renew the Lease.
        #[arg(long, help_heading = "Cluster mode", display_order = 27)]
        pub leader_elect_retry_period: Option<String> = "leaderElectRetryPeriod",
    }
}

impl ClusterFlags {
    /// Cluster mode's settings (None: off); its Lease timing is checked either way.
    /// `apiservice_dir` says whether a manifest directory is given, which cluster mode refuses.
    pub fn settings(self, apiservice_dir: bool, cx: &mut Cx) -> Option<ClusterSettings> {
        let kubeconfig = cx.later_file("kubeconfig", self.kubeconfig);
        let on = kubeconfig.is_some() || self.cluster_mode;
        if on && apiservice_dir {
            cx.problem(
                "apiservice-dir",
                "cluster mode reads APIServices from the cluster; drop --apiservice-dir or --kubeconfig/--cluster-mode".into(),
            );
        }
        let d = LeaderElection::default();
        let leader_election = LeaderElection {
            lease_duration: cx.duration(
                "leader-elect-lease-duration",
                self.leader_elect_lease_duration,
                d.lease_duration,
            ),
            renew_deadline: cx.duration(
                "leader-elect-renew-deadline",
                self.leader_elect_renew_deadline,
                d.renew_deadline,
            ),
            retry_period: cx.duration(
                "leader-elect-retry-period",
                self.leader_elect_retry_period,
                d.retry_period,
            ),
        };
        cx.problems(leader_election.problems());
        on.then_some(ClusterSettings {
            kubeconfig,
            aggregator_routing: self.enable_aggregator_routing,
            leader_election,
        })
    }

    /// Each flag with a default, by argument id, and the default as a user would write it.
    pub fn defaults() -> Vec<(&'static str, String)> {
        let d = LeaderElection::default();
        vec![
            (
                "leader_elect_lease_duration",
                format_duration(d.lease_duration),
            ),
            (
                "leader_elect_renew_deadline",
                format_duration(d.renew_deadline),
            ),
            ("leader_elect_retry_period", format_duration(d.retry_period)),
        ]
    }
}
