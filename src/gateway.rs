//! The request pipeline of the front door: health and version (public) -> authenticate ->
//! authorize -> route. Discovery comes from the registry snapshot; `/apis/<group>/<version>/...`
//! goes to the APIService's backend; anything else to the delegate, or 404. Every failure
//! leaves as a `kind: Status`.

use crate::authn::{
    Authenticator, CertAuthenticator, Identity, PeerIdentity, RequestHeaderConfig, TokenFile,
};
use crate::authz::Authorizer;
use crate::body::{full, Body};
use crate::config::Config;
use crate::discovery;
use crate::errors::{json_response, Status};
use crate::proxy::{Proxy, ProxySettings, Resolver};
use crate::registry::Registry;
use crate::server::ConnInfo;
use crate::tls::{self, PeerVerifier, ReloadingCert};
use anyhow::Context as _;
use http::{header, HeaderValue, Method, Request, Response};
use hyper::body::Incoming;
use serde_json::json;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Everything a request may need, shared by all connections.
pub struct Gateway {
    pub registry: Arc<Registry>,
    discovery: discovery::Cache,
    proxy: Proxy,
    authn: Authenticator,
    certs: CertAuthenticator,
    authz: Authorizer,
    ready: AtomicBool,
}

/// What `build` returns besides the gateway: the TLS config and the files to watch.
pub struct Built {
    pub gateway: Arc<Gateway>,
    pub tls: Arc<rustls::ServerConfig>,
    pub reloading: Vec<Arc<ReloadingCert>>,
}

type ResponseFuture = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

impl Gateway {
    /// Loads every certificate, key and token file the configuration names.
    pub fn build(cfg: &Config, registry: Arc<Registry>) -> anyhow::Result<Built> {
        let serving = ReloadingCert::load(&cfg.tls_cert, &cfg.tls_key)?;
        let mut reloading = vec![serving.clone()];
        let mut client_cas = Vec::new();
        let mut certs = CertAuthenticator::default();
        if let Some(path) = &cfg.client_ca {
            let cas = tls::load_certs(path)?;
            certs.users = Some(PeerVerifier::new(&cas, &path.display().to_string())?);
            client_cas.extend(cas);
        }
        let mut authn = Authenticator {
            anonymous: cfg.anonymous,
            ..Default::default()
        };
        let mut extra_identity_headers = Vec::new();
        if let Some(rh) = &cfg.request_header {
            let cas = tls::load_certs(&rh.client_ca)?;
            certs.front_proxy = Some(PeerVerifier::new(
                &cas,
                &rh.client_ca.display().to_string(),
            )?);
            certs.allowed_names = rh.allowed_names.clone();
            client_cas.extend(cas);
            authn.request_header = Some(RequestHeaderConfig {
                username_headers: rh.username_headers.clone(),
                group_headers: rh.group_headers.clone(),
                extra_prefixes: rh.extra_prefixes.clone(),
            });
            extra_identity_headers
                .extend(rh.username_headers.iter().chain(&rh.group_headers).cloned());
        }
        if let Some(path) = &cfg.token_file {
            authn.tokens = Some(TokenFile::load(path)?);
        }
        let proxy_cert = match &cfg.proxy_client {
            Some((cert, key)) => {
                let c = ReloadingCert::load(cert, key)?;
                reloading.push(c.clone());
                Some(c)
            }
            None => None,
        };
        let default_roots = match &cfg.service_ca {
            Some(path) => tls::load_certs(path)?,
            None => rustls_native_certs::load_native_certs().certs,
        };
        let delegate = match &cfg.delegate {
            Some(d) => {
                let cas = match &d.ca_file {
                    Some(path) => tls::load_certs(path)?,
                    None => default_roots.clone(),
                };
                Some((d.host.clone(), d.port, cas))
            }
            None => None,
        };
        let proxy = Proxy::new(ProxySettings {
            resolver: Resolver {
                fixed: cfg.resolve.clone(),
            },
            proxy_cert,
            default_roots,
            delegate,
            extra_identity_headers,
        })
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?;
        let tls = tls::server_config(serving, &client_cas).context("serving TLS")?;
        let gateway = Arc::new(Self {
            registry,
            discovery: discovery::Cache::default(),
            proxy,
            authn,
            certs,
            authz: Authorizer::new(cfg.authorization.clone()),
            ready: AtomicBool::new(false),
        });
        Ok(Built {
            gateway,
            tls: Arc::new(tls),
            reloading,
        })
    }

    /// Marks the gateway ready (after the first registry load).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// The request handler of one connection; its client certificate is examined once, here.
    pub fn connection(
        self: &Arc<Self>,
        conn: ConnInfo,
    ) -> impl Fn(Request<Incoming>) -> ResponseFuture + Clone + Send + Sync + 'static {
        let peer = Arc::new(self.certs.examine(&conn.peer_chain));
        let gateway = self.clone();
        let remote = conn.remote;
        move |req| {
            let (gateway, peer) = (gateway.clone(), peer.clone());
            Box::pin(async move { gateway.handle(req, &peer, remote).await })
        }
    }

    async fn handle(
        &self,
        req: Request<Incoming>,
        peer: &PeerIdentity,
        remote: SocketAddr,
    ) -> Response<Body> {
        let path = req.uri().path();
        if let Some(res) = self.public(req.method(), path) {
            return res;
        }
        let identity = match self.authn.authenticate(req.headers(), peer) {
            Ok(id) => id,
            Err(status) => return status.into_response(),
        };
        if let Err(status) = self.authz.authorize(&identity, req.method(), path) {
            return status.into_response();
        }
        self.route(req, &identity, remote).await
    }

    /// Health and version: answered without credentials, as kube-apiserver does.
    fn public(&self, method: &Method, path: &str) -> Option<Response<Body>> {
        if method != Method::GET && method != Method::HEAD {
            return None;
        }
        match path {
            "/healthz" | "/livez" | "/healthz/ping" | "/livez/ping" => Some(text("ok")),
            "/readyz" | "/readyz/ping" => Some(if self.ready.load(Ordering::Acquire) {
                text("ok")
            } else {
                Status::service_unavailable(
                    "readyz check failed: the APIService registry has not loaded yet",
                )
                .into_response()
            }),
            "/version" | "/version/" => Some(json_response(&version())),
            _ => None,
        }
    }

    async fn route(
        &self,
        req: Request<Incoming>,
        identity: &Identity,
        remote: SocketAddr,
    ) -> Response<Body> {
        let path = req.uri().path().to_string();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let snapshot = self.registry.snapshot();
        match segments.as_slice() {
            ["api"] | ["api", ""] if self.proxy.delegate().is_none() => {
                return discovery_get(&req, discovery::api_versions());
            }
            ["apis"] | ["apis", ""] => {
                return discovery_get(&req, self.discovery.get(&snapshot).group_list.clone());
            }
            ["apis", group] | ["apis", group, ""] => {
                if let Some(doc) = self.discovery.get(&snapshot).groups.get(*group) {
                    return discovery_get(&req, doc.clone());
                }
            }
            ["apis", group, version, ..] => {
                if let Some(svc) = snapshot.lookup(group, version) {
                    return match self.proxy.backend_for(svc) {
                        Ok(backend) => self.proxy.forward(&backend, req, identity, remote).await,
                        Err(status) => status.into_response(),
                    };
                }
            }
            _ => {}
        }
        match self.proxy.delegate() {
            Some(delegate) => self.proxy.forward(delegate, req, identity, remote).await,
            None => Status::not_found("the server could not find the requested resource")
                .into_response(),
        }
    }

    /// Drops backend pools the current registry no longer uses.
    pub fn prune_backends(&self) {
        let snapshot = self.registry.snapshot();
        let live: Vec<_> = snapshot.iter().map(|s| s.as_ref()).collect();
        self.proxy.retain(&live);
    }
}

fn discovery_get<B>(req: &Request<B>, doc: bytes::Bytes) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Status::method_not_allowed(format!(
            "{} is not supported on discovery documents",
            req.method()
        ))
        .into_response();
    }
    discovery::respond(doc)
}

fn text(body: &'static str) -> Response<Body> {
    let mut res = Response::new(full(body));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

/// `/version`, in kube-apiserver's shape.
fn version() -> serde_json::Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": concat!("v", env!("CARGO_PKG_VERSION"), "+apigw"),
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
        "goVersion": "",
        "compiler": "rustc",
    })
}

/// Runs a gateway for `cfg` on `listener` until `shutdown` resolves: loads and watches the
/// manifest directory and certificate files, serves, then drains.
pub async fn run(
    cfg: Config,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let registry = Registry::new();
    let built = Gateway::build(&cfg, registry.clone())?;
    let _watcher = match &cfg.apiservice_dir {
        Some(dir) => Some(
            crate::registry::watch_dir(dir.clone(), registry.clone())
                .with_context(|| format!("watching {}", dir.display()))?,
        ),
        None => None,
    };
    if cfg.apiservice_dir.is_none() {
        registry.replace(crate::registry::Snapshot::default());
    }
    let gateway = built.gateway;
    // Ready once a valid registry is in force: a bad manifest set at start-up keeps the
    // gateway out of rotation instead of serving an empty registry as if it were meant.
    let mut loaded = registry.subscribe();
    let latch = gateway.clone();
    tokio::spawn(async move {
        if loaded.wait_for(|generation| *generation > 0).await.is_ok() {
            latch.set_ready(true);
        }
    });
    tls::watch_cert_files(built.reloading, std::time::Duration::from_secs(2));
    let mut changes = registry.subscribe();
    let pruner = gateway.clone();
    tokio::spawn(async move {
        while changes.changed().await.is_ok() {
            pruner.prune_backends();
        }
    });
    tracing::info!(addr = %listener.local_addr()?, "apigw serving");
    let make = move |conn: ConnInfo| gateway.connection(conn);
    crate::server::serve(
        listener,
        built.tls,
        make,
        crate::server::Limits::default(),
        shutdown,
    )
    .await;
    Ok(())
}
