//! apigw's own commands besides `serve`, as a library the binary (`src/main.rs`) and the tests
//! call: [`check`] (validation without serving), [`doctor`] (each APIService's request path
//! walked and explained) and [`dev`] (the zero-setup dev mode).
//!
//! The gateway itself lives in the workspace's crates (`crates/`): `apigw-core` (HTTP and TLS
//! basics: the body and `Status` types, the serve loop, TLS, the dev PKI), `apigw-gateway` (the
//! gateway: config, authn, authz, registry, availability, discovery, proxy, the pipeline) and
//! `apigw-sample` (the sample addon server); `apigw-bench` is the performance harness. Callers
//! use those crates by their own names.

pub mod check;
pub mod dev;
pub mod doctor;
