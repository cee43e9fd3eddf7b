//! The operations subcommands of the `outbox` binary (`status`, `list`, `show`, `retry`,
//! `cancel`, `purge`), run as an operator would against a SQLite file that a foreign application
//! filled with plain SQL, and the errors a wrong id, a wrong flag or an unmigrated database give.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

use outbox_testkit::fs::temp_dir;
use serde_json::Value;

mod common;
use common::{ok, outbox};

const NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

/// Runs `outbox ... --json` and parses stdout.
fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let stdout = ok(&all);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("outbox {args:?}: not JSON ({e}): {stdout}"))
}

/// Runs `outbox` and expects failure; returns (exit code, stderr).
fn fails(args: &[&str]) -> (i32, String) {
    let out = outbox(args);
    assert!(!out.status.success(), "outbox {args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stderr).unwrap())
}

fn sql(db: &Path, statements: &[String]) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let opts =
            sqlx::sqlite::SqliteConnectOptions::new().filename(db).create_if_missing(true).foreign_keys(true);
        let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
        for s in statements {
            sqlx::query(s).execute(&pool).await.unwrap_or_else(|e| panic!("{s}: {e}"));
        }
        pool.close().await;
    });
}

/// A migrated SQLite database holding, by id:
/// 1 pending order.paid; 2, 3 failed order.paid; 4 sending order.paid; 5 sent two days ago;
/// 6 sent just now (both user.created); 7 pending user.created. Message 2 has a delivery row.
fn fixture(name: &str) -> (PathBuf, String) {
    let dir = temp_dir(&format!("outbox-ops-{name}"));
    let db = dir.join("app.db");
    let url = format!("sqlite:{}", db.display());
    ok(&["migrate", "--database-url", &url]);
    let mut statements = Vec::new();
    for i in 1..=7 {
        let topic = if i <= 4 { "order.paid" } else { "user.created" };
        statements.push(format!(
            "INSERT INTO outbox_message (topic, payload, msg_key, biz_type, biz_key) \
             VALUES ('{topic}', '{{\"n\":{i}}}', 'k{i}', 'order', '{i}')"
        ));
    }
    statements.push(
        "UPDATE outbox_message SET status = 'failed', attempts = 5, last_error = 'broker said no' \
         WHERE id IN (2, 3)"
            .to_owned(),
    );
    statements.push(format!(
        "UPDATE outbox_message SET status = 'sending', lease_owner = 'relay-1', lease_until = {NOW_MS} + 60000, \
         next_attempt_at = {NOW_MS} + 60000 WHERE id = 4"
    ));
    statements.push(format!(
        "UPDATE outbox_message SET status = 'sent', updated_at = {NOW_MS} - 172800000 WHERE id = 5"
    ));
    statements.push("UPDATE outbox_message SET status = 'sent' WHERE id = 6".to_owned());
    statements.push(
        "INSERT INTO outbox_delivery (message_id, destination, status, attempts, last_error) \
         VALUES (2, 'webhook', 'failed', 5, 'HTTP 500')"
            .to_owned(),
    );
    sql(&db, &statements);
    (dir, url)
}

fn ids(page: &Value) -> Vec<i64> {
    page["messages"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect()
}

#[test]
fn status_list_show_retry_cancel_and_purge() {
    let (dir, url) = fixture("flow");
    let db = ["--database-url", url.as_str()];
    let with = |args: &[&str]| -> Vec<String> { args.iter().chain(&db).map(|s| (*s).to_owned()).collect() };
    let run_json = |args: &[&str]| json(&with(args).iter().map(String::as_str).collect::<Vec<_>>());
    let run = |args: &[&str]| ok(&with(args).iter().map(String::as_str).collect::<Vec<_>>());
    let run_fails = |args: &[&str]| fails(&with(args).iter().map(String::as_str).collect::<Vec<_>>());

    // status
    let s = run_json(&["status"]);
    assert_eq!(s["total"], 7);
    assert_eq!(s["failed"], 2);
    let count = |s: &Value, status: &str| {
        s["by_status"].as_array().unwrap().iter().find(|c| c["status"] == status).unwrap()["count"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(["pending", "sending", "sent", "failed"].map(|st| count(&s, st)), [2, 1, 2, 2], "{s}");
    assert!(s["oldest_pending_age_secs"].as_f64().is_some(), "{s}");
    let topics = s["by_topic"].as_array().unwrap();
    assert!(
        topics.iter().any(|t| t["topic"] == "order.paid" && t["status"] == "failed" && t["count"] == 2),
        "{s}"
    );
    assert_eq!(s["by_destination"][0]["destination"], "webhook");
    let text = run(&["status"]);
    assert!(text.contains("7 messages, 2 failed"), "{text}");
    assert!(text.contains("outbox list --status failed"), "{text}");

    // list
    let failed = run_json(&["list", "--status", "failed"]);
    assert_eq!(ids(&failed), vec![2, 3]);
    assert_eq!(failed["next_after_id"], Value::Null);
    assert_eq!(failed["messages"][0]["last_error"], "broker said no");
    let page1 = run_json(&["list", "--limit", "3"]);
    assert_eq!(ids(&page1), vec![1, 2, 3]);
    assert_eq!(page1["next_after_id"], 3);
    let page2 = run_json(&["list", "--limit", "3", "--after-id", "3"]);
    assert_eq!(ids(&page2), vec![4, 5, 6]);
    assert_eq!(ids(&run_json(&["list", "--topic", "user.created", "--status", "pending"])), vec![7]);
    assert_eq!(ids(&run_json(&["list", "--biz-type", "order", "--biz-key", "5"])), vec![5]);
    assert_eq!(ids(&run_json(&["list", "--key", "k6"])), vec![6]);
    assert_eq!(ids(&run_json(&["list", "--since", "1h"])).len(), 7);
    assert!(ids(&run_json(&["list", "--until", "1h"])).is_empty());
    assert!(ids(&run_json(&["list", "--since", "2000-01-01T00:00:00Z", "--until", "2000-01-02"])).is_empty());
    let table = run(&["list", "--status", "failed"]);
    assert!(table.starts_with("ID  STATUS"), "{table}");
    assert!(table.contains("broker said no") && table.contains("2 messages"), "{table}");

    // show
    let detail = run_json(&["show", "2"]);
    assert_eq!(detail["message"]["status"], "failed");
    assert_eq!(detail["message"]["payload"], r#"{"n":2}"#);
    assert_eq!(detail["deliveries"][0]["destination"], "webhook");
    assert_eq!(detail["deliveries"][0]["status"], "failed");
    let text = run(&["show", "2"]);
    assert!(text.contains("last error    broker said no") && text.contains("webhook"), "{text}");

    // retry one
    let out = run(&["retry", "2", "--actor", "ops:test"]);
    assert!(out.contains("message 2: failed -> pending"), "{out}");
    let detail = run_json(&["show", "2"]);
    assert_eq!(detail["message"]["status"], "pending");
    assert_eq!(detail["message"]["attempts"], 0);
    assert_eq!(detail["message"]["updated_by"], "ops:test");
    assert_eq!(detail["deliveries"][0]["status"], "pending");
    assert_eq!(detail["deliveries"][0]["attempts"], 0);
    let (_, err) = run_fails(&["retry", "6"]);
    assert!(err.contains("cannot retry message 6: its status is sent"), "{err}");

    // cancel
    let (_, err) = run_fails(&["cancel", "4"]);
    assert!(err.contains("cannot cancel message 4: its status is sending"), "{err}");
    assert!(err.contains("a relay is publishing it"), "{err}");
    let out = run(&["cancel", "1"]);
    assert!(out.contains("message 1: cancelled"), "{out}");
    let m = run_json(&["show", "1"]);
    assert_eq!(m["message"]["status"], "cancelled");
    assert!(m["message"]["updated_by"].as_str().unwrap().starts_with("outbox-cli:"), "{m}");

    // retry every failed one (3 is left)
    let r = run_json(&["retry", "--failed", "--topic", "order.paid", "--batch", "1"]);
    assert_eq!(r, serde_json::json!({ "retried": 1 }));
    assert_eq!(run_json(&["status"])["failed"], 0);
    assert!(run(&["retry", "--failed"]).contains("no failed messages match"));

    // purge: finished rows are 1 (cancelled), 5 (sent two days ago), 6 (sent now)
    let p = run_json(&["purge", "--sent-before", "1d"]);
    assert_eq!(p["purged"], 1);
    let p = run_json(&["purge", "--sent-before", "0s", "--batch", "1"]);
    assert_eq!(p["purged"], 2);
    let out = run(&["purge", "--sent-before", "0s"]);
    assert!(out.starts_with("0 finished message(s)"), "{out}");
    let s = run_json(&["status"]);
    assert_eq!(s["total"], 4);
    assert_eq!(ids(&run_json(&["list"])), vec![2, 3, 4, 7]);
    let (_, err) = run_fails(&["show", "5"]);
    assert!(err.contains("message 5 not found"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn errors_are_clear() {
    let (dir, url) = fixture("errors");
    for cmd in [&["show", "9999"][..], &["retry", "9999"], &["cancel", "9999"]] {
        let mut args = cmd.to_vec();
        args.extend(["--database-url", &url]);
        let (code, err) = fails(&args);
        assert_eq!(code, 1, "{args:?}");
        assert!(err.contains("message 9999 not found"), "{args:?}: {err}");
    }

    // Bad flag values are refused before anything runs, naming the flag.
    let (code, err) = fails(&["list", "--database-url", &url, "--since", "yesterday"]);
    assert_eq!(code, 2);
    assert!(err.contains("--since") && err.contains("RFC 3339"), "{err}");
    let (_, err) = fails(&["purge", "--database-url", &url, "--sent-before", "10"]);
    assert!(err.contains("--sent-before") && err.contains("no unit"), "{err}");
    let (_, err) = fails(&["list", "--database-url", &url, "--limit", "5000"]);
    assert!(err.contains("--limit"), "{err}");
    let (_, err) = fails(&["list", "--database-url", &url, "--status", "done"]);
    assert!(err.contains("--status") && err.contains("failed"), "{err}");
    let (_, err) = fails(&["retry", "--database-url", &url]);
    assert!(err.contains("--failed") || err.contains("<ID>"), "{err}");
    let (_, err) = fails(&["retry", "--database-url", &url, "--topic", "t"]);
    assert!(err.contains("--failed"), "{err}");
    let (_, err) = fails(&["purge", "--database-url", &url]);
    assert!(err.contains("--sent-before"), "{err}");

    // An unmigrated database, and a database file that does not exist.
    let empty = dir.join("empty.db");
    sql(&empty, &["CREATE TABLE shop_order (id INTEGER PRIMARY KEY)".to_owned()]);
    let empty_url = format!("sqlite:{}", empty.display());
    for cmd in ["status", "list"] {
        let (_, err) = fails(&[cmd, "--database-url", &empty_url]);
        assert!(err.contains("not migrated") && err.contains("outbox migrate"), "{cmd}: {err}");
    }
    let missing = dir.join("missing.db");
    let (_, err) = fails(&["status", "--database-url", &format!("sqlite:{}", missing.display())]);
    assert!(err.contains("does not exist") && err.contains("outbox migrate"), "{err}");
    assert!(!missing.exists(), "a typo must not create a database file");

    // Passwords never reach the output.
    let (_, err) = fails(&["status", "--database-url", "oracle://app:hunter2@db/x"]);
    assert!(err.contains("oracle://app:***@db/x") && !err.contains("hunter2"), "{err}");

    // --help shows examples.
    let help = ok(&["purge", "--help"]);
    assert!(help.contains("outbox purge --sent-before 7d"), "{help}");
    std::fs::remove_dir_all(dir).ok();
}

/// The raw bytes that must never reach a terminal: C0 controls but the line feeds the output is
/// made of, DEL, and C1 controls (UTF-8 `C2 80` to `C2 9F`).
fn raw_control_bytes(out: &[u8]) -> Vec<(usize, u8)> {
    let mut found = Vec::new();
    for (i, b) in out.iter().enumerate() {
        let c1 = *b == 0xC2 && out.get(i + 1).is_some_and(|n| (0x80..=0x9F).contains(n));
        if (*b < 0x20 && *b != b'\n') || *b == 0x7F || c1 {
            found.push((i, *b));
        }
    }
    found
}

/// Finding 9: a row written by a foreign (or hostile) application holds escape sequences, CR,
/// LF, BEL, DEL and C1 controls in every text column; `status`, `list` and `show` print them
/// escaped, in text and in JSON, and never forge a line of their own output. (The row is
/// `failed`: since schema version 5 the table refuses control characters in open rows, not in
/// the others, nor in rows written before.)
#[test]
fn rows_with_control_characters_never_reach_the_terminal_raw() {
    let (dir, url) = fixture("hostile");
    let db = dir.join("app.db");
    // ESC [ 2 J clears the screen, ESC ] 0 ; sets the window title, CR rewinds the line, LF
    // starts a forged one, BEL rings, DEL and U+009B (8-bit CSI) act on some terminals.
    let evil = "char(27) || '[2J' || char(27) || ']0;pwned' || char(7) || char(13) || char(10) || \
                'status        sent' || char(127) || char(155) || '[31m'";
    sql(
        &db,
        &[
            format!(
                "INSERT INTO outbox_message (id, topic, payload, headers, msg_key, tag, biz_type, biz_key, status, \
                 attempts, last_error, lease_owner, lease_until, created_by) VALUES (100, 'evil.' || {evil} || '.t', \
                 '{{\"a\":1}}' || {evil} || char(10) || 'line two', \
                 '{{\"x-evil\\u001b[2J\":\"v\\u001b]0;t\\u0007\\r\\nforged: header\"}}', \
                 'k' || {evil}, 't' || {evil}, 'b' || {evil}, 'k' || {evil}, 'failed', 3, 'broker: ' || {evil}, \
                 'relay' || {evil}, {NOW_MS} + 60000, 'app' || {evil})"
            ),
            format!(
                "INSERT INTO outbox_delivery (message_id, destination, status, attempts, last_error) \
                 VALUES (100, 'dest' || {evil}, 'failed', 2, 'HTTP 500 ' || {evil})"
            ),
        ],
    );
    let with_db = |args: &[&str]| -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).chain(["--database-url".to_owned(), url.clone()]).collect()
    };
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["list"],
        &["list", "--json"],
        &["list", "--status", "failed"],
        &["show", "100"],
        &["show", "100", "--json"],
    ] {
        let args = with_db(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = outbox(&args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let raw = raw_control_bytes(&out.stdout);
        assert!(
            raw.is_empty(),
            "{args:?} printed raw control bytes {raw:?}:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(!text.contains('\u{9b}') && !text.contains('\u{7f}'), "{args:?}: {text}");
        if args.contains(&"--json") {
            // JSON keeps the exact value, escaped.
            let v: Value = serde_json::from_str(&text).unwrap();
            let s = v.to_string();
            assert!(s.contains("pwned"), "{s}");
        } else {
            // The escape sequences are visible as text, and no line of the output is forged.
            assert!(text.contains("\\u{1b}[2J"), "{args:?}: {text}");
            assert!(
                !text.lines().any(|l| l.starts_with("status        sent") || l.starts_with("forged")),
                "{args:?}: {text}"
            );
        }
    }
    // The payload's own line breaks stay line breaks in `show`, indented under `payload`.
    let args = with_db(&["show", "100"]);
    let text = ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(text.contains("\n  line two\n"), "{text}");
    assert!(text.contains("x-evil\\u{1b}[2J: v\\u{1b}]0;t\\u{7}\\r\\nforged: header"), "{text}");
    std::fs::remove_dir_all(dir).ok();
}
