//! `small-get-nginx-backend`: the small GETs of `small-get`, `small-get-c1`, `small-get-h2` and
//! `small-get-h2-c1`, with nginx instead of the sample server as the addon backend behind every
//! proxy, so that the figures do not rest on a backend written here. Its rows are named
//! `small-get-nginx-backend` (HTTP/1.1 at the configured concurrency), then `-c1`, `-h2` and
//! `-h2-c1` after it. nginx serves the same bytes the sample server serves (the 1 KiB JSON
//! and the `APIResourceList` the gateway's availability check reads, both fetched from the
//! sample server when the scenario starts) as static files over TLS with the sample server's
//! certificate for the service name, offering h2 and HTTP/1.1 by ALPN as the sample server
//! does, with keep-alive. Like an addon built on `k8s.io/apiserver` it requires the proxy's
//! client certificate, verified against the front-proxy CA, with an allowed name
//! (`front-proxy-client`), and an identity in `X-Remote-User`.
//!
//! The scenario starts its own gateways (`apigw`, and `apigw-log` unless `--no-log-target`)
//! and, unless `--no-peers`, its own nginx and haproxy proxies, all pointed at this backend, and stops them all (process groups) when it ends.
//! nginx is this scenario's subject, not a peer: it runs with `--no-peers` too, and a run that
//! selects the scenario fails when nginx is missing and cannot be installed.

use super::env::{wait_ready, Env, Proc, SERVICE_NAME};
use super::load::{Proto, Target};
use super::peers::{self, is_root, nginx_version, Peer};
use super::scenarios::{self, PAYLOAD};
use super::stats::children;
use super::{Row, Settings};
use anyhow::Context as _;
use http::Method;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

/// The scenario's name.
pub const NAME: &str = "small-get-nginx-backend";

/// The group version the APIService serves; nginx answers its `APIResourceList`.
const GROUP_VERSION: &str = "/apis/wardle.example.com/v1alpha1";

/// What the scenario needs from the command line.
pub struct Options {
    /// May `apt-get install nginx` (not `--no-install`, not `--quick`).
    pub may_install: bool,
    /// `--no-peers`: measure direct and apigw only.
    pub no_peers: bool,
    /// Measure `apigw-log` too (not `--no-log-target`).
    pub log_target: bool,
}

/// Runs the scenario: its rows, and notes on what was left out.
pub async fn run(
    s: &Settings,
    env: &Env,
    opts: &Options,
) -> anyhow::Result<(Vec<Row>, Vec<String>)> {
    ensure_nginx(opts.may_install)?;
    let files = env.dir.path().join("nginx-backend-files");
    std::fs::create_dir_all(&files).with_context(|| format!("creating {}", files.display()))?;
    let payload_path = format!("{PAYLOAD}?bytes=1024");
    let sample = env.direct()?;
    let payload = get(&sample, &payload_path).await?;
    let resources = get(&sample, GROUP_VERSION).await?;
    write(&files.join("payload.json"), &payload)?;
    write(&files.join("apiresourcelist.json"), &resources)?;

    let (mut backend_proc, addr) = start(env, &files)?;
    let mut direct = env.direct_to(addr, vec![backend_proc.pid()])?;
    wait_ready(&direct, &payload_path, &mut backend_proc).await?;
    direct.pids.extend(children(backend_proc.pid()));
    let served = get(&direct, &payload_path).await?;
    anyhow::ensure!(
        served == payload,
        "nginx serves {} bytes where the sample server serves {}",
        served.len(),
        payload.len()
    );

    let services = [env.wardle_apiservice()?];
    let (gateway, apigw) = env
        .gateway_to("apigw-nginx-backend", &services, addr)
        .await?;
    let mut gateways = vec![(gateway, apigw)];
    if opts.log_target {
        let logged = env.log_gateway_to("apigw-log-nginx-backend", &services, addr);
        gateways.push(logged.await?);
    }
    for (proc, target) in &mut gateways {
        // Ready is not yet Available: wait until the availability check has passed against
        // nginx and requests reach it.
        wait_ready(target, &payload_path, proc).await?;
    }

    let mut skipped = Vec::new();
    let mut running: Vec<Peer> = Vec::new();
    if opts.no_peers {
        skipped.push(format!(
            "{NAME}: nginx and haproxy as proxies left out (--no-peers)"
        ));
    } else {
        for name in ["nginx", "haproxy"] {
            if !peers::installed(name) {
                skipped.push(format!("{NAME}: {name} as a proxy: not installed"));
                continue;
            }
            let proc_name = format!("{name}-to-nginx-backend");
            let peer = match name {
                "nginx" => peers::nginx_to(env, &proc_name, addr).await,
                _ => peers::haproxy_to(env, &proc_name, addr).await,
            }
            .with_context(|| format!("starting {name} in front of the nginx backend"))?;
            running.push(peer);
        }
    }

    let version = nginx_version().map_or_else(
        || "nginx".to_string(),
        |(a, b, c)| format!("nginx {a}.{b}.{c}"),
    );
    let mut rows = Vec::new();
    for (suffix, proto, c) in scenarios::small_get_variants(s) {
        // The backend offers h2 (`http2` on its listen), as do both peers.
        let mut targets = vec![direct.clone()];
        targets.extend(gateways.iter().map(|(_, t)| t.clone()));
        targets.extend(
            running
                .iter()
                .filter(|p| p.speaks(proto))
                .map(|p| p.target.clone()),
        );
        let before: Vec<u64> = targets.iter().map(Target::rss_kib).collect();
        let name = format!("{NAME}{suffix}");
        let mut new_rows = scenarios::small_get(s, &targets, &name, proto, c).await;
        for (row, kib) in new_rows.iter_mut().zip(before) {
            row.rss_before_kib = kib;
            row.note = Some(format!("backend: {version}"));
        }
        rows.extend(new_rows);
    }
    let procs = std::iter::once((&mut backend_proc, "the nginx backend"))
        .chain(gateways.iter_mut().map(|(p, _)| (p, "its gateway")));
    for (proc, what) in procs {
        if let Some(status) = proc.exited() {
            anyhow::bail!(
                "{what} exited during the scenario ({status}); see {}.log",
                proc.name
            );
        }
    }
    for peer in &mut running {
        if let Some(status) = peer.proc.exited() {
            anyhow::bail!("{} exited during the scenario ({status})", peer.proc.name);
        }
    }
    // Dropping the processes here kills their groups: nothing outlives the scenario.
    drop((running, gateways, backend_proc));
    Ok((rows, skipped))
}

/// nginx on the PATH, installed with apt-get when allowed; an error naming the way out if not.
fn ensure_nginx(may_install: bool) -> anyhow::Result<()> {
    if peers::installed("nginx") {
        return Ok(());
    }
    if may_install {
        peers::install(&["nginx"])?;
        if peers::installed("nginx") {
            return Ok(());
        }
    }
    anyhow::bail!(
        "nginx, its backend, is not installed{}: apt-get install -y nginx, or leave {NAME} \
         out of --scenarios",
        if may_install {
            ""
        } else {
            " (not installing it with --no-install or --quick)"
        }
    )
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// One GET of `path` on `target` over HTTP/1.1; the body of a 2xx answer.
async fn get(target: &Target, path: &str) -> anyhow::Result<Vec<u8>> {
    let job = super::load::Job {
        method: Method::GET,
        path: path.into(),
        accept: None,
        body: bytes::Bytes::new(),
        proto: Proto::H1,
        concurrency: 1,
        warmup: std::time::Duration::ZERO,
        window: std::time::Duration::ZERO,
    };
    scenarios::fetch(target, &job)
        .await
        .with_context(|| format!("GET {path} from {} ({})", target.name, target.addr))
}

/// Starts nginx serving `files` as the addon backend; returns it and its address.
fn start(env: &Env, files: &Path) -> anyhow::Result<(Proc, SocketAddr)> {
    let dir = env.dir.path();
    let port = super::env::free_port()?;
    let modern_h2 = nginx_version().is_some_and(|v| v >= (1, 25, 1));
    let (listen_h2, h2_directive) = if modern_h2 {
        ("", "http2 on;")
    } else {
        (" http2", "")
    };
    let d = dir.display();
    let f = files.display();
    let p = |file: &str| env.pki(file).display().to_string();
    let status = |code: u16, reason: &str, message: &str| {
        format!(
            r#"'{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"{message}","reason":"{reason}","code":{code}}}'"#
        )
    };
    let conf = format!(
        r#"{user}
worker_processes auto;
pid {d}/nginx-backend.pid;
error_log {d}/nginx-backend-error.log warn;
daemon off;
events {{ worker_connections 8000; }}
http {{
  access_log off;
  client_body_temp_path {d}/nginx-backend-body;
  proxy_temp_path {d}/nginx-backend-proxy;
  fastcgi_temp_path {d}/nginx-backend-fastcgi;
  uwsgi_temp_path {d}/nginx-backend-uwsgi;
  scgi_temp_path {d}/nginx-backend-scgi;
  types {{ }}
  default_type application/json;
  etag off;
  open_file_cache max=16 inactive=600s;
  open_file_cache_valid 600s;
  # The requestheader authenticator's allowed names.
  map $ssl_client_s_dn $front_proxy_allowed {{
    default 0;
    "~(^|,)CN=front-proxy-client(,|$)" 1;
  }}
  server {{
    listen 127.0.0.1:{port} ssl{listen_h2};
    {h2_directive}
    server_name {SERVICE_NAME};
    ssl_certificate {serving_crt};
    ssl_certificate_key {serving_key};
    ssl_client_certificate {front_proxy_ca};
    ssl_verify_client on;
    ssl_session_cache shared:BACKEND:10m;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    if ($front_proxy_allowed = 0) {{
      return 403 {forbidden};
    }}
    if ($http_x_remote_user = "") {{
      return 401 {unauthorized};
    }}
    location = /healthz {{
      default_type text/plain;
      return 200 ok;
    }}
    location = {PAYLOAD} {{
      alias {f}/payload.json;
    }}
    location = {GROUP_VERSION} {{
      alias {f}/apiresourcelist.json;
    }}
    location / {{
      return 404 {not_found};
    }}
  }}
}}
"#,
        user = if is_root() { "user root;" } else { "" },
        serving_crt = p("wardle.crt"),
        serving_key = p("wardle.key"),
        front_proxy_ca = p("front-proxy-ca.crt"),
        forbidden = status(
            403,
            "Forbidden",
            "client certificate not in the allowed names"
        ),
        unauthorized = status(401, "Unauthorized", "no X-Remote-User"),
        not_found = status(
            404,
            "NotFound",
            "the server could not find the requested resource"
        ),
    );
    let conf_path = dir.join("nginx-backend.conf");
    write(&conf_path, conf.as_bytes())?;
    let mut cmd = Command::new("nginx");
    cmd.arg("-p").arg(dir).arg("-c").arg(&conf_path);
    cmd.arg("-e").arg(dir.join("nginx-backend-error.log"));
    let proc = Proc::spawn("nginx-backend", cmd, dir)?;
    Ok((proc, SocketAddr::from(([127, 0, 0, 1], port))))
}
