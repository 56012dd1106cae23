//! The gateway's `/metrics` checked by Prometheus's own linter and parser, `promtool check
//! metrics` (Debian's `prometheus` package): after proxied requests that answered 200, 404,
//! 401, 403 and 503, a backend that cannot be reached, an APIService that went unavailable and
//! an open watch, so that every metric family has samples. Scraped on the main port as an
//! authorized user and on the plain-HTTP `--metrics-bind-address` listener. Anything promtool
//! prints fails the test, warnings included.
//!
//! The request series carry kube-apiserver's labels (`verb` as `apiserver_request_total`
//! reports it, `group`, `version`, `resource`, `subresource`, `scope`, `code`): a GET, a LIST,
//! a WATCH, a namespaced create (`POST`, scope `resource`), a server-side apply and a forbidden
//! LIST each make the exact label set expected; unauthenticated requests and requests for a
//! group nothing serves make series without path-derived values, however odd their path.

use crate::support::exposition::samples;
use crate::support::{eventually, Echo, World};
use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Every family the gateway registers (src/metrics.rs); each must be present with samples.
const FAMILIES: [&str; 14] = [
    "apigw_requests_total",
    "apigw_request_duration_seconds",
    "apigw_requests_in_flight",
    "apigw_backend_errors_total",
    "apigw_backend_request_duration_seconds",
    "aggregator_unavailable_apiservice",
    "aggregator_unavailable_apiservice_total",
    "apigw_certificate_expiry_timestamp_seconds",
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_start_time_seconds",
];

/// A marker in every path of the requests whose path must not reach a label.
const ODD: &str = "zq9odd";

/// The label set `verb, group, version, resource, subresource, scope[, code]`.
fn label_set(values: &[&str]) -> BTreeMap<String, String> {
    [
        "verb",
        "group",
        "version",
        "resource",
        "subresource",
        "scope",
        "code",
    ]
    .iter()
    .zip(values)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Asserts the request metrics of `text`: the exact label sets the requests of the test make,
/// with their latency, and no value taken from an odd path.
fn assert_request_labels(text: &str) {
    let requests = samples(text, "apigw_requests_total");
    let a = "a.example.com";
    let want: &[(&str, &[&str])] = &[
        ("a GET", &["GET", a, "v1", "things", "", "resource", "200"]),
        (
            "a LIST",
            &["LIST", a, "v1", "things", "", "namespace", "200"],
        ),
        (
            "a WATCH",
            &["WATCH", a, "v1", "things", "", "namespace", "200"],
        ),
        (
            "a namespaced create",
            &["POST", a, "v1", "things", "", "resource", "200"],
        ),
        (
            "a server-side apply",
            &["APPLY", a, "v1", "things", "status", "resource", "200"],
        ),
        (
            "a cluster-wide DELETE of a collection",
            &["DELETE", a, "v1", "things", "", "cluster", "200"],
        ),
        (
            "a forbidden LIST",
            &["LIST", a, "v1", "things", "", "namespace", "403"],
        ),
        (
            "unauthenticated LISTs",
            &["LIST", "", "", "", "", "", "401"],
        ),
        ("unauthenticated GETs", &["GET", "", "", "", "", "", "401"]),
        (
            "a LIST of a group nothing serves",
            &["LIST", "", "", "", "", "", "404"],
        ),
    ];
    for (what, values) in want {
        let labels = label_set(values);
        assert!(
            requests.iter().any(|(l, v)| *l == labels && *v >= 1.0),
            "{what}: no apigw_requests_total{labels:?} in:\n{}",
            requests
                .iter()
                .map(|(l, v)| format!("{l:?} {v}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let latency = samples(text, "apigw_request_duration_seconds_count");
    let get = label_set(&["GET", a, "v1", "things", "", "resource"]);
    assert!(
        latency.iter().any(|(l, v)| *l == get && *v >= 1.0),
        "no latency of the GET {get:?}:\n{text}"
    );
    if let Some(line) = text.lines().find(|l| l.contains(ODD)) {
        panic!("a label value taken from an odd path: {line}");
    }
    let backend = samples(text, "apigw_backend_request_duration_seconds_count");
    let answered: BTreeMap<String, String> = [("apiservice", "v1.a.example.com"), ("code", "200")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert!(
        backend.iter().any(|(l, v)| *l == answered && *v >= 5.0),
        "no backend latency of v1.a.example.com answering 200 (at least 5 requests):\n{text}"
    );
    let open = samples(text, "process_open_fds");
    assert!(
        open.first().is_some_and(|(_, v)| *v > 0.0),
        "process_open_fds is not positive:\n{text}"
    );
}

const POLICY: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: everything}
rules:
- {apiGroups: ["*"], resources: ["*"], verbs: ["*"]}
- {nonResourceURLs: ["*"], verbs: ["*"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-everything}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: everything}
subjects: [{kind: User, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: thing-reader, namespace: x}
rules:
- {apiGroups: [a.example.com], resources: [things], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-reads, namespace: x}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: thing-reader}
subjects: [{kind: User, name: bob}]
"#;

/// Runs `promtool check metrics` on `text`; panics with everything it printed unless it
/// exited 0 and printed nothing.
fn promtool_check(text: &str, scraped_from: &str) {
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => panic!(
            "promtool is required for this test and could not be run ({e}); it comes with \
             Debian's `prometheus` package: apt-get install -y prometheus"
        ),
    };
    let mut stdin = child.stdin.take().expect("promtool's stdin");
    stdin
        .write_all(text.as_bytes())
        .expect("writing to promtool");
    drop(stdin);
    let out = child.wait_with_output().expect("waiting for promtool");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && printed.trim().is_empty(),
        "promtool check metrics on /metrics from {scraped_from} ({}):\n{printed}\n--- the exposition:\n{text}",
        out.status
    );
}

/// Asserts every family of [`FAMILIES`] has its `# TYPE` line and at least one sample.
fn assert_every_family_has_samples(text: &str, scraped_from: &str) {
    for family in FAMILIES {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("# TYPE {family} "))),
            "no family {family} in /metrics from {scraped_from}:\n{text}"
        );
        let sampled = text.lines().any(|l| {
            !l.starts_with('#')
                && l.strip_prefix(family).is_some_and(|rest| {
                    rest.starts_with('{')
                        || rest.starts_with(' ')
                        || ["_bucket{", "_sum", "_count"]
                            .iter()
                            .any(|s| rest.starts_with(s))
                })
        });
        assert!(
            sampled,
            "family {family} has no sample in /metrics from {scraped_from}:\n{text}"
        );
    }
}

/// `GET /metrics` over plain HTTP/1.1 from the metrics listener.
async fn scrape_plain(addr: SocketAddr) -> (u16, String) {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connecting to the metrics listener");
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .expect("HTTP/1.1 handshake with the metrics listener");
    tokio::spawn(conn);
    let req = Request::get("/metrics")
        .header("host", addr.to_string())
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    let res = tokio::time::timeout(Duration::from_secs(30), send.send_request(req))
        .await
        .expect("an answer from the metrics listener within 30 s")
        .expect("GET /metrics on the metrics listener");
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        String::from_utf8(body.to_vec()).expect("UTF-8 metrics"),
    )
}

/// A port on 127.0.0.1 with nothing listening on it now.
fn unused_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn bob(path: &str) -> Request<Bytes> {
    Request::get(path)
        .header("authorization", "Bearer s3cr3t-token-bob")
        .body(Bytes::new())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn promtool_accepts_the_metrics_on_both_listeners() {
    let w = World::new();
    let echo = w.backend("a", "a-svc", "a-ns", &w.addon_ca, None).await;
    w.register(
        "a.json",
        "a.example.com",
        "v1",
        100,
        10,
        "a-svc",
        "a-ns",
        &w.addon_ca,
    );
    // b's service resolves to a port nothing listens on: unavailable, and unreachable.
    let dead = Echo::placeholder(unused_addr(), "b-svc.b-ns.svc");
    w.register(
        "b.json",
        "b.example.com",
        "v1",
        100,
        10,
        "b-svc",
        "b-ns",
        &w.addon_ca,
    );
    std::fs::write(w.pki.path("policy.yaml"), POLICY).unwrap();
    let metrics_addr = unused_addr();
    let mut cfg = w.config(&[(&echo, echo.addr), (&dead, dead.addr)]);
    cfg.authz.links = vec![apigw_authz::LinkSettings::Rbac];
    cfg.authz.policy_file = Some(w.pki.path("policy.yaml"));
    cfg.availability.interval = Duration::from_millis(300);
    cfg.metrics_listen = Some(metrics_addr);
    let gw = w.gateway(cfg).await;
    let alice = w.client(Some("alice"));
    let anon = w.client(None);

    // 200, 404, 403 and 401 through the proxy's routes.
    let things = "/apis/a.example.com/v1/namespaces/x/things";
    assert_eq!(alice.get(gw.addr, things).await.status, 200);
    assert_eq!(alice.get(gw.addr, &format!("{things}/t")).await.status, 200);
    alice
        .get(gw.addr, "/apis/nothing.example.com/v1/namespaces/x/things")
        .await
        .assert_status(404);
    anon.send(gw.addr, bob("/apis/a.example.com/v1/namespaces/y/things"))
        .await
        .assert_status(403);
    anon.get(gw.addr, things).await.assert_status(401);
    // Kube's verbs: a namespaced create, a server-side apply of a subresource, a DELETE of a
    // cluster-wide collection.
    let create = Request::post(things)
        .header("content-type", "application/json")
        .body(Bytes::from_static(b"{}"))
        .unwrap();
    assert_eq!(alice.send(gw.addr, create).await.status, 200);
    let apply = Request::patch(format!("{things}/t/status"))
        .header("content-type", "application/apply-patch+yaml")
        .body(Bytes::from_static(b"{}"))
        .unwrap();
    assert_eq!(alice.send(gw.addr, apply).await.status, 200);
    let delete = Request::delete("/apis/a.example.com/v1/things")
        .body(Bytes::new())
        .unwrap();
    assert_eq!(alice.send(gw.addr, delete).await.status, 200);
    // Unauthenticated requests with odd paths, under a served group and elsewhere, and an
    // authenticated one for a group nothing serves: none may name a label after its path.
    for path in [
        format!("/apis/a.example.com/v1/namespaces/{ODD}/{ODD}s"),
        format!("/apis/a.example.com/{ODD}/namespaces/x/things/{ODD}/{ODD}"),
        format!("/apis/{ODD}.example.com/v1/{ODD}"),
        format!("/{ODD}/path"),
    ] {
        anon.get(gw.addr, &path).await.assert_status(401);
    }
    alice
        .get(
            gw.addr,
            &format!("/apis/{ODD}.example.com/v1/namespaces/x/{ODD}s"),
        )
        .await
        .assert_status(404);
    let bad_token = Request::get(things)
        .header("authorization", "Bearer not-a-token")
        .body(Bytes::new())
        .unwrap();
    anon.send(gw.addr, bad_token).await.assert_status(401);
    // b goes unavailable (503 without trying it); its OpenAPI document is still forwarded,
    // and fails to connect: a backend error.
    let down = eventually(10, || async {
        alice
            .get(gw.addr, "/apis/b.example.com/v1/namespaces/x/things")
            .await
            .status
            == 503
    })
    .await;
    assert!(down, "v1.b.example.com never became unavailable");
    alice
        .get(gw.addr, "/openapi/v3/apis/b.example.com/v1")
        .await
        .assert_status(503);

    // A watch held open while scraping: the long-running in-flight series.
    let mut h2 = alice.h2_connection(gw.addr).await;
    let watch = Request::get(format!(
        "https://localhost:{}{things}?watch=1",
        gw.addr.port()
    ))
    .version(http::Version::HTTP_2)
    .body(http_body_util::Full::new(Bytes::new()))
    .unwrap();
    let watch = h2.send_request(watch).await.expect("the watch");
    assert_eq!(watch.status(), 200);
    let mut watch = watch.into_body();
    let first = tokio::time::timeout(Duration::from_secs(10), watch.frame())
        .await
        .expect("the watch's first event within 10 s");
    assert!(first.is_some_and(|f| f.is_ok()), "the watch ended at once");

    // The main port, as an authorized user; anonymous is refused.
    anon.get(gw.addr, "/metrics").await.assert_status(401);
    let main = alice.get(gw.addr, "/metrics").await;
    assert_eq!(main.status, 200, "{:?}", main.body);
    let content_type = main
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let main = String::from_utf8(main.body.to_vec()).expect("UTF-8 metrics");
    assert!(
        main.contains("apigw_requests_in_flight{kind=\"long-running\"} 1"),
        "the open watch is not counted:\n{main}"
    );
    assert!(
        main.contains(
            "apigw_backend_errors_total{apiservice=\"v1.b.example.com\",kind=\"unreachable\"}"
        ),
        "{main}"
    );
    for code in ["200", "401", "403", "404", "503"] {
        assert!(
            main.contains(&format!("code=\"{code}\"")),
            "no request counted with code {code}:\n{main}"
        );
    }
    assert_every_family_has_samples(&main, "the main port");
    assert_request_labels(&main);

    // The plain-HTTP metrics listener.
    let (status, plain) = scrape_plain(metrics_addr).await;
    assert_eq!(status, 200, "{plain}");
    assert_every_family_has_samples(&plain, "--metrics-bind-address");
    drop(watch);

    let checks = tokio::task::spawn_blocking(move || {
        promtool_check(&main, "the main port");
        promtool_check(&plain, "--metrics-bind-address");
    });
    if let Err(e) = checks.await {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The metrics listener is the main port's serve loop in plain HTTP: a scraper that sends half
/// a head is cut at the head deadline (the old loop of its own had none), and a path other
/// than the metrics and health endpoints is a 404 `kind: Status`.
#[tokio::test(flavor = "multi_thread")]
async fn the_metrics_listener_keeps_the_main_ports_deadlines() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let w = World::new();
    let metrics_addr = unused_addr();
    let mut cfg = w.config(&[]);
    cfg.metrics_listen = Some(metrics_addr);
    cfg.server.header_read_timeout = Duration::from_millis(300);
    let _gw = w.gateway(cfg).await;

    let mut tcp = tokio::net::TcpStream::connect(metrics_addr).await.unwrap();
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: scraper\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer)).await;
    assert!(
        read.is_ok(),
        "a half head held the metrics connection open for 10 s"
    );
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&answer)
    );

    let mut tcp = tokio::net::TcpStream::connect(metrics_addr).await.unwrap();
    tcp.write_all(b"GET /apis HTTP/1.1\r\nHost: scraper\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 404"), "{text}");
    assert!(text.contains("\"kind\":\"Status\""), "{text}");
}

/// With anonymous authentication on, anyone is `system:anonymous`: a request the gateway
/// refuses for that user is counted as an unauthenticated one, without labels from its path.
#[tokio::test(flavor = "multi_thread")]
async fn refused_anonymous_requests_name_no_labels_after_their_path() {
    let w = World::new();
    let echo = w.backend("a", "a-svc", "a-ns", &w.addon_ca, None).await;
    w.register(
        "a.json",
        "a.example.com",
        "v1",
        100,
        10,
        "a-svc",
        "a-ns",
        &w.addon_ca,
    );
    std::fs::write(w.pki.path("policy.yaml"), POLICY).unwrap();
    let mut cfg = w.config(&[(&echo, echo.addr)]);
    cfg.authn.anonymous = Some(true);
    cfg.authz.links = vec![apigw_authz::LinkSettings::Rbac];
    cfg.authz.policy_file = Some(w.pki.path("policy.yaml"));
    let gw = w.gateway(cfg).await;
    let anon = w.client(None);
    for path in [
        format!("/apis/a.example.com/v1/namespaces/{ODD}/{ODD}s"),
        format!("/apis/a.example.com/v1/{ODD}s/{ODD}/{ODD}"),
    ] {
        anon.get(gw.addr, &path).await.assert_status(403);
    }
    let alice = w.client(Some("alice"));
    let text = String::from_utf8(alice.get(gw.addr, "/metrics").await.body.to_vec()).unwrap();
    if let Some(line) = text.lines().find(|l| l.contains(ODD)) {
        panic!("a label value taken from an anonymous request's path: {line}");
    }
    let requests = samples(&text, "apigw_requests_total");
    let labels = label_set(&["LIST", "", "", "", "", "", "403"]);
    assert!(
        requests.iter().any(|(l, v)| *l == labels && *v >= 1.0),
        "no anonymous 403 counted without path labels:\n{text}"
    );
}
