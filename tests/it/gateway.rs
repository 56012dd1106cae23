//! End to end over loopback TLS: a gateway with a watched manifest directory in front of echo
//! backends, driven by a TLS client with generated certificates.

use crate::support;

use crate::support::{eventually, seen_header, World};
use bytes::Bytes;
use http::Request;

struct Setup {
    world: World,
    gw: support::Gateway,
    good: support::Echo,
    wrong_name: support::Echo,
    wrong_ca: support::Echo,
}

async fn setup() -> Setup {
    let world = World::new();
    let good = world
        .backend("good", "good-svc", "good-ns", &world.addon_ca, None)
        .await;
    let wrong_name = world
        .backend(
            "wn",
            "wn-svc",
            "wn-ns",
            &world.addon_ca,
            Some("someone-else.other.svc"),
        )
        .await;
    let wrong_ca = world
        .backend("wc", "wc-svc", "wc-ns", &world.rogue_ca, None)
        .await;
    world.register(
        "good-v1.json",
        "good.example.com",
        "v1",
        2000,
        15,
        "good-svc",
        "good-ns",
        &world.addon_ca,
    );
    world.register(
        "good-v2.json",
        "good.example.com",
        "v2beta1",
        1000,
        20,
        "good-svc",
        "good-ns",
        &world.addon_ca,
    );
    world.register(
        "wn.json",
        "wn.example.com",
        "v1",
        500,
        10,
        "wn-svc",
        "wn-ns",
        &world.addon_ca,
    );
    world.register(
        "wc.json",
        "wc.example.com",
        "v1",
        500,
        10,
        "wc-svc",
        "wc-ns",
        &world.addon_ca,
    );
    let cfg = world.config(&[
        (&good, good.addr),
        (&wrong_name, wrong_name.addr),
        (&wrong_ca, wrong_ca.addr),
    ]);
    let gw = world.gateway(cfg).await;
    Setup {
        world,
        gw,
        good,
        wrong_name,
        wrong_ca,
    }
}

const ECHO: &str = "/apis/good.example.com/v1/namespaces/ns1/things/echo";

#[tokio::test]
async fn discovery_lists_groups_in_aggregator_order() {
    let s = setup().await;
    let list = s.world.client(Some("alice")).get(s.gw.addr, "/apis").await;
    assert_eq!(list.status, 200);
    let body = list.json();
    assert_eq!(body["kind"], "APIGroupList");
    let names: Vec<&str> = body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "apiregistration.k8s.io",
            "authentication.k8s.io",
            "authorization.k8s.io",
            "good.example.com",
            "wc.example.com",
            "wn.example.com"
        ]
    );
    let group = s
        .world
        .client(Some("alice"))
        .get(s.gw.addr, "/apis/good.example.com")
        .await
        .json();
    assert_eq!(group["kind"], "APIGroup");
    assert_eq!(group["preferredVersion"]["version"], "v2beta1");
    assert_eq!(group["versions"][1]["groupVersion"], "good.example.com/v1");
}

#[tokio::test]
async fn cert_identity_reaches_backend_and_spoofed_headers_do_not() {
    let s = setup().await;
    let req = Request::post(format!("{ECHO}?x=1&y=%2F&z=a+b"))
        .header("X-Remote-User", "mallory")
        .header("x-remote-group", "system:masters")
        .header("X-REMOTE-EXTRA-scopes", "all")
        .header("X-Remote-Uid", "0")
        .header("Impersonate-User", "mallory")
        .header("Impersonate-Group", "system:masters")
        .header("Impersonate-Extra-Foo", "bar")
        .header("Authorization", "Bearer s3cr3t-token-bob")
        .header("Content-Type", "application/json")
        .body(Bytes::from_static(b"{\"hello\":1}"))
        .unwrap();
    let a = s.world.client(Some("alice")).send(s.gw.addr, req).await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    let seen = a.json();
    assert_eq!(seen["peer_cn"], "front-proxy-client");
    assert_eq!(seen["method"], "POST");
    assert_eq!(seen["query"], "x=1&y=%2F&z=a+b");
    assert_eq!(seen["body"], "{\"hello\":1}");
    assert_eq!(a.seen("x-remote-user"), ["alice"]);
    assert_eq!(
        a.seen("x-remote-group"),
        ["team-a", "team-b", "system:authenticated"]
    );
    for h in [
        "authorization",
        "impersonate-user",
        "impersonate-group",
        "impersonate-extra-foo",
        "x-remote-extra-scopes",
        "x-remote-uid",
    ] {
        assert!(a.seen(h).is_empty(), "backend saw {h}");
    }
    assert_eq!(a.seen("x-forwarded-proto"), ["https"]);
    assert_eq!(a.seen("x-forwarded-for"), ["127.0.0.1"]);
    // Ordinary requests travel over pooled HTTP/1.1 connections (watches share h2 ones),
    // naming the service.
    assert_eq!(seen["version"], "HTTP/1.1");
    assert_eq!(seen["authority"], "good-svc.good-ns.svc:443");
    // Origin form and `Host`, as RFC 9112 §3.2 requires and strict servers (Go, nginx) check.
    assert_eq!(seen["target"], format!("{ECHO}?x=1&y=%2F&z=a+b"));
    assert_eq!(a.seen("host"), ["good-svc.good-ns.svc:443"]);
    assert_eq!(a.headers["x-backend"], "echo");
    // The client is told its impersonation was set aside.
    let warning = a.headers["warning"].to_str().unwrap();
    assert!(
        warning.starts_with("299 - \"Impersonate-* headers ignored"),
        "{warning}"
    );
}

#[tokio::test]
async fn an_http2_client_request_leaves_as_http1_with_host_and_without_expect() {
    let s = setup().await;
    for client in [
        s.world.client(Some("alice")).h2(),
        s.world.client(Some("alice")),
    ] {
        let req = Request::post(ECHO)
            .header("Expect", "100-continue")
            .header("Content-Type", "application/json")
            .body(Bytes::from_static(b"{}"))
            .unwrap();
        let a = client.send(s.gw.addr, req).await;
        assert_eq!(a.status, 200, "{:?}", a.body);
        let seen = a.json();
        assert_eq!(seen["version"], "HTTP/1.1");
        assert_eq!(seen["target"], ECHO);
        assert_eq!(a.seen("host"), ["good-svc.good-ns.svc:443"]);
        assert!(a.seen("expect").is_empty(), "{seen}");
        assert_eq!(seen["body"], "{}");
    }
}

#[tokio::test]
async fn token_identity_reaches_backend_without_the_token() {
    let s = setup().await;
    let req = Request::get(ECHO)
        .header("Authorization", "Bearer s3cr3t-token-bob")
        .body(Bytes::new())
        .unwrap();
    let a = s.world.client(None).send(s.gw.addr, req).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.seen("x-remote-user"), ["bob"]);
    assert_eq!(a.seen("x-remote-uid"), ["uid-bob"]);
    assert_eq!(
        a.seen("x-remote-group"),
        ["devs", "ops", "system:authenticated"]
    );
    assert!(a.seen("authorization").is_empty());
}

#[tokio::test]
async fn no_bad_or_untrusted_credentials_get_401_and_never_reach_backend() {
    let s = setup().await;
    let anon = s.world.client(None).get(s.gw.addr, ECHO).await;
    anon.assert_status(401);
    let bad = Request::get(ECHO)
        .header("Authorization", "Bearer wrong")
        .body(Bytes::new())
        .unwrap();
    s.world
        .client(None)
        .send(s.gw.addr, bad)
        .await
        .assert_status(401);
    // A certificate from an unknown CA fails the handshake, as with kube-apiserver.
    let rogue = s
        .world
        .client(Some("rogue"))
        .try_send(s.gw.addr, Request::get(ECHO).body(Bytes::new()).unwrap())
        .await;
    if let Ok(a) = rogue {
        a.assert_status(401);
    }
    assert!(
        s.good.requests().is_empty(),
        "a request without valid credentials reached the backend"
    );
    // discovery needs credentials too
    s.world
        .client(None)
        .get(s.gw.addr, "/apis")
        .await
        .assert_status(401);
}

#[tokio::test]
async fn unverifiable_backends_are_503_and_see_nothing() {
    let s = setup().await;
    let c = s.world.client(Some("alice"));
    let wn = c.get(s.gw.addr, "/apis/wn.example.com/v1/things").await;
    let msg = wn.assert_status(503)["message"]
        .as_str()
        .unwrap()
        .to_string();
    // The availability controller found the backend unverifiable, so the proxy fails fast
    // with its reason, as kube-aggregator does.
    assert!(msg.starts_with("service unavailable: "), "{msg}");
    assert!(msg.contains("FailedDiscoveryCheck"), "{msg}");
    assert!(
        msg.contains("certificate not valid for name \"wn-svc.wn-ns.svc\""),
        "the message should name the expected name: {msg}"
    );
    let wc = c.get(s.gw.addr, "/apis/wc.example.com/v1/things").await;
    let msg = wc.assert_status(503)["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("UnknownIssuer") || msg.contains("unknown issuer"),
        "{msg}"
    );
    assert!(s.wrong_name.requests().is_empty() && s.wrong_ca.requests().is_empty());
}

#[tokio::test]
async fn backend_answers_pass_through_and_redirects_are_refused() {
    let s = setup().await;
    let c = s.world.client(Some("alice"));
    let conflict = c
        .get(
            s.gw.addr,
            "/apis/good.example.com/v1/namespaces/ns1/things/conflict",
        )
        .await;
    conflict.assert_status(409);
    assert_eq!(conflict.headers["x-backend"], "echo");
    let redirect = c
        .get(
            s.gw.addr,
            "/apis/good.example.com/v1/namespaces/ns1/things/redirect",
        )
        .await;
    let st = redirect.assert_status(502);
    assert!(st["message"].as_str().unwrap().contains("redirect"), "{st}");
    for method in ["PUT", "PATCH", "DELETE"] {
        let body = Bytes::from(vec![b'x'; 300_000]);
        let req = Request::builder()
            .method(method)
            .uri(ECHO)
            .body(body)
            .unwrap();
        let a = c.send(s.gw.addr, req).await;
        assert_eq!(a.status, 200);
        let seen = a.json();
        assert_eq!(seen["method"], method);
        assert_eq!(seen["body_len"], 300_000);
    }
}

#[tokio::test]
async fn http2_front_door_proxies_too() {
    let s = setup().await;
    let a = s
        .world
        .client(Some("alice"))
        .h2()
        .get(s.gw.addr, &format!("{ECHO}?q=1"))
        .await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    assert_eq!(a.seen("x-remote-user"), ["alice"]);
    assert_eq!(a.json()["query"], "q=1");
}

#[tokio::test]
async fn unknown_paths_are_404_status_and_health_is_public() {
    let s = setup().await;
    let c = s.world.client(Some("alice"));
    c.get(s.gw.addr, "/apis/nothing.example.com/v1/things")
        .await
        .assert_status(404);
    c.get(s.gw.addr, "/apis/nothing.example.com")
        .await
        .assert_status(404);
    c.get(s.gw.addr, "/nope").await.assert_status(404);
    for p in ["/healthz", "/livez", "/readyz"] {
        let a = s.world.client(None).get(s.gw.addr, p).await;
        assert_eq!((a.status, &a.body[..]), (200, &b"ok"[..]), "{p}");
    }
    assert_eq!(
        s.world.client(None).get(s.gw.addr, "/version").await.json()["major"],
        "1"
    );
}

#[tokio::test]
async fn manifests_hot_reload_and_a_bad_file_keeps_the_last_good_registry() {
    let s = setup().await;
    let c = s.world.client(Some("alice"));
    let groups = |a: support::Answer| -> Vec<String> {
        a.json()["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap().to_string())
            .collect()
    };
    std::fs::write(
        s.world.pki.path("apiservices/zz-bad.yaml"),
        "kind: APIService\nspec: {group: bad.example.com, version: v1,\n",
    )
    .unwrap();
    std::fs::write(s.world.pki.path("apiservices/zz-invalid.json"),
        r#"{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1.inv.example.com"},"spec":{"group":"inv.example.com","version":"v1","groupPriorityMinimum":999999,"versionPriority":1}}"#).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let names = groups(c.get(s.gw.addr, "/apis").await);
    assert!(names.contains(&"good.example.com".to_string()), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n == "bad.example.com" || n == "inv.example.com"),
        "{names:?}"
    );
    // the good registry still proxies
    assert_eq!(c.get(s.gw.addr, ECHO).await.status, 200);
    std::fs::remove_file(s.world.pki.path("apiservices/zz-bad.yaml")).unwrap();
    std::fs::remove_file(s.world.pki.path("apiservices/zz-invalid.json")).unwrap();
    s.world.register(
        "late.json",
        "late.example.com",
        "v1",
        100,
        10,
        "good-svc",
        "good-ns",
        &s.world.addon_ca,
    );
    let appeared = eventually(5, || async {
        groups(c.get(s.gw.addr, "/apis").await).contains(&"late.example.com".to_string())
    })
    .await;
    assert!(appeared, "a new manifest did not show in /apis");
    let a = c.get(s.gw.addr, "/apis/late.example.com/v1/x").await;
    assert_eq!(a.status, 200);
    assert_eq!(seen_header(&a.json(), "x-remote-user"), ["alice"]);
    std::fs::remove_file(s.world.pki.path("apiservices/wc.json")).unwrap();
    let gone = eventually(5, || async {
        !groups(c.get(s.gw.addr, "/apis").await).contains(&"wc.example.com".to_string())
    })
    .await;
    assert!(gone, "a removed manifest stayed in /apis");
    c.get(s.gw.addr, "/apis/wc.example.com/v1/x")
        .await
        .assert_status(404);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_delegate_by_impersonation_gets_the_gateways_token_and_impersonate_headers() {
    let w = World::new();
    let main = w
        .backend("main", "kubernetes", "default", &w.addon_ca, None)
        .await;
    let token = w.pki.path("delegate-token");
    std::fs::write(&token, "gw-token-1\n").unwrap();
    let mut cfg = w.config(&[(&main, main.addr)]);
    cfg.proxy.delegate = Some(apigw_gateway::config::Delegate {
        host: main.host.clone(),
        port: 443,
        ca_file: Some(w.pki.path("addon-ca.crt")),
        impersonation_token_file: Some(token.clone()),
    });
    let gw = w.gateway(cfg).await;
    let alice = w.client(Some("alice"));
    let spoofed = Request::get("/api/v1/namespaces")
        .header("Impersonate-User", "system:admin")
        .header("X-Remote-User", "mallory")
        .header("Authorization", "Bearer alices-own")
        .body(Bytes::new())
        .unwrap();
    alice.send(gw.addr, spoofed).await;
    let last = |path: &str| {
        main.all_requests()
            .into_iter()
            .rev()
            .find(|r| r["path"] == path)
            .expect("the delegate saw the request")
    };
    let seen = last("/api/v1/namespaces");
    assert_eq!(seen_header(&seen, "authorization"), ["Bearer gw-token-1"]);
    assert_eq!(seen_header(&seen, "impersonate-user"), ["alice"]);
    assert_eq!(
        seen_header(&seen, "impersonate-group"),
        ["team-a", "team-b", "system:authenticated"]
    );
    assert!(seen_header(&seen, "x-remote-user").is_empty());
    // The token is the gateway's credential: no proxy client certificate besides it.
    assert!(seen["peer_cn"].is_null());
    // The gateway's own discovery requests use the token and impersonate nobody.
    let own = last("/apis");
    assert_eq!(seen_header(&own, "authorization"), ["Bearer gw-token-1"]);
    assert!(seen_header(&own, "impersonate-user").is_empty());

    // A rotated token (as a projected service account token is) applies without a restart.
    std::fs::write(&token, "gw-token-2").unwrap();
    let rotated = eventually(10, || async {
        alice.get(gw.addr, "/api/v1/pods").await;
        seen_header(&last("/api/v1/pods"), "authorization") == ["Bearer gw-token-2"]
    })
    .await;
    assert!(rotated, "the rotated token was not used");
}

/// Whether `/apis` through the gateway lists `group` and `/apis/<group>/v1` is proxied (not 404).
async fn serves(c: &support::Client, gw: std::net::SocketAddr, group: &str) -> bool {
    let listed = c.get(gw, "/apis").await.json()["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["name"] == group);
    let proxied = c.get(gw, &format!("/apis/{group}/v1")).await.status != 404;
    listed && proxied
}

#[tokio::test]
async fn a_manifest_rewritten_in_place_keeps_its_group_while_it_is_empty() {
    let s = World::single(|_| {}).await;
    let c = s.w.client(Some("alice"));
    let file = s.w.pki.path("apiservices/a.json");
    let content = std::fs::read(&file).unwrap();
    assert!(serves(&c, s.gw.addr, "a.example.com").await);
    // Truncate in place, as `>` or a writer that opens with O_TRUNC does, then write late.
    std::fs::File::create(&file).unwrap();
    let until = tokio::time::Instant::now() + std::time::Duration::from_millis(1000);
    while tokio::time::Instant::now() < until {
        assert!(
            serves(&c, s.gw.addr, "a.example.com").await,
            "the group vanished while its manifest was empty"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    std::fs::write(&file, &content).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert!(
        serves(&c, s.gw.addr, "a.example.com").await,
        "the group is gone after its manifest was written back"
    );
}

#[tokio::test]
async fn a_manifest_left_empty_removes_its_group_and_a_deleted_one_goes_at_once() {
    let s = World::single(|_| {}).await;
    s.w.register(
        "b.json",
        "b.example.com",
        "v1",
        100,
        10,
        "a-svc",
        "a-ns",
        &s.w.addon_ca,
    );
    let c = s.w.client(Some("alice"));
    assert!(eventually(5, || serves(&c, s.gw.addr, "b.example.com")).await);
    // Deleted: gone well before an emptied file would be.
    std::fs::remove_file(s.w.pki.path("apiservices/b.json")).unwrap();
    let started = tokio::time::Instant::now();
    assert!(
        eventually(5, || async {
            !serves(&c, s.gw.addr, "b.example.com").await
        })
        .await
    );
    assert!(
        started.elapsed() < std::time::Duration::from_millis(1500),
        "a deleted manifest took {:?} to go",
        started.elapsed()
    );
    // Emptied (only a comment and a document marker) and left so: gone after the settle time.
    std::fs::write(
        s.w.pki.path("apiservices/a.json"),
        "# being rewritten\n---\n",
    )
    .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    assert!(serves(&c, s.gw.addr, "a.example.com").await);
    let gone = eventually(5, || async {
        !serves(&c, s.gw.addr, "a.example.com").await
    })
    .await;
    assert!(gone, "a manifest left empty kept its group");
    c.get(s.gw.addr, "/apis/a.example.com/v1/x")
        .await
        .assert_status(404);
}
