//! Sending a request once more when its first try got no answer: the copy of a replayable
//! request's head ([`Replay`]), and the failures that allow it (a connection closed or reset
//! before any answer, an HTTP/2 stream refused or left out of a `GOAWAY`).

use apigw_core::body::Body;
use apigw_request::RequestKind;
use http::{Method, Request, Uri};

/// The head of a request that may be sent again when its first try was not processed:
/// idempotent (RFC 9110 §9.2.2) and without a body, the requests Go's transport also sends
/// again. Never an upgrade.
pub(super) struct Replay {
    method: Method,
    uri: Uri,
    headers: http::HeaderMap,
}

impl Replay {
    pub(super) fn of(req: &Request<Body>, kind: RequestKind) -> Option<Self> {
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

    pub(super) fn request(&self) -> Request<Body> {
        let mut req = Request::new(apigw_core::body::empty());
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }
}

/// True when the exchange failed because the connection closed or was reset before any
/// answer: a server that closed it as idle just as the request went out, or one that died. On
/// HTTP/2 the cause is the connection's I/O error under the stream's.
pub(super) fn closed_before_answer(e: &hyper::Error) -> bool {
    use std::io::ErrorKind;
    let closed = |io: &std::io::Error| {
        matches!(
            io.kind(),
            ErrorKind::ConnectionReset
                | ErrorKind::BrokenPipe
                | ErrorKind::ConnectionAborted
                | ErrorKind::UnexpectedEof
        )
    };
    if e.is_incomplete_message() || e.is_canceled() {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return closed(io);
        }
        if let Some(io) = s.downcast_ref::<h2::Error>().and_then(h2::Error::get_io) {
            return closed(io);
        }
        source = s.source();
    }
    false
}

/// True when an HTTP/2 stream was not processed (RFC 9113 §8.7): refused, or above the last
/// stream of a graceful `GOAWAY`.
pub(super) fn refused_h2(e: &hyper::Error) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<h2::Error>())
        .is_some_and(|h2| {
            h2.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR))
        })
}
