//! Discovery through the gateway: aggregated v2 with resources from the backends, ETags and
//! 304s, content negotiation (406), `Vary`, and `Stale` freshness while a backend is down.

mod support;

use bytes::Bytes;
use http::Request;
use std::time::Duration;
use support::{eventually, World};

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
    cfg.availability_interval = Duration::from_millis(300);
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
    assert_eq!(beta.json()["apiVersion"], "apidiscovery.k8s.io/v2beta1");
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
