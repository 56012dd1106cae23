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

/// Every three-digit code, `100101102…999`, so a label is a slice rather than a string
/// formatted for every request.
static CODES: [u8; 2700] = {
    let mut out = [0u8; 2700];
    let mut i = 0;
    while i < 900 {
        let n = i + 100;
        out[i * 3] = b'0' + (n / 100) as u8;
        out[i * 3 + 1] = b'0' + (n / 10 % 10) as u8;
        out[i * 3 + 2] = b'0' + (n % 10) as u8;
        i += 1;
    }
    out
};

/// A status code as a label: its three digits (anything else, which `http` never makes, as
/// `0`).
pub fn code_label(code: u16) -> &'static str {
    let Some(at) = usize::from(code).checked_sub(100).filter(|i| *i < 900) else {
        return "0";
    };
    std::str::from_utf8(&CODES[at * 3..at * 3 + 3]).unwrap_or("0")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_code_label_is_its_three_digits() {
        for code in [0, 99, 100, 101, 200, 404, 429, 503, 999, 1000, u16::MAX] {
            let want = if (100..1000).contains(&code) {
                code.to_string()
            } else {
                "0".to_string()
            };
            assert_eq!(super::code_label(code), want, "{code}");
        }
    }
}
