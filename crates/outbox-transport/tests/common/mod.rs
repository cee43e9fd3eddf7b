//! Helpers shared by the transport test suites (each suite compiles its own copy).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use outbox_core::{
    header, Envelope, FailureKind, MessageId, OutboxMessage, Outcome, RetryPolicy, Status, Transport,
};
use outbox_relay::{BreakerConfig, Destination, Relay, RelayConfig, Route};
use outbox_store::{Outbox, OutboxDatabase, RelayStore};
use tokio_util::sync::CancellationToken;

/// How long `eventually` waits.
pub(crate) const WAIT: Duration = Duration::from_secs(60);

pub(crate) fn relay_config(owner: &str) -> RelayConfig {
    RelayConfig {
        owner: owner.into(),
        batch_size: 50,
        lease: Duration::from_secs(10),
        idle_interval: Duration::from_millis(100),
        max_in_flight_batches: 2,
        publish_timeout: Duration::from_secs(5),
        shutdown_timeout: Duration::from_secs(5),
        lock_claims: true,
        ..RelayConfig::default()
    }
}

pub(crate) async fn statuses<DB: OutboxDatabase>(outbox: &Outbox<DB>, ids: &[MessageId]) -> Vec<Status> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.push(outbox.get(*id).await.unwrap().expect("message exists").status);
    }
    out
}

pub(crate) async fn wait_all_sent<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    ids: &[MessageId],
    within: Duration,
) {
    let deadline = Instant::now() + within;
    loop {
        let st = statuses(outbox, ids).await;
        if st.iter().all(|s| *s == Status::Sent) {
            return;
        }
        if st.contains(&Status::Failed) {
            let mut why = Vec::new();
            for (id, s) in ids.iter().zip(&st) {
                if *s == Status::Failed {
                    let m = outbox.get(*id).await.unwrap().expect("message exists");
                    why.push(format!("{}: {:?}", id.0, m.last_error));
                }
            }
            panic!("a message failed: {st:?}; why: {why:?}");
        }
        assert!(Instant::now() < deadline, "not all sent in {within:?}: {st:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn kind(o: &Outcome) -> Option<FailureKind> {
    match o {
        Outcome::Failed { kind, .. } => Some(*kind),
        Outcome::Delivered => None,
    }
}

pub(crate) fn reason(o: &Outcome) -> &str {
    match o {
        Outcome::Failed { reason, .. } => reason,
        Outcome::Delivered => "",
    }
}

pub(crate) async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) fn fast_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial: Duration::from_millis(50),
        max_delay: Duration::from_millis(300),
        multiplier: 2.0,
        jitter: 0.0,
    }
}

pub(crate) fn fast_breaker() -> BreakerConfig {
    BreakerConfig {
        failure_threshold: 2,
        cooldown: Duration::from_millis(100),
        max_cooldown: Duration::from_millis(500),
    }
}

pub(crate) fn start_relay<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    name: &str,
    transport: Arc<dyn Transport>,
) -> (CancellationToken, tokio::task::JoinHandle<()>)
where
    Outbox<DB>: RelayStore,
{
    let retry = RetryPolicy {
        max_attempts: 5,
        initial: Duration::from_millis(50),
        max_delay: Duration::from_millis(300),
        multiplier: 2.0,
        jitter: 0.0,
    };
    let breaker = BreakerConfig {
        failure_threshold: 3,
        cooldown: Duration::from_millis(200),
        max_cooldown: Duration::from_secs(1),
    };
    let relay = Relay::builder(outbox.clone(), outbox.signal().clone())
        .config(relay_config(&format!("relay-{}", std::process::id())))
        .destination(Destination::new(name, transport).retry(retry).breaker(breaker))
        .route(Route::new("#", [name]))
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let handle = tokio::spawn(relay.run(stop.clone()));
    (stop, handle)
}

/// An envelope as the relay builds it.
pub(crate) fn envelope(id: i64, topic: &str, key: Option<&str>, payload: &str, trace: bool) -> Envelope {
    let mut e = Envelope {
        id: MessageId(id),
        topic: topic.into(),
        key: key.map(Into::into),
        tag: None,
        payload: payload.into(),
        headers: BTreeMap::new(),
        attempt: 1,
        created_at: "2024-05-01T10:00:00.123Z".parse().unwrap(),
    };
    let h = &mut e.headers;
    h.insert(header::MESSAGE_ID.into(), id.to_string());
    h.insert(header::TOPIC.into(), topic.into());
    h.insert(header::ATTEMPT.into(), "1".into());
    h.insert(header::CREATED_AT.into(), e.created_at.to_rfc3339());
    h.insert(header::BIZ_TYPE.into(), "order".into());
    h.insert(header::BIZ_KEY.into(), format!("biz-{id}"));
    if let Some(k) = key {
        h.insert(header::KEY.into(), k.into());
    }
    if trace {
        h.insert(
            header::TRACEPARENT.into(),
            format!("00-0af7651916cd43dd8448eb211c80{id:04}-b7ad6b7169203331-01"),
        );
    }
    e
}

pub(crate) fn outbox_message(id: i64, topic: &str, payload: &str) -> OutboxMessage {
    let at = "2024-05-01T10:00:00.123456Z";
    OutboxMessage {
        id: MessageId(id),
        biz_type: None,
        biz_key: None,
        topic: topic.into(),
        key: None,
        tag: None,
        headers: BTreeMap::new(),
        payload: payload.into(),
        status: Status::Sending,
        attempts: 0,
        max_attempts: None,
        next_attempt_at: serde_json::from_str(&format!("\"{at}\"")).unwrap(),
        last_attempt_at: None,
        last_error: None,
        lease_owner: None,
        lease_until: None,
        created_by: None,
        updated_by: None,
        created_at: serde_json::from_str(&format!("\"{at}\"")).unwrap(),
        updated_at: serde_json::from_str(&format!("\"{at}\"")).unwrap(),
    }
}

/// A keyed, tagged message with a business key, an app header and (every third) a traceparent.
pub(crate) fn keyed_message(topic: &str, i: usize, keys: usize) -> outbox_core::NewMessage {
    let mut m = outbox_core::NewMessage::new(topic, format!(r#"{{"order":{i}}}"#))
        .key(format!("order-{}", i % keys))
        .tag(if i % 2 == 0 { "paid" } else { "refunded" })
        .biz("order", i.to_string())
        .header("tenant", "t1");
    if i % 3 == 0 {
        m = m.header("traceparent", format!("00-0af7651916cd43dd8448eb211c8{i:05}-b7ad6b7169203331-01"));
    }
    m
}

/// Commits messages `range` (by [`keyed_message`]) ten per transaction; returns their ids.
pub(crate) async fn enqueue_all<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    topic: &str,
    range: std::ops::Range<usize>,
    keys: usize,
    committed: &mut std::collections::HashMap<MessageId, outbox_core::NewMessage>,
) -> Vec<MessageId> {
    let mut ids = Vec::new();
    for chunk in range.collect::<Vec<_>>().chunks(10) {
        let mut tx = outbox.begin().await.unwrap();
        for &i in chunk {
            let m = keyed_message(topic, i, keys);
            let e = tx.enqueue(&m).await.unwrap();
            ids.push(e.id);
            committed.insert(e.id, m);
        }
        tx.commit().await.unwrap();
    }
    ids
}

/// Asserts that `o` is a permanent failure whose reason mentions `needle`, fits a `last_error`
/// column (at most `limits::ERROR` characters) and holds no raw control character.
pub(crate) fn assert_refused(o: &Outcome, needle: &str) {
    match o {
        Outcome::Failed { kind: FailureKind::Permanent, reason, .. } => {
            assert!(reason.contains(needle), "reason {reason:?} does not mention {needle:?}");
            let n = reason.chars().count();
            assert!(n <= outbox_core::limits::ERROR, "reason is {n} characters long");
            assert!(!reason.chars().any(char::is_control), "raw control character in {reason:?}");
        }
        other => panic!("expected a permanent failure mentioning {needle:?}, got {other:?}"),
    }
}
