//! The real Kubernetes tier: apigw in front of upstream's kube-apiserver, etcd and
//! sample-apiserver (built from their published modules by `scripts/upstream`), driven by
//! kubectl and client-go, and compared with kube-apiserver's own kube-aggregator serving the
//! same APIServices. Each test starts its own control plane (`support::upstream`).

use crate::support;

use crate::support::goaddon::{GoAddon, GoOpts};
use crate::support::tool::{kubectl, kubectl_command, kubectl_in};
use crate::support::upstream::{clientgo, curl, curl_without_cert, wait_for, Apigw, ControlPlane};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

const WARDLE: [&str; 2] = ["v1alpha1.wardle.example.com", "v1beta1.wardle.example.com"];
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
    gw.await_available(&cp, &WARDLE);
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
    let mut watch = kubectl_command(&admin, &["get", "flunders", "-n", "default"])
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
    gw.await_available(&cp, &WARDLE);
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
    let get_cm = [
        "get",
        "configmap",
        "cm",
        "-n",
        "through-apigw",
        "-o",
        "json",
    ];
    let got = kubectl(&admin, &get_cm).json();
    assert_eq!(got["data"]["a"], "b");
    let direct = cp.kubectl(&get_cm).json();
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

    // kube-apiserver's own reviews pass through: a TokenReview posted to apigw is answered by
    // kube-apiserver (apigw answers only the self* reviews, which report its own decisions)
    cp.kubectl(&[
        "create",
        "serviceaccount",
        "reviewed",
        "-n",
        "through-apigw",
    ])
    .ok();
    let token = cp
        .kubectl(&["create", "token", "reviewed", "-n", "through-apigw"])
        .ok();
    let review = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token.trim()}});
    let reviewed = curl(
        &cp,
        "admin",
        &[
            "-H",
            "Content-Type: application/json",
            "-d",
            &review.to_string(),
            &format!("{}/apis/authentication.k8s.io/v1/tokenreviews", gw.url),
        ],
    )
    .json();
    assert_eq!(reviewed["status"]["authenticated"], true, "{reviewed}");
    assert_eq!(
        reviewed["status"]["user"]["username"], "system:serviceaccount:through-apigw:reviewed",
        "{reviewed}"
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
    let names = each_str(&apis["groups"], "/name");
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
    let v2_names = each_str(&v2["items"], "/metadata/name");
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

/// The Go addon (a recording backend) registered in kube-apiserver (an ExternalName Service
/// and its APIService) and in apigw's manifest directory: one APIService, both front doors.
fn interop_backend(
    cp: &ControlPlane,
    world: &support::World,
    rt: &tokio::runtime::Runtime,
) -> GoAddon {
    let addon = rt.block_on(GoAddon::start(
        world,
        GoOpts {
            args: vec![
                format!(
                    "-requestheader-client-ca-file={}",
                    cp.arg("front-proxy-ca.crt")
                ),
                "-requestheader-allowed-names=front-proxy-client,apigw".into(),
            ],
            ..GoOpts::default()
        },
    ));
    let port = addon.addr.port();
    let bundle = support::base64_encode(world.pki.pem("addon-ca.crt").as_bytes());
    // v1beta1: a version the addon serves but leaves out of its aggregated /apis.
    let apiservice = |version: &str, priority: u32| {
        serde_json::json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": format!("{version}.interop.example.com")},
            "spec": {"group": "interop.example.com", "version": version, "groupPriorityMinimum": 1000,
                     "versionPriority": priority, "caBundle": bundle,
                     "service": {"namespace": "interop", "name": "widgets", "port": port}}})
    };
    let (v1, v1beta1) = (apiservice("v1", 15), apiservice("v1beta1", 10));
    let objects = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: interop}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: widgets, namespace: interop}}\nspec: {{type: ExternalName, externalName: 127.0.0.1, ports: [{{name: https, port: {port}}}]}}\n---\n{v1}\n---\n{v1beta1}\n"
    );
    cp.kubectl_in(&["apply", "-f", "-"], &objects).ok();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [v1, v1beta1]});
    std::fs::write(cp.path("apiservices/interop.json"), list.to_string())
        .expect("writing the manifest");
    addon
}

/// Group names and their versions, in order, of a `/apis` APIGroupList.
fn group_versions(apis: &Value) -> Vec<String> {
    each(&apis["groups"])
        .map(|g| {
            let versions = each_str(&g["versions"], "/version");
            format!(
                "{}={} (preferred {})",
                g["name"].as_str().unwrap_or(""),
                versions.join(","),
                g["preferredVersion"]["version"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// The same group versions in an aggregated (apidiscovery v2) list.
fn aggregated_versions(list: &Value) -> Vec<String> {
    each(&list["items"])
        .map(|g| {
            let versions: Vec<String> = each(&g["versions"])
                .map(|v| {
                    let resources = each_str(&v["resources"], "/resource");
                    format!(
                        "{}[{}]",
                        v["version"].as_str().unwrap_or(""),
                        resources.join(",")
                    )
                })
                .collect();
            format!(
                "{}={}",
                g["metadata"]["name"].as_str().unwrap_or(""),
                versions.join(",")
            )
        })
        .collect()
}

/// The identity headers a backend received, as the Go addon's /echo reports them.
fn remote_headers(echo: &Value) -> Vec<String> {
    let mut out: Vec<String> = echo["headers"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.to_ascii_lowercase().starts_with("x-remote-"))
        .map(|(k, v)| {
            format!(
                "{}: {}",
                k.to_ascii_lowercase(),
                each_str(v, "").join(" | ")
            )
        })
        .collect();
    out.sort();
    out
}

/// 3f: the same sample-apiserver and Go addon behind kube-apiserver's kube-aggregator and
/// behind apigw: the same discovery order, the same identity at the backend, the same Status
/// when the backend is down.
#[test]
fn the_same_backends_through_kube_aggregator_and_through_apigw() {
    let cp = ControlPlane::start(&[]);
    assert!(cp.state.registered);
    let world = support::World::new();
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let mut addon = interop_backend(&cp, &world, &rt);
    let mut args = cp.manifest_mode();
    args.extend([
        "--resolve".into(),
        format!("widgets.interop.svc:{0}=127.0.0.1:{0}", addon.addr.port()),
    ]);
    args.extend(["--availability-check-interval".into(), "10s".into()]);
    let gw = Apigw::start(&cp, &args);
    // (v1beta1.interop.example.com has no OpenAPI to wait for: kubectl waits for it below.)
    gw.await_available(&cp, &[WARDLE[0], WARDLE[1], "v1.interop.example.com"]);
    let names = [
        "apiservice/v1alpha1.wardle.example.com",
        "apiservice/v1beta1.wardle.example.com",
        "apiservice/v1.interop.example.com",
        "apiservice/v1beta1.interop.example.com",
    ];
    cp.kubectl(
        &[
            &["wait", "--for=condition=Available", "--timeout=90s"][..],
            &names[..],
        ]
        .concat(),
    )
    .ok();
    let kube = cp.state.apiserver.clone();
    assert!(
        wait_for(30, || curl(
            &cp,
            "admin",
            &[&format!("{kube}/apis/interop.example.com/v1")]
        )
        .out
        .status
        .success()),
        "kube-aggregator never reached the Go addon"
    );

    // discovery: /apis, /apis/<group> and aggregated v2, group by group and version by version
    let apis = |base: &str| group_versions(&curl(&cp, "admin", &[&format!("{base}/apis")]).json());
    assert_eq!(
        apis(&gw.url),
        apis(&kube),
        "/apis through apigw and through kube-aggregator"
    );
    for group in ["wardle.example.com", "interop.example.com"] {
        let one = |base: &str| curl(&cp, "admin", &[&format!("{base}/apis/{group}")]).json();
        assert_eq!(
            one(&gw.url)["versions"],
            one(&kube)["versions"],
            "/apis/{group}"
        );
        assert_eq!(
            one(&gw.url)["preferredVersion"],
            one(&kube)["preferredVersion"],
            "/apis/{group}"
        );
    }
    let v2 = |base: &str| {
        aggregated_versions(
            &curl(&cp, "admin", &["-H", AGGREGATED, &format!("{base}/apis")]).json(),
        )
    };
    // kube-aggregator merges a new APIService's discovery a moment after it is available.
    // The addon's v1beta1 is not in its aggregated list: listed without resources by both.
    assert!(
        wait_for(30, || v2(&gw.url) == v2(&kube)),
        "aggregated discovery through apigw {:?} and through kube-aggregator {:?}",
        v2(&gw.url),
        v2(&kube)
    );
    assert!(
        v2(&kube).iter().any(|g| g.contains("v1beta1[]")),
        "kube-aggregator lists the unlisted version without resources: {:?}",
        v2(&kube)
    );

    // identity: what the backend receives for an impersonated user with groups, uid and extra
    let echo = |base: &str, extra: &[&str]| {
        let url = format!("{base}/apis/interop.example.com/v1/echo");
        let mut args: Vec<&str> = extra.to_vec();
        args.push(&url);
        remote_headers(&curl(&cp, "admin", &args).json())
    };
    // kube-apiserver authorizes the impersonated user itself; apigw (AlwaysAllow) lets it pass
    let grant = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: interop-all}\nrules:\n- {apiGroups: [interop.example.com], resources: ['*'], verbs: ['*']}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: team-a-interop}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interop-all}\nsubjects:\n- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: team-a}\n";
    cp.kubectl_in(&["apply", "-f", "-"], grant).ok();
    let impersonated = [
        "-H",
        "Impersonate-User: carol",
        "-H",
        "Impersonate-Group: team-a",
        "-H",
        "Impersonate-Group: team-b",
        "-H",
        "Impersonate-Uid: uid-carol",
        "-H",
        "Impersonate-Extra-Scopes: read",
        "-H",
        "Impersonate-Extra-Scopes: write",
        "-H",
        "Impersonate-Extra-Example.com%2fteam: blue",
    ];
    let through_apigw = echo(&gw.url, &impersonated);
    assert_eq!(
        through_apigw,
        echo(&kube, &impersonated),
        "X-Remote-* at the backend"
    );
    assert!(
        through_apigw.contains(&"x-remote-user: carol".to_string()),
        "{through_apigw:?}"
    );
    assert_eq!(
        echo(&gw.url, &[]),
        echo(&kube, &[]),
        "X-Remote-* for admin's own certificate"
    );

    // the backend down: the same status code and Status reason, before and after the
    // availability checks notice
    let widgets = "/apis/interop.example.com/v1/namespaces/default/widgets";
    let status = |base: &str| {
        let ran = curl(
            &cp,
            "admin",
            &["-w", "\n%{http_code}", &format!("{base}{widgets}")],
        );
        let text = ran.stdout();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
        match serde_json::from_str::<Value>(body) {
            Ok(status) => (
                code.to_string(),
                status["reason"].as_str().unwrap_or("").to_string(),
                status["message"].as_str().unwrap_or("").to_string(),
            ),
            Err(_) => (
                code.to_string(),
                "(not a Status)".to_string(),
                body.to_string(),
            ),
        }
    };
    assert_eq!(status(&gw.url).0, "200");
    let port = addon.addr.port();
    rt.block_on(addon.kill());
    // kube-aggregator answers this one in text/plain; apigw in a Status with the same words
    // (docs/interop.md)
    let (gw_down, kube_down) = (status(&gw.url), status(&kube));
    assert_eq!(
        (gw_down.0.as_str(), kube_down.0.as_str()),
        ("503", "503"),
        "apigw {gw_down:?}, kube-aggregator {kube_down:?}"
    );
    assert_eq!(
        (gw_down.1.as_str(), kube_down.1.as_str()),
        ("ServiceUnavailable", "(not a Status)")
    );
    let refused = format!("error trying to reach service: dial tcp 127.0.0.1:{port}: ");
    // (unless a periodic check noticed in between: then each says so, as below)
    assert!(
        (gw_down.2.starts_with(&refused)
            || gw_down.2.starts_with("service unavailable: APIService"))
            && (kube_down.2.starts_with(&refused) || kube_down.2 == "service unavailable\n"),
        "apigw {gw_down:?}, kube-aggregator {kube_down:?}"
    );
    let unavailable = |name: &str| {
        let got = cp
            .kubectl(&["get", "apiservice", name, "-o", "json"])
            .json();
        got["status"]["conditions"][0]["status"] == "False"
    };
    assert!(
        wait_for(60, || unavailable("v1.interop.example.com")),
        "kube-aggregator never marked the APIService unavailable"
    );
    let mine = || {
        curl(
            &cp,
            "admin",
            &[&format!(
                "{}/apis/apiregistration.k8s.io/v1/apiservices/v1.interop.example.com",
                gw.url
            )],
        )
        .json()
    };
    assert!(
        wait_for(60, || mine()["status"]["conditions"][0]["status"]
            == "False"),
        "apigw never marked the APIService unavailable"
    );
    let mine = mine();
    let theirs = cp
        .kubectl(&["get", "apiservice", "v1.interop.example.com", "-o", "json"])
        .json();
    assert_eq!(
        mine["status"]["conditions"][0]["reason"], theirs["status"]["conditions"][0]["reason"],
        "apigw {mine} kube-aggregator {theirs}"
    );
    let (gw_down, kube_down) = (status(&gw.url), status(&kube));
    assert_eq!(
        (gw_down.0.as_str(), kube_down.0.as_str()),
        ("503", "503"),
        "apigw {gw_down:?}, kube-aggregator {kube_down:?}"
    );
    assert_eq!(kube_down.2, "service unavailable\n");
    assert!(gw_down.1 == "ServiceUnavailable" && gw_down.2.starts_with("service unavailable: APIService v1.interop.example.com is not available (FailedDiscoveryCheck)"), "{gw_down:?}");
}

/// The user a bearer `token` is at `base`, by a SelfSubjectReview (its `status.userInfo`).
fn who_is(cp: &ControlPlane, base: &str, token: &str) -> Value {
    let review = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#;
    let url = format!("{base}/apis/authentication.k8s.io/v1/selfsubjectreviews");
    let bearer = format!("Authorization: Bearer {token}");
    let out = curl_without_cert(
        cp,
        &[
            "--fail-with-body",
            "-H",
            &bearer,
            "-H",
            "Content-Type: application/json",
            "-d",
            review,
            &url,
        ],
    );
    out.json()["status"]["userInfo"].clone()
}

/// The Lease's holder, or "" while there is none.
fn lease_holder(cp: &ControlPlane) -> String {
    let lease = cp.kubectl(&[
        "get",
        "lease",
        "apigw",
        "-n",
        "kube-system",
        "-o",
        "json",
        "--ignore-not-found",
    ]);
    let text = lease.ok();
    if text.trim().is_empty() {
        return String::new();
    }
    let lease: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// 3c: two apigw replicas in cluster mode against the real kube-apiserver: APIServices and
/// Services from the cluster, a ServiceAccount token by TokenReview, SubjectAccessReview against
/// real RBAC, one Lease holder that writes status, the other taking over when it dies.
#[test]
fn cluster_mode_against_kube_apiserver() {
    let cp = ControlPlane::start(&[]);
    let mut args = cp.cluster_mode();
    args.extend(
        [
            "--authorization-mode",
            "Webhook",
            "--leader-elect-lease-duration",
            "4s",
            "--leader-elect-renew-deadline",
            "3s",
            "--leader-elect-retry-period",
            "1s",
            "--availability-check-interval",
            "5s",
        ]
        .map(String::from),
    );
    let a = Apigw::start_as(&cp, &args, "replica-a");
    let b = Apigw::start_as(&cp, &args, "replica-b");
    a.await_available(&cp, &WARDLE);
    b.await_available(&cp, &WARDLE);

    // the APIServices and their ExternalName Service came from the cluster
    for gw in [&a, &b] {
        let admin = gw.kubeconfig(&cp, "admin");
        let listed = kubectl(
            &admin,
            &["get", "--raw", "/apis/wardle.example.com/v1alpha1/flunders"],
        )
        .json();
        assert_eq!(listed["kind"], "FlunderList", "{listed}");
    }

    // a ServiceAccount token, checked by TokenReview: the same user through apigw as at
    // kube-apiserver itself, extras (credential id) included
    cp.kubectl(&["create", "serviceaccount", "robot", "-n", "default"])
        .ok();
    let token = cp
        .kubectl(&["create", "token", "robot", "-n", "default"])
        .ok();
    let token = token.trim();
    let bearer = format!("Authorization: Bearer {token}");
    let whoami = |base: &str| who_is(&cp, base, token);
    let through = whoami(&a.url);
    assert_eq!(
        through["username"], "system:serviceaccount:default:robot",
        "{through}"
    );
    assert_eq!(
        through,
        whoami(&cp.state.apiserver),
        "the token's user through apigw and at kube-apiserver"
    );

    // SubjectAccessReview against real RBAC: robot may list flunders in default, nothing more
    let grant = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: flunder-lister, namespace: default}\nrules:\n- {apiGroups: [wardle.example.com], resources: [flunders], verbs: [list]}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: robot-lists, namespace: default}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: flunder-lister}\nsubjects:\n- {kind: ServiceAccount, name: robot, namespace: default}\n";
    cp.kubectl_in(&["apply", "-f", "-"], grant).ok();
    let as_robot = |method: &str, path: &str| {
        let url = format!("{}{path}", a.url);
        curl_without_cert(
            &cp,
            &[
                "-o",
                "/dev/stderr",
                "-w",
                "%{http_code}",
                "-X",
                method,
                "-H",
                &bearer,
                "-H",
                "Content-Type: application/json",
                "-d",
                "{}",
                &url,
            ],
        )
    };
    let list = as_robot(
        "GET",
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders",
    );
    assert_eq!(list.stdout(), "200", "{}", list.text());
    let create = as_robot(
        "POST",
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders",
    );
    assert_eq!(create.stdout(), "403", "{}", create.text());
    let denied = String::from_utf8_lossy(&create.out.stderr).into_owned();
    assert!(
        denied.contains(r#"flunders.wardle.example.com is forbidden: User \"system:serviceaccount:default:robot\" cannot create resource \"flunders\" in API group \"wardle.example.com\" in the namespace \"default\""#),
        "{denied}"
    );

    // one Lease holder among the two replicas; the other takes over when it dies
    assert!(
        wait_for(20, || !lease_holder(&cp).is_empty()),
        "no replica took the Lease"
    );
    let holder = lease_holder(&cp);
    let (leader, follower, next) = if holder.starts_with("replica-a_") {
        (a, b, "replica-b_")
    } else {
        assert!(holder.starts_with("replica-b_"), "{holder}");
        (b, a, "replica-a_")
    };

    // the leader writes availability: break the Service (a loopback address nothing listens
    // on), watch the condition turn False, and count how often the status is rewritten while
    // kube-aggregator writes the same condition with its own words
    let broken = r#"{"spec":{"externalName":"127.0.0.2"}}"#;
    cp.kubectl(&[
        "patch",
        "service",
        "api",
        "-n",
        "wardle",
        "--type=merge",
        "-p",
        broken,
    ])
    .ok();
    let condition = || {
        cp.kubectl(&[
            "get",
            "apiservice",
            "v1alpha1.wardle.example.com",
            "-o",
            "json",
        ])
        .json()
    };
    assert!(
        wait_for(60, || condition()["status"]["conditions"][0]["status"]
            == "False"),
        "the APIService never turned unavailable: {}",
        condition()
    );
    let first = condition();
    let mut versions = std::collections::BTreeSet::new();
    let mut messages = std::collections::BTreeSet::new();
    let until = std::time::Instant::now() + Duration::from_secs(12);
    while std::time::Instant::now() < until {
        let now = condition();
        versions.insert(
            now["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
        messages.insert(
            now["status"]["conditions"][0]["message"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // kube-aggregator and the leader agree on status and reason; neither rewrites the other's
    // words, so the condition stays put
    assert_eq!(
        first["status"]["conditions"][0]["reason"], "FailedDiscoveryCheck",
        "{first}"
    );
    assert_eq!(
        messages.len(),
        1,
        "the message changed hands: {messages:#?}"
    );
    assert!(
        versions.len() <= 2,
        "the status was rewritten {} times in 12 s",
        versions.len()
    );
    let (leader_log, follower_log) = (leader.logged(), follower.logged());
    assert!(
        leader_log.contains("APIService unavailable"),
        "{leader_log}"
    );
    assert!(
        follower_log.contains("APIService unavailable"),
        "{follower_log}"
    );
    assert!(
        !follower_log.contains("APIService status written"),
        "the follower wrote status:\n{follower_log}"
    );
    let fixed = r#"{"spec":{"externalName":"127.0.0.1"}}"#;
    cp.kubectl(&[
        "patch",
        "service",
        "api",
        "-n",
        "wardle",
        "--type=merge",
        "-p",
        fixed,
    ])
    .ok();
    assert!(
        wait_for(60, || condition()["status"]["conditions"][0]["status"]
            == "True"),
        "never available again"
    );

    leader.kill();
    assert!(
        wait_for(30, || lease_holder(&cp).starts_with(next)),
        "the follower never took the Lease: {}; its log:\n{follower_log}",
        lease_holder(&cp)
    );
    // the new leader serves once its own check has seen the repaired Service
    follower.await_available(&cp, &WARDLE);
    let admin = follower.kubeconfig(&cp, "admin");
    kubectl(&admin, &["get", "flunders", "-A"]).ok();

    // this cluster has no APIServiceBackend CRD: said once, then quiet, through a whole test of
    // retries
    let log = follower.logged();
    assert_eq!(
        log.matches("does not serve apigw.dev/apiservicebackends")
            .count(),
        1,
        "{log}"
    );
    assert!(
        !log.contains("watching the cluster; retrying resource=apigw.dev/apiservicebackends"),
        "{log}"
    );
}

/// helm, as the chart's own checks install and cache it (charts/apigw/tests/check.py).
fn helm() -> std::path::PathBuf {
    let check =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/apigw/tests/check.py");
    let out = support::tool::run(
        std::path::Path::new("python3"),
        &[&check.display().to_string(), "--helm-path"],
        None,
    )
    .ok();
    std::path::PathBuf::from(out.lines().last().unwrap_or_default().trim())
}

/// The chart rendered by `helm template` as `release` in `namespace` with its `ci/<values>`.
fn render_chart(release: &str, values: &str, namespace: &str) -> String {
    let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/apigw");
    support::tool::run(
        &helm(),
        &[
            "template",
            release,
            &chart.display().to_string(),
            "-f",
            &chart.join("ci").join(values).display().to_string(),
            "--namespace",
            namespace,
            "--include-crds",
        ],
        None,
    )
    .ok()
}

/// 3e: the Helm chart, rendered with its default values and in cluster mode, applied to the
/// real kube-apiserver in namespaces that enforce PodSecurity `restricted`: every object is
/// admitted without a warning, and the Deployment's pod passes the enforcing admission (a
/// server-side dry run of a Pod with its template), while the same pod with an added capability is refused.
#[test]
fn the_helm_chart_is_admitted_by_kube_apiserver_under_pod_security_restricted() {
    let cp = ControlPlane::start(&["-sample=false", "-register=false"]);
    for (release, values) in [
        ("gw-default", "default-values.yaml"),
        ("gw-cluster", "cluster-values.yaml"),
    ] {
        let ns = format!("{release}-system");
        let labels = ["enforce", "warn", "audit"]
            .map(|mode| format!("pod-security.kubernetes.io/{mode}: restricted"))
            .join(", ");
        cp.kubectl_in(&["apply", "-f", "-"], &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{{labels}}}\n")).ok();
        let rendered = render_chart(release, values, &ns);
        let applied = cp.kubectl_in(&["apply", "-f", "-"], &rendered);
        let out = applied.ok();
        let warnings = String::from_utf8_lossy(&applied.out.stderr).into_owned();
        assert!(!warnings.contains("Warning"), "{values}: {warnings}");
        assert!(
            out.contains(&format!("deployment.apps/{release}-apigw created")),
            "{values}: {out}"
        );
        let objects =
            rendered.matches("\nkind: ").count() + usize::from(rendered.starts_with("kind: "));
        // The chart's CRD is cluster-scoped: the second release finds it there.
        let crd_again =
            |l: &str| l.starts_with("customresourcedefinition") && l.ends_with(" unchanged");
        assert_eq!(
            out.lines()
                .filter(|l| l.ends_with(" created") || crd_again(l))
                .count(),
            objects,
            "{values}: every object admitted:\n{out}"
        );

        let deployments = cp
            .kubectl(&["get", "deployments", "-n", &ns, "-o", "json"])
            .json();
        for d in deployments["items"].as_array().expect("deployments") {
            let mut pod = serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "probe", "namespace": ns, "labels": d["spec"]["template"]["metadata"]["labels"]},
                "spec": d["spec"]["template"]["spec"],
            });
            let admitted =
                cp.kubectl_in(&["create", "--dry-run=server", "-f", "-"], &pod.to_string());
            assert!(
                admitted.out.status.success() && !admitted.text().contains("Warning"),
                "{values}: {}",
                admitted.text()
            );
            pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
                serde_json::json!(["NET_ADMIN"]);
            let refused = cp
                .kubectl_in(&["create", "--dry-run=server", "-f", "-"], &pod.to_string())
                .fails();
            assert!(
                refused.contains(r#"violates PodSecurity "restricted:latest""#),
                "{values}: {refused}"
            );
        }
    }
}

/// 47.6: the chart in cluster mode, applied to kube-apiserver, and apigw run with a token of the
/// chart's ServiceAccount and nothing else (never an admin identity), as the chart runs it
/// (`authorization: Webhook`, `POD_NAMESPACE` the release's): it lists the APIServices and
/// Services, takes the cluster's FlowSchemas (one created with kubectl moves a request), holds
/// the Lease in its namespace and writes APIService status, reviews tokens and access by the
/// cluster, and the cluster refuses it nothing.
#[test]
fn cluster_mode_with_exactly_the_charts_rbac() {
    let cp = ControlPlane::start(&[]);
    let (release, ns) = ("gw", "gw-system");
    cp.kubectl(&["create", "namespace", ns]).ok();
    let rendered = render_chart(release, "cluster-values.yaml", ns);
    cp.kubectl_in(&["apply", "-f", "-"], &rendered).ok();
    let modes: Vec<&str> = rendered
        .lines()
        .skip_while(|l| l.trim() != "authorizationMode:")
        .skip(1)
        .take_while(|l| l.trim_start().starts_with("- "))
        .map(|l| l.trim_start().trim_start_matches("- "))
        .collect();
    assert_eq!(
        modes,
        ["Webhook"],
        "the chart's authorization in cluster mode"
    );
    let token = cp
        .kubectl(&["create", "token", &format!("{release}-apigw"), "-n", ns])
        .ok();
    let kubeconfig = cp.token_kubeconfig(token.trim(), "chart-sa.kubeconfig");
    let mut args = cp.cluster_mode_with(&kubeconfig);
    args.extend(
        [
            "--authorization-mode",
            "Webhook",
            "--availability-check-interval",
            "5s",
        ]
        .map(String::from),
    );
    let gw = Apigw::start_with_env(
        &cp,
        &args,
        &[("POD_NAME", "gw-apigw-0"), ("POD_NAMESPACE", ns)],
    );
    gw.await_available(&cp, &WARDLE);

    // The Lease in the release's namespace, held by this replica, and the status it writes.
    let holder = || {
        let lease = cp.kubectl(&[
            "get",
            "lease",
            "apigw",
            "-n",
            ns,
            "-o",
            "json",
            "--ignore-not-found",
        ]);
        serde_json::from_str::<Value>(&lease.ok()).unwrap_or(Value::Null)["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        wait_for(30, || holder().starts_with("gw-apigw-0_")),
        "no Lease held in {ns}; apigw's log:\n{}",
        gw.logged()
    );

    // Access reviewed by the cluster: bob refused with kube's words, alice's group granted.
    let flunders = format!(
        "{}/apis/wardle.example.com/v1alpha1/namespaces/default/flunders",
        gw.url
    );
    let refused = curl(&cp, "bob", &[&flunders]).text();
    assert!(
        refused.contains(r#"User \"bob\" cannot list resource \"flunders\""#),
        "{refused}"
    );
    // A token reviewed by the cluster.
    cp.kubectl(&["create", "serviceaccount", "robot", "-n", "default"])
        .ok();
    let robot = cp
        .kubectl(&["create", "token", "robot", "-n", "default"])
        .ok();
    let whoami = who_is(&cp, &gw.url, robot.trim());
    assert_eq!(
        whoami["username"], "system:serviceaccount:default:robot",
        "{whoami}"
    );

    // The cluster's FlowSchemas in force: one made with kubectl moves alice's request.
    let path = "/api/v1/namespaces/default/configmaps";
    let kube = cp.state.apiserver.clone();
    let before = pf_uids(&cp, &kube, "alice", path);
    assert!(
        wait_for(30, || pf_uids(&cp, &gw.url, "alice", path) == before),
        "apigw does not classify as the cluster: {:?} vs {before:?}; apigw's log:\n{}",
        pf_uids(&cp, &gw.url, "alice", path),
        gw.logged()
    );
    cp.kubectl_in(
        &["apply", "-f", "-"],
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: alice-first}\n\
         spec:\n  priorityLevelConfiguration: {name: workload-low}\n  matchingPrecedence: 50\n\
         \x20 distinguisherMethod: {type: ByUser}\n  rules:\n\
         \x20 - subjects: [{kind: User, user: {name: alice}}]\n\
         \x20   resourceRules: [{verbs: [\"*\"], apiGroups: [\"*\"], resources: [\"*\"], namespaces: [\"*\"], clusterScope: true}]\n",
    )
    .ok();
    let uid = cp
        .kubectl(&[
            "get",
            "flowschema",
            "alice-first",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .ok();
    assert!(
        wait_for(30, || pf_uids(&cp, &gw.url, "alice", path).0 == uid.trim()),
        "the FlowSchema made with kubectl is not in force at apigw: {:?}; apigw's log:\n{}",
        pf_uids(&cp, &gw.url, "alice", path),
        gw.logged()
    );

    // An APIServiceBackend (the chart's CRD) made with kubectl: a second backend of
    // v1alpha1.wardle.example.com, here sample-apiserver again, checked and routed with it.
    let svc = serde_json::from_str::<Value>(
        &cp.kubectl(&["get", "apiservice", WARDLE[0], "-o", "json"])
            .ok(),
    )
    .expect("the APIService");
    let backend = json!({
        "apiVersion": "apigw.dev/v1alpha1", "kind": "APIServiceBackend",
        "metadata": {"name": "wardle-second"},
        "spec": {"apiService": WARDLE[0], "service": svc["spec"]["service"],
                 "caBundle": svc["spec"]["caBundle"], "priority": 1}
    });
    cp.kubectl_in(&["apply", "-f", "-"], &backend.to_string())
        .ok();
    let message = || {
        let url = format!(
            "{}/apis/apiregistration.k8s.io/v1/apiservices/{}",
            gw.url, WARDLE[0]
        );
        let got = curl(&cp, "admin", &[&url]).stdout();
        serde_json::from_str::<Value>(&got).unwrap_or(Value::Null)["status"]["conditions"][0]
            ["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        wait_for(30, || message().starts_with(
            "all checks passed: backend wardle-second, service wardle/api; "
        )),
        "apigw did not take the APIServiceBackend: {}; its log:\n{}",
        message(),
        gw.logged()
    );
    // Both list flunders: the backend of priority 1 serves them now, as the status says.
    assert!(
        message().contains("flunders by backend wardle-second over service wardle/api"),
        "{}",
        message()
    );
    let listed = curl(&cp, "admin", &[&flunders]).stdout();
    let kind = serde_json::from_str::<Value>(&listed).unwrap_or(Value::Null)["kind"].clone();
    assert_eq!(kind, "FlunderList", "{listed}");

    // Nothing refused by the cluster: no 403 from kube-apiserver in apigw's log. 403 counts
    // only as a number of its own, so a timestamp's microseconds or a port (40375) do not.
    let log = gw.logged();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| {
            !l.contains("apigw::access") && (has_number(l, "403") || l.contains("orbidden"))
        })
        .collect();
    assert!(
        refusals.is_empty(),
        "the cluster refused apigw:\n{}",
        refusals.join("\n")
    );
}

/// Whether `number` occurs in `text` with no digit on either side.
fn has_number(text: &str, number: &str) -> bool {
    text.match_indices(number).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + number.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
    })
}

/// The elements of a JSON array (none when `v` is not one).
fn each(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

/// The string at `pointer` in each element of a JSON array that has one.
fn each_str<'a>(v: &'a Value, pointer: &str) -> Vec<&'a str> {
    each(v)
        .filter_map(|e| e.pointer(pointer).and_then(Value::as_str))
        .collect()
}

/// What the gatekeeper webhook decides: alice may read wardle resources, bob is suspended
/// from flunders, deletes fail (an HTTP 500), anything else is no opinion.
fn gatekeeper(spec: &Value) -> Option<Value> {
    let ra = &spec["resourceAttributes"];
    let (user, verb) = (spec["user"].as_str(), ra["verb"].as_str());
    Some(match (user, verb, ra["resource"].as_str()) {
        (_, Some("delete"), _) => return None,
        (Some("alice"), Some("get" | "list" | "watch"), _) => {
            json!({"allowed": true, "reason": "alice reads wardle"})
        }
        (Some("bob"), _, Some("flunders")) => {
            json!({"allowed": false, "denied": true, "reason": "bob is suspended"})
        }
        _ => json!({"allowed": false}),
    })
}

/// 32: one `AuthorizationConfiguration` file (a webhook with a match condition, then RBAC)
/// given to kube-apiserver and to apigw: the same requests get the same decisions through
/// both front doors (and the same 403 message), and apigw sends the webhook the same
/// SubjectAccessReview kube-apiserver sends.
#[test]
fn an_authorization_config_kube_apiserver_takes_decides_the_same_in_apigw() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let pki = support::Pki::new();
    let hook = rt.block_on(support::authz_webhook::AuthzWebhook::start(
        &pki, gatekeeper,
    ));
    let kubeconfig = hook.kubeconfig(pki.path("webhook.kubeconfig"));
    let config = pki.path("authorization.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n\
             - type: Webhook\n  name: gatekeeper\n  webhook:\n    timeout: 5s\n\
             \x20   subjectAccessReviewVersion: v1\n    matchConditionSubjectAccessReviewVersion: v1\n\
             \x20   failurePolicy: NoOpinion\n    authorizedTTL: 1m\n    unauthorizedTTL: 1m\n\
             \x20   connectionInfo:\n      type: KubeConfigFile\n      kubeConfigFile: {}\n\
             \x20   matchConditions:\n\
             \x20   - expression: has(request.resourceAttributes) && request.resourceAttributes.group == 'wardle.example.com'\n\
             - type: RBAC\n  name: rbac\n",
            kubeconfig.display()
        ),
    )
    .expect("the authorization config");
    // RBAC grants bob what the webhook's denial must override, in both.
    let rbac = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: flunder-reader}\n\
                rules: [{apiGroups: [wardle.example.com], resources: [flunders], verbs: [get, list]}]\n---\n\
                apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: bob-reads-flunders}\n\
                roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: flunder-reader}\n\
                subjects: [{kind: User, name: bob, apiGroup: rbac.authorization.k8s.io}]\n";
    let policy = pki.path("rbac.yaml");
    std::fs::write(&policy, rbac).expect("the RBAC file");

    // Anonymous requests at /apis only, in both.
    let authn = pki.path("authentication.yaml");
    std::fs::write(
        &authn,
        "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\n\
         anonymous:\n  enabled: true\n  conditions:\n  - path: /apis\n",
    )
    .expect("the authentication config");

    let config_arg = format!("-authorization-config={}", config.display());
    let authn_arg = format!("-apiserver-arg=--authentication-config={}", authn.display());
    let cp = ControlPlane::start(&[&config_arg, &authn_arg]);
    cp.kubectl_in(&["apply", "-f", "-"], rbac).ok();
    let mut args = cp.manifest_mode();
    args.extend([
        "--authorization-config".into(),
        config.display().to_string(),
        "--rbac-policy-file".into(),
        policy.display().to_string(),
        "--authentication-config".into(),
        authn.display().to_string(),
    ]);
    let gw = Apigw::start(&cp, &args);
    gw.await_available(&cp, &WARDLE);
    let kube = cp.state.apiserver.clone();
    let flunders = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders";
    // (user, method, path): the answer's status code and, for a 403, its message.
    let ask = |base: &str, user: &str, method: &str, path: &str| {
        let ran = curl(
            &cp,
            user,
            &[
                "-X",
                method,
                "-w",
                "\n%{http_code}",
                &format!("{base}{path}"),
            ],
        );
        let text = ran.stdout();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
        let message = serde_json::from_str::<Value>(body)
            .map(|v| v["message"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default();
        (code.to_string(), message)
    };
    hook.take();
    // alice reads flunders by the webhook's leave; kube-apiserver asks first.
    let through_kube = ask(&kube, "alice", "GET", flunders);
    let kube_specs = hook.take();
    let through_apigw = ask(&gw.url, "alice", "GET", flunders);
    let apigw_specs = hook.take();
    assert_eq!(through_kube.0, "200", "{through_kube:?}");
    assert_eq!(through_apigw, through_kube);
    assert!(
        !kube_specs.is_empty(),
        "kube-apiserver never asked the webhook"
    );
    // sample-apiserver's own review of alice (through kube-apiserver) is cached there by
    // now: what reached the webhook after the request through apigw is apigw's review.
    assert_eq!(apigw_specs.len(), 1, "{apigw_specs:#?}");
    assert!(
        kube_specs.contains(&apigw_specs[0]),
        "apigw's review differs from kube-apiserver's:\napigw: {}\nkube: {kube_specs:#?}",
        apigw_specs[0]
    );

    // A list with label and field selectors: they reach the webhook as requirements, the
    // same from both.
    let selected = format!(
        "{flunders}?labelSelector=app%3Dweb%2Ctier%20in%20(a%2Cb)%2C!legacy&fieldSelector=metadata.name%3Done"
    );
    hook.take();
    let through_kube = ask(&kube, "alice", "GET", &selected);
    let kube_specs = hook.take();
    let through_apigw = ask(&gw.url, "alice", "GET", &selected);
    let apigw_specs = hook.take();
    assert_eq!(
        through_apigw.0, through_kube.0,
        "{through_kube:?} {through_apigw:?}"
    );
    assert_eq!(apigw_specs.len(), 1, "{apigw_specs:#?}");
    assert!(
        apigw_specs[0]["resourceAttributes"]["labelSelector"]["requirements"].is_array(),
        "{}",
        apigw_specs[0]
    );
    assert!(
        kube_specs.contains(&apigw_specs[0]),
        "apigw's review with selectors differs from kube-apiserver's:\napigw: {}\nkube: {kube_specs:#?}",
        apigw_specs[0]
    );

    for (user, method, path, want) in [
        // The webhook's denial wins over RBAC's grant, with its reason in the message.
        ("bob", "GET", flunders.to_string(), "403"),
        // Not a wardle resource: the webhook is not asked, and RBAC grants nothing.
        (
            "bob",
            "GET",
            "/apis/apps/v1/namespaces/default/deployments".to_string(),
            "403",
        ),
        // The webhook fails (after upstream's retries) and nothing else allows: 500.
        ("alice", "DELETE", format!("{flunders}/nothing"), "500"),
    ] {
        let through_kube = ask(&kube, user, method, &path);
        let through_apigw = ask(&gw.url, user, method, &path);
        assert_eq!(
            through_kube.0, want,
            "{user} {method} {path} through kube-apiserver: {through_kube:?}"
        );
        assert_eq!(
            through_apigw.0, want,
            "{user} {method} {path} through apigw: {through_apigw:?}"
        );
        if want == "403" {
            assert_eq!(through_apigw.1, through_kube.1, "{user} {method} {path}");
        }
    }
    let denied = ask(&gw.url, "bob", "GET", flunders);
    assert!(denied.1.ends_with(": bob is suspended"), "{denied:?}");

    // Without credentials: anonymous at /apis (then refused by authorization, not 401),
    // 401 anywhere else, through both.
    let anonymous = |base: &str, path: &str| {
        let url = format!("{base}{path}");
        curl_without_cert(&cp, &["-o", "/dev/null", "-w", "%{http_code}", &url]).stdout()
    };
    for (path, want) in [
        ("/apis", "403"),
        ("/apis/", "401"),
        ("/api", "401"),
        (flunders, "401"),
    ] {
        assert_eq!(
            anonymous(&kube, path),
            want,
            "{path} without credentials through kube-apiserver"
        );
        assert_eq!(
            anonymous(&gw.url, path),
            want,
            "{path} without credentials through apigw"
        );
    }
}

/// The doctor's report as JSON, run against this control plane with `args`.
fn doctor(cp: &ControlPlane, args: &[String]) -> Value {
    let mut all: Vec<&str> = vec!["doctor", "--output", "json"];
    all.extend(args.iter().map(String::as_str));
    let ca_dir = cp.arg("doctor-ca");
    all.extend(["--ca-dir", &ca_dir]);
    let out = support::binary::run(None, &all);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}):\n{}",
            support::binary::text(&out)
        )
    })
}

/// The gateway-wide step `check` of a doctor report: (status, reason, fix).
fn trust_step(report: &Value, check: &str, reason: Option<&str>) -> (String, String) {
    let step = report["gateway"]
        .as_array()
        .and_then(|steps| {
            steps
                .iter()
                .find(|s| s["check"] == check && reason.is_none_or(|r| s["reason"] == r))
        })
        .unwrap_or_else(|| panic!("no {check} ({reason:?}) step in {report:#}"));
    (
        step["status"].as_str().unwrap_or_default().to_string(),
        step["fix"].as_str().unwrap_or_default().to_string(),
    )
}

/// 32: `apigw doctor` in cluster mode reads what backends trust from kube-apiserver's
/// `kube-system/extension-apiserver-authentication` ConfigMap, and checks apigw's proxy
/// client certificate against it: the right one passes; one from the cluster CA is a wrong
/// requestheader CA, one from the front-proxy CA named `stranger` is a disallowed CN, each
/// with its fix. The same ConfigMap written by kubectl, without its UID header key, is a
/// missing UID header.
#[test]
fn the_doctor_checks_apigw_against_kube_apiservers_front_proxy_settings() {
    let cp = ControlPlane::start(&["-sample=false", "-register=false"]);
    let right = doctor(&cp, &cp.cluster_mode());
    for check in ["backend-trust-chain", "backend-trust-name"] {
        assert_eq!(trust_step(&right, check, None).0, "ok", "{right:#}");
    }
    let headers: Vec<&Value> = right["gateway"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter(|s| s["check"] == "backend-trust-headers")
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(headers.len(), 4, "{right:#}");
    assert!(headers.iter().all(|s| s["status"] == "ok"), "{right:#}");

    let with_cert = |name: &str| {
        // The front door's flags, but the proxy client pair.
        let mut args: Vec<String> = Vec::new();
        let mut given = cp.cluster_mode().into_iter();
        while let Some(arg) = given.next() {
            if arg.starts_with("--proxy-client-") {
                given.next();
            } else {
                args.push(arg);
            }
        }
        args.extend([
            "--proxy-client-cert-file".into(),
            cp.arg(&format!("{name}.crt")),
            "--proxy-client-key-file".into(),
            cp.arg(&format!("{name}.key")),
        ]);
        args
    };
    let wrong_ca = doctor(&cp, &with_cert("alice"));
    let (status, fix) = trust_step(
        &wrong_ca,
        "backend-trust-chain",
        Some("UntrustedProxyClientCert"),
    );
    assert_eq!(status, "failed");
    assert!(fix.contains("--requestheader-client-ca-file"), "{fix}");
    assert_eq!(wrong_ca["ok"], false);

    let stranger = doctor(&cp, &with_cert("stranger-proxy-client"));
    let (status, fix) = trust_step(&stranger, "backend-trust-name", Some("DisallowedName"));
    assert_eq!(status, "failed");
    assert!(
        fix.contains("add stranger to kube-apiserver's --requestheader-allowed-names"),
        "{fix}"
    );

    // The ConfigMap as kubectl writes it, less the UID header key (a cluster before 1.32).
    let yaml = cp
        .kubectl(&[
            "get",
            "configmap",
            "-n",
            "kube-system",
            "extension-apiserver-authentication",
            "-o",
            "yaml",
        ])
        .ok();
    let mut cm: Value = apigw_core::yaml::from_str(&yaml).expect("the ConfigMap");
    let removed = cm["data"]
        .as_object_mut()
        .and_then(|d| d.remove("requestheader-uid-headers"));
    assert!(
        removed.is_some(),
        "kube-apiserver published no UID header: {yaml}"
    );
    let file = cp.path("extension-apiserver-authentication.yaml");
    std::fs::write(&file, apigw_core::yaml::to_string(&cm).expect("yaml")).expect("write");
    let mut args = cp.cluster_mode();
    args.extend([
        "--extension-apiserver-authentication".into(),
        file.display().to_string(),
    ]);
    let no_uid = doctor(&cp, &args);
    let (status, fix) = trust_step(&no_uid, "backend-trust-headers", Some("MissingUidHeader"));
    assert_eq!(status, "warning");
    assert!(fix.contains("--requestheader-uid-headers"), "{fix}");
}

/// The PF headers of `user`'s GET of `path` at `base`: (FlowSchema UID, PriorityLevel UID).
fn pf_uids(cp: &ControlPlane, base: &str, user: &str, path: &str) -> (String, String) {
    let ran = curl(
        cp,
        user,
        &["-o", "/dev/null", "-D", "-", &format!("{base}{path}")],
    );
    let headers = ran.stdout().to_ascii_lowercase();
    let find = |name: &str| {
        headers
            .lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_default()
    };
    (
        find("x-kubernetes-pf-flowschema-uid:"),
        find("x-kubernetes-pf-prioritylevel-uid:"),
    )
}

/// The seat limits a server exports on `/metrics`, per metric and priority level: nominal,
/// lower and upper bounds, and the limit borrowing set. The exempt level's limit is left out:
/// it is the peak of the level's demand, and kube-apiserver's own loopback requests are exempt.
fn seat_limits(cp: &ControlPlane, base: &str) -> std::collections::BTreeMap<String, f64> {
    let ran = curl(cp, "admin", &[&format!("{base}/metrics")]);
    ran.stdout()
        .lines()
        .filter(|l| {
            ["nominal", "lower", "upper", "current"]
                .iter()
                .any(|m| l.starts_with(&format!("apiserver_flowcontrol_{m}_limit_seats{{")))
        })
        .filter(|l| !l.contains("current_limit_seats{priority_level=\"exempt\"}"))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// 31: in cluster mode apigw takes its APF configuration from the cluster's FlowSchemas and
/// PriorityLevelConfigurations: the same request by the same user is classified into the same
/// objects (the same UIDs in the PF headers) through kube-apiserver and through apigw, and a
/// FlowSchema created with kubectl moves it in both.
#[test]
fn apf_classifies_as_kube_apiserver_from_the_clusters_flowschemas() {
    let cp = ControlPlane::start(&["-sample=false", "-register=false"]);
    let gw = Apigw::start(&cp, &cp.cluster_mode());
    let kube = cp.state.apiserver.clone();
    let path = "/api/v1/namespaces/default/configmaps";
    let through_kube = pf_uids(&cp, &kube, "alice", path);
    assert!(
        !through_kube.0.is_empty(),
        "kube-apiserver sent no PF headers"
    );
    // apigw reads the objects once its watch has listed them.
    assert!(
        wait_for(30, || pf_uids(&cp, &gw.url, "alice", path) == through_kube),
        "apigw classified alice's request into other objects than kube-apiserver: {:?} vs {through_kube:?}",
        pf_uids(&cp, &gw.url, "alice", path)
    );
    let admin_kube = pf_uids(&cp, &kube, "admin", path);
    assert_eq!(
        pf_uids(&cp, &gw.url, "admin", path),
        admin_kube,
        "system:masters: exempt in both"
    );
    // The same seats: each level's nominal share, what it may lend and borrow, and, idle,
    // the limit borrowing gives it.
    let limits = seat_limits(&cp, &kube);
    assert!(
        limits.len() >= 4 * 7,
        "kube-apiserver's seat metrics: {limits:?}"
    );
    assert_eq!(
        seat_limits(&cp, &gw.url),
        limits,
        "apigw's seats against kube-apiserver's"
    );

    cp.kubectl_in(
        &["apply", "-f", "-"],
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\n\
         metadata: {name: alice-level}\nspec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 10\n\
         \x20   limitResponse: {type: Reject}\n---\n\
         apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: alice-first}\n\
         spec:\n  priorityLevelConfiguration: {name: alice-level}\n  matchingPrecedence: 50\n\
         \x20 distinguisherMethod: {type: ByUser}\n  rules:\n\
         \x20 - subjects: [{kind: User, user: {name: alice}}]\n\
         \x20   resourceRules: [{verbs: [\"*\"], apiGroups: [\"*\"], resources: [\"*\"], namespaces: [\"*\"], clusterScope: true}]\n",
    )
    .ok();
    assert!(
        wait_for(30, || {
            let k = pf_uids(&cp, &kube, "alice", path);
            k != through_kube && pf_uids(&cp, &gw.url, "alice", path) == k
        }),
        "after the new FlowSchema: kube-apiserver {:?}, apigw {:?}",
        pf_uids(&cp, &kube, "alice", path),
        pf_uids(&cp, &gw.url, "alice", path)
    );
    // A new level takes its share from the others in both.
    assert!(
        wait_for(30, || {
            let k = seat_limits(&cp, &kube);
            k.keys().any(|s| s.contains("alice-level")) && seat_limits(&cp, &gw.url) == k
        }),
        "seats after the new level: kube-apiserver {:?}, apigw {:?}",
        seat_limits(&cp, &kube),
        seat_limits(&cp, &gw.url)
    );
}
