//! Test vocabulary: a PKI made with rcgen, an echo backend that records what it receives,
//! gateways started on loopback with a manifest directory, and a TLS client.

pub mod authz_webhook;
pub mod binary;
pub mod exec;
pub mod exposition;
pub mod fault;
pub mod goaddon;
pub mod kube_api;
pub mod oidc;
pub mod sample;
pub mod tool;
pub mod upstream;

use apigw_core::body::{full, Body};
use apigw_gateway::config::Config;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

pub fn init() {
    apigw_core::tls::install_default_provider();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

/// A directory of certificates made for one test.
pub struct Pki {
    pub dir: tempfile::TempDir,
}

pub struct Ca {
    pub name: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn ca(&self, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(self.path(&format!("{name}.crt")), issuer.pem()).unwrap();
        Ca {
            name: name.into(),
            issuer,
        }
    }

    /// A leaf signed by `ca`; `server` picks the EKU. Writes `<name>.crt` and `<name>.key`.
    pub fn leaf(
        &self,
        name: &str,
        ca: &Ca,
        cn: &str,
        orgs: &[&str],
        sans: &[&str],
        server: bool,
    ) -> (PathBuf, PathBuf) {
        self.leaf_with(name, ca, cn, orgs, sans, server, None)
    }

    /// A leaf valid from `not_before` to `not_after` (past dates make an expired certificate).
    #[allow(clippy::too_many_arguments)] // reads like the certificate it makes
    pub fn leaf_dated(
        &self,
        name: &str,
        ca: &Ca,
        cn: &str,
        sans: &[&str],
        server: bool,
        not_before: time::OffsetDateTime,
        not_after: time::OffsetDateTime,
    ) -> (PathBuf, PathBuf) {
        self.leaf_with(
            name,
            ca,
            cn,
            &[],
            sans,
            server,
            Some((not_before, not_after)),
        )
    }

    #[allow(clippy::too_many_arguments)] // reads like the certificate it makes
    fn leaf_with(
        &self,
        name: &str,
        ca: &Ca,
        cn: &str,
        orgs: &[&str],
        sans: &[&str],
        server: bool,
        validity: Option<(time::OffsetDateTime, time::OffsetDateTime)>,
    ) -> (PathBuf, PathBuf) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        // rcgen keeps one value per attribute type; a second O goes in under its raw OID.
        assert!(
            orgs.len() <= 2,
            "test certificates carry at most two O values"
        );
        for (i, o) in orgs.iter().enumerate() {
            let ty = if i == 0 {
                DnType::OrganizationName
            } else {
                DnType::CustomDnType(vec![2, 5, 4, 10])
            };
            params.distinguished_name.push(ty, *o);
        }
        params.subject_alt_names = sans
            .iter()
            .map(|s| match s.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*s).try_into().unwrap()),
            })
            .collect();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        if let Some((not_before, not_after)) = validity {
            params.not_before = not_before;
            params.not_after = not_after;
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca.issuer).unwrap();
        let (crt, keyp) = (
            self.path(&format!("{name}.crt")),
            self.path(&format!("{name}.key")),
        );
        std::fs::write(&crt, cert.pem()).unwrap();
        std::fs::write(&keyp, key.serialize_pem()).unwrap();
        (crt, keyp)
    }

    pub fn pem(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap()
    }
}

/// The world most tests share: CAs, a serving cert, users, a proxy client cert.
pub struct World {
    pub pki: Pki,
    pub ca: Ca,
    pub client_ca: Ca,
    pub front_proxy_ca: Ca,
    pub addon_ca: Ca,
    pub rogue_ca: Ca,
}

impl World {
    pub fn new() -> Self {
        init();
        let pki = Pki::new();
        let ca = pki.ca("ca");
        let client_ca = pki.ca("client-ca");
        let front_proxy_ca = pki.ca("front-proxy-ca");
        let addon_ca = pki.ca("addon-ca");
        let rogue_ca = pki.ca("rogue-ca");
        pki.leaf(
            "serving",
            &ca,
            "apigw",
            &[],
            &["localhost", "127.0.0.1"],
            true,
        );
        pki.leaf(
            "alice",
            &client_ca,
            "alice",
            &["team-a", "team-b"],
            &[],
            false,
        );
        pki.leaf("rogue", &rogue_ca, "alice", &["system:masters"], &[], false);
        pki.leaf(
            "proxy-client",
            &front_proxy_ca,
            "front-proxy-client",
            &[],
            &[],
            false,
        );
        std::fs::write(
            pki.path("tokens.csv"),
            "s3cr3t-token-bob,bob,uid-bob,\"devs,ops\"\n",
        )
        .unwrap();
        std::fs::create_dir(pki.path("apiservices")).unwrap();
        Self {
            pki,
            ca,
            client_ca,
            front_proxy_ca,
            addon_ca,
            rogue_ca,
        }
    }

    /// Starts an echo backend for `<svc>.<ns>.svc` with a cert from `ca` (or for `san`).
    pub async fn backend(
        &self,
        key: &str,
        svc: &str,
        ns: &str,
        ca: &Ca,
        san: Option<&str>,
    ) -> Echo {
        let host = format!("{svc}.{ns}.svc");
        let (crt, k) = self.pki.leaf(
            &format!("be-{key}"),
            ca,
            &host,
            &[],
            &[san.unwrap_or(&host)],
            true,
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Echo::start(
            &crt,
            &k,
            &self.pki.path("front-proxy-ca.crt"),
            host,
            listener,
        )
        .await
    }

    /// Starts an echo backend for `host` serving `crt`/`key`, accepting client certificates
    /// from `front_proxy_ca` (a CA other than the gateway's makes it refuse the proxy cert).
    pub async fn backend_from(
        &self,
        host: &str,
        crt: &Path,
        key: &Path,
        front_proxy_ca: &Ca,
    ) -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ca = self.pki.path(&format!("{}.crt", front_proxy_ca.name));
        Echo::start(crt, key, &ca, host.to_string(), listener).await
    }

    /// Starts `echo`'s server again, on the same address and with the same certificate.
    pub async fn restart(&self, key: &str, echo: &Echo) -> Echo {
        let (crt, k) = (
            self.pki.path(&format!("be-{key}.crt")),
            self.pki.path(&format!("be-{key}.key")),
        );
        let listener = TcpListener::bind(echo.addr).await.unwrap();
        Echo::start(
            &crt,
            &k,
            &self.pki.path("front-proxy-ca.crt"),
            echo.host.clone(),
            listener,
        )
        .await
    }

    /// Writes an APIService manifest (JSON) into the watched directory.
    #[allow(clippy::too_many_arguments)] // reads like the manifest it writes
    pub fn register(
        &self,
        file: &str,
        group: &str,
        version: &str,
        gpm: i64,
        vp: i64,
        svc: &str,
        ns: &str,
        ca: &Ca,
    ) {
        let bundle = base64_encode(self.pki.pem(&format!("{}.crt", ca.name)).as_bytes());
        let obj = serde_json::json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": format!("{version}.{group}")},
            "spec": {"group": group, "version": version, "groupPriorityMinimum": gpm,
                     "versionPriority": vp, "service": {"name": svc, "namespace": ns, "port": 443},
                     "caBundle": bundle}
        });
        let tmp = self.pki.path(&format!("apiservices/.{file}.tmp"));
        std::fs::write(&tmp, obj.to_string()).unwrap();
        std::fs::rename(tmp, self.pki.path(&format!("apiservices/{file}"))).unwrap();
    }

    pub fn config(&self, resolve: &[(&Echo, SocketAddr)]) -> Config {
        let p = |n: &str| self.pki.path(n);
        let mut cfg = Config::new(p("serving.crt"), p("serving.key"));
        cfg.server.listen = "127.0.0.1:0".parse().unwrap();
        cfg.authn.client_ca = Some(p("client-ca.crt"));
        cfg.authn.token_file = Some(p("tokens.csv"));
        cfg.proxy.proxy_client = Some((p("proxy-client.crt"), p("proxy-client.key")));
        cfg.apiservice_dir = Some(p("apiservices"));
        cfg.proxy.resolve = resolve
            .iter()
            .map(|(e, addr)| ((e.host.clone(), 443), vec![*addr]))
            .collect();
        cfg
    }

    pub async fn gateway(&self, cfg: Config) -> Gateway {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            apigw_gateway::gateway::run(cfg, listener, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        let client = self.client(None);
        let ready = eventually(10, || {
            let client = client.clone();
            async move {
                client
                    .try_send(addr, Request::get("/readyz").body(Bytes::new()).unwrap())
                    .await
                    .is_ok_and(|a| a.status == 200)
            }
        })
        .await;
        assert!(ready, "the gateway did not become ready");
        Gateway {
            addr,
            _stop: tx,
            _task: task,
        }
    }

    pub fn client(&self, cert: Option<&str>) -> Client {
        Client::new(
            &self.pki.path("ca.crt"),
            cert.map(|c| {
                (
                    self.pki.path(&format!("{c}.crt")),
                    self.pki.path(&format!("{c}.key")),
                )
            }),
        )
    }
}

/// The world most tests need: one echo backend serving `a.example.com/v1` as
/// `a-svc.a-ns.svc` (cert from the addon CA) behind a gateway that `tweak` configures.
pub struct Single {
    pub w: World,
    pub echo: Echo,
    pub gw: Gateway,
}

impl World {
    /// A world whose echo backend serves `a.example.com/v1` as `a-svc.a-ns.svc` (cert from the
    /// addon CA), registered; no gateway yet.
    pub async fn with_a() -> (World, Echo) {
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
        (w, echo)
    }

    pub async fn single(tweak: impl FnOnce(&mut Config)) -> Single {
        let (w, echo) = World::with_a().await;
        let mut cfg = w.config(&[(&echo, echo.addr)]);
        tweak(&mut cfg);
        let gw = w.gateway(cfg).await;
        Single { w, echo, gw }
    }
}

pub fn base64_encode(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

pub struct Gateway {
    pub addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
    _task: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// Sends the shutdown signal; the returned handle ends when the gateway has drained.
    pub fn shutdown(self) -> tokio::task::JoinHandle<()> {
        let _ = self._stop.send(());
        self._task
    }

    /// Stops the gateway as a crash would: its task is aborted, so nothing runs its shutdown
    /// (in cluster mode, the Lease is left to expire). Tasks it spawned that end only with the
    /// process may go on in the background, as a hung replica's would; the Lease campaign and
    /// the status writer end with it.
    pub async fn kill(self) {
        let Gateway { _stop, _task, .. } = self;
        _task.abort();
        // Wait for the abort before dropping the stop signal, which would start a clean shutdown.
        let _ = _task.await;
        drop(_stop);
    }
}

/// A backend that answers every request with a JSON description of it, and records it.
pub struct Echo {
    pub host: String,
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<serde_json::Value>>>,
    /// Discovery documents it serves at `/apis` and `/api` (else it echoes there too).
    pub discovery: Arc<Mutex<EchoDiscovery>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// What an [`Echo`] answers at `/apis` and `/api`: the aggregated form when the `Accept` asks
/// for an `APIGroupDiscoveryList` and one is set (with an ETag, 304 on `If-None-Match`), else
/// the legacy form when set. `/api/v1` answers `core` when set.
#[derive(Default, Clone)]
pub struct EchoDiscovery {
    pub apis_aggregated: Option<serde_json::Value>,
    pub apis_legacy: Option<serde_json::Value>,
    pub api_aggregated: Option<serde_json::Value>,
    pub api_legacy: Option<serde_json::Value>,
    pub core: Option<serde_json::Value>,
    /// Other JSON documents by path (`/openapi/v2`, `/openapi/v3`, ...).
    pub documents: std::collections::HashMap<String, serde_json::Value>,
}

impl EchoDiscovery {
    /// The answer for `path` with `accept`, if it is a discovery path with a document set.
    fn answer(&self, path: &str, accept: &str) -> Option<(serde_json::Value, &'static str)> {
        let aggregated = accept.contains("as=APIGroupDiscoveryList");
        let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        let (agg, legacy) = match path {
            "/apis" | "/apis/" => (&self.apis_aggregated, &self.apis_legacy),
            "/api" | "/api/" => (&self.api_aggregated, &self.api_legacy),
            "/api/v1" => return self.core.clone().map(|c| (c, "application/json")),
            other => {
                return self
                    .documents
                    .get(other)
                    .map(|d| (d.clone(), "application/json"))
            }
        };
        match (agg, legacy) {
            (Some(a), _) if aggregated => Some((a.clone(), v2)),
            (_, Some(l)) => Some((l.clone(), "application/json")),
            _ => None,
        }
    }
}

impl Echo {
    async fn start(
        crt: &Path,
        key: &Path,
        front_proxy_ca: &Path,
        host: String,
        listener: TcpListener,
    ) -> Self {
        let cert = apigw_core::tls::ReloadingCert::load(crt, key).unwrap();
        let cas = apigw_core::tls::load_certs(front_proxy_ca).unwrap();
        let verifier = apigw_core::tls::optional_client_verifier(&cas).unwrap();
        let tls = Arc::new(apigw_core::tls::server_config(cert, Some(verifier)).unwrap());
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
        let log = seen.clone();
        let discovery: Arc<Mutex<EchoDiscovery>> = Arc::default();
        let docs = discovery.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(apigw_core::server::serve(
            listener,
            Some(tls),
            move |conn: apigw_core::server::ConnInfo| {
                let (log, docs) = (log.clone(), docs.clone());
                let peer_cn = conn
                    .peer_chain
                    .first()
                    .and_then(apigw_authn::subject)
                    .map(|(cn, _)| cn);
                let remote = conn.remote;
                move |req: Request<apigw_core::server::RequestBody>| {
                    let (log, peer_cn, docs) = (log.clone(), peer_cn.clone(), docs.clone());
                    async move { echo(req, peer_cn, remote, log, docs).await }
                }
            },
            apigw_core::server::Limits::default(),
            async {
                let _ = rx.await;
            },
        ));
        Self {
            host,
            addr,
            seen,
            discovery,
            _stop: tx,
        }
    }

    /// Stops accepting connections (open ones finish what they are doing).
    pub fn stop(self) -> SocketAddr {
        self.addr
    }

    /// An `Echo` naming a stopped server's address and host, to restart it.
    pub fn placeholder(addr: SocketAddr, host: &str) -> Echo {
        Echo {
            host: host.to_string(),
            addr,
            seen: Arc::default(),
            discovery: Arc::default(),
            _stop: tokio::sync::oneshot::channel().0,
        }
    }

    /// Requests made for clients, without the gateway's own availability checks.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        self.all_requests()
            .into_iter()
            .filter(|r| seen_header(r, "x-remote-user") != ["system:kube-aggregator"])
            .collect()
    }

    pub fn all_requests(&self) -> Vec<serde_json::Value> {
        self.seen.lock().unwrap().clone()
    }
}

/// A response body that sends one chunk and then holds the response open until the client
/// goes away, as a watch does.
struct Hold(Option<Bytes>);

impl http_body::Body for Hold {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        match self.0.take() {
            Some(chunk) => std::task::Poll::Ready(Some(Ok(http_body::Frame::data(chunk)))),
            None => std::task::Poll::Pending,
        }
    }
}

async fn echo(
    req: Request<apigw_core::server::RequestBody>,
    peer_cn: Option<String>,
    remote: SocketAddr,
    log: Arc<Mutex<Vec<serde_json::Value>>>,
    docs: Arc<Mutex<EchoDiscovery>>,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let entry = serde_json::json!({
        "method": parts.method.as_str(),
        "path": parts.uri.path(),
        "query": parts.uri.query().unwrap_or(""),
        "authority": parts.uri.authority().map(|a| a.to_string())
            .or_else(|| parts.headers.get("host").and_then(|h| h.to_str().ok()).map(str::to_string)),
        "version": format!("{:?}", parts.version),
        // The request target as it arrived: `/path?query` in origin form, `https://...` in
        // absolute form (HTTP/2 always reads as absolute).
        "target": parts.uri.to_string(),
        "headers": headers,
        "peer_cn": peer_cn,
        "remote": remote.to_string(),
        "body": String::from_utf8_lossy(&body),
        "body_len": body.len(),
    });
    log.lock().unwrap().push(entry.clone());
    let path = parts.uri.path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let discovery = docs.lock().unwrap().answer(path, &header("accept"));
    let mut res = if let Some((doc, content_type)) = discovery {
        let text = doc.to_string();
        let etag = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            text.hash(&mut h);
            format!("\"{:016x}\"", h.finish())
        };
        let mut r = if header("if-none-match") == etag {
            let mut r = Response::new(full(""));
            *r.status_mut() = http::StatusCode::NOT_MODIFIED;
            r
        } else {
            Response::new(full(text))
        };
        r.headers_mut().insert("etag", etag.parse().unwrap());
        r.headers_mut()
            .insert("x-content-type", content_type.parse().unwrap());
        r
    } else if let ["apis", group, version] = segments.as_slice() {
        let list = serde_json::json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/{version}"),
            "resources": [{"name": "things", "singularName": "thing", "namespaced": true, "kind": "Thing",
                           "verbs": ["get", "list", "create"], "shortNames": ["th"]}]
        });
        Response::new(full(list.to_string()))
    } else if parts.uri.query().is_some_and(|q| q.contains("watch=1")) {
        Response::new(apigw_core::body::stream(Hold(Some(Bytes::from(format!(
            "{entry}\n"
        ))))))
    } else if path.ends_with("/slow") {
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        Response::new(full(entry.to_string()))
    } else if path.ends_with("/pause") {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        Response::new(full(entry.to_string()))
    } else if path.ends_with("/redirect") {
        let mut r = Response::new(full("moved"));
        *r.status_mut() = http::StatusCode::FOUND;
        r.headers_mut()
            .insert("location", "https://elsewhere.example/".parse().unwrap());
        r
    } else if path.ends_with("/conflict") {
        let mut r = Response::new(full(
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409,"message":"backend conflict"}"#,
        ));
        *r.status_mut() = http::StatusCode::CONFLICT;
        r
    } else {
        Response::new(full(entry.to_string()))
    };
    let content_type = res
        .headers_mut()
        .remove("x-content-type")
        .unwrap_or_else(|| "application/json".parse().unwrap());
    res.headers_mut().insert("content-type", content_type);
    res.headers_mut()
        .insert("x-backend", "echo".parse().unwrap());
    if peer_cn.as_deref() != Some("front-proxy-client") {
        *res.status_mut() = http::StatusCode::UNAUTHORIZED;
    }
    res
}

/// A TLS client speaking HTTP/1.1 (or h2 with `h2()`), one connection per request.
#[derive(Clone)]
pub struct Client {
    tls: Arc<rustls::ClientConfig>,
    h2: bool,
}

/// A response with its body read whole.
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    /// Asserts a `kind: Status` body whose code equals the HTTP status.
    pub fn assert_status(&self, code: u16) -> serde_json::Value {
        assert_eq!(self.status, code, "body: {:?}", self.body);
        let s = self.json();
        assert_eq!(s["kind"], "Status", "{s}");
        assert_eq!(s["code"], code, "{s}");
        s
    }

    /// The values of header `name` the backend saw, from an echo body.
    pub fn seen(&self, name: &str) -> Vec<String> {
        seen_header(&self.json(), name)
    }
}

pub fn seen_header(entry: &serde_json::Value, name: &str) -> Vec<String> {
    entry["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h[0].as_str().unwrap().eq_ignore_ascii_case(name))
        .map(|h| h[1].as_str().unwrap().to_string())
        .collect()
}

impl Client {
    pub fn new(ca: &Path, cert: Option<(PathBuf, PathBuf)>) -> Self {
        let roots =
            apigw_core::tls::root_store(&apigw_core::tls::load_certs(ca).unwrap(), "ca").unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(apigw_core::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let tls = match cert {
            Some((c, k)) => builder
                .with_client_auth_cert(
                    apigw_core::tls::load_certs(&c).unwrap(),
                    apigw_core::tls::load_key(&k).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        Self {
            tls: Arc::new(tls),
            h2: false,
        }
    }

    /// The TLS configuration (no ALPN unless [`Client::h2`]), for a test that drives the
    /// connection itself.
    pub fn tls(&self, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        let mut tls = (*self.tls).clone();
        tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(tls)
    }

    pub fn h2(mut self) -> Self {
        let mut tls = (*self.tls).clone();
        tls.alpn_protocols = vec![b"h2".to_vec()];
        self.tls = Arc::new(tls);
        self.h2 = true;
        self
    }

    /// One h2 connection to `addr` for requests whose bodies the test reads itself (watches).
    pub async fn h2_connection(
        &self,
        addr: SocketAddr,
    ) -> hyper::client::conn::http2::SendRequest<http_body_util::Full<Bytes>> {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut tls = (*self.tls).clone();
        tls.alpn_protocols = vec![b"h2".to_vec()];
        let tls = tokio_rustls::TlsConnector::from(Arc::new(tls))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        let (send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tls),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        send
    }

    pub async fn get(&self, addr: SocketAddr, path: &str) -> Answer {
        self.send(addr, Request::get(path).body(Bytes::new()).unwrap())
            .await
    }

    pub async fn send(&self, addr: SocketAddr, req: Request<Bytes>) -> Answer {
        self.try_send(addr, req).await.unwrap()
    }

    /// One request on a new connection. Gives up after [`ANSWER_WITHIN`]: a test that waits
    /// on an answer fails with an error instead of hanging the run.
    pub async fn try_send(
        &self,
        addr: SocketAddr,
        req: Request<Bytes>,
    ) -> Result<Answer, Box<dyn std::error::Error + Send + Sync>> {
        match tokio::time::timeout(ANSWER_WITHIN, self.exchange(addr, req)).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no answer from {addr} within {ANSWER_WITHIN:?}").into()),
        }
    }

    async fn exchange(
        &self,
        addr: SocketAddr,
        req: Request<Bytes>,
    ) -> Result<Answer, Box<dyn std::error::Error + Send + Sync>> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let name = ServerName::try_from("localhost").unwrap();
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await?;
        let io = hyper_util::rt::TokioIo::new(tls);
        let (mut parts, body) = req.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or("/".into());
        let res = if self.h2 {
            let (mut send, conn) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                    .await?;
            tokio::spawn(conn);
            parts.uri = format!("https://localhost:{}{path}", addr.port()).parse()?;
            parts.version = http::Version::HTTP_2;
            let answer =
                send.send_request(Request::from_parts(parts, http_body_util::Full::new(body)));
            // Not held while waiting: a request handed over just as the connection ends is
            // answered only once every handle to the connection is gone.
            drop(send);
            answer.await?
        } else {
            let (mut send, conn) = hyper::client::conn::http1::handshake(io).await?;
            tokio::spawn(conn);
            parts
                .headers
                .insert("host", format!("localhost:{}", addr.port()).parse()?);
            let answer =
                send.send_request(Request::from_parts(parts, http_body_util::Full::new(body)));
            drop(send);
            answer.await?
        };
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = res.into_body().collect().await?.to_bytes();
        Ok(Answer {
            status,
            headers,
            body,
        })
    }
}

/// How long a test client waits for a whole answer (a watch is read by the test itself).
pub const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits up to `secs` for `cond`.
pub async fn eventually<F, Fut>(secs: u64, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}
