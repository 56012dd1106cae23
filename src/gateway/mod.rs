//! The request pipeline of the front door: the request's host ([`host`]) -> health and version
//! (public) -> admission limits -> authenticate -> authorize -> route ([`routes`]), with a
//! timeout on requests that are not long-running ([`RequestKind`]), and an access line and
//! metrics per request ([`access`]). Also owns start-up ([`Gateway::build`] loads every file
//! the configuration names) and the run loop with graceful shutdown ([`run`]).

mod access;
mod health;
mod host;
mod limits;
mod paths;
mod protobuf;
mod reviews;
mod routes;
mod version;

pub use health::Health;

use crate::apiservices::ApiServices;
use crate::authn::Identity;
use crate::authn::{
    Authenticator, CertAuthenticator, PeerIdentity, RequestHeaderConfig, TokenFile,
};
use crate::authz::{impersonation, Attributes, Authorizer};
use crate::availability::{self, Availability};
use crate::body::Body;
use crate::config::Config;
use crate::discovery;
use crate::errors::Status;
use crate::metrics::Metrics;
use crate::proxy::{ConfiguredHeaders, DelegateSettings, Inbound, Proxy, ProxySettings, Resolver};
use crate::registry::Registry;
use crate::request_kind::RequestKind;
use crate::server::ConnInfo;
use crate::tls::{self, ReloadingCert};
use anyhow::Context as _;
use http::{Request, Response};
use hyper::body::Incoming;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything a request may need, shared by all connections.
pub struct Gateway {
    pub registry: Arc<Registry>,
    pub availability: Arc<Availability>,
    pub metrics: Arc<Metrics>,
    pub health: Health,
    audit: Option<Arc<crate::audit::Auditor>>,
    limits: Arc<limits::Limits>,
    /// Cluster mode: bearer tokens the token file does not know are asked of TokenReview.
    token_reviewer: std::sync::OnceLock<crate::cluster::tokenreview::TokenReviewer>,
    /// Cluster mode with `Webhook`: SubjectAccessReview for what no other mode allows.
    access_reviewer: std::sync::OnceLock<crate::cluster::sar::SubjectAccessReviewer>,
    apiservices: Arc<ApiServices>,
    discovery: discovery::Cache,
    openapi: Arc<discovery::openapi::OpenApi>,
    proxy: Arc<Proxy>,
    authn: Authenticator,
    certs: CertAuthenticator,
    authz: Authorizer,
    request_timeout: Duration,
    /// Cancelled at the end of the shutdown grace period.
    closing: tokio_util::sync::CancellationToken,
    /// Certificates whose expiry `/metrics` reports.
    expiring: Vec<(&'static str, Arc<ReloadingCert>)>,
}

/// A request turned away: who it was (if known) and the Status to answer.
struct Refused {
    identity: Option<Box<Identity>>,
    status: Status,
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
        let mut expiring = vec![("serving", serving.clone())];
        let certs = CertAuthenticator::load(cfg.cert_sources())?;
        let mut authn = Authenticator {
            anonymous: cfg.anonymous,
            ..Default::default()
        };
        let mut configured_headers = ConfiguredHeaders::default();
        if let Some(rh) = &cfg.request_header {
            authn.request_header = Some(RequestHeaderConfig {
                username_headers: rh.username_headers.clone(),
                group_headers: rh.group_headers.clone(),
                extra_prefixes: rh.extra_prefixes.clone(),
            });
            configured_headers = ConfiguredHeaders::new(
                rh.username_headers.iter().chain(&rh.group_headers),
                &rh.extra_prefixes,
            );
        }
        if let Some(path) = &cfg.token_file {
            authn.tokens = Some(arc_swap::ArcSwap::from_pointee(TokenFile::load(path)?));
        }
        let proxy_cert = match &cfg.proxy_client {
            Some((cert, key)) => {
                let c = ReloadingCert::load(cert, key)?;
                reloading.push(c.clone());
                expiring.push(("proxy-client", c.clone()));
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
                Some(DelegateSettings {
                    host: d.host.clone(),
                    port: d.port,
                    cas,
                    impersonation_token_file: d.impersonation_token_file.clone(),
                })
            }
            None => None,
        };
        let metrics = Arc::new(Metrics::default());
        let closing = tokio_util::sync::CancellationToken::new();
        let proxy = Proxy::new(ProxySettings {
            resolver: Resolver::new(cfg.resolve.clone()),
            proxy_cert,
            default_roots,
            delegate,
            configured_headers,
            metrics: metrics.clone(),
            closing: closing.clone(),
            drop_groups: cfg.backend_drop_groups.clone(),
            max_body: cfg.max_request_body_bytes,
        })
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?;
        let tls = tls::server_config(serving, certs.handshake_verifier()).context("serving TLS")?;
        let gateway = Arc::new(Self {
            registry,
            availability: Arc::default(),
            metrics,
            health: Health::default(),
            token_reviewer: std::sync::OnceLock::new(),
            access_reviewer: std::sync::OnceLock::new(),
            limits: limits::Limits::new(cfg.limits.0, cfg.limits.1),
            audit: match &cfg.audit {
                Some(settings) => Some(Arc::new(
                    crate::audit::Auditor::start(settings.clone())
                        .map_err(|e| anyhow::anyhow!("audit log: {e}"))?,
                )),
                None => None,
            },
            apiservices: Arc::default(),
            discovery: discovery::Cache::new(
                reviews::builtin_groups()
                    .into_iter()
                    .map(|(svc, list)| discovery::Builtin::new(svc, list))
                    .collect(),
            ),
            openapi: Arc::default(),
            proxy: Arc::new(proxy),
            authn,
            certs,
            authz: Authorizer::new(
                cfg.authorization.clone(),
                cfg.authorization_policy_file.clone(),
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?,
            request_timeout: cfg.request_timeout,
            closing,
            expiring,
        });
        Ok(Built {
            gateway,
            tls: Arc::new(tls),
            reloading,
        })
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
            Box::pin(async move {
                // Before anything reads the request: a request without one valid host never
                // reaches a handler, as with Go's net/http.
                let host = match host::of(&req) {
                    Ok(host) => host,
                    Err(status) => {
                        let mut res = status.into_response();
                        if req.version() < http::Version::HTTP_2 {
                            res.headers_mut().insert(
                                http::header::CONNECTION,
                                http::HeaderValue::from_static("close"),
                            );
                        }
                        return res;
                    }
                };
                gateway.handle(req, &peer, remote, host).await
            })
        }
    }

    async fn handle(
        &self,
        req: Request<Incoming>,
        peer: &PeerIdentity,
        remote: SocketAddr,
        host: Option<http::HeaderValue>,
    ) -> Response<Body> {
        let start = Instant::now();
        if let Some(res) = self.public(&req) {
            return res;
        }
        // Only the audit log needs these copies.
        let audit = self.audit.as_ref().map(|auditor| access::Audit {
            auditor: auditor.clone(),
            received: std::time::SystemTime::now(),
            uri: req
                .uri()
                .path_and_query()
                .map_or_else(|| "/".to_string(), |pq| pq.as_str().to_string()),
            user_agent: req
                .headers()
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        });
        let attrs = Attributes::from_request(req.method(), req.uri().path(), req.uri().query());
        let kind = RequestKind::of(&req, &attrs);
        let permit = match self.limits.admit(remote.ip(), kind.long_running()) {
            Ok(permit) => permit,
            Err(status) => return retry_later(status),
        };
        // One registry lookup serves the metrics' labels and the access line.
        let snapshot = self.registry.snapshot();
        let registered = (!attrs.group.is_empty())
            .then(|| snapshot.lookup(&attrs.group, &attrs.version))
            .flatten();
        // Only the access line names the APIService.
        let apiservice = registered
            .filter(|_| tracing::enabled!(target: "apigw::access", tracing::Level::INFO))
            .map(|service| service.name.clone());
        let metrics_verb = crate::metrics::verb(req.method(), req.headers(), &attrs);
        let served = attrs.resource_request
            && (registered.is_some() || self.serves_unregistered(&attrs.group, &attrs.version));
        drop(snapshot);
        // From here on the request is logged and audited however it ends, also when the
        // client goes away before the response head (this future is then dropped).
        let mut record = access::Record {
            metrics: self.metrics.clone(),
            audit,
            remote,
            identity: None,
            real: None,
            attrs,
            metrics_verb,
            served,
            apiservice,
            status: None,
            outcome: None,
            bytes: 0,
            kind,
            start,
            // As kube-apiserver's timeout filter: end to end, from the request's start (none
            // past the end of time).
            deadline: (!kind.long_running())
                .then(|| start.checked_add(self.request_timeout))
                .flatten(),
            closing: kind.long_running().then(|| self.closing.clone()),
            _permit: Some(permit),
        };
        let res = match self.admit(&req, peer, &record.attrs).await {
            Err(refused) => {
                record.identity = refused.identity.map(|b| *b);
                refused.status.into_response()
            }
            Ok((identity, real)) => {
                let inbound = Inbound {
                    client: remote,
                    host,
                    kind,
                };
                record.real = real;
                let identity = &*record.identity.insert(identity);
                let routed = self.route(req, identity, &inbound);
                match record.deadline {
                    None => routed.await,
                    Some(at) => tokio::time::timeout_at(at.into(), routed)
                        .await
                        .unwrap_or_else(|_| {
                            record.outcome = Some(crate::audit::Outcome::Timeout);
                            Status::gateway_timeout(
                                "Timeout: request did not complete within the allotted timeout",
                            )
                            .into_response()
                        }),
                }
            }
        };
        let status = res.status();
        res.map(|body| record.wrap(status, body))
    }

    /// Authenticates, applies impersonation, and authorizes. Returns the identity to act as
    /// and, when impersonating, the real one.
    async fn admit<B>(
        &self,
        req: &Request<B>,
        peer: &PeerIdentity,
        attrs: &Attributes,
    ) -> Result<(Identity, Option<Identity>), Refused> {
        fn refuse(identity: Option<&Identity>) -> impl FnOnce(Status) -> Refused + '_ {
            move |status| Refused {
                identity: identity.cloned().map(Box::new),
                status,
            }
        }
        paths::check(req.uri().path()).map_err(refuse(None))?;
        let real = match self.authn.authenticate(req.headers(), peer) {
            Ok(id) => id,
            // Boxed (as is the SubjectAccessReview below): these network round trips are
            // taken rarely, and would otherwise enlarge every request's future.
            Err(status) => Box::pin(self.review_token(req.headers()))
                .await
                .ok_or(status)
                .map_err(refuse(None))?,
        };
        // Without Impersonate-* headers (nearly always) the real identity is used as it is,
        // neither cloned nor compared.
        let (identity, real) = if impersonation::requested(req.headers()) {
            let identity = impersonation::apply(&self.authz, real.clone(), req.headers())
                .map_err(refuse(Some(&real)))?;
            let real = (identity != real).then_some(real);
            (identity, real)
        } else {
            (real, None)
        };
        if !self.authz.allows(&identity, attrs) {
            let mut message = crate::authz::forbidden_message(&identity, attrs);
            let mut allowed = false;
            if let (true, Some(sar)) = (self.authz.webhook(), self.access_reviewer.get()) {
                match Box::pin(sar.review(&identity, attrs)).await {
                    Ok(decision) => {
                        allowed = decision.allowed;
                        if !decision.reason.is_empty() {
                            message = format!("{message}: {}", decision.reason);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "SubjectAccessReview failed; no opinion"),
                }
            }
            if !allowed {
                return Err(refuse(Some(&identity))(Status::forbidden(message)));
            }
        }
        Ok((identity, real))
    }

    /// For a group version no APIService in the registry claims, true when requests for it
    /// still go somewhere that knows its resources: a group version the gateway serves itself,
    /// or one the delegate lists in its discovery (`/api/v1` once the delegate answered
    /// `/api`). The request metrics take labels from the path only for these and registered
    /// ones.
    fn serves_unregistered(&self, group: &str, version: &str) -> bool {
        if version == "v1"
            && matches!(
                group,
                crate::apiservices::GROUP | reviews::AUTHN | reviews::AUTHZ
            )
        {
            return true;
        }
        if self.proxy.delegate().is_none() {
            return false;
        }
        let known = self.discovery.delegate.current();
        if group.is_empty() {
            version == "v1" && known.api.is_some()
        } else {
            known
                .versions
                .iter()
                .any(|b| b.svc.group == group && b.svc.version == version)
        }
    }

    /// Cluster mode: the identity TokenReview gives a bearer token, if any.
    async fn review_token(&self, headers: &http::HeaderMap) -> Option<Identity> {
        let reviewer = self.token_reviewer.get()?;
        let token = crate::authn::bearer(headers)?;
        match reviewer.review(token).await {
            Ok(Some(mut id)) => {
                if !id.groups.iter().any(|g| g == crate::authn::AUTHENTICATED) {
                    id.groups.push(crate::authn::AUTHENTICATED.to_string());
                }
                Some(id)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "TokenReview failed");
                None
            }
        }
    }

    /// Health and version: answered without credentials, as kube-apiserver does.
    fn public<B>(&self, req: &Request<B>) -> Option<Response<Body>> {
        if req.method() != http::Method::GET && req.method() != http::Method::HEAD {
            return None;
        }
        let path = req.uri().path();
        if matches!(path, "/version" | "/version/") {
            let delegate = self
                .proxy
                .delegate()
                .and_then(|_| self.discovery.delegate.version());
            return Some(version::response(delegate));
        }
        self.health.respond(path, req.uri().query())
    }

    /// `/metrics`, with certificate expiry read at scrape time.
    fn metrics_response(&self) -> Response<Body> {
        for (label, cert) in &self.expiring {
            if let Some(not_after) = cert.current().cert.first().and_then(|c| {
                x509_parser::parse_x509_certificate(c.as_ref())
                    .ok()
                    .map(|(_, x)| x.validity().not_after.timestamp())
            }) {
                self.metrics
                    .cert_expiry
                    .with_label_values(&[label])
                    .set(not_after as f64);
            }
        }
        let mut res = Response::new(crate::body::full(self.metrics.render()));
        res.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
        );
        res
    }
}

/// A 429 with the `Retry-After` kube-apiserver sends.
fn retry_later(status: Status) -> Response<Body> {
    let mut res = status.into_response();
    res.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    res
}

/// Runs a gateway for `cfg` on `listener` until `shutdown` resolves: loads and watches the
/// manifest directory and certificate files, runs the availability controller, serves, then
/// shuts down gracefully (readiness fails, accepting stops after the shutdown delay, in-flight
/// requests get the grace period).
pub async fn run(
    cfg: Config,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let registry = Registry::new();
    let built = Gateway::build(&cfg, registry.clone())?;
    let gateway = built.gateway;
    let cluster = match &cfg.cluster {
        Some(c) => Some(start_cluster(&gateway, c).await?),
        None => None,
    };
    let _watcher = match &cfg.apiservice_dir {
        Some(dir) => Some(
            crate::registry::watch_dir(dir.clone(), registry.clone())
                .with_context(|| format!("watching {}", dir.display()))?,
        ),
        None if cluster.is_some() => None,
        None => {
            registry.replace(crate::registry::Snapshot::default());
            None
        }
    };
    watch_files(&gateway, built.reloading, &cfg);
    availability::spawn(
        registry.clone(),
        gateway.proxy.clone(),
        gateway.availability.clone(),
        gateway.metrics.clone(),
        availability::Settings {
            interval: cfg.availability_interval,
            timeout: cfg.availability_timeout,
        },
    );
    gateway
        .apiservices
        .spawn(registry.clone(), gateway.availability.clone());
    if let Some(delegate) = gateway.proxy.delegate() {
        gateway.discovery.delegate.clone().spawn(
            delegate.clone(),
            cfg.availability_interval,
            cfg.availability_timeout,
        );
    }
    gateway.openapi.spawn(
        registry.clone(),
        gateway.proxy.clone(),
        gateway.availability.clone(),
    );
    spawn_latches(&gateway);
    if let Some(addr) = cfg.metrics_listen {
        routes::serve_metrics(gateway.clone(), addr).await?;
    }
    tracing::info!(addr = %listener.local_addr()?, "apigw serving");
    let draining = gateway.clone();
    let delay = cfg.shutdown_delay;
    let stop = async move {
        shutdown.await;
        draining.health.shutting_down.store(true, Ordering::Release);
        if !delay.is_zero() {
            tracing::info!(
                ?delay,
                "readiness failing; still accepting during the shutdown delay"
            );
            tokio::time::sleep(delay).await;
        }
    };
    let limits = crate::server::Limits {
        grace: cfg.shutdown_grace,
        header_read_timeout: cfg.header_read_timeout,
        idle_timeout: cfg.idle_timeout,
        max_connections_per_client: cfg.limits.2,
        closing: gateway.closing.clone(),
        workers: cfg.worker_threads,
        ..Default::default()
    };
    let g = gateway.clone();
    crate::server::serve(
        listener,
        built.tls,
        move |conn: ConnInfo| g.connection(conn),
        limits,
        stop,
    )
    .await;
    if let Some(parts) = cluster {
        // Hand the Lease over at once rather than let it expire.
        parts.elector.release().await;
    }
    Ok(())
}

/// What cluster mode keeps running.
struct ClusterParts {
    elector: crate::cluster::lease::LeaderElector,
}

/// Cluster mode: APIServices from the cluster, services resolved through it, TokenReview,
/// SubjectAccessReview (with `Webhook`), and availability written back by the Lease holder.
async fn start_cluster(
    gateway: &Arc<Gateway>,
    c: &crate::config::Cluster,
) -> anyhow::Result<ClusterParts> {
    use crate::cluster::{self, lease, sar, services, status, tokenreview};
    let client = cluster::client::client(c.kubeconfig.as_deref()).await?;
    let source =
        cluster::apiservices::ApiServiceSource::spawn(client.clone(), gateway.registry.clone());
    let mode = if c.aggregator_routing {
        services::RoutingMode::Endpoints
    } else {
        services::RoutingMode::ClusterIp
    };
    let resolver = services::ServiceResolver::spawn(client.clone(), mode);
    gateway.proxy.resolver().set_cluster(resolver);
    let _ = gateway.token_reviewer.set(tokenreview::TokenReviewer::new(
        client.clone(),
        tokenreview::TokenReviewSettings::default(),
    ));
    if gateway.authz.webhook() {
        let _ = gateway.access_reviewer.set(sar::SubjectAccessReviewer::new(
            client.clone(),
            sar::SarSettings::default(),
        ));
    }
    let namespace = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "kube-system".into());
    let elector = lease::LeaderElector::spawn(
        client.clone(),
        lease::LeaseSettings::with_timing(&namespace, "apigw", &c.leader_election),
    );
    status::StatusWriter::new(client, source).spawn(
        gateway.availability.clone(),
        elector.subscribe(),
        Duration::from_secs(60),
    );
    Ok(ClusterParts { elector })
}

/// Every file that applies when it changes: serving and proxy client certificates, the
/// client and front-proxy CA bundles, the token file.
fn watch_files(gateway: &Arc<Gateway>, certs: Vec<Arc<ReloadingCert>>, cfg: &Config) {
    const PERIOD: Duration = Duration::from_secs(2);
    for cert in certs {
        let paths = cert.paths();
        crate::reload::watch_files("certificate", paths, PERIOD, move || {
            cert.reload().map_err(|e| e.to_string())
        });
    }
    let g = gateway.clone();
    let cas = g.certs.files();
    if !cas.is_empty() {
        crate::reload::watch_files("client CA", cas, PERIOD, move || {
            g.certs.reload().map_err(|e| e.to_string())
        });
    }
    if let Some(path) = gateway
        .proxy
        .delegate_token_file()
        .map(std::path::Path::to_path_buf)
    {
        let g = gateway.clone();
        crate::reload::watch_files("delegate token", vec![path], PERIOD, move || {
            g.proxy.reload_delegate_token()
        });
    }
    if let Some(path) = gateway.authz.policy_file().cloned() {
        let g = gateway.clone();
        crate::reload::watch_files("RBAC policy", vec![path], PERIOD, move || g.authz.reload());
    }
    if let Some(path) = cfg.token_file.clone() {
        let g = gateway.clone();
        crate::reload::watch_files("token file", vec![path.clone()], PERIOD, move || {
            let tokens = TokenFile::load(&path).map_err(|e| e.to_string())?;
            if let Some(slot) = &g.authn.tokens {
                slot.store(Arc::new(tokens));
            }
            Ok(())
        });
    }
}

/// Releases the readiness latches and keeps backend pools in step with the registry.
fn spawn_latches(gateway: &Arc<Gateway>) {
    let g = gateway.clone();
    tokio::spawn(async move {
        let mut loaded = g.registry.subscribe();
        if loaded.wait_for(|generation| *generation > 0).await.is_ok() {
            g.health.registry_loaded.store(true, Ordering::Release);
        }
        let mut rounds = g.availability.subscribe();
        if rounds.wait_for(|round| *round > 0).await.is_ok() {
            g.health.availability_synced.store(true, Ordering::Release);
        }
    });
    let g = gateway.clone();
    tokio::spawn(async move {
        let mut changes = g.registry.subscribe();
        while changes.changed().await.is_ok() {
            let snapshot = g.registry.snapshot();
            let live: Vec<_> = snapshot.iter().map(|s| s.as_ref()).collect();
            g.proxy.retain(&live);
        }
    });
}
