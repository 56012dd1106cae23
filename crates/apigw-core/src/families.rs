//! Registering Prometheus families: every family of apigw (the gateway's request metrics, and
//! each concern's own: flow control, the proxy, availability) is made and registered through
//! these. Their names and labels are
//! constants, so making and registering them cannot fail.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

pub fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let m = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

pub fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let m = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

/// kube-apiserver's `apiserver_request_duration_seconds` buckets, with finer ones below 5 ms
/// (the gateway's own answers and fast backends): quantiles stay meaningful for both, and
/// SLO queries on kube's bucket bounds (`le="1"`, `le="5"`, `le="30"`) work unchanged.
pub const LATENCY_BUCKETS: [f64; 27] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0,
    3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// A latency histogram with [`LATENCY_BUCKETS`].
pub fn latency(r: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
    let m = HistogramVec::new(opts, labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}
