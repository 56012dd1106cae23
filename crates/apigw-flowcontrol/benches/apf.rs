//! APF's cost per request without the rest of a request around it: `apigw-bench`'s
//! apf-cost scenarios see it as a few percent of a proxied request, within about a
//! microsecond of noise per figure; this takes the admission and the seat's release (and the
//! PF headers) alone, in three shapes, each run with APF and without, alternately:
//!
//! - `alone`: one thread; between requests it writes `--spacer` KiB of its own memory, as a
//!   request's other work would, so APF's memory is as cold as in the gateway;
//! - `two threads`: the same on two threads, one identity and one APIService, so what APF
//!   shares (the level's lock and state, the identity's cache slot, the counters) moves
//!   between the cores, as under apigw's two workers;
//! - `N tasks`: N tasks on a two-worker runtime, each holding its seat while it yields once;
//!   at 32 a quarter of them wait for their APIService's share (24 of global-default's 49
//!   seats), at 16 none does.
//!
//! Figures are nanoseconds per request, the median of the rounds, on less off: CPU time for
//! the threads; wall time for the tasks, whose two workers are both busy, so that a
//! request's CPU time is about twice its wall time.
//!
//!   cargo bench -p apigw-flowcontrol --bench apf [-- --rounds 7 --spacer 1024]

use apigw_flowcontrol::{Flow, FlowControlSettings, FlowMetrics, Ticket};
use apigw_request::Attributes;
use apigw_request::Identity;
use std::sync::Arc;
use std::time::{Duration, Instant};

const APISERVICE: &str = "v1alpha1.wardle.example.com";
const PATH: &str = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders";

#[derive(Clone, Copy)]
struct Options {
    rounds: usize,
    /// KiB each thread writes between requests.
    spacer: usize,
    requests: usize,
}

fn options() -> Options {
    let mut o = Options {
        rounds: 5,
        spacer: 1024,
        requests: 50_000,
    };
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        let at = args.iter().position(|a| a == name)?;
        args.get(at + 1)?.parse().ok()
    };
    o.rounds = value("--rounds").unwrap_or(o.rounds).max(1);
    o.spacer = value("--spacer").unwrap_or(o.spacer);
    o.requests = value("--requests").unwrap_or(o.requests).max(32);
    o
}

fn flow() -> Arc<Flow> {
    let metrics = FlowMetrics::register(&prometheus::Registry::new());
    let flow = Flow::new(
        &FlowControlSettings::default(),
        Duration::from_secs(60),
        metrics,
    );
    Arc::new(flow.unwrap_or_else(|problems| panic!("the built-in configuration: {problems:?}")))
}

fn user() -> (Identity, Arc<Attributes>) {
    let id = Identity::new("user", vec!["system:authenticated".into()]);
    let a = Attributes::from_request(&http::Method::GET, PATH, None);
    (id, Arc::new(a))
}

/// A seat, when APF is on.
async fn admit(flow: Option<&Flow>, id: &Identity, a: &Arc<Attributes>) -> Option<Ticket> {
    match flow?.admit(id, a, Some(APISERVICE)).await {
        Some(Ok(ticket)) => Some(ticket),
        _ => panic!("refused: no request of this bench waits past its limit"),
    }
}

/// Its answer's headers: those a backend's answer has with APF and without (so that the map's
/// allocation is not charged to APF), and the PF headers when it holds a seat.
fn answer(ticket: Option<&Ticket>) -> http::HeaderMap {
    use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, DATE};
    let mut headers = http::HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CONTENT_LENGTH, HeaderValue::from_static("1024"));
    headers.insert(
        DATE,
        HeaderValue::from_static("Thu, 26 Nov 2026 20:00:00 GMT"),
    );
    if let Some(ticket) = ticket {
        ticket.apply(&mut headers);
    }
    headers
}

/// The CPU time this thread has run, from the scheduler's count in nanoseconds.
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns = stat.split_whitespace().next().and_then(|v| v.parse().ok());
    Duration::from_nanos(ns.expect("/proc/thread-self/schedstat (Linux)"))
}

thread_local! {
    /// The memory a thread writes between requests.
    static OTHER: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A request's other work: writes a word of every 64 bytes of `kib` KiB of this thread's
/// memory.
fn other_work(kib: usize) {
    OTHER.with_borrow_mut(|buf| {
        if buf.len() < kib * 128 {
            buf.resize(kib * 128, 0);
        }
        for word in buf[..kib * 128].iter_mut().step_by(8) {
            *word = word.wrapping_add(1);
        }
        std::hint::black_box(buf);
    });
}

/// CPU nanoseconds per request of `threads` threads, each making `n` requests.
fn threads(flow: &Arc<Flow>, threads: usize, apf: bool, o: &Options) -> f64 {
    let per: Vec<f64> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a runtime");
                    let (id, a) = user();
                    let start = thread_cpu();
                    rt.block_on(async {
                        for _ in 0..o.requests {
                            other_work(o.spacer);
                            let ticket = admit(apf.then_some(&**flow), &id, &a).await;
                            other_work(8);
                            std::hint::black_box(answer(ticket.as_ref()));
                        }
                    });
                    (thread_cpu() - start).as_nanos() as f64 / o.requests as f64
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker"))
            .collect()
    });
    per.iter().sum::<f64>() / per.len() as f64
}

/// Wall nanoseconds per request of `tasks` tasks on two workers.
fn tasks(flow: &Arc<Flow>, tasks: usize, apf: bool, o: &Options) -> f64 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let each = o.requests * 2 / tasks;
    let spacer = o.spacer;
    rt.block_on(async {
        let start = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..tasks {
            let flow = flow.clone();
            set.spawn(async move {
                let (id, a) = user();
                for _ in 0..each {
                    other_work(spacer / 2);
                    let ticket = admit(apf.then_some(&*flow), &id, &a).await;
                    other_work(spacer / 2);
                    tokio::task::yield_now().await;
                    std::hint::black_box(answer(ticket.as_ref()));
                }
            });
        }
        while set.join_next().await.is_some() {}
        start.elapsed().as_nanos() as f64 / (each * tasks) as f64
    })
}

#[derive(Clone, Copy)]
enum Shape {
    Threads(usize),
    Tasks(usize),
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let o = options();
    let flow = flow();
    println!(
        "APF per request, median of {} rounds of {} requests, {} KiB written between requests",
        o.rounds, o.requests, o.spacer
    );
    println!("| shape | without APF ns | with APF ns | APF ns |");
    println!("|---|--:|--:|--:|");
    let shapes = [
        ("alone (CPU)", Shape::Threads(1)),
        ("two threads (CPU)", Shape::Threads(2)),
        ("16 tasks (wall)", Shape::Tasks(16)),
        ("32 tasks (wall)", Shape::Tasks(32)),
    ];
    let run = |shape: Shape, apf| match shape {
        Shape::Threads(n) => threads(&flow, n, apf, &o),
        Shape::Tasks(n) => tasks(&flow, n, apf, &o),
    };
    for (name, shape) in shapes {
        let (mut off, mut on, mut cost) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..o.rounds {
            let (a, b) = (run(shape, false), run(shape, true));
            off.push(a);
            on.push(b);
            cost.push(b - a);
        }
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} |",
            median(off),
            median(on),
            median(cost)
        );
    }
}
