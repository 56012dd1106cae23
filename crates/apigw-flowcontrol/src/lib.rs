//! API Priority and Fairness (`flowcontrol.apiserver.k8s.io/v1`), as kube-apiserver runs it
//! in front of every request after authentication and impersonation, before authorization:
//! each request is classified by FlowSchema ([`classify`]) into a priority level, whose seats
//! (its share of `--max-requests-inflight` + `--max-mutating-requests-inflight`) and fair
//! queues ([`queueset`]) decide when it runs, so that one noisy flow cannot starve the
//! others; one call admits a request, `QueueSet::acquire`, from its arrival to a seat or a
//! refusal. A full level answers 429 with `Retry-After`; every classified answer carries
//! `X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID`. Watches hold
//! their seat until established; other long-running requests bypass APF, as upstream's.
//! Every 10 s the levels lend the seats they do not need to those that need more
//! ([`borrowing`]). The configuration is upstream's mandatory and suggested set ([`config`]).
//! Every request takes one seat: upstream's estimate for an aggregated API's requests, whose
//! object counts and watchers it does not know, and neither does apigw. Beyond upstream,
//! each APIService has a share of each level's seats, a condition of dispatch from the fair
//! queues ([`queueset`]): alone, an APIService borrows past it, but a backend that stops
//! answering cannot take the seats the other backends' requests start with.
//! The debug dumps are in `dump`.

pub mod borrowing;
pub mod classify;
pub mod config;
mod dump;
mod flags;
pub mod metrics;
pub mod objects;
pub mod queueset;

use apigw_core::errors::Status;
use apigw_request::Attributes;
use apigw_request::Identity;
use config::{FlowSchema, LevelKind, LimitResponse, PriorityLevel};
pub use flags::{FlowControlFlags, MAX_MUTATING_INFLIGHT};
use http::HeaderValue;
pub use metrics::FlowMetrics;
use metrics::SchemaMetrics;
use queueset::{Mode, QueueSet, Reason, Seat, Tag};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const FLOW_SCHEMA_UID: http::HeaderName =
    http::HeaderName::from_static("x-kubernetes-pf-flowschema-uid");
pub const PRIORITY_LEVEL_UID: http::HeaderName =
    http::HeaderName::from_static("x-kubernetes-pf-prioritylevel-uid");

/// The longest a request may wait in a queue.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// How APF is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowControlSettings {
    /// `--enable-priority-and-fairness` (default true); off: the plain in-flight limit.
    pub enabled: bool,
    /// The seats shared by the priority levels: `--max-requests-inflight` +
    /// `--max-mutating-requests-inflight` (400 + 200, as upstream).
    pub total_seats: usize,
    /// The percentage of each limited level's seats one APIService's requests may hold
    /// (`--max-apiservice-seats-percent`; 100: no cap).
    pub apiservice_percent: u32,
    /// `--flowcontrol-config`: FlowSchemas and PriorityLevelConfigurations laid over the
    /// built-in ones, read again when they change.
    pub config: Option<std::path::PathBuf>,
}

impl Default for FlowControlSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            total_seats: 600,
            apiservice_percent: 50,
            config: None,
        }
    }
}

/// One priority level in force.
pub struct Level {
    pub config: PriorityLevel,
    uid: HeaderValue,
    /// Its nominal seats, ceil(total × shares / Σ shares), and what it may lend and borrow.
    pub bounds: borrowing::Bounds,
    /// Its smoothed seat demand, for borrowing.
    smoothed: Mutex<f64>,
    set: Arc<QueueSet>,
    retry_after: Mutex<RetryAfter>,
}

/// The flow-control state.
pub struct FlowControl {
    /// By matching precedence, then name; those whose level exists (upstream ignores a
    /// dangling schema).
    schemas: Vec<Arc<Schema>>,
    /// Which of the schemas' rules recent identities are subjects of.
    subjects: classify::SubjectCache,
    levels: HashMap<String, Arc<Level>>,
    /// How long a request may wait in a queue: a quarter of the request timeout, at most 1 min.
    wait_limit: Duration,
    metrics: FlowMetrics,
}

/// A flow schema in force: its level, UID header and metrics, resolved once.
struct Schema {
    config: FlowSchema,
    /// Its place in [`FlowControl::schemas`], by which the request dump's tags name it.
    at: usize,
    uid: HeaderValue,
    level: Arc<Level>,
    metrics: SchemaMetrics,
}

/// The PF headers of a classified request: its schema's UID and its level's, made once per
/// configuration.
#[derive(Clone)]
pub struct PfHeaders(Arc<Schema>);

impl Schema {
    /// Adds the PF headers of its requests to an answer.
    fn apply(&self, headers: &mut http::HeaderMap) {
        headers.insert(FLOW_SCHEMA_UID, self.uid.clone());
        headers.insert(PRIORITY_LEVEL_UID, self.level.uid.clone());
    }
}

impl PfHeaders {
    /// Adds them to an answer.
    pub fn apply(&self, headers: &mut http::HeaderMap) {
        self.0.apply(headers);
    }

    /// `X-Kubernetes-PF-FlowSchema-UID`'s value.
    pub fn flow_schema(&self) -> &HeaderValue {
        &self.0.uid
    }
}

impl std::fmt::Debug for PfHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PfHeaders")
            .field("flow_schema", &self.0.uid)
            .field("priority_level", &self.0.level.uid)
            .finish()
    }
}

/// A request running under APF: its seat (given back when dropped, or by [`Ticket::release`]
/// once a watch is established), and its schema, for the metrics and the PF headers.
pub struct Ticket {
    seat: Option<Seat>,
    schema: Arc<Schema>,
}

impl Ticket {
    /// The PF headers of its answer.
    pub fn headers(&self) -> PfHeaders {
        PfHeaders(self.schema.clone())
    }

    /// Adds the PF headers to its answer.
    pub fn apply(&self, headers: &mut http::HeaderMap) {
        self.schema.apply(headers);
    }

    /// Gives the seat back while the request goes on (an established watch).
    pub fn release(&mut self) {
        self.release_at(Instant::now());
    }

    /// Gives the seat back, if it still holds one, as the request ends at `now`.
    pub fn release_at(&mut self, now: Instant) {
        if let Some(seat) = self.seat.take() {
            seat.release(now);
            self.schema.metrics.executing.dec();
        }
    }

    /// Whether it still holds its seat.
    pub fn seated(&self) -> bool {
        self.seat.is_some()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.seated() {
            self.release();
        }
    }
}

/// A refused request: its headers and the 429.
pub struct Rejected {
    pub headers: PfHeaders,
    pub status: Status,
}

/// APF in force: its configuration, swapped whole when `--flowcontrol-config` changes (requests
/// already running keep the seats of the configuration they started under).
pub struct Flow {
    current: arc_swap::ArcSwap<FlowControl>,
    settings: FlowControlSettings,
    /// How long a request may wait in a queue: a quarter of the request timeout, at most 1 min.
    wait_limit: Duration,
    metrics: FlowMetrics,
}

/// The configuration `--flowcontrol-config` at `path` makes: its objects laid over the
/// built-in ones; every problem otherwise (`check` reports them, `serve` refuses them).
pub fn file_configuration(path: &std::path::Path) -> Result<Configuration, Vec<String>> {
    objects::compose(
        config::bootstrap_levels(),
        config::bootstrap_schemas(),
        objects::load(path)?,
    )
}

/// Priority levels and flow schemas.
pub type Configuration = (Vec<PriorityLevel>, Vec<FlowSchema>);

impl Flow {
    /// The configuration `settings` describe: built in, with `--flowcontrol-config`'s objects
    /// laid over it; every problem of the files otherwise.
    pub fn new(
        settings: &FlowControlSettings,
        request_timeout: Duration,
        metrics: FlowMetrics,
    ) -> Result<Self, Vec<String>> {
        let (levels, schemas) = Self::configuration(settings)?;
        let wait_limit = (request_timeout / 4).min(MAX_WAIT);
        let control =
            FlowControl::with_config(levels, schemas, settings, wait_limit, metrics.clone());
        Ok(Self {
            current: arc_swap::ArcSwap::from_pointee(control),
            settings: settings.clone(),
            wait_limit,
            metrics,
        })
    }

    /// The configuration of `settings`: the file's over the built-in, or the built-in.
    fn configuration(settings: &FlowControlSettings) -> Result<Configuration, Vec<String>> {
        match &settings.config {
            Some(path) => file_configuration(path),
            None => Ok((config::bootstrap_levels(), config::bootstrap_schemas())),
        }
    }

    /// Puts `configuration` in force.
    fn install(&self, (levels, schemas): Configuration) {
        self.current.store(Arc::new(FlowControl::with_config(
            levels,
            schemas,
            &self.settings,
            self.wait_limit,
            self.metrics.clone(),
        )));
    }

    /// Ends a borrowing period every [`borrowing::PERIOD`], in the configuration in force.
    pub fn spawn_borrowing(self: &Arc<Self>) {
        let flow = Arc::downgrade(self);
        tokio::spawn(async move {
            let start = tokio::time::Instant::now() + borrowing::PERIOD;
            let mut ticks = tokio::time::interval_at(start, borrowing::PERIOD);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(flow) = flow.upgrade() else { return };
                flow.current().adjust();
            }
        });
    }

    /// The configuration in force.
    pub fn current(&self) -> Arc<FlowControl> {
        self.current.load_full()
    }

    /// [`FlowControl::admit`] in the configuration in force, which the request holds (without
    /// a reference count of its own) until it is admitted or refused.
    pub async fn admit(
        &self,
        id: &Identity,
        a: &Arc<Attributes>,
        apiservice: Option<&str>,
    ) -> Option<Result<Ticket, Rejected>> {
        self.current.load().admit(id, a, apiservice).await
    }

    /// Puts the cluster's objects (`items`, as JSON) in force: they replace the built-in
    /// configuration, but for the mandatory `exempt` and `catch-all` objects where the
    /// cluster lacks them, as upstream's controller imagines them.
    pub fn set_cluster(&self, items: Vec<serde_json::Value>) -> Result<(), Vec<String>> {
        let found = objects::parse_items(items, true)?;
        let mandatory = |name: &str| name == config::EXEMPT || name == config::CATCH_ALL;
        let levels = config::bootstrap_levels()
            .into_iter()
            .filter(|l| mandatory(&l.name))
            .collect();
        let schemas = config::bootstrap_schemas()
            .into_iter()
            .filter(|s| mandatory(&s.name))
            .collect();
        self.install(objects::compose(levels, schemas, found)?);
        Ok(())
    }
}

impl apigw_core::reload::Reload for Flow {
    fn watched(&self) -> Vec<apigw_core::reload::Watched> {
        self.settings
            .config
            .as_deref()
            .map(|path| apigw_core::reload::Watched {
                what: "flowcontrol config",
                files: objects::files(path),
            })
            .into_iter()
            .collect()
    }

    fn reload(&self, _: &str) -> Result<(), apigw_core::body::BoxError> {
        let next = Self::configuration(&self.settings).map_err(|problems| problems.join("; "))?;
        self.install(next);
        Ok(())
    }
}

impl FlowControl {
    fn with_config(
        levels: Vec<PriorityLevel>,
        mut schemas: Vec<FlowSchema>,
        settings: &FlowControlSettings,
        wait_limit: Duration,
        metrics: FlowMetrics,
    ) -> Self {
        let total = settings.total_seats;
        let share_sum: u64 = levels.iter().map(|l| u64::from(l.seats.shares)).sum();
        let levels: HashMap<String, Arc<Level>> = levels
            .into_iter()
            .map(|config| {
                let mode = match &config.kind {
                    LevelKind::Exempt => Mode::Exempt,
                    LevelKind::Limited(LimitResponse::Reject) => Mode::Reject,
                    LevelKind::Limited(LimitResponse::Queue {
                        queues,
                        hand_size,
                        queue_length_limit,
                    }) => Mode::Queue {
                        queues: (*queues).max(1),
                        hand_size: (*hand_size).clamp(1, (*queues).max(1)),
                        queue_length_limit: *queue_length_limit,
                    },
                };
                let exempt = matches!(mode, Mode::Exempt);
                let bounds = borrowing::Bounds::new(total, share_sum, &config.seats, exempt);
                metrics.bounds(&config.name, &bounds);
                let nominal = bounds.nominal;
                let apiservice_cap = match mode {
                    Mode::Exempt => None,
                    _ if settings.apiservice_percent >= 100 => None,
                    _ => Some((nominal * settings.apiservice_percent as usize / 100).max(1)),
                };
                let level = Level {
                    uid: header(&config.uid),
                    bounds,
                    smoothed: Mutex::new(0.0),
                    set: QueueSet::new(mode, nominal, apiservice_cap),
                    retry_after: Mutex::new(RetryAfter::default()),
                    config,
                };
                (level.config.name.clone(), Arc::new(level))
            })
            .collect();
        schemas.sort_by(|a, b| (a.precedence, &a.name).cmp(&(b.precedence, &b.name)));
        let schemas = schemas
            .into_iter()
            .filter_map(|config| Some((levels.get(&config.level)?.clone(), config)))
            .enumerate()
            .map(|(at, (level, config))| {
                Arc::new(Schema {
                    at,
                    uid: header(&config.uid),
                    metrics: metrics.schema(&level.config.name, &config.name),
                    level,
                    config,
                })
            })
            .collect();
        let control = Self {
            schemas,
            subjects: classify::SubjectCache::default(),
            levels,
            wait_limit,
            metrics,
        };
        // The limits of idle levels until the first period ends.
        control.adjust();
        control
    }

    /// Ends a borrowing period: each level's limit set again from its seat demand since the
    /// last one.
    pub fn adjust(&self) {
        let levels: Vec<&Arc<Level>> = self.levels.values().collect();
        let mut adjusting: Vec<borrowing::Adjusting> = levels
            .iter()
            .map(|l| borrowing::Adjusting {
                bounds: l.bounds,
                exempt: matches!(l.set.mode, Mode::Exempt),
                observed: l.set.observe(),
                smoothed: *l.smoothed.lock().unwrap_or_else(|e| e.into_inner()),
                current: l.set.limit(),
            })
            .collect();
        let fair = borrowing::adjust(&mut adjusting);
        self.metrics.fair.set(fair);
        for (level, next) in levels.iter().zip(adjusting) {
            level.set.prune_shares();
            *level.smoothed.lock().unwrap_or_else(|e| e.into_inner()) = next.smoothed;
            level.set.set_limit(next.current);
            self.metrics
                .current
                .with_label_values(&[&level.config.name])
                .set(next.current as i64);
        }
    }

    /// The schema of a request by `id` with `a`: the first that matches, else `catch-all`;
    /// the identity's user name, shared; and the request's flow hash.
    fn classify(&self, id: &Identity, a: &Attributes) -> Option<(&Arc<Schema>, Arc<str>, u64)> {
        let matched = classify::first_match(&self.schemas, |s| &s.config, &self.subjects, id, a);
        let schema = matched.at.and_then(|at| self.schemas.get(at)).or_else(|| {
            self.schemas
                .iter()
                .find(|s| s.config.name == config::CATCH_ALL)
        })?;
        let flow = matched.flow.unwrap_or_else(|| {
            let how = schema.config.distinguisher;
            let distinguisher = classify::distinguisher(how, &id.user, a);
            classify::flow_hash(&schema.config.name, distinguisher)
        });
        Some((schema, matched.user, flow))
    }

    /// Admits a request by `id` with `a`, for the backend of `apiservice` if any, under
    /// APF: at once, after waiting its turn in a queue, or refused with a 429. None when
    /// nothing classifies it (no catch-all).
    pub async fn admit(
        &self,
        id: &Identity,
        a: &Arc<Attributes>,
        apiservice: Option<&str>,
    ) -> Option<Result<Ticket, Rejected>> {
        let (schema, user, hash) = self.classify(id, a)?;
        let level = &schema.level;
        let arrived = Instant::now();
        let tag = Tag {
            schema: schema.at,
            distinguisher: schema.config.distinguisher,
            user,
            attrs: a.clone(),
            arrived,
        };
        let m = &schema.metrics;
        let deadline = arrived + self.wait_limit;
        let outcome = level
            .set
            .acquire(hash, tag, deadline, apiservice, &m.inqueue)
            .await;
        match outcome {
            Ok((seat, waited)) => {
                // How long it waited; nothing when it was dispatched as it arrived.
                m.dispatched(waited.then(|| arrived.elapsed().as_secs_f64()));
                m.executing.inc();
                Some(Ok(Ticket {
                    seat: Some(seat),
                    schema: schema.clone(),
                }))
            }
            Err((reason, queued)) => Some(Err(self.refuse(schema, reason, queued, arrived))),
        }
    }

    /// The 429 of a refused request, counted.
    fn refuse(
        &self,
        schema: &Arc<Schema>,
        reason: Reason,
        queued: bool,
        arrived: Instant,
    ) -> Rejected {
        let waited = arrived.elapsed().as_secs_f64();
        match queued {
            true => schema.metrics.waited.observe(waited),
            false => schema.metrics.refused.observe(waited),
        }
        let level = &schema.level;
        self.metrics
            .rejected
            .with_label_values(&[&level.config.name, &schema.config.name, reason.label()])
            .inc();
        let retry = level
            .retry_after
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .dropped(Instant::now());
        let message = match reason {
            Reason::ApiServiceLimit => {
                "Too many requests to this APIService's backend: they hold their share of their priority level's seats; please try again later."
            }
            _ => "Too many requests, please try again later.",
        };
        let status = Status::new(
            http::StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            message,
        )
        .with_retry_after(u32::try_from(retry).unwrap_or(u32::MAX));
        Rejected {
            headers: PfHeaders(schema.clone()),
            status,
        }
    }

    /// The level named `name`, for tests and the dumps.
    pub fn level(&self, name: &str) -> Option<&Arc<Level>> {
        self.levels.get(name)
    }
}

/// A UID as the header value every answer of its object clones (a reference count on shared
/// bytes, dropped with the configuration that made it); an invalid one is an empty value.
fn header(uid: &str) -> HeaderValue {
    HeaderValue::from_maybe_shared(bytes::Bytes::from(uid.to_owned()))
        .unwrap_or(HeaderValue::from_static(""))
}

/// Upstream's `Retry-After` per level: 1 s, doubled (up to 32 s) while requests are dropped
/// at three times that many a second, and lowered by one when drops fall below one a second.
#[derive(Debug)]
struct RetryAfter {
    seconds: u64,
    raised: Option<Instant>,
    /// Drops per second, the most recent last: (second since `epoch`, count).
    drops: std::collections::VecDeque<(u64, u64)>,
    epoch: Option<Instant>,
}

impl Default for RetryAfter {
    fn default() -> Self {
        Self {
            seconds: 1,
            raised: None,
            drops: std::collections::VecDeque::new(),
            epoch: None,
        }
    }
}

impl RetryAfter {
    const MAX: u64 = 32;

    /// Records a drop at `now`; the `Retry-After` to answer it with.
    fn dropped(&mut self, now: Instant) -> u64 {
        let epoch = *self.epoch.get_or_insert(now);
        let second = now.duration_since(epoch).as_secs();
        let new_second = self.drops.back().is_none_or(|(s, _)| *s != second);
        if new_second {
            // Drops in the last `seconds` seconds before this one.
            let since = second.saturating_sub(self.seconds);
            let recent: u64 = self
                .drops
                .iter()
                .filter(|(s, _)| *s >= since && *s < second)
                .map(|(_, n)| n)
                .sum();
            let waited = self
                .raised
                .is_none_or(|at| now.duration_since(at).as_secs() >= self.seconds);
            if waited && recent >= 3 * self.seconds {
                self.seconds = (self.seconds * 2).min(Self::MAX);
                self.raised = Some(now);
            } else if recent < self.seconds && self.seconds > 1 {
                self.seconds -= 1;
            }
            self.drops.push_back((second, 0));
            while self.drops.len() > Self::MAX as usize + 1 {
                self.drops.pop_front();
            }
        }
        if let Some((_, n)) = self.drops.back_mut() {
            *n += 1;
        }
        self.seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use prometheus::Registry;

    pub(super) fn control(total: usize, wait: Duration) -> FlowControl {
        FlowControl::with_config(
            config::bootstrap_levels(),
            config::bootstrap_schemas(),
            &FlowControlSettings {
                total_seats: total,
                ..FlowControlSettings::default()
            },
            wait,
            FlowMetrics::register(&Registry::new()),
        )
    }

    #[test]
    fn nominal_seats_are_upstreams_split() {
        let fc = control(600, Duration::from_secs(15));
        let nominal = |n: &str| fc.level(n).map(|l| l.bounds.nominal).unwrap_or(usize::MAX);
        for (name, want) in [
            ("exempt", 0),
            ("catch-all", 13),
            ("system", 74),
            ("node-high", 98),
            ("leader-election", 25),
            ("workload-high", 98),
            ("workload-low", 245),
            ("global-default", 49),
        ] {
            assert_eq!(nominal(name), want, "{name}");
        }
    }

    #[tokio::test]
    async fn masters_are_exempt_and_a_full_level_is_a_429_with_retry_after() {
        // 10 seats in all: global-default gets ceil(10 × 20/245) = 1.
        let fc = control(10, Duration::from_millis(50));
        let alice = Identity::new("alice", vec!["system:authenticated".into()]);
        let a = Arc::new(Attributes::from_request(
            &Method::GET,
            "/apis/g/v1/namespaces/n/things",
            None,
        ));
        let Some(Ok(first)) = fc.admit(&alice, &a, None).await else {
            panic!("the first request runs")
        };
        assert_eq!(
            first.headers().flow_schema().to_str().ok(),
            Some(config::uid("flowschema", "global-default").as_str())
        );
        let Some(Err(refused)) = fc.admit(&alice, &a, None).await else {
            panic!("the second waits past its limit and is refused")
        };
        assert_eq!(refused.status.code(), http::StatusCode::TOO_MANY_REQUESTS);
        assert!(refused.status.message().contains("Too many requests"));
        let root = Identity::new("root", vec!["system:masters".into()]);
        for _ in 0..50 {
            let Some(Ok(t)) = fc.admit(&root, &a, None).await else {
                panic!("masters are exempt")
            };
            std::mem::forget(t);
        }
        drop(first);
        assert!(matches!(fc.admit(&alice, &a, None).await, Some(Ok(_))));
    }

    #[test]
    fn retry_after_doubles_under_drops_and_comes_back() {
        let mut r = RetryAfter::default();
        let t0 = Instant::now();
        assert_eq!(r.dropped(t0), 1);
        for _ in 0..5 {
            r.dropped(t0);
        }
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(r.dropped(t1), 2, "6 drops in the last second: doubled");
        let later = t1 + Duration::from_secs(10);
        assert_eq!(r.dropped(later), 1, "no drops since: lowered");
    }

    /// A level whose requests wait borrows, at the period's end, the seats the idle levels
    /// lend, and its waiters run.
    #[tokio::test]
    async fn a_busy_level_borrows_and_its_waiters_run() {
        let fc = Arc::new(control(600, Duration::from_secs(30)));
        let level = fc.level("global-default").expect("global-default").clone();
        let idle = level.set.limit();
        assert_eq!(idle, 56, "idle: its lower bound 24 × 602/258");
        let a = Arc::new(Attributes::from_request(&Method::GET, "/api/v1/pods", None));
        let mut running = Vec::new();
        let mut waiting = tokio::task::JoinSet::new();
        for i in 0..(idle + 40) {
            let id = Identity::new(format!("user-{i}"), vec!["system:authenticated".into()]);
            if i < idle {
                match fc.admit(&id, &a, None).await {
                    Some(Ok(t)) => running.push(t),
                    _ => panic!("a free seat runs at once"),
                }
            } else {
                let (fc, a) = (fc.clone(), a.clone());
                waiting.spawn(async move { fc.admit(&id, &a, None).await.map(|r| r.is_ok()) });
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(level.set.snapshot().waiting, 40);
        let dump = fc.dump_requests(true);
        assert_eq!(dump.lines().count(), 1 + idle + 40, "{dump}");
        let waiter = dump
            .lines()
            .find(|l| l.contains("0001-01-01T00:00:00Z"))
            .expect("a waiting request");
        assert!(waiter.contains("global-default") && waiter.contains("/api/v1/pods"));
        assert!(waiter.contains(" list,"), "{waiter}");
        fc.adjust();
        assert!(level.set.limit() >= idle + 40, "{}", level.set.limit());
        while let Some(done) = waiting.join_next().await {
            assert_eq!(done.ok(), Some(Some(true)), "every waiter ran");
        }
        drop(running);
    }
}
