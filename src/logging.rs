//! The process's log output: the `tracing` subscriber (text or JSON at the level `RUST_LOG`
//! names, default info) and the stderr writer behind it. A line is formatted on the thread that
//! logs it: access lines (`apigw::access`, one per request) by [`text::Text`]'s fast path, which
//! prints the bytes tracing-subscriber's default format would without its per-field formatting
//! machinery. The line is appended to a shared buffer; one writer thread hands whatever has
//! queued to stderr in one write, off the request path, and lets the next lines gather for a
//! few milliseconds (as nginx's `access_log ... flush=`). The buffer is bounded: when stderr
//! falls that far behind, a logging thread waits for room rather than drop a line. [`Guard`]
//! flushes everything queued and stops the writer when dropped; lines logged after that are
//! written directly.

mod text;

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use text::{Clock, Text};

/// Queued bytes past which a logging thread waits for the writer to catch up.
const CAPACITY: usize = 256 * 1024;

/// How long the writer lets lines gather after a write: at most this late, a line is out.
const LINGER: std::time::Duration = std::time::Duration::from_millis(5);

/// Installs the global subscriber. Keep the guard until the process is about to exit: dropping
/// it writes out every queued line.
pub fn init(json: bool) -> Guard {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|spec| tracing_subscriber::EnvFilter::try_new(log_directives(&spec)).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    let (writer, guard) = spawn();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(writer);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.event_format(Text::new(Clock)).init();
    }
    guard
}

/// Starts the writer thread; without one (it could not be spawned), lines go straight to stderr.
fn spawn() -> (Buffered, Guard) {
    let shared = Arc::new(Shared::default());
    let thread = {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("apigw-log".into())
            .spawn(move || shared.drain(&mut std::io::stderr()))
            .ok()
    };
    if thread.is_none() {
        shared.lock().closed = true;
    }
    (Buffered(Arc::clone(&shared)), Guard { shared, thread })
}

/// Flushes and stops the writer thread when dropped.
pub struct Guard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when lines are queued for an idle writer, and at close.
    wake: Condvar,
    /// Signalled when the writer has taken the queue.
    room: Condvar,
}

#[derive(Default)]
struct State {
    queued: Vec<u8>,
    /// The writer is waiting on `wake`: the next line must signal it.
    idle: bool,
    /// Threads waiting on `room`.
    waiting: usize,
    /// The guard was dropped: the writer stops once the queue is empty.
    closing: bool,
    /// The writer has stopped (or never started): write directly.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves only bytes behind: still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The writer thread: takes what has queued and writes it to `out`, until the guard is
    /// dropped and the queue is empty. After a write it sleeps [`LINGER`] while lines gather,
    /// so under steady logging no logging thread has to wake it: only the first line after
    /// a quiet spell does, and that one goes out at once.
    fn drain(&self, out: &mut impl Write) {
        let mut batch = Vec::with_capacity(16 * 1024);
        loop {
            let mut state = self.lock();
            while state.queued.is_empty() && !state.closing {
                state.idle = true;
                state = self.wake.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            state.idle = false;
            if state.queued.is_empty() {
                // Anything logged from now on is written directly, after all queued lines.
                state.closed = true;
                drop(state);
                self.room.notify_all();
                return;
            }
            std::mem::swap(&mut state.queued, &mut batch);
            let (waiting, closing) = (state.waiting > 0, state.closing);
            drop(state);
            if waiting {
                self.room.notify_all();
            }
            // Nowhere to report a failed write to stderr; the line is gone either way.
            let _ = out.write_all(&batch);
            batch.clear();
            if !closing {
                std::thread::sleep(LINGER);
            }
        }
    }

    /// Queues `line`, or writes it directly once the writer has stopped.
    fn push(&self, line: &[u8]) -> std::io::Result<()> {
        let mut state = self.lock();
        while state.queued.len() >= CAPACITY && !state.closed {
            state.waiting += 1;
            state = self.room.wait(state).unwrap_or_else(|e| e.into_inner());
            state.waiting -= 1;
        }
        if state.closed {
            drop(state);
            return std::io::stderr().lock().write_all(line);
        }
        state.queued.extend_from_slice(line);
        let wake = std::mem::take(&mut state.idle);
        drop(state);
        if wake {
            self.wake.notify_one();
        }
        Ok(())
    }
}

/// The subscriber's writer: each event's formatted line, queued whole.
#[derive(Clone)]
struct Buffered(Arc<Shared>);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buffered {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line(&self.0)
    }
}

/// One event's output. tracing-subscriber hands a line over in one `write_all`.
struct Line<'a>(&'a Shared);

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.push(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where each module of the single `apigw` crate lives since the workspace split: the new
/// prefix of its tracing targets.
const LOG_TARGETS: &[(&str, &str)] = &[
    ("body", "apigw_core::body"),
    ("errors", "apigw_core::errors"),
    ("tls", "apigw_core::tls"),
    ("server", "apigw_core::server"),
    ("yaml", "apigw_core::yaml"),
    ("meta", "apigw_core::meta"),
    ("reload", "apigw_core::reload"),
    ("certs", "apigw_core::certs"),
    ("config", "apigw_gateway::config"),
    ("apiservices", "apigw_gateway::apiservices"),
    ("audit", "apigw_gateway::audit"),
    ("authn", "apigw_authn"),
    ("authz", "apigw_authz"),
    ("availability", "apigw_availability"),
    ("cluster", "apigw_gateway::cluster"),
    ("discovery", "apigw_discovery"),
    ("gateway", "apigw_gateway::gateway"),
    ("metrics", "apigw_gateway::metrics"),
    ("proxy", "apigw_proxy"),
    ("registry", "apigw_registry"),
    ("request_info", "apigw_gateway::request_info"),
    ("sample", "apigw_sample"),
];

/// `RUST_LOG` as written for the single crate: an `apigw::<module>` directive names the crate
/// the module lives in now. `apigw=...` needs nothing (a target matches by prefix, so it covers
/// every `apigw_*` crate), and the access log keeps its own `apigw::access` target.
pub(crate) fn log_directives(spec: &str) -> String {
    spec.split(',')
        .map(|directive| {
            let trimmed = directive.trim_start();
            let Some(rest) = trimmed.strip_prefix("apigw::") else {
                return directive.to_string();
            };
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            match LOG_TARGETS
                .iter()
                .find(|(module, _)| *module == &rest[..end])
            {
                Some((_, target)) => format!("{target}{}", &rest[end..]),
                None => directive.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod directive_tests {
    use super::log_directives;

    #[test]
    fn module_directives_follow_their_module_into_its_crate() {
        assert_eq!(
            log_directives("info,apigw::proxy=debug,apigw::tls::reload=trace,apigw::sample=warn"),
            "info,apigw_proxy=debug,apigw_core::tls::reload=trace,apigw_sample=warn"
        );
        // The access log's target, the whole crate and anything else stay as written.
        assert_eq!(
            log_directives("apigw::access=info,apigw=debug,hyper=warn,apigw::doctor=debug"),
            "apigw::access=info,apigw=debug,hyper=warn,apigw::doctor=debug"
        );
        assert_eq!(
            log_directives("apigw::gateway[request]=debug"),
            "apigw_gateway::gateway[request]=debug"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::fmt::MakeWriter;

    #[test]
    fn lines_come_out_whole_in_order_and_all_before_the_writer_stops() {
        let shared = Arc::new(Shared::default());
        let t = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                let mut out = Vec::new();
                shared.drain(&mut out);
                out
            })
        };
        let writers: Vec<_> = (0..4)
            .map(|n| {
                let w = Buffered(Arc::clone(&shared));
                std::thread::spawn(move || {
                    for i in 0..20_000 {
                        let line = format!("t{n} {i:06} {}\n", "x".repeat(40));
                        w.make_writer().write_all(line.as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        // What the guard does, with the output kept.
        shared.lock().closing = true;
        shared.wake.notify_one();
        let out = String::from_utf8(t.join().unwrap()).unwrap();
        assert!(shared.lock().closed);
        let mut next = [0usize; 4];
        for line in out.lines() {
            let (who, rest) = line.split_once(' ').unwrap();
            let n: usize = who[1..].parse().unwrap();
            let (i, xs) = rest.split_once(' ').unwrap();
            assert_eq!(i.parse::<usize>().unwrap(), next[n], "{line}");
            assert_eq!(xs.len(), 40);
            next[n] += 1;
        }
        assert_eq!(next, [20_000; 4]);
    }

    #[test]
    fn after_close_lines_are_written_directly() {
        let shared = Shared::default();
        shared.lock().closed = true;
        Line(&shared).write_all(b"").unwrap();
        assert!(shared.lock().queued.is_empty());
    }
}
