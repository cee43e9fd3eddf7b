//! The RabbitMQ transport against a real RabbitMQ (`OUTBOX_TEST_AMQP_URL`, default
//! `amqp://guest:guest@127.0.0.1:5672/%2f`), consumed by a real lapin consumer.
#![cfg(feature = "rabbitmq")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::{
    BasicConsumeOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use outbox_core::{header, Envelope, FailureKind, NewMessage, Outcome, Status, Transport};
use outbox_relay::Destination;
use outbox_testkit::proxy::TcpProxy;
use outbox_testkit::tls::Pki;
use outbox_transport::rabbitmq::{DeclareConfig, RabbitMqConfig, RabbitMqTransport};
use outbox_transport::TransportError;

const WAIT: Duration = Duration::from_secs(60);

fn amqp_url() -> String {
    env_or("OUTBOX_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
}

/// `host:port` of the broker (for the proxy).
fn amqp_addr() -> String {
    let url = amqp_url();
    let rest = &url[url.find('@').map_or(url.find("://").unwrap() + 3, |i| i + 1)..];
    rest[..rest.find('/').unwrap_or(rest.len())].to_owned()
}

/// `amqp_url()` pointed at another address.
fn amqp_url_via(addr: &str) -> String {
    amqp_url().replace(&amqp_addr(), addr)
}

fn declared(exchange: &str) -> RabbitMqConfig {
    RabbitMqConfig {
        declare: Some(DeclareConfig { kind: "topic".into(), durable: false, ..DeclareConfig::default() }),
        ..RabbitMqConfig::new(amqp_url(), exchange)
    }
}

/// A real consumer: its own connection, an exclusive queue bound to `exchange` with `binding`.
struct Consumer {
    _conn: Connection,
    channel: Channel,
    consumer: lapin::Consumer,
}

impl Consumer {
    async fn bind(exchange: &str, binding: &str) -> Consumer {
        let conn = Connection::connect(&amqp_url(), ConnectionProperties::default()).await.unwrap();
        let channel = conn.create_channel().await.unwrap();
        let queue = unique("outbox-t-q");
        let opts =
            QueueDeclareOptions { exclusive: true, auto_delete: true, ..QueueDeclareOptions::default() };
        channel.queue_declare(&queue, opts, FieldTable::default()).await.unwrap();
        if !exchange.is_empty() {
            channel
                .queue_bind(&queue, exchange, binding, QueueBindOptions::default(), FieldTable::default())
                .await
                .unwrap();
        }
        let opts = BasicConsumeOptions { no_ack: true, ..BasicConsumeOptions::default() };
        let consumer = channel.basic_consume(&queue, "test", opts, FieldTable::default()).await.unwrap();
        Consumer { _conn: conn, channel, consumer }
    }

    fn queue(&self) -> String {
        self.consumer.queue().to_string()
    }

    /// The next `n` deliveries, or fewer if none arrives for `quiet`.
    async fn take(&mut self, n: usize, quiet: Duration) -> Vec<lapin::message::Delivery> {
        let mut out = Vec::new();
        while out.len() < n {
            match tokio::time::timeout(quiet, self.consumer.next()).await {
                Ok(Some(Ok(d))) => out.push(d),
                Ok(Some(Err(e))) => panic!("consumer error: {e}"),
                Ok(None) | Err(_) => break,
            }
        }
        out
    }
}

/// A transport declaring `exchange` (see [`declared`]), and a consumer bound to it with `binding`.
async fn transport_and_consumer(exchange: &str, binding: &str) -> (RabbitMqTransport, Consumer) {
    let t = RabbitMqTransport::connect(declared(exchange)).await.unwrap();
    (t, Consumer::bind(exchange, binding).await)
}

async fn delete_exchange(exchange: &str) {
    if let Ok(conn) = Connection::connect(&amqp_url(), ConnectionProperties::default()).await {
        if let Ok(ch) = conn.create_channel().await {
            let _ = ch.exchange_delete(exchange, ExchangeDeleteOptions::default()).await;
        }
        let _ = conn.close(200, "bye").await;
    }
}

/// Runs `test` within `limit` with an exchange name of its own, and deletes the exchange after.
async fn with_exchange(limit: Duration, test: impl AsyncFnOnce(&str)) {
    within(limit, async {
        let ex = unique("outbox-t-ex");
        test(&ex).await;
        delete_exchange(&ex).await;
    })
    .await;
}

fn header_str(d: &lapin::message::Delivery, name: &str) -> Option<String> {
    let headers = d.properties.headers().as_ref()?;
    match headers.inner().get(name)? {
        AMQPValue::LongString(s) => Some(String::from_utf8(s.as_bytes().to_vec()).unwrap()),
        other => panic!("header {name} is {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_a_batch_with_every_property_and_header() {
    with_exchange(WAIT, async |ex| {
        let (t, mut c) = transport_and_consumer(ex, "#").await;

        let m1 = full_message(101, "order.paid", r#"{"order":42,"total":"9.90"}"#, "订单-42", "checkout");
        let mut m2 = outbox_message(102, "order.cancelled", "plain text, not JSON");
        m2.tag = Some("urgent".into());
        let m3 = outbox_message(103, "audit.x", "[1,2,3]");
        let batch = vec![Envelope::new(&m1, 1), Envelope::new(&m2, 3), Envelope::new(&m3, 1)];

        let outcomes = t.publish(&batch).await;
        assert_eq!(outcomes, vec![Outcome::Delivered; 3]);

        let got = c.take(3, Duration::from_secs(10)).await;
        assert_eq!(got.len(), 3, "every confirmed message is in the queue");
        for (d, e) in got.iter().zip(&batch) {
            assert_eq!(String::from_utf8(d.data.clone()).unwrap(), e.payload);
            assert_eq!(d.routing_key.as_str(), e.topic, "the topic is the routing key");
            assert_eq!(d.exchange.as_str(), ex);
            let p = &d.properties;
            assert_eq!(p.message_id().as_ref().unwrap().as_str(), e.id.to_string());
            assert_eq!(*p.delivery_mode(), Some(2), "persistent");
            assert_eq!(p.app_id().as_ref().unwrap().as_str(), "outbox");
            assert_eq!(*p.timestamp(), Some(e.created_at.timestamp() as u64));
            let table = p.headers().as_ref().unwrap().inner();
            assert_eq!(table.len(), e.headers.len(), "exactly the envelope's headers: {table:?}");
            for (k, v) in &e.headers {
                assert_eq!(header_str(d, k).as_deref(), Some(v.as_str()), "header {k}");
            }
            assert_eq!(header_str(d, header::MESSAGE_ID), Some(e.id.to_string()));
            assert_eq!(header_str(d, header::TOPIC).as_deref(), Some(e.topic.as_str()));
            assert_eq!(header_str(d, header::ATTEMPT), Some(e.attempt.to_string()));
            assert_eq!(header_str(d, header::CREATED_AT), Some(e.created_at.to_rfc3339()));
        }
        let (d1, d2, d3) = (&got[0], &got[1], &got[2]);
        assert_eq!(d1.properties.content_type().as_ref().unwrap().as_str(), "application/json");
        assert_eq!(d2.properties.content_type().as_ref().unwrap().as_str(), "text/plain; charset=utf-8");
        assert_eq!(d3.properties.content_type().as_ref().unwrap().as_str(), "application/json");
        assert_eq!(header_str(d1, header::BIZ_TYPE).as_deref(), Some("order"));
        assert_eq!(header_str(d1, header::BIZ_KEY).as_deref(), Some("订单-42"));
        assert_eq!(header_str(d1, header::KEY).as_deref(), Some("order-42"));
        assert_eq!(header_str(d1, header::TRACEPARENT).as_deref(), Some(TRACEPARENT));
        assert_eq!(header_str(d1, "source").as_deref(), Some("checkout"));
        assert_eq!(header_str(d2, header::ATTEMPT).as_deref(), Some("3"));
        assert_eq!(header_str(d2, header::BIZ_KEY), None);
        assert_eq!(d2.properties.kind().as_ref().unwrap().as_str(), "urgent", "tag -> type");
        assert!(d1.properties.kind().is_none());

        assert!(t.health().await.is_ok());
        assert!(c.take(1, Duration::from_millis(300)).await.is_empty(), "nothing else was published");
        let _ = c.channel.close(200, "bye").await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_routing_key_content_type_and_the_default_exchange() {
    within(WAIT, async {
        // Default exchange: the routing key is the queue's name.
        let mut c = Consumer::bind("", "").await;
        let cfg = RabbitMqConfig {
            routing_key: Some(c.queue()),
            content_type: Some("application/vnd.acme+json".into()),
            ..RabbitMqConfig::new(amqp_url(), "")
        };
        let t = RabbitMqTransport::connect(cfg).await.unwrap();
        let batch = vec![
            Envelope::new(&outbox_message(1, "any.topic", "a"), 1),
            Envelope::new(&outbox_message(2, "other", "b"), 1),
        ];
        assert_eq!(t.publish(&batch).await, vec![Outcome::Delivered; 2]);
        let got = c.take(2, Duration::from_secs(10)).await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].data, b"a");
        assert_eq!(got[1].data, b"b");
        assert_eq!(got[0].routing_key.as_str(), c.queue());
        assert_eq!(got[1].properties.content_type().as_ref().unwrap().as_str(), "application/vnd.acme+json");
        assert_eq!(header_str(&got[1], header::TOPIC).as_deref(), Some("other"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_and_oversized_messages_fail_permanently_alone() {
    with_exchange(WAIT, async |ex| {
        let t = RabbitMqTransport::connect(RabbitMqConfig { max_payload_bytes: 1024, ..declared(ex) })
            .await
            .unwrap();
        let mut c = Consumer::bind(ex, "bound.#").await;
        let big = "x".repeat(2048);
        let batch = vec![
            Envelope::new(&outbox_message(1, "bound.a", "one"), 1),
            Envelope::new(&outbox_message(2, "unbound.x", "two"), 1),
            Envelope::new(&outbox_message(3, "bound.b", &big), 1),
            Envelope::new(&outbox_message(4, "bound.c", "four"), 1),
            Envelope::new(&outbox_message(5, "unbound.y", "five"), 1),
        ];
        let out = t.publish(&batch).await;
        assert_eq!(out.len(), 5);
        assert_eq!(out[0], Outcome::Delivered);
        let (kind, reason, _) = failure(&out[1]);
        assert_eq!(kind, FailureKind::Permanent);
        assert!(reason.contains("no queue bound for routing key \"unbound.x\""), "{reason}");
        assert!(reason.contains(ex), "{reason}");
        let (kind, reason, _) = failure(&out[2]);
        assert_eq!(kind, FailureKind::Permanent);
        assert!(reason.contains("2048 bytes") && reason.contains("max_payload_bytes"), "{reason}");
        assert_eq!(out[3], Outcome::Delivered);
        let (kind, reason, _) = failure(&out[4]);
        assert_eq!(kind, FailureKind::Permanent);
        assert!(reason.contains("\"unbound.y\""), "{reason}");
        assert_eq!(t.max_payload_bytes(), Some(1024));

        let got = c.take(3, Duration::from_secs(2)).await;
        let payloads: Vec<&[u8]> = got.iter().map(|d| d.data.as_slice()).collect();
        assert_eq!(payloads, vec![b"one".as_slice(), b"four".as_slice()], "the oversized one was never sent");

        // The channel is still good after returns.
        assert_eq!(
            t.publish(&[Envelope::new(&outbox_message(6, "bound.d", "six"), 1)]).await,
            vec![Outcome::Delivered]
        );
        assert_eq!(c.take(1, Duration::from_secs(5)).await.len(), 1);
    })
    .await;
}

/// Issue 14, finding 4 on RabbitMQ: what the broker would refuse by closing the channel (a
/// `CC` header that is not an array: 406) or the whole connection (a content header frame over
/// `frame_max`: 501, which made the destination look down for good), and what AMQP cannot
/// encode (short strings over 255 bytes), fails alone, permanently, naming the problem, before
/// it is sent; the good messages are confirmed and consumed; the connection keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_broker_would_refuse_fails_alone_and_the_connection_survives() {
    with_exchange(WAIT, async |ex| {
        let (t, mut c) = transport_and_consumer(ex, "#").await;
        let good = |i: i64| Envelope::new(&outbox_message(i, "order.paid", &format!("good {i}")), 1);
        let with_headers = |i: i64, headers: Vec<(String, String)>| {
            let mut m = outbox_message(i, "order.paid", "bad");
            m.headers.extend(headers);
            Envelope::new(&m, 1)
        };
        // 64 headers of 4 KiB each: valid for the outbox, 256 KiB in one AMQP frame.
        let many: Vec<(String, String)> = (0..64).map(|i| (format!("h{i}"), "v".repeat(4096))).collect();
        let batch = vec![
            good(1),
            with_headers(101, vec![("CC".into(), "other.key".into())]),
            good(2),
            Envelope::new(&outbox_message(102, &"k".repeat(300), "bad"), 1),
            good(3),
            with_headers(103, many),
            good(4),
            with_headers(104, vec![("n".repeat(300), "v".into())]),
            good(5),
            with_headers(105, vec![("BCC".into(), "x".into())]),
        ];
        let out = t.publish(&batch).await;
        assert_eq!(out.len(), batch.len());
        for i in [0, 2, 4, 6, 8] {
            assert_eq!(out[i], Outcome::Delivered, "good message at {i}: {out:?}");
        }
        assert_refused(&out[1], "header name \"CC\" is reserved");
        assert_refused(&out[3], "routing key \"kkk");
        assert_refused(&out[3], "300 bytes; AMQP allows at most 255");
        assert_refused(&out[5], "frame_max of 131072 bytes");
        assert_refused(&out[7], "header name \"nnn");
        assert_refused(&out[9], "header name \"BCC\" is reserved");

        let got = c.take(5, Duration::from_secs(10)).await;
        let payloads: Vec<String> = got.iter().map(|d| String::from_utf8(d.data.clone()).unwrap()).collect();
        assert_eq!(payloads, (1..=5).map(|i| format!("good {i}")).collect::<Vec<_>>());

        // Same transport, same connection: still publishing.
        assert_eq!(t.publish(&[good(6)]).await, vec![Outcome::Delivered]);
        assert_eq!(c.take(1, Duration::from_secs(10)).await.len(), 1);
        assert!(c.take(1, Duration::from_millis(300)).await.is_empty(), "nothing refused was published");
        t.health().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_publish_does_not_confuse_the_next_one() {
    with_exchange(WAIT, async |ex| {
        let (t, mut c) = transport_and_consumer(ex, "bound.#").await;
        // The relay's publish timeout drops a publish midway (confirms and returns outstanding).
        let first: Vec<Envelope> = (0..200)
            .map(|i| {
                Envelope::new(&outbox_message(i, if i % 2 == 0 { "bound.a" } else { "unbound.a" }, "old"), 1)
            })
            .collect();
        let cancelled = tokio::time::timeout(Duration::from_millis(2), t.publish(&first)).await;
        assert!(cancelled.is_err(), "the publish was cancelled midway");

        let batch = vec![
            Envelope::new(&outbox_message(1000, "bound.b", "new"), 1),
            Envelope::new(&outbox_message(1001, "unbound.b", "new"), 1),
            Envelope::new(&outbox_message(1002, "bound.c", "new"), 1),
        ];
        let out = t.publish(&batch).await;
        assert_eq!(out[0], Outcome::Delivered);
        assert_eq!(failure(&out[1]).0, FailureKind::Permanent, "{:?}", out[1]);
        assert_eq!(out[2], Outcome::Delivered);
        let fresh: Vec<_> =
            c.take(200, Duration::from_secs(2)).await.into_iter().filter(|d| d.data == b"new").collect();
        assert_eq!(fresh.len(), 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_exchange_is_unavailable_and_the_channel_recovers() {
    with_exchange(WAIT, async |ex| {
        let t = RabbitMqTransport::connect(declared(ex)).await.unwrap();
        delete_exchange(ex).await;
        let batch = vec![
            Envelope::new(&outbox_message(1, "a", "1"), 1),
            Envelope::new(&outbox_message(2, "a", "2"), 1),
        ];
        let out = t.publish(&batch).await;
        for o in &out {
            let (kind, reason, _) = failure(o);
            assert_eq!(kind, FailureKind::Unavailable, "{reason}");
        }
        assert!(out.iter().any(|o| failure(o).1.contains("404")), "{out:?}");

        // Someone re-creates the exchange: the next publish reopens the channel and delivers.
        let conn = Connection::connect(&amqp_url(), ConnectionProperties::default()).await.unwrap();
        let ch = conn.create_channel().await.unwrap();
        ch.exchange_declare(
            ex,
            ExchangeKind::Topic,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        let mut c = Consumer::bind(ex, "#").await;
        assert_eq!(t.publish(&batch).await, vec![Outcome::Delivered; 2]);
        assert_eq!(c.take(2, Duration::from_secs(5)).await.len(), 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_failures_are_clear_and_redacted() {
    within(WAIT, async {
        // Nobody listens.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("amqp://guest:s3cr3t-pw@127.0.0.1:{port}/%2f");
        match RabbitMqTransport::connect(RabbitMqConfig::new(url, "")).await {
            Err(e @ TransportError::Connect { .. }) => {
                let text = e.to_string();
                assert!(!text.contains("s3cr3t-pw"), "{text}");
                assert!(text.contains(&format!("amqp://guest:***@127.0.0.1:{port}/%2f")), "{text}");
            }
            other => panic!("expected a connect error, got {other:?}"),
        }

        // A server that accepts but never speaks AMQP: bounded by connect_timeout.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("amqp://guest:s3cr3t-pw@{}/%2f", silent.local_addr().unwrap());
        let started = Instant::now();
        let cfg =
            RabbitMqConfig { connect_timeout: Duration::from_millis(500), ..RabbitMqConfig::new(url, "") };
        match RabbitMqTransport::connect(cfg).await {
            Err(TransportError::Connect { reason, address, .. }) => {
                assert!(reason.contains("timed out"), "{reason}");
                assert!(!address.contains("s3cr3t-pw"));
            }
            other => panic!("expected a connect error, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(silent);

        // Wrong password.
        let url = format!("amqp://nobody:wr0ng-pw@{}/%2f", amqp_addr());
        match RabbitMqTransport::connect(RabbitMqConfig::new(url, "")).await {
            Err(e @ TransportError::Connect { .. }) => assert!(!e.to_string().contains("wr0ng-pw"), "{e}"),
            other => panic!("expected a connect error, got {other:?}"),
        }

        // An exchange that does not exist (and is not to be declared).
        let missing = unique("outbox-t-missing");
        match RabbitMqTransport::connect(RabbitMqConfig::new(amqp_url(), &missing)).await {
            Err(TransportError::Connect { reason, .. }) => {
                assert!(reason.contains(&missing) && reason.contains("declare"), "{reason}")
            }
            other => panic!("expected a connect error, got {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn invalid_configuration_names_the_key() {
    let invalid = vec![
        (RabbitMqConfig::new("http://guest:guest@127.0.0.1:5672", "x"), "url"),
        (
            RabbitMqConfig { max_payload_bytes: 0, ..RabbitMqConfig::new(amqp_url(), "x") },
            "max_payload_bytes",
        ),
        (
            RabbitMqConfig { connect_timeout: Duration::ZERO, ..RabbitMqConfig::new(amqp_url(), "x") },
            "connect_timeout",
        ),
        (RabbitMqConfig::new(amqp_url(), "e".repeat(300)), "exchange"),
        (
            RabbitMqConfig {
                declare: Some(DeclareConfig::default()),
                ..RabbitMqConfig::new(amqp_url(), "amq.topic")
            },
            "declare",
        ),
    ];
    assert_invalid_named("rabbitmq", RabbitMqTransport::connect, invalid).await;
    assert_unknown_key_refused::<RabbitMqConfig>(
        r#"{"url":"amqp://h","exchange":"x","routingkey":"y"}"#,
        "routingkey",
    );
}

// ---------------------------------------------------------------------------------------------
// Through the relay.

/// Deliveries seen by a background consumer task: message id -> payloads in arrival order, and
/// the arrival order of ids per key.
#[derive(Default)]
struct Seen {
    by_id: HashMap<String, Vec<String>>,
    order_by_key: HashMap<String, Vec<i64>>,
}

fn spawn_collector(mut c: Consumer) -> (Arc<std::sync::Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
    let s2 = seen.clone();
    let handle = tokio::spawn(async move {
        while let Some(Ok(d)) = c.consumer.next().await {
            let id = d.properties.message_id().as_ref().map(|s| s.to_string()).unwrap_or_default();
            let payload = String::from_utf8_lossy(&d.data).into_owned();
            let mut s = s2.lock().unwrap();
            if let Some(k) = header_str(&d, header::KEY) {
                s.order_by_key.entry(k).or_default().push(id.parse().unwrap());
            }
            s.by_id.entry(id).or_default().push(payload);
        }
    });
    (seen, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_to_end_through_the_relay_exactly_once_without_faults() {
    with_exchange(Duration::from_secs(120), async |ex| {
        let transport = Arc::new(RabbitMqTransport::connect(declared(ex)).await.unwrap());
        let (seen, collector) = spawn_collector(Consumer::bind(ex, "#").await);
        let destination = Destination::new("rabbit", transport.clone()).retry(fast_retry(5));
        let ids = with_relay(sqlite_outbox().await, destination, async |outbox| {
            let ids: Vec<_> = commit_orders(outbox).await.into_keys().collect();
            assert_eq!(ids.len(), 200);
            eventually("every committed message is consumed", || {
                let n = seen.lock().unwrap().by_id.len();
                async move { n >= 200 }
            })
            .await;
            wait_all_sent(outbox, &ids, WAIT).await;
            // A grace period, not a wait for an event: a duplicate would arrive now.
            tokio::time::sleep(Duration::from_millis(500)).await;
            ids
        })
        .await;

        {
            let s = seen.lock().unwrap();
            assert_eq!(s.by_id.len(), 200, "only the committed messages");
            for id in &ids {
                let got =
                    s.by_id.get(&id.to_string()).unwrap_or_else(|| panic!("message {id} never arrived"));
                assert_eq!(got.len(), 1, "message {id} arrived {} times without any fault", got.len());
            }
            assert!(
                s.by_id.values().flatten().all(|p| p != "phantom"),
                "a rolled-back message was published"
            );
            for (key, order) in &s.order_by_key {
                assert_key_order(order.iter().map(|id| (key.as_str(), *id)));
            }
        }
        collector.abort();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_outage_keeps_messages_pending_then_delivers_everything() {
    with_exchange(Duration::from_secs(150), async |ex| {
        let proxy = TcpProxy::start(&amqp_addr()).await;
        let cfg = RabbitMqConfig {
            connect_timeout: Duration::from_secs(2),
            ..RabbitMqConfig { url: amqp_url_via(&proxy.addr().to_string()), ..declared(ex) }
        };
        let transport = Arc::new(RabbitMqTransport::connect(cfg).await.unwrap());
        // The consumer talks to the broker directly: only the relay's link is cut.
        let (seen, collector) = spawn_collector(Consumer::bind(ex, "#").await);

        // Few attempts: if the outage cost attempts, messages would end `failed`.
        let destination =
            Destination::new("rabbit", transport.clone()).retry(fast_retry(3)).breaker(fast_breaker());
        with_relay(sqlite_outbox().await, destination, async |outbox| {
            let enqueue = |range: std::ops::Range<u32>| {
                let outbox = outbox.clone();
                async move {
                    let mut ids = Vec::new();
                    for n in range {
                        let e = outbox
                            .enqueue(&NewMessage::new("evt", format!("m{n}")).key(format!("k{}", n % 5)))
                            .await;
                        ids.push(e.unwrap().id);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    ids
                }
            };

            let mut ids = enqueue(0..40).await;
            // Cut while the relay is busy with a stream of messages: once the first of the
            // stream has arrived.
            let stream = tokio::spawn(enqueue(40..120));
            eventually("the relay publishes the stream", || {
                let n = seen.lock().unwrap().by_id.len();
                async move { n > 40 }
            })
            .await;
            proxy.cut();
            ids.extend(stream.await.unwrap());
            let during = enqueue(120..160).await;
            ids.extend(during.iter().copied());

            // Down for a while (an observation window, not a wait for an event): nothing fails,
            // messages enqueued during the outage stay pending.
            tokio::time::sleep(Duration::from_secs(3)).await;
            for id in &ids {
                let m = outbox.get(*id).await.unwrap().unwrap();
                assert_ne!(
                    m.status,
                    Status::Failed,
                    "message {id} failed during an outage: {:?}",
                    m.last_error
                );
            }
            assert_outage_costs_no_attempt(outbox, &during).await;
            let arrived_during = seen.lock().unwrap().by_id.len();
            assert!(arrived_during < ids.len(), "the outage did cut the relay off");

            proxy.restore();
            eventually("everything arrives after the broker is back", || {
                let s = seen.lock().unwrap();
                let all = ids.iter().all(|id| s.by_id.contains_key(&id.to_string()));
                async move { all }
            })
            .await;
            wait_all_sent(outbox, &ids, WAIT).await;
        })
        .await;
        // Redeliveries (at-least-once) may repeat an id, never go back past an unsent one.
        for (key, order) in &seen.lock().unwrap().order_by_key {
            assert_key_order(order.iter().map(|id| (key.as_str(), *id)));
        }
        collector.abort();
    })
    .await;
}

// --- TLS (a RabbitMQ node of the test's own with an AMQPS listener only) ---------------------

/// `amqps://` to a TLS node on `host` (the node's certificate is valid for `localhost` only).
fn amqps_url(host: &str, port: u16) -> String {
    format!("amqps://guest:guest@{host}:{port}/%2f")
}

fn over_tls(
    url: String,
    exchange: &str,
    ca: Option<String>,
    client: Option<(String, String)>,
) -> RabbitMqConfig {
    let (cert, key) = client.unzip();
    RabbitMqConfig {
        tls_ca_file: ca,
        tls_cert_file: cert,
        tls_key_file: key,
        declare: Some(DeclareConfig { kind: "topic".into(), durable: false, ..DeclareConfig::default() }),
        ..RabbitMqConfig::new(url, exchange)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqps_with_the_test_ca_delivers_and_server_certificate_problems_are_explained() {
    within(Duration::from_secs(180), async {
        let pki = Pki::new();
        let node = outbox_testkit::tls::rabbitmq(&pki, false);
        let url = amqps_url("localhost", node.port());
        let ca = Some(pki.path("ca.pem"));
        let ex = unique("outbox-t-tls");

        // (a) With the test CA: connect, publish, and a consumer (lapin's own TLS, given the CA
        // as PEM) really gets the message.
        let t = RabbitMqTransport::connect(over_tls(url.clone(), &ex, ca.clone(), None)).await.unwrap();
        // lapin's own TLS (the consumer's) takes rustls's process default: the build enables
        // two providers, so name one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let pem = std::fs::read_to_string(pki.path("ca.pem")).unwrap();
        let tls = lapin::tcp::OwnedTLSConfig { identity: None, cert_chain: Some(pem) };
        let conn = Connection::connect_with_config(&url, ConnectionProperties::default(), tls).await.unwrap();
        let channel = conn.create_channel().await.unwrap();
        let queue = unique("outbox-t-tls-q");
        let opts =
            QueueDeclareOptions { exclusive: true, auto_delete: true, ..QueueDeclareOptions::default() };
        channel.queue_declare(&queue, opts, FieldTable::default()).await.unwrap();
        channel
            .queue_bind(&queue, &ex, "#", QueueBindOptions::default(), FieldTable::default())
            .await
            .unwrap();
        let opts = BasicConsumeOptions { no_ack: true, ..BasicConsumeOptions::default() };
        let mut consumer = channel.basic_consume(&queue, "tls", opts, FieldTable::default()).await.unwrap();
        let batch = [Envelope::new(&outbox_message(11, "tls.order", r#"{"over":"tls"}"#), 1)];
        assert_eq!(t.publish(&batch).await, vec![Outcome::Delivered]);
        let got = consumer.next().await.expect("a delivery").unwrap();
        assert_eq!(got.data, br#"{"over":"tls"}"#);
        assert_eq!(got.routing_key.as_str(), "tls.order");
        assert_eq!(header_str(&got, header::MESSAGE_ID).as_deref(), Some("11"));
        assert!(t.health().await.is_ok());

        // (c) No CA (the system's store does not know the test CA), or the wrong one.
        for ca in [None, Some(pki.path("other-ca.pem"))] {
            let text = connect_refusal(over_tls(url.clone(), &ex, ca, None)).await;
            assert!(
                text.starts_with(&format!(
                    "cannot connect rabbitmq to amqps://guest:***@localhost:{}",
                    node.port()
                )),
                "{text}"
            );
            assert!(text.contains("not signed by a CA this client trusts"), "{text}");
        }

        // (d) The certificate is for `localhost`, the URL says 127.0.0.1.
        let text =
            connect_refusal(over_tls(amqps_url("127.0.0.1", node.port()), &ex, ca.clone(), None)).await;
        assert!(text.contains("not valid for the host name"), "{text}");
        // A plain amqp:// client on the TLS port.
        let plain = RabbitMqConfig {
            connect_timeout: Duration::from_secs(3),
            ..RabbitMqConfig::new(format!("amqp://guest:guest@localhost:{}/%2f", node.port()), "")
        };
        let text = connect_refusal(plain).await;
        assert!(!text.contains("guest:guest"), "{text}");
        drop(conn);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqps_client_certificates_are_sent_and_refusals_explained() {
    within(Duration::from_secs(180), async {
        let pki = Pki::new();
        let node = outbox_testkit::tls::rabbitmq(&pki, true);
        let url = amqps_url("localhost", node.port());
        let ca = Some(pki.path("ca.pem"));
        let pair = |name: &str| Some((pki.path(&format!("{name}.pem")), pki.path(&format!("{name}.key"))));
        let ex = unique("outbox-t-mtls");

        // (b) Accepted with the client certificate the test CA signed: a message routed to a
        // bound queue is confirmed (published mandatory, so an unrouted one would come back).
        let mut cfg = over_tls(url.clone(), &ex, ca.clone(), pair("client"));
        if let Some(d) = cfg.declare.as_mut() {
            d.queue = Some(unique("outbox-t-mtls-q"));
        }
        let t = RabbitMqTransport::connect(cfg).await.unwrap();
        let batch = [Envelope::new(&outbox_message(12, "mtls", "x"), 1)];
        assert_eq!(t.publish(&batch).await, vec![Outcome::Delivered]);

        // Refused without one, and with one another CA signed.
        let text = connect_refusal(over_tls(url.clone(), &ex, ca.clone(), None)).await;
        assert!(text.starts_with("cannot connect rabbitmq to amqps://guest:***@localhost:"), "{text}");
        assert!(text.contains("requires a client certificate and none was given"), "{text}");
        let text = connect_refusal(over_tls(url.clone(), &ex, ca, pair("stranger"))).await;
        assert!(text.contains("refused this client's certificate"), "{text}");
    })
    .await;
}

#[tokio::test]
async fn tls_settings_need_amqps_and_readable_files() {
    let config = |url: String, _: Option<String>| RabbitMqConfig::new(url, "x");
    let plain = ("amqp://guest:guest@localhost:1/%2f", "needs an amqps:// URL");
    assert_unusable_tls_files_refused(config, "amqps://guest:guest@localhost:1/%2f", Some(plain)).await;
}
