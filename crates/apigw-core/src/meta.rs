//! Kubernetes API machinery shared by the APIs the gateway serves itself and the sample server:
//! media-type parameters of `Accept` (`as`, `g`, `v`), the `meta.k8s.io/v1` Table, timestamps
//! and ages as kubectl prints them, and the `WatchEvent` frame.

use http::{header, HeaderMap};
use serde_json::{json, Value};
use std::time::SystemTime;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The media ranges of every `Accept` header, in order, without surrounding space.
pub fn accept_ranges(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|r| !r.is_empty())
}

/// The value of parameter `key` of one media range (`application/json;as=Table;g=...`).
pub fn range_param<'a>(range: &'a str, key: &str) -> Option<&'a str> {
    range.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k.trim().eq_ignore_ascii_case(key)).then(|| v.trim().trim_matches('"'))
    })
}

/// True when some media range of `Accept` asks for `meta.k8s.io/v1` Table.
pub fn wants_table(headers: &HeaderMap) -> bool {
    accept_ranges(headers).any(|r| {
        range_param(r, "as") == Some("Table")
            && range_param(r, "g") == Some("meta.k8s.io")
            && range_param(r, "v") == Some("v1")
    })
}

/// A time as Kubernetes writes it: RFC 3339 in UTC, whole seconds.
pub fn timestamp(t: SystemTime) -> String {
    let t = OffsetDateTime::from(t)
        .replace_nanosecond(0)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    t.format(&Rfc3339).unwrap_or_default()
}

/// Parses an RFC 3339 timestamp.
pub fn parse_timestamp(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}

/// The age of an object created at `created` (RFC 3339), as kubectl prints it.
pub fn age_of(created: Option<&str>) -> String {
    created
        .and_then(parse_timestamp)
        .map(|c| human_age((OffsetDateTime::now_utc() - c).whole_seconds()))
        .unwrap_or_else(|| "<unknown>".to_string())
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

/// A Table column: `(name, type, format, description)`.
pub type Column = (&'static str, &'static str, &'static str, &'static str);

/// A `meta.k8s.io/v1` Table of `rows` (cells plus the object each row shows).
pub fn table(
    columns: &[Column],
    rows: Vec<(Vec<Value>, Value)>,
    resource_version: Option<&str>,
) -> Value {
    let columns: Vec<Value> = columns
        .iter()
        .map(|(name, ty, format, description)| {
            json!({"name": name, "type": ty, "format": format, "description": description, "priority": 0})
        })
        .collect();
    let rows: Vec<Value> = rows
        .into_iter()
        .map(|(cells, object)| json!({"cells": cells, "object": object}))
        .collect();
    let metadata = match resource_version {
        Some(rv) => json!({"resourceVersion": rv}),
        None => json!({}),
    };
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata,
           "columnDefinitions": columns, "rows": rows})
}

/// One line of a watch stream.
pub fn watch_event(kind: &str, object: &Value) -> bytes::Bytes {
    let mut line = json!({"type": kind, "object": object})
        .to_string()
        .into_bytes();
    line.push(b'\n');
    line.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_print_like_kubectl() {
        for (secs, want) in [
            (5, "5s"),
            (200, "3m20s"),
            (1020, "17m"),
            (5 * 3600 + 240, "5h4m"),
            (3 * 86_400 + 7200, "3d2h"),
            (740 * 86_400, "2y10d"),
        ] {
            assert_eq!(human_age(secs), want, "{secs}");
        }
    }

    #[test]
    fn timestamps_round_trip() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
        let s = timestamp(t);
        assert_eq!(s, "2023-11-14T22:13:20Z");
        assert_eq!(
            parse_timestamp(&s).map(|t| t.unix_timestamp()),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn accept_parameters() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io, application/json"
                .parse()
                .unwrap(),
        );
        assert!(wants_table(&h));
        let ranges: Vec<&str> = accept_ranges(&h).collect();
        assert_eq!(
            ranges,
            [
                "application/json;as=Table;v=v1;g=meta.k8s.io",
                "application/json"
            ]
        );
        assert_eq!(range_param(ranges[0], "g"), Some("meta.k8s.io"));
        h.insert(header::ACCEPT, "application/json".parse().unwrap());
        assert!(!wants_table(&h));
    }
}
