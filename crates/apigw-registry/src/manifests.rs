//! The manifest-directory source: every `*.yaml`, `*.yml` and `*.json` file in a directory,
//! each holding APIService and APIServiceBackend objects the way `kubectl apply -f` takes them
//! (multi-document YAML, concatenated JSON, `kind: List` / `APIServiceList`). The directory is
//! watched; a set with any problem (a backend whose APIService is not in it, too) is reported
//! and the last good registry stays in force.

use super::{attach, ApiService, Backend, Registry, Snapshot, BACKEND_KIND};
use apigw_core::body::BoxError;
use apigw_core::reload::Reload;
use apigw_core::yaml::manifest_files;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// How long a manifest file that became empty keeps its last good content. Writers that
/// rewrite a file in place (shell `>` redirection, editors and tools that open with `O_TRUNC`)
/// leave it empty until they have written the new content, often for hundreds of
/// milliseconds; taking that moment as "no APIServices" would make their groups vanish and come
/// back. Two seconds covers a slow writer while a file emptied on purpose still takes effect
/// within seconds. A deleted file is not held: its APIServices go at once.
pub const EMPTIED_FILE_SETTLE: Duration = Duration::from_secs(2);

/// The [`manifest_files`] of `dir`, each with its text or the error reading it.
fn read_files(dir: &Path) -> Result<Vec<(PathBuf, std::io::Result<String>)>, Vec<ManifestError>> {
    let files = manifest_files(dir).map_err(|e| {
        vec![ManifestError {
            file: dir.display().to_string(),
            object: None,
            field: None,
            message: e.to_string(),
        }]
    })?;
    Ok(files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path);
            (path, text)
        })
        .collect())
}

/// Loads every manifest in `dir`. Either all of them are valid, or every problem is returned.
pub fn load_dir(dir: &Path) -> Result<Vec<ApiService>, Vec<ManifestError>> {
    load_files(read_files(dir)?)
}

/// One object of a manifest file.
#[derive(Debug, Clone, PartialEq)]
pub enum Manifest {
    ApiService(ApiService),
    Backend(Backend),
}

impl Manifest {
    /// `<Kind> <name>`, as errors name the object.
    pub fn label(&self) -> String {
        match self {
            Self::ApiService(s) => format!("APIService {}", s.name),
            Self::Backend(b) => format!("{BACKEND_KIND} {}", b.name),
        }
    }
}

/// Parses files read by [`read_files`]: all of them valid, or every problem. Each APIService
/// comes with its backends attached.
fn load_files(
    files: Vec<(PathBuf, std::io::Result<String>)>,
) -> Result<Vec<ApiService>, Vec<ManifestError>> {
    let mut services: Vec<ApiService> = Vec::new();
    let mut backends: Vec<Backend> = Vec::new();
    let mut seen_in: HashMap<String, String> = Default::default();
    // Where each backend was defined, for the problems of attaching it.
    let mut backend_files: HashMap<String, String> = Default::default();
    let mut problems = Vec::new();
    for (path, text) in files {
        let file = path.display().to_string();
        let text = match text {
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
                for object in found {
                    let label = object.label();
                    if let Some(first) = seen_in.insert(label.clone(), file.clone()) {
                        problems.push(ManifestError {
                            file: file.clone(),
                            object: Some(label),
                            field: Some("metadata.name".into()),
                            message: format!("already defined in {first}"),
                        });
                    }
                    match object {
                        Manifest::ApiService(s) => services.push(s),
                        Manifest::Backend(b) => {
                            backend_files.insert(b.name.clone(), file.clone());
                            backends.push(b);
                        }
                    }
                }
            }
            Err(mut e) => problems.append(&mut e),
        }
    }
    for orphan in attach(&mut services, backends) {
        let name = orphan.backend.name;
        problems.push(ManifestError {
            file: backend_files.remove(&name).unwrap_or_default(),
            object: Some(format!("{BACKEND_KIND} {name}")),
            field: Some("spec.apiService".into()),
            message: orphan.why,
        });
    }
    if problems.is_empty() {
        Ok(services)
    } else {
        Err(problems)
    }
}

/// True for a file with nothing in it: no bytes, or only whitespace, `#` comments and document
/// markers (`---`, `...`). This is what a file being rewritten in place looks like.
fn is_blank(text: &str) -> bool {
    text.lines().all(|line| {
        let line = line.trim();
        let rest = line
            .strip_prefix("---")
            .or_else(|| line.strip_prefix("..."))
            .filter(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
            .unwrap_or(line)
            .trim_start();
        rest.is_empty() || rest.starts_with('#')
    })
}

/// Parses one file's text. `file` names it in errors; `.json` files are read as JSON. A blank
/// file (whitespace, `#` comments and document markers only, even in `.json`) holds nothing.
pub fn parse_manifest(text: &str, file: &str) -> Result<Vec<Manifest>, Vec<ManifestError>> {
    if is_blank(text) {
        return Ok(Vec::new());
    }
    let problem = |object: Option<String>, field: Option<String>, message: String| ManifestError {
        file: file.to_string(),
        object,
        field,
        message,
    };
    let docs = documents(text, file.ends_with(".json"))
        .map_err(|e| vec![problem(None, None, e.to_string())])?;
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
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for (label, obj) in objects {
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let known = matches!(kind, "APIService" | BACKEND_KIND);
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(|n| format!("{} {n}", if known { kind } else { "APIService" }))
            .unwrap_or(label);
        let parsed = match kind {
            "APIService" => ApiService::from_value(obj).map(Manifest::ApiService),
            BACKEND_KIND => Backend::from_value(obj).map(Manifest::Backend),
            _ => {
                problems.push(problem(
                    Some(name),
                    Some("kind".into()),
                    format!(
                        "must be APIService, {BACKEND_KIND}, List or APIServiceList, not {kind:?}"
                    ),
                ));
                continue;
            }
        };
        match parsed {
            Ok(object) => found.push(object),
            Err(errs) => problems.extend(
                errs.into_iter()
                    .map(|e| problem(Some(name.clone()), Some(e.field), e.message)),
            ),
        }
    }
    if problems.is_empty() {
        Ok(found)
    } else {
        Err(problems)
    }
}

/// Why a manifest file's text is not a stream of objects.
#[derive(Debug, thiserror::Error)]
enum DocumentError {
    #[error("invalid JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// `value` is the scalar the parser stopped at, when it can be found.
    #[error("invalid YAML: {source}{}", value.as_ref().map(|v| format!(" (value {v})")).unwrap_or_default())]
    Yaml {
        #[source]
        source: apigw_core::yaml::Error,
        value: Option<String>,
    },
    #[error("a document must be an object, not {0}")]
    NotObject(Value),
}

/// The non-empty documents of a file, as JSON values.
fn documents(text: &str, json: bool) -> Result<Vec<Value>, DocumentError> {
    if json {
        return serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .collect::<Result<Vec<_>, _>>()
            .map_err(DocumentError::Json);
    }
    // Empty documents are skipped.
    let docs = apigw_core::yaml::documents(text).map_err(|source| {
        // Name the value too: a message alone may not say which.
        let value = source
            .location()
            .and_then(|(line, column)| scalar_at(text, line, column));
        DocumentError::Yaml { source, value }
    })?;
    if let Some(value) = docs.iter().find(|v| !v.is_object()) {
        return Err(DocumentError::NotObject(value.clone()));
    }
    Ok(docs)
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

/// What a watch remembers between loads of its directory.
#[derive(Debug, Default)]
struct Held {
    /// The non-blank text of every file in the set last put in force.
    applied: HashMap<PathBuf, String>,
    /// Files found blank while `applied` still has content for them, with when that was first
    /// seen: held until [`EMPTIED_FILE_SETTLE`] has passed.
    emptied: HashMap<PathBuf, Instant>,
}

/// One load of the directory by a watch.
#[derive(Debug)]
struct Load {
    result: Result<Vec<ApiService>, Vec<ManifestError>>,
    /// The text of each file as loaded (a held file's last good one), to remember as applied
    /// when `result` is put in force.
    texts: HashMap<PathBuf, String>,
    /// Files that stayed empty past the settle time: this load drops their APIServices.
    released: Vec<PathBuf>,
    /// When the earliest held file's settle time ends: load again then, change or not.
    recheck: Option<Instant>,
}

impl Held {
    /// Loads `dir` as [`load_dir`] does, except that a file that became blank keeps the text
    /// last put in force until it has been blank for [`EMPTIED_FILE_SETTLE`] (from `now`).
    fn load(&mut self, dir: &Path, now: Instant) -> Load {
        let files = match read_files(dir) {
            Ok(files) => files,
            Err(e) => {
                return Load {
                    result: Err(e),
                    texts: HashMap::new(),
                    released: Vec::new(),
                    recheck: None,
                }
            }
        };
        let mut emptied = HashMap::new();
        let mut texts = HashMap::new();
        let mut released = Vec::new();
        let mut recheck: Option<Instant> = None;
        let files = files
            .into_iter()
            .map(|(path, text)| {
                let good = match &text {
                    Ok(t) if !is_blank(t) => {
                        texts.insert(path.clone(), t.clone());
                        return (path, text);
                    }
                    Ok(_) => self.applied.get(&path),
                    Err(_) => None,
                };
                let Some(good) = good else {
                    return (path, text);
                };
                let since = *self.emptied.get(&path).unwrap_or(&now);
                emptied.insert(path.clone(), since);
                let until = since + EMPTIED_FILE_SETTLE;
                if now >= until {
                    released.push(path.clone());
                    return (path, text);
                }
                if since == now {
                    tracing::info!(
                        file = %path.display(),
                        settle = ?EMPTIED_FILE_SETTLE,
                        "manifest file is empty; its last good APIServices stay until it has been empty for the settle time"
                    );
                }
                recheck = Some(recheck.map_or(until, |r| r.min(until)));
                texts.insert(path.clone(), good.clone());
                (path, Ok(good.clone()))
            })
            .collect();
        self.emptied = emptied;
        Load {
            result: load_files(files),
            texts,
            released,
            recheck,
        }
    }
}

/// The manifest directory as a [`Reload`] concern: loaded into the registry when made, then
/// again whenever a file in it changes ([`apigw_core::reload::watch`], the one mechanism every
/// watched file goes through). Bad sets are logged and leave the registry as it was; a file
/// that became empty keeps its last good content for [`EMPTIED_FILE_SETTLE`].
pub struct ManifestDir {
    dir: PathBuf,
    registry: Arc<Registry>,
    held: std::sync::Mutex<(Held, Option<Instant>)>,
}

impl ManifestDir {
    /// What the directory's set is called in the logs.
    const WHAT: &'static str = "APIService manifests";

    /// Loads `dir` into `registry` now.
    pub fn load(dir: PathBuf, registry: Arc<Registry>) -> Self {
        let mut watched = Held::default();
        let recheck = apply(&dir, &registry, &mut watched);
        Self {
            dir,
            registry,
            held: std::sync::Mutex::new((watched, recheck)),
        }
    }
}

impl Reload for ManifestDir {
    fn watched(&self) -> Vec<apigw_core::reload::Watched> {
        vec![apigw_core::reload::Watched {
            what: Self::WHAT,
            files: vec![self.dir.clone()],
        }]
    }

    fn reload(&self, _what: &str) -> Result<(), BoxError> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let (watched, recheck) = &mut *held;
        *recheck = apply(&self.dir, &self.registry, watched);
        Ok(())
    }

    fn recheck(&self) -> Option<Instant> {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}

/// Loads the directory into the registry; returns when to load again for a held file.
fn apply(dir: &Path, registry: &Registry, watched: &mut Held) -> Option<Instant> {
    let load = watched.load(dir, Instant::now());
    match load.result {
        Ok(services) => {
            let count = services.len();
            watched.applied = load.texts;
            for file in &load.released {
                tracing::warn!(
                    file = %file.display(),
                    settle = ?EMPTIED_FILE_SETTLE,
                    "manifest file stayed empty past the settle time; its APIServices are removed"
                );
            }
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
    load.recheck
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
        let names: Vec<_> = s.iter().map(Manifest::label).collect();
        assert_eq!(
            names,
            ["APIService v1.a.example.com", "APIService v2.a.example.com"]
        );
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
                            let Manifest::ApiService(s) = s else {
                                return false;
                            };
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
    fn blank_is_whitespace_comments_and_document_markers() {
        for text in [
            "",
            "\n",
            "  \n\t\n",
            "# x\n",
            "---\n",
            "--- # c\n---\n...\n",
            "\r\n#\r\n",
        ] {
            assert!(is_blank(text), "{text:?}");
        }
        for text in ["{}", "---x\n", "kind: List\n", "[]", "null", "--- a\n"] {
            assert!(!is_blank(text), "{text:?}");
        }
        // A comment-only file is an empty manifest, even named .json.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.json"), "# emptied\n").unwrap();
        assert_eq!(load_dir(dir.path()).unwrap().len(), 0);
    }

    /// One load by a watch at `now`, put in force when valid, as `apply` does: the names
    /// loaded and the files released.
    fn step(
        w: &mut Held,
        dir: &Path,
        now: Instant,
    ) -> (Vec<String>, Vec<PathBuf>, Option<Instant>) {
        let load = w.load(dir, now);
        let services = load.result.expect("a valid set");
        w.applied = load.texts;
        let names = services.into_iter().map(|s| s.name).collect();
        (names, load.released, load.recheck)
    }

    #[test]
    fn an_emptied_file_is_held_for_the_settle_time_and_a_deleted_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
        std::fs::write(&a, ONE).unwrap();
        std::fs::write(
            &b,
            ONE.replace("v1.a.example.com", "v1.b.example.com")
                .replace("group: a.", "group: b."),
        )
        .unwrap();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut w = Held::default();
        let both = vec!["v1.a.example.com".to_string(), "v1.b.example.com".into()];
        assert_eq!(step(&mut w, dir.path(), t0), (both.clone(), vec![], None));

        // Truncated, then written again before the settle time: never gone.
        std::fs::write(&a, "").unwrap();
        let until = at(100) + EMPTIED_FILE_SETTLE;
        assert_eq!(
            step(&mut w, dir.path(), at(100)),
            (both.clone(), vec![], Some(until))
        );
        // A later load keeps the first time it was seen empty.
        std::fs::write(&a, "---\n# half\n").unwrap();
        assert_eq!(
            step(&mut w, dir.path(), at(600)),
            (both.clone(), vec![], Some(until))
        );
        std::fs::write(&a, ONE).unwrap();
        assert_eq!(
            step(&mut w, dir.path(), at(700)),
            (both.clone(), vec![], None)
        );
        assert!(w.emptied.is_empty());

        // Emptied again: the settle time starts over, and a set refused meanwhile (a bad new
        // file) does not restart it.
        std::fs::write(&a, "\n").unwrap();
        let until = at(1000) + EMPTIED_FILE_SETTLE;
        assert_eq!(step(&mut w, dir.path(), at(1000)).2, Some(until));
        std::fs::write(dir.path().join("c.yaml"), "kind: [").unwrap();
        assert!(w.load(dir.path(), at(1500)).result.is_err());
        std::fs::remove_file(dir.path().join("c.yaml")).unwrap();
        assert_eq!(
            step(&mut w, dir.path(), at(1600)),
            (both, vec![], Some(until))
        );
        // Still empty at the end of the settle time: its APIServices go, once.
        let b_only = vec!["v1.b.example.com".to_string()];
        assert_eq!(
            step(&mut w, dir.path(), until),
            (b_only.clone(), vec![a.clone()], None)
        );
        assert_eq!(step(&mut w, dir.path(), at(9000)), (b_only, vec![], None));

        // Deleted: gone at the next load.
        std::fs::remove_file(&b).unwrap();
        assert_eq!(step(&mut w, dir.path(), at(9100)), (vec![], vec![], None));
        // A file that was empty from the start has nothing to hold.
        std::fs::write(&b, "").unwrap();
        assert_eq!(step(&mut w, dir.path(), at(9200)), (vec![], vec![], None));
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
