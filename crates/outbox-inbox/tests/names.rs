//! The inbox with schema and table names (`outbox_store::Tables`) against real PostgreSQL,
//! real MariaDB/MySQL and a SQLite file: two inboxes with their own prefix (and, where the
//! database has schemas, their own schema) in ONE database dedupe independently: the same
//! (group, message id) is new to each, a duplicate only within its own table.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use outbox_inbox::{Claim, Inbox};
use outbox_store::Tables;

macro_rules! suite {
    ($dialect:ident, $fresh:path, $db:ty, $schemas:expr, $drop:expr) => {
        mod $dialect {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn two_prefixes_dedupe_independently_in_one_database() {
                let db = $fresh().await;
                let (sa, sb): (Option<String>, Option<String>) = ($schemas)(&db.name);
                // An inbox on the database, its table in `schema` named with `prefix`.
                let named = |schema: &Option<String>, prefix| -> Inbox<$db> {
                    let tables = Tables::new(schema.as_deref(), prefix).unwrap();
                    Inbox::new(db.pool.clone()).with_tables(tables).unwrap()
                };
                let (a, b) = (named(&sa, "svc_a_"), named(&sb, "svc_b_"));
                let plain: Inbox<$db> = Inbox::new(db.pool.clone());
                for inbox in [&a, &b, &plain] {
                    assert_eq!(inbox.schema_version().await.unwrap(), 0);
                    let report = inbox.migrate().await.unwrap();
                    assert_eq!((report.from, report.to), (0, outbox_inbox::SCHEMA_VERSION));
                    assert!(inbox.migrate().await.unwrap().applied.is_empty());
                }
                for inbox in [&a, &b, &plain] {
                    let mut tx = db.pool.begin().await.unwrap();
                    assert_eq!(inbox.claim(&mut *tx, "g", "m-1").await.unwrap(), Claim::New);
                    tx.commit().await.unwrap();
                }
                let mut tx = db.pool.begin().await.unwrap();
                assert_eq!(a.claim(&mut *tx, "g", "m-1").await.unwrap(), Claim::Duplicate);
                assert_eq!(a.claim(&mut *tx, "g", "m-2").await.unwrap(), Claim::New);
                tx.commit().await.unwrap();
                // Pruning everything empties each table on its own: A held two rows, B one. A
                // row claimed in the prune's own millisecond is not yet older than zero (SQLite
                // keeps milliseconds), so prune until the database's clock has passed the claims.
                for (inbox, rows) in [(&a, 2u64), (&b, 1)] {
                    let pruned = AtomicU64::new(0);
                    let total = &pruned;
                    outbox_testkit::eventually("every row of one inbox pruned", move || async move {
                        let n = inbox.prune(Duration::ZERO, 100).await.unwrap();
                        total.fetch_add(n, Ordering::SeqCst) + n >= rows
                    })
                    .await;
                    assert_eq!(pruned.into_inner(), rows);
                }
                let mut tx = db.pool.begin().await.unwrap();
                assert_eq!(plain.claim(&mut *tx, "g", "m-1").await.unwrap(), Claim::Duplicate);
                tx.rollback().await.unwrap();
                for s in [sa, sb].into_iter().flatten() {
                    ($drop)(&db.pool, s).await;
                }
                db.drop_db().await;
            }
        }
    };
}

suite!(
    postgres,
    outbox_testkit::fresh_pg,
    sqlx::Postgres,
    |_: &str| (Some("consumer_a".to_owned()), Some("consumer_b".to_owned())),
    |_: &sqlx::PgPool, _: String| async {}
);

suite!(
    mysql,
    outbox_testkit::fresh_mysql,
    sqlx::MySql,
    |db: &str| (Some(format!("{db}_a")), Some(format!("{db}_b"))),
    |pool: &sqlx::MySqlPool, s: String| {
        let pool = pool.clone();
        async move {
            sqlx::query(&format!("DROP DATABASE IF EXISTS `{s}`")).execute(&pool).await.unwrap();
        }
    }
);

suite!(
    sqlite,
    outbox_testkit::fresh_sqlite,
    sqlx::Sqlite,
    |_: &str| (None, None),
    |_: &sqlx::SqlitePool, _: String| async {}
);

#[tokio::test]
async fn a_schema_is_refused_on_sqlite() {
    let db = outbox_testkit::fresh_sqlite().await;
    let err = Inbox::new(db.pool.clone()).with_tables(Tables::new(Some("s"), "x_").unwrap()).unwrap_err();
    assert!(err.to_string().contains("SQLite has no schemas"), "{err}");
    db.drop_db().await;
}
