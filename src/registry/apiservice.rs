//! The `apiregistration.k8s.io/v1` APIService model and its validation, following upstream's
//! `ValidateAPIService`. Objects are read from JSON values field by field so every problem names
//! the exact field.

use base64::Engine;
use serde_json::Value;

/// A validated APIService.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiService {
    pub name: String,
    pub group: String,
    pub version: String,
    pub group_priority_minimum: i64,
    pub version_priority: i64,
    /// None for a `Local` APIService (served by the delegate API server).
    pub service: Option<ServiceRef>,
    /// Decoded `caBundle`: PEM CA certificates; empty when unset.
    pub ca_bundle: Vec<u8>,
    pub insecure_skip_tls_verify: bool,
    /// The object as given, with defaults applied (served back by the registry API).
    pub object: Value,
}

/// Where a non-local APIService is served.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    pub port: u16,
}

impl ServiceRef {
    /// The DNS name the backend's serving certificate must carry: `<name>.<namespace>.svc`.
    pub fn host(&self) -> String {
        format!("{}.{}.svc", self.name, self.namespace)
    }
}

/// One validation problem: the field path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn err(field: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.to_string(),
        message: message.into(),
    }
}

/// Collects problems so one pass reports them all.
#[derive(Default)]
struct Problems(Vec<FieldError>);

impl Problems {
    fn add(&mut self, field: &str, message: impl Into<String>) {
        self.0.push(err(field, message));
    }

    fn string(&mut self, obj: &Value, path: &str) -> String {
        match lookup(obj, path) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                self.add(path, format!("must be a string, not {other}"));
                String::new()
            }
        }
    }

    fn int(&mut self, obj: &Value, path: &str) -> Option<i64> {
        match lookup(obj, path) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) if n.is_i64() => n.as_i64(),
            Some(other) => {
                self.add(path, format!("must be an integer, not {other}"));
                None
            }
        }
    }

    fn bool(&mut self, obj: &Value, path: &str) -> bool {
        match lookup(obj, path) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.add(path, format!("must be a boolean, not {other}"));
                false
            }
        }
    }
}

fn lookup<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(obj, |v, key| v.get(key))
}

impl ApiService {
    /// Validates one object (`kind: APIService`) and returns it, or every problem found.
    pub fn from_value(mut object: Value) -> Result<Self, Vec<FieldError>> {
        let mut p = Problems::default();
        let api_version = p.string(&object, "apiVersion");
        if api_version != "apiregistration.k8s.io/v1" {
            p.add(
                "apiVersion",
                format!("must be apiregistration.k8s.io/v1, not {api_version:?}"),
            );
        }
        let name = p.string(&object, "metadata.name");
        let group = p.string(&object, "spec.group");
        let version = p.string(&object, "spec.version");
        let gpm = p.int(&object, "spec.groupPriorityMinimum").unwrap_or(0);
        let vp = p.int(&object, "spec.versionPriority").unwrap_or(0);
        let insecure = p.bool(&object, "spec.insecureSkipTLSVerify");
        let ca_bundle = match lookup(&object, "spec.caBundle") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(b64)) => {
                match base64::engine::general_purpose::STANDARD.decode(b64.trim()) {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        p.add("spec.caBundle", format!("must be base64: {e}"));
                        Vec::new()
                    }
                }
            }
            Some(_) => {
                p.add("spec.caBundle", "must be a base64 string");
                Vec::new()
            }
        };

        if name.is_empty() {
            p.add("metadata.name", "Required value");
        } else if name != format!("{version}.{group}") {
            p.add(
                "metadata.name",
                format!("must be `spec.version+\".\"+spec.group`: {version}.{group}"),
            );
        }
        if group.is_empty() {
            if version != "v1" {
                p.add(
                    "spec.group",
                    "only v1 may have an empty group and it better be legacy kube",
                );
            }
        } else if let Err(m) = dns1123_subdomain(&group) {
            p.add("spec.group", m);
        }
        if version.is_empty() {
            p.add("spec.version", "Required value");
        } else if let Err(m) = dns1035_label(&version) {
            p.add("spec.version", m);
        }
        if !(1..=20000).contains(&gpm) {
            p.add(
                "spec.groupPriorityMinimum",
                format!("{gpm}: must be positive and less than 20000"),
            );
        }
        if !(1..=1000).contains(&vp) {
            p.add(
                "spec.versionPriority",
                format!("{vp}: must be positive and less than 1000"),
            );
        }

        let service = match lookup(&object, "spec.service") {
            None | Some(Value::Null) => {
                if !ca_bundle.is_empty() {
                    p.add("spec.caBundle", "local APIServices may not have a caBundle");
                }
                if insecure {
                    p.add(
                        "spec.insecureSkipTLSVerify",
                        "local APIServices may not have insecureSkipTLSVerify",
                    );
                }
                None
            }
            Some(Value::Object(_)) => {
                let ns = p.string(&object, "spec.service.namespace");
                let svc = p.string(&object, "spec.service.name");
                let port = p.int(&object, "spec.service.port").unwrap_or(443);
                if ns.is_empty() {
                    p.add("spec.service.namespace", "Required value");
                } else if let Err(m) = dns1123_label(&ns) {
                    p.add("spec.service.namespace", m);
                }
                if svc.is_empty() {
                    p.add("spec.service.name", "Required value");
                } else if let Err(m) = dns1035_label(&svc) {
                    p.add("spec.service.name", m);
                }
                if !(1..=65535).contains(&port) {
                    p.add(
                        "spec.service.port",
                        format!("{port}: must be between 1 and 65535, inclusive"),
                    );
                }
                if insecure && !ca_bundle.is_empty() {
                    p.add(
                        "spec.insecureSkipTLSVerify",
                        "may not be true if caBundle is present",
                    );
                }
                if !ca_bundle.is_empty()
                    && crate::tls::parse_certs(&ca_bundle, "spec.caBundle").is_err()
                {
                    p.add("spec.caBundle", "holds no PEM certificate");
                }
                Some(ServiceRef {
                    namespace: ns,
                    name: svc,
                    port: u16::try_from(port).unwrap_or(443),
                })
            }
            Some(_) => {
                p.add("spec.service", "must be an object");
                None
            }
        };
        if !p.0.is_empty() {
            return Err(p.0);
        }
        if let Some(port) = object.pointer_mut("/spec/service") {
            if port.get("port").is_none() {
                port["port"] = Value::from(443);
            }
        }
        Ok(Self {
            name,
            group,
            version,
            group_priority_minimum: gpm,
            version_priority: vp,
            service,
            ca_bundle,
            insecure_skip_tls_verify: insecure,
            object,
        })
    }
}

fn dns1123_label(s: &str) -> Result<(), String> {
    let ok = s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    ok.then_some(()).ok_or_else(|| {
        format!("{s:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character")
    })
}

fn dns1035_label(s: &str) -> Result<(), String> {
    let ok = s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    ok.then_some(()).ok_or_else(|| {
        format!("{s:?}: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character")
    })
}

fn dns1123_subdomain(s: &str) -> Result<(), String> {
    let ok = s.len() <= 253 && s.split('.').all(|l| dns1123_label(l).is_ok());
    ok.then_some(()).ok_or_else(|| {
        format!("{s:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1alpha1.wardle.example.com"},
            "spec": {"group": "wardle.example.com", "version": "v1alpha1",
                     "groupPriorityMinimum": 1000, "versionPriority": 15,
                     "service": {"name": "api", "namespace": "wardle"}}
        })
    }

    fn fields(v: Value) -> Vec<String> {
        ApiService::from_value(v)
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn valid_object_gets_default_port() {
        let s = ApiService::from_value(base()).unwrap();
        assert_eq!(s.service.as_ref().unwrap().port, 443);
        assert_eq!(s.service.unwrap().host(), "api.wardle.svc");
        assert_eq!(s.object["spec"]["service"]["port"], 443);
    }

    #[test]
    fn name_must_be_version_dot_group() {
        let mut v = base();
        v["metadata"]["name"] = json!("wardle");
        assert_eq!(fields(v), vec!["metadata.name"]);
    }

    #[test]
    fn priorities_are_bounded() {
        let mut v = base();
        v["spec"]["groupPriorityMinimum"] = json!(20001);
        v["spec"]["versionPriority"] = json!(0);
        assert_eq!(
            fields(v),
            vec!["spec.groupPriorityMinimum", "spec.versionPriority"]
        );
        let mut v = base();
        v["spec"]["groupPriorityMinimum"] = json!("high");
        assert!(fields(v).contains(&"spec.groupPriorityMinimum".to_string()));
    }

    #[test]
    fn ca_bundle_and_insecure_are_exclusive() {
        let mut v = base();
        v["spec"]["insecureSkipTLSVerify"] = json!(true);
        v["spec"]["caBundle"] = json!("bm90IGEgY2VydA==");
        let f = fields(v);
        assert!(
            f.contains(&"spec.insecureSkipTLSVerify".to_string()),
            "{f:?}"
        );
    }

    #[test]
    fn port_range_and_service_names() {
        let mut v = base();
        v["spec"]["service"] = json!({"name": "Bad_Name", "namespace": "", "port": 70000});
        assert_eq!(
            fields(v),
            vec![
                "spec.service.namespace",
                "spec.service.name",
                "spec.service.port"
            ]
        );
    }

    #[test]
    fn local_apiservice_has_no_service_and_no_ca() {
        let mut v = base();
        v["spec"].as_object_mut().unwrap().remove("service");
        let s = ApiService::from_value(v.clone()).unwrap();
        assert!(s.service.is_none());
        v["spec"]["insecureSkipTLSVerify"] = json!(true);
        assert_eq!(fields(v), vec!["spec.insecureSkipTLSVerify"]);
    }

    #[test]
    fn empty_group_only_for_v1() {
        let mut v = base();
        v["spec"]["group"] = json!("");
        v["metadata"]["name"] = json!("v1alpha1.");
        assert_eq!(fields(v), vec!["spec.group"]);
    }
}
