//! `outbox adopt` and `outbox relay` as processes, in the order a team runs them in production
//! (docs/adopt.md), over seed 004's `t_local_message` on real PostgreSQL and MariaDB and a real
//! Redis stream behind a proxy the test can cut: the rows pending before the bridge are taken over
//! once; a legacy scanner still running is reported by `adopt --check` and by the relay at start;
//! the legacy application's committed rows are delivered and show 2 (sent), its rolled-back row
//! never exists; a broker outage leaves the row at 0 with its retry count and reason until the
//! broker is back; a message the destination refuses for good shows 3 (failed) with the reason.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use outbox_testkit::either::Either;
use outbox_testkit::eventually_within;
use outbox_testkit::fs::temp_dir;
use outbox_testkit::process::{RelayConfig, RelayProcess};
use outbox_testkit::proxy::TcpProxy;

mod common;
use common::{ok, outbox, OUTBOX};

const MAPPING: &str = include_str!("../../../examples/adopt/seed004_t_local_message.toml");

fn insert(biz_key: &str, body: &str) -> String {
    format!(
        "INSERT INTO t_local_message (biz_type, biz_key, topic, message_body, status, created_by, updated_by) \
         VALUES ('order_create', '{biz_key}', 'order.created', '{body}', 0, 'order-svc', 'order-svc')"
    )
}

/// `(status, retry_count, fail_reason is set)` of the legacy row `biz_key`.
async fn legacy_row(legacy: Either<'_>, biz_key: &str) -> (i64, i64, bool) {
    let q = |what: &str| format!("SELECT {what} FROM t_local_message WHERE biz_key = '{biz_key}'");
    (
        legacy.count(&q(&legacy.bigint("status"))).await,
        legacy.count(&q(&legacy.bigint("retry_count"))).await,
        legacy.text(&q("fail_reason")).await.is_some(),
    )
}

/// Waits (generously) until legacy row `biz_key` satisfies `want`.
async fn wait_row(
    legacy: Either<'_>,
    relay: &mut RelayProcess,
    biz_key: &str,
    what: &str,
    want: impl Fn((i64, i64, bool)) -> bool,
) {
    let want = &want;
    eventually_within(Duration::from_secs(60), &format!("legacy row {biz_key}: {what}"), || {
        relay.assert_alive(what);
        async move { want(legacy_row(legacy, biz_key).await) }
    })
    .await;
}

async fn a_legacy_table_through_the_daemon(legacy: Either<'_>, url: &str, ddl: &str) {
    let dir = temp_dir("outbox-adopt-e2e");
    let stream =
        format!("outbox-adopt-{}-{}", std::process::id(), url.rsplit('/').next().unwrap_or_default());
    let proxy = TcpProxy::start("127.0.0.1:6379").await;
    let transport = format!("type = \"redis\"\nurl = \"redis://{}\"\nstream = \"{stream}\"", proxy.addr());
    let cfg = RelayConfig::new("idle_interval = \"200ms\"\nshutdown_timeout = \"5s\"", url)
        .destination(
            "stream",
            "max_payload_bytes = 1000\n\
             retry = { max_attempts = 1000, initial = \"100ms\", max_delay = \"500ms\", jitter = 0.0 }\n\
             breaker = { failure_threshold = 1000 }",
            &transport,
        )
        .route("#", &["stream"])
        .section(MAPPING)
        .write(&dir.join("outbox.toml"));
    let cfg = cfg.to_str().unwrap();

    // 1. The outbox tables, next to the legacy table (which holds a backlog).
    ok(&["migrate", "--database-url", url]);
    legacy.exec(ddl).await;
    legacy.exec(&insert("A-1", r#"{"order":"A-1"}"#)).await;

    // 2. Review, install: the pending row is taken over.
    let script = ok(&["adopt", "--config", cfg, "--print"]);
    assert!(script.contains("CREATE TRIGGER") && script.contains("t_local_message"), "{script}");
    assert_eq!(legacy.count("SELECT COUNT(*) FROM outbox_message").await, 0, "--print changes nothing");
    let installed = ok(&["adopt", "--config", cfg]);
    assert!(installed.contains("took over 1 pending legacy rows"), "{installed}");
    assert!(ok(&["adopt", "--config", cfg, "--check"]).contains("installed as configured"));

    // 3. The legacy scanner was not switched off: it writes a row's retry count. Reported.
    legacy.exec("UPDATE t_local_message SET retry_count = retry_count + 1 WHERE biz_key = 'A-1'").await;
    let checked = outbox(&["adopt", "--config", cfg, "--check"]);
    let text = String::from_utf8_lossy(&checked.stdout);
    assert!(!checked.status.success() && text.contains("legacy scanner or sender still runs"), "{text}");

    // 4. The relay: it says so too, and delivers the taken-over row.
    let mut relay = RelayProcess::start(OUTBOX, std::path::Path::new(cfg), &dir.join("relay.log"));
    relay.wait_for_log("a legacy scanner or sender still runs", Duration::from_secs(60));
    wait_row(legacy, &mut relay, "A-1", "the taken-over row is sent", |r| r.0 == 2).await;

    // 5. The legacy application's own transactions.
    legacy.tx(&[&insert("B-1", r#"{"order":"B-1"}"#), &insert("B-2", r#"{"order":"B-2"}"#)], true).await;
    legacy.tx(&[&insert("B-3", r#"{"order":"B-3"}"#)], false).await;
    for k in ["B-1", "B-2"] {
        wait_row(legacy, &mut relay, k, "a committed row is sent", |r| r.0 == 2).await;
    }
    assert_eq!(legacy.count("SELECT COUNT(*) FROM t_local_message WHERE biz_key = 'B-3'").await, 0);

    // 6. The broker goes away: the row stays 0 (pending) and shows why. (An unreachable broker
    // does not use up the message's attempts: retry_count counts the broker's refusals.)
    proxy.cut();
    legacy.exec(&insert("O-1", r#"{"order":"O-1"}"#)).await;
    wait_row(legacy, &mut relay, "O-1", "retried while the broker is down", |r| r.0 == 0 && r.2).await;
    proxy.restore();
    wait_row(legacy, &mut relay, "O-1", "sent once the broker is back", |r| r.0 == 2).await;

    // 7. A payload the destination refuses for good: failed, with the reason.
    legacy.exec(&insert("F-1", &"x".repeat(2000))).await;
    wait_row(legacy, &mut relay, "F-1", "failed for good", |r| r.0 == 3 && r.2).await;

    // Each delivered row once on the stream, with its payload.
    let client = redis::Client::open(common::REDIS).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let len: u64 = redis::cmd("XLEN").arg(&stream).query_async(&mut conn).await.unwrap();
    assert_eq!(len, 4, "A-1, B-1, B-2 and O-1, each once");
    let status = relay.terminate(Duration::from_secs(15));
    assert!(status.success(), "{}", relay.log_text());

    // 8. Removal: the legacy application's inserts are plain inserts again.
    ok(&["adopt", "--config", cfg, "--remove"]);
    legacy.exec(&insert("R-1", "{}")).await;
    assert_eq!(legacy.count("SELECT COUNT(*) FROM outbox_message WHERE biz_key = 'R-1'").await, 0);
    let _: () = redis::cmd("DEL").arg(&stream).query_async(&mut conn).await.unwrap();
    std::fs::remove_dir_all(dir).ok();
}

/// One test per server: a fresh database, the seed's DDL for it, the whole run.
macro_rules! through_the_daemon {
    ($($test:ident: $fresh:ident, $either:ident, $ddl:literal;)+) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let db = outbox_testkit::$fresh().await;
            let ddl = include_str!(concat!("../../../examples/adopt/", $ddl));
            a_legacy_table_through_the_daemon(Either::$either(&db.pool), &db.url, ddl).await;
            db.drop_db().await;
        }
    )+};
}

through_the_daemon! {
    postgres_legacy_table_through_the_daemon: fresh_pg, Pg, "seed004_t_local_message.postgres.sql";
    mysql_legacy_table_through_the_daemon: fresh_mysql, My, "seed004_t_local_message.mysql.sql";
}
