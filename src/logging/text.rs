//! The text format of the log: [`Text`] prints what tracing-subscriber's default format
//! (`Format<Full>`) prints, with a fast path for access lines (`apigw::access`, one per request).
//!
//! The fast path covers events of that target outside any span, with ANSI colours off and plain
//! field names (no `message`, `r#` or dotted name). It assembles the whole line in a per-thread
//! `String` and hands it to the writer in one piece: the timestamp from [`Clock`]'s per-thread
//! cache, numbers as digits, strings quoted as `{:?}` quotes them, and an `f64` with at most
//! three decimals (the line's milliseconds) as digits too; only `Display` fields, escaped
//! strings and other floats go through `core::fmt`. Everything else takes the default format.

use std::cell::{Cell, RefCell};
use std::fmt::{self, Write as _};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::fmt::format::{Format, Full, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The access log's target.
const ACCESS: &str = "apigw::access";

/// A line's buffer capacity past which it is not kept for the next line.
const KEEP: usize = 16 * 1024;

/// tracing-subscriber's default text format, with the fast path for access lines.
pub(super) struct Text<T> {
    timer: T,
    full: Format<Full, T>,
}

impl<T: FormatTime + Clone> Text<T> {
    pub(super) fn new(timer: T) -> Self {
        let full = tracing_subscriber::fmt::format().with_timer(timer.clone());
        Text { timer, full }
    }
}

/// A timer that can append its timestamp to a line directly.
pub(super) trait LineTime: FormatTime {
    fn push_time(&self, line: &mut String) -> fmt::Result {
        self.format_time(&mut Writer::new(line))
    }
}

thread_local! {
    /// The line being assembled, kept for its capacity.
    static LINE: RefCell<String> = const { RefCell::new(String::new()) };
    /// The last access callsite whose field names were all found plain.
    static PLAIN: Cell<Option<&'static Metadata<'static>>> = const { Cell::new(None) };
}

impl<S, N, T> FormatEvent<S, N> for Text<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    T: LineTime,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        if meta.target() != ACCESS
            || writer.has_ansi_escapes()
            || ctx.event_scope().is_some()
            || !plain(meta)
        {
            // Off the access lines' path: a line meant to be copied is its message alone.
            if meta.target() == apigw::COMMANDS_TARGET {
                let mut message = Message(String::new());
                event.record(&mut message);
                return writeln!(writer, "{}", message.0);
            }
            return self.full.format_event(ctx, writer, event);
        }
        let done = LINE.try_with(|line| {
            // Taken already: a field's formatting logged a line of its own.
            let mut line = line.try_borrow_mut().ok()?;
            line.clear();
            let result = self
                .line(&mut line, event)
                .and_then(|()| writer.write_str(&line));
            if line.capacity() > KEEP {
                *line = String::new();
            }
            Some(result)
        });
        match done {
            Ok(Some(result)) => result,
            _ => self.full.format_event(ctx, writer, event),
        }
    }
}

/// An event's message alone.
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        }
    }
}

impl<T: LineTime> Text<T> {
    /// Appends the event's line to `line`.
    fn line(&self, line: &mut String, event: &Event<'_>) -> fmt::Result {
        if self.timer.push_time(line).is_err() {
            line.push_str("<unknown time>");
        }
        let meta = event.metadata();
        line.push_str(match *meta.level() {
            Level::TRACE => " TRACE ",
            Level::DEBUG => " DEBUG ",
            Level::INFO => "  INFO ",
            Level::WARN => "  WARN ",
            Level::ERROR => " ERROR ",
        });
        line.push_str(meta.target());
        line.push_str(": ");
        let mut fields = Fields {
            line,
            first: true,
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        line.push('\n');
        Ok(())
    }
}

/// Whether no field of the callsite is one the fast path leaves to the default format.
fn plain(meta: &'static Metadata<'static>) -> bool {
    if PLAIN.get().is_some_and(|seen| std::ptr::eq(seen, meta)) {
        return true;
    }
    let plain = meta.fields().iter().all(|f| {
        let name = f.name();
        name != "message" && !name.starts_with("r#") && !name.contains('.')
    });
    if plain {
        PLAIN.set(Some(meta));
    }
    plain
}

/// tracing-subscriber's [`SystemTime`] timestamp (`2026-11-24T01:39:58.123456Z`, UTC), with the
/// date and time to the second kept per thread: only the microseconds change between lines.
#[derive(Clone, Copy)]
pub(super) struct Clock;

/// Seconds since the epoch at which the four-digit years end (10000-01-01).
const YEAR_10000: u64 = 253_402_300_800;

impl Clock {
    /// Calls `f` with the timestamp of now; None past the four-digit years.
    fn with<R>(f: impl FnOnce(&str) -> R) -> Option<R> {
        thread_local! {
            /// The second of the stamp, and the stamp (its first 20 bytes that second's).
            static STAMP: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
        }
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let now = since.ok().filter(|d| d.as_secs() < YEAR_10000)?;
        STAMP
            .try_with(|stamp| {
                let mut stamp = stamp.try_borrow_mut().ok()?;
                let (at, text) = &mut *stamp;
                if *at != now.as_secs() {
                    *at = now.as_secs();
                    text.clear();
                    text.push_str(&second(*at));
                }
                text.truncate(20);
                let micros = now.subsec_micros() as usize;
                push_triple(text, micros / 1000);
                push_triple(text, micros % 1000);
                text.push('Z');
                Some(f(text))
            })
            .ok()
            .flatten()
    }
}

impl FormatTime for Clock {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        Clock::with(|stamp| w.write_str(stamp)).unwrap_or_else(|| SystemTime.format_time(w))
    }
}

impl LineTime for Clock {
    fn push_time(&self, line: &mut String) -> fmt::Result {
        match Clock::with(|stamp| line.push_str(stamp)) {
            Some(()) => Ok(()),
            None => SystemTime.format_time(&mut Writer::new(line)),
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS.` of `secs` since the epoch (before year 10000; the epoch's own for
/// anything `time` cannot represent). Once a second per thread, so `format!` is cheap enough.
fn second(secs: u64) -> String {
    let Some(t) = i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
    else {
        return "1970-01-01T00:00:00.".into();
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// `000` to `999`, three bytes each: numbers print a group of three digits at a time.
const TRIPLES: &str = {
    const BYTES: [u8; 3000] = {
        let mut out = [0; 3000];
        let mut n = 0;
        while n < 1000 {
            out[3 * n] = b'0' + (n / 100) as u8;
            out[3 * n + 1] = b'0' + (n / 10 % 10) as u8;
            out[3 * n + 2] = b'0' + (n % 10) as u8;
            n += 1;
        }
        out
    };
    match std::str::from_utf8(&BYTES) {
        Ok(text) => text,
        Err(_) => panic!("digits are ASCII"),
    }
};

/// Appends `n` in decimal.
fn push_decimal(line: &mut String, n: u64) {
    // Groups of three digits, the least significant first.
    let mut groups = [0usize; 7];
    let mut len = 0;
    let mut rest = n;
    loop {
        groups[len] = (rest % 1000) as usize;
        rest /= 1000;
        len += 1;
        if rest == 0 {
            break;
        }
    }
    // The leading group without its leading zeros (each slice of a constant length, copied
    // in place rather than by a call).
    let lead = 3 * groups[len - 1];
    match groups[len - 1] {
        100.. => line.push_str(&TRIPLES[lead..lead + 3]),
        10.. => line.push_str(&TRIPLES[lead + 1..lead + 3]),
        _ => line.push_str(&TRIPLES[lead + 2..lead + 3]),
    }
    for &group in groups[..len - 1].iter().rev() {
        push_triple(line, group);
    }
}

/// Appends `n` (below 1000) as three digits.
fn push_triple(line: &mut String, n: usize) {
    line.push_str(&TRIPLES[3 * n..3 * n + 3]);
}

/// Appends `v` as `{:?}` prints it, when it is a non-negative multiple of 0.001 below 10^9
/// (as the access line's milliseconds are); returns false, appending nothing, for others.
fn push_milli(line: &mut String, v: f64) -> bool {
    if !(v.is_sign_positive() && v < 1e9) {
        return false;
    }
    // Rounded; however m is found, the check below decides.
    let m = (v * 1000.0 + 0.5) as u64;
    // The double nearest m/1000: m/1000 is then the shortest decimal that reads back as v,
    // since two decimals of at most 15 significant digits never share a double.
    if m as f64 / 1000.0 != v {
        return false;
    }
    push_decimal(line, m / 1000);
    line.push('.');
    // At least one decimal, trailing zeros dropped.
    let (frac, at) = ((m % 1000) as usize, 3 * (m % 1000) as usize);
    match (frac % 100, frac % 10) {
        (0, _) => line.push_str(&TRIPLES[at..at + 1]),
        (_, 0) => line.push_str(&TRIPLES[at..at + 2]),
        _ => line.push_str(&TRIPLES[at..at + 3]),
    }
    true
}

/// Writes an event's fields as tracing-subscriber's default visitor does, with the ANSI
/// styling off and no `message` or `r#` fields. Access lines carry no error values, which it
/// would print without their sources.
struct Fields<'l> {
    line: &'l mut String,
    first: bool,
    result: fmt::Result,
}

impl Fields<'_> {
    /// Appends the field's `name=` (after a space unless it is the first) and its value.
    fn record(&mut self, field: &Field, value: impl FnOnce(&mut String) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        if !std::mem::take(&mut self.first) {
            self.line.push(' ');
        }
        self.line.push_str(field.name());
        self.line.push('=');
        self.result = value(self.line);
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, |line| {
            // `{:?}` leaves printable ASCII other than `"` and `\` as it is.
            // Checked without an early exit, so that it runs many bytes at a time.
            let plain = value.bytes().fold(true, |plain, b| {
                plain & (b.wrapping_sub(0x20) < 0x5f) & (b != b'"') & (b != b'\\')
            });
            if plain {
                line.push('"');
                line.push_str(value);
                line.push('"');
                Ok(())
            } else {
                write!(line, "{value:?}")
            }
        });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record(field, |line| {
            push_decimal(line, value);
            Ok(())
        });
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.record(field, |line| {
            if push_milli(line, value) {
                Ok(())
            } else {
                write!(line, "{value:?}")
            }
        });
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.record(field, |line| {
            line.push_str(if value { "true" } else { "false" });
            Ok(())
        });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record(field, |line| write!(line, "{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record(field, |line| write!(line, "{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// A timestamp that does not change between the two formats.
    #[derive(Clone)]
    struct Stamp(&'static str);

    const FIXED: Stamp = Stamp("2026-01-02T03:04:05.123456Z");

    impl FormatTime for Stamp {
        fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
            w.write_str(self.0)
        }
    }

    impl LineTime for Stamp {}

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
            assert_eq!(second(secs), text);
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
            assert_eq!(second(secs), want);
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

    /// `{:?}` of `v` when the fast path takes it.
    fn milli(v: f64) -> Option<String> {
        let mut line = String::new();
        push_milli(&mut line, v).then_some(line)
    }

    #[test]
    fn milliseconds_print_as_debug_prints_them() {
        for m in [
            0u64, 1, 5, 10, 20, 100, 999, 1000, 1001, 1010, 1100, 2000, 2665, 2666,
        ]
        .into_iter()
        .chain([123_456_789, 999_999_999_999, 100_000_000_000])
        {
            let v = m as f64 / 1000.0;
            assert_eq!(milli(v).as_deref(), Some(format!("{v:?}").as_str()), "{m}");
        }
        for v in [
            -0.0,
            -1.0,
            1e9,
            1e17,
            1e-7,
            0.0001,
            0.1 + 0.2,
            f64::NAN,
            f64::INFINITY,
        ] {
            assert_eq!(milli(v), None, "{v}");
        }
    }

    #[test]
    fn number_edges_print_in_decimal() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            999,
            1000,
            1001,
            1010,
            999_999,
            1_000_000,
            u64::MAX,
        ] {
            let mut line = String::new();
            push_decimal(&mut line, n);
            assert_eq!(line, n.to_string());
        }
        let mut line = String::new();
        push_triple(&mut line, 7);
        push_triple(&mut line, 999);
        assert_eq!(line, "007999");
    }

    proptest::proptest! {
        #[test]
        fn thousandths_print_as_debug_prints_them(m in 0u64..1_000_000_000_000) {
            let v = m as f64 / 1000.0;
            proptest::prop_assert_eq!(milli(v), Some(format!("{v:?}")));
        }

        #[test]
        fn other_floats_print_as_debug_prints_them_or_go_to_debug(v: f64) {
            if let Some(text) = milli(v) {
                proptest::prop_assert_eq!(text, format!("{v:?}"));
            }
        }

        #[test]
        fn numbers_print_in_decimal(n: u64) {
            let mut line = String::new();
            push_decimal(&mut line, n);
            proptest::prop_assert_eq!(line, n.to_string());
        }
    }

    #[test]
    fn the_clock_appends_what_it_formats() {
        for _ in 0..100 {
            let mut pushed = String::from("x");
            Clock.push_time(&mut pushed).unwrap();
            let mut formatted = String::new();
            Clock.format_time(&mut Writer::new(&mut formatted)).unwrap();
            assert_eq!(pushed.len(), 1 + formatted.len());
            if pushed[1..21] == formatted[..20] {
                assert!(
                    pushed.ends_with('Z') && pushed[21..27].bytes().all(|b| b.is_ascii_digit())
                );
                return;
            }
        }
        panic!("the two stamps never agreed to the second");
    }
}
