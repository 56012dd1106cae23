//! One benchmark run: start the world (the sample server, the `apigw` gateway, the `apigw-log`
//! gateway when a small GET wants it, the peers), decide which baselines can run, run the
//! selected scenarios in order, and gather the rows and figures into a [`Report`].

use super::env::{Env, Proc};
use super::load::{Proto, Target};
use super::peers::{self, Peer};
use super::report::Report;
use super::stats::Machine;
use super::{
    apf_cost, big_list, kube, nginx_backend, scenarios, watches, BenchArgs, Figure, Row, Settings,
};

/// The targets of one run and what was left out.
struct World {
    env: Env,
    gateway: Proc,
    apigw: Target,
    /// The `apigw-log` gateway (access log on), unless `--no-log-target`.
    log_gateway: Option<(Proc, Target)>,
    direct: Target,
    peers: Vec<Peer>,
    skipped: Vec<String>,
    errors: Vec<String>,
    /// Not allowed to apt-get install (`--no-install` or `--quick`).
    no_install: bool,
    no_peers: bool,
    no_log_target: bool,
    upstream: Option<std::path::PathBuf>,
}

impl World {
    /// direct, apigw, then each peer that is up.
    fn targets(&self) -> Vec<Target> {
        let mut out = vec![self.direct.clone(), self.apigw.clone()];
        out.extend(self.peers.iter().map(|p| p.target.clone()));
        out
    }

    /// direct, apigw, apigw-log, then each peer that is up and speaks `proto`.
    fn small_get_targets(&self, proto: Proto) -> Vec<Target> {
        let mut out = vec![self.direct.clone(), self.apigw.clone()];
        out.extend(self.log_gateway.iter().map(|(_, t)| t.clone()));
        out.extend(
            self.peers
                .iter()
                .filter(|p| p.speaks(proto))
                .map(|p| p.target.clone()),
        );
        out
    }

    fn peer(&self, name: &str) -> Option<&Target> {
        self.peers
            .iter()
            .map(|p| &p.target)
            .find(|t| t.name == name)
    }
}

/// Scenarios measured against nginx and haproxy. small-get-nginx-backend starts its own,
/// in front of its own backend; the others share the pair started at the beginning of the run.
const NEEDS_PEERS: [&str; 9] = [
    "small-get",
    "small-get-c1",
    "small-get-h2",
    "small-get-h2-c1",
    nginx_backend::NAME,
    "list-10m",
    "post-1m",
    "discovery",
    "handshake",
];

/// Scenarios of the shared targets that measure `apigw-log` too.
const SMALL_GETS: [&str; 4] = [
    "small-get",
    "small-get-c1",
    "small-get-h2",
    "small-get-h2-c1",
];

/// What starting the baselines gave: the peers up, and notes on those left out.
#[derive(Default)]
struct Baselines {
    peers: Vec<Peer>,
    skipped: Vec<String>,
    errors: Vec<String>,
}

/// Starts nginx and haproxy when a selected scenario compares against them.
async fn start_peers(args: &BenchArgs, env: &Env, wanted: &[&str]) -> Baselines {
    let mut b = Baselines::default();
    if !wanted.iter().any(|s| NEEDS_PEERS.contains(s)) {
        return b;
    }
    if args.no_peers {
        b.skipped
            .push("nginx, haproxy: left out (--no-peers)".into());
        return b;
    }
    let missing = ["nginx", "haproxy"].iter().any(|p| !peers::installed(p));
    if missing && !args.no_install && !args.quick {
        if let Err(e) = peers::install(&["nginx", "haproxy"]) {
            b.errors.push(format!("{e:#}"));
        }
    }
    if !wanted
        .iter()
        .any(|s| NEEDS_PEERS.contains(s) && *s != nginx_backend::NAME)
    {
        return b;
    }
    for name in ["nginx", "haproxy"] {
        if !peers::installed(name) {
            b.skipped.push(format!("{name}: not installed"));
            continue;
        }
        let started = match name {
            "nginx" => peers::nginx(env).await,
            _ => peers::haproxy(env).await,
        };
        match started {
            Ok(peer) => b.peers.push(peer),
            Err(e) => b.errors.push(format!("starting {name}: {e:#}")),
        }
    }
    b
}

/// Runs the selected scenarios.
pub async fn run(args: &BenchArgs, s: &Settings, wanted: &[&str]) -> anyhow::Result<Report> {
    let machine = Machine::read();
    eprintln!("apigw-bench: {machine}");
    let env = Env::start(
        args.apigw.clone(),
        args.gateway_arg.clone(),
        args.gateway_log.clone(),
    )
    .await?;
    let (gateway, apigw) = env.gateway("apigw", &[env.wardle_apiservice()?]).await?;
    let log_gateway = if args.no_log_target || !wanted.iter().any(|s| SMALL_GETS.contains(s)) {
        None
    } else {
        let services = [env.wardle_apiservice()?];
        Some(
            env.log_gateway_to("apigw-log", &services, env.sample_addr)
                .await?,
        )
    };
    let direct = env.direct()?;
    let mut baselines = start_peers(args, &env, wanted).await;
    if args.no_log_target {
        baselines
            .skipped
            .push("apigw-log: left out (--no-log-target)".into());
    }
    let mut w = World {
        env,
        gateway,
        apigw,
        log_gateway,
        direct,
        peers: baselines.peers,
        skipped: baselines.skipped,
        errors: baselines.errors,
        no_install: args.no_install || args.quick,
        no_peers: args.no_peers,
        no_log_target: args.no_log_target,
        upstream: args.upstream.clone(),
    };
    let mut rows = Vec::new();
    let mut figures = Vec::new();
    for scenario in wanted {
        one(scenario, s, &mut w, &mut rows, &mut figures).await;
    }
    if let Some(status) = w.gateway.exited() {
        w.errors
            .push(format!("the gateway exited during the run ({status})"));
    }
    if let Some(status) = w.log_gateway.as_mut().and_then(|(p, _)| p.exited()) {
        w.errors.push(format!(
            "the apigw-log gateway exited during the run ({status})"
        ));
    }
    for peer in &mut w.peers {
        if let Some(status) = peer.proc.exited() {
            let name = &peer.proc.name;
            w.errors
                .push(format!("{name} exited during the run ({status})"));
        }
    }
    Ok(Report::new(machine, s, rows, figures, w.skipped, w.errors))
}

/// Runs one scenario, adding its rows and figures.
async fn one(
    scenario: &str,
    s: &Settings,
    w: &mut World,
    rows: &mut Vec<Row>,
    figures: &mut Vec<Figure>,
) {
    let all = w.targets();
    let before = rss_before(&w.small_get_targets(Proto::H1));
    let mut new_rows = match scenario {
        small if SMALL_GETS.contains(&small) => small_get(s, w, scenario).await,
        "list-10m" => scenarios::list_10m(s, &all).await,
        "post-1m" => scenarios::post_1m(s, &all).await,
        "handshake" => scenarios::handshakes(s, &all).await,
        nginx_backend::NAME => {
            let opts = nginx_backend::Options {
                may_install: !w.no_install,
                no_peers: w.no_peers,
                log_target: !w.no_log_target,
            };
            match nginx_backend::run(s, &w.env, &opts).await {
                Ok((r, skipped)) => {
                    w.skipped.extend(skipped);
                    r
                }
                Err(e) => {
                    w.errors.push(format!("{scenario}: {e:#}"));
                    Vec::new()
                }
            }
        }
        kube::RBAC | kube::ALLOW => {
            let opts = kube::Options {
                upstream: w.upstream.clone(),
                log_target: !w.no_log_target,
            };
            match kube::run(s, &w.env, &opts, scenario).await {
                Ok(outcome) => {
                    w.skipped.extend(outcome.skipped);
                    figures.extend(outcome.figures);
                    outcome.rows
                }
                Err(e) => {
                    w.errors.push(format!("{scenario}: {e:#}"));
                    Vec::new()
                }
            }
        }
        apf_cost::NAME => match apf_cost::run(s, &w.env).await {
            Ok((r, f)) => {
                figures.extend(f);
                r
            }
            Err(e) => {
                w.errors.push(format!("{scenario}: {e:#}"));
                Vec::new()
            }
        },
        "big-list" => match big_list(s, w).await {
            Ok((r, f)) => {
                figures.extend(f);
                r
            }
            Err(e) => {
                w.errors.push(format!("big-list: {e:#}"));
                Vec::new()
            }
        },
        "watch-ttfe" => match watches::seed(&w.direct).await {
            Ok(()) => watches::first_event(s, &[w.direct.clone(), w.apigw.clone()]).await,
            Err(e) => {
                w.errors.push(format!("watch-ttfe: {e:#}"));
                Vec::new()
            }
        },
        "watches" => {
            match idle_watches(s, w).await {
                Ok(f) => figures.extend(f),
                Err(e) => w.errors.push(format!("watches: {e:#}")),
            }
            Vec::new()
        }
        "remerge" => {
            match scenarios::many_apiservices(&w.env, s.discovery_services, s.discovery_groups)
                .and_then(|svcs| watches::remerge(&svcs, s.remerge_runs))
            {
                Ok(f) => figures.extend(f),
                Err(e) => w.errors.push(format!("remerge: {e:#}")),
            }
            Vec::new()
        }
        "discovery" => match discovery(s, w).await {
            Ok((r, f)) => {
                figures.extend(f);
                r
            }
            Err(e) => {
                w.errors.push(format!("discovery: {e:#}"));
                Vec::new()
            }
        },
        other => {
            w.errors.push(format!("no runner for scenario {other}"));
            Vec::new()
        }
    };
    // A scenario that measured memory just before its own transfer keeps that figure.
    // By name (apigw-log is not apigw), else by prefix (nginx-static is nginx).
    for row in new_rows.iter_mut().filter(|r| r.rss_before_kib == 0) {
        row.rss_before_kib = before
            .iter()
            .find(|(name, _)| row.target == *name)
            .or_else(|| {
                before
                    .iter()
                    .find(|(name, _)| row.target.starts_with(name.as_str()))
            })
            .map_or(0, |(_, kib)| *kib);
    }
    rows.extend(new_rows);
}

/// One of the small GETs against the shared targets (`apigw-log` among them), by the suffix
/// of its name.
async fn small_get(s: &Settings, w: &World, scenario: &str) -> Vec<Row> {
    let suffix = scenario.strip_prefix("small-get").unwrap_or(scenario);
    match scenarios::small_get_variants(s)
        .into_iter()
        .find(|(v, ..)| *v == suffix)
    {
        Some((_, proto, c)) => {
            scenarios::small_get(s, &w.small_get_targets(proto), scenario, proto, c).await
        }
        None => Vec::new(),
    }
}

/// Resident memory of each target's processes now.
fn rss_before(targets: &[Target]) -> Vec<(String, u64)> {
    targets
        .iter()
        .map(|t| (t.name.clone(), t.rss_kib()))
        .collect()
}

/// Idle watches through a fresh gateway, so that memory freed by earlier scenarios (and kept
/// by the allocator) does not hide what the watches take.
async fn idle_watches(s: &Settings, w: &World) -> anyhow::Result<Vec<Figure>> {
    let (_proc, apigw) = w
        .env
        .gateway("apigw-watches", &[w.env.wardle_apiservice()?])
        .await?;
    let backend = w.direct.pids.first().copied().unwrap_or(0);
    Ok(watches::idle("watches", &apigw, backend, s.watches).await)
}

/// The big list through a fresh gateway, so that memory the allocator kept from earlier
/// scenarios neither hides nor inflates the growth; straight from the backend first.
async fn big_list(s: &Settings, w: &World) -> anyhow::Result<(Vec<Row>, Vec<Figure>)> {
    let (_proc, apigw) = w
        .env
        .gateway("apigw-big-list", &[w.env.wardle_apiservice()?])
        .await?;
    Ok(big_list::run(s, "big-list", &[&w.direct, &apigw]).await)
}

/// The discovery scenario: a second gateway with many APIServices, against nginx serving the
/// same documents as files.
async fn discovery(s: &Settings, w: &World) -> anyhow::Result<(Vec<Row>, Vec<Figure>)> {
    let services = scenarios::many_apiservices(&w.env, s.discovery_services, s.discovery_groups)?;
    eprintln!(
        "apigw-bench: discovery: starting a gateway with {} APIServices",
        services.len()
    );
    let (_proc, apigw) = w.env.gateway("apigw-discovery", &services).await?;
    let (rows, sizes) = scenarios::discovery(s, &apigw, w.peer("nginx"), w.env.dir.path()).await?;
    let figures = sizes
        .into_iter()
        .map(|(scenario, len)| {
            Figure::new(&scenario, "document size", len as f64, "bytes")
                .note(format!("{} APIServices", services.len()))
        })
        .collect();
    Ok((rows, figures))
}
