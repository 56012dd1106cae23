//! Backend faults (issue 34, item 4), one test per row of the table in docs/behaviour.md: a
//! [`FaultProxy`] between the gateway and the Go addon (Go's `net/http`) breaks a connection
//! in one way, and each test records what the client gets and when, whether the request's
//! in-flight slot is free again (the gateway allows one request at a time, so a held slot would
//! answer the next request 429), what the availability check makes of the same fault on its
//! own connections, and how soon requests succeed again once the fault is gone.

use crate::support::fault::{Fault, FaultProxy, Scope};
use crate::support::goaddon::{GoAddon, GoOpts};
use crate::support::{eventually, Client, Gateway, World};
use apigw_gateway::config::Config;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use rustls::pki_types::ServerName;
use std::time::{Duration, Instant};

/// `--request-timeout` of these gateways.
const TIMEOUT: Duration = Duration::from_secs(2);
/// The availability check's timeout (the default is 5 s; shorter here to keep the tests short).
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// A fault that lasts longer than both.
const LONG: Duration = Duration::from_secs(4);
/// Slack on every bound: the run shares two cores with the rest of the suite.
const SLACK: Duration = Duration::from_millis(1500);
const APISERVICE: &str = "v1.interop.example.com";
/// Faults in [`Scope::Path`] take only this test's requests, never the availability checks.
const FAULTY: &str = "/namespaces/faulty/";
/// The backend as the proxy offers it in every row but the HTTP/2 one.
const HTTP1: &[&[u8]] = &[b"http/1.1"];
/// About 1 MiB of widgets, streamed.
const LIST: &str = "/apis/interop.example.com/v1/namespaces/faulty/widgets?bigListMiB=1";

struct Stack {
    _world: World,
    _addon: GoAddon,
    proxy: FaultProxy,
    gw: Gateway,
    alice: Client,
}

/// The Go addon behind a fault proxy that offers `alpn`, behind a gateway that lets one
/// request in at a time.
async fn stack(alpn: &[&[u8]], tweak: impl FnOnce(&mut Config)) -> Stack {
    let world = World::new();
    let addon = GoAddon::start(&world, GoOpts::default()).await;
    addon.register(&world);
    let proxy = FaultProxy::start(&world, &addon.host, addon.addr, alpn).await;
    let mut cfg = world.config(&[]);
    cfg.proxy
        .resolve
        .insert((addon.host.clone(), 443), vec![proxy.addr]);
    cfg.limits.request_timeout = TIMEOUT;
    cfg.limits.max_inflight = 1;
    cfg.flowcontrol.enabled = false;
    cfg.availability.interval = Duration::from_millis(500);
    cfg.availability.timeout = CHECK_TIMEOUT;
    tweak(&mut cfg);
    let gw = world.gateway(cfg).await;
    let alice = world.client(Some("alice"));
    let s = Stack {
        _world: world,
        _addon: addon,
        proxy,
        gw,
        alice,
    };
    assert!(
        available(&s).await.0 == "True" || wait_available(&s, "True", 10).await,
        "the addon never became available"
    );
    s
}

/// What the client got: the status, the body as far as it came, how it ended, and when.
#[derive(Debug)]
struct Seen {
    status: u16,
    body: Bytes,
    /// The body's error, when it did not end cleanly.
    cut: Option<String>,
    /// From the connection's start to the response head, and to the body's end.
    head_after: Duration,
    end_after: Duration,
}

impl Seen {
    /// The `kind: Status` body's reason and message, asserting its code is `code`.
    fn status(&self, code: u16) -> (String, String) {
        assert_eq!(self.status, code, "{self:?}");
        assert!(self.cut.is_none(), "{self:?}");
        let st: serde_json::Value = serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not a Status ({e}): {self:?}"));
        assert_eq!(st["kind"], "Status", "{st}");
        assert_eq!(st["code"], code, "{st}");
        let s = |k: &str| st[k].as_str().unwrap_or_default().to_string();
        (s("reason"), s("message"))
    }

    /// Asserts the whole list arrived.
    fn whole(&self) {
        assert_eq!(self.status, 200, "{self:?}");
        assert!(self.cut.is_none(), "{self:?}");
        assert!(self.body.len() > 1 << 20, "{} bytes", self.body.len());
    }
}

/// One request over HTTP/1.1 on a new connection, its body read as far as it goes.
async fn send(s: &Stack, req: Request<Bytes>) -> Seen {
    let started = Instant::now();
    let tcp = tokio::net::TcpStream::connect(s.gw.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(s.alice.tls(&[b"http/1.1"]))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let (mut parts, body) = req.into_parts();
    parts.headers.insert("host", "localhost".parse().unwrap());
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        sender.send_request(Request::from_parts(parts, Full::new(body))),
    )
    .await
    .expect("no response head within 30 s")
    .unwrap();
    let head_after = started.elapsed();
    let status = answer.status().as_u16();
    let mut body = answer.into_body();
    let (mut got, mut cut) = (Vec::new(), None);
    loop {
        match tokio::time::timeout(Duration::from_secs(30), body.frame()).await {
            Err(_) => panic!("the body stalled for 30 s"),
            Ok(None) => break,
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    got.extend_from_slice(data);
                }
            }
            Ok(Some(Err(e))) => {
                cut = Some(e.to_string());
                break;
            }
        }
    }
    Seen {
        status,
        body: got.into(),
        cut,
        head_after,
        end_after: started.elapsed(),
    }
}

async fn get(s: &Stack, path: &str) -> Seen {
    send(s, Request::get(path).body(Bytes::new()).unwrap()).await
}

/// The APIService's `Available` condition: status, reason, message.
async fn available(s: &Stack) -> (String, String, String) {
    let a = s
        .alice
        .get(
            s.gw.addr,
            &format!("/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}"),
        )
        .await;
    let cond = &a.json()["status"]["conditions"][0];
    let f = |k: &str| cond[k].as_str().unwrap_or_default().to_string();
    (f("status"), f("reason"), f("message"))
}

async fn wait_available(s: &Stack, status: &str, secs: u64) -> bool {
    eventually(secs, || async { available(s).await.0 == status }).await
}

/// Arms `fault` on every connection, the checks' included, and asserts that the `Available`
/// condition turns False with `FailedDiscoveryCheck` and a message containing `expect` (waiting
/// three check rounds past the check timeout); then disarms it and waits until the list is
/// served whole again. Returns the message.
async fn unavailable_then_back(s: &Stack, fault: Fault, expect: &str) -> String {
    s.proxy.arm(fault, Scope::Every, usize::MAX);
    let went = wait_available(s, "False", (CHECK_TIMEOUT + SLACK).as_secs() + 3).await;
    let (status, reason, message) = available(s).await;
    assert!(went, "{status} {reason}: {message}");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "FailedDiscoveryCheck")
    );
    assert!(message.contains(expect), "{message}");
    s.proxy.disarm();
    let since = Instant::now();
    let back = eventually(60, || async {
        available(s).await.0 == "True" && get(s, LIST).await.status == 200
    })
    .await;
    assert!(
        back,
        "not back 60 s after the fault ended: {:?}",
        available(s).await
    );
    get(s, LIST).await.whole();
    eprintln!("availability: {message}; back after {:?}", since.elapsed());
    message
}

/// The client's request is faulted once; the next one on a new connection is served whole.
async fn targeted(s: &Stack, fault: Fault) -> Seen {
    s.proxy.arm(fault, Scope::Path(FAULTY), 1);
    let seen = get(s, LIST).await;
    assert_eq!(s.proxy.hits(), 1, "the fault never happened: {seen:?}");
    let next = get(s, LIST).await;
    next.whole();
    seen
}

fn within(d: Duration, low: Duration, high: Duration) {
    assert!(
        d >= low && d <= high + SLACK,
        "{d:?} not within {low:?}..{high:?} (+{SLACK:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_slow_to_answer_gets_504_at_the_request_timeout() {
    let s = stack(HTTP1, |_| {}).await;
    let seen = targeted(&s, Fault::DelayHead(LONG)).await;
    let (reason, message) = seen.status(504);
    assert_eq!(reason, "Timeout", "{message}");
    within(seen.end_after, TIMEOUT, TIMEOUT);

    let message = unavailable_then_back(&s, Fault::DelayHead(LONG), "no answer within 2 s").await;
    // The URL once (it was twice: the error's text and the check's prefix both named it).
    assert_eq!(
        message,
        "failing or missing response from https://widgets.interop.svc:443/apis/interop.example.com/v1: no answer within 2 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_midway_is_cut_at_the_request_timeout() {
    let s = stack(HTTP1, |_| {}).await;
    let fault = Fault::PauseMidBody {
        after: 256,
        pause: LONG,
    };
    let seen = targeted(&s, fault).await;
    assert_eq!(seen.status, 200, "{seen:?}");
    assert!(seen.cut.is_some(), "{seen:?}");
    within(seen.head_after, Duration::ZERO, Duration::ZERO);
    within(seen.end_after, TIMEOUT, TIMEOUT);
    eprintln!("cut: {:?} after {} bytes", seen.cut, seen.body.len());

    unavailable_then_back(&s, fault, "no answer within 2 s").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_body_reaches_the_client_cut() {
    let s = stack(HTTP1, |_| {}).await;
    let fault = Fault::Truncate { keep: 256 };
    let seen = targeted(&s, fault).await;
    assert_eq!(seen.status, 200, "{seen:?}");
    assert!(seen.cut.is_some(), "{seen:?}");
    within(seen.end_after, Duration::ZERO, Duration::ZERO);
    eprintln!("cut: {:?} after {} bytes", seen.cut, seen.body.len());

    unavailable_then_back(
        &s,
        fault,
        "reading the answer: error reading a body from connection",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_connection_gets_503_at_once() {
    let s = stack(HTTP1, |_| {}).await;
    let seen = targeted(&s, Fault::Reset).await;
    let (reason, message) = seen.status(503);
    assert_eq!(reason, "ServiceUnavailable", "{message}");
    assert!(
        message.starts_with(
            "error trying to reach service: connection error: Connection reset by peer"
        ),
        "{message}"
    );
    within(seen.end_after, Duration::ZERO, Duration::ZERO);

    unavailable_then_back(&s, Fault::Reset, "reset").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_hole_gets_504_at_the_request_timeout() {
    let s = stack(HTTP1, |_| {}).await;
    let seen = targeted(&s, Fault::BlackHole).await;
    let (reason, message) = seen.status(504);
    assert_eq!(reason, "Timeout", "{message}");
    within(seen.end_after, TIMEOUT, TIMEOUT);

    unavailable_then_back(&s, Fault::BlackHole, "no answer within 2 s").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_instead_of_http_gets_an_error_at_once() {
    let s = stack(HTTP1, |_| {}).await;
    let seen = targeted(&s, Fault::Garbage).await;
    let (reason, message) = seen.status(503);
    assert_eq!(reason, "ServiceUnavailable", "{message}");
    assert_eq!(
        message,
        "error trying to reach service: invalid HTTP version parsed"
    );
    within(seen.end_after, Duration::ZERO, Duration::ZERO);

    unavailable_then_back(&s, Fault::Garbage, "invalid HTTP version parsed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickle_gets_504_at_the_request_timeout() {
    let s = stack(HTTP1, |_| {}).await;
    let fault = Fault::Trickle(Duration::from_secs(1));
    let seen = targeted(&s, fault).await;
    let (reason, message) = seen.status(504);
    assert_eq!(reason, "Timeout", "{message}");
    within(seen.end_after, TIMEOUT, TIMEOUT);

    unavailable_then_back(&s, fault, "no answer within 2 s").await;
}

/// HTTP/2 to the backend for every request (`--backend-http2-requests`); the backend stops
/// reading in the middle of a 2 MiB upload, and holds the connection open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_backend_that_stops_reading_costs_the_request_timeout() {
    let s = stack(&[b"h2"], |cfg| cfg.proxy.http2_requests = true).await;
    let fault = Fault::StopReading { after: 64 << 10 };
    s.proxy.arm(fault, Scope::Every, usize::MAX);
    let widget = serde_json::json!({
        "apiVersion": "interop.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "big", "namespace": "faulty", "annotations": {"pad": "x".repeat(2 << 20)}},
    });
    let upload = Request::post("/apis/interop.example.com/v1/namespaces/faulty/widgets")
        .header("content-type", "application/json")
        .body(Bytes::from(widget.to_string()))
        .unwrap();
    let seen = send(&s, upload).await;
    assert!(s.proxy.hits() >= 1, "{seen:?}");
    let (reason, message) = seen.status(504);
    assert_eq!(reason, "Timeout", "{message}");
    within(seen.end_after, TIMEOUT, TIMEOUT);

    s.proxy.disarm();
    let since = Instant::now();
    // The slot is free (else 429), but the next request goes to the same frozen connection,
    // which is dropped only when its keep-alive ping (30 s) goes unanswered (20 s).
    let next = get(&s, LIST).await;
    assert_eq!(next.status(504).0, "Timeout");
    let back = eventually(60, || async { get(&s, LIST).await.status == 200 }).await;
    assert!(back, "not back within 60 s");
    eprintln!("back after {:?}", since.elapsed());
    within(since.elapsed(), Duration::ZERO, Duration::from_secs(50));
    assert_eq!(available(&s).await.0, "True");
}
