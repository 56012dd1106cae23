//! APIService manifests: `registry::parse_manifest`, which reads a manifest directory's file
//! (YAML documents, or JSON for `.json`; single objects, `List`s and `APIServiceList`s) and
//! validates each object with `ApiService::from_value`. Input: the file's text; read as
//! `.json` when it starts with `{` or `[`, else as `.yaml`.
//!
//! Checked: nothing panics; every problem names the file; every APIService accepted is valid as
//! upstream's `ValidateAPIService` requires (name `<version>.<group>`, DNS names, priorities
//! and port in range) and validates again, unchanged, from the object it keeps; every
//! APIServiceBackend accepted targets its APIService's group version, has a service, and
//! validates again, unchanged, too.
#![no_main]

mod common;

use apigw_registry::{dns1123_subdomain, parse_manifest, ApiService, Backend, Manifest};

libfuzzer_sys::fuzz_target!(init: common::report_stack_overflows(), |data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let file = if text.starts_with(['{', '[']) {
        "fuzz.json"
    } else {
        "fuzz.yaml"
    };
    match parse_manifest(text, file) {
        Err(problems) => {
            assert!(!problems.is_empty());
            for p in &problems {
                assert_eq!(p.file, file);
                let _ = p.to_string();
            }
        }
        Ok(objects) => {
            for object in objects {
                let svc = match object {
                    Manifest::ApiService(svc) => svc,
                    Manifest::Backend(b) => {
                        let t = &b.target;
                        assert_eq!(t.name, format!("{}/{}", b.api_service, b.name));
                        assert_eq!(b.api_service, format!("{}.{}", t.version, t.group));
                        assert!(dns1123_subdomain(&t.group).is_ok());
                        assert!(t.service.as_ref().is_some_and(|s| s.port >= 1));
                        let again = Backend::from_value(b.object().clone());
                        assert_eq!(again.ok().as_ref(), Some(&b), "revalidating the kept object");
                        continue;
                    }
                };
                assert_eq!(svc.name, format!("{}.{}", svc.version, svc.group));
                assert!(svc.group.is_empty() || dns1123_subdomain(&svc.group).is_ok());
                assert!((1..=20000).contains(&svc.group_priority_minimum));
                assert!((1..=1000).contains(&svc.version_priority));
                if let Some(s) = &svc.service {
                    assert!(s.port >= 1);
                    let _ = s.host();
                }
                let again = ApiService::from_value(svc.object.clone());
                assert_eq!(
                    again.ok().as_ref(),
                    Some(&svc),
                    "revalidating the kept object"
                );
            }
        }
    }
});
