//! Authorization of authenticated requests: a chain of authorizers asked in order, as
//! kube-apiserver's union authorizer asks them, from `--authorization-config` (kube's
//! `AuthorizationConfiguration`, [`config`]; reloaded when it changes) or from the older
//! `--authorization-mode` list. Each authorizer allows, denies or has no opinion; the first
//! that allows or denies decides, and a request nobody allows is refused: 403 with the
//! reasons given, or 500 when an authorizer failed (kube's `InternalError`). The authorizers:
//! `AlwaysAllow`, `AlwaysDeny` (no opinion, as upstream), `RBAC` from a policy file that
//! reloads when it changes, and webhooks ([`webhook`]: SubjectAccessReview with match
//! conditions, a failure policy and a cache). Members of `system:masters` are always allowed.
//! Impersonation ([`impersonation`]) is decided here too: [`Authorizer::admit`] is the one
//! entry that turns an authenticated identity into the admitted one. A refusal's message
//! reads as kube-apiserver's.

pub mod config;
mod flags;
pub mod impersonation;
pub mod rbac;
mod selector;
mod settings;
pub mod webhook;
pub use flags::AuthzFlags;
pub use settings::{AuthzSettings, LinkSettings};

pub use rbac::PolicyError;

use apigw_core::body::BoxError;
use apigw_core::errors::Status;
use apigw_core::reload::{Reload, Watched};
use apigw_core::BoxFuture;
use apigw_request::Attributes;
use apigw_request::Identity;
use arc_swap::ArcSwap;
use http::HeaderMap;
use impersonation::Applied;
use rbac::Policy;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// An authorizer's answer, as kube's `authorizer.Decision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny,
    NoOpinion,
}

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

pub use webhook::AccessReview;

/// The reason `AlwaysDeny` gives, as upstream's.
const EVERYTHING_FORBIDDEN: &str = "Everything is forbidden.";

/// One authorizer of the chain.
#[derive(Debug)]
pub enum Link {
    AlwaysAllow,
    /// No opinion on anything (kube's `AlwaysDeny` denies nothing outright either).
    AlwaysDeny,
    /// The RBAC policy of `--rbac-policy-file`.
    Rbac,
    Webhook(Arc<webhook::Webhook>),
}

/// The chain's decision on a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainDecision {
    pub verdict: Verdict,
    /// The deciding authorizer's reason; when none decided, every reason given, one a line.
    pub reason: String,
    /// What authorizers that could not decide reported (upstream's aggregate error).
    pub errors: Vec<String>,
}

/// Who a request acts as: the identity and, when impersonating, the real one; `warning` is
/// the `Warning` header the client gets when its impersonation headers were set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acting {
    pub identity: Arc<Identity>,
    pub real: Option<Arc<Identity>>,
    pub warning: Option<&'static str>,
}

/// A request turned away: who it was, when known, and the answer.
#[derive(Debug)]
pub struct Refused {
    /// The identity the refused request acted as; None when it was not authenticated.
    pub identity: Option<Arc<Identity>>,
    pub status: Status,
}

impl Refused {
    pub fn of(identity: Arc<Identity>, status: Status) -> Self {
        Self {
            identity: Some(identity),
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
    /// Swapped whole when the authorization configuration file changes.
    chain: ArcSwap<Vec<Link>>,
    policy: ArcSwap<Policy>,
    policy_file: Option<PathBuf>,
    /// `--authorization-config`, read again when it changes.
    config_file: Option<PathBuf>,
    /// Where `--authorization-mode=Webhook` sends its reviews: set when cluster mode starts.
    cluster_sender: Arc<LateSender>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("chain", &self.chain.load())
            .field("policy_file", &self.policy_file)
            .field("config_file", &self.config_file)
            .finish_non_exhaustive()
    }
}

/// An [`AccessReview`] given later (cluster mode starts after the gateway is built).
#[derive(Default)]
struct LateSender(OnceLock<Box<dyn AccessReview>>);

impl AccessReview for LateSender {
    fn review<'a>(
        &'a self,
        review: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<serde_json::Value, BoxError>> {
        match self.0.get() {
            Some(sender) => sender.review(review),
            None => Box::pin(async { Err("cluster mode has not started yet".into()) }),
        }
    }
}

const RBAC_POLICY: &str = "RBAC policy";
const AUTHORIZATION_CONFIG: &str = "authorization config";

impl Reload for Authorizer {
    fn watched(&self) -> Vec<Watched> {
        let set = |what, path: Option<&PathBuf>| {
            path.map(|p| Watched {
                what,
                files: vec![p.clone()],
            })
        };
        [
            set(RBAC_POLICY, self.policy_file()),
            set(AUTHORIZATION_CONFIG, self.config_file.as_ref()),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn reload(&self, what: &str) -> Result<(), BoxError> {
        match what {
            AUTHORIZATION_CONFIG => Ok(self.reload_config()?),
            _ => Ok(self.reload_policy()?),
        }
    }
}

impl Authorizer {
    /// The chain of `--authorization-mode` (`modes`, in order); loads the RBAC policy when
    /// `RBAC` is one of them.
    pub fn new(modes: Vec<AuthzMode>, policy_file: Option<PathBuf>) -> Result<Self, PolicyError> {
        let links = modes.into_iter().map(LinkSettings::from).collect();
        Self::with_links(links, policy_file, None)
    }

    /// The chain `links` describe; `config_file` is the authorization configuration they came
    /// from, read again when it changes.
    pub fn with_links(
        links: Vec<LinkSettings>,
        policy_file: Option<PathBuf>,
        config_file: Option<PathBuf>,
    ) -> Result<Self, PolicyError> {
        let rbac = links.iter().any(|l| matches!(l, LinkSettings::Rbac));
        let policy = match (&policy_file, rbac) {
            (Some(path), true) => Policy::load(path)?,
            _ => Policy::default(),
        };
        let cluster_sender = Arc::new(LateSender::default());
        let chain = build_chain(links, &cluster_sender);
        Ok(Self {
            chain: ArcSwap::from_pointee(chain),
            policy: ArcSwap::from_pointee(policy),
            policy_file,
            config_file,
            cluster_sender,
        })
    }

    /// Sends the reviews of `--authorization-mode=Webhook` with `sender` (cluster mode). Only
    /// the first call takes effect.
    pub fn set_access_review(&self, sender: Box<dyn AccessReview>) {
        if self.cluster_sender.0.set(sender).is_err() {
            tracing::debug!("access review already set; kept the first");
        }
    }

    /// Reads `--authorization-config` again and puts its chain in force; on error the chain
    /// in force stays.
    pub fn reload_config(&self) -> Result<(), config::ConfigFileError> {
        let Some(path) = &self.config_file else {
            return Ok(());
        };
        let links = config::load(path)?;
        self.chain
            .store(Arc::new(build_chain(links, &self.cluster_sender)));
        Ok(())
    }

    /// The chain's decision on `a` for `id`: `system:masters` first, then each authorizer in
    /// order until one allows or denies.
    pub async fn decide(&self, id: &Identity, a: &Attributes) -> ChainDecision {
        self.decide_with(id, a, None).await
    }

    /// [`Self::decide`] for one of impersonation's checks: `AlwaysAllow` has no opinion on
    /// them (a gateway left open must not let anyone become anyone; see [`impersonation`]).
    pub async fn decide_impersonation(&self, id: &Identity, a: &Attributes) -> ChainDecision {
        self.decide_with(id, a, Some("AlwaysAllow grants no impersonation"))
            .await
    }

    /// [`Self::decide`] for a SelfSubjectAccessReview: where `AlwaysAllow` leaves the decision
    /// to the backends, the gateway does not answer it on their behalf (no opinion, and why).
    pub async fn decide_review(&self, id: &Identity, a: &Attributes) -> ChainDecision {
        self.decide_with(id, a, Some(LEFT_TO_BACKENDS)).await
    }

    /// True when the chain starts with `AlwaysAllow`: every request passes the door and only
    /// the backends decide (the dev default).
    pub fn left_to_backends(&self) -> bool {
        matches!(self.chain.load().first(), Some(Link::AlwaysAllow))
    }

    /// `always_allow`: None when `AlwaysAllow` allows, else the reason it gives for having no
    /// opinion.
    async fn decide_with(
        &self,
        id: &Identity,
        a: &Attributes,
        always_allow: Option<&'static str>,
    ) -> ChainDecision {
        let mut out = ChainDecision {
            verdict: Verdict::NoOpinion,
            reason: String::new(),
            errors: Vec::new(),
        };
        if is_master(id) {
            out.verdict = Verdict::Allow;
            return out;
        }
        let chain = self.chain.load_full();
        let mut reasons = Vec::new();
        for link in chain.iter() {
            let (verdict, reason, error) = match link {
                Link::AlwaysAllow => match always_allow {
                    None => (Verdict::Allow, String::new(), None),
                    Some(why) => (Verdict::NoOpinion, why.into(), None),
                },
                Link::AlwaysDeny => (Verdict::NoOpinion, EVERYTHING_FORBIDDEN.into(), None),
                Link::Rbac if self.policy.load().allows(id, a) => {
                    (Verdict::Allow, String::new(), None)
                }
                Link::Rbac => (Verdict::NoOpinion, String::new(), None),
                // Boxed: this network round trip is rare, and would otherwise enlarge every
                // request's future.
                Link::Webhook(hook) => {
                    let answer = Box::pin(hook.decide(id, a)).await;
                    (answer.verdict, answer.reason, answer.error)
                }
            };
            // The authorizer that decides decides alone: the errors of those before it are
            // dropped, as upstream's union does.
            if verdict != Verdict::NoOpinion {
                out.verdict = verdict;
                out.reason = reason;
                out.errors = error.into_iter().collect();
                return out;
            }
            out.errors.extend(error);
            if !reason.is_empty() {
                reasons.push(reason);
            }
        }
        out.reason = reasons.join("\n");
        out
    }

    /// Applies impersonation to the authenticated identity `real`, then authorizes `a` for
    /// the identity the request acts as; with `Webhook`, what no other mode allows is asked
    /// of the access review. Refusals carry the identity they concern (the real one when
    /// impersonation is refused).
    pub async fn admit(
        &self,
        real: Arc<Identity>,
        headers: &HeaderMap,
        a: &Attributes,
    ) -> Result<Acting, Refused> {
        let acting = self.impersonate(real, headers, a).await?;
        self.authorize_as(acting, a).await
    }

    /// Applies impersonation to the authenticated identity `real`: who the request acts as.
    pub async fn impersonate(
        &self,
        real: Arc<Identity>,
        headers: &HeaderMap,
        a: &Attributes,
    ) -> Result<Acting, Refused> {
        let acting = |identity, real, warning| Acting {
            identity,
            real,
            warning,
        };
        // Without Impersonate-* headers (nearly always) the real identity is used as it is,
        // neither cloned nor compared.
        if !impersonation::requested(headers) {
            return Ok(acting(real, None, None));
        }
        match Box::pin(impersonation::apply(self, real.clone(), headers, a)).await {
            Ok(Applied::Real(real)) => Ok(acting(real, None, None)),
            Ok(Applied::Ignored(real)) => {
                Ok(acting(real, None, Some(impersonation::IGNORED_WARNING)))
            }
            Ok(Applied::As(identity)) => {
                let real = (identity != *real).then_some(real);
                Ok(acting(Arc::new(identity), real, None))
            }
            Err(status) => Err(Refused::of(real, status)),
        }
    }

    /// Authorizes `acting`'s request `a`.
    pub async fn authorize_as(&self, acting: Acting, a: &Attributes) -> Result<Acting, Refused> {
        let decision = self.decide(&acting.identity, a).await;
        match refusal(&acting.identity, a, decision) {
            None => Ok(acting),
            Some(status) => Err(Refused::of(acting.identity, status)),
        }
    }

    /// The policy file to watch, when RBAC is on.
    pub fn policy_file(&self) -> Option<&PathBuf> {
        self.policy_file.as_ref().filter(|_| self.rbac())
    }

    /// True when RBAC is one of the authorizers.
    fn rbac(&self) -> bool {
        self.chain.load().iter().any(|l| matches!(l, Link::Rbac))
    }

    /// Loads the policy file again; on error the old policy stays (and [`Reload`]).
    pub fn reload_policy(&self) -> Result<(), PolicyError> {
        if let Some(path) = self.policy_file() {
            self.policy.store(Arc::new(Policy::load(path)?));
        }
        Ok(())
    }

    /// The RBAC policy in force (empty when RBAC is off).
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.load_full()
    }

    /// True when the authorizers answered synchronously (all but webhooks) allow `a` for
    /// `id`.
    pub fn allows(&self, id: &Identity, a: &Attributes) -> bool {
        is_master(id)
            || self.chain.load().iter().any(|link| match link {
                Link::AlwaysAllow => true,
                Link::Rbac => self.policy.load().allows(id, a),
                Link::AlwaysDeny | Link::Webhook(_) => false,
            })
    }

    /// True when a webhook asks the cluster's SubjectAccessReview API with the cluster mode's
    /// client (`--authorization-mode=Webhook`).
    pub fn webhook(&self) -> bool {
        self.chain.load().iter().any(|l| {
            matches!(l, Link::Webhook(w) if w.settings.connection == webhook::Connection::ClusterMode)
        })
    }

    /// Allows `a` for `id`, or refuses it with kube-apiserver's message.
    pub fn authorize(&self, id: &Identity, a: &Attributes) -> Result<(), Status> {
        if self.allows(id, a) {
            Ok(())
        } else {
            Err(forbidden(id, a, ""))
        }
    }
}

/// The chain `links` describe; the cluster mode's webhooks send with `cluster_sender`.
fn build_chain(links: Vec<LinkSettings>, cluster_sender: &Arc<LateSender>) -> Vec<Link> {
    links
        .into_iter()
        .map(|link| match link {
            LinkSettings::AlwaysAllow => Link::AlwaysAllow,
            LinkSettings::AlwaysDeny => Link::AlwaysDeny,
            LinkSettings::Rbac => Link::Rbac,
            LinkSettings::Webhook(settings) => {
                let sender: Arc<dyn AccessReview> = match &settings.connection {
                    webhook::Connection::ClusterMode => cluster_sender.clone(),
                    other => Arc::new(webhook::KubeSender::new(other)),
                };
                Link::Webhook(Arc::new(webhook::Webhook::new(settings, sender)))
            }
        })
        .collect()
}

/// The answer to a request the chain did not allow, None when it did: 403 with the reasons
/// given, or 500 when an authorizer failed, as kube's authorization filter answers.
pub fn refusal(id: &Identity, a: &Attributes, decision: ChainDecision) -> Option<Status> {
    if decision.verdict == Verdict::Allow {
        return None;
    }
    if !decision.errors.is_empty() {
        let errors = decision.errors.join(", ");
        tracing::warn!(user = %id.user, %errors, "authorization failed");
        return Some(Status::internal(format!(
            "Internal error occurred: {errors}"
        )));
    }
    Some(forbidden(id, a, &decision.reason))
}

/// kube's 403 for `a` refused to `id`: its message (with the authorizers' `reason`, when they
/// gave one) and the details kube's authorization filter gives (the resource's group, the
/// resource as `kind`, the name; none of them for a non-resource path).
pub fn forbidden(id: &Identity, a: &Attributes, reason: &str) -> Status {
    let mut message = forbidden_message(id, a);
    if !reason.is_empty() {
        message = format!("{message}: {reason}");
    }
    let mut details = serde_json::Map::new();
    if a.resource_request {
        for (key, value) in [
            ("name", &a.name),
            ("group", &a.group),
            ("kind", &a.resource),
        ] {
            if !value.is_empty() {
                details.insert(key.into(), value.as_str().into());
            }
        }
    }
    Status::forbidden(message).with_details(serde_json::Value::Object(details))
}

/// Why a gateway whose chain starts with `AlwaysAllow` has no opinion of its own.
pub const LEFT_TO_BACKENDS: &str = "authorization is left to the backends: apigw allows every \
     request (AlwaysAllow) and each backend decides";

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

    /// An access review that answers one status, or fails; counts the calls.
    struct FakeReview {
        answer: Result<serde_json::Value, &'static str>,
        calls: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl AccessReview for FakeReview {
        fn review<'a>(
            &'a self,
            _review: &'a serde_json::Value,
        ) -> BoxFuture<'a, Result<serde_json::Value, BoxError>> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let answer = self.answer.clone().map_err(BoxError::from);
            Box::pin(async move { answer })
        }
    }

    fn webhook(
        modes: Vec<AuthzMode>,
        answer: Result<serde_json::Value, &'static str>,
    ) -> (Authorizer, Arc<std::sync::atomic::AtomicUsize>) {
        let calls = Arc::default();
        let authz = Authorizer::new(modes, None).unwrap();
        authz.set_access_review(Box::new(FakeReview {
            answer,
            calls: Arc::clone(&calls),
        }));
        (authz, calls)
    }

    fn decision(allowed: bool, reason: &str) -> serde_json::Value {
        serde_json::json!({"status": {"allowed": allowed, "reason": reason}})
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
                alice.clone().into(),
                &HeaderMap::new(),
                &attrs(Method::GET, "/apis"),
            )
            .await
            .unwrap();
        assert_eq!(
            admitted,
            Acting {
                identity: alice.into(),
                real: None,
                warning: None,
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
            .admit(bob.clone().into(), &HeaderMap::new(), &a)
            .await
            .unwrap();
        assert_eq!(*admitted.identity, bob);
        assert_eq!(calls(&asked), 1);

        let (authz, _) = webhook(vec![AuthzMode::Webhook], Ok(decision(false, "no RBAC")));
        let refused = authz
            .admit(bob.clone().into(), &HeaderMap::new(), &a)
            .await
            .unwrap_err();
        assert_eq!(refused.status.code(), http::StatusCode::FORBIDDEN);
        assert_eq!(
            refused.status.message(),
            format!("{}: no RBAC", forbidden_message(&bob, &a))
        );
        assert_eq!(refused.identity.as_deref(), Some(&bob));

        // A review that fails is no opinion with an error: when nothing else allows, a 500
        // naming the failure, as kube-apiserver's authorization filter answers.
        let (authz, asked) = webhook(vec![AuthzMode::Webhook], Err("unreachable"));
        let refused = authz
            .admit(bob.clone().into(), &HeaderMap::new(), &a)
            .await
            .unwrap_err();
        assert_eq!(
            refused.status.code(),
            http::StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            refused.status.message(),
            "Internal error occurred: webhook \"webhook\": unreachable"
        );
        assert_eq!(calls(&asked), 1);
        // ... and a later authorizer that allows rescues it.
        let (authz, _) = webhook(
            vec![AuthzMode::Webhook, AuthzMode::AlwaysAllow],
            Err("unreachable"),
        );
        assert!(authz
            .admit(bob.clone().into(), &HeaderMap::new(), &a)
            .await
            .is_ok());

        // Without `Webhook` among the modes the review is never asked.
        let (authz, asked) = webhook(vec![AuthzMode::AlwaysDeny], Ok(decision(true, "")));
        assert!(authz
            .admit(bob.into(), &HeaderMap::new(), &a)
            .await
            .is_err());
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
        let refused = authz.admit(root.clone().into(), &h, &a).await.unwrap_err();
        assert_eq!(
            refused.identity.as_deref().map(|i| i.user.as_str()),
            Some("carol")
        );
        assert_eq!(
            refused.status.message(),
            "forbidden: User \"carol\" cannot get path \"/apis\": Everything is forbidden."
        );
        let open = Authorizer::new(vec![AuthzMode::AlwaysAllow], None).unwrap();
        let admitted = open.admit(root.clone().into(), &h, &a).await.unwrap();
        assert_eq!(admitted.identity.user, "carol");
        assert_eq!(admitted.identity.groups, vec![apigw_request::AUTHENTICATED]);
        assert_eq!(admitted.real.as_deref(), Some(&root));
        // A refused impersonation is refused as the real user.
        let alice = Identity::new("alice", vec![]);
        let mut bad = HeaderMap::new();
        bad.insert("impersonate-group", "x".parse().unwrap());
        let refused = open
            .admit(alice.clone().into(), &bad, &a)
            .await
            .unwrap_err();
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
