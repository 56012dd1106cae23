//! `/version`: a complete `version.Info`, as kube-apiserver serves it without credentials. With
//! a delegate, the delegate's own answer (the cluster's version, as kube-aggregator in front of
//! kube-apiserver reports it), fetched in the background with its discovery; while the
//! delegate has not answered, or its last answer failed, the gateway's own.
//!
//! The gateway speaks the Kubernetes API of [`KUBE_MAJOR`].[`KUBE_MINOR`], so `gitVersion`
//! carries that release with the gateway's version as build metadata (`v1.33.0+apigw.0.1.0`):
//! kubectl's version-skew check reads the release from it. The build facts come from
//! `build.rs`: the commit and tree state are empty when the build was not made from a git
//! checkout, as Kubernetes reports them then.

use apigw_core::body::{full, Body};
use bytes::Bytes;
use http::{header, HeaderValue, Response};
use serde_json::{json, Value};
use std::sync::OnceLock;

/// The Kubernetes release whose API the gateway serves: the one its Kubernetes types are built
/// for (`k8s-openapi`'s `v1_33` feature in Cargo.toml); keep the two together.
pub const KUBE_MAJOR: &str = "1";
pub const KUBE_MINOR: &str = "33";

/// The gateway's own `version.Info`.
pub fn own() -> &'static Value {
    static INFO: OnceLock<Value> = OnceLock::new();
    INFO.get_or_init(|| {
        json!({
            "major": KUBE_MAJOR,
            "minor": KUBE_MINOR,
            "gitVersion": format!(
                "v{KUBE_MAJOR}.{KUBE_MINOR}.0+apigw.{}",
                env!("CARGO_PKG_VERSION")
            ),
            "gitCommit": env!("APIGW_GIT_COMMIT"),
            "gitTreeState": env!("APIGW_GIT_TREE_STATE"),
            "buildDate": env!("APIGW_BUILD_DATE"),
            // A Rust binary: the toolchain that built it, where Go servers name theirs.
            "goVersion": env!("APIGW_RUSTC_VERSION"),
            "compiler": "rustc",
            "platform": format!("{}/{}", go_os(), go_arch()),
        })
    })
}

/// The response: `delegate`'s answer when there is one, else the gateway's own.
pub fn response(delegate: Option<Bytes>) -> Response<Body> {
    let body = delegate.unwrap_or_else(|| {
        static OWN: OnceLock<Bytes> = OnceLock::new();
        OWN.get_or_init(|| Bytes::from(apigw_core::body::json_text(own())))
            .clone()
    });
    let mut res = Response::new(full(body));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// `GOOS` spelling of the operating system.
fn go_os() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    }
}

/// `GOARCH` spelling of the architecture.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "arm" => "arm",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_of_version_info_is_a_string() {
        let info = own();
        for field in [
            "major",
            "minor",
            "gitVersion",
            "gitCommit",
            "gitTreeState",
            "buildDate",
            "goVersion",
            "compiler",
            "platform",
        ] {
            assert!(info[field].is_string(), "{field}: {info}");
        }
        assert!(
            matches!(info["gitTreeState"].as_str(), Some("" | "clean" | "dirty")),
            "{info}"
        );
        let date = info["buildDate"].as_str().unwrap_or_default();
        assert!(apigw_core::meta::parse_timestamp(date).is_some(), "{date}");
        assert!(info["gitVersion"]
            .as_str()
            .unwrap_or_default()
            .starts_with("v1.33.0+apigw."));
    }
}
