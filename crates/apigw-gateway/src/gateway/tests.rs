//! The pipeline driven in-process: requests built in the test go through
//! [`GatewayService`](super::GatewayService) with `oneshot`, without a socket or TLS, so a test
//! can hold a request body open, time a request out, or present any client certificate chain.
//! The end-to-end tests in `tests/` keep the real TLS and the real peers.

use super::Gateway;
use crate::config::{Config, Flags};
use apigw_core::certs::{write_dev_pki, DevPkiOptions};
use apigw_core::server::ConnInfo;
use apigw_registry::Registry;
use bytes::Bytes;
use http::{header, Request, StatusCode, Version};
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use serde_json::Value;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// A gateway built from a config file over a fresh dev PKI, serving nothing but itself.
struct World {
    _dir: tempfile::TempDir,
    pki: PathBuf,
    gateway: Arc<Gateway>,
}

impl World {
    /// The dev PKI's client CA, token file and front proxy, no anonymous access, plus `extra`
    /// YAML lines.
    fn new(extra: &str) -> Self {
        let (dir, pki) = dev_pki();
        Self::build(dir, pki, extra)
    }

    /// The world over the PKI `dev_pki` wrote.
    fn build(dir: tempfile::TempDir, pki: PathBuf, extra: &str) -> Self {
        let file = dir.path().join("config.yaml");
        std::fs::write(
            &file,
            format!(
                "tlsCertFile: pki/serving.crt\ntlsPrivateKeyFile: pki/serving.key\n\
                 clientCaFile: pki/client-ca.crt\ntokenAuthFile: pki/tokens.csv\n\
                 requestheaderClientCaFile: pki/front-proxy-ca.crt\n\
                 requestheaderAllowedNames: [front-proxy-client]\n\
                 requestheaderUsernameHeaders: [X-Remote-User]\n\
                 requestheaderGroupHeaders: [X-Remote-Group]\n\
                 requestheaderExtraHeadersPrefix: [X-Remote-Extra-]\n{extra}"
            ),
        )
        .expect("config file");
        let flags = Flags {
            config: Some(file),
            ..Default::default()
        };
        let cfg = Config::load(&flags).expect("config");
        let built = Gateway::build(&cfg, Registry::new()).expect("gateway");
        Self {
            _dir: dir,
            pki,
            gateway: built.gateway,
        }
    }

    /// The bearer token of the dev token user.
    fn token(&self) -> String {
        let csv = std::fs::read_to_string(self.pki.join("tokens.csv")).expect("tokens.csv");
        csv.split(',').next().expect("a token").to_string()
    }

    /// A connection from 127.0.0.1 presenting `chain` (PEM file names in the PKI).
    fn conn(&self, chain: &[&str]) -> ConnInfo {
        let peer_chain = chain
            .iter()
            .flat_map(|f| apigw_core::tls::load_certs(&self.pki.join(f)).expect("cert"))
            .collect();
        ConnInfo {
            remote: "127.0.0.1:40000".parse().expect("address"),
            peer_chain,
        }
    }

    /// One request on a connection without a client certificate.
    async fn send<B>(&self, req: Request<B>) -> (StatusCode, http::HeaderMap, Value)
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<apigw_core::body::BoxError>,
    {
        self.send_on(&self.conn(&[]), req).await
    }

    async fn send_on<B>(
        &self,
        conn: &ConnInfo,
        req: Request<B>,
    ) -> (StatusCode, http::HeaderMap, Value)
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<apigw_core::body::BoxError>,
    {
        let res = self
            .gateway
            .service(conn)
            .oneshot(req)
            .await
            .unwrap_or_else(|never: Infallible| match never {});
        let (parts, body) = res.into_parts();
        let bytes = body.collect().await.expect("response body").to_bytes();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (parts.status, parts.headers, json)
    }

    fn get(&self, path: &str) -> http::request::Builder {
        Request::get(path).header(header::HOST, "gateway.test")
    }
}

/// A fresh dev PKI in a temporary directory.
fn dev_pki() -> (tempfile::TempDir, PathBuf) {
    apigw_core::tls::install_default_provider();
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = dir.path().join("pki");
    write_dev_pki(&DevPkiOptions {
        out: pki.clone(),
        ..Default::default()
    })
    .expect("dev PKI");
    (dir, pki)
}

fn empty() -> Empty<Bytes> {
    Empty::new()
}

/// A request body that never ends.
fn endless(
) -> StreamBody<futures_util::stream::Pending<Result<http_body::Frame<Bytes>, Infallible>>> {
    StreamBody::new(futures_util::stream::pending())
}

fn self_subject_review() -> Full<Bytes> {
    Full::new(Bytes::from_static(
        br#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
    ))
}

const REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

#[tokio::test]
async fn version_and_health_need_no_credentials() {
    let w = World::new("");
    let (code, _, doc) = w.send(w.get("/version").body(empty()).unwrap()).await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        doc["gitVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with('v')),
        "{doc}"
    );
    let (code, _, _) = w.send(w.get("/livez").body(empty()).unwrap()).await;
    assert_eq!(code, StatusCode::OK);
}

#[tokio::test]
async fn no_credentials_is_a_401_status() {
    let w = World::new("");
    let (code, _, doc) = w.send(w.get("/apis").body(empty()).unwrap()).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    assert_eq!(doc["kind"], "Status");
    assert_eq!(doc["code"], 401);
}

#[tokio::test]
async fn a_token_user_reads_discovery_and_unknown_paths_are_404() {
    let w = World::new("");
    let auth = format!("Bearer {}", w.token());
    let req = w.get("/apis").header(header::AUTHORIZATION, &auth);
    let (code, _, doc) = w.send(req.body(empty()).unwrap()).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(doc["kind"], "APIGroupList");
    let req = w.get("/no/such/thing").header(header::AUTHORIZATION, &auth);
    let (code, _, doc) = w.send(req.body(empty()).unwrap()).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(doc["reason"], "NotFound");
}

#[tokio::test]
async fn who_am_i_by_certificate_by_token_and_impersonated() {
    let w = World::new("");
    let post = || {
        Request::post(REVIEWS)
            .header(header::HOST, "gateway.test")
            .header(header::CONTENT_TYPE, "application/json")
    };
    let admin = w.conn(&["admin.crt"]);
    let (code, _, doc) = w
        .send_on(&admin, post().body(self_subject_review()).unwrap())
        .await;
    assert_eq!(code, StatusCode::CREATED, "{doc}");
    assert_eq!(doc["status"]["userInfo"]["username"], "dev-admin");
    let groups = doc["status"]["userInfo"]["groups"].to_string();
    assert!(
        groups.contains("system:masters") && groups.contains("system:authenticated"),
        "{groups}"
    );

    let req = post().header(header::AUTHORIZATION, format!("Bearer {}", w.token()));
    let (_, _, doc) = w.send(req.body(self_subject_review()).unwrap()).await;
    assert_eq!(doc["status"]["userInfo"]["username"], "dev-token-user");
    // Authenticated once: the group is there once.
    let groups = doc["status"]["userInfo"]["groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let n = groups
        .iter()
        .filter(|g| *g == "system:authenticated")
        .count();
    assert_eq!(n, 1, "{groups:?}");

    // AlwaysAllow lets the admin impersonate.
    let req = post()
        .header("Impersonate-User", "jane")
        .header("Impersonate-Group", "devs");
    let (code, _, doc) = w
        .send_on(&admin, req.body(self_subject_review()).unwrap())
        .await;
    assert_eq!(code, StatusCode::CREATED, "{doc}");
    assert_eq!(doc["status"]["userInfo"]["username"], "jane");
}

#[tokio::test]
async fn identity_headers_are_believed_from_the_front_proxy_only() {
    let w = World::new("");
    let spoofed = || {
        Request::post(REVIEWS)
            .header(header::HOST, "gateway.test")
            .header("x-remote-user", "system:admin")
            .header("X-Remote-Group", "system:masters")
            .header("X-Remote-Extra-Scopes", "all")
    };
    let (code, _, doc) = w
        .send_on(
            &w.conn(&["proxy-client.crt"]),
            spoofed().body(self_subject_review()).unwrap(),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{doc}");
    assert_eq!(doc["status"]["userInfo"]["username"], "system:admin");
    assert_eq!(
        doc["status"]["userInfo"]["extra"]["scopes"][0], "all",
        "{doc}"
    );
    // A client certificate from the client CA, not the front proxy's: the headers are noise.
    let (code, _, doc) = w
        .send_on(
            &w.conn(&["user.crt"]),
            spoofed().body(self_subject_review()).unwrap(),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED, "{doc}");
    assert_eq!(doc["status"]["userInfo"]["username"], "dev-user");
    let extra = doc["status"]["userInfo"]["extra"]
        .as_object()
        .expect("extra");
    let keys: Vec<&String> = extra.keys().collect();
    assert_eq!(
        keys,
        ["authentication.kubernetes.io/credential-id"],
        "{doc}"
    );
    assert!(
        extra["authentication.kubernetes.io/credential-id"][0]
            .as_str()
            .is_some_and(|id| id.starts_with("X509SHA256=") && id.len() == 11 + 64),
        "{doc}"
    );
}

#[tokio::test]
async fn host_errors_close_http1_connections_only() {
    let w = World::new("");
    let no_host = Request::get("/version").body(empty()).unwrap();
    let (code, headers, doc) = w.send(no_host).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(doc["message"], "missing required Host header");
    assert_eq!(headers[header::CONNECTION], "close");

    let two = Request::get("/version")
        .version(Version::HTTP_2)
        .header(header::HOST, "a")
        .header(header::HOST, "b")
        .body(empty())
        .unwrap();
    let (code, headers, _) = w.send(two).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(headers.get(header::CONNECTION).is_none());

    // HTTP/2 names its host in :authority.
    let h2 = Request::get("https://gateway.test/version")
        .version(Version::HTTP_2)
        .body(empty())
        .unwrap();
    assert_eq!(w.send(h2).await.0, StatusCode::OK);
}

#[tokio::test]
async fn path_tricks_are_refused_before_authentication() {
    let w = World::new("");
    for path in ["/apis/../api", "/apis//x", "/apis/a%2Fb"] {
        let (code, _, doc) = w.send(w.get(path).body(empty()).unwrap()).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{path}: {doc}");
        assert_eq!(doc["kind"], "Status");
    }
}

#[tokio::test]
async fn past_the_in_flight_limit_is_429_with_retry_after() {
    // The plain in-flight limit, without API Priority and Fairness.
    let w = World::new("maxRequestsInflight: 1\nenablePriorityAndFairness: false\n");
    let admin = w.conn(&["admin.crt"]);
    // The first request holds the only slot while its body never ends.
    let holding = Request::post(REVIEWS)
        .header(header::HOST, "gateway.test")
        .body(endless())
        .unwrap();
    let held = tokio::spawn({
        let svc = w.gateway.service(&admin);
        async move { svc.oneshot(holding).await }
    });
    // Until the first one holds its slot, the second may pass: retry briefly.
    let mut last = None;
    for _ in 0..100 {
        let (code, headers, _) = w
            .send_on(&admin, w.get("/apis").body(empty()).unwrap())
            .await;
        if code == StatusCode::TOO_MANY_REQUESTS {
            last = Some(headers);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let headers = last.expect("a 429 while the slot is held");
    assert_eq!(headers[header::RETRY_AFTER], "1");
    held.abort();
}

#[tokio::test]
async fn a_request_past_its_deadline_is_a_504() {
    let w = World::new("requestTimeout: 200ms\n");
    let req = Request::post(REVIEWS)
        .header(header::HOST, "gateway.test")
        .body(endless())
        .unwrap();
    let (code, _, doc) = w.send_on(&w.conn(&["admin.crt"]), req).await;
    assert_eq!(code, StatusCode::GATEWAY_TIMEOUT, "{doc}");
    assert_eq!(doc["reason"], "Timeout");
}

/// A loopback listener for a test backend serving the dev PKI's wardle certificate, with the
/// ALPN protocols `alpn`.
async fn backend_listener(
    pki: &std::path::Path,
    alpn: &[&[u8]],
) -> (tokio::net::TcpListener, tokio_rustls::TlsAcceptor) {
    let certs = apigw_core::tls::load_certs(&pki.join("wardle.crt")).expect("backend cert");
    let key = apigw_core::tls::load_key(&pki.join("wardle.key")).expect("backend key");
    let mut tls = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("backend TLS");
    tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    (listener, tokio_rustls::TlsAcceptor::from(Arc::new(tls)))
}

/// A TLS backend (the dev PKI's wardle certificate) that answers every request with the
/// request's headers as a JSON object of lists.
async fn echo_backend(pki: &std::path::Path) -> std::net::SocketAddr {
    let (listener, acceptor) = backend_listener(pki, &[b"h2", b"http/1.1"]).await;
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let echo =
                    hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async move {
                        let mut seen = serde_json::Map::new();
                        for (name, value) in req.headers() {
                            let list = seen
                                .entry(name.as_str())
                                .or_insert_with(|| Value::Array(vec![]));
                            if let Value::Array(list) = list {
                                list.push(Value::from(value.to_str().unwrap_or("?")));
                            }
                        }
                        let body = Full::new(Bytes::from(Value::Object(seen).to_string()));
                        Ok::<_, Infallible>(http::Response::new(body))
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), echo)
                .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_proxied_request_carries_the_identity_and_no_credentials() {
    let (dir, pki) = dev_pki();
    let backend = echo_backend(&pki).await;
    let w = World::build(
        dir,
        pki,
        &format!(
            "serviceCaFile: pki/addon-ca.crt\nproxyClientCertFile: pki/proxy-client.crt\n\
             proxyClientKeyFile: pki/proxy-client.key\n\
             resolve:\n  \"wardle-server.wardle-namespace.svc:443\": \"{backend}\"\n"
        ),
    );
    let service = apigw_registry::ApiService::from_value(serde_json::json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1alpha1.wardle.example.com"},
        "spec": {"group": "wardle.example.com", "version": "v1alpha1",
                 "service": {"namespace": "wardle-namespace", "name": "wardle-server"},
                 "groupPriorityMinimum": 1000, "versionPriority": 15}
    }))
    .expect("APIService");
    w.gateway
        .registry
        .replace(apigw_registry::Snapshot::new([service]));
    let req = w
        .get("/apis/wardle.example.com/v1alpha1/namespaces/default/flunders")
        .header(header::AUTHORIZATION, format!("Bearer {}", w.token()))
        .header("X-Remote-User", "system:admin")
        .header("x-remote-group", "system:masters")
        .header("X-Remote-Extra-Scopes", "all")
        .body(empty())
        .unwrap();
    let (code, _, seen) = w.send(req).await;
    assert_eq!(code, StatusCode::OK, "{seen}");
    assert_eq!(
        seen["x-remote-user"],
        serde_json::json!(["dev-token-user"]),
        "{seen}"
    );
    assert_eq!(
        seen["x-remote-group"],
        serde_json::json!(["dev-group", "system:authenticated"]),
        "{seen}"
    );
    assert_eq!(
        seen["x-forwarded-host"],
        serde_json::json!(["gateway.test"])
    );
    assert_eq!(seen["x-forwarded-for"], serde_json::json!(["127.0.0.1"]));
    for gone in [
        "authorization",
        "x-remote-extra-scopes",
        "impersonate-extra-foo",
    ] {
        assert!(
            seen.get(gone).is_none(),
            "{gone} reached the backend: {seen}"
        );
    }
}

/// The authentication configuration's `anonymous` with `conditions`: requests without
/// credentials are `system:anonymous` at exactly the listed paths, and 401 everywhere else
/// (`/apis/` is not `/apis`), as kube-apiserver matches them.
#[tokio::test]
async fn anonymous_only_at_the_listed_paths() {
    let (dir, pki) = dev_pki();
    let auth = dir.path().join("authn.yaml");
    std::fs::write(
        &auth,
        "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\n\
         anonymous:\n  enabled: true\n  conditions:\n  - path: /apis\n  - path: /api\n",
    )
    .expect("authentication config");
    let w = World::build(
        dir,
        pki,
        &format!("authenticationConfig: {}\n", auth.display()),
    );
    for (path, want) in [
        ("/apis", StatusCode::OK),
        ("/api", StatusCode::OK),
        ("/apis/", StatusCode::UNAUTHORIZED),
        ("/apis/apiregistration.k8s.io", StatusCode::UNAUTHORIZED),
        ("/openapi/v2", StatusCode::UNAUTHORIZED),
    ] {
        let (status, _, body) = w.send(w.get(path).body(empty()).unwrap()).await;
        assert_eq!(status, want, "{path}: {body}");
    }
    // A bad token is a 401 even at a listed path: it is not taken as anonymous.
    let bad = w
        .get("/apis")
        .header(header::AUTHORIZATION, "Bearer nope")
        .body(empty())
        .unwrap();
    assert_eq!(w.send(bad).await.0, StatusCode::UNAUTHORIZED);
    // Who the anonymous request was.
    let review = Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .header(header::HOST, "gateway.test")
        .header(header::CONTENT_TYPE, "application/json")
        .body(self_subject_review())
        .unwrap();
    assert_eq!(w.send(review).await.0, StatusCode::UNAUTHORIZED);
}

/// `--anonymous-auth` and the file's `anonymous` together are refused, as kube-apiserver
/// refuses them; `enabled: false` with conditions is a problem of the file.
#[test]
fn anonymous_in_the_file_and_the_flag_conflict() {
    let dir = tempfile::tempdir().expect("dir");
    let auth = dir.path().join("authn.yaml");
    std::fs::write(
        &auth,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\nanonymous: {enabled: true}\n",
    )
    .expect("file");
    let settings = apigw_authn::AuthnSettings {
        anonymous: Some(false),
        authentication_config: Some(auth.clone()),
        ..Default::default()
    };
    let errors = settings.load().err().unwrap_or_default();
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        [format!("{}: anonymous: Forbidden: --anonymous-auth flag cannot be set when anonymous field is configured in authentication configuration file", auth.display())]
    );
    let settings = apigw_authn::AuthnSettings {
        anonymous: None,
        ..settings
    };
    let files = settings.load().expect("no conflict without the flag");
    assert_eq!(files.anonymous, apigw_authn::Anonymous::Everywhere);
    std::fs::write(
        &auth,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n\
         anonymous: {enabled: false, conditions: [{path: /livez}]}\n",
    )
    .expect("file");
    let errors = settings.load().err().unwrap_or_default();
    let text = apigw_core::errors::chain(&errors[0]);
    assert!(
        text.contains("anonymous.conditions")
            && text.contains("enabled should be set to true when conditions are defined"),
        "{text}"
    );
}

/// `anonymous` is read at start: a reload of the authentication configuration that changes it
/// is refused (kube's `changed from initial configuration file`), and the paths in force stay.
#[tokio::test]
async fn a_reload_that_changes_anonymous_is_refused() {
    let (dir, pki) = dev_pki();
    let auth = dir.path().join("authn.yaml");
    let write = |anonymous: &str| {
        std::fs::write(
            &auth,
            format!("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n{anonymous}"),
        )
        .expect("authentication config")
    };
    write("anonymous: {enabled: true, conditions: [{path: /apis}]}\n");
    let w = World::build(
        dir,
        pki,
        &format!("authenticationConfig: {}\n", auth.display()),
    );
    write("anonymous: {enabled: true}\n");
    let err = w.gateway.authn.reload_jwt(&auth).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("anonymous: Forbidden: changed from initial configuration file"),
        "{err}"
    );
    let (status, _, _) = w.send(w.get("/api").body(empty()).unwrap()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "still /apis only");
    // The same anonymous section with other changes reloads.
    write("anonymous: {enabled: true, conditions: [{path: /apis}]}\njwt: []\n");
    assert!(w.gateway.authn.reload_jwt(&auth).is_ok());
}

/// A request body that streams its frames as they come.
type Streamed = StreamBody<
    std::pin::Pin<
        Box<
            dyn futures_util::Stream<Item = Result<http_body::Frame<Bytes>, Infallible>>
                + Send
                + Sync,
        >,
    >,
>;

/// A self-review whose body arrives `after` it was sent: the request holds its seat that long.
fn slow_review(after: Duration) -> Streamed {
    let stream = futures_util::stream::once(async move {
        tokio::time::sleep(after).await;
        Ok(http_body::Frame::data(Bytes::from_static(
            br#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
        )))
    });
    StreamBody::new(Box::pin(stream))
}

/// API Priority and Fairness on one seat of `global-default`: a noisy user sending 40 slow
/// requests at once and a quiet user sending one at a time on the same level. The quiet
/// user's requests all succeed, each served after at most a few of the noisy user's (fair
/// queuing, not first come first served); the noisy user's backlog past the wait limit gets
/// 429 with `Retry-After`; every answer carries the PF headers of its schema and level.
#[tokio::test(flavor = "multi_thread")]
async fn a_noisy_user_cannot_starve_a_quiet_one_on_the_same_level() {
    // 3 seats in all: global-default's share is ceil(3 × 20/245) = 1; a queued request may
    // wait a quarter of the 4 s request timeout.
    let w =
        World::new("maxRequestsInflight: 3\nmaxMutatingRequestsInflight: 0\nrequestTimeout: 4s\n");
    let noisy = w.conn(&["user.crt"]);
    let done = std::sync::atomic::AtomicUsize::new(0);
    let noisy_all = futures_util::future::join_all((0..40).map(|_| {
        let req = Request::post(REVIEWS)
            .header(header::HOST, "gateway.test")
            .header(header::CONTENT_TYPE, "application/json")
            .body(slow_review(Duration::from_millis(50)))
            .unwrap();
        let (w, noisy, done) = (&w, &noisy, &done);
        async move {
            let answer = w.send_on(noisy, req).await;
            // Served ones only: refusals at the wait limit come in bursts and take no seat.
            if answer.0 == StatusCode::CREATED {
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            answer
        }
    }));
    let token = format!("Bearer {}", w.token());
    let quiet = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut served_after = Vec::new();
        for _ in 0..3 {
            let before = done.load(std::sync::atomic::Ordering::SeqCst);
            let (code, headers, body) = w
                .send(
                    w.get("/apis")
                        .header(header::AUTHORIZATION, token.as_str())
                        .body(empty())
                        .unwrap(),
                )
                .await;
            assert_eq!(code, StatusCode::OK, "the quiet user was refused: {body}");
            assert_eq!(
                headers[apigw_flowcontrol::PRIORITY_LEVEL_UID],
                apigw_flowcontrol::config::uid("prioritylevelconfiguration", "global-default")
                    .as_str()
            );
            served_after.push(done.load(std::sync::atomic::Ordering::SeqCst) - before);
        }
        served_after
    };
    let (noisy_answers, quiet_served_after) = tokio::join!(noisy_all, quiet);
    let mut refused = 0;
    for (code, headers, _) in noisy_answers {
        if code == StatusCode::TOO_MANY_REQUESTS {
            refused += 1;
            assert!(headers.contains_key(header::RETRY_AFTER));
            assert!(headers.contains_key(apigw_flowcontrol::FLOW_SCHEMA_UID));
        } else {
            assert_eq!(code, StatusCode::CREATED);
        }
    }
    assert!(refused > 0, "the noisy user's backlog was never refused");
    // Each quiet request waited behind at most a few noisy ones, not their whole backlog: the
    // noisy flow spreads over its hand of 6 queues (the hash is keyed per process, so which
    // ones varies by run), and fair queuing serves each non-empty queue in turn, so at most one
    // round of 6, and the one running when it arrived.
    assert!(
        quiet_served_after.iter().all(|&n| n <= 7),
        "noisy requests served while each quiet one waited: {quiet_served_after:?}"
    );
    // The debug dump, as an admin asks it.
    let admin = w.conn(&["admin.crt"]);
    let res = w
        .gateway
        .service(&admin)
        .oneshot(
            w.get("/debug/api_priority_and_fairness/dump_priority_levels")
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap_or_else(|never: Infallible| match never {});
    assert_eq!(res.status(), StatusCode::OK);
    let text = res.into_body().collect().await.expect("dump").to_bytes();
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.starts_with("PriorityLevelName,")
            && text.lines().any(|l| l.starts_with("global-default,")),
        "{text}"
    );
    let metrics = w.gateway.metrics.render();
    assert!(
        metrics.contains("apiserver_flowcontrol_rejected_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\",reason=\"time-out\"}"),
        "{metrics}"
    );
}

/// A TLS backend (the dev PKI's wardle certificate) that takes requests and never answers.
async fn stalled_backend(pki: &std::path::Path) -> std::net::SocketAddr {
    let (listener, acceptor) = backend_listener(pki, &[]).await;
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let never = hyper::service::service_fn(|_: Request<hyper::body::Incoming>| async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::new())))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), never)
                    .await;
            });
        }
    });
    addr
}

/// Beyond upstream: each APIService has a share of a level, and past it borrows only while a
/// reserve stays free. With a backend that stopped answering and five requests stuck on it,
/// the other APIService's requests on the same level still succeed on the reserve; the stalled
/// one's requests past what it may hold wait, then get 429, and those holding a seat end at
/// the request timeout.
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_backend_cannot_take_the_seats_of_the_others() {
    let (dir, pki) = dev_pki();
    let fast = echo_backend(&pki).await;
    let stalled = stalled_backend(&pki).await;
    // 40 seats: global-default has ceil(40 × 20/245) = 4, of which an APIService may hold 2.
    let w = World::build(
        dir,
        pki,
        &format!(
            "serviceCaFile: pki/addon-ca.crt\nproxyClientCertFile: pki/proxy-client.crt\n\
             proxyClientKeyFile: pki/proxy-client.key\n\
             maxRequestsInflight: 40\nmaxMutatingRequestsInflight: 0\nrequestTimeout: 3s\n\
             resolve:\n  \"wardle-server.wardle-namespace.svc:443\": \"{fast}\"\n\
             \x20 \"wardle-server.wardle-namespace.svc:8443\": \"{stalled}\"\n"
        ),
    );
    let service = |version: &str, port: u16| {
        apigw_registry::ApiService::from_value(serde_json::json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": format!("{version}.wardle.example.com")},
            "spec": {"group": "wardle.example.com", "version": version,
                     "service": {"namespace": "wardle-namespace", "name": "wardle-server", "port": port},
                     "groupPriorityMinimum": 1000, "versionPriority": 15}
        }))
        .expect("APIService")
    };
    w.gateway.registry.replace(apigw_registry::Snapshot::new([
        service("v1alpha1", 443),
        service("v1beta1", 8443),
    ]));
    let token = format!("Bearer {}", w.token());
    let get = |version: &str| {
        w.get(&format!(
            "/apis/wardle.example.com/{version}/namespaces/default/flunders"
        ))
        .header(header::AUTHORIZATION, token.as_str())
        .body(empty())
        .unwrap()
    };
    let stuck = futures_util::future::join_all((0..5).map(|_| w.send(get("v1beta1"))));
    let others = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut codes = Vec::new();
        for _ in 0..3 {
            codes.push(w.send(get("v1alpha1")).await.0);
        }
        codes
    };
    let (stuck, others) = tokio::join!(stuck, others);
    assert_eq!(
        others,
        [StatusCode::OK; 3],
        "the healthy backend's requests were refused"
    );
    let refused: Vec<_> = stuck
        .iter()
        .filter(|(code, _, _)| *code == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    let codes: Vec<_> = stuck.iter().map(|s| s.0).collect();
    assert!(!refused.is_empty(), "{codes:?}");
    for (_, headers, body) in &refused {
        assert!(headers.contains_key(header::RETRY_AFTER));
        assert!(
            body["message"]
                .as_str()
                .unwrap_or_default()
                .contains("APIService's backend"),
            "{body}"
        );
    }
    // Those holding a seat: at least its share of 2, and the reserve kept free.
    let held = stuck
        .iter()
        .filter(|(code, _, _)| *code == StatusCode::GATEWAY_TIMEOUT)
        .count();
    assert!(held >= 2 && held + refused.len() == 5, "{codes:?}");
}

/// `--flowcontrol-config`: a FlowSchema applied as to a cluster puts the token user in a
/// level of its own; the file changed, the user goes back to `global-default`; a bad file keeps
/// the configuration in force.
#[tokio::test]
async fn a_flowschema_from_a_file_changes_the_classification_and_reloads() {
    use apigw_core::reload::Reload;
    let (dir, pki) = dev_pki();
    let file = dir.path().join("flowcontrol.yaml");
    let write = |user: &str| {
        std::fs::write(
            &file,
            format!(
                "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\n\
                 metadata: {{name: tokens}}\nspec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 10\n\
                 \x20   limitResponse: {{type: Reject}}\n---\n\
                 apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {{name: token-users}}\n\
                 spec:\n  priorityLevelConfiguration: {{name: tokens}}\n  matchingPrecedence: 100\n  rules:\n\
                 \x20 - subjects: [{{kind: User, user: {{name: {user}}}}}]\n\
                 \x20   nonResourceRules: [{{verbs: [\"*\"], nonResourceURLs: [\"*\"]}}]\n"
            ),
        )
        .expect("write")
    };
    write("dev-token-user");
    let w = World::build(
        dir,
        pki,
        &format!("flowcontrolConfig: {}\n", file.display()),
    );
    let level_of = |headers: &http::HeaderMap| {
        headers[apigw_flowcontrol::PRIORITY_LEVEL_UID]
            .to_str()
            .unwrap_or_default()
            .to_string()
    };
    let token = format!("Bearer {}", w.token());
    let ask = || {
        w.get("/apis")
            .header(header::AUTHORIZATION, token.as_str())
            .body(empty())
            .unwrap()
    };
    let (code, headers, _) = w.send(ask()).await;
    assert_eq!(code, StatusCode::OK);
    let tokens = apigw_flowcontrol::config::uid("prioritylevelconfiguration", "tokens");
    assert_eq!(level_of(&headers), tokens);

    let flow = w.gateway.flow.clone().expect("APF on");
    write("someone-else");
    flow.reload("flowcontrol config")
        .expect("a good file reloads");
    let (_, headers, _) = w.send(ask()).await;
    let default = apigw_flowcontrol::config::uid("prioritylevelconfiguration", "global-default");
    assert_eq!(level_of(&headers), default);

    std::fs::write(&file, "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: x}\nspec: {priorityLevelConfiguration: {name: nowhere}}\n").expect("write");
    let err = flow.reload("flowcontrol config").unwrap_err();
    assert!(
        err.to_string()
            .contains("no PriorityLevelConfiguration \"nowhere\""),
        "{err}"
    );
    let (_, headers, _) = w.send(ask()).await;
    assert_eq!(
        level_of(&headers),
        default,
        "the configuration in force stayed"
    );
}
