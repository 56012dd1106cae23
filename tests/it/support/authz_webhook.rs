//! An authorization webhook for the tests: answers each SubjectAccessReview POSTed to it over
//! TLS with what a rule says, or with a 500, and keeps every review it was sent. Both apigw
//! and kube-apiserver reach it through the kubeconfig [`AuthzWebhook::kubeconfig`] writes.

use super::Pki;
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What the rule answers a review's spec: a status (`allowed`, `denied`, `reason`), or None
/// for an HTTP 500.
pub type Rule = fn(&Value) -> Option<Value>;

pub struct AuthzWebhook {
    pub url: String,
    /// The reviews received, in order.
    pub seen: Arc<Mutex<Vec<Value>>>,
    ca: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AuthzWebhook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AuthzWebhook {
    /// Serves `rule` at `https://127.0.0.1:<port>/authorize`, with a certificate from a CA of
    /// its own in `pki`. Call from within a Tokio runtime.
    pub async fn start(pki: &Pki, rule: Rule) -> Self {
        let ca = pki.ca("webhook-ca");
        let (crt, key) = pki.leaf("webhook", &ca, "webhook", &[], &["127.0.0.1"], true);
        let config = rustls::ServerConfig::builder_with_provider(apigw_core::tls::provider())
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                apigw_core::tls::load_certs(&crt).expect("webhook cert"),
                apigw_core::tls::load_key(&key).expect("webhook key"),
            )
            .expect("webhook TLS");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let url = format!(
            "https://127.0.0.1:{}/authorize",
            listener.local_addr().expect("address").port()
        );
        let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, log) = (acceptor.clone(), log.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let log = log.clone();
                            async move {
                                let body = req.into_body().collect().await?.to_bytes();
                                let review: Value =
                                    serde_json::from_slice(&body).unwrap_or_default();
                                log.lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .push(review.clone());
                                Ok::<_, hyper::Error>(answer(&review, rule))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Self {
            url,
            seen,
            ca: pki.path("webhook-ca.crt"),
            task,
        }
    }

    /// Writes a kubeconfig naming the webhook (its URL and CA) at `path`; returns `path`.
    pub fn kubeconfig(&self, path: PathBuf) -> PathBuf {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: webhook\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: apiserver\n  user: {{}}\ncontexts:\n- name: webhook\n  context: {{cluster: webhook, user: apiserver}}\ncurrent-context: webhook\n",
            self.url,
            self.ca.display()
        );
        std::fs::write(&path, text).expect("writing the webhook's kubeconfig");
        path
    }

    /// The specs of the reviews received, and forgets them.
    pub fn take(&self) -> Vec<Value> {
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(|e| e.into_inner()))
            .into_iter()
            .map(|r| r["spec"].clone())
            .collect()
    }
}

fn answer(review: &Value, rule: Rule) -> Response<Full<Bytes>> {
    let (status, body) = match rule(&review["spec"]) {
        Some(status) => (
            StatusCode::OK,
            json!({
                "apiVersion": review["apiVersion"], "kind": "SubjectAccessReview",
                "status": status,
            }),
        ),
        None => (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "message": "the webhook is failing on purpose", "reason": "InternalError", "code": 500}),
        ),
    };
    let mut res = Response::new(Full::new(Bytes::from(body.to_string())));
    *res.status_mut() = status;
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    res
}
