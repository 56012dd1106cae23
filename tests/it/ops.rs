//! Operations end to end: availability flips with the backend, fast 503s, the apiservices API
//! (list, get, watch, Table through kubectl), metrics, health, certificate rotation and
//! graceful shutdown under load.

use crate::support;

use crate::support::{eventually, Single, World};
use bytes::Bytes;
use http::Request;
use std::time::Duration;

async fn condition(
    c: &support::Client,
    gw: &support::Gateway,
    name: &str,
) -> (String, String, String) {
    let a = c
        .get(
            gw.addr,
            &format!("/apis/apiregistration.k8s.io/v1/apiservices/{name}"),
        )
        .await;
    let cond = &a.json()["status"]["conditions"][0];
    let s = |k: &str| cond[k].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"), s("message"))
}

/// A backend that never answers (its checks run to the 5 s timeout) must not hold back
/// another APIService's status: each check's result is in force when that check ends, as
/// kube-aggregator checks each APIService on its own. The round starts are seen at the black
/// hole, which every round's check of `v1.b.example.com` connects to.
#[tokio::test(flavor = "multi_thread")]
async fn a_black_holed_backend_does_not_delay_another_apiservices_status() {
    let (w, echo) = World::with_a().await;
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hole_addr = hole.local_addr().unwrap();
    let (rounds, mut round_started) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = hole.accept().await {
            held.push(tcp);
            let _ = rounds.send(std::time::Instant::now());
        }
    });
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
    let mut cfg = w.config(&[(&echo, echo.addr)]);
    cfg.proxy
        .resolve
        .insert(("b-svc.b-ns.svc".into(), 443), vec![hole_addr]);
    cfg.availability.interval = Duration::from_millis(300);
    let gw = w.gateway(cfg).await;
    let c = w.client(Some("alice"));
    assert_eq!(condition(&c, &gw, "v1.a.example.com").await.0, "True");
    assert_eq!(condition(&c, &gw, "v1.b.example.com").await.0, "False");

    // A round starts (its check of b hangs); a's backend goes away during it.
    round_started.recv().await.unwrap();
    let _gone = echo.stop();
    // The next round's check of a fails at once: its status must not wait for b's timeout.
    let next = loop {
        let at = round_started.recv().await.unwrap();
        if at.elapsed() < Duration::from_millis(500) {
            break at;
        }
    };
    let down = eventually(3, || async {
        condition(&c, &gw, "v1.a.example.com").await.0 == "False"
    })
    .await;
    let took = next.elapsed();
    assert!(down, "a stayed Available");
    assert!(
        took < Duration::from_secs(3),
        "a's failed check was published {took:?} after its round began (b's check takes 5 s)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn availability_follows_the_backend_and_unavailable_fails_fast() {
    let Single { w, echo, gw } = World::single(|cfg| {
        cfg.availability.interval = Duration::from_millis(300);
    })
    .await;
    let c = w.client(Some("alice"));
    assert_eq!(condition(&c, &gw, "v1.a.example.com").await.0, "True");
    assert_eq!(c.get(gw.addr, "/apis/a.example.com/v1/x").await.status, 200);

    let addr = echo.stop();
    let down = eventually(5, || async {
        condition(&c, &gw, "v1.a.example.com").await.0 == "False"
    })
    .await;
    assert!(down, "Available stayed True after the backend stopped");
    let (_, reason, message) = condition(&c, &gw, "v1.a.example.com").await;
    assert_eq!(reason, "FailedDiscoveryCheck");
    assert!(message.contains(&format!("dial tcp {addr}")), "{message}");
    let st = c
        .get(gw.addr, "/apis/a.example.com/v1/x")
        .await
        .assert_status(503);
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("service unavailable"),
        "{st}"
    );
    let metrics = String::from_utf8(c.get(gw.addr, "/metrics").await.body.to_vec()).unwrap();
    assert!(
        metrics.contains("aggregator_unavailable_apiservice{name=\"v1.a.example.com\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("aggregator_unavailable_apiservice_total{name=\"v1.a.example.com\",reason=\"FailedDiscoveryCheck\"} 1"), "{metrics}");

    let back = w
        .restart("a", &support::Echo::placeholder(addr, "a-svc.a-ns.svc"))
        .await;
    let up = eventually(5, || async {
        condition(&c, &gw, "v1.a.example.com").await.0 == "True"
    })
    .await;
    assert!(up, "Available did not come back");
    assert_eq!(c.get(gw.addr, "/apis/a.example.com/v1/x").await.status, 200);
    assert!(!back.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cert_that_stops_verifying_is_reported_with_the_reason() {
    let Single { w, echo: _echo, gw } = World::single(|_| {}).await;
    let c = w.client(Some("alice"));
    // The caBundle changes to a CA that did not sign the serving cert.
    w.register(
        "a.json",
        "a.example.com",
        "v1",
        100,
        10,
        "a-svc",
        "a-ns",
        &w.rogue_ca,
    );
    let down = eventually(5, || async {
        condition(&c, &gw, "v1.a.example.com").await.0 == "False"
    })
    .await;
    assert!(down);
    let (_, reason, message) = condition(&c, &gw, "v1.a.example.com").await;
    assert_eq!(reason, "FailedDiscoveryCheck");
    assert!(
        message.contains("invalid peer certificate") && message.contains("UnknownIssuer"),
        "{message}"
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
    assert!(
        eventually(5, || async {
            condition(&c, &gw, "v1.a.example.com").await.0 == "True"
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn apiservices_list_get_watch_and_local() {
    let Single { w, echo: _echo, gw } = World::single(|_| {}).await;
    let c = w.client(Some("alice"));
    let list = c
        .get(gw.addr, "/apis/apiregistration.k8s.io/v1/apiservices")
        .await
        .json();
    assert_eq!(list["kind"], "APIServiceList");
    assert_eq!(list["items"][0]["metadata"]["name"], "v1.a.example.com");
    assert_eq!(list["items"][0]["spec"]["service"]["port"], 443);
    let rv: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    c.get(
        gw.addr,
        "/apis/apiregistration.k8s.io/v1/apiservices/v1.nope",
    )
    .await
    .assert_status(404);
    let post = Request::post("/apis/apiregistration.k8s.io/v1/apiservices")
        .body(Bytes::from_static(b"{}"))
        .unwrap();
    c.send(gw.addr, post).await.assert_status(405);

    // A watch from the listed version sees a Local APIService added to the directory.
    let local = serde_json::json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1.local.example.com"},
        "spec": {"group": "local.example.com", "version": "v1", "groupPriorityMinimum": 10, "versionPriority": 1}});
    let watch = tokio::spawn({
        let c = c.clone();
        let addr = gw.addr;
        async move {
            c.get(addr, &format!("/apis/apiregistration.k8s.io/v1/apiservices?watch=1&resourceVersion={rv}&timeoutSeconds=2")).await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(w.pki.path("apiservices/local.json"), local.to_string()).unwrap();
    let events = watch.await.unwrap();
    let lines: Vec<serde_json::Value> = events
        .body
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let added = lines.iter().find(|e| {
        e["type"] == "ADDED" && e["object"]["metadata"]["name"] == "v1.local.example.com"
    });
    assert!(added.is_some(), "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|e| e["object"]["metadata"]["name"] != "v1.a.example.com"
                || e["type"] == "MODIFIED"),
        "replayed old events: {lines:?}"
    );
    let local = condition(&c, &gw, "v1.local.example.com").await;
    assert!(
        eventually(5, || async {
            condition(&c, &gw, "v1.local.example.com").await.1 == "Local"
        })
        .await,
        "{local:?}"
    );
    // a too old resourceVersion is a 410 Expired event
    let old = c.get(gw.addr, "/apis/apiregistration.k8s.io/v1/apiservices?watch=1&resourceVersion=999999&timeoutSeconds=1").await;
    let first: serde_json::Value =
        serde_json::from_slice(old.body.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(
        (first["type"].as_str(), first["object"]["code"].as_u64()),
        (Some("ERROR"), Some(410))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn health_is_verbose_and_metrics_count_requests() {
    let Single { w, echo: _echo, gw } = World::single(|_| {}).await;
    let anon = w.client(None);
    let ready = anon.get(gw.addr, "/readyz?verbose").await;
    let text = String::from_utf8_lossy(&ready.body);
    assert_eq!(ready.status, 200);
    assert!(
        text.contains("[+]ping ok")
            && text.contains("[+]apiservice-status-available-controller ok")
            && text.ends_with("readyz check passed\n"),
        "{text}"
    );
    anon.get(gw.addr, "/metrics").await.assert_status(401);
    let c = w.client(Some("alice"));
    assert_eq!(
        c.get(gw.addr, "/apis/a.example.com/v1/namespaces/n/things")
            .await
            .status,
        200
    );
    let metrics = String::from_utf8(c.get(gw.addr, "/metrics").await.body.to_vec()).unwrap();
    assert!(metrics.contains("apigw_requests_total{code=\"200\",group=\"a.example.com\",resource=\"things\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 1"), "{metrics}");
    assert!(
        metrics.contains("aggregator_unavailable_apiservice{name=\"v1.a.example.com\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("apigw_certificate_expiry_timestamp_seconds{cert=\"serving\"}"),
        "{metrics}"
    );
    // The runtime's live tasks: at least the accept loop, this connection and the checks.
    let tasks = metrics
        .lines()
        .find_map(|l| l.strip_prefix("apigw_runtime_alive_tasks "))
        .and_then(|v| v.parse::<u64>().ok());
    assert!(tasks.is_some_and(|n| n >= 3), "{tasks:?}");
    assert!(
        metrics.contains("apigw_certificate_expiry_timestamp_seconds{cert=\"proxy-client\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn serving_cert_rotates_under_load_without_failures() {
    let Single { w, echo: _echo, gw } = World::single(|_| {}).await;
    let c = w.client(Some("alice"));
    let addr = gw.addr;
    let load = tokio::spawn(async move {
        let mut codes = Vec::new();
        for _ in 0..120 {
            let r = c
                .try_send(
                    addr,
                    Request::get("/apis/a.example.com/v1/x")
                        .body(Bytes::new())
                        .unwrap(),
                )
                .await;
            codes.push(r.map(|a| a.status).unwrap_or(0));
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        codes
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = serving_serial(gw.addr).await;
    // Rotate the way a Secret update lands: new files renamed over the old ones.
    w.pki.leaf(
        "serving-next",
        &w.ca,
        "apigw-rotated",
        &[],
        &["localhost", "127.0.0.1"],
        true,
    );
    std::fs::rename(w.pki.path("serving-next.key"), w.pki.path("serving.key")).unwrap();
    std::fs::rename(w.pki.path("serving-next.crt"), w.pki.path("serving.crt")).unwrap();
    let rotated = eventually(10, || async { serving_serial(addr).await != before }).await;
    assert!(rotated, "the gateway kept serving the old certificate");
    let codes = load.await.unwrap();
    assert!(
        codes.iter().all(|c| *c == 200),
        "requests failed during rotation: {codes:?}"
    );
}

/// The subject CN of the certificate the gateway serves now.
async fn serving_serial(addr: std::net::SocketAddr) -> String {
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &addr.to_string(),
                "-servername",
                "localhost",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl is required for this test")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_lets_in_flight_requests_finish() {
    let Single { w, echo: _echo, gw } = World::single(|_| {}).await;
    let addr = gw.addr;
    let mut slow = Vec::new();
    for _ in 0..5 {
        let c = w.client(Some("alice"));
        slow.push(tokio::spawn(async move {
            c.get(addr, "/apis/a.example.com/v1/namespaces/n/things/slow")
                .await
                .status
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let drained = gw.shutdown();
    for s in slow {
        assert_eq!(
            s.await.unwrap(),
            200,
            "an in-flight request was dropped by shutdown"
        );
    }
    drained.await.unwrap();
    let after = w
        .client(Some("alice"))
        .try_send(addr, Request::get("/healthz").body(Bytes::new()).unwrap())
        .await;
    assert!(after.is_err(), "the gateway still accepts after shutdown");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_backend_gets_a_504_status_after_the_request_timeout() {
    let Single { w, echo: _echo, gw } = World::single(|cfg| {
        cfg.limits.request_timeout = Duration::from_millis(300);
    })
    .await;
    let c = w.client(Some("alice"));
    let st = c
        .get(gw.addr, "/apis/a.example.com/v1/namespaces/n/things/slow")
        .await
        .assert_status(504);
    assert_eq!(st["reason"], "Timeout");
    // exec-like long-running requests are exempt
    let exempt = c
        .get(
            gw.addr,
            "/apis/a.example.com/v1/namespaces/n/things/x/proxy/slow",
        )
        .await;
    assert_eq!(exempt.status, 200);
}

/// An APIService's own policy (issue 50, item 4), from its annotations: a request timeout
/// shorter than `--request-timeout` (60 s here), and a subresource whose requests are
/// long-running. `apigw check` shows both.
#[tokio::test(flavor = "multi_thread")]
async fn an_apiservices_annotations_set_its_timeout_and_long_running_subresources() {
    let (w, echo) = World::with_a().await;
    let manifest = w.pki.path("apiservices/a.json");
    let mut obj: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    obj["metadata"]["annotations"] = serde_json::json!({
        "apigw.dev/request-timeout": "300ms",
        "apigw.dev/long-running-subresources": "slow, console",
    });
    std::fs::write(&manifest, obj.to_string()).unwrap();
    let dir = w.pki.path("apiservices").display().to_string();
    let check = || {
        let out = crate::support::binary::run(None, &["check", "--apiservice-dir", &dir]);
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success(), printed)
    };
    let (_, printed) = check();
    assert!(
        printed.contains(
            "ok: APIService v1.a.example.com -> a-svc.a-ns.svc:443 \
             (request timeout 300ms; long-running subresources slow, console)"
        ),
        "{printed}"
    );
    let gw = w.gateway(w.config(&[(&echo, echo.addr)])).await;
    let c = w.client(Some("alice"));
    // The backend answers /slow after 1.5 s: past the APIService's 300 ms...
    let st = c
        .get(gw.addr, "/apis/a.example.com/v1/namespaces/n/things/slow")
        .await
        .assert_status(504);
    assert_eq!(st["reason"], "Timeout");
    // ...unless the request is for a subresource the APIService calls long-running.
    let streamed = c
        .get(gw.addr, "/apis/a.example.com/v1/namespaces/n/things/x/slow")
        .await;
    assert_eq!(streamed.status, 200, "{:?}", streamed.body);
    // A problem in an annotation is a problem of the manifest, named.
    obj["metadata"]["annotations"]["apigw.dev/request-timeout"] = "soon".into();
    std::fs::write(&manifest, obj.to_string()).unwrap();
    let (passed, printed) = check();
    assert!(!passed);
    assert!(
        printed.contains(
            "metadata.annotations[apigw.dev/request-timeout]: \"soon\" is not a duration"
        ),
        "{printed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn token_file_and_client_ca_reload_and_a_broken_file_keeps_the_old_one() {
    let Single { w, echo: _echo, gw } = World::single(|_| {}).await;
    let path = "/apis/a.example.com/v1/x";
    let with_token = |t: &str| {
        Request::get(path)
            .header("authorization", format!("Bearer {t}"))
            .body(Bytes::new())
            .unwrap()
    };
    let anon = w.client(None);
    assert_eq!(
        anon.send(gw.addr, with_token("s3cr3t-token-bob"))
            .await
            .status,
        200
    );

    // A broken token file is not applied.
    std::fs::write(w.pki.path("tokens.csv"), "only-two,fields\n").unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        anon.send(gw.addr, with_token("s3cr3t-token-bob"))
            .await
            .status,
        200
    );

    // A good one replaces the old tokens.
    std::fs::write(
        w.pki.path("tokens.csv"),
        "new-token-carol,carol,uid-carol,\"devs\"\n",
    )
    .unwrap();
    let switched = eventually(10, || async {
        anon.send(gw.addr, with_token("new-token-carol"))
            .await
            .status
            == 200
    })
    .await;
    assert!(switched, "the new token file was not applied");
    anon.send(gw.addr, with_token("s3cr3t-token-bob"))
        .await
        .assert_status(401);

    // The client CA bundle is replaced by a new CA: its users get in, the old CA's do not.
    let new_ca = w.pki.ca("client-ca-next");
    w.pki.leaf("dave", &new_ca, "dave", &["ops"], &[], false);
    std::fs::copy(
        w.pki.path("client-ca-next.crt"),
        w.pki.path("client-ca.crt"),
    )
    .unwrap();
    let dave = w.client(Some("dave"));
    let rotated = eventually(10, || async {
        dave.try_send(gw.addr, Request::get(path).body(Bytes::new()).unwrap())
            .await
            .is_ok_and(|a| a.status == 200)
    })
    .await;
    assert!(
        rotated,
        "a certificate from the new client CA was not accepted"
    );
    let seen = dave.get(gw.addr, path).await;
    assert_eq!(seen.seen("x-remote-user"), ["dave"]);
    let alice = w
        .client(Some("alice"))
        .try_send(gw.addr, Request::get(path).body(Bytes::new()).unwrap())
        .await;
    assert!(
        alice.is_err() || alice.is_ok_and(|a| a.status == 401),
        "the old client CA still authenticates"
    );
}
