//! `RelayStore::claim_window`: a claim that checks only the oldest due rows. It never breaks
//! per-key order (a message behind an open message with its key is never claimed), it never
//! looks past its window on PostgreSQL, and it is a full claim on the other dialects.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use outbox_store::{MessageId, NewMessage, Outbox, OutboxDatabase, RelayStore, Settlement};

const LEASE: Duration = Duration::from_secs(30);

async fn enqueue<DB: OutboxDatabase>(outbox: &Outbox<DB>, key: Option<&str>) -> MessageId {
    let mut msg = NewMessage::new("order.paid", "{}");
    if let Some(k) = key {
        msg = msg.key(k);
    }
    let id = outbox.enqueue(&msg).await.unwrap().id;
    // Distinct next_attempt_at values even on a coarse clock.
    tokio::time::sleep(Duration::from_millis(3)).await;
    id
}

fn ids(v: &[outbox_store::OutboxMessage]) -> Vec<MessageId> {
    v.iter().map(|m| m.id).collect()
}

async fn only_heads_of_the_window<DB: OutboxDatabase>(outbox: Outbox<DB>, windowed: bool)
where
    Outbox<DB>: RelayStore,
{
    let a1 = enqueue(&outbox, Some("a")).await;
    let a2 = enqueue(&outbox, Some("a")).await;
    let a3 = enqueue(&outbox, Some("a")).await;
    let b1 = enqueue(&outbox, Some("b")).await;
    let u1 = enqueue(&outbox, None).await;

    // The window holds a1 and a2; a2 waits behind a1.
    let got = outbox.claim_window("r1", 10, LEASE, 2).await.unwrap();
    if windowed {
        assert_eq!(ids(&got), vec![a1], "only the head of the window");
    } else {
        assert_eq!(ids(&got), vec![a1, b1, u1], "the default is a full claim");
    }
    // A full claim finds the rest beyond the window, still never a2 or a3.
    let rest = outbox.claim("r1", 10, LEASE).await.unwrap();
    let expected_rest = if windowed { vec![b1, u1] } else { vec![] };
    assert_eq!(ids(&rest), expected_rest);

    // a1 done: a2 is the head now and is at the front of the window.
    let sent = Settlement { sent: vec![a1], ..Settlement::default() };
    outbox.settle("r1", &sent).await.unwrap();
    let got = outbox.claim_window("r1", 10, LEASE, 2).await.unwrap();
    assert_eq!(ids(&got), vec![a2]);
    assert!(outbox.claim_window("r1", 10, LEASE, 100).await.unwrap().is_empty(), "a3 waits behind a2");
    let _ = a3;
}

#[tokio::test]
async fn postgres() {
    let db = outbox_testkit::fresh_pg().await;
    let outbox = Outbox::new(db.pool.clone());
    outbox.migrate().await.unwrap();
    only_heads_of_the_window(outbox, true).await;
    db.drop_db().await;
}

#[tokio::test]
async fn mysql() {
    let db = outbox_testkit::fresh_mysql().await;
    let outbox = Outbox::new(db.pool.clone());
    outbox.migrate().await.unwrap();
    only_heads_of_the_window(outbox, false).await;
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite() {
    let db = outbox_testkit::fresh_sqlite().await;
    let outbox = Outbox::new(db.pool.clone());
    outbox.migrate().await.unwrap();
    only_heads_of_the_window(outbox, false).await;
    db.drop_db().await;
}
