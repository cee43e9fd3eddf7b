//! Schema version 5: the table refuses at INSERT what `NewMessage::validate` refuses, on all
//! three databases, naming the rule; and rows written before it (bad times, bad text) are
//! repaired or failed by the migration, never left to stop the relay (issue 14, findings 2, 3
//! and 10).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use outbox_store::{Outbox, OutboxDatabase, Status};
use outbox_testkit::{fresh_mysql, fresh_pg, fresh_sqlite, TestDb};

const WELL_FORMED: &str = "outbox_message_well_formed";
const TIMES: &str = "outbox_message_times_in_range";
const LAST_ERROR: &str = "outbox_message_last_error_bounded";

/// An insert the table must refuse (what follows `INSERT INTO outbox_message`), and the rule it
/// must name.
type Case = (String, &'static str);

/// A row with `column` = `value` (SQL) beside topic `t` and payload `p`.
fn row(column: &str, value: impl std::fmt::Display) -> String {
    format!("(topic, payload, {column}) VALUES ('t', 'p', {value})")
}

/// A row with topic `value` (SQL).
fn topic(value: &str) -> String {
    format!("(topic, payload) VALUES ({value}, 'p')")
}

fn many_headers(n: usize) -> String {
    let fields: Vec<String> = (0..n).map(|i| format!("\"h{i}\": \"v\"")).collect();
    format!("{{{}}}", fields.join(", "))
}

/// What every dialect refuses alike: a key with a trailing space, 65 headers, a header name of
/// 200 `n`s and then `name_tail`.
fn refused_everywhere(name_tail: &str) -> Vec<Case> {
    vec![
        (row("msg_key", "'k '"), WELL_FORMED),
        (row("headers", format!("'{}'", many_headers(65))), WELL_FORMED),
        (row("headers", format!("'{{\"{}{name_tail}\": \"v\"}}'", "n".repeat(200))), WELL_FORMED),
    ]
}

/// On `db`, migrated: each of [`refused_everywhere`]`(name_tail)` and the dialect's `own` cases
/// (run after `session`, SQL) is refused naming its rule, and what the library accepts, the
/// table accepts: inner spaces, 64 headers, and `also` (a column and its value). Then drops the
/// database.
async fn check<DB: OutboxDatabase>(
    db: TestDb<DB>,
    session: &str,
    name_tail: &str,
    own: Vec<Case>,
    also: Option<(&str, &str)>,
) where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    Outbox::new(db.pool.clone()).migrate().await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    for (insert, rule) in refused_everywhere(name_tail).into_iter().chain(own) {
        let sql = format!("{session}INSERT INTO outbox_message {insert}");
        let Err(err) = sqlx::raw_sql(&sql).execute(&mut *conn).await else {
            panic!("{sql}: accepted");
        };
        let text = err.to_string();
        assert!(text.contains(rule), "{sql}: the error does not name {rule}: {text}");
    }
    drop(conn);
    let (column, value) =
        also.map_or((String::new(), String::new()), |(c, v)| (format!(", {c}"), format!(", {v}")));
    let accepted = format!(
        "INSERT INTO outbox_message (topic, payload, msg_key, headers{column}) VALUES ('a b', 'p', 'k 1', '{}'{value})",
        many_headers(64)
    );
    sqlx::raw_sql(&accepted).execute(&db.pool).await.unwrap();
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refuses_what_new_message_refuses() {
    let own = vec![
        (topic("E'sec.a\\nb'"), WELL_FORMED),
        (row("tag", "E'a\\u001bb'"), WELL_FORMED),
        (row("headers", format!("'{{\"h\": \"{}\"}}'", "v".repeat(4097))), WELL_FORMED),
        (row("next_attempt_at", "'-infinity'"), TIMES),
        (row("created_at", "'infinity'"), TIMES),
        (row("next_attempt_at", "'200000-01-01'"), TIMES),
        (row("last_error", format!("'{}'", "e".repeat(2001))), LAST_ERROR),
    ];
    // An old delay is accepted too.
    check(fresh_pg().await, "", " x", own, Some(("next_attempt_at", "'1999-01-01'"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migration_repairs_and_fails_rows_written_before_version_5() {
    let db = fresh_pg().await;
    let outbox = Outbox::new(db.pool.clone());
    outbox.migrate().await.unwrap();
    // Back to version 4, as a table that has lived before this release.
    sqlx::raw_sql(
        "ALTER TABLE outbox_message DROP CONSTRAINT outbox_message_times_in_range, \
         DROP CONSTRAINT outbox_message_well_formed, DROP CONSTRAINT outbox_message_last_error_bounded; \
         ALTER TABLE outbox_delivery DROP CONSTRAINT outbox_delivery_last_error_bounded; \
         DROP FUNCTION outbox_headers_ok(jsonb); DROP FUNCTION outbox_text_ok(text); \
         DROP TABLE outbox_destination_pause; DROP TABLE outbox_relay; \
         DELETE FROM outbox_schema_migrations WHERE version >= 5",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let id = |sql: &'static str| {
        let pool = db.pool.clone();
        async move { sqlx::query_scalar::<_, i64>(sql).fetch_one(&pool).await.unwrap() }
    };
    let infinite = id("INSERT INTO outbox_message (topic, payload, next_attempt_at, created_at) \
                       VALUES ('t', 'p', '-infinity', 'infinity') RETURNING id")
    .await;
    let bad_topic =
        id("INSERT INTO outbox_message (topic, payload) VALUES (E'sec.a\\nb', 'p') RETURNING id").await;
    let long_error = id("INSERT INTO outbox_message (topic, payload, status, last_error) \
                         VALUES ('t', 'p', 'failed', repeat('e', 70000)) RETURNING id")
    .await;
    let report = outbox.migrate().await.unwrap();
    assert_eq!(report.applied, (5..=report.to).collect::<Vec<_>>(), "5 and every later version");
    let m = outbox.get(outbox_store::MessageId(infinite)).await.unwrap().unwrap();
    assert_eq!(m.status, Status::Pending, "times repaired, still deliverable");
    assert!(m.created_at.timestamp() > 1_600_000_000 && m.created_at.timestamp() < 4_000_000_000);
    let m = outbox.get(outbox_store::MessageId(bad_topic)).await.unwrap().unwrap();
    assert_eq!(m.status, Status::Failed);
    assert!(m.last_error.unwrap().contains("refused by schema version 5"));
    let m = outbox.get(outbox_store::MessageId(long_error)).await.unwrap().unwrap();
    assert_eq!(m.last_error.unwrap().chars().count(), 2000);
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_refuses_what_new_message_refuses_whatever_the_sql_mode() {
    let own = vec![
        (topic("'sec.a '"), WELL_FORMED),
        (topic("CONCAT('sec.a', CHAR(10), 'b')"), WELL_FORMED),
        (row("next_attempt_at", "'0000-00-00'"), TIMES),
        (row("last_error", "REPEAT('e', 2001)"), LAST_ERROR),
    ];
    check(fresh_mysql().await, "SET SESSION sql_mode = ''; ", " x", own, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refuses_what_new_message_refuses() {
    let own = vec![
        (topic("'sec.a' || char(10) || 'b'"), WELL_FORMED),
        (row("next_attempt_at", -1), TIMES),
        (row("last_error", format!("'{}'", "e".repeat(2001))), WELL_FORMED),
    ];
    check(fresh_sqlite().await, "", "", own, None).await;
}
