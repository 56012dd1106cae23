//! `kube-aggregator` and `kube-aggregator-allow`: apigw side by side with what users run when
//! they do not run apigw, the kube-aggregator inside kube-apiserver. The control plane is
//! upstream's, built by `scripts/upstream` from its published modules (etcd, kube-apiserver,
//! and sample-apiserver registered as its `wardle.example.com` APIServices); apigw runs in
//! manifest mode in front of the same sample-apiserver with the launcher's APIServices.
//!
//! Both front doors take the same client certificate (`alice`, group `wardle-users`), proxy
//! to the same sample-apiserver with their front-proxy client certificates, and run API
//! Priority and Fairness with upstream's default configuration (alice's requests are
//! `global-default`'s, not exempt). `kube-aggregator` authorizes by RBAC on both (the same
//! ClusterRole and binding, in kube-apiserver and in apigw's policy file);
//! `kube-aggregator-allow` by `AlwaysAllow` on both. The request is a list of one flunder
//! over HTTP/1.1 and HTTP/2, at the configured concurrency and at 1, through `direct`
//! (sample-apiserver with the front-proxy certificate), `apigw`, `apigw-log` (access log on),
//! `apigw-no-apf` (`--enable-priority-and-fairness=false`: what APF costs) and
//! `kube-aggregator`, whose CPU is kube-apiserver's process.

use super::env::{client_configs, free_port, wait_ready, Env, Proc};
use super::load::{Proto, Target};
use super::scenarios::{self, small_get_variants};
use super::stats::children;
use super::{Row, Settings};
use anyhow::Context as _;
use http::{HeaderName, HeaderValue, Method};
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The scenarios: RBAC on both front doors, and AlwaysAllow on both.
pub const RBAC: &str = "kube-aggregator";
pub const ALLOW: &str = "kube-aggregator-allow";

/// The namespace of the flunder listed.
const NAMESPACE: &str = "default";

fn flunders() -> String {
    format!("/apis/wardle.example.com/v1alpha1/namespaces/{NAMESPACE}/flunders")
}

/// The RBAC objects that let `wardle-users` read flunders, in kube-apiserver and in apigw.
fn policy() -> [serde_json::Value; 2] {
    [
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "flunder-reader"},
            "rules": [{
                "apiGroups": ["wardle.example.com"],
                "resources": ["flunders"],
                "verbs": ["get", "list", "watch"],
            }],
        }),
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "flunder-readers"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "flunder-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "wardle-users"}],
        }),
    ]
}

/// kube-apiserver's `--authorization-config` for `AlwaysAllow`.
const ALWAYS_ALLOW: &str = "apiVersion: apiserver.config.k8s.io/v1\n\
kind: AuthorizationConfiguration\n\
authorizers:\n\
- type: AlwaysAllow\n  name: alwaysallow\n";

/// What the scenario needs from the command line.
pub struct Options {
    /// `--upstream DIR`: where scripts/upstream put its builds.
    pub upstream: Option<PathBuf>,
    /// Measure `apigw-log` too (not `--no-log-target`).
    pub log_target: bool,
}

/// The fields of the launcher's `state.json` this scenario reads.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct State {
    apiserver: String,
    sample: String,
    sample_host: String,
    sample_port: u16,
}

/// The directory of upstream's builds: `--upstream`, else what `scripts/upstream` of the
/// checkout around the working directory prints (building them when needed, once).
fn upstream(opts: &Options) -> anyhow::Result<PathBuf> {
    if let Some(dir) = &opts.upstream {
        return Ok(dir.clone());
    }
    let cwd = std::env::current_dir().context("the working directory")?;
    let script = cwd
        .ancestors()
        .map(|d| d.join("scripts/upstream"))
        .find(|p| p.is_file())
        .context("kube-aggregator needs upstream's builds: run from an apigw checkout (scripts/upstream builds them) or pass --upstream DIR")?;
    eprintln!(
        "apigw-bench: {} (builds kube-apiserver once, then cached)",
        script.display()
    );
    let out = Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed ({})",
        script.display(),
        out.status
    );
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    anyhow::ensure!(!dir.is_empty(), "{} printed no directory", script.display());
    Ok(PathBuf::from(dir))
}

/// Runs `scenario` ([`RBAC`] or [`ALLOW`]): its rows, and notes on what was left out.
pub async fn run(
    s: &Settings,
    env: &Env,
    opts: &Options,
    scenario: &str,
) -> anyhow::Result<(Vec<Row>, Vec<String>)> {
    let allow = scenario == ALLOW;
    let bin = upstream(opts)?;
    let dir = env.dir.path().join(scenario);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = |name: &str| dir.join(name);
    let mut cmd = Command::new(bin.join("controlplane"));
    cmd.arg("-dir").arg(&dir).arg("-bin").arg(&bin);
    if allow {
        write(&file("always-allow.yaml"), ALWAYS_ALLOW.as_bytes())?;
        cmd.arg("-authorization-config")
            .arg(file("always-allow.yaml"));
    }
    let mut cp = Proc::spawn(&format!("{scenario}-controlplane"), cmd, env.dir.path())?;
    let state = await_state(&file("state.json"), &mut cp).await?;
    let kube_addr = addr_of(&state.apiserver)?;
    let apiserver_pid = process_named(cp.pid(), "kube-apiserver")
        .context("kube-apiserver's process under the launcher")?;

    // The client, as the cluster CA knows it: alice, of group wardle-users.
    let (h1, h2) = client_configs(&file("ca.crt"), &file("alice.crt"), &file("alice.key"))?;
    let front = |name: &str, addr: SocketAddr, pids: Vec<u32>| Target {
        name: name.into(),
        addr,
        server_name: ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
        h1: h1.clone(),
        h2: h2.clone(),
        headers: Vec::new(),
        pids,
    };
    let kube = front("kube-aggregator", kube_addr, vec![apiserver_pid]);
    let admin = {
        let (h1, h2) = client_configs(&file("ca.crt"), &file("admin.crt"), &file("admin.key"))?;
        Target {
            name: "kube-apiserver (admin)".into(),
            h1,
            h2,
            ..kube.clone()
        }
    };
    if !allow {
        for object in policy() {
            let kind = object["kind"].as_str().unwrap_or_default().to_lowercase();
            let path = format!("/apis/rbac.authorization.k8s.io/v1/{kind}s");
            post(&admin, &path, &object).await?;
        }
    }
    let flunder = serde_json::json!({
        "apiVersion": "wardle.example.com/v1alpha1",
        "kind": "Flunder",
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "spec": {},
    });
    // Through kube-aggregator, once its APIService is available.
    await_ok(&admin, &flunders(), &mut cp).await?;
    post(&admin, &flunders(), &flunder).await?;

    // apigw, as tests/it/support/upstream.rs's manifest mode runs it.
    let mut gateway_args: Vec<String> = Vec::new();
    for (flag, name) in [
        ("--tls-cert-file", "gateway.crt"),
        ("--tls-private-key-file", "gateway.key"),
        ("--client-ca-file", "ca.crt"),
        ("--proxy-client-cert-file", "apigw-proxy-client.crt"),
        ("--proxy-client-key-file", "apigw-proxy-client.key"),
        ("--apiservice-dir", "apiservices"),
    ] {
        gateway_args.push(flag.into());
        gateway_args.push(file(name).display().to_string());
    }
    let port = state.sample_port;
    gateway_args.push("--resolve".into());
    gateway_args.push(format!("{}:{port}=127.0.0.1:{port}", state.sample_host));
    if allow {
        gateway_args.push("--authorization-mode=AlwaysAllow".into());
    } else {
        let text: Vec<String> = policy().iter().map(|o| o.to_string()).collect();
        write(&file("apigw-rbac.yaml"), text.join("\n---\n").as_bytes())?;
        gateway_args.push("--authorization-mode=RBAC".into());
        gateway_args.push("--rbac-policy-file".into());
        gateway_args.push(file("apigw-rbac.yaml").display().to_string());
    }
    let mut gateways = vec![("apigw", env.gateway_log.as_str(), Vec::new())];
    let mut skipped = Vec::new();
    if opts.log_target {
        gateways.push(("apigw-log", "info", Vec::new()));
    } else {
        skipped.push(format!("{scenario}: apigw-log left out (--no-log-target)"));
    }
    gateways.push((
        "apigw-no-apf",
        env.gateway_log.as_str(),
        vec!["--enable-priority-and-fairness=false".to_string()],
    ));
    let mut procs = Vec::new();
    let sample_pid = process_named(cp.pid(), "sample-apiserver");
    let mut targets = vec![direct(&state, &file, sample_pid)?];
    for (name, log, extra) in gateways {
        let port = free_port()?;
        let mut cmd = Command::new(&env.exe);
        cmd.arg("serve")
            .args(["--bind-address", "127.0.0.1", "--secure-port"])
            .arg(port.to_string())
            .args(&gateway_args)
            .args(&extra)
            .args(&env.gateway_args)
            .env("RUST_LOG", log);
        let mut proc = Proc::spawn(&format!("{scenario}-{name}"), cmd, env.dir.path())?;
        let target = front(
            name,
            SocketAddr::from(([127, 0, 0, 1], port)),
            vec![proc.pid()],
        );
        wait_ready(&target, &flunders(), &mut proc)
            .await
            .with_context(|| format!("{name} in front of the control plane"))?;
        procs.push(proc);
        targets.push(target);
    }
    targets.push(kube);

    let mut rows = Vec::new();
    for (suffix, proto, c) in small_get_variants(s) {
        let name = format!("{scenario}{suffix}");
        let before: Vec<u64> = targets.iter().map(Target::rss_kib).collect();
        let mut new = scenarios::get_rows(s, &targets, &name, &flunders(), proto, c).await;
        for (row, kib) in new.iter_mut().zip(before) {
            row.rss_before_kib = kib;
        }
        rows.extend(new);
    }
    if let Some(status) = cp.exited() {
        anyhow::bail!("the control plane exited during {scenario} ({status})");
    }
    for p in &mut procs {
        if let Some(status) = p.exited() {
            anyhow::bail!("{} exited during {scenario} ({status})", p.name);
        }
    }
    Ok((rows, skipped))
}

/// Straight to sample-apiserver, as a front proxy reaches it: the front-proxy client
/// certificate, the serving name verified against its CA, alice's identity in headers.
fn direct(
    state: &State,
    file: &dyn Fn(&str) -> PathBuf,
    pid: Option<u32>,
) -> anyhow::Result<Target> {
    let (h1, h2) = client_configs(
        &file("wardle-ca.crt"),
        &file("front-proxy-client.crt"),
        &file("front-proxy-client.key"),
    )?;
    let header = |name: &'static str, value: &'static str| {
        (
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        )
    };
    let sample = addr_of(&state.sample)?;
    Ok(Target {
        name: "direct".into(),
        addr: sample,
        server_name: ServerName::try_from(state.sample_host.clone())
            .context("sample-apiserver's service name")?,
        h1,
        h2,
        headers: vec![
            header("x-remote-user", "alice"),
            header("x-remote-group", "wardle-users"),
            header("x-remote-group", "system:authenticated"),
        ],
        pids: pid.into_iter().collect(),
    })
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

fn addr_of(url: &str) -> anyhow::Result<SocketAddr> {
    let authority = url
        .strip_prefix("https://")
        .with_context(|| format!("{url}: not an https URL"))?;
    authority
        .trim_end_matches('/')
        .parse()
        .with_context(|| format!("{url}: not an address"))
}

/// The launcher's child process named `name` (the kernel keeps 15 bytes of a name).
fn process_named(parent: u32, name: &str) -> Option<u32> {
    let comm = &name[..name.len().min(15)];
    children(parent).into_iter().find(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
    })
}

/// Waits for the launcher's `state.json` (every server ready), at most 3 minutes.
async fn await_state(path: &Path, cp: &mut Proc) -> anyhow::Result<State> {
    let deadline = Instant::now() + Duration::from_secs(180);
    while Instant::now() < deadline {
        if let Some(status) = cp.exited() {
            anyhow::bail!("the control plane exited ({status}); see {}.log", cp.name);
        }
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(state) = serde_json::from_str(&text) {
                return Ok(state);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!(
        "the control plane was not ready within 3 minutes; see {}.log",
        cp.name
    )
}

/// Waits until `GET path` through `target` answers 200 (an APIService becomes available
/// some seconds after registration), at most 90 s.
async fn await_ok(target: &Target, path: &str, cp: &mut Proc) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Some(status) = cp.exited() {
            anyhow::bail!("the control plane exited ({status})");
        }
        match scenarios::fetch(target, &job(Method::GET, path, Vec::new())).await {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("{e:#}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    anyhow::bail!(
        "GET {path} through {} never answered 200: {last}",
        target.name
    )
}

fn job(method: Method, path: &str, body: Vec<u8>) -> super::load::Job {
    super::load::Job {
        method,
        path: path.into(),
        accept: None,
        body: body.into(),
        proto: Proto::H1,
        concurrency: 1,
        warmup: Duration::ZERO,
        window: Duration::ZERO,
    }
}

async fn post(target: &Target, path: &str, object: &serde_json::Value) -> anyhow::Result<()> {
    let body = serde_json::to_vec(object).context("encoding an object")?;
    scenarios::fetch(target, &job(Method::POST, path, body))
        .await
        .with_context(|| format!("POST {path} to {}", target.name))?;
    Ok(())
}
