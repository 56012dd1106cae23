//! Overload (issue 34, item 3), against the release-like binary with an open-file limit of 256:
//! ten times the connections that limit allows, held open, and ten times the in-flight limit
//! in slow requests, at once. Probes of `/healthz` and `/readyz` on new connections still
//! answer, every refused request is a 429 `kind: Status` (or its connection is closed before any
//! answer), nothing panics, and once the load stops requests are served at full speed again.

use crate::support::binary;
use crate::support::{eventually, World};
use bytes::Bytes;
use http::Request;
use rustls::pki_types::ServerName;
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FDS: usize = 256;
const IN_FLIGHT: usize = 10;
const SLOW: &str = "/apis/a.example.com/v1/namespaces/n/things/slow";
const FAST: &str = "/apis/a.example.com/v1/namespaces/n/things/x";
const LOAD: Duration = Duration::from_secs(8);

/// `rounds` requests one after another, each on a new connection: how long they took.
async fn paced(w: &World, addr: std::net::SocketAddr, rounds: usize) -> Duration {
    let alice = w.client(Some("alice"));
    let started = Instant::now();
    for _ in 0..rounds {
        assert_eq!(alice.get(addr, FAST).await.status, 200);
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_times_the_fds_and_the_in_flight_limit() {
    apigw_core::server::raise_fd_limit();
    let (w, echo) = World::with_a().await;
    let port = binary::free_port();
    // `ulimit -n` sets the hard limit too, so apigw cannot raise it.
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!("ulimit -n {FDS} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_apigw"))
        .args(binary::serve_args(&w, echo.addr, port))
        .args(["--max-requests-inflight", &IN_FLIGHT.to_string()])
        .arg("--enable-priority-and-fairness=false");
    let (mut child, addr, log) = binary::serving(&w, command, port).await;
    let anonymous = w.client(None);
    let before = paced(&w, addr, 30).await;

    let stop = Arc::new(AtomicBool::new(false));
    let mut load = tokio::task::JoinSet::new();
    let mut flood = tokio::task::JoinSet::new();
    // Ten times the open-file limit in connections, held: half raw TCP, half past the TLS
    // handshake as alice, all idle.
    let held = Arc::new(Mutex::new(Vec::new()));
    let closed_early = Arc::new(Mutex::new(0usize));
    for i in 0..FDS * 10 {
        let (held, alice) = (held.clone(), w.client(Some("alice")).tls(&[b"http/1.1"]));
        flood.spawn(async move {
            let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
                return;
            };
            if i % 2 == 0 {
                held.lock()
                    .unwrap()
                    .push(Box::new(tcp) as Box<dyn std::any::Any + Send>);
                return;
            }
            let connector = tokio_rustls::TlsConnector::from(alice);
            if let Ok(tls) = connector
                .connect(ServerName::try_from("localhost").unwrap(), tcp)
                .await
            {
                held.lock().unwrap().push(Box::new(tls));
            }
        });
    }
    // Ten times the in-flight limit in slow requests (1.5 s at the backend), each on a new
    // connection, until the load stops; a refused one is sent again after its Retry-After.
    let outcomes = Arc::new(Mutex::new(BTreeMap::<String, usize>::new()));
    for _ in 0..IN_FLIGHT * 10 {
        let (stop, outcomes, alice) = (stop.clone(), outcomes.clone(), w.client(Some("alice")));
        let closed_early = closed_early.clone();
        load.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let req = Request::get(SLOW).body(Bytes::new()).unwrap();
                let outcome = match alice.try_send(addr, req).await {
                    Ok(a) if a.status == 200 => "200".to_string(),
                    Ok(a) => {
                        let st = a.assert_status(a.status);
                        // As client-go does: wait what Retry-After says.
                        let wait = a
                            .headers
                            .get("retry-after")
                            .and_then(|v| v.to_str().ok()?.parse().ok());
                        tokio::time::sleep(Duration::from_secs(wait.unwrap_or(1))).await;
                        let reason = st["reason"].as_str().unwrap_or_default();
                        match a.status {
                            429 => format!("429 {reason}"),
                            code => format!("{code} {reason}: {}", st["message"]),
                        }
                    }
                    Err(_) => {
                        *closed_early.lock().unwrap() += 1;
                        "closed before an answer".to_string()
                    }
                };
                *outcomes.lock().unwrap().entry(outcome).or_default() += 1;
            }
        });
    }
    // Probes as a kubelet sends them: a new connection each, no client certificate, once the
    // flood is in (while it comes, the kernel's accept queue overflows and drops SYNs, which a
    // client sends again after a second, whatever the server does).
    let started = Instant::now();
    while flood.join_next().await.is_some() {}
    let flooded = started.elapsed();
    let mut probes = Vec::new();
    let started = Instant::now();
    while started.elapsed() < LOAD {
        for path in ["/healthz", "/readyz"] {
            let t = Instant::now();
            let answer = anonymous
                .try_send(addr, Request::get(path).body(Bytes::new()).unwrap())
                .await;
            probes.push((
                path,
                answer.map(|a| a.status).ok(),
                t.elapsed(),
                started.elapsed(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let holding = held.lock().unwrap().len();
    stop.store(true, Ordering::Relaxed);
    held.lock().unwrap().clear();
    let stopped = Instant::now();
    while load.join_next().await.is_some() {}
    let drained = stopped.elapsed();

    let outcomes = outcomes.lock().unwrap().clone();
    eprintln!("held {holding} connections (all in after {flooded:?}); slow requests: {outcomes:?}");
    let mut took: Vec<Duration> = probes.iter().map(|p| p.2).collect();
    took.sort();
    eprintln!(
        "{} probes: median {:?}, max {:?}",
        probes.len(),
        took[took.len() / 2],
        took[took.len() - 1]
    );
    for (path, status, t, at) in &probes {
        assert_eq!(*status, Some(200), "{path} after {t:?}");
        assert!(
            *t < Duration::from_millis(500),
            "{path} took {t:?} at {at:?}: {probes:?}"
        );
    }
    assert!(
        took[took.len() / 2] < Duration::from_millis(100),
        "median probe {:?}",
        took[took.len() / 2]
    );
    assert!(outcomes.get("200").is_some_and(|n| *n > 0), "{outcomes:?}");
    assert!(
        outcomes.get("429 TooManyRequests").is_some_and(|n| *n > 0),
        "{outcomes:?}"
    );
    for outcome in outcomes.keys() {
        assert!(
            ["200", "429 TooManyRequests", "closed before an answer"].contains(&outcome.as_str())
                || outcome.starts_with("503 ServiceUnavailable"),
            "{outcomes:?}"
        );
    }

    // Within 5 s of the load stopping (the slow requests still running count in that time),
    // requests succeed, and as fast as before the load.
    let recovered = eventually(5, || async {
        w.client(Some("alice"))
            .try_send(addr, Request::get(FAST).body(Bytes::new()).unwrap())
            .await
            .is_ok_and(|a| a.status == 200)
    })
    .await;
    assert!(recovered, "no 200 within 5 s of the load stopping");
    let after = paced(&w, addr, 30).await;
    eprintln!(
        "30 requests: {before:?} before, {after:?} after ({:?} after the load stopped, {drained:?} to drain the clients)",
        stopped.elapsed()
    );
    assert!(after < before * 3, "{after:?} against {before:?} before");

    assert!(child.0.try_wait().unwrap().is_none(), "apigw exited");
    drop(child);
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!stderr.contains("panicked"), "{stderr}");
    let warned: Vec<&str> = stderr.lines().take(5).collect();
    eprintln!("apigw's first warnings: {warned:#?}");
}
