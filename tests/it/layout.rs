//! The layout's rules, checked on the sources (issue 51): the crates depend one way
//! (`apigw-core` and the vocabulary `apigw-request` on no other apigw crate, no concern on the
//! gateway), and inside every crate no top-level module reaches itself through `crate::`
//! paths of other modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text, less comment lines, of `path`: a `.rs` file, or every one under a directory.
fn sources(path: &Path, out: &mut Vec<String>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
            sources(&entry.path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let code: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        out.push(code.join("\n"));
    }
}

/// Every crate's `src` directory: the binary's and each library's.
fn crate_sources() -> Vec<PathBuf> {
    let mut dirs = vec![root().join("src")];
    for entry in std::fs::read_dir(root().join("crates"))
        .expect("crates/")
        .flatten()
    {
        dirs.push(entry.path().join("src"));
    }
    dirs
}

/// The apigw crates `manifest` depends on, in `[dependencies]` only.
fn apigw_dependencies(manifest: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).expect("Cargo.toml");
    let deps = text
        .split("\n[dependencies]\n")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap_or_default();
    deps.lines()
        .filter_map(|l| l.split_once(" = ").map(|(name, _)| name.trim()))
        .filter(|name| name.starts_with("apigw-"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_crates_depend_one_way() {
    for base in ["apigw-core", "apigw-request", "apigw-expr"] {
        let deps = apigw_dependencies(&root().join("crates").join(base).join("Cargo.toml"));
        assert!(deps.is_empty(), "{base} depends on {deps:?}");
    }
    for entry in std::fs::read_dir(root().join("crates"))
        .expect("crates/")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().to_string();
        let deps = apigw_dependencies(&entry.path().join("Cargo.toml"));
        // The bench and the test runner drive a whole gateway; nothing else below the
        // binary may.
        if !["apigw-bench", "apigw-testrun", "apigw-gateway"].contains(&name.as_str()) {
            assert!(
                !deps.contains("apigw-gateway"),
                "{name} depends on the gateway"
            );
        }
    }
}

#[test]
fn no_crate_has_an_import_loop_between_its_modules() {
    for src in crate_sources() {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for entry in std::fs::read_dir(&src).expect("src").flatten() {
            let path = entry.path();
            let name = path
                .file_stem()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name == "lib" || name == "main" || name.is_empty() {
                continue;
            }
            let mut texts = Vec::new();
            sources(&path, &mut texts);
            let uses = texts
                .iter()
                .flat_map(|t| t.split("crate::").skip(1))
                .map(|rest| {
                    rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
                .filter(|m| m != name)
                .collect();
            graph.insert(name.to_string(), uses);
        }
        for start in graph.keys() {
            let mut seen = BTreeSet::new();
            let mut stack: Vec<&String> = graph[start].iter().collect();
            while let Some(m) = stack.pop() {
                assert!(
                    m != start,
                    "{}: {start} imports itself through another module: {graph:#?}",
                    src.display()
                );
                if seen.insert(m.clone()) {
                    stack.extend(graph.get(m).into_iter().flatten());
                }
            }
        }
    }
}
