//! The YAML file: the same settings as the flags, camelCase, one struct per section. The file
//! is read in one pass: each key goes to the section that owns it, and a key no section owns
//! is an error listing every key (as `deny_unknown_fields` would).

use super::ConfigError;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// Every key of the file, aliases after their key, in the order an unknown-key error lists them.
pub(super) const KEYS: &[&str] = &[
    "bindAddress",
    "securePort",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "clientCaFile",
    "tokenAuthFile",
    "anonymousAuth",
    "requestheaderClientCaFile",
    "requestheaderAllowedNames",
    "requestheaderUsernameHeaders",
    "requestheaderGroupHeaders",
    "requestheaderExtraHeadersPrefix",
    "authenticationConfig",
    "proxyClientCertFile",
    "proxyClientKeyFile",
    "apiserviceDir",
    "resolve",
    "serviceCaFile",
    "delegateUrl",
    "delegateCaFile",
    "delegateImpersonationTokenFile",
    "kubeconfig",
    "clusterMode",
    "enableAggregatorRouting",
    "leaderElectLeaseDuration",
    "leaderElectRenewDeadline",
    "leaderElectRetryPeriod",
    "authorizationMode",
    "rbacPolicyFile",
    "authorizationPolicyFile",
    "availabilityCheckInterval",
    "availabilityCheckTimeout",
    "requestTimeout",
    "shutdownDelayDuration",
    "shutdownGracePeriod",
    "metricsBindAddress",
    "logFormat",
    "loggingFormat",
    "backendDropGroups",
    "maxRequestsInflight",
    "maxRequestsInflightPerClient",
    "maxConnectionsPerClient",
    "workerThreads",
    "maxRequestBodyBytes",
    "auditLogPath",
    "auditLogMaxsize",
    "auditLogMaxbackup",
    "auditPolicyFile",
];

/// One section of the file: its fields (each read as its own type, so errors point at the
/// value), its keys and their aliases.
macro_rules! section {
    ($(#[$doc:meta])* $name:ident { $($field:ident: $ty:ty = $key:literal $(| $alias:literal)*,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Default)]
        pub(super) struct $name {
            $(pub(super) $field: $ty,)*
        }

        impl $name {
            /// This section's keys, aliases after their key.
            #[cfg(test)]
            pub(super) const KEYS: &'static [&'static str] = &[$($key, $($alias,)*)*];

            /// The key `key` stands for, if this section owns it.
            fn canonical(key: &str) -> Option<&'static str> {
                match key {
                    $($key $(| $alias)* => Some($key),)*
                    _ => None,
                }
            }

            /// Reads the value of `key` (a canonical key of this section).
            fn read<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
                match key {
                    $($key => self.$field = map.next_value()?,)*
                    _ => {}
                }
                Ok(())
            }
        }
    };
}

section! {
    /// Where the gateway listens and the certificate it serves.
    ServingFile {
        bind_address: Option<IpAddr> = "bindAddress",
        secure_port: Option<u16> = "securePort",
        tls_cert_file: Option<PathBuf> = "tlsCertFile",
        tls_private_key_file: Option<PathBuf> = "tlsPrivateKeyFile",
    }
}

section! {
    /// Authentication.
    AuthnFile {
        client_ca_file: Option<PathBuf> = "clientCaFile",
        token_auth_file: Option<PathBuf> = "tokenAuthFile",
        anonymous_auth: Option<bool> = "anonymousAuth",
        requestheader_client_ca_file: Option<PathBuf> = "requestheaderClientCaFile",
        requestheader_allowed_names: Vec<String> = "requestheaderAllowedNames",
        requestheader_username_headers: Vec<String> = "requestheaderUsernameHeaders",
        requestheader_group_headers: Vec<String> = "requestheaderGroupHeaders",
        requestheader_extra_headers_prefix: Vec<String> = "requestheaderExtraHeadersPrefix",
        authentication_config: Option<PathBuf> = "authenticationConfig",
    }
}

section! {
    /// Backends: the proxy, the delegate and the APIService manifests.
    ProxyFile {
        proxy_client_cert_file: Option<PathBuf> = "proxyClientCertFile",
        proxy_client_key_file: Option<PathBuf> = "proxyClientKeyFile",
        apiservice_dir: Option<PathBuf> = "apiserviceDir",
        resolve: BTreeMap<String, String> = "resolve",
        service_ca_file: Option<PathBuf> = "serviceCaFile",
        delegate_url: Option<String> = "delegateUrl",
        delegate_ca_file: Option<PathBuf> = "delegateCaFile",
        delegate_impersonation_token_file: Option<PathBuf> = "delegateImpersonationTokenFile",
        backend_drop_groups: Vec<String> = "backendDropGroups",
    }
}

section! {
    /// Cluster mode and the Lease election.
    ClusterFile {
        kubeconfig: Option<PathBuf> = "kubeconfig",
        cluster_mode: bool = "clusterMode",
        enable_aggregator_routing: bool = "enableAggregatorRouting",
        leader_elect_lease_duration: Option<String> = "leaderElectLeaseDuration",
        leader_elect_renew_deadline: Option<String> = "leaderElectRenewDeadline",
        leader_elect_retry_period: Option<String> = "leaderElectRetryPeriod",
    }
}

section! {
    /// Authorization; `authorizationPolicyFile` is the deprecated name of `rbacPolicyFile`.
    AuthzFile {
        authorization_mode: Vec<String> = "authorizationMode",
        rbac_policy_file: Option<PathBuf> = "rbacPolicyFile",
        authorization_policy_file: Option<PathBuf> = "authorizationPolicyFile",
    }
}

section! {
    /// The availability controller.
    AvailabilityFile {
        availability_check_interval: Option<String> = "availabilityCheckInterval",
        availability_check_timeout: Option<String> = "availabilityCheckTimeout",
    }
}

section! {
    /// The server's connections and shutdown.
    ServerFile {
        shutdown_delay_duration: Option<String> = "shutdownDelayDuration",
        shutdown_grace_period: Option<String> = "shutdownGracePeriod",
        max_connections_per_client: Option<usize> = "maxConnectionsPerClient",
        worker_threads: Option<usize> = "workerThreads",
    }
}

section! {
    /// Request limits.
    LimitsFile {
        request_timeout: Option<String> = "requestTimeout",
        max_requests_inflight: Option<usize> = "maxRequestsInflight",
        max_requests_inflight_per_client: Option<usize> = "maxRequestsInflightPerClient",
        max_request_body_bytes: Option<usize> = "maxRequestBodyBytes",
    }
}

section! {
    /// Logs and metrics; `loggingFormat` too, as kube spells the flag.
    LogFile {
        metrics_bind_address: Option<SocketAddr> = "metricsBindAddress",
        log_format: Option<String> = "logFormat" | "loggingFormat",
    }
}

section! {
    /// The audit log.
    AuditFile {
        audit_log_path: Option<String> = "auditLogPath",
        audit_log_maxsize: Option<u64> = "auditLogMaxsize",
        audit_log_maxbackup: Option<usize> = "auditLogMaxbackup",
        audit_policy_file: Option<PathBuf> = "auditPolicyFile",
    }
}

/// The YAML file: the same settings as [`super::Flags`], camelCase, by section.
#[derive(Debug, Default)]
pub(super) struct File {
    pub(super) serving: ServingFile,
    pub(super) authn: AuthnFile,
    pub(super) proxy: ProxyFile,
    pub(super) cluster: ClusterFile,
    pub(super) authz: AuthzFile,
    pub(super) availability: AvailabilityFile,
    pub(super) server: ServerFile,
    pub(super) limits: LimitsFile,
    pub(super) log: LogFile,
    pub(super) audit: AuditFile,
}

impl<'de> Deserialize<'de> for File {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct("File", KEYS, FileVisitor)
    }
}

struct FileVisitor;

/// A key of the file, as written.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("field identifier")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

impl<'de> Visitor<'de> for FileVisitor {
    type Value = File;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("struct File")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<File, A::Error> {
        let mut file = File::default();
        let mut seen: Vec<&'static str> = Vec::new();
        while let Some(Key(key)) = map.next_key()? {
            macro_rules! dispatch {
                ($($section:ident: $ty:ident),*) => {
                    $(if let Some(k) = $ty::canonical(&key) {
                        if seen.contains(&k) {
                            return Err(de::Error::duplicate_field(k));
                        }
                        seen.push(k);
                        file.$section.read(k, &mut map)?;
                        continue;
                    })*
                };
            }
            dispatch!(
                serving: ServingFile,
                authn: AuthnFile,
                proxy: ProxyFile,
                cluster: ClusterFile,
                authz: AuthzFile,
                availability: AvailabilityFile,
                server: ServerFile,
                limits: LimitsFile,
                log: LogFile,
                audit: AuditFile
            );
            return Err(de::Error::unknown_field(&key, KEYS));
        }
        Ok(file)
    }
}

/// Reads and parses the file at `path`; an empty file sets nothing.
pub(super) fn read_file(path: &Path) -> Result<File, Vec<ConfigError>> {
    let at = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![ConfigError {
            at: at.clone(),
            message: e.to_string(),
        }]
    })?;
    apigw_core::yaml::from_str::<Option<File>>(&text)
        .map(Option::unwrap_or_default)
        .map_err(|e| {
            vec![ConfigError {
                at,
                message: e.to_string(),
            }]
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_belongs_to_one_section() {
        let mut sections: Vec<&str> = [
            ServingFile::KEYS,
            AuthnFile::KEYS,
            ProxyFile::KEYS,
            ClusterFile::KEYS,
            AuthzFile::KEYS,
            AvailabilityFile::KEYS,
            ServerFile::KEYS,
            LimitsFile::KEYS,
            LogFile::KEYS,
            AuditFile::KEYS,
        ]
        .concat();
        let mut all = KEYS.to_vec();
        sections.sort_unstable();
        all.sort_unstable();
        assert_eq!(sections, all);
    }
}
