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
use outbox_relay::{BreakerConfig, Destination, Relay, Route};
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

pub(crate) use outbox_relay::testing::relay_config;

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

/// The kind, reason and `retry_after` of a failure (panics on `Delivered`).
pub(crate) fn failure(o: &Outcome) -> (FailureKind, String, Option<Duration>) {
    match o {
        Outcome::Failed { kind, reason, retry_after } => (*kind, reason.clone(), *retry_after),
        Outcome::Delivered => panic!("expected a failure, got Delivered"),
    }
}

pub(crate) fn reason(o: &Outcome) -> &str {
    match o {
        Outcome::Failed { reason, .. } => reason,
        Outcome::Delivered => "",
    }
}

/// At least `expected` items from `next` (waiting at most `wait` for them), then whatever else
/// arrives within a short grace period (a duplicate would); fewer when `next` ends.
pub(crate) async fn arrivals<T>(
    expected: usize,
    wait: Duration,
    mut next: impl AsyncFnMut() -> Option<T>,
) -> Vec<T> {
    let mut out = Vec::new();
    let deadline = Instant::now() + wait;
    loop {
        let limit = if out.len() < expected {
            deadline.saturating_duration_since(Instant::now())
        } else {
            Duration::from_millis(300)
        };
        match tokio::time::timeout(limit, next()).await {
            Ok(Some(item)) => out.push(item),
            _ => return out,
        }
    }
}

pub(crate) use outbox_testkit::eventually;

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

/// `test`, which must end within `limit`.
pub(crate) async fn within<T>(limit: Duration, test: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, test).await.expect("test timed out")
}

/// Destination `name` publishing through `transport` as most tests want it: five fast attempts,
/// a breaker that opens after three outages.
pub(crate) fn destination(name: &str, transport: Arc<dyn Transport>) -> Destination {
    let breaker = BreakerConfig {
        failure_threshold: 3,
        cooldown: Duration::from_millis(200),
        max_cooldown: Duration::from_secs(1),
    };
    Destination::new(name, transport).retry(fast_retry(5)).breaker(breaker)
}

/// A test database that can be dropped when the test is done with it.
pub(crate) trait Disposable {
    async fn dispose(self);
}

impl Disposable for TestDb<Postgres> {
    async fn dispose(self) {
        self.drop_db().await;
    }
}

impl Disposable for TestDb<Sqlite> {
    async fn dispose(self) {
        self.drop_db().await;
    }
}

/// Runs `scenario` on the outbox of `db` while a relay publishes every topic from it to
/// `destination`; then stops the relay and drops the database. Returns what `scenario` returned.
pub(crate) async fn with_relay<DB, T>(
    (db, outbox): (TestDb<DB>, Outbox<DB>),
    destination: Destination,
    scenario: impl AsyncFnOnce(&Outbox<DB>) -> T,
) -> T
where
    DB: OutboxDatabase,
    Outbox<DB>: RelayStore,
    TestDb<DB>: Disposable,
{
    let route = Route::new("#", [destination.name.as_str()]);
    let relay = Relay::builder(&outbox)
        .config(relay_config(&format!("relay-{}", std::process::id())))
        .destination(destination)
        .route(route)
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn(relay.run(stop.clone()));
    let result = scenario(&outbox).await;
    stop.cancel();
    running.await.unwrap();
    db.dispose().await;
    result
}

/// The end-to-end scenario: [`commit_orders`], published by a relay through `transport`
/// ([`destination`] `name`) until every message is sent. Returns the committed messages.
pub(crate) async fn relay_orders(
    name: &str,
    transport: Arc<dyn Transport>,
) -> HashMap<MessageId, NewMessage> {
    with_relay(sqlite_outbox().await, destination(name, transport), async |outbox| {
        let committed = commit_orders(outbox).await;
        let ids: Vec<MessageId> = committed.keys().copied().collect();
        wait_all_sent(outbox, &ids, Duration::from_secs(30)).await;
        committed
    })
    .await
}

/// [`rolled_back_phantom`], then 60 [`keyed_message`]s on `topic` (seven keys) committed on a
/// fresh PostgreSQL outbox, published by a relay through `destination` until every one is sent.
/// Returns the committed messages and their ids in commit order.
pub(crate) async fn relay_keyed_orders(
    destination: Destination,
    topic: &str,
) -> (HashMap<MessageId, NewMessage>, Vec<MessageId>) {
    with_relay(pg_outbox().await, destination, async |outbox| {
        rolled_back_phantom(outbox, topic).await;
        let mut committed = HashMap::new();
        let ids = enqueue_all(outbox, topic, 0..60, 7, &mut committed).await;
        wait_all_sent(outbox, &ids, Duration::from_secs(60)).await;
        (committed, ids)
    })
    .await
}

/// The outage scenario ([`outage_then_restore`]), published by a relay through `transport`
/// ([`destination`] `name`), which reaches its broker through `proxy`. Returns the committed
/// messages.
pub(crate) async fn relay_orders_through_an_outage(
    name: &str,
    transport: Arc<dyn Transport>,
    proxy: &TcpProxy,
) -> HashMap<MessageId, NewMessage> {
    with_relay(sqlite_outbox().await, destination(name, transport), async |outbox| {
        outage_then_restore(outbox, proxy).await
    })
    .await
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

/// The traceparent of [`full_message`].
pub(crate) const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// An outbox row with every optional part set: business type `order` and key `biz_key`, key
/// `order-42`, a [`TRACEPARENT`] and a `source` header.
pub(crate) fn full_message(
    id: i64,
    topic: &str,
    payload: &str,
    biz_key: &str,
    source: &str,
) -> OutboxMessage {
    let mut m = outbox_message(id, topic, payload);
    m.biz_type = Some("order".into());
    m.biz_key = Some(biz_key.into());
    m.key = Some("order-42".into());
    m.headers.insert("traceparent".into(), TRACEPARENT.into());
    m.headers.insert("source".into(), source.into());
    m
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
/// the link cut as soon as the relay has published one of them, 60 more while it is cut (see
/// [`outage`]). Returns the committed messages.
pub(crate) async fn outage_then_restore<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    proxy: &TcpProxy,
) -> HashMap<MessageId, NewMessage> {
    let started = async |first: &[MessageId]| wait_any_sent(outbox, first, Duration::from_secs(20)).await;
    let recovery = Duration::from_secs(40);
    outage(outbox, 60, |i| message("order.paid", i), started, proxy, recovery).await.0
}

/// What cuts a relay off its broker in [`outage`], and restores the link.
pub(crate) trait Link {
    async fn cut(&mut self);
    async fn restore(&mut self);
}

impl Link for &TcpProxy {
    async fn cut(&mut self) {
        TcpProxy::cut(self);
    }

    async fn restore(&mut self) {
        TcpProxy::restore(self);
    }
}

/// An outage while a relay publishes from `outbox`: the messages `make` builds for `0..n` are
/// committed, and once `started` has seen the relay publish (some of) them, `link` is cut; those
/// for `n..2n` are committed during the outage. For 3 s none of these is sent and no message
/// fails; once `link` is restored, every message is sent within `recovery`. Returns the
/// committed messages and the ids of those committed during the outage.
pub(crate) async fn outage<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    n: usize,
    make: impl Fn(usize) -> NewMessage,
    started: impl AsyncFnOnce(&[MessageId]),
    mut link: impl Link,
    recovery: Duration,
) -> (HashMap<MessageId, NewMessage>, Vec<MessageId>) {
    let mut committed = HashMap::new();
    let first = enqueue_with(outbox, 0..n, &make, &mut committed).await;
    started(&first).await;
    link.cut().await;
    let during = enqueue_with(outbox, n..2 * n, &make, &mut committed).await;
    // An observation window, not a wait for an event: nothing may happen while cut.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = statuses(outbox, &during).await;
    assert!(st.iter().all(|s| matches!(s, Status::Pending | Status::Sending)), "during the outage: {st:?}");
    let all: Vec<MessageId> = committed.keys().copied().collect();
    let mut failed = Vec::new();
    for id in &all {
        let m = outbox.get(*id).await.unwrap().expect("message exists");
        if m.status == Status::Failed {
            failed.push((m.id, m.attempts, m.last_error));
        }
    }
    assert!(failed.is_empty(), "an outage must not fail messages: {failed:?}");
    link.restore().await;
    wait_all_sent(outbox, &all, recovery).await;
    (committed, during)
}

/// Each of `ids` still waits during an outage, and the outage has cost it no attempt.
pub(crate) async fn assert_outage_costs_no_attempt<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    ids: &[MessageId],
) {
    for id in ids {
        let m = outbox.get(*id).await.unwrap().expect("message exists");
        assert!(
            matches!(m.status, Status::Pending | Status::Sending),
            "{id} is {:?} during the outage",
            m.status
        );
        assert_eq!(m.attempts, 0, "an outage costs no attempt");
    }
}

/// Connects a transport with `connect`, given the address of a proxy to `server`, and publishes
/// `stress` envelopes through it for 8 s while the proxy cuts and restores its connections (up
/// for `up_ms.0 + (n * 37) % up_ms.1` ms, then down for 50 to 250 ms). Every call answers
/// within 2.5 s and each envelope is delivered or unavailable, some of each. Returns the ids (as
/// text) of the delivered ones, for the caller to find at the broker.
pub(crate) async fn delivered_under_repeated_cuts<T: Transport>(
    server: &str,
    connect: impl AsyncFnOnce(std::net::SocketAddr) -> Result<T, TransportError>,
    up_ms: (u64, u64),
) -> HashSet<String> {
    let proxy = Arc::new(TcpProxy::start(server).await);
    let t = connect(proxy.addr()).await.unwrap();
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

/// Thirty envelopes as the relay builds them: topics `order.paid` and `order.shipped`, keys
/// `k0` to `k2`, a JSON payload with non-ASCII text and quotes, every fourth with a traceparent.
pub(crate) fn mixed_batch() -> Vec<Envelope> {
    (1..=30)
        .map(|i| {
            let topic = if i % 2 == 0 { "order.paid" } else { "order.shipped" };
            let key = format!("k{}", i % 3);
            envelope(i, topic, Some(&key), &format!(r#"{{"n":{i},"text":"é \"quoted\""}}"#), i % 4 == 0)
        })
        .collect()
}

/// `e` with one more header.
pub(crate) fn with_header(mut e: Envelope, name: &str, value: &str) -> Envelope {
    e.headers.insert(name.to_owned(), value.to_owned());
    e
}

/// Checks that messages arrived in order per key: `arrivals` are `(key, message id)` in arrival
/// order, and the first copy of each message (a republished one may arrive again later) comes
/// after the earlier messages of its key.
pub(crate) fn assert_key_order<'a>(arrivals: impl IntoIterator<Item = (&'a str, i64)>) {
    let mut seen = HashSet::new();
    let mut last: HashMap<&str, i64> = HashMap::new();
    for (key, id) in arrivals {
        if !seen.insert(id) {
            continue;
        }
        if let Some(prev) = last.insert(key, id) {
            assert!(prev < id, "key {key}: message {id} arrived after {prev}");
        }
    }
}

/// Checks what a consumer received against the messages [`commit_orders`] committed:
/// `received` is `(message id, payload, headers)` in arrival order. Every committed message
/// arrives, with its payload and the outbox headers, never the rolled back one, in order per
/// key; exactly once when asked.
pub(crate) fn check_received<'a>(
    received: impl IntoIterator<Item = (i64, &'a str, &'a BTreeMap<String, String>)>,
    committed: &HashMap<MessageId, NewMessage>,
    exactly_once: bool,
) {
    let mut seen: HashMap<i64, usize> = HashMap::new();
    let mut arrivals = Vec::new();
    for (id, payload, headers) in received {
        assert_ne!(payload, "phantom", "a rolled-back message was published");
        let m = committed.get(&MessageId(id)).unwrap_or_else(|| panic!("unknown message {id}"));
        assert_eq!(payload, m.payload);
        assert_eq!(headers[header::MESSAGE_ID], id.to_string());
        assert_eq!(headers[header::TOPIC], m.topic);
        assert_eq!(headers.get(header::KEY), m.key.as_ref());
        assert_eq!(headers[header::BIZ_TYPE], "order");
        assert_eq!(Some(&headers[header::BIZ_KEY]), m.biz.as_ref().map(|b| &b.1));
        assert_eq!(headers.get(header::TRACEPARENT), m.headers.get("traceparent"));
        assert!(headers.contains_key(header::CREATED_AT) && headers.contains_key(header::ATTEMPT));
        *seen.entry(id).or_default() += 1;
        arrivals.push((m.key.as_deref().unwrap_or(""), id));
    }
    assert_eq!(seen.len(), committed.len(), "every committed message arrives");
    if exactly_once {
        assert!(seen.values().all(|n| *n == 1), "duplicates: {seen:?}");
    }
    assert_key_order(arrivals);
}

/// Through `t`, which publishes through `proxy`: one message delivered, then the link cut; a
/// publish during the cut is unavailable, answered within 5 s, and `health` reports the loss.
pub(crate) async fn assert_a_cut_is_unavailable(t: &dyn Transport, proxy: &TcpProxy) {
    assert_eq!(t.publish(&[envelope(1, "a", None, "x", false)]).await, vec![Outcome::Delivered]);
    proxy.cut();
    // Whether the loss is noticed before or during this call, it is never "delivered".
    let started = Instant::now();
    let o = t.publish(&[envelope(2, "a", None, "x", false)]).await;
    assert_eq!(kind(&o[0]), Some(FailureKind::Unavailable), "{o:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "bounded by the timeout");
    eventually("health reports the lost connection", || async { t.health().await.is_err() }).await;
}

/// Restores `proxy` after [`assert_a_cut_is_unavailable`]: publishing recovers (at most a few
/// more unavailable answers), and so does `health`.
pub(crate) async fn assert_a_restore_recovers(t: &dyn Transport, proxy: &TcpProxy) {
    proxy.restore();
    publish_until_delivered(t, envelope(4, "a", None, "y", false), Duration::from_secs(15)).await;
    t.health().await.unwrap();
}

/// `connect` refuses each of `invalid`, before any connection, with a configuration error of
/// `transport` naming the key given with it. Returns the reasons.
pub(crate) async fn assert_invalid_named<C, T, Fut>(
    transport: &str,
    connect: impl Fn(C) -> Fut,
    invalid: Vec<(C, &str)>,
) -> Vec<String>
where
    T: std::fmt::Debug,
    Fut: Future<Output = Result<T, TransportError>>,
{
    let mut reasons = Vec::new();
    for (config, key) in invalid {
        match connect(config).await {
            Err(TransportError::Config { transport: t, key: k, reason }) => {
                assert_eq!((t, k), (transport, key), "{reason}");
                reasons.push(reason);
            }
            other => panic!("expected a config error of {transport} naming {key}, got {other:?}"),
        }
    }
    reasons
}

/// A configuration with the unknown key `key` (in `json`) is refused, naming it.
pub(crate) fn assert_unknown_key_refused<C: serde::de::DeserializeOwned + std::fmt::Debug>(
    json: &str,
    key: &str,
) {
    let e = serde_json::from_str::<C>(json).unwrap_err().to_string();
    assert!(e.contains(key), "{e}");
}

/// A rustls client configuration for a test's own consumer of a TLS server from
/// `outbox_testkit::tls`: the ring provider (the process has no default one: two providers are
/// compiled in), the test CA alone, and the test's client certificate with `client_cert`.
pub(crate) fn test_tls_config(pki: &outbox_testkit::tls::Pki, client_cert: bool) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(pki.path("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
    if client_cert {
        let chain =
            CertificateDer::pem_file_iter(pki.path("client.pem")).unwrap().map(Result::unwrap).collect();
        let key = PrivateKeyDer::from_pem_file(pki.path("client.key")).unwrap();
        builder.with_client_auth_cert(chain, key).unwrap()
    } else {
        builder.with_no_client_auth()
    }
}

/// The text of the connect error `result` must be (panics on success or another error).
pub(crate) fn connect_error<T>(result: Result<T, TransportError>) -> String {
    match result {
        Err(e @ TransportError::Connect { .. }) => e.to_string(),
        Err(other) => panic!("expected a connect error, got {other}"),
        Ok(_) => panic!("connected, expected a connect error"),
    }
}

/// The text of the configuration error `result` must be, naming `key`.
pub(crate) fn config_error<T>(result: Result<T, TransportError>, key: &str) -> String {
    match result {
        Err(e @ TransportError::Config { key: k, .. }) if k == key => e.to_string(),
        Err(other) => panic!("expected a config error naming {key}, got {other}"),
        Ok(_) => panic!("connected, expected a config error naming {key}"),
    }
}

/// The TLS files of a destination (`tls_ca_file`, `tls_cert_file`, `tls_key_file`).
pub(crate) type TlsFiles = [Option<String>; 3];

/// The configuration of a transport that names TLS files, and how that transport checks it and
/// connects with it: what the TLS tests every such transport runs need (implemented by
/// [`tls_configs!`] for each one compiled in).
pub(crate) trait TlsConfig: Clone + Sized {
    /// The transport the configuration connects.
    type Transport: Transport;
    /// The transport's kind, as its errors name it.
    const KIND: &'static str;
    /// The configuration's `tls_ca_file`, `tls_cert_file` and `tls_key_file`.
    fn tls_files_mut(&mut self) -> [&mut Option<String>; 3];
    /// What `outbox check` runs: the transport's `validate`.
    fn check(&self) -> Result<(), TransportError>;
    /// The transport's `connect`.
    fn connect_with(self) -> impl Future<Output = Result<Self::Transport, TransportError>>;

    /// The configuration with these TLS files instead of its own.
    fn with_tls_files(mut self, files: TlsFiles) -> Self {
        for (slot, file) in self.tls_files_mut().into_iter().zip(files) {
            *slot = file;
        }
        self
    }

    /// The configuration presenting `pki`'s certificate and key named `name` (`client`,
    /// `stranger`), or none.
    fn with_client_cert(mut self, pki: &outbox_testkit::tls::Pki, name: Option<&str>) -> Self {
        let [_, cert, key] = self.tls_files_mut();
        *cert = name.map(|c| pki.path(&format!("{c}.pem")));
        *key = name.map(|c| pki.path(&format!("{c}.key")));
        self
    }
}

/// Implements [`TlsConfig`] for each `"feature": Config => Transport`, when the feature is on.
macro_rules! tls_configs {
    ($($feature:literal: $config:ty => $transport:ty),* $(,)?) => {$(
        #[cfg(feature = $feature)]
        impl TlsConfig for $config {
            type Transport = $transport;
            const KIND: &'static str = $feature;
            fn tls_files_mut(&mut self) -> [&mut Option<String>; 3] {
                [&mut self.tls_ca_file, &mut self.tls_cert_file, &mut self.tls_key_file]
            }
            fn check(&self) -> Result<(), TransportError> {
                self.validate()
            }
            fn connect_with(self) -> impl Future<Output = Result<$transport, TransportError>> {
                <$transport>::connect(self)
            }
        }
    )*};
}

tls_configs!(
    "nats": outbox_transport::nats::NatsConfig => outbox_transport::nats::NatsTransport,
    "rabbitmq": outbox_transport::rabbitmq::RabbitMqConfig => outbox_transport::rabbitmq::RabbitMqTransport,
    "redis": outbox_transport::redis::RedisConfig => outbox_transport::redis::RedisTransport,
    "mqtt": outbox_transport::mqtt::MqttConfig => outbox_transport::mqtt::MqttTransport,
    "http": outbox_transport::http::HttpConfig => outbox_transport::http::HttpTransport,
);

/// The text of the connect error, of its own transport, that `config` meets (panics on success
/// or another error).
pub(crate) async fn connect_refusal<C: TlsConfig>(config: C) -> String {
    match config.connect_with().await {
        Err(e @ TransportError::Connect { transport, .. }) if transport == C::KIND => e.to_string(),
        Err(other) => panic!("expected a connect error of {}, got {other}", C::KIND),
        Ok(_) => panic!("connected, expected a connect error of {}", C::KIND),
    }
}

/// Checks every transport's handling of TLS files it cannot use: `tls_config` builds the
/// transport's configuration for a URL (and no CA file), which gets the files; `connect` must refuse each case
/// with a configuration error naming the key and saying why, and `validate` (what `outbox
/// check` runs) must say the same. With `plain` (a URL without TLS, and what the error must
/// say), a CA file with that URL must be refused too.
pub(crate) async fn assert_unusable_tls_files_refused<C: TlsConfig>(
    tls_config: impl Fn(String, Option<String>) -> C,
    tls_url: &str,
    plain: Option<(&str, &str)>,
) {
    let pki = outbox_testkit::tls::Pki::new();
    let p = |name: &str| Some(pki.path(name));
    let missing = Some(format!("{}/missing.pem", pki.dir().display()));
    let mut cases: Vec<(&str, TlsFiles, &str, &str)> = vec![
        (tls_url, [missing, None, None], "tls_ca_file", "cannot read"),
        (tls_url, [p("client.key"), None, None], "tls_ca_file", "holds no PEM certificate"),
        (tls_url, [None, p("client.pem"), p("client.pem")], "tls_key_file", "holds no PEM private key"),
        (tls_url, [None, p("client.pem"), p("stranger.key")], "tls_key_file", "does not fit tls_cert_file"),
        (tls_url, [None, p("client.pem"), None], "tls_key_file", "must be set with tls_cert_file"),
    ];
    if let Some((plain_url, needs)) = plain {
        cases.push((plain_url, [p("ca.pem"), None, None], "tls_ca_file", needs));
    }
    for (url, files, key, says) in cases {
        let c = tls_config(url.into(), None).with_tls_files(files.clone());
        let checked = match c.check() {
            Err(e) => e.to_string(),
            Ok(()) => panic!("{files:?} with {url} passed validation"),
        };
        let err = config_error(c.connect_with().await, key);
        assert!(err.contains(says), "{files:?} with {url}: {err}");
        assert_eq!(checked, err, "outbox check says the same");
    }
}

/// Runs `test` within [`WAIT`] against a TLS server of the test's own, which `start` runs with
/// a fresh test PKI (requiring a client certificate when `require_client`): `test` gets the PKI
/// and the server's port.
pub(crate) async fn on_tls_server(
    start: fn(&outbox_testkit::tls::Pki, bool) -> outbox_testkit::tls::TlsServer,
    require_client: bool,
    test: impl AsyncFnOnce(&outbox_testkit::tls::Pki, u16),
) {
    within(WAIT, async {
        let pki = outbox_testkit::tls::Pki::new();
        let server = start(&pki, require_client);
        test(&pki, server.port()).await;
    })
    .await;
}

/// Against the TLS server at `url` that requires a client certificate, the configuration
/// `tls_config` builds for `url` and the test CA of `pki`, with the client's certificate,
/// connects and delivers the envelope `by certificate` (id 7, topic `order.paid`), for the caller
/// to find at the broker; without a certificate, and with one another CA signed (`stranger`),
/// `connect` fails with an error of its transport naming `url`. Returns those two errors'
/// texts, for the caller to check why.
pub(crate) async fn client_certificate_required<C: TlsConfig>(
    pki: &outbox_testkit::tls::Pki,
    tls_config: impl Fn(String, Option<String>) -> C,
    url: &str,
) -> (String, String) {
    let config = tls_config(url.into(), Some(pki.path("ca.pem")));
    let kind = C::KIND;
    let t = config.clone().with_client_cert(pki, Some("client")).connect_with().await.unwrap();
    assert_eq!(
        t.publish(&[envelope(7, "order.paid", None, "by certificate", false)]).await,
        vec![Outcome::Delivered]
    );
    let mut refused = Vec::new();
    for cert in [None, Some("stranger")] {
        let err = connect_error(config.clone().with_client_cert(pki, cert).connect_with().await);
        assert!(err.starts_with(&format!("cannot connect {kind} to {url}: ")), "{cert:?}: {err}");
        refused.push(err);
    }
    let [missing, foreign] = <[String; 2]>::try_from(refused).unwrap();
    (missing, foreign)
}

/// With a TLS server on `port` (its certificate from `pki`): the URL
/// `<scheme>://<user>:s3cret-pw@localhost:<port>` with no CA file, and with another CA's, is
/// refused as signed by an unknown CA, the error of its transport naming the URL with
/// its password redacted; with the right CA and the host `127.0.0.1`, for the host name.
/// `tls_config` builds the configuration for a URL and a CA file.
pub(crate) async fn assert_unknown_ca_and_wrong_host_explained<C: TlsConfig>(
    pki: &outbox_testkit::tls::Pki,
    tls_config: impl Fn(String, Option<String>) -> C,
    (scheme, user, port): (&str, &str, u16),
) {
    let kind = C::KIND;
    let url = format!("{scheme}://{user}:s3cret-pw@localhost:{port}");
    for ca in [None, Some(pki.path("other-ca.pem"))] {
        let err = connect_error(tls_config(url.clone(), ca).connect_with().await);
        let shown = format!("cannot connect {kind} to {scheme}://{user}:***@localhost:{port}: ");
        assert!(err.starts_with(&shown), "{err}");
        assert!(err.contains("the server's certificate is not signed by a CA this client trusts"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }
    let cfg = tls_config(format!("{scheme}://127.0.0.1:{port}"), Some(pki.path("ca.pem")));
    let err = connect_error(cfg.connect_with().await);
    assert!(err.contains("not valid for the host name in the URL"), "{err}");
}
