//! OIDC issuers served over TLS on loopback (discovery + JWKS), and JWTs minted with real
//! ES256 keys. One server serves several issuers, each under its own path
//! (`https://127.0.0.1:PORT/<name>`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_FIXED_SIGNING};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// An ES256 signing key and its public JWK.
pub struct SigningKey {
    pub kid: String,
    pair: EcdsaKeyPair,
    pub jwk: Value,
}

impl SigningKey {
    pub fn generate(kid: &str) -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let point = pair.public_key().as_ref();
        let (x, y) = point[1..].split_at(32);
        Self {
            kid: kid.into(),
            jwk: json!({"kty": "EC", "kid": kid, "crv": "P-256", "use": "sig", "alg": "ES256",
                "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y)}),
            pair,
        }
    }

    /// A compact JWS of `claims`, signed, with this key's kid.
    pub fn mint(&self, claims: &Value) -> String {
        self.mint_as(&self.kid, claims)
    }

    /// Signed by this key but naming `kid`.
    pub fn mint_as(&self, kid: &str, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": kid});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = self
            .pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }
}

/// An unsigned token (`alg: none`).
pub fn unsigned(claims: &Value) -> String {
    let header = json!({"alg": "none", "typ": "JWT"});
    format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `base` with `patch`'s keys set (a null value removes the key).
pub fn with(mut base: Value, patch: Value) -> Value {
    if let (Some(b), Some(p)) = (base.as_object_mut(), patch.as_object()) {
        for (k, v) in p {
            if v.is_null() {
                b.remove(k);
            } else {
                b.insert(k.clone(), v.clone());
            }
        }
    }
    base
}

/// Issuers by name, each with the JWKs it publishes.
type Published = Arc<Mutex<BTreeMap<String, Vec<Value>>>>;

/// A TLS server publishing issuers' discovery documents and keys.
pub struct Issuers {
    pub base: String,
    /// The PEM of the CA that signed the server's certificate.
    pub ca_pem: String,
    published: Published,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Issuers {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Issuers {
    pub async fn start() -> Self {
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "oidc-ca");
        let ca =
            rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().unwrap()).unwrap();
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&leaf_key, &ca)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(apigw_core::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let published: Published = Arc::default();
        let (p, b) = (published.clone(), base.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, p, b) = (acceptor.clone(), p.clone(), b.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(move |req: http::Request<_>| {
                        let reply = serve(&p, &b, req.uri().path());
                        async move { Ok::<_, std::convert::Infallible>(reply) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Self {
            base,
            ca_pem: ca.pem(),
            published,
            task,
        }
    }

    /// Publishes issuer `name` with `keys`; returns its URL.
    pub fn publish(&self, name: &str, keys: &[&SigningKey]) -> String {
        self.published
            .lock()
            .unwrap()
            .insert(name.into(), keys.iter().map(|k| k.jwk.clone()).collect());
        self.url(name)
    }

    pub fn url(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    /// The `certificateAuthority` value, indented for a YAML block scalar at `indent`.
    pub fn ca_block(&self, indent: usize) -> String {
        let pad = " ".repeat(indent);
        self.ca_pem.lines().map(|l| format!("{pad}{l}\n")).collect()
    }
}

fn serve(published: &Published, base: &str, path: &str) -> http::Response<Full<Bytes>> {
    let published = published.lock().unwrap();
    let found = path
        .trim_start_matches('/')
        .split_once('/')
        .and_then(|(name, rest)| {
            let keys = published.get(name)?;
            match rest {
                ".well-known/openid-configuration" => Some(json!({
                    "issuer": format!("{base}/{name}"),
                    "jwks_uri": format!("{base}/{name}/keys"),
                    "id_token_signing_alg_values_supported": ["ES256"],
                })),
                "keys" => Some(json!({ "keys": keys })),
                _ => None,
            }
        });
    let (status, body) = match found {
        Some(body) => (200, body),
        None => (404, json!({})),
    };
    let mut resp = http::Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = http::StatusCode::from_u16(status).unwrap();
    resp.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    resp
}
