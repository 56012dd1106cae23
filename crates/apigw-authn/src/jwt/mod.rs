//! Bearer tokens that are JWTs from configured issuers, as kube-apiserver's structured
//! authentication configuration (`AuthenticationConfiguration`, its `jwt` list) takes them:
//! signature by the issuer's discovered JWKS, `iss`, `aud`, `exp`/`nbf`, claim rules, then
//! claim mappings to an [`Identity`]. The caller adds `system:authenticated`.

mod claims;
mod config;
mod crypto;
mod keys;
#[cfg(test)]
mod tests;

pub use apigw_expr::Expression;
pub use config::{
    AuthenticationConfiguration, ConfigError, IssuerSettings, Mapping, PrefixedClaim, Problem, Rule,
};
pub use keys::{FetchError, FetchTiming, IssuerKeys, KeySet};

use apigw_request::Identity;
use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};
use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Signature algorithms a token may use; `none` and HMAC never are.
pub const ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// Why a token of a configured issuer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    Expired,
    NotYetValid,
    WrongAudience,
    BadSignature,
    UnknownKid,
    DisallowedAlgorithm,
    ClaimRuleFailed,
    UserRuleFailed,
    MappingFailed,
    /// Not a well-formed JWS (header, base64, JSON).
    MalformedToken,
    /// A standard claim of the wrong type or missing (`exp`).
    MalformedClaims,
    /// The issuer's keys were never fetched.
    KeysUnavailable,
}

impl Reason {
    /// A short label, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Expired => "expired",
            Reason::NotYetValid => "not_yet_valid",
            Reason::WrongAudience => "wrong_audience",
            Reason::BadSignature => "bad_signature",
            Reason::UnknownKid => "unknown_kid",
            Reason::DisallowedAlgorithm => "disallowed_algorithm",
            Reason::ClaimRuleFailed => "claim_rule_failed",
            Reason::UserRuleFailed => "user_rule_failed",
            Reason::MappingFailed => "mapping_failed",
            Reason::MalformedToken => "malformed_token",
            Reason::MalformedClaims => "malformed_claims",
            Reason::KeysUnavailable => "keys_unavailable",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A token for a configured issuer that failed; for the log, never for the client.
#[derive(Debug, thiserror::Error)]
#[error("jwt issuer {issuer}: {reason}: {detail}")]
pub struct JwtError {
    pub issuer: String,
    pub reason: Reason,
    pub detail: String,
    #[source]
    pub source: Option<jsonwebtoken::errors::Error>,
}

/// Why an authenticator could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("authentication configuration: {0}")]
    Parse(#[from] apigw_core::yaml::Error),
    #[error("authentication configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("jwt issuer keys: {0}")]
    Fetch(#[from] FetchError),
    #[error("jwt crypto: {0}")]
    Crypto(#[source] jsonwebtoken::errors::Error),
}

/// One configured issuer.
struct Issuer {
    settings: IssuerSettings,
    keys: Arc<IssuerKeys>,
}

/// Every `jwt` authenticator of one configuration.
pub struct JwtAuthenticator {
    issuers: Vec<Issuer>,
    /// The file's `anonymous`, when it has one.
    anonymous: Option<crate::Anonymous>,
}

impl fmt::Debug for JwtAuthenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwtAuthenticator")
            .field("issuers", &self.issuer_urls().collect::<Vec<_>>())
            .finish()
    }
}

impl JwtAuthenticator {
    /// Reads and validates a configuration file's text (YAML or JSON). No fetch happens yet.
    pub fn from_text(text: &str, timing: FetchTiming) -> Result<Self, BuildError> {
        let config = AuthenticationConfiguration::parse(text)?;
        let settings = config.validate()?;
        let mut jwt = Self::new(settings, timing)?;
        jwt.anonymous = config.anonymous_settings();
        Ok(jwt)
    }

    /// The file's `anonymous`: where requests without credentials are anonymous.
    pub fn anonymous(&self) -> Option<&crate::Anonymous> {
        self.anonymous.as_ref()
    }

    /// An authenticator for validated settings. No fetch happens yet.
    pub fn new(settings: Vec<IssuerSettings>, timing: FetchTiming) -> Result<Self, BuildError> {
        crypto::install().map_err(BuildError::Crypto)?;
        let issuers = settings
            .into_iter()
            .map(|s| {
                let keys = Arc::new(IssuerKeys::new(&s, timing)?);
                Ok(Issuer { settings: s, keys })
            })
            .collect::<Result<_, FetchError>>()?;
        Ok(Self {
            issuers,
            anonymous: None,
        })
    }

    /// The configured issuers' URLs, in order.
    pub fn issuer_urls(&self) -> impl Iterator<Item = &str> {
        self.issuers.iter().map(|i| i.settings.url.as_str())
    }

    /// Each issuer's key cache, to run [`IssuerKeys::refresh_loop`] on or inspect.
    pub fn keys(&self) -> impl Iterator<Item = (&str, &Arc<IssuerKeys>)> {
        self.issuers
            .iter()
            .map(|i| (i.settings.url.as_str(), &i.keys))
    }

    /// Starts one background refresh task per issuer; they stop when the handles are aborted.
    pub fn spawn_refresh(&self) -> Vec<tokio::task::JoinHandle<()>> {
        self.issuers
            .iter()
            .map(|i| tokio::spawn(i.keys.clone().refresh_loop()))
            .collect()
    }

    /// `Ok(None)` when `token` is not a JWT or no configured issuer issued it (others may
    /// try it); the identity without `system:authenticated` when it verifies; an error saying
    /// why when a configured issuer's token fails.
    pub async fn authenticate(&self, token: &str) -> Result<Option<Identity>, JwtError> {
        let Some(iss) = peek_issuer(token) else {
            return Ok(None);
        };
        let Some(issuer) = self.issuers.iter().find(|i| i.settings.url == iss) else {
            return Ok(None);
        };
        issuer
            .verify(token)
            .await
            .map(Some)
            .map_err(|(reason, detail, source)| JwtError {
                issuer: iss,
                reason,
                detail,
                source,
            })
    }
}

/// Installs the signature provider every verification uses (once; later calls do nothing).
pub(crate) fn install_crypto() -> Result<(), jsonwebtoken::errors::Error> {
    crypto::install()
}

pub(crate) type Refusal = (Reason, String, Option<jsonwebtoken::errors::Error>);

fn refuse((reason, detail): claims::Failure) -> Refusal {
    (reason, detail, None)
}

impl Issuer {
    async fn verify(&self, token: &str) -> Result<Identity, Refusal> {
        let (alg, kid) = token_header(token)?;
        let kid = kid.as_deref();
        let mut set = match self.keys.current() {
            Some(set) => set,
            None => self.keys.refresh().await.ok_or_else(|| {
                let why = self.keys.last_error().unwrap_or_default();
                (Reason::KeysUnavailable, why, None)
            })?,
        };
        if let Some(kid) = kid {
            if !set.has_kid(kid) {
                if let Some(newer) = self.keys.refresh().await {
                    set = newer;
                }
                if !set.has_kid(kid) {
                    return Err((Reason::UnknownKid, format!("no key with kid {kid:?}"), None));
                }
            }
        }
        let claims = verify_signature(token, alg, kid, &set)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        claims_identity(&self.settings, &claims, now)
    }
}

/// A token's allowed `alg` and its `kid`, read before any key is looked at.
pub(crate) fn token_header(token: &str) -> Result<(Algorithm, Option<String>), Refusal> {
    let alg = check_alg(token)?;
    let header = jsonwebtoken::decode_header(token)
        .map_err(|e| (Reason::MalformedToken, "bad header".to_string(), Some(e)))?;
    Ok((alg, header.kid))
}

/// Verified claims checked against one issuer's settings at `now` (seconds since the epoch)
/// and mapped to an identity: `iss`, times, audience, claim rules, then the mappings.
pub(crate) fn claims_identity(
    settings: &IssuerSettings,
    claims: &Map<String, Value>,
    now: f64,
) -> Result<Identity, Refusal> {
    if claims.get("iss").and_then(Value::as_str) != Some(settings.url.as_str()) {
        return Err((Reason::MalformedClaims, "iss does not match".into(), None));
    }
    claims::check_times(claims, now).map_err(refuse)?;
    claims::check_audience(claims, &settings.audiences).map_err(refuse)?;
    let mut cel = claims::CelClaims::new(claims);
    claims::check_rules(&mut cel, settings).map_err(refuse)?;
    claims::map_identity(&mut cel, settings).map_err(refuse)
}

/// The header's `alg` when it is one of [`ALGORITHMS`]; read before anything else so `none`
/// and HMAC are refused as such.
fn check_alg(token: &str) -> Result<Algorithm, Refusal> {
    let header = token.split('.').next().unwrap_or_default();
    let json = decode_part(header).ok_or_else(|| {
        (
            Reason::MalformedToken,
            "header is not base64url JSON".into(),
            None,
        )
    })?;
    let alg = json.get("alg").and_then(Value::as_str).unwrap_or_default();
    if !ALGORITHMS.contains(&alg) {
        return Err((
            Reason::DisallowedAlgorithm,
            format!("alg {alg:?} is not allowed"),
            None,
        ));
    }
    alg.parse::<Algorithm>()
        .map_err(|e| (Reason::DisallowedAlgorithm, format!("alg {alg:?}"), Some(e)))
}

/// The claims when one key of `set` (the one named `kid`, else any fitting `alg`) verifies.
pub(crate) fn verify_signature(
    token: &str,
    alg: Algorithm,
    kid: Option<&str>,
    set: &KeySet,
) -> Result<Map<String, Value>, Refusal> {
    let mut validation = Validation::new(alg);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.leeway = 0;
    let mut tried = 0;
    let mut last = None;
    for key in &set.keys {
        if kid.is_some() && key.kid.as_deref() != kid {
            continue;
        }
        if !key_fits(key, alg) {
            continue;
        }
        tried += 1;
        match jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation) {
            Ok(data) => return Ok(data.claims),
            Err(e) if matches!(e.kind(), ErrorKind::InvalidSignature) => last = Some(e),
            Err(e) => {
                let reason = match e.kind() {
                    ErrorKind::InvalidAlgorithm | ErrorKind::InvalidKeyFormat => {
                        Reason::BadSignature
                    }
                    ErrorKind::Json(_) | ErrorKind::InvalidClaimFormat(_) => {
                        Reason::MalformedClaims
                    }
                    _ => Reason::MalformedToken,
                };
                return Err((reason, "verifying".into(), Some(e)));
            }
        }
    }
    if tried == 0 {
        let kid = kid.unwrap_or("");
        return Err((
            Reason::BadSignature,
            format!("no {alg:?} key (kid {kid:?})"),
            None,
        ));
    }
    Err((
        Reason::BadSignature,
        "signature does not verify".into(),
        last,
    ))
}

/// Whether `key` may verify `alg`: its type, curve and any `alg` it names must agree.
fn key_fits(key: &keys::Key, alg: Algorithm) -> bool {
    use jsonwebtoken::jwk::AlgorithmParameters as P;
    if key.decoding.family() != alg.family() {
        return false;
    }
    if let Some(named) = key.jwk.common.key_algorithm {
        let named = serde_json::to_value(named).ok();
        if named.as_ref().and_then(Value::as_str) != Some(format!("{alg:?}").as_str()) {
            return false;
        }
    }
    match (&key.jwk.algorithm, crypto::curve_of(alg)) {
        (P::EllipticCurve(p), Some(curve)) => p.curve == curve,
        (P::OctetKeyPair(p), Some(curve)) => p.curve == curve,
        (P::RSA(_), None) => true,
        _ => false,
    }
}

/// The unverified `iss` of a compact JWS, or None when `token` is not one; for logging why a
/// token no configured issuer has was refused.
pub fn unverified_issuer(token: &str) -> Option<String> {
    peek_issuer(token)
}

/// The unverified `iss` of a compact JWS, or None when `token` is not one.
fn peek_issuer(token: &str) -> Option<String> {
    let mut parts = token.split('.');
    let (_header, payload, _sig) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    match decode_part(payload)?.get("iss")? {
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

fn decode_part(part: &str) -> Option<Map<String, Value>> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}
