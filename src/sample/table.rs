//! Content negotiation on `Accept` media-type parameters (`as`, `g`, `v`) and the server-side
//! `meta.k8s.io/v1` Table that `kubectl get` prints (columns NAME and AGE).

use super::store::parse_rfc3339;
use http::{header, HeaderMap};
use serde_json::{json, Value};

/// True when some media range of `Accept` asks for `as=<as_>;g=<group>;v=<version>`.
pub fn accepts(headers: &HeaderMap, as_: &str, group: &str, version: &str) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let param = |key: &str| {
                range.split(';').skip(1).find_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    (k.trim() == key).then(|| v.trim().trim_matches('"'))
                })
            };
            param("as") == Some(as_) && param("g") == Some(group) && param("v") == Some(version)
        })
}

/// True when the client asked for a Table.
pub fn wants_table(headers: &HeaderMap) -> bool {
    accepts(headers, "Table", "meta.k8s.io", "v1")
}

/// The Table of `objects`, listed at resourceVersion `rv` (`None` for a single object).
pub fn table(objects: &[Value], rv: Option<u64>) -> Value {
    let now = time::OffsetDateTime::now_utc();
    let rows: Vec<Value> = objects.iter().map(|obj| row(obj, now)).collect();
    let metadata = match rv {
        Some(rv) => json!({"resourceVersion": rv.to_string()}),
        None => json!({}),
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "priority": 0,
             "description": "Name must be unique within a namespace."},
            {"name": "Age", "type": "date", "format": "", "priority": 0,
             "description": "CreationTimestamp is the time the object was created."},
        ],
        "rows": rows,
    })
}

fn row(obj: &Value, now: time::OffsetDateTime) -> Value {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let age = obj["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(parse_rfc3339)
        .map(|created| human_age((now - created).whole_seconds()))
        .unwrap_or_else(|| "<unknown>".to_string());
    json!({"cells": [name, age], "object": obj})
}

/// An age the way kubectl prints one: `45s`, `3m20s`, `17m`, `5h4m`, `9h`, `3d2h`, `40d`, `2y10d`.
pub fn human_age(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".to_string();
    }
    let secs = secs.max(0);
    let (mins, hours, days) = (secs / 60, secs / 3600, secs / 86_400);
    let pair = |big: i64, bu: &str, small: i64, su: &str| match small {
        0 => format!("{big}{bu}"),
        _ => format!("{big}{bu}{small}{su}"),
    };
    match () {
        _ if secs < 120 => format!("{secs}s"),
        _ if mins < 10 => pair(mins, "m", secs % 60, "s"),
        _ if mins < 180 => format!("{mins}m"),
        _ if hours < 8 => pair(hours, "h", mins % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => pair(days, "d", hours % 24, "h"),
        _ if hours < 24 * 365 * 2 => format!("{days}d"),
        _ if hours < 24 * 365 * 8 => pair(days / 365, "y", days % 365, "d"),
        _ => format!("{}y", days / 365),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_print_like_kubectl() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (200, "3m20s"),
            (300, "5m"),
            (1020, "17m"),
            (5 * 3600 + 240, "5h4m"),
            (9 * 3600, "9h"),
            (3 * 86_400 + 7200, "3d2h"),
            (40 * 86_400, "40d"),
            (740 * 86_400, "2y10d"),
            (3000 * 86_400, "8y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_age(secs), want, "{secs}");
        }
    }

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
            .is_some_and(|a| a.ends_with('d') || a.ends_with('y') || a.contains('y')));
        assert_eq!(t["rows"][0]["object"], obj);
    }
}
