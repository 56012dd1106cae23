//! Authentication settings: client certificates, static tokens, anonymous requests, the
//! front proxy's identity headers and the JWT issuers' configuration file. Defaults live only
//! here.

use apigw_request::IdentityHeaders;
use std::path::PathBuf;

/// How clients are authenticated.
#[derive(Debug, Clone, Default)]
pub struct AuthnSettings {
    /// CA bundle for user client certificates.
    pub client_ca: Option<PathBuf>,
    /// Static tokens (kube CSV).
    pub token_file: Option<PathBuf>,
    /// `--anonymous-auth`: serve requests without credentials as `system:anonymous`; None when
    /// not given (off, unless the authentication configuration has `anonymous`).
    pub anonymous: Option<bool>,
    /// Front-proxy authentication; None: off.
    pub request_header: Option<RequestHeaderSettings>,
    /// kube's `AuthenticationConfiguration` file (its `jwt` authenticators).
    pub authentication_config: Option<PathBuf>,
}

impl AuthnSettings {
    /// The identity-header policy of the front-proxy settings; without them, the standard
    /// headers only.
    pub fn identity_headers(&self) -> IdentityHeaders {
        self.request_header
            .as_ref()
            .map_or_else(IdentityHeaders::default, |rh| {
                IdentityHeaders::new(&rh.username_headers, &rh.group_headers, &rh.extra_prefixes)
            })
    }

    /// Where client certificates are verified from: the client CA and the front-proxy CA with
    /// its allowed names. `serve` and `check` load the same sources.
    pub fn cert_sources(&self) -> super::CertSources {
        super::CertSources {
            client_ca: self.client_ca.clone(),
            front_proxy_ca: self.request_header.as_ref().map(|rh| rh.client_ca.clone()),
            allowed_names: self
                .request_header
                .as_ref()
                .map(|rh| rh.allowed_names.clone())
                .unwrap_or_default(),
        }
    }
}

/// Front-proxy (request header) authentication settings.
#[derive(Debug, Clone)]
pub struct RequestHeaderSettings {
    pub client_ca: PathBuf,
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_prefixes: Vec<String>,
}

impl RequestHeaderSettings {
    /// The header names used when none are given.
    pub const DEFAULT_USERNAME_HEADER: &'static str = "X-Remote-User";
    pub const DEFAULT_GROUP_HEADER: &'static str = "X-Remote-Group";
    pub const DEFAULT_EXTRA_PREFIX: &'static str = "X-Remote-Extra-";

    /// Trusts front proxies with a certificate from `client_ca`, any name, kube's headers.
    pub fn new(client_ca: PathBuf) -> Self {
        Self {
            client_ca,
            allowed_names: Vec::new(),
            username_headers: vec![Self::DEFAULT_USERNAME_HEADER.into()],
            group_headers: vec![Self::DEFAULT_GROUP_HEADER.into()],
            extra_prefixes: vec![Self::DEFAULT_EXTRA_PREFIX.into()],
        }
    }
}

/// What authentication reads from files: the client-certificate verifier, the static tokens
/// and the JWT issuers.
pub struct AuthnFiles {
    pub certs: super::CertAuthenticator,
    pub tokens: Option<super::TokenFile>,
    pub jwt: Option<super::jwt::JwtAuthenticator>,
    /// From the authentication configuration's `anonymous`, else `--anonymous-auth`.
    pub anonymous: super::Anonymous,
}

/// A file authentication could not load; it reads as the underlying error.
#[derive(Debug, thiserror::Error)]
pub enum AuthnLoadError {
    /// The client CA or the front-proxy CA (the error names the file).
    #[error(transparent)]
    Certs(#[from] apigw_core::tls::TlsError),
    #[error(transparent)]
    Tokens(#[from] super::token::TokenFileError),
    /// The authentication configuration file, unreadable or invalid.
    #[error("{}: {source}", path.display())]
    Jwt {
        path: PathBuf,
        #[source]
        source: JwtLoadError,
    },
    /// Both `--anonymous-auth` and the file's `anonymous`, as kube-apiserver refuses them.
    #[error("{}: anonymous: Forbidden: --anonymous-auth flag cannot be set when anonymous field is configured in authentication configuration file", path.display())]
    AnonymousConflict { path: PathBuf },
    /// A reload that changes `anonymous`, which is read at start only.
    #[error("{}: anonymous: Forbidden: changed from initial configuration file", path.display())]
    AnonymousChanged { path: PathBuf },
}

/// Why the authentication configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum JwtLoadError {
    #[error("reading: {0}")]
    Read(#[from] std::io::Error),
    #[error(transparent)]
    Build(#[from] super::jwt::BuildError),
}

/// Reads and validates the authentication configuration file at `path`; nothing is fetched.
pub fn load_jwt(path: &std::path::Path) -> Result<super::jwt::JwtAuthenticator, AuthnLoadError> {
    let wrap = |source: JwtLoadError| AuthnLoadError::Jwt {
        path: path.to_path_buf(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(|e| wrap(e.into()))?;
    super::jwt::JwtAuthenticator::from_text(&text, super::jwt::FetchTiming::default())
        .map_err(|e| wrap(e.into()))
}

impl AuthnLoadError {
    /// The flag that named the file, where the error itself does not say.
    pub fn flag(&self) -> Option<&'static str> {
        match self {
            Self::Certs(_) => None,
            Self::Tokens(_) => Some("token-auth-file"),
            Self::Jwt { .. } => Some("authentication-config"),
            Self::AnonymousConflict { .. } | Self::AnonymousChanged { .. } => {
                Some("authentication-config")
            }
        }
    }
}

impl AuthnSettings {
    /// Loads every file authentication reads, as `serve` and `check` both do; on failure,
    /// every problem in order (`serve` reports the first).
    pub fn load(&self) -> Result<AuthnFiles, Vec<AuthnLoadError>> {
        let certs =
            super::CertAuthenticator::load(self.cert_sources()).map_err(AuthnLoadError::from);
        let tokens = self
            .token_file
            .as_deref()
            .map(super::TokenFile::load)
            .transpose()
            .map_err(AuthnLoadError::from);
        let jwt = self
            .authentication_config
            .as_deref()
            .map(load_jwt)
            .transpose();
        let jwt = jwt.and_then(
            |jwt| match (&jwt, self.anonymous, &self.authentication_config) {
                (Some(j), Some(_), Some(path)) if j.anonymous().is_some() => {
                    Err(AuthnLoadError::AnonymousConflict { path: path.clone() })
                }
                _ => Ok(jwt),
            },
        );
        match (certs, tokens, jwt) {
            (Ok(certs), Ok(tokens), Ok(jwt)) => {
                let anonymous = match jwt.as_ref().and_then(|j| j.anonymous()) {
                    Some(from_file) => from_file.clone(),
                    None => self.anonymous.unwrap_or(false).into(),
                };
                Ok(AuthnFiles {
                    certs,
                    tokens,
                    jwt,
                    anonymous,
                })
            }
            (certs, tokens, jwt) => Err(certs
                .err()
                .into_iter()
                .chain(tokens.err())
                .chain(jwt.err())
                .collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_from_the_settings_or_none() {
        let settings = RequestHeaderSettings::new("ca.crt".into());
        let mut h = http::HeaderMap::new();
        h.insert("x-remote-user", "alice".parse().unwrap());
        h.insert("x-remote-extra-k", "v".parse().unwrap());
        let id = AuthnSettings {
            request_header: Some(settings),
            ..AuthnSettings::default()
        }
        .identity_headers()
        .identity(&h)
        .unwrap();
        assert_eq!(
            (id.user.as_str(), &id.extra["k"]),
            ("alice", &vec!["v".to_string()])
        );
        assert!(AuthnSettings::default()
            .identity_headers()
            .identity(&h)
            .is_none());
    }
}
