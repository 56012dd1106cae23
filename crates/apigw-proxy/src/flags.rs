//! The backends' `serve` flags and file keys, read into [`BackendSettings`].

use crate::{parse_https_url, parse_resolve, BackendSettings, Delegate};
use apigw_core::settings::{list, Cx};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

apigw_core::section! {
    /// [`BackendSettings`].
    pub struct ProxyFlags {
        /// Certificate presented to addon servers; reloaded when it changes.
        #[arg(long, help_heading = "Backends", display_order = 14)]
        pub proxy_client_cert_file: Option<PathBuf> = "proxyClientCertFile",
        /// Key of the proxy client certificate.
        #[arg(long, help_heading = "Backends", display_order = 15)]
        pub proxy_client_key_file: Option<PathBuf> = "proxyClientKeyFile",
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

/// The file's `resolve` map, `NAME:PORT: ADDR:PORT,...`, as the flag's `NAME:PORT=ADDR:PORT`.
fn resolve_entries(map: BTreeMap<String, String>) -> Vec<String> {
    map.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

impl ProxyFlags {
    pub fn settings(self, cx: &mut Cx) -> BackendSettings {
        const CERT: &str = "proxy-client-cert-file";
        let proxy_cert = cx.file(CERT, self.proxy_client_cert_file);
        let proxy_key = cx.file("proxy-client-key-file", self.proxy_client_key_file);
        let service_ca = cx.file("service-ca-file", self.service_ca_file);
        let delegate_ca = cx.file("delegate-ca-file", self.delegate_ca_file);
        let delegate_token = cx.file(
            "delegate-impersonation-token-file",
            self.delegate_impersonation_token_file,
        );
        let proxy_client = match (proxy_cert, proxy_key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => {
                cx.problem(
                    CERT,
                    "and --proxy-client-key-file must be set together".into(),
                );
                None
            }
        };
        let mut resolve: BTreeMap<(String, u16), Vec<SocketAddr>> = BTreeMap::new();
        for entry in &self.resolve {
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
                Err(m) => cx.problem("resolve", format!("{name}={addr}: {m}")),
            }
        }
        let delegate = match self.delegate_url {
            Some(url) => match parse_https_url(&url) {
                Ok((host, port)) => Some(Delegate {
                    host,
                    port,
                    ca_file: delegate_ca,
                    impersonation_token_file: delegate_token,
                }),
                Err(m) => {
                    let m = apigw_core::errors::chain(&m);
                    cx.problem("delegate-url", format!("{url}: {m}"));
                    None
                }
            },
            None => None,
        };
        BackendSettings {
            resolve,
            service_ca,
            proxy_client,
            delegate,
            drop_groups: list(self.backend_drop_groups),
            http2_requests: self.backend_http2_requests,
        }
    }

    /// None of these flags has a default to show: unset is off (or, for the service CA, the
    /// system roots, which the help says).
    pub fn defaults() -> Vec<(&'static str, String)> {
        Vec::new()
    }
}
