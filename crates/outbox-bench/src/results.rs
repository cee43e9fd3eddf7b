//! What each scenario measured: the rows of the report (JSON, Markdown, charts).

use serde::Serialize;

use crate::stats::Summary;

/// Raw limits of the machine, measured first.
#[derive(Debug, Clone, Serialize)]
pub struct RawResult {
    /// Rows claimed and marked sent by the bare SQL loop.
    pub db_rows: u64,
    /// Their rate, rows/s.
    pub db_rows_per_s: f64,
    /// CPU of the database server's processes per row of that loop, microseconds (0 for
    /// SQLite, which runs in the bench process).
    pub db_server_cpu_us_per_row: f64,
    /// The broker's pipelined confirmed-publish rate, msgs/s (`None`: null transport, no limit).
    pub broker_msgs_per_s: Option<f64>,
    /// CPU of the broker's processes per message of that publish, microseconds.
    pub broker_server_cpu_us_per_msg: Option<f64>,
    /// min(raw DB, raw broker): the reference of the drain ratios.
    pub limit_per_s: f64,
    /// Both raw loops run at once, `n` each: `n` / the time until both are done. What the
    /// machine allows a relay when the database and the broker share its cores.
    pub together_per_s: Option<f64>,
}

/// One drain of a backlog.
#[derive(Debug, Clone, Serialize)]
pub struct DrainResult {
    /// Relay instances.
    pub relays: usize,
    /// Backlog size.
    pub n: u64,
    /// Seconds from relay start to the last broker confirmation.
    pub seconds: f64,
    /// Messages per second.
    pub msgs_per_s: f64,
    /// `msgs_per_s / min(raw DB, raw broker)` when the raw limits ran.
    pub ratio_to_limit: Option<f64>,
    /// `msgs_per_s` / both raw loops at once ([`RawResult::together_per_s`]).
    pub ratio_to_together: Option<f64>,
    /// Distinct messages the consumer received.
    pub consumer_received: u64,
    /// Messages the consumer received more than once.
    pub duplicates: u64,
    /// Claim queries issued.
    pub claims: u64,
    /// CPU seconds of the bench process (relays, consumer, broker clients) during the drain.
    pub cpu_s: f64,
    /// CPU of the database server's processes per message during the drain, microseconds.
    pub db_server_cpu_us_per_msg: f64,
    /// CPU of the broker's processes per message during the drain (the consumer's reads
    /// included), microseconds.
    pub broker_server_cpu_us_per_msg: f64,
    /// Peak resident memory of the bench process during the scenario, MiB.
    pub peak_rss_mib: f64,
}

/// Latency under an open-loop offered load.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyResult {
    /// Offered rate, transactions/s.
    pub offered_per_s: u32,
    /// Achieved commit rate, transactions/s.
    pub achieved_per_s: f64,
    /// Business transactions committed.
    pub sent: u64,
    /// Distinct messages the consumer received.
    pub received: u64,
    /// Messages not received within 30 s after the load stopped ("left behind").
    pub left_behind: u64,
    /// Consumer received more than once.
    pub duplicates: u64,
    /// Commit returned to the broker's confirmation reaching the relay: the SPEC's latency.
    pub commit_to_confirmed: Summary,
    /// Commit returned to consumer received (the confirmation plus the broker's delivery).
    pub commit_to_consumer: Summary,
    /// Scheduled start of the transaction to consumer received (includes the transaction itself
    /// and any lag of the load generator: immune to coordinated omission).
    pub scheduled_to_consumer: Summary,
    /// Duration of the business transactions themselves.
    pub transaction: Summary,
    /// Share of messages claimed on a wake-up rather than by the timed scan.
    pub fast_path_share: f64,
    /// Relay claim queries per message.
    pub claims_per_msg: f64,
    /// Mean duration of the relay's claims, ms, empty ones included (from the relay's claim
    /// starting to its rows decoded: acquire, `BEGIN`, the claim's statements). With
    /// `claims_per_msg`, the part of the latency the claim takes.
    pub claim_ms_mean: f64,
    /// The relay's claims during the load by why they ran (`outbox_relay::ClaimKind`), with how
    /// many of each found nothing: where `claims_per_msg` comes from.
    pub claim_kinds: Vec<ClaimKindRow>,
    /// Ids committed by the load that the relay's signal held for a claim that looked for due
    /// messages instead of claiming them by id (its window found them).
    pub ids_left_to_the_window: u64,
    /// Wake-ups that started no claim because the relay's batches already held every message
    /// they named (`outbox_relay::RelayStats::wake_ups_held`).
    pub wake_ups_held: u64,
    /// Mean duration of the relay's settlements, ms (the write-back and its commit; not on the
    /// way to the consumer, but it competes with the claims for the database).
    pub settle_ms_mean: f64,
    /// Database transactions per message counted by the server, the business transaction
    /// included (PostgreSQL only; less sensitive to a noisy machine than the latencies).
    pub db_xacts_per_msg: Option<f64>,
    /// CPU time of the database server's processes per message from the load's start until the
    /// consumer has received every message, µs: the business transactions' and the relay's
    /// (None for SQLite, which runs in the process).
    pub db_server_cpu_us_per_msg: Option<f64>,
    /// Peak resident memory, MiB.
    pub peak_rss_mib: f64,
    /// The hot backlog drained beside the load ([`crate::BenchConfig::latency_backlog`]), if any.
    pub backlog: Option<BacklogBeside>,
    /// The load was written through a pool of its own, its commits not signalled to the relay
    /// ([`crate::BenchConfig::latency_writer_apart`]).
    pub writer_apart: bool,
    /// The relay's own pool, if it had one ([`crate::BenchConfig::relay_pool`]).
    pub relay_pool: Option<u32>,
}

/// A hot backlog drained while the latency scenario's load runs.
#[derive(Debug, Clone, Serialize)]
pub struct BacklogBeside {
    /// Messages in the backlog.
    pub messages: u64,
    /// Its hot keys.
    pub keys: u64,
    /// Of them, still not `sent` when the load's last transaction committed (0: the backlog was
    /// drained before the load ended, and only part of the load ran beside it).
    pub unsent_when_load_ended: u64,
    /// The relay's claims by id made by its lane, beside the claim loop
    /// (`RelayStats::claims_beside`).
    pub claims_beside: u64,
    /// The lane's looks for messages committed since its last one (`RelayStats::lane_looks`).
    pub lane_looks: u64,
    /// Messages the lane named and left to the claim loop (`RelayStats::lane_left`).
    pub lane_left: u64,
    /// Messages claimed behind a batch in flight holding their key's older ones
    /// (`RelayStats::runs_continued`).
    pub runs_continued: u64,
}

/// Enqueue overhead for one client count.
#[derive(Debug, Clone, Serialize)]
pub struct EnqueueRow {
    /// Concurrent clients.
    pub clients: usize,
    /// Transactions without the enqueue.
    pub without: Summary,
    /// Transactions with the enqueue.
    pub with: Summary,
    /// Rate without, transactions/s.
    pub rate_without: f64,
    /// Rate with, transactions/s.
    pub rate_with: f64,
    /// `rate_with / rate_without` (target ≥ 0.95).
    pub ratio: f64,
    /// Added time per transaction at the median, ms.
    pub added_p50_ms: f64,
    /// Added time per transaction at the 99th percentile, ms.
    pub added_p99_ms: f64,
    /// Transactions with the same message written by a hand-written `INSERT` instead of the
    /// library's enqueue.
    pub raw_insert: Summary,
    /// Their rate, transactions/s.
    pub rate_raw_insert: f64,
    /// `rate_with / rate_raw_insert`: the library's enqueue against the raw `INSERT` (target
    /// ≥ 0.95).
    pub ratio_to_raw_insert: f64,
}

/// Enqueue overhead.
#[derive(Debug, Clone, Serialize)]
pub struct EnqueueResult {
    /// One row per client count.
    pub rows: Vec<EnqueueRow>,
}

/// Claim latency with `sent_rows` finished rows in the table.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimAtSize {
    /// Sent rows already in the table.
    pub sent_rows: u64,
    /// Seconds it took to generate them.
    pub generate_s: f64,
    /// Claim latency (a claim of `batch_size` due rows among them).
    pub claim: Summary,
}

/// Scale: several relays; large tables.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleResult {
    /// One drain per relay count.
    pub drains: Vec<DrainResult>,
    /// Claim latency per table size.
    pub claims: Vec<ClaimAtSize>,
}

/// Cost of an idle relay.
#[derive(Debug, Clone, Serialize)]
pub struct IdleResult {
    /// Measured seconds.
    pub seconds: f64,
    /// CPU seconds of the bench process (the relay and its clients) meanwhile.
    pub cpu_s: f64,
    /// CPU use, percent of one core.
    pub cpu_percent: f64,
    /// Database transactions per second counted by the server (PostgreSQL: this database's
    /// `xact_commit + xact_rollback`; MariaDB: global `Questions`, other clients included;
    /// SQLite: none).
    pub server_queries_per_s: Option<f64>,
    /// Claim queries per second issued by the relay.
    pub claims_per_s: f64,
}

/// The relay's claims of one kind during a run.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimKindRow {
    /// Why they ran (`outbox_relay::ClaimKind::name`).
    pub kind: &'static str,
    /// Claims of this kind.
    pub claims: u64,
    /// Of those, claims that found nothing to publish.
    pub empty: u64,
}
