//! RBAC from a policy file of Kubernetes RBAC objects (Role, ClusterRole, RoleBinding,
//! ClusterRoleBinding; YAML or JSON, multi-document, `List`), with kube's matching rules:
//! verbs, API groups, resources with subresources (`*/status`), resource names, and
//! non-resource URLs with a trailing `*`. Subjects are users, groups and service accounts.
//! Like kube's RBAC authorizer it only ever allows; everything else is "no opinion". The
//! defaults kube-apiserver bootstraps for every authenticated user (discovery, the self
//! reviews) are built in.

use apigw_request::Attributes;
use apigw_request::Identity;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// One rule of a role, as written in the policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicyRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    #[serde(rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Subject {
    kind: String,
    name: String,
    #[serde(default)]
    namespace: String,
}

#[derive(Debug, Clone, Deserialize)]
struct RoleRef {
    kind: String,
    name: String,
}

#[derive(Debug, Clone)]
struct Binding {
    /// Empty for a ClusterRoleBinding.
    namespace: String,
    role: RoleRef,
    subjects: Vec<Subject>,
}

/// Why a policy file could not be loaded. The message names the file, then the object and field.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {source}")]
    Yaml {
        file: String,
        #[source]
        source: apigw_core::yaml::Error,
    },
    #[error("{file}: document {document}: kind: missing")]
    MissingKind { file: String, document: usize },
    #[error("{file}: {source}")]
    Object {
        file: String,
        #[source]
        source: ObjectError,
    },
}

/// What is wrong with one RBAC object of a policy file.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("{kind} {name}: {field}: {source}")]
    Field {
        kind: String,
        name: String,
        field: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{kind}: metadata.name: Required value")]
    MissingName { kind: String },
    #[error("{kind} {name}: metadata.namespace: Required value")]
    MissingNamespace { kind: &'static str, name: String },
    #[error("ClusterRoleBinding {name}: roleRef.kind: must be ClusterRole")]
    ClusterRoleRef { name: String },
    #[error("{name}: kind: {kind:?} is not an RBAC object (Role, ClusterRole, RoleBinding, ClusterRoleBinding)")]
    NotRbac { name: String, kind: String },
}

/// A loaded policy.
#[derive(Debug, Default, Clone)]
pub struct Policy {
    cluster_roles: HashMap<String, Vec<PolicyRule>>,
    roles: HashMap<(String, String), Vec<PolicyRule>>,
    bindings: Vec<Binding>,
}

impl Subject {
    fn matches(&self, id: &Identity) -> bool {
        match self.kind.as_str() {
            "User" => self.name == id.user,
            "Group" => id.groups.contains(&self.name),
            "ServiceAccount" => {
                id.user == format!("system:serviceaccount:{}:{}", self.namespace, self.name)
            }
            _ => false,
        }
    }
}

fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

impl PolicyRule {
    /// True when this rule allows `a`, by kube's `RuleAllows`.
    pub fn allows(&self, a: &Attributes) -> bool {
        if !has(&self.verbs, &a.verb) {
            return false;
        }
        if !a.resource_request {
            return self.non_resource_urls.iter().any(|u| {
                u == "*"
                    || *u == a.path
                    || u.strip_suffix('*')
                        .is_some_and(|prefix| a.path.starts_with(prefix))
            });
        }
        has(&self.api_groups, &a.group)
            && self.resources.iter().any(|r| resource_matches(r, a))
            && (self.resource_names.is_empty() || self.resource_names.contains(&a.name))
    }
}

fn resource_matches(rule: &str, a: &Attributes) -> bool {
    rule == "*"
        || rule == a.full_resource()
        || (!a.subresource.is_empty() && rule.strip_prefix("*/") == Some(a.subresource.as_str()))
}

/// The rules kube-apiserver grants every authenticated user (`system:discovery`,
/// `system:basic-user`, `system:public-info-viewer`).
fn bootstrap() -> Vec<PolicyRule> {
    let urls = |u: &[&str]| u.iter().map(|s| s.to_string()).collect();
    vec![
        PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: urls(&[
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
                "/openapi",
                "/openapi/*",
                "/version",
                "/version/",
                "/healthz",
                "/livez",
                "/readyz",
            ]),
            ..Default::default()
        },
        PolicyRule {
            verbs: vec!["create".into()],
            api_groups: vec![
                "authentication.k8s.io".into(),
                "authorization.k8s.io".into(),
            ],
            resources: urls(&[
                "selfsubjectreviews",
                "selfsubjectaccessreviews",
                "selfsubjectrulesreviews",
            ]),
            ..Default::default()
        },
    ]
}

impl Policy {
    /// Loads a policy file; problems name the file, the document and the field.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let file = path.display().to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(source) => return Err(PolicyError::Read { file, source }),
        };
        Self::parse(&text, &file)
    }

    pub fn parse(text: &str, file: &str) -> Result<Self, PolicyError> {
        let mut policy = Policy::default();
        let mut objects = Vec::new();
        // Empty documents are skipped; "document N" counts the others.
        let docs = apigw_core::yaml::documents(text).map_err(|source| PolicyError::Yaml {
            file: file.to_string(),
            source,
        })?;
        for (i, v) in docs.into_iter().enumerate() {
            match v.get("kind").and_then(Value::as_str) {
                Some("List") => objects.extend(v["items"].as_array().cloned().unwrap_or_default()),
                Some(_) => objects.push(v),
                None => {
                    return Err(PolicyError::MissingKind {
                        file: file.to_string(),
                        document: i + 1,
                    })
                }
            }
        }
        for obj in objects {
            policy.add(&obj).map_err(|source| PolicyError::Object {
                file: file.to_string(),
                source,
            })?;
        }
        Ok(policy)
    }

    fn add(&mut self, obj: &Value) -> Result<(), ObjectError> {
        let kind = obj["kind"].as_str().unwrap_or_default();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let at = |field: &'static str, source: serde_json::Error| ObjectError::Field {
            kind: kind.to_string(),
            name: name.clone(),
            field,
            source,
        };
        let list = |field: &str| obj.get(field).cloned().unwrap_or(Value::Array(vec![]));
        if name.is_empty() {
            return Err(ObjectError::MissingName {
                kind: kind.to_string(),
            });
        }
        match kind {
            "ClusterRole" | "Role" => {
                let rules: Vec<PolicyRule> =
                    serde_json::from_value(list("rules")).map_err(|e| at("rules", e))?;
                if kind == "Role" {
                    if ns.is_empty() {
                        return Err(ObjectError::MissingNamespace { kind: "Role", name });
                    }
                    self.roles.insert((ns, name), rules);
                } else {
                    self.cluster_roles.insert(name, rules);
                }
            }
            "ClusterRoleBinding" | "RoleBinding" => {
                let role: RoleRef =
                    serde_json::from_value(obj["roleRef"].clone()).map_err(|e| at("roleRef", e))?;
                let subjects: Vec<Subject> =
                    serde_json::from_value(list("subjects")).map_err(|e| at("subjects", e))?;
                if kind == "RoleBinding" && ns.is_empty() {
                    return Err(ObjectError::MissingNamespace {
                        kind: "RoleBinding",
                        name,
                    });
                }
                if kind == "ClusterRoleBinding" && role.kind != "ClusterRole" {
                    return Err(ObjectError::ClusterRoleRef { name });
                }
                self.bindings.push(Binding {
                    namespace: if kind == "RoleBinding" {
                        ns
                    } else {
                        String::new()
                    },
                    role,
                    subjects,
                });
            }
            other => {
                return Err(ObjectError::NotRbac {
                    name,
                    kind: other.to_string(),
                })
            }
        }
        Ok(())
    }

    /// The rules that apply to `id` in `namespace` (cluster-wide rules included), built-ins first.
    pub fn rules_for(&self, id: &Identity, namespace: &str) -> Vec<PolicyRule> {
        let mut out = if id.groups.iter().any(|g| g == apigw_request::AUTHENTICATED) {
            bootstrap()
        } else {
            Vec::new()
        };
        for b in &self.bindings {
            let applies =
                b.namespace.is_empty() || (!namespace.is_empty() && b.namespace == namespace);
            if !applies || !b.subjects.iter().any(|s| s.matches(id)) {
                continue;
            }
            let rules = match b.role.kind.as_str() {
                "ClusterRole" => self.cluster_roles.get(&b.role.name),
                "Role" => self.roles.get(&(b.namespace.clone(), b.role.name.clone())),
                _ => None,
            };
            out.extend(rules.into_iter().flatten().cloned());
        }
        out
    }

    /// True when some rule bound to `id` allows `a`.
    pub fn allows(&self, id: &Identity, a: &Attributes) -> bool {
        let ns = if a.resource_request {
            a.namespace.as_str()
        } else {
            ""
        };
        self.rules_for(id, ns).iter().any(|r| r.allows(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    const POLICY: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: flunder-reader}
rules:
- apiGroups: [wardle.example.com]
  resources: [flunders, "*/status"]
  verbs: [get, list, watch]
- nonResourceURLs: ["/metrics", "/debug/*"]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: readers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: flunder-reader}
subjects: [{kind: Group, name: readers}]
---
apiVersion: v1
kind: List
items:
- apiVersion: rbac.authorization.k8s.io/v1
  kind: Role
  metadata: {name: editor, namespace: team}
  rules:
  - apiGroups: ["*"]
    resources: [flunders]
    resourceNames: [mine]
    verbs: ["*"]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: bob-edits, namespace: team}
  roleRef: {kind: Role, name: editor}
  subjects:
  - {kind: User, name: bob}
  - {kind: ServiceAccount, name: bot, namespace: ci}
"#;

    fn id(user: &str, groups: &[&str]) -> Identity {
        let mut g: Vec<String> = groups.iter().map(|s| s.to_string()).collect();
        g.push("system:authenticated".into());
        Identity::new(user, g)
    }

    fn req(method: Method, path: &str) -> Attributes {
        let (path, query) = path
            .split_once('?')
            .map_or((path, None), |(p, q)| (p, Some(q)));
        Attributes::from_request(&method, path, query)
    }

    #[test]
    fn rules_match_as_kube_does() {
        let p = Policy::parse(POLICY, "policy.yaml").unwrap();
        let reader = id("carol", &["readers"]);
        assert!(p.allows(
            &reader,
            &req(
                Method::GET,
                "/apis/wardle.example.com/v1alpha1/namespaces/x/flunders"
            )
        ));
        assert!(p.allows(
            &reader,
            &req(
                Method::GET,
                "/apis/wardle.example.com/v1alpha1/namespaces/x/flunders?watch=1"
            )
        ));
        assert!(p.allows(
            &reader,
            &req(
                Method::GET,
                "/apis/wardle.example.com/v1alpha1/namespaces/x/flunders/f/status"
            )
        ));
        assert!(!p.allows(
            &reader,
            &req(
                Method::POST,
                "/apis/wardle.example.com/v1alpha1/namespaces/x/flunders"
            )
        ));
        assert!(!p.allows(
            &reader,
            &req(
                Method::GET,
                "/apis/other.example.com/v1/namespaces/x/flunders"
            )
        ));
        assert!(!p.allows(
            &reader,
            &req(
                Method::GET,
                "/apis/wardle.example.com/v1alpha1/namespaces/x/flunders/f/exec"
            )
        ));
        assert!(p.allows(&reader, &req(Method::GET, "/metrics")));
        assert!(p.allows(&reader, &req(Method::GET, "/debug/pprof")));
        assert!(!p.allows(&reader, &req(Method::GET, "/debugger")));
        // built in for every authenticated user
        assert!(p.allows(&reader, &req(Method::GET, "/apis")));
        assert!(p.allows(
            &reader,
            &req(
                Method::POST,
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
            )
        ));
        assert!(!p.allows(
            &Identity::new("system:anonymous", vec!["system:unauthenticated".into()]),
            &req(Method::GET, "/apis")
        ));
    }

    #[test]
    fn namespaced_roles_names_and_service_accounts() {
        let p = Policy::parse(POLICY, "policy.yaml").unwrap();
        let bob = id("bob", &[]);
        let mine = "/apis/wardle.example.com/v1alpha1/namespaces/team/flunders/mine";
        assert!(p.allows(&bob, &req(Method::DELETE, mine)));
        assert!(!p.allows(
            &bob,
            &req(
                Method::DELETE,
                "/apis/wardle.example.com/v1alpha1/namespaces/team/flunders/other"
            )
        ));
        assert!(!p.allows(
            &bob,
            &req(
                Method::DELETE,
                "/apis/wardle.example.com/v1alpha1/namespaces/elsewhere/flunders/mine"
            )
        ));
        // resourceNames never allow a list
        assert!(!p.allows(
            &bob,
            &req(
                Method::GET,
                "/apis/wardle.example.com/v1alpha1/namespaces/team/flunders"
            )
        ));
        assert!(p.allows(
            &id("system:serviceaccount:ci:bot", &[]),
            &req(Method::GET, mine)
        ));
        assert!(!p.allows(
            &id("system:serviceaccount:other:bot", &[]),
            &req(Method::GET, mine)
        ));
    }

    #[test]
    fn problems_name_the_object_and_field() {
        let e =
            Policy::parse("kind: Role\nmetadata: {name: r}\nrules: []\n", "p.yaml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.yaml: Role r: metadata.namespace: Required value"
        );
        let e = Policy::parse(
            "kind: ClusterRole\nmetadata: {name: r}\nrules: [{verbs: get}]\n",
            "p.yaml",
        )
        .unwrap_err();
        assert!(matches!(e, PolicyError::Object { .. }), "{e:?}");
        assert!(std::error::Error::source(&e).is_some());
        let e = e.to_string();
        assert!(e.starts_with("p.yaml: ClusterRole r: rules: "), "{e}");
        let e = Policy::parse("kind: Secret\nmetadata: {name: s}\n", "p.yaml").unwrap_err();
        assert!(e.to_string().contains("is not an RBAC object"), "{e}");
        let e = Policy::parse("metadata: {name: s}\n", "p.yaml").unwrap_err();
        assert_eq!(e.to_string(), "p.yaml: document 1: kind: missing");
        let e = Policy::load(Path::new("/nonexistent/policy.yaml")).unwrap_err();
        assert!(matches!(e, PolicyError::Read { .. }), "{e:?}");
        assert!(
            e.to_string().starts_with("/nonexistent/policy.yaml: "),
            "{e}"
        );
    }

    /// The reference model of one rule, written from the RBAC documentation as plainly as
    /// possible, to check `PolicyRule::allows` against.
    fn reference(rule: &PolicyRule, a: &Attributes) -> bool {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        if !any(&rule.verbs, &a.verb) {
            return false;
        }
        if !a.resource_request {
            return rule.non_resource_urls.iter().any(|u| {
                u == "*"
                    || u == &a.path
                    || (u.ends_with('*') && a.path.starts_with(&u[..u.len() - 1]))
            });
        }
        let full = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        let resource_ok = rule.resources.iter().any(|r| {
            r == "*"
                || *r == full
                || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource))
        });
        any(&rule.api_groups, &a.group)
            && resource_ok
            && (rule.resource_names.is_empty() || rule.resource_names.contains(&a.name))
    }

    proptest::proptest! {
        #[test]
        fn rules_agree_with_the_reference_model(
            verbs in proptest::collection::vec(proptest::sample::select(vec!["get", "list", "create", "*"]), 0..3),
            groups in proptest::collection::vec(proptest::sample::select(vec!["", "g", "*"]), 0..3),
            resources in proptest::collection::vec(proptest::sample::select(vec!["things", "things/status", "*/status", "*", "other"]), 0..3),
            names in proptest::collection::vec(proptest::sample::select(vec!["a", "b"]), 0..2),
            urls in proptest::collection::vec(proptest::sample::select(vec!["/apis", "/apis/*", "*", "/metrics"]), 0..2),
            method in proptest::sample::select(vec!["GET", "POST", "PUT"]),
            path in proptest::sample::select(vec![
                "/apis/g/v1/namespaces/n/things", "/apis/g/v1/namespaces/n/things/a", "/apis/g/v1/namespaces/n/things/b/status",
                "/api/v1/namespaces/n/things/a", "/apis", "/apis/g", "/metrics", "/apis/g/v1/things/a/scale",
            ]),
        ) {
            let s = |v: Vec<&str>| v.into_iter().map(String::from).collect::<Vec<_>>();
            let rule = PolicyRule { verbs: s(verbs), api_groups: s(groups), resources: s(resources), resource_names: s(names), non_resource_urls: s(urls) };
            let a = Attributes::from_request(&method.parse().unwrap(), path, None);
            proptest::prop_assert_eq!(rule.allows(&a), reference(&rule, &a), "{:?} {:?}", rule, a);
        }
    }
}
