//! The sample addon server behind a gateway, as users meet it, and the command-line clients
//! that drive it: a kubeconfig for alice (a client certificate) and kubectl runs that use it.

use super::{Gateway, World};
use serde_json::json;
use std::path::PathBuf;
use std::process::Command;

/// A gateway in front of the sample server (`wardle.example.com/v1alpha1`), with a kubeconfig.
pub struct SampleGateway {
    pub world: World,
    pub gw: Gateway,
    pub kubeconfig: PathBuf,
    _sample_stop: tokio::sync::oneshot::Sender<()>,
}

/// Starts the sample server and a gateway routing to it, waits until a request goes through,
/// and writes a kubeconfig for alice, with `namespace` as the context's namespace if given.
pub async fn start(namespace: Option<&str>) -> SampleGateway {
    let world = World::new();
    let host = "wardle-server.wardle-namespace.svc";
    world
        .pki
        .leaf("wardle", &world.addon_ca, host, &[], &[host], true);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sample_addr = listener.local_addr().unwrap();
    let cfg = apigw_sample::SampleConfig {
        allowed_names: vec!["front-proxy-client".into()],
        ..apigw_sample::SampleConfig::new(
            world.pki.path("wardle.crt"),
            world.pki.path("wardle.key"),
            world.pki.path("front-proxy-ca.crt"),
        )
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(apigw_sample::run(listener, cfg, async {
        let _ = rx.await;
    }));
    world.register(
        "wardle.json",
        "wardle.example.com",
        "v1alpha1",
        1000,
        15,
        "wardle-server",
        "wardle-namespace",
        &world.addon_ca,
    );
    let mut cfg = world.config(&[]);
    cfg.proxy
        .resolve
        .insert((host.to_string(), 443), vec![sample_addr]);
    let gw = world.gateway(cfg).await;
    let alice = world.client(Some("alice"));
    let up = super::eventually(20, || {
        let alice = alice.clone();
        let addr = gw.addr;
        async move {
            alice
                .get(addr, "/apis/wardle.example.com/v1alpha1")
                .await
                .status
                == 200
        }
    })
    .await;
    assert!(up, "the sample server never answered through the gateway");
    let kubeconfig = world.pki.path("kubeconfig");
    let p = |n: &str| world.pki.path(n).display().to_string();
    let mut context = json!({"cluster": "gw", "user": "alice"});
    if let Some(ns) = namespace {
        context["namespace"] = json!(ns);
    }
    let kc = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "gw",
        "clusters": [{"name": "gw", "cluster": {"server": format!("https://127.0.0.1:{}", gw.addr.port()), "certificate-authority": p("ca.crt")}}],
        "users": [{"name": "alice", "user": {"client-certificate": p("alice.crt"), "client-key": p("alice.key")}}],
        "contexts": [{"name": "gw", "context": context}]
    });
    std::fs::write(&kubeconfig, kc.to_string()).unwrap();
    SampleGateway {
        world,
        gw,
        kubeconfig,
        _sample_stop: tx,
    }
}

/// What a tool did: whether it succeeded, its exit code, its stdout and its stderr.
pub struct Ran {
    pub ok: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs a tool off the async runtime; a tool that cannot run fails the test, never skips it.
pub async fn run(tool: &str, args: Vec<String>) -> Ran {
    let tool = tool.to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&tool)
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("{tool} is required for this test and could not run: {e}"))
    })
    .await
    .unwrap();
    Ran {
        ok: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

impl SampleGateway {
    /// Runs kubectl with the kubeconfig and its own cache, whatever it answers.
    pub async fn try_kubectl(&self, args: &[&str]) -> Ran {
        let ran = super::tool::kubectl_async(&self.kubeconfig, args).await;
        Ran {
            ok: ran.succeeded(),
            code: ran.out.status.code(),
            stdout: ran.stdout(),
            stderr: String::from_utf8_lossy(&ran.out.stderr).into_owned(),
        }
    }

    /// Runs kubectl; panics with its output unless it succeeds.
    pub async fn kubectl(&self, args: &[&str]) -> String {
        let ran = self.try_kubectl(args).await;
        assert!(
            ran.ok,
            "kubectl {args:?} failed:\n{}\n{}",
            ran.stdout, ran.stderr
        );
        ran.stdout
    }
}

/// Runs a tool; panics with its output unless it succeeds, else returns its stdout.
pub async fn run_ok(tool: &str, args: Vec<String>) -> String {
    let ran = run(tool, args).await;
    assert!(ran.ok, "{tool} failed: {}\n{}", ran.stdout, ran.stderr);
    ran.stdout
}

/// The columns of the `kubectl api-resources` row for `resource` (empty when it is missing).
pub fn api_resources_row<'a>(out: &'a str, resource: &str) -> Vec<&'a str> {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(resource))
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}
