//! The proxy's metric families: failures to reach or verify a backend, backends' time to their
//! response head, and further tries of a request, by APIService. Registered in the gateway's
//! registry; the availability controller forgets an APIService's series when it leaves.

use apigw_core::families::{counter, latency};
use prometheus::{HistogramVec, IntCounterVec, Registry};

/// The proxy's families (handles: cloning shares them).
#[derive(Clone)]
pub struct BackendMetrics {
    /// apiservice, kind (`unreachable`, `timeout`)
    pub errors: IntCounterVec,
    /// apiservice, code
    latency: HistogramVec,
    /// apiservice, reason (`unsent`, `replayed`)
    retries: IntCounterVec,
}

impl BackendMetrics {
    /// Makes the families and registers them in `r`.
    pub fn register(r: &Registry) -> Self {
        let errors = counter(
            r,
            "apigw_backend_errors_total",
            "Failures to reach or verify a backend, by APIService and kind.",
            &["apiservice", "kind"],
        );
        let retries = counter(
            r,
            "apigw_backend_retries_total",
            "Further tries of requests to a backend, by APIService and reason: unsent (another \
             endpoint or connection, nothing of the request having been sent) or replayed (an \
             idempotent request sent again after its connection ended before any answer).",
            &["apiservice", "reason"],
        );
        let latency = latency(
            r,
            "apigw_backend_request_duration_seconds",
            "Time from sending a request to a backend to its response head, by APIService and \
             the backend's HTTP code.",
            &["apiservice", "code"],
        );
        Self {
            errors,
            latency,
            retries,
        }
    }

    /// Observes a backend's time to its response head.
    pub fn backend(&self, apiservice: &str, status: http::StatusCode, seconds: f64) {
        self.latency
            .with_label_values(&[apiservice, status.as_str()])
            .observe(seconds);
    }

    /// Counts the further tries one request to `apiservice` took: `unsent` on another endpoint
    /// or connection, `replayed` after no answer.
    pub fn retried(&self, apiservice: &str, unsent: u32, replayed: u32) {
        for (reason, n) in [("unsent", unsent), ("replayed", replayed)] {
            if n > 0 {
                self.retries
                    .with_label_values(&[apiservice, reason])
                    .inc_by(u64::from(n));
            }
        }
    }

    /// Forgets the latency series of an APIService that left the registry.
    pub fn forget(&self, name: &str) {
        let family = prometheus::core::Collector::collect(&self.latency);
        for metric in family.iter().flat_map(|f| f.get_metric()) {
            let label = |key: &str| {
                metric
                    .get_label()
                    .iter()
                    .find(|l| l.name() == key)
                    .map(|l| l.value().to_string())
            };
            if label("apiservice").as_deref() == Some(name) {
                if let Some(code) = label("code") {
                    let _ = self.latency.remove_label_values(&[name, &code]);
                }
            }
        }
    }
}
