//! One access-log line, audit event and the request metrics per request admitted past the
//! limits, written when the request ends, however it ends: when the response body ends (so a
//! watch is logged with its real duration and bytes), when it is cut at the request timeout, or
//! when the client goes away, before the response head as well as after it. The line says
//! which (`outcome=`): user, verb, path, code, bytes, duration, APIService, outcome. Never a
//! header value, token or body.
//!
//! The response body of a request that is not long-running is cut at the request's deadline
//! (`--request-timeout` from its start), as kube-apiserver's timeout filter bounds a request end
//! to end: [`apigw_core::server::cut`] drops its connection (HTTP/1.1) or stream (HTTP/2) even when
//! a client that does not read has stalled the writes, and with the body goes its in-flight
//! slot.

use crate::audit::{Auditor, Outcome};
use crate::metrics::Metrics;
use apigw_core::body::{Body, BoxError};
use apigw_core::digits::{decimal, dotted};
use apigw_flowcontrol::Ticket;
use apigw_request::Identity;
use apigw_request::RequestInfo;
use bytes::Bytes;
use http::StatusCode;
use http_body::{Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// What is known of a request, filled in as it goes; logged and audited when dropped.
pub struct Record {
    pub metrics: Arc<Metrics>,
    /// With an audit log only: what the audit event needs besides the rest.
    pub audit: Option<Audit>,
    /// The request as the gateway saw it before authentication.
    pub info: RequestInfo,
    /// The identity the request acted as, once authenticated.
    pub identity: Option<Arc<Identity>>,
    /// The authenticated user, when `identity` is an impersonated one.
    pub real: Option<Arc<Identity>>,
    /// The `verb` label of the request metrics ([`crate::metrics::verb`]).
    pub metrics_verb: &'static str,
    /// The request's group version is one the gateway serves: its path may name the metric
    /// labels ([`crate::metrics::RequestLabels::new`]).
    pub served: bool,
    /// The APIService for the access line; computed only when the access log is enabled.
    pub apiservice: Option<String>,
    /// The response's status once its head is ready; None while there is none (a record
    /// dropped so is a request whose client went away first).
    pub status: Option<StatusCode>,
    /// Set when known before the end (a 504 of the request timeout); else decided at the end.
    pub outcome: Option<Outcome>,
    /// Response body bytes handed to the connection.
    pub bytes: u64,
    /// For long-running requests: cancelled when the shutdown grace period is over.
    pub closing: Option<CancellationToken>,
    /// Released when the request ends.
    pub _permit: Option<crate::limits::Permit>,
    /// Its API Priority and Fairness seat: released when the request ends (a watch's once
    /// it is established).
    pub flow: Option<Ticket>,
}

/// The audit log and what only it records of a request.
pub struct Audit {
    pub auditor: Arc<Auditor>,
    pub uri: String,
    pub user_agent: Option<String>,
    pub received: std::time::SystemTime,
}

impl Record {
    /// Counts the request and its time to the response head (status `status`); the line is
    /// logged when `body` ends or is dropped.
    pub fn wrap(mut self, status: StatusCode, body: Body) -> Body {
        self.status = Some(status);
        self.count(Some(self.info.start.elapsed().as_secs_f64()));
        self.metrics.in_flight(self.info.kind.long_running()).inc();
        let closing = self
            .closing
            .take()
            .map(|token| Box::pin(token.cancelled_owned()));
        // Cut at the deadline even while nothing polls the body; outside the server's
        // connections (nothing to cut), the body itself fails at its first poll past it. Not
        // the 504 of a request already past its deadline.
        let deadline = self.info.deadline.filter(|_| self.outcome.is_none());
        let armed = deadline
            .and_then(|at| apigw_core::server::cut::arm(tokio::time::Instant::from_std(at)));
        let fallback = if armed.is_none() { deadline } else { None };
        http_body_util::BodyExt::boxed(Logged {
            inner: body,
            ended: false,
            closing,
            _armed: armed,
            fallback,
            record: self,
        })
    }

    /// Counts the request with its code ([`Self::code`]), and its time to the response head
    /// when it had one.
    fn count(&self, elapsed: Option<f64>) {
        let code = self.code();
        // An anonymous request the gateway refused is anyone's: counted as unauthenticated.
        let anonymous = self
            .identity
            .as_ref()
            .is_some_and(|i| i.user == apigw_request::ANONYMOUS_USER);
        let bound = crate::metrics::Bound {
            served: self.served,
            authenticated: self.identity.is_some() && !(anonymous && matches!(code, 401 | 403)),
        };
        let labels =
            crate::metrics::RequestLabels::new(self.metrics_verb, &self.info.attrs, bound, code);
        self.metrics.request(&labels, code, elapsed);
    }

    /// The code for the line and event: the response's, or 499 (nginx's "client closed
    /// request") when there was no response head.
    fn code(&self) -> u16 {
        self.status.map_or(499, |s| s.as_u16())
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let outcome = *self.outcome.get_or_insert(Outcome::ClientGone);
        match self.status {
            Some(_) => self.metrics.in_flight(self.info.kind.long_running()).dec(),
            // Never counted at a response head: count it now.
            None => self.count(None),
        }
        let code = self.code();
        // One clock read for the line and the seat the request gives back.
        let logged = tracing::enabled!(target: "apigw::access", tracing::Level::INFO);
        let seated = self.flow.as_ref().is_some_and(Ticket::seated);
        let ended = (logged || seated).then(Instant::now);
        if let (Some(flow), Some(at)) = (self.flow.as_mut(), ended) {
            flow.release_at(at);
        }
        tracing::info!(
            target: "apigw::access",
            remote = %Remote(self.info.client),
            user = self.identity.as_ref().map_or("", |i| i.user.as_str()),
            verb = %Plain(&self.info.attrs.verb),
            path = %Plain(&self.info.attrs.path),
            code,
            bytes = self.bytes,
            duration_ms = duration_ms(
                ended
                    .unwrap_or_else(Instant::now)
                    .saturating_duration_since(self.info.start)
            ),
            apiservice = self.apiservice.as_deref().unwrap_or(""),
            outcome = %outcome,
        );
        if let Some(audit) = &self.audit {
            audit.auditor.record(&crate::audit::Request {
                attrs: &self.info.attrs,
                uri: &audit.uri,
                identity: self.identity.as_deref(),
                real: self.real.as_deref(),
                source: self.info.client.ip(),
                user_agent: audit.user_agent.as_deref(),
                code,
                outcome,
                received: audit.received,
            });
        }
    }
}

/// A string as `%` prints it, in one `write_str` (without `str`'s check for padding).
struct Plain<'a>(&'a str);

impl std::fmt::Display for Plain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// The client's address as `SocketAddr` displays it; an IPv4 one written in one piece rather
/// than a formatting call per octet.
struct Remote(std::net::SocketAddr);

impl std::fmt::Display for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let std::net::SocketAddr::V4(v4) = self.0 else {
            return self.0.fmt(f);
        };
        // "255.255.255.255:65535"
        let mut buf = [0u8; 21];
        let mut at = dotted(&mut buf, *v4.ip());
        buf[at] = b':';
        at += 1;
        at += decimal(&mut buf[at..], v4.port());
        f.write_str(std::str::from_utf8(&buf[..at]).map_err(|_| std::fmt::Error)?)
    }
}

/// Milliseconds to the microsecond, as the access line prints them: `2.666`, never the float
/// noise of `2.6655849999999996`. A whole number of microseconds over 1000 is the double
/// nearest the decimal, which prints as that decimal.
fn duration_ms(elapsed: std::time::Duration) -> f64 {
    // Exact to the microsecond up to 2^43 milliseconds (278 years). From a u64, not the u128
    // of `as_micros`, whose conversion is a call.
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX) as f64 / 1000.0
}

struct Logged {
    inner: Body,
    /// The inner body ended: everything was handed to the connection.
    ended: bool,
    /// For long-running responses: resolves when the shutdown grace period is over.
    closing: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    /// The cut at the deadline, disarmed when the body is dropped.
    _armed: Option<apigw_core::server::cut::Armed>,
    /// The deadline when nothing can cut: checked at each poll.
    fallback: Option<Instant>,
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
                self.record.outcome = Some(Outcome::Shutdown);
                return Poll::Ready(None);
            }
        }
        if self.fallback.is_some_and(|at| Instant::now() >= at) {
            self.record.outcome = Some(Outcome::Timeout);
            return Poll::Ready(Some(Err("request timeout: response cut".into())));
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.len() as u64;
                    self.record.bytes += n;
                }
            }
            Poll::Ready(Some(Err(_))) => {
                self.record.outcome.get_or_insert(Outcome::BackendError);
            }
            Poll::Ready(None) => self.ended = true,
            Poll::Pending => {}
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
        // hyper stops polling once the body says it has ended, so that counts as the end too.
        let ended = self.ended || http_body::Body::is_end_stream(&self.inner);
        let r = &mut self.record;
        if r.outcome.is_none() {
            r.outcome = Some(if ended {
                Outcome::Completed
            } else if r.info.deadline.is_some_and(|at| Instant::now() >= at) {
                Outcome::Timeout
            } else {
                Outcome::ClientGone
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{duration_ms, Plain, Remote};
    use std::time::Duration;

    proptest::proptest! {
        #[test]
        fn remotes_print_as_socket_addrs_do(addr: std::net::SocketAddr) {
            proptest::prop_assert_eq!(Remote(addr).to_string(), addr.to_string());
        }
    }

    proptest::proptest! {
        #[test]
        /// The text and JSON formats both print a `%` field's value with `{:?}`.
        fn plain_strings_print_as_strs_do(s: String) {
            let (ours, theirs) = (tracing::field::display(Plain(&s)), tracing::field::display(&s));
            proptest::prop_assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
        }
    }

    #[test]
    fn remote_edges() {
        for addr in [
            "0.0.0.0:0",
            "255.255.255.255:65535",
            "10.0.9.100:8443",
            "[::1]:443",
        ] {
            let addr: std::net::SocketAddr = addr.parse().unwrap();
            assert_eq!(Remote(addr).to_string(), addr.to_string());
        }
    }

    proptest::proptest! {
        #[test]
        /// Up to 95 years: past 2^43 milliseconds (278 years) doubles are more than 1 us apart.
        fn durations_print_to_the_microsecond(nanos in 0u64..=3_000_000_000_000_000_000) {
            let d = Duration::from_nanos(nanos);
            let text = duration_ms(d).to_string();
            let decimals = text.split_once('.').map_or(0, |(_, f)| f.len());
            proptest::prop_assert!(decimals <= 3, "{:?} -> {}", d, text);
            let micros: u128 = text.replace('.', "").parse::<u128>().unwrap()
                * 10u128.pow(3 - decimals as u32);
            proptest::prop_assert_eq!(micros, d.as_micros());
        }
    }

    #[test]
    fn the_issues_example() {
        assert_eq!(
            duration_ms(Duration::from_nanos(2_665_584)).to_string(),
            "2.665"
        );
        assert_eq!(
            duration_ms(Duration::from_micros(2_666)).to_string(),
            "2.666"
        );
    }
}
