//! The `apiregistration.k8s.io/v1` APIService model and its validation, following upstream's
//! `ValidateAPIService`. Objects are read from JSON values field by field so every problem names
//! the exact field. Beyond upstream, two annotations set an APIService's own request policy
//! ([`Policy`]), which kube-aggregator cannot (kubernetes/kubernetes#73421).

use super::Backend;
use apigw_core::names::{dns1035_label, dns1123_label, dns1123_subdomain};
use apigw_request::Policy;
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
    /// Its own request timeout and long-running subresources, from its annotations.
    pub policy: Policy,
    /// The APIServiceBackends serving this group version beside its own service, by
    /// priority (highest first), then name; empty from [`Self::from_value`] and attached by
    /// [`super::attach`].
    pub backends: Vec<std::sync::Arc<Backend>>,
    /// The object as given, with defaults applied (served back by the registry API).
    pub object: Value,
}

/// The annotation with an APIService's request timeout, a Go duration (`90s`, `5m`).
pub const REQUEST_TIMEOUT: &str = "apigw.dev/request-timeout";
/// The annotation with the subresources, beyond kube-apiserver's, whose requests to an
/// APIService are long-running: comma-separated names (`console,logs`).
pub const LONG_RUNNING_SUBRESOURCES: &str = "apigw.dev/long-running-subresources";

/// Reads the [`Policy`] annotations of `object`.
fn policy_from_annotations(object: &Value, p: &mut Problems) -> Policy {
    let field = |key: &str| format!("metadata.annotations[{key}]");
    let annotation = |key: &str| {
        object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
    };
    let mut policy = Policy::default();
    match annotation(REQUEST_TIMEOUT) {
        None => {}
        Some(Value::String(text)) => match apigw_core::duration::parse_duration(text.trim()) {
            Ok(d) if !d.is_zero() => policy.request_timeout = Some(d),
            Ok(_) => p.add(&field(REQUEST_TIMEOUT), "must be longer than 0s"),
            Err(e) => p.add(&field(REQUEST_TIMEOUT), e),
        },
        Some(other) => p.add(
            &field(REQUEST_TIMEOUT),
            format!("must be a string, not {other}"),
        ),
    }
    match annotation(LONG_RUNNING_SUBRESOURCES) {
        None => {}
        Some(Value::String(list)) => {
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                match dns1123_label(name) {
                    Ok(()) => policy.long_running_subresources.push(name.to_string()),
                    Err(e) => p.add(&field(LONG_RUNNING_SUBRESOURCES), e.to_string()),
                }
            }
        }
        Some(other) => p.add(
            &field(LONG_RUNNING_SUBRESOURCES),
            format!("must be a string, not {other}"),
        ),
    }
    policy
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
pub(super) struct Problems(pub(super) Vec<FieldError>);

impl Problems {
    pub(super) fn add(&mut self, field: &str, message: impl Into<String>) {
        self.0.push(err(field, message));
    }

    pub(super) fn string(&mut self, obj: &Value, path: &str) -> String {
        match lookup(obj, path) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                self.add(path, format!("must be a string, not {other}"));
                String::new()
            }
        }
    }

    /// An integer field in `range` (`default` when unset); anything else is a problem that
    /// names the value, `want` saying what the range is.
    pub(super) fn int(
        &mut self,
        obj: &Value,
        path: &str,
        default: i64,
        range: std::ops::RangeInclusive<i64>,
        want: &str,
    ) -> i64 {
        let value = match lookup(obj, path) {
            None | Some(Value::Null) => default,
            // Past i64 (u64 up to 2^64 - 1) is an integer still, just out of range.
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => match n.as_i64() {
                Some(v) => v,
                None => {
                    self.add(path, format!("{n}: {want}"));
                    return default;
                }
            },
            Some(other) => {
                self.add(path, format!("must be an integer, not {other}"));
                return default;
            }
        };
        if !range.contains(&value) {
            self.add(path, format!("{value}: {want}"));
        }
        value
    }

    pub(super) fn bool(&mut self, obj: &Value, path: &str) -> bool {
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
        let gpm = p.int(
            &object,
            "spec.groupPriorityMinimum",
            0,
            1..=20000,
            "must be positive and less than 20000",
        );
        let vp = p.int(
            &object,
            "spec.versionPriority",
            0,
            1..=1000,
            "must be positive and less than 1000",
        );
        let policy = policy_from_annotations(&object, &mut p);

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
            p.add("spec.group", m.to_string());
        }
        if version.is_empty() {
            p.add("spec.version", "Required value");
        } else if let Err(m) = dns1035_label(&version) {
            p.add("spec.version", m.to_string());
        }

        let Target {
            service,
            ca_bundle,
            insecure,
        } = Target::read(&object, &mut p, false);
        if !p.0.is_empty() {
            return Err(p.0);
        }
        default_port(&mut object);
        Ok(Self {
            name,
            group,
            version,
            group_priority_minimum: gpm,
            version_priority: vp,
            service,
            ca_bundle,
            insecure_skip_tls_verify: insecure,
            policy,
            backends: Vec::new(),
            object,
        })
    }

    /// Where its own service stands among [`Self::backends`] in routing order: after every
    /// backend of higher priority than its own (0), before those of equal or lower priority.
    pub fn own_index(&self) -> usize {
        self.backends.iter().take_while(|b| b.priority > 0).count()
    }
}

/// Sets `spec.service.port` to its default (443) where the object leaves it out.
pub(super) fn default_port(object: &mut Value) {
    if let Some(port) = object.pointer_mut("/spec/service") {
        if port.get("port").is_none() {
            port["port"] = Value::from(443);
        }
    }
}

/// Where an object's requests go: `spec.service`, `spec.caBundle` and
/// `spec.insecureSkipTLSVerify`, shared by APIServices and [`Backend`]s.
pub(super) struct Target {
    pub service: Option<ServiceRef>,
    pub ca_bundle: Vec<u8>,
    pub insecure: bool,
}

impl Target {
    /// Reads the three fields; `required`: a missing `spec.service` is a problem (a Backend),
    /// not a `Local` APIService.
    pub(super) fn read(object: &Value, p: &mut Problems, required: bool) -> Self {
        let insecure = p.bool(object, "spec.insecureSkipTLSVerify");
        let ca_bundle = match lookup(object, "spec.caBundle") {
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
        let service = match lookup(object, "spec.service") {
            None | Some(Value::Null) if required => {
                p.add("spec.service", "Required value");
                None
            }
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
                let ns = p.string(object, "spec.service.namespace");
                let svc = p.string(object, "spec.service.name");
                if ns.is_empty() {
                    p.add("spec.service.namespace", "Required value");
                } else if let Err(m) = dns1123_label(&ns) {
                    p.add("spec.service.namespace", m.to_string());
                }
                if svc.is_empty() {
                    p.add("spec.service.name", "Required value");
                } else if let Err(m) = dns1035_label(&svc) {
                    p.add("spec.service.name", m.to_string());
                }
                let port = p.int(
                    object,
                    "spec.service.port",
                    443,
                    1..=65535,
                    "must be between 1 and 65535, inclusive",
                );
                if insecure && !ca_bundle.is_empty() {
                    p.add(
                        "spec.insecureSkipTLSVerify",
                        "may not be true if caBundle is present",
                    );
                }
                if !ca_bundle.is_empty()
                    && apigw_core::tls::parse_certs(&ca_bundle, "spec.caBundle").is_err()
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
        Self {
            service,
            ca_bundle,
            insecure,
        }
    }
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

    #[test]
    fn the_policy_annotations_are_read_and_every_problem_named() {
        let mut obj = base();
        obj["metadata"]["annotations"] = json!({
            REQUEST_TIMEOUT: "1m30s", LONG_RUNNING_SUBRESOURCES: "console, logs,"
        });
        let svc = ApiService::from_value(obj.clone()).unwrap();
        assert_eq!(
            svc.policy.request_timeout,
            Some(std::time::Duration::from_secs(90))
        );
        assert!(svc.policy.long_running("logs") && !svc.policy.long_running("status"));
        assert!(
            !svc.policy.long_running(""),
            "no subresource is never one of them"
        );
        obj["metadata"]["annotations"] = json!({
            REQUEST_TIMEOUT: "0s", LONG_RUNNING_SUBRESOURCES: "Console"
        });
        let fields: Vec<String> = ApiService::from_value(obj)
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(fields.len(), 2, "{fields:?}");
        assert!(fields[0]
            .starts_with("metadata.annotations[apigw.dev/request-timeout]: must be longer"));
        assert!(fields[1]
            .starts_with("metadata.annotations[apigw.dev/long-running-subresources]: \"Console\""));
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
        assert_eq!(fields(v), vec!["spec.groupPriorityMinimum"]);
        let mut v = base();
        v["spec"]["groupPriorityMinimum"] = json!(u64::MAX);
        v["spec"]["versionPriority"] = json!(1.5e300);
        v["spec"]["service"]["port"] = json!(i64::MIN);
        let errs = ApiService::from_value(v).unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "spec.groupPriorityMinimum: 18446744073709551615: must be positive and less than 20000",
                "spec.versionPriority: must be an integer, not 1.5e+300",
                "spec.service.port: -9223372036854775808: must be between 1 and 65535, inclusive",
            ]
        );
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

    /// Any JSON value, as a manifest may hold in any field.
    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            (-70_000i64..70_000).prop_map(Value::from),
            ".*".prop_map(Value::from),
            "[A-Za-z0-9+/=\\s]{0,120}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map("[a-z]{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Every field the validation reads, and the objects holding them.
    const FIELDS: [&str; 14] = [
        "/apiVersion",
        "/kind",
        "/metadata",
        "/metadata/name",
        "/spec",
        "/spec/group",
        "/spec/version",
        "/spec/groupPriorityMinimum",
        "/spec/versionPriority",
        "/spec/service",
        "/spec/service/name",
        "/spec/service/namespace",
        "/spec/service/port",
        "/spec/caBundle",
    ];

    /// Sets `path` (a JSON pointer) in `v` when its parent is an object.
    fn set(v: &mut Value, path: &str, value: Value) {
        let (parent, key) = path.rsplit_once('/').unwrap_or(("", path));
        if let Some(Value::Object(map)) = v.pointer_mut(parent) {
            map.insert(key.to_string(), value);
        }
    }

    proptest::proptest! {
        #[test]
        fn any_field_value_is_a_field_error_not_a_panic(
            changes in proptest::collection::vec((proptest::sample::select(FIELDS.to_vec()), any_json()), 1..4),
            insecure in proptest::prelude::any::<bool>(),
        ) {
            let mut v = base();
            set(&mut v, "/spec/insecureSkipTLSVerify", Value::from(insecure));
            for (field, value) in changes {
                set(&mut v, field, value);
            }
            match ApiService::from_value(v) {
                Ok(s) => {
                    proptest::prop_assert!((1..=20000).contains(&s.group_priority_minimum));
                    proptest::prop_assert!((1..=1000).contains(&s.version_priority));
                    proptest::prop_assert!(s.service.is_none_or(|svc| svc.port > 0));
                }
                Err(errors) => proptest::prop_assert!(!errors.is_empty()),
            }
        }

        #[test]
        fn any_ca_bundle_bytes_are_a_field_error_not_a_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            pem in proptest::prelude::any::<bool>(),
        ) {
            use base64::Engine;
            let b64 = base64::engine::general_purpose::STANDARD;
            let content = if pem {
                format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", b64.encode(&bytes)).into_bytes()
            } else {
                bytes
            };
            let mut v = base();
            v["spec"]["caBundle"] = Value::from(b64.encode(content));
            if let Err(errors) = ApiService::from_value(v) {
                proptest::prop_assert!(errors.iter().all(|e| e.field == "spec.caBundle"), "{:?}", errors);
            }
        }
    }

    #[test]
    fn empty_group_only_for_v1() {
        let mut v = base();
        v["spec"]["group"] = json!("");
        v["metadata"]["name"] = json!("v1alpha1.");
        assert_eq!(fields(v), vec!["spec.group"]);
    }
}
