//! Schema and table names from the command line and the config file, against a real
//! PostgreSQL: `outbox migrate --print` renders the shipped SQL for a schema and prefix (and
//! the printed script, applied by hand, is a complete outbox); `outbox migrate` and
//! `outbox status` with `--table-prefix` keep two outboxes apart in one database; the daemon
//! relays two `[[stores]]` of one database with their own `schema` / `table_prefix`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use outbox_testkit::fs::temp_dir;
use outbox_testkit::process::{RelayConfig, RelayProcess};
use serde_json::Value;

mod common;
use common::{insert_numbered, ok, outbox, OUTBOX};

fn status(url: &str, names: &[&str]) -> Value {
    let mut args = vec!["status", "--database-url", url, "--json"];
    args.extend_from_slice(names);
    serde_json::from_str(&ok(&args)).unwrap()
}

#[test]
fn migrate_print_renders_every_migration_for_the_names() {
    let sql =
        ok(&["migrate", "--print", "--dialect", "postgres", "--schema", "billing", "--table-prefix", "app_"]);
    let head = format!("-- outbox schema, versions 1 to {}", outbox_store::SCHEMA_VERSION);
    assert!(sql.starts_with(&head), "{sql}");
    assert!(sql.contains("CREATE SCHEMA IF NOT EXISTS \"billing\";"), "{sql}");
    assert!(sql.contains("CREATE TABLE \"billing\".app_message ("), "{sql}");
    assert!(sql.contains("CREATE INDEX app_message_due_idx ON \"billing\".app_message"), "{sql}");
    assert!(sql.contains("pg_notify('app_message', '')"), "{sql}");
    assert!(sql.contains("pg_notify('app_message', rows_added)"), "{sql}");
    assert!(sql.contains("DROP TRIGGER app_message_notify ON \"billing\".app_message;"), "{sql}");
    assert!(sql.contains("REFERENCING NEW TABLE AS added_rows"), "{sql}");
    assert!(sql.contains("EXECUTE FUNCTION \"billing\".app_notify_relay()"), "{sql}");
    assert!(!sql.contains("outbox_message") && !sql.contains("outbox_delivery"), "{sql}");
    let my =
        ok(&["migrate", "--print", "--dialect", "mysql", "--schema", "billing", "--table-prefix", "app_"]);
    assert!(my.contains(
        "CREATE TRIGGER `billing`.app_message_open_key_insert BEFORE INSERT ON `billing`.app_message"
    ));
    assert!(my.contains("table_schema = 'billing' AND table_name = 'app_message'"), "{my}");
    // Version 9 finds the key index by its rendered name, and rebuilds that one.
    assert!(my.contains("AND index_name = 'app_message_open_key_idx' AND column_name = 'status'"), "{my}");
    assert!(my.contains("'ALTER TABLE `billing`.app_message DROP INDEX app_message_open_key_idx, ADD INDEX app_message_open_key_idx (msg_key, id)"), "{my}");
    // The default names print the shipped files as they are.
    let plain = ok(&["migrate", "--print", "--dialect", "sqlite"]);
    assert!(plain.contains(include_str!("../../outbox-store/migrations/sqlite/0001_outbox.sql")));
    // Refused before anything runs: a bad name, a schema on SQLite.
    for (args, needle) in [
        (vec!["--dialect", "postgres", "--table-prefix", "x; drop"], "must match"),
        (vec!["--dialect", "postgres", "--schema", "Billing"], "must match"),
        (vec!["--dialect", "sqlite", "--schema", "s"], "SQLite has no schemas"),
    ] {
        let mut all = vec!["migrate", "--print"];
        all.extend(args);
        let out = outbox(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(needle), "{all:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_prefixes_migrate_and_report_apart_and_the_printed_script_is_an_outbox() {
    let db = outbox_testkit::fresh_pg().await;
    let url = db.url.clone();
    // From the command line.
    for prefix in ["a_", "b_"] {
        let out = ok(&["migrate", "--database-url", &url, "--table-prefix", prefix]);
        let migrated = format!("migrated from version 0 to {}", outbox_store::SCHEMA_VERSION);
        assert!(out.contains(&migrated), "{out}");
    }
    // From the printed script, applied by hand (psql -1 -f, in effect).
    let script =
        ok(&["migrate", "--print", "--dialect", "postgres", "--schema", "ops", "--table-prefix", "c_"]);
    sqlx::raw_sql(&script).execute(&db.pool).await.unwrap();
    sqlx::query("INSERT INTO a_message (topic, payload) VALUES ('a', '{}'), ('a', '{}')")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO b_message (topic, payload) VALUES ('b', '{}')").execute(&db.pool).await.unwrap();
    sqlx::query("INSERT INTO ops.c_message (topic, payload) VALUES ('c', '{}')")
        .execute(&db.pool)
        .await
        .unwrap();
    // The printed script's one check names the broken rule with the script's prefix.
    let refused = sqlx::query("INSERT INTO ops.c_message (topic, payload) VALUES ('', '{}')")
        .execute(&db.pool)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("\"c_message_topic_not_blank\""), "{refused}");
    assert_eq!(status(&url, &["--table-prefix", "a_"])["total"], 2);
    assert_eq!(status(&url, &["--table-prefix", "b_"])["total"], 1);
    assert_eq!(status(&url, &["--schema", "ops", "--table-prefix", "c_"])["total"], 1);
    // The printed script counts as migrated: a later `outbox migrate` has nothing to do.
    let out = ok(&["migrate", "--database-url", &url, "--schema", "ops", "--table-prefix", "c_"]);
    assert!(out.contains(&format!("already at version {}", outbox_store::SCHEMA_VERSION)), "{out}");
    // The default names were never created.
    let out = outbox(&["status", "--database-url", &url]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("not migrated"));
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_relays_two_stores_of_one_database_with_their_own_names() {
    let db = outbox_testkit::fresh_pg().await;
    let dir = temp_dir("outbox-names-daemon");
    let stream = format!("outbox-names-test-{}", std::process::id());
    let base = RelayConfig::to_redis_stream(&db.url, "redis://127.0.0.1:6379", &stream)
        .section("[[stores]]\nname = \"shop_b\"\nurl = \"URL\"\nmigrate = true\ntable_prefix = \"shop_b_\"")
        .text()
        .replacen("migrate = true\n", "migrate = true\nschema = \"sales\"\ntable_prefix = \"shop_a_\"\n", 1)
        .replace("\"URL\"", &format!("\"{}\"", db.url));
    let cfg = dir.join("outbox.toml");
    std::fs::write(&cfg, base).unwrap();
    let log = dir.join("relay.log");
    let mut relay = RelayProcess::start(OUTBOX, &cfg, &log);

    let pool = db.pool.clone();
    outbox_testkit::eventually("both stores migrated", async || {
        let a: Option<String> = sqlx::query_scalar("SELECT to_regclass('sales.shop_a_relay')::text")
            .fetch_one(&pool)
            .await
            .unwrap();
        let b: Option<String> =
            sqlx::query_scalar("SELECT to_regclass('shop_b_relay')::text").fetch_one(&pool).await.unwrap();
        a.is_some() && b.is_some()
    })
    .await;
    relay.assert_alive("migrating both stores");
    insert_numbered(&pool, "INSERT INTO sales.shop_a_message (topic, payload) VALUES ('a', $1)", 3).await;
    insert_numbered(&pool, "INSERT INTO shop_b_message (topic, payload) VALUES ('b', $1)", 2).await;
    let sent = async |table: &str| -> i64 {
        sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table} WHERE status = 'sent'"))
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    outbox_testkit::eventually("every message of both stores sent", async || {
        sent("sales.shop_a_message").await == 3 && sent("shop_b_message").await == 2
    })
    .await;
    let client = redis::Client::open("redis://127.0.0.1:6379").unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let len: u64 = redis::cmd("XLEN").arg(&stream).query_async(&mut conn).await.unwrap();
    assert_eq!(len, 5, "each message once");
    let canonical: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('outbox_message')::text").fetch_one(&pool).await.unwrap();
    assert_eq!(canonical, None, "the default names are not used");

    let status = relay.terminate(Duration::from_secs(15));
    assert!(status.success(), "exit {status}: {}", relay.log_text());
    let _: () = redis::cmd("DEL").arg(&stream).query_async(&mut conn).await.unwrap();
    std::fs::remove_dir_all(dir).ok();
    db.drop_db().await;
}
