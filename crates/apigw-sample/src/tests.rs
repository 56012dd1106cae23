//! End-to-end tests of the sample server over TLS, with a dev PKI generated for each test and a
//! small HTTP/1.1 client that can present the front proxy's certificate.

use super::{run, SampleConfig};
use apigw_core::certs::{write_dev_pki, DevPkiOptions};
use apigw_core::tls::{self, ReloadingCert, Trust};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;

const NS_PATH: &str = "/apis/wardle.example.com/v1alpha1/namespaces/ns1/flunders";

/// A running sample server and the files to talk to it.
struct Harness {
    _dir: tempfile::TempDir,
    addr: SocketAddr,
    pki: std::path::PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Harness {
    async fn start(allowed_names: Vec<String>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = dir.path().join("pki");
        let opts = DevPkiOptions {
            out: pki.clone(),
            ..DevPkiOptions::default()
        };
        write_dev_pki(&opts).expect("dev PKI");
        let cfg = SampleConfig {
            allowed_names,
            bookmark_interval: std::time::Duration::from_millis(200),
            ..SampleConfig::new(
                pki.join("wardle.crt"),
                pki.join("wardle.key"),
                pki.join("front-proxy-ca.crt"),
            )
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run(listener, cfg, async {
            let _ = stopped.await;
        }));
        Self {
            _dir: dir,
            addr,
            pki,
            stop: Some(stop),
            task,
        }
    }

    /// A client presenting `cert` (a stem in the PKI dir), or no certificate.
    fn client(&self, cert: Option<&str>) -> Client {
        let ca = tls::load_certs(&self.pki.join("addon-ca.crt")).expect("addon CA");
        let proxy = cert.map(|stem| {
            ReloadingCert::load(
                &self.pki.join(format!("{stem}.crt")),
                &self.pki.join(format!("{stem}.key")),
            )
            .expect("client cert")
        });
        let config = tls::backend_client_config(Trust::Roots(&ca), proxy, &[b"http/1.1"], "test")
            .expect("client config");
        Client {
            addr: self.addr,
            config: Arc::new(config),
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.expect("join").expect("run");
    }
}

struct Client {
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
}

impl Client {
    /// One request on a fresh connection to `wardle-server.wardle-namespace.svc`.
    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.try_send(method, path, headers, body)
            .await
            .expect("request")
    }

    async fn try_send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let (status, _, value) = self.exchange(method, path, headers, body).await?;
        Ok((status, value))
    }

    /// One request; the status, headers and body (JSON, else a string) of the answer.
    async fn exchange(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> anyhow::Result<(StatusCode, http::HeaderMap, Value)> {
        let tcp = tokio::net::TcpStream::connect(self.addr).await?;
        let name = ServerName::try_from("wardle-server.wardle-namespace.svc")?;
        let tls = tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, tcp)
            .await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "wardle-server.wardle-namespace.svc");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let res = sender
            .send_request(req.body(Full::new(Bytes::from(bytes)))?)
            .await?;
        let status = res.status();
        let headers = res.headers().clone();
        let body = res.into_body().collect().await?.to_bytes();
        let value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
        Ok((status, headers, value))
    }

    /// As the gateway would: identity headers on a front-proxy connection.
    async fn as_user(
        &self,
        method: Method,
        path: &str,
        extra: &[(&str, &str)],
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut headers = vec![("x-remote-user", "alice"), ("x-remote-group", "dev-group")];
        headers.extend_from_slice(extra);
        self.send(method, path, &headers, body).await
    }
}

fn flunder(name: &str) -> Value {
    json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder", "metadata": {"name": name}, "spec": {"reference": "r1"}})
}

#[tokio::test]
async fn crud_over_tls_as_front_proxy() {
    let h = Harness::start(vec!["front-proxy-client".into()]).await;
    let c = h.client(Some("proxy-client"));
    let (status, made) = c
        .as_user(
            Method::POST,
            NS_PATH,
            &[("content-type", "application/json")],
            Some(flunder("f1")),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["metadata"]["namespace"], "ns1");
    let item = format!("{NS_PATH}/f1");
    let (status, got) = c.as_user(Method::GET, &item, &[], None).await;
    assert_eq!((status, &got), (StatusCode::OK, &made));
    let (status, dup) = c
        .as_user(Method::POST, NS_PATH, &[], Some(flunder("f1")))
        .await;
    assert_eq!(
        (status, dup["reason"].as_str()),
        (StatusCode::CONFLICT, Some("AlreadyExists"))
    );

    let (status, list) = c
        .as_user(
            Method::GET,
            "/apis/wardle.example.com/v1alpha1/flunders",
            &[],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (
            list["kind"].as_str(),
            list["items"].as_array().map(Vec::len)
        ),
        (Some("FlunderList"), Some(1))
    );

    let patch = json!({"metadata": {"labels": {"color": "blue"}}, "spec": {"reference": "r2"}});
    let merge = [("content-type", "application/merge-patch+json")];
    let (status, patched) = c
        .as_user(Method::PATCH, &item, &merge, Some(patch.clone()))
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(
        (
            patched["metadata"]["labels"]["color"].as_str(),
            patched["spec"]["reference"].as_str()
        ),
        (Some("blue"), Some("r2"))
    );
    let json_patch = [("content-type", "application/json-patch+json")];
    let (status, _) = c
        .as_user(Method::PATCH, &item, &json_patch, Some(json!([])))
        .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    // `made` carries the resourceVersion from before the patch.
    let (status, stale) = c.as_user(Method::PUT, &item, &[], Some(made.clone())).await;
    assert_eq!(
        (status, stale["reason"].as_str()),
        (StatusCode::CONFLICT, Some("Conflict"))
    );
    let (status, updated) = c
        .as_user(Method::PUT, &item, &[], Some(patched.clone()))
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");

    let table_accept = [(
        "accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )];
    let (status, table) = c.as_user(Method::GET, NS_PATH, &table_accept, None).await;
    assert_eq!(
        (status, table["kind"].as_str()),
        (StatusCode::OK, Some("Table"))
    );
    assert_eq!(table["rows"][0]["cells"][0], "f1");

    let (status, deleted) = c.as_user(Method::DELETE, &item, &[], None).await;
    assert_eq!(
        (status, deleted["status"].as_str()),
        (StatusCode::OK, Some("Success"))
    );
    let (status, missing) = c.as_user(Method::GET, &item, &[], None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        missing["message"],
        "flunders.wardle.example.com \"f1\" not found"
    );
    h.stop().await;
}

#[tokio::test]
async fn discovery_documents() {
    let h = Harness::start(vec![]).await;
    let c = h.client(Some("proxy-client"));
    let (status, apis) = c.as_user(Method::GET, "/apis", &[], None).await;
    assert_eq!(
        (status, apis["groups"][0]["name"].as_str()),
        (StatusCode::OK, Some("wardle.example.com"))
    );
    let (_, group) = c
        .as_user(Method::GET, "/apis/wardle.example.com", &[], None)
        .await;
    assert_eq!(group["preferredVersion"]["version"], "v1alpha1");
    let (_, resources) = c
        .as_user(Method::GET, "/apis/wardle.example.com/v1alpha1", &[], None)
        .await;
    assert_eq!(resources["resources"][0]["shortNames"], json!(["fl"]));
    assert_eq!(resources["resources"][0]["namespaced"], true);
    let v2 = [(
        "accept",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    )];
    let (_, agg) = c.as_user(Method::GET, "/apis", &v2, None).await;
    assert_eq!(agg["kind"], "APIGroupDiscoveryList");
    assert_eq!(agg["apiVersion"], "apidiscovery.k8s.io/v2");
    let beta = [(
        "accept",
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
    )];
    let (_, agg) = c.as_user(Method::GET, "/apis", &beta, None).await;
    assert_eq!(agg["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    assert_eq!(
        agg["items"][0]["versions"][0]["resources"][0]["resource"],
        "flunders"
    );
    h.stop().await;
}

#[tokio::test]
async fn untrusted_callers_are_unauthorized() {
    let h = Harness::start(vec!["front-proxy-client".into()]).await;
    let anonymous = h.client(None);
    let (status, body) = anonymous.as_user(Method::GET, NS_PATH, &[], None).await;
    assert_eq!(
        (status, body["kind"].as_str(), body["code"].as_u64()),
        (StatusCode::UNAUTHORIZED, Some("Status"), Some(401))
    );
    let (status, _) = anonymous.send(Method::GET, "/healthz", &[], None).await;
    assert_eq!(status, StatusCode::OK);
    // A user certificate from another CA is no front proxy: the handshake already refuses it.
    let admin = h.client(Some("admin"));
    let refused = admin.try_send(Method::GET, NS_PATH, &[], None).await;
    assert!(refused.is_err(), "{refused:?}");
    // The front proxy must name a user.
    let (status, _) = h
        .client(Some("proxy-client"))
        .send(Method::GET, NS_PATH, &[], None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    h.stop().await;
}

#[tokio::test]
async fn disallowed_proxy_name_is_unauthorized() {
    let h = Harness::start(vec!["someone-else".into()]).await;
    let (status, _) = h
        .client(Some("proxy-client"))
        .as_user(Method::GET, NS_PATH, &[], None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    h.stop().await;
}

#[tokio::test]
async fn watch_streams_events() {
    let h = Harness::start(vec![]).await;
    let c = h.client(Some("proxy-client"));
    c.as_user(Method::POST, NS_PATH, &[], Some(flunder("w1")))
        .await;
    // timeoutSeconds ends the stream so the whole body can be read.
    let path = format!("{NS_PATH}?watch=true&timeoutSeconds=1");
    let watcher = tokio::spawn(async move { c.as_user(Method::GET, &path, &[], None).await });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let c = h.client(Some("proxy-client"));
    c.as_user(Method::DELETE, &format!("{NS_PATH}/w1"), &[], None)
        .await;
    let (status, body) = watcher.await.expect("watch");
    assert_eq!(status, StatusCode::OK);
    let text = body
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| body.to_string());
    let kinds: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| e["type"].as_str().map(str::to_string))
        .collect();
    assert_eq!(kinds, ["ADDED", "DELETED"]);
    h.stop().await;
}

/// The `type` and `object.metadata.resourceVersion` of each event of a finished watch body.
fn watch_events(body: &Value) -> Vec<(String, String)> {
    let text = body
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| body.to_string());
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| {
            let rv = e["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (e["type"].as_str().unwrap_or_default().to_string(), rv)
        })
        .collect()
}

#[tokio::test]
async fn watch_bookmarks_follow_the_resource_version() {
    // The harness sends bookmarks every 200 ms.
    let h = Harness::start(vec![]).await;
    let c = h.client(Some("proxy-client"));
    c.as_user(Method::POST, NS_PATH, &[], Some(flunder("b1")))
        .await;
    let path =
        format!("{NS_PATH}?watch=1&resourceVersion=1&allowWatchBookmarks=true&timeoutSeconds=1");
    let watcher = tokio::spawn(async move { c.as_user(Method::GET, &path, &[], None).await });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let c = h.client(Some("proxy-client"));
    c.as_user(Method::POST, NS_PATH, &[], Some(flunder("b2")))
        .await;
    let (status, body) = watcher.await.expect("watch");
    assert_eq!(status, StatusCode::OK);
    let events = watch_events(&body);
    let added: Vec<&(String, String)> = events.iter().filter(|e| e.0 == "ADDED").collect();
    assert_eq!(
        added,
        [&("ADDED".to_string(), "2".to_string())],
        "{events:?}"
    );
    let bookmarks: Vec<&str> = events
        .iter()
        .filter(|e| e.0 == "BOOKMARK")
        .map(|e| e.1.as_str())
        .collect();
    assert!(bookmarks.len() >= 3, "{events:?}");
    assert_eq!(bookmarks.first(), Some(&"1"), "{events:?}");
    assert_eq!(bookmarks.last(), Some(&"2"), "{events:?}");
    // Without allowWatchBookmarks there are none.
    let c = h.client(Some("proxy-client"));
    let path = format!("{NS_PATH}?watch=true&resourceVersion=2&timeoutSeconds=1");
    let (_, quiet) = c.as_user(Method::GET, &path, &[], None).await;
    assert!(watch_events(&quiet).is_empty(), "{quiet}");
    h.stop().await;
}

#[tokio::test]
async fn openapi_v2_needs_the_front_proxy_and_carries_an_etag() {
    let h = Harness::start(vec![]).await;
    let (status, _) = h
        .client(None)
        .as_user(Method::GET, "/openapi/v2", &[], None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let c = h.client(Some("proxy-client"));
    let who = [("x-remote-user", "alice")];
    let (status, headers, v2) = c
        .exchange(Method::GET, "/openapi/v2", &who, None)
        .await
        .expect("v2");
    assert_eq!(
        (status, v2["swagger"].as_str()),
        (StatusCode::OK, Some("2.0"))
    );
    let flunder = &v2["definitions"]["com.example.wardle.v1alpha1.Flunder"];
    assert_eq!(
        flunder["x-kubernetes-group-version-kind"],
        json!([{"group": "wardle.example.com", "kind": "Flunder", "version": "v1alpha1"}])
    );
    let etag = headers
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(etag.len() == 130 && etag.starts_with('"'), "{etag}");
    let cached = [("x-remote-user", "alice"), ("if-none-match", etag.as_str())];
    let (status, _, _) = c
        .exchange(Method::GET, "/openapi/v2", &cached, None)
        .await
        .expect("v2 again");
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    h.stop().await;
}

#[tokio::test]
async fn openapi_v3_index_points_at_the_group_document() {
    let h = Harness::start(vec![]).await;
    let c = h.client(Some("proxy-client"));
    let who = [("x-remote-user", "alice")];
    let (_, _, index) = c
        .exchange(Method::GET, "/openapi/v3", &who, None)
        .await
        .expect("v3 index");
    let url = index["paths"]["apis/wardle.example.com/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let prefix = "/openapi/v3/apis/wardle.example.com/v1alpha1?hash=";
    assert!(url.starts_with(prefix), "{index}");
    let (status, headers, v3) = c
        .exchange(Method::GET, &url, &who, None)
        .await
        .expect("v3 group");
    assert_eq!(status, StatusCode::OK);
    let hash = &url[prefix.len()..];
    let etag = headers.get("etag").and_then(|v| v.to_str().ok());
    assert_eq!(etag, Some(format!("\"{hash}\"").as_str()));
    assert_eq!(v3["openapi"], "3.0.0");
    let meta = &v3["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"];
    assert!(meta["properties"]["resourceVersion"].is_object(), "{meta}");
    h.stop().await;
}

/// The `Warning` header values of an answer.
fn warnings(headers: &http::HeaderMap) -> Vec<&str> {
    headers
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect()
}

#[tokio::test]
async fn field_validation_on_create() {
    let h = Harness::start(vec![]).await;
    let c = h.client(Some("proxy-client"));
    let who = [("x-remote-user", "alice")];
    let mut obj = flunder("fv");
    obj["spec"]["foo"] = json!(1);
    let strict = format!("{NS_PATH}?fieldValidation=Strict");
    let (status, _, body) = c
        .exchange(Method::POST, &strict, &who, Some(obj.clone()))
        .await
        .expect("strict");
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let want = "strict decoding error: unknown field \"spec.foo\"";
    assert_eq!(body["message"], want);
    let item = format!("{NS_PATH}/fv");
    let (status, _) = c.as_user(Method::GET, &item, &[], None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "Strict stored the object");

    let warn = format!("{NS_PATH}?fieldValidation=Warn");
    let (status, headers, made) = c
        .exchange(Method::POST, &warn, &who, Some(obj))
        .await
        .expect("warn");
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(
        warnings(&headers),
        [r#"299 - "unknown field \"spec.foo\"""#]
    );
    assert_eq!(made["spec"], json!({"reference": "r1"}), "not dropped");
    h.stop().await;
}

#[tokio::test]
async fn field_validation_on_patch_and_update() {
    let h = Harness::start(vec![]).await;
    let c = h.client(Some("proxy-client"));
    c.as_user(Method::POST, NS_PATH, &[], Some(flunder("fv")))
        .await;
    let who = [("x-remote-user", "alice")];
    let item = format!("{NS_PATH}/fv?fieldValidation=Strict");
    let merge = [
        ("x-remote-user", "alice"),
        ("content-type", "application/merge-patch+json"),
    ];
    let patch = Some(json!({"spec": {"bar": 2}}));
    let (status, _, body) = c
        .exchange(Method::PATCH, &item, &merge, patch)
        .await
        .expect("strict patch");
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let extra = Some(json!({"metadata": {"name": "fv"}, "extra": 1}));
    let (status, _, body) = c
        .exchange(Method::PUT, &item, &who, extra.clone())
        .await
        .expect("strict put");
    let want = "strict decoding error: unknown field \"extra\"";
    assert_eq!(
        (status, body["message"].as_str()),
        (StatusCode::BAD_REQUEST, Some(want))
    );
    let ignore = format!("{NS_PATH}/fv?fieldValidation=Ignore");
    let (status, headers, updated) = c
        .exchange(Method::PUT, &ignore, &who, extra)
        .await
        .expect("ignore put");
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert!(warnings(&headers).is_empty());
    assert!(updated.get("extra").is_none(), "{updated}");
    h.stop().await;
}

#[tokio::test]
async fn exec_needs_a_flunder_and_a_websocket() {
    let h = Harness::start(vec![]).await;
    let c = h.client(Some("proxy-client"));
    let exec = |name: &str| format!("{NS_PATH}/{name}/exec?command=echo&command=hi&stdout=true");
    let (status, body) = c.as_user(Method::POST, &exec("nope"), &[], None).await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (StatusCode::NOT_FOUND, Some("NotFound"))
    );
    c.as_user(Method::POST, NS_PATH, &[], Some(flunder("ex")))
        .await;
    let (status, body) = c.as_user(Method::POST, &exec("ex"), &[], None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("WebSocket")),
        "{body}"
    );
    let (status, _) = c.as_user(Method::PUT, &exec("ex"), &[], None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    h.stop().await;
}
