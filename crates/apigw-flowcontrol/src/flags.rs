//! API Priority and Fairness's `serve` flags and file keys, read into [`FlowControlSettings`].

use crate::FlowControlSettings;
use apigw_core::settings::Cx;
use std::path::PathBuf;

/// kube-apiserver's default `--max-mutating-requests-inflight`.
pub const MAX_MUTATING_INFLIGHT: usize = 200;

apigw_core::section! {
    /// [`FlowControlSettings`].
    pub struct FlowControlFlags {
        /// With API Priority and Fairness, the priority levels share this plus
        /// --max-requests-inflight seats, as kube-apiserver's.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 44)]
        pub max_mutating_requests_inflight: Option<usize> = "maxMutatingRequestsInflight",
        /// API Priority and Fairness: classify requests by FlowSchema into priority levels
        /// with fair queues, as kube-apiserver.
        #[arg(
            long,
            help_heading = "Limits and timeouts",
            num_args = 0..=1,
            default_missing_value = "true",
            display_order = 41
        )]
        pub enable_priority_and_fairness: Option<bool> = "enablePriorityAndFairness",
        /// With API Priority and Fairness, each APIService's share of a priority level's
        /// seats, in percent of the level's nominal seats: past it, its requests borrow idle
        /// seats only while no other party's request waits and half of what the share leaves
        /// to the others stays free, so a stalled backend cannot take them all (1 to 100; 100:
        /// no share).
        #[arg(long, help_heading = "Limits and timeouts", display_order = 43)]
        pub max_apiservice_seats_percent: Option<u32> = "maxApiserviceSeatsPercent",
        /// With API Priority and Fairness, FlowSchemas and PriorityLevelConfigurations (v1
        /// objects, a file or a directory) laid over the built-in ones by name; reloaded when
        /// they change.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 42)]
        pub flowcontrol_config: Option<PathBuf> = "flowcontrolConfig",
    }
}

impl FlowControlFlags {
    /// The settings; the seats are the two in-flight limits, `read_only` being
    /// `--max-requests-inflight` as the limits resolved it.
    pub fn settings(self, read_only: usize, cx: &mut Cx) -> FlowControlSettings {
        const PERCENT: &str = "max-apiservice-seats-percent";
        const CONFIG: &str = "flowcontrol-config";
        let d = FlowControlSettings::default();
        let percent = match self.max_apiservice_seats_percent {
            None => d.apiservice_percent,
            Some(p @ 1..=100) => p,
            Some(p) => {
                cx.problem(PERCENT, format!("{p}: must be from 1 to 100"));
                d.apiservice_percent
            }
        };
        let mutating = self
            .max_mutating_requests_inflight
            .unwrap_or(MAX_MUTATING_INFLIGHT);
        let config = cx.path(CONFIG, self.flowcontrol_config);
        if let Some(path) = &config {
            if !path.exists() {
                cx.problem(
                    CONFIG,
                    format!("{}: no such file or directory", path.display()),
                );
            } else if let Err(problems) = crate::file_configuration(path) {
                for problem in problems {
                    cx.problem(CONFIG, problem);
                }
            }
        }
        FlowControlSettings {
            config,
            enabled: self.enable_priority_and_fairness.unwrap_or(d.enabled),
            total_seats: read_only.saturating_add(mutating),
            apiservice_percent: percent,
        }
    }

    /// Each flag with a default, by argument id, and the default as a user would write it.
    pub fn defaults() -> Vec<(&'static str, String)> {
        let d = FlowControlSettings::default();
        vec![
            (
                "max_mutating_requests_inflight",
                MAX_MUTATING_INFLIGHT.to_string(),
            ),
            ("enable_priority_and_fairness", d.enabled.to_string()),
            (
                "max_apiservice_seats_percent",
                d.apiservice_percent.to_string(),
            ),
        ]
    }
}
