//! apigw: a Kubernetes API aggregation gateway.
//!
//! One TLS front door authenticates clients, keeps a registry of `apiregistration.k8s.io/v1`
//! APIServices, serves merged discovery, and proxies `/apis/<group>/<version>/...` to the addon
//! API server of each APIService with the caller's identity in `X-Remote-*` headers.
//!
//! # Layout
//! - [`config`]: flags and YAML merged into one validated [`config::Config`].
//! - [`tls`]: serving and backend TLS configs, client-certificate verification, reloading certs.
//! - [`audit`]: the audit.k8s.io/v1 event log.
//! - [`authn`]: [`authn::Identity`] and the authenticators (request header, x509, token, anonymous).
//! - [`authz`]: the authorization decision for an authenticated request.
//! - [`reload`]: files (certs, CAs, tokens) that apply when they change.
//! - [`registry`]: the APIService model, validation, manifest directory source, snapshots.
//! - `apiservices`: the read-only `apiregistration.k8s.io/v1` API over the registry.
//! - [`availability`]: the controller checking each APIService's backend.
//! - [`discovery`]: the ordering rules, the `/api`, `/apis`, `/apis/<group>` documents (merged
//!   from the registry, the backends' own aggregated discovery and the delegate's groups), OpenAPI.
//! - [`proxy`]: backend connections (endpoint balancing, ejection, retry, h1/h2 pooling in
//!   `proxy::pool`), identity headers, forwarding and streaming.
//! - `request_info`: a request's kind (ordinary, watch, upgrade, other long-running), decided
//!   once and read by limits, timeout, logging and the proxy.
//! - [`gateway`]: the request pipeline tying the above together.
//! - [`meta`]: API machinery shared by the served APIs: Accept parameters, Table, times.
//! - `metrics`: Prometheus families.
//! - [`server`]: the TLS accept loop and graceful drain.
//! - `apigw-bench` (crates/apigw-bench): the performance harness (load generator,
//!   nginx/haproxy baselines).
//! - [`certs`]: the dev PKI, and `apigw certs inspect`.
//! - [`cluster`]: cluster mode: APIServices, Services and EndpointSlices from a Kubernetes API,
//!   TokenReview, SubjectAccessReview, Lease leader election, status write-back.
//! - [`check`]: `apigw check`, validation without serving.
//! - [`doctor`]: `apigw doctor`, each APIService's request path walked and explained.
//! - [`sample`]: the sample addon API server (`wardle.example.com` flunders).
//! - [`dev`]: the zero-setup `apigw dev` mode.
//! - [`errors`], [`body`]: `kind: Status` errors and the streaming body type.
//! - [`yaml`]: YAML read and written one way (serde-saphyr, as kube-client uses).
//!
//! The modules live in the workspace's crates (`crates/`): `apigw-core` (HTTP and TLS
//! basics), `apigw-gateway` (the gateway), `apigw-sample` (the sample server) and
//! `apigw-bench`. This crate is the `apigw` binary (`check`, `dev`, `doctor`) and re-exports
//! the modules under their old paths.

pub use apigw_core::shutdown_signal;
pub use apigw_core::{body, certs, errors, meta, reload, server, tls, yaml};
pub use apigw_gateway::{
    audit, authn, authz, availability, cluster, config, discovery, gateway, proxy, registry,
};
pub use apigw_sample as sample;
pub mod check;
pub mod dev;
pub mod doctor;
