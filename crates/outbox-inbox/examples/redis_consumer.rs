//! Consume a Redis stream written by the outbox relay exactly once, into PostgreSQL.
//!
//! `cargo run --example redis_consumer -p outbox-inbox` with `DATABASE_URL` and `REDIS_URL` set.
#![allow(missing_docs)]

use outbox_inbox::{from_redis_stream, AckClient, Inbox};
use redis::streams::{StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = sqlx::PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
    let inbox = Inbox::new(pool.clone());
    inbox.migrate().await?;
    let redis = redis::Client::open(std::env::var("REDIS_URL")?)?;
    let mut conn = redis.get_multiplexed_async_connection().await?;
    let acks = AckClient::new("http://127.0.0.1:8099"); // the relay's ACK endpoint (ACK mode)
    let (stream, group) = ("order.paid", "billing");
    // Create the consumer group once (BUSYGROUP when it exists already).
    let _: redis::RedisResult<()> = conn.xgroup_create_mkstream(stream, group, "0").await;
    let opts = StreamReadOptions::default().group(group, "billing-1").count(100).block(5_000);
    loop {
        let reply: StreamReadReply = conn.xread_options(&[stream], &[">"], &opts).await?;
        for entry in reply.keys.iter().flat_map(|k| &k.ids) {
            let msg = from_redis_stream(entry)?;
            let (id, body) = (&msg.id, msg.payload_str()?); // borrowed by the closure below
            let mut tx = pool.begin().await?;
            let outcome = inbox
                .process(&mut tx, group, &msg, |conn| {
                    Box::pin(async move {
                        sqlx::query("INSERT INTO paid_orders (message_id, body) VALUES ($1, $2)")
                            .bind(id)
                            .bind(body)
                            .execute(&mut *conn)
                            .await?;
                        Ok::<_, anyhow::Error>(())
                    })
                })
                .await?;
            tx.commit().await?;
            // Acknowledge only after the commit: a crash before it means a redelivery, which the
            // inbox turns into a Duplicate.
            let _: () = conn.xack(stream, group, &[&entry.id]).await?;
            acks.ack(&msg).await?; // confirms to the relay when the destination requires ACKs
            println!("{id} {}", if outcome.is_duplicate() { "duplicate" } else { "processed" });
        }
    }
}
