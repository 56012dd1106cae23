//! Entry points for the fuzz targets (`fuzz/`, see docs/fuzzing.md): the crate-private
//! functions that read bytes a peer controls, reachable from outside. Not an API: hidden from
//! the docs, and free to change with the code it exposes.

use apigw_core::errors::Status;
use http::{HeaderValue, Request};
use serde_json::Value;

pub use apigw_authn::fuzzing::{jwt_claims_identity, jwt_crypto, jwt_verify};
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
