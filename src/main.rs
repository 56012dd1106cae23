//! The `apigw` command: parses the command line, sets up logging and the crypto provider, and
//! hands over to the library. Configuration is validated before any port is bound. Every
//! error is printed as clap prints its own: `error: ...`.

mod logging;

use anyhow::Context as _;
use apigw_gateway::config::{Config, Flags};
use clap::{Args as _, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "apigw",
    version,
    about = "A Kubernetes API aggregation gateway"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Zero-setup local front door: dev PKI, gateway on 127.0.0.1:8443, sample addon server.
    #[cfg(feature = "dev")]
    Dev(apigw::dev::DevArgs),
    /// The production gateway.
    ///
    /// Every setting is a flag, or a camelCase key of the YAML file --config FILE names
    /// (config/dev.yaml is an example); flags override the file.
    Serve(Flags),
    /// Certificates.
    Certs {
        #[command(subcommand)]
        command: CertsCommand,
    },
    /// Load the config and every APIService; print each problem; exit 1 if any.
    ///
    /// Settings only serving needs (the serving certificate) may be left out: what is given
    /// is validated, and what was not checked is said, so `apigw check --apiservice-dir DIR`
    /// lints manifests alone.
    Check(Flags),
    /// Walk each APIService's request path; report each step with the fix; exit 1 if any failed.
    Doctor(apigw::doctor::DoctorArgs),
    /// The sample addon API server (group wardle.example.com, resource flunders).
    #[cfg(feature = "dev")]
    SampleApiserver(apigw::dev::SampleArgs),
}

#[derive(Subcommand)]
enum CertsCommand {
    /// Write the dev PKI (never overwrites existing files unless --force).
    #[cfg(feature = "dev")]
    Dev(apigw::dev::CertsDevArgs),
    /// Show certificates, chains, CSRs or a base64 caBundle, with warnings.
    Inspect(apigw_core::certs::inspect::InspectArgs),
}

/// The flags of `serve` that `check` and `doctor` list in their help; they accept every other
/// flag of `serve` too (so a serve command line can be checked as it is), unlisted.
const CHECK_LISTS: &[&str] = &[
    "config",
    "apiservice_dir",
    "resolve",
    "kubeconfig",
    "cluster_mode",
    "tls_cert_file",
    "tls_private_key_file",
];
const DOCTOR_LISTS: &[&str] = &[
    "config",
    "apiservice_dir",
    "resolve",
    "service_ca_file",
    "tls_cert_file",
    "tls_private_key_file",
    "proxy_client_cert_file",
    "proxy_client_key_file",
    "availability_check_timeout",
];

/// The ids of `serve`'s flags, which `check` and `doctor` take too.
fn serve_flags() -> Vec<clap::Id> {
    Flags::augment_args(clap::Command::new("serve"))
        .get_arguments()
        .map(|a| a.get_id().clone())
        .collect()
}

/// Whether any of `serve`'s settings was given to this subcommand (on the command line or
/// from the environment).
fn settings_given(sub: &clap::ArgMatches) -> bool {
    use clap::parser::ValueSource;
    serve_flags().iter().any(|id| {
        matches!(
            sub.try_get_raw(id.as_str())
                .ok()
                .flatten()
                .and_then(|_| sub.value_source(id.as_str())),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    })
}

/// The command line, with `check` and `doctor` listing only the flags of `serve` they use.
fn command() -> clap::Command {
    let serve_flags = serve_flags();
    let trim = |cmd: clap::Command, lists: &[&str], note: &'static str| {
        serve_flags
            .iter()
            .filter(|id| !lists.contains(&id.as_str()))
            .fold(cmd, |cmd, id| cmd.mut_arg(id, |a| a.hide(true)))
            .after_help(note)
    };
    let in_help = apigw_gateway::config::defaults::in_help;
    Cli::command()
        .mut_subcommand("serve", in_help)
        .mut_subcommand("check", |c| {
            trim(
                in_help(c),
                CHECK_LISTS,
                "Every other flag of `apigw serve` is accepted too and checked as serve checks \
                 it, so a serve command line can be checked as it is (apigw serve --help lists \
                 them).",
            )
        })
        .mut_subcommand("doctor", |c| {
            trim(
                in_help(c),
                DOCTOR_LISTS,
                "Every other flag of `apigw serve` is accepted too, so doctor can be given the \
                 serve command line as it is (apigw serve --help lists them).",
            )
        })
}

fn main() -> ExitCode {
    let matches = command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let bare = matches
        .subcommand()
        .is_some_and(|(name, sub)| matches!(name, "check" | "doctor") && !settings_given(sub));
    if bare {
        // `check` and `doctor` with no setting at all: dev mode's configuration, where it is.
        match &mut cli.command {
            Command::Check(flags) => match apigw::check::dev_default() {
                Some(config) => flags.config = Some(config),
                None => return apigw::check::nothing_given(),
            },
            Command::Doctor(args) => args.flags.config = apigw::check::dev_default(),
            _ => {}
        }
    }
    apigw_core::tls::install_default_provider();
    apigw_core::server::raise_fd_limit();
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    // Dropped when the command is done: every queued log line is out before `run` returns.
    let mut _log = None;
    if !matches!(command, Command::Serve(_)) {
        _log = Some(logging::init(false));
    }
    match command {
        Command::Serve(flags) => {
            let Some(cfg) = config_or_print(&flags) else {
                return Ok(ExitCode::FAILURE);
            };
            _log = Some(logging::init(cfg.log.json));
            for w in &cfg.warnings {
                tracing::warn!("{w}");
            }
            runtime()?.block_on(async {
                let listener = tokio::net::TcpListener::bind(cfg.server.listen)
                    .await
                    .with_context(|| format!("listening on {}", cfg.server.listen))?;
                apigw_gateway::gateway::run(cfg, listener, apigw_core::shutdown_signal()).await
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check(flags) => Ok(apigw::check::check(&flags)),
        Command::Doctor(args) => Ok(runtime()?.block_on(apigw::doctor::command(args))),
        Command::Certs {
            command: CertsCommand::Inspect(args),
        } => Ok(if apigw_core::certs::inspect::run(&args) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }),
        #[cfg(feature = "dev")]
        Command::Certs {
            command: CertsCommand::Dev(args),
        } => apigw::dev::certs_dev(&args),
        #[cfg(feature = "dev")]
        Command::SampleApiserver(args) => runtime()?.block_on(apigw::dev::sample_apiserver(args)),
        #[cfg(feature = "dev")]
        Command::Dev(args) => {
            runtime()?.block_on(apigw::dev::run(args))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The configuration `serve` runs with, its certificate and key pairs checked; else None,
/// each problem printed.
fn config_or_print(flags: &Flags) -> Option<Config> {
    let problems = match Config::load(flags) {
        Ok(cfg) => {
            let problems = apigw_gateway::config::check_key_pairs(&cfg);
            if problems.is_empty() {
                return Some(cfg);
            }
            problems
        }
        Err(problems) => problems,
    };
    for p in &problems {
        eprintln!("error: {p}");
    }
    None
}
