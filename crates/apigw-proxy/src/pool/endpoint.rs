//! The endpoints of one backend and the choice among them: power of two choices, on requests
//! in flight for an ordinary request and on open streams for a watch or an upgrade (a stream
//! counts as in flight only until its answer's head: a replica holding long watches is no
//! busier for ordinary requests, and watches still spread evenly); passive ejection of an
//! endpoint whose connect or handshake failed (1 s, doubling up to 30 s); each endpoint's idle
//! HTTP/1.1 connections (one list per connection worker) and shared HTTP/2 connections; and the
//! [`Lease`] a request in flight holds on its endpoint and connection.

use super::STREAMS_PER_CONN;
use apigw_core::body::Body;
use apigw_request::RequestKind;
use hyper::client::conn::{http1, http2};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// An idle HTTP/1.1 connection older than this is closed rather than reused.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle HTTP/1.1 connections kept per endpoint.
const MAX_IDLE: usize = 64;
/// An endpoint whose connect failed is skipped for this long, doubling per further failure.
const EJECT_BASE: Duration = Duration::from_secs(1);
const EJECT_MAX: Duration = Duration::from_secs(30);

/// One address of the backend and its connections.
pub(super) struct Endpoint {
    pub(super) addr: SocketAddr,
    /// Requests waiting for or reading their answer; a watch or an upgrade only until its head.
    pub(super) in_flight: AtomicUsize,
    /// Watches and upgrades open, from their start to their end.
    pub(super) streams: AtomicUsize,
    pub(super) failures: AtomicU32,
    ejected_until: Mutex<Option<Instant>>,
    /// Idle HTTP/1.1 connections, one list per connection worker (see [`idle_slots`]): a
    /// connection's task runs on the worker that opened it, so only that worker reuses it.
    idle: Box<[Mutex<IdleList>]>,
    pub(super) h2: Mutex<Vec<H2Conn>>,
    pub(super) h2_connecting: tokio::sync::Mutex<()>,
    /// The endpoint answered an `h2` offer with HTTP/1.1.
    pub(super) no_h2: AtomicBool,
    /// The endpoint refused an HTTP/1.1-only offer: every request but an upgrade goes to it
    /// over HTTP/2.
    pub(super) h2_only: AtomicBool,
}

/// Idle HTTP/1.1 connections with the time each went idle, most recent last.
type IdleList = Vec<(http1::SendRequest<Body>, Instant)>;

#[derive(Clone)]
pub(super) struct H2Conn {
    pub(super) send: http2::SendRequest<Body>,
    pub(super) streams: Arc<AtomicUsize>,
}

/// Power of two choices: of two random endpoints not ejected (and not tried yet), the one with
/// fewer requests in flight, or for a watch or an upgrade (`long`), fewer open streams. When
/// every untried endpoint is ejected, any untried one.
pub(super) fn pick(list: &[Arc<Endpoint>], tried: &[usize], long: bool) -> Option<usize> {
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
            let load = |i: usize| {
                let e = &list[healthy[i]];
                if long { &e.streams } else { &e.in_flight }.load(Ordering::Relaxed)
            };
            Some(healthy[if load(b) < load(a) { b } else { a }])
        }
    }
}

/// Idle lists per endpoint: one per core for the connection workers (one per core by
/// default) and one for everything else; a larger worker count shares lists, modulo.
fn idle_slots() -> usize {
    static SLOTS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SLOTS.get_or_init(|| apigw_core::server::cpus() + 1)
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Endpoint {
    pub(super) fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            in_flight: AtomicUsize::new(0),
            streams: AtomicUsize::new(0),
            failures: AtomicU32::new(0),
            ejected_until: Mutex::new(None),
            idle: (0..idle_slots()).map(|_| Mutex::default()).collect(),
            h2: Mutex::default(),
            h2_connecting: tokio::sync::Mutex::new(()),
            no_h2: AtomicBool::new(false),
            h2_only: AtomicBool::new(false),
        }
    }

    fn ejected(&self, now: Instant) -> bool {
        lock(&self.ejected_until).is_some_and(|until| now < until)
    }

    /// Skips this endpoint for a while: 1 s after the first failure, doubling up to 30 s.
    pub(super) fn eject(&self) {
        let failures = self.failures.fetch_add(1, Ordering::Relaxed).min(5);
        let wait = (EJECT_BASE * 2u32.pow(failures)).min(EJECT_MAX);
        *lock(&self.ejected_until) = Some(Instant::now() + wait);
        tracing::debug!(addr = %self.addr, ?wait, "backend endpoint ejected");
    }

    /// The idle list of the calling thread's worker.
    fn idle_here(&self) -> MutexGuard<'_, IdleList> {
        lock(&self.idle[apigw_core::server::workers::slot() % self.idle.len()])
    }

    /// The most recently used idle connection of this worker that is still open, and when it
    /// went idle.
    pub(super) fn checkout(&self) -> Option<(http1::SendRequest<Body>, Instant)> {
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
    pub(super) fn h2_with_room(&self) -> Option<H2Conn> {
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

/// What a response holds on to.
pub(super) enum Conn {
    None,
    /// Back to the idle list when the response ends.
    H1(http1::SendRequest<Body>),
    /// A stream on a shared connection, given back when the response ends.
    H2(Arc<AtomicUsize>),
}

/// A request in flight on an endpoint.
pub(super) struct Lease {
    endpoint: Arc<Endpoint>,
    conn: Conn,
    /// The request is counted in the endpoint's `in_flight`.
    counted: bool,
    /// A watch or an upgrade, counted in the endpoint's `streams`.
    long: bool,
}

/// Whether requests of `kind` stream for long: watches and upgrades.
pub(super) fn long_running(kind: RequestKind) -> bool {
    matches!(kind, RequestKind::Watch | RequestKind::Upgrade)
}

impl Lease {
    pub(super) fn new(endpoint: Arc<Endpoint>, kind: RequestKind) -> Self {
        let long = long_running(kind);
        endpoint.in_flight.fetch_add(1, Ordering::Relaxed);
        if long {
            endpoint.streams.fetch_add(1, Ordering::Relaxed);
        }
        Self {
            endpoint,
            conn: Conn::None,
            counted: true,
            long,
        }
    }

    /// The answer's head came on `conn`. A watch or an upgrade stops counting as in flight
    /// here: it may stream for an hour at almost no cost to the backend, and counted it would
    /// steer ordinary requests away from every replica that holds one.
    pub(super) fn with(mut self, conn: Conn, kind: RequestKind) -> Self {
        // After an upgrade the connection belongs to the client; never pool it.
        self.conn = match conn {
            Conn::H1(_) if kind == RequestKind::Upgrade => Conn::None,
            conn => conn,
        };
        if self.long {
            self.endpoint.in_flight.fetch_sub(1, Ordering::Relaxed);
            self.counted = false;
        }
        self
    }

    /// The response ended cleanly: its connection may serve the next request.
    pub(super) fn finish(mut self) {
        if let Conn::H1(send) = std::mem::replace(&mut self.conn, Conn::None) {
            self.endpoint.checkin(send);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.counted {
            self.endpoint.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
        if self.long {
            self.endpoint.streams.fetch_sub(1, Ordering::Relaxed);
        }
        if let Conn::H2(streams) = &self.conn {
            streams.fetch_sub(1, Ordering::AcqRel);
        }
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
        list[1].streams.store(7, Ordering::Relaxed);
        for _ in 0..100 {
            assert_eq!(pick(&list, &[], false), Some(1));
            assert_eq!(
                pick(&list, &[], true),
                Some(0),
                "a watch goes by open streams"
            );
        }
        list[1].in_flight.store(9, Ordering::Relaxed);
        assert_eq!(pick(&list, &[], false), Some(0));
    }

    #[test]
    fn a_watch_counts_in_flight_only_until_its_answer_comes() {
        let list = endpoints(1);
        let count = || list[0].in_flight.load(Ordering::Relaxed);
        let streams = || list[0].streams.load(Ordering::Relaxed);
        let watch = Lease::new(list[0].clone(), RequestKind::Watch);
        let list_request = Lease::new(list[0].clone(), RequestKind::Short);
        assert_eq!((count(), streams()), (2, 1), "both wait for their answers");
        let watch = watch.with(Conn::None, RequestKind::Watch);
        let list_request = list_request.with(Conn::None, RequestKind::Short);
        assert_eq!(
            count(),
            1,
            "the streaming watch no longer counts as in flight"
        );
        assert_eq!(streams(), 1, "but as a stream");
        drop(list_request);
        assert_eq!(count(), 0);
        drop(watch);
        assert_eq!(
            (count(), streams()),
            (0, 0),
            "and its end does not count twice"
        );
    }

    #[test]
    fn ejected_and_tried_endpoints_are_skipped_until_none_is_left() {
        let list = endpoints(3);
        list[0].eject();
        for _ in 0..100 {
            assert_ne!(pick(&list, &[], false), Some(0));
            assert_eq!(pick(&list, &[1], false), Some(2));
        }
        // Every untried endpoint ejected: try one anyway rather than fail unseen.
        list[2].eject();
        assert!(matches!(pick(&list, &[1], false), Some(0 | 2)));
        assert_eq!(pick(&list, &[0, 1, 2], false), None);
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
