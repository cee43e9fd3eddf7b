//! The NATS JetStream transport against the real server on 127.0.0.1:4222 (override with
//! `OUTBOX_TEST_NATS_ADDR`). Every test uses its own stream and subjects, so the tests can run
//! concurrently with each other and with other suites on the same server.
#![cfg(feature = "nats")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures::StreamExt;
use outbox_core::{header, Envelope, FailureKind, MessageId, NewMessage, Outcome, Transport};
use outbox_testkit::process::NatsServer;
use outbox_testkit::proxy::TcpProxy;
use outbox_transport::nats::{NatsConfig, NatsTransport};
use outbox_transport::TransportError;

const TEST_TIMEOUT: Duration = Duration::from_secs(60);

fn server() -> String {
    env_or("OUTBOX_TEST_NATS_ADDR", "127.0.0.1:4222")
}

async fn jetstream() -> jetstream::Context {
    let client = async_nats::connect(server())
        .await
        .unwrap_or_else(|e| panic!("NATS at {} is not reachable ({e}); start it", server()));
    jetstream::new(client)
}

/// A fresh stream capturing `<prefix>.>`.
async fn fresh_stream(js: &jetstream::Context) -> (String, String) {
    let name = unique("OUTBOX_T");
    let prefix = unique("outbox_t");
    js.create_stream(jetstream::stream::Config {
        name: name.clone(),
        subjects: vec![format!("{prefix}.>")],
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .unwrap();
    (name, prefix)
}

fn config(url: String, prefix: &str, stream: &str) -> NatsConfig {
    NatsConfig {
        url,
        subject_prefix: Some(prefix.into()),
        stream: Some(stream.into()),
        timeout: Duration::from_millis(3000),
        ..NatsConfig::default()
    }
}

/// One stored message as a JetStream consumer sees it.
#[derive(Debug, Clone)]
struct Got {
    subject: String,
    headers: BTreeMap<String, String>,
    payload: String,
    sequence: u64,
}

/// Reads the whole stream with a pull consumer: at least `expected` messages (then anything
/// else that arrives within a short grace period, to catch duplicates).
async fn consume(js: &jetstream::Context, stream: &str, expected: usize, wait: Duration) -> Vec<Got> {
    let s = js.get_stream(stream).await.unwrap();
    let consumer = s
        .create_consumer(jetstream::consumer::pull::Config {
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + wait;
    loop {
        let limit = if out.len() < expected {
            deadline.saturating_duration_since(Instant::now())
        } else {
            Duration::from_millis(300)
        };
        let Ok(Some(m)) = tokio::time::timeout(limit, messages.next()).await else { break };
        let m = m.unwrap();
        let headers = m
            .headers
            .as_ref()
            .map(|h| h.iter().map(|(k, v)| (k.to_string(), v.first().unwrap().to_string())).collect())
            .unwrap_or_default();
        let sequence = m.info().unwrap().stream_sequence;
        out.push(Got {
            subject: m.subject.to_string(),
            headers,
            payload: String::from_utf8(m.payload.to_vec()).unwrap(),
            sequence,
        });
        m.ack().await.unwrap();
    }
    out
}

async fn stored(js: &jetstream::Context, stream: &str) -> u64 {
    js.get_stream(stream).await.unwrap().info().await.unwrap().state.messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_publish_delivers_every_header_in_order_once() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let js = jetstream().await;
        let (stream, prefix) = fresh_stream(&js).await;
        let t =
            NatsTransport::connect(config(format!("nats://{}", server()), &prefix, &stream)).await.unwrap();
        assert_eq!(t.kind(), "nats");
        t.health().await.unwrap();

        let batch: Vec<Envelope> = (1..=30)
            .map(|i| {
                let topic = if i % 2 == 0 { "order.paid" } else { "order.shipped" };
                let key = format!("k{}", i % 3);
                envelope(i, topic, Some(&key), &format!(r#"{{"n":{i}}}"#), i % 4 == 0)
            })
            .collect();
        assert_eq!(stored(&js, &stream).await, 0);
        let outcomes = t.publish(&batch).await;
        assert_eq!(outcomes, vec![Outcome::Delivered; 30]);
        // Delivered means stored: the stream holds every message as soon as publish returns.
        assert_eq!(stored(&js, &stream).await, 30);

        let got = consume(&js, &stream, 30, Duration::from_secs(10)).await;
        assert_eq!(got.len(), 30, "every message exactly once");
        let by_id: HashMap<String, &Got> =
            got.iter().map(|g| (g.headers[header::MESSAGE_ID].clone(), g)).collect();
        for e in &batch {
            let g = by_id[&e.id.to_string()];
            assert_eq!(g.subject, format!("{prefix}.{}", e.topic));
            assert_eq!(g.payload, e.payload);
            for (name, value) in &e.headers {
                assert_eq!(g.headers.get(name), Some(value), "header {name} of message {}", e.id);
            }
            assert_eq!(g.headers["Nats-Msg-Id"], e.id.to_string());
            assert_eq!(g.headers.len(), e.headers.len() + 1, "no unexpected header");
        }
        assert!(got.iter().filter(|g| g.headers.contains_key(header::TRACEPARENT)).count() == 7);
        // Order within a key: stream sequence follows message id.
        for k in ["k0", "k1", "k2"] {
            let ids: Vec<i64> = {
                let mut v: Vec<&Got> = got.iter().filter(|g| g.headers[header::KEY] == k).collect();
                v.sort_by_key(|g| g.sequence);
                v.iter().map(|g| g.headers[header::MESSAGE_ID].parse().unwrap()).collect()
            };
            let mut sorted = ids.clone();
            sorted.sort_unstable();
            assert_eq!(ids, sorted, "key {k} out of order");
            assert_eq!(ids.len(), 10);
        }

        // Publishing the same messages again (a relay retry) is acknowledged, and deduplicated
        // by Nats-Msg-Id.
        assert_eq!(t.publish(&batch[..5]).await, vec![Outcome::Delivered; 5]);
        assert_eq!(stored(&js, &stream).await, 30);
        assert!(t.publish(&[]).await.is_empty());
        js.delete_stream(&stream).await.unwrap();
    })
    .await
    .expect("test timed out");
}

/// Checks what a consumer got against the committed messages: each once, right payload and
/// headers, never the rolled back one.
fn check_received(got: &[Got], committed: &HashMap<MessageId, NewMessage>, exactly_once: bool) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for g in got {
        assert_ne!(g.payload, "phantom", "a rolled-back message was published");
        let id: i64 = g.headers[header::MESSAGE_ID].parse().unwrap();
        let m = committed.get(&MessageId(id)).unwrap_or_else(|| panic!("unknown message {id}"));
        assert_eq!(g.payload, m.payload);
        assert_eq!(g.headers[header::TOPIC], m.topic);
        assert_eq!(g.headers.get(header::KEY), m.key.as_ref());
        assert_eq!(g.headers[header::BIZ_TYPE], "order");
        assert_eq!(Some(&g.headers[header::BIZ_KEY]), m.biz.as_ref().map(|b| &b.1));
        assert_eq!(g.headers.get(header::TRACEPARENT), m.headers.get("traceparent"));
        assert!(g.headers.contains_key(header::CREATED_AT) && g.headers.contains_key(header::ATTEMPT));
        *seen.entry(id.to_string()).or_default() += 1;
    }
    assert_eq!(seen.len(), committed.len(), "every committed message arrives");
    if exactly_once {
        assert!(seen.values().all(|n| *n == 1), "duplicates: {seen:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_end_to_end_publishes_committed_messages_once() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let js = jetstream().await;
        let (stream, prefix) = fresh_stream(&js).await;
        let (db, outbox) = sqlite_outbox().await;
        let t =
            NatsTransport::connect(config(format!("nats://{}", server()), &prefix, &stream)).await.unwrap();
        let (stop, handle) = start_relay(&outbox, "nats", Arc::new(t));

        let committed = commit_orders(&outbox).await;
        let ids: Vec<MessageId> = committed.keys().copied().collect();
        wait_all_sent(&outbox, &ids, Duration::from_secs(30)).await;
        let got = consume(&js, &stream, 200, Duration::from_secs(10)).await;
        check_received(&got, &committed, true);
        assert_eq!(stored(&js, &stream).await, 200);
        // Order per key: stream sequence follows message id.
        let mut last: HashMap<String, (u64, i64)> = HashMap::new();
        let mut sorted = got.clone();
        sorted.sort_by_key(|g| g.sequence);
        for g in &sorted {
            let id: i64 = g.headers[header::MESSAGE_ID].parse().unwrap();
            if let Some((_, prev)) = last.insert(g.headers[header::KEY].clone(), (g.sequence, id)) {
                assert!(prev < id, "key {} out of order", g.headers[header::KEY]);
            }
        }

        stop.cancel();
        handle.await.unwrap();
        js.delete_stream(&stream).await.unwrap();
        db.drop_db().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_keeps_messages_pending_and_loses_nothing() {
    tokio::time::timeout(TEST_TIMEOUT * 2, async {
        let js = jetstream().await;
        let (stream, prefix) = fresh_stream(&js).await;
        let proxy = TcpProxy::start(&server()).await;
        let (db, outbox) = sqlite_outbox().await;
        let t = NatsTransport::connect(config(format!("nats://{}", proxy.addr()), &prefix, &stream))
            .await
            .unwrap();
        let (stop, handle) = start_relay(&outbox, "nats", Arc::new(t));

        let committed = outage_then_restore(&outbox, &proxy).await;
        let got = consume(&js, &stream, 120, Duration::from_secs(10)).await;
        // Nats-Msg-Id deduplication makes even the republished ones appear once.
        check_received(&got, &committed, true);

        stop.cancel();
        handle.await.unwrap();
        js.delete_stream(&stream).await.unwrap();
        db.drop_db().await;
    })
    .await
    .expect("test timed out");
}

/// Issue 14, finding 4 on NATS: every subject or header the server (or the protocol line)
/// would refuse fails alone, permanently, naming the problem, before it is sent; the good
/// messages of the batch are stored; the connection is untouched. The 5000-byte subject used to
/// make the server close the connection ("maximum control line exceeded"); the 70 KB header
/// name with a space used to produce a reason quoting the whole name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_server_would_refuse_fails_alone_and_the_connection_survives() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let js = jetstream().await;
        let (stream, prefix) = fresh_stream(&js).await;
        let t =
            NatsTransport::connect(config(format!("nats://{}", server()), &prefix, &stream)).await.unwrap();
        let good = |i: i64| envelope(i, "order.paid", None, &format!(r#"{{"n":{i}}}"#), false);
        let with_header = |i: i64, name: &str, value: &str| {
            let mut e = good(i);
            e.headers.insert(name.to_owned(), value.to_owned());
            e
        };
        let huge_name = format!("{} x", "n".repeat(70_000));
        let bad: Vec<(Envelope, &str)> = vec![
            (envelope(101, "sec.a b", None, "x", false), "U+0020 (space)"),
            (envelope(102, "sec.a\nb", None, "x", false), "U+000A (line feed)"),
            (envelope(103, "order.*", None, "x", false), "wildcard token '*'"),
            (envelope(104, "order.>", None, "x", false), "wildcard token '>'"),
            (envelope(105, "order..paid", None, "x", false), "empty token"),
            (envelope(106, &"x".repeat(5000), None, "x", false), "more than the 3840 allowed"),
            (with_header(107, &huge_name, "v"), "contains U+0020 (space): NATS header names"),
            (with_header(108, "x-note", "a\r\nInjected: 1"), "U+000D (carriage return)"),
            (with_header(109, "Nats-Rollup", "all"), "reserved"),
            (with_header(110, "Łabel", "v"), "U+0141"),
            (with_header(111, "a:b", "v"), "':'"),
        ];
        // good, bad, good, bad, ...
        let mut batch = Vec::new();
        for (i, (e, _)) in bad.iter().enumerate() {
            batch.push(good(i as i64 + 1));
            batch.push(e.clone());
        }
        let n_good = bad.len();
        let expected: Vec<Option<&str>> = bad.iter().flat_map(|(_, needle)| [None, Some(*needle)]).collect();
        let out = t.publish(&batch).await;
        assert_eq!(out.len(), batch.len());
        for (o, needle) in out.iter().zip(&expected) {
            match needle {
                Some(needle) => assert_refused(o, needle),
                None => assert_eq!(*o, Outcome::Delivered),
            }
        }
        let huge = reason(&out[13]);
        assert!(huge.len() < 400, "the 70 KB name is not quoted whole: {} bytes", huge.len());

        // Exactly the good messages were stored; the connection still publishes.
        let got = consume(&js, &stream, n_good, Duration::from_secs(10)).await;
        let mut payloads: Vec<String> = got.iter().map(|g| g.payload.clone()).collect();
        payloads.sort();
        let mut want: Vec<String> = (1..=n_good as i64).map(|i| format!(r#"{{"n":{i}}}"#)).collect();
        want.sort();
        assert_eq!(payloads, want);
        assert_eq!(t.publish(&[good(500)]).await, vec![Outcome::Delivered]);
        assert_eq!(stored(&js, &stream).await, n_good as u64 + 1);
        t.health().await.unwrap();
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classification_of_failures() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let js = jetstream().await;
        let (stream, prefix) = fresh_stream(&js).await;
        let url = format!("nats://{}", server());

        // Oversized: over the configured limit, and over the server's max_payload.
        let small = NatsTransport::connect(NatsConfig {
            max_payload_bytes: Some(1024),
            ..config(url.clone(), &prefix, &stream)
        })
        .await
        .unwrap();
        assert_oversized_fails_and_holds_back_its_key(&small, "max_payload_bytes of 1024 bytes").await;
        let t = NatsTransport::connect(config(url.clone(), &prefix, &stream)).await.unwrap();
        let server_max = t.max_payload_bytes().unwrap();
        let o = t.publish(&[envelope(4, "a", None, &"x".repeat(server_max), false)]).await;
        assert_eq!(kind(&o[0]), Some(FailureKind::Permanent));
        assert!(
            reason(&o[0]).contains(&format!("server's max_payload of {server_max} bytes")),
            "{}",
            reason(&o[0])
        );
        // The connection survived (nothing oversized was sent).
        assert_eq!(t.publish(&[envelope(5, "a", None, "ok", false)]).await, vec![Outcome::Delivered]);

        // A topic that makes no valid subject.
        let o =
            t.publish(&[envelope(6, "a..b", None, "x", false), envelope(7, "a b", None, "x", false)]).await;
        assert!(o.iter().all(|o| kind(o) == Some(FailureKind::Permanent)), "{o:?}");

        // No stream for the subject: unavailable (documented choice), reason names the subject.
        let orphan = unique("orphan");
        let t2 = NatsTransport::connect(NatsConfig {
            url: url.clone(),
            subject_prefix: Some(orphan.clone()),
            ..NatsConfig::default()
        })
        .await
        .unwrap();
        let o = t2.publish(&[envelope(8, "order.paid", None, "x", false)]).await;
        assert_eq!(kind(&o[0]), Some(FailureKind::Unavailable), "{o:?}");
        assert!(reason(&o[0]).contains(&format!("{orphan}.order.paid")), "{}", reason(&o[0]));
        assert!(reason(&o[0]).contains("no JetStream stream"));
        // ... and connect refuses a configuration whose stream is missing or does not cover it.
        let missing = unique("MISSING");
        let e = NatsTransport::connect(NatsConfig {
            stream: Some(missing.clone()),
            ..config(url.clone(), &orphan, "x")
        })
        .await
        .unwrap_err();
        assert!(
            matches!(e, TransportError::Connect { .. }) && e.to_string().contains("does not exist"),
            "{e}"
        );
        let e = NatsTransport::connect(config(url.clone(), &orphan, &stream)).await.unwrap_err();
        assert!(e.to_string().contains("does not capture"), "{e}");
        let e = NatsTransport::connect(NatsConfig {
            url: url.clone(),
            subject: Some(format!("{orphan}.fixed")),
            ..NatsConfig::default()
        })
        .await
        .unwrap_err();
        assert!(e.to_string().contains("no JetStream stream captures"), "{e}");
        // create_stream makes it.
        let t3 = NatsTransport::connect(NatsConfig {
            create_stream: true,
            stream: Some(missing.clone()),
            ..config(url.clone(), &orphan, "x")
        })
        .await
        .unwrap();
        assert_eq!(
            t3.publish(&[envelope(9, "order.paid", None, "x", false)]).await,
            vec![Outcome::Delivered]
        );
        t3.health().await.unwrap();
        js.delete_stream(&missing).await.unwrap();
        assert!(t3.health().await.unwrap_err().contains("does not exist"));

        // Unreachable server: a Connect error with the password redacted.
        assert_unreachable_is_redacted("nats", "nats", |url| {
            NatsTransport::connect(NatsConfig {
                url,
                connect_timeout: Duration::from_millis(2000),
                ..NatsConfig::default()
            })
        })
        .await;

        // Invalid configuration: the key is named, before any connection.
        let e = NatsTransport::connect(NatsConfig { subject: Some("a.*".into()), ..NatsConfig::default() })
            .await
            .unwrap_err();
        assert!(matches!(e, TransportError::Config { key: "subject", .. }), "{e:?}");
        let e = NatsTransport::connect(NatsConfig { timeout: Duration::ZERO, ..NatsConfig::default() })
            .await
            .unwrap_err();
        assert!(matches!(e, TransportError::Config { key: "timeout", .. }), "{e:?}");
        assert!(serde_json::from_str::<NatsConfig>(r#"{"url":"nats://h","bogus":1}"#)
            .unwrap_err()
            .to_string()
            .contains("bogus"));

        js.delete_stream(&stream).await.unwrap();
    })
    .await
    .expect("test timed out");
}

/// Publishes race with connections being cut and restored: whatever the timing, a message
/// reported delivered is in the stream, and every call answers within its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivered_always_means_stored_under_repeated_cuts() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let js = jetstream().await;
        let (stream, prefix) = fresh_stream(&js).await;
        let proxy = Arc::new(TcpProxy::start(&server()).await);
        let t = NatsTransport::connect(NatsConfig {
            timeout: Duration::from_millis(1500),
            ..config(format!("nats://{}", proxy.addr()), &prefix, &stream)
        })
        .await
        .unwrap();
        let delivered = delivered_under_repeated_cuts(&t, proxy, (300, 200)).await;
        let stored: std::collections::HashSet<String> =
            consume(&js, &stream, delivered.len(), Duration::from_secs(10))
                .await
                .into_iter()
                .map(|g| g.headers[header::MESSAGE_ID].clone())
                .collect();
        let missing: Vec<&String> = delivered.difference(&stored).collect();
        assert!(missing.is_empty(), "reported delivered but not stored: {missing:?}");
        js.delete_stream(&stream).await.unwrap();
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_url_are_used_and_never_shown() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        for (auth, good, bad) in [
            (
                vec!["--user", "relay", "--pass", "s3cr%t/pw"],
                "nats://relay:s3cr%25t%2Fpw@127.0.0.1:{port}",
                "nats://relay:wrong-s3cret@127.0.0.1:{port}",
            ),
            (
                vec!["--auth", "t0ken-s3cret"],
                "nats://t0ken-s3cret@127.0.0.1:{port}",
                "nats://127.0.0.1:{port}",
            ),
        ] {
            let server = NatsServer::start(true, &auth)
                .expect("start nats-server (it is on PATH wherever the shared NATS runs)");
            let url = |t: &str| t.replace("{port}", &server.port().to_string());
            let mut cfg = NatsConfig {
                url: url(good),
                subject_prefix: Some("auth".into()),
                stream: Some("OUTBOX_AUTH".into()),
                create_stream: true,
                timeout: Duration::from_secs(5),
                ..NatsConfig::default()
            };
            let t = NatsTransport::connect(cfg.clone()).await.unwrap_or_else(|e| panic!("{auth:?}: {e}"));
            assert_eq!(t.publish(&[envelope(1, "a", None, "ok", false)]).await, vec![Outcome::Delivered]);
            cfg.url = url(bad);
            let Err(err) = NatsTransport::connect(cfg).await else { panic!("wrong credentials accepted") };
            let err = err.to_string();
            assert!(!err.contains("s3cr"), "{err}");
            assert!(err.contains("127.0.0.1"), "the error names the server: {err}");
        }
    })
    .await
    .unwrap();
}
