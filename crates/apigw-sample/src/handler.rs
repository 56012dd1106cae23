//! The sample server's REST surface: discovery (`/apis`, `/apis/wardle.example.com`,
//! `/apis/wardle.example.com/v1alpha1`, aggregated discovery v2), OpenAPI (`/openapi/*`), and
//! the flunder verbs mapped onto the [`Store`](super::store::Store), with JSON or Table
//! responses, field validation, dry runs, managedFields and server-side apply
//! ([`managed`](super::managed)), streaming watches and the `exec` subresource.

use super::fields::{add_warnings, FieldValidation};
use super::openapi::{self, Which};
use super::options::{Verb, WriteOptions};
use super::store::{API_VERSION, GROUP, KIND, RESOURCE, VERSION};
use super::table::{accepts, table, wants_table};
use super::{exec, managed, watch, App, User};
use apigw_core::body::Body;
use apigw_core::errors::{json_response, Status};
use apigw_core::server::RequestBody;
use http::{header, HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde_json::{json, Value};
use std::collections::HashMap;

const VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];
/// kube-apiserver's limit on request bodies.
const MAX_BODY: usize = 3 * 1024 * 1024;

type Result<T> = std::result::Result<T, Status>;

/// What a path names.
enum Route {
    OpenApi(Which),
    Apis,
    Group,
    Version,
    Collection { ns: Option<String> },
    Item { ns: String, name: String },
    Exec { ns: String, name: String },
}

fn parse_route(path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let owned = |s: &str| s.to_string();
    match segs.as_slice() {
        ["apis"] => Some(Route::Apis),
        ["apis", GROUP] => Some(Route::Group),
        ["apis", GROUP, VERSION] => Some(Route::Version),
        ["apis", GROUP, VERSION, RESOURCE] => Some(Route::Collection { ns: None }),
        ["apis", GROUP, VERSION, "namespaces", ns, RESOURCE] => Some(Route::Collection {
            ns: Some(owned(ns)),
        }),
        ["apis", GROUP, VERSION, "namespaces", ns, RESOURCE, name] => Some(Route::Item {
            ns: owned(ns),
            name: owned(name),
        }),
        ["apis", GROUP, VERSION, "namespaces", ns, RESOURCE, name, "exec"] => Some(Route::Exec {
            ns: owned(ns),
            name: owned(name),
        }),
        ["openapi", "v2"] => Some(Route::OpenApi(Which::V2)),
        ["openapi", "v3"] => Some(Route::OpenApi(Which::V3Index)),
        ["openapi", "v3", rest @ ..] if rest.join("/") == openapi::V3_GROUP_PATH => {
            Some(Route::OpenApi(Which::V3Group))
        }
        _ => None,
    }
}

/// Answers one authenticated request.
pub(super) async fn route(
    app: &App,
    user: &User,
    req: Request<RequestBody>,
) -> Result<Response<Body>> {
    let path = req.uri().path().to_string();
    let route = parse_route(&path).ok_or_else(|| {
        Status::not_found(format!(
            "the server could not find the requested resource ({path})"
        ))
    })?;
    let method = req.method().clone();
    let pairs = query_pairs(req.uri().query());
    let query: HashMap<String, String> = pairs.iter().cloned().collect();
    let read_only = method == Method::GET || method == Method::HEAD;
    match route {
        Route::OpenApi(which) if read_only => Ok(openapi::serve(which, req.headers())),
        Route::Apis if read_only => Ok(apis(req.headers())),
        Route::Group if read_only => Ok(json_response(&api_group())),
        Route::Version if read_only => Ok(json_response(&resource_list())),
        Route::Collection { ns } => collection(app, ns, &query, &pairs, req).await,
        Route::Item { ns, name } => item(app, &ns, &name, &query, &pairs, req).await,
        Route::Exec { ns, name } if method == Method::GET || method == Method::POST => {
            exec::exec(app, user, &ns, &name, &pairs, req)
        }
        _ => Err(not_allowed(&method)),
    }
}

async fn collection(
    app: &App,
    ns: Option<String>,
    query: &HashMap<String, String>,
    pairs: &[(String, String)],
    req: Request<RequestBody>,
) -> Result<Response<Body>> {
    let is_watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    match (req.method().clone(), ns) {
        (Method::GET, ns) if is_watch => watch::watch(app, ns, query, req.headers()),
        (Method::GET, ns) => {
            let (items, rv) = app.store.list(ns.as_deref());
            if wants_table(req.headers()) {
                return Ok(json_response(&table(&items, Some(rv))));
            }
            Ok(json_response(&json!({
                "apiVersion": API_VERSION,
                "kind": format!("{KIND}List"),
                "metadata": {"resourceVersion": rv.to_string()},
                "items": items,
            })))
        }
        (Method::POST, Some(ns)) => {
            let opts = WriteOptions::parse(Verb::Create, pairs, &[])?;
            let validation = FieldValidation::from_query(query)?;
            let manager = manager_of(&opts, req.headers());
            let mut obj = read_object(req).await?;
            let warnings = validation.check(&mut obj)?;
            let managed = managed::track_update(None, &obj, &manager, &now());
            set_managed_fields(&mut obj, managed);
            let made = app.store.create(&ns, obj, opts.dry_run)?;
            let mut res = with_status(json_response(&made), StatusCode::CREATED);
            add_warnings(res.headers_mut(), warnings);
            Ok(res)
        }
        (method, _) => Err(not_allowed(&method)),
    }
}

async fn item(
    app: &App,
    ns: &str,
    name: &str,
    query: &HashMap<String, String>,
    pairs: &[(String, String)],
    req: Request<RequestBody>,
) -> Result<Response<Body>> {
    let method = req.method().clone();
    let as_table = method == Method::GET && wants_table(req.headers());
    let mut warnings = Vec::new();
    let obj = match method {
        Method::GET => app.store.get(ns, name)?,
        Method::PUT => {
            let opts = WriteOptions::parse(Verb::Update, pairs, &[])?;
            let validation = FieldValidation::from_query(query)?;
            let manager = manager_of(&opts, req.headers());
            let mut body = read_object(req).await?;
            warnings = validation.check(&mut body)?;
            app.store.update(ns, name, opts.dry_run, |current| {
                let managed = managed::track_update(Some(current), &body, &manager, &now());
                set_managed_fields(&mut body, managed);
                Ok(body)
            })?
        }
        Method::PATCH if is_apply(req.headers()) => {
            let opts = WriteOptions::parse(Verb::Patch(true), pairs, &[])?;
            let validation = FieldValidation::from_query(query)?;
            let (_, mut config) = read_body(req).await?;
            warnings = validation.check(&mut config)?;
            let (obj, created) = server_side_apply(app, ns, name, &config, &opts)?;
            let mut res = json_response(&obj);
            if created {
                *res.status_mut() = StatusCode::CREATED;
            }
            add_warnings(res.headers_mut(), warnings);
            return Ok(res);
        }
        Method::PATCH => {
            let opts = WriteOptions::parse(Verb::Patch(false), pairs, &[])?;
            let validation = FieldValidation::from_query(query)?;
            let manager = manager_of(&opts, req.headers());
            let mut patch = read_patch(req).await?;
            warnings = validation.check(&mut patch)?;
            app.store.update(ns, name, opts.dry_run, |current| {
                let mut next = current.clone();
                json_patch::merge(&mut next, &patch);
                let managed = managed::track_update(Some(current), &next, &manager, &now());
                set_managed_fields(&mut next, managed);
                Ok(next)
            })?
        }
        Method::DELETE => {
            let body_dry_run = read_delete_options(req).await?;
            let opts = WriteOptions::parse(Verb::Delete, pairs, &body_dry_run)?;
            let gone = app.store.delete(ns, name, opts.dry_run)?;
            return Ok(json_response(&deleted_status(name, &gone)));
        }
        method => return Err(not_allowed(&method)),
    };
    if as_table {
        return Ok(json_response(&table(std::slice::from_ref(&obj), None)));
    }
    let mut res = json_response(&obj);
    add_warnings(res.headers_mut(), warnings);
    Ok(res)
}

/// The request body's bytes, up to `MAX_BODY`; past it a 413.
async fn body_bytes(body: RequestBody) -> Result<bytes::Bytes> {
    Ok(Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| {
            Status::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                format!("reading the request body: {e}"),
            )
        })?
        .to_bytes())
}

/// The request body as a JSON (or YAML) value.
async fn read_body(req: Request<RequestBody>) -> Result<(HeaderMap, Value)> {
    let (parts, body) = req.into_parts();
    let bytes = body_bytes(body).await?;
    let content_type = content_type(&parts.headers);
    let value = if content_type.contains("yaml") {
        apigw_core::yaml::value_from_slice(&bytes)
            .map_err(|e| Status::bad_request(format!("invalid YAML body: {e}")))?
    } else {
        serde_json::from_slice(&bytes)
            .map_err(|e| Status::bad_request(format!("invalid JSON body: {e}")))?
    };
    Ok((parts.headers, value))
}

async fn read_object(req: Request<RequestBody>) -> Result<Value> {
    let (_, value) = read_body(req).await?;
    if !value.is_object() {
        return Err(Status::bad_request(format!(
            "the body is not a {KIND} object"
        )));
    }
    Ok(value)
}

/// Server-side apply of `config` as the request's field manager: an update of the object when
/// it exists, else its creation (`true`). Either is a dry run when asked.
fn server_side_apply(
    app: &App,
    ns: &str,
    name: &str,
    config: &Value,
    opts: &WriteOptions,
) -> Result<(Value, bool)> {
    if !config.is_object() {
        return Err(Status::bad_request(format!(
            "the body is not a {KIND} object"
        )));
    }
    match config.get("metadata") {
        None | Some(Value::Object(_)) => {}
        Some(_) => return Err(Status::bad_request("metadata must be an object")),
    }
    if let Some(stated) = config.pointer("/metadata/name").and_then(Value::as_str) {
        if stated != name {
            return Err(Status::bad_request(format!(
                "the name of the object ({stated}) does not match the name on the URL ({name})"
            )));
        }
    }
    let manager = opts.field_manager.as_str();
    // Created when absent; should another request create it first, applied to that one.
    for _ in 0..2 {
        match app.store.update(ns, name, opts.dry_run, |current| {
            managed::apply(Some(current), config, manager, opts.force, &now())
        }) {
            Ok(obj) => return Ok((obj, false)),
            Err(e) if e.code() == StatusCode::NOT_FOUND => {}
            Err(e) => return Err(e),
        }
        let mut obj = managed::apply(None, config, manager, opts.force, &now())?;
        if let Value::Object(map) = &mut obj {
            if let Value::Object(meta) = map.entry("metadata").or_insert_with(|| json!({})) {
                meta.insert("name".into(), json!(name));
            }
        }
        match app.store.create(ns, obj, opts.dry_run) {
            Ok(obj) => return Ok((obj, true)),
            Err(e)
                if e.code() == StatusCode::CONFLICT && e.to_json()["reason"] == "AlreadyExists" => {
            }
            Err(e) => return Err(e),
        }
    }
    Err(Status::conflict(format!(
        "Operation cannot be fulfilled on {RESOURCE}.{GROUP} \"{name}\": the object changed \
         while it was applied; please try again"
    )))
}

/// The `dryRun` of a DeleteOptions body, when the request has one.
async fn read_delete_options(req: Request<RequestBody>) -> Result<Vec<String>> {
    let bytes = body_bytes(req.into_body()).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let options: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Status::bad_request(format!("invalid DeleteOptions body: {e}")))?;
    match options.get("dryRun") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(values)) => values
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    Status::bad_request("DeleteOptions.dryRun must be a list of strings")
                })
            })
            .collect(),
        Some(_) => Err(Status::bad_request(
            "DeleteOptions.dryRun must be a list of strings",
        )),
    }
}

/// Who a write that is not an apply is recorded as.
fn manager_of(opts: &WriteOptions, headers: &HeaderMap) -> String {
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    managed::manager_or_user_agent(&opts.field_manager, user_agent)
}

/// Sets `metadata.managedFields` (an object's metadata is checked to be a map before this).
fn set_managed_fields(obj: &mut Value, managed: Value) {
    if let Value::Object(map) = obj {
        if let Value::Object(meta) = map.entry("metadata").or_insert_with(|| json!({})) {
            meta.insert("managedFields".into(), managed);
        }
    }
}

fn now() -> String {
    apigw_core::meta::timestamp(std::time::SystemTime::now())
}

/// True for a server-side apply patch.
fn is_apply(headers: &HeaderMap) -> bool {
    content_type(headers) == APPLY_PATCH
}

const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// A merge patch (or a strategic merge patch, applied as a merge patch).
async fn read_patch(req: Request<RequestBody>) -> Result<Value> {
    let content_type = content_type(req.headers());
    if !matches!(
        content_type.as_str(),
        "application/merge-patch+json" | "application/strategic-merge-patch+json"
    ) {
        return Err(Status::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/merge-patch+json, application/strategic-merge-patch+json, \
             {APPLY_PATCH} (got {content_type:?})"
        )));
    }
    let (_, patch) = read_body(req).await?;
    Ok(patch)
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or("application/json")
        .trim()
        .to_ascii_lowercase()
}

/// `/apis`: the legacy APIGroupList, or aggregated discovery (v2, else v2beta1) when asked for.
fn apis(headers: &HeaderMap) -> Response<Body> {
    for (version, content_type) in [
        (
            "v2",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        ),
        (
            "v2beta1",
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
        ),
    ] {
        if accepts(
            headers,
            "APIGroupDiscoveryList",
            "apidiscovery.k8s.io",
            version,
        ) {
            let mut doc = discovery_v2();
            doc["apiVersion"] = json!(format!("apidiscovery.k8s.io/{version}"));
            let mut res = json_response(&doc);
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(content_type),
            );
            return res;
        }
    }
    json_response(&json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [api_group()]}))
}

fn api_group() -> Value {
    let version = json!({"groupVersion": API_VERSION, "version": VERSION});
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    })
}

fn resource_list() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": [{
            "name": RESOURCE,
            "singularName": "flunder",
            "namespaced": true,
            "kind": KIND,
            "verbs": VERBS,
            "shortNames": ["fl"],
        }],
    })
}

fn discovery_v2() -> Value {
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": [{
            "metadata": {"name": GROUP},
            "versions": [{
                "version": VERSION,
                "freshness": "Current",
                "resources": [{
                    "resource": RESOURCE,
                    "responseKind": {"group": GROUP, "version": VERSION, "kind": KIND},
                    "scope": "Namespaced",
                    "singularResource": "flunder",
                    "verbs": VERBS,
                    "shortNames": ["fl"],
                }],
            }],
        }],
    })
}

/// What kube-apiserver answers for a deleted object that needed no graceful termination.
fn deleted_status(name: &str, gone: &Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": GROUP, "kind": RESOURCE, "uid": gone["metadata"]["uid"]},
    })
}

fn not_allowed(method: &Method) -> Status {
    Status::method_not_allowed(format!(
        "the server does not allow this method on the requested resource ({method})"
    ))
}

fn with_status(mut res: Response<Body>, status: StatusCode) -> Response<Body> {
    *res.status_mut() = status;
    res
}

/// Query parameters, percent-decoded, in order (collected into a map, the last of repeated
/// keys wins).
fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}
