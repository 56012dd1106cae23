//! Discovery through the gateway: aggregated v2 with resources from the backends, ETags and
//! 304s, content negotiation (406), `Vary`, and `Stale` freshness while a backend is down.

use crate::support;

use crate::support::{eventually, World};
use bytes::Bytes;
use http::Request;
use std::time::Duration;

const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

fn get(path: &str, accept: &str) -> Request<Bytes> {
    Request::get(path)
        .header("accept", accept)
        .body(Bytes::new())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn aggregated_discovery_with_etags_negotiation_and_staleness() {
    let w = World::new();
    let echo = w.backend("a", "a-svc", "a-ns", &w.addon_ca, None).await;
    w.register(
        "a1.json",
        "a.example.com",
        "v1",
        100,
        10,
        "a-svc",
        "a-ns",
        &w.addon_ca,
    );
    w.register(
        "a2.json",
        "a.example.com",
        "v2beta1",
        100,
        20,
        "a-svc",
        "a-ns",
        &w.addon_ca,
    );
    w.register(
        "z.json",
        "z.example.com",
        "v1",
        5000,
        10,
        "a-svc",
        "a-ns",
        &w.addon_ca,
    );
    let mut cfg = w.config(&[(&echo, echo.addr)]);
    cfg.availability.interval = Duration::from_millis(300);
    let gw = w.gateway(cfg).await;
    let c = w.client(Some("alice"));

    let a = c.send(gw.addr, get("/apis", &format!("application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,{V2},application/json"))).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.headers["content-type"], V2);
    assert_eq!(a.headers["vary"], "Accept");
    let doc = a.json();
    assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2");
    let names: Vec<&str> = doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "apiregistration.k8s.io",
            "authentication.k8s.io",
            "authorization.k8s.io",
            "z.example.com",
            "a.example.com"
        ]
    );
    let versions: Vec<&str> = doc["items"][4]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["v2beta1", "v1"]);
    let things = &doc["items"][4]["versions"][0]["resources"][0];
    assert_eq!(
        (things["resource"].as_str(), things["scope"].as_str()),
        (Some("things"), Some("Namespaced"))
    );
    assert_eq!(things["shortNames"], serde_json::json!(["th"]));

    // A matching ETag is a 304; a changed document gets a new ETag.
    let etag = a.headers["etag"].to_str().unwrap().to_string();
    assert!(etag.len() == 130 && etag.starts_with('"'), "{etag}");
    let mut again = get("/apis", V2);
    again
        .headers_mut()
        .insert("if-none-match", etag.parse().unwrap());
    let cached = c.send(gw.addr, again).await;
    assert_eq!(cached.status, 304);
    assert!(cached.body.is_empty());
    let legacy = c.send(gw.addr, get("/apis", "application/json")).await;
    assert_eq!(legacy.json()["kind"], "APIGroupList");
    assert_ne!(legacy.headers["etag"], etag.as_str());
    let beta = c
        .send(
            gw.addr,
            get(
                "/apis",
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
            ),
        )
        .await;
    // kube-apiserver 1.36 serves v2 alone; a client asking only for v2beta1 gets 406.
    beta.assert_status(406);
    c.send(gw.addr, get("/apis", "application/x-unknown"))
        .await
        .assert_status(406);

    // The backend goes away: its versions stay, marked Stale.
    echo.stop();
    let stale = eventually(5, || async {
        let doc = c.send(gw.addr, get("/apis", V2)).await.json();
        doc["items"][4]["versions"][0]["freshness"] == "Stale"
    })
    .await;
    assert!(stale, "versions of a stopped backend were not marked Stale");
    let doc = c.send(gw.addr, get("/apis", V2)).await.json();
    assert_eq!(
        doc["items"][4]["versions"][0]["resources"][0]["resource"],
        "things"
    );
    let mut old = get("/apis", V2);
    old.headers_mut()
        .insert("if-none-match", etag.parse().unwrap());
    assert_eq!(
        c.send(gw.addr, old).await.status,
        200,
        "the ETag did not change with the document"
    );
}

/// An aggregated-discovery version entry the legacy APIResourceList cannot express: a
/// category and a `scale` subresource with its own responseKind and acceptedTypes.
fn rich_entry(version: &str, category: &str) -> serde_json::Value {
    serde_json::json!({
        "version": version,
        "freshness": "Current",
        "resources": [{
            "resource": "gadgets",
            "responseKind": {"group": "a.example.com", "version": version, "kind": "Gadget"},
            "scope": "Cluster",
            "singularResource": "gadget",
            "verbs": ["get", "list"],
            "shortNames": ["gd"],
            "categories": [category],
            "subresources": [{
                "subresource": "scale",
                "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                "acceptedTypes": [{"group": "autoscaling", "version": "v1", "kind": "Scale"}],
                "verbs": ["get", "patch", "update"]
            }]
        }]
    })
}

fn aggregated_list(items: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
                       "metadata": {}, "items": items})
}

/// The `versions` entry of `group`/`version` in an aggregated document.
fn version_of<'a>(
    doc: &'a serde_json::Value,
    group: &str,
    version: &str,
) -> Option<&'a serde_json::Value> {
    doc["items"]
        .as_array()?
        .iter()
        // The core group has no name: upstream writes `"metadata": {}`.
        .find(|g| g["metadata"]["name"].as_str().unwrap_or_default() == group)?["versions"]
        .as_array()?
        .iter()
        .find(|v| v["version"] == version)
}

#[tokio::test(flavor = "multi_thread")]
async fn backends_aggregated_discovery_is_used_else_legacy_is_converted() {
    let w = World::new();
    let agg = w.backend("a", "a-svc", "a-ns", &w.addon_ca, None).await;
    agg.discovery.lock().unwrap().apis_aggregated = Some(aggregated_list(serde_json::json!([
        {"metadata": {"name": "a.example.com"}, "versions": [rich_entry("v1", "first")]}
    ])));
    let legacy = w.backend("b", "b-svc", "b-ns", &w.addon_ca, None).await;
    w.register(
        "a.json",
        "a.example.com",
        "v1",
        100,
        10,
        "a-svc",
        "a-ns",
        &w.addon_ca,
    );
    w.register(
        "b.json",
        "b.example.com",
        "v1",
        100,
        10,
        "b-svc",
        "b-ns",
        &w.addon_ca,
    );
    let mut cfg = w.config(&[(&agg, agg.addr), (&legacy, legacy.addr)]);
    cfg.availability.interval = Duration::from_millis(300);
    let gw = w.gateway(cfg).await;
    let c = w.client(Some("alice"));

    let merged = eventually(5, || async {
        let doc = c.send(gw.addr, get("/apis", V2)).await.json();
        version_of(&doc, "a.example.com", "v1").is_some()
            && version_of(&doc, "b.example.com", "v1").is_some()
    })
    .await;
    assert!(merged, "both backends' versions should be listed");
    let doc = c.send(gw.addr, get("/apis", V2)).await.json();
    // a: the backend's own aggregated entry, as it said it.
    let a = version_of(&doc, "a.example.com", "v1").unwrap();
    assert_eq!(a["freshness"], "Current");
    let gadgets = &a["resources"][0];
    assert_eq!(gadgets["resource"], "gadgets");
    assert_eq!(gadgets["categories"], serde_json::json!(["first"]));
    assert_eq!(gadgets["scope"], "Cluster");
    assert_eq!(gadgets["subresources"][0]["subresource"], "scale");
    assert_eq!(
        gadgets["subresources"][0]["responseKind"],
        serde_json::json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    );
    assert_eq!(
        gadgets["subresources"][0]["acceptedTypes"][0]["kind"],
        "Scale"
    );
    // b: only legacy discovery, converted from its APIResourceList.
    let b = version_of(&doc, "b.example.com", "v1").unwrap();
    let things = &b["resources"][0];
    assert_eq!(things["resource"], "things");
    assert_eq!(things["shortNames"], serde_json::json!(["th"]));
    assert!(things.get("categories").is_none(), "{things}");
    // The legacy backend was asked for /apis with the aggregated Accept list, and answered
    // with something else.
    let asked: Vec<serde_json::Value> = legacy
        .all_requests()
        .into_iter()
        .filter(|r| r["path"] == "/apis")
        .collect();
    assert!(
        !asked.is_empty(),
        "the legacy backend was never asked for /apis"
    );
    assert!(support::seen_header(&asked[0], "accept")[0]
        .starts_with("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"));

    // Refreshes ask again with the ETag (and get 304s) rather than fetching anew.
    let revalidated = eventually(5, || async {
        agg.all_requests()
            .iter()
            .any(|r| r["path"] == "/apis" && !support::seen_header(r, "if-none-match").is_empty())
    })
    .await;
    assert!(revalidated, "no If-None-Match on a refresh of /apis");

    // The backend's discovery changes: the gateway follows on its next check.
    agg.discovery.lock().unwrap().apis_aggregated = Some(aggregated_list(serde_json::json!([
        {"metadata": {"name": "a.example.com"}, "versions": [rich_entry("v1", "second")]}
    ])));
    let followed = eventually(5, || async {
        let doc = c.send(gw.addr, get("/apis", V2)).await.json();
        version_of(&doc, "a.example.com", "v1")
            .is_some_and(|v| v["resources"][0]["categories"] == serde_json::json!(["second"]))
    })
    .await;
    assert!(
        followed,
        "a change of the backend's discovery was not picked up"
    );

    // Gone: the last known entry stays, Stale.
    agg.stop();
    let stale = eventually(5, || async {
        let doc = c.send(gw.addr, get("/apis", V2)).await.json();
        version_of(&doc, "a.example.com", "v1").is_some_and(|v| {
            v["freshness"] == "Stale"
                && v["resources"][0]["categories"] == serde_json::json!(["second"])
        })
    })
    .await;
    assert!(stale, "the stopped backend's entry should stay, Stale");
}

#[tokio::test(flavor = "multi_thread")]
async fn delegate_groups_are_merged_into_apis_and_api_is_the_delegates() {
    let w = World::new();
    // The delegate: a main API server with core v1, apps/v1, a CRD group and a.example.com/v1,
    // which a registered APIService also claims (the registered one wins).
    let main = w
        .backend("main", "kubernetes", "default", &w.addon_ca, None)
        .await;
    let entry = |group: &str, version: &str, resource: &str, kind: &str| {
        serde_json::json!({"version": version, "freshness": "Current", "resources": [{
            "resource": resource, "scope": "Namespaced", "singularResource": "",
            "responseKind": {"group": group, "version": version, "kind": kind},
            "verbs": ["get", "list"]}]})
    };
    {
        let mut d = main.discovery.lock().unwrap();
        d.apis_aggregated = Some(aggregated_list(serde_json::json!([
            {"metadata": {"name": "apps"}, "versions": [entry("apps", "v1", "deployments", "Deployment")]},
            {"metadata": {"name": "stable.example.com"}, "versions": [entry("stable.example.com", "v1", "crontabs", "CronTab")]},
            {"metadata": {"name": "a.example.com"}, "versions": [entry("a.example.com", "v1", "impostors", "Impostor")]},
        ])));
        d.api_legacy = Some(
            serde_json::json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}]}),
        );
        d.api_aggregated = Some(aggregated_list(serde_json::json!([
            {"metadata": {"name": ""}, "versions": [entry("", "v1", "pods", "Pod")]}
        ])));
        d.documents.insert(
            "/openapi/v2".into(),
            serde_json::json!({"swagger": "2.0",
                "paths": {"/apis/apps/v1/deployments": {"get": {}}},
                "definitions": {"io.k8s.api.apps.v1.Deployment": {"type": "object"}}}),
        );
        d.documents.insert(
            "/openapi/v3".into(),
            serde_json::json!({"paths": {
                "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=C0"},
                "apis/apps/v1": {"serverRelativeURL": "/openapi/v3/apis/apps/v1?hash=A1"},
                "apis/a.example.com/v1": {"serverRelativeURL": "/openapi/v3/apis/a.example.com/v1?hash=IMPOSTOR"}}}),
        );
        d.documents.insert(
            "/openapi/v3/apis/apps/v1".into(),
            serde_json::json!({"openapi": "3.0.0", "paths": {"/apis/apps/v1/deployments": {}}}),
        );
    }
    let echo = w.backend("a", "a-svc", "a-ns", &w.addon_ca, None).await;
    echo.discovery.lock().unwrap().documents.insert(
        "/openapi/v3".into(),
        serde_json::json!({"paths": {"apis/a.example.com/v1": {"serverRelativeURL": "/openapi/v3/apis/a.example.com/v1?hash=REAL"}}}),
    );
    w.register(
        "a.json",
        "a.example.com",
        "v1",
        100,
        10,
        "a-svc",
        "a-ns",
        &w.addon_ca,
    );
    let mut cfg = w.config(&[(&echo, echo.addr), (&main, main.addr)]);
    cfg.proxy.delegate = Some(apigw_gateway::config::Delegate {
        host: main.host.clone(),
        port: 443,
        ca_file: Some(w.pki.path("addon-ca.crt")),
        impersonation_token_file: None,
    });
    cfg.availability.interval = Duration::from_millis(300);
    let gw = w.gateway(cfg).await;
    let c = w.client(Some("alice"));

    let listed = eventually(5, || async {
        let doc = c
            .send(gw.addr, get("/apis", "application/json"))
            .await
            .json();
        doc["groups"].as_array().is_some_and(|g| g.len() == 6)
    })
    .await;
    assert!(listed, "the delegate's groups were not merged into /apis");
    let legacy = c
        .send(gw.addr, get("/apis", "application/json"))
        .await
        .json();
    let names: Vec<&str> = legacy["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    // apps at upstream's 17800, the gateway's own review groups, the CRD group at 1000, then
    // the registered a.example.com at 100.
    assert_eq!(
        names,
        [
            "apiregistration.k8s.io",
            "apps",
            "authentication.k8s.io",
            "authorization.k8s.io",
            "stable.example.com",
            "a.example.com"
        ]
    );
    let apps = c.send(gw.addr, get("/apis/apps", "application/json")).await;
    assert_eq!(apps.status, 200);
    assert_eq!(apps.json()["preferredVersion"]["groupVersion"], "apps/v1");

    let doc = c.send(gw.addr, get("/apis", V2)).await.json();
    let deployments = &version_of(&doc, "apps", "v1").unwrap()["resources"][0];
    assert_eq!(deployments["resource"], "deployments");
    assert_eq!(
        version_of(&doc, "stable.example.com", "v1").unwrap()["resources"][0]["resource"],
        "crontabs"
    );
    // The registered APIService wins over the delegate's version of the same group version.
    assert_eq!(
        version_of(&doc, "a.example.com", "v1").unwrap()["resources"][0]["resource"],
        "things"
    );

    // /api is the delegate's, legacy and aggregated, with the gateway's ETags.
    let api = c.send(gw.addr, get("/api", "application/json")).await;
    assert_eq!(api.status, 200);
    let api_doc = api.json();
    assert_eq!(api_doc["kind"], "APIVersions");
    assert_eq!(api_doc["versions"], serde_json::json!(["v1"]));
    assert_eq!(api.headers["etag"].len(), 130);
    let core = c.send(gw.addr, get("/api", V2)).await;
    assert_eq!(core.headers["content-type"], V2);
    let core = core.json();
    assert_eq!(
        version_of(&core, "", "v1").unwrap()["resources"][0]["resource"],
        "pods"
    );

    // OpenAPI: the delegate's spec is merged into v2; its v3 entries join the index (the
    // registered APIService's own entry wins) and their URLs reach the delegate.
    let merged = eventually(5, || async {
        let v2 = c.get(gw.addr, "/openapi/v2").await.json();
        let v3 = c.get(gw.addr, "/openapi/v3").await.json();
        v2["paths"].get("/apis/apps/v1/deployments").is_some()
            && v3["paths"].get("api/v1").is_some()
    })
    .await;
    assert!(merged, "the delegate's OpenAPI was not merged");
    let v2 = c.get(gw.addr, "/openapi/v2").await.json();
    assert!(v2["definitions"]
        .get("io.k8s.api.apps.v1.Deployment")
        .is_some());
    let v3 = c.get(gw.addr, "/openapi/v3").await.json();
    assert_eq!(
        v3["paths"]["apis/apps/v1"]["serverRelativeURL"],
        "/openapi/v3/apis/apps/v1?hash=A1"
    );
    assert_eq!(
        v3["paths"]["apis/a.example.com/v1"]["serverRelativeURL"],
        "/openapi/v3/apis/a.example.com/v1?hash=REAL"
    );
    let apps = c.get(gw.addr, "/openapi/v3/apis/apps/v1?hash=A1").await;
    assert_eq!(apps.status, 200);
    assert_eq!(apps.json()["openapi"], "3.0.0");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_legacy_only_delegate_is_merged_from_its_resource_lists() {
    let w = World::new();
    let main = w
        .backend("main", "kubernetes", "default", &w.addon_ca, None)
        .await;
    {
        let mut d = main.discovery.lock().unwrap();
        let v1 = serde_json::json!({"groupVersion": "stable.example.com/v1", "version": "v1"});
        d.apis_legacy = Some(
            serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [{"name": "stable.example.com", "versions": [v1], "preferredVersion": v1}]}),
        );
        d.api_legacy = Some(serde_json::json!({"kind": "APIVersions", "versions": ["v1"]}));
        d.core = Some(
            serde_json::json!({"kind": "APIResourceList", "groupVersion": "v1",
            "resources": [{"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
                           "verbs": ["get", "list"], "shortNames": ["po"]}]}),
        );
    }
    let mut cfg = w.config(&[(&main, main.addr)]);
    cfg.proxy.delegate = Some(apigw_gateway::config::Delegate {
        host: main.host.clone(),
        port: 443,
        ca_file: Some(w.pki.path("addon-ca.crt")),
        impersonation_token_file: None,
    });
    let gw = w.gateway(cfg).await;
    let c = w.client(Some("alice"));

    let merged = eventually(5, || async {
        let doc = c.send(gw.addr, get("/apis", V2)).await.json();
        version_of(&doc, "stable.example.com", "v1").is_some()
    })
    .await;
    assert!(merged, "the legacy delegate's group was not merged");
    let doc = c.send(gw.addr, get("/apis", V2)).await.json();
    // The echo backend's APIResourceList for /apis/stable.example.com/v1, converted.
    let things = &version_of(&doc, "stable.example.com", "v1").unwrap()["resources"][0];
    assert_eq!(things["resource"], "things");
    assert_eq!(things["shortNames"], serde_json::json!(["th"]));
    let core = c.send(gw.addr, get("/api", V2)).await.json();
    let pods = &version_of(&core, "", "v1").unwrap()["resources"][0];
    assert_eq!(pods["resource"], "pods");
    assert_eq!(pods["shortNames"], serde_json::json!(["po"]));
    let api = c
        .send(gw.addr, get("/api", "application/json"))
        .await
        .json();
    assert_eq!(api["versions"], serde_json::json!(["v1"]));
}
