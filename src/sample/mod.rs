//! `apigw sample-apiserver`: a real aggregated addon API server for group `wardle.example.com`,
//! version `v1alpha1`, namespaced resource `flunders`. It authenticates the way an aggregated
//! server does (the front proxy's client certificate, then `X-Remote-User` / `X-Remote-Group`),
//! serves discovery, and keeps flunders in memory with create/get/list/update/patch/delete/watch
//! and server-side Table output for kubectl.
//!
//! This file owns configuration, the TLS listener and authentication; [`handler`] the REST
//! surface, [`store`] the objects, [`table`] content negotiation and Tables.

mod handler;
mod patch;
pub mod store;
mod table;

#[cfg(test)]
mod tests;

pub use patch::merge_patch;

use crate::body::{full, Body};
use crate::errors::Status;
use crate::server::{self, ConnInfo, Limits};
use crate::tls::{self, PeerVerifier, ReloadingCert};
use anyhow::Context;
use http::{header, HeaderMap, Request, Response};
use hyper::body::Incoming;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use store::Store;

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
}

/// Serves the sample API on `listener` until `shutdown` resolves and open requests drain.
pub async fn run(
    listener: tokio::net::TcpListener,
    cfg: SampleConfig,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let cert = ReloadingCert::load(&cfg.cert, &cfg.key).context("sample server certificate")?;
    let cas = tls::load_certs(&cfg.front_proxy_ca).context("sample server front-proxy CA")?;
    let verifier = PeerVerifier::new(&cas, "front-proxy CA").context("front-proxy CA")?;
    let tls = tls::server_config(cert, &cas).context("sample server TLS config")?;
    let app = Arc::new(App {
        store: Store::new(),
        verifier,
        allowed_names: cfg.allowed_names,
    });
    let make = move |conn: ConnInfo| {
        let app = app.clone();
        let trusted = app.trusted_proxy(&conn);
        move |req: Request<Incoming>| {
            let app = app.clone();
            async move { app.handle(trusted, req).await }
        }
    };
    server::serve(listener, Arc::new(tls), make, Limits::default(), shutdown).await;
    Ok(())
}

/// The state every connection shares.
pub(crate) struct App {
    pub(crate) store: Store,
    verifier: PeerVerifier,
    allowed_names: Vec<String>,
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
            || crate::authn::subject(leaf).is_some_and(|(cn, _)| self.allowed_names.contains(&cn));
        cn_ok && self.verifier.verifies(&conn.peer_chain)
    }

    async fn handle(&self, trusted: bool, req: Request<Incoming>) -> Response<Body> {
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
