//! Delegated authentication: `Authorization: Bearer` tokens checked with an
//! `authentication.k8s.io/v1` TokenReview. Answers, both accepted and refused, are cached for
//! a short time keyed by the token's SHA-256 (the token itself is never stored); failures to
//! reach the API server are not cached. Implements [`apigw_authn::TokenReview`], through
//! which the authenticator asks it.

use super::ClusterError;
use apigw_core::cache::{digest, TtlCache};
use apigw_request::Identity;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use kube::api::{Api, PostParams};
use std::time::Duration;

/// Cache lifetimes and bounds.
#[derive(Debug, Clone)]
pub struct TokenReviewSettings {
    /// How long an accepted token is trusted without asking again.
    pub allow_ttl: Duration,
    /// How long a refused token is refused without asking again.
    pub deny_ttl: Duration,
    /// At most this many answers are cached; the oldest go first.
    pub capacity: usize,
    /// Audiences asked for (`spec.audiences`); empty means the API server's.
    pub audiences: Vec<String>,
}

impl Default for TokenReviewSettings {
    fn default() -> Self {
        Self {
            allow_ttl: Duration::from_secs(10),
            deny_ttl: Duration::from_secs(10),
            capacity: 10_000,
            audiences: Vec::new(),
        }
    }
}

/// Checks bearer tokens with the cluster.
pub struct TokenReviewer {
    api: Api<TokenReview>,
    cache: TtlCache<Option<Identity>>,
    settings: TokenReviewSettings,
}

impl TokenReviewer {
    pub fn new(client: kube::Client, settings: TokenReviewSettings) -> Self {
        Self {
            api: Api::all(client),
            cache: TtlCache::new(settings.capacity),
            settings,
        }
    }

    /// The identity `token` belongs to, `None` when the cluster refuses it, or an error when
    /// the cluster could not be asked.
    pub async fn review(&self, token: &str) -> Result<Option<Identity>, ClusterError> {
        let key = digest(&["tokenreview", token]);
        if let Some(answer) = self.cache.get(&key) {
            return Ok(answer);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: (!self.settings.audiences.is_empty())
                    .then(|| self.settings.audiences.clone()),
            },
            ..TokenReview::default()
        };
        let answer = self
            .api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| ClusterError::api("TokenReview", e))?;
        let identity = answer
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user)
            .and_then(identity_of);
        let ttl = match identity {
            Some(_) => self.settings.allow_ttl,
            None => self.settings.deny_ttl,
        };
        self.cache.insert(key, identity.clone(), ttl);
        Ok(identity)
    }
}

impl apigw_authn::TokenReview for TokenReviewer {
    fn review<'a>(
        &'a self,
        token: &'a str,
    ) -> apigw_core::BoxFuture<'a, Result<Option<Identity>, apigw_core::body::BoxError>> {
        Box::pin(async move { TokenReviewer::review(self, token).await.map_err(Into::into) })
    }
}

/// The identity in a TokenReview's `status.user`; none without a username.
fn identity_of(user: UserInfo) -> Option<Identity> {
    let name = user.username.filter(|u| !u.is_empty())?;
    Some(Identity {
        user: name,
        uid: user.uid.filter(|u| !u.is_empty()),
        groups: user.groups.unwrap_or_default(),
        extra: user.extra.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_needs_a_username() {
        assert_eq!(identity_of(UserInfo::default()), None);
        let id = identity_of(UserInfo {
            username: Some("u".into()),
            uid: Some(String::new()),
            groups: Some(vec!["g".into()]),
            extra: None,
        })
        .unwrap();
        assert_eq!(
            (id.user.as_str(), id.uid, id.groups),
            ("u", None, vec!["g".to_string()])
        );
    }
}
