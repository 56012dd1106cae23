//! The availability controller's metric families, with kube-aggregator's names
//! (`aggregator_unavailable_apiservice`, `aggregator_unavailable_apiservice_total`).

use apigw_core::families::{counter, gauge};
use prometheus::{IntCounterVec, IntGaugeVec, Registry};

/// The availability families (handles: cloning shares them).
#[derive(Clone)]
pub struct AvailabilityMetrics {
    /// name
    pub unavailable: IntGaugeVec,
    /// name, reason
    pub unavailable_total: IntCounterVec,
    /// The proxy's, whose series of an APIService go when it leaves.
    backends: apigw_proxy::BackendMetrics,
}

impl AvailabilityMetrics {
    /// Makes the families and registers them in `r`.
    pub fn register(r: &Registry, backends: apigw_proxy::BackendMetrics) -> Self {
        let unavailable = gauge(
            r,
            "aggregator_unavailable_apiservice",
            "Gauge of APIServices which are marked as unavailable broken down by APIService name.",
            &["name"],
        );
        let unavailable_total = counter(
            r,
            "aggregator_unavailable_apiservice_total",
            "Counter of APIServices which are marked as unavailable broken down by APIService name and reason.",
            &["name", "reason"],
        );
        Self {
            unavailable,
            unavailable_total,
            backends,
        }
    }

    /// Records an APIService's availability; `newly_unavailable` carries the reason when it
    /// just became unavailable.
    pub fn set_available(&self, name: &str, available: bool, newly_unavailable: Option<&str>) {
        self.unavailable
            .with_label_values(&[name])
            .set(i64::from(!available));
        if let Some(reason) = newly_unavailable {
            self.unavailable_total
                .with_label_values(&[name, reason])
                .inc();
        }
    }

    /// Forgets an APIService that left the registry: its availability gauge and its backend
    /// latency series.
    pub fn forget(&self, name: &str) {
        let _ = self.unavailable.remove_label_values(&[name]);
        self.backends.forget(name);
    }
}
