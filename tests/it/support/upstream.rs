//! The real Kubernetes tier: upstream's etcd, kube-apiserver (with its kube-aggregator) and
//! sample-apiserver, started on loopback by `controlplane` (tests/upstream, built with the
//! client-go witness by `scripts/upstream`), apigw run as its own binary in front of them, and
//! upstream's clients (kubectl, client-go) driving both. A missing Go toolchain or a failed
//! build fails the test that needs them.
//!
//! ```ignore
//! let cp = ControlPlane::start(&[]);
//! let gw = Apigw::start(&cp, &cp.manifest_mode());
//! let out = kubectl(&gw.kubeconfig(&cp, "admin"), &["get", "flunders", "-A"]).ok();
//! ```

pub use super::binary::wait_for;
use super::tool::{kubectl, kubectl_in, run, Ran};
use serde::Deserialize;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The directory `scripts/upstream` built (once per test process; it keeps its own cache).
pub fn binaries() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/upstream");
        let out = Command::new(&script)
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed ({}): the upstream components could not be built",
            script.display(),
            out.status
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// The fields of `state.json` (as the launcher prints it) that the tests read.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    pub dir: PathBuf,
    pub apiserver: String,
    pub sample_host: String,
    pub sample_port: u16,
    pub registered: bool,
    /// metrics-server's name and port (0: not started, `-metrics-server` not given).
    #[serde(default)]
    pub metrics_host: String,
    #[serde(default)]
    pub metrics_port: u16,
    /// The two metrics adapters (`-metrics-adapters`; none otherwise).
    #[serde(default)]
    pub adapters: Vec<Adapter>,
}

/// A metrics adapter the launcher started (`tests/upstream/metricsadapter`).
#[derive(Clone, Debug, Deserialize)]
pub struct Adapter {
    pub name: String,
    pub host: String,
    pub port: u16,
    /// Its custom metrics (`RESOURCE/METRIC=QUANTITY`) and external ones (`METRIC=QUANTITY`).
    pub custom: Vec<String>,
    pub external: Vec<String>,
    /// The file with its three APIServices.
    pub apiservices: PathBuf,
    /// Whether kube-apiserver has them (the first adapter's only).
    pub registered: bool,
}

/// Upstream's kube-controller-manager with its HorizontalPodAutoscaler controller only,
/// syncing every second, talking to the cluster through `kubeconfig` (kube-apiserver, or a
/// front door). Dropping it kills the process.
pub struct ControllerManager {
    child: Child,
    pub log: PathBuf,
}

impl ControllerManager {
    pub fn start(cp: &ControlPlane, kubeconfig: &Path, name: &str) -> Self {
        let log = cp.path(&format!("logs/{name}.log"));
        let child = Command::new(binaries().join("kube-controller-manager"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args([
                "--controllers=horizontal-pod-autoscaler-controller",
                "--horizontal-pod-autoscaler-sync-period=1s",
                "--leader-elect=false",
                "--secure-port=0",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the controller manager's log"))
            .spawn()
            .expect("kube-controller-manager starts");
        Self { child, log }
    }

    pub fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ControllerManager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running control plane. Dropping it stops every server and removes its directory.
pub struct ControlPlane {
    pub state: State,
    stdin: Option<ChildStdin>,
    child: Child,
    _dir: tempfile::TempDir,
    /// Held while it runs (released after its servers stopped).
    _tier: std::sync::MutexGuard<'static, ()>,
}

/// The real Kubernetes tier one control plane at a time in a process: under `cargo test`, whose
/// threads share one process, as nextest's `kubernetes` test group runs it (.config/nextest.toml);
/// under nextest every test is a process of its own and this never waits.
static TIER: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl ControlPlane {
    /// Starts etcd, kube-apiserver and (unless `-sample=false`) sample-apiserver with the
    /// launcher's `args`, and waits until all are ready.
    pub fn start(args: &[&str]) -> Self {
        // A test that failed while holding it has stopped its servers all the same.
        let tier = TIER.lock().unwrap_or_else(|e| e.into_inner());
        let bin = binaries().join("controlplane");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut child = Command::new(&bin)
            .arg(format!("-dir={}", dir.path().display()))
            .arg("-exit-on-eof")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        if line.trim().is_empty() {
            let _ = child.kill();
            let out = child.wait_with_output().expect("the launcher's output");
            panic!(
                "the control plane did not start ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let state: State = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the launcher's state line {line:?}: {e}"));
        // The launcher logs to files; its own stderr only matters when it fails.
        let stderr = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("controlplane: {line}");
            }
        });
        Self {
            state,
            stdin: child.stdin.take(),
            child,
            _dir: dir,
            _tier: tier,
        }
    }

    /// A file the launcher wrote (`ca.crt`, `admin.kubeconfig`, `apiservices`...).
    pub fn path(&self, name: &str) -> PathBuf {
        self.state.dir.join(name)
    }

    /// A file's path as an argument.
    pub fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// kubectl as `admin` (system:masters) straight at kube-apiserver.
    pub fn kubectl(&self, args: &[&str]) -> Ran {
        kubectl(&self.path("admin.kubeconfig"), args)
    }

    /// kubectl as `admin` straight at kube-apiserver, with `manifest` on standard input.
    pub fn kubectl_in(&self, args: &[&str], manifest: &str) -> Ran {
        kubectl_in(&self.path("admin.kubeconfig"), args, Some(manifest))
    }

    /// A kubeconfig for `user` (its `<user>.crt`, signed by the cluster CA) at `server`.
    pub fn kubeconfig(&self, server: &str, user: &str, file: &str) -> PathBuf {
        let path = self.path(file);
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate: {crt}\n    client-key: {key}\ncontexts:\n- name: {user}\n  context: {{cluster: c, user: {user}}}\ncurrent-context: {user}\n",
            ca = self.arg("ca.crt"),
            crt = self.arg(&format!("{user}.crt")),
            key = self.arg(&format!("{user}.key")),
        );
        std::fs::write(&path, text).expect("writing a kubeconfig");
        path
    }

    /// apigw's flags in manifest mode in front of this control plane: the launcher's
    /// APIServices for sample-apiserver, kube-apiserver as the delegate, client certificates
    /// from the cluster CA, the proxy client certificate from the front-proxy CA.
    pub fn manifest_mode(&self) -> Vec<String> {
        let port = self.state.sample_port;
        let mut args = self.front_door();
        args.extend([
            "--apiservice-dir".into(),
            self.arg("apiservices"),
            "--resolve".into(),
            format!("{}:{port}=127.0.0.1:{port}", self.state.sample_host),
        ]);
        if self.state.metrics_port != 0 {
            let (host, port) = (&self.state.metrics_host, self.state.metrics_port);
            args.extend([
                "--resolve".into(),
                format!("{host}:{port}=127.0.0.1:{port}"),
            ]);
        }
        args
    }

    /// apigw's flags in manifest mode with the manifests of `dir` instead of the launcher's,
    /// each metrics adapter's name resolved to its port on loopback.
    pub fn manifest_mode_in(&self, dir: &Path) -> Vec<String> {
        let mut args = self.front_door();
        args.extend(["--apiservice-dir".into(), dir.display().to_string()]);
        for a in &self.state.adapters {
            args.extend([
                "--resolve".into(),
                format!("{}:{}=127.0.0.1:{}", a.host, a.port, a.port),
            ]);
        }
        args
    }

    /// apigw's flags to authenticate and authorize as kube-apiserver does, and so as
    /// kube-aggregator's door does: anonymous requests on (kube-apiserver's default) and every
    /// decision asked of kube-apiserver by SubjectAccessReview (`apigw-authorization.yaml`).
    pub fn kube_authorization(&self) -> Vec<String> {
        vec![
            "--anonymous-auth=true".into(),
            "--authorization-config".into(),
            self.arg("apigw-authorization.yaml"),
        ]
    }

    /// apigw's flags in cluster mode against this control plane, as `admin`.
    pub fn cluster_mode(&self) -> Vec<String> {
        self.cluster_mode_with(&self.path("admin.kubeconfig"))
    }

    /// apigw's flags in cluster mode against this control plane with `kubeconfig`.
    pub fn cluster_mode_with(&self, kubeconfig: &Path) -> Vec<String> {
        let mut args = self.front_door();
        args.extend(["--kubeconfig".into(), kubeconfig.display().to_string()]);
        args
    }

    /// A kubeconfig at kube-apiserver for a bearer `token` (a ServiceAccount's).
    pub fn token_kubeconfig(&self, token: &str, file: &str) -> PathBuf {
        let path = self.path(file);
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: u\n  context: {{cluster: c, user: u}}\ncurrent-context: u\n",
            server = self.state.apiserver,
            ca = self.arg("ca.crt"),
        );
        std::fs::write(&path, text).expect("writing a kubeconfig");
        path
    }

    fn front_door(&self) -> Vec<String> {
        [
            ("--tls-cert-file", "gateway.crt"),
            ("--tls-private-key-file", "gateway.key"),
            ("--client-ca-file", "ca.crt"),
            ("--proxy-client-cert-file", "apigw-proxy-client.crt"),
            ("--proxy-client-key-file", "apigw-proxy-client.key"),
            ("--delegate-ca-file", "ca.crt"),
        ]
        .into_iter()
        .flat_map(|(flag, file)| [flag.to_string(), self.arg(file)])
        .chain(["--delegate-url".into(), self.state.apiserver.clone()])
        .collect()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Closing stdin asks the launcher to stop its servers; it gets 20 s.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// apigw run as its binary, as users run it. Dropping it kills the process.
pub struct Apigw {
    pub addr: SocketAddr,
    pub url: String,
    pub log: PathBuf,
    child: Child,
}

impl Apigw {
    /// `apigw serve` on a free loopback port with `args`; waits until `/readyz` answers 200.
    pub fn start(cp: &ControlPlane, args: &[String]) -> Self {
        Self::start_as(cp, args, "apigw")
    }

    /// [`Apigw::start`] with `POD_NAME` set: the replica's Lease identity in cluster mode.
    pub fn start_as(cp: &ControlPlane, args: &[String], pod: &str) -> Self {
        Self::start_with_env(cp, args, &[("POD_NAME", pod)])
    }

    /// [`Apigw::start`] with these environment variables (`POD_NAME`, `POD_NAMESPACE`...).
    pub fn start_with_env(cp: &ControlPlane, args: &[String], env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let log = cp.path(&format!("apigw-{port}.log"));
        let file = std::fs::File::create(&log).expect("apigw's log file");
        let err = file.try_clone().expect("apigw's log file");
        let child = Command::new(env!("CARGO_BIN_EXE_apigw"))
            .args(["serve", "--bind-address", "127.0.0.1", "--secure-port"])
            .arg(port.to_string())
            .args(args)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .expect("running apigw");
        let gw = Self {
            addr: ([127, 0, 0, 1], port).into(),
            url: format!("https://127.0.0.1:{port}"),
            log,
            child,
        };
        gw.await_ready(cp);
        gw
    }

    fn await_ready(&self, cp: &ControlPlane) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        while Instant::now() < deadline {
            let got = curl(cp, "admin", &[&format!("{}/readyz", self.url)]);
            if got.succeeded() {
                return;
            }
            last = got.text();
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "apigw was not ready within 60 s ({last}); its log:\n{}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// Waits, as a user would with `kubectl wait`, until these APIServices are Available
    /// through the gateway, and then until its OpenAPI lists their group versions (merged just
    /// after): a backend's first check may fail while it warms up, as behind kube-aggregator.
    pub fn await_available(&self, cp: &ControlPlane, names: &[&str]) {
        let admin = self.kubeconfig(cp, "admin");
        let mut args = vec!["wait", "--for=condition=Available", "--timeout=90s"];
        let objects: Vec<String> = names.iter().map(|n| format!("apiservice/{n}")).collect();
        args.extend(objects.iter().map(String::as_str));
        kubectl(&admin, &args).ok();
        let merged = wait_for(30, || {
            let index = curl(cp, "admin", &[&format!("{}/openapi/v3", self.url)]);
            let text = index.stdout();
            names.iter().all(|n| match n.split_once('.') {
                Some((version, group)) => text.contains(&format!("\"apis/{group}/{version}\"")),
                None => false,
            })
        });
        assert!(merged, "apigw's OpenAPI never listed {names:?}");
    }

    /// A kubeconfig for `user` at this gateway.
    pub fn kubeconfig(&self, cp: &ControlPlane, user: &str) -> PathBuf {
        cp.kubeconfig(
            &self.url,
            user,
            &format!("{user}-at-{}.kubeconfig", self.addr.port()),
        )
    }

    /// What apigw logged so far.
    pub fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the process with SIGKILL, as a crashed or deleted replica stops.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Apigw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// curl as `user` (a client certificate from the cluster CA), trusting the cluster CA; prints
/// the body, fails on HTTP errors (`--fail-with-body`).
pub fn curl(cp: &ControlPlane, user: &str, args: &[&str]) -> Ran {
    let (crt, key) = (
        cp.arg(&format!("{user}.crt")),
        cp.arg(&format!("{user}.key")),
    );
    let mut all = vec!["--fail-with-body", "--cert", &crt, "--key", &key];
    all.extend(args);
    curl_without_cert(cp, &all)
}

/// curl trusting the cluster CA and presenting no client certificate (a bearer token in
/// `args`, or no credentials at all); prints the body.
pub fn curl_without_cert(cp: &ControlPlane, args: &[&str]) -> Ran {
    let ca = cp.arg("ca.crt");
    let mut all = vec!["-sS", "--max-time", "20", "--cacert", &ca];
    all.extend(args);
    run(Path::new("curl"), &all, None)
}

/// The client-go witness (`tests/upstream/cmd/clientgo`) running `check` against `kubeconfig`.
pub fn clientgo(kubeconfig: &Path, check: &str, extra: &[&str]) -> Ran {
    let kc = format!("-kubeconfig={}", kubeconfig.display());
    let mut args = vec![kc.as_str()];
    args.extend(extra);
    args.push(check);
    run(&binaries().join("clientgo"), &args, None)
}
