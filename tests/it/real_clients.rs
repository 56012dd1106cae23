//! The clients users have: kubectl, curl and openssl, against a gateway in front of the
//! sample addon server. These tools are required: a missing one fails the test.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::sample::{run_ok as run, SampleGateway as Dev};

async fn dev() -> Dev {
    support::sample::start(None).await
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_works_through_the_gateway() {
    let d = dev().await;
    let versions = d.kubectl(&["api-versions"]).await;
    assert!(
        versions.lines().any(|l| l == "wardle.example.com/v1alpha1"),
        "{versions}"
    );
    let empty = d
        .kubectl(&["get", "flunders", "-n", "x", "-o", "json"])
        .await;
    let list: serde_json::Value = serde_json::from_str(&empty).unwrap();
    assert_eq!(list["items"].as_array().map(Vec::len), Some(0), "{list}");
    let manifest = d.world.pki.path("flunder.yaml");
    std::fs::write(&manifest, "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  name: my-flunder\nspec:\n  reference: abc\n").unwrap();
    let created = d
        .kubectl(&[
            "create",
            "--validate=false",
            "-n",
            "x",
            "-f",
            &manifest.display().to_string(),
        ])
        .await;
    assert!(created.contains("my-flunder created"), "{created}");
    let yaml = d
        .kubectl(&["get", "fl", "my-flunder", "-n", "x", "-o", "yaml"])
        .await;
    assert!(
        yaml.contains("name: my-flunder")
            && yaml.contains("namespace: x")
            && yaml.contains("reference: abc"),
        "{yaml}"
    );
    let table = d.kubectl(&["get", "flunders", "-n", "x"]).await;
    assert!(
        table.starts_with("NAME") && table.contains("my-flunder"),
        "{table}"
    );
    // This door leaves authorization to the backends (AlwaysAllow first): `--as` is set
    // aside, and kubectl shows the gateway's Warning saying so.
    let as_mallory = d
        .try_kubectl(&["get", "fl", "my-flunder", "-n", "x", "--as", "mallory"])
        .await;
    assert!(as_mallory.ok, "{}", as_mallory.stderr);
    assert!(
        as_mallory
            .stderr
            .contains("Warning: Impersonate-* headers ignored"),
        "{}",
        as_mallory.stderr
    );
    let deleted = d
        .try_kubectl(&["delete", "fl", "my-flunder", "-n", "x"])
        .await;
    assert!(deleted.stdout.contains("deleted"), "{}", deleted.stderr);
    assert!(!deleted.stderr.contains("Warning"), "{}", deleted.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn curl_over_http2_with_a_client_cert() {
    let d = dev().await;
    let p = |n: &str| d.world.pki.path(n).display().to_string();
    let url = format!(
        "https://127.0.0.1:{}/apis/wardle.example.com/v1alpha1",
        d.gw.addr.port()
    );
    let out = run(
        "curl",
        vec![
            "-sS".into(),
            "--fail".into(),
            "--http2".into(),
            "-w".into(),
            "\n%{http_version}".into(),
            "--cacert".into(),
            p("ca.crt"),
            "--cert".into(),
            p("alice.crt"),
            "--key".into(),
            p("alice.key"),
            url.clone(),
        ],
    )
    .await;
    let (body, version) = out.rsplit_once('\n').unwrap();
    assert_eq!(version, "2", "curl did not negotiate h2");
    let list: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(list["kind"], "APIResourceList");
    assert!(
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "flunders"),
        "{list}"
    );
    let anon = run(
        "curl",
        vec!["-sS".into(), "--cacert".into(), p("ca.crt"), url],
    )
    .await;
    let status: serde_json::Value = serde_json::from_str(&anon).unwrap();
    assert_eq!(status["code"], 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn openssl_sees_alpn_and_the_serving_chain() {
    let d = dev().await;
    let connect = format!("127.0.0.1:{}", d.gw.addr.port());
    let ca = d.world.pki.path("ca.crt").display().to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &connect,
                "-CAfile",
                &ca,
                "-alpn",
                "h2,http/1.1",
                "-servername",
                "localhost",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl is required for this test")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ALPN protocol: h2"), "{text}");
    assert!(text.contains("Verify return code: 0 (ok)"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_get_apiservices_shows_the_upstream_columns() {
    let d = dev().await;
    let table = d.kubectl(&["get", "apiservices"]).await;
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "SERVICE", "AVAILABLE", "AGE"], "{table}");
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("v1alpha1.wardle.example.com"))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        row[..3],
        [
            "v1alpha1.wardle.example.com",
            "wardle-namespace/wardle-server",
            "True"
        ],
        "{table}"
    );
    let yaml = d
        .kubectl(&[
            "get",
            "apiservice",
            "v1alpha1.wardle.example.com",
            "-o",
            "yaml",
        ])
        .await;
    assert!(
        yaml.contains("type: Available")
            && yaml.contains("reason: Passed")
            && yaml.contains("status: \"True\""),
        "{yaml}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_api_resources_uses_aggregated_discovery() {
    let d = dev().await;
    let out = d
        .kubectl(&["api-resources", "--api-group=wardle.example.com"])
        .await;
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
    let p = |n: &str| d.world.pki.path(n).display().to_string();
    let url = format!("https://127.0.0.1:{}/apis", d.gw.addr.port());
    let accept = "Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let doc = run(
        "curl",
        vec![
            "-sS".into(),
            "--fail".into(),
            "-H".into(),
            accept.into(),
            "--cacert".into(),
            p("ca.crt"),
            "--cert".into(),
            p("alice.crt"),
            "--key".into(),
            p("alice.key"),
            url,
        ],
    )
    .await;
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(doc["kind"], "APIGroupDiscoveryList");
    assert_eq!(
        doc["items"][0]["metadata"]["name"],
        "apiregistration.k8s.io"
    );
    let wardle = doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "wardle.example.com")
        .unwrap();
    let flunders = &wardle["versions"][0]["resources"][0];
    assert_eq!(flunders["resource"], "flunders");
    assert_eq!(flunders["shortNames"], serde_json::json!(["fl"]));
    assert!(
        flunders["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "watch"),
        "{flunders}"
    );
    assert_eq!(wardle["versions"][0]["freshness"], "Current");
}

/// The README's exec example: `examples/exec.py` runs a command in a flunder through the
/// gateway with the official Python client's WebSocket client, as a user would.
#[tokio::test(flavor = "multi_thread")]
async fn the_readme_exec_example_runs_through_the_gateway() {
    let d = dev().await;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/flunder.yaml");
    d.kubectl(&[
        "create",
        "-n",
        "default",
        "-f",
        &manifest.display().to_string(),
    ])
    .await;
    let exec = |args: &'static [&'static str]| {
        let kubeconfig = d.kubeconfig.clone();
        tokio::task::spawn_blocking(move || {
            Command::new("python3")
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/exec.py"))
                .args(args)
                .env("KUBECONFIG", kubeconfig)
                .output()
                .expect("python3 is required for this test")
        })
    };
    let out = exec(&["my-flunder", "echo", "hello", "world"])
        .await
        .unwrap();
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello world\n");
    let out = exec(&["my-flunder", "env"]).await.unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("USER=alice"),
        "{}",
        text(&out)
    );
    // Without KUBECONFIG, the dev kubeconfig beside the script's directory, never
    // ~/.kube/config: a checkout's layout, with this test's kubeconfig as certs-dev/kubeconfig.
    let checkout = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(checkout.path().join("examples")).expect("mkdir");
    std::fs::create_dir_all(checkout.path().join("certs-dev")).expect("mkdir");
    let script = checkout.path().join("examples/exec.py");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/exec.py"),
        &script,
    )
    .expect("copy");
    let home = checkout.path().join("home");
    std::fs::create_dir_all(home.join(".kube")).expect("mkdir");
    std::fs::write(home.join(".kube/config"), "not: a kubeconfig to use\n").expect("write");
    let bare = |script: PathBuf, home: PathBuf| {
        tokio::task::spawn_blocking(move || {
            Command::new("python3")
                .arg(script)
                .args(["my-flunder", "echo", "dev"])
                .env_remove("KUBECONFIG")
                .env("HOME", home)
                .output()
                .expect("python3 is required for this test")
        })
    };
    let out = bare(script.clone(), home.clone()).await.unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("certs-dev/kubeconfig"),
        "{}",
        text(&out)
    );
    std::fs::copy(&d.kubeconfig, checkout.path().join("certs-dev/kubeconfig")).expect("copy");
    let out = bare(script, home).await.unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "dev\n");

    let out = exec(&["my-flunder", "exit", "3"]).await.unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let out = exec(&["missing", "echo", "x"]).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("\"missing\" not found"),
        "{}",
        text(&out)
    );
}
