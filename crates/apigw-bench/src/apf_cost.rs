//! `apf-cost`: what API Priority and Fairness costs, as CPU per request of the same gateway
//! with it on and off, measured in pairs so that the machine's drift cancels out.
//!
//! Four gateways in front of the run's sample server: `apigw` and `apigw-no-apf`
//! (`--enable-priority-and-fairness=false`) with the access log off, `apigw-log` and
//! `apigw-log-no-apf` with it on (apigw's default configuration). The client is the dev PKI's
//! `dev-user`, whom upstream's configuration puts in `global-default` (queued, not exempt), so
//! every request is classified, queued for a seat and answered with the PF headers. The small
//! GET (1 KiB) runs over HTTP/1.1 (`apf-cost`) and HTTP/2 (`apf-cost-h2`) at the configured
//! concurrency, and over HTTP/1.1 at 16 in flight (`apf-cost-c16`): below the 24 of
//! global-default's 49 seats one APIService may hold by default, so that no request waits for
//! its APIService's share, which at 32 in flight a quarter of them do. Each runs [`ROUNDS`]
//! rounds (more with `--rounds`). In a round the four gateways are loaded at once, each by its
//! own clients at the variant's concurrency, over the same window: whatever the machine does
//! meanwhile, it does to all four, and a pair's ratio (APF-on CPU per request over APF-off)
//! compares like with like. The figure is the median of the rounds' ratios, with their range
//! in its note. The rows' request rates are those of a gateway sharing its CPU with three
//! others.
//!
//! Those three variants saturate the gateways: each serves as many requests as its quarter of
//! the CPU allows, so a pair's ratio also holds what being the slower one costs (its peers
//! wait longer and need waking more often). `apf-cost-paced` loads the four at the same rate
//! instead, [`PACED_SHARE`] of the slowest one's rate in `apf-cost-c16`, with 16 in flight:
//! each serves the same requests, and the ratio is the work of a request alone. Every
//! variant's figures count in the target.
//!
//! On a machine with more than one CPU (and `taskset`), the gateways run on the last CPU and
//! the load generator and the backend on the others while the scenario runs, so that the
//! gateways compete for a core with each other only.

use super::env::{client_configs, Env, Proc};
use super::load::{self, Measured, Proto, Target};
use super::scenarios::PAYLOAD;
use super::{Figure, Row, Settings};
use anyhow::Context as _;
use http::Method;

pub const NAME: &str = "apf-cost";

/// How its figures' names begin.
pub const FIGURE: &str = "APF on/off CPU per request";

/// Rounds at least (one with `--quick` is too few to pair: two).
const ROUNDS: usize = 7;

/// Requests in flight below one APIService's default share of `global-default` (24 seats).
const BELOW_SHARE: usize = 16;

/// The variant of [`BELOW_SHARE`] requests in flight, saturating the gateways.
const BELOW: &str = "apf-cost-c16";

/// The variant that loads every gateway at the same rate, below what any of them serves.
const PACED: &str = "apf-cost-paced";

/// The paced rate, as a share of the slowest gateway's rate in [`BELOW`].
const PACED_SHARE: f64 = 0.6;

/// The flag that turns APF off.
const APF_OFF: &str = "--enable-priority-and-fairness=false";

/// The gateways: name, `RUST_LOG`, whether APF is off.
const GATEWAYS: [(&str, &str, bool); 4] = [
    ("apigw", "warn", false),
    ("apigw-no-apf", "warn", true),
    ("apigw-log", "info", false),
    ("apigw-log-no-apf", "info", true),
];

/// The pairs compared: (APF on, APF off) indexes into [`GATEWAYS`], and what they measure.
const PAIRS: [(usize, usize, &str); 2] = [(0, 1, "access log off"), (2, 3, "access log on")];

/// Runs the scenario: a row per gateway and protocol, and a figure per pair and protocol.
pub async fn run(s: &Settings, env: &Env) -> anyhow::Result<(Vec<Row>, Vec<Figure>)> {
    let services = [env.wardle_apiservice()?];
    let user = client_configs(
        &env.pki("ca.crt"),
        &env.pki("user.crt"),
        &env.pki("user.key"),
    )?;
    let mut procs: Vec<Proc> = Vec::new();
    let mut targets: Vec<Target> = Vec::new();
    for (name, rust_log, off) in GATEWAYS {
        let extra: &[&str] = if off { &[APF_OFF] } else { &[] };
        let (proc, mut target) = env.gateway_with(name, &services, rust_log, extra).await?;
        target.name = name.into();
        (target.h1, target.h2) = user.clone();
        procs.push(proc);
        targets.push(target);
    }
    let pinned = Pinned::apart(&procs, env.sample.pid());
    let rounds = s.rounds.max(if s.quick { 2 } else { ROUNDS });
    let mut rows = Vec::new();
    let mut figures = Vec::new();
    let variants = [
        (NAME, Proto::H1, s.concurrency),
        ("apf-cost-h2", Proto::H2, s.concurrency),
        (BELOW, Proto::H1, BELOW_SHARE),
        (PACED, Proto::H1, BELOW_SHARE),
    ];
    // The paced variant's rate per gateway: a share of the slowest one's rate in `BELOW`,
    // which runs before it at the same concurrency.
    let mut rate = None;
    for (scenario, proto, concurrency) in variants {
        let job = s.job(
            Method::GET,
            &format!("{PAYLOAD}?bytes=1024"),
            proto,
            concurrency,
        );
        let paced = match scenario {
            PACED => Some(rate.with_context(|| format!("{PACED}: {BELOW} served nothing"))?),
            _ => None,
        };
        let runs = all_at_once(scenario, &targets, &job, rounds, paced).await;
        for (on, off, what) in PAIRS {
            figures.push(paired(scenario, what, &runs[on], &runs[off]));
        }
        let medians: Vec<Measured> = runs.iter().map(|r| load::median(r)).collect();
        if scenario == BELOW {
            rate = medians
                .iter()
                .map(|m| m.rps)
                .reduce(f64::min)
                .filter(|rps| *rps > 0.0)
                .map(|rps| rps * PACED_SHARE);
        }
        for ((target, runs), median) in targets.iter().zip(runs).zip(medians) {
            let mut row = Row::new(scenario, &target.name, &job, median);
            row.rounds_rps = runs.iter().map(|m| m.rps).collect();
            rows.push(row);
        }
    }
    drop(pinned);
    for proc in &mut procs {
        if let Some(status) = proc.exited() {
            anyhow::bail!("{} exited during {NAME} ({status})", proc.name);
        }
    }
    Ok((rows, figures))
}

/// `rounds` rounds of `job` on every target at once, at most `rate` requests per second each
/// when paced: each target's measurements, by round.
async fn all_at_once(
    scenario: &str,
    targets: &[Target],
    job: &load::Job,
    rounds: usize,
    rate: Option<f64>,
) -> Vec<Vec<Measured>> {
    let mut runs: Vec<Vec<Measured>> = vec![Vec::with_capacity(rounds); targets.len()];
    for round in 0..rounds {
        eprintln!(
            "apigw-bench: {scenario} via all four at once (round {})",
            round + 1
        );
        let loads: Vec<_> = targets
            .iter()
            .map(|target| {
                let (target, job) = (target.clone(), job.clone());
                tokio::spawn(async move {
                    match rate {
                        Some(rate) => load::run_paced(&target, &job, rate).await,
                        None => load::run(&target, &job).await,
                    }
                })
            })
            .collect();
        for (i, load) in loads.into_iter().enumerate() {
            runs[i].push(load.await.unwrap_or_else(|e| failed(&e)));
        }
    }
    runs
}

/// The gateways on the last CPU and this process and the backend on the others, until
/// dropped (everything back on every CPU). Nothing when there is one CPU or no `taskset`.
struct Pinned {
    pids: Vec<u32>,
    all: String,
}

impl Pinned {
    fn apart(gateways: &[Proc], backend: u32) -> Option<Self> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus < 2 {
            return None;
        }
        let last = cpus - 1;
        let rest = format!("0-{}", last - 1);
        let mine = [std::process::id(), backend];
        let gateways: Vec<u32> = gateways.iter().map(Proc::pid).collect();
        let pinned = gateways
            .iter()
            .map(|&pid| (pid, last.to_string()))
            .chain(mine.iter().map(|&pid| (pid, rest.clone())))
            .all(|(pid, cpus)| taskset(pid, &cpus));
        if !pinned {
            eprintln!("apigw-bench: {NAME}: taskset failed; the gateways share every CPU");
        }
        Some(Self {
            pids: gateways.into_iter().chain(mine).collect(),
            all: format!("0-{last}"),
        })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        for &pid in &self.pids {
            taskset(pid, &self.all);
        }
    }
}

/// Every thread of `pid` on `cpus` (a `taskset` list).
fn taskset(pid: u32, cpus: &str) -> bool {
    std::process::Command::new("taskset")
        .args(["--all-tasks", "--pid", "--cpu-list", cpus])
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The measurement of a load whose task failed.
fn failed(e: &tokio::task::JoinError) -> Measured {
    Measured {
        errors: 1,
        first_error: Some(format!("load failed: {e}")),
        ..Measured::default()
    }
}

/// The figure of one pair: the median of the rounds' on/off ratios of CPU per request.
fn paired(scenario: &str, what: &str, on: &[Measured], off: &[Measured]) -> Figure {
    let mut ratios: Vec<f64> = on
        .iter()
        .zip(off)
        .filter(|(a, b)| a.requests > 0 && b.requests > 0)
        .map(|(a, b)| a.cpu_us_per_req / b.cpu_us_per_req.max(1e-9))
        .collect();
    let ratio = load::median_of(&mut ratios);
    let errors: Vec<String> = on
        .iter()
        .chain(off)
        .filter_map(|m| m.first_error.clone())
        .collect();
    let cpu = |runs: &[Measured]| load::median(runs).cpu_us_per_req;
    let range = match (ratios.first(), ratios.last()) {
        (Some(lo), Some(hi)) => format!("{lo:.3}x to {hi:.3}x"),
        _ => "none".into(),
    };
    Figure::new(scenario, &format!("{FIGURE} ({what})"), ratio, "x")
        .errors(&errors)
        .note(format!(
            "median of {} paired rounds, range {range}; CPU µs/req on {:.2}, off {:.2} (medians)",
            ratios.len(),
            cpu(on),
            cpu(off)
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(cpu_us_per_req: f64) -> Measured {
        Measured {
            requests: 100,
            cpu_us_per_req,
            ..Measured::default()
        }
    }

    #[test]
    fn the_figure_is_the_median_of_paired_ratios() {
        // Drift: both sides slow down together; pairing keeps the ratio.
        let on = [10.3, 20.6, 15.45].map(measured);
        let off = [10.0, 20.0, 15.0].map(measured);
        let f = paired(NAME, "access log off", &on, &off);
        assert!((f.value - 1.03).abs() < 1e-9, "{}", f.value);
        assert_eq!(f.errors, 0);
        let note = f.note.unwrap_or_default();
        assert!(note.contains("median of 3 paired rounds"), "{note}");
        assert_eq!(load::median_of(&mut [8.0, 2.0, 4.0, 1.0]), 3.0);
    }
}
