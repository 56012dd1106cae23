//! The identity APIs the gateway answers itself, so kubectl's `auth whoami` and `auth can-i`
//! report what the gateway decides: `authentication.k8s.io/v1` selfsubjectreviews and
//! `authorization.k8s.io/v1` selfsubjectaccessreviews and selfsubjectrulesreviews. Also their
//! discovery entries, ordered among the registry's groups as kube-apiserver's built-ins are.
//! With a delegate, the other resources of these groups (tokenreviews, subjectaccessreviews,
//! localsubjectaccessreviews) are the delegate's, as behind kube-aggregator.

use apigw_authz::Authorizer;
use apigw_core::body::{Body, BoxError};
use apigw_core::errors::{json_response, Status};
use apigw_registry::ApiService;
use apigw_request::Attributes;
use apigw_request::Identity;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::Arc;

pub const AUTHN: &str = "authentication.k8s.io";
pub const AUTHZ: &str = "authorization.k8s.io";
const MAX_REVIEW_BYTES: usize = 1 << 20;

/// The resources answered here: (group, resource, kind).
const OWN: &[(&str, &str, &str)] = &[
    (AUTHN, "selfsubjectreviews", "SelfSubjectReview"),
    (AUTHZ, "selfsubjectaccessreviews", "SelfSubjectAccessReview"),
    (AUTHZ, "selfsubjectrulesreviews", "SelfSubjectRulesReview"),
];

/// True when `rest` (the path after `/apis/<group>/v1/`) is one of the resources answered here.
pub fn is_own(group: &str, rest: &[&str]) -> bool {
    matches!(rest, [resource] if OWN.iter().any(|(g, r, _)| *g == group && r == resource))
}

/// The groups served here, as Local APIServices with kube's built-in priorities, each with its
/// APIResourceList.
pub fn builtin_groups() -> Vec<(Arc<ApiService>, Value)> {
    let local = |group: &str, gpm: i64| {
        ApiService::from_value(json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": format!("v1.{group}")},
            "spec": {"group": group, "version": "v1", "groupPriorityMinimum": gpm, "versionPriority": 15}
        }))
        .map(Arc::new)
        .ok()
    };
    // As kube-apiserver lists them: the singular name is the kind in lower case.
    let resource = |name: &str, kind: &str| json!({"name": name, "singularName": kind.to_ascii_lowercase(), "namespaced": false, "kind": kind, "verbs": ["create"]});
    let list = |group: &str| {
        let resources: Vec<Value> = OWN
            .iter()
            .filter(|(g, _, _)| *g == group)
            .map(|(_, name, kind)| resource(name, kind))
            .collect();
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/v1"), "resources": resources})
    };
    [
        (local(AUTHN, 17700), list(AUTHN)),
        (local(AUTHZ, 17600), list(AUTHZ)),
    ]
    .into_iter()
    .filter_map(|(svc, list)| svc.map(|s| (s, list)))
    .collect()
}

/// Serves `/apis/<AUTHN|AUTHZ>/v1[/...]`.
pub async fn handle<B>(
    authz: &Authorizer,
    identity: &Identity,
    req: Request<B>,
    group: &str,
    rest: &[&str],
) -> Result<Response<Body>, Status>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let builtin = builtin_groups();
    let Some((_, list)) = builtin.iter().find(|(s, _)| s.group == group) else {
        return Err(Status::not_found(
            "the server could not find the requested resource",
        ));
    };
    let resource = match rest {
        [] | [""] => return Ok(json_response(list)),
        [resource] => *resource,
        _ => {
            return Err(Status::not_found(
                "the server could not find the requested resource",
            ))
        }
    };
    if req.method() != Method::POST {
        return Err(Status::method_not_allowed(format!(
            "{} is not supported on {resource}: create one with POST",
            req.method()
        )));
    }
    let protobuf = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/vnd.kubernetes.protobuf"));
    let body = match http_body_util::Limited::new(req.into_body(), MAX_REVIEW_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Err(Status::bad_request(format!(
                "reading the request body: {e}"
            )))
        }
    };
    let spec = if protobuf {
        super::protobuf::review_spec(resource, &body)?
    } else {
        serde_json::from_slice::<Value>(&body)
            .map(|v| v.get("spec").cloned().unwrap_or(Value::Null))
            .map_err(|e| {
                Status::bad_request(format!("the request body is not JSON: {e}")).with_source(e)
            })?
    };
    let status = match (group, resource) {
        (AUTHN, "selfsubjectreviews") => json!({"userInfo": user_info(identity)}),
        (AUTHZ, "selfsubjectaccessreviews") => access(authz, identity, &spec).await,
        (AUTHZ, "selfsubjectrulesreviews") => rules(authz, identity, &spec),
        _ => {
            return Err(Status::not_found(
                "the server could not find the requested resource",
            ))
        }
    };
    let kind = list["resources"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == resource))
        .and_then(|r| r["kind"].as_str())
        .unwrap_or_default();
    // As kube-apiserver answers: a SelfSubjectReview is stamped with the time it was made; an
    // access review's metadata holds only the managedFields kube's registry records (left out
    // here: bookkeeping of the client's field manager, not part of the answer).
    let metadata = if resource == "selfsubjectreviews" {
        json!({"creationTimestamp": apigw_core::meta::timestamp(std::time::SystemTime::now())})
    } else {
        json!({})
    };
    let mut out = json!({"kind": kind, "apiVersion": format!("{group}/v1"), "metadata": metadata, "status": status});
    if !spec.is_null() {
        out["spec"] = spec;
    }
    let mut res = json_response(&out);
    *res.status_mut() = StatusCode::CREATED;
    Ok(res)
}

fn user_info(id: &Identity) -> Value {
    let mut info = json!({"username": id.user, "groups": id.groups});
    if let Some(uid) = &id.uid {
        info["uid"] = json!(uid);
    }
    if !id.extra.is_empty() {
        info["extra"] = json!(id.extra);
    }
    info
}

/// The chain's answer for `spec`, as kube-apiserver's SelfSubjectAccessReview gives it.
async fn access(authz: &Authorizer, id: &Identity, spec: &Value) -> Value {
    let s = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
    let a = if let Some(r) = spec.get("resourceAttributes").filter(|r| r.is_object()) {
        Attributes {
            resource_request: true,
            verb: s(r, "verb"),
            group: s(r, "group"),
            version: s(r, "version"),
            namespace: s(r, "namespace"),
            resource: s(r, "resource"),
            subresource: s(r, "subresource"),
            name: s(r, "name"),
            path: String::new(),
            label_selector: r["labelSelector"]["rawSelector"]
                .as_str()
                .map(str::to_string),
            field_selector: r["fieldSelector"]["rawSelector"]
                .as_str()
                .map(str::to_string),
        }
    } else {
        let r = &spec["nonResourceAttributes"];
        Attributes {
            verb: s(r, "verb"),
            path: s(r, "path"),
            ..Attributes::default()
        }
    };
    // The authorizers' own answer, as kube-apiserver's SelfSubjectAccessReview gives it.
    let decision = authz.decide_review(id, &a).await;
    let mut status = json!({"allowed": decision.verdict == apigw_authz::Verdict::Allow});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    if decision.verdict == apigw_authz::Verdict::Deny {
        status["denied"] = json!(true);
    }
    if !decision.errors.is_empty() {
        status["evaluationError"] = json!(decision.errors.join(", "));
    }
    status
}

fn rules(authz: &Authorizer, id: &Identity, spec: &Value) -> Value {
    let ns = spec["namespace"].as_str().unwrap_or_default();
    let all = if id.groups.iter().any(|g| g == "system:masters") {
        vec![apigw_authz::rbac::PolicyRule {
            verbs: vec!["*".into()],
            api_groups: vec!["*".into()],
            resources: vec!["*".into()],
            non_resource_urls: vec!["*".into()],
            ..Default::default()
        }]
    } else {
        authz.policy().rules_for(id, ns)
    };
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in all {
        if !r.resources.is_empty() {
            resource_rules.push(json!({"verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources, "resourceNames": r.resource_names}));
        }
        if !r.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}));
        }
    }
    json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": false})
}
