//! The accept loop shared by the gateway and the sample server: TCP -> TLS handshake (with a
//! timeout; peer certificates read once per connection) -> hyper-util's auto builder serving
//! HTTP/1.1 (with upgrades) and HTTP/2 -> the caller's handler. Shutdown stops accepting and
//! lets open connections finish, up to a grace period. Connections are served on the
//! thread-per-core [`workers`] when [`Limits::workers`] asks for them.

pub mod workers;

use crate::body::Body;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::pki_types::CertificateDer;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// What the gateway knows about a connection before the first request.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub remote: SocketAddr,
    /// The client's certificate chain, leaf first; empty when none was presented.
    pub peer_chain: Vec<CertificateDer<'static>>,
}

/// Limits of the accept loop.
#[derive(Debug, Clone)]
pub struct Limits {
    pub handshake_timeout: Duration,
    /// How long an HTTP/1.1 client may take to send a request head (slowloris).
    pub header_read_timeout: Duration,
    pub grace: Duration,
    /// Cancelled when the grace period ends, so long-running responses (watches, upgraded
    /// streams) can end cleanly instead of being cut.
    pub closing: tokio_util::sync::CancellationToken,
    /// Connection worker threads ([`workers`]); 0 serves connections on the caller's runtime.
    pub workers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            grace: Duration::from_secs(30),
            closing: tokio_util::sync::CancellationToken::new(),
            workers: 0,
        }
    }
}

/// Serves TLS connections from `listener` until `shutdown` resolves, then drains.
///
/// `make` is called once per connection with what the handshake revealed and returns the
/// request handler for that connection.
pub async fn serve<M, H, Fut>(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    make: M,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) where
    M: Fn(ConnInfo) -> H + Send + Sync + 'static,
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let acceptor = TlsAcceptor::from(tls);
    let make = Arc::new(make);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // HTTP/2: room for client-go's many multiplexed watches; bounded headers; resets that
    // arrive faster than streams are accepted (CVE-2023-44487 "rapid reset") close the
    // connection; pings find dead peers of idle watch connections.
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(1000)
        .max_pending_accept_reset_streams(50)
        .max_local_error_reset_streams(1024)
        .max_header_list_size(1 << 20)
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    // HTTP/1.1: a client must send its whole head promptly (slowloris).
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(1 << 20);
    let builder = Arc::new(builder);
    let workers = match limits.workers {
        0 => None,
        n => match workers::Workers::start(n) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "starting connection workers; serving on the shared runtime");
                None
            }
        },
    };
    tokio::pin!(shutdown);
    loop {
        let (tcp, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, make, builder) = (acceptor.clone(), make.clone(), builder.clone());
        let watcher = graceful.watcher();
        let timeout = limits.handshake_timeout;
        let connection = move |tcp: TcpStream| async move {
            let tls = match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    // A refused client certificate (expired, not yet valid, wrong purpose, unknown
                    // CA) is worth a clear line; other handshake noise (scanners, probes) is not.
                    let cert = e
                        .get_ref()
                        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                        .is_some_and(|t| matches!(t, rustls::Error::InvalidCertificate(_)));
                    if cert {
                        tracing::warn!(%remote, error = %e, "client certificate refused");
                    } else {
                        tracing::debug!(%remote, error = %e, "TLS handshake failed");
                    }
                    return;
                }
                Err(_) => {
                    tracing::debug!(%remote, "TLS handshake timed out");
                    return;
                }
            };
            let peer_chain = tls
                .get_ref()
                .1
                .peer_certificates()
                .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
                .unwrap_or_default();
            let handler = make(ConnInfo { remote, peer_chain });
            let service = hyper::service::service_fn(move |req| {
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(handler(req).await) }
            });
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(%remote, error = %e, "connection ended with an error");
            }
        };
        match &workers {
            Some(workers) => match tcp.into_std() {
                Ok(std) => workers.hand_over(std, connection),
                Err(e) => tracing::warn!(%remote, error = %e, "handing a connection to a worker"),
            },
            None => {
                tokio::spawn(connection(tcp));
            }
        }
    }
    drop(listener);
    let drained = graceful.shutdown();
    tokio::pin!(drained);
    tokio::select! {
        () = &mut drained => tracing::info!("all connections drained"),
        () = tokio::time::sleep(limits.grace) => {
            tracing::warn!("grace period over; ending watches and upgraded streams");
            limits.closing.cancel();
            if tokio::time::timeout(Duration::from_secs(5), drained).await.is_err() {
                tracing::warn!("closing connections that did not finish");
            }
        }
    }
}
