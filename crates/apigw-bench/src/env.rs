//! The world `apigw-bench` measures, built in a fresh temporary directory: the dev PKI, the
//! sample addon server and the gateway as separate processes of the `apigw` binary, and the
//! client TLS configurations of the front door (user certificate) and of the backend (the proxy
//! client certificate, as the gateway itself presents it). Each process leads its own process
//! group, and the whole group is killed on drop (nginx's workers with their master). A gateway
//! runs as the `apigw` target with `--gateway-log`, or as the `apigw-log` target with
//! `RUST_LOG=info`, apigw's default: one access line per request.

use super::load::{self, Proto, Target};
use anyhow::Context as _;
use apigw_core::certs::{write_dev_pki, DevPkiOptions};
use base64::Engine as _;
use http::{HeaderName, HeaderValue, Method};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The name the backend's certificate carries, and the gateway verifies.
pub const SERVICE_NAME: &str = "wardle-server.wardle-namespace.svc";

/// The target name of a gateway with its access log on (`RUST_LOG=info`).
pub const LOG_TARGET: &str = "apigw-log";

/// A child process leading its own process group; the group is killed and the child reaped
/// when dropped.
pub struct Proc {
    pub name: String,
    child: Child,
}

impl Proc {
    /// Starts `cmd` with output to `<dir>/<name>.log`.
    pub fn spawn(name: &str, mut cmd: Command, dir: &Path) -> anyhow::Result<Self> {
        let log_path = dir.join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let err = log.try_clone().context("duplicating the log handle")?;
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name} ({cmd:?})"))?;
        Ok(Self {
            name: name.to_string(),
            child,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(exit status)` when the process has already ended.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let group = rustix::process::Pid::from_raw(self.child.id().try_into().unwrap_or(0));
        if let Some(group) = group {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> anyhow::Result<Self> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!("apigw-bench-{}-{stamp}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // APIGW_BENCH_KEEP=1 keeps the folder (the servers' logs) for a post-mortem.
        if std::env::var_os("APIGW_BENCH_KEEP").is_some() {
            eprintln!("apigw-bench: kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A port on 127.0.0.1 free right now (bound, then released for the child to bind).
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr().context("finding a free port")?.port())
}

/// Client TLS configurations offering HTTP/1.1 and HTTP/2 respectively.
pub fn client_configs(
    roots: &Path,
    cert: &Path,
    key: &Path,
) -> anyhow::Result<(Arc<ClientConfig>, Arc<ClientConfig>)> {
    let mut store = rustls::RootCertStore::empty();
    for ca in apigw_core::tls::load_certs(roots)? {
        store
            .add(ca)
            .with_context(|| format!("adding {} to the roots", roots.display()))?;
    }
    let certs = apigw_core::tls::load_certs(cert)?;
    let key = apigw_core::tls::load_key(key)?;
    let base = ClientConfig::builder_with_provider(apigw_core::tls::provider())
        .with_safe_default_protocol_versions()
        .context("client TLS versions")?
        .with_root_certificates(store)
        .with_client_auth_cert(certs, key)
        .context("client certificate")?;
    let mut h1 = base.clone();
    h1.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut h2 = base;
    h2.alpn_protocols = vec![b"h2".to_vec()];
    Ok((Arc::new(h1), Arc::new(h2)))
}

/// `apigw sample-apiserver` on loopback `port`, serving `cert` and trusting front proxies
/// from `proxy_ca`, its log at `warn`.
pub fn sample_command(exe: &Path, port: u16, cert: (&Path, &Path), proxy_ca: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.arg("sample-apiserver")
        .args(["--bind-address", "127.0.0.1", "--secure-port"])
        .arg(port.to_string())
        .arg("--tls-cert-file")
        .arg(cert.0)
        .arg("--tls-private-key-file")
        .arg(cert.1)
        .arg("--requestheader-client-ca-file")
        .arg(proxy_ca)
        .env("RUST_LOG", "warn");
    cmd
}

/// The dev PKI, the sample server and the targets reaching it.
pub struct Env {
    pub dir: TempDir,
    pub sample: Proc,
    pub sample_addr: SocketAddr,
    /// Front-door client configs (user `dev-admin`).
    pub front: (Arc<ClientConfig>, Arc<ClientConfig>),
    pub exe: PathBuf,
    /// More `apigw serve` flags for every gateway this run starts (`--gateway-arg`).
    pub gateway_args: Vec<String>,
    /// `RUST_LOG` of every `apigw` gateway this run starts (`--gateway-log`).
    pub gateway_log: String,
}

impl Env {
    /// Writes the PKI and starts the sample server.
    pub async fn start(
        apigw: Option<PathBuf>,
        gateway_args: Vec<String>,
        gateway_log: String,
    ) -> anyhow::Result<Self> {
        let dir = TempDir::new()?;
        write_dev_pki(&DevPkiOptions {
            out: dir.path().join("pki"),
            force: true,
            gateway_url: "https://127.0.0.1:8443".into(),
        })
        .context("writing the dev PKI")?;
        let exe = match apigw {
            Some(path) => path,
            None => std::env::current_exe()
                .context("finding this executable")?
                .with_file_name(format!("apigw{}", std::env::consts::EXE_SUFFIX)),
        };
        let port = free_port()?;
        let pki = dir.path().join("pki");
        let cmd = sample_command(
            &exe,
            port,
            (&pki.join("wardle.crt"), &pki.join("wardle.key")),
            &pki.join("front-proxy-ca.crt"),
        );
        let sample = Proc::spawn("sample-apiserver", cmd, dir.path())?;
        let front = client_configs(
            &pki.join("ca.crt"),
            &pki.join("admin.crt"),
            &pki.join("admin.key"),
        )?;
        let mut env = Self {
            dir,
            sample,
            sample_addr: SocketAddr::from(([127, 0, 0, 1], port)),
            front,
            exe,
            gateway_args,
            gateway_log,
        };
        let direct = env.direct()?;
        wait_ready(&direct, "/healthz", &mut env.sample).await?;
        Ok(env)
    }

    pub fn pki(&self, file: &str) -> PathBuf {
        self.dir.path().join("pki").join(file)
    }

    /// Straight to the backend, as the gateway reaches it: proxy client certificate, service
    /// name verified against the addon CA, identity in `X-Remote-User`.
    pub fn direct(&self) -> anyhow::Result<Target> {
        self.direct_to(self.sample_addr, vec![self.sample.pid()])
    }

    /// Straight to another backend at `addr` serving the same certificate (processes `pids`),
    /// presenting what [`Env::direct`] presents.
    pub fn direct_to(&self, addr: SocketAddr, pids: Vec<u32>) -> anyhow::Result<Target> {
        let (h1, h2) = client_configs(
            &self.pki("addon-ca.crt"),
            &self.pki("proxy-client.crt"),
            &self.pki("proxy-client.key"),
        )?;
        Ok(Target {
            name: "direct".into(),
            addr,
            server_name: ServerName::try_from(SERVICE_NAME.to_string())
                .context("the service name")?,
            h1,
            h2,
            headers: vec![
                (
                    HeaderName::from_static("x-remote-user"),
                    HeaderValue::from_static("dev-admin"),
                ),
                (
                    HeaderName::from_static("x-remote-group"),
                    HeaderValue::from_static("system:masters"),
                ),
            ],
            pids,
        })
    }

    /// A front-door target (`apigw`, `nginx`, `haproxy`) on `addr`.
    pub fn front_target(&self, name: &str, addr: SocketAddr, pids: Vec<u32>) -> Target {
        Target {
            name: name.into(),
            addr,
            server_name: ServerName::try_from("localhost")
                .unwrap_or(ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())),
            h1: self.front.0.clone(),
            h2: self.front.1.clone(),
            headers: Vec::new(),
            pids,
        }
    }

    /// The APIService of the sample server, with the addon CA as its caBundle.
    pub fn wardle_apiservice(&self) -> anyhow::Result<serde_json::Value> {
        let ca = std::fs::read(self.pki("addon-ca.crt")).context("reading addon-ca.crt")?;
        Ok(apiservice(
            "wardle.example.com",
            "v1alpha1",
            1000,
            15,
            &base64::engine::general_purpose::STANDARD.encode(ca),
        ))
    }

    /// Starts a gateway serving the APIServices in `services`, and waits until it is ready.
    pub async fn gateway(
        &self,
        name: &str,
        services: &[serde_json::Value],
    ) -> anyhow::Result<(Proc, Target)> {
        self.gateway_to(name, services, self.sample_addr).await
    }

    /// [`Env::gateway`] with the service name resolving to `backend` instead of the sample
    /// server.
    pub async fn gateway_to(
        &self,
        name: &str,
        services: &[serde_json::Value],
        backend: SocketAddr,
    ) -> anyhow::Result<(Proc, Target)> {
        self.start_gateway(name, services, backend, &self.gateway_log, &[])
            .await
    }

    /// [`Env::gateway_to`] in apigw's default configuration, `RUST_LOG=info` (one access line
    /// per request, to `<name>.log`), as the [`LOG_TARGET`] target.
    pub async fn log_gateway_to(
        &self,
        name: &str,
        services: &[serde_json::Value],
        backend: SocketAddr,
    ) -> anyhow::Result<(Proc, Target)> {
        let (proc, mut target) = self
            .start_gateway(name, services, backend, "info", &[])
            .await?;
        target.name = LOG_TARGET.into();
        Ok((proc, target))
    }

    /// [`Env::gateway`] with `RUST_LOG=rust_log` and the flags `extra` after the run's.
    pub async fn gateway_with(
        &self,
        name: &str,
        services: &[serde_json::Value],
        rust_log: &str,
        extra: &[&str],
    ) -> anyhow::Result<(Proc, Target)> {
        self.start_gateway(name, services, self.sample_addr, rust_log, extra)
            .await
    }

    /// Starts a gateway with `RUST_LOG=rust_log` and the flags `extra` after the run's, and
    /// waits until it is ready.
    async fn start_gateway(
        &self,
        name: &str,
        services: &[serde_json::Value],
        backend: SocketAddr,
        rust_log: &str,
        extra: &[&str],
    ) -> anyhow::Result<(Proc, Target)> {
        let manifests = self.dir.path().join(format!("{name}-apiservices"));
        std::fs::create_dir_all(&manifests)
            .with_context(|| format!("creating {}", manifests.display()))?;
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": services});
        let file = manifests.join("apiservices.json");
        std::fs::write(&file, list.to_string())
            .with_context(|| format!("writing {}", file.display()))?;
        let port = free_port()?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("serve")
            .args(["--bind-address", "127.0.0.1", "--secure-port"])
            .arg(port.to_string());
        for (flag, file) in [
            ("--tls-cert-file", "serving.crt"),
            ("--tls-private-key-file", "serving.key"),
            ("--client-ca-file", "client-ca.crt"),
            ("--proxy-client-cert-file", "proxy-client.crt"),
            ("--proxy-client-key-file", "proxy-client.key"),
        ] {
            cmd.arg(flag).arg(self.pki(file));
        }
        cmd.arg("--apiservice-dir")
            .arg(&manifests)
            .arg("--resolve")
            .arg(format!("{SERVICE_NAME}:443={backend}"))
            .args(&self.gateway_args)
            .args(extra)
            .env("RUST_LOG", rust_log);
        let mut proc = Proc::spawn(name, cmd, self.dir.path())?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let target = self.front_target("apigw", addr, vec![proc.pid()]);
        wait_ready(&target, "/readyz", &mut proc).await?;
        Ok((proc, target))
    }
}

/// The bench's Service for the sample server: name, namespace, port.
const SAMPLE_SERVICE: (&str, &str, u16) = ("wardle-server", "wardle-namespace", 443);

/// An APIService for `<version>.<group>` served by the sample server's service.
pub fn apiservice(
    group: &str,
    version: &str,
    group_priority: u32,
    version_priority: u32,
    ca_bundle: &str,
) -> serde_json::Value {
    let priorities = (group_priority, version_priority);
    apiservice_of(SAMPLE_SERVICE, group, version, priorities, ca_bundle)
}

/// An APIService for `<version>.<group>` served by `service` (name, namespace, port), with
/// `(groupPriorityMinimum, versionPriority)`.
pub fn apiservice_of(
    (name, namespace, port): (&str, &str, u16),
    group: &str,
    version: &str,
    (group_priority, version_priority): (u32, u32),
    ca_bundle: &str,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": format!("{version}.{group}")},
        "spec": {
            "group": group,
            "version": version,
            "groupPriorityMinimum": group_priority,
            "versionPriority": version_priority,
            "caBundle": ca_bundle,
            "service": {"name": name, "namespace": namespace, "port": port},
        },
    })
}

/// Waits until `GET path` on `target` answers 200 (over HTTP/1.1), or fails after 60 s, or
/// when `proc` exits first.
pub async fn wait_ready(target: &Target, path: &str, proc: &mut Proc) -> anyhow::Result<()> {
    let job = load::Job {
        method: Method::GET,
        path: path.into(),
        accept: None,
        body: bytes::Bytes::new(),
        proto: Proto::H1,
        concurrency: 1,
        warmup: Duration::ZERO,
        window: Duration::ZERO,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::from("not tried");
    while Instant::now() < deadline {
        if let Some(status) = proc.exited() {
            anyhow::bail!("{} exited ({status}); see its log", proc.name);
        }
        let attempt = async {
            let sender = load::connect(target, Proto::H1).await?;
            load::send(&sender, load::request(target, &job)?).await
        };
        match tokio::time::timeout(Duration::from_secs(5), attempt).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "no answer within 5 s".into(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("{} not ready at {path} after 60 s: {last}", proc.name)
}
