//! Prometheus metrics: requests by verb, group, version, resource and code; latency; requests
//! in flight; backend failures by APIService; availability with kube-aggregator's metric names
//! (`aggregator_unavailable_apiservice`, `aggregator_unavailable_apiservice_total`); expiry of the
//! certificates in use. Rendered in the Prometheus text format at `/metrics`.

use prometheus::{
    exponential_buckets, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Every metric family of the gateway.
pub struct Metrics {
    registry: Registry,
    /// verb, group, version, resource, code
    pub requests: IntCounterVec,
    /// verb, group, version, resource
    pub latency: HistogramVec,
    /// kind: `long-running` or `short`
    in_flight: IntGaugeVec,
    /// Its two series, looked up once (on first use, so a scrape shows the same as before).
    in_flight_kinds: [std::sync::OnceLock<IntGauge>; 2],
    /// apiservice, kind (`unreachable`, `timeout`)
    pub backend_errors: IntCounterVec,
    /// name
    pub unavailable: IntGaugeVec,
    /// name, reason
    pub unavailable_total: IntCounterVec,
    /// cert (`serving`, `proxy-client`)
    pub cert_expiry: GaugeVec,
}

// The names and labels below are constants; registering them cannot fail.
fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let m = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let m = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

impl Default for Metrics {
    fn default() -> Self {
        let r = Registry::new();
        let requests = counter(
            &r,
            "apigw_requests_total",
            "Requests by verb, API group, version, resource and HTTP code.",
            &["verb", "group", "version", "resource", "code"],
        );
        let latency_opts = HistogramOpts::new(
            "apigw_request_duration_seconds",
            "Time to the response head, by verb, group, version and resource.",
        )
        .buckets(exponential_buckets(0.0005, 2.0, 18).expect("valid buckets"));
        let latency = HistogramVec::new(latency_opts, &["verb", "group", "version", "resource"])
            .expect("valid metric");
        r.register(Box::new(latency.clone()))
            .expect("unique metric");
        let in_flight = gauge(
            &r,
            "apigw_requests_in_flight",
            "Requests being served, long-running (watch, upgrade) or short.",
            &["kind"],
        );
        let backend_errors = counter(
            &r,
            "apigw_backend_errors_total",
            "Failures to reach or verify a backend, by APIService and kind.",
            &["apiservice", "kind"],
        );
        let unavailable = gauge(
            &r,
            "aggregator_unavailable_apiservice",
            "Gauge of APIServices which are marked as unavailable broken down by APIService name.",
            &["name"],
        );
        let unavailable_total = counter(
            &r,
            "aggregator_unavailable_apiservice_total",
            "Counter of APIServices which are marked as unavailable broken down by APIService name and reason.",
            &["name", "reason"],
        );
        let cert_expiry = GaugeVec::new(
            Opts::new(
                "apigw_certificate_expiry_timestamp_seconds",
                "Not-after time of the certificates in use.",
            ),
            &["cert"],
        )
        .expect("valid metric");
        r.register(Box::new(cert_expiry.clone()))
            .expect("unique metric");
        Self {
            registry: r,
            requests,
            latency,
            in_flight,
            in_flight_kinds: Default::default(),
            backend_errors,
            unavailable,
            unavailable_total,
            cert_expiry,
        }
    }
}

impl Metrics {
    /// The in-flight gauge of long-running or of short requests.
    pub fn in_flight(&self, long_running: bool) -> &IntGauge {
        let kind = if long_running {
            "long-running"
        } else {
            "short"
        };
        self.in_flight_kinds[usize::from(long_running)]
            .get_or_init(|| self.in_flight.with_label_values(&[kind]))
    }

    /// The text exposition of every family.
    pub fn render(&self) -> String {
        TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|e| format!("# encoding metrics failed: {e}\n"))
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

    /// Forgets an APIService that left the registry.
    pub fn forget(&self, name: &str) {
        let _ = self.unavailable.remove_label_values(&[name]);
    }
}

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_upstream_names() {
        let m = Metrics::default();
        m.set_available("v1.a.example.com", false, Some("FailedDiscoveryCheck"));
        m.requests
            .with_label_values(&["get", "g", "v1", "things", "200"])
            .inc();
        let text = m.render();
        assert!(
            text.contains("aggregator_unavailable_apiservice{name=\"v1.a.example.com\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE aggregator_unavailable_apiservice_total counter"),
            "{text}"
        );
        assert!(
            text.contains("aggregator_unavailable_apiservice_total{name=\"v1.a.example.com\",reason=\"FailedDiscoveryCheck\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("apigw_requests_total{code=\"200\",group=\"g\",resource=\"things\",verb=\"get\",version=\"v1\"} 1"),
            "{text}"
        );
        m.forget("v1.a.example.com");
        assert!(!m.render().contains("aggregator_unavailable_apiservice{"));
    }
}
