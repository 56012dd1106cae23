//! The connections to one backend service: the [`Pool`] and its `send`, which picks an endpoint
//! (see `endpoint`), retries on another endpoint while nothing of the request was sent, sends
//! once more, to another endpoint where there is one, an idempotent request whose connection
//! ended before any answer or that the server did not act on (see `replay`), and shapes the request target
//! for the protocol of its connection (origin form and `Host` on HTTP/1.1, `:authority` on
//! HTTP/2); the resolution of the service name into endpoints, refreshed every few seconds; and
//! opening connections: HTTP/1.1 for ordinary requests and upgrades, multiplexed HTTP/2 for
//! watches, another one when a connection carries [`STREAMS_PER_CONN`] streams. The response
//! body holds its connection until it ends (see `body`).

mod body;
mod endpoint;
mod replay;

pub use body::PooledBody;

use super::connector::{dial, ConnectError, Resolver};
use apigw_core::body::Body;
use apigw_core::errors::chain;
use apigw_request::RequestKind;
use arc_swap::ArcSwap;
use endpoint::{lock, long_running, pick, Conn, Endpoint, H2Conn, Lease};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{header, HeaderValue, Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use replay::{closed_before_answer, refused_h2, Replay};
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// How long a resolved endpoint list is used before the name is resolved again.
const RESOLVE_TTL: Duration = Duration::from_secs(5);
/// Streams one HTTP/2 connection carries before the next watch opens another connection.
/// RFC 9113 recommends servers allow at least 100; Go servers allow 250.
pub const STREAMS_PER_CONN: usize = 100;
/// A request on a connection idle at least this long may be sent again if the server closes
/// the connection without answering (no server closes idle connections sooner), even to the
/// same endpoint.
const IDLE_BEFORE_REPLAY: Duration = Duration::from_millis(100);
/// Endpoints tried for one request, at most.
const MAX_ATTEMPTS: usize = 3;

/// The tries a request took beyond its first, for `apigw_backend_retries_total`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Retries {
    /// Tries on another endpoint or connection after nothing of the request was sent.
    pub unsent: u32,
    /// Idempotent requests sent again after the first try got no answer.
    pub replayed: u32,
}

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

/// Why a pool could not be made for a backend: its host and port do not form a TLS server
/// name, an authority or a `Host` header.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("{host}: {source}")]
    ServerName {
        host: String,
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("{authority}: {source}")]
    Authority {
        authority: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("{authority}: {source}")]
    HostHeader {
        authority: String,
        #[source]
        source: http::header::InvalidHeaderValue,
    },
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
    /// Ordinary requests over HTTP/2 too when the endpoint offers it (`--backend-http2-requests`).
    http2_requests: bool,
    endpoints: ArcSwap<Endpoints>,
    refreshing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Endpoints {
    resolved: Option<Instant>,
    list: Vec<Arc<Endpoint>>,
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
    /// more when it is replayable (idempotent and without a body, see [`Replay`]) and no
    /// answer came: its connection closed or was reset first (a server closing an idle
    /// connection, or one that died: RFC 9110 §9.2.2 lets a client repeat an idempotent
    /// request then), or an HTTP/2 stream the server refused or left out of a `GOAWAY`.
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
        http2_requests: bool,
    ) -> Result<Self, PoolError> {
        let server_name =
            ServerName::try_from(host.clone()).map_err(|source| PoolError::ServerName {
                host: host.clone(),
                source,
            })?;
        let authority = format!("{host}:{port}");
        let authority =
            Authority::try_from(authority.as_str()).map_err(|source| PoolError::Authority {
                authority: authority.clone(),
                source,
            })?;
        let host_header =
            HeaderValue::from_str(authority.as_str()).map_err(|source| PoolError::HostHeader {
                authority: authority.to_string(),
                source,
            })?;
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
            http2_requests,
            endpoints: ArcSwap::default(),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// Sends `req` to one endpoint, trying others while nothing was sent. The response body
    /// keeps its connection (and the endpoint's in-flight count) until it ends or is dropped.
    /// `kind` picks the connection: an HTTP/2 stream for a watch, HTTP/1.1 for everything else
    /// (given to the client after a `101` for an upgrade). `retries` counts the further tries.
    pub async fn send(
        &self,
        mut req: Request<Body>,
        kind: RequestKind,
        retries: &mut Retries,
    ) -> Result<Response<PooledBody>, SendError> {
        let endpoints = self.endpoints().await?;
        let mut tried: Vec<usize> = Vec::new();
        let mut last = None;
        // What the next try is, once there is an endpoint for it.
        let mut next_replays = false;
        for _ in 0..MAX_ATTEMPTS {
            let Some(i) = pick(&endpoints.list, &tried, long_running(kind)) else {
                break;
            };
            match (&last, next_replays) {
                (None, _) => {}
                (Some(_), true) => retries.replayed += 1,
                (Some(_), false) => retries.unsent += 1,
            }
            let endpoint = &endpoints.list[i];
            let lease = Lease::new(endpoint.clone(), kind);
            let spare = endpoints.list.len() > tried.len() + 1;
            match self.attempt(endpoint, req, kind, spare).await {
                Ok((res, conn)) => {
                    let lease = lease.with(conn, kind);
                    return Ok(res.map(|inner| PooledBody::new(inner, lease)));
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
                    next_replays = false;
                }
                Err(Attempt::Sent {
                    error,
                    again: Some(again),
                }) => {
                    tracing::debug!(addr = %endpoint.addr, error = %chain(&error),
                        "no answer to an idempotent request; sending it again");
                    // Elsewhere when there is another endpoint: this one closed on it.
                    if spare {
                        tried.push(i);
                    }
                    req = *again;
                    last = Some(SendError::Exchange(error));
                    next_replays = true;
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

    /// One try on `endpoint`; `spare` when another endpoint could take the request next.
    async fn attempt(
        &self,
        endpoint: &Endpoint,
        mut req: Request<Body>,
        kind: RequestKind,
        spare: bool,
    ) -> Result<(Response<Incoming>, Conn), Attempt> {
        let h2 = match kind {
            RequestKind::Watch => !endpoint.no_h2.load(Ordering::Relaxed),
            // An upgrade needs HTTP/1.1 (RFC 8441's extended CONNECT is not spoken here).
            RequestKind::Upgrade => false,
            RequestKind::Short | RequestKind::Stream => {
                endpoint.h2_only.load(Ordering::Relaxed)
                    || (self.http2_requests && !endpoint.no_h2.load(Ordering::Relaxed))
            }
        };
        if h2 {
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
                    // A server that agreed on no protocol may speak HTTP/2 alone: Go lets an
                    // HTTP/1.1-only offer through to its h2-only servers, then closes the
                    // connection unanswered. Ask again with h2 offered; a server without ALPN
                    // answers that in HTTP/1.1 and is known as such from then on.
                    Ok(Connected::H1 { silent: true, .. })
                        if kind != RequestKind::Upgrade
                            && !endpoint.no_h2.load(Ordering::Relaxed) =>
                    {
                        let answer = self.attempt_h2(endpoint, req).await;
                        if matches!(answer, Ok((_, Conn::H2(_)))) {
                            endpoint.h2_only.store(true, Ordering::Relaxed);
                        }
                        return answer;
                    }
                    Ok(Connected::H1 { send, .. }) => break (send, None),
                    Ok(Connected::H2(_)) => {
                        let e =
                            ConnectError::Tls("the backend chose h2, which was not offered".into());
                        return Err(not_sent(req, e));
                    }
                    // A backend that speaks only HTTP/2 (as Go's transport would, go on in it).
                    Err(ConnectError::NoCommonProtocol(_)) if kind != RequestKind::Upgrade => {
                        endpoint.h2_only.store(true, Ordering::Relaxed);
                        tracing::debug!(addr = %endpoint.addr, "the backend refused HTTP/1.1; using HTTP/2");
                        return self.attempt_h2(endpoint, req).await;
                    }
                    Err(e) => return Err(not_sent(req, e)),
                },
            }
        };
        // The copy to send again costs a header map (about 3 % of a proxied GET's instructions),
        // so it is taken only when a replay has somewhere to go: another endpoint (this one may
        // be dying), or this one after it closed a connection that sat idle.
        let idle = idle_for.is_some_and(|idle| idle >= IDLE_BEFORE_REPLAY);
        let replay = if spare || idle {
            Replay::of(&req, kind)
        } else {
            None
        };
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
                        Ok(Connected::H1 { send, .. }) => {
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
                                .filter(|_| refused_h2(&error) || closed_before_answer(&error))
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
                Connected::H1 { mut send, .. } => {
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
        let alpn = stream.get_ref().1.alpn_protocol();
        let (h2, silent) = (alpn == Some(b"h2"), alpn.is_none());
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
            Ok(Connected::H1 { send, silent })
        }
    }
}

enum Connected {
    H1 {
        send: http1::SendRequest<Body>,
        /// The TLS handshake agreed on no application protocol.
        silent: bool,
    },
    H2(http2::SendRequest<Body>),
}

fn not_sent(req: Request<Body>, e: ConnectError) -> Attempt {
    Attempt::NotSent {
        req: Box::new(req),
        error: SendError::Connect(e),
        eject: true,
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
