//! Content negotiation on `Accept` media-type parameters (`as`, `g`, `v`) and the server-side
//! `meta.k8s.io/v1` Table that `kubectl get` prints (columns NAME and AGE), built on the
//! shared API machinery in [`apigw_core::meta`].

use apigw_core::meta;
use http::HeaderMap;
use serde_json::{json, Value};

pub use apigw_core::meta::wants_table;

/// True when some media range of `Accept` asks for `as=<as_>;g=<group>;v=<version>`.
pub fn accepts(headers: &HeaderMap, as_: &str, group: &str, version: &str) -> bool {
    meta::accept_ranges(headers).any(|range| {
        meta::range_param(range, "as") == Some(as_)
            && meta::range_param(range, "g") == Some(group)
            && meta::range_param(range, "v") == Some(version)
    })
}

const COLUMNS: [meta::Column; 2] = [
    (
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace.",
    ),
    (
        "Age",
        "date",
        "",
        "CreationTimestamp is the time the object was created.",
    ),
];

/// The Table of `objects`, listed at resourceVersion `rv` (`None` for a single object).
pub fn table(objects: &[Value], rv: Option<u64>) -> Value {
    let rows = objects
        .iter()
        .map(|obj| {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            let age = meta::age_of(obj["metadata"]["creationTimestamp"].as_str());
            (vec![json!(name), json!(age)], obj.clone())
        })
        .collect();
    meta::table(&COLUMNS, rows, rv.map(|rv| rv.to_string()).as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;

    #[test]
    fn accept_parameters() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            header::HeaderValue::from_static(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
            ),
        );
        assert!(wants_table(&headers));
        assert!(accepts(&headers, "Table", "meta.k8s.io", "v1beta1"));
        headers.insert(
            header::ACCEPT,
            header::HeaderValue::from_static("application/json"),
        );
        assert!(!wants_table(&headers));
    }

    #[test]
    fn table_rows_carry_name_age_and_object() {
        let obj = json!({"metadata": {"name": "a", "creationTimestamp": "2020-01-01T00:00:00Z"}});
        let t = table(std::slice::from_ref(&obj), Some(7));
        assert_eq!(t["metadata"]["resourceVersion"], "7");
        assert_eq!(t["rows"][0]["cells"][0], "a");
        assert!(t["rows"][0]["cells"][1]
            .as_str()
            .is_some_and(|a| a.ends_with('d') || a.contains('y')));
        assert_eq!(t["rows"][0]["object"], obj);
        assert_eq!(t["columnDefinitions"][1]["type"], "date");
    }
}
