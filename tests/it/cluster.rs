//! Cluster mode against the in-memory test API server (`support::kube_api`): the server itself
//! speaks the protocol kubectl expects; APIServices flow into the registry and survive dropped
//! watches and 410 Gone; TokenReview and SubjectAccessReview with their caches; Lease leader
//! election; status write-back only on change; Service and EndpointSlice resolution.

use crate::support::kube_api::KubeApi;
use crate::support::tool::{kubectl, kubectl_command};
use crate::support::{eventually, Pki};
use apigw_authz::webhook::{KubeSender, Webhook, WebhookSettings};
use apigw_authz::Verdict;
use apigw_availability::{Condition, State};
use apigw_gateway::cluster::{self, lease::LeaseSettings, services::RoutingMode};
use apigw_registry::Registry;
use apigw_request::Attributes;
use apigw_request::Identity;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

fn apiservice(group: &str, version: &str, priority: i64) -> Value {
    json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": format!("{version}.{group}")},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": 1000,
                 "versionPriority": priority, "insecureSkipTLSVerify": true,
                 "service": {"name": "api", "namespace": "ns", "port": 443}}
    })
}

async fn start() -> (Pki, KubeApi, kube::Client) {
    let pki = Pki::new();
    let api = KubeApi::start(&pki).await;
    let client = cluster::client(Some(&api.kubeconfig)).await.unwrap();
    (pki, api, client)
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_gets_applies_and_watches_against_the_test_server() {
    let pki = Pki::new();
    let api = KubeApi::start(&pki).await;
    let manifest = pki.path("wardle.yaml");
    let (pki, api) = tokio::task::spawn_blocking(move || {
        let write = |priority: i64| {
            let doc = apigw_core::yaml::to_string(&apiservice(
                "wardle.example.com",
                "v1alpha1",
                priority,
            ))
            .unwrap();
            std::fs::write(&manifest, doc).unwrap();
        };
        write(15);
        let created = kubectl(
            &api.kubeconfig,
            &["apply", "-f", manifest.to_str().unwrap()],
        )
        .ok();
        assert!(created.contains("created"), "{created}");
        write(20);
        let configured = kubectl(
            &api.kubeconfig,
            &["apply", "-f", manifest.to_str().unwrap()],
        )
        .ok();
        assert!(configured.contains("configured"), "{configured}");
        (pki, api)
    })
    .await
    .unwrap();
    let stored = api
        .get(
            "apiregistration.k8s.io/v1",
            "apiservices",
            "",
            "v1alpha1.wardle.example.com",
        )
        .unwrap();
    assert_eq!(stored["spec"]["versionPriority"], 20);
    assert!(
        api.writes().iter().any(|w| w.starts_with("PATCH ")),
        "{:?}",
        api.writes()
    );
    let (pki, api) = tokio::task::spawn_blocking(move || {
        let table = kubectl(&api.kubeconfig, &["get", "apiservices"]).ok();
        assert!(table.contains("v1alpha1.wardle.example.com"), "{table}");
        (pki, api)
    })
    .await
    .unwrap();
    watch_with_kubectl(pki, api).await;
}

/// `kubectl get -w` prints the current object, then one created while it watches.
async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .ok()
        .flatten()
}

/// `_pki` holds the directory of the kubeconfig.
async fn watch_with_kubectl(_pki: Pki, api: KubeApi) {
    let mut child = kubectl_command(&api.kubeconfig, &["get", "apiservices", "-w", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("kubectl is required for this test and could not run: {e}"));
    let stdout = child.stdout.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let first = next(&mut rx).await;
    assert_eq!(
        first.as_deref(),
        Some("apiservice.apiregistration.k8s.io/v1alpha1.wardle.example.com")
    );
    api.put(apiservice("other.example.com", "v1", 5));
    let second = next(&mut rx).await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        second.as_deref(),
        Some("apiservice.apiregistration.k8s.io/v1.other.example.com")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn apiservices_flow_into_the_registry() {
    let (_pki, api, client) = start().await;
    api.put(apiservice("a.example.com", "v1", 10));
    let registry = Registry::new();
    let source = cluster::ApiServiceSource::spawn(client, registry.clone());
    assert!(
        tokio::time::timeout(Duration::from_secs(5), source.wait_ready())
            .await
            .unwrap()
    );
    assert!(registry.snapshot().get("v1.a.example.com").is_some());

    api.put(apiservice("b.example.com", "v1", 10));
    let has = |name: &'static str| {
        let registry = registry.clone();
        move || {
            let found = registry.snapshot().get(name).is_some();
            async move { found }
        }
    };
    assert!(
        eventually(1, has("v1.b.example.com")).await,
        "create not seen"
    );
    api.put(apiservice("b.example.com", "v1", 12));
    let registry2 = registry.clone();
    let updated = eventually(1, move || {
        let vp = registry2
            .snapshot()
            .get("v1.b.example.com")
            .map(|s| s.version_priority);
        async move { vp == Some(12) }
    })
    .await;
    assert!(updated, "update not seen");
    // One invalid object is skipped; the others stay.
    let mut bad = apiservice("c.example.com", "v1", 10);
    bad["spec"]["groupPriorityMinimum"] = json!(0);
    api.put(bad);
    api.delete(
        "apiregistration.k8s.io/v1",
        "apiservices",
        "",
        "v1.b.example.com",
    );
    let registry3 = registry.clone();
    let deleted = eventually(1, move || {
        let s = registry3.snapshot();
        let ok = s.get("v1.b.example.com").is_none() && s.get("v1.a.example.com").is_some();
        async move { ok }
    })
    .await;
    assert!(deleted, "delete not seen");
    assert!(registry.snapshot().get("v1.c.example.com").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn dropped_watches_and_410_gone_are_survived() {
    let (_pki, api, client) = start().await;
    let registry = Registry::new();
    let source = cluster::ApiServiceSource::spawn(client, registry.clone());
    assert!(source.wait_ready().await);
    let seen = |name: String| {
        let registry = registry.clone();
        move || {
            let found = registry.snapshot().get(&name).is_some();
            async move { found }
        }
    };
    api.drop_watches();
    api.put(apiservice("after-drop.example.com", "v1", 10));
    assert!(
        eventually(2, seen("v1.after-drop.example.com".into())).await,
        "resume after a dropped watch"
    );

    // History forgotten and the watch dropped: resuming is 410 Gone, then a relist.
    api.put(apiservice("before-gap.example.com", "v1", 10));
    api.compact();
    api.drop_watches();
    let expired = eventually(5, || {
        let n = api.expired_watches();
        async move { n >= 1 }
    })
    .await;
    assert!(expired, "the resumed watch got 410");
    assert!(
        eventually(2, seen("v1.before-gap.example.com".into())).await,
        "objects kept across the relist"
    );
    api.put(apiservice("after-relist.example.com", "v1", 10));
    assert!(
        eventually(2, seen("v1.after-relist.example.com".into())).await,
        "watch after relist"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn token_reviews_allow_deny_and_cache() {
    let (_pki, api, client) = start().await;
    api.allow_token("good-token", "carol", &["devs", "system:authenticated"]);
    let settings = cluster::tokenreview::TokenReviewSettings {
        deny_ttl: Duration::from_millis(300),
        ..Default::default()
    };
    let reviewer = cluster::TokenReviewer::new(client, settings);
    let id = reviewer.review("good-token").await.unwrap().unwrap();
    assert_eq!(id.user, "carol");
    assert_eq!(id.uid.as_deref(), Some("uid-carol"));
    assert_eq!(id.groups, vec!["devs", "system:authenticated"]);
    assert_eq!(id.extra["scopes"], vec!["test"]);
    assert_eq!(
        reviewer.review("good-token").await.unwrap().unwrap().user,
        "carol"
    );
    assert_eq!(api.token_reviews(), 1, "an accepted token is cached");

    assert_eq!(reviewer.review("bad-token").await.unwrap(), None);
    assert_eq!(reviewer.review("bad-token").await.unwrap(), None);
    assert_eq!(api.token_reviews(), 2, "a refused token is cached");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(reviewer.review("bad-token").await.unwrap(), None);
    assert_eq!(api.token_reviews(), 3, "a refusal expires");
}

#[tokio::test(flavor = "multi_thread")]
async fn subject_access_reviews_allow_deny_and_cache() {
    let (_pki, api, client) = start().await;
    api.allow("bob", "list", "flunders");
    api.allow("bob", "get", "/healthz");
    // The Webhook authorizer of `--authorization-mode=Webhook`, sending with the cluster client.
    let hook = Webhook::new(
        WebhookSettings::cluster_mode(),
        Arc::new(KubeSender::with_client(client)),
    );
    let bob = Identity::new("bob", vec!["devs".into()]);
    let list = Attributes::from_request(
        &http::Method::GET,
        "/apis/wardle.example.com/v1alpha1/namespaces/y/flunders",
        None,
    );
    assert_eq!(hook.decide(&bob, &list).await.verdict, Verdict::Allow);
    assert_eq!(hook.decide(&bob, &list).await.verdict, Verdict::Allow);
    assert_eq!(api.access_reviews(), 1, "an allowed answer is cached");
    let health = Attributes::from_request(&http::Method::GET, "/healthz", None);
    assert_eq!(hook.decide(&bob, &health).await.verdict, Verdict::Allow);

    let create = Attributes::from_request(
        &http::Method::POST,
        "/apis/wardle.example.com/v1alpha1/namespaces/y/flunders",
        None,
    );
    assert_eq!(hook.decide(&bob, &create).await.verdict, Verdict::NoOpinion);
    assert_eq!(hook.decide(&bob, &create).await.verdict, Verdict::NoOpinion);
    assert_eq!(api.access_reviews(), 3, "a denied answer is cached");
    let alice = Identity::new("alice", vec![]);
    assert_eq!(hook.decide(&alice, &list).await.verdict, Verdict::NoOpinion);
    assert_eq!(
        apigw_authz::forbidden_message(&alice, &list),
        "flunders.wardle.example.com is forbidden: User \"alice\" cannot list resource \"flunders\" in API group \"wardle.example.com\" in the namespace \"y\""
    );
}

fn quick_lease(identity: &str) -> LeaseSettings {
    LeaseSettings {
        identity: identity.into(),
        lease_duration: Duration::from_millis(1500),
        renew_deadline: Duration::from_millis(1000),
        retry: Duration::from_millis(200),
        ..LeaseSettings::new("kube-system", "apigw")
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_one_leader_and_takeover_when_it_stops() {
    let (_pki, api, client) = start().await;
    let a = cluster::LeaderElector::spawn(client.clone(), quick_lease("a"));
    let b = cluster::LeaderElector::spawn(client.clone(), quick_lease("b"));
    let (ra, rb) = (a.subscribe(), b.subscribe());
    let one = eventually(5, || {
        let n = [*ra.borrow(), *rb.borrow()];
        async move { n.iter().filter(|x| **x).count() == 1 }
    })
    .await;
    assert!(one, "one leader within 5 s");
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_ne!(
            *ra.borrow(),
            *rb.borrow(),
            "never two leaders, never none once elected"
        );
    }
    let (leader, follower, follower_rx, follower_id) = if a.is_leader() {
        (a, b, rb, "b")
    } else {
        (b, a, ra, "a")
    };
    drop(leader); // stops renewing, without releasing
    let took_over = eventually(5, || {
        let l = *follower_rx.borrow();
        async move { l }
    })
    .await;
    assert!(
        took_over,
        "the other replica takes over after the lease expires"
    );
    let lease = api
        .get("coordination.k8s.io/v1", "leases", "kube-system", "apigw")
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], follower_id);
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
    follower.release().await;
    let lease = api
        .get("coordination.k8s.io/v1", "leases", "kube-system", "apigw")
        .unwrap();
    assert!(
        lease["spec"].get("holderIdentity").is_none(),
        "released: {lease}"
    );
}

fn state(available: bool, reason: &'static str, message: &str) -> Arc<State> {
    Arc::new(State {
        condition: Condition {
            available,
            reason,
            message: message.into(),
            last_transition: SystemTime::now(),
        },
        resources: None,
        aggregated: None,
        members: None,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn status_is_written_only_on_change() {
    let (_pki, api, client) = start().await;
    api.put(apiservice("a.example.com", "v1", 10));
    let registry = Registry::new();
    let source = cluster::ApiServiceSource::spawn(client.clone(), registry);
    assert!(source.wait_ready().await);
    let mut writer = cluster::StatusWriter::new(client, source.clone());
    let status_writes = || {
        api.writes()
            .iter()
            .filter(|w| w.ends_with("/status"))
            .count()
    };

    let down = HashMap::from([(
        "v1.a.example.com".to_string(),
        state(false, "ServiceNotFound", "gone"),
    )]);
    assert_eq!(writer.write_changed(&down).await, 1);
    let obj = api
        .get(
            "apiregistration.k8s.io/v1",
            "apiservices",
            "",
            "v1.a.example.com",
        )
        .unwrap();
    let cond = &obj["status"]["conditions"][0];
    assert_eq!(
        (&cond["type"], &cond["status"], &cond["reason"]),
        (
            &json!("Available"),
            &json!("False"),
            &json!("ServiceNotFound")
        )
    );
    assert_eq!(
        obj["spec"]["versionPriority"], 10,
        "the status write leaves spec alone"
    );

    // Once the watch has seen it, the same condition (even with a new time) is not written.
    let observed = eventually(2, || {
        let s = source.observed_status("v1.a.example.com");
        async move { s.is_some() }
    })
    .await;
    assert!(observed);
    assert_eq!(writer.write_changed(&down).await, 0);
    let again = HashMap::from([(
        "v1.a.example.com".to_string(),
        state(false, "ServiceNotFound", "gone"),
    )]);
    assert_eq!(writer.write_changed(&again).await, 0);
    // Other words for the same verdict (kube-aggregator's, say) are left as they are.
    let reworded = HashMap::from([(
        "v1.a.example.com".to_string(),
        state(
            false,
            "ServiceNotFound",
            "service/a-svc in \"ns\" is not present",
        ),
    )]);
    assert_eq!(writer.write_changed(&reworded).await, 0);
    assert_eq!(status_writes(), 1);

    let up = HashMap::from([(
        "v1.a.example.com".to_string(),
        state(true, "Passed", "all checks passed"),
    )]);
    assert_eq!(writer.write_changed(&up).await, 1);
    assert_eq!(status_writes(), 2);
}

fn service(name: &str, cluster_ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": "ns"},
           "spec": {"clusterIP": cluster_ip, "ports": [{"name": "https", "port": 443, "targetPort": 8443}]}})
}

#[tokio::test(flavor = "multi_thread")]
async fn services_resolve_by_cluster_ip_or_ready_endpoints() {
    let (_pki, api, client) = start().await;
    api.put(service("api", "10.96.0.10"));
    api.put(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "api-abc", "namespace": "ns", "labels": {"kubernetes.io/service-name": "api"}},
        "addressType": "IPv4",
        "ports": [{"name": "https", "port": 8443}],
        "endpoints": [
            {"addresses": ["127.0.0.11"], "conditions": {"ready": true}},
            {"addresses": ["127.0.0.12"], "conditions": {"ready": false}}
        ]
    }));
    let by_ip = cluster::ServiceResolver::spawn(client.clone(), RoutingMode::ClusterIp);
    assert_eq!(
        by_ip.resolve("api.ns.svc", 443).await.unwrap(),
        vec!["10.96.0.10:443".parse().unwrap()]
    );
    let by_ep = cluster::ServiceResolver::spawn(client, RoutingMode::Endpoints);
    assert_eq!(
        by_ep.resolve("api.ns.svc", 443).await.unwrap(),
        vec!["127.0.0.11:8443".parse().unwrap()]
    );
    assert_eq!(
        by_ep
            .resolve("nope.ns.svc", 443)
            .await
            .unwrap_err()
            .to_string(),
        "service/nope in \"ns\" is not present"
    );
    api.put(service("empty", "10.96.0.11"));
    let err = eventually(2, || {
        let by_ep = by_ep.clone();
        async move {
            by_ep
                .resolve("empty.ns.svc", 443)
                .await
                .err()
                .map(|e| e.to_string())
                .as_deref()
                == Some("no endpoints available for service \"empty\"")
        }
    })
    .await;
    assert!(err);
    // A change of readiness shows without asking the API server.
    let mut slice = api
        .get("discovery.k8s.io/v1", "endpointslices", "ns", "api-abc")
        .unwrap();
    slice["endpoints"][1]["conditions"]["ready"] = json!(true);
    api.put(slice);
    let both = eventually(2, || {
        let by_ep = by_ep.clone();
        async move {
            by_ep
                .resolve("api.ns.svc", 443)
                .await
                .is_ok_and(|a| a.len() == 2)
        }
    })
    .await;
    assert!(both);
}
