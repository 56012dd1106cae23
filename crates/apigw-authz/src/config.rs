//! `--authorization-config`: kube's `AuthorizationConfiguration` file
//! (`apiserver.config.k8s.io/v1`, also `v1beta1` and `v1alpha1`), the one kube-apiserver takes,
//! read into the chain's [`LinkSettings`] with upstream's defaults and validation. Every problem
//! is reported at once, each named by its field path as kube-apiserver names it (a webhook's
//! settings under its authorizer's path, `authorizers[1].timeout`, as upstream's validation
//! does). `Node` and `ABAC` are refused: apigw has no node graph and no ABAC policy.

use super::settings::LinkSettings;
use super::webhook::{Connection, FailurePolicy, ReviewVersion, WebhookSettings};
use apigw_core::duration::parse_duration;
use apigw_expr::Expression;
use serde::Deserialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the file was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: apigw_core::yaml::Error,
    },
    #[error("{path}: {}", problems.join("; "))]
    Invalid {
        path: PathBuf,
        problems: Vec<String>,
    },
}

impl ConfigFileError {
    /// Each problem on its own (a read or parse error is one).
    pub fn problems(&self) -> Vec<String> {
        match self {
            Self::Invalid { problems, .. } => problems.clone(),
            other => vec![apigw_core::errors::chain(other)],
        }
    }
}

const VERSIONS: &[&str] = &[
    "apiserver.config.k8s.io/v1",
    "apiserver.config.k8s.io/v1beta1",
    "apiserver.config.k8s.io/v1alpha1",
];

/// The most match conditions a webhook may have.
const MAX_MATCH_CONDITIONS: usize = 64;
/// The longest a webhook may take to answer.
const MAX_TIMEOUT: Duration = Duration::from_secs(30);
/// Defaults of an unset TTL, as kube's `--authorization-webhook-cache-*-ttl` flags.
const AUTHORIZED_TTL: Duration = Duration::from_secs(300);
const UNAUTHORIZED_TTL: Duration = Duration::from_secs(30);

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    authorizers: Vec<Authorizer>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Authorizer {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    name: String,
    webhook: Option<Webhook>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Webhook {
    timeout: Option<String>,
    #[serde(default)]
    subject_access_review_version: String,
    #[serde(default)]
    match_condition_subject_access_review_version: String,
    #[serde(default)]
    failure_policy: String,
    #[serde(rename = "authorizedTTL")]
    authorized_ttl: Option<String>,
    #[serde(rename = "unauthorizedTTL")]
    unauthorized_ttl: Option<String>,
    cache_authorized_requests: Option<bool>,
    cache_unauthorized_requests: Option<bool>,
    #[serde(default)]
    connection_info: ConnectionInfo,
    #[serde(default)]
    match_conditions: Vec<MatchCondition>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConnectionInfo {
    #[serde(rename = "type", default)]
    kind: String,
    kube_config_file: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchCondition {
    #[serde(default)]
    expression: String,
}

/// Reads and validates the file at `path`.
pub fn load(path: &Path) -> Result<Vec<LinkSettings>, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text).map_err(|e| match e {
        Parsed::Yaml(source) => ConfigFileError::Parse {
            path: path.to_path_buf(),
            source,
        },
        Parsed::Invalid(problems) => ConfigFileError::Invalid {
            path: path.to_path_buf(),
            problems,
        },
    })
}

/// Why a text is not a configuration.
#[derive(Debug)]
pub enum Parsed {
    Yaml(apigw_core::yaml::Error),
    Invalid(Vec<String>),
}

/// The chain a configuration's text describes.
pub fn parse(text: &str) -> Result<Vec<LinkSettings>, Parsed> {
    let file: File = apigw_core::yaml::from_str(text).map_err(Parsed::Yaml)?;
    let mut p = Problems::default();
    match file.api_version.as_deref() {
        Some(v) if VERSIONS.contains(&v) => {}
        Some(v) => p.add(
            "apiVersion",
            format!(
                "Unsupported value: {v:?}: supported values: {}",
                quoted(VERSIONS)
            ),
        ),
        None => p.add("apiVersion", "Required value"),
    }
    match file.kind.as_deref() {
        Some("AuthorizationConfiguration") => {}
        Some(k) => p.add(
            "kind",
            format!("Unsupported value: {k:?}: supported values: \"AuthorizationConfiguration\""),
        ),
        None => p.add("kind", "Required value"),
    }
    if file.authorizers.is_empty() {
        p.add(
            "authorizers",
            "Required value: at least one authorization mode must be defined",
        );
    }
    let mut names = HashSet::new();
    let mut types = HashSet::new();
    let mut links = Vec::new();
    for (i, a) in file.authorizers.into_iter().enumerate() {
        let at = format!("authorizers[{i}]");
        let link = authorizer(&mut p, &at, a, &mut names, &mut types);
        links.extend(link);
    }
    if p.0.is_empty() && p.1.is_empty() {
        Ok(links)
    } else if p.0.is_empty() {
        Err(Parsed::Invalid(p.1))
    } else {
        Err(Parsed::Invalid(p.0))
    }
}

/// One authorizer; None when it has a problem (reported in `p`).
fn authorizer(
    p: &mut Problems,
    at: &str,
    a: Authorizer,
    names: &mut HashSet<String>,
    types: &mut HashSet<String>,
) -> Option<LinkSettings> {
    let before = p.0.len();
    // kube-apiserver's known types, sorted as its message lists them.
    const TYPES: &[&str] = &[
        "ABAC",
        "AlwaysAllow",
        "AlwaysDeny",
        "Node",
        "RBAC",
        "Webhook",
    ];
    // As upstream, a problem with the type ends the checks of this authorizer.
    match a.kind.as_str() {
        "" => {
            p.add(&format!("{at}.type"), "Required value");
            return None;
        }
        "Node" | "ABAC" => p.add(
            &format!("{at}.type"),
            format!(
                "Unsupported value: {:?}: apigw has no {} authorizer (supported here: \"AlwaysAllow\", \"AlwaysDeny\", \"RBAC\", \"Webhook\")",
                a.kind,
                if a.kind == "Node" { "node graph for the Node" } else { "ABAC policy for the ABAC" }
            ),
        ),
        k if !TYPES.contains(&k) => {
            p.add(
                &format!("{at}.type"),
                format!("Unsupported value: {k:?}: supported values: {}", quoted(TYPES)),
            );
            return None;
        }
        // Only webhooks may be repeated.
        k if k != "Webhook" && !types.insert(k.to_string()) => {
            p.add(&format!("{at}.type"), format!("Duplicate value: {k:?}"));
            return None;
        }
        _ => {}
    }
    if a.name.is_empty() {
        p.add(&format!("{at}.name"), "Required value");
    } else if !names.insert(a.name.clone()) {
        p.add(
            &format!("{at}.name"),
            format!("Duplicate value: {:?}", a.name),
        );
    } else if let Err(e) = apigw_core::names::dns1123_subdomain(&a.name) {
        p.add(
            &format!("{at}.name"),
            format!(
                "Invalid value: {:?}: authorizer name is invalid: {e}",
                a.name
            ),
        );
    }
    // kube-apiserver names every authorizer but webhooks by its type, lower-cased; it checks
    // that once the file is otherwise valid.
    let expected = a.kind.to_ascii_lowercase();
    if a.kind != "Webhook" && !a.name.is_empty() && a.name != expected {
        p.1.push(format!(
            "{at}.name: expected name {expected} for authorizer {} instead of {}",
            a.kind, a.name
        ));
    }
    let link = match (a.kind.as_str(), a.webhook) {
        ("Webhook", None) => {
            p.add(
                &format!("{at}.webhook"),
                "Required value: required when type=Webhook",
            );
            None
        }
        ("Webhook", Some(w)) => webhook(p, at, a.name, w),
        (_, Some(_)) => {
            p.add(
                &format!("{at}.webhook"),
                "Invalid value: \"non-null\": may only be specified when type=Webhook",
            );
            None
        }
        ("AlwaysAllow", None) => Some(LinkSettings::AlwaysAllow),
        ("AlwaysDeny", None) => Some(LinkSettings::AlwaysDeny),
        ("RBAC", None) => Some(LinkSettings::Rbac),
        _ => None,
    };
    link.filter(|_| p.0.len() == before)
}

fn webhook(p: &mut Problems, at: &str, name: String, w: Webhook) -> Option<LinkSettings> {
    let field = |f: &str| format!("{at}.{f}");
    let timeout = match w.timeout.as_deref() {
        None => {
            p.add(&field("timeout"), "Required value");
            None
        }
        Some(text) => match parse_duration(text) {
            Ok(d) if d.is_zero() => {
                p.add(&field("timeout"), "Required value");
                None
            }
            Ok(d) if d > MAX_TIMEOUT => {
                p.add(
                    &field("timeout"),
                    format!("Invalid value: {text:?}: must be > 0s and <= 30s"),
                );
                None
            }
            Ok(d) => Some(d),
            Err(m) => {
                p.add(&field("timeout"), format!("Invalid value: {m}"));
                None
            }
        },
    };
    let mut ttl = |key: &str, value: Option<String>, default: Duration| match value {
        None => Some(default),
        Some(text) => match parse_duration(&text) {
            Ok(d) if d.is_zero() => Some(default),
            Ok(d) => Some(d),
            Err(m) => {
                p.add(&field(key), format!("Invalid value: {m}"));
                None
            }
        },
    };
    let authorized_ttl = ttl("authorizedTTL", w.authorized_ttl, AUTHORIZED_TTL);
    let unauthorized_ttl = ttl("unauthorizedTTL", w.unauthorized_ttl, UNAUTHORIZED_TTL);
    let version = match w.subject_access_review_version.as_str() {
        "v1" => Some(ReviewVersion::V1),
        "v1beta1" => Some(ReviewVersion::V1beta1),
        "" => {
            p.add(&field("subjectAccessReviewVersion"), "Required value");
            None
        }
        v => {
            p.add(
                &field("subjectAccessReviewVersion"),
                format!("Unsupported value: {v:?}: supported values: \"v1\", \"v1beta1\""),
            );
            None
        }
    };
    match w.match_condition_subject_access_review_version.as_str() {
        "v1" => {}
        "" if w.match_conditions.is_empty() => {}
        "" => p.add(
            &field("matchConditionSubjectAccessReviewVersion"),
            "Required value: required if match conditions are specified",
        ),
        v => p.add(
            &field("matchConditionSubjectAccessReviewVersion"),
            format!("Unsupported value: {v:?}: supported values: \"v1\""),
        ),
    }
    let failure_policy = match w.failure_policy.as_str() {
        "NoOpinion" => Some(FailurePolicy::NoOpinion),
        "Deny" => Some(FailurePolicy::Deny),
        "" => {
            p.add(&field("failurePolicy"), "Required value");
            None
        }
        v => {
            p.add(
                &field("failurePolicy"),
                format!("Unsupported value: {v:?}: supported values: \"NoOpinion\", \"Deny\""),
            );
            None
        }
    };
    let connection = connection(p, &field("connectionInfo"), w.connection_info);
    let mut seen = HashSet::new();
    let mut match_conditions = Vec::new();
    if w.match_conditions.len() > MAX_MATCH_CONDITIONS {
        p.add(
            &field("matchConditions"),
            format!(
                "Too many: {}: must have at most {MAX_MATCH_CONDITIONS} items",
                w.match_conditions.len()
            ),
        );
    }
    let conditions = if w.match_conditions.len() > MAX_MATCH_CONDITIONS {
        &[][..]
    } else {
        &w.match_conditions[..]
    };
    for (i, c) in conditions.iter().enumerate() {
        let at = field(&format!("matchConditions[{i}].expression"));
        if c.expression.trim().is_empty() {
            p.add(&at, "Required value");
            continue;
        }
        if !seen.insert(c.expression.clone()) {
            p.add(&at, format!("Duplicate value: {:?}", c.expression));
            continue;
        }
        match Expression::compile(&c.expression, &["request"]) {
            Ok(e) => match_conditions.push(e),
            Err(e) => p.add(
                &at,
                format!(
                    "Invalid value: {:?}: {}",
                    c.expression,
                    apigw_core::errors::chain(&e)
                ),
            ),
        }
    }
    Some(LinkSettings::Webhook(WebhookSettings {
        name,
        timeout: timeout?,
        version: version?,
        failure_policy: failure_policy?,
        authorized_ttl: authorized_ttl?,
        unauthorized_ttl: unauthorized_ttl?,
        cache_authorized: w.cache_authorized_requests.unwrap_or(true),
        cache_unauthorized: w.cache_unauthorized_requests.unwrap_or(true),
        connection: connection?,
        match_conditions,
    }))
}

fn connection(p: &mut Problems, at: &str, c: ConnectionInfo) -> Option<Connection> {
    let file = c.kube_config_file.filter(|f| !f.is_empty());
    match (c.kind.as_str(), file) {
        ("KubeConfigFile", None) => {
            p.add(&format!("{at}.kubeConfigFile"), "Required value");
            None
        }
        ("KubeConfigFile", Some(file)) => {
            let path = PathBuf::from(&file);
            let invalid = |m: String| format!("Invalid value: {file:?}: {m}");
            if !path.is_absolute() {
                p.add(
                    &format!("{at}.kubeConfigFile"),
                    invalid("must be an absolute path".into()),
                );
                return None;
            }
            match std::fs::metadata(&path) {
                Err(e) => p.add(
                    &format!("{at}.kubeConfigFile"),
                    invalid(format!("error loading file: {e}")),
                ),
                Ok(m) if !m.is_file() => p.add(
                    &format!("{at}.kubeConfigFile"),
                    invalid("must be a regular file".into()),
                ),
                Ok(_) => return Some(Connection::KubeConfigFile(path)),
            }
            None
        }
        ("InClusterConfig", None) => Some(Connection::InCluster),
        ("InClusterConfig", Some(file)) => {
            p.add(
                &format!("{at}.kubeConfigFile"),
                format!("Invalid value: {file:?}: can only be set when type=KubeConfigFile"),
            );
            None
        }
        ("", _) => {
            p.add(&format!("{at}.type"), "Required value");
            None
        }
        (k, _) => {
            p.add(
                &format!("{at}.type"),
                format!("Unsupported value: {k:?}: supported values: \"InClusterConfig\", \"KubeConfigFile\""),
            );
            None
        }
    }
}

fn quoted(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Problems, each `field: message`; `after`: those reported only when there are no others.
#[derive(Default)]
struct Problems(Vec<String>, Vec<String>);

impl Problems {
    fn add(&mut self, field: &str, message: impl Into<String>) {
        self.0.push(format!("{field}: {}", message.into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        match parse(text) {
            Err(Parsed::Invalid(p)) => p,
            Err(Parsed::Yaml(e)) => vec![format!("yaml: {e}")],
            Ok(links) => panic!("accepted: {links:?}"),
        }
    }

    const HEAD: &str = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n";

    #[test]
    fn a_file_kube_apiserver_takes_is_taken_with_its_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("webhook.kubeconfig");
        std::fs::write(&kubeconfig, "apiVersion: v1\nkind: Config\n").unwrap();
        let text = format!(
            "{HEAD}authorizers:\n\
             - type: Webhook\n  name: gatekeeper.example.com\n  webhook:\n    timeout: 3s\n\
             \x20   subjectAccessReviewVersion: v1beta1\n    matchConditionSubjectAccessReviewVersion: v1\n\
             \x20   failurePolicy: Deny\n    connectionInfo:\n      type: KubeConfigFile\n      kubeConfigFile: {}\n\
             \x20   matchConditions:\n    - expression: has(request.resourceAttributes)\n\
             \x20   - expression: \"!('system:masters' in request.groups)\"\n\
             - type: RBAC\n  name: rbac\n\
             - type: Webhook\n  name: in-cluster\n  webhook:\n    timeout: 30s\n    authorizedTTL: 1m\n\
             \x20   cacheUnauthorizedRequests: false\n    subjectAccessReviewVersion: v1\n\
             \x20   failurePolicy: NoOpinion\n    connectionInfo: {{type: InClusterConfig}}\n\
             - type: AlwaysDeny\n  name: alwaysdeny\n",
            kubeconfig.display()
        );
        let links = match parse(&text) {
            Ok(links) => links,
            Err(Parsed::Invalid(p)) => panic!("{p:#?}"),
            Err(Parsed::Yaml(e)) => panic!("{e}"),
        };
        assert_eq!(links.len(), 4);
        let LinkSettings::Webhook(first) = &links[0] else {
            panic!("{links:?}")
        };
        assert_eq!(first.name, "gatekeeper.example.com");
        assert_eq!(first.timeout, Duration::from_secs(3));
        assert_eq!(first.version, ReviewVersion::V1beta1);
        assert_eq!(first.failure_policy, FailurePolicy::Deny);
        assert_eq!(
            (first.authorized_ttl, first.unauthorized_ttl),
            (AUTHORIZED_TTL, UNAUTHORIZED_TTL)
        );
        assert!(first.cache_authorized && first.cache_unauthorized);
        assert_eq!(first.connection, Connection::KubeConfigFile(kubeconfig));
        assert_eq!(first.match_conditions.len(), 2);
        assert!(matches!(links[1], LinkSettings::Rbac));
        let LinkSettings::Webhook(third) = &links[2] else {
            panic!("{links:?}")
        };
        assert_eq!(third.authorized_ttl, Duration::from_secs(60));
        assert!(third.cache_authorized && !third.cache_unauthorized);
        assert_eq!(third.connection, Connection::InCluster);
        assert!(matches!(links[3], LinkSettings::AlwaysDeny));
        // The older versions are taken too.
        for version in ["v1beta1", "v1alpha1"] {
            let text = format!("apiVersion: apiserver.config.k8s.io/{version}\nkind: AuthorizationConfiguration\nauthorizers:\n- {{type: RBAC, name: rbac}}\n");
            assert!(parse(&text).is_ok(), "{version}");
        }
    }

    #[test]
    fn every_problem_is_named_with_upstreams_field_path() {
        let text = format!(
            "{HEAD}authorizers:\n\
             - {{type: Node, name: node}}\n\
             - {{type: RBAC, name: rbac}}\n\
             - {{type: RBAC, name: rbac}}\n\
             - {{type: Magic, name: magic}}\n\
             - {{type: AlwaysAllow, name: alwaysallow, webhook: {{timeout: 1s}}}}\n\
             - {{type: Webhook}}\n\
             - type: Webhook\n  name: Bad_Name\n  webhook:\n    timeout: 31s\n\
             \x20   subjectAccessReviewVersion: v2\n    failurePolicy: Maybe\n\
             \x20   connectionInfo: {{type: KubeConfigFile, kubeConfigFile: relative.yaml}}\n\
             \x20   matchConditions:\n    - expression: ''\n    - expression: 'request.user =='\n\
             - type: Webhook\n  name: hook\n  webhook:\n    subjectAccessReviewVersion: v1\n\
             \x20   failurePolicy: NoOpinion\n    connectionInfo: {{type: InClusterConfig, kubeConfigFile: /x}}\n\
             \x20   matchConditions: [{{expression: 'true'}}]\n"
        );
        let got = problems(&text);
        let want = [
            "authorizers[0].type: Unsupported value: \"Node\"",
            "authorizers[2].type: Duplicate value: \"RBAC\"",
            "authorizers[3].type: Unsupported value: \"Magic\": supported values: \"ABAC\", \"AlwaysAllow\", \"AlwaysDeny\", \"Node\", \"RBAC\", \"Webhook\"",
            "authorizers[4].webhook: Invalid value: \"non-null\": may only be specified when type=Webhook",
            "authorizers[5].name: Required value",
            "authorizers[5].webhook: Required value: required when type=Webhook",
            "authorizers[6].name: Invalid value: \"Bad_Name\": authorizer name is invalid:",
            "authorizers[6].timeout: Invalid value: \"31s\": must be > 0s and <= 30s",
            "authorizers[6].subjectAccessReviewVersion: Unsupported value: \"v2\"",
            "authorizers[6].matchConditionSubjectAccessReviewVersion: Required value: required if match conditions are specified",
            "authorizers[6].failurePolicy: Unsupported value: \"Maybe\"",
            "authorizers[6].connectionInfo.kubeConfigFile: Invalid value: \"relative.yaml\": must be an absolute path",
            "authorizers[6].matchConditions[0].expression: Required value",
            "authorizers[6].matchConditions[1].expression: Invalid value: \"request.user ==\": compilation failed",
            "authorizers[7].timeout: Required value",
            "authorizers[7].matchConditionSubjectAccessReviewVersion: Required value",
            "authorizers[7].connectionInfo.kubeConfigFile: Invalid value: \"/x\": can only be set when type=KubeConfigFile",
        ];
        for w in want {
            assert!(
                got.iter().any(|g| g.starts_with(w)),
                "missing {w:?} in {got:#?}"
            );
        }
        assert_eq!(got.len(), want.len(), "{got:#?}");
    }

    #[test]
    fn the_header_and_an_empty_chain_are_problems() {
        assert_eq!(
            problems("apiVersion: v1\nkind: Config\n"),
            [
                "apiVersion: Unsupported value: \"v1\": supported values: \"apiserver.config.k8s.io/v1\", \"apiserver.config.k8s.io/v1beta1\", \"apiserver.config.k8s.io/v1alpha1\"",
                "kind: Unsupported value: \"Config\": supported values: \"AuthorizationConfiguration\"",
                "authorizers: Required value: at least one authorization mode must be defined",
            ]
        );
        // Unknown fields are refused, as upstream's strict decoding does.
        let err = parse(&format!("{HEAD}authorizers: []\nextra: 1\n")).unwrap_err();
        assert!(matches!(err, Parsed::Yaml(_)), "{err:?}");
    }

    #[test]
    fn names_of_built_in_authorizers_are_their_types_once_all_else_is_right() {
        assert_eq!(
            problems(&format!(
                "{HEAD}authorizers:\n- {{type: RBAC, name: my-rbac}}\n- {{type: AlwaysDeny, name: alwaysdeny}}\n"
            )),
            ["authorizers[0].name: expected name rbac for authorizer RBAC instead of my-rbac"]
        );
    }

    #[test]
    fn too_many_match_conditions_stop_there() {
        let conditions: String = (0..65)
            .map(|i| format!("    - expression: 'request.user == \"u{i}\"'\n"))
            .collect();
        let text = format!(
            "{HEAD}authorizers:\n- type: Webhook\n  name: hook\n  webhook:\n    timeout: 1s\n\
             \x20   subjectAccessReviewVersion: v1\n    matchConditionSubjectAccessReviewVersion: v1\n\
             \x20   failurePolicy: Deny\n    connectionInfo: {{type: InClusterConfig}}\n    matchConditions:\n{conditions}"
        );
        assert_eq!(
            problems(&text),
            ["authorizers[0].matchConditions: Too many: 65: must have at most 64 items"]
        );
    }
}

#[cfg(test)]
mod reload_tests {
    use crate::{AuthzSettings, LinkSettings, Verdict};
    use apigw_core::reload::Reload;
    use apigw_request::Attributes;
    use apigw_request::Identity;
    use http::Method;

    /// A changed file is put in force whole; a bad one is refused with its problems and the
    /// chain in force stays.
    #[tokio::test]
    async fn the_file_is_reloaded_and_a_bad_one_keeps_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("authz.yaml");
        let write = |authorizers: &str| {
            std::fs::write(
                &path,
                format!("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n{authorizers}"),
            )
            .unwrap()
        };
        write("- {type: AlwaysDeny, name: alwaysdeny}\n");
        let settings = AuthzSettings {
            links: super::load(&path).unwrap(),
            policy_file: None,
            config_file: Some(path.clone()),
        };
        let authz = settings.authorizer().unwrap();
        assert!(authz
            .watched()
            .iter()
            .any(|w| w.what == "authorization config" && w.files == [path.clone()]));
        let bob = Identity::new("bob", vec![]);
        let a = Attributes::from_request(&Method::GET, "/apis", None);
        assert_eq!(authz.decide(&bob, &a).await.verdict, Verdict::NoOpinion);

        write("- {type: AlwaysAllow, name: alwaysallow}\n");
        authz.reload("authorization config").unwrap();
        assert_eq!(authz.decide(&bob, &a).await.verdict, Verdict::Allow);

        write("- {type: Node, name: node}\n");
        let err = authz.reload("authorization config").unwrap_err();
        assert!(err.to_string().contains("authorizers[0].type"), "{err}");
        assert_eq!(authz.decide(&bob, &a).await.verdict, Verdict::Allow);
        assert!(matches!(settings.links[..], [LinkSettings::AlwaysDeny]));
    }
}
