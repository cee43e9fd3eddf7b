//! The HTTP webhook transport against a real local receiver (axum on 127.0.0.1:0).
#![cfg(feature = "http")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;
#[path = "support/tls_listener.rs"]
mod tls_listener;

use common::*;
use outbox_testkit::tls::Pki;
use tls_listener::{ClientAuth, Handshakes, TlsListener};

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use outbox_core::{Envelope, FailureKind, NewMessage, Outcome, Status, Transport};
use outbox_relay::Destination;
use outbox_transport::http::{
    decode_header_value, envelope_header_name, verify_signature, HttpConfig, HttpTransport, SignatureError,
    WebhookSecret, SIGNATURE_HEADER, TIMESTAMP_HEADER,
};

const SECRET: &str = "test-secret-0123456789";
const WAIT: Duration = Duration::from_secs(60);

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The message headers carried by this request, decoded.
    fn envelope_headers(&self) -> BTreeMap<String, String> {
        self.headers
            .iter()
            .filter_map(|(n, v)| {
                envelope_header_name(n.as_str())
                    .map(|name| (name, decode_header_value(v.to_str().unwrap()).unwrap()))
            })
            .collect()
    }

    fn verify(&self, now: i64) -> Result<(), SignatureError> {
        verify_signature(
            SECRET.as_bytes(),
            self.header(TIMESTAMP_HEADER).unwrap_or(""),
            &self.body,
            self.header(SIGNATURE_HEADER).unwrap_or(""),
            now,
            300,
        )
    }
}

/// How the receiver answers.
#[derive(Debug, Clone)]
enum Answer {
    Ok,
    Status { code: u16, retry_after: Option<&'static str>, body: String },
    Sleep(Duration),
}

#[derive(Clone)]
struct Receiver {
    state: Arc<Mutex<(Vec<Received>, Answer)>>,
    url: String,
    _server: Arc<tokio::task::JoinHandle<()>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        Receiver::serve(listener, format!("http://{addr}"))
    }

    /// An HTTPS receiver on 127.0.0.1 presenting `cert` of `pki` (valid for `localhost` only),
    /// with its URL by that name, and the record of its handshakes.
    async fn start_tls(pki: &Pki, cert: &str, auth: ClientAuth) -> (Receiver, Handshakes) {
        let listener = TlsListener::bind(pki, cert, auth).await;
        let url = format!("https://localhost:{}", listener.port());
        let handshakes = listener.handshakes();
        (Receiver::serve(listener, url), handshakes)
    }

    fn serve<L: axum::serve::Listener<Addr = std::net::SocketAddr>>(listener: L, url: String) -> Receiver {
        let state = Arc::new(Mutex::new((Vec::new(), Answer::Ok)));
        let s2 = state.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let state = s2.clone();
            async move {
                let answer = {
                    let mut s = state.lock().unwrap();
                    s.0.push(Received { path: uri.to_string(), headers, body });
                    s.1.clone()
                };
                respond(answer).await
            }
        });
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { state, url, _server: Arc::new(server) }
    }

    fn answer(&self, a: Answer) {
        self.state.lock().unwrap().1 = a;
    }

    fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().0.clone()
    }

    fn count(&self) -> usize {
        self.state.lock().unwrap().0.len()
    }
}

async fn respond(answer: Answer) -> Response {
    match answer {
        Answer::Ok => StatusCode::NO_CONTENT.into_response(),
        Answer::Status { code, retry_after, body } => {
            let mut r = (StatusCode::from_u16(code).unwrap(), body).into_response();
            if let Some(ra) = retry_after {
                r.headers_mut().insert("retry-after", ra.parse().unwrap());
            }
            r
        }
        Answer::Sleep(d) => {
            tokio::time::sleep(d).await;
            StatusCode::OK.into_response()
        }
    }
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

async fn transport(url: String) -> HttpTransport {
    HttpTransport::connect(HttpConfig::new(url, SECRET)).await.unwrap()
}

// ---------------------------------------------------------------------------------------------

/// Runs `test` within `limit` with a receiver of its own.
async fn with_receiver(limit: Duration, test: impl AsyncFnOnce(&Receiver)) {
    within(limit, async {
        let rx = Receiver::start().await;
        test(&rx).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_signed_requests_with_every_header() {
    with_receiver(WAIT, async |rx| {
        let t = transport(format!("{}/hooks/{{topic}}?v=1", rx.url)).await;

        let m1 = full_message(7, "order.paid", r#"{"order":42}"#, "订单 42", "check out\r\nX-Injected: 1");
        let m2 = outbox_message(8, "audit/x y", "plain");
        let batch = vec![Envelope::new(&m1, 1), Envelope::new(&m2, 4)];
        assert_eq!(t.publish(&batch).await, vec![Outcome::Delivered; 2]);

        let mut got = rx.received();
        assert_eq!(got.len(), 2);
        got.sort_by_key(|r| r.header("outbox-message-id").unwrap().to_owned());
        let now = now();
        for (r, e) in got.iter().zip(&batch) {
            assert_eq!(r.body.as_ref(), e.payload.as_bytes());
            assert_eq!(r.header("content-type"), Some("application/json"));
            assert_eq!(r.verify(now), Ok(()), "a genuine request verifies");
            assert_eq!(r.envelope_headers(), e.headers, "every envelope header travels, decoded exactly");
            assert!(r.header(SIGNATURE_HEADER).unwrap().starts_with("v1="));
            assert!(r.headers.get("x-injected").is_none(), "header values cannot inject headers");

            // Forgeries and replays fail.
            let mut tampered = r.clone();
            tampered.body = Bytes::from(format!("{}x", e.payload));
            assert_eq!(tampered.verify(now), Err(SignatureError::Mismatch));
            assert!(
                matches!(r.verify(now + 301), Err(SignatureError::Stale { .. })),
                "a stale timestamp fails"
            );
            let mut retimed = r.clone();
            retimed.headers.insert(TIMESTAMP_HEADER, (now + 1).to_string().parse().unwrap());
            assert!(retimed.verify(now).is_err(), "the timestamp is signed");
        }
        assert_eq!(got[0].path, "/hooks/order.paid?v=1");
        assert_eq!(got[1].path, "/hooks/audit%2Fx%20y?v=1", "the topic is percent-encoded into the URL");
        let h = &got[0];
        assert_eq!(h.header("outbox-message-id"), Some("7"));
        assert_eq!(h.header("outbox-topic"), Some("order.paid"));
        assert_eq!(h.header("outbox-attempt"), Some("1"));
        assert_eq!(h.header("outbox-biz-type"), Some("order"));
        assert_eq!(h.header("outbox-biz-key"), Some("%E8%AE%A2%E5%8D%95%2042"));
        assert_eq!(h.header("outbox-key"), Some("order-42"));
        assert_eq!(h.header("outbox-created-at"), Some(m1.created_at.to_rfc3339().as_str()));
        assert_eq!(h.header("traceparent"), Some(TRACEPARENT));
        assert_eq!(h.header("outbox-header-source"), Some("check%20out%0D%0AX-Injected:%201"));
        assert_eq!(got[1].header("outbox-attempt"), Some("4"));
        assert!(got[1].header("outbox-biz-key").is_none());
        assert!(t.health().await.is_ok());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_headers_content_type_and_unsigned_mode() {
    with_receiver(WAIT, async |rx| {
        let mut cfg = HttpConfig::new(format!("{}/in", rx.url), SECRET);
        cfg.secret = None;
        cfg.unsigned = true;
        cfg.content_type = "text/plain; charset=utf-8".into();
        cfg.headers.insert("Authorization".into(), "Bearer abc.def".into());
        let t = HttpTransport::connect(cfg).await.unwrap();
        assert_eq!(
            t.publish(&[Envelope::new(&outbox_message(1, "t", "hello"), 1)]).await,
            vec![Outcome::Delivered]
        );
        let r = &rx.received()[0];
        assert_eq!(r.path, "/in");
        assert_eq!(r.header("authorization"), Some("Bearer abc.def"));
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert!(r.header(SIGNATURE_HEADER).is_none() && r.header(TIMESTAMP_HEADER).is_none());
        assert!(!format!("{t:?}").contains("abc.def"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_classified() {
    with_receiver(WAIT, async |rx| {
        let t = transport(format!("{}/hook", rx.url)).await;
        let one = [Envelope::new(&outbox_message(1, "t", "{}"), 1)];

        rx.answer(Answer::Status {
            code: 400,
            retry_after: None,
            body: format!("bad field 'x' {}", "y".repeat(2000)),
        });
        let out = t.publish(&one).await;
        let (kind, reason, _) = failure(&out[0]);
        assert_eq!(kind, FailureKind::Permanent);
        assert!(reason.starts_with("HTTP 400 Bad Request: bad field 'x'"), "{reason}");
        assert!(reason.len() <= 300, "the body snippet is bounded: {} bytes", reason.len());

        rx.answer(Answer::Status { code: 422, retry_after: None, body: format!("echo {SECRET}") });
        let (kind, reason, _) = failure(&t.publish(&one).await[0]);
        assert_eq!(kind, FailureKind::Permanent);
        assert!(!reason.contains(SECRET), "a secret echoed by the receiver is scrubbed: {reason}");

        rx.answer(Answer::Status { code: 429, retry_after: Some("7"), body: String::new() });
        let (kind, reason, retry_after) = failure(&t.publish(&one).await[0]);
        assert_eq!((kind, retry_after), (FailureKind::Retryable, Some(Duration::from_secs(7))), "{reason}");

        rx.answer(Answer::Status { code: 500, retry_after: None, body: "boom".into() });
        let (kind, reason, _) = failure(&t.publish(&one).await[0]);
        assert_eq!(kind, FailureKind::Retryable);
        assert_eq!(reason, "HTTP 500 Internal Server Error: boom");

        rx.answer(Answer::Status { code: 503, retry_after: Some("2"), body: String::new() });
        let (kind, _, retry_after) = failure(&t.publish(&one).await[0]);
        assert_eq!((kind, retry_after), (FailureKind::Unavailable, Some(Duration::from_secs(2))));

        rx.answer(Answer::Status { code: 408, retry_after: None, body: String::new() });
        assert_eq!(failure(&t.publish(&one).await[0]).0, FailureKind::Retryable);

        rx.answer(Answer::Status { code: 302, retry_after: None, body: String::new() });
        assert_eq!(
            failure(&t.publish(&one).await[0]).0,
            FailureKind::Permanent,
            "redirects are not followed"
        );

        // Timeout: the receiver takes longer than `timeout`.
        let mut cfg = HttpConfig::new(format!("{}/slow", rx.url), SECRET);
        cfg.timeout = Duration::from_millis(300);
        let slow = HttpTransport::connect(cfg).await.unwrap();
        rx.answer(Answer::Sleep(Duration::from_secs(3)));
        let started = Instant::now();
        let (kind, reason, _) = failure(&slow.publish(&one).await[0]);
        assert_eq!(kind, FailureKind::Unavailable);
        assert!(reason.contains("timed out"), "{reason}");
        assert!(started.elapsed() < Duration::from_secs(2));
        rx.answer(Answer::Ok);

        // Mixed batch: each envelope gets its own outcome, in order.
        let mut bad = outbox_message(3, "t", "x");
        bad.headers.insert("bad name".into(), "v".into());
        let mut cfg = HttpConfig::new(format!("{}/hook", rx.url), SECRET);
        cfg.max_payload_bytes = 100;
        let small = HttpTransport::connect(cfg).await.unwrap();
        let before = rx.count();
        let batch = [
            Envelope::new(&outbox_message(1, "t", "ok"), 1),
            Envelope::new(&outbox_message(2, "t", &"z".repeat(101)), 1),
            Envelope::new(&bad, 1),
            Envelope::new(&outbox_message(4, "t", "ok"), 1),
        ];
        let out = small.publish(&batch).await;
        assert_eq!(out[0], Outcome::Delivered);
        let (kind, reason, _) = failure(&out[1]);
        assert!(kind == FailureKind::Permanent && reason.contains("max_payload_bytes"), "{reason}");
        let (kind, reason, _) = failure(&out[2]);
        assert!(kind == FailureKind::Permanent && reason.contains("bad name"), "{reason}");
        assert_eq!(out[3], Outcome::Delivered);
        assert_eq!(rx.count() - before, 2, "no request for messages that fail before sending");
    })
    .await;
}

/// Issue 14, finding 8: with the URL template `/tenant-a/hooks/{topic}/deliver`, a row with
/// topic `..` was POSTed, signed, to `/tenant-a/deliver`. Now every topic is encoded as one path
/// segment (or one query value): whatever the topic, the request path the receiver sees stays
/// under `/tenant-a/hooks/`, and a topic whose URL would still climb (a dot segment, which URL
/// normalisation resolves even when encoded) is refused. Finding 4 on HTTP: header names that
/// are no HTTP token fail alone, with a bounded reason; the good messages are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_never_leave_the_url_template_and_bad_headers_fail_alone() {
    with_receiver(WAIT, async |rx| {
        let t = transport(format!("{}/tenant-a/hooks/{{topic}}/deliver", rx.url)).await;
        let msg =
            |i: i64, topic: &str| Envelope::new(&outbox_message(i, topic, &format!(r#"{{"n":{i}}}"#)), 1);
        let with_header = |i: i64, name: &str| {
            let mut m = outbox_message(i, "order.paid", "{}");
            m.headers.insert(name.to_owned(), "v".into());
            Envelope::new(&m, 1)
        };
        let batch = vec![
            msg(1, "order.paid"),
            msg(2, ".."),
            msg(3, "a/../../x"),
            msg(4, "?x=1"),
            msg(5, "."),
            msg(6, "#frag"),
            msg(7, "a\\..\\x"),
            msg(8, "%2E%2E"),
            msg(9, "..."),
            with_header(10, &format!("{} x", "n".repeat(70_000))),
            with_header(11, "a\r\nInjected"),
            msg(12, "order.shipped"),
        ];
        let out = t.publish(&batch).await;
        for i in [1, 4] {
            assert_refused(&out[i], "would change the URL's path");
            assert_refused(&out[i], "\"/tenant-a/hooks/\"");
        }
        assert_refused(&out[9], "cannot be sent: U+0020 (space) is not allowed in an HTTP header name");
        assert!(reason(&out[9]).len() < 400, "the 70 KB name is not quoted whole");
        assert_refused(&out[10], "U+000D (carriage return)");
        for i in [0, 2, 3, 5, 6, 7, 8, 11] {
            assert_eq!(out[i], Outcome::Delivered, "message at {i}: {:?}", out[i]);
        }

        let got = rx.received();
        assert_eq!(got.len(), 8, "no request for a refused message");
        for r in &got {
            assert!(r.path.starts_with("/tenant-a/hooks/") && r.path.ends_with("/deliver"), "{}", r.path);
            assert_eq!(r.path.matches('/').count(), 4, "one segment for the topic: {}", r.path);
            assert!(!r.path.contains('?') && !r.path.contains('#'), "{}", r.path);
            r.verify(now()).unwrap();
        }
        let mut paths: Vec<&str> = got.iter().map(|r| r.path.as_str()).collect();
        paths.sort_unstable();
        let mut want = vec![
            "/tenant-a/hooks/order.paid/deliver",
            "/tenant-a/hooks/a%2F..%2F..%2Fx/deliver",
            "/tenant-a/hooks/%3Fx%3D1/deliver",
            "/tenant-a/hooks/%23frag/deliver",
            "/tenant-a/hooks/a%5C..%5Cx/deliver",
            "/tenant-a/hooks/%252E%252E/deliver",
            "/tenant-a/hooks/%2E%2E%2E/deliver",
            "/tenant-a/hooks/order.shipped/deliver",
        ];
        want.sort_unstable();
        assert_eq!(paths, want);

        // In the query, a topic is one value: it cannot add a parameter or a fragment.
        let q = transport(format!("{}/hooks?topic={{topic}}&v=1", rx.url)).await;
        assert_eq!(q.publish(&[msg(20, "a&v=2#x")]).await, vec![Outcome::Delivered]);
        assert_eq!(q.publish(&[msg(21, "..")]).await, vec![Outcome::Delivered]);
        let got = rx.received();
        assert_eq!(got[8].path, "/hooks?topic=a%26v%3D2%23x&v=1");
        assert_eq!(got[9].path, "/hooks?topic=..&v=1");

        // The same transport keeps sending.
        assert_eq!(t.publish(&[msg(30, "order.paid")]).await, vec![Outcome::Delivered]);
        assert_eq!(rx.count(), 11);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_receiver_is_unavailable_and_config_errors_name_the_key() {
    within(WAIT, async {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let t = transport(format!("http://user:pa55w0rd@127.0.0.1:{port}/hook")).await;
        let out = t.publish(&[Envelope::new(&outbox_message(1, "t", "{}"), 1)]).await;
        let (kind, reason, _) = failure(&out[0]);
        assert_eq!(kind, FailureKind::Unavailable, "{reason}");
        assert!(reason.contains("cannot connect"), "{reason}");
        assert!(!reason.contains("pa55w0rd"), "{reason}");
        let health = t.health().await.unwrap_err();
        assert!(!health.contains("pa55w0rd"), "{health}");
        assert!(!format!("{t:?}").contains("pa55w0rd") && !format!("{t:?}").contains(SECRET));

        let no_dns = transport("http://outbox-test-no-such-host.invalid/hook".into()).await;
        let (kind, _, _) =
            failure(&no_dns.publish(&[Envelope::new(&outbox_message(1, "t", "{}"), 1)]).await[0]);
        assert_eq!(kind, FailureKind::Unavailable);

        let invalid = vec![
            (HttpConfig::new("ftp://h/x", SECRET), "url"),
            (HttpConfig::new("http://h/{nope}", SECRET), "url"),
            (HttpConfig::new("http://h/x", "short"), "secret"),
            (HttpConfig { secret: None, ..HttpConfig::new("http://h/x", SECRET) }, "secret"),
            (HttpConfig { timeout: Duration::ZERO, ..HttpConfig::new("http://h/x", SECRET) }, "timeout"),
            (HttpConfig { concurrency: 0, ..HttpConfig::new("http://h/x", SECRET) }, "concurrency"),
        ];
        for reason in assert_invalid_named("http", HttpTransport::connect, invalid).await {
            assert!(!reason.contains(SECRET));
        }
        let json = r#"{"url":"http://h","secret":"0123456789abcdef","timeout_ms":5}"#;
        assert_unknown_key_refused::<HttpConfig>(json, "timeout_ms");
        let _ = WebhookSecret::new("x");
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Through the relay.

/// Requests per message id, checking each signature.
fn by_id(rx: &Receiver) -> HashMap<String, Vec<Received>> {
    let now = now();
    let mut out: HashMap<String, Vec<Received>> = HashMap::new();
    for r in rx.received() {
        assert_eq!(r.verify(now), Ok(()));
        out.entry(r.header("outbox-message-id").unwrap().to_owned()).or_default().push(r);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_to_end_through_the_relay_exactly_once_without_faults() {
    with_receiver(Duration::from_secs(120), async |rx| {
        let t = Arc::new(transport(format!("{}/events/{{topic}}", rx.url)).await);
        let destination = Destination::new("webhook", t).retry(fast_retry(5));
        with_relay(sqlite_outbox().await, destination, async |outbox| {
            let ids: Vec<_> = commit_orders(outbox).await.into_keys().collect();
            eventually("every committed message is received", || {
                let n = rx.count();
                async move { n >= 200 }
            })
            .await;
            wait_all_sent(outbox, &ids, WAIT).await;
            // A grace period, not a wait for an event: a duplicate would arrive now.
            tokio::time::sleep(Duration::from_millis(500)).await;

            let got = by_id(rx);
            assert_eq!(got.len(), 200);
            assert_eq!(rx.count(), 200, "exactly once without faults");
            for id in &ids {
                let reqs = got.get(&id.to_string()).unwrap_or_else(|| panic!("message {id} never arrived"));
                let m = outbox.get(*id).await.unwrap().unwrap();
                assert_eq!(reqs[0].body.as_ref(), m.payload.as_bytes());
                assert_eq!(reqs[0].path, format!("/events/{}", m.topic));
                assert_eq!(reqs[0].header("outbox-biz-key"), m.biz_key.as_deref());
            }
        })
        .await;
        assert!(
            rx.received().iter().all(|r| r.body.as_ref() != b"phantom"),
            "a rolled-back message was sent"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receiver_outage_then_recovery_delivers_everything_and_a_400_fails() {
    with_receiver(Duration::from_secs(120), async |rx| {
        let t = Arc::new(transport(format!("{}/hook", rx.url)).await);
        // Few attempts: if the 503s cost attempts, messages would end `failed`.
        let destination = Destination::new("webhook", t).retry(fast_retry(3)).breaker(fast_breaker());
        with_relay(sqlite_outbox().await, destination, async |outbox| {
            rx.answer(Answer::Status { code: 503, retry_after: None, body: "maintenance".into() });
            let mut ids = Vec::new();
            for n in 0..40 {
                let m = NewMessage::new("evt", format!("m{n}")).key(format!("k{}", n % 4));
                ids.push(outbox.enqueue(&m).await.unwrap().id);
            }
            // More requests than messages: the relay came back to a message after an outage
            // answer (it keeps probing), and that must not have cost an attempt.
            let messages = ids.len();
            eventually("the relay probed the receiver again", || {
                let n = rx.count();
                async move { n > messages }
            })
            .await;
            assert_outage_costs_no_attempt(outbox, &ids).await;

            rx.answer(Answer::Ok);
            wait_all_sent(outbox, &ids, WAIT).await;
            let got = by_id(rx);
            for id in &ids {
                assert!(got.contains_key(&id.to_string()), "message {id} never arrived");
            }

            // A 400 fails the message at once with its reason.
            rx.answer(Answer::Status { code: 400, retry_after: None, body: "unknown event".into() });
            let bad = outbox.enqueue(&NewMessage::new("evt", "rejected")).await.unwrap().id;
            eventually("the rejected message is failed", || async {
                outbox.get(bad).await.unwrap().unwrap().status == Status::Failed
            })
            .await;
            let m = outbox.get(bad).await.unwrap().unwrap();
            let err = m.last_error.unwrap();
            assert!(err.contains("400") && err.contains("unknown event"), "{err}");
            assert_eq!(m.attempts, 1);
        })
        .await;
    })
    .await;
}

// --- TLS ---------------------------------------------------------------------------------------

/// The reason of a failed outcome, asserting its kind.
fn failed(o: &Outcome, want: FailureKind) -> String {
    match o {
        Outcome::Failed { kind, reason, .. } if *kind == want => reason.clone(),
        other => panic!("expected a {want:?} failure, got {other:?}"),
    }
}

fn with_tls(url: String, ca: Option<String>, client: Option<(String, String)>) -> HttpConfig {
    let (cert, key) = client.unzip();
    HttpConfig { tls_ca_file: ca, tls_cert_file: cert, tls_key_file: key, ..HttpConfig::new(url, SECRET) }
}

async fn publish_one(cfg: HttpConfig) -> Outcome {
    let t = HttpTransport::connect(cfg).await.unwrap();
    t.publish(&[Envelope::new(&outbox_message(1, "tls.test", r#"{"a":1}"#), 1)]).await.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_the_test_ca_delivers_and_server_certificate_problems_are_explained() {
    within(WAIT, async {
        let pki = Pki::new();
        let (rx, handshakes) = Receiver::start_tls(&pki, "server", ClientAuth::None).await;
        let ca = Some(pki.path("ca.pem"));

        // (a) The test CA given: the request really arrives, over TLS.
        let o = publish_one(with_tls(format!("{}/in/{{topic}}", rx.url), ca.clone(), None)).await;
        assert_eq!(o, Outcome::Delivered);
        let got = rx.received();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].path, "/in/tls.test");
        assert_eq!(got[0].body.as_ref(), br#"{"a":1}"#);
        assert_eq!(got[0].verify(now()), Ok(()));
        assert_eq!(handshakes.lock().unwrap().first(), Some(&Ok(false)), "a TLS handshake, no client cert");

        // (c) No CA given (the system store does not know the test CA), or the wrong one.
        for ca in [None, Some(pki.path("other-ca.pem"))] {
            let o = publish_one(with_tls(format!("{}/in", rx.url), ca, None)).await;
            let reason = failed(&o, FailureKind::Unavailable);
            assert!(reason.starts_with(&format!("{}/in: cannot connect", rx.url)), "{reason}");
            assert!(reason.contains("not signed by a CA this client trusts"), "{reason}");
        }

        // (d) The certificate is for `localhost`, the URL says 127.0.0.1.
        let ip_url = rx.url.replace("localhost", "127.0.0.1");
        let o = publish_one(with_tls(format!("{ip_url}/in"), ca.clone(), None)).await;
        let reason = failed(&o, FailureKind::Unavailable);
        assert!(reason.contains("not valid for the host name"), "{reason}");

        // An expired certificate.
        let (old, _) = Receiver::start_tls(&pki, "expired", ClientAuth::None).await;
        let o = publish_one(with_tls(format!("{}/in", old.url), ca.clone(), None)).await;
        let reason = failed(&o, FailureKind::Unavailable);
        assert!(reason.contains("certificate has expired"), "{reason}");
        assert_eq!(rx.count(), 1, "nothing arrived but the one request");
        let t = HttpTransport::connect(with_tls(rx.url.clone(), ca, None)).await.unwrap();
        assert!(t.health().await.is_ok());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_client_certificates_are_sent_and_refusals_explained() {
    within(WAIT, async {
        let pki = Pki::new();
        let (rx, handshakes) = Receiver::start_tls(&pki, "server", ClientAuth::Required).await;
        let ca = Some(pki.path("ca.pem"));
        let pair = |name: &str| Some((pki.path(&format!("{name}.pem")), pki.path(&format!("{name}.key"))));

        // (b) Accepted with the client certificate the test CA signed.
        let o = publish_one(with_tls(format!("{}/in", rx.url), ca.clone(), pair("client"))).await;
        assert_eq!(o, Outcome::Delivered);
        assert_eq!(rx.count(), 1);
        assert_eq!(
            handshakes.lock().unwrap().last(),
            Some(&Ok(true)),
            "the client certificate was presented"
        );

        // Refused without one... (The server's TLS 1.3 alert explains why, unless it arrives
        // before hyper's connection is ready: hyper then reports only that the connection closed
        // before the request was sent, and the reason says what that may mean. Either way the
        // destination is unavailable, not the message failed; the server's own log below shows
        // both handshakes were refused.)
        let explained = |reason: &str, why: &str| {
            reason.contains(why) || reason.contains("the server may have refused this client's certificate")
        };
        let o = publish_one(with_tls(format!("{}/in", rx.url), ca.clone(), None)).await;
        let reason = failed(&o, FailureKind::Unavailable);
        assert!(reason.starts_with(&format!("{}/in: ", rx.url)), "{reason}");
        assert!(explained(&reason, "requires a client certificate and none was given"), "{reason}");

        // ... and with one the server's CA did not sign.
        let o = publish_one(with_tls(format!("{}/in", rx.url), ca, pair("stranger"))).await;
        let reason = failed(&o, FailureKind::Unavailable);
        assert!(explained(&reason, "refused this client's certificate"), "{reason}");
        assert_eq!(rx.count(), 1, "the refused requests never arrived");
        // The client hears the refusal before the server's accept loop records it.
        let refusals = || handshakes.lock().unwrap().iter().filter(|h| h.is_err()).count();
        outbox_testkit::eventually_within(
            Duration::from_secs(10),
            "the server recorded both refusals",
            || {
                let n = refusals();
                async move { n >= 2 }
            },
        )
        .await;
        let refused = refusals();
        assert_eq!(refused, 2, "{:?}", handshakes.lock().unwrap());
    })
    .await;
}

#[tokio::test]
async fn tls_file_errors_name_the_key() {
    let config = |url: String, _: Option<String>| HttpConfig::new(url, SECRET);
    let plain = ("http://localhost:9/in", "needs an https:// URL");
    assert_unusable_tls_files_refused(config, "https://localhost:9/in", Some(plain)).await;
}
