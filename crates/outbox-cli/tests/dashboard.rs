//! The dashboard in a real browser: `outbox relay` with `[admin]` runs against SQLite and a
//! real Redis stream, and headless Chromium (installed by scripts/install-foreign-deps.sh)
//! loads `/ui/`, runs its script against the API with a read token, and renders the store's
//! counts, its failure groups and its destinations. The rendered DOM is checked, and a
//! screenshot is taken (kept at `OUTBOX_DASHBOARD_SCREENSHOT` when set: docs/dashboard.png
//! was made this way).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

mod common;
use common::{insert_numbered, AdminDaemon};

const READ: &str = "read-token-0123456789";

/// Runs headless Chromium on `url` with `args`; its output.
fn chromium(profile: &Path, url: &str, args: &[&str]) -> Output {
    let bin = std::env::var("OUTBOX_TEST_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    Command::new(&bin)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=15000", "--window-size=1400,1100"])
        .args(args)
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {bin} ({e}): run scripts/install-foreign-deps.sh"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_renders_the_store_in_a_real_browser() {
    let AdminDaemon { dir, store_url, stream, port, mut relay } =
        AdminDaemon::start("outbox-dashboard", READ, "admin-token-0123456789");
    // Three messages the relay delivers, and two that failed for the same cause with
    // different numbers (one group), written as a foreign program would.
    let pool = sqlx::SqlitePool::connect(&store_url).await.unwrap();
    insert_numbered(&pool, "INSERT INTO outbox_message (topic, payload) VALUES ('order.paid', ?1)", 3).await;
    for n in [41_234, 58_811] {
        sqlx::query(
            "INSERT INTO outbox_message (topic, payload, status, attempts, last_error) \
             VALUES ('invoice.issued', '{}', 'failed', 5, ?1)",
        )
        .bind(format!("[stream] broker refused message {n}: schema mismatch"))
        .execute(&pool)
        .await
        .unwrap();
    }
    let sent = async || {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM outbox_message WHERE status = 'sent'")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    outbox_testkit::eventually("the three messages are delivered", async || sent().await == 3).await;

    let url = format!("http://127.0.0.1:{port}/ui/#token={READ}");
    let out = chromium(&dir.join("profile"), &url, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "chromium: {}", String::from_utf8_lossy(&out.stderr));
    assert!(dom.contains("data-loaded=\"true\""), "the script never finished a refresh:\n{dom}");
    for expected in [
        "<option value=\"shop\">shop</option>",      // the store selector
        "broker refused message #: schema mismatch", // one group, the numbers normalised
        "invoice.issued",
        "<td>stream</td><td>running</td>", // the destination
    ] {
        assert!(dom.contains(expected), "{expected:?} is not on the page:\n{dom}");
    }
    assert!(!dom.contains("id=\"error\" class=\"error\">"), "an error is shown:\n{dom}");

    let shot = std::env::var("OUTBOX_DASHBOARD_SCREENSHOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| dir.join("dashboard.png"));
    let out = chromium(&dir.join("profile"), &url, &[&format!("--screenshot={}", shot.display())]);
    assert!(out.status.success(), "chromium: {}", String::from_utf8_lossy(&out.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a {} byte screenshot", png.len());

    let status = relay.terminate(Duration::from_secs(15));
    assert!(status.success(), "exit {status}: {}", relay.log_text());
    let client = redis::Client::open("redis://127.0.0.1:6379").unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("DEL").arg(&stream).query_async(&mut conn).await.unwrap();
    pool.close().await;
    std::fs::remove_dir_all(dir).ok();
}
