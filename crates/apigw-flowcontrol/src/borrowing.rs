//! Seat borrowing between priority levels, as kube-apiserver's APF controller does it: each
//! level's seat demand (seats held plus seats wanted by waiting requests) is integrated over
//! a period of 10 s; at the period's end every limited level gets a concurrency limit between
//! its lower bound (its nominal seats less what it lends) and its upper bound (plus what it
//! may borrow), by one fair proportion of the levels' smoothed demands, so that a busy level
//! uses the seats an idle one lends. The sum shared out is that of the nominal seats.

use super::config::Seats;
use std::time::{Duration, Instant};

/// How often the limits are set again (upstream's `borrowingAdjustmentPeriod`).
pub const PERIOD: Duration = Duration::from_secs(10);

/// How much of the smoothed demand the next period keeps (a half-life of about 5 min).
const SMOOTHING: f64 = 0.977;

/// A target below this counts as this, so that every level has a share to scale.
const MIN_TARGET: f64 = 0.001;

/// A level's seats as its configuration sets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// ceil(total × shares / Σ shares).
    pub nominal: usize,
    /// The nominal seats less those it lends.
    pub lower: usize,
    /// The nominal seats and those it may borrow (all of the total, without a limit).
    pub upper: usize,
}

impl Bounds {
    /// The bounds of a level with `seats` among levels whose shares sum to `share_sum`, out
    /// of `total` seats. An exempt level has no borrowing limit.
    pub fn new(total: usize, share_sum: u64, seats: &Seats, exempt: bool) -> Self {
        let nominal = (total as u64 * u64::from(seats.shares)).div_ceil(share_sum.max(1)) as usize;
        let percent = |p: u32| (nominal as f64 * f64::from(p) / 100.0).round() as usize;
        let lendable = percent(seats.lendable_percent).min(nominal);
        let borrowing = match seats.borrowing_limit_percent {
            Some(p) if !exempt => percent(p),
            _ => total,
        };
        Self {
            nominal,
            lower: nominal - lendable,
            upper: nominal + borrowing,
        }
    }
}

/// Seat demand over time: its time-weighted mean, deviation and peak since the last reset.
#[derive(Debug)]
pub struct Demand {
    value: f64,
    at: Instant,
    start: Instant,
    integral: f64,
    squares: f64,
    peak: f64,
}

/// What a period's demand was.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Observed {
    pub average: f64,
    pub deviation: f64,
    pub high_watermark: usize,
}

impl Demand {
    pub fn new(now: Instant) -> Self {
        Self {
            value: 0.0,
            at: now,
            start: now,
            integral: 0.0,
            squares: 0.0,
            peak: 0.0,
        }
    }

    fn advance(&mut self, now: Instant) {
        // Changes may be noted a little out of order (a request's time is read before the
        // level's lock is taken): time never runs back.
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.integral += self.value * dt;
        self.squares += self.value * self.value * dt;
        self.at = self.at.max(now);
    }

    /// The demand is `value` from `now` on.
    pub fn set(&mut self, value: usize, now: Instant) {
        self.advance(now);
        self.value = value as f64;
        self.peak = self.peak.max(self.value);
    }

    /// The period's figures; a new period starts at `now`, at the present demand.
    pub fn reset(&mut self, now: Instant) -> Observed {
        self.advance(now);
        let span = now.saturating_duration_since(self.start).as_secs_f64();
        let observed = if span > 0.0 {
            let average = self.integral / span;
            let variance = (self.squares / span - average * average).max(0.0);
            Observed {
                average,
                deviation: variance.sqrt(),
                high_watermark: self.peak.round() as usize,
            }
        } else {
            Observed {
                high_watermark: self.peak.round() as usize,
                ..Observed::default()
            }
        };
        self.start = now;
        self.integral = 0.0;
        self.squares = 0.0;
        self.peak = self.value;
        observed
    }
}

/// One level in an adjustment.
#[derive(Debug, Clone)]
pub struct Adjusting {
    pub bounds: Bounds,
    pub exempt: bool,
    /// The period's demand.
    pub observed: Observed,
    /// In: the smoothed demand so far; out: with this period's.
    pub smoothed: f64,
    /// In: the limit in force; out: the next one.
    pub current: usize,
}

/// Sets each level's next limit from the period's demand; the fair proportion the limited
/// levels got (0 when there was only room for their lower bounds).
pub fn adjust(levels: &mut [Adjusting]) -> f64 {
    let nominal_sum: usize = levels.iter().map(|l| l.bounds.nominal).sum();
    let mut remaining = nominal_sum as i64;
    let (mut lower_sum, mut min_current_sum) = (0i64, 0i64);
    let mut items = Vec::new();
    for l in levels.iter_mut() {
        let o = l.observed;
        let envelope = o.average + o.deviation;
        l.smoothed = envelope.max(SMOOTHING * l.smoothed + (1.0 - SMOOTHING) * envelope);
        let min_current = if l.exempt {
            l.bounds.lower.max(o.high_watermark)
        } else {
            l.bounds.lower.max(l.bounds.nominal.min(o.high_watermark))
        };
        if l.exempt {
            l.current = min_current;
            remaining -= min_current as i64;
        } else {
            lower_sum += l.bounds.lower as i64;
            min_current_sum += min_current as i64;
            items.push(Item {
                lower: min_current as f64,
                upper: l.bounds.upper as f64,
                target: (min_current as f64).max(l.smoothed),
            });
        }
    }
    let limited = levels.iter_mut().filter(|l| !l.exempt);
    if remaining <= lower_sum {
        limited.for_each(|l| l.current = l.bounds.lower);
        return 0.0;
    }
    if remaining <= min_current_sum {
        let share = (remaining - lower_sum) as f64 / (min_current_sum - lower_sum) as f64;
        for (l, item) in limited.zip(&items) {
            let above = item.lower - l.bounds.lower as f64;
            l.current = l.bounds.lower + (above * share).round() as usize;
        }
        return 0.0;
    }
    // Without a solution the limits in force stay, as upstream's.
    let Some((shares, fair)) = allocate(nominal_sum as f64, &items) else {
        return 0.0;
    };
    for (l, share) in limited.zip(shares) {
        l.current = share.round() as usize;
    }
    fair
}

/// One limited level's part in the allocation.
#[derive(Debug, Clone, Copy)]
struct Item {
    lower: f64,
    upper: f64,
    target: f64,
}

/// The fair proportion `p` for which the items' `p × target`, each clamped to its bounds, sum
/// to `total`, and each item's clamped share; None when the bounds cannot sum to `total`.
fn allocate(total: f64, items: &[Item]) -> Option<(Vec<f64>, f64)> {
    let target = |i: &Item| i.target.max(MIN_TARGET);
    let share = |i: &Item, p: f64| (p * target(i)).clamp(i.lower, i.upper.max(i.lower));
    let sum = |p: f64| items.iter().map(|i| share(i, p)).sum::<f64>();
    let lower: f64 = items.iter().map(|i| i.lower).sum();
    let upper: f64 = items.iter().map(|i| i.upper.max(i.lower)).sum();
    const EPSILON: f64 = 1e-9;
    if lower - total > EPSILON || total - upper > EPSILON {
        return None;
    }
    // The sum grows with `p`, continuous and piecewise linear: bisection finds `p` to the
    // precision of a double, which no rounding to whole seats can tell from exact.
    let (mut low, mut high) = (0.0f64, 1.0f64);
    while sum(high) < total && high < f64::MAX / 4.0 {
        high *= 2.0;
    }
    for _ in 0..200 {
        let mid = (low + high) / 2.0;
        if sum(mid) < total {
            low = mid;
        } else {
            high = mid;
        }
    }
    Some((items.iter().map(|i| share(i, high)).collect(), high))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{bootstrap_levels, LevelKind};

    fn bootstrap(total: usize) -> Vec<(String, Adjusting)> {
        let levels = bootstrap_levels();
        let share_sum: u64 = levels.iter().map(|l| u64::from(l.seats.shares)).sum();
        levels
            .iter()
            .map(|l| {
                let exempt = l.kind == LevelKind::Exempt;
                let bounds = Bounds::new(total, share_sum, &l.seats, exempt);
                let adjusting = Adjusting {
                    bounds,
                    exempt,
                    observed: Observed::default(),
                    smoothed: 0.0,
                    current: bounds.nominal,
                };
                (l.name.clone(), adjusting)
            })
            .collect()
    }

    fn limits(levels: &[(String, Adjusting)]) -> Vec<(&str, usize)> {
        levels
            .iter()
            .map(|(n, l)| (n.as_str(), l.current))
            .collect()
    }

    #[test]
    fn the_bounds_are_upstreams() {
        let levels = bootstrap(600);
        let bounds: Vec<_> = levels
            .iter()
            .map(|(n, l)| (n.as_str(), l.bounds.nominal, l.bounds.lower, l.bounds.upper))
            .collect();
        // k8s.io/apiserver: nominal ceil(600 × shares / 245), lendable round(nominal × %),
        // no borrowing limit set: the server's 600.
        assert_eq!(
            bounds,
            [
                ("exempt", 0, 0, 600),
                ("catch-all", 13, 13, 613),
                ("system", 74, 50, 674),
                ("node-high", 98, 73, 698),
                ("leader-election", 25, 25, 625),
                ("workload-high", 98, 49, 698),
                ("workload-low", 245, 24, 845),
                ("global-default", 49, 24, 649),
            ]
        );
        let limited = Seats {
            shares: 10,
            lendable_percent: 50,
            borrowing_limit_percent: Some(150),
        };
        assert_eq!(
            Bounds::new(100, 20, &limited, false),
            Bounds {
                nominal: 50,
                lower: 25,
                upper: 125
            }
        );
    }

    #[test]
    fn idle_levels_share_the_nominal_sum_by_their_lower_bounds() {
        let mut levels = bootstrap(600);
        let mut adjusting: Vec<Adjusting> = levels.iter().map(|(_, l)| l.clone()).collect();
        let fair = adjust(&mut adjusting);
        for ((_, l), a) in levels.iter_mut().zip(adjusting) {
            *l = a;
        }
        // Σ nominal 602 over Σ lower 258: each gets its lower bound × 7/3.
        assert!((fair - 602.0 / 258.0).abs() < 1e-9, "{fair}");
        assert_eq!(
            limits(&levels),
            [
                ("exempt", 0),
                ("catch-all", 30),
                ("system", 117),
                ("node-high", 170),
                ("leader-election", 58),
                ("workload-high", 114),
                ("workload-low", 56),
                ("global-default", 56),
            ]
        );
    }

    #[test]
    fn a_busy_level_borrows_what_the_idle_ones_lend() {
        let levels = bootstrap(600);
        let mut adjusting: Vec<Adjusting> = levels.iter().map(|(_, l)| l.clone()).collect();
        let busy = levels
            .iter()
            .position(|(n, _)| n == "global-default")
            .expect("global-default");
        adjusting[busy].observed = Observed {
            average: 300.0,
            deviation: 0.0,
            high_watermark: 300,
        };
        adjust(&mut adjusting);
        let got = adjusting[busy].current;
        // More than its nominal 49; the others keep at least their lower bounds.
        assert!(got > 49, "{got}");
        for (l, (name, _)) in adjusting.iter().zip(&levels) {
            assert!(l.current >= l.bounds.lower, "{name}: {}", l.current);
        }
        let sum: usize = adjusting.iter().map(|l| l.current).sum();
        assert!((601..=603).contains(&sum), "{sum}");
        // Idle again: the smoothed demand decays, and with it what it holds.
        adjusting[busy].observed = Observed::default();
        let before = adjusting[busy].current;
        for _ in 0..200 {
            adjust(&mut adjusting);
        }
        assert!(adjusting[busy].current < before);
        assert_eq!(adjusting[busy].current, 56);
    }

    #[test]
    fn demand_is_time_weighted() {
        let t0 = Instant::now();
        let mut d = Demand::new(t0);
        d.set(4, t0);
        d.set(0, t0 + Duration::from_secs(5));
        let o = d.reset(t0 + Duration::from_secs(10));
        assert!((o.average - 2.0).abs() < 1e-9, "{o:?}");
        assert!((o.deviation - 2.0).abs() < 1e-9, "{o:?}");
        assert_eq!(o.high_watermark, 4);
        // The next period starts at the demand in force: 0.
        assert_eq!(d.reset(t0 + Duration::from_secs(20)), Observed::default());
    }

    #[test]
    fn bounds_that_cannot_sum_keep_the_limits() {
        let items = [Item {
            lower: 5.0,
            upper: 10.0,
            target: 5.0,
        }];
        assert!(allocate(20.0, &items).is_none());
        assert!(allocate(2.0, &items).is_none());
        let (shares, _) = allocate(7.0, &items).expect("solvable");
        assert!((shares[0] - 7.0).abs() < 1e-9);
    }
}
