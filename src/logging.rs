//! The process's log output: the `tracing` subscriber (text or JSON at the level `RUST_LOG`
//! names, default info) and the stderr writer behind it. A line is formatted on the thread that
//! logs it, into tracing-subscriber's per-thread buffer: access lines (`apigw::access`, one per
//! request) by [`Text`], which prints the bytes tracing-subscriber's default format would
//! without its per-field formatting machinery. The line is appended to a shared buffer; one
//! writer thread hands whatever has queued to stderr in one write, off the request path, and
//! lets the next lines gather for a few milliseconds (as nginx's `access_log ... flush=`). The
//! buffer is bounded: when stderr falls that far behind, a logging thread waits for room rather
//! than drop a line. [`Guard`] flushes everything queued and stops the writer when dropped;
//! lines logged after that are written directly.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, Full, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

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

/// The access log's target.
const ACCESS: &str = "apigw::access";

/// tracing-subscriber's default text format (`Format<Full>`), with a fast path for access lines
/// that writes the same bytes: timestamp, level, target, then `name=value` fields, strings
/// quoted as `{:?}` quotes them. Anything it does not cover goes to the default format: other
/// targets, colours, events in a span, a `message` field.
struct Text<T> {
    timer: T,
    full: Format<Full, T>,
}

impl<T: FormatTime + Clone> Text<T> {
    fn new(timer: T) -> Self {
        let full = tracing_subscriber::fmt::format().with_timer(timer.clone());
        Text { timer, full }
    }
}

impl<S, N, T> FormatEvent<S, N> for Text<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    T: FormatTime,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        let plain =
            |name: &str| name != "message" && !name.starts_with("r#") && !name.contains('.');
        if meta.target() != ACCESS
            || writer.has_ansi_escapes()
            || ctx.event_scope().is_some()
            || !meta.fields().iter().all(|f| plain(f.name()))
        {
            return self.full.format_event(ctx, writer, event);
        }
        if self.timer.format_time(&mut writer).is_err() {
            writer.write_str("<unknown time>")?;
        }
        let level = match *meta.level() {
            Level::TRACE => "TRACE",
            Level::DEBUG => "DEBUG",
            Level::INFO => " INFO",
            Level::WARN => " WARN",
            Level::ERROR => "ERROR",
        };
        for part in [" ", level, " ", meta.target(), ": "] {
            writer.write_str(part)?;
        }
        let mut fields = Fields {
            out: &mut writer,
            first: true,
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        writer.write_char('\n')
    }
}

/// tracing-subscriber's [`SystemTime`] timestamp (`2026-11-24T01:39:58.123456Z`, UTC), with the
/// date and time to the second kept per thread: only the microseconds change between lines.
#[derive(Clone, Copy)]
struct Clock;

/// Seconds since the epoch at which the four-digit years end (10000-01-01).
const YEAR_10000: u64 = 253_402_300_800;

impl FormatTime for Clock {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        thread_local! {
            static SECOND: std::cell::Cell<(u64, [u8; 20])> = const { std::cell::Cell::new((u64::MAX, [0; 20])) };
        }
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let Some(now) = since.ok().filter(|d| d.as_secs() < YEAR_10000) else {
            return SystemTime.format_time(w);
        };
        let secs = now.as_secs();
        let (cached, mut prefix) = SECOND.get();
        if cached != secs {
            prefix = second(secs);
            SECOND.set((secs, prefix));
        }
        let mut micros = [b'0', b'0', b'0', b'0', b'0', b'0', b'Z'];
        digits(&mut micros[..6], now.subsec_micros().into());
        for part in [&prefix[..], &micros[..]] {
            w.write_str(std::str::from_utf8(part).map_err(|_| std::fmt::Error)?)?;
        }
        Ok(())
    }
}

/// `YYYY-MM-DDTHH:MM:SS.` of `secs` since the epoch (before year 10000).
fn second(secs: u64) -> [u8; 20] {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil(days);
    let mut out = *b"0000-00-00T00:00:00.";
    digits(&mut out[0..4], year);
    digits(&mut out[5..7], month);
    digits(&mut out[8..10], day);
    digits(&mut out[11..13], rest / 3600);
    digits(&mut out[14..16], rest % 3600 / 60);
    digits(&mut out[17..19], rest % 60);
    out
}

/// The proleptic Gregorian (year, month, day) of `days` since 1970-01-01.
fn civil(days: u64) -> (u64, u64, u64) {
    // Counted from 0000-03-01, so that a leap day ends its year; eras of 400 years.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Writes `n` into `out` as decimal digits, zero-padded on the left (the leading digits
/// dropped when it does not fit).
fn digits(out: &mut [u8], mut n: u64) {
    for d in out.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// Writes an event's fields as tracing-subscriber's default visitor does, with the ANSI
/// styling off and no `message` or `r#` fields. Access lines carry no error values, which it
/// would print without their sources.
struct Fields<'w, 'a> {
    out: &'w mut Writer<'a>,
    first: bool,
    result: std::fmt::Result,
}

impl Fields<'_, '_> {
    /// The field's `name=`, after a space unless it is the first.
    fn name(&mut self, field: &Field) -> std::fmt::Result {
        if !std::mem::take(&mut self.first) {
            self.out.write_char(' ')?;
        }
        self.out.write_str(field.name())?;
        self.out.write_char('=')
    }

    fn record(&mut self, field: &Field, value: impl FnOnce(&mut Writer<'_>) -> std::fmt::Result) {
        if self.result.is_ok() {
            self.result = self.name(field).and_then(|()| value(self.out));
        }
    }
}

impl Visit for Fields<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, |out| {
            // `{:?}` leaves printable ASCII other than `"` and `\` as it is.
            if value
                .bytes()
                .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
            {
                out.write_char('"')?;
                out.write_str(value)?;
                out.write_char('"')
            } else {
                write!(out, "{value:?}")
            }
        });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record(field, |out| {
            let width = value.checked_ilog10().map_or(1, |n| n as usize + 1);
            let mut buf = [0u8; 20];
            digits(&mut buf[..width], value);
            out.write_str(std::str::from_utf8(&buf[..width]).map_err(|_| std::fmt::Error)?)
        });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record(field, |out| write!(out, "{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record(field, |out| write!(out, "{value:?}"));
    }
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
    ("authn", "apigw_gateway::authn"),
    ("authz", "apigw_gateway::authz"),
    ("availability", "apigw_gateway::availability"),
    ("cluster", "apigw_gateway::cluster"),
    ("discovery", "apigw_gateway::discovery"),
    ("gateway", "apigw_gateway::gateway"),
    ("metrics", "apigw_gateway::metrics"),
    ("proxy", "apigw_gateway::proxy"),
    ("registry", "apigw_gateway::registry"),
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
            "info,apigw_gateway::proxy=debug,apigw_core::tls::reload=trace,apigw_sample=warn"
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

    /// A timestamp that does not change between the two formats.
    #[derive(Clone)]
    struct Stamp(&'static str);

    const FIXED: Stamp = Stamp("2026-01-02T03:04:05.123456Z");

    impl FormatTime for Stamp {
        fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
            w.write_str(self.0)
        }
    }

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Access-like lines and others, through `format`.
    fn lines<E>(format: E) -> String
    where
        E: FormatEvent<
                tracing_subscriber::Registry,
                tracing_subscriber::fmt::format::DefaultFields,
            > + Send
            + Sync
            + 'static,
    {
        let out = Capture::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(Level::TRACE)
            .with_writer(move || sink.clone())
            .event_format(format)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let addr: std::net::SocketAddr = "[::1]:40000".parse().unwrap();
            for (user, path, ms) in [
                ("alice", "/apis/wardle.example.com/v1alpha1/flunders", 0.25),
                ("", "/api", 0.0),
                ("sa \"q\" \\ x", "/a b", 12345.678),
                ("tab\tnl\nü\u{7f}\u{1b}[31m", "/ü", 1e-7),
                ("system:serviceaccount:ns:name", "/healthz'", 1e17),
            ] {
                tracing::info!(
                    target: "apigw::access",
                    remote = %addr,
                    user,
                    verb = %"get",
                    path = %path,
                    code = 200u16,
                    bytes = ms as u64,
                    max = u64::MAX,
                    neg = -3i64,
                    duration_ms = ms,
                    ok = true,
                    apiservice = "",
                    outcome = %"completed",
                );
            }
            tracing::warn!(target: "apigw::access", "with a message {}", 1);
            tracing::warn!(target: "apigw::access", r#type = "x", "r# name");
            tracing::error!(error = %"boom", "another target");
            tracing::info_span!("span", a = 1).in_scope(|| {
                tracing::debug!(target: "apigw::access", user = "in a span");
            });
        });
        let text = out.0.lock().unwrap().clone();
        String::from_utf8(text).unwrap()
    }

    #[test]
    fn access_lines_print_as_the_default_format_prints_them() {
        let default = lines(tracing_subscriber::fmt::format().with_timer(FIXED));
        assert_eq!(default.lines().count(), 9, "{default}");
        assert_eq!(lines(Text::new(FIXED)), default);
        // The five access lines take the fast path, the other four the default format.
        let split = lines(Text {
            timer: FIXED,
            full: tracing_subscriber::fmt::format().with_timer(Stamp("other-time")),
        });
        assert_eq!(
            split.matches("2026-01-02T03:04:05.123456Z").count(),
            5,
            "{split}"
        );
        assert_eq!(split.matches("other-time").count(), 4, "{split}");
    }

    #[test]
    fn the_clock_prints_as_tracing_subscribers_system_time() {
        use time::macros::datetime;
        for (secs, text) in [
            (0, "1970-01-01T00:00:00."),
            (951_782_400, "2000-02-29T00:00:00."),
            (1_795_484_398, "2026-11-24T01:39:58."),
            (4_107_542_399, "2100-02-28T23:59:59."),
            (4_107_542_400, "2100-03-01T00:00:00."),
            (YEAR_10000 - 1, "9999-12-31T23:59:59."),
        ] {
            assert_eq!(std::str::from_utf8(&second(secs)).unwrap(), text);
        }
        let mut t = datetime!(1970-01-01 0:00 UTC);
        while t.year() < 2500 {
            let secs = t.unix_timestamp() as u64;
            let want = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second()
            );
            assert_eq!(std::str::from_utf8(&second(secs)).unwrap(), want);
            t += time::Duration::seconds(86_400 * 3 + 3_607);
        }
        // Against tracing-subscriber's own, within one second.
        let stamp = |timer: &dyn FormatTime| {
            let mut s = String::new();
            timer.format_time(&mut Writer::new(&mut s)).unwrap();
            s
        };
        for _ in 0..100 {
            let (ours, theirs) = (stamp(&Clock), stamp(&SystemTime));
            assert_eq!(ours.len(), theirs.len(), "{ours} {theirs}");
            if ours[..20] == theirs[..20] {
                assert!(ours.ends_with('Z') && ours[20..26].bytes().all(|b| b.is_ascii_digit()));
                return;
            }
        }
        panic!("the two clocks never agreed to the second");
    }

    #[test]
    fn after_close_lines_are_written_directly() {
        let shared = Shared::default();
        shared.lock().closed = true;
        Line(&shared).write_all(b"").unwrap();
        assert!(shared.lock().queued.is_empty());
    }
}
