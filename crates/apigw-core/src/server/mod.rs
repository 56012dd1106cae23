//! The one accept loop, for every listener (the gateway's, its plain-HTTP metrics listener's, the
//! sample server's): TCP (refused at once past [`Limits::max_connections_per_client`]; past
//! [`Limits::max_connections`] the quietest connection is [`shed`] to make room; accept
//! errors such as running out of file descriptors back off instead of spinning) -> TLS
//! handshake when the listener has TLS (with a timeout; peer certificates read once per
//! connection) -> hyper-util's auto builder serving HTTP/1.1 (with upgrades) and
//! HTTP/2 -> the caller's handler. Every state of a connection has a deadline ([`deadlines`]):
//! the handshake, the first request (or HTTP/2 preface), a request head, and idle time between
//! requests; only a connection answering a request (a watch, say) stays open without one.
//! A response complete before its request body was read lets the client see it ([`linger`]).
//! Shutdown stops accepting and lets open connections finish, up to a grace period.
//! Connections are served on the thread-per-core [`workers`] when [`Limits::workers`] asks for
//! them.

pub mod cut;
mod deadlines;
mod flags;
pub mod linger;
mod settings;
pub mod shed;
pub use flags::{ServerFlags, Serving, ServingFlags};
pub use linger::RequestBody;
pub use settings::{cpus, ServerSettings, MAX_WORKER_THREADS};
pub mod workers;

use crate::body::Body;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::pki_types::CertificateDer;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// How long a client may take to complete its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a new connection may take to send its first request head (HTTP/2: the preface and
/// SETTINGS), and a kept-alive HTTP/1.1 connection its next head from that head's first byte
/// (default of [`Limits::header_read_timeout`]). One deadline for nothing yet and part of a
/// head on a new connection: from the server's side both are a head that has not arrived, as
/// Go's `ReadHeaderTimeout` (32 s in kube-apiserver) runs from the start of a new connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection answering nothing stays open (HTTP/1.1 between requests, HTTP/2 with
/// no open stream): kube-apiserver's `IdleTimeout` and HTTP/2 `IdleTimeout`, 90 s, which is also
/// the idle timeout of client-go's and Go's default transports, so clients close first.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// After a quiet connection is asked to close (HTTP/2: GOAWAY and a PING the client should
/// answer), how long it may stay quiet before it is cut: Go's HTTP/2 `goAwayTimeout`.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Raises the open-file limit to its hard maximum, as Go programs do at start: a front door
/// holds a connection per client and per proxied watch (and the bench's watch scenarios hold
/// thousands). Called once by each binary's `main`.
pub fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        // Nothing to do when it cannot be raised: the soft limit stays, as before.
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

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
    /// How long a client may take to send a request head (slowloris), and a new connection its
    /// first one ([`HEADER_READ_TIMEOUT`]).
    pub header_read_timeout: Duration,
    /// How long a connection with no request being answered stays open ([`IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// Open connections per client address; a connection past it is closed at accept, before
    /// the TLS handshake. 0 is unlimited.
    pub max_connections_per_client: usize,
    /// Open connections in all ([`shed`]); 0 is unlimited.
    pub max_connections: usize,
    pub grace: Duration,
    /// Cancelled when the grace period ends, so long-running responses (watches, upgraded
    /// streams) can end cleanly instead of being cut.
    pub closing: tokio_util::sync::CancellationToken,
    /// Connection worker threads ([`workers`]); 0 serves connections on the caller's runtime.
    pub workers: usize,
}

impl Limits {
    /// The main listener's limits, from `settings` (the one place its fields become these):
    /// its deadlines, per-client cap, workers and grace, `closing` at the grace's end, and the
    /// connection budget of the process's open-file limit.
    pub fn serving(
        settings: &ServerSettings,
        closing: tokio_util::sync::CancellationToken,
    ) -> Self {
        Self {
            grace: settings.shutdown_grace,
            max_connections_per_client: settings.max_connections_per_client,
            max_connections: shed::fd_limit().map_or(0, shed::budget),
            closing,
            workers: settings.worker_threads,
            ..Self::side(settings)
        }
    }

    /// A side listener's limits (the plain-HTTP metrics listener): the deadlines of
    /// `settings`, on the caller's runtime, no other cap.
    pub fn side(settings: &ServerSettings) -> Self {
        Self {
            header_read_timeout: settings.header_read_timeout,
            idle_timeout: settings.idle_timeout,
            ..Self::default()
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            handshake_timeout: HANDSHAKE_TIMEOUT,
            header_read_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            max_connections_per_client: 0,
            max_connections: 0,
            grace: Duration::from_secs(30),
            closing: tokio_util::sync::CancellationToken::new(),
            workers: 0,
        }
    }
}

/// Serves connections from `listener` until `shutdown` resolves, then drains: over TLS with
/// `tls`, else plain HTTP (the metrics listener, for scrapers in a trusted network).
///
/// `make` is called once per connection with what the handshake revealed and returns the
/// request handler for that connection.
pub async fn serve<M, H, Fut>(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    make: M,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) where
    M: Fn(ConnInfo) -> H + Send + Sync + 'static,
    H: Fn(Request<RequestBody>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let acceptor = tls.map(TlsAcceptor::from);
    let make = Arc::new(make);
    // Shutdown: `draining` asks every connection to finish; each holds a clone of `open`, so
    // `drained` ends once all have. Not hyper-util's `GracefulShutdown`: its watcher takes each
    // connection's future and can only end them all at once, while each connection here is
    // also asked to finish alone (shed for a newer one, quiet past its deadline) and cut when
    // it does not within `CLOSE_WAIT` ([`serve_connection`]), which needs the future itself.
    let draining = tokio_util::sync::CancellationToken::new();
    let (open, mut drained) = tokio::sync::mpsc::channel::<()>(1);
    let per_client = deadlines::PerClient::new(limits.max_connections_per_client);
    let shed = shed::Shed::new(limits.max_connections);
    // HTTP/2 streams run as tasks a request can cut at its deadline ([`cut`]).
    let mut builder = auto::Builder::new(cut::Executor);
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
    // HTTP/1.1: a client must send its whole head promptly (slowloris). [`deadlines`] times
    // heads as Go does, from a head's first byte, so a kept-alive connection waits for its next
    // request the idle timeout; hyper's own header timer would start at the end of each
    // response, and arm a timer for every request.
    builder
        .http1()
        .header_read_timeout(None)
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
        let Some(admitted) = per_client.admit(remote.ip()) else {
            // Closed before the handshake: costs the client's address nothing but this.
            tracing::debug!(%remote, "too many connections from this client; closed");
            drop(tcp);
            continue;
        };
        let Some(room) = shed.admit() else {
            tracing::debug!(%remote, "every open connection is answering a request; closed");
            drop(tcp);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, make, builder) = (acceptor.clone(), make.clone(), builder.clone());
        let (draining, open) = (draining.clone(), open.clone());
        let timeout = limits.handshake_timeout;
        let (opening, idle) = (limits.header_read_timeout, limits.idle_timeout);
        let connection = move |tcp: TcpStream| async move {
            let _counted = (admitted, open);
            let Some(acceptor) = acceptor else {
                let info = ConnInfo {
                    remote,
                    peer_chain: Vec::new(),
                };
                return serve_connection(
                    tcp,
                    remote,
                    make(info),
                    &builder,
                    (&draining, &room),
                    (opening, idle),
                )
                .await;
            };
            let handshake = tokio::select! {
                done = tokio::time::timeout(timeout, acceptor.accept(tcp)) => done,
                () = room.closing.cancelled() => {
                    tracing::debug!(%remote, "shed in its TLS handshake for a newer connection");
                    return;
                }
            };
            let tls = match handshake {
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
            serve_connection(
                tls,
                remote,
                handler,
                &builder,
                (&draining, &room),
                (opening, idle),
            )
            .await;
        };
        match &workers {
            Some(workers) => match tcp.into_std() {
                Ok(std) => workers.hand_over(std, move |tcp| cut::cuttable(connection(tcp))),
                Err(e) => tracing::warn!(%remote, error = %e, "handing a connection to a worker"),
            },
            None => {
                // A request may cut its HTTP/1.1 connection at its deadline ([`cut`]).
                tokio::spawn(cut::cuttable(connection(tcp)));
            }
        }
    }
    drop(listener);
    draining.cancel();
    drop(open);
    let drained = async move {
        let _ = drained.recv().await;
    };
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

/// Serves one connection (TLS or plain) with `handler` until it ends: each state has its
/// deadline (`opening` for the first request, `idle` between requests), `draining` asks it
/// to finish, and its `room` closes it while quiet when a newer connection needs the place.
async fn serve_connection<IO, H, Fut>(
    io: IO,
    remote: SocketAddr,
    handler: H,
    builder: &auto::Builder<cut::Executor>,
    (draining, room): (&tokio_util::sync::CancellationToken, &shed::Room),
    (opening, idle): (Duration, Duration),
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<RequestBody>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let activity = deadlines::Activity::new();
    room.serving(&activity);
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |req| {
        let handler = handler.clone();
        let busy = requests.begin();
        let (req, upload) = linger::wrap(req);
        async move {
            let mut res = handler(req).await;
            upload.answered(&mut res);
            Ok::<_, Infallible>(res.map(|body| deadlines::Guarded::new(body, busy)))
        }
    });
    let io = deadlines::Watched::new(io, activity.clone());
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    // Asked to close (shutdown, or quiet past its deadline): from then on, a connection
    // quiet for CLOSE_WAIT is cut even if the client never finishes the close.
    let mut closing: Option<tokio::time::Instant> = None;
    loop {
        let (first, then) = match closing {
            None => (opening, idle),
            Some(_) => (CLOSE_WAIT, CLOSE_WAIT),
        };
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(%remote, error = %e, "connection ended with an error");
                }
                break;
            }
            () = room.closing.cancelled(), if closing.is_none() => {
                if activity.quiet_since().is_some() {
                    tracing::debug!(%remote, "quiet connection shed for a newer one");
                    break;
                }
                // A request began since it was chosen: it finishes, then the connection closes.
                conn.as_mut().graceful_shutdown();
                closing = Some(tokio::time::Instant::now());
            }
            () = draining.cancelled(), if closing.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing = Some(tokio::time::Instant::now());
            }
            () = activity.quiet_for(first, then, closing) => {
                if closing.is_some() {
                    tracing::debug!(%remote, "closing connection did not finish; cut");
                    break;
                }
                tracing::debug!(%remote, "connection quiet past its deadline; closing");
                conn.as_mut().graceful_shutdown();
                closing = Some(tokio::time::Instant::now());
            }
        }
    }
}
