//! The relay's guarantees, against real PostgreSQL, real MariaDB and a SQLite file, with the
//! in-process test transport standing in for the broker (transports are tested against real
//! brokers in their own suites).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_core::{header, MessageId, NewMessage, OutboxMessage, Outcome, RetryPolicy, Status};
use outbox_relay::testing::TestTransport;
use outbox_relay::{AlertHook, BreakerConfig, Budget, Destination, Relay, RelayConfig, RelayStats, Route};
use outbox_store::{Claims, Outbox, OutboxDatabase, RelayStore, Wakeups};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

fn fast_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial: Duration::from_millis(50),
        max_delay: Duration::from_millis(200),
        multiplier: 2.0,
        jitter: 0.0,
    }
}

tokio::task_local! {
    /// `RelayConfig::lock_claims` for the relays a test starts (the `leased` modules run the
    /// same tests with leases).
    static LOCK_CLAIMS: bool;
}

fn config(owner: &str) -> RelayConfig {
    RelayConfig {
        lock_claims: LOCK_CLAIMS.try_with(|v| *v).unwrap_or(true),
        ..outbox_relay::testing::relay_config(owner)
    }
}

#[derive(Debug, Default)]
struct RecordingAlert(Mutex<Vec<(MessageId, String)>>);

#[async_trait::async_trait]
impl AlertHook for RecordingAlert {
    async fn message_failed(&self, m: &OutboxMessage, reason: &str) {
        self.0.lock().unwrap().push((m.id, reason.to_owned()));
    }
}

struct Running {
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
    stats: Arc<RelayStats>,
}

impl Running {
    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(20), self.handle)
            .await
            .expect("relay stops in time")
            .unwrap();
    }
}

fn start<DB: OutboxDatabase>(relay: Relay<Outbox<DB>>) -> Running
where
    Outbox<DB>: RelayStore,
{
    let stop = CancellationToken::new();
    let stats = relay.stats();
    let handle = tokio::spawn(relay.run(stop.clone()));
    Running { stop, handle, stats }
}

fn relay<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    owner: &str,
    transport: &TestTransport,
    retry: RetryPolicy,
) -> Relay<Outbox<DB>>
where
    Outbox<DB>: RelayStore,
{
    relay_to(outbox, config(owner), Destination::new("broker", Arc::new(transport.clone())).retry(retry))
}

/// A relay with `cfg` publishing everything to `destination` (named "broker").
fn relay_to<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    cfg: RelayConfig,
    destination: Destination,
) -> Relay<Outbox<DB>>
where
    Outbox<DB>: RelayStore,
{
    Relay::builder(outbox)
        .config(cfg)
        .destination(destination)
        .route(Route::new("#", ["broker"]))
        .build()
        .unwrap()
}

use outbox_testkit::eventually;

async fn status<DB: OutboxDatabase>(outbox: &Outbox<DB>, id: MessageId) -> OutboxMessage {
    outbox.get(id).await.unwrap().expect("message exists")
}

async fn all_in<DB: OutboxDatabase>(outbox: &Outbox<DB>, ids: &[MessageId], st: Status) -> bool {
    for id in ids {
        if status(outbox, *id).await.status != st {
            return false;
        }
    }
    true
}

// ---------------------------------------------------------------------------------------------

async fn committed_is_published_fast_and_rolled_back_never<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    // A scan period of a minute: only the after-commit signal can explain a quick delivery.
    let mut cfg = config("r1");
    cfg.idle_interval = Duration::from_secs(60);
    let relay = relay_to(&outbox, cfg, Destination::new("broker", Arc::new(t.clone())));
    let running = start(relay);
    tokio::time::sleep(Duration::from_millis(300)).await; // let it go idle

    let mut tx = outbox.begin().await.unwrap();
    let rolled = tx.enqueue(&NewMessage::new("order.paid", "phantom")).await.unwrap();
    tx.rollback().await.unwrap();

    let mut tx = outbox.begin().await.unwrap();
    let msg = NewMessage::new("order.paid", r#"{"order":1}"#)
        .key("order-1")
        .biz("order", "1")
        .header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    let e = tx.enqueue(&msg).await.unwrap();
    tx.commit().await.unwrap();
    eventually("the committed message is delivered", || async { t.delivered_count(e.id) == 1 }).await;
    assert_eq!(RelayStats::get(&running.stats.claimed_on_scan), 0, "claimed on the wake-up, not by the scan");
    assert!(RelayStats::get(&running.stats.claimed) >= 1);
    eventually("marked sent", || async { status(&outbox, e.id).await.status == Status::Sent }).await;

    let env = &t.delivered()[0];
    assert_eq!(env.payload, r#"{"order":1}"#);
    assert_eq!(env.headers[header::MESSAGE_ID], e.id.to_string());
    assert_eq!(env.headers[header::BIZ_TYPE], "order");
    assert_eq!(env.headers[header::BIZ_KEY], "1");
    assert_eq!(env.headers[header::KEY], "order-1");
    assert_eq!(env.headers[header::ATTEMPT], "1");
    assert_eq!(env.headers[header::TRACEPARENT], msg.headers["traceparent"]);
    assert!(env.headers.contains_key(header::CREATED_AT));

    running.stop().await;
    // (SQLite may hand a rolled-back id to the next insert, so the payload is what identifies it.)
    assert!(
        t.received().iter().all(|r| r.envelope.payload != "phantom"),
        "a rolled-back message was published"
    );
    assert_eq!(t.received().len(), 1);
    let _ = rolled;
    let sent = status(&outbox, e.id).await;
    assert!(sent.lease_owner.is_none() && sent.attempts == 0);
}

async fn transient_failures_retry_with_backoff_then_deliver_once<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    let e = outbox.enqueue(&NewMessage::new("t", "x")).await.unwrap();
    t.fail_message(e.id, 3, Outcome::retryable("broker said 503 for this one"));
    let running = start(relay(&outbox, "r1", &t, fast_retry(10)));
    eventually("delivered after 3 failures", || async { t.delivered_count(e.id) == 1 }).await;
    eventually("sent", || async { status(&outbox, e.id).await.status == Status::Sent }).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.stop().await;

    assert_eq!(t.attempts(e.id), 4, "3 failures + 1 delivery, no extra publication");
    assert_eq!(t.delivered_count(e.id), 1);
    let r = t.received();
    let attempts: Vec<&str> = r.iter().map(|x| x.envelope.headers[header::ATTEMPT].as_str()).collect();
    assert_eq!(attempts, ["1", "2", "3", "4"]);
    // Backoff: 50, 100, 200 ms (no jitter) between attempts.
    let gaps: Vec<Duration> = r.windows(2).map(|w| w[1].at - w[0].at).collect();
    for (gap, min) in gaps.iter().zip([50, 100, 200]) {
        assert!(*gap >= Duration::from_millis(min - 10), "gap {gap:?} shorter than the {min} ms backoff");
    }
    let m = status(&outbox, e.id).await;
    assert_eq!(m.attempts, 3);
    assert!(m.last_error.as_deref().unwrap().contains("503"), "{:?}", m.last_error);
    assert!(m.last_attempt_at.is_some());
}

async fn permanent_errors_and_exhaustion_fail_with_the_reason<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    t.set_max_payload(1000);
    let alerts = Arc::new(RecordingAlert::default());
    let relay = Relay::builder(&outbox)
        // No other relay will route `user.created`: fail it at once rather than after a grace.
        .config(RelayConfig { unrouted_grace: Duration::ZERO, ..config("r1") })
        .destination(Destination::new("broker", Arc::new(t.clone())).retry(fast_retry(2)))
        .route(Route::new("order.#", ["broker"]))
        .alert(alerts.clone())
        .build()
        .unwrap();
    let rejected = outbox.enqueue(&NewMessage::new("order.bad", "x")).await.unwrap();
    let too_big = outbox.enqueue(&NewMessage::new("order.big", "y".repeat(5000))).await.unwrap();
    let unrouted = outbox.enqueue(&NewMessage::new("user.created", "z")).await.unwrap();
    let flaky = outbox.enqueue(&NewMessage::new("order.flaky", "w")).await.unwrap();
    t.fail_topic("order.bad", Outcome::permanent("400 Bad Request: schema mismatch"));
    t.fail_message(flaky.id, 10, Outcome::retryable("timeout from consumer"));
    let ok = outbox.enqueue(&NewMessage::new("order.ok", "fine")).await.unwrap();
    let running = start(relay);
    let ids = [rejected.id, too_big.id, unrouted.id, flaky.id];
    eventually("all four failed", || async { all_in(&outbox, &ids, Status::Failed).await }).await;
    eventually("the good one is sent", || async { status(&outbox, ok.id).await.status == Status::Sent })
        .await;
    running.stop().await;

    let m = status(&outbox, rejected.id).await;
    assert_eq!(m.attempts, 1, "a permanent error fails at once");
    assert!(m.last_error.unwrap().contains("400 Bad Request"));
    let m = status(&outbox, too_big.id).await;
    assert!(m.last_error.unwrap().contains("5000 bytes, larger than the destination's limit of 1000"));
    assert_eq!(t.attempts(too_big.id), 0, "never handed to the broker");
    let m = status(&outbox, unrouted.id).await;
    assert!(m.last_error.unwrap().contains("no route for topic \"user.created\""));
    let m = status(&outbox, flaky.id).await;
    assert_eq!(m.attempts, 2, "max_attempts = 2");
    assert_eq!(t.attempts(flaky.id), 2);
    assert!(m.last_error.unwrap().contains("gave up after 2 attempts"));

    let mut alerted: Vec<MessageId> = alerts.0.lock().unwrap().iter().map(|a| a.0).collect();
    alerted.sort();
    let mut expected = ids.to_vec();
    expected.sort();
    assert_eq!(alerted, expected, "exactly one alert per failed message");
}

async fn per_key_order_holds_with_failures_and_three_relays<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    let mut ids = Vec::new();
    let mut relays: Vec<Running> = Vec::new();
    for i in 0..300 {
        // The first half is a backlog when the relays start; the second half is committed one
        // by one while they run, so their claims take it by id (the commit signal's ids).
        if i == 150 {
            relays = (0..3).map(|n| start(relay(&outbox, &format!("r{n}"), &t, fast_retry(20)))).collect();
        }
        let msg = NewMessage::new("order.updated", format!("{i}")).key(format!("k{}", i % 10));
        let mut tx = outbox.begin().await.unwrap();
        ids.push(tx.enqueue(&msg).await.unwrap().id);
        if i % 7 == 3 {
            t.fail_message(ids[i], 2, Outcome::retryable("transient"));
        }
        tx.commit().await.unwrap();
    }
    // A few keyless messages must not be held back by anything.
    let free = outbox.enqueue(&NewMessage::new("order.updated", "free")).await.unwrap();
    let deadline = Instant::now() + WAIT;
    while !all_in(&outbox, &ids, Status::Sent).await {
        if Instant::now() > deadline {
            for id in &ids {
                let m = status(&outbox, *id).await;
                if m.status != Status::Sent {
                    eprintln!(
                        "{} {:?} {} key={:?} next={} owner={:?} err={:?}",
                        m.id, m.status, m.attempts, m.key, m.next_attempt_at, m.lease_owner, m.last_error
                    );
                }
            }
            panic!("stuck");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for r in relays {
        r.stop().await;
    }
    assert_eq!(t.delivered_count(free.id), 1);

    let mut last: HashMap<String, MessageId> = HashMap::new();
    for env in t.delivered() {
        if let Some(k) = env.key.clone() {
            if let Some(prev) = last.get(&k) {
                assert!(env.id > *prev, "key {k}: {} delivered after {}", env.id, prev);
            }
            last.insert(k, env.id);
        }
    }
    for id in &ids {
        assert_eq!(t.delivered_count(*id), 1, "message {id} delivered once");
    }
    assert_eq!(t.max_concurrent_same_id(), 1);
}

/// A few hot keys with batches of 8 and runs of 4: a key's run is cut at its length, and the
/// relay's next claim, made while that batch is in flight, continues the run behind it (locked
/// claims: PostgreSQL, MySQL/MariaDB). Failures injected mid-run must hold back the continuing batch's
/// messages of that key: every key's deliveries strictly increase by id, each message is
/// delivered once, and runs were continued (so the order was kept across batches, not by
/// their absence).
async fn runs_continued_behind_a_batch_in_flight_keep_key_order<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    // Publishing takes a while, so that the next claim runs while a batch is out.
    t.set_delay(Duration::from_millis(5));
    let mut ids = Vec::new();
    let mut tx = outbox.begin().await.unwrap();
    for i in 0..240 {
        let msg = NewMessage::new("order.updated", format!("{i}")).key(format!("k{}", i % 2));
        ids.push(tx.enqueue(&msg).await.unwrap().id);
    }
    tx.commit().await.unwrap();
    for (i, id) in ids.iter().enumerate() {
        if i % 11 == 5 {
            t.fail_message(*id, 1, Outcome::retryable("transient"));
        }
    }
    let cfg = RelayConfig { batch_size: 8, max_run: 4, max_in_flight_batches: 2, ..config("r0") };
    let running =
        start(relay_to(&outbox, cfg, Destination::new("broker", Arc::new(t.clone())).retry(fast_retry(20))));
    eventually("every message sent", || all_in(&outbox, &ids, Status::Sent)).await;
    let continued = RelayStats::get(&running.stats.runs_continued);
    running.stop().await;
    let mut last: HashMap<String, MessageId> = HashMap::new();
    for env in t.delivered() {
        let k = env.key.clone().unwrap();
        if let Some(prev) = last.get(&k) {
            assert!(env.id > *prev, "key {k}: {} delivered after {}", env.id, prev);
        }
        last.insert(k, env.id);
    }
    for id in &ids {
        assert_eq!(t.delivered_count(*id), 1, "message {id} delivered once");
    }
    assert!(continued > 0, "no run was continued behind a batch in flight");
}

/// A hot key's 24 messages and a relay over `outbox` publishing to `t` (batches of 8, runs of 4,
/// two in flight) whose first batch of them is stuck in its publish (the key gated; the publish
/// timeout and the lease outlast every wait of a test) and whose second continues the key's run
/// behind it: both of the claim loop's permits are held. Returns the hot messages, the relay,
/// and a second handle on the database whose commits the relay is not told of (another
/// process's).
async fn hot_key_stuck<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    t: &TestTransport,
) -> (Vec<MessageId>, Running, Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let (hot, running, elsewhere, _) = hot_key_stuck_after(outbox, t, &[], None).await;
    (hot, running, elsewhere)
}

/// [`hot_key_stuck`], with `early` committed by the other process after the hot key's messages
/// and before the relay starts (their ids returned last), and the relay under `budget` if given.
async fn hot_key_stuck_after<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    t: &TestTransport,
    early: &[NewMessage],
    budget: Option<Budget>,
) -> (Vec<MessageId>, Running, Outbox<DB>, Vec<MessageId>)
where
    Outbox<DB>: RelayStore,
{
    let elsewhere = Outbox::<DB>::new(outbox.pool().clone()).with_tables(outbox.tables().clone()).unwrap();
    t.gate_key("hot");
    let mut hot = Vec::new();
    let mut tx = outbox.begin().await.unwrap();
    for i in 0..24 {
        hot.push(tx.enqueue(&NewMessage::new("order.updated", format!("{i}")).key("hot")).await.unwrap().id);
    }
    tx.commit().await.unwrap();
    let mut early_ids = Vec::new();
    for m in early {
        early_ids.push(elsewhere.enqueue(m).await.unwrap().id);
    }
    let long = Duration::from_secs(300);
    let cfg = RelayConfig {
        batch_size: 8,
        max_run: 4,
        max_in_flight_batches: 2,
        publish_timeout: long,
        lease: long * 2,
        ..config("r0")
    };
    let mut builder = Relay::builder(outbox)
        .config(cfg)
        .destination(Destination::new("broker", Arc::new(t.clone())))
        .route(Route::new("#", ["broker"]));
    if let Some(b) = budget {
        builder = builder.budget(b);
    }
    let running = start(builder.build().unwrap());
    eventually("the first batch stuck and its run continued by a second", || async {
        t.in_flight() > 0 && RelayStats::get(&running.stats.runs_continued) > 0
    })
    .await;
    // Whether the lane's first look has ended or not: it names what was committed just before it
    // (`outbox_store::LOOK_BACK`), and the looks after it what is committed after it.
    (hot, running, elsewhere, early_ids)
}

/// Lets [`hot_key_stuck`]'s key go: each of its messages is then sent, delivered once, in id
/// order.
async fn hot_key_released<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    t: &TestTransport,
    hot: &[MessageId],
    running: Running,
) where
    Outbox<DB>: RelayStore,
{
    t.open_keys();
    eventually("every hot message sent", || all_in(outbox, hot, Status::Sent)).await;
    running.stop().await;
    let delivered: Vec<MessageId> =
        t.delivered().into_iter().filter(|e| e.key.as_deref() == Some("hot")).map(|e| e.id).collect();
    assert_eq!(delivered, hot, "the hot key's messages each once, in id order");
}

/// A hot key's backlog, drained with runs continued across batches, does not hold up another
/// key's new message: with both permits held by the hot key's batches (the first stuck in its
/// publish, the second with nothing to publish until the first tells it), a message committed
/// now is claimed by id beside them and delivered while the first is still stuck.
async fn a_new_message_is_not_held_up_behind_a_hot_keys_continued_run<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    let (hot, running, _) = hot_key_stuck(&outbox, &t).await;
    let cold = outbox.enqueue(&NewMessage::new("order.updated", "cold").key("cold")).await.unwrap().id;
    eventually("the new message delivered", || async { t.delivered_count(cold) == 1 }).await;
    assert!(t.delivered().iter().all(|e| e.id == cold), "the hot key is still stuck");
    assert!(RelayStats::get(&running.stats.claims_beside) >= 1, "claimed by the lane");
    hot_key_released(&outbox, &t, &hot, running).await;
}

/// The same beside a message another process commits (here a second handle on the database,
/// whose commits the relay is not told of, as with `outbox relay` beside a service in another
/// language): the lane's look finds it and claims it by id while the hot key is still stuck.
async fn another_processs_message_is_not_held_up_behind_a_hot_keys_continued_run<DB: OutboxDatabase>(
    outbox: Outbox<DB>,
) where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    let (hot, running, elsewhere) = hot_key_stuck(&outbox, &t).await;
    let mut cold = Vec::new();
    for i in 0..3 {
        let m = NewMessage::new("order.updated", "cold").key(format!("cold-{i}"));
        cold.push(elsewhere.enqueue(&m).await.unwrap().id);
    }
    assert!(!outbox.signal().has_ids(), "the relay's own outbox was told nothing");
    eventually("the other process's messages delivered", || async {
        cold.iter().all(|id| t.delivered_count(*id) == 1)
    })
    .await;
    assert!(t.delivered().iter().all(|e| cold.contains(&e.id)), "the hot key is still stuck");
    assert!(t.in_flight() > 0, "the hot key's first batch is still in its publish");
    assert!(RelayStats::get(&running.stats.lane_looks) >= 1, "found by the lane's look");
    assert!(RelayStats::get(&running.stats.claims_beside) >= 1, "claimed by the lane");
    hot_key_released(&outbox, &t, &hot, running).await;
    for id in &cold {
        assert_eq!(t.delivered_count(*id), 1, "message {id} delivered once");
    }
}

/// Beside a hot key's stuck batches, another process commits two messages of one key: the lane
/// takes the first, and cannot take the second while the first is in its publish (not the
/// head of its key). Once the first is delivered the lane claims the second again, by id, while
/// the hot key is still stuck (the claim loop's permits are held by the hot key's batches).
async fn the_lane_claims_again_a_message_it_could_not_take<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    t.gate_key("cold");
    let (hot, running, elsewhere) = hot_key_stuck(&outbox, &t).await;
    let stuck = t.in_flight();
    let first = elsewhere.enqueue(&NewMessage::new("order.updated", "1").key("cold")).await.unwrap().id;
    eventually("the first cold message in its publish", || async { t.in_flight() == stuck + 1 }).await;
    let second = elsewhere.enqueue(&NewMessage::new("order.updated", "2").key("cold")).await.unwrap().id;
    // Named by a look and not taken: behind the first, which is in its publish.
    let looks = RelayStats::get(&running.stats.lane_looks);
    eventually("two more looks", || async { RelayStats::get(&running.stats.lane_looks) >= looks + 2 }).await;
    assert_eq!(t.delivered_count(second), 0);
    t.open_key("cold");
    eventually("both cold messages delivered", || async {
        t.delivered_count(first) == 1 && t.delivered_count(second) == 1
    })
    .await;
    let cold: Vec<MessageId> = t.delivered().into_iter().map(|e| e.id).collect();
    assert_eq!(cold, vec![first, second], "the hot key is still stuck; the cold key's in order");
    hot_key_released(&outbox, &t, &hot, running).await;
}

/// Beside a hot key's stuck batches, another process's transaction takes an id and commits only
/// after a newer message's: the lane's look passed it while it was open, and reads it again
/// until it is there (the claim loop's permits are held by the hot key's batches). The looks
/// read such an id again for `LANE_GAP_FOR` (1 s) from the look that passed it, so the older
/// transaction commits as soon as the newer message is in its publish (held there), not once
/// it is delivered: on two cores busy with the whole suite, a publish, a settlement and a poll
/// took longer than that.
async fn the_lane_finds_a_message_committed_after_a_newer_one<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    t.gate_key("b");
    let (hot, running, elsewhere) = hot_key_stuck(&outbox, &t).await;
    let stuck = t.in_flight();
    let mut slow = elsewhere.begin().await.unwrap();
    let older = slow.enqueue(&NewMessage::new("order.updated", "older").key("a")).await.unwrap().id;
    let newer = elsewhere.enqueue(&NewMessage::new("order.updated", "newer").key("b")).await.unwrap().id;
    assert!(older < newer);
    // Claimed by the lane (the loop's permits are held): a look saw it, and passed the older
    // id, open still.
    eventually("the newer message in its publish", || async { t.in_flight() == stuck + 1 }).await;
    slow.commit().await.unwrap();
    t.open_key("b");
    eventually("the newer message delivered", || async { t.delivered_count(newer) == 1 }).await;
    eventually("the older message delivered", || async { t.delivered_count(older) == 1 }).await;
    let mut delivered: Vec<MessageId> = t.delivered().iter().map(|e| e.id).collect();
    delivered.sort_unstable();
    assert_eq!(delivered, vec![older, newer], "the hot key is still stuck");
    hot_key_released(&outbox, &t, &hot, running).await;
}

/// Beside a hot key's stuck batches, another process commits a message due in 300 ms: the
/// lane's looks see it before it is due, read it again, and the lane claims it once it is due,
/// while the hot key is still stuck (the claim loop's permits are held by the hot key's
/// batches). In the field the same happens to a message committed while a look began: the
/// clock a statement reads is taken before its snapshot, so the row is there with a time past
/// that clock (MariaDB beside a hot backlog, "The lane's looks and its lingering" in
/// docs/benchmarks.md).
async fn the_lane_takes_a_message_a_look_saw_before_it_was_due<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    let (hot, running, elsewhere) = hot_key_stuck(&outbox, &t).await;
    let soon = NewMessage::new("order.updated", "soon").key("soon").delay(Duration::from_millis(300));
    let soon = elsewhere.enqueue(&soon).await.unwrap().id;
    eventually("the message delivered once due", || async { t.delivered_count(soon) == 1 }).await;
    assert!(t.delivered().iter().all(|e| e.id == soon), "the hot key is still stuck");
    assert!(RelayStats::get(&running.stats.claims_beside) >= 1, "claimed by the lane");
    hot_key_released(&outbox, &t, &hot, running).await;
}

/// Another process commits a message due 500 ms later just before the relay starts beside a hot
/// key's backlog: the claim loop's first claims pass it (not due) and then hold both permits
/// (the hot key's batches, the first stuck). The lane's first look, reading back from where the
/// messages end, sees it committed in the last `outbox_store::LOOK_BACK`, its looks read it
/// again, and the lane claims it once due, while the hot key is still stuck. (Before, the first
/// look only found where the messages end: such a message waited for the claim loop, behind the
/// backlog; 1.2 s beside 300,000 messages on MariaDB, "The lane's first look reads back" in
/// docs/benchmarks.md.)
async fn the_lanes_first_look_takes_what_was_committed_just_before_it<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    let early = NewMessage::new("order.updated", "early").key("early").delay(Duration::from_millis(500));
    let (hot, running, _, early) = hot_key_stuck_after(&outbox, &t, &[early], None).await;
    let early = early[0];
    assert!(hot.iter().all(|id| *id < early), "committed after the hot key's messages");
    eventually("the early message delivered once due", || async { t.delivered_count(early) == 1 }).await;
    assert!(t.delivered().iter().all(|e| e.id == early), "the hot key is still stuck");
    assert!(t.in_flight() > 0, "the hot key's first batch is still in its publish");
    hot_key_released(&outbox, &t, &hot, running).await;
    assert_eq!(t.delivered_count(early), 1, "delivered once");
}

/// `outbox relay` gives its relays a budget of batches in flight (`relay.total_in_flight_batches`)
/// even over one store. Under one that is not crowded the lane runs as without it, each of its
/// batches taking a share: here a budget of 3, the hot key's two stuck batches holding two, so
/// the lane's claims have one. Another process's messages are delivered by the lane while the
/// hot key is still stuck, and every share is given back. (Before, no lane ran under a budget:
/// the daemon's relay never had one, and such messages waited for the hot key's backlog.)
async fn the_lane_runs_under_the_daemons_budget<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    let budget = Budget::new(3);
    let (hot, running, elsewhere, _) = hot_key_stuck_after(&outbox, &t, &[], Some(budget.clone())).await;
    let mut cold = Vec::new();
    for i in 0..3 {
        let m = NewMessage::new("order.updated", "cold").key(format!("cold-{i}"));
        cold.push(elsewhere.enqueue(&m).await.unwrap().id);
    }
    eventually("the other process's messages delivered", || async {
        cold.iter().all(|id| t.delivered_count(*id) == 1)
    })
    .await;
    assert!(t.delivered().iter().all(|e| cold.contains(&e.id)), "the hot key is still stuck");
    assert!(RelayStats::get(&running.stats.claims_beside) >= 1, "claimed by the lane");
    hot_key_released(&outbox, &t, &hot, running).await;
    assert_eq!(budget.in_use(), 0, "every share given back");
    for id in &cold {
        assert_eq!(t.delivered_count(*id), 1, "message {id} delivered once");
    }
}

/// A hot key stuck beside a crowded budget (more relays than shares: the stores' pools keep no
/// connection between their turns): a budget of 3 shared by four relays, three built beside
/// this one as a daemon's other stores' relays are (returned, kept while the test runs), the
/// hot key's two stuck batches holding two shares. Then three messages of another process, on
/// keys of their own.
async fn hot_key_stuck_crowded<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    t: &TestTransport,
    budget: &Budget,
) -> (Vec<Relay<Outbox<DB>>>, Vec<MessageId>, Running, Vec<MessageId>)
where
    Outbox<DB>: RelayStore,
{
    let others = (1..=3)
        .map(|n| {
            Relay::builder(outbox)
                .config(config(&format!("other-{n}")))
                .destination(Destination::new("broker", Arc::new(t.clone())))
                .route(Route::new("#", ["broker"]))
                .budget(budget.clone())
                .build()
                .unwrap()
        })
        .collect();
    let (hot, running, elsewhere, _) = hot_key_stuck_after(outbox, t, &[], Some(budget.clone())).await;
    let mut cold = Vec::new();
    for i in 0..3 {
        let m = NewMessage::new("order.updated", "cold").key(format!("cold-{i}"));
        cold.push(elsewhere.enqueue(&m).await.unwrap().id);
    }
    (others, hot, running, cold)
}

/// MySQL/MariaDB: a daemon over more stores than its budget has shares (a crowded budget) gives
/// its relays a lane too, whose looks run on the store's keeper and whose claims take a free
/// share each and open a connection (cheap there: a server thread). Another process's messages
/// are delivered by the lane while the hot key is still stuck, and every share is given back.
/// (Before, no lane ran under a crowded budget: such messages waited for the hot key's backlog.)
async fn the_lane_runs_under_a_crowded_budget<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    let budget = Budget::new(3);
    let (others, hot, running, cold) = hot_key_stuck_crowded(&outbox, &t, &budget).await;
    eventually("the other process's messages delivered", || async {
        cold.iter().all(|id| t.delivered_count(*id) == 1)
    })
    .await;
    assert!(t.delivered().iter().all(|e| cold.contains(&e.id)), "the hot key is still stuck");
    assert!(RelayStats::get(&running.stats.lane_looks) >= 1, "the lane looked");
    assert!(RelayStats::get(&running.stats.claims_beside) >= 1, "claimed by the lane");
    hot_key_released(&outbox, &t, &hot, running).await;
    assert_eq!(budget.in_use(), 0, "every share given back");
    for id in &cold {
        assert_eq!(t.delivered_count(*id), 1, "message {id} delivered once");
    }
    drop(others);
}

/// PostgreSQL forks a process for each connection, and under a crowded budget each lane claim
/// would open one (measured slower than without the lane): no lane runs there. The same scene as
/// [`the_lane_runs_under_a_crowded_budget`]: the lane neither looks nor claims, and another
/// process's messages are the claim loop's, delivered once each after the hot key is released.
async fn no_lane_under_a_crowded_budget_on_postgres<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    let budget = Budget::new(3);
    let (others, hot, running, cold) = hot_key_stuck_crowded(&outbox, &t, &budget).await;
    let stats = running.stats.clone();
    hot_key_released(&outbox, &t, &hot, running).await;
    eventually("the other process's messages delivered", || async {
        cold.iter().all(|id| t.delivered_count(*id) == 1)
    })
    .await;
    assert_eq!(RelayStats::get(&stats.lane_looks), 0, "the lane never looked");
    assert_eq!(RelayStats::get(&stats.claims_beside), 0, "nor claimed");
    assert_eq!(budget.in_use(), 0, "every share given back");
    drop(others);
}

async fn relays_never_publish_a_message_concurrently<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    // Each batch is out 100 ms, so one relay needs about 600 ms for the 12 batches: time for
    // the others to claim too, even when their first claims met SQLite's one writer and backed
    // off (with 20 ms, one relay sometimes took all 600 before the others' retries).
    t.set_delay(Duration::from_millis(100));
    let msgs: Vec<NewMessage> = (0..600).map(|i| NewMessage::new("t", format!("{i}"))).collect();
    let mut tx = outbox.begin().await.unwrap();
    let ids: Vec<MessageId> = tx.enqueue_batch(&msgs).await.unwrap().into_iter().map(|e| e.id).collect();
    tx.commit().await.unwrap();
    let relays: Vec<Running> =
        (0..4).map(|n| start(relay(&outbox, &format!("r{n}"), &t, fast_retry(5)))).collect();
    eventually("all sent", || async { all_in(&outbox, &ids, Status::Sent).await }).await;
    let mut per_relay = Vec::new();
    for r in relays {
        per_relay.push(RelayStats::get(&r.stats.delivered));
        r.stop().await;
    }
    assert_eq!(t.max_concurrent_same_id(), 1, "no message in flight in two relays at once");
    for id in &ids {
        assert_eq!(t.delivered_count(*id), 1, "message {id}");
    }
    assert_eq!(per_relay.iter().sum::<u64>(), 600);
    assert!(per_relay.iter().filter(|n| **n > 0).count() >= 2, "work was shared: {per_relay:?}");
}

async fn an_outage_longer_than_the_retry_budget_fails_nothing<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    t.set_down(true);
    let alerts = Arc::new(RecordingAlert::default());
    // 2 attempts of 50 ms backoff would be exhausted in ~100 ms; the outage lasts 1.5 s.
    let relay = Relay::builder(&outbox)
        .config(config("r1"))
        .destination(Destination::new("broker", Arc::new(t.clone())).retry(fast_retry(2)).breaker(
            BreakerConfig {
                failure_threshold: 2,
                cooldown: Duration::from_millis(100),
                max_cooldown: Duration::from_millis(300),
            },
        ))
        .route(Route::new("#", ["broker"]))
        .alert(alerts.clone())
        .build()
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..200 {
        ids.push(outbox.enqueue(&NewMessage::new("t", format!("{i}"))).await.unwrap().id);
    }
    let running = start(relay);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for id in &ids {
        let m = status(&outbox, *id).await;
        assert_ne!(m.status, Status::Failed, "an outage must not fail message {id}");
        assert_eq!(m.attempts, 0, "unavailability costs no attempts");
    }
    let tried = t.received().len();
    assert!(tried < 200 * 3, "the circuit breaker stopped hammering the destination ({tried} tries)");
    t.set_down(false);
    eventually("the backlog drains after recovery", || async { all_in(&outbox, &ids, Status::Sent).await })
        .await;
    running.stop().await;
    assert!(alerts.0.lock().unwrap().is_empty());
    for id in &ids {
        assert_eq!(t.delivered_count(*id), 1);
    }
}

async fn a_killed_relays_messages_are_taken_over_after_the_lease<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let stuck = TestTransport::new();
    stuck.set_hang(true);
    let mut cfg = config("doomed");
    cfg.lease = Duration::from_secs(2);
    cfg.publish_timeout = Duration::from_millis(1900);
    cfg.lock_claims = false;
    let doomed = relay_to(&outbox, cfg, Destination::new("broker", Arc::new(stuck.clone())));
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(outbox.enqueue(&NewMessage::new("t", format!("{i}"))).await.unwrap().id);
    }
    let handle = tokio::spawn(doomed.run(CancellationToken::new()));
    eventually("the doomed relay holds the batch", || async { stuck.in_flight() == 20 }).await;
    // Kill it: no graceful release, as with SIGKILL.
    handle.abort();
    let _ = handle.await;
    for id in &ids {
        let m = status(&outbox, *id).await;
        assert_eq!(m.status, Status::Sending);
        assert_eq!(m.lease_owner.as_deref(), Some("doomed"));
    }
    let t = TestTransport::new();
    let killed_at = Instant::now();
    let heir = start(relay(&outbox, "heir", &t, fast_retry(5)));
    eventually("the heir delivers everything", || async { all_in(&outbox, &ids, Status::Sent).await }).await;
    assert!(killed_at.elapsed() >= Duration::from_millis(1000), "taken over only after the lease expired");
    heir.stop().await;
    for id in &ids {
        assert_eq!(t.delivered_count(*id), 1);
        assert_eq!(status(&outbox, *id).await.updated_by.as_deref(), Some("heir"));
    }
}

/// With locked claims, a relay that dies mid-publish leaves nothing behind: its transaction
/// rolls back, the rows are `pending` as before (no attempt counted), and another relay takes
/// them over at once, long before a lease would have expired.
async fn a_killed_relays_locked_claim_is_rolled_back_at_once<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let stuck = TestTransport::new();
    stuck.set_hang(true);
    let mut cfg = config("doomed");
    cfg.lease = Duration::from_secs(300); // far longer than `eventually`'s 60 s
    cfg.lock_claims = true;
    let doomed = relay_to(&outbox, cfg, Destination::new("broker", Arc::new(stuck.clone())));
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(
            outbox
                .enqueue(&NewMessage::new("t", format!("{i}")).key(format!("k{}", i % 4)))
                .await
                .unwrap()
                .id,
        );
    }
    let handle = tokio::spawn(doomed.run(CancellationToken::new()));
    eventually("the doomed relay holds the heads", || async { stuck.in_flight() == 4 }).await;
    for id in &ids {
        let m = status(&outbox, *id).await;
        assert_eq!(
            (m.status, m.lease_owner.as_deref()),
            (Status::Pending, None),
            "nothing written while locked"
        );
    }
    handle.abort();
    let _ = handle.await;
    let t = TestTransport::new();
    let heir = start(relay(&outbox, "heir", &t, fast_retry(5)));
    // Within `eventually`'s deadline (`outbox_testkit::WAIT`, 60 s), far shorter than the doomed relay's lease: taken
    // over without waiting for one.
    eventually("the heir delivers everything", || async { all_in(&outbox, &ids, Status::Sent).await }).await;
    heir.stop().await;
    for id in &ids {
        assert_eq!(t.delivered_count(*id), 1);
        let m = status(&outbox, *id).await;
        assert_eq!((m.attempts, m.updated_by.as_deref()), (0, Some("heir")));
    }
}

async fn a_delayed_message_waits_for_its_time<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    let running = start(relay(&outbox, "r1", &t, fast_retry(5)));
    let enqueued_at = tokio::time::Instant::now();
    let later =
        outbox.enqueue(&NewMessage::new("t", "later").delay(Duration::from_millis(1500))).await.unwrap();
    let now = outbox.enqueue(&NewMessage::new("t", "now")).await.unwrap();
    eventually("the immediate one", || async { t.delivered_count(now.id) == 1 }).await;
    assert_eq!(t.delivered_count(later.id), 0, "not before its time");
    eventually("the delayed one", || async { t.delivered_count(later.id) == 1 }).await;
    let at = t.received().into_iter().find(|r| r.envelope.id == later.id).unwrap().at;
    assert!(
        at - enqueued_at >= Duration::from_millis(1400),
        "published {:?} after enqueue",
        at - enqueued_at
    );
    running.stop().await;
}

async fn an_idle_relay_queries_a_bounded_number_of_times<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    let running = start(relay(&outbox, "r1", &t, fast_retry(5))); // idle_interval 100 ms
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The scan is a claim, or (PostgreSQL, MySQL) a tick on the listening connection.
    let claims = RelayStats::get(&running.stats.claims) + RelayStats::get(&running.stats.idle_ticks);
    running.stop().await;
    // At most one scan per idle interval (20 in 2 s), plus the start-up claims.
    assert!(claims <= 25, "{claims} scans in 2 s of idleness");
    assert!(claims >= 5, "the scan keeps running ({claims})");
}

async fn fan_out_one_failing_destination_does_not_hold_back_the_other<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let good = TestTransport::new();
    let bad = TestTransport::new();
    let relay = Relay::builder(&outbox)
        .config(config("r1"))
        .destination(Destination::new("benefits", Arc::new(good.clone())).retry(fast_retry(10)))
        .destination(Destination::new("campaign", Arc::new(bad.clone())).retry(fast_retry(10)))
        .route(Route::new("order.paid", ["benefits"]))
        .route(Route::new("order.*", ["campaign"]))
        .build()
        .unwrap();
    let e = outbox.enqueue(&NewMessage::new("order.paid", "p")).await.unwrap();
    bad.fail_message(e.id, 4, Outcome::retryable("campaign service 500"));
    let running = start(relay);
    eventually("the healthy destination has it", || async { good.delivered_count(e.id) == 1 }).await;
    eventually("the failing one eventually too", || async { bad.delivered_count(e.id) == 1 }).await;
    eventually("sent", || async { status(&outbox, e.id).await.status == Status::Sent }).await;
    running.stop().await;
    assert_eq!(good.attempts(e.id), 1, "the healthy destination is not re-sent on the other's retries");
    assert_eq!(bad.attempts(e.id), 5);
    let states = outbox.deliveries(&[e.id]).await.unwrap();
    assert_eq!(states.len(), 2);
    let campaign = states.iter().find(|s| s.destination == "campaign").unwrap();
    assert_eq!((campaign.status, campaign.attempts), (Status::Sent, 4));
}

async fn graceful_shutdown_releases_what_it_cannot_finish<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let t = TestTransport::new();
    t.set_hang(true);
    let mut cfg = config("r1");
    cfg.shutdown_timeout = Duration::from_millis(300);
    let relay = relay_to(&outbox, cfg, Destination::new("broker", Arc::new(t.clone())));
    let e = outbox.enqueue(&NewMessage::new("t", "x")).await.unwrap();
    let running = start(relay);
    eventually("in flight", || async { t.in_flight() == 1 }).await;
    // The publish never answers: only the shutdown timeout can end the run.
    tokio::time::timeout(WAIT, running.stop()).await.expect("shutdown is bounded by shutdown_timeout");
    let m = status(&outbox, e.id).await;
    assert_eq!(m.status, Status::Pending, "released, not left leased");
    assert!(m.lease_owner.is_none());
    assert_eq!(m.attempts, 0);
}

// ---------------------------------------------------------------------------------------------
// One bad row fails alone (SPEC guarantee 7; issue 14)

/// Per dialect: a trigger that refuses to mark a message whose payload is `poison` as sent,
/// and refuses every change to one whose payload is `stuck` — rows the database refuses to
/// settle, whatever the cause (a foreign trigger, a constraint added later, a value too long).
async fn install_refusing_trigger<DB: OutboxDatabase>(outbox: &Outbox<DB>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    let mut conn = outbox.pool().acquire().await.unwrap();
    let statements: &[&str] = match <DB as sqlx::Database>::NAME {
        "PostgreSQL" => &[
            "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF NEW.payload = 'poison' AND NEW.status = 'sent' THEN RAISE EXCEPTION 'refused by a trigger'; END IF; \
             IF NEW.payload = 'stuck' AND NEW.status <> 'pending' THEN RAISE EXCEPTION 'stuck row'; END IF; \
             RETURN NEW; END $$",
            "CREATE TRIGGER test_refuse BEFORE UPDATE ON outbox_message FOR EACH ROW EXECUTE FUNCTION test_refuse()",
        ],
        "MySQL" => &[
            "CREATE TRIGGER test_refuse BEFORE UPDATE ON outbox_message FOR EACH ROW BEGIN \
             IF NEW.payload = 'poison' AND NEW.status = 'sent' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by a trigger'; END IF; \
             IF NEW.payload = 'stuck' AND NEW.status <> 'pending' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'stuck row'; END IF; \
             END",
        ],
        _ => &["CREATE TRIGGER test_refuse BEFORE UPDATE ON outbox_message \
                WHEN NEW.payload = 'poison' AND NEW.status = 'sent' \
                BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"],
    };
    for sql in statements {
        sqlx::raw_sql(sql).execute(&mut *conn).await.unwrap();
    }
}

/// A message whose outcome the database refuses to record is marked failed by itself with the
/// reason; the other messages of its batch are sent once, and nothing is published again.
async fn a_settlement_the_database_refuses_fails_only_that_message<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    install_refusing_trigger(&outbox).await;
    let t = TestTransport::new();
    let mut good = Vec::new();
    for i in 0..4 {
        good.push(outbox.enqueue(&NewMessage::new("order.paid", format!("{{\"n\":{i}}}"))).await.unwrap().id);
    }
    let bad = outbox.enqueue(&NewMessage::new("order.paid", "poison")).await.unwrap().id;
    let alerts = Arc::new(RecordingAlert::default());
    let relay = Relay::builder(&outbox)
        .config(config("r1"))
        .destination(Destination::new("broker", Arc::new(t.clone())).retry(fast_retry(5)))
        .route(Route::new("#", ["broker"]))
        .alert(alerts.clone())
        .build()
        .unwrap();
    let running = start(relay);
    eventually("the good ones sent", || async { all_in(&outbox, &good, Status::Sent).await }).await;
    eventually("the refused one failed", || async { status(&outbox, bad).await.status == Status::Failed })
        .await;
    // Let the relay run a few more scans (claims, or idle ticks where the store has a keeper):
    // nothing may be published again.
    let scans = || RelayStats::get(&running.stats.claims) + RelayStats::get(&running.stats.idle_ticks);
    let before = scans();
    eventually("more scans", || async { scans() >= before + 5 }).await;
    running.stop().await;
    for id in good.iter().chain([&bad]) {
        assert_eq!(t.delivered_count(*id), 1, "message {id} published once");
    }
    let m = status(&outbox, bad).await;
    let err = m.last_error.unwrap();
    assert!(err.contains("could not record this message's outcome"), "{err}");
    assert!(err.contains("refused by a trigger"), "{err}");
    assert!(alerts.0.lock().unwrap().iter().any(|(id, _)| *id == bad), "alerted");
}

/// A row of which nothing can be written (not even `failed`) is held back: the relay does not
/// publish it again and again, and the other messages flow.
async fn a_row_nothing_can_be_written_for_is_not_republished<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    held_back(outbox, None).await;
}

/// A message held back (nothing can be written for it) also holds back the younger messages of
/// its key that a later claim brings as its run behind it: none of them is published while it
/// waits (it stays the key's oldest open message).
async fn a_held_back_message_holds_back_its_keys_run<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    held_back(outbox, Some("s")).await;
}

/// A message of which nothing can be written, with `key`, published once and then held back;
/// with a key, three younger messages of it committed after its first publication; then 20
/// others, which must flow.
async fn held_back<DB: OutboxDatabase>(outbox: Outbox<DB>, key: Option<&str>)
where
    Outbox<DB>: RelayStore,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    install_refusing_trigger(&outbox).await;
    let t = TestTransport::new();
    let keyed = |m: NewMessage| match key {
        Some(k) => m.key(k),
        None => m,
    };
    let stuck = outbox.enqueue(&keyed(NewMessage::new("order.paid", "stuck"))).await.unwrap().id;
    // The row is held back for the lease: one far longer than this test can take (each wait
    // below may last `eventually`'s 60 s), so a slow run on busy cores cannot let the hold
    // expire, and "published once" below means "never again", not "not within 10 s".
    let mut cfg = config("r1");
    cfg.lease = Duration::from_secs(300);
    let destination = Destination::new("broker", Arc::new(t.clone())).retry(fast_retry(5));
    let running = start(relay_to(&outbox, cfg, destination));
    eventually("the stuck one published", || async { t.delivered_count(stuck) >= 1 }).await;
    let mut younger = Vec::new();
    for i in (0..3).filter(|_| key.is_some()) {
        younger.push(outbox.enqueue(&keyed(NewMessage::new("order.paid", format!("{i}")))).await.unwrap().id);
    }
    let mut good = Vec::new();
    for i in 0..20 {
        good.push(outbox.enqueue(&NewMessage::new("order.paid", format!("{{\"n\":{i}}}"))).await.unwrap().id);
    }
    eventually("the others sent", || async { all_in(&outbox, &good, Status::Sent).await }).await;
    let claims = RelayStats::get(&running.stats.claims);
    eventually("20 more claims", || async { RelayStats::get(&running.stats.claims) >= claims + 20 }).await;
    running.stop().await;
    assert_eq!(t.delivered_count(stuck), 1, "held back for the lease, not published in a loop");
    assert_eq!(status(&outbox, stuck).await.status, Status::Pending, "left as it was");
    for id in &younger {
        assert_eq!(t.delivered_count(*id), 0, "{id} published while the older {stuck} of its key waits");
        assert_eq!(status(&outbox, *id).await.status, Status::Pending);
    }
}

/// A rolling deploy: relay A does not route `new.#` yet, relay B does. A puts those messages
/// back without spending attempts; B delivers them, in key order; nothing fails.
async fn unrouted_messages_wait_for_a_relay_that_routes_them<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
{
    let ta = TestTransport::new();
    let tb = TestTransport::new();
    let build = |owner: &str, t: &TestTransport, patterns: &[&str]| {
        let mut b = Relay::builder(&outbox)
            .config(config(owner))
            .destination(Destination::new("broker", Arc::new(t.clone())).retry(fast_retry(2)));
        for p in patterns {
            b = b.route(Route::new(*p, ["broker"]));
        }
        b.build().unwrap()
    };
    let mut new_ids = Vec::new();
    for i in 0..10 {
        let m = NewMessage::new("new.topic", format!("{i}"));
        let m = if i % 2 == 0 { m.key("k") } else { m };
        new_ids.push(outbox.enqueue(&m).await.unwrap().id);
    }
    let old = outbox.enqueue(&NewMessage::new("old.topic", "o")).await.unwrap().id;
    // A alone: old delivered, every new one seen and put back, none failed or charged.
    let a = start(build("relay-a", &ta, &["old.#"]));
    eventually("old sent", || async { status(&outbox, old).await.status == Status::Sent }).await;
    // A sees each key's head only (younger messages of key k wait behind it), and every
    // keyless one (odd indexes).
    let seen: Vec<MessageId> =
        new_ids.iter().enumerate().filter(|(i, _)| *i == 0 || i % 2 == 1).map(|(_, id)| *id).collect();
    eventually("A put the new ones back", || async {
        for id in &seen {
            let m = status(&outbox, *id).await;
            if !m.last_error.as_deref().unwrap_or("").contains("waiting up to") {
                return false;
            }
        }
        true
    })
    .await;
    for id in &new_ids {
        let m = status(&outbox, *id).await;
        assert_eq!(m.status, Status::Pending, "message {id}");
        assert_eq!(m.attempts, 0, "no attempt spent on message {id}");
    }
    // B joins (both orders of start are covered: A first here, both together from now on).
    let b = start(build("relay-b", &tb, &["old.#", "new.#"]));
    let more: Vec<MessageId> = {
        let mut v = Vec::new();
        for i in 10..14 {
            v.push(outbox.enqueue(&NewMessage::new("new.topic", format!("{i}")).key("k")).await.unwrap().id);
        }
        v
    };
    let all: Vec<MessageId> = new_ids.iter().chain(&more).copied().collect();
    // While A runs it may take each next head of key k before B does and put it back for
    // up to a quarter of its age: the key drains, but on busy cores slower than WAIT.
    let deadline = Instant::now() + 4 * WAIT;
    while !all_in(&outbox, &all, Status::Sent).await {
        if Instant::now() > deadline {
            let mut open = Vec::new();
            for id in &all {
                let m = status(&outbox, *id).await;
                if m.status != Status::Sent {
                    open.push((m.id, m.status, m.key, m.attempts, m.next_attempt_at, m.last_error));
                }
            }
            panic!("B did not deliver every new message within {:?}: {open:?}", 4 * WAIT);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.stop().await;
    b.stop().await;
    let keyed: Vec<MessageId> = tb
        .delivered()
        .iter()
        .filter(|e| e.headers.get(header::KEY).map(String::as_str) == Some("k"))
        .map(|e| e.id)
        .collect();
    let mut sorted = keyed.clone();
    sorted.sort();
    assert_eq!(keyed, sorted, "key k published in id order");
    assert!(ta.delivered().iter().all(|e| e.id == old), "A published only what it routes");
}

macro_rules! case {
    ($fresh:path, $module:ident :: $test:ident, $locks:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let db = $fresh().await;
            let outbox = Outbox::new(db.pool.clone());
            outbox.migrate().await.unwrap();
            LOCK_CLAIMS.scope($locks, crate::$module::$test(outbox)).await;
            db.drop_db().await;
        }
    };
    ($fresh:path, $test:ident, $locks:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let db = $fresh().await;
            let outbox = Outbox::new(db.pool.clone());
            outbox.migrate().await.unwrap();
            LOCK_CLAIMS.scope($locks, crate::$test(outbox)).await;
            db.drop_db().await;
        }
    };
}

macro_rules! dialect {
    ($name:ident, $fresh:path) => {
        mod $name {
            use super::*;

            // The default configuration: locked claims where the store has them (SQLite uses
            // leases).
            case!($fresh, committed_is_published_fast_and_rolled_back_never, true);
            case!($fresh, transient_failures_retry_with_backoff_then_deliver_once, true);
            case!($fresh, permanent_errors_and_exhaustion_fail_with_the_reason, true);
            case!($fresh, per_key_order_holds_with_failures_and_three_relays, true);
            case!($fresh, relays_never_publish_a_message_concurrently, true);
            case!($fresh, an_outage_longer_than_the_retry_budget_fails_nothing, true);
            case!($fresh, a_killed_relays_messages_are_taken_over_after_the_lease, true);
            case!($fresh, a_delayed_message_waits_for_its_time, true);
            case!($fresh, an_idle_relay_queries_a_bounded_number_of_times, true);
            case!($fresh, fan_out_one_failing_destination_does_not_hold_back_the_other, true);
            case!($fresh, graceful_shutdown_releases_what_it_cannot_finish, true);
            case!($fresh, a_settlement_the_database_refuses_fails_only_that_message, true);
            case!($fresh, unrouted_messages_wait_for_a_relay_that_routes_them, true);

            /// The same engine with leases (`lock_claims = false`), as SQLite always runs.
            mod leased {
                use super::*;

                case!($fresh, committed_is_published_fast_and_rolled_back_never, false);
                case!($fresh, transient_failures_retry_with_backoff_then_deliver_once, false);
                case!($fresh, per_key_order_holds_with_failures_and_three_relays, false);
                case!($fresh, relays_never_publish_a_message_concurrently, false);
                case!($fresh, fan_out_one_failing_destination_does_not_hold_back_the_other, false);
                case!($fresh, graceful_shutdown_releases_what_it_cannot_finish, false);
                case!($fresh, a_settlement_the_database_refuses_fails_only_that_message, false);
            }
        }
    };
}

/// A message committed without the after-commit signal (a plain sqlx commit) where the store has
/// no push channel is found by the timed scan, and counted as such.
async fn an_unsignalled_message_is_claimed_by_the_scan<DB: OutboxDatabase>(outbox: Outbox<DB>)
where
    Outbox<DB>: RelayStore,
    DB::Connection: outbox_store::OutboxConnection,
{
    use outbox_store::OutboxConnection;
    let t = TestTransport::new();
    let running = start(relay(&outbox, "r1", &t, fast_retry(5))); // idle_interval 100 ms
    tokio::time::sleep(Duration::from_millis(300)).await; // idle
    let mut tx = outbox.pool().begin().await.unwrap();
    let e = (*tx).enqueue(&NewMessage::new("order.paid", "{}")).await.unwrap();
    tx.commit().await.unwrap(); // plain commit: no signal
    eventually("the scan delivers it", || async { t.delivered_count(e.id) == 1 }).await;
    assert_eq!(RelayStats::get(&running.stats.claimed_on_scan), 1);
    running.stop().await;
}

/// PostgreSQL is left out: its LISTEN/NOTIFY wakes the relay before the scan would.
mod scan_counter {
    use super::*;

    mod sqlite {
        use super::*;
        case!(outbox_testkit::fresh_sqlite, an_unsignalled_message_is_claimed_by_the_scan, true);
    }

    mod mysql {
        use super::*;
        case!(outbox_testkit::fresh_mysql, an_unsignalled_message_is_claimed_by_the_scan, true);
    }
}

dialect!(postgres, outbox_testkit::fresh_pg);
dialect!(mysql, outbox_testkit::fresh_mysql);
dialect!(sqlite, outbox_testkit::fresh_sqlite);

/// Locked claims only exist on PostgreSQL and MySQL/MariaDB.
mod locked {
    use super::*;

    case!(outbox_testkit::fresh_pg, a_killed_relays_locked_claim_is_rolled_back_at_once, true);
    // Only a locked claim can take a row the database refuses every change to (a lease is one).
    case!(outbox_testkit::fresh_pg, a_row_nothing_can_be_written_for_is_not_republished, true);
    case!(outbox_testkit::fresh_pg, a_held_back_message_holds_back_its_keys_run, true);
    case!(outbox_testkit::fresh_pg, runs_continued_behind_a_batch_in_flight_keep_key_order, true);
    case!(outbox_testkit::fresh_pg, a_new_message_is_not_held_up_behind_a_hot_keys_continued_run, true);
    case!(
        outbox_testkit::fresh_pg,
        another_processs_message_is_not_held_up_behind_a_hot_keys_continued_run,
        true
    );
    case!(outbox_testkit::fresh_pg, the_lane_claims_again_a_message_it_could_not_take, true);
    case!(outbox_testkit::fresh_pg, the_lane_finds_a_message_committed_after_a_newer_one, true);
    case!(outbox_testkit::fresh_pg, the_lane_takes_a_message_a_look_saw_before_it_was_due, true);
    case!(outbox_testkit::fresh_pg, the_lanes_first_look_takes_what_was_committed_just_before_it, true);
    case!(outbox_testkit::fresh_pg, the_lane_runs_under_the_daemons_budget, true);
    case!(outbox_testkit::fresh_pg, no_lane_under_a_crowded_budget_on_postgres, true);

    mod mysql {
        use super::*;

        case!(outbox_testkit::fresh_mysql, a_killed_relays_locked_claim_is_rolled_back_at_once, true);
        case!(outbox_testkit::fresh_mysql, a_row_nothing_can_be_written_for_is_not_republished, true);
        case!(outbox_testkit::fresh_mysql, a_held_back_message_holds_back_its_keys_run, true);
        case!(outbox_testkit::fresh_mysql, runs_continued_behind_a_batch_in_flight_keep_key_order, true);
        case!(
            outbox_testkit::fresh_mysql,
            a_new_message_is_not_held_up_behind_a_hot_keys_continued_run,
            true
        );
        case!(
            outbox_testkit::fresh_mysql,
            another_processs_message_is_not_held_up_behind_a_hot_keys_continued_run,
            true
        );
        case!(outbox_testkit::fresh_mysql, the_lane_claims_again_a_message_it_could_not_take, true);
        case!(outbox_testkit::fresh_mysql, the_lane_finds_a_message_committed_after_a_newer_one, true);
        case!(outbox_testkit::fresh_mysql, the_lane_takes_a_message_a_look_saw_before_it_was_due, true);
        case!(
            outbox_testkit::fresh_mysql,
            the_lanes_first_look_takes_what_was_committed_just_before_it,
            true
        );
        case!(outbox_testkit::fresh_mysql, the_lane_runs_under_the_daemons_budget, true);
        case!(outbox_testkit::fresh_mysql, the_lane_runs_under_a_crowded_budget, true);
    }
}

/// PostgreSQL only: rows inserted by another process (any language) wake an idle relay through
/// `LISTEN/NOTIFY`, and writers pay for `NOTIFY` only while some relay is idle.
mod postgres_push {
    use super::*;

    /// Whether one relay has declared itself idle (so writers notify).
    async fn declared_idle(pool: &sqlx::PgPool) -> bool {
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_relay_idle WHERE until > now()")
            .fetch_one(pool)
            .await
            .unwrap();
        rows == 1
    }

    /// A migrated database and a relay over it to a test transport, started, whose scan and
    /// quicker looks come only after a minute: whatever it claims sooner, a wake-up started.
    /// `tune` adjusts the configuration further.
    async fn woken_only(
        tune: impl FnOnce(&mut RelayConfig),
    ) -> (outbox_testkit::TestDb<sqlx::Postgres>, Outbox<sqlx::Postgres>, TestTransport, Running) {
        let db = outbox_testkit::fresh_pg().await;
        let outbox = Outbox::new(db.pool.clone());
        outbox.migrate().await.unwrap();
        let t = TestTransport::new();
        let mut cfg = config("r1");
        cfg.idle_interval = Duration::from_secs(60);
        cfg.active_scan_interval = cfg.idle_interval;
        tune(&mut cfg);
        let running = start(relay_to(&outbox, cfg, Destination::new("broker", Arc::new(t.clone()))));
        (db, outbox, t, running)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_foreign_insert_wakes_an_idle_relay_through_notify() {
        let db = outbox_testkit::fresh_pg().await;
        let outbox = Outbox::new(db.pool.clone());
        outbox.migrate().await.unwrap();
        let t = TestTransport::new();
        let mut cfg = config("r1");
        cfg.idle_interval = Duration::from_secs(60); // the scan cannot explain a fast delivery
        let relay = relay_to(&outbox, cfg, Destination::new("broker", Arc::new(t.clone())));
        let running = start(relay);
        // The relay LISTENs before its first scan and marks itself idle after it: wait for the
        // mark, so the NOTIFY below is sent and heard.
        eventually("the relay is idle", || declared_idle(&db.pool)).await;
        // A foreign application: plain SQL on its own connection, no in-process signal.
        let foreign = sqlx::PgPool::connect(&db.url).await.unwrap();
        sqlx::query("INSERT INTO outbox_message (topic, payload) VALUES ('order.paid', 'from python')")
            .execute(&foreign)
            .await
            .unwrap();
        eventually("delivered", || async { t.delivered().len() == 1 }).await;
        assert_eq!(
            RelayStats::get(&running.stats.claimed_on_scan),
            0,
            "woken by NOTIFY, not by the 60 s scan"
        );
        assert_eq!(t.delivered()[0].payload, "from python");
        running.stop().await;
        foreign.close().await;
        db.drop_db().await;
    }

    /// A commit of the relay's own process wakes it through the after-commit signal, with the
    /// ids; the database's notification of the same rows (sent because the relay was idle) is
    /// known for a duplicate and starts no claim. Before schema 8 it did, and that claim found
    /// nothing whenever the notification came after the claim by id had started.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_notification_of_its_own_commit_starts_no_second_claim() {
        use outbox_relay::ClaimKind;
        // Neither the scan nor the quicker looks after a delivery can take the foreign row.
        let (db, outbox, t, running) = woken_only(|_| {}).await;
        let idle = || declared_idle(&db.pool);
        let woken = || {
            let k = running.stats.claim_kinds().into_iter().find(|k| k.kind == ClaimKind::Woken).unwrap();
            (k.claims, k.empty)
        };
        const OWN: usize = 8;
        eventually("the relay is idle", idle).await;
        let before = woken();
        for n in 1..=OWN {
            eventually("the relay is idle", idle).await;
            let mut tx = outbox.begin().await.unwrap();
            tx.enqueue(&NewMessage::new("orders", format!("own {n}"))).await.unwrap();
            tx.commit().await.unwrap();
            eventually("delivered", || async { t.delivered().len() == n }).await;
        }
        // A foreign row, once the relay is idle again: its notification comes after every one
        // above on the listening connection, so once it is delivered they have all been read.
        eventually("the relay is idle", idle).await;
        let foreign = sqlx::PgPool::connect(&db.url).await.unwrap();
        sqlx::query("INSERT INTO outbox_message (topic, payload) VALUES ('orders', 'foreign')")
            .execute(&foreign)
            .await
            .unwrap();
        eventually("delivered", || async { t.delivered().len() == OWN + 1 }).await;
        // The claim the foreign row's settlement wakes runs after the delivery: wait for it (a
        // claim is counted, then counted empty). Any claim woken by the own commits' notifications
        // came before the foreign one's, so it would already be counted here.
        eventually("the settlement's wake-up has claimed", || async {
            let (claims, empty) = woken();
            claims >= before.0 + 2 && empty > before.1
        })
        .await;
        let after = woken();
        assert_eq!(
            (after.0 - before.0, after.1 - before.1),
            (2, 1),
            "two claims woken without ids, both for the foreign row: the one that took it and the \
             one its settlement wakes, which finds nothing (before schema 8, each of the own \
             commits' notifications could add one); claims: {:?}",
            running.stats.claim_kinds()
        );
        running.stop().await;
        foreign.close().await;
        db.drop_db().await;
    }

    /// A wake-up for a commit of this process whose row a claim looking for due messages took
    /// first (the commit landed between that claim's start and its statement) starts no claim:
    /// the claim by id would find the row locked by the relay's own batch, and look for due
    /// messages for nothing. Any other wake-up still claims.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wake_up_for_rows_its_batches_hold_starts_no_claim() {
        // The batch stays in flight, its rows held, until the relay stops.
        let (db, outbox, t, running) = woken_only(|cfg| {
            (cfg.publish_timeout, cfg.lease, cfg.shutdown_timeout) =
                (Duration::from_secs(300), Duration::from_secs(600), Duration::from_millis(200));
        })
        .await;
        eventually("the relay is idle", || declared_idle(&db.pool)).await;
        t.set_hang(true);
        // Taken by a claim woken without ids (the row's notification), held in flight.
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO outbox_message (topic, payload) VALUES ('orders', 'a') RETURNING id",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        eventually("the batch is in flight", || async { t.in_flight() == 1 }).await;
        let claims = RelayStats::get(&running.stats.claims);
        // The same row's commit signal, as if it came late.
        outbox.signal().committed(&[MessageId(id)]);
        eventually("the wake-up is passed over", || async {
            RelayStats::get(&running.stats.wake_ups_held) == 1
        })
        .await;
        assert_eq!(RelayStats::get(&running.stats.claims), claims, "no claim for a row in flight");
        // Not passed over: a wake-up that names nothing, and one naming a row not held.
        outbox.signal().wake();
        eventually("a bare wake-up claims", || async {
            RelayStats::get(&running.stats.claims) == claims + 1
        })
        .await;
        outbox.signal().committed(&[MessageId(id), MessageId(id + 1_000)]);
        eventually("a wake-up naming a row not held claims", || async {
            RelayStats::get(&running.stats.claims) == claims + 2
        })
        .await;
        assert_eq!(RelayStats::get(&running.stats.wake_ups_held), 1);
        assert_eq!(t.in_flight(), 1, "the row was published once");
        running.stop().await;
        db.drop_db().await;
    }

    #[tokio::test]
    async fn writers_notify_only_while_a_relay_is_idle() {
        let db = outbox_testkit::fresh_pg().await;
        let outbox = Outbox::new(db.pool.clone());
        outbox.migrate().await.unwrap();
        let mut listener = sqlx::postgres::PgListener::connect(&db.url).await.unwrap();
        listener.listen("outbox_message").await.unwrap();
        let insert = "INSERT INTO outbox_message (topic, payload) VALUES ('t', 'p')";

        sqlx::query(insert).execute(&db.pool).await.unwrap();
        let quiet = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await;
        assert!(quiet.is_err(), "no relay idle: no NOTIFY (and no commit-time lock) for writers");

        outbox.set_idle("r1", true, Duration::from_secs(30)).await.unwrap();
        let id: i64 =
            sqlx::query_scalar(&format!("{insert} RETURNING id")).fetch_one(&db.pool).await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), listener.recv()).await;
        let n = n.expect("an idle relay is notified").unwrap();
        assert_eq!(n.payload(), format!("{id} {id} 1"), "the notification names the row: first, last, rows");

        // A statement of several rows is one notification naming them all.
        let ids: Vec<i64> = sqlx::query_scalar(
            "INSERT INTO outbox_message (topic, payload, biz_type, biz_key) \
             VALUES ('t', 'a', 'order', '1'), ('t', 'b', 'order', '2'), ('t', 'c', 'order', '3') RETURNING id",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        let (first, last) = (ids.iter().min().unwrap(), ids.iter().max().unwrap());
        let n = tokio::time::timeout(Duration::from_secs(5), listener.recv()).await.unwrap().unwrap();
        assert_eq!(n.payload(), format!("{first} {last} 3"));

        // A duplicate the statement skipped added no row: nothing to announce.
        sqlx::query(
            "INSERT INTO outbox_message (topic, payload, biz_type, biz_key) VALUES ('t', 'a', 'order', '1') \
             ON CONFLICT DO NOTHING",
        )
        .execute(&db.pool)
        .await
        .unwrap();
        let quiet = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await;
        assert!(quiet.is_err(), "an INSERT that added nothing notifies nothing");

        // A rolled-back insert notifies nobody.
        let mut tx = db.pool.begin().await.unwrap();
        sqlx::query(insert).execute(&mut *tx).await.unwrap();
        tx.rollback().await.unwrap();
        let after_rollback = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await;
        assert!(after_rollback.is_err());

        outbox.set_idle("r1", false, Duration::from_secs(30)).await.unwrap();
        sqlx::query(insert).execute(&db.pool).await.unwrap();
        let quiet = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await;
        assert!(quiet.is_err(), "the relay is busy again: writers stop notifying");
        drop(listener);
        db.drop_db().await;
    }
}

/// The database going away while the relay runs: claims fail, the relay backs off and logs,
/// and once the database is back everything committed meanwhile is published.
mod database_outage {
    use super::*;
    use outbox_testkit::proxy::TcpProxy;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_relay_survives_losing_its_database_and_drains_afterwards() {
        let db = outbox_testkit::fresh_pg().await;
        let direct = Outbox::new(db.pool.clone());
        direct.migrate().await.unwrap();
        // The relay reaches PostgreSQL through a proxy the test can cut.
        let proxy = TcpProxy::start("127.0.0.1:5432").await;
        let via_proxy = db.url.replacen("127.0.0.1:5432", &proxy.addr().to_string(), 1);
        let relay_pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(2))
            .connect(&via_proxy)
            .await
            .unwrap();
        let relay_outbox = Outbox::new(relay_pool);
        let t = TestTransport::new();
        let running = start(relay(&relay_outbox, "r1", &t, fast_retry(5)));

        let first = direct.enqueue(&NewMessage::new("t", "before")).await.unwrap();
        eventually("delivered before the outage", || async { t.delivered_count(first.id) == 1 }).await;

        proxy.cut();
        let mut during = Vec::new();
        for i in 0..20 {
            during.push(direct.enqueue(&NewMessage::new("t", format!("during {i}"))).await.unwrap().id);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(RelayStats::get(&running.stats.store_errors) > 0, "the relay noticed the outage");
        assert!(during.iter().all(|id| t.delivered_count(*id) == 0));

        proxy.restore();
        eventually("everything committed during the outage is published", || async {
            all_in(&direct, &during, Status::Sent).await
        })
        .await;
        running.stop().await;
        for id in &during {
            assert_eq!(t.delivered_count(*id), 1);
        }
        relay_outbox.pool().close().await;
        drop(proxy);
        db.drop_db().await;
    }
}

/// ACK mode, per database: a consumer that never confirms gets the message again after the ACK
/// timeout (same id) until max attempts, then it is `failed`; a consumer that confirms stops
/// redelivery; a forged token changes nothing.
mod ack_mode {
    use super::*;
    use outbox_relay::{acknowledge, AckConfig, AckError};
    use outbox_store::AckOutcome;

    const SECRET: &[u8] = b"ack-secret-for-tests-0123456789";

    fn ack_relay<DB: OutboxDatabase>(outbox: &Outbox<DB>, t: &TestTransport) -> Relay<Outbox<DB>>
    where
        Outbox<DB>: RelayStore,
    {
        let mut cfg = config("r1");
        cfg.idle_interval = Duration::from_millis(100);
        Relay::builder(outbox)
            .config(cfg)
            .destination(
                Destination::new("crm", Arc::new(t.clone())).retry(fast_retry(3)).ack(AckConfig::new(
                    Duration::from_millis(400),
                    SECRET.to_vec(),
                    "shop",
                )),
            )
            .route(Route::new("#", ["crm"]))
            .build()
            .unwrap()
    }

    pub(super) async fn never_acked_is_redelivered_then_failed<DB: OutboxDatabase>(outbox: Outbox<DB>)
    where
        Outbox<DB>: RelayStore,
    {
        let t = TestTransport::new();
        let e = outbox.enqueue(&NewMessage::new("order.paid", "x")).await.unwrap();
        let running = start(ack_relay(&outbox, &t));
        eventually("failed after 3 unacknowledged deliveries", || async {
            status(&outbox, e.id).await.status == Status::Failed
        })
        .await;
        running.stop().await;
        assert_eq!(t.delivered_count(e.id), 3, "redelivered after each ACK timeout, 3 attempts");
        let attempts: Vec<String> =
            t.delivered().iter().map(|env| env.headers[header::ATTEMPT].clone()).collect();
        assert_eq!(attempts, ["1", "2", "3"]);
        let m = status(&outbox, e.id).await;
        assert!(m.last_error.unwrap().contains("no ACK"));
    }

    pub(super) async fn acked_stops_redelivery_and_forgeries_change_nothing<DB: OutboxDatabase>(
        outbox: Outbox<DB>,
    ) where
        Outbox<DB>: RelayStore,
    {
        let t = TestTransport::new();
        let e = outbox.enqueue(&NewMessage::new("order.paid", "x")).await.unwrap();
        let running = start(ack_relay(&outbox, &t));
        eventually("delivered", || async { t.delivered_count(e.id) == 1 }).await;
        eventually("recorded as sent, awaiting the ACK", || async {
            status(&outbox, e.id).await.status == Status::Sent
        })
        .await;
        let env = t.delivered()[0].clone();
        let token = env.headers[header::ACK_TOKEN].clone();
        assert_eq!(env.headers[header::ACK_DESTINATION], "crm");

        // A forged token, and a real token used for another message or destination: refused.
        let forged = outbox_core::ack::sign(b"not-the-secret", "shop", e.id, "crm", 4_000_000_000);
        for (tok, id, dest) in [
            (forged.as_str(), e.id, "crm"),
            (token.as_str(), MessageId(e.id.0 + 1), "crm"),
            (token.as_str(), e.id, "erp"),
            ("garbage", e.id, "crm"),
        ] {
            let r = acknowledge(&outbox, SECRET, "shop", id, dest, tok).await;
            assert!(matches!(r, Err(AckError::Token(_))), "{r:?}");
        }
        let r = acknowledge(&outbox, SECRET, "shop", e.id, "crm", &token).await.unwrap();
        assert_eq!(r, AckOutcome::Acked { message_done: true });
        let again = acknowledge(&outbox, SECRET, "shop", e.id, "crm", &token).await.unwrap();
        assert_eq!(again, AckOutcome::AlreadyAcked, "an ACK is idempotent");

        tokio::time::sleep(Duration::from_millis(1200)).await; // three ACK timeouts
        running.stop().await;
        assert_eq!(t.delivered_count(e.id), 1, "no redelivery after the ACK");
        assert_eq!(status(&outbox, e.id).await.status, Status::Acked);
    }

    macro_rules! dialect {
        ($name:ident, $fresh:path) => {
            mod $name {
                use super::*;

                case!($fresh, ack_mode::never_acked_is_redelivered_then_failed, true);
                case!($fresh, ack_mode::acked_stops_redelivery_and_forgeries_change_nothing, true);
            }
        };
    }

    dialect!(postgres, outbox_testkit::fresh_pg);
    dialect!(mysql, outbox_testkit::fresh_mysql);
    dialect!(sqlite, outbox_testkit::fresh_sqlite);
}
