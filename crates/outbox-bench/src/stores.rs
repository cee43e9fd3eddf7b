//! The `stores` scenario: one relay process over many databases (tenants, shards), as
//! `outbox relay` runs it with many `[[stores]]`: one relay engine per store, one shared
//! [`Budget`] of batches in flight.
//!
//! 1. **Idle**: every store empty. After the pools' idle timeout has passed: the connections
//!    the relay holds per server, the transactions (PostgreSQL, per database) or statements
//!    (MariaDB, server-wide) per second, and the CPU of the process.
//! 2. **Fair drain**: a few stores get a large backlog (written by SQL, so PostgreSQL stores
//!    are woken by `NOTIFY`, MariaDB stores by their scan) while every other store receives a
//!    message every `trickle_period` from a writer of its own (a short-lived connection, not the
//!    relay's: no in-process wake-up). Reported: the big drain's rate, each message's commit to
//!    broker-confirmed latency in the trickling stores while the backlog drains (a starved store
//!    shows here), and the peak connections.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_core::{Envelope, Outcome, Transport};
use outbox_relay::{Budget, Destination, Relay, RelayConfig, RelayStats, Route};
use outbox_store::{AnyOutbox, Dialect};
use serde::Serialize;
use sqlx::{ConnectOptions, Connection};
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::db::{self, BenchDb};
use crate::stats::{Recorder, Summary};
use crate::{sys, BenchConfig, Error, Result};

/// Where the stores of the scenario live: `count` databases on the server of `url`.
#[derive(Debug, Clone, Serialize)]
pub struct StoreServer {
    /// The server (the bench creates and drops its databases there).
    #[serde(serialize_with = "crate::redacted")]
    pub url: String,
    /// How many databases.
    pub count: usize,
}

impl FromStr for StoreServer {
    type Err = Error;

    /// `URL=COUNT` (the last `=` separates them).
    fn from_str(s: &str) -> Result<StoreServer> {
        let (url, count) = s.rsplit_once('=').ok_or_else(|| {
            Error::Config(format!("expected URL=COUNT, got {:?}", outbox_store::redact_url(s)))
        })?;
        let count: usize = count.trim().parse().map_err(|_| {
            Error::Config(format!("the count after the last '=' must be a number, got {:?}", count.trim()))
        })?;
        if count == 0 || count > 1000 {
            return Err(Error::Config(format!("a server holds 1 to 1000 stores, got {count}")));
        }
        Dialect::of_url(url)?;
        Ok(StoreServer { url: url.to_owned(), count })
    }
}

/// What the scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct StoresResult {
    /// Stores per server kind.
    pub postgres_stores: usize,
    /// MySQL / MariaDB stores.
    pub mysql_stores: usize,
    /// The shared budget of batches in flight.
    pub budget: usize,
    /// Idle: seconds measured.
    pub idle_seconds: f64,
    /// Idle: CPU of the process, percent of one core.
    pub idle_cpu_percent: f64,
    /// Idle: connections the relay held on the PostgreSQL server (all its stores together).
    pub idle_pg_connections: i64,
    /// Idle: connections on the MariaDB server.
    pub idle_mysql_connections: i64,
    /// Idle: transactions per second in the PostgreSQL stores' databases, together.
    pub idle_pg_xacts_per_s: Option<f64>,
    /// Idle: statements per second on the MariaDB server (server-wide: other clients count).
    pub idle_mysql_queries_per_s: Option<f64>,
    /// Idle: claims per second, every store together.
    pub idle_claims_per_s: f64,
    /// Idle: connections the stores' pools opened while idle, together (a relay whose store
    /// has nothing to send opens none).
    pub idle_connections_opened: u64,
    /// Stores given a backlog.
    pub big_stores: usize,
    /// Messages in each backlog.
    pub backlog_per_store: u64,
    /// Seconds until every backlog was delivered.
    pub drain_seconds: f64,
    /// The backlogs' messages per second, together.
    pub drain_msgs_per_s: f64,
    /// Seconds until the first and the last big store was done.
    pub big_store_done_s: (f64, f64),
    /// Messages the trickling stores received during the drain.
    pub trickle_messages: u64,
    /// Their commit to broker-confirmed latency.
    pub trickle_latency: Summary,
    /// The same, PostgreSQL stores only (woken by `NOTIFY`).
    pub trickle_latency_pg: Summary,
    /// The same, MySQL/MariaDB stores only (no push from a foreign writer: found by the scan,
    /// every `idle_interval`).
    pub trickle_latency_mysql: Summary,
    /// Turns of the budget taken during the drain, every store together.
    pub drain_budget_turns: u64,
    /// Their mean wait in the budget's queue, ms.
    pub drain_budget_wait_ms: f64,
    /// Shares parked after a batch and taken back by their store's next claim during the
    /// drain (each a turn, and a connection opened, saved: see `outbox_relay::Budget`).
    pub drain_budget_reused: u64,
    /// Parked shares given back during the drain for a store that found none free.
    pub drain_budget_evicted: u64,
    /// Connections the stores' pools opened during the drain, together (see
    /// `outbox_store::Outbox::connections_opened`): on a crowded budget about one per turn,
    /// none for a share taken back parked.
    pub drain_connections_opened: u64,
    /// Claims by the trickling stores during the drain, per trickle message.
    pub trickle_claims_per_message: f64,
    /// The idle relays' looks (keeper ticks: one statement each on its connection) per
    /// trickling store and second during the drain, PostgreSQL stores and MySQL/MariaDB
    /// stores (the latter look every `active_scan_interval` while messages keep coming).
    pub trickle_looks_per_store_s: (f64, f64),
    /// The trickling stores' mean claim during the drain, ms (a connection opened for it
    /// included), and their mean settlement, ms.
    pub trickle_claim_ms: f64,
    /// Their mean settlement, ms.
    pub trickle_settle_ms: f64,
    /// Most connections seen on each server during the drain (sampled every 100 ms; the
    /// writers' short-lived connections excluded on PostgreSQL, included on MariaDB).
    pub peak_pg_connections: i64,
    /// On MariaDB.
    pub peak_mysql_connections: i64,
    /// Peak resident memory of the process, MiB.
    pub peak_rss_mib: f64,
}

/// The `application_name` of the relay's PostgreSQL connections in this scenario (how its
/// connections are told from the writers').
const RELAY_APP: &str = "outbox-bench-relay";

/// Every message's delivery at the broker, by store.
type Confirmed = Arc<Mutex<HashMap<(usize, i64), Instant>>>;

/// A transport that notes when the broker confirmed each message of store `store`.
#[derive(Debug)]
struct Stamped {
    inner: Arc<dyn Transport>,
    store: usize,
    confirmed: Confirmed,
}

#[async_trait::async_trait]
impl Transport for Stamped {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        let out = self.inner.publish(batch).await;
        let now = Instant::now();
        if let Ok(mut c) = self.confirmed.lock() {
            for (e, o) in batch.iter().zip(&out) {
                if matches!(o, Outcome::Delivered) {
                    c.entry((self.store, e.id.0)).or_insert(now);
                }
            }
        }
        out
    }

    fn max_payload_bytes(&self) -> Option<usize> {
        self.inner.max_payload_bytes()
    }
}

/// One store: its database and its running relay.
struct Store<'a> {
    db: &'a BenchDb,
    stats: Arc<RelayStats>,
    outbox: AnyOutbox,
}

/// Connections to the bench's databases on a server: PostgreSQL counts the relay's only (by
/// `application_name`), MariaDB every one (its writers' last a statement).
async fn connections(admin: &str, dialect: Dialect, prefix: &str) -> Result<i64> {
    let like = format!("{prefix}%");
    Ok(match dialect {
        Dialect::Postgres => {
            let mut c = sqlx::postgres::PgConnectOptions::from_str(admin)?.connect().await?;
            let n = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE datname LIKE $1 AND application_name = $2",
            )
            .bind(&like)
            .bind(RELAY_APP)
            .fetch_one(&mut c)
            .await?;
            c.close().await?;
            n
        }
        Dialect::MySql => {
            let mut c = sqlx::mysql::MySqlConnectOptions::from_str(admin)?.connect().await?;
            let n = sqlx::query_scalar("SELECT count(*) FROM information_schema.processlist WHERE db LIKE ?")
                .bind(&like)
                .fetch_one(&mut c)
                .await?;
            c.close().await?;
            n
        }
        Dialect::Sqlite => 0,
    })
}

/// Transactions in the PostgreSQL databases named `prefix...` together.
async fn pg_xacts(admin: &str, prefix: &str) -> Result<u64> {
    let mut c = sqlx::postgres::PgConnectOptions::from_str(admin)?.connect().await?;
    sqlx::query("SELECT pg_stat_clear_snapshot()").execute(&mut c).await?;
    let n: Option<i64> = sqlx::query_scalar(
        "SELECT sum(xact_commit + xact_rollback)::int8 FROM pg_stat_database WHERE datname LIKE $1",
    )
    .bind(format!("{prefix}%"))
    .fetch_one(&mut c)
    .await?;
    c.close().await?;
    Ok(u64::try_from(n.unwrap_or(0)).unwrap_or(0))
}

/// The bench's servers, by dialect (the first of each is the one measured).
struct Servers {
    pg: Option<String>,
    my: Option<String>,
}

impl Servers {
    /// Every connection to the bench's databases on the PostgreSQL server, whoever opened it.
    async fn setup_connections(&self, prefix: &str) -> Result<i64> {
        let Some(admin) = &self.pg else { return Ok(0) };
        let mut c = sqlx::postgres::PgConnectOptions::from_str(admin)?.connect().await?;
        let n = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE datname LIKE $1")
            .bind(format!("{prefix}%"))
            .fetch_one(&mut c)
            .await?;
        c.close().await?;
        Ok(n)
    }

    async fn connections(&self, prefix: &str) -> Result<(i64, i64)> {
        let pg = match &self.pg {
            Some(u) => connections(u, Dialect::Postgres, prefix).await?,
            None => 0,
        };
        let my = match &self.my {
            Some(u) => connections(&u.replacen("mariadb://", "mysql://", 1), Dialect::MySql, prefix).await?,
            None => 0,
        };
        Ok((pg, my))
    }

    async fn counters(&self, prefix: &str, my_probe: Option<&BenchDb>) -> Result<(Option<u64>, Option<u64>)> {
        let pg = match &self.pg {
            Some(u) => Some(pg_xacts(u, prefix).await?),
            None => None,
        };
        let my = match my_probe {
            Some(db) => db.server_queries().await?,
            None => None,
        };
        Ok((pg, my))
    }
}

/// Runs the scenario (see the module).
pub(crate) async fn run(cfg: &BenchConfig) -> Result<StoresResult> {
    let prefix = format!("outbox_bench_{}_", std::process::id());
    let mut dbs = Vec::new();
    let mut servers = Servers { pg: None, my: None };
    let setup = async {
        for s in &cfg.many_stores {
            let dialect = Dialect::of_url(&s.url)?;
            match dialect {
                Dialect::Postgres => servers.pg = servers.pg.take().or(Some(s.url.clone())),
                Dialect::MySql => servers.my = servers.my.take().or(Some(s.url.clone())),
                Dialect::Sqlite => {
                    return Err(Error::Config("the stores scenario needs PostgreSQL or MySQL servers".into()))
                }
            }
            for _ in 0..s.count {
                let db = BenchDb::fresh(&s.url, 1).await?;
                // Its connection would count against the server's limit for the whole run.
                db.park().await;
                dbs.push(db);
            }
        }
        Ok::<_, Error>(())
    }
    .await;
    let result = match setup {
        Ok(()) => {
            // The parked pools' connections go shortly after (a pooled connection is handed
            // back by a task of its own); the relays start on a server without them.
            let _ = db::wait_until(Duration::from_secs(30), Duration::from_millis(100), || async {
                Ok(servers.setup_connections(&prefix).await? == 0)
            })
            .await;
            run_on(cfg, &dbs, &servers, &prefix).await
        }
        Err(e) => Err(e),
    };
    for db in dbs {
        db.drop_db().await;
    }
    result
}

async fn run_on(cfg: &BenchConfig, dbs: &[BenchDb], servers: &Servers, prefix: &str) -> Result<StoresResult> {
    let broker = Broker::new(cfg);
    let result = async {
        let transport = broker.transport().await?;
        let confirmed: Confirmed = Arc::default();
        let budget = Budget::new(cfg.stores_budget);
        let stop = CancellationToken::new();
        let mut stores = Vec::new();
        let mut handles = Vec::new();
        let mut engines = Vec::new();
        let started = async {
            for (i, db) in dbs.iter().enumerate() {
                // The relay's own pool, as `outbox relay` connects a store: as small as locked
                // claims allow (a connection per batch in flight, one for the keeper), as docs/benchmarks.md advises
                // for many stores.
                let url = match db.dialect {
                    Dialect::Postgres => with_param(&db.url, "application_name", RELAY_APP),
                    _ => db.url.clone(),
                };
                let pool = u32::try_from(cfg.in_flight.max(1) + 1).unwrap_or(u32::MAX);
                let outbox = AnyOutbox::connect(&url, pool).await?;
                let stamped = Stamped { inner: transport.clone(), store: i, confirmed: confirmed.clone() };
                let config = RelayConfig {
                    owner: format!("bench-{}-store-{i}", std::process::id()),
                    batch_size: cfg.batch_size,
                    max_in_flight_batches: cfg.in_flight,
                    max_run: cfg.max_run,
                    lock_claims: cfg.lock_claims,
                    active_scan_interval: cfg.active_scan_interval,
                    ..RelayConfig::default()
                };
                let relay = Relay::builder(&outbox)
                    .config(config)
                    .budget(budget.clone())
                    .destination(Destination::new("bench", Arc::new(stamped)))
                    .route(Route::new("#", ["bench"]))
                    .build()
                    .map_err(|e| Error::Config(e.to_string()))?;
                stores.push(Store { db, stats: relay.stats(), outbox: outbox.clone() });
                engines.push(relay);
            }
            Ok::<_, Error>(())
        }
        .await;
        // As `outbox relay` does: every store connected before any relay runs.
        for relay in engines {
            handles.push(tokio::spawn(relay.run(stop.clone())));
        }
        let outcome = match started {
            Ok(()) => measure(cfg, &stores, servers, prefix, &confirmed, &budget).await,
            Err(e) => Err(e),
        };
        stop.cancel();
        for h in handles {
            let _ = h.await;
        }
        outcome
    }
    .await;
    broker.cleanup().await;
    result
}

/// `url` with `key=value` added to its query string.
fn with_param(url: &str, key: &str, value: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{key}={value}")
}

async fn measure(
    cfg: &BenchConfig,
    stores: &[Store<'_>],
    servers: &Servers,
    prefix: &str,
    confirmed: &Confirmed,
    budget: &Budget,
) -> Result<StoresResult> {
    let pg_stores = stores.iter().filter(|s| s.db.dialect == Dialect::Postgres).count();
    let my_stores = stores.len() - pg_stores;
    let claims = || stores.iter().map(|s| RelayStats::get(&s.stats.claims)).sum::<u64>();
    let opened = || stores.iter().filter_map(|s| s.outbox.connections_opened()).sum::<u64>();
    // The connections opened at start (migration, first claims) close after the pools' idle
    // timeout; the idle state is measured after it.
    tokio::time::sleep(outbox_store::POOL_IDLE_TIMEOUT * 2 + Duration::from_secs(5)).await;
    let (idle_pg_connections, idle_mysql_connections) = servers.connections(prefix).await?;
    // MariaDB counts statements server-wide, read through one of the stores.
    let my_probe = match stores.iter().find(|s| s.db.dialect == Dialect::MySql) {
        Some(s) => Some(s.db.reopened(1).await?),
        None => None,
    };
    let my_probe = my_probe.as_ref();
    let (pg0, my0) = servers.counters(prefix, my_probe).await?;
    let (cpu0, c0, t0, opened0) = (sys::cpu_time(), claims(), Instant::now(), opened());
    tokio::time::sleep(cfg.idle_duration).await;
    let idle_seconds = t0.elapsed().as_secs_f64();
    let idle_cpu = sys::cpu_time().saturating_sub(cpu0).as_secs_f64();
    let idle_claims = claims() - c0;
    let idle_connections_opened = opened().saturating_sub(opened0);
    let (pg1, my1) = servers.counters(prefix, my_probe).await?;
    // Our own sampling statements (one transaction per sample on PostgreSQL) are not the relay's.
    let per_s = |a: Option<u64>, b: Option<u64>, ours: u64| match (a, b) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a).saturating_sub(ours) as f64 / idle_seconds),
        _ => None,
    };
    let idle_pg_xacts_per_s = per_s(pg0, pg1, 2);
    let idle_mysql_queries_per_s = per_s(my0, my1, 2);

    // The fair drain: the first store of each server kind, then every 16th, gets a backlog.
    sys::reset_peak_rss();
    let mut big: Vec<usize> = [0, pg_stores].into_iter().filter(|&i| i < stores.len()).collect();
    big.extend((1..stores.len()).filter(|&i| i != pg_stores && i % 16 == 0));
    big.dedup();
    big.truncate(cfg.stores_big.max(1));
    let backlog = (cfg.n as u64 / big.len() as u64).max(1);
    let (turns0, waited0) = (budget.turns(), budget.waited());
    let (reused0, evicted0, opened1) = (budget.reused(), budget.evicted(), opened());
    let trickle_claims = || {
        stores
            .iter()
            .enumerate()
            .filter(|(i, _)| !big.contains(i))
            .map(|(_, s)| RelayStats::get(&s.stats.claims))
            .sum::<u64>()
    };
    let trickle_claims0 = trickle_claims();
    // Keeper ticks of the trickling stores, PostgreSQL and MySQL/MariaDB apart, and how many
    // stores of each trickle.
    let trickle_looks = || {
        let mut t = (0_u64, 0_u64, 0_u64, 0_u64);
        for (_, s) in stores.iter().enumerate().filter(|(i, _)| !big.contains(i)) {
            let n = RelayStats::get(&s.stats.idle_ticks);
            if s.db.dialect == Dialect::Postgres {
                (t.0, t.2) = (t.0 + n, t.2 + 1);
            } else {
                (t.1, t.3) = (t.1 + n, t.3 + 1);
            }
        }
        t
    };
    let looks0 = trickle_looks();
    // (count, seconds) of the trickling stores' claims and settlements.
    let trickle_times = || {
        let mut t = ((0_u64, 0.0_f64), (0_u64, 0.0_f64));
        for (_, s) in stores.iter().enumerate().filter(|(i, _)| !big.contains(i)) {
            let (c, st) = (s.stats.claim_duration.snapshot(), s.stats.settle_duration.snapshot());
            t.0 .0 += c.count;
            t.0 .1 += c.sum_secs;
            t.1 .0 += st.count;
            t.1 .1 += st.sum_secs;
        }
        t
    };
    let times0 = trickle_times();
    let t_start = Instant::now();
    for &i in &big {
        stores[i].db.reopened(1).await?.insert_rows(0, backlog, "pending", cfg.keys).await?;
    }
    let big_total = backlog * big.len() as u64;
    let delivered_big = |c: &HashMap<(usize, i64), Instant>, i: usize| {
        c.keys().filter(|(s, id)| *s == i && *id <= i64::try_from(backlog).unwrap_or(i64::MAX)).count() as u64
    };
    // The writers: one message per trickling store every trickle period, each from a short-lived
    // connection of its own, with the commit instant noted.
    let trickle: Vec<usize> = (0..stores.len()).filter(|i| !big.contains(i)).collect();
    let commits: Arc<Mutex<Vec<(usize, i64, Instant)>>> = Arc::default();
    let writing = CancellationToken::new();
    let mut writers = Vec::new();
    for (k, &i) in trickle.iter().enumerate() {
        let (url, dialect, commits, stop) =
            (stores[i].db.url.clone(), stores[i].db.dialect, commits.clone(), writing.clone());
        let period = cfg.stores_trickle_period;
        // Spread over the period, so the writes do not all land at once.
        let offset = period.mul_f64(k as f64 / trickle.len().max(1) as f64);
        writers.push(tokio::spawn(async move {
            tokio::time::sleep(offset).await;
            let mut seq = 0_u64;
            while !stop.is_cancelled() {
                let t = Instant::now();
                match write_one(&url, dialect, seq).await {
                    Ok(id) => commits.lock().map(|mut c| c.push((i, id, Instant::now()))).unwrap_or(()),
                    Err(e) => tracing::warn!(store = i, error = %e, "A trickle write failed"),
                }
                seq += 1;
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::time::sleep(period.saturating_sub(t.elapsed())) => {}
                }
            }
        }));
    }
    let mut done_at: HashMap<usize, f64> = HashMap::new();
    let (mut peak_pg, mut peak_my) = (0_i64, 0_i64);
    let deadline = Duration::from_secs(600 + big_total / 100);
    while done_at.len() < big.len() && t_start.elapsed() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (pg, my) = servers.connections(prefix).await?;
        (peak_pg, peak_my) = (peak_pg.max(pg), peak_my.max(my));
        let c = confirmed.lock().map(|c| c.clone()).unwrap_or_default();
        for &i in &big {
            if !done_at.contains_key(&i) && delivered_big(&c, i) >= backlog {
                done_at.insert(i, t_start.elapsed().as_secs_f64());
            }
        }
    }
    let looks1 = trickle_looks();
    let looked_s = t_start.elapsed().as_secs_f64().max(1e-9);
    let looks_per_store_s = |d: u64, stores: u64| d as f64 / stores.max(1) as f64 / looked_s;
    let trickle_looks_per_store_s = (
        looks_per_store_s(looks1.0.saturating_sub(looks0.0), looks1.2),
        looks_per_store_s(looks1.1.saturating_sub(looks0.1), looks1.3),
    );
    writing.cancel();
    for w in writers {
        let _ = w.await;
    }
    let drain_budget_turns = budget.turns() - turns0;
    let drain_connections_opened = opened().saturating_sub(opened1);
    let drain_budget_wait = budget.waited().saturating_sub(waited0);
    let drain_trickle_claims = trickle_claims() - trickle_claims0;
    let times1 = trickle_times();
    let (trickle_claim_ms, trickle_settle_ms) = (
        crate::stats::mean_ms_between(times0.0, times1.0),
        crate::stats::mean_ms_between(times0.1, times1.1),
    );
    let written = commits.lock().map(|c| c.clone()).unwrap_or_default();
    // Every trickle message is confirmed (generous bound), then the latencies are read.
    let all_in = db::wait_until(Duration::from_secs(60), Duration::from_millis(50), || {
        let c = confirmed.clone();
        let w = written.clone();
        async move {
            let c = c.lock().map(|c| c.clone()).unwrap_or_default();
            Ok(w.iter().all(|(s, id, _)| c.contains_key(&(*s, *id))))
        }
    })
    .await?;
    crate::scenarios::check("stores", done_at.len() == big.len(), || {
        format!("{} of {} backlogs delivered within {deadline:?}", done_at.len(), big.len())
    })?;
    crate::scenarios::check("stores", all_in, || "a trickle message was not delivered within 60 s".into())?;
    let c = confirmed.lock().map(|c| c.clone()).unwrap_or_default();
    let (mut rec, mut rec_pg, mut rec_my) = (Recorder::new(), Recorder::new(), Recorder::new());
    for (s, id, committed) in &written {
        if let Some(at) = c.get(&(*s, *id)) {
            let latency = at.saturating_duration_since(*committed);
            rec.record(latency);
            match stores[*s].db.dialect {
                Dialect::Postgres => rec_pg.record(latency),
                _ => rec_my.record(latency),
            }
        }
    }
    let first = done_at.values().copied().fold(f64::INFINITY, f64::min);
    let last = done_at.values().copied().fold(0.0, f64::max);
    Ok(StoresResult {
        postgres_stores: pg_stores,
        mysql_stores: my_stores,
        budget: budget.size(),
        idle_seconds,
        idle_cpu_percent: 100.0 * idle_cpu / idle_seconds.max(1e-9),
        idle_pg_connections,
        idle_mysql_connections,
        idle_pg_xacts_per_s,
        idle_mysql_queries_per_s,
        idle_claims_per_s: idle_claims as f64 / idle_seconds.max(1e-9),
        idle_connections_opened,
        big_stores: big.len(),
        backlog_per_store: backlog,
        drain_seconds: last,
        drain_msgs_per_s: big_total as f64 / last.max(1e-9),
        big_store_done_s: (first, last),
        trickle_messages: written.len() as u64,
        drain_budget_turns,
        drain_connections_opened,
        drain_budget_wait_ms: drain_budget_wait.as_secs_f64() * 1000.0 / drain_budget_turns.max(1) as f64,
        drain_budget_reused: budget.reused() - reused0,
        drain_budget_evicted: budget.evicted() - evicted0,
        trickle_claims_per_message: drain_trickle_claims as f64 / (written.len() as f64).max(1.0),
        trickle_looks_per_store_s,
        trickle_claim_ms,
        trickle_settle_ms,
        trickle_latency: rec.summary(),
        trickle_latency_pg: rec_pg.summary(),
        trickle_latency_mysql: rec_my.summary(),
        peak_pg_connections: peak_pg,
        peak_mysql_connections: peak_my,
        peak_rss_mib: sys::peak_rss_mib(),
    })
}

/// Foreign writers connected at once, over every store: the relay's connections plus a
/// writer's per trickling store once their seconds line up exceeded PostgreSQL's default
/// `max_connections` (100) with 64 stores in a release build ("too many clients"; the relay
/// itself never was refused). A message's latency is timed from its commit, after this wait.
static WRITERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

/// One message written by a foreign writer: its own connection, one INSERT, closed. Returns
/// the message id.
async fn write_one(url: &str, dialect: Dialect, seq: u64) -> Result<i64> {
    let _writer = WRITERS.acquire().await.map_err(|e| Error::Config(e.to_string()))?;
    let payload = db::payload(seq, 1);
    Ok(match dialect {
        Dialect::Postgres => {
            let mut c = sqlx::postgres::PgConnectOptions::from_str(url)?.connect().await?;
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO outbox_message (topic, msg_key, payload) VALUES ($1, $2, $3) RETURNING id",
            )
            .bind(db::TOPIC)
            .bind(format!("t-{seq}"))
            .bind(payload)
            .fetch_one(&mut c)
            .await?;
            c.close().await?;
            id
        }
        Dialect::MySql => {
            let mut c = sqlx::mysql::MySqlConnectOptions::from_str(url)?.connect().await?;
            let r = sqlx::query("INSERT INTO outbox_message (topic, msg_key, payload) VALUES (?, ?, ?)")
                .bind(db::TOPIC)
                .bind(format!("t-{seq}"))
                .bind(payload)
                .execute(&mut c)
                .await?;
            c.close().await?;
            i64::try_from(r.last_insert_id()).unwrap_or(i64::MAX)
        }
        Dialect::Sqlite => return Err(Error::Config("the stores scenario needs PostgreSQL or MySQL".into())),
    })
}
