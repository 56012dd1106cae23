//! What a backend says about its own discovery, as kube-aggregator's discovery manager asks it:
//! `GET /apis` (or `/api`) preferring the aggregated `APIGroupDiscoveryList` (v2, then
//! v2beta1), else whatever JSON the backend serves there. Answers are cached per backend and
//! path with their ETag and asked again with `If-None-Match`, at most once per refresh cycle
//! however many APIServices share the backend. It lives with the proxy, below both users of it:
//! availability (after each passed check) and discovery (the delegate).

use super::{Backend, FetchError};
use http::StatusCode;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The `Accept` list kube-aggregator sends for a backend's `/apis`.
pub const AGGREGATED_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// Discovery documents bigger than this are refused.
pub const MAX_BYTES: usize = 16 << 20;

/// A backend's `/apis` (or `/api`) as it answered.
#[derive(Debug)]
pub enum Answer {
    /// An `APIGroupDiscoveryList`, indexed by group and version.
    Aggregated(Index),
    /// Anything else: the legacy document (APIGroupList, APIVersions), or a server that has no
    /// discovery there at all (`Value::Null`).
    Legacy(Arc<Value>),
}

/// The version entries of an `APIGroupDiscoveryList`, in the backend's order.
#[derive(Debug, Default)]
pub struct Index {
    /// `(group, version entry)` in document order; the entry as the backend sent it.
    pub versions: Vec<(String, Arc<Value>)>,
}

impl Index {
    /// Indexes `doc` when it is an `APIGroupDiscoveryList` of `apidiscovery.k8s.io/v2` or
    /// `v2beta1`; None otherwise.
    pub fn parse(doc: &Value) -> Option<Self> {
        let kind_ok = doc.get("kind").and_then(Value::as_str) == Some("APIGroupDiscoveryList");
        let version_ok = matches!(
            doc.get("apiVersion").and_then(Value::as_str),
            Some("apidiscovery.k8s.io/v2" | "apidiscovery.k8s.io/v2beta1")
        );
        if !kind_ok || !version_ok {
            return None;
        }
        let mut versions = Vec::new();
        for item in doc
            .get("items")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let group = item
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            for v in item
                .get("versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if v.get("version")
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
                {
                    versions.push((group.to_string(), Arc::new(v.clone())));
                }
            }
        }
        Some(Self { versions })
    }

    /// The version entry for `group`/`version`, as the backend sent it.
    pub fn get(&self, group: &str, version: &str) -> Option<&Arc<Value>> {
        self.versions
            .iter()
            .find(|(g, v)| g == group && v["version"].as_str() == Some(version))
            .map(|(_, v)| v)
    }
}

/// One cached answer: its ETag and the refresh cycle it was last confirmed in.
struct Entry {
    etag: Option<String>,
    answer: Arc<Answer>,
    cycle: u64,
}

/// Cached discovery answers, keyed by backend, path and `Accept`.
#[derive(Default)]
pub struct Fetcher {
    entries: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Entry>>>>>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher").finish_non_exhaustive()
    }
}

impl Fetcher {
    /// `path` of `backend` (known as `key`) with `accept`: the cached answer when it was
    /// already confirmed in `cycle`, else asked again with `If-None-Match`. A backend that
    /// answers 404 or 406 has no discovery there (`Legacy(Null)`); any other failure (not
    /// reachable, another status, a bad body) is an error, and the caller keeps what it knew.
    pub async fn get(
        &self,
        key: &str,
        backend: &Backend,
        path: &str,
        accept: &str,
        cycle: u64,
        timeout: Duration,
    ) -> Result<Arc<Answer>, FetchError> {
        let slot = {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            entries
                .entry(format!("{key} {path} {accept}"))
                .or_default()
                .clone()
        };
        let mut slot = slot.lock().await;
        if let Some(entry) = slot.as_ref().filter(|e| e.cycle == cycle) {
            return Ok(entry.answer.clone());
        }
        let etag = slot.as_ref().and_then(|e| e.etag.clone());
        let (answer, etag) = match backend
            .fetch(path, accept, etag.as_deref(), MAX_BYTES, timeout)
            .await
        {
            Ok(None) => match slot.as_ref() {
                Some(entry) => (entry.answer.clone(), etag),
                // A 304 we did not ask for (no ETag sent): read it as no discovery.
                None => (Arc::new(Answer::Legacy(Arc::new(Value::Null))), None),
            },
            Ok(Some((body, etag))) => (Arc::new(parse(&body)), etag),
            // As upstream: no discovery there, or not in a form we asked for.
            Err(FetchError::Status { status, .. })
                if status == StatusCode::NOT_FOUND || status == StatusCode::NOT_ACCEPTABLE =>
            {
                (Arc::new(Answer::Legacy(Arc::new(Value::Null))), None)
            }
            Err(e) => return Err(e),
        };
        *slot = Some(Entry {
            etag,
            answer: answer.clone(),
            cycle,
        });
        Ok(answer)
    }

    /// Forgets every backend not in `live` (keys as passed to [`Fetcher::get`]).
    pub fn retain(&self, live: &std::collections::HashSet<String>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|k, _| k.split(' ').next().is_some_and(|b| live.contains(b)));
    }
}

/// Reads an answer: aggregated when it is an `APIGroupDiscoveryList`, else legacy JSON (Null
/// when it is not JSON at all).
pub fn parse(body: &[u8]) -> Answer {
    let doc: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    match Index::parse(&doc) {
        Some(index) => Answer::Aggregated(index),
        None => Answer::Legacy(Arc::new(doc)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn indexes_aggregated_lists_and_leaves_the_rest_legacy() {
        let doc = json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2beta1",
            "items": [{"metadata": {"name": "a.example.com"}, "versions": [
                {"version": "v2", "resources": [{"resource": "things", "categories": ["all"]}]},
                {"version": "v1", "resources": []}]}]});
        let Answer::Aggregated(index) = parse(doc.to_string().as_bytes()) else {
            panic!("not read as aggregated");
        };
        assert_eq!(index.versions.len(), 2);
        let v2 = index.get("a.example.com", "v2").unwrap();
        assert_eq!(v2["resources"][0]["categories"], json!(["all"]));
        assert!(index.get("a.example.com", "v3").is_none());
        assert!(matches!(
            parse(br#"{"kind":"APIGroupList","groups":[]}"#),
            Answer::Legacy(doc) if doc["kind"] == "APIGroupList"
        ));
        assert!(matches!(parse(b"not json"), Answer::Legacy(doc) if doc.is_null()));
        let wrong =
            json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v3"});
        assert!(matches!(
            parse(wrong.to_string().as_bytes()),
            Answer::Legacy(_)
        ));
    }
}
