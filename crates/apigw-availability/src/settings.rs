//! Validation of the availability controller's [`Settings`] (their defaults are beside the
//! type in `mod.rs`).

use super::Settings;

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
