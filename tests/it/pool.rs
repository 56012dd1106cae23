//! The gateway's connections to backends: requests and watches balanced over a service's
//! endpoints, a dead endpoint skipped without failing requests, ordinary requests over pooled
//! HTTP/1.1 and watches multiplexed over HTTP/2.

use crate::support;

use crate::support::{Echo, World};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const HOST: &str = "a-svc.a-ns.svc";

/// Two live endpoints and, between them, an address nothing listens on.
async fn two_endpoints_and_a_dead_one() -> (World, Echo, Echo, support::Gateway) {
    let w = World::new();
    let one = w.backend("one", "a-svc", "a-ns", &w.addon_ca, None).await;
    let two = w.backend("two", "a-svc", "a-ns", &w.addon_ca, None).await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let gw = gateway_for_a(&w, vec![one.addr, dead_addr, two.addr], |_| {}).await;
    (w, one, two, gw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_spread_over_endpoints_and_a_dead_one_fails_none() {
    let (w, one, two, gw) = two_endpoints_and_a_dead_one().await;
    let alice = w.client(Some("alice"));
    for i in 0..60 {
        let a = alice
            .get(gw.addr, &format!("/apis/a.example.com/v1/things/{i}"))
            .await;
        assert_eq!(a.status, 200, "request {i}: {:?}", a.body);
        assert_eq!(a.seen("x-remote-user"), ["alice"]);
        // Ordinary requests use pooled HTTP/1.1 connections.
        assert_eq!(a.json()["version"], "HTTP/1.1");
    }
    let (n1, n2) = (one.requests().len(), two.requests().len());
    assert_eq!(n1 + n2, 60);
    assert!(
        n1 >= 10 && n2 >= 10,
        "one endpoint took nearly all: {n1} vs {n2}"
    );
    // Keep-alive: far fewer connections than requests reached each endpoint.
    let conns = |e: &Echo| {
        let mut remotes: Vec<String> = e
            .requests()
            .iter()
            .map(|r| r["remote"].as_str().unwrap().to_string())
            .collect();
        remotes.sort();
        remotes.dedup();
        remotes.len()
    };
    assert!(
        conns(&one) < n1 / 2,
        "{} connections for {n1} requests",
        conns(&one)
    );
    assert!(
        conns(&two) < n2 / 2,
        "{} connections for {n2} requests",
        conns(&two)
    );
}

/// Opens a watch and waits for its first chunk; the response stays open.
async fn watch(
    send: &mut SendRequest<Full<Bytes>>,
    gw: &support::Gateway,
    i: usize,
) -> hyper::body::Incoming {
    let req = http::Request::get(format!(
        "https://localhost:{}/apis/a.example.com/v1/namespaces/n/things?watch=1&i={i}",
        gw.addr.port()
    ))
    .body(Full::new(Bytes::new()))
    .unwrap();
    let res = send.send_request(req).await.expect("watch head");
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let first = body.frame().await.expect("a first chunk").expect("chunk");
    assert!(first.data_ref().is_some_and(|d| !d.is_empty()));
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_balance_by_open_streams_over_h2() {
    let (w, one, two, gw) = two_endpoints_and_a_dead_one().await;
    let mut send = w.client(Some("alice")).h2_connection(gw.addr).await;
    let mut open = Vec::new();
    for i in 0..20 {
        open.push(watch(&mut send, &gw, i).await);
    }
    let watches = |e: &Echo| {
        e.requests()
            .into_iter()
            .filter(|r| r["query"].as_str().unwrap().contains("watch=1"))
            .collect::<Vec<_>>()
    };
    let (w1, w2) = (watches(&one), watches(&two));
    // Power of two choices over two endpoints always compares both: each new watch goes to
    // the one holding fewer, so twenty open watches split ten and ten.
    assert_eq!((w1.len(), w2.len()), (10, 10));
    // Watches are streams of one shared HTTP/2 connection per endpoint.
    for seen in [&w1, &w2] {
        let mut by_conn: HashMap<&str, usize> = HashMap::new();
        for r in seen.iter() {
            assert_eq!(r["version"], "HTTP/2.0");
            // `:authority` names the service; no `Host` beside it.
            assert_eq!(r["authority"], format!("{HOST}:443"));
            assert!(r["target"]
                .as_str()
                .unwrap()
                .starts_with(&format!("https://{HOST}:443/")));
            assert!(support::seen_header(r, "host").is_empty(), "{r}");
            *by_conn.entry(r["remote"].as_str().unwrap()).or_default() += 1;
        }
        assert_eq!(by_conn.len(), 1, "{by_conn:?}");
    }
    drop(open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_open_another_h2_connection_past_the_stream_cap() {
    let s = World::single(|_| {}).await;
    let mut send = s.w.client(Some("alice")).h2_connection(s.gw.addr).await;
    let n = 2 * apigw_proxy::STREAMS_PER_CONN + 50;
    let mut open = Vec::new();
    for i in 0..n {
        open.push(watch(&mut send, &s.gw, i).await);
    }
    let mut by_conn: HashMap<String, usize> = HashMap::new();
    for r in s.echo.requests() {
        if r["query"].as_str().unwrap().contains("watch=1") {
            *by_conn
                .entry(r["remote"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    let mut counts: Vec<usize> = by_conn.into_values().collect();
    counts.sort_unstable();
    let cap = apigw_proxy::STREAMS_PER_CONN;
    assert_eq!(counts, [50, cap, cap]);
    // A stream given back makes room on its connection: no new connection for the next watch.
    open.truncate(n - 10);
    // (The gateway sees the resets asynchronously; give it ample time.)
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    open.push(watch(&mut send, &s.gw, n).await);
    let remotes: std::collections::HashSet<String> = s
        .echo
        .requests()
        .iter()
        .filter(|r| r["query"].as_str().unwrap().contains("watch=1"))
        .map(|r| r["remote"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(remotes.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_the_backend_closed_is_replaced_without_an_error() {
    let s = World::single(|_| {}).await;
    let c = s.w.client(Some("alice"));
    let path = THINGS;
    assert_eq!(c.get(s.gw.addr, path).await.status, 200);
    // The backend restarts: the gateway's idle keep-alive connection to it is now closed.
    let addr = s.echo.stop();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let echo = s.w.restart("a", &Echo::placeholder(addr, HOST)).await;
    for _ in 0..5 {
        let a = c.get(s.gw.addr, path).await;
        assert_eq!(a.status, 200, "{:?}", a.body);
    }
    assert_eq!(echo.requests().len(), 5);
}

/// Two front-door HTTP/2 connections, opened one after the other and both kept open, then
/// `rounds` GETs on each in turn; the backend-side address (the gateway's end of the backend
/// connection) that carried each request, per client connection.
async fn alternate(s: &support::Single, rounds: usize) -> [Vec<String>; 2] {
    let c = s.w.client(Some("alice")).h2();
    let mut conns = [
        c.h2_connection(s.gw.addr).await,
        c.h2_connection(s.gw.addr).await,
    ];
    let mut out = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (send, seen) in conns.iter_mut().zip(out.iter_mut()) {
            let req =
                http::Request::get("https://localhost/apis/a.example.com/v1/namespaces/n/things")
                    .body(Full::new(Bytes::new()))
                    .unwrap();
            let res = send.send_request(req).await.unwrap();
            assert_eq!(res.status(), 200);
            res.into_body().collect().await.unwrap();
            let log = s.echo.requests();
            seen.push(log.last().unwrap()["remote"].as_str().unwrap().to_string());
        }
    }
    out
}

/// With two connection workers, two client connections land on different workers; each
/// worker reuses its own backend connection for its requests, and never the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_worker_reuses_its_own_backend_connection() {
    let s = World::single(|cfg| cfg.server.worker_threads = 2).await;
    let [a, b] = alternate(&s, 5).await;
    for run in [&a, &b] {
        assert!(
            run.iter().all(|r| r == &run[0]),
            "one backend connection per worker: {run:?}"
        );
    }
    assert_ne!(a[0], b[0], "the two workers share a backend connection");
}

/// Without workers (`--worker-threads 0`) connections are served on the shared runtime and
/// one pooled backend connection serves both client connections in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_workers_one_backend_connection_serves_every_client() {
    let s = World::single(|cfg| cfg.server.worker_threads = 0).await;
    let [a, b] = alternate(&s, 5).await;
    assert!(a.iter().chain(&b).all(|r| r == &a[0]), "{a:?} {b:?}");
}

/// A loopback listener and a TLS acceptor (HTTP/1.1 only) with a certificate for [`HOST`] from
/// the addon CA, for backends that misbehave on purpose.
async fn http1_listener(
    w: &World,
    name: &str,
) -> (
    tokio_rustls::TlsAcceptor,
    tokio::net::TcpListener,
    std::net::SocketAddr,
) {
    let (crt, key) = w.pki.leaf(name, &w.addon_ca, HOST, &[], &[HOST], true);
    let cert = apigw_core::tls::ReloadingCert::load(&crt, &key).unwrap();
    let mut tls = apigw_core::tls::server_config(cert, None).unwrap();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (acceptor, listener, addr)
}

/// The gateway with `a.example.com/v1` served by `a-svc.a-ns.svc` at `endpoints`; `tune`
/// adjusts the configuration first.
async fn gateway_for_a(
    w: &World,
    endpoints: Vec<std::net::SocketAddr>,
    tune: impl FnOnce(&mut apigw_gateway::config::Config),
) -> support::Gateway {
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
    let mut cfg = w.config(&[]);
    cfg.proxy.resolve.insert((HOST.into(), 443), endpoints);
    tune(&mut cfg);
    w.gateway(cfg).await
}

/// [`gateway_for_a`], once a GET of [`THINGS`] through it succeeds (the availability check
/// takes the first endpoint that accepts).
async fn serving_a(
    w: &World,
    endpoints: Vec<std::net::SocketAddr>,
    tune: impl FnOnce(&mut apigw_gateway::config::Config),
) -> support::Gateway {
    let gw = gateway_for_a(w, endpoints, tune).await;
    let alice = w.client(Some("alice"));
    assert!(
        support::eventually(10, || async {
            alice.get(gw.addr, THINGS).await.status == 200
        })
        .await,
        "the backend never became available"
    );
    gw
}

const THINGS: &str = "/apis/a.example.com/v1/namespaces/n/things";

/// A backend that answers the first request on each connection and then, like a server
/// closing an idle connection just as the next request arrives, reads the second one and
/// closes the connection without a word. Counts the connections it accepted.
async fn closes_after_one_answer(w: &World) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (acceptor, listener, addr) = http1_listener(w, "closer").await;
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                for n in 1.. {
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => head.extend_from_slice(&buf[..k]),
                        }
                    }
                    head.clear();
                    if n > 1 {
                        return;
                    }
                    let body = r#"{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"a.example.com/v1","resources":[]}"#;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if conn.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// An endpoint like a replica killed with requests in flight: it takes each connection, reads
/// the request's head, and closes the connection without a word.
async fn swallows_requests(w: &World) -> std::net::SocketAddr {
    use tokio::io::AsyncReadExt;
    let (acceptor, listener, addr) = http1_listener(w, "dying").await;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => head.extend_from_slice(&buf[..k]),
                    }
                }
            });
        }
    });
    addr
}

/// Beside a live endpoint, one that dies with each request in flight: every GET it swallows is
/// sent again to the live one and succeeds; a POST it swallows is not (the backend may have
/// acted on it) and answers 503; `apigw_backend_retries_total` counts the replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_a_dying_endpoint_left_unanswered_is_sent_to_another_a_post_is_not() {
    let w = World::new();
    let live = w.backend("live", "a-svc", "a-ns", &w.addon_ca, None).await;
    let dying = swallows_requests(&w).await;
    // The live endpoint first, for the availability check.
    let gw = serving_a(&w, vec![live.addr, dying], |_| {}).await;
    let alice = w.client(Some("alice"));
    let path = THINGS;
    for i in 0..20 {
        let a = alice.get(gw.addr, path).await;
        assert_eq!(a.status, 200, "GET {i}: {:?}", a.body);
    }
    let mut swallowed = 0;
    for i in 0..20 {
        let post = http::Request::post(path)
            .header("content-type", "application/json")
            .body(Bytes::from_static(b"{}"))
            .unwrap();
        let a = alice.send(gw.addr, post).await;
        match a.status {
            503 => swallowed += 1,
            200 | 201 => {}
            other => panic!("POST {i}: {other} {:?}", a.body),
        }
    }
    // Each POST goes to the dying endpoint about half the time (two choices of two).
    assert!(swallowed > 0, "no POST reached the dying endpoint");
    let metrics = alice.get(gw.addr, "/metrics").await;
    let text = String::from_utf8_lossy(&metrics.body);
    let replayed = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "apigw_backend_retries_total{apiservice=\"v1.a.example.com\",reason=\"replayed\"} ",
            )
        })
        .and_then(|v| v.parse::<u64>().ok());
    assert!(replayed.is_some_and(|n| n > 0), "{text}");
}

/// A GET whose pooled connection (idle a while) the backend closes before answering is sent
/// again on a new connection, as Go's transport does; a POST is not, since the backend may
/// have acted on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_on_a_connection_closed_unanswered_is_sent_again_a_post_is_not() {
    let w = World::new();
    let (addr, accepted) = closes_after_one_answer(&w).await;
    // One idle list, so every request after the first finds the pooled connection.
    let gw = serving_a(&w, vec![addr], |cfg| cfg.server.worker_threads = 0).await;
    let alice = w.client(Some("alice"));
    let path = THINGS;
    for i in 0..6 {
        // Idle a while, as a connection a server closes for idleness is.
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        let before = accepted.load(Ordering::SeqCst);
        let a = alice.get(gw.addr, path).await;
        assert_eq!(a.status, 200, "GET {i}: {:?}", a.body);
        // The pooled connection was closed unanswered, so the answer came on a new one.
        assert_eq!(accepted.load(Ordering::SeqCst), before + 1, "GET {i}");
    }
    let post = http::Request::post(path)
        .header("content-type", "application/json")
        .body(Bytes::from_static(b"{}"))
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let before = accepted.load(Ordering::SeqCst);
    let a = alice.send(gw.addr, post).await;
    a.assert_status(503);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        before,
        "the POST was sent again"
    );
}
