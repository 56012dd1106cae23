//! Merging: the discovery documents of one state (registry, availability, delegate), rendered
//! once per change. Everything a change did not touch is reused: each APIService's aggregated
//! version entry, each group's legacy entry and `/apis/<group>` document (with its ETag), each
//! group's aggregated entry; the documents are these texts spliced together, and only the
//! whole-document ETags (SHA-512 over all the bytes) are computed anew.
//!
//! Precedence for a group version: a registered APIService, then the gateway's own
//! ([`Builtin`]), then the delegate's (synthetic `Local` APIServices, see [`super::delegate`]).
//! A registered `Local` APIService takes its resources from the delegate's discovery.

use super::aggregated::{self, Member, VersionCache};
use super::order;
use super::{Builtin, Doc, Documents, JSON};
use apigw_availability::State;
use apigw_registry::{ApiService, Snapshot};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

/// What the renders of successive states share.
#[derive(Debug, Default)]
pub struct RenderCache {
    versions: VersionCache,
    legacy: Mutex<HashMap<String, LegacyGroup>>,
    aggregated: Mutex<HashMap<String, AggregatedGroup>>,
    /// The `/apis/<group>` documents of the last render, reused while no group changed.
    group_docs: Mutex<Option<Arc<HashMap<String, Doc>>>>,
    /// `/api` without a delegate: always the same.
    api: OnceLock<Arc<[Doc; 2]>>,
}

/// A group's legacy entry, for the versions (in order) it was rendered from.
#[derive(Debug)]
struct LegacyGroup {
    versions: Vec<String>,
    entry: Arc<str>,
    doc: Doc,
}

/// A group's aggregated entry, for the version entries (by identity) it was rendered from.
#[derive(Debug)]
struct AggregatedGroup {
    versions: Vec<Arc<str>>,
    entry: Arc<str>,
}

/// One group version to list, with what its backend serves.
struct Entry<'a> {
    svc: &'a ApiService,
    state: Option<&'a State>,
}

/// The `apiregistration.k8s.io` entries, the same in every render.
fn apiregistration() -> &'static (String, String) {
    static TEXT: OnceLock<(String, String)> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut legacy = crate::apiservices::group_document();
        if let Some(map) = legacy.as_object_mut() {
            map.remove("kind");
            map.remove("apiVersion");
        }
        (
            legacy.to_string(),
            aggregated::apiregistration_item().to_string(),
        )
    })
}

/// `/api`'s APIVersions: the core group's `v1`, reached at `server_address` from anywhere, as
/// kube-apiserver lists its external address.
pub fn api_versions(server_address: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
}

/// `/api/v1` without a delegate: the core group version with no resources. Clients that
/// assume the core group (the Python `DynamicClient`, client-go's legacy discovery) find it and
/// go on to the groups under `/apis`.
pub fn core_v1() -> &'static Doc {
    static DOC: OnceLock<Doc> = OnceLock::new();
    DOC.get_or_init(|| {
        Doc::new(
            &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": []}),
            JSON,
        )
    })
}

/// Joins `parts` with commas between `head` and `tail`.
fn splice<'a>(head: &str, parts: impl Iterator<Item = &'a str> + Clone, tail: &str) -> String {
    let len: usize = parts.clone().map(|p| p.len() + 1).sum();
    let mut out = String::with_capacity(head.len() + len + tail.len());
    out.push_str(head);
    for (i, p) in parts.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(p);
    }
    out.push_str(tail);
    out
}

impl RenderCache {
    /// Renders every document of one state. Groups with an empty name (the legacy `v1`)
    /// belong under `/api`.
    pub fn render(
        &self,
        snapshot: &Snapshot,
        states: &HashMap<String, Arc<State>>,
        builtin: &[Builtin],
        delegate: &[Builtin],
        key: (u64, u64, u64),
    ) -> Documents {
        let entries = entries(snapshot, states, builtin, delegate);
        let groups = order::ordered_groups(&entries, |e| e.svc);
        let (legacy, group_docs) = self.legacy(&entries, &groups);
        let items = self.aggregated(&entries, &groups);
        self.versions
            .retain(entries.iter().map(|e| e.svc.name.as_str()));
        let own = apiregistration().1.as_str();
        let parts: Vec<&str> = std::iter::once(own)
            .chain(items.iter().map(|t| &**t))
            .collect();
        let v2 = super::aggregated_doc(&parts);
        Documents {
            key,
            apis: [legacy, v2],
            api: self.api().clone(),
            groups: group_docs,
        }
    }

    /// `/api` without a delegate: the core group's `v1`, with no resources (see
    /// [`core_v1`]); the legacy form's server address is the one of [`api_versions`] with
    /// none known.
    fn api(&self) -> &Arc<[Doc; 2]> {
        self.api.get_or_init(|| {
            let core = json!({"version": "v1", "freshness": "Current", "resources": []});
            let group = aggregated::group_json("", &[Arc::from(core.to_string())]);
            let v2 = super::aggregated_doc(&[&group]);
            Arc::new([Doc::new(&api_versions(""), JSON), v2])
        })
    }

    /// The legacy `/apis` and the `/apis/<group>` documents; `groups` in `/apis` order.
    fn legacy(
        &self,
        entries: &[Entry<'_>],
        groups: &[Vec<usize>],
    ) -> (Doc, Arc<HashMap<String, Doc>>) {
        let mut cache = self.legacy.lock().unwrap_or_else(|e| e.into_inner());
        let mut changed = false;
        let mut texts: Vec<Arc<str>> = Vec::with_capacity(groups.len());
        let mut names: HashSet<&str> = HashSet::with_capacity(groups.len());
        for members in groups {
            let name = entries[members[0]].svc.group.as_str();
            if name.is_empty() {
                continue;
            }
            names.insert(name);
            let same = cache.get(name).is_some_and(|g| {
                g.versions.len() == members.len()
                    && g.versions
                        .iter()
                        .zip(members)
                        .all(|(v, &i)| *v == entries[i].svc.version)
            });
            if !same {
                changed = true;
                let svcs: Vec<&ApiService> = members.iter().map(|&i| entries[i].svc).collect();
                cache.insert(name.to_string(), legacy_group(&svcs));
            }
            if let Some(g) = cache.get(name) {
                texts.push(g.entry.clone());
            }
        }
        if cache.len() != names.len() {
            changed = true;
            cache.retain(|k, _| names.contains(k.as_str()));
        }
        let mut last = self.group_docs.lock().unwrap_or_else(|e| e.into_inner());
        let docs = match last.as_ref() {
            Some(docs) if !changed => docs.clone(),
            _ => {
                let docs: Arc<HashMap<String, Doc>> = Arc::new(
                    cache
                        .iter()
                        .map(|(k, g)| (k.clone(), g.doc.clone()))
                        .collect(),
                );
                *last = Some(docs.clone());
                docs
            }
        };
        let own = apiregistration().0.as_str();
        let text = splice(
            r#"{"kind":"APIGroupList","apiVersion":"v1","groups":["#,
            std::iter::once(own).chain(texts.iter().map(|t| &**t)),
            "]}",
        );
        (Doc::from_text(text, JSON), docs)
    }

    /// The group items of the aggregated list, in its order.
    fn aggregated(&self, entries: &[Entry<'_>], groups: &[Vec<usize>]) -> Vec<Arc<str>> {
        let top = |members: &[usize]| {
            members
                .iter()
                .map(|&i| entries[i].svc.group_priority_minimum)
                .max()
                .unwrap_or(0)
        };
        let mut ordered: Vec<(&str, i64, &Vec<usize>)> = groups
            .iter()
            .map(|m| (entries[m[0]].svc.group.as_str(), top(m), m))
            .filter(|(name, _, _)| !name.is_empty())
            .collect();
        ordered.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut cache = self.aggregated.lock().unwrap_or_else(|e| e.into_inner());
        let mut texts: Vec<Arc<str>> = Vec::with_capacity(ordered.len());
        for (name, _, members) in &ordered {
            let versions: Vec<Arc<str>> = members
                .iter()
                .map(|&i| {
                    self.versions.version(&Member {
                        svc: entries[i].svc,
                        state: entries[i].state,
                    })
                })
                .collect();
            let hit = cache.get(*name).filter(|g| {
                g.versions.len() == versions.len()
                    && g.versions
                        .iter()
                        .zip(&versions)
                        .all(|(a, b)| Arc::ptr_eq(a, b))
            });
            let text = match hit {
                Some(g) => g.entry.clone(),
                None => {
                    let entry: Arc<str> = aggregated::group_json(name, &versions).into();
                    cache.insert(
                        name.to_string(),
                        AggregatedGroup {
                            versions,
                            entry: entry.clone(),
                        },
                    );
                    entry
                }
            };
            texts.push(text);
        }
        if cache.len() > texts.len() {
            let names: HashSet<&str> = ordered.iter().map(|(n, _, _)| *n).collect();
            cache.retain(|k, _| names.contains(k.as_str()));
        }
        texts
    }
}

/// A group's legacy entry and `/apis/<group>` document, from its APIServices in version order.
fn legacy_group(svcs: &[&ApiService]) -> LegacyGroup {
    let versions: Vec<Value> = svcs
        .iter()
        .map(
            |s| json!({"groupVersion": format!("{}/{}", s.group, s.version), "version": s.version}),
        )
        .collect();
    let name = svcs.first().map(|s| s.group.as_str()).unwrap_or_default();
    let mut doc = json!({"name": name, "versions": versions, "preferredVersion": versions.first()});
    let entry: Arc<str> = doc.to_string().into();
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    LegacyGroup {
        versions: svcs.iter().map(|s| s.version.clone()).collect(),
        entry,
        doc: Doc::new(&doc, JSON),
    }
}

/// Every group version to list: the registry's, then the gateway's own and the delegate's that
/// no APIService claims. A registered `Local` APIService whose check carries no resources takes
/// the delegate's.
fn entries<'a>(
    snapshot: &'a Snapshot,
    states: &'a HashMap<String, Arc<State>>,
    builtin: &'a [Builtin],
    delegate: &'a [Builtin],
) -> Vec<Entry<'a>> {
    let from_delegate: HashMap<&str, &Builtin> =
        delegate.iter().map(|b| (b.svc.name.as_str(), b)).collect();
    let mut out: Vec<Entry<'a>> = snapshot
        .iter()
        .map(|svc| {
            let mut state = states.get(&svc.name).map(|s| s.as_ref());
            let bare = state.is_none_or(|s| s.resources.is_none() && s.aggregated.is_none());
            if svc.service.is_none() && bare {
                if let Some(b) = from_delegate.get(svc.name.as_str()) {
                    state = Some(b.state.as_ref());
                }
            }
            Entry { svc, state }
        })
        .collect();
    let own: HashSet<&str> = builtin.iter().map(|b| b.svc.name.as_str()).collect();
    for b in builtin
        .iter()
        .filter(|b| snapshot.get(&b.svc.name).is_none())
    {
        out.push(Entry {
            svc: &b.svc,
            state: Some(&b.state),
        });
    }
    for b in delegate.iter().filter(|b| {
        snapshot.get(&b.svc.name).is_none()
            && !own.contains(b.svc.name.as_str())
            && b.svc.group != crate::apiservices::GROUP
    }) {
        out.push(Entry {
            svc: &b.svc,
            state: Some(&b.state),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use apigw_availability::Condition;
    use std::time::SystemTime;

    fn svc(group: &str, version: &str, gpm: i64, local: bool) -> ApiService {
        let mut spec = json!({"group": group, "version": version, "groupPriorityMinimum": gpm,
                              "versionPriority": 10});
        if !local {
            spec["service"] = json!({"name": "s", "namespace": "n"});
        }
        ApiService::from_value(json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": format!("{version}.{group}")}, "spec": spec
        }))
        .unwrap()
    }

    fn state(resource: &str, aggregated: bool) -> Arc<State> {
        let condition = Condition {
            available: true,
            reason: "Passed",
            message: String::new(),
            last_transition: SystemTime::now(),
        };
        let list = json!({"kind": "APIResourceList", "resources": [
            {"name": resource, "singularName": "", "namespaced": true, "kind": "K", "verbs": ["get"]}]});
        let entry = json!({"version": "v1", "resources": [
            {"resource": resource, "categories": ["from-aggregated"], "verbs": ["get"]}]});
        Arc::new(State {
            condition,
            resources: (!aggregated).then(|| Arc::new(list)),
            members: None,
            aggregated: aggregated.then(|| Arc::new(entry)),
        })
    }

    fn delegate(group: &str, resource: &str) -> Builtin {
        let (gpm, _) = super::super::delegate::priority(group, "v1");
        Builtin {
            svc: Arc::new(svc(group, "v1", gpm, true)),
            state: state(resource, true),
        }
    }

    #[test]
    fn registered_wins_local_takes_the_delegates_and_unchanged_groups_are_reused() {
        let snapshot = Snapshot::new([
            svc("a.example.com", "v1", 100, false),
            svc("local.example.com", "v1", 500, true),
        ]);
        let states: HashMap<String, Arc<State>> =
            [("v1.a.example.com".to_string(), state("things", false))].into();
        let delegate = [
            delegate("apps", "deployments"),
            delegate("a.example.com", "impostors"),
            delegate("local.example.com", "locals"),
            delegate(crate::apiservices::GROUP, "ignored"),
        ];
        let cache = RenderCache::default();
        let docs = cache.render(&snapshot, &states, &[], &delegate, (1, 0, 0));
        let legacy: Value = serde_json::from_slice(&docs.apis[0].bytes).unwrap();
        let names: Vec<&str> = legacy["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                crate::apiservices::GROUP,
                "apps",
                "local.example.com",
                "a.example.com"
            ]
        );
        let v2: Value = serde_json::from_slice(&docs.apis[1].bytes).unwrap();
        let resource = |group: &str| {
            v2["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["metadata"]["name"] == group)
                .map(|g| g["versions"][0]["resources"][0].clone())
                .unwrap()
        };
        assert_eq!(resource("a.example.com")["resource"], "things");
        assert_eq!(resource("local.example.com")["resource"], "locals");
        assert_eq!(resource("apps")["categories"], json!(["from-aggregated"]));
        let again = cache.render(&snapshot, &states, &[], &delegate, (2, 0, 0));
        assert!(Arc::ptr_eq(&docs.groups, &again.groups));
        assert_eq!(docs.apis[1].etag, again.apis[1].etag);
        assert_eq!(docs.apis[0].etag, again.apis[0].etag);
    }
}
