//! The proxy's settings: static resolution, backend CAs, the proxy client certificate, the
//! delegate and the groups never forwarded; with the parsing of `--resolve` and
//! `--delegate-url`. Defaults live only here.

use rustls::pki_types::CertificateDer;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

/// How the gateway reaches backends.
#[derive(Debug, Clone, Default)]
pub struct BackendSettings {
    /// `NAME:PORT` -> addresses to connect to instead of resolving NAME (requests are
    /// balanced over them).
    pub resolve: BTreeMap<(String, u16), Vec<SocketAddr>>,
    /// CA for backends whose APIService has no caBundle; None: the system roots.
    pub service_ca: Option<PathBuf>,
    /// Certificate and key presented to backends.
    pub proxy_client: Option<(PathBuf, PathBuf)>,
    pub delegate: Option<Delegate>,
    /// Groups removed from the identity sent to backends.
    pub drop_groups: Vec<String>,
    /// Every request but upgrades over HTTP/2 when the backend offers it (else watches only).
    pub http2_requests: bool,
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

/// The CA bundles the backend settings name, loaded; None where they name none.
pub struct BackendCas {
    /// `service_ca`: for backends whose APIService has no caBundle.
    pub service: Option<Vec<CertificateDer<'static>>>,
    /// The delegate's `ca_file`.
    pub delegate: Option<Vec<CertificateDer<'static>>>,
}

/// A CA bundle the backend settings name could not be loaded; it reads as the underlying error.
#[derive(Debug, thiserror::Error)]
pub enum BackendLoadError {
    #[error(transparent)]
    ServiceCa(apigw_core::tls::TlsError),
    #[error(transparent)]
    DelegateCa(apigw_core::tls::TlsError),
}

impl BackendLoadError {
    /// The flag that named the file.
    pub fn flag(&self) -> &'static str {
        match self {
            Self::ServiceCa(_) => "service-ca-file",
            Self::DelegateCa(_) => "delegate-ca-file",
        }
    }
}

impl BackendSettings {
    /// Loads the CA bundles the settings name, as `serve` and `check` both do; on failure,
    /// every problem in order (`serve` reports the first).
    pub fn load_cas(&self) -> Result<BackendCas, Vec<BackendLoadError>> {
        let load = |path: Option<&PathBuf>,
                    kind: fn(apigw_core::tls::TlsError) -> BackendLoadError| {
            path.map(|p| apigw_core::tls::load_certs(p))
                .transpose()
                .map_err(kind)
        };
        let service = load(self.service_ca.as_ref(), BackendLoadError::ServiceCa);
        let delegate = load(
            self.delegate.as_ref().and_then(|d| d.ca_file.as_ref()),
            BackendLoadError::DelegateCa,
        );
        match (service, delegate) {
            (Ok(service), Ok(delegate)) => Ok(BackendCas { service, delegate }),
            (service, delegate) => Err(service.err().into_iter().chain(delegate.err()).collect()),
        }
    }
}

/// Parses `NAME:PORT` and `ADDR:PORT[,ADDR:PORT...]` of a `--resolve` entry.
pub fn parse_resolve(name: &str, addrs: &str) -> Result<((String, u16), Vec<SocketAddr>), String> {
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

/// Why a URL is not `https://host[:port][/]`.
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error("not a URL")]
    Invalid(#[source] http::uri::InvalidUri),
    #[error("must be an https:// URL")]
    NotHttps,
    #[error("must not have a path")]
    HasPath,
    #[error("has no host")]
    NoHost,
    #[error("port 0 is not a port to connect to")]
    PortZero,
    #[error("bad port {port:?} (want 1 to 65535)")]
    BadPort {
        port: String,
        #[source]
        source: std::num::ParseIntError,
    },
}

/// Splits `https://host[:port][/]` into host and port (default 443).
pub fn parse_https_url(url: &str) -> Result<(String, u16), UrlError> {
    let uri: http::Uri = url.parse().map_err(UrlError::Invalid)?;
    if uri.scheme_str() != Some("https") {
        return Err(UrlError::NotHttps);
    }
    if uri.path() != "/" && !uri.path().is_empty() {
        return Err(UrlError::HasPath);
    }
    let host = uri.host().ok_or(UrlError::NoHost)?;
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
            Ok(_) => return Err(UrlError::PortZero),
            Err(source) => {
                return Err(UrlError::BadPort {
                    port: port.to_string(),
                    source,
                })
            }
        },
    };
    Ok((host.trim_matches(['[', ']']).to_string(), port))
}
