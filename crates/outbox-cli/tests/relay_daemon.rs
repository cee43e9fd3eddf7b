//! `outbox relay` as a process: a foreign application inserts rows with plain SQL, the daemon
//! publishes them to a real Redis stream, and SIGTERM stops it gracefully. Start-up failures
//! (unreachable store or broker) exit non-zero naming what failed.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use outbox_testkit::fs::temp_dir;
use outbox_testkit::process::{RelayConfig, RelayProcess};

const OUTBOX: &str = env!("CARGO_BIN_EXE_outbox");

fn config(dir: &Path, store_url: &str, redis_url: &str, stream: &str) -> PathBuf {
    let transport = format!("type = \"redis\"\nurl = \"{redis_url}\"\nstream = \"{stream}\"");
    RelayConfig::new("idle_interval = \"200ms\"\nshutdown_timeout = \"5s\"", store_url)
        .migrate()
        .destination("stream", "", &transport)
        .route("#", &["stream"])
        .write(&dir.join("outbox.toml"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_publishes_foreign_rows_and_stops_gracefully_on_sigterm() {
    let dir = temp_dir("outbox-daemon-e2e");
    let db = dir.join("shop.db");
    let store_url = format!("sqlite:{}", db.display());
    let stream = format!("outbox-daemon-test-{}", std::process::id());
    let cfg = config(&dir, &store_url, "redis://127.0.0.1:6379", &stream);
    let log = dir.join("relay.log");
    let mut relay = RelayProcess::start(OUTBOX, &cfg, &log);

    // Wait for the daemon to create the schema (migrate = true).
    let deadline = Instant::now() + Duration::from_secs(30);
    let pool = loop {
        if db.exists() {
            if let Ok(pool) = sqlx::SqlitePool::connect(&store_url).await {
                let v: Result<i64, _> =
                    sqlx::query_scalar("SELECT MAX(version) FROM outbox_schema_migrations")
                        .fetch_one(&pool)
                        .await;
                if v.is_ok() {
                    break pool;
                }
            }
        }
        assert!(Instant::now() < deadline, "the daemon did not migrate: {}", relay.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for i in 0..50 {
        let mut tx = pool.begin().await.unwrap();
        sqlx::query("INSERT INTO outbox_message (topic, payload, msg_key) VALUES ('order.paid', ?1, ?2)")
            .bind(format!(r#"{{"n":{i}}}"#))
            .bind(format!("k{}", i % 5))
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }

    let client = redis::Client::open("redis://127.0.0.1:6379").unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let len: u64 = redis::cmd("XLEN").arg(&stream).query_async(&mut conn).await.unwrap();
        if len >= 50 {
            assert_eq!(len, 50, "each message once");
            break;
        }
        assert!(Instant::now() < deadline, "only {len} of 50 arrived: {}", relay.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sent: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox_message WHERE status = 'sent'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(sent, 50);

    let status = relay.terminate(Duration::from_secs(15));
    let text = relay.log_text();
    assert!(status.success(), "exit {status}: {text}");
    assert!(text.contains("SIGTERM") && text.contains("leases released"), "{text}");

    let _: () = redis::cmd("DEL").arg(&stream).query_async(&mut conn).await.unwrap();
    pool.close().await;
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn an_unreachable_store_or_broker_at_start_exits_non_zero_naming_it() {
    let dir = temp_dir("outbox-daemon-unreachable");
    let cfg = config(&dir, "postgres://relay:s3cret@127.0.0.1:1/shop", "redis://127.0.0.1:6379", "unused");
    let out = Command::new(OUTBOX).args(["relay", "--config", cfg.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("store \"shop\"") && err.contains("unreachable at start"), "{err}");
    assert!(!err.contains("s3cret"), "password leaked: {err}");

    let store = format!("sqlite:{}", dir.join("x.db").display());
    let cfg = config(&dir, &store, "redis://127.0.0.1:1", "unused");
    let out = Command::new(OUTBOX).args(["relay", "--config", cfg.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("destination \"stream\" (redis) is not usable at start"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn check_accepts_the_shipped_example_and_rejects_mistakes_with_their_line() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/outbox.toml");
    let out = Command::new(OUTBOX).args(["check", "--config", example, "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let resolved: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(resolved["destinations"].as_array().unwrap().len(), 7, "every transport is in the example");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("replace-me"), "secrets are not printed");

    let dir = temp_dir("outbox-daemon-check");
    let bad = std::fs::read_to_string(example)
        .unwrap()
        .replace("batch_size = 500", "batch_size = 500\nbatchsize = 5");
    let path = dir.join("bad.toml");
    std::fs::write(&path, bad).unwrap();
    let out = Command::new(OUTBOX).args(["check", "--config", path.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown field `batchsize`") && err.contains(":19:1: relay.batchsize"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}
