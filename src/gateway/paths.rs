//! Path hygiene before routing and authorization: a path is decided on exactly as the backend
//! will read it, so dot segments, empty segments and encoded separators (which a backend might
//! decode or normalize into another group, namespace or resource) are refused outright. (Ambiguous
//! body framing is hyper's to refuse: it rejects bad chunking, conflicting lengths and
//! non-chunked Transfer-Encoding, and a request with both Content-Length and
//! Transfer-Encoding is read by the latter alone and its connection closed, per RFC 9112
//! §6.1; the proxy then re-frames every body it forwards.)

use crate::errors::Status;

/// Refuses paths whose meaning could change between the gateway and a backend.
pub fn check(path: &str) -> Result<(), Status> {
    if !path.starts_with('/') {
        return Err(Status::bad_request("the request path must be absolute"));
    }
    let body = path.strip_suffix('/').unwrap_or(path);
    for segment in body.split('/').skip(1) {
        let lower = segment.to_ascii_lowercase();
        let decoded_dot = lower.replace("%2e", ".");
        if segment.is_empty() && !body.is_empty() {
            return Err(Status::bad_request(format!(
                "the request path {path:?} has an empty segment"
            )));
        }
        if decoded_dot == "." || decoded_dot == ".." {
            return Err(Status::bad_request(format!(
                "the request path {path:?} has a dot segment"
            )));
        }
        if lower.contains("%2f")
            || lower.contains("%5c")
            || lower.contains("%00")
            || segment.contains('\\')
        {
            return Err(Status::bad_request(format!(
                "the request path {path:?} has an encoded separator or NUL"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_paths_pass() {
        for p in [
            "/",
            "/apis",
            "/apis/",
            "/apis/g/v1/namespaces/a/things/x",
            "/apis/g/v1/things/a.b..c",
            "/openapi/v3/apis/g/v1",
            "/apis/g/v1/x%20y",
        ] {
            assert!(check(p).is_ok(), "{p}");
        }
    }

    #[test]
    fn tricks_are_refused() {
        for p in [
            "/apis/g/v1/../../other/v1/x",
            "/apis/g/v1/%2e%2e/x",
            "/apis/g/v1/%2E./x",
            "/apis/g/./v1",
            "/apis//g/v1",
            "/apis/g/v1/namespaces/a%2Fb/things",
            "/apis/g/v1/namespaces/a%2fb/things",
            "/apis/g/v1/x%5Cy",
            "/apis/g/v1/x\\y",
            "/apis/g/v1/x%00",
            "apis",
        ] {
            assert_eq!(
                check(p).map_err(|s| s.code()),
                Err(http::StatusCode::BAD_REQUEST),
                "{p}"
            );
        }
    }

    proptest::proptest! {
        /// Whatever is accepted has no segment a backend could read as another path.
        #[test]
        fn accepted_paths_have_no_tricks(segments in proptest::collection::vec("[a-zA-Z0-9.%/_\\\\-]{0,6}", 0..6)) {
            let path = format!("/{}", segments.join("/"));
            if check(&path).is_ok() {
                let inner = path.strip_suffix('/').unwrap_or(&path);
                for seg in inner.split('/').skip(1) {
                    let lower = seg.to_ascii_lowercase().replace("%2e", ".");
                    proptest::prop_assert!(lower != "." && lower != "..", "{}", path);
                    proptest::prop_assert!(!lower.contains("%2f") && !lower.contains("%5c") && !seg.contains('\\'), "{}", path);
                    proptest::prop_assert!(!seg.is_empty() || inner.is_empty(), "{}", path);
                }
            }
        }
    }
}
