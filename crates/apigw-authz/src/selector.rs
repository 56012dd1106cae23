//! A request's label and field selectors as requirements, the form kube's
//! `AuthorizeWithSelectors` hands to webhooks: `=`, `==` and `in` become `In`, `!=` and
//! `notin` become `NotIn`; a label key alone is `Exists`, `!key` is `DoesNotExist`; anything
//! else (`>`, `<`, what does not parse) is left out, which only widens what is asked.

use serde_json::{json, Value};

/// The requirements of a label selector, sorted by key as kube's parser sorts them.
pub fn label(raw: &str) -> Vec<Value> {
    let mut requirements: Vec<Value> = split(raw)
        .into_iter()
        .filter_map(|term| label_term(term.trim()))
        .collect();
    requirements.sort_by(|a, b| a["key"].as_str().cmp(&b["key"].as_str()));
    requirements
}

/// The requirements of a field selector.
pub fn field(raw: &str) -> Vec<Value> {
    split(raw)
        .into_iter()
        .filter_map(|term| {
            let term = term.trim();
            let (key, op, value) = if let Some((k, v)) = term.split_once("!=") {
                (k, "NotIn", v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, "In", v)
            } else {
                let (k, v) = term.split_once('=')?;
                (k, "In", v)
            };
            let key = key.trim();
            (!key.is_empty()).then(|| requirement(key, op, &[unescape(value.trim())]))
        })
        .collect()
}

fn label_term(term: &str) -> Option<Value> {
    if term.is_empty() {
        return None;
    }
    if let Some(key) = term.strip_prefix('!') {
        let key = key.trim();
        return is_key(key).then(|| json!({ "key": key, "operator": "DoesNotExist" }));
    }
    for (sep, op) in [("!=", "NotIn"), ("==", "In"), ("=", "In")] {
        if let Some((key, value)) = term.split_once(sep) {
            let key = key.trim();
            return is_key(key).then(|| requirement(key, op, &[value.trim().to_string()]));
        }
    }
    if term.contains('>') || term.contains('<') {
        return None;
    }
    // `key in (a, b)` and `key notin (a, b)`.
    if let Some(open) = term.find('(') {
        let close = term.rfind(')')?;
        let head: Vec<&str> = term[..open].split_whitespace().collect();
        let op = match head.as_slice() {
            [_, "in"] => "In",
            [_, "notin"] => "NotIn",
            _ => return None,
        };
        let values: Vec<String> = term[open + 1..close]
            .split(',')
            .map(|v| v.trim().to_string())
            .collect();
        return is_key(head[0]).then(|| requirement(head[0], op, &values));
    }
    is_key(term).then(|| json!({ "key": term, "operator": "Exists" }))
}

fn requirement(key: &str, operator: &str, values: &[String]) -> Value {
    json!({ "key": key, "operator": operator, "values": values })
}

fn is_key(key: &str) -> bool {
    !key.is_empty() && !key.contains(char::is_whitespace)
}

/// The terms of a selector: split on commas outside parentheses and not escaped.
fn split(raw: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start, mut escaped) = (0usize, 0usize, false);
    for (i, c) in raw.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&raw[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&raw[start..]);
    out
}

/// A field selector value with its backslash escapes (`\,`, `\=`, `\\`) undone.
fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selectors_become_requirements() {
        assert_eq!(
            label("app=web, tier!=db,env in (prod, staging),!legacy,owner,x notin (a),n>3"),
            vec![
                json!({"key": "app", "operator": "In", "values": ["web"]}),
                json!({"key": "env", "operator": "In", "values": ["prod", "staging"]}),
                json!({"key": "legacy", "operator": "DoesNotExist"}),
                json!({"key": "owner", "operator": "Exists"}),
                json!({"key": "tier", "operator": "NotIn", "values": ["db"]}),
                json!({"key": "x", "operator": "NotIn", "values": ["a"]}),
            ]
        );
        assert!(label("").is_empty());
    }

    #[test]
    fn field_selectors_become_requirements() {
        assert_eq!(
            field("metadata.name==a\\,b,spec.nodeName!=n1,status.phase=Running"),
            vec![
                json!({"key": "metadata.name", "operator": "In", "values": ["a,b"]}),
                json!({"key": "spec.nodeName", "operator": "NotIn", "values": ["n1"]}),
                json!({"key": "status.phase", "operator": "In", "values": ["Running"]}),
            ]
        );
        assert!(field("nonsense").is_empty());
    }
}
