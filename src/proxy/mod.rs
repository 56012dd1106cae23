//! Forwarding to addon API servers. Owns one backend per distinct service (name, port and
//! trust) with its connection pool (`pool`), the request rewrite (identity headers, hop-by-hop
//! headers, URI), streaming both ways, redirect refusal, and HTTP/1.1 upgrades spliced after a
//! `101`.

mod connector;
pub mod fetch;
mod headers;
mod pool;

pub use connector::{parse_host, ConnectError, ResolveService, Resolver};
pub use headers::{
    escape_extra_key, remove_hop_by_hop, set_identity, ConfiguredHeaders, Forwarded,
};
pub use pool::STREAMS_PER_CONN;

use crate::authn::Identity;
use crate::body::{self, Body};
use crate::errors::Status;
use crate::registry::ApiService;
use crate::request_kind::RequestKind;
use crate::tls::{backend_client_config, ProxyClientCert, Trust};
use arc_swap::ArcSwap;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::CertificateDer;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Marks a response the proxy made because the backend could not be reached.
#[derive(Debug, Clone, Copy)]
struct Unreachable;

/// On a response after the backend answered: its code and time to its response head.
#[derive(Debug, Clone, Copy)]
struct Answered {
    status: StatusCode,
    elapsed: Duration,
}

/// Identifies a backend: requests to the same key share a connection pool.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BackendKey {
    host: String,
    port: u16,
    ca_bundle: Vec<u8>,
    insecure: bool,
}

impl BackendKey {
    /// True when requests for `svc` use this backend (compared without allocating: this runs
    /// on every proxied request).
    fn serves(&self, svc: &ApiService) -> bool {
        svc.service.as_ref().is_some_and(|s| {
            s.port == self.port
                && self
                    .host
                    .strip_prefix(s.name.as_str())
                    .and_then(|h| h.strip_prefix('.'))
                    .and_then(|h| h.strip_prefix(s.namespace.as_str()))
                    == Some(".svc")
        }) && svc.ca_bundle == self.ca_bundle
            && svc.insecure_skip_tls_verify == self.insecure
    }
}

/// One backend: the name its certificate must carry, and its connections.
pub struct Backend {
    key: BackendKey,
    /// Requests from clients (balanced over the service's endpoints, pooled) and the
    /// gateway's own (on a new connection each).
    pool: pool::Pool,
    /// The delegate reached by impersonation: its token file and `Authorization` value.
    impersonate_with: Option<(std::path::PathBuf, ArcSwap<HeaderValue>)>,
}

/// `Bearer <token>` from a token file (surrounding whitespace trimmed).
fn bearer(path: &std::path::Path) -> Result<HeaderValue, Status> {
    let unusable = |why: String| {
        Status::service_unavailable(format!(
            "delegate impersonation token file {}: {why}",
            path.display()
        ))
    };
    let text = std::fs::read_to_string(path).map_err(|e| unusable(e.to_string()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(unusable("empty".into()));
    }
    let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| unusable("not a valid token".into()))?;
    value.set_sensitive(true);
    Ok(value)
}

/// Shared proxy state.
pub struct Proxy {
    resolver: Arc<Resolver>,
    proxy_cert: Option<ProxyClientCert>,
    /// Trusted for APIServices without a caBundle (`--service-ca-file`, else system roots).
    default_roots: Vec<CertificateDer<'static>>,
    delegate: Option<Arc<Backend>>,
    /// Backends by APIService name; APIServices naming the same service share one.
    backends: RwLock<HashMap<String, Arc<Backend>>>,
    /// Front-proxy header names and prefixes to strip besides the standard ones.
    configured_headers: ConfiguredHeaders,
    metrics: Arc<crate::metrics::Metrics>,
    closing: tokio_util::sync::CancellationToken,
    drop_groups: Vec<String>,
    max_body: Option<usize>,
}

/// How the proxy is set up.
pub struct ProxySettings {
    pub resolver: Resolver,
    pub proxy_cert: Option<ProxyClientCert>,
    pub default_roots: Vec<CertificateDer<'static>>,
    pub delegate: Option<DelegateSettings>,
    /// The `--requestheader-*` names and prefixes, stripped from every request.
    pub configured_headers: ConfiguredHeaders,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Cancelled when upgraded streams must end (the shutdown grace period is over).
    pub closing: tokio_util::sync::CancellationToken,
    /// Groups never forwarded to backends.
    pub drop_groups: Vec<String>,
    /// Largest request body of a non-streaming request (not GET, watch or upgrade); None: any.
    pub max_body: Option<usize>,
}

/// What the front door decided about a request before handing it to the proxy.
#[derive(Debug, Clone)]
pub struct Inbound {
    /// The client's address, appended to `X-Forwarded-For`.
    pub client: SocketAddr,
    /// The request's one validated host, sent as `X-Forwarded-Host`.
    pub host: Option<HeaderValue>,
    /// Which connection the request takes, and whether it is an upgrade.
    pub kind: RequestKind,
}

/// The delegate API server.
pub struct DelegateSettings {
    pub host: String,
    pub port: u16,
    /// Trusted for its serving certificate.
    pub cas: Vec<CertificateDer<'static>>,
    /// Reach it by impersonation: the gateway's bearer token (from this file, re-read by
    /// [`Proxy::reload_delegate_token`]) and `Impersonate-*` headers, without the proxy client
    /// certificate. None: the proxy client certificate and `X-Remote-*` headers.
    pub impersonation_token_file: Option<std::path::PathBuf>,
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl Proxy {
    pub fn new(settings: ProxySettings) -> Result<Self, Status> {
        let resolver = Arc::new(settings.resolver);
        let delegate = match settings.delegate {
            Some(d) => {
                let token = match &d.impersonation_token_file {
                    Some(path) => Some((path.clone(), ArcSwap::from_pointee(bearer(path)?))),
                    None => None,
                };
                let mut backend = Backend::new(
                    BackendKey {
                        host: d.host,
                        port: d.port,
                        ca_bundle: Vec::new(),
                        insecure: false,
                    },
                    Trust::Roots(&d.cas),
                    settings.proxy_cert.clone().filter(|_| token.is_none()),
                    resolver.clone(),
                )?;
                backend.impersonate_with = token;
                Some(Arc::new(backend))
            }
            None => None,
        };
        Ok(Self {
            resolver,
            proxy_cert: settings.proxy_cert,
            default_roots: settings.default_roots,
            delegate,
            backends: RwLock::default(),
            configured_headers: settings.configured_headers,
            metrics: settings.metrics,
            closing: settings.closing,
            drop_groups: settings.drop_groups,
            max_body: settings.max_body,
        })
    }

    /// The resolver connections use (cluster mode plugs the Service resolver into it).
    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// Resolves a service name as connections will (static entries, then DNS).
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ConnectError> {
        self.resolver.resolve(host, port).await
    }

    /// Reads the delegate's impersonation token file again; an empty or unreadable file keeps
    /// the old token.
    pub fn reload_delegate_token(&self) -> Result<(), String> {
        if let Some((path, token)) = self
            .delegate
            .as_ref()
            .and_then(|d| d.impersonate_with.as_ref())
        {
            token.store(Arc::new(bearer(path).map_err(|s| s.message().to_string())?));
        }
        Ok(())
    }

    /// The delegate's impersonation token file, when it is reached by impersonation.
    pub fn delegate_token_file(&self) -> Option<&std::path::Path> {
        self.delegate
            .as_ref()
            .and_then(|d| d.impersonate_with.as_ref())
            .map(|(path, _)| path.as_path())
    }

    /// The delegate API server, if one is configured.
    pub fn delegate(&self) -> Option<&Arc<Backend>> {
        self.delegate.as_ref()
    }

    /// The backend of an APIService (the delegate for a `Local` one).
    pub fn backend_for(&self, svc: &ApiService) -> Result<Arc<Backend>, Status> {
        let Some(service) = &svc.service else {
            return self.delegate.clone().ok_or_else(|| {
                Status::service_unavailable(format!(
                    "service unavailable: APIService {} is Local and no --delegate-url is set",
                    svc.name
                ))
            });
        };
        let found = |backends: &HashMap<String, Arc<Backend>>| {
            backends
                .get(&svc.name)
                .filter(|b| b.key.serves(svc))
                .cloned()
        };
        if let Some(b) = found(&self.backends.read().unwrap_or_else(|e| e.into_inner())) {
            return Ok(b);
        }
        let mut backends = self.backends.write().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = found(&backends) {
            return Ok(b);
        }
        if let Some(shared) = backends.values().find(|b| b.key.serves(svc)).cloned() {
            backends.insert(svc.name.clone(), shared.clone());
            return Ok(shared);
        }
        let cas;
        let trust = if svc.insecure_skip_tls_verify {
            Trust::Insecure
        } else if svc.ca_bundle.is_empty() {
            Trust::Roots(&self.default_roots)
        } else {
            cas = crate::tls::parse_certs(
                &svc.ca_bundle,
                &format!("APIService {} spec.caBundle", svc.name),
            )
            .map_err(|e| Status::service_unavailable(format!("service unavailable: {e}")))?;
            Trust::Roots(&cas)
        };
        let key = BackendKey {
            host: service.host(),
            port: service.port,
            ca_bundle: svc.ca_bundle.clone(),
            insecure: svc.insecure_skip_tls_verify,
        };
        let backend = Arc::new(Backend::new(
            key,
            trust,
            self.proxy_cert.clone(),
            self.resolver.clone(),
        )?);
        backends.insert(svc.name.clone(), backend.clone());
        Ok(backend)
    }

    /// Drops the pooled connections of an APIService's backend (after a failed check: they
    /// lead to a server that no longer accepts, or no longer verifies).
    pub fn evict(&self, svc: &ApiService) {
        let backends = self.backends.read().unwrap_or_else(|e| e.into_inner());
        for backend in backends.values().filter(|b| b.key.serves(svc)) {
            backend.pool.clear();
        }
    }

    /// Drops the backends no APIService uses any more.
    pub fn retain(&self, live: &[&ApiService]) {
        let mut backends = self.backends.write().unwrap_or_else(|e| e.into_inner());
        backends.retain(|name, b| live.iter().any(|s| s.name == *name && b.key.serves(s)));
    }

    /// Forwards `req` as `identity` to `backend` (serving APIService `name`) and streams the
    /// answer back.
    pub async fn forward(
        &self,
        backend: &Backend,
        req: Request<Incoming>,
        identity: &Identity,
        inbound: &Inbound,
        name: &str,
    ) -> Response<Body> {
        let is_extra = |name: &str| self.configured_headers.matches(name);
        let filtered;
        let identity = if identity.groups.iter().any(|g| self.drop_groups.contains(g)) {
            let mut id = identity.clone();
            id.groups.retain(|g| !self.drop_groups.contains(g));
            filtered = id;
            &filtered
        } else {
            identity
        };
        // Boxed, so the futures of the gateway's handler (which await this one among many
        // other routes) stay small, and are cheap to move and to keep for long-running requests.
        let res = Box::pin(backend.forward(
            req,
            identity,
            inbound,
            &is_extra,
            &self.closing,
            self.max_body,
        ))
        .await;
        let mut res = res;
        if res.extensions().get::<Unreachable>().is_some() {
            self.metrics
                .backend_errors
                .with_label_values(&[name, "unreachable"])
                .inc();
        }
        if let Some(answered) = res.extensions_mut().remove::<Answered>() {
            self.metrics.backend(
                name,
                answered.status.as_u16(),
                answered.elapsed.as_secs_f64(),
            );
        }
        res
    }
}

impl Backend {
    fn new(
        key: BackendKey,
        trust: Trust<'_>,
        proxy_cert: Option<ProxyClientCert>,
        resolver: Arc<Resolver>,
    ) -> Result<Self, Status> {
        let what = format!("backend {}:{}", key.host, key.port);
        let tls = |alpn: &[&[u8]]| {
            let trust = match &trust {
                Trust::Roots(cas) => Trust::Roots(cas),
                Trust::Insecure => Trust::Insecure,
            };
            backend_client_config(trust, proxy_cert.clone(), alpn, &what)
                .map_err(|e| Status::service_unavailable(format!("service unavailable: {e}")))
        };
        let pool = pool::Pool::new(
            key.host.clone(),
            key.port,
            tls(&[b"http/1.1"])?,
            tls(&[b"h2", b"http/1.1"])?,
            resolver.clone(),
            CONNECT_TIMEOUT,
        )
        .map_err(|e| Status::service_unavailable(format!("service unavailable: {e}")))?;
        Ok(Self {
            key,
            pool,
            impersonate_with: None,
        })
    }

    async fn forward(
        &self,
        mut req: Request<Incoming>,
        identity: &Identity,
        inbound: &Inbound,
        is_extra: &(dyn Fn(&str) -> bool + Sync),
        closing: &tokio_util::sync::CancellationToken,
        max_body: Option<usize>,
    ) -> Response<Body> {
        let kind = inbound.kind;
        let upgrade = kind == RequestKind::Upgrade;
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
        let (mut parts, incoming) = req.into_parts();
        // The target goes on as the client sent it (HTTP/2 reads as the absolute form): the
        // pool keeps its path and query, byte for byte, and sets the form and `Host` or
        // `:authority` for the connection the request leaves on (`Pool::shape`).
        remove_hop_by_hop(&mut parts.headers, upgrade);
        // The front door answered any `100-continue` when the body was first read; the
        // backend gets the body without being asked again, as nginx forwards.
        parts.headers.remove(header::EXPECT);
        let token = self.impersonate_with.as_ref().map(|(_, t)| t.load());
        let fwd = Forwarded {
            identity,
            client_ip: inbound.client.ip(),
            original_host: inbound.host.clone(),
            impersonate_with: token.as_deref().map(|t| t.as_ref()),
        };
        set_identity(&mut parts.headers, &fwd, is_extra);
        // A client body that breaks mid-way (bad chunking, a reset) is the client's fault:
        // remember it, so the failed request answers 400 rather than blaming the backend.
        let body_failed: Arc<std::sync::OnceLock<String>> = Arc::default();
        let limit = max_body.filter(|_| {
            !matches!(kind, RequestKind::Upgrade | RequestKind::Watch)
                && parts.method != Method::GET
        });
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        // The outgoing framing comes from the body itself (hyper sets Content-Length from an
        // exact size), never from a header a client chose.
        parts.headers.remove(header::CONTENT_LENGTH);
        if let (Some(limit), Some(len)) = (limit, declared) {
            if len > limit as u64 {
                return too_large(limit);
            }
        }
        let inner = match limit {
            Some(limit) => body::stream(http_body_util::Limited::new(incoming, limit)),
            None => body::stream(incoming),
        };
        let tracked = Tracked {
            inner,
            failed: body_failed.clone(),
        };
        let out = Request::from_parts(parts, body::stream(tracked));
        let sent = std::time::Instant::now();
        let mut res = match self.pool.send(out, kind).await {
            Ok(res) => res,
            Err(_) if body_failed.get().is_some() => {
                let why = body_failed.get().map_or("", String::as_str);
                if let (Some(limit), true) = (limit, why.contains("length limit exceeded")) {
                    return too_large(limit);
                }
                return Status::bad_request(format!("the request body could not be read: {why}"))
                    .into_response();
            }
            Err(e) => {
                let reason = e.to_string();
                tracing::warn!(backend = %self.key.host, error = %reason, "backend unreachable");
                let mut res =
                    Status::service_unavailable(format!("error trying to reach service: {reason}"))
                        .into_response();
                res.extensions_mut().insert(Unreachable);
                return res;
            }
        };
        let answered = Answered {
            status: res.status(),
            elapsed: sent.elapsed(),
        };
        let answer = |mut res: Response<Body>| {
            res.extensions_mut().insert(answered);
            res
        };
        if res.status().is_redirection() && res.headers().contains_key(header::LOCATION) {
            return answer(
                Status::bad_gateway(
                    "the backend attempted to redirect this request, which is not permitted",
                )
                .into_response(),
            );
        }
        if res.status() == StatusCode::SWITCHING_PROTOCOLS {
            let Some(client_upgrade) = client_upgrade else {
                return answer(
                    Status::bad_gateway(
                        "the backend switched protocols without an upgrade request",
                    )
                    .into_response(),
                );
            };
            let backend_upgrade = hyper::upgrade::on(&mut res);
            tokio::spawn(splice(client_upgrade, backend_upgrade, closing.clone()));
            let (parts, _) = res.into_parts();
            return answer(Response::from_parts(parts, body::empty()));
        }
        remove_hop_by_hop(res.headers_mut(), false);
        answer(res.map(body::stream))
    }
}

/// Why a request the gateway makes on its own behalf (availability, discovery) failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    Unreachable(String),
    #[error("bad status from {url}: {status}")]
    Status { url: String, status: StatusCode },
    #[error("reading the answer of {url}: {message}")]
    Body { url: String, message: String },
    #[error("{url}: no answer within {secs} s")]
    Timeout { url: String, secs: u64 },
}

impl FetchError {
    /// True when the backend could not be reached at all (DNS, TCP, TLS), as opposed to
    /// answering badly.
    pub fn unreachable(&self) -> bool {
        matches!(self, Self::Unreachable(_) | Self::Timeout { .. })
    }
}

/// The identity the gateway uses for its own requests to backends, as kube-aggregator does.
pub fn gateway_identity() -> Identity {
    Identity::new("system:kube-aggregator", vec!["system:masters".into()])
}

impl Backend {
    /// `https://<host>:<port>`, for messages.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}:{}{path}", self.key.host, self.key.port)
    }

    /// GETs `path` as the gateway itself and reads at most `limit` bytes of a 2xx answer.
    /// Returns the body and the `ETag`, if any. With `if_none_match`, a 304 yields `None`.
    pub async fn fetch(
        &self,
        path: &str,
        accept: &str,
        if_none_match: Option<&str>,
        limit: usize,
        timeout: Duration,
    ) -> Result<Option<(bytes::Bytes, Option<String>)>, FetchError> {
        let url = self.url(path);
        let work = async {
            let mut req = Request::get(path)
                .header(header::ACCEPT, accept)
                .body(body::empty())
                .map_err(|e| FetchError::Unreachable(e.to_string()))?;
            if let Some(tag) = if_none_match.and_then(|t| HeaderValue::from_str(t).ok()) {
                req.headers_mut().insert(header::IF_NONE_MATCH, tag);
            }
            match &self.impersonate_with {
                // Its own requests go as the gateway's account, impersonating nobody.
                Some((_, token)) => {
                    req.headers_mut()
                        .insert(header::AUTHORIZATION, (**token.load()).clone());
                }
                None => {
                    let fwd = Forwarded {
                        identity: &gateway_identity(),
                        client_ip: [127, 0, 0, 1].into(),
                        original_host: None,
                        impersonate_with: None,
                    };
                    set_identity(req.headers_mut(), &fwd, &|_| false);
                    req.headers_mut().remove("x-forwarded-for");
                }
            }
            let res = self
                .pool
                .probe(req)
                .await
                .map_err(|e| FetchError::Unreachable(e.to_string()))?;
            let status = res.status();
            if status == StatusCode::NOT_MODIFIED && if_none_match.is_some() {
                return Ok(None);
            }
            if !status.is_success() {
                return Err(FetchError::Status {
                    url: url.clone(),
                    status,
                });
            }
            let etag = res
                .headers()
                .get(header::ETAG)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let limited = http_body_util::Limited::new(res.into_body(), limit);
            let bytes = http_body_util::BodyExt::collect(limited)
                .await
                .map_err(|e| FetchError::Body {
                    url: url.clone(),
                    message: e.to_string(),
                })?
                .to_bytes();
            Ok(Some((bytes, etag)))
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Timeout {
                url,
                secs: timeout.as_secs(),
            }),
        }
    }
}

/// 413, as kube-apiserver words it.
fn too_large(limit: usize) -> Response<Body> {
    Status::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLarge",
        format!("the request body is larger than the limit of {limit} bytes"),
    )
    .into_response()
}

/// A request body that records its first error.
struct Tracked {
    inner: Body,
    failed: Arc<std::sync::OnceLock<String>>,
}

impl http_body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = crate::body::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if let std::task::Poll::Ready(Some(Err(e))) = &polled {
            let _ = self.failed.set(e.to_string());
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Copies bytes both ways between an upgraded client and backend until either side closes,
/// or the gateway's shutdown grace period ends.
async fn splice(
    client: hyper::upgrade::OnUpgrade,
    backend: hyper::upgrade::OnUpgrade,
    closing: tokio_util::sync::CancellationToken,
) {
    let (client, backend) = match tokio::try_join!(client, backend) {
        Ok(pair) => pair,
        Err(e) => {
            tracing::debug!(error = %e, "upgrade did not complete");
            return;
        }
    };
    let (mut client, mut backend) = (TokioIo::new(client), TokioIo::new(backend));
    tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut client, &mut backend) => {
            if let Err(e) = copied {
                tracing::debug!(error = %e, "upgraded stream ended with an error");
            }
        }
        () = closing.cancelled() => {
            use tokio::io::AsyncWriteExt;
            let _ = tokio::join!(client.shutdown(), backend.shutdown());
        }
    }
}
