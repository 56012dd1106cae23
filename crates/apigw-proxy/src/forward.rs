//! Phase 5 of the pipeline, the upstream request: one client request forwarded to its backend.
//! Hop-by-hop headers and the client's credentials go, the identity headers are set, the body
//! streams both ways (bounded by `--max-request-body-bytes` where that applies), a redirect is
//! refused, and an HTTP/1.1 upgrade is spliced after a `101`. Failures are [`ForwardError`]s,
//! which the pipeline answers as a `kind: Status`.

use super::pool::Retries;
use super::{remove_hop_by_hop, set_identity, Backend, Forwarded, Proxy};
use apigw_core::body::{self, Body, BoxError};
use apigw_core::errors::Status;
use apigw_request::Identity;
use apigw_request::{RequestInfo, RequestKind};
use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::Duration;

/// Why a forwarded request has no backend answer to pass on.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("the request body is larger than the limit of {0} bytes")]
    TooLarge(usize),
    /// The client's body broke mid-way (bad chunking, a reset): the client's fault.
    #[error("the request body could not be read: {0}")]
    ClientBody(String),
    #[error("error trying to reach service: {0}")]
    Unreachable(super::pool::SendError),
    #[error("the backend attempted to redirect this request, which is not permitted")]
    Redirected(Answered),
    #[error("the backend switched protocols without an upgrade request")]
    UnaskedUpgrade(Answered),
}

impl ForwardError {
    /// When the backend answered (with something the gateway refuses to pass on): its code and
    /// time to its response head.
    fn answered(&self) -> Option<Answered> {
        match self {
            Self::Redirected(a) | Self::UnaskedUpgrade(a) => Some(*a),
            _ => None,
        }
    }
}

impl From<ForwardError> for Status {
    fn from(e: ForwardError) -> Self {
        let message = e.to_string();
        let status = match &e {
            ForwardError::TooLarge(limit) => return Status::too_large(*limit),
            ForwardError::ClientBody(_) => Status::bad_request(message),
            ForwardError::Unreachable(_) => Status::service_unavailable(message),
            ForwardError::Redirected(_) | ForwardError::UnaskedUpgrade(_) => {
                Status::bad_gateway(message)
            }
        };
        status.with_source(e)
    }
}

/// The backend's answer: its code and time to its response head.
#[derive(Debug, Clone, Copy)]
pub struct Answered {
    status: StatusCode,
    elapsed: Duration,
}

impl Proxy {
    /// Forwards `req` as `identity` to `backend` (serving APIService `name`) and streams the
    /// answer back.
    pub async fn forward<B>(
        &self,
        backend: &Backend,
        req: Request<B>,
        identity: &Identity,
        info: &RequestInfo,
        name: &str,
    ) -> Result<Response<Body>, Status>
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        let filtered;
        let identity = if identity.groups.iter().any(|g| self.drop_groups.contains(g)) {
            let mut id = identity.clone();
            id.groups.retain(|g| !self.drop_groups.contains(g));
            filtered = id;
            &filtered
        } else {
            identity
        };
        // Boxed, so the futures of the gateway's handler (which await this one among many
        // other routes) stay small, and are cheap to move and to keep for long-running requests.
        let mut retries = Retries::default();
        let forwarded = Box::pin(backend.forward(req, identity, info, self, &mut retries)).await;
        self.metrics.retried(name, retries.unsent, retries.replayed);
        let answered = match &forwarded {
            Ok((_, answered)) => Some(*answered),
            Err(e) => e.answered(),
        };
        if let Some(answered) = answered {
            self.metrics
                .backend(name, answered.status, answered.elapsed.as_secs_f64());
        }
        match forwarded {
            Ok((res, _)) => Ok(res),
            Err(e) => {
                if let ForwardError::Unreachable(reason) = &e {
                    tracing::warn!(backend = %backend.key.host, error = %reason, "backend unreachable");
                    self.metrics
                        .errors
                        .with_label_values(&[name, "unreachable"])
                        .inc();
                }
                Err(e.into())
            }
        }
    }
}

impl Backend {
    async fn forward<B>(
        &self,
        mut req: Request<B>,
        identity: &Identity,
        info: &RequestInfo,
        proxy: &Proxy,
        retries: &mut Retries,
    ) -> Result<(Response<Body>, Answered), ForwardError>
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        let kind = info.kind;
        let upgrade = kind == RequestKind::Upgrade;
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
        let (mut parts, incoming) = req.into_parts();
        // The target goes on as the client sent it (HTTP/2 reads as the absolute form): the
        // pool keeps its path and query, byte for byte, and sets the form and `Host` or
        // `:authority` for the connection the request leaves on (`Pool::shape`).
        remove_hop_by_hop(&mut parts.headers, upgrade);
        // The front door answered any `100-continue` when the body was first read; the
        // backend gets the body without being asked again, as nginx forwards.
        parts.headers.remove(header::EXPECT);
        let token = self.impersonate_with.as_ref().map(|(_, t)| t.load());
        let fwd = Forwarded {
            identity,
            client_ip: info.client.ip(),
            original_host: info.host.clone(),
            impersonate_with: token.as_deref().map(|t| t.as_ref()),
        };
        set_identity(&mut parts.headers, &fwd, &proxy.identity_headers);
        // A client body that breaks mid-way (bad chunking, a reset) is the client's fault:
        // remember it, so the failed request answers 400 rather than blaming the backend.
        let body_failed: Arc<std::sync::OnceLock<String>> = Arc::default();
        let limit = proxy.max_body.filter(|_| {
            !matches!(kind, RequestKind::Upgrade | RequestKind::Watch)
                && parts.method != Method::GET
        });
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        // The outgoing framing comes from the body itself (hyper sets Content-Length from an
        // exact size), never from a header a client chose.
        parts.headers.remove(header::CONTENT_LENGTH);
        if let (Some(limit), Some(len)) = (limit, declared) {
            if len > limit as u64 {
                return Err(ForwardError::TooLarge(limit));
            }
        }
        let inner = match limit {
            Some(limit) => body::stream(http_body_util::Limited::new(incoming, limit)),
            None => body::stream(incoming),
        };
        let tracked = Tracked {
            inner,
            failed: body_failed.clone(),
        };
        let out = Request::from_parts(parts, body::stream(tracked));
        let sent = std::time::Instant::now();
        let mut res = match self.pool.send(out, kind, retries).await {
            Ok(res) => res,
            Err(e) => {
                return Err(match body_failed.get() {
                    Some(why) => match limit {
                        Some(limit) if why.contains("length limit exceeded") => {
                            ForwardError::TooLarge(limit)
                        }
                        _ => ForwardError::ClientBody(why.clone()),
                    },
                    None => ForwardError::Unreachable(e),
                });
            }
        };
        let answered = Answered {
            status: res.status(),
            elapsed: sent.elapsed(),
        };
        if res.status().is_redirection() && res.headers().contains_key(header::LOCATION) {
            return Err(ForwardError::Redirected(answered));
        }
        if res.status() == StatusCode::SWITCHING_PROTOCOLS {
            let Some(client_upgrade) = client_upgrade else {
                return Err(ForwardError::UnaskedUpgrade(answered));
            };
            let backend_upgrade = hyper::upgrade::on(&mut res);
            tokio::spawn(splice(
                client_upgrade,
                backend_upgrade,
                proxy.closing.clone(),
            ));
            let (parts, _) = res.into_parts();
            return Ok((Response::from_parts(parts, body::empty()), answered));
        }
        remove_hop_by_hop(res.headers_mut(), false);
        if kind == RequestKind::Watch {
            return Ok((res.map(|b| body::stream(WatchStream(b))), answered));
        }
        Ok((res.map(body::stream), answered))
    }
}

/// A watch's event stream from the backend. When the backend's side breaks (a replica killed,
/// a connection reset), the client's watch ends as a watch whose time ran out ends, cleanly,
/// and not with a reset: the client has whole events up to the break (the backend writes and
/// flushes one event at a time), and a reflector resumes from its last resourceVersion on
/// another replica either way; a clean end spares it the decoding error and the client-go
/// error log. Any other response keeps its break, so a cut list never looks complete.
struct WatchStream<B>(B);

impl<B> http_body::Body for WatchStream<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        match std::pin::Pin::new(&mut self.0).poll_frame(cx) {
            std::task::Poll::Ready(Some(Err(e))) => {
                tracing::info!(
                    error = %e,
                    "the backend's watch broke; ended for the client, who resumes from its last \
                     resourceVersion"
                );
                std::task::Poll::Ready(None)
            }
            polled => polled,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0.size_hint()
    }
}

/// A request body that records its first error.
struct Tracked {
    inner: Body,
    failed: Arc<std::sync::OnceLock<String>>,
}

impl http_body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = apigw_core::body::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if let std::task::Poll::Ready(Some(Err(e))) = &polled {
            let _ = self.failed.set(e.to_string());
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Copies bytes both ways between an upgraded client and backend until either side closes,
/// or the gateway's shutdown grace period ends.
async fn splice(
    client: hyper::upgrade::OnUpgrade,
    backend: hyper::upgrade::OnUpgrade,
    closing: tokio_util::sync::CancellationToken,
) {
    let (client, backend) = match tokio::try_join!(client, backend) {
        Ok(pair) => pair,
        Err(e) => {
            tracing::debug!(error = %e, "upgrade did not complete");
            return;
        }
    };
    let (mut client, mut backend) = (TokioIo::new(client), TokioIo::new(backend));
    tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut client, &mut backend) => {
            if let Err(e) = copied {
                tracing::debug!(error = %e, "upgraded stream ended with an error");
            }
        }
        () = closing.cancelled() => {
            use tokio::io::AsyncWriteExt;
            let _ = tokio::join!(client.shutdown(), backend.shutdown());
        }
    }
}
