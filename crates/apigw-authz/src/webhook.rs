//! The `Webhook` authorizer, as k8s.io/apiserver's webhook authorizer decides: a request's
//! identity and attributes become an `authorization.k8s.io` SubjectAccessReview; its match
//! conditions (CEL over `request`, the review's spec) decide whether the webhook is asked at
//! all; answers are cached by the review's spec (allowed and denied each with their own TTL);
//! and a webhook that cannot be asked, or a condition that fails to evaluate, gives the
//! decision of its failure policy together with the error. The review goes to a URL from a
//! kubeconfig file, or to the cluster's SubjectAccessReview API ([`AccessReview`] is how it is
//! sent).

use super::Verdict;
use apigw_core::body::BoxError;
use apigw_core::cache::{digest, TtlCache};
use apigw_core::BoxFuture;
use apigw_expr::{self as expr, Expression};
use apigw_request::Attributes;
use apigw_request::Identity;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Sends a SubjectAccessReview and returns the answer (the whole object, as JSON).
pub trait AccessReview: Send + Sync {
    fn review<'a>(&'a self, review: &'a Value) -> BoxFuture<'a, Result<Value, BoxError>>;
}

/// What a webhook answers when it cannot be asked or a match condition fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    NoOpinion,
    Deny,
}

/// The SubjectAccessReview version the webhook speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewVersion {
    V1,
    V1beta1,
}

/// Where the reviews go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connection {
    /// POSTed to the server URL of this kubeconfig file, with its credentials.
    KubeConfigFile(PathBuf),
    /// The cluster's SubjectAccessReview API, with the in-cluster service account.
    InCluster,
    /// The cluster's SubjectAccessReview API, with the cluster mode's client
    /// (`--authorization-mode=Webhook`).
    ClusterMode,
}

/// One webhook of the chain, as configured.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    pub name: String,
    pub timeout: Duration,
    pub version: ReviewVersion,
    pub failure_policy: FailurePolicy,
    pub authorized_ttl: Duration,
    pub unauthorized_ttl: Duration,
    pub cache_authorized: bool,
    pub cache_unauthorized: bool,
    pub connection: Connection,
    /// Compiled `matchConditions`: all must be true for the webhook to be asked.
    pub match_conditions: Vec<Expression>,
}

impl WebhookSettings {
    /// `--authorization-mode=Webhook` in cluster mode: kube-apiserver's flag defaults (allowed
    /// answers cached 5 minutes, denied 30 seconds, 30 s to answer, no opinion on failure).
    pub fn cluster_mode() -> Self {
        Self {
            name: "webhook".into(),
            timeout: Duration::from_secs(30),
            version: ReviewVersion::V1,
            failure_policy: FailurePolicy::NoOpinion,
            authorized_ttl: Duration::from_secs(300),
            unauthorized_ttl: Duration::from_secs(30),
            cache_authorized: true,
            cache_unauthorized: true,
            connection: Connection::ClusterMode,
            match_conditions: Vec::new(),
        }
    }
}

/// A webhook's decision on one request; `error` when it could not decide (the verdict is then
/// its failure policy's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub verdict: Verdict,
    pub reason: String,
    pub error: Option<String>,
}

impl Answer {
    fn failed(policy: FailurePolicy, error: String) -> Self {
        let verdict = match policy {
            FailurePolicy::NoOpinion => Verdict::NoOpinion,
            FailurePolicy::Deny => Verdict::Deny,
        };
        Self {
            verdict,
            reason: String::new(),
            error: Some(error),
        }
    }
}

/// True unless the request's attributes are too large to keep as a key.
fn cacheable(a: &Attributes) -> bool {
    let size = a.namespace.len()
        + a.verb.len()
        + a.group.len()
        + a.version.len()
        + a.resource.len()
        + a.subresource.len()
        + a.name.len()
        + a.path.len();
    size < MAX_CACHED_ATTRIBUTES
}

/// True for failures upstream's webhook client retries: a connection reset or refused, or a
/// 429, 500 or 504 answer.
fn worth_retrying(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(kube::Error::Api(status)) = err.downcast_ref::<kube::Error>() {
            return matches!(status.code, 429 | 500 | 504);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionRefused
            );
        }
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_closed() {
                return true;
            }
        }
        next = err.source();
    }
    false
}

/// The status fields of an answer, cached.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Status {
    allowed: bool,
    denied: bool,
    reason: String,
    evaluation_error: String,
}

/// A webhook authorizer: its settings, its cache and how it is reached.
pub struct Webhook {
    pub settings: WebhookSettings,
    cache: TtlCache<Status>,
    sender: Arc<dyn AccessReview>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Cached answers per webhook, as upstream bounds its LRU.
const CACHE_CAPACITY: usize = 8192;
/// Requests whose attributes add up to this many bytes are never cached (upstream's guard
/// against filling the cache with huge keys).
const MAX_CACHED_ATTRIBUTES: usize = 10_000;
/// Attempts at a review that failed in a way worth retrying, and the first pause between
/// them (growing 1.5 times each time), as upstream's `DefaultRetryBackoff`.
const ATTEMPTS: u32 = 5;
const FIRST_PAUSE: Duration = Duration::from_millis(500);

impl Webhook {
    pub fn new(settings: WebhookSettings, sender: Arc<dyn AccessReview>) -> Self {
        Self {
            settings,
            cache: TtlCache::new(CACHE_CAPACITY),
            sender,
        }
    }

    /// The webhook's decision on `a` for `id`.
    pub async fn decide(&self, id: &Identity, a: &Attributes) -> Answer {
        let s = &self.settings;
        let spec = spec(id, a);
        if !s.match_conditions.is_empty() {
            match self.matches(&spec) {
                Ok(true) => {}
                Ok(false) => {
                    return Answer {
                        verdict: Verdict::NoOpinion,
                        reason: String::new(),
                        error: None,
                    }
                }
                Err(e) => return Answer::failed(s.failure_policy, e),
            }
        }
        // As Go encodes it: empty strings, lists and maps left out (`omitempty`).
        let spec = omit_empty(spec);
        let spec_text = Value::Object(spec.clone()).to_string();
        let key = digest(&["subjectaccessreview", &spec_text]);
        let status = match self.cache.get(&key) {
            Some(status) => status,
            None => {
                let answer = match self.ask(&review(s.version, spec)).await {
                    Ok(answer) => answer,
                    Err(error) => {
                        tracing::warn!(webhook = %s.name, %error, "Failed to make webhook authorizer request");
                        return Answer::failed(s.failure_policy, error);
                    }
                };
                let status = status_of(&answer);
                if cacheable(a) {
                    let ttl = match status.allowed {
                        true if s.cache_authorized => Some(s.authorized_ttl),
                        false if s.cache_unauthorized => Some(s.unauthorized_ttl),
                        _ => None,
                    };
                    if let Some(ttl) = ttl {
                        self.cache.insert(key, status.clone(), ttl);
                    }
                }
                status
            }
        };
        let (verdict, error) = match (status.allowed, status.denied) {
            (true, true) => (
                Verdict::Deny,
                Some("webhook subject access review returned both allow and deny response".into()),
            ),
            (_, true) => (Verdict::Deny, None),
            (true, _) => (Verdict::Allow, None),
            _ => (Verdict::NoOpinion, None),
        };
        if !status.evaluation_error.is_empty() {
            tracing::debug!(webhook = %s.name, error = %status.evaluation_error, "webhook evaluation error");
        }
        Answer {
            verdict,
            reason: status.reason,
            error,
        }
    }

    /// Sends `review`, each attempt within the timeout, trying again (up to [`ATTEMPTS`]
    /// times, pausing longer each time) after an error worth retrying: the connection reset
    /// or refused, no answer in time, or a 429, 500 or 504.
    async fn ask(&self, review: &Value) -> Result<Value, String> {
        let s = &self.settings;
        let mut pause = FIRST_PAUSE;
        let mut attempt = 1;
        loop {
            let error = match tokio::time::timeout(s.timeout, self.sender.review(review)).await {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(e)) => {
                    let retry = worth_retrying(&*e);
                    (apigw_core::errors::chain(&*e), retry)
                }
                Err(_) => (format!("no answer within {:?}", s.timeout), true),
            };
            if !error.1 || attempt >= ATTEMPTS {
                return Err(format!("webhook {:?}: {}", s.name, error.0));
            }
            tokio::time::sleep(pause).await;
            pause = pause.mul_f64(1.5);
            attempt += 1;
        }
    }

    /// True when every match condition is true of `spec` (as the `request` variable); false
    /// as soon as one is false, even when others failed; else the failures.
    fn matches(&self, spec: &Map<String, Value>) -> Result<bool, String> {
        let request = expr::object(spec);
        let mut errors = Vec::new();
        for condition in &self.settings.match_conditions {
            match condition.eval_bool(&[("request", request.clone())]) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => errors.push(format!(
                    "cel evaluation error: expression '{}' resulted in error: {}",
                    condition.source,
                    apigw_core::errors::chain(&e)
                )),
            }
        }
        if errors.is_empty() {
            Ok(true)
        } else {
            Err(errors.join(", "))
        }
    }
}

/// The status of an answer; anything missing is false or empty.
fn status_of(answer: &Value) -> Status {
    let status = &answer["status"];
    let text = |k: &str| status[k].as_str().unwrap_or_default().to_string();
    Status {
        allowed: status["allowed"].as_bool().unwrap_or(false),
        denied: status["denied"].as_bool().unwrap_or(false),
        reason: text("reason"),
        evaluation_error: text("evaluationError"),
    }
}

/// The `authorization.k8s.io/v1` SubjectAccessReview spec of `a` for `id`: resource
/// attributes (with the request's label and field selectors, as `AuthorizeWithSelectors`
/// sends them) for a resource request, non-resource attributes otherwise. Also what match
/// conditions see as `request`.
pub fn spec(id: &Identity, a: &Attributes) -> Map<String, Value> {
    let mut spec = Map::new();
    if a.resource_request {
        let mut ra = json!({
            "namespace": a.namespace, "verb": a.verb, "group": a.group, "version": a.version,
            "resource": a.resource, "subresource": a.subresource, "name": a.name,
        });
        // Requirements only, never the raw selector, as upstream sends them.
        let label = a.label_selector.as_deref().map(super::selector::label);
        if let Some(requirements) = label.filter(|r| !r.is_empty()) {
            ra["labelSelector"] = json!({ "requirements": requirements });
        }
        let field = a.field_selector.as_deref().map(super::selector::field);
        if let Some(requirements) = field.filter(|r| !r.is_empty()) {
            ra["fieldSelector"] = json!({ "requirements": requirements });
        }
        spec.insert("resourceAttributes".into(), ra);
    } else {
        spec.insert(
            "nonResourceAttributes".into(),
            json!({ "path": a.path, "verb": a.verb }),
        );
    }
    spec.insert("user".into(), json!(id.user));
    spec.insert("groups".into(), json!(id.groups));
    if !id.extra.is_empty() {
        spec.insert("extra".into(), json!(id.extra));
    }
    if let Some(uid) = &id.uid {
        spec.insert("uid".into(), json!(uid));
    }
    spec
}

/// `spec` without its empty strings, lists and maps, as Go's `omitempty` writes a
/// SubjectAccessReviewSpec (match conditions see the full spec, whose empty fields read as
/// `""`, as upstream's typed CEL object does).
fn omit_empty(spec: Map<String, Value>) -> Map<String, Value> {
    spec.into_iter()
        .filter_map(|(k, v)| {
            let v = match v {
                Value::Object(m) => Value::Object(omit_empty(m)),
                other => other,
            };
            let empty = match &v {
                Value::String(s) => s.is_empty(),
                Value::Array(a) => a.is_empty(),
                Value::Object(m) => {
                    m.is_empty() && k != "resourceAttributes" && k != "nonResourceAttributes"
                }
                Value::Null => true,
                _ => false,
            };
            (!empty).then_some((k, v))
        })
        .collect()
}

/// The review sent: `spec` in the version the webhook speaks (v1beta1 names the groups
/// `group`).
fn review(version: ReviewVersion, mut spec: Map<String, Value>) -> Value {
    let api_version = match version {
        ReviewVersion::V1 => "authorization.k8s.io/v1",
        ReviewVersion::V1beta1 => {
            if let Some(groups) = spec.remove("groups") {
                spec.insert("group".into(), groups);
            }
            "authorization.k8s.io/v1beta1"
        }
    };
    json!({ "apiVersion": api_version, "kind": "SubjectAccessReview", "spec": spec })
}

/// Reviews POSTed with a kube client: to the server URL of a kubeconfig file (the webhook's
/// own path kept, as client-go's REST client posts it), or to the cluster's
/// `subjectaccessreviews`. The client is made on first use.
pub struct KubeSender {
    /// The client, and the path of the webhook's URL (None: the cluster's API).
    client: tokio::sync::OnceCell<(kube::Client, Option<String>)>,
    source: Source,
}

enum Source {
    File(PathBuf),
    InCluster,
    Client(kube::Client),
}

impl KubeSender {
    /// Sends to what `connection` names.
    pub fn new(connection: &Connection) -> Self {
        let source = match connection {
            Connection::KubeConfigFile(path) => Source::File(path.clone()),
            Connection::InCluster | Connection::ClusterMode => Source::InCluster,
        };
        Self {
            client: tokio::sync::OnceCell::new(),
            source,
        }
    }

    /// Sends to the cluster's SubjectAccessReview API with `client` (cluster mode).
    pub fn with_client(client: kube::Client) -> Self {
        Self {
            client: tokio::sync::OnceCell::new(),
            source: Source::Client(client),
        }
    }

    async fn client(&self) -> Result<&(kube::Client, Option<String>), BoxError> {
        self.client
            .get_or_try_init(|| async {
                match &self.source {
                    Source::Client(client) => Ok((client.clone(), None)),
                    Source::InCluster => {
                        let config = kube::Config::incluster()?;
                        Ok((kube::Client::try_from(config)?, None))
                    }
                    Source::File(path) => {
                        let (client, path) = webhook_client(path).await?;
                        Ok((client, Some(path)))
                    }
                }
            })
            .await
    }
}

/// A client for the webhook a kubeconfig file names, and the path of its server URL (the
/// client's base keeps only the scheme and authority, so that the path is posted as it is).
async fn webhook_client(path: &PathBuf) -> Result<(kube::Client, String), BoxError> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
    let url = config.cluster_url.clone();
    let webhook_path = url
        .path_and_query()
        .map_or_else(|| "/".to_string(), |pq| pq.as_str().to_string());
    let mut base = http::uri::Parts::default();
    base.scheme = url.scheme().cloned();
    base.authority = url.authority().cloned();
    base.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    config.cluster_url = http::Uri::from_parts(base)?;
    Ok((kube::Client::try_from(config)?, webhook_path))
}

impl AccessReview for KubeSender {
    fn review<'a>(&'a self, review: &'a Value) -> BoxFuture<'a, Result<Value, BoxError>> {
        Box::pin(async move {
            let version = review["apiVersion"]
                .as_str()
                .and_then(|v| v.rsplit('/').next())
                .unwrap_or("v1");
            let (client, webhook_path) = self.client().await?;
            let path = webhook_path.clone().unwrap_or_else(|| {
                format!("/apis/authorization.k8s.io/{version}/subjectaccessreviews")
            });
            let request = http::Request::post(path)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(review)?)?;
            let answer: Value = client.request(request).await?;
            Ok(answer)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Authorizer, LinkSettings};
    use http::{HeaderMap, Method, StatusCode};
    use std::sync::Mutex;

    /// How a fake webhook answers a review.
    type Answerer = Box<dyn Fn(&Value) -> Result<Value, String> + Send + Sync>;

    /// A webhook server in-process: answers each review with `answer(review)`, and keeps them.
    struct Fake {
        seen: Mutex<Vec<Value>>,
        answer: Answerer,
    }

    impl AccessReview for Fake {
        fn review<'a>(&'a self, review: &'a Value) -> BoxFuture<'a, Result<Value, BoxError>> {
            self.seen.lock().unwrap().push(review.clone());
            let answer = (self.answer)(review).map_err(BoxError::from);
            Box::pin(async move { answer })
        }
    }

    fn fake(answer: impl Fn(&Value) -> Result<Value, String> + Send + Sync + 'static) -> Arc<Fake> {
        Arc::new(Fake {
            seen: Mutex::default(),
            answer: Box::new(answer),
        })
    }

    fn settings(conditions: &[&str], failure_policy: FailurePolicy) -> WebhookSettings {
        WebhookSettings {
            name: "gatekeeper".into(),
            timeout: Duration::from_secs(1),
            failure_policy,
            match_conditions: conditions
                .iter()
                .map(|c| Expression::compile(c, &["request"]).unwrap())
                .collect(),
            ..WebhookSettings::cluster_mode()
        }
    }

    fn status(allowed: bool, denied: bool, reason: &str) -> Value {
        json!({"status": {"allowed": allowed, "denied": denied, "reason": reason}})
    }

    fn attrs(method: Method, path: &str, query: Option<&str>) -> Attributes {
        Attributes::from_request(&method, path, query)
    }

    const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/y/flunders";

    #[tokio::test]
    async fn the_review_carries_the_identity_attributes_and_selectors() {
        let server = fake(|_| Ok(status(true, false, "")));
        let hook = Webhook::new(settings(&[], FailurePolicy::NoOpinion), server.clone());
        let mut bob = Identity::new("bob", vec!["devs".into()]);
        bob.uid = Some("u1".into());
        bob.extra.insert("scopes".into(), vec!["x".into()]);
        let list = attrs(
            Method::GET,
            FLUNDERS,
            Some("labelSelector=app%3Dweb%2Ctier+in+(a%2Cb)&fieldSelector=metadata.name%3Df1"),
        );
        assert_eq!(hook.decide(&bob, &list).await.verdict, Verdict::Allow);
        let sent = server.seen.lock().unwrap()[0].clone();
        assert_eq!(sent["apiVersion"], "authorization.k8s.io/v1");
        assert_eq!(sent["kind"], "SubjectAccessReview");
        let spec = &sent["spec"];
        assert_eq!(
            (&spec["user"], &spec["uid"], &spec["groups"], &spec["extra"]),
            (
                &json!("bob"),
                &json!("u1"),
                &json!(["devs"]),
                &json!({"scopes": ["x"]})
            )
        );
        let ra = &spec["resourceAttributes"];
        assert_eq!(
            (&ra["verb"], &ra["group"], &ra["resource"], &ra["namespace"]),
            (
                &json!("list"),
                &json!("wardle.example.com"),
                &json!("flunders"),
                &json!("y")
            )
        );
        assert_eq!(
            ra["labelSelector"],
            json!({"requirements": [
                {"key": "app", "operator": "In", "values": ["web"]},
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
            ]})
        );
        assert_eq!(
            ra["fieldSelector"],
            json!({"requirements": [{"key": "metadata.name", "operator": "In", "values": ["f1"]}]})
        );
        // A get carries no selectors; a non-resource request its path.
        let health = attrs(Method::GET, "/healthz", None);
        hook.decide(&bob, &health).await;
        let sent = server.seen.lock().unwrap()[1].clone();
        assert_eq!(
            sent["spec"]["nonResourceAttributes"],
            json!({"path": "/healthz", "verb": "get"})
        );
        // v1beta1 names the groups `group`.
        let v1beta1 = Webhook::new(
            WebhookSettings {
                version: ReviewVersion::V1beta1,
                ..settings(&[], FailurePolicy::NoOpinion)
            },
            server.clone(),
        );
        v1beta1.decide(&bob, &health).await;
        let sent = server.seen.lock().unwrap()[2].clone();
        assert_eq!(sent["apiVersion"], "authorization.k8s.io/v1beta1");
        assert_eq!(sent["spec"]["group"], json!(["devs"]));
        assert!(sent["spec"].get("groups").is_none());
    }

    #[tokio::test]
    async fn answers_map_to_decisions_and_are_cached() {
        let server = fake(|review| {
            let user = review["spec"]["user"].as_str().unwrap_or_default();
            Ok(match user {
                "ann" => status(true, false, "ann may"),
                "dan" => status(false, true, "dan may not"),
                "both" => status(true, true, ""),
                _ => status(false, false, "no rule"),
            })
        });
        let hook = Webhook::new(settings(&[], FailurePolicy::NoOpinion), server.clone());
        let a = attrs(Method::GET, FLUNDERS, None);
        let decide = |user: &str| {
            let id = Identity::new(user, vec![]);
            let hook = &hook;
            let a = &a;
            async move { hook.decide(&id, a).await }
        };
        let ann = decide("ann").await;
        assert_eq!(
            (ann.verdict, ann.reason.as_str()),
            (Verdict::Allow, "ann may")
        );
        let dan = decide("dan").await;
        assert_eq!(
            (dan.verdict, dan.reason.as_str()),
            (Verdict::Deny, "dan may not")
        );
        let other = decide("eve").await;
        assert_eq!((other.verdict, other.error), (Verdict::NoOpinion, None));
        let both = decide("both").await;
        assert_eq!(both.verdict, Verdict::Deny);
        assert!(both.error.is_some());
        // Asked again: each from the cache.
        for user in ["ann", "dan", "eve"] {
            decide(user).await;
        }
        assert_eq!(server.seen.lock().unwrap().len(), 4);
    }

    #[tokio::test]
    async fn match_conditions_decide_whether_the_webhook_is_asked() {
        let server = fake(|_| Ok(status(true, false, "")));
        let hook = Webhook::new(
            settings(
                &[
                    "has(request.resourceAttributes)",
                    "request.resourceAttributes.group == 'wardle.example.com'",
                ],
                FailurePolicy::Deny,
            ),
            server.clone(),
        );
        let bob = Identity::new("bob", vec![]);
        let wardle = hook.decide(&bob, &attrs(Method::GET, FLUNDERS, None)).await;
        assert_eq!(wardle.verdict, Verdict::Allow);
        let other = hook
            .decide(&bob, &attrs(Method::GET, "/apis/apps/v1/deployments", None))
            .await;
        assert_eq!((other.verdict, other.error), (Verdict::NoOpinion, None));
        // A non-resource request: the first is false, so the second's error does not count.
        let health = hook
            .decide(&bob, &attrs(Method::GET, "/healthz", None))
            .await;
        assert_eq!((health.verdict, health.error), (Verdict::NoOpinion, None));
        assert_eq!(server.seen.lock().unwrap().len(), 1);

        // A condition that fails to evaluate: the failure policy's decision, with the error.
        let failing = Webhook::new(
            settings(
                &["request.resourceAttributes.namespace == 'y'"],
                FailurePolicy::Deny,
            ),
            server.clone(),
        );
        let answer = failing
            .decide(&bob, &attrs(Method::GET, "/healthz", None))
            .await;
        assert_eq!(answer.verdict, Verdict::Deny);
        let error = answer.error.unwrap_or_default();
        assert!(
            error.starts_with("cel evaluation error: expression 'request.resourceAttributes.namespace == 'y'' resulted in error"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_failing_webhook_follows_its_policy_and_retries_what_upstream_retries() {
        let server = fake(|_| Err("connection refused by the test".into()));
        let bob = Identity::new("bob", vec![]);
        let a = attrs(Method::GET, FLUNDERS, None);
        let deny = Webhook::new(settings(&[], FailurePolicy::Deny), server.clone());
        let answer = deny.decide(&bob, &a).await;
        assert_eq!(answer.verdict, Verdict::Deny);
        assert_eq!(
            answer.error.as_deref(),
            Some("webhook \"gatekeeper\": connection refused by the test")
        );
        // Not a failure worth retrying: asked once.
        assert_eq!(server.seen.lock().unwrap().len(), 1);
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(worth_retrying(&io));
        let api = kube::Error::Api(Box::new(
            kube::core::Status::failure("x", "InternalError").with_code(500),
        ));
        assert!(worth_retrying(&api));
        let forbidden = kube::Error::Api(Box::new(
            kube::core::Status::failure("x", "Forbidden").with_code(403),
        ));
        assert!(!worth_retrying(&forbidden));
    }

    /// The chain from a file, in order: a webhook's denial stops RBAC from allowing; its
    /// failure with nothing else allowing is a 500; its no opinion leaves it to RBAC.
    #[tokio::test]
    async fn the_chain_decides_in_order_as_upstreams_union() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("rbac.yaml");
        std::fs::write(
            &policy,
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: read}\n\
             rules: [{apiGroups: ['*'], resources: ['*'], verbs: [get, list]}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: read}\n\
             roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: read}\n\
             subjects: [{kind: Group, name: readers, apiGroup: rbac.authorization.k8s.io}]\n",
        )
        .unwrap();
        let hook = settings(
            &["has(request.resourceAttributes)"],
            FailurePolicy::NoOpinion,
        );
        let authz = Authorizer::with_links(
            vec![LinkSettings::Webhook(hook), LinkSettings::Rbac],
            Some(policy),
            None,
        )
        .unwrap();
        // Replace the chain's webhook sender by the fake: the chain's webhook sends with the
        // cluster sender it was given.
        authz.set_access_review(Box::new(FakeBox(fake(|review| {
            Ok(match review["spec"]["user"].as_str() {
                Some("dan") => status(false, true, "dan is suspended"),
                Some("broken") => return Err("no route".into()),
                _ => status(false, false, ""),
            })
        }))));
        let list = attrs(Method::GET, FLUNDERS, None);
        let reader = |user: &str| Identity::new(user, vec!["readers".into()]);
        let admit = |user: &str, a: &Attributes| {
            let id = reader(user);
            let a = a.clone();
            let authz = &authz;
            async move { authz.admit(id.into(), &HeaderMap::new(), &a).await }
        };
        assert!(admit("ann", &list).await.is_ok(), "RBAC allows ann");
        let dan = admit("dan", &list).await.unwrap_err();
        assert_eq!(dan.status.code(), StatusCode::FORBIDDEN);
        assert!(
            dan.status.message().ends_with(": dan is suspended"),
            "{}",
            dan.status.message()
        );
        // The webhook failed, then RBAC allowed: allowed.
        assert!(admit("broken", &list).await.is_ok());
        // The webhook failed and RBAC has no opinion: 500.
        let create = attrs(Method::POST, FLUNDERS, None);
        let broken = admit("broken", &create).await.unwrap_err();
        assert_eq!(broken.status.code(), StatusCode::INTERNAL_SERVER_ERROR);
        // No opinion from anyone: 403 with the plain message.
        let eve = admit("eve", &create).await.unwrap_err();
        assert_eq!(eve.status.code(), StatusCode::FORBIDDEN);
        assert_eq!(
            eve.status.message(),
            crate::forbidden_message(&reader("eve"), &create)
        );
    }

    /// An `Arc`'d fake as the box `set_access_review` takes.
    struct FakeBox(Arc<Fake>);

    impl AccessReview for FakeBox {
        fn review<'a>(&'a self, review: &'a Value) -> BoxFuture<'a, Result<Value, BoxError>> {
            self.0.review(review)
        }
    }
}
