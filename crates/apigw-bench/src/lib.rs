//! `apigw-bench`: the performance harness. Builds everything in a temporary directory (dev
//! PKI, the sample server and the gateway as `apigw` processes, nginx and haproxy as
//! the same mTLS reverse proxy), runs each scenario against every target side by side with its
//! own load generator, and writes a Markdown table and a JSON file. Exits non-zero when any
//! request failed, never because of speed.
//!
//! The gateway is measured twice in the small-GET scenarios: `apigw` with its access log off
//! (`--gateway-log warn`, as the peers run) and `apigw-log` in apigw's default configuration
//! (`RUST_LOG=info`, one access line per request). With `--rounds N` each request-rate scenario
//! runs its targets N times in rotating order, and each row is the median of the rounds.
//!
//! [`env`] owns the processes and TLS clients, [`peers`] nginx and haproxy, [`load`] the load
//! generator, [`stats`] `/proc`, [`run`] the order of a run, [`scenarios`], [`big_list`],
//! [`nginx_backend`], [`watches`] and [`apf_cost`] the scenarios, [`report`] and [`report_checks`] the output.

mod apf_cost;
mod big_list;
mod env;
mod kube;
mod load;
mod nginx_backend;
mod peers;
mod report;
mod report_checks;
mod run;
mod scenarios;
mod stats;
mod watches;

pub use load::{Measured, Proto};

use load::Job;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Every scenario, in the order they run.
pub const SCENARIOS: [&str; 16] = [
    "small-get",
    "small-get-c1",
    "small-get-h2",
    "small-get-h2-c1",
    nginx_backend::NAME,
    "list-10m",
    "big-list",
    "post-1m",
    "discovery",
    "remerge",
    "watches",
    "watch-ttfe",
    "handshake",
    kube::RBAC,
    kube::ALLOW,
    apf_cost::NAME,
];

/// Flags of `apigw-bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The apigw binary to run as the gateway and the sample server (default: the
    /// `apigw` next to this executable).
    #[arg(long, value_name = "PATH")]
    pub apigw: Option<std::path::PathBuf>,
    /// Length of each measured window, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Warm-up before each window, in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Requests in flight (one per worker).
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Scenarios to run (comma list; default all).
    #[arg(long, value_delimiter = ',')]
    pub scenarios: Vec<String>,
    /// Smoke mode for CI: 1 s windows, small counts, 200 watches, no install; fails on any
    /// error, never on speed.
    #[arg(long)]
    pub quick: bool,
    /// Do not apt-get install missing nginx/haproxy; their columns are skipped instead (but
    /// small-get-nginx-backend, whose backend is nginx, fails without nginx).
    #[arg(long)]
    pub no_install: bool,
    /// Never start nginx or haproxy as peer proxies, even when installed (hermetic runs, such
    /// as the tests). small-get-nginx-backend still starts nginx as its backend.
    #[arg(long)]
    pub no_peers: bool,
    /// Idle watches to open (default 10000, 200 with --quick).
    #[arg(long)]
    pub watches: Option<usize>,
    /// Size of the big-list response: 1GiB, 256MiB, or bytes (default 1GiB, 32MiB with --quick).
    #[arg(long)]
    pub big_list_size: Option<String>,
    /// One more `apigw serve` flag for the gateways the run starts (repeatable), e.g.
    /// `--gateway-arg=--worker-threads=0`.
    #[arg(long, allow_hyphen_values = true)]
    pub gateway_arg: Vec<String>,
    /// `RUST_LOG` of the `apigw` gateways the run starts: `warn` leaves the access log off, as
    /// the peers run; `info` is apigw's default configuration, one access line per request
    /// (written to the gateway's log file in the run's directory). The `apigw-log` target
    /// always runs with `info`.
    #[arg(long, default_value = "warn")]
    pub gateway_log: String,
    /// Leave out the `apigw-log` target (a second gateway with `RUST_LOG=info`, apigw's default
    /// access log on) from small-get, small-get-c1, small-get-h2, small-get-h2-c1 and
    /// small-get-nginx-backend.
    #[arg(long)]
    pub no_log_target: bool,
    /// Run the targets of the small GETs (small-get-nginx-backend's too), list-10m and post-1m
    /// this many times, each round starting at the next target; each row is then the median
    /// of its rounds, with each round's req/s in the JSON (1 with --quick). apf-cost runs at
    /// least 7 rounds (2 with --quick), each loading its four gateways at once.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Where scripts/upstream put its builds (etcd, kube-apiserver, sample-apiserver, the
    /// control-plane launcher), for the kube-aggregator scenarios; default: run the
    /// `scripts/upstream` of the checkout around the working directory.
    #[arg(long, value_name = "DIR")]
    pub upstream: Option<PathBuf>,
    /// Where to write the JSON results.
    #[arg(long, default_value = "target/bench/latest.json")]
    pub json: PathBuf,
    /// Where to write the Markdown table.
    #[arg(long, default_value = "target/bench/latest.md")]
    pub markdown: PathBuf,
}

/// The settings a run used, after `--quick`.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    #[serde(serialize_with = "secs")]
    pub duration: Duration,
    #[serde(serialize_with = "secs")]
    pub warmup: Duration,
    pub concurrency: usize,
    pub watches: usize,
    pub ttfe_runs: usize,
    pub remerge_runs: usize,
    pub discovery_services: usize,
    pub discovery_groups: usize,
    /// Bytes of the big-list response.
    pub big_list_bytes: u64,
    /// Rounds of each request-rate scenario (`--rounds`; rows are their medians).
    pub rounds: usize,
    pub quick: bool,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// `value` seconds of `flag`, up to [`apigw_core::duration::MAX_DURATION`]; an error, never a panic,
/// for infinity or a number too large.
fn seconds(flag: &str, value: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| *d <= apigw_core::duration::MAX_DURATION)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{flag}: {value:e}: not a number of seconds up to {}",
                apigw_core::duration::MAX_DURATION.as_secs()
            )
        })
}

impl Settings {
    fn from_args(args: &BenchArgs) -> anyhow::Result<Self> {
        let quick = args.quick;
        let big_list_bytes = match &args.big_list_size {
            Some(text) => {
                big_list::parse_size(text).map_err(|e| anyhow::anyhow!("--big-list-size: {e}"))?
            }
            None if quick => 32 << 20,
            None => 1 << 30,
        };
        Ok(Self {
            duration: seconds(
                "--duration",
                if quick { 1.0 } else { args.duration.max(0.1) },
            )?,
            warmup: seconds("--warmup", if quick { 0.3 } else { args.warmup.max(0.0) })?,
            concurrency: args.concurrency.max(1),
            watches: args.watches.unwrap_or(if quick { 200 } else { 10_000 }),
            ttfe_runs: if quick { 20 } else { 200 },
            remerge_runs: if quick { 5 } else { 51 },
            discovery_services: if quick { 100 } else { 1000 },
            discovery_groups: if quick { 30 } else { 300 },
            big_list_bytes,
            rounds: if quick { 1 } else { args.rounds.max(1) },
            quick,
        })
    }
}

/// One target's result in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub scenario: String,
    pub target: String,
    pub proto: Proto,
    pub concurrency: usize,
    /// Resident memory of the target's processes just before the scenario's warm-up (KiB).
    pub rss_before_kib: u64,
    /// The median of the rounds with `--rounds` above 1 (requests and errors: their totals).
    #[serde(flatten)]
    pub measured: Measured,
    /// Requests/s of each round, in the order run; absent with a single round.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds_rps: Vec<f64>,
    pub note: Option<String>,
}

impl Row {
    fn new(scenario: &str, target: &str, job: &Job, measured: Measured) -> Self {
        Self {
            scenario: scenario.into(),
            target: target.into(),
            proto: job.proto,
            concurrency: job.concurrency,
            rss_before_kib: 0,
            measured,
            rounds_rps: Vec::new(),
            note: None,
        }
    }
}

/// A single figure that is not a request rate.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub scenario: String,
    pub name: String,
    pub value: f64,
    pub unit: &'static str,
    pub errors: u64,
    pub first_error: Option<String>,
    pub note: Option<String>,
}

impl Figure {
    fn new(scenario: &str, name: &str, value: f64, unit: &'static str) -> Self {
        Self {
            scenario: scenario.into(),
            name: name.into(),
            value,
            unit,
            errors: 0,
            first_error: None,
            note: None,
        }
    }

    fn errors(mut self, errors: &[String]) -> Self {
        self.errors = errors.len() as u64;
        self.first_error = errors.first().cloned();
        self
    }

    fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// Runs `apigw-bench`.
pub fn main(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let wanted = selected(&args.scenarios)?;
    let settings = Settings::from_args(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get()))
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("starting the runtime: {e}"))?;
    // Interrupted, the run is dropped, and with it every process it started.
    let report = runtime.block_on(async {
        tokio::select! {
            report = run::run(&args, &settings, &wanted) => report,
            () = apigw_core::shutdown_signal() => Err(anyhow::anyhow!("interrupted")),
        }
    })?;
    report.write(&args.json, &args.markdown)?;
    println!("{}", report.markdown());
    eprintln!(
        "apigw-bench: wrote {} and {}",
        args.markdown.display(),
        args.json.display()
    );
    if report.errors > 0 {
        eprintln!(
            "error: apigw-bench: {} error(s); see the report",
            report.errors
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The scenarios named on the command line, checked; all when none are named.
fn selected(names: &[String]) -> anyhow::Result<Vec<&'static str>> {
    if names.is_empty() {
        return Ok(SCENARIOS.to_vec());
    }
    let mut out = Vec::new();
    for name in names {
        let known = SCENARIOS
            .iter()
            .find(|s| **s == name.trim())
            .ok_or_else(|| {
                anyhow::anyhow!("unknown scenario {name:?}; known: {}", SCENARIOS.join(", "))
            })?;
        out.push(*known);
    }
    Ok(out)
}
