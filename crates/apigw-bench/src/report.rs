//! The output of `apigw-bench`: every row and figure, the ratios of `apigw` and `apigw-log`
//! against the baselines of the same run (nginx, haproxy, direct), the cost of the access log
//! (`apigw-log` against `apigw`, as a figure), the targets of issues 10 and 21 checked, and
//! the machine line; as JSON and as a Markdown table.

use super::env::LOG_TARGET;
use super::report_checks::Check;
use super::stats::Machine;
use super::{Figure, Row, Settings};
use anyhow::Context as _;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// The gateway targets, each compared with every other target but the other.
const GATEWAYS: [&str; 2] = ["apigw", LOG_TARGET];

/// apigw (or apigw-log) against one baseline in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub scenario: String,
    /// `apigw` or `apigw-log`.
    pub apigw: String,
    pub baseline: String,
    /// apigw's requests/s divided by the baseline's (above 1 is better).
    pub rps: f64,
    /// apigw's p50 and p99 divided by the baseline's (below 1 is better).
    pub p50: f64,
    pub p99: f64,
    /// apigw's CPU per request divided by the baseline's (below 1 is better).
    pub cpu_per_req: f64,
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub command: String,
    pub settings: Settings,
    pub rows: Vec<Row>,
    pub figures: Vec<Figure>,
    pub ratios: Vec<Ratio>,
    pub checks: Vec<Check>,
    pub skipped: Vec<String>,
    /// Harness problems (a baseline that would not start, a scenario that could not run).
    pub problems: Vec<String>,
    /// Failed requests plus harness problems: non-zero fails the run.
    pub errors: u64,
}

impl Report {
    pub fn new(
        machine: Machine,
        settings: &Settings,
        rows: Vec<Row>,
        mut figures: Vec<Figure>,
        skipped: Vec<String>,
        problems: Vec<String>,
    ) -> Self {
        figures.extend(log_costs(&rows));
        let errors = rows.iter().map(|r| r.measured.errors).sum::<u64>()
            + figures.iter().map(|f| f.errors).sum::<u64>()
            + problems.len() as u64;
        let ratios = ratios(&rows);
        let checks = super::report_checks::checks(&rows, &figures, errors);
        Self {
            machine,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            settings: settings.clone(),
            rows,
            figures,
            ratios,
            checks,
            skipped,
            problems,
            errors,
        }
    }

    /// Writes the JSON and Markdown files, creating their directories.
    pub fn write(&self, json: &Path, markdown: &Path) -> anyhow::Result<()> {
        for path in [json, markdown] {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
        }
        let text = serde_json::to_string_pretty(self).context("encoding the JSON report")?;
        std::fs::write(json, text).with_context(|| format!("writing {}", json.display()))?;
        std::fs::write(markdown, self.markdown())
            .with_context(|| format!("writing {}", markdown.display()))
    }

    /// The Markdown rendering.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Machine: {}  ", self.machine);
        let _ = writeln!(out, "Command: `{}`  ", self.command);
        let rounds = match self.settings.rounds {
            1 => String::new(),
            n => format!("; request-rate rows: median of {n} rounds in rotating order"),
        };
        let _ = writeln!(
            out,
            "Window {:.1} s after {:.1} s warm-up{rounds}; errors: {}\n",
            self.settings.duration.as_secs_f64(),
            self.settings.warmup.as_secs_f64(),
            self.errors
        );
        self.rows_table(&mut out);
        self.ratios_table(&mut out);
        self.figures_table(&mut out);
        self.checks_list(&mut out);
        for note in self.skipped.iter().chain(&self.problems) {
            let _ = writeln!(out, "- {note}");
        }
        out
    }

    fn rows_table(&self, out: &mut String) {
        out.push_str("| scenario | target | proto | conc | req/s | MiB/s | p50 ms | p90 ms | p99 ms | max ms | errors | CPU s | CPU µs/req | RSS before → peak MiB | note |\n");
        out.push_str("|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n");
        for r in &self.rows {
            let m = &r.measured;
            let mib = |kib: u64| kib as f64 / 1024.0;
            let median =
                (r.rounds_rps.len() > 1).then(|| format!("median of {}", r.rounds_rps.len()));
            let error = m.first_error.as_ref().map(|e| format!("first error: {e}"));
            let note = [median, r.note.clone(), error].into_iter().flatten();
            let note = note.collect::<Vec<_>>().join("; ");
            let _ = writeln!(
                out,
                "| {} | {} | {:?} | {} | {:.0} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {:.0} | {:.1} → {:.1} | {} |",
                r.scenario, r.target, r.proto, r.concurrency, m.rps, m.mib_per_s, m.p50_ms,
                m.p90_ms, m.p99_ms, m.max_ms, m.errors, m.usage.cpu_s, m.cpu_us_per_req,
                mib(r.rss_before_kib), mib(m.usage.rss_peak_kib), note.replace('|', "/")
            );
        }
        out.push('\n');
    }

    fn ratios_table(&self, out: &mut String) {
        if self.ratios.is_empty() {
            return;
        }
        out.push_str(
            "| scenario | ratio | req/s | p50 | p99 | CPU/req |\n|---|---|--:|--:|--:|--:|\n",
        );
        for r in &self.ratios {
            let _ = writeln!(
                out,
                "| {} | {} / {} | {:.2} | {:.2} | {:.2} | {:.2} |",
                r.scenario, r.apigw, r.baseline, r.rps, r.p50, r.p99, r.cpu_per_req
            );
        }
        out.push('\n');
    }

    fn figures_table(&self, out: &mut String) {
        if self.figures.is_empty() {
            return;
        }
        out.push_str("| scenario | figure | value | errors | note |\n|---|---|--:|--:|---|\n");
        for f in &self.figures {
            let note = match (&f.note, &f.first_error) {
                (Some(n), Some(e)) => format!("{n}; first error: {e}"),
                (Some(n), None) => n.clone(),
                (None, Some(e)) => format!("first error: {e}"),
                (None, None) => String::new(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} {} | {} | {} |",
                f.scenario, f.name, f.value, f.unit, f.errors, note
            );
        }
        out.push('\n');
    }

    fn checks_list(&self, out: &mut String) {
        if self.checks.is_empty() {
            return;
        }
        out.push_str("Targets:\n\n");
        for c in &self.checks {
            let mark = match c.met {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "not measured",
            };
            let _ = writeln!(out, "- {}: **{mark}** ({})", c.target, c.detail);
        }
        out.push('\n');
    }
}

fn div(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// apigw and apigw-log each against every other target of the same scenario but the other.
fn ratios(rows: &[Row]) -> Vec<Ratio> {
    let gateway = |r: &&Row| GATEWAYS.contains(&r.target.as_str());
    let mut out = Vec::new();
    for apigw in rows.iter().filter(gateway) {
        for base in rows
            .iter()
            .filter(|r| r.scenario == apigw.scenario && !gateway(r))
        {
            let (a, b) = (&apigw.measured, &base.measured);
            out.push(Ratio {
                scenario: apigw.scenario.clone(),
                apigw: apigw.target.clone(),
                baseline: base.target.clone(),
                rps: div(a.rps, b.rps),
                p50: div(a.p50_ms, b.p50_ms),
                p99: div(a.p99_ms, b.p99_ms),
                cpu_per_req: div(a.cpu_us_per_req, b.cpu_us_per_req),
            });
        }
    }
    out
}

/// The access log's cost in each scenario with both gateways: 1 - apigw-log req/s / apigw req/s.
fn log_costs(rows: &[Row]) -> Vec<Figure> {
    let mut out = Vec::new();
    for lean in rows.iter().filter(|r| r.target == "apigw") {
        let logged = rows
            .iter()
            .find(|r| r.scenario == lean.scenario && r.target == LOG_TARGET);
        if let Some(logged) = logged {
            let cost = 100.0 * (1.0 - div(logged.measured.rps, lean.measured.rps));
            out.push(
                Figure::new(&lean.scenario, "access log cost", cost, "%")
                    .note("1 - apigw-log req/s / apigw req/s"),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{log_costs, ratios};
    use crate::{Measured, Proto, Row};

    fn row(scenario: &str, target: &str, rps: f64) -> Row {
        Row {
            scenario: scenario.into(),
            target: target.into(),
            proto: Proto::H1,
            concurrency: 1,
            rss_before_kib: 0,
            measured: Measured {
                rps,
                ..Measured::default()
            },
            rounds_rps: Vec::new(),
            note: None,
        }
    }

    #[test]
    fn both_gateways_against_the_peers_not_each_other() {
        let rows = [
            row("small-get", "apigw", 100.0),
            row("small-get", "apigw-log", 80.0),
            row("small-get", "nginx", 200.0),
            row("list-10m", "apigw", 10.0),
            row("list-10m", "nginx", 20.0),
        ];
        let pairs: Vec<_> = ratios(&rows)
            .into_iter()
            .map(|r| (r.scenario, r.apigw, r.baseline, r.rps))
            .collect();
        let pair = |s: &str, a: &str, rps| (s.to_string(), a.to_string(), "nginx".into(), rps);
        assert_eq!(
            pairs,
            [
                pair("small-get", "apigw", 0.5),
                pair("small-get", "apigw-log", 0.4),
                pair("list-10m", "apigw", 0.5),
            ]
        );
        let costs = log_costs(&rows);
        assert_eq!(costs.len(), 1);
        assert_eq!(
            (costs[0].scenario.as_str(), costs[0].unit),
            ("small-get", "%")
        );
        assert!((costs[0].value - 20.0).abs() < 1e-9);
    }
}
