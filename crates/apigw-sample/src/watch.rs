//! Watch streams with kube-apiserver's semantics: `resourceVersion` to resume after a version
//! (a forgotten one gives a `200` stream whose only event is `ERROR` with a `410 Expired`
//! Status), `allowWatchBookmarks` for periodic `BOOKMARK` events, `timeoutSeconds` to end the
//! stream. Each event leaves as its own body frame the moment it happens. A stream ends when
//! the client leaves, the timeout passes, or the server shuts down, and counts as an active
//! watch in [`SampleStats`](super::SampleStats) until then.

use super::store::{Event, WatchStart, API_VERSION, KIND};
use super::table::{table, wants_table};
use super::{Active, App};
use apigw_core::body::{self, Body};
use apigw_core::errors::Status;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, watch};

/// kube-apiserver's default for watches without `timeoutSeconds` is 30 to 60 minutes.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

type Result<T> = std::result::Result<T, Status>;

/// What the client asked of its watch.
struct Params {
    ns: Option<String>,
    since: Option<u64>,
    timeout: Duration,
    bookmarks: bool,
    as_table: bool,
}

impl Params {
    fn parse(
        ns: Option<String>,
        query: &HashMap<String, String>,
        headers: &HeaderMap,
    ) -> Result<Self> {
        let since = match query.get("resourceVersion").filter(|v| !v.is_empty()) {
            Some(rv) => Some(
                rv.parse::<u64>()
                    .map_err(|_| Status::bad_request(format!("invalid resourceVersion {rv:?}")))?,
            ),
            None => None,
        };
        let timeout = match query.get("timeoutSeconds").filter(|v| !v.is_empty()) {
            Some(t) => t.parse::<u64>().map_err(|_| {
                Status::bad_request(format!("invalid timeoutSeconds {t:?}: not a whole number"))
            })?,
            None => 0,
        };
        // As in kube-apiserver, 0 means "the server's default".
        let timeout = match timeout {
            0 => DEFAULT_TIMEOUT,
            secs => Duration::from_secs(secs),
        };
        let bookmarks = matches!(
            query.get("allowWatchBookmarks").map(String::as_str),
            Some("true" | "1")
        );
        Ok(Self {
            ns,
            since,
            timeout,
            bookmarks,
            as_table: wants_table(headers),
        })
    }
}

/// Answers a `?watch=true` request of the collection in `ns` (every namespace when `None`).
pub(super) fn watch(
    app: &App,
    ns: Option<String>,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response<Body>> {
    let params = Params::parse(ns, query, headers)?;
    let start = match app.store.watch(params.ns.as_deref(), params.since) {
        Ok(start) => start,
        Err(status) if status.code() == StatusCode::GONE => {
            return Ok(stream_response(body::full(error_event(&status))));
        }
        Err(status) => return Err(status),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let stream = Stream {
        tx,
        sent_rv: start.rv,
        params,
        bookmark_every: app.bookmark_interval,
        stopping: app.stopping.clone(),
        _active: app.stats.watch_started(),
    };
    tokio::spawn(stream.run(start));
    Ok(stream_response(body::stream(ChannelBody(rx))))
}

fn stream_response(body: Body) -> Response<Body> {
    let mut res = Response::new(body);
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// Why a watch stream stopped.
enum End {
    ClientGone,
    TimedOut,
    ServerStopping,
    /// The watcher fell behind the event channel.
    Lagged,
}

/// One open watch: feeds the response body until it ends.
struct Stream {
    tx: mpsc::Sender<Bytes>,
    /// The resourceVersion the client is in sync with; what a bookmark reports.
    sent_rv: u64,
    params: Params,
    bookmark_every: Duration,
    stopping: watch::Receiver<bool>,
    _active: Active,
}

impl Stream {
    async fn run(mut self, start: WatchStart) {
        let end = match tokio::time::timeout(self.params.timeout, self.forward(start)).await {
            Ok(end) => end,
            Err(_) => End::TimedOut,
        };
        let why = match end {
            End::ClientGone => "client left",
            End::TimedOut => "timeoutSeconds passed",
            End::ServerStopping => "server stopping",
            End::Lagged => "watcher fell behind",
        };
        tracing::debug!(reason = why, rv = self.sent_rv, "watch ended");
    }

    async fn forward(&mut self, start: WatchStart) -> End {
        let WatchStart {
            initial, mut rx, ..
        } = start;
        if *self.stopping.borrow_and_update() {
            return End::ServerStopping;
        }
        for event in &initial {
            if self.send_event(event).await.is_err() {
                return End::ClientGone;
            }
        }
        let mut ticks = tokio::time::interval_at(
            tokio::time::Instant::now() + self.bookmark_every,
            self.bookmark_every,
        );
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let sent = tokio::select! {
                () = self.tx.closed() => return End::ClientGone,
                _ = self.stopping.changed() => return End::ServerStopping,
                event = rx.recv() => match event {
                    Ok(event) => self.on_event(event).await,
                    Err(broadcast::error::RecvError::Lagged(_)) => return End::Lagged,
                    Err(broadcast::error::RecvError::Closed) => return End::ServerStopping,
                },
                _ = ticks.tick(), if self.params.bookmarks => {
                    let line = encode(&bookmark(self.sent_rv), "BOOKMARK");
                    self.tx.send(line).await.map_err(drop)
                }
            };
            if sent.is_err() {
                return End::ClientGone;
            }
        }
    }

    /// Sends a live event if it is in the watched namespace; either way the client is now in
    /// sync with its resourceVersion.
    async fn on_event(&mut self, event: Event) -> std::result::Result<(), ()> {
        if self
            .params
            .ns
            .as_ref()
            .is_none_or(|ns| *ns == event.namespace)
        {
            self.send_event(&event).await?;
        }
        self.sent_rv = event.rv;
        Ok(())
    }

    async fn send_event(&self, event: &Event) -> std::result::Result<(), ()> {
        let object = if self.params.as_table {
            table(std::slice::from_ref(&event.object), Some(event.rv))
        } else {
            event.object.clone()
        };
        self.tx
            .send(encode(&object, event.kind))
            .await
            .map_err(drop)
    }
}

/// One watch event on its own line.
fn encode(object: &Value, kind: &str) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

/// The whole body of a watch that cannot start: one `ERROR` event carrying the Status.
fn error_event(status: &Status) -> Bytes {
    encode(&status.to_json(), "ERROR")
}

/// A bookmark's object: only the type and the resourceVersion the watcher has reached.
fn bookmark(rv: u64) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"resourceVersion": rv.to_string()},
    })
}

/// A response body fed by a channel, one frame per message; ends when the sender is dropped.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<std::result::Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(http_body::Frame::data(bytes))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_and_bookmarks_are_single_json_lines() {
        let line = encode(&bookmark(42), "BOOKMARK");
        assert!(line.ends_with(b"\n"));
        let event: Value = serde_json::from_slice(&line).expect("json");
        assert_eq!(event["type"], "BOOKMARK");
        assert_eq!(
            event["object"],
            json!({"apiVersion": API_VERSION, "kind": KIND, "metadata": {"resourceVersion": "42"}})
        );
        let error: Value =
            serde_json::from_slice(&error_event(&super::super::store::expired(1, 5)))
                .expect("json");
        assert_eq!(error["type"], "ERROR");
        assert_eq!(error["object"]["code"], 410);
        assert_eq!(error["object"]["reason"], "Expired");
    }

    #[test]
    fn bad_parameters_are_rejected() {
        let headers = HeaderMap::new();
        for (k, v) in [("resourceVersion", "x"), ("timeoutSeconds", "-1")] {
            let query = HashMap::from([(k.to_string(), v.to_string())]);
            let err = Params::parse(None, &query, &headers).err();
            assert_eq!(err.map(|e| e.code()), Some(StatusCode::BAD_REQUEST), "{k}");
        }
        let query = HashMap::from([
            ("allowWatchBookmarks".to_string(), "true".to_string()),
            ("timeoutSeconds".to_string(), "7".to_string()),
        ]);
        let p = Params::parse(Some("ns".into()), &query, &headers).expect("params");
        assert!(p.bookmarks && p.timeout == Duration::from_secs(7) && p.since.is_none());
    }
}
