//! A small in-memory Kubernetes API server for tests, speaking the real wire protocol over TLS
//! for the resources cluster mode uses: APIServices (with `/status`), Services, EndpointSlices,
//! Leases (stored, listed, watched, with optimistic concurrency), and TokenReviews and
//! SubjectAccessReviews (answered from what the test allows, counting calls). Any bearer token
//! is accepted; each write is recorded with who made it, named by the token of the kubeconfig
//! [`KubeApi::kubeconfig_as`] wrote. Test hooks end every watch (`drop_watches`) or forget
//! history (`compact`).

mod handler;
mod resources;
mod select;
mod store;
mod watch;

use super::Pki;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use store::{ApiError, Store};

/// State shared by every connection.
pub struct Shared {
    store: Mutex<Store>,
    drops: tokio::sync::watch::Sender<u64>,
    tokens: Mutex<HashMap<String, Value>>,
    grants: Mutex<Vec<(String, String, String)>>,
    token_reviews: AtomicUsize,
    access_reviews: AtomicUsize,
    expired: AtomicUsize,
    writes: Mutex<Vec<Write>>,
    /// Bearer token -> caller name, for the write log.
    callers: Mutex<HashMap<String, String>>,
    bookmark_every: Duration,
}

/// One non-GET request: who made it (`unknown` for a token no kubeconfig of this server
/// holds), and `METHOD /path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub by: String,
    pub line: String,
}

impl Shared {
    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn log(&self, token: Option<&str>, line: String) {
        let by = token
            .and_then(|t| {
                self.callers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(t)
                    .cloned()
            })
            .unwrap_or_else(|| "unknown".into());
        self.writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Write { by, line });
    }

    /// Answers a TokenReview or SubjectAccessReview.
    fn review(&self, kind: &resources::Kind, mut body: Value) -> Result<Value, ApiError> {
        let status = match kind.plural {
            "tokenreviews" => {
                self.token_reviews.fetch_add(1, Ordering::SeqCst);
                let token = body["spec"]["token"].as_str().unwrap_or("");
                match self
                    .tokens
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(token)
                {
                    Some(user) => json!({"authenticated": true, "user": user}),
                    None => json!({"authenticated": false, "error": "invalid bearer token"}),
                }
            }
            _ => {
                self.access_reviews.fetch_add(1, Ordering::SeqCst);
                let allowed = self.allowed(&body["spec"]);
                json!({"allowed": allowed, "reason": if allowed { "granted by the test" } else { "" }})
            }
        };
        body["apiVersion"] = kind.api_version().into();
        body["kind"] = kind.kind.into();
        body["metadata"] = json!({"creationTimestamp": null});
        body["status"] = status;
        Ok(body)
    }

    fn allowed(&self, spec: &Value) -> bool {
        let user = spec["user"].as_str().unwrap_or("");
        let (verb, what) = match spec.get("resourceAttributes") {
            Some(r) => {
                let res = r["resource"].as_str().unwrap_or("");
                let what = match r["subresource"].as_str() {
                    Some(sub) if !sub.is_empty() => format!("{res}/{sub}"),
                    _ => res.to_string(),
                };
                (r["verb"].as_str().unwrap_or(""), what)
            }
            None => {
                let n = &spec["nonResourceAttributes"];
                (
                    n["verb"].as_str().unwrap_or(""),
                    n["path"].as_str().unwrap_or("").to_string(),
                )
            }
        };
        let any = |want: &str, have: &str| want == "*" || want == have;
        self.grants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|(u, v, r)| any(u, user) && any(v, verb) && any(r, &what))
    }
}

/// A running test API server.
pub struct KubeApi {
    pub addr: SocketAddr,
    /// A kubeconfig (token auth) for this server; its writes are recorded as by `admin`.
    pub kubeconfig: PathBuf,
    ca_file: PathBuf,
    shared: Arc<Shared>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl KubeApi {
    /// Starts a server on loopback with a CA and serving certificate made in `pki`.
    pub async fn start(pki: &Pki) -> Self {
        super::init();
        let ca = pki.ca("kube-ca");
        let (crt, key) = pki.leaf(
            "kube-api",
            &ca,
            "kube-apiserver",
            &[],
            &["localhost", "127.0.0.1"],
            true,
        );
        let cert = apigw_core::tls::ReloadingCert::load(&crt, &key).unwrap();
        let tls = Arc::new(apigw_core::tls::server_config(cert, None).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new()),
            drops: tokio::sync::watch::channel(0).0,
            tokens: Mutex::default(),
            grants: Mutex::default(),
            token_reviews: AtomicUsize::new(0),
            access_reviews: AtomicUsize::new(0),
            expired: AtomicUsize::new(0),
            writes: Mutex::default(),
            callers: Mutex::default(),
            bookmark_every: Duration::from_millis(500),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let s = shared.clone();
        let make = move |_info: apigw_core::server::ConnInfo| {
            let s = s.clone();
            move |req| handler::handle(s.clone(), req)
        };
        tokio::spawn(apigw_core::server::serve(
            listener,
            Some(tls),
            make,
            apigw_core::server::Limits::default(),
            async {
                let _ = stopped.await;
            },
        ));
        let mut api = Self {
            addr,
            kubeconfig: PathBuf::new(),
            ca_file: pki.path("kube-ca.crt"),
            shared,
            _stop: stop,
        };
        api.kubeconfig = api.kubeconfig_as("admin");
        api
    }

    /// Writes a kubeconfig for this server whose token names `caller` in [`KubeApi::writes_by`].
    pub fn kubeconfig_as(&self, caller: &str) -> PathBuf {
        let token = format!("test-{caller}-token");
        self.shared
            .callers
            .lock()
            .unwrap()
            .insert(token.clone(), caller.into());
        let dir = self.ca_file.parent().expect("the PKI directory");
        let path = dir.join(format!("kube-api-{}-{caller}.kubeconfig", self.addr.port()));
        let kc = json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": format!("https://127.0.0.1:{}", self.addr.port()),
                          "certificate-authority": self.ca_file.display().to_string()}}],
            "users": [{"name": caller, "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": caller, "namespace": "default"}}]
        });
        std::fs::write(&path, kc.to_string()).unwrap();
        path
    }

    /// TokenReviews of `token` authenticate `user` with `groups`.
    pub fn allow_token(&self, token: &str, user: &str, groups: &[&str]) {
        let info = json!({"username": user, "uid": format!("uid-{user}"), "groups": groups,
                          "extra": {"scopes": ["test"]}});
        self.shared
            .tokens
            .lock()
            .unwrap()
            .insert(token.into(), info);
    }

    /// SubjectAccessReviews allow `user` to `verb` `resource` (`res/sub`, or a non-resource
    /// path); `*` matches anything.
    pub fn allow(&self, user: &str, verb: &str, resource: &str) {
        self.shared
            .grants
            .lock()
            .unwrap()
            .push((user.into(), verb.into(), resource.into()));
    }

    pub fn token_reviews(&self) -> usize {
        self.shared.token_reviews.load(Ordering::SeqCst)
    }

    pub fn access_reviews(&self) -> usize {
        self.shared.access_reviews.load(Ordering::SeqCst)
    }

    /// How many watches were answered 410 Expired.
    pub fn expired_watches(&self) -> usize {
        self.shared.expired.load(Ordering::SeqCst)
    }

    /// Every non-GET request so far, as `METHOD /path`.
    pub fn writes(&self) -> Vec<String> {
        self.writes_by().into_iter().map(|w| w.line).collect()
    }

    /// Every non-GET request so far, with who made it, in order.
    pub fn writes_by(&self) -> Vec<Write> {
        self.shared.writes.lock().unwrap().clone()
    }

    /// Ends every open watch, as an API server restart or a load balancer would.
    pub fn drop_watches(&self) {
        self.shared.drops.send_modify(|n| *n += 1);
    }

    /// Forgets history: a watch resuming from an earlier resourceVersion gets 410 Expired.
    pub fn compact(&self) {
        self.shared.store().compact();
    }

    /// Creates or replaces an object given in full (`apiVersion`, `kind`, `metadata`).
    pub fn put(&self, obj: Value) -> Value {
        let (kind, ns, name) = locate(&obj);
        let mut s = self.shared.store();
        let result = match s.get(kind, &ns, &name) {
            Some(_) => s.update(kind, &ns, &name, obj),
            None => s.create(kind, &ns, obj),
        };
        result.unwrap_or_else(|e| panic!("put {name}: {}", e.message))
    }

    /// The stored object of `api_version`/`plural` named `name` (in `ns`, "" when cluster scoped).
    pub fn get(&self, api_version: &str, plural: &str, ns: &str, name: &str) -> Option<Value> {
        let (g, v) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let kind = resources::find(g, v, plural).unwrap();
        self.shared.store().get(kind, ns, name).cloned()
    }

    pub fn delete(&self, api_version: &str, plural: &str, ns: &str, name: &str) {
        let (g, v) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let kind = resources::find(g, v, plural).unwrap();
        self.shared.store().delete(kind, ns, name).unwrap();
    }
}

/// The kind, namespace and name of a full object.
fn locate(obj: &Value) -> (&'static resources::Kind, String, String) {
    let api_version = obj["apiVersion"].as_str().unwrap_or("");
    let (g, v) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = resources::KINDS
        .iter()
        .find(|k| k.group == g && k.version == v && k.kind == obj["kind"].as_str().unwrap_or(""))
        .unwrap_or_else(|| panic!("the test API server does not serve {obj}"));
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    (kind, ns, name)
}
