//! The gateway: flags and YAML merged into one config; authentication and authorization; the
//! APIService registry; the availability controller; merged discovery and OpenAPI; backend
//! connections and forwarding; cluster mode; metrics; the audit log; and the request pipeline
//! tying them together (`gateway`). Built on `apigw-core`.

mod apiservices;
pub mod audit;
mod cache;
pub mod expr;
pub mod authn;
pub mod authz;
pub mod availability;
pub mod cluster;
pub mod config;
pub mod discovery;
pub mod gateway;
mod metrics;
pub mod proxy;
pub mod registry;
mod request_info;
