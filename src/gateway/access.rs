//! One access-log line and the request metrics per request, written when the response body
//! ends (so a watch is logged with its real duration and bytes): user, verb, path, code, bytes,
//! duration and APIService. Never a header value, token or body.

use crate::audit::Auditor;
use crate::authn::Identity;
use crate::authz::Attributes;
use crate::body::{Body, BoxError};
use crate::metrics::Metrics;
use bytes::Bytes;
use http::StatusCode;
use http_body::{Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// What is known of a request when its response head is ready.
pub struct Record {
    pub metrics: Arc<Metrics>,
    /// With an audit log only: what the audit event needs besides the rest.
    pub audit: Option<Audit>,
    pub remote: std::net::SocketAddr,
    /// The identity the request acted as, once authenticated.
    pub identity: Option<Identity>,
    /// The authenticated user, when `identity` is an impersonated one.
    pub real: Option<Identity>,
    pub attrs: Attributes,
    /// The APIService for the access line; computed only when the access log is enabled.
    pub apiservice: Option<String>,
    pub status: StatusCode,
    /// Long-running kinds are counted apart and end with the shutdown grace period.
    pub kind: crate::request_kind::RequestKind,
    pub start: Instant,
    /// For long-running requests: cancelled when the shutdown grace period is over.
    pub closing: Option<CancellationToken>,
    /// Released when the response ends.
    pub _permit: Option<super::limits::Permit>,
}

/// The audit log and what only it records of a request.
pub struct Audit {
    pub auditor: Arc<Auditor>,
    pub uri: String,
    pub user_agent: Option<String>,
    pub received: std::time::SystemTime,
}

impl Record {
    /// Counts the request and its time to the response head; the line is logged when `body` ends.
    pub fn wrap(mut self, body: Body) -> Body {
        let m = &self.metrics;
        let a = &self.attrs;
        let labels = [a.verb.as_str(), &a.group, &a.version, &a.resource];
        m.requests
            .with_label_values(&[
                labels[0],
                labels[1],
                labels[2],
                labels[3],
                self.status.as_str(),
            ])
            .inc();
        m.latency
            .with_label_values(&labels)
            .observe(self.start.elapsed().as_secs_f64());
        m.in_flight(self.kind.long_running()).inc();
        let closing = self
            .closing
            .take()
            .map(|token| Box::pin(token.cancelled_owned()));
        http_body_util::BodyExt::boxed(Logged {
            inner: body,
            bytes: 0,
            closing,
            record: self,
        })
    }
}

struct Logged {
    inner: Body,
    bytes: u64,
    /// For long-running responses: resolves when the shutdown grace period is over.
    closing: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    record: Record,
}

impl http_body::Body for Logged {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(closing) = self.closing.as_mut() {
            if closing.as_mut().poll(cx).is_ready() {
                // The end of a chunked body: the client sees a clean end of the watch.
                return Poll::Ready(None);
            }
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                self.bytes += data.len() as u64;
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let r = &self.record;
        r.metrics.in_flight(r.kind.long_running()).dec();
        tracing::info!(
            target: "apigw::access",
            remote = %r.remote,
            user = r.identity.as_ref().map_or("", |i| i.user.as_str()),
            verb = %r.attrs.verb,
            path = %r.attrs.path,
            code = r.status.as_u16(),
            bytes = self.bytes,
            duration_ms = r.start.elapsed().as_secs_f64() * 1000.0,
            apiservice = r.apiservice.as_deref().unwrap_or(""),
        );
        if let Some(audit) = &r.audit {
            audit.auditor.record(&crate::audit::Request {
                attrs: &r.attrs,
                uri: &audit.uri,
                identity: r.identity.as_ref(),
                real: r.real.as_ref(),
                source: r.remote.ip(),
                user_agent: audit.user_agent.as_deref(),
                code: r.status.as_u16(),
                received: audit.received,
            });
        }
    }
}
