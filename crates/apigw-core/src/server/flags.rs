//! The server's `serve` flags and file keys: where it listens and with which certificate
//! ([`ServingFlags`]), and its connections and shutdown ([`ServerFlags`]); each read into its
//! settings, defaults from their `Default`.

use super::ServerSettings;
use crate::duration::format_duration;
use crate::settings::Cx;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

crate::section! {
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

/// The serving certificate and key as given (each checked to name a file), and the address to
/// listen on.
pub struct Serving {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub listen: SocketAddr,
}

impl ServingFlags {
    pub fn settings(self, cx: &mut Cx) -> Serving {
        let default = ServerSettings::default().listen;
        Serving {
            cert: cx.file("tls-cert-file", self.tls_cert_file),
            key: cx.file("tls-private-key-file", self.tls_private_key_file),
            listen: SocketAddr::new(
                self.bind_address.unwrap_or(default.ip()),
                self.secure_port.unwrap_or(default.port()),
            ),
        }
    }

    /// Each flag with a default, by argument id, and the default as a user would write it.
    pub fn defaults() -> Vec<(&'static str, String)> {
        let listen = ServerSettings::default().listen;
        vec![
            ("bind_address", listen.ip().to_string()),
            ("secure_port", listen.port().to_string()),
        ]
    }
}

crate::section! {
    /// [`ServerSettings`] (but the listen address: [`ServingFlags`]).
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

impl ServerFlags {
    pub fn settings(self, listen: SocketAddr, cx: &mut Cx) -> ServerSettings {
        let d = ServerSettings::default();
        let settings = ServerSettings {
            listen,
            shutdown_delay: cx.duration(
                "shutdown-delay-duration",
                self.shutdown_delay_duration,
                d.shutdown_delay,
            ),
            shutdown_grace: cx.duration(
                "shutdown-grace-period",
                self.shutdown_grace_period,
                d.shutdown_grace,
            ),
            max_connections_per_client: self
                .max_connections_per_client
                .unwrap_or(d.max_connections_per_client),
            worker_threads: self.worker_threads.unwrap_or(d.worker_threads),
            ..d
        };
        cx.problems(settings.problems());
        settings
    }

    /// Each flag with a default, by argument id, and the default as a user would write it.
    pub fn defaults() -> Vec<(&'static str, String)> {
        let d = ServerSettings::default();
        vec![
            ("shutdown_delay_duration", format_duration(d.shutdown_delay)),
            ("shutdown_grace_period", format_duration(d.shutdown_grace)),
            (
                "max_connections_per_client",
                d.max_connections_per_client.to_string(),
            ),
        ]
    }
}
