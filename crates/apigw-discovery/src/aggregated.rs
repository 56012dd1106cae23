//! Aggregated discovery (`apidiscovery.k8s.io/v2`): the
//! resources of every group version in one `APIGroupDiscoveryList`. Each APIService contributes
//! its version entry from the backend's own aggregated discovery when the backend serves one
//! (resources as the backend says them), else the APIResourceList its backend last served,
//! converted; either is marked `Stale` while the backend is unavailable. Groups are ordered as
//! upstream orders this document: by the highest groupPriorityMinimum of their versions, ties
//! by name. This module renders entries and groups as JSON text; [`super::render`] splices
//! them into documents.

use super::order::version_order;
use apigw_availability::State;
use apigw_registry::ApiService;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// One APIService with what its backend serves.
pub struct Member<'a> {
    pub svc: &'a ApiService,
    pub state: Option<&'a State>,
}

/// Each APIService's rendered version entry, kept while its resources and freshness stay the
/// same, so a registry change re-renders only what changed.
#[derive(Debug, Default)]
pub struct VersionCache {
    entries: Mutex<HashMap<String, Rendered>>,
}

/// A rendered version entry: identities of the resources and aggregated-entry Arcs, whether
/// it is fresh, and the JSON text.
type Rendered = (usize, usize, bool, Arc<str>);

fn ptr(v: &Option<Arc<Value>>) -> usize {
    v.as_ref().map_or(0, |a| Arc::as_ptr(a) as usize)
}

impl VersionCache {
    /// The version entry of `m`. A backend that has never answered (or not been checked yet)
    /// still has one, `Stale` with no resources, as kube-aggregator lists it: clients see that
    /// the group version exists and is broken.
    pub fn version(&self, m: &Member<'_>) -> Arc<str> {
        let key = m.state.map_or((0, 0, false), |state| {
            let (res, agg) = (ptr(&state.resources), ptr(&state.aggregated));
            (res, agg, state.condition.available)
        });
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((r, a, f, text)) = entries.get(&m.svc.name) {
            if (*r, *a, *f) == key {
                return text.clone();
            }
        }
        let (res, agg, fresh) = key;
        let entry = match m.state {
            Some(state) => version_entry(m.svc, state),
            None => json!({"version": m.svc.version, "freshness": "Stale"}),
        };
        let text: Arc<str> = entry.to_string().into();
        entries.insert(m.svc.name.clone(), (res, agg, fresh, text.clone()));
        text
    }

    /// Forgets APIServices that are gone.
    pub fn retain<'a>(&self, live: impl ExactSizeIterator<Item = &'a str>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() > live.len() {
            let names: HashSet<&str> = live.collect();
            entries.retain(|k, _| names.contains(k.as_str()));
        }
    }
}

/// The version entry of one APIService: the backend's own aggregated entry when it has one,
/// else its APIResourceList converted. `Stale` while the backend is unavailable (or when the
/// backend itself says so).
fn version_entry(svc: &ApiService, state: &State) -> Value {
    let backend_stale = state
        .aggregated
        .as_ref()
        .is_some_and(|a| a["freshness"].as_str() == Some("Stale"));
    let fresh = state.condition.available && !backend_stale;
    let resources = match (&state.aggregated, &state.resources) {
        (Some(entry), _) => match &entry["resources"] {
            Value::Array(r) => Value::Array(r.clone()),
            _ => Value::Array(Vec::new()),
        },
        (None, Some(list)) => Value::Array(resources(list)),
        (None, None) => Value::Array(Vec::new()),
    };
    let freshness = if fresh { "Current" } else { "Stale" };
    match resources {
        // Upstream leaves an empty list out.
        Value::Array(r) if r.is_empty() => json!({"version": svc.version, "freshness": freshness}),
        resources => {
            json!({"version": svc.version, "resources": resources, "freshness": freshness})
        }
    }
}

/// One group of the list as JSON text, around its already rendered version entries.
pub fn group_json(name: &str, versions: &[Arc<str>]) -> String {
    let quoted = Value::from(name).to_string();
    let len: usize = versions.iter().map(|v| v.len() + 1).sum();
    let mut out = String::with_capacity(len + quoted.len() + 64);
    // The core group has no name, and upstream writes none.
    if name.is_empty() {
        out.push_str(r#"{"metadata":{},"versions":["#);
    } else {
        out.push_str(r#"{"metadata":{"name":"#);
        out.push_str(&quoted);
        out.push_str(r#"},"versions":["#);
    }
    for (i, v) in versions.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(v);
    }
    out.push_str("]}");
    out
}

/// The groups of the list for `services` (every APIService, any order), each as JSON text.
pub fn items_json(services: &[Member<'_>], cache: &VersionCache) -> Vec<String> {
    let mut groups: HashMap<&str, Vec<&Member<'_>>> = HashMap::new();
    for m in services.iter().filter(|m| !m.svc.group.is_empty()) {
        groups.entry(&m.svc.group).or_default().push(m);
    }
    let mut ordered: Vec<(&str, Vec<&Member<'_>>)> = groups.into_iter().collect();
    let top = |ms: &[&Member<'_>]| {
        ms.iter()
            .map(|m| m.svc.group_priority_minimum)
            .max()
            .unwrap_or(0)
    };
    ordered.sort_by(|(a, am), (b, bm)| top(bm).cmp(&top(am)).then_with(|| a.cmp(b)));
    let out = ordered
        .into_iter()
        .map(|(name, mut members)| {
            members.sort_by(|a, b| version_order(a.svc, b.svc));
            let versions: Vec<Arc<str>> = members.iter().map(|m| cache.version(m)).collect();
            group_json(name, &versions)
        })
        .collect();
    cache.retain(services.iter().map(|m| m.svc.name.as_str()));
    out
}

/// The groups as JSON values (for tests and tools).
pub fn items(services: &[Member<'_>]) -> Vec<Value> {
    items_json(services, &VersionCache::default())
        .iter()
        .filter_map(|g| serde_json::from_str(g).ok())
        .collect()
}

/// Converts a legacy APIResourceList into aggregated resources with nested subresources, as
/// kube-aggregator converts a backend's: the response kind's group and version are the
/// APIResource's own (usually empty), a subresource without a kind has an empty response kind,
/// and a subresource whose parent is not listed gets an empty parent.
pub fn resources(list: &Value) -> Vec<Value> {
    let empty = Vec::new();
    let all = list["resources"].as_array().unwrap_or(&empty);
    let kind_of = |r: &Value| {
        let s = |k: &str| r[k].as_str().unwrap_or_default();
        json!({"group": s("group"), "version": s("version"), "kind": s("kind")})
    };
    let scope = |r: &Value| {
        json!(if r["namespaced"].as_bool() == Some(true) {
            "Namespaced"
        } else {
            "Cluster"
        })
    };
    let mut out: Vec<Map<String, Value>> = Vec::new();
    let mut parents: HashMap<String, usize> = HashMap::new();
    for r in all {
        let Some(name) = r["name"].as_str().filter(|n| !n.contains('/')) else {
            continue;
        };
        let mut res = Map::new();
        res.insert("resource".into(), json!(name));
        res.insert("responseKind".into(), kind_of(r));
        res.insert("scope".into(), scope(r));
        res.insert(
            "singularResource".into(),
            json!(r["singularName"].as_str().unwrap_or_default()),
        );
        res.insert("verbs".into(), r["verbs"].clone());
        for key in ["shortNames", "categories"] {
            if r[key].as_array().is_some_and(|a| !a.is_empty()) {
                res.insert(key.into(), r[key].clone());
            }
        }
        parents.insert(name.to_string(), out.len());
        out.push(res);
    }
    for r in all {
        let Some((parent, sub)) = r["name"].as_str().and_then(|n| n.split_once('/')) else {
            continue;
        };
        let at = *parents.entry(parent.to_string()).or_insert_with(|| {
            let mut res = Map::new();
            res.insert("resource".into(), json!(parent));
            res.insert(
                "responseKind".into(),
                json!({"group": "", "version": "", "kind": ""}),
            );
            res.insert("scope".into(), scope(r));
            res.insert("singularResource".into(), json!(""));
            res.insert("verbs".into(), Value::Null);
            out.push(res);
            out.len() - 1
        });
        let kind = if r["kind"].as_str().is_some_and(|k| !k.is_empty()) {
            kind_of(r)
        } else {
            json!({"group": "", "version": "", "kind": ""})
        };
        let entry = json!({"subresource": sub, "responseKind": kind, "verbs": r["verbs"]});
        match out[at].get_mut("subresources") {
            Some(Value::Array(subs)) => subs.push(entry),
            _ => {
                out[at].insert("subresources".into(), Value::Array(vec![entry]));
            }
        }
    }
    out.into_iter().map(Value::Object).collect()
}

/// The `apiregistration.k8s.io` entry the gateway serves itself.
pub fn apiregistration_item() -> Value {
    let list = crate::apiservices::resource_list();
    json!({
        "metadata": {"name": crate::apiservices::GROUP},
        "versions": [{"version": "v1", "resources": resources(&list), "freshness": "Current"}]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use apigw_availability::Condition;
    use std::time::SystemTime;

    fn svc(group: &str, version: &str, gpm: i64, vp: i64) -> ApiService {
        ApiService::from_value(json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": format!("{version}.{group}")},
            "spec": {"group": group, "version": version, "groupPriorityMinimum": gpm,
                     "versionPriority": vp, "service": {"name": "s", "namespace": "n"}}
        }))
        .unwrap()
    }

    fn state(available: bool) -> State {
        State {
            condition: Condition {
                available,
                reason: "Passed",
                message: String::new(),
                last_transition: SystemTime::now(),
            },
            aggregated: None,
            members: None,
            resources: Some(Arc::new(json!({"kind": "APIResourceList", "resources": [
                {"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder",
                 "verbs": ["get", "list"], "shortNames": ["fl"]},
                {"name": "flunders/status", "singularName": "", "namespaced": true, "kind": "Flunder", "verbs": ["get"]},
                {"name": "clusterthings", "singularName": "clusterthing", "namespaced": false, "kind": "ClusterThing", "verbs": ["get"]}
            ]}))),
        }
    }

    #[test]
    fn converts_resources_with_subresources() {
        let r = resources(state(true).resources.unwrap().as_ref());
        assert_eq!(r.len(), 2);
        assert_eq!(r[0]["resource"], "flunders");
        assert_eq!(r[0]["scope"], "Namespaced");
        assert_eq!(r[0]["shortNames"], json!(["fl"]));
        // The APIResource's own group and version, empty in a legacy list, as upstream converts.
        assert_eq!(
            r[0]["responseKind"],
            json!({"group": "", "version": "", "kind": "Flunder"})
        );
        assert_eq!(r[0]["subresources"][0]["subresource"], "status");
        assert_eq!(r[1]["scope"], "Cluster");
        assert!(r[1].get("subresources").is_none());
    }

    #[test]
    fn groups_rank_by_highest_priority_then_name_and_stale_when_down() {
        let (a1, a2, b, c) = (
            svc("a.example.com", "v1", 100, 10),
            svc("a.example.com", "v2", 3000, 20),
            svc("b.example.com", "v1", 2000, 10),
            svc("c.example.com", "v1", 3000, 10),
        );
        let (up, down) = (state(true), state(false));
        let members = [
            Member {
                svc: &a1,
                state: Some(&up),
            },
            Member {
                svc: &a2,
                state: Some(&down),
            },
            Member {
                svc: &b,
                state: Some(&up),
            },
            Member {
                svc: &c,
                state: None,
            },
        ];
        let got = items(&members);
        let names: Vec<&str> = got
            .iter()
            .map(|g| g["metadata"]["name"].as_str().unwrap())
            .collect();
        // c has never answered: listed all the same, Stale and without resources, as
        // kube-aggregator lists it.
        assert_eq!(names, ["a.example.com", "c.example.com", "b.example.com"]);
        assert_eq!(
            got[1]["versions"],
            json!([{"version": "v1", "freshness": "Stale"}])
        );
        assert_eq!(got[0]["versions"][0]["version"], "v2");
        assert_eq!(got[0]["versions"][0]["freshness"], "Stale");
        assert_eq!(got[0]["versions"][1]["freshness"], "Current");
    }
}
