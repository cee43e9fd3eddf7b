//! The Redis Streams transport against the real server on 127.0.0.1:6379 (override with
//! `OUTBOX_TEST_REDIS_ADDR`). Every test uses its own stream keys, so the tests can run
//! concurrently with each other and with other suites on the same server.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::{header, Envelope, FailureKind, MessageId, NewMessage, Outcome, Transport};
use outbox_testkit::proxy::TcpProxy;
use outbox_transport::redis::{RedisConfig, RedisTransport};
use outbox_transport::TransportError;
use redis::streams::StreamRangeReply;

const TEST_TIMEOUT: Duration = Duration::from_secs(60);

fn server() -> String {
    env_or("OUTBOX_TEST_REDIS_ADDR", "127.0.0.1:6379")
}

async fn redis_conn() -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://{}", server())).unwrap();
    client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("Redis at {} is not reachable ({e}); start it", server()))
}

fn config(url: String, stream: &str) -> RedisConfig {
    RedisConfig { url, stream: stream.into(), timeout: Duration::from_millis(3000), ..RedisConfig::default() }
}

/// One stream entry as a consumer reads it.
#[derive(Debug, Clone)]
struct Got {
    id: String,
    payload: String,
    headers: BTreeMap<String, String>,
}

/// XRANGE of the whole stream, in stream order.
async fn read(key: &str) -> Vec<Got> {
    let mut con = redis_conn().await;
    let reply: StreamRangeReply =
        redis::cmd("XRANGE").arg(key).arg("-").arg("+").query_async(&mut con).await.unwrap();
    reply
        .ids
        .into_iter()
        .map(|entry| {
            let mut fields: HashMap<String, String> = entry
                .map
                .into_iter()
                .map(|(k, v)| (k, redis::from_redis_value::<String>(&v).unwrap()))
                .collect();
            let payload = fields.remove("payload").expect("payload field");
            let id = fields.remove("id").expect("id field");
            let headers = fields
                .into_iter()
                .map(|(k, v)| {
                    (k.strip_prefix("h:").unwrap_or_else(|| panic!("unexpected field {k}")).to_owned(), v)
                })
                .collect();
            Got { id, payload, headers }
        })
        .collect()
}

async fn del(keys: &[&str]) {
    let mut con = redis_conn().await;
    let _: () = redis::cmd("DEL").arg(keys).query_async(&mut con).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_publish_appends_every_header_in_order() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let base = unique("outbox_t");
        let t = RedisTransport::connect(RedisConfig {
            maxlen: Some(10_000),
            ..config(format!("redis://{}", server()), &format!("{base}:{{topic}}"))
        })
        .await
        .unwrap();
        assert_eq!(t.kind(), "redis");
        t.health().await.unwrap();

        let batch: Vec<Envelope> = (1..=30)
            .map(|i| {
                let topic = if i % 2 == 0 { "order.paid" } else { "order.shipped" };
                let key = format!("k{}", i % 3);
                envelope(i, topic, Some(&key), &format!(r#"{{"n":{i}}}"#), i % 4 == 0)
            })
            .collect();
        let outcomes = t.publish(&batch).await;
        assert_eq!(outcomes, vec![Outcome::Delivered; 30]);

        // Delivered means appended: the entries are there as soon as publish returns.
        let paid = read(&format!("{base}:order.paid")).await;
        let shipped = read(&format!("{base}:order.shipped")).await;
        assert_eq!((paid.len(), shipped.len()), (15, 15));
        let by_id: HashMap<&str, &Got> = paid.iter().chain(&shipped).map(|g| (g.id.as_str(), g)).collect();
        for e in &batch {
            let g = by_id[e.id.to_string().as_str()];
            assert_eq!(g.payload, e.payload);
            assert_eq!(g.headers, e.headers, "every header, nothing else, for message {}", e.id);
        }
        // Order within a key (per stream): entry order follows message id.
        for entries in [&paid, &shipped] {
            let mut last: HashMap<&str, i64> = HashMap::new();
            for g in entries.iter() {
                let id: i64 = g.id.parse().unwrap();
                if let Some(prev) = last.insert(g.headers[header::KEY].as_str(), id) {
                    assert!(prev < id, "key {} out of order", g.headers[header::KEY]);
                }
            }
        }
        assert!(t.publish(&[]).await.is_empty());
        del(&[&format!("{base}:order.paid"), &format!("{base}:order.shipped")]).await;
    })
    .await
    .expect("test timed out");
}

/// Checks the entries against the committed messages: every one present with the right payload
/// and headers, never the rolled back one; exactly once when asked.
fn check_received(got: &[Got], committed: &HashMap<MessageId, NewMessage>, exactly_once: bool) {
    let mut seen: HashMap<i64, usize> = HashMap::new();
    for g in got {
        assert_ne!(g.payload, "phantom", "a rolled-back message was published");
        let id: i64 = g.id.parse().unwrap();
        let m = committed.get(&MessageId(id)).unwrap_or_else(|| panic!("unknown message {id}"));
        assert_eq!(g.payload, m.payload);
        assert_eq!(g.headers[header::MESSAGE_ID], g.id);
        assert_eq!(g.headers[header::TOPIC], m.topic);
        assert_eq!(g.headers.get(header::KEY), m.key.as_ref());
        assert_eq!(Some(&g.headers[header::BIZ_KEY]), m.biz.as_ref().map(|b| &b.1));
        assert_eq!(g.headers.get(header::TRACEPARENT), m.headers.get("traceparent"));
        assert!(g.headers.contains_key(header::CREATED_AT) && g.headers.contains_key(header::ATTEMPT));
        *seen.entry(id).or_default() += 1;
    }
    assert_eq!(seen.len(), committed.len(), "every committed message arrives");
    if exactly_once {
        assert!(seen.values().all(|n| *n == 1), "duplicates: {seen:?}");
    }
    // Order per key, first occurrences (a republished duplicate may follow later).
    let mut first_seen: Vec<i64> = Vec::new();
    let mut done = std::collections::HashSet::new();
    for g in got {
        let id: i64 = g.id.parse().unwrap();
        if done.insert(id) {
            first_seen.push(id);
        }
    }
    let mut last: HashMap<&str, i64> = HashMap::new();
    for id in first_seen {
        let key = committed[&MessageId(id)].key.as_deref().unwrap_or("");
        if let Some(prev) = last.insert(key, id) {
            assert!(prev < id, "key {key} out of order");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_end_to_end_publishes_committed_messages_once() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let stream = unique("outbox_t");
        let (db, outbox) = sqlite_outbox().await;
        let t = RedisTransport::connect(config(format!("redis://{}", server()), &stream)).await.unwrap();
        let (stop, handle) = start_relay(&outbox, "redis", Arc::new(t));

        let committed = commit_orders(&outbox).await;
        let ids: Vec<MessageId> = committed.keys().copied().collect();
        wait_all_sent(&outbox, &ids, Duration::from_secs(30)).await;
        check_received(&read(&stream).await, &committed, true);

        stop.cancel();
        handle.await.unwrap();
        del(&[&stream]).await;
        db.drop_db().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_keeps_messages_pending_and_loses_nothing() {
    tokio::time::timeout(TEST_TIMEOUT * 2, async {
        let stream = unique("outbox_t");
        let proxy = TcpProxy::start(&server()).await;
        let (db, outbox) = sqlite_outbox().await;
        let t = RedisTransport::connect(config(format!("redis://{}", proxy.addr()), &stream)).await.unwrap();
        let (stop, handle) = start_relay(&outbox, "redis", Arc::new(t));

        let committed = outage_then_restore(&outbox, &proxy).await;
        // At-least-once: an XADD applied just before the cut may have been appended twice.
        check_received(&read(&stream).await, &committed, false);

        stop.cancel();
        handle.await.unwrap();
        del(&[&stream]).await;
        db.drop_db().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classification_of_failures() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let base = unique("outbox_t");
        let url = format!("redis://{}", server());

        // Oversized payload: permanent, before sending; later messages of its key are held back.
        let t = RedisTransport::connect(RedisConfig {
            max_payload_bytes: 1024,
            ..config(url.clone(), &format!("{base}:{{topic}}"))
        })
        .await
        .unwrap();
        assert_oversized_fails_and_holds_back_its_key(&t, "max_payload_bytes of 1024 bytes").await;

        // WRONGTYPE: the stream key holds a string. Permanent for that message only.
        let mut con = redis_conn().await;
        let _: () =
            redis::cmd("SET").arg(format!("{base}:str")).arg("x").query_async(&mut con).await.unwrap();
        let o = t.publish(&[envelope(4, "str", None, "x", false), envelope(5, "a", None, "y", false)]).await;
        assert_eq!(kind(&o[0]), Some(FailureKind::Permanent), "{o:?}");
        assert!(reason(&o[0]).contains("WRONGTYPE"), "{}", reason(&o[0]));
        assert_eq!(o[1], Outcome::Delivered, "one failed command does not fail the pipeline");
        assert_eq!(read(&format!("{base}:a")).await.len(), 2);

        // Unreachable server: a Connect error with the password redacted.
        assert_unreachable_is_redacted("redis", "redis", |url| {
            RedisTransport::connect(RedisConfig {
                url,
                connect_timeout: Duration::from_millis(1000),
                ..RedisConfig::default()
            })
        })
        .await;

        // Invalid configuration: the key is named, before any connection.
        let e = RedisTransport::connect(RedisConfig { maxlen: Some(0), ..RedisConfig::default() })
            .await
            .unwrap_err();
        assert!(matches!(e, TransportError::Config { key: "maxlen", .. }), "{e:?}");
        let e = RedisTransport::connect(RedisConfig { url: "http://x".into(), ..RedisConfig::default() })
            .await
            .unwrap_err();
        assert!(matches!(e, TransportError::Config { key: "url", .. }), "{e:?}");
        assert!(serde_json::from_str::<RedisConfig>(r#"{"stream":"s","bogus":1}"#)
            .unwrap_err()
            .to_string()
            .contains("bogus"));

        del(&[&format!("{base}:str"), &format!("{base}:a")]).await;
    })
    .await
    .expect("test timed out");
}

/// Issue 14, finding 4 on Redis: a key or field outside the transport's bounds fails alone,
/// permanently, naming the problem, before it is sent; the good messages are appended; the
/// connection keeps working. (Redis keys are binary-safe: a topic with a line break is a valid
/// key and is delivered, not refused.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_outside_the_bounds_fails_alone_and_the_connection_survives() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let base = unique("outbox_t");
        let t = RedisTransport::connect(RedisConfig {
            max_payload_bytes: 1024,
            ..config(format!("redis://{}", server()), &format!("{base}:{{topic}}"))
        })
        .await
        .unwrap();
        let good = |i: i64| envelope(i, "ok", None, &format!("good {i}"), false);
        let with_header = |i: i64, name: &str, value: &str| {
            let mut e = good(i);
            e.headers.insert(name.to_owned(), value.to_owned());
            e
        };
        let batch = vec![
            good(1),
            envelope(101, &"x".repeat(5000), None, "bad", false),
            good(2),
            with_header(102, &format!("{} x", "n".repeat(70_000)), "v"),
            good(3),
            with_header(103, "note", &"v".repeat(2000)),
            good(4),
            envelope(5, "sec.a\nb", None, "binary-safe key", false),
        ];
        let out = t.publish(&batch).await;
        assert_eq!(out[0], Outcome::Delivered);
        assert_refused(&out[1], "more than the 4096 allowed");
        assert_refused(&out[1], "does not make a usable stream key");
        assert_eq!(out[2], Outcome::Delivered);
        assert_refused(&out[3], "header field name");
        assert!(reason(&out[3]).len() < 400, "the 70 KB name is not quoted whole");
        assert_eq!(out[4], Outcome::Delivered);
        assert_refused(&out[5], "larger than max_payload_bytes (1024)");
        assert_eq!(out[6], Outcome::Delivered);
        assert_eq!(out[7], Outcome::Delivered);

        let got: Vec<String> = read(&format!("{base}:ok")).await.into_iter().map(|g| g.id).collect();
        assert_eq!(got, vec!["1", "2", "3", "4"]);
        assert_eq!(read(&format!("{base}:sec.a\nb")).await.len(), 1);
        assert_eq!(t.publish(&[good(6)]).await, vec![Outcome::Delivered]);
        assert_eq!(read(&format!("{base}:ok")).await.len(), 5);
        del(&[&format!("{base}:ok"), &format!("{base}:sec.a\nb")]).await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_during_a_cut_is_unavailable_and_the_next_after_restore_succeeds() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let stream = unique("outbox_t");
        let proxy = TcpProxy::start(&server()).await;
        let t = RedisTransport::connect(config(format!("redis://{}", proxy.addr()), &stream)).await.unwrap();
        assert_eq!(t.publish(&[envelope(1, "a", None, "x", false)]).await, vec![Outcome::Delivered]);
        proxy.cut();
        let started = Instant::now();
        let o = t.publish(&[envelope(2, "a", None, "x", false)]).await;
        assert_eq!(kind(&o[0]), Some(FailureKind::Unavailable), "{o:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "bounded by the timeout");
        assert!(t.health().await.is_err());
        proxy.restore();
        // The connection is re-established on demand: at most one more failure, then delivered.
        publish_until_delivered(&t, envelope(3, "a", None, "y", false), Duration::from_secs(15)).await;
        t.health().await.unwrap();
        del(&[&stream]).await;
    })
    .await
    .expect("test timed out");
}

/// Publishes race with connections being cut and restored: whatever the timing, a message
/// reported delivered is in the stream, and every call answers within its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivered_always_means_appended_under_repeated_cuts() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let stream = unique("outbox_t");
        let proxy = Arc::new(TcpProxy::start(&server()).await);
        let t = RedisTransport::connect(RedisConfig {
            timeout: Duration::from_millis(1500),
            ..config(format!("redis://{}", proxy.addr()), &stream)
        })
        .await
        .unwrap();
        let delivered = delivered_under_repeated_cuts(&t, proxy, (97, 150)).await;
        let stored: std::collections::HashSet<String> =
            read(&stream).await.into_iter().map(|g| g.id).collect();
        let missing: Vec<&String> = delivered.difference(&stored).collect();
        assert!(missing.is_empty(), "reported delivered but not appended: {missing:?}");
        del(&[&stream]).await;
    })
    .await
    .expect("test timed out");
}
