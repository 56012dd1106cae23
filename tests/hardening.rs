//! The bad-input suite: what a hostile client sends over a real TLS connection, what must come
//! back, and that the backend never receives what it should not. Also expired and wrong-EKU
//! client certificates, request limits (429) and the fault cases: backends that die, hang,
//! reset or do not resolve, and an APIService deleted mid-request.

mod support;

use bytes::Bytes;
use http::Request;
use rustls::pki_types::ServerName;
use std::sync::Arc;
use std::time::Duration;
use support::{seen_header, World};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ECHO: &str = "/apis/a.example.com/v1/namespaces/n/things/echo";

struct Setup {
    w: World,
    gw: support::Gateway,
    echo: support::Echo,
}

async fn setup_with(tweak: impl FnOnce(&mut apigw::config::Config)) -> Setup {
    let support::Single { w, echo, gw } = World::single(tweak).await;
    Setup { w, gw, echo }
}

/// Sends `raw` bytes as alice over TLS (HTTP/1.1) and returns what came back before the
/// connection closed or went quiet; empty when the handshake itself was refused.
async fn raw(s: &Setup, cert: &str, bytes: &[u8]) -> String {
    let p = |n: &str| s.w.pki.path(n);
    let roots =
        apigw::tls::root_store(&apigw::tls::load_certs(&p("ca.crt")).unwrap(), "ca").unwrap();
    let mut tls = rustls::ClientConfig::builder_with_provider(apigw::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            apigw::tls::load_certs(&p(&format!("{cert}.crt"))).unwrap(),
            apigw::tls::load_key(&p(&format!("{cert}.key"))).unwrap(),
        )
        .unwrap();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(s.gw.addr).await.unwrap();
    let Ok(mut stream) = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
    else {
        return String::new();
    };
    if stream.write_all(bytes).await.is_err() {
        return String::new();
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        match tokio::time::timeout(Duration::from_millis(1500), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn status_of(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_requests_get_clean_answers_and_reach_nothing() {
    let s = setup_with(|_| {}).await;
    let big = "a".repeat(2 << 20);
    let many: String = (0..200).map(|i| format!("X-Filler-{i}: x\r\n")).collect();
    // (what it is, bytes sent, acceptable status codes)
    // Both lengths: read by Transfer-Encoding alone and the connection closed (RFC 9112 §6.1),
    // so the request hidden behind it is never read.
    let smuggle = format!("POST {ECHO} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /apis/a.example.com/v1/namespaces/n/things/smuggled HTTP/1.1\r\nHost: x\r\n\r\n");
    let got = raw(&s, "alice", smuggle.as_bytes()).await;
    assert_eq!(
        got.matches("HTTP/1.1 ").count(),
        1,
        "a second response came back: {got}"
    );
    assert!(
        got.to_ascii_lowercase().contains("connection: close"),
        "{got}"
    );
    let cases: Vec<(&str, String, &[u16])> = vec![
        ("two different Content-Lengths",
         format!("POST {ECHO} HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 7\r\n\r\nabcdefg"), &[400]),
        ("a chunk size that is not hex",
         format!("POST {ECHO} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"), &[400, 0]),
        ("a 2 MiB header", format!("GET {ECHO} HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n"), &[431]),
        ("200 headers", format!("GET {ECHO} HTTP/1.1\r\nHost: x\r\n{many}\r\n"), &[431]),
        ("a 2 MiB request line", format!("GET {ECHO}?{big} HTTP/1.1\r\nHost: x\r\n\r\n"), &[414, 431]),
        ("a dot-segment path", "GET /apis/a.example.com/v1/namespaces/n/things/../../../../b.example.com/v1/x HTTP/1.1\r\nHost: x\r\n\r\n".into(), &[400]),
        ("an encoded slash", "GET /apis/a.example.com/v1/namespaces/n%2F..%2Fm/things HTTP/1.1\r\nHost: x\r\n\r\n".into(), &[400]),
        ("a garbage request line", "GARBAGE\r\n\r\n".into(), &[400]),
    ];
    for (what, bytes, want) in &cases {
        let got = raw(&s, "alice", bytes.as_bytes()).await;
        assert!(
            want.contains(&status_of(&got)),
            "{what}: got {:?}",
            got.lines().next()
        );
    }
    let paths: Vec<String> = s
        .echo
        .requests()
        .iter()
        .map(|r| r["path"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        !paths
            .iter()
            .any(|p| p.contains("smuggled") || p.contains("b.example.com") || p.contains("..")),
        "{paths:?}"
    );
    assert!(
        s.echo
            .requests()
            .iter()
            .all(|r| r["body_len"].as_u64() != Some(7)),
        "an ambiguous body reached the backend"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn identity_headers_in_every_spelling_never_reach_the_backend() {
    let s = setup_with(|_| {}).await;
    let spoof = [
        "X-Remote-User: mallory",
        "x-remote-user: mallory",
        "X-REMOTE-USER: mallory",
        "X_Remote_User: mallory",
        "x_remote_user: mallory",
        "X-Remote-Group: system:masters",
        "X_REMOTE_GROUP: system:masters",
        "X-Remote-Extra-Scopes: all",
        "X-Remote-Uid: 0",
        "Impersonate-User: mallory",
        "impersonate_user: mallory",
        "Impersonate-Group: system:masters",
        "Impersonate-Extra-Scopes: all",
        "Impersonate-Uid: 0",
        "Authorization: Bearer s3cr3t-token-bob",
        "Proxy-Authorization: Basic eDp5",
    ];
    let req = format!(
        "GET {ECHO} HTTP/1.1\r\nHost: x\r\n{}\r\nConnection: close\r\n\r\n",
        spoof.join("\r\n")
    );
    let got = raw(&s, "alice", req.as_bytes()).await;
    assert_eq!(status_of(&got), 200, "{got}");
    let seen = s
        .echo
        .requests()
        .pop()
        .expect("the backend got the request");
    assert_eq!(seen_header(&seen, "x-remote-user"), ["alice"]);
    assert_eq!(
        seen_header(&seen, "x-remote-group"),
        ["team-a", "team-b", "system:authenticated"]
    );
    for (name, _) in seen["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h[0].as_str().unwrap().to_ascii_lowercase(), ()))
    {
        let dashed = name.replace('_', "-");
        let allowed = ["x-remote-user", "x-remote-group"].contains(&dashed.as_str());
        assert!(
            allowed
                || !(dashed.starts_with("x-remote-")
                    || dashed.starts_with("impersonate-")
                    || dashed.ends_with("authorization")),
            "the backend saw {name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_and_wrong_purpose_client_certs_are_refused() {
    let s = setup_with(|_| {}).await;
    let now = time::OffsetDateTime::now_utc();
    s.w.pki.leaf_dated(
        "expired",
        &s.w.client_ca,
        "alice",
        &[],
        false,
        now - time::Duration::days(30),
        now - time::Duration::days(1),
    );
    s.w.pki.leaf_dated(
        "early",
        &s.w.client_ca,
        "alice",
        &[],
        false,
        now + time::Duration::days(1),
        now + time::Duration::days(30),
    );
    s.w.pki.leaf(
        "server-only",
        &s.w.client_ca,
        "alice",
        &[],
        &["alice.example"],
        true,
    );
    let get = format!("GET {ECHO} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    for cert in ["expired", "early", "server-only"] {
        let got = raw(&s, cert, get.as_bytes()).await;
        assert!(got.is_empty() || status_of(&got) == 401, "{cert}: {got}");
    }
    assert!(s.echo.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn request_and_connection_limits_answer_429() {
    let s = setup_with(|cfg| cfg.limits = (400, 2, 0)).await;
    let slow = "/apis/a.example.com/v1/namespaces/n/things/slow";
    let c = s.w.client(Some("alice"));
    let addr = s.gw.addr;
    let running: Vec<_> = (0..2)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.get(addr, slow).await.status })
        })
        .collect();
    let slow_arrived = |s: &Setup, n: usize| {
        let seen = s
            .echo
            .requests()
            .iter()
            .filter(|r| r["path"].as_str().is_some_and(|p| p.ends_with("/slow")))
            .count();
        async move { seen == n }
    };
    assert!(support::eventually(10, || slow_arrived(&s, 2)).await);
    let third = c.get(addr, ECHO).await;
    third.assert_status(429);
    assert_eq!(third.headers["retry-after"], "1");
    for r in running {
        assert_eq!(r.await.unwrap(), 200);
    }
    assert_eq!(
        c.get(addr, ECHO).await.status,
        200,
        "the permits were not released"
    );

    let s = setup_with(|cfg| cfg.limits = (400, 0, 1)).await;
    let p = |n: &str| s.w.pki.path(n);
    let _ = p;
    let first = support::Client::new(
        &s.w.pki.path("ca.crt"),
        Some((s.w.pki.path("alice.crt"), s.w.pki.path("alice.key"))),
    );
    // one connection held open by a slow request; a second connection gets 429
    let addr = s.gw.addr;
    let held = tokio::spawn(async move { first.get(addr, slow).await.status });
    assert!(support::eventually(10, || slow_arrived(&s, 1)).await);
    s.w.client(Some("alice"))
        .get(addr, ECHO)
        .await
        .assert_status(429);
    assert_eq!(held.await.unwrap(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn faults_end_in_a_clean_status_and_other_apiservices_keep_serving() {
    let w = World::new();
    let good = w
        .backend("good", "good-svc", "good-ns", &w.addon_ca, None)
        .await;
    w.register(
        "good.json",
        "good.example.com",
        "v1",
        100,
        10,
        "good-svc",
        "good-ns",
        &w.addon_ca,
    );
    // a backend that accepts TCP and never answers
    let hang = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hang_addr = hang.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = hang.accept().await {
            held.push(sock);
        }
    });
    // a backend that resets every connection at once
    let reset = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let reset_addr = reset.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((sock, _)) = reset.accept().await {
            // A zero linger turns the close into a TCP reset.
            if let Ok(std_sock) = sock.into_std() {
                let _ = socket2::SockRef::from(&std_sock).set_linger(Some(Duration::ZERO));
            }
        }
    });
    w.register(
        "hang.json",
        "hang.example.com",
        "v1",
        100,
        10,
        "hang-svc",
        "x",
        &w.addon_ca,
    );
    w.register(
        "reset.json",
        "reset.example.com",
        "v1",
        100,
        10,
        "reset-svc",
        "x",
        &w.addon_ca,
    );
    w.register(
        "nodns.json",
        "nodns.example.com",
        "v1",
        100,
        10,
        "nodns-svc",
        "nowhere",
        &w.addon_ca,
    );
    let mut cfg = w.config(&[(&good, good.addr)]);
    cfg.resolve
        .insert(("hang-svc.x.svc".into(), 443), vec![hang_addr]);
    cfg.resolve
        .insert(("reset-svc.x.svc".into(), 443), vec![reset_addr]);
    cfg.request_timeout = Duration::from_secs(3);
    cfg.availability_timeout = Duration::from_millis(500);
    let gw = w.gateway(cfg).await;
    let c = w.client(Some("alice"));
    for group in ["hang", "reset", "nodns"] {
        let a = c
            .get(
                gw.addr,
                &format!("/apis/{group}.example.com/v1/namespaces/n/things"),
            )
            .await;
        let st = a.assert_status(if group == "hang" { a.status } else { 503 });
        assert!([503, 504].contains(&a.status), "{group}: {st}");
    }
    // the good one still serves
    assert_eq!(
        c.get(
            gw.addr,
            "/apis/good.example.com/v1/namespaces/n/things/echo"
        )
        .await
        .status,
        200
    );

    // an APIService deleted while its request is in flight: the request finishes cleanly
    let slow = tokio::spawn({
        let c = c.clone();
        let addr = gw.addr;
        async move {
            c.get(addr, "/apis/good.example.com/v1/namespaces/n/things/slow")
                .await
                .status
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::remove_file(w.pki.path("apiservices/good.json")).unwrap();
    assert_eq!(slow.await.unwrap(), 200);
    let gone = support::eventually(5, || async {
        c.get(gw.addr, "/apis/good.example.com/v1/x").await.status == 404
    })
    .await;
    assert!(gone);
    let _ = Request::get("/").body(Bytes::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn request_bodies_over_the_limit_get_413_and_never_reach_the_backend() {
    let s = setup_with(|cfg| cfg.max_request_body_bytes = Some(1000)).await;
    let c = s.w.client(Some("alice"));
    let post = |n: usize| {
        Request::post(ECHO)
            .body(Bytes::from(vec![b'x'; n]))
            .unwrap()
    };
    assert_eq!(c.send(s.gw.addr, post(500)).await.status, 200);
    let st = c.send(s.gw.addr, post(2000)).await.assert_status(413);
    assert!(
        st["message"].as_str().unwrap().contains("1000 bytes"),
        "{st}"
    );
    let chunk = "x".repeat(700);
    let chunked = format!(
        "POST {ECHO} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{chunk}\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len(),
        chunk.len()
    );
    assert_eq!(status_of(&raw(&s, "alice", chunked.as_bytes()).await), 413);
    assert!(
        s.echo
            .requests()
            .iter()
            .all(|r| r["body_len"].as_u64().unwrap_or(0) <= 1000),
        "an oversized body reached the backend"
    );
    // GETs and watches are not limited
    assert_eq!(c.get(s.gw.addr, ECHO).await.status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_head_is_cut_off_and_guessing_tokens_gets_nothing() {
    let s = setup_with(|cfg| cfg.header_read_timeout = Duration::from_millis(500)).await;
    // Slowloris: the head never completes; the gateway closes the connection on its own.
    let p = |n: &str| s.w.pki.path(n);
    let roots =
        apigw::tls::root_store(&apigw::tls::load_certs(&p("ca.crt")).unwrap(), "ca").unwrap();
    let mut tls = rustls::ClientConfig::builder_with_provider(apigw::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(s.gw.addr).await.unwrap();
    let mut stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    stream
        .write_all(b"GET /apis HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert_eq!(
        closed,
        Ok(true),
        "a slow request head held the connection open"
    );

    // Guessing tokens: every guess is a 401 and none reaches the backend.
    let c = s.w.client(None);
    for i in 0..200 {
        let guess = Request::get(ECHO)
            .header("authorization", format!("Bearer s3cr3t-token-b{i:02}"))
            .body(Bytes::new())
            .unwrap();
        c.send(s.gw.addr, guess).await.assert_status(401);
    }
    assert!(s.echo.requests().is_empty());
}
