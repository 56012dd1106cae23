//! APF's metrics, with upstream's names and labels, kept cheap on the path of every request:
//! each schema's series are looked up once, when its configuration is put in force; the
//! executing seats are the executing requests (every request takes one seat), exported twice
//! from one gauge; a request dispatched without waiting is counted once, not observed: at a
//! scrape its zero wait is added to the wait histogram, and it to the dispatched requests.

use super::borrowing;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// The APF metrics.
#[derive(Clone)]
pub struct FlowMetrics {
    /// Dispatches after a wait, by level and schema: with `immediate`, the dispatched requests.
    dispatched_after_wait: IntCounterVec,
    pub(super) rejected: IntCounterVec,
    inqueue: IntGaugeVec,
    executing: IntGaugeVec,
    nominal: IntGaugeVec,
    lower: IntGaugeVec,
    upper: IntGaugeVec,
    pub(super) current: IntGaugeVec,
    pub(super) fair: prometheus::Gauge,
    wait: HistogramVec,
    /// Dispatches without a wait, by level and schema: zeros of `wait` not yet in it.
    immediate: IntCounterVec,
}

/// The series of one schema's requests.
pub(super) struct SchemaMetrics {
    pub inqueue: prometheus::IntGauge,
    /// Requests executing, and so seats.
    pub executing: prometheus::IntGauge,
    /// Waits that ended in execution, or in a time-out in the queue (as upstream counts them).
    pub waited: prometheus::Histogram,
    /// Requests dispatched after a wait, which `waited` observed.
    dispatched_after_wait: prometheus::IntCounter,
    /// Requests dispatched as they arrived: a wait of zero, for `waited`.
    immediate: prometheus::IntCounter,
    /// Waits that ended in refusal before any queue.
    pub refused: prometheus::Histogram,
}

impl SchemaMetrics {
    /// Counts a request dispatched after waiting `waited` seconds, or at once (None).
    pub fn dispatched(&self, waited: Option<f64>) {
        match waited {
            Some(seconds) => {
                self.waited.observe(seconds);
                self.dispatched_after_wait.inc();
            }
            None => self.immediate.inc(),
        }
    }
}

const PF: [&str; 2] = ["priority_level", "flow_schema"];
const EXECUTE: &str = "execute";

impl FlowMetrics {
    /// Registers them in `r`. The names and labels are constants: registering cannot fail.
    pub fn register(r: &Registry) -> Self {
        let counter =
            |name, help, labels: &[&str]| apigw_core::families::counter(r, name, help, labels);
        let gauge =
            |name, help, labels: &[&str]| apigw_core::families::gauge(r, name, help, labels);
        let wait = HistogramVec::new(
            HistogramOpts::new(
                "apiserver_flowcontrol_request_wait_duration_seconds",
                "Time requests waited in queue, by priority level, flow schema and whether they executed.",
            )
            .buckets(vec![0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0]),
            &["priority_level", "flow_schema", EXECUTE],
        )
        .expect("valid metric");
        let unexported = |name| IntCounterVec::new(Opts::new(name, "unexported"), &PF);
        let immediate = unexported("immediate").expect("valid metric");
        let dispatched_after_wait = unexported("dispatched_after_wait").expect("valid metric");
        let waits = Waits {
            wait: wait.clone(),
            immediate: immediate.clone(),
        };
        r.register(Box::new(waits)).expect("unique metric");
        let dispatched = Dispatched {
            desc: pf_desc(
                "apiserver_flowcontrol_dispatched_requests_total",
                "Requests released for execution, by priority level and flow schema.",
            ),
            immediate: immediate.clone(),
            after_wait: dispatched_after_wait.clone(),
        };
        r.register(Box::new(dispatched)).expect("unique metric");
        let fair = prometheus::Gauge::new(
            "apiserver_flowcontrol_seat_fair_frac",
            "The fair proportion of the levels' seat demands the last borrowing period gave them.",
        )
        .expect("valid metric");
        r.register(Box::new(fair.clone())).expect("unique metric");
        let executing = IntGaugeVec::new(
            Opts::new(
                "apiserver_flowcontrol_current_executing_requests",
                "Requests executing, by priority level and flow schema.",
            ),
            &PF,
        )
        .expect("valid metric");
        let seats = pf_desc(
            "apiserver_flowcontrol_current_executing_seats",
            "Seats held by executing requests, by priority level and flow schema.",
        );
        let both = Executing {
            requests: executing.clone(),
            seats,
        };
        r.register(Box::new(both)).expect("unique metric");
        let level = ["priority_level"];
        Self {
            dispatched_after_wait,
            rejected: counter(
                "apiserver_flowcontrol_rejected_requests_total",
                "Requests refused, by priority level, flow schema and reason.",
                &["priority_level", "flow_schema", "reason"],
            ),
            inqueue: gauge(
                "apiserver_flowcontrol_current_inqueue_requests",
                "Requests waiting in a queue, by priority level and flow schema.",
                &PF,
            ),
            executing,
            nominal: gauge(
                "apiserver_flowcontrol_nominal_limit_seats",
                "The nominal seats of each priority level.",
                &level,
            ),
            lower: gauge(
                "apiserver_flowcontrol_lower_limit_seats",
                "The fewest seats a priority level keeps while lending: nominal less lendable.",
                &level,
            ),
            upper: gauge(
                "apiserver_flowcontrol_upper_limit_seats",
                "The most seats a priority level may hold by borrowing.",
                &level,
            ),
            current: gauge(
                "apiserver_flowcontrol_current_limit_seats",
                "The seats of each priority level in force, as borrowing last set them.",
                &level,
            ),
            fair,
            wait,
            immediate,
        }
    }

    pub(super) fn bounds(&self, level: &str, b: &borrowing::Bounds) {
        self.nominal
            .with_label_values(&[level])
            .set(b.nominal as i64);
        self.lower.with_label_values(&[level]).set(b.lower as i64);
        self.upper.with_label_values(&[level]).set(b.upper as i64);
    }

    /// The series of the requests of `schema` on `level`.
    pub(super) fn schema(&self, level: &str, schema: &str) -> SchemaMetrics {
        let pf = [level, schema];
        SchemaMetrics {
            inqueue: self.inqueue.with_label_values(&pf),
            executing: self.executing.with_label_values(&pf),
            waited: self.wait.with_label_values(&[level, schema, "true"]),
            dispatched_after_wait: self.dispatched_after_wait.with_label_values(&pf),
            immediate: self.immediate.with_label_values(&pf),
            refused: self.wait.with_label_values(&[level, schema, "false"]),
        }
    }
}

/// `apiserver_flowcontrol_current_executing_requests`, and the same series as
/// `apiserver_flowcontrol_current_executing_seats`.
struct Executing {
    requests: IntGaugeVec,
    seats: Desc,
}

impl Collector for Executing {
    fn desc(&self) -> Vec<&Desc> {
        let mut descs = self.requests.desc();
        descs.push(&self.seats);
        descs
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let requests = self.requests.collect();
        let seats = renamed(requests.to_vec(), &self.seats);
        requests.into_iter().chain(seats).collect()
    }
}

/// `apiserver_flowcontrol_dispatched_requests_total`: the requests dispatched at once and
/// those dispatched after a wait (a sum of two counters, which never goes down).
struct Dispatched {
    desc: Desc,
    immediate: IntCounterVec,
    after_wait: IntCounterVec,
}

impl Collector for Dispatched {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let after_wait = self.after_wait.collect();
        let after_wait = counts_by_flow(&after_wait);
        let mut families = renamed(self.immediate.collect(), &self.desc);
        for m in families.iter_mut().flat_map(|f| f.mut_metric()) {
            let more = after_wait.get(&flow(m)).copied().unwrap_or(0);
            let mut counter = m.get_counter().clone();
            counter.set_value(counter.get_value() + more as f64);
            m.set_counter(counter);
        }
        families
    }
}

/// `apiserver_flowcontrol_request_wait_duration_seconds`: the waits observed, and in every
/// bucket of `execute="true"` the dispatches that did not wait.
struct Waits {
    wait: HistogramVec,
    immediate: IntCounterVec,
}

impl Collector for Waits {
    fn desc(&self) -> Vec<&Desc> {
        self.wait.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let immediate = self.immediate.collect();
        let zeros = counts_by_flow(&immediate);
        let mut families = self.wait.collect();
        for m in families.iter_mut().flat_map(|f| f.mut_metric()) {
            let n = match label(m, EXECUTE) {
                "true" => zeros.get(&flow(m)).copied().unwrap_or(0),
                _ => 0,
            };
            if n == 0 {
                continue;
            }
            let mut h = m.get_histogram().clone();
            let buckets = h.get_bucket().iter().cloned().map(|mut b| {
                b.set_cumulative_count(b.cumulative_count() + n);
                b
            });
            h.set_bucket(buckets.collect());
            h.set_sample_count(h.get_sample_count() + n);
            m.set_histogram(h);
        }
        families
    }
}

/// The description of a metric labelled by level and schema.
fn pf_desc(name: &str, help: &str) -> Desc {
    let labels = PF.map(String::from).to_vec();
    Desc::new(name.into(), help.into(), labels, Default::default()).expect("valid metric")
}

/// `families` under `desc`'s name and help.
fn renamed(mut families: Vec<MetricFamily>, desc: &Desc) -> Vec<MetricFamily> {
    for family in &mut families {
        family.set_name(desc.fq_name.clone());
        family.set_help(desc.help.clone());
    }
    families
}

/// The counts of the counters in `families`, by level and schema.
fn counts_by_flow(families: &[MetricFamily]) -> std::collections::HashMap<(&str, &str), u64> {
    let series = families.iter().flat_map(|family| family.get_metric());
    series
        .map(|m| (flow(m), m.get_counter().get_value() as u64))
        .collect()
}

/// The value of a series' label `name`.
fn label<'a>(m: &'a prometheus::proto::Metric, name: &str) -> &'a str {
    let pair = m.get_label().iter().find(|l| l.name() == name);
    pair.map_or("", |l| l.value())
}

/// A series' level and schema.
fn flow(m: &prometheus::proto::Metric) -> (&str, &str) {
    (label(m, PF[0]), label(m, PF[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(r: &Registry) -> String {
        let mut out = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &r.gather(), &mut out)
            .unwrap_or_default();
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn zero_waits_and_seats_are_exported_as_upstream_names_them() {
        let r = Registry::new();
        let m = FlowMetrics::register(&r);
        let s = m.schema("global-default", "global-default");
        s.dispatched(None);
        s.dispatched(None);
        s.dispatched(Some(0.3));
        s.refused.observe(0.0);
        s.executing.add(3);
        let text = scrape(&r);
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.starts_with(needle))
                .unwrap_or_else(|| panic!("{needle} in\n{text}"))
                .rsplit(' ')
                .next()
                .unwrap_or("")
                .to_string()
        };
        let wait = "apiserver_flowcontrol_request_wait_duration_seconds";
        let pf = r#"flow_schema="global-default",priority_level="global-default""#;
        assert_eq!(
            line(&format!(r#"{wait}_bucket{{execute="true",{pf},le="0"}}"#)),
            "2"
        );
        assert_eq!(
            line(&format!(r#"{wait}_bucket{{execute="true",{pf},le="0.2"}}"#)),
            "2"
        );
        assert_eq!(
            line(&format!(r#"{wait}_bucket{{execute="true",{pf},le="0.5"}}"#)),
            "3"
        );
        assert_eq!(
            line(&format!(r#"{wait}_count{{execute="true",{pf}}}"#)),
            "3"
        );
        assert_eq!(
            line(&format!(r#"{wait}_sum{{execute="true",{pf}}}"#)),
            "0.3"
        );
        assert_eq!(
            line(&format!(r#"{wait}_count{{execute="false",{pf}}}"#)),
            "1"
        );
        for name in ["requests", "seats"] {
            let series = format!("apiserver_flowcontrol_current_executing_{name}{{{pf}}}");
            assert_eq!(line(&series), "3", "{series}");
        }
        let dispatched = format!("apiserver_flowcontrol_dispatched_requests_total{{{pf}}}");
        assert_eq!(line(&dispatched), "3");
        assert!(
            !text.contains("immediate") && !text.contains("dispatched_after_wait"),
            "{text}"
        );
    }
}
