//! The gateway in cluster mode, end to end against the test Kubernetes API server: APIServices
//! come from the cluster, services resolve through EndpointSlices, bearer tokens go to
//! TokenReview, `Webhook` authorization asks SubjectAccessReview, and the Lease holder writes
//! availability back to the APIService status.

mod support;

use bytes::Bytes;
use http::Request;
use serde_json::json;
use support::kube_api::KubeApi;
use support::{eventually, World};

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_mode_gateway_serves_what_the_cluster_says() {
    let w = World::new();
    let api = KubeApi::start(&w.pki).await;
    let echo = w.backend("a", "a-svc", "a-ns", &w.addon_ca, None).await;
    api.put(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "a-svc", "namespace": "a-ns"},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "https", "port": 443, "targetPort": "https"}]}}));
    api.put(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "a-svc-1", "namespace": "a-ns", "labels": {"kubernetes.io/service-name": "a-svc"}},
        "addressType": "IPv4", "ports": [{"name": "https", "port": echo.addr.port()}],
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}},
                      {"addresses": ["127.0.0.2"], "conditions": {"ready": false}}]}));
    let bundle = support::base64_encode(w.pki.pem("addon-ca.crt").as_bytes());
    api.put(json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1.a.example.com"},
        "spec": {"group": "a.example.com", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10,
                 "service": {"name": "a-svc", "namespace": "a-ns", "port": 443}, "caBundle": bundle}}));
    api.allow_token("cluster-token-dora", "dora", &["devs"]);
    api.allow("dora", "list", "things");

    let mut cfg = w.config(&[]);
    cfg.apiservice_dir = None;
    cfg.cluster = Some(apigw::config::Cluster {
        kubeconfig: Some(api.kubeconfig.clone()),
        aggregator_routing: true,
    });
    cfg.authorization = vec![apigw::config::AuthzMode::Webhook];
    let gw = w.gateway(cfg).await;

    let dora = |path: &str| {
        Request::get(path)
            .header("authorization", "Bearer cluster-token-dora")
            .body(Bytes::new())
            .unwrap()
    };
    let c = w.client(None);
    let listed = c
        .send(gw.addr, dora("/apis/a.example.com/v1/namespaces/n/things"))
        .await;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    let seen = echo
        .requests()
        .pop()
        .expect("the backend was reached through the EndpointSlice");
    assert_eq!(support::seen_header(&seen, "x-remote-user"), ["dora"]);
    assert_eq!(
        support::seen_header(&seen, "x-remote-group"),
        ["devs", "system:authenticated"]
    );

    // Webhook: SubjectAccessReview said no to deleting, with kube's message.
    let del = Request::delete("/apis/a.example.com/v1/namespaces/n/things/t")
        .header("authorization", "Bearer cluster-token-dora")
        .body(Bytes::new())
        .unwrap();
    let st = c.send(gw.addr, del).await.assert_status(403);
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("things.a.example.com \"t\" is forbidden: User \"dora\" cannot delete"),
        "{st}"
    );
    c.send(
        gw.addr,
        Request::get("/apis")
            .header("authorization", "Bearer nope")
            .body(Bytes::new())
            .unwrap(),
    )
    .await
    .assert_status(401);
    assert!(api.token_reviews() >= 1 && api.access_reviews() >= 1);

    // The Lease holder writes the Available condition back to the cluster.
    let written = eventually(10, || async {
        api.get(
            "apiregistration.k8s.io/v1",
            "apiservices",
            "",
            "v1.a.example.com",
        )
        .is_some_and(|o| o["status"]["conditions"][0]["status"] == "True")
    })
    .await;
    assert!(written, "the status was not written back");

    // A new APIService in the cluster shows in /apis; a deleted one leaves.
    api.put(json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1.b.example.com"},
        "spec": {"group": "b.example.com", "version": "v1", "groupPriorityMinimum": 50, "versionPriority": 10,
                 "service": {"name": "b-svc", "namespace": "b-ns"}}}));
    api.allow("dora", "get", "/apis");
    let shown = eventually(5, || async {
        let a = c.send(gw.addr, dora("/apis")).await;
        a.status == 200
            && a.json()["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == "b.example.com")
    })
    .await;
    assert!(shown, "a new cluster APIService did not appear in /apis");
    api.delete(
        "apiregistration.k8s.io/v1",
        "apiservices",
        "",
        "v1.b.example.com",
    );
    let gone = eventually(5, || async {
        !c.send(gw.addr, dora("/apis")).await.json()["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "b.example.com")
    })
    .await;
    assert!(gone);
}
