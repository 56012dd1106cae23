//! `apigw.dev/v1alpha1` `APIServiceBackend`: one more backend for an APIService's group
//! version, beside the APIService's own service. kube-aggregator sends a group version to one
//! Service, and upstream requires an APIService's name to be `<version>.<group>`, so the
//! extra backends are objects of their own, which name the APIService they serve beside.
//! Validated as APIServices are (every problem at once, with its field path); [`attach`] gives
//! each APIService its backends in routing order. Which backend serves which resource is
//! decided from their discovery by the availability controller.

use super::apiservice::{default_port, Problems, Target};
use super::{ApiService, FieldError};
use apigw_core::names::{dns1035_label, dns1123_subdomain};
use apigw_request::Policy;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

pub const API_VERSION: &str = "apigw.dev/v1alpha1";
pub const KIND: &str = "APIServiceBackend";

/// A validated APIServiceBackend.
#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    /// `metadata.name`.
    pub name: String,
    /// `spec.apiService`: the APIService (`<version>.<group>`) it serves beside.
    pub api_service: String,
    /// `spec.priority`: of the backends that serve one resource, the highest serves it; the
    /// APIService's own service has 0 and goes first among equals, then backends by name.
    pub priority: i32,
    /// `spec.resources`: resources it serves whether or not its discovery lists them (`*`
    /// matches any run of characters), for adapters that list no metrics (KEDA's external
    /// metrics).
    pub resources: Vec<String>,
    /// Where its requests go, as an APIService record of the APIService's group and version
    /// named `<apiService>/<name>`: the name its availability, metrics and connections go by.
    pub target: Arc<ApiService>,
}

impl Backend {
    /// Validates one object (`kind: APIServiceBackend`) and returns it, or every problem found.
    pub fn from_value(mut object: Value) -> Result<Self, Vec<FieldError>> {
        let mut p = Problems::default();
        let api_version = p.string(&object, "apiVersion");
        if api_version != API_VERSION {
            p.add(
                "apiVersion",
                format!("must be {API_VERSION}, not {api_version:?}"),
            );
        }
        let name = p.string(&object, "metadata.name");
        if name.is_empty() {
            p.add("metadata.name", "Required value");
        } else if let Err(e) = dns1123_subdomain(&name) {
            p.add("metadata.name", e.to_string());
        }
        let api_service = p.string(&object, "spec.apiService");
        let (version, group) = api_service.split_once('.').unwrap_or((&api_service, ""));
        if api_service.is_empty() {
            p.add("spec.apiService", "Required value");
        } else if group.is_empty() {
            p.add(
                "spec.apiService",
                format!("{api_service:?}: must name an APIService, <version>.<group>"),
            );
        } else if let Err(e) = dns1035_label(version).and_then(|()| dns1123_subdomain(group)) {
            p.add("spec.apiService", e.to_string());
        }
        let priority = p.int(
            &object,
            "spec.priority",
            0,
            i64::from(i32::MIN)..=i64::from(i32::MAX),
            "must be a 32-bit integer",
        );
        let resources = match object.pointer("/spec/resources") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    let field = format!("spec.resources[{i}]");
                    match item.as_str() {
                        Some(r) if !r.is_empty() && !r.contains(char::is_whitespace) => {
                            Some(r.to_string())
                        }
                        Some(_) => {
                            p.add(&field, "must be a resource name or pattern, without spaces");
                            None
                        }
                        None => {
                            p.add(&field, format!("must be a string, not {item}"));
                            None
                        }
                    }
                })
                .collect(),
            Some(other) => {
                p.add("spec.resources", format!("must be a list, not {other}"));
                Vec::new()
            }
        };
        let target = Target::read(&object, &mut p, true);
        if !p.0.is_empty() {
            return Err(p.0);
        }
        default_port(&mut object);
        let target = ApiService {
            name: format!("{api_service}/{name}"),
            group: group.to_string(),
            version: version.to_string(),
            group_priority_minimum: 0,
            version_priority: 0,
            service: target.service,
            ca_bundle: target.ca_bundle,
            insecure_skip_tls_verify: target.insecure,
            policy: Policy::default(),
            backends: Vec::new(),
            object,
        };
        Ok(Self {
            name,
            api_service,
            priority: i32::try_from(priority).unwrap_or_default(),
            resources,
            target: Arc::new(target),
        })
    }

    /// True when `resource` is one of its `spec.resources`.
    pub fn claims(&self, resource: &str) -> bool {
        self.resources.iter().any(|p| glob(p, resource))
    }

    /// The object as given, with defaults applied.
    pub fn object(&self) -> &Value {
        &self.target.object
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts: Vec<&str> = pattern.split('*').collect();
    let first = parts.remove(0);
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let Some(last) = parts.pop() else {
        return rest.is_empty();
    };
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A backend that serves nothing, and why.
#[derive(Debug)]
pub struct Orphan {
    pub backend: Backend,
    pub why: String,
}

/// Gives each of `services` its backends in routing order (priority, highest first, then
/// name). Returns the backends that name no APIService of the set, or a `Local` one.
pub fn attach(services: &mut [ApiService], mut backends: Vec<Backend>) -> Vec<Orphan> {
    backends.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
    let index: HashMap<String, usize> = services
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), i))
        .collect();
    let mut orphans = Vec::new();
    for backend in backends {
        let why = match index.get(&backend.api_service) {
            None => format!("there is no APIService {}", backend.api_service),
            Some(&i) if services[i].service.is_none() => format!(
                "APIService {} is Local (served by the delegate); it has no backends",
                backend.api_service
            ),
            Some(&i) => {
                services[i].backends.push(Arc::new(backend));
                continue;
            }
        };
        orphans.push(Orphan { backend, why });
    }
    orphans
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": "keda"},
            "spec": {"apiService": "v1beta1.external.metrics.k8s.io", "priority": 10,
                     "resources": ["keda-*"], "insecureSkipTLSVerify": true,
                     "service": {"name": "keda-metrics", "namespace": "keda"}}
        })
    }

    #[test]
    fn a_valid_backend_targets_its_apiservices_group_version() {
        let b = Backend::from_value(base()).unwrap();
        assert_eq!(b.target.name, "v1beta1.external.metrics.k8s.io/keda");
        assert_eq!(
            (b.target.group.as_str(), b.target.version.as_str()),
            ("external.metrics.k8s.io", "v1beta1")
        );
        assert_eq!(b.target.service.as_ref().unwrap().port, 443);
        assert_eq!(b.object()["spec"]["service"]["port"], 443);
        assert!(b.claims("keda-queue") && !b.claims("queue"));
    }

    #[test]
    fn every_problem_is_named_by_its_field() {
        let mut obj = base();
        obj["apiVersion"] = json!("apigw.dev/v1");
        obj["metadata"]["name"] = json!("Keda");
        obj["spec"] = json!({"apiService": "external", "priority": 1u64 << 40,
                             "resources": ["ok", "", 7, "a b"]});
        let errs = Backend::from_value(obj).unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "apiVersion",
                "metadata.name",
                "spec.apiService",
                "spec.priority",
                "spec.resources[1]",
                "spec.resources[2]",
                "spec.resources[3]",
                "spec.service",
            ]
        );
    }

    #[test]
    fn patterns_match_any_run_of_characters() {
        for (pattern, text, want) in [
            ("*", "", true),
            ("*", "pods/cpu", true),
            ("pods/*", "pods/cpu", true),
            ("pods/*", "nodes/cpu", false),
            ("*-per-second", "packets-per-second", true),
            ("*-per-second", "per-second", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXcYb", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("a**", "a", true),
        ] {
            assert_eq!(glob(pattern, text), want, "{pattern} ~ {text}");
        }
    }

    #[test]
    fn attached_by_priority_then_name_and_orphans_told() {
        let svc = |name: &str, local: bool| {
            let (version, group) = name.split_once('.').unwrap();
            let mut o = json!({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": name},
                "spec": {"group": group, "version": version, "groupPriorityMinimum": 100,
                         "versionPriority": 10, "insecureSkipTLSVerify": true,
                         "service": {"name": "s", "namespace": "n"}}});
            if local {
                let spec = o["spec"].as_object_mut().unwrap();
                spec.remove("service");
                spec.remove("insecureSkipTLSVerify");
            }
            ApiService::from_value(o).unwrap()
        };
        let backend = |name: &str, api_service: &str, priority: i32| {
            let mut o = base();
            o["metadata"]["name"] = json!(name);
            o["spec"]["apiService"] = json!(api_service);
            o["spec"]["priority"] = json!(priority);
            Backend::from_value(o).unwrap()
        };
        let mut services = vec![
            svc("v1beta1.external.metrics.k8s.io", false),
            svc("v1.local.example.com", true),
        ];
        let orphans = attach(
            &mut services,
            vec![
                backend("b", "v1beta1.external.metrics.k8s.io", 0),
                backend("a", "v1beta1.external.metrics.k8s.io", 0),
                backend("high", "v1beta1.external.metrics.k8s.io", 5),
                backend("low", "v1beta1.external.metrics.k8s.io", -1),
                backend("lost", "v1.missing.example.com", 0),
                backend("local", "v1.local.example.com", 0),
            ],
        );
        let names: Vec<&str> = services[0]
            .backends
            .iter()
            .map(|b| b.name.as_str())
            .collect();
        assert_eq!(names, ["high", "a", "b", "low"]);
        assert_eq!(services[0].own_index(), 1);
        let why: Vec<(&str, &str)> = orphans
            .iter()
            .map(|o| (o.backend.name.as_str(), o.why.as_str()))
            .collect();
        assert_eq!(
            why,
            [
                ("local", "APIService v1.local.example.com is Local (served by the delegate); it has no backends"),
                ("lost", "there is no APIService v1.missing.example.com"),
            ]
        );
    }
}
