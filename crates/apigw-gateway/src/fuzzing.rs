//! Entry points for the fuzz targets (`fuzz/`, see docs/fuzzing.md): the crate-private
//! functions that read bytes a peer controls, reachable from outside. Not an API: hidden from
//! the docs, and free to change with the code it exposes.

use crate::authn::jwt::{IssuerSettings, KeySet};
use apigw_core::errors::Status;
use apigw_request::Identity;
use http::{HeaderValue, Request};
use serde_json::{Map, Value};

pub use apigw_request::{RequestInfo, RequestKind};

/// The request's validated host, as the pipeline checks it first ([`crate::gateway`]).
pub fn host_of<B>(req: &Request<B>) -> Result<Option<HeaderValue>, Status> {
    crate::gateway::host::of(req)
}

/// The path check before routing and authorization.
pub fn check_path(path: &str) -> Result<(), Status> {
    crate::gateway::paths::check(path)
}

/// The `spec` of a review sent as protobuf (`k8s\0` and a `runtime.Unknown`).
pub fn review_spec(resource: &str, body: &[u8]) -> Result<Value, String> {
    crate::gateway::protobuf::review_spec(resource, body).map_err(|e| e.to_string())
}

/// Installs what [`jwt_verify`] and [`KeySet::parse`] verify with; call once first.
pub fn jwt_crypto() -> Result<(), String> {
    crate::authn::jwt::install_crypto().map_err(|e| e.to_string())
}

/// What an issuer does with a bearer token once it has the keys `set`: the header's `alg` and
/// `kid`, the signature, then the claims checks and mappings at `now`.
pub fn jwt_verify(
    token: &str,
    set: &KeySet,
    settings: &IssuerSettings,
    now: f64,
) -> Result<Identity, String> {
    let refused = |(reason, detail, _): crate::authn::jwt::Refusal| format!("{reason}: {detail}");
    let (alg, kid) = crate::authn::jwt::token_header(token).map_err(refused)?;
    let claims =
        crate::authn::jwt::verify_signature(token, alg, kid.as_deref(), set).map_err(refused)?;
    crate::authn::jwt::claims_identity(settings, &claims, now).map_err(refused)
}

/// The checks and mappings of claims whose signature verified.
pub fn jwt_claims_identity(
    settings: &IssuerSettings,
    claims: &Map<String, Value>,
    now: f64,
) -> Result<Identity, String> {
    crate::authn::jwt::claims_identity(settings, claims, now)
        .map_err(|(reason, detail, _)| format!("{reason}: {detail}"))
}
