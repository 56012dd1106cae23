//! The server's settings: where it listens, how long a client may be slow or idle, its worker
//! threads, connections per client, and how it shuts down; read by the serve loop beside them.
//! Defaults live only here; the flags that set them are in `flags.rs`.

use std::net::SocketAddr;
use std::time::Duration;

/// The most `--worker-threads`: each is a thread with its own runtime, so a mistyped count must
/// not start millions of them.
pub const MAX_WORKER_THREADS: usize = 1024;

/// The CPUs this process may use (cgroup quota included), the default worker count.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How the gateway's listener serves connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    /// How long a client may take to send a request head, and a new connection its first one
    /// ([`super::HEADER_READ_TIMEOUT`]).
    pub header_read_timeout: Duration,
    /// How long a connection answering no request stays open ([`super::IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// Connection worker threads ([`super::workers`]); 0 serves on the shared runtime.
    pub worker_threads: usize,
    /// Open connections from one client address; 0 is unlimited.
    pub max_connections_per_client: usize,
    /// After SIGTERM, keep accepting (while /readyz fails) for this long.
    pub shutdown_delay: Duration,
    /// After accepting stops, how long in-flight requests may take to finish.
    pub shutdown_grace: Duration,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 8443)),
            header_read_timeout: super::HEADER_READ_TIMEOUT,
            idle_timeout: super::IDLE_TIMEOUT,
            worker_threads: cpus(),
            max_connections_per_client: 0,
            shutdown_delay: Duration::ZERO,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

impl ServerSettings {
    /// What is out of range, by flag name.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.worker_threads > MAX_WORKER_THREADS {
            out.push((
                "worker-threads",
                format!(
                    "{}: too many; at most {MAX_WORKER_THREADS}",
                    self.worker_threads
                ),
            ));
        }
        out
    }
}
