//! `outbox bench`: measures the outbox against real servers and reports every figure as a
//! ratio to the machine's own limits, measured first in the same run.
//!
//! Scenarios (select any subset with [`BenchConfig::scenarios`]):
//!
//! | scenario | what it measures |
//! | --- | --- |
//! | [`Scenario::Raw`] | the database's batched claim-and-mark rate (no broker) and the broker's pipelined confirmed-publish rate (no database) |
//! | [`Scenario::Drain`] | a backlog of `n` messages relayed to the broker: msgs/s and the ratio to min(raw DB, raw broker) |
//! | [`Scenario::Latency`] | an open-loop offered load of single-message business transactions: commit-to-consumer latency percentiles and the fast-path share |
//! | [`Scenario::Enqueue`] | a business transaction updating one row, with and without an enqueue, with 1 and 8 clients |
//! | [`Scenario::Scale`] | the drain with 1, 2 and 4 relays; claim latency with many sent rows in the table |
//! | [`Scenario::Idle`] | CPU seconds and queries per second of an idle relay |
//! | [`Scenario::Stores`] | one relay process over many databases ([`BenchConfig::many_stores`]): connections, idle cost, and a fair drain of a few big backlogs beside trickling stores (not in the default set) |
//!
//! Every scenario runs on a fresh database (created and dropped by the bench), and a fresh
//! broker stream / queue, so results never leak into each other. [`run`] returns a [`Report`];
//! [`report::write`] writes `results.json`, `report.md` and SVG charts.
//!
//! ```no_run
//! # async fn demo() -> Result<(), outbox_bench::Error> {
//! use outbox_bench::{BenchConfig, Scenario, TransportKind};
//! let cfg = BenchConfig {
//!     store: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable".into(),
//!     transport: TransportKind::Nats,
//!     scenarios: vec![Scenario::Raw, Scenario::Drain],
//!     n: 20_000,
//!     ..BenchConfig::default()
//! };
//! let report = outbox_bench::run(&cfg).await?;
//! outbox_bench::report::write(&report, std::path::Path::new("bench-results"))?;
//! # Ok(()) }
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

mod broker;
mod confirmed;
mod db;
mod null;
pub mod report;
mod results;
mod scenarios;
mod stats;
mod stores;
mod sys;

pub use null::NullTransport;
pub use results::{
    BacklogBeside, ClaimAtSize, ClaimKindRow, DrainResult, EnqueueResult, EnqueueRow, IdleResult,
    LatencyResult, RawResult, ScaleResult,
};
pub use stats::Summary;
pub use stores::{StoreServer, StoresResult};

/// What went wrong while benchmarking.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The outbox library failed (store, schema).
    #[error("outbox error: {0}")]
    Outbox(#[from] outbox_core::Error),
    /// A query of the bench itself failed.
    #[error("error communicating with database: {0}")]
    Database(#[from] sqlx::Error),
    /// A broker operation failed.
    #[error("broker error: {0}")]
    Broker(String),
    /// Writing the report failed.
    #[error("cannot write the report: {0}")]
    Io(#[from] std::io::Error),
    /// Drawing a chart failed.
    #[error("cannot draw a chart: {0}")]
    Chart(String),
    /// A scenario finished but its outcome is wrong (messages missing, duplicated, ...).
    #[error("scenario {scenario} failed its check: {reason}")]
    Check {
        /// The scenario.
        scenario: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The configuration is not usable.
    #[error("invalid bench configuration: {0}")]
    Config(String),
}

/// `Result` with the bench's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A bench scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Raw limits: batched claim-and-mark SQL, pipelined confirmed publish.
    Raw,
    /// Drain a backlog.
    Drain,
    /// Commit-to-consumer latency under an open-loop offered load.
    Latency,
    /// Enqueue overhead on a business transaction.
    Enqueue,
    /// Several relays; claim latency with many sent rows.
    Scale,
    /// Cost of an idle relay.
    Idle,
    /// One relay process over many databases.
    Stores,
}

impl Scenario {
    /// Every scenario, in the order they run.
    pub const ALL: [Scenario; 7] = [
        Scenario::Raw,
        Scenario::Drain,
        Scenario::Latency,
        Scenario::Enqueue,
        Scenario::Scale,
        Scenario::Idle,
        Scenario::Stores,
    ];

    /// What runs when no scenario is named: every one on the one store (not `stores`, the
    /// last, which creates its many databases on the servers of [`BenchConfig::many_stores`]).
    pub const DEFAULT: &'static [Scenario] = Scenario::ALL.split_at(6).0;

    /// The scenario's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Raw => "raw",
            Scenario::Drain => "drain",
            Scenario::Latency => "latency",
            Scenario::Enqueue => "enqueue",
            Scenario::Scale => "scale",
            Scenario::Idle => "idle",
            Scenario::Stores => "stores",
        }
    }

    /// Parses a name from [`Scenario::name`].
    pub fn parse(s: &str) -> Result<Scenario> {
        Scenario::ALL.into_iter().find(|x| x.name() == s.trim()).ok_or_else(|| {
            Error::Config(format!(
                "unknown scenario {s:?}: expected raw, drain, latency, enqueue, scale, idle or stores"
            ))
        })
    }
}

/// The broker the relay publishes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// NATS JetStream.
    Nats,
    /// Redis Streams.
    Redis,
    /// RabbitMQ with publisher confirms.
    Rabbitmq,
    /// No broker: every envelope is delivered at once ([`NullTransport`]); isolates the relay's
    /// own cost.
    Null,
}

impl TransportKind {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Nats => "nats",
            TransportKind::Redis => "redis",
            TransportKind::Rabbitmq => "rabbitmq",
            TransportKind::Null => "null",
        }
    }
}

/// What to run and where. Every field has a default suitable for a full run on one machine.
#[derive(Debug, Clone, Serialize)]
pub struct BenchConfig {
    /// Database server URL (`postgres://`, `mysql://` / `mariadb://`) on which the bench creates
    /// and drops one database per scenario, or `sqlite:` (files in the temp directory).
    /// Defaults to `postgres://postgres@127.0.0.1:5432/test?sslmode=disable` (plain, as every figure
    /// in docs/benchmarks.md was measured; TLS costs are the database's, not the relay's).
    #[serde(serialize_with = "redacted")]
    pub store: String,
    /// Broker. Defaults to NATS.
    pub transport: TransportKind,
    /// NATS URL. Defaults to `nats://127.0.0.1:4222`.
    pub nats_url: String,
    /// Redis URL. Defaults to `redis://127.0.0.1:6379`.
    #[serde(serialize_with = "redacted")]
    pub redis_url: String,
    /// AMQP URL. Defaults to `amqp://guest:guest@127.0.0.1:5672/%2f`.
    #[serde(serialize_with = "redacted")]
    pub amqp_url: String,
    /// Scenarios to run. Defaults to all.
    pub scenarios: Vec<Scenario>,
    /// Backlog size of the drain, the scale drains and the raw loops. Defaults to 100,000.
    pub n: usize,
    /// Distinct message keys (per-key order allows one message per key in flight, so this
    /// caps the messages in flight). Defaults to 1,000.
    pub keys: u64,
    /// Offered load of the latency scenario, business transactions per second. Defaults to 1,000.
    pub rate: u32,
    /// Duration of the latency scenario. Defaults to 10 s.
    pub latency_duration: Duration,
    /// A backlog of this many messages on [`BenchConfig::latency_backlog_keys`] hot keys of
    /// their own, written before the latency scenario's relay starts and drained while the
    /// load runs: the load's latency beside a hot backlog. Defaults to 0 (none).
    pub latency_backlog: u64,
    /// The hot keys of that backlog (`hot-k-0`, ...). Defaults to 10.
    pub latency_backlog_keys: u64,
    /// The latency scenario's load is written through a pool of its own, as another process
    /// writes: the relay is not told of its commits (no in-process wake-up, no claim by id of
    /// the ids committed), as with `outbox relay` beside writers in other languages. Defaults
    /// to false (the load is written through the relay's own outbox).
    pub latency_writer_apart: bool,
    /// The latency scenario's relay gets a pool of its own of this many connections, as
    /// `outbox relay` has (`stores[].max_connections`, 4 by default), instead of sharing the
    /// bench's pool of 24, and the daemon's budget of batches in flight
    /// (`relay.total_in_flight_batches`, [`outbox_relay::Budget::DEFAULT_SIZE`]: `outbox relay`
    /// gives its relays one even with one store). Defaults to None (shared, no budget).
    pub relay_pool: Option<u32>,
    /// Transactions per client and mode in the enqueue scenario (the modes interleaved).
    /// Defaults to 2,000.
    pub enqueue_txs: usize,
    /// Relay counts of the scale drains. Defaults to 1, 2, 4.
    pub relays: Vec<usize>,
    /// Sent rows already in the table for the claim-latency part of the scale scenario.
    /// Defaults to 10^4 and 10^5 (10^6 and 10^7 are opt-in: they take minutes to generate).
    pub sent_rows: Vec<u64>,
    /// Duration of the idle measurement. Defaults to 30 s.
    pub idle_duration: Duration,
    /// Relay batch size. Defaults to the relay's default (500).
    pub batch_size: usize,
    /// Relay batches in flight. Defaults to the relay's default (2).
    pub in_flight: usize,
    /// The longest run of one key's consecutive due messages a claim takes. Defaults to the
    /// relay's default (32); 1 takes heads only (the protocol before runs).
    pub max_run: usize,
    /// The relays hold claimed rows locked through the publish (one write per message) where
    /// the store allows it, instead of writing a lease first. Defaults to the relay's default
    /// (true); `false` measures the lease protocol.
    pub lock_claims: bool,
    /// The `stores` scenario's databases: `count` on each server. Defaults to 64 on the
    /// server of [`BenchConfig::store`].
    pub many_stores: Vec<StoreServer>,
    /// The `stores` scenario's budget of batches in flight across every store (the relay's
    /// `relay.total_in_flight_batches`). Defaults to 16.
    pub stores_budget: usize,
    /// Stores given a backlog in the `stores` scenario (`n` messages shared among them).
    /// Defaults to 4.
    pub stores_big: usize,
    /// How often each other store receives a message meanwhile. Defaults to 1 s.
    pub stores_trickle_period: Duration,
    /// The relays' `active_scan_interval` (stores without push look this often while messages
    /// keep coming). Defaults to the relay's default (50 ms); the relay's `idle_interval` (1 s)
    /// measures the stores without the quicker looks.
    pub active_scan_interval: Duration,
    /// The drain's consumer reads while the relays drain, sharing the machine with them,
    /// instead of once they have stopped. Defaults to false: neither raw limit a drain is
    /// compared with carries a consumer (the broker's raw loop only publishes). The null
    /// transport is always read during the drain (it reports its own publishes).
    pub consume_during_drain: bool,
    /// A label for this run (e.g. `before`, `after`), copied into the report.
    pub label: String,
}

fn redacted<S: serde::Serializer>(url: &str, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&outbox_store::redact_url(url))
}

impl Default for BenchConfig {
    fn default() -> Self {
        let relay = outbox_relay::RelayConfig::default();
        BenchConfig {
            store: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable".into(),
            transport: TransportKind::Nats,
            nats_url: "nats://127.0.0.1:4222".into(),
            redis_url: "redis://127.0.0.1:6379".into(),
            amqp_url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            scenarios: Scenario::DEFAULT.to_vec(),
            n: 100_000,
            keys: db::KEYS,
            rate: 1_000,
            latency_duration: Duration::from_secs(10),
            latency_backlog: 0,
            latency_backlog_keys: 10,
            latency_writer_apart: false,
            relay_pool: None,
            enqueue_txs: 2_000,
            relays: vec![1, 2, 4],
            sent_rows: vec![10_000, 100_000],
            idle_duration: Duration::from_secs(30),
            batch_size: relay.batch_size,
            in_flight: relay.max_in_flight_batches,
            max_run: relay.max_run,
            lock_claims: relay.lock_claims,
            many_stores: vec![StoreServer {
                url: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable".into(),
                count: 64,
            }],
            stores_budget: 16,
            stores_big: 4,
            stores_trickle_period: Duration::from_secs(1),
            active_scan_interval: relay.active_scan_interval,
            consume_during_drain: false,
            label: String::new(),
        }
    }
}

/// The machine and software a report was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPUs available to the process.
    pub cpus: usize,
    /// CPU model (from `/proc/cpuinfo`).
    pub cpu_model: String,
    /// Total memory, GiB.
    pub memory_gib: f64,
    /// Kernel release.
    pub kernel: String,
    /// Database server version.
    pub database_version: String,
    /// Load average (1 min) when the run started: other work on the machine.
    pub load_average: f64,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// When the run started (UTC, RFC 3339).
    pub started_at: String,
    /// How long the run took, seconds.
    pub duration_s: f64,
    /// The configuration.
    pub config: BenchConfig,
    /// Database dialect (`postgres`, `mysql`, `sqlite`).
    pub store_kind: String,
    /// The machine.
    pub machine: Machine,
    /// Raw limits.
    pub raw: Option<RawResult>,
    /// Drain.
    pub drain: Option<DrainResult>,
    /// Latency.
    pub latency: Option<LatencyResult>,
    /// Enqueue overhead.
    pub enqueue: Option<EnqueueResult>,
    /// Scale.
    pub scale: Option<ScaleResult>,
    /// Idle cost.
    pub idle: Option<IdleResult>,
    /// Many stores.
    pub stores: Option<StoresResult>,
}

/// Output directory default of the command.
pub fn default_out_dir() -> PathBuf {
    PathBuf::from("bench-results")
}

/// Runs the configured scenarios in order (raw first, so later ratios have their reference).
/// A scenario whose outcome is wrong (a message not delivered, delivered twice by two relays)
/// fails the run with [`Error::Check`]; speed never fails it.
pub async fn run(cfg: &BenchConfig) -> Result<Report> {
    scenarios::run(cfg).await
}
