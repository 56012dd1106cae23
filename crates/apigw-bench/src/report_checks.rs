//! The performance targets of issue 10, checked against one run's rows and figures (of the
//! `apigw` target, access log off): small-GET throughput at least 1.2x the better of nginx and
//! haproxy with p99 no worse, p50 at concurrency 1 at most 0.8x the better peer's over
//! HTTP/1.1 and (issue 21) at most the better peer's over HTTP/2, under 16 KiB of gateway
//! memory per idle watch, under 8 MiB of growth while relaying 10 MiB responses, under 8 MiB of
//! growth while streaming the big list (issue 3: 1 GiB), and no errors. Against
//! kube-aggregator in the same run (issue 30), in every row of the kube-aggregator scenarios:
//! CPU per request at most 0.25x and p99 at most 0.5x; and what API Priority and Fairness
//! costs (issue 31): apigw's CPU per request at most 1.03x apigw-no-apf's.

use super::{Figure, Row};
use serde::Serialize;

/// One performance target and whether this run met it.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub target: String,
    pub met: Option<bool>,
    pub detail: String,
}

const PEERS: [&str; 2] = ["nginx", "haproxy"];

fn row<'a>(rows: &'a [Row], scenario: &str, target: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.target == target)
}

/// The peer with the most requests/s in `scenario` (or the lowest p50, with `by_p50`).
fn better_peer<'a>(rows: &'a [Row], scenario: &str, by_p50: bool) -> Option<&'a Row> {
    PEERS
        .iter()
        .filter_map(|p| row(rows, scenario, p))
        .filter(|r| r.measured.requests > 0)
        .min_by(|a, b| {
            let (a, b) = (&a.measured, &b.measured);
            if by_p50 {
                a.p50_ms.total_cmp(&b.p50_ms)
            } else {
                b.rps.total_cmp(&a.rps)
            }
        })
}

fn throughput(rows: &[Row]) -> Check {
    let target = "small GET: apigw req/s >= 1.2x the better peer, p99 no worse".to_string();
    let (Some(a), Some(p)) = (
        row(rows, "small-get", "apigw"),
        better_peer(rows, "small-get", false),
    ) else {
        return Check {
            target,
            met: None,
            detail: "needs small-get with nginx or haproxy".into(),
        };
    };
    let (a, pm) = (&a.measured, &p.measured);
    let ratio = a.rps / pm.rps.max(1e-9);
    Check {
        met: Some(ratio >= 1.2 && a.p99_ms <= pm.p99_ms),
        detail: format!(
            "{:.0} vs {} {:.0} req/s = {ratio:.2}x; p99 {:.2} vs {:.2} ms",
            a.rps, p.target, pm.rps, a.p99_ms, pm.p99_ms
        ),
        target,
    }
}

/// apigw's p50 in `scenario` at most `limit` times the better peer's.
fn latency(rows: &[Row], scenario: &str, what: &str, limit: f64) -> Check {
    let target = format!("{what}: apigw p50 <= {limit:.1}x the better peer");
    let (Some(a), Some(p)) = (
        row(rows, scenario, "apigw"),
        better_peer(rows, scenario, true),
    ) else {
        return Check {
            target,
            met: None,
            detail: format!("needs {scenario} with nginx or haproxy"),
        };
    };
    let ratio = a.measured.p50_ms / p.measured.p50_ms.max(1e-9);
    Check {
        met: Some(ratio <= limit),
        detail: format!(
            "p50 {:.3} vs {} {:.3} ms = {ratio:.2}x",
            a.measured.p50_ms, p.target, p.measured.p50_ms
        ),
        target,
    }
}

fn watch_memory(figures: &[Figure]) -> Check {
    let target = "idle watch < 16 KiB of gateway RSS each".to_string();
    match figures
        .iter()
        .find(|f| f.name == "apigw RSS per idle watch")
    {
        Some(f) => Check {
            met: Some(f.errors == 0 && f.value < 16.0 * 1024.0),
            detail: format!(
                "{:.0} bytes per watch; {}",
                f.value,
                f.note.clone().unwrap_or_default()
            ),
            target,
        },
        None => Check {
            target,
            met: None,
            detail: "needs the watches scenario".into(),
        },
    }
}

fn list_memory(rows: &[Row]) -> Check {
    let target = "10 MiB list: gateway RSS growth < 8 MiB".to_string();
    match row(rows, "list-10m", "apigw") {
        Some(r) => {
            let growth = r
                .measured
                .usage
                .rss_peak_kib
                .saturating_sub(r.rss_before_kib);
            Check {
                met: Some(growth < 8 * 1024),
                detail: format!(
                    "{:.1} MiB growth at concurrency {}",
                    growth as f64 / 1024.0,
                    r.concurrency
                ),
                target,
            }
        }
        None => Check {
            target,
            met: None,
            detail: "needs the list-10m scenario".into(),
        },
    }
}

fn big_list_memory(figures: &[Figure]) -> Check {
    let target = "big list (1 GiB by default): gateway RSS growth < 8 MiB".to_string();
    let growth = figures
        .iter()
        .find(|f| f.scenario == "big-list" && f.name == "apigw RSS growth");
    let throughput = figures
        .iter()
        .find(|f| f.scenario == "big-list" && f.name == "apigw throughput");
    match (growth, throughput) {
        (Some(g), Some(t)) => Check {
            met: Some(t.errors == 0 && g.value * 1024.0 < super::big_list::GROWTH_LIMIT_KIB as f64),
            detail: format!(
                "{:.1} MiB growth ({}); {:.0} MiB/s",
                g.value,
                g.note.clone().unwrap_or_default(),
                t.value
            ),
            target,
        },
        _ => Check {
            target,
            met: None,
            detail: "needs the big-list scenario".into(),
        },
    }
}

/// In every row of the kube-aggregator scenarios, `apigw`'s figure `what` (read by `figure`)
/// at most `limit` times `peer`'s.
fn against(rows: &[Row], peer: &str, what: &str, limit: f64, figure: fn(&Row) -> f64) -> Check {
    let target = format!("kube-aggregator scenarios: apigw {what} <= {limit:.2}x {peer}'s");
    let mut details = Vec::new();
    let mut met = true;
    for a in rows
        .iter()
        .filter(|r| r.scenario.starts_with("kube-aggregator") && r.target == "apigw")
    {
        let Some(p) = row(rows, &a.scenario, peer) else {
            continue;
        };
        let ratio = figure(a) / figure(p).max(1e-9);
        met &= ratio <= limit;
        details.push(format!(
            "{} {:.1} vs {:.1} = {ratio:.2}x",
            a.scenario,
            figure(a),
            figure(p)
        ));
    }
    if details.is_empty() {
        return Check {
            target,
            met: None,
            detail: format!("needs a kube-aggregator scenario with {peer}"),
        };
    }
    Check {
        target,
        met: Some(met),
        detail: details.join("; "),
    }
}

/// Every target, checked.
pub fn checks(rows: &[Row], figures: &[Figure], errors: u64) -> Vec<Check> {
    let cpu = |r: &Row| r.measured.cpu_us_per_req;
    let p99 = |r: &Row| r.measured.p99_ms;
    vec![
        against(rows, "kube-aggregator", "CPU µs per request", 0.25, cpu),
        against(rows, "kube-aggregator", "p99 ms", 0.5, p99),
        against(
            rows,
            "apigw-no-apf",
            "CPU µs per request (APF's cost)",
            1.03,
            cpu,
        ),
        throughput(rows),
        latency(rows, "small-get-c1", "small GET at concurrency 1", 0.8),
        latency(
            rows,
            "small-get-h2-c1",
            "small GET over HTTP/2 at concurrency 1",
            1.0,
        ),
        watch_memory(figures),
        list_memory(rows),
        big_list_memory(figures),
        Check {
            target: "no errors".into(),
            met: Some(errors == 0),
            detail: format!("{errors} error(s)"),
        },
    ]
}
