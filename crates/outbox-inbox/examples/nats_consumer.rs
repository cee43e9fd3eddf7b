//! Consume a NATS JetStream stream written by the outbox relay exactly once, into PostgreSQL, and
//! confirm each delivery to the relay (ACK mode) after the commit.
//!
//! `cargo run --example nats_consumer -p outbox-inbox` with `DATABASE_URL` and `NATS_URL` set.
#![allow(missing_docs)]

use async_nats::jetstream::{self, consumer::pull};
use futures::StreamExt;
use outbox_inbox::{from_nats, AckClient, Inbox};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pool = sqlx::PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
    let inbox = Inbox::new(pool.clone());
    inbox.migrate().await?;
    let acks = AckClient::new("http://127.0.0.1:8099");
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
        let (id, body) = (&msg.id, msg.payload_str()?);
        let mut tx = pool.begin().await?;
        let outcome = inbox
            .process(&mut tx, "crm", &msg, |conn| {
                Box::pin(async move {
                    sqlx::query("INSERT INTO crm_events (message_id, body) VALUES ($1, $2)")
                        .bind(id)
                        .bind(body)
                        .execute(&mut *conn)
                        .await?;
                    Ok::<_, anyhow::Error>(())
                })
            })
            .await?;
        tx.commit().await?;
        delivery.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?; // the broker's ack
        acks.ack(&msg).await?; // the relay's ACK: the effect is durable
        println!("{id} {}", if outcome.is_duplicate() { "duplicate" } else { "processed" });
    }
    Ok(())
}
