//! Connections to one backend: resolve the service name (static `--resolve` entries first,
//! then DNS), connect over TCP, and complete a TLS handshake that verifies the *service* name,
//! whatever address was dialled. Errors say which step failed and why.

use futures_util::future::BoxFuture;
use rustls::pki_types::ServerName;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Anything that resolves service hosts; object safe. Cluster mode's
/// Services and EndpointSlices implement it (`cluster::ServiceResolver`).
pub trait ResolveService: Send + Sync {
    fn resolve_service<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, Result<Vec<SocketAddr>, apigw_core::body::BoxError>>;
}

/// `<name>.<namespace>.svc` (optionally followed by `.cluster.local`) as (name, namespace).
pub fn parse_host(host: &str) -> Option<(&str, &str)> {
    let host = host.trim_end_matches('.');
    let host = host.strip_suffix(".cluster.local").unwrap_or(host);
    let rest = host.strip_suffix(".svc")?;
    let (name, ns) = rest.split_once('.')?;
    (!name.is_empty() && !ns.is_empty() && !ns.contains('.')).then_some((name, ns))
}

/// Name resolution for backends: static `--resolve` entries first, then (in cluster mode)
/// Services and EndpointSlices for `<name>.<namespace>.svc` names, then DNS.
#[derive(Default)]
pub struct Resolver {
    pub fixed: BTreeMap<(String, u16), Vec<SocketAddr>>,
    cluster: std::sync::OnceLock<std::sync::Arc<dyn ResolveService>>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("fixed", &self.fixed)
            .field("cluster", &self.cluster.get().is_some())
            .finish()
    }
}

impl Resolver {
    pub fn new(fixed: BTreeMap<(String, u16), Vec<SocketAddr>>) -> Self {
        Self {
            fixed,
            cluster: std::sync::OnceLock::new(),
        }
    }

    /// Resolves service names through the cluster from now on (set once, in cluster mode).
    pub fn set_cluster(&self, cluster: std::sync::Arc<dyn ResolveService>) {
        let _ = self.cluster.set(cluster);
    }

    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ConnectError> {
        if let Some(addrs) = self.fixed.get(&(host.to_ascii_lowercase(), port)) {
            return Ok(addrs.clone());
        }
        if let Some(cluster) = self.cluster.get() {
            if parse_host(host).is_some() {
                return cluster
                    .resolve_service(host, port)
                    .await
                    .map_err(|e| ConnectError::Resolve(e.to_string()));
            }
        }
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| ConnectError::Resolve(format!("lookup {host}: {e}")))?
            .collect();
        if addrs.is_empty() {
            return Err(ConnectError::Resolve(format!(
                "lookup {host}: no addresses"
            )));
        }
        Ok(addrs)
    }
}

/// Why a backend connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{0}")]
    Resolve(String),
    #[error("dial tcp {addr}: {source}")]
    Dial {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("dial tcp {0}: i/o timeout")]
    DialTimeout(SocketAddr),
    #[error("tls: {0}")]
    Tls(String),
    /// The backend refused every protocol offered by ALPN (`no_application_protocol`): it
    /// speaks only the other of HTTP/1.1 and HTTP/2.
    #[error("tls: {0}")]
    NoCommonProtocol(String),
    #[error("invalid backend URI: {0}")]
    Uri(String),
}

/// Connects to `addr` over TCP and completes a TLS handshake verifying `name`.
pub(super) async fn dial(
    addr: SocketAddr,
    name: &ServerName<'static>,
    tls: &Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, ConnectError> {
    let tcp = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(source)) => return Err(ConnectError::Dial { addr, source }),
        Err(_) => return Err(ConnectError::DialTimeout(addr)),
    };
    let _ = tcp.set_nodelay(true);
    let handshake = TlsConnector::from(tls.clone()).connect(name.clone(), tcp);
    match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(e)) if refused_alpn(&e) => Err(ConnectError::NoCommonProtocol(tls_reason(&e))),
        Ok(Err(e)) => Err(ConnectError::Tls(tls_reason(&e))),
        Err(_) => Err(ConnectError::Tls(format!(
            "handshake with {addr} did not complete within {} s",
            timeout.as_secs()
        ))),
    }
}

/// True when the handshake failed on the server's `no_application_protocol` alert.
fn refused_alpn(e: &std::io::Error) -> bool {
    matches!(
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>()),
        Some(rustls::Error::AlertReceived(
            rustls::AlertDescription::NoApplicationProtocol
        ))
    )
}

/// The rustls error behind an I/O error, or the I/O error itself.
fn tls_reason(e: &std::io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => tls.to_string(),
        None => e.to_string(),
    }
}
