//! Registering Prometheus families: every family of the gateway (`metrics`, and flow control's
//! in `flowcontrol::metrics`) is made and registered through these. Their names and labels are
//! constants, so making and registering them cannot fail.

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

pub(crate) fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let m = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

pub(crate) fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let m = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}
