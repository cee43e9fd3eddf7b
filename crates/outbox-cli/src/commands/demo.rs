//! `outbox demo`: the whole flow on SQLite, with no servers.

use anyhow::Context;
use outbox_store::{NewMessage, Outbox, OutboxMessage, Status};
use serde::Serialize;
use sqlx::sqlite::SqlitePoolOptions;

use crate::cli::DemoArgs;

#[derive(Debug, Serialize)]
struct DemoReport {
    database: String,
    committed: usize,
    rolled_back: usize,
    duplicates_ignored: usize,
    messages: Vec<OutboxMessage>,
}

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating the demo directory {}", args.dir.display()))?;
    let path = args.dir.join("demo.db");
    let url = format!("sqlite://{}", path.display());
    let opts = outbox_store::sqlite::connect_options(&url)?;
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(opts)
        .await
        .with_context(|| format!("opening {}", path.display()))?;
    let outbox = Outbox::new(pool.clone());
    outbox.migrate().await.context("migrating the demo database")?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS shop_order (id INTEGER PRIMARY KEY, amount_cents INTEGER NOT NULL, \
         status TEXT NOT NULL DEFAULT 'paid')",
    )
    .execute(&pool)
    .await
    .context("creating the demo business table")?;
    let first_order: i64 =
        sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM shop_order").fetch_one(&pool).await?;

    // 1. Each order and its message commit together, in one local transaction.
    let mut ids = Vec::new();
    for n in 0..i64::from(args.orders) {
        let order = first_order + n;
        let mut tx = outbox.begin().await?;
        sqlx::query("INSERT INTO shop_order (id, amount_cents) VALUES (?1, ?2)")
            .bind(order)
            .bind(1_000 + n * 250)
            .execute(&mut *tx)
            .await?;
        let msg = NewMessage::new(
            "order.paid",
            format!(r#"{{"order":{order},"amount_cents":{}}}"#, 1_000 + n * 250),
        )
        .key(format!("customer-{}", order % 3))
        .biz("order.paid", order.to_string())
        .created_by("outbox-demo");
        ids.push(tx.enqueue(&msg).await?.id);
        tx.commit().await?;
    }

    // 2. A transaction that rolls back takes its message with it: nothing is ever published.
    let phantom = first_order + i64::from(args.orders);
    let mut tx = outbox.begin().await?;
    sqlx::query("INSERT INTO shop_order (id, amount_cents) VALUES (?1, 1)")
        .bind(phantom)
        .execute(&mut *tx)
        .await?;
    tx.enqueue(
        &NewMessage::new("order.paid", format!(r#"{{"order":{phantom}}}"#))
            .biz("order.paid", phantom.to_string()),
    )
    .await?;
    tx.rollback().await?;

    // 3. A retried request enqueues the same business event again: the first message is returned.
    let again = outbox
        .enqueue(&NewMessage::new("order.paid", "retried request").biz("order.paid", first_order.to_string()))
        .await?;
    anyhow::ensure!(!again.created && again.id == ids[0], "idempotent enqueue returned a new message");

    let mut messages = Vec::new();
    for id in &ids {
        if let Some(m) = outbox.get(*id).await? {
            messages.push(m);
        }
    }
    let report = DemoReport {
        database: path.display().to_string(),
        committed: ids.len(),
        rolled_back: 1,
        duplicates_ignored: 1,
        messages,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("outbox demo on {}", report.database);
    println!(
        "  {} orders committed with their messages; 1 rolled back (no message); 1 duplicate enqueue returned message {}",
        report.committed, ids[0]
    );
    println!("  {:>6}  {:<10} {:<12} {:<12} payload", "id", "status", "topic", "key");
    for m in &report.messages {
        println!(
            "  {:>6}  {:<10} {:<12} {:<12} {}",
            m.id,
            m.status,
            m.topic,
            m.key.as_deref().unwrap_or("-"),
            m.payload
        );
    }
    let pending = report.messages.iter().filter(|m| m.status == Status::Pending).count();
    println!(
        "  {pending} pending: the relay publishes them (outbox relay), retrying until a broker confirms."
    );
    Ok(())
}
