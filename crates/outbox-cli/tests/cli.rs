//! The `outbox` binary, run as a newcomer would: `demo` on a fresh directory, `migrate` twice,
//! and the errors a wrong URL or a too-new schema produce.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::{Command, Output};

use outbox_testkit::fs::temp_dir;

fn outbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox")).args(args).output().expect("run outbox")
}

#[test]
fn demo_runs_the_whole_flow_on_sqlite() {
    let dir = temp_dir("outbox-cli-demo");
    let out = outbox(&["demo", "--dir", dir.to_str().unwrap(), "--orders", "8", "--json"]);
    assert!(out.status.success(), "demo failed: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["committed"], 8);
    assert_eq!(report["delivered"], 8, "every committed order's message reached the receiver");
    assert_eq!(report["failed"], 1, "the unrouted message");
    let msgs = report["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 9);
    let sent = msgs.iter().filter(|m| m["status"] == "sent").count();
    assert_eq!(sent, 8);
    assert!(msgs.iter().all(|m| !m["payload"].as_str().unwrap().contains("rolled_back")));
    let retried = msgs.iter().find(|m| m["attempts"] == 1 && m["status"] == "sent").expect("one retried");
    assert!(retried["last_error"].as_str().unwrap().contains("503"));
    // A second run on the same database continues where the first stopped.
    let again = outbox(&["demo", "--dir", dir.to_str().unwrap(), "--orders", "2", "--json"]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn migrate_is_idempotent_and_reports_json() {
    let dir = temp_dir("outbox-cli-migrate");
    let url = format!("sqlite:{}", dir.join("app.db").display());
    let first = outbox(&["migrate", "--database-url", &url, "--json"]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let r: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(r["from"], 0);
    let every: Vec<i64> = (1..=outbox_store::SCHEMA_VERSION).collect();
    assert_eq!(r["applied"], serde_json::json!(every));
    let second = outbox(&["migrate", "--database-url", &url, "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(r["applied"], serde_json::json!([]));
    assert_eq!(r["to"], outbox_store::SCHEMA_VERSION);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_newer_schema_is_refused_with_a_clear_message() {
    let dir = temp_dir("outbox-cli-newer");
    let db = dir.join("app.db");
    let url = format!("sqlite:{}", db.display());
    assert!(outbox(&["migrate", "--database-url", &url]).status.success());
    let future = outbox_store::SCHEMA_VERSION + 1;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query("INSERT INTO outbox_schema_migrations (version, description) VALUES (?, 'future')")
            .bind(future)
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    });
    let out = outbox(&["migrate", "--database-url", &url]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("version {future}")) && err.contains("upgrade outbox"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_urls_fail_clearly_without_leaking_passwords() {
    let out = outbox(&["migrate", "--database-url", "oracle://app:hunter2@db/x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unsupported database URL scheme \"oracle\""), "{err}");
    assert!(!err.contains("hunter2"), "password leaked: {err}");

    let out = outbox(&["migrate", "--database-url", "postgres://app:hunter2@127.0.0.1:1/x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot connect to postgres://app:***@127.0.0.1:1/x"), "{err}");
    assert!(!err.contains("hunter2"), "password leaked: {err}");
}
