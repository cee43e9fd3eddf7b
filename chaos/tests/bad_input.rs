//! Bad input, against real servers and a real `outbox relay` process: every kind gets a clear
//! error, the relay keeps running, and no other message is held up or lost.
//!
//! - rows inserted by a foreign application with missing or invalid columns (PostgreSQL and
//!   MariaDB): rejected at insert, naming the constraint, the business change rolled back too;
//! - corrupt headers JSON: rejected at insert by the database (so the relay never sees it);
//! - a payload over the destination's limit and a topic with no route: that message `failed`
//!   with the reason, every other one delivered;
//! - odd but valid headers (numbers, objects, spaces, newlines, long values, many of them);
//! - garbage on the ACK endpoint (random bytes, huge bodies, wrong methods, unknown paths,
//!   missing, malformed, forged, expired and misplaced tokens): a 4xx each, never a 5xx, and
//!   a real ACK still works afterwards;
//! - configuration errors: `outbox check` and `outbox relay` exit non-zero naming the key.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The `outbox` binary: `OUTBOX_BIN`, or built once with cargo.
fn outbox_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("OUTBOX_BIN") {
            return PathBuf::from(p);
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--quiet", "-p", "outbox-cli", "--bin", "outbox"])
            .current_dir(&root)
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build -p outbox-cli failed");
        let target =
            std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| root.join("target"));
        target.join("debug").join("outbox")
    })
    .clone()
}

fn temp_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir = std::env::temp_dir().join(format!("outbox-bad-input-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

// ---------------------------------------------------------------------------------------------
// Foreign inserts

/// `(statement suffix after "INSERT INTO outbox_message ", what the error must name)`.
const PG_BAD_ROWS: &[(&str, &str)] = &[
    ("(payload) VALUES ('x')", "\"topic\""),
    ("(topic) VALUES ('order.paid')", "\"payload\""),
    ("(topic, payload) VALUES ('', 'x')", "outbox_message_topic_not_blank"),
    ("(topic, payload) VALUES (' order.paid', 'x')", "outbox_message_topic_not_blank"),
    ("(topic, payload, msg_key) VALUES ('t', 'x', '')", "outbox_message_key_not_blank"),
    ("(topic, payload, tag) VALUES ('t', 'x', '')", "outbox_message_tag_not_blank"),
    ("(topic, payload, biz_type) VALUES ('t', 'x', 'order')", "outbox_message_biz_pair"),
    ("(topic, payload, biz_type, biz_key) VALUES ('t', 'x', '', '')", "outbox_message_biz_not_blank"),
    ("(topic, payload, status) VALUES ('t', 'x', 'bogus')", "outbox_message_status_known"),
    ("(topic, payload, status) VALUES ('t', 'x', 'sending')", "outbox_message_sending_has_lease"),
    ("(topic, payload, attempts) VALUES ('t', 'x', -1)", "outbox_message_attempts_not_negative"),
    ("(topic, payload, max_attempts) VALUES ('t', 'x', 0)", "outbox_message_max_attempts_positive"),
    ("(topic, payload, headers) VALUES ('t', 'x', '[1, 2]')", "outbox_message_headers_object"),
    ("(topic, payload, headers) VALUES ('t', 'x', '\"text\"')", "outbox_message_headers_object"),
    ("(topic, payload, headers) VALUES ('t', 'x', '{not json')", "invalid input syntax for type json"),
    ("(topic, payload, headers) VALUES ('t', 'x', '{\"a\": 1')", "invalid input syntax for type json"),
];

const MY_BAD_ROWS: &[(&str, &str)] = &[
    ("(payload) VALUES ('x')", "'topic'"),
    ("(topic) VALUES ('order.paid')", "'payload'"),
    ("(topic, payload) VALUES ('', 'x')", "outbox_message_topic_not_blank"),
    ("(topic, payload) VALUES (' order.paid', 'x')", "outbox_message_topic_not_blank"),
    ("(topic, payload, msg_key) VALUES ('t', 'x', '')", "outbox_message_key_not_blank"),
    ("(topic, payload, tag) VALUES ('t', 'x', '')", "outbox_message_tag_not_blank"),
    ("(topic, payload, biz_type) VALUES ('t', 'x', 'order')", "outbox_message_biz_pair"),
    ("(topic, payload, biz_type, biz_key) VALUES ('t', 'x', '', '')", "outbox_message_biz_not_blank"),
    ("(topic, payload, status) VALUES ('t', 'x', 'bogus')", "outbox_message_status_known"),
    ("(topic, payload, status) VALUES ('t', 'x', 'sending')", "outbox_message_sending_has_lease"),
    ("(topic, payload, attempts) VALUES ('t', 'x', -1)", "outbox_message_attempts_not_negative"),
    ("(topic, payload, max_attempts) VALUES ('t', 'x', 0)", "outbox_message_max_attempts_positive"),
    ("(topic, payload, headers) VALUES ('t', 'x', '[1, 2]')", "outbox_message_headers_object"),
    ("(topic, payload, headers) VALUES ('t', 'x', '\"text\"')", "outbox_message_headers_object"),
    ("(topic, payload, headers) VALUES ('t', 'x', '{not json')", "outbox_message"),
    ("(topic, payload, headers) VALUES ('t', 'x', '{\"a\": 1')", "outbox_message"),
];

fn long_topic() -> String {
    format!("(topic, payload) VALUES ('{}', 'x')", "t".repeat(300))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rejects_malformed_foreign_rows_at_insert_naming_the_rule() {
    let db = outbox_testkit::fresh_pg().await;
    outbox_store::Outbox::new(db.pool.clone()).migrate().await.unwrap();
    sqlx::query("CREATE TABLE shop_order (id BIGINT PRIMARY KEY)").execute(&db.pool).await.unwrap();
    let long = long_topic();
    let mut cases: Vec<(&str, &str)> = PG_BAD_ROWS.to_vec();
    cases.push((&long, "character varying(255)"));
    for (i, (row, expected)) in cases.iter().enumerate() {
        let mut tx = db.pool.begin().await.unwrap();
        sqlx::query("INSERT INTO shop_order (id) VALUES ($1)")
            .bind(i as i64)
            .execute(&mut *tx)
            .await
            .unwrap();
        let err = sqlx::query(&format!("INSERT INTO outbox_message {row}"))
            .execute(&mut *tx)
            .await
            .expect_err(row)
            .to_string();
        assert!(err.contains(expected), "{row}: expected {expected:?} in {err:?}");
        // The application's transaction fails fast: PostgreSQL answers its COMMIT with a
        // ROLLBACK, so the business change goes too (counted below).
        let _ = tx.commit().await;
    }
    let orders: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM shop_order").fetch_one(&db.pool).await.unwrap();
    let messages: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM outbox_message").fetch_one(&db.pool).await.unwrap();
    assert_eq!((orders, messages), (0, 0), "a failed statement aborts the PostgreSQL transaction");
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_rejects_malformed_foreign_rows_at_insert_naming_the_rule() {
    let db = outbox_testkit::fresh_mysql().await;
    outbox_store::Outbox::new(db.pool.clone()).migrate().await.unwrap();
    let long = long_topic();
    let mut cases: Vec<(&str, &str)> = MY_BAD_ROWS.to_vec();
    cases.push((&long, "Data too long for column 'topic'"));
    for (row, expected) in cases {
        let err = sqlx::query(&format!("INSERT INTO outbox_message {row}"))
            .execute(&db.pool)
            .await
            .expect_err(row)
            .to_string();
        assert!(err.contains(expected), "{row}: expected {expected:?} in {err:?}");
    }
    let messages: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM outbox_message").fetch_one(&db.pool).await.unwrap();
    assert_eq!(messages, 0);
    db.drop_db().await;
}

// ---------------------------------------------------------------------------------------------
// The relay under bad messages and HTTP garbage

fn relay_config(dir: &Path, store_url: &str, stream: &str, ack_port: u16) -> PathBuf {
    let path = dir.join("outbox.toml");
    std::fs::write(
        &path,
        format!(
            r##"
[relay]
idle_interval = "200ms"
lease = "5s"
publish_timeout = "2s"
shutdown_timeout = "5s"

[[stores]]
name = "shop"
url = "{store_url}"

[destinations.stream]
max_payload_bytes = 4096
[destinations.stream.transport]
type = "redis"
url = "redis://127.0.0.1:6379"
stream = "{stream}"

[destinations.confirmed]
ack = {{ timeout = "60s" }}
[destinations.confirmed.transport]
type = "redis"
url = "redis://127.0.0.1:6379"
stream = "{stream}-acked"

[[routes]]
topic = "good.#"
destinations = ["stream"]

[[routes]]
topic = "confirm.#"
destinations = ["confirmed"]

[ack]
listen = "127.0.0.1:{ack_port}"
secret = "bad-input-test-secret-0123456789"

[retention]
finished_after = "0s"
"##
        ),
    )
    .unwrap();
    path
}

/// The relay process, SIGKILLed if the test fails before stopping it.
struct Relay(Child);

impl Drop for Relay {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn spawn_relay(config: &Path, log: &Path) -> Relay {
    Relay(
        Command::new(outbox_bin())
            .args(["relay", "--config", config.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("start outbox relay"),
    )
}

/// Sends raw bytes to the ACK endpoint; returns the HTTP status, or `None` when the server
/// closed the connection without an answer.
async fn raw_http(port: u16, request: &[u8]) -> Option<u16> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let _ = s.write_all(request).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 4096];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&buf);
    text.strip_prefix("HTTP/1.1 ").and_then(|r| r.get(..3)).and_then(|c| c.parse().ok())
}

fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (n, v) in headers {
        r.push_str(&format!("{n}: {v}\r\n"));
    }
    r.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut out = r.into_bytes();
    out.extend_from_slice(body);
    out
}

async fn status_of(pool: &sqlx::PgPool, id: i64) -> (String, Option<String>) {
    sqlx::query_as("SELECT status, last_error FROM outbox_message WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn insert(pool: &sqlx::PgPool, topic: &str, payload: &str, key: Option<&str>, headers: &str) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO outbox_message (topic, payload, msg_key, headers) VALUES ($1, $2, $3, $4::jsonb) RETURNING id",
    )
    .bind(topic)
    .bind(payload)
    .bind(key)
    .bind(headers)
    .fetch_one(pool)
    .await
    .unwrap()
}

fn assert_alive(relay: &mut Relay, log: &Path, after: &str) {
    assert!(
        relay.0.try_wait().unwrap().is_none(),
        "the relay died after {after}: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_fails_only_the_bad_messages_and_shrugs_off_http_garbage() {
    use redis::AsyncCommands;

    let db = outbox_testkit::fresh_pg().await;
    outbox_store::Outbox::new(db.pool.clone()).migrate().await.unwrap();
    let pool = db.pool.clone();
    let dir = temp_dir("relay");
    let stream = format!("outbox-bad-input-{}-{}", std::process::id(), rand::random::<u32>());
    let port = free_port();
    let cfg = relay_config(&dir, &db.url, &stream, port);
    let log = dir.join("relay.log");
    let mut relay = spawn_relay(&cfg, &log);

    // Good messages on three keys, interleaved with the bad ones (each on its own key, so a
    // failed head blocks nobody else by design).
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for i in 0..30 {
        good.push(
            insert(&pool, "good.order", &format!("{{\"n\":{i}}}"), Some(&format!("k{}", i % 3)), "{}").await,
        );
        match i {
            5 => bad.push((
                "oversized",
                insert(&pool, "good.order", &"x".repeat(10_000), Some("big"), "{}").await,
            )),
            10 => bad.push(("no route", insert(&pool, "nowhere.order", "{}", None, "{}").await)),
            _ => {}
        }
    }
    // Odd but valid headers: non-string values, spaces, control characters, a long value, many.
    let many: serde_json::Map<String, serde_json::Value> =
        (0..200).map(|i| (format!("h{i}"), serde_json::Value::String(i.to_string()))).collect();
    let odd = [
        serde_json::json!({"n": 5, "obj": {"x": [1, 2]}, "nil": null, "sp ace": "v", "nl": "a\r\nb"}),
        serde_json::json!({"long": "y".repeat(5000)}),
        serde_json::Value::Object(many),
    ];
    let mut odd_ids = Vec::new();
    for h in &odd {
        odd_ids.push(insert(&pool, "good.odd", "{}", None, &h.to_string()).await);
    }
    // ACK mode messages: confirmed through the endpoint later.
    let mut confirm = Vec::new();
    for _ in 0..3 {
        confirm.push(insert(&pool, "confirm.order", "{}", None, "{}").await);
    }

    // Wait for the ACK endpoint, then throw garbage at it while the relay works.
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(Instant::now() < deadline, "no ACK endpoint: {}", std::fs::read_to_string(&log).unwrap());
        assert_alive(&mut relay, &log, "start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let id = confirm[0];
    let path = format!("/v1/ack/shop/{id}/confirmed");
    let secret = b"bad-input-test-secret-0123456789";
    let forged = outbox_core::ack::sign(
        b"another-secret-another-secret",
        "shop",
        outbox_core::MessageId(id),
        "confirmed",
        4_000_000_000,
    );
    let expired = outbox_core::ack::sign(secret, "shop", outbox_core::MessageId(id), "confirmed", 1);
    let other_msg =
        outbox_core::ack::sign(secret, "shop", outbox_core::MessageId(id + 1), "confirmed", 4_000_000_000);
    let mut random = vec![0u8; 4096];
    for b in random.iter_mut() {
        *b = rand::random();
    }
    let huge = vec![b'{'; 2 * 1024 * 1024];
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("random bytes instead of HTTP", random.clone()),
        ("random body", request("POST", &path, &[], &random)),
        ("huge body", request("POST", &path, &[], &huge)),
        ("huge declared length", {
            let mut r = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000\r\n\r\n")
                .into_bytes();
            r.extend_from_slice(&random);
            r
        }),
        ("GET", request("GET", &path, &[], b"")),
        ("PUT", request("PUT", &path, &[("outbox-ack-token", "x")], b"")),
        ("DELETE", request("DELETE", &path, &[], b"")),
        ("unknown path", request("POST", "/v1/ack", &[], b"")),
        ("admin path", request("GET", "/../../etc/passwd", &[], b"")),
        ("missing token", request("POST", &path, &[], b"")),
        ("empty token", request("POST", &path, &[("outbox-ack-token", "")], b"")),
        ("malformed token", request("POST", &path, &[("outbox-ack-token", "not-a-token")], b"")),
        ("forged token", request("POST", &path, &[("outbox-ack-token", &forged)], b"")),
        ("expired token", request("POST", &path, &[("outbox-ack-token", &expired)], b"")),
        ("another message's token", request("POST", &path, &[("outbox-ack-token", &other_msg)], b"")),
        ("token in a non-JSON body", request("POST", &path, &[], b"token=abc")),
        ("JSON body without token", request("POST", &path, &[], br#"{"tok":1}"#)),
        ("token of the wrong type", request("POST", &path, &[], br#"{"token":42}"#)),
        ("non-integer id", request("POST", "/v1/ack/shop/abc/confirmed", &[("outbox-ack-token", "x")], b"")),
        ("id out of range", request("POST", "/v1/ack/shop/99999999999999999999/confirmed", &[], b"")),
        (
            "unknown store",
            request("POST", &format!("/v1/ack/eu/{id}/confirmed"), &[("outbox-ack-token", &forged)], b""),
        ),
        (
            "unknown destination",
            request("POST", &format!("/v1/ack/shop/{id}/nope"), &[("outbox-ack-token", &forged)], b""),
        ),
    ];
    for (what, bytes) in &cases {
        let status = raw_http(port, bytes).await;
        if let Some(code) = status {
            assert!((400..500).contains(&code), "{what}: answered {code}, expected a 4xx");
        } else {
            assert_eq!(*what, "random bytes instead of HTTP", "{what}: no answer");
        }
        assert_alive(&mut relay, &log, what);
    }

    // Every good message is delivered; the bad ones failed with their reason.
    let client = redis::Client::open("redis://127.0.0.1:6379").unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut open = 0;
        for id in good.iter().chain(odd_ids.iter()).chain(bad.iter().map(|b| &b.1)) {
            let (st, _) = status_of(&pool, *id).await;
            if st == "pending" || st == "sending" {
                open += 1;
            }
        }
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} still open: {}", std::fs::read_to_string(&log).unwrap());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in &good {
        assert_eq!(status_of(&pool, *id).await.0, "sent", "message {id}");
    }
    for id in &odd_ids {
        let (st, err) = status_of(&pool, *id).await;
        assert!(st == "sent" || (st == "failed" && err.is_some()), "odd headers {id}: {st} {err:?}");
    }
    let (st, err) = status_of(&pool, bad[0].1).await;
    assert_eq!(st, "failed");
    assert!(
        err.as_deref().unwrap_or("").contains("larger than the destination's limit of 4096 bytes"),
        "{err:?}"
    );
    let (st, err) = status_of(&pool, bad[1].1).await;
    assert_eq!(st, "failed");
    assert!(err.as_deref().unwrap_or("").contains("no route for topic \"nowhere.order\""), "{err:?}");
    let entries: Vec<redis::streams::StreamId> = {
        let r: redis::streams::StreamRangeReply = conn.xrange_all(&stream).await.unwrap();
        r.ids
    };
    let mut seen = std::collections::HashSet::new();
    for e in &entries {
        seen.insert(outbox_inbox::from_redis_stream(e).unwrap().id.parse::<i64>().unwrap());
    }
    for id in &good {
        assert!(seen.contains(id), "message {id} was not received");
    }
    assert!(!seen.contains(&bad[0].1) && !seen.contains(&bad[1].1));

    // A real ACK still works after all that.
    let deadline = Instant::now() + Duration::from_secs(30);
    let token = loop {
        let r: redis::streams::StreamRangeReply = conn.xrange_all(format!("{stream}-acked")).await.unwrap();
        let found = r
            .ids
            .iter()
            .map(|e| outbox_inbox::from_redis_stream(e).unwrap())
            .find(|m| m.id == id.to_string());
        if let Some(m) = found {
            break m.header("outbox-ack-token").unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "the ACK-mode message was not published");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        raw_http(port, &request("POST", &path, &[("outbox-ack-token", &token)], b"")).await,
        Some(200)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_of(&pool, id).await.0 != "acked" {
        assert!(Instant::now() < deadline, "not acked: {:?}", status_of(&pool, id).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_alive(&mut relay, &log, "the whole test");

    Command::new("kill").args(["-TERM", &relay.0.id().to_string()]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = relay.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no graceful exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status}: {text}");
    assert!(!text.contains("panicked"), "{text}");
    let _: () =
        redis::cmd("DEL").arg(&stream).arg(format!("{stream}-acked")).query_async(&mut conn).await.unwrap();
    db.drop_db().await;
    std::fs::remove_dir_all(dir).ok();
}

// ---------------------------------------------------------------------------------------------
// Configuration errors

const GOOD_CONFIG: &str = r#"
[relay]
batch_size = 100
lease = "30s"

[[stores]]
name = "shop"
url = "sqlite:shop.db"

[destinations.bus.transport]
type = "redis"
url = "redis://127.0.0.1:6379"
stream = "s"

[[routes]]
topic = "order.#"
destinations = ["bus"]
"#;

#[test]
fn configuration_errors_exit_non_zero_naming_the_key() {
    let dir = temp_dir("config");
    let cases: Vec<(String, &str, &[&str])> = vec![
        (
            GOOD_CONFIG.replace("batch_size = 100", "batch_size = 100\nbatchsize = 5"),
            "unknown key",
            &["batchsize", "line 4"],
        ),
        (GOOD_CONFIG.replace("lease = \"30s\"", "lease = \"soon\""), "bad duration", &["lease", "line 4"]),
        (
            GOOD_CONFIG.replace("batch_size = 100", "batch_size = \"many\""),
            "wrong type",
            &["batch_size", "line 3"],
        ),
        (GOOD_CONFIG.replace("batch_size = 100", "batch_size = 0"), "zero batch", &["relay.batch_size"]),
        (
            GOOD_CONFIG.replace("lease = \"30s\"", "lease = \"1s\"\npublish_timeout = \"5s\""),
            "timeout over lease",
            &["relay.publish_timeout"],
        ),
        (
            GOOD_CONFIG.replace("[\"bus\"]", "[\"kafka\"]"),
            "unknown destination",
            &["routes[0].destinations", "kafka"],
        ),
        (GOOD_CONFIG.replace("order.#", "order.#.x"), "bad pattern", &["routes[0].topic"]),
        (GOOD_CONFIG.replace("sqlite:shop.db", "oracle://u:pw@h/x"), "bad store url", &["stores[0].url"]),
        (GOOD_CONFIG.replace("type = \"redis\"", "type = \"kafka9\""), "unknown transport", &["kafka9"]),
        (
            GOOD_CONFIG.replace(
                "[destinations.bus.transport]",
                "[destinations.bus]\nack = { timeout = \"1m\" }\n[destinations.bus.transport]",
            ),
            "ACK without secret",
            &["ack.secret"],
        ),
        (GOOD_CONFIG.replace("[[routes]]", "[[routes"), "TOML syntax", &["outbox.toml", "line 15"]),
        (String::from_utf8_lossy(&[0xff, 0xfe, 0x00, 0x41]).into_owned(), "binary garbage", &["outbox.toml"]),
        (String::new(), "empty file", &["stores"]),
    ];
    for (text, what, needles) in &cases {
        let path = dir.join("outbox.toml");
        std::fs::write(&path, text).unwrap();
        for cmd in ["check", "relay"] {
            let out =
                Command::new(outbox_bin()).args([cmd, "--config", path.to_str().unwrap()]).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{cmd} accepted {what}");
            for n in *needles {
                assert!(err.contains(n), "{cmd}, {what}: {n:?} not in {err}");
            }
            assert!(!err.contains("pw@"), "{cmd}, {what}: credentials leaked: {err}");
            assert!(!err.contains("panicked"), "{cmd}, {what}: {err}");
        }
    }
    let out = Command::new(outbox_bin())
        .args(["relay", "--config", dir.join("missing.toml").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml"));
    std::fs::remove_dir_all(dir).ok();
}
