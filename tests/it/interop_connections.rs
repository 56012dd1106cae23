//! Interop: the gateway's connections to a backend no one here wrote (the Go `net/http` addon
//! server in `tests/interop/goaddon`): Go closing idle connections at its own pace, many
//! clients at once over keep-alive connections, and the same Go server standing in as the
//! delegate (the main API server) for paths no APIService claims.

use crate::support;

use crate::support::exec::{Exec, V5};
use crate::support::goaddon::{GoAddon, GoOpts};
use crate::support::World;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const WIDGETS: &str = "/apis/interop.example.com/v1/namespaces/default/widgets";

/// A gateway in front of the Go addon (registered as `v1.interop.example.com`), once the
/// addon is available through it.
async fn behind_gateway(world: &World, opts: GoOpts) -> (GoAddon, support::Gateway) {
    GoAddon::behind_gateway(world, opts, |_| {}).await
}

/// Ordinary requests go to a backend that offers both protocols over pooled HTTP/1.1 by
/// default, and over HTTP/2 with `--backend-http2-requests`, as Go's own log of each request
/// says (its protocol, method and path).
#[tokio::test(flavor = "multi_thread")]
async fn ordinary_requests_take_http2_when_asked() {
    for http2_requests in [false, true] {
        let world = World::new();
        // Waits for a list through the gateway to answer 200.
        let (addon, _gw) = GoAddon::behind_gateway(&world, GoOpts::default(), |cfg| {
            cfg.proxy.http2_requests = http2_requests
        })
        .await;
        let log = std::fs::read_to_string(&addon.log).unwrap_or_default();
        let protocol = if http2_requests {
            "HTTP/2.0"
        } else {
            "HTTP/1.1"
        };
        let line = format!(r#"GET {protocol} host="widgets.interop.svc:443" uri="{WIDGETS}""#);
        assert!(
            log.contains(&line),
            "--backend-http2-requests={http2_requests}: no {line:?} in\n{log}"
        );
    }
}

/// A TLS connection to the gateway as alice, offering HTTP/1.1 only.
async fn alice_tls(
    world: &World,
    addr: SocketAddr,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let p = |n: &str| world.pki.path(n);
    let roots =
        apigw_core::tls::root_store(&apigw_core::tls::load_certs(&p("ca.crt")).unwrap(), "ca")
            .unwrap();
    let mut tls = rustls::ClientConfig::builder_with_provider(apigw_core::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            apigw_core::tls::load_certs(&p("alice.crt")).unwrap(),
            apigw_core::tls::load_key(&p("alice.key")).unwrap(),
        )
        .unwrap();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// One keep-alive HTTP/1.1 connection to the gateway as alice.
async fn keep_alive(world: &World, addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let tls = alice_tls(world, addr).await;
    let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

/// One GET on `send`'s connection: the status and the body.
async fn get(send: &mut SendRequest<Full<Bytes>>, path: &str) -> (u16, Bytes) {
    send.ready()
        .await
        .expect("the gateway closed a keep-alive connection");
    let req = Request::get(path)
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let res = tokio::time::timeout(support::ANSWER_WITHIN, send.send_request(req))
        .await
        .expect("no answer from the gateway")
        .expect("the exchange with the gateway failed");
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, body)
}

/// Go closes a connection idle for its `IdleTimeout` whenever it likes, including just as the
/// gateway sends the next request on it. Requests spaced around that timeout, over one client
/// connection, all succeed: a connection Go closed is replaced, and a GET Go never answered is
/// sent again.
#[tokio::test(flavor = "multi_thread")]
async fn requests_spanning_go_idle_closes_all_succeed() {
    let world = World::new();
    let idle = Duration::from_millis(200);
    let opts = GoOpts {
        idle_timeout: Some(idle),
        ..GoOpts::default()
    };
    let (addon, gw) = behind_gateway(&world, opts).await;
    let before = addon.stats().await["connections_total"].as_u64().unwrap();
    let mut send = keep_alive(&world, gw.addr).await;
    let mut failures = Vec::new();
    // Pauses from well inside to well past the idle timeout, in 5 ms steps around it.
    let pauses: Vec<u64> = (0..60).map(|i| 150 + (i % 21) * 5).collect();
    for (i, pause) in pauses.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(*pause)).await;
        let (status, body) = get(&mut send, WIDGETS).await;
        if status != 200 {
            failures.push(format!(
                "request {i} after {pause} ms: {status} {}",
                String::from_utf8_lossy(&body)
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    let after = addon.stats().await["connections_total"].as_u64().unwrap();
    // Go did close idle connections under the gateway (each pause past 200 ms needs a new one).
    assert!(
        after - before >= 10,
        "Go accepted only {} new connections: the idle timeout never struck",
        after - before
    );
}

/// Sixteen clients, each on its own keep-alive connection to the gateway, fifty requests each,
/// at once: every one answered 200 by Go, and the gateway reused its connections to Go rather
/// than opening one per request.
#[tokio::test(flavor = "multi_thread")]
async fn sixteen_connections_of_fifty_requests_without_an_error() {
    let world = World::new();
    let (addon, gw) = behind_gateway(&world, GoOpts::default()).await;
    let create = Request::post(WIDGETS)
        .header("content-type", "application/json")
        .body(Bytes::from_static(
            br#"{"apiVersion":"interop.example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":1}}"#,
        ))
        .unwrap();
    let created = world.client(Some("alice")).send(gw.addr, create).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let before = addon.stats().await;
    let clients = (0..16).map(|c| {
        let world = &world;
        async move {
            let mut send = keep_alive(world, gw.addr).await;
            let mut failures = Vec::new();
            for i in 0..50 {
                let path = if i % 2 == 0 {
                    WIDGETS.to_string()
                } else {
                    format!("{WIDGETS}/w")
                };
                let (status, body) = get(&mut send, &path).await;
                if status != 200 {
                    failures.push(format!(
                        "client {c} request {i}: {status} {}",
                        String::from_utf8_lossy(&body)
                    ));
                }
            }
            failures
        }
    });
    let failures: Vec<String> = futures_util::future::join_all(clients)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
    let after = addon.stats().await;
    let count = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap();
    assert!(
        count(&after, "requests_total") - count(&before, "requests_total") >= 800,
        "{before} {after}"
    );
    let opened = count(&after, "connections_total") - count(&before, "connections_total");
    assert!(
        opened <= 64,
        "the gateway opened {opened} connections to Go for 800 requests from 16 clients"
    );
}

/// The same Go server as the delegate (the main API server): a path no APIService claims
/// reaches it in origin form with `Host` naming the delegate, as alice; its discovery is
/// merged; and an upgrade (WebSocket exec) to it is spliced through.
#[tokio::test(flavor = "multi_thread")]
async fn a_go_delegate_gets_unclaimed_paths_with_host_and_upgrades() {
    let world = World::new();
    let host = "apiserver.delegate.svc";
    let addon = GoAddon::start(
        &world,
        GoOpts {
            host: host.into(),
            ..GoOpts::default()
        },
    )
    .await;
    let mut cfg = world.config(&[]);
    addon.resolve(&mut cfg);
    cfg.proxy.delegate = Some(apigw_gateway::config::Delegate {
        host: host.into(),
        port: 443,
        ca_file: Some(world.pki.path("addon-ca.crt")),
        impersonation_token_file: None,
    });
    let gw = world.gateway(cfg).await;
    let alice = world.client(Some("alice"));

    let echo = alice
        .send(
            gw.addr,
            Request::post("/echo/some/where?x=1")
                .header("content-type", "application/json")
                .header("x-remote-user", "mallory")
                .body(Bytes::from_static(b"{\"a\":1}"))
                .unwrap(),
        )
        .await;
    assert_eq!(echo.status, 200, "{:?}", echo.body);
    let seen = echo.json();
    assert_eq!(seen["host"], format!("{host}:443"), "{seen}");
    assert_eq!(seen["requestURI"], "/echo/some/where?x=1", "{seen}");
    assert_eq!(seen["method"], "POST", "{seen}");
    assert_eq!(seen["user"], "alice", "{seen}");
    assert_eq!(seen["bodyBytes"], 7, "{seen}");
    let groups = seen["groups"].as_array().unwrap();
    assert!(groups.iter().any(|g| g == "system:authenticated"), "{seen}");

    // Its groups join the gateway's discovery, fetched from Go itself.
    let listed = support::eventually(20, || {
        let alice = alice.clone();
        async move {
            let apis = alice.get(gw.addr, "/apis").await;
            apis.status == 200
                && apis.json()["groups"]
                    .as_array()
                    .is_some_and(|g| g.iter().any(|g| g["name"] == "interop.example.com"))
        }
    })
    .await;
    assert!(
        listed,
        "the delegate's interop.example.com never joined /apis"
    );

    // The delegate serves widgets too, exec included: an upgrade through the gateway.
    let create = Request::post(WIDGETS)
        .header("content-type", "application/json")
        .body(Bytes::from_static(
            br#"{"apiVersion":"interop.example.com/v1","kind":"Widget","metadata":{"name":"box"}}"#,
        ))
        .unwrap();
    let created = alice.send(gw.addr, create).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let stdout = exec_echo(&world, gw.addr, "box").await;
    assert_eq!(stdout, "hi there\n");
}

/// Runs `echo hi there` in widget `name` over a v5.channel.k8s.io WebSocket through the
/// gateway; returns what arrived on stdout once the server closed the session.
async fn exec_echo(world: &World, addr: SocketAddr, name: &str) -> String {
    let tls = alice_tls(world, addr).await;
    let url = format!("wss://localhost:{}{WIDGETS}/{name}/exec", addr.port());
    let exec = Exec::start(tls, &url, &["echo", "hi there"], V5).await;
    assert_eq!(exec.protocol, V5);
    let done = exec.finish().await;
    assert_eq!(done.status["status"], "Success", "{:?}", done);
    done.stdout
}

/// `apigw doctor` walks the request path to the Go addon: its own probe (HTTP/1.1, `Host`
/// naming the service, the proxy client certificate) gets Go's APIResourceList.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_probes_a_go_addon() {
    let world = World::new();
    let addon = GoAddon::start(&world, GoOpts::default()).await;
    addon.register(&world);
    let mut cfg = world.config(&[]);
    addon.resolve(&mut cfg);
    let opts = apigw::doctor::Options {
        names: Vec::new(),
        ca_dir: world.pki.path("doctor-ca"),
        trust_file: None,
    };
    let report = apigw::doctor::diagnose(&cfg, &opts).await;
    assert!(!report.failed(), "{}", report.to_text());
    let svc = report
        .service("v1.interop.example.com")
        .unwrap_or_else(|| panic!("{}", report.to_text()));
    let discovery = svc
        .steps
        .iter()
        .find(|s| s.check == "discovery")
        .unwrap_or_else(|| panic!("{}", report.to_text()));
    assert_eq!(
        discovery.status,
        apigw::doctor::Status::Ok,
        "{}",
        report.to_text()
    );
    assert!(
        discovery.message.contains("APIResourceList"),
        "{}",
        report.to_text()
    );
    let log = std::fs::read_to_string(&addon.log).unwrap();
    assert!(
        log.contains(r#"host="widgets.interop.svc:443" uri="/apis/interop.example.com/v1""#),
        "{log}"
    );
}

/// A backend that speaks only one of HTTP/1.1 and HTTP/2 by ALPN (Go's `net/http` with
/// `Server.Protocols` set, whose TLS refuses any other offer with `no_application_protocol`)
/// is served, not reported Available while its requests fail: a create with a body, a get, a
/// list and a watch all go through, and the APIService is Available. With HTTP/2 alone, the
/// gateway's ordinary requests go over HTTP/2 once the backend refused HTTP/1.1.
#[tokio::test(flavor = "multi_thread")]
async fn a_backend_that_speaks_only_http2_or_only_http1_is_served() {
    for protocols in ["h2", "http/1.1"] {
        let world = World::new();
        let opts = GoOpts {
            args: vec![format!("-protocols={protocols}")],
            ..GoOpts::default()
        };
        // Waits for a list through the gateway to answer 200.
        let (addon, gw) = behind_gateway(&world, opts).await;
        let alice = world.client(Some("alice"));
        let widget = serde_json::json!({
            "apiVersion": "interop.example.com/v1", "kind": "Widget",
            "metadata": {"name": "only-one", "namespace": "default"},
            "spec": {"color": "teal"}
        });
        let create = Request::post(WIDGETS)
            .header("content-type", "application/json")
            .body(Bytes::from(widget.to_string()))
            .unwrap();
        let created = alice.send(gw.addr, create).await;
        assert_eq!(created.status, 201, "{protocols}: {:?}", created.body);
        let got = alice.get(gw.addr, &format!("{WIDGETS}/only-one")).await;
        assert_eq!(got.status, 200, "{protocols}: {:?}", got.body);
        assert_eq!(got.json()["spec"]["color"], "teal", "{protocols}");
        // A watch from the start sees the widget, then its stream is cut by the timeout.
        let watch = alice
            .get(gw.addr, &format!("{WIDGETS}?watch=1&timeoutSeconds=1"))
            .await;
        assert_eq!(watch.status, 200, "{protocols}: {:?}", watch.body);
        assert!(
            String::from_utf8_lossy(&watch.body).contains("only-one"),
            "{protocols}: {:?}",
            watch.body
        );
        let svc = alice
            .get(
                gw.addr,
                "/apis/apiregistration.k8s.io/v1/apiservices/v1.interop.example.com",
            )
            .await
            .json();
        let available = svc["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Available"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(available["status"], "True", "{protocols}: {svc}");
        // Go's counters are read over HTTP/1.1, which the h2-only server refuses; that it
        // answered the gateway at all is its proof.
        if protocols == "http/1.1" {
            let h2 = addon.stats().await["h2_connections_total"].as_i64();
            assert_eq!(
                h2,
                Some(0),
                "HTTP/1.1 only, yet Go saw an HTTP/2 connection"
            );
        }
    }
}
