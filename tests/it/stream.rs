//! Streaming through the gateway, end to end over loopback TLS: watches (kubectl and raw HTTP/1.1
//! and h2 clients; no buffering, resume, 410 Expired, client disconnect, backend shutdown, 100
//! watches on one h2 connection) and WebSocket exec with the Kubernetes channel protocol, all
//! against the bundled sample addon server behind a gateway.

use crate::support;

use crate::support::exec::{Exec, V4, V5};
use crate::support::tool::{kubectl_args, kubectl_async};
use crate::support::World;
use apigw_sample::{SampleConfig, SampleServer, SampleStats};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use serde_json::{json, Value};
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const HOST: &str = "wardle-server.wardle-namespace.svc";
const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/w/flunders";
/// A failure guard for anything that should happen promptly, never a performance bound.
const PATIENCE: Duration = Duration::from_secs(20);

/// A gateway in front of a sample server, and alice's credentials for the gateway.
struct Stack {
    world: World,
    gw: support::Gateway,
    stats: SampleStats,
    stop_sample: Option<tokio::sync::oneshot::Sender<()>>,
    sample: tokio::task::JoinHandle<()>,
}

async fn stack() -> Stack {
    stack_with(false).await
}

/// A running sample server: its address and counters, and how to stop it.
struct Sample {
    addr: SocketAddr,
    stats: SampleStats,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

async fn start_sample(world: &World) -> Sample {
    world
        .pki
        .leaf("wardle", &world.addon_ca, HOST, &[], &[HOST], true);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the sample server");
    let addr = listener.local_addr().expect("sample address");
    let cfg = SampleConfig {
        allowed_names: vec!["front-proxy-client".into()],
        ..SampleConfig::new(
            world.pki.path("wardle.crt"),
            world.pki.path("wardle.key"),
            world.pki.path("front-proxy-ca.crt"),
        )
    };
    let server = SampleServer::new(cfg).expect("sample server");
    let stats = server.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(listener, async {
        let _ = stopped.await;
    }));
    Sample {
        addr,
        stats,
        stop,
        task,
    }
}

/// With `delegate`, the gateway also sends everything it does not route itself (`/openapi/*`
/// among them) to the sample server.
async fn stack_with(delegate: bool) -> Stack {
    stack_configured(delegate, |_| {}).await
}

async fn stack_configured(
    delegate: bool,
    tweak: impl FnOnce(&mut apigw_gateway::config::Config),
) -> Stack {
    let world = World::new();
    let sample = start_sample(&world).await;
    world.register(
        "wardle.json",
        "wardle.example.com",
        "v1alpha1",
        1000,
        15,
        "wardle-server",
        "wardle-namespace",
        &world.addon_ca,
    );
    let mut cfg = world.config(&[]);
    cfg.proxy
        .resolve
        .insert((HOST.to_string(), 443), vec![sample.addr]);
    if delegate {
        cfg.proxy.delegate = Some(apigw_gateway::config::Delegate {
            host: HOST.into(),
            port: 443,
            ca_file: Some(world.pki.path("addon-ca.crt")),
            impersonation_token_file: None,
        });
    }
    tweak(&mut cfg);
    let gw = world.gateway(cfg).await;
    Stack {
        world,
        gw,
        stats: sample.stats,
        stop_sample: Some(sample.stop),
        sample: sample.task,
    }
}

impl Stack {
    /// Creates flunder `w/name` through the gateway, as alice.
    async fn create(&self, name: &str) -> Value {
        let obj = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
                         "metadata": {"name": name}, "spec": {"reference": "r"}});
        let req = Request::post(FLUNDERS)
            .header("content-type", "application/json")
            .body(Bytes::from(obj.to_string()))
            .expect("request");
        let answer = self
            .world
            .client(Some("alice"))
            .send(self.gw.addr, req)
            .await;
        assert_eq!(answer.status, 201, "{:?}", answer.body);
        answer.json()
    }

    /// Alice's TLS client settings, offering `alpn`.
    fn tls(&self, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        let p = |n: &str| self.world.pki.path(n);
        let cas = apigw_core::tls::load_certs(&p("ca.crt")).expect("gateway CA");
        let roots = apigw_core::tls::root_store(&cas, "gateway CA").expect("roots");
        let mut tls = rustls::ClientConfig::builder_with_provider(apigw_core::tls::provider())
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_client_auth_cert(
                apigw_core::tls::load_certs(&p("alice.crt")).expect("alice cert"),
                apigw_core::tls::load_key(&p("alice.key")).expect("alice key"),
            )
            .expect("client auth");
        tls.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
        Arc::new(tls)
    }

    async fn tls_stream(&self, alpn: &[&[u8]]) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(self.gw.addr)
            .await
            .expect("connect to the gateway");
        let name = ServerName::try_from("localhost").expect("server name");
        tokio_rustls::TlsConnector::from(self.tls(alpn))
            .connect(name, tcp)
            .await
            .expect("TLS handshake with the gateway")
    }

    /// One HTTP/1.1 or h2 connection to the gateway.
    async fn connect(&self, h2: bool) -> Conn {
        if h2 {
            let tls = self.tls_stream(&[b"h2"]).await;
            assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
            let (send, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                    .await
                    .expect("h2 handshake");
            let task = tokio::spawn(async move {
                let _ = conn.await;
            });
            Conn {
                send: Sender::H2(send),
                addr: self.gw.addr,
                task,
            }
        } else {
            let tls = self.tls_stream(&[b"http/1.1"]).await;
            let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .expect("HTTP/1.1 handshake");
            let task = tokio::spawn(async move {
                let _ = conn.await;
            });
            Conn {
                send: Sender::H1(send),
                addr: self.gw.addr,
                task,
            }
        }
    }

    /// Opens a watch at `query` (after `?`) on a fresh connection.
    async fn watch(&self, h2: bool, query: &str) -> (Conn, Watch) {
        let mut conn = self.connect(h2).await;
        let watch = conn.watch(query).await;
        (conn, watch)
    }

    async fn active_watches_become(&self, n: usize) {
        let stats = self.stats.clone();
        let reached = support::eventually(PATIENCE.as_secs(), || {
            let stats = stats.clone();
            async move { stats.active_watches() == n }
        })
        .await;
        assert!(
            reached,
            "the sample server has {} active watches, not {n}",
            self.stats.active_watches()
        );
    }
}

enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// A client connection to the gateway; its driver task ends with it.
struct Conn {
    send: Sender,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Conn {
    fn request(&self, method: Method, path: &str) -> Request<Full<Bytes>> {
        let builder = match self.send {
            Sender::H1(_) => Request::builder()
                .uri(path)
                .header("host", format!("localhost:{}", self.addr.port())),
            Sender::H2(_) => Request::builder()
                .uri(format!("https://localhost:{}{path}", self.addr.port()))
                .version(http::Version::HTTP_2),
        };
        builder
            .method(method)
            .body(Full::new(Bytes::new()))
            .expect("request")
    }

    async fn send(&mut self, req: Request<Full<Bytes>>) -> Response<Incoming> {
        let res = match &mut self.send {
            Sender::H1(s) => s.send_request(req).await,
            Sender::H2(s) => s.send_request(req).await,
        };
        res.expect("the gateway answered")
    }

    async fn watch(&mut self, query: &str) -> Watch {
        let req = self.request(Method::GET, &format!("{FLUNDERS}?{query}"));
        let res = self.send(req).await;
        Watch::new(res).await
    }

    /// Closes the TCP connection under every stream.
    fn kill(self) {
        self.task.abort();
    }
}

/// A watch response read one event at a time.
struct Watch {
    body: Incoming,
    buf: Vec<u8>,
}

impl Watch {
    async fn new(res: Response<Incoming>) -> Self {
        let status = res.status();
        if status != StatusCode::OK {
            let body = res.into_body().collect().await.map(|b| b.to_bytes());
            panic!("watch answered {status}: {body:?}");
        }
        Self {
            body: res.into_body(),
            buf: Vec::new(),
        }
    }

    /// The next event; `None` when the stream ended (cleanly or not).
    async fn next(&mut self) -> Option<Value> {
        tokio::time::timeout(PATIENCE, self.next_line())
            .await
            .expect("no watch event arrived in time")
    }

    async fn next_line(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                let event = serde_json::from_slice(&line)
                    .unwrap_or_else(|e| panic!("not a JSON event ({e}): {line:?}"));
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

    /// The next event, which must be `kind` of flunder `name`; returns its resourceVersion.
    async fn expect(&mut self, kind: &str, name: &str) -> u64 {
        let event = self.next().await.expect("the watch ended early");
        assert_eq!(
            (
                event["type"].as_str(),
                event["object"]["metadata"]["name"].as_str()
            ),
            (Some(kind), Some(name)),
            "{event}"
        );
        rv_of(&event["object"])
    }

    /// Reads to the end; the events that were left.
    async fn rest(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(event) = self.next().await {
            out.push(event);
        }
        out
    }
}

fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {obj}"))
}

async fn events_arrive_one_at_a_time(h2: bool) {
    let s = stack().await;
    let (_conn, mut watch) = s.watch(h2, "watch=true").await;
    s.active_watches_become(1).await;
    s.create("a").await;
    let rv_a = watch.expect("ADDED", "a").await;
    // Only now does b exist: had the gateway buffered a's event, the read above would hang.
    s.create("b").await;
    let rv_b = watch.expect("ADDED", "b").await;
    assert!(rv_b > rv_a, "{rv_a} {rv_b}");

    // Resuming after a's version replays only b, then nothing until the timeout ends it.
    let (_conn, mut resumed) = s
        .watch(
            h2,
            &format!("watch=1&resourceVersion={rv_a}&timeoutSeconds=1"),
        )
        .await;
    assert_eq!(resumed.expect("ADDED", "b").await, rv_b);
    let rest = resumed.rest().await;
    assert!(rest.is_empty(), "{rest:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_events_are_not_buffered_over_http1() {
    events_arrive_one_at_a_time(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_events_are_not_buffered_over_h2() {
    events_arrive_one_at_a_time(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn too_old_resource_version_is_expired() {
    let s = stack().await;
    // The sample server keeps the last 1000 events: 1002 creates forget the first two.
    let mut conn = s.connect(true).await;
    let Sender::H2(send) = &conn.send else {
        unreachable!("an h2 connection")
    };
    for batch in 0..21 {
        let creates = (0..50).filter(|i| batch * 50 + i < 1002).map(|i| {
            let mut send = send.clone();
            let obj = json!({"metadata": {"name": format!("f{}", batch * 50 + i)}});
            let req = Request::post(format!("https://localhost:{}{FLUNDERS}", s.gw.addr.port()))
                .version(http::Version::HTTP_2)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(obj.to_string())))
                .expect("request");
            async move {
                let res = send.send_request(req).await.expect("create");
                assert_eq!(res.status(), StatusCode::CREATED);
            }
        });
        futures_util::future::join_all(creates).await;
    }
    let mut watch = conn.watch("watch=true&resourceVersion=1").await;
    let event = watch.next().await.expect("an ERROR event");
    assert_eq!(event["type"], "ERROR", "{event}");
    assert_eq!(
        (
            event["object"]["kind"].as_str(),
            event["object"]["code"].as_u64(),
            event["object"]["reason"].as_str()
        ),
        (Some("Status"), Some(410), Some("Expired")),
        "{event}"
    );
    assert!(watch.rest().await.is_empty(), "nothing follows the error");
    // The oldest version still kept works.
    let mut kept = conn.watch("watch=true&resourceVersion=2").await;
    let first = kept.next().await.expect("an event");
    assert_eq!(
        (first["type"].as_str(), rv_of(&first["object"])),
        (Some("ADDED"), 3),
        "{first}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_get_watch_sees_a_later_create() {
    let s = stack().await;
    let args = kubectl_args(
        &kubeconfig(&s),
        &["get", "flunders", "-n", "w", "-w", "--request-timeout=60s"],
    );
    let mut kubectl = Tool::spawn("kubectl", &args);
    s.active_watches_become(1).await;
    s.create("seen-by-kubectl").await;
    let line = kubectl
        .line_containing("seen-by-kubectl")
        .await
        .unwrap_or_else(|| {
            panic!(
                "kubectl printed no row for the new flunder; stderr: {}",
                kubectl.stderr()
            )
        });
    assert!(line.starts_with("seen-by-kubectl "), "{line}");
}

/// A running command-line tool whose stdout is read line by line; killed when dropped.
struct Tool {
    child: std::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Tool {
    fn spawn(tool: &str, args: &[String]) -> Self {
        let mut child = std::process::Command::new(tool)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{tool} is required for this test and could not run: {e}"));
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(err) = child.stderr.take() {
            let sink = stderr.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                    if let Ok(mut s) = sink.lock() {
                        s.push_str(&line);
                        s.push('\n');
                    }
                }
            });
        }
        Self {
            child,
            lines,
            stderr,
        }
    }

    /// The first stdout line containing `needle`, or `None` if the tool stopped printing.
    async fn line_containing(&mut self, needle: &str) -> Option<String> {
        let find = async {
            while let Some(line) = self.lines.recv().await {
                if line.contains(needle) {
                    return Some(line);
                }
            }
            None
        };
        tokio::time::timeout(PATIENCE, find).await.ok().flatten()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn client_disconnect_frees_the_backend_watch() {
    let s = stack().await;
    // HTTP/1.1: the client's connection goes away.
    let (conn, watch) = s.watch(false, "watch=true").await;
    s.active_watches_become(1).await;
    drop(watch);
    conn.kill();
    s.active_watches_become(0).await;
    // h2: only the stream is cancelled; the connection stays.
    let (mut conn, watch) = s.watch(true, "watch=true").await;
    let (_, other) = s.watch(true, "watch=true").await;
    s.active_watches_become(2).await;
    drop(watch);
    s.active_watches_become(1).await;
    // The connection still works after the reset.
    let mut again = conn.watch("watch=true").await;
    s.active_watches_become(2).await;
    s.create("after-reset").await;
    again.expect("ADDED", "after-reset").await;
    drop((again, other));
    s.active_watches_become(0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn backend_shutdown_ends_the_client_watch() {
    let mut s = stack().await;
    let (_h1, mut over_h1) = s.watch(false, "watch=true").await;
    let (_h2, mut over_h2) = s.watch(true, "watch=true").await;
    s.active_watches_become(2).await;
    if let Some(stop) = s.stop_sample.take() {
        let _ = stop.send(());
    }
    // Watch::next fails the test if the stream hangs instead of ending.
    assert_eq!(over_h1.rest().await, Vec::<Value>::new());
    assert_eq!(over_h2.rest().await, Vec::<Value>::new());
    assert_eq!(s.stats.active_watches(), 0);
    tokio::time::timeout(PATIENCE, &mut s.sample)
        .await
        .expect("the sample server did not drain")
        .expect("sample server task");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_watches_share_one_h2_connection() {
    let s = stack().await;
    let conn = s.connect(true).await;
    let Sender::H2(send) = &conn.send else {
        unreachable!("an h2 connection")
    };
    let opens = (0..100).map(|_| {
        let mut send = send.clone();
        let req = conn.request(Method::GET, &format!("{FLUNDERS}?watch=true"));
        async move { Watch::new(send.send_request(req).await.expect("watch")).await }
    });
    let mut watches = futures_util::future::join_all(opens).await;
    s.active_watches_become(100).await;
    s.create("for-everyone").await;
    let seen = watches
        .iter_mut()
        .map(|w| async move { w.expect("ADDED", "for-everyone").await });
    let rvs = futures_util::future::join_all(seen).await;
    assert_eq!(rvs.len(), 100);
    assert!(rvs.iter().all(|rv| *rv == rvs[0]), "{rvs:?}");
}

impl Stack {
    /// Starts `argv` in flunder `w/name`, offering `protocols` (see [`Exec::start`]).
    async fn exec(&self, name: &str, argv: &[&str], protocols: &str) -> Exec {
        let url = format!(
            "wss://localhost:{}{FLUNDERS}/{name}/exec",
            self.gw.addr.port()
        );
        let tls = self.tls_stream(&[b"http/1.1"]).await;
        Exec::start(tls, &url, argv, protocols).await
    }
}

/// A stack with flunder `w/box` to exec in.
async fn exec_stack() -> Stack {
    let s = stack().await;
    s.create("box").await;
    s
}

impl Stack {
    /// Every exec session has ended on the sample server.
    async fn execs_end(&self) {
        let stats = self.stats.clone();
        let idle = support::eventually(PATIENCE.as_secs(), || {
            let stats = stats.clone();
            async move { stats.active_execs() == 0 }
        })
        .await;
        assert!(
            idle,
            "{} exec sessions still open",
            self.stats.active_execs()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_cat_round_trips_stdin_until_v5_closes_it() {
    let s = exec_stack().await;
    let mut cat = s.exec("box", &["cat"], V5).await;
    assert_eq!(cat.protocol, V5);
    cat.send(0, b"hello\n").await;
    assert_eq!(cat.next_on(1).await, b"hello\n");
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
    assert_eq!(done.stdout, "", "nothing after stdin closed");
    s.execs_end().await;
    // A client that just goes away ends its session too.
    let mut gone = s.exec("box", &["cat"], V5).await;
    gone.send(0, b"x").await;
    assert_eq!(gone.next_on(1).await, b"x");
    assert_eq!(s.stats.active_execs(), 1);
    drop(gone);
    s.execs_end().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_env_shows_the_gateway_identity_not_a_spoofed_one() {
    let s = exec_stack().await;
    // `exec` sends X-Remote-User: mallory and X-Remote-Group: system:masters.
    let env = s.exec("box", &["env"], V5).await.finish().await;
    let lines: Vec<&str> = env.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"USER=alice"), "{env:?}");
    assert!(lines.contains(&"FLUNDER=w/box"), "{env:?}");
    let groups = lines
        .iter()
        .find_map(|l| l.strip_prefix("GROUPS="))
        .unwrap_or_else(|| panic!("no GROUPS line: {env:?}"));
    let groups: Vec<&str> = groups.split(',').collect();
    assert!(
        groups.contains(&"team-a") && groups.contains(&"team-b"),
        "{groups:?}"
    );
    assert!(
        !groups.contains(&"system:masters"),
        "a spoofed group reached the backend: {groups:?}"
    );
    assert!(!env.stdout.contains("mallory"), "{env:?}");
    assert_eq!(env.status["status"], "Success");
    s.execs_end().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_exit_codes_are_kubelet_statuses() {
    let s = exec_stack().await;
    let failed = s
        .exec("box", &["sh", "-c", "exit 3"], V5)
        .await
        .finish()
        .await;
    assert_eq!(
        failed.status,
        json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
               "message": "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3",
               "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}),
        "{failed:?}"
    );
    let missing = s.exec("box", &["frobnicate"], V5).await.finish().await;
    assert!(missing.stderr.contains("command not found"), "{missing:?}");
    assert_eq!(missing.status["details"]["causes"][0]["message"], "127");
    s.execs_end().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_negotiates_v4_and_prefers_v5() {
    let s = exec_stack().await;
    let v4 = s.exec("box", &["echo", "hi", "there"], V4).await;
    assert_eq!(v4.protocol, V4);
    let echoed = v4.finish().await;
    assert_eq!(echoed.stdout, "hi there\n");
    assert_eq!(echoed.status["status"], "Success");
    let both = s.exec("box", &["exit", "0"], &format!("{V4}, {V5}")).await;
    assert_eq!(both.protocol, V5, "the best offered protocol wins");
    assert_eq!(both.finish().await.status["status"], "Success");
    s.execs_end().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_of_a_missing_flunder_is_not_found() {
    let s = stack().await;
    let url = format!(
        "wss://localhost:{}{FLUNDERS}/ghost/exec?command=cat&stdin=true",
        s.gw.addr.port()
    );
    let mut req = url.into_client_request().expect("WebSocket request");
    req.headers_mut()
        .insert("sec-websocket-protocol", V5.parse().expect("header"));
    let tls = s.tls_stream(&[b"http/1.1"]).await;
    match tokio_tungstenite::client_async(req, tls).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => {
            assert_eq!(res.status(), StatusCode::NOT_FOUND);
            let body: Value = serde_json::from_slice(res.body().as_deref().unwrap_or_default())
                .expect("a Status body");
            assert_eq!(body["reason"], "NotFound", "{body}");
        }
        other => panic!("expected a 404, got {:?}", other.map(|(_, res)| res)),
    }
}

/// Writes alice's kubeconfig for the gateway and returns the leading kubectl arguments.
fn kubeconfig(s: &Stack) -> PathBuf {
    let kubeconfig = s.world.pki.path("kubeconfig");
    let p = |n: &str| s.world.pki.path(n).display().to_string();
    let kc = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "gw",
        "clusters": [{"name": "gw", "cluster": {"server": format!("https://127.0.0.1:{}", s.gw.addr.port()), "certificate-authority": p("ca.crt")}}],
        "users": [{"name": "alice", "user": {"client-certificate": p("alice.crt"), "client-key": p("alice.key")}}],
        "contexts": [{"name": "gw", "context": {"cluster": "gw", "user": "alice"}}]
    });
    std::fs::write(&kubeconfig, kc.to_string()).expect("write kubeconfig");
    kubeconfig
}

/// Runs kubectl to completion: (success, stdout, stderr).
async fn kubectl(s: &Stack, args: &[&str]) -> (bool, String, String) {
    let ran = kubectl_async(&kubeconfig(s), args).await;
    (ran.succeeded(), ran.stdout(), ran.stderr())
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_explain_and_strict_validation() {
    let s = stack().await;
    // The gateway merges the backend's OpenAPI shortly after start.
    let mut explained = (false, String::new(), String::new());
    for _ in 0..50 {
        explained = kubectl(&s, &["explain", "flunders.spec"]).await;
        if explained.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (ok, out, err) = explained;
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("KIND:") && out.contains("Flunder"), "{out}");
    assert!(out.contains("reference"), "{out}");
    let manifest = s.world.pki.path("bad.yaml");
    std::fs::write(&manifest, "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  name: typo\nspec:\n  reference: a\n  refrence: b\n").expect("write manifest");
    let file = manifest.display().to_string();
    let (ok, out, err) = kubectl(&s, &["create", "-n", "w", "-f", &file]).await;
    assert!(!ok, "{out}");
    assert!(err.contains(r#"unknown field "spec.refrence""#), "{err}");
    let (ok, out, err) = kubectl(&s, &["create", "-n", "w", "--validate=warn", "-f", &file]).await;
    assert!(ok, "{out}\n{err}");
    assert!(err.contains(r#"unknown field "spec.refrence""#), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn backend_shutdown_ends_exec_sessions() {
    let mut s = exec_stack().await;
    let mut cat = s.exec("box", &["cat"], V5).await;
    cat.send(0, b"ping").await;
    assert_eq!(cat.next_on(1).await, b"ping");
    if let Some(stop) = s.stop_sample.take() {
        let _ = stop.send(());
    }
    match cat.next_message().await {
        Some(Ok(Message::Close(Some(frame)))) => {
            assert_eq!(u16::from(frame.code), 1001, "{frame:?}")
        }
        other => panic!("expected a Going Away close, got {other:?}"),
    }
    s.execs_end().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_ends_open_watches_cleanly_after_the_grace_period() {
    let s = stack_configured(false, |cfg| {
        cfg.server.shutdown_grace = Duration::from_millis(500)
    })
    .await;
    let (_conn, mut watch) = s.watch(false, "watch=1").await;
    s.create("before").await;
    watch.expect("ADDED", "before").await;
    let Stack {
        gw, world: _world, ..
    } = s;
    let drained = gw.shutdown();
    // The chunked body ends with its terminating chunk: a clean end, not a reset.
    let end = tokio::time::timeout(PATIENCE, watch.body.frame())
        .await
        .expect("the watch outlived the grace period");
    assert!(
        end.is_none(),
        "the watch ended with {end:?}, not a clean end of stream"
    );
    tokio::time::timeout(PATIENCE, drained)
        .await
        .expect("the gateway did not finish draining")
        .expect("gateway task");
}

#[tokio::test(flavor = "multi_thread")]
async fn short_requests_time_out_with_504_but_watches_do_not() {
    let s = stack_configured(false, |cfg| {
        cfg.limits.request_timeout = Duration::from_millis(300)
    })
    .await;
    let (_conn, mut watch) = s.watch(false, "watch=1").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    s.create("late").await;
    watch.expect("ADDED", "late").await;
}
