//! The foundation's guarantees, against real PostgreSQL, real MariaDB/MySQL and a SQLite file:
//! atomic enqueue (no phantom, no loss), idempotent biz keys, delay, constraints that reject
//! malformed rows, migrations, and concurrent writers.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use outbox_store::{Error, MessageId, NewMessage, Outbox, OutboxConnection, OutboxTransaction, Status};

/// The same suite, stamped out once per dialect with its concrete types and SQL snippets.
macro_rules! suite {
    ($dialect:ident, $fresh:path, $db:ty, business_ddl = $ddl:expr, insert_business = $ins:expr,
     bump_version = $bump:expr) => {
        mod $dialect {
            use super::*;

            /// Runs `test` on a fresh database, migrated and with the business table, and its
            /// outbox; then drops the database.
            async fn on_outbox(test: impl AsyncFnOnce(&sqlx::Pool<$db>, &Outbox<$db>)) {
                let db = $fresh().await;
                let outbox = Outbox::new(db.pool.clone());
                let report = outbox.migrate().await.expect("migrate");
                assert_eq!(report.from, 0);
                assert_eq!(report.to, outbox_store::SCHEMA_VERSION);
                sqlx::query($ddl).execute(&db.pool).await.expect("business table");
                test(&db.pool, &outbox).await;
                db.drop_db().await;
            }

            /// A transaction of `outbox` that has written business row `order`.
            async fn with_order(outbox: &Outbox<$db>, order: i64) -> OutboxTransaction<'static, $db> {
                let mut tx = outbox.begin().await.unwrap();
                sqlx::query($ins).bind(order).execute(&mut *tx).await.unwrap();
                tx
            }

            async fn count(pool: &sqlx::Pool<$db>) -> i64 {
                sqlx::query_scalar("SELECT COUNT(*) FROM outbox_message").fetch_one(pool).await.unwrap()
            }

            #[tokio::test]
            async fn migrating_twice_is_a_no_op_and_a_newer_schema_is_refused() {
                on_outbox(async |pool, outbox| {
                    let again = outbox.migrate().await.unwrap();
                    assert!(again.applied.is_empty(), "{again:?}");
                    assert_eq!(again.from, again.to);
                    outbox.check_schema().await.unwrap();

                    sqlx::query($bump).execute(pool).await.unwrap();
                    let err = outbox.migrate().await.unwrap_err();
                    assert!(matches!(err, Error::SchemaTooNew { found: 99, .. }), "{err}");
                    assert!(err.to_string().contains("version 99"), "{err}");
                    assert!(matches!(outbox.check_schema().await, Err(Error::SchemaTooNew { .. })));
                })
                .await;
            }

            #[tokio::test]
            async fn rolled_back_transaction_leaves_no_message() {
                on_outbox(async |pool, outbox| {
                    let mut tx = with_order(outbox, 1).await;
                    let e = tx.enqueue(&NewMessage::new("order.paid", "{}")).await.unwrap();
                    assert!(e.created);
                    tx.rollback().await.unwrap();
                    assert_eq!(count(pool).await, 0);
                    assert!(outbox.get(e.id).await.unwrap().is_none());

                    // Dropping an uncommitted transaction rolls back too.
                    {
                        let mut tx = outbox.begin().await.unwrap();
                        tx.enqueue(&NewMessage::new("order.paid", "{}")).await.unwrap();
                    }
                    assert_eq!(count(pool).await, 0);
                    assert!(outbox.signal().take_ids().is_empty(), "a rollback must not signal");
                })
                .await;
            }

            #[tokio::test]
            async fn committed_transaction_leaves_exactly_one_message() {
                on_outbox(async |pool, outbox| {
                    let mut tx = with_order(outbox, 7).await;
                    let msg = NewMessage::new("order.paid", r#"{"order":7}"#)
                        .key("order-7")
                        .tag("paid")
                        .biz("order", "7")
                        .header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
                        .header("source", "checkout")
                        .max_attempts(5)
                        .created_by("checkout-svc");
                    let e = tx.enqueue(&msg).await.unwrap();
                    tx.commit().await.unwrap();
                    assert_eq!(outbox.signal().take_ids(), vec![e.id], "commit hands the id to the relay");

                    assert_eq!(count(pool).await, 1);
                    let row = outbox.get(e.id).await.unwrap().expect("row");
                    assert_eq!(row.topic, "order.paid");
                    assert_eq!(row.payload, r#"{"order":7}"#);
                    assert_eq!(row.key.as_deref(), Some("order-7"));
                    assert_eq!(row.tag.as_deref(), Some("paid"));
                    assert_eq!(row.biz_type.as_deref(), Some("order"));
                    assert_eq!(row.biz_key.as_deref(), Some("7"));
                    assert_eq!(row.headers, msg.headers);
                    assert_eq!(row.status, Status::Pending);
                    assert_eq!(row.attempts, 0);
                    assert_eq!(row.max_attempts, Some(5));
                    assert_eq!(row.created_by.as_deref(), Some("checkout-svc"));
                    assert!(row.lease_owner.is_none() && row.last_error.is_none());
                    let age = Utc::now() - row.next_attempt_at;
                    assert!(age.num_seconds().abs() < 60, "due now, by the database clock: {age}");
                })
                .await;
            }

            /// A message with nothing but a topic, key, tag, payload and attempt limit (MySQL
            /// enqueues it with a shorter statement, the rest the table's defaults): the row
            /// reads back as the full statement would have written it.
            #[tokio::test]
            async fn a_plain_message_reads_back_with_every_default() {
                on_outbox(async |_pool, outbox| {
                    let before = Utc::now();
                    for (order, tag, max_attempts) in [(8, Some("paid"), Some(3)), (9, None, None)] {
                        let mut msg = NewMessage::new("order.paid", r#"{"order":8}"#).key("order-8");
                        if let Some(t) = tag {
                            msg = msg.tag(t);
                        }
                        if let Some(n) = max_attempts {
                            msg = msg.max_attempts(n);
                        }
                        let mut tx = with_order(outbox, order).await;
                        let e = tx.enqueue(&msg).await.unwrap();
                        tx.commit().await.unwrap();
                        assert!(e.created);
                        let row = outbox.get(e.id).await.unwrap().expect("row");
                        assert_eq!((row.topic.as_str(), row.payload.as_str()), ("order.paid", r#"{"order":8}"#));
                        assert_eq!(row.key.as_deref(), Some("order-8"));
                        assert_eq!(row.tag.as_deref(), tag);
                        assert_eq!(row.max_attempts, max_attempts.map(|n: u32| n as i32));
                        assert!(row.headers.is_empty(), "{:?}", row.headers);
                        assert!(row.biz_type.is_none() && row.biz_key.is_none());
                        assert!(row.created_by.is_none() && row.updated_by.is_none());
                        assert_eq!((row.status, row.attempts), (Status::Pending, 0));
                        let age = Utc::now() - row.next_attempt_at;
                        assert!(age.num_seconds().abs() < 60, "due now, by the database clock: {age}");
                        assert!((row.created_at - before).num_seconds().abs() < 60, "{}", row.created_at);
                    }
                })
                .await;
            }

            #[tokio::test]
            async fn duplicate_biz_key_returns_the_first_message() {
                on_outbox(async |pool, outbox| {
                    let first = outbox.enqueue(&NewMessage::new("t", "first").biz("order", "42")).await.unwrap();
                    assert!(first.created);

                    // Again in another transaction, on a plain sqlx transaction.
                    let mut tx = pool.begin().await.unwrap();
                    let again = tx.enqueue(&NewMessage::new("t", "second").biz("order", "42")).await.unwrap();
                    // The duplicate did not break the transaction: later statements still run.
                    let other = tx.enqueue(&NewMessage::new("t", "other").biz("order", "43")).await.unwrap();
                    outbox.commit(tx).await.unwrap();
                    assert_eq!(again, outbox_store::Enqueued { id: first.id, created: false });
                    assert!(other.created && other.id != first.id);

                    // Same biz_key under another biz_type is a different message.
                    let refund = outbox.enqueue(&NewMessage::new("t", "r").biz("refund", "42")).await.unwrap();
                    assert!(refund.created);

                    let kept = outbox.get(first.id).await.unwrap().unwrap();
                    assert_eq!(kept.payload, "first", "the duplicate must not overwrite");
                    assert_eq!(count(pool).await, 3);
                })
                .await;
            }

            #[tokio::test]
            async fn batch_enqueue_keeps_input_order_and_dedupes() {
                on_outbox(async |pool, outbox| {
                    let existing = outbox.enqueue(&NewMessage::new("t", "old").biz("o", "1")).await.unwrap();
                    let batch = vec![
                        NewMessage::new("t", "a"),
                        NewMessage::new("t", "dup-of-existing").biz("o", "1"),
                        NewMessage::new("t", "b").biz("o", "2"),
                        NewMessage::new("t", "c"),
                        NewMessage::new("t", "dup-in-batch").biz("o", "2"),
                    ];
                    let mut tx = outbox.begin().await.unwrap();
                    let out = tx.enqueue_batch(&batch).await.unwrap();
                    tx.commit().await.unwrap();
                    assert_eq!(out.len(), 5);
                    assert_eq!(out[1], outbox_store::Enqueued { id: existing.id, created: false });
                    assert_eq!(out[4], outbox_store::Enqueued { id: out[2].id, created: false });
                    assert!(out[0].created && out[2].created && out[3].created);
                    assert!(out[0].id < out[2].id && out[2].id < out[3].id, "ids follow input order: {out:?}");
                    for (i, payload) in [(0, "a"), (2, "b"), (3, "c")] {
                        assert_eq!(outbox.get(out[i].id).await.unwrap().unwrap().payload, payload);
                    }
                    assert_eq!(count(pool).await, 4);
                    let bad = vec![NewMessage::new("t", "ok"), NewMessage::new("", "bad")];
                    let err = outbox.begin().await.unwrap().enqueue_batch(&bad).await.unwrap_err();
                    assert!(matches!(err, Error::InvalidMessage { field: "topic", .. }), "{err}");
                })
                .await;
            }

            #[tokio::test]
            async fn scheduled_message_is_due_later() {
                on_outbox(async |_pool, outbox| {
                    let at = Utc::now() + chrono::Duration::hours(2);
                    let a = outbox.enqueue(&NewMessage::new("t", "x").deliver_at(at)).await.unwrap();
                    let b = outbox.enqueue(&NewMessage::new("t", "y").delay(Duration::from_secs(600))).await.unwrap();
                    let a = outbox.get(a.id).await.unwrap().unwrap();
                    let b = outbox.get(b.id).await.unwrap().unwrap();
                    assert!((a.next_attempt_at - at).num_milliseconds().abs() <= 1, "{} vs {at}", a.next_attempt_at);
                    let lead = b.next_attempt_at - b.created_at;
                    assert!((lead.num_milliseconds() - 600_000).abs() < 2_000, "delay by the db clock: {lead}");
                })
                .await;
            }

            #[tokio::test]
            async fn invalid_messages_fail_before_the_database() {
                on_outbox(async |pool, outbox| {
                    let cases = [
                        (NewMessage::new("", "x"), "topic"),
                        (NewMessage::new("t", "x").key(""), "key"),
                        (NewMessage::new("t", "x").biz("o", ""), "biz_key"),
                        (NewMessage::new("t".repeat(300), "x"), "topic"),
                        (NewMessage::new("t", "x").max_attempts(0), "max_attempts"),
                    ];
                    for (msg, field) in cases {
                        match outbox.enqueue(&msg).await {
                            Err(Error::InvalidMessage { field: f, .. }) => assert_eq!(f, field),
                            other => panic!("{field}: expected InvalidMessage, got {other:?}"),
                        }
                    }
                    assert_eq!(count(pool).await, 0);
                })
                .await;
            }

            #[tokio::test]
            async fn constraints_reject_malformed_foreign_rows() {
                on_outbox(async |pool, _outbox| {
                    // What a foreign application might write by mistake, and the constraint that
                    // must reject it at insert time.
                    let cases: &[(&str, &str)] = &[
                        ("INSERT INTO outbox_message (topic, payload) VALUES ('', 'p')", "outbox_message_topic_not_blank"),
                        ("INSERT INTO outbox_message (topic, payload) VALUES (' t', 'p')", "outbox_message_topic_not_blank"),
                        ("INSERT INTO outbox_message (topic, payload, status) VALUES ('t', 'p', 'done')", "outbox_message_status_known"),
                        ("INSERT INTO outbox_message (topic, payload, attempts) VALUES ('t', 'p', -1)", "outbox_message_attempts_not_negative"),
                        ("INSERT INTO outbox_message (topic, payload, max_attempts) VALUES ('t', 'p', 0)", "outbox_message_max_attempts_positive"),
                        ("INSERT INTO outbox_message (topic, payload, biz_type) VALUES ('t', 'p', 'order')", "outbox_message_biz_pair"),
                        ("INSERT INTO outbox_message (topic, payload, biz_type, biz_key) VALUES ('t', 'p', 'order', '')", "outbox_message_biz_not_blank"),
                        ("INSERT INTO outbox_message (topic, payload, msg_key) VALUES ('t', 'p', '')", "outbox_message_key_not_blank"),
                        ("INSERT INTO outbox_message (topic, payload, headers) VALUES ('t', 'p', '[1,2]')", "outbox_message_headers_object"),
                        ("INSERT INTO outbox_message (topic, payload, status) VALUES ('t', 'p', 'sending')", "outbox_message_sending_has_lease"),
                    ];
                    for (sql, constraint) in cases {
                        let err = sqlx::query(sql).execute(pool).await.expect_err(sql);
                        let text = err.to_string();
                        assert!(text.contains(constraint), "{sql}: error does not name {constraint}: {text}");
                    }
                    // Missing payload and missing topic: NOT NULL.
                    for sql in [
                        "INSERT INTO outbox_message (topic) VALUES ('t')",
                        "INSERT INTO outbox_message (payload) VALUES ('p')",
                    ] {
                        sqlx::query(sql).execute(pool).await.expect_err(sql);
                    }
                    // Through the library, a constraint error is typed and names the constraint.
                    let mut conn = pool.acquire().await.unwrap();
                    let e = sqlx::query("INSERT INTO outbox_message (topic, payload, attempts) VALUES ('t', 'p', -5)")
                        .execute(&mut *conn)
                        .await
                        .unwrap_err();
                    let typed = outbox_store::__private_map_error(e);
                    assert!(
                        matches!(&typed, Error::Constraint { constraint, .. } if constraint == "outbox_message_attempts_not_negative"),
                        "{typed:?}"
                    );
                    // Give the connection back: `drop_db` closes the pool and waits for every
                    // checked-out connection.
                    drop(conn);
                    assert_eq!(count(pool).await, 0, "nothing malformed got in");
                    // The minimal contract insert works.
                    sqlx::query("INSERT INTO outbox_message (topic, payload) VALUES ('t', 'p')")
                        .execute(pool)
                        .await
                        .unwrap();
                    assert_eq!(count(pool).await, 1);
                })
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn eight_concurrent_writers_lose_nothing() {
                on_outbox(async |pool, outbox| {
                    const WRITERS: i64 = 8;
                    const PER_WRITER: i64 = 1250;
                    let mut tasks = Vec::new();
                    for w in 0..WRITERS {
                        let outbox = outbox.clone();
                        tasks.push(tokio::spawn(async move {
                            let mut ids = Vec::new();
                            for i in 0..PER_WRITER {
                                let n = w * PER_WRITER + i;
                                let mut tx = with_order(&outbox, n).await;
                                // Every writer also enqueues a shared idempotency key now and then:
                                // concurrent duplicates must resolve to one message, not deadlock.
                                let mut msg = NewMessage::new("order.created", format!("{{\"n\":{n}}}"))
                                    .key(format!("k{}", n % 100))
                                    .biz("order", n.to_string());
                                let shared = i % 50 == 0;
                                if shared {
                                    msg = NewMessage::new("order.audit", "{}").biz("audit", (i / 50).to_string());
                                }
                                let e = tx.enqueue(&msg).await.unwrap();
                                tx.commit().await.unwrap();
                                if !shared {
                                    assert!(e.created);
                                    ids.push(e.id);
                                }
                            }
                            ids
                        }));
                    }
                    let mut all = HashSet::new();
                    for t in tasks {
                        for id in t.await.unwrap() {
                            assert!(all.insert(id), "id {id} returned twice");
                        }
                    }
                    let shared_keys = PER_WRITER / 50;
                    let unique = WRITERS * (PER_WRITER - shared_keys);
                    assert_eq!(all.len() as i64, unique);
                    assert_eq!(count(pool).await, unique + shared_keys, "one message per committed biz key");
                    let business: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM shop_order").fetch_one(pool).await.unwrap();
                    assert_eq!(business, WRITERS * PER_WRITER);
                    for id in all.iter().take(50) {
                        assert!(outbox.get(MessageId(id.0)).await.unwrap().is_some());
                    }
                })
                .await;
            }
        }
    };
}

suite!(
    postgres,
    outbox_testkit::fresh_pg,
    sqlx::Postgres,
    business_ddl = "CREATE TABLE shop_order (id BIGINT PRIMARY KEY, paid BOOLEAN NOT NULL DEFAULT false)",
    insert_business = "INSERT INTO shop_order (id) VALUES ($1)",
    bump_version =
        "INSERT INTO outbox_schema_migrations (version, description) VALUES (99, 'from the future')"
);

suite!(
    mysql,
    outbox_testkit::fresh_mysql,
    sqlx::MySql,
    business_ddl =
        "CREATE TABLE shop_order (id BIGINT PRIMARY KEY, paid BOOLEAN NOT NULL DEFAULT false) ENGINE=InnoDB",
    insert_business = "INSERT INTO shop_order (id) VALUES (?)",
    bump_version =
        "INSERT INTO outbox_schema_migrations (version, description) VALUES (99, 'from the future')"
);

suite!(
    sqlite,
    outbox_testkit::fresh_sqlite,
    sqlx::Sqlite,
    business_ddl = "CREATE TABLE shop_order (id INTEGER PRIMARY KEY, paid INTEGER NOT NULL DEFAULT 0)",
    insert_business = "INSERT INTO shop_order (id) VALUES (?1)",
    bump_version =
        "INSERT INTO outbox_schema_migrations (version, description) VALUES (99, 'from the future')"
);
