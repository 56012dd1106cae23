//! The read-only `apiregistration.k8s.io/v1` API over the gateway's registry: `apiservices`
//! list, get and watch (with resourceVersion), the Table form kubectl prints (NAME, SERVICE,
//! AVAILABLE, AGE), and the group's discovery documents. Objects carry the availability
//! controller's `Available` condition. A task turns registry and availability changes into
//! watch events with increasing resourceVersions.

use apigw_availability::{Availability, State};
use apigw_core::body::{Body, BoxError};
use apigw_core::errors::{json_response, Status};
use apigw_core::meta;
use apigw_registry::{ApiService, Registry};
use bytes::Bytes;
use http::{Method, Request, Response};
use http_body::Frame;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::broadcast;

pub const GROUP: &str = "apiregistration.k8s.io";
const HISTORY: usize = 1000;

/// One change, as a watch reports it.
#[derive(Debug, Clone)]
struct Event {
    rv: u64,
    kind: &'static str,
    object: Arc<Value>,
}

#[derive(Debug, Default)]
struct View {
    rv: u64,
    /// name -> (resourceVersion of its last change, object without resourceVersion)
    objects: BTreeMap<String, (u64, Arc<Value>)>,
    created: HashMap<String, SystemTime>,
    history: VecDeque<Event>,
}

/// The served API's state.
pub struct ApiServices {
    view: Mutex<View>,
    events: broadcast::Sender<Event>,
}

impl Default for ApiServices {
    fn default() -> Self {
        Self {
            view: Mutex::default(),
            events: broadcast::channel(1024).0,
        }
    }
}

fn with_rv(object: &Value, rv: u64) -> Value {
    let mut o = object.clone();
    o["metadata"]["resourceVersion"] = json!(rv.to_string());
    o
}

/// A stable UID for a name (manifests have none).
fn uid(name: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    let h: String = d.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn object(svc: &ApiService, state: Option<&State>, created: SystemTime) -> Value {
    let mut o = svc.object.clone();
    o["metadata"]["uid"] = json!(uid(&svc.name));
    o["metadata"]["creationTimestamp"] = json!(meta::timestamp(created));
    if let Some(map) = o["metadata"].as_object_mut() {
        map.remove("resourceVersion");
    }
    let conditions = match state {
        Some(s) => json!([{
            "type": "Available",
            "status": if s.condition.available { "True" } else { "False" },
            "lastTransitionTime": meta::timestamp(s.condition.last_transition),
            "reason": s.condition.reason,
            "message": s.condition.message,
        }]),
        None => json!([]),
    };
    o["status"] = json!({"conditions": conditions});
    o
}

impl ApiServices {
    /// Keeps the view in step with the registry and availability until both are dropped.
    pub fn spawn(self: &Arc<Self>, registry: Arc<Registry>, availability: Arc<Availability>) {
        let this = self.clone();
        let (mut reg, mut avail) = (registry.subscribe(), availability.subscribe());
        this.refresh(&registry, &availability);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = reg.changed() => if r.is_err() { return },
                    a = avail.changed() => if a.is_err() { return },
                }
                this.refresh(&registry, &availability);
            }
        });
    }

    /// Recomputes every object and records what changed as events.
    pub fn refresh(&self, registry: &Registry, availability: &Availability) {
        let snapshot = registry.snapshot();
        let states = availability.all();
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        let now = SystemTime::now();
        let mut next = BTreeMap::new();
        let mut events = Vec::new();
        for svc in snapshot.iter() {
            let created = *view.created.entry(svc.name.clone()).or_insert(now);
            let obj = object(svc, states.get(&svc.name).map(Arc::as_ref), created);
            let previous = view.objects.get(&svc.name).cloned();
            match previous {
                Some((rv, old)) if *old == obj => {
                    next.insert(svc.name.clone(), (rv, old));
                }
                previous => {
                    view.rv += 1;
                    let kind = if previous.is_some() {
                        "MODIFIED"
                    } else {
                        "ADDED"
                    };
                    let obj = Arc::new(obj);
                    events.push(Event {
                        rv: view.rv,
                        kind,
                        object: obj.clone(),
                    });
                    next.insert(svc.name.clone(), (view.rv, obj));
                }
            }
        }
        let gone: Vec<String> = view
            .objects
            .keys()
            .filter(|n| !next.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            if let Some((_, obj)) = view.objects.get(&name) {
                let obj = obj.clone();
                view.rv += 1;
                events.push(Event {
                    rv: view.rv,
                    kind: "DELETED",
                    object: obj,
                });
            }
            view.created.remove(&name);
        }
        view.objects = next;
        for e in events {
            if view.history.len() == HISTORY {
                view.history.pop_front();
            }
            view.history.push_back(e.clone());
            let _ = self.events.send(e);
        }
    }

    /// Serves `/apis/apiregistration.k8s.io/v1/apiservices[/NAME]`; `rest` is what follows `v1/`.
    pub fn handle<B>(&self, req: &Request<B>, rest: &[&str]) -> Result<Response<Body>, Status> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return Err(Status::method_not_allowed(format!(
                "{} is not supported: apigw serves apiservices read-only; change the manifests instead",
                req.method()
            )));
        }
        let q = Query::parse(req.uri().query());
        let table = meta::wants_table(req.headers());
        match rest {
            ["apiservices"] | ["apiservices", ""] if q.watch => Ok(self.watch(&q, None, table)),
            ["apiservices"] | ["apiservices", ""] => Ok(self.list(&q, table)),
            ["apiservices", name] if q.watch => Ok(self.watch(&q, Some(name), table)),
            ["apiservices", name] => self.get(name, table),
            _ => Err(Status::not_found(
                "the server could not find the requested resource",
            )),
        }
    }

    fn get(&self, name: &str, table: bool) -> Result<Response<Body>, Status> {
        let view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        match view.objects.get(name) {
            Some((rv, obj)) if table => Ok(json_response(&to_table(&[with_rv(obj, *rv)], None))),
            Some((rv, obj)) => Ok(json_response(&with_rv(obj, *rv))),
            None => Err(Status::not_found(format!(
                "apiservices.{GROUP} \"{name}\" not found"
            ))),
        }
    }

    fn list(&self, q: &Query, table: bool) -> Response<Body> {
        let view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        let items: Vec<Value> = view
            .objects
            .iter()
            .filter(|(name, _)| q.name.as_deref().is_none_or(|n| n == name.as_str()))
            .map(|(_, (rv, obj))| with_rv(obj, *rv))
            .collect();
        let rv = view.rv.to_string();
        if table {
            return json_response(&to_table(&items, Some(&rv)));
        }
        json_response(&json!({
            "kind": "APIServiceList",
            "apiVersion": format!("{GROUP}/v1"),
            "metadata": {"resourceVersion": rv},
            "items": items,
        }))
    }

    fn watch(&self, q: &Query, name: Option<&str>, table: bool) -> Response<Body> {
        let name = name.map(str::to_string).or_else(|| q.name.clone());
        let wanted =
            move |obj: &Value| name.as_deref().is_none_or(|n| obj["metadata"]["name"] == n);
        let encode = move |kind: &str, obj: &Value, rv: u64| {
            let obj = with_rv(obj, rv);
            if table {
                meta::watch_event(kind, &to_table(std::slice::from_ref(&obj), None))
            } else {
                meta::watch_event(kind, &obj)
            }
        };
        let view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        let rx = self.events.subscribe();
        let mut first: VecDeque<Bytes> = VecDeque::new();
        match q.resource_version {
            None | Some(0) => {
                for (rv, obj) in view.objects.values().filter(|(_, o)| wanted(o)) {
                    first.push_back(encode("ADDED", obj, *rv));
                }
            }
            Some(since) => {
                let oldest = view.history.front().map_or(view.rv + 1, |e| e.rv);
                if since > view.rv {
                    first.push_back(expired(format!(
                        "too large resource version: {since}, current: {}",
                        view.rv
                    )));
                } else if since + 1 < oldest {
                    first.push_back(expired(format!(
                        "too old resource version: {since} ({})",
                        oldest - 1
                    )));
                } else {
                    for e in view
                        .history
                        .iter()
                        .filter(|e| e.rv > since && wanted(&e.object))
                    {
                        first.push_back(encode(e.kind, &e.object, e.rv));
                    }
                }
            }
        }
        drop(view);
        let deadline = tokio::time::Instant::now() + q.timeout;
        let state = (first, rx);
        let stream = futures_util::stream::unfold(state, move |(mut first, mut rx)| {
            let wanted = wanted.clone();
            async move {
                if let Some(frame) = first.pop_front() {
                    return Some((Ok::<_, BoxError>(Frame::data(frame)), (first, rx)));
                }
                loop {
                    let event = tokio::select! {
                        e = rx.recv() => e,
                        () = tokio::time::sleep_until(deadline) => return None,
                    };
                    match event {
                        Ok(e) if wanted(&e.object) => {
                            let frame = encode(e.kind, &e.object, e.rv);
                            return Some((Ok(Frame::data(frame)), (first, rx)));
                        }
                        Ok(_) => continue,
                        // Fell too far behind: end the watch, the client relists.
                        Err(_) => return None,
                    }
                }
            }
        });
        let mut res = Response::new(http_body_util::BodyExt::boxed(
            http_body_util::StreamBody::new(stream),
        ));
        res.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        res
    }
}

fn expired(message: String) -> Bytes {
    meta::watch_event(
        "ERROR",
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": "Expired", "code": 410}),
    )
}

const COLUMNS: [meta::Column; 4] = [
    (
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace.",
    ),
    (
        "Service",
        "string",
        "",
        "The reference to the service that hosts this API endpoint.",
    ),
    (
        "Available",
        "string",
        "",
        "Whether this service is available.",
    ),
    (
        "Age",
        "date",
        "",
        "CreationTimestamp is the time the object was created.",
    ),
];

fn to_table(objects: &[Value], rv: Option<&str>) -> Value {
    let rows = objects
        .iter()
        .map(|o| {
            let service = match o["spec"]["service"].as_object() {
                Some(s) => format!(
                    "{}/{}",
                    s.get("namespace").and_then(Value::as_str).unwrap_or_default(),
                    s.get("name").and_then(Value::as_str).unwrap_or_default()
                ),
                None => "Local".to_string(),
            };
            let cond = &o["status"]["conditions"][0];
            let available = match (cond["status"].as_str(), cond["reason"].as_str()) {
                (Some("True"), _) => "True".to_string(),
                (Some(status), Some(reason)) => format!("{status} ({reason})"),
                _ => "Unknown".to_string(),
            };
            let age = meta::age_of(o["metadata"]["creationTimestamp"].as_str());
            let partial = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]});
            (vec![o["metadata"]["name"].clone(), json!(service), json!(available), json!(age)], partial)
        })
        .collect();
    meta::table(&COLUMNS, rows, rv)
}

/// The query parameters a list or watch understands.
struct Query {
    watch: bool,
    resource_version: Option<u64>,
    timeout: Duration,
    /// From `fieldSelector=metadata.name=NAME`.
    name: Option<String>,
}

impl Query {
    fn parse(query: Option<&str>) -> Self {
        let mut q = Self {
            watch: false,
            resource_version: None,
            timeout: Duration::from_secs(1800),
            name: None,
        };
        for (k, v) in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
        {
            let v = percent_encoding::percent_decode_str(v).decode_utf8_lossy();
            match k {
                "watch" => q.watch = matches!(&*v, "1" | "true" | "True" | ""),
                "resourceVersion" => q.resource_version = v.parse().ok(),
                // Clamped, so the watch's deadline (now + timeout) cannot overflow.
                "timeoutSeconds" => {
                    q.timeout = v
                        .parse()
                        .map(|s| Duration::from_secs(s).min(apigw_core::duration::MAX_DURATION))
                        .unwrap_or(q.timeout)
                }
                "fieldSelector" => q.name = v.strip_prefix("metadata.name=").map(str::to_string),
                _ => {}
            }
        }
        q
    }
}

/// `/apis/apiregistration.k8s.io` (APIGroup) as the gateway serves it.
pub fn group_document() -> Value {
    let gv = json!({"groupVersion": format!("{GROUP}/v1"), "version": "v1"});
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [gv], "preferredVersion": gv})
}

/// `/apis/apiregistration.k8s.io/v1` (APIResourceList).
pub fn resource_list() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{GROUP}/v1"),
        "resources": [
            {"name": "apiservices", "singularName": "apiservice", "namespaced": false, "kind": "APIService",
             "verbs": ["get", "list", "watch"], "categories": ["api-extensions"]},
            {"name": "apiservices/status", "singularName": "", "namespaced": false, "kind": "APIService",
             "verbs": ["get"]}
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn any_timeout_seconds_starts_a_watch() {
        let api = ApiServices::default();
        for t in [
            "18446744073709551615",
            "9223372036854775807",
            "99999999999999999999",
            "-1",
            "x",
            "0",
        ] {
            let req = Request::get(format!(
                "/apis/{GROUP}/v1/apiservices?watch=1&timeoutSeconds={t}"
            ))
            .body(())
            .unwrap();
            let res = apigw_core::errors::render(api.handle(&req, &["apiservices"]));
            assert_eq!(res.status(), http::StatusCode::OK, "timeoutSeconds={t}");
        }
        assert_eq!(
            Query::parse(Some("timeoutSeconds=18446744073709551615")).timeout,
            apigw_core::duration::MAX_DURATION
        );
    }
}
