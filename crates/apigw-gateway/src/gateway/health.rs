//! `/livez`, `/readyz` and `/healthz` as kube-apiserver serves them: named checks, each also at
//! `/<endpoint>/<check>`, `?verbose` listing (`[+]ping ok`), `?exclude=<check>`, and on failure
//! a 500 with the list of what failed. Readiness waits for the first valid registry, the
//! first availability round and the first OpenAPI merge, and fails while shutting down.

use apigw_core::body::{full, Body};
use http::{header, HeaderValue, Response, StatusCode};
use std::sync::atomic::{AtomicBool, Ordering};

/// The latches the checks read.
#[derive(Debug, Default)]
pub struct Health {
    pub registry_loaded: AtomicBool,
    pub availability_synced: AtomicBool,
    pub openapi_merged: AtomicBool,
    pub shutting_down: AtomicBool,
}

const LIVEZ: &[&str] = &["ping"];
const READYZ: &[&str] = &[
    "ping",
    "apiservice-registry-loaded",
    "apiservice-status-available-controller",
    "apiservice-openapi-controller",
    "shutdown",
];
const HEALTHZ: &[&str] = &[
    "ping",
    "apiservice-registry-loaded",
    "apiservice-status-available-controller",
];

impl Health {
    fn passes(&self, check: &str) -> bool {
        match check {
            "apiservice-registry-loaded" => self.registry_loaded.load(Ordering::Acquire),
            "apiservice-status-available-controller" => {
                self.availability_synced.load(Ordering::Acquire)
            }
            "apiservice-openapi-controller" => self.openapi_merged.load(Ordering::Acquire),
            "shutdown" => !self.shutting_down.load(Ordering::Acquire),
            _ => true,
        }
    }

    /// Answers a health path, or None when `path` is not one.
    pub fn respond(&self, path: &str, query: Option<&str>) -> Option<Response<Body>> {
        let path = path.trim_end_matches('/');
        let (endpoint, single) = match path
            .split_once('/')
            .map(|(_, p)| p.split_once('/').unwrap_or((p, "")))
        {
            Some((e, c)) => (e, c),
            None => return None,
        };
        let all = match endpoint {
            "livez" => LIVEZ,
            "readyz" => READYZ,
            "healthz" => HEALTHZ,
            _ => return None,
        };
        let params: Vec<(&str, &str)> = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
            .collect();
        let verbose = params.iter().any(|(k, _)| *k == "verbose");
        let excluded: Vec<&str> = params
            .iter()
            .filter(|(k, _)| *k == "exclude")
            .map(|(_, v)| *v)
            .collect();
        if !single.is_empty() {
            if !all.contains(&single) {
                return None;
            }
            return Some(if self.passes(single) {
                text(StatusCode::OK, "ok".into())
            } else {
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("internal server error: {single} check failed\n"),
                )
            });
        }
        let mut out = String::new();
        let mut failed = false;
        for check in all {
            if excluded.contains(check) {
                out.push_str(&format!("[+]{check} excluded: ok\n"));
            } else if self.passes(check) {
                out.push_str(&format!("[+]{check} ok\n"));
            } else {
                failed = true;
                out.push_str(&format!("[-]{check} failed: reason withheld\n"));
            }
        }
        Some(if failed {
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{out}{endpoint} check failed\n"),
            )
        } else if verbose {
            text(StatusCode::OK, format!("{out}{endpoint} check passed\n"))
        } else {
            text(StatusCode::OK, "ok".into())
        })
    }
}

fn text(code: StatusCode, body: String) -> Response<Body> {
    let mut res = Response::new(full(body));
    *res.status_mut() = code;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body(res: Response<Body>) -> (u16, String) {
        let code = res.status().as_u16();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        (code, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn verbose_lists_checks_and_failures_are_500() {
        let h = Health::default();
        assert_eq!(
            body(h.respond("/livez", None).unwrap()).await,
            (200, "ok".into())
        );
        let (code, text) = body(h.respond("/readyz", Some("verbose")).unwrap()).await;
        assert_eq!(code, 500);
        assert!(
            text.contains("[+]ping ok\n[-]apiservice-registry-loaded failed: reason withheld\n"),
            "{text}"
        );
        assert!(text.ends_with("readyz check failed\n"), "{text}");
        h.registry_loaded.store(true, Ordering::Release);
        h.availability_synced.store(true, Ordering::Release);
        h.openapi_merged.store(true, Ordering::Release);
        let (code, text) = body(h.respond("/readyz", Some("verbose")).unwrap()).await;
        assert_eq!(code, 200);
        assert!(
            text.ends_with("[+]shutdown ok\nreadyz check passed\n"),
            "{text}"
        );
        h.shutting_down.store(true, Ordering::Release);
        assert_eq!(
            body(h.respond("/readyz/shutdown", None).unwrap()).await.0,
            500
        );
        assert_eq!(
            body(h.respond("/readyz", Some("exclude=shutdown")).unwrap())
                .await
                .0,
            200
        );
        assert_eq!(body(h.respond("/livez", None).unwrap()).await.0, 200);
        assert!(h.respond("/readyz/nope", None).is_none());
        assert!(h.respond("/apis", None).is_none());
    }
}
