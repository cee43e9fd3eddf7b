//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The transactional outbox: reliable messages out of a database transaction.
#[derive(Debug, Parser)]
#[command(name = "outbox", version, about, long_about = None, propagate_version = true)]
pub(crate) struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human, env = "OUTBOX_LOG_FORMAT")]
    pub(crate) log_format: LogFormat,
    /// More logging (-v debug, -vv trace). `RUST_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// Readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the relay daemon: publish every store's outbox to the configured destinations.
    ///
    /// Connects every store and destination first and exits non-zero, naming the one that
    /// failed, if any is unreachable; afterwards it keeps retrying with backoff. SIGTERM or
    /// SIGINT stop it gracefully (in-flight batches finish or their leases are released).
    ///
    /// Examples:
    ///   outbox relay --config outbox.toml
    ///   OUTBOX__STORES__0__URL=postgres://app:secret@db/shop outbox relay --config outbox.toml
    ///   outbox relay --config outbox.toml --log-format json
    #[command(verbatim_doc_comment)]
    Relay(ConfigArgs),
    /// Validate a configuration file and print the resolved stores, destinations and routes.
    ///
    /// Every error names the key and, where known, the file line. Secrets are never printed.
    ///
    /// Example:
    ///   outbox check --config outbox.toml
    #[command(verbatim_doc_comment)]
    Check(CheckArgs),
    /// Create or upgrade the outbox tables in a database.
    ///
    /// Idempotent: running it again is a no-op. Refuses a database migrated by a newer release.
    ///
    /// Examples:
    ///   outbox migrate --database-url postgres://app@db/shop
    ///   OUTBOX_DATABASE_URL=mysql://root@127.0.0.1/shop outbox migrate --json
    ///   outbox migrate --database-url sqlite:app.db
    ///   outbox migrate --database-url postgres://app@db/shop --schema billing --table-prefix app_
    ///   outbox migrate --print --dialect mysql --table-prefix app_ > outbox.sql
    #[command(verbatim_doc_comment)]
    Migrate(MigrateArgs),
    /// Run the whole flow on an embedded SQLite database, with no servers.
    ///
    /// Creates the database, commits orders with their messages (one transaction rolled back,
    /// one enqueued twice), and shows what the outbox holds.
    ///
    /// Example:
    ///   outbox demo
    #[command(verbatim_doc_comment)]
    Demo(DemoArgs),
    /// Show what the outbox holds: counts per status, per topic and per destination, and how
    /// long the oldest unsent message has waited.
    ///
    /// Examples:
    ///   outbox status --database-url postgres://app@db/shop
    ///   outbox status --json | jq '.failed'
    #[command(verbatim_doc_comment)]
    Status(StatusArgs),
    /// List messages, in id order, a page at a time.
    ///
    /// Every filter given must match. Times are RFC 3339 (2024-05-01T12:00:00Z), a UTC date
    /// (2024-05-01) or a duration ago (30m, 6h, 7d).
    ///
    /// Examples:
    ///   outbox list --status failed
    ///   outbox list --topic order.paid --since 1h
    ///   outbox list --biz-type order --biz-key 42 --json
    ///   outbox list --limit 100 --after-id 5000      (the next page after id 5000)
    #[command(verbatim_doc_comment)]
    List(ListArgs),
    /// Show one message: its columns, headers, payload, last error and per-destination state.
    ///
    /// Examples:
    ///   outbox show 42
    ///   outbox show 42 --json
    #[command(verbatim_doc_comment)]
    Show(ShowArgs),
    /// Re-drive a failed (or cancelled) message, or every failed message matching a filter.
    ///
    /// The message goes back to pending with its attempts reset, due now; the relay publishes it
    /// on its next scan. Destinations that already got it are not sent it again. Bulk re-drives
    /// run in batches, each its own short transaction.
    ///
    /// Examples:
    ///   outbox retry 42
    ///   outbox retry --failed
    ///   outbox retry --failed --topic order.paid --since 1d --batch 200
    #[command(verbatim_doc_comment)]
    Retry(RetryArgs),
    /// Cancel a pending or failed message: it will never be published.
    ///
    /// A message being sent right now (status sending) cannot be cancelled. A cancelled message
    /// can be re-driven later with `outbox retry ID`.
    ///
    /// Example:
    ///   outbox cancel 42
    #[command(verbatim_doc_comment)]
    Cancel(CancelArgs),
    /// Delete finished messages (sent, acked, cancelled) older than a retention period.
    ///
    /// Deletes in small batches, each its own short statement, so the relay and the application
    /// are never blocked for long; per-destination rows go with their messages. Pending, sending
    /// and failed messages are never purged.
    ///
    /// Examples:
    ///   outbox purge --sent-before 7d
    ///   outbox purge --sent-before 12h --batch 5000 --json
    #[command(verbatim_doc_comment)]
    Purge(PurgeArgs),
    /// Adopt an existing message table: the legacy application keeps inserting into its own
    /// table, and the relay delivers every row and writes the outcome back into it.
    ///
    /// Installs, in the legacy database, the triggers of each `[[adopt]]` section of the
    /// configuration and takes over the rows pending now, once. Switch the legacy scanner off
    /// first: `--check` reports it if it still writes the table (docs/adopt.md).
    ///
    /// Examples:
    ///   outbox adopt --config outbox.toml --print > adopt.sql    (review the SQL; nothing changes)
    ///   outbox adopt --config outbox.toml
    ///   outbox adopt --config outbox.toml --check
    ///   outbox adopt --config outbox.toml --bridge legacy --remove
    #[command(verbatim_doc_comment)]
    Adopt(AdoptArgs),
    /// Measure the outbox against real servers: raw limits first, then drain, latency, enqueue
    /// overhead, scale and idle cost, each as a ratio to those limits.
    ///
    /// Each scenario creates and drops its own database on the server of --store (SQLite: a
    /// temporary file) and its own stream / queue on the broker. Prints a table and writes
    /// results.json, report.md and SVG charts into --out. Speed never fails the command; a
    /// message not delivered (or delivered twice by two relays) does.
    ///
    /// Examples:
    ///   outbox bench --store postgres://postgres@127.0.0.1/test --transport nats
    ///   outbox bench --store mysql://root@127.0.0.1/test --transport redis --scenario raw,drain --n 20000
    ///   outbox bench --store sqlite: --transport null --scenario drain,latency --out bench-results/sqlite
    ///   outbox bench --scenario scale --sent-rows 10000,1000000,10000000
    ///   outbox bench --scenario stores --stores 'postgres://postgres@127.0.0.1/test=64' \
    ///     --stores 'mysql://root@127.0.0.1/test=16' --n 100000
    #[cfg(feature = "bench")]
    #[command(verbatim_doc_comment)]
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// Database URL: postgres://, mysql:// (also MariaDB) or sqlite:PATH. Not needed with
    /// `--print --dialect`.
    #[arg(long, env = "OUTBOX_DATABASE_URL", hide_env_values = true, required_unless_present = "dialect")]
    pub(crate) database_url: Option<String>,
    #[command(flatten)]
    pub(crate) names: NameArgs,
    /// Print the SQL of every migration for these names instead of applying it (nothing is
    /// connected to): the plain `.sql` files, renamed, for teams that run their own migrations.
    #[arg(long)]
    pub(crate) print: bool,
    /// With `--print`: the dialect to print for (else the database URL's).
    #[arg(long, value_enum, requires = "print")]
    pub(crate) dialect: Option<DialectArg>,
    /// Print the result as JSON.
    #[arg(long, conflicts_with = "print")]
    pub(crate) json: bool,
}

/// A database dialect, for `outbox migrate --print`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DialectArg {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    Mysql,
    /// SQLite.
    Sqlite,
}

/// The schema and table prefix of the outbox tables (`[[stores]] schema` / `table_prefix`).
#[derive(Debug, Clone, Args)]
pub(crate) struct NameArgs {
    /// PostgreSQL schema / MySQL database of the outbox tables (not on SQLite). Default: the
    /// connection's own.
    #[arg(long, env = "OUTBOX_SCHEMA")]
    pub(crate) schema: Option<String>,
    /// What every object name starts with instead of `outbox_`.
    #[arg(long, env = "OUTBOX_TABLE_PREFIX", default_value = "outbox_")]
    pub(crate) table_prefix: String,
}

impl NameArgs {
    /// The checked names (an error names the value and the rule).
    pub(crate) fn tables(&self) -> anyhow::Result<outbox_store::Tables> {
        Ok(outbox_store::Tables::new(self.schema.as_deref(), &self.table_prefix)?)
    }
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Directory for the demo database (created if missing).
    #[arg(long, default_value = ".outbox-demo")]
    pub(crate) dir: PathBuf,
    /// Number of orders to place.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) orders: u32,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The database every operations subcommand works on.
#[derive(Debug, Args)]
pub(crate) struct DatabaseArgs {
    /// Database URL: postgres://, mysql:// (also MariaDB) or sqlite:PATH.
    #[arg(long, env = "OUTBOX_DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: String,
    #[command(flatten)]
    pub(crate) names: NameArgs,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) db: DatabaseArgs,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) db: DatabaseArgs,
    /// Only messages in this status.
    #[arg(long, value_enum)]
    pub(crate) status: Option<outbox_core::Status>,
    /// Only messages of this topic (exact).
    #[arg(long)]
    pub(crate) topic: Option<String>,
    /// Only messages with this biz_type.
    #[arg(long)]
    pub(crate) biz_type: Option<String>,
    /// Only messages with this biz_key.
    #[arg(long)]
    pub(crate) biz_key: Option<String>,
    /// Only messages with this ordering key.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// Only messages whose last error contains TEXT.
    #[arg(long, value_name = "TEXT")]
    pub(crate) error: Option<String>,
    /// Only messages created at or after TIME (RFC 3339, a date, or a duration ago: 1h, 30m, 7d).
    #[arg(long, value_name = "TIME", value_parser = crate::commands::ops::parse_time)]
    pub(crate) since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only messages created before TIME (RFC 3339, a date, or a duration ago: 1h, 30m, 7d).
    #[arg(long, value_name = "TIME", value_parser = crate::commands::ops::parse_time)]
    pub(crate) until: Option<chrono::DateTime<chrono::Utc>>,
    /// Messages per page (1 to 1000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(crate) limit: u64,
    /// Start after this id (the last id of the previous page).
    #[arg(long, value_name = "ID")]
    pub(crate) after_id: Option<i64>,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    pub(crate) db: DatabaseArgs,
    /// The message id.
    pub(crate) id: i64,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RetryArgs {
    #[command(flatten)]
    pub(crate) db: DatabaseArgs,
    /// The message to re-drive (failed or cancelled).
    #[arg(required_unless_present = "failed", conflicts_with = "failed")]
    pub(crate) id: Option<i64>,
    /// Re-drive every failed message (matching the filters below).
    #[arg(long)]
    pub(crate) failed: bool,
    /// With --failed: only this topic.
    #[arg(long, requires = "failed")]
    pub(crate) topic: Option<String>,
    /// With --failed: only this biz_type.
    #[arg(long, requires = "failed")]
    pub(crate) biz_type: Option<String>,
    /// With --failed: only this ordering key.
    #[arg(long, requires = "failed")]
    pub(crate) key: Option<String>,
    /// With --failed: only messages created at or after TIME (RFC 3339, a date, or 1h, 7d ago).
    #[arg(long, value_name = "TIME", requires = "failed", value_parser = crate::commands::ops::parse_time)]
    pub(crate) since: Option<chrono::DateTime<chrono::Utc>>,
    /// With --failed: only messages created before TIME (RFC 3339, a date, or 1h, 7d ago).
    #[arg(long, value_name = "TIME", requires = "failed", value_parser = crate::commands::ops::parse_time)]
    pub(crate) until: Option<chrono::DateTime<chrono::Utc>>,
    /// With --failed: messages per transaction (1 to 10000).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) batch: u64,
    /// Recorded as the message's updated_by (default: outbox-cli:$USER).
    #[arg(long, env = "OUTBOX_ACTOR")]
    pub(crate) actor: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    #[command(flatten)]
    pub(crate) db: DatabaseArgs,
    /// The message to cancel (pending or failed).
    pub(crate) id: i64,
    /// Recorded as the message's updated_by (default: outbox-cli:$USER).
    #[arg(long, env = "OUTBOX_ACTOR")]
    pub(crate) actor: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    #[command(flatten)]
    pub(crate) db: DatabaseArgs,
    /// Delete finished messages whose last change is older than this (e.g. 7d, 12h, 30m; 0s
    /// deletes every finished message).
    #[arg(long, value_name = "DURATION", value_parser = crate::commands::ops::parse_duration)]
    pub(crate) sent_before: std::time::Duration,
    /// Messages deleted per statement (1 to 10000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) batch: u64,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ConfigArgs {
    /// Configuration file (TOML). `OUTBOX__<path>` environment variables override its values,
    /// e.g. `OUTBOX__STORES__0__URL`.
    #[arg(long, short, env = "OUTBOX_CONFIG", default_value = "outbox.toml")]
    pub(crate) config: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct AdoptArgs {
    /// Configuration file (TOML) with the `[[adopt]]` sections and their stores.
    #[arg(long, short, env = "OUTBOX_CONFIG", default_value = "outbox.toml")]
    pub(crate) config: PathBuf,
    /// Only the bridge of this name (default: every `[[adopt]]` section).
    #[arg(long)]
    pub(crate) bridge: Option<String>,
    /// Print the SQL that installing would run, for review; change nothing.
    #[arg(long, conflicts_with_all = ["check", "remove"])]
    pub(crate) print: bool,
    /// Compare what is installed with the configuration and report writes to the legacy table
    /// by anything but the relay; exit non-zero on any difference.
    #[arg(long, conflicts_with = "remove")]
    pub(crate) check: bool,
    /// Remove the bridge (triggers, functions, its links); the legacy table and the messages
    /// stay.
    #[arg(long)]
    pub(crate) remove: bool,
    /// Print the result as JSON.
    #[arg(long, conflicts_with = "print")]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Configuration file (TOML).
    #[arg(long, short, env = "OUTBOX_CONFIG", default_value = "outbox.toml")]
    pub(crate) config: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Broker of `outbox bench`.
#[cfg(feature = "bench")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BenchTransport {
    /// NATS JetStream.
    Nats,
    /// Redis Streams.
    Redis,
    /// RabbitMQ.
    Rabbitmq,
    /// No broker: isolates the relay's own cost.
    Null,
}

#[cfg(feature = "bench")]
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Database server (a database is created and dropped per scenario), or `sqlite:`.
    #[arg(
        long,
        env = "OUTBOX_BENCH_STORE",
        hide_env_values = true,
        default_value = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
    )]
    pub(crate) store: String,
    /// Broker the relay publishes to.
    #[arg(long, value_enum, default_value_t = BenchTransport::Nats)]
    pub(crate) transport: BenchTransport,
    /// Scenarios, comma-separated: raw, drain, latency, enqueue, scale, idle, stores (one relay
    /// over the many databases of --stores; not run unless named).
    #[arg(long, value_delimiter = ',', default_value = "raw,drain,latency,enqueue,scale,idle")]
    pub(crate) scenario: Vec<String>,
    /// Backlog size of the raw loops and the drains.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) n: usize,
    /// Offered load of the latency scenario, business transactions per second (open loop).
    #[arg(long, default_value_t = 1_000)]
    pub(crate) rate: u32,
    /// Duration of the latency scenario, seconds.
    #[arg(long, default_value_t = 10)]
    pub(crate) latency_secs: u64,
    /// A backlog of this many messages on --latency-backlog-keys hot keys of their own, written
    /// before the latency scenario's relay starts and drained while its load runs (0: none).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub(crate) latency_backlog: u64,
    /// The hot keys of the latency scenario's backlog, 1 to 1,000,000.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) latency_backlog_keys: u64,
    /// Write the latency scenario's load through a pool of its own, as another process would:
    /// the relay is not told of its commits (as `outbox relay` beside other languages' writers).
    #[arg(long)]
    pub(crate) latency_writer_apart: bool,
    /// Give the latency scenario's relay a pool of its own of this many connections, 2 to 256,
    /// as `outbox relay` has (`stores[].max_connections`, 4 by default; at least
    /// --in-flight + 1), and the daemon's budget of 16 batches in flight
    /// (`relay.total_in_flight_batches`). Without it the relay shares the bench's pool of 24.
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=256))]
    pub(crate) relay_pool: Option<u32>,
    /// Transactions per client and mode in the enqueue scenario (the modes interleaved, one
    /// transaction each in turn), 1 to 1,000,000.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) enqueue_txs: u32,
    /// Relay counts of the scale drains, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub(crate) relays: Vec<usize>,
    /// Sent rows already in the table for the claim-latency measurement, comma-separated
    /// (10^7 takes minutes to generate; opt in).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    pub(crate) sent_rows: Vec<u64>,
    /// Duration of the idle measurement, seconds.
    #[arg(long, default_value_t = 30)]
    pub(crate) idle_secs: u64,
    /// Relay batch size.
    #[arg(long, default_value_t = 500)]
    pub(crate) batch_size: usize,
    /// Relay batches in flight.
    #[arg(long, default_value_t = 2)]
    pub(crate) in_flight: usize,
    /// The longest run of one key's consecutive due messages a claim takes (1: heads only).
    #[arg(long, default_value_t = 32)]
    pub(crate) max_run: usize,
    /// Distinct message keys in the generated messages (per-key order allows one message per
    /// key in flight, so this caps the messages in flight).
    #[arg(long, default_value_t = 1000)]
    pub(crate) keys: u64,
    /// Relays write a lease per claimed message instead of holding the rows locked through the
    /// publish (the protocol before locked claims; SQLite always uses leases).
    #[arg(long)]
    pub(crate) leases: bool,
    /// The drain's consumer reads while the relays drain instead of once they have stopped
    /// (the bench's way before 2026-12-02; neither raw limit carries a consumer).
    #[arg(long)]
    pub(crate) consume_during_drain: bool,
    /// NATS URL.
    #[arg(
        long,
        env = "OUTBOX_BENCH_NATS_URL",
        hide_env_values = true,
        default_value = "nats://127.0.0.1:4222"
    )]
    pub(crate) nats_url: String,
    /// Redis URL.
    #[arg(
        long,
        env = "OUTBOX_BENCH_REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    pub(crate) redis_url: String,
    /// AMQP URL.
    #[arg(
        long,
        env = "OUTBOX_BENCH_AMQP_URL",
        hide_env_values = true,
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub(crate) amqp_url: String,
    /// The stores scenario's databases, URL=COUNT: COUNT databases on the server of URL
    /// (repeat for several servers). Defaults to 64 on the server of --store.
    #[arg(long = "stores", value_name = "URL=COUNT", hide_env_values = true)]
    pub(crate) many_stores: Vec<String>,
    /// The stores scenario: batches in flight across every store (the relay's
    /// relay.total_in_flight_batches).
    #[arg(long, default_value_t = 16)]
    pub(crate) stores_budget: usize,
    /// The stores scenario: how many stores share the backlog of --n messages.
    #[arg(long, default_value_t = 4)]
    pub(crate) stores_big: usize,
    /// The stores scenario: milliseconds between two messages of each other store.
    #[arg(long, default_value_t = 1000)]
    pub(crate) stores_trickle_ms: u64,
    /// The relays' `active_scan_interval`, milliseconds: how often a store without push
    /// (MySQL/MariaDB) looks for messages for 10 s after a claim found some (1000, the idle
    /// interval, turns the quicker looks off).
    #[arg(long, default_value_t = 50)]
    pub(crate) active_scan_ms: u64,
    /// A label copied into the report (e.g. before, after).
    #[arg(long, default_value = "")]
    pub(crate) label: String,
    /// Directory for results.json, report.md and the charts.
    #[arg(long, default_value = "bench-results")]
    pub(crate) out: PathBuf,
    /// Print the JSON result instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[cfg(all(test, feature = "bench"))]
mod tests {
    use super::*;

    /// `--enqueue-txs` is bounded: 0 and absurd counts are refused naming the flag, before
    /// anything connects.
    #[test]
    fn bench_enqueue_txs_is_bounded() {
        let parse = |n: &str| Cli::try_parse_from(["outbox", "bench", "--enqueue-txs", n]);
        for bad in ["0", "1000001", "lots"] {
            let err = parse(bad).expect_err(bad).to_string();
            assert!(err.contains("--enqueue-txs"), "{bad}: {err}");
        }
        match parse("5").map(|c| c.command) {
            Ok(Command::Bench(args)) => assert_eq!(args.enqueue_txs, 5),
            other => panic!("{other:?}"),
        }
    }
}
