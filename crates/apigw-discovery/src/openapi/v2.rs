//! The merged Swagger 2.0 document (`/openapi/v2`), built as kube-aggregator builds it with
//! kube-openapi's aggregator: each APIService's spec is cut to its own paths
//! (`/apis/<group>/<version>/`, dropping the definitions only those cut paths used); the specs
//! are merged in order, the local one (the delegate's) first, then APIServices by group priority;
//! a path already merged is skipped, a definition or parameter of the same name but another
//! shape is renamed `<name>_v2` (then `_v3`, ...) with the references to it, and equal
//! definitions merge their `x-kubernetes-group-version-kind` lists (the order of APIServices is
//! [`crate::order::spec_order`]'s). Every top-level field but
//! paths, definitions and parameters (`info`, `securityDefinitions`...) is the first spec's.

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

const DEFINITIONS: &str = "#/definitions/";
const PARAMETERS: &str = "#/parameters/";
const GVK: &str = "x-kubernetes-group-version-kind";

/// `spec` cut to the paths under `/apis/<group>/<version>/`, as kube-aggregator keeps of an
/// APIService's spec.
pub fn own_paths(spec: &Value, group: &str, version: &str) -> Value {
    let prefix = format!("/apis/{group}/{version}/");
    filter_paths(spec, |path| path.starts_with(&prefix))
}

/// `spec` with only the paths `keep` accepts, and without the definitions that only the
/// dropped paths reached (a definition no path ever reached stays).
fn filter_paths(spec: &Value, keep: impl Fn(&str) -> bool) -> Value {
    let Some(paths) = spec["paths"].as_object() else {
        return spec.clone();
    };
    let before = reachable(spec, paths.values());
    let kept: Map<String, Value> = paths
        .iter()
        .filter(|(p, _)| keep(p))
        .map(|(p, v)| (p.clone(), v.clone()))
        .collect();
    let after = reachable(spec, kept.values());
    let mut out = spec.clone();
    out["paths"] = Value::Object(kept);
    if let Some(defs) = out.get_mut("definitions").and_then(Value::as_object_mut) {
        defs.retain(|name, _| after.contains(name) || !before.contains(name));
    }
    out
}

/// The definitions reachable from `roots` through `$ref`s, following definitions and
/// parameters of `spec`.
fn reachable<'a>(spec: &Value, roots: impl Iterator<Item = &'a Value>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut params = BTreeSet::new();
    let mut todo: Vec<&Value> = roots.collect();
    while let Some(v) = todo.pop() {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    if let Some(name) = r.strip_prefix(DEFINITIONS) {
                        if seen.insert(name.to_string()) {
                            todo.extend(spec["definitions"].get(name));
                        }
                    } else if let Some(name) = r.strip_prefix(PARAMETERS) {
                        if params.insert(name.to_string()) {
                            todo.extend(spec["parameters"].get(name));
                        }
                    }
                }
                todo.extend(m.values());
            }
            Value::Array(a) => todo.extend(a),
            _ => {}
        }
    }
    seen
}

/// Merges `specs` in order into one document; with none, `base` alone. A spec that is not a
/// JSON object (a backend's mistake) is passed over.
pub fn merge<'a>(base: Value, specs: impl Iterator<Item = &'a Value>) -> Value {
    let mut merged: Option<Value> = None;
    for spec in specs.filter(|s| s.is_object()) {
        let dest = merged.get_or_insert_with(|| {
            let mut top = spec.clone();
            if let Some(m) = top.as_object_mut() {
                for key in ["paths", "definitions", "parameters"] {
                    m.remove(key);
                }
            }
            top
        });
        merge_one(dest, spec);
    }
    let mut out = merged.unwrap_or(base);
    if !out.is_object() {
        out = Value::Object(Map::new());
    }
    for key in ["paths", "definitions", "parameters"] {
        if !out[key].is_object() {
            out[key] = Value::Object(Map::new());
        }
    }
    out
}

/// Merges `source` into `dest`: new paths only, definitions and parameters renamed on conflict.
fn merge_one(dest: &mut Value, source: &Value) {
    let Some(paths) = source["paths"].as_object() else {
        // A spec without paths uses none of its definitions.
        return;
    };
    let taken = |p: &str| dest["paths"].get(p).is_some();
    let fresh: Vec<&String> = paths.keys().filter(|p| !taken(p)).collect();
    if fresh.is_empty() {
        return;
    }
    let mut source = if fresh.len() < paths.len() {
        // Upstream keeps the fresh paths as prefixes.
        filter_paths(source, |p| fresh.iter().any(|f| p.starts_with(f.as_str())))
    } else {
        source.clone()
    };
    for (section, prefix, equal) in [
        (
            "definitions",
            DEFINITIONS,
            equal_but_gvks as fn(&Value, &Value) -> bool,
        ),
        ("parameters", PARAMETERS, |a: &Value, b: &Value| a == b),
    ] {
        let renames = conflicts(&dest[section], &source[section], equal);
        if !renames.is_empty() {
            source = rename(source, section, prefix, &renames);
        }
    }
    for section in ["definitions", "parameters"] {
        let Some(entries) = source.get_mut(section).and_then(Value::as_object_mut) else {
            continue;
        };
        let target = object(dest, section);
        for (name, value) in std::mem::take(entries) {
            match target.get_mut(&name) {
                None => {
                    target.insert(name, value);
                }
                Some(existing) if section == "definitions" => merge_gvks(existing, &value),
                Some(_) => {}
            }
        }
    }
    if let Some(entries) = source.get_mut("paths").and_then(Value::as_object_mut) {
        let target = object(dest, "paths");
        for (path, item) in std::mem::take(entries) {
            target.entry(path).or_insert(item);
        }
    }
}

/// `v[key]` as an object, made one when it is not.
fn object<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v[key].is_object() {
        v[key] = Value::Object(Map::new());
    }
    match &mut v[key] {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

/// For each name of `source` that `dest` has in another shape, the name it takes: an existing
/// `<name>_vN` of the same shape, else the first `<name>_vN` free in both.
fn conflicts(
    dest: &Value,
    source: &Value,
    equal: fn(&Value, &Value) -> bool,
) -> BTreeMap<String, String> {
    let (Some(dest), Some(source)) = (dest.as_object(), source.as_object()) else {
        return BTreeMap::new();
    };
    let mut used: BTreeSet<String> = dest.keys().cloned().collect();
    let mut renames = BTreeMap::new();
    'names: for (name, value) in source {
        match dest.get(name) {
            Some(existing) if !equal(existing, value) => {}
            _ => continue,
        }
        let mut i = 2;
        loop {
            let candidate = format!("{name}_v{i}");
            match dest.get(&candidate) {
                Some(existing) if equal(existing, value) => {
                    renames.insert(name.clone(), candidate);
                    continue 'names;
                }
                Some(_) => i += 1,
                None => break,
            }
        }
        let mut candidate = format!("{name}_v{i}");
        while used.contains(&candidate) || source.contains_key(&candidate) {
            i += 1;
            candidate = format!("{name}_v{i}");
        }
        used.insert(candidate.clone());
        renames.insert(name.clone(), candidate);
    }
    renames
}

/// `spec` with the `section` entries renamed and every `$ref` to them rewritten.
fn rename(
    mut spec: Value,
    section: &str,
    prefix: &str,
    renames: &BTreeMap<String, String>,
) -> Value {
    fn walk(v: &mut Value, prefix: &str, renames: &BTreeMap<String, String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get_mut("$ref") {
                    if let Some(to) = r.strip_prefix(prefix).and_then(|n| renames.get(n)) {
                        *r = format!("{prefix}{to}");
                    }
                }
                m.values_mut().for_each(|e| walk(e, prefix, renames));
            }
            Value::Array(a) => a.iter_mut().for_each(|e| walk(e, prefix, renames)),
            _ => {}
        }
    }
    walk(&mut spec, prefix, renames);
    if let Some(entries) = spec.get_mut(section).and_then(Value::as_object_mut) {
        for (from, to) in renames {
            if let Some(v) = entries.remove(from) {
                entries.insert(to.clone(), v);
            }
        }
    }
    spec
}

/// Two definitions equal but for their group-version-kind lists.
fn equal_but_gvks(a: &Value, b: &Value) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            let rest = |m: &Map<String, Value>| m.iter().filter(|(k, _)| *k != GVK).count();
            rest(a) == rest(b)
                && a.iter()
                    .filter(|(k, _)| *k != GVK)
                    .all(|(k, v)| b.get(k) == Some(v))
        }
        _ => a == b,
    }
}

/// Adds to `existing`'s group-version-kind list those of `other` it lacks, sorted by
/// `group/version.kind` when any was added.
fn merge_gvks(existing: &mut Value, other: &Value) {
    let Some(theirs) = other[GVK].as_array() else {
        return;
    };
    let Some(mine) = existing.get_mut(GVK).and_then(Value::as_array_mut) else {
        if let Some(m) = existing.as_object_mut() {
            m.insert(GVK.into(), Value::Array(theirs.clone()));
        }
        return;
    };
    let key = |g: &Value| {
        let s = |k: &str| g[k].as_str().unwrap_or_default().to_string();
        format!("{}/{}.{}", s("group"), s("version"), s("kind"))
    };
    let have: BTreeSet<String> = mine.iter().map(key).collect();
    let added: Vec<Value> = theirs
        .iter()
        .filter(|g| !have.contains(&key(g)))
        .cloned()
        .collect();
    if !added.is_empty() {
        mine.extend(added);
        mine.sort_by_key(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_apiservice_keeps_its_own_paths_and_what_they_use() {
        let spec = json!({
            "paths": {
                "/apis/w.example.com/": {"get": {"responses": {"200": {"schema": {"$ref": "#/definitions/Group"}}}}},
                "/apis/w.example.com/v1/things": {"get": {"responses": {"200": {"schema": {"$ref": "#/definitions/Thing"}}}}}
            },
            "definitions": {"Group": {"type": "object"}, "Thing": {"properties": {"m": {"$ref": "#/definitions/Meta"}}},
                            "Meta": {}, "Unused": {}}
        });
        let own = own_paths(&spec, "w.example.com", "v1");
        assert_eq!(
            own["paths"].as_object().unwrap().keys().collect::<Vec<_>>(),
            ["/apis/w.example.com/v1/things"]
        );
        // Group was used only by the dropped path; Unused was never used and stays.
        let defs: Vec<&String> = own["definitions"].as_object().unwrap().keys().collect();
        assert_eq!(defs, ["Meta", "Thing", "Unused"]);
    }

    #[test]
    fn conflicting_definitions_are_renamed_and_equal_ones_merge_their_kinds() {
        let first = json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.36.3"},
            "paths": {"/a": {"get": {"$ref": "#/definitions/T"}}},
            "definitions": {"T": {"type": "object"},
                            "S": {"description": "same", GVK: [{"group": "a", "version": "v1", "kind": "S"}]}}});
        let second = json!({"info": {"title": "other"},
            "paths": {"/a": {"get": {}}, "/b": {"get": {"$ref": "#/definitions/T"}, "put": {"$ref": "#/definitions/S"}}},
            "definitions": {"T": {"type": "string"},
                            "S": {"description": "same", GVK: [{"group": "b", "version": "v1", "kind": "S"}]}}});
        let m = merge(json!({}), [&first, &second].into_iter());
        assert_eq!(m["info"]["version"], "v1.36.3");
        // /a was taken: the first spec's stays.
        assert_eq!(
            m["paths"]["/a"],
            json!({"get": {"$ref": "#/definitions/T"}})
        );
        assert_eq!(m["paths"]["/b"]["get"]["$ref"], "#/definitions/T_v2");
        assert_eq!(m["definitions"]["T_v2"], json!({"type": "string"}));
        assert_eq!(
            m["definitions"]["S"][GVK],
            json!([{"group": "a", "version": "v1", "kind": "S"}, {"group": "b", "version": "v1", "kind": "S"}])
        );
    }

    #[test]
    fn specs_that_are_not_objects_are_passed_over() {
        let odd = [json!(123), json!(["x"]), json!("spec")];
        let m = merge(json!({"swagger": "2.0"}), odd.iter());
        assert_eq!(m["swagger"], "2.0");
        assert_eq!(m["paths"], json!({}));
        let real = json!({"paths": {"/a": {}}, "definitions": []});
        let m = merge(json!({}), [&odd[0], &real].into_iter());
        assert_eq!(m["paths"], json!({"/a": {}}));
    }
}
