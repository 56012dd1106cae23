//! The gateway in cluster mode, end to end against the test Kubernetes API server: APIServices
//! come from the cluster, services resolve through EndpointSlices, bearer tokens go to
//! TokenReview, `Webhook` authorization asks SubjectAccessReview, and the Lease holder writes
//! availability back to the APIService status. Two replicas against one cluster: exactly one
//! writes status, and the other takes over when the Lease expires or is released.

use crate::support;

use crate::support::kube_api::KubeApi;
use crate::support::{eventually, World};
use bytes::Bytes;
use http::Request;
use serde_json::json;
use std::time::Duration;

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
    cfg.cluster = Some(apigw_gateway::config::Cluster {
        kubeconfig: Some(api.kubeconfig.clone()),
        aggregator_routing: true,
        leader_election: apigw_gateway::config::LeaderElection::default(),
    });
    cfg.authz.links = vec![apigw_gateway::config::AuthzMode::Webhook.into()];
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

    // The APIService's own request timeout, annotated in the cluster, bounds its requests:
    // the backend answers /slow after 1.5 s, within --request-timeout (60 s), past 300 ms.
    api.allow("dora", "get", "things");
    let slow = "/apis/a.example.com/v1/namespaces/n/things/slow";
    assert_eq!(c.send(gw.addr, dora(slow)).await.status, 200);
    api.put(json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1.a.example.com", "annotations": {"apigw.dev/request-timeout": "300ms"}},
        "spec": {"group": "a.example.com", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10,
                 "service": {"name": "a-svc", "namespace": "a-ns", "port": 443}, "caBundle": bundle}}));
    let bounded = eventually(10, || async {
        c.send(gw.addr, dora(slow)).await.status == 504
    })
    .await;
    assert!(
        bounded,
        "the cluster's annotation did not bound the request"
    );
}

/// Two replicas of the gateway against one cluster: one backend `a-svc.a-ns.svc` serving
/// `a.example.com/v1` through an EndpointSlice, and a gateway config per replica with its own
/// kubeconfig (so the test API server can tell their writes apart) and short election timing.
struct Replicas {
    w: World,
    api: KubeApi,
    echo: Option<support::Echo>,
    echo_addr: std::net::SocketAddr,
}

const APISERVICE_STATUS: &str =
    "PATCH /apis/apiregistration.k8s.io/v1/apiservices/v1.a.example.com/status";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/apigw";

impl Replicas {
    async fn start() -> Self {
        let w = World::new();
        let api = KubeApi::start(&w.pki).await;
        let echo = w.backend("a", "a-svc", "a-ns", &w.addon_ca, None).await;
        api.put(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "a-svc", "namespace": "a-ns"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "https", "port": 443, "targetPort": "https"}]}}));
        api.put(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "a-svc-1", "namespace": "a-ns", "labels": {"kubernetes.io/service-name": "a-svc"}},
            "addressType": "IPv4", "ports": [{"name": "https", "port": echo.addr.port()}],
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}]}));
        let bundle = support::base64_encode(w.pki.pem("addon-ca.crt").as_bytes());
        api.put(json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1.a.example.com"},
            "spec": {"group": "a.example.com", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10,
                     "service": {"name": "a-svc", "namespace": "a-ns", "port": 443}, "caBundle": bundle}}));
        let echo_addr = echo.addr;
        Self {
            w,
            api,
            echo: Some(echo),
            echo_addr,
        }
    }

    /// A replica named `name` (its writes are recorded under that name).
    async fn gateway(&self, name: &str, lease_duration: Duration) -> support::Gateway {
        let mut cfg = self.w.config(&[]);
        cfg.apiservice_dir = None;
        cfg.cluster = Some(apigw_gateway::config::Cluster {
            kubeconfig: Some(self.api.kubeconfig_as(name)),
            aggregator_routing: true,
            leader_election: apigw_gateway::config::LeaderElection {
                lease_duration,
                renew_deadline: lease_duration.mul_f64(0.66),
                retry_period: Duration::from_millis(300),
            },
        });
        cfg.availability.interval = Duration::from_millis(300);
        cfg.availability.timeout = Duration::from_secs(2);
        cfg.server.shutdown_grace = Duration::from_secs(2);
        self.w.gateway(cfg).await
    }

    /// Who wrote the APIService's status, in order.
    fn status_writers(&self) -> Vec<String> {
        self.api
            .writes_by()
            .into_iter()
            .filter(|w| w.line == APISERVICE_STATUS)
            .map(|w| w.by)
            .collect()
    }

    /// The `Available` status the cluster holds for the APIService ("" when none).
    fn cluster_available(&self) -> String {
        self.api
            .get(
                "apiregistration.k8s.io/v1",
                "apiservices",
                "",
                "v1.a.example.com",
            )
            .and_then(|o| {
                o["status"]["conditions"][0]["status"]
                    .as_str()
                    .map(String::from)
            })
            .unwrap_or_default()
    }

    async fn wait_cluster_available(&self, want: &str, secs: u64) -> bool {
        eventually(secs, || async { self.cluster_available() == want }).await
    }

    /// The Lease's holder ("" when none or released).
    fn holder(&self) -> String {
        self.api
            .get("coordination.k8s.io/v1", "leases", "kube-system", "apigw")
            .and_then(|o| o["spec"]["holderIdentity"].as_str().map(String::from))
            .unwrap_or_default()
    }

    /// What `gw` itself reports of the APIService's availability, from its own controller.
    async fn gateway_available(&self, gw: &support::Gateway) -> String {
        let a = self
            .w
            .client(Some("alice"))
            .get(
                gw.addr,
                "/apis/apiregistration.k8s.io/v1/apiservices/v1.a.example.com",
            )
            .await;
        a.json()["status"]["conditions"][0]["status"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn stop_backend(&mut self) {
        if let Some(echo) = self.echo.take() {
            echo.stop();
        }
    }

    async fn start_backend(&mut self) {
        let placeholder = support::Echo::placeholder(self.echo_addr, "a-svc.a-ns.svc");
        self.echo = Some(self.w.restart("a", &placeholder).await);
    }
}

/// Starts replicas `a` and `b`, waits for the first status write, and returns the leader's
/// name, its gateway, and the follower's name and gateway.
async fn elect(
    r: &Replicas,
    lease_duration: Duration,
) -> (String, support::Gateway, String, support::Gateway) {
    let a = r.gateway("a", lease_duration).await;
    let b = r.gateway("b", lease_duration).await;
    assert!(
        r.wait_cluster_available("True", 15).await,
        "no replica wrote the status; writes: {:?}",
        r.api.writes_by()
    );
    let writers = r.status_writers();
    let leader = writers[0].clone();
    assert!(
        writers.iter().all(|w| *w == leader),
        "more than one replica wrote the status: {writers:?}"
    );
    assert!(!r.holder().is_empty(), "the Lease has no holder");
    match leader.as_str() {
        "a" => ("a".into(), a, "b".into(), b),
        "b" => ("b".into(), b, "a".into(), a),
        other => panic!("the status was written by {other:?}, not by a replica"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_replica_writes_status_and_the_other_takes_over_when_the_lease_expires() {
    let mut r = Replicas::start().await;
    // Short, but long enough that a loaded machine does not miss renewals (renew deadline 2.6 s).
    let lease = Duration::from_secs(4);
    let (leader, leader_gw, follower, follower_gw) = elect(&r, lease).await;

    // The backend goes down: both replicas see it; only the leader writes it.
    r.stop_backend();
    assert!(
        r.wait_cluster_available("False", 15).await,
        "the leader did not write Available=False"
    );
    let seen = eventually(10, || async {
        r.gateway_available(&follower_gw).await == "False"
    })
    .await;
    assert!(
        seen,
        "the follower's own controller did not see the backend go"
    );
    r.start_backend().await;
    assert!(
        r.wait_cluster_available("True", 15).await,
        "the leader did not write Available=True"
    );
    let seen = eventually(10, || async {
        r.gateway_available(&follower_gw).await == "True"
    })
    .await;
    assert!(
        seen,
        "the follower's own controller did not see the backend return"
    );
    let writers = r.status_writers();
    assert!(
        writers.len() >= 3 && writers.iter().all(|w| *w == leader),
        "status writes not all by the leader {leader}: {writers:?}"
    );

    // The leader dies without releasing the Lease; the backend goes down again.
    let holder = r.holder();
    let writes_before_kill = r.api.writes_by().len();
    leader_gw.kill().await;
    r.stop_backend();
    let took_over = eventually(20, || async {
        let h = r.holder();
        !h.is_empty() && h != holder
    })
    .await;
    assert!(took_over, "the follower did not take the expired Lease");
    assert!(
        r.wait_cluster_available("False", 15).await,
        "the new leader did not write Available=False"
    );
    let after: Vec<_> = r.api.writes_by().split_off(writes_before_kill);
    assert!(
        after.iter().all(|w| w.by == follower),
        "after the kill, writes by others than {follower}: {after:?}"
    );
    assert!(
        after.iter().any(|w| w.line == APISERVICE_STATUS),
        "{after:?}"
    );
    assert!(
        !after
            .iter()
            .any(|w| w.by == leader && w.line.ends_with(LEASE)),
        "the killed leader released the Lease: {after:?}"
    );
    drop(follower_gw);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_that_shuts_down_hands_the_lease_over_at_once() {
    let mut r = Replicas::start().await;
    // Longer than the test waits for the takeover: only a released Lease is taken that soon.
    let lease = Duration::from_secs(60);
    let (leader, leader_gw, follower, follower_gw) = elect(&r, lease).await;
    let holder = r.holder();
    let writes_before = r.api.writes_by().len();
    leader_gw
        .shutdown()
        .await
        .expect("the leader shut down cleanly");
    let released = r
        .api
        .writes_by()
        .split_off(writes_before)
        .into_iter()
        .any(|w| w.by == leader && w.line == format!("PUT {LEASE}"));
    assert!(released, "the leader did not write the Lease on shutdown");
    let took_over = eventually(15, || async {
        let h = r.holder();
        !h.is_empty() && h != holder
    })
    .await;
    assert!(took_over, "the follower did not take the released Lease");

    r.stop_backend();
    assert!(
        r.wait_cluster_available("False", 15).await,
        "the new leader did not write Available=False"
    );
    let writers = r.status_writers();
    assert_eq!(
        writers.last().map(String::as_str),
        Some(follower.as_str()),
        "{writers:?}"
    );
    drop(follower_gw);
}
