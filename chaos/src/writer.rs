//! The writer role: a business application committing orders with their messages, through the
//! Rust library (`lib`) or with plain SQL as a foreign application would (`sql`).
//!
//! Each transaction locks the key's business row (`chaos_biz`), bumps its sequence, enqueues one
//! message with that key and records `(message id, key, seq)` in `chaos_ledger`, all in the same
//! transaction. A share of the transactions is rolled back on purpose after the enqueue; their
//! message ids go to `chaos_rolledback` afterwards, outside the transaction. Any error ends the
//! process (the harness restarts it): a transaction that was not committed left nothing.
//!
//! A `lib` writer may also run a relay in its own process (`--relay-owner`), as a Rust service
//! that publishes its own messages does: the relay is woken by this writer's commits and claims
//! their ids first (the fast path, and on PostgreSQL the claims by id of an idle relay), beside
//! the `outbox relay` daemons, which see this process's commits only as rows in the table. It
//! dies with the writer (a SIGKILL of the harness, or any error), mid-claim or mid-publish.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use outbox_relay::{Destination, Relay, Route};
use outbox_store::{NewMessage, Outbox};
use outbox_transport::TransportConfig;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

use crate::db::{on_pool, Db};

/// How a writer enqueues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Mode {
    /// `OutboxTransaction::enqueue` of the Rust library.
    Lib,
    /// A plain `INSERT INTO outbox_message`, as a foreign application.
    Sql,
}

/// What one writer does.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WriterArgs {
    /// Direct URL of the run's database.
    #[arg(long)]
    pub(crate) db_url: String,
    /// `lib` or `sql`.
    #[arg(long, value_enum)]
    pub(crate) mode: Mode,
    /// The topic.
    #[arg(long)]
    pub(crate) topic: String,
    /// Number of business keys.
    #[arg(long)]
    pub(crate) keys: u32,
    /// Transactions per second to aim at.
    #[arg(long)]
    pub(crate) rate: u32,
    /// Share of transactions rolled back on purpose (0..1).
    #[arg(long, default_value_t = 0.2)]
    pub(crate) rollback_share: f64,
    /// Name recorded in the ledger.
    #[arg(long)]
    pub(crate) name: String,
    /// Also run a relay in this process under this owner (`lib` mode only), woken by this
    /// writer's commits.
    #[arg(long, requires = "relay_transport")]
    pub(crate) relay_owner: Option<String>,
    /// The relay's transport: a TOML file holding what `[destinations.<name>.transport]` holds
    /// in `outbox relay`'s configuration.
    #[arg(long)]
    pub(crate) relay_transport: Option<PathBuf>,
}

/// Connections of a writer that runs a relay: its transactions, the relay's claim (held through
/// the publish with locked claims) and settlements of two batches in flight, and the listening
/// connection.
const RELAY_WRITER_POOL: u32 = 6;

/// A parse error of the transport file `file` (holding `text`): where, by line and column, and
/// what, without the source line or any quoted value (a URL there may carry a password), control
/// characters escaped.
fn toml_error(file: &Path, text: &str, e: &toml::de::Error) -> anyhow::Error {
    let mut what = String::new();
    for (i, part) in e.message().split('"').enumerate() {
        what.push_str(if i % 2 == 1 { "***" } else { part });
    }
    let what = outbox_core::text::printable(what.trim(), 500);
    match e.span() {
        Some(span) => {
            let (line, column) = outbox_core::text::line_col(text, span.start);
            anyhow::anyhow!("parsing {}: line {line}, column {column}: {what}", file.display())
        }
        None => anyhow::anyhow!("parsing {}: {what}", file.display()),
    }
}

/// Starts the relay of a writer that runs one, over `outbox`: tuned as the daemons are
/// (`setup::relay_config`, locked claims), publishing `topic` to the transport in `transport`. The
/// file is read at once (a bad one ends the writer); the broker is connected in the background,
/// again every 500 ms while it cannot be reached, so that the writer commits meanwhile, as a
/// service whose broker is down at its start keeps taking business (guarantee 3). Returns what
/// stops it.
fn start_relay<S>(outbox: &S, owner: &str, transport: &Path, topic: &str) -> anyhow::Result<CancellationToken>
where
    S: outbox_store::RelayStore + outbox_store::Signalled + 'static,
{
    let text =
        std::fs::read_to_string(transport).with_context(|| format!("reading {}", transport.display()))?;
    let config: TransportConfig = toml::from_str(&text).map_err(|e| toml_error(transport, &text, &e))?;
    config.validate().with_context(|| format!("checking {}", transport.display()))?;
    let relay_config =
        crate::setup::relay_config(owner, true, outbox_relay::RelayConfig::default().max_in_flight_batches);
    let (outbox, topic, stop) = (outbox.clone(), topic.to_owned(), CancellationToken::new());
    let stopped = stop.clone();
    tokio::spawn(async move {
        let transport = loop {
            match config.clone().build().await {
                Ok(t) => break t,
                Err(e) => {
                    eprintln!("relay: the broker cannot be reached ({e}); trying again in 500 ms");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        let relay = match Relay::builder(&outbox)
            .config(relay_config)
            .destination(
                Destination::new("bus", transport)
                    .retry(crate::setup::relay_retry())
                    .breaker(crate::setup::relay_breaker()),
            )
            .route(Route::new(topic, ["bus"]))
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                // Caught by the run: a writer's relay that never starts sends nothing.
                eprintln!("relay: cannot be built: {e}");
                return;
            }
        };
        // Its claims by why they ran, to this writer's log every 5 s (the last line before a
        // kill says how this process's messages were claimed: by id, or by a look for due
        // messages).
        let stats = relay.stats();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                let kinds: Vec<String> = stats
                    .claim_kinds()
                    .iter()
                    .filter(|k| k.claims > 0)
                    .map(|k| format!("{:?}={}/{}", k.kind, k.claims, k.empty))
                    .collect();
                if !kinds.is_empty() {
                    eprintln!("relay claims (kind=claims/empty): {}", kinds.join(" "));
                }
            }
        });
        relay.run(stopped).await;
    });
    Ok(stop)
}

fn payload(k: i32, seq: i64, writer: &str) -> String {
    serde_json::json!({ "k": k, "seq": seq, "w": writer }).to_string()
}

/// A plain `INSERT INTO outbox_message` inside the transaction on `self`, as a foreign
/// application writes it (`created_by` = `chaos-sql`); returns the new message's id.
trait InsertForeign {
    async fn insert_foreign(&mut self, topic: &str, body: String, key: String) -> anyhow::Result<i64>;
}

impl InsertForeign for sqlx::PgConnection {
    async fn insert_foreign(&mut self, topic: &str, body: String, key: String) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar(
            "INSERT INTO outbox_message (topic, payload, msg_key, created_by) \
             VALUES ($1, $2, $3, 'chaos-sql') RETURNING id",
        )
        .bind(topic)
        .bind(body)
        .bind(key)
        .fetch_one(self)
        .await?)
    }
}

impl InsertForeign for sqlx::MySqlConnection {
    async fn insert_foreign(&mut self, topic: &str, body: String, key: String) -> anyhow::Result<i64> {
        let done = sqlx::query(
            "INSERT INTO outbox_message (topic, payload, msg_key, created_by) VALUES (?, ?, ?, 'chaos-sql')",
        )
        .bind(topic)
        .bind(body)
        .bind(key)
        .execute(self)
        .await?;
        Ok(done.last_insert_id() as i64)
    }
}

/// Runs until killed.
pub(crate) async fn run(args: WriterArgs) -> anyhow::Result<()> {
    let mut rng = rand::rngs::StdRng::from_entropy();
    let period = Duration::from_secs_f64(1.0 / f64::from(args.rate.max(1)));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let relay = args.relay_owner.as_deref().zip(args.relay_transport.as_deref());
    if relay.is_some() && args.mode != Mode::Lib {
        anyhow::bail!(
            "--relay-owner needs --mode lib (a relay in the process is woken by the library's commits)"
        );
    }
    let db = match relay {
        Some(_) => Db::connect_sized(&args.db_url, RELAY_WRITER_POOL).await,
        None => Db::connect_small(&args.db_url).await,
    }
    .context("connecting")?;
    let lock_key = db.sql("SELECT seq FROM chaos_biz WHERE k = ? FOR UPDATE");
    let bump_key = db.sql("UPDATE chaos_biz SET seq = ? WHERE k = ?");
    let record = db.sql("INSERT INTO chaos_ledger (msg_id, k, seq, writer) VALUES (?, ?, ?, ?)");
    let record_rollback = db.sql("INSERT INTO chaos_rolledback (msg_id) VALUES (?)");
    on_pool!(&db, pool => {
        let outbox = Outbox::new(pool.clone());
        // Stopped only by the process's end (the writer runs until killed).
        let _relay = match relay {
            Some((owner, transport)) => Some(start_relay(&outbox, owner, transport, &args.topic)?),
            None => None,
        };
        loop {
            tick.tick().await;
            let k = rng.gen_range(0..args.keys) as i32;
            let rollback = rng.gen_bool(args.rollback_share);
            let mut tx = outbox.begin().await?;
            let seq: i64 = sqlx::query_scalar(&lock_key).bind(k).fetch_one(&mut *tx).await?;
            let seq = seq + 1;
            sqlx::query(&bump_key).bind(seq).bind(k).execute(&mut *tx).await?;
            let body = payload(k, seq, &args.name);
            let key = format!("k{k}");
            let id: i64 = match args.mode {
                Mode::Lib => tx.enqueue(&NewMessage::new(&args.topic, body).key(key)).await?.id.0,
                Mode::Sql => tx.insert_foreign(&args.topic, body, key).await?,
            };
            sqlx::query(&record).bind(id).bind(k).bind(seq).bind(&args.name).execute(&mut *tx).await?;
            if rollback {
                tx.rollback().await?;
                sqlx::query(&record_rollback).bind(id).execute(pool).await?;
            } else {
                tx.commit().await?;
            }
        }
    })
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    /// A broken transport file is reported by line and column, never with its source line (a
    /// password in a URL, a control character) or a quoted value.
    #[test]
    fn a_broken_transport_file_is_reported_without_its_values() {
        let file = Path::new("/x/t.toml");
        for text in [
            "type = \"nats\"\nurl = \"nats://u:s3cret@\u{1}host:4222\"\n",
            "type = \"nats\"\nurl = \"nats://u:s3cret@host:4222\"\ntimeout = \"s3cret\"\n",
            "type = \"nats\"\nurl = \"nats://u:s3cret@h:4222\n",
        ] {
            let e = toml::from_str::<TransportConfig>(text).expect_err("broken");
            let said = toml_error(file, text, &e).to_string();
            assert!(said.starts_with("parsing /x/t.toml"), "{said}");
            assert!(!said.contains("s3cret") && !said.contains('\u{1}'), "{said}");
        }
        let text = "type = \"nats\"\nurl = \"a\u{1}b\"\n";
        let e = toml::from_str::<TransportConfig>(text).expect_err("a control character");
        assert!(toml_error(file, text, &e).to_string().contains("line 2, column"), "{e}");
    }
}
