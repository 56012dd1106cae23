//! The sample API's OpenAPI documents, so `kubectl explain flunders` prints something useful and
//! kubectl validates fields server-side: Swagger 2.0 at `/openapi/v2`, the OpenAPI v3 index at
//! `/openapi/v3` and the group-version document at `/openapi/v3/apis/wardle.example.com/v1alpha1`.
//! Both specs are built from one description of the schemas and operations, once per process,
//! and served with an ETag (the uppercase hex SHA-512 of the bytes, as kube-apiserver does).

use super::store::{GROUP, KIND, VERSION};
use apigw_core::body::{self, Body};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::{json, Map, Value};
use std::sync::OnceLock;

const FLUNDER: &str = "com.example.wardle.v1alpha1.Flunder";
const FLUNDER_LIST: &str = "com.example.wardle.v1alpha1.FlunderList";
const FLUNDER_SPEC: &str = "com.example.wardle.v1alpha1.FlunderSpec";
const FLUNDER_STATUS: &str = "com.example.wardle.v1alpha1.FlunderStatus";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

/// Where the group-version document lives, relative to the server (as the v3 index names it).
pub(super) const V3_GROUP_PATH: &str = "apis/wardle.example.com/v1alpha1";

/// Which document a request asks for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Which {
    V2,
    V3Index,
    V3Group,
}

/// A document ready to serve.
struct Doc {
    body: Bytes,
    /// Uppercase hex SHA-512 of `body`.
    hash: String,
}

impl Doc {
    fn new(value: &Value) -> Self {
        let body = Bytes::from(value.to_string());
        let digest = ring::digest::digest(&ring::digest::SHA512, &body);
        let hash = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
        Self { body, hash }
    }
}

struct Docs {
    v2: Doc,
    v3_index: Doc,
    v3_group: Doc,
}

fn docs() -> &'static Docs {
    static DOCS: OnceLock<Docs> = OnceLock::new();
    DOCS.get_or_init(|| {
        let v3_group = Doc::new(&v3_document());
        let index = json!({"paths": {V3_GROUP_PATH: {
            "serverRelativeURL": format!("/openapi/v3/{V3_GROUP_PATH}?hash={}", v3_group.hash),
        }}});
        Docs {
            v2: Doc::new(&v2_document()),
            v3_index: Doc::new(&index),
            v3_group,
        }
    })
}

/// Answers a GET of one document; `If-None-Match` with the current ETag gets a `304`.
pub(super) fn serve(which: Which, headers: &HeaderMap) -> Response<Body> {
    let docs = docs();
    let doc = match which {
        Which::V2 => &docs.v2,
        Which::V3Index => &docs.v3_index,
        Which::V3Group => &docs.v3_group,
    };
    let etag = format!("\"{}\"", doc.hash);
    let unchanged = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| tag.trim() == etag || tag.trim() == "*");
    let mut res = if unchanged {
        let mut res = Response::new(body::empty());
        *res.status_mut() = StatusCode::NOT_MODIFIED;
        res
    } else {
        Response::new(body::full(doc.body.clone()))
    };
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    res
}

/// The two dialects: how each writes references, parameters and operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Swagger2,
    OpenApi3,
}

impl Dialect {
    fn reference(self, name: &str) -> Value {
        match self {
            Self::Swagger2 => json!({"$ref": format!("#/definitions/{name}")}),
            Self::OpenApi3 => json!({"$ref": format!("#/components/schemas/{name}")}),
        }
    }

    /// A property of type `name` with its own description (v3 wraps the reference in `allOf`
    /// because siblings of `$ref` are ignored there).
    fn ref_prop(self, name: &str, description: &str) -> Value {
        match self {
            Self::Swagger2 => {
                let mut prop = self.reference(name);
                prop["description"] = json!(description);
                prop
            }
            Self::OpenApi3 => json!({
                "description": description,
                "default": {},
                "allOf": [self.reference(name)],
            }),
        }
    }

    fn param(self, name: &str, location: &str, ty: &str, description: &str) -> Value {
        let mut p = match self {
            Self::Swagger2 => json!({"type": ty, "uniqueItems": true}),
            Self::OpenApi3 => json!({"schema": {"type": ty, "uniqueItems": true}}),
        };
        p["name"] = json!(name);
        p["in"] = json!(location);
        p["description"] = json!(description);
        if location == "path" {
            p["required"] = json!(true);
        }
        p
    }
}

fn gvk(kind: &str) -> Value {
    json!({"group": GROUP, "kind": kind, "version": VERSION})
}

fn string_prop(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values.";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. In CamelCase.";

/// Every schema, keyed by its definition name.
fn schemas(d: Dialect) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert(FLUNDER.into(), flunder_schema(d));
    out.insert(
        FLUNDER_LIST.into(),
        json!({
            "description": "FlunderList is a list of Flunder objects.",
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": string_prop(API_VERSION_DOC),
                "kind": string_prop(KIND_DOC),
                "metadata": d.ref_prop(LIST_META, "Standard list metadata."),
                "items": {"type": "array", "description": "The flunders.", "items": d.reference(FLUNDER)},
            },
            "x-kubernetes-group-version-kind": [gvk("FlunderList")],
        }),
    );
    out.insert(FLUNDER_SPEC.into(), json!({
        "description": "FlunderSpec is the desired state of a Flunder.",
        "type": "object",
        "properties": {"reference": string_prop("Reference is the name of another flunder (or fischer) this flunder points to.")},
    }));
    out.insert(FLUNDER_STATUS.into(), json!({
        "description": "FlunderStatus is the observed state of a Flunder. It has no fields yet.",
        "type": "object",
    }));
    out.insert(OBJECT_META.into(), object_meta());
    out.insert(LIST_META.into(), json!({
        "description": "ListMeta describes metadata that synthetic resources must have, including lists.",
        "type": "object",
        "properties": {
            "resourceVersion": string_prop("The version of the list, for watching changes from it."),
            "continue": string_prop("Set when the list was truncated: pass it as `continue` to get more."),
            "remainingItemCount": {"type": "integer", "format": "int64", "description": "How many items the truncated list left out."},
            "selfLink": string_prop("Deprecated: not set."),
        },
    }));
    out.insert(STATUS.into(), status_schema(d));
    out.insert(PATCH.into(), json!({
        "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.",
        "type": "object",
    }));
    out
}

fn flunder_schema(d: Dialect) -> Value {
    json!({
        "description": "Flunder is an example resource of the wardle.example.com sample API server, \
                        served through the apigw aggregation gateway.",
        "type": "object",
        "properties": {
            "apiVersion": string_prop(API_VERSION_DOC),
            "kind": string_prop(KIND_DOC),
            "metadata": d.ref_prop(OBJECT_META, "Standard object's metadata: name, namespace, labels, annotations and the fields the server sets."),
            "spec": d.ref_prop(FLUNDER_SPEC, "Spec is the desired state of the flunder."),
            "status": d.ref_prop(FLUNDER_STATUS, "Status is the observed state of the flunder."),
        },
        "x-kubernetes-group-version-kind": [gvk(KIND)],
    })
}

fn object_meta() -> Value {
    let string_map = |description: &str| json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": description});
    let time = |description: &str| json!({"type": "string", "format": "date-time", "description": description});
    let int64 = |description: &str| json!({"type": "integer", "format": "int64", "description": description});
    json!({
        "description": "ObjectMeta is metadata that all persisted resources must have.",
        "type": "object",
        "properties": {
            "name": string_prop("Name must be unique within a namespace. Cannot be updated."),
            "generateName": string_prop("An optional prefix the server uses to generate a unique name when name is not set."),
            "namespace": string_prop("The namespace the object lives in. Cannot be updated."),
            "selfLink": string_prop("Deprecated: not set."),
            "uid": string_prop("The unique identifier the server gave the object at creation. Read-only."),
            "resourceVersion": string_prop("An opaque version of the object, for optimistic concurrency and watches. Read-only."),
            "generation": int64("A sequence number of changes to the desired state (spec). Read-only."),
            "creationTimestamp": time("When the object was created (RFC 3339, UTC). Read-only."),
            "deletionTimestamp": time("When the object will be deleted. Read-only."),
            "deletionGracePeriodSeconds": int64("Seconds allowed for graceful termination. Read-only."),
            "labels": string_map("Map of string keys and values to organize and select objects."),
            "annotations": string_map("Unstructured key value map for arbitrary metadata."),
            "ownerReferences": {"type": "array", "items": {"type": "object"}, "description": "Objects this object depends on."},
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "description": "Must be empty before the object is deleted from the registry."},
            "managedFields": {"type": "array", "items": {"type": "object"}, "description": "Which field manager owns which fields."},
        },
    })
}

fn status_schema(d: Dialect) -> Value {
    json!({
        "description": "Status is a return value for calls that don't return other objects.",
        "type": "object",
        "properties": {
            "apiVersion": string_prop(API_VERSION_DOC),
            "kind": string_prop(KIND_DOC),
            "metadata": d.ref_prop(LIST_META, "Standard list metadata."),
            "status": string_prop("Status of the operation: Success or Failure."),
            "message": string_prop("A human-readable description of the status of this operation."),
            "reason": string_prop("A machine-readable description of why this operation is in the Failure status."),
            "details": {"type": "object", "description": "Extended data associated with the reason."},
            "code": {"type": "integer", "format": "int32", "description": "Suggested HTTP return code for this status."},
        },
    })
}

/// One operation of a path.
struct Op {
    method: &'static str,
    action: &'static str,
    id: &'static str,
    description: &'static str,
    /// Content types of the request body, if it has one.
    consumes: &'static [&'static str],
    /// The schema of the request body.
    request: &'static str,
    /// The schema of successful responses, and their codes.
    response: &'static str,
    codes: &'static [&'static str],
    query: &'static [&'static str],
    kind: &'static str,
}

const NS_COLLECTION: &str = "/apis/wardle.example.com/v1alpha1/namespaces/{namespace}/flunders";
const NS_ITEM: &str = "/apis/wardle.example.com/v1alpha1/namespaces/{namespace}/flunders/{name}";
const ALL_COLLECTION: &str = "/apis/wardle.example.com/v1alpha1/flunders";

const LIST_QUERY: &[&str] = &[
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "timeoutSeconds",
    "watch",
];
const WRITE_QUERY: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];
const PATCH_QUERY: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "force"];
const JSON_BODY: &[&str] = &["*/*"];
const PATCH_BODY: &[&str] = &[
    "application/apply-patch+yaml",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

fn operations(path: &str) -> Vec<Op> {
    let list = |id, description| Op {
        method: "get",
        action: "list",
        id,
        description,
        consumes: &[],
        request: "",
        response: FLUNDER_LIST,
        codes: &["200"],
        query: LIST_QUERY,
        kind: KIND,
    };
    match path {
        ALL_COLLECTION => vec![list(
            "listWardleV1alpha1FlunderForAllNamespaces",
            "list or watch objects of kind Flunder in every namespace",
        )],
        NS_COLLECTION => vec![
            list(
                "listWardleV1alpha1NamespacedFlunder",
                "list or watch objects of kind Flunder",
            ),
            Op {
                method: "post",
                action: "post",
                id: "createWardleV1alpha1NamespacedFlunder",
                description: "create a Flunder",
                consumes: JSON_BODY,
                request: FLUNDER,
                response: FLUNDER,
                codes: &["200", "201", "202"],
                query: WRITE_QUERY,
                kind: KIND,
            },
        ],
        _ => item_operations(),
    }
}

fn item_operations() -> Vec<Op> {
    let base = Op {
        method: "get",
        action: "get",
        id: "readWardleV1alpha1NamespacedFlunder",
        description: "read the specified Flunder",
        consumes: &[],
        request: "",
        response: FLUNDER,
        codes: &["200"],
        query: &[],
        kind: KIND,
    };
    let put = Op {
        method: "put",
        action: "put",
        id: "replaceWardleV1alpha1NamespacedFlunder",
        description: "replace the specified Flunder",
        consumes: JSON_BODY,
        request: FLUNDER,
        codes: &["200", "201"],
        query: WRITE_QUERY,
        ..base
    };
    let patch = Op {
        method: "patch",
        action: "patch",
        id: "patchWardleV1alpha1NamespacedFlunder",
        description: "partially update the specified Flunder",
        consumes: PATCH_BODY,
        request: PATCH,
        query: PATCH_QUERY,
        ..put
    };
    let delete = Op {
        method: "delete",
        action: "delete",
        id: "deleteWardleV1alpha1NamespacedFlunder",
        description: "delete a Flunder",
        response: STATUS,
        codes: &["200", "202"],
        query: &["dryRun", "gracePeriodSeconds"],
        ..base
    };
    vec![base, put, patch, delete]
}

fn query_param(d: Dialect, name: &str) -> Value {
    let (ty, description) = match name {
        "allowWatchBookmarks" => ("boolean", "Ask for BOOKMARK events while watching."),
        "continue" => ("string", "The continue token of a truncated list."),
        "fieldSelector" => ("string", "Restrict the list by fields."),
        "labelSelector" => ("string", "Restrict the list by labels."),
        "limit" => ("integer", "The most items to return in one response."),
        "resourceVersion" => ("string", "Where a list or watch starts."),
        "timeoutSeconds" => ("integer", "How long a list or watch call may last."),
        "watch" => ("boolean", "Watch for changes and stream them as events."),
        "dryRun" => ("string", "When present (All), changes are not persisted."),
        "fieldManager" => ("string", "The name of the actor making the change."),
        "fieldValidation" => ("string", "How the server treats fields of the object it does not know: Ignore (drop them silently), Warn (drop them and answer with a Warning header for each), Strict (refuse the request with a BadRequest naming them)."),
        "force" => ("boolean", "Force an Apply request to take conflicting fields."),
        "gracePeriodSeconds" => ("integer", "Seconds before the object is deleted."),
        _ => ("string", ""),
    };
    d.param(name, "query", ty, description)
}

fn operation(d: Dialect, op: &Op) -> Value {
    let mut params: Vec<Value> = op.query.iter().map(|q| query_param(d, q)).collect();
    let ok = |code: &str| match d {
        Dialect::Swagger2 => {
            json!({"description": code_text(code), "schema": d.reference(op.response)})
        }
        Dialect::OpenApi3 => json!({"description": code_text(code), "content": {
            "application/json": {"schema": d.reference(op.response)},
            "application/yaml": {"schema": d.reference(op.response)},
        }}),
    };
    let mut responses: Map<String, Value> =
        op.codes.iter().map(|c| (c.to_string(), ok(c))).collect();
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    let mut out = json!({
        "tags": ["wardleV1alpha1"],
        "description": op.description,
        "operationId": op.id,
        "responses": responses,
        "x-kubernetes-action": op.action,
        "x-kubernetes-group-version-kind": gvk(op.kind),
    });
    if !op.request.is_empty() {
        match d {
            Dialect::Swagger2 => {
                params.insert(0, json!({"name": "body", "in": "body", "required": true, "schema": d.reference(op.request)}));
                out["consumes"] = json!(op.consumes);
            }
            Dialect::OpenApi3 => {
                let content: Map<String, Value> = op
                    .consumes
                    .iter()
                    .map(|ct| (ct.to_string(), json!({"schema": d.reference(op.request)})))
                    .collect();
                out["requestBody"] = json!({"content": content, "required": true});
            }
        }
    }
    if d == Dialect::Swagger2 {
        out["produces"] = json!(["application/json", "application/yaml"]);
        out["schemes"] = json!(["https"]);
    }
    out["parameters"] = json!(params);
    out
}

fn code_text(code: &str) -> &'static str {
    match code {
        "201" => "Created",
        "202" => "Accepted",
        _ => "OK",
    }
}

fn paths(d: Dialect) -> Map<String, Value> {
    let mut out = Map::new();
    for path in [ALL_COLLECTION, NS_COLLECTION, NS_ITEM] {
        let mut item = Map::new();
        for op in operations(path) {
            item.insert(op.method.into(), operation(d, &op));
        }
        let mut shared = vec![d.param(
            "pretty",
            "query",
            "string",
            "If 'true', the output is pretty printed.",
        )];
        if path != ALL_COLLECTION {
            shared.push(d.param(
                "namespace",
                "path",
                "string",
                "object name and auth scope, such as for teams and projects",
            ));
        }
        if path == NS_ITEM {
            shared.push(d.param("name", "path", "string", "name of the Flunder"));
        }
        item.insert("parameters".into(), json!(shared));
        out.insert(path.into(), Value::Object(item));
    }
    out
}

fn v2_document() -> Value {
    json!({
        "swagger": "2.0",
        "info": {"title": "wardle.example.com sample API", "version": VERSION},
        "paths": paths(Dialect::Swagger2),
        "definitions": schemas(Dialect::Swagger2),
    })
}

fn v3_document() -> Value {
    json!({
        "openapi": "3.0.0",
        "info": {"title": "wardle.example.com sample API", "version": VERSION},
        "paths": paths(Dialect::OpenApi3),
        "components": {"schemas": schemas(Dialect::OpenApi3)},
    })
}

#[cfg(test)]
mod tests {
    use super::super::fields::{META_FIELDS, SPEC_FIELDS, TOP_FIELDS};
    use super::*;

    fn prop_names(schema: &Value) -> Vec<String> {
        let mut names: Vec<String> = schema["properties"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    fn sorted(fields: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn schemas_describe_exactly_the_validated_fields() {
        for d in [Dialect::Swagger2, Dialect::OpenApi3] {
            let s = schemas(d);
            assert_eq!(prop_names(&s[FLUNDER]), sorted(&TOP_FIELDS));
            assert_eq!(prop_names(&s[FLUNDER_SPEC]), sorted(&SPEC_FIELDS));
            assert_eq!(prop_names(&s[OBJECT_META]), sorted(&META_FIELDS));
        }
    }

    #[test]
    fn every_reference_resolves() {
        for (doc, prefix, table) in [
            (v2_document(), "#/definitions/", "/definitions"),
            (
                v3_document(),
                "#/components/schemas/",
                "/components/schemas",
            ),
        ] {
            let text = doc.to_string();
            let mut refs = 0;
            for piece in text.split("\"$ref\":\"").skip(1) {
                let target = piece.split('"').next().unwrap_or_default();
                let name = target.strip_prefix(prefix).unwrap_or("<bad prefix>");
                let pointer = format!("{table}/{}", name.replace('/', "~1"));
                assert!(doc.pointer(&pointer).is_some(), "{target} does not resolve");
                refs += 1;
            }
            assert!(refs > 10, "{refs}");
        }
    }

    #[test]
    fn patch_operations_offer_field_validation_to_kubectl() {
        let doc = v3_document();
        let patch = &doc["paths"][NS_ITEM]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"], gvk(KIND));
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .map(|ps| ps.iter().filter_map(|p| p["name"].as_str()).collect())
            .unwrap_or_default();
        assert!(names.contains(&"fieldValidation"), "{names:?}");
        // kubectl apply --server-side sends what the PATCH operation says it consumes.
        assert!(patch["requestBody"]["content"]
            .get("application/apply-patch+yaml")
            .is_some());
        let v2 = v2_document();
        assert!(v2["paths"][NS_ITEM]["patch"]["consumes"]
            .as_array()
            .is_some_and(|c| c.iter().any(|t| t == "application/apply-patch+yaml")));
        let post = &doc["paths"][NS_COLLECTION]["post"];
        assert_eq!(post["x-kubernetes-action"], "post");
        assert!(post["requestBody"]["content"]["*/*"]["schema"]["$ref"]
            .as_str()
            .is_some_and(|r| r.ends_with(FLUNDER)));
    }

    #[test]
    fn index_names_the_group_document_by_hash() {
        let docs = docs();
        let index: Value = serde_json::from_slice(&docs.v3_index.body).expect("index");
        let url = index["paths"][V3_GROUP_PATH]["serverRelativeURL"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(
            url,
            format!("/openapi/v3/{V3_GROUP_PATH}?hash={}", docs.v3_group.hash)
        );
        assert_eq!(docs.v3_group.hash.len(), 128);
        assert!(docs
            .v3_group
            .hash
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
    }
}
