//! The output of `apigw-bench`: every row and figure, the ratios against the baselines of the
//! same run (apigw/nginx, apigw/haproxy, apigw/direct), the targets of issue 10 checked, and the
//! machine line; as JSON and as a Markdown table.

use super::report_checks::Check;
use super::stats::Machine;
use super::{Figure, Row, Settings};
use anyhow::Context as _;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// apigw against one baseline in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub scenario: String,
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
        figures: Vec<Figure>,
        skipped: Vec<String>,
        problems: Vec<String>,
    ) -> Self {
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
        let _ = writeln!(
            out,
            "Window {:.1} s after {:.1} s warm-up; errors: {}\n",
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
            let note = match (&r.note, &m.first_error) {
                (Some(n), Some(e)) => format!("{n}; first error: {e}"),
                (Some(n), None) => n.clone(),
                (None, Some(e)) => format!("first error: {e}"),
                (None, None) => String::new(),
            };
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
            "| scenario | apigw / | req/s | p50 | p99 | CPU/req |\n|---|---|--:|--:|--:|--:|\n",
        );
        for r in &self.ratios {
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
                r.scenario, r.baseline, r.rps, r.p50, r.p99, r.cpu_per_req
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

/// apigw against every other target of the same scenario.
fn ratios(rows: &[Row]) -> Vec<Ratio> {
    let div = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let mut out = Vec::new();
    for apigw in rows.iter().filter(|r| r.target == "apigw") {
        for base in rows
            .iter()
            .filter(|r| r.scenario == apigw.scenario && r.target != "apigw")
        {
            let (a, b) = (&apigw.measured, &base.measured);
            out.push(Ratio {
                scenario: apigw.scenario.clone(),
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
