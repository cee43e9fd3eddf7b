//! The NATS JetStream transport against the real server on 127.0.0.1:4222 (override with
//! `OUTBOX_TEST_NATS_ADDR`). Every test uses its own stream and subjects, so the tests can run
//! concurrently with each other and with other suites on the same server.
#![cfg(feature = "nats")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use outbox_core::{header, Envelope, FailureKind, Outcome, Transport};
use outbox_testkit::process::NatsServer;
use outbox_testkit::proxy::TcpProxy;
use outbox_testkit::tls::{self, Pki};
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

/// A fresh stream on the shared server, capturing `<prefix>.>`, and the JetStream context that
/// reads it: what most tests publish to and check.
struct Fresh {
    js: jetstream::Context,
    stream: String,
    prefix: String,
}

impl Fresh {
    async fn new() -> Self {
        let js = jetstream().await;
        let stream = unique("OUTBOX_T");
        let prefix = unique("outbox_t");
        js.create_stream(jetstream::stream::Config {
            name: stream.clone(),
            subjects: vec![format!("{prefix}.>")],
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .unwrap();
        Fresh { js, stream, prefix }
    }

    /// The configuration publishing to the stream through the server (or proxy) at `addr`.
    fn config(&self, addr: impl std::fmt::Display) -> NatsConfig {
        config(format!("nats://{addr}"), &self.prefix, &self.stream)
    }

    /// A transport publishing to the stream through `addr`.
    async fn transport(&self, addr: impl std::fmt::Display) -> NatsTransport {
        NatsTransport::connect(self.config(addr)).await.unwrap()
    }

    /// What [`consume`] reads from the stream, waiting up to 10 s for `expected` messages.
    async fn consume(&self, expected: usize) -> Vec<Got> {
        consume(&self.js, &self.stream, expected, Duration::from_secs(10)).await
    }

    /// How many messages the stream holds.
    async fn stored(&self) -> u64 {
        self.js.get_stream(&self.stream).await.unwrap().info().await.unwrap().state.messages
    }

    async fn delete(self) {
        self.js.delete_stream(&self.stream).await.unwrap();
    }
}

/// Runs `test` on a fresh stream within `limit`, and deletes the stream after it.
async fn on_fresh_stream(limit: Duration, test: impl AsyncFnOnce(&Fresh)) {
    within(limit, async {
        let s = Fresh::new().await;
        test(&s).await;
        s.delete().await;
    })
    .await;
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

impl Got {
    fn id(&self) -> i64 {
        self.headers[header::MESSAGE_ID].parse().unwrap()
    }
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
    arrivals(expected, wait, async || {
        let m = messages.next().await?.unwrap();
        let headers = m
            .headers
            .as_ref()
            .map(|h| h.iter().map(|(k, v)| (k.to_string(), v.first().unwrap().to_string())).collect())
            .unwrap_or_default();
        let got = Got {
            subject: m.subject.to_string(),
            headers,
            payload: String::from_utf8(m.payload.to_vec()).unwrap(),
            sequence: m.info().unwrap().stream_sequence,
        };
        m.ack().await.unwrap();
        Some(got)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_publish_delivers_every_header_in_order_once() {
    on_fresh_stream(TEST_TIMEOUT, async |s| {
        let t = s.transport(server()).await;
        assert_eq!(t.kind(), "nats");
        t.health().await.unwrap();

        let batch = mixed_batch();
        assert_eq!(s.stored().await, 0);
        let outcomes = t.publish(&batch).await;
        assert_eq!(outcomes, vec![Outcome::Delivered; 30]);
        // Delivered means stored: the stream holds every message as soon as publish returns.
        assert_eq!(s.stored().await, 30);

        let got = s.consume(30).await;
        assert_eq!(got.len(), 30, "every message exactly once");
        let by_id: HashMap<String, &Got> =
            got.iter().map(|g| (g.headers[header::MESSAGE_ID].clone(), g)).collect();
        for e in &batch {
            let g = by_id[&e.id.to_string()];
            assert_eq!(g.subject, format!("{}.{}", s.prefix, e.topic));
            assert_eq!(g.payload, e.payload);
            for (name, value) in &e.headers {
                assert_eq!(g.headers.get(name), Some(value), "header {name} of message {}", e.id);
            }
            assert_eq!(g.headers["Nats-Msg-Id"], e.id.to_string());
            assert_eq!(g.headers.len(), e.headers.len() + 1, "no unexpected header");
        }
        assert!(got.iter().filter(|g| g.headers.contains_key(header::TRACEPARENT)).count() == 7);
        // Order within a key: stream sequence follows message id.
        let mut stored_order: Vec<&Got> = got.iter().collect();
        stored_order.sort_by_key(|g| g.sequence);
        assert_key_order(stored_order.iter().map(|g| (g.headers[header::KEY].as_str(), g.id())));

        // Publishing the same messages again (a relay retry) is acknowledged, and deduplicated
        // by Nats-Msg-Id.
        assert_eq!(t.publish(&batch[..5]).await, vec![Outcome::Delivered; 5]);
        assert_eq!(s.stored().await, 30);
        assert!(t.publish(&[]).await.is_empty());
    })
    .await;
}

/// What a consumer got, in stream order, as [`check_received`] takes it.
fn received(got: &[Got]) -> impl Iterator<Item = (i64, &str, &BTreeMap<String, String>)> {
    let mut stored_order: Vec<&Got> = got.iter().collect();
    stored_order.sort_by_key(|g| g.sequence);
    stored_order.into_iter().map(|g| (g.id(), g.payload.as_str(), &g.headers))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_end_to_end_publishes_committed_messages_once() {
    on_fresh_stream(TEST_TIMEOUT, async |s| {
        let t = s.transport(server()).await;
        let committed = relay_orders("nats", Arc::new(t)).await;
        let got = s.consume(200).await;
        check_received(received(&got), &committed, true);
        assert_eq!(s.stored().await, 200);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_keeps_messages_pending_and_loses_nothing() {
    on_fresh_stream(TEST_TIMEOUT * 2, async |s| {
        let proxy = TcpProxy::start(&server()).await;
        let t = s.transport(proxy.addr()).await;
        let committed = relay_orders_through_an_outage("nats", Arc::new(t), &proxy).await;
        let got = s.consume(120).await;
        // Nats-Msg-Id deduplication makes even the republished ones appear once.
        check_received(received(&got), &committed, true);
    })
    .await;
}

/// Issue 14, finding 4 on NATS: every subject or header the server (or the protocol line)
/// would refuse fails alone, permanently, naming the problem, before it is sent; the good
/// messages of the batch are stored; the connection is untouched. The 5000-byte subject used to
/// make the server close the connection ("maximum control line exceeded"); the 70 KB header
/// name with a space used to produce a reason quoting the whole name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_server_would_refuse_fails_alone_and_the_connection_survives() {
    on_fresh_stream(TEST_TIMEOUT, async |s| {
        let t = s.transport(server()).await;
        let good = |i: i64| envelope(i, "order.paid", None, &format!(r#"{{"n":{i}}}"#), false);
        let huge_name = format!("{} x", "n".repeat(70_000));
        let bad: Vec<(Envelope, &str)> = vec![
            (envelope(101, "sec.a b", None, "x", false), "U+0020 (space)"),
            (envelope(102, "sec.a\nb", None, "x", false), "U+000A (line feed)"),
            (envelope(103, "order.*", None, "x", false), "wildcard token '*'"),
            (envelope(104, "order.>", None, "x", false), "wildcard token '>'"),
            (envelope(105, "order..paid", None, "x", false), "empty token"),
            (envelope(106, &"x".repeat(5000), None, "x", false), "more than the 3840 allowed"),
            (with_header(good(107), &huge_name, "v"), "contains U+0020 (space): NATS header names"),
            (with_header(good(108), "x-note", "a\r\nInjected: 1"), "U+000D (carriage return)"),
            (with_header(good(109), "Nats-Rollup", "all"), "reserved"),
            (with_header(good(110), "Łabel", "v"), "U+0141"),
            (with_header(good(111), "a:b", "v"), "':'"),
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
        let got = s.consume(n_good).await;
        let mut payloads: Vec<String> = got.iter().map(|g| g.payload.clone()).collect();
        payloads.sort();
        let mut want: Vec<String> = (1..=n_good as i64).map(|i| format!(r#"{{"n":{i}}}"#)).collect();
        want.sort();
        assert_eq!(payloads, want);
        assert_eq!(t.publish(&[good(500)]).await, vec![Outcome::Delivered]);
        assert_eq!(s.stored().await, n_good as u64 + 1);
        t.health().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classification_of_failures() {
    on_fresh_stream(TEST_TIMEOUT, async |s| {
        let url = format!("nats://{}", server());

        // Oversized: over the configured limit, and over the server's max_payload.
        let small =
            NatsTransport::connect(NatsConfig { max_payload_bytes: Some(1024), ..s.config(server()) })
                .await
                .unwrap();
        assert_oversized_fails_and_holds_back_its_key(&small, "max_payload_bytes of 1024 bytes").await;
        let t = s.transport(server()).await;
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
        let e = NatsTransport::connect(config(url.clone(), &orphan, &s.stream)).await.unwrap_err();
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
        s.js.delete_stream(&missing).await.unwrap();
        assert!(t3.health().await.unwrap_err().contains("does not exist"));

        // Unreachable server: a Connect error with the password redacted.
        let unreachable =
            |url| NatsConfig { url, connect_timeout: Duration::from_secs(2), ..Default::default() };
        assert_unreachable_is_redacted("nats", "nats", |url| NatsTransport::connect(unreachable(url))).await;

        // Invalid configuration: the key is named, before any connection.
        let invalid = vec![
            (NatsConfig { subject: Some("a.*".into()), ..NatsConfig::default() }, "subject"),
            (NatsConfig { timeout: Duration::ZERO, ..NatsConfig::default() }, "timeout"),
        ];
        assert_invalid_named("nats", NatsTransport::connect, invalid).await;
        assert_unknown_key_refused::<NatsConfig>(r#"{"url":"nats://h","bogus":1}"#, "bogus");
    })
    .await;
}

/// Publishes race with connections being cut and restored: whatever the timing, a message
/// reported delivered is in the stream, and every call answers within its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivered_always_means_stored_under_repeated_cuts() {
    on_fresh_stream(TEST_TIMEOUT, async |s| {
        let connect = async |addr: std::net::SocketAddr| {
            NatsTransport::connect(NatsConfig { timeout: Duration::from_millis(1500), ..s.config(addr) })
                .await
        };
        let delivered = delivered_under_repeated_cuts(&server(), connect, (300, 200)).await;
        let stored: std::collections::HashSet<String> = s
            .consume(delivered.len())
            .await
            .into_iter()
            .map(|g| g.headers[header::MESSAGE_ID].clone())
            .collect();
        let missing: Vec<&String> = delivered.difference(&stored).collect();
        assert!(missing.is_empty(), "reported delivered but not stored: {missing:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_url_are_used_and_never_shown() {
    within(TEST_TIMEOUT, async {
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
    .await;
}

// TLS, against nats-server instances of the test's own (`outbox_testkit::tls::nats`: TLS
// required, the certificate valid for `localhost` only, JetStream on).

/// A transport configuration for the TLS server on `port`, creating its own stream.
fn tls_config(url: String, ca: Option<String>) -> NatsConfig {
    NatsConfig {
        url,
        subject_prefix: Some("tls".into()),
        stream: Some("OUTBOX_TLS".into()),
        create_stream: true,
        timeout: Duration::from_secs(5),
        tls_ca_file: ca,
        ..NatsConfig::default()
    }
}

/// JetStream of the TLS server on `port`, reached over TLS with the test CA (and the client
/// certificate when `client_cert`): the consumer side.
async fn tls_jetstream(pki: &Pki, port: u16, client_cert: bool) -> jetstream::Context {
    let client = async_nats::ConnectOptions::new()
        .tls_client_config(test_tls_config(pki, client_cert))
        .require_tls(true)
        .connect(format!("tls://localhost:{port}"))
        .await
        .unwrap();
    jetstream::new(client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_ca_file_publishes_and_the_message_arrives() {
    on_tls_server(tls::nats, false, async |pki, port| {
        // tls:// with the CA; and nats:// with the CA (the file makes TLS required).
        for (i, url) in
            [format!("tls://localhost:{port}"), format!("nats://localhost:{port}")].into_iter().enumerate()
        {
            let t = NatsTransport::connect(tls_config(url.clone(), Some(pki.path("ca.pem"))))
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            t.health().await.unwrap();
            let id = i as i64 + 1;
            let sent = envelope(id, "order.paid", Some("k"), &format!("{{\"over\":\"tls {id}\"}}"), true);
            assert_eq!(t.publish(std::slice::from_ref(&sent)).await, vec![Outcome::Delivered], "{url}");
        }
        let js = tls_jetstream(pki, port, false).await;
        let got = consume(&js, "OUTBOX_TLS", 2, Duration::from_secs(5)).await;
        assert_eq!(got.len(), 2, "{got:?}");
        for (g, id) in got.iter().zip(1..) {
            assert_eq!(g.subject, "tls.order.paid");
            assert_eq!(g.payload, format!("{{\"over\":\"tls {id}\"}}"));
            assert_eq!(g.id(), id);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_certificate_is_presented_and_a_missing_or_foreign_one_is_refused() {
    on_tls_server(tls::nats, true, async |pki, port| {
        let url = format!("tls://localhost:{port}");
        let (missing, foreign) = client_certificate_required(pki, tls_config, &url).await;
        let got =
            consume(&tls_jetstream(pki, port, true).await, "OUTBOX_TLS", 1, Duration::from_secs(5)).await;
        assert_eq!(got.iter().map(|g| g.payload.as_str()).collect::<Vec<_>>(), ["by certificate"]);

        // nats-server (2.9) answers a missing certificate as a bad one (alert BadCertificate):
        // the transport adds that none was sent.
        assert!(missing.contains("the server refused this client's certificate"), "{missing}");
        assert!(missing.contains("no client certificate was sent (the server may require one"), "{missing}");
        assert!(foreign.contains("the server refused this client's certificate"), "{foreign}");
        assert!(!foreign.contains("no client certificate was sent"), "{foreign}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_unknown_ca_and_wrong_host_name_are_explained() {
    on_tls_server(tls::nats, false, async |pki, port| {
        assert_unknown_ca_and_wrong_host_explained(pki, tls_config, ("tls", "relay", port)).await;
        // The same with a nats:// URL the server upgrades.
        let url = format!("nats://localhost:{port}");
        let err = connect_error(NatsTransport::connect(tls_config(url.clone(), None)).await);
        assert!(err.starts_with(&format!("cannot connect nats to {url}: ")), "{err}");
        assert!(err.contains("the server's certificate is not signed by a CA this client trusts"), "{err}");
    })
    .await;
}

#[tokio::test]
async fn tls_files_that_cannot_be_used_are_configuration_errors_naming_the_key() {
    // With nats://, the files make TLS required (no plain-URL case).
    assert_unusable_tls_files_refused(tls_config, "tls://localhost:4222", None).await;
}
