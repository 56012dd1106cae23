//! Discovery merging of what backends return: a backend's `/apis` read as aggregated discovery
//! or legacy (`proxy::fetch::parse`, `Index::get`), its APIResourceLists as the availability
//! check keeps them, merged into the gateway's documents (`discovery::render::RenderCache`:
//! legacy `/apis`, aggregated v2 and v2beta1, `/apis/<group>`), legacy lists converted
//! (`discovery::aggregated::resources`), and the OpenAPI merges (`discovery::openapi`).
//!
//! Input: sections separated by a `%%` line: the backend's `/apis` answer; the
//! APIResourceLists of three APIServices (two versions of wardle.example.com, one of
//! a.example.com); OpenAPI v2 specs and v3 indexes after that. The first byte's bits say which
//! backends are available.
//!
//! Checked: nothing panics; every merged document is JSON whatever the backends sent, and
//! rendering the same state again gives the same bytes.
#![no_main]

mod common;

use apigw_availability::{Condition, State};
use apigw_discovery::{aggregated, openapi, render::RenderCache};
use apigw_proxy::fetch::{parse, Answer};
use apigw_registry::{ApiService, Snapshot};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

fn services() -> &'static [ApiService] {
    static SERVICES: OnceLock<Vec<ApiService>> = OnceLock::new();
    SERVICES.get_or_init(|| {
        [
            ("wardle.example.com", "v1beta1", 1000, 15),
            ("wardle.example.com", "v1alpha1", 1000, 10),
            ("a.example.com", "v1", 2000, 1),
        ]
        .into_iter()
        .map(|(group, version, gpm, vp)| {
            ApiService::from_value(json!({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": format!("{version}.{group}")},
                "spec": {"group": group, "version": version, "groupPriorityMinimum": gpm,
                    "versionPriority": vp, "service": {"name": "api", "namespace": "wardle"}}}))
            .expect("a valid APIService")
        })
        .collect()
    })
}

libfuzzer_sys::fuzz_target!(init: common::report_stack_overflows(), |data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let sections: Vec<&str> = text.split("\n%%\n").collect();
    let section = |i: usize| sections.get(i).copied().unwrap_or_default();

    let apis = parse(section(0).as_bytes());
    let services = services();
    let mut states = HashMap::new();
    for (i, svc) in services.iter().enumerate() {
        // As the availability check keeps a backend's answer.
        let resources = serde_json::from_str::<Value>(section(i + 1))
            .ok()
            .filter(|doc| doc.get("kind").and_then(Value::as_str) == Some("APIResourceList"));
        if let Some(list) = &resources {
            let converted = aggregated::resources(list);
            assert!(converted.iter().all(Value::is_object));
        }
        let aggregated = match &apis {
            Answer::Aggregated(index) => index.get(&svc.group, &svc.version).cloned(),
            Answer::Legacy(_) => None,
        };
        let condition = Condition {
            available: flags & (1 << i) != 0,
            reason: "Passed",
            message: String::new(),
            last_transition: SystemTime::UNIX_EPOCH,
        };
        let state = State {
            condition,
            resources: resources.map(Arc::new),
            aggregated,
            members: None,
        };
        states.insert(svc.name.clone(), Arc::new(state));
    }
    let snapshot = Snapshot::new(services.iter().cloned());
    let cache = RenderCache::default();
    let first = cache.render(&snapshot, &states, &[], &[], (1, 1, 1));
    let again = cache.render(&snapshot, &states, &[], &[], (1, 1, 2));
    let docs = |d: &apigw_discovery::Documents| -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<(String, Vec<u8>)> = d
            .apis
            .iter()
            .chain(d.api.iter())
            .map(|doc| (doc.content_type.to_string(), doc.bytes.to_vec()))
            .collect();
        let mut groups: Vec<_> = d.groups.iter().collect();
        groups.sort_by(|a, b| a.0.cmp(b.0));
        out.extend(
            groups
                .into_iter()
                .map(|(name, doc)| (name.clone(), doc.bytes.to_vec())),
        );
        out
    };
    let (first, again) = (docs(&first), docs(&again));
    for (what, bytes) in &first {
        if let Err(e) = serde_json::from_slice::<Value>(bytes) {
            panic!("{what}: not JSON ({e}): {}", String::from_utf8_lossy(bytes));
        }
    }
    assert_eq!(first, again, "the same state rendered differently");

    let later: Vec<Value> = sections
        .iter()
        .skip(4)
        .filter_map(|s| serde_json::from_str(s).ok())
        .collect();
    let v2 = openapi::merge_v2(later.iter());
    if let Some(paths) = later.first().and_then(|s| s["paths"].as_object()) {
        for (path, item) in paths {
            assert_eq!(
                &v2["paths"][path], item,
                "the first spec's {path} was replaced"
            );
        }
    }
    let v3 = openapi::merge_v3_index(services.iter().zip(later.iter()), later.last());
    assert!(v3["paths"].is_object());
});
