//! Authorization of authenticated requests (`--authorization-mode`, a list evaluated in
//! order as kube-apiserver does): `AlwaysAllow`, `AlwaysDeny`, and `RBAC` from a policy file
//! that reloads when it changes. Members of `system:masters` are always allowed. A refusal is a
//! 403 whose message reads as kube-apiserver's.

mod attributes;
pub mod impersonation;
pub mod rbac;

pub use attributes::Attributes;

use crate::authn::Identity;
use crate::errors::Status;
use arc_swap::ArcSwap;
use rbac::Policy;
use std::path::PathBuf;
use std::sync::Arc;

/// How requests are authorized, in the order `--authorization-mode` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthzMode {
    AlwaysAllow,
    AlwaysDeny,
    /// RBAC objects from `--rbac-policy-file`.
    Rbac,
    /// SubjectAccessReview against the cluster (cluster mode).
    Webhook,
}

/// The chain of authorizers.
#[derive(Debug)]
pub struct Authorizer {
    modes: Vec<AuthzMode>,
    policy: ArcSwap<Policy>,
    policy_file: Option<PathBuf>,
}

impl Authorizer {
    /// Builds the chain; loads the RBAC policy when `RBAC` is one of the modes.
    pub fn new(modes: Vec<AuthzMode>, policy_file: Option<PathBuf>) -> Result<Self, String> {
        let policy = match (&policy_file, modes.contains(&AuthzMode::Rbac)) {
            (Some(path), true) => Policy::load(path)?,
            _ => Policy::default(),
        };
        Ok(Self {
            modes,
            policy: ArcSwap::from_pointee(policy),
            policy_file,
        })
    }

    /// The policy file to watch, when RBAC is on.
    pub fn policy_file(&self) -> Option<&PathBuf> {
        self.policy_file
            .as_ref()
            .filter(|_| self.modes.contains(&AuthzMode::Rbac))
    }

    /// Loads the policy file again; on error the old policy stays.
    pub fn reload(&self) -> Result<(), String> {
        if let Some(path) = self.policy_file() {
            self.policy.store(Arc::new(Policy::load(path)?));
        }
        Ok(())
    }

    /// The RBAC policy in force (empty when RBAC is off).
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.load_full()
    }

    /// True when some mode allows `a` for `id`.
    pub fn allows(&self, id: &Identity, a: &Attributes) -> bool {
        if is_master(id) {
            return true;
        }
        // Each mode allows or has no opinion (AlwaysDeny and RBAC never deny outright, as in
        // kube); the first that allows wins, and a request no mode allows is refused.
        self.modes.iter().any(|mode| match mode {
            AuthzMode::AlwaysAllow => true,
            AuthzMode::AlwaysDeny => false,
            AuthzMode::Rbac => self.policy.load().allows(id, a),
            // Asked asynchronously by the gateway when no other mode allows (see `webhook`).
            AuthzMode::Webhook => false,
        })
    }

    /// True when SubjectAccessReview (cluster mode) is one of the modes.
    pub fn webhook(&self) -> bool {
        self.modes.contains(&AuthzMode::Webhook)
    }

    /// True when some grant of impersonation is possible for `id`: RBAC is on, or `id` is in
    /// `system:masters`.
    pub fn may_grant_impersonation(&self, id: &Identity) -> bool {
        is_master(id) || self.modes.contains(&AuthzMode::Rbac)
    }

    /// True when `id` may impersonate what `a` names: by `system:masters` or an RBAC rule.
    pub fn grants_impersonation(&self, id: &Identity, a: &Attributes) -> bool {
        is_master(id) || (self.modes.contains(&AuthzMode::Rbac) && self.policy.load().allows(id, a))
    }

    /// Allows `a` for `id`, or refuses it with kube-apiserver's message.
    pub fn authorize(&self, id: &Identity, a: &Attributes) -> Result<(), Status> {
        if self.allows(id, a) {
            Ok(())
        } else {
            Err(Status::forbidden(forbidden_message(id, a)))
        }
    }
}

fn is_master(id: &Identity) -> bool {
    id.groups.iter().any(|g| g == "system:masters")
}

/// `flunders.wardle.example.com "f" is forbidden: User "bob" cannot get resource "flunders"
/// in API group "wardle.example.com" in the namespace "x"`, as kube words it.
pub fn forbidden_message(id: &Identity, a: &Attributes) -> String {
    if !a.resource_request {
        return format!(
            "forbidden: User {:?} cannot {} path {:?}",
            id.user, a.verb, a.path
        );
    }
    let qualified = if a.group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.group)
    };
    let subject = if a.name.is_empty() {
        qualified
    } else {
        format!("{qualified} {:?}", a.name)
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {:?}", a.namespace)
    };
    format!(
        "{subject} is forbidden: User {:?} cannot {} resource {:?} in API group {:?} {scope}",
        id.user,
        a.verb,
        a.full_resource(),
        a.group
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn attrs(method: Method, path: &str) -> Attributes {
        Attributes::from_request(&method, path, None)
    }

    #[test]
    fn modes_in_order_and_masters_always() {
        let alice = Identity::new("alice", vec![]);
        let admin = Identity::new("root", vec!["system:masters".into()]);
        let deny = Authorizer::new(vec![AuthzMode::AlwaysDeny], None).unwrap();
        let err = deny
            .authorize(&alice, &attrs(Method::GET, "/apis"))
            .unwrap_err();
        assert_eq!(err.code(), http::StatusCode::FORBIDDEN);
        assert_eq!(
            err.message(),
            "forbidden: User \"alice\" cannot get path \"/apis\""
        );
        assert!(deny.authorize(&admin, &attrs(Method::GET, "/apis")).is_ok());
        let allow =
            Authorizer::new(vec![AuthzMode::AlwaysDeny, AuthzMode::AlwaysAllow], None).unwrap();
        assert!(allow
            .authorize(&alice, &attrs(Method::POST, "/apis/x"))
            .is_ok());
    }

    #[test]
    fn messages_read_as_kube() {
        let bob = Identity::new("bob", vec![]);
        let m = |p: &str, method: Method| forbidden_message(&bob, &attrs(method, p));
        assert_eq!(
            m("/apis/wardle.example.com/v1alpha1/namespaces/y/flunders", Method::GET),
            "flunders.wardle.example.com is forbidden: User \"bob\" cannot list resource \"flunders\" in API group \"wardle.example.com\" in the namespace \"y\""
        );
        assert_eq!(
            m("/apis/wardle.example.com/v1alpha1/namespaces/y/flunders/f/status", Method::PUT),
            "flunders.wardle.example.com \"f\" is forbidden: User \"bob\" cannot update resource \"flunders/status\" in API group \"wardle.example.com\" in the namespace \"y\""
        );
        assert_eq!(
            m("/api/v1/nodes", Method::GET),
            "nodes is forbidden: User \"bob\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
        );
    }
}
