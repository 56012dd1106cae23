//! Watches as kube-apiserver streams them: newline-delimited JSON events over a chunked
//! response; without a resourceVersion (or with "0") the current objects come first as ADDED;
//! with one, the events after it, or a 410 `Expired` ERROR event when history is compacted;
//! BOOKMARKs when asked for; the stream ends at `timeoutSeconds` or when the test drops it.

use super::resources::Kind;
use super::select::Selector;
use super::store::{ApiError, Event, Store};
use apigw_core::body::Body;
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// What a watch request asked for.
pub struct Params {
    /// None for "" or "0": start with the current state.
    pub rv: Option<u64>,
    pub bookmarks: bool,
    pub timeout: Duration,
    pub namespace: Option<String>,
    pub selector: Selector,
    pub bookmark_every: Duration,
}

fn frame(action: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": action, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

impl Params {
    fn matches(&self, e: &Event) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == e.namespace)
            && self.selector.matches(&e.object)
    }
}

/// Opens a watch of `kind`; the returned body streams until the watch ends. The flag tells
/// whether the watch was refused as expired (410).
pub fn open(
    store: &Mutex<Store>,
    mut drops: watch::Receiver<u64>,
    kind: &'static Kind,
    p: Params,
) -> (Body, bool) {
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let (initial, mut live, mut last) = {
        let s = store.lock().unwrap_or_else(|e| e.into_inner());
        let live = s.events.subscribe();
        let initial: Result<Vec<Bytes>, ApiError> = match p.rv {
            None => Ok(s
                .list(kind, p.namespace.as_deref())
                .into_iter()
                .filter(|o| p.selector.matches(o))
                .map(|o| frame("ADDED", o))
                .collect()),
            Some(rv) => match s.since(kind, rv) {
                Some(events) => Ok(events
                    .iter()
                    .filter(|e| p.matches(e))
                    .map(|e| frame(e.action, &e.object))
                    .collect()),
                None => Err(ApiError::new(
                    410,
                    "Expired",
                    format!("too old resource version: {rv} ({})", s.compacted),
                )),
            },
        };
        (initial, live, s.rv)
    };
    drops.mark_unchanged();
    let expired = initial.is_err();
    tokio::spawn(async move {
        let frames = match initial {
            Ok(frames) => frames,
            Err(gone) => {
                let _ = tx.send(frame("ERROR", &gone.status())).await;
                return;
            }
        };
        for f in frames {
            if tx.send(f).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(p.timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(p.bookmark_every);
        tick.tick().await;
        loop {
            let out = tokio::select! {
                event = live.recv() => match event {
                    Ok(e) => {
                        last = e.rv;
                        if !std::ptr::eq(e.kind, kind) || !p.matches(&e) {
                            continue;
                        }
                        frame(e.action, &e.object)
                    }
                    // Lagged or closed: end; the client resumes from its last revision.
                    Err(_) => return,
                },
                _ = tick.tick(), if p.bookmarks => frame("BOOKMARK", &json!({
                    "kind": kind.kind, "apiVersion": kind.api_version(),
                    "metadata": {"resourceVersion": last.to_string()}
                })),
                _ = drops.changed() => return,
                () = &mut deadline => return,
            };
            if tx.send(out).await.is_err() {
                return;
            }
        }
    });
    (ChannelBody(rx).boxed(), expired)
}

/// A response body fed by a channel; ends when the sender is dropped.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = apigw_core::body::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(http_body::Frame::data(bytes))))
    }
}
