//! Field ownership (`metadata.managedFields`) and server-side apply, as kube-apiserver keeps
//! them for custom resources (structured-merge-diff):
//!
//! - Every write records which manager set which fields. Creates, updates and patches are
//!   `Update` operations: their manager (the `fieldManager` parameter, else the User-Agent's
//!   product) takes the fields the write added or changed, away from whoever owned them; fields
//!   the write removed leave every manager.
//! - An apply (`PATCH` with `application/apply-patch+yaml`) merges the manager's configuration
//!   into the live object (or creates it), and the manager's `Apply` entry becomes exactly the
//!   set of fields it applied. Fields another manager owns that the apply would change are
//!   conflicts: a `409 Conflict` naming each field and its manager, unless `force=true` takes
//!   them over. Fields the manager applied before and no longer applies are removed from the
//!   object unless another manager owns them.
//!
//! Field sets are `FieldsV1` (`{"f:spec":{"f:reference":{}}}`, `".": {}` marking a map that is
//! itself a member). Maps merge key by key; lists (`finalizers`, `ownerReferences`) are atomic:
//! one owner for the whole list, replaced whole. Server-set metadata (name, namespace, uid,
//! resourceVersion, generation, timestamps) and `apiVersion`/`kind` are owned by nobody.

use super::store::API_VERSION;
use apigw_core::errors::Status;
use http::StatusCode;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// A field's path: object keys from the top.
type Path = Vec<String>;
/// A set of fields.
type FieldSet = BTreeSet<Path>;

pub(super) const APPLY: &str = "Apply";
pub(super) const UPDATE: &str = "Update";

/// The metadata fields a manager can own; every other one is the server's.
const OWNED_META: [&str; 4] = ["labels", "annotations", "finalizers", "ownerReferences"];

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: Option<String>,
    subresource: Option<String>,
    set: FieldSet,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource.is_none()
    }

    /// How a conflict names this manager, as kube-apiserver prints it.
    fn described(&self) -> String {
        let mut out = go_quote(&self.manager);
        if let Some(sub) = &self.subresource {
            out.push_str(&format!(" with subresource {}", go_quote(sub)));
        }
        if self.operation == UPDATE {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }

    fn to_json(&self) -> Value {
        let mut doc = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
        });
        if let Some(time) = &self.time {
            doc["time"] = json!(time);
        }
        doc["fieldsType"] = json!("FieldsV1");
        doc["fieldsV1"] = to_fields_v1(&self.set);
        if let Some(sub) = &self.subresource {
            doc["subresource"] = json!(sub);
        }
        doc
    }
}

/// The manager of a write that is not an apply: the `fieldManager` given, else what
/// kube-apiserver takes from the User-Agent (its product, before the first `/`).
pub(super) fn manager_or_user_agent(field_manager: &str, user_agent: Option<&str>) -> String {
    if !field_manager.is_empty() {
        return field_manager.to_string();
    }
    let product = user_agent
        .and_then(|ua| ua.split('/').next())
        .unwrap_or_default();
    product.chars().take(128).collect()
}

/// `metadata.managedFields` for `new`, written as an `Update` by `manager` over `old` (None
/// for a create). `new` may carry managedFields of its own: the same as `old`'s (or none)
/// means "keep tracking"; others replace the tracked ones, as kube-apiserver lets a client
/// reset them.
pub(super) fn track_update(old: Option<&Value>, new: &Value, manager: &str, now: &str) -> Value {
    let live = old.map(entries_of).unwrap_or_default();
    let mut entries = match new.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => live,
        Some(given) if Some(given) == old.and_then(|o| o.pointer("/metadata/managedFields")) => {
            live
        }
        Some(_) => entries_of(new),
    };
    let (changed, removed) = compare(old, Some(new));
    for entry in entries.iter_mut().filter(|e| !e.is(manager, UPDATE)) {
        entry.set.retain(|p| !changed.contains(p));
    }
    for entry in &mut entries {
        entry.set.retain(|p| !under_any(p, &removed));
    }
    if !changed.is_empty() {
        match entries.iter_mut().find(|e| e.is(manager, UPDATE)) {
            Some(entry) => {
                entry.set.extend(changed);
                entry.time = Some(now.to_string());
                entry.api_version = API_VERSION.to_string();
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: UPDATE.into(),
                api_version: API_VERSION.into(),
                time: Some(now.to_string()),
                subresource: None,
                set: changed,
            }),
        }
    }
    render(entries)
}

/// Applies `config` as `manager` to `live` (None: the object does not exist yet). Returns the
/// object to store, `metadata.managedFields` included, or the `409 Conflict` of fields other
/// managers own (unless `force`).
pub(super) fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<Value, Status> {
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|v| !v.is_null())
    {
        return Err(Status::bad_request("metadata.managedFields must be nil"));
    }
    let applied = leaves(config);
    let mut entries = live.map(entries_of).unwrap_or_default();
    let mut merged = live.cloned().unwrap_or_else(|| json!({}));
    merge_config(&mut merged, config);
    let (changed, _) = compare(live, Some(&merged));
    let mut conflicts: Vec<(String, Path)> = Vec::new();
    for entry in entries.iter_mut().filter(|e| !e.is(manager, APPLY)) {
        let owned: Vec<Path> = entry
            .set
            .iter()
            .filter(|p| changed.contains(*p))
            .cloned()
            .collect();
        if force {
            entry.set.retain(|p| !owned.contains(p));
        } else {
            conflicts.extend(owned.into_iter().map(|p| (entry.described(), p)));
        }
    }
    if !conflicts.is_empty() {
        return Err(conflict(conflicts));
    }
    // Fields this manager stopped applying go, unless someone else owns them.
    let previous = entries
        .iter()
        .position(|e| e.is(manager, APPLY))
        .map(|i| entries.remove(i));
    let before = previous.as_ref().map(|e| e.set.clone()).unwrap_or_default();
    // The time moves only when the manager's fields do, so a repeated apply changes nothing.
    let time = match &previous {
        Some(e) if e.set == applied && e.time.is_some() => e.time.clone(),
        _ => Some(now.to_string()),
    };
    for path in before.difference(&applied) {
        let kept = entries
            .iter()
            .any(|e| e.set.iter().any(|p| p.starts_with(path)));
        if !kept {
            remove_path(&mut merged, path, &entries);
        }
    }
    let (_, removed) = compare(live, Some(&merged));
    for entry in &mut entries {
        entry.set.retain(|p| !under_any(p, &removed));
    }
    entries.push(Entry {
        manager: manager.to_string(),
        operation: APPLY.into(),
        api_version: API_VERSION.into(),
        time,
        subresource: None,
        set: applied,
    });
    let managed = render(entries);
    match &mut merged {
        Value::Object(map) => match map.entry("metadata").or_insert_with(|| json!({})) {
            Value::Object(meta) => {
                meta.insert("managedFields".into(), managed);
            }
            _ => return Err(Status::bad_request("metadata must be an object")),
        },
        _ => return Err(Status::bad_request("the body is not an object")),
    }
    Ok(merged)
}

/// The `409` kube-apiserver answers an apply with conflicts.
fn conflict(conflicts: Vec<(String, Path)>) -> Status {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(who, path)| {
            json!({"type": "FieldManagerConflict", "message": format!("conflict with {who}"),
                   "field": dotted(path)})
        })
        .collect();
    let message = match conflicts.as_slice() {
        [(who, path)] => format!(
            "Apply failed with 1 conflict: conflict with {who}: {}",
            dotted(path)
        ),
        many => {
            let mut by_manager: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for (who, path) in many {
                by_manager.entry(who).or_default().push(dotted(path));
            }
            let lines: Vec<String> = by_manager
                .iter()
                .flat_map(|(who, paths)| {
                    std::iter::once(format!("conflicts with {who}:"))
                        .chain(paths.iter().map(|p| format!("- {p}")))
                })
                .collect();
            format!(
                "Apply failed with {} conflicts: {}",
                many.len(),
                lines.join("\n")
            )
        }
    };
    Status::new(StatusCode::CONFLICT, "Conflict", message).with_details(json!({"causes": causes}))
}

/// `.spec.reference`, as field paths are printed.
fn dotted(path: &Path) -> String {
    path.iter().map(|s| format!(".{s}")).collect()
}

/// False for the fields nobody owns: `apiVersion`, `kind`, `metadata` itself and the
/// metadata the server sets.
fn ownable(path: &[String]) -> bool {
    match path {
        [] => false,
        [top] => !matches!(top.as_str(), "apiVersion" | "kind" | "metadata"),
        [meta, field, ..] if meta == "metadata" => OWNED_META.contains(&field.as_str()),
        _ => true,
    }
}

/// The fields `config` sets: its leaves (scalars and lists; nulls and empty maps set nothing).
fn leaves(config: &Value) -> FieldSet {
    fn walk(v: &Value, path: &mut Path, out: &mut FieldSet) {
        match v {
            Value::Null => {}
            Value::Object(map) => {
                for (k, child) in map {
                    path.push(k.clone());
                    walk(child, path, out);
                    path.pop();
                }
            }
            _ => {
                if ownable(path) {
                    out.insert(path.clone());
                }
            }
        }
    }
    let mut out = FieldSet::new();
    walk(config, &mut Vec::new(), &mut out);
    out
}

/// What changed from `old` to `new`: the fields added or modified (a map that appears is a
/// member itself, with its fields), and the fields removed.
fn compare(old: Option<&Value>, new: Option<&Value>) -> (FieldSet, FieldSet) {
    fn walk(
        old: Option<&Value>,
        new: Option<&Value>,
        path: &mut Path,
        changed: &mut FieldSet,
        removed: &mut FieldSet,
    ) {
        let old = old.filter(|v| !v.is_null());
        let new = new.filter(|v| !v.is_null());
        match (old, new) {
            (Some(Value::Object(a)), Some(Value::Object(b))) => {
                let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
                for k in keys {
                    path.push(k.clone());
                    walk(a.get(k), b.get(k), path, changed, removed);
                    path.pop();
                }
            }
            (None, None) => {}
            (Some(a), Some(b)) if a == b => {}
            (old, new) => {
                if let Some(Value::Object(a)) = old {
                    for (k, child) in a {
                        path.push(k.clone());
                        walk(Some(child), None, path, changed, removed);
                        path.pop();
                    }
                } else if old.is_some() && new.is_none() && ownable(path) {
                    removed.insert(path.clone());
                }
                match new {
                    Some(Value::Object(b)) => {
                        if old.is_none() && ownable(path) {
                            changed.insert(path.clone());
                        }
                        for (k, child) in b {
                            path.push(k.clone());
                            walk(None, Some(child), path, changed, removed);
                            path.pop();
                        }
                    }
                    Some(_) if ownable(path) => {
                        changed.insert(path.clone());
                    }
                    _ => {}
                }
                if matches!(old, Some(Value::Object(_))) && new.is_none() && ownable(path) {
                    removed.insert(path.clone());
                }
            }
        }
    }
    let (mut changed, mut removed) = (FieldSet::new(), FieldSet::new());
    walk(old, new, &mut Vec::new(), &mut changed, &mut removed);
    (changed, removed)
}

/// True when `path` is one of `paths` or lies under one.
fn under_any(path: &Path, paths: &FieldSet) -> bool {
    (1..=path.len()).any(|n| paths.contains(&path[..n].to_vec()))
}

/// Merges an apply configuration into `target`: maps key by key, anything else (lists
/// included) replaced; nulls in the configuration set nothing.
fn merge_config(target: &mut Value, config: &Value) {
    match (target, config) {
        (Value::Object(t), Value::Object(c)) => {
            for (k, v) in c {
                if v.is_null() {
                    continue;
                }
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        merge_config(existing, v)
                    }
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, c) => *t = c.clone(),
    }
}

/// Removes the field at `path`, then the maps it leaves empty below the top level that no
/// manager in `others` owns (an empty `metadata.labels`, say).
fn remove_path(obj: &mut Value, path: &Path, others: &[Entry]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    if let Some(Value::Object(map)) = parent_mut(obj, parents) {
        map.remove(last);
    }
    for depth in (2..=parents.len()).rev() {
        let prefix = &parents[..depth];
        let owned = others
            .iter()
            .any(|e| e.set.iter().any(|p| p.starts_with(prefix)));
        let empty = matches!(parent_mut(obj, prefix), Some(Value::Object(m)) if m.is_empty());
        if owned || !empty {
            break;
        }
        if let Some((leaf, above)) = prefix.split_last() {
            if let Some(Value::Object(map)) = parent_mut(obj, above) {
                map.remove(leaf);
            }
        }
    }
}

fn parent_mut<'a>(obj: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter()
        .try_fold(obj, |v, seg| v.as_object_mut()?.get_mut(seg))
}

/// The managedFields entries of `obj` that can be read; others are dropped.
fn entries_of(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|e| {
            let text = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
            Some(Entry {
                manager: text("manager").unwrap_or_default(),
                operation: text("operation")?,
                api_version: text("apiVersion").unwrap_or_else(|| API_VERSION.into()),
                time: text("time"),
                subresource: text("subresource").filter(|s| !s.is_empty()),
                set: from_fields_v1(e.get("fieldsV1")?),
            })
        })
        .collect()
}

/// The entries as `managedFields`, empty ones left out, ordered as kube-apiserver orders
/// them (operation, then time, then manager).
fn render(mut entries: Vec<Entry>) -> Value {
    entries.retain(|e| !e.set.is_empty());
    entries.sort_by(|a, b| {
        (&a.operation, &a.time, &a.manager).cmp(&(&b.operation, &b.time, &b.manager))
    });
    Value::Array(entries.iter().map(Entry::to_json).collect())
}

/// A field set as `FieldsV1`.
fn to_fields_v1(set: &FieldSet) -> Value {
    #[derive(Default)]
    struct Node {
        member: bool,
        children: BTreeMap<String, Node>,
    }
    fn render(node: &Node) -> Value {
        let mut map = Map::new();
        if node.member && !node.children.is_empty() {
            map.insert(".".into(), json!({}));
        }
        for (k, child) in &node.children {
            map.insert(format!("f:{k}"), render(child));
        }
        Value::Object(map)
    }
    let mut root = Node::default();
    for path in set {
        let node = path.iter().fold(&mut root, |node, seg| {
            node.children.entry(seg.clone()).or_default()
        });
        node.member = true;
    }
    render(&root)
}

/// A `FieldsV1` value as a field set. List item keys (`k:`, `v:`, `i:`) own the whole list,
/// as this server keeps lists atomic.
fn from_fields_v1(doc: &Value) -> FieldSet {
    fn walk(v: &Value, path: &mut Path, out: &mut FieldSet) {
        let Value::Object(map) = v else {
            return;
        };
        if map.is_empty() && !path.is_empty() {
            out.insert(path.clone());
            return;
        }
        for (k, child) in map {
            if k == "." {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
            } else if let Some(field) = k.strip_prefix("f:") {
                path.push(field.to_string());
                walk(child, path, out);
                path.pop();
            } else if !path.is_empty() {
                out.insert(path.clone());
            }
        }
    }
    let mut out = FieldSet::new();
    walk(doc, &mut Vec::new(), &mut out);
    out
}

/// A Go `%q`-quoted string.
fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-01-01T00:00:00Z";

    fn fields(obj: &Value, manager: &str, operation: &str) -> Value {
        obj["metadata"]["managedFields"]
            .as_array()
            .and_then(|list| {
                list.iter()
                    .find(|e| e["manager"] == manager && e["operation"] == operation)
            })
            .map(|e| e["fieldsV1"].clone())
            .unwrap_or(Value::Null)
    }

    fn with_managed(mut obj: Value, managed: Value) -> Value {
        obj["metadata"]["managedFields"] = managed;
        obj
    }

    #[test]
    fn create_is_an_update_owning_every_field_it_set() {
        let obj = json!({"apiVersion": API_VERSION, "kind": "Flunder",
            "metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"reference": "r"}});
        let managed = track_update(None, &obj, "kubectl-create", NOW);
        assert_eq!(managed[0]["operation"], "Update");
        assert_eq!(managed[0]["fieldsType"], "FieldsV1");
        assert_eq!(
            managed[0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {".": {}, "f:x": {}}},
                   "f:spec": {".": {}, "f:reference": {}}})
        );
        assert_eq!(managed[0]["time"], NOW);
    }

    #[test]
    fn apply_creates_owns_conflicts_forces_and_prunes() {
        let config = json!({"apiVersion": API_VERSION, "kind": "Flunder",
            "metadata": {"name": "a", "labels": {"app": "x"}}, "spec": {"reference": "one"}});
        let made = apply(None, &config, "alice", false, NOW).expect("create");
        assert_eq!(
            fields(&made, "alice", APPLY),
            json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:reference": {}}})
        );
        // Another manager applying the same value shares the field; a different one conflicts.
        let same = json!({"apiVersion": API_VERSION, "kind": "Flunder",
            "metadata": {"name": "a"}, "spec": {"reference": "one"}});
        let shared = apply(Some(&made), &same, "bob", false, NOW).expect("same value");
        assert_eq!(
            fields(&shared, "bob", APPLY),
            json!({"f:spec": {"f:reference": {}}})
        );
        let other = json!({"metadata": {"name": "a"}, "spec": {"reference": "two"}});
        let err = apply(Some(&made), &other, "bob", false, NOW).expect_err("conflict");
        assert_eq!(err.code(), StatusCode::CONFLICT);
        assert_eq!(
            err.message(),
            r#"Apply failed with 1 conflict: conflict with "alice": .spec.reference"#
        );
        assert_eq!(
            err.to_json()["details"]["causes"][0],
            json!({"type": "FieldManagerConflict", "message": "conflict with \"alice\"", "field": ".spec.reference"})
        );
        let again =
            apply(Some(&made), &config, "alice", false, "2027-01-01T00:00:00Z").expect("again");
        assert_eq!(
            again, made,
            "a repeated apply changes nothing, its time included"
        );
        let forced = apply(Some(&made), &other, "bob", true, NOW).expect("force");
        assert_eq!(forced["spec"]["reference"], "two");
        assert_eq!(
            fields(&forced, "alice", APPLY),
            json!({"f:metadata": {"f:labels": {"f:app": {}}}})
        );
        // alice stops applying the label: nobody else owns it, so it goes.
        let fewer = json!({"metadata": {"name": "a"}, "spec": {}});
        let pruned = apply(Some(&forced), &fewer, "alice", false, NOW).expect("prune");
        assert!(pruned["metadata"].get("labels").is_none(), "{pruned}");
        assert_eq!(pruned["spec"]["reference"], "two", "bob's field stays");
        assert_eq!(fields(&pruned, "alice", APPLY), Value::Null);
    }

    #[test]
    fn updates_take_fields_from_appliers_who_then_conflict() {
        let config = json!({"metadata": {"name": "a"}, "spec": {"reference": "one"}});
        let made = apply(None, &config, "kubectl", false, NOW).expect("create");
        let mut edited = made.clone();
        edited["spec"]["reference"] = json!("edited");
        let managed = track_update(Some(&made), &edited, "kubectl-edit", NOW);
        let edited = with_managed(edited, managed);
        assert_eq!(
            fields(&edited, "kubectl-edit", UPDATE),
            json!({"f:spec": {"f:reference": {}}})
        );
        assert_eq!(fields(&edited, "kubectl", APPLY), Value::Null);
        let err = apply(Some(&edited), &config, "kubectl", false, NOW).expect_err("conflict");
        assert_eq!(
            err.message(),
            format!(
                "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using {API_VERSION}: .spec.reference"
            )
        );
    }

    #[test]
    fn removed_fields_leave_every_manager_and_explicit_resets_replace() {
        let old = json!({"metadata": {"name": "a", "labels": {"a": "1", "b": "2"}}});
        let old = with_managed(old.clone(), track_update(None, &old, "one", NOW));
        let new = json!({"metadata": {"name": "a", "labels": {"a": "1"},
                         "managedFields": old["metadata"]["managedFields"].clone()}});
        let managed = track_update(Some(&old), &new, "two", NOW);
        assert_eq!(managed.as_array().map(Vec::len), Some(1));
        assert_eq!(
            managed[0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
        );
        let reset = json!({"metadata": {"name": "a", "labels": {"a": "1"}, "managedFields": []}});
        assert_eq!(track_update(Some(&old), &reset, "two", NOW), json!([]));
    }

    #[test]
    fn odd_configurations_are_refused_not_panicked_on() {
        for config in [json!("text"), json!({"metadata": "x"}), json!([1])] {
            let err = apply(None, &config, "m", false, NOW).expect_err("refused");
            assert_eq!(err.code(), StatusCode::BAD_REQUEST, "{config}");
        }
        let managed = json!({"metadata": {"managedFields": [{"manager": "x"}]}});
        assert!(apply(None, &managed, "m", false, NOW).is_err());
    }

    #[test]
    fn fields_v1_round_trips() {
        let doc = json!({"f:metadata": {"f:labels": {".": {}, "f:x": {}}}, "f:spec": {"f:reference": {}}});
        assert_eq!(to_fields_v1(&from_fields_v1(&doc)), doc);
        let list = json!({"f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"1\"}": {".": {}}}}});
        assert_eq!(
            to_fields_v1(&from_fields_v1(&list)),
            json!({"f:metadata": {"f:ownerReferences": {}}})
        );
    }

    #[test]
    fn the_manager_defaults_to_the_user_agent_product() {
        assert_eq!(manager_or_user_agent("m", Some("kubectl/v1.32")), "m");
        assert_eq!(
            manager_or_user_agent("", Some("OpenAPI-Generator/31.0.0/python")),
            "OpenAPI-Generator"
        );
        assert_eq!(manager_or_user_agent("", None), "");
    }
}
