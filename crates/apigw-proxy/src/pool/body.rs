//! The response body of a pooled exchange: it holds the request's [`Lease`] (its endpoint's
//! in-flight count and its connection) until it ends, then gives an HTTP/1.1 connection back to
//! the idle list; a body that fails drops its connection instead.

use super::endpoint::Lease;
use hyper::body::Incoming;
use std::task::{ready, Context, Poll};

/// A backend's response body, holding its connection until it ends.
pub struct PooledBody {
    inner: Incoming,
    lease: Option<Lease>,
}

impl PooledBody {
    pub(super) fn new(inner: Incoming, lease: Lease) -> Self {
        Self {
            inner,
            lease: Some(lease),
        }
    }

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
