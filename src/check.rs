//! `apigw check`: loads the configuration, the files it names, and every APIService manifest,
//! and prints each problem with its file and field. Nothing is served. Settings only serving
//! needs (the serving certificate) may be left out: what is given is validated, and what could
//! not be checked is said (`not checked: ...`), so manifests can be linted in CI alone; only a
//! configuration `serve` would run with is called `configuration ok`. Given nothing at all, it
//! checks `apigw dev`'s configuration when run where that is (see [`dev_default`]).

use apigw_gateway::config::{check_key_pairs, Checkable, Config, Flags};
use apigw_registry::{load_dir, Registry};
use std::process::ExitCode;

/// The configuration `check` and `doctor` use when given no setting at all: `apigw dev`'s
/// (`config/dev.yaml`) when it and the dev PKI are in the working directory, said on stderr;
/// else None.
pub fn dev_default() -> Option<std::path::PathBuf> {
    let config = std::path::Path::new(crate::DEV_CONFIG);
    if !(config.is_file() && dev_pki_written()) {
        return None;
    }
    eprintln!(
        "note: no --config and no flags: using {} (apigw dev's configuration, with its PKI in {}/)",
        crate::DEV_CONFIG,
        crate::DEV_CERTS
    );
    Some(config.to_path_buf())
}

/// Whether the dev PKI has been written (`certs-dev/` itself is in the repository, with its
/// README).
fn dev_pki_written() -> bool {
    std::path::Path::new(crate::DEV_CERTS)
        .join("ca.crt")
        .is_file()
}

/// `check` given no setting and no dev configuration here: nothing to check.
pub fn nothing_given() -> ExitCode {
    let dev = if std::path::Path::new(crate::DEV_CONFIG).is_file() {
        format!(
            "; {} is here, but not its PKI: apigw dev (or apigw certs dev) writes it",
            crate::DEV_CONFIG
        )
    } else {
        String::new()
    };
    println!(
        "error: nothing to check: give the configuration apigw serve runs with (--config FILE or \
         its flags; serve needs at least --tls-cert-file and --tls-private-key-file), or \
         --apiservice-dir DIR to lint manifests alone{dev}"
    );
    ExitCode::FAILURE
}

/// Prints every problem found and returns the exit code (1 if any).
pub fn check(flags: &Flags) -> ExitCode {
    let Checkable {
        config: cfg,
        serving,
    } = match Config::load_for_check(flags) {
        Ok(loaded) => loaded,
        Err(problems) => {
            for p in &problems {
                println!("error: {p}");
            }
            return ExitCode::FAILURE;
        }
    };
    for w in &cfg.warnings {
        println!("warning: {w}");
    }
    let mut problems: Vec<String> = check_key_pairs(&cfg)
        .iter()
        .map(ToString::to_string)
        .collect();
    let mut not_checked = Vec::new();
    if serving && problems.is_empty() {
        // Everything `serve` builds before it listens, as it builds it.
        if let Err(e) = apigw_gateway::gateway::Gateway::build(&cfg, Registry::new()) {
            problems.push(format!("{e:#}"));
        }
    } else {
        if !serving {
            not_checked.push("serving certificate (no --tls-cert-file)".to_string());
        }
        problems.extend(files(&cfg));
        if cfg.audit.is_some() {
            not_checked.push("audit log file (opened by serve)".to_string());
        }
    }
    for p in &problems {
        println!("error: {p}");
    }
    let mut failed = !problems.is_empty();
    match (&cfg.apiservice_dir, &cfg.cluster) {
        (Some(dir), _) => match load_dir(dir) {
            Ok(services) => {
                for s in &services {
                    let target = s.service.as_ref().map_or("Local".to_string(), |svc| {
                        format!("{}:{}", svc.host(), svc.port)
                    });
                    println!("ok: APIService {} -> {target}{}", s.name, policy(&s.policy));
                    for b in &s.backends {
                        println!("ok: {}", backend(b));
                    }
                }
            }
            Err(problems) => {
                for p in &problems {
                    println!("error: {p}");
                }
                failed = true;
            }
        },
        (None, Some(_)) => not_checked
            .push("APIServices (cluster mode reads them from the cluster when serving)".into()),
        (None, None) => not_checked.push("APIServices (no --apiservice-dir)".into()),
    }
    for what in &not_checked {
        println!("not checked: {what}");
    }
    if cfg.authz.left_to_backends() {
        println!("note: {}", apigw_authz::LEFT_TO_BACKENDS);
    }
    if failed {
        ExitCode::FAILURE
    } else if serving {
        println!("configuration ok");
        ExitCode::SUCCESS
    } else {
        // What was given is fine, yet `serve` would refuse it: never "configuration ok".
        println!(
            "ok as far as given; apigw serve also needs --tls-cert-file and --tls-private-key-file"
        );
        ExitCode::SUCCESS
    }
}

/// Without a serving certificate the gateway cannot be built as `serve` builds it: loads the
/// files each concern's loader reads for `serve` (CAs, tokens, policies) on their own.
fn files(cfg: &Config) -> Vec<String> {
    let named = |flag: Option<&str>, e: &dyn std::fmt::Display| match flag {
        Some(flag) => format!("--{flag}: {e}"),
        None => e.to_string(),
    };
    let mut problems = Vec::new();
    if let Err(errors) = cfg.authn.load() {
        problems.extend(errors.iter().map(|e| named(e.flag(), e)));
    }
    if let Err(errors) = cfg.proxy.load_cas() {
        problems.extend(errors.iter().map(|e| named(Some(e.flag()), e)));
    }
    if let Err(e) = cfg.authz.authorizer() {
        problems.push(named(Some("rbac-policy-file"), &e));
    }
    if let Some(path) = cfg.audit.as_ref().and_then(|a| a.policy_file.as_ref()) {
        if let Err(e) = apigw_gateway::audit::Policy::load(path) {
            problems.push(named(Some("audit-policy-file"), &e));
        }
    }
    problems
}

/// An APIServiceBackend as `apigw check` prints it: its target, the APIService it serves
/// beside, its priority and the resources it claims.
fn backend(b: &apigw_registry::Backend) -> String {
    let target = b
        .target
        .service
        .as_ref()
        .map_or(String::new(), |svc| format!("{}:{}", svc.host(), svc.port));
    let claims = match b.resources.is_empty() {
        true => String::new(),
        false => format!(", claims {}", b.resources.join(", ")),
    };
    format!(
        "{} {} -> {target} (beside APIService {}, priority {}{claims})",
        apigw_registry::BACKEND_KIND,
        b.name,
        b.api_service,
        b.priority
    )
}

/// An APIService's own request policy, as `apigw check` prints it after its target.
fn policy(p: &apigw_request::Policy) -> String {
    let mut parts = Vec::new();
    if let Some(t) = p.request_timeout {
        parts.push(format!("request timeout {t:?}"));
    }
    if !p.long_running_subresources.is_empty() {
        parts.push(format!(
            "long-running subresources {}",
            p.long_running_subresources.join(", ")
        ));
    }
    match parts.is_empty() {
        true => String::new(),
        false => format!(" ({})", parts.join("; ")),
    }
}
