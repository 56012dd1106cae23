//! Configuration: the `serve` flags (kube-apiserver's names) and the equivalent YAML file
//! (camelCase), flags winning, read into one [`Config`] before any port is bound. Every problem
//! names the flag or the file and field. Relative paths in the file are relative to the file.
//!
//! Each concern owns its flags, their defaults and their checks, beside the code that uses them
//! (`ServingFlags` and `ServerFlags` in `apigw_core::server`, [`LimitsFlags`] in `limits`,
//! [`AuthnFlags`], [`AuthzFlags`], [`ProxyFlags`], [`RegistryFlags`], [`AvailabilityFlags`],
//! [`FlowControlFlags`], [`ClusterFlags`], [`AuditFlags`]); here they are assembled
//! (`flags.rs`), the file is read (`file.rs`), and the sections are read into settings in
//! order ([`apigw_core::settings::Cx`] names where each came from).

pub mod defaults;
mod file;
mod flags;
#[cfg(test)]
mod tests;

pub use crate::audit::AuditFlags;
pub use crate::cluster::{ClusterFlags, ClusterSettings, LeaderElection};
pub use crate::limits::{LimitsFlags, LimitsSettings};
pub use apigw_authn::{AuthnFlags, AuthnSettings, RequestHeaderSettings};
/// How requests are authorized; owned by `authz`, named here for the settings.
pub use apigw_authz::{AuthzFlags, AuthzMode, AuthzSettings};
pub use apigw_availability::AvailabilityFlags;
pub use apigw_core::server::{cpus, ServerFlags, ServerSettings, ServingFlags, MAX_WORKER_THREADS};
pub use apigw_core::settings::ConfigError;
pub use apigw_flowcontrol::FlowControlFlags;
pub use apigw_proxy::{BackendSettings, Delegate, ProxyFlags};
pub use apigw_registry::RegistryFlags;
pub use flags::{Flags, LogFlags};

/// Front-proxy (request header) authentication settings (the name before sections).
pub type RequestHeader = RequestHeaderSettings;
/// Cluster-mode settings (the name before sections).
pub type Cluster = ClusterSettings;

use apigw_core::settings::{camel, Cx};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// How the gateway logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogSettings {
    /// JSON lines rather than text.
    pub json: bool,
}

/// The validated configuration of a gateway, by section.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The serving certificate and key.
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    pub server: ServerSettings,
    pub limits: LimitsSettings,
    /// API Priority and Fairness.
    pub flowcontrol: apigw_flowcontrol::FlowControlSettings,
    pub authn: AuthnSettings,
    pub authz: AuthzSettings,
    pub proxy: BackendSettings,
    pub availability: apigw_availability::Settings,
    pub audit: Option<crate::audit::Settings>,
    pub cluster: Option<ClusterSettings>,
    pub apiservice_dir: Option<PathBuf>,
    /// Serve /metrics (and health) on this plain-HTTP address too.
    pub metrics_listen: Option<SocketAddr>,
    pub log: LogSettings,
    /// What loading found worth a warning but not an error (a deprecated flag or key), for
    /// the caller to log once logging is set up.
    pub warnings: Vec<String>,
}

impl Config {
    /// A configuration with every default, serving `cert`/`key` (for tests and embedding).
    pub fn new(tls_cert: PathBuf, tls_key: PathBuf) -> Self {
        Self {
            tls_cert,
            tls_key,
            ..Self::default()
        }
    }
}

/// What a configuration is loaded for: serving needs the serving certificate; checking
/// validates what is given and leaves out what is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Serve,
    Check,
}

/// A configuration loaded by `apigw check`, where settings only serving needs may be missing.
#[derive(Debug, Clone)]
pub struct Checkable {
    /// The configuration. Without a serving pair its `tls_cert` and `tls_key` are empty paths:
    /// it is for checking, not for serving.
    pub config: Config,
    /// Whether `--tls-cert-file` and `--tls-private-key-file` were given.
    pub serving: bool,
}

impl Config {
    /// Reads the file named by `--config` (if any), applies the flags over it, and validates.
    pub fn load(flags: &Flags) -> Result<Self, Vec<ConfigError>> {
        load(flags, Purpose::Serve).map(|c| c.config)
    }

    /// As [`Config::load`], but the serving certificate and key may be missing (`apigw check`).
    pub fn load_for_check(flags: &Flags) -> Result<Checkable, Vec<ConfigError>> {
        load(flags, Purpose::Check)
    }
}

/// The flags over the file `--config` names, each section read into its settings in order.
fn load(flags: &Flags, purpose: Purpose) -> Result<Checkable, Vec<ConfigError>> {
    let file = match &flags.config {
        Some(path) => file::read_file(path)?.0,
        None => Flags::default(),
    };
    let (f, from_file) = flags.clone().over(file);
    let mut cx = Cx::new(f.config.as_deref(), from_file);
    let serving = f.serving.settings(&mut cx);
    let authn = f.authn.settings(&mut cx);
    let proxy = f.proxy.settings(&mut cx);
    let apiservice_dir = f.registry.settings(&mut cx);
    let cluster = f.cluster.settings(apiservice_dir.is_some(), &mut cx);
    let authz = f.authz.settings(cluster.is_some(), &mut cx);
    let availability = f.availability.settings(&mut cx);
    let limits = f.limits.settings(&mut cx);
    let flowcontrol = f.flowcontrol.settings(limits.max_inflight, &mut cx);
    let server = f.server.settings(serving.listen, &mut cx);
    let (log, metrics_listen) = f.log.settings(&mut cx);
    let audit = f.audit.settings(&mut cx);

    let (found, warnings) = cx.finish();
    let (cert, key) = (serving.cert, serving.key);
    let mut problems =
        serving_problems(cert.is_some(), key.is_some(), f.config.as_deref(), purpose);
    problems.extend(found);
    if !problems.is_empty() {
        return Err(problems);
    }
    let serving = cert.is_some() && key.is_some();
    Ok(Checkable {
        serving,
        config: Config {
            tls_cert: cert.filter(|_| serving).unwrap_or_default(),
            tls_key: key.filter(|_| serving).unwrap_or_default(),
            server,
            limits,
            flowcontrol,
            authn,
            authz,
            proxy,
            availability,
            audit,
            cluster,
            apiservice_dir,
            metrics_listen,
            log,
            warnings,
        },
    })
}

/// Checks that the file `--config` names (dev mode's `config/dev.yaml`) can be read, is a
/// configuration, and that its manifest directory exists, without looking at the certificate
/// files it names: what `apigw dev` checks before it writes the dev PKI.
pub fn check_config_file(path: &Path) -> Result<(), Vec<ConfigError>> {
    let (file, from_file) = Flags::default().over(file::read_file(path)?.0);
    let mut cx = Cx::new(Some(path), from_file);
    file.registry.settings(&mut cx);
    match cx.finish() {
        (problems, _) if problems.is_empty() => Ok(()),
        (problems, _) => Err(problems),
    }
}

/// Loads each certificate and key pair of `cfg` (serving, proxy client) and checks that each
/// key belongs to its certificate. Each problem names both flags and both files.
pub fn check_key_pairs(cfg: &Config) -> Vec<ConfigError> {
    let mut pairs = Vec::new();
    if !cfg.tls_cert.as_os_str().is_empty() {
        pairs.push((
            "tls-cert-file",
            "tls-private-key-file",
            &cfg.tls_cert,
            &cfg.tls_key,
        ));
    }
    if let Some((cert, key)) = &cfg.proxy.proxy_client {
        pairs.push(("proxy-client-cert-file", "proxy-client-key-file", cert, key));
    }
    pairs
        .into_iter()
        .filter_map(|(cert_flag, key_flag, cert, key)| {
            check_key_pair(cert_flag, key_flag, cert, key).err()
        })
        .collect()
}

/// Loads the certificate `cert` and key `key`, given as `--{cert_flag}` and `--{key_flag}`,
/// and checks that the key is the certificate's; the problem names both flags and files.
pub fn check_key_pair(
    cert_flag: &str,
    key_flag: &str,
    cert: &Path,
    key: &Path,
) -> Result<(), ConfigError> {
    let chain = apigw_core::tls::load_certs(cert).map_err(|e| ConfigError {
        at: format!("--{cert_flag}"),
        message: e.to_string(),
    })?;
    let der = apigw_core::tls::load_key(key).map_err(|e| ConfigError {
        at: format!("--{key_flag}"),
        message: e.to_string(),
    })?;
    match rustls::sign::CertifiedKey::from_der(chain, der, &apigw_core::tls::provider()) {
        Ok(_) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(ConfigError {
                at: format!("--{key_flag}"),
                message: format!(
                    "{} does not match --{cert_flag} {}: the key is not the certificate's",
                    key.display(),
                    cert.display()
                ),
            })
        }
        Err(e) => Err(ConfigError {
            at: format!("--{key_flag}"),
            message: format!(
                "{} with --{cert_flag} {}: {e}",
                key.display(),
                cert.display()
            ),
        }),
    }
}

/// The problems of a missing serving certificate or key: both are required to serve; to
/// check, both or neither. Each says where the setting can be given.
fn serving_problems(
    cert: bool,
    key: bool,
    file: Option<&Path>,
    purpose: Purpose,
) -> Vec<ConfigError> {
    const CERT: &str = "tls-cert-file";
    const KEY: &str = "tls-private-key-file";
    let where_to = |flag: &str| match file {
        Some(f) => format!("give --{flag}, or {} in {}", camel(flag), f.display()),
        None => format!("give --{flag}, or --config FILE with {} in it", camel(flag)),
    };
    match (cert, key) {
        (true, true) => Vec::new(),
        (false, false) if purpose == Purpose::Check => Vec::new(),
        (false, false) if file.is_none() => vec![ConfigError {
            at: format!("--{CERT}, --{KEY}"),
            message: format!(
                "missing: serving needs a certificate and its key; give them as flags, or \
                 --config FILE, a YAML file that sets them as {} and {} (config/dev.yaml does, \
                 for the dev PKI `apigw certs dev` writes)",
                camel(CERT),
                camel(KEY)
            ),
        }],
        (false, false) => vec![
            ConfigError {
                at: format!("--{CERT}"),
                message: format!("is required: {}", where_to(CERT)),
            },
            ConfigError {
                at: format!("--{KEY}"),
                message: format!("is required: {}", where_to(KEY)),
            },
        ],
        (true, false) => vec![ConfigError {
            at: format!("--{KEY}"),
            message: format!("is required with --{CERT}: {}", where_to(KEY)),
        }],
        (false, true) => vec![ConfigError {
            at: format!("--{CERT}"),
            message: format!("is required with --{KEY}: {}", where_to(CERT)),
        }],
    }
}
