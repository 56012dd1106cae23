//! Who is asking. Owns [`Identity`] and the authenticators kube-apiserver would run, in its
//! order: a trusted front proxy's request headers, the user's x509 client certificate, a static
//! bearer token, and (only when enabled) anonymous. Every authenticated identity also carries
//! `system:authenticated`. Certificates are examined once per connection ([`PeerIdentity`]);
//! requests then only look at headers.

mod requestheader;
mod token;
mod x509;

pub use requestheader::RequestHeaderConfig;
pub use token::TokenFile;
pub use x509::{subject, CertAuthenticator, CertSources, PeerIdentity, PeerSort};

use crate::errors::Status;
use std::collections::BTreeMap;

/// The group every authenticated user belongs to.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The user and group of requests without credentials when anonymous auth is on.
pub const ANONYMOUS_USER: &str = "system:anonymous";
pub const UNAUTHENTICATED: &str = "system:unauthenticated";

/// An authenticated user, as forwarded to backends in `X-Remote-*` headers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    pub user: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Identity {
    pub fn new(user: impl Into<String>, groups: Vec<String>) -> Self {
        Self {
            user: user.into(),
            groups,
            ..Self::default()
        }
    }

    /// Adds `system:authenticated` unless present (or the user is anonymous), as kube does.
    fn authenticated(mut self) -> Self {
        if !self.groups.iter().any(|g| g == AUTHENTICATED) {
            self.groups.push(AUTHENTICATED.to_string());
        }
        self
    }

    /// A copy with `system:authenticated`, its groups allocated once (every request of a
    /// certificate-authenticated connection makes one).
    fn authenticated_clone(&self) -> Self {
        let mut groups = Vec::with_capacity(self.groups.len() + 1);
        groups.extend(self.groups.iter().cloned());
        Self {
            user: self.user.clone(),
            uid: self.uid.clone(),
            groups,
            extra: self.extra.clone(),
        }
        .authenticated()
    }
}

/// How each method is checked; built once from the configuration.
#[derive(Debug, Default)]
pub struct Authenticator {
    pub request_header: Option<RequestHeaderConfig>,
    /// Swapped whole when the token file changes.
    pub tokens: Option<arc_swap::ArcSwap<TokenFile>>,
    pub anonymous: bool,
}

impl Authenticator {
    /// Authenticates one request from its headers and what its connection's certificate proved.
    pub fn authenticate(
        &self,
        headers: &http::HeaderMap,
        peer: &PeerIdentity,
    ) -> Result<Identity, Status> {
        match (&peer.sort, &self.request_header) {
            (PeerSort::FrontProxy { .. }, Some(rh)) => {
                if let Some(id) = rh.identity(headers) {
                    return Ok(id.authenticated());
                }
            }
            (PeerSort::User(id), _) => return Ok(id.authenticated_clone()),
            _ => {}
        }
        if let Some(token) = bearer(headers) {
            return match self.tokens.as_ref().and_then(|t| t.load().lookup(token)) {
                Some(id) => Ok(id.authenticated()),
                None => Err(Status::unauthorized()),
            };
        }
        if self.anonymous {
            return Ok(Identity::new(
                ANONYMOUS_USER,
                vec![UNAUTHENTICATED.to_string()],
            ));
        }
        Err(Status::unauthorized())
    }
}

/// The token of an `Authorization: Bearer` header, if there is a well-formed one.
pub fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn cert_user_wins_and_gets_authenticated_group() {
        let a = Authenticator::default();
        let peer = PeerIdentity::user(Identity::new("alice", vec!["team".into()]));
        let id = a
            .authenticate(&headers(&[("authorization", "Bearer nope")]), &peer)
            .unwrap();
        assert_eq!(id.user, "alice");
        assert_eq!(id.groups, vec!["team", AUTHENTICATED]);
    }

    #[test]
    fn bad_token_is_401_even_with_anonymous() {
        let a = Authenticator {
            anonymous: true,
            ..Default::default()
        };
        let err = a
            .authenticate(
                &headers(&[("authorization", "Bearer nope")]),
                &PeerIdentity::none(),
            )
            .unwrap_err();
        assert_eq!(err.code(), http::StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn anonymous_only_when_enabled() {
        let off = Authenticator::default();
        assert!(off
            .authenticate(&headers(&[]), &PeerIdentity::none())
            .is_err());
        let on = Authenticator {
            anonymous: true,
            ..Default::default()
        };
        let id = on
            .authenticate(&headers(&[]), &PeerIdentity::none())
            .unwrap();
        assert_eq!(id.user, ANONYMOUS_USER);
        assert_eq!(id.groups, vec![UNAUTHENTICATED]);
    }

    #[test]
    fn front_proxy_headers_ignored_without_front_proxy_cert() {
        let a = Authenticator {
            request_header: Some(RequestHeaderConfig::default()),
            ..Default::default()
        };
        let h = headers(&[("x-remote-user", "mallory")]);
        assert!(a.authenticate(&h, &PeerIdentity::none()).is_err());
        let peer = PeerIdentity::front_proxy("front-proxy-client");
        assert_eq!(a.authenticate(&h, &peer).unwrap().user, "mallory");
    }
}
