//! Go-style durations (`500ms`, `30s`, `1m30s`, `1.5h`), as kube's flags and its
//! configuration files (`metav1.Duration`) write them: one parser for every setting, and the
//! form the help writes defaults in.

use std::time::Duration;

/// The longest duration a setting takes: Go's `time.Duration` (int64 nanoseconds, about 292
/// years), the type kube's flags parse into. Anything longer is an error, never a wrap or a
/// panic, and every deadline computed from a setting stays representable.
pub const MAX_DURATION: Duration = Duration::new(9_223_372_036, 854_775_807);

/// A duration as the flags take it: whole seconds as `30s` (`0s` for none), otherwise
/// milliseconds as `1500ms`; [`parse_duration`] reads both back.
pub fn format_duration(d: Duration) -> String {
    match d.subsec_millis() {
        0 => format!("{}s", d.as_secs()),
        _ => format!("{}ms", d.as_millis()),
    }
}

/// Parses a Go-style duration as kube flags take them: `500ms`, `30s`, `5m`, `1h`, `1m30s`,
/// `1.5h` (also `ns`, `us`, `µs`), up to [`MAX_DURATION`]. Exact integer arithmetic: no input
/// overflows or panics; a number too large is an error naming the input.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const MAX_NANOS: u128 = MAX_DURATION.as_nanos();
    // Fraction digits past this many cannot change the result by a nanosecond.
    const FRACTION_DIGITS: usize = 20;
    const UNITS: &str = "ns, us, ms, s, m, h";
    let not_a_duration = || format!("{text:?} is not a duration like 30s");
    let too_long = || {
        format!("{text:?} is too long: the longest duration is 2562047h47m16.854775807s (about 292 years)")
    };
    let mut rest = text.trim();
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        rest = after;
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(not_a_duration());
        }
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("{text:?}: a number needs a unit ({UNITS})")),
            unit => return Err(format!("{text:?}: unknown unit {unit:?} ({UNITS})")),
        };
        // Whole units, stopping as soon as the value is past the longest duration.
        let mut units: u128 = 0;
        for digit in whole.bytes() {
            units = units * 10 + u128::from(digit - b'0');
            if units > MAX_NANOS {
                return Err(too_long());
            }
        }
        let mut nanos = units.checked_mul(unit_nanos).ok_or_else(too_long)?;
        // The fraction, exactly (to the nanosecond, truncated as Go does).
        let fraction = &fraction[..fraction.len().min(FRACTION_DIGITS)];
        if !fraction.is_empty() {
            let digits: u128 = fraction.parse().map_err(|_| not_a_duration())?;
            nanos += digits * unit_nanos / 10u128.pow(fraction.len() as u32);
        }
        total = total.checked_add(nanos).ok_or_else(too_long)?;
        if total > MAX_NANOS {
            return Err(too_long());
        }
    }
    u64::try_from(total)
        .map(Duration::from_nanos)
        .map_err(|_| too_long())
}
