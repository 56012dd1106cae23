//! Request attributes: `RequestInfo::of`, kube-apiserver's RequestInfo as the gateway derives it
//! from a method, path and query (`authz::Attributes`) and the request's kind (short, watch,
//! upgrade, stream). Input: a request head as text (see `common::request`).
//!
//! Checked: nothing panics; the attributes are those of the path, method and query alone; the
//! fields of a resource request are single path segments; the verb is kube's for the method;
//! selectors come only with list, watch and deletecollection; the kind agrees with the
//! attributes and headers, and only short requests get a deadline.
#![no_main]

mod common;

use apigw_gateway::fuzzing::{RequestInfo, RequestKind};
use apigw_request::segments;
use apigw_request::Attributes;
use apigw_request::Policy;
use http::{header, Version};
use std::time::{Duration, Instant};

libfuzzer_sys::fuzz_target!(init: common::report_stack_overflows(), |data: &[u8]| {
    let Some(req) = common::request(data) else {
        return;
    };
    let uri = req.uri();
    let segs = segments(uri.path());
    let client = ([192, 0, 2, 1], 40000).into();
    // An APIService's own policy: a shorter timeout, and `console` long-running too.
    let policy = Policy {
        request_timeout: Some(Duration::from_secs(5)),
        long_running_subresources: vec!["console".into()],
    };
    let info = RequestInfo::of(
        &req,
        &segs,
        client,
        None,
        Instant::now(),
        Duration::from_secs(60),
        Some(&policy),
    );
    // Annotated: `attrs` is shared (an `Arc`) on main, a plain value before.
    let a: &Attributes = &info.attrs;
    assert_eq!(
        a,
        &Attributes::from_request(req.method(), uri.path(), uri.query()),
        "the attributes depend on more than method, path and query"
    );
    assert_eq!(a.path, uri.path());
    let method = req.method().as_str().to_ascii_lowercase();
    if a.resource_request {
        // Empty segments are skipped, as kube's RequestInfo trims slashes (the path check
        // refuses such paths later, before authorization).
        let first = segs.iter().find(|s| !s.is_empty());
        assert!(
            matches!(first, Some(&"api" | &"apis")),
            "a resource request at {:?}",
            uri.path()
        );
        assert!(!a.resource.is_empty());
        for field in [
            &a.group,
            &a.version,
            &a.namespace,
            &a.resource,
            &a.subresource,
        ] {
            assert!(!field.contains('/'), "{field:?} spans segments");
        }
        assert!(
            !a.name.contains('/') || a.name.is_empty(),
            "name {:?}",
            a.name
        );
        let verbs = [
            "get",
            "list",
            "watch",
            "create",
            "update",
            "patch",
            "delete",
            "deletecollection",
        ];
        assert!(
            verbs.contains(&a.verb.as_str()) || a.verb == method,
            "verb {:?}",
            a.verb
        );
    } else {
        assert_eq!(a.verb, method);
        assert!(a.resource.is_empty() && a.name.is_empty() && a.subresource.is_empty());
    }
    if a.label_selector.is_some() || a.field_selector.is_some() {
        assert!(matches!(
            a.verb.as_str(),
            "list" | "watch" | "deletecollection"
        ));
    }
    let _ = a.full_resource();

    let upgrade_asked = req.version() == Version::HTTP_11
        && req.headers().contains_key(header::UPGRADE)
        && req.headers().contains_key(header::CONNECTION);
    match info.kind {
        RequestKind::Upgrade => assert!(upgrade_asked, "an upgrade without its headers"),
        RequestKind::Watch => assert_eq!(a.verb, "watch"),
        RequestKind::Stream => assert!(matches!(
            a.subresource.as_str(),
            "exec" | "attach" | "portforward" | "proxy" | "log" | "console"
        )),
        RequestKind::Short => assert!(a.verb != "watch"),
    }
    assert_eq!(info.kind.long_running(), info.deadline.is_none());
    let by_policy = info.kind == RequestKind::Stream && a.subresource == "console";
    assert!(by_policy || info.kind == RequestKind::of(&req, a));
});
