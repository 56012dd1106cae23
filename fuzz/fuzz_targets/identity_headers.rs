//! Identity-header stripping: the request as it leaves for a backend (`proxy::remove_hop_by_hop`
//! then `proxy::set_identity`, in `Backend::forward`'s order), with a front-proxy configuration
//! (`authn::IdentityHeaders`), an identity and client headers all from the input.
//!
//! The property: no spelling of an identity header a client sends reaches the backend. Every
//! outgoing header that is `Authorization`, `Proxy-Authorization`, `Impersonate-*`,
//! `X-Remote-*`, or a configured front-proxy name or prefix (any case, `_` for `-`, surrounding
//! blanks) carries exactly the values the gateway sets for the identity itself: the same as when
//! the client sent no headers at all.
//!
//! Input, by lines: the configured user header names (comma-separated), group header names,
//! extra prefixes; the identity's user, groups (comma-separated), extra (`key=value` pairs
//! separated by `;`); `impersonate` to forward by impersonation; then the client's headers as
//! `Name: value` lines.
#![no_main]

mod common;

use apigw_proxy::{remove_hop_by_hop, set_identity, Forwarded};
use apigw_request::{Identity, IdentityHeaders};
use http::{HeaderMap, HeaderName, HeaderValue};

libfuzzer_sys::fuzz_target!(init: common::report_stack_overflows(), |data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let mut next = || lines.next().unwrap_or_default();
    let list = |s: &str| -> Vec<String> { s.split(',').map(str::to_string).collect() };
    let (users, groups, prefixes) = (list(next()), list(next()), list(next()));
    let policy = IdentityHeaders::new(&users, &groups, &prefixes);

    let mut identity = Identity::new(
        next(),
        list(next()).into_iter().filter(|g| !g.is_empty()).collect(),
    );
    for pair in next().split(';').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        identity
            .extra
            .entry(k.to_string())
            .or_default()
            .push(v.to_string());
    }
    if identity.groups.len() > 1 {
        identity.uid = identity.groups.last().cloned();
    }
    let token = HeaderValue::from_static("Bearer gateway-token");
    let impersonate_with = (next() == "impersonate").then_some(&token);

    let mut client = HeaderMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value.trim()),
        ) else {
            continue;
        };
        client.append(name, value);
    }

    let fwd = Forwarded {
        identity: &identity,
        client_ip: [192, 0, 2, 7].into(),
        original_host: Some(HeaderValue::from_static("gw.example.com")),
        impersonate_with,
    };
    let outgoing = forward(client, &fwd, &policy);
    let own = forward(HeaderMap::new(), &fwd, &policy);

    let configured = |l: &[String]| -> Vec<String> {
        l.iter()
            .map(|h| h.trim().to_ascii_lowercase().replace('_', "-"))
            .filter(|h| !h.is_empty())
            .collect()
    };
    let names = configured(&[users, groups].concat());
    let prefixes = configured(&prefixes);
    let is_identity = |name: &str| {
        let name = name.to_ascii_lowercase().replace('_', "-");
        name == "authorization"
            || name == "proxy-authorization"
            || name.starts_with("impersonate-")
            || name.starts_with("x-remote-")
            || names.iter().any(|n| *n == name)
            || prefixes.iter().any(|p| name.starts_with(p.as_str()))
    };
    for name in outgoing.keys().chain(own.keys()) {
        if !is_identity(name.as_str()) {
            continue;
        }
        let sent: Vec<&HeaderValue> = outgoing.get_all(name).iter().collect();
        let set: Vec<&HeaderValue> = own.get_all(name).iter().collect();
        assert_eq!(
            sent, set,
            "identity header {name} reaches the backend with values the gateway did not set"
        );
    }
});

/// The headers of a request as `Backend::forward` sends it on (not an upgrade).
fn forward(mut headers: HeaderMap, fwd: &Forwarded<'_>, policy: &IdentityHeaders) -> HeaderMap {
    remove_hop_by_hop(&mut headers, false);
    headers.remove(http::header::EXPECT);
    set_identity(&mut headers, fwd, policy);
    headers
}
