//! Prometheus metrics, rendered in the Prometheus text format at `/metrics` (docs/metrics.md
//! lists them all):
//!
//! - requests and their latency with the labels kube-apiserver gives `apiserver_request_total`
//!   and `apiserver_request_duration_seconds` (`verb` as [`verb`] reports it, `group`,
//!   `version`, `resource`, `subresource`, `scope`, and `code` on the counter), so kube's
//!   dashboards and recording rules read them with the metric name changed; the labels taken
//!   from the path are bounded ([`RequestLabels::new`]): a request that was not authenticated,
//!   or that names a group version nothing serves, is counted without them;
//! - requests in flight; backend failures and backend latency (time to the backend's response
//!   head) by APIService;
//! - availability with kube-aggregator's names (`aggregator_unavailable_apiservice`,
//!   `aggregator_unavailable_apiservice_total`); expiry of the certificates in use;
//! - authentication attempts by authenticator and result (counted by `authn`);
//! - the standard `process_*` metrics (Linux), and the live tasks of the gateway's tokio
//!   runtimes (read at each scrape; the soak watches it for leaks).

use apigw_core::families::{counter, gauge, latency};
use apigw_request::Attributes;
use http::{HeaderMap, Method};
use prometheus::{
    GaugeVec, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// The labels of the request counter (the histogram has all but `code`).
const REQUEST_LABELS: [&str; 7] = [
    "verb",
    "group",
    "version",
    "resource",
    "subresource",
    "scope",
    "code",
];

/// Every metric family of the gateway.
pub struct Metrics {
    registry: Registry,
    /// [`REQUEST_LABELS`]
    requests: IntCounterVec,
    /// [`REQUEST_LABELS`] but `code`
    latency: HistogramVec,
    /// kind: `long-running` or `short`
    in_flight: IntGaugeVec,
    /// Its two series, looked up once (on first use, so a scrape shows the same as before).
    in_flight_kinds: [std::sync::OnceLock<IntGauge>; 2],
    /// The proxy's: backend failures, latency and retries by APIService.
    pub backends: apigw_proxy::BackendMetrics,
    /// The availability controller's, with kube-aggregator's names.
    pub availability: apigw_availability::AvailabilityMetrics,
    /// cert (`serving`, `proxy-client`)
    pub cert_expiry: GaugeVec,
    /// authenticator, result
    pub authn_attempts: IntCounterVec,
    /// API Priority and Fairness, with upstream's names.
    pub flowcontrol: apigw_flowcontrol::FlowMetrics,
    /// Tasks alive in the gateway's runtimes (the shared one and the workers').
    runtime_tasks: IntGauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let r = Registry::new();
        let requests = counter(
            &r,
            "apigw_requests_total",
            "Requests by verb, API group, version, resource, subresource, scope and HTTP code, \
             labelled as kube-apiserver's apiserver_request_total.",
            &REQUEST_LABELS,
        );
        let latency = latency(
            &r,
            "apigw_request_duration_seconds",
            "Time to the response head by verb, API group, version, resource, subresource and \
             scope, labelled as kube-apiserver's apiserver_request_duration_seconds.",
            &REQUEST_LABELS[..6],
        );
        let in_flight = gauge(
            &r,
            "apigw_requests_in_flight",
            "Requests being served, long-running (watch, upgrade) or short.",
            &["kind"],
        );
        let backends = apigw_proxy::BackendMetrics::register(&r);
        let availability = apigw_availability::AvailabilityMetrics::register(&r, backends.clone());
        let flowcontrol = apigw_flowcontrol::FlowMetrics::register(&r);
        let authn_attempts = counter(
            &r,
            "apigw_authentication_attempts_total",
            "Answers of each authenticator, by authenticator and result (success or why not).",
            &["authenticator", "result"],
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
        // process_cpu_seconds_total, process_open_fds, process_max_fds,
        // process_virtual_memory_bytes, process_resident_memory_bytes,
        // process_start_time_seconds, process_threads: read from /proc at each scrape.
        #[cfg(target_os = "linux")]
        if let Err(e) = r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        )) {
            tracing::warn!(error = %e, "process metrics are not available");
        }
        let runtime_tasks = IntGauge::new(
            "apigw_runtime_alive_tasks",
            "Tasks alive in the tokio runtime (connections, requests, watches, background loops).",
        )
        .expect("valid metric");
        r.register(Box::new(runtime_tasks.clone()))
            .expect("unique metric");
        Self {
            registry: r,
            requests,
            latency,
            in_flight,
            in_flight_kinds: Default::default(),
            backends,
            availability,
            cert_expiry,
            authn_attempts,
            flowcontrol,
            runtime_tasks,
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

    /// Counts a request answered `code`, and observes its time to the response head when it
    /// had one (`elapsed`; None: the client went away first).
    pub fn request(&self, labels: &RequestLabels<'_>, code: u16, elapsed: Option<f64>) {
        let l = labels.values();
        // Its three digits from `http`'s table, not formatted per request (any code from 100
        // to 999 is a `StatusCode`, 499 included; anything else, never made here, is `0`).
        let status = http::StatusCode::from_u16(code).ok();
        let code = status.as_ref().map_or("0", http::StatusCode::as_str);
        self.requests
            .with_label_values(&[l[0], l[1], l[2], l[3], l[4], l[5], code])
            .inc();
        if let Some(seconds) = elapsed {
            self.latency.with_label_values(&l).observe(seconds);
        }
    }

    /// The text exposition of every family.
    pub fn render(&self) -> String {
        let tasks = apigw_core::server::workers::alive_tasks();
        self.runtime_tasks
            .set(i64::try_from(tasks).unwrap_or(i64::MAX));
        TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|e| format!("# encoding metrics failed: {e}\n"))
    }
}

/// The `verb` label of a request, as kube-apiserver reports it in `apiserver_request_total`
/// (k8s.io/apiserver's metrics `CanonicalVerb` and `CleanVerb`): the upper-case HTTP method,
/// except that a read (GET or HEAD) of a collection (scope `namespace` or `cluster`) is `LIST`
/// and a watch `WATCH`; a PATCH with the server-side apply content type is `APPLY`; a resource
/// request for a connect subresource (`log`, `exec`, `portforward`, `attach`, `proxy`) is
/// `CONNECT` (whatever the method). So a create is `POST`, an update `PUT`, a delete of one object or of a collection
/// `DELETE`, as kube's dashboards expect (`verb=~"POST|PUT|PATCH|DELETE"` for writes). Any other
/// method is `other`, which keeps the label bounded.
pub fn verb(method: &Method, headers: &HeaderMap, attrs: &Attributes) -> &'static str {
    let verb = match *method {
        Method::GET | Method::HEAD => {
            if attrs.verb == "watch" {
                "WATCH"
            } else if matches!(scope(attrs), "namespace" | "cluster") {
                "LIST"
            } else {
                "GET"
            }
        }
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => {
            // The media type without its parameters, as kube-apiserver reads it.
            let apply = headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(';').next())
                .is_some_and(|t| {
                    t.trim()
                        .eq_ignore_ascii_case("application/apply-patch+yaml")
                });
            if apply {
                "APPLY"
            } else {
                "PATCH"
            }
        }
        Method::CONNECT => "CONNECT",
        _ => "other",
    };
    let connect = attrs.resource_request
        && matches!(
            attrs.subresource.as_str(),
            "log" | "exec" | "portforward" | "attach" | "proxy"
        );
    if connect {
        "CONNECT"
    } else {
        verb
    }
}

/// The `scope` label, as k8s.io/apiserver's metrics `CleanScope`: `resource` for a request
/// naming one object (and for a create), `namespace` for a namespaced collection, `cluster` for
/// a cluster-wide one, empty for a non-resource request.
pub fn scope(attrs: &Attributes) -> &'static str {
    if !attrs.resource_request {
        ""
    } else if !attrs.name.is_empty() || attrs.verb == "create" {
        "resource"
    } else if !attrs.namespace.is_empty() {
        "namespace"
    } else {
        "cluster"
    }
}

/// The labels one request is counted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLabels<'a> {
    pub verb: &'static str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub scope: &'static str,
}

/// Whether a request's path may name its labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The request's group version is one the gateway serves (an APIService in the registry,
    /// one of its own, or one the delegate lists).
    pub served: bool,
    /// The request was authenticated.
    pub authenticated: bool,
}

impl<'a> RequestLabels<'a> {
    /// The labels of a request with attributes `attrs` and metric verb `verb`, answered
    /// `code`. Only the verb (a fixed set) is kept for a request that was not authenticated:
    /// anyone can send any path. The group, version and scope come from the path of an
    /// authenticated resource request to a group version the gateway serves; the resource and
    /// subresource too unless the answer was 404 (the backend knows no such resource). So
    /// every label value comes from a fixed set, the registry, or a backend's resources.
    pub fn new(verb: &'static str, attrs: &'a Attributes, bound: Bound, code: u16) -> Self {
        let mut labels = Self {
            verb,
            group: "",
            version: "",
            resource: "",
            subresource: "",
            scope: "",
        };
        if bound.authenticated && bound.served && attrs.resource_request {
            labels.group = &attrs.group;
            labels.version = &attrs.version;
            labels.scope = scope(attrs);
            if code != 404 {
                labels.resource = &attrs.resource;
                labels.subresource = &attrs.subresource;
            }
        }
        labels
    }

    fn values(&self) -> [&str; 6] {
        [
            self.verb,
            self.group,
            self.version,
            self.resource,
            self.subresource,
            self.scope,
        ]
    }
}

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: &Method, target: &str) -> Attributes {
        let (path, query) = target
            .split_once('?')
            .map_or((target, None), |(p, q)| (p, Some(q)));
        Attributes::from_request(method, path, query)
    }

    fn verb_of(method: Method, target: &str, content_type: Option<&str>) -> &'static str {
        let mut headers = HeaderMap::new();
        if let Some(ct) = content_type {
            headers.insert(http::header::CONTENT_TYPE, ct.parse().unwrap());
        }
        verb(&method, &headers, &attrs(&method, target))
    }

    #[test]
    fn verbs_and_scopes_as_kube_apiserver_reports_them() {
        let ns = "/apis/g/v1/namespaces/n/things";
        // (method, target, content type, verb, scope)
        let cases: &[(Method, &str, Option<&str>, &str, &str)] = &[
            (
                Method::GET,
                "/apis/g/v1/namespaces/n/things/t",
                None,
                "GET",
                "resource",
            ),
            (
                Method::HEAD,
                "/apis/g/v1/namespaces/n/things/t",
                None,
                "GET",
                "resource",
            ),
            (Method::GET, ns, None, "LIST", "namespace"),
            (Method::GET, "/apis/g/v1/things", None, "LIST", "cluster"),
            (Method::GET, "/api/v1/pods", None, "LIST", "cluster"),
            (
                Method::GET,
                "/apis/g/v1/things?watch=true",
                None,
                "WATCH",
                "cluster",
            ),
            (
                Method::GET,
                "/apis/g/v1/watch/namespaces/n/things",
                None,
                "WATCH",
                "namespace",
            ),
            (
                Method::GET,
                "/apis/g/v1/watch/namespaces/n/things/t",
                None,
                "WATCH",
                "resource",
            ),
            (Method::POST, ns, None, "POST", "resource"),
            (Method::POST, "/apis/g/v1/things", None, "POST", "resource"),
            (
                Method::PUT,
                "/apis/g/v1/namespaces/n/things/t",
                None,
                "PUT",
                "resource",
            ),
            (
                Method::PUT,
                "/apis/g/v1/namespaces/n/things/t/status",
                None,
                "PUT",
                "resource",
            ),
            (
                Method::PATCH,
                "/apis/g/v1/things/t",
                Some("application/merge-patch+json"),
                "PATCH",
                "resource",
            ),
            (
                Method::PATCH,
                "/apis/g/v1/things/t",
                Some("application/apply-patch+yaml"),
                "APPLY",
                "resource",
            ),
            (
                Method::PATCH,
                "/apis/g/v1/things/t",
                Some("Application/Apply-Patch+YAML; charset=utf-8"),
                "APPLY",
                "resource",
            ),
            (
                Method::PATCH,
                "/apis/g/v1/things/t",
                Some("application/merge-patch+json"),
                "PATCH",
                "resource",
            ),
            (
                Method::DELETE,
                "/apis/g/v1/namespaces/n/things/t",
                None,
                "DELETE",
                "resource",
            ),
            (Method::DELETE, ns, None, "DELETE", "namespace"),
            (
                Method::POST,
                "/api/v1/namespaces/n/pods/p/exec",
                None,
                "CONNECT",
                "resource",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/n/pods/p/log",
                None,
                "CONNECT",
                "resource",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/n/services/s/proxy",
                None,
                "CONNECT",
                "resource",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/n/pods/p/status",
                None,
                "GET",
                "resource",
            ),
            (Method::OPTIONS, ns, None, "other", "namespace"),
            (
                Method::OPTIONS,
                "/api/v1/namespaces/n/pods/p/exec",
                None,
                "CONNECT",
                "resource",
            ),
            (Method::GET, "/apis/g/v1", None, "GET", ""),
            (Method::GET, "/healthz", None, "GET", ""),
            (Method::POST, "/some/where", None, "POST", ""),
            (Method::OPTIONS, "/some/where", None, "other", ""),
        ];
        for (method, target, ct, want_verb, want_scope) in cases {
            assert_eq!(
                verb_of(method.clone(), target, *ct),
                *want_verb,
                "{method} {target} {ct:?}"
            );
            assert_eq!(
                scope(&attrs(method, target)),
                *want_scope,
                "{method} {target}"
            );
        }
    }

    #[test]
    fn path_labels_only_when_bounded() {
        let a = attrs(&Method::GET, "/apis/g/v1/namespaces/n/things/t/status");
        let served = Bound {
            served: true,
            authenticated: true,
        };
        let l = RequestLabels::new("GET", &a, served, 200);
        assert_eq!(
            l.values(),
            ["GET", "g", "v1", "things", "status", "resource"]
        );
        // A 404: the backend knows no such resource.
        let l = RequestLabels::new("GET", &a, served, 404);
        assert_eq!(l.values(), ["GET", "g", "v1", "", "", "resource"]);
        // Not authenticated, or a group version nothing serves: the verb alone.
        for bound in [
            Bound {
                served: true,
                authenticated: false,
            },
            Bound {
                served: false,
                authenticated: true,
            },
        ] {
            let l = RequestLabels::new("GET", &a, bound, 403);
            assert_eq!(l.values(), ["GET", "", "", "", "", ""], "{bound:?}");
        }
        // A non-resource request names nothing from its path.
        let a = attrs(&Method::GET, "/apis/g/v1");
        let l = RequestLabels::new("GET", &a, served, 200);
        assert_eq!(l.values(), ["GET", "", "", "", "", ""]);
    }

    #[test]
    fn renders_upstream_names() {
        let m = Metrics::default();
        m.availability
            .set_available("v1.a.example.com", false, Some("FailedDiscoveryCheck"));
        let a = attrs(&Method::GET, "/apis/g/v1/namespaces/n/things");
        let bound = Bound {
            served: true,
            authenticated: true,
        };
        m.request(&RequestLabels::new("LIST", &a, bound, 200), 200, Some(0.01));
        m.backends
            .backend("v1.a.example.com", http::StatusCode::OK, 0.002);
        m.request(&RequestLabels::new("GET", &a, bound, 499), 499, None);
        m.request(&RequestLabels::new("GET", &a, bound, 1000), 1000, None);
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
            text.contains("apigw_requests_total{code=\"200\",group=\"g\",resource=\"things\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 1"),
            "{text}"
        );
        // A code as its three digits, nginx's 499 among them; what is not one, as 0.
        for code in ["499", "0"] {
            let line = format!("apigw_requests_total{{code=\"{code}\",group=\"g\",resource=\"things\",scope=\"namespace\",subresource=\"\",verb=\"GET\",version=\"v1\"}} 1");
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(
            text.contains("apigw_request_duration_seconds_bucket{group=\"g\",resource=\"things\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\",le=\"1\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("apigw_backend_request_duration_seconds_count{apiservice=\"v1.a.example.com\",code=\"200\"} 1"),
            "{text}"
        );
        #[cfg(target_os = "linux")]
        for family in [
            "process_cpu_seconds_total",
            "process_open_fds",
            "process_max_fds",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_start_time_seconds",
        ] {
            assert!(
                text.contains(&format!("\n{family} ")),
                "no {family}:\n{text}"
            );
        }
        m.availability.forget("v1.a.example.com");
        let text = m.render();
        assert!(
            !text.contains("aggregator_unavailable_apiservice{"),
            "{text}"
        );
        assert!(
            !text.contains("apigw_backend_request_duration_seconds_count{"),
            "{text}"
        );
    }
}
