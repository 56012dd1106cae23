//! The sample server's data surface through the gateway, as clients no one here wrote use it:
//! kubectl and the official Python `kubernetes` client (tests/interop/python_sample.py).
//! Server dry runs (`--dry-run=server`, `kubectl diff`, `dry_run="All"`) change nothing;
//! server-side apply creates, owns fields (`managedFields`), conflicts and forces; `/version`
//! is a complete version.Info (the delegate's when there is one); without a delegate `/api`
//! lists `v1` and `/api/v1` is an empty core group. Every tool is required.

use crate::support;

use crate::support::World;
use bytes::Bytes;
use http::Request;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

use crate::support::sample::{run, SampleGateway as Dev};

/// A gateway in front of the sample server, and a kubeconfig for alice (namespace `team`).
async fn dev() -> Dev {
    support::sample::start(Some("team")).await
}

impl Dev {
    async fn get_json(&self, name: &str) -> Value {
        let out = self
            .kubectl(&[
                "get",
                "flunder",
                name,
                "-o",
                "json",
                "--show-managed-fields",
            ])
            .await;
        serde_json::from_str(&out).unwrap()
    }

    fn manifest(&self, file: &str, name: &str, reference: &str, labels: &[(&str, &str)]) -> String {
        let mut text = format!(
            "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  name: {name}\n"
        );
        if !labels.is_empty() {
            text.push_str("  labels:\n");
            for (k, v) in labels {
                text.push_str(&format!("    {k}: {v}\n"));
            }
        }
        text.push_str(&format!("spec:\n  reference: {reference}\n"));
        let path = self.world.pki.path(file);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// Runs one check of tests/interop/python_sample.py; panics with its output unless it passes.
    async fn python(&self, check: &str) -> String {
        let p = |n: &str| self.world.pki.path(n).display().to_string();
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/python_sample.py"
        );
        let ran = run(
            "python3",
            vec![
                script.into(),
                check.into(),
                "--server".into(),
                format!("https://127.0.0.1:{}", self.gw.addr.port()),
                "--ca".into(),
                p("ca.crt"),
                "--cert".into(),
                p("alice.crt"),
                "--key".into(),
                p("alice.key"),
            ],
        )
        .await;
        assert!(
            ran.ok
                && ran
                    .stdout
                    .contains(&format!("python client: {check} checks passed")),
            "the Python client's {check} checks failed (needs `pip install kubernetes`):\n{}\n{}",
            ran.stdout,
            ran.stderr
        );
        ran.stdout
    }
}

fn rv(obj: &Value) -> String {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `kubectl create --dry-run=server`, `kubectl diff` and `kubectl delete --dry-run=server`
/// answer what would happen and change nothing; so do the Python client's `dry_run="All"`
/// writes, and a watch from before them sees no event.
#[tokio::test(flavor = "multi_thread")]
async fn dry_runs_change_nothing() {
    let d = dev().await;
    let dry = d.manifest("dry.yaml", "dry", "abc", &[]);
    let out = d.kubectl(&["create", "--dry-run=server", "-f", &dry]).await;
    assert_eq!(
        out.trim(),
        "flunder.wardle.example.com/dry created (server dry run)"
    );
    let missing = d.try_kubectl(&["get", "flunder", "dry"]).await;
    assert!(
        !missing.ok && missing.stderr.contains("(NotFound)"),
        "a server dry run created the flunder: {}\n{}",
        missing.stdout,
        missing.stderr
    );

    let live = d.manifest("live.yaml", "live", "one", &[]);
    d.kubectl(&["create", "-f", &live]).await;
    let before = d.get_json("live").await;

    // A changed manifest: kubectl diff shows the change (exit 1) and makes none.
    let changed = d.manifest("live2.yaml", "live", "two", &[("tier", "web")]);
    let diff = d.try_kubectl(&["diff", "-f", &changed]).await;
    assert_eq!(
        diff.code,
        Some(1),
        "kubectl diff failed:\n{}\n{}",
        diff.stdout,
        diff.stderr
    );
    assert!(
        diff.stdout.contains("-  reference: one") && diff.stdout.contains("+  reference: two"),
        "{}",
        diff.stdout
    );
    // The same through server-side apply's dry run.
    let diff = d
        .try_kubectl(&["diff", "--server-side", "--force-conflicts", "-f", &changed])
        .await;
    assert_eq!(
        diff.code,
        Some(1),
        "kubectl diff --server-side failed:\n{}\n{}",
        diff.stdout,
        diff.stderr
    );
    assert!(
        diff.stdout.contains("+  reference: two") && diff.stdout.contains("+    tier: web"),
        "{}",
        diff.stdout
    );
    // The same manifest: nothing to show but the last-applied annotation kubectl would add.
    let same = d.try_kubectl(&["diff", "-f", &live]).await;
    assert!(
        !same.stdout.contains("reference"),
        "kubectl diff of the live manifest:\n{}\n{}",
        same.stdout,
        same.stderr
    );
    let after = d.get_json("live").await;
    assert_eq!(
        rv(&after),
        rv(&before),
        "kubectl diff bumped the resourceVersion"
    );
    assert_eq!(after["spec"]["reference"], "one");
    assert!(
        after["metadata"].get("annotations").is_none() && after["metadata"].get("labels").is_none(),
        "kubectl diff changed the metadata: {}",
        after["metadata"]
    );
    assert_eq!(after, before);

    let out = d
        .kubectl(&["delete", "--dry-run=server", "flunder", "live"])
        .await;
    assert_eq!(
        out.trim(),
        "flunder.wardle.example.com \"live\" deleted (server dry run)"
    );
    assert_eq!(d.get_json("live").await, before, "a server dry run deleted");

    d.python("dryrun").await;
}

/// `kubectl apply --server-side`: creates, updates, records managedFields; a second manager
/// changing an owned field gets a 409 naming it, `--force-conflicts` takes it over; fields a
/// manager stops applying go; `kubectl patch` takes a field and the next apply conflicts
/// with it. The Python client applies in the JSON form.
#[tokio::test(flavor = "multi_thread")]
async fn server_side_apply_with_kubectl_and_python() {
    let d = dev().await;
    let first = d.manifest("ssa.yaml", "ssa", "one", &[("app", "demo")]);
    let out = d.kubectl(&["apply", "--server-side", "-f", &first]).await;
    assert_eq!(
        out.trim(),
        "flunder.wardle.example.com/ssa serverside-applied"
    );
    let made = d.get_json("ssa").await;
    assert_eq!(made["spec"]["reference"], "one");
    let entries = made["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["manager"], "kubectl");
    assert_eq!(entries[0]["operation"], "Apply");
    assert_eq!(entries[0]["fieldsType"], "FieldsV1");
    assert_eq!(entries[0]["apiVersion"], "wardle.example.com/v1alpha1");
    assert_eq!(
        entries[0]["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:reference": {}}})
    );
    let yaml = d
        .kubectl(&[
            "get",
            "flunder",
            "ssa",
            "-o",
            "yaml",
            "--show-managed-fields",
        ])
        .await;
    assert!(
        yaml.contains("managedFields:")
            && yaml.contains("manager: kubectl")
            && yaml.contains("operation: Apply")
            && yaml.contains("f:reference: {}"),
        "{yaml}"
    );

    // An update by the same manager, dropping the label it no longer applies.
    let second = d.manifest("ssa2.yaml", "ssa", "two", &[]);
    let out = d.kubectl(&["apply", "--server-side", "-f", &second]).await;
    assert_eq!(
        out.trim(),
        "flunder.wardle.example.com/ssa serverside-applied"
    );
    let updated = d.get_json("ssa").await;
    assert_eq!(updated["spec"]["reference"], "two");
    assert!(updated["metadata"].get("labels").is_none(), "{updated}");
    // Applying the same again writes nothing (as a GitOps tool's periodic sync does).
    d.kubectl(&["apply", "--server-side", "-f", &second]).await;
    assert_eq!(d.get_json("ssa").await, updated, "a repeated apply wrote");

    // Another manager changing the field: a conflict naming it and its manager.
    let theirs = d.manifest("ssa3.yaml", "ssa", "three", &[]);
    let conflict = d
        .try_kubectl(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "-f",
            &theirs,
        ])
        .await;
    assert!(!conflict.ok, "the conflicting apply succeeded");
    assert!(
        conflict
            .stderr
            .contains(r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.reference"#),
        "{}",
        conflict.stderr
    );
    assert_eq!(d.get_json("ssa").await["spec"]["reference"], "two");
    let out = d
        .kubectl(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            &theirs,
        ])
        .await;
    assert!(out.contains("serverside-applied"), "{out}");
    let forced = d.get_json("ssa").await;
    assert_eq!(forced["spec"]["reference"], "three");
    let managers: Vec<(String, String)> = forced["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or_default().to_string(),
                e["operation"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    // kubectl's entry owned only spec.reference, so it is gone.
    assert_eq!(managers, [("other".to_string(), "Apply".to_string())]);

    // kubectl patch (an Update) takes the field; kubectl's next apply conflicts with it.
    d.kubectl(&[
        "patch",
        "flunder",
        "ssa",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"reference":"patched"}}"#,
    ])
    .await;
    let patched = d.get_json("ssa").await;
    let patch_entry = patched["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["manager"] == "kubectl-patch")
        .cloned()
        .unwrap_or_default();
    assert_eq!(patch_entry["operation"], "Update", "{patched}");
    assert_eq!(
        patch_entry["fieldsV1"],
        json!({"f:spec": {"f:reference": {}}})
    );
    let conflict = d
        .try_kubectl(&["apply", "--server-side", "-f", &second])
        .await;
    assert!(
        !conflict.ok
            && conflict.stderr.contains(
                r#"conflict with "kubectl-patch" using wardle.example.com/v1alpha1: .spec.reference"#
            ),
        "{}",
        conflict.stderr
    );

    // A server-side dry run of an apply changes nothing.
    let before = d.get_json("ssa").await;
    d.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "-f",
        &second,
    ])
    .await;
    assert_eq!(d.get_json("ssa").await, before);

    // Without a fieldManager an apply is refused as kube-apiserver refuses it.
    let alice = d.world.client(Some("alice"));
    let req = Request::patch("/apis/wardle.example.com/v1alpha1/namespaces/team/flunders/ssa")
        .header("content-type", "application/apply-patch+yaml")
        .body(Bytes::from(
            "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  name: ssa\n",
        ))
        .unwrap();
    let refused = alice.send(d.gw.addr, req).await.assert_status(422);
    assert_eq!(refused["reason"], "Invalid");
    assert_eq!(
        refused["message"],
        r#"PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch"#
    );

    d.python("apply").await;
}

/// `/version` is a complete version.Info: the Python client's `VersionApi().get_code()` reads
/// it and `kubectl version` shows it without a skew warning.
#[tokio::test(flavor = "multi_thread")]
async fn version_is_complete_for_python_and_kubectl() {
    let d = dev().await;
    let out = d.python("version").await;
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("VERSION "))
        .unwrap_or_default();
    let info: Value = serde_json::from_str(line).unwrap();
    assert_eq!(info["major"], "1");
    assert!(
        info["gitVersion"]
            .as_str()
            .unwrap_or_default()
            .starts_with("v1.33.0+apigw."),
        "{info}"
    );
    let ran = d.try_kubectl(&["version", "-o", "json"]).await;
    assert!(ran.ok, "{}\n{}", ran.stdout, ran.stderr);
    let doc: Value = serde_json::from_str(&ran.stdout).unwrap();
    let server = &doc["serverVersion"];
    for field in [
        "major",
        "minor",
        "gitVersion",
        "gitCommit",
        "gitTreeState",
        "buildDate",
        "goVersion",
        "compiler",
        "platform",
    ] {
        assert!(
            server[field].is_string(),
            "serverVersion lacks {field}: {doc}"
        );
    }
    assert_eq!(server["compiler"], "rustc");
    assert!(
        !ran.stderr.contains("version difference"),
        "kubectl warned of skew: {}",
        ran.stderr
    );
    // In a git checkout the commit is the checkout's.
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if let Some(head) = head {
        assert_eq!(server["gitCommit"], head.as_str());
        assert!(
            matches!(server["gitTreeState"].as_str(), Some("clean" | "dirty")),
            "{server}"
        );
    }
}

/// With a delegate, `/version` is the delegate's answer (the cluster's version), also without
/// credentials; when the delegate stops answering, the gateway's own.
#[tokio::test(flavor = "multi_thread")]
async fn version_is_the_delegates_while_it_answers() {
    let w = World::new();
    let main = w
        .backend("main", "kubernetes", "default", &w.addon_ca, None)
        .await;
    let cluster = json!({"major": "1", "minor": "31", "gitVersion": "v1.31.4",
        "gitCommit": "a78aa47129b8539636eb86a9d00e31b2720fe06b", "gitTreeState": "clean",
        "buildDate": "2024-12-10T11:37:42Z", "goVersion": "go1.22.9", "compiler": "gc",
        "platform": "linux/amd64"});
    main.discovery
        .lock()
        .unwrap()
        .documents
        .insert("/version".into(), cluster.clone());
    let mut cfg = w.config(&[(&main, main.addr)]);
    cfg.proxy.delegate = Some(apigw_gateway::config::Delegate {
        host: main.host.clone(),
        port: 443,
        ca_file: Some(w.pki.path("addon-ca.crt")),
        impersonation_token_file: None,
    });
    cfg.availability.interval = Duration::from_millis(300);
    let gw = w.gateway(cfg).await;
    let anonymous = w.client(None);
    let delegated = support::eventually(10, || async {
        anonymous.get(gw.addr, "/version").await.json() == cluster
    })
    .await;
    assert!(
        delegated,
        "/version never became the delegate's: {}",
        anonymous.get(gw.addr, "/version").await.json()
    );
    let _stopped = main.stop();
    let own = support::eventually(10, || async {
        anonymous.get(gw.addr, "/version").await.json()["compiler"] == "rustc"
    })
    .await;
    assert!(own, "/version did not fall back to the gateway's own");
}

/// Without a delegate, `/api` lists `v1` and `/api/v1` is an empty core group, so the Python
/// DynamicClient (which assumes the core group) finds flunders by kind and short name, and
/// `kubectl api-resources` lists them.
#[tokio::test(flavor = "multi_thread")]
async fn clients_that_assume_the_core_group_find_flunders() {
    let d = dev().await;
    let alice = d.world.client(Some("alice"));
    let api = alice.get(d.gw.addr, "/api").await;
    assert_eq!(api.status, 200);
    let api = api.json();
    assert_eq!(api["kind"], "APIVersions");
    assert_eq!(api["versions"], json!(["v1"]));
    // The address this client reached the gateway at (its Host), port included.
    assert_eq!(
        api["serverAddressByClientCIDRs"],
        json!([{"clientCIDR": "0.0.0.0/0", "serverAddress": format!("localhost:{}", d.gw.addr.port())}])
    );
    let core = alice.get(d.gw.addr, "/api/v1").await;
    assert_eq!(core.status, 200);
    let core = core.json();
    assert_eq!(
        core,
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": []})
    );
    // Deeper core paths are still not served here.
    alice
        .get(d.gw.addr, "/api/v1/namespaces/team")
        .await
        .assert_status(404);

    d.python("dynamic").await;

    let out = d.kubectl(&["api-resources", "--no-headers"]).await;
    let row = support::sample::api_resources_row(&out, "flunders");
    assert_eq!(
        row,
        [
            "flunders",
            "fl",
            "wardle.example.com/v1alpha1",
            "true",
            "Flunder"
        ],
        "{out}"
    );
    let versions = d.kubectl(&["api-versions"]).await;
    assert!(versions.lines().any(|l| l == "v1"), "{versions}");
}
