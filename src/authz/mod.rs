//! Authorization of authenticated requests (`--authorization-mode`, evaluated in order as
//! kube-apiserver does). This build has `AlwaysAllow` and `AlwaysDeny`; `system:masters`
//! is always allowed, as in kube-apiserver.

mod attributes;

pub use attributes::Attributes;

use crate::authn::Identity;
use crate::config::AuthzMode;
use crate::errors::Status;

/// The chain of authorizers.
#[derive(Debug, Clone)]
pub struct Authorizer {
    modes: Vec<AuthzMode>,
}

impl Authorizer {
    pub fn new(modes: Vec<AuthzMode>) -> Self {
        Self { modes }
    }

    /// Allows or refuses `method` on `path` for `id`; the refusal reads as kube-apiserver's.
    pub fn authorize(
        &self,
        id: &Identity,
        method: &http::Method,
        path: &str,
    ) -> Result<(), Status> {
        if id.groups.iter().any(|g| g == "system:masters") {
            return Ok(());
        }
        // Each mode allows or has no opinion (AlwaysDeny never allows, as in kube); the first
        // that allows wins, and a request no mode allows is refused.
        if self.modes.contains(&AuthzMode::AlwaysAllow) {
            return Ok(());
        }
        Err(Status::forbidden(format!(
            "forbidden: User \"{}\" cannot {} path \"{}\"",
            id.user,
            verb(method),
            path
        )))
    }
}

/// The kube verb of a non-resource request.
fn verb(method: &http::Method) -> String {
    match *method {
        http::Method::GET | http::Method::HEAD => "get".into(),
        http::Method::POST => "post".into(),
        http::Method::PUT => "put".into(),
        http::Method::PATCH => "patch".into(),
        http::Method::DELETE => "delete".into(),
        ref other => other.as_str().to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_in_order_and_masters_always() {
        let alice = Identity::new("alice", vec![]);
        let admin = Identity::new("root", vec!["system:masters".into()]);
        let deny = Authorizer::new(vec![AuthzMode::AlwaysDeny]);
        let err = deny
            .authorize(&alice, &http::Method::GET, "/apis")
            .unwrap_err();
        assert_eq!(err.code(), http::StatusCode::FORBIDDEN);
        assert_eq!(
            err.message(),
            "forbidden: User \"alice\" cannot get path \"/apis\""
        );
        assert!(deny.authorize(&admin, &http::Method::GET, "/apis").is_ok());
        let allow = Authorizer::new(vec![AuthzMode::AlwaysDeny, AuthzMode::AlwaysAllow]);
        assert!(allow
            .authorize(&alice, &http::Method::POST, "/apis/x")
            .is_ok());
    }
}
