//! The gateway: flags and YAML merged into one config; authentication and authorization; the
//! APIService registry; the availability controller; merged discovery and OpenAPI; backend
//! connections and forwarding; cluster mode; metrics; the audit log; and the request pipeline
//! tying them together (`gateway`). Built on `apigw-core`.

mod apiservices;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod availability;
mod cache;
pub mod cluster;
pub mod config;
pub mod discovery;
pub mod expr;
pub mod flowcontrol;
#[doc(hidden)]
pub mod fuzzing;
pub mod gateway;
mod metrics;
pub mod proxy;
pub mod registry;
mod request_info;
