//! The request-rate scenarios of `apigw-bench`, each run against every target side by side:
//! small GET (HTTP/1.1 and HTTP/2, each at the configured concurrency and at concurrency 1), a
//! 10 MiB response, a 1 MiB POST, `/apis` discovery with 1,000 APIServices against nginx
//! serving the same bytes as a static file, and new TLS connections per second. With
//! `--rounds N` the small GETs, the 10 MiB response and the POST run their targets N times in
//! rotating order and report the median of each figure.

use super::env::{apiservice, Env};
use super::load::{self, Job, Measured, Proto, Target};
use super::peers::STATIC_DIR;
use super::stats::ProcSampler;
use super::{Row, Settings};
use bytes::Bytes;
use http::Method;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const PAYLOAD: &str = "/apis/wardle.example.com/v1alpha1/bench/payload";
pub const SINK: &str = "/apis/wardle.example.com/v1alpha1/bench/sink";
pub const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

impl Settings {
    pub(super) fn job(&self, method: Method, path: &str, proto: Proto, concurrency: usize) -> Job {
        Job {
            method,
            path: path.into(),
            accept: None,
            body: Bytes::new(),
            proto,
            concurrency,
            warmup: self.warmup,
            window: self.duration,
        }
    }
}

/// Runs `job` against each target in turn, `rounds` times, round `r` starting at target
/// `r mod len`; one row per target, in the order of `targets`, the median of its rounds.
pub(super) async fn side_by_side(
    scenario: &str,
    targets: &[Target],
    job: &Job,
    rounds: usize,
) -> Vec<Row> {
    let rounds = rounds.max(1);
    let mut runs: Vec<Vec<Measured>> = vec![Vec::with_capacity(rounds); targets.len()];
    for round in 0..rounds {
        for i in round_order(round, targets.len()) {
            let name = &targets[i].name;
            match rounds {
                1 => eprintln!("apigw-bench: {scenario} via {name}"),
                _ => eprintln!("apigw-bench: {scenario} via {name} (round {})", round + 1),
            }
            runs[i].push(load::run(&targets[i], job).await);
        }
    }
    targets
        .iter()
        .zip(runs)
        .map(|(target, runs)| {
            let mut row = Row::new(scenario, &target.name, job, load::median(&runs));
            if runs.len() > 1 {
                row.rounds_rps = runs.iter().map(|m| m.rps).collect();
            }
            row
        })
        .collect()
}

/// The target indexes of round `round` (from 0) of `len` targets: starting at `round mod len`.
pub(super) fn round_order(round: usize, len: usize) -> impl Iterator<Item = usize> {
    (0..len).map(move |k| (round + k) % len)
}

/// The small-GET variants by the suffix of their scenario name: protocol and concurrency
/// (`-c1`: one request in flight over one connection).
pub fn small_get_variants(s: &Settings) -> [(&'static str, Proto, usize); 4] {
    let c = s.concurrency;
    [
        ("", Proto::H1, c),
        ("-c1", Proto::H1, 1),
        ("-h2", Proto::H2, c),
        ("-h2-c1", Proto::H2, 1),
    ]
}

/// Small GET (1 KiB JSON) over `proto` at concurrency `c` (HTTP/2 to the backend too, for
/// `direct`).
pub async fn small_get(
    s: &Settings,
    targets: &[Target],
    name: &str,
    proto: Proto,
    c: usize,
) -> Vec<Row> {
    get_rows(s, targets, name, &format!("{PAYLOAD}?bytes=1024"), proto, c).await
}

/// GETs of `path` over `proto` at concurrency `c` through each target: scenario `name`.
pub async fn get_rows(
    s: &Settings,
    targets: &[Target],
    name: &str,
    path: &str,
    proto: Proto,
    c: usize,
) -> Vec<Row> {
    let job = s.job(Method::GET, path, proto, c);
    side_by_side(name, targets, &job, s.rounds).await
}

/// A 10 MiB response: throughput, and how much the gateway's memory grows while relaying it.
pub async fn list_10m(s: &Settings, targets: &[Target]) -> Vec<Row> {
    let path = format!("{PAYLOAD}?bytes={}", 10 << 20);
    let c = s.concurrency.clamp(1, 4);
    let job = s.job(Method::GET, &path, Proto::H1, c);
    side_by_side("list-10m", targets, &job, s.rounds).await
}

/// A POST of a 1 MiB body.
pub async fn post_1m(s: &Settings, targets: &[Target]) -> Vec<Row> {
    let mut job = s.job(Method::POST, SINK, Proto::H1, s.concurrency.clamp(1, 8));
    let mut body = vec![b'x'; 1 << 20];
    body[0] = b'"';
    if let Some(last) = body.last_mut() {
        *last = b'"';
    }
    job.body = Bytes::from(body);
    side_by_side("post-1m", targets, &job, s.rounds).await
}

/// The APIServices of the discovery scenario: `n` versions spread over `groups` groups.
pub fn many_apiservices(
    env: &Env,
    n: usize,
    groups: usize,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut out = vec![env.wardle_apiservice()?];
    let ca = out[0]["spec"]["caBundle"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for i in 0..n {
        let group = format!("g{:03}.bench.example.com", i % groups);
        let version = format!("v{}", i / groups + 1);
        let group_priority = 100 + (i % groups) as u32;
        out.push(apiservice(&group, &version, group_priority, 10, &ca));
    }
    Ok(out)
}

/// `/apis`, legacy and aggregated, from a gateway with `services`, against nginx serving the
/// same bytes from files. Returns the rows and the size of each document.
pub async fn discovery(
    s: &Settings,
    apigw: &Target,
    nginx: Option<&Target>,
    dir: &std::path::Path,
) -> anyhow::Result<(Vec<Row>, Vec<(String, usize)>)> {
    let mut rows = Vec::new();
    let mut sizes = Vec::new();
    for (form, accept, file) in [
        ("legacy", None, "apis.json"),
        ("aggregated", Some(AGGREGATED), "apis-aggregated.json"),
    ] {
        let scenario = format!("discovery-{form}");
        let mut job = s.job(Method::GET, "/apis", Proto::H1, s.concurrency);
        job.accept = accept;
        let doc = fetch(apigw, &job).await?;
        sizes.push((scenario.clone(), doc.len()));
        let path = dir.join(STATIC_DIR).join(file);
        std::fs::create_dir_all(dir.join(STATIC_DIR))?;
        std::fs::write(&path, &doc)?;
        rows.extend(side_by_side(&scenario, std::slice::from_ref(apigw), &job, 1).await);
        if let Some(nginx) = nginx {
            let mut job = job.clone();
            job.path = format!("/{STATIC_DIR}/{file}");
            job.accept = None;
            let mut static_rows =
                side_by_side(&scenario, std::slice::from_ref(nginx), &job, 1).await;
            for row in &mut static_rows {
                row.target = "nginx-static".into();
            }
            rows.extend(static_rows);
        }
    }
    Ok((rows, sizes))
}

/// One GET of `job.path`, returning the body.
pub(super) async fn fetch(target: &Target, job: &Job) -> anyhow::Result<Vec<u8>> {
    use http_body_util::BodyExt;
    let sender = load::connect(target, Proto::H1).await?;
    let load::Sender::H1(send) = sender else {
        anyhow::bail!("expected an HTTP/1.1 connection");
    };
    let req = load::request(target, job)?;
    let res = send.lock().await.send_request(req).await?;
    anyhow::ensure!(
        res.status().is_success(),
        "GET {}: {}",
        job.path,
        res.status()
    );
    Ok(res.into_body().collect().await?.to_bytes().to_vec())
}

/// New TLS connections per second: connect, handshake (resuming when the client has a
/// session), one `GET /healthz`, close.
pub async fn handshakes(s: &Settings, targets: &[Target]) -> Vec<Row> {
    let job = s.job(
        Method::GET,
        "/healthz",
        Proto::H1,
        s.concurrency.clamp(1, 8),
    );
    let mut rows = Vec::new();
    for target in targets {
        eprintln!("apigw-bench: handshake via {}", target.name);
        let (measured, resumed) = handshake_run(target, &job).await;
        let mut row = Row::new("handshake", &target.name, &job, measured);
        row.note = Some(format!("{resumed:.0}% resumed"));
        rows.push(row);
    }
    rows
}

async fn handshake_run(target: &Target, job: &Job) -> (Measured, f64) {
    let start = Instant::now() + Duration::from_millis(50);
    let (from, to) = (start + job.warmup, start + job.warmup + job.window);
    let sampler = ProcSampler::start(target.pids.clone(), from, to);
    let resumed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..job.concurrency {
        let (target, job, resumed) = (target.clone(), job.clone(), resumed.clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(start.into()).await;
            let mut lat = Vec::new();
            let mut errors = Vec::new();
            while Instant::now() < to {
                let began = Instant::now();
                match one_handshake(&target, &job).await {
                    Ok(was_resumed) if began >= from && Instant::now() <= to => {
                        lat.push(began.elapsed());
                        resumed.fetch_add(u64::from(was_resumed), Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(e) => errors.push(e.to_string()),
                }
            }
            (lat, errors)
        }));
    }
    let mut lat = Vec::new();
    let mut errors = Vec::new();
    for task in tasks {
        match task.await {
            Ok((l, e)) => {
                lat.extend(l);
                errors.extend(e);
            }
            Err(e) => errors.push(format!("worker failed: {e}")),
        }
    }
    let usage = sampler.finish().await;
    let n = lat.len().max(1) as f64;
    let pct = resumed.load(Ordering::Relaxed) as f64 * 100.0 / n;
    (load::from_samples(&lat, 0, errors, usage, job.window), pct)
}

/// One connection: returns whether the TLS session was resumed.
async fn one_handshake(target: &Target, job: &Job) -> Result<bool, load::SendError> {
    let tls = load::connect_tls(target, &target.h1).await?;
    let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    let io = hyper_util::rt::TokioIo::new(tls);
    let (send, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|source| load::ClientError::Handshake {
            version: "HTTP/1.1",
            source,
        })?;
    let conn = tokio::spawn(conn);
    let sender = load::Sender::H1(Arc::new(tokio::sync::Mutex::new(send)));
    let result = load::send(&sender, load::request(target, job)?).await;
    drop(sender);
    let _ = conn.await;
    result.map(|_| resumed)
}

#[cfg(test)]
mod tests {
    use super::round_order;

    #[test]
    fn each_round_starts_at_the_next_target() {
        let order = |r| round_order(r, 3).collect::<Vec<_>>();
        assert_eq!(order(0), [0, 1, 2]);
        assert_eq!(order(1), [1, 2, 0]);
        assert_eq!(order(2), [2, 0, 1]);
        assert_eq!(order(3), [0, 1, 2]);
        assert_eq!(round_order(5, 0).count(), 0);
    }
}
