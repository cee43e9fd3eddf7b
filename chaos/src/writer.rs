//! The writer role: a business application committing orders with their messages, through the
//! Rust library (`lib`) or with plain SQL as a foreign application would (`sql`).
//!
//! Each transaction locks the key's business row (`chaos_biz`), bumps its sequence, enqueues one
//! message with that key and records `(message id, key, seq)` in `chaos_ledger`, all in the same
//! transaction. A share of the transactions is rolled back on purpose after the enqueue; their
//! message ids go to `chaos_rolledback` afterwards, outside the transaction. Any error ends the
//! process (the harness restarts it): a transaction that was not committed left nothing.

use std::time::Duration;

use anyhow::Context;
use outbox_store::{NewMessage, Outbox};
use rand::{Rng, SeedableRng};

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
    let db = Db::connect_small(&args.db_url).await.context("connecting")?;
    let lock_key = db.sql("SELECT seq FROM chaos_biz WHERE k = ? FOR UPDATE");
    let bump_key = db.sql("UPDATE chaos_biz SET seq = ? WHERE k = ?");
    let record = db.sql("INSERT INTO chaos_ledger (msg_id, k, seq, writer) VALUES (?, ?, ?, ?)");
    let record_rollback = db.sql("INSERT INTO chaos_rolledback (msg_id) VALUES (?)");
    on_pool!(&db, pool => {
        let outbox = Outbox::new(pool.clone());
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
