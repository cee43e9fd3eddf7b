//! Consume a Redis stream written by the outbox relay exactly once, into PostgreSQL.
//!
//! `cargo run --example redis_consumer -p outbox-inbox` with `DATABASE_URL` and `REDIS_URL` set.
#![allow(missing_docs)]

use outbox_inbox::from_redis_stream;
use redis::streams::{StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;

mod shared;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (pool, inbox, acks) = shared::open().await?;
    let redis = redis::Client::open(std::env::var("REDIS_URL")?)?;
    let mut conn = redis.get_multiplexed_async_connection().await?;
    let (stream, group) = ("order.paid", "billing");
    // Create the consumer group once (BUSYGROUP when it exists already).
    let _: redis::RedisResult<()> = conn.xgroup_create_mkstream(stream, group, "0").await;
    let opts = StreamReadOptions::default().group(group, "billing-1").count(100).block(5_000);
    loop {
        let reply: StreamReadReply = conn.xread_options(&[stream], &[">"], &opts).await?;
        for entry in reply.keys.iter().flat_map(|k| &k.ids) {
            let msg = from_redis_stream(entry)?;
            let insert = "INSERT INTO paid_orders (message_id, body) VALUES ($1, $2)";
            let outcome = shared::apply_once(&pool, &inbox, group, &msg, insert).await?;
            // Acknowledge only after the commit: a crash before it means a redelivery, which the
            // inbox turns into a Duplicate.
            let _: () = conn.xack(stream, group, &[&entry.id]).await?;
            acks.ack(&msg).await?; // confirms to the relay when the destination requires ACKs
            println!("{} {}", msg.id, if outcome.is_duplicate() { "duplicate" } else { "processed" });
        }
    }
}
