//! Schema and table names ([`Tables`]) against real PostgreSQL, real MariaDB/MySQL and a SQLite
//! file: three outboxes in ONE database (the default names, and two with their own prefix and,
//! on PostgreSQL and MariaDB/MySQL, their own schema), each migrated, each enqueuing, claiming
//! and settling: none sees another's messages, through the relay's claim, the admin queries or
//! a caller's own transaction.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::time::Duration;

use outbox_store::{
    AnyOutbox, ClaimMode, Claims, ListFilter, MessageAdmin, NewMessage, Outbox, OutboxConnection,
    OutboxDatabase, Settlement, Status, Tables, SCHEMA_VERSION,
};

const LEASE: Duration = Duration::from_secs(30);

/// The topics of every message `outbox` lists.
async fn topics<S: MessageAdmin>(outbox: &S) -> BTreeSet<String> {
    outbox.list(&ListFilter::default()).await.unwrap().into_iter().map(|m| m.topic).collect()
}

/// Migrates `outbox`, twice (the second run is a no-op), enqueues `n` messages on `topic`
/// (the first in the caller's own transaction through `enqueue_in`, one with a business key
/// every outbox uses), claims and settles them, and checks what its admin queries see.
async fn exercise<DB: OutboxDatabase>(outbox: &Outbox<DB>, topic: &str, n: usize)
where
    Outbox<DB>: Claims + MessageAdmin,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Connection: OutboxConnection<Database = DB>,
{
    let report = outbox.migrate().await.unwrap();
    assert_eq!((report.from, report.to), (0, SCHEMA_VERSION), "{topic}");
    let again = outbox.migrate().await.unwrap();
    assert!(again.applied.is_empty(), "{topic}: {again:?}");
    outbox.check_schema().await.unwrap();

    let mut tx = outbox.pool().begin().await.unwrap();
    let first =
        tx.enqueue_in(outbox.tables(), &NewMessage::new(topic, "{}").biz("order", "42")).await.unwrap();
    assert!(first.created, "{topic}: the business key is taken in another outbox only");
    tx.commit().await.unwrap();
    for _ in 1..n {
        outbox.enqueue(&NewMessage::new(topic, "{}")).await.unwrap();
    }
    let dup = outbox.enqueue(&NewMessage::new(topic, "{}").biz("order", "42")).await.unwrap();
    assert_eq!((dup.id, dup.created), (first.id, false), "{topic}: a duplicate in its own table");
    assert_eq!(topics(outbox).await, BTreeSet::from([topic.to_owned()]));
    assert_eq!(outbox.stats().await.unwrap().count(Status::Pending), n as u64, "{topic}");
}

/// Claims everything `outbox` has and settles it sent: only its own `n` messages.
async fn drain<DB: OutboxDatabase>(outbox: &Outbox<DB>, mode: ClaimMode, topic: &str, n: usize)
where
    Outbox<DB>: Claims + MessageAdmin,
{
    let mut claimed = outbox.claim_with(mode, "relay", 100, LEASE).await.unwrap();
    assert_eq!(claimed.messages.len(), n, "{topic}");
    assert!(claimed.messages.iter().all(|m| m.topic == topic), "{topic}");
    let ids: Vec<_> = claimed.messages.iter().map(|m| m.id).collect();
    // The delivery rows, read through the claim's own lock or lease (none written yet).
    assert!(outbox.deliveries_held(&mut claimed.hold, &ids).await.unwrap().is_empty());
    let report = outbox
        .settle_held(claimed.hold, "relay", &Settlement { sent: ids, ..Settlement::default() })
        .await
        .unwrap();
    assert_eq!(report.settled, n, "{topic}");
    let stats = outbox.stats().await.unwrap();
    assert_eq!((stats.count(Status::Sent), stats.total), (n as u64, n as u64), "{topic}");
}

macro_rules! suite {
    ($dialect:ident, $fresh:path, $db:ty, $lock:expr, $schemas:expr, $exists:expr) => {
        mod $dialect {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn two_prefixes_in_one_database_never_see_each_others_messages() {
                let db = $fresh().await;
                let (sa, sb): (Option<String>, Option<String>) = ($schemas)(&db.name);
                let plain: Outbox<$db> = Outbox::new(db.pool.clone());
                let a: Outbox<$db> = Outbox::new(db.pool.clone())
                    .with_tables(Tables::new(sa.as_deref(), "app_a_").unwrap())
                    .unwrap();
                let b: Outbox<$db> = Outbox::new(db.pool.clone())
                    .with_tables(Tables::new(sb.as_deref(), "b_").unwrap())
                    .unwrap();

                exercise(&a, "a.topic", 3).await;
                // The others are not migrated by A's run: their version tables are their own.
                assert!(b.check_schema().await.is_err());
                assert!(plain.check_schema().await.is_err());
                exercise(&b, "b.topic", 2).await;
                exercise(&plain, "plain.topic", 1).await;

                // Each claim takes its own outbox's messages only, and each settles its own.
                drain(&b, $lock, "b.topic", 2).await;
                drain(&a, ClaimMode::Lease, "a.topic", 3).await;
                let c = plain.claim_with(ClaimMode::Lease, "relay", 100, LEASE).await.unwrap();
                assert_eq!(
                    c.messages.iter().map(|m| m.topic.as_str()).collect::<Vec<_>>(),
                    vec!["plain.topic"]
                );
                assert_eq!(topics(&a).await, BTreeSet::from(["a.topic".to_owned()]));
                assert_eq!(topics(&b).await, BTreeSet::from(["b.topic".to_owned()]));
                assert_eq!(plain.stats().await.unwrap().count(Status::Sending), 1);

                // The tables are where the names say.
                let exists = $exists;
                for (schema, table) in [
                    (sa.as_deref(), "app_a_message"),
                    (sb.as_deref(), "b_delivery"),
                    (sa.as_deref(), "app_a_schema_migrations"),
                    (None, "outbox_relay"),
                ] {
                    assert!(exists(&db.pool, schema, table).await, "{schema:?}.{table}");
                }
                assert!(!exists(&db.pool, None, "app_a_message").await || sa.is_none());

                for s in [sa, sb].into_iter().flatten() {
                    drop_schema(&db.pool, &s).await;
                }
                db.drop_db().await;
            }
        }
    };
}

trait DropSchema {
    async fn drop_schema_on(&self, schema: &str);
}

impl DropSchema for sqlx::PgPool {
    async fn drop_schema_on(&self, _: &str) {
        // Dropped with the test database.
    }
}

impl DropSchema for sqlx::MySqlPool {
    async fn drop_schema_on(&self, schema: &str) {
        // A MySQL "schema" is a database of its own: not dropped with the test's.
        sqlx::query(&format!("DROP DATABASE IF EXISTS `{schema}`")).execute(self).await.unwrap();
    }
}

impl DropSchema for sqlx::SqlitePool {
    async fn drop_schema_on(&self, _: &str) {}
}

async fn drop_schema<P: DropSchema>(pool: &P, schema: &str) {
    pool.drop_schema_on(schema).await;
}

suite!(
    postgres,
    outbox_testkit::fresh_pg,
    sqlx::Postgres,
    ClaimMode::Lock,
    |_: &str| (Some("sales".to_owned()), Some("billing".to_owned())),
    |pool: &sqlx::PgPool, schema: Option<&str>, table: &str| {
        let pool = pool.clone();
        let name = match schema {
            Some(s) => format!("\"{s}\".{table}"),
            None => table.to_owned(),
        };
        async move {
            sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL")
                .bind(name)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    }
);

suite!(
    mysql,
    outbox_testkit::fresh_mysql,
    sqlx::MySql,
    ClaimMode::Lock,
    |db: &str| (Some(format!("{db}_a")), Some(format!("{db}_b"))),
    |pool: &sqlx::MySqlPool, schema: Option<&str>, table: &str| {
        let pool = pool.clone();
        let (schema, table) = (schema.map(str::to_owned), table.to_owned());
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?",
            )
            .bind(schema)
            .bind(table)
            .fetch_one(&pool)
            .await
            .unwrap()
                == 1
        }
    }
);

suite!(
    sqlite,
    outbox_testkit::fresh_sqlite,
    sqlx::Sqlite,
    ClaimMode::Lease,
    |_: &str| (None, None),
    |pool: &sqlx::SqlitePool, _: Option<&str>, table: &str| {
        let pool = pool.clone();
        let table = table.to_owned();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
            )
            .bind(table)
            .fetch_one(&pool)
            .await
            .unwrap()
                == 1
        }
    }
);

/// A schema on SQLite, and a bad name anywhere, are refused before any SQL runs: the SQLite
/// file is not even created.
#[tokio::test]
async fn bad_names_are_refused_before_any_sql() {
    for (schema, prefix) in [
        (None, "x; drop table outbox_message; --"),
        (None, "Upper_"),
        (None, ""),
        (None, "ünï_"),
        (None, "a_prefix_longer_than_twenty_four_"),
        (Some("x; drop"), "ok_"),
        (Some("Sales"), "ok_"),
        (Some("ⓢ"), "ok_"),
        (Some(""), "ok_"),
    ] {
        let err = Tables::new(schema, prefix).unwrap_err();
        assert!(matches!(err, outbox_store::Error::Config(_)), "{err}");
        assert!(err.to_string().contains("must match"), "{err}");
    }
    let path = std::env::temp_dir().join(format!("outbox_names_{}.db", std::process::id()));
    let url = format!("sqlite:{}", path.display());
    let err =
        AnyOutbox::connect_with_tables(&url, 1, Tables::new(Some("s"), "x_").unwrap()).await.unwrap_err();
    assert!(err.to_string().contains("SQLite has no schemas"), "{err}");
    assert!(!path.exists(), "refused before connecting");

    let db = outbox_testkit::fresh_sqlite().await;
    let err = Outbox::new(db.pool.clone()).with_tables(Tables::new(Some("s"), "x_").unwrap()).unwrap_err();
    assert!(err.to_string().contains("SQLite has no schemas"), "{err}");
    db.drop_db().await;
}

/// PostgreSQL's push wake-up is per names: a relay of the `sales`/`app_a_` outbox listens on
/// its own channel, which the trigger on its own table notifies (a foreign writer's plain
/// INSERT, no in-process signal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_outbox_is_woken_by_inserts_into_its_own_table() {
    use outbox_store::{CommitSignal, Wakeups};
    let db = outbox_testkit::fresh_pg().await;
    let a: Outbox<sqlx::Postgres> =
        Outbox::new(db.pool.clone()).with_tables(Tables::new(Some("sales"), "app_a_").unwrap()).unwrap();
    a.migrate().await.unwrap();
    assert_eq!(a.tables().channel(), "app_a_message");
    a.set_idle("relay", true, Duration::from_secs(60)).await.unwrap();
    let signal = CommitSignal::new();
    let listener = a.listen(signal.clone()).await.unwrap().expect("PostgreSQL listens");
    let woken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = woken.clone();
    let waiter = tokio::spawn(async move {
        signal.notified().await;
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    outbox_testkit::eventually("the relay is woken by a foreign INSERT into its table", || {
        let pool = db.pool.clone();
        let woken = woken.clone();
        async move {
            sqlx::query("INSERT INTO \"sales\".app_a_message (topic, payload) VALUES ('t', '{}')")
                .execute(&pool)
                .await
                .unwrap();
            woken.load(std::sync::atomic::Ordering::SeqCst)
        }
    })
    .await;
    waiter.await.unwrap();
    listener.abort();
    db.drop_db().await;
}
