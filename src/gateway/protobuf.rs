//! The few Kubernetes protobuf messages the gateway reads itself: kubectl sends its review
//! requests (whoami, can-i) as `application/vnd.kubernetes.protobuf`, a 4-byte `k8s\0` magic
//! followed by a `runtime.Unknown` envelope. Only the spec fields the reviews use are decoded;
//! answers are JSON, which the same clients accept.

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

fn raw(body: &[u8]) -> Result<Vec<u8>, String> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or("protobuf body without the k8s magic prefix")?;
    Ok(Unknown::decode(envelope)
        .map_err(|e| format!("protobuf envelope: {e}"))?
        .raw)
}

/// The `spec` of a review sent as protobuf, as the JSON the review handlers read.
pub fn review_spec(resource: &str, body: &[u8]) -> Result<Value, String> {
    let raw = raw(body)?;
    if resource == "selfsubjectrulesreviews" {
        let review = RulesReview::decode(raw.as_slice()).map_err(|e| format!("{resource}: {e}"))?;
        return Ok(json!({"namespace": review.spec.and_then(|s| s.namespace).unwrap_or_default()}));
    }
    if resource != "selfsubjectaccessreviews" {
        return Ok(Value::Null);
    }
    let spec = Review::decode(raw.as_slice())
        .map_err(|e| format!("{resource}: {e}"))?
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
        assert!(review_spec("selfsubjectaccessreviews", b"not protobuf").is_err());
    }
}
