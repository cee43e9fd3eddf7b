//! ACK mode in the store, against real PostgreSQL, real MariaDB/MySQL and a SQLite file: a sent
//! delivery with an ACK deadline is completed by its ACK (idempotent), expires back to `pending`
//! when no ACK arrives in time, and with fan-out one ACK confirms one destination only.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use chrono::Utc;
use outbox_store::{
    AckOutcome, Acks, Claims, DeliveryWrite, MessageId, NewMessage, Outbox, Settlement, Status,
};

const LEASE: Duration = Duration::from_secs(30);
const ACK_TIMEOUT: Duration = Duration::from_millis(300);

fn delivery(id: MessageId, destination: &str, ack: bool) -> DeliveryWrite {
    DeliveryWrite {
        message_id: id,
        destination: destination.into(),
        status: Status::Sent,
        attempts: 0,
        retry_in: Duration::ZERO,
        last_error: None,
        attempted: true,
        ack_timeout: ack.then_some(ACK_TIMEOUT),
    }
}

macro_rules! suite {
    ($dialect:ident, $fresh:path, $db:ty) => {
        mod $dialect {
            use super::*;

            /// Runs `test` on the outbox of a fresh, migrated database; then drops the database.
            async fn on_outbox(test: impl AsyncFnOnce(&Outbox<$db>)) {
                let db = $fresh().await;
                let outbox = Outbox::new(db.pool.clone());
                outbox.migrate().await.expect("migrate");
                test(&outbox).await;
                drop(outbox);
                db.drop_db().await;
            }

            /// Enqueues one message, claims it and settles it as sent to `ack` destinations
            /// (awaiting an ACK) and `plain` ones (no ACK).
            async fn sent(outbox: &Outbox<$db>, ack: &[&str], plain: &[&str]) -> MessageId {
                let id = outbox.enqueue(&NewMessage::new("order.paid", "{}")).await.unwrap().id;
                let claimed = outbox.claim("r1", 10, LEASE).await.unwrap();
                assert_eq!(claimed.iter().map(|m| m.id).collect::<Vec<_>>(), vec![id]);
                let mut deliveries: Vec<DeliveryWrite> = ack.iter().map(|d| delivery(id, d, true)).collect();
                deliveries.extend(plain.iter().map(|d| delivery(id, d, false)));
                let report = outbox
                    .settle("r1", &Settlement { sent: vec![id], messages: vec![], deliveries })
                    .await
                    .unwrap();
                assert_eq!(report.settled, 1, "{report:?}");
                assert!(report.lost_lease.is_empty(), "{report:?}");
                assert_eq!(outbox.get(id).await.unwrap().unwrap().status, Status::Sent);
                id
            }

            /// [`sent`] to `crm` and `erp` awaiting an ACK and to `audit` with none; then acked
            /// by `crm`, which leaves the message waiting for `erp`.
            async fn fanned_out_and_acked_by_crm(outbox: &Outbox<$db>) -> MessageId {
                let id = sent(outbox, &["crm", "erp"], &["audit"]).await;
                assert_eq!(outbox.ack(id, "crm").await.unwrap(), AckOutcome::Acked { message_done: false });
                id
            }

            /// The consumer's ACK can arrive before the relay records the delivery (the message is
            /// still `sending`): it is recorded, settling keeps it, and nothing expires later.
            #[tokio::test]
            async fn an_ack_that_overtakes_the_relays_bookkeeping_is_kept() {
                on_outbox(async |outbox| {
                    let id = outbox.enqueue(&NewMessage::new("order.paid", "{}")).await.unwrap().id;
                    assert_eq!(outbox.claim("r1", 10, LEASE).await.unwrap().len(), 1);
                    assert_eq!(
                        outbox.ack(id, "crm").await.unwrap(),
                        AckOutcome::Acked { message_done: false }
                    );
                    assert_eq!(outbox.ack(id, "crm").await.unwrap(), AckOutcome::AlreadyAcked);
                    let report = outbox
                        .settle(
                            "r1",
                            &Settlement {
                                sent: vec![id],
                                messages: vec![],
                                deliveries: vec![delivery(id, "crm", true)],
                            },
                        )
                        .await
                        .unwrap();
                    assert_eq!(report.settled, 1);
                    assert_eq!(
                        delivery_of(outbox, id, "crm").await.status,
                        Status::Acked,
                        "settling keeps the ACK"
                    );
                    tokio::time::sleep(ACK_TIMEOUT + Duration::from_millis(200)).await;
                    assert_eq!(outbox.expire_acks(100).await.unwrap(), 0, "an acked delivery never expires");
                    // Without a leased message, an ACK for a delivery that does not exist is unknown.
                    assert_eq!(outbox.ack(id, "erp").await.unwrap(), AckOutcome::Unknown);
                })
                .await;
            }

            async fn delivery_of(
                outbox: &Outbox<$db>,
                id: MessageId,
                destination: &str,
            ) -> outbox_store::DeliveryState {
                outbox
                    .deliveries(&[id])
                    .await
                    .unwrap()
                    .into_iter()
                    .find(|d| d.destination == destination)
                    .expect("delivery row")
            }

            #[tokio::test]
            async fn an_ack_completes_the_message_once() {
                on_outbox(async |outbox| {
                    let id = sent(outbox, &["crm"], &[]).await;

                    assert_eq!(
                        outbox.ack(id, "crm").await.unwrap(),
                        AckOutcome::Acked { message_done: true }
                    );
                    assert_eq!(outbox.get(id).await.unwrap().unwrap().status, Status::Acked);
                    assert_eq!(delivery_of(outbox, id, "crm").await.status, Status::Acked);

                    assert_eq!(outbox.ack(id, "crm").await.unwrap(), AckOutcome::AlreadyAcked);
                    assert_eq!(outbox.ack(id, "billing").await.unwrap(), AckOutcome::Unknown);
                    assert_eq!(outbox.ack(MessageId(id.0 + 1000), "crm").await.unwrap(), AckOutcome::Unknown);

                    // Acked in time: the deadline is gone, nothing expires.
                    tokio::time::sleep(ACK_TIMEOUT + Duration::from_millis(200)).await;
                    assert_eq!(outbox.expire_acks(100).await.unwrap(), 0);
                    assert_eq!(outbox.get(id).await.unwrap().unwrap().status, Status::Acked);
                })
                .await;
            }

            #[tokio::test]
            async fn a_missing_ack_sends_the_message_again() {
                on_outbox(async |outbox| {
                    let id = sent(outbox, &["crm"], &[]).await;

                    // Not yet due.
                    assert_eq!(outbox.expire_acks(100).await.unwrap(), 0);
                    tokio::time::sleep(ACK_TIMEOUT + Duration::from_millis(200)).await;
                    assert_eq!(outbox.expire_acks(100).await.unwrap(), 1);

                    let d = delivery_of(outbox, id, "crm").await;
                    assert_eq!(d.status, Status::Pending);
                    assert_eq!(d.attempts, 1);
                    assert_eq!(d.wait, Duration::ZERO);
                    assert_eq!(d.last_error.as_deref(), Some("no ACK before the deadline"));

                    let m = outbox.get(id).await.unwrap().unwrap();
                    assert_eq!(m.status, Status::Pending);
                    assert_eq!(m.attempts, 1);
                    assert_eq!(m.last_error.as_deref(), Some("[crm] no ACK before the deadline"));
                    assert!(m.lease_owner.is_none());
                    assert!(m.next_attempt_at <= Utc::now() + chrono::Duration::seconds(5), "due now");

                    assert_eq!(outbox.expire_acks(100).await.unwrap(), 0, "expired once only");
                    // An ACK that arrives after the deadline finds nothing awaiting.
                    assert_eq!(
                        outbox.ack(id, "crm").await.unwrap(),
                        AckOutcome::NotAwaiting { status: Status::Pending }
                    );

                    let again = outbox.claim("r1", 10, LEASE).await.unwrap();
                    assert_eq!(again.iter().map(|m| m.id).collect::<Vec<_>>(), vec![id], "published again");
                    assert_eq!(again[0].attempts, 1);
                    drop(again);
                })
                .await;
            }

            #[tokio::test]
            async fn with_fan_out_an_ack_confirms_one_destination_only() {
                on_outbox(async |outbox| {
                    let id = fanned_out_and_acked_by_crm(outbox).await;
                    assert_eq!(outbox.get(id).await.unwrap().unwrap().status, Status::Sent);
                    assert_eq!(delivery_of(outbox, id, "crm").await.status, Status::Acked);
                    assert_eq!(delivery_of(outbox, id, "erp").await.status, Status::Sent);
                    assert_eq!(
                        outbox.ack(id, "erp").await.unwrap(),
                        AckOutcome::Acked { message_done: true }
                    );
                    assert_eq!(outbox.get(id).await.unwrap().unwrap().status, Status::Acked);
                })
                .await;
            }

            #[tokio::test]
            async fn with_fan_out_only_the_late_destination_expires() {
                on_outbox(async |outbox| {
                    let id = fanned_out_and_acked_by_crm(outbox).await;
                    tokio::time::sleep(ACK_TIMEOUT + Duration::from_millis(200)).await;
                    assert_eq!(outbox.expire_acks(100).await.unwrap(), 1);
                    assert_eq!(delivery_of(outbox, id, "crm").await.status, Status::Acked);
                    assert_eq!(delivery_of(outbox, id, "audit").await.status, Status::Sent);
                    let erp = delivery_of(outbox, id, "erp").await;
                    assert_eq!((erp.status, erp.attempts), (Status::Pending, 1));
                    let m = outbox.get(id).await.unwrap().unwrap();
                    assert_eq!((m.status, m.attempts), (Status::Pending, 1));
                    assert_eq!(m.last_error.as_deref(), Some("[erp] no ACK before the deadline"));
                })
                .await;
            }
        }
    };
}

suite!(postgres, outbox_testkit::fresh_pg, sqlx::Postgres);
suite!(mysql, outbox_testkit::fresh_mysql, sqlx::MySql);
suite!(sqlite, outbox_testkit::fresh_sqlite, sqlx::Sqlite);
