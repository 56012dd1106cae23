//! Bearer tokens the local methods refuse, tried as kube's union authenticator tries them: the
//! configured JWT issuers, then TokenReview (cluster mode). A refusal by one does not stop the
//! next; the client only ever learns that nothing accepted the token, the log and the metrics
//! say why. Also owns the swappable set of JWT issuers the configuration file defines.

use super::attempts::{self, Method};
use super::jwt::JwtAuthenticator;
use super::{Authenticator, Identity};
use arc_swap::ArcSwap;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

/// The JWT issuers of the authentication configuration file; replaced whole when it changes.
pub struct JwtIssuers {
    current: ArcSwap<JwtAuthenticator>,
    /// The current issuers' background key refresh, once started.
    refresh: Mutex<Vec<JoinHandle<()>>>,
}

impl JwtIssuers {
    pub fn new(jwt: JwtAuthenticator) -> Self {
        Self {
            current: ArcSwap::from_pointee(jwt),
            refresh: Mutex::new(Vec::new()),
        }
    }

    /// The issuers in force.
    pub fn current(&self) -> Arc<JwtAuthenticator> {
        self.current.load_full()
    }

    /// The `anonymous` of the configuration in force.
    pub fn anonymous(&self) -> Option<super::Anonymous> {
        self.current.load().anonymous().cloned()
    }

    /// Starts the background key refresh of the issuers in force (stopping any running).
    pub fn spawn_refresh(&self) {
        let tasks = self.current.load().spawn_refresh();
        self.swap_tasks(tasks);
    }

    /// Puts `jwt` in force with its own key refresh, and stops the previous issuers'.
    pub fn replace(&self, jwt: JwtAuthenticator) {
        let tasks = jwt.spawn_refresh();
        self.current.store(Arc::new(jwt));
        self.swap_tasks(tasks);
    }

    fn swap_tasks(&self, tasks: Vec<JoinHandle<()>>) {
        let old = match self.refresh.lock() {
            Ok(mut guard) => std::mem::replace(&mut *guard, tasks),
            Err(poisoned) => std::mem::replace(&mut *poisoned.into_inner(), tasks),
        };
        for task in old {
            task.abort();
        }
    }
}

impl Drop for JwtIssuers {
    fn drop(&mut self) {
        self.swap_tasks(Vec::new());
    }
}

impl std::fmt::Debug for JwtIssuers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.current.load().fmt(f)
    }
}

/// At most this much of an unknown `iss` goes to the log.
const MAX_LOGGED_ISSUER: usize = 256;

impl Authenticator {
    /// Whether a bearer token the local methods refuse has anyone else to ask.
    pub(super) fn has_remote(&self) -> bool {
        self.jwt.is_some() || self.token_review.get().is_some()
    }

    /// The identity (without `system:authenticated`) the first of the JWT issuers and
    /// TokenReview accepting `token` gives it; None when none does. Never logs the token.
    pub(super) async fn authenticate_token(&self, token: &str) -> Option<Identity> {
        let count = |method: Method, result: &str| self.attempts.count(method, result);
        let mut claimed = false;
        if let Some(issuers) = &self.jwt {
            match issuers.current().authenticate(token).await {
                Ok(Some(id)) => {
                    count(Method::Jwt, attempts::SUCCESS);
                    return Some(id);
                }
                Ok(None) => {}
                Err(e) => {
                    claimed = true;
                    count(Method::Jwt, e.reason.as_str());
                    tracing::warn!(
                        issuer = %e.issuer,
                        reason = e.reason.as_str(),
                        error = %apigw_core::errors::chain(&e),
                        "bearer token refused"
                    );
                }
            }
        }
        if let Some(reviewer) = self.token_review.get() {
            return match reviewer.review(token).await {
                Ok(Some(id)) => {
                    count(Method::TokenReview, attempts::SUCCESS);
                    Some(id)
                }
                Ok(None) => {
                    count(Method::TokenReview, attempts::INVALID_TOKEN);
                    tracing::debug!(
                        reason = attempts::INVALID_TOKEN,
                        "TokenReview refused the token"
                    );
                    None
                }
                Err(e) => {
                    count(Method::TokenReview, attempts::ERROR);
                    tracing::warn!(error = %e, "TokenReview failed");
                    None
                }
            };
        }
        if !claimed {
            match self.jwt.as_ref().and(super::jwt::unverified_issuer(token)) {
                Some(iss) => {
                    count(Method::Jwt, attempts::UNKNOWN_ISSUER);
                    let issuer: String = iss.chars().take(MAX_LOGGED_ISSUER).collect();
                    tracing::warn!(
                        issuer = ?issuer,
                        reason = attempts::UNKNOWN_ISSUER,
                        "bearer token refused"
                    );
                }
                None => {
                    count(Method::None, attempts::INVALID_TOKEN);
                    tracing::debug!(reason = attempts::INVALID_TOKEN, "bearer token refused");
                }
            }
        }
        None
    }
}
