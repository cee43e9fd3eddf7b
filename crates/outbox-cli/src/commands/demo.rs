//! `outbox demo`: the whole flow on SQLite, with no servers: orders commit with their messages,
//! the relay publishes them after commit to a built-in receiver, a transient receiver failure is
//! retried with backoff, and an unroutable message ends `failed` with its reason.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use outbox_core::{header, Envelope, Outcome, RetryPolicy, Transport};
use outbox_relay::{Destination, Relay, RelayConfig, Route};
use outbox_store::{MessageId, NewMessage, Outbox, OutboxMessage, Status};
use serde::Serialize;
use sqlx::sqlite::SqlitePoolOptions;
use tokio_util::sync::CancellationToken;

use crate::cli::DemoArgs;

/// The built-in receiver: prints what it receives, and answers "503" to the first delivery of
/// one chosen message so the demo shows a retry.
#[derive(Debug, Default)]
struct Receiver {
    flaky: Mutex<Option<MessageId>>,
    received: Mutex<Vec<(MessageId, u32, Duration)>>,
    started: Mutex<Option<Instant>>,
    quiet: bool,
}

#[async_trait::async_trait]
impl Transport for Receiver {
    fn kind(&self) -> &'static str {
        "demo-receiver"
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        let since = self.started.lock().ok().and_then(|s| *s).map(|s| s.elapsed()).unwrap_or_default();
        batch
            .iter()
            .map(|e| {
                let flaky = self.flaky.lock().map(|mut f| {
                    if *f == Some(e.id) {
                        f.take();
                        true
                    } else {
                        false
                    }
                });
                if flaky.unwrap_or(false) {
                    if !self.quiet {
                        println!(
                            "  receiver: message {} attempt {} -> 503 (simulated outage; the relay retries)",
                            e.id, e.attempt
                        );
                    }
                    return Outcome::retryable("receiver answered 503 (simulated)");
                }
                if !self.quiet {
                    println!(
                        "  receiver: message {:>3} attempt {} key {:<11} {}",
                        e.headers.get(header::MESSAGE_ID).map(String::as_str).unwrap_or("?"),
                        e.attempt,
                        e.key.as_deref().unwrap_or("-"),
                        e.payload
                    );
                }
                if let Ok(mut r) = self.received.lock() {
                    r.push((e.id, e.attempt, since));
                }
                Outcome::Delivered
            })
            .collect()
    }
}

#[derive(Debug, Serialize)]
struct DemoReport {
    database: String,
    committed: usize,
    rolled_back: usize,
    duplicates_ignored: usize,
    delivered: usize,
    failed: usize,
    messages: Vec<OutboxMessage>,
}

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let say = |line: String| {
        if !args.json {
            println!("{line}");
        }
    };
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
    say(format!("outbox demo on {} (SQLite, no servers)", path.display()));

    // The relay runs in this process, woken by each commit; its one destination is the
    // built-in receiver.
    let receiver = Arc::new(Receiver { quiet: args.json, ..Receiver::default() });
    let relay = Relay::builder(&outbox)
        .config(RelayConfig {
            owner: "outbox-demo".into(),
            unrouted_grace: std::time::Duration::ZERO,
            ..RelayConfig::default()
        })
        .destination(
            Destination::new("receiver", receiver.clone())
                .retry(RetryPolicy { initial: Duration::from_millis(300), ..RetryPolicy::default() }),
        )
        .route(Route::new("order.#", ["receiver"]))
        .build()?;
    let stop = CancellationToken::new();
    let relay_task = tokio::spawn(relay.run(stop.clone()));
    if let Ok(mut s) = receiver.started.lock() {
        *s = Some(Instant::now());
    }

    let first_order: i64 =
        sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM shop_order").fetch_one(&pool).await?;

    // 1. Each order and its message commit together, in one local transaction.
    say("1. placing orders: business row + message in one transaction each".into());
    let mut ids = Vec::new();
    for n in 0..i64::from(args.orders) {
        let order = first_order + n;
        let amount = 1_000 + n * 250;
        let mut tx = outbox.begin().await?;
        sqlx::query("INSERT INTO shop_order (id, amount_cents) VALUES (?1, ?2)")
            .bind(order)
            .bind(amount)
            .execute(&mut *tx)
            .await?;
        let msg = NewMessage::new("order.paid", format!(r#"{{"order":{order},"amount_cents":{amount}}}"#))
            .key(format!("customer-{}", order % 3))
            .biz("order.paid", order.to_string())
            .created_by("outbox-demo");
        let id = tx.enqueue(&msg).await?.id;
        if n == 1 {
            if let Ok(mut f) = receiver.flaky.lock() {
                *f = Some(id);
            }
        }
        ids.push(id);
        tx.commit().await?; // commits, then wakes the relay
    }

    // 2. A transaction that rolls back takes its message with it: nothing is ever published.
    let phantom = first_order + i64::from(args.orders);
    let mut tx = outbox.begin().await?;
    sqlx::query("INSERT INTO shop_order (id, amount_cents) VALUES (?1, 1)")
        .bind(phantom)
        .execute(&mut *tx)
        .await?;
    tx.enqueue(
        &NewMessage::new("order.paid", format!(r#"{{"order":{phantom},"rolled_back":true}}"#))
            .biz("order.paid", phantom.to_string()),
    )
    .await?;
    tx.rollback().await?;
    say(format!("2. order {phantom} rolled back: its message never existed"));

    // 3. A retried request enqueues the same business event again: the first message is returned.
    let again = outbox
        .enqueue(&NewMessage::new("order.paid", "retried request").biz("order.paid", first_order.to_string()))
        .await?;
    anyhow::ensure!(!again.created && again.id == ids[0], "idempotent enqueue returned a new message");
    say(format!(
        "3. a retried request enqueued order {first_order} again: got message {} back, no new row",
        again.id
    ));

    // 4. A topic with no route fails at once, with its reason, for a person to handle.
    let unrouted = outbox.enqueue(&NewMessage::new("invoice.created", r#"{"invoice":1}"#)).await?.id;
    ids.push(unrouted);
    say("4. an unrouted topic (invoice.created) will end `failed` with its reason".into());

    // Wait until every message is settled, then stop the relay gracefully.
    let deadline = Instant::now() + Duration::from_secs(30);
    let messages = loop {
        let mut all = Vec::new();
        for id in &ids {
            if let Some(m) = outbox.get(*id).await? {
                all.push(m);
            }
        }
        if all.iter().all(|m| matches!(m.status, Status::Sent | Status::Failed)) {
            break all;
        }
        anyhow::ensure!(Instant::now() < deadline, "the demo relay did not settle every message within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.cancel();
    relay_task.await.context("the demo relay task failed")?;

    let delivered = receiver.received.lock().map(|r| r.len()).unwrap_or(0);
    let report = DemoReport {
        database: path.display().to_string(),
        committed: args.orders as usize,
        rolled_back: 1,
        duplicates_ignored: 1,
        delivered,
        failed: messages.iter().filter(|m| m.status == Status::Failed).count(),
        messages,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!();
    println!("  {:>4}  {:<8} {:<16} {:<11} {:>8}  last error", "id", "status", "topic", "key", "attempts");
    for m in &report.messages {
        println!(
            "  {:>4}  {:<8} {:<16} {:<11} {:>8}  {}",
            m.id,
            m.status,
            m.topic,
            m.key.as_deref().unwrap_or("-"),
            m.attempts,
            m.last_error.as_deref().unwrap_or("")
        );
    }
    println!();
    println!("Messages with the same key are published in order: a key's next message waits while an");
    println!("older one is being retried. The failed one is re-driven with `outbox retry <id>`.");
    println!(
        "{} orders committed, {} messages delivered (one after a retry), 1 rolled back and never sent, \
         1 duplicate ignored, {} failed with its reason.",
        report.committed, report.delivered, report.failed
    );
    Ok(())
}
