//! The load generator of `apigw-bench`: HTTPS clients (HTTP/1.1 keep-alive, one connection per
//! worker, or HTTP/2 with the workers sharing a few multiplexed connections) presenting a client
//! certificate, a fixed number of workers each with one request in flight, a warm-up, then a
//! measured window. Latencies are kept exactly (one `u32` of microseconds per request) and
//! sorted for the percentiles.

use super::stats::{ProcSampler, Usage};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// How long a single request may take before it counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Where requests go and how to get there.
#[derive(Clone)]
pub struct Target {
    /// `apigw`, `nginx`, `haproxy`, `direct`.
    pub name: String,
    pub addr: SocketAddr,
    pub server_name: ServerName<'static>,
    /// Offers `http/1.1` only.
    pub h1: Arc<ClientConfig>,
    /// Offers `h2` only.
    pub h2: Arc<ClientConfig>,
    /// Sent with every request (the direct target's `X-Remote-User`).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Processes whose CPU and memory are the cost of this target.
    pub pids: Vec<u32>,
}

impl Target {
    /// Resident memory of the target's processes now (KiB).
    pub fn rss_kib(&self) -> u64 {
        self.pids
            .iter()
            .filter_map(|&p| super::stats::rss_kib(p))
            .sum()
    }
}

/// The protocol spoken to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Proto {
    #[serde(rename = "h1")]
    H1,
    #[serde(rename = "h2")]
    H2,
}

/// One kind of request, sent over and over.
#[derive(Debug, Clone)]
pub struct Job {
    pub method: Method,
    pub path: String,
    pub accept: Option<&'static str>,
    pub body: Bytes,
    pub proto: Proto,
    pub concurrency: usize,
    pub warmup: Duration,
    pub window: Duration,
}

/// What one measured window showed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Measured {
    pub requests: u64,
    pub errors: u64,
    pub rps: f64,
    /// Body bytes per second, request plus response, in MiB.
    pub mib_per_s: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    #[serde(flatten)]
    pub usage: Usage,
    /// CPU time of the target's processes per request, in microseconds.
    pub cpu_us_per_req: f64,
    /// The first error seen, for the report.
    pub first_error: Option<String>,
}

/// A connection's request sender.
#[derive(Clone)]
pub enum Sender {
    H1(Arc<tokio::sync::Mutex<http1::SendRequest<Full<Bytes>>>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// Why a client connection could not be opened or a request not built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connect {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS handshake with {addr}: {source}")]
    Tls {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// `version` is `HTTP/1.1` or `HTTP/2`.
    #[error("{version} handshake: {source}")]
    Handshake {
        version: &'static str,
        #[source]
        source: hyper::Error,
    },
    #[error("building the request: {0}")]
    Request(#[source] http::Error),
}

/// TCP connect and TLS handshake to `target` with `tls`.
pub async fn connect_tls(
    target: &Target,
    tls: &Arc<ClientConfig>,
) -> Result<TlsStream<TcpStream>, ClientError> {
    let addr = target.addr;
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|source| ClientError::Connect { addr, source })?;
    let _ = tcp.set_nodelay(true);
    TlsConnector::from(tls.clone())
        .connect(target.server_name.clone(), tcp)
        .await
        .map_err(|source| ClientError::Tls { addr, source })
}

/// Opens one connection speaking `proto`.
pub async fn connect(target: &Target, proto: Proto) -> Result<Sender, ClientError> {
    let tls = match proto {
        Proto::H1 => &target.h1,
        Proto::H2 => &target.h2,
    };
    let io = TokioIo::new(connect_tls(target, tls).await?);
    match proto {
        Proto::H1 => {
            let (send, conn) =
                http1::handshake(io)
                    .await
                    .map_err(|source| ClientError::Handshake {
                        version: "HTTP/1.1",
                        source,
                    })?;
            tokio::spawn(conn);
            Ok(Sender::H1(Arc::new(tokio::sync::Mutex::new(send))))
        }
        Proto::H2 => {
            let (send, conn) = http2::Builder::new(TokioExecutor::new())
                .initial_stream_window_size(1 << 20)
                .initial_connection_window_size(8 << 20)
                .handshake(io)
                .await
                .map_err(|source| ClientError::Handshake {
                    version: "HTTP/2",
                    source,
                })?;
            tokio::spawn(conn);
            Ok(Sender::H2(send))
        }
    }
}

/// Builds the request of `job` for `target`.
pub fn request(target: &Target, job: &Job) -> Result<Request<Full<Bytes>>, ClientError> {
    // HTTP/2 carries the authority in the request line (`:authority`); HTTP/1.1 in `Host`.
    let mut builder = match job.proto {
        Proto::H1 => Request::builder()
            .uri(&job.path)
            .header(http::header::HOST, "localhost"),
        Proto::H2 => Request::builder()
            .uri(format!("https://localhost{}", job.path))
            .version(http::Version::HTTP_2),
    }
    .method(job.method.clone());
    if let Some(accept) = job.accept {
        builder = builder.header(http::header::ACCEPT, accept);
    }
    if !job.body.is_empty() {
        builder = builder.header(http::header::CONTENT_TYPE, "application/json");
    }
    for (name, value) in &target.headers {
        builder = builder.header(name, value);
    }
    builder
        .body(Full::new(job.body.clone()))
        .map_err(ClientError::Request)
}

/// Why a request did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The server had closed the idle connection before the request left (a keep-alive limit
    /// or timeout): nothing was sent; a client opens a new connection and sends it there.
    #[error("connection closed by the server while idle")]
    Closed,
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Worded with the hyper error's causes.
    #[error("request: {}", apigw_core::errors::chain(.0))]
    Request(#[source] hyper::Error),
    #[error("reading the body: {0}")]
    Body(#[source] hyper::Error),
    #[error("status {0}")]
    Status(StatusCode),
}

/// Sends one request and reads the whole answer; returns the body length.
pub async fn send(sender: &Sender, req: Request<Full<Bytes>>) -> Result<usize, SendError> {
    let res = match sender {
        Sender::H1(send) => {
            let mut send = send.lock().await;
            send.ready().await.map_err(|_| SendError::Closed)?;
            send.send_request(req).await
        }
        Sender::H2(send) => {
            let mut send = send.clone();
            send.ready().await.map_err(|_| SendError::Closed)?;
            send.send_request(req).await
        }
    }
    .map_err(SendError::Request)?;
    let status = res.status();
    let mut body = res.into_body();
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(SendError::Body)?;
        if let Some(data) = frame.data_ref() {
            len += data.len();
        }
    }
    if status != StatusCode::OK && status != StatusCode::CREATED {
        return Err(SendError::Status(status));
    }
    Ok(len)
}

/// What one worker saw.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    bytes: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn error(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }
}

/// Runs `job` against `target`: warm-up, then the measured window.
pub async fn run(target: &Target, job: &Job) -> Measured {
    run_at(target, job, None).await
}

/// [`run`], its workers together sending `rate` requests per second at most: each waits for
/// its next turn, on a schedule of its own that the others' are spread between. Targets
/// paced alike that keep up serve the same requests, so their CPU per request compares the
/// work of a request, and not also how each fares when saturated.
pub async fn run_paced(target: &Target, job: &Job, rate: f64) -> Measured {
    run_at(target, job, Some(rate)).await
}

async fn run_at(target: &Target, job: &Job, rate: Option<f64>) -> Measured {
    let workers = job.concurrency.max(1);
    let shared = match job.proto {
        Proto::H1 => Vec::new(),
        Proto::H2 => {
            let conns = workers.div_ceil(16).clamp(1, 4);
            let mut out = Vec::with_capacity(conns);
            for _ in 0..conns {
                match connect(target, Proto::H2).await {
                    Ok(s) => out.push(s),
                    Err(e) => return failed(e.to_string()),
                }
            }
            out
        }
    };
    let start = Instant::now() + Duration::from_millis(50);
    let measure_from = start + job.warmup;
    let measure_to = measure_from + job.window;
    let sampler = ProcSampler::start(target.pids.clone(), measure_from, measure_to);
    let mut tasks = Vec::with_capacity(workers);
    // Each worker's turns, `every` apart; the workers' first turns spread over the first.
    let every = rate
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs_f64(workers as f64 / r));
    for i in 0..workers {
        let sender = shared.get(i % shared.len().max(1)).cloned();
        let (target, job) = (target.clone(), job.clone());
        let pace = every.map(|every| Pace {
            next: start + every.mul_f64(i as f64 / workers as f64),
            every,
        });
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(start.into()).await;
            worker(&target, &job, sender, pace, measure_from, measure_to).await
        }));
    }
    let mut total = Tally::default();
    for task in tasks {
        match task.await {
            Ok(t) => {
                total.latencies_us.extend(t.latencies_us);
                total.bytes += t.bytes;
                total.errors += t.errors;
                if let Some(e) = t.first_error {
                    total.first_error.get_or_insert(e);
                }
            }
            Err(e) => total.error(format!("worker failed: {e}")),
        }
    }
    summarize(total, sampler.finish().await, job.window)
}

fn failed(e: String) -> Measured {
    Measured {
        errors: 1,
        first_error: Some(e),
        ..Default::default()
    }
}

/// A paced worker's schedule: its next turn, and the time between turns.
struct Pace {
    next: Instant,
    every: Duration,
}

async fn worker(
    target: &Target,
    job: &Job,
    mut sender: Option<Sender>,
    mut pace: Option<Pace>,
    from: Instant,
    to: Instant,
) -> Tally {
    let mut tally = Tally::default();
    while Instant::now() < to {
        if let Some(pace) = pace.as_mut() {
            // Turns the warm-up fell behind on are not made up in the window, which takes
            // only its own turns: at most one more per worker than the rate allows.
            if pace.next < from && Instant::now() >= from && !pace.every.is_zero() {
                let behind = (from - pace.next).as_secs_f64() / pace.every.as_secs_f64();
                pace.next += pace.every.mul_f64(behind.ceil());
            }
            // Late turns are taken at once: the schedule, not the last send, sets the rate.
            tokio::time::sleep_until(pace.next.into()).await;
            pace.next += pace.every;
            if Instant::now() >= to {
                break;
            }
        }
        let current = match &sender {
            Some(s) => s.clone(),
            None => match connect(target, job.proto).await {
                Ok(s) => {
                    sender = Some(s.clone());
                    s
                }
                Err(e) => {
                    tally.error(e.to_string());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let req = match request(target, job) {
            Ok(r) => r,
            Err(e) => {
                tally.error(e.to_string());
                return tally;
            }
        };
        let began = Instant::now();
        let outcome = tokio::time::timeout(REQUEST_TIMEOUT, send(&current, req)).await;
        let ended = Instant::now();
        let in_window = began >= from && ended <= to;
        match outcome {
            Ok(Ok(len)) if in_window => {
                let us = ended.duration_since(began).as_micros();
                tally
                    .latencies_us
                    .push(u32::try_from(us).unwrap_or(u32::MAX));
                tally.bytes += (len + job.body.len()) as u64;
            }
            Ok(Ok(_)) => {}
            Ok(Err(SendError::Closed)) => sender = None,
            Ok(Err(e)) => {
                tally.error(e.to_string());
                sender = None;
                // A target that fails every request must not be flooded (nor the report).
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(_) => {
                tally.error(format!("no answer within {REQUEST_TIMEOUT:?}"));
                sender = None;
            }
        }
    }
    tally
}

/// The value at quantile `q` of sorted latencies, in milliseconds.
pub fn quantile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let rank = ((sorted_us.len() as f64 * q).ceil() as usize).clamp(1, sorted_us.len());
    f64::from(sorted_us[rank - 1]) / 1000.0
}

/// A [`Measured`] from latencies, response bytes and errors gathered elsewhere.
pub fn from_samples(
    latencies: &[Duration],
    bytes: u64,
    errors: Vec<String>,
    usage: Usage,
    window: Duration,
) -> Measured {
    let tally = Tally {
        latencies_us: latencies
            .iter()
            .map(|d| u32::try_from(d.as_micros()).unwrap_or(u32::MAX))
            .collect(),
        bytes,
        errors: errors.len() as u64,
        first_error: errors.into_iter().next(),
    };
    summarize(tally, usage, window)
}

/// One [`Measured`] for several rounds of the same job: the median of each rate, latency and
/// CPU figure (the mean of the middle two for an even count), the total requests and errors,
/// the first round's starting memory and the highest peak.
pub fn median(rounds: &[Measured]) -> Measured {
    let mid = |f: fn(&Measured) -> f64| median_of(&mut rounds.iter().map(f).collect::<Vec<_>>());
    Measured {
        requests: rounds.iter().map(|m| m.requests).sum(),
        errors: rounds.iter().map(|m| m.errors).sum(),
        rps: mid(|m| m.rps),
        mib_per_s: mid(|m| m.mib_per_s),
        p50_ms: mid(|m| m.p50_ms),
        p90_ms: mid(|m| m.p90_ms),
        p99_ms: mid(|m| m.p99_ms),
        max_ms: mid(|m| m.max_ms),
        usage: Usage {
            cpu_s: mid(|m| m.usage.cpu_s),
            rss_start_kib: rounds.first().map_or(0, |m| m.usage.rss_start_kib),
            rss_peak_kib: rounds
                .iter()
                .map(|m| m.usage.rss_peak_kib)
                .max()
                .unwrap_or(0),
        },
        cpu_us_per_req: mid(|m| m.cpu_us_per_req),
        first_error: rounds.iter().find_map(|m| m.first_error.clone()),
    }
}

/// The median of `v` (the mean of the middle two for an even count; 0 when empty), which it
/// leaves sorted.
pub fn median_of(v: &mut [f64]) -> f64 {
    v.sort_unstable_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn summarize(mut t: Tally, usage: Usage, window: Duration) -> Measured {
    t.latencies_us.sort_unstable();
    let secs = window.as_secs_f64().max(1e-9);
    let requests = t.latencies_us.len() as u64;
    let cpu_us_per_req = if requests == 0 {
        0.0
    } else {
        usage.cpu_s * 1e6 / requests as f64
    };
    Measured {
        requests,
        errors: t.errors,
        rps: requests as f64 / secs,
        mib_per_s: t.bytes as f64 / secs / f64::from(1 << 20),
        p50_ms: quantile_ms(&t.latencies_us, 0.50),
        p90_ms: quantile_ms(&t.latencies_us, 0.90),
        p99_ms: quantile_ms(&t.latencies_us, 0.99),
        max_ms: quantile_ms(&t.latencies_us, 1.0),
        usage,
        cpu_us_per_req,
        first_error: t.first_error,
    }
}

#[cfg(test)]
mod tests {
    use super::{median, quantile_ms, Measured};

    fn round(rps: f64, p50_ms: f64, errors: u64, peak: u64) -> Measured {
        let mut m = Measured {
            requests: 10,
            errors,
            rps,
            p50_ms,
            cpu_us_per_req: rps / 10.0,
            ..Measured::default()
        };
        m.usage.rss_peak_kib = peak;
        m.usage.rss_start_kib = peak / 2;
        if errors > 0 {
            m.first_error = Some(format!("{rps}"));
        }
        m
    }

    #[test]
    fn median_of_an_odd_count_is_the_middle_round() {
        let m = median(&[
            round(300.0, 1.0, 0, 8),
            round(100.0, 3.0, 2, 4),
            round(200.0, 2.0, 1, 6),
        ]);
        assert_eq!((m.rps, m.p50_ms, m.cpu_us_per_req), (200.0, 2.0, 20.0));
        assert_eq!((m.requests, m.errors), (30, 3));
        assert_eq!((m.usage.rss_start_kib, m.usage.rss_peak_kib), (4, 8));
        assert_eq!(m.first_error.as_deref(), Some("100"));
    }

    #[test]
    fn median_of_an_even_count_is_the_mean_of_the_middle_two() {
        let m = median(&[
            round(400.0, 1.0, 0, 1),
            round(100.0, 4.0, 0, 1),
            round(300.0, 2.0, 0, 1),
            round(200.0, 3.0, 0, 1),
        ]);
        assert_eq!((m.rps, m.p50_ms), (250.0, 2.5));
        assert_eq!(m.first_error, None);
        assert_eq!(median(&[]).rps, 0.0);
        assert_eq!(median(&[round(7.0, 1.0, 0, 1)]).rps, 7.0);
    }

    #[test]
    fn quantiles_pick_the_nearest_rank() {
        let v: Vec<u32> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(quantile_ms(&v, 0.5), 50.0);
        assert_eq!(quantile_ms(&v, 0.99), 99.0);
        assert_eq!(quantile_ms(&v, 1.0), 100.0);
        assert_eq!(quantile_ms(&[], 0.5), 0.0);
    }
}
