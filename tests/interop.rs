//! Interop: the gateway in front of backends no one here wrote. The first is the Go addon
//! server in `tests/interop/goaddon` (Go's standard `net/http`, strict about HTTP/1.1 and
//! HTTP/2, with kube's requestheader authentication); see `support::goaddon`.

mod support;

use bytes::Bytes;
use http::Request;
use support::goaddon::{GoAddon, GoOpts};
use support::World;

const WIDGETS: &str = "/apis/interop.example.com/v1/namespaces/default/widgets";

#[tokio::test(flavor = "multi_thread")]
async fn a_go_net_http_addon_serves_widgets_through_the_gateway() {
    let world = World::new();
    let addon = GoAddon::start(&world, GoOpts::default()).await;
    addon.register(&world);
    let mut cfg = world.config(&[]);
    cfg.resolve
        .insert((addon.host.clone(), 443), vec![addon.addr]);
    let gw = world.gateway(cfg).await;
    let alice = world.client(Some("alice"));

    // The APIService becomes available once the gateway's checks reach the Go server.
    let mut last = None;
    for _ in 0..100 {
        let answer = alice.get(gw.addr, "/apis/interop.example.com/v1").await;
        if answer.status == 200 {
            last = None;
            break;
        }
        last = Some(answer);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    if let Some(a) = last {
        panic!(
            "interop.example.com/v1 never answered 200 through the gateway; last: {} {}",
            a.status,
            String::from_utf8_lossy(&a.body)
        );
    }

    let widget = serde_json::json!({
        "apiVersion": "interop.example.com/v1", "kind": "Widget",
        "metadata": {"name": "smoke"}, "spec": {"color": "red", "size": 3}
    });
    let created = alice
        .send(
            gw.addr,
            Request::post(WIDGETS)
                .header("content-type", "application/json")
                .body(Bytes::from(widget.to_string()))
                .unwrap(),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);

    let got = alice.get(gw.addr, &format!("{WIDGETS}/smoke")).await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    let w = got.json();
    assert_eq!(w["spec"]["color"], "red", "{w}");
    assert_eq!(w["metadata"]["namespace"], "default", "{w}");
    let seen = |name: &str| {
        got.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(seen("x-interop-host"), "widgets.interop.svc:443");
    let uri = seen("x-interop-request-uri");
    assert!(uri.starts_with("/apis/"), "not in origin form: {uri:?}");
    assert_eq!(seen("x-interop-user"), "alice");
}
