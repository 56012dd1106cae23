//! Authorization of authenticated requests (`--authorization-mode`, a list evaluated in
//! order as kube-apiserver does): `AlwaysAllow`, `AlwaysDeny`, and `RBAC` from a policy file
//! that reloads when it changes, and in cluster mode `Webhook` (a SubjectAccessReview asked
//! through [`AccessReview`]). Members of `system:masters` are always allowed. Impersonation
//! ([`impersonation`]) is decided here too: [`Authorizer::admit`] is the one entry that turns
//! an authenticated identity into the admitted one. A refusal is a 403 whose message reads as
//! kube-apiserver's.

mod attributes;
pub mod impersonation;
pub mod rbac;
mod settings;
pub use settings::AuthzSettings;

pub use attributes::{segments, Attributes};
pub use rbac::PolicyError;

use crate::authn::{BoxFuture, Identity};
use apigw_core::body::BoxError;
use apigw_core::errors::Status;
use apigw_core::reload::{Reload, Watched};
use arc_swap::ArcSwap;
use http::HeaderMap;
use rbac::Policy;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

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

/// An answer of the `Webhook` authorizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// An explicit denial: no other authorizer may allow.
    pub denied: bool,
    pub reason: String,
}

/// Asks whether `id` may do what `a` describes (cluster mode: SubjectAccessReview).
pub trait AccessReview: Send + Sync {
    /// The decision, or an error when none could be had (taken as no opinion).
    fn review<'a>(
        &'a self,
        id: &'a Identity,
        a: &'a Attributes,
    ) -> BoxFuture<'a, Result<Decision, BoxError>>;
}

/// A request allowed: the identity it acts as and, when impersonating, the real one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    pub identity: Identity,
    pub real: Option<Identity>,
}

/// A request turned away: who it was, when known, and the answer.
#[derive(Debug)]
pub struct Refused {
    /// The identity the refused request acted as; None when it was not authenticated.
    pub identity: Option<Box<Identity>>,
    pub status: Status,
}

impl Refused {
    fn of(identity: Identity, status: Status) -> Self {
        Self {
            identity: Some(Box::new(identity)),
            status,
        }
    }
}

/// A refusal before anyone was authenticated.
impl From<Status> for Refused {
    fn from(status: Status) -> Self {
        Self {
            identity: None,
            status,
        }
    }
}

/// The chain of authorizers.
pub struct Authorizer {
    modes: Vec<AuthzMode>,
    policy: ArcSwap<Policy>,
    policy_file: Option<PathBuf>,
    /// Set once, when cluster mode starts with `Webhook`.
    access_review: OnceLock<Box<dyn AccessReview>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("modes", &self.modes)
            .field("policy_file", &self.policy_file)
            .field("access_review", &self.access_review.get().is_some())
            .finish_non_exhaustive()
    }
}

impl Reload for Authorizer {
    fn watched(&self) -> Vec<Watched> {
        self.policy_file()
            .map(|p| Watched {
                what: "RBAC policy",
                files: vec![p.clone()],
            })
            .into_iter()
            .collect()
    }

    fn reload(&self, _: &str) -> Result<(), BoxError> {
        Ok(Authorizer::reload(self)?)
    }
}

impl Authorizer {
    /// Builds the chain; loads the RBAC policy when `RBAC` is one of the modes.
    pub fn new(modes: Vec<AuthzMode>, policy_file: Option<PathBuf>) -> Result<Self, PolicyError> {
        let policy = match (&policy_file, modes.contains(&AuthzMode::Rbac)) {
            (Some(path), true) => Policy::load(path)?,
            _ => Policy::default(),
        };
        Ok(Self {
            modes,
            policy: ArcSwap::from_pointee(policy),
            policy_file,
            access_review: OnceLock::new(),
        })
    }

    /// Asks `reviewer` about what no other mode allows, when `Webhook` is one of the modes.
    /// Only the first call takes effect.
    pub fn set_access_review(&self, reviewer: Box<dyn AccessReview>) {
        if self.access_review.set(reviewer).is_err() {
            tracing::debug!("access review already set; kept the first");
        }
    }

    /// Applies impersonation to the authenticated identity `real`, then authorizes `a` for
    /// the identity the request acts as; with `Webhook`, what no other mode allows is asked
    /// of the access review. Refusals carry the identity they concern (the real one when
    /// impersonation is refused).
    pub async fn admit(
        &self,
        real: Identity,
        headers: &HeaderMap,
        a: &Attributes,
    ) -> Result<Admitted, Refused> {
        // Without Impersonate-* headers (nearly always) the real identity is used as it is,
        // neither cloned nor compared.
        let (identity, real) = if impersonation::requested(headers) {
            let identity = match impersonation::apply(self, real.clone(), headers) {
                Ok(identity) => identity,
                Err(status) => return Err(Refused::of(real, status)),
            };
            let real = (identity != real).then_some(real);
            (identity, real)
        } else {
            (real, None)
        };
        if self.allows(&identity, a) {
            return Ok(Admitted { identity, real });
        }
        let mut message = forbidden_message(&identity, a);
        if let (true, Some(reviewer)) = (self.webhook(), self.access_review.get()) {
            // The review's future is boxed: this network round trip is rare, and would
            // otherwise enlarge every request's future.
            match reviewer.review(&identity, a).await {
                Ok(decision) => {
                    if !decision.reason.is_empty() {
                        message = format!("{message}: {}", decision.reason);
                    }
                    if decision.allowed {
                        return Ok(Admitted { identity, real });
                    }
                }
                Err(e) => tracing::warn!(error = %e, "SubjectAccessReview failed; no opinion"),
            }
        }
        Err(Refused::of(identity, Status::forbidden(message)))
    }

    /// The policy file to watch, when RBAC is on.
    pub fn policy_file(&self) -> Option<&PathBuf> {
        self.policy_file
            .as_ref()
            .filter(|_| self.modes.contains(&AuthzMode::Rbac))
    }

    /// Loads the policy file again; on error the old policy stays (and [`Reload`]).
    pub fn reload(&self) -> Result<(), PolicyError> {
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

    /// An access review that answers one decision, or fails; counts the calls.
    struct FakeReview {
        answer: Result<Decision, &'static str>,
        calls: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl AccessReview for FakeReview {
        fn review<'a>(
            &'a self,
            _id: &'a Identity,
            _a: &'a Attributes,
        ) -> BoxFuture<'a, Result<Decision, BoxError>> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let answer = self.answer.clone().map_err(BoxError::from);
            Box::pin(async move { answer })
        }
    }

    fn webhook(
        modes: Vec<AuthzMode>,
        answer: Result<Decision, &'static str>,
    ) -> (Authorizer, Arc<std::sync::atomic::AtomicUsize>) {
        let calls = Arc::default();
        let authz = Authorizer::new(modes, None).unwrap();
        authz.set_access_review(Box::new(FakeReview {
            answer,
            calls: Arc::clone(&calls),
        }));
        (authz, calls)
    }

    fn decision(allowed: bool, reason: &str) -> Decision {
        Decision {
            allowed,
            denied: false,
            reason: reason.into(),
        }
    }

    fn calls(n: &std::sync::atomic::AtomicUsize) -> usize {
        n.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[tokio::test]
    async fn admit_allows_without_asking_the_review() {
        let (authz, asked) = webhook(
            vec![AuthzMode::AlwaysAllow, AuthzMode::Webhook],
            Ok(decision(false, "")),
        );
        let alice = Identity::new("alice", vec![]);
        let admitted = authz
            .admit(
                alice.clone(),
                &HeaderMap::new(),
                &attrs(Method::GET, "/apis"),
            )
            .await
            .unwrap();
        assert_eq!(
            admitted,
            Admitted {
                identity: alice,
                real: None
            }
        );
        assert_eq!(calls(&asked), 0);
    }

    #[tokio::test]
    async fn admit_asks_the_review_for_what_no_mode_allows() {
        let bob = Identity::new("bob", vec![]);
        let a = attrs(Method::GET, "/api/v1/nodes");
        let (authz, asked) = webhook(vec![AuthzMode::Webhook], Ok(decision(true, "")));
        let admitted = authz
            .admit(bob.clone(), &HeaderMap::new(), &a)
            .await
            .unwrap();
        assert_eq!(admitted.identity, bob);
        assert_eq!(calls(&asked), 1);

        let (authz, _) = webhook(vec![AuthzMode::Webhook], Ok(decision(false, "no RBAC")));
        let refused = authz
            .admit(bob.clone(), &HeaderMap::new(), &a)
            .await
            .unwrap_err();
        assert_eq!(refused.status.code(), http::StatusCode::FORBIDDEN);
        assert_eq!(
            refused.status.message(),
            format!("{}: no RBAC", forbidden_message(&bob, &a))
        );
        assert_eq!(refused.identity.as_deref(), Some(&bob));

        // A review that fails is no opinion: refused with the plain message.
        let (authz, asked) = webhook(vec![AuthzMode::Webhook], Err("unreachable"));
        let refused = authz
            .admit(bob.clone(), &HeaderMap::new(), &a)
            .await
            .unwrap_err();
        assert_eq!(refused.status.message(), forbidden_message(&bob, &a));
        assert_eq!(calls(&asked), 1);

        // Without `Webhook` among the modes the review is never asked.
        let (authz, asked) = webhook(vec![AuthzMode::AlwaysDeny], Ok(decision(true, "")));
        assert!(authz.admit(bob, &HeaderMap::new(), &a).await.is_err());
        assert_eq!(calls(&asked), 0);
    }

    #[tokio::test]
    async fn admit_impersonates_and_keeps_the_real_identity() {
        let root = Identity::new("root", vec!["system:masters".into()]);
        let authz = Authorizer::new(vec![AuthzMode::AlwaysDeny], None).unwrap();
        let mut h = HeaderMap::new();
        h.insert("impersonate-user", "carol".parse().unwrap());
        let a = attrs(Method::GET, "/apis");
        // Carol herself is allowed nothing: refused as carol.
        let refused = authz.admit(root.clone(), &h, &a).await.unwrap_err();
        assert_eq!(
            refused.identity.as_deref().map(|i| i.user.as_str()),
            Some("carol")
        );
        assert_eq!(
            refused.status.message(),
            "forbidden: User \"carol\" cannot get path \"/apis\""
        );
        let open = Authorizer::new(vec![AuthzMode::AlwaysAllow], None).unwrap();
        let admitted = open.admit(root.clone(), &h, &a).await.unwrap();
        assert_eq!(admitted.identity.user, "carol");
        assert_eq!(admitted.identity.groups, vec![crate::authn::AUTHENTICATED]);
        assert_eq!(admitted.real, Some(root));
        // A refused impersonation is refused as the real user.
        let alice = Identity::new("alice", vec![]);
        let mut bad = HeaderMap::new();
        bad.insert("impersonate-group", "x".parse().unwrap());
        let refused = open.admit(alice.clone(), &bad, &a).await.unwrap_err();
        assert_eq!(refused.status.code(), http::StatusCode::BAD_REQUEST);
        assert_eq!(refused.identity.as_deref(), Some(&alice));
    }

    #[test]
    fn policy_errors_keep_their_source() {
        let e = Authorizer::new(
            vec![AuthzMode::Rbac],
            Some(PathBuf::from("/nonexistent/policy.yaml")),
        )
        .unwrap_err();
        assert!(matches!(e, PolicyError::Read { .. }), "{e:?}");
        assert!(std::error::Error::source(&e).is_some());
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
