//! One API, several backends (issue 49): two metrics adapters built on
//! sigs.k8s.io/custom-metrics-apiserver (`tests/upstream/metricsadapter`), each serving the
//! custom and external metrics APIs with metrics of its own, and upstream's HPA controller
//! (kube-controller-manager v1.36.3) reading them. kube-aggregator routes a group version to
//! one Service: with the first adapter registered, the second one's metrics do not exist for
//! the cluster, and an HPA on one of them cannot scale.

use crate::support::tool::run;
use crate::support::upstream::{wait_for, Adapter, ControlPlane, ControllerManager};
use serde_json::Value;
use std::path::Path;

/// A Deployment that runs nothing (no scheduler) and an HPA scaling it on `metric`, an
/// external metric, with a target of 10 per replica.
fn workload(name: &str, metric: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: worker, image: registry.invalid/worker}}]}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: {name}, namespace: default}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: {name}}}
  minReplicas: 1
  maxReplicas: 10
  metrics:
  - type: External
    external:
      metric: {{name: {metric}}}
      target: {{type: AverageValue, averageValue: "10"}}
"#
    )
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// GET `path` straight at adapter `a`, as a front proxy does: the front-proxy client
/// certificate and `admin` (system:masters) in the request headers.
fn direct(cp: &ControlPlane, a: &Adapter, path: &str) -> Value {
    let url = format!("https://{}:{}{path}", a.host, a.port);
    let resolve = format!("{}:{}:127.0.0.1", a.host, a.port);
    let (ca, crt, key) = (
        cp.arg("adapters-ca.crt"),
        cp.arg("front-proxy-client.crt"),
        cp.arg("front-proxy-client.key"),
    );
    let args = [
        "-sS",
        "--fail-with-body",
        "--max-time",
        "20",
        "--cacert",
        &ca,
        "--cert",
        &crt,
        "--key",
        &key,
        "--resolve",
        &resolve,
        "-H",
        "X-Remote-User: admin",
        "-H",
        "X-Remote-Group: system:masters",
        &url,
    ];
    json(&run(Path::new("curl"), &args, None).ok())
}

#[test]
fn through_kube_aggregator_only_the_registered_adapter_scales_an_hpa() {
    let cp = ControlPlane::start(&["-metrics-adapters"]);
    assert_eq!(cp.state.adapters.len(), 2, "{:?}", cp.state);
    assert!(cp.state.adapters[0].registered && !cp.state.adapters[1].registered);

    // Each adapter serves its own metrics, as its command line says.
    for a in &cp.state.adapters {
        let (metric, value) = a.external[0].split_once('=').expect("METRIC=QUANTITY");
        let path = format!("/apis/external.metrics.k8s.io/v1beta1/namespaces/default/{metric}");
        let got = direct(&cp, a, &path);
        assert_eq!(got["items"][0]["value"], value, "{}: {got}", a.name);
        let listed = direct(&cp, a, "/apis/custom.metrics.k8s.io/v1beta2");
        let names: Vec<&str> = listed["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .collect();
        for custom in &a.custom {
            let (name, _) = custom.split_once('=').expect("RESOURCE/METRIC=QUANTITY");
            assert!(names.contains(&name), "{}: {name} not in {names:?}", a.name);
        }
        let apiservices = std::fs::read_to_string(&a.apiservices).expect("its APIServices");
        assert!(
            apiservices.contains(&format!("\"name\":\"{}\"", a.name)),
            "{apiservices}"
        );
    }

    // The first adapter's metric, through kube-aggregator; the second's does not exist there.
    let jobs = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/jobs_waiting";
    let got = cp.kubectl(&["get", "--raw", jobs]).ok();
    assert_eq!(json(&got)["items"][0]["value"], "30", "{got}");
    let orders = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/orders_pending";
    let missing = cp.kubectl(&["get", "--raw", orders]);
    assert!(!missing.succeeded(), "{}", missing.stdout());

    let kcm = ControllerManager::start(&cp, &cp.path("admin.kubeconfig"), "kcm-aggregator");
    // adapter-a's jobs_waiting is 30: 3 replicas; adapter-b's orders_pending 80: 8.
    let workloads = [
        workload("jobs", "jobs_waiting"),
        workload("orders", "orders_pending"),
    ];
    cp.kubectl_in(&["apply", "-f", "-"], &workloads.join("---\n"))
        .ok();
    let replicas = |name: &str| {
        let out = cp.kubectl(&["get", "deployment", name, "-n", "default", "-o", "json"]);
        json(&out.ok())["spec"]["replicas"]
            .as_i64()
            .unwrap_or_default()
    };
    assert!(
        wait_for(90, || replicas("jobs") == 3),
        "the HPA on adapter-a's metric did not scale jobs to 3 (it has {}); kube-controller-manager:\n{}",
        replicas("jobs"),
        kcm.logged()
    );
    let failed = |name: &str| {
        let out = cp.kubectl(&["get", "hpa", name, "-n", "default", "-o", "json"]);
        json(&out.ok())["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "ScalingActive" && c["reason"] == "FailedGetExternalMetric")
    };
    assert!(
        wait_for(60, || failed("orders")),
        "the HPA on adapter-b's metric did not report FailedGetExternalMetric"
    );
    assert_eq!(replicas("orders"), 1, "orders scaled without its metric");
}
