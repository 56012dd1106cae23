//! An issuer's signing keys: OIDC discovery, then the JWKS it names, fetched over verified TLS
//! (the configured CA, else the system roots). The last good set is kept when a refetch fails;
//! refetches are rate-limited per issuer.

use super::config::IssuerSettings;
use arc_swap::ArcSwapOption;
use http_body_util::{BodyExt, Empty, Limited};
use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
use jsonwebtoken::DecodingKey;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Discovery documents and key sets bigger than this are refused.
const MAX_BYTES: usize = 1 << 20;

/// Why keys could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url}: {message}")]
    Url { url: String, message: String },
    #[error("{url}: connecting: {source}")]
    Connect {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{url}: {source}")]
    Http {
        url: String,
        #[source]
        source: hyper::Error,
    },
    #[error("{url}: timed out after {0:?}", .timeout)]
    Timeout { url: String, timeout: Duration },
    #[error("{url}: status {status}")]
    Status {
        url: String,
        status: http::StatusCode,
    },
    #[error("{url}: body: {message}")]
    Body { url: String, message: String },
    #[error("{url}: not JSON: {source}")]
    Json {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{url}: {message}")]
    Discovery { url: String, message: String },
    #[error("TLS client: {0}")]
    Tls(#[from] apigw_core::tls::TlsError),
}

/// One usable key of a set.
#[derive(Clone)]
pub struct Key {
    pub kid: Option<String>,
    pub jwk: Jwk,
    pub decoding: DecodingKey,
}

/// The keys one fetch returned.
#[derive(Clone, Default)]
pub struct KeySet {
    pub keys: Vec<Key>,
}

impl KeySet {
    /// Reads a JWKS document; keys this gateway can't use (unknown types, encryption keys,
    /// symmetric keys) are skipped.
    pub fn parse(doc: &Value) -> Self {
        let keys = doc
            .get("keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|k| serde_json::from_value::<Jwk>(k.clone()).ok())
            .filter(|jwk| {
                !matches!(
                    jwk.common.public_key_use,
                    Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
                )
            })
            .filter(|jwk| {
                !matches!(
                    jwk.algorithm,
                    jsonwebtoken::jwk::AlgorithmParameters::OctetKey(_)
                )
            })
            .filter_map(|jwk| {
                let decoding = DecodingKey::from_jwk(&jwk).ok()?;
                Some(Key {
                    kid: jwk.common.key_id.clone(),
                    jwk,
                    decoding,
                })
            })
            .collect();
        Self { keys }
    }

    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }
}

/// Timing of fetches.
#[derive(Debug, Clone, Copy)]
pub struct FetchTiming {
    /// One request's limit.
    pub timeout: Duration,
    /// At most one fetch per issuer this often, whatever asks for it.
    pub min_interval: Duration,
    /// How often the background loop refetches keys it already has.
    pub refresh: Duration,
}

impl Default for FetchTiming {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            min_interval: Duration::from_secs(10),
            refresh: Duration::from_secs(3600),
        }
    }
}

/// One issuer's keys: the last good set and the means to fetch another.
pub struct IssuerKeys {
    url: String,
    discovery: String,
    tls: Arc<ClientConfig>,
    timing: FetchTiming,
    current: ArcSwapOption<KeySet>,
    /// When the last fetch started; fetches are serialized by the async lock.
    last: tokio::sync::Mutex<Option<Instant>>,
    last_error: Mutex<Option<String>>,
}

impl IssuerKeys {
    pub fn new(settings: &IssuerSettings, timing: FetchTiming) -> Result<Self, FetchError> {
        let discovery = match &settings.discovery_url {
            Some(d) => d.clone(),
            None => format!(
                "{}/.well-known/openid-configuration",
                settings.url.trim_end_matches('/')
            ),
        };
        Ok(Self {
            url: settings.url.clone(),
            discovery,
            tls: client_config(settings)?,
            timing,
            current: ArcSwapOption::empty(),
            last: tokio::sync::Mutex::new(None),
            last_error: Mutex::new(None),
        })
    }

    /// The keys in hand, if any fetch ever succeeded.
    pub fn current(&self) -> Option<Arc<KeySet>> {
        self.current.load_full()
    }

    /// Why the last fetch failed, when it did.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// Fetches again unless a fetch started less than `min_interval` ago; returns the keys in
    /// hand afterwards. Concurrent callers wait for one fetch.
    pub async fn refresh(&self) -> Option<Arc<KeySet>> {
        let before = self.current();
        let mut last = self.last.lock().await;
        // Someone else fetched while this caller waited.
        let now_keys = self.current();
        if !same(&before, &now_keys) {
            return now_keys;
        }
        if last.is_some_and(|t| t.elapsed() < self.timing.min_interval) {
            return now_keys;
        }
        *last = Some(Instant::now());
        match self.fetch().await {
            Ok(set) => {
                self.current.store(Some(Arc::new(set)));
                if let Ok(mut e) = self.last_error.lock() {
                    *e = None;
                }
            }
            Err(e) => {
                tracing::warn!(issuer = %self.url, error = %e, "jwt: fetching signing keys failed; keeping the last good keys");
                if let Ok(mut slot) = self.last_error.lock() {
                    *slot = Some(e.to_string());
                }
            }
        }
        self.current()
    }

    /// Fetches in the background forever: often while no keys are in hand, else every
    /// `refresh`. Run it as a task; drop the task to stop.
    pub async fn refresh_loop(self: Arc<Self>) {
        loop {
            self.refresh().await;
            let wait = if self.current().is_some() {
                self.timing.refresh
            } else {
                self.timing.min_interval
            };
            tokio::time::sleep(wait).await;
        }
    }

    async fn fetch(&self) -> Result<KeySet, FetchError> {
        let doc = get_json(&self.discovery, &self.tls, self.timing.timeout).await?;
        let issuer = doc
            .get("issuer")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if issuer != self.url {
            return Err(FetchError::Discovery {
                url: self.discovery.clone(),
                message: format!(
                    "issuer {issuer:?} in the discovery document does not match {:?}",
                    self.url
                ),
            });
        }
        let jwks_uri =
            doc.get("jwks_uri")
                .and_then(Value::as_str)
                .ok_or_else(|| FetchError::Discovery {
                    url: self.discovery.clone(),
                    message: "no jwks_uri".into(),
                })?;
        let jwks = get_json(jwks_uri, &self.tls, self.timing.timeout).await?;
        Ok(KeySet::parse(&jwks))
    }
}

fn same(a: &Option<Arc<KeySet>>, b: &Option<Arc<KeySet>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

fn client_config(settings: &IssuerSettings) -> Result<Arc<ClientConfig>, FetchError> {
    let what = format!("issuer {}", settings.url);
    let roots = match &settings.ca {
        Some(certs) => apigw_core::tls::root_store(certs, &what)?,
        None => {
            let mut roots = rustls::RootCertStore::empty();
            let (_added, _ignored) =
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            roots
        }
    };
    let config = ClientConfig::builder_with_provider(apigw_core::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| apigw_core::tls::TlsError::Invalid {
            what,
            message: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// `GET url` over HTTPS/1.1, verified with `tls`, as JSON.
pub async fn get_json(
    url: &str,
    tls: &Arc<ClientConfig>,
    timeout: Duration,
) -> Result<Value, FetchError> {
    match tokio::time::timeout(timeout, get_json_inner(url, tls)).await {
        Ok(r) => r,
        Err(_) => Err(FetchError::Timeout {
            url: url.to_string(),
            timeout,
        }),
    }
}

async fn get_json_inner(url: &str, tls: &Arc<ClientConfig>) -> Result<Value, FetchError> {
    let bad = |message: &str| FetchError::Url {
        url: url.to_string(),
        message: message.to_string(),
    };
    let uri: http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
    if uri.scheme_str() != Some("https") {
        return Err(bad("URL scheme must be https"));
    }
    let authority = uri.authority().ok_or_else(|| bad("no host"))?.clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(443);
    let name = ServerName::try_from(host.to_string()).map_err(|_| bad("bad host name"))?;
    let tcp = TcpStream::connect((host, port))
        .await
        .map_err(|source| FetchError::Connect {
            url: url.to_string(),
            source,
        })?;
    let stream = TlsConnector::from(tls.clone())
        .connect(name, tcp)
        .await
        .map_err(|source| FetchError::Connect {
            url: url.to_string(),
            source,
        })?;
    let http_err = |source| FetchError::Http {
        url: url.to_string(),
        source,
    };
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(http_err)?;
    let conn = tokio::spawn(conn);
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let req = http::Request::get(path)
        .header(http::header::HOST, authority.as_str())
        .header(http::header::ACCEPT, "application/json")
        .body(Empty::<bytes::Bytes>::new())
        .map_err(|_| bad("bad request"))?;
    let resp = sender.send_request(req).await.map_err(http_err)?;
    let status = resp.status();
    if status != http::StatusCode::OK {
        conn.abort();
        return Err(FetchError::Status {
            url: url.to_string(),
            status,
        });
    }
    let body = Limited::new(resp.into_body(), MAX_BYTES)
        .collect()
        .await
        .map_err(|e| FetchError::Body {
            url: url.to_string(),
            message: e.to_string(),
        })?
        .to_bytes();
    conn.abort();
    serde_json::from_slice(&body).map_err(|source| FetchError::Json {
        url: url.to_string(),
        source,
    })
}
