//! Configuration: the `serve` flags (kube-apiserver's names) and the equivalent YAML file
//! (camelCase), merged with flags winning, then validated into one [`Config`] before any port
//! is bound. Every problem names the flag or the file and field. Relative paths in the file
//! are relative to the file.

use clap::Args;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The flags of `apigw serve` and `apigw check`.
#[derive(Debug, Clone, Default, Args)]
pub struct Flags {
    /// YAML config file with the same settings in camelCase; flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 0.0.0.0].
    #[arg(long, help_heading = "Serving")]
    pub bind_address: Option<IpAddr>,
    /// Port to listen on [default: 8443].
    #[arg(long, help_heading = "Serving")]
    pub secure_port: Option<u16>,
    /// Serving certificate (PEM, chain allowed); reloaded when it changes.
    #[arg(long, help_heading = "Serving")]
    pub tls_cert_file: Option<PathBuf>,
    /// Serving key (PEM).
    #[arg(long, help_heading = "Serving")]
    pub tls_private_key_file: Option<PathBuf>,
    /// CA bundle for user client certificates: user = CN, groups = every O.
    #[arg(long, help_heading = "Authentication")]
    pub client_ca_file: Option<PathBuf>,
    /// Static tokens, kube CSV: token,user,uid,"group1,group2".
    #[arg(long, help_heading = "Authentication")]
    pub token_auth_file: Option<PathBuf>,
    /// Serve requests without credentials as system:anonymous.
    #[arg(long, help_heading = "Authentication", num_args = 0..=1, default_missing_value = "true")]
    pub anonymous_auth: Option<bool>,
    /// CA of front proxies whose identity headers are trusted.
    #[arg(long, help_heading = "Authentication")]
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// Front-proxy certificate CNs allowed (comma list); empty allows any from the CA.
    #[arg(long, help_heading = "Authentication", value_delimiter = ',')]
    pub requestheader_allowed_names: Vec<String>,
    /// Headers holding the user name [default: X-Remote-User].
    #[arg(long, help_heading = "Authentication", value_delimiter = ',')]
    pub requestheader_username_headers: Vec<String>,
    /// Headers holding groups [default: X-Remote-Group].
    #[arg(long, help_heading = "Authentication", value_delimiter = ',')]
    pub requestheader_group_headers: Vec<String>,
    /// Header prefixes holding extra attributes [default: X-Remote-Extra-].
    #[arg(long, help_heading = "Authentication", value_delimiter = ',')]
    pub requestheader_extra_headers_prefix: Vec<String>,
    /// Certificate presented to addon servers; reloaded when it changes.
    #[arg(long, help_heading = "Backends")]
    pub proxy_client_cert_file: Option<PathBuf>,
    /// Key of the proxy client certificate.
    #[arg(long, help_heading = "Backends")]
    pub proxy_client_key_file: Option<PathBuf>,
    /// Directory of APIService manifests, watched for changes.
    #[arg(long, help_heading = "Backends")]
    pub apiservice_dir: Option<PathBuf>,
    /// Static service resolution NAME:PORT=ADDR:PORT (repeatable); TLS still verifies NAME.
    #[arg(long, help_heading = "Backends")]
    pub resolve: Vec<String>,
    /// CA for backends whose APIService has no caBundle [default: the system roots].
    #[arg(long, help_heading = "Backends")]
    pub service_ca_file: Option<PathBuf>,
    /// Main API server for everything not aggregated and for Local APIServices.
    #[arg(long, help_heading = "Delegate (the main API server)")]
    pub delegate_url: Option<String>,
    /// CA bundle to verify the delegate's serving certificate.
    #[arg(long, help_heading = "Delegate (the main API server)")]
    pub delegate_ca_file: Option<PathBuf>,
    /// Reach the delegate by impersonation: this file's bearer token (the gateway's own
    /// account; re-read when it changes) with Impersonate-* headers naming the user, instead
    /// of the proxy client certificate and X-Remote-* headers.
    #[arg(long, help_heading = "Delegate (the main API server)")]
    pub delegate_impersonation_token_file: Option<PathBuf>,
    /// Cluster mode with this kubeconfig: APIServices, Services and EndpointSlices from the
    /// cluster, TokenReview for bearer tokens, status written back.
    #[arg(long, help_heading = "Cluster mode")]
    pub kubeconfig: Option<PathBuf>,
    /// Cluster mode with the in-cluster service account (inside a Pod).
    #[arg(long, help_heading = "Cluster mode")]
    pub cluster_mode: bool,
    /// In cluster mode, route to ready EndpointSlice endpoints instead of the Service's ClusterIP.
    #[arg(long, help_heading = "Cluster mode")]
    pub enable_aggregator_routing: bool,
    /// In cluster mode, how long other replicas wait after the Lease was last renewed before
    /// taking it [default: 15s].
    #[arg(long, help_heading = "Cluster mode")]
    pub leader_elect_lease_duration: Option<String>,
    /// In cluster mode, how long the leader keeps leading without a successful renewal
    /// [default: 10s].
    #[arg(long, help_heading = "Cluster mode")]
    pub leader_elect_renew_deadline: Option<String>,
    /// In cluster mode, how often each replica tries to acquire or renew the Lease [default: 2s].
    #[arg(long, help_heading = "Cluster mode")]
    pub leader_elect_retry_period: Option<String>,
    /// Authorizers in order (comma list): AlwaysAllow, AlwaysDeny, RBAC (objects from
    /// --rbac-policy-file), Webhook (SubjectAccessReview; cluster mode) [default: AlwaysAllow].
    #[arg(long, help_heading = "Authorization", value_delimiter = ',')]
    pub authorization_mode: Vec<String>,
    /// RBAC objects (Role, ClusterRole, RoleBinding, ClusterRoleBinding) for
    /// --authorization-mode=RBAC; reloaded when it changes.
    #[arg(long, help_heading = "Authorization")]
    pub rbac_policy_file: Option<PathBuf>,
    /// Deprecated: use --rbac-policy-file (kube-apiserver's flag of this name reads ABAC, not
    /// RBAC).
    #[arg(long, help_heading = "Authorization")]
    pub authorization_policy_file: Option<PathBuf>,
    /// How often the availability controller checks each APIService [default: 30s].
    #[arg(long, help_heading = "Backends")]
    pub availability_check_interval: Option<String>,
    /// How long one availability check may take [default: 5s].
    #[arg(long, help_heading = "Backends")]
    pub availability_check_timeout: Option<String>,
    /// Time to the response head of a request that is not long-running; 504 after [default: 60s].
    #[arg(long, help_heading = "Limits and timeouts")]
    pub request_timeout: Option<String>,
    /// After SIGTERM, keep accepting (while /readyz fails) for this long [default: 0s].
    #[arg(long, help_heading = "Limits and timeouts")]
    pub shutdown_delay_duration: Option<String>,
    /// After accepting stops, how long in-flight requests may take to finish [default: 30s].
    #[arg(long, help_heading = "Limits and timeouts")]
    pub shutdown_grace_period: Option<String>,
    /// Serve /metrics (and health) without authentication on this plain-HTTP address too.
    #[arg(long, help_heading = "Logs, metrics and audit")]
    pub metrics_bind_address: Option<SocketAddr>,
    /// Log format: text or json [default: text] (--logging-format is kube's name).
    #[arg(
        long,
        help_heading = "Logs, metrics and audit",
        visible_alias = "logging-format"
    )]
    pub log_format: Option<String>,
    /// Groups never sent to backends in X-Remote-Group (comma list), e.g. system:masters.
    #[arg(long, help_heading = "Backends", value_delimiter = ',')]
    pub backend_drop_groups: Vec<String>,
    /// Requests in flight at once, long-running ones exempt; then 429 [default: 400; 0: no limit].
    #[arg(long, help_heading = "Limits and timeouts")]
    pub max_requests_inflight: Option<usize>,
    /// Requests in flight at once from one client address [default: 0, no limit].
    #[arg(long, help_heading = "Limits and timeouts")]
    pub max_requests_inflight_per_client: Option<usize>,
    /// Open connections from one client address [default: 0, no limit].
    #[arg(long, help_heading = "Limits and timeouts")]
    pub max_connections_per_client: Option<usize>,
    /// Connection worker threads, each a single-threaded runtime that keeps its connections
    /// [default: the CPUs this process may use; 0: serve on the shared runtime].
    #[arg(long, help_heading = "Limits and timeouts")]
    pub worker_threads: Option<usize>,
    /// Largest request body of a non-streaming request (POST, PUT, PATCH...), bytes; then 413.
    #[arg(long, help_heading = "Limits and timeouts")]
    pub max_request_body_bytes: Option<usize>,
    /// Audit log file, or - for stdout; no audit log when unset.
    #[arg(long, help_heading = "Logs, metrics and audit")]
    pub audit_log_path: Option<String>,
    /// Rotate the audit log file at this many megabytes [default: 100].
    #[arg(long, help_heading = "Logs, metrics and audit")]
    pub audit_log_maxsize: Option<u64>,
    /// Rotated audit log files to keep [default: 10].
    #[arg(long, help_heading = "Logs, metrics and audit")]
    pub audit_log_maxbackup: Option<usize>,
    /// audit.k8s.io/v1 Policy choosing levels (None or Metadata) [default: Metadata for all].
    #[arg(long, help_heading = "Logs, metrics and audit")]
    pub audit_policy_file: Option<PathBuf>,
}

/// The YAML file: the same settings as [`Flags`], camelCase.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    bind_address: Option<IpAddr>,
    secure_port: Option<u16>,
    tls_cert_file: Option<PathBuf>,
    tls_private_key_file: Option<PathBuf>,
    client_ca_file: Option<PathBuf>,
    token_auth_file: Option<PathBuf>,
    anonymous_auth: Option<bool>,
    requestheader_client_ca_file: Option<PathBuf>,
    #[serde(default)]
    requestheader_allowed_names: Vec<String>,
    #[serde(default)]
    requestheader_username_headers: Vec<String>,
    #[serde(default)]
    requestheader_group_headers: Vec<String>,
    #[serde(default)]
    requestheader_extra_headers_prefix: Vec<String>,
    proxy_client_cert_file: Option<PathBuf>,
    proxy_client_key_file: Option<PathBuf>,
    apiservice_dir: Option<PathBuf>,
    #[serde(default)]
    resolve: BTreeMap<String, String>,
    service_ca_file: Option<PathBuf>,
    delegate_url: Option<String>,
    delegate_ca_file: Option<PathBuf>,
    delegate_impersonation_token_file: Option<PathBuf>,
    kubeconfig: Option<PathBuf>,
    #[serde(default)]
    cluster_mode: bool,
    #[serde(default)]
    enable_aggregator_routing: bool,
    leader_elect_lease_duration: Option<String>,
    leader_elect_renew_deadline: Option<String>,
    leader_elect_retry_period: Option<String>,
    #[serde(default)]
    authorization_mode: Vec<String>,
    rbac_policy_file: Option<PathBuf>,
    /// Deprecated: `rbacPolicyFile`.
    authorization_policy_file: Option<PathBuf>,
    availability_check_interval: Option<String>,
    availability_check_timeout: Option<String>,
    request_timeout: Option<String>,
    shutdown_delay_duration: Option<String>,
    shutdown_grace_period: Option<String>,
    metrics_bind_address: Option<SocketAddr>,
    /// `loggingFormat` too, as kube spells the flag.
    #[serde(alias = "loggingFormat")]
    log_format: Option<String>,
    #[serde(default)]
    backend_drop_groups: Vec<String>,
    max_requests_inflight: Option<usize>,
    max_requests_inflight_per_client: Option<usize>,
    max_connections_per_client: Option<usize>,
    worker_threads: Option<usize>,
    max_request_body_bytes: Option<usize>,
    audit_log_path: Option<String>,
    audit_log_maxsize: Option<u64>,
    audit_log_maxbackup: Option<usize>,
    audit_policy_file: Option<PathBuf>,
}

/// How requests are authorized; owned by `authz`, named here for the settings.
pub use crate::authz::AuthzMode;

/// Front-proxy (request header) authentication settings.
#[derive(Debug, Clone)]
pub struct RequestHeader {
    pub client_ca: PathBuf,
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_prefixes: Vec<String>,
}

/// Cluster mode: where the Kubernetes API is and how to route to services.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// None: the in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    pub aggregator_routing: bool,
    pub leader_election: LeaderElection,
}

/// Timing of the Lease election among replicas, with kube's `--leader-elect-*` names and
/// client-go's defaults and rules: lease duration > renew deadline > 1.2 x retry period > 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderElection {
    /// Others take the Lease when it was not renewed for this long.
    pub lease_duration: Duration,
    /// The leader stops leading when it could not renew for this long.
    pub renew_deadline: Duration,
    /// How often every replica tries to acquire or renew.
    pub retry_period: Duration,
}

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaderElection {
    /// client-go's checks (`NewLeaderElector`), plus a whole second at least, since the Lease
    /// holds its duration in seconds.
    fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.lease_duration < Duration::from_secs(1) {
            out.push(("leader-elect-lease-duration", "must be 1s or more".into()));
        }
        if self.lease_duration <= self.renew_deadline {
            out.push((
                "leader-elect-lease-duration",
                format!(
                    "must be greater than --leader-elect-renew-deadline ({:?})",
                    self.renew_deadline
                ),
            ));
        }
        if self.retry_period.is_zero() {
            out.push(("leader-elect-retry-period", "must be more than 0".into()));
        } else if self.renew_deadline.as_secs_f64() <= self.retry_period.as_secs_f64() * 1.2 {
            out.push((
                "leader-elect-renew-deadline",
                format!(
                    "must be greater than 1.2 x --leader-elect-retry-period ({:?})",
                    self.retry_period
                ),
            ));
        }
        out
    }
}

/// The main API server requests go to when no APIService claims them.
#[derive(Debug, Clone)]
pub struct Delegate {
    pub host: String,
    pub port: u16,
    pub ca_file: Option<PathBuf>,
    /// Reach the delegate by impersonation with the bearer token in this file.
    pub impersonation_token_file: Option<PathBuf>,
}

/// The validated configuration of a gateway.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    pub client_ca: Option<PathBuf>,
    pub token_file: Option<PathBuf>,
    pub anonymous: bool,
    pub request_header: Option<RequestHeader>,
    pub proxy_client: Option<(PathBuf, PathBuf)>,
    pub apiservice_dir: Option<PathBuf>,
    /// `NAME:PORT` -> addresses to connect to instead of resolving NAME (requests are
    /// balanced over them).
    pub resolve: BTreeMap<(String, u16), Vec<SocketAddr>>,
    pub service_ca: Option<PathBuf>,
    pub delegate: Option<Delegate>,
    pub authorization: Vec<AuthzMode>,
    /// RBAC objects, for `AuthzMode::Rbac` (`--rbac-policy-file`).
    pub authorization_policy_file: Option<PathBuf>,
    pub availability_interval: Duration,
    pub availability_timeout: Duration,
    pub request_timeout: Duration,
    pub shutdown_delay: Duration,
    pub shutdown_grace: Duration,
    pub metrics_listen: Option<SocketAddr>,
    pub log_json: bool,
    /// Groups removed from the identity sent to backends.
    pub backend_drop_groups: Vec<String>,
    pub audit: Option<crate::audit::Settings>,
    /// (overall in flight, in flight per client, connections per client); 0 is unlimited.
    pub limits: (usize, usize, usize),
    pub cluster: Option<Cluster>,
    /// Largest non-streaming request body forwarded; None: no limit.
    pub max_request_body_bytes: Option<usize>,
    /// How long a client may take to send a request head, and a new connection its first one
    /// (`server::HEADER_READ_TIMEOUT`).
    pub header_read_timeout: Duration,
    /// How long a connection answering no request stays open (`server::IDLE_TIMEOUT`).
    pub idle_timeout: Duration,
    /// Connection worker threads (`server::workers`); 0 serves on the shared runtime.
    pub worker_threads: usize,
    /// What loading found worth a warning but not an error (a deprecated flag or key), for
    /// the caller to log once logging is set up.
    pub warnings: Vec<String>,
}

/// The most `--worker-threads`: each is a thread with its own runtime, so a mistyped count must
/// not start millions of them.
pub const MAX_WORKER_THREADS: usize = 1024;

/// The CPUs this process may use (cgroup quota included), the default worker count.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Config {
    /// Where client certificates are verified from: the client CA and the front-proxy CA with
    /// its allowed names. `serve` and `check` load the same sources.
    pub fn cert_sources(&self) -> crate::authn::CertSources {
        crate::authn::CertSources {
            client_ca: self.client_ca.clone(),
            front_proxy_ca: self.request_header.as_ref().map(|rh| rh.client_ca.clone()),
            allowed_names: self
                .request_header
                .as_ref()
                .map(|rh| rh.allowed_names.clone())
                .unwrap_or_default(),
        }
    }

    /// A configuration with every default, serving `cert`/`key` (for tests and embedding).
    pub fn new(tls_cert: PathBuf, tls_key: PathBuf) -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 8443)),
            tls_cert,
            tls_key,
            client_ca: None,
            token_file: None,
            anonymous: false,
            request_header: None,
            proxy_client: None,
            apiservice_dir: None,
            resolve: BTreeMap::new(),
            service_ca: None,
            delegate: None,
            authorization: vec![AuthzMode::AlwaysAllow],
            authorization_policy_file: None,
            availability_interval: Duration::from_secs(30),
            availability_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            shutdown_delay: Duration::ZERO,
            shutdown_grace: Duration::from_secs(30),
            metrics_listen: None,
            log_json: false,
            backend_drop_groups: Vec::new(),
            audit: None,
            limits: (400, 0, 0),
            cluster: None,
            max_request_body_bytes: None,
            header_read_timeout: crate::server::HEADER_READ_TIMEOUT,
            idle_timeout: crate::server::IDLE_TIMEOUT,
            worker_threads: cpus(),
            warnings: Vec::new(),
        }
    }
}

/// The longest duration a setting takes: Go's `time.Duration` (int64 nanoseconds, about 292
/// years), the type kube's flags parse into. Anything longer is an error, never a wrap or a
/// panic, and every deadline computed from a setting stays representable.
pub const MAX_DURATION: Duration = Duration::new(9_223_372_036, 854_775_807);

/// Parses a Go-style duration as kube flags take them: `500ms`, `30s`, `5m`, `1h`, `1m30s`,
/// `1.5h` (also `ns`, `us`, `µs`), up to [`MAX_DURATION`]. Exact integer arithmetic: no input
/// overflows or panics; a number too large is an error naming the input.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const MAX_NANOS: u128 = MAX_DURATION.as_nanos();
    // Fraction digits past this many cannot change the result by a nanosecond.
    const FRACTION_DIGITS: usize = 20;
    const UNITS: &str = "ns, us, ms, s, m, h";
    let not_a_duration = || format!("{text:?} is not a duration like 30s");
    let too_long = || {
        format!("{text:?} is too long: the longest duration is 2562047h47m16.854775807s (about 292 years)")
    };
    let mut rest = text.trim();
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        rest = after;
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(not_a_duration());
        }
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("{text:?}: a number needs a unit ({UNITS})")),
            unit => return Err(format!("{text:?}: unknown unit {unit:?} ({UNITS})")),
        };
        // Whole units, stopping as soon as the value is past the longest duration.
        let mut units: u128 = 0;
        for digit in whole.bytes() {
            units = units * 10 + u128::from(digit - b'0');
            if units > MAX_NANOS {
                return Err(too_long());
            }
        }
        let mut nanos = units.checked_mul(unit_nanos).ok_or_else(too_long)?;
        // The fraction, exactly (to the nanosecond, truncated as Go does).
        let fraction = &fraction[..fraction.len().min(FRACTION_DIGITS)];
        if !fraction.is_empty() {
            let digits: u128 = fraction.parse().map_err(|_| not_a_duration())?;
            nanos += digits * unit_nanos / 10u128.pow(fraction.len() as u32);
        }
        total = total.checked_add(nanos).ok_or_else(too_long)?;
        if total > MAX_NANOS {
            return Err(too_long());
        }
    }
    u64::try_from(total)
        .map(Duration::from_nanos)
        .map_err(|_| too_long())
}

/// One configuration problem: where (a flag, or file and field) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub at: String,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// Where a setting came from, for error messages.
struct Origin<'a> {
    file: Option<&'a Path>,
}

impl Origin<'_> {
    /// Names a setting: `--flag-name` or `file.yaml: camelName`.
    fn name(&self, flag: &str, from_file: bool) -> String {
        match (from_file, self.file) {
            (true, Some(file)) => format!("{}: {}", file.display(), camel(flag)),
            _ => format!("--{flag}"),
        }
    }
}

fn camel(flag: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in flag.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
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

fn load(flags: &Flags, purpose: Purpose) -> Result<Checkable, Vec<ConfigError>> {
    let (file, base) = match &flags.config {
        Some(path) => (read_file(path)?, path.parent().map(Path::to_path_buf)),
        None => (File::default(), None),
    };
    let origin = Origin {
        file: flags.config.as_deref(),
    };
    merge(flags, file, base.as_deref(), &origin, purpose)
}

/// Checks that the file `--config` names (dev mode's `config/dev.yaml`) can be read, is a
/// configuration, and that its manifest directory exists, without looking at the certificate
/// files it names: what `apigw dev` checks before it writes the dev PKI.
pub fn check_config_file(path: &Path) -> Result<(), Vec<ConfigError>> {
    let file = read_file(path)?;
    match file.apiservice_dir {
        Some(dir) => {
            let dir = path.parent().map_or(dir.clone(), |b| b.join(&dir));
            if dir.is_dir() {
                Ok(())
            } else {
                Err(vec![ConfigError {
                    at: format!("{}: apiserviceDir", path.display()),
                    message: format!("{}: no such directory", dir.display()),
                }])
            }
        }
        None => Ok(()),
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
    if let Some((cert, key)) = &cfg.proxy_client {
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
    let chain = crate::tls::load_certs(cert).map_err(|e| ConfigError {
        at: format!("--{cert_flag}"),
        message: e.to_string(),
    })?;
    let der = crate::tls::load_key(key).map_err(|e| ConfigError {
        at: format!("--{key_flag}"),
        message: e.to_string(),
    })?;
    match rustls::sign::CertifiedKey::from_der(chain, der, &crate::tls::provider()) {
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

fn read_file(path: &Path) -> Result<File, Vec<ConfigError>> {
    let at = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![ConfigError {
            at: at.clone(),
            message: e.to_string(),
        }]
    })?;
    crate::yaml::from_str::<Option<File>>(&text)
        .map(Option::unwrap_or_default)
        .map_err(|e| {
            vec![ConfigError {
                at,
                message: e.to_string(),
            }]
        })
}

/// The flag value if given, else the file's (made relative to the file's directory).
fn path_setting(
    flag: &Option<PathBuf>,
    file: Option<PathBuf>,
    base: Option<&Path>,
) -> (Option<PathBuf>, bool) {
    match (flag, file) {
        (Some(p), _) => (Some(p.clone()), false),
        (None, Some(p)) => (Some(base.map_or(p.clone(), |b| b.join(&p))), true),
        (None, None) => (None, false),
    }
}

/// The flag's value if given, else the file's, with whether it came from the file.
fn given<T>(flag: Option<T>, file: Option<T>) -> Option<(T, bool)> {
    match (flag, file) {
        (Some(v), _) => Some((v, false)),
        (None, Some(v)) => Some((v, true)),
        (None, None) => None,
    }
}

fn list_setting(flag: &[String], file: Vec<String>) -> Vec<String> {
    let chosen = if flag.is_empty() { file } else { flag.to_vec() };
    chosen
        .into_iter()
        .filter(|s| !s.trim().is_empty())
        .collect()
}

fn merge(
    flags: &Flags,
    file: File,
    base: Option<&Path>,
    origin: &Origin,
    purpose: Purpose,
) -> Result<Checkable, Vec<ConfigError>> {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let mut problem = |at: String, message: String| problems.push(ConfigError { at, message });

    let mut required_file =
        |flag: &str, value: (Option<PathBuf>, bool), required: bool| -> Option<PathBuf> {
            match value {
                (Some(p), from_file) => {
                    if !p.is_file() {
                        problem(
                            origin.name(flag, from_file),
                            format!("{}: no such file", p.display()),
                        );
                    }
                    Some(p)
                }
                (None, _) if required => {
                    problem(format!("--{flag}"), "is required".into());
                    None
                }
                (None, _) => None,
            }
        };
    let tls_cert = required_file(
        "tls-cert-file",
        path_setting(&flags.tls_cert_file, file.tls_cert_file, base),
        false,
    );
    let tls_key = required_file(
        "tls-private-key-file",
        path_setting(&flags.tls_private_key_file, file.tls_private_key_file, base),
        false,
    );
    let client_ca = required_file(
        "client-ca-file",
        path_setting(&flags.client_ca_file, file.client_ca_file, base),
        false,
    );
    let token_file = required_file(
        "token-auth-file",
        path_setting(&flags.token_auth_file, file.token_auth_file, base),
        false,
    );
    let rh_ca = required_file(
        "requestheader-client-ca-file",
        path_setting(
            &flags.requestheader_client_ca_file,
            file.requestheader_client_ca_file,
            base,
        ),
        false,
    );
    let proxy_cert = required_file(
        "proxy-client-cert-file",
        path_setting(
            &flags.proxy_client_cert_file,
            file.proxy_client_cert_file,
            base,
        ),
        false,
    );
    let proxy_key = required_file(
        "proxy-client-key-file",
        path_setting(
            &flags.proxy_client_key_file,
            file.proxy_client_key_file,
            base,
        ),
        false,
    );
    let service_ca = required_file(
        "service-ca-file",
        path_setting(&flags.service_ca_file, file.service_ca_file, base),
        false,
    );
    let delegate_ca = required_file(
        "delegate-ca-file",
        path_setting(&flags.delegate_ca_file, file.delegate_ca_file, base),
        false,
    );
    let delegate_token = required_file(
        "delegate-impersonation-token-file",
        path_setting(
            &flags.delegate_impersonation_token_file,
            file.delegate_impersonation_token_file,
            base,
        ),
        false,
    );
    let (apiservice_dir, dir_from_file) =
        path_setting(&flags.apiservice_dir, file.apiservice_dir, base);

    let serving_missing =
        serving_problems(tls_cert.is_some(), tls_key.is_some(), origin.file, purpose);
    let mut problems_after = Vec::new();
    let mut later = |at: String, message: String| problems_after.push(ConfigError { at, message });
    if let Some(dir) = &apiservice_dir {
        if !dir.is_dir() {
            later(
                origin.name("apiservice-dir", dir_from_file),
                format!("{}: no such directory", dir.display()),
            );
        }
    }
    let proxy_client = match (proxy_cert, proxy_key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => {
            later(
                "--proxy-client-cert-file".into(),
                "and --proxy-client-key-file must be set together".into(),
            );
            None
        }
    };
    let rh_list = |flag: &[String], file: Vec<String>, default: &str| {
        let v = list_setting(flag, file);
        if v.is_empty() {
            vec![default.to_string()]
        } else {
            v
        }
    };
    let request_header = rh_ca.map(|client_ca| RequestHeader {
        client_ca,
        allowed_names: list_setting(
            &flags.requestheader_allowed_names,
            file.requestheader_allowed_names,
        ),
        username_headers: rh_list(
            &flags.requestheader_username_headers,
            file.requestheader_username_headers,
            "X-Remote-User",
        ),
        group_headers: rh_list(
            &flags.requestheader_group_headers,
            file.requestheader_group_headers,
            "X-Remote-Group",
        ),
        extra_prefixes: rh_list(
            &flags.requestheader_extra_headers_prefix,
            file.requestheader_extra_headers_prefix,
            "X-Remote-Extra-",
        ),
    });

    let mut resolve = BTreeMap::new();
    let from_flags = !flags.resolve.is_empty();
    let entries: Vec<(String, String)> = if from_flags {
        flags
            .resolve
            .iter()
            .map(|r| match r.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (r.clone(), String::new()),
            })
            .collect()
    } else {
        file.resolve.into_iter().collect()
    };
    for (name, addr) in entries {
        match parse_resolve(&name, &addr) {
            Ok((key, addrs)) => {
                let list: &mut Vec<SocketAddr> = resolve.entry(key).or_default();
                for a in addrs {
                    if !list.contains(&a) {
                        list.push(a);
                    }
                }
            }
            Err(m) => later(
                origin.name("resolve", !from_flags),
                format!("{name}={addr}: {m}"),
            ),
        }
    }

    let delegate = match flags.delegate_url.clone().or(file.delegate_url) {
        Some(url) => match parse_https_url(&url) {
            Ok((host, port)) => Some(Delegate {
                host,
                port,
                ca_file: delegate_ca,
                impersonation_token_file: delegate_token,
            }),
            Err(m) => {
                later("--delegate-url".into(), format!("{url}: {m}"));
                None
            }
        },
        None => None,
    };
    let (kubeconfig, kubeconfig_in_file) = path_setting(&flags.kubeconfig, file.kubeconfig, base);
    if let Some(k) = kubeconfig.as_ref().filter(|k| !k.is_file()) {
        later(
            origin.name("kubeconfig", kubeconfig_in_file),
            format!("{}: no such file", k.display()),
        );
    }
    let mut cluster =
        (kubeconfig.is_some() || flags.cluster_mode || file.cluster_mode).then_some(Cluster {
            kubeconfig,
            aggregator_routing: flags.enable_aggregator_routing || file.enable_aggregator_routing,
            leader_election: LeaderElection::default(),
        });
    if cluster.is_some() && apiservice_dir.is_some() {
        later(
            "--apiservice-dir".into(),
            "cluster mode reads APIServices from the cluster; drop --apiservice-dir or --kubeconfig/--cluster-mode".into(),
        );
    }
    let mut authorization = Vec::new();
    for mode in list_setting(&flags.authorization_mode, file.authorization_mode) {
        match mode.as_str() {
            "AlwaysAllow" => authorization.push(AuthzMode::AlwaysAllow),
            "AlwaysDeny" => authorization.push(AuthzMode::AlwaysDeny),
            "RBAC" => authorization.push(AuthzMode::Rbac),
            "Webhook" if cluster.is_some() => authorization.push(AuthzMode::Webhook),
            "Webhook" => later(
                "--authorization-mode".into(),
                "Webhook (SubjectAccessReview) needs cluster mode: --kubeconfig or --cluster-mode"
                    .into(),
            ),
            other => later(
                "--authorization-mode".into(),
                format!("unknown mode {other:?} (AlwaysAllow, AlwaysDeny, RBAC, Webhook)"),
            ),
        }
    }
    if authorization.is_empty() {
        authorization.push(AuthzMode::AlwaysAllow);
    }
    // --rbac-policy-file, and its deprecated name --authorization-policy-file (kube-apiserver's
    // flag of that name reads ABAC): one setting, given once in each place.
    const RBAC: &str = "rbac-policy-file";
    const RBAC_OLD: &str = "authorization-policy-file";
    if flags.rbac_policy_file.is_some() && flags.authorization_policy_file.is_some() {
        later(
            format!("--{RBAC}"),
            format!("and --{RBAC_OLD} (its deprecated name) are both given; give only --{RBAC}"),
        );
    } else if flags.authorization_policy_file.is_some() {
        warnings.push(format!(
            "--{RBAC_OLD} is deprecated (kube-apiserver's flag of that name reads ABAC policy); use --{RBAC}"
        ));
    }
    if file.rbac_policy_file.is_some() && file.authorization_policy_file.is_some() {
        later(
            origin.name(RBAC, true),
            format!(
                "and {} (its deprecated name) are both set; keep only {}",
                camel(RBAC_OLD),
                camel(RBAC)
            ),
        );
    } else if file.authorization_policy_file.is_some() {
        warnings.push(format!(
            "{} is deprecated; use {}",
            origin.name(RBAC_OLD, true),
            camel(RBAC)
        ));
    }
    let policy_flag =
        if flags.rbac_policy_file.is_none() && flags.authorization_policy_file.is_some() {
            RBAC_OLD
        } else {
            RBAC
        };
    let policy_key = if file.rbac_policy_file.is_none() && file.authorization_policy_file.is_some()
    {
        RBAC_OLD
    } else {
        RBAC
    };
    let (policy_file, policy_in_file) = path_setting(
        &flags
            .rbac_policy_file
            .clone()
            .or_else(|| flags.authorization_policy_file.clone()),
        file.rbac_policy_file.or(file.authorization_policy_file),
        base,
    );
    match &policy_file {
        Some(p) if !p.is_file() => later(
            origin.name(
                if policy_in_file {
                    policy_key
                } else {
                    policy_flag
                },
                policy_in_file,
            ),
            format!("{}: no such file", p.display()),
        ),
        None if authorization.contains(&AuthzMode::Rbac) => later(
            format!("--{RBAC}"),
            "is required with --authorization-mode=RBAC".into(),
        ),
        _ => {}
    }

    let mut duration =
        |flag: &str, from_flag: &Option<String>, from_file: Option<String>, default: Duration| {
            let (text, in_file) = match (from_flag, from_file) {
                (Some(t), _) => (t.clone(), false),
                (None, Some(t)) => (t, true),
                (None, None) => return default,
            };
            parse_duration(&text).unwrap_or_else(|m| {
                later(origin.name(flag, in_file), m);
                default
            })
        };
    let availability_interval = duration(
        "availability-check-interval",
        &flags.availability_check_interval,
        file.availability_check_interval,
        Duration::from_secs(30),
    );
    let availability_timeout = duration(
        "availability-check-timeout",
        &flags.availability_check_timeout,
        file.availability_check_timeout,
        Duration::from_secs(5),
    );
    let request_timeout = duration(
        "request-timeout",
        &flags.request_timeout,
        file.request_timeout,
        Duration::from_secs(60),
    );
    let shutdown_delay = duration(
        "shutdown-delay-duration",
        &flags.shutdown_delay_duration,
        file.shutdown_delay_duration,
        Duration::ZERO,
    );
    let shutdown_grace = duration(
        "shutdown-grace-period",
        &flags.shutdown_grace_period,
        file.shutdown_grace_period,
        Duration::from_secs(30),
    );
    let defaults = LeaderElection::default();
    let in_file = [
        (
            "leader-elect-lease-duration",
            flags.leader_elect_lease_duration.is_none()
                && file.leader_elect_lease_duration.is_some(),
        ),
        (
            "leader-elect-renew-deadline",
            flags.leader_elect_renew_deadline.is_none()
                && file.leader_elect_renew_deadline.is_some(),
        ),
        (
            "leader-elect-retry-period",
            flags.leader_elect_retry_period.is_none() && file.leader_elect_retry_period.is_some(),
        ),
    ];
    let leader_election = LeaderElection {
        lease_duration: duration(
            "leader-elect-lease-duration",
            &flags.leader_elect_lease_duration,
            file.leader_elect_lease_duration,
            defaults.lease_duration,
        ),
        renew_deadline: duration(
            "leader-elect-renew-deadline",
            &flags.leader_elect_renew_deadline,
            file.leader_elect_renew_deadline,
            defaults.renew_deadline,
        ),
        retry_period: duration(
            "leader-elect-retry-period",
            &flags.leader_elect_retry_period,
            file.leader_elect_retry_period,
            defaults.retry_period,
        ),
    };
    for (flag, message) in leader_election.problems() {
        let from_file = in_file.iter().any(|(f, yes)| *f == flag && *yes);
        later(origin.name(flag, from_file), message);
    }
    if let Some(c) = cluster.as_mut() {
        c.leader_election = leader_election;
    }
    let log_json = match given(flags.log_format.clone(), file.log_format) {
        None => false,
        Some((format, in_file)) => match format.as_str() {
            "text" => false,
            "json" => true,
            other => {
                later(
                    if in_file {
                        origin.name("log-format", true)
                    } else {
                        "--log-format (--logging-format)".into()
                    },
                    format!("{other:?}: want text or json"),
                );
                false
            }
        },
    };
    if availability_interval.is_zero() {
        later(
            "--availability-check-interval".into(),
            "must be more than 0".into(),
        );
    }
    let (audit_policy, audit_policy_in_file) =
        path_setting(&flags.audit_policy_file, file.audit_policy_file, base);
    if let Some(p) = audit_policy.as_ref().filter(|p| !p.is_file()) {
        later(
            origin.name("audit-policy-file", audit_policy_in_file),
            format!("{}: no such file", p.display()),
        );
    }
    let audit_max_size = match given(flags.audit_log_maxsize, file.audit_log_maxsize) {
        None => 100 << 20,
        Some((megabytes, in_file)) => megabytes.checked_mul(1 << 20).unwrap_or_else(|| {
            later(
                origin.name("audit-log-maxsize", in_file),
                format!(
                    "{megabytes}: too large; at most {} (megabytes)",
                    u64::MAX >> 20
                ),
            );
            u64::MAX
        }),
    };
    let worker_threads = match given(flags.worker_threads, file.worker_threads) {
        None => cpus(),
        Some((n, in_file)) => {
            if n > MAX_WORKER_THREADS {
                later(
                    origin.name("worker-threads", in_file),
                    format!("{n}: too many; at most {MAX_WORKER_THREADS}"),
                );
            }
            n
        }
    };
    let audit = flags
        .audit_log_path
        .clone()
        .or(file.audit_log_path)
        .map(|path| {
            let path = match (&base, flags.audit_log_path.is_none() && path != "-") {
                (Some(b), true) => b.join(&path).display().to_string(),
                _ => path,
            };
            crate::audit::Settings {
                path,
                max_size_bytes: audit_max_size,
                max_backups: flags
                    .audit_log_maxbackup
                    .or(file.audit_log_maxbackup)
                    .unwrap_or(10),
                policy_file: audit_policy,
            }
        });
    problems.splice(0..0, serving_missing);
    problems.append(&mut problems_after);
    let listen = SocketAddr::new(
        flags
            .bind_address
            .or(file.bind_address)
            .unwrap_or(IpAddr::from([0, 0, 0, 0])),
        flags.secure_port.or(file.secure_port).unwrap_or(8443),
    );
    if !problems.is_empty() {
        return Err(problems);
    }
    let serving = tls_cert.is_some() && tls_key.is_some();
    Ok(Checkable {
        serving,
        config: Config {
            listen,
            tls_cert: tls_cert.filter(|_| serving).unwrap_or_default(),
            tls_key: tls_key.filter(|_| serving).unwrap_or_default(),
            client_ca,
            token_file,
            anonymous: flags
                .anonymous_auth
                .or(file.anonymous_auth)
                .unwrap_or(false),
            request_header,
            proxy_client,
            apiservice_dir,
            resolve,
            service_ca,
            delegate,
            authorization,
            authorization_policy_file: policy_file,
            availability_interval,
            availability_timeout,
            request_timeout,
            shutdown_delay,
            shutdown_grace,
            metrics_listen: flags.metrics_bind_address.or(file.metrics_bind_address),
            log_json,
            backend_drop_groups: list_setting(&flags.backend_drop_groups, file.backend_drop_groups),
            audit,
            cluster,
            max_request_body_bytes: flags
                .max_request_body_bytes
                .or(file.max_request_body_bytes)
                .filter(|n| *n > 0),
            header_read_timeout: crate::server::HEADER_READ_TIMEOUT,
            idle_timeout: crate::server::IDLE_TIMEOUT,
            worker_threads,
            limits: (
                flags
                    .max_requests_inflight
                    .or(file.max_requests_inflight)
                    .unwrap_or(400),
                flags
                    .max_requests_inflight_per_client
                    .or(file.max_requests_inflight_per_client)
                    .unwrap_or(0),
                flags
                    .max_connections_per_client
                    .or(file.max_connections_per_client)
                    .unwrap_or(0),
            ),
            warnings,
        },
    })
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

/// Parses `NAME:PORT` and `ADDR:PORT[,ADDR:PORT...]` of a `--resolve` entry.
fn parse_resolve(name: &str, addrs: &str) -> Result<((String, u16), Vec<SocketAddr>), String> {
    let (host, port) = name.rsplit_once(':').ok_or("want NAME:PORT=ADDR:PORT")?;
    let port: u16 = port.parse().map_err(|_| format!("bad port {port:?}"))?;
    if host.is_empty() {
        return Err("empty NAME".into());
    }
    let addrs = addrs
        .split(',')
        .map(|a| {
            a.trim()
                .parse()
                .map_err(|_| format!("{a:?} is not ADDR:PORT (IPv6 as [::1]:443)"))
        })
        .collect::<Result<Vec<SocketAddr>, String>>()?;
    Ok(((host.to_ascii_lowercase(), port), addrs))
}

/// Splits `https://host[:port][/]` into host and port (default 443).
fn parse_https_url(url: &str) -> Result<(String, u16), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err("must be an https:// URL".into());
    }
    if uri.path() != "/" && !uri.path().is_empty() {
        return Err("must not have a path".into());
    }
    let host = uri.host().ok_or("has no host")?;
    // `Uri::port_u16` is None for a port that is not a u16: read the port ourselves, so that
    // `https://host:99999` is an error rather than port 443.
    let authority = uri.authority().map_or("", |a| a.as_str());
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let after_host = host_port
        .rsplit_once(']')
        .map_or(host_port, |(_, rest)| rest);
    let port = match after_host.rsplit_once(':') {
        None => 443,
        Some((_, port)) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            Ok(_) => return Err("port 0 is not a port to connect to".into()),
            Err(e) => return Err(format!("bad port {port:?}: {e} (want 1 to 65535)")),
        },
    };
    Ok((host.trim_matches(['[', ']']).to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "x").unwrap();
        p
    }

    #[test]
    fn file_paths_are_relative_to_the_file_and_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        touch(dir.path(), "s.crt");
        touch(dir.path(), "s.key");
        std::fs::create_dir(dir.path().join("apis")).unwrap();
        let cfg = dir.path().join("c.yaml");
        std::fs::write(
            &cfg,
            "securePort: 9000\ntlsCertFile: s.crt\ntlsPrivateKeyFile: s.key\napiserviceDir: apis\nresolve: {\"a.b.svc:443\": \"127.0.0.1:9443\"}\nworkerThreads: 3\n",
        )
        .unwrap();
        let flags = Flags {
            config: Some(cfg.clone()),
            secure_port: Some(9100),
            ..Default::default()
        };
        let c = Config::load(&flags).unwrap();
        assert_eq!(c.listen.port(), 9100);
        assert_eq!(c.worker_threads, 3);
        let no_workers = Flags {
            config: Some(cfg),
            worker_threads: Some(0),
            ..Default::default()
        };
        assert_eq!(Config::load(&no_workers).unwrap().worker_threads, 0);
        let bare = Flags {
            tls_cert_file: Some(dir.path().join("s.crt")),
            tls_private_key_file: Some(dir.path().join("s.key")),
            ..Default::default()
        };
        assert_eq!(Config::load(&bare).unwrap().worker_threads, cpus());
        assert_eq!(c.tls_cert, dir.path().join("s.crt"));
        assert_eq!(c.apiservice_dir, Some(dir.path().join("apis")));
        assert_eq!(
            c.resolve[&("a.b.svc".to_string(), 443)],
            ["127.0.0.1:9443".parse().unwrap()]
        );
        assert_eq!(c.authorization, vec![AuthzMode::AlwaysAllow]);
    }

    #[test]
    fn problems_name_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.yaml");
        std::fs::write(
            &cfg,
            "tlsCertFile: missing.crt\nresolve: {\"nope\": \"x\"}\n",
        )
        .unwrap();
        let errs = Config::load(&Flags {
            config: Some(cfg.clone()),
            ..Default::default()
        })
        .unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        let file = cfg.display().to_string();
        assert!(
            text.iter()
                .any(|t| t.starts_with(&format!("{file}: tlsCertFile: "))),
            "{text:?}"
        );
        assert!(
            text.iter().any(|t| t
                .starts_with("--tls-private-key-file: is required with --tls-cert-file")
                && t.contains(&format!("tlsPrivateKeyFile in {file}"))),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.starts_with(&format!("{file}: resolve: nope=x"))),
            "{text:?}"
        );
    }

    #[test]
    fn unknown_file_fields_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.yaml");
        std::fs::write(&cfg, "securePrt: 1\n").unwrap();
        let errs = Config::load(&Flags {
            config: Some(cfg),
            ..Default::default()
        })
        .unwrap_err();
        assert!(errs[0].message.contains("securePrt"), "{}", errs[0]);
    }

    #[test]
    fn durations_like_kube_flags() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("3d").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1s.5m"), Ok(Duration::from_secs(31)));
        assert_eq!(parse_duration("1us1ns"), Ok(Duration::from_nanos(1001)));
        assert_eq!(
            parse_duration("0.3333333333333333333333333333s"),
            Ok(Duration::from_nanos(333_333_333))
        );
        assert!(parse_duration(".s").is_err());
        assert!(parse_duration("1.2.3s").is_err());
    }

    #[test]
    fn durations_stop_at_gos_longest() {
        assert_eq!(parse_duration("2562047h47m16.854775807s"), Ok(MAX_DURATION));
        assert_eq!(parse_duration("9223372036854775807ns"), Ok(MAX_DURATION));
        for long in [
            "2562047h47m16.854775808s",
            "9223372036854775808ns",
            "2562048h",
            "99999999999999999999h",
            "340282366920938463463374607431768211456h",
            "9223372036854775807ns1ns",
        ] {
            let e = parse_duration(long).unwrap_err();
            assert!(e.contains(long) && e.contains("too long"), "{long}: {e}");
        }
    }

    #[test]
    fn huge_values_are_problems_naming_flag_or_field_and_value() {
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = (touch(dir.path(), "s.crt"), touch(dir.path(), "s.key"));
        let flags = Flags {
            tls_cert_file: Some(crt),
            tls_private_key_file: Some(key),
            request_timeout: Some("99999999999999999999h".into()),
            audit_log_path: Some("-".into()),
            audit_log_maxsize: Some(u64::MAX),
            worker_threads: Some(usize::MAX),
            delegate_url: Some("https://example.com:99999".into()),
            ..Default::default()
        };
        let text: Vec<String> = Config::load(&flags)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        for (at, value) in [
            ("--request-timeout: ", "99999999999999999999h"),
            ("--audit-log-maxsize: ", &u64::MAX.to_string()),
            ("--worker-threads: ", &usize::MAX.to_string()),
            ("--delegate-url: ", "99999"),
        ] {
            assert!(
                text.iter().any(|t| t.starts_with(at) && t.contains(value)),
                "{at}{value}: {text:?}"
            );
        }
        let cfg = dir.path().join("c.yaml");
        std::fs::write(
            &cfg,
            "shutdownGracePeriod: 2562048h
workerThreads: 1025
",
        )
        .unwrap();
        let text: Vec<String> = Config::load(&Flags {
            config: Some(cfg.clone()),
            tls_cert_file: flags.tls_cert_file,
            tls_private_key_file: flags.tls_private_key_file,
            ..Default::default()
        })
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
        let file = cfg.display().to_string();
        for (field, value) in [
            ("shutdownGracePeriod", "2562048h"),
            ("workerThreads", "1025"),
        ] {
            assert!(
                text.iter()
                    .any(|t| t.starts_with(&format!("{file}: {field}: ")) && t.contains(value)),
                "{field}: {text:?}"
            );
        }
        assert_eq!(
            parse_https_url("https://[::1]:6443/").unwrap(),
            ("::1".into(), 6443)
        );
        assert_eq!(
            parse_https_url("https://user:pw@example.com").unwrap(),
            ("example.com".into(), 443)
        );
        assert!(parse_https_url("https://example.com:0").is_err());
        assert!(parse_https_url("https://[::1]:65536").is_err());
    }

    /// Text a user might give a duration: Go-like pieces with any digits and units, or anything.
    fn duration_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let unit = proptest::sample::select(vec![
            "ns", "us", "µs", "ms", "s", "m", "h", "", "d", "e", ".", " ", "-", "+",
        ]);
        let piece = ("[0-9]{0,45}(\\.[0-9]{0,45})?", unit).prop_map(|(n, u)| format!("{n}{u}"));
        prop_oneof![
            proptest::collection::vec(piece, 0..5).prop_map(|p| p.concat()),
            any::<String>(),
            any::<u128>().prop_map(|n| format!("{n}h")),
            any::<u64>().prop_map(|n| format!("{n}ns")),
            any::<f64>().prop_map(|f| format!("{f}s")),
        ]
    }

    /// A number as a user might write one: in or past any integer type, negative, float.
    fn number_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            any::<u16>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u128>().prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|n| n.to_string()),
            "-?[0-9]{1,45}(\\.[0-9]{0,10})?(e[+-]?[0-9]{1,4})?",
        ]
    }

    /// The file's settings that hold durations, numbers and other text, by kind.
    const FILE_DURATIONS: [&str; 8] = [
        "requestTimeout",
        "shutdownDelayDuration",
        "shutdownGracePeriod",
        "availabilityCheckInterval",
        "availabilityCheckTimeout",
        "leaderElectLeaseDuration",
        "leaderElectRenewDeadline",
        "leaderElectRetryPeriod",
    ];
    const FILE_NUMBERS: [&str; 8] = [
        "securePort",
        "maxRequestsInflight",
        "maxRequestsInflightPerClient",
        "maxConnectionsPerClient",
        "workerThreads",
        "maxRequestBodyBytes",
        "auditLogMaxsize",
        "auditLogMaxbackup",
    ];
    const FILE_TEXT: [&str; 5] = [
        "delegateUrl",
        "logFormat",
        "auditLogPath",
        "bindAddress",
        "metricsBindAddress",
    ];

    /// What loading did: every setting in range, or problems to print.
    fn loaded_sanely(
        result: Result<Config, Vec<ConfigError>>,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        match result {
            Ok(c) => {
                for d in [
                    c.request_timeout,
                    c.shutdown_delay,
                    c.shutdown_grace,
                    c.availability_interval,
                    c.availability_timeout,
                ] {
                    proptest::prop_assert!(d <= MAX_DURATION);
                }
                proptest::prop_assert!(c.worker_threads <= MAX_WORKER_THREADS);
            }
            Err(problems) => proptest::prop_assert!(!problems.is_empty()),
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn no_duration_text_panics(text in duration_text()) {
            if let Ok(d) = parse_duration(&text) {
                proptest::prop_assert!(d <= MAX_DURATION, "{:?} -> {:?}", text, d);
            }
        }

        #[test]
        fn exact_seconds_parse_exactly(secs in 0..=MAX_DURATION.as_secs() + 1, nanos in 0u32..1_000_000_000) {
            let d = Duration::new(secs, nanos);
            let parsed = parse_duration(&format!("{secs}.{nanos:09}s"));
            if d <= MAX_DURATION {
                proptest::prop_assert_eq!(parsed, Ok(d));
            } else {
                proptest::prop_assert!(parsed.is_err());
            }
        }

        #[test]
        fn no_url_or_resolve_text_panics(a in ".*", b in ".*", port in number_text()) {
            let _ = parse_https_url(&a);
            let _ = parse_https_url(&format!("https://{a}:{port}"));
            let _ = parse_https_url(&format!("https://[::1]:{port}/"));
            let _ = parse_resolve(&a, &b);
            let _ = parse_resolve(&format!("{a}:{port}"), &format!("127.0.0.1:{port},{b}"));
        }

        #[test]
        fn no_flag_values_panic(
            durations in proptest::collection::vec(duration_text(), 8),
            counts in proptest::collection::vec(proptest::prelude::any::<usize>(), 6),
            maxsize in proptest::prelude::any::<u64>(),
            port in proptest::prelude::any::<u16>(),
            url in ".*",
            resolve in proptest::collection::vec(".*", 0..3),
            cluster in proptest::prelude::any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let d = |i: usize| Some(durations[i].clone());
            let flags = Flags {
                tls_cert_file: Some(touch(dir.path(), "s.crt")),
                tls_private_key_file: Some(touch(dir.path(), "s.key")),
                secure_port: Some(port),
                request_timeout: d(0),
                shutdown_delay_duration: d(1),
                shutdown_grace_period: d(2),
                availability_check_interval: d(3),
                availability_check_timeout: d(4),
                leader_elect_lease_duration: d(5),
                leader_elect_renew_deadline: d(6),
                leader_elect_retry_period: d(7),
                max_requests_inflight: Some(counts[0]),
                max_requests_inflight_per_client: Some(counts[1]),
                max_connections_per_client: Some(counts[2]),
                worker_threads: Some(counts[3]),
                max_request_body_bytes: Some(counts[4]),
                audit_log_maxbackup: Some(counts[5]),
                audit_log_maxsize: Some(maxsize),
                audit_log_path: Some("-".into()),
                delegate_url: Some(url),
                resolve,
                cluster_mode: cluster,
                ..Default::default()
            };
            loaded_sanely(Config::load(&flags))?;
        }

        #[test]
        fn no_file_values_panic(
            durations in proptest::collection::vec((proptest::sample::select(FILE_DURATIONS.to_vec()), duration_text()), 0..4),
            numbers in proptest::collection::vec((proptest::sample::select(FILE_NUMBERS.to_vec()), number_text()), 0..4),
            texts in proptest::collection::vec((proptest::sample::select(FILE_TEXT.to_vec()), ".*"), 0..3),
            resolve in proptest::collection::btree_map(".*", ".*", 0..3),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let quote = |t: &str| serde_json::Value::from(t).to_string();
            let mut yaml = format!(
                "tlsCertFile: {}\ntlsPrivateKeyFile: {}\nclusterMode: true\nresolve: {}\n",
                quote(&touch(dir.path(), "s.crt").display().to_string()),
                quote(&touch(dir.path(), "s.key").display().to_string()),
                serde_json::json!(resolve),
            );
            let mut seen = std::collections::HashSet::new();
            for (key, value) in durations.iter().map(|(k, v)| (k, quote(v)))
                .chain(numbers.iter().map(|(k, v)| (k, v.clone())))
                .chain(texts.iter().map(|(k, v)| (k, quote(v))))
            {
                if seen.insert(*key) {
                    yaml.push_str(&format!("{key}: {value}\n"));
                }
            }
            let cfg = dir.path().join("c.yaml");
            std::fs::write(&cfg, &yaml).unwrap();
            loaded_sanely(Config::load(&Flags { config: Some(cfg), ..Default::default() }))?;
        }
    }

    #[test]
    fn leader_election_timing_from_flags_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = (touch(dir.path(), "s.crt"), touch(dir.path(), "s.key"));
        let kubeconfig = touch(dir.path(), "kubeconfig");
        let cfg = dir.path().join("c.yaml");
        std::fs::write(
            &cfg,
            "leaderElectLeaseDuration: 4s\nleaderElectRenewDeadline: 3s\n",
        )
        .unwrap();
        let flags = Flags {
            config: Some(cfg.clone()),
            tls_cert_file: Some(crt),
            tls_private_key_file: Some(key),
            kubeconfig: Some(kubeconfig),
            leader_elect_retry_period: Some("500ms".into()),
            ..Default::default()
        };
        let loaded = Config::load(&flags).unwrap();
        let le = loaded.cluster.unwrap().leader_election;
        assert_eq!(le.lease_duration, Duration::from_secs(4));
        assert_eq!(le.renew_deadline, Duration::from_secs(3));
        assert_eq!(le.retry_period, Duration::from_millis(500));

        let errs = Config::load(&Flags {
            leader_elect_retry_period: Some("3s".into()),
            ..flags
        })
        .unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        let file = cfg.display().to_string();
        assert!(
            text.iter().any(|t| t.starts_with(&format!(
                "{file}: leaderElectRenewDeadline: must be greater than 1.2 x"
            ))),
            "{text:?}"
        );
    }

    #[test]
    fn resolve_and_delegate_parsing() {
        assert!(parse_resolve("a.svc:443", "127.0.0.1:1").is_ok());
        assert!(parse_resolve("a.svc:443", "[::1]:1").is_ok());
        assert!(parse_resolve("a.svc", "127.0.0.1:1").is_err());
        assert_eq!(
            parse_resolve("A.svc:443", "127.0.0.1:1, 127.0.0.2:2").unwrap(),
            (
                ("a.svc".into(), 443),
                vec![
                    "127.0.0.1:1".parse().unwrap(),
                    "127.0.0.2:2".parse().unwrap()
                ]
            )
        );
        assert!(parse_resolve("a.svc:443", "127.0.0.1:1,").is_err());
        assert_eq!(
            parse_https_url("https://10.0.0.1:6443").unwrap(),
            ("10.0.0.1".into(), 6443)
        );
        assert!(parse_https_url("http://x").is_err());
    }
}
