//! The apigw binary run as a user runs it; the runner itself (limits, pipes, the refusal
//! checks) is the `apigw-testrun` crate, which `apigw-bench`'s tests share.

pub use apigw_testrun::{refused, run_program, text, wait_for};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::{eventually, World};
use bytes::Bytes;

/// Runs apigw with `args` (in `dir` when given), as [`run_program`] does.
pub fn run(dir: Option<&Path>, args: &[&str]) -> Output {
    run_program(Path::new(env!("CARGO_BIN_EXE_apigw")), dir, args)
}

/// A process the test started, killed when the test ends however it ends.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port free a moment ago.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("a bound port").port()
}

/// `apigw serve`'s arguments for `w`'s certificates and APIService directory, with
/// `a-svc.a-ns.svc` (the backend of [`World::with_a`]) resolved to `backend`, listening on
/// 127.0.0.1:`port`.
pub fn serve_args(w: &World, backend: SocketAddr, port: u16) -> Vec<String> {
    let p = |n: &str| w.pki.path(n).display().to_string();
    [
        "serve",
        "--bind-address",
        "127.0.0.1",
        "--secure-port",
        &port.to_string(),
        "--tls-cert-file",
        &p("serving.crt"),
        "--tls-private-key-file",
        &p("serving.key"),
        "--client-ca-file",
        &p("client-ca.crt"),
        "--proxy-client-cert-file",
        &p("proxy-client.crt"),
        "--proxy-client-key-file",
        &p("proxy-client.key"),
        "--apiservice-dir",
        &p("apiservices"),
        "--resolve",
        &format!("a-svc.a-ns.svc:443={backend}"),
    ]
    .map(String::from)
    .to_vec()
}

/// Starts `command`, an `apigw serve` of [`serve_args`] on `port`, with `RUST_LOG=warn` and its
/// standard error in `w`'s `apigw.log`, and waits up to 20 s for `/readyz`; panics with the
/// log when it is not ready by then. The process, its address and the log's path.
pub async fn serving(w: &World, mut command: Command, port: u16) -> (Killed, SocketAddr, PathBuf) {
    let log = w.pki.path("apigw.log");
    let child = command
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("the log file"))
        .spawn()
        .expect("apigw starts");
    let child = Killed(child);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let anonymous = w.client(None);
    let up = eventually(20, || async {
        let probe = http::Request::get("/readyz").body(Bytes::new());
        anonymous
            .try_send(addr, probe.expect("a request"))
            .await
            .is_ok_and(|a| a.status == 200)
    })
    .await;
    assert!(up, "{}", std::fs::read_to_string(&log).unwrap_or_default());
    (child, addr, log)
}
