//! Discovery served by the gateway itself: `/api` (APIVersions), `/apis` (APIGroupList, or the
//! aggregated APIGroupDiscoveryList when asked for it) and `/apis/<group>` (APIGroup), built from
//! the registry snapshot, the gateway's own groups and the delegate's groups
//! ([`delegate`]) in kube-aggregator's order ([`order`], [`aggregated`]), with what each
//! backend says it serves ([`fetch`]). Documents are rendered once per registry, availability
//! or delegate change, reusing every part the change did not touch ([`render`]), each with a
//! strong ETag, and served with content negotiation on `Accept` as kube-apiserver does it.

pub mod aggregated;
pub mod apiservices;
pub mod delegate;
pub mod openapi;
pub mod order;
pub mod render;

use apigw_availability::State;
use apigw_core::body::{empty, full, Body};
use apigw_core::errors::Status;
use apigw_core::meta;
use apigw_registry::{ApiService, Snapshot};
use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// A rendered document and its ETag.
#[derive(Debug, Clone)]
pub struct Doc {
    pub bytes: Bytes,
    pub etag: HeaderValue,
    pub content_type: &'static str,
}

/// The content type of the unaggregated discovery documents.
pub const JSON: &str = "application/json";
pub(crate) const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

impl Doc {
    pub fn new(value: &Value, content_type: &'static str) -> Self {
        Self::from_text(value.to_string(), content_type)
    }

    /// A document already rendered as compact JSON text. Its ETag is upstream's, of the JSON
    /// alone; the body ends in a newline, as kube-apiserver's serializer writes it.
    pub fn from_text(mut text: String, content_type: &'static str) -> Self {
        let etag = etag(text.as_bytes());
        text.push('\n');
        Self {
            etag,
            bytes: Bytes::from(text),
            content_type,
        }
    }
}

/// Upstream's ETag: the quoted uppercase hex SHA-512 of the bytes.
pub fn etag(bytes: &[u8]) -> HeaderValue {
    etag_of(ring::digest::digest(&ring::digest::SHA512, bytes))
}

/// The ETag of a finished SHA-512 digest.
fn etag_of(digest: ring::digest::Digest) -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(130);
    out.push(b'"');
    for b in digest.as_ref() {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 15)]);
    }
    out.push(b'"');
    HeaderValue::from_bytes(&out).unwrap_or(HeaderValue::from_static("\"\""))
}

/// The aggregated list (`apidiscovery.k8s.io/v2`) around already rendered `items`, joined
/// with commas here. kube-apiserver 1.36 no longer serves `v2beta1`, and neither does the
/// gateway: a client that asks only for it gets 406, as there.
pub fn aggregated_doc(items: &[&str]) -> Doc {
    const HEAD: &str = r#"{"kind":"APIGroupDiscoveryList","metadata":{},"items":["#;
    const TAIL: &str = r#"],"apiVersion":"apidiscovery.k8s.io/v2"}"#;
    let len: usize = items.iter().map(|i| i.len() + 1).sum();
    let mut text = String::with_capacity(HEAD.len() + len + TAIL.len() + 1);
    text.push_str(HEAD);
    for (n, item) in items.iter().enumerate() {
        if n > 0 {
            text.push(',');
        }
        text.push_str(item);
    }
    text.push_str(TAIL);
    Doc::from_text(text, V2)
}

/// The documents of one (registry, availability, delegate) state, rendered by
/// [`render::RenderCache::render`].
#[derive(Debug)]
pub struct Documents {
    key: (u64, u64, u64),
    /// `/apis`: legacy, v2.
    pub apis: [Doc; 2],
    /// `/api` without a delegate: legacy, v2.
    pub api: Arc<[Doc; 2]>,
    /// `/apis/<group>` by group name.
    pub groups: Arc<HashMap<String, Doc>>,
}

/// A group version the gateway serves itself, listed among the registry's.
#[derive(Debug, Clone)]
pub struct Builtin {
    pub svc: Arc<ApiService>,
    pub state: Arc<State>,
}

impl Builtin {
    /// A built-in group version serving the resources of `list` (an APIResourceList).
    pub fn new(svc: Arc<ApiService>, list: Value) -> Self {
        let condition = apigw_availability::Condition {
            available: true,
            reason: "Local",
            message: "served by the gateway".into(),
            last_transition: std::time::SystemTime::now(),
        };
        let state = State {
            condition,
            resources: Some(Arc::new(list)),
            aggregated: None,
            members: None,
        };
        Self {
            svc,
            state: Arc::new(state),
        }
    }
}

/// The gateway's own group versions, each listing also the resources the delegate serves in it
/// (kube-apiserver's tokenreviews beside the gateway's selfsubjectreviews), the gateway's
/// entries taking the place of the delegate's of the same name, in whichever form (aggregated
/// entry or APIResourceList) the delegate gave.
fn with_delegate_resources(builtin: &[Builtin], delegate: &[Builtin]) -> Vec<Builtin> {
    // Puts each of `mine` in place of the entry of `theirs` with the same `key`, or at the end.
    fn merge(mut theirs: Vec<Value>, mine: Vec<Value>, key: &str) -> Vec<Value> {
        for entry in mine {
            match theirs.iter_mut().find(|e| e[key] == entry[key]) {
                Some(slot) => *slot = entry,
                None => theirs.push(entry),
            }
        }
        theirs
    }
    let array = |v: &Value, key: &str| v[key].as_array().cloned().unwrap_or_default();
    builtin
        .iter()
        .map(|own| {
            let Some(theirs) = delegate.iter().find(|d| d.svc.name == own.svc.name) else {
                return own.clone();
            };
            let Some(list) = own.state.resources.as_deref() else {
                return own.clone();
            };
            let mut state = State {
                condition: own.state.condition.clone(),
                resources: None,
                aggregated: None,
                members: None,
            };
            if let Some(entry) = theirs.state.aggregated.as_deref() {
                let mine = aggregated::resources(list);
                let mut entry = entry.clone();
                entry["resources"] =
                    Value::Array(merge(array(&entry, "resources"), mine, "resource"));
                state.aggregated = Some(Arc::new(entry));
            } else if let Some(their_list) = theirs.state.resources.as_deref() {
                let mut list = list.clone();
                list["resources"] = Value::Array(merge(
                    array(their_list, "resources"),
                    array(&list, "resources"),
                    "name",
                ));
                state.resources = Some(Arc::new(list));
            } else {
                return own.clone();
            }
            Builtin {
                svc: own.svc.clone(),
                state: Arc::new(state),
            }
        })
        .collect()
}

/// The documents of the newest state, rendered on first use after a change.
#[derive(Debug, Default)]
pub struct Cache {
    current: ArcSwapOption<Documents>,
    builtin: Vec<Builtin>,
    /// `builtin` with the delegate's resources, for the delegate generation it was made from.
    /// Kept, not remade per render: the render caches know a version's resources by the
    /// identity of their `Arc`, which must not be freed and reused while the content differs.
    merged: std::sync::Mutex<(u64, Arc<Vec<Builtin>>)>,
    render: render::RenderCache,
    /// The delegate's groups; empty without `--delegate-url`.
    pub delegate: Arc<delegate::DelegateDiscovery>,
}

impl Cache {
    /// A cache whose documents also list `builtin` group versions.
    pub fn new(builtin: Vec<Builtin>) -> Self {
        Self {
            builtin,
            ..Self::default()
        }
    }

    /// `key` identifies the state: (registry generation, availability round); the delegate's
    /// generation completes it.
    pub fn get(
        &self,
        snapshot: &Snapshot,
        states: &HashMap<String, Arc<State>>,
        key: (u64, u64),
    ) -> Arc<Documents> {
        let known = self.delegate.current();
        let key = (key.0, key.1, known.generation);
        if let Some(docs) = self.current.load_full() {
            if docs.key == key {
                return docs;
            }
        }
        let builtin = {
            let mut merged = self.merged.lock().unwrap_or_else(|e| e.into_inner());
            if merged.0 != known.generation || merged.1.len() != self.builtin.len() {
                *merged = (
                    known.generation,
                    Arc::new(with_delegate_resources(&self.builtin, &known.versions)),
                );
            }
            merged.1.clone()
        };
        let docs = Arc::new(
            self.render
                .render(snapshot, states, &builtin, &known.versions, key),
        );
        self.current.store(Some(docs.clone()));
        docs
    }
}

/// Which form of a discovery document the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Legacy = 0,
    V2 = 1,
}

/// Honours the `Accept` list in order, as kube-apiserver does; None when nothing offered is
/// served (406).
pub fn negotiate(headers: &HeaderMap, aggregated: bool) -> Option<Form> {
    let mut ranges = meta::accept_ranges(headers).peekable();
    if ranges.peek().is_none() {
        return Some(Form::Legacy);
    }
    for range in ranges {
        let media = range
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let json_like = matches!(media.as_str(), "application/json" | "application/*" | "*/*");
        match meta::range_param(range, "as") {
            Some("APIGroupDiscoveryList")
                if json_like
                    && aggregated
                    && meta::range_param(range, "g") == Some("apidiscovery.k8s.io") =>
            {
                match meta::range_param(range, "v") {
                    Some("v2") => return Some(Form::V2),
                    _ => continue,
                }
            }
            Some(_) => continue,
            None if json_like => return Some(Form::Legacy),
            None => continue,
        }
    }
    None
}

/// Serves one of `forms` (indexed by [`Form`]); `forms` has one entry for legacy-only documents.
pub fn serve<B>(req: &Request<B>, forms: &[Doc]) -> Result<Response<Body>, Status> {
    readable(req)?;
    let Some(form) = negotiate(req.headers(), forms.len() > 1) else {
        let offered = if forms.len() > 1 {
            format!("{JSON}, {V2}")
        } else {
            JSON.to_string()
        };
        return Err(Status::not_acceptable(format!(
            "only the following media types are accepted: {offered}"
        )));
    };
    Ok(respond(req, &forms[form as usize]))
}

/// Documents are read with GET and HEAD only.
pub fn readable<B>(req: &Request<B>) -> Result<(), Status> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Err(Status::method_not_allowed(format!(
            "{} is not supported on discovery documents",
            req.method()
        )));
    }
    Ok(())
}

/// `doc`, or 304 when the client's `If-None-Match` names it.
pub fn respond<B>(req: &Request<B>, doc: &Doc) -> Response<Body> {
    let matches = req
        .headers()
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim() == doc.etag.to_str().unwrap_or_default() || t.trim() == "*");
    let mut res = if matches {
        let mut r = Response::new(empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(full(doc.bytes.clone()));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(doc.content_type),
        );
        r
    };
    let h = res.headers_mut();
    h.insert(header::ETAG, doc.etag.clone());
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use apigw_registry::Registry;
    use serde_json::json;

    fn svc(group: &str, version: &str, gpm: i64, vp: i64) -> ApiService {
        ApiService::from_value(json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": format!("{version}.{group}")},
            "spec": {"group": group, "version": version, "groupPriorityMinimum": gpm,
                     "versionPriority": vp, "service": {"name": "s", "namespace": "n"}}
        }))
        .unwrap()
    }

    fn headers(accept: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, accept.parse().unwrap());
        h
    }

    #[test]
    fn own_review_groups_also_list_the_delegates_resources() {
        let local = |resources: Value| {
            let svc = ApiService::from_value(json!({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": "v1.authentication.k8s.io"},
                "spec": {"group": "authentication.k8s.io", "version": "v1",
                         "groupPriorityMinimum": 17700, "versionPriority": 15}
            }))
            .unwrap();
            let list = json!({"kind": "APIResourceList", "groupVersion": "authentication.k8s.io/v1", "resources": resources});
            Builtin::new(Arc::new(svc), list)
        };
        let ours = local(
            json!([{"name": "selfsubjectreviews", "kind": "SelfSubjectReview", "verbs": ["create"], "namespaced": false}]),
        );
        // The delegate's in the legacy form: its order, ours in place of its own entry.
        let theirs = local(
            json!([{"name": "selfsubjectreviews", "kind": "Theirs"}, {"name": "tokenreviews", "kind": "TokenReview"}]),
        );
        let merged = with_delegate_resources(std::slice::from_ref(&ours), &[theirs]);
        let list = merged[0].state.resources.as_deref().unwrap();
        assert_eq!(list["resources"][0]["kind"], "SelfSubjectReview");
        assert_eq!(list["resources"][1]["name"], "tokenreviews");
        // The delegate's in the aggregated form: the same, converted.
        let mut theirs = local(json!([]));
        Arc::make_mut(&mut theirs.state).resources = None;
        Arc::make_mut(&mut theirs.state).aggregated =
            Some(Arc::new(json!({"version": "v1", "resources": [
            {"resource": "selfsubjectreviews", "responseKind": {"kind": "Theirs"}},
            {"resource": "tokenreviews", "responseKind": {"kind": "TokenReview"}}]})));
        let merged = with_delegate_resources(std::slice::from_ref(&ours), &[theirs]);
        let entry = merged[0].state.aggregated.as_deref().unwrap();
        let names: Vec<&str> = entry["resources"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["resource"].as_str())
            .collect();
        assert_eq!(names, ["selfsubjectreviews", "tokenreviews"]);
        assert_eq!(
            entry["resources"][0]["responseKind"]["kind"],
            "SelfSubjectReview"
        );
        // No delegate: ours as they are.
        let alone = with_delegate_resources(std::slice::from_ref(&ours), &[]);
        assert!(Arc::ptr_eq(&alone[0].state, &ours.state));
    }

    #[test]
    fn documents_follow_the_order_with_apiregistration_first() {
        let registry = Registry::default();
        registry.replace(Snapshot::new([
            svc("wardle.example.com", "v1alpha1", 1000, 15),
            svc("wardle.example.com", "v1", 2000, 20),
            svc("bloops.example.com", "v1", 1500, 10),
        ]));
        let cache = Cache::default();
        let docs = cache.get(&registry.snapshot(), &HashMap::new(), (1, 0));
        let list: Value = serde_json::from_slice(&docs.apis[0].bytes).unwrap();
        assert_eq!(list["kind"], "APIGroupList");
        let names: Vec<&str> = list["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "apiregistration.k8s.io",
                "wardle.example.com",
                "bloops.example.com"
            ]
        );
        assert_eq!(list["groups"][1]["preferredVersion"]["version"], "v1");
        let group: Value =
            serde_json::from_slice(&docs.groups["wardle.example.com"].bytes).unwrap();
        assert_eq!(group["kind"], "APIGroup");
        assert_eq!(group["versions"][1]["version"], "v1alpha1");
        assert!(Arc::ptr_eq(
            &docs,
            &cache.get(&registry.snapshot(), &HashMap::new(), (1, 0))
        ));
        assert!(!Arc::ptr_eq(
            &docs,
            &cache.get(&registry.snapshot(), &HashMap::new(), (1, 1))
        ));
        let etag = docs.apis[0].etag.to_str().unwrap();
        assert_eq!(etag.len(), 130);
        assert!(etag[1..129]
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
        // Each digest is that of the JSON served, as upstream's ETag is of the JSON without the
        // newline its serializer ends the body with.
        for doc in &docs.apis {
            let json = doc.bytes.strip_suffix(b"\n").expect("a newline at the end");
            assert_eq!(doc.etag, super::etag(json));
            assert!(serde_json::from_slice::<Value>(&doc.bytes).is_ok());
        }
    }

    #[test]
    fn negotiation_honours_the_accept_list_in_order() {
        use Form::Legacy;
        const V2BETA1: &str =
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
        assert_eq!(negotiate(&HeaderMap::new(), true), Some(Legacy));
        assert_eq!(negotiate(&headers(V2), true), Some(Form::V2));
        // v2beta1 is passed over, as kube-apiserver 1.36 passes it over.
        assert_eq!(
            negotiate(&headers(&format!("{V2BETA1},{V2}")), true),
            Some(Form::V2)
        );
        assert_eq!(negotiate(&headers(V2BETA1), true), None);
        assert_eq!(
            negotiate(
                &headers(&format!(
                    "application/vnd.kubernetes.protobuf;{},{V2},application/json",
                    "as=APIGroupDiscoveryList;g=apidiscovery.k8s.io;v=v2"
                )),
                true
            ),
            Some(Form::V2)
        );
        assert_eq!(negotiate(&headers("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList, application/json"), true), Some(Legacy));
        assert_eq!(negotiate(&headers("*/*"), true), Some(Legacy));
        assert_eq!(negotiate(&headers("application/x-unknown"), true), None);
        assert_eq!(negotiate(&headers(V2), false), None);
    }
}
