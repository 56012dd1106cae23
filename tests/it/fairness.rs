//! Fairness inside one APIService's share (issue 48), through the binary with one backend that
//! answers after 200 ms: alone on its priority level, a busy APIService's requests past its
//! share but below the level's seats never wait; and with a noisy user holding far more
//! requests in flight than the level has seats, a quiet user sending one request at a time to
//! the same backend is served next, not after the noisy user's backlog.
//!
//! apigw runs with its defaults but a quarter of the seats (`--max-requests-inflight 100`,
//! `--max-mutating-requests-inflight 50`), so that `global-default` stays under 100 seats even
//! after borrowing every idle level's, and 300 requests in flight overflow it.
//!
//! What is asserted is an order, not a time: how many of the noisy user's requests finish
//! while one quiet request is in flight. Served next, about one level's worth (the requests
//! already running finish meanwhile); first come first served, the whole backlog ahead of it.

use crate::support::binary;
use crate::support::exposition::samples;
use crate::support::World;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PAUSE: &str = "/apis/a.example.com/v1/namespaces/n/things/pause";
/// A quarter of the default seats: `global-default` has 13, 14 while the others are idle, and
/// borrows up to 94.
const SEATS: [&str; 4] = [
    "--max-requests-inflight",
    "100",
    "--max-mutating-requests-inflight",
    "50",
];
/// The noisy user's requests in flight.
const NOISY: usize = 300;
const NOISY_CONNECTIONS: usize = 4;
/// Past an APIService's share (half of the nominal 13: 6) and below what it may borrow alone
/// (14 less a reserve of half the rest: 10).
const BUSY: usize = 9;

/// GET `path`: the status and, for a 429, its Retry-After.
async fn get(send: &mut SendRequest<Full<Bytes>>, path: &str) -> (u16, Option<u64>) {
    let req = Request::get(path).body(Full::new(Bytes::new())).unwrap();
    let Ok(res) = send.send_request(req).await else {
        return (0, None);
    };
    let status = res.status().as_u16();
    let retry = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let _ = res.into_body().collect().await;
    (status, retry)
}

/// apigw's `/metrics`, as alice reads it.
async fn scrape(w: &World, addr: std::net::SocketAddr) -> String {
    let body = w.client(Some("alice")).get(addr, "/metrics").await.body;
    String::from_utf8_lossy(&body).into_owned()
}

/// The sum of `family`'s samples for `global-default` whose labels also match `labels`.
fn global_default(text: &str, family: &str, labels: &[(&str, &str)]) -> f64 {
    samples(text, family)
        .into_iter()
        .filter(|(l, _)| {
            l.get("priority_level").map(String::as_str) == Some("global-default")
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, value)| value)
        .sum()
}

/// The requests of `global-default` its wait histogram observed executing, and of them those
/// that waited: all its observations but the zeros.
async fn waits(w: &World, addr: std::net::SocketAddr) -> (u64, u64) {
    let text = scrape(w, addr).await;
    let family = "apiserver_flowcontrol_request_wait_duration_seconds";
    let executed = [("execute", "true")];
    let all = global_default(&text, &format!("{family}_count"), &executed);
    let zero = global_default(
        &text,
        &format!("{family}_bucket"),
        &[executed[0], ("le", "0")],
    );
    (all as u64, (all - zero.min(all)) as u64)
}

fn quantile(mut v: Vec<Duration>, q: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_user_goes_before_a_noisy_users_backlog_to_the_same_backend() {
    let (w, echo) = World::with_a().await;
    w.pki.leaf("quiet", &w.client_ca, "quiet", &[], &[], false);
    let port = binary::free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_apigw"));
    command
        .args(binary::serve_args(&w, echo.addr, port))
        .args(SEATS);
    let (_child, addr, _) = binary::serving(&w, command, port).await;

    // One busy backend past its share, alone: no request waits.
    let (observed, before) = waits(&w, addr).await;
    let busy = w.client(Some("alice")).h2_connection(addr).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = tokio::task::JoinSet::new();
    let busy_done = Arc::new(AtomicUsize::new(0));
    for _ in 0..BUSY {
        let (mut send, stop, done) = (busy.clone(), stop.clone(), busy_done.clone());
        load.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(get(&mut send, PAUSE).await.0, 200);
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = load.join_next().await {
        r.expect("a busy client");
    }
    let (observed_after, after) = waits(&w, addr).await;
    let busy_done = busy_done.load(Ordering::Relaxed) as u64;
    eprintln!(
        "busy: {busy_done} requests at {BUSY} in flight, {} waited",
        after - before
    );
    assert!(
        observed_after - observed >= busy_done,
        "the wait histogram saw {} of {busy_done} requests",
        observed_after - observed
    );
    assert_eq!(after, before, "requests waited with one busy backend");

    // The quiet user alone.
    let mut quiet = w.client(Some("quiet")).h2_connection(addr).await;
    let mut alone = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        assert_eq!(get(&mut quiet, PAUSE).await.0, 200);
        alone.push(t.elapsed());
    }

    // The noisy user, as client-go behaves: a 429 is sent again after its Retry-After.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    for _ in 0..NOISY_CONNECTIONS {
        let conn = w.client(Some("alice")).h2_connection(addr).await;
        for _ in 0..NOISY / NOISY_CONNECTIONS {
            let (mut send, stop) = (conn.clone(), stop.clone());
            let (done, refused) = (done.clone(), refused.clone());
            load.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match get(&mut send, PAUSE).await {
                        (200, _) => done.fetch_add(1, Ordering::Relaxed),
                        (429, retry) => {
                            tokio::time::sleep(Duration::from_secs(retry.unwrap_or(1))).await;
                            refused.fetch_add(1, Ordering::Relaxed)
                        }
                        (status, _) => panic!("the noisy user got {status}"),
                    };
                }
            });
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut loaded = Vec::new();
    let mut passed = Vec::new();
    for _ in 0..20 {
        let (t, from) = (Instant::now(), done.load(Ordering::Relaxed));
        assert_eq!(get(&mut quiet, PAUSE).await.0, 200);
        loaded.push(t.elapsed());
        passed.push(done.load(Ordering::Relaxed) - from);
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = load.join_next().await {
        r.expect("a noisy client");
    }
    let text = scrape(&w, addr).await;
    let seats = global_default(&text, "apiserver_flowcontrol_current_limit_seats", &[]) as usize;
    eprintln!(
        "quiet alone: p50 {:?}, max {:?}; under load: p50 {:?}, p99 {:?}, max {:?}; \
         noisy requests finished while one quiet request was in flight: {passed:?}; \
         noisy: {} done, {} refused; the level had {seats} seats",
        quantile(alone.clone(), 0.5),
        quantile(alone, 1.0),
        quantile(loaded.clone(), 0.5),
        quantile(loaded.clone(), 0.99),
        quantile(loaded, 1.0),
        done.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    // Served next, a quiet request sees the requests running when it arrives finish: about
    // `seats`, under 100. Behind the backlog it would see the backlog finish: more than
    // NOISY - 100.
    assert!(seats < NOISY / 3, "the level has {seats} seats");
    let most = passed.iter().copied().max().unwrap_or_default();
    assert!(
        most < NOISY / 2,
        "a quiet request waited behind the noisy backlog: {passed:?}"
    );
}
