//! Early answers: a response complete while its client is still uploading the request body (a
//! backend's 413 before it read the body, the gateway's own 401, 403, 413 or 429) must reach
//! the client. Dropping the unread upload loses it: over HTTP/1.1 hyper closes the connection,
//! and closing a socket with unread bytes sends a TCP reset, which fails the client's write
//! ("Broken pipe") and discards the response it had not read yet; over HTTP/2 h2 resets the
//! stream with `NO_ERROR` right after the response's last frame, which is correct, but curl
//! 7.88 (Debian 12's), still uploading, then fails ("Stream error in the HTTP/2 framing
//! layer") instead of showing the answer.
//!
//! So, as Go's net/http reads an unread body of up to 256 KiB and nginx lingers on close, the
//! rest of the upload is read and discarded for at most [`LINGER_TIME`] and [`LINGER_BYTES`]:
//! every request's body is a [`RequestBody`], which, dropped before its end, hands the rest
//! to a task that drains it. Over HTTP/1.1 the response also says `Connection: close` unless
//! the whole upload is at most [`KEEP_ALIVE_BYTES`] (`Upload::answered`), so a client that
//! reads while it writes (curl) stops uploading; a client that writes everything before it
//! reads (Python's `http.client`) finds its upload read, within the bounds. Over HTTP/2 the
//! stream ends when the client finishes or stops uploading, or at the bounds with h2's
//! `RST_STREAM(NO_ERROR)` after the complete response (RFC 9113 §8.1). A client that asked
//! for `100 Continue` and was never sent one has not uploaded, and is not waited for.

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

/// How long the rest of an upload is read after its early answer: long enough for a client to
/// read the answer (Go's server waits 500 ms before its reset), short enough that a refused
/// client holds its connection briefly.
pub const LINGER_TIME: Duration = Duration::from_secs(2);
/// How much of the rest of an upload is read after its early answer, at most.
pub const LINGER_BYTES: u64 = 64 << 20;
/// An HTTP/1.1 upload of at most this many bytes, unread when answered, is read to its end and
/// the connection kept: Go's `maxPostHandlerReadBytes`.
pub const KEEP_ALIVE_BYTES: u64 = 256 << 10;

/// A request's body as handlers see it: hyper's, drained when dropped before its end.
pub struct RequestBody {
    /// None once handed to the drain.
    inner: Option<Incoming>,
    /// Set when the body has ended (or failed); shared with [`Upload`]. None for a body that
    /// was empty from the start.
    done: Option<Arc<AtomicBool>>,
    /// The client waits for `100 Continue`, which hyper sends when the body is first read.
    awaits_continue: bool,
}

/// What the connection needs to know of a request's upload when its answer is ready.
pub(crate) struct Upload {
    version: Version,
    done: Option<Arc<AtomicBool>>,
    /// The whole upload is known to be at most [`KEEP_ALIVE_BYTES`].
    small: bool,
}

/// Wraps `req`'s body in a [`RequestBody`]; the [`Upload`] tells its answer how to end.
pub(crate) fn wrap(req: Request<Incoming>) -> (Request<RequestBody>, Upload) {
    let (parts, inner) = req.into_parts();
    let done = (!inner.is_end_stream()).then(Arc::default);
    let upload = Upload {
        version: parts.version,
        done: done.clone(),
        small: inner
            .size_hint()
            .exact()
            .is_some_and(|n| n <= KEEP_ALIVE_BYTES),
    };
    let awaits_continue = parts
        .headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let body = RequestBody {
        inner: Some(inner),
        done,
        awaits_continue,
    };
    (Request::from_parts(parts, body), upload)
}

impl Upload {
    /// Over HTTP/1.1, an answer that leaves more than [`KEEP_ALIVE_BYTES`] of its upload unread
    /// closes the connection, and says so: the client stops uploading, and the rest of what it
    /// sent is drained before the close.
    pub(crate) fn answered<B>(&self, res: &mut Response<B>) {
        let unread = self
            .done
            .as_ref()
            .is_some_and(|d| !d.load(Ordering::Acquire));
        if unread
            && !self.small
            && self.version == Version::HTTP_11
            && res.status() != http::StatusCode::SWITCHING_PROTOCOLS
        {
            res.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
}

impl RequestBody {
    fn finished(&self) {
        if let Some(done) = &self.done {
            done.store(true, Ordering::Release);
        }
    }

    fn is_done(&self) -> bool {
        self.done.as_ref().is_none_or(|d| d.load(Ordering::Acquire))
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        // Read once: hyper has sent `100 Continue`, and the client may upload.
        this.awaits_continue = false;
        let frame = ready!(Pin::new(&mut *inner).poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) || inner.is_end_stream() {
            this.finished();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        if self.is_done() || self.awaits_continue {
            return;
        }
        let (Some(inner), Ok(runtime)) = (self.inner.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        runtime.spawn(drain(inner));
    }
}

/// Reads and discards the rest of `body`, within [`LINGER_TIME`] and [`LINGER_BYTES`].
async fn drain(mut body: Incoming) {
    let mut read: u64 = 0;
    let reading = async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                read += data.len() as u64;
                if read >= LINGER_BYTES {
                    return false;
                }
            }
        }
        true
    };
    let ended = tokio::time::timeout(LINGER_TIME, reading).await;
    tracing::debug!(
        read,
        ended = ended.unwrap_or(false),
        "drained the upload of an early answer"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_http1_answer_that_leaves_a_large_upload_unread_closes() {
        let res = |upload: &Upload| {
            let mut res = Response::new(());
            upload.answered(&mut res);
            res.headers().get(header::CONNECTION).cloned()
        };
        let unread = || Some(Arc::new(AtomicBool::new(false)));
        let close = Some(HeaderValue::from_static("close"));
        let upload = |version, done, small| Upload {
            version,
            done,
            small,
        };
        assert_eq!(res(&upload(Version::HTTP_11, unread(), false)), close);
        assert_eq!(
            res(&upload(Version::HTTP_11, unread(), true)),
            None,
            "small"
        );
        assert_eq!(res(&upload(Version::HTTP_11, None, false)), None, "no body");
        let read = Some(Arc::new(AtomicBool::new(true)));
        assert_eq!(res(&upload(Version::HTTP_11, read, false)), None, "read");
        assert_eq!(res(&upload(Version::HTTP_2, unread(), false)), None, "h2");
    }
}
