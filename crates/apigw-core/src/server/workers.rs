//! Thread-per-core connection workers. Each worker is a single-threaded tokio runtime on its
//! own OS thread. The accept loop hands every accepted connection to the worker with the fewest
//! open connections, and the connection lives there for its whole life, with the tasks its
//! requests spawn (the backend connections the proxy pools per worker). A request is then
//! served start to end on one thread: no work stealing, no wake-ups across cores, no shared run
//! queue, as nginx's worker processes and Envoy's worker threads do.

use std::cell::Cell;
use std::future::Future;
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

thread_local! {
    /// This thread's slot: 1 + its worker index on a worker, 0 anywhere else.
    static SLOT: Cell<usize> = const { Cell::new(0) };
}

/// The slot of the calling thread: 0 off the workers, `1..=n` on worker `0..n`. Per-thread
/// state (the proxy's idle backend connections) is indexed by it, modulo its own length.
pub fn slot() -> usize {
    SLOT.with(Cell::get)
}

/// The runtimes whose tasks [`alive_tasks`] counts, by registration.
static COUNTED: Mutex<Vec<(usize, Handle)>> = Mutex::new(Vec::new());
static NEXT_COUNTED: AtomicUsize = AtomicUsize::new(0);

/// A runtime counted by [`alive_tasks`] until this is dropped.
pub struct Counted(usize);

/// Counts `handle`'s tasks in [`alive_tasks`] while the returned guard lives. The gateway
/// registers its shared runtime; [`Workers`] register theirs.
pub fn count_tasks_of(handle: Handle) -> Counted {
    let id = NEXT_COUNTED.fetch_add(1, Ordering::Relaxed);
    COUNTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((id, handle));
    Counted(id)
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut counted = COUNTED.lock().unwrap_or_else(|e| e.into_inner());
        counted.retain(|(id, _)| *id != self.0);
    }
}

/// Tasks alive in the registered runtimes; with none registered, in the caller's runtime.
pub fn alive_tasks() -> usize {
    let counted = COUNTED.lock().unwrap_or_else(|e| e.into_inner());
    if counted.is_empty() {
        return Handle::try_current().map_or(0, |h| h.metrics().num_alive_tasks());
    }
    counted
        .iter()
        .map(|(_, h)| h.metrics().num_alive_tasks())
        .sum()
}

/// The running workers; dropping this stops them, ending the connections they still hold.
pub struct Workers {
    workers: Vec<Worker>,
}

struct Worker {
    handle: Handle,
    _counted: Counted,
    /// Connections handed to this worker and not yet finished.
    open: Arc<AtomicUsize>,
    /// Dropped to stop the worker.
    _stop: oneshot::Sender<()>,
}

impl Workers {
    /// Starts `n` workers (at least one).
    pub fn start(n: usize) -> std::io::Result<Self> {
        let workers = (0..n.max(1))
            .map(|i| {
                let rt = Builder::new_current_thread().enable_all().build()?;
                let handle = rt.handle().clone();
                let (stop, stopped) = oneshot::channel::<()>();
                std::thread::Builder::new()
                    .name(format!("apigw-worker-{i}"))
                    .spawn(move || {
                        SLOT.with(|s| s.set(i + 1));
                        rt.block_on(async {
                            let _ = stopped.await;
                        });
                        // Dropping `rt` here, outside of any runtime, cancels what is left.
                    })?;
                Ok(Worker {
                    _counted: count_tasks_of(handle.clone()),
                    handle,
                    open: Arc::new(AtomicUsize::new(0)),
                    _stop: stop,
                })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Self { workers })
    }

    /// Runs `serve` for `tcp` on the least busy worker. `tcp` must be non-blocking.
    pub fn hand_over<F, Fut>(&self, tcp: TcpStream, serve: F)
    where
        F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Some(worker) = self
            .workers
            .iter()
            .min_by_key(|w| w.open.load(Ordering::Relaxed))
        else {
            return;
        };
        worker.open.fetch_add(1, Ordering::Relaxed);
        let done = Done(worker.open.clone());
        worker.handle.spawn(async move {
            let _done = done;
            match tokio::net::TcpStream::from_std(tcp) {
                Ok(tcp) => serve(tcp).await,
                Err(e) => tracing::warn!(error = %e, "registering a connection with its worker"),
            }
        });
    }
}

/// Counts a connection as finished when dropped, however its task ends.
struct Done(Arc<AtomicUsize>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::time::Duration;

    /// Connections go to the worker with the fewest open ones, and each is served on that
    /// worker's own thread; a worker's count drops when its connection ends.
    #[tokio::test]
    async fn connections_spread_over_workers_and_stay_on_their_thread() {
        let workers = Workers::start(2).expect("workers");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (release, released) = tokio::sync::watch::channel(false);
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(std::net::TcpStream::connect(addr).expect("connect"));
            let (tcp, _) = listener.accept().expect("accept");
            tcp.set_nonblocking(true).expect("non-blocking");
            let (seen, mut released) = (seen.clone(), released.clone());
            workers.hand_over(tcp, move |_tcp| async move {
                let here = (slot(), std::thread::current().name().map(String::from));
                seen.lock().expect("lock").push(here);
                // Stay open (and counted) until released, as a live connection does.
                let _ = released.wait_for(|r| *r).await;
            });
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while seen.lock().expect("lock").len() < 4 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut per_slot = BTreeMap::new();
        for (slot, name) in seen.lock().expect("lock").iter() {
            assert_eq!(
                name.as_deref(),
                Some(format!("apigw-worker-{}", slot - 1).as_str())
            );
            *per_slot.entry(*slot).or_insert(0) += 1;
        }
        assert_eq!(per_slot, BTreeMap::from([(1, 2), (2, 2)]));
        let open = |w: &Workers| -> Vec<usize> {
            w.workers
                .iter()
                .map(|w| w.open.load(Ordering::Relaxed))
                .collect()
        };
        assert_eq!(open(&workers), [2, 2]);
        release.send(true).expect("release");
        while open(&workers) != [0, 0] && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(open(&workers), [0, 0]);
        assert_eq!(slot(), 0, "the test's own thread is no worker");
    }
}
