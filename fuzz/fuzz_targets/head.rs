//! The request head checks the pipeline runs before anything else reads a request: the one
//! valid host (`gateway::host`), the path hygiene (`gateway::paths`), and the readers of header
//! values that come before authentication (`Accept` negotiation, the bearer token, the
//! front-proxy identity headers, impersonation). Input: a request head as text (see
//! `common::request`).
//!
//! Checked: nothing panics; a host that passes is one the request named and holds no byte that
//! could split `X-Forwarded-Host` or smuggle userinfo; a request with two `Host` headers, or an
//! HTTP/1.1 request with none, never passes; the path check agrees with an independent
//! reading of RFC 3986 (percent-decode each segment once, refuse empty, `.`/`..`, and any that
//! decodes to `/`, `\` or NUL).
#![no_main]

mod common;

use apigw_gateway::fuzzing::{check_path, host_of};
use http::{header, Version};

libfuzzer_sys::fuzz_target!(init: common::report_stack_overflows(), |data: &[u8]| {
    let Some(req) = common::request(data) else {
        return;
    };
    check_host(&req);
    let path = req.uri().path();
    let verdict = check_path(path);
    let expected = path_is_clean(path);
    assert_eq!(
        verdict.is_ok(),
        expected,
        "paths::check({path:?}) = {verdict:?}, but the segments say {expected}"
    );
    if let Err(status) = verdict {
        assert_eq!(status.code(), http::StatusCode::BAD_REQUEST);
    }

    let headers = req.headers();
    let _ = apigw_discovery::negotiate(headers, true);
    let _ = apigw_discovery::negotiate(headers, false);
    if let Some(token) = apigw_authn::bearer(headers) {
        assert!(!token.is_empty() && token.trim() == token);
    }
    let _ = apigw_authz::impersonation::requested(headers);
    let front_proxy = apigw_request::IdentityHeaders::new(
        &["X-Remote-User"],
        &["X-Remote-Group"],
        &["X-Remote-Extra-"],
    );
    if let Some(id) = front_proxy.identity(headers) {
        assert!(!id.user.is_empty() && id.user.trim() == id.user);
    }
});

fn check_host(req: &http::Request<()>) {
    let hosts: Vec<&[u8]> = req
        .headers()
        .get_all(header::HOST)
        .iter()
        .map(|h| h.as_bytes())
        .collect();
    match host_of(req) {
        Err(status) => assert_eq!(status.code(), http::StatusCode::BAD_REQUEST),
        Ok(host) => {
            assert!(hosts.len() <= 1, "two Host headers passed");
            assert!(
                !(hosts.is_empty() && req.version() == Version::HTTP_11),
                "an HTTP/1.1 request without Host passed"
            );
            let Some(host) = host else {
                return;
            };
            let host = host.as_bytes();
            assert!(!host.is_empty());
            assert!(
                host.iter()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+;=:[]".contains(b)),
                "host {host:?} has a byte outside RFC 3986's host and port"
            );
            let authority = req.uri().authority().map(|a| a.as_str().as_bytes());
            let named = authority == Some(host) || hosts.first() == Some(&host);
            assert!(named, "host {host:?} is not one the request named");
        }
    }
}

/// An independent reading of what `paths::check` must accept.
fn path_is_clean(path: &str) -> bool {
    if !path.starts_with('/') {
        return false;
    }
    if path == "/" {
        return true;
    }
    // One trailing slash is allowed; what is left after the leading one is segments.
    let rest = &path.strip_suffix('/').unwrap_or(path)[1..];
    rest.split('/').all(|segment| {
        let decoded = percent_decode_once(segment.as_bytes());
        !segment.is_empty()
            && !segment.contains('\\')
            && decoded != b"."
            && decoded != b".."
            && !decoded.iter().any(|b| matches!(b, b'/' | b'\\' | 0))
    })
}

fn percent_decode_once(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            if let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}
