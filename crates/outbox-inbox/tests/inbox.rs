//! The inbox's exactly-once guarantee against real PostgreSQL, real MariaDB/MySQL and a SQLite
//! file: duplicates skipped, failures rolled back with the business effect, concurrent
//! consumers of one group, several groups, pruning, migrations.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_inbox::{Claim, Error, Inbox, InboxMessage, Processed};
use rand::seq::SliceRandom;

/// True for errors a consumer retries (the broker would redeliver): deadlocks and
/// serialization failures.
fn retryable(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}").to_lowercase();
    text.contains("deadlock") || text.contains("serializ") || text.contains("database is locked")
}

/// What the suite runs that differs between the dialects.
struct Sql {
    /// Creates `biz_effect (message_id, grp)`, the business effect of a delivery.
    business_ddl: &'static str,
    /// Inserts a business effect: (message id, group).
    effect: &'static str,
    /// Makes the inbox rows of the messages `old%` two days old.
    age_rows: &'static str,
    /// `message_id` read as text.
    text_id: &'static str,
}

impl Sql {
    /// What PostgreSQL and SQLite share (the effect and the ageing are each dialect's own).
    const STANDARD: Sql = Sql {
        business_ddl: "CREATE TABLE biz_effect (message_id TEXT NOT NULL, grp TEXT NOT NULL)",
        effect: "",
        age_rows: "",
        text_id: "message_id",
    };
}

const BUMP_VERSION: &str =
    "INSERT INTO outbox_inbox_schema_migrations (version, description) VALUES (99, 'future')";

macro_rules! suite {
    ($dialect:ident, $fresh:path, $db:ty, $sql:ident) => {
        mod $dialect {
            use super::*;

            const SQL: Sql = super::$sql;

            async fn setup() -> (outbox_testkit::TestDb<$db>, Inbox<$db>) {
                let db = $fresh().await;
                let inbox = Inbox::new(db.pool.clone());
                let report = inbox.migrate().await.expect("migrate");
                assert_eq!((report.from, report.to), (0, outbox_inbox::SCHEMA_VERSION));
                sqlx::query(SQL.business_ddl).execute(&db.pool).await.expect("business table");
                (db, inbox)
            }

            /// Business effects per message id of `group`.
            async fn effects(pool: &sqlx::Pool<$db>, group: &str) -> HashMap<String, i64> {
                let rows: Vec<(String, i64)> = sqlx::query_as(
                    format!("SELECT {}, CAST(COUNT(*) AS SIGNED) FROM biz_effect WHERE grp = ? GROUP BY message_id", SQL.text_id)
                        .replace("SIGNED", if stringify!($dialect) == "mysql" { "SIGNED" } else { "BIGINT" })
                        .replace('?', if stringify!($dialect) == "postgres" { "$1" } else { "?" })
                        .as_str(),
                )
                .bind(group)
                .fetch_all(pool)
                .await
                .unwrap();
                rows.into_iter().collect()
            }

            async fn inbox_rows(pool: &sqlx::Pool<$db>) -> i64 {
                sqlx::query_scalar("SELECT COUNT(*) FROM outbox_inbox").fetch_one(pool).await.unwrap()
            }

            /// One delivery: a transaction of its own, the effect through `process`, commit.
            async fn deliver(
                inbox: &Inbox<$db>,
                group: &str,
                msg: &InboxMessage,
            ) -> anyhow::Result<Processed<u64>> {
                let mut tx = inbox.pool().begin().await?;
                let group_owned = group.to_owned();
                let out = inbox
                    .process(&mut tx, group, msg, |conn| {
                        Box::pin(async move {
                            let done = sqlx::query(SQL.effect)
                                .bind(&msg.id)
                                .bind(&group_owned)
                                .execute(&mut *conn)
                                .await?;
                            Ok::<_, anyhow::Error>(done.rows_affected())
                        })
                    })
                    .await?;
                tx.commit().await?;
                Ok(out)
            }

            #[tokio::test]
            async fn migrating_twice_is_a_no_op_and_a_newer_schema_is_refused() {
                let (db, inbox) = setup().await;
                let again = inbox.migrate().await.unwrap();
                assert!(again.applied.is_empty(), "{again:?}");
                assert_eq!(again.from, again.to);
                assert_eq!(inbox.schema_version().await.unwrap(), 1);
                sqlx::query(BUMP_VERSION).execute(&db.pool).await.unwrap();
                let err = inbox.migrate().await.unwrap_err();
                assert!(matches!(err, Error::SchemaTooNew { found: 99, supported: 1 }), "{err}");
                db.drop_db().await;
            }

            #[tokio::test]
            async fn concurrent_migrators_serialize_and_the_outbox_schema_stays_apart() {
                let db = $fresh().await;
                let inbox = Inbox::new(db.pool.clone());
                let runs: Vec<_> = (0..4)
                    .map(|_| {
                        let inbox = inbox.clone();
                        tokio::spawn(async move { inbox.migrate().await })
                    })
                    .collect();
                let mut applied = Vec::new();
                for run in runs {
                    applied.extend(run.await.unwrap().expect("migrate").applied);
                }
                assert_eq!(applied, vec![1], "exactly one migrator applies version 1");
                // The inbox's version table is its own: the outbox's schema is still at 0, and
                // migrating it leaves the inbox's version alone.
                let outbox = outbox_store::Outbox::new(db.pool.clone());
                let report = outbox.migrate().await.unwrap();
                assert_eq!((report.from, report.to), (0, outbox_store::SCHEMA_VERSION));
                assert_eq!(inbox.schema_version().await.unwrap(), outbox_inbox::SCHEMA_VERSION);
                db.drop_db().await;
            }

            #[tokio::test]
            async fn three_deliveries_make_one_effect_and_two_duplicates() {
                let (db, inbox) = setup().await;
                let msg = InboxMessage::new("shop:42", r#"{"order":42}"#);
                let mut outcomes = Vec::new();
                for _ in 0..3 {
                    outcomes.push(deliver(&inbox, "billing", &msg).await.unwrap());
                }
                assert_eq!(outcomes, vec![Processed::Done(1), Processed::Duplicate, Processed::Duplicate]);
                assert_eq!(effects(&db.pool, "billing").await, HashMap::from([("shop:42".to_owned(), 1)]));
                assert_eq!(inbox_rows(&db.pool).await, 1);

                // After a duplicate the caller's transaction is still usable (MySQL: the
                // duplicate-key error rolled back only its own statement).
                let mut tx = db.pool.begin().await.unwrap();
                let claim = inbox.claim(&mut tx, "billing", "shop:42").await.unwrap();
                assert_eq!(claim, Claim::Duplicate);
                sqlx::query(SQL.effect).bind("other").bind("billing").execute(&mut *tx).await.unwrap();
                tx.commit().await.unwrap();
                assert_eq!(effects(&db.pool, "billing").await.get("other"), Some(&1));
                db.drop_db().await;
            }

            #[tokio::test]
            async fn a_failing_closure_rolls_back_the_inbox_row_and_the_retry_applies_once() {
                let (db, inbox) = setup().await;
                let msg = InboxMessage::new("7", "{}");
                let mut tx = db.pool.begin().await.unwrap();
                let err = inbox
                    .process(&mut tx, "billing", &msg, |conn| {
                        Box::pin(async move {
                            sqlx::query(SQL.effect).bind("7").bind("billing").execute(&mut *conn).await?;
                            anyhow::bail!("payment provider down");
                            #[allow(unreachable_code)]
                            Ok(())
                        })
                    })
                    .await
                    .unwrap_err();
                assert!(err.to_string().contains("payment provider down"));
                tx.rollback().await.unwrap();
                assert_eq!(inbox_rows(&db.pool).await, 0);
                assert!(effects(&db.pool, "billing").await.is_empty());

                // Dropping the transaction without rollback is the same.
                {
                    let mut tx = db.pool.begin().await.unwrap();
                    let r: anyhow::Result<Processed<()>> = inbox
                        .process(&mut tx, "billing", &msg, |_| Box::pin(async { anyhow::bail!("crash") }))
                        .await;
                    assert!(r.is_err());
                }
                assert_eq!(inbox_rows(&db.pool).await, 0);

                assert_eq!(deliver(&inbox, "billing", &msg).await.unwrap(), Processed::Done(1));
                assert_eq!(deliver(&inbox, "billing", &msg).await.unwrap(), Processed::Duplicate);
                assert_eq!(effects(&db.pool, "billing").await, HashMap::from([("7".to_owned(), 1)]));
                db.drop_db().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn four_concurrent_consumers_of_a_duplicated_stream_apply_each_message_once() {
                let (db, inbox) = setup().await;
                let mut stream: Vec<InboxMessage> = (0..200)
                    .flat_map(|i| std::iter::repeat_with(move || InboxMessage::new(format!("m{i}"), "{}")).take(3))
                    .collect();
                stream.shuffle(&mut rand::thread_rng());
                let queue = Arc::new(std::sync::Mutex::new(stream));
                let done = Arc::new(AtomicU32::new(0));
                let dup = Arc::new(AtomicU32::new(0));
                let retries = Arc::new(AtomicU32::new(0));
                let mut tasks = Vec::new();
                for _ in 0..4 {
                    let (inbox, queue) = (inbox.clone(), queue.clone());
                    let (done, dup, retries) = (done.clone(), dup.clone(), retries.clone());
                    tasks.push(tokio::spawn(async move {
                        loop {
                            let Some(msg) = queue.lock().unwrap().pop() else { break };
                            loop {
                                match deliver(&inbox, "billing", &msg).await {
                                    Ok(Processed::Done(_)) => done.fetch_add(1, Ordering::Relaxed),
                                    Ok(Processed::Duplicate) => dup.fetch_add(1, Ordering::Relaxed),
                                    Err(e) if retryable(&e) => {
                                        retries.fetch_add(1, Ordering::Relaxed);
                                        continue;
                                    }
                                    Err(e) => panic!("{e:#}"),
                                };
                                break;
                            }
                        }
                    }));
                }
                for t in tasks {
                    t.await.unwrap();
                }
                assert_eq!(done.load(Ordering::Relaxed), 200);
                assert_eq!(dup.load(Ordering::Relaxed), 400);
                let effects = effects(&db.pool, "billing").await;
                assert_eq!(effects.len(), 200);
                assert!(effects.values().all(|&n| n == 1), "{effects:?}");
                assert_eq!(inbox_rows(&db.pool).await, 200);
                eprintln!("{}: retried deliveries: {}", stringify!($dialect), retries.load(Ordering::Relaxed));
                db.drop_db().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_racing_duplicate_waits_for_the_first_transaction_then_is_a_duplicate() {
                let (db, inbox) = setup().await;
                let mut first = db.pool.begin().await.unwrap();
                assert_eq!(inbox.claim(&mut first, "billing", "race").await.unwrap(), Claim::New);
                let second = {
                    let inbox = inbox.clone();
                    tokio::spawn(async move {
                        let msg = InboxMessage::new("race", "{}");
                        deliver(&inbox, "billing", &msg).await.unwrap()
                    })
                };
                tokio::time::sleep(Duration::from_millis(300)).await;
                assert!(!second.is_finished(), "the second insert must wait for the first transaction");
                sqlx::query(SQL.effect).bind("race").bind("billing").execute(&mut *first).await.unwrap();
                first.commit().await.unwrap();
                assert_eq!(second.await.unwrap(), Processed::Duplicate);
                assert_eq!(effects(&db.pool, "billing").await, HashMap::from([("race".to_owned(), 1)]));
                db.drop_db().await;
            }

            #[tokio::test]
            async fn each_group_processes_the_message_once() {
                let (db, inbox) = setup().await;
                let msg = InboxMessage::new("99", "{}");
                for group in ["billing", "shipping", "analytics"] {
                    assert_eq!(deliver(&inbox, group, &msg).await.unwrap(), Processed::Done(1));
                }
                for group in ["billing", "shipping", "analytics"] {
                    assert!(deliver(&inbox, group, &msg).await.unwrap().is_duplicate());
                    assert_eq!(effects(&db.pool, group).await, HashMap::from([("99".to_owned(), 1)]));
                }
                assert_eq!(inbox_rows(&db.pool).await, 3);
                db.drop_db().await;
            }

            #[tokio::test]
            async fn prune_deletes_only_old_rows() {
                let (db, inbox) = setup().await;
                for id in ["old1", "old2", "old3", "new1", "new2"] {
                    assert_eq!(deliver(&inbox, "billing", &InboxMessage::new(id, "{}")).await.unwrap(), Processed::Done(1));
                }
                sqlx::query(SQL.age_rows).execute(&db.pool).await.unwrap();
                assert_eq!(inbox.prune(Duration::from_secs(86_400), 2).await.unwrap(), 3);
                let mut left: Vec<String> =
                    sqlx::query_scalar(&format!("SELECT {} FROM outbox_inbox", SQL.text_id))
                        .fetch_all(&db.pool)
                        .await
                        .unwrap();
                left.sort();
                assert_eq!(left, vec!["new1", "new2"]);
                assert_eq!(inbox.prune(Duration::from_secs(86_400), 100).await.unwrap(), 0);
                // A pruned id is processed again if it comes back (hence: retention > redelivery window).
                assert!(!deliver(&inbox, "billing", &InboxMessage::new("old1", "{}")).await.unwrap().is_duplicate());
                db.drop_db().await;
            }

            #[tokio::test]
            async fn errors_are_errors_not_duplicates() {
                let db = $fresh().await;
                let inbox = Inbox::new(db.pool.clone());
                // No table: the insert fails, and that is reported as an error.
                let mut tx = db.pool.begin().await.unwrap();
                let err = inbox.claim(&mut tx, "billing", "1").await.unwrap_err();
                assert!(matches!(err, Error::Database(_)), "{err:?}");
                drop(tx);
                inbox.migrate().await.unwrap();
                let mut tx = db.pool.begin().await.unwrap();
                assert!(matches!(inbox.claim(&mut tx, "", "1").await, Err(Error::InvalidMessage { .. })));
                let long = "x".repeat(192);
                assert!(matches!(inbox.claim(&mut tx, "g", &long).await, Err(Error::InvalidMessage { .. })));
                let ok = "é".repeat(191);
                assert_eq!(inbox.claim(&mut tx, "g", &ok).await.unwrap(), Claim::New);
                assert_eq!(inbox.claim(&mut tx, "g", &ok).await.unwrap(), Claim::Duplicate);
                // Ids compare exactly: case matters.
                assert_eq!(inbox.claim(&mut tx, "g", "Abc").await.unwrap(), Claim::New);
                assert_eq!(inbox.claim(&mut tx, "g", "abc").await.unwrap(), Claim::New);
                tx.commit().await.unwrap();
                db.drop_db().await;
            }
        }
    };
}

const POSTGRES: Sql = Sql {
    effect: "INSERT INTO biz_effect (message_id, grp) VALUES ($1, $2)",
    age_rows: "UPDATE outbox_inbox SET processed_at = now() - interval '2 days' WHERE message_id LIKE 'old%'",
    ..Sql::STANDARD
};

const MYSQL: Sql = Sql {
    business_ddl: "CREATE TABLE biz_effect (message_id VARCHAR(191) NOT NULL, grp VARCHAR(128) NOT NULL) \
                   ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
    effect: "INSERT INTO biz_effect (message_id, grp) VALUES (?, ?)",
    age_rows: "UPDATE outbox_inbox SET processed_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY WHERE message_id LIKE 'old%'",
    text_id: "CONVERT(message_id USING utf8mb4)",
};

const SQLITE: Sql = Sql {
    effect: "INSERT INTO biz_effect (message_id, grp) VALUES (?1, ?2)",
    age_rows: "UPDATE outbox_inbox SET processed_at = processed_at - 172800000 WHERE message_id LIKE 'old%'",
    ..Sql::STANDARD
};

suite!(postgres, outbox_testkit::fresh_pg, sqlx::Postgres, POSTGRES);
suite!(mysql, outbox_testkit::fresh_mysql, sqlx::MySql, MYSQL);
suite!(sqlite, outbox_testkit::fresh_sqlite, sqlx::Sqlite, SQLITE);
