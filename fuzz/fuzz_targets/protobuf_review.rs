//! The protobuf reviews: `gateway::protobuf::review_spec`, which reads the body kubectl sends
//! to the self reviews (whoami, auth can-i) as `application/vnd.kubernetes.protobuf`: the
//! `k8s\0` magic, a `runtime.Unknown` envelope, then the review's spec. Input: the first byte
//! picks the resource (selfsubjectaccessreviews, selfsubjectrulesreviews, selfsubjectreviews),
//! the rest is the body.
//!
//! Checked: nothing panics; a body without the magic is refused; what is decoded has the shape
//! the review handlers read (an object of strings, a namespace string, or null).
#![no_main]

mod common;

use apigw_gateway::fuzzing::review_spec;
use serde_json::Value;

const RESOURCES: [&str; 3] = [
    "selfsubjectaccessreviews",
    "selfsubjectrulesreviews",
    "selfsubjectreviews",
];

libfuzzer_sys::fuzz_target!(init: common::report_stack_overflows(), |data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let resource = RESOURCES[usize::from(pick) % RESOURCES.len()];
    let spec = match review_spec(resource, body) {
        Ok(spec) => spec,
        Err(e) => {
            assert!(!e.is_empty());
            return;
        }
    };
    assert!(body.starts_with(b"k8s\0"), "decoded without the magic");
    match resource {
        "selfsubjectaccessreviews" => {
            let Value::Object(spec) = &spec else {
                panic!("access review spec {spec:?}");
            };
            for (key, attrs) in spec {
                assert!(matches!(
                    key.as_str(),
                    "resourceAttributes" | "nonResourceAttributes"
                ));
                let Value::Object(attrs) = attrs else {
                    panic!("{key}: {attrs:?}");
                };
                assert!(attrs.values().all(|v| v.is_string() || v.is_null()));
            }
        }
        "selfsubjectrulesreviews" => assert!(spec["namespace"].is_string()),
        _ => assert!(spec.is_null()),
    }
});
