//! The authentication configuration: `AuthenticationConfiguration::parse` (YAML or JSON) and
//! `validate` (every field as kube-apiserver checks it, CEL expressions compiled), then the
//! validated issuers applied to a few claim sets, as tokens would reach them.
//! Input: the configuration file's text.
//!
//! Checked: nothing panics, in parsing, validation, compiling or evaluating the expressions; a
//! refused file names at least one problem with its field; every accepted issuer has an https
//! URL (the scheme in any case, as kube-apiserver takes it) and an audience, and what it accepts maps to a non-empty user.
#![no_main]

mod common;

use apigw_authn::jwt::AuthenticationConfiguration;
use apigw_gateway::fuzzing::jwt_claims_identity;
use serde_json::{json, Map, Value};

const NOW: f64 = 1_800_000_000.0;

libfuzzer_sys::fuzz_target!(init: common::report_stack_overflows(), |data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = AuthenticationConfiguration::parse(text) else {
        return;
    };
    let _ = config.anonymous_settings();
    let issuers = match config.validate() {
        Ok(issuers) => issuers,
        Err(e) => {
            assert!(!e.problems.is_empty(), "refused without a problem");
            let _ = e.to_string();
            return;
        }
    };
    for settings in &issuers {
        // The scheme in any case, as Go's url.Parse lowercases it before kube checks it.
        assert!(
            settings
                .url
                .get(..8)
                .is_some_and(|s| s.eq_ignore_ascii_case("https://")),
            "issuer {:?}",
            settings.url
        );
        assert!(!settings.audiences.is_empty());
        for claims in claim_sets(&settings.url, settings.audiences[0].as_str()) {
            if let Ok(id) = jwt_claims_identity(settings, &claims, NOW) {
                assert!(!id.user.is_empty(), "an empty username from {claims:?}");
            }
        }
    }
});

fn claim_sets(iss: &str, aud: &str) -> Vec<Map<String, Value>> {
    let exp = NOW + 600.0;
    [
        json!({"iss": iss, "aud": aud, "exp": exp, "sub": "jane", "email": "jane@example.com",
            "email_verified": true, "groups": ["dev", "ops"], "uid": "u-1", "hd": "example.com"}),
        json!({"iss": iss, "aud": [aud, "x"], "exp": exp, "nbf": NOW, "sub": "system:serviceaccount:ns:sa",
            "kubernetes.io": {"namespace": "ns", "serviceaccount": {"name": "sa", "uid": "u-2"}}}),
        json!({"iss": iss, "aud": aud, "exp": exp, "sub": "", "groups": "one", "email": 7}),
    ]
    .into_iter()
    .filter_map(|v| match v {
        Value::Object(m) => Some(m),
        _ => None,
    })
    .collect()
}
