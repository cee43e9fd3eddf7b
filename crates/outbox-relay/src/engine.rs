//! The relay engine: claim, publish, settle, repeat.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_core::{Envelope, FailureKind, MessageId, OutboxMessage, Outcome, RetryPolicy, Status, Transport};
use outbox_store::{CommitSignal, DeliveryState, LockedClaim, RelayStore, Settlement};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::alert::{AlertHook, LogAlert};
use crate::breaker::{Breaker, BreakerConfig, Permit};
use crate::router::{validate_pattern, Route, Router};
use crate::settle::{self, Target, TargetResult};

/// Tuning of one relay instance. Every field has a default.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// This instance's name, recorded as `lease_owner`. Must be unique among the relays of a
    /// database. Defaults to `<hostname>-<pid>-<random>`.
    pub owner: String,
    /// Messages claimed per round trip. Defaults to 500.
    pub batch_size: usize,
    /// How long a claimed message stays leased; a relay that dies holding it loses it after
    /// this. Defaults to 30 s.
    pub lease: Duration,
    /// Longest sleep when there is nothing to do (the scan's period). Defaults to 1 s.
    pub idle_interval: Duration,
    /// Batches published concurrently (claiming the next while the previous is in flight).
    /// Defaults to 2.
    pub max_in_flight_batches: usize,
    /// A publish that has not answered after this long counts as the destination being
    /// unavailable. Must be shorter than `lease`. Defaults to 10 s.
    pub publish_timeout: Duration,
    /// On shutdown, how long in-flight batches may take before their leases are released.
    /// Defaults to 10 s.
    pub shutdown_timeout: Duration,
    /// Where the store supports it (PostgreSQL, MySQL/MariaDB), keep a claimed batch's rows
    /// locked in an open transaction until its outcomes are written, instead of writing a
    /// lease first: one row write per message instead of two (see
    /// `docs/adr/0003-relay-claim-order-and-wakeup.md`). Each in-flight batch then holds one
    /// database connection while it publishes. Defaults to true; SQLite always uses leases.
    pub lock_claims: bool,
    /// How long a message whose topic no route of this relay matches waits for another relay
    /// that routes it (a rolling deploy: the new routes run on some relays only) before it
    /// fails with "no route". Meanwhile it is put back without spending an attempt, with a
    /// growing delay (at most 30 s). Measured from the message's `created_at`. Defaults to
    /// 10 minutes; zero fails at once.
    pub unrouted_grace: Duration,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            owner: default_owner(),
            batch_size: 500,
            lease: Duration::from_secs(30),
            idle_interval: Duration::from_secs(1),
            max_in_flight_batches: 2,
            publish_timeout: Duration::from_secs(10),
            shutdown_timeout: Duration::from_secs(10),
            lock_claims: true,
            unrouted_grace: Duration::from_secs(600),
        }
    }
}

fn default_owner() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "relay".into());
    format!("{host}-{}-{:08x}", std::process::id(), rand::random::<u32>())
}

/// ACK mode for a destination: the consumer must confirm each delivery (HTTP `POST /v1/ack/...`
/// with the token the envelope carries, or the inbox's auto-ACK) within `timeout`; otherwise
/// the delivery counts as a failed attempt and is published again (same id), until the
/// destination's `max_attempts`, then `failed`.
#[derive(Clone)]
pub struct AckConfig {
    /// How long the consumer has to confirm.
    pub timeout: Duration,
    /// Key of the ACK tokens (shared with the ACK endpoint). Never logged.
    pub secret: Arc<[u8]>,
    /// The store name bound into the tokens (the daemon serves several databases).
    pub store: String,
    /// How long a token stays valid. Defaults to 7 days.
    pub token_ttl: Duration,
}

impl std::fmt::Debug for AckConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AckConfig")
            .field("timeout", &self.timeout)
            .field("secret", &"***")
            .field("store", &self.store)
            .field("token_ttl", &self.token_ttl)
            .finish()
    }
}

impl AckConfig {
    /// ACK within `timeout`, tokens signed with `secret` for `store`.
    pub fn new(timeout: Duration, secret: impl Into<Vec<u8>>, store: impl Into<String>) -> Self {
        AckConfig {
            timeout,
            secret: Arc::from(secret.into().into_boxed_slice()),
            store: store.into(),
            token_ttl: Duration::from_secs(7 * 86_400),
        }
    }
}

/// A named destination: a transport, its retry policy and breaker settings.
#[derive(Debug, Clone)]
pub struct Destination {
    /// Name used in routes and in `outbox_delivery.destination`.
    pub name: String,
    /// The transport.
    pub transport: Arc<dyn Transport>,
    /// Retry policy. Defaults to [`RetryPolicy::default`].
    pub retry: RetryPolicy,
    /// Circuit breaker. Defaults to [`BreakerConfig::default`].
    pub breaker: BreakerConfig,
    /// Largest payload accepted, in bytes (the smaller of this and the transport's own limit
    /// applies). Defaults to none.
    pub max_payload_bytes: Option<usize>,
    /// Require the consumer's ACK. Defaults to none (broker confirmation is enough).
    pub ack: Option<AckConfig>,
}

impl Destination {
    /// A destination with default policies.
    pub fn new(name: impl Into<String>, transport: Arc<dyn Transport>) -> Self {
        Destination {
            name: name.into(),
            transport,
            retry: RetryPolicy::default(),
            breaker: BreakerConfig::default(),
            max_payload_bytes: None,
            ack: None,
        }
    }

    /// Requires the consumer's ACK.
    #[must_use]
    pub fn ack(mut self, ack: AckConfig) -> Self {
        self.ack = Some(ack);
        self
    }

    /// Sets the retry policy.
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the breaker settings.
    #[must_use]
    pub fn breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = breaker;
        self
    }

    /// Sets the payload limit.
    #[must_use]
    pub fn max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = Some(n);
        self
    }
}

/// A configuration mistake found by [`RelayBuilder::build`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// A route names a destination that was not added.
    #[error("route {pattern:?} names unknown destination {destination:?}")]
    UnknownDestination {
        /// The route's pattern.
        pattern: String,
        /// The missing destination.
        destination: String,
    },
    /// Something else is wrong; the message says what.
    #[error("invalid relay configuration: {0}")]
    Invalid(String),
}

/// Counters of what the relay did, readable while it runs (tests, metrics).
#[derive(Debug, Default)]
pub struct RelayStats {
    /// Claim queries issued.
    pub claims: AtomicU64,
    /// Messages claimed.
    pub claimed: AtomicU64,
    /// Messages claimed by a scan that the `idle_interval` timer started (no wake-up came):
    /// the slow path. The others were claimed on a wake-up (after-commit signal, `NOTIFY`) or
    /// while the relay was busy, so `1 - claimed_on_scan / claimed` is the fast-path share.
    pub claimed_on_scan: AtomicU64,
    /// Envelopes handed to transports.
    pub published: AtomicU64,
    /// Deliveries confirmed.
    pub delivered: AtomicU64,
    /// Failed attempts scheduled for retry.
    pub retried: AtomicU64,
    /// Messages that became `failed`.
    pub failed: AtomicU64,
    /// Deliveries put back because a circuit was open.
    pub deferred: AtomicU64,
    /// Messages whose lease had passed to another relay at settle time.
    pub lost_lease: AtomicU64,
    /// Store errors (claim or settle).
    pub store_errors: AtomicU64,
}

impl RelayStats {
    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// Builds a [`Relay`].
#[derive(Debug)]
pub struct RelayBuilder<S: RelayStore> {
    store: S,
    signal: CommitSignal,
    config: RelayConfig,
    destinations: Vec<Destination>,
    routes: Vec<Route>,
    alert: Arc<dyn AlertHook>,
}

impl<S: RelayStore> RelayBuilder<S> {
    /// Sets the tuning. Defaults to [`RelayConfig::default`].
    #[must_use]
    pub fn config(mut self, config: RelayConfig) -> Self {
        self.config = config;
        self
    }

    /// Adds a destination.
    #[must_use]
    pub fn destination(mut self, d: Destination) -> Self {
        self.destinations.push(d);
        self
    }

    /// Adds a route.
    #[must_use]
    pub fn route(mut self, r: Route) -> Self {
        self.routes.push(r);
        self
    }

    /// Sets the alert hook. Defaults to [`LogAlert`].
    #[must_use]
    pub fn alert(mut self, hook: Arc<dyn AlertHook>) -> Self {
        self.alert = hook;
        self
    }

    /// Validates and builds.
    pub fn build(self) -> Result<Relay<S>, BuildError> {
        let c = &self.config;
        if c.batch_size == 0 || c.batch_size > 10_000 {
            return Err(BuildError::Invalid(format!("batch_size must be 1..=10000, got {}", c.batch_size)));
        }
        if c.max_in_flight_batches == 0 {
            return Err(BuildError::Invalid("max_in_flight_batches must be at least 1".into()));
        }
        if c.publish_timeout >= c.lease {
            return Err(BuildError::Invalid(format!(
                "publish_timeout ({:?}) must be shorter than lease ({:?}), or a slow publish would outlive its lease",
                c.publish_timeout, c.lease
            )));
        }
        if c.idle_interval.is_zero() {
            return Err(BuildError::Invalid("idle_interval must be positive".into()));
        }
        outbox_core::text::check_name(&c.owner, outbox_core::limits::OWNER)
            .map_err(|e| BuildError::Invalid(format!("owner {e}")))?;
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, d) in self.destinations.iter().enumerate() {
            outbox_core::text::check_name(&d.name, outbox_core::limits::DESTINATION)
                .map_err(|e| BuildError::Invalid(format!("destination name {e}")))?;
            if index.insert(d.name.as_str(), i).is_some() {
                return Err(BuildError::Invalid(format!("destination {:?} is defined twice", d.name)));
            }
            d.retry
                .validate()
                .map_err(|e| BuildError::Invalid(format!("destination {:?}: retry: {e}", d.name)))?;
        }
        let mut routes = Vec::new();
        for r in &self.routes {
            validate_pattern(&r.pattern).map_err(BuildError::Invalid)?;
            if r.destinations.is_empty() {
                return Err(BuildError::Invalid(format!("route {:?} has no destinations", r.pattern)));
            }
            let mut idx = Vec::new();
            for name in &r.destinations {
                let i = index.get(name.as_str()).ok_or_else(|| BuildError::UnknownDestination {
                    pattern: r.pattern.clone(),
                    destination: name.clone(),
                })?;
                idx.push(*i);
            }
            routes.push((r.pattern.clone(), idx));
        }
        let dests = self
            .destinations
            .into_iter()
            .map(|d| DestRuntime {
                breaker: Mutex::new(Breaker::new(d.breaker.clone())),
                probes: AtomicU64::new(0),
                d,
            })
            .collect();
        Ok(Relay {
            inner: Arc::new(Inner {
                store: self.store,
                signal: self.signal,
                cfg: self.config,
                dests,
                router: Router::new(routes),
                alert: self.alert,
                stats: Arc::new(RelayStats::default()),
                health: Mutex::new(Health::default()),
            }),
        })
    }
}

#[derive(Debug)]
struct DestRuntime {
    d: Destination,
    breaker: Mutex<Breaker>,
    /// Probes sent while the circuit was open: the probe rotates over the waiting messages,
    /// so one message the broker chokes on cannot be the only probe forever.
    probes: AtomicU64,
}

impl DestRuntime {
    fn payload_limit(&self) -> Option<usize> {
        match (self.d.max_payload_bytes, self.d.transport.max_payload_bytes()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn permit(&self, now: Instant) -> Permit {
        match self.breaker.lock() {
            Ok(mut b) => b.permit(now),
            Err(_) => Permit::All,
        }
    }
}

#[derive(Debug)]
struct Inner<S: RelayStore> {
    store: S,
    signal: CommitSignal,
    cfg: RelayConfig,
    dests: Vec<DestRuntime>,
    router: Router,
    alert: Arc<dyn AlertHook>,
    stats: Arc<RelayStats>,
    health: Mutex<Health>,
}

/// What the claim loop must respect after a batch's settlement failed.
#[derive(Debug, Default)]
struct Health {
    /// Settlements failed in a row (the store or its connection is failing).
    settle_failures: u32,
    /// No claim before this instant.
    pause_until: Option<Instant>,
    /// Messages of which nothing could be written (not even `failed`): not published again
    /// before the instant, so a row the database refuses to update cannot make the relay
    /// publish it in a loop.
    held_back: HashMap<MessageId, Instant>,
}

impl<S: RelayStore> Inner<S> {
    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// After a failed settlement: the batch's rows are due again (a locked claim rolled back)
    /// or will be after their lease. Claim nothing for a growing pause (100 ms doubling to
    /// 10 s), so a store that keeps refusing a settlement is not fed the same batch, and the
    /// broker the same messages, in a tight loop.
    fn settle_failed(&self) -> Duration {
        let mut h = self.health();
        h.settle_failures = h.settle_failures.saturating_add(1);
        let pause = Duration::from_millis(100)
            .saturating_mul(1 << h.settle_failures.min(7).saturating_sub(1))
            .min(Duration::from_secs(10));
        h.pause_until = Some(Instant::now() + pause);
        pause
    }

    fn settle_succeeded(&self) {
        let mut h = self.health();
        h.settle_failures = 0;
        h.pause_until = None;
    }

    /// Holds `ids` back for `lease` (the time their lease would keep them anyway).
    fn hold_back(&self, ids: impl IntoIterator<Item = MessageId>) {
        let until = Instant::now() + self.cfg.lease;
        let mut h = self.health();
        for id in ids {
            h.held_back.insert(id, until);
        }
    }

    /// Removes held-back messages from a claimed batch (they are left as they are).
    fn without_held_back(&self, batch: Vec<OutboxMessage>) -> Vec<OutboxMessage> {
        let mut h = self.health();
        if h.held_back.is_empty() {
            return batch;
        }
        let now = Instant::now();
        h.held_back.retain(|_, until| *until > now);
        batch.into_iter().filter(|m| !h.held_back.contains_key(&m.id)).collect()
    }

    fn pause_left(&self) -> Option<Duration> {
        let until = self.health().pause_until?;
        until.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
    }
}

/// A relay: publishes the outbox of one store. Run it with [`Relay::run`]; any number of relays
/// (in one process or many) may run against the same database.
#[derive(Debug)]
pub struct Relay<S: RelayStore> {
    inner: Arc<Inner<S>>,
}

impl<S: RelayStore> Relay<S> {
    /// Starts building a relay over `store`, woken by `signal` (use `Outbox::signal()` so that
    /// commits in this process wake it at once).
    pub fn builder(store: S, signal: CommitSignal) -> RelayBuilder<S> {
        RelayBuilder {
            store,
            signal,
            config: RelayConfig::default(),
            destinations: Vec::new(),
            routes: Vec::new(),
            alert: Arc::new(LogAlert),
        }
    }

    /// Live counters.
    pub fn stats(&self) -> Arc<RelayStats> {
        self.inner.stats.clone()
    }

    /// This relay's lease owner name.
    pub fn owner(&self) -> &str {
        &self.inner.cfg.owner
    }

    /// Runs until `shutdown` is cancelled, then stops claiming, lets in-flight batches finish
    /// (up to `shutdown_timeout`), releases whatever it still leases, and returns.
    pub async fn run(self, shutdown: CancellationToken) {
        let inner = self.inner;
        let cfg = &inner.cfg;
        let listener = match inner.store.listen(inner.signal.clone()).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "Push wake-up unavailable; relying on the scan and in-process signal");
                None
            }
        };
        tracing::info!(owner = %cfg.owner, batch_size = cfg.batch_size, push = listener.is_some(), "Relay started");
        let permits = Arc::new(Semaphore::new(cfg.max_in_flight_batches));
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut idle = false;
        let mut idle_refreshed = Instant::now();
        let idle_ttl = cfg.idle_interval * 3;
        let mut store_backoff = Duration::from_millis(100);
        let has_ack = inner.dests.iter().any(|d| d.d.ack.is_some());
        let mut acks_checked = Instant::now();
        // The next claim was started by the scan timer, not by a wake-up.
        let mut on_scan = false;
        let lock_claims = cfg.lock_claims && inner.store.locks_claims();

        loop {
            while tasks.try_join_next().is_some() {}
            // ACK mode: deliveries whose ACK is overdue go back to pending (at most every half
            // scan period; one indexed query).
            if has_ack && acks_checked.elapsed() >= cfg.idle_interval / 2 {
                acks_checked = Instant::now();
                match inner.store.expire_acks(cfg.batch_size).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(
                        expired = n,
                        "Deliveries without an ACK in time will be published again"
                    ),
                    Err(e) => tracing::warn!(error = %e, "Could not expire overdue ACKs"),
                }
            }
            let permit = tokio::select! {
                _ = shutdown.cancelled() => break,
                p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            };
            if let Some(pause) = inner.pause_left() {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
            let claimed = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = claim(&inner, lock_claims) => r,
            };
            RelayStats::add(&inner.stats.claims, 1);
            let scanned = std::mem::take(&mut on_scan);
            // Rows held back (nothing could be written for them) are left as they are: a
            // locked claim of nothing else is rolled back, and the loop sleeps as if idle.
            let claimed = claimed.map(|(batch, locked)| {
                let n = batch.len();
                let batch = inner.without_held_back(batch);
                if batch.is_empty() && n > 0 {
                    (batch, None)
                } else {
                    (batch, locked)
                }
            });
            match claimed {
                Err(e) => {
                    drop(permit);
                    RelayStats::add(&inner.stats.store_errors, 1);
                    tracing::warn!(error = %e, retry_in = ?store_backoff, "Claim failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(store_backoff) => {}
                    }
                    store_backoff = (store_backoff * 2).min(Duration::from_secs(5));
                }
                Ok((batch, _)) if batch.is_empty() => {
                    drop(permit);
                    store_backoff = Duration::from_millis(100);
                    if !idle {
                        // Declare idle, then claim once more: a row committed between the empty
                        // claim and the declaration did not notify.
                        if let Err(e) = inner.store.set_idle(&cfg.owner, true, idle_ttl).await {
                            tracing::debug!(error = %e, "Could not declare the relay idle");
                        }
                        idle = true;
                        idle_refreshed = Instant::now();
                        continue;
                    }
                    let woke = tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = inner.signal.notified() => true,
                        _ = tokio::time::sleep(cfg.idle_interval) => false,
                    };
                    on_scan = !woke;
                    if !woke && idle_refreshed.elapsed() >= cfg.idle_interval {
                        let _ = inner.store.set_idle(&cfg.owner, true, idle_ttl).await;
                        idle_refreshed = Instant::now();
                    }
                }
                Ok((batch, locked)) => {
                    store_backoff = Duration::from_millis(100);
                    if idle {
                        let _ = inner.store.set_idle(&cfg.owner, false, idle_ttl).await;
                        idle = false;
                    }
                    RelayStats::add(&inner.stats.claimed, batch.len());
                    if scanned {
                        RelayStats::add(&inner.stats.claimed_on_scan, batch.len());
                    }
                    let inner2 = inner.clone();
                    tasks.spawn(async move {
                        process(&inner2, batch, locked).await;
                        drop(permit);
                        // Younger messages with the same keys may be claimable now.
                        inner2.signal.wake();
                    });
                }
            }
        }

        if let Some(l) = listener {
            l.abort();
        }
        let drained =
            tokio::time::timeout(cfg.shutdown_timeout, async { while tasks.join_next().await.is_some() {} })
                .await
                .is_ok();
        if !drained {
            tracing::warn!(timeout = ?cfg.shutdown_timeout, "In-flight batches did not finish; abandoning them");
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
        match inner.store.release(&cfg.owner).await {
            Ok(n) => tracing::info!(released = n, "Relay stopped; leases released"),
            Err(e) => {
                tracing::warn!(error = %e, "Could not release leases; they expire after the lease time")
            }
        }
        let _ = inner.store.set_idle(&cfg.owner, false, idle_ttl).await;
    }
}

/// One claim: locked (the rows stay locked until the batch is settled) or leased.
async fn claim<S: RelayStore>(
    inner: &Inner<S>,
    locked: bool,
) -> outbox_core::Result<(Vec<OutboxMessage>, Option<LockedClaim>)> {
    let cfg = &inner.cfg;
    if locked {
        Ok(match inner.store.claim_locked(&cfg.owner, cfg.batch_size, cfg.lease).await? {
            Some((batch, claim)) => (batch, Some(claim)),
            None => (Vec::new(), None),
        })
    } else {
        Ok((inner.store.claim(&cfg.owner, cfg.batch_size, cfg.lease).await?, None))
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The state of each claimed message at one destination before publishing.
enum Prior {
    Fixed(TargetResult),
    Publish { attempts: i32 },
}

async fn process<S: RelayStore>(
    inner: &Inner<S>,
    batch: Vec<OutboxMessage>,
    mut locked: Option<LockedClaim>,
) {
    let routes: Vec<Vec<usize>> = batch.iter().map(|m| inner.router.resolve(&m.topic)).collect();

    // Per-destination rows exist only for fan-out messages and ACK destinations.
    let keeps_rows = |r: &Vec<usize>| r.len() > 1 || r.iter().any(|&d| inner.dests[d].d.ack.is_some());
    let fan_ids: Vec<MessageId> =
        batch.iter().zip(&routes).filter(|(_, r)| keeps_rows(r)).map(|(m, _)| m.id).collect();
    let mut prior_rows: HashMap<(MessageId, String), DeliveryState> = HashMap::new();
    if !fan_ids.is_empty() {
        let read = match locked.as_mut() {
            Some(claim) => inner.store.deliveries_locked(claim, &fan_ids).await,
            None => inner.store.deliveries(&fan_ids).await,
        };
        match read {
            Ok(rows) => {
                for r in rows {
                    prior_rows.insert((r.message_id, r.destination.clone()), r);
                }
            }
            Err(e) => {
                // Without the per-destination state we could re-send to destinations that are
                // done; give the batch up instead: a leased claim is retried after its lease, a
                // locked one at once (returning here drops it, which rolls it back).
                RelayStats::add(&inner.stats.store_errors, 1);
                let when = if locked.is_some() { "at once (rolled back)" } else { "after its lease" };
                tracing::warn!(error = %e, "Could not read delivery state; the batch will be retried {when}");
                return;
            }
        }
    }

    // Decide, for every (message, destination), whether to publish.
    let now = Instant::now();
    let mut results: Vec<Vec<Option<TargetResult>>> = Vec::with_capacity(batch.len());
    let mut to_publish: Vec<Vec<(usize, usize, i32)>> = vec![Vec::new(); inner.dests.len()]; // (msg idx, target idx, attempts)
    for (mi, m) in batch.iter().enumerate() {
        let mut row = Vec::with_capacity(routes[mi].len());
        for (ti, &di) in routes[mi].iter().enumerate() {
            let dest = &inner.dests[di];
            let prior = if keeps_rows(&routes[mi]) {
                match prior_rows.get(&(m.id, dest.d.name.clone())) {
                    Some(r) if matches!(r.status, Status::Sent | Status::Acked) => {
                        Prior::Fixed(TargetResult::AlreadyDone)
                    }
                    Some(r) if matches!(r.status, Status::Failed | Status::Cancelled) => {
                        Prior::Fixed(TargetResult::AlreadyFailed {
                            attempts: r.attempts,
                            error: r.last_error.clone(),
                        })
                    }
                    Some(r) if !r.wait.is_zero() => {
                        Prior::Fixed(TargetResult::Waiting { attempts: r.attempts, wait: r.wait })
                    }
                    Some(r) => Prior::Publish { attempts: r.attempts },
                    None => Prior::Publish { attempts: 0 },
                }
            } else {
                Prior::Publish { attempts: m.attempts }
            };
            let per_message_max = m.max_attempts.and_then(|n| u32::try_from(n).ok());
            let prior = match prior {
                Prior::Publish { attempts }
                    if dest.d.ack.is_some()
                        && dest.d.retry.exhausted(u32::try_from(attempts).unwrap_or(0), per_message_max) =>
                {
                    Prior::Fixed(TargetResult::Failed {
                        attempts: attempts.saturating_sub(1),
                        kind: FailureKind::Permanent,
                        reason: format!("no ACK from the consumer after {attempts} deliveries"),
                        retry_after: None,
                    })
                }
                other => other,
            };
            match prior {
                Prior::Fixed(r) => row.push(Some(r)),
                Prior::Publish { attempts } => {
                    if let Some(limit) = dest.payload_limit().filter(|l| m.payload.len() > *l) {
                        row.push(Some(TargetResult::Failed {
                            attempts,
                            kind: FailureKind::Permanent,
                            reason: format!(
                                "payload is {} bytes, larger than the destination's limit of {limit} bytes",
                                m.payload.len()
                            ),
                            retry_after: None,
                        }));
                    } else {
                        row.push(None);
                        to_publish[di].push((mi, ti, attempts));
                    }
                }
            }
        }
        results.push(row);
    }

    // Circuit breakers: a destination that is down gets at most one probe.
    let mut calls = Vec::new();
    for (di, items) in to_publish.into_iter().enumerate() {
        if items.is_empty() {
            continue;
        }
        let dest = &inner.dests[di];
        let (go, defer, wait) = match dest.permit(now) {
            Permit::All => (items, Vec::new(), Duration::ZERO),
            Permit::Probe => {
                let mut rest = items;
                let n = rest.len() as u64;
                let pick = usize::try_from(dest.probes.fetch_add(1, Ordering::Relaxed) % n).unwrap_or(0);
                let probe = vec![rest.remove(pick)];
                (probe, rest, dest.d.breaker.cooldown)
            }
            Permit::Wait(w) => (Vec::new(), items, w),
        };
        for (mi, ti, attempts) in defer {
            RelayStats::add(&inner.stats.deferred, 1);
            results[mi][ti] =
                Some(TargetResult::Deferred { attempts, wait: wait.max(Duration::from_millis(100)) });
        }
        if !go.is_empty() {
            calls.push((di, go));
        }
    }

    // Publish to every destination concurrently, each with a timeout.
    let timeout = inner.cfg.publish_timeout;
    let publishes = calls.iter().map(|(di, items)| {
        let dest = &inner.dests[*di];
        let envelopes: Vec<Envelope> = items
            .iter()
            .map(|(mi, _, attempts)| {
                let mut e = Envelope::new(&batch[*mi], u32::try_from(*attempts).unwrap_or(0) + 1);
                if let Some(ack) = &dest.d.ack {
                    let expires = unix_now() + i64::try_from(ack.token_ttl.as_secs()).unwrap_or(i64::MAX / 2);
                    let token = outbox_core::ack::sign(&ack.secret, &ack.store, e.id, &dest.d.name, expires);
                    e.headers.insert(outbox_core::header::ACK_TOKEN.into(), token);
                    e.headers.insert(outbox_core::header::ACK_DESTINATION.into(), dest.d.name.clone());
                    e.headers.insert(outbox_core::header::ACK_STORE.into(), ack.store.clone());
                }
                e
            })
            .collect();
        RelayStats::add(&inner.stats.published, envelopes.len());
        async move {
            match tokio::time::timeout(timeout, dest.d.transport.publish(&envelopes)).await {
                Ok(mut outcomes) => {
                    if outcomes.len() != envelopes.len() {
                        tracing::error!(
                            destination = %dest.d.name,
                            expected = envelopes.len(),
                            got = outcomes.len(),
                            "Transport returned the wrong number of outcomes"
                        );
                        outcomes.resize(
                            envelopes.len(),
                            Outcome::retryable("transport returned no outcome for this message"),
                        );
                    }
                    outcomes
                }
                Err(_) => vec![
                    Outcome::unavailable(format!("publish timed out after {timeout:?}"));
                    envelopes.len()
                ],
            }
        }
    });
    let answers = futures::future::join_all(publishes).await;

    for ((di, items), outcomes) in calls.iter().zip(answers) {
        let dest = &inner.dests[*di];
        let any_answer =
            outcomes.iter().any(|o| !matches!(o, Outcome::Failed { kind: FailureKind::Unavailable, .. }));
        if let Ok(mut b) = dest.breaker.lock() {
            if any_answer {
                b.on_success();
            } else if b.on_unavailable(Instant::now()) {
                tracing::warn!(destination = %dest.d.name, "Destination unavailable; circuit opened, probing with one message");
            }
        }
        for ((mi, ti, attempts), outcome) in items.iter().zip(outcomes) {
            let r = match outcome {
                Outcome::Delivered => {
                    RelayStats::add(&inner.stats.delivered, 1);
                    TargetResult::Delivered { attempts: *attempts }
                }
                Outcome::Failed { kind, reason, retry_after } => {
                    tracing::debug!(message_id = %batch[*mi].id, destination = %dest.d.name, ?kind, %reason, "Publish failed");
                    TargetResult::Failed { attempts: *attempts, kind, reason, retry_after }
                }
            };
            results[*mi][*ti] = Some(r);
        }
    }

    // Plan the writes.
    let mut settlement = Settlement::default();
    let mut alerts: Vec<(usize, String, i32)> = Vec::new();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::from_entropy();
    for (mi, m) in batch.iter().enumerate() {
        let plan = if routes[mi].is_empty() {
            let age = (chrono::Utc::now() - m.created_at).to_std().unwrap_or(Duration::ZERO);
            if age < inner.cfg.unrouted_grace {
                settle::unrouted_wait(m, &inner.cfg.owner, age, inner.cfg.unrouted_grace)
            } else {
                settle::no_route(m)
            }
        } else {
            let targets: Vec<Target<'_>> = routes[mi]
                .iter()
                .zip(results[mi].iter())
                .map(|(&di, r)| Target {
                    destination: &inner.dests[di].d.name,
                    policy: &inner.dests[di].d.retry,
                    ack: inner.dests[di].d.ack.as_ref().map(|a| a.timeout),
                    result: r.clone().unwrap_or(TargetResult::Deferred {
                        attempts: m.attempts,
                        wait: Duration::from_millis(100),
                    }),
                })
                .collect();
            let fan_out = keeps_rows(&routes[mi]);
            settle::plan(m, &targets, fan_out, || rand::Rng::gen::<f64>(&mut rng))
        };
        if plan.sent {
            settlement.sent.push(m.id);
        }
        let attempts = plan.message.as_ref().map_or(m.attempts, |w| w.attempts);
        if let Some(w) = plan.message {
            if w.status == Status::Pending && w.attempted {
                RelayStats::add(&inner.stats.retried, 1);
            }
            settlement.messages.push(w);
        }
        settlement.deliveries.extend(plan.deliveries);
        if let Some(reason) = plan.failed {
            alerts.push((mi, reason, attempts));
        }
    }

    let Some(report) = write_back(inner, &batch, &settlement, locked).await else {
        let pause = inner.settle_failed();
        tracing::warn!(pause = ?pause, "Claiming paused after a failed settlement");
        return;
    };
    inner.settle_succeeded();
    if !report.unsettled.is_empty() {
        inner.hold_back(report.unsettled.iter().map(|(id, _)| *id));
    }
    // Messages whose outcome could not be written were marked failed instead: alert for them.
    for (id, reason) in &report.isolated {
        alerts.retain(|(mi, _, _)| batch[*mi].id != *id);
        if let Some(mi) = batch.iter().position(|m| m.id == *id) {
            alerts.push((mi, reason.clone(), batch[mi].attempts.saturating_add(1)));
        }
    }
    if !report.lost_lease.is_empty() {
        RelayStats::add(&inner.stats.lost_lease, report.lost_lease.len());
        tracing::warn!(ids = ?report.lost_lease, "Leases expired before settling; another relay took these messages over");
    }
    for (mi, reason, attempts) in alerts {
        let m = &batch[mi];
        if report.lost_lease.contains(&m.id) {
            continue;
        }
        RelayStats::add(&inner.stats.failed, 1);
        let mut failed = m.clone();
        failed.status = Status::Failed;
        failed.attempts = attempts;
        failed.last_error = Some(reason.clone());
        inner.alert.message_failed(&failed, &reason).await;
    }
}

/// Writes a batch's settlement. A locked claim commits once (if that fails, the transaction is
/// gone and its rows are `pending` again, so they will be published again: at-least-once). A
/// leased claim retries briefly; if the store stays down, the leases expire and the batch is
/// published again.
async fn write_back<S: RelayStore>(
    inner: &Inner<S>,
    batch: &[OutboxMessage],
    settlement: &Settlement,
    locked: Option<LockedClaim>,
) -> Option<outbox_store::SettleReport> {
    if let Some(claim) = locked {
        return match inner.store.settle_locked(claim, &inner.cfg.owner, settlement).await {
            Ok(report) => Some(report),
            Err(e) => {
                RelayStats::add(&inner.stats.store_errors, 1);
                tracing::error!(
                    error = %e,
                    count = batch.len(),
                    "Could not settle a batch; its transaction rolled back and it will be published again"
                );
                None
            }
        };
    }
    let mut delay = Duration::from_millis(50);
    for attempt in 1..=5 {
        match inner.store.settle(&inner.cfg.owner, settlement).await {
            Ok(report) => return Some(report),
            Err(e) => {
                RelayStats::add(&inner.stats.store_errors, 1);
                tracing::warn!(error = %e, attempt, ids = ?settle::ids(batch), "Settling a batch failed");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
    }
    tracing::error!(
        count = batch.len(),
        "Could not settle a batch; it will be published again after its lease expires"
    );
    None
}
