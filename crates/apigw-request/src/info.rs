//! What the gateway knows of a request before it authenticates it, decided once per request
//! ([`RequestInfo`]) and read by everything after: the in-flight limit and the request timeout
//! (long-running requests are exempt from both, as with kube-apiserver's long-running check),
//! the access log, metrics and audit record, and the proxy (which connection to the backend a
//! request takes, whether it is spliced after a `101`, and the `X-Forwarded-*` it carries).
//! Deciding its kind in one place keeps them from disagreeing: a header that the proxy ignores
//! cannot make a request long-running. The APIService a request goes to may set its own timeout
//! and long-running subresources ([`Policy`]).

use crate::{Attributes, Policy};
use http::{header, HeaderValue, Request, Version};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A request's attributes, kind, client, host and deadline, computed once before
/// authentication.
#[derive(Debug)]
pub struct RequestInfo {
    /// The authorization attributes of its method and path (verb, group, resource, ...).
    /// Shared with APF's request dump.
    pub attrs: std::sync::Arc<Attributes>,
    pub kind: RequestKind,
    /// The client's address, appended to `X-Forwarded-For`.
    pub client: SocketAddr,
    /// The request's one validated host, sent to backends as `X-Forwarded-Host`.
    pub host: Option<HeaderValue>,
    pub start: Instant,
    /// Not long-running: when the response must be complete, as kube-apiserver's timeout
    /// filter bounds a request end to end from its start (none past the end of time).
    pub deadline: Option<Instant>,
}

impl RequestInfo {
    /// What `req`, whose path splits into `segments`, from `client` with the validated `host`,
    /// is; `timeout` bounds it unless it is long-running, or the `policy` of the APIService it
    /// goes to says otherwise.
    pub fn of<B>(
        req: &Request<B>,
        segments: &[&str],
        client: SocketAddr,
        host: Option<HeaderValue>,
        start: Instant,
        timeout: Duration,
        policy: Option<&Policy>,
    ) -> Self {
        let uri = req.uri();
        let attrs = Attributes::from_segments(req.method(), uri.path(), segments, uri.query());
        let kind = match RequestKind::of(req, &attrs) {
            RequestKind::Short if policy.is_some_and(|p| p.long_running(&attrs.subresource)) => {
                RequestKind::Stream
            }
            kind => kind,
        };
        let timeout = policy.and_then(|p| p.request_timeout).unwrap_or(timeout);
        let deadline = (!kind.long_running())
            .then(|| start.checked_add(timeout))
            .flatten();
        Self {
            attrs: std::sync::Arc::new(attrs),
            kind,
            client,
            host,
            start,
            deadline,
        }
    }
}

/// The kind of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// An ordinary request: counted by `--max-requests-inflight`, cut by `--request-timeout`;
    /// a keep-alive HTTP/1.1 connection to the backend of its own while it runs.
    Short,
    /// A watch (verb `watch`): long-running; a stream on a shared HTTP/2 connection to the
    /// backend (HTTP/1.1 when the backend has no h2).
    Watch,
    /// A real HTTP/1.1 upgrade (`Connection: upgrade` and `Upgrade`, for WebSocket or SPDY):
    /// long-running; HTTP/1.1 to the backend, and the connection is the client's after a `101`.
    Upgrade,
    /// exec, attach, portforward or proxy subresources, `follow=true` logs, and the subresources
    /// an APIService's policy names, without an upgrade: long-running; a connection to the
    /// backend of its own, as [`Self::Short`].
    Stream,
}

impl RequestKind {
    /// The kind of `req`, whose attributes are `attrs`.
    pub fn of<B>(req: &Request<B>, attrs: &Attributes) -> Self {
        if is_upgrade(req) {
            Self::Upgrade
        } else if attrs.verb == "watch" {
            Self::Watch
        } else if matches!(
            attrs.subresource.as_str(),
            "exec" | "attach" | "portforward" | "proxy"
        ) || (attrs.subresource == "log" && follows(req.uri().query()))
        {
            Self::Stream
        } else {
            Self::Short
        }
    }

    /// True for the kinds exempt from the in-flight limit and the request timeout.
    pub fn long_running(self) -> bool {
        self != Self::Short
    }
}

/// True for an HTTP/1.1 request with an `Upgrade` header that `Connection` names: the only
/// shape hyper (and the proxy) upgrade. An `Upgrade` header alone is an ordinary header.
fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.version() == Version::HTTP_11
        && req.headers().contains_key(header::UPGRADE)
        && req
            .headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// True when the query asks to follow a log (`follow` with a value Go's `ParseBool` reads as
/// true, as the kubelet parses it).
fn follows(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&').any(|kv| {
            matches!(
                kv,
                "follow=true"
                    | "follow=1"
                    | "follow=t"
                    | "follow=T"
                    | "follow=TRUE"
                    | "follow=True"
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn kind(method: Method, uri: &str, version: Version, headers: &[(&str, &str)]) -> RequestKind {
        let mut req = Request::builder().method(method).uri(uri).version(version);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(()).unwrap();
        let attrs = Attributes::from_request(req.method(), req.uri().path(), req.uri().query());
        RequestKind::of(&req, &attrs)
    }

    #[test]
    fn each_kind() {
        use RequestKind::*;
        let h1 = Version::HTTP_11;
        let things = "/apis/g/v1/namespaces/n/things";
        // (what, method, target, version, headers, kind)
        type Row<'a> = (
            &'a str,
            Method,
            &'a str,
            Version,
            &'a [(&'a str, &'a str)],
            RequestKind,
        );
        let cases: &[Row] = &[
            ("a list", Method::GET, things, h1, &[], Short),
            (
                "a watch by query",
                Method::GET,
                "/apis/g/v1/things?watch=1",
                h1,
                &[],
                Watch,
            ),
            (
                "a watch by path",
                Method::GET,
                "/apis/g/v1/watch/things",
                h1,
                &[],
                Watch,
            ),
            (
                "a create with watch=1 is no watch",
                Method::POST,
                "/apis/g/v1/things?watch=1",
                h1,
                &[],
                Short,
            ),
            (
                "exec",
                Method::POST,
                "/api/v1/namespaces/n/pods/p/exec",
                h1,
                &[],
                Stream,
            ),
            (
                "proxy",
                Method::GET,
                "/api/v1/namespaces/n/services/s/proxy",
                h1,
                &[],
                Stream,
            ),
            (
                "a followed log",
                Method::GET,
                "/api/v1/namespaces/n/pods/p/log?follow=true",
                h1,
                &[],
                Stream,
            ),
            (
                "a log",
                Method::GET,
                "/api/v1/namespaces/n/pods/p/log?follow=false",
                h1,
                &[],
                Short,
            ),
            (
                "a real upgrade",
                Method::GET,
                "/api/v1/namespaces/n/pods/p/exec",
                h1,
                &[
                    ("connection", "keep-alive, Upgrade"),
                    ("upgrade", "websocket"),
                ],
                Upgrade,
            ),
            (
                "Upgrade alone",
                Method::GET,
                things,
                h1,
                &[("upgrade", "foo")],
                Short,
            ),
            (
                "Connection: upgrade alone",
                Method::GET,
                things,
                h1,
                &[("connection", "upgrade")],
                Short,
            ),
            (
                "an upgrade on HTTP/1.0",
                Method::GET,
                things,
                Version::HTTP_10,
                &[("connection", "upgrade"), ("upgrade", "foo")],
                Short,
            ),
            (
                "a watch over WebSocket",
                Method::GET,
                "/apis/g/v1/things?watch=true",
                h1,
                &[("connection", "upgrade"), ("upgrade", "websocket")],
                Upgrade,
            ),
        ];
        for (what, method, uri, version, headers, want) in cases {
            assert_eq!(
                kind(method.clone(), uri, *version, headers),
                *want,
                "{what}"
            );
        }
        assert!(!Short.long_running());
        assert!(Watch.long_running() && Upgrade.long_running() && Stream.long_running());
    }
}
