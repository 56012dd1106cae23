//! The deadlines of APF's waits, kept without a timer per wait. A timer due before every
//! other timer of its runtime makes tokio wake the runtime's driver (a write to its eventfd,
//! even from the runtime's own thread), and a wait's deadline, a quarter of the request
//! timeout, is due before the requests' own deadlines: that write cost more than the rest of
//! the wait. So the waits begun on a thread share one clock: a task that ticks every [`TICK`]
//! while any of them is pending, and wakes them all to look at their deadlines. A wait ends
//! at most a tick after its deadline; with no wait pending, the clock stops.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How often a clock with pending waits ticks: how late a wait may end after its deadline.
pub const TICK: std::time::Duration = std::time::Duration::from_millis(50);

#[derive(Default)]
struct Clock {
    tick: Notify,
    /// Waits pending on this clock.
    waits: AtomicUsize,
    /// Whether a task ticks it.
    running: AtomicBool,
}

thread_local! {
    static CLOCK: Arc<Clock> = Arc::default();
}

/// `work`'s output, or None if `deadline` passes first (by at most a [`TICK`]).
pub async fn within<F: Future>(deadline: Instant, work: F) -> Option<F::Output> {
    let clock = CLOCK.with(Arc::clone);
    let _pending = Pending::on(clock.clone());
    let mut work = std::pin::pin!(work);
    loop {
        let tick = clock.tick.notified();
        tokio::select! {
            biased;
            out = &mut work => return Some(out),
            () = tick => {}
        }
        if Instant::now() >= deadline {
            return None;
        }
    }
}

/// A wait pending on a clock, counted until dropped; the first starts the clock's task.
struct Pending(Arc<Clock>);

impl Pending {
    fn on(clock: Arc<Clock>) -> Self {
        clock.waits.fetch_add(1, SeqCst);
        if !clock.running.load(SeqCst) && !clock.running.swap(true, SeqCst) {
            tokio::spawn(ticking(clock.clone()));
        }
        Self(clock)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.waits.fetch_sub(1, SeqCst);
    }
}

/// Ticks `clock` while waits are pending on it.
async fn ticking(clock: Arc<Clock>) {
    // Should the runtime drop this task, the next wait starts another.
    let mut stopped = Stopped(Some(clock.clone()));
    let mut every = tokio::time::interval_at(Instant::now() + TICK, TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        clock.tick.notify_waiters();
        if clock.waits.load(SeqCst) > 0 {
            continue;
        }
        // Nothing pending: stop, unless a wait began meanwhile and left the ticking to this
        // task (it saw the clock running).
        clock.running.store(false, SeqCst);
        if clock.waits.load(SeqCst) == 0 || clock.running.swap(true, SeqCst) {
            stopped.0 = None;
            return;
        }
    }
}

/// Marks its clock stopped when dropped, if it still holds it.
struct Stopped(Option<Arc<Clock>>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(clock) = &self.0 {
            clock.running.store(false, SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A wait ends with its work, or not before its deadline; the clock stops once nothing
    /// waits, and starts again for the next wait. (The bounds on lateness are loose: they
    /// tell a wait that ends from one that hangs, on a loaded machine.)
    #[tokio::test]
    async fn a_wait_ends_with_its_work_or_after_its_deadline() {
        let soon = Instant::now() + TICK * 20;
        assert_eq!(within(soon, async { 7 }).await, Some(7));
        let started = Instant::now();
        let never = std::future::pending::<()>();
        assert_eq!(
            within(started + Duration::from_millis(120), never).await,
            None
        );
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(120), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        let clock = CLOCK.with(Arc::clone);
        assert_eq!(clock.waits.load(SeqCst), 0);
        let stopped = async {
            while clock.running.load(SeqCst) {
                tokio::time::sleep(TICK).await;
            }
        };
        let stopped = tokio::time::timeout(Duration::from_secs(5), stopped).await;
        assert!(stopped.is_ok(), "the clock stops once nothing waits");
        let never = std::future::pending::<()>();
        assert_eq!(within(Instant::now() + TICK, never).await, None);
        assert_eq!(clock.waits.load(SeqCst), 0);
    }
}
