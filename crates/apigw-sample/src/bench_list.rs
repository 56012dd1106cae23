//! The benchmark's big list (`GET /apis/wardle.example.com/v1alpha1/bench/list?bytes=N`): a JSON
//! list document of exactly `N` bytes, generated while it is sent, chunk by chunk, so a list of
//! gigabytes costs the sample server one 64 KiB chunk (shared by every frame) rather than its
//! size. The body has no length: it goes out chunked, as a streamed list does.
//!
//! The document is `{"kind":"BenchList","apiVersion":"wardle.example.com/v1alpha1",
//! "metadata":{},"items":["xx…","xx…",…,"x…"]}`: every item but the last is one chunk.

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

const HEAD: &[u8] =
    br#"{"kind":"BenchList","apiVersion":"wardle.example.com/v1alpha1","metadata":{},"items":["#;
const TAIL: &[u8] = b"]}";
/// One item and its comma: `"x…x",`.
const CHUNK: usize = 64 << 10;

/// The smallest document: the head, one empty item, the tail.
pub const MIN_BYTES: u64 = (HEAD.len() + 2 + TAIL.len()) as u64;
/// The largest document the endpoint makes.
pub const MAX_BYTES: u64 = 64 << 30;

/// The shared item chunk.
fn chunk() -> Bytes {
    static CHUNK_BYTES: OnceLock<Bytes> = OnceLock::new();
    CHUNK_BYTES
        .get_or_init(|| {
            let mut v = vec![b'x'; CHUNK];
            v[0] = b'"';
            v[CHUNK - 2] = b'"';
            v[CHUNK - 1] = b',';
            Bytes::from(v)
        })
        .clone()
}

/// A list document of `total` bytes, produced as it is polled.
pub struct ListBody {
    /// Full chunks still to send.
    chunks: u64,
    /// The head, before any chunk; then the last item and the tail, after every chunk.
    head: Option<Bytes>,
    last: Option<Bytes>,
}

impl ListBody {
    /// A document of exactly `total` bytes (at least [`MIN_BYTES`]).
    pub fn new(total: u64) -> Self {
        let fixed = (HEAD.len() + TAIL.len()) as u64;
        let items = total.max(MIN_BYTES) - fixed;
        // The last item takes what full chunks leave, and always at least its two quotes.
        let chunks = (items - 2) / CHUNK as u64;
        let last_len = usize::try_from(items - chunks * CHUNK as u64).unwrap_or(CHUNK + 1);
        let mut last = Vec::with_capacity(last_len + TAIL.len());
        last.push(b'"');
        last.resize(last_len - 1, b'x');
        last.push(b'"');
        last.extend_from_slice(TAIL);
        Self {
            chunks,
            head: Some(Bytes::from_static(HEAD)),
            last: Some(Bytes::from(last)),
        }
    }
}

impl http_body::Body for ListBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(head) = self.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if self.chunks > 0 {
            self.chunks -= 1;
            return Poll::Ready(Some(Ok(Frame::data(chunk()))));
        }
        Poll::Ready(self.last.take().map(|last| Ok(Frame::data(last))))
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none() && self.chunks == 0 && self.last.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        // No exact size: the response goes out chunked, as a streamed list does.
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn collect(n: u64) -> Vec<u8> {
        let body = ListBody::new(n).collect().await;
        match body {
            Ok(b) => b.to_bytes().to_vec(),
            Err(never) => match never {},
        }
    }

    #[tokio::test]
    async fn the_list_has_the_exact_size_and_is_json() {
        let sizes = [
            MIN_BYTES,
            MIN_BYTES + 1,
            1024,
            (CHUNK as u64) * 3 + 500,
            (CHUNK as u64) * 2 + HEAD.len() as u64 + TAIL.len() as u64 + 1,
            5 << 20,
        ];
        for n in sizes {
            let doc = collect(n).await;
            assert_eq!(doc.len() as u64, n);
            let v: serde_json::Value = serde_json::from_slice(&doc).expect("valid JSON");
            assert_eq!(v["kind"], "BenchList");
            assert!(v["items"].is_array());
        }
    }

    #[test]
    fn frames_share_one_chunk() {
        assert_eq!(chunk().as_ptr(), chunk().as_ptr());
    }
}
