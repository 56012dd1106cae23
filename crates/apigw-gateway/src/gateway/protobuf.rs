//! The few Kubernetes protobuf messages the gateway reads itself: kubectl sends its review
//! requests (whoami, can-i) as `application/vnd.kubernetes.protobuf`, a 4-byte `k8s\0` magic
//! followed by a `runtime.Unknown` envelope. Only the spec fields the reviews use are decoded;
//! answers are JSON, which the same clients accept.

use apigw_core::errors::Status;
use prost::Message;
use serde_json::{json, Value};

const MAGIC: &[u8] = b"k8s\0";

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(bytes = "vec", tag = "2")]
    raw: Vec<u8>,
}

/// SelfSubjectAccessReview and SelfSubjectRulesReview share this shape: metadata (1), spec (2).
#[derive(Clone, PartialEq, Message)]
struct Review {
    #[prost(message, optional, tag = "2")]
    spec: Option<Spec>,
}

/// The union of both review specs: access review fields 1 and 2 are messages; a rules review's
/// field 1 is its namespace, decoded from the same bytes as a string when it is one.
#[derive(Clone, PartialEq, Message)]
struct Spec {
    #[prost(message, optional, tag = "1")]
    resource_attributes: Option<ResourceAttributes>,
    #[prost(message, optional, tag = "2")]
    non_resource_attributes: Option<NonResourceAttributes>,
}

#[derive(Clone, PartialEq, Message)]
struct RulesSpec {
    #[prost(string, optional, tag = "1")]
    namespace: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct RulesReview {
    #[prost(message, optional, tag = "2")]
    spec: Option<RulesSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct ResourceAttributes {
    #[prost(string, optional, tag = "1")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "2")]
    verb: Option<String>,
    #[prost(string, optional, tag = "3")]
    group: Option<String>,
    #[prost(string, optional, tag = "4")]
    version: Option<String>,
    #[prost(string, optional, tag = "5")]
    resource: Option<String>,
    #[prost(string, optional, tag = "6")]
    subresource: Option<String>,
    #[prost(string, optional, tag = "7")]
    name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct NonResourceAttributes {
    #[prost(string, optional, tag = "1")]
    path: Option<String>,
    #[prost(string, optional, tag = "2")]
    verb: Option<String>,
}

/// Why a protobuf review body could not be read; answered with 400.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("protobuf body without the k8s magic prefix")]
    NoMagic,
    #[error("protobuf envelope: {0}")]
    Envelope(#[source] prost::DecodeError),
    #[error("{resource}: {source}")]
    Review {
        resource: String,
        #[source]
        source: prost::DecodeError,
    },
}

impl From<DecodeError> for Status {
    fn from(e: DecodeError) -> Self {
        Status::bad_request(e.to_string()).with_source(e)
    }
}

fn raw(body: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let envelope = body.strip_prefix(MAGIC).ok_or(DecodeError::NoMagic)?;
    Ok(Unknown::decode(envelope)
        .map_err(DecodeError::Envelope)?
        .raw)
}

/// The `spec` of a review sent as protobuf, as the JSON the review handlers read.
pub fn review_spec(resource: &str, body: &[u8]) -> Result<Value, DecodeError> {
    let review_error = |source| DecodeError::Review {
        resource: resource.to_string(),
        source,
    };
    let raw = raw(body)?;
    if resource == "selfsubjectrulesreviews" {
        let review = RulesReview::decode(raw.as_slice()).map_err(review_error)?;
        return Ok(json!({"namespace": review.spec.and_then(|s| s.namespace).unwrap_or_default()}));
    }
    if resource != "selfsubjectaccessreviews" {
        return Ok(Value::Null);
    }
    let spec = Review::decode(raw.as_slice())
        .map_err(review_error)?
        .spec
        .unwrap_or_default();
    let mut out = json!({});
    if let Some(r) = spec.resource_attributes {
        out["resourceAttributes"] = json!({
            "namespace": r.namespace, "verb": r.verb, "group": r.group, "version": r.version,
            "resource": r.resource, "subresource": r.subresource, "name": r.name,
        });
    }
    if let Some(n) = spec.non_resource_attributes {
        out["nonResourceAttributes"] = json!({"path": n.path, "verb": n.verb});
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_an_access_review() {
        let attrs = ResourceAttributes {
            namespace: Some("x".into()),
            verb: Some("list".into()),
            group: Some("a.example.com".into()),
            resource: Some("things".into()),
            ..Default::default()
        };
        let review = Review {
            spec: Some(Spec {
                resource_attributes: Some(attrs),
                non_resource_attributes: None,
            }),
        };
        let mut body = MAGIC.to_vec();
        body.extend(
            Unknown {
                raw: review.encode_to_vec(),
            }
            .encode_to_vec(),
        );
        let spec = review_spec("selfsubjectaccessreviews", &body).unwrap();
        assert_eq!(spec["resourceAttributes"]["verb"], "list");
        assert_eq!(spec["resourceAttributes"]["namespace"], "x");
        let err = review_spec("selfsubjectaccessreviews", b"not protobuf").unwrap_err();
        assert_eq!(
            err.to_string(),
            "protobuf body without the k8s magic prefix"
        );
    }

    #[test]
    fn decode_errors_are_bad_requests_with_their_cause() {
        let mut body = MAGIC.to_vec();
        body.extend(Unknown { raw: vec![0xff] }.encode_to_vec());
        let err = review_spec("selfsubjectaccessreviews", &body).unwrap_err();
        assert!(
            err.to_string().starts_with("selfsubjectaccessreviews: "),
            "{err}"
        );
        let status = Status::from(err);
        assert_eq!(status.code(), http::StatusCode::BAD_REQUEST);
        assert!(status.message().starts_with("selfsubjectaccessreviews: "));
        assert!(std::error::Error::source(&status).is_some());
    }
}
