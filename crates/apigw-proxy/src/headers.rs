//! Identity headers towards backends: strip everything a client could use to speak for
//! someone else (credentials, impersonation, any `X-Remote-*`, and every header name and prefix
//! configured for front-proxy authentication: the [`IdentityHeaders`] policy authentication
//! reads with), then set the gateway's own
//! `X-Remote-User`/`-Uid`/`-Group`/`-Extra-*` and the `X-Forwarded-*` trio. Hop-by-hop
//! headers are dropped as any proxy must (RFC 9110 §7.6.1), except an upgrade's own.

use apigw_request::{Identity, IdentityHeaders, CREDENTIAL_ID};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use std::net::IpAddr;

// Header names are constants, so the hot path never parses a name string.
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Removes hop-by-hop headers, including those named by `Connection`. With `upgrade`, keeps
/// `Connection: Upgrade` and `Upgrade` so the backend sees the upgrade request.
pub fn remove_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    // Most messages carry none of these. One pass comparing names (standard names compare as
    // tags) spares the ten hashed lookups below on every request and response.
    let any = |n: &HeaderName| *n == header::UPGRADE || HOP_BY_HOP.contains(n);
    if !upgrade && !headers.keys().any(any) {
        return;
    }
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        if !(upgrade && name == header::UPGRADE) {
            headers.remove(&name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    if upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    } else {
        headers.remove(header::UPGRADE);
    }
}

/// The request as it leaves for the backend.
pub struct Forwarded<'a> {
    pub identity: &'a Identity,
    pub client_ip: IpAddr,
    pub original_host: Option<HeaderValue>,
    /// Impersonation instead of `X-Remote-*`: this `Authorization` value (the gateway's own
    /// bearer token) with `Impersonate-*` headers naming the user.
    pub impersonate_with: Option<&'a HeaderValue>,
}

/// The user, uid and group headers and the extra-header prefix of one scheme, and the header
/// of the extra almost every identity carries ([`CREDENTIAL_ID`]), named once rather than
/// escaped and parsed for every request.
struct Names {
    user: HeaderName,
    uid: HeaderName,
    group: HeaderName,
    extra: &'static str,
    credential_id: HeaderName,
}

/// The requestheader scheme.
static REQUEST_HEADER: Names = Names {
    user: HeaderName::from_static("x-remote-user"),
    uid: HeaderName::from_static("x-remote-uid"),
    group: HeaderName::from_static("x-remote-group"),
    extra: "x-remote-extra-",
    credential_id: HeaderName::from_static(
        "x-remote-extra-authentication.kubernetes.io%2fcredential-id",
    ),
};
/// The names the proxy sends an identity under to backends (`x-remote-user`, `x-remote-uid`,
/// `x-remote-group`, `x-remote-extra-`): what a backend's requestheader configuration must
/// list for it to read them.
pub fn sent_names() -> [(&'static str, &'static str); 4] {
    [
        ("username", REQUEST_HEADER.user.as_str()),
        ("uid", REQUEST_HEADER.uid.as_str()),
        ("group", REQUEST_HEADER.group.as_str()),
        ("extra prefix", REQUEST_HEADER.extra),
    ]
}

/// The same for impersonation.
const IMPERSONATE: Names = Names {
    user: HeaderName::from_static("impersonate-user"),
    uid: HeaderName::from_static("impersonate-uid"),
    group: HeaderName::from_static("impersonate-group"),
    extra: "impersonate-extra-",
    credential_id: HeaderName::from_static(
        "impersonate-extra-authentication.kubernetes.io%2fcredential-id",
    ),
};

/// Strips every header `policy` names an identity header, then sets the identity and
/// forwarding headers.
pub fn set_identity(headers: &mut HeaderMap, fwd: &Forwarded<'_>, policy: &IdentityHeaders) {
    let stripped: Vec<HeaderName> = headers
        .keys()
        .filter(|n| policy.is_identity(n.as_str()))
        .cloned()
        .collect();
    for name in &stripped {
        headers.remove(name);
    }
    if !stripped.is_empty() {
        let names: Vec<&str> = stripped.iter().map(HeaderName::as_str).collect();
        tracing::debug!(headers = ?names, user = %fwd.identity.user, "stripped client identity headers");
    }
    headers.remove(header::HOST);

    let id = fwd.identity;
    let names = match fwd.impersonate_with {
        Some(token) => {
            headers.insert(header::AUTHORIZATION, token.clone());
            &IMPERSONATE
        }
        None => &REQUEST_HEADER,
    };
    append(headers, &names.user, &id.user);
    if let Some(value) = &id.uid {
        append(headers, &names.uid, value);
    }
    for value in &id.groups {
        append(headers, &names.group, value);
    }
    for (key, values) in &id.extra {
        let name = if key == CREDENTIAL_ID {
            names.credential_id.clone()
        } else {
            let name = format!("{}{}", names.extra, escape_extra_key(key));
            match HeaderName::from_bytes(name.as_bytes()) {
                Ok(name) => name,
                Err(_) => {
                    dropped(&name);
                    continue;
                }
            }
        };
        for value in values {
            append(headers, &name, value);
        }
    }

    let prior = headers
        .get(&X_FORWARDED_FOR)
        .and_then(|v| v.to_str().ok())
        .filter(|prior| !prior.trim().is_empty());
    let mut xff = String::with_capacity(prior.map_or(0, |p| p.len() + 2) + 39);
    if let Some(prior) = prior {
        xff.push_str(prior);
        xff.push_str(", ");
    }
    push_ip(&mut xff, fwd.client_ip);
    // Replaces every prior value; from the String without copying it again.
    match HeaderValue::try_from(xff) {
        Ok(value) => {
            headers.insert(X_FORWARDED_FOR, value);
        }
        Err(_) => {
            headers.remove(&X_FORWARDED_FOR);
            dropped(X_FORWARDED_FOR.as_str());
        }
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("https"));
    match &fwd.original_host {
        Some(host) => {
            headers.insert(X_FORWARDED_HOST, host.clone());
        }
        None => {
            headers.remove(&X_FORWARDED_HOST);
        }
    }
}

/// Appends `ip` as its `Display` writes it; IPv4 without the formatting machinery, which costs
/// more than the rest of the header.
fn push_ip(out: &mut String, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            let mut buf = [0u8; 15];
            let len = apigw_core::digits::dotted(&mut buf, v4);
            out.extend(buf[..len].iter().copied().map(char::from));
        }
        IpAddr::V6(v6) => {
            use std::fmt::Write as _;
            let _ = write!(out, "{v6}");
        }
    }
}

fn append(headers: &mut HeaderMap, name: &HeaderName, value: &str) {
    // Values that are not valid header text (control characters) cannot be sent and are
    // dropped rather than mangled.
    match HeaderValue::from_str(value) {
        Ok(value) => {
            headers.append(name, value);
        }
        Err(_) => dropped(name.as_str()),
    }
}

/// Logs a header the gateway meant to send and could not.
fn dropped(header: &str) {
    tracing::warn!(
        header,
        "identity value not representable as a header; dropped"
    );
}

/// The bytes of an extra key that are escaped in a header name, as client-go escapes them:
/// everything but HTTP token characters, and `%` itself.
const EXTRA_KEY_ESCAPES: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'!')
    .remove(b'#')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'*')
    .remove(b'+')
    .remove(b'-')
    .remove(b'.')
    .remove(b'^')
    .remove(b'_')
    .remove(b'`')
    .remove(b'|')
    .remove(b'~');

/// An extra key percent-encoded for use in a header name (`%XX`, as client-go writes it; the
/// authenticator decodes it with the same crate).
pub fn escape_extra_key(key: &str) -> percent_encoding::PercentEncode<'_> {
    percent_encoding::utf8_percent_encode(key, EXTRA_KEY_ESCAPES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_credential_id_header_is_the_escaped_key_under_each_scheme() {
        for names in [&REQUEST_HEADER, &IMPERSONATE] {
            let escaped = format!("{}{}", names.extra, escape_extra_key(CREDENTIAL_ID));
            let parsed = HeaderName::from_bytes(escaped.as_bytes()).expect("a header name");
            assert_eq!(names.credential_id, parsed);
        }
    }

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn strips_then_sets_identity() {
        let mut h = map(&[
            ("Authorization", "Bearer secret"),
            ("X-Remote-User", "mallory"),
            ("x-REMOTE-group", "system:masters"),
            ("X-Remote-Extra-Scopes", "all"),
            ("Impersonate-User", "root"),
            ("Impersonate-Extra-Foo", "bar"),
            ("X-Forwarded-For", "10.0.0.9"),
            ("Accept", "application/json"),
            ("Host", "gw.example.com"),
        ]);
        let mut id = Identity::new("alice", vec!["a".into(), "b".into()]);
        id.uid = Some("u-1".into());
        id.extra
            .insert("example.com/team".into(), vec!["x".into(), "y".into()]);
        let fwd = Forwarded {
            identity: &id,
            client_ip: "192.0.2.7".parse().unwrap(),
            original_host: Some(HeaderValue::from_static("gw.example.com")),
            impersonate_with: None,
        };
        set_identity(&mut h, &fwd, &IdentityHeaders::default());
        let all =
            |n: &str| -> Vec<&str> { h.get_all(n).iter().map(|v| v.to_str().unwrap()).collect() };
        assert_eq!(all("x-remote-user"), ["alice"]);
        assert_eq!(all("x-remote-uid"), ["u-1"]);
        assert_eq!(all("x-remote-group"), ["a", "b"]);
        assert_eq!(all("x-remote-extra-example.com%2Fteam"), ["x", "y"]);
        assert!(all("x-remote-extra-scopes").is_empty());
        assert!(h.get("authorization").is_none());
        assert!(h.keys().all(|k| !k.as_str().starts_with("impersonate-")));
        assert!(h.get("host").is_none());
        assert_eq!(all("x-forwarded-for"), ["10.0.0.9, 192.0.2.7"]);
        assert_eq!(all("x-forwarded-proto"), ["https"]);
        assert_eq!(all("x-forwarded-host"), ["gw.example.com"]);
        assert_eq!(all("accept"), ["application/json"]);
    }

    #[test]
    fn underscore_spellings_are_identity_headers_too() {
        let mut h = map(&[
            ("X_Remote_User", "mallory"),
            ("impersonate_user", "root"),
            ("x-remote_group", "g"),
        ]);
        let id = Identity::new("alice", vec![]);
        let fwd = Forwarded {
            identity: &id,
            client_ip: "::1".parse().unwrap(),
            original_host: None,
            impersonate_with: None,
        };
        set_identity(&mut h, &fwd, &IdentityHeaders::default());
        let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert!(!names.iter().any(|n| n.contains('_')), "{names:?}");
        assert_eq!(h.get_all("x-remote-user").iter().count(), 1);
    }

    #[test]
    fn configured_front_proxy_names_and_prefixes_are_stripped_too() {
        let mut h = map(&[
            ("X-Custom-User", "mallory"),
            ("x_custom_group", "system:masters"),
            ("X-Custom-Extra-Scopes", "admin"),
            ("X_CUSTOM_EXTRA_other", "x"),
            ("X-Custom-Extra", "not under the prefix"),
            ("Accept", "application/json"),
        ]);
        let configured = IdentityHeaders::new(
            &["X-Custom-User"],
            &["X_Custom_Group"],
            &["X-Custom-Extra-", ""],
        );
        let id = Identity::new("alice", vec![]);
        let fwd = Forwarded {
            identity: &id,
            client_ip: "::1".parse().unwrap(),
            original_host: None,
            impersonate_with: None,
        };
        set_identity(&mut h, &fwd, &configured);
        let left: Vec<&str> = h
            .keys()
            .map(|k| k.as_str())
            .filter(|n| n.replace('_', "-").starts_with("x-custom"))
            .collect();
        assert_eq!(
            left,
            ["x-custom-extra"],
            "only the name outside the prefix stays"
        );
        assert_eq!(h["x-custom-extra"], "not under the prefix");
        assert_eq!(h["accept"], "application/json");
    }

    #[test]
    fn what_authentication_reads_the_proxy_strips() {
        // The one policy built from the configuration: the headers a front proxy identified
        // the user with never reach the backend, in any spelling.
        let policy = IdentityHeaders::new(&["X-User"], &["X-Groups"], &["X-Attr-"]);
        let mut h = map(&[
            ("X-USER", "mallory"),
            ("x-groups", "system:masters"),
            ("X-Attr-Scopes", "all"),
            ("x_attr_other", "x"),
            ("Accept", "application/json"),
        ]);
        let read = policy.identity(&h).unwrap();
        assert_eq!(read.user, "mallory");
        let id = Identity::new("alice", vec![]);
        let fwd = Forwarded {
            identity: &id,
            client_ip: "::1".parse().unwrap(),
            original_host: None,
            impersonate_with: None,
        };
        set_identity(&mut h, &fwd, &policy);
        for name in ["x-user", "x-groups", "x-attr-scopes", "x_attr_other"] {
            assert!(h.get(name).is_none(), "{name} survived");
        }
        assert_eq!(h["x-remote-user"], "alice");
        assert_eq!(h["accept"], "application/json");
    }

    #[test]
    fn each_hop_by_hop_header_alone_is_removed() {
        for name in HOP_BY_HOP.iter().chain([&header::UPGRADE]) {
            let mut h = map(&[(name.as_str(), "x"), ("accept", "application/json")]);
            remove_hop_by_hop(&mut h, false);
            assert!(h.get(name).is_none(), "{name} survived");
            assert_eq!(h["accept"], "application/json");
        }
        let mut h = map(&[("accept", "application/json")]);
        remove_hop_by_hop(&mut h, false);
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn hop_by_hop_removed_but_upgrade_kept_when_asked() {
        let base = [
            ("Connection", "keep-alive, Upgrade, X-Private"),
            ("Upgrade", "websocket"),
            ("X-Private", "1"),
            ("Transfer-Encoding", "chunked"),
            ("Sec-WebSocket-Protocol", "v4.channel.k8s.io"),
        ];
        let mut h = map(&base);
        remove_hop_by_hop(&mut h, false);
        assert!(
            h.get("upgrade").is_none()
                && h.get("connection").is_none()
                && h.get("x-private").is_none()
        );
        assert!(h.get("transfer-encoding").is_none());
        let mut h = map(&base);
        remove_hop_by_hop(&mut h, true);
        assert_eq!(h["upgrade"], "websocket");
        assert_eq!(h["connection"], "Upgrade");
        assert_eq!(h["sec-websocket-protocol"], "v4.channel.k8s.io");
        assert!(h.get("x-private").is_none());
    }

    #[test]
    fn extra_keys_escape_like_client_go() {
        let escaped = |key: &str| escape_extra_key(key).to_string();
        assert_eq!(escaped("scopes"), "scopes");
        assert_eq!(escaped("example.com/a b%"), "example.com%2Fa%20b%25");
        assert_eq!(escaped("!#$&'*+-.^_`|~ü:"), "!#$&'*+-.^_`|~%C3%BC%3A");
    }

    /// `name` with the letters `upper` marks in upper case, and `_` for `-` when `underscores`.
    fn spelled(name: &str, upper: &[bool], underscores: bool) -> String {
        name.chars()
            .zip(upper.iter().cycle())
            .map(|(c, up)| if *up { c.to_ascii_uppercase() } else { c })
            .map(|c| if underscores && c == '-' { '_' } else { c })
            .collect()
    }

    proptest::proptest! {
        /// Client addresses read in X-Forwarded-For as `Display` writes them.
        #[test]
        fn client_address_text_is_display(ip in proptest::arbitrary::any::<IpAddr>()) {
            let mut out = String::new();
            push_ip(&mut out, ip);
            proptest::prop_assert_eq!(out, ip.to_string());
        }

        /// Any spelling of a configured front-proxy header is gone after stripping.
        #[test]
        fn no_spelling_of_a_configured_header_survives(
            family in proptest::sample::select(vec!["x-user", "x-groups", "x-attr-"]),
            suffix in "[a-z0-9]{0,8}",
            upper in proptest::collection::vec(proptest::bool::ANY, 32),
            underscores in proptest::bool::ANY,
        ) {
            let policy = IdentityHeaders::new(&["X-User"], &["X_Groups"], &["X-Attr-"]);
            let suffix = if family.ends_with('-') { suffix } else { String::new() };
            let raw = spelled(&format!("{family}{suffix}"), &upper, underscores);
            let mut h = HeaderMap::new();
            let Ok(name) = HeaderName::from_bytes(raw.as_bytes()) else { return Ok(()) };
            h.insert(name, HeaderValue::from_static("mallory"));
            let id = Identity::new("alice", vec!["g".into()]);
            let fwd = Forwarded { identity: &id, client_ip: "::1".parse().unwrap(), original_host: None, impersonate_with: None };
            set_identity(&mut h, &fwd, &policy);
            for (k, v) in &h {
                proptest::prop_assert!(v != "mallory", "{} survived", k);
            }
        }

        /// Any spelling of an identity header a client sends is gone after stripping, and only
        /// the gateway's own values remain.
        #[test]
        fn no_spelling_of_an_identity_header_survives(
            family in proptest::sample::select(vec!["x-remote-", "impersonate-", "authorization", "proxy-authorization"]),
            suffix in "[a-z0-9]{0,8}",
            upper in proptest::collection::vec(proptest::bool::ANY, 32),
            underscores in proptest::bool::ANY,
        ) {
            let raw = spelled(&format!("{family}{suffix}"), &upper, underscores);
            let mut h = HeaderMap::new();
            let Ok(name) = HeaderName::from_bytes(raw.as_bytes()) else { return Ok(()) };
            h.insert(name, HeaderValue::from_static("mallory"));
            let id = Identity::new("alice", vec!["g".into()]);
            let fwd = Forwarded { identity: &id, client_ip: "::1".parse().unwrap(), original_host: None, impersonate_with: None };
            set_identity(&mut h, &fwd, &IdentityHeaders::default());
            for (k, v) in &h {
                let dashed = k.as_str().replace('_', "-");
                if dashed.starts_with("x-remote-") {
                    proptest::prop_assert!(v != "mallory", "{} survived", k);
                } else {
                    proptest::prop_assert!(!dashed.starts_with("impersonate-") && !dashed.ends_with("authorization"), "{} survived", k);
                }
            }
        }
    }
}
