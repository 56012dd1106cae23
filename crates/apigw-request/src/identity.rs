//! Who is asking, once authenticated: the [`Identity`] every later stage reads (authorization,
//! flow control, audit, the proxy's `X-Remote-*` headers), and kube's well-known user and
//! group names.

use std::collections::BTreeMap;

/// The group every authenticated user belongs to.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The user and group of requests without credentials when anonymous auth is on.
pub const ANONYMOUS_USER: &str = "system:anonymous";

/// The group of requests without credentials when anonymous auth is on.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";

/// The extra key kube-apiserver gives a client certificate's identity (`X509SHA256=<hash>`),
/// and with it most identities apigw forwards.
pub const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

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
    pub fn authenticated(mut self) -> Self {
        if !self.groups.iter().any(|g| g == AUTHENTICATED) {
            self.groups.push(AUTHENTICATED.to_string());
        }
        self
    }
}
