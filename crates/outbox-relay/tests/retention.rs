//! Retention in the relay library: finished messages go, open and failed ones stay.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::{NewMessage, Outcome, Status};
use outbox_relay::testing::TestTransport;
use outbox_relay::{Destination, Relay, RelayConfig, Retention, Route};
use outbox_store::{MessageAdmin, Outbox};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_messages_are_deleted_and_the_others_kept() {
    let db = outbox_testkit::fresh_sqlite().await;
    let outbox = Outbox::new(db.pool.clone());
    outbox.migrate().await.unwrap();
    let transport = Arc::new(TestTransport::new());
    transport.fail_topic("bad", Outcome::permanent("refused by the test"));
    let mut tx = outbox.begin().await.unwrap();
    let mut sent = Vec::new();
    for i in 0..5 {
        sent.push(tx.enqueue(&NewMessage::new("good", format!("{i}"))).await.unwrap().id);
    }
    let failed = tx.enqueue(&NewMessage::new("bad", "x")).await.unwrap().id;
    let unrouted = tx.enqueue(&NewMessage::new("elsewhere", "y")).await.unwrap().id;
    tx.commit().await.unwrap();

    let relay = Relay::builder(&outbox)
        .config(RelayConfig {
            idle_interval: Duration::from_millis(100),
            unrouted_grace: Duration::from_secs(3600),
            ..RelayConfig::default()
        })
        .destination(Destination::new("test", transport.clone()))
        .route(Route::new("good", ["test"]))
        .route(Route::new("bad", ["test"]))
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let relaying = tokio::spawn(relay.run(stop.clone()));
    let retention =
        Retention { finished_after: Duration::from_millis(1), interval: Duration::from_millis(50), batch: 2 };
    let purging = tokio::spawn(retention.run(outbox.clone(), "test".into(), stop.clone()));

    // Every sent message is deleted (in batches of two), the failed one stays for a person to
    // re-drive, the unrouted one stays open.
    let deadline = Instant::now() + WAIT;
    loop {
        let mut left = Vec::new();
        for id in &sent {
            if outbox.get(*id).await.unwrap().is_some() {
                left.push(*id);
            }
        }
        let failed_now = outbox.get(failed).await.unwrap().map(|m| m.status);
        if left.is_empty() && failed_now == Some(Status::Failed) {
            break;
        }
        assert!(Instant::now() < deadline, "still there: {left:?}; failed message: {failed_now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let delivered: Vec<_> = transport
        .received()
        .into_iter()
        .filter(|r| r.outcome == Outcome::Delivered)
        .map(|r| r.envelope.id)
        .collect();
    assert_eq!(delivered.len(), 5, "each good message published once: {delivered:?}");
    // Neither a failed nor an open message is ever a finished one.
    assert_eq!(outbox.purge(Duration::from_millis(1), 100, None).await.unwrap(), 0);
    assert_eq!(outbox.get(failed).await.unwrap().map(|m| m.status), Some(Status::Failed));
    assert_eq!(outbox.get(unrouted).await.unwrap().map(|m| m.status), Some(Status::Pending));

    stop.cancel();
    relaying.await.unwrap();
    purging.await.unwrap();
    db.drop_db().await;
}
