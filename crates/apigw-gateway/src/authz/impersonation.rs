//! Impersonation (`Impersonate-User`, `-Group`, `-Uid`, `-Extra-<key>`) as kube-apiserver does
//! it: each requested attribute needs the real user to be allowed the `impersonate` verb on it
//! (users or service accounts, groups, uids, userextras/<key>); then the request proceeds as
//! the impersonated identity. Only RBAC or `system:masters` grants it: under `AlwaysAllow`
//! alone the headers are ignored, so a dev-mode gateway never lets anyone become anyone. The
//! headers themselves never reach a backend.

use super::{forbidden_message, Attributes, Authorizer};
use crate::authn::{Identity, ANONYMOUS_USER, AUTHENTICATED, UNAUTHENTICATED};
use apigw_core::errors::Status;
use http::HeaderMap;
use std::collections::BTreeMap;

fn values<'a>(headers: &'a HeaderMap, name: &str) -> impl Iterator<Item = String> + 'a {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
        .collect::<Vec<_>>()
        .into_iter()
}

fn attempt(
    group: &str,
    resource: &str,
    subresource: &str,
    namespace: &str,
    name: &str,
) -> Attributes {
    Attributes {
        resource_request: true,
        verb: "impersonate".into(),
        group: group.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        namespace: namespace.into(),
        name: name.into(),
        ..Attributes::default()
    }
}

/// True when the request carries any `Impersonate-*` header; without one, [`apply`] returns
/// the real identity as it is.
pub fn requested(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|name| name.as_str().starts_with("impersonate-"))
}

/// The identity the request acts as: `real`, or the one it may impersonate.
pub fn apply(authz: &Authorizer, real: Identity, headers: &HeaderMap) -> Result<Identity, Status> {
    let user = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let groups: Vec<String> = values(headers, "impersonate-group").collect();
    let uid = headers
        .get("impersonate-uid")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        if let (Some(key), Ok(value)) = (
            name.as_str().strip_prefix("impersonate-extra-"),
            value.to_str(),
        ) {
            let key = percent_encoding::percent_decode_str(key)
                .decode_utf8_lossy()
                .into_owned();
            extra.entry(key).or_default().push(value.to_string());
        }
    }
    let Some(user) = user.filter(|u| !u.is_empty()) else {
        if groups.is_empty() && uid.is_none() && extra.is_empty() {
            return Ok(real);
        }
        return Err(Status::bad_request(
            "impersonating groups, uid or extra requires Impersonate-User",
        ));
    };
    let mut checks = vec![match user
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
    {
        Some((ns, name)) => attempt("", "serviceaccounts", "", ns, name),
        None => attempt("", "users", "", "", user),
    }];
    checks.extend(groups.iter().map(|g| attempt("", "groups", "", "", g)));
    checks.extend(
        uid.iter()
            .map(|u| attempt("authentication.k8s.io", "uids", "", "", u)),
    );
    for (key, vals) in &extra {
        checks.extend(
            vals.iter()
                .map(|v| attempt("authentication.k8s.io", "userextras", key, "", v)),
        );
    }
    if !authz.may_grant_impersonation(&real) {
        // AlwaysAllow is no grant to become anyone: the headers are dropped, and the request
        // goes on as the real user.
        tracing::debug!(user = %real.user, "impersonation headers ignored: no RBAC grant possible");
        return Ok(real);
    }
    if let Some(denied) = checks
        .iter()
        .find(|a| !authz.grants_impersonation(&real, a))
    {
        return Err(Status::forbidden(forbidden_message(&real, denied)));
    }
    let mut groups = groups;
    let marker = if user == ANONYMOUS_USER {
        UNAUTHENTICATED
    } else {
        AUTHENTICATED
    };
    if !groups.iter().any(|g| g == marker) {
        groups.push(marker.to_string());
    }
    tracing::debug!(real = %real.user, as_user = user, "impersonating");
    Ok(Identity {
        user: user.to_string(),
        uid,
        groups,
        extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::rbac::Policy;
    use crate::authz::AuthzMode;

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

    #[test]
    fn allowed_impersonation_replaces_the_identity() {
        let ops = Identity::new("ops", vec![AUTHENTICATED.into()]);
        let id = apply(
            &authz(),
            ops,
            &headers(&[("impersonate-user", "carol"), ("impersonate-group", "devs")]),
        )
        .unwrap();
        assert_eq!(id.user, "carol");
        assert_eq!(id.groups, vec!["devs", AUTHENTICATED]);
    }

    #[test]
    fn always_allow_grants_no_impersonation() {
        let open = Authorizer::new(vec![AuthzMode::AlwaysAllow], None).unwrap();
        let alice = Identity::new("alice", vec![AUTHENTICATED.into()]);
        let id = apply(&open, alice, &headers(&[("impersonate-user", "mallory")])).unwrap();
        assert_eq!(id.user, "alice");
        let root = Identity::new("root", vec!["system:masters".into()]);
        assert_eq!(
            apply(&open, root, &headers(&[("impersonate-user", "carol")]))
                .unwrap()
                .user,
            "carol"
        );
    }

    #[test]
    fn each_attribute_needs_permission() {
        let ops = Identity::new("ops", vec![AUTHENTICATED.into()]);
        let err = apply(
            &authz(),
            ops.clone(),
            &headers(&[("impersonate-user", "dave")]),
        )
        .unwrap_err();
        assert_eq!(err.code(), http::StatusCode::FORBIDDEN);
        assert_eq!(err.message(), "users \"dave\" is forbidden: User \"ops\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope");
        let err = apply(
            &authz(),
            ops.clone(),
            &headers(&[("impersonate-user", "carol"), ("impersonate-uid", "1")]),
        )
        .unwrap_err();
        assert!(
            err.message()
                .contains("cannot impersonate resource \"uids\""),
            "{}",
            err.message()
        );
        let bob = Identity::new("bob", vec![AUTHENTICATED.into()]);
        assert!(apply(&authz(), bob, &headers(&[("impersonate-user", "carol")])).is_err());
        let err = apply(&authz(), ops, &headers(&[("impersonate-group", "x")])).unwrap_err();
        assert_eq!(err.code(), http::StatusCode::BAD_REQUEST);
    }
}
