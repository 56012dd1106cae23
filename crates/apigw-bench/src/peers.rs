//! The baselines: nginx and haproxy configured as the same mTLS reverse proxy as the gateway.
//! Each verifies the user's client certificate against the client CA, strips client-sent
//! identity headers, sets `X-Remote-User` from the certificate's CN, and re-encrypts to the
//! sample server with the proxy client certificate, verifying the backend certificate against
//! the addon CA for the service name, over a keep-alive upstream pool. No access logs (the
//! `apigw` target runs with `RUST_LOG=warn` so neither side logs per request; `apigw-log`
//! shows what apigw's own log costs). nginx also serves the
//! saved discovery documents as static files, the floor for `/apis`.

use super::env::{free_port, wait_ready, Env, Proc, SERVICE_NAME};
use super::load::{Proto, Target};
use super::stats;
use anyhow::Context as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

/// Where the static copies of the discovery documents live, relative to the bench directory.
pub const STATIC_DIR: &str = "static";

/// A running baseline proxy.
pub struct Peer {
    pub proc: Proc,
    pub target: Target,
    /// nginx `http2 on` / `listen ... http2`, haproxy `alpn h2`.
    pub h2: bool,
}

impl Peer {
    /// Whether clients can reach the peer over `proto` (every peer speaks HTTP/1.1).
    pub fn speaks(&self, proto: Proto) -> bool {
        self.h2 || proto == Proto::H1
    }
}

/// True when `program` is on the PATH.
pub fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs `packages` (nginx, haproxy) with apt-get (the harness's only side effect outside
/// its temporary directory).
pub fn install(packages: &[&str]) -> anyhow::Result<()> {
    let command = format!("apt-get install -y {}", packages.join(" "));
    eprintln!("apigw-bench: {command}");
    let status = Command::new("apt-get")
        .args(["install", "-y"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .with_context(|| format!("running {command}"))?;
    anyhow::ensure!(status.success(), "{command}: {status}");
    Ok(())
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// `(major, minor, patch)` of the installed nginx.
pub fn nginx_version() -> Option<(u32, u32, u32)> {
    let out = Command::new("nginx").arg("-v").output().ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    let v = text.split("nginx/").nth(1)?.split_whitespace().next()?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// True when this process runs as root (nginx then needs `user root` to read its temp paths).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1).map(|euid| euid == "0"))
            .unwrap_or(false)
    })
}

/// Starts nginx in the foreground with a generated configuration, in front of the sample
/// server.
pub async fn nginx(env: &Env) -> anyhow::Result<Peer> {
    nginx_to(env, "nginx", env.sample_addr).await
}

/// Starts nginx as the reverse proxy in front of `backend` (which serves the sample server's
/// certificate). `name` names its process, configuration, logs and temporary paths.
pub async fn nginx_to(env: &Env, name: &str, backend: SocketAddr) -> anyhow::Result<Peer> {
    let dir = env.dir.path();
    let port = free_port()?;
    let modern_h2 = nginx_version().is_some_and(|v| v >= (1, 25, 1));
    let (listen_h2, h2_directive) = if modern_h2 {
        ("", "http2 on;")
    } else {
        (" http2", "")
    };
    let d = dir.display();
    let p = |f: &str| env.pki(f).display().to_string();
    let conf = format!(
        r#"{user}
worker_processes 2;
pid {d}/{name}.pid;
error_log {d}/{name}-error.log warn;
daemon off;
events {{ worker_connections 8000; }}
http {{
  access_log off;
  client_body_temp_path {d}/{name}-body;
  proxy_temp_path {d}/{name}-proxy;
  fastcgi_temp_path {d}/{name}-fastcgi;
  uwsgi_temp_path {d}/{name}-uwsgi;
  scgi_temp_path {d}/{name}-scgi;
  map $ssl_client_s_dn $client_cn {{
    default "";
    "~(^|,)CN=(?<cn>[^,]+)" $cn;
  }}
  upstream wardle {{
    server {backend};
    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{port} ssl{listen_h2};
    {h2_directive}
    ssl_certificate {serving_crt};
    ssl_certificate_key {serving_key};
    ssl_client_certificate {client_ca};
    ssl_verify_client on;
    ssl_session_cache shared:SSL:10m;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    client_max_body_size 4m;
    client_body_buffer_size 4m;
    location /{static_dir}/ {{
      root {d};
      default_type application/json;
    }}
    location / {{
      proxy_pass https://wardle;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header Authorization "";
      proxy_set_header X-Remote-Group "";
      proxy_set_header X-Remote-User $client_cn;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto https;
      proxy_request_buffering off;
      proxy_buffering off;
      proxy_read_timeout 600s;
      proxy_ssl_certificate {proxy_crt};
      proxy_ssl_certificate_key {proxy_key};
      proxy_ssl_trusted_certificate {addon_ca};
      proxy_ssl_verify on;
      proxy_ssl_name {SERVICE_NAME};
      proxy_ssl_server_name on;
      proxy_ssl_session_reuse on;
    }}
  }}
}}
"#,
        user = if is_root() { "user root;" } else { "" },
        serving_crt = p("serving.crt"),
        serving_key = p("serving.key"),
        client_ca = p("client-ca.crt"),
        proxy_crt = p("proxy-client.crt"),
        proxy_key = p("proxy-client.key"),
        addon_ca = p("addon-ca.crt"),
        static_dir = STATIC_DIR,
    );
    let conf_path = dir.join(format!("{name}.conf"));
    write(&conf_path, &conf)?;
    std::fs::create_dir_all(dir.join(STATIC_DIR)).context("creating the static directory")?;
    let mut cmd = Command::new("nginx");
    cmd.arg("-p").arg(dir).arg("-c").arg(&conf_path);
    cmd.arg("-e").arg(dir.join(format!("{name}-error.log")));
    let mut proc = Proc::spawn(name, cmd, dir)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut target = env.front_target("nginx", addr, vec![proc.pid()]);
    wait_ready(&target, "/healthz", &mut proc).await?;
    target.pids.extend(stats::children(proc.pid()));
    Ok(Peer {
        proc,
        target,
        h2: true,
    })
}

/// Starts haproxy in the foreground with a generated configuration, in front of the sample
/// server.
pub async fn haproxy(env: &Env) -> anyhow::Result<Peer> {
    haproxy_to(env, "haproxy", env.sample_addr).await
}

/// Starts haproxy as the reverse proxy in front of `backend`; `name` as for [`nginx_to`].
pub async fn haproxy_to(env: &Env, name: &str, backend: SocketAddr) -> anyhow::Result<Peer> {
    let dir = env.dir.path();
    let port = free_port()?;
    let pem = |name: &str| -> anyhow::Result<String> {
        let path = dir.join(format!("{name}.pem"));
        let mut bytes = std::fs::read(env.pki(&format!("{name}.crt")))
            .with_context(|| format!("reading {name}.crt"))?;
        bytes.extend(
            std::fs::read(env.pki(&format!("{name}.key")))
                .with_context(|| format!("reading {name}.key"))?,
        );
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        Ok(path.display().to_string())
    };
    let conf = format!(
        r#"global
  maxconn 8000
  tune.ssl.cachesize 20000
defaults
  mode http
  timeout connect 5s
  timeout client 600s
  timeout server 600s
  timeout http-keep-alive 60s
  http-reuse always
frontend front
  bind 127.0.0.1:{port} ssl crt {serving} ca-file {client_ca} verify required alpn h2,http/1.1
  http-request del-header Authorization
  http-request del-header X-Remote-Group
  http-request set-header X-Remote-User %[ssl_c_s_dn(cn)]
  option forwardfor
  http-request set-header X-Forwarded-Proto https
  default_backend wardle
backend wardle
  server sample {backend} ssl verify required ca-file {addon_ca} verifyhost {SERVICE_NAME} sni str({SERVICE_NAME}) crt {proxy} alpn http/1.1 pool-max-conn 64
"#,
        serving = pem("serving")?,
        proxy = pem("proxy-client")?,
        client_ca = env.pki("client-ca.crt").display(),
        addon_ca = env.pki("addon-ca.crt").display(),
    );
    let conf_path = dir.join(format!("{name}.cfg"));
    write(&conf_path, &conf)?;
    let mut cmd = Command::new("haproxy");
    cmd.arg("-db").arg("-f").arg(&conf_path);
    let mut proc = Proc::spawn(name, cmd, dir)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let target = env.front_target("haproxy", addr, vec![proc.pid()]);
    wait_ready(&target, "/healthz", &mut proc).await?;
    Ok(Peer {
        proc,
        target,
        h2: true,
    })
}
