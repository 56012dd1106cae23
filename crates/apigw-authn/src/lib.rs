//! Who is asking. Owns [`Identity`] and the authenticators kube-apiserver would run, in its
//! order: a trusted front proxy's request headers, the user's x509 client certificate, a static
//! bearer token, and (only when enabled) anonymous. Every authenticated identity also carries
//! `system:authenticated`. Certificates are examined once per connection ([`PeerIdentity`]);
//! requests then only look at headers. In cluster mode, bearer tokens no local method knows
//! are tried against the configured JWT issuers ([`jwt`]), then asked of the cluster
//! ([`TokenReview`]), as kube's union authenticator does (`remote`). Each answer is counted
//! ([`Attempts`]). The identity-header policy the proxy strips with is also this module's
//! ([`IdentityHeaders`]).

mod attempts;
mod flags;
#[doc(hidden)]
pub mod fuzzing;
mod remote;
mod settings;
pub use attempts::Attempts;
pub use flags::AuthnFlags;
pub use remote::JwtIssuers;
pub use settings::{
    load_jwt, AuthnFiles, AuthnLoadError, AuthnSettings, JwtLoadError, RequestHeaderSettings,
};
pub mod jwt;
mod token;
mod x509;

pub use token::{TokenFile, TokenFileError};
pub use x509::{subject, CertAuthenticator, CertSources, PeerIdentity, PeerSort};

use apigw_core::body::BoxError;
use apigw_core::errors::Status;
use apigw_core::reload::{Reload, Watched};
use apigw_core::BoxFuture;
use apigw_request::{Identity, IdentityHeaders, ANONYMOUS_USER, UNAUTHENTICATED};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// Where requests without credentials are served as `system:anonymous`: nowhere, everywhere
/// (`--anonymous-auth`), or only at the paths the authentication configuration's
/// `anonymous.conditions` list (an exact match of the request's path, as upstream).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Anonymous {
    #[default]
    Off,
    Everywhere,
    Paths(std::collections::BTreeSet<String>),
}

impl Anonymous {
    /// True when a request for `path` without credentials is anonymous.
    pub fn allows(&self, path: &str) -> bool {
        match self {
            Self::Off => false,
            Self::Everywhere => true,
            Self::Paths(paths) => paths.contains(path),
        }
    }
}

impl From<bool> for Anonymous {
    /// `--anonymous-auth`.
    fn from(on: bool) -> Self {
        if on {
            Self::Everywhere
        } else {
            Self::Off
        }
    }
}

/// Checks a bearer token no local method knows (cluster mode: TokenReview).
pub trait TokenReview: Send + Sync {
    /// The identity `token` belongs to, `None` when it is refused, or an error when it could
    /// not be checked. The identity is returned as the reviewer gave it; the authenticator
    /// adds `system:authenticated`.
    fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<Identity>, BoxError>>;
}

/// How each method is checked; built once from the configuration.
#[derive(Default)]
pub struct Authenticator {
    /// The front-proxy identity headers, shared with the proxy that strips them.
    pub identity_headers: Arc<IdentityHeaders>,
    /// Swapped whole when the token file changes.
    pub tokens: Option<arc_swap::ArcSwap<TokenFile>>,
    pub anonymous: Anonymous,
    /// The authentication configuration file's JWT issuers.
    pub jwt: Option<JwtIssuers>,
    /// The token file and the authentication configuration, read again when they change.
    files: AuthnReloads,
    /// Set once, when cluster mode starts.
    token_review: OnceLock<Box<dyn TokenReview>>,
    attempts: Attempts,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("identity_headers", &self.identity_headers)
            .field("tokens", &self.tokens.is_some())
            .field("anonymous", &self.anonymous)
            .field("jwt", &self.jwt)
            .field("token_review", &self.token_review.get().is_some())
            .finish()
    }
}

/// The files of an [`Authenticator`] that are read again when they change.
#[derive(Debug, Default)]
struct AuthnReloads {
    tokens: Option<PathBuf>,
    authentication_config: Option<PathBuf>,
}

const TOKEN_FILE: &str = "token file";
const AUTHENTICATION_CONFIG: &str = "authentication config";

impl Reload for Authenticator {
    fn watched(&self) -> Vec<Watched> {
        let set = |what, path: &Option<PathBuf>| {
            path.clone().map(|p| Watched {
                what,
                files: vec![p],
            })
        };
        [
            set(TOKEN_FILE, &self.files.tokens),
            set(AUTHENTICATION_CONFIG, &self.files.authentication_config),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn reload(&self, what: &str) -> Result<(), BoxError> {
        match (what, &self.files.tokens, &self.files.authentication_config) {
            (TOKEN_FILE, Some(path), _) => Ok(self.reload_tokens(path)?),
            (AUTHENTICATION_CONFIG, _, Some(path)) => Ok(self.reload_jwt(path)?),
            _ => Ok(()),
        }
    }
}

impl Authenticator {
    /// Watch `tokens` (the token file) and `authentication_config` for changes, as
    /// [`Reload`] reports them.
    pub fn reloading_from(
        mut self,
        tokens: Option<PathBuf>,
        authentication_config: Option<PathBuf>,
    ) -> Self {
        self.files = AuthnReloads {
            tokens,
            authentication_config,
        };
        self
    }

    /// Reads the token file at `path` again and puts it in force; on error the old tokens
    /// stay. Nothing to do when static tokens are off.
    pub fn reload_tokens(&self, path: &std::path::Path) -> Result<(), TokenFileError> {
        if let Some(slot) = &self.tokens {
            slot.store(Arc::new(TokenFile::load(path)?));
        }
        Ok(())
    }

    /// Reads the authentication configuration at `path` again and puts its JWT issuers in
    /// force; on error the old ones stay.
    /// `anonymous` is read at start only: a file that changes it is refused, as upstream.
    pub fn reload_jwt(&self, path: &std::path::Path) -> Result<(), AuthnLoadError> {
        if let Some(issuers) = &self.jwt {
            let next = load_jwt(path)?;
            if next.anonymous() != issuers.anonymous().as_ref() {
                return Err(AuthnLoadError::AnonymousChanged {
                    path: path.to_path_buf(),
                });
            }
            issuers.replace(next);
        }
        Ok(())
    }

    /// The authenticator for front-proxy headers read with `identity_headers`, the static
    /// `tokens`, and anonymous requests where `anonymous` allows them.
    pub fn new(
        identity_headers: Arc<IdentityHeaders>,
        tokens: Option<TokenFile>,
        anonymous: Anonymous,
    ) -> Self {
        Self {
            identity_headers,
            tokens: tokens.map(arc_swap::ArcSwap::from_pointee),
            anonymous,
            jwt: None,
            files: AuthnReloads::default(),
            token_review: OnceLock::new(),
            attempts: Attempts::default(),
        }
    }

    /// Also tries bearer tokens against `jwt`'s issuers.
    pub fn with_jwt(mut self, jwt: Option<jwt::JwtAuthenticator>) -> Self {
        self.jwt = jwt.map(JwtIssuers::new);
        self
    }

    /// Counts each authenticator's answers into `attempts`.
    pub fn with_attempts(mut self, attempts: Attempts) -> Self {
        self.attempts = attempts;
        self
    }

    /// Asks `reviewer` about bearer tokens the local methods refuse. Only the first call
    /// takes effect.
    pub fn set_token_review(&self, reviewer: Box<dyn TokenReview>) {
        if self.token_review.set(reviewer).is_err() {
            tracing::debug!("token review already set; kept the first");
        }
    }

    /// Authenticates one request from its headers and what its connection's certificate
    /// proved; a bearer token the local methods refuse is then tried against the JWT issuers
    /// and the token review, when there are any.
    pub async fn authenticate(
        &self,
        headers: &http::HeaderMap,
        path: &str,
        peer: &PeerIdentity,
    ) -> Result<Arc<Identity>, Status> {
        let refused = match self.authenticate_locally(headers, path, peer) {
            Ok(id) => return Ok(id),
            Err(status) => status,
        };
        let token = match bearer(headers) {
            Some(token) if self.has_remote() => token,
            Some(_) => {
                self.attempts
                    .count(attempts::Method::None, attempts::INVALID_TOKEN);
                return Err(refused);
            }
            None => {
                self.attempts
                    .count(attempts::Method::None, attempts::NO_CREDENTIALS);
                return Err(refused);
            }
        };
        // Boxed: signature checks and network round trips are rare next to local methods,
        // and would otherwise enlarge every request's future.
        match Box::pin(self.authenticate_token(token)).await {
            Some(id) => Ok(Arc::new(id.authenticated())),
            None => Err(refused),
        }
    }

    fn success(&self, method: attempts::Method) {
        self.attempts.count(method, attempts::SUCCESS);
    }

    /// The methods that need no network: front proxy, client certificate, token file,
    /// anonymous.
    fn authenticate_locally(
        &self,
        headers: &http::HeaderMap,
        path: &str,
        peer: &PeerIdentity,
    ) -> Result<Arc<Identity>, Status> {
        match &peer.sort {
            PeerSort::FrontProxy { .. } => {
                if let Some(id) = self.identity_headers.identity(headers) {
                    self.success(attempts::Method::RequestHeader);
                    return Ok(Arc::new(id.authenticated()));
                }
            }
            PeerSort::User(id) => {
                self.success(attempts::Method::X509);
                return Ok(Arc::clone(id));
            }
            _ => {}
        }
        if let Some(token) = bearer(headers) {
            return match self.tokens.as_ref().and_then(|t| t.load().lookup(token)) {
                Some(id) => {
                    self.success(attempts::Method::TokenFile);
                    Ok(id)
                }
                None => Err(Status::unauthorized()),
            };
        }
        if self.anonymous.allows(path) {
            self.success(attempts::Method::Anonymous);
            return Ok(Arc::new(Identity::new(
                ANONYMOUS_USER,
                vec![UNAUTHENTICATED.to_string()],
            )));
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
    use apigw_request::AUTHENTICATED;
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    /// A token review that knows one token, or fails; counts the calls.
    struct FakeReview {
        answer: Result<Option<Identity>, &'static str>,
        calls: Arc<AtomicUsize>,
    }

    impl TokenReview for FakeReview {
        fn review<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, Result<Option<Identity>, BoxError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                match &self.answer {
                    Ok(id) => Ok(id.clone().filter(|_| token == "good")),
                    Err(e) => Err(BoxError::from(*e)),
                }
            })
        }
    }

    fn reviewing(
        answer: Result<Option<Identity>, &'static str>,
    ) -> (Authenticator, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let a = Authenticator::default();
        a.set_token_review(Box::new(FakeReview {
            answer,
            calls: calls.clone(),
        }));
        (a, calls)
    }

    #[tokio::test]
    async fn cert_user_wins_and_gets_authenticated_group() {
        let a = Authenticator::default();
        let peer = PeerIdentity::user(Identity::new("alice", vec!["team".into()]));
        let id = a
            .authenticate(&headers(&[("authorization", "Bearer nope")]), "/", &peer)
            .await
            .unwrap();
        assert_eq!(id.user, "alice");
        assert_eq!(id.groups, vec!["team", AUTHENTICATED]);
    }

    #[tokio::test]
    async fn bad_token_is_401_even_with_anonymous() {
        let a = Authenticator {
            anonymous: Anonymous::Everywhere,
            ..Default::default()
        };
        let err = a
            .authenticate(
                &headers(&[("authorization", "Bearer nope")]),
                "/",
                &PeerIdentity::none(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), http::StatusCode::UNAUTHORIZED);
    }

    #[tokio::test]
    async fn anonymous_only_when_enabled() {
        let off = Authenticator::default();
        assert!(off
            .authenticate(&headers(&[]), "/", &PeerIdentity::none())
            .await
            .is_err());
        let on = Authenticator {
            anonymous: Anonymous::Everywhere,
            ..Default::default()
        };
        let id = on
            .authenticate(&headers(&[]), "/", &PeerIdentity::none())
            .await
            .unwrap();
        assert_eq!(id.user, ANONYMOUS_USER);
        assert_eq!(id.groups, vec![UNAUTHENTICATED]);
    }

    #[tokio::test]
    async fn front_proxy_headers_ignored_without_front_proxy_cert() {
        let a = Authenticator {
            identity_headers: Arc::new(IdentityHeaders::new(
                &["X-Remote-User"],
                &["X-Remote-Group"],
                &["X-Remote-Extra-"],
            )),
            ..Default::default()
        };
        let h = headers(&[("x-remote-user", "mallory")]);
        assert!(a
            .authenticate(&h, "/", &PeerIdentity::none())
            .await
            .is_err());
        let peer = PeerIdentity::front_proxy("front-proxy-client");
        assert_eq!(
            a.authenticate(&h, "/", &peer).await.unwrap().user,
            "mallory"
        );
        // Without configured headers a front proxy's headers name nobody.
        let unconfigured = Authenticator::default();
        assert!(unconfigured.authenticate(&h, "/", &peer).await.is_err());
    }

    #[tokio::test]
    async fn token_review_identity_is_authenticated_once() {
        for groups in [
            vec!["devs".to_string()],
            vec!["devs".into(), AUTHENTICATED.into()],
        ] {
            let (a, calls) = reviewing(Ok(Some(Identity::new("bob", groups))));
            let id = a
                .authenticate(
                    &headers(&[("authorization", "Bearer good")]),
                    "/",
                    &PeerIdentity::none(),
                )
                .await
                .unwrap();
            assert_eq!(id.user, "bob");
            assert_eq!(id.groups, vec!["devs", AUTHENTICATED]);
            assert_eq!(calls.load(Ordering::SeqCst), 1);
        }
    }

    #[tokio::test]
    async fn refused_or_failed_token_review_is_401() {
        for answer in [
            Ok(Some(Identity::new("bob", vec![]))),
            Err("cluster unreachable"),
        ] {
            let (a, calls) = reviewing(answer);
            let err = a
                .authenticate(
                    &headers(&[("authorization", "Bearer bad")]),
                    "/",
                    &PeerIdentity::none(),
                )
                .await
                .unwrap_err();
            assert_eq!(err.code(), http::StatusCode::UNAUTHORIZED);
            assert_eq!(err.message(), Status::unauthorized().message());
            assert_eq!(calls.load(Ordering::SeqCst), 1);
        }
    }

    #[tokio::test]
    async fn token_review_only_asked_when_local_methods_refuse_a_bearer_token() {
        let (a, calls) = reviewing(Ok(Some(Identity::new("bob", vec![]))));
        let peer = PeerIdentity::user(Identity::new("alice", vec![]));
        let h = headers(&[("authorization", "Bearer good")]);
        assert_eq!(a.authenticate(&h, "/", &peer).await.unwrap().user, "alice");
        let err = a
            .authenticate(&headers(&[]), "/", &PeerIdentity::none())
            .await
            .unwrap_err();
        assert_eq!(err.code(), http::StatusCode::UNAUTHORIZED);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }

    /// A JWT of a configured issuer that fails (here `alg: none`, refused before any fetch)
    /// still goes to TokenReview, as kube's union authenticator does; each answer is counted.
    #[tokio::test]
    async fn a_refused_jwt_still_goes_to_token_review_and_attempts_are_counted() {
        use base64::Engine;
        let config = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n\
            jwt:\n- issuer: {url: 'https://127.0.0.1:1', audiences: [a]}\n  \
            claimMappings: {username: {claim: sub, prefix: ''}}\n";
        let jwt = jwt::JwtAuthenticator::from_text(config, jwt::FetchTiming::default()).unwrap();
        let family = prometheus::IntCounterVec::new(
            prometheus::Opts::new("attempts", "attempts"),
            &["authenticator", "result"],
        )
        .unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let accept_all = |calls: &Arc<AtomicUsize>| FakeReview {
            answer: Ok(Some(Identity::new("bob", vec![]))),
            calls: calls.clone(),
        };
        let a = Authenticator::default()
            .with_jwt(Some(jwt))
            .with_attempts(Attempts::new(family.clone()));
        let part = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        let token = format!(
            "{}.{}.",
            part(r#"{"alg":"none"}"#),
            part(r#"{"iss":"https://127.0.0.1:1","sub":"x","aud":"a"}"#)
        );
        let auth = format!("Bearer {token}");
        let h = headers(&[("authorization", auth.as_str())]);
        // Without TokenReview: refused, with kube's body.
        let err = a
            .authenticate(&h, "/", &PeerIdentity::none())
            .await
            .unwrap_err();
        assert_eq!(err.message(), Status::unauthorized().message());
        assert_eq!(
            family
                .with_label_values(&["jwt", "disallowed_algorithm"])
                .get(),
            1
        );
        a.set_token_review(Box::new(accept_all(&calls)));
        // FakeReview accepts only "good"; this token is refused by both.
        assert!(a
            .authenticate(&h, "/", &PeerIdentity::none())
            .await
            .is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(
            family
                .with_label_values(&["tokenreview", "invalid_token"])
                .get(),
            1
        );
        let good = headers(&[("authorization", "Bearer good")]);
        let id = a
            .authenticate(&good, "/", &PeerIdentity::none())
            .await
            .unwrap();
        assert_eq!(id.groups, vec![AUTHENTICATED]);
        assert_eq!(
            family.with_label_values(&["tokenreview", "success"]).get(),
            1
        );
        let none = Authenticator::default().with_attempts(Attempts::new(family.clone()));
        assert!(none
            .authenticate(&headers(&[]), "/", &PeerIdentity::none())
            .await
            .is_err());
        assert_eq!(
            family.with_label_values(&["none", "no_credentials"]).get(),
            1
        );
    }
}
