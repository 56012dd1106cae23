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
