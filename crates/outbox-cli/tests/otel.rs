//! Traces: `outbox relay` with `[telemetry] otlp_endpoint` exports its spans over OTLP/HTTP to a
//! collector (here one of the test's own that decodes the protobuf the way a real collector
//! does). A row a foreign application inserted with a W3C `traceparent` header is published
//! under an `outbox.publish` span carrying the message's id, topic, key and business key and
//! linked to that trace; the header travels on to the broker; the claim and the settlement
//! have their spans; SIGTERM flushes what is still buffered.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use outbox_testkit::fs::temp_dir;
use outbox_testkit::process::{RelayConfig, RelayProcess};
use prost::Message as _;

const OUTBOX: &str = env!("CARGO_BIN_EXE_outbox");
const REDIS: &str = "redis://127.0.0.1:6379";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN_ID: &str = "00f067aa0ba902b7";

/// Every span received, with its resource's `service.name`.
type Received = Arc<Mutex<Vec<(String, Span)>>>;

/// An OTLP/HTTP traces endpoint on a free port.
async fn collector() -> (u16, Received) {
    let received: Received = Arc::default();
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                let req = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
                let mut out = sink.lock().unwrap();
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|a| a.key == "service.name")
                        .and_then(|a| a.value.as_ref()?.value.as_ref())
                        .map(|v| match v {
                            Value::StringValue(s) => s.clone(),
                            other => format!("{other:?}"),
                        })
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        out.extend(ss.spans.into_iter().map(|s| (service.clone(), s)));
                    }
                }
                (
                    [("content-type", "application/x-protobuf")],
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, received)
}

fn attr(span: &Span, key: &str) -> Option<String> {
    let v = span.attributes.iter().find(|a| a.key == key)?.value.as_ref()?.value.as_ref()?;
    Some(match v {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

fn spans_named(received: &Received, name: &str) -> Vec<(String, Span)> {
    received.lock().unwrap().iter().filter(|(_, s)| s.name == name).cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_exports_linked_spans_over_otlp() {
    let (otlp, received) = collector().await;
    let dir = temp_dir("outbox-otel");
    let store_url = format!("sqlite:{}", dir.join("shop.db").display());
    let stream = format!("outbox-otel-{}", std::process::id());
    let admin = outbox_testkit::net::free_port();
    let cfg = RelayConfig::to_redis_stream(&store_url, REDIS, &stream)
        .admin(admin, "read-token-0123456789", "admin-token-0123456789")
        .section(&format!(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{otlp}/v1/traces\"\nservice_name = \"relay-under-test\""
        ))
        .write(&dir.join("outbox.toml"));
    let mut cmd = Command::new(OUTBOX);
    cmd.args(["relay", "--config", cfg.to_str().unwrap()]).env("OTEL_BSP_SCHEDULE_DELAY", "200");
    let mut relay = RelayProcess::spawn(cmd, &dir.join("relay.log"));
    relay.wait_for_port(admin, Duration::from_secs(60));

    let pool = sqlx::SqlitePool::connect(&store_url).await.unwrap();
    let traceparent = format!("00-{TRACE_ID}-{SPAN_ID}-01");
    let traced: i64 = sqlx::query_scalar(
        "INSERT INTO outbox_message (topic, payload, msg_key, biz_type, biz_key, headers) \
         VALUES ('order.paid', '{}', 'customer-7', 'order', '42', ?1) RETURNING id",
    )
    .bind(format!(r#"{{"traceparent":"{traceparent}"}}"#))
    .fetch_one(&pool)
    .await
    .unwrap();
    let plain: i64 = sqlx::query_scalar(
        "INSERT INTO outbox_message (topic, payload) VALUES ('order.paid', '{}') RETURNING id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();

    // Exported while the relay runs (the batch processor's 200 ms schedule).
    outbox_testkit::eventually("both publish spans at the collector", async || {
        spans_named(&received, "outbox.publish").len() >= 2
    })
    .await;
    // The header went on to the broker with the message.
    let client = redis::Client::open(REDIS).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let entries: redis::streams::StreamRangeReply =
        redis::cmd("XRANGE").arg(&stream).arg("-").arg("+").query_async(&mut conn).await.unwrap();
    let first = &entries.ids[0].map;
    let header: String = redis::from_redis_value(&first["h:traceparent"]).unwrap();
    assert_eq!(header, traceparent, "the consumer can continue the trace");

    let status = relay.terminate(Duration::from_secs(15));
    assert!(status.success(), "exit {status}: {}", relay.log_text());

    let publishes = spans_named(&received, "outbox.publish");
    let find = |id: i64| {
        publishes
            .iter()
            .find(|(_, s)| attr(s, "message_id") == Some(id.to_string()))
            .unwrap_or_else(|| panic!("no publish span of message {id}: {publishes:?}"))
    };
    let (service, span) = find(traced);
    assert_eq!(service, "relay-under-test");
    assert_eq!(span.kind, SpanKind::Producer as i32);
    for (key, want) in [
        ("topic", "order.paid"),
        ("key", "customer-7"),
        ("biz_type", "order"),
        ("biz_key", "42"),
        ("destination", "stream"),
        ("attempt", "1"),
        ("outcome", "delivered"),
    ] {
        assert_eq!(attr(span, key).as_deref(), Some(want), "{key} of {span:?}");
    }
    assert_eq!(span.links.len(), 1, "linked to the enqueue's trace: {span:?}");
    assert_eq!(hex(&span.links[0].trace_id), TRACE_ID);
    assert_eq!(hex(&span.links[0].span_id), SPAN_ID);
    assert_ne!(hex(&span.trace_id), TRACE_ID, "a link, not a parent: the relay's trace is its own");
    let (_, other) = find(plain);
    assert!(other.links.is_empty(), "no traceparent, no link: {other:?}");

    let settles = spans_named(&received, "outbox.settle");
    let settle = settles
        .iter()
        .find(|(_, s)| attr(s, "message_id") == Some(traced.to_string()))
        .unwrap_or_else(|| panic!("no settle span of message {traced}: {settles:?}"));
    assert_eq!(attr(&settle.1, "status").as_deref(), Some("sent"));
    assert_eq!(attr(&settle.1, "biz_key").as_deref(), Some("42"));
    let claims = spans_named(&received, "outbox.claim");
    let claimed: i64 = claims.iter().filter_map(|(_, s)| attr(s, "claimed")?.parse::<i64>().ok()).sum();
    assert!(claimed >= 2, "the claims that took both messages: {claims:?}");

    let _: () = redis::cmd("DEL").arg(&stream).query_async(&mut conn).await.unwrap();
    pool.close().await;
    std::fs::remove_dir_all(dir).ok();
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
