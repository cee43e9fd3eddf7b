//! Consume a NATS JetStream stream written by the outbox relay exactly once, into PostgreSQL, and
//! confirm each delivery to the relay (ACK mode) after the commit.
//!
//! `cargo run --example nats_consumer -p outbox-inbox` with `DATABASE_URL` and `NATS_URL` set.
#![allow(missing_docs)]

use async_nats::jetstream::{self, consumer::pull};
use futures::StreamExt;
use outbox_inbox::from_nats;

mod shared;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (pool, inbox, acks) = shared::open().await?;
    let js = jetstream::new(async_nats::connect(std::env::var("NATS_URL")?).await?);
    let stream = js.get_stream("SHOP").await?;
    let consumer = stream
        .get_or_create_consumer(
            "crm",
            pull::Config { durable_name: Some("crm".into()), ..Default::default() },
        )
        .await?;
    let mut messages = consumer.messages().await?;
    while let Some(delivery) = messages.next().await {
        let delivery = delivery?;
        let msg = from_nats(&delivery.message)?;
        let insert = "INSERT INTO crm_events (message_id, body) VALUES ($1, $2)";
        let outcome = shared::apply_once(&pool, &inbox, "crm", &msg, insert).await?;
        delivery.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?; // the broker's ack
        acks.ack(&msg).await?; // the relay's ACK: the effect is durable
        println!("{} {}", msg.id, if outcome.is_duplicate() { "duplicate" } else { "processed" });
    }
    Ok(())
}
