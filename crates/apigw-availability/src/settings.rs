//! The availability controller's `serve` flags and file keys, read into [`Settings`] and
//! checked (their defaults are beside the type in `lib.rs`).

use super::Settings;
use apigw_core::duration::format_duration;
use apigw_core::settings::Cx;

apigw_core::section! {
    /// [`Settings`].
    pub struct AvailabilityFlags {
        /// How often the availability controller checks each APIService.
        #[arg(long, help_heading = "Backends", display_order = 32)]
        pub availability_check_interval: Option<String> = "availabilityCheckInterval",
        /// How long one availability check may take.
        #[arg(long, help_heading = "Backends", display_order = 33)]
        pub availability_check_timeout: Option<String> = "availabilityCheckTimeout",
    }
}

impl AvailabilityFlags {
    pub fn settings(self, cx: &mut Cx) -> Settings {
        let d = Settings::default();
        let settings = Settings {
            interval: cx.duration(
                "availability-check-interval",
                self.availability_check_interval,
                d.interval,
            ),
            timeout: cx.duration(
                "availability-check-timeout",
                self.availability_check_timeout,
                d.timeout,
            ),
        };
        cx.problems(settings.problems());
        settings
    }

    /// Each flag with a default, by argument id, and the default as a user would write it.
    pub fn defaults() -> Vec<(&'static str, String)> {
        let d = Settings::default();
        vec![
            ("availability_check_interval", format_duration(d.interval)),
            ("availability_check_timeout", format_duration(d.timeout)),
        ]
    }
}

impl Settings {
    /// What is out of range, by flag name.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.interval.is_zero() {
            out.push(("availability-check-interval", "must be more than 0".into()));
        }
        out
    }
}
