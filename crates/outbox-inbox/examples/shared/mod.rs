//! What the consumer examples share: the consumer's PostgreSQL database with its inbox, and the
//! step that makes a delivery's effect happen once. Each example adds only its broker: how it
//! reads deliveries and how it acknowledges them.

use outbox_inbox::{AckClient, Inbox, InboxMessage, Processed};
use sqlx::{PgPool, Postgres};

/// The consumer's database (`DATABASE_URL`), its inbox (the table created if missing) and the
/// relay's ACK endpoint (ACK mode).
pub(crate) async fn open() -> anyhow::Result<(PgPool, Inbox<Postgres>, AckClient)> {
    let pool = PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
    let inbox = Inbox::new(pool.clone());
    inbox.migrate().await?;
    Ok((pool, inbox, AckClient::new("http://127.0.0.1:8099")))
}

/// Applies `msg` once for `group`: `insert` (bound to the message id and the body) runs in the
/// transaction that records the delivery in the inbox, and only for the first delivery; then
/// commits. Acknowledge the delivery (to the broker, and to the relay) only after this returns:
/// a crash before it means a redelivery, which the inbox turns into a duplicate.
pub(crate) async fn apply_once(
    pool: &PgPool,
    inbox: &Inbox<Postgres>,
    group: &str,
    msg: &InboxMessage,
    insert: &'static str,
) -> anyhow::Result<Processed<()>> {
    let (id, body) = (&msg.id, msg.payload_str()?); // borrowed by the closure below
    let mut tx = pool.begin().await?;
    let outcome = inbox
        .process(&mut tx, group, msg, |conn| {
            Box::pin(async move {
                sqlx::query(insert).bind(id).bind(body).execute(&mut *conn).await?;
                Ok::<_, anyhow::Error>(())
            })
        })
        .await?;
    tx.commit().await?;
    Ok(outcome)
}
