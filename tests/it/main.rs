//! apigw's integration tests, one binary (linking the crate graph once instead of once per
//! file). Each module is one area, named for it; `support` holds the shared vocabulary: the
//! PKI, echo and Go backends, the test Kubernetes API, the upstream control plane, and the
//! helpers that run the binary and the real clients.
//!
//! nextest runs every test in its own process, so a test's statics and environment are its own;
//! `.config/nextest.toml` puts the `upstream` module's tests in a group of one at a time.

mod support;

mod authz;
mod cli;
mod cluster;
mod cluster_gateway;
mod connections;
mod deadlines;
mod differential;
mod discovery;
mod doctor;
mod early;
mod fairness;
mod faults;
mod gateway;
mod hardening;
mod interop;
mod interop_clients;
mod interop_connections;
mod jwt;
mod layout;
mod metrics;
mod metrics_apis;
mod ops;
mod overload;
mod pool;
mod real_clients;
mod sample_clients;
mod stream;
mod upstream;
mod user_input;
