//! Interop: the gateway in front of backends no one here wrote. The first is the Go addon
//! server in `tests/interop/goaddon` (Go's standard `net/http`, strict about HTTP/1.1 and
//! HTTP/2, with kube's requestheader authentication); see `support::goaddon`. Through the
//! gateway to it: CRUD, WebSocket exec (v5 and v4), more watches than Go allows streams on one
//! HTTP/2 connection, bookmarks, a graceful backend restart, and a 64 MiB list (bounded
//! gateway memory) with gzip passed through. Each test runs its own Go server and gateway.

use crate::support;

use crate::support::exec::{Exec, V4, V5};
use crate::support::goaddon::{GoAddon, GoOpts};
use crate::support::{Client, World};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

const WIDGETS: &str = "/apis/interop.example.com/v1/namespaces/default/widgets";

#[tokio::test(flavor = "multi_thread")]
async fn a_go_net_http_addon_serves_widgets_through_the_gateway() {
    let world = World::new();
    let addon = GoAddon::start(&world, GoOpts::default()).await;
    addon.register(&world);
    let mut cfg = world.config(&[]);
    cfg.proxy
        .resolve
        .insert((addon.host.clone(), 443), vec![addon.addr]);
    let gw = world.gateway(cfg).await;
    let alice = world.client(Some("alice"));

    // The APIService becomes available once the gateway's checks reach the Go server.
    let mut last = None;
    for _ in 0..100 {
        let answer = alice.get(gw.addr, "/apis/interop.example.com/v1").await;
        if answer.status == 200 {
            last = None;
            break;
        }
        last = Some(answer);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    if let Some(a) = last {
        panic!(
            "interop.example.com/v1 never answered 200 through the gateway; last: {} {}",
            a.status,
            String::from_utf8_lossy(&a.body)
        );
    }

    let widget = serde_json::json!({
        "apiVersion": "interop.example.com/v1", "kind": "Widget",
        "metadata": {"name": "smoke"}, "spec": {"color": "red", "size": 3}
    });
    let created = alice
        .send(
            gw.addr,
            Request::post(WIDGETS)
                .header("content-type", "application/json")
                .body(Bytes::from(widget.to_string()))
                .unwrap(),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);

    let got = alice.get(gw.addr, &format!("{WIDGETS}/smoke")).await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    let w = got.json();
    assert_eq!(w["spec"]["color"], "red", "{w}");
    assert_eq!(w["metadata"]["namespace"], "default", "{w}");
    let seen = |name: &str| {
        got.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(seen("x-interop-host"), "widgets.interop.svc:443");
    let uri = seen("x-interop-request-uri");
    assert!(uri.starts_with("/apis/"), "not in origin form: {uri:?}");
    assert_eq!(seen("x-interop-user"), "alice");
}

// ---------------------------------------------------------------------------------------------
// Streaming, upgrades, restarts and big bodies through the gateway to the Go addon.
// ---------------------------------------------------------------------------------------------

/// A failure guard for anything that should happen promptly, never a performance bound.
const PATIENCE: Duration = Duration::from_secs(20);

/// The Go addon behind a gateway that has found it available, and alice's client.
struct Stack {
    world: World,
    addon: GoAddon,
    gw: support::Gateway,
    alice: Client,
}

async fn stack(opts: GoOpts) -> Stack {
    stack_with(opts, |_| {}).await
}

async fn stack_with(opts: GoOpts, tweak: impl FnOnce(&mut apigw_gateway::config::Config)) -> Stack {
    let world = World::new();
    let addon = GoAddon::start(&world, opts).await;
    addon.register(&world);
    let mut cfg = world.config(&[]);
    addon.resolve(&mut cfg);
    tweak(&mut cfg);
    let gw = world.gateway(cfg).await;
    let alice = world.client(Some("alice"));
    let s = Stack {
        world,
        addon,
        gw,
        alice,
    };
    s.await_widgets_answer(PATIENCE, "at start").await;
    s
}

impl Stack {
    /// Waits (up to `within`) until listing widgets through the gateway answers 200; returns
    /// the statuses (or transport errors) seen before that, in order.
    async fn await_widgets_answer(&self, within: Duration, when: &str) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let req = Request::get(WIDGETS).body(Bytes::new()).unwrap();
            match self.alice.try_send(self.gw.addr, req).await {
                Ok(a) if a.status == 200 => return seen,
                Ok(a) => seen.push(format!("{} {}", a.status, String::from_utf8_lossy(&a.body))),
                Err(e) => seen.push(format!("error: {e}")),
            }
            if tokio::time::Instant::now() > deadline {
                panic!("listing widgets through the gateway never answered 200 {when} (within {within:?}); seen: {seen:#?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The widgets list's resourceVersion, through the gateway.
    async fn list_rv(&self) -> String {
        let list = self.alice.get(self.gw.addr, WIDGETS).await;
        assert_eq!(list.status, 200, "{:?}", list.body);
        let list = list.json();
        list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_else(|| panic!("no resourceVersion in {list}"))
            .to_string()
    }

    /// Creates widget `default/name` through the gateway, as alice.
    async fn create(&self, name: &str) -> Value {
        let widget = json!({
            "apiVersion": "interop.example.com/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": {"color": "blue", "size": 1}
        });
        let req = Request::post(WIDGETS)
            .header("content-type", "application/json")
            .body(Bytes::from(widget.to_string()))
            .unwrap();
        let created = self.alice.send(self.gw.addr, req).await;
        assert_eq!(created.status, 201, "{:?}", created.body);
        created.json()
    }

    /// Waits until the Go server's `/debug/stats` `field` equals `want`.
    async fn stat_becomes(&self, field: &str, want: i64) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let stats = self.addon.stats().await;
            if stats[field].as_i64() == Some(want) {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "the Go server's {field} stayed {} (not {want}) for {PATIENCE:?}: {stats}",
                    stats[field]
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Alice's TLS settings for the gateway, offering `alpn`.
    fn tls(&self, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        let p = |n: &str| self.world.pki.path(n);
        let cas = apigw_core::tls::load_certs(&p("ca.crt")).unwrap();
        let roots = apigw_core::tls::root_store(&cas, "gateway CA").unwrap();
        let mut tls = rustls::ClientConfig::builder_with_provider(apigw_core::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(
                apigw_core::tls::load_certs(&p("alice.crt")).unwrap(),
                apigw_core::tls::load_key(&p("alice.key")).unwrap(),
            )
            .unwrap();
        tls.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
        Arc::new(tls)
    }

    async fn tls_stream(&self, alpn: &[&[u8]]) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(self.gw.addr).await.unwrap();
        tokio_rustls::TlsConnector::from(self.tls(alpn))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .expect("TLS handshake with the gateway")
    }

    /// `GET path_and_query` on a new HTTP/1.1 connection; the test reads the body itself.
    async fn get_h1(&self, path_and_query: &str, headers: &[(&str, &str)]) -> Response<Incoming> {
        let tls = self.tls_stream(&[b"http/1.1"]).await;
        let (mut send, conn) = http1::handshake(TokioIo::new(tls)).await.unwrap();
        tokio::spawn(conn);
        let mut req = Request::get(path_and_query)
            .header("host", format!("localhost:{}", self.gw.addr.port()));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        tokio::time::timeout(
            PATIENCE,
            send.send_request(req.body(Full::new(Bytes::new())).unwrap()),
        )
        .await
        .expect("no response head from the gateway in time")
        .expect("the gateway answered")
    }

    /// A watch of widgets with `query` (after `?`) on a new HTTP/1.1 connection.
    async fn watch_h1(&self, query: &str) -> Watch {
        Watch::new(self.get_h1(&format!("{WIDGETS}?{query}"), &[]).await).await
    }

    /// A watch of widgets with `query` as one more stream on the h2 connection `send`.
    async fn watch_h2(&self, send: &mut http2::SendRequest<Full<Bytes>>, query: &str) -> Watch {
        let req = Request::get(format!(
            "https://localhost:{}{WIDGETS}?{query}",
            self.gw.addr.port()
        ))
        .version(http::Version::HTTP_2)
        .body(Full::new(Bytes::new()))
        .unwrap();
        let res = tokio::time::timeout(PATIENCE, send.send_request(req))
            .await
            .expect("no response head from the gateway in time")
            .expect("the gateway answered");
        Watch::new(res).await
    }
}

/// A watch response read one event at a time.
struct Watch {
    body: Incoming,
    buf: Vec<u8>,
}

/// How a watch's response ended.
#[derive(Debug)]
struct Ending {
    /// Whole events that arrived before the end.
    events: Vec<Value>,
    /// Bytes after the last newline (a partial line or an unterminated error body).
    leftover: String,
    /// The body's error, if it did not end cleanly.
    error: Option<String>,
}

impl Watch {
    async fn new(res: Response<Incoming>) -> Self {
        let status = res.status();
        if status != StatusCode::OK {
            let body = res.into_body().collect().await.map(|b| b.to_bytes());
            panic!("the watch answered {status}: {body:?}");
        }
        Self {
            body: res.into_body(),
            buf: Vec::new(),
        }
    }

    /// The next event within `within`; `None` when the stream ended (cleanly or not).
    async fn next_within(&mut self, within: Duration) -> Option<Value> {
        tokio::time::timeout(within, self.next_line())
            .await
            .unwrap_or_else(|_| panic!("no watch event arrived within {within:?}"))
    }

    async fn next(&mut self) -> Option<Value> {
        self.next_within(PATIENCE).await
    }

    fn take_line(&mut self) -> Option<Value> {
        let end = self.buf.iter().position(|b| *b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=end).collect();
        Some(serde_json::from_slice(&line).unwrap_or_else(|e| {
            panic!(
                "not a JSON event ({e}): {:?}",
                String::from_utf8_lossy(&line)
            )
        }))
    }

    async fn next_line(&mut self) -> Option<Value> {
        loop {
            if let Some(event) = self.take_line() {
                return Some(event);
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) | None => return None,
            }
        }
    }

    /// The next event, which must be `kind` of widget `name`; returns the event.
    async fn expect(&mut self, kind: &str, name: &str) -> Value {
        let event = self.next().await.expect("the watch ended early");
        assert_eq!(
            (
                event["type"].as_str(),
                event["object"]["metadata"]["name"].as_str()
            ),
            (Some(kind), Some(name)),
            "{event}"
        );
        event
    }

    /// Reads to the end of the response and says how it ended.
    async fn ending(mut self) -> Ending {
        let read = async {
            let mut events = Vec::new();
            let error = loop {
                while let Some(event) = self.take_line() {
                    events.push(event);
                }
                match self.body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            self.buf.extend_from_slice(&data);
                        }
                    }
                    Some(Err(e)) => break Some(format!("{e:?}")),
                    None => break None,
                }
            };
            while let Some(event) = self.take_line() {
                events.push(event);
            }
            Ending {
                events,
                leftover: String::from_utf8_lossy(&self.buf).into_owned(),
                error,
            }
        };
        tokio::time::timeout(PATIENCE, read)
            .await
            .expect("the watch did not end")
    }
}

impl Stack {
    /// Starts `argv` in widget `default/name`, offering `protocols` (see [`Exec::start`]).
    async fn exec(&self, name: &str, argv: &[&str], protocols: &str) -> Exec {
        let url = format!(
            "wss://localhost:{}{WIDGETS}/{name}/exec",
            self.gw.addr.port()
        );
        let tls = self.tls_stream(&[b"http/1.1"]).await;
        Exec::start(tls, &url, argv, protocols).await
    }
}

/// WebSocket exec through the gateway to Go's hand-written RFC 6455 server: with v5, `cat`
/// echoes stdin (a resize message in between is harmless) until the client closes stdin with
/// `[255, 0]`, then reports Success on channel 3; offering only v4 negotiates v4 (`echo hi`);
/// `env` shows the identity the gateway authenticated (alice, her certificate's groups and
/// `system:authenticated`), not the `X-Remote-User`/`X-Remote-Group` the client sent; `exit 3`
/// is a Failure with ExitCode 3; and no session stays open on the Go server afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn websocket_exec_through_the_gateway_to_go() {
    let s = stack(GoOpts::default()).await;
    s.create("box").await;

    let mut cat = s.exec("box", &["cat"], V5).await;
    assert_eq!(cat.protocol, V5);
    cat.send(0, b"hello\n").await;
    assert_eq!(cat.next_on(1).await, b"hello\n");
    assert_eq!(
        s.addon.stats().await["execs_open"],
        1,
        "one session open on the Go server"
    );
    cat.send(4, br#"{"Width":80,"Height":24}"#).await;
    cat.send(0, b"again").await;
    assert_eq!(cat.next_on(1).await, b"again");
    cat.send(255, &[0]).await;
    let done = cat.finish().await;
    assert_eq!(
        done.status,
        json!({"metadata": {}, "status": "Success"}),
        "{done:?}"
    );
    assert_eq!(done.stdout, "", "nothing after stdin closed: {done:?}");

    let v4 = s.exec("box", &["echo", "hi"], V4).await;
    assert_eq!(v4.protocol, V4, "only v4 was offered");
    let echoed = v4.finish().await;
    assert_eq!(echoed.stdout, "hi\n", "{echoed:?}");
    assert_eq!(echoed.status["status"], "Success", "{echoed:?}");

    let env = s.exec("box", &["env"], V5).await.finish().await;
    let lines: Vec<&str> = env.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"USER=alice"), "{env:?}");
    let groups: Vec<&str> = lines
        .iter()
        .find_map(|l| l.strip_prefix("GROUPS="))
        .unwrap_or_else(|| panic!("no GROUPS line: {env:?}"))
        .split(',')
        .collect();
    for group in ["team-a", "team-b", "system:authenticated"] {
        assert!(
            groups.contains(&group),
            "{group} is missing from {groups:?}"
        );
    }
    assert!(
        !groups.contains(&"system:masters"),
        "a spoofed group reached Go: {groups:?}"
    );
    assert!(
        !env.stdout.contains("mallory"),
        "a spoofed user reached Go: {env:?}"
    );
    assert_eq!(env.status["status"], "Success", "{env:?}");
    // The control: Go does take these headers from whoever holds the proxy certificate, so
    // only the gateway's stripping kept mallory out above.
    let direct = s
        .addon
        .direct(
            Request::get("/echo")
                .header("x-remote-user", "mallory")
                .header("x-remote-group", "system:masters")
                .body(Bytes::new())
                .unwrap(),
        )
        .await;
    assert_eq!(direct.status, 200, "{:?}", direct.body);
    let direct = direct.json();
    assert_eq!(
        (&direct["user"], &direct["groups"]),
        (&json!("mallory"), &json!(["system:masters"])),
        "{direct}"
    );

    let failed = s.exec("box", &["exit", "3"], V5).await.finish().await;
    assert_eq!(
        failed.status,
        json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
               "message": "command terminated with non-zero exit code: error executing command [exit 3], exit code 3",
               "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}),
        "{failed:?}"
    );

    s.stat_becomes("execs_open", 0).await;
}

/// 300 concurrent watches through the gateway, more than the 250 streams Go's HTTP/2 server
/// allows on one connection: 100 streams on each of three front-door h2 connections, all at
/// the same resourceVersion. All 300 are open on the Go server at once (so the gateway spread
/// them over more than one backend HTTP/2 connection instead of queueing the rest), one create
/// reaches every one of them as ADDED, and when the client drops them all, Go sees none left.
#[tokio::test(flavor = "multi_thread")]
async fn more_than_250_concurrent_watches_reach_go() {
    // No periodic availability checks (each is a new connection, maybe h2) during the count.
    let s = stack_with(GoOpts::default(), |cfg| {
        cfg.availability.interval = Duration::from_secs(3600)
    })
    .await;
    let rv = s.list_rv().await;
    let before = s.addon.stats().await;
    assert_eq!(before["watches_open"], 0, "{before}");

    let query = format!("watch=true&resourceVersion={rv}");
    let mut conns = Vec::new();
    let mut watches = Vec::new();
    for _ in 0..3 {
        let send = s.alice.h2_connection(s.gw.addr).await;
        let opens = (0..100).map(|_| {
            let mut send = send.clone();
            let (s, query) = (&s, &query);
            async move { s.watch_h2(&mut send, query).await }
        });
        watches.extend(futures_util::future::join_all(opens).await);
        conns.push(send);
    }
    assert_eq!(watches.len(), 300);
    s.stat_becomes("watches_open", 300).await;

    let created = s.create("for-all").await;
    let want_rv = created["metadata"]["resourceVersion"].clone();
    let seen = watches.iter_mut().map(|w| async move {
        let event = w.expect("ADDED", "for-all").await;
        event["object"]["metadata"]["resourceVersion"].clone()
    });
    let rvs = futures_util::future::join_all(seen).await;
    assert!(rvs.iter().all(|rv| *rv == want_rv), "{want_rv} vs {rvs:?}");

    let after = s.addon.stats().await;
    let h2_used = after["h2_connections_total"].as_i64().unwrap()
        - before["h2_connections_total"].as_i64().unwrap();
    assert!(
        h2_used > 1,
        "300 watches went over {h2_used} new HTTP/2 connection(s) to Go: {before} -> {after}"
    );
    eprintln!("300 watches used {h2_used} HTTP/2 connections to Go ({before} -> {after})");

    drop(watches);
    drop(conns);
    s.stat_becomes("watches_open", 0).await;
}

/// BOOKMARK events (Go sends one every 200 ms to a watch with `allowWatchBookmarks=true`)
/// come through the gateway one by one, over an HTTP/1.1 and an HTTP/2 front door alike: the
/// first arrives within a few seconds while the watch stays open, carrying the resourceVersion
/// the watch is at, and after a create the ADDED event and then a bookmark at its version.
#[tokio::test(flavor = "multi_thread")]
async fn bookmarks_stream_through_the_gateway_event_by_event() {
    let s = stack(GoOpts {
        bookmark_interval: Some(Duration::from_millis(200)),
        ..GoOpts::default()
    })
    .await;
    let mut h2 = s.alice.h2_connection(s.gw.addr).await;
    for front in ["HTTP/1.1", "HTTP/2"] {
        let rv = s.list_rv().await;
        let query = format!("watch=true&allowWatchBookmarks=true&resourceVersion={rv}");
        let mut watch = match front {
            "HTTP/1.1" => s.watch_h1(&query).await,
            _ => s.watch_h2(&mut h2, &query).await,
        };
        let first = watch
            .next_within(Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("{front}: the watch ended before any event"));
        assert_eq!(first["type"], "BOOKMARK", "{front}: {first}");
        assert_eq!(
            first["object"]["metadata"]["resourceVersion"],
            rv.as_str(),
            "{front}: {first}"
        );
        let second = watch.next_within(Duration::from_secs(5)).await;
        assert_eq!(
            second.as_ref().map(|e| &e["type"]),
            Some(&json!("BOOKMARK")),
            "{front}: {second:?}"
        );

        let name = format!("marked-{}", front.replace(['/', '.'], "").to_lowercase());
        let created = s.create(&name).await;
        let new_rv = &created["metadata"]["resourceVersion"];
        // Bookmarks may come before the ADDED; the first one after it is at the new version.
        let added = loop {
            let event = watch
                .next()
                .await
                .unwrap_or_else(|| panic!("{front}: the watch ended"));
            if event["type"] != "BOOKMARK" {
                break event;
            }
        };
        assert_eq!(
            (
                added["type"].as_str(),
                added["object"]["metadata"]["name"].as_str()
            ),
            (Some("ADDED"), Some(name.as_str())),
            "{front}: {added}"
        );
        let after = watch
            .next()
            .await
            .unwrap_or_else(|| panic!("{front}: the watch ended"));
        assert_eq!(after["type"], "BOOKMARK", "{front}: {after}");
        assert_eq!(
            &after["object"]["metadata"]["resourceVersion"], new_rv,
            "{front}: {after}"
        );
    }
}

/// A graceful backend restart through the gateway: a watch open over each front door (HTTP/1.1
/// and HTTP/2) ends cleanly when Go shuts down (its handler returns, then GOAWAY): the chunked
/// body's terminating chunk or END_STREAM, with no error and no gateway Status body appended.
/// Once Go is back on the same address, widget requests answer 200 again (the gateway replaces
/// the pooled connections Go closed), then 20 in a row all answer 200, and a new watch sees a
/// new widget.
#[tokio::test(flavor = "multi_thread")]
async fn a_go_backend_restart_ends_watches_cleanly_and_service_resumes() {
    let mut s = stack(GoOpts::default()).await;
    let rv = s.list_rv().await;
    let query = format!("watch=true&resourceVersion={rv}");
    let mut h2 = s.alice.h2_connection(s.gw.addr).await;
    let mut h1_watch = s.watch_h1(&query).await;
    let mut h2_watch = s.watch_h2(&mut h2, &query).await;
    s.stat_becomes("watches_open", 2).await;
    s.create("before").await;
    h1_watch.expect("ADDED", "before").await;
    h2_watch.expect("ADDED", "before").await;

    let stopped = s.addon.stop().await;
    assert!(
        stopped.success(),
        "the Go server's graceful shutdown: {stopped}"
    );
    for (front, watch) in [("HTTP/1.1", h1_watch), ("HTTP/2", h2_watch)] {
        let end = watch.ending().await;
        eprintln!("{front} watch ending at the Go server's shutdown: {end:?}");
        assert_eq!(
            end.error, None,
            "{front}: the watch did not end cleanly: {end:?}"
        );
        assert!(
            end.events.is_empty(),
            "{front}: events after the shutdown: {end:?}"
        );
        assert_eq!(
            end.leftover, "",
            "{front}: bytes after the last event: {end:?}"
        );
    }

    s.addon.restart().await;
    let before_recovery = s
        .await_widgets_answer(Duration::from_secs(45), "after the restart")
        .await;
    eprintln!("answers before the first 200 after the restart: {before_recovery:?}");
    let mut failures = Vec::new();
    for i in 0..20 {
        let req = Request::get(WIDGETS).body(Bytes::new()).unwrap();
        match s.alice.try_send(s.gw.addr, req).await {
            Ok(a) if a.status == 200 => {}
            Ok(a) => failures.push(format!(
                "#{i}: {} {}",
                a.status,
                String::from_utf8_lossy(&a.body)
            )),
            Err(e) => failures.push(format!("#{i}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "after recovery, requests failed: {failures:#?}"
    );

    // The restarted server has an empty store; a new watch (h2 again) sees a new widget.
    let rv = s.list_rv().await;
    let mut h2 = s.alice.h2_connection(s.gw.addr).await;
    let mut watch = s
        .watch_h2(&mut h2, &format!("watch=true&resourceVersion={rv}"))
        .await;
    s.create("after").await;
    watch.expect("ADDED", "after").await;
}

/// This process's resident set size (the gateway runs in it), from `/proc/self/status`.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("no VmRSS in /proc/self/status:\n{status}"))
}

/// Samples [`rss_bytes`] every few milliseconds on a thread of its own and keeps the peak.
struct RssPeak {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssPeak {
    fn start() -> Self {
        let peak = Arc::new(AtomicU64::new(rss_bytes()));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, st) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                p.fetch_max(rss_bytes(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Self {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    /// Also samples now; the reader calls it as it goes.
    fn sample(&self) {
        self.peak.fetch_max(rss_bytes(), Ordering::Relaxed);
    }

    fn finish(mut self) -> u64 {
        self.sample();
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

/// Runs `python3` on `script` with `input` on stdin; its stdout, or a panic with its stderr.
async fn python(script: &'static str, input: Bytes) -> String {
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let mut child = Command::new("python3")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stdin = child.stdin.take().expect("python3's stdin");
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output()?;
        writer.join().expect("the stdin writer")?;
        Ok::<_, std::io::Error>(out)
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("python3 is required for this test and could not run: {e}"));
    assert!(
        out.status.success(),
        "python3 failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const MIB: u64 = 1 << 20;

/// What [`discard`] saw of a body: its length and its first and last bytes.
struct Streamed {
    total: u64,
    head: String,
    tail: String,
}

/// Reads `res`'s body frame by frame and throws it away (keeping 64 bytes at each end),
/// sampling RSS every MiB.
async fn discard(res: Response<Incoming>, rss: &RssPeak) -> Streamed {
    let mut body = res.into_body();
    let (mut total, mut head, mut tail) = (0u64, Vec::new(), Vec::new());
    let mut next_sample = MIB;
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("the big list's body failed mid-stream");
            let Ok(data) = frame.into_data() else {
                continue;
            };
            total += data.len() as u64;
            if head.len() < 64 {
                head.extend_from_slice(&data[..data.len().min(64 - head.len())]);
            }
            tail.extend_from_slice(&data[data.len().saturating_sub(64)..]);
            tail.drain(..tail.len().saturating_sub(64));
            if total >= next_sample {
                rss.sample();
                next_sample += MIB;
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(240), read)
        .await
        .is_err()
    {
        panic!("the big list did not arrive within 240 s ({total} bytes did)");
    }
    Streamed {
        total,
        head: String::from_utf8_lossy(&head).into_owned(),
        tail: String::from_utf8_lossy(&tail).into_owned(),
    }
}

/// A 64 MiB list streamed by Go passes through the gateway without being held, over an
/// HTTP/1.1 and an HTTP/2 front door: the client reads and discards it (never collecting it),
/// at least 64 MiB arrive and the JSON ends `]}`, and this process's RSS (the gateway's
/// included) grows by less than 32 MiB from just before the request to its peak while reading.
/// With `Accept-Encoding: gzip` Go compresses a big list and the client gets
/// `Content-Encoding: gzip` and valid gzip of the JSON over both front doors; a small response
/// (one widget) is not compressed.
#[tokio::test(flavor = "multi_thread")]
async fn a_64_mib_list_streams_with_bounded_rss_and_gzip_passes_through() {
    let s = stack(GoOpts::default()).await;
    s.create("small").await;

    let big = format!("{WIDGETS}?bigListMiB=64");
    let mut h2 = s.alice.h2_connection(s.gw.addr).await;
    for front in ["HTTP/1.1", "HTTP/2"] {
        let baseline = rss_bytes();
        let rss = RssPeak::start();
        let res = match front {
            "HTTP/1.1" => s.get_h1(&big, &[]).await,
            _ => {
                let url = format!("https://localhost:{}{big}", s.gw.addr.port());
                let req = Request::get(url)
                    .version(http::Version::HTTP_2)
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                tokio::time::timeout(PATIENCE, h2.send_request(req))
                    .await
                    .expect("no response head from the gateway in time")
                    .expect("the gateway answered")
            }
        };
        assert_eq!(res.status(), StatusCode::OK, "{front}: {:?}", res.headers());
        let encoding = res.headers().get("content-encoding");
        assert_eq!(encoding, None, "{front}: {:?}", res.headers());
        let got = discard(res, &rss).await;
        let peak = rss.finish();
        let grown = peak.saturating_sub(baseline);
        eprintln!(
            "{front}: 64 MiB list: {} bytes; RSS {} MiB before, {} MiB peak (+{:.1} MiB)",
            got.total,
            baseline / MIB,
            peak / MIB,
            grown as f64 / MIB as f64
        );
        assert!(
            got.total >= 64 * MIB,
            "{front}: only {} bytes arrived",
            got.total
        );
        assert!(
            got.head.starts_with(r#"{"kind":"WidgetList""#),
            "{front}: {}",
            got.head
        );
        let end = got.tail.trim_end();
        assert!(
            end.ends_with(r#""status":{}}]}"#),
            "{front}: the list ends {:?}",
            got.tail
        );
        assert!(
            grown < 32 * MIB,
            "{front}: RSS grew by {} MiB while 64 MiB streamed through (from {} to {} MiB)",
            grown / MIB,
            baseline / MIB,
            peak / MIB
        );
    }

    // Compressed by Go, passed through as it is.
    const CHECK_GZIP: &str = "import gzip, json, sys\n\
        raw = gzip.decompress(sys.stdin.buffer.read())\n\
        doc = json.loads(raw)\n\
        print(len(raw), doc['kind'], len(doc['items']))";
    for client in [s.alice.clone(), s.alice.clone().h2()] {
        let req = Request::get(format!("{WIDGETS}?bigListMiB=8"))
            .header("accept-encoding", "gzip")
            .body(Bytes::new())
            .unwrap();
        let zipped = client.send(s.gw.addr, req).await;
        assert_eq!(zipped.status, 200, "{:?}", zipped.headers);
        assert_eq!(
            zipped.headers.get("content-encoding").map(|v| v.as_bytes()),
            Some(&b"gzip"[..]),
            "{:?}",
            zipped.headers
        );
        assert!(
            zipped.body.starts_with(&[0x1f, 0x8b]),
            "not gzip: {:?}",
            &zipped.body[..16.min(zipped.body.len())]
        );
        let checked = python(CHECK_GZIP, zipped.body.clone()).await;
        let fields: Vec<&str> = checked.split_whitespace().collect();
        let [size, kind, items] = fields[..] else {
            panic!("python3 said {checked:?}")
        };
        assert!(size.parse::<u64>().unwrap() >= 8 * MIB, "{checked}");
        assert_eq!(kind, "WidgetList", "{checked}");
        assert!(items.parse::<u64>().unwrap() > 1000, "{checked}");
        eprintln!(
            "8 MiB list as gzip: {} bytes on the wire, {checked}",
            zipped.body.len()
        );
    }

    let req = Request::get(format!("{WIDGETS}/small"))
        .header("accept-encoding", "gzip")
        .body(Bytes::new())
        .unwrap();
    let small = s.alice.send(s.gw.addr, req).await;
    assert_eq!(small.status, 200, "{:?}", small.body);
    assert_eq!(
        small.headers.get("content-encoding"),
        None,
        "{:?}",
        small.headers
    );
    assert_eq!(small.json()["metadata"]["name"], "small");
}
