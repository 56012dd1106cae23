//! `apigw doctor` and `apigw certs inspect` end to end: every failure kind produced for real on
//! loopback (wrong CA, wrong name, expired, proxy cert refused by TLS alert or 401, nothing
//! listening, no resolution, bad manifest, the gateway's own files) and named by doctor; the
//! binary's exit codes and JSON; and the curl/openssl commands doctor and docs/troubleshooting.md print,
//! executed. curl and openssl are required: a missing one fails the test.

use crate::support;

use crate::support::World;
use apigw::doctor::{Options, Report, Status, Step};
use apigw_gateway::config::Config;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use time::{Duration, OffsetDateTime};

const GROUP: &str = "a.example.com";
const NAME: &str = "v1.a.example.com";
const HOST: &str = "a-svc.a-ns.svc";

/// Registers `v1.a.example.com` -> `a-svc.a-ns.svc:443` with `ca` as its caBundle.
fn register(w: &World, ca: &support::Ca) {
    w.register("a.json", GROUP, "v1", 100, 10, "a-svc", "a-ns", ca);
}

async fn diagnose(w: &World, cfg: &Config) -> Report {
    let opts = Options {
        names: Vec::new(),
        ca_dir: w.pki.path("doctor-ca"),
        trust_file: None,
    };
    apigw::doctor::diagnose(cfg, &opts).await
}

/// The step `check` of APIService `svc` (or of the gateway when `svc` is None).
fn step<'a>(r: &'a Report, svc: Option<&str>, check: &str) -> &'a Step {
    let steps = match svc {
        Some(name) => {
            &r.service(name)
                .unwrap_or_else(|| panic!("no {name}:\n{}", r.to_text()))
                .steps
        }
        None => &r.gateway,
    };
    steps
        .iter()
        .find(|s| s.check == check)
        .unwrap_or_else(|| panic!("no step {check}:\n{}", r.to_text()))
}

fn assert_failed<'a>(r: &'a Report, svc: Option<&str>, check: &str, reason: &str) -> &'a Step {
    let s = step(r, svc, check);
    assert_eq!(
        (s.status, s.reason),
        (Status::Failed, Some(reason)),
        "{}",
        r.to_text()
    );
    assert!(r.failed());
    s
}

fn fix(s: &Step) -> &str {
    s.fix.as_deref().unwrap_or_default()
}

/// A backend for `a-svc.a-ns.svc` with `ca`'s cert for `san`, registered with `bundle_ca`.
async fn setup(
    w: &World,
    ca: &support::Ca,
    san: Option<&str>,
    bundle_ca: &support::Ca,
) -> (support::Echo, Config) {
    let echo = w.backend("a", "a-svc", "a-ns", ca, san).await;
    register(w, bundle_ca);
    let cfg = w.config(&[(&echo, echo.addr)]);
    (echo, cfg)
}

#[tokio::test(flavor = "multi_thread")]
async fn healthy_apiservice_passes_and_its_commands_run() {
    let w = World::new();
    let (_echo, cfg) = setup(&w, &w.addon_ca, None, &w.addon_ca).await;
    let r = diagnose(&w, &cfg).await;
    assert!(!r.failed(), "{}", r.to_text());
    for check in [
        "manifest",
        "resolve",
        "connect",
        "tls-handshake",
        "serving-cert-trust",
        "serving-cert-name",
        "serving-cert-validity",
        "proxy-client-cert",
        "discovery",
    ] {
        assert_eq!(
            step(&r, Some(NAME), check).status,
            Status::Ok,
            "{}",
            r.to_text()
        );
    }
    assert!(step(&r, Some(NAME), "discovery")
        .message
        .contains("APIResourceList with 1 resources"));
    let svc = r.service(NAME).expect("report");
    let ca_file = svc.ca_bundle_file.clone().expect("caBundle written");
    assert_eq!(
        std::fs::read_to_string(&ca_file).expect("ca file"),
        w.pki.pem("addon-ca.crt")
    );
    let mut ran = 0;
    for recipe in svc
        .commands
        .iter()
        .filter(|r| !r.command.starts_with("kubectl"))
    {
        let out = shell(&recipe.command, w.pki.dir.path(), None).await;
        assert!(
            out.status.success(),
            "{} failed:\n{}",
            recipe.command,
            text(&out)
        );
        if recipe.command.starts_with("curl") {
            assert!(
                text(&out).contains("\"kind\":\"APIResourceList\""),
                "{}",
                text(&out)
            );
        }
        ran += 1;
    }
    assert_eq!(ran, 4, "curl, two openssl s_client, certs inspect");
}

#[tokio::test(flavor = "multi_thread")]
async fn serving_cert_from_another_ca_is_untrusted() {
    let w = World::new();
    let (_echo, cfg) = setup(&w, &w.rogue_ca, None, &w.addon_ca).await;
    let r = diagnose(&w, &cfg).await;
    let s = assert_failed(&r, Some(NAME), "serving-cert-trust", "UnknownAuthority");
    assert!(s.message.contains("CN=rogue-ca"), "{}", s.message);
    assert!(
        fix(s)
            .starts_with("put the CA that signed the serving cert (CN=rogue-ca) in spec.caBundle"),
        "{}",
        fix(s)
    );
    let hs = assert_failed(&r, Some(NAME), "tls-handshake", "CertificateRejected");
    assert_eq!(hs.fix, s.fix, "the handshake names the same fix");
    assert_eq!(step(&r, Some(NAME), "serving-cert-name").status, Status::Ok);
    assert!(
        r.service(NAME).and_then(|s| s.step("discovery")).is_none(),
        "no request after a refused handshake"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn serving_cert_for_another_name_is_a_name_mismatch() {
    let w = World::new();
    let (_echo, cfg) = setup(&w, &w.addon_ca, Some("other.a-ns.svc"), &w.addon_ca).await;
    let r = diagnose(&w, &cfg).await;
    let s = assert_failed(&r, Some(NAME), "serving-cert-name", "NameMismatch");
    assert_eq!(
        fix(s),
        format!("reissue the serving cert with DNS SAN {HOST}")
    );
    assert!(s.message.contains("DNS:other.a-ns.svc"), "{}", s.message);
    assert_eq!(
        step(&r, Some(NAME), "serving-cert-trust").status,
        Status::Ok,
        "{}",
        r.to_text()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_serving_cert_is_expired_not_untrusted() {
    let w = World::new();
    let now = OffsetDateTime::now_utc();
    let (crt, key) = w.pki.leaf_dated(
        "be-old",
        &w.addon_ca,
        HOST,
        &[HOST],
        true,
        now - Duration::days(60),
        now - Duration::days(2),
    );
    let echo = w.backend_from(HOST, &crt, &key, &w.front_proxy_ca).await;
    register(&w, &w.addon_ca);
    let r = diagnose(&w, &w.config(&[(&echo, echo.addr)])).await;
    let s = assert_failed(&r, Some(NAME), "serving-cert-validity", "Expired");
    assert!(s.message.contains("expired 2 days ago"), "{}", s.message);
    assert!(fix(s).starts_with("reissue the serving cert"), "{}", fix(s));
    assert_eq!(
        step(&r, Some(NAME), "serving-cert-trust").status,
        Status::Ok,
        "{}",
        r.to_text()
    );
    assert_eq!(step(&r, Some(NAME), "serving-cert-name").status, Status::Ok);
}

#[tokio::test(flavor = "multi_thread")]
async fn backend_trusting_another_front_proxy_ca_refuses_the_proxy_cert() {
    let w = World::new();
    let (crt, key) = w.pki.leaf("be-a", &w.addon_ca, HOST, &[], &[HOST], true);
    let echo = w.backend_from(HOST, &crt, &key, &w.rogue_ca).await;
    register(&w, &w.addon_ca);
    let r = diagnose(&w, &w.config(&[(&echo, echo.addr)])).await;
    let s = assert_failed(&r, Some(NAME), "proxy-client-cert", "ProxyCertRejected");
    assert!(s.message.contains("TLS alert"), "{}", s.message);
    assert!(fix(s).starts_with("add the front-proxy CA"), "{}", fix(s));
    assert!(
        fix(s).contains("--requestheader-client-ca-file"),
        "{}",
        fix(s)
    );
    assert_eq!(
        step(&r, Some(NAME), "serving-cert-trust").status,
        Status::Ok
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn backend_answering_401_refuses_the_proxy_cert() {
    let w = World::new();
    let (_echo, mut cfg) = setup(&w, &w.addon_ca, None, &w.addon_ca).await;
    // Signed by the right CA, but not a CN the backend allows: it answers 401.
    let pair = w.pki.leaf(
        "other-proxy",
        &w.front_proxy_ca,
        "other-client",
        &[],
        &[],
        false,
    );
    cfg.proxy.proxy_client = Some(pair);
    let r = diagnose(&w, &cfg).await;
    let s = assert_failed(&r, Some(NAME), "proxy-client-cert", "Unauthorized");
    assert!(s.message.contains("answered 401"), "{}", s.message);
    assert!(
        fix(s).contains("--requestheader-allowed-names"),
        "{}",
        fix(s)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_listening_is_connection_refused() {
    let w = World::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    register(&w, &w.addon_ca);
    let mut cfg = w.config(&[]);
    cfg.proxy
        .resolve
        .insert((HOST.to_string(), 443), vec![addr]);
    let r = diagnose(&w, &cfg).await;
    let s = assert_failed(&r, Some(NAME), "connect", "ConnectionRefused");
    assert!(s.message.contains(&addr.to_string()), "{}", s.message);
    assert!(
        fix(s).starts_with(&format!("start the addon server on {addr}")),
        "{}",
        fix(s)
    );
    assert_eq!(step(&r, Some(NAME), "resolve").status, Status::Ok);
}

#[tokio::test(flavor = "multi_thread")]
async fn unresolvable_service_is_service_not_found() {
    let w = World::new();
    w.register(
        "n.json",
        GROUP,
        "v1",
        100,
        10,
        "nosuch-svc",
        "nowhere-ns",
        &w.addon_ca,
    );
    let mut cfg = w.config(&[]);
    cfg.availability.timeout = std::time::Duration::from_secs(3);
    let r = diagnose(&w, &cfg).await;
    let s = assert_failed(&r, Some(NAME), "resolve", "ServiceNotFound");
    assert!(
        fix(s).starts_with("add --resolve nosuch-svc.nowhere-ns.svc:443=ADDR:PORT"),
        "{}",
        fix(s)
    );
    assert!(r.service(NAME).and_then(|s| s.step("connect")).is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_manifest_names_file_and_field_and_others_still_run() {
    let w = World::new();
    let (_echo, cfg) = setup(&w, &w.addon_ca, None, &w.addon_ca).await;
    let bad = serde_json::json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1.b.example.com"},
        "spec": {"group": "b.example.com", "version": "v1", "groupPriorityMinimum": 0, "versionPriority": 1}
    });
    std::fs::write(w.pki.path("apiservices/b.json"), bad.to_string()).expect("write");
    let r = diagnose(&w, &cfg).await;
    let s = assert_failed(&r, Some("v1.b.example.com"), "manifest", "InvalidManifest");
    assert!(
        s.message.contains("b.json") && s.message.contains("spec.groupPriorityMinimum"),
        "{}",
        s.message
    );
    assert_eq!(
        step(&r, Some(NAME), "discovery").status,
        Status::Ok,
        "{}",
        r.to_text()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn gateway_files_expired_mismatched_or_without_client_auth() {
    let w = World::new();
    let now = OffsetDateTime::now_utc();
    let cases = [
        (
            w.pki.leaf_dated(
                "old",
                &w.front_proxy_ca,
                "front-proxy-client",
                &[],
                false,
                now - Duration::days(9),
                now - Duration::days(1),
            ),
            "Expired",
        ),
        (
            (w.pki.path("proxy-client.crt"), w.pki.path("alice.key")),
            "KeyMismatch",
        ),
        (
            w.pki.leaf(
                "srv",
                &w.front_proxy_ca,
                "front-proxy-client",
                &[],
                &[],
                true,
            ),
            "NoClientAuthEku",
        ),
    ];
    for (pair, reason) in cases {
        let mut cfg = w.config(&[]);
        cfg.proxy.proxy_client = Some(pair);
        let r = diagnose(&w, &cfg).await;
        assert_failed(&r, None, "proxy-client-cert-file", reason);
    }
    let soon = w.pki.leaf_dated(
        "soon",
        &w.front_proxy_ca,
        "front-proxy-client",
        &[],
        false,
        now - Duration::days(1),
        now + Duration::days(10),
    );
    let mut cfg = w.config(&[]);
    cfg.proxy.proxy_client = Some(soon);
    let r = diagnose(&w, &cfg).await;
    let s = step(&r, None, "proxy-client-cert-file");
    assert_eq!(
        (s.status, s.reason),
        (Status::Warning, Some("ExpiresSoon")),
        "{}",
        r.to_text()
    );
    assert!(!r.failed(), "warnings alone do not fail:\n{}", r.to_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binary_exits_by_outcome_and_speaks_json() {
    let w = World::new();
    let good = w.backend("a", "a-svc", "a-ns", &w.addon_ca, None).await;
    let bad = w.backend("b", "b-svc", "b-ns", &w.rogue_ca, None).await;
    register(&w, &w.addon_ca);
    w.register(
        "b.json",
        "b.example.com",
        "v1",
        100,
        10,
        "b-svc",
        "b-ns",
        &w.addon_ca,
    );
    let p = |n: &str| w.pki.path(n).display().to_string();
    let mut args = vec![
        "doctor".to_string(),
        "--output".into(),
        "json".into(),
        "--ca-dir".into(),
        p("ca-out"),
    ];
    for (flag, file) in [
        ("--tls-cert-file", "serving.crt"),
        ("--tls-private-key-file", "serving.key"),
        ("--proxy-client-cert-file", "proxy-client.crt"),
        ("--proxy-client-key-file", "proxy-client.key"),
        ("--apiservice-dir", "apiservices"),
    ] {
        args.extend([flag.to_string(), p(file)]);
    }
    for echo in [&good, &bad] {
        args.extend([
            "--resolve".to_string(),
            format!("{}:443={}", echo.host, echo.addr),
        ]);
    }
    let all = apigw(args.clone()).await;
    assert_eq!(all.status.code(), Some(1), "{}", text(&all));
    let json: serde_json::Value = serde_json::from_slice(&all.stdout).expect("JSON report");
    assert_eq!(json["ok"], false);
    let b = json["apiservices"]
        .as_array()
        .expect("list")
        .iter()
        .find(|s| s["name"] == "v1.b.example.com")
        .expect("b");
    let trust = b["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["check"] == "serving-cert-trust")
        .expect("trust step");
    assert_eq!(
        (trust["status"].as_str(), trust["reason"].as_str()),
        (Some("failed"), Some("UnknownAuthority")),
        "{trust}"
    );
    assert!(
        trust["fix"]
            .as_str()
            .is_some_and(|f| f.contains("spec.caBundle")),
        "{trust}"
    );

    args.push(NAME.into());
    let one = apigw(args).await;
    assert_eq!(one.status.code(), Some(0), "{}", text(&one));
    let json: serde_json::Value = serde_json::from_slice(&one.stdout).expect("JSON report");
    assert_eq!(json["apiservices"].as_array().map(Vec::len), Some(1));
    assert_eq!(json["summary"]["failed"], 0);
    assert!(w.pki.path(&format!("ca-out/{NAME}-ca.crt")).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn certs_inspect_reads_chains_and_base64_bundles() {
    let w = World::new();
    let (leaf, _) = w.pki.leaf("be-x", &w.addon_ca, HOST, &[], &[HOST], true);
    let chain = w.pki.path("chain.pem");
    std::fs::write(
        &chain,
        format!("{}{}", w.pki.pem("be-x.crt"), w.pki.pem("addon-ca.crt")),
    )
    .expect("chain");
    let bundle = w.pki.path("bundle.b64");
    std::fs::write(
        &bundle,
        support::base64_encode(w.pki.pem("be-x.crt").as_bytes()),
    )
    .expect("bundle");
    let out = apigw(vec![
        "certs".into(),
        "inspect".into(),
        chain.display().to_string(),
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let shown = text(&out);
    for want in [
        format!("subject:  CN={HOST}"),
        format!("SANs:     DNS:{HOST}"),
        "issuer:   CN=addon-ca".into(),
        "expires in".into(),
        "CA, self-signed".into(),
        "EKU: serverAuth".into(),
    ] {
        assert!(shown.contains(&want), "{want:?} missing from:\n{shown}");
    }
    let out = apigw(vec![
        "certs".into(),
        "inspect".into(),
        "--output".into(),
        "json".into(),
        bundle.display().to_string(),
        leaf.display().to_string(),
    ])
    .await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json[0]["format"], "base64 caBundle (PEM)");
    let warnings = json[0]["items"][0]["warnings"].to_string();
    assert!(warnings.contains("yet in a CA bundle"), "{warnings}");
    assert_eq!(json[1]["items"][0]["kind"], "certificate");
    assert_eq!(json[1]["items"][0]["key"], "ECDSA P-256");
}

#[tokio::test(flavor = "multi_thread")]
async fn readme_troubleshooting_commands_work_against_the_dev_setup() {
    support::init();
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    apigw_core::certs::write_dev_pki(&apigw_core::certs::DevPkiOptions {
        out: root.join("certs-dev"),
        ..Default::default()
    })
    .expect("dev PKI");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let certs = root.join("certs-dev");
    let cfg = apigw_sample::SampleConfig {
        allowed_names: vec!["front-proxy-client".into()],
        ..apigw_sample::SampleConfig::new(
            certs.join("wardle.crt"),
            certs.join("wardle.key"),
            certs.join("front-proxy-ca.crt"),
        )
    };
    let (_stop, stop) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(apigw_sample::run(listener, cfg, async {
        let _ = stop.await;
    }));
    copy_config(root, &addr);
    let commands = troubleshooting_commands(&addr);
    assert!(
        commands.iter().any(|c| c.starts_with("curl ")),
        "{commands:?}"
    );
    assert!(
        commands
            .iter()
            .any(|c| c.starts_with("apigw certs inspect certs-dev/")),
        "{commands:?}"
    );
    assert!(
        commands.iter().any(|c| c.starts_with("apigw doctor ")),
        "{commands:?}"
    );
    let tmp = root.join("tmp");
    std::fs::create_dir(&tmp).expect("tmp");
    for c in &commands {
        let out = shell(c, root, Some(&tmp)).await;
        assert!(
            out.status.success(),
            "docs/troubleshooting.md command failed: {c}\n{}",
            text(&out)
        );
        if c.starts_with("curl ") {
            assert!(text(&out).contains("APIResourceList"), "{}", text(&out));
        }
    }
}

/// `config/` of this repository, with the sample server's port replaced by `addr`'s.
fn copy_config(root: &Path, addr: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    std::fs::create_dir_all(root.join("config/apiservices")).expect("mkdir");
    let dev = std::fs::read_to_string(src.join("dev.yaml")).expect("dev.yaml");
    std::fs::write(
        root.join("config/dev.yaml"),
        dev.replace("127.0.0.1:9443", addr),
    )
    .expect("write");
    std::fs::copy(
        src.join("apiservices/wardle.yaml"),
        root.join("config/apiservices/wardle.yaml"),
    )
    .expect("copy");
}

/// The runnable commands of docs/troubleshooting.md (the README links it): every line of its
/// `sh` blocks but comments and kubectl, continuations joined, the dev port replaced.
fn troubleshooting_commands(addr: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/troubleshooting.md");
    let section = std::fs::read_to_string(&path).expect("docs/troubleshooting.md");
    let mut commands = Vec::new();
    for block in section.split("```sh\n").skip(1) {
        let body = block.split("```").next().unwrap_or_default();
        let joined = body.replace("\\\n", " ");
        commands.extend(
            joined
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("kubectl"))
                .map(|l| l.replace("127.0.0.1:9443", addr)),
        );
    }
    commands
}

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_apigw"))
        .parent()
        .expect("bin dir")
        .to_path_buf()
}

/// Runs `command` with `sh` in `dir`, off the async runtime; needs curl and openssl.
async fn shell(command: &str, dir: &Path, tmpdir: Option<&Path>) -> Output {
    let (command, dir, tmpdir) = (
        command.to_string(),
        dir.to_path_buf(),
        tmpdir.map(Path::to_path_buf),
    );
    tokio::task::spawn_blocking(move || shell_blocking(&command, &dir, tmpdir.as_deref()))
        .await
        .expect("join")
}

/// Runs `command` with `sh` in `dir`, the apigw binary first on PATH.
fn shell_blocking(command: &str, dir: &Path, tmpdir: Option<&Path>) -> Output {
    for tool in ["curl", "openssl"] {
        if command.contains(tool) {
            let found = Command::new(tool)
                .arg(if tool == "curl" {
                    "--version"
                } else {
                    "version"
                })
                .output();
            assert!(
                found.is_ok_and(|o| o.status.success()),
                "{tool} is required for this test and is not installed"
            );
        }
    }
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("PATH", path);
    if let Some(tmp) = tmpdir {
        cmd.env("TMPDIR", tmp);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("sh -c {command}: {e}"))
}

/// Runs the apigw binary off the async runtime (backends keep serving meanwhile).
async fn apigw(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_apigw"))
            .args(&args)
            .output()
            .expect("run apigw")
    })
    .await
    .expect("join")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `extension-apiserver-authentication` ConfigMap of a cluster whose front proxy is the
/// world's (`front-proxy-ca`), with `edit` applied to its data.
fn trust_configmap(w: &World, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let mut cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
        "data": {
            "client-ca-file": w.pki.pem("ca.crt"),
            "requestheader-client-ca-file": w.pki.pem("front-proxy-ca.crt"),
            "requestheader-allowed-names": "[\"front-proxy-client\"]",
            "requestheader-username-headers": "[\"X-Remote-User\"]",
            "requestheader-uid-headers": "[\"X-Remote-Uid\"]",
            "requestheader-group-headers": "[\"X-Remote-Group\"]",
            "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
        }
    });
    edit(&mut cm["data"]);
    let path = w.pki.path("extension-apiserver-authentication.yaml");
    std::fs::write(&path, apigw_core::yaml::to_string(&cm).expect("yaml")).expect("write");
    path
}

async fn diagnose_trust(w: &World, cfg: &Config, file: PathBuf) -> Report {
    let opts = Options {
        names: Vec::new(),
        ca_dir: w.pki.path("doctor-ca"),
        trust_file: Some(file),
    };
    apigw::doctor::diagnose(cfg, &opts).await
}

/// Trust from the backends' end, from the ConfigMap as kubectl writes it: right as the world
/// is, then a wrong requestheader CA, a disallowed CN and a missing UID header, each named
/// with its fix, and each APIService told whether its backend accepts apigw's identity.
#[tokio::test(flavor = "multi_thread")]
async fn the_doctor_checks_trust_from_the_backends_end() {
    let w = World::new();
    let (_echo, cfg) = setup(&w, &w.addon_ca, None, &w.addon_ca).await;
    let right = trust_configmap(&w, |_| {});
    let r = diagnose_trust(&w, &cfg, right).await;
    for check in ["backend-trust-chain", "backend-trust-name"] {
        assert_eq!(step(&r, None, check).status, Status::Ok, "{}", r.to_text());
    }
    assert!(
        r.gateway
            .iter()
            .filter(|s| s.check == "backend-trust-headers")
            .all(|s| s.status == Status::Ok),
        "{}",
        r.to_text()
    );
    assert_eq!(step(&r, Some(NAME), "proxy-identity").status, Status::Ok);

    // The backends trust another front-proxy CA.
    let rogue = w.pki.pem("rogue-ca.crt");
    let wrong_ca = trust_configmap(&w, |d| d["requestheader-client-ca-file"] = rogue.into());
    let r = diagnose_trust(&w, &cfg, wrong_ca).await;
    let s = assert_failed(&r, None, "backend-trust-chain", "UntrustedProxyClientCert");
    assert!(
        fix(s).contains("--requestheader-client-ca-file"),
        "{}",
        fix(s)
    );
    assert!(s.details.iter().any(|d| d.contains("rogue-ca")), "{s:?}");
    let verdict = assert_failed(&r, Some(NAME), "proxy-identity", "UntrustedProxyClientCert");
    assert!(
        verdict.message.contains("refuses apigw's identity"),
        "{verdict:?}"
    );

    // apigw's CN is not an allowed name.
    let names = trust_configmap(&w, |d| {
        d["requestheader-allowed-names"] = "[\"aggregator\"]".into()
    });
    let r = diagnose_trust(&w, &cfg, names).await;
    let s = assert_failed(&r, None, "backend-trust-name", "DisallowedName");
    assert!(s.message.contains("CN=front-proxy-client"), "{}", s.message);
    assert!(
        fix(s).contains("add front-proxy-client to kube-apiserver's --requestheader-allowed-names"),
        "{}",
        fix(s)
    );

    // The backends read no UID header: a warning, the identity still accepted.
    let no_uid = trust_configmap(&w, |d| {
        d.as_object_mut()
            .map(|m| m.remove("requestheader-uid-headers"));
    });
    let r = diagnose_trust(&w, &cfg, no_uid).await;
    let uid = r
        .gateway
        .iter()
        .find(|s| s.reason == Some("MissingUidHeader"))
        .unwrap_or_else(|| panic!("no MissingUidHeader step:\n{}", r.to_text()));
    assert_eq!(uid.status, Status::Warning);
    assert!(
        fix(uid).contains("--requestheader-uid-headers") && uid.message.contains("X-Remote-Uid"),
        "{uid:?}"
    );
    assert_eq!(step(&r, Some(NAME), "proxy-identity").status, Status::Ok);
}
