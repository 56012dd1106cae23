//! Path hygiene before routing and authorization: a path is decided on exactly as the backend
//! will read it, so dot segments, empty segments and encoded separators (which a backend might
//! decode or normalize into another group, namespace or resource) are refused outright. (Ambiguous
//! body framing is hyper's to refuse: it rejects bad chunking, conflicting lengths and
//! non-chunked Transfer-Encoding, and a request with both Content-Length and
//! Transfer-Encoding is read by the latter alone and its connection closed, per RFC 9112
//! §6.1; the proxy then re-frames every body it forwards.)

use apigw_core::errors::Status;

/// Refuses paths whose meaning could change between the gateway and a backend.
///
/// One pass over the bytes, without allocating unless refusing: this runs on every request.
pub fn check(path: &str) -> Result<(), Status> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(Status::bad_request("the request path must be absolute"));
    }
    // One trailing slash is allowed; `/` itself has no segment.
    let body = bytes.strip_suffix(b"/").unwrap_or(bytes);
    let Some(rest) = body.get(1..) else {
        return Ok(());
    };
    for segment in rest.split(|&b| b == b'/') {
        if segment.is_empty() {
            return Err(Status::bad_request(format!(
                "the request path {path:?} has an empty segment"
            )));
        }
        if is_dot_segment(segment) {
            return Err(Status::bad_request(format!(
                "the request path {path:?} has a dot segment"
            )));
        }
        if has_encoded_separator(segment) {
            return Err(Status::bad_request(format!(
                "the request path {path:?} has an encoded separator or NUL"
            )));
        }
    }
    Ok(())
}

/// `.` or `..`, each dot literal or `%2e` in either case.
fn is_dot_segment(mut segment: &[u8]) -> bool {
    let mut dots = 0;
    while !segment.is_empty() {
        segment = match segment {
            [b'.', tail @ ..] => tail,
            [b'%', b'2', e, tail @ ..] if e.eq_ignore_ascii_case(&b'e') => tail,
            _ => return false,
        };
        dots += 1;
        if dots > 2 {
            return false;
        }
    }
    dots > 0
}

/// A backslash, or `%2f`, `%5c` or `%00` in either case.
fn has_encoded_separator(segment: &[u8]) -> bool {
    segment.iter().enumerate().any(|(i, &b)| {
        b == b'\\'
            || (b == b'%'
                && matches!(
                    segment.get(i + 1..i + 3),
                    Some([x, y]) if matches!(
                        (x, y.to_ascii_lowercase()),
                        (b'2', b'f') | (b'5', b'c') | (b'0', b'0')
                    )
                ))
    })
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

    /// The allocating implementation the byte scan replaced, kept as the reference.
    fn check_old(path: &str) -> Result<(), Status> {
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

    /// A segment of the pieces the checks look for (dots, encoded dots and separators, parts of
    /// them) and of plain text.
    fn segment() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            4 => Just("."),
            2 => Just("%2e"),
            2 => Just("%2E"),
            1 => Just("%2f"),
            1 => Just("%2F"),
            1 => Just("%5c"),
            1 => Just("%5C"),
            1 => Just("%00"),
            1 => Just("%0"),
            1 => Just("%2"),
            1 => Just("%"),
            1 => Just("\\"),
            1 => Just("e"),
            1 => Just("é"),
            2 => Just("a"),
        ];
        proptest::collection::vec(piece, 0..5).prop_map(|pieces| pieces.concat())
    }

    fn outcome(r: Result<(), Status>) -> Result<(), (http::StatusCode, String)> {
        r.map_err(|s| (s.code(), s.message().to_string()))
    }

    proptest::proptest! {
        /// The byte scan decides, and words its refusal, exactly as the old implementation.
        #[test]
        fn byte_scan_matches_the_old_check(
            lead in proptest::bool::weighted(0.9),
            segments in proptest::collection::vec(segment(), 0..5),
            trail in proptest::bool::ANY,
        ) {
            let path = format!("{}{}{}", if lead { "/" } else { "" }, segments.join("/"), if trail { "/" } else { "" });
            proptest::prop_assert_eq!(outcome(check(&path)), outcome(check_old(&path)), "{:?}", path);
        }

        /// Also on arbitrary text.
        #[test]
        fn byte_scan_matches_the_old_check_on_any_text(path in "\\PC{0,24}") {
            proptest::prop_assert_eq!(outcome(check(&path)), outcome(check_old(&path)), "{:?}", path);
        }

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
