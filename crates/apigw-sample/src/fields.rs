//! Server-side field validation (`?fieldValidation=Strict|Warn|Ignore`): which fields a Flunder
//! may carry, and what kube-apiserver answers for the others: a `400` with
//! `strict decoding error: unknown field "spec.foo"` (Strict), or `Warning: 299` headers (Warn).
//! Accepted objects lose their unknown fields, as a typed Kubernetes API drops them.

use apigw_core::errors::Status;
use http::{HeaderMap, HeaderValue};
use serde_json::Value;
use std::collections::HashMap;

/// Top-level fields of a Flunder.
pub(super) const TOP_FIELDS: [&str; 5] = ["apiVersion", "kind", "metadata", "spec", "status"];
/// Fields of `spec`.
pub(super) const SPEC_FIELDS: [&str; 1] = ["reference"];
/// Fields of `status` (none, as in the upstream sample-apiserver).
pub(super) const STATUS_FIELDS: [&str; 0] = [];
/// Fields of `metadata` (ObjectMeta).
pub(super) const META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// What to do about unknown fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    /// The `fieldValidation` query parameter; absent means `Ignore`.
    pub(super) fn from_query(query: &HashMap<String, String>) -> Result<Self, Status> {
        match query.get("fieldValidation").map(String::as_str) {
            None | Some("" | "Ignore") => Ok(Self::Ignore),
            Some("Warn") => Ok(Self::Warn),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(Status::bad_request(format!(
                "fieldValidation parameter unsupported: {other:?}: must be one of Ignore, Warn or Strict"
            ))),
        }
    }

    /// Checks `obj` (an object or a merge patch of one) and drops its unknown fields. Strict
    /// refuses unknown fields; Warn returns one `Warning` header value per unknown field;
    /// Ignore returns nothing.
    pub(super) fn check(self, obj: &mut Value) -> Result<Vec<HeaderValue>, Status> {
        let unknown = unknown_fields(obj);
        if unknown.is_empty() {
            return Ok(Vec::new());
        }
        if self != Self::Strict {
            prune(obj, &unknown);
        }
        if self == Self::Ignore {
            return Ok(Vec::new());
        }
        let described: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        if self == Self::Strict {
            return Err(Status::bad_request(format!(
                "strict decoding error: {}",
                described.join(", ")
            )));
        }
        Ok(described
            .iter()
            .filter_map(|d| HeaderValue::from_str(&format!("299 - {}", quote(d))).ok())
            .collect())
    }
}

/// Appends `Warning` headers.
pub(super) fn add_warnings(headers: &mut HeaderMap, warnings: Vec<HeaderValue>) {
    for w in warnings {
        headers.append(http::header::WARNING, w);
    }
}

/// The dotted paths of fields a Flunder does not have: top level first, then metadata, spec
/// and status.
pub(super) fn unknown_fields(obj: &Value) -> Vec<String> {
    let mut out = unknown_in(obj, "", &TOP_FIELDS);
    for (field, known) in [
        ("metadata", &META_FIELDS[..]),
        ("spec", &SPEC_FIELDS[..]),
        ("status", &STATUS_FIELDS[..]),
    ] {
        out.extend(unknown_in(&obj[field], &format!("{field}."), known));
    }
    out
}

/// Removes the fields at the dotted `paths` (as [`unknown_fields`] names them).
fn prune(obj: &mut Value, paths: &[String]) {
    for path in paths {
        let (parent, field) = match path.split_once('.') {
            Some((parent, field)) => (Some(parent), field),
            None => (None, path.as_str()),
        };
        let target = match parent {
            Some(parent) => obj.get_mut(parent),
            None => Some(&mut *obj),
        };
        if let Some(Value::Object(map)) = target {
            map.remove(field);
        }
    }
}

fn unknown_in(value: &Value, prefix: &str, known: &[&str]) -> Vec<String> {
    let Value::Object(map) = value else {
        return Vec::new();
    };
    map.keys()
        .filter(|k| !known.contains(&k.as_str()))
        .map(|k| format!("{prefix}{k}"))
        .collect()
}

/// A Go `%q`-style quoted string (what a Warning header's text is).
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mode(v: &str) -> Result<FieldValidation, Status> {
        FieldValidation::from_query(&HashMap::from([("fieldValidation".into(), v.into())]))
    }

    #[test]
    fn strict_names_every_unknown_field() {
        let mut obj = json!({"kind": "Flunder", "bogus": 1, "metadata": {"name": "a", "nick": "x"},
                         "spec": {"reference": "r", "foo": true}});
        let err = mode("Strict")
            .expect("mode")
            .check(&mut obj)
            .expect_err("strict");
        assert_eq!(err.code(), http::StatusCode::BAD_REQUEST);
        assert_eq!(
            err.message(),
            r#"strict decoding error: unknown field "bogus", unknown field "metadata.nick", unknown field "spec.foo""#
        );
    }

    #[test]
    fn warn_and_ignore() {
        let mut obj = json!({"spec": {"foo": 1, "reference": "r"}, "x": 2});
        let warnings = mode("Warn").expect("mode").check(&mut obj).expect("warn");
        assert_eq!(
            warnings,
            [
                r#"299 - "unknown field \"x\"""#,
                r#"299 - "unknown field \"spec.foo\"""#
            ]
        );
        assert_eq!(obj, json!({"spec": {"reference": "r"}}), "pruned");
        let mut obj = json!({"spec": {"foo": 1}});
        assert!(mode("Ignore")
            .expect("mode")
            .check(&mut obj)
            .expect("ignore")
            .is_empty());
        assert_eq!(obj, json!({"spec": {}}), "pruned");
        let absent = FieldValidation::from_query(&HashMap::new()).expect("absent");
        assert_eq!(absent, FieldValidation::Ignore);
        assert!(mode("strict").is_err());
        let mut clean = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"reference": "x"}});
        assert!(mode("Strict")
            .expect("mode")
            .check(&mut clean)
            .expect("clean")
            .is_empty());
    }
}
