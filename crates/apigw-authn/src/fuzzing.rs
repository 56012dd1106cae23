//! Entry points for the JWT fuzz targets (`fuzz/`, see docs/fuzzing.md): the crate-private
//! steps that read a token a peer controls, reachable from outside. Not an API: hidden from
//! the docs, and free to change with the code it exposes. The gateway's `fuzzing` module
//! re-exports them beside its own.

use crate::jwt::{IssuerSettings, KeySet};
use apigw_request::Identity;
use serde_json::{Map, Value};

/// Installs what [`jwt_verify`] and [`KeySet::parse`] verify with; call once first.
pub fn jwt_crypto() -> Result<(), String> {
    crate::jwt::install_crypto().map_err(|e| e.to_string())
}

/// What an issuer does with a bearer token once it has the keys `set`: the header's `alg` and
/// `kid`, the signature, then the claims checks and mappings at `now`.
pub fn jwt_verify(
    token: &str,
    set: &KeySet,
    settings: &IssuerSettings,
    now: f64,
) -> Result<Identity, String> {
    let refused = |(reason, detail, _): crate::jwt::Refusal| format!("{reason}: {detail}");
    let (alg, kid) = crate::jwt::token_header(token).map_err(refused)?;
    let claims = crate::jwt::verify_signature(token, alg, kid.as_deref(), set).map_err(refused)?;
    crate::jwt::claims_identity(settings, &claims, now).map_err(refused)
}

/// The checks and mappings of claims whose signature verified.
pub fn jwt_claims_identity(
    settings: &IssuerSettings,
    claims: &Map<String, Value>,
    now: f64,
) -> Result<Identity, String> {
    crate::jwt::claims_identity(settings, claims, now)
        .map_err(|(reason, detail, _)| format!("{reason}: {detail}"))
}
