//! The differential suite (issue 47): one table of request shapes
//! (`tests/differential/table.yaml`) sent through kube-apiserver's kube-aggregator and through
//! apigw, in front of the same upstream sample-apiserver and kube-apiserver, and compared answer
//! by answer by the `differ` runner (`tests/upstream/cmd/differ`); metrics-server
//! (`metrics.k8s.io`) is registered behind both too, with `kubectl top` compared. apigw runs as
//! `scripts/kube-up` runs it: manifest mode, kube-apiserver as its delegate, anonymous requests
//! on as kube-apiserver has them, and authorization asked of kube-apiserver
//! (`apigw-authorization.yaml`, which the launcher writes). Every row must answer the same through
//! both doors, or be listed as deliberate with its reason.

use crate::support::tool::{kubectl, run};
use crate::support::upstream::{binaries, Apigw, ControlPlane};
use std::path::Path;

const SERVED: [&str; 3] = [
    "v1alpha1.wardle.example.com",
    "v1beta1.wardle.example.com",
    "v1beta1.metrics.k8s.io",
];

#[test]
fn every_request_shape_answers_as_through_kube_aggregator() {
    let cp = ControlPlane::start(&["-metrics-server"]);
    let mut args = cp.manifest_mode();
    args.extend(cp.kube_authorization());
    let gw = Apigw::start(&cp, &args);
    gw.await_available(&cp, &SERVED);
    // kube-aggregator's side: the same APIServices Available in kube-apiserver.
    let mut wait = vec!["wait", "--for=condition=Available", "--timeout=90s"];
    let names: Vec<String> = SERVED.iter().map(|n| format!("apiservice/{n}")).collect();
    wait.extend(names.iter().map(String::as_str));
    cp.kubectl(&wait).ok();

    // kubectl top with no nodes and no pods: the same words and exit through both doors.
    let through_gw = gw.kubeconfig(&cp, "admin");
    let through_kube = cp.path("admin.kubeconfig");
    for args in [["top", "nodes"], ["top", "pods"]] {
        let (kube, ours) = (kubectl(&through_kube, &args), kubectl(&through_gw, &args));
        assert_eq!(
            (kube.succeeded(), kube.text()),
            (ours.succeeded(), ours.text()),
            "kubectl {args:?} through kube-aggregator, then through apigw"
        );
    }
    early_answers_of_sample_apiserver_reach_curl_and_python(&cp, &gw);

    let table = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential/table.yaml");
    let (table, pki) = (table.display().to_string(), cp.arg(""));
    let ran = run(
        &binaries().join("differ"),
        &[
            "-table",
            &table,
            "-pki",
            &pki,
            "-a",
            &cp.state.apiserver,
            "-b",
            &gw.url,
        ],
        None,
    );
    println!("{}", ran.stdout());
    assert!(
        ran.succeeded(),
        "the doors answered differently (above); stderr: {}\napigw's log:\n{}",
        ran.stderr(),
        gw.logged()
    );
}

/// Issue 47, item 1, against sample-apiserver itself: a 40 MB create gets its
/// `413 RequestEntityTooLarge` (answered before the body is read) through apigw with curl over
/// both protocols, uploading as it reads, and with Python's `http.client`, which writes all of
/// a 16 MB body before it reads.
fn early_answers_of_sample_apiserver_reach_curl_and_python(cp: &ControlPlane, gw: &Apigw) {
    let url = format!(
        "{}/apis/wardle.example.com/v1alpha1/namespaces/default/flunders",
        gw.url
    );
    let file = cp.path("upload-40m.json");
    std::fs::write(&file, vec![b' '; 40 << 20]).expect("write the upload");
    let data = format!("@{}", file.display());
    for proto in ["--http1.1", "--http2"] {
        let ran = crate::support::upstream::curl(
            cp,
            "admin",
            &[
                proto,
                "-X",
                "POST",
                "-H",
                "Content-Type: application/json",
                "-H",
                "Expect:",
                "--data-binary",
                &data,
                &url,
            ],
        );
        let text = ran.text();
        assert!(
            text.contains(r#""reason": "RequestEntityTooLarge""#)
                && text.contains(r#""code": 413"#),
            "{proto}: sample-apiserver's 413 did not reach curl: {text}"
        );
    }
    let script = r#"
import http.client, json, ssl, sys
url, ca, crt, key = sys.argv[1:5]
host, rest = url[len("https://"):].split("/", 1)
ctx = ssl.create_default_context(cafile=ca)
ctx.load_cert_chain(crt, key)
conn = http.client.HTTPSConnection(host, context=ctx, timeout=30)
conn.request("POST", "/" + rest, body=b" " * (16 << 20), headers={"Content-Type": "application/json"})
res = conn.getresponse()
print(res.status, json.loads(res.read())["reason"])
"#;
    let ran = run(
        Path::new("python3"),
        &[
            "-c",
            script,
            &url,
            &cp.arg("ca.crt"),
            &cp.arg("admin.crt"),
            &cp.arg("admin.key"),
        ],
        None,
    );
    assert_eq!(
        ran.stdout().trim(),
        "413 RequestEntityTooLarge",
        "Python's http.client: {}",
        ran.text()
    );
}
