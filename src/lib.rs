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
#[cfg(feature = "dev")]
pub mod dev;
pub mod doctor;

/// `apigw dev`'s configuration and PKI, relative to the repository's root where it runs;
/// `check` and `doctor` given nothing use them too.
pub const DEV_CONFIG: &str = "config/dev.yaml";
pub const DEV_CERTS: &str = "certs-dev";

/// The log target of lines meant to be copied (the commands `apigw dev` prints to try it): the
/// text log prints their message alone, without time or level, so each pastes into a shell.
pub const COMMANDS_TARGET: &str = "apigw::commands";
