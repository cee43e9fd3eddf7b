//! `outbox relay` as a process: a foreign application inserts rows with plain SQL, the daemon
//! publishes them to a real Redis stream, and SIGTERM stops it gracefully. Start-up failures
//! (unreachable store or broker) exit non-zero naming what failed.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use outbox_testkit::fs::temp_dir;
use outbox_testkit::process::{RelayConfig, RelayProcess};

mod common;
use common::{AdminDaemon, OUTBOX, REDIS};

fn config(dir: &Path, store_url: &str, redis_url: &str, stream: &str) -> PathBuf {
    RelayConfig::to_redis_stream(store_url, redis_url, stream).write(&dir.join("outbox.toml"))
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
    // The broker holds a message before its row is settled: wait for the settles themselves.
    outbox_testkit::eventually("the 50 rows settled as sent", async || {
        let sent: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox_message WHERE status = 'sent'")
            .fetch_one(&pool)
            .await
            .unwrap();
        sent == 50
    })
    .await;

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

/// SIGTERM while the daemon is still starting (its broker's connect hanging on a listener that
/// accepts and never answers) is a graceful stop: exit 0 once the connect gives up, not the
/// start-up's error; nothing was claimed. (Found by the chaos suite: a relay given SIGTERM while
/// its RabbitMQ connect was timing out exited 1.)
#[test]
fn sigterm_while_starting_is_a_graceful_stop() {
    let dir = temp_dir("outbox-daemon-stop-starting");
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = hole.local_addr().unwrap();
    let store = format!("sqlite:{}", dir.join("x.db").display());
    let cfg = config(&dir, &store, &format!("redis://{addr}"), "unused");
    let log = dir.join("relay.log");
    let mut relay = RelayProcess::start(OUTBOX, &cfg, &log);
    // The daemon is starting, its connect under way, once the listener has its connection:
    // accepted on a thread of its own, waited for with a deadline.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(hole.accept().map(|(conn, _)| conn));
    });
    let _held = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("the daemon never connected: {}", relay.log_text()))
        .unwrap();
    let status = relay.terminate(Duration::from_secs(60));
    let text = relay.log_text();
    assert!(status.success(), "exit {status}: {text}");
    assert!(text.contains("SIGTERM") && text.contains("Stopped while starting"), "{text}");
    std::fs::remove_dir_all(dir).ok();
}

/// A daemon started with SIGTERM blocked and already pending (a parent that blocks it: the
/// mask and the pending signal survive `exec`) stops gracefully on it: it listens for SIGTERM
/// first thing, then unblocks it, so the pending stop is seen at once (exit 0, nothing claimed)
/// instead of held back for the daemon's whole life. (Found with the chaos suite: a daemon given
/// SIGTERM before it listened, on a loaded machine, died of the signal's default action; it now
/// listens before reading its configuration.) The parent is `python3`, which blocks, signals
/// itself and `exec`s the daemon.
#[test]
fn a_sigterm_pending_at_exec_is_a_graceful_stop() {
    let dir = temp_dir("outbox-daemon-pending-term");
    let store = format!("sqlite:{}", dir.join("x.db").display());
    let cfg = config(&dir, &store, REDIS, &format!("outbox-daemon-pending-{}", std::process::id()));
    let parent = "import os, signal, sys\n\
                  signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n\
                  os.kill(os.getpid(), signal.SIGTERM)\n\
                  assert signal.SIGTERM in signal.sigpending()\n\
                  os.execv(sys.argv[1], sys.argv[1:])\n";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", parent, OUTBOX, "relay", "--config", cfg.to_str().unwrap()]);
    let log = dir.join("relay.log");
    let mut relay = RelayProcess::spawn(cmd, &log);
    let status = relay.child.wait_exit(Duration::from_secs(60));
    let text = relay.log_text();
    assert!(status.success(), "exit {status}: {text}");
    assert!(text.contains("SIGTERM: shutting down"), "{text}");
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

/// One HTTP/1.1 request to the daemon's admin listener over a real socket; returns the status
/// code and the body.
async fn http(port: u16, method: &str, path: &str, token: &str) -> (u16, String) {
    use outbox_testkit::net::{exchange, request};
    let auth = format!("Bearer {token}");
    exchange(port, &request(method, path, &[("Authorization", &auth)], b"")).await.expect("an answer")
}

/// The value of one sample in a Prometheus text body (parsed by `prometheus-parse`).
fn sample(body: &str, metric: &str, labels: &[(&str, &str)]) -> Option<prometheus_parse::Value> {
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned())))
        .unwrap_or_else(|e| panic!("not the Prometheus text format ({e}):\n{body}"));
    scrape
        .samples
        .into_iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| s.value)
}

fn number(v: Option<prometheus_parse::Value>) -> f64 {
    match v {
        Some(prometheus_parse::Value::Counter(n) | prometheus_parse::Value::Gauge(n))
        | Some(prometheus_parse::Value::Untyped(n)) => n,
        other => panic!("not a number: {other:?}"),
    }
}

/// The admin listener of a running daemon, over TCP: readiness, metrics that parse as the
/// Prometheus text format (counters, the commit-to-publish histogram, destination gauges), and
/// a pause through the API that holds new messages (deferred, no attempt spent) until resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_serves_metrics_and_pauses_a_destination() {
    let (read, admin) = ("read-token-0123456789", "admin-token-0123456789");
    let AdminDaemon { dir, store_url, stream, port, mut relay } =
        AdminDaemon::start("outbox-daemon-admin", read, admin);
    assert_eq!(http(port, "GET", "/readyz", read).await.0, 200, "{}", relay.log_text());
    let pool = sqlx::SqlitePool::connect(&store_url).await.unwrap();
    let insert = |n: usize| {
        let pool = pool.clone();
        async move {
            for i in 0..n {
                sqlx::query("INSERT INTO outbox_message (topic, payload) VALUES ('order.paid', ?1)")
                    .bind(format!("{i}"))
                    .execute(&pool)
                    .await
                    .unwrap();
            }
        }
    };
    let client = redis::Client::open("redis://127.0.0.1:6379").unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let xlen = async |want: u64| {
        let len = async || {
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            redis::cmd("XLEN").arg(&stream).query_async::<u64>(&mut conn).await.unwrap()
        };
        outbox_testkit::eventually(&format!("{want} messages in the stream"), async || len().await >= want)
            .await;
        len().await
    };
    insert(10).await;
    assert_eq!(xlen(10).await, 10);

    let (code, body) = http(port, "GET", "/metrics", read).await;
    assert_eq!(code, 200, "{body}");
    let store = [("store", "shop")];
    assert_eq!(number(sample(&body, "outbox_deliveries_confirmed_total", &store)), 10.0);
    match sample(&body, "outbox_commit_to_publish_seconds", &store) {
        Some(prometheus_parse::Value::Histogram(buckets)) => {
            let total = buckets.iter().map(|b| b.count).fold(0.0, f64::max);
            assert_eq!(total, 10.0, "{buckets:?}");
        }
        other => panic!("no commit-to-publish histogram: {other:?}\n{body}"),
    }
    let dest = [("store", "shop"), ("destination", "stream")];
    assert_eq!(number(sample(&body, "outbox_destination_paused", &dest)), 0.0);
    assert_eq!(number(sample(&body, "outbox_destination_circuit_open", &dest)), 0.0);
    assert!(body.lines().all(|l| !l.contains("message_id")), "no per-message label");
    // The store's pool counts the connections it opened: at least the first, at most its 4.
    let opened = number(sample(&body, "outbox_pool_connections_opened_total", &store));
    assert!((1.0..=4.0).contains(&opened), "{opened} connections opened\n{body}");

    // Pause: once the relay has read it (its gauge says so), new messages are deferred, not sent.
    let (code, body) = http(port, "POST", "/api/v1/stores/shop/destinations/stream/pause", admin).await;
    assert_eq!(code, 200, "{body}");
    let metric = async |name: &str, labels: &[(&str, &str)]| {
        number(sample(&http(port, "GET", "/metrics", read).await.1, name, labels))
    };
    outbox_testkit::eventually("the relay sees the pause", async || {
        metric("outbox_destination_paused", &dest).await == 1.0
    })
    .await;
    insert(5).await;
    outbox_testkit::eventually("the relay holds the new messages", async || {
        metric("outbox_deliveries_deferred_total", &store).await >= 5.0
    })
    .await;
    let len: u64 = redis::cmd("XLEN").arg(&stream).query_async(&mut conn).await.unwrap();
    assert_eq!(len, 10, "nothing published while paused");
    let attempts: i64 = sqlx::query_scalar("SELECT COALESCE(SUM(attempts), 0) FROM outbox_message")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(attempts, 0, "a pause spends no attempt");

    let (code, _) = http(port, "POST", "/api/v1/stores/shop/destinations/stream/resume", admin).await;
    assert_eq!(code, 200);
    assert_eq!(xlen(15).await, 15, "everything once after the resume");

    let status = relay.terminate(Duration::from_secs(15));
    assert!(status.success(), "exit {status}: {}", relay.log_text());
    let _: () = redis::cmd("DEL").arg(&stream).query_async(&mut conn).await.unwrap();
    pool.close().await;
    std::fs::remove_dir_all(dir).ok();
}

/// Two relay processes on one PostgreSQL store, each with its own admin listener: each lists
/// the other (from `outbox_relay`: host, pid, state), a pause through the first holds the
/// second's deliveries too (its own gauge and counters say so, nothing reaches the stream), the
/// resume releases them, and a relay that stops leaves the other's list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_relay_process_is_listed_and_observes_a_pause() {
    let db = outbox_testkit::fresh_pg().await;
    let dir = temp_dir("outbox-daemon-two");
    let stream = format!("outbox-daemon-two-{}", std::process::id());
    let (read, admin) = ("read-token-0123456789", "admin-token-0123456789");
    let start = |name: &str| {
        let port = outbox_testkit::net::free_port();
        let cfg = RelayConfig::to_redis_stream(&db.url, REDIS, &stream)
            .admin(port, read, admin)
            .write(&dir.join(format!("{name}.toml")));
        let relay = RelayProcess::start(OUTBOX, &cfg, &dir.join(format!("{name}.log")));
        outbox_testkit::net::wait_port(port, Duration::from_secs(60), "the admin listener");
        (relay, port)
    };
    let (mut first, p1) = start("first");
    let (mut second, p2) = start("second");
    let relays = async |port: u16| -> Vec<serde_json::Value> {
        let (code, body) = http(port, "GET", "/api/v1/relays", read).await;
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["relays"].as_array().unwrap().clone()
    };
    outbox_testkit::eventually("each relay lists the other", async || {
        relays(p1).await.len() == 2 && relays(p2).await.len() == 2
    })
    .await;
    let seen_from_first = relays(p1).await;
    let other = seen_from_first.iter().find(|r| r["local"] == false).unwrap();
    assert_eq!(other["pid"], second.child.0.id(), "{seen_from_first:?}");
    assert_eq!(other["store"], "shop");
    assert!(["idle", "busy"].contains(&other["state"].as_str().unwrap()), "{other}");
    assert!(other["silent_ms"].as_i64().unwrap() < 30_000, "{other}");
    let own = seen_from_first.iter().find(|r| r["local"] == true).unwrap();
    assert_eq!(own["pid"], first.child.0.id());
    assert_ne!(own["owner"], other["owner"]);

    let insert = async |n: usize| {
        for i in 0..n {
            sqlx::query("INSERT INTO outbox_message (topic, payload) VALUES ('order.paid', $1)")
                .bind(format!("{i}"))
                .execute(&db.pool)
                .await
                .unwrap();
        }
    };
    let client = redis::Client::open(REDIS).unwrap();
    let len = async || -> u64 {
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        redis::cmd("XLEN").arg(&stream).query_async(&mut conn).await.unwrap()
    };
    insert(4).await;
    outbox_testkit::eventually("4 messages in the stream", async || len().await >= 4).await;

    // Paused through the first: the second reads the table and holds too.
    let (code, body) = http(p1, "POST", "/api/v1/stores/shop/destinations/stream/pause", admin).await;
    assert_eq!(code, 200, "{body}");
    let metric = async |port: u16, name: &str, labels: &[(&str, &str)]| {
        number(sample(&http(port, "GET", "/metrics", read).await.1, name, labels))
    };
    let dest = [("store", "shop"), ("destination", "stream")];
    outbox_testkit::eventually("both relays see the pause", async || {
        metric(p1, "outbox_destination_paused", &dest).await == 1.0
            && metric(p2, "outbox_destination_paused", &dest).await == 1.0
    })
    .await;
    insert(6).await;
    let store = [("store", "shop")];
    outbox_testkit::eventually("the relays hold the new messages", async || {
        metric(p1, "outbox_deliveries_deferred_total", &store).await
            + metric(p2, "outbox_deliveries_deferred_total", &store).await
            >= 6.0
    })
    .await;
    assert_eq!(len().await, 4, "nothing published while paused, by either relay");
    let attempts: i64 = sqlx::query_scalar("SELECT COALESCE(SUM(attempts), 0)::int8 FROM outbox_message")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, 0, "a pause spends no attempt");

    // Stop the first: only the second is left to deliver, after the resume through itself.
    assert!(first.terminate(Duration::from_secs(15)).success(), "{}", first.log_text());
    outbox_testkit::eventually("the stopped relay leaves the list", async || relays(p2).await.len() == 1)
        .await;
    let (code, _) = http(p2, "POST", "/api/v1/stores/shop/destinations/stream/resume", admin).await;
    assert_eq!(code, 200);
    outbox_testkit::eventually("everything once after the resume", async || len().await >= 10).await;
    assert_eq!(len().await, 10);
    assert!(second.terminate(Duration::from_secs(15)).success(), "{}", second.log_text());
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("DEL").arg(&stream).query_async(&mut conn).await.unwrap();
    db.drop_db().await;
    std::fs::remove_dir_all(dir).ok();
}
