//! Cutting a response that is still being sent at its deadline, even while nothing polls its
//! body (a client that does not read stalls hyper's writes, and hyper polls a body only when it
//! can write). Each HTTP/1.1 connection and each HTTP/2 stream runs inside a [`Cuttable`]: a
//! request handler calls [`arm`] with its deadline, and when it passes the connection (HTTP/1.1:
//! the client sees a truncated body) or the stream (HTTP/2: hyper's stream task is dropped,
//! which resets the stream with `CANCEL`) is dropped, and with it the response body and
//! whatever it holds. [`Armed`] disarms when dropped, so a keep-alive connection's next request
//! starts with no deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::time::{Instant, Sleep};

tokio::task_local! {
    static SLOT: Arc<Slot>;
}

/// The deadline of the response being sent on one HTTP/1.1 connection or HTTP/2 stream.
#[derive(Default)]
struct Slot {
    /// The ticket that set it, and when to cut.
    deadline: Mutex<Option<(u64, Instant)>>,
    tickets: AtomicU64,
}

/// A deadline set with [`arm`]; dropping it clears the deadline.
pub struct Armed {
    slot: Arc<Slot>,
    ticket: u64,
}

impl Drop for Armed {
    fn drop(&mut self) {
        let mut deadline = self.slot.deadline.lock().unwrap_or_else(|e| e.into_inner());
        if deadline.is_some_and(|(ticket, _)| ticket == self.ticket) {
            *deadline = None;
        }
    }
}

/// Cuts the connection (HTTP/1.1) or stream (HTTP/2) this request is served on at `deadline`.
/// None outside [`serve`](super::serve)'s connections.
pub fn arm(deadline: Instant) -> Option<Armed> {
    SLOT.try_with(|slot| {
        let ticket = slot.tickets.fetch_add(1, Ordering::Relaxed);
        *slot.deadline.lock().unwrap_or_else(|e| e.into_inner()) = Some((ticket, deadline));
        Armed {
            slot: slot.clone(),
            ticket,
        }
    })
    .ok()
}

/// A connection or stream future that ends (dropped, Output None) at its armed deadline.
pub struct Cuttable<F> {
    inner: Pin<Box<F>>,
    slot: Arc<Slot>,
    sleep: Option<(Instant, Pin<Box<Sleep>>)>,
}

impl<F: Future> Cuttable<F> {
    pub fn new(inner: F) -> Self {
        Self {
            inner: Box::pin(inner),
            slot: Arc::default(),
            sleep: None,
        }
    }
}

impl<F: Future> Future for Cuttable<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let slot = this.slot.clone();
        if let Poll::Ready(out) = SLOT.sync_scope(slot, || this.inner.as_mut().poll(cx)) {
            return Poll::Ready(Some(out));
        }
        // The handler may have armed or disarmed while it was polled.
        let want = this
            .slot
            .deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|(_, at)| at);
        match (want, &mut this.sleep) {
            (None, sleep) => *sleep = None,
            (Some(at), Some((armed, sleep))) if *armed != at => {
                sleep.as_mut().reset(at);
                *armed = at;
            }
            (Some(_), Some(_)) => {}
            (Some(at), sleep @ None) => *sleep = Some((at, Box::pin(tokio::time::sleep_until(at)))),
        }
        if let Some((_, sleep)) = &mut this.sleep {
            if sleep.as_mut().poll(cx).is_ready() {
                tracing::debug!("response still being sent at its deadline; cut");
                return Poll::Ready(None);
            }
        }
        Poll::Pending
    }
}

/// hyper's executor for HTTP/2 streams: each stream's task is [`Cuttable`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Executor;

impl<F> hyper::rt::Executor<F> for Executor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        tokio::spawn(Cuttable::new(fut));
    }
}

/// Runs a connection as [`Cuttable`]: an HTTP/1.1 request served on it may cut it.
pub async fn cuttable(connection: impl Future<Output = ()>) {
    let _ = Cuttable::new(connection).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn an_armed_deadline_cuts_and_a_dropped_one_does_not() {
        // Armed and left armed: cut at the deadline although the future never ends.
        let cut = Cuttable::new(async {
            let _armed = arm(Instant::now() + Duration::from_millis(50));
            std::future::pending::<()>().await
        });
        let out = tokio::time::timeout(Duration::from_secs(5), cut).await;
        assert_eq!(out, Ok(None));
        // Armed, then disarmed (the response ended): runs on to its end.
        let cut = Cuttable::new(async {
            drop(arm(Instant::now() + Duration::from_millis(20)));
            tokio::time::sleep(Duration::from_millis(100)).await;
            7
        });
        assert_eq!(cut.await, Some(7));
        // Outside a Cuttable there is nothing to arm.
        assert!(arm(Instant::now()).is_none());
    }
}
