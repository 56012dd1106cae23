//! The host a request names, checked before anything else reads the request (health,
//! authentication, routing): HTTP/1.1 needs exactly one valid `Host` (RFC 9112 §3.2, as Go's
//! `net/http` enforces), no request may carry two, and on HTTP/2 a `Host` must agree with
//! `:authority` (RFC 9113 §8.3.1). The one host that passes is what backends get as
//! `X-Forwarded-Host`: the request target's authority when it has one (HTTP/2's `:authority`,
//! an HTTP/1.1 absolute-form target, which RFC 9112 §3.2.3 says wins over `Host`), else `Host`.

use apigw_core::errors::Status;
use http::{header, HeaderValue, Request, Version};

/// The request's validated host (None: it names none, as an HTTP/1.0 request may), or the 400
/// to answer.
pub(crate) fn of<B>(req: &Request<B>) -> Result<Option<HeaderValue>, Status> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(Status::bad_request("too many Host headers"));
    }
    if host.is_none() && req.version() == Version::HTTP_11 {
        return Err(Status::bad_request("missing required Host header"));
    }
    if let Some(host) = host {
        if !valid(host.as_bytes()) {
            return Err(Status::bad_request("malformed Host header"));
        }
    }
    let authority = req.uri().authority().map(|a| a.as_str());
    if let Some(authority) = authority {
        if authority.is_empty() || !valid(authority.as_bytes()) {
            return Err(Status::bad_request("malformed request authority"));
        }
    }
    match (authority, host) {
        (Some(authority), Some(host))
            if req.version() == Version::HTTP_2
                && !host.as_bytes().eq_ignore_ascii_case(authority.as_bytes()) =>
        {
            Err(Status::bad_request(
                "the Host header differs from the :authority of the request",
            ))
        }
        (Some(authority), _) => Ok(HeaderValue::from_str(authority).ok()),
        (None, Some(host)) if !host.is_empty() => Ok(Some(host.clone())),
        (None, _) => Ok(None),
    }
}

/// True for `host[:port]` (a name, IPv4 address or bracketed IPv6 literal) or the empty value
/// RFC 9112 allows: RFC 3986's characters of a host and port, without userinfo (`@`, which
/// RFC 9110 §4.2.4 says to treat as an error) and without `,` (it would make
/// `X-Forwarded-Host`, a comma-separated list to many backends, name two hosts).
fn valid(host: &[u8]) -> bool {
    host.iter()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+;=:[]".contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(version: Version, uri: &str, hosts: &[&str]) -> Result<Option<String>, u16> {
        let mut req = Request::get(uri).version(version);
        for h in hosts {
            req = req.header(header::HOST, *h);
        }
        of(&req.body(()).unwrap())
            .map(|h| h.map(|v| v.to_str().unwrap().to_string()))
            .map_err(|s| s.code().as_u16())
    }

    #[test]
    fn one_valid_host() {
        const HTTP_10: Version = Version::HTTP_10;
        const HTTP_11: Version = Version::HTTP_11;
        const HTTP_2: Version = Version::HTTP_2;
        let some = |h: &str| Ok(Some(h.to_string()));
        // (what, version, request target, Host headers, the host or the error code)
        type Row<'a> = (
            &'a str,
            Version,
            &'a str,
            &'a [&'a str],
            Result<Option<String>, u16>,
        );
        let cases: &[Row] = &[
            (
                "HTTP/1.1, one Host",
                HTTP_11,
                "/apis",
                &["gw.example:8443"],
                some("gw.example:8443"),
            ),
            (
                "an IPv6 literal",
                HTTP_11,
                "/apis",
                &["[::1]:443"],
                some("[::1]:443"),
            ),
            ("HTTP/1.1 without Host", HTTP_11, "/apis", &[], Err(400)),
            ("two Hosts", HTTP_11, "/apis", &["a", "b"], Err(400)),
            (
                "the same Host twice",
                HTTP_11,
                "/apis",
                &["a", "a"],
                Err(400),
            ),
            ("a list in one Host", HTTP_11, "/apis", &["a, b"], Err(400)),
            (
                "a list without a space",
                HTTP_11,
                "/apis",
                &["a,b"],
                Err(400),
            ),
            ("userinfo", HTTP_11, "/apis", &["user@a"], Err(400)),
            ("an empty Host", HTTP_11, "/apis", &[""], Ok(None)),
            ("HTTP/1.0 without Host", HTTP_10, "/apis", &[], Ok(None)),
            (
                "HTTP/1.0 with two Hosts",
                HTTP_10,
                "/apis",
                &["a", "b"],
                Err(400),
            ),
            (
                "absolute form wins over Host",
                HTTP_11,
                "https://gw.example/apis",
                &["other"],
                some("gw.example"),
            ),
            (
                "HTTP/2, :authority alone",
                HTTP_2,
                "https://gw.example/apis",
                &[],
                some("gw.example"),
            ),
            (
                "HTTP/2, Host equal to :authority",
                HTTP_2,
                "https://gw.example/apis",
                &["GW.example"],
                some("gw.example"),
            ),
            (
                "HTTP/2, Host unlike :authority",
                HTTP_2,
                "https://gw.example/apis",
                &["evil.example"],
                Err(400),
            ),
            (
                "HTTP/2, two Hosts",
                HTTP_2,
                "https://gw.example/apis",
                &["gw.example", "gw.example"],
                Err(400),
            ),
            (
                "HTTP/2, userinfo in :authority",
                HTTP_2,
                "https://u@gw.example/apis",
                &[],
                Err(400),
            ),
        ];
        for (what, version, uri, hosts, want) in cases {
            assert_eq!(&host(*version, uri, hosts), want, "{what}");
        }
    }
}
