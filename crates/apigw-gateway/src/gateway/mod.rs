//! The front door: [`Gateway`] holds what every request may need, [`GatewayService`] runs the
//! request pipeline (its phases are described in `pipeline`), [`route`] decides what a request
//! targets, [`dispatch`] answers it, and [`access`] logs it. Also owns start-up ([`Gateway::build`] loads
//! every file the configuration names) and the run loop with graceful shutdown ([`run`]).

mod access;
mod dispatch;
mod health;
pub(crate) mod host;
pub(crate) mod paths;
mod pipeline;
pub(crate) mod protobuf;
mod reviews;
mod route;
#[cfg(test)]
mod tests;
mod version;

pub use health::Health;
pub use pipeline::{GatewayService, ResponseFuture};

use crate::config::Config;
use crate::metrics::Metrics;
use anyhow::Context as _;
use apigw_authn::{Attempts, Authenticator, CertAuthenticator};
use apigw_authz::Authorizer;
use apigw_availability::Availability;
use apigw_core::body::{Body, BoxError};
use apigw_core::reload::{Reload, Watched};
use apigw_core::server::ConnInfo;
use apigw_core::tls::{self, ReloadingCert};
use apigw_discovery::apiservices::ApiServices;
use apigw_proxy::{DelegateSettings, Proxy, ProxySettings, Resolver};
use apigw_registry::Registry;
use http::{Request, Response};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Everything a request may need, shared by all connections.
pub struct Gateway {
    pub registry: Arc<Registry>,
    pub availability: Arc<Availability>,
    pub metrics: Arc<Metrics>,
    pub health: Health,
    audit: Option<Arc<crate::audit::Auditor>>,
    limits: Arc<crate::limits::Limits>,
    /// API Priority and Fairness; None when turned off.
    flow: Option<Arc<apigw_flowcontrol::Flow>>,
    apiservices: Arc<ApiServices>,
    discovery: apigw_discovery::Cache,
    openapi: Arc<apigw_discovery::openapi::OpenApi>,
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

/// What `build` returns besides the gateway: the TLS config and the files to watch.
pub struct Built {
    pub gateway: Arc<Gateway>,
    pub tls: Arc<rustls::ServerConfig>,
    pub reloading: Vec<Arc<ReloadingCert>>,
}

/// The first problem a settings loader found: `serve` stops at it, as `check` lists them all.
fn first_problem<E: std::error::Error + Send + Sync + 'static>(problems: Vec<E>) -> anyhow::Error {
    problems.into_iter().next().map_or_else(
        || anyhow::anyhow!("loading the configured files failed"),
        anyhow::Error::new,
    )
}

impl Gateway {
    /// Loads every certificate, key and token file the configuration names.
    pub fn build(cfg: &Config, registry: Arc<Registry>) -> anyhow::Result<Built> {
        let serving = ReloadingCert::load(&cfg.tls_cert, &cfg.tls_key)?;
        let mut reloading = vec![serving.clone()];
        let mut expiring = vec![("serving", serving.clone())];
        let apigw_authn::AuthnFiles {
            certs,
            tokens,
            jwt,
            anonymous,
        } = cfg.authn.load().map_err(first_problem)?;
        let metrics = Arc::new(Metrics::default());
        // One identity-header policy: authentication reads with it, the proxy strips with it.
        let identity_headers = Arc::new(cfg.authn.identity_headers());
        let authn = Authenticator::new(identity_headers.clone(), tokens, anonymous)
            .with_jwt(jwt)
            .reloading_from(
                cfg.authn.token_file.clone(),
                cfg.authn.authentication_config.clone(),
            )
            .with_attempts(Attempts::new(metrics.authn_attempts.clone()));
        let proxy_cert = match &cfg.proxy.proxy_client {
            Some((cert, key)) => {
                let c = ReloadingCert::load(cert, key)?;
                reloading.push(c.clone());
                expiring.push(("proxy-client", c.clone()));
                Some(c)
            }
            None => None,
        };
        let cas = cfg.proxy.load_cas().map_err(first_problem)?;
        let default_roots = cas
            .service
            .unwrap_or_else(|| rustls_native_certs::load_native_certs().certs);
        let delegate = match &cfg.proxy.delegate {
            Some(d) => Some(DelegateSettings {
                host: d.host.clone(),
                port: d.port,
                cas: cas
                    .delegate
                    .clone()
                    .unwrap_or_else(|| default_roots.clone()),
                impersonation_token_file: d.impersonation_token_file.clone(),
            }),
            None => None,
        };
        let closing = tokio_util::sync::CancellationToken::new();
        let proxy = Proxy::new(ProxySettings {
            resolver: Resolver::new(cfg.proxy.resolve.clone()),
            proxy_cert,
            default_roots,
            delegate,
            identity_headers,
            metrics: metrics.backends.clone(),
            closing: closing.clone(),
            drop_groups: cfg.proxy.drop_groups.clone(),
            http2_requests: cfg.proxy.http2_requests,
            max_body: cfg.limits.max_request_body_bytes,
        })?;
        let tls = tls::server_config(serving, certs.handshake_verifier()).context("serving TLS")?;
        let flow = match cfg.flowcontrol.enabled {
            false => None,
            true => Some(Arc::new(
                apigw_flowcontrol::Flow::new(
                    &cfg.flowcontrol,
                    cfg.limits.request_timeout,
                    metrics.flowcontrol.clone(),
                )
                .map_err(|problems| anyhow::anyhow!("{}", problems.join("; ")))?,
            )),
        };
        let gateway = Arc::new(Self {
            registry,
            availability: Arc::default(),
            metrics,
            health: Health::default(),
            // With APF, its seats take the place of the plain in-flight limit, as upstream's.
            limits: crate::limits::Limits::new(
                if cfg.flowcontrol.enabled {
                    0
                } else {
                    cfg.limits.max_inflight
                },
                cfg.limits.max_inflight_per_client,
            ),
            flow,
            audit: match &cfg.audit {
                Some(settings) => Some(Arc::new(
                    crate::audit::Auditor::start(settings.clone())
                        .map_err(|e| anyhow::anyhow!("audit log: {e}"))?,
                )),
                None => None,
            },
            apiservices: Arc::default(),
            discovery: apigw_discovery::Cache::new(
                reviews::builtin_groups()
                    .into_iter()
                    .map(|(svc, list)| apigw_discovery::Builtin::new(svc, list))
                    .collect(),
            ),
            openapi: Arc::default(),
            proxy: Arc::new(proxy),
            authn,
            certs,
            authz: cfg.authz.authorizer().map_err(|e| anyhow::anyhow!("{e}"))?,
            request_timeout: cfg.limits.request_timeout,
            closing,
            expiring,
        });
        Ok(Built {
            gateway,
            tls: Arc::new(tls),
            reloading,
        })
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
        let mut res = Response::new(apigw_core::body::full(self.metrics.render()));
        res.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
        );
        res
    }
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
    let manifests = match &cfg.apiservice_dir {
        Some(dir) => Some(Arc::new(apigw_registry::ManifestDir::load(
            dir.clone(),
            registry.clone(),
        ))),
        None if cluster.is_some() => None,
        None => {
            registry.replace(apigw_registry::Snapshot::default());
            None
        }
    };
    watch_files(&gateway, built.reloading, manifests);
    if let Some(issuers) = &gateway.authn.jwt {
        issuers.spawn_refresh();
    }
    apigw_availability::spawn(
        registry.clone(),
        gateway.proxy.clone(),
        gateway.availability.clone(),
        gateway.metrics.availability.clone(),
        apigw_availability::Settings {
            interval: cfg.availability.interval,
            timeout: cfg.availability.timeout,
        },
    );
    gateway
        .apiservices
        .spawn(registry.clone(), gateway.availability.clone());
    if let Some(delegate) = gateway.proxy.delegate() {
        gateway.discovery.delegate.clone().spawn(
            delegate.clone(),
            cfg.availability.interval,
            cfg.availability.timeout,
        );
    }
    gateway.openapi.spawn(
        registry.clone(),
        gateway.proxy.clone(),
        gateway.availability.clone(),
    );
    spawn_latches(&gateway);
    spawn_pool_pruning(&gateway);
    if let Some(flow) = &gateway.flow {
        flow.spawn_borrowing();
    }
    // The metrics listener: the same serve loop (deadlines, accept backoff, drain) in plain
    // HTTP; it answers through the main listener's drain and stops after it.
    let metrics_stop = tokio_util::sync::CancellationToken::new();
    let metrics = match cfg.metrics_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("metrics listener {addr}"))?;
            tracing::info!(%addr, "serving /metrics over plain HTTP");
            let limits = apigw_core::server::Limits::side(&cfg.server);
            let g = gateway.clone();
            let make = move |_: ConnInfo| {
                let g = g.clone();
                move |req| std::future::ready(dispatch::metrics_listener(&g, &req))
            };
            let stop = metrics_stop.clone().cancelled_owned();
            Some(tokio::spawn(apigw_core::server::serve(
                listener, None, make, limits, stop,
            )))
        }
        None => None,
    };
    tracing::info!(addr = %listener.local_addr()?, "apigw serving");
    let draining = gateway.clone();
    let delay = cfg.server.shutdown_delay;
    let grace = cfg.server.shutdown_grace;
    let stop = async move {
        shutdown.await;
        tracing::info!(
            ?grace,
            "draining: requests in flight, watches and exec streams have the grace period to end"
        );
        draining.health.shutting_down.store(true, Ordering::Release);
        if !delay.is_zero() {
            tracing::info!(
                ?delay,
                "readiness failing; still accepting during the shutdown delay"
            );
            tokio::time::sleep(delay).await;
        }
    };
    // `apigw_runtime_alive_tasks` counts this runtime's tasks beside the workers'.
    let _counted = tokio::runtime::Handle::try_current()
        .ok()
        .map(apigw_core::server::workers::count_tasks_of);
    let limits = apigw_core::server::Limits::serving(&cfg.server, gateway.closing.clone());
    let g = gateway.clone();
    apigw_core::server::serve(
        listener,
        Some(built.tls),
        move |conn: ConnInfo| {
            let service = g.service(&conn);
            move |req| service.respond(req)
        },
        limits,
        stop,
    )
    .await;
    metrics_stop.cancel();
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
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
    use crate::cluster::{self, lease, services, status, tokenreview};
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
    gateway
        .authn
        .set_token_review(Box::new(tokenreview::TokenReviewer::new(
            client.clone(),
            tokenreview::TokenReviewSettings::default(),
        )));
    if let Some(flow) = &gateway.flow {
        cluster::flowcontrol::spawn(client.clone(), flow.clone());
    }
    if gateway.authz.webhook() {
        gateway
            .authz
            .set_access_review(Box::new(apigw_authz::webhook::KubeSender::with_client(
                client.clone(),
            )));
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

/// Every file that applies when it changes, in one task: the serving and proxy client
/// certificates, the APIService manifest directory, and what each of the gateway's concerns
/// owns ([`Reload`]).
fn watch_files(
    gateway: &Arc<Gateway>,
    certs: Vec<Arc<ReloadingCert>>,
    manifests: Option<Arc<apigw_registry::ManifestDir>>,
) {
    let mut concerns: Vec<Arc<dyn Reload>> =
        certs.into_iter().map(|c| c as Arc<dyn Reload>).collect();
    concerns.extend(manifests.map(|m| m as Arc<dyn Reload>));
    let parts: [Part; 5] = [
        |g| Some(&g.certs),
        |g| Some(&g.authn),
        |g| Some(&g.authz),
        |g| Some(&*g.proxy),
        |g| g.flow.as_deref().map(|f| f as &dyn Reload),
    ];
    concerns.extend(parts.into_iter().map(|part| {
        Arc::new(Concern {
            gateway: gateway.clone(),
            part,
        }) as Arc<dyn Reload>
    }));
    apigw_core::reload::watch(concerns, Duration::from_secs(2));
}

/// One of the gateway's concerns (client CAs, the token file and the authentication
/// configuration, the RBAC policy, the delegate's token, flow control's file) as the watcher
/// sees it: the watcher calls the concern whose set changed, so nothing is routed by name.
struct Concern {
    gateway: Arc<Gateway>,
    part: Part,
}

/// Where in the gateway a concern is (None: not configured).
type Part = fn(&Gateway) -> Option<&dyn Reload>;

impl Reload for Concern {
    fn watched(&self) -> Vec<Watched> {
        (self.part)(&self.gateway).map_or_else(Vec::new, Reload::watched)
    }

    fn reload(&self, what: &str) -> Result<(), BoxError> {
        (self.part)(&self.gateway).map_or(Ok(()), |c| c.reload(what))
    }
}

/// Releases the readiness latches as the registry loads, the first availability round ends and
/// OpenAPI is first merged.
fn spawn_latches(gateway: &Arc<Gateway>) {
    let g = gateway.clone();
    tokio::spawn(async move {
        let mut loaded = g.registry.subscribe();
        if loaded.wait_for(|generation| *generation > 0).await.is_ok() {
            g.health.registry_loaded.store(true, Ordering::Release);
        }
        let mut checked = g.availability.checked();
        if checked.wait_for(|generation| *generation > 0).await.is_ok() {
            g.health.availability_synced.store(true, Ordering::Release);
        }
        // Served OpenAPI is empty until the first merge of the delegate's and backends' specs:
        // a client that read it then would find no schema (kubectl's validation falls back to
        // /openapi/v2 and fails).
        let mut merged = g.openapi.subscribe();
        let after_both = |(generation, checked): &(u64, u64)| *generation > 0 && *checked > 0;
        if merged.wait_for(after_both).await.is_ok() {
            g.health.openapi_merged.store(true, Ordering::Release);
        }
    });
}

/// Keeps the backends' connection pools in step with the registry: an APIService removed or
/// changed drops its pool.
fn spawn_pool_pruning(gateway: &Arc<Gateway>) {
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
