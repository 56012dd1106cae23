//! The gateway: flags and YAML merged into one config; authentication and authorization; the
//! APIService registry; the availability controller; merged discovery and OpenAPI; backend
//! connections and forwarding; cluster mode; metrics; the audit log; and the request pipeline
//! tying them together (`gateway`). Built on `apigw-core`.

pub mod audit;
pub mod cluster;
pub mod config;
#[doc(hidden)]
pub mod fuzzing;
pub mod gateway;
pub mod limits;
mod metrics;
