//! The Go addon API server in `tests/interop/goaddon`: a backend written with Go's standard
//! `net/http` (strict about HTTP, bundled HTTP/2, real requestheader authentication), built
//! once per test process and run once per test. Its contract is in the Go sources; in short:
//! group `interop.example.com/v1`, namespaced `widgets` (+ `widgets/exec` over WebSocket),
//! `/echo`, `<group version>/refuse` (413 before reading the body), `/debug/stats`, and
//! `X-Interop-{Host,Request-Uri,Proto,User}` response headers telling what it received.
//!
//! ```ignore
//! let addon = GoAddon::start(&world, GoOpts::default()).await;
//! addon.register(&world);
//! let mut cfg = world.config(&[]);
//! addon.resolve(&mut cfg);
//! ```

use super::{Answer, Gateway, World, ANSWER_WITHIN};
use apigw_gateway::config::Config;
use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use rustls::pki_types::ServerName;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

/// How a [`GoAddon`] is started.
#[derive(Clone, Debug)]
pub struct GoOpts {
    /// The name in its serving certificate, `<service>.<namespace>.svc` for [`GoAddon::register`].
    pub host: String,
    /// `-requestheader-allowed-names` (empty: any certificate from the front-proxy CA).
    pub allowed_names: Vec<String>,
    /// `-idle-timeout` (the server's default is 90 s).
    pub idle_timeout: Option<Duration>,
    /// `-bookmark-interval` (the server's default is 5 s).
    pub bookmark_interval: Option<Duration>,
    /// A fixed `-listen` address (default: a free loopback port).
    pub listen: Option<SocketAddr>,
    /// More flags, passed as they are (`-requestheader-username-headers=...`).
    pub args: Vec<String>,
}

impl Default for GoOpts {
    fn default() -> Self {
        Self {
            host: "widgets.interop.svc".into(),
            allowed_names: vec!["front-proxy-client".into()],
            idle_timeout: None,
            bookmark_interval: None,
            listen: None,
            args: Vec::new(),
        }
    }
}

/// A running Go addon server. Dropping it kills the process.
pub struct GoAddon {
    pub addr: SocketAddr,
    pub host: String,
    /// The server's stderr (one line per request), kept across restarts.
    pub log: PathBuf,
    child: Option<Child>,
    bin: PathBuf,
    args: Vec<String>,
    ca: PathBuf,
    proxy_cert: (PathBuf, PathBuf),
}

static STARTED: AtomicUsize = AtomicUsize::new(0);

impl GoAddon {
    /// The server binary, built (once per test process, and only when a source is newer than
    /// it) into `<target>/interop/goaddon`. Needs Go: Debian's `golang-go`.
    pub fn binary() -> PathBuf {
        static BIN: OnceLock<PathBuf> = OnceLock::new();
        BIN.get_or_init(build).clone()
    }

    /// Starts the server with a serving certificate for `opts.host` from `world.addon_ca`,
    /// trusting `world.front_proxy_ca` for requestheader authentication.
    pub async fn start(world: &World, opts: GoOpts) -> GoAddon {
        let bin = tokio::task::spawn_blocking(GoAddon::binary).await.unwrap();
        let stem = format!("goaddon-{}", STARTED.fetch_add(1, Ordering::Relaxed));
        let (crt, key) = world.pki.leaf(
            &stem,
            &world.addon_ca,
            &opts.host,
            &[],
            &[opts.host.as_str()],
            true,
        );
        let front_proxy_ca = world
            .pki
            .path(&format!("{}.crt", world.front_proxy_ca.name));
        let mut args = vec![
            format!("-tls-cert-file={}", crt.display()),
            format!("-tls-private-key-file={}", key.display()),
            format!("-requestheader-client-ca-file={}", front_proxy_ca.display()),
            format!(
                "-requestheader-allowed-names={}",
                opts.allowed_names.join(",")
            ),
        ];
        if let Some(d) = opts.idle_timeout {
            args.push(format!("-idle-timeout={}ms", d.as_millis()));
        }
        if let Some(d) = opts.bookmark_interval {
            args.push(format!("-bookmark-interval={}ms", d.as_millis()));
        }
        args.extend(opts.args);
        let mut addon = GoAddon {
            addr: opts.listen.unwrap_or(([127, 0, 0, 1], 0).into()),
            host: opts.host,
            log: world.pki.path(&format!("{stem}.log")),
            child: None,
            bin,
            args,
            ca: world.pki.path(&format!("{}.crt", world.addon_ca.name)),
            proxy_cert: (
                world.pki.path("proxy-client.crt"),
                world.pki.path("proxy-client.key"),
            ),
        };
        addon.spawn().await;
        addon
    }

    /// Runs the binary on `self.addr` and waits for its `LISTENING` line.
    async fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut child = Command::new(&self.bin)
            .args(&self.args)
            .arg(format!("-listen={}", self.addr))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<String>();
        // Reads the LISTENING line, then drains stdout so the server never writes to a
        // closed pipe (Go dies of SIGPIPE on fd 1).
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("LISTENING ") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr.trim().to_string());
                    }
                }
            }
        });
        self.child = Some(child);
        let listening = tokio::time::timeout(Duration::from_secs(20), rx).await;
        match listening {
            Ok(Ok(addr)) => self.addr = addr.parse().unwrap(),
            failed => {
                if let Some(mut child) = self.child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                let why = match failed {
                    Err(_) => "no LISTENING line within 20 s",
                    _ => "it exited without printing LISTENING",
                };
                panic!(
                    "the Go addon server did not start ({why}); its stderr ({}):\n{}",
                    self.log.display(),
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
        }
    }

    /// Writes the `v1.interop.example.com` APIService (groupPriorityMinimum 1000,
    /// versionPriority 15, caBundle the addon CA) for the service `host` names.
    pub fn register(&self, world: &World) {
        let mut parts = self.host.split('.');
        let (Some(svc), Some(ns), Some("svc"), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            panic!("{} is not <service>.<namespace>.svc", self.host);
        };
        world.register(
            "v1.interop.example.com.json",
            "interop.example.com",
            "v1",
            1000,
            15,
            svc,
            ns,
            &world.addon_ca,
        );
    }

    /// Points the gateway's `(host, 443)` at this server.
    pub fn resolve(&self, cfg: &mut Config) {
        cfg.proxy
            .resolve
            .insert((self.host.clone(), 443), vec![self.addr]);
    }

    /// The addon started with `opts`, registered, and a gateway in front of it (its
    /// configuration changed by `configure` first), once listing widgets through the gateway
    /// answers 200.
    pub async fn behind_gateway(
        world: &World,
        opts: GoOpts,
        configure: impl FnOnce(&mut Config),
    ) -> (GoAddon, Gateway) {
        let addon = GoAddon::start(world, opts).await;
        addon.register(world);
        let mut cfg = world.config(&[]);
        addon.resolve(&mut cfg);
        configure(&mut cfg);
        let gw = world.gateway(cfg).await;
        let alice = world.client(Some("alice"));
        let available = super::eventually(20, || {
            let alice = alice.clone();
            async move {
                let widgets = "/apis/interop.example.com/v1/namespaces/default/widgets";
                alice.get(gw.addr, widgets).await.status == 200
            }
        })
        .await;
        assert!(
            available,
            "the Go addon never became available through the gateway"
        );
        (addon, gw)
    }

    /// SIGTERM, then waits for the graceful shutdown (open watches end, exec sessions close).
    pub async fn stop(&mut self) -> ExitStatus {
        self.signal(rustix::process::Signal::TERM).await
    }

    /// SIGKILL: the server vanishes mid-whatever.
    pub async fn kill(&mut self) -> ExitStatus {
        self.signal(rustix::process::Signal::KILL).await
    }

    async fn signal(&mut self, signal: rustix::process::Signal) -> ExitStatus {
        let mut child = self
            .child
            .take()
            .expect("the Go addon server is not running");
        let pid = rustix::process::Pid::from_child(&child);
        let _ = rustix::process::kill_process(pid, signal);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if tokio::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the Go addon server did not exit within 30 s of {signal:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the server (if running) and starts it again on the same address with the same
    /// certificate; its widgets are gone.
    pub async fn restart(&mut self) {
        if self.child.is_some() {
            self.stop().await;
        }
        self.spawn().await;
    }

    /// `GET /debug/stats` (connection, request, watch and exec counters).
    pub async fn stats(&self) -> serde_json::Value {
        let req = Request::get("/debug/stats").body(Bytes::new()).unwrap();
        let answer = self.exchange(req, false).await.unwrap();
        assert_eq!(answer.status, 200, "{:?}", answer.body);
        answer.json()
    }

    /// One HTTP/1.1 request straight to the server (not through a gateway), presenting the
    /// front-proxy client certificate; the caller sets `X-Remote-User` and friends.
    pub async fn direct(&self, req: Request<Bytes>) -> Answer {
        self.exchange(req, true).await.unwrap()
    }

    async fn exchange(
        &self,
        req: Request<Bytes>,
        with_cert: bool,
    ) -> Result<Answer, Box<dyn std::error::Error + Send + Sync>> {
        tokio::time::timeout(ANSWER_WITHIN, self.exchange_now(req, with_cert))
            .await
            .map_err(|_| format!("no answer from {} within {ANSWER_WITHIN:?}", self.addr))?
    }

    async fn exchange_now(
        &self,
        req: Request<Bytes>,
        with_cert: bool,
    ) -> Result<Answer, Box<dyn std::error::Error + Send + Sync>> {
        let roots =
            apigw_core::tls::root_store(&apigw_core::tls::load_certs(&self.ca)?, "addon-ca")?;
        let builder = rustls::ClientConfig::builder_with_provider(apigw_core::tls::provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let tls = if with_cert {
            let (crt, key) = &self.proxy_cert;
            builder.with_client_auth_cert(
                apigw_core::tls::load_certs(crt)?,
                apigw_core::tls::load_key(key)?,
            )?
        } else {
            builder.with_no_client_auth()
        };
        let tcp = tokio::net::TcpStream::connect(self.addr).await?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(tls))
            .connect(ServerName::try_from(self.host.clone())?, tcp)
            .await?;
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        let (mut parts, body) = req.into_parts();
        parts.headers.insert(
            "host",
            format!("{}:{}", self.host, self.addr.port()).parse()?,
        );
        let res = send
            .send_request(Request::from_parts(parts, http_body_util::Full::new(body)))
            .await?;
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = res.into_body().collect().await?.to_bytes();
        Ok(Answer {
            status,
            headers,
            body,
        })
    }
}

impl Drop for GoAddon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            eprintln!(
                "--- Go addon server {} stderr ({}), last lines:\n{tail}",
                self.addr,
                self.log.display()
            );
        }
    }
}

/// Builds the server into `<target>/interop/goaddon` unless it is newer than every source.
fn build() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = manifest.join("tests/interop/goaddon");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("target"));
    let dir = target.join("interop");
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("goaddon");
    let newest_source = std::fs::read_dir(&src)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.ends_with(".go") || name == "go.mod"
        })
        .filter_map(|e| e.metadata().and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
    if built.is_some_and(|b| b >= newest_source) {
        return bin;
    }
    // A private temporary name, then a rename: parallel test processes never see half a binary.
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let tmp = dir.join(format!(".goaddon.{}.{nanos}.tmp", std::process::id()));
    let mut go = Command::new("go");
    go.arg("build")
        .arg("-o")
        .arg(&tmp)
        .arg(".")
        .current_dir(&src)
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off");
    if std::env::var_os("GOCACHE").is_none() && std::env::var_os("HOME").is_none() {
        go.env("GOCACHE", dir.join("go-build-cache"));
    }
    let out = match go.output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "the interop tests need Go to build tests/interop/goaddon, and `go` is not on PATH: \
             install Debian's golang-go (apt-get install golang-go)"
        ),
        Err(e) => panic!("running `go build` for tests/interop/goaddon: {e}"),
    };
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        panic!(
            "`go build` of tests/interop/goaddon failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::rename(&tmp, &bin).unwrap();
    bin
}
