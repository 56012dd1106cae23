//! Upgrade handling: which requests are upgrades (`RequestKind::of`: HTTP/1.1 with an
//! `Upgrade` header that `Connection` names) and the hop-by-hop headers the proxy drops
//! before forwarding (`proxy::remove_hop_by_hop`, on requests with the upgrade flag the kind
//! gives, and on responses without it). Input: a request head as text (see `common::request`).
//!
//! Checked: no hop-by-hop header, and no header `Connection` names, is forwarded; an upgrade
//! keeps its `Upgrade` values and sends exactly `Connection: Upgrade`; anything else loses both;
//! every other header passes unchanged.
#![no_main]

mod common;

use apigw_gateway::fuzzing::RequestKind;
use apigw_proxy::remove_hop_by_hop;
use apigw_request::Attributes;
use http::{header, HeaderMap, HeaderName, Version};

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

libfuzzer_sys::fuzz_target!(init: common::report_stack_overflows(), |data: &[u8]| {
    let Some(req) = common::request(data) else {
        return;
    };
    let attrs = Attributes::from_request(req.method(), req.uri().path(), req.uri().query());
    let kind = RequestKind::of(&req, &attrs);
    let upgrade = kind == RequestKind::Upgrade;
    if upgrade {
        assert_eq!(req.version(), Version::HTTP_11);
        assert!(req.headers().contains_key(header::UPGRADE));
    }
    check(req.headers(), upgrade);
    // A backend's response goes through the same function, never as an upgrade.
    check(req.headers(), false);
});

fn check(before: &HeaderMap, upgrade: bool) {
    let mut after = before.clone();
    remove_hop_by_hop(&mut after, upgrade);
    let listed: Vec<HeaderName> = before
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in HOP_BY_HOP.iter().skip(1) {
        assert!(!after.contains_key(*name), "{name} forwarded");
    }
    for name in &listed {
        if *name == header::CONNECTION || (upgrade && *name == header::UPGRADE) {
            continue;
        }
        assert!(
            !after.contains_key(name),
            "{name}, named by Connection, forwarded"
        );
    }
    if upgrade {
        let connection: Vec<_> = after.get_all(header::CONNECTION).iter().collect();
        assert_eq!(connection, [&"Upgrade"]);
        let sent: Vec<_> = after.get_all(header::UPGRADE).iter().collect();
        let asked: Vec<_> = before.get_all(header::UPGRADE).iter().collect();
        assert_eq!(sent, asked, "the upgrade's protocols changed");
    } else {
        assert!(!after.contains_key(header::CONNECTION));
        assert!(!after.contains_key(header::UPGRADE));
    }
    for name in before.keys() {
        if HOP_BY_HOP.contains(&name.as_str()) || *name == header::UPGRADE || listed.contains(name)
        {
            continue;
        }
        let a: Vec<_> = before.get_all(name).iter().collect();
        let b: Vec<_> = after.get_all(name).iter().collect();
        assert_eq!(a, b, "{name} changed on the way");
    }
}
