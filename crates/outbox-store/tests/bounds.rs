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
/// PostgreSQL, schema version 11: the one constraint that checks every rule of the message table.
const RULES: &str = "outbox_message_rules";

/// Version 1's rules on PostgreSQL (0001_outbox.sql), as its constraints were named.
const VERSION_1_RULES: [(&str, &str); 10] = [
    ("outbox_message_topic_not_blank", "topic <> '' AND topic = btrim(topic)"),
    ("outbox_message_key_not_blank", "msg_key IS NULL OR msg_key <> ''"),
    ("outbox_message_tag_not_blank", "tag IS NULL OR tag <> ''"),
    ("outbox_message_biz_pair", "(biz_type IS NULL) = (biz_key IS NULL)"),
    ("outbox_message_biz_not_blank", "biz_type IS NULL OR (biz_type <> '' AND biz_key <> '')"),
    (
        "outbox_message_status_known",
        "status IN ('pending', 'sending', 'sent', 'acked', 'failed', 'cancelled')",
    ),
    ("outbox_message_attempts_not_negative", "attempts >= 0"),
    ("outbox_message_max_attempts_positive", "max_attempts IS NULL OR max_attempts > 0"),
    ("outbox_message_headers_object", "jsonb_typeof(headers) = 'object'"),
    (
        "outbox_message_sending_has_lease",
        "status <> 'sending' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL)",
    ),
];

/// Version 5's rules on PostgreSQL (0005_bounds.sql), written with the SQL functions it shipped
/// (which later versions keep).
const VERSION_5_RULES: [(&str, &str); 3] = [
    (
        TIMES,
        "next_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00' \
         AND created_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00' \
         AND updated_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00' \
         AND (last_attempt_at IS NULL OR last_attempt_at BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00') \
         AND (lease_until IS NULL OR lease_until BETWEEN '1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00')",
    ),
    (
        WELL_FORMED,
        "status NOT IN ('pending', 'sending') \
         OR (outbox_text_ok(topic) AND outbox_text_ok(msg_key) AND outbox_text_ok(tag) \
             AND outbox_text_ok(biz_type) AND outbox_text_ok(biz_key) AND outbox_text_ok(created_by) \
             AND (headers = '{}'::jsonb OR outbox_headers_ok(headers)))",
    ),
    (LAST_ERROR, "last_error IS NULL OR char_length(last_error) <= 2000"),
];

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
    // Back to version 4, as a table that has lived before this release: version 1's rules as
    // constraints of their own (but one, dropped by someone: version 11 checks it all the same),
    // none of version 5's.
    sqlx::raw_sql(&format!(
        "ALTER TABLE outbox_message DROP CONSTRAINT outbox_message_rules, {}; \
         ALTER TABLE outbox_delivery DROP CONSTRAINT outbox_delivery_last_error_bounded; \
         DROP FUNCTION outbox_message_rules_ok; \
         DROP FUNCTION outbox_headers_ok(jsonb); DROP FUNCTION outbox_text_ok(text); \
         DROP TABLE outbox_destination_pause; DROP TABLE outbox_relay; \
         DELETE FROM outbox_schema_migrations WHERE version >= 5",
        VERSION_1_RULES
            .iter()
            .filter(|(name, _)| *name != "outbox_message_tag_not_blank")
            .map(|(name, rule)| format!("ADD CONSTRAINT {name} CHECK ({rule})"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
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
    // Version 11 replaced the rules without reading the rows (the table was not empty): they are
    // not validated, and still refuse every new row that breaks them, naming the rule.
    for (insert, rule) in [
        ("(topic, payload, msg_key) VALUES ('t', 'p', E'k\\u0007')", WELL_FORMED),
        ("(topic, payload, next_attempt_at) VALUES ('t', 'p', '-infinity')", TIMES),
        ("(topic, payload, tag) VALUES ('t', 'p', '')", "outbox_message_tag_not_blank"),
    ] {
        let sql = format!("INSERT INTO outbox_message {insert}");
        let err = sqlx::raw_sql(&sql).execute(&db.pool).await.expect_err(&sql).to_string();
        assert!(err.contains(rule), "{sql}: {err}");
    }
    let checks: Vec<(String, bool)> = sqlx::query_as(
        "SELECT conname::text, convalidated FROM pg_constraint \
         WHERE conrelid = 'outbox_message'::regclass AND contype = 'c' ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(checks, [(RULES.to_string(), false)]);
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

/// Schema version 11: the message table has one CHECK constraint, which calls one PL/pgSQL
/// function and no `LANGUAGE sql` one. PostgreSQL reads every check of a table back from its
/// stored node tree and prepares it for each INSERT and UPDATE statement: version 10's thirteen
/// constraints were 13,000 characters of node trees, a quarter of the server's CPU for a
/// single-row INSERT (docs/benchmarks.md, "One check instead of thirteen"); a SQL function's body
/// was parsed again each time as well (version 5, "The table's checks"). Fails on version 10.
/// On a new database the constraint is validated (the table was empty when version 11 added it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_one_cheap_check_calls_no_sql_function() {
    let db = fresh_pg().await;
    Outbox::new(db.pool.clone()).migrate().await.unwrap();
    let checks: Vec<(String, i32, bool)> = sqlx::query_as(
        "SELECT conname::text, length(conbin::text), convalidated FROM pg_constraint \
         WHERE conrelid = 'outbox_message'::regclass AND contype = 'c'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(checks.len(), 1, "one CHECK constraint: {checks:?}");
    let (name, tree, validated) = &checks[0];
    assert_eq!(name, RULES);
    assert!(*tree < 4_000, "{name}'s node tree is {tree} characters");
    assert!(validated, "not validated on a new database");
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
    assert_eq!(
        called,
        [(RULES.to_string(), "outbox_message_rules_ok".to_string(), "plpgsql".to_string())],
        "the rules are checked by one PL/pgSQL function"
    );
    db.drop_db().await;
}

/// How a database answered an INSERT: accepted, or refused with its SQLSTATE and the constraint
/// it named.
#[derive(Debug, PartialEq)]
enum Verdict {
    Accepted,
    Refused(String, Option<String>),
}

async fn verdict(pool: &sqlx::PgPool, sql: &str) -> Verdict {
    // Rolled back either way: each row is judged alone (the outbox's unique business key would
    // otherwise refuse a second row with the same pair).
    let mut tx = pool.begin().await.unwrap();
    let answer = sqlx::raw_sql(sql).execute(&mut *tx).await;
    tx.rollback().await.unwrap();
    match answer {
        Ok(_) => Verdict::Accepted,
        Err(sqlx::Error::Database(e)) => {
            let named = e.constraint().map(str::to_owned);
            if let Some(name) = &named {
                assert!(
                    e.message().contains(&format!("violates check constraint \"{name}\"")),
                    "{sql}: the message names another rule: {}",
                    e.message()
                );
            }
            Verdict::Refused(e.code().unwrap_or_default().into_owned(), named)
        }
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// Schema version 11: the one constraint refuses exactly the rows that the thirteen constraints
/// of versions 1 and 5 refused, in the name of the same rule. A reference table beside the
/// outbox's carries the thirteen as they were written (version 5's with the SQL functions it
/// shipped, which later versions keep); every row of a grid (each rule's edge values under each
/// status, and pairs of them) goes into both: both accept it, or both refuse it with SQLSTATE
/// 23514 naming the same constraint (the first broken rule in the constraints' names' order).
/// Under a schema and a prefix, the rule is named with the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_one_check_refuses_what_the_thirteen_refused() {
    let db = fresh_pg().await;
    Outbox::new(db.pool.clone()).migrate().await.unwrap();
    let rules: Vec<String> = VERSION_1_RULES
        .iter()
        .chain(&VERSION_5_RULES)
        .map(|(name, rule)| format!("CONSTRAINT {name} CHECK ({rule})"))
        .collect();
    sqlx::raw_sql(&format!(
        "CREATE TABLE reference_message (LIKE outbox_message INCLUDING DEFAULTS INCLUDING IDENTITY, {})",
        rules.join(", ")
    ))
    .execute(&db.pool)
    .await
    .unwrap();
    let headers = |n: usize| format!("'{}'", many_headers(n));
    let long_name = format!("'{{\"{}\": \"v\"}}'", "n".repeat(129));
    let long_value = format!("'{{\"h\": \"{}\"}}'", "v".repeat(4097));
    let fields: Vec<(&str, String)> = [
        ("attempts", "-1"),
        ("attempts", "3"),
        ("max_attempts", "0"),
        ("max_attempts", "-3"),
        ("max_attempts", "5"),
        ("biz_type, biz_key", "'order', NULL"),
        ("biz_type, biz_key", "NULL, 'k'"),
        ("biz_type, biz_key", "'', 'k'"),
        ("biz_type, biz_key", "'order', ''"),
        ("biz_type, biz_key", "'order ', 'k'"),
        ("biz_type, biz_key", "'order', E'k\\n'"),
        ("biz_type, biz_key", "'order', 'k'"),
        ("msg_key", "''"),
        ("msg_key", "' k'"),
        ("msg_key", "E'k\\u001b'"),
        ("msg_key", "'k 1'"),
        ("tag", "''"),
        ("tag", "'t '"),
        ("tag", "E'\\u0085t'"),
        ("tag", "'t'"),
        ("topic", "''"),
        ("topic", "' t'"),
        ("topic", "E't\\tx'"),
        ("topic", "'é.t'"),
        ("created_by", "E'\\tsvc'"),
        ("created_by", "'svc'"),
        ("headers", "'[1]'"),
        ("headers", "'\"s\"'"),
        ("headers", "'null'"),
        ("headers", "'{\"a\": \"b\", \"n\": 1}'"),
        ("headers", "'{\" a\": \"b\"}'"),
        ("headers", "'{\"\": \"b\"}'"),
        ("lease_owner, lease_until", "'r', now()"),
        ("lease_owner, lease_until", "'r', NULL"),
        ("lease_owner, lease_until", "NULL, now()"),
        ("lease_owner, lease_until", "'r', 'infinity'"),
        ("last_error", "repeat('e', 2000)"),
        ("last_error", "repeat('e', 2001)"),
        ("next_attempt_at", "'-infinity'"),
        ("next_attempt_at", "'1969-12-31 23:59:59+00'"),
        ("next_attempt_at", "'1970-01-01 00:00:00+00'"),
        ("created_at", "'infinity'"),
        ("updated_at", "'10000-01-01'"),
        ("last_attempt_at", "'-infinity'"),
        ("last_attempt_at", "now()"),
    ]
    .into_iter()
    .map(|(c, v)| (c, v.to_owned()))
    .chain([
        ("headers", headers(64)),
        ("headers", headers(65)),
        ("headers", long_name),
        ("headers", long_value),
    ])
    .collect();
    // Each case alone, and pairs of cases on different columns.
    let mut rows: Vec<Vec<&(&str, String)>> = fields.iter().map(|f| vec![f]).collect();
    for (i, a) in fields.iter().enumerate() {
        for (j, b) in fields.iter().enumerate().skip(i + 1) {
            if (i + j) % 4 == 0 && a.0 != b.0 {
                rows.push(vec![a, b]);
            }
        }
    }
    let mut refused = std::collections::BTreeSet::new();
    let mut accepted = 0;
    for status in ["pending", "sending", "sent", "acked", "failed", "cancelled", "done"] {
        for row in &rows {
            let mut columns = vec!["payload", "status"];
            let mut values = vec!["'p'".to_owned(), format!("'{status}'")];
            if !row.iter().any(|(c, _)| *c == "topic") {
                columns.push("topic");
                values.push("'t'".into());
            }
            for (c, v) in row {
                columns.push(c);
                values.push(v.clone());
            }
            let into = |table: &str| {
                format!("INSERT INTO {table} ({}) VALUES ({})", columns.join(", "), values.join(", "))
            };
            let expected = verdict(&db.pool, &into("reference_message")).await;
            let got = verdict(&db.pool, &into("outbox_message")).await;
            assert_eq!(got, expected, "{}", into("outbox_message"));
            match got {
                Verdict::Accepted => accepted += 1,
                Verdict::Refused(code, name) => {
                    assert_eq!(code, "23514", "{}", into("outbox_message"));
                    refused.insert(name.unwrap_or_default());
                }
            }
        }
    }
    let every: std::collections::BTreeSet<String> =
        VERSION_1_RULES.iter().chain(&VERSION_5_RULES).map(|(n, _)| n.to_string()).collect();
    assert_eq!(refused, every, "every rule refused some row");
    assert!(accepted > 100, "the grid holds good rows too: {accepted}");

    // With a schema and a prefix: the rule under its prefixed name, the table under its own.
    let named = Outbox::new(db.pool.clone())
        .with_tables(outbox_store::Tables::new(Some("sales"), "app_").unwrap())
        .unwrap();
    named.migrate().await.unwrap();
    let err = sqlx::query("INSERT INTO \"sales\".app_message (topic, payload) VALUES ('', 'p')")
        .execute(&db.pool)
        .await
        .unwrap_err();
    let sqlx::Error::Database(e) = &err else { panic!("{err}") };
    assert_eq!(e.constraint(), Some("app_message_topic_not_blank"), "{err}");
    assert!(e.message().contains("relation \"app_message\""), "{err}");
    sqlx::raw_sql("DROP SCHEMA sales CASCADE").execute(&db.pool).await.unwrap();
    db.drop_db().await;
}
