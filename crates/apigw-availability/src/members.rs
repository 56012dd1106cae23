//! One group version served by several backends: an APIService's own service and its
//! APIServiceBackends ([`apigw_registry::Backend`]). Each backend is checked on its own as any
//! APIService is; [`Members`] is what their checks make together, decided once per check:
//!
//! - **which backend serves each resource**: of the backends in routing order (priority, the
//!   APIService's own service first among equals), the first whose last good APIResourceList
//!   lists the resource, or whose `spec.resources` claims it; a resource no backend serves goes
//!   to the APIService's own service, which answers as kube-aggregator's backend would (404);
//! - **the one API clients see**: the APIResourceList merged from what each backend serves
//!   (aggregated discovery converts it);
//! - **the APIService's `Available` condition**: True while any backend is up, its message
//!   naming each backend that is down. A backend that is down answers 503 for its own
//!   resources only; its last good resources stay listed.

use super::{Condition, State};
use apigw_registry::{ApiService, Backend};
use apigw_request::Attributes;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// One backend of the group version with its last check.
#[derive(Debug, Clone)]
pub struct Member {
    /// The APIService for its own service, else the backend's target.
    pub target: Arc<ApiService>,
    /// None for the APIService's own service.
    pub backend: Option<Arc<Backend>>,
    pub state: State,
}

impl Member {
    /// How messages name it: `service <ns>/<name>` or `backend <name>`.
    fn label(&self) -> String {
        match (&self.backend, &self.target.service) {
            (Some(b), _) => format!("backend {}", b.name),
            (None, Some(s)) => format!("service {}/{}", s.namespace, s.name),
            (None, None) => "Local".to_string(),
        }
    }
}

/// Every backend of one group version, in routing order, and which serves each resource.
#[derive(Debug)]
pub struct Members {
    members: Vec<Member>,
    /// The index of the APIService's own service.
    own: usize,
    /// Each listed resource and the member that serves it.
    listed: HashMap<String, usize>,
    group_version: String,
    /// The merged APIResourceList, as served at `/apis/<group>/<version>`.
    pub list: Arc<Value>,
}

impl Members {
    /// The backends of `svc` in routing order: its own service (the APIService itself) at
    /// [`ApiService::own_index`], its APIServiceBackends around it.
    pub fn targets(svc: &Arc<ApiService>) -> Vec<(Arc<ApiService>, Option<Arc<Backend>>)> {
        let mut out: Vec<_> = svc
            .backends
            .iter()
            .map(|b| (b.target.clone(), Some(b.clone())))
            .collect();
        out.insert(svc.own_index(), (svc.clone(), None));
        out
    }

    /// Decides who serves what from `members` (the checked [`Self::targets`] of `svc`).
    pub fn new(svc: &ApiService, members: Vec<Member>) -> Self {
        let own = svc.own_index().min(members.len().saturating_sub(1));
        let mut listed = HashMap::new();
        for (i, m) in members.iter().enumerate() {
            for name in resource_names(&m.state) {
                listed.entry(name.to_string()).or_insert(i);
            }
        }
        let mut this = Self {
            members,
            own,
            listed,
            group_version: format!("{}/{}", svc.group, svc.version),
            list: Arc::new(Value::Null),
        };
        this.list = Arc::new(this.merged_list());
        this
    }

    /// Every member, in routing order.
    pub fn iter(&self) -> impl Iterator<Item = &Member> {
        self.members.iter()
    }

    /// The member that serves `resource` (a name as discovery lists it).
    pub fn serving(&self, resource: &str) -> &Member {
        let listed = self.listed.get(resource).copied();
        let claimed = self
            .members
            .iter()
            .take(listed.unwrap_or(self.members.len()))
            .position(|m| m.backend.as_ref().is_some_and(|b| b.claims(resource)));
        &self.members[claimed.or(listed).unwrap_or(self.own)]
    }

    /// The member that serves a request: [`Self::serving`] its [`resource_key`]; the
    /// APIService's own service for a request that names no resource.
    pub fn for_request(&self, attrs: &Attributes) -> &Member {
        match resource_key(attrs) {
            Some(key) => self.serving(&key),
            None => &self.members[self.own],
        }
    }

    /// The resources more than one member lists, each with the member that serves it (the
    /// first in routing order) and the others that list it, by resource name.
    pub fn conflicts(&self) -> Vec<(&str, &Member, Vec<&Member>)> {
        let mut out: Vec<(&str, &Member, Vec<&Member>)> = Vec::new();
        for (name, &first) in &self.listed {
            let serving = self.serving(name);
            let others: Vec<&Member> = self
                .members
                .iter()
                .enumerate()
                .filter(|(i, m)| {
                    !std::ptr::eq(*m, serving)
                        && (*i == first || resource_names(&m.state).any(|n| n == name))
                })
                .map(|(_, m)| m)
                .collect();
            if !others.is_empty() {
                out.push((name, serving, others));
            }
        }
        out.sort_by_key(|(name, _, _)| *name);
        out
    }

    /// The conflicts, as the condition's message tells them: at most five, then how many more.
    fn conflicts_told(&self) -> String {
        let conflicts = self.conflicts();
        if conflicts.is_empty() {
            return String::new();
        }
        let mut told: Vec<String> = conflicts
            .iter()
            .take(5)
            .map(|(name, serving, others)| {
                let others: Vec<String> = others.iter().map(|m| m.label()).collect();
                format!("{name} by {} over {}", serving.label(), others.join(", "))
            })
            .collect();
        if conflicts.len() > 5 {
            told.push(format!("{} more", conflicts.len() - 5));
        }
        format!(
            "; listed by more than one backend, served by priority: {}",
            told.join("; ")
        )
    }

    /// The APIResourceList of the group version: each resource from the member serving it,
    /// in routing order.
    fn merged_list(&self) -> Value {
        let resources = self.pick();
        json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": self.group_version,
            "resources": resources,
        })
    }

    /// Each listed resource once: from the member that serves it when that member lists it,
    /// else from the first that lists it (a resource claimed by the pattern of a backend that
    /// does not list it), in routing order.
    fn pick(&self) -> Vec<Value> {
        let entries = |m: &Member| {
            m.state
                .resources
                .as_deref()
                .and_then(|l| l["resources"].as_array().cloned())
                .unwrap_or_default()
        };
        let has = |m: &Member, name: &str| resource_names(&m.state).any(|n| n == name);
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for m in &self.members {
            for r in entries(m) {
                let name = r["name"].as_str().unwrap_or_default().to_string();
                let serving = self.serving(&name);
                let from_here = std::ptr::eq(serving, m) || !has(serving, &name);
                if from_here && seen.insert(name) {
                    out.push(r);
                }
            }
        }
        out
    }

    /// The group version's state, as one APIService's: its condition from every member's, the
    /// merged resources, and the members themselves.
    pub fn state(self, previous: Option<&State>) -> State {
        let down: Vec<&Member> = self
            .members
            .iter()
            .filter(|m| !m.state.condition.available)
            .collect();
        let available = down.len() < self.members.len();
        let detail = |m: &&Member| {
            format!(
                "{} ({}): {}",
                m.label(),
                m.state.condition.reason,
                m.state.condition.message
            )
        };
        let (reason, message) = match (available, down.first()) {
            (true, None) => (
                "Passed",
                format!(
                    "all checks passed: {}",
                    self.members
                        .iter()
                        .map(Member::label)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            (true, Some(_)) => (
                "Passed",
                format!(
                    "checks passed but for {}",
                    down.iter().map(detail).collect::<Vec<_>>().join("; ")
                ),
            ),
            (false, _) => (
                self.members[self.own].state.condition.reason,
                format!(
                    "no backend is available: {}",
                    down.iter().map(detail).collect::<Vec<_>>().join("; ")
                ),
            ),
        };
        let message = message + &self.conflicts_told();
        let last_transition = super::transition(previous, available);
        let resources = Some(self.list.clone())
            .filter(|_| self.members.iter().any(|m| m.state.resources.is_some()));
        // Kept when it did not change, so discovery re-renders only what did.
        let resources = match (previous.and_then(|p| p.resources.clone()), resources) {
            (Some(old), Some(new)) if old == new => Some(old),
            (_, new) => new,
        };
        State {
            condition: Condition {
                available,
                reason,
                message,
                last_transition,
            },
            resources,
            // The merged list, converted: the backends' own aggregated entries cannot be
            // merged resource by resource (custom metrics are subresources of one `pods`).
            aggregated: None,
            members: Some(Arc::new(self)),
        }
    }
}

/// The names a member's last good APIResourceList lists.
fn resource_names(state: &State) -> impl Iterator<Item = &str> {
    state
        .resources
        .iter()
        .flat_map(|list| list["resources"].as_array().into_iter().flatten())
        .filter_map(|r| r["name"].as_str())
}

/// The name a request's resource goes by in discovery: `<resource>/<subresource>`, or
/// `<resource>`; for the custom metrics API's `/namespaces/<ns>/metrics/<metric>` (a
/// namespace's own metric, listed as `namespaces/<metric>`), `namespaces/<metric>`. None for
/// a request that names no resource.
pub fn resource_key(attrs: &Attributes) -> Option<String> {
    if !attrs.resource_request || attrs.resource.is_empty() {
        return None;
    }
    if attrs.group == CUSTOM_METRICS && attrs.resource == "metrics" && !attrs.name.is_empty() {
        return Some(format!("namespaces/{}", attrs.name));
    }
    Some(match attrs.subresource.as_str() {
        "" => attrs.resource.clone(),
        sub => format!("{}/{sub}", attrs.resource),
    })
}

/// The custom metrics API, whose namespaces' own metrics are requested by a path of their own.
const CUSTOM_METRICS: &str = "custom.metrics.k8s.io";

#[cfg(test)]
mod tests {
    use super::*;
    use apigw_registry::{attach, Backend};
    use http::Method;

    fn svc(backends: &[(&str, i32, &[&str])]) -> Arc<ApiService> {
        let mut own = ApiService::from_value(json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1beta1.custom.metrics.k8s.io"},
            "spec": {"group": "custom.metrics.k8s.io", "version": "v1beta1",
                     "groupPriorityMinimum": 100, "versionPriority": 100,
                     "insecureSkipTLSVerify": true,
                     "service": {"name": "adapter-a", "namespace": "metrics"}}}))
        .unwrap();
        let backends = backends
            .iter()
            .map(|(name, priority, claims)| {
                Backend::from_value(json!({
                    "apiVersion": "apigw.dev/v1alpha1", "kind": "APIServiceBackend",
                    "metadata": {"name": name},
                    "spec": {"apiService": "v1beta1.custom.metrics.k8s.io", "priority": priority,
                             "resources": claims, "insecureSkipTLSVerify": true,
                             "service": {"name": name, "namespace": "metrics"}}}))
                .unwrap()
            })
            .collect();
        assert!(attach(std::slice::from_mut(&mut own), backends).is_empty());
        Arc::new(own)
    }

    fn state(available: bool, listed: &[&str]) -> State {
        let resources: Vec<Value> = listed
            .iter()
            .map(|n| json!({"name": n, "namespaced": true, "kind": "MetricValueList", "verbs": ["get"]}))
            .collect();
        State {
            condition: Condition {
                available,
                reason: if available {
                    "Passed"
                } else {
                    "FailedDiscoveryCheck"
                },
                message: if available {
                    "all checks passed"
                } else {
                    "refused"
                }
                .into(),
                last_transition: std::time::SystemTime::now(),
            },
            resources: Some(Arc::new(
                json!({"kind": "APIResourceList", "resources": resources}),
            )),
            aggregated: None,
            members: None,
        }
    }

    fn members(svc: &Arc<ApiService>, states: Vec<State>) -> Members {
        let checked = Members::targets(svc)
            .into_iter()
            .zip(states)
            .map(|((target, backend), state)| Member {
                target,
                backend,
                state,
            })
            .collect();
        Members::new(svc, checked)
    }

    /// Which member name serves each request path, listed resources, claims and priority
    /// deciding.
    #[test]
    fn each_request_goes_to_the_backend_that_serves_its_resource() {
        // Routing order: keda (5), own (0), b (0), low (-1).
        let svc = svc(&[("b", 0, &[]), ("keda", 5, &["keda-*"]), ("low", -1, &["*"])]);
        let m = members(
            &svc,
            vec![
                state(true, &[]),
                state(
                    true,
                    &[
                        "services/queue-depth",
                        "namespaces/requests-per-second",
                        "shared",
                    ],
                ),
                state(
                    true,
                    &[
                        "services/backlog",
                        "namespaces/errors-per-second",
                        "shared",
                        "pods/keda-x",
                    ],
                ),
                state(true, &[]),
            ],
        );
        let base = "/apis/custom.metrics.k8s.io/v1beta1";
        for (path, want) in [
            (
                "/namespaces/ns/services/web/queue-depth",
                "v1beta1.custom.metrics.k8s.io",
            ),
            (
                "/namespaces/ns/services/*/backlog",
                "v1beta1.custom.metrics.k8s.io/b",
            ),
            (
                "/namespaces/ns/metrics/requests-per-second",
                "v1beta1.custom.metrics.k8s.io",
            ),
            (
                "/namespaces/ns/metrics/errors-per-second",
                "v1beta1.custom.metrics.k8s.io/b",
            ),
            // Listed by both at priority 0: its own service first among equals.
            ("/namespaces/ns/shared", "v1beta1.custom.metrics.k8s.io"),
            // Claimed by a pattern of a higher priority than b's listing.
            (
                "/namespaces/ns/keda-queue",
                "v1beta1.custom.metrics.k8s.io/keda",
            ),
            (
                "/namespaces/ns/pods/p/keda-x",
                "v1beta1.custom.metrics.k8s.io/b",
            ),
            // Unlisted: the lowest backend's `*` claims it before the fallback.
            (
                "/namespaces/ns/nothing",
                "v1beta1.custom.metrics.k8s.io/low",
            ),
            ("/nodes/n1/cpu", "v1beta1.custom.metrics.k8s.io/low"),
        ] {
            let attrs = Attributes::from_request(&Method::GET, &format!("{base}{path}"), None);
            assert_eq!(m.for_request(&attrs).target.name, want, "{path}");
        }
        let list = &m.list["resources"];
        let names: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "services/queue-depth",
                "namespaces/requests-per-second",
                "shared",
                "services/backlog",
                "namespaces/errors-per-second",
                "pods/keda-x"
            ]
        );
        assert_eq!(m.list["groupVersion"], "custom.metrics.k8s.io/v1beta1");
        let told: Vec<(&str, &str, Vec<&str>)> = m
            .conflicts()
            .into_iter()
            .map(|(name, serving, others)| {
                let others = others.iter().map(|o| o.target.name.as_str()).collect();
                (name, serving.target.name.as_str(), others)
            })
            .collect();
        assert_eq!(
            told,
            [(
                "shared",
                "v1beta1.custom.metrics.k8s.io",
                vec!["v1beta1.custom.metrics.k8s.io/b"]
            )]
        );
        assert!(
            m.state(None).condition.message.ends_with(
                "; listed by more than one backend, served by priority: shared by service metrics/adapter-a over backend b"
            ),
        );
    }

    #[test]
    fn unclaimed_goes_to_its_own_service_and_a_down_backend_fails_alone() {
        let svc = svc(&[("b", 0, &[])]);
        let m = members(&svc, vec![state(true, &["a"]), state(false, &["b"])]);
        let attrs = |p: &str| {
            Attributes::from_request(
                &Method::GET,
                &format!("/apis/custom.metrics.k8s.io/v1beta1{p}"),
                None,
            )
        };
        assert_eq!(
            m.for_request(&attrs("/namespaces/ns/zzz")).target.name,
            svc.name
        );
        let b = m.for_request(&attrs("/namespaces/ns/b"));
        assert!(!b.state.condition.available);
        let state = m.state(None);
        assert!(state.condition.available);
        assert_eq!(
            state.condition.message,
            "checks passed but for backend b (FailedDiscoveryCheck): refused"
        );
        // Its last good resources stay listed.
        assert_eq!(state.resources.unwrap()["resources"][1]["name"], "b");
        let none = members(&svc, vec![state_down(), state_down()]).state(None);
        assert!(!none.condition.available);
        assert_eq!(none.condition.reason, "FailedDiscoveryCheck");
        assert_eq!(
            none.condition.message,
            "no backend is available: service metrics/adapter-a (FailedDiscoveryCheck): refused; backend b (FailedDiscoveryCheck): refused"
        );
    }

    #[test]
    fn a_resource_claimed_over_a_listing_stays_listed_and_is_told() {
        let svc = svc(&[("b", 0, &[]), ("keda", 5, &["keda-*"])]);
        // Routing order: keda, own, b.
        let m = members(
            &svc,
            vec![
                state(true, &[]),
                state(true, &[]),
                state(true, &["keda-queue"]),
            ],
        );
        let attrs = Attributes::from_request(
            &Method::GET,
            "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/keda-queue",
            None,
        );
        assert_eq!(
            m.for_request(&attrs).target.name,
            "v1beta1.custom.metrics.k8s.io/keda"
        );
        assert_eq!(m.list["resources"][0]["name"], "keda-queue");
        assert!(m
            .state(None)
            .condition
            .message
            .ends_with("served by priority: keda-queue by backend keda over backend b"));
    }

    fn state_down() -> State {
        state(false, &[])
    }
}
