//! The options of write requests (`CreateOptions`, `UpdateOptions`, `PatchOptions`,
//! `DeleteOptions`) from the query, validated as kube-apiserver validates them: an unknown
//! `dryRun` value, a `fieldManager` that is too long or not printable, `force` on a patch that
//! is not an apply, or an apply without a `fieldManager` is a `422 Invalid` naming the options
//! kind and each offending field.

use apigw_core::errors::Status;
use http::StatusCode;
use serde_json::{json, Value};

/// kube-apiserver's limit on `fieldManager`.
const FIELD_MANAGER_MAX: usize = 128;

/// Which options a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verb {
    Create,
    Update,
    /// A patch; `true` for an apply patch.
    Patch(bool),
    Delete,
}

impl Verb {
    fn kind(self) -> &'static str {
        match self {
            Self::Create => "CreateOptions",
            Self::Update => "UpdateOptions",
            Self::Patch(_) => "PatchOptions",
            Self::Delete => "DeleteOptions",
        }
    }
}

/// The validated options of one write.
#[derive(Debug, Clone, Default)]
pub(super) struct WriteOptions {
    /// `dryRun=All`: validate and answer, change nothing.
    pub dry_run: bool,
    /// The `fieldManager` as given (maybe empty).
    pub field_manager: String,
    /// `force=true` on an apply.
    pub force: bool,
}

/// One invalid field: (field, cause reason, message).
type Cause = (&'static str, &'static str, String);

impl WriteOptions {
    /// Reads and validates the options of `verb` from the query `pairs` (repeated `dryRun`
    /// values all count), plus the `dryRun` of a DeleteOptions `body`.
    pub(super) fn parse(
        verb: Verb,
        pairs: &[(String, String)],
        body_dry_run: &[String],
    ) -> Result<Self, Status> {
        let mut dry_run: Vec<String> = pairs
            .iter()
            .filter(|(k, _)| k == "dryRun")
            .map(|(_, v)| v.clone())
            .collect();
        dry_run.extend(body_dry_run.iter().cloned());
        let last = |name: &str| {
            pairs
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let field_manager = last("fieldManager").unwrap_or_default().to_string();
        let force = match last("force") {
            None => None,
            Some(v) => Some(parse_bool(v).ok_or_else(|| {
                Status::bad_request(format!(
                    "strconv.ParseBool: parsing {}: invalid syntax",
                    go_quote(v)
                ))
            })?),
        };
        let mut causes: Vec<Cause> = Vec::new();
        match verb {
            Verb::Patch(false) if force.is_some() => causes.push((
                "force",
                "FieldValueForbidden",
                "Forbidden: may not be specified for non-apply patch".into(),
            )),
            Verb::Patch(true) if field_manager.is_empty() => causes.push((
                "fieldManager",
                "FieldValueRequired",
                "Required value: is required for apply patch".into(),
            )),
            _ => {}
        }
        if verb != Verb::Delete {
            if field_manager.chars().count() > FIELD_MANAGER_MAX {
                causes.push((
                    "fieldManager",
                    "FieldValueTooLong",
                    format!("Too long: may not be more than {FIELD_MANAGER_MAX} bytes"),
                ));
            }
            if let Some((i, c)) = field_manager
                .chars()
                .enumerate()
                .find(|(_, c)| c.is_control())
            {
                causes.push((
                    "fieldManager",
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {}: invalid character U+{:04X} (at position {i})",
                        go_quote(&field_manager),
                        u32::from(c)
                    ),
                ));
            }
        }
        if dry_run.iter().any(|v| v != "All") {
            let values: Vec<String> = dry_run.iter().map(|v| go_quote(v)).collect();
            causes.push((
                "dryRun",
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: []string{{{}}}: supported values: \"All\"",
                    values.join(", ")
                ),
            ));
        }
        if !causes.is_empty() {
            return Err(invalid(verb.kind(), &causes));
        }
        Ok(Self {
            dry_run: !dry_run.is_empty(),
            field_manager,
            force: force.unwrap_or(false),
        })
    }
}

/// kube-apiserver's `422 Invalid` for options: `PatchOptions.meta.k8s.io "" is invalid: ...`.
fn invalid(kind: &str, causes: &[Cause]) -> Status {
    let described: Vec<String> = causes
        .iter()
        .map(|(field, _, message)| format!("{field}: {message}"))
        .collect();
    let summary = match described.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let causes: Vec<Value> = causes
        .iter()
        .map(|(field, reason, message)| json!({"reason": reason, "message": message, "field": field}))
        .collect();
    Status::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!("{kind}.meta.k8s.io \"\" is invalid: {summary}"),
    )
    .with_details(json!({"group": "meta.k8s.io", "kind": kind, "causes": causes}))
}

/// Go's `strconv.ParseBool`.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// A Go `%q`-quoted string.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn dry_run_all_and_nothing_else() {
        let ok = WriteOptions::parse(Verb::Create, &q(&[("dryRun", "All")]), &[]).expect("All");
        assert!(ok.dry_run);
        let none = WriteOptions::parse(Verb::Update, &q(&[]), &[]).expect("none");
        assert!(!none.dry_run);
        let body = WriteOptions::parse(Verb::Delete, &q(&[]), &["All".into()]).expect("body");
        assert!(body.dry_run);
        let bad = WriteOptions::parse(Verb::Create, &q(&[("dryRun", "Some")]), &[])
            .expect_err("unknown value");
        assert_eq!(bad.code(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            bad.message(),
            r#"CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Some"}: supported values: "All""#
        );
        let doc = bad.to_json();
        assert_eq!(doc["reason"], "Invalid");
        assert_eq!(doc["details"]["causes"][0]["field"], "dryRun");
    }

    #[test]
    fn apply_needs_a_field_manager_and_only_apply_may_force() {
        let missing = WriteOptions::parse(Verb::Patch(true), &q(&[]), &[]).expect_err("missing");
        assert_eq!(
            missing.message(),
            r#"PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch"#
        );
        let forced = WriteOptions::parse(Verb::Patch(false), &q(&[("force", "true")]), &[])
            .expect_err("force");
        assert_eq!(
            forced.message(),
            r#"PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch"#
        );
        let ok = WriteOptions::parse(
            Verb::Patch(true),
            &q(&[("fieldManager", "me"), ("force", "true")]),
            &[],
        )
        .expect("apply");
        assert!(ok.force && ok.field_manager == "me");
        let long = "m".repeat(129);
        let too_long = WriteOptions::parse(Verb::Create, &q(&[("fieldManager", &long)]), &[])
            .expect_err("long");
        assert_eq!(too_long.code(), StatusCode::UNPROCESSABLE_ENTITY);
        let bad_bool = WriteOptions::parse(
            Verb::Patch(true),
            &q(&[("fieldManager", "me"), ("force", "yes")]),
            &[],
        )
        .expect_err("not a bool");
        assert_eq!(bad_bool.code(), StatusCode::BAD_REQUEST);
    }
}
