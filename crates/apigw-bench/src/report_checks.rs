//! The performance targets of issue 10, checked against one run's rows and figures (of the
//! `apigw` target, access log off): small-GET throughput at least 1.2x the better of nginx and
//! haproxy with p99 no worse, p50 at concurrency 1 at most 0.8x the better peer's over
//! HTTP/1.1 and (issue 21) at most the better peer's over HTTP/2, under 16 KiB of gateway
//! memory per idle watch, under 8 MiB of growth while relaying 10 MiB responses, under 8 MiB of
//! growth while streaming the big list (issue 3: 1 GiB), and no errors. Against
//! kube-aggregator in the same run (issue 30): in every proxied request-rate row, CPU per
//! request at most 0.25x and p99 at most 0.5x; discovery at least as many requests/s; memory
//! per idle watch at most 0.25x. And what API Priority and Fairness costs (issue 31): apigw's
//! CPU per request at most 1.03x apigw-no-apf's, from the `apf-cost` scenario's paired rounds
//! when it ran, else in the kube-aggregator rows.

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

/// Issue 21's, still open: over HTTP/2, apigw's CPU per request at most haproxy's.
fn h2_cpu(rows: &[Row]) -> Check {
    let target = "small GET over HTTP/2: apigw CPU per request <= 1.0x haproxy's".to_string();
    match (
        row(rows, "small-get-h2", "apigw"),
        row(rows, "small-get-h2", "haproxy"),
    ) {
        (Some(a), Some(h)) => {
            let (a, h) = (a.measured.cpu_us_per_req, h.measured.cpu_us_per_req);
            let ratio = a / h.max(1e-9);
            Check {
                met: Some(ratio <= 1.0),
                detail: format!("{a:.1} vs {h:.1} µs = {ratio:.2}x"),
                target,
            }
        }
        _ => Check {
            target,
            met: None,
            detail: "needs small-get-h2 with haproxy".into(),
        },
    }
}

/// Memory per idle watch through apigw at most 0.25x kube-aggregator's.
fn kube_watch_memory(figures: &[Figure]) -> Check {
    let target = "kube-aggregator watches: apigw RSS per idle watch <= 0.25x kube-aggregator's";
    let find = |name: &str| {
        figures
            .iter()
            .find(|f| f.scenario == "kube-aggregator-watches" && f.name == name)
    };
    match (
        find("apigw RSS per idle watch"),
        find("kube-aggregator RSS per idle watch"),
    ) {
        (Some(a), Some(k)) => {
            let ratio = a.value / k.value.max(1.0);
            Check {
                target: target.into(),
                met: Some(a.errors == 0 && k.errors == 0 && ratio <= 0.25),
                detail: format!("{:.0} vs {:.0} bytes = {ratio:.2}x", a.value, k.value),
            }
        }
        _ => Check {
            target: target.into(),
            met: None,
            detail: "needs the kube-aggregator scenario".into(),
        },
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

/// True for the proxied request-rate rows of the kube-aggregator scenarios.
fn proxied(scenario: &str) -> bool {
    scenario.starts_with("kube-aggregator")
        && (scenario.contains("-sample") || scenario.contains("-small-get"))
}

fn discovery(scenario: &str) -> bool {
    scenario.starts_with("kube-aggregator") && scenario.contains("-discovery-")
}

/// In every row of the kube-aggregator scenarios that `rows_of` picks, `apigw`'s figure `what`
/// (read by `figure`) at most `limit` times `peer`'s.
fn against(
    rows: &[Row],
    (rows_of, which): (fn(&str) -> bool, &str),
    peer: &str,
    (what, limit): (&str, f64),
    figure: fn(&Row) -> f64,
) -> Check {
    let target = format!("kube-aggregator {which}: apigw {what} <= {limit:.2}x {peer}'s");
    let mut details = Vec::new();
    let mut met = true;
    for a in rows
        .iter()
        .filter(|r| rows_of(&r.scenario) && r.target == "apigw")
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
            detail: format!("needs a kube-aggregator scenario ({which}) with {peer}"),
        };
    }
    Check {
        target,
        met: Some(met),
        detail: details.join("; "),
    }
}

/// APF's cost from the `apf-cost` scenario, when it ran: every paired on/off ratio of CPU
/// per request (the median of its rounds) at most 1.03.
fn apf_cost(figures: &[Figure]) -> Option<Check> {
    let paired: Vec<&Figure> = figures
        .iter()
        .filter(|f| f.scenario.starts_with(super::apf_cost::NAME))
        .filter(|f| f.name.starts_with(super::apf_cost::FIGURE))
        .collect();
    if paired.is_empty() {
        return None;
    }
    let met = paired.iter().all(|f| f.errors == 0 && f.value <= 1.03);
    let detail = paired
        .iter()
        .map(|f| format!("{} {}: {:.3}x", f.scenario, f.name, f.value))
        .collect::<Vec<_>>()
        .join("; ");
    Some(Check {
        target: "apf-cost: apigw CPU per request with APF <= 1.03x without (paired rounds)".into(),
        met: Some(met),
        detail,
    })
}

/// Every target, checked.
pub fn checks(rows: &[Row], figures: &[Figure], errors: u64) -> Vec<Check> {
    let cpu = |r: &Row| r.measured.cpu_us_per_req;
    let p99 = |r: &Row| r.measured.p99_ms;
    // Fewer seconds per request: at least as fast.
    let inverse_rps = |r: &Row| 1.0 / r.measured.rps.max(1e-9);
    let rates = (proxied as fn(&str) -> bool, "request rates");
    let kube = "kube-aggregator";
    let apf = ("CPU µs per request (APF's cost)", 1.03);
    vec![
        against(rows, rates, kube, ("CPU µs per request", 0.25), cpu),
        against(rows, rates, kube, ("p99 ms", 0.5), p99),
        against(
            rows,
            (discovery, "discovery"),
            kube,
            ("s per request", 1.0),
            inverse_rps,
        ),
        kube_watch_memory(figures),
        apf_cost(figures).unwrap_or_else(|| against(rows, rates, "apigw-no-apf", apf, cpu)),
        throughput(rows),
        latency(rows, "small-get-c1", "small GET at concurrency 1", 0.8),
        latency(
            rows,
            "small-get-h2-c1",
            "small GET over HTTP/2 at concurrency 1",
            1.0,
        ),
        h2_cpu(rows),
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
