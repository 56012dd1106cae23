//! Registering Prometheus families: every family of apigw (the gateway's request metrics, and
//! each concern's own: flow control, the proxy, availability) is made and registered through
//! these. Their names and labels are
//! constants, so making and registering them cannot fail.

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

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
