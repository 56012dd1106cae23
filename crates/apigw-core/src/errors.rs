//! The one place failures turn into responses: a Kubernetes `kind: Status` JSON body whose
//! `code` equals the HTTP status, as kube-apiserver answers every error. [`Status`] is also the
//! request path's one error type: it keeps the error that caused it and the response-only flags
//! (`Connection: close`, `Retry-After`) that [`render`] honours.

use crate::body::{full, json_text, Body};
use http::{header, Response, StatusCode};
use serde_json::json;
use std::sync::Arc;

/// An error that caused a [`Status`], shared so that `Status` stays `Clone`.
pub type Source = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// A failed request, as a client will see it.
#[derive(Debug, Clone)]
pub struct Status {
    code: StatusCode,
    /// Answer with `Connection: close` (set only for HTTP/1 requests).
    close: bool,
    /// Seconds for `Retry-After`.
    retry_after: Option<u32>,
    reason: &'static str,
    message: String,
    /// The rarely set fields, boxed so that `Result<Response<Body>, Status>` stays small.
    cold: Option<Box<Cold>>,
}

#[derive(Debug, Clone, Default)]
struct Cold {
    /// `details` (kind, name, causes), when the failure has any.
    details: Option<serde_json::Value>,
    source: Option<Source>,
}

impl Status {
    pub fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            close: false,
            retry_after: None,
            reason,
            message: message.into(),
            cold: None,
        }
    }

    fn cold(&mut self) -> &mut Cold {
        self.cold.get_or_insert_with(Box::default)
    }

    /// The same failure with `details` (a StatusDetails object: group, kind, name, causes).
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.cold().details = Some(details);
        self
    }

    /// The same failure, caused by `source` (reported by `Error::source`, not sent to clients).
    pub fn with_source(self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.with_shared_source(Arc::new(source))
    }

    /// As [`Status::with_source`], for a source that is already shared.
    pub fn with_shared_source(mut self, source: Source) -> Self {
        self.cold().source = Some(source);
        self
    }

    /// The same failure, answered with `Connection: close` when the request came over HTTP/1
    /// (HTTP/2 has no such header: a stream fails alone).
    pub fn close_connection(mut self, version: http::Version) -> Self {
        self.close = version < http::Version::HTTP_2;
        self
    }

    /// The same failure, answered with `Retry-After: secs`.
    pub fn with_retry_after(mut self, secs: u32) -> Self {
        self.retry_after = Some(secs);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "Forbidden", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NotFound", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", message)
    }

    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_ACCEPTABLE, "NotAcceptable", message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "Conflict", message)
    }

    /// 413 for a request body over `limit` bytes, as kube-apiserver words it.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            message,
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", message)
    }

    pub fn bad_gateway(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, "BadGateway", message)
    }

    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            message,
        )
    }

    pub fn gateway_timeout(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GATEWAY_TIMEOUT, "Timeout", message)
    }

    pub fn code(&self) -> StatusCode {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the answer closes an HTTP/1 connection.
    pub fn closes(&self) -> bool {
        self.close
    }

    pub fn retry_after(&self) -> Option<u32> {
        self.retry_after
    }

    /// The JSON document kube-apiserver would send for this failure.
    pub fn to_json(&self) -> serde_json::Value {
        let mut doc = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        if let Some(details) = self.cold.as_ref().and_then(|c| c.details.as_ref()) {
            doc["details"] = details.clone();
        }
        doc
    }

    /// The response: the JSON body plus the `Connection: close` and `Retry-After` asked for.
    pub fn into_response(self) -> Response<Body> {
        let mut res = Response::new(full(json_text(&self.to_json())));
        *res.status_mut() = self.code;
        let headers = res.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-cache, private"),
        );
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        if self.close {
            headers.insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
        }
        res
    }
}

/// The one render site: a handler's answer, or its failure as a `kind: Status` response.
pub fn render(result: Result<Response<Body>, Status>) -> Response<Body> {
    result.unwrap_or_else(Status::into_response)
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.code.as_u16(),
            self.reason,
            self.message
        )
    }
}

impl std::error::Error for Status {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let source = self.cold.as_ref()?.source.as_ref()?;
        Some(&**source as &(dyn std::error::Error + 'static))
    }
}

/// A JSON response with status 200.
pub fn json_response(value: &serde_json::Value) -> Response<Body> {
    let mut res = Response::new(full(json_text(value)));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    res
}

/// The whole chain of an error's causes on one line, as Go's wrapped errors print.
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body_of(res: Response<Body>) -> String {
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn stays_small() {
        // Returned by every handler on the request path; the cold fields are boxed.
        assert!(
            std::mem::size_of::<Status>() <= 64,
            "{}",
            std::mem::size_of::<Status>()
        );
    }

    #[tokio::test]
    async fn the_body_is_the_kube_status_document() {
        let res = Status::not_found("the server could not find the requested resource")
            .with_details(json!({"kind": "widgets"}))
            .into_response();
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
        assert_eq!(res.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(res.headers()[header::CACHE_CONTROL], "no-cache, private");
        assert!(res.headers().get(header::CONNECTION).is_none());
        assert!(res.headers().get(header::RETRY_AFTER).is_none());
        assert_eq!(
            body_of(res).await,
            r#"{"apiVersion":"v1","code":404,"details":{"kind":"widgets"},"kind":"Status","message":"the server could not find the requested resource","metadata":{},"reason":"NotFound","status":"Failure"}
"#
        );
    }

    #[tokio::test]
    async fn flags_and_source_do_not_change_the_body() {
        let plain = Status::bad_request("bad host").into_response();
        let io = std::io::Error::other("cause");
        let flagged = Status::bad_request("bad host")
            .with_source(io)
            .close_connection(http::Version::HTTP_11)
            .with_retry_after(1);
        let res = render(Err(flagged));
        assert_eq!(res.headers()[header::CONNECTION], "close");
        assert_eq!(res.headers()[header::RETRY_AFTER], "1");
        assert_eq!(body_of(res).await, body_of(plain).await);
    }

    #[test]
    fn close_is_for_http1_only() {
        let h1 = Status::bad_request("x").close_connection(http::Version::HTTP_10);
        let h2 = Status::bad_request("x").close_connection(http::Version::HTTP_2);
        assert!(h1.closes());
        assert!(!h2.closes());
        assert!(h2
            .into_response()
            .headers()
            .get(header::CONNECTION)
            .is_none());
    }

    #[test]
    fn render_passes_answers_through() {
        let res = render(Ok(json_response(&json!({}))));
        assert_eq!(res.status(), StatusCode::OK);
    }

    #[test]
    fn the_source_is_in_the_chain() {
        let status = Status::service_unavailable("backend down")
            .with_source(std::io::Error::other("connection refused"));
        assert_eq!(
            chain(&status),
            "503 ServiceUnavailable: backend down: connection refused"
        );
        assert!(std::error::Error::source(&status).is_some());
        assert!(std::error::Error::source(&Status::unauthorized()).is_none());
    }

    #[test]
    fn too_large_reads_as_kube_apiserver() {
        let status = Status::too_large(10);
        assert_eq!(status.code(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            status.message(),
            "the request body is larger than the limit of 10 bytes"
        );
    }
}
