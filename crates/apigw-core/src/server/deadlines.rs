//! Deadlines of a connection's quiet states, and connections per client.
//!
//! A connection is *busy* while a request on it is being answered (from its head until its
//! response body is done or dropped: an open watch keeps it busy) and *quiet* otherwise. A quiet
//! connection has a deadline:
//!
//! - before it has started (no request yet; for HTTP/2 not yet the client preface and its
//!   SETTINGS frame): the head deadline from the connection's start, as Go's `ReadHeaderTimeout`
//!   runs from the start of a new connection, so nothing at all and part of a head end alike;
//! - an HTTP/1.1 connection whose next request head has begun: the head deadline from its first
//!   byte, as Go's server starts `ReadHeaderTimeout` only once the next request's bytes arrive;
//! - otherwise: the idle timeout from when it became quiet, as Go's `IdleTimeout` (an HTTP/2
//!   connection without open streams, an HTTP/1.1 connection between requests).
//!
//! [`Activity`] keeps the state in atomics that requests and reads update without waking
//! anyone; [`Watched`] is the connection's I/O, which notices the HTTP/2 preface and the first
//! bytes of each later HTTP/1.1 head; [`Activity::quiet_for`] looks at the state on a timer,
//! never more than the shorter deadline apart, and resolves when a deadline has passed. A
//! request therefore costs no wake-up and no timer of its own here.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// What a connection is doing, shared by its I/O, its requests and its watchdog.
pub(crate) struct Activity {
    /// When the connection was handed to HTTP (after the TLS handshake).
    base: Instant,
    /// Requests being answered.
    busy: AtomicUsize,
    /// Nanoseconds after `base` when the connection last became quiet.
    quiet_since: AtomicU64,
    /// 1 + nanoseconds after `base` when the first byte of the next HTTP/1.1 request head
    /// arrived on the quiet connection; 0 while none has.
    head_since: AtomicU64,
    /// A request has arrived, or (HTTP/2) the preface and SETTINGS.
    started: AtomicBool,
}

impl Activity {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            busy: AtomicUsize::new(0),
            quiet_since: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
            started: AtomicBool::new(false),
        })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
    }

    /// Since when no request on it has been answered; None while one is.
    pub(crate) fn quiet_since(&self) -> Option<Instant> {
        if self.busy.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(self.base + Duration::from_nanos(self.quiet_since.load(Ordering::Acquire)))
    }

    /// A request has arrived; the connection is busy until the returned guard drops.
    pub(crate) fn begin(self: &Arc<Self>) -> Busy {
        self.started.store(true, Ordering::Release);
        self.busy.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(0, Ordering::Release);
        Busy(self.clone())
    }

    /// The HTTP/2 preface and the client's SETTINGS arrived: quiet from now on counts as idle.
    fn start(&self) {
        self.quiet_since.store(self.now(), Ordering::Release);
        self.started.store(true, Ordering::Release);
    }

    /// Bytes arrived on a started HTTP/1.1 connection: on a quiet one they begin the next
    /// request head, whose deadline runs from the first of them.
    fn head_bytes(&self) {
        if self.busy.load(Ordering::Acquire) == 0
            && self.head_since.load(Ordering::Acquire) == 0
            && self.started.load(Ordering::Acquire)
        {
            self.head_since.store(self.now() + 1, Ordering::Release);
        }
    }

    /// When the quiet connection's deadline passes (`opening` for a head, `idle` after a
    /// started connection became quiet), counted from `from` if that is later; None while busy.
    fn deadline(
        &self,
        opening: Duration,
        idle: Duration,
        from: Option<Instant>,
    ) -> Option<Instant> {
        if self.busy.load(Ordering::Acquire) > 0 {
            return None;
        }
        let head = self.head_since.load(Ordering::Acquire);
        let (since, limit) = if head > 0 {
            (head - 1, opening)
        } else if self.started.load(Ordering::Acquire) {
            (self.quiet_since.load(Ordering::Acquire), idle)
        } else {
            (self.quiet_since.load(Ordering::Acquire), opening)
        };
        let quiet = self.base + Duration::from_nanos(since);
        Some(from.map_or(quiet, |from| quiet.max(from)) + limit)
    }

    /// Resolves once the connection has been quiet past its deadline (see [`Self::deadline`]).
    ///
    /// Nothing wakes it when the state changes. It looks again at least every
    /// `min(opening, idle)`: a deadline is never shorter than that, and any change since the
    /// last look (the connection became quiet, a head began) happened after it, so the next
    /// look comes before the new deadline and sleeps until exactly that deadline.
    pub(crate) async fn quiet_for(&self, opening: Duration, idle: Duration, from: Option<Instant>) {
        // A zero limit must not turn the wait for a busy connection into a spin.
        let step = opening.min(idle).max(Duration::from_millis(1));
        let sleep = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(sleep);
        loop {
            let now = Instant::now();
            let wake = match self.deadline(opening, idle, from) {
                Some(deadline) if now >= deadline => return,
                Some(deadline) => deadline.min(now + step),
                None => now + step,
            };
            sleep.as_mut().reset(wake);
            sleep.as_mut().await;
        }
    }
}

/// One request being answered; dropped when its response is done (or abandoned).
pub(crate) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let a = &self.0;
        // Stamp the time first, so the watchdog that sees 0 reads a fresh one.
        a.quiet_since.store(a.now(), Ordering::Release);
        a.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its connection busy until it is done or dropped.
pub(crate) struct Guarded<B> {
    inner: B,
    _busy: Busy,
}

impl<B> Guarded<B> {
    pub(crate) fn new(inner: B, busy: Busy) -> Self {
        Self { inner, _busy: busy }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for Guarded<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The HTTP/2 client preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Preface, a frame header, and a SETTINGS payload of at most the default frame size.
const SNIFF_MAX: usize = 24 + 9 + 16_384;

/// A connection's I/O that notices when an HTTP/2 client has sent its preface and SETTINGS,
/// and on HTTP/1.1 when the bytes of a request head arrive on a quiet connection.
pub(crate) struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
    /// The first bytes read, while they may still be an HTTP/2 preface.
    sniff: Option<Vec<u8>>,
    /// The first bytes were not an HTTP/2 preface.
    h1: bool,
}

impl<T> Watched<T> {
    pub(crate) fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self {
            inner,
            activity,
            sniff: Some(Vec::new()),
            h1: false,
        }
    }

    fn sniff(&mut self, new: &[u8]) {
        let Some(seen) = &mut self.sniff else { return };
        let room = SNIFF_MAX - seen.len();
        seen.extend_from_slice(&new[..new.len().min(room)]);
        let n = seen.len().min(PREFACE.len());
        if seen[..n] != PREFACE[..n] {
            // HTTP/1.1: its first request head starts it.
            self.sniff = None;
            self.h1 = true;
            return;
        }
        if seen.len() < 33 {
            return;
        }
        let len = usize::from(seen[24]) << 16 | usize::from(seen[25]) << 8 | usize::from(seen[26]);
        if seen[27] != 0x4 || 33 + len > SNIFF_MAX {
            // Not SETTINGS first: the HTTP/2 server ends the connection itself.
            self.sniff = None;
        } else if seen.len() >= 33 + len {
            self.activity.start();
            self.sniff = None;
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            if this.h1 {
                this.activity.head_bytes();
            } else if this.sniff.is_some() {
                let new = buf.filled()[before..].to_vec();
                this.sniff(&new);
            }
        } else if matches!(polled, Poll::Ready(Ok(()))) {
            // End of stream before anything told the protocol apart.
            this.sniff = None;
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Open connections per client address (`--max-connections-per-client`); 0 is unlimited.
#[derive(Debug, Default)]
pub(crate) struct PerClient {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection; released when dropped.
pub(crate) struct Admitted {
    counted: Option<(Arc<PerClient>, IpAddr)>,
}

impl PerClient {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            open: Mutex::default(),
        })
    }

    /// Admits a connection from `client`, or None when it already has the most open.
    pub(crate) fn admit(self: &Arc<Self>, client: IpAddr) -> Option<Admitted> {
        if self.max == 0 {
            return Some(Admitted { counted: None });
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(client).or_default();
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Admitted {
            counted: Some((self.clone(), client)),
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some((per_client, client)) = self.counted.take() {
            let mut open = per_client.open.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = open.get_mut(&client) {
                *n -= 1;
                if *n == 0 {
                    open.remove(&client);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_per_client_count_and_release() {
        let l = PerClient::new(1);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = l.admit(a).unwrap();
        assert!(l.admit(a).is_none());
        assert!(l.admit(b).is_some());
        drop(first);
        assert!(l.admit(a).is_some());
        let unlimited = PerClient::new(0);
        let all: Vec<_> = (0..100).filter_map(|_| unlimited.admit(a)).collect();
        assert_eq!(all.len(), 100);
    }

    /// Go's order of deadlines: the head deadline from the start until a request, the idle
    /// timeout once quiet after it, and the head deadline again from the first byte of the
    /// next head; bytes before the first request or during one change nothing.
    #[test]
    fn deadlines_follow_the_connection_state() {
        let (opening, idle) = (Duration::from_secs(10), Duration::from_secs(90));
        let a = Activity::new();
        let at = |a: &Activity| a.deadline(opening, idle, None);
        assert_eq!(at(&a), Some(a.base + opening), "not started");
        a.head_bytes();
        assert_eq!(
            at(&a),
            Some(a.base + opening),
            "the first head runs from the start"
        );
        let busy = a.begin();
        assert_eq!(at(&a), None, "busy");
        a.head_bytes();
        let quiet = Instant::now();
        drop(busy);
        let idle_at = at(&a).expect("quiet");
        assert!(idle_at >= quiet + idle && idle_at <= Instant::now() + idle);
        let head = Instant::now();
        a.head_bytes();
        let head_at = at(&a).expect("quiet");
        assert!(head_at >= head + opening && head_at <= Instant::now() + opening);
        a.head_bytes();
        assert_eq!(at(&a), Some(head_at), "from the head's first byte");
        let closing = Instant::now() + Duration::from_secs(500);
        assert_eq!(
            a.deadline(opening, idle, Some(closing)),
            Some(closing + opening),
            "never before `from`"
        );
        drop(a.begin());
        assert!(
            at(&a).expect("quiet") > head_at,
            "the head arrived: idle again"
        );
    }

    #[test]
    fn the_preface_and_settings_start_an_http2_connection() {
        let activity = Activity::new();
        let mut io = Watched::new((), activity.clone());
        let mut bytes = PREFACE.to_vec();
        bytes.extend_from_slice(&[0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100]);
        for b in &bytes[..bytes.len() - 1] {
            io.sniff(std::slice::from_ref(b));
        }
        assert!(
            !activity.started.load(Ordering::Acquire),
            "SETTINGS is incomplete"
        );
        io.sniff(&bytes[bytes.len() - 1..]);
        assert!(activity.started.load(Ordering::Acquire));
        assert!(io.sniff.is_none());

        let activity = Activity::new();
        let mut io = Watched::new((), activity.clone());
        io.sniff(b"GET / HTTP/1.1\r\n");
        assert!(io.sniff.is_none(), "HTTP/1.1 is not sniffed further");
        assert!(!activity.started.load(Ordering::Acquire));
    }
}
