//! Flags over the file, section by section: each function takes one section's flags and file
//! keys, fills in the section's defaults (its `Default`), and reports problems naming the
//! flag or the file and key. Relative paths in the file are relative to the file.

use super::file::File;
use super::sections::{
    AuditFlags, AuthnFlags, AuthzFlags, AvailabilityFlags, ClusterFlags, Flags, LimitsFlags,
    LogFlags, ProxyFlags, ServerFlags, ServingFlags,
};
use super::{
    camel, serving_problems, Checkable, Config, ConfigError, LogSettings, Origin, Purpose,
};
use crate::cluster::{ClusterSettings, LeaderElection};
use apigw_authn::{AuthnSettings, RequestHeaderSettings};
use apigw_authz::{AuthzMode, AuthzSettings, LinkSettings};
use apigw_core::duration::parse_duration;
use apigw_core::server::LimitsSettings;
use apigw_core::server::ServerSettings;
use apigw_flowcontrol::FlowControlSettings;
use apigw_proxy::{parse_https_url, parse_resolve, BackendSettings, Delegate};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// The audit log's defaults: rotate at this many megabytes, keep this many rotated files.
pub(super) const AUDIT_MAX_SIZE_MB: u64 = 100;
pub(super) const AUDIT_MAX_BACKUPS: usize = 10;

/// What merging has found so far, and where settings come from.
struct Cx<'a> {
    origin: &'a Origin<'a>,
    /// The file's directory, which relative paths in the file are relative to.
    base: Option<&'a Path>,
    /// Missing files, reported first (after a missing serving pair).
    early: Vec<ConfigError>,
    /// Every other problem.
    later: Vec<ConfigError>,
    warnings: Vec<String>,
}

/// `path` from the file, relative to the file's directory `base`: `config/../certs-dev/x.crt`
/// becomes `certs-dev/x.crt`, so messages name the path a user would type. Only when both
/// spellings reach the same place (through a symlinked directory, `..` goes elsewhere): the
/// same file, or for a file not there yet, the same directory.
pub(super) fn in_dir(base: &Path, path: &Path) -> PathBuf {
    let joined = base.join(path);
    let mut clean = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::ParentDir
                if matches!(clean.components().next_back(), Some(Component::Normal(_))) =>
            {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    let place = |p: &Path| {
        std::fs::canonicalize(p).ok().or_else(|| {
            let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
            std::fs::canonicalize(dir.unwrap_or(Path::new(".")))
                .ok()
                .map(|d| d.join(p.file_name().unwrap_or_default()))
        })
    };
    match (place(&joined), place(&clean)) {
        (Some(a), Some(b)) if a == b && !clean.as_os_str().is_empty() => clean,
        _ => joined,
    }
}

impl Cx<'_> {
    fn later(&mut self, at: String, message: String) {
        self.later.push(ConfigError { at, message });
    }

    /// A path setting, flag over file (relative to the file), with whether it came from the file.
    fn path(&self, flag: &Option<PathBuf>, file: Option<PathBuf>) -> (Option<PathBuf>, bool) {
        match (flag, file) {
            (Some(p), _) => (Some(p.clone()), false),
            (None, Some(p)) => (Some(self.base.map_or(p.clone(), |b| in_dir(b, &p))), true),
            (None, None) => (None, false),
        }
    }

    /// A file setting: its path, and the problem when it names no file.
    fn file_setting(
        &self,
        flag: &str,
        value: &Option<PathBuf>,
        file: Option<PathBuf>,
    ) -> (Option<PathBuf>, Option<ConfigError>) {
        let (path, from_file) = self.path(value, file);
        let missing = path.as_ref().filter(|p| !p.is_file()).map(|p| ConfigError {
            at: self.origin.name(flag, from_file),
            message: format!("{}: no such file", p.display()),
        });
        (path, missing)
    }

    /// A file setting; a problem when it names no file.
    fn file(
        &mut self,
        flag: &str,
        value: &Option<PathBuf>,
        file: Option<PathBuf>,
    ) -> Option<PathBuf> {
        let (path, missing) = self.file_setting(flag, value, file);
        self.early.extend(missing);
        path
    }

    /// A file setting checked with the later problems.
    fn later_file(
        &mut self,
        flag: &str,
        value: &Option<PathBuf>,
        file: Option<PathBuf>,
    ) -> Option<PathBuf> {
        let (path, missing) = self.file_setting(flag, value, file);
        self.later.extend(missing);
        path
    }

    /// A duration setting, `default` when not given or not a duration (a problem then).
    fn duration(
        &mut self,
        flag: &str,
        from_flag: &Option<String>,
        from_file: Option<String>,
        default: Duration,
    ) -> Duration {
        let Some((text, in_file)) = given(from_flag.clone(), from_file) else {
            return default;
        };
        parse_duration(&text).unwrap_or_else(|m| {
            let at = self.origin.name(flag, in_file);
            self.later(at, m);
            default
        })
    }

    /// Reports each of a section's `problems`, by flag name, naming the file key when `in_file`
    /// says the setting came from the file.
    fn problems(&mut self, problems: Vec<(&'static str, String)>, in_file: impl Fn(&str) -> bool) {
        for (flag, message) in problems {
            let at = self.origin.name(flag, in_file(flag));
            self.later(at, message);
        }
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

/// The flag's list if given, else the file's, without blank entries.
fn list(flag: &[String], file: Vec<String>) -> Vec<String> {
    let chosen = if flag.is_empty() { file } else { flag.to_vec() };
    chosen
        .into_iter()
        .filter(|s| !s.trim().is_empty())
        .collect()
}

/// The configuration from `flags` over `file`, or every problem found.
pub(super) fn merge(
    flags: &Flags,
    file: File,
    base: Option<&Path>,
    origin: &Origin,
    purpose: Purpose,
) -> Result<Checkable, Vec<ConfigError>> {
    let mut cx = Cx {
        origin,
        base,
        early: Vec::new(),
        later: Vec::new(),
        warnings: Vec::new(),
    };
    let (tls_cert, tls_key, listen) = serving(&flags.serving, file.serving, &mut cx);
    let authn = authn(&flags.authn, file.authn, &mut cx);
    let (proxy, apiservice_dir) = proxy(&flags.proxy, file.proxy, &mut cx);
    let cluster = cluster(
        &flags.cluster,
        file.cluster,
        apiservice_dir.is_some(),
        &mut cx,
    );
    let authz = authz(&flags.authz, file.authz, cluster.is_some(), &mut cx);
    let availability = availability(&flags.availability, file.availability, &mut cx);
    let limits = limits(&flags.limits, file.limits.clone(), &mut cx);
    let flowcontrol = flowcontrol(&flags.limits, &file.limits, limits.max_inflight, &mut cx);
    let server = server(&flags.server, file.server, listen, &mut cx);
    let (log, metrics_listen) = log(&flags.log, file.log, &mut cx);
    let audit = audit(&flags.audit, file.audit, &mut cx);

    let mut problems =
        serving_problems(tls_cert.is_some(), tls_key.is_some(), origin.file, purpose);
    problems.append(&mut cx.early);
    problems.append(&mut cx.later);
    if !problems.is_empty() {
        return Err(problems);
    }
    let serving = tls_cert.is_some() && tls_key.is_some();
    Ok(Checkable {
        serving,
        config: Config {
            tls_cert: tls_cert.filter(|_| serving).unwrap_or_default(),
            tls_key: tls_key.filter(|_| serving).unwrap_or_default(),
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
            warnings: cx.warnings,
        },
    })
}

/// The serving certificate and key, and the address to listen on.
fn serving(
    f: &ServingFlags,
    file: ServingFlags,
    cx: &mut Cx,
) -> (Option<PathBuf>, Option<PathBuf>, SocketAddr) {
    let cert = cx.file("tls-cert-file", &f.tls_cert_file, file.tls_cert_file);
    let key = cx.file(
        "tls-private-key-file",
        &f.tls_private_key_file,
        file.tls_private_key_file,
    );
    let default = ServerSettings::default().listen;
    let listen = SocketAddr::new(
        f.bind_address.or(file.bind_address).unwrap_or(default.ip()),
        f.secure_port.or(file.secure_port).unwrap_or(default.port()),
    );
    (cert, key, listen)
}

fn authn(f: &AuthnFlags, file: AuthnFlags, cx: &mut Cx) -> AuthnSettings {
    let client_ca = cx.file("client-ca-file", &f.client_ca_file, file.client_ca_file);
    let token_file = cx.file("token-auth-file", &f.token_auth_file, file.token_auth_file);
    let authentication_config = cx.file(
        "authentication-config",
        &f.authentication_config,
        file.authentication_config,
    );
    let rh_ca = cx.file(
        "requestheader-client-ca-file",
        &f.requestheader_client_ca_file,
        file.requestheader_client_ca_file,
    );
    let request_header = rh_ca.map(|client_ca| {
        let defaults = RequestHeaderSettings::new(client_ca);
        let or_default = |v: Vec<String>, default: Vec<String>| {
            if v.is_empty() {
                default
            } else {
                v
            }
        };
        RequestHeaderSettings {
            allowed_names: list(
                &f.requestheader_allowed_names,
                file.requestheader_allowed_names,
            ),
            username_headers: or_default(
                list(
                    &f.requestheader_username_headers,
                    file.requestheader_username_headers,
                ),
                defaults.username_headers,
            ),
            group_headers: or_default(
                list(
                    &f.requestheader_group_headers,
                    file.requestheader_group_headers,
                ),
                defaults.group_headers,
            ),
            extra_prefixes: or_default(
                list(
                    &f.requestheader_extra_headers_prefix,
                    file.requestheader_extra_headers_prefix,
                ),
                defaults.extra_prefixes,
            ),
            client_ca: defaults.client_ca,
        }
    });
    AuthnSettings {
        client_ca,
        token_file,
        anonymous: f.anonymous_auth.or(file.anonymous_auth),
        request_header,
        authentication_config,
    }
}

/// The backend settings, and the APIService manifest directory.
fn proxy(f: &ProxyFlags, file: ProxyFlags, cx: &mut Cx) -> (BackendSettings, Option<PathBuf>) {
    let proxy_cert = cx.file(
        "proxy-client-cert-file",
        &f.proxy_client_cert_file,
        file.proxy_client_cert_file,
    );
    let proxy_key = cx.file(
        "proxy-client-key-file",
        &f.proxy_client_key_file,
        file.proxy_client_key_file,
    );
    let service_ca = cx.file("service-ca-file", &f.service_ca_file, file.service_ca_file);
    let delegate_ca = cx.file(
        "delegate-ca-file",
        &f.delegate_ca_file,
        file.delegate_ca_file,
    );
    let delegate_token = cx.file(
        "delegate-impersonation-token-file",
        &f.delegate_impersonation_token_file,
        file.delegate_impersonation_token_file,
    );
    let (apiservice_dir, dir_from_file) = cx.path(&f.apiservice_dir, file.apiservice_dir);
    if let Some(dir) = apiservice_dir.as_ref().filter(|d| !d.is_dir()) {
        let at = cx.origin.name("apiservice-dir", dir_from_file);
        cx.later(at, format!("{}: no such directory", dir.display()));
    }
    let proxy_client = match (proxy_cert, proxy_key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => {
            cx.later(
                "--proxy-client-cert-file".into(),
                "and --proxy-client-key-file must be set together".into(),
            );
            None
        }
    };
    let mut resolve: BTreeMap<(String, u16), Vec<SocketAddr>> = BTreeMap::new();
    let from_flags = !f.resolve.is_empty();
    let entries = if from_flags {
        &f.resolve
    } else {
        &file.resolve
    };
    for entry in entries {
        let (name, addr) = entry.split_once('=').unwrap_or((entry, ""));
        match parse_resolve(name, addr) {
            Ok((key, addrs)) => {
                let list = resolve.entry(key).or_default();
                for a in addrs {
                    if !list.contains(&a) {
                        list.push(a);
                    }
                }
            }
            Err(m) => {
                let at = cx.origin.name("resolve", !from_flags);
                cx.later(at, format!("{name}={addr}: {m}"));
            }
        }
    }
    let delegate = match f.delegate_url.clone().or(file.delegate_url) {
        Some(url) => match parse_https_url(&url) {
            Ok((host, port)) => Some(Delegate {
                host,
                port,
                ca_file: delegate_ca,
                impersonation_token_file: delegate_token,
            }),
            Err(m) => {
                let m = apigw_core::errors::chain(&m);
                cx.later("--delegate-url".into(), format!("{url}: {m}"));
                None
            }
        },
        None => None,
    };
    let settings = BackendSettings {
        resolve,
        service_ca,
        proxy_client,
        delegate,
        drop_groups: list(&f.backend_drop_groups, file.backend_drop_groups),
        http2_requests: f.backend_http2_requests || file.backend_http2_requests,
    };
    (settings, apiservice_dir)
}

/// Cluster mode (None: off). Its Lease timing is checked either way.
fn cluster(
    f: &ClusterFlags,
    file: ClusterFlags,
    apiservice_dir: bool,
    cx: &mut Cx,
) -> Option<ClusterSettings> {
    let kubeconfig = cx.later_file("kubeconfig", &f.kubeconfig, file.kubeconfig);
    let on = kubeconfig.is_some() || f.cluster_mode || file.cluster_mode;
    if on && apiservice_dir {
        cx.later(
            "--apiservice-dir".into(),
            "cluster mode reads APIServices from the cluster; drop --apiservice-dir or --kubeconfig/--cluster-mode".into(),
        );
    }
    let in_file = [
        (
            "leader-elect-lease-duration",
            f.leader_elect_lease_duration.is_none() && file.leader_elect_lease_duration.is_some(),
        ),
        (
            "leader-elect-renew-deadline",
            f.leader_elect_renew_deadline.is_none() && file.leader_elect_renew_deadline.is_some(),
        ),
        (
            "leader-elect-retry-period",
            f.leader_elect_retry_period.is_none() && file.leader_elect_retry_period.is_some(),
        ),
    ];
    let d = LeaderElection::default();
    let leader_election = LeaderElection {
        lease_duration: cx.duration(
            "leader-elect-lease-duration",
            &f.leader_elect_lease_duration,
            file.leader_elect_lease_duration,
            d.lease_duration,
        ),
        renew_deadline: cx.duration(
            "leader-elect-renew-deadline",
            &f.leader_elect_renew_deadline,
            file.leader_elect_renew_deadline,
            d.renew_deadline,
        ),
        retry_period: cx.duration(
            "leader-elect-retry-period",
            &f.leader_elect_retry_period,
            file.leader_elect_retry_period,
            d.retry_period,
        ),
    };
    cx.problems(leader_election.problems(), |flag| {
        in_file.iter().any(|(f, yes)| *f == flag && *yes)
    });
    on.then_some(ClusterSettings {
        kubeconfig,
        aggregator_routing: f.enable_aggregator_routing || file.enable_aggregator_routing,
        leader_election,
    })
}

fn authz(f: &AuthzFlags, file: AuthzFlags, cluster: bool, cx: &mut Cx) -> AuthzSettings {
    let modes_given = !f.authorization_mode.is_empty() || !file.authorization_mode.is_empty();
    let (config_file, config_in_file) =
        cx.path(&f.authorization_config, file.authorization_config.clone());
    let mut modes = Vec::new();
    for name in list(&f.authorization_mode, file.authorization_mode) {
        match AuthzMode::from_flag(&name) {
            Ok(AuthzMode::Webhook) if !cluster => cx.later(
                "--authorization-mode".into(),
                "Webhook (SubjectAccessReview) needs cluster mode: --kubeconfig or --cluster-mode"
                    .into(),
            ),
            Ok(mode) => modes.push(mode),
            Err(m) => cx.later("--authorization-mode".into(), m),
        }
    }
    let links: Vec<LinkSettings> = match &config_file {
        Some(path) => {
            let at = cx.origin.name("authorization-config", config_in_file);
            if modes_given {
                cx.later(
                    at.clone(),
                    "--authorization-config can not be specified when --authorization-mode or --authorization-webhook-* flags are defined".into(),
                );
            }
            match apigw_authz::config::load(path) {
                Ok(links) => links,
                Err(e) => {
                    for problem in e.problems() {
                        cx.later(at.clone(), problem);
                    }
                    Vec::new()
                }
            }
        }
        None if modes.is_empty() => AuthzSettings::default().links,
        None => modes.into_iter().map(LinkSettings::from).collect(),
    };
    // --rbac-policy-file, and its deprecated name --authorization-policy-file (kube-apiserver's
    // flag of that name reads ABAC): one setting, given once in each place.
    const RBAC: &str = "rbac-policy-file";
    const RBAC_OLD: &str = "authorization-policy-file";
    if f.rbac_policy_file.is_some() && f.authorization_policy_file.is_some() {
        cx.later(
            format!("--{RBAC}"),
            format!("and --{RBAC_OLD} (its deprecated name) are both given; give only --{RBAC}"),
        );
    } else if f.authorization_policy_file.is_some() {
        cx.warnings.push(format!(
            "--{RBAC_OLD} is deprecated (kube-apiserver's flag of that name reads ABAC policy); use --{RBAC}"
        ));
    }
    if file.rbac_policy_file.is_some() && file.authorization_policy_file.is_some() {
        let at = cx.origin.name(RBAC, true);
        cx.later(
            at,
            format!(
                "and {} (its deprecated name) are both set; keep only {}",
                camel(RBAC_OLD),
                camel(RBAC)
            ),
        );
    } else if file.authorization_policy_file.is_some() {
        let old = cx.origin.name(RBAC_OLD, true);
        cx.warnings
            .push(format!("{old} is deprecated; use {}", camel(RBAC)));
    }
    let policy_flag = if f.rbac_policy_file.is_none() && f.authorization_policy_file.is_some() {
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
    let (policy_file, in_file) = cx.path(
        &f.rbac_policy_file
            .clone()
            .or_else(|| f.authorization_policy_file.clone()),
        file.rbac_policy_file.or(file.authorization_policy_file),
    );
    if let Some(p) = policy_file.as_ref().filter(|p| !p.is_file()) {
        let at = cx
            .origin
            .name(if in_file { policy_key } else { policy_flag }, in_file);
        cx.later(at, format!("{}: no such file", p.display()));
    }
    let settings = AuthzSettings {
        links,
        policy_file,
        config_file,
    };
    for (flag, message) in settings.problems() {
        cx.later(format!("--{flag}"), message);
    }
    settings
}

fn availability(
    f: &AvailabilityFlags,
    file: AvailabilityFlags,
    cx: &mut Cx,
) -> apigw_availability::Settings {
    let d = apigw_availability::Settings::default();
    let settings = apigw_availability::Settings {
        interval: cx.duration(
            "availability-check-interval",
            &f.availability_check_interval,
            file.availability_check_interval,
            d.interval,
        ),
        timeout: cx.duration(
            "availability-check-timeout",
            &f.availability_check_timeout,
            file.availability_check_timeout,
            d.timeout,
        ),
    };
    for (flag, message) in settings.problems() {
        cx.later(format!("--{flag}"), message);
    }
    settings
}

/// API Priority and Fairness: on unless turned off; its seats are the two in-flight limits,
/// `read_only` being `--max-requests-inflight` as the limits resolved it.
fn flowcontrol(
    f: &LimitsFlags,
    file: &LimitsFlags,
    read_only: usize,
    cx: &mut Cx,
) -> FlowControlSettings {
    let d = FlowControlSettings::default();
    const PERCENT: &str = "max-apiservice-seats-percent";
    let percent = match given(
        f.max_apiservice_seats_percent,
        file.max_apiservice_seats_percent,
    ) {
        None => d.apiservice_percent,
        Some((p @ 1..=100, _)) => p,
        Some((p, in_file)) => {
            let at = cx.origin.name(PERCENT, in_file);
            cx.later(at, format!("{p}: must be from 1 to 100"));
            d.apiservice_percent
        }
    };
    let mutating = f
        .max_mutating_requests_inflight
        .or(file.max_mutating_requests_inflight)
        .unwrap_or(MAX_MUTATING_INFLIGHT);
    let (config, in_file) = cx.path(&f.flowcontrol_config, file.flowcontrol_config.clone());
    if let Some(path) = &config {
        let at = cx.origin.name("flowcontrol-config", in_file);
        if !path.exists() {
            cx.later(at, format!("{}: no such file or directory", path.display()));
        } else if let Err(problems) = apigw_flowcontrol::file_configuration(path) {
            for problem in problems {
                cx.later(at.clone(), problem);
            }
        }
    }
    FlowControlSettings {
        config,
        enabled: f
            .enable_priority_and_fairness
            .or(file.enable_priority_and_fairness)
            .unwrap_or(d.enabled),
        total_seats: read_only.saturating_add(mutating),
        apiservice_percent: percent,
    }
}

/// kube-apiserver's default `--max-mutating-requests-inflight`.
pub(super) const MAX_MUTATING_INFLIGHT: usize = 200;

fn limits(f: &LimitsFlags, file: LimitsFlags, cx: &mut Cx) -> LimitsSettings {
    let d = LimitsSettings::default();
    LimitsSettings {
        max_inflight: f
            .max_requests_inflight
            .or(file.max_requests_inflight)
            .unwrap_or(d.max_inflight),
        max_inflight_per_client: f
            .max_requests_inflight_per_client
            .or(file.max_requests_inflight_per_client)
            .unwrap_or(d.max_inflight_per_client),
        request_timeout: cx.duration(
            "request-timeout",
            &f.request_timeout,
            file.request_timeout,
            d.request_timeout,
        ),
        max_request_body_bytes: f
            .max_request_body_bytes
            .or(file.max_request_body_bytes)
            .filter(|n| *n > 0)
            .or(d.max_request_body_bytes),
    }
}

fn server(f: &ServerFlags, file: ServerFlags, listen: SocketAddr, cx: &mut Cx) -> ServerSettings {
    let d = ServerSettings::default();
    let workers = given(f.worker_threads, file.worker_threads);
    let settings = ServerSettings {
        listen,
        shutdown_delay: cx.duration(
            "shutdown-delay-duration",
            &f.shutdown_delay_duration,
            file.shutdown_delay_duration,
            d.shutdown_delay,
        ),
        shutdown_grace: cx.duration(
            "shutdown-grace-period",
            &f.shutdown_grace_period,
            file.shutdown_grace_period,
            d.shutdown_grace,
        ),
        max_connections_per_client: f
            .max_connections_per_client
            .or(file.max_connections_per_client)
            .unwrap_or(d.max_connections_per_client),
        worker_threads: workers.map_or(d.worker_threads, |(n, _)| n),
        ..d
    };
    let workers_in_file = workers.is_some_and(|(_, in_file)| in_file);
    cx.problems(settings.problems(), |_| workers_in_file);
    settings
}

/// The log format, and the metrics listener.
fn log(f: &LogFlags, file: LogFlags, cx: &mut Cx) -> (LogSettings, Option<SocketAddr>) {
    let json = match given(f.log_format.clone(), file.log_format) {
        None => LogSettings::default().json,
        Some((format, in_file)) => match format.as_str() {
            "text" => false,
            "json" => true,
            other => {
                let at = if in_file {
                    cx.origin.name("log-format", true)
                } else {
                    "--log-format (--logging-format)".into()
                };
                cx.later(at, format!("{other:?}: want text or json"));
                LogSettings::default().json
            }
        },
    };
    (
        LogSettings { json },
        f.metrics_bind_address.or(file.metrics_bind_address),
    )
}

/// The audit log (None: off).
fn audit(f: &AuditFlags, file: AuditFlags, cx: &mut Cx) -> Option<crate::audit::Settings> {
    let policy_file = cx.later_file(
        "audit-policy-file",
        &f.audit_policy_file,
        file.audit_policy_file,
    );
    let max_size_bytes = match given(f.audit_log_maxsize, file.audit_log_maxsize) {
        None => AUDIT_MAX_SIZE_MB << 20,
        Some((megabytes, in_file)) => megabytes.checked_mul(1 << 20).unwrap_or_else(|| {
            let at = cx.origin.name("audit-log-maxsize", in_file);
            cx.later(
                at,
                format!(
                    "{megabytes}: too large; at most {} (megabytes)",
                    u64::MAX >> 20
                ),
            );
            u64::MAX
        }),
    };
    let from_flag = f.audit_log_path.is_some();
    let path = f.audit_log_path.clone().or(file.audit_log_path)?;
    let path = match (cx.base, !from_flag && path != "-") {
        (Some(b), true) => in_dir(b, Path::new(&path)).display().to_string(),
        _ => path,
    };
    Some(crate::audit::Settings {
        path,
        max_size_bytes,
        max_backups: f
            .audit_log_maxbackup
            .or(file.audit_log_maxbackup)
            .unwrap_or(AUDIT_MAX_BACKUPS),
        policy_file,
    })
}
