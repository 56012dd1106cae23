//! The resources the test API server serves, and its discovery documents (`/api`, `/api/v1`,
//! `/apis`, `/apis/<group>`, `/apis/<group>/<version>`), in the shapes kube-apiserver uses.

use serde_json::{json, Value};

/// One served resource.
#[derive(Debug, PartialEq, Eq)]
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Has a `/status` subresource (status is ignored on create and on main-resource updates).
    pub status: bool,
    /// Stored (CRUD and watch); a review resource only answers `create`.
    pub stored: bool,
    pub short_names: &'static [&'static str],
}

impl Kind {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `apiservices.apiregistration.k8s.io`, as error messages name a resource.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    fn verbs(&self) -> Vec<&'static str> {
        if self.stored {
            vec![
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ]
        } else {
            vec!["create"]
        }
    }
}

const fn kind(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    status: bool,
    stored: bool,
) -> Kind {
    Kind {
        group,
        version,
        plural,
        kind,
        namespaced,
        status,
        stored,
        short_names: &[],
    }
}

pub static KINDS: &[Kind] = &[
    kind(
        "apiregistration.k8s.io",
        "v1",
        "apiservices",
        "APIService",
        false,
        true,
        true,
    ),
    Kind {
        short_names: &["svc"],
        ..kind("", "v1", "services", "Service", true, true, true)
    },
    kind(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "EndpointSlice",
        true,
        false,
        true,
    ),
    kind(
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "TokenReview",
        false,
        false,
        false,
    ),
    kind(
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "SubjectAccessReview",
        false,
        false,
        false,
    ),
    kind(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        false,
        true,
    ),
];

pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Kind> {
    KINDS
        .iter()
        .find(|k| k.group == group && k.version == version && k.plural == plural)
}

/// The discovery document at `path`, if `path` is a discovery path.
pub fn discovery(path: &str) -> Option<Value> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api"] => Some(json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]
        })),
        ["api", "v1"] => Some(resource_list("", "v1")),
        ["apis"] => Some(json!({
            "kind": "APIGroupList", "apiVersion": "v1",
            "groups": groups().iter().map(|g| group_doc(g)).collect::<Vec<_>>()
        })),
        ["apis", g] if groups().contains(g) => {
            let mut doc = group_doc(g);
            doc["kind"] = "APIGroup".into();
            doc["apiVersion"] = "v1".into();
            Some(doc)
        }
        ["apis", g, v] if KINDS.iter().any(|k| k.group == *g && k.version == *v) => {
            Some(resource_list(g, v))
        }
        ["version"] => Some(json!({
            "major": "1", "minor": "32", "gitVersion": "v1.32.0", "gitCommit": "test",
            "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23",
            "compiler": "gc", "platform": "linux/amd64"
        })),
        _ => None,
    }
}

fn groups() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for k in KINDS.iter().filter(|k| !k.group.is_empty()) {
        if !out.contains(&k.group) {
            out.push(k.group);
        }
    }
    out
}

fn group_doc(group: &str) -> Value {
    let gv = |v: &str| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    json!({"name": group, "versions": [gv("v1")], "preferredVersion": gv("v1")})
}

fn resource_list(group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for k in KINDS
        .iter()
        .filter(|k| k.group == group && k.version == version)
    {
        resources.push(json!({
            "name": k.plural, "singularName": k.kind.to_ascii_lowercase(), "namespaced": k.namespaced,
            "kind": k.kind, "verbs": k.verbs(), "shortNames": k.short_names
        }));
        if k.status {
            resources.push(json!({
                "name": format!("{}/status", k.plural), "singularName": "", "namespaced": k.namespaced,
                "kind": k.kind, "verbs": ["get", "patch", "update"]
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}
