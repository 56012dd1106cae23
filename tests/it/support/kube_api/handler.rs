//! Request routing of the test API server: discovery documents, then
//! `/api/v1/...` and `/apis/<g>/<v>/...` paths split into resource, namespace, name and
//! subresource, and the verbs list, watch, get, create, update, patch and delete on them.
//! TokenReview and SubjectAccessReview creations are answered from the test's settings.

use super::resources::{discovery, find, Kind};
use super::select::Selector;
use super::store::{merge_patch, ApiError};
use super::{watch, Shared};
use apigw_core::body::{full, Body};
use apigw_core::server::RequestBody;
use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// What a resource path names.
struct Target {
    kind: &'static Kind,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let (plural, rest) = rest.split_first()?;
    if rest.len() > 2 {
        return None;
    }
    Some(Target {
        kind: find(group, version, plural)?,
        namespace,
        name: rest.first().map(|s| s.to_string()),
        subresource: rest.get(1).map(|s| s.to_string()),
    })
}

fn query(req: &Request<RequestBody>) -> HashMap<String, String> {
    let raw = req.uri().query().unwrap_or("");
    raw.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect()
}

pub fn json_response(code: u16, value: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(full(value.to_string()))
        .unwrap_or_else(|_| Response::new(full("")))
}

/// Serves one request.
pub async fn handle(shared: Arc<Shared>, req: Request<RequestBody>) -> Response<Body> {
    let path = req.uri().path().to_string();
    if req.method() == Method::GET {
        if let Some(doc) = discovery(&path) {
            return json_response(200, &doc);
        }
        if let Some(resp) = openapi(&path) {
            return resp;
        }
    }
    if req.method() != Method::GET {
        let token = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        shared.log(token, format!("{} {path}", req.method()));
    }
    let Some(target) = parse(&path) else {
        let e = ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        return json_response(404, &e.status());
    };
    match route(&shared, req, target).await {
        Ok(resp) => resp,
        Err(e) => json_response(e.code, &e.status()),
    }
}

/// OpenAPI without schemas: kubectl's client-side validation downloads `/openapi/v2` (as
/// protobuf; an empty message is an empty document) and then skips kinds it has no schema for;
/// the empty `/openapi/v3` index tells it the server does no field validation.
fn openapi(path: &str) -> Option<Response<Body>> {
    let (content_type, body) = match path {
        "/openapi/v2" => (
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            String::new(),
        ),
        "/openapi/v3" => ("application/json", json!({"paths": {}}).to_string()),
        _ => return None,
    };
    Response::builder()
        .status(200)
        .header("content-type", content_type)
        .body(full(body))
        .ok()
}

async fn route(
    shared: &Arc<Shared>,
    req: Request<RequestBody>,
    t: Target,
) -> Result<Response<Body>, ApiError> {
    let q = query(&req);
    let method = req.method().clone();
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = read_json(req).await?;
    if !t.kind.stored {
        return match (method, &t.name) {
            (Method::POST, None) => Ok(json_response(201, &shared.review(t.kind, body)?)),
            _ => Err(not_allowed()),
        };
    }
    let ns = t.namespace.clone().unwrap_or_default();
    if t.kind.namespaced != t.namespace.is_some() && t.name.is_some() {
        return Err(ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    }
    match (method, t.name.as_deref()) {
        (Method::GET, None) if is_true(q.get("watch")) => Ok(open_watch(shared, &t, &q)?),
        (Method::GET, None) => list(shared, &t, &q),
        (Method::GET, Some(name)) => {
            let s = shared.store();
            let obj = s
                .get(t.kind, &ns, name)
                .ok_or_else(|| ApiError::not_found(t.kind, name))?;
            Ok(json_response(200, obj))
        }
        (Method::POST, None) => {
            let obj = prepare_create(t.kind, &ns, body)?;
            Ok(json_response(
                201,
                &shared.store().create(t.kind, &ns, obj)?,
            ))
        }
        (Method::PUT, Some(name)) => modify(shared, &t, name, body, None),
        (Method::PATCH, Some(name)) => modify(shared, &t, name, body, Some(&content_type)),
        (Method::DELETE, Some(name)) => Ok(json_response(
            200,
            &shared.store().delete(t.kind, &ns, name)?,
        )),
        _ => Err(not_allowed()),
    }
}

/// PUT (`patch_type` None: `body` is the whole object) or PATCH (a merge patch) of `name`.
fn modify(
    shared: &Shared,
    t: &Target,
    name: &str,
    body: Value,
    patch_type: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    if let Some(ct) = patch_type {
        if !ct.starts_with("application/merge-patch+json")
            && !ct.starts_with("application/strategic-merge-patch+json")
        {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json (got {ct:?})"),
            ));
        }
    }
    if !body.is_object() || !body.get("metadata").is_none_or(Value::is_object) {
        return Err(ApiError::new(
            400,
            "BadRequest",
            "the body must be a JSON object with object metadata",
        ));
    }
    let ns = t.namespace.clone().unwrap_or_default();
    let mut s = shared.store();
    let old = s
        .get(t.kind, &ns, name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(t.kind, name))?;
    let next = match patch_type {
        Some(_) => {
            let mut patched = old.clone();
            merge_patch(&mut patched, &body);
            patched
        }
        None => body,
    };
    let next = keep_status(t.kind, t.subresource.as_deref(), &old, next);
    Ok(json_response(200, &s.update(t.kind, &ns, name, next)?))
}

fn not_allowed() -> ApiError {
    ApiError::new(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
    )
}

fn is_true(v: Option<&String>) -> bool {
    v.is_some_and(|v| matches!(v.as_str(), "1" | "true" | "True"))
}

async fn read_json(req: Request<RequestBody>) -> Result<Value, ApiError> {
    let bytes: Bytes = req
        .into_body()
        .collect()
        .await
        .map_err(|e| ApiError::new(400, "BadRequest", format!("reading body: {e}")))?
        .to_bytes();
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::new(400, "BadRequest", format!("invalid JSON body: {e}")))
}

/// The status subresource changes only status; the main resource never does (for kinds that
/// have a status subresource).
fn keep_status(kind: &Kind, sub: Option<&str>, old: &Value, new: Value) -> Value {
    match (kind.status, sub) {
        (true, Some("status")) => {
            let mut out = old.clone();
            out["status"] = new.get("status").cloned().unwrap_or(Value::Null);
            out["metadata"]["resourceVersion"] = new["metadata"]["resourceVersion"].clone();
            out
        }
        (true, _) => {
            let mut out = new;
            match old.get("status") {
                Some(st) => out["status"] = st.clone(),
                None => {
                    if let Some(map) = out.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            out
        }
        _ => new,
    }
}

fn prepare_create(kind: &'static Kind, ns: &str, mut obj: Value) -> Result<Value, ApiError> {
    if !obj.is_object() || !obj.get("metadata").is_none_or(Value::is_object) {
        return Err(ApiError::new(
            400,
            "BadRequest",
            "the body must be a JSON object with object metadata",
        ));
    }
    for (field, want) in [
        ("apiVersion", kind.api_version()),
        ("kind", kind.kind.to_string()),
    ] {
        match obj[field].as_str() {
            None | Some("") => obj[field] = want.into(),
            Some(have) if have == want => {}
            Some(have) => {
                return Err(ApiError::new(
                    400,
                    "BadRequest",
                    format!("{field} {have:?} does not match {want:?}"),
                ))
            }
        }
    }
    let given_ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
    if !given_ns.is_empty() && kind.namespaced && given_ns != ns {
        return Err(ApiError::new(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if obj["metadata"]["name"].as_str().unwrap_or("").is_empty() {
        match obj["metadata"]["generateName"].as_str() {
            Some(prefix) => {
                let suffix = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos() % 100_000)
                    .unwrap_or(0);
                obj["metadata"]["name"] = format!("{prefix}{suffix:05}").into();
            }
            None => return Err(ApiError::new(422, "Invalid", format!("{} \"\" is invalid: metadata.name: Required value: name or generateName is required", kind.kind))),
        }
    }
    if kind.status {
        if let Some(map) = obj.as_object_mut() {
            map.remove("status");
        }
    }
    Ok(obj)
}

fn list(
    shared: &Shared,
    t: &Target,
    q: &HashMap<String, String>,
) -> Result<Response<Body>, ApiError> {
    let selector = Selector::parse(
        q.get("labelSelector").map(String::as_str),
        q.get("fieldSelector").map(String::as_str),
    )?;
    let s = shared.store();
    let items: Vec<Value> = s
        .list(t.kind, t.namespace.as_deref())
        .into_iter()
        .filter(|o| selector.matches(o))
        .map(|o| {
            // Items of a list carry no apiVersion and kind, as kube-apiserver sends them.
            let mut o = o.clone();
            if let Some(map) = o.as_object_mut() {
                map.remove("apiVersion");
                map.remove("kind");
            }
            o
        })
        .collect();
    Ok(json_response(
        200,
        &json!({
            "kind": format!("{}List", t.kind.kind), "apiVersion": t.kind.api_version(),
            "metadata": {"resourceVersion": s.rv.to_string()}, "items": items
        }),
    ))
}

fn open_watch(
    shared: &Shared,
    t: &Target,
    q: &HashMap<String, String>,
) -> Result<Response<Body>, ApiError> {
    let selector = Selector::parse(
        q.get("labelSelector").map(String::as_str),
        q.get("fieldSelector").map(String::as_str),
    )?;
    let rv = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
            ApiError::new(
                400,
                "BadRequest",
                format!("invalid resource version {rv:?}"),
            )
        })?),
    };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    let params = watch::Params {
        rv,
        bookmarks: is_true(q.get("allowWatchBookmarks")),
        timeout,
        namespace: t.namespace.clone(),
        selector,
        bookmark_every: shared.bookmark_every,
    };
    let (body, expired) = watch::open(&shared.store, shared.drops.subscribe(), t.kind, params);
    if expired {
        shared
            .expired
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(body)
        .map_err(|e| ApiError::new(500, "InternalError", e.to_string()))
}
