//! Every setting of `apigw serve` and `apigw check`, each declared once: its flag
//! (kube-apiserver's name), its key in the YAML file (the flag in camelCase), its type and its
//! help, which `docs/configuration.md` is checked against. A help names no default: the
//! `[default: …]` of each is derived from the settings that apply it ([`super::defaults`]). One struct per section, flattened
//! into [`Flags`] for clap and read by [`super::file`] for the file. `display_order` keeps
//! `--help` listing the flags in one order across the sections (each flag its own place, which
//! a test checks); the first flag of each section keeps the headings' order.

use clap::Args;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// One section: a clap [`Args`] struct whose fields also name their file key (and its
/// aliases), and read a file value of their own type, or through `as` a function from the
/// file's form.
macro_rules! section {
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_attr:meta])*
                pub $field:ident: $ty:ty = $key:literal $(| $alias:literal)* $(as $from_file:path)?,
            )*
        }
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Default, Args)]
        pub struct $name {
            $($(#[$field_attr])* pub $field: $ty,)*
        }

        impl $name {
            /// This section's file keys, aliases after their key.
            pub(super) const KEYS: &'static [&'static str] = &[$($key, $($alias,)*)*];

            /// The key `key` stands for, if this section owns it.
            pub(super) fn canonical(key: &str) -> Option<&'static str> {
                match key {
                    $($key $(| $alias)* => Some($key),)*
                    _ => None,
                }
            }

            /// Reads the file's value of `key` (a canonical key of this section).
            pub(super) fn read<'de, A: serde::de::MapAccess<'de>>(
                &mut self,
                key: &str,
                map: &mut A,
            ) -> Result<(), A::Error> {
                match key {
                    $($key => self.$field = $($from_file)?(map.next_value()?),)*
                    _ => {}
                }
                Ok(())
            }
        }
    };
}

/// The file's `resolve` map, `NAME:PORT: ADDR:PORT,...`, as the flag's `NAME:PORT=ADDR:PORT`.
fn resolve_entries(map: BTreeMap<String, String>) -> Vec<String> {
    map.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// The flags of `apigw serve` and `apigw check`.
#[derive(Debug, Clone, Default, Args)]
pub struct Flags {
    /// YAML config file with the same settings in camelCase; flags override it.
    #[arg(long, display_order = 0)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub serving: ServingFlags,
    #[command(flatten)]
    pub authn: AuthnFlags,
    #[command(flatten)]
    pub proxy: ProxyFlags,
    #[command(flatten)]
    pub cluster: ClusterFlags,
    #[command(flatten)]
    pub authz: AuthzFlags,
    #[command(flatten)]
    pub availability: AvailabilityFlags,
    #[command(flatten)]
    pub server: ServerFlags,
    #[command(flatten)]
    pub limits: LimitsFlags,
    #[command(flatten)]
    pub log: LogFlags,
    #[command(flatten)]
    pub audit: AuditFlags,
}

section! {
    /// Where the gateway listens and the certificate it serves.
    pub struct ServingFlags {
        /// Address to listen on.
        #[arg(long, help_heading = "Serving", display_order = 1)]
        pub bind_address: Option<IpAddr> = "bindAddress",
        /// Port to listen on.
        #[arg(long, help_heading = "Serving", display_order = 2)]
        pub secure_port: Option<u16> = "securePort",
        /// Serving certificate (PEM, chain allowed); reloaded when it changes.
        #[arg(long, help_heading = "Serving", display_order = 3)]
        pub tls_cert_file: Option<PathBuf> = "tlsCertFile",
        /// Serving key (PEM).
        #[arg(long, help_heading = "Serving", display_order = 4)]
        pub tls_private_key_file: Option<PathBuf> = "tlsPrivateKeyFile",
    }
}

section! {
    /// [`apigw_authn::AuthnSettings`].
    pub struct AuthnFlags {
        /// CA bundle for user client certificates: user = CN, groups = every O.
        #[arg(long, help_heading = "Authentication", display_order = 5)]
        pub client_ca_file: Option<PathBuf> = "clientCaFile",
        /// Static tokens, kube CSV: token,user,uid,"group1,group2".
        #[arg(long, help_heading = "Authentication", display_order = 6)]
        pub token_auth_file: Option<PathBuf> = "tokenAuthFile",
        /// Serve requests without credentials as system:anonymous.
        #[arg(
            long,
            help_heading = "Authentication",
            num_args = 0..=1,
            default_missing_value = "true",
            display_order = 7
        )]
        pub anonymous_auth: Option<bool> = "anonymousAuth",
        /// CA of front proxies whose identity headers are trusted.
        #[arg(long, help_heading = "Authentication", display_order = 8)]
        pub requestheader_client_ca_file: Option<PathBuf> = "requestheaderClientCaFile",
        /// Front-proxy certificate CNs allowed (comma list); empty allows any from the CA.
        #[arg(
            long,
            help_heading = "Authentication",
            value_delimiter = ',',
            display_order = 9
        )]
        pub requestheader_allowed_names: Vec<String> = "requestheaderAllowedNames",
        /// Headers holding the user name.
        #[arg(
            long,
            help_heading = "Authentication",
            value_delimiter = ',',
            display_order = 10
        )]
        pub requestheader_username_headers: Vec<String> = "requestheaderUsernameHeaders",
        /// Headers holding groups.
        #[arg(
            long,
            help_heading = "Authentication",
            value_delimiter = ',',
            display_order = 11
        )]
        pub requestheader_group_headers: Vec<String> = "requestheaderGroupHeaders",
        /// Header prefixes holding extra attributes.
        #[arg(
            long,
            help_heading = "Authentication",
            value_delimiter = ',',
            display_order = 12
        )]
        pub requestheader_extra_headers_prefix: Vec<String> = "requestheaderExtraHeadersPrefix",
        /// kube's AuthenticationConfiguration file (its `jwt` issuers); reloaded when it changes.
        #[arg(long, help_heading = "Authentication", display_order = 13)]
        pub authentication_config: Option<PathBuf> = "authenticationConfig",
    }
}

section! {
    /// [`apigw_proxy::BackendSettings`], and the APIService manifest directory.
    pub struct ProxyFlags {
        /// Certificate presented to addon servers; reloaded when it changes.
        #[arg(long, help_heading = "Backends", display_order = 14)]
        pub proxy_client_cert_file: Option<PathBuf> = "proxyClientCertFile",
        /// Key of the proxy client certificate.
        #[arg(long, help_heading = "Backends", display_order = 15)]
        pub proxy_client_key_file: Option<PathBuf> = "proxyClientKeyFile",
        /// Directory of APIService manifests, watched for changes.
        #[arg(long, help_heading = "Backends", display_order = 16)]
        pub apiservice_dir: Option<PathBuf> = "apiserviceDir",
        /// Static service resolution NAME:PORT=ADDR:PORT (repeatable); TLS still verifies NAME.
        #[arg(long, help_heading = "Backends", display_order = 17)]
        pub resolve: Vec<String> = "resolve" as resolve_entries,
        /// CA for backends whose APIService has no caBundle; unset: the system roots.
        #[arg(long, help_heading = "Backends", display_order = 18)]
        pub service_ca_file: Option<PathBuf> = "serviceCaFile",
        /// Main API server for everything not aggregated and for Local APIServices.
        #[arg(
            long,
            help_heading = "Delegate (the main API server)",
            display_order = 19
        )]
        pub delegate_url: Option<String> = "delegateUrl",
        /// CA bundle to verify the delegate's serving certificate.
        #[arg(
            long,
            help_heading = "Delegate (the main API server)",
            display_order = 20
        )]
        pub delegate_ca_file: Option<PathBuf> = "delegateCaFile",
        /// Reach the delegate by impersonation: this file's bearer token (the gateway's own
        /// account; re-read when it changes) with Impersonate-* headers naming the user, instead
        /// of the proxy client certificate and X-Remote-* headers.
        #[arg(
            long,
            help_heading = "Delegate (the main API server)",
            display_order = 21
        )]
        pub delegate_impersonation_token_file: Option<PathBuf> = "delegateImpersonationTokenFile",
        /// Groups never sent to backends in X-Remote-Group (comma list), e.g. system:masters.
        #[arg(
            long,
            help_heading = "Backends",
            value_delimiter = ',',
            display_order = 39
        )]
        pub backend_drop_groups: Vec<String> = "backendDropGroups",
        /// Send every request but upgrades to a backend over shared HTTP/2 connections when
        /// it offers h2, as Go's transport and kube-aggregator do; without it, ordinary
        /// requests use a pool of HTTP/1.1 connections and watches HTTP/2.
        #[arg(long, help_heading = "Backends", display_order = 40)]
        pub backend_http2_requests: bool = "backendHttp2Requests",
    }
}

section! {
    /// [`crate::cluster::ClusterSettings`].
    pub struct ClusterFlags {
        /// Cluster mode with this kubeconfig: APIServices, Services and EndpointSlices from the
        /// cluster, TokenReview for bearer tokens, status written back.
        #[arg(long, help_heading = "Cluster mode", display_order = 22)]
        pub kubeconfig: Option<PathBuf> = "kubeconfig",
        /// Cluster mode with the in-cluster service account (inside a Pod).
        #[arg(long, help_heading = "Cluster mode", display_order = 23)]
        pub cluster_mode: bool = "clusterMode",
        /// In cluster mode, route to ready EndpointSlice endpoints instead of the Service's ClusterIP.
        #[arg(long, help_heading = "Cluster mode", display_order = 24)]
        pub enable_aggregator_routing: bool = "enableAggregatorRouting",
        /// In cluster mode, how long other replicas wait after the Lease was last renewed before
        /// taking it.
        #[arg(long, help_heading = "Cluster mode", display_order = 25)]
        pub leader_elect_lease_duration: Option<String> = "leaderElectLeaseDuration",
        /// In cluster mode, how long the leader keeps leading without a successful renewal.
        #[arg(long, help_heading = "Cluster mode", display_order = 26)]
        pub leader_elect_renew_deadline: Option<String> = "leaderElectRenewDeadline",
        /// In cluster mode, how often each replica tries to acquire or renew the Lease.
        #[arg(long, help_heading = "Cluster mode", display_order = 27)]
        pub leader_elect_retry_period: Option<String> = "leaderElectRetryPeriod",
    }
}

section! {
    /// [`apigw_authz::AuthzSettings`].
    pub struct AuthzFlags {
        /// Authorizers in order (comma list): AlwaysAllow, AlwaysDeny, RBAC (objects from
        /// --rbac-policy-file), Webhook (SubjectAccessReview; cluster mode).
        #[arg(
            long,
            help_heading = "Authorization",
            value_delimiter = ',',
            display_order = 29
        )]
        pub authorization_mode: Vec<String> = "authorizationMode",
        /// kube's AuthorizationConfiguration file: the authorizers in order (RBAC, Webhook with
        /// matchConditions, AlwaysAllow, AlwaysDeny); reloaded when it changes. Not with
        /// --authorization-mode.
        #[arg(long, help_heading = "Authorization", display_order = 28)]
        pub authorization_config: Option<PathBuf> = "authorizationConfig",
        /// RBAC objects (Role, ClusterRole, RoleBinding, ClusterRoleBinding) for
        /// --authorization-mode=RBAC; reloaded when it changes.
        #[arg(long, help_heading = "Authorization", display_order = 30)]
        pub rbac_policy_file: Option<PathBuf> = "rbacPolicyFile",
        /// Deprecated: use --rbac-policy-file (kube-apiserver's flag of this name reads ABAC, not
        /// RBAC).
        #[arg(long, help_heading = "Authorization", display_order = 31)]
        pub authorization_policy_file: Option<PathBuf> = "authorizationPolicyFile",
    }
}

section! {
    /// [`apigw_availability::Settings`].
    pub struct AvailabilityFlags {
        /// How often the availability controller checks each APIService.
        #[arg(long, help_heading = "Backends", display_order = 32)]
        pub availability_check_interval: Option<String> = "availabilityCheckInterval",
        /// How long one availability check may take.
        #[arg(long, help_heading = "Backends", display_order = 33)]
        pub availability_check_timeout: Option<String> = "availabilityCheckTimeout",
    }
}

section! {
    /// [`apigw_core::server::ServerSettings`] (but the listen address: [`ServingFlags`]).
    pub struct ServerFlags {
        /// After SIGTERM, keep accepting (while /readyz fails) for this long.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 35)]
        pub shutdown_delay_duration: Option<String> = "shutdownDelayDuration",
        /// After accepting stops, how long in-flight requests may take to finish.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 36)]
        pub shutdown_grace_period: Option<String> = "shutdownGracePeriod",
        /// Open connections from one client address; 0: no limit.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 47)]
        pub max_connections_per_client: Option<usize> = "maxConnectionsPerClient",
        /// Connection worker threads, each a single-threaded runtime that keeps its connections
        /// (0: serve on the shared runtime); unset: the CPUs the process may use.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 48)]
        pub worker_threads: Option<usize> = "workerThreads",
    }
}

section! {
    /// [`apigw_core::server::LimitsSettings`].
    pub struct LimitsFlags {
        /// Bound on a request that is not long-running, end to end from its start: 504 before
        /// the response head, the response cut after.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 34)]
        pub request_timeout: Option<String> = "requestTimeout",
        /// Requests in flight at once, long-running ones exempt; then 429; 0: no limit.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 45)]
        pub max_requests_inflight: Option<usize> = "maxRequestsInflight",
        /// With API Priority and Fairness, the priority levels share this plus
        /// --max-requests-inflight seats, as kube-apiserver's.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 44)]
        pub max_mutating_requests_inflight: Option<usize> = "maxMutatingRequestsInflight",
        /// API Priority and Fairness: classify requests by FlowSchema into priority levels
        /// with fair queues, as kube-apiserver.
        #[arg(
            long,
            help_heading = "Limits and timeouts",
            num_args = 0..=1,
            default_missing_value = "true",
            display_order = 41
        )]
        pub enable_priority_and_fairness: Option<bool> = "enablePriorityAndFairness",
        /// With API Priority and Fairness, each APIService's share of a priority level's
        /// seats, in percent of the level's nominal seats: past it, its requests borrow idle
        /// seats only while no other party's request waits and half of what the share leaves
        /// to the others stays free, so a stalled backend cannot take them all (1 to 100; 100:
        /// no share).
        #[arg(long, help_heading = "Limits and timeouts", display_order = 43)]
        pub max_apiservice_seats_percent: Option<u32> = "maxApiserviceSeatsPercent",
        /// With API Priority and Fairness, FlowSchemas and PriorityLevelConfigurations (v1
        /// objects, a file or a directory) laid over the built-in ones by name; reloaded when
        /// they change.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 42)]
        pub flowcontrol_config: Option<PathBuf> = "flowcontrolConfig",
        /// Requests in flight at once from one client address; 0: no limit.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 46)]
        pub max_requests_inflight_per_client: Option<usize> = "maxRequestsInflightPerClient",
        /// Largest request body of a non-streaming request (POST, PUT, PATCH...), bytes; then 413.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 49)]
        pub max_request_body_bytes: Option<usize> = "maxRequestBodyBytes",
    }
}

section! {
    /// [`super::LogSettings`] and the metrics listener.
    pub struct LogFlags {
        /// Serve /metrics (and health) without authentication on this plain-HTTP address too.
        #[arg(long, help_heading = "Logs, metrics and audit", display_order = 37)]
        pub metrics_bind_address: Option<SocketAddr> = "metricsBindAddress",
        /// Log format: text or json (--logging-format is kube's name).
        #[arg(
            long,
            help_heading = "Logs, metrics and audit",
            visible_alias = "logging-format",
            display_order = 38
        )]
        pub log_format: Option<String> = "logFormat" | "loggingFormat",
    }
}

section! {
    /// [`crate::audit::Settings`].
    pub struct AuditFlags {
        /// Audit log file, or - for stdout; no audit log when unset.
        #[arg(long, help_heading = "Logs, metrics and audit", display_order = 50)]
        pub audit_log_path: Option<String> = "auditLogPath",
        /// Rotate the audit log file at this many megabytes.
        #[arg(long, help_heading = "Logs, metrics and audit", display_order = 51)]
        pub audit_log_maxsize: Option<u64> = "auditLogMaxsize",
        /// Rotated audit log files to keep.
        #[arg(long, help_heading = "Logs, metrics and audit", display_order = 52)]
        pub audit_log_maxbackup: Option<usize> = "auditLogMaxbackup",
        /// audit.k8s.io/v1 Policy choosing levels (None or Metadata); unset: Metadata for all.
        #[arg(long, help_heading = "Logs, metrics and audit", display_order = 53)]
        pub audit_policy_file: Option<PathBuf> = "auditPolicyFile",
    }
}
