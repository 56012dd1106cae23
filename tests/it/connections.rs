//! Every state of a connection has a deadline, over real TLS connections: one that sends
//! nothing after the handshake (HTTP/1.1 or h2 ALPN, or only part of the HTTP/2 preface) is
//! closed after the head deadline, one with no request being answered after the idle timeout,
//! and one with an open watch stays. Connections past `--max-connections-per-client` are closed
//! at accept, while health still answers on the connections within it.

use crate::support;

use crate::support::World;
use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use rustls::pki_types::ServerName;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

const WATCH: &str = "/apis/a.example.com/v1/namespaces/n/things?watch=1";
const ECHO: &str = "/apis/a.example.com/v1/namespaces/n/things/echo";
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame.
const SETTINGS: &[u8] = &[0, 0, 0, 0x4, 0, 0, 0, 0, 0];
/// The bound of every wait for a close: far past the short deadlines the tests set, far below
/// the defaults (30 s, 90 s) an unfixed gateway would fall back on, or never.
const CLOSED_WITHIN: Duration = Duration::from_secs(10);

async fn setup(tweak: impl FnOnce(&mut apigw_gateway::config::Config)) -> support::Single {
    World::single(tweak).await
}

fn tls_config(s: &support::Single, alpn: &[u8], cert: Option<&str>) -> Arc<rustls::ClientConfig> {
    let p = |n: &str| s.w.pki.path(n);
    let roots =
        apigw_core::tls::root_store(&apigw_core::tls::load_certs(&p("ca.crt")).unwrap(), "ca")
            .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(apigw_core::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut tls = match cert {
        Some(cert) => builder
            .with_client_auth_cert(
                apigw_core::tls::load_certs(&p(&format!("{cert}.crt"))).unwrap(),
                apigw_core::tls::load_key(&p(&format!("{cert}.key"))).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(tls)
}

/// A TLS connection to the gateway with `alpn` offered, or the handshake's error.
async fn connect(
    s: &support::Single,
    alpn: &[u8],
    cert: Option<&str>,
) -> std::io::Result<TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(s.gw.addr).await?;
    TlsConnector::from(tls_config(s, alpn, cert))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// Reads until the gateway closes the connection (true) or `within` passes (false); what came
/// is appended to `out`.
async fn closed(
    stream: &mut TlsStream<tokio::net::TcpStream>,
    within: Duration,
    out: &mut Vec<u8>,
) -> bool {
    let mut buf = [0u8; 16384];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok()
}

/// An HTTP/2 connection (hyper's client) and the task driving it, which ends when the
/// connection does.
async fn h2(
    s: &support::Single,
    cert: &str,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Full<Bytes>>,
    tokio::task::JoinHandle<()>,
) {
    // Retried while refused at accept: with a connection limit, the connections of the
    // start-up readiness probe may not have closed yet.
    let mut tries = 0;
    let tls = loop {
        match connect(s, b"h2", Some(cert)).await {
            Ok(tls) => break tls,
            Err(_) if tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no connection: {e}"),
        }
    };
    let (send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    (
        send,
        tokio::spawn(async move {
            let _ = conn.await;
        }),
    )
}

fn get(s: &support::Single, path: &str) -> Request<http_body_util::Full<Bytes>> {
    Request::get(format!("https://localhost:{}{path}", s.gw.addr.port()))
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap()
}

/// A connection that completes the handshake and then sends nothing, or only part of the
/// HTTP/2 preface, is closed after the head deadline, whatever ALPN chose; so is a kept-alive
/// HTTP/1.1 connection once its next head has begun, but not before.
#[tokio::test(flavor = "multi_thread")]
async fn a_connection_that_sends_nothing_is_closed() {
    let s = setup(|cfg| cfg.server.header_read_timeout = Duration::from_secs(1)).await;
    for (alpn, send) in [
        (&b"http/1.1"[..], &b""[..]),
        (b"h2", b""),
        (b"h2", &PREFACE[..12]),
        (b"http/1.1", &PREFACE[..12]),
    ] {
        let mut stream = connect(&s, alpn, Some("alice")).await.unwrap();
        stream.write_all(send).await.unwrap();
        stream.flush().await.unwrap();
        let mut out = Vec::new();
        assert!(
            closed(&mut stream, CLOSED_WITHIN, &mut out).await,
            "ALPN {:?} after sending {send:?}: still open after {CLOSED_WITHIN:?}",
            String::from_utf8_lossy(alpn)
        );
    }
    // Between HTTP/1.1 requests a kept-alive connection waits the idle timeout (left at its
    // default), as Go's server does: the head deadline starts with the next head's first byte.
    let mut stream = connect(&s, b"http/1.1", Some("alice")).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    assert!(
        !closed(&mut stream, Duration::from_secs(3), &mut out).await,
        "a kept-alive HTTP/1.1 connection was closed at the head deadline: {}",
        String::from_utf8_lossy(&out)
    );
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
    // Part of the next head: now the head deadline runs, and ends it.
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    stream.flush().await.unwrap();
    let begun = std::time::Instant::now();
    let mut rest = Vec::new();
    assert!(
        closed(&mut stream, CLOSED_WITHIN, &mut rest).await,
        "a connection with part of its second head stayed open"
    );
    assert!(
        begun.elapsed() >= Duration::from_millis(900),
        "{:?}",
        begun.elapsed()
    );
    // The gateway still serves new connections.
    let health = s.w.client(Some("alice")).get(s.gw.addr, "/healthz").await;
    assert_eq!(health.status, 200);
}

/// A connection answering nothing closes after the idle timeout: HTTP/1.1 kept alive after a
/// request, HTTP/2 after its preface and SETTINGS, and HTTP/2 after a finished stream (with
/// GOAWAY). The head deadline is left at its default, so it is not what closes them.
#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_close_after_the_idle_timeout() {
    let s = setup(|cfg| cfg.server.idle_timeout = Duration::from_secs(1)).await;

    // HTTP/1.1, kept alive after one answered request.
    let mut stream = connect(&s, b"http/1.1", Some("alice")).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    assert!(
        closed(&mut stream, CLOSED_WITHIN, &mut out).await,
        "an idle HTTP/1.1 connection stayed open"
    );
    let answer = String::from_utf8_lossy(&out);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.ends_with("ok"),
        "the answer came whole first: {answer}"
    );

    // HTTP/2: the preface and SETTINGS, then no stream.
    let mut stream = connect(&s, b"h2", Some("alice")).await.unwrap();
    stream.write_all(PREFACE).await.unwrap();
    stream.write_all(SETTINGS).await.unwrap();
    let mut out = Vec::new();
    assert!(
        closed(&mut stream, CLOSED_WITHIN, &mut out).await,
        "an HTTP/2 connection without streams stayed open"
    );
    // SETTINGS first (the server's preface), and a GOAWAY (type 7) before the close.
    assert_eq!(out.get(3), Some(&0x4), "{out:?}");
    assert!(has_goaway(&out), "no GOAWAY: {out:?}");

    // HTTP/2 after a finished request.
    let (mut send, conn) = h2(&s, "alice").await;
    let res = send.send_request(get(&s, "/healthz")).await.unwrap();
    assert_eq!(res.status(), 200);
    res.into_body().collect().await.unwrap();
    assert!(
        tokio::time::timeout(CLOSED_WITHIN, conn).await.is_ok(),
        "an HTTP/2 connection idle after its request stayed open"
    );
}

/// Whether the HTTP/2 frames in `bytes` (the server's side) include a GOAWAY.
fn has_goaway(bytes: &[u8]) -> bool {
    let mut at = 0;
    while at + 9 <= bytes.len() {
        let len = usize::from(bytes[at]) << 16
            | usize::from(bytes[at + 1]) << 8
            | usize::from(bytes[at + 2]);
        if bytes[at + 3] == 0x7 {
            return true;
        }
        at += 9 + len;
    }
    false
}

/// A connection with an open watch is not idle: it stays past the idle timeout (and the head
/// deadline), over HTTP/2 and HTTP/1.1, while an idle connection beside it is closed.
#[tokio::test(flavor = "multi_thread")]
async fn a_connection_with_an_open_watch_stays() {
    let s = setup(|cfg| {
        cfg.server.idle_timeout = Duration::from_secs(1);
        cfg.server.header_read_timeout = Duration::from_secs(1);
    })
    .await;
    // HTTP/2 watch.
    let (mut send, watching) = h2(&s, "alice").await;
    let res = send.send_request(get(&s, WATCH)).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert!(first.is_data());
    // HTTP/1.1 watch.
    let mut h1 = connect(&s, b"http/1.1", Some("alice")).await.unwrap();
    h1.write_all(format!("GET {WATCH} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&head).contains("\r\n\r\n") {
        let n = tokio::time::timeout(CLOSED_WITHIN, h1.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&head));
        head.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&head).starts_with("HTTP/1.1 200"));

    // An idle connection beside them is closed...
    let (_idle_send, idle) = h2(&s, "alice").await;
    assert!(
        tokio::time::timeout(CLOSED_WITHIN, idle).await.is_ok(),
        "an idle HTTP/2 connection stayed open"
    );
    // ... and, a few idle timeouts later, the watches are still open.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !watching.is_finished(),
        "the HTTP/2 watch connection was closed"
    );
    assert!(!send.is_closed());
    assert!(
        tokio::time::timeout(Duration::from_millis(200), body.frame())
            .await
            .is_err(),
        "the HTTP/2 watch ended"
    );
    let mut rest = Vec::new();
    assert!(
        !closed(&mut h1, Duration::from_millis(500), &mut rest).await,
        "the HTTP/1.1 watch connection was closed: {}",
        String::from_utf8_lossy(&rest)
    );
}

/// Past `--max-connections-per-client`, a connection is closed at accept (whatever ALPN it
/// would offer), before any request; health answers on a connection within the limit even when
/// the client's in-flight requests are at their limit; a closed connection frees its place.
#[tokio::test(flavor = "multi_thread")]
async fn connections_over_the_limit_are_refused_at_accept_and_health_still_answers() {
    let s = setup(|cfg| {
        cfg.limits.max_inflight_per_client = 1;
        cfg.server.max_connections_per_client = 2;
    })
    .await;
    // First connection: a watch, which holds the client's one request in flight.
    let (mut watch_send, watch_conn) = h2(&s, "alice").await;
    let res = watch_send.send_request(get(&s, WATCH)).await.unwrap();
    assert_eq!(res.status(), 200);
    let watch_body = res.into_body();
    // Second connection: within the limit.
    let (mut send, second) = h2(&s, "alice").await;
    for path in ["/healthz", "/livez", "/readyz/ping", "/version"] {
        let res = send.send_request(get(&s, path)).await.unwrap();
        assert_eq!(res.status(), 200, "{path} from a busy client");
    }
    let res = send.send_request(get(&s, ECHO)).await.unwrap();
    assert_eq!(res.status(), 429, "other requests keep the in-flight limit");
    // Third connection: closed at accept, before the handshake completes or any answer.
    for alpn in [&b"h2"[..], b"http/1.1"] {
        match connect(&s, alpn, Some("alice")).await {
            Err(_) => {}
            Ok(mut stream) => {
                let _ = stream
                    .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    .await;
                let mut out = Vec::new();
                assert!(
                    closed(&mut stream, CLOSED_WITHIN, &mut out).await && out.is_empty(),
                    "an over-limit connection was served: {}",
                    String::from_utf8_lossy(&out)
                );
            }
        }
    }
    assert!(
        s.w.client(Some("alice"))
            .try_send(s.gw.addr, Request::get(ECHO).body(Bytes::new()).unwrap())
            .await
            .is_err(),
        "an over-limit connection got an answer"
    );
    // Closing the watch's connection frees its place.
    drop((watch_body, watch_send));
    drop((send, second));
    let _ = tokio::time::timeout(CLOSED_WITHIN, watch_conn).await;
    let c = s.w.client(Some("alice"));
    assert!(
        support::eventually(10, || async {
            c.try_send(s.gw.addr, Request::get(ECHO).body(Bytes::new()).unwrap())
                .await
                .is_ok_and(|a| a.status == 200)
        })
        .await,
        "a closed connection kept its place"
    );
}
