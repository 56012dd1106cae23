//! kube's `AuthenticationConfiguration` (`apiserver.config.k8s.io` v1, v1beta1, v1alpha1) as
//! read from YAML or JSON, and its validation into [`IssuerSettings`], one per `jwt` entry.
//! Errors name the field path the way kube-apiserver does (`jwt[0].issuer.url: ...`).

use apigw_core::tls::TlsError;
use apigw_expr::Expression;
use rustls::pki_types::CertificateDer;
use serde::Deserialize;
use std::collections::HashSet;
use std::fmt;

/// The API versions kube-apiserver reads the file in.
pub const API_VERSIONS: [&str; 3] = [
    "apiserver.config.k8s.io/v1",
    "apiserver.config.k8s.io/v1beta1",
    "apiserver.config.k8s.io/v1alpha1",
];
pub const KIND: &str = "AuthenticationConfiguration";

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthenticationConfiguration {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub jwt: Vec<JwtSpec>,
    /// Where requests without credentials are anonymous (instead of `--anonymous-auth`).
    #[serde(default)]
    pub anonymous: Option<AnonymousSpec>,
}

/// `anonymous`: enabled, and if `conditions` lists paths, only at those.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnonymousSpec {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default)]
    pub conditions: Vec<AnonymousCondition>,
}

/// One path where anonymous requests are served.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnonymousCondition {
    #[serde(default)]
    pub path: String,
}

/// One `jwt` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtSpec {
    pub issuer: IssuerSpec,
    #[serde(default)]
    pub claim_validation_rules: Vec<ClaimValidationRule>,
    #[serde(default)]
    pub claim_mappings: ClaimMappings,
    #[serde(default)]
    pub user_validation_rules: Vec<UserValidationRule>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IssuerSpec {
    #[serde(default)]
    pub url: String,
    #[serde(default, rename = "discoveryURL")]
    pub discovery_url: Option<String>,
    /// PEM-encoded CA certificates, the content itself (not a path).
    #[serde(default)]
    pub certificate_authority: Option<String>,
    #[serde(default)]
    pub audiences: Vec<String>,
    #[serde(default)]
    pub audience_match_policy: Option<String>,
    #[serde(default)]
    pub egress_selector_type: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimValidationRule {
    #[serde(default)]
    pub claim: Option<String>,
    #[serde(default)]
    pub required_value: Option<String>,
    #[serde(default)]
    pub expression: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimMappings {
    #[serde(default)]
    pub username: PrefixedClaimOrExpression,
    #[serde(default)]
    pub groups: Option<PrefixedClaimOrExpression>,
    #[serde(default)]
    pub uid: Option<ClaimOrExpression>,
    #[serde(default)]
    pub extra: Vec<ExtraMapping>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrefixedClaimOrExpression {
    #[serde(default)]
    pub claim: Option<String>,
    /// Required (possibly empty) when `claim` is set; `None` and `Some("")` differ.
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub expression: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimOrExpression {
    #[serde(default)]
    pub claim: Option<String>,
    #[serde(default)]
    pub expression: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtraMapping {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value_expression: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserValidationRule {
    #[serde(default)]
    pub expression: String,
    #[serde(default)]
    pub message: Option<String>,
}

/// A claim and the prefix put before its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixedClaim {
    pub claim: String,
    pub prefix: String,
}

/// How a user attribute is made from the claims.
#[derive(Debug, Clone, PartialEq)]
pub enum Mapping {
    /// The claim's value after the prefix (uid: no prefix).
    Claim(PrefixedClaim),
    /// A CEL expression over `claims`.
    Expression(Expression),
}

/// A CEL rule and the message given when it is false.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub expression: Expression,
    pub message: Option<String>,
}

/// One validated `jwt` entry.
#[derive(Debug, Clone)]
pub struct IssuerSettings {
    /// `issuer.url`: what the token's `iss` must equal.
    pub url: String,
    /// Where discovery is fetched from when not `<url>/.well-known/openid-configuration`.
    pub discovery_url: Option<String>,
    /// Trust for the issuer's TLS; `None`: the system roots.
    pub ca: Option<Vec<CertificateDer<'static>>>,
    pub audiences: Vec<String>,
    /// `(claim, requiredValue)` pairs every token must carry.
    pub required_claims: Vec<(String, String)>,
    /// `claimValidationRules` expressions, each of which must be true.
    pub claim_rules: Vec<Rule>,
    pub username: Mapping,
    pub groups: Option<Mapping>,
    pub uid: Option<Mapping>,
    /// `extra` keys and the expressions giving their values.
    pub extra: Vec<(String, Expression)>,
    /// `userValidationRules` over `user`, each of which must be true.
    pub user_rules: Vec<Rule>,
}

/// Why a configuration was refused: every problem found, each with its field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub problems: Vec<Problem>,
}

/// One problem with one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", p.field, p.message)?;
        }
        Ok(())
    }
}

const CLAIMS: &[&str] = &["claims"];
const USER: &[&str] = &["user"];

impl AuthenticationConfiguration {
    /// Reads the file's text: YAML, or JSON (a YAML subset).
    pub fn parse(text: &str) -> Result<Self, apigw_core::yaml::Error> {
        apigw_core::yaml::from_str::<Self>(text)
    }

    /// What `anonymous` says, when the file has it: off, everywhere, or only at the listed
    /// paths (matched exactly).
    pub fn anonymous_settings(&self) -> Option<crate::Anonymous> {
        use crate::Anonymous;
        let a = self.anonymous.as_ref()?;
        Some(match (a.enabled, a.conditions.is_empty()) {
            (false, _) => Anonymous::Off,
            (true, true) => Anonymous::Everywhere,
            (true, false) => {
                Anonymous::Paths(a.conditions.iter().map(|c| c.path.clone()).collect())
            }
        })
    }

    /// Checks every field as kube-apiserver does and returns the issuers' settings in order.
    pub fn validate(&self) -> Result<Vec<IssuerSettings>, ConfigError> {
        let mut v = Validator::default();
        if !API_VERSIONS.contains(&self.api_version.as_str()) {
            v.bad(
                "apiVersion",
                format!(
                    "unsupported value {:?}: expected one of {}",
                    self.api_version,
                    API_VERSIONS.join(", ")
                ),
            );
        }
        if self.kind != KIND {
            v.bad(
                "kind",
                format!("unsupported value {:?}: expected {KIND:?}", self.kind),
            );
        }
        if let Some(a) = &self.anonymous {
            if !a.enabled && !a.conditions.is_empty() {
                v.bad(
                    "anonymous.conditions",
                    "enabled should be set to true when conditions are defined",
                );
            }
        }
        let mut urls = HashSet::new();
        let mut discovery_urls = HashSet::new();
        let mut out = Vec::new();
        for (i, spec) in self.jwt.iter().enumerate() {
            let path = format!("jwt[{i}]");
            if let Some(s) = v.jwt(&path, spec) {
                if !urls.insert(s.url.clone()) {
                    v.bad(
                        &format!("{path}.issuer.url"),
                        format!("duplicate value {:?}", s.url),
                    );
                }
                if let Some(d) = &s.discovery_url {
                    if !discovery_urls.insert(d.clone()) {
                        v.bad(
                            &format!("{path}.issuer.discoveryURL"),
                            format!("duplicate value {d:?}"),
                        );
                    }
                }
                out.push(s);
            }
        }
        if v.problems.is_empty() {
            Ok(out)
        } else {
            Err(ConfigError {
                problems: v.problems,
            })
        }
    }
}

#[derive(Default)]
struct Validator {
    problems: Vec<Problem>,
}

impl Validator {
    fn bad(&mut self, field: &str, message: impl Into<String>) {
        self.problems.push(Problem {
            field: field.to_string(),
            message: message.into(),
        });
    }

    /// One entry; `None` when any of its fields is bad (the problems are recorded).
    fn jwt(&mut self, path: &str, spec: &JwtSpec) -> Option<IssuerSettings> {
        let before = self.problems.len();
        let issuer = &spec.issuer;
        let url_path = format!("{path}.issuer.url");
        if issuer.url.is_empty() {
            self.bad(&url_path, "required");
        } else {
            self.https_url(&url_path, &issuer.url);
        }
        let discovery_url = issuer.discovery_url.clone().filter(|d| !d.is_empty());
        if let Some(d) = &discovery_url {
            let dpath = format!("{path}.issuer.discoveryURL");
            self.https_url(&dpath, d);
            if d.trim_end_matches('/') == issuer.url.trim_end_matches('/') {
                self.bad(&dpath, "must be different from issuer.url");
            }
        }
        let ca = match issuer.certificate_authority.as_deref() {
            Some(pem) if !pem.trim().is_empty() => {
                let what = format!("{path}.issuer.certificateAuthority");
                match apigw_core::tls::parse_certs(pem.as_bytes(), &what) {
                    Ok(certs) => Some(certs),
                    Err(e) => {
                        self.bad(&what, ca_message(&e));
                        None
                    }
                }
            }
            _ => None,
        };
        self.audiences(path, issuer);
        if let Some(e) = issuer
            .egress_selector_type
            .as_deref()
            .filter(|e| !e.is_empty())
        {
            self.bad(
                &format!("{path}.issuer.egressSelectorType"),
                format!("unsupported value {e:?}: apigw has no egress selector"),
            );
        }

        let mut required_claims = Vec::new();
        let mut claim_rules = Vec::new();
        let mut seen = HashSet::new();
        for (j, rule) in spec.claim_validation_rules.iter().enumerate() {
            let rpath = format!("{path}.claimValidationRules[{j}]");
            match (&rule.claim, &rule.expression) {
                (Some(c), None) if !c.is_empty() => {
                    if !seen.insert(c.clone()) {
                        self.bad(&format!("{rpath}.claim"), format!("duplicate value {c:?}"));
                    }
                    if rule.message.is_some() {
                        self.bad(
                            &format!("{rpath}.message"),
                            "may not be specified when claim is set",
                        );
                    }
                    required_claims
                        .push((c.clone(), rule.required_value.clone().unwrap_or_default()));
                }
                (None, Some(e)) if !e.is_empty() => {
                    if let Some(expression) = self.expr(&format!("{rpath}.expression"), e, CLAIMS) {
                        claim_rules.push(Rule {
                            expression,
                            message: rule.message.clone(),
                        });
                    }
                }
                (Some(_), Some(_)) => self.bad(&rpath, "claim and expression can't both be set"),
                _ => self.bad(&rpath, "claim or expression is required"),
            }
        }

        let m = &spec.claim_mappings;
        let mpath = format!("{path}.claimMappings");
        let username = self.prefixed(&format!("{mpath}.username"), &m.username, true);
        let groups = match &m.groups {
            Some(g) => self.prefixed(&format!("{mpath}.groups"), g, false),
            None => None,
        };
        let uid = m.uid.as_ref().and_then(|u| {
            let upath = format!("{mpath}.uid");
            let claim = u.claim.as_deref().filter(|c| !c.is_empty());
            let expression = u.expression.as_deref().filter(|e| !e.is_empty());
            match (claim, expression) {
                (Some(c), None) => Some(Mapping::Claim(PrefixedClaim {
                    claim: c.to_string(),
                    prefix: String::new(),
                })),
                (None, Some(e)) => self
                    .expr(&format!("{upath}.expression"), e, CLAIMS)
                    .map(Mapping::Expression),
                (Some(_), Some(_)) => {
                    self.bad(&upath, "claim and expression can't both be set");
                    None
                }
                (None, None) => None,
            }
        });
        let mut extra = Vec::new();
        let mut keys = HashSet::new();
        for (j, e) in m.extra.iter().enumerate() {
            let epath = format!("{mpath}.extra[{j}]");
            if let Err(message) = extra_key(&e.key) {
                self.bad(&format!("{epath}.key"), message);
            } else if !keys.insert(e.key.as_str()) {
                self.bad(
                    &format!("{epath}.key"),
                    format!("duplicate value {:?}", e.key),
                );
            }
            if e.value_expression.is_empty() {
                self.bad(&format!("{epath}.valueExpression"), "required");
            } else if let Some(x) = self.expr(
                &format!("{epath}.valueExpression"),
                &e.value_expression,
                CLAIMS,
            ) {
                extra.push((e.key.clone(), x));
            }
        }
        let mut user_rules = Vec::new();
        for (j, r) in spec.user_validation_rules.iter().enumerate() {
            let rpath = format!("{path}.userValidationRules[{j}].expression");
            if r.expression.is_empty() {
                self.bad(&rpath, "required");
            } else if let Some(expression) = self.expr(&rpath, &r.expression, USER) {
                user_rules.push(Rule {
                    expression,
                    message: r.message.clone(),
                });
            }
        }
        self.email_verified(&mpath, spec);

        let username = username?;
        if self.problems.len() != before {
            return None;
        }
        Some(IssuerSettings {
            url: issuer.url.clone(),
            discovery_url,
            ca,
            audiences: issuer.audiences.clone(),
            required_claims,
            claim_rules,
            username,
            groups,
            uid,
            extra,
            user_rules,
        })
    }

    fn https_url(&mut self, path: &str, url: &str) {
        let uri = match url.parse::<http::Uri>() {
            Ok(u) => u,
            Err(e) => return self.bad(path, format!("invalid value {url:?}: {e}")),
        };
        if uri.scheme_str() != Some("https") {
            self.bad(
                path,
                format!("invalid value {url:?}: URL scheme must be https"),
            );
        }
        match uri.authority() {
            None => self.bad(path, format!("invalid value {url:?}: URL must have a host")),
            Some(a) if a.as_str().contains('@') => self.bad(
                path,
                format!("invalid value {url:?}: URL must not contain a username or password"),
            ),
            Some(_) => {}
        }
        if uri.query().is_some() {
            self.bad(
                path,
                format!("invalid value {url:?}: URL must not contain a query"),
            );
        }
    }

    fn audiences(&mut self, path: &str, issuer: &IssuerSpec) {
        let apath = format!("{path}.issuer.audiences");
        if issuer.audiences.is_empty() {
            self.bad(&apath, "at least one issuer.audiences is required");
        }
        let mut seen = HashSet::new();
        for (k, a) in issuer.audiences.iter().enumerate() {
            if a.is_empty() {
                self.bad(&format!("{apath}[{k}]"), "audience can't be empty");
            } else if !seen.insert(a) {
                self.bad(&format!("{apath}[{k}]"), format!("duplicate value {a:?}"));
            }
        }
        let ppath = format!("{path}.issuer.audienceMatchPolicy");
        match issuer.audience_match_policy.as_deref().unwrap_or("") {
            "" if issuer.audiences.len() > 1 => {
                self.bad(&ppath, "must be MatchAny for multiple audiences")
            }
            "" | "MatchAny" => {}
            other => self.bad(
                &ppath,
                format!("unsupported value {other:?}: must be MatchAny or empty"),
            ),
        }
    }

    fn expr(&mut self, path: &str, source: &str, allowed: &[&str]) -> Option<Expression> {
        match Expression::compile(source, allowed) {
            Ok(e) => Some(e),
            Err(e) => {
                let message = apigw_core::errors::chain(&e);
                self.bad(path, format!("invalid value {source:?}: {message}"));
                None
            }
        }
    }

    /// kube's rule: a username expression using `claims.email` must be paired with a check of
    /// `claims.email_verified` (in it, an extra mapping or a claim validation rule).
    fn email_verified(&mut self, mpath: &str, spec: &JwtSpec) {
        let Some(username) = spec.claim_mappings.username.expression.as_deref() else {
            return;
        };
        let uses_email = username.match_indices("claims.email").any(|(i, m)| {
            let next = username[i + m.len()..].chars().next();
            !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
        });
        if !uses_email {
            return;
        }
        let checked = username.contains("claims.email_verified")
            || spec
                .claim_mappings
                .extra
                .iter()
                .any(|e| e.value_expression.contains("claims.email_verified"))
            || spec.claim_validation_rules.iter().any(|r| {
                r.expression
                    .as_deref()
                    .is_some_and(|e| e.contains("claims.email_verified"))
            });
        if !checked {
            self.bad(
                &format!("{mpath}.username.expression"),
                "claims.email_verified must be used in claimMappings.username.expression or claimMappings.extra[*].valueExpression or claimValidationRules[*].expression when claimMappings.username.expression uses claims.email",
            );
        }
    }

    fn prefixed(
        &mut self,
        path: &str,
        m: &PrefixedClaimOrExpression,
        required: bool,
    ) -> Option<Mapping> {
        let claim = m.claim.as_deref().filter(|c| !c.is_empty());
        let expression = m.expression.as_deref().filter(|e| !e.is_empty());
        match (claim, expression) {
            (Some(_), Some(_)) => {
                self.bad(path, "claim and expression can't both be set");
                None
            }
            (Some(c), None) => match &m.prefix {
                Some(prefix) => Some(Mapping::Claim(PrefixedClaim {
                    claim: c.to_string(),
                    prefix: prefix.clone(),
                })),
                None => {
                    self.bad(
                        &format!("{path}.prefix"),
                        "required value: prefix is required when claim is set. It can be set to an empty string to disable prefixing",
                    );
                    None
                }
            },
            (None, Some(e)) => {
                if m.prefix.is_some() {
                    self.bad(
                        &format!("{path}.prefix"),
                        "may not be specified when expression is set",
                    );
                    return None;
                }
                self.expr(&format!("{path}.expression"), e, CLAIMS)
                    .map(Mapping::Expression)
            }
            (None, None) => {
                if required {
                    self.bad(path, "claim or expression is required");
                } else if m.prefix.is_some() {
                    self.bad(
                        &format!("{path}.prefix"),
                        "may not be specified without claim",
                    );
                }
                None
            }
        }
    }
}

fn ca_message(e: &TlsError) -> String {
    match e {
        TlsError::Pem { source, .. } => apigw_core::tls::pem_message(source),
        TlsError::NoCertificate { .. } => "no PEM certificate found".to_string(),
        other => other.to_string(),
    }
}

/// kube's rule for `extra` keys: a lowercase, domain-prefixed path outside kube's own domains.
fn extra_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("required".into());
    }
    if key != key.to_lowercase() {
        return Err(format!("invalid value {key:?}: key must be lowercase"));
    }
    let Some((domain, rest)) = key.split_once('/') else {
        return Err(format!(
            "invalid value {key:?}: must be a domain-prefixed path (such as \"acme.io/foo\")"
        ));
    };
    if domain.is_empty() || !domain.contains('.') || rest.is_empty() {
        return Err(format!(
            "invalid value {key:?}: must be a domain-prefixed path (such as \"acme.io/foo\")"
        ));
    }
    for reserved in ["kubernetes.io", "k8s.io"] {
        if domain == reserved || domain.ends_with(&format!(".{reserved}")) {
            return Err(format!("invalid value {key:?}: k8s.io, kubernetes.io and their subdomains are reserved for Kubernetes use"));
        }
    }
    Ok(())
}
