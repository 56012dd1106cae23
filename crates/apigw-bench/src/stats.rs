//! What `apigw-bench` reads from `/proc`: CPU seconds (the run time of each thread in
//! `/proc/<pid>/task/<tid>/schedstat`, else `utime + stime` of `/proc/<pid>/stat`), resident
//! memory (`VmRSS` of `/proc/<pid>/status`, sampled, since `VmHWM` only ever grows over the
//! process's life), the children of a process (nginx's workers), and the machine line of the
//! report. [`ProcSampler`] samples over a fixed window, [`OpenSampler`] until told to stop.

use serde::Serialize;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How often resident memory is sampled during a window.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// Resource use of a target's processes over one measured window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Usage {
    /// User plus system CPU time over the window, summed over the processes.
    pub cpu_s: f64,
    /// Resident memory at the start of the window (KiB, summed).
    pub rss_start_kib: u64,
    /// Largest resident memory sampled during the window (KiB, summed).
    pub rss_peak_kib: u64,
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on every Linux this runs on otherwise).
fn ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// The CPU seconds `pid` has run; `None` when the process is gone. To the nanosecond, as the
/// sum of its threads' run time in `schedstat`: a window of a few seconds then measures what
/// a target spent, not its count of 10 ms ticks (a tick is over 1 % of a gateway's CPU time
/// in a 3 s window shared four ways). A thread that exits during a window takes its time
/// with it; a gateway's threads live as long as it does. Where `schedstat` cannot be read,
/// the ticks of `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    match threads_ns(pid) {
        Some(ns) => Some(ns as f64 / 1e9),
        None => ticks_seconds(pid),
    }
}

/// The run time of `pid`'s live threads, in nanoseconds (the first field of `schedstat`).
fn threads_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = None;
    for task in tasks.flatten() {
        // A thread that ended since the listing has nothing more to count.
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
        total = Some(total.unwrap_or(0) + ns);
    }
    total
}

/// `utime + stime` of `pid` in seconds, counted in clock ticks.
fn ticks_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields are counted after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name, field 3 (state) is index 0, so utime (14) and stime (15) are 11 and 12.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks_per_second())
}

/// A `Vm*` line of `/proc/<pid>/status`, in KiB.
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix(':')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// Current resident memory of `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS")
}

/// The sum of `f` over `pids`, skipping processes that are gone.
fn sum<T: std::iter::Sum<T>>(pids: &[u32], f: impl Fn(u32) -> Option<T>) -> T {
    pids.iter().filter_map(|&p| f(p)).sum()
}

/// Processes whose parent is `parent`.
pub fn children(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| parent_of(pid) == Some(parent))
        .collect()
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Samples the processes of a target between two instants, off the async workers.
pub struct ProcSampler {
    handle: Option<std::thread::JoinHandle<Usage>>,
}

impl ProcSampler {
    /// Starts sampling; it waits for `from` and stops at `to`.
    pub fn start(pids: Vec<u32>, from: Instant, to: Instant) -> Self {
        if pids.is_empty() {
            return Self { handle: None };
        }
        let handle = std::thread::spawn(move || {
            std::thread::sleep(from.saturating_duration_since(Instant::now()));
            let cpu_start: f64 = sum(&pids, cpu_seconds);
            let rss_start_kib = sum(&pids, rss_kib);
            let mut rss_peak_kib = rss_start_kib;
            while Instant::now() < to {
                std::thread::sleep(SAMPLE_EVERY.min(to.saturating_duration_since(Instant::now())));
                rss_peak_kib = rss_peak_kib.max(sum(&pids, rss_kib));
            }
            Usage {
                cpu_s: sum(&pids, cpu_seconds) - cpu_start,
                rss_start_kib,
                rss_peak_kib,
            }
        });
        Self {
            handle: Some(handle),
        }
    }

    /// Waits for the window to end and returns what was seen.
    pub async fn finish(self) -> Usage {
        let Some(handle) = self.handle else {
            return Usage::default();
        };
        tokio::task::spawn_blocking(move || handle.join().unwrap_or_default())
            .await
            .unwrap_or_default()
    }
}

/// Samples the processes of a target from now until stopped, for a transfer whose end is not
/// known in advance (the big list).
pub struct OpenSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<Usage>>,
}

impl OpenSampler {
    /// Reads CPU and resident memory now, then samples memory every `every` until
    /// [`OpenSampler::finish`].
    pub fn start(pids: Vec<u32>, every: Duration) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        if pids.is_empty() {
            return Self { stop, handle: None };
        }
        let cpu_start: f64 = sum(&pids, cpu_seconds);
        let rss_start_kib = sum(&pids, rss_kib);
        let stopped = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut rss_peak_kib = rss_start_kib;
            while !stopped.load(Ordering::Acquire) {
                std::thread::sleep(every);
                rss_peak_kib = rss_peak_kib.max(sum(&pids, rss_kib));
            }
            Usage {
                cpu_s: sum(&pids, cpu_seconds) - cpu_start,
                rss_start_kib,
                rss_peak_kib,
            }
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops sampling (after one last sample) and returns what was seen.
    pub async fn finish(self) -> Usage {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let Some(handle) = self.handle else {
            return Usage::default();
        };
        tokio::task::spawn_blocking(move || handle.join().unwrap_or_default())
            .await
            .unwrap_or_default()
    }
}

/// CPU model, cores and kernel of this machine.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    pub memory_mib: u64,
}

impl Machine {
    pub fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
            .map_or_else(|| "unknown CPU".to_string(), |(_, m)| m.trim().to_string());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: u64 = meminfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("MemTotal:")?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0);
        Self {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown kernel".into(), |k| k.trim().to_string()),
            memory_mib: memory_kib / 1024,
        }
    }
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, {} cores, {} MiB RAM, Linux {}",
            self.cpu, self.cores, self.memory_mib, self.kernel
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_process() {
        let me = std::process::id();
        assert!(cpu_seconds(me).is_some());
        assert!(rss_kib(me).is_some_and(|kib| kib > 0));
        assert!(parent_of(me).is_some());
    }

    #[test]
    fn cpu_time_counts_to_below_a_tick() {
        // A few milliseconds of work: less than one 10 ms tick, but some nanoseconds.
        let me = std::process::id();
        let before = threads_ns(me).expect("schedstat of this process");
        let mut x = 1u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        let after = threads_ns(me).expect("schedstat of this process");
        assert!(after > before, "{before} -> {after} ({x})");
        let ticks = ticks_seconds(me).expect("stat of this process");
        let precise = cpu_seconds(me).expect("cpu of this process");
        // The same clock, counted two ways: ticks lag by up to a tick per thread, and the
        // test's threads run between the two readings; half a second is far beyond both.
        assert!((precise - ticks).abs() < 0.5, "{precise} vs {ticks}");
    }
}
