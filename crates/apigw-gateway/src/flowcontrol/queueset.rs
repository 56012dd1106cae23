//! One priority level's seats and queues, as k8s.io/apiserver's queueset runs them: an exempt
//! level never waits; a `Reject` level runs a request when a seat is free and refuses it
//! otherwise; a queuing level deals each flow a hand of queues (shuffle sharding), puts the
//! request in the hand's queue with the least waiting work, refuses it only when every seat is
//! taken and that queue is full, and dispatches from the queues by fair queuing: the non-empty
//! queue with the earliest virtual finish time goes next (round-robin on ties), each request
//! costing its seats times a nominal 3 ms of virtual time, so a flow that sends more waits
//! longer and the others do not. The level's limit moves as it borrows and lends seats
//! ([`super::borrowing`]); its seat demand is integrated here, where it changes. Beyond
//! upstream, one APIService's requests may hold only `share_cap` of the level's seats: the
//! others wait outside the queues, first come first served: a seat of theirs given back is
//! handed to the longest waiter, whom a request arriving meanwhile cannot overtake.

use super::borrowing::{Demand, Observed};
use super::classify::{card, deal, hand_len};
use crate::authz::Attributes;
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
    pub seats: usize,
    pub tag: Tag,
    pub started: Option<Instant>,
}

struct State {
    /// Seats: the level's concurrency limit, as borrowing last set it.
    limit: usize,
    seats_in_use: usize,
    /// Seats the waiting requests need.
    waiting_seats: usize,
    demand: Demand,
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
    /// The shares, at slots that stay put while a request holds or waits for the share;
    /// None: free for the next APIService.
    shares: Vec<Option<Share>>,
    /// The slot of the share found last.
    last_share: usize,
    /// Share waits so far: each one's id.
    next_share_wait: u64,
}

/// One APIService's share of the level.
struct Share {
    name: Arc<str>,
    /// Seats its requests hold: queued requests' included, and those handed to a waiter.
    held: usize,
    /// Its requests waiting for some of those seats, the longest waiting first.
    waiters: VecDeque<ShareWaiter>,
}

impl Share {
    /// Whether `seats` more fit under `cap` (a request wider than the cap runs alone).
    fn fits(&self, seats: usize, cap: usize) -> bool {
        self.held + seats <= cap || self.held == 0
    }
}

/// A request waiting for seats of its APIService's share.
struct ShareWaiter {
    id: u64,
    seats: usize,
    /// Told when the seats are handed to it: they are then held on its behalf.
    tx: oneshot::Sender<()>,
}

/// A request executing (or about to): what the dump shows, and what it gives back.
struct Running {
    queue: Option<usize>,
    seats: usize,
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
    seats: usize,
    /// Its APIService's share, which it holds already.
    share: Option<usize>,
    tag: Tag,
    /// Receives the seat once dispatched: a seat sent to a request that has gone is dropped
    /// with the channel, and so given back.
    tx: oneshot::Sender<Seat>,
}

/// A request running on the level: its seats, given back by [`Seat::release`] or when
/// dropped.
pub struct Seat {
    set: Arc<QueueSet>,
    slot: usize,
    queue: Option<usize>,
    seats: usize,
    share: Option<usize>,
    given_back: bool,
}

impl Seat {
    /// Gives the seats back; the level's demand changes at `now`.
    pub fn release(mut self, now: Instant) {
        self.give_back(now);
    }

    fn give_back(&mut self, now: Instant) {
        self.given_back = true;
        let unwanted = {
            let mut st = self.set.lock();
            st.seats_in_use = st.seats_in_use.saturating_sub(self.seats);
            st.executing = st.executing.saturating_sub(1);
            if let Some(running) = st.running.get_mut(self.slot) {
                *running = None;
                st.free.push(self.slot);
            }
            if let Some(q) = self.queue.and_then(|q| st.queues.get_mut(q)) {
                q.executing = q.executing.saturating_sub(1);
            }
            st.give_share_back(self.share, self.seats, self.set.cap());
            let unwanted = match st.waiting_seats {
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

/// What became of a new request.
pub enum Start {
    Run(Seat),
    /// Queued: wait on `rx`; if it never fires within the wait limit, [`QueueSet::cancel`].
    Queued {
        id: u64,
        queue: usize,
        rx: oneshot::Receiver<Seat>,
    },
    Rejected(Reason),
}

/// A request whose APIService's requests hold their share of the level: it starts with
/// [`QueueSet::start_handed`] once `wait` ends well.
pub struct ShareHeld {
    pub tag: Tag,
    pub wait: ShareWait,
}

/// A request in line for seats of its APIService's share. It joined the line before the
/// level's lock was released, so no seat given back passes it by; seats handed to it that it
/// does not use (it gave up, or went) go to the next in line.
pub struct ShareWait {
    set: Arc<QueueSet>,
    share: usize,
    id: u64,
    seats: usize,
    rx: oneshot::Receiver<()>,
    /// Whether it was told that the seats are its own.
    handed: bool,
    /// Whether a request started with them.
    used: bool,
}

impl ShareWait {
    /// Waits until the share's seats are handed to it (true) or `deadline` passes (false).
    pub async fn until(&mut self, deadline: tokio::time::Instant) -> bool {
        // Its answer came already: a finished channel is not waited on again.
        if self.rx.is_terminated() {
            return self.handed;
        }
        let told = tokio::time::timeout_at(deadline, &mut self.rx).await;
        self.handed = matches!(told, Ok(Ok(())));
        self.handed
    }
}

impl Drop for ShareWait {
    fn drop(&mut self) {
        if self.used {
            return;
        }
        let cap = self.set.cap();
        let mut st = self.set.lock();
        if !self.handed {
            if let Some(Some(share)) = st.shares.get_mut(self.share) {
                if let Some(at) = share.waiters.iter().position(|w| w.id == self.id) {
                    share.waiters.remove(at);
                    return;
                }
            }
            // Out of the line: handed its seats after it stopped waiting, or not at all.
            if self.rx.try_recv().is_err() {
                return;
            }
        }
        // Its seats, unused: they go to the next in line.
        st.give_share_back(Some(self.share), self.seats, cap);
    }
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
        let demand = self.seats_in_use + self.waiting_seats;
        self.demand.set(demand, now);
    }

    /// `apiservice`'s share and its slot, made when it has none. The slot found last is
    /// tried first: a level's requests mostly go to the same APIService as the one before,
    /// and so need no hashing of its name.
    fn share_slot(&mut self, apiservice: &str) -> (usize, &mut Share) {
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
        let share = self.shares[at].get_or_insert_with(|| Share {
            name: apiservice.into(),
            held: 0,
            waiters: VecDeque::new(),
        });
        (at, share)
    }

    /// Gives `seats` of share `at` back, handing what is free of the share's `cap` to its
    /// waiters in line while the first one's seats fit (a waiter that has gone is skipped).
    fn give_share_back(&mut self, at: Option<usize>, seats: usize, cap: usize) {
        let Some(Some(share)) = at.and_then(|at| self.shares.get_mut(at)) else {
            return;
        };
        share.held = share.held.saturating_sub(seats);
        while let Some(next) = share.waiters.front() {
            if !share.fits(next.seats, cap) {
                return;
            }
            let Some(next) = share.waiters.pop_front() else {
                return;
            };
            if next.tx.send(()).is_ok() {
                share.held += next.seats;
            }
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
                seats_in_use: 0,
                waiting_seats: 0,
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
                next_share_wait: 0,
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
            if slot
                .as_ref()
                .is_some_and(|s| s.held == 0 && s.waiters.is_empty())
            {
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

    /// Starts a request of flow `hash` needing `seats`, for `apiservice`'s backend if any;
    /// the level's demand changes at `now` (the request's arrival, unless it waited before).
    pub fn start(
        self: &Arc<Self>,
        hash: u64,
        seats: usize,
        tag: Tag,
        now: Instant,
        apiservice: Option<&str>,
    ) -> Result<Start, ShareHeld> {
        let mut st = self.lock();
        let share = match (self.share_cap, apiservice) {
            (Some(cap), Some(name)) => {
                let (at, share) = st.share_slot(name);
                // Behind those in line, or beyond the cap: in line.
                if share.waiters.is_empty() && share.fits(seats, cap) {
                    share.held += seats;
                    Some(at)
                } else {
                    return Err(self.share_wait(&mut st, at, seats, tag));
                }
            }
            _ => None,
        };
        // Without a wait, it starts as it arrives.
        let running = Running {
            queue: None,
            seats,
            share,
            started: tag.arrived,
            tag,
        };
        Ok(self.start_holding(st, hash, running, now))
    }

    /// Puts a request needing `seats` in share `at`'s line.
    fn share_wait(
        self: &Arc<Self>,
        st: &mut State,
        at: usize,
        seats: usize,
        tag: Tag,
    ) -> ShareHeld {
        st.next_share_wait += 1;
        let id = st.next_share_wait;
        let (tx, rx) = oneshot::channel();
        if let Some(Some(share)) = st.shares.get_mut(at) {
            share.waiters.push_back(ShareWaiter { id, seats, tx });
        }
        let wait = ShareWait {
            set: self.clone(),
            share: at,
            id,
            seats,
            rx,
            handed: false,
            used: false,
        };
        ShareHeld { tag, wait }
    }

    /// Starts a request whose wait for its APIService's share ended with the share's seats
    /// handed to it ([`ShareWait::until`] was true); the level's demand changes at `now`.
    pub fn start_handed(
        self: &Arc<Self>,
        mut wait: ShareWait,
        hash: u64,
        tag: Tag,
        now: Instant,
    ) -> Start {
        debug_assert!(wait.handed, "started without the share's seats");
        wait.used = true;
        let running = Running {
            queue: None,
            seats: wait.seats,
            share: Some(wait.share),
            started: now,
            tag,
        };
        self.start_holding(self.lock(), hash, running, now)
    }

    /// [`QueueSet::start`] of a request that holds its share, if it has one.
    fn start_holding(
        self: &Arc<Self>,
        mut st: std::sync::MutexGuard<'_, State>,
        hash: u64,
        running: Running,
        now: Instant,
    ) -> Start {
        let (share, seats) = (running.share, running.seats);
        let (started, unwanted) = self.start_locked(&mut st, hash, running, now);
        if let Start::Rejected(_) = started {
            st.give_share_back(share, seats, self.cap());
        }
        drop(st);
        // Seats their requests no longer wanted: given back, outside the lock.
        drop(unwanted);
        let Start::Queued { id, queue, rx } = started else {
            return started;
        };
        // Through its queue, as upstream: dispatched at once when a seat was free.
        let mut rx = rx;
        match rx.try_recv() {
            Ok(seat) => Start::Run(seat),
            Err(_) => Start::Queued { id, queue, rx },
        }
    }

    /// The seats one APIService's requests may hold (no cap: all).
    fn cap(&self) -> usize {
        self.share_cap.unwrap_or(usize::MAX)
    }

    /// [`QueueSet::start`] once the request holds its share; also the seats dispatched to
    /// requests that have gone, to be given back once the lock is released.
    fn start_locked(
        self: &Arc<Self>,
        st: &mut State,
        hash: u64,
        running: Running,
        now: Instant,
    ) -> (Start, Vec<Seat>) {
        let seats = running.seats;
        let start = match self.mode {
            Mode::Exempt => Start::Run(self.run(st, running, now)),
            Mode::Reject if Self::fits(st, seats) => Start::Run(self.run(st, running, now)),
            Mode::Reject => {
                st.rejected += 1;
                Start::Rejected(Reason::ConcurrencyLimit)
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
                if st.seats_in_use >= st.limit
                    && st.queues[chosen].waiting.len() >= queue_length_limit
                {
                    st.rejected += 1;
                    return (Start::Rejected(Reason::QueueFull), Vec::new());
                }
                let virtual_now = st.now;
                let q = &mut st.queues[chosen];
                if q.waiting.is_empty() && q.executing == 0 {
                    // An idle queue starts at the present, not with credit from its past.
                    q.next = q.next.max(virtual_now);
                }
                if st.waiting_seats == 0 && Self::fits(st, seats) {
                    // Nothing waits and a seat is free: dispatch would pick this request
                    // from its queue at once; do so without the round trip.
                    let seat = self.begin(st, chosen, running, now);
                    st.note_demand(now);
                    return (Start::Run(seat), Vec::new());
                }
                let (tx, rx) = oneshot::channel();
                st.next_id += 1;
                let id = st.next_id;
                st.queues[chosen].waiting.push_back(Waiter {
                    id,
                    seats,
                    share: running.share,
                    tag: running.tag,
                    tx,
                });
                st.waiting_seats += seats;
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
        if st.waiting_seats == 0 {
            // Nothing waits: every queue has the same (no) waiting work, so the search ends
            // where it starts, and the hand need only be dealt that far.
            return card(hash, queues, offset).map(usize::from);
        }
        let hand = deal(hash, queues, hand_size);
        let hand = hand.as_slice();
        let in_order = hand[offset..].iter().chain(&hand[..offset]);
        let work = |q: usize| -> usize { st.queues[q].waiting.iter().map(|w| w.seats).sum() };
        // The first of the least, as a strict comparison in search order keeps it.
        in_order.map(|&q| usize::from(q)).min_by_key(|&q| work(q))
    }

    /// Takes a waiter out of its queue (its wait ended); false when it was dispatched first.
    pub fn cancel(&self, queue: usize, id: u64) -> bool {
        let mut st = self.lock();
        let Some(q) = st.queues.get_mut(queue) else {
            return false;
        };
        let Some(at) = q.waiting.iter().position(|w| w.id == id) else {
            return false;
        };
        let Some(waiter) = q.waiting.remove(at) else {
            return false;
        };
        st.waiting_seats = st.waiting_seats.saturating_sub(waiter.seats);
        st.give_share_back(waiter.share, waiter.seats, self.cap());
        st.rejected += 1;
        st.note_demand(Instant::now());
        true
    }

    fn fits(st: &State, seats: usize) -> bool {
        // A request wider than the whole level runs alone.
        if seats > st.limit {
            return st.executing == 0;
        }
        st.seats_in_use + seats <= st.limit
    }

    fn run(self: &Arc<Self>, st: &mut State, running: Running, now: Instant) -> Seat {
        let (queue, seats, share) = (running.queue, running.seats, running.share);
        st.seats_in_use += seats;
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
            seats,
            share,
            given_back: false,
        }
    }

    /// Dispatches waiting requests while seats are free: each time, the head of the
    /// non-empty queue with the earliest virtual finish, round-robin on ties.
    /// Returns the seats of waiters that had gone, to be dropped once the lock is released.
    #[must_use]
    fn dispatch(self: &Arc<Self>, st: &mut State) -> Vec<Seat> {
        let mut unwanted = Vec::new();
        loop {
            if st.waiting_seats == 0 {
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
                let finish = queue.next + head.seats as f64 * SERVICE;
                if best.is_none_or(|(_, f)| finish < f) {
                    best = Some((q, finish));
                }
            }
            let Some((q, _)) = best else {
                return unwanted;
            };
            let seats = st.queues[q].waiting.front().map_or(1, |w| w.seats);
            if !Self::fits(st, seats) {
                return unwanted;
            }
            let Some(waiter) = st.queues[q].waiting.pop_front() else {
                return unwanted;
            };
            st.waiting_seats = st.waiting_seats.saturating_sub(seats);
            let now = Instant::now();
            let running = Running {
                queue: None,
                seats,
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
        st.queues[q].next = start + running.seats as f64 * SERVICE;
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
                    seats: r.seats,
                    tag: r.tag.clone(),
                    started: Some(r.started),
                })
        };
        for (i, q) in st.queues.iter().enumerate() {
            for (at, w) in q.waiting.iter().enumerate() {
                out.push(Dumped {
                    queue: i as i64,
                    index: at as i64,
                    seats: w.seats,
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
            seats_in_use: st.seats_in_use,
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
        match set.start(hash, 1, tag(), Instant::now(), None) {
            Ok(started) => started,
            Err(_) => panic!("no APIService, no share"),
        }
    }

    fn queue_mode(queues: usize, hand_size: usize, limit: usize) -> Mode {
        let _ = limit;
        Mode::Queue {
            queues,
            hand_size,
            queue_length_limit: 3,
        }
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
        let set = QueueSet::new(queue_mode(8, 1, 1), 1, None);
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
        let set = QueueSet::new(queue_mode(1, 1, 1), 1, None);
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
            assert!(set.cancel(queue, id));
        }
        assert!(matches!(start(&set, 0), Start::Queued { .. }));
    }

    /// A share's seats go to its waiters first come first served: a seat given back is
    /// handed to the longest waiter, and a request arriving meanwhile waits behind it. A
    /// waiter that gives up leaves the line; one handed a seat it does not use passes it to
    /// the next; one past its deadline gets none, and gives back a seat handed to it before it
    /// was dropped. Other APIServices' requests run meanwhile.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shares_seats_go_to_its_waiters_in_order() {
        let set = QueueSet::new(queue_mode(8, 2, 10), 10, Some(1));
        let started = |service: &str| set.start(1, 1, tag(), Instant::now(), Some(service));
        let later = || tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        let share = |set: &QueueSet| {
            let st = set.lock();
            let at = st.share_of.get("a").copied().unwrap_or(usize::MAX);
            st.shares
                .get(at)
                .and_then(Option::as_ref)
                .map(|s| (s.held, s.waiters.len()))
        };
        let run = |started: Start| match started {
            Start::Run(seat) => seat,
            _ => panic!("a free level seat runs at once"),
        };
        // Waits in line; ends with whether it was handed the seats, and the wait.
        let in_line = |started: Result<Start, ShareHeld>| match started {
            Err(ShareHeld { mut wait, tag }) => tokio::spawn(async move {
                let handed = wait.until(later()).await;
                (handed, wait, tag)
            }),
            Ok(_) => panic!("the share is held"),
        };
        let first = run(started("a").unwrap_or_else(|_| panic!("a free share")));
        let mut b = in_line(started("a"));
        let c = in_line(started("a"));
        assert_eq!(share(&set), Some((1, 2)));
        let other = started("b").map(run);
        assert!(other.is_ok(), "another APIService's request runs");
        drop(other);

        // The seat given back goes to b, the first in line: it stays held, for b.
        drop(first);
        let (handed, mut wait, tag) = (&mut b).await.expect("b's wait");
        assert!(handed, "b was handed the seat");
        assert!(wait.until(later()).await, "asked again, b still has it");
        assert_eq!(share(&set), Some((1, 1)), "held for b; c still waits");
        assert!(!c.is_finished(), "c waits behind b");
        // A request arriving now does not overtake c.
        let d = in_line(started("a"));
        assert_eq!(share(&set), Some((1, 2)));
        let second = run(set.start_handed(wait, 1, tag, Instant::now()));

        // A waiter that gives up leaves the line.
        let gone = in_line(started("a"));
        assert_eq!(share(&set), Some((1, 3)));
        gone.abort();
        assert!(gone.await.is_err_and(|e| e.is_cancelled()));
        assert_eq!(
            share(&set),
            Some((1, 2)),
            "the dropped waiter is out of line"
        );

        // c is handed the next seat but does not use it: it passes to d.
        drop(second);
        let waited = std::time::Duration::from_secs(5);
        let c = tokio::time::timeout(waited, c).await.expect("c within 5 s");
        let (handed, unused, _) = c.expect("c's wait");
        assert!(handed, "c was handed the seat");
        drop(unused);
        let d = tokio::time::timeout(waited, d).await.expect("d within 5 s");
        let (handed, wait, tag) = d.expect("d's wait");
        assert!(handed, "c's unused seat went to d");
        assert_eq!(share(&set), Some((1, 0)));
        let third = run(set.start_handed(wait, 1, tag, Instant::now()));

        // Past its deadline, a waiter gets nothing.
        let Err(ShareHeld { mut wait, .. }) = started("a") else {
            panic!("the share is held")
        };
        let soon = tokio::time::Instant::now() + std::time::Duration::from_millis(50);
        assert!(!wait.until(soon).await, "past its deadline");
        // In line until dropped: a seat given back meanwhile is handed to it, and its drop
        // gives the seat back.
        drop(third);
        assert_eq!(
            share(&set),
            Some((1, 0)),
            "handed to the waiter that gave up"
        );
        drop(wait);
        assert_eq!(share(&set), Some((0, 0)));
        set.prune_shares();
        assert_eq!(share(&set), None, "forgotten once nothing holds or waits");
    }
}
