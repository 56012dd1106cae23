//! Discovery served by the gateway itself: `/api` (APIVersions), `/apis` (APIGroupList, or the
//! aggregated APIGroupDiscoveryList when asked for it) and `/apis/<group>` (APIGroup), built from
//! the registry snapshot in kube-aggregator's order ([`order`], [`aggregated`]). Documents are
//! rendered once per registry or availability change, each with a strong ETag, and served with
//! content negotiation on `Accept` as kube-apiserver does it.

pub mod aggregated;
pub mod openapi;
pub mod order;

use crate::availability::State;
use crate::body::{empty, full, Body};
use crate::errors::Status;
use crate::meta;
use crate::registry::{ApiService, Snapshot};
use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// A rendered document and its ETag.
#[derive(Debug, Clone)]
pub struct Doc {
    pub bytes: Bytes,
    pub etag: HeaderValue,
    pub content_type: &'static str,
}

const JSON: &str = "application/json";
const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const V2BETA1: &str = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

impl Doc {
    pub fn new(value: &Value, content_type: &'static str) -> Self {
        Self::from_text(value.to_string(), content_type)
    }

    /// A document already rendered as JSON text.
    pub fn from_text(text: String, content_type: &'static str) -> Self {
        let bytes = Bytes::from(text);
        Self {
            etag: etag(&bytes),
            bytes,
            content_type,
        }
    }
}

/// Upstream's ETag: the quoted uppercase hex SHA-512 of the bytes.
fn etag(bytes: &[u8]) -> HeaderValue {
    let digest = ring::digest::digest(&ring::digest::SHA512, bytes);
    let mut out = String::with_capacity(130);
    out.push('"');
    for b in digest.as_ref() {
        out.push_str(&format!("{b:02X}"));
    }
    out.push('"');
    HeaderValue::from_str(&out).unwrap_or(HeaderValue::from_static("\"\""))
}

/// The documents of one (registry, availability) state.
#[derive(Debug)]
pub struct Documents {
    key: (u64, u64),
    /// `/apis`: legacy, v2, v2beta1.
    pub apis: [Doc; 3],
    /// `/api` without a delegate: legacy, v2, v2beta1.
    pub api: [Doc; 3],
    /// `/apis/<group>` by group name.
    pub groups: HashMap<String, Doc>,
}

fn group_version(s: &ApiService) -> Value {
    json!({"groupVersion": format!("{}/{}", s.group, s.version), "version": s.version})
}

impl Documents {
    /// Renders every document. Groups with an empty name (the legacy `v1`) belong under `/api`.
    pub fn render(
        snapshot: &Snapshot,
        states: &HashMap<String, Arc<State>>,
        builtin: &[Builtin],
        versions: &aggregated::VersionCache,
        key: (u64, u64),
    ) -> Self {
        let mut services: Vec<Arc<ApiService>> = snapshot.iter().cloned().collect();
        let mut states = states.clone();
        for b in builtin
            .iter()
            .filter(|b| snapshot.get(&b.svc.name).is_none())
        {
            services.push(b.svc.clone());
            states.insert(b.svc.name.clone(), b.state.clone());
        }
        let mut list = vec![crate::apiservices::group_document()];
        let mut groups = HashMap::new();
        for group in order::ordered_groups(&services)
            .iter()
            .filter(|g| !g[0].group.is_empty())
        {
            let versions: Vec<Value> = group.iter().map(|s| group_version(s)).collect();
            let doc = json!({"name": group[0].group, "versions": versions, "preferredVersion": versions[0]});
            let mut single = doc.clone();
            single["kind"] = json!("APIGroup");
            single["apiVersion"] = json!("v1");
            groups.insert(group[0].group.clone(), Doc::new(&single, JSON));
            list.push(doc);
        }
        if let Some(own) = list.first_mut() {
            if let Some(map) = own.as_object_mut() {
                map.remove("kind");
                map.remove("apiVersion");
            }
        }
        let members: Vec<aggregated::Member<'_>> = services
            .iter()
            .map(|svc| aggregated::Member {
                svc,
                state: states.get(&svc.name).map(|s| s.as_ref()),
            })
            .collect();
        let mut items = vec![aggregated::apiregistration_item().to_string()];
        items.extend(aggregated::items_json(&members, versions));
        let legacy = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list});
        let api = json!({"kind": "APIVersions", "versions": [],
                         "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]});
        Self {
            key,
            apis: [
                Doc::new(&legacy, JSON),
                Doc::from_text(aggregated::list(&items, "apidiscovery.k8s.io/v2"), V2),
                Doc::from_text(
                    aggregated::list(&items, "apidiscovery.k8s.io/v2beta1"),
                    V2BETA1,
                ),
            ],
            api: [
                Doc::new(&api, JSON),
                Doc::from_text(aggregated::list(&[], "apidiscovery.k8s.io/v2"), V2),
                Doc::from_text(
                    aggregated::list(&[], "apidiscovery.k8s.io/v2beta1"),
                    V2BETA1,
                ),
            ],
            groups,
        }
    }
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
        let condition = crate::availability::Condition {
            available: true,
            reason: "Local",
            message: "served by the gateway".into(),
            last_transition: std::time::SystemTime::now(),
        };
        let state = State {
            condition,
            resources: Some(Arc::new(list)),
        };
        Self {
            svc,
            state: Arc::new(state),
        }
    }
}

/// The documents of the newest state, rendered on first use after a change.
#[derive(Debug, Default)]
pub struct Cache {
    current: ArcSwapOption<Documents>,
    builtin: Vec<Builtin>,
    versions: aggregated::VersionCache,
}

impl Cache {
    /// A cache whose documents also list `builtin` group versions.
    pub fn new(builtin: Vec<Builtin>) -> Self {
        Self {
            current: ArcSwapOption::default(),
            builtin,
            versions: aggregated::VersionCache::default(),
        }
    }

    /// `key` identifies the state: (registry generation, availability round).
    pub fn get(
        &self,
        snapshot: &Snapshot,
        states: &HashMap<String, Arc<State>>,
        key: (u64, u64),
    ) -> Arc<Documents> {
        if let Some(docs) = self.current.load_full() {
            if docs.key == key {
                return docs;
            }
        }
        let docs = Arc::new(Documents::render(
            snapshot,
            states,
            &self.builtin,
            &self.versions,
            key,
        ));
        self.current.store(Some(docs.clone()));
        docs
    }
}

/// Which form of a discovery document the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Legacy = 0,
    V2 = 1,
    V2Beta1 = 2,
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
                    Some("v2beta1") => return Some(Form::V2Beta1),
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
pub fn serve<B>(req: &Request<B>, forms: &[Doc]) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Status::method_not_allowed(format!(
            "{} is not supported on discovery documents",
            req.method()
        ))
        .into_response();
    }
    let Some(form) = negotiate(req.headers(), forms.len() > 1) else {
        let offered = if forms.len() > 1 {
            format!("{JSON}, {V2}, {V2BETA1}")
        } else {
            JSON.to_string()
        };
        return Status::not_acceptable(format!(
            "only the following media types are accepted: {offered}"
        ))
        .into_response();
    };
    let doc = &forms[form as usize];
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
    use crate::registry::Registry;

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
    }

    #[test]
    fn negotiation_honours_the_accept_list_in_order() {
        use Form::{Legacy, V2Beta1};
        assert_eq!(negotiate(&HeaderMap::new(), true), Some(Legacy));
        assert_eq!(negotiate(&headers(V2), true), Some(Form::V2));
        assert_eq!(
            negotiate(&headers(&format!("{V2BETA1},{V2}")), true),
            Some(V2Beta1)
        );
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
