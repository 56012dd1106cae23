//! `apigw sample-apiserver`: a real aggregated addon API server for group `wardle.example.com`,
//! version `v1alpha1`, namespaced resource `flunders`. It authenticates the way an aggregated
//! server does (the front proxy's client certificate, then `X-Remote-User` / `X-Remote-Group`),
//! serves discovery and OpenAPI, and keeps flunders in memory with
//! create/get/list/update/patch/delete/watch, server-side Table output for kubectl, and an `exec`
//! subresource over WebSocket. Writes honour `dryRun=All` (checked and answered, nothing stored,
//! no resourceVersion or watch event), record `metadata.managedFields`, and `PATCH` takes
//! server-side apply (`application/apply-patch+yaml`) with conflicts and `force`.
//!
//! This file owns configuration, the TLS listener, authentication, shutdown and the counters
//! tests observe ([`SampleStats`]); [`handler`] the REST surface, [`watch`] watch streams,
//! [`exec`] the exec subresource, [`bench`] the endpoints of `apigw-bench` (with [`bench_list`]
//! its streamed big list), [`openapi`] the OpenAPI documents, [`fields`] field
//! validation, [`options`] the options of writes (dry run, field manager, force),
//! [`managed`] field ownership and server-side apply, [`store`] the objects, [`table`] content
//! negotiation and Tables.

mod bench;
mod bench_list;
mod exec;
mod fields;
mod handler;
mod managed;
mod openapi;
mod options;
pub mod store;
mod table;
mod watch;

#[cfg(test)]
mod tests;

pub use bench::resource_list as bench_resource_list;

use anyhow::Context;
use apigw_core::body::{full, Body};
use apigw_core::errors::Status;
use apigw_core::server::RequestBody;
use apigw_core::server::{self, ConnInfo, Limits};
use apigw_core::tls::{self, PeerVerifier, ReloadingCert};
use http::{header, HeaderMap, Request, Response};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use store::Store;

/// How often a watch that allows bookmarks gets one, unless configured otherwise.
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(10);

/// Where the sample server finds its certificates and whom it trusts.
#[derive(Debug, Clone)]
pub struct SampleConfig {
    /// Serving certificate (PEM, chain allowed) and key.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// CA of the front proxy (the gateway's `--proxy-client-cert-file`).
    pub front_proxy_ca: PathBuf,
    /// CNs the front proxy's certificate may have; empty means any.
    pub allowed_names: Vec<String>,
    /// How often watches with `allowWatchBookmarks=true` receive a `BOOKMARK` event.
    pub bookmark_interval: Duration,
}

impl SampleConfig {
    /// A configuration trusting any CN the front-proxy CA signed, with default intervals.
    pub fn new(
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
        front_proxy_ca: impl Into<PathBuf>,
    ) -> Self {
        Self {
            cert: cert.into(),
            key: key.into(),
            front_proxy_ca: front_proxy_ca.into(),
            allowed_names: Vec::new(),
            bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
        }
    }
}

/// Serves the sample API on `listener` until `shutdown` resolves and open requests drain.
pub async fn run(
    listener: tokio::net::TcpListener,
    cfg: SampleConfig,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    SampleServer::new(cfg)?.serve(listener, shutdown).await;
    Ok(())
}

/// A sample server whose certificates are loaded, ready to serve; [`SampleServer::stats`]
/// observes it while it runs.
pub struct SampleServer {
    app: Arc<App>,
    tls: Arc<rustls::ServerConfig>,
    stopping: tokio::sync::watch::Sender<bool>,
}

impl SampleServer {
    pub fn new(cfg: SampleConfig) -> anyhow::Result<Self> {
        let cert = ReloadingCert::load(&cfg.cert, &cfg.key).context("sample server certificate")?;
        let cas = tls::load_certs(&cfg.front_proxy_ca).context("sample server front-proxy CA")?;
        let verifier = PeerVerifier::new(&cas, "front-proxy CA").context("front-proxy CA")?;
        let client_auth =
            tls::optional_client_verifier(&cas).context("sample server front-proxy CA")?;
        let tls =
            tls::server_config(cert, Some(client_auth)).context("sample server TLS config")?;
        let (stopping, stop_rx) = tokio::sync::watch::channel(false);
        let app = Arc::new(App {
            store: Store::new(),
            verifier,
            allowed_names: cfg.allowed_names,
            bookmark_interval: cfg.bookmark_interval,
            stats: SampleStats::default(),
            stopping: stop_rx,
        });
        Ok(Self {
            app,
            tls: Arc::new(tls),
            stopping,
        })
    }

    /// Live counters of this server.
    pub fn stats(&self) -> SampleStats {
        self.app.stats.clone()
    }

    /// Serves until `shutdown` resolves; then open watches end (as kube-apiserver closes them)
    /// and open requests drain.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) {
        let Self { app, tls, stopping } = self;
        let make = move |conn: ConnInfo| {
            let app = app.clone();
            let trusted = app.trusted_proxy(&conn);
            move |req: Request<RequestBody>| {
                let app = app.clone();
                async move { app.handle(trusted, req).await }
            }
        };
        let shutdown = async move {
            shutdown.await;
            stopping.send_replace(true);
        };
        server::serve(listener, Some(tls), make, Limits::default(), shutdown).await;
    }
}

/// Counters of a running sample server, shared with whoever holds a clone.
#[derive(Debug, Clone, Default)]
pub struct SampleStats {
    watches: Arc<AtomicUsize>,
    execs: Arc<AtomicUsize>,
}

impl SampleStats {
    /// Watch streams currently open.
    pub fn active_watches(&self) -> usize {
        self.watches.load(Ordering::SeqCst)
    }

    /// Exec sessions currently running (from the `101` until the WebSocket closes).
    pub fn active_execs(&self) -> usize {
        self.execs.load(Ordering::SeqCst)
    }

    fn watch_started(&self) -> Active {
        Active::new(&self.watches)
    }

    fn exec_started(&self) -> Active {
        Active::new(&self.execs)
    }
}

/// Counts one open stream until dropped.
struct Active(Arc<AtomicUsize>);

impl Active {
    fn new(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The state every connection shares.
pub(crate) struct App {
    pub(crate) store: Store,
    verifier: PeerVerifier,
    allowed_names: Vec<String>,
    bookmark_interval: Duration,
    stats: SampleStats,
    /// Becomes `true` when the server shuts down; open watches end then.
    stopping: tokio::sync::watch::Receiver<bool>,
}

/// Who a request is from, per the front proxy's headers.
#[derive(Debug, Clone)]
pub(crate) struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl App {
    /// True when the connection's certificate is the front proxy's: issued by the front-proxy
    /// CA, with an allowed CN.
    fn trusted_proxy(&self, conn: &ConnInfo) -> bool {
        let Some(leaf) = conn.peer_chain.first() else {
            return false;
        };
        let cn_ok = self.allowed_names.is_empty()
            || apigw_core::tls::subject(leaf)
                .is_some_and(|(cn, _)| self.allowed_names.contains(&cn));
        cn_ok && self.verifier.verifies(&conn.peer_chain)
    }

    async fn handle(&self, trusted: bool, req: Request<RequestBody>) -> Response<Body> {
        if matches!(req.uri().path(), "/healthz" | "/livez" | "/readyz") {
            let mut res = Response::new(full("ok"));
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            return res;
        }
        let Some(user) = trusted.then(|| remote_user(req.headers())).flatten() else {
            return Status::unauthorized().into_response();
        };
        tracing::debug!(user = %user.name, groups = ?user.groups, method = %req.method(), path = %req.uri().path(), "sample request");
        if bench::claims(req.uri().path()) {
            return bench::serve(req).await;
        }
        handler::route(self, &user, req)
            .await
            .unwrap_or_else(Status::into_response)
    }
}

/// The user the front proxy vouches for; `None` when it named nobody.
fn remote_user(headers: &HeaderMap) -> Option<User> {
    let name = headers
        .get("x-remote-user")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())?
        .to_string();
    let groups = headers
        .get_all("x-remote-group")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    Some(User { name, groups })
}
