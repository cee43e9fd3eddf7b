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
//! - a rolling deploy: a relay without a route for a topic leaves its messages to one that
//!   has it (no attempt, no failure, key order kept), whichever starts first;
//! - rows the relay cannot read as they are, written before schema version 5 refused them
//!   (PostgreSQL infinite times, MariaDB zero dates, SQLite text that is not UTF-8): each
//!   fails alone with its reason (or is read with its time clamped), every other message is
//!   delivered once, and `outbox list` / `show` read them;
//! - configuration errors: `outbox check` and `outbox relay` exit non-zero naming the key.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use outbox_testkit::net::free_port;
use outbox_testkit::process::{outbox_bin, RelayConfig, RelayProcess};

fn temp_dir(name: &str) -> PathBuf {
    outbox_testkit::fs::temp_dir(&format!("outbox-bad-input-{name}"))
}

// ---------------------------------------------------------------------------------------------
// Foreign inserts

/// `(statement suffix after "INSERT INTO outbox_message ", what the error must name)`: what
/// both PostgreSQL and MariaDB refuse with the same named constraint.
const BAD_ROWS: &[(&str, &str)] = &[
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
];

/// PostgreSQL's own cases and wording (see [`BAD_ROWS`]).
const PG_BAD_ROWS: &[(&str, &str)] = &[
    ("(payload) VALUES ('x')", "\"topic\""),
    ("(topic) VALUES ('order.paid')", "\"payload\""),
    ("(topic, payload, headers) VALUES ('t', 'x', '{not json')", "invalid input syntax for type json"),
    ("(topic, payload, headers) VALUES ('t', 'x', '{\"a\": 1')", "invalid input syntax for type json"),
    // Schema version 5: what the relay could not read or deliver.
    ("(topic, payload, next_attempt_at) VALUES ('t', 'x', '-infinity')", "outbox_message_times_in_range"),
    ("(topic, payload, created_at) VALUES ('t', 'x', 'infinity')", "outbox_message_times_in_range"),
    ("(topic, payload) VALUES ('t' || chr(10) || 'x', 'x')", "outbox_message_well_formed"),
    ("(topic, payload, msg_key) VALUES ('t', 'x', 'k' || chr(27))", "outbox_message_well_formed"),
    ("(topic, payload, headers) VALUES ('t', 'x', jsonb_build_object('h', repeat('y', 4097)))", "outbox_message_well_formed"),
    ("(topic, payload, headers) VALUES ('t', 'x', jsonb_build_object(repeat('n', 129), 'v'))", "outbox_message_well_formed"),
    ("(topic, payload, headers) VALUES ('t', 'x', jsonb_build_object(' h', 'v'))", "outbox_message_well_formed"),
    (
        "(topic, payload, headers) SELECT 't', 'x', jsonb_object_agg('h' || i, i) FROM generate_series(1, 65) i",
        "outbox_message_well_formed",
    ),
    ("(topic, payload, last_error) VALUES ('t', 'x', repeat('e', 2001))", "outbox_message_last_error_bounded"),
];

/// MariaDB's own cases and wording (see [`BAD_ROWS`]).
const MY_BAD_ROWS: &[(&str, &str)] = &[
    ("(payload) VALUES ('x')", "'topic'"),
    ("(topic) VALUES ('order.paid')", "'payload'"),
    ("(topic, payload, headers) VALUES ('t', 'x', '{not json')", "outbox_message"),
    ("(topic, payload, headers) VALUES ('t', 'x', '{\"a\": 1')", "outbox_message"),
    // Schema version 5: what the relay could not read or deliver.
    ("(topic, payload, next_attempt_at) VALUES ('t', 'x', '1960-01-01')", "outbox_message_times_in_range"),
    ("(topic, payload) VALUES (CONCAT('t', CHAR(10), 'x'), 'x')", "outbox_message_well_formed"),
    ("(topic, payload, msg_key) VALUES ('t', 'x', CONCAT('k', CHAR(27)))", "outbox_message_well_formed"),
    (
        "(topic, payload, headers) VALUES ('t', 'x', JSON_OBJECT(REPEAT('n', 129), 'v'))",
        "outbox_message_well_formed",
    ),
    (
        "(topic, payload, last_error) VALUES ('t', 'x', REPEAT('e', 2001))",
        "outbox_message_last_error_bounded",
    ),
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
    let mut cases: Vec<(&str, &str)> = BAD_ROWS.iter().chain(PG_BAD_ROWS).copied().collect();
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
    let mut cases: Vec<(&str, &str)> = BAD_ROWS.iter().chain(MY_BAD_ROWS).copied().collect();
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

const REDIS_URL: &str = "redis://127.0.0.1:6379";

/// The `[relay]` timings of every relay this suite starts.
const RELAY_TIMINGS: &str = r#"
    idle_interval = "200ms"
    lease = "5s"
    publish_timeout = "2s"
    shutdown_timeout = "5s"
"#;

/// A transport to `stream` on the local Redis.
fn redis_transport(stream: &str) -> String {
    format!("type = \"redis\"\nurl = \"{REDIS_URL}\"\nstream = \"{stream}\"")
}

fn relay_config(dir: &Path, store_url: &str, stream: &str, ack_port: u16) -> PathBuf {
    let ack = format!(
        r#"[ack]
           listen = "127.0.0.1:{ack_port}"
           secret = "bad-input-test-secret-0123456789""#
    );
    RelayConfig::new(&format!("{RELAY_TIMINGS}\nunrouted_grace = \"0s\""), store_url)
        .destination("stream", "max_payload_bytes = 4096", &redis_transport(stream))
        .destination(
            "confirmed",
            r#"ack = { timeout = "60s" }"#,
            &redis_transport(&format!("{stream}-acked")),
        )
        .route("good.#", &["stream"])
        .route("confirm.#", &["confirmed"])
        .section(&ack)
        .section("[retention]\nfinished_after = \"0s\"")
        .write(&dir.join("outbox.toml"))
}

fn spawn_relay(config: &Path, log: &Path) -> RelayProcess {
    RelayProcess::start(outbox_bin(), config, log)
}

/// Sends raw bytes to the ACK endpoint; returns the HTTP status, or `None` when the server
/// closed the connection (or stayed silent for 10 s) without an answer.
async fn raw_http(port: u16, request: &[u8]) -> Option<u16> {
    let answer = tokio::time::timeout(Duration::from_secs(10), outbox_testkit::net::exchange(port, request));
    answer.await.ok().flatten().map(|(status, _)| status)
}

/// A request on a connection the server is to close after answering.
fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let headers: Vec<(&str, &str)> =
        [("Connection", "close")].into_iter().chain(headers.iter().copied()).collect();
    outbox_testkit::net::request(method, path, &headers, body)
}

async fn redis_conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open(REDIS_URL).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// Every message on `stream`, in stream order.
async fn stream_messages(
    conn: &mut redis::aio::MultiplexedConnection,
    stream: &str,
) -> Vec<outbox_inbox::InboxMessage> {
    use redis::AsyncCommands;
    let r: redis::streams::StreamRangeReply = conn.xrange_all(stream).await.unwrap();
    r.ids.iter().map(|e| outbox_inbox::from_redis_stream(e).unwrap()).collect()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_fails_only_the_bad_messages_and_shrugs_off_http_garbage() {
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
    // Odd but valid headers: non-string values, spaces, control characters in a value, the
    // longest value and the most headers the schema accepts (docs/sql-contract.md, "Limits").
    let many: serde_json::Map<String, serde_json::Value> = (0..outbox_core::limits::HEADER_COUNT)
        .map(|i| (format!("h{i}"), serde_json::Value::String(i.to_string())))
        .collect();
    let odd = [
        serde_json::json!({"n": 5, "obj": {"x": [1, 2]}, "nil": null, "sp ace": "v", "nl": "a\r\nb"}),
        serde_json::json!({"long": "y".repeat(outbox_core::limits::HEADER_VALUE)}),
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
    relay.wait_for_port(port, Duration::from_secs(60));
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
        relay.assert_alive(what);
    }

    // Every good message is delivered; the bad ones failed with their reason.
    let mut conn = redis_conn().await;
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
        assert!(Instant::now() < deadline, "{open} still open: {}", relay.log_text());
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
    let seen: std::collections::HashSet<i64> =
        stream_messages(&mut conn, &stream).await.iter().map(|m| m.id.parse().unwrap()).collect();
    for id in &good {
        assert!(seen.contains(id), "message {id} was not received");
    }
    assert!(!seen.contains(&bad[0].1) && !seen.contains(&bad[1].1));

    // A real ACK still works after all that.
    let deadline = Instant::now() + Duration::from_secs(30);
    let token = loop {
        let acked = stream_messages(&mut conn, &format!("{stream}-acked")).await;
        let found = acked.into_iter().find(|m| m.id == id.to_string());
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
    relay.assert_alive("the whole test");

    let status = relay.terminate(Duration::from_secs(20));
    let text = relay.log_text();
    assert!(status.success(), "{status}: {text}");
    assert!(!text.contains("panicked"), "{text}");
    let _: () =
        redis::cmd("DEL").arg(&stream).arg(format!("{stream}-acked")).query_async(&mut conn).await.unwrap();
    db.drop_db().await;
    std::fs::remove_dir_all(dir).ok();
}

// ---------------------------------------------------------------------------------------------
// A rolling deploy: two relay processes whose routes differ, on one table

fn routes_config(dir: &Path, name: &str, store_url: &str, stream: &str, topics: &[&str]) -> PathBuf {
    let config = RelayConfig::new(&format!("owner = \"{name}\"\n{RELAY_TIMINGS}"), store_url).destination(
        "stream",
        "",
        &redis_transport(stream),
    );
    topics
        .iter()
        .fold(config, |config, topic| config.route(topic, &["stream"]))
        .write(&dir.join(format!("{name}.toml")))
}

/// Relay A routes `old.#`; relay B, the next version, routes `old.#` and `new.#`. Whichever
/// starts first, no `new.*` message fails or spends an attempt on A, and each is published once,
/// in key order, once B runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_without_the_route_leaves_the_message_to_one_that_has_it_in_either_start_order() {
    for old_first in [true, false] {
        let db = outbox_testkit::fresh_pg().await;
        outbox_store::Outbox::new(db.pool.clone()).migrate().await.unwrap();
        let dir = temp_dir("rolling");
        let stream = format!("outbox-rolling-{}-{}", std::process::id(), rand::random::<u32>());
        let a = routes_config(&dir, "relay-a", &db.url, &stream, &["old.#"]);
        let b = routes_config(&dir, "relay-b", &db.url, &stream, &["old.#", "new.#"]);
        let (log_a, log_b) = (dir.join("a.log"), dir.join("b.log"));
        let mut first = spawn_relay(
            if old_first { &a } else { &b },
            &if old_first { log_a.clone() } else { log_b.clone() },
        );

        let mut old = Vec::new();
        let mut new = Vec::new();
        for i in 0..50 {
            new.push(
                insert(&db.pool, "new.topic", &format!("{{\"n\":{i}}}"), Some(&format!("n{}", i % 5)), "{}")
                    .await,
            );
            if i % 2 == 0 {
                old.push(insert(&db.pool, "old.topic", "{}", Some(&format!("o{}", i % 3)), "{}").await);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        if old_first {
            // Wait until A has passed over the head of each of the 5 keys of new.* (it says why
            // in last_error; the rest of each key waits behind its head, as per-key order wants).
            loop {
                first.assert_alive("passing over new.*");
                let mut passed = 0;
                for id in &new {
                    let (st, err) = status_of(&db.pool, *id).await;
                    assert_ne!(st, "failed", "relay A failed {id}: {err:?}");
                    passed += usize::from(err.is_some_and(|e| e.contains("no route for topic")));
                }
                if passed >= 5 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{passed} passed over: {}",
                    std::fs::read_to_string(&log_a).unwrap()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let mut second = spawn_relay(
            if old_first { &b } else { &a },
            &if old_first { log_b.clone() } else { log_a.clone() },
        );

        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            first.assert_alive("the deploy");
            second.assert_alive("the deploy");
            let mut open = 0;
            for id in old.iter().chain(&new) {
                let (st, err) = status_of(&db.pool, *id).await;
                assert_ne!(st, "failed", "message {id} failed: {err:?}");
                open += usize::from(st != "sent");
            }
            if open == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{open} not sent: {}",
                std::fs::read_to_string(&log_b).unwrap()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let attempts: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(attempts), 0)::int8 FROM outbox_message")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(attempts, 0, "no attempt spent on a missing route");

        let mut conn = redis_conn().await;
        let got = stream_messages(&mut conn, &stream).await;
        let ids: Vec<i64> = got.iter().map(|m| m.id.parse().unwrap()).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), old.len() + new.len(), "every message once (no crash, so no duplicate)");
        assert_eq!(ids.len(), sorted.len(), "a message was published twice");
        let mut last: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
        for (m, id) in got.iter().zip(&ids) {
            if let Some(k) = m.header(outbox_core::header::KEY).map(str::to_owned) {
                let prev = last.insert(k.clone(), *id);
                assert!(prev.is_none_or(|p| p < *id), "key {k}: {id} published after {prev:?}");
            }
        }
        let _: () = redis::cmd("DEL").arg(&stream).query_async(&mut conn).await.unwrap();
        drop((first, second));
        db.drop_db().await;
        std::fs::remove_dir_all(dir).ok();
    }
}

// ---------------------------------------------------------------------------------------------
// Rows the relay cannot read, written before schema version 5 refused them

/// `outbox list --status <status> --json` on `url`: `(id, last_error)` of every match.
fn listed(url: &str, status: &str) -> Vec<(i64, Option<String>)> {
    let out = Command::new(outbox_bin())
        .args(["list", "--database-url", url, "--status", status, "--limit", "1000", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "outbox list: {}", String::from_utf8_lossy(&out.stderr));
    let page: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_i64().unwrap(), m["last_error"].as_str().map(str::to_owned)))
        .collect()
}

/// Runs a relay process on `url` where `good` are ordinary messages and `poison` rows it cannot
/// read as they are: every good one is delivered, every poison row ends `failed` with a reason
/// containing its needle (or, where the reader can make sense of it, `sent`), the relay never
/// dies, and `outbox list --status failed` shows the failed ones.
async fn poison_rows_fail_alone(url: &str, good: &[i64], poison: &[(i64, &str)]) {
    let dir = temp_dir("poison");
    let stream = format!("outbox-poison-{}-{}", std::process::id(), rand::random::<u32>());
    let cfg = relay_config(&dir, url, &stream, free_port());
    let log = dir.join("relay.log");
    let mut relay = spawn_relay(&cfg, &log);

    let deadline = Instant::now() + Duration::from_secs(90);
    let (sent, failed) = loop {
        relay.assert_alive("reading the poison rows");
        let sent = listed(url, "sent");
        let failed = listed(url, "failed");
        let done = |id: &i64| sent.iter().chain(&failed).any(|(s, _)| s == id);
        if good.iter().chain(poison.iter().map(|p| &p.0)).all(done) {
            break (sent, failed);
        }
        assert!(Instant::now() < deadline, "still open: {}", relay.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for id in good {
        assert!(sent.iter().any(|(s, _)| s == id), "good message {id} not sent: failed {failed:?}");
    }
    for (id, needle) in poison {
        if let Some((_, err)) = failed.iter().find(|(f, _)| f == id) {
            let err = err.as_deref().unwrap_or_default();
            assert!(err.contains(needle), "poison row {id}: {needle:?} not in {err:?}");
        } else {
            assert!(needle.is_empty(), "poison row {id} was sent; expected it to fail with {needle:?}");
        }
    }
    let mut conn = redis_conn().await;
    let mut seen = std::collections::HashMap::<i64, usize>::new();
    for m in stream_messages(&mut conn, &stream).await {
        *seen.entry(m.id.parse().unwrap()).or_default() += 1;
    }
    for id in good {
        assert_eq!(seen.get(id), Some(&1), "message {id} published {:?} times", seen.get(id));
    }
    for (id, needle) in poison {
        if !needle.is_empty() {
            assert!(!seen.contains_key(id), "poison row {id} reached the broker");
        }
    }
    let text = relay.log_text();
    assert!(!text.contains("panicked"), "{text}");
    let _: () = redis::cmd("DEL").arg(&stream).query_async(&mut conn).await.unwrap();
    drop(relay);
    std::fs::remove_dir_all(dir).ok();
}

const GOOD_MESSAGES: i64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rows_with_infinite_times_never_crash_the_relay_or_the_cli() {
    let db = outbox_testkit::fresh_pg().await;
    outbox_store::Outbox::new(db.pool.clone()).migrate().await.unwrap();
    // As a database migrated before version 5 could hold them (since version 11, PostgreSQL
    // checks every rule of the table in one constraint).
    sqlx::query("ALTER TABLE outbox_message DROP CONSTRAINT outbox_message_rules")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut good = Vec::new();
    let mut poison = Vec::new();
    for i in 0..GOOD_MESSAGES {
        good.push(
            insert(&db.pool, "good.order", &format!("{{\"n\":{i}}}"), Some(&format!("k{}", i % 3)), "{}")
                .await,
        );
        if i == 7 {
            for (n, column, value) in [
                (1, "next_attempt_at", "-infinity"),
                (2, "created_at", "infinity"),
                (3, "created_at", "200000-01-01"),
            ] {
                let id: i64 = sqlx::query_scalar(&format!(
                    "INSERT INTO outbox_message (topic, payload, msg_key, {column}) \
                     VALUES ('good.order', '{{}}', 'p{n}', '{value}') RETURNING id"
                ))
                .fetch_one(&db.pool)
                .await
                .unwrap();
                // Read with the time clamped: delivered, or failed with a reason; never a panic.
                poison.push((id, ""));
            }
        }
    }
    poison_rows_fail_alone(&db.url, &good, &poison).await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_zero_dates_fail_alone_with_their_reason() {
    let db = outbox_testkit::fresh_mysql().await;
    outbox_store::Outbox::new(db.pool.clone()).migrate().await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    // As a database migrated before version 5 under a permissive sql_mode could hold them.
    sqlx::query("ALTER TABLE outbox_message DROP CONSTRAINT outbox_message_times_in_range")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("SET SESSION sql_mode = ''").execute(&mut *conn).await.unwrap();
    let mut good = Vec::new();
    let mut poison = Vec::new();
    for i in 0..GOOD_MESSAGES {
        let done =
            sqlx::query("INSERT INTO outbox_message (topic, payload, msg_key) VALUES ('good.order', ?, ?)")
                .bind(format!("{{\"n\":{i}}}"))
                .bind(format!("k{}", i % 3))
                .execute(&mut *conn)
                .await
                .unwrap();
        good.push(done.last_insert_id() as i64);
        if i == 7 {
            for (n, column) in [(1, "next_attempt_at"), (2, "created_at")] {
                let done = sqlx::query(&format!(
                    "INSERT INTO outbox_message (topic, payload, msg_key, {column}) \
                     VALUES ('good.order', '{{}}', 'p{n}', '0000-00-00 00:00:00')"
                ))
                .execute(&mut *conn)
                .await
                .unwrap();
                poison.push((done.last_insert_id() as i64, "the relay cannot read this row"));
            }
        }
    }
    drop(conn);
    poison_rows_fail_alone(&db.url, &good, &poison).await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_text_that_is_not_utf8_fails_alone_and_can_be_listed() {
    let db = outbox_testkit::fresh_sqlite().await;
    outbox_store::Outbox::new(db.pool.clone()).migrate().await.unwrap();
    let mut good = Vec::new();
    let mut poison = Vec::new();
    for i in 0..GOOD_MESSAGES {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO outbox_message (topic, payload, msg_key) VALUES ('good.order', ?1, ?2) RETURNING id",
        )
        .bind(format!("{{\"n\":{i}}}"))
        .bind(format!("k{}", i % 3))
        .fetch_one(&db.pool)
        .await
        .unwrap();
        good.push(id);
        if i == 7 {
            for (n, column) in [(1, "payload"), (2, "msg_key")] {
                let values = if column == "payload" {
                    format!("'good.order', CAST(x'fffe41' AS TEXT), 'p{n}'")
                } else {
                    "'good.order', '{}', CAST(x'c328' AS TEXT)".to_owned()
                };
                let id: i64 = sqlx::query_scalar(&format!(
                    "INSERT INTO outbox_message (topic, payload, msg_key) VALUES ({values}) RETURNING id"
                ))
                .fetch_one(&db.pool)
                .await
                .unwrap();
                poison.push((
                    id,
                    if column == "payload" {
                        "payload is not valid UTF-8"
                    } else {
                        "msg_key is not valid UTF-8"
                    },
                ));
            }
        }
    }
    poison_rows_fail_alone(&db.url, &good, &poison).await;
    // `outbox show` reads the failed row too (the bad bytes as U+FFFD).
    let out = Command::new(outbox_bin())
        .args(["show", "--database-url", &db.url, &poison[0].0.to_string(), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "outbox show: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\u{fffd}"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    db.drop_db().await;
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
            &["batchsize", "outbox.toml:4:"],
        ),
        (
            GOOD_CONFIG.replace("lease = \"30s\"", "lease = \"soon\""),
            "bad duration",
            &["lease", "outbox.toml:4:"],
        ),
        (
            GOOD_CONFIG.replace("batch_size = 100", "batch_size = \"many\""),
            "wrong type",
            &["batch_size", "outbox.toml:3:"],
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
        (
            GOOD_CONFIG.replace("type = \"redis\"", "type = \"kafka9\""),
            "unknown transport",
            &["destinations.bus.transport.type", "unknown variant"],
        ),
        (
            GOOD_CONFIG.replace(
                "[destinations.bus.transport]",
                "[destinations.bus]\nack = { timeout = \"1m\" }\n[destinations.bus.transport]",
            ),
            "ACK without secret",
            &["ack.secret"],
        ),
        (GOOD_CONFIG.replace("[[routes]]", "[[routes"), "TOML syntax", &["outbox.toml:15:"]),
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
