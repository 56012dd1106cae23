//! The connections to one backend service. Owns its endpoints (the addresses the service name
//! resolves to, refreshed every few seconds), the choice among them (power of two choices on
//! in-flight requests), passive ejection of an endpoint whose connect or handshake failed, the
//! retry of a request on another endpoint while nothing of it was sent, and each endpoint's
//! connections: idle HTTP/1.1 keep-alive connections for ordinary requests and upgrades, and
//! multiplexed HTTP/2 connections for watches, opening another one when a connection carries
//! [`STREAMS_PER_CONN`] streams; and the request target every request leaves with, shaped for
//! the protocol of its connection (origin form and `Host` on HTTP/1.1, `:authority` on HTTP/2).

use super::connector::{dial, ConnectError, Resolver};
use crate::body::Body;
use crate::errors::chain;
use crate::request_kind::RequestKind;
use arc_swap::ArcSwap;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{header, HeaderValue, Method, Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

/// How long a resolved endpoint list is used before the name is resolved again.
const RESOLVE_TTL: Duration = Duration::from_secs(5);
/// An idle HTTP/1.1 connection older than this is closed rather than reused.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// A request on a connection idle at least this long may be sent again if the server closes
/// the connection without answering (no server closes idle connections sooner).
const IDLE_BEFORE_REPLAY: Duration = Duration::from_millis(100);
/// Idle HTTP/1.1 connections kept per endpoint.
const MAX_IDLE: usize = 64;
/// Streams one HTTP/2 connection carries before the next watch opens another connection.
/// RFC 9113 recommends servers allow at least 100; Go servers allow 250.
pub const STREAMS_PER_CONN: usize = 100;
/// An endpoint whose connect failed is skipped for this long, doubling per further failure.
const EJECT_BASE: Duration = Duration::from_secs(1);
const EJECT_MAX: Duration = Duration::from_secs(30);
/// Endpoints tried for one request, at most.
const MAX_ATTEMPTS: usize = 3;

/// Why a request could not be forwarded.
#[derive(Debug)]
pub enum SendError {
    /// No connection could be made; nothing was sent.
    Connect(ConnectError),
    /// The request was (maybe partly) sent, and then the exchange failed.
    Exchange(hyper::Error),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect(e) => e.fmt(f),
            Self::Exchange(e) => f.write_str(&chain(e)),
        }
    }
}

/// The connections to one backend.
pub struct Pool {
    server_name: ServerName<'static>,
    host: String,
    port: u16,
    /// `<host>:<port>`, the `:authority` of HTTP/2 requests.
    authority: Authority,
    /// The same, as the `Host` header of HTTP/1.1 requests.
    host_header: HeaderValue,
    /// ALPN `http/1.1` only.
    h1_tls: Arc<rustls::ClientConfig>,
    /// ALPN `h2`, then `http/1.1`.
    h2_tls: Arc<rustls::ClientConfig>,
    resolver: Arc<Resolver>,
    connect_timeout: Duration,
    endpoints: ArcSwap<Endpoints>,
    refreshing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Endpoints {
    resolved: Option<Instant>,
    list: Vec<Arc<Endpoint>>,
}

/// One address of the backend and its connections.
pub struct Endpoint {
    addr: SocketAddr,
    in_flight: AtomicUsize,
    failures: AtomicU32,
    ejected_until: Mutex<Option<Instant>>,
    /// Idle HTTP/1.1 connections, one list per connection worker (see [`idle_slots`]): a
    /// connection's task runs on the worker that opened it, so only that worker reuses it.
    idle: Box<[Mutex<IdleList>]>,
    h2: Mutex<Vec<H2Conn>>,
    h2_connecting: tokio::sync::Mutex<()>,
    /// The endpoint answered an `h2` offer with HTTP/1.1.
    no_h2: AtomicBool,
}

/// Idle HTTP/1.1 connections with the time each went idle, most recent last.
type IdleList = Vec<(http1::SendRequest<Body>, Instant)>;

#[derive(Clone)]
struct H2Conn {
    send: http2::SendRequest<Body>,
    streams: Arc<AtomicUsize>,
}

/// Why one attempt failed.
enum Attempt {
    /// Nothing was sent: the request comes back for another try. `eject` when the endpoint
    /// itself failed (connect, handshake), not merely a pooled connection that went stale.
    NotSent {
        req: Box<Request<Body>>,
        error: SendError,
        eject: bool,
    },
    /// The request went out and the exchange failed. `again` is the request to send once
    /// more when it is replayable (see [`Replay`]) and the failure shows the server did not
    /// act on it: an HTTP/1.1 connection that sat idle and that the server closed before any
    /// answer (servers close idle connections at their own pace), or an HTTP/2 stream it
    /// refused or left out of a `GOAWAY`.
    Sent {
        error: hyper::Error,
        again: Option<Box<Request<Body>>>,
    },
}

impl Pool {
    pub fn new(
        host: String,
        port: u16,
        h1_tls: rustls::ClientConfig,
        h2_tls: rustls::ClientConfig,
        resolver: Arc<Resolver>,
        connect_timeout: Duration,
    ) -> Result<Self, String> {
        let server_name = ServerName::try_from(host.clone()).map_err(|e| format!("{host}: {e}"))?;
        let authority = Authority::try_from(format!("{host}:{port}"))
            .map_err(|e| format!("{host}:{port}: {e}"))?;
        let host_header =
            HeaderValue::from_str(authority.as_str()).map_err(|e| format!("{host}:{port}: {e}"))?;
        Ok(Self {
            server_name,
            host,
            port,
            authority,
            host_header,
            h1_tls: Arc::new(h1_tls),
            h2_tls: Arc::new(h2_tls),
            resolver,
            connect_timeout,
            endpoints: ArcSwap::default(),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// Sends `req` to one endpoint, trying others while nothing was sent. The response body
    /// keeps its connection (and the endpoint's in-flight count) until it ends or is dropped.
    /// `kind` picks the connection: an HTTP/2 stream for a watch, HTTP/1.1 for everything else
    /// (given to the client after a `101` for an upgrade).
    pub async fn send(
        &self,
        mut req: Request<Body>,
        kind: RequestKind,
    ) -> Result<Response<PooledBody>, SendError> {
        let endpoints = self.endpoints().await?;
        let mut tried: Vec<usize> = Vec::new();
        let mut last = None;
        for _ in 0..MAX_ATTEMPTS {
            let Some(i) = pick(&endpoints.list, &tried) else {
                break;
            };
            let endpoint = &endpoints.list[i];
            let lease = Lease::new(endpoint.clone());
            match self.attempt(endpoint, req, kind).await {
                Ok((res, conn)) => {
                    let lease = lease.with(conn, kind);
                    return Ok(res.map(|inner| PooledBody {
                        inner,
                        lease: Some(lease),
                    }));
                }
                Err(Attempt::NotSent {
                    req: back,
                    error,
                    eject,
                }) => {
                    if eject {
                        endpoint.eject();
                        tried.push(i);
                    }
                    req = *back;
                    last = Some(error);
                }
                Err(Attempt::Sent {
                    error,
                    again: Some(again),
                }) => {
                    tracing::debug!(addr = %endpoint.addr, error = %chain(&error),
                        "the backend did not process the request; sending it again");
                    req = *again;
                    last = Some(SendError::Exchange(error));
                }
                Err(Attempt::Sent { error, again: None }) => {
                    return Err(SendError::Exchange(error))
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            SendError::Connect(ConnectError::Resolve(format!(
                "lookup {}: no addresses",
                self.host
            )))
        }))
    }

    /// Closes idle connections and forgets the endpoints (after a failed availability check:
    /// they lead to a server that no longer accepts, or no longer verifies).
    pub fn clear(&self) {
        self.endpoints.store(Arc::default());
    }

    /// The endpoint list, resolved again when older than [`RESOLVE_TTL`]; one caller resolves
    /// while the others go on with the old list.
    async fn endpoints(&self) -> Result<Arc<Endpoints>, SendError> {
        let current = self.endpoints.load_full();
        let fresh = current
            .resolved
            .is_some_and(|at| at.elapsed() < RESOLVE_TTL);
        if fresh {
            return Ok(current);
        }
        let _guard = if current.list.is_empty() {
            self.refreshing.lock().await
        } else {
            match self.refreshing.try_lock() {
                Ok(guard) => guard,
                Err(_) => return Ok(current),
            }
        };
        let current = self.endpoints.load_full();
        if current
            .resolved
            .is_some_and(|at| at.elapsed() < RESOLVE_TTL)
        {
            return Ok(current);
        }
        let addrs = self
            .resolver
            .resolve(&self.host, self.port)
            .await
            .map_err(SendError::Connect)?;
        let list = addrs
            .into_iter()
            .map(|addr| {
                current
                    .list
                    .iter()
                    .find(|e| e.addr == addr)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(Endpoint::new(addr)))
            })
            .collect();
        let next = Arc::new(Endpoints {
            resolved: Some(Instant::now()),
            list,
        });
        self.endpoints.store(next.clone());
        Ok(next)
    }

    async fn attempt(
        &self,
        endpoint: &Endpoint,
        mut req: Request<Body>,
        kind: RequestKind,
    ) -> Result<(Response<Incoming>, Conn), Attempt> {
        if kind == RequestKind::Watch && !endpoint.no_h2.load(Ordering::Relaxed) {
            return self.attempt_h2(endpoint, req).await;
        }
        // How long the connection sat idle; None for a new one.
        let (send, idle_for) = loop {
            match endpoint.checkout() {
                // Ready once its connection has finished the previous exchange.
                Some((mut send, since)) => {
                    if send.ready().await.is_ok() {
                        break (send, Some(since.elapsed()));
                    }
                }
                // Boxed: the rarely taken connect path (TCP, TLS and HTTP handshakes) would
                // otherwise make every request's future as large as its own.
                None => match Box::pin(self.connect(endpoint, &self.h1_tls)).await {
                    Ok(Connected::H1(send)) => break (send, None),
                    Ok(Connected::H2(_)) => {
                        let e =
                            ConnectError::Tls("the backend chose h2, which was not offered".into());
                        return Err(not_sent(req, e));
                    }
                    Err(e) => return Err(not_sent(req, e)),
                },
            }
        };
        // A server closes a connection for idleness only after it sat idle a while; the copy
        // to send again is taken only then (it costs a header map on the busiest path).
        let replay = idle_for
            .filter(|idle| *idle >= IDLE_BEFORE_REPLAY)
            .and_then(|_| Replay::of(&req, kind));
        self.shape(&mut req, Version::HTTP_11);
        answer_h1(send, req)
            .await
            .map_err(|mut e| match e.take_message() {
                // A pooled connection the backend closed meanwhile: try a new one.
                Some(req) => Attempt::NotSent {
                    req: Box::new(req),
                    error: SendError::Exchange(e.into_error()),
                    eject: idle_for.is_none(),
                },
                None => {
                    let error = e.into_error();
                    Attempt::Sent {
                        again: replay
                            .filter(|_| closed_before_answer(&error))
                            .map(|r| Box::new(r.request())),
                        error,
                    }
                }
            })
    }

    async fn attempt_h2(
        &self,
        endpoint: &Endpoint,
        mut req: Request<Body>,
    ) -> Result<(Response<Incoming>, Conn), Attempt> {
        let conn = match endpoint.h2_with_room() {
            Some(conn) => conn,
            None => {
                let _connecting = endpoint.h2_connecting.lock().await;
                match endpoint.h2_with_room() {
                    Some(conn) => conn,
                    None => match Box::pin(self.connect(endpoint, &self.h2_tls)).await {
                        Ok(Connected::H2(send)) => {
                            // The new connection's first stream is this request's.
                            let conn = H2Conn {
                                send,
                                streams: Arc::new(AtomicUsize::new(1)),
                            };
                            lock(&endpoint.h2).push(conn.clone());
                            conn
                        }
                        Ok(Connected::H1(send)) => {
                            endpoint.no_h2.store(true, Ordering::Relaxed);
                            self.shape(&mut req, Version::HTTP_11);
                            return answer_h1(send, req).await.map_err(|e| Attempt::Sent {
                                error: e.into_error(),
                                again: None,
                            });
                        }
                        Err(e) => return Err(not_sent(req, e)),
                    },
                }
            }
        };
        // The clone is dropped at once, not held while the answer comes: see `answer_h1` for
        // why a handle held here could keep a request unanswered. The pool's own handle goes
        // when the next watch prunes the closed connection.
        self.shape(&mut req, Version::HTTP_2);
        // A graceful GOAWAY can come at any moment of a connection's life.
        let replay = Replay::of(&req, RequestKind::Watch);
        let answer = conn.send.clone().try_send_request(req);
        match answer.await {
            Ok(res) => Ok((res, Conn::H2(conn.streams))),
            Err(mut e) => {
                conn.streams.fetch_sub(1, Ordering::Relaxed);
                match e.take_message() {
                    Some(req) => Err(Attempt::NotSent {
                        req: Box::new(req),
                        error: SendError::Exchange(e.into_error()),
                        eject: false,
                    }),
                    None => {
                        let error = e.into_error();
                        Err(Attempt::Sent {
                            again: replay
                                .filter(|_| refused_h2(&error))
                                .map(|r| Box::new(r.request())),
                            error,
                        })
                    }
                }
            }
        }
    }

    /// A new connection to `endpoint`, HTTP/2 when `tls` offers it and the backend takes it.
    async fn connect(
        &self,
        endpoint: &Endpoint,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Result<Connected, ConnectError> {
        let connected = self.open(endpoint.addr, tls).await?;
        endpoint.failures.store(0, Ordering::Relaxed);
        Ok(connected)
    }

    /// Sends `req` on a new connection of its own, HTTP/2 if the backend takes it, to the
    /// first address that accepts, resolving the name now: the gateway's own checks
    /// (availability, discovery) must prove that the service resolves, accepts and verifies
    /// now, not that a pooled connection still works. A failed TLS handshake is the answer;
    /// a refused TCP connection moves on to the next address.
    pub async fn probe(&self, mut req: Request<Body>) -> Result<Response<Incoming>, SendError> {
        let addrs = self
            .resolver
            .resolve(&self.host, self.port)
            .await
            .map_err(SendError::Connect)?;
        let mut last = None;
        for addr in addrs {
            let connected = match self.open(addr, &self.h2_tls).await {
                Ok(connected) => connected,
                Err(e @ ConnectError::Tls(_)) => return Err(SendError::Connect(e)),
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            // Each handle is dropped before the answer comes (see `answer_h1`); the connection
            // ends with the response.
            return match connected {
                Connected::H1(mut send) => {
                    self.shape(&mut req, Version::HTTP_11);
                    let answer = send.send_request(req);
                    drop(send);
                    answer.await
                }
                Connected::H2(mut send) => {
                    self.shape(&mut req, Version::HTTP_2);
                    let answer = send.send_request(req);
                    drop(send);
                    answer.await
                }
            }
            .map_err(SendError::Exchange);
        }
        Err(SendError::Connect(last.unwrap_or_else(|| {
            ConnectError::Resolve(format!("lookup {}: no addresses", self.host))
        })))
    }

    /// Shapes `req`'s target for a connection speaking `version`. HTTP/1.1: the origin form
    /// and `Host: <host>:<port>` (RFC 9112 §3.2: Go's `net/http` and nginx answer 400 without
    /// it). HTTP/2: the absolute form, which hyper sends as `:scheme` and `:authority`, and
    /// no `Host` (RFC 9113 §8.3.1).
    fn shape(&self, req: &mut Request<Body>, version: Version) {
        let path = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let mut target = http::uri::Parts::default();
        if version == Version::HTTP_2 {
            target.scheme = Some(Scheme::HTTPS);
            target.authority = Some(self.authority.clone());
            req.headers_mut().remove(header::HOST);
        } else {
            req.headers_mut()
                .insert(header::HOST, self.host_header.clone());
        }
        target.path_and_query = Some(path);
        // Cannot fail: scheme and authority come together, the path is an already parsed one.
        if let Ok(uri) = Uri::from_parts(target) {
            *req.uri_mut() = uri;
        }
        *req.version_mut() = version;
    }

    /// A new connection to `addr`, HTTP/2 when `tls` offers it and the backend takes it.
    async fn open(
        &self,
        addr: SocketAddr,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Result<Connected, ConnectError> {
        let stream = dial(addr, &self.server_name, tls, self.connect_timeout).await?;
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = TokioIo::new(stream);
        if h2 {
            let (send, conn) = http2::Builder::new(TokioExecutor::new())
                .timer(hyper_util::rt::TokioTimer::new())
                .keep_alive_interval(Duration::from_secs(30))
                .keep_alive_timeout(Duration::from_secs(20))
                .handshake(io)
                .await
                .map_err(|e| ConnectError::Tls(format!("HTTP/2 handshake with {addr}: {e}")))?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(%addr, error = %e, "backend HTTP/2 connection ended");
                }
            });
            Ok(Connected::H2(send))
        } else {
            let (send, conn) = http1::handshake(io)
                .await
                .map_err(|e| ConnectError::Tls(format!("HTTP/1.1 handshake with {addr}: {e}")))?;
            tokio::spawn(async move {
                if let Err(e) = conn.with_upgrades().await {
                    tracing::debug!(%addr, error = %e, "backend connection ended");
                }
            });
            Ok(Connected::H1(send))
        }
    }
}

enum Connected {
    H1(http1::SendRequest<Body>),
    H2(http2::SendRequest<Body>),
}

fn not_sent(req: Request<Body>, e: ConnectError) -> Attempt {
    Attempt::NotSent {
        req: Box::new(req),
        error: SendError::Connect(e),
        eject: true,
    }
}

/// The head of a request that may be sent again when its first try was not processed:
/// idempotent (RFC 9110 §9.2.2) and without a body, the requests Go's transport also sends
/// again. Never an upgrade.
struct Replay {
    method: Method,
    uri: Uri,
    headers: http::HeaderMap,
}

impl Replay {
    fn of(req: &Request<Body>, kind: RequestKind) -> Option<Self> {
        use http_body::Body as _;
        let idempotent = matches!(
            *req.method(),
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        );
        (kind != RequestKind::Upgrade && idempotent && req.body().is_end_stream()).then(|| Self {
            method: req.method().clone(),
            uri: req.uri().clone(),
            headers: req.headers().clone(),
        })
    }

    fn request(&self) -> Request<Body> {
        let mut req = Request::new(crate::body::empty());
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }
}

/// True when an HTTP/1.1 exchange failed because the connection closed (or was reset)
/// before any answer: the server closed it as idle just as the request went out.
fn closed_before_answer(e: &hyper::Error) -> bool {
    use std::io::ErrorKind;
    e.is_incomplete_message()
        || e.is_canceled()
        || std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some_and(|io| {
                matches!(
                    io.kind(),
                    ErrorKind::ConnectionReset
                        | ErrorKind::BrokenPipe
                        | ErrorKind::ConnectionAborted
                        | ErrorKind::UnexpectedEof
                )
            })
}

/// True when an HTTP/2 stream was not processed (RFC 9113 §8.7): refused, or above the last
/// stream of a graceful `GOAWAY`.
fn refused_h2(e: &hyper::Error) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<h2::Error>())
        .is_some_and(|h2| {
            h2.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR))
        })
}

/// Power of two choices: of two random endpoints not ejected (and not tried yet), the one with
/// fewer requests in flight. When every untried endpoint is ejected, any untried one.
fn pick(list: &[Arc<Endpoint>], tried: &[usize]) -> Option<usize> {
    let untried = |i: &usize| !tried.contains(i);
    let now = Instant::now();
    let mut healthy: Vec<usize> = (0..list.len())
        .filter(untried)
        .filter(|&i| !list[i].ejected(now))
        .collect();
    if healthy.is_empty() {
        healthy = (0..list.len()).filter(untried).collect();
    }
    match healthy.len() {
        0 => None,
        1 => Some(healthy[0]),
        n => {
            let a = fastrand::usize(..n);
            let b = (a + 1 + fastrand::usize(..n - 1)) % n;
            let load = |i: usize| list[healthy[i]].in_flight.load(Ordering::Relaxed);
            Some(healthy[if load(b) < load(a) { b } else { a }])
        }
    }
}

/// Idle lists per endpoint: one per core for the connection workers (one per core by
/// default) and one for everything else; a larger worker count shares lists, modulo.
fn idle_slots() -> usize {
    static SLOTS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SLOTS.get_or_init(|| crate::config::cpus() + 1)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Endpoint {
    fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            in_flight: AtomicUsize::new(0),
            failures: AtomicU32::new(0),
            ejected_until: Mutex::new(None),
            idle: (0..idle_slots()).map(|_| Mutex::default()).collect(),
            h2: Mutex::default(),
            h2_connecting: tokio::sync::Mutex::new(()),
            no_h2: AtomicBool::new(false),
        }
    }

    fn ejected(&self, now: Instant) -> bool {
        lock(&self.ejected_until).is_some_and(|until| now < until)
    }

    /// Skips this endpoint for a while: 1 s after the first failure, doubling up to 30 s.
    fn eject(&self) {
        let failures = self.failures.fetch_add(1, Ordering::Relaxed).min(5);
        let wait = (EJECT_BASE * 2u32.pow(failures)).min(EJECT_MAX);
        *lock(&self.ejected_until) = Some(Instant::now() + wait);
        tracing::debug!(addr = %self.addr, ?wait, "backend endpoint ejected");
    }

    /// The idle list of the calling thread's worker.
    fn idle_here(&self) -> MutexGuard<'_, IdleList> {
        lock(&self.idle[crate::server::workers::slot() % self.idle.len()])
    }

    /// The most recently used idle connection of this worker that is still open, and when it
    /// went idle.
    fn checkout(&self) -> Option<(http1::SendRequest<Body>, Instant)> {
        let mut idle = self.idle_here();
        while let Some((send, since)) = idle.pop() {
            if since.elapsed() < IDLE_TIMEOUT && !send.is_closed() {
                return Some((send, since));
            }
        }
        None
    }

    fn checkin(&self, send: http1::SendRequest<Body>) {
        let mut idle = self.idle_here();
        if idle.len() < MAX_IDLE && !send.is_closed() {
            idle.push((send, Instant::now()));
        }
    }

    /// An open HTTP/2 connection with a free stream, the stream taken.
    fn h2_with_room(&self) -> Option<H2Conn> {
        let mut conns = lock(&self.h2);
        conns.retain(|c| !c.send.is_closed());
        conns.iter().find_map(|c| {
            c.streams
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                    (n < STREAMS_PER_CONN).then_some(n + 1)
                })
                .ok()
                .map(|_| c.clone())
        })
    }
}

/// Sends `req` on `send`'s connection and waits for the answer, watching the connection too.
///
/// hyper hands a request to the connection's task over a channel. If that task ends between
/// the check that it is alive and the hand-off, the request stays in the channel unanswered
/// until the last handle to the connection is dropped, and a caller holding `send` (to pool it
/// afterwards) would wait forever. So once the connection reports closed, `send` is dropped:
/// a request left that way is then answered "connection closed" with the request given back
/// (it was never written, so it may be retried). The connection goes with the answer only
/// while it is still open.
async fn answer_h1(
    mut send: http1::SendRequest<Body>,
    req: Request<Body>,
) -> Result<(Response<Incoming>, Conn), hyper::client::conn::TrySendError<Request<Body>>> {
    let answer = send.try_send_request(req);
    tokio::pin!(answer);
    let closed = std::future::poll_fn(|cx| match send.poll_ready(cx) {
        Poll::Ready(Err(_)) => Poll::Ready(()),
        // Ready: the connection is alive and idle, so the answer is on its way.
        Poll::Ready(Ok(())) | Poll::Pending => Poll::Pending,
    });
    tokio::select! {
        biased;
        res = &mut answer => return res.map(|res| (res, Conn::H1(send))),
        () = closed => {}
    }
    drop(send);
    answer.await.map(|res| (res, Conn::None))
}

/// What a response holds on to.
enum Conn {
    None,
    /// Back to the idle list when the response ends.
    H1(http1::SendRequest<Body>),
    /// A stream on a shared connection, given back when the response ends.
    H2(Arc<AtomicUsize>),
}

/// A request in flight on an endpoint.
struct Lease {
    endpoint: Arc<Endpoint>,
    conn: Conn,
}

impl Lease {
    fn new(endpoint: Arc<Endpoint>) -> Self {
        endpoint.in_flight.fetch_add(1, Ordering::Relaxed);
        Self {
            endpoint,
            conn: Conn::None,
        }
    }

    fn with(mut self, conn: Conn, kind: RequestKind) -> Self {
        // After an upgrade the connection belongs to the client; never pool it.
        self.conn = match conn {
            Conn::H1(_) if kind == RequestKind::Upgrade => Conn::None,
            conn => conn,
        };
        self
    }

    /// The response ended cleanly: its connection may serve the next request.
    fn finish(mut self) {
        if let Conn::H1(send) = std::mem::replace(&mut self.conn, Conn::None) {
            self.endpoint.checkin(send);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.endpoint.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Conn::H2(streams) = &self.conn {
            streams.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A backend's response body, holding its connection until it ends.
pub struct PooledBody {
    inner: Incoming,
    lease: Option<Lease>,
}

impl PooledBody {
    fn release(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.finish();
        }
    }
}

impl http_body::Body for PooledBody {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        let frame = ready!(std::pin::Pin::new(&mut self.inner).poll_frame(cx));
        match &frame {
            None => self.release(),
            Some(Ok(_)) if self.inner.is_end_stream() => self.release(),
            // A broken exchange: its connection is dropped, never pooled.
            Some(Err(_)) => self.lease = None,
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(n: usize) -> Vec<Arc<Endpoint>> {
        (0..n)
            .map(|i| Arc::new(Endpoint::new(([127, 0, 0, 1], 1000 + i as u16).into())))
            .collect()
    }

    #[test]
    fn two_choices_take_the_endpoint_with_fewer_in_flight() {
        let list = endpoints(2);
        list[0].in_flight.store(5, Ordering::Relaxed);
        for _ in 0..100 {
            assert_eq!(pick(&list, &[]), Some(1));
        }
        list[1].in_flight.store(9, Ordering::Relaxed);
        assert_eq!(pick(&list, &[]), Some(0));
    }

    #[test]
    fn ejected_and_tried_endpoints_are_skipped_until_none_is_left() {
        let list = endpoints(3);
        list[0].eject();
        for _ in 0..100 {
            assert_ne!(pick(&list, &[]), Some(0));
            assert_eq!(pick(&list, &[1]), Some(2));
        }
        // Every untried endpoint ejected: try one anyway rather than fail unseen.
        list[2].eject();
        assert!(matches!(pick(&list, &[1]), Some(0 | 2)));
        assert_eq!(pick(&list, &[0, 1, 2]), None);
    }

    #[test]
    fn ejection_doubles_and_is_capped() {
        let e = Endpoint::new(([127, 0, 0, 1], 1).into());
        let until = |e: &Endpoint| {
            lock(&e.ejected_until)
                .map(|t| t.saturating_duration_since(Instant::now()))
                .unwrap_or_default()
        };
        e.eject();
        assert!(until(&e) <= EJECT_BASE);
        e.eject();
        assert!(until(&e) > EJECT_BASE && until(&e) <= 2 * EJECT_BASE);
        for _ in 0..10 {
            e.eject();
        }
        assert!(until(&e) > EJECT_MAX / 2 && until(&e) <= EJECT_MAX);
        assert!(e.ejected(Instant::now()));
    }
}
