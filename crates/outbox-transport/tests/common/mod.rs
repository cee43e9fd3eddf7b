//! Helpers shared by the transport test suites (each suite compiles its own copy).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::{
    header, Envelope, FailureKind, MessageId, NewMessage, OutboxMessage, Outcome, RetryPolicy, Status,
    Transport,
};
use outbox_relay::{BreakerConfig, Destination, Relay, RelayConfig, Route};
use outbox_store::{Outbox, OutboxDatabase, RelayStore};
use outbox_testkit::proxy::TcpProxy;
use outbox_testkit::TestDb;
use outbox_transport::TransportError;
use sqlx::{Postgres, Sqlite};
use tokio_util::sync::CancellationToken;

/// How long `eventually` waits.
pub(crate) const WAIT: Duration = Duration::from_secs(60);

/// The value of the environment variable `var` (a server's address), or `default`.
pub(crate) fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.into())
}

/// `<prefix>_<pid>_<n>_<nanos>`: a name no other test (or test process) uses.
pub(crate) fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}_{}_{}_{:x}", std::process::id(), N.fetch_add(1, Ordering::Relaxed), nanos)
}

/// A migrated outbox on a fresh PostgreSQL database.
pub(crate) async fn pg_outbox() -> (TestDb<Postgres>, Outbox<Postgres>) {
    let db = outbox_testkit::fresh_pg().await;
    let outbox = Outbox::new(db.pool.clone());
    outbox.migrate().await.unwrap();
    (db, outbox)
}

/// A migrated outbox on a fresh SQLite file.
pub(crate) async fn sqlite_outbox() -> (TestDb<Sqlite>, Outbox<Sqlite>) {
    let db = outbox_testkit::fresh_sqlite().await;
    let outbox = Outbox::new(db.pool.clone());
    outbox.migrate().await.unwrap();
    (db, outbox)
}

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

/// Waits until one of `ids` is sent (the relay has started publishing them).
pub(crate) async fn wait_any_sent<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    ids: &[MessageId],
    within: Duration,
) {
    let deadline = Instant::now() + within;
    while !statuses(outbox, ids).await.contains(&Status::Sent) {
        assert!(Instant::now() < deadline, "none of {} messages sent within {within:?}", ids.len());
        tokio::time::sleep(Duration::from_millis(5)).await;
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

/// Runs a relay on `outbox` (owner `owner`) that routes every topic to `destination`, named
/// `name`; cancel the token to stop it.
pub(crate) fn spawn_relay<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    owner: &str,
    name: &str,
    destination: Destination,
) -> (CancellationToken, tokio::task::JoinHandle<()>)
where
    Outbox<DB>: RelayStore,
{
    let relay = Relay::builder(outbox)
        .config(relay_config(owner))
        .destination(destination)
        .route(Route::new("#", [name]))
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let handle = tokio::spawn(relay.run(stop.clone()));
    (stop, handle)
}

/// [`spawn_relay`] with `transport` as destination `name`: five fast attempts, a breaker that
/// opens after three outages.
pub(crate) fn start_relay<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    name: &str,
    transport: Arc<dyn Transport>,
) -> (CancellationToken, tokio::task::JoinHandle<()>)
where
    Outbox<DB>: RelayStore,
{
    let breaker = BreakerConfig {
        failure_threshold: 3,
        cooldown: Duration::from_millis(200),
        max_cooldown: Duration::from_secs(1),
    };
    let destination = Destination::new(name, transport).retry(fast_retry(5)).breaker(breaker);
    spawn_relay(outbox, &format!("relay-{}", std::process::id()), name, destination)
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
pub(crate) fn keyed_message(topic: &str, i: usize, keys: usize) -> NewMessage {
    let mut m = NewMessage::new(topic, format!(r#"{{"order":{i}}}"#))
        .key(format!("order-{}", i % keys))
        .tag(if i.is_multiple_of(2) { "paid" } else { "refunded" })
        .biz("order", i.to_string())
        .header("tenant", "t1");
    if i.is_multiple_of(3) {
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
    committed: &mut HashMap<MessageId, NewMessage>,
) -> Vec<MessageId> {
    enqueue_with(outbox, range, |i| keyed_message(topic, i, keys), committed).await
}

/// Commits the messages `make` builds for `range`, ten per transaction, into `committed`;
/// returns their ids in commit order.
pub(crate) async fn enqueue_with<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    range: std::ops::Range<usize>,
    make: impl Fn(usize) -> NewMessage,
    committed: &mut HashMap<MessageId, NewMessage>,
) -> Vec<MessageId> {
    let mut ids = Vec::new();
    for chunk in range.collect::<Vec<_>>().chunks(10) {
        let mut tx = outbox.begin().await.unwrap();
        for &i in chunk {
            let m = make(i);
            let e = tx.enqueue(&m).await.unwrap();
            ids.push(e.id);
            committed.insert(e.id, m);
        }
        tx.commit().await.unwrap();
    }
    ids
}

/// Enqueues a message with payload `phantom` on `topic` and rolls it back: it must never be
/// published.
pub(crate) async fn rolled_back_phantom<DB: OutboxDatabase>(outbox: &Outbox<DB>, topic: &str) {
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(&NewMessage::new(topic, "phantom").key("order-1")).await.unwrap();
    tx.rollback().await.unwrap();
}

/// Message `i` of an order stream: keyed by one of seven orders, with a business key and
/// (every third) a traceparent.
pub(crate) fn message(topic: &str, i: usize) -> NewMessage {
    let mut m = NewMessage::new(topic, format!(r#"{{"order":{i}}}"#))
        .key(format!("order-{}", i % 7))
        .biz("order", i.to_string());
    if i.is_multiple_of(3) {
        m = m.header("traceparent", format!("00-0af7651916cd43dd8448eb211c8{i:05}-b7ad6b7169203331-01"));
    }
    m
}

/// A rolled-back phantom, then 200 [`message`]s (`order.paid` and `order.refunded`) committed
/// ten per transaction.
pub(crate) async fn commit_orders<DB: OutboxDatabase>(outbox: &Outbox<DB>) -> HashMap<MessageId, NewMessage> {
    rolled_back_phantom(outbox, "order.paid").await;
    let mut committed = HashMap::new();
    let topic = |i: usize| if i.is_multiple_of(2) { "order.paid" } else { "order.refunded" };
    enqueue_with(outbox, 0..200, |i| message(topic(i), i), &mut committed).await;
    committed
}

/// The outage scenario, with a relay publishing from `outbox` through `proxy`: 60 messages,
/// the link cut as soon as the relay has published one of them, 60 more while it is cut. For
/// 3 s of outage none of the later ones is sent and no message fails; once the link is
/// restored, every message is sent. Returns the committed messages.
pub(crate) async fn outage_then_restore<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    proxy: &TcpProxy,
) -> HashMap<MessageId, NewMessage> {
    let mut committed = HashMap::new();
    let first = enqueue_one_by_one(outbox, 0..60, &mut committed).await;
    // Cut as soon as the relay has started publishing.
    wait_any_sent(outbox, &first, Duration::from_secs(20)).await;
    proxy.cut();
    let second = enqueue_one_by_one(outbox, 60..120, &mut committed).await;
    // An observation window, not a wait for an event: nothing may happen while cut.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = statuses(outbox, &second).await;
    assert!(st.iter().all(|s| matches!(s, Status::Pending | Status::Sending)), "while cut: {st:?}");
    let all: Vec<MessageId> = committed.keys().copied().collect();
    assert!(!statuses(outbox, &all).await.contains(&Status::Failed), "an outage must not fail messages");

    proxy.restore();
    wait_all_sent(outbox, &all, Duration::from_secs(40)).await;
    committed
}

async fn enqueue_one_by_one<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    range: std::ops::Range<usize>,
    committed: &mut HashMap<MessageId, NewMessage>,
) -> Vec<MessageId> {
    let mut ids = Vec::new();
    for i in range {
        let m = message("order.paid", i);
        let e = outbox.enqueue(&m).await.unwrap();
        ids.push(e.id);
        committed.insert(e.id, m);
    }
    ids
}

/// Publishes `stress` envelopes through `t` for 8 s while `proxy` cuts and restores its
/// connections (up for `up_ms.0 + (n * 37) % up_ms.1` ms, then down for 50 to 250 ms). Every
/// call answers within 2.5 s and each envelope is delivered or unavailable, some of each.
/// Returns the ids (as text) of the delivered ones, for the caller to find at the broker.
pub(crate) async fn delivered_under_repeated_cuts(
    t: &dyn Transport,
    proxy: Arc<TcpProxy>,
    up_ms: (u64, u64),
) -> HashSet<String> {
    let flapping = CancellationToken::new();
    let flapper = {
        let (proxy, flapping) = (proxy.clone(), flapping.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !flapping.is_cancelled() {
                tokio::time::sleep(Duration::from_millis(up_ms.0 + (n * 37) % up_ms.1)).await;
                proxy.cut();
                tokio::time::sleep(Duration::from_millis(50 + (n * 53) % 200)).await;
                proxy.restore();
                n += 1;
            }
        })
    };
    let mut delivered = HashSet::new();
    let mut unavailable = 0;
    let mut id = 0;
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        let batch: Vec<Envelope> = (0..25)
            .map(|_| {
                id += 1;
                envelope(id, "stress", None, &format!("m{id}"), false)
            })
            .collect();
        // Every publish answers (its own timeout bounds it); how fast is not this test's
        // business, only that no cut leaves it hanging.
        let outcomes = tokio::time::timeout(Duration::from_secs(60), t.publish(&batch))
            .await
            .expect("a publish never answered while the connection flapped");
        assert_eq!(outcomes.len(), batch.len());
        for (e, o) in batch.iter().zip(&outcomes) {
            match kind(o) {
                None => {
                    delivered.insert(e.id.to_string());
                }
                Some(FailureKind::Unavailable) => unavailable += 1,
                Some(k) => panic!("unexpected {k:?}: {o:?}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    flapping.cancel();
    flapper.await.unwrap();
    proxy.restore();
    eprintln!("{} delivered, {unavailable} unavailable", delivered.len());
    assert!(!delivered.is_empty() && unavailable > 0, "the cuts raced with publishes");
    delivered
}

/// Publishes `e` until it is delivered (each failure must be `Unavailable`); panics after
/// `within`.
pub(crate) async fn publish_until_delivered(t: &dyn Transport, e: Envelope, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let o = t.publish(std::slice::from_ref(&e)).await;
        if o[0] == Outcome::Delivered {
            return;
        }
        assert_eq!(kind(&o[0]), Some(FailureKind::Unavailable), "{o:?}");
        assert!(Instant::now() < deadline, "no recovery after restore");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Publishes, through `t` (limited to 1024 bytes), a 2000-byte message on key `k`, another on
/// `k` and one on another key: the first fails permanently before it is sent, its reason
/// containing `limit`; the second is held back behind it (unavailable); the third is delivered.
pub(crate) async fn assert_oversized_fails_and_holds_back_its_key(t: &dyn Transport, limit: &str) {
    assert_eq!(t.max_payload_bytes(), Some(1024));
    let o = t
        .publish(&[
            envelope(1, "a", Some("k"), &"x".repeat(2000), false),
            envelope(2, "a", Some("k"), "fine", false),
            envelope(3, "a", Some("other"), "fine", false),
        ])
        .await;
    assert_eq!(kind(&o[0]), Some(FailureKind::Permanent));
    assert!(reason(&o[0]).contains(limit), "{}", reason(&o[0]));
    assert_eq!(kind(&o[1]), Some(FailureKind::Unavailable), "held back behind its key: {o:?}");
    assert_eq!(o[2], Outcome::Delivered);
}

/// `connect(url)` with `url` = `<scheme>://relay:s3cret@127.0.0.1:1` (nobody listens) fails
/// within 10 s with a `Connect` error of `transport` that shows the URL, password redacted.
pub(crate) async fn assert_unreachable_is_redacted<T, Fut>(
    scheme: &str,
    transport: &str,
    connect: impl FnOnce(String) -> Fut,
) where
    T: std::fmt::Debug,
    Fut: Future<Output = Result<T, TransportError>>,
{
    let started = Instant::now();
    let e = connect(format!("{scheme}://relay:s3cret@127.0.0.1:1")).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    let text = e.to_string();
    assert!(matches!(&e, TransportError::Connect { transport: t, .. } if *t == transport), "{e:?}");
    assert!(
        text.contains(&format!("{scheme}://relay:***@127.0.0.1:1")) && !text.contains("s3cret"),
        "{text}"
    );
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
