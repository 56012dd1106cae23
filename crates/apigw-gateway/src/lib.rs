//! The gateway: flags and YAML merged into one config; authentication and authorization; the
//! APIService registry; the availability controller; merged discovery and OpenAPI; backend
//! connections and forwarding; cluster mode; metrics; the audit log; and the request pipeline
//! tying them together (`gateway`). Built on `apigw-core`.

pub mod audit;
pub use apigw_authn as authn;
pub use apigw_authz as authz;
pub use apigw_availability as availability;
pub mod cluster;
pub mod config;
pub use apigw_discovery as discovery;
pub use apigw_expr as expr;
pub use apigw_flowcontrol as flowcontrol;
#[doc(hidden)]
pub mod fuzzing;
pub mod gateway;
mod metrics;
pub use apigw_proxy as proxy;
pub use apigw_registry as registry;

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

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

    /// The modules of this crate import one another in one direction: no module reaches
    /// itself through `crate::` paths (issue 51).
    #[test]
    fn top_level_modules_import_without_a_loop() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for entry in std::fs::read_dir(&src).expect("src").flatten() {
            let path = entry.path();
            let name = path
                .file_stem()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name == "lib" || name.is_empty() {
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
                if m == start {
                    panic!("{start} imports itself through another module: {graph:#?}");
                }
                if seen.insert(m.clone()) {
                    stack.extend(graph.get(m).into_iter().flatten());
                }
            }
        }
    }
}
