//! The one HTTP body type the gateway passes around, and small constructors for it.
//!
//! Requests and responses stream: a proxied body is the peer's body boxed, never collected.

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full};

/// Any error a body may yield on its way through the gateway.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A streaming body of bytes.
pub type Body = BoxBody<Bytes, BoxError>;

/// A body holding `bytes` in one piece.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A JSON document as the gateway writes it: compact, ending in a newline as kube-apiserver's
/// serializer ends each object (so `curl` leaves the prompt on a line of its own).
pub fn json_text(value: &serde_json::Value) -> String {
    let mut text = value.to_string();
    text.push('\n');
    text
}

/// A body with no bytes.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// Boxes any streaming body (a peer's `Incoming`, for one) without buffering it.
pub fn stream<B>(body: B) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed()
}
