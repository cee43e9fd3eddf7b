//! The Redis Streams transport against the real server on 127.0.0.1:6379 (override with
//! `OUTBOX_TEST_REDIS_ADDR`). Every test uses its own stream keys, so the tests can run
//! concurrently with each other and with other suites on the same server.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{header, FailureKind, Outcome, Transport};
use outbox_testkit::proxy::TcpProxy;
use outbox_testkit::tls::{self, Pki};
use outbox_transport::redis::{RedisConfig, RedisTransport};
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
    read_from(&mut redis_conn().await, key).await
}

/// XRANGE of the whole stream on `con`'s server, in stream order.
async fn read_from(con: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<Got> {
    let reply: StreamRangeReply =
        redis::cmd("XRANGE").arg(key).arg("-").arg("+").query_async(con).await.unwrap();
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

/// Runs `test` within `limit` with a name of its own, `base`: the keys it writes are `base` or
/// start with `base:`, and are deleted after it.
async fn with_fresh_keys(limit: Duration, test: impl AsyncFnOnce(&str)) {
    within(limit, async {
        let base = unique("outbox_t");
        test(&base).await;
        let mut con = redis_conn().await;
        let found: Vec<String> =
            redis::cmd("KEYS").arg(format!("{base}*")).query_async(&mut con).await.unwrap();
        let keys: Vec<&String> =
            found.iter().filter(|k| *k == &base || k.starts_with(&format!("{base}:"))).collect();
        if !keys.is_empty() {
            let _: () = redis::cmd("DEL").arg(keys).query_async(&mut con).await.unwrap();
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_publish_appends_every_header_in_order() {
    with_fresh_keys(TEST_TIMEOUT, async |base| {
        let t = RedisTransport::connect(RedisConfig {
            maxlen: Some(10_000),
            ..config(format!("redis://{}", server()), &format!("{base}:{{topic}}"))
        })
        .await
        .unwrap();
        assert_eq!(t.kind(), "redis");
        t.health().await.unwrap();

        let batch = mixed_batch();
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
            assert_key_order(
                entries.iter().map(|g| (g.headers[header::KEY].as_str(), g.id.parse().unwrap())),
            );
        }
        assert!(t.publish(&[]).await.is_empty());
    })
    .await;
}

/// The entries of `stream` as [`check_received`] takes them.
fn received(got: &[Got]) -> impl Iterator<Item = (i64, &str, &BTreeMap<String, String>)> {
    got.iter().map(|g| (g.id.parse().unwrap(), g.payload.as_str(), &g.headers))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_end_to_end_publishes_committed_messages_once() {
    with_fresh_keys(TEST_TIMEOUT, async |stream| {
        let t = RedisTransport::connect(config(format!("redis://{}", server()), stream)).await.unwrap();
        let committed = relay_orders("redis", Arc::new(t)).await;
        check_received(received(&read(stream).await), &committed, true);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_keeps_messages_pending_and_loses_nothing() {
    with_fresh_keys(TEST_TIMEOUT * 2, async |stream| {
        let proxy = TcpProxy::start(&server()).await;
        let t = RedisTransport::connect(config(format!("redis://{}", proxy.addr()), stream)).await.unwrap();
        let committed = relay_orders_through_an_outage("redis", Arc::new(t), &proxy).await;
        // At-least-once: an XADD applied just before the cut may have been appended twice.
        check_received(received(&read(stream).await), &committed, false);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classification_of_failures() {
    with_fresh_keys(TEST_TIMEOUT, async |base| {
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
        let unreachable =
            |url| RedisConfig { url, connect_timeout: Duration::from_secs(1), ..Default::default() };
        assert_unreachable_is_redacted("redis", "redis", |url| RedisTransport::connect(unreachable(url)))
            .await;

        // Invalid configuration: the key is named, before any connection.
        let invalid = vec![
            (RedisConfig { maxlen: Some(0), ..RedisConfig::default() }, "maxlen"),
            (RedisConfig { url: "http://x".into(), ..RedisConfig::default() }, "url"),
        ];
        assert_invalid_named("redis", RedisTransport::connect, invalid).await;
        assert_unknown_key_refused::<RedisConfig>(r#"{"stream":"s","bogus":1}"#, "bogus");
    })
    .await;
}

/// Issue 14, finding 4 on Redis: a key or field outside the transport's bounds fails alone,
/// permanently, naming the problem, before it is sent; the good messages are appended; the
/// connection keeps working. (Redis keys are binary-safe: a topic with a line break is a valid
/// key and is delivered, not refused.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_outside_the_bounds_fails_alone_and_the_connection_survives() {
    with_fresh_keys(TEST_TIMEOUT, async |base| {
        let t = RedisTransport::connect(RedisConfig {
            max_payload_bytes: 1024,
            ..config(format!("redis://{}", server()), &format!("{base}:{{topic}}"))
        })
        .await
        .unwrap();
        let good = |i: i64| envelope(i, "ok", None, &format!("good {i}"), false);
        let batch = vec![
            good(1),
            envelope(101, &"x".repeat(5000), None, "bad", false),
            good(2),
            with_header(good(102), &format!("{} x", "n".repeat(70_000)), "v"),
            good(3),
            with_header(good(103), "note", &"v".repeat(2000)),
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
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_during_a_cut_is_unavailable_and_the_next_after_restore_succeeds() {
    with_fresh_keys(TEST_TIMEOUT, async |stream| {
        let proxy = TcpProxy::start(&server()).await;
        let t = RedisTransport::connect(config(format!("redis://{}", proxy.addr()), stream)).await.unwrap();
        assert_a_cut_is_unavailable(&t, &proxy).await;
        // The connection is re-established on demand: at most one more failure, then delivered.
        assert_a_restore_recovers(&t, &proxy).await;
    })
    .await;
}

/// Publishes race with connections being cut and restored: whatever the timing, a message
/// reported delivered is in the stream, and every call answers within its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivered_always_means_appended_under_repeated_cuts() {
    with_fresh_keys(TEST_TIMEOUT, async |stream| {
        let connect = async |addr: std::net::SocketAddr| {
            let config = config(format!("redis://{addr}"), stream);
            RedisTransport::connect(RedisConfig { timeout: Duration::from_millis(1500), ..config }).await
        };
        let delivered = delivered_under_repeated_cuts(&server(), connect, (97, 150)).await;
        let stored: std::collections::HashSet<String> =
            read(stream).await.into_iter().map(|g| g.id).collect();
        let missing: Vec<&String> = delivered.difference(&stored).collect();
        assert!(missing.is_empty(), "reported delivered but not appended: {missing:?}");
    })
    .await;
}

// TLS, against redis-server instances of the test's own (`outbox_testkit::tls::redis`: a TLS
// port only, the certificate valid for `localhost` only).

fn tls_config(url: String, ca: Option<String>) -> RedisConfig {
    RedisConfig { tls_ca_file: ca, ..config(url, "tls:{topic}") }
}

/// A connection to the TLS server on `port` with the test CA alone (and the client certificate
/// when `client_cert`): the consumer side.
async fn tls_conn(pki: &Pki, port: u16, client_cert: bool) -> redis::aio::MultiplexedConnection {
    // The redis client builds its rustls configuration with the process's default provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let read = |name: &str| std::fs::read(pki.path(name)).unwrap();
    let certificates = redis::TlsCertificates {
        client_tls: client_cert.then(|| redis::ClientTlsConfig {
            client_cert: read("client.pem"),
            client_key: read("client.key"),
        }),
        root_cert: Some(read("ca.pem")),
    };
    let client = redis::Client::build_with_tls(format!("rediss://localhost:{port}"), certificates).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_ca_file_publishes_and_the_message_arrives() {
    on_tls_server(tls::redis, false, async |pki, port| {
        let url = format!("rediss://localhost:{port}/0");
        let t = RedisTransport::connect(tls_config(url, Some(pki.path("ca.pem")))).await.unwrap();
        t.health().await.unwrap();
        let batch: Vec<_> =
            (1..=3).map(|id| envelope(id, "order.paid", Some("k"), &format!("tls {id}"), true)).collect();
        assert_eq!(t.publish(&batch).await, vec![Outcome::Delivered; 3]);
        let got = read_from(&mut tls_conn(pki, port, false).await, "tls:order.paid").await;
        assert_eq!(got.iter().map(|g| g.payload.as_str()).collect::<Vec<_>>(), ["tls 1", "tls 2", "tls 3"]);
        for (g, e) in got.iter().zip(&batch) {
            assert_eq!((g.id.as_str(), &g.headers), (e.id.to_string().as_str(), &e.headers));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_certificate_is_presented_and_a_missing_or_foreign_one_is_refused() {
    on_tls_server(tls::redis, true, async |pki, port| {
        let url = format!("rediss://localhost:{port}");
        let (missing, foreign) = client_certificate_required(pki, tls_config, &url).await;
        let got = read_from(&mut tls_conn(pki, port, true).await, "tls:order.paid").await;
        assert_eq!(got.iter().map(|g| g.payload.as_str()).collect::<Vec<_>>(), ["by certificate"]);
        assert!(missing.contains("requires a client certificate and none was given"), "{missing}");
        assert!(foreign.contains("the server refused this client's certificate"), "{foreign}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_unknown_ca_and_wrong_host_name_are_explained() {
    on_tls_server(tls::redis, false, async |pki, port| {
        assert_unknown_ca_and_wrong_host_explained(pki, tls_config, ("rediss", "", port)).await;
        // A plain redis:// URL to the TLS port: no answer in Redis's protocol.
        let cfg = RedisConfig {
            connect_timeout: Duration::from_secs(1),
            ..tls_config(format!("redis://localhost:{port}"), None)
        };
        connect_error(RedisTransport::connect(cfg).await);
    })
    .await;
}

#[tokio::test]
async fn tls_files_that_cannot_be_used_are_configuration_errors_naming_the_key() {
    let plain = ("redis://localhost", "needs a rediss:// URL");
    assert_unusable_tls_files_refused(tls_config, "rediss://localhost", Some(plain)).await;
}
