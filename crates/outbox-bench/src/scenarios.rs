//! The scenarios. Each one creates its own database and broker objects and removes them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::{MessageId, Transport};
use outbox_relay::{Destination, Relay, RelayConfig, RelayStats, Route};
use outbox_store::{AnyOutbox, Claims, Settlement};
use tokio_util::sync::CancellationToken;

use crate::broker::{Broker, Seen};
use crate::db::{self, BenchDb};
use crate::results::{
    BacklogBeside, ClaimAtSize, ClaimKindRow, DrainResult, EnqueueResult, EnqueueRow, IdleResult,
    LatencyResult, RawResult, ScaleResult,
};
use crate::stats::{mean_ms_between, Recorder};
use crate::sys;
use crate::{BenchConfig, Error, Report, Result, Scenario};

/// Connections of the main pool (business writers plus one relay).
const POOL: u32 = 24;

struct Running {
    stats: Arc<RelayStats>,
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        self.stop.cancel();
        let _ = self.handle.await;
    }
}

fn start_relay(
    store: AnyOutbox,
    transport: Arc<dyn Transport>,
    cfg: &BenchConfig,
    i: usize,
    budget: Option<outbox_relay::Budget>,
) -> Result<Running> {
    let config = RelayConfig {
        owner: format!("bench-{}-{i}", std::process::id()),
        batch_size: cfg.batch_size,
        max_in_flight_batches: cfg.in_flight,
        max_run: cfg.max_run,
        lock_claims: cfg.lock_claims,
        active_scan_interval: cfg.active_scan_interval,
        ..RelayConfig::default()
    };
    let signal = store.signal().clone();
    let mut builder = Relay::builder_with(store, signal).config(config);
    if let Some(b) = budget {
        builder = builder.budget(b);
    }
    let relay = builder
        .destination(Destination::new("bench", transport))
        .route(Route::new("#", ["bench"]))
        .build()
        .map_err(|e| Error::Config(e.to_string()))?;
    let stats = relay.stats();
    let stop = CancellationToken::new();
    let handle = tokio::spawn(relay.run(stop.clone()));
    Ok(Running { stats, stop, handle })
}

/// The raw limits a drain's rate is compared with.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// min(raw DB, raw broker).
    min: f64,
    /// Both raw loops at once ([`raw_together`]).
    together: Option<f64>,
}

/// Microseconds of CPU per item from a CPU time (seconds) and a count.
fn cpu_per(cpu_s: f64, count: u64) -> f64 {
    cpu_s * 1e6 / count.max(1) as f64
}

fn ratio(x: f64, limit: Option<f64>) -> Option<f64> {
    limit.filter(|l| *l > 0.0).map(|l| x / l)
}

pub(crate) fn check(scenario: &'static str, ok: bool, reason: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::Check { scenario, reason: reason() })
    }
}

/// Runs every selected scenario, in the canonical order.
pub(crate) async fn run(cfg: &BenchConfig) -> Result<Report> {
    if cfg.n == 0 || cfg.rate == 0 || cfg.batch_size == 0 || cfg.in_flight == 0 || cfg.max_run == 0 {
        return Err(Error::Config("n, rate, batch size, in-flight and max run must be positive".into()));
    }
    let started = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339();
    let probe = BenchDb::fresh(&cfg.store, 1).await?;
    let version = probe.version().await?;
    let store_kind = format!("{:?}", probe.dialect).to_lowercase();
    probe.drop_db().await;
    let machine = sys::machine(version);
    let mut report = Report {
        started_at,
        duration_s: 0.0,
        config: cfg.clone(),
        store_kind,
        machine,
        raw: None,
        drain: None,
        latency: None,
        enqueue: None,
        scale: None,
        idle: None,
        stores: None,
    };
    for s in Scenario::ALL {
        if !cfg.scenarios.contains(&s) {
            continue;
        }
        tracing::info!(scenario = s.name(), "Running");
        sys::reset_peak_rss();
        let limit = report.raw.as_ref().map(|r| Limits { min: r.limit_per_s, together: r.together_per_s });
        match s {
            Scenario::Raw => report.raw = Some(raw(cfg).await?),
            Scenario::Drain => report.drain = Some(drain(cfg, 1, limit).await?),
            Scenario::Latency => report.latency = Some(latency(cfg).await?),
            Scenario::Enqueue => report.enqueue = Some(enqueue(cfg).await?),
            Scenario::Scale => report.scale = Some(scale(cfg, limit).await?),
            Scenario::Idle => report.idle = Some(idle(cfg).await?),
            Scenario::Stores => report.stores = Some(crate::stores::run(cfg).await?),
        }
    }
    report.duration_s = started.elapsed().as_secs_f64();
    Ok(report)
}

async fn raw(cfg: &BenchConfig) -> Result<RawResult> {
    let n = cfg.n as u64;
    let db = BenchDb::fresh(&cfg.store, 4).await?;
    db.insert_rows(0, n, "pending", cfg.keys).await?;
    db.analyze().await?;
    let db_cpu = sys::ServersCpu::start(db_servers(db.dialect));
    let start = Instant::now();
    let rows = db.raw_claim_loop(raw_batch(cfg)).await;
    let secs = start.elapsed().as_secs_f64();
    let db_cpu = db_cpu.seconds();
    db.drop_db().await;
    let rows = rows?;
    check("raw", rows == n, || format!("the claim loop processed {rows} rows of {n}"))?;
    let db_rate = rows as f64 / secs.max(1e-9);

    let broker = Broker::new(cfg);
    let broker_cpu = sys::ServersCpu::start(broker_servers(cfg.transport));
    let broker_rate = broker.raw_publish(cfg.n).await;
    let broker_cpu = broker_cpu.seconds();
    broker.cleanup().await;
    let broker_rate = broker_rate?;
    let limit = broker_rate.map_or(db_rate, |b| b.min(db_rate));
    let together_per_s = match broker_rate {
        Some(_) => Some(raw_together(cfg).await?),
        None => None,
    };
    Ok(RawResult {
        db_rows: rows,
        db_rows_per_s: db_rate,
        db_server_cpu_us_per_row: cpu_per(db_cpu, rows),
        broker_msgs_per_s: broker_rate,
        broker_server_cpu_us_per_msg: broker_rate.map(|_| cpu_per(broker_cpu, n)),
        limit_per_s: limit,
        together_per_s,
    })
}

/// Both raw loops at once, each over `n`: `n` divided by the time until both are done. The
/// limit of a relay on this machine when the database and the broker share its cores (a drain
/// needs both for every message), always below `min(raw DB, raw broker)` on a machine whose
/// cores each alone saturates.
async fn raw_together(cfg: &BenchConfig) -> Result<f64> {
    let n = cfg.n as u64;
    let db = BenchDb::fresh(&cfg.store, 4).await?;
    db.insert_rows(0, n, "pending", cfg.keys).await?;
    db.analyze().await?;
    let broker = Broker::new(cfg);
    let start = Instant::now();
    let (rows, published) = tokio::join!(db.raw_claim_loop(raw_batch(cfg)), broker.raw_publish(cfg.n));
    let secs = start.elapsed().as_secs_f64();
    db.drop_db().await;
    broker.cleanup().await;
    let rows = rows?;
    published?;
    check("raw", rows == n, || format!("the claim loop beside the broker processed {rows} rows of {n}"))?;
    Ok(n as f64 / secs.max(1e-9))
}

/// The raw loop's batch: the relay's batch size.
fn raw_batch(cfg: &BenchConfig) -> i64 {
    i64::try_from(cfg.batch_size).unwrap_or(500)
}

/// The command names of the database server's processes (none for SQLite: in process).
fn db_servers(dialect: outbox_store::Dialect) -> &'static [&'static str] {
    match dialect {
        outbox_store::Dialect::Postgres => &["postgres"],
        outbox_store::Dialect::MySql => &["mariadbd", "mysqld"],
        outbox_store::Dialect::Sqlite => &[],
    }
}

/// The command names of the broker's processes (none for the null transport).
fn broker_servers(kind: crate::TransportKind) -> &'static [&'static str] {
    match kind {
        crate::TransportKind::Nats => &["nats-server"],
        crate::TransportKind::Redis => &["redis-server"],
        crate::TransportKind::Rabbitmq => &["beam.smp"],
        crate::TransportKind::Null => &[],
    }
}

/// Drains a backlog of `cfg.n` with `relays` relay instances (each with its own pool).
async fn drain(cfg: &BenchConfig, relays: usize, limit: Option<Limits>) -> Result<DrainResult> {
    let db = BenchDb::fresh(&cfg.store, POOL).await?;
    let result = drain_on(cfg, &db, relays, limit).await;
    db.drop_db().await;
    result
}

async fn drain_on(
    cfg: &BenchConfig,
    db: &BenchDb,
    relays: usize,
    limit: Option<Limits>,
) -> Result<DrainResult> {
    let n = cfg.n as u64;
    db.insert_rows(0, n, "pending", cfg.keys).await?;
    db.analyze().await?;
    let broker = Broker::new(cfg);
    let result = async {
        let transport = broker.transport().await?;
        // A consumer reading during the drain would share the two cores with the relays, the
        // database and the broker, which neither raw limit does: by default it reads the
        // stream (queue) once the relays have stopped. The null transport reports its
        // publishes as they happen, so it is tapped from the start.
        let during = cfg.consume_during_drain || cfg.transport == crate::TransportKind::Null;
        let mut arrivals = if during { Some(broker.consume().await?) } else { None };
        let mut stores = vec![db.outbox.clone()];
        for _ in 1..relays {
            stores.push(AnyOutbox::connect(&db.url, 8).await?);
        }
        let cpu0 = sys::cpu_time();
        let db_cpu = sys::ServersCpu::start(db_servers(db.dialect));
        let broker_cpu = sys::ServersCpu::start(broker_servers(cfg.transport));
        let start = Instant::now();
        let running: Vec<Running> = stores
            .into_iter()
            .enumerate()
            .map(|(i, s)| start_relay(s, transport.clone(), cfg, i, None))
            .collect::<Result<_>>()?;
        let delivered = |rs: &[Running]| rs.iter().map(|r| RelayStats::get(&r.stats.delivered)).sum::<u64>();
        let deadline = Duration::from_secs(600 + n / 100);
        while delivered(&running) < n && start.elapsed() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let secs = start.elapsed().as_secs_f64();
        let cpu = sys::cpu_time().saturating_sub(cpu0).as_secs_f64();
        let (db_cpu, broker_cpu) = (db_cpu.seconds(), broker_cpu.seconds());
        let got = delivered(&running);
        let claims: u64 = running.iter().map(|r| RelayStats::get(&r.stats.claims)).sum();
        // Let the last settle land, then stop.
        let settled = db::wait_until(Duration::from_secs(30), Duration::from_millis(20), || async {
            Ok(db.count("sent").await? >= i64::try_from(n).unwrap_or(i64::MAX))
        })
        .await?;
        for r in running {
            r.stop().await;
        }
        let mut arrivals = match arrivals.take() {
            Some(a) => a,
            None => broker.consume().await?,
        };
        let mut seen = Seen::default();
        seen.collect(&mut arrivals, cfg.n, Duration::from_secs(30)).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        seen.drain(&mut arrivals);
        check("drain", got >= n, || format!("{got} of {n} messages delivered within {deadline:?}"))?;
        check("drain", settled, || "not every message is marked sent".into())?;
        let received = seen.first.len() as u64;
        check("drain", received == n, || {
            format!("the consumer received {received} distinct messages of {n}")
        })?;
        check("drain", relays == 1 || seen.duplicates == 0, || {
            format!("{} messages were delivered twice by {relays} relays", seen.duplicates)
        })?;
        let rate = n as f64 / secs.max(1e-9);
        Ok(DrainResult {
            relays,
            n,
            seconds: secs,
            msgs_per_s: rate,
            ratio_to_limit: ratio(rate, limit.map(|l| l.min)),
            ratio_to_together: ratio(rate, limit.and_then(|l| l.together)),
            consumer_received: received,
            duplicates: seen.duplicates,
            claims,
            cpu_s: cpu,
            db_server_cpu_us_per_msg: cpu_per(db_cpu, n),
            broker_server_cpu_us_per_msg: cpu_per(broker_cpu, n),
            peak_rss_mib: sys::peak_rss_mib(),
        })
    }
    .await;
    broker.cleanup().await;
    result
}

async fn latency(cfg: &BenchConfig) -> Result<LatencyResult> {
    let db = BenchDb::fresh(&cfg.store, POOL).await?;
    let result = latency_on(cfg, &db).await;
    db.drop_db().await;
    result
}

async fn latency_on(cfg: &BenchConfig, db: &BenchDb) -> Result<LatencyResult> {
    let keys = cfg.keys;
    db.create_business_table().await?;
    // The hot backlog, if any: ids 1..=backlog (a fresh table), keys of their own.
    let backlog = cfg.latency_backlog;
    if backlog > 0 {
        db.insert_rows(1, backlog, "pending", cfg.latency_backlog_keys).await?;
        db.prefix_keys("hot-").await?;
        db.analyze().await?;
    }
    let broker = Broker::new(cfg);
    let result = async {
        let (confirm_tx, mut confirmations) = tokio::sync::mpsc::unbounded_channel();
        let transport: Arc<dyn Transport> =
            Arc::new(crate::confirmed::Confirmed::new(broker.transport().await?, confirm_tx));
        let mut arrivals = broker.consume().await?;
        // The relay's pool: the bench's, or one of its own sized as the daemon's, and then the
        // daemon's budget too (`outbox relay` always shares one between its stores).
        let own_pool = match cfg.relay_pool {
            Some(n) => Some(db.reopened(n).await?),
            None => None,
        };
        let relay_outbox = own_pool.as_ref().map_or(&db.outbox, |r| &r.outbox);
        let budget = own_pool.as_ref().map(|_| outbox_relay::Budget::new(outbox_relay::Budget::DEFAULT_SIZE));
        let relay = start_relay(relay_outbox.clone(), transport, cfg, 0, budget)?;
        // The load's writer: the relay's own outbox, or one of its own (another process's).
        let apart = if cfg.latency_writer_apart { Some(db.reopened(POOL).await?) } else { None };
        let writer = apart.as_ref().map_or(relay_outbox, |w| &w.outbox);
        // Let the relay settle into its idle state (with a backlog, the load starts at once,
        // beside its drain).
        if backlog == 0 {
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        let (beside0, continued0) =
            (RelayStats::get(&relay.stats.claims_beside), RelayStats::get(&relay.stats.runs_continued));
        let looks0 = RelayStats::get(&relay.stats.lane_looks);
        let lane_left0 = RelayStats::get(&relay.stats.lane_left);
        let claimed0 = RelayStats::get(&relay.stats.claimed);
        let claims0 = RelayStats::get(&relay.stats.claims);
        let kinds0 = relay.stats.claim_kinds();
        let left0 = RelayStats::get(&relay.stats.ids_left_to_the_window);
        let held0 = RelayStats::get(&relay.stats.wake_ups_held);
        let xacts0 =
            if db.dialect == outbox_store::Dialect::Postgres { db.server_queries().await? } else { None };
        let scan0 = RelayStats::get(&relay.stats.claimed_on_scan);
        let times = || {
            let (c, s) = (relay.stats.claim_duration.snapshot(), relay.stats.settle_duration.snapshot());
            ((c.count, c.sum_secs), (s.count, s.sum_secs))
        };
        let times0 = times();
        let db_cpu = sys::ServersCpu::start(db_servers(db.dialect));

        let total = (u64::from(cfg.rate) * cfg.latency_duration.as_secs().max(1)) as usize;
        let period = Duration::from_secs_f64(1.0 / f64::from(cfg.rate));
        let (tx, mut rx) =
            tokio::sync::mpsc::unbounded_channel::<Result<(MessageId, Instant, Instant, Instant)>>();
        let start = tokio::time::Instant::now();
        let errors = Arc::new(AtomicU64::new(0));
        for i in 0..total {
            // Open loop: each transaction starts at its scheduled time, whatever the others do.
            let scheduled = start + period * u32::try_from(i).unwrap_or(u32::MAX);
            tokio::time::sleep_until(scheduled).await;
            let tx = tx.clone();
            let outbox = writer.clone();
            tokio::spawn(async move {
                let begun = Instant::now();
                let account = rand::random::<i64>().rem_euclid(db::ACCOUNTS) + 1;
                let msg = db::message(i as u64, keys);
                let r = db::business_tx(&outbox, account, Some(&msg)).await.and_then(|(id, committed)| {
                    id.map(|id| (id, scheduled.into_std(), begun, committed))
                        .ok_or_else(|| Error::Config("enqueue returned no id".into()))
                });
                let _ = tx.send(r);
            });
        }
        drop(tx);
        let mut commits = Vec::with_capacity(total);
        while let Some(r) = rx.recv().await {
            match r {
                Ok(c) => commits.push(c),
                Err(e) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "A business transaction failed");
                }
            }
        }
        let gen_secs = start.elapsed().as_secs_f64();
        let unsent_when_load_ended = if backlog > 0 { db.unsent_up_to(backlog).await? } else { 0 };
        let mut seen = Seen::default();
        let backlog_n = usize::try_from(backlog).unwrap_or(usize::MAX);
        seen.collect(&mut arrivals, commits.len().saturating_add(backlog_n), Duration::from_secs(30)).await;
        let backlog_missing = (1..=backlog).filter(|id| !seen.first.contains_key(&(*id as i64))).count();
        let backlog_beside = (backlog > 0).then(|| BacklogBeside {
            messages: backlog,
            keys: cfg.latency_backlog_keys,
            unsent_when_load_ended,
            claims_beside: RelayStats::get(&relay.stats.claims_beside).saturating_sub(beside0),
            lane_looks: RelayStats::get(&relay.stats.lane_looks).saturating_sub(looks0),
            lane_left: RelayStats::get(&relay.stats.lane_left).saturating_sub(lane_left0),
            runs_continued: RelayStats::get(&relay.stats.runs_continued).saturating_sub(continued0),
        });
        // Every confirmation precedes its message's arrival at the consumer.
        let mut confirmed = Seen::default();
        confirmed.drain(&mut confirmations);
        let claimed = RelayStats::get(&relay.stats.claimed) - claimed0;
        let on_scan = RelayStats::get(&relay.stats.claimed_on_scan) - scan0;
        let claims = RelayStats::get(&relay.stats.claims) - claims0;
        let claim_kinds = relay
            .stats
            .claim_kinds()
            .iter()
            .zip(&kinds0)
            .map(|(k, k0)| ClaimKindRow {
                kind: k.kind.name(),
                claims: k.claims.saturating_sub(k0.claims),
                empty: k.empty.saturating_sub(k0.empty),
            })
            .collect();
        let ids_left_to_the_window =
            RelayStats::get(&relay.stats.ids_left_to_the_window).saturating_sub(left0);
        let wake_ups_held = RelayStats::get(&relay.stats.wake_ups_held).saturating_sub(held0);
        let times1 = times();
        let db_cpu = db_cpu.seconds();
        let (claim_ms_mean, settle_ms_mean) =
            (mean_ms_between(times0.0, times1.0), mean_ms_between(times0.1, times1.1));
        let xacts1 = if xacts0.is_some() { db.server_queries().await? } else { None };
        relay.stop().await;
        let per_msg = |x: u64| x as f64 / (commits.len().max(1)) as f64;
        let db_xacts_per_msg = match (xacts0, xacts1) {
            (Some(a), Some(b)) => Some(per_msg(b.saturating_sub(a).saturating_sub(2))),
            _ => None,
        };

        let (mut c2c, mut s2c, mut txd) = (Recorder::new(), Recorder::new(), Recorder::new());
        let mut c2b = Recorder::new();
        let mut left = 0_u64;
        for (id, scheduled, begun, committed) in &commits {
            txd.record(committed.saturating_duration_since(*begun));
            if let Some(at) = confirmed.first.get(&id.0) {
                c2b.record(at.saturating_duration_since(*committed));
            }
            match seen.first.get(&id.0) {
                Some(at) => {
                    c2c.record(at.saturating_duration_since(*committed));
                    s2c.record(at.saturating_duration_since(*scheduled));
                }
                None => left += 1,
            }
        }
        let failed = errors.load(Ordering::Relaxed);
        check("latency", failed == 0, || format!("{failed} business transactions failed"))?;
        check("latency", left == 0, || format!("{left} messages were not received within 30 s"))?;
        check("latency", backlog_missing == 0, || {
            format!("{backlog_missing} messages of the backlog were not received within 30 s")
        })?;
        Ok(LatencyResult {
            offered_per_s: cfg.rate,
            achieved_per_s: commits.len() as f64 / gen_secs.max(1e-9),
            sent: commits.len() as u64,
            received: (commits.len() as u64).saturating_sub(left),
            left_behind: left,
            duplicates: seen.duplicates,
            commit_to_confirmed: c2b.summary(),
            commit_to_consumer: c2c.summary(),
            scheduled_to_consumer: s2c.summary(),
            transaction: txd.summary(),
            fast_path_share: if claimed == 0 { 0.0 } else { 1.0 - on_scan as f64 / claimed as f64 },
            claims_per_msg: per_msg(claims),
            claim_kinds,
            ids_left_to_the_window,
            wake_ups_held,
            claim_ms_mean,
            settle_ms_mean,
            db_xacts_per_msg,
            db_server_cpu_us_per_msg: (!db_servers(db.dialect).is_empty())
                .then(|| cpu_per(db_cpu, commits.len() as u64)),
            peak_rss_mib: sys::peak_rss_mib(),
            backlog: backlog_beside,
            writer_apart: apart.is_some(),
            relay_pool: cfg.relay_pool,
        })
    }
    .await;
    broker.cleanup().await;
    result
}

/// A mode of the enqueue scenario's business transaction.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// The business `UPDATE` alone.
    Without,
    /// With the library's enqueue.
    Library,
    /// With a hand-written `INSERT` of the same message.
    RawInsert,
}

async fn enqueue(cfg: &BenchConfig) -> Result<EnqueueResult> {
    const MODES: [Mode; 3] = [Mode::Without, Mode::Library, Mode::RawInsert];
    let keys = cfg.keys;
    let per_mode = cfg.enqueue_txs.max(1);
    let db = BenchDb::fresh(&cfg.store, POOL).await?;
    let result = async {
        db.create_business_table().await?;
        let mut rows = Vec::new();
        let mut seq = 0_u64;
        for clients in [1_usize, 8] {
            // Every client takes the three modes in turn, one transaction each (client `c`
            // starting at mode `c`), so the modes share the same moments of a noisy machine
            // and, with 8 clients, the same mix of neighbours. (Phases of one mode after another
            // let a phase's start and the machine's drift weigh on one mode: the same code
            // measured 0.88-0.98 of the raw INSERT with one client depending on the phases'
            // length.)
            let mut tasks = tokio::task::JoinSet::new();
            for c in 0..clients {
                let outbox = db.outbox.clone();
                let base = seq + (c * per_mode * MODES.len()) as u64;
                tasks.spawn(async move {
                    let mut recorders = [Recorder::new(), Recorder::new(), Recorder::new()];
                    let mut busy = [Duration::ZERO; 3];
                    for k in 0..per_mode * MODES.len() {
                        let m = (k + c) % MODES.len();
                        let account = rand::random::<i64>().rem_euclid(db::ACCOUNTS) + 1;
                        let msg = db::message(base + k as u64, keys);
                        let t = Instant::now();
                        match MODES[m] {
                            Mode::Without => {
                                db::business_tx(&outbox, account, None).await?;
                            }
                            Mode::Library => {
                                db::business_tx(&outbox, account, Some(&msg)).await?;
                            }
                            Mode::RawInsert => db::business_tx_raw_insert(&outbox, account, &msg).await?,
                        }
                        let took = t.elapsed();
                        recorders[m].record(took);
                        busy[m] += took;
                    }
                    Ok::<_, Error>((recorders, busy))
                });
            }
            let mut recorders = [Recorder::new(), Recorder::new(), Recorder::new()];
            let mut busy = [0.0_f64; 3];
            while let Some(r) = tasks.join_next().await {
                let (r, b) = r.map_err(|e| Error::Config(format!("a client task failed: {e}")))??;
                for m in 0..MODES.len() {
                    recorders[m].add(&r[m]);
                    busy[m] += b[m].as_secs_f64();
                }
            }
            seq += (clients * per_mode * MODES.len()) as u64;
            // A mode's rate: its transactions over the time the clients spent in it (each
            // client's share of the wall clock, summed over clients and divided by them).
            let count = (clients * per_mode) as f64;
            let rate = |m: usize| count / (busy[m] / clients as f64).max(1e-9);
            let [without, with, raw] = recorders;
            let (w, wo) = (with.summary(), without.summary());
            let (rate_without, rate_with, rate_raw_insert) = (rate(0), rate(1), rate(2));
            rows.push(EnqueueRow {
                clients,
                without: wo,
                with: w,
                rate_without,
                rate_with,
                ratio: rate_with / rate_without.max(1e-9),
                added_p50_ms: w.p50_ms - wo.p50_ms,
                added_p99_ms: w.p99_ms - wo.p99_ms,
                raw_insert: raw.summary(),
                rate_raw_insert,
                ratio_to_raw_insert: rate_with / rate_raw_insert.max(1e-9),
            });
        }
        Ok(EnqueueResult { rows })
    }
    .await;
    db.drop_db().await;
    result
}

async fn scale(cfg: &BenchConfig, limit: Option<Limits>) -> Result<ScaleResult> {
    let mut drains = Vec::new();
    for &r in &cfg.relays {
        sys::reset_peak_rss();
        drains.push(drain(cfg, r.max(1), limit).await?);
    }
    let mut claims = Vec::new();
    for &size in &cfg.sent_rows {
        claims.push(claim_at(cfg, size).await?);
    }
    Ok(ScaleResult { drains, claims })
}

async fn claim_at(cfg: &BenchConfig, size: u64) -> Result<ClaimAtSize> {
    let db = BenchDb::fresh(&cfg.store, 4).await?;
    let result = async {
        let t = Instant::now();
        db.insert_rows(0, size, "sent", cfg.keys).await?;
        let generate_s = t.elapsed().as_secs_f64();
        let batch = cfg.batch_size as u64;
        let pending = batch * 20;
        db.insert_rows(size, pending, "pending", cfg.keys).await?;
        db.analyze().await?;
        let owner = "bench-claim";
        let mut rec = Recorder::new();
        let mut claimed = 0_u64;
        loop {
            let t = Instant::now();
            let got = db.outbox.claim(owner, cfg.batch_size, Duration::from_secs(30)).await?;
            if got.is_empty() {
                break;
            }
            rec.record(t.elapsed());
            claimed += got.len() as u64;
            let settlement = Settlement { sent: got.iter().map(|m| m.id).collect(), ..Settlement::default() };
            db.outbox.settle(owner, &settlement).await?;
        }
        check("scale", claimed == pending, || format!("claimed {claimed} of {pending} pending rows"))?;
        Ok(ClaimAtSize { sent_rows: size, generate_s, claim: rec.summary() })
    }
    .await;
    db.drop_db().await;
    result
}

async fn idle(cfg: &BenchConfig) -> Result<IdleResult> {
    let db = BenchDb::fresh(&cfg.store, 4).await?;
    let broker = Broker::new(cfg);
    let result = async {
        let transport = broker.transport().await?;
        let relay = start_relay(db.outbox.clone(), transport, cfg, 0, None)?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (cpu0, q0, c0) =
            (sys::cpu_time(), db.server_queries().await?, RelayStats::get(&relay.stats.claims));
        let start = Instant::now();
        tokio::time::sleep(cfg.idle_duration).await;
        let secs = start.elapsed().as_secs_f64();
        let cpu = sys::cpu_time().saturating_sub(cpu0).as_secs_f64();
        let c1 = RelayStats::get(&relay.stats.claims);
        let q1 = db.server_queries().await?;
        relay.stop().await;
        // Our own two sampling statements are not the relay's.
        let queries = match (q0, q1) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a).saturating_sub(2) as f64 / secs),
            _ => None,
        };
        Ok(IdleResult {
            seconds: secs,
            cpu_s: cpu,
            cpu_percent: 100.0 * cpu / secs,
            server_queries_per_s: queries,
            claims_per_s: (c1 - c0) as f64 / secs,
        })
    }
    .await;
    broker.cleanup().await;
    db.drop_db().await;
    result
}
