//! The MQTT transport against the real broker (Mosquitto) on 127.0.0.1:1883 (override with
//! `OUTBOX_TEST_MQTT_ADDR`). Every test uses its own topic tree, so the tests can run
//! concurrently with each other and with other suites on the same broker.
#![cfg(feature = "mqtt")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::*;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{header, Envelope, FailureKind, MessageId, NewMessage, Outcome, Status, Transport};
use outbox_testkit::proxy::TcpProxy;
use outbox_testkit::tls;
use outbox_transport::mqtt::{MqttConfig, MqttFormat, MqttTransport};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use tokio::sync::mpsc;

const TEST_TIMEOUT: Duration = Duration::from_secs(60);

fn server() -> String {
    env_or("OUTBOX_TEST_MQTT_ADDR", "127.0.0.1:1883")
}

/// A QoS 1 subscriber, subscribed (SUBACK received) before it is returned.
struct Subscriber {
    rx: mpsc::UnboundedReceiver<(String, Vec<u8>)>,
    _client: AsyncClient,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Subscriber {
    async fn start(filter: &str) -> Subscriber {
        let (host, port) =
            server().rsplit_once(':').map(|(h, p)| (h.to_owned(), p.parse().unwrap())).unwrap();
        Subscriber::start_at(filter, host, port, None).await
    }

    /// A subscriber of the broker at `host:port`, over TLS with `tls`.
    async fn start_at(
        filter: &str,
        host: String,
        port: u16,
        tls: Option<rustls::ClientConfig>,
    ) -> Subscriber {
        let mut options = MqttOptions::new(unique("sub"), host, port);
        options.set_max_packet_size(4 << 20, 4 << 20).set_keep_alive(Duration::from_secs(30));
        if let Some(tls) = tls {
            options.set_transport(rumqttc::Transport::Tls(rumqttc::TlsConfiguration::Rustls(Arc::new(tls))));
        }
        let (client, mut eventloop) = AsyncClient::new(options, 100);
        client.subscribe(filter, QoS::AtLeastOnce).await.unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let mut ready_tx = Some(ready_tx);
        let task = tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::SubAck(_))) => {
                        if let Some(r) = ready_tx.take() {
                            let _ = r.send(());
                        }
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let _ = tx.send((p.topic.clone(), p.payload.to_vec()));
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), ready_rx)
            .await
            .unwrap_or_else(|_| {
                panic!("MQTT broker at {} did not confirm the subscription; start it", server())
            })
            .unwrap();
        Subscriber { rx, _client: client, task }
    }

    /// At least `expected` messages (then whatever else arrives within a short grace period).
    async fn take(&mut self, expected: usize, wait: Duration) -> Vec<(String, Vec<u8>)> {
        arrivals(expected, wait, async || self.rx.recv().await).await
    }

    /// What [`take`](Self::take) gets, each message unwrapped from its JSON envelope.
    async fn envelopes(&mut self, expected: usize, wait: Duration) -> Vec<Got> {
        self.take(expected, wait).await.iter().map(unwrap_envelope).collect()
    }
}

/// One received message, unwrapped from the JSON envelope.
#[derive(Debug, Clone)]
struct Got {
    topic: String,
    id: String,
    headers: BTreeMap<String, String>,
    payload: String,
}

fn unwrap_envelope((topic, body): &(String, Vec<u8>)) -> Got {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    let obj = v.as_object().unwrap();
    assert_eq!(obj.len(), 3, "exactly id, headers and payload: {v}");
    Got {
        topic: topic.clone(),
        id: obj["id"].as_str().unwrap().to_owned(),
        headers: serde_json::from_value(obj["headers"].clone()).unwrap(),
        payload: obj["payload"].as_str().unwrap().to_owned(),
    }
}

/// Runs `test` within `limit` on topics of its own, `<base>/...` (what [`config`] publishes to
/// with that `base`), with a subscriber to all of them.
async fn with_fresh_topics(limit: Duration, test: impl AsyncFnOnce(&str, &mut Subscriber)) {
    within(limit, async {
        let base = unique("outbox_t");
        let mut sub = Subscriber::start(&format!("{base}/#")).await;
        test(&base, &mut sub).await;
    })
    .await;
}

fn config(url: String, base: &str) -> MqttConfig {
    MqttConfig {
        url,
        topic: format!("{base}/{{topic}}"),
        timeout: Duration::from_millis(3000),
        ..MqttConfig::default()
    }
}

/// A proxy to the shared broker, and a transport publishing under `base` through it that waits
/// at most `reconnect_max_delay` between reconnection attempts.
async fn behind_a_proxy(base: &str, reconnect_max_delay: Duration) -> (TcpProxy, MqttTransport) {
    let proxy = TcpProxy::start(&server()).await;
    let config = MqttConfig { reconnect_max_delay, ..config(format!("mqtt://{}", proxy.addr()), base) };
    (proxy, MqttTransport::connect(config).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_publish_delivers_the_envelope_with_every_header_in_order() {
    with_fresh_topics(TEST_TIMEOUT, async |base, sub| {
        let t = MqttTransport::connect(config(format!("mqtt://{}", server()), base)).await.unwrap();
        assert_eq!(t.kind(), "mqtt");
        t.health().await.unwrap();

        let batch = mixed_batch();
        assert_eq!(t.publish(&batch).await, vec![Outcome::Delivered; 30]);

        let got = sub.envelopes(30, Duration::from_secs(10)).await;
        assert_eq!(got.len(), 30, "every message exactly once");
        let by_id: HashMap<&str, &Got> = got.iter().map(|g| (g.id.as_str(), g)).collect();
        for e in &batch {
            let g = by_id[e.id.to_string().as_str()];
            assert_eq!(g.topic, format!("{base}/{}", e.topic.replace('.', "/")));
            assert_eq!(g.payload, e.payload);
            assert_eq!(g.headers, e.headers, "every header, nothing else, for message {}", e.id);
        }
        // Order within a key: arrival order follows message id.
        assert_key_order(got.iter().map(|g| (g.headers[header::KEY].as_str(), g.id.parse().unwrap())));
        assert!(t.publish(&[]).await.is_empty());

        // Raw format: the body alone.
        let raw = MqttTransport::connect(MqttConfig {
            format: MqttFormat::Raw,
            ..config(format!("mqtt://{}", server()), base)
        })
        .await
        .unwrap();
        assert_eq!(
            raw.publish(&[envelope(99, "raw.one", None, "plain body", false)]).await,
            vec![Outcome::Delivered]
        );
        let got = sub.take(1, Duration::from_secs(10)).await;
        assert_eq!(got, vec![(format!("{base}/raw/one"), b"plain body".to_vec())]);
    })
    .await;
}

/// Checks what the subscriber got against the committed messages ([`check_received`]), and
/// that each came on the topic made from its own.
fn check_got(got: &[Got], base: &str, committed: &HashMap<MessageId, NewMessage>, exactly_once: bool) {
    for g in got {
        let m = committed.get(&MessageId(g.id.parse().unwrap())).expect("a committed message");
        assert_eq!(g.topic, format!("{base}/{}", m.topic.replace('.', "/")));
    }
    let received = got.iter().map(|g| (g.id.parse().unwrap(), g.payload.as_str(), &g.headers));
    check_received(received, committed, exactly_once);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_end_to_end_publishes_committed_messages_once() {
    with_fresh_topics(TEST_TIMEOUT, async |base, sub| {
        let t = MqttTransport::connect(config(format!("mqtt://{}", server()), base)).await.unwrap();
        let committed = relay_orders("mqtt", Arc::new(t)).await;
        let got = sub.envelopes(200, Duration::from_secs(10)).await;
        check_got(&got, base, &committed, true);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_keeps_messages_pending_and_loses_nothing() {
    with_fresh_topics(TEST_TIMEOUT * 2, async |base, sub| {
        let (proxy, t) = behind_a_proxy(base, Duration::from_millis(500)).await;
        let committed = relay_orders_through_an_outage("mqtt", Arc::new(t), &proxy).await;
        let got = sub.envelopes(120, Duration::from_secs(10)).await;
        // At-least-once: a PUBLISH whose PUBACK was cut off is published again.
        check_got(&got, base, &committed, false);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_during_a_cut_is_unavailable_and_the_next_after_restore_succeeds() {
    within(TEST_TIMEOUT, async {
        let base = unique("outbox_t");
        let (proxy, t) = behind_a_proxy(&base, Duration::from_millis(300)).await;
        assert_a_cut_is_unavailable(&t, &proxy).await;
        let o = t.publish(&[envelope(3, "a", None, "x", false)]).await;
        assert!(reason(&o[0]).contains("not connected"), "{o:?}");
        assert_a_restore_recovers(&t, &proxy).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classification_of_failures() {
    with_fresh_topics(TEST_TIMEOUT, async |base, sub| {
        let url = format!("mqtt://{}", server());

        // Oversized packet: permanent, before sending; later messages of its key are held back,
        // and the connection is unharmed.
        let t = MqttTransport::connect(MqttConfig { max_packet_bytes: 1024, ..config(url.clone(), base) })
            .await
            .unwrap();
        assert_oversized_fails_and_holds_back_its_key(&t, "max_packet_bytes of 1024 bytes").await;
        let got = sub.take(1, Duration::from_secs(5)).await;
        assert_eq!(got.len(), 1);
        assert_eq!(unwrap_envelope(&got[0]).id, "3");

        // A topic that makes no valid MQTT topic.
        let o = t.publish(&[envelope(4, "a+b", None, "x", false), envelope(5, "a#", None, "x", false)]).await;
        assert!(o.iter().all(|o| kind(o) == Some(FailureKind::Permanent)), "{o:?}");
        assert_eq!(t.publish(&[envelope(6, "b", None, "ok", false)]).await, vec![Outcome::Delivered]);

        // Unreachable broker: a Connect error with the password redacted.
        let unreachable =
            |url| MqttConfig { url, connect_timeout: Duration::from_secs(2), ..Default::default() };
        assert_unreachable_is_redacted("mqtt", "mqtt", |url| MqttTransport::connect(unreachable(url))).await;

        // Invalid configuration: the key is named, before any connection (and no password).
        let invalid = vec![
            (MqttConfig { topic: "a/#".into(), ..MqttConfig::default() }, "topic"),
            (MqttConfig { url: "wss://u:s3cret@h".into(), ..MqttConfig::default() }, "url"),
        ];
        let reasons = assert_invalid_named("mqtt", MqttTransport::connect, invalid).await;
        assert!(!reasons[1].contains("s3cret"));
        assert_unknown_key_refused::<MqttConfig>(r#"{"topic":"t","qos":2}"#, "qos");

        // Nothing else reached the subscriber.
        let extra: HashSet<String> =
            sub.take(0, Duration::from_millis(300)).await.iter().map(|m| unwrap_envelope(m).id).collect();
        assert_eq!(extra, HashSet::from(["6".to_owned()]));
    })
    .await;
}

/// Issue 14, finding 4: a topic with a control character made Mosquitto drop the connection,
/// the transport called that an outage and the breaker probed the same message forever (0 of
/// 10 good messages delivered in 90 s). Now the topic is checked before sending: the bad
/// message fails alone, permanently, naming the problem; the good ones arrive; the connection
/// is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_the_broker_would_refuse_fails_alone_and_the_connection_survives() {
    with_fresh_topics(TEST_TIMEOUT, async |base, sub| {
        let t = MqttTransport::connect(config(format!("mqtt://{}", server()), base)).await.unwrap();

        // `sec.a\nb` among 10 good messages.
        let mut batch: Vec<Envelope> =
            (1..=10).map(|i| envelope(i, "sec.ok", None, &format!("good {i}"), false)).collect();
        batch.insert(5, envelope(100, "sec.a\nb", None, "bad", false));
        let out = t.publish(&batch).await;
        assert_refused(&out[5], "control character U+000A (line feed)");
        assert_refused(&out[5], "topic \"sec.a\\nb\"");
        for (i, o) in out.iter().enumerate().filter(|(i, _)| *i != 5) {
            assert_eq!(*o, Outcome::Delivered, "message at {i}");
        }
        let got = sub.take(10, Duration::from_secs(10)).await;
        let mut ids: Vec<String> = got.iter().map(|m| unwrap_envelope(m).id).collect();
        ids.sort_by_key(|id| id.parse::<i64>().unwrap());
        assert_eq!(ids, (1..=10).map(|i| i.to_string()).collect::<Vec<_>>(), "exactly the 10 good ones");

        // Every other rule, one bad message each among good ones.
        let deep = vec!["l"; 200].join(".");
        let cases: [(&str, &str); 6] = [
            ("sec.a+b", "wildcard '+'"),
            ("sec.#", "wildcard '#'"),
            ("sec.a\u{0}b", "U+0000 (NUL)"),
            ("sec.a\u{85}b", "control character U+0085"),
            ("sec.a\u{fffe}", "noncharacter U+FFFE"),
            (&deep, "levels, more than max_topic_levels (128)"),
        ];
        let mut batch = vec![envelope(200, "sec.first", None, "first", false)];
        for (i, (topic, _)) in cases.iter().enumerate() {
            batch.push(envelope(201 + i as i64, topic, None, "bad", false));
        }
        batch.push(envelope(300, "sec.last", None, "last", false));
        let out = t.publish(&batch).await;
        assert_eq!(out[0], Outcome::Delivered);
        for (i, (_, needle)) in cases.iter().enumerate() {
            assert_refused(&out[1 + i], needle);
        }
        assert_eq!(out[out.len() - 1], Outcome::Delivered);
        let got: Vec<String> =
            sub.take(2, Duration::from_secs(10)).await.iter().map(|m| unwrap_envelope(m).id).collect();
        assert_eq!(got, vec!["200".to_owned(), "300".to_owned()]);

        // The same connection keeps publishing.
        assert_eq!(
            t.publish(&[envelope(400, "sec.after", None, "after", false)]).await,
            vec![Outcome::Delivered]
        );
        let got = sub.take(1, Duration::from_secs(10)).await;
        assert_eq!(unwrap_envelope(&got[0]).id, "400");
        t.health().await.unwrap();
    })
    .await;
}

/// The finding end to end, with a topic the table and `NewMessage` accept but Mosquitto answers
/// by closing the connection (a Unicode noncharacter; a control character such as `\n` can no
/// longer reach the table): 10 good messages and the bad one through a real relay. The 10 are
/// sent and the bad one fails with its reason, well within the deadline (before, the breaker
/// probed it forever and nothing was delivered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_fails_a_refused_topic_and_delivers_the_rest() {
    with_fresh_topics(TEST_TIMEOUT * 2, async |base, sub| {
        let (db, outbox) = sqlite_outbox().await;
        let mut good = Vec::new();
        for i in 0..5 {
            good.push(outbox.enqueue(&NewMessage::new("sec.ok", format!("good {i}"))).await.unwrap().id);
        }
        let bad = outbox.enqueue(&NewMessage::new("sec.a\u{fffe}b", "bad")).await.unwrap().id;
        for i in 5..10 {
            good.push(outbox.enqueue(&NewMessage::new("sec.ok", format!("good {i}"))).await.unwrap().id);
        }
        let t = MqttTransport::connect(config(format!("mqtt://{}", server()), base)).await.unwrap();
        let last_error = with_relay((db, outbox), destination("mqtt", Arc::new(t)), async |outbox| {
            wait_all_sent(outbox, &good, Duration::from_secs(60)).await;
            eventually("the bad message failed", || async {
                outbox.get(bad).await.unwrap().unwrap().status == Status::Failed
            })
            .await;
            outbox.get(bad).await.unwrap().unwrap().last_error.unwrap()
        })
        .await;
        assert!(last_error.contains("noncharacter U+FFFE"), "{last_error}");
        assert!(!last_error.chars().any(char::is_control), "{last_error:?}");
        let got = sub.take(10, Duration::from_secs(10)).await;
        assert_eq!(got.len(), 10, "the 10 good messages, once each");
    })
    .await;
}

/// The PUBACK correlation under stress: publishes race with connections being cut and restored.
/// Whatever the timing, a message reported delivered must have reached the broker (the
/// subscriber, connected directly, receives it), and every call answers within its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivered_always_means_received_under_repeated_cuts() {
    with_fresh_topics(TEST_TIMEOUT, async |base, sub| {
        let connect = async |addr: std::net::SocketAddr| {
            MqttTransport::connect(MqttConfig {
                reconnect_max_delay: Duration::from_millis(200),
                timeout: Duration::from_millis(1500),
                inflight: 10,
                ..config(format!("mqtt://{addr}"), base)
            })
            .await
        };
        let delivered = delivered_under_repeated_cuts(&server(), connect, (97, 150)).await;
        let received: HashSet<String> = sub
            .take(delivered.len(), Duration::from_secs(10))
            .await
            .iter()
            .map(|m| unwrap_envelope(m).id)
            .collect();
        let missing: Vec<&String> = delivered.difference(&received).collect();
        assert!(missing.is_empty(), "reported delivered but never received: {missing:?}");
    })
    .await;
}

// TLS, against Mosquitto brokers of the test's own (`outbox_testkit::tls::mosquitto`: one TLS
// listener, the certificate valid for `localhost` only).

fn tls_config(url: String, ca: Option<String>) -> MqttConfig {
    MqttConfig { tls_ca_file: ca, connect_timeout: Duration::from_secs(5), ..config(url, "tls") }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_ca_file_publishes_and_the_message_arrives() {
    on_tls_server(tls::mosquitto, false, async |pki, port| {
        let mut sub =
            Subscriber::start_at("tls/#", "localhost".into(), port, Some(test_tls_config(pki, false))).await;
        // mqtts:// and ssl:// are the same.
        for (id, scheme) in [(1, "mqtts"), (2, "ssl")] {
            let url = format!("{scheme}://localhost:{port}");
            let t = MqttTransport::connect(tls_config(url.clone(), Some(pki.path("ca.pem"))))
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            t.health().await.unwrap();
            let sent = envelope(id, "order.paid", Some("k"), &format!("tls {id}"), true);
            assert_eq!(t.publish(std::slice::from_ref(&sent)).await, vec![Outcome::Delivered], "{url}");
        }
        let got = sub.envelopes(2, Duration::from_secs(5)).await;
        assert_eq!(got.len(), 2, "{got:?}");
        for (g, id) in got.iter().zip(1..) {
            assert_eq!((g.topic.as_str(), g.id.as_str()), ("tls/order/paid", id.to_string().as_str()));
            assert_eq!(g.payload, format!("tls {id}"));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_certificate_is_presented_and_a_missing_or_foreign_one_is_refused() {
    on_tls_server(tls::mosquitto, true, async |pki, port| {
        let url = format!("mqtts://localhost:{port}");
        let mut sub =
            Subscriber::start_at("tls/#", "localhost".into(), port, Some(test_tls_config(pki, true))).await;
        let (missing, foreign) = client_certificate_required(pki, tls_config, &url).await;
        assert!(missing.contains("requires a client certificate and none was given"), "{missing}");
        assert!(foreign.contains("the server refused this client's certificate"), "{foreign}");
        let got = sub.envelopes(1, Duration::from_secs(5)).await;
        assert_eq!(got.iter().map(|g| g.payload.as_str()).collect::<Vec<_>>(), ["by certificate"]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_unknown_ca_and_wrong_host_name_are_explained() {
    on_tls_server(tls::mosquitto, false, async |pki, port| {
        assert_unknown_ca_and_wrong_host_explained(pki, tls_config, ("mqtts", "relay", port)).await;
    })
    .await;
}

#[tokio::test]
async fn tls_files_that_cannot_be_used_are_configuration_errors_naming_the_key() {
    let plain = ("mqtt://localhost", "needs an mqtts:// URL");
    assert_unusable_tls_files_refused(tls_config, "mqtts://localhost", Some(plain)).await;
}
