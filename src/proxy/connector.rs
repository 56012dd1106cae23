//! Connections to one backend: resolve the service name (static `--resolve` entries first,
//! then DNS), connect over TCP, and complete a TLS handshake that verifies the *service* name,
//! whatever address was dialled. Errors say which step failed and why.

use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Name resolution for backends: static `--resolve` entries first, then (in cluster mode)
/// Services and EndpointSlices for `<name>.<namespace>.svc` names, then DNS.
#[derive(Default)]
pub struct Resolver {
    pub fixed: BTreeMap<(String, u16), Vec<SocketAddr>>,
    cluster: std::sync::OnceLock<std::sync::Arc<dyn crate::cluster::services::ResolveService>>,
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
    pub fn set_cluster(
        &self,
        cluster: std::sync::Arc<dyn crate::cluster::services::ResolveService>,
    ) {
        let _ = self.cluster.set(cluster);
    }

    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ConnectError> {
        if let Some(addrs) = self.fixed.get(&(host.to_ascii_lowercase(), port)) {
            return Ok(addrs.clone());
        }
        if let Some(cluster) = self.cluster.get() {
            if crate::cluster::services::parse_host(host).is_some() {
                return cluster
                    .resolve_service(host, port)
                    .await
                    .map_err(ConnectError::Resolve);
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
    #[error("invalid backend URI: {0}")]
    Uri(String),
}

/// A `tower::Service<Uri>` making verified TLS connections for hyper-util's pooled client.
#[derive(Clone)]
pub struct Connector {
    pub tls: Arc<rustls::ClientConfig>,
    pub resolver: Arc<Resolver>,
    pub connect_timeout: Duration,
}

impl tower::Service<http::Uri> for Connector {
    type Response = BackendStream;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<BackendStream, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.connect(uri).await })
    }
}

impl Connector {
    async fn connect(self, uri: http::Uri) -> Result<BackendStream, ConnectError> {
        let host = uri
            .host()
            .ok_or_else(|| ConnectError::Uri(uri.to_string()))?
            .trim_matches(['[', ']'])
            .to_string();
        let port = uri.port_u16().unwrap_or(443);
        let server_name = ServerName::try_from(host.clone())
            .map_err(|e| ConnectError::Uri(format!("{host}: {e}")))?;
        let mut last = None;
        for addr in self.resolver.resolve(&host, port).await? {
            match dial(addr, &server_name, &self.tls, self.connect_timeout).await {
                Ok(tls) => return Ok(BackendStream(TokioIo::new(tls))),
                Err(e @ ConnectError::Tls(_)) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ConnectError::Resolve(format!("lookup {host}: no addresses"))))
    }
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
        Ok(Err(e)) => Err(ConnectError::Tls(tls_reason(&e))),
        Err(_) => Err(ConnectError::Tls(format!(
            "handshake with {addr} did not complete within {} s",
            timeout.as_secs()
        ))),
    }
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

/// A TLS connection to a backend, telling hyper whether HTTP/2 was negotiated.
pub struct BackendStream(TokioIo<TlsStream<TcpStream>>);

impl Connection for BackendStream {
    fn connected(&self) -> Connected {
        let (_, session) = self.0.inner().get_ref();
        if session.alpn_protocol() == Some(b"h2") {
            Connected::new().negotiated_h2()
        } else {
            Connected::new()
        }
    }
}

impl hyper::rt::Read for BackendStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for BackendStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}
