//! The scenarios of `apigw-bench` that are not request rates: the gateway's memory per idle
//! watch (thousands of HTTP/2 streams, about 100 per connection as client-go multiplexes them),
//! the time to a watch's first event through the gateway and direct, and the time to re-merge
//! discovery after a registry change (in-process, [`RenderCache::render`]).

use super::load::{self, Job, Proto, Sender, Target};
use super::stats::rss_kib;
use super::{Figure, Row, Settings};
use anyhow::Context as _;
use apigw_availability::{Condition, State};
use apigw_discovery::render::RenderCache;
use apigw_registry::{ApiService, Snapshot};
use apigw_sample::bench_resource_list;
use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces";
/// Streams per HTTP/2 connection for idle watches.
const STREAMS_PER_CONN: usize = 100;
/// How long opening all the idle watches may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(120);

fn job(method: Method, path: String, body: Bytes) -> Job {
    Job {
        method,
        path,
        accept: None,
        body,
        proto: Proto::H2,
        concurrency: 1,
        warmup: Duration::ZERO,
        window: Duration::ZERO,
    }
}

/// Why a watch could not be opened.
#[derive(Debug, thiserror::Error)]
enum WatchError {
    #[error("idle watches need an HTTP/2 connection")]
    NotHttp2,
    #[error("connection: {0}")]
    Connection(#[source] hyper::Error),
    #[error(transparent)]
    Client(#[from] load::ClientError),
    #[error("watch request: {0}")]
    Request(#[source] hyper::Error),
    #[error("watch: status {0}")]
    Status(http::StatusCode),
}

/// Opens one watch and returns its response once the head has arrived.
async fn open(
    sender: &Sender,
    target: &Target,
    job: &Job,
) -> Result<http::Response<Incoming>, WatchError> {
    let Sender::H2(send) = sender else {
        return Err(WatchError::NotHttp2);
    };
    let mut send = send.clone();
    send.ready().await.map_err(WatchError::Connection)?;
    let res = send
        .send_request(load::request(target, job)?)
        .await
        .map_err(WatchError::Request)?;
    if !res.status().is_success() {
        return Err(WatchError::Status(res.status()));
    }
    Ok(res)
}

/// Opens `n` idle watches through `apigw` and reports its (and the backend's) resident memory
/// per watch, under `scenario`.
pub async fn idle(scenario: &str, apigw: &Target, backend_pid: u32, n: usize) -> Vec<Figure> {
    let pid = apigw.pids.first().copied().unwrap_or(0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (before, backend_before) = (rss_kib(pid), rss_kib(backend_pid));
    let path = format!("{FLUNDERS}/bench-watch/flunders?watch=1&timeoutSeconds=1800");
    let job = job(Method::GET, path, Bytes::new());
    let mut senders = Vec::new();
    let mut errors = Vec::new();
    for _ in 0..n.div_ceil(STREAMS_PER_CONN) {
        match load::connect(apigw, Proto::H2).await {
            Ok(s) => senders.push(s),
            Err(e) => errors.push(e.to_string()),
        }
    }
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let Some(sender) = senders.get(i % senders.len().max(1)).cloned() else {
            break;
        };
        let (target, job) = (apigw.clone(), job.clone());
        tasks.push(tokio::spawn(async move {
            match tokio::time::timeout(OPEN_TIMEOUT, open(&sender, &target, &job)).await {
                Ok(result) => result.map_err(|e| e.to_string()),
                Err(_) => Err(format!("watch not answered within {OPEN_TIMEOUT:?}")),
            }
        }));
    }
    let mut open_watches = Vec::with_capacity(n);
    for task in tasks {
        match task.await {
            Ok(Ok(res)) => open_watches.push(res),
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(format!("watch task failed: {e}")),
        }
    }
    let open_secs = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (after, backend_after) = (rss_kib(pid), rss_kib(backend_pid));
    let established = open_watches.len();
    drop(open_watches);
    let per = |b: Option<u64>, a: Option<u64>| match (b, a) {
        (Some(b), Some(a)) if established > 0 => {
            a.saturating_sub(b) as f64 * 1024.0 / established as f64
        }
        _ => 0.0,
    };
    let note = format!(
        "{established}/{n} open in {open_secs:.1} s; gateway RSS {} -> {} KiB",
        before.unwrap_or(0),
        after.unwrap_or(0)
    );
    vec![
        Figure::new(
            scenario,
            &format!("{} RSS per idle watch", apigw.name),
            per(before, after),
            "bytes",
        )
        .errors(&errors)
        .note(note),
        Figure::new(
            scenario,
            "sample server RSS per idle watch (for scale)",
            per(backend_before, backend_after),
            "bytes",
        ),
    ]
}

/// Creates the object whose `ADDED` event each time-to-first-event watch receives first.
pub async fn seed(direct: &Target) -> anyhow::Result<()> {
    let body = serde_json::json!({
        "apiVersion": "wardle.example.com/v1alpha1",
        "kind": "Flunder",
        "metadata": {"name": "first-event"},
        "spec": {},
    });
    let mut job = job(
        Method::POST,
        format!("{FLUNDERS}/bench-ttfe/flunders"),
        Bytes::from(body.to_string()),
    );
    job.proto = Proto::H1;
    let sender = load::connect(direct, Proto::H1).await?;
    let req = load::request(direct, &job)?;
    load::send(&sender, req)
        .await
        .context("creating the flunder the watches see first")?;
    Ok(())
}

/// Time from sending a watch request to its first event, `runs` times per target, one after
/// the other on one HTTP/2 connection.
pub async fn first_event(s: &Settings, targets: &[Target]) -> Vec<Row> {
    let job = job(
        Method::GET,
        format!("{FLUNDERS}/bench-ttfe/flunders?watch=1"),
        Bytes::new(),
    );
    let mut rows = Vec::new();
    for target in targets {
        eprintln!("apigw-bench: watch-ttfe via {}", target.name);
        let started = Instant::now();
        let (latencies, errors) = first_events(target, &job, s.ttfe_runs).await;
        let measured =
            load::from_samples(&latencies, 0, errors, Default::default(), started.elapsed());
        rows.push(Row::new("watch-ttfe", &target.name, &job, measured));
    }
    rows
}

async fn first_events(target: &Target, job: &Job, runs: usize) -> (Vec<Duration>, Vec<String>) {
    let mut latencies = Vec::with_capacity(runs);
    let mut errors = Vec::new();
    let sender = match load::connect(target, Proto::H2).await {
        Ok(s) => s,
        Err(e) => return (latencies, vec![e.to_string()]),
    };
    for _ in 0..runs {
        let began = Instant::now();
        let attempt = async {
            let mut body = open(&sender, target, job)
                .await
                .map_err(|e| e.to_string())?
                .into_body();
            loop {
                match body.frame().await {
                    Some(Ok(frame)) if frame.data_ref().is_some_and(|d| !d.is_empty()) => {
                        return Ok(());
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(format!("watch body: {e}")),
                    None => return Err("watch ended before its first event".to_string()),
                }
            }
        };
        match tokio::time::timeout(Duration::from_secs(10), attempt).await {
            Ok(Ok(())) => latencies.push(began.elapsed()),
            Ok(Err(e)) => errors.push(e),
            Err(_) => errors.push("no first event within 10 s".into()),
        }
    }
    (latencies, errors)
}

/// Median time to build the snapshot and render every discovery document for `services`.
pub fn remerge(services: &[serde_json::Value], runs: usize) -> anyhow::Result<Vec<Figure>> {
    let parsed: Vec<ApiService> = services
        .iter()
        .map(|v| {
            ApiService::from_value(v.clone()).map_err(|errs| {
                let lines: Vec<String> = errs.iter().map(|e| format!("{e:?}")).collect();
                anyhow::anyhow!("invalid generated APIService: {}", lines.join("; "))
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let mut states = available_states(&parsed);
    let cache = RenderCache::default();
    let mut snapshot_ms = Vec::with_capacity(runs);
    let mut render_ms = Vec::with_capacity(runs);
    let mut etag_ms = Vec::with_capacity(runs);
    let t = Instant::now();
    std::hint::black_box(cache.render(
        &Snapshot::new(parsed.iter().cloned()),
        &states,
        &[],
        &[],
        (0, 0, 0),
    ));
    let cold_ms = t.elapsed().as_secs_f64() * 1e3;
    for i in 0..runs.max(1) {
        // One registry change per run: one APIService's backend answered anew.
        let changed = &parsed[i % parsed.len()].name;
        if let Some(old) = states.get(changed).cloned() {
            let fresh = State {
                condition: old.condition.clone(),
                resources: old.resources.as_ref().map(|r| Arc::new((**r).clone())),
                aggregated: None,
                members: None,
            };
            states.insert(changed.clone(), Arc::new(fresh));
        }
        let t = Instant::now();
        let snapshot = Snapshot::new(parsed.iter().cloned());
        snapshot_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let docs = cache.render(&snapshot, &states, &[], &[], (i as u64 + 1, 0, 0));
        render_ms.push(t.elapsed().as_secs_f64() * 1e3);
        // The share a render cannot avoid: SHA-512 over every byte of the legacy and v2
        // documents (v2beta1 differs from v2 only in its last bytes and shares its digest
        // up to there), timed alone.
        let t = Instant::now();
        for doc in &docs.apis[..2] {
            std::hint::black_box(apigw_discovery::etag(&doc.bytes));
        }
        etag_ms.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(docs);
    }
    let note = format!(
        "{} APIServices, one changed per run, median of {} runs; the first, cold render took {cold_ms:.2} ms",
        parsed.len(),
        runs.max(1)
    );
    Ok(vec![
        Figure::new(
            "remerge",
            "RenderCache::render",
            median(&mut render_ms),
            "ms",
        )
        .note(note.clone()),
        Figure::new(
            "remerge",
            "of which SHA-512 (legacy + v2 bytes)",
            median(&mut etag_ms),
            "ms",
        )
        .note(note.clone()),
        Figure::new("remerge", "Snapshot::new", median(&mut snapshot_ms), "ms").note(note),
    ])
}

/// Every APIService available, with the resources the sample server lists for it.
fn available_states(services: &[ApiService]) -> HashMap<String, Arc<State>> {
    services
        .iter()
        .map(|svc| {
            let state = State {
                condition: Condition {
                    available: true,
                    reason: "Passed",
                    message: "all checks passed".into(),
                    last_transition: std::time::SystemTime::now(),
                },
                resources: Some(Arc::new(bench_resource_list(&svc.group, &svc.version))),
                aggregated: None,
                members: None,
            };
            (svc.name.clone(), Arc::new(state))
        })
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}
