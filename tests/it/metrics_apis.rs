//! One API, several backends (issue 49): two metrics adapters built on
//! sigs.k8s.io/custom-metrics-apiserver (`tests/upstream/metricsadapter`), each serving the
//! custom and external metrics APIs with metrics of its own, and upstream's HPA controller
//! (kube-controller-manager v1.36.3) reading them, first through kube-aggregator, then through
//! apigw. kube-aggregator routes a group version to one Service: with the first adapter
//! registered, the second one's metrics do not exist for the cluster, and the HPAs on them
//! cannot scale. apigw serves each group version from both adapters (the second registered by
//! APIServiceBackend objects), so every HPA scales, under the same controller.

use crate::support::binary;
use crate::support::tool::{kubectl, run, Ran};
use crate::support::upstream::{
    clientgo, curl, wait_for, Adapter, Apigw, ControlPlane, ControllerManager,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A Deployment that runs nothing (no scheduler) and an HPA scaling it on `metric` with a
/// target of 10 per replica: an External metric, or the Object metric of `object` (a
/// Service). An average per replica needs no running pods; a value would.
fn workload(name: &str, metric: &str, object: Option<&str>) -> String {
    let spec = match object {
        None => format!(
            "type: External\n    external:\n      metric: {{name: {metric}}}\n      target: {{type: AverageValue, averageValue: \"10\"}}"
        ),
        Some(service) => format!(
            "type: Object\n    object:\n      describedObject: {{apiVersion: v1, kind: Service, name: {service}}}\n      metric: {{name: {metric}}}\n      target: {{type: AverageValue, averageValue: \"10\"}}"
        ),
    };
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
  - {spec}
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

/// The metrics APIs' three APIServices as the adapters declare them.
const METRICS_APIS: [&str; 3] = [
    "v1beta1.custom.metrics.k8s.io",
    "v1beta2.custom.metrics.k8s.io",
    "v1beta1.external.metrics.k8s.io",
];

/// The objects of a file of JSON documents between `---` lines.
fn documents(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).expect("the adapter's APIServices");
    text.split("\n---")
        .map(|d| d.trim().trim_start_matches("---").trim())
        .filter(|d| !d.is_empty())
        .map(json)
        .collect()
}

/// apigw's manifest directory: the first adapter's APIServices as they are, and the second
/// one as an APIServiceBackend of each, as a user registers it.
fn manifests(cp: &ControlPlane) -> PathBuf {
    let dir = cp.path("metrics-apis-at-apigw");
    std::fs::create_dir_all(&dir).expect("a manifest directory");
    let (a, b) = (&cp.state.adapters[0], &cp.state.adapters[1]);
    std::fs::copy(&a.apiservices, dir.join(format!("{}.yaml", a.name))).expect("copying");
    let backends: Vec<String> = documents(&b.apiservices)
        .iter()
        .map(|svc| {
            let name = svc["metadata"]["name"].as_str().expect("a name");
            json!({
                "apiVersion": "apigw.dev/v1alpha1",
                "kind": "APIServiceBackend",
                "metadata": {"name": format!("{}-{}", b.name, name.replace('.', "-"))},
                "spec": {
                    "apiService": name,
                    "service": svc["spec"]["service"],
                    "caBundle": svc["spec"]["caBundle"],
                },
            })
            .to_string()
        })
        .collect();
    assert_eq!(backends.len(), 3, "{backends:?}");
    let file = dir.join(format!("{}-backends.yaml", b.name));
    std::fs::write(&file, backends.join("\n---\n")).expect("writing the backends");
    dir
}

/// The HPAs: `jobs` on adapter-a's external metric (30: 3 replicas), `orders` on adapter-b's
/// (80: 8), and `backlog` on adapter-b's custom metric of Service `kubernetes` (50: 5).
fn workloads() -> String {
    [
        workload("jobs", "jobs_waiting", None),
        workload("orders", "orders_pending", None),
        workload("backlog", "backlog", Some("kubernetes")),
    ]
    .join("---\n")
}

fn replicas(cp: &ControlPlane, name: &str) -> i64 {
    let out = cp.kubectl(&["get", "deployment", name, "-n", "default", "-o", "json"]);
    json(&out.ok())["spec"]["replicas"]
        .as_i64()
        .unwrap_or_default()
}

/// Whether HPA `name` reports that it could not get its metric (`reason`).
fn failing(cp: &ControlPlane, name: &str, reason: &str) -> bool {
    let out = cp.kubectl(&["get", "hpa", name, "-n", "default", "-o", "json"]);
    json(&out.ok())["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "ScalingActive" && c["reason"] == reason)
}

/// What a `kubectl get --raw` that must fail says (`Error from server (...)`).
fn refusal(ran: &Ran) -> String {
    ran.fails().trim().to_string()
}

#[test]
fn both_adapters_scale_their_hpas_through_apigw_and_only_one_through_kube_aggregator() {
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
        let names = resource_names(&listed);
        for custom in &a.custom {
            let (name, _) = custom.split_once('=').expect("RESOURCE/METRIC=QUANTITY");
            assert!(
                names.contains(&name.to_string()),
                "{}: {name} not in {names:?}",
                a.name
            );
        }
    }

    // Through kube-aggregator: the first adapter's metric; the second's does not exist there.
    let jobs = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/jobs_waiting";
    let got = cp.kubectl(&["get", "--raw", jobs]).ok();
    assert_eq!(json(&got)["items"][0]["value"], "30", "{got}");
    let orders = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/orders_pending";
    let missing_at_kube = refusal(&cp.kubectl(&["get", "--raw", orders]));

    let kcm = ControllerManager::start(&cp, &cp.path("admin.kubeconfig"), "kcm-aggregator");
    cp.kubectl_in(&["apply", "-f", "-"], &workloads()).ok();
    assert!(
        wait_for(90, || replicas(&cp, "jobs") == 3),
        "the HPA on adapter-a's metric did not scale jobs to 3 (it has {}); kube-controller-manager:\n{}",
        replicas(&cp, "jobs"),
        kcm.logged()
    );
    assert!(
        wait_for(60, || failing(&cp, "orders", "FailedGetExternalMetric")
            && failing(&cp, "backlog", "FailedGetObjectMetric")),
        "the HPAs on adapter-b's metrics did not report FailedGetExternalMetric and FailedGetObjectMetric"
    );
    assert_eq!(
        replicas(&cp, "orders"),
        1,
        "orders scaled without its metric"
    );
    assert_eq!(
        replicas(&cp, "backlog"),
        1,
        "backlog scaled without its metric"
    );
    drop(kcm);

    // apigw in front of the same cluster: adapter-a's APIServices, adapter-b's backends.
    let args = cp.manifest_mode_in(&manifests(&cp));
    let gw = Apigw::start(&cp, &args);
    let admin = gw.kubeconfig(&cp, "admin");
    let mut wait = vec!["wait", "--for=condition=Available", "--timeout=90s"];
    let objects: Vec<String> = METRICS_APIS
        .iter()
        .map(|n| format!("apiservice/{n}"))
        .collect();
    wait.extend(objects.iter().map(String::as_str));
    kubectl(&admin, &wait).ok();
    let condition = json(
        &kubectl(
            &admin,
            &["get", "apiservice", METRICS_APIS[2], "-o", "json"],
        )
        .ok(),
    );
    let message = condition["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.starts_with("all checks passed: service ")
            && message.ends_with(", backend adapter-b-v1beta1-external-metrics-k8s-io"),
        "{condition}"
    );

    // `apigw check` lists each backend; `apigw doctor` walks each as `<apiservice>/<backend>`
    // and tells each APIService's routing order.
    let mut check = vec!["check"];
    check.extend(args.iter().map(String::as_str));
    let checked = binary::text(&binary::run(None, &check));
    let backend = format!(
        "{}-v1beta1-external-metrics-k8s-io",
        cp.state.adapters[1].name
    );
    assert!(
        checked.contains(&format!(
            "ok: APIServiceBackend {backend} -> {}:{} (beside APIService {}, priority 0)",
            cp.state.adapters[1].host, cp.state.adapters[1].port, METRICS_APIS[2]
        )),
        "{checked}"
    );
    let mut doctor = vec!["doctor", "--output", "json"];
    doctor.extend(args.iter().map(String::as_str));
    let ca_dir = cp.arg("doctor-ca");
    doctor.extend(["--ca-dir", &ca_dir]);
    let report: Value = serde_json::from_slice(&binary::run(None, &doctor).stdout).expect("JSON");
    let walked = |name: &str| {
        report["apiservices"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} not walked: {report:#}"))
            .clone()
    };
    let own = walked(METRICS_APIS[2]);
    let of_backend = walked(&format!("{}/{backend}", METRICS_APIS[2]));
    for r in [&own, &of_backend] {
        let failed: Vec<&Value> = r["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["status"] == "failed")
            .collect();
        assert!(failed.is_empty(), "{failed:?}");
    }
    let routing = own["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["check"] == "backends")
        .unwrap_or_else(|| panic!("no backends step: {own:#}"));
    assert_eq!(
        routing["message"],
        format!("routing order: its own service (priority 0), backend {backend} (priority 0); no resource is listed by two"),
        "{routing}"
    );

    // Every route form, each answered by the adapter that has the metric.
    let raw = |path: &str| json(&kubectl(&admin, &["get", "--raw", path]).ok());
    for version in ["v1beta1", "v1beta2"] {
        let base = format!("/apis/custom.metrics.k8s.io/{version}");
        let names = resource_names(&raw(&base));
        for a in &cp.state.adapters {
            for custom in &a.custom {
                let (name, value) = custom.split_once('=').expect("RESOURCE/METRIC=QUANTITY");
                assert!(
                    names.contains(&name.to_string()),
                    "{version}: {name} not in {names:?}"
                );
                let (resource, metric) = name.split_once('/').expect("RESOURCE/METRIC");
                let paths = match resource {
                    "namespaces" => vec![format!("{base}/namespaces/default/metrics/{metric}")],
                    // Root-scoped, by name (no node need exist; `*` would list none).
                    "nodes" => vec![format!("{base}/nodes/node-1/{metric}")],
                    _ => vec![
                        format!("{base}/namespaces/default/{resource}/kubernetes/{metric}"),
                        format!("{base}/namespaces/default/{resource}/*/{metric}"),
                    ],
                };
                for path in paths {
                    let got = raw(&path);
                    let item = if got["items"].is_array() {
                        &got["items"][0]
                    } else {
                        &got
                    };
                    assert_eq!(item["value"], value, "{path}: {got}");
                }
            }
        }
    }
    let external = raw("/apis/external.metrics.k8s.io/v1beta1");
    let names = resource_names(&external);
    for a in &cp.state.adapters {
        for metric in &a.external {
            let (name, value) = metric.split_once('=').expect("METRIC=QUANTITY");
            assert!(names.contains(&name.to_string()), "{name} not in {names:?}");
            let got = raw(&format!(
                "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/{name}"
            ));
            assert_eq!(got["items"][0]["value"], value, "{name}: {got}");
        }
    }
    // A metric neither adapter has: the answer of the APIService's own adapter, as through
    // kube-aggregator (where adapter-b's metric is one such).
    let nothing = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/nothing_here";
    let at_apigw = refusal(&kubectl(&admin, &["get", "--raw", nothing]));
    let at_kube = refusal(&cp.kubectl(&["get", "--raw", nothing]));
    assert_eq!(at_apigw, at_kube, "an unserved metric through both doors");
    assert_eq!(
        missing_at_kube.replace("orders_pending", "nothing_here"),
        at_kube,
        "kube-aggregator's answer for adapter-b's metric is its backend's 404"
    );
    // OpenAPI v3: the group version's document merged here from both adapters' (the same
    // paths: custom-metrics-apiserver serves metrics by path parameters), under its own hash.
    let gv = "apis/external.metrics.k8s.io/v1beta1";
    let theirs: Vec<Value> = cp
        .state
        .adapters
        .iter()
        .map(|a| direct(&cp, a, &format!("/openapi/v3/{gv}")))
        .collect();
    let merged = || -> Option<Value> {
        let index = json(&kubectl(&admin, &["get", "--raw", "/openapi/v3"]).ok());
        let url = index["paths"][gv]["serverRelativeURL"]
            .as_str()?
            .to_string();
        let doc = json(&kubectl(&admin, &["get", "--raw", &url]).ok());
        let covers = theirs.iter().all(|t| {
            t["paths"]
                .as_object()
                .is_some_and(|p| !p.is_empty() && p.keys().all(|k| doc["paths"].get(k).is_some()))
        });
        covers.then_some(doc)
    };
    assert!(
        wait_for(30, || merged().is_some()),
        "apigw's OpenAPI v3 of {gv} does not have each adapter's paths"
    );

    // Aggregated discovery lists both adapters' resources.
    let accept = "Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let url = format!("{}/apis", gw.url);
    let list = json(&curl(&cp, "admin", &["-H", accept, &url]).ok());
    let external_group = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["metadata"]["name"] == "external.metrics.k8s.io")
        .unwrap_or_else(|| panic!("no external.metrics.k8s.io in {list}"));
    let version = &external_group["versions"][0];
    assert_eq!(version["freshness"], "Current", "{version}");
    let listed: Vec<&str> = version["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["resource"].as_str())
        .collect();
    for metric in ["jobs_waiting", "orders_pending"] {
        assert!(listed.contains(&metric), "{metric} not in {version}");
    }

    // client-go's metrics clients, as the HPA controller reads.
    let names = |metrics: fn(&Adapter) -> &Vec<String>| -> Vec<String> {
        let all = cp.state.adapters.iter().flat_map(metrics);
        all.map(|m| m.split_once('=').map_or(m.as_str(), |(n, _)| n).to_string())
            .collect()
    };
    let (custom, external) = (names(|a| &a.custom), names(|a| &a.external));
    let read = clientgo(
        &admin,
        "metrics",
        &[
            &format!("-custom-metrics={}", custom.join(",")),
            &format!("-external-metrics={}", external.join(",")),
        ],
    )
    .json();
    for a in &cp.state.adapters {
        for (name, value) in a
            .custom
            .iter()
            .chain(&a.external)
            .filter_map(|m| m.split_once('='))
        {
            assert_eq!(
                read["metrics"][name], value,
                "client-go read {name}: {read}"
            );
        }
    }

    // The same HPAs under the HPA controller talking to apigw: every one scales.
    let kcm = ControllerManager::start(&cp, &admin, "kcm-apigw");
    let want = [("jobs", 3), ("orders", 8), ("backlog", 5)];
    let scaled = || want.iter().all(|(name, n)| replicas(&cp, name) == *n);
    assert!(
        wait_for(120, scaled),
        "through apigw, not every HPA scaled: {:?} (want {want:?}); kube-controller-manager:\n{}\napigw:\n{}",
        want.map(|(name, _)| (name, replicas(&cp, name))),
        kcm.logged(),
        gw.logged()
    );
}

/// The resource names of an APIResourceList.
fn resource_names(list: &Value) -> Vec<String> {
    list["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect()
}
