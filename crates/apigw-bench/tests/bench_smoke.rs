//! `apigw-bench --quick`: the harness runs every scenario that needs no nginx or haproxy against
//! the gateway (access log off and on: `apigw` and `apigw-log`) and the sample server, exits 0,
//! and its JSON report counts no errors.
//! `small-get-nginx-backend` is not among them: its backend is nginx, and a run that selects it
//! fails when nginx is missing.

use std::process::Command;

/// A finished `apigw-bench` run: its JSON report, what it printed, and the directory of its
/// reports (`bench.json`, `bench.md`).
struct Run {
    report: serde_json::Value,
    stdout: String,
    dir: tempfile::TempDir,
}

/// Runs `apigw-bench` with `args`, its reports in a new temporary directory; it must exit 0.
fn bench(args: &[&str]) -> Run {
    let bench = std::path::Path::new(env!("CARGO_BIN_EXE_apigw-bench"));
    let dir = tempfile::tempdir().expect("temporary directory");
    let json = dir.path().join("bench.json");
    let out = Command::new(bench)
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--markdown")
        .arg(dir.path().join("bench.md"))
        .output()
        .expect("running apigw-bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "apigw-bench failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report = serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON report"))
        .expect("valid JSON");
    Run {
        report,
        stdout,
        dir,
    }
}

#[test]
fn quick_bench_runs_without_errors() {
    let bench_exe = std::path::Path::new(env!("CARGO_BIN_EXE_apigw-bench"));
    // The bench runs the `apigw` beside it, built with the workspace.
    let apigw = bench_exe.with_file_name(format!("apigw{}", std::env::consts::EXE_SUFFIX));
    assert!(
        apigw.exists(),
        "{} is missing: build the workspace (cargo build --workspace)",
        apigw.display()
    );
    let Run {
        report,
        stdout,
        dir,
    } = bench(&[
        "--quick",
        "--no-install",
        "--no-peers",
        "--concurrency",
        "8",
        "--scenarios",
        "small-get,small-get-c1,small-get-h2,small-get-h2-c1,list-10m,big-list,post-1m,discovery,remerge,watches,watch-ttfe,handshake",
    ]);
    assert_eq!(report["errors"], 0, "{stdout}");
    let rows = report["rows"].as_array().expect("rows");
    assert!(
        rows.iter()
            .any(|r| r["target"] == "apigw" && r["requests"].as_u64() > Some(0)),
        "no request went through apigw: {stdout}"
    );
    assert!(
        rows.iter().all(|r| r["errors"] == 0),
        "a row has errors: {stdout}"
    );
    let figures = report["figures"].as_array().expect("figures");
    assert!(figures.iter().any(|f| f["scenario"] == "watches"));
    // The access log on, in each small GET, and its cost against the lean gateway.
    for scenario in [
        "small-get",
        "small-get-c1",
        "small-get-h2",
        "small-get-h2-c1",
    ] {
        assert!(
            rows.iter().any(|r| r["scenario"] == scenario
                && r["target"] == "apigw-log"
                && r["requests"].as_u64() > Some(0)),
            "no apigw-log row in {scenario}: {stdout}"
        );
        assert!(
            figures
                .iter()
                .any(|f| f["scenario"] == scenario && f["name"] == "access log cost"),
            "no access log cost in {scenario}: {stdout}"
        );
    }
    assert!(
        report["ratios"]
            .as_array()
            .expect("ratios")
            .iter()
            .any(|r| r["apigw"] == "apigw-log" && r["baseline"] == "direct"),
        "{stdout}"
    );
    assert!(rows.iter().all(|r| r.get("rounds_rps").is_none()));
    // The big list in quick mode: 32 MiB, read whole through the gateway and directly.
    for target in ["direct", "apigw"] {
        let row = rows
            .iter()
            .find(|r| r["scenario"] == "big-list" && r["target"] == target)
            .unwrap_or_else(|| panic!("no big-list row for {target}: {stdout}"));
        assert_eq!(row["requests"], 1, "{row}");
        assert!(
            figures
                .iter()
                .any(|f| f["scenario"] == "big-list" && f["name"] == format!("{target} RSS growth")),
            "{stdout}"
        );
    }
    assert_eq!(report["settings"]["big_list_bytes"], 32 << 20);
    assert!(std::fs::read_to_string(dir.path().join("bench.md"))
        .expect("the Markdown report")
        .contains("| small-get | apigw |"));
}

/// `apigw-bench --quick --scenarios kube-aggregator`: upstream's control plane (scripts/upstream
/// builds it, as the README's test command does first) and apigw in front of the same backends;
/// every row has requests and no errors, kube-aggregator's among them, and both front doors
/// serve the same legacy `/apis` for the 50 APIServices, byte for byte in length.
#[test]
fn quick_bench_runs_against_kube_aggregator() {
    let Run { report, stdout, .. } = bench(&[
        "--quick",
        "--no-install",
        "--no-peers",
        "--no-log-target",
        "--concurrency",
        "8",
        "--scenarios",
        "kube-aggregator",
    ]);
    let rows = report["rows"].as_array().expect("rows");
    for (scenario, target) in [
        ("kube-aggregator-sample", "kube-aggregator"),
        ("kube-aggregator-sample", "apigw"),
        ("kube-aggregator-small-get-h2", "kube-aggregator"),
        ("kube-aggregator-small-get-h2", "apigw-no-apf"),
    ] {
        assert!(
            rows.iter().any(|r| r["scenario"] == scenario
                && r["target"] == target
                && r["requests"].as_u64() > Some(0)
                && r["errors"] == 0),
            "no {target} row in {scenario}: {stdout}"
        );
    }
    let figures = report["figures"].as_array().expect("figures");
    let size = |door: &str| {
        figures
            .iter()
            .find(|f| {
                f["scenario"] == "kube-aggregator-discovery-legacy"
                    && f["name"] == format!("{door} /apis bytes")
            })
            .and_then(|f| f["value"].as_f64())
    };
    assert!(size("apigw").is_some(), "{stdout}");
    assert_eq!(size("apigw"), size("kube-aggregator"), "{stdout}");
}

/// `apigw-bench --quick --scenarios apf-cost`: four gateways (APF on and off, access log off
/// and on) through the same rounds, and a paired on/off figure per pair and variant.
#[test]
fn quick_apf_cost_pairs_its_rounds() {
    let Run { report, stdout, .. } = bench(&[
        "--quick",
        "--no-install",
        "--no-peers",
        "--concurrency",
        "4",
        "--scenarios",
        "apf-cost",
    ]);
    let rows = report["rows"].as_array().expect("rows");
    for scenario in ["apf-cost", "apf-cost-h2", "apf-cost-c16", "apf-cost-paced"] {
        for target in ["apigw", "apigw-no-apf", "apigw-log", "apigw-log-no-apf"] {
            let row = rows
                .iter()
                .find(|r| r["scenario"] == scenario && r["target"] == target)
                .unwrap_or_else(|| panic!("no {scenario} row for {target}: {stdout}"));
            assert!(row["requests"].as_u64() > Some(0), "{row}");
            assert_eq!(row["errors"], 0, "{row}");
            assert_eq!(row["rounds_rps"].as_array().map(Vec::len), Some(2), "{row}");
        }
        for pair in ["access log off", "access log on"] {
            let name = format!("APF on/off CPU per request ({pair})");
            let figure = report["figures"]
                .as_array()
                .expect("figures")
                .iter()
                .find(|f| f["scenario"] == scenario && f["name"] == name.as_str())
                .unwrap_or_else(|| panic!("no {name} in {scenario}: {stdout}"));
            assert!(figure["value"].as_f64() > Some(0.0), "{figure}");
            let note = figure["note"].as_str().unwrap_or_default();
            assert!(note.contains("median of 2 paired rounds"), "{figure}");
        }
    }
    // Paced at 0.6 of the slowest gateway's rate in apf-cost-c16: no faster, whoever serves.
    let rps = |scenario: &str, target: &str| {
        rows.iter()
            .find(|r| r["scenario"] == scenario && r["target"] == target)
            .and_then(|r| r["rps"].as_f64())
            .unwrap_or_default()
    };
    let gateways = ["apigw", "apigw-no-apf", "apigw-log", "apigw-log-no-apf"];
    let slowest = gateways
        .iter()
        .map(|g| rps("apf-cost-c16", g))
        .fold(f64::INFINITY, f64::min);
    for g in gateways {
        // Each of the 16 workers may take one turn more than the rate in the 1 s window.
        let paced = rps("apf-cost-paced", g);
        assert!(
            paced <= 0.6 * slowest + 16.5,
            "{g}: {paced} req/s paced, slowest {slowest}"
        );
    }
    assert!(
        stdout.contains("apf-cost: apigw CPU per request with APF <= 1.03x without"),
        "{stdout}"
    );
}
