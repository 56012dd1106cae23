//! Benchmark-only endpoints of the sample server, used by `apigw-bench`: fixed-size payloads
//! without store or serialisation cost, so the measurement is of the path in front of the
//! backend rather than of the backend. Not part of the wardle API; discovery does not list them.
//!
//! - `GET /apis/wardle.example.com/v1alpha1/bench/payload?bytes=N`: a JSON document of exactly
//!   `N` bytes (64 ..= 64 MiB, default 1024), built once per size and kept.
//! - `GET /apis/wardle.example.com/v1alpha1/bench/list?bytes=N`: a JSON list of exactly `N` bytes
//!   (up to 64 GiB, default 1 GiB), generated while it streams ([`super::bench_list`]).
//! - `POST /apis/wardle.example.com/v1alpha1/bench/sink`: reads the whole body and answers with
//!   its length.
//! - `GET /apis/<name>.bench.example.com/<version>`: an APIResourceList, so that the many
//!   APIServices of the discovery benchmark are available and contribute their resources.

use apigw_core::body::{full, Body};
use apigw_core::errors::{json_response, Status};
use apigw_core::server::RequestBody;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response};
use http_body_util::BodyExt;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

const PAYLOAD: &str = "/apis/wardle.example.com/v1alpha1/bench/payload";
const SINK: &str = "/apis/wardle.example.com/v1alpha1/bench/sink";
const LIST: &str = "/apis/wardle.example.com/v1alpha1/bench/list";
const MAX_BYTES: usize = 64 << 20;
const MIN_BYTES: usize = 64;

/// Groups whose discovery the sample server answers for the benchmark.
const GROUP_SUFFIX: &str = ".bench.example.com";

/// True when `path` is one of the benchmark endpoints.
pub(super) fn claims(path: &str) -> bool {
    path == PAYLOAD || path == SINK || path == LIST || group_version(path).is_some()
}

/// `(group, version)` of `/apis/<group>/<version>` for a benchmark group.
fn group_version(path: &str) -> Option<(&str, &str)> {
    let (group, version) = path.strip_prefix("/apis/")?.split_once('/')?;
    (group.ends_with(GROUP_SUFFIX) && !version.is_empty() && !version.contains('/'))
        .then_some((group, version))
}

/// The APIResourceList of a benchmark group version: one resource with a status subresource,
/// about the size of a typical addon's.
pub fn resource_list(group: &str, version: &str) -> serde_json::Value {
    let verbs = [
        "create", "delete", "get", "list", "patch", "update", "watch",
    ];
    serde_json::json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{group}/{version}"),
        "resources": [
            {"name": "widgets", "singularName": "widget", "namespaced": true, "kind": "Widget",
             "verbs": verbs, "shortNames": ["wd"], "categories": ["all"]},
            {"name": "widgets/status", "singularName": "", "namespaced": true, "kind": "Widget",
             "verbs": ["get", "patch", "update"]},
        ],
    })
}

/// Answers a request [`claims`] accepted.
pub(super) async fn serve(req: Request<RequestBody>) -> Response<Body> {
    if let Some((group, version)) = group_version(req.uri().path()) {
        return json_response(&resource_list(group, version));
    }
    match (req.method(), req.uri().path()) {
        (&Method::GET, PAYLOAD) => match requested_size(req.uri().query()) {
            Ok(n) => payload_response(n),
            Err(status) => status.into_response(),
        },
        (&Method::GET, LIST) => match list_size(req.uri().query()) {
            Ok(n) => {
                let mut res = Response::new(apigw_core::body::stream(
                    super::bench_list::ListBody::new(n),
                ));
                res.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                res
            }
            Err(status) => status.into_response(),
        },
        (&Method::POST, SINK) => match req.into_body().collect().await {
            Ok(body) => {
                let n = body.to_bytes().len();
                json_response(&serde_json::json!({"kind": "BenchSink", "bytes": n}))
            }
            Err(e) => Status::bad_request(format!("reading the request body: {e}")).into_response(),
        },
        (method, _) => {
            Status::method_not_allowed(format!("{method} is not supported here")).into_response()
        }
    }
}

fn requested_size(query: Option<&str>) -> Result<usize, Status> {
    let Some(raw) = query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("bytes="))
    else {
        return Ok(1024);
    };
    let n: usize = raw
        .parse()
        .map_err(|_| Status::bad_request(format!("invalid bytes {raw:?}: not a whole number")))?;
    if !(MIN_BYTES..=MAX_BYTES).contains(&n) {
        return Err(Status::bad_request(format!(
            "bytes {n} out of range {MIN_BYTES}..={MAX_BYTES}"
        )));
    }
    Ok(n)
}

/// `bytes=N` of the big list: [`super::bench_list::MIN_BYTES`] ..= 64 GiB, default 1 GiB.
fn list_size(query: Option<&str>) -> Result<u64, Status> {
    use super::bench_list::{MAX_BYTES, MIN_BYTES};
    let Some(raw) = query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("bytes="))
    else {
        return Ok(1 << 30);
    };
    let n: u64 = raw
        .parse()
        .map_err(|_| Status::bad_request(format!("invalid bytes {raw:?}: not a whole number")))?;
    if !(MIN_BYTES..=MAX_BYTES).contains(&n) {
        return Err(Status::bad_request(format!(
            "bytes {n} out of range {MIN_BYTES}..={MAX_BYTES}"
        )));
    }
    Ok(n)
}

fn payload_response(n: usize) -> Response<Body> {
    let mut res = Response::new(full(payload(n)));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// The `n`-byte document, from the cache when built before.
fn payload(n: usize) -> Bytes {
    static CACHE: OnceLock<Mutex<HashMap<usize, Bytes>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
    map.entry(n).or_insert_with(|| build(n)).clone()
}

/// `{"kind":"BenchPayload","data":"xxx…"}` padded to exactly `n` bytes.
fn build(n: usize) -> Bytes {
    const HEAD: &str = r#"{"kind":"BenchPayload","data":""#;
    const TAIL: &str = r#""}"#;
    let mut out = String::with_capacity(n);
    out.push_str(HEAD);
    let pad = n.saturating_sub(HEAD.len() + TAIL.len());
    out.extend(std::iter::repeat_n('x', pad));
    out.push_str(TAIL);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_has_the_exact_size_and_is_json() {
        for n in [MIN_BYTES, 1024, 10 << 20] {
            let p = build(n);
            assert_eq!(p.len(), n);
            assert!(serde_json::from_slice::<serde_json::Value>(&p).is_ok());
        }
    }

    #[test]
    fn only_bench_groups_are_claimed() {
        assert!(claims("/apis/g001.bench.example.com/v1"));
        assert!(!claims("/apis/g001.bench.example.com/v1/widgets"));
        assert!(!claims("/apis/wardle.example.com/v1alpha1"));
        assert!(claims(PAYLOAD) && claims(SINK) && claims(LIST));
    }

    #[test]
    fn size_comes_from_the_query() {
        assert_eq!(requested_size(None).ok(), Some(1024));
        assert_eq!(requested_size(Some("a=1&bytes=2048")).ok(), Some(2048));
        assert!(requested_size(Some("bytes=3")).is_err());
        assert!(requested_size(Some("bytes=x")).is_err());
        assert_eq!(list_size(None).ok(), Some(1 << 30));
        assert_eq!(list_size(Some("bytes=4096")).ok(), Some(4096));
        assert!(list_size(Some("bytes=3")).is_err());
        assert!(list_size(Some("bytes=99999999999999")).is_err());
    }
}
