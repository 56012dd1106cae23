//! One priority level's seats and queues, as k8s.io/apiserver's queueset runs them: an exempt
//! level never waits; a `Reject` level runs a request when a seat is free and refuses it
//! otherwise; a queuing level deals each flow a hand of queues (shuffle sharding), puts the
//! request in the hand's queue with the least waiting work, refuses it only when every seat is
//! taken and that queue is full, and dispatches from the queues by fair queuing: the non-empty
//! queue with the earliest virtual finish time goes next (round-robin on ties), each request
//! costing its seats times a nominal 3 ms of virtual time, so a flow that sends more waits
//! longer and the others do not. The level's limit moves as it borrows and lends seats
//! ([`super::borrowing`]); its seat demand is integrated here, where it changes.
//!
//! Beyond upstream, each APIService has a share of the level, `share_cap` seats, applied as a
//! condition of dispatch: a request past its APIService's share waits in its queue like any
//! other, and fair queuing picks the earliest-finishing request that may start. Past its share
//! an APIService may still borrow idle seats, while no other party's request that could start
//! waits and a reserve (half of what the share leaves to the others) stays free for
//! newcomers: alone on its level, a busy backend uses all but the reserve, while a backend whose
//! requests hang can never take the seats another one starts with.

use super::borrowing::{Demand, Observed};
use super::classify::{card, deal, hand_len};
use apigw_request::Attributes;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::oneshot;

/// Virtual seconds a request costs per seat (upstream's estimated service duration).
const SERVICE: f64 = 0.003;

/// Why a request was refused, with upstream's metric reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    QueueFull,
    ConcurrencyLimit,
    TimeOut,
    /// apigw's own: the APIService's requests hold their share of the level's seats.
    ApiServiceLimit,
}

impl Reason {
    pub fn label(self) -> &'static str {
        match self {
            Self::QueueFull => "queue-full",
            Self::ConcurrencyLimit => "concurrency-limit",
            Self::TimeOut => "time-out",
            Self::ApiServiceLimit => "apiservice-limit",
        }
    }
}

/// How the level limits.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    Exempt,
    Reject,
    Queue {
        queues: usize,
        hand_size: usize,
        queue_length_limit: usize,
    },
}

/// A level's state.
pub struct QueueSet {
    pub mode: Mode,
    /// The seats one APIService's requests may hold; None: no cap.
    share_cap: Option<usize>,
    state: Mutex<State>,
}

/// What the request dump shows of a request.
#[derive(Debug, Clone)]
pub struct Tag {
    /// Its flow schema's place in the configuration's order.
    pub schema: usize,
    /// How its schema distinguishes flows: the dump shows the user, the namespace or nothing.
    pub distinguisher: Option<super::config::Distinguisher>,
    pub user: Arc<str>,
    pub attrs: Arc<Attributes>,
    pub arrived: Instant,
}

/// A request in the dump: its queue and place in it (-1: none, or executing), and when it
/// started (None: waiting).
pub struct Dumped {
    pub queue: i64,
    pub index: i64,
    pub tag: Tag,
    pub started: Option<Instant>,
}

struct State {
    /// Seats: the level's concurrency limit, as borrowing last set it.
    limit: usize,
    /// Requests waiting in the queues.
    waiting: usize,
    demand: Demand,
    /// Requests executing, each on one seat (as upstream's width estimate gives every
    /// request apigw proxies: no list or watch is served here).
    executing: usize,
    /// The executing requests, by their seat's slot.
    running: Vec<Option<Running>>,
    /// Slots of `running` free for the next request.
    free: Vec<usize>,
    queues: Vec<Queue>,
    /// The queue served last, for round-robin among ties.
    robin: usize,
    /// Enqueues so far: where in the hand the search for the lightest queue starts.
    enqueues: usize,
    /// The virtual time of the last dispatch.
    now: f64,
    next_id: u64,
    dispatched: u64,
    rejected: u64,
    /// Each APIService's share of the level, by its slot in `shares`.
    share_of: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
    /// The shares, at slots that stay put while a request holds seats of the share or waits
    /// for them; None: free for the next APIService.
    shares: Vec<Option<Share>>,
    /// The slot of the share found last.
    last_share: usize,
    /// Waiting requests of no APIService.
    unshared_waiting: usize,
}

/// One APIService's part of the level.
struct Share {
    name: Arc<str>,
    /// Seats its executing requests hold.
    held: usize,
    /// Its waiting requests.
    waiting: usize,
}

/// A request executing (or about to): what the dump shows, and what it gives back.
struct Running {
    queue: Option<usize>,
    share: Option<usize>,
    tag: Tag,
    started: Instant,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiter>,
    /// The virtual time the queue's next request may start at.
    next: f64,
    executing: usize,
}

struct Waiter {
    id: u64,
    /// Its APIService's share.
    share: Option<usize>,
    tag: Tag,
    /// Receives the seat once dispatched: a seat sent to a request that has gone is dropped
    /// with the channel, and so given back.
    tx: oneshot::Sender<Seat>,
}

/// A request running on the level: its seat, given back by [`Seat::release`] or when
/// dropped.
pub struct Seat {
    set: Arc<QueueSet>,
    slot: usize,
    queue: Option<usize>,
    share: Option<usize>,
    given_back: bool,
}

impl Seat {
    /// Gives the seat back; the level's demand changes at `now`.
    pub fn release(mut self, now: Instant) {
        self.give_back(now);
    }

    fn give_back(&mut self, now: Instant) {
        self.given_back = true;
        let unwanted = {
            let mut st = self.set.lock();
            st.executing = st.executing.saturating_sub(1);
            if let Some(running) = st.running.get_mut(self.slot) {
                *running = None;
                st.free.push(self.slot);
            }
            if let Some(q) = self.queue.and_then(|q| st.queues.get_mut(q)) {
                q.executing = q.executing.saturating_sub(1);
            }
            if let Some(share) = st.share_mut(self.share) {
                share.held = share.held.saturating_sub(1);
            }
            let unwanted = match st.waiting {
                0 => Vec::new(),
                _ => self.set.dispatch(&mut st),
            };
            st.note_demand(now);
            unwanted
        };
        // Seats their requests no longer wanted: given back, outside the lock.
        drop(unwanted);
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if !self.given_back {
            self.give_back(Instant::now());
        }
    }
}

/// What became of a new request as it arrived.
enum Start {
    Run(Seat),
    /// Queued: wait on `rx`; if it never fires within the wait limit, [`QueueSet::cancel`].
    Queued {
        id: u64,
        queue: usize,
        rx: oneshot::Receiver<Seat>,
    },
    Rejected(Reason),
}

/// A snapshot of a level for the debug dump.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub active_queues: usize,
    pub waiting: usize,
    pub executing: usize,
    pub seats_in_use: usize,
    pub dispatched: u64,
    pub rejected: u64,
    /// Per queue: (waiting, executing, virtual next dispatch).
    pub queues: Vec<(usize, usize, f64)>,
}

impl State {
    /// Records the seat demand after a change at `now`: seats held and seats waited for.
    fn note_demand(&mut self, now: Instant) {
        let demand = self.executing + self.waiting;
        self.demand.set(demand, now);
    }

    /// The slot of `apiservice`'s share, made when it has none. The slot found last is
    /// tried first: a level's requests mostly go to the same APIService as the one before,
    /// and so need no hashing of its name.
    fn share_slot(&mut self, apiservice: &str) -> usize {
        let last = self.last_share;
        let known = match self.shares.get(last) {
            Some(Some(share)) if *share.name == *apiservice => Some(last),
            _ => self.share_of.get(apiservice).copied(),
        };
        let at = match known {
            Some(at) => at,
            None => {
                let at = self.shares.iter().position(Option::is_none);
                let at = at.unwrap_or_else(|| {
                    self.shares.push(None);
                    self.shares.len() - 1
                });
                self.share_of.insert(apiservice.into(), at);
                at
            }
        };
        self.last_share = at;
        self.shares[at].get_or_insert_with(|| Share {
            name: apiservice.into(),
            held: 0,
            waiting: 0,
        });
        at
    }

    fn share_mut(&mut self, at: Option<usize>) -> Option<&mut Share> {
        self.shares.get_mut(at?)?.as_mut()
    }

    /// Whether the level has a seat free (a level of none runs one request at a time).
    fn fits(&self) -> bool {
        self.executing < self.limit.max(1)
    }

    /// Whether a request of share `at` may take a seat as far as its share is concerned:
    /// within the share's `cap` (a share of none runs one request at a time), or past it while
    /// no other party's request that could start waits and, after it, the reserve stays free.
    fn share_allows(&self, at: Option<usize>, cap: usize) -> bool {
        let Some(share) = at.and_then(|at| self.shares.get(at)?.as_ref()) else {
            return true;
        };
        if share.held < cap.max(1) {
            return true;
        }
        let reserve = self.limit.saturating_sub(cap) / 2;
        self.executing + 1 + reserve <= self.limit && !self.others_could_start(at, cap)
    }

    /// Whether a request of another party than share `me` waits and could start as far as
    /// its own share is concerned: one of no APIService, or of an APIService within its share.
    fn others_could_start(&self, me: Option<usize>, cap: usize) -> bool {
        self.unshared_waiting > 0
            || self.shares.iter().enumerate().any(|(at, share)| {
                Some(at) != me
                    && share
                        .as_ref()
                        .is_some_and(|s| s.waiting > 0 && s.held < cap)
            })
    }

    /// Whether a request of share `at` may start now.
    fn may_start(&self, at: Option<usize>, cap: usize) -> bool {
        self.fits() && self.share_allows(at, cap)
    }

    /// Counts one more (or, `waits` false, one fewer) request waiting for share `at`.
    fn count_waiting(&mut self, at: Option<usize>, waits: bool) {
        let count = |n: &mut usize| {
            *n = match waits {
                true => *n + 1,
                false => n.saturating_sub(1),
            }
        };
        count(&mut self.waiting);
        match self.share_mut(at) {
            Some(share) => count(&mut share.waiting),
            None => count(&mut self.unshared_waiting),
        }
    }
}

impl QueueSet {
    /// A level of `limit` seats, of which one APIService's requests may hold `share_cap`.
    pub fn new(mode: Mode, limit: usize, share_cap: Option<usize>) -> Arc<Self> {
        let queues = match mode {
            Mode::Queue { queues, .. } => (0..queues).map(|_| Queue::default()).collect(),
            _ => Vec::new(),
        };
        Arc::new(Self {
            mode,
            share_cap,
            state: Mutex::new(State {
                limit,
                waiting: 0,
                demand: Demand::new(Instant::now()),
                executing: 0,
                running: Vec::new(),
                free: Vec::new(),
                queues,
                robin: 0,
                enqueues: 0,
                now: 0.0,
                next_id: 0,
                dispatched: 0,
                rejected: 0,
                share_of: HashMap::default(),
                shares: Vec::new(),
                last_share: 0,
                unshared_waiting: 0,
            }),
        })
    }

    /// The level's concurrency limit in force.
    pub fn limit(&self) -> usize {
        self.lock().limit
    }

    /// Sets the level's concurrency limit (borrowing moved it), dispatching what now fits.
    pub fn set_limit(self: &Arc<Self>, limit: usize) {
        let unwanted = {
            let mut st = self.lock();
            st.limit = limit;
            self.dispatch(&mut st)
        };
        drop(unwanted);
    }

    /// Forgets the shares of the APIServices none of whose requests holds or waits for one
    /// of their seats.
    pub fn prune_shares(&self) {
        let mut st = self.lock();
        let st = &mut *st;
        for slot in &mut st.shares {
            if slot.as_ref().is_some_and(|s| s.held == 0 && s.waiting == 0) {
                if let Some(gone) = slot.take() {
                    st.share_of.remove(&gone.name);
                }
            }
        }
    }

    /// The seat demand since the last call, which starts a new period.
    pub fn observe(&self) -> Observed {
        self.lock().demand.reset(Instant::now())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a request of flow `hash`, for `apiservice`'s backend if any, that arrived at
    /// `tag.arrived`: a seat at once, or after its turn in a queue, or the [`Reason`] it got
    /// none by `deadline`. Either way, whether it waited in a queue; `waiting` counts it while
    /// it does. The one way in: everything from arrival to a seat or a refusal is here.
    pub async fn acquire(
        self: &Arc<Self>,
        hash: u64,
        tag: Tag,
        deadline: Instant,
        apiservice: Option<&str>,
        waiting: &prometheus::IntGauge,
    ) -> Result<(Seat, bool), (Reason, bool)> {
        let arrived = tag.arrived;
        match self.start(hash, tag, arrived, apiservice) {
            Start::Run(seat) => Ok((seat, false)),
            Start::Rejected(reason) => Err((reason, false)),
            Start::Queued { id, queue, rx } => {
                waiting.inc();
                let waited = tokio::time::timeout_at(deadline.into(), rx).await;
                waiting.dec();
                match waited {
                    Ok(Ok(seat)) => Ok((seat, true)),
                    // Not dispatched by the deadline: out of the queue, refused for its
                    // APIService's share when the level had the seats.
                    _ => Err((self.cancel(queue, id).unwrap_or(Reason::TimeOut), true)),
                }
            }
        }
    }

    /// Starts a request of flow `hash` (one seat), for `apiservice`'s backend if any; the
    /// level's demand changes at `now` (the request's arrival).
    fn start(
        self: &Arc<Self>,
        hash: u64,
        tag: Tag,
        now: Instant,
        apiservice: Option<&str>,
    ) -> Start {
        let mut st = self.lock();
        let share = match (self.share_cap, apiservice) {
            (Some(_), Some(name)) => Some(st.share_slot(name)),
            _ => None,
        };
        // Without a wait, it starts as it arrives.
        let running = Running {
            queue: None,
            share,
            started: tag.arrived,
            tag,
        };
        let (started, unwanted) = self.start_locked(&mut st, hash, running, now);
        drop(st);
        // Seats their requests no longer wanted: given back, outside the lock.
        drop(unwanted);
        let Start::Queued { id, queue, mut rx } = started else {
            return started;
        };
        // Through its queue, as upstream: dispatched at once when a seat was free.
        match rx.try_recv() {
            Ok(seat) => Start::Run(seat),
            Err(_) => Start::Queued { id, queue, rx },
        }
    }

    /// The seats one APIService's requests may hold (no cap: all).
    fn cap(&self) -> usize {
        self.share_cap.unwrap_or(usize::MAX)
    }

    /// [`QueueSet::start`] under the lock; also the seats dispatched to requests that have
    /// gone, to be given back once the lock is released.
    fn start_locked(
        self: &Arc<Self>,
        st: &mut State,
        hash: u64,
        running: Running,
        now: Instant,
    ) -> (Start, Vec<Seat>) {
        let (share, cap) = (running.share, self.cap());
        let start = match self.mode {
            Mode::Exempt => Start::Run(self.run(st, running, now)),
            Mode::Reject if st.may_start(share, cap) => Start::Run(self.run(st, running, now)),
            Mode::Reject => {
                st.rejected += 1;
                Start::Rejected(match st.fits() {
                    true => Reason::ApiServiceLimit,
                    false => Reason::ConcurrencyLimit,
                })
            }
            Mode::Queue {
                queues,
                hand_size,
                queue_length_limit,
            } => {
                let Some(chosen) = Self::choose(st, hash, queues, hand_size) else {
                    st.rejected += 1;
                    return (Start::Rejected(Reason::QueueFull), Vec::new());
                };
                let may_start = st.waiting == 0 && st.may_start(share, cap);
                if !may_start && st.queues[chosen].waiting.len() >= queue_length_limit {
                    st.rejected += 1;
                    return (Start::Rejected(Reason::QueueFull), Vec::new());
                }
                let virtual_now = st.now;
                let q = &mut st.queues[chosen];
                if q.waiting.is_empty() && q.executing == 0 {
                    // An idle queue starts at the present, not with credit from its past.
                    q.next = q.next.max(virtual_now);
                }
                if may_start {
                    // Nothing waits and it may start: dispatch would pick this request from
                    // its queue at once; do so without the round trip.
                    let seat = self.begin(st, chosen, running, now);
                    st.note_demand(now);
                    return (Start::Run(seat), Vec::new());
                }
                let (tx, rx) = oneshot::channel();
                st.next_id += 1;
                let id = st.next_id;
                st.queues[chosen].waiting.push_back(Waiter {
                    id,
                    share,
                    tag: running.tag,
                    tx,
                });
                st.count_waiting(share, true);
                let unwanted = self.dispatch(st);
                st.note_demand(now);
                let queued = Start::Queued {
                    id,
                    queue: chosen,
                    rx,
                };
                return (queued, unwanted);
            }
        };
        (start, Vec::new())
    }

    /// The queue of flow `hash`'s hand with the least waiting work, the search starting at a
    /// place in the hand that moves with every request; None for an empty hand.
    fn choose(st: &mut State, hash: u64, queues: usize, hand_size: usize) -> Option<usize> {
        let len = hand_len(queues, hand_size);
        if len == 0 {
            return None;
        }
        let offset = st.enqueues % len;
        st.enqueues = st.enqueues.wrapping_add(1);
        if st.waiting == 0 {
            // Nothing waits: every queue has the same (no) waiting work, so the search ends
            // where it starts, and the hand need only be dealt that far.
            return card(hash, queues, offset).map(usize::from);
        }
        let hand = deal(hash, queues, hand_size);
        let hand = hand.as_slice();
        let in_order = hand[offset..].iter().chain(&hand[..offset]);
        let work = |q: usize| -> usize { st.queues[q].waiting.len() };
        // The first of the least, as a strict comparison in search order keeps it.
        in_order.map(|&q| usize::from(q)).min_by_key(|&q| work(q))
    }

    /// Takes a waiter out of its queue (its wait ended): why it never started, its
    /// APIService's share when the level had its seats; None when it was dispatched first.
    fn cancel(self: &Arc<Self>, queue: usize, id: u64) -> Option<Reason> {
        let (reason, unwanted) = {
            let mut st = self.lock();
            let q = st.queues.get_mut(queue)?;
            let at = q.waiting.iter().position(|w| w.id == id)?;
            let waiter = q.waiting.remove(at)?;
            let reason = match st.fits() {
                true => Reason::ApiServiceLimit,
                false => Reason::TimeOut,
            };
            st.count_waiting(waiter.share, false);
            st.rejected += 1;
            // Its going may let another APIService borrow past its share.
            let unwanted = self.dispatch(&mut st);
            st.note_demand(Instant::now());
            (reason, unwanted)
        };
        drop(unwanted);
        Some(reason)
    }

    fn run(self: &Arc<Self>, st: &mut State, running: Running, now: Instant) -> Seat {
        let (queue, share) = (running.queue, running.share);
        if let Some(held) = st.share_mut(share) {
            held.held += 1;
        }
        st.executing += 1;
        st.dispatched += 1;
        let slot = match st.free.pop() {
            Some(slot) => {
                st.running[slot] = Some(running);
                slot
            }
            None => {
                st.running.push(Some(running));
                st.running.len() - 1
            }
        };
        if queue.is_none() {
            st.note_demand(now);
        }
        Seat {
            set: self.clone(),
            slot,
            queue,
            share,
            given_back: false,
        }
    }

    /// Dispatches waiting requests while seats are free: each time, of the queues whose head
    /// may start as far as its APIService's share is concerned, the one with the earliest
    /// virtual finish, round-robin on ties.
    /// Returns the seats of waiters that had gone, to be dropped once the lock is released.
    #[must_use]
    fn dispatch(self: &Arc<Self>, st: &mut State) -> Vec<Seat> {
        let mut unwanted = Vec::new();
        let cap = self.cap();
        loop {
            if st.waiting == 0 {
                return unwanted;
            }
            let n = st.queues.len();
            let mut best: Option<(usize, f64)> = None;
            for i in 1..=n {
                let q = (st.robin + i) % n;
                let queue = &st.queues[q];
                let Some(head) = queue.waiting.front() else {
                    continue;
                };
                if !st.share_allows(head.share, cap) {
                    continue;
                }
                let finish = queue.next + SERVICE;
                if best.is_none_or(|(_, f)| finish < f) {
                    best = Some((q, finish));
                }
            }
            let Some((q, _)) = best else {
                return unwanted;
            };
            if !st.fits() {
                return unwanted;
            }
            let Some(waiter) = st.queues[q].waiting.pop_front() else {
                return unwanted;
            };
            st.count_waiting(waiter.share, false);
            let now = Instant::now();
            let running = Running {
                queue: None,
                share: waiter.share,
                tag: waiter.tag,
                started: now,
            };
            let seat = self.begin(st, q, running, now);
            if let Err(seat) = waiter.tx.send(seat) {
                unwanted.push(seat);
            }
        }
    }

    /// Starts a request from queue `q`: the queue's virtual time advances by its work.
    fn begin(self: &Arc<Self>, st: &mut State, q: usize, running: Running, now: Instant) -> Seat {
        st.robin = q;
        let start = st.queues[q].next;
        st.now = st.now.max(start);
        st.queues[q].next = start + SERVICE;
        st.queues[q].executing += 1;
        let running = Running {
            queue: Some(q),
            ..running
        };
        self.run(st, running, now)
    }

    /// Every waiting and executing request, for `dump_requests`: by queue, the waiting ones
    /// in order, then the executing ones; last those that ran without a queue.
    pub fn requests(&self) -> Vec<Dumped> {
        let st = self.lock();
        let mut out = Vec::new();
        let executing = |queue: Option<usize>| {
            st.running
                .iter()
                .flatten()
                .filter(move |r| r.queue == queue)
                .map(move |r| Dumped {
                    queue: queue.map_or(-1, |q| q as i64),
                    index: -1,
                    tag: r.tag.clone(),
                    started: Some(r.started),
                })
        };
        for (i, q) in st.queues.iter().enumerate() {
            for (at, w) in q.waiting.iter().enumerate() {
                out.push(Dumped {
                    queue: i as i64,
                    index: at as i64,
                    tag: w.tag.clone(),
                    started: None,
                });
            }
            out.extend(executing(Some(i)));
        }
        out.extend(executing(None));
        out
    }

    /// The level's state, for the debug dumps.
    pub fn snapshot(&self) -> Snapshot {
        let st = self.lock();
        Snapshot {
            active_queues: st.queues.iter().filter(|q| !q.waiting.is_empty()).count(),
            waiting: st.queues.iter().map(|q| q.waiting.len()).sum(),
            executing: st.executing,
            seats_in_use: st.executing,
            dispatched: st.dispatched,
            rejected: st.rejected,
            queues: st
                .queues
                .iter()
                .map(|q| (q.waiting.len(), q.executing, q.next))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag() -> Tag {
        Tag {
            schema: 0,
            distinguisher: None,
            user: "alice".into(),
            attrs: Arc::new(Attributes::from_request(
                &http::Method::GET,
                "/healthz",
                None,
            )),
            arrived: Instant::now(),
        }
    }

    /// A request of flow `hash` for no APIService.
    fn start(set: &Arc<QueueSet>, hash: u64) -> Start {
        set.start(hash, tag(), Instant::now(), None)
    }

    /// A request of flow `hash` for `apiservice`.
    fn start_for(set: &Arc<QueueSet>, hash: u64, apiservice: &str) -> Start {
        set.start(hash, tag(), Instant::now(), Some(apiservice))
    }

    fn queue_mode(queues: usize, hand_size: usize, queue_length_limit: usize) -> Mode {
        Mode::Queue {
            queues,
            hand_size,
            queue_length_limit,
        }
    }

    fn run(started: Start) -> Seat {
        match started {
            Start::Run(seat) => seat,
            _ => panic!("did not start at once"),
        }
    }

    fn queued(started: Start) -> (u64, usize, oneshot::Receiver<Seat>) {
        match started {
            Start::Queued { id, queue, rx } => (id, queue, rx),
            _ => panic!("did not queue"),
        }
    }

    /// `acquire` is the whole admission: a queued request that a seat reaches in time runs,
    /// one that none reaches is out of its queue at its deadline; both count as waiting only
    /// while they wait.
    #[tokio::test]
    async fn acquire_waits_its_turn_until_the_deadline() {
        let set = QueueSet::new(queue_mode(4, 1, 4), 1, None);
        let waiting = prometheus::IntGauge::new("waiting", "waiting").unwrap();
        let soon = || Instant::now() + std::time::Duration::from_millis(50);
        let (held, queued) = set.acquire(1, tag(), soon(), None, &waiting).await.unwrap();
        assert!(!queued, "a free seat is taken at once");
        let refused = set.acquire(2, tag(), soon(), None, &waiting).await;
        assert!(matches!(refused, Err((Reason::TimeOut, true))));
        assert_eq!((waiting.get(), set.snapshot().waiting), (0, 0));

        let later = Instant::now() + std::time::Duration::from_secs(30);
        let release = async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            held.release(Instant::now());
        };
        let (admitted, ()) = tokio::join!(set.acquire(3, tag(), later, None, &waiting), release);
        let (_seat, queued) = admitted.unwrap();
        assert!(queued, "it waited for the released seat");
        assert_eq!(waiting.get(), 0);
    }

    #[test]
    fn exempt_and_reject_levels() {
        let exempt = QueueSet::new(Mode::Exempt, 0, None);
        let seats: Vec<_> = (0..100)
            .map(|_| match start(&exempt, 1) {
                Start::Run(s) => s,
                _ => panic!("an exempt level never waits"),
            })
            .collect();
        assert_eq!(exempt.snapshot().executing, 100);
        drop(seats);
        let reject = QueueSet::new(Mode::Reject, 2, None);
        let a = start(&reject, 1);
        let b = start(&reject, 2);
        assert!(matches!(
            start(&reject, 3),
            Start::Rejected(Reason::ConcurrencyLimit)
        ));
        drop(a);
        assert!(matches!(start(&reject, 3), Start::Run(_)));
        drop(b);
    }

    /// With one seat, a flow that queued many requests and a flow that queued one: the second
    /// flow's request is served next, not after all of the first's.
    #[tokio::test]
    async fn fair_queuing_serves_the_quiet_flow_before_the_noisy_ones_backlog() {
        let set = QueueSet::new(queue_mode(8, 1, 3), 1, None);
        let Start::Run(first) = start(&set, 0) else {
            panic!("a free seat runs at once")
        };
        // The noisy flow (hash 0 → queue 0) queues three; then the quiet flow (hash 5).
        let mut noisy = Vec::new();
        for _ in 0..3 {
            match start(&set, 0) {
                Start::Queued { rx, queue, .. } => noisy.push((rx, queue)),
                _ => panic!("queued"),
            }
        }
        let Start::Queued { mut rx, queue, .. } = start(&set, 5) else {
            panic!("queued")
        };
        assert_ne!(queue, noisy[0].1, "the flows are in different queues");
        drop(first);
        // The seat went to the head of the noisy queue or to the quiet one; after at most one
        // more release, the quiet request runs.
        if rx.try_recv().is_err() {
            let (mut head, _) = noisy.remove(0);
            let seat = head.try_recv().expect("the noisy head ran");
            drop(seat);
            assert!(
                rx.try_recv().is_ok(),
                "the quiet flow waited behind the backlog"
            );
        }
    }

    #[test]
    fn a_full_queue_refuses_only_when_every_seat_is_taken() {
        let set = QueueSet::new(queue_mode(1, 1, 3), 1, None);
        let Start::Run(_running) = start(&set, 0) else {
            panic!("a free seat runs at once")
        };
        let mut waiting = Vec::new();
        for _ in 0..3 {
            waiting.push(start(&set, 0));
        }
        assert!(matches!(start(&set, 0), Start::Rejected(Reason::QueueFull)));
        // A waiter that gives up leaves room.
        if let Some(Start::Queued { id, queue, .. }) = waiting.pop() {
            assert_eq!(set.cancel(queue, id), Some(Reason::TimeOut));
        }
        assert!(matches!(start(&set, 0), Start::Queued { .. }));
    }

    /// Past its share, an APIService's requests wait in their queues, and fair queuing picks
    /// among them: a quiet flow goes before a noisy flow's backlog, instead of behind it.
    #[test]
    fn past_its_share_a_quiet_flow_goes_before_a_noisy_backlog() {
        // 4 seats, a share of 2, a reserve of 1: alone, "a" may hold 3.
        let set = QueueSet::new(queue_mode(8, 1, 10), 4, Some(2));
        let noisy: Vec<Seat> = (0..3).map(|_| run(start_for(&set, 0, "a"))).collect();
        let backlog: Vec<_> = (0..5).map(|_| queued(start_for(&set, 0, "a"))).collect();
        let (_, quiet_queue, mut quiet) = queued(start_for(&set, 5, "a"));
        assert_ne!(
            quiet_queue, backlog[0].1,
            "the flows are in different queues"
        );
        assert_eq!(set.snapshot().seats_in_use, 3, "the reserve stays free");
        let mut noisy = noisy.into_iter();
        drop(noisy.next());
        let went = quiet.try_recv();
        assert!(went.is_ok(), "the quiet flow went first");
        assert_eq!(set.snapshot().seats_in_use, 3);
        assert_eq!(set.snapshot().waiting, 5, "the backlog still waits");
    }

    /// Alone on its level, an APIService borrows past its share all but the reserve; a
    /// request that then times out is refused for the share, the level having had the seats.
    #[test]
    fn alone_an_apiservice_uses_all_but_the_reserve() {
        // 10 seats, a share of 5, a reserve of (10 - 5) / 2 = 2.
        let set = QueueSet::new(queue_mode(8, 1, 10), 10, Some(5));
        let running: Vec<Seat> = (0..8).map(|_| run(start_for(&set, 1, "a"))).collect();
        let (id, queue, _rx) = queued(start_for(&set, 1, "a"));
        assert_eq!(set.cancel(queue, id), Some(Reason::ApiServiceLimit));
        // Requests of no APIService, and of another within its share, take the reserve.
        let other = run(start(&set, 2));
        let b = run(start_for(&set, 3, "b"));
        assert_eq!(set.snapshot().seats_in_use, 10);
        drop((running, other, b));
        // Without a share, nothing is kept back.
        let uncapped = QueueSet::new(queue_mode(8, 1, 10), 10, None);
        let all: Vec<Seat> = (0..10).map(|_| run(start_for(&uncapped, 1, "a"))).collect();
        assert_eq!(all.len(), 10);
    }

    /// Two backends: "s" hangs and holds what it borrowed; "f" still starts at once on the
    /// reserve, and while one of f's requests waits, s starts no more; seats given back go
    /// to f, and among f's flows, the quiet one goes before the noisy one's backlog.
    #[test]
    fn a_stalled_backend_never_takes_the_seats_another_starts_with() {
        let set = QueueSet::new(queue_mode(16, 1, 10), 10, Some(5));
        let _stalled: Vec<Seat> = (0..8).map(|_| run(start_for(&set, 1, "s"))).collect();
        let (_, _, mut s_more) = queued(start_for(&set, 1, "s"));
        let f1 = run(start_for(&set, 2, "f"));
        let _f2 = run(start_for(&set, 2, "f"));
        let f_noisy: Vec<_> = (0..3).map(|_| queued(start_for(&set, 2, "f"))).collect();
        let (_, quiet_queue, mut f_quiet) = queued(start_for(&set, 9, "f"));
        assert_ne!(
            quiet_queue, f_noisy[0].1,
            "the flows are in different queues"
        );
        drop(f1);
        assert!(
            s_more.try_recv().is_err(),
            "the stalled backend took f's seat"
        );
        let went = f_quiet.try_recv();
        assert!(went.is_ok(), "f's quiet flow went first");
        assert_eq!(set.snapshot().waiting, 4, "s's one and f's noisy three");
    }

    /// A level that rejects instead of queuing refuses a request past what its APIService
    /// may hold (4 seats, a share of 1, a reserve of 1), saying so, while the others' requests
    /// run.
    #[test]
    fn a_reject_level_refuses_past_the_share() {
        let set = QueueSet::new(Mode::Reject, 4, Some(1));
        let _a: Vec<Seat> = (0..3).map(|_| run(start_for(&set, 1, "a"))).collect();
        assert!(matches!(
            start_for(&set, 1, "a"),
            Start::Rejected(Reason::ApiServiceLimit)
        ));
        let _b = run(start_for(&set, 1, "b"));
        set.prune_shares();
        assert_eq!(set.lock().share_of.len(), 2, "held shares are kept");
    }
}
