//! The differential suite (issue 47): one table of request shapes
//! (`tests/differential/table.yaml`) sent through kube-apiserver's kube-aggregator and through
//! apigw, in front of the same upstream sample-apiserver and kube-apiserver, and compared answer
//! by answer by the `differ` runner (`tests/upstream/cmd/differ`). apigw runs as
//! `scripts/kube-up` runs it: manifest mode, kube-apiserver as its delegate, anonymous requests
//! on as kube-apiserver has them, and authorization asked of kube-apiserver
//! (`apigw-authorization.yaml`, which the launcher writes). Every row must answer the same through
//! both doors, or be listed as deliberate with its reason.

use crate::support::tool::run;
use crate::support::upstream::{binaries, Apigw, ControlPlane};
use std::path::Path;

const WARDLE: [&str; 2] = ["v1alpha1.wardle.example.com", "v1beta1.wardle.example.com"];

#[test]
fn every_request_shape_answers_as_through_kube_aggregator() {
    let cp = ControlPlane::start(&[]);
    let mut args = cp.manifest_mode();
    args.extend(cp.kube_authorization());
    let gw = Apigw::start(&cp, &args);
    gw.await_available(&cp, &WARDLE);
    // kube-aggregator's side: the same APIServices Available in kube-apiserver.
    cp.kubectl(&[
        "wait",
        "--for=condition=Available",
        "--timeout=90s",
        "apiservice/v1alpha1.wardle.example.com",
        "apiservice/v1beta1.wardle.example.com",
    ])
    .ok();
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
