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
         DROP FUNCTION outbox_fields_ok(text, text, text, text, text, text, jsonb); \
         DROP FUNCTION outbox_times_ok(timestamptz, timestamptz, timestamptz, timestamptz, timestamptz); \
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
    // Version 10 replaced the rules without reading the rows (the table was not empty): they are
    // not validated, and still refuse every new row that breaks them.
    for (insert, rule) in [
        ("(topic, payload, msg_key) VALUES ('t', 'p', E'k\\u0007')", WELL_FORMED),
        ("(topic, payload, next_attempt_at) VALUES ('t', 'p', '-infinity')", TIMES),
    ] {
        let sql = format!("INSERT INTO outbox_message {insert}");
        let err = sqlx::raw_sql(&sql).execute(&db.pool).await.expect_err(&sql).to_string();
        assert!(err.contains(rule), "{sql}: {err}");
    }
    let valid: Vec<(String, bool)> = sqlx::query_as(
        "SELECT conname::text, convalidated FROM pg_constraint \
         WHERE conrelid = 'outbox_message'::regclass AND conname::text = ANY ($1) ORDER BY 1",
    )
    .bind([TIMES, WELL_FORMED])
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(valid, [(TIMES.to_string(), false), (WELL_FORMED.to_string(), false)]);
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

/// Schema version 10: `outbox_message_well_formed` checks `outbox_text_ok`'s rule for each text
/// column in a PL/pgSQL function (`outbox_fields_ok`) instead of calling it. For every column and a set of edge values (each control
/// character class boundary, spaces and tabs at either end, inner spaces, non-ASCII), an open
/// row is refused exactly when `outbox_text_ok` refuses the value; a `sent` row is never refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_written_out_text_rule_agrees_with_outbox_text_ok() {
    let db = fresh_pg().await;
    Outbox::new(db.pool.clone()).migrate().await.unwrap();
    let values = [
        "a",
        "a b",
        "é ü 漢",
        " a",
        "a ",
        "\ta",
        "a\t",
        "a\u{1}b",
        "a\u{1f}",
        "\u{20}",
        "a\u{7f}",
        "a\u{80}b",
        "a\u{9f}",
        "a\u{a0}b",
        "a\u{7e}",
        "a\nb",
        "a\rb",
    ];
    let columns = ["topic", "msg_key", "tag", "biz_type", "biz_key", "created_by"];
    let mut refused = 0;
    for column in columns {
        for value in values {
            let ok: bool = sqlx::query_scalar("SELECT outbox_text_ok($1)")
                .bind(value)
                .fetch_one(&db.pool)
                .await
                .unwrap();
            for status in ["pending", "sent"] {
                // biz_type and biz_key come as a pair.
                let (cols, vals) = match column {
                    "topic" => ("topic, payload, status".to_string(), "$1, 'p', $2".to_string()),
                    "biz_type" => {
                        ("topic, payload, status, biz_type, biz_key".into(), "'t', 'p', $2, $1, 'k'".into())
                    }
                    "biz_key" => {
                        ("topic, payload, status, biz_type, biz_key".into(), "'t', 'p', $2, 'b', $1".into())
                    }
                    c => (format!("topic, payload, status, {c}"), "'t', 'p', $2, $1".into()),
                };
                let sql = format!("INSERT INTO outbox_message ({cols}) VALUES ({vals})");
                let r = sqlx::query(&sql).bind(value).bind(status).execute(&db.pool).await;
                // A topic with a space at an end is refused whatever the status, by an older rule.
                let padded_topic = column == "topic" && value.trim_matches(' ') != value;
                let (expect_ok, rule) = match padded_topic {
                    true => (false, "outbox_message_topic_not_blank"),
                    false => (ok || status == "sent", WELL_FORMED),
                };
                match r {
                    Ok(_) => {
                        assert!(expect_ok, "{column} = {value:?} ({status}) accepted, outbox_text_ok says no")
                    }
                    Err(e) => {
                        assert!(!expect_ok, "{column} = {value:?} ({status}) refused: {e}");
                        assert!(e.to_string().contains(rule), "{column} = {value:?}: {e}");
                        refused += 1;
                    }
                }
                // Unique (biz_type, biz_key): clear the row before the next one.
                sqlx::query("DELETE FROM outbox_message").execute(&db.pool).await.unwrap();
            }
        }
    }
    assert!(refused >= 6 * 10, "the edge values include refused ones: {refused}");
    db.drop_db().await;
}

/// Schema version 10: no CHECK constraint of `outbox_message` calls a `LANGUAGE sql` function.
/// PostgreSQL prepares a table's checks once per statement and re-parses the body of every SQL
/// function it inlines (or tries to), so such a call cost every INSERT and UPDATE of the table
/// about 0.1 ms of CPU (docs/benchmarks.md, "The table's checks"). Fails on version 5's constraints.
/// On a new database both are validated (the table was empty when version 10 replaced them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_checks_call_no_sql_function() {
    let db = fresh_pg().await;
    Outbox::new(db.pool.clone()).migrate().await.unwrap();
    let called: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT c.conname::text, p.proname::text, l.lanname::text \
         FROM pg_constraint c \
         JOIN pg_depend d ON d.classid = 'pg_constraint'::regclass AND d.objid = c.oid \
                         AND d.refclassid = 'pg_proc'::regclass \
         JOIN pg_proc p ON p.oid = d.refobjid JOIN pg_language l ON l.oid = p.prolang \
         WHERE c.conrelid = 'outbox_message'::regclass AND c.contype = 'c' ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for (rule, function) in [(WELL_FORMED, "outbox_fields_ok"), (TIMES, "outbox_times_ok")] {
        assert!(
            called.iter().any(|(c, f, lang)| c == rule && f == function && lang == "plpgsql"),
            "{rule} is checked by {function}: {called:?}"
        );
    }
    let sql: Vec<_> = called.iter().filter(|(_, _, lang)| lang == "sql").collect();
    assert!(sql.is_empty(), "checks calling LANGUAGE sql functions: {sql:?}");
    let not_valid: Vec<String> = sqlx::query_scalar(
        "SELECT conname::text FROM pg_constraint WHERE conrelid = 'outbox_message'::regclass AND NOT convalidated",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(not_valid.is_empty(), "not validated on a new database: {not_valid:?}");
    db.drop_db().await;
}
