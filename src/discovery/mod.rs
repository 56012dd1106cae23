//! Discovery served by the gateway itself: `/api` (APIVersions), `/apis` (APIGroupList) and
//! `/apis/<group>` (APIGroup), built from the registry snapshot in kube-aggregator's order
//! ([`order`]). The documents are rendered once per registry generation and shared.

pub mod order;

use crate::body::{full, Body};
use crate::registry::{ApiService, Snapshot};
use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http::{header, HeaderValue, Response};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// The rendered documents of one registry generation.
#[derive(Debug)]
pub struct Documents {
    pub generation: u64,
    /// `/apis` as APIGroupList JSON.
    pub group_list: Bytes,
    /// `/apis/<group>` as APIGroup JSON, by group name.
    pub groups: HashMap<String, Bytes>,
}

fn group_version(s: &ApiService) -> Value {
    let gv = if s.group.is_empty() {
        s.version.clone()
    } else {
        format!("{}/{}", s.group, s.version)
    };
    json!({"groupVersion": gv, "version": s.version})
}

fn api_group(services: &[Arc<ApiService>]) -> Value {
    let versions: Vec<Value> = services.iter().map(|s| group_version(s)).collect();
    json!({
        "name": services[0].group,
        "versions": versions,
        "preferredVersion": versions[0],
    })
}

impl Documents {
    /// Renders the documents for `snapshot`. Groups with an empty name (the legacy `v1`) are
    /// served under `/api`, not listed in `/apis`.
    pub fn render(snapshot: &Snapshot) -> Self {
        let services: Vec<Arc<ApiService>> = snapshot.iter().cloned().collect();
        let ordered = order::ordered_groups(&services);
        let mut list = Vec::new();
        let mut groups = HashMap::new();
        for group in ordered.iter().filter(|g| !g[0].group.is_empty()) {
            let doc = api_group(group);
            let mut single = doc.clone();
            single["kind"] = json!("APIGroup");
            single["apiVersion"] = json!("v1");
            groups.insert(group[0].group.clone(), Bytes::from(single.to_string()));
            list.push(doc);
        }
        let group_list = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list});
        Self {
            generation: snapshot.generation,
            group_list: Bytes::from(group_list.to_string()),
            groups,
        }
    }
}

/// The documents of the newest generation, rendered on first use after a change.
#[derive(Debug, Default)]
pub struct Cache {
    current: ArcSwapOption<Documents>,
}

impl Cache {
    pub fn get(&self, snapshot: &Snapshot) -> Arc<Documents> {
        if let Some(docs) = self.current.load_full() {
            if docs.generation == snapshot.generation {
                return docs;
            }
        }
        let docs = Arc::new(Documents::render(snapshot));
        self.current.store(Some(docs.clone()));
        docs
    }
}

/// `/api` when no delegate serves it: the legacy group exists but has no versions here.
pub fn api_versions() -> Bytes {
    Bytes::from(
        json!({
            "kind": "APIVersions",
            "versions": [],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]
        })
        .to_string(),
    )
}

/// A discovery document as a response.
pub fn respond(doc: Bytes) -> Response<Body> {
    let mut res = Response::new(full(doc));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
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

    #[test]
    fn documents_follow_the_order_and_name_the_preferred_version() {
        let registry = Registry::default();
        registry.replace(Snapshot::new([
            svc("wardle.example.com", "v1alpha1", 1000, 15),
            svc("wardle.example.com", "v1", 2000, 20),
            svc("bloops.example.com", "v1", 1500, 10),
        ]));
        let cache = Cache::default();
        let docs = cache.get(&registry.snapshot());
        let list: Value = serde_json::from_slice(&docs.group_list).unwrap();
        assert_eq!(list["kind"], "APIGroupList");
        assert_eq!(list["groups"][0]["name"], "wardle.example.com");
        assert_eq!(
            list["groups"][0]["versions"][0]["groupVersion"],
            "wardle.example.com/v1"
        );
        assert_eq!(list["groups"][0]["preferredVersion"]["version"], "v1");
        assert_eq!(list["groups"][1]["name"], "bloops.example.com");
        let group: Value = serde_json::from_slice(&docs.groups["wardle.example.com"]).unwrap();
        assert_eq!(group["kind"], "APIGroup");
        assert_eq!(group["versions"][1]["version"], "v1alpha1");
        // same generation: the same rendered documents
        assert!(Arc::ptr_eq(&docs, &cache.get(&registry.snapshot())));
    }
}
