//! `apigw doctor`: walks the path a request takes to each APIService's backend, as the gateway
//! would take it (manifest, name resolution, TCP, TLS with the served chain explained, the proxy
//! client certificate, the discovery GET), and reports every step as ok, warning or failed with
//! the one fix to make, plus the curl and openssl commands that repeat each check by hand. It
//! also checks the gateway's own serving and proxy client certificate files, and trust from the
//! backends' end ([`trust`]): whether they accept apigw's identity, as the cluster's
//! `extension-apiserver-authentication` ConfigMap tells them to.
//!
//! - [`report`]: the findings and their text and JSON forms.
//! - `checks`: the walk; `answers`: what the backend's answers mean; `probe`: the recording TLS probe; `chain`: the served chain explained;
//!   `own_certs`: the gateway's files; `recipes`: the commands to run by hand.

mod answers;
mod chain;
mod checks;
mod own_certs;
mod probe;
pub mod recipes;
pub mod report;
pub mod trust;

pub use report::{Recipe, Report, ServiceReport, Status, Step};

use apigw_availability::{Condition, Member, Members, State};
use apigw_core::certs::inspect::OutputFormat;
use apigw_gateway::config::{Config, Flags};
use apigw_registry::{load_dir, parse_manifest, ApiService, Manifest, BACKEND_KIND};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The flags of `apigw doctor`.
#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    /// APIServices to check (`<version>.<group>`); all when none are named.
    pub apiservices: Vec<String>,
    #[command(flatten)]
    pub flags: Flags,
    /// Report format: text for people, json for scripts.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Where each APIService's caBundle is written for the printed commands
    /// [default: $TMPDIR/apigw-doctor].
    #[arg(long)]
    pub ca_dir: Option<PathBuf>,
    /// The backends' front-proxy settings: the kube-system/extension-apiserver-authentication
    /// ConfigMap as `kubectl get configmap -o yaml` writes it [default: read from the cluster
    /// in cluster mode].
    #[arg(long, value_name = "FILE")]
    pub extension_apiserver_authentication: Option<PathBuf>,
}

/// What to diagnose.
#[derive(Debug, Clone)]
pub struct Options {
    /// APIService names; empty means all.
    pub names: Vec<String>,
    pub ca_dir: PathBuf,
    /// `--extension-apiserver-authentication`.
    pub trust_file: Option<PathBuf>,
}

/// Runs `apigw doctor`: prints the report; failure when any check failed.
pub async fn command(args: DoctorArgs) -> ExitCode {
    let report = match Config::load(&args.flags) {
        Ok(cfg) => {
            let opts = Options {
                names: args.apiservices,
                ca_dir: args.ca_dir.unwrap_or_else(recipes::default_ca_dir),
                trust_file: args.extension_apiserver_authentication,
            };
            diagnose(&cfg, &opts).await
        }
        Err(problems) => Report {
            gateway: problems
                .iter()
                .map(|p| {
                    Step::failed(
                        "config",
                        "InvalidConfig",
                        p.to_string(),
                        format!("correct {}", p.at),
                    )
                })
                .collect(),
            apiservices: Vec::new(),
        },
    };
    match args.output {
        OutputFormat::Text => print!("{}", report.to_text()),
        OutputFormat::Json => match serde_json::to_string_pretty(&report.to_json()) {
            Ok(json) => println!("{json}"),
            Err(e) => eprintln!("error: encoding the report: {e}"),
        },
    }
    if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Diagnoses the gateway configured by `cfg`.
pub async fn diagnose(cfg: &Config, opts: &Options) -> Report {
    let mut report = Report {
        gateway: own_certs::check(cfg),
        apiservices: Vec::new(),
    };
    if cfg.authz.left_to_backends() {
        report
            .gateway
            .push(Step::ok("authorization", apigw_authz::LEFT_TO_BACKENDS));
    }
    // Trust from the backends' end, when their settings are known.
    let expectation = match &opts.trust_file {
        Some(file) => Some(trust::Expectation::from_file(file)),
        None => trust::Expectation::from_cluster(cfg).await,
    };
    let backend_trust = match &expectation {
        Some(Ok(exp)) => Some((trust::check(exp, cfg), exp.source.clone())),
        Some(Err(step)) => {
            report.gateway.push(step.clone());
            None
        }
        None => None,
    };
    if let Some((steps, _)) = &backend_trust {
        report.gateway.extend(steps.iter().cloned());
    }
    let ctx = match context(cfg, opts) {
        Ok(ctx) => ctx,
        Err(step) => {
            report.gateway.push(step);
            return report;
        }
    };
    let Some(dir) = &cfg.apiservice_dir else {
        report.gateway.push(Step::warning(
            "manifest",
            "NoApiServiceDir",
            "no --apiservice-dir: there are no APIServices to check",
            "set --apiservice-dir (apiserviceDir: in the config file)",
        ));
        return report;
    };
    let (entries, global) = load_services(dir, &opts.names);
    report.gateway.extend(global);
    let walks = entries.into_iter().map(|entry| {
        let ctx = &ctx;
        async move {
            match entry {
                Entry::Valid(svc, step) => checks::walk(ctx, &svc, step).await,
                Entry::Invalid(name, steps) => ServiceReport {
                    name,
                    target: "?".into(),
                    steps,
                    ca_bundle_file: None,
                    commands: Vec::new(),
                    listed: None,
                },
            }
        }
    });
    report.apiservices = futures_util::future::join_all(walks).await;
    if let Ok(services) = load_dir(dir) {
        routing(&services, &mut report.apiservices);
    }
    if let Some((steps, source)) = &backend_trust {
        for svc in report
            .apiservices
            .iter_mut()
            .filter(|s| s.target != "Local" && s.target != "?")
        {
            svc.steps.push(trust::verdict(steps, source));
        }
    }
    report
}

/// For each APIService with APIServiceBackends, a `backends` step on its report: the routing
/// order, and each resource that more than one backend lists with the one that serves it, by
/// the gateway's own rule ([`Members`]) over what each backend's walk was answered.
fn routing(services: &[ApiService], reports: &mut [ServiceReport]) {
    for svc in services.iter().filter(|s| !s.backends.is_empty()) {
        let svc = std::sync::Arc::new(svc.clone());
        let checked: Vec<Member> = Members::targets(&svc)
            .into_iter()
            .map(|(target, backend)| {
                let listed = reports
                    .iter()
                    .find(|r| r.name == target.name)
                    .and_then(|r| r.listed.clone());
                let state = State {
                    condition: Condition {
                        available: listed.is_some(),
                        reason: "",
                        message: String::new(),
                        last_transition: std::time::SystemTime::now(),
                    },
                    resources: listed.map(std::sync::Arc::new),
                    aggregated: None,
                    members: None,
                };
                Member {
                    target,
                    backend,
                    state,
                }
            })
            .collect();
        let members = Members::new(&svc, checked);
        let order: Vec<String> = members
            .iter()
            .map(|m| match &m.backend {
                Some(b) => format!("backend {} (priority {})", b.name, b.priority),
                None => "its own service (priority 0)".to_string(),
            })
            .collect();
        let order = format!("routing order: {}", order.join(", "));
        let conflicts: Vec<String> = members
            .conflicts()
            .iter()
            .map(|(name, serving, others)| {
                let others: Vec<&str> = others.iter().map(|m| m.target.name.as_str()).collect();
                format!(
                    "{name} by {} over {}",
                    serving.target.name,
                    others.join(", ")
                )
            })
            .collect();
        let step = if conflicts.is_empty() {
            Step::ok("backends", format!("{order}; no resource is listed by two"))
        } else {
            Step::warning(
                "backends",
                "SharedResources",
                format!(
                    "{order}; listed by more than one, served by the first: {}",
                    conflicts.join("; ")
                ),
                "set spec.priority of an APIServiceBackend to choose which serves them",
            )
        };
        if let Some(report) = reports.iter_mut().find(|r| r.name == svc.name) {
            report.steps.push(step);
        }
    }
}

/// What every walk shares: the gateway's resolver, trust fallback and client certificate.
pub struct Ctx {
    pub resolver: apigw_proxy::Resolver,
    pub timeout: std::time::Duration,
    /// CAs for APIServices without a caBundle, and how to name them.
    pub default_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    pub default_roots_name: String,
    /// The file behind `default_roots` (`--service-ca-file`), for the printed commands.
    pub default_ca_file: Option<PathBuf>,
    pub proxy_cert: Option<apigw_core::tls::ProxyClientCert>,
    pub proxy_paths: Option<(PathBuf, PathBuf)>,
    /// Where caBundles are written for the printed commands.
    pub ca_dir: PathBuf,
}

/// The shared context: resolver, trust fallback and proxy client certificate as configured.
fn context(cfg: &Config, opts: &Options) -> Result<Ctx, Step> {
    let (default_roots, default_roots_name) = match &cfg.proxy.service_ca {
        Some(path) => (
            apigw_core::tls::load_certs(path).map_err(|e| {
                Step::failed(
                    "service-ca-file",
                    "Unreadable",
                    e.to_string(),
                    "point --service-ca-file at a PEM CA bundle",
                )
            })?,
            format!("--service-ca-file {}", path.display()),
        ),
        None => (
            rustls_native_certs::load_native_certs().certs,
            "the system roots".to_string(),
        ),
    };
    // A broken pair is reported by own_certs; the walks then go without a client certificate.
    let proxy_cert = cfg
        .proxy
        .proxy_client
        .as_ref()
        .and_then(|(crt, key)| apigw_core::tls::ReloadingCert::load(crt, key).ok());
    Ok(Ctx {
        resolver: apigw_proxy::Resolver::new(cfg.proxy.resolve.clone()),
        timeout: cfg.availability.timeout,
        default_roots,
        default_roots_name,
        default_ca_file: cfg.proxy.service_ca.clone(),
        proxy_cert,
        proxy_paths: cfg.proxy.proxy_client.clone(),
        ca_dir: opts.ca_dir.clone(),
    })
}

/// An APIService to walk (with its `manifest` step), or one whose manifest is broken.
enum Entry {
    Valid(Box<ApiService>, Step),
    Invalid(String, Vec<Step>),
}

/// Reads every manifest file on its own, so one bad file does not hide the others, and ties
/// each problem to its APIService. Problems tied to none are returned separately.
fn load_services(dir: &Path, names: &[String]) -> (Vec<Entry>, Vec<Step>) {
    let mut valid: BTreeMap<String, (ApiService, String)> = BTreeMap::new();
    let mut invalid: BTreeMap<String, Vec<Step>> = BTreeMap::new();
    let mut global = Vec::new();
    let mut seen = Vec::new();
    for file in apigw_core::yaml::manifest_files(dir).unwrap_or_default() {
        let shown = file.display().to_string();
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) => {
                global.push(problem_step(&format!("{shown}: {e}"), &shown));
                continue;
            }
        };
        let problems = match parse_manifest(&text, &shown) {
            Ok(found) => {
                for object in found {
                    // A backend is walked as its target: `<apiservice>/<backend>`.
                    let svc = match object {
                        Manifest::ApiService(svc) => svc,
                        Manifest::Backend(b) => (*b.target).clone(),
                    };
                    valid
                        .entry(svc.name.clone())
                        .or_insert((svc, shown.clone()));
                }
                continue;
            }
            Err(problems) => problems,
        };
        for p in problems {
            seen.push(p.to_string());
            let place = p
                .field
                .as_ref()
                .map_or(shown.clone(), |f| format!("{f} in {shown}"));
            let step = problem_step(&p.to_string(), &place);
            let backend = format!("{BACKEND_KIND} ");
            match p.object.as_deref().and_then(|o| {
                o.strip_prefix("APIService ")
                    .or_else(|| o.strip_prefix(backend.as_str()))
            }) {
                Some(name) => invalid.entry(name.to_string()).or_default().push(step),
                None => global.push(step),
            }
        }
    }
    // Cross-file problems (the same APIService twice) only show up when loading the whole set.
    if let Err(problems) = load_dir(dir) {
        for p in problems.iter().filter(|p| !seen.contains(&p.to_string())) {
            global.push(problem_step(&p.to_string(), &p.file));
        }
    }
    (select(valid, invalid, names, dir), global)
}

fn select(
    mut valid: BTreeMap<String, (ApiService, String)>,
    mut invalid: BTreeMap<String, Vec<Step>>,
    names: &[String],
    dir: &Path,
) -> Vec<Entry> {
    let wanted: Vec<String> = if names.is_empty() {
        valid
            .keys()
            .chain(invalid.keys())
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    } else {
        names.to_vec()
    };
    wanted.into_iter().map(|name| {
        if let Some(steps) = invalid.remove(&name) {
            return Entry::Invalid(name, steps);
        }
        match valid.remove(&name) {
            Some((svc, file)) => Entry::Valid(Box::new(svc), Step::ok("manifest", format!("valid, from {file}"))),
            None => {
                let step = Step::failed("manifest", "NotFound", format!("no APIService named {name} in {}", dir.display()), format!("add the manifest of {name} to {}, or check the name (<version>.<group>)", dir.display()));
                Entry::Invalid(name, vec![step])
            }
        }
    }).collect()
}

fn problem_step(message: &str, place: &str) -> Step {
    Step::failed(
        "manifest",
        "InvalidManifest",
        message,
        format!("correct {place}; until then the gateway keeps the last valid set"),
    )
}
