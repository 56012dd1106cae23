//! The big-list scenario (issue 3): one list response of `--big-list-size` (1 GiB by default)
//! that the sample server generates while it streams, read by the client frame by frame and
//! never kept, once straight from the backend (the baseline) and once through a fresh gateway.
//! Reports the throughput of each and how much each target's resident memory grew during the
//! transfer (peak sampled from `/proc` minus the value just before): a gateway that buffers
//! shows the list's size there, one that streams a few socket buffers.

use super::load::{self, Job, Measured, Proto, Sender, Target};
use super::scenarios::PAYLOAD;
use super::stats::{OpenSampler, Usage};
use super::{Figure, Row, Settings};
use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;
use std::time::{Duration, Instant};

pub const LIST: &str = "/apis/wardle.example.com/v1alpha1/bench/list";

/// How often resident memory is sampled during the transfer.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// The gateway's growth must stay under this (issue 3).
pub const GROWTH_LIMIT_KIB: u64 = 8 * 1024;

/// A size that `parse_size` does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("{0:?} is not a size like 1GiB, 256MiB or 1048576")]
    NotASize(String),
    #[error("{text:?}: unknown unit {unit:?} (B, KiB, MiB, GiB)")]
    UnknownUnit { text: String, unit: String },
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// `1GiB`, `512MiB`, `64KiB` or a number of bytes.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let (number, unit) = t
        .find(|c: char| !c.is_ascii_digit())
        .map_or((t, ""), |i| t.split_at(i));
    let n: u64 = number
        .parse()
        .map_err(|_| SizeError::NotASize(text.to_string()))?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        other => {
            return Err(SizeError::UnknownUnit {
                text: text.to_string(),
                unit: other.to_string(),
            })
        }
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| SizeError::TooLarge(text.to_string()))
}

/// A size for people: `1.00 GiB`, `32.0 MiB`.
pub fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.2} GiB", bytes as f64 / f64::from(1 << 30))
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    }
}

fn job(path: String) -> Job {
    Job {
        method: Method::GET,
        path,
        accept: None,
        body: Bytes::new(),
        proto: Proto::H1,
        concurrency: 1,
        warmup: Duration::ZERO,
        window: Duration::ZERO,
    }
}

/// What one transfer showed.
struct Transfer {
    bytes: u64,
    elapsed: Duration,
    rss_before_kib: u64,
    usage: Usage,
    error: Option<String>,
}

/// Runs the transfer against each target in turn (`direct` is the backend, the others front
/// doors): a row each, and the figures, under `scenario`.
pub async fn run(s: &Settings, scenario: &str, targets: &[&Target]) -> (Vec<Row>, Vec<Figure>) {
    let size = s.big_list_bytes;
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for target in targets {
        eprintln!(
            "apigw-bench: {scenario} ({}) via {}",
            human(size),
            target.name
        );
        let t = transfer(target, size).await;
        rows.push(row(scenario, target, size, &t));
        results.push((target.name.clone(), t));
    }
    (rows, figures(scenario, size, &results))
}

fn row(scenario: &str, target: &Target, size: u64, t: &Transfer) -> Row {
    let job = job(String::new());
    let secs = t.elapsed.as_secs_f64().max(1e-9);
    let ms = t.elapsed.as_secs_f64() * 1000.0;
    let ok = t.error.is_none();
    let measured = Measured {
        requests: u64::from(ok),
        errors: u64::from(!ok),
        rps: if ok { 1.0 / secs } else { 0.0 },
        mib_per_s: t.bytes as f64 / secs / f64::from(1 << 20),
        p50_ms: ms,
        p90_ms: ms,
        p99_ms: ms,
        max_ms: ms,
        usage: t.usage.clone(),
        cpu_us_per_req: t.usage.cpu_s * 1e6,
        first_error: t.error.clone(),
    };
    let mut row = Row::new(scenario, &target.name, &job, measured);
    row.rss_before_kib = t.rss_before_kib;
    row.note = Some(format!(
        "{} list, {} read; RSS +{:.1} MiB",
        human(size),
        human(t.bytes),
        growth_kib(t) as f64 / 1024.0
    ));
    row
}

fn growth_kib(t: &Transfer) -> u64 {
    t.usage.rss_peak_kib.saturating_sub(t.rss_before_kib)
}

fn figures(scenario: &str, size: u64, results: &[(String, Transfer)]) -> Vec<Figure> {
    let mut out = Vec::new();
    for (name, t) in results {
        let errors: Vec<String> = t.error.iter().cloned().collect();
        let secs = t.elapsed.as_secs_f64().max(1e-9);
        out.push(
            Figure::new(
                scenario,
                &format!("{name} throughput"),
                t.bytes as f64 / secs / f64::from(1 << 20),
                "MiB/s",
            )
            .errors(&errors)
            .note(format!("{} in {:.2} s", human(t.bytes), secs)),
        );
        let process = if name == "direct" {
            "backend"
        } else {
            "gateway"
        };
        out.push(
            Figure::new(
                scenario,
                &format!("{name} RSS growth"),
                growth_kib(t) as f64 / 1024.0,
                "MiB",
            )
            .note(format!(
                "{process} peak {:.1} MiB - before {:.1} MiB, {} list",
                t.usage.rss_peak_kib as f64 / 1024.0,
                t.rss_before_kib as f64 / 1024.0,
                human(size)
            )),
        );
    }
    out
}

/// One connection: a small warm-up request (so the gateway's backend connection exists),
/// then the list, read frame by frame, while the target's processes are sampled.
async fn transfer(target: &Target, size: u64) -> Transfer {
    let mut t = Transfer {
        bytes: 0,
        elapsed: Duration::ZERO,
        rss_before_kib: 0,
        usage: Usage::default(),
        error: None,
    };
    let sender = match load::connect(target, Proto::H1).await {
        Ok(s) => s,
        Err(e) => {
            t.error = Some(e.to_string());
            return t;
        }
    };
    let warm = async {
        let req = load::request(target, &job(format!("{PAYLOAD}?bytes=1024")))?;
        load::send(&sender, req).await
    };
    if let Err(e) = warm.await {
        t.error = Some(format!("warm-up request: {e}"));
        return t;
    }
    t.rss_before_kib = target.rss_kib();
    let sampler = OpenSampler::start(target.pids.clone(), SAMPLE_EVERY);
    let began = Instant::now();
    // Generous: a debug build on a busy machine still moves several MiB/s.
    let limit = Duration::from_secs(60).max(Duration::from_secs(size / (4 << 20)));
    let read = tokio::time::timeout(limit, read_list(target, &sender, size)).await;
    t.elapsed = began.elapsed();
    t.usage = sampler.finish().await;
    match read {
        Ok(Ok(n)) => t.bytes = n,
        Ok(Err((n, e))) => {
            t.bytes = n;
            t.error = Some(e);
        }
        Err(_) => t.error = Some(format!("the list took longer than {limit:?}")),
    }
    t
}

/// GETs the list on `sender` and counts its bytes without keeping them; the count, or the
/// count so far and what went wrong.
async fn read_list(target: &Target, sender: &Sender, size: u64) -> Result<u64, (u64, String)> {
    let req = load::request(target, &job(format!("{LIST}?bytes={size}")))
        .map_err(|e| (0, e.to_string()))?;
    let Sender::H1(send) = sender else {
        return Err((0, "expected an HTTP/1.1 connection".into()));
    };
    let res = {
        let mut send = send.lock().await;
        send.ready()
            .await
            .map_err(|e| (0, format!("connection: {e}")))?;
        send.send_request(req)
            .await
            .map_err(|e| (0, format!("GET {LIST}: {e}")))?
    };
    if res.status() != http::StatusCode::OK {
        return Err((0, format!("GET {LIST}: status {}", res.status())));
    }
    let mut body = res.into_body();
    let mut n: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| (n, format!("reading the list after {n} bytes: {e}")))?;
        if let Some(data) = frame.data_ref() {
            n += data.len() as u64;
        }
    }
    if n != size {
        return Err((n, format!("the list ended after {n} of {size} bytes")));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(
            parse_size("1GB").unwrap_err().to_string(),
            "\"1GB\": unknown unit \"GB\" (B, KiB, MiB, GiB)"
        );
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999GiB").is_err());
    }
}
