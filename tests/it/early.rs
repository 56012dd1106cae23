//! Early answers: a response that is complete while the client is still uploading its request
//! body reaches the client, over HTTP/1.1 and HTTP/2, whether a backend answered it (the Go
//! addon's `refuse`, a 413 before it reads a byte) or the gateway itself (401 without
//! credentials, 413 past `--max-request-body-bytes`). The clients are real: curl, which reads
//! while it uploads (told not to wait for `100 Continue`, so it uploads at once, as most clients
//! do), and Python's `http.client`, which writes the whole body before it reads anything. See
//! `apigw_core::server::linger` for what the gateway does.

use crate::support;

use crate::support::goaddon::{GoAddon, GoOpts};
use crate::support::tool::{run, Ran};
use crate::support::World;
use std::path::{Path, PathBuf};

/// The Go addon's early 413 (`tests/interop/goaddon`, `/refuse`).
const REFUSE: &str = "/apis/interop.example.com/v1/refuse";
/// What curl uploads: far more than any socket buffer holds, so the upload is still going when
/// the answer comes.
const CURL_UPLOAD: usize = 40 << 20;
/// What Python uploads: more than the socket buffers hold, within what the gateway reads and
/// discards after an early answer on HTTP/1.1 (Python reads nothing before it has written all).
const PYTHON_UPLOAD: usize = 16 << 20;
/// How many times each client uploads: an early answer lost is a race, so one try proves little.
const TRIES: usize = 3;

/// A file of `len` bytes in the world's directory.
fn upload(world: &World, len: usize) -> PathBuf {
    let path = world.pki.path(&format!("upload-{len}.json"));
    std::fs::write(&path, vec![b' '; len]).expect("write the upload");
    path
}

/// How curl speaks to the gateway.
#[derive(Clone, Copy, Debug)]
enum Proto {
    H1,
    H2,
}

/// `curl -X POST --data-binary @file` as `cert` (None: no credentials), off the runtime.
async fn curl(world: &World, proto: Proto, cert: Option<&str>, url: String, file: &Path) -> Ran {
    let p = |n: &str| world.pki.path(n).display().to_string();
    let mut args = vec![
        "-sS".to_string(),
        match proto {
            Proto::H1 => "--http1.1",
            Proto::H2 => "--http2",
        }
        .to_string(),
        "--cacert".into(),
        p("ca.crt"),
        "-H".into(),
        "Content-Type: application/json".into(),
        // Upload at once, without waiting for `100 Continue`.
        "-H".into(),
        "Expect:".into(),
        "--data-binary".into(),
        format!("@{}", file.display()),
        "-w".into(),
        "\n%{http_code} %{http_version}".into(),
        url,
    ];
    if let Some(cert) = cert {
        args.extend(["--cert".into(), p(&format!("{cert}.crt"))]);
        args.extend(["--key".into(), p(&format!("{cert}.key"))]);
    }
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(Path::new("curl"), &args, None)
    })
    .await
    .expect("curl's thread")
}

/// Asserts curl succeeded, over `proto`, with a `kind: Status` of `code`.
fn assert_curl_got(ran: &Ran, proto: Proto, code: u16) {
    let out = ran.ok();
    let (body, tail) = out
        .rsplit_once('\n')
        .unwrap_or_else(|| panic!("no -w line: {out}"));
    let version = match proto {
        Proto::H1 => "1.1",
        Proto::H2 => "2",
    };
    assert_eq!(tail, format!("{code} {version}"), "{}", ran.text());
    assert_status(body, code);
}

/// Asserts `body` is a `kind: Status` of `code`.
fn assert_status(body: &str, code: u16) {
    let status: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["code"], code, "{status}");
}

/// Python's `http.client`: POSTs all of `file`, then reads the answer; prints its status line
/// and body, or the exception that ended it.
const PYTHON_POST: &str = r#"
import http.client, os, ssl, sys
port, path, ca, cert, file = sys.argv[1:]
ctx = ssl.create_default_context(cafile=ca)
if cert:
    ctx.load_cert_chain(cert + ".crt", cert + ".key")
conn = http.client.HTTPSConnection("127.0.0.1", int(port), context=ctx)
try:
    with open(file, "rb") as body:
        conn.request("POST", path, body=body, headers={
            "Content-Type": "application/json",
            "Content-Length": str(os.path.getsize(file)),
        })
    res = conn.getresponse()
    print(res.status)
    print(res.read().decode())
except Exception as e:
    print("failed:", repr(e))
"#;

/// [`PYTHON_POST`] to `path` as `cert` (None: no credentials); asserts a `kind: Status` of
/// `code` came back.
async fn python_gets(world: &World, port: u16, path: &str, cert: Option<&str>, code: u16) {
    let file = upload(world, PYTHON_UPLOAD);
    let cert = cert.map_or(String::new(), |c| world.pki.path(c).display().to_string());
    let args = [
        "-c".to_string(),
        PYTHON_POST.into(),
        port.to_string(),
        path.into(),
        world.pki.path("ca.crt").display().to_string(),
        cert,
        file.display().to_string(),
    ];
    let ran = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(Path::new("python3"), &args, None)
    })
    .await
    .expect("python3's thread");
    let out = ran.ok();
    let (status, body) = out
        .split_once('\n')
        .unwrap_or_else(|| panic!("{}", ran.text()));
    assert_eq!(status, code.to_string(), "{}", ran.text());
    assert_status(body.trim_end(), code);
}

/// The Go addon behind a gateway (configured by `tweak`) that has found it available.
async fn go_stack(
    tweak: impl FnOnce(&mut apigw_gateway::config::Config),
) -> (World, GoAddon, support::Gateway) {
    let world = World::new();
    let (addon, gw) = GoAddon::behind_gateway(&world, GoOpts::default(), tweak).await;
    (world, addon, gw)
}

#[tokio::test(flavor = "multi_thread")]
async fn early_413_from_a_go_backend_reaches_curl_over_both_protocols() {
    let (world, _addon, gw) = go_stack(|_| {}).await;
    let file = upload(&world, CURL_UPLOAD);
    let url = format!("https://127.0.0.1:{}{REFUSE}", gw.addr.port());
    for proto in [Proto::H1, Proto::H2] {
        for _ in 0..TRIES {
            let ran = curl(&world, proto, Some("alice"), url.clone(), &file).await;
            assert_curl_got(&ran, proto, 413);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn early_413_from_a_go_backend_reaches_python() {
    let (world, _addon, gw) = go_stack(|_| {}).await;
    for _ in 0..TRIES {
        python_gets(&world, gw.addr.port(), REFUSE, Some("alice"), 413).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn early_401_from_the_gateway_reaches_curl_and_python() {
    let world = World::new();
    let gw = world.gateway(world.config(&[])).await;
    let file = upload(&world, CURL_UPLOAD);
    let path = "/apis/a.example.com/v1/namespaces/x/things";
    let url = format!("https://127.0.0.1:{}{path}", gw.addr.port());
    for proto in [Proto::H1, Proto::H2] {
        for _ in 0..TRIES {
            let ran = curl(&world, proto, None, url.clone(), &file).await;
            assert_curl_got(&ran, proto, 401);
        }
    }
    for _ in 0..TRIES {
        python_gets(&world, gw.addr.port(), path, None, 401).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn early_413_past_the_gateways_body_limit_reaches_curl() {
    let (world, _addon, gw) =
        go_stack(|cfg| cfg.limits.max_request_body_bytes = Some(1 << 20)).await;
    let file = upload(&world, CURL_UPLOAD);
    // Any widget path: the gateway refuses by Content-Length before it picks an endpoint.
    let url = format!(
        "https://127.0.0.1:{}/apis/interop.example.com/v1/namespaces/default/widgets",
        gw.addr.port()
    );
    for proto in [Proto::H1, Proto::H2] {
        for _ in 0..TRIES {
            let ran = curl(&world, proto, Some("alice"), url.clone(), &file).await;
            assert_curl_got(&ran, proto, 413);
        }
    }
}
