//! Impersonation (`Impersonate-User`, `-Group`, `-Uid`, `-Extra-<key>`) as kube-apiserver 1.36
//! decides it, with constrained impersonation: the modes are tried in upstream's order
//! (arbitrary node, service account, user info, then the legacy `impersonate` verb) and the
//! first that grants the whole identity wins; when none does, the first mode's refusal is the
//! answer (`User "bob" cannot impersonate-on:user-info:list resource "flunders"...`). A
//! constrained mode needs two grants: `impersonate-on:<mode>:<verb>` on what the request does,
//! and `impersonate:<mode>` on each attribute asked for. Every check goes through the whole
//! authorizer chain (RBAC, webhooks), so a SubjectAccessReview webhook decides impersonation as
//! it decides everything else. One deliberate difference: `AlwaysAllow` grants no
//! impersonation (a gateway left open must not let anyone become anyone). Where the chain
//! starts with it (the door leaves authorization to the backends, the dev default) the headers
//! are removed and the request goes on as the real user, as the outside contract has it; where
//! it comes later, it has no opinion on impersonation. The headers never reach a backend, and
//! a client whose headers were set aside is told so in a `Warning` (kubectl prints it).
//! Upstream's associated-node mode (a node's service account impersonating its node) is not
//! offered.

use super::{forbidden, Authorizer};
use apigw_core::errors::Status;
use apigw_request::Attributes;
use apigw_request::{Identity, ANONYMOUS_USER, AUTHENTICATED, UNAUTHENTICATED};
use http::HeaderMap;
use std::collections::BTreeMap;
use std::sync::Arc;

const AUTHENTICATION: &str = "authentication.k8s.io";
const MASTERS: &str = "system:masters";
/// From this many groups or extra values on, a constrained mode first asks for all at once.
const MANY: usize = 4;

/// The identity the headers ask for.
#[derive(Debug, Clone, Default)]
struct Wanted {
    user: String,
    uid: Option<String>,
    groups: Vec<String>,
    extra: BTreeMap<String, Vec<String>>,
}

/// True when the request carries any `Impersonate-*` header.
pub fn requested(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|name| name.as_str().starts_with("impersonate-"))
}

/// What the headers ask for; None without `Impersonate-User` and anything else; 400 for groups,
/// a UID or extras without a user, in kube's words.
fn wanted(headers: &HeaderMap) -> Result<Option<Wanted>, Status> {
    let text = |v: &http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    let mut w = Wanted {
        user: headers
            .get("impersonate-user")
            .map(text)
            .unwrap_or_default(),
        uid: headers
            .get("impersonate-uid")
            .map(text)
            .filter(|u| !u.is_empty()),
        groups: headers
            .get_all("impersonate-group")
            .iter()
            .map(text)
            .collect(),
        extra: BTreeMap::new(),
    };
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix("impersonate-extra-") {
            let key = percent_encoding::percent_decode_str(key)
                .decode_utf8_lossy()
                .into_owned();
            w.extra.entry(key).or_default().push(text(value));
        }
    }
    if !w.user.is_empty() {
        return Ok(Some(w));
    }
    if w.uid.is_none() && w.groups.is_empty() && w.extra.is_empty() {
        return Ok(None);
    }
    Err(Status::bad_request(format!(
        "requested {} without impersonating a user name",
        go_default_info(&w)
    )))
}

/// `w` as Go's `%#v` prints a `*user.DefaultInfo`, which kube's 400 quotes.
fn go_default_info(w: &Wanted) -> String {
    let list = |v: &[String]| {
        let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
        format!("[]string{{{}}}", items.join(", "))
    };
    let groups = if w.groups.is_empty() {
        "[]string(nil)".to_string()
    } else {
        list(&w.groups)
    };
    let extra = if w.extra.is_empty() {
        "map[string][]string(nil)".to_string()
    } else {
        let entries: Vec<String> = w
            .extra
            .iter()
            .map(|(k, v)| format!("{k:?}:{}", list(v)))
            .collect();
        format!("map[string][]string{{{}}}", entries.join(", "))
    };
    format!(
        "&user.DefaultInfo{{Name:{:?}, UID:{:?}, Groups:{groups}, Extra:{extra}}}",
        w.user,
        w.uid.as_deref().unwrap_or_default()
    )
}

/// Go's `%q` of a string list: `["a" "b"]`.
fn go_list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(" "))
}

/// The identity the request acts as: `real` when it asks for none, else the one it may
/// impersonate for `request` (what the request does), or kube's refusal.
pub async fn apply(
    authz: &Authorizer,
    real: Arc<Identity>,
    headers: &HeaderMap,
    request: &Attributes,
) -> Result<Applied, Status> {
    let Some(wanted) = wanted(headers)? else {
        return Ok(Applied::Real(real));
    };
    if authz.left_to_backends() && !super::is_master(&real) {
        tracing::debug!(user = %real.user, "impersonation headers removed: the door leaves authorization to the backends");
        return Ok(Applied::Ignored(real));
    }
    let mut first: Option<Status> = None;
    for mode in [
        Mode::ArbitraryNode,
        Mode::ServiceAccount,
        Mode::UserInfo,
        Mode::Legacy,
    ] {
        match mode.check(authz, &real, &wanted, request).await {
            Ok(Some(identity)) => {
                tracing::debug!(real = %real.user, as_user = %identity.user, mode = mode.verb(), "impersonating");
                return Ok(Applied::As(identity));
            }
            Ok(None) => {}
            Err(refused) => {
                first.get_or_insert(refused);
            }
        }
    }
    Err(first.unwrap_or_else(|| Status::forbidden("all impersonation modes failed")))
}

/// What the `Impersonate-*` headers made of a request's identity.
#[derive(Debug)]
pub enum Applied {
    /// No impersonation asked for: the real identity.
    Real(Arc<Identity>),
    /// Asked for where the door leaves authorization to the backends: set aside, the request
    /// goes on as the real identity.
    Ignored(Arc<Identity>),
    /// Granted: the identity to act as.
    As(Identity),
}

/// The `Warning` a client whose impersonation was set aside receives (RFC 7234's code 299,
/// as kube-apiserver writes its warnings).
pub const IGNORED_WARNING: &str = "299 - \"Impersonate-* headers ignored: this door leaves authorization to the backends (AlwaysAllow first), which grants no impersonation\"";

/// One of upstream's impersonation modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    ArbitraryNode,
    ServiceAccount,
    UserInfo,
    Legacy,
}

/// `system:node:<name>` with a valid node name.
fn node_name(user: &str) -> Option<&str> {
    let name = user.strip_prefix("system:node:")?;
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    valid.then_some(name)
}

/// `system:serviceaccount:<namespace>:<name>`.
fn service_account(user: &str) -> Option<(&str, &str)> {
    let (ns, name) = user
        .strip_prefix("system:serviceaccount:")?
        .split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

fn attempt(verb: &str, group: &str, resource: &str, name: &str) -> Attributes {
    Attributes {
        resource_request: true,
        verb: verb.into(),
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
        name: name.into(),
        ..Attributes::default()
    }
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::ArbitraryNode => "arbitrary-node",
            Self::ServiceAccount => "serviceaccount",
            Self::UserInfo => "user-info",
            Self::Legacy => "",
        }
    }

    /// The verb each attribute needs.
    fn verb(self) -> String {
        match self {
            Self::Legacy => "impersonate".into(),
            mode => format!("impersonate:{}", mode.name()),
        }
    }

    fn constrained(self) -> bool {
        self != Self::Legacy
    }

    /// Whether this mode applies to what is asked for.
    fn applies(self, w: &Wanted) -> bool {
        let only_user = w.uid.is_none() && w.groups.is_empty() && w.extra.is_empty();
        match self {
            Self::ArbitraryNode => only_user && node_name(&w.user).is_some(),
            Self::ServiceAccount => only_user && service_account(&w.user).is_some(),
            Self::UserInfo => node_name(&w.user).is_none() && service_account(&w.user).is_none(),
            Self::Legacy => true,
        }
    }

    /// The identity this mode grants, None when it does not apply, or its refusal.
    async fn check(
        self,
        authz: &Authorizer,
        real: &Identity,
        w: &Wanted,
        request: &Attributes,
    ) -> Result<Option<Identity>, Status> {
        if !self.applies(w) {
            return Ok(None);
        }
        if self.constrained() {
            let mut on = request.clone();
            on.verb = format!("impersonate-on:{}:{}", self.name(), request.verb);
            allowed(authz, real, &on).await?;
        }
        let verb = self.verb();
        // Users and groups are core resources to the legacy verb, authentication.k8s.io ones
        // to the constrained verbs.
        let core = if self.constrained() {
            AUTHENTICATION
        } else {
            ""
        };
        let mut groups = w.groups.clone();
        let mut user = attempt(&verb, core, "users", &w.user);
        if let (true, Some(node)) = (self.constrained(), node_name(&w.user)) {
            user.resource = "nodes".into();
            user.name = node.into();
            if !w.groups.is_empty() {
                let why = format!(
                    "when impersonating a node, cannot impersonate groups {}",
                    go_list(&w.groups)
                );
                return Err(forbidden(real, &user, &why));
            }
            groups = vec!["system:nodes".into()];
        }
        if let Some((ns, name)) = service_account(&w.user) {
            user.resource = "serviceaccounts".into();
            user.namespace = ns.into();
            user.name = name.into();
            if self.constrained() && !w.groups.is_empty() {
                let why = format!(
                    "when impersonating a service account, cannot impersonate groups {}",
                    go_list(&w.groups)
                );
                return Err(forbidden(real, &user, &why));
            }
            if w.groups.is_empty() {
                groups = vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                ];
            }
        }
        allowed(authz, real, &user).await?;
        if let Some(uid) = &w.uid {
            allowed(authz, real, &attempt(&verb, AUTHENTICATION, "uids", uid)).await?;
        }
        if !w.groups.is_empty() {
            let mut each = attempt(&verb, core, "groups", "");
            if self.constrained() {
                if w.groups.iter().any(String::is_empty) {
                    let why = "impersonating the empty string group is not allowed";
                    return Err(forbidden(real, &each, why));
                }
                if w.groups.iter().any(|g| g == MASTERS) {
                    each.name = MASTERS.into();
                    let why = "impersonating the system:masters group is not allowed";
                    return Err(forbidden(real, &each, why));
                }
            }
            let all = self.constrained() && w.groups.len() >= MANY && {
                each.name = "*".into();
                allowed(authz, real, &each).await.is_ok()
            };
            if !all {
                for g in &w.groups {
                    each.name.clone_from(g);
                    allowed(authz, real, &each).await?;
                }
            }
        }
        if !w.extra.is_empty() {
            let mut each = attempt(&verb, AUTHENTICATION, "userextras", "");
            if self.constrained() {
                if let Err(why) = valid_extra(&w.extra) {
                    return Err(forbidden(real, &each, &why));
                }
            }
            let values: usize = w.extra.values().map(Vec::len).sum();
            let all = self.constrained() && (w.extra.len() >= MANY || values >= MANY) && {
                each.subresource = "*".into();
                each.name = "*".into();
                allowed(authz, real, &each).await.is_ok()
            };
            if !all {
                for (key, vals) in &w.extra {
                    each.subresource.clone_from(key);
                    for v in vals {
                        each.name.clone_from(v);
                        allowed(authz, real, &each).await?;
                    }
                }
            }
        }
        if w.user == ANONYMOUS_USER {
            ensure(&mut groups, UNAUTHENTICATED);
        } else if !groups.iter().any(|g| g == UNAUTHENTICATED) {
            ensure(&mut groups, AUTHENTICATED);
        }
        Ok(Some(Identity {
            user: w.user.clone(),
            uid: w.uid.clone(),
            groups,
            extra: w.extra.clone(),
        }))
    }
}

fn ensure(groups: &mut Vec<String>, group: &str) {
    if !groups.iter().any(|g| g == group) {
        groups.push(group.into());
    }
}

/// What constrained impersonation refuses among extras, in kube's words.
fn valid_extra(extra: &BTreeMap<String, Vec<String>>) -> Result<(), String> {
    for (key, values) in extra {
        if key.is_empty() {
            return Err("impersonating the empty string key in extra is not allowed".into());
        }
        let prefixed = key.split_once('/').is_some_and(|(domain, path)| {
            !domain.is_empty() && domain.contains('.') && !path.is_empty()
        });
        if !prefixed {
            return Err(format!(
                "impersonating an invalid key in extra is not allowed: extra.key: Invalid value: {key:?}: must be a domain-prefixed path (such as \"acme.io/foo\")"
            ));
        }
        if *key != key.to_lowercase() {
            return Err(format!(
                "impersonating a non-lowercase key in extra is not allowed: {key:?}"
            ));
        }
        if values.is_empty() {
            return Err("impersonating empty values in extra is not allowed".into());
        }
        if values.iter().any(String::is_empty) {
            return Err("impersonating the empty string value in extra is not allowed".into());
        }
    }
    Ok(())
}

/// Allows `a` for `real` by the whole chain (AlwaysAllow aside), or kube's 403 naming it.
async fn allowed(authz: &Authorizer, real: &Identity, a: &Attributes) -> Result<(), Status> {
    let decision = authz.decide_impersonation(real, a).await;
    if decision.verdict == super::Verdict::Allow {
        return Ok(());
    }
    let why = match (decision.errors.is_empty(), decision.reason.is_empty()) {
        (true, _) => decision.reason,
        (false, true) => decision.errors.join(", "),
        (false, false) => format!("{}: {}", decision.errors.join(", "), decision.reason),
    };
    Err(forbidden(real, a, &why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::Policy;
    use crate::AuthzMode;

    const POLICY: &str = r#"
kind: ClusterRole
metadata: {name: impersonator}
rules:
- {apiGroups: [""], resources: [users], resourceNames: [carol], verbs: [impersonate]}
- {apiGroups: [""], resources: [groups], verbs: [impersonate]}
---
kind: ClusterRoleBinding
metadata: {name: ops-impersonate}
roleRef: {kind: ClusterRole, name: impersonator}
subjects: [{kind: User, name: ops}]
---
kind: ClusterRole
metadata: {name: constrained}
rules:
- {apiGroups: [authentication.k8s.io], resources: [users], resourceNames: [erin], verbs: ["impersonate:user-info"]}
- {apiGroups: [authentication.k8s.io], resources: [groups], verbs: ["impersonate:user-info"]}
- {apiGroups: [wardle.example.com], resources: [flunders], verbs: ["impersonate-on:user-info:get"]}
---
kind: ClusterRoleBinding
metadata: {name: helper-constrained}
roleRef: {kind: ClusterRole, name: constrained}
subjects: [{kind: User, name: helper}]
"#;

    fn authz() -> Authorizer {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, POLICY).unwrap();
        assert!(Policy::load(&path).is_ok());
        Authorizer::new(vec![AuthzMode::Rbac], Some(path)).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    /// GET of a flunder: what the request does, for `impersonate-on:<mode>:get`.
    fn get_flunder() -> Attributes {
        Attributes::from_request(
            &http::Method::GET,
            "/apis/wardle.example.com/v1alpha1/namespaces/ns/flunders/f",
            None,
        )
    }

    fn user(name: &str) -> Arc<Identity> {
        Arc::new(Identity::new(name, vec![AUTHENTICATED.into()]))
    }

    async fn ask(
        authz: &Authorizer,
        who: &str,
        pairs: &[(&str, &str)],
    ) -> Result<Identity, Status> {
        let applied = apply(authz, user(who), &headers(pairs), &get_flunder()).await?;
        Ok(match applied {
            Applied::Real(id) | Applied::Ignored(id) => Identity::clone(&id),
            Applied::As(id) => id,
        })
    }

    #[tokio::test]
    async fn the_legacy_verb_grants_the_identity() {
        let id = ask(
            &authz(),
            "ops",
            &[("impersonate-user", "carol"), ("impersonate-group", "devs")],
        )
        .await
        .unwrap();
        assert_eq!(id.user, "carol");
        assert_eq!(id.groups, vec!["devs", AUTHENTICATED]);
    }

    #[tokio::test]
    async fn constrained_impersonation_needs_both_grants() {
        let id = ask(&authz(), "helper", &[("impersonate-user", "erin")])
            .await
            .unwrap();
        assert_eq!(
            (id.user.as_str(), id.groups.as_slice()),
            ("erin", &[AUTHENTICATED.to_string()][..])
        );
        // The same grant does not cover another verb on the same resource.
        let list = Attributes::from_request(
            &http::Method::GET,
            "/apis/wardle.example.com/v1alpha1/namespaces/ns/flunders",
            None,
        );
        let err = apply(
            &authz(),
            user("helper"),
            &headers(&[("impersonate-user", "erin")]),
            &list,
        )
        .await
        .unwrap_err();
        assert_eq!(err.message(), "flunders.wardle.example.com is forbidden: User \"helper\" cannot impersonate-on:user-info:list resource \"flunders\" in API group \"wardle.example.com\" in the namespace \"ns\"");
        // system:masters is never granted by a constrained mode.
        let err = ask(
            &authz(),
            "helper",
            &[("impersonate-user", "erin"), ("impersonate-group", MASTERS)],
        )
        .await
        .unwrap_err();
        assert!(
            err.message()
                .ends_with("impersonating the system:masters group is not allowed"),
            "{}",
            err.message()
        );
    }

    #[tokio::test]
    async fn a_refusal_is_the_first_modes_as_kube_words_it() {
        // ops has only the legacy verb, for carol: dave is refused, and the answer is the
        // user-info mode's, tried first.
        let err = ask(&authz(), "ops", &[("impersonate-user", "dave")])
            .await
            .unwrap_err();
        assert_eq!(err.code(), http::StatusCode::FORBIDDEN);
        assert_eq!(err.message(), "flunders.wardle.example.com \"f\" is forbidden: User \"ops\" cannot impersonate-on:user-info:get resource \"flunders\" in API group \"wardle.example.com\" in the namespace \"ns\"");
        // A UID needs its own grant.
        assert!(ask(
            &authz(),
            "ops",
            &[("impersonate-user", "carol"), ("impersonate-uid", "1")]
        )
        .await
        .is_err());
        assert!(ask(&authz(), "bob", &[("impersonate-user", "carol")])
            .await
            .is_err());
    }

    #[tokio::test]
    async fn always_allow_grants_no_impersonation_and_masters_may() {
        // First in the chain: the door decides nothing, and the headers are removed.
        let open = Authorizer::new(vec![AuthzMode::AlwaysAllow], None).unwrap();
        let mallory = headers(&[("impersonate-user", "mallory")]);
        let applied = apply(&open, user("alice"), &mallory, &get_flunder()).await;
        assert!(
            matches!(&applied, Ok(Applied::Ignored(id)) if id.user == "alice"),
            "{applied:?}"
        );
        // Later in the chain: no opinion on impersonation, so it is refused, saying why.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, POLICY).unwrap();
        let later =
            Authorizer::new(vec![AuthzMode::Rbac, AuthzMode::AlwaysAllow], Some(path)).unwrap();
        let err = ask(&later, "alice", &[("impersonate-user", "mallory")])
            .await
            .unwrap_err();
        assert_eq!(err.code(), http::StatusCode::FORBIDDEN);
        assert!(
            err.message()
                .ends_with(": AlwaysAllow grants no impersonation"),
            "{}",
            err.message()
        );
        let root = Arc::new(Identity::new("root", vec![MASTERS.into()]));
        let applied = apply(
            &open,
            root,
            &headers(&[("impersonate-user", "carol")]),
            &get_flunder(),
        )
        .await;
        assert!(
            matches!(&applied, Ok(Applied::As(id)) if id.user == "carol"),
            "{applied:?}"
        );
    }

    #[tokio::test]
    async fn groups_without_a_user_are_a_bad_request_in_kubes_words() {
        let err = ask(&authz(), "ops", &[("impersonate-group", "wardle-users")])
            .await
            .unwrap_err();
        assert_eq!(err.code(), http::StatusCode::BAD_REQUEST);
        assert_eq!(err.message(), "requested &user.DefaultInfo{Name:\"\", UID:\"\", Groups:[]string{\"wardle-users\"}, Extra:map[string][]string(nil)} without impersonating a user name");
        // Without any header the real identity is used.
        assert_eq!(ask(&authz(), "ops", &[]).await.unwrap().user, "ops");
    }
}
