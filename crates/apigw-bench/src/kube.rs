//! `kube-aggregator` and `kube-aggregator-allow`: apigw side by side with what users run when
//! they do not run apigw, the kube-aggregator inside kube-apiserver. The control plane is
//! upstream's, built by `scripts/upstream` from its published modules: etcd, kube-apiserver,
//! and sample-apiserver registered as its `wardle.example.com` APIServices. apigw runs in
//! manifest mode in front of the same backends, with kube-apiserver as its delegate, as
//! `tests/it/support/upstream.rs` runs it.
//!
//! Both front doors take the same client certificate (`alice`, group `wardle-users`), proxy
//! with their front-proxy client certificates, and run API Priority and Fairness with
//! upstream's defaults (alice's requests are `global-default`'s, not exempt).
//! `kube-aggregator` authorizes by RBAC on both (the same ClusterRole and binding, in
//! kube-apiserver and in apigw's policy file); `kube-aggregator-allow` by `AlwaysAllow` on both.
//!
//! Two backends, one after the other:
//! - `<scenario>-sample`: upstream's sample-apiserver, a list of one flunder;
//! - `<scenario>-small-get`: the bench's own backend (`apigw sample-apiserver` with the
//!   control plane's certificates), 1 KiB, so the rows measure the front doors rather than
//!   the backend. Both APIServices are pointed at it.
//!
//! Each over HTTP/1.1 and HTTP/2, at the configured concurrency and at 1, through `direct`
//! (the backend with the front-proxy certificate), `apigw`, `apigw-log` (access log on),
//! `apigw-no-apf` (`--enable-priority-and-fairness=false`: what APF costs) and
//! `kube-aggregator` (kube-apiserver's CPU and memory). `kube-aggregator` then measures, with
//! the small-GET backend: `/apis` legacy and aggregated with 50 APIServices, idle watches
//! (memory per watch), and the big list (throughput and memory growth).

use super::env::{apiservice_of, client_configs, free_port, sample_command, wait_ready, Env, Proc};
use super::load::{Proto, Target};
use super::scenarios::{self, small_get_variants, AGGREGATED, PAYLOAD};
use super::stats::children;
use super::{big_list, watches, Figure, Row, Settings};
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
/// The launcher's Service for the wardle APIServices, and the name its certificates carry.
const SERVICE: (&str, &str) = ("wardle", "api");
/// APIServices in the discovery rows.
const DISCOVERY_SERVICES: usize = 50;

fn flunders() -> String {
    format!("/apis/wardle.example.com/v1alpha1/namespaces/{NAMESPACE}/flunders")
}

/// The RBAC objects that let `wardle-users` use the wardle and benchmark groups, in
/// kube-apiserver and in apigw.
fn policy() -> [serde_json::Value; 2] {
    [
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "bench-user"},
            "rules": [
                {"apiGroups": ["wardle.example.com"], "resources": ["*"], "verbs": ["get", "list", "watch"]},
                {"nonResourceURLs": ["/apis", "/apis/*"], "verbs": ["get"]},
            ],
        }),
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "bench-users"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bench-user"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "wardle-users"}],
        }),
    ]
}

/// kube-apiserver's `--authorization-config` for `AlwaysAllow` (its name must be the type's).
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

/// What a kube-aggregator scenario gives.
#[derive(Default)]
pub struct Outcome {
    pub rows: Vec<Row>,
    pub figures: Vec<Figure>,
    pub skipped: Vec<String>,
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

/// A running control plane and the clients of its front door.
struct ControlPlane {
    proc: Proc,
    dir: PathBuf,
    state: State,
    /// alice through kube-aggregator.
    kube: Target,
    /// admin (system:masters), for setting up.
    admin: Target,
    allow: bool,
    scenario: String,
}

impl ControlPlane {
    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.file(name).display().to_string()
    }

    /// The launcher's child process named `name`.
    fn pid_of(&self, name: &str) -> Option<u32> {
        process_named(self.proc.pid(), name)
    }

    /// alice's client, to a front door at `addr`.
    fn front(&self, name: &str, addr: SocketAddr, pids: Vec<u32>) -> Target {
        Target {
            name: name.into(),
            addr,
            pids,
            ..self.kube.clone()
        }
    }

    /// Straight to a backend at `addr` (processes `pids`) serving the wardle certificate, as
    /// a front proxy reaches it: the front-proxy client certificate, alice's identity.
    fn direct(&self, addr: SocketAddr, pids: Vec<u32>) -> anyhow::Result<Target> {
        let (h1, h2) = client_configs(
            &self.file("wardle-ca.crt"),
            &self.file("front-proxy-client.crt"),
            &self.file("front-proxy-client.key"),
        )?;
        let header = |name: &'static str, value: &'static str| {
            (
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            )
        };
        Ok(Target {
            name: "direct".into(),
            addr,
            server_name: ServerName::try_from(self.state.sample_host.clone())
                .context("the backend's service name")?,
            h1,
            h2,
            headers: vec![
                header("x-remote-user", "alice"),
                header("x-remote-group", "wardle-users"),
                header("x-remote-group", "system:authenticated"),
            ],
            pids,
        })
    }
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

/// Starts the control plane for `scenario` and sets it up: the RBAC objects (unless
/// AlwaysAllow) and one flunder.
async fn start(env: &Env, opts: &Options, scenario: &str) -> anyhow::Result<ControlPlane> {
    let allow = scenario == ALLOW;
    let bin = upstream(opts)?;
    let dir = env.dir.path().join(scenario);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = Command::new(bin.join("controlplane"));
    cmd.arg("-dir").arg(&dir).arg("-bin").arg(&bin);
    if allow {
        let file = dir.join("always-allow.yaml");
        write(&file, ALWAYS_ALLOW.as_bytes())?;
        cmd.arg("-authorization-config").arg(file);
    }
    let mut proc = Proc::spawn(&format!("{scenario}-controlplane"), cmd, env.dir.path())?;
    let state: State = await_state(&dir.join("state.json"), &mut proc).await?;
    let apiserver =
        process_named(proc.pid(), "kube-apiserver").context("kube-apiserver under the launcher")?;
    let (h1, h2) = client_configs(
        &dir.join("ca.crt"),
        &dir.join("alice.crt"),
        &dir.join("alice.key"),
    )?;
    let kube = Target {
        name: "kube-aggregator".into(),
        addr: addr_of(&state.apiserver)?,
        server_name: ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
        h1,
        h2,
        headers: Vec::new(),
        pids: vec![apiserver],
    };
    let (h1, h2) = client_configs(
        &dir.join("ca.crt"),
        &dir.join("admin.crt"),
        &dir.join("admin.key"),
    )?;
    let admin = Target {
        name: "kube-apiserver as admin".into(),
        h1,
        h2,
        ..kube.clone()
    };
    let mut cp = ControlPlane {
        proc,
        dir,
        state,
        kube,
        admin,
        allow,
        scenario: scenario.to_string(),
    };
    if !allow {
        for object in policy() {
            let kind = object["kind"].as_str().unwrap_or_default().to_lowercase();
            let path = format!("/apis/rbac.authorization.k8s.io/v1/{kind}s");
            post(&cp.admin, &path, &object).await?;
        }
    }
    // Through kube-aggregator, once sample-apiserver's APIService is available.
    await_ok(&cp.admin, &flunders(), &mut cp.proc).await?;
    let flunder = serde_json::json!({
        "apiVersion": "wardle.example.com/v1alpha1",
        "kind": "Flunder",
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "spec": {},
    });
    post(&cp.admin, &flunders(), &flunder).await?;
    Ok(cp)
}

/// Runs `scenario` ([`RBAC`] or [`ALLOW`]).
pub async fn run(
    s: &Settings,
    env: &Env,
    opts: &Options,
    scenario: &str,
) -> anyhow::Result<Outcome> {
    let mut cp = start(env, opts, scenario).await?;
    let mut out = Outcome::default();
    if !opts.log_target {
        out.skipped
            .push(format!("{scenario}: apigw-log left out (--no-log-target)"));
    }

    // sample-apiserver, as the launcher registered it.
    let sample = addr_of(&cp.state.sample)?;
    let manifests = cp.file("apiservices");
    let port = cp.state.sample_port;
    let mut fronts = gateways(env, &cp, opts, "sample", &manifests, port).await?;
    let direct = cp.direct(sample, cp.pid_of("sample-apiserver").into_iter().collect())?;
    let mut targets = vec![direct];
    targets.extend(fronts.iter().map(|(_, t)| t.clone()));
    targets.push(cp.kube.clone());
    out.rows
        .extend(request_rates(s, &targets, &format!("{scenario}-sample"), &flunders()).await);
    check_alive(&mut cp, &mut fronts, scenario)?;
    drop(fronts);

    // The bench's backend, under the same Service name and CA, with 50 APIServices.
    let (mut backend, addr) = small_get_backend(env, &cp, scenario).await?;
    let services = apiservices(&cp, addr.port())?;
    repoint(&cp, addr.port(), &services).await?;
    let dir = cp.file("apiservices-bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": services});
    write(&dir.join("apiservices.json"), list.to_string().as_bytes())?;
    let payload = format!("{PAYLOAD}?bytes=1024");
    await_ok(&cp.kube, &payload, &mut cp.proc).await?;
    let mut fronts = gateways(env, &cp, opts, "small-get", &dir, addr.port()).await?;
    let direct = cp.direct(addr, vec![backend.pid()])?;
    let mut targets = vec![direct.clone()];
    targets.extend(fronts.iter().map(|(_, t)| t.clone()));
    targets.push(cp.kube.clone());
    out.rows
        .extend(request_rates(s, &targets, &format!("{scenario}-small-get"), &payload).await);

    if scenario == RBAC {
        let apigw = fronts
            .first()
            .map(|(_, t)| t.clone())
            .context("the apigw gateway")?;
        let doors = [apigw, cp.kube.clone()];
        let (rows, figures) = discovery(s, scenario, &doors, env.dir.path()).await?;
        out.rows.extend(rows);
        out.figures.extend(figures);
        let watches = s.watches.min(1000);
        for door in &doors {
            eprintln!(
                "apigw-bench: {scenario}-watches: {watches} via {}",
                door.name
            );
            out.figures.extend(
                watches::idle(&format!("{scenario}-watches"), door, backend.pid(), watches).await,
            );
        }
        let (rows, figures) = big_list::run(
            s,
            &format!("{scenario}-big-list"),
            &[&direct, &doors[0], &doors[1]],
        )
        .await;
        out.rows.extend(rows);
        out.figures.extend(figures);
    }
    check_alive(&mut cp, &mut fronts, scenario)?;
    if let Some(status) = backend.exited() {
        anyhow::bail!("the small-GET backend exited during {scenario} ({status})");
    }
    Ok(out)
}

/// The small GETs' four variants of `path` through `targets`, named `<prefix><suffix>`, each
/// row with its target's memory just before.
async fn request_rates(s: &Settings, targets: &[Target], prefix: &str, path: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    for (suffix, proto, c) in small_get_variants(s) {
        let before: Vec<u64> = targets.iter().map(Target::rss_kib).collect();
        let name = format!("{prefix}{suffix}");
        let mut new = scenarios::get_rows(s, targets, &name, path, proto, c).await;
        for (row, kib) in new.iter_mut().zip(before) {
            row.rss_before_kib = kib;
        }
        rows.extend(new);
    }
    rows
}

/// `/apis` legacy and aggregated through each front door, once both list every APIService.
/// Each door's document is written to `dir` (kept with `APIGW_BENCH_KEEP=1`).
async fn discovery(
    s: &Settings,
    scenario: &str,
    doors: &[Target],
    dir: &Path,
) -> anyhow::Result<(Vec<Row>, Vec<Figure>)> {
    let mut rows = Vec::new();
    let mut figures = Vec::new();
    for (form, accept) in [("legacy", None), ("aggregated", Some(AGGREGATED))] {
        let name = format!("{scenario}-discovery-{form}");
        let probe = super::load::Job {
            accept,
            ..job(Method::GET, "/apis", Vec::new())
        };
        for door in doors {
            let doc = await_listing(door, &probe).await?;
            write(&dir.join(format!("{name}-{}.json", door.name)), &doc)?;
            figures.push(Figure::new(
                &name,
                &format!("{} /apis bytes", door.name),
                doc.len() as f64,
                "bytes",
            ));
        }
        let measured = super::load::Job {
            concurrency: s.concurrency,
            warmup: s.warmup,
            window: s.duration,
            ..probe
        };
        rows.extend(scenarios::side_by_side(&name, doors, &measured, s.rounds).await);
    }
    Ok((rows, figures))
}

/// Fetches `/apis` through `door` until it lists every benchmark group (kube-aggregator
/// merges a new APIService's discovery some seconds after it becomes available); its size.
async fn await_listing(door: &Target, job: &super::load::Job) -> anyhow::Result<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let last = format!("g{:03}.bench.example.com", DISCOVERY_SERVICES - 2);
    loop {
        let doc = scenarios::fetch(door, job).await?;
        let text = String::from_utf8_lossy(&doc);
        if text.contains(&last) && text.contains("wardle.example.com") {
            return Ok(doc);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{}'s /apis did not list the {DISCOVERY_SERVICES} APIServices within 2 minutes",
            door.name
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Starts apigw, apigw-log (unless left out) and apigw-no-apf in front of the control plane
/// with the APIServices in `manifests`, their Service resolving to loopback `port`.
async fn gateways(
    env: &Env,
    cp: &ControlPlane,
    opts: &Options,
    phase: &str,
    manifests: &Path,
    port: u16,
) -> anyhow::Result<Vec<(Proc, Target)>> {
    let mut args: Vec<String> = Vec::new();
    for (flag, name) in [
        ("--tls-cert-file", "gateway.crt"),
        ("--tls-private-key-file", "gateway.key"),
        ("--client-ca-file", "ca.crt"),
        ("--proxy-client-cert-file", "apigw-proxy-client.crt"),
        ("--proxy-client-key-file", "apigw-proxy-client.key"),
        ("--delegate-ca-file", "ca.crt"),
    ] {
        args.extend([flag.to_string(), cp.arg(name)]);
    }
    args.extend([
        "--delegate-url".into(),
        cp.state.apiserver.clone(),
        "--apiservice-dir".into(),
        manifests.display().to_string(),
        "--resolve".into(),
        format!("{}:{port}=127.0.0.1:{port}", cp.state.sample_host),
    ]);
    if cp.allow {
        args.push("--authorization-mode=AlwaysAllow".into());
    } else {
        let text: Vec<String> = policy().iter().map(|o| o.to_string()).collect();
        let file = cp.file("apigw-rbac.yaml");
        write(&file, text.join("\n---\n").as_bytes())?;
        args.extend([
            "--authorization-mode=RBAC".into(),
            "--rbac-policy-file".into(),
            file.display().to_string(),
        ]);
    }
    let lean = env.gateway_log.as_str();
    let mut wanted = vec![("apigw", lean, None)];
    if opts.log_target {
        wanted.push(("apigw-log", "info", None));
    }
    wanted.push((
        "apigw-no-apf",
        lean,
        Some("--enable-priority-and-fairness=false"),
    ));
    let mut out = Vec::new();
    for (name, log, extra) in wanted {
        let port = free_port()?;
        let mut cmd = Command::new(&env.exe);
        cmd.arg("serve")
            .args(["--bind-address", "127.0.0.1", "--secure-port"])
            .arg(port.to_string())
            .args(&args)
            .args(extra)
            .args(&env.gateway_args)
            .env("RUST_LOG", log);
        let label = format!("{}-{phase}-{name}", cp.scenario);
        let mut proc = Proc::spawn(&label, cmd, env.dir.path())?;
        let target = cp.front(
            name,
            SocketAddr::from(([127, 0, 0, 1], port)),
            vec![proc.pid()],
        );
        wait_ready(&target, "/readyz", &mut proc)
            .await
            .with_context(|| format!("{name} in front of the control plane"))?;
        out.push((proc, target));
    }
    // Ready is not yet available: wait until each serves the backend.
    for (proc, target) in &mut out {
        let path = match phase {
            "sample" => flunders(),
            _ => format!("{PAYLOAD}?bytes=64"),
        };
        await_ok(target, &path, proc).await?;
    }
    Ok(out)
}

/// The bench's backend with the control plane's wardle certificate, trusting its front-proxy
/// CA; and its address.
async fn small_get_backend(
    env: &Env,
    cp: &ControlPlane,
    scenario: &str,
) -> anyhow::Result<(Proc, SocketAddr)> {
    let port = free_port()?;
    let cert = (cp.file("wardle-serving.crt"), cp.file("wardle-serving.key"));
    let mut cmd = sample_command(
        &env.exe,
        port,
        (&cert.0, &cert.1),
        &cp.file("front-proxy-ca.crt"),
    );
    // kube-aggregator's certificate and apigw's, as kube-apiserver allows them.
    cmd.arg("--requestheader-allowed-names=front-proxy-client,apigw");
    let mut proc = Proc::spawn(&format!("{scenario}-backend"), cmd, env.dir.path())?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let direct = cp.direct(addr, Vec::new())?;
    wait_ready(&direct, "/healthz", &mut proc).await?;
    Ok((proc, addr))
}

/// The APIServices of the small-GET phase: wardle's v1alpha1 and 49 benchmark groups, all
/// served by the launcher's Service on `port`, with the wardle CA.
fn apiservices(cp: &ControlPlane, port: u16) -> anyhow::Result<Vec<serde_json::Value>> {
    use base64::Engine as _;
    let ca = std::fs::read(cp.file("wardle-ca.crt")).context("reading wardle-ca.crt")?;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca);
    let service = (SERVICE.1, SERVICE.0, port);
    let one = |group: &str, version: &str, priority: u32| {
        apiservice_of(service, group, version, (priority, 15), &ca)
    };
    let mut out = vec![one("wardle.example.com", "v1alpha1", 1000)];
    for i in 0..DISCOVERY_SERVICES - 1 {
        out.push(one(
            &format!("g{i:03}.bench.example.com"),
            "v1",
            100 + i as u32,
        ));
    }
    Ok(out)
}

/// Points kube-apiserver's wardle Service at loopback `port` and replaces the launcher's
/// APIServices with `services`.
async fn repoint(
    cp: &ControlPlane,
    port: u16,
    services: &[serde_json::Value],
) -> anyhow::Result<()> {
    let (ns, name) = SERVICE;
    delete(
        &cp.admin,
        &format!("/api/v1/namespaces/{ns}/services/{name}"),
    )
    .await?;
    let svc = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "type": "ExternalName", "externalName": "127.0.0.1",
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        },
    });
    post(
        &cp.admin,
        &format!("/api/v1/namespaces/{ns}/services"),
        &svc,
    )
    .await?;
    let registry = "/apis/apiregistration.k8s.io/v1/apiservices";
    for old in ["v1alpha1.wardle.example.com", "v1beta1.wardle.example.com"] {
        delete(&cp.admin, &format!("{registry}/{old}")).await?;
    }
    for service in services {
        post(&cp.admin, registry, service).await?;
    }
    Ok(())
}

fn check_alive(
    cp: &mut ControlPlane,
    fronts: &mut [(Proc, Target)],
    scenario: &str,
) -> anyhow::Result<()> {
    if let Some(status) = cp.proc.exited() {
        anyhow::bail!("the control plane exited during {scenario} ({status})");
    }
    for (p, _) in fronts {
        if let Some(status) = p.exited() {
            anyhow::bail!("{} exited during {scenario} ({status})", p.name);
        }
    }
    Ok(())
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

/// The child process of `parent` named `name` (the kernel keeps 15 bytes of a name).
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
/// some seconds after registration), at most 90 s, while `proc` runs.
async fn await_ok(target: &Target, path: &str, proc: &mut Proc) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Some(status) = proc.exited() {
            anyhow::bail!("{} exited ({status})", proc.name);
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

async fn delete(target: &Target, path: &str) -> anyhow::Result<()> {
    scenarios::fetch(target, &job(Method::DELETE, path, Vec::new()))
        .await
        .with_context(|| format!("DELETE {path} at {}", target.name))?;
    Ok(())
}
