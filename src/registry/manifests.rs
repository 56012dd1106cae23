//! The manifest-directory source: every `*.yaml`, `*.yml` and `*.json` file in a directory,
//! each holding APIService objects the way `kubectl apply -f` takes them (multi-document YAML,
//! concatenated JSON, `kind: List` / `APIServiceList`). The directory is watched; a set with
//! any problem is reported and the last good registry stays in force.

use super::{ApiService, Registry, Snapshot};
use notify::{RecursiveMode, Watcher};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A problem in one manifest file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub file: String,
    /// The object (`APIService <name>` or `document N`) the problem is in, when known.
    pub object: Option<String>,
    pub field: Option<String>,
    pub message: String,
}

impl std::fmt::Display for ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(o) = &self.object {
            write!(f, ": {o}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

fn is_manifest(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'));
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    !hidden && matches!(ext, "yaml" | "yml" | "json")
}

/// Loads every manifest in `dir`. Either all of them are valid, or every problem is returned.
pub fn load_dir(dir: &Path) -> Result<Vec<ApiService>, Vec<ManifestError>> {
    let at_dir = |message: String| {
        vec![ManifestError {
            file: dir.display().to_string(),
            object: None,
            field: None,
            message,
        }]
    };
    let entries = std::fs::read_dir(dir).map_err(|e| at_dir(e.to_string()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_manifest(p) && p.is_file())
        .collect();
    files.sort();
    let mut services: Vec<ApiService> = Vec::new();
    let mut seen_in: std::collections::HashMap<String, String> = Default::default();
    let mut problems = Vec::new();
    for path in files {
        let file = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                problems.push(ManifestError {
                    file,
                    object: None,
                    field: None,
                    message: e.to_string(),
                });
                continue;
            }
        };
        match parse_manifest(&text, &file) {
            Ok(found) => {
                for s in found {
                    if let Some(first) = seen_in.insert(s.name.clone(), file.clone()) {
                        problems.push(ManifestError {
                            file: file.clone(),
                            object: Some(format!("APIService {}", s.name)),
                            field: Some("metadata.name".into()),
                            message: format!("already defined in {first}"),
                        });
                    }
                    services.push(s);
                }
            }
            Err(mut e) => problems.append(&mut e),
        }
    }
    if problems.is_empty() {
        Ok(services)
    } else {
        Err(problems)
    }
}

/// Parses one file's text. `file` names it in errors; `.json` files are read as JSON.
pub fn parse_manifest(text: &str, file: &str) -> Result<Vec<ApiService>, Vec<ManifestError>> {
    let problem = |object: Option<String>, field: Option<String>, message: String| ManifestError {
        file: file.to_string(),
        object,
        field,
        message,
    };
    let docs =
        documents(text, file.ends_with(".json")).map_err(|m| vec![problem(None, None, m)])?;
    let mut objects = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let label = format!("document {}", i + 1);
        match doc.get("kind").and_then(Value::as_str) {
            Some("List" | "APIServiceList") => match doc.get("items") {
                Some(Value::Array(items)) => objects.extend(
                    items
                        .iter()
                        .enumerate()
                        .map(|(j, item)| (format!("{label} items[{j}]"), item.clone())),
                ),
                Some(Value::Null) | None => {}
                Some(_) => {
                    return Err(vec![problem(
                        Some(label),
                        Some("items".into()),
                        "must be a list".into(),
                    )])
                }
            },
            _ => objects.push((label, doc)),
        }
    }
    let mut services = Vec::new();
    let mut problems = Vec::new();
    for (label, obj) in objects {
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(|n| format!("APIService {n}"))
            .unwrap_or(label);
        if kind != "APIService" {
            problems.push(problem(
                Some(name),
                Some("kind".into()),
                format!("must be APIService, List or APIServiceList, not {kind:?}"),
            ));
            continue;
        }
        match ApiService::from_value(obj) {
            Ok(s) => services.push(s),
            Err(errs) => problems.extend(
                errs.into_iter()
                    .map(|e| problem(Some(name.clone()), Some(e.field), e.message)),
            ),
        }
    }
    if problems.is_empty() {
        Ok(services)
    } else {
        Err(problems)
    }
}

/// The non-empty documents of a file, as JSON values.
fn documents(text: &str, json: bool) -> Result<Vec<Value>, String> {
    if json {
        return serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("invalid JSON: {e}"));
    }
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(doc).map_err(|e| {
            // Name the value too: "number out of range" alone does not say which.
            match e
                .location()
                .and_then(|l| scalar_at(text, l.line(), l.column()))
            {
                Some(v) => format!("invalid YAML: {e} (value {v})"),
                None => format!("invalid YAML: {e}"),
            }
        })?;
        match value {
            Value::Null => {}
            Value::Object(_) => out.push(value),
            other => return Err(format!("a document must be an object, not {other}")),
        }
    }
    Ok(out)
}

/// The plain scalar starting at `line` and `column` (1-based, in characters) of `text`, as
/// written, for error messages.
fn scalar_at(text: &str, line: usize, column: usize) -> Option<String> {
    let scalar: String = text
        .lines()
        .nth(line.checked_sub(1)?)?
        .chars()
        .skip(column.checked_sub(1)?)
        .take_while(|c| !matches!(c, ',' | '}' | ']' | '#'))
        .take(60)
        .collect();
    let scalar = scalar.trim();
    (!scalar.is_empty()).then(|| scalar.to_string())
}

/// Loads `dir` into `registry` now, then again whenever a file in it changes (debounced), until
/// the returned watcher is dropped. Bad sets are logged and leave the registry as it was.
pub fn watch_dir(
    dir: PathBuf,
    registry: Arc<Registry>,
) -> notify::Result<notify::RecommendedWatcher> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Reading the files ourselves raises access events; only changes matter.
        if event.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
            let _ = tx.send(());
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    apply(&dir, &registry);
    tokio::spawn(async move {
        while rx.recv().await.is_some() {
            // Editors and `kubectl cp` write in bursts: let the burst settle, then load once.
            tokio::time::sleep(Duration::from_millis(150)).await;
            while rx.try_recv().is_ok() {}
            let (dir, registry) = (dir.clone(), registry.clone());
            let _ = tokio::task::spawn_blocking(move || apply(&dir, &registry)).await;
        }
    });
    Ok(watcher)
}

fn apply(dir: &Path, registry: &Registry) {
    match load_dir(dir) {
        Ok(services) => {
            let count = services.len();
            if registry.replace(Snapshot::new(services)) {
                tracing::info!(dir = %dir.display(), apiservices = count, "registry loaded");
            }
        }
        Err(problems) => {
            for p in &problems {
                tracing::error!(problem = %p, "invalid APIService manifest");
            }
            tracing::warn!(
                dir = %dir.display(),
                problems = problems.len(),
                "manifest change not applied; the last good registry stays in force"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1.a.example.com}
spec: {group: a.example.com, version: v1, groupPriorityMinimum: 100, versionPriority: 10,
       service: {name: a, namespace: ns}}
"#;

    #[test]
    fn multi_document_and_lists() {
        let text = format!(
            "{ONE}---\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: apiregistration.k8s.io/v1\n  kind: APIService\n  metadata: {{name: v2.a.example.com}}\n  spec: {{group: a.example.com, version: v2, groupPriorityMinimum: 100, versionPriority: 20}}\n"
        );
        let s = parse_manifest(&text, "x.yaml").unwrap();
        let names: Vec<_> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["v1.a.example.com", "v2.a.example.com"]);
    }

    #[test]
    fn json_stream() {
        let one = r#"{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1.b"},"spec":{"group":"b","version":"v1","groupPriorityMinimum":1,"versionPriority":1}}"#;
        let s = parse_manifest(&format!("{one}\n{one}"), "x.json").unwrap();
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn errors_name_file_object_and_field() {
        let bad = ONE.replace("versionPriority: 10", "versionPriority: 0");
        let errs = parse_manifest(&bad, "dir/a.yaml").unwrap_err();
        assert_eq!(
            errs[0].to_string(),
            "dir/a.yaml: APIService v1.a.example.com: spec.versionPriority: 0: must be positive and less than 1000"
        );
        let errs = parse_manifest("spec: {group: [", "dir/b.yaml").unwrap_err();
        assert!(
            errs[0].to_string().starts_with("dir/b.yaml: invalid YAML"),
            "{}",
            errs[0]
        );
        let big = ONE.replace(
            "groupPriorityMinimum: 100",
            "groupPriorityMinimum: 99999999999999999999",
        );
        let errs = parse_manifest(&big, "d.yaml").unwrap_err();
        let text = errs[0].to_string();
        assert!(
            text.contains("spec.groupPriorityMinimum")
                && text.ends_with("(value 99999999999999999999)"),
            "{text}"
        );
        let errs = parse_manifest("kind: Service\nmetadata: {name: x}\n", "c.yaml").unwrap_err();
        assert_eq!(errs[0].field.as_deref(), Some("kind"));
    }

    /// A number as a user might write one: in or past any integer type, negative, float.
    fn number_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<u128>().prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|n| n.to_string()),
            "-?[0-9]{1,45}(\\.[0-9]{0,10})?(e[+-]?[0-9]{1,4})?",
            "0x[0-9a-f]{1,40}|0o[0-7]{1,40}|[.](inf|nan|Inf|NaN)|-[.]inf",
        ]
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_problems_not_a_panic(text in ".*", json in proptest::prelude::any::<bool>()) {
            let file = if json { "x.json" } else { "x.yaml" };
            if let Err(problems) = parse_manifest(&text, file) {
                proptest::prop_assert!(!problems.is_empty());
            }
        }

        #[test]
        fn any_number_in_any_field_is_problems_not_a_panic(
            gpm in number_text(),
            vp in number_text(),
            port in number_text(),
            in_list in proptest::prelude::any::<bool>(),
        ) {
            let doc = format!(
                "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {{name: v1.a.example.com}}\nspec: {{group: a.example.com, version: v1, groupPriorityMinimum: {gpm}, versionPriority: {vp}, service: {{name: a, namespace: ns, port: {port}}}}}\n"
            );
            let text = if in_list {
                format!("kind: List\nitems:\n- {}", doc.trim_end().replace('\n', "\n  "))
            } else {
                doc
            };
            for file in ["x.yaml", "x.json"] {
                match parse_manifest(&text, file) {
                    Ok(services) => {
                        let in_range = services.iter().all(|s| {
                            (1..=20000).contains(&s.group_priority_minimum)
                                && (1..=1000).contains(&s.version_priority)
                                && s.service.as_ref().is_some_and(|svc| svc.port > 0)
                        });
                        proptest::prop_assert!(in_range, "{:?}", services);
                    }
                    Err(problems) => proptest::prop_assert!(!problems.is_empty()),
                }
            }
        }
    }

    #[test]
    fn directory_rejects_duplicates_across_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), ONE).unwrap();
        std::fs::write(dir.path().join("b.yaml"), ONE).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let errs = load_dir(dir.path()).unwrap_err();
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.contains("already defined"), "{}", errs[0]);
        std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
        assert_eq!(load_dir(dir.path()).unwrap().len(), 1);
    }
}
