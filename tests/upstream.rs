//! The real Kubernetes tier: apigw in front of upstream's kube-apiserver, etcd and
//! sample-apiserver (built from their published modules by `scripts/upstream`), driven by
//! kubectl and client-go, and compared with kube-apiserver's own kube-aggregator serving the
//! same APIServices. Each test starts its own control plane (`support::upstream`).

mod support;

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::goaddon::{GoAddon, GoOpts};
use support::upstream::{clientgo, curl, kubectl, kubectl_in, wait_for, Apigw, ControlPlane};

const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1";
const AGGREGATED: &str =
    "Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

fn flunder(name: &str, reference: &str) -> String {
    format!("apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  name: {name}\nspec:\n  reference: {reference}\n")
}

/// 3a: kubectl on flunders and fischers through apigw in manifest mode; sample-apiserver
/// authenticates apigw's proxy certificate and X-Remote-* (its requestheader config read from
/// kube-apiserver's extension-apiserver-authentication ConfigMap) and authorizes apigw's user
/// and groups by SubjectAccessReview against kube-apiserver's RBAC.
#[test]
fn sample_apiserver_behind_apigw_in_manifest_mode() {
    let cp = ControlPlane::start(&["-register=false"]);
    let gw = Apigw::start(&cp, &cp.manifest_mode());
    let admin = gw.kubeconfig(&cp, "admin");
    let k = |args: &[&str]| kubectl(&admin, args).ok();
    let k_in = |args: &[&str], manifest: &str| kubectl_in(&admin, args, Some(manifest)).ok();

    // create, get (table and YAML), list
    let created = k_in(
        &["create", "-n", "default", "-f", "-"],
        &flunder("one", "first"),
    );
    assert!(
        created.contains("flunder.wardle.example.com/one created"),
        "{created}"
    );
    let table = k(&["get", "flunders", "-n", "default"]);
    assert!(
        table.starts_with("NAME") && table.contains("one"),
        "{table}"
    );
    let yaml = k(&["get", "flunder", "one", "-n", "default", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: Flunder")
            && yaml.contains("reference: first")
            && yaml.contains("uid: "),
        "{yaml}"
    );

    // a watch streams through apigw: started first, it sees an object created after it
    let mut watch = Command::new("kubectl")
        .args([
            "--kubeconfig",
            &admin.display().to_string(),
            "get",
            "flunders",
            "-n",
            "default",
        ])
        .args(["-w", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the watch lists what exists");
    assert_eq!(first, "flunder.wardle.example.com/one");

    // apply (client-side, then again changed), server-side apply, merge patch
    let applied = k_in(
        &["apply", "-n", "default", "-f", "-"],
        &flunder("two", "second"),
    );
    assert!(
        applied.contains("flunder.wardle.example.com/two created"),
        "{applied}"
    );
    let reapplied = k_in(
        &["apply", "-n", "default", "-f", "-"],
        &flunder("two", "changed"),
    );
    assert!(
        reapplied.contains("flunder.wardle.example.com/two configured"),
        "{reapplied}"
    );
    let ssa = k_in(
        &[
            "apply",
            "--server-side",
            "--field-manager=upstream-test",
            "-n",
            "default",
            "-f",
            "-",
        ],
        &flunder("three", "by-ssa"),
    );
    assert!(
        ssa.contains("flunder.wardle.example.com/three serverside-applied"),
        "{ssa}"
    );
    let managed = k(&[
        "get",
        "flunder",
        "three",
        "-n",
        "default",
        "-o",
        "yaml",
        "--show-managed-fields",
    ]);
    assert!(
        managed.contains("manager: upstream-test") && managed.contains("operation: Apply"),
        "{managed}"
    );
    let patched = k(&[
        "patch",
        "flunder",
        "two",
        "-n",
        "default",
        "--type=merge",
        "-p",
        r#"{"spec":{"reference":"patched"}}"#,
    ]);
    assert!(
        patched.contains("flunder.wardle.example.com/two patched"),
        "{patched}"
    );
    let two = kubectl(
        &admin,
        &["get", "flunder", "two", "-n", "default", "-o", "json"],
    )
    .json();
    assert_eq!(two["spec"]["reference"], "patched");
    assert!(
        two["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .is_some_and(|a| a.contains("changed")),
        "{two}"
    );

    let mut events = Vec::new();
    while events.len() < 4 {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => events.push(line),
            Err(_) => break,
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    // two: created, applied again, patched; three: created by server-side apply
    let seen = |name: &str| events.iter().filter(|e| *e == name).count();
    assert!(
        seen("flunder.wardle.example.com/two") >= 3,
        "the watch saw {events:?}"
    );
    assert_eq!(
        seen("flunder.wardle.example.com/three"),
        1,
        "the watch saw {events:?}"
    );

    // fischers (cluster-scoped) and sample-apiserver's BanFlunder admission, which reads them
    let fischer = "apiVersion: wardle.example.com/v1alpha1\nkind: Fischer\nmetadata:\n  name: strict\ndisallowedFlunders: [banned]\n";
    let made = k_in(&["create", "-f", "-"], fischer);
    assert!(
        made.contains("fischer.wardle.example.com/strict created"),
        "{made}"
    );
    let fischers = kubectl(&admin, &["get", "fischers", "-o", "json"]).json();
    assert_eq!(
        fischers["items"][0]["disallowedFlunders"][0], "banned",
        "{fischers}"
    );
    let banned = kubectl_in(
        &admin,
        &["create", "-n", "default", "-f", "-"],
        Some(&flunder("banned", "x")),
    )
    .fails();
    assert!(
        banned.contains(
            r#"flunders.wardle.example.com "banned" is forbidden: this name may not be used"#
        ),
        "{banned}"
    );

    // delete
    for (kind, name, ns) in [
        ("flunder", "one", "default"),
        ("flunder", "two", "default"),
        ("flunder", "three", "default"),
    ] {
        let out = k(&["delete", kind, name, "-n", ns]);
        assert!(out.contains("deleted"), "{out}");
    }
    let out = k(&["delete", "fischer", "strict"]);
    assert!(out.contains("deleted"), "{out}");
    let left = kubectl(&admin, &["get", "flunders", "-n", "default", "-o", "json"]).json();
    assert_eq!(left["items"].as_array().map(Vec::len), Some(0), "{left}");

    // Authorization is sample-apiserver's, by SubjectAccessReview to kube-apiserver, on the
    // user and groups apigw asserted: bob has no grant; alice's group wardle-users may list.
    let bob = gw.kubeconfig(&cp, "bob");
    let denied = kubectl(&bob, &["get", "flunders", "-n", "default"]).fails();
    assert!(
        denied.contains(r#"flunders.wardle.example.com is forbidden: User "bob" cannot list resource "flunders" in API group "wardle.example.com" in the namespace "default""#),
        "{denied}"
    );
    let grant = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: flunder-reader, namespace: default}\nrules:\n- apiGroups: [wardle.example.com]\n  resources: [flunders]\n  verbs: [get, list, watch]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: wardle-users-read, namespace: default}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: flunder-reader}\nsubjects:\n- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: wardle-users}\n";
    kubectl_in(
        &cp.path("admin.kubeconfig"),
        &["apply", "-f", "-"],
        Some(grant),
    )
    .ok();
    let alice = gw.kubeconfig(&cp, "alice");
    assert!(
        wait_for(30, || kubectl(
            &alice,
            &["get", "flunders", "-n", "default"]
        )
        .out
        .status
        .success()),
        "alice's group grant never reached sample-apiserver's authorizer"
    );
    let create = kubectl_in(
        &alice,
        &["create", "-n", "default", "-f", "-"],
        Some(&flunder("alices", "x")),
    )
    .fails();
    assert!(
        create.contains(r#"User "alice" cannot create resource "flunders""#),
        "{create}"
    );
}

/// 3b and 3d: kube-apiserver as the delegate, and client-go through apigw.
#[test]
fn kube_apiserver_as_the_delegate_for_kubectl_and_client_go() {
    let cp = ControlPlane::start(&["-register=false"]);
    let gw = Apigw::start(&cp, &cp.manifest_mode());
    let admin = gw.kubeconfig(&cp, "admin");
    let k = |args: &[&str]| kubectl(&admin, args).ok();

    // namespaces and configmaps are kube-apiserver's; it trusts apigw's X-Remote-*
    let ns = k(&["create", "namespace", "through-apigw"]);
    assert!(ns.contains("namespace/through-apigw created"), "{ns}");
    let cm = k(&[
        "create",
        "configmap",
        "cm",
        "-n",
        "through-apigw",
        "--from-literal=a=b",
    ]);
    assert!(cm.contains("configmap/cm created"), "{cm}");
    let got = kubectl(
        &admin,
        &[
            "get",
            "configmap",
            "cm",
            "-n",
            "through-apigw",
            "-o",
            "json",
        ],
    )
    .json();
    assert_eq!(got["data"]["a"], "b");
    let direct = cp
        .kubectl(&[
            "get",
            "configmap",
            "cm",
            "-n",
            "through-apigw",
            "-o",
            "json",
        ])
        .json();
    assert_eq!(
        direct["metadata"]["uid"], got["metadata"]["uid"],
        "one object, seen both ways"
    );
    let bob = gw.kubeconfig(&cp, "bob");
    let denied = kubectl(&bob, &["get", "configmaps", "-n", "through-apigw"]).fails();
    assert!(
        denied.contains(r#"configmaps is forbidden: User "bob" cannot list resource "configmaps" in API group "" in the namespace "through-apigw""#),
        "{denied}"
    );

    let whoami = kubectl(&admin, &["auth", "whoami", "-o", "json"]).json();
    assert_eq!(
        whoami["status"]["userInfo"]["username"], "admin",
        "{whoami}"
    );
    let groups = whoami["status"]["userInfo"]["groups"].to_string();
    assert!(
        groups.contains("system:masters") && groups.contains("system:authenticated"),
        "{whoami}"
    );

    // one merged /apis: kube's groups and the APIServices'
    let apis = curl(&cp, "admin", &[&format!("{}/apis", gw.url)]).json();
    let names: Vec<&str> = apis["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    for group in [
        "apiregistration.k8s.io",
        "apps",
        "rbac.authorization.k8s.io",
        "wardle.example.com",
    ] {
        assert!(
            names.contains(&group),
            "{group} missing from /apis: {names:?}"
        );
    }
    let v2 = curl(
        &cp,
        "admin",
        &["-H", AGGREGATED, &format!("{}/apis", gw.url)],
    )
    .json();
    assert_eq!(v2["kind"], "APIGroupDiscoveryList", "{v2}");
    let v2_names: Vec<&str> = v2["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|g| g["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        v2_names, names,
        "aggregated discovery lists the groups in /apis' order"
    );
    let openapi = curl(&cp, "admin", &[&format!("{}/openapi/v3", gw.url)]).json();
    for path in ["api/v1", "apis/apps/v1", "apis/wardle.example.com/v1alpha1"] {
        assert!(
            openapi["paths"].get(path).is_some(),
            "OpenAPI v3 lacks {path}: {openapi}"
        );
    }
    let explained = k(&["explain", "flunders.spec"]);
    assert!(explained.contains("reference"), "{explained}");
    let explained = k(&["explain", "configmaps.data"]);
    assert!(explained.contains("FIELD: data"), "{explained}");

    // client-go: aggregated discovery
    let disco = clientgo(&admin, "discovery", &[]).json();
    assert_eq!(disco["aggregated"], true, "{disco}");
    let flunders = disco["resources"]["wardle.example.com/v1alpha1"].to_string();
    assert!(
        flunders.contains("flunders") && flunders.contains("fischers"),
        "{disco}"
    );
    assert!(
        disco["resources"]["v1"].to_string().contains("configmaps"),
        "{disco}"
    );
    // the dynamic client: CRUD and a watch that sees each change in order
    let dynamic = clientgo(&admin, "dynamic", &["-namespace=through-apigw"]).json();
    assert_eq!(
        dynamic["events"],
        serde_json::json!(["ADDED", "MODIFIED", "MODIFIED", "DELETED"]),
        "{dynamic}"
    );
    assert_eq!(dynamic["reference"], "Flunder/other");
    // a typed client with protobuf on core objects, through the delegate
    let proto = clientgo(&admin, "protobuf", &["-namespace=through-apigw"]).json();
    let types = proto["contentTypes"].as_object().expect("content types");
    assert!(
        types.len() >= 4
            && types
                .values()
                .all(|t| t == "application/vnd.kubernetes.protobuf"),
        "{proto}"
    );
    // a streaming list (WatchList) from kube-apiserver and from sample-apiserver
    let listed = clientgo(
        &admin,
        "watchlist",
        &["-namespace=through-apigw", "-resource=configmaps"],
    )
    .json();
    assert_eq!(listed["initial"], serde_json::json!(["cm"]), "{listed}");
    kubectl_in(
        &admin,
        &["create", "-n", "through-apigw", "-f", "-"],
        Some(&flunder("streamed", "x")),
    )
    .ok();
    let listed = clientgo(
        &admin,
        "watchlist",
        &["-namespace=through-apigw", "-resource=flunders"],
    )
    .json();
    assert_eq!(
        listed["initial"],
        serde_json::json!(["streamed"]),
        "{listed}"
    );
    // CBOR, which this kube-apiserver serves (CBORServingAndStorage)
    let cbor = clientgo(&admin, "cbor", &["-namespace=through-apigw"]).json();
    let types = cbor["contentTypes"].as_object().expect("content types");
    assert!(
        types.len() >= 3 && types.values().all(|t| t == "application/cbor"),
        "{cbor}"
    );
    assert_eq!(cbor["data"]["through"], "apigw");
}

/// A JSON value's list of strings.
fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}
