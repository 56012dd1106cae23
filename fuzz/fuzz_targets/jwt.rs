//! JWTs: what a configured issuer does with a bearer token (`authn::jwt`): the unverified
//! `iss` that picks the issuer, the header's `alg` and `kid`, the signature against the
//! issuer's keys, then `iss`, `exp`/`nbf`, audience, claim rules (CEL), the claim mappings
//! (CEL) and user rules; and the issuer's JWKS document (`KeySet::parse`). The issuers are
//! two of the test suite's (tests/it/jwt.rs), the key the tests' RSA key
//! (crates/apigw-authn/src/jwt/testdata), so seeds signed with it verify.
//!
//! Input: a compact JWS; or `claims` and a line break, then claims as JSON (as if signed); or
//! `jwks` and a line break, then a JWKS document.
//!
//! Checked: nothing panics; an accepted token or claims set came from the issuer it names, for
//! an audience it accepts, unexpired, and maps to a non-empty user with the configured
//! prefixes.
#![no_main]

mod common;

use apigw_authn::jwt::{AuthenticationConfiguration, IssuerSettings, KeySet};
use apigw_gateway::fuzzing::{jwt_claims_identity, jwt_crypto, jwt_verify};
use apigw_request::Identity;
use serde_json::{json, Map, Value};
use std::sync::OnceLock;

/// Fixed, so runs repeat: 2027-01-15.
const NOW: f64 = 1_800_000_000.0;

const CONFIG: &str = r#"apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: https://dex.example
    audiences: [apigw-client]
  claimValidationRules:
  - claim: hd
    requiredValue: example.com
  claimMappings:
    username: {claim: email, prefix: "oidc:"}
    groups: {claim: groups, prefix: "oidc:"}
- issuer:
    url: https://sa.example
    audiences: [apigw, other]
    audienceMatchPolicy: MatchAny
  claimValidationRules:
  - expression: 'claims.sub.startsWith("system:serviceaccount:")'
    message: not a service account
  claimMappings:
    username: {claim: sub, prefix: ""}
    uid: {expression: 'claims["kubernetes.io"].serviceaccount.uid'}
    groups:
      expression: '["system:serviceaccounts", "system:serviceaccounts:" + claims["kubernetes.io"].namespace]'
    extra:
    - key: example.com/team
      valueExpression: 'has(claims.team) ? claims.team : "none"'
  userValidationRules:
  - expression: "!user.username.startsWith('system:node:')"
    message: no nodes
"#;

struct Setup {
    issuers: Vec<IssuerSettings>,
    keys: KeySet,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        jwt_crypto().expect("crypto provider");
        let config = AuthenticationConfiguration::parse(CONFIG).expect("the config parses");
        let issuers = config.validate().expect("the config is valid");
        let jwks = json!({"keys": [{"kty": "RSA", "kid": "rsa", "use": "sig", "alg": "RS256",
            "n": "39dYohFu3cfGhXSIMaohIMNGkVaufkhebTFCEQvMtfq4-42bpvkNZfPAkoVG_X_eq1bu4pvrcW7lEWa4noKyzEqkZEy5W4ZEE5eYietKLENfejwg-t4QKvrgJfIuxlFP7rphnMHqFA5NNQY8penE0R0jm_JwIc32Zvlj7tf2t3yZgEY458H8vpu3H14npH2-kJ-p1E3TJWrGT_DUcIoPSZIdLY6Bww8O-xYSvI5Nm6U5wjB_4dG_CPtVclfkynoV7zTZmxPAHdQnsVx26ovMbvOlaXxC89iEXgvuRoMhPT-jO29o5YvikUyBlTS8htbzD_qzEQDfDdCUBVDSdI_xPQ", "e": "AQAB"}]});
        let keys = KeySet::parse(&jwks);
        assert_eq!(keys.keys.len(), 1, "the test key parses");
        Setup { issuers, keys }
    })
}

libfuzzer_sys::fuzz_target!(init: common::report_stack_overflows(), |data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let setup = setup();
    if let Some(claims) = text.strip_prefix("claims\n") {
        let Ok(Value::Object(claims)) = serde_json::from_str::<Value>(claims) else {
            return;
        };
        for settings in &setup.issuers {
            if let Ok(id) = jwt_claims_identity(settings, &claims, NOW) {
                accepted(settings, &claims, &id);
            }
        }
    } else if let Some(doc) = text.strip_prefix("jwks\n") {
        let Ok(doc) = serde_json::from_str::<Value>(doc) else {
            return;
        };
        let set = KeySet::parse(&doc);
        for key in &set.keys {
            if let Some(kid) = &key.kid {
                assert!(set.has_kid(kid));
            }
        }
    } else {
        let issuer = apigw_authn::jwt::unverified_issuer(text);
        for settings in &setup.issuers {
            if let Ok(id) = jwt_verify(text, &setup.keys, settings, NOW) {
                assert_eq!(issuer.as_deref(), Some(settings.url.as_str()));
                if let Some(claims) = payload(text) {
                    accepted(settings, &claims, &id);
                }
            }
        }
    }
});

/// What must hold of claims an issuer accepted.
fn accepted(settings: &IssuerSettings, claims: &Map<String, Value>, id: &Identity) {
    assert_eq!(
        claims.get("iss").and_then(Value::as_str),
        Some(settings.url.as_str())
    );
    let exp = claims.get("exp").and_then(Value::as_f64);
    assert!(
        exp.is_some_and(|exp| exp > NOW),
        "accepted without a future exp: {exp:?}"
    );
    let aud_ok = |a: &Value| {
        a.as_str()
            .is_some_and(|a| settings.audiences.iter().any(|s| s == a))
    };
    let aud = claims.get("aud");
    assert!(
        aud.is_some_and(|a| aud_ok(a) || a.as_array().is_some_and(|l| l.iter().any(aud_ok))),
        "accepted for audience {aud:?}"
    );
    assert!(!id.user.is_empty(), "an empty username");
    if settings.url == "https://dex.example" {
        assert!(id.user.starts_with("oidc:"));
        assert!(id.groups.iter().all(|g| g.starts_with("oidc:")));
    } else {
        assert!(id.groups.iter().any(|g| g == "system:serviceaccounts"));
        assert!(!id.user.starts_with("system:node:"));
    }
}

/// The payload of a compact JWS.
fn payload(token: &str) -> Option<Map<String, Value>> {
    use base64::Engine;
    let part = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}
