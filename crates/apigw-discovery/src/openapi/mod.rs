//! OpenAPI served by the gateway: `/openapi/v2`, the merged Swagger 2.0 spec of the delegate
//! (`--delegate-url`, first, as upstream merges its local specs first) and every APIService's
//! part of its backend's spec ([`v2`]), and `/openapi/v3`, the index of per group-version
//! documents (`apis/<group>/<version>` and the group's `apis/<group>`) whose documents are
//! proxied from the APIService's backend (the delegate's entries from the delegate). `/openapi/v2`
//! is also served as protobuf ([`protobuf`]), encoded when first asked for. Specs are
//! fetched as the gateway
//! itself, once per distinct backend, on registry and availability changes and every minute;
//! a backend that cannot answer keeps its last good spec. A group version with several backends
//! (APIServiceBackends) has each backend's part in `/openapi/v2`, and its `/openapi/v3` document
//! merged here from each backend's ([`merge_v3_document`]), listed in the index by its own hash.

use super::Doc;
use apigw_availability::Availability;
use apigw_core::body::Body;
use apigw_core::errors::Status;
use apigw_core::meta;
use apigw_proxy::{Backend, Proxy};
use apigw_registry::{ApiService, Registry};
use arc_swap::ArcSwap;
use futures_util::StreamExt;
use http::{HeaderValue, Request, Response};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub mod protobuf;
pub mod v2;

const REFRESH: Duration = Duration::from_secs(60);
/// The key of the delegate's specs among the backends' (backend keys are `https://` URLs).
const DELEGATE: &str = "delegate";
const MAX_SPEC_BYTES: usize = 64 << 20;
const TIMEOUT: Duration = Duration::from_secs(10);

/// A document as last fetched, with its ETag.
type Tagged = (Arc<Value>, Option<String>);

/// One backend's specs as last fetched: `/openapi/v2` and `/openapi/v3`.
#[derive(Debug, Default, Clone)]
struct Fetched {
    v2: Option<Tagged>,
    v3: Option<Tagged>,
}

/// The merged `/openapi/v2`: its JSON, and its protobuf once a client asked for it.
#[derive(Debug)]
pub struct V2 {
    json: Doc,
    protobuf: OnceLock<Doc>,
}

impl V2 {
    fn new(json: Doc) -> Self {
        Self {
            json,
            protobuf: OnceLock::new(),
        }
    }

    /// The protobuf form, with the JSON form's ETag (kube-openapi's; `Vary: Accept` keeps
    /// caches apart).
    fn protobuf(&self) -> &Doc {
        self.protobuf.get_or_init(|| {
            let value = serde_json::from_slice::<Value>(&self.json.bytes).unwrap_or_default();
            Doc {
                bytes: protobuf::document(&value).into(),
                etag: self.json.etag.clone(),
                content_type: protobuf::MEDIA_TYPE,
            }
        })
    }

    /// Answers a request for `/openapi/v2` in the form its `Accept` names, as kube-openapi's
    /// handler chooses: ranges by quality, the more specific first among equals; JSON for a
    /// wildcard or no `Accept`; 406 when nothing offered is accepted.
    pub fn serve<B>(&self, req: &Request<B>) -> Result<Response<Body>, Status> {
        super::readable(req)?;
        let mut ranges: Vec<(f32, u8, &str)> = meta::accept_ranges(req.headers())
            .filter_map(|r| {
                let media = r.split(';').next().unwrap_or_default().trim();
                let q = meta::range_param(r, "q").map_or(Some(1.0), |q| q.parse::<f32>().ok())?;
                let specific = match media.split_once('/') {
                    Some(("*", _)) => 0,
                    Some((_, "*")) => 1,
                    _ => 2,
                };
                (q > 0.0).then_some((q, specific, media))
            })
            .collect();
        if ranges.is_empty() {
            ranges.push((1.0, 0, "*/*"));
        }
        ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
        for (_, _, media) in ranges {
            let media = media.to_ascii_lowercase();
            match media.as_str() {
                "application/json" | "application/*" | "*/*" => {
                    return Ok(super::respond(req, &self.json))
                }
                PROTOBUF_DEPRECATED | protobuf::MEDIA_TYPE => {
                    return Ok(super::respond(req, self.protobuf()))
                }
                _ => {}
            }
        }
        Err(Status::not_acceptable(format!(
            "only the following media types are accepted: {JSON}, {}",
            protobuf::MEDIA_TYPE
        )))
    }
}

/// The spelling of the protobuf media type clients send (kube-openapi accepts both).
const PROTOBUF_DEPRECATED: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The merged documents.
#[derive(Debug)]
pub struct OpenApi {
    v2: ArcSwap<V2>,
    v3: ArcSwap<Doc>,
    fetched: Mutex<HashMap<String, Fetched>>,
    /// Each backend's v3 document of a group version with several backends, by URL.
    documents: Mutex<HashMap<String, Tagged>>,
    /// The merged v3 documents of group versions with several backends, by
    /// `apis/<group>/<version>`.
    merged_v3: ArcSwap<HashMap<String, Arc<Doc>>>,
    /// The registry generation the last merge read, and the one the availability round before
    /// it had checked; readiness waits for a merge of a loaded, checked registry.
    merged: tokio::sync::watch::Sender<(u64, u64)>,
}

impl Default for OpenApi {
    /// Empty documents until the first merge.
    fn default() -> Self {
        Self {
            v2: ArcSwap::from_pointee(V2::new(Doc::new(&merge_v2(std::iter::empty()), JSON))),
            v3: ArcSwap::from_pointee(Doc::new(&merge_v3_index(std::iter::empty(), None), JSON)),
            fetched: Mutex::default(),
            documents: Mutex::default(),
            merged_v3: ArcSwap::default(),
            merged: tokio::sync::watch::Sender::new((0, 0)),
        }
    }
}

const JSON: &str = "application/json";

impl OpenApi {
    /// `/openapi/v2`.
    pub fn v2(&self) -> Arc<V2> {
        self.v2.load_full()
    }

    /// `/openapi/v3`.
    pub fn v3(&self) -> Arc<Doc> {
        self.v3.load_full()
    }

    /// The merged `/openapi/v3/apis/<group>/<version>` of a group version with several
    /// backends; None for any other (its backend's is proxied).
    pub fn v3_document(&self, group: &str, version: &str) -> Option<Arc<Doc>> {
        self.merged_v3
            .load()
            .get(&format!("apis/{group}/{version}"))
            .cloned()
    }

    /// (registry generation, checked generation) of the last merge.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<(u64, u64)> {
        self.merged.subscribe()
    }

    /// Keeps the documents fresh until the registry is dropped.
    pub fn spawn(
        self: &Arc<Self>,
        registry: Arc<Registry>,
        proxy: Arc<Proxy>,
        availability: Arc<Availability>,
    ) {
        let this = self.clone();
        tokio::spawn(async move {
            let (mut reg, mut avail) = (registry.subscribe(), availability.subscribe());
            let mut checked = availability.checked();
            loop {
                avail.borrow_and_update();
                let read = (*reg.borrow_and_update(), *checked.borrow_and_update());
                this.refresh(
                    &registry.snapshot().iter().cloned().collect::<Vec<_>>(),
                    &proxy,
                    &availability,
                )
                .await;
                this.merged.send_replace(read);
                tokio::select! {
                    r = reg.changed() => if r.is_err() { return },
                    a = avail.changed() => if a.is_err() { return },
                    c = checked.changed() => if c.is_err() { return },
                    () = tokio::time::sleep(REFRESH) => {}
                }
            }
        });
    }

    async fn refresh(
        &self,
        services: &[Arc<ApiService>],
        proxy: &Proxy,
        availability: &Availability,
    ) {
        // One fetch per distinct backend of a non-local APIService known to be available (a
        // backend not checked yet waits for its check: one that hangs must not hold the merge).
        let mut backends: BTreeMap<String, Arc<Backend>> = BTreeMap::new();
        for svc in services.iter().filter(|s| s.service.is_some()) {
            if !availability
                .get(&svc.name)
                .is_some_and(|s| s.condition.available)
            {
                continue;
            }
            if let Ok(b) = proxy.backend_for(svc) {
                backends.entry(b.url("")).or_insert(b);
            }
        }
        // Group versions with several backends: every backend that is up, in routing order.
        let split = split(services, proxy, availability);
        for (_, members) in &split {
            for b in members {
                backends.entry(b.url("")).or_insert(b.clone());
            }
        }
        if let Some(delegate) = proxy.delegate() {
            backends.insert(DELEGATE.to_string(), delegate.clone());
        }
        let previous = self
            .fetched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let results: Vec<(String, Fetched)> = futures_util::stream::iter(backends)
            .map(|(key, backend)| {
                let old = previous.get(&key).cloned().unwrap_or_default();
                async move {
                    let v2 = fetch(&backend, "/openapi/v2", old.v2).await;
                    let v3 = fetch(&backend, "/openapi/v3", old.v3).await;
                    (key, Fetched { v2, v3 })
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        {
            let mut fetched = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
            for (key, f) in results {
                fetched.insert(key, f);
            }
        }
        let merged_v3 = self.merge_split(&split).await;
        let fetched = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
        let by_backend: HashMap<String, &Fetched> =
            fetched.iter().map(|(k, v)| (k.clone(), v)).collect();
        let mut order: Vec<(&ApiService, &Fetched)> = Vec::new();
        for svc in services {
            if let Some(f) = proxy
                .backend_for(svc)
                .ok()
                .and_then(|b| by_backend.get(&b.url("")).copied())
            {
                order.push((svc, f));
            }
        }
        // The other backends' parts of a group version with several: after its own service's.
        let mut parts: Vec<(&ApiService, &Fetched)> = order.clone();
        for (svc, members) in &split {
            for b in members {
                if let Some(f) = by_backend.get(&b.url("")).copied() {
                    parts.push((svc, f));
                }
            }
        }
        let delegate = proxy
            .delegate()
            .and_then(|_| by_backend.get(DELEGATE).copied());
        let delegate_v2 = delegate
            .and_then(|f| f.v2.as_ref())
            .map(|(v, _)| v.as_ref());
        let mut by_priority = parts;
        super::order::spec_order(&mut by_priority, |(s, _)| s);
        let own: Vec<Value> = by_priority
            .iter()
            .filter_map(|(s, f)| {
                let (spec, _) = f.v2.as_ref()?;
                Some(v2::own_paths(spec, &s.group, &s.version))
            })
            .collect();
        let v2 = merge_v2(delegate_v2.into_iter().chain(own.iter()));
        let mut v3 = merge_v3_index(
            order
                .iter()
                .filter_map(|(s, f)| f.v3.as_ref().map(|(v, _)| (*s, v.as_ref()))),
            delegate
                .and_then(|f| f.v3.as_ref())
                .map(|(v, _)| v.as_ref()),
        );
        for (key, doc) in merged_v3.iter() {
            let hash = doc.etag.to_str().unwrap_or_default().trim_matches('"');
            v3["paths"][key] =
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")});
        }
        let tags = |m: &HashMap<String, Arc<Doc>>| -> HashMap<String, HeaderValue> {
            m.iter().map(|(k, d)| (k.clone(), d.etag.clone())).collect()
        };
        if tags(&self.merged_v3.load()) != tags(&merged_v3) {
            self.merged_v3.store(Arc::new(merged_v3));
        }
        let v2 = Doc::new(&v2, JSON);
        if self.v2.load().json.bytes != v2.bytes {
            self.v2.store(Arc::new(V2::new(v2)));
        }
        let v3 = Doc::new(&v3, JSON);
        if self.v3.load().bytes != v3.bytes {
            self.v3.store(Arc::new(v3));
        }
    }
}

/// A backend and the URL of a document on it.
type Source = (Arc<Backend>, String);

impl OpenApi {
    /// The merged v3 document of each group version of `split` whose backends' indexes list
    /// one: each backend's fetched (with its ETag) from the URL its index gives.
    async fn merge_split(
        &self,
        split: &[(Arc<ApiService>, Vec<Arc<Backend>>)],
    ) -> HashMap<String, Arc<Doc>> {
        // Each group version, and each backend's URL of its document.
        let wanted: Vec<(String, Vec<Source>)> = {
            let fetched = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
            split
                .iter()
                .map(|(svc, members)| {
                    let key = format!("apis/{}/{}", svc.group, svc.version);
                    let urls = members
                        .iter()
                        .filter_map(|b| {
                            let index = fetched.get(&b.url(""))?.v3.as_ref()?;
                            let url = index.0["paths"][&key]["serverRelativeURL"].as_str()?;
                            Some((b.clone(), url.to_string()))
                        })
                        .collect();
                    (key, urls)
                })
                .collect()
        };
        let previous = self
            .documents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut documents = HashMap::new();
        let mut merged = HashMap::new();
        for (key, urls) in wanted {
            let mut docs = Vec::new();
            for (backend, url) in urls {
                let id = backend.url(&url);
                let old = previous.get(&id).cloned();
                if let Some(doc) = fetch(&backend, &url, old).await {
                    docs.push(doc.0.clone());
                    documents.insert(id, doc);
                }
            }
            if !docs.is_empty() {
                let doc = merge_v3_document(docs.iter().map(Arc::as_ref));
                merged.insert(key, Arc::new(Doc::new(&doc, JSON)));
            }
        }
        *self.documents.lock().unwrap_or_else(|e| e.into_inner()) = documents;
        merged
    }
}

/// Each group version with APIServiceBackends and the backends of its members that are up, in
/// routing order (its own service's included: its part of `/openapi/v3` is merged too).
fn split(
    services: &[Arc<ApiService>],
    proxy: &Proxy,
    availability: &Availability,
) -> Vec<(Arc<ApiService>, Vec<Arc<Backend>>)> {
    services
        .iter()
        .filter(|s| !s.backends.is_empty())
        .filter_map(|svc| {
            let state = availability.get(&svc.name)?;
            let members = state.members.as_ref()?;
            let up = members
                .iter()
                .filter(|m| m.state.condition.available)
                .filter_map(|m| proxy.backend_for(&m.target).ok())
                .collect();
            Some((svc.clone(), up))
        })
        .collect()
}

/// One group version's OpenAPI v3 document from its backends' (in routing order): each path,
/// and each entry of each `components` map, from the first that has it; the rest from the
/// first document.
pub fn merge_v3_document<'a>(mut docs: impl Iterator<Item = &'a Value>) -> Value {
    let mut merged = match docs.next() {
        Some(Value::Object(first)) => first.clone(),
        _ => Map::new(),
    };
    for doc in docs {
        merge_entries(&mut merged, "paths", &doc["paths"]);
        if let Some(components) = doc["components"].as_object() {
            let mut mine = match merged.remove("components") {
                Some(Value::Object(m)) => m,
                _ => Map::new(),
            };
            for (section, entries) in components {
                merge_entries(&mut mine, section, entries);
            }
            merged.insert("components".into(), Value::Object(mine));
        }
    }
    Value::Object(merged)
}

/// Adds each entry of the object `from` missing from the object under `key` of `into`.
fn merge_entries(into: &mut Map<String, Value>, key: &str, from: &Value) {
    let Some(from) = from.as_object() else {
        return;
    };
    let mut mine = match into.remove(key) {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    for (k, v) in from {
        mine.entry(k.clone()).or_insert_with(|| v.clone());
    }
    into.insert(key.to_string(), Value::Object(mine));
}

/// Fetches one document, reusing `old` when the backend answers 304 or fails.
async fn fetch(backend: &Backend, path: &str, old: Option<Tagged>) -> Option<Tagged> {
    let tag = old.as_ref().and_then(|(_, t)| t.clone());
    match backend
        .fetch(
            path,
            "application/json",
            tag.as_deref(),
            MAX_SPEC_BYTES,
            TIMEOUT,
        )
        .await
    {
        Ok(Some((bytes, etag))) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => Some((Arc::new(v), etag)),
            Err(e) => {
                tracing::warn!(url = %backend.url(path), error = %e, "backend OpenAPI is not JSON; keeping the last good one");
                old
            }
        },
        Ok(None) => old,
        Err(e) => {
            tracing::debug!(url = %backend.url(path), error = %e, "no OpenAPI from backend");
            old
        }
    }
}

/// The merged Swagger 2.0 document of `specs` (the delegate's first, then each APIService's
/// own part, in [`super::order::spec_order`]); the gateway's own skeleton when there are none.
pub fn merge_v2<'a>(specs: impl Iterator<Item = &'a Value>) -> Value {
    let base = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": concat!("apigw-", env!("CARGO_PKG_VERSION"))},
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header",
            "description": "Bearer Token authentication"}},
        "security": [{"BearerToken": []}],
    });
    v2::merge(base, specs)
}

/// The v3 index: for each APIService, its own `apis/<group>/<version>` entry and its group's
/// `apis/<group>` entry from its backend's index (kube-aggregator lists every entry of a
/// backend's index; these are the ones the gateway routes to that backend); then every entry of
/// the delegate's index not already listed (their URLs lead back to the gateway, which forwards
/// them to the delegate).
pub fn merge_v3_index<'a>(
    indexes: impl Iterator<Item = (&'a ApiService, &'a Value)>,
    delegate: Option<&Value>,
) -> Value {
    let mut paths = Map::new();
    let mut groups = Vec::new();
    for (svc, index) in indexes {
        let key = format!("apis/{}/{}", svc.group, svc.version);
        if let Some(entry) = index["paths"].get(&key) {
            paths.entry(key).or_insert_with(|| entry.clone());
        }
        let group = format!("apis/{}", svc.group);
        if let Some(entry) = index["paths"].get(&group) {
            groups.push((group, entry.clone()));
        }
    }
    for (group, entry) in groups {
        paths.entry(group).or_insert(entry);
    }
    if let Some(entries) = delegate.and_then(|d| d["paths"].as_object()) {
        for (key, entry) in entries {
            paths.entry(key.clone()).or_insert_with(|| entry.clone());
        }
    }
    json!({"paths": paths})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_is_the_gateways_skeleton_until_a_spec_is_merged() {
        let empty = merge_v2(std::iter::empty());
        assert_eq!(empty["swagger"], "2.0");
        assert_eq!(empty["paths"], json!({}));
        let delegate = json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.36.3"},
                              "paths": {"/api/": {}}});
        let m = merge_v2([&delegate].into_iter());
        assert_eq!(m["info"]["version"], "v1.36.3");
        assert!(m.get("securityDefinitions").is_none());
    }

    #[test]
    fn a_split_group_versions_v3_documents_merge_first_wins() {
        let a = json!({"openapi": "3.0.0", "info": {"title": "a"},
                       "paths": {"/apis/g/v1/foos": {"get": {}}, "/apis/g/v1/": {"get": {"x": "a"}}},
                       "components": {"schemas": {"Foo": {"type": "object"}, "Status": {"x": "a"}}}});
        let b = json!({"openapi": "3.0.0", "info": {"title": "b"},
                       "paths": {"/apis/g/v1/bars": {"get": {}}, "/apis/g/v1/": {"get": {"x": "b"}}},
                       "components": {"schemas": {"Bar": {"type": "object"}, "Status": {"x": "b"}},
                                      "securitySchemes": {"BearerToken": {"type": "apiKey"}}}});
        let m = merge_v3_document([&a, &json!([1]), &b].into_iter());
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&m["paths"]).len(), 3);
        assert_eq!(m["paths"]["/apis/g/v1/"]["get"]["x"], "a");
        assert_eq!(m["components"]["schemas"]["Status"]["x"], "a");
        assert_eq!(keys(&m["components"]["schemas"]).len(), 3);
        assert_eq!(
            m["components"]["securitySchemes"]["BearerToken"]["type"],
            "apiKey"
        );
        assert_eq!(m["info"]["title"], "a");
        // A first document that is not an object does not stop the others.
        assert_eq!(
            merge_v3_document([&json!("x"), &b].into_iter())["paths"],
            b["paths"]
        );
    }

    #[test]
    fn v3_index_takes_each_apiservice_entry() {
        let svc = ApiService::from_value(json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.a.example.com"},
            "spec": {"group": "a.example.com", "version": "v1", "groupPriorityMinimum": 1, "versionPriority": 1,
                     "service": {"name": "s", "namespace": "n"}}})).unwrap();
        let index = json!({"paths": {"apis/a.example.com/v1": {"serverRelativeURL": "/openapi/v3/apis/a.example.com/v1?hash=AB"},
                                      "apis/other.example.com/v1": {"serverRelativeURL": "/x"}}});
        let m = merge_v3_index([(&svc, &index)].into_iter(), None);
        assert_eq!(m["paths"].as_object().unwrap().len(), 1);
        assert_eq!(
            m["paths"]["apis/a.example.com/v1"]["serverRelativeURL"],
            "/openapi/v3/apis/a.example.com/v1?hash=AB"
        );
    }
}
