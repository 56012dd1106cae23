//! Forwarding to addon API servers. Owns one backend per distinct service (name, port and
//! trust) with its connection pool (`pool`), the request rewrite (identity headers, hop-by-hop
//! headers, URI), streaming both ways, redirect refusal, and HTTP/1.1 upgrades spliced after a
//! `101`.

mod connector;
pub mod fetch;
mod flags;
mod forward;
mod headers;
mod metrics;
mod settings;
pub use settings::{
    parse_https_url, parse_resolve, BackendCas, BackendLoadError, BackendSettings, Delegate,
    UrlError,
};
mod pool;

pub use connector::{parse_host, ConnectError, ResolveService, Resolver};
pub use flags::ProxyFlags;
pub use forward::ForwardError;
pub use headers::{escape_extra_key, remove_hop_by_hop, sent_names, set_identity, Forwarded};
pub use metrics::BackendMetrics;
pub use pool::{PoolError, STREAMS_PER_CONN};

use apigw_core::body;
use apigw_core::errors::Status;
use apigw_core::reload::{Reload, Watched};
use apigw_core::tls::{backend_client_config, ProxyClientCert, Trust};
use apigw_registry::ApiService;
use apigw_request::Identity;
use arc_swap::ArcSwap;
use http::{header, HeaderValue, Request, StatusCode};
use rustls::pki_types::CertificateDer;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

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

/// Why the proxy, or a backend's connection pool, could not be set up: at start-up an error
/// that names the file or backend; on the request path the 503 it becomes.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("delegate impersonation token file {}: {why}", path.display())]
    DelegateToken {
        path: std::path::PathBuf,
        #[source]
        why: TokenProblem,
    },
    #[error(transparent)]
    Tls(#[from] apigw_core::tls::TlsError),
    #[error(transparent)]
    Pool(#[from] pool::PoolError),
}

/// What is wrong with a token file.
#[derive(Debug, thiserror::Error)]
pub enum TokenProblem {
    #[error(transparent)]
    Read(std::io::Error),
    #[error("empty")]
    Empty,
    #[error("not a valid token")]
    Invalid,
}

impl SetupError {
    /// The answer to a request that needed what could not be set up.
    fn unavailable(self) -> Status {
        Status::service_unavailable(format!("service unavailable: {self}")).with_source(self)
    }
}

/// `Bearer <token>` from a token file (surrounding whitespace trimmed).
fn bearer(path: &std::path::Path) -> Result<HeaderValue, SetupError> {
    let unusable = |why: TokenProblem| SetupError::DelegateToken {
        path: path.to_path_buf(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| unusable(TokenProblem::Read(e)))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(unusable(TokenProblem::Empty));
    }
    let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| unusable(TokenProblem::Invalid))?;
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
    /// The identity headers stripped from every request (shared with authentication).
    identity_headers: Arc<apigw_request::IdentityHeaders>,
    metrics: BackendMetrics,
    closing: tokio_util::sync::CancellationToken,
    drop_groups: Vec<String>,
    http2_requests: bool,
    max_body: Option<usize>,
}

/// How the proxy is set up.
pub struct ProxySettings {
    pub resolver: Resolver,
    pub proxy_cert: Option<ProxyClientCert>,
    pub default_roots: Vec<CertificateDer<'static>>,
    pub delegate: Option<DelegateSettings>,
    /// The identity-header policy authentication reads with; what it names is stripped
    /// from every request.
    pub identity_headers: Arc<apigw_request::IdentityHeaders>,
    pub metrics: BackendMetrics,
    /// Cancelled when upgraded streams must end (the shutdown grace period is over).
    pub closing: tokio_util::sync::CancellationToken,
    /// Groups never forwarded to backends.
    pub drop_groups: Vec<String>,
    /// Every request but upgrades over HTTP/2 when the backend offers it.
    pub http2_requests: bool,
    /// Largest request body of a non-streaming request (not GET, watch or upgrade); None: any.
    pub max_body: Option<usize>,
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

impl Reload for Proxy {
    fn watched(&self) -> Vec<Watched> {
        self.delegate_token_file()
            .map(|p| Watched {
                what: "delegate token",
                files: vec![p.to_path_buf()],
            })
            .into_iter()
            .collect()
    }

    fn reload(&self, _: &str) -> Result<(), body::BoxError> {
        Ok(self.reload_delegate_token()?)
    }
}

impl Proxy {
    pub fn new(settings: ProxySettings) -> Result<Self, SetupError> {
        let resolver = Arc::new(settings.resolver);
        let delegate = match settings.delegate {
            Some(d) => {
                let token = match &d.impersonation_token_file {
                    Some(path) => Some((path.clone(), ArcSwap::from_pointee(bearer(path)?))),
                    None => None,
                };
                let mut backend = Backend::new(
                    settings.http2_requests,
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
            identity_headers: settings.identity_headers,
            metrics: settings.metrics,
            closing: settings.closing,
            drop_groups: settings.drop_groups,
            http2_requests: settings.http2_requests,
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
    pub fn reload_delegate_token(&self) -> Result<(), SetupError> {
        if let Some((path, token)) = self
            .delegate
            .as_ref()
            .and_then(|d| d.impersonate_with.as_ref())
        {
            token.store(Arc::new(bearer(path)?));
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
            cas = apigw_core::tls::parse_certs(
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
        let backend = Arc::new(
            Backend::new(
                self.http2_requests,
                key,
                trust,
                self.proxy_cert.clone(),
                self.resolver.clone(),
            )
            .map_err(SetupError::unavailable)?,
        );
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
}

impl Backend {
    fn new(
        http2_requests: bool,
        key: BackendKey,
        trust: Trust<'_>,
        proxy_cert: Option<ProxyClientCert>,
        resolver: Arc<Resolver>,
    ) -> Result<Self, SetupError> {
        let what = format!("backend {}:{}", key.host, key.port);
        let tls = |alpn: &[&[u8]]| {
            let trust = match &trust {
                Trust::Roots(cas) => Trust::Roots(cas),
                Trust::Insecure => Trust::Insecure,
            };
            backend_client_config(trust, proxy_cert.clone(), alpn, &what)
        };
        let pool = pool::Pool::new(
            key.host.clone(),
            key.port,
            tls(&[b"http/1.1"])?,
            tls(&[b"h2", b"http/1.1"])?,
            resolver.clone(),
            CONNECT_TIMEOUT,
            http2_requests,
        )?;
        Ok(Self {
            key,
            pool,
            impersonate_with: None,
        })
    }
}

/// Why a request the gateway makes on its own behalf (availability, discovery) failed.
/// Displayed as `<url>: <detail>` when a URL was reached.
#[derive(Debug)]
pub enum FetchError {
    Unreachable(String),
    Status { url: String, status: StatusCode },
    Body { url: String, message: String },
    Timeout { url: String, secs: u64 },
}

impl FetchError {
    /// True when the backend could not be reached at all (DNS, TCP, TLS), as opposed to
    /// answering badly.
    pub fn unreachable(&self) -> bool {
        matches!(self, Self::Unreachable(_) | Self::Timeout { .. })
    }

    /// What went wrong, without the URL: for a message that names it already.
    pub fn detail(&self) -> String {
        match self {
            Self::Unreachable(why) => why.clone(),
            Self::Status { status, .. } => format!("bad status {status}"),
            Self::Body { message, .. } => format!("reading the answer: {message}"),
            Self::Timeout { secs, .. } => format!("no answer within {secs} s"),
        }
    }
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(why) => f.write_str(why),
            Self::Status { url, .. } | Self::Body { url, .. } | Self::Timeout { url, .. } => {
                write!(f, "{url}: {}", self.detail())
            }
        }
    }
}

impl std::error::Error for FetchError {}

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
                    set_identity(
                        req.headers_mut(),
                        &fwd,
                        &apigw_request::IdentityHeaders::default(),
                    );
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
