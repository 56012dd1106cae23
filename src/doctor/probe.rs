//! The doctor's own TLS probe. It verifies a backend exactly as the gateway does (webpki against
//! the caBundle, the service name, the proxy client certificate presented), but its verifier
//! also records the chain the backend served, so a failed handshake can still be explained
//! certificate by certificate. Then one HTTP/1.1 GET as `system:kube-aggregator`.

use apigw_core::tls::{provider, ProxyClientCert, TlsError};
use bytes::Bytes;
use http::{header, Request, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{AlertDescription, DigitallySignedStruct, SignatureScheme};
use std::error::Error as StdError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// Discovery documents bigger than this are refused, as the availability controller does.
const MAX_BODY: usize = 16 << 20;

/// Verifies like the gateway (or not at all, for `insecureSkipTLSVerify`) and keeps the chain.
#[derive(Debug)]
struct Recorder {
    inner: Arc<dyn ServerCertVerifier>,
    seen: Mutex<Vec<CertificateDer<'static>>>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let chain = std::iter::once(end_entity)
            .chain(intermediates)
            .map(|c| c.clone().into_owned())
            .collect();
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = chain;
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The gateway's verifier for `roots` (the caBundle, or the fallback CAs).
pub fn webpki_verifier(
    roots: &[CertificateDer<'static>],
    what: &str,
) -> Result<Arc<WebPkiServerVerifier>, TlsError> {
    let store = apigw_core::tls::root_store(roots, what)?;
    WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider())
        .build()
        .map_err(|e| TlsError::Invalid {
            what: what.to_string(),
            message: e.to_string(),
        })
}

/// Why a handshake or request failed.
#[derive(Debug)]
pub enum ProbeError {
    /// rustls refused, or the peer sent an alert.
    Tls(rustls::Error),
    /// Anything else (I/O, HTTP), already described.
    Other(String),
    Timeout,
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tls(e) => write!(f, "tls: {e}"),
            Self::Other(m) => f.write_str(m),
            Self::Timeout => f.write_str("no answer in time"),
        }
    }
}

impl ProbeError {
    /// The alert the backend sent, if that is what ended the connection.
    pub fn alert(&self) -> Option<AlertDescription> {
        match self {
            Self::Tls(rustls::Error::AlertReceived(a)) => Some(*a),
            _ => None,
        }
    }

    fn from_error(e: &(dyn StdError + 'static)) -> Self {
        match find_rustls(e) {
            Some(tls) => Self::Tls(tls.clone()),
            None => Self::Other(apigw_core::errors::chain(e)),
        }
    }
}

/// The rustls error somewhere in `e`'s chain (also inside `io::Error`s, which hide it).
fn find_rustls<'a>(mut e: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    loop {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(inner);
        }
        e = e.source()?;
    }
}

/// What a handshake produced: the chain served (even when verification failed) and the stream.
pub struct Handshake {
    pub chain: Vec<CertificateDer<'static>>,
    pub result: Result<TlsStream<TcpStream>, ProbeError>,
}

/// Completes a TLS handshake for `host` over `tcp`, verifying with `verifier` (None: skip).
pub async fn handshake(
    tcp: TcpStream,
    host: &str,
    verifier: Option<Arc<WebPkiServerVerifier>>,
    client_cert: Option<ProxyClientCert>,
    timeout: Duration,
) -> Handshake {
    let inner: Arc<dyn ServerCertVerifier> = match verifier {
        Some(v) => v,
        None => apigw_core::tls::any_server_cert(),
    };
    let recorder = Arc::new(Recorder {
        inner,
        seen: Mutex::default(),
    });
    let result = connect(tcp, host, recorder.clone(), client_cert, timeout).await;
    let chain = std::mem::take(&mut *recorder.seen.lock().unwrap_or_else(|e| e.into_inner()));
    Handshake { chain, result }
}

async fn connect(
    tcp: TcpStream,
    host: &str,
    recorder: Arc<Recorder>,
    client_cert: Option<ProxyClientCert>,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, ProbeError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(ProbeError::Tls)?
        .dangerous()
        .with_custom_certificate_verifier(recorder);
    let mut config = match client_cert {
        Some(cert) => builder.with_client_cert_resolver(cert),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| ProbeError::Other(format!("{host}: {e}")))?;
    let connecting = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp);
    match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(e)) => Err(ProbeError::from_error(&e)),
        Err(_) => Err(ProbeError::Timeout),
    }
}

/// A backend's answer, read whole.
pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
    pub elapsed: Duration,
}

/// GETs `path` over `tls` as `system:kube-aggregator` (group `system:masters`).
pub async fn get(
    tls: TlsStream<TcpStream>,
    authority: &str,
    path: &str,
    timeout: Duration,
) -> Result<Answer, ProbeError> {
    let started = Instant::now();
    let work = async {
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| ProbeError::from_error(&e))?;
        // The connection's own error (a TLS alert after the handshake) is the useful one;
        // the request only learns that the connection went away.
        let (conn_tx, conn_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let _ = conn_tx.send(conn.await);
        });
        let req = Request::get(path)
            .header(header::HOST, authority)
            .header(header::ACCEPT, "application/json")
            .header(header::USER_AGENT, "apigw-doctor")
            .header("X-Remote-User", "system:kube-aggregator")
            .header("X-Remote-Group", "system:masters")
            .body(Empty::<Bytes>::new())
            .map_err(|e| ProbeError::Other(e.to_string()))?;
        // `send` is not held while waiting: a request handed over just as the connection
        // ends (a TLS alert right after the handshake) is answered only once every handle to
        // the connection is gone.
        let answer = send.send_request(req);
        drop(send);
        let res = match answer.await {
            Ok(res) => res,
            Err(e) => {
                return Err(match conn_rx.await {
                    Ok(Err(conn_err)) => ProbeError::from_error(&conn_err),
                    _ => ProbeError::from_error(&e),
                })
            }
        };
        let status = res.status();
        let body = Limited::new(res.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| ProbeError::Other(format!("reading the answer: {e}")))?
            .to_bytes();
        Ok(Answer {
            status,
            body,
            elapsed: started.elapsed(),
        })
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or(Err(ProbeError::Timeout))
}
