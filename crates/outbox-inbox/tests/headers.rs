//! The header helpers against real messages: NATS (127.0.0.1:4222), Redis Streams written by the
//! real Redis transport (127.0.0.1:6379), RabbitMQ (127.0.0.1:5672), and webhook requests signed
//! as the HTTP transport signs them (tampered, stale and unsigned requests rejected).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use outbox_core::{header, Envelope, MessageId, Transport};
use outbox_inbox::HeaderError;

fn addr(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.into())
}

fn unique(prefix: &str) -> String {
    format!("{prefix}.{}.{:x}", std::process::id(), rand::random::<u32>())
}

fn envelope(id: i64, topic: &str) -> Envelope {
    let created_at = "2024-05-01T10:00:00.123Z".parse().unwrap();
    let mut headers = BTreeMap::new();
    headers.insert(header::MESSAGE_ID.to_owned(), id.to_string());
    headers.insert(header::TOPIC.to_owned(), topic.to_owned());
    headers.insert(header::ATTEMPT.to_owned(), "2".to_owned());
    headers.insert("tenant".to_owned(), "acme corp é%".to_owned());
    Envelope {
        id: MessageId(id),
        topic: topic.into(),
        key: None,
        tag: None,
        payload: r#"{"order":42}"#.into(),
        headers,
        attempt: 2,
        created_at,
    }
}

#[tokio::test]
async fn redis_stream_entries_written_by_the_transport() {
    use outbox_transport::redis::{RedisConfig, RedisTransport};
    use redis::streams::StreamRangeReply;

    let url = format!("redis://{}", addr("OUTBOX_TEST_REDIS_ADDR", "127.0.0.1:6379"));
    let stream = unique("inbox-test");
    let transport = RedisTransport::connect(RedisConfig {
        url: url.clone(),
        stream: stream.clone(),
        timeout: Duration::from_secs(3),
        ..RedisConfig::default()
    })
    .await
    .unwrap();
    let outcomes = transport.publish(&[envelope(42, "order.paid"), envelope(42, "order.paid")]).await;
    assert_eq!(outcomes.len(), 2);

    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let reply: StreamRangeReply =
        redis::cmd("XRANGE").arg(&stream).arg("-").arg("+").query_async(&mut conn).await.unwrap();
    assert_eq!(reply.ids.len(), 2, "the relay published twice (at least once)");
    for entry in &reply.ids {
        let m = outbox_inbox::from_redis_stream(entry).unwrap();
        assert_eq!(m.id, "42");
        assert_eq!(m.topic(), Some("order.paid"));
        assert_eq!(m.header("tenant"), Some("acme corp é%"));
        assert_eq!(m.payload_str().unwrap(), r#"{"order":42}"#);
    }
    let _: () = redis::cmd("DEL").arg(&stream).query_async(&mut conn).await.unwrap();

    // An entry that was not written by the relay.
    let foreign = redis::streams::StreamId {
        id: "1-0".into(),
        map: [("payload".to_owned(), redis::Value::BulkString(b"x".to_vec()))].into(),
    };
    assert!(matches!(outbox_inbox::from_redis_stream(&foreign), Err(HeaderError::MissingId(_))));
}

#[tokio::test]
async fn nats_messages_with_outbox_headers() {
    let client = async_nats::connect(addr("OUTBOX_TEST_NATS_ADDR", "127.0.0.1:4222")).await.unwrap();
    let subject = unique("inbox.test");
    let mut sub = client.subscribe(subject.clone()).await.unwrap();
    client.flush().await.unwrap();

    // As the NATS transport publishes: every envelope header plus Nats-Msg-Id.
    let mut headers = async_nats::HeaderMap::new();
    for (k, v) in &envelope(7, "order.paid").headers {
        headers.insert(k.as_str(), v.as_str());
    }
    headers.insert("Nats-Msg-Id", "7");
    client.publish_with_headers(subject.clone(), headers, "{\"order\":7}".into()).await.unwrap();
    // Only Nats-Msg-Id (e.g. a foreign publisher using JetStream dedupe).
    let mut only_nats_id = async_nats::HeaderMap::new();
    only_nats_id.insert("Nats-Msg-Id", "shop:8");
    client.publish_with_headers(subject.clone(), only_nats_id, "b".into()).await.unwrap();
    // No id at all.
    client.publish(subject.clone(), "c".into()).await.unwrap();
    client.flush().await.unwrap();

    use futures::StreamExt;
    let first = tokio::time::timeout(Duration::from_secs(5), sub.next()).await.unwrap().unwrap();
    let m = outbox_inbox::from_nats(&first).unwrap();
    assert_eq!(m.id, "7");
    assert_eq!(m.topic(), Some("order.paid"));
    assert_eq!(m.header(header::ATTEMPT), Some("2"));
    assert_eq!(m.payload, b"{\"order\":7}");

    let second = tokio::time::timeout(Duration::from_secs(5), sub.next()).await.unwrap().unwrap();
    assert_eq!(outbox_inbox::from_nats(&second).unwrap().id, "shop:8");
    let third = tokio::time::timeout(Duration::from_secs(5), sub.next()).await.unwrap().unwrap();
    assert!(matches!(outbox_inbox::from_nats(&third), Err(HeaderError::MissingId("nats"))));
}

#[tokio::test]
async fn amqp_deliveries_with_message_id_and_headers() {
    use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
    use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
    use lapin::{BasicProperties, Connection, ConnectionProperties};

    let url = std::env::var("OUTBOX_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let conn = Connection::connect(&url, ConnectionProperties::default()).await.unwrap();
    let channel = conn.create_channel().await.unwrap();
    let queue = unique("inbox-test");
    channel
        .queue_declare(
            &queue,
            QueueDeclareOptions { exclusive: true, auto_delete: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut table = FieldTable::default();
    for (k, v) in &envelope(9, "order.paid").headers {
        table.insert(ShortString::from(k.clone()), AMQPValue::LongString(LongString::from(v.clone())));
    }
    let props = BasicProperties::default().with_message_id(ShortString::from("9")).with_headers(table);
    channel
        .basic_publish("", &queue, BasicPublishOptions::default(), b"{\"order\":9}", props)
        .await
        .unwrap()
        .await
        .unwrap();
    channel
        .basic_publish("", &queue, BasicPublishOptions::default(), b"raw", BasicProperties::default())
        .await
        .unwrap()
        .await
        .unwrap();

    let mut got = Vec::new();
    for _ in 0..50 {
        if let Some(msg) = channel.basic_get(&queue, BasicGetOptions { no_ack: true }).await.unwrap() {
            got.push(msg.delivery);
            if got.len() == 2 {
                break;
            }
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert_eq!(got.len(), 2);
    let m = outbox_inbox::from_amqp(&got[0]).unwrap();
    assert_eq!(m.id, "9");
    assert_eq!(m.header("tenant"), Some("acme corp é%"));
    assert_eq!(m.topic(), Some("order.paid"));
    assert_eq!(m.payload, b"{\"order\":9}");
    assert!(matches!(outbox_inbox::from_amqp(&got[1]), Err(HeaderError::MissingId("amqp"))));
    conn.close(0, "done").await.ok();
}

mod http {
    use outbox_transport::http::{encode_header_value, http_header_name, sign};

    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef-secret";
    const NOW: i64 = 1_700_000_100;

    /// The request headers as the HTTP transport sends them, lower-cased as servers see them.
    fn request(body: &[u8], ts: i64) -> Vec<(String, String)> {
        let mut out = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("outbox-timestamp".to_owned(), ts.to_string()),
            ("outbox-signature".to_owned(), sign(SECRET, ts, body)),
        ];
        for (k, v) in &envelope(42, "order.paid").headers {
            out.push((http_header_name(k).to_ascii_lowercase(), encode_header_value(v)));
        }
        out
    }

    #[test]
    fn a_signed_request_reads_back_its_id_and_headers() {
        let body = br#"{"order":42}"#;
        let headers = request(body, NOW - 10);
        let m = outbox_inbox::from_http(headers.iter().map(|(k, v)| (k, v)), body, SECRET, NOW, 300).unwrap();
        assert_eq!(m.id, "42");
        assert_eq!(m.topic(), Some("order.paid"));
        assert_eq!(m.header("tenant"), Some("acme corp é%"), "custom header, percent-decoded");
        assert_eq!(m.header("content-type"), None);
        assert_eq!(m.payload, body);
    }

    #[test]
    fn tampered_stale_and_unsigned_requests_are_rejected() {
        let body = br#"{"order":42}"#;
        let headers = request(body, NOW);
        let err = outbox_inbox::from_http(headers.clone(), br#"{"order":43}"#, SECRET, NOW, 300).unwrap_err();
        assert!(matches!(err, HeaderError::BadSignature(_)), "{err}");
        assert!(err.to_string().contains("does not match"), "{err}");
        let err =
            outbox_inbox::from_http(headers.clone(), body, b"another-secret-of-16", NOW, 300).unwrap_err();
        assert!(matches!(err, HeaderError::BadSignature(_)), "{err}");
        let err = outbox_inbox::from_http(request(body, NOW - 1000), body, SECRET, NOW, 300).unwrap_err();
        assert!(matches!(err, HeaderError::BadSignature(_)) && err.to_string().contains("old"), "{err}");
        let unsigned: Vec<_> = headers.iter().filter(|(k, _)| k != "outbox-signature").cloned().collect();
        let err = outbox_inbox::from_http(unsigned, body, SECRET, NOW, 300).unwrap_err();
        assert!(matches!(err, HeaderError::Unsigned("outbox-signature")), "{err}");
        // Signed but without a message id.
        let no_id: Vec<_> = headers.iter().filter(|(k, _)| k != "outbox-message-id").cloned().collect();
        assert!(matches!(
            outbox_inbox::from_http(no_id, body, SECRET, NOW, 300),
            Err(HeaderError::MissingId("http"))
        ));
    }
}
