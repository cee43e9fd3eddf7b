//! Schema version 5: the table refuses at INSERT what `NewMessage::validate` refuses, on all
//! three databases, naming the rule; and rows written before it (bad times, bad text) are
//! repaired or failed by the migration, never left to stop the relay (issue 14, findings 2, 3
//! and 10).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use outbox_store::{Outbox, Status};

async fn refused<DB: sqlx::Database>(pool: &sqlx::Pool<DB>, cases: &[(String, &str)])
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    let mut conn = pool.acquire().await.unwrap();
    for (sql, rule) in cases {
        let Err(err) = sqlx::raw_sql(sql).execute(&mut *conn).await else {
            panic!("{sql}: accepted");
        };
        let text = err.to_string();
        assert!(text.contains(rule), "{sql}: the error does not name {rule}: {text}");
    }
}

fn many_headers(n: usize) -> String {
    let fields: Vec<String> = (0..n).map(|i| format!("\"h{i}\": \"v\"")).collect();
    format!("{{{}}}", fields.join(", "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refuses_what_new_message_refuses() {
    let db = outbox_testkit::fresh_pg().await;
    Outbox::new(db.pool.clone()).migrate().await.unwrap();
    let ins = "INSERT INTO outbox_message";
    let cases = vec![
        (format!("{ins} (topic, payload) VALUES (E'sec.a\\nb', 'p')"), "outbox_message_well_formed"),
        (format!("{ins} (topic, payload, msg_key) VALUES ('t', 'p', 'k ')"), "outbox_message_well_formed"),
        (
            format!("{ins} (topic, payload, tag) VALUES ('t', 'p', E'a\\u001bb')"),
            "outbox_message_well_formed",
        ),
        (
            format!("{ins} (topic, payload, headers) VALUES ('t', 'p', '{}')", many_headers(65)),
            "outbox_message_well_formed",
        ),
        (
            format!(
                "{ins} (topic, payload, headers) VALUES ('t', 'p', '{{\"{} x\": \"v\"}}')",
                "n".repeat(200)
            ),
            "outbox_message_well_formed",
        ),
        (
            format!(
                "{ins} (topic, payload, headers) VALUES ('t', 'p', '{{\"h\": \"{}\"}}')",
                "v".repeat(4097)
            ),
            "outbox_message_well_formed",
        ),
        (
            format!("{ins} (topic, payload, next_attempt_at) VALUES ('t', 'p', '-infinity')"),
            "outbox_message_times_in_range",
        ),
        (
            format!("{ins} (topic, payload, created_at) VALUES ('t', 'p', 'infinity')"),
            "outbox_message_times_in_range",
        ),
        (
            format!("{ins} (topic, payload, next_attempt_at) VALUES ('t', 'p', '200000-01-01')"),
            "outbox_message_times_in_range",
        ),
        (
            format!("{ins} (topic, payload, last_error) VALUES ('t', 'p', '{}')", "e".repeat(2001)),
            "outbox_message_last_error_bounded",
        ),
    ];
    refused(&db.pool, &cases).await;
    // What the library accepts, the table accepts: inner spaces, 64 headers, an old delay.
    sqlx::raw_sql(&format!(
        "{ins} (topic, payload, msg_key, headers, next_attempt_at) VALUES ('a b', 'p', 'k 1', '{}', '1999-01-01')",
        many_headers(64)
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migration_repairs_and_fails_rows_written_before_version_5() {
    let db = outbox_testkit::fresh_pg().await;
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
    let db = outbox_testkit::fresh_mysql().await;
    Outbox::new(db.pool.clone()).migrate().await.unwrap();
    let ins = "SET SESSION sql_mode = ''; INSERT INTO outbox_message";
    let cases = vec![
        (format!("{ins} (topic, payload) VALUES ('sec.a ', 'p')"), "outbox_message_well_formed"),
        (
            format!("{ins} (topic, payload) VALUES (CONCAT('sec.a', CHAR(10), 'b'), 'p')"),
            "outbox_message_well_formed",
        ),
        (format!("{ins} (topic, payload, msg_key) VALUES ('t', 'p', 'k ')"), "outbox_message_well_formed"),
        (
            format!("{ins} (topic, payload, headers) VALUES ('t', 'p', '{}')", many_headers(65)),
            "outbox_message_well_formed",
        ),
        (
            format!(
                "{ins} (topic, payload, headers) VALUES ('t', 'p', '{{\"{} x\": \"v\"}}')",
                "n".repeat(200)
            ),
            "outbox_message_well_formed",
        ),
        (
            format!("{ins} (topic, payload, next_attempt_at) VALUES ('t', 'p', '0000-00-00')"),
            "outbox_message_times_in_range",
        ),
        (
            format!("{ins} (topic, payload, last_error) VALUES ('t', 'p', REPEAT('e', 2001))"),
            "outbox_message_last_error_bounded",
        ),
    ];
    refused(&db.pool, &cases).await;
    sqlx::raw_sql(&format!(
        "INSERT INTO outbox_message (topic, payload, msg_key, headers) VALUES ('a b', 'p', 'k 1', '{}')",
        many_headers(64)
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refuses_what_new_message_refuses() {
    let db = outbox_testkit::fresh_sqlite().await;
    Outbox::new(db.pool.clone()).migrate().await.unwrap();
    let ins = "INSERT INTO outbox_message";
    let cases = vec![
        (
            format!("{ins} (topic, payload) VALUES ('sec.a' || char(10) || 'b', 'p')"),
            "outbox_message_well_formed",
        ),
        (format!("{ins} (topic, payload, msg_key) VALUES ('t', 'p', 'k ')"), "outbox_message_well_formed"),
        (
            format!("{ins} (topic, payload, headers) VALUES ('t', 'p', '{}')", many_headers(65)),
            "outbox_message_well_formed",
        ),
        (
            format!(
                "{ins} (topic, payload, headers) VALUES ('t', 'p', '{{\"{}\": \"v\"}}')",
                "n".repeat(200)
            ),
            "outbox_message_well_formed",
        ),
        (
            format!("{ins} (topic, payload, next_attempt_at) VALUES ('t', 'p', -1)"),
            "outbox_message_times_in_range",
        ),
        (
            format!("{ins} (topic, payload, last_error) VALUES ('t', 'p', '{}')", "e".repeat(2001)),
            "outbox_message_well_formed",
        ),
    ];
    refused(&db.pool, &cases).await;
    sqlx::raw_sql(&format!(
        "INSERT INTO outbox_message (topic, payload, msg_key, headers) VALUES ('a b', 'p', 'k 1', '{}')",
        many_headers(64)
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    db.drop_db().await;
}
