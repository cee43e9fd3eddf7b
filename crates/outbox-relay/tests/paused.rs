//! The relay engine's timing rules on the in-memory store with tokio's paused clock: retry
//! schedules, exhaustion, the breaker, the publish timeout, lease take-over, per-key order
//! under failures, and the pause after a refused settlement. Time is virtual: a test that
//! waits "ten seconds" takes none, and the figures asserted are exact, whatever the load of
//! the machine. The same rules are tested against the real databases in `relay.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::{MessageId, NewMessage, OutboxMessage, Outcome, RetryPolicy, Status};
use outbox_relay::testing::{MemoryStore, TestTransport};
use outbox_relay::{AlertHook, BreakerConfig, Destination, Relay, RelayConfig, RelayStats, Route};
use outbox_store::{Claims, RelayState};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The scan period of the relays here: a message due at `t` is published by `t + SCAN`.
const SCAN: Duration = Duration::from_millis(100);

fn config(owner: &str) -> RelayConfig {
    RelayConfig {
        owner: owner.into(),
        batch_size: 50,
        lease: Duration::from_secs(10),
        idle_interval: SCAN,
        publish_timeout: Duration::from_secs(2),
        lock_claims: false,
        ..RelayConfig::default()
    }
}

fn policy(max_attempts: u32, initial: Duration) -> RetryPolicy {
    RetryPolicy { max_attempts, initial, max_delay: Duration::from_secs(60), multiplier: 2.0, jitter: 0.0 }
}

#[derive(Debug, Default)]
struct Alerts(Mutex<Vec<(i64, String)>>, Mutex<Vec<(String, Duration)>>);

#[async_trait::async_trait]
impl AlertHook for Alerts {
    async fn message_failed(&self, m: &OutboxMessage, reason: &str) {
        self.0.lock().unwrap().push((m.id.0, reason.to_owned()));
    }

    async fn destination_down(&self, destination: &str, open_for: Duration) {
        self.1.lock().unwrap().push((format!("down:{destination}"), open_for));
    }

    async fn backlog_overdue(&self, overdue: Duration) {
        self.1.lock().unwrap().push(("overdue".into(), overdue));
    }
}

impl Alerts {
    fn events(&self) -> Vec<(String, Duration)> {
        self.1.lock().unwrap().clone()
    }
}

struct Running {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

impl Running {
    fn spawn(relay: Relay<MemoryStore>) -> Running {
        let stop = CancellationToken::new();
        let task = tokio::spawn(relay.run(stop.clone()));
        Running { stop, task }
    }
}

/// A memory store, a test transport every topic goes to (`broker`), and the alerts raised.
struct Bench {
    store: MemoryStore,
    t: TestTransport,
    alerts: Arc<Alerts>,
}

impl Bench {
    fn new() -> Bench {
        Bench { store: MemoryStore::new(), t: TestTransport::new(), alerts: Arc::default() }
    }

    /// A new bench, and a relay started on it with `retry` (see [`Bench::start`]).
    fn started(retry: RetryPolicy) -> (Bench, Running) {
        let bench = Bench::new();
        let running = bench.start(retry);
        (bench, running)
    }

    /// Starts relay `r1` publishing every topic to the transport with `retry` and a breaker
    /// that opens after 3 failures for 1 s, doubling up to 8 s.
    fn start(&self, retry: RetryPolicy) -> Running {
        let destination =
            Destination::new("broker", Arc::new(self.t.clone())).retry(retry).breaker(BreakerConfig {
                failure_threshold: 3,
                cooldown: Duration::from_secs(1),
                max_cooldown: Duration::from_secs(8),
            });
        Running::spawn(
            Relay::builder(&self.store)
                .config(config("r1"))
                .destination(destination)
                .route(Route::new("#", ["broker"]))
                .alert(self.alerts.clone())
                .build()
                .unwrap(),
        )
    }

    /// Enqueues a message on topic `orders`.
    fn order(&self) -> MessageId {
        self.store.enqueue(&NewMessage::new("orders", "{}")).unwrap()
    }

    /// [`Bench::order`], which the transport answers with `outcome` its first `times` times.
    fn failing_order(&self, times: u32, outcome: Outcome) -> MessageId {
        let id = self.order();
        self.t.fail_message(id, times, outcome);
        id
    }

    /// `n` messages on topic `orders` with key `key`, payloads `0`, `1`, ...
    fn keyed(&self, n: usize, key: &str) -> Vec<MessageId> {
        (0..n)
            .map(|i| self.store.enqueue(&NewMessage::new("orders", format!("{i}")).key(key)).unwrap())
            .collect()
    }

    /// Waits in virtual time until every message of `ids` is `sent`.
    async fn until_all_sent(&self, ids: &[MessageId]) {
        until("all delivered", || ids.iter().all(|id| self.status(*id) == Status::Sent)).await;
    }

    fn status(&self, id: MessageId) -> Status {
        self.store.get(id).unwrap().status
    }

    /// Waits in virtual time until message `id` is `status`.
    async fn until_is(&self, id: MessageId, status: Status) {
        until(&format!("message {id} {status:?}"), || self.status(id) == status).await;
    }
}

/// Waits in virtual time for `cond`, at most ten virtual minutes.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(600);
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn retries_wait_exactly_the_policys_backoff() {
    let (b, running) = Bench::started(policy(5, Duration::from_secs(1)));
    let id = b.failing_order(3, Outcome::retryable("broker busy"));
    b.until_is(id, Status::Sent).await;

    let at: Vec<Instant> = b.t.received().iter().map(|r| r.at).collect();
    assert_eq!(at.len(), 4, "three failures, then the delivery");
    // 1 s, 2 s, 4 s after each failure (no jitter), each found by the next scan.
    for (i, nominal) in [1, 2, 4].into_iter().map(Duration::from_secs).enumerate() {
        let gap = at[i + 1] - at[i];
        assert!(
            gap >= nominal && gap <= nominal + SCAN * 2,
            "retry {} after {gap:?}, policy says {nominal:?}",
            i + 1
        );
    }
    let m = b.store.get(id).unwrap();
    assert_eq!(m.attempts, 3, "the failed attempts are counted");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn exhausted_attempts_fail_the_message_once_with_an_alert() {
    let (b, running) = Bench::started(policy(3, Duration::from_millis(200)));
    let bad = b.failing_order(1_000, Outcome::retryable("broker busy"));
    let good = b.order();
    b.until_is(bad, Status::Failed).await;
    assert_eq!(b.status(good), Status::Sent, "the other message is not held up");

    // A virtual hour later: no further attempt, one alert.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(b.t.attempts(bad), 3, "max_attempts = 3");
    let m = b.store.get(bad).unwrap();
    assert_eq!((m.status, m.attempts), (Status::Failed, 3));
    assert!(m.last_error.as_deref().unwrap_or("").contains("broker busy"), "{:?}", m.last_error);
    let alerts = b.alerts.0.lock().unwrap().clone();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].0, bad.0);
    assert!(alerts[0].1.contains("broker busy"), "{alerts:?}");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_permanent_refusal_fails_at_once() {
    let (b, running) = Bench::started(policy(10, Duration::from_secs(1)));
    let id = b.failing_order(1, Outcome::permanent("schema rejected"));
    b.until_is(id, Status::Failed).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(b.t.attempts(id), 1, "a permanent error is not retried");
    assert_eq!(b.alerts.0.lock().unwrap().len(), 1);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_destination_that_is_down_is_probed_not_hammered() {
    let (b, running) = Bench::started(policy(1_000, Duration::from_millis(100)));
    b.t.set_down(true);
    let ids: Vec<_> =
        (0..20).map(|i| b.store.enqueue(&NewMessage::new("orders", format!("{i}"))).unwrap()).collect();

    // One virtual minute down: after the breaker opens (3 unavailable publishes), one probe
    // per cool-down (1, 2, 4, then 8 s), not 20 messages every 100 ms.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let publishes = b.t.received().len();
    assert!(publishes <= 3 * 20 + 12, "{publishes} envelopes offered to a destination that is down");
    let before = b.t.received().len();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let in_a_minute = b.t.received().len() - before;
    assert!(in_a_minute <= 8, "{in_a_minute} envelopes in a minute with the breaker open");
    assert!(ids.iter().all(|id| b.status(*id) == Status::Pending), "nothing fails while it is down");

    b.t.set_down(false);
    until("all delivered", || ids.iter().all(|id| b.status(*id) == Status::Sent)).await;
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_publish_that_never_answers_times_out_and_is_retried() {
    let (b, running) = Bench::started(policy(10, Duration::from_millis(500)));
    b.t.set_hang(true);
    let start_at = Instant::now();
    let id = b.order();
    until("the publish timed out", || b.store.get(id).unwrap().last_error.is_some()).await;
    let waited = Instant::now() - start_at;
    assert!(
        waited >= Duration::from_secs(2) && waited <= Duration::from_secs(2) + SCAN * 2,
        "timed out after {waited:?}, publish_timeout is 2 s"
    );
    assert_eq!(b.status(id), Status::Pending, "retried later, not failed");
    b.t.set_hang(false);
    b.until_is(id, Status::Sent).await;
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_dead_relays_lease_is_taken_over_when_it_expires() {
    let b = Bench::new();
    let id = b.order();
    let claimed_at = Instant::now();
    // A relay claims it for 5 s and dies.
    let ghost = b.store.claim("ghost", 10, Duration::from_secs(5)).await.unwrap();
    assert_eq!(ghost.len(), 1);
    let running = b.start(policy(5, Duration::from_secs(1)));
    b.until_is(id, Status::Sent).await;
    let at = b.t.received()[0].at;
    assert!(at - claimed_at >= Duration::from_secs(5), "published {:?} after the claim", at - claimed_at);
    assert!(at - claimed_at <= Duration::from_secs(5) + SCAN * 2, "taken over late: {:?}", at - claimed_at);
    assert_eq!(b.store.get(id).unwrap().updated_by.as_deref(), Some("r1"));
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_keys_messages_keep_their_order_through_retries() {
    let (b, running) = Bench::started(policy(10, Duration::from_millis(300)));
    let keyed = b.keyed(5, "order-7");
    let other = b.store.enqueue(&NewMessage::new("orders", "x").key("order-8")).unwrap();
    b.t.fail_message(keyed[0], 2, Outcome::retryable("busy"));
    b.t.fail_message(keyed[2], 1, Outcome::unavailable("gone"));
    b.until_all_sent(&keyed).await;

    let delivered: Vec<_> = b.t.delivered().iter().map(|e| e.id).filter(|id| keyed.contains(id)).collect();
    assert_eq!(delivered, keyed, "once each, in id order");
    let first_of_key = b.t.received().iter().position(|r| keyed.contains(&r.envelope.id)).unwrap();
    let other_at = b.t.received().iter().position(|r| r.envelope.id == other).unwrap();
    assert!(other_at <= first_of_key + 1, "another key is not held up by this key's retries");
    running.stop().await;
}

/// Per-key runs: a key's backlog travels in one claim (published in id order, each once the one
/// before it is delivered), and a failure in the middle of the run holds the rest back: nothing
/// after the failed message is published until it is delivered.
#[tokio::test(start_paused = true)]
async fn a_keys_run_goes_in_one_claim_and_a_failure_holds_back_the_rest() {
    let (b, running) = Bench::started(policy(10, Duration::from_millis(300)));
    let keyed = b.keyed(20, "k");
    b.t.fail_message(keyed[7], 1, Outcome::retryable("busy"));
    b.until_all_sent(&keyed).await;

    let received = b.t.received();
    let ids: Vec<MessageId> = received.iter().map(|r| r.envelope.id).collect();
    let expected: Vec<MessageId> = keyed[..8].iter().chain(&keyed[7..]).copied().collect();
    assert_eq!(ids, expected, "in id order; the failed one again before anything after it");
    let first = received[0].at;
    let at_once = received.iter().take_while(|r| r.at == first).count();
    assert_eq!(at_once, 8, "the run up to the failure went out in one claim, at one instant");
    assert!(received[8].at >= first + Duration::from_millis(300), "the rest waited for the retry");
    let attempts: Vec<i32> = keyed.iter().map(|id| b.store.get(*id).unwrap().attempts).collect();
    assert_eq!(attempts.iter().sum::<i32>(), 1, "held-back messages spent no attempt: {attempts:?}");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_settlement_pauses_claims_and_publishes_again_only_after_the_lease() {
    let b = Bench::new();
    // The batch's write is refused five times: the relay's five tries of one settlement.
    b.store.refuse_settlements(5);
    let running = b.start(policy(5, Duration::from_secs(1)));
    let start_at = Instant::now();
    let id = b.order();
    b.until_is(id, Status::Sent).await;

    let at: Vec<Instant> = b.t.received().iter().map(|r| r.at).collect();
    assert_eq!(at.len(), 2, "published again once, after its lease; not in a loop");
    let lease = config("r1").lease;
    assert!(at[1] - start_at >= lease, "published again {:?} after the first claim", at[1] - start_at);
    assert!(b.store.settlements() <= 7, "{} settlements", b.store.settlements());
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_store_that_refuses_claims_is_retried_with_backoff() {
    let b = Bench::new();
    b.store.refuse_claims(6);
    let id = b.order();
    let start_at = Instant::now();
    let running = b.start(policy(5, Duration::from_secs(1)));
    // Refused at 0, 0.1, 0.3, 0.7, 1.5 and 3.1 s (100 ms doubling); the next claim at 6.3 s.
    tokio::time::sleep(Duration::from_millis(6200)).await;
    assert_eq!(b.store.claims(), 6, "a refusing store is not asked in a tight loop");
    assert!(b.t.received().is_empty());
    b.until_is(id, Status::Sent).await;
    let waited = b.t.received()[0].at - start_at;
    assert!(waited >= Duration::from_millis(6300), "delivered {waited:?} after six refused claims");
    running.stop().await;
}

/// A destination paused by an operator gets nothing and its messages spend no attempt; other
/// destinations go on; after the resume everything is delivered within the pause's wait.
#[tokio::test(start_paused = true)]
async fn a_paused_destination_holds_its_messages_without_spending_attempts() {
    let store = MemoryStore::new();
    let (held, other) = (TestTransport::new(), TestTransport::new());
    let relay = Relay::builder(&store)
        .config(config("r1"))
        .destination(
            Destination::new("held", Arc::new(held.clone())).retry(policy(2, Duration::from_millis(100))),
        )
        .destination(Destination::new("other", Arc::new(other.clone())))
        .route(Route::new("orders", ["held"]))
        .route(Route::new("stock", ["other"]))
        .build()
        .unwrap();
    store.set_paused("held", true);
    let running = Running::spawn(relay);
    let orders: Vec<_> =
        (0..5).map(|i| store.enqueue(&NewMessage::new("orders", format!("{i}"))).unwrap()).collect();
    let stock = store.enqueue(&NewMessage::new("stock", "{}")).unwrap();

    until("the other destination delivers", || store.get(stock).unwrap().status == Status::Sent).await;
    // A virtual minute paused: nothing offered, nothing failed, no attempt spent, although
    // the retry policy allows two attempts only.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(held.received().len(), 0, "a paused destination is offered nothing");
    for id in &orders {
        let m = store.get(*id).unwrap();
        assert_eq!((m.status, m.attempts), (Status::Pending, 0), "message {id}");
    }

    store.set_paused("held", false);
    let resumed = Instant::now();
    let sent = |id: &MessageId| store.get(*id).unwrap().status == Status::Sent;
    until("delivered after the resume", || orders.iter().all(sent)).await;
    let took = Instant::now() - resumed;
    assert!(
        took <= Duration::from_secs(7),
        "delivered {took:?} after the resume (pause re-read 1 s, wait 5 s)"
    );
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_relay_registers_refreshes_and_removes_its_presence() {
    let (b, running) = Bench::started(policy(3, Duration::from_millis(100)));
    let store = &b.store;
    until("the relay registers", || store.relays().len() == 1).await;
    let first = store.relays().remove(0);
    assert_eq!((first.owner.as_str(), first.pid), ("r1", std::process::id()));
    assert_eq!((first.claimed, first.last_claim_at), (0, None));

    // Its next beat carries what it did since, and its state.
    let id = b.order();
    b.until_is(id, Status::Sent).await;
    until("the next beat reports the claim", || store.relays().first().is_some_and(|r| r.claimed == 1)).await;
    let now = store.relays().remove(0);
    assert_eq!((now.delivered, now.failed, now.started_at), (1, 0, first.started_at));
    assert!(now.last_claim_at.is_some());
    until("it reports idle", || store.relays().first().is_some_and(|r| r.state == RelayState::Idle)).await;

    running.stop().await;
    assert!(store.relays().is_empty(), "a relay that stops removes its row");
}

#[tokio::test(start_paused = true)]
async fn a_destination_down_too_long_alerts_once_per_outage() {
    let (b, running) = Bench::started(policy(3, Duration::from_millis(100)));
    let (t, alerts) = (&b.t, &b.alerts);
    t.set_down(true);
    b.order();
    // The default threshold is 5 minutes, checked every 10 s (so seen open up to 10 s late):
    // one alert, not one per check.
    tokio::time::sleep(Duration::from_secs(295)).await;
    assert!(alerts.events().is_empty(), "not before the threshold: {:?}", alerts.events());
    tokio::time::sleep(Duration::from_secs(25)).await;
    let events = alerts.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "down:broker");
    assert!(events[0].1 >= Duration::from_secs(300), "{events:?}");
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(alerts.events().len(), 1, "the same outage alerts once");

    // Back up (the circuit closes), then down again: a new outage, a new alert.
    t.set_down(false);
    until("delivered", || b.store.with_status(Status::Sent).len() == 1).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    t.set_down(true);
    b.order();
    until("a second alert", || alerts.events().len() == 2).await;
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn messages_overdue_too_long_alert_once_until_the_backlog_recovers() {
    let store = MemoryStore::new();
    let t = TestTransport::new();
    let alerts = Arc::new(Alerts::default());
    let relay = Relay::builder(&store)
        .config(RelayConfig { alert_overdue_after: Some(Duration::from_secs(60)), ..config("r1") })
        .destination(Destination::new("broker", Arc::new(t.clone())))
        .route(Route::new("#", ["broker"]))
        .alert(alerts.clone())
        .build()
        .unwrap();
    // The store refuses every claim for a while: the message stays due, unpublished.
    store.refuse_claims(u32::MAX);
    let running = Running::spawn(relay);
    let id = store.enqueue(&NewMessage::new("orders", "{}")).unwrap();
    tokio::time::sleep(Duration::from_secs(50)).await;
    assert!(alerts.events().is_empty(), "{:?}", alerts.events());
    until("the overdue alert", || !alerts.events().is_empty()).await;
    tokio::time::sleep(Duration::from_secs(300)).await;
    let events = alerts.events();
    assert_eq!(events.len(), 1, "once while it lasts: {events:?}");
    assert_eq!(events[0].0, "overdue");
    assert!(events[0].1 >= Duration::from_secs(60), "{events:?}");

    // Claims work again: delivered, and the watch re-arms.
    store.refuse_claims(0);
    until("delivered", || store.get(id).unwrap().status == Status::Sent).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(alerts.events().len(), 1);
    running.stop().await;
}

/// A transport whose every publish makes this process commit one more message (a service whose
/// consumer answers each message with another), while `left` lasts: every claim of the relay
/// then has committed ids from the commit signal to claim by id. At its tenth publish another
/// process writes a message (no in-process signal): `foreign`, with the publishes before it.
#[derive(Debug)]
struct Echo {
    store: MemoryStore,
    published: Mutex<Vec<MessageId>>,
    left: Mutex<usize>,
    foreign: Mutex<Option<(MessageId, usize)>>,
}

#[async_trait::async_trait]
impl outbox_core::Transport for Echo {
    fn kind(&self) -> &'static str {
        "echo"
    }

    async fn publish(&self, batch: &[outbox_core::Envelope]) -> Vec<Outcome> {
        for e in batch {
            let mut published = self.published.lock().unwrap();
            published.push(e.id);
            if published.len() == 10 {
                let id = self.store.enqueue_unsignalled(&NewMessage::new("orders", "foreign")).unwrap();
                *self.foreign.lock().unwrap() = Some((id, published.len()));
            }
            let mut left = self.left.lock().unwrap();
            if *left > 0 {
                *left -= 1;
                self.store.enqueue(&NewMessage::new("orders", "{}")).unwrap();
            }
        }
        batch.iter().map(|_| Outcome::Delivered).collect()
    }
}

/// Claims by id (the ids this process just committed) look at nothing else, so the claim after
/// one looks for due messages: a message another process wrote (no in-process signal) is
/// published within two claims, however steadily this process commits. Without that, every
/// claim here would go by id and the foreign message would wait for the commits to stop.
#[tokio::test(start_paused = true)]
async fn claims_by_id_never_starve_a_message_the_ids_do_not_name() {
    let store = MemoryStore::new();
    let echo = Arc::new(Echo {
        store: store.clone(),
        published: Mutex::default(),
        left: Mutex::new(1_000),
        foreign: Mutex::default(),
    });
    let relay = Relay::builder(&store)
        .config(RelayConfig {
            max_in_flight_batches: 1,
            idle_interval: Duration::from_secs(60),
            ..config("r1")
        })
        .destination(Destination::new("broker", echo.clone()))
        .route(Route::new("#", ["broker"]))
        .build()
        .unwrap();
    let running = Running::spawn(relay);
    store.enqueue(&NewMessage::new("orders", "{}")).unwrap();
    let foreign = || *echo.foreign.lock().unwrap();
    until("the foreign message is published", || {
        foreign().is_some_and(|(id, _)| echo.published.lock().unwrap().contains(&id))
    })
    .await;
    let (id, before) = foreign().unwrap();
    let at = echo.published.lock().unwrap().iter().position(|p| *p == id).unwrap();
    // Each publish before it committed one more message (1,000 of them in all): the foreign
    // one went out while they kept coming, not after.
    assert!(at <= before + 2, "{} publishes between the foreign message's commit and its own", at - before);
    running.stop().await;
}

/// Every claim that answers is counted under why it ran (`RelayStats::claim_kinds`), which is
/// how the bench tells where a relay's claims go. A message committed now and then by this
/// process costs three claims: the claim by id that publishes it, the claim its settlement
/// wakes (which looks for due messages after a claim by id, and finds none), and the claim
/// once more after declaring idle (none either). A message another process wrote (no
/// in-process signal) is found by the scan; a backlog larger than a batch is taken by a scan
/// and then by claims right after a full batch.
#[tokio::test(start_paused = true)]
async fn claims_are_counted_by_why_they_ran() {
    use outbox_relay::ClaimKind;
    let store = MemoryStore::new();
    let t = TestTransport::new();
    let relay = Relay::builder(&store)
        .config(RelayConfig { idle_interval: Duration::from_secs(60), ..config("r1") })
        .destination(Destination::new("broker", Arc::new(t.clone())))
        .route(Route::new("#", ["broker"]))
        .build()
        .unwrap();
    let stats = relay.stats();
    let running = Running::spawn(relay);
    let idle = || stats.idle.load(std::sync::atomic::Ordering::Relaxed);
    let kinds = || stats.claim_kinds().into_iter().map(|k| (k.kind, k.claims, k.empty)).collect::<Vec<_>>();
    let since = |before: &[(ClaimKind, u64, u64)]| {
        kinds()
            .into_iter()
            .zip(before)
            .filter(|((_, c, _), (_, c0, _))| c != c0)
            .map(|((k, c, e), (_, c0, e0))| (k, c - c0, e - e0))
            .collect::<Vec<_>>()
    };
    // Settled: idle, and nothing runs until a commit or the scan (tokio's clock moves only
    // when every task waits).
    let settle = || async {
        until("the relay is idle", idle).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    settle().await;
    assert_eq!(
        kinds().iter().map(|(_, c, _)| c).sum::<u64>(),
        RelayStats::get(&stats.claims),
        "every claim is counted under one kind"
    );

    let before = kinds();
    for _ in 0..5 {
        let id = store.enqueue(&NewMessage::new("orders", "{}")).unwrap();
        until("published", || store.get(id).unwrap().status == Status::Sent).await;
        settle().await;
    }
    assert_eq!(
        since(&before),
        vec![(ClaimKind::OnceMore, 5, 5), (ClaimKind::ById, 5, 0), (ClaimKind::AfterById, 5, 5)],
        "a sparse stream: three claims per message"
    );
    assert_eq!(RelayStats::get(&stats.ids_left_to_the_window), 0);

    let before = kinds();
    let foreign = store.enqueue_unsignalled(&NewMessage::new("orders", "foreign")).unwrap();
    until("the foreign message is published", || store.get(foreign).unwrap().status == Status::Sent).await;
    settle().await;
    let found = since(&before);
    assert!(found.contains(&(ClaimKind::Scan, 1, 0)), "found by the scan: {found:?}");

    let before = kinds();
    let backlog: Vec<MessageId> = (0..120)
        .map(|i| store.enqueue_unsignalled(&NewMessage::new("orders", format!("{i}"))).unwrap())
        .collect();
    until("the backlog is published", || {
        backlog.iter().all(|id| store.get(*id).unwrap().status == Status::Sent)
    })
    .await;
    settle().await;
    let drained = since(&before);
    let of = |kind| drained.iter().find(|(k, _, _)| *k == kind).map_or((0, 0), |(_, c, e)| (*c, *e));
    assert_eq!(of(ClaimKind::Scan).1, 0, "the scan found the backlog: {drained:?}");
    let (full, full_empty) = of(ClaimKind::AfterFull);
    assert!(full >= 2 && full_empty < full, "claims right after a full batch took the rest: {drained:?}");
    assert_eq!(
        kinds().iter().map(|(_, c, _)| c).sum::<u64>(),
        RelayStats::get(&stats.claims),
        "every claim is counted under one kind"
    );
    running.stop().await;
}

/// A stream of `n` commits of this process into `store`, one every `gap` of virtual time (the
/// tests run on tokio's paused clock), on `keys` keys. Returns the ids, in commit order, once
/// all are sent.
async fn stream(store: &MemoryStore, n: usize, gap: Duration, keys: usize) -> Vec<MessageId> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            store.enqueue(&NewMessage::new("orders", format!("{i}")).key(format!("k{}", i % keys))).unwrap(),
        );
        tokio::time::sleep(gap).await;
    }
    until("the stream is sent", || ids.iter().all(|id| store.get(*id).unwrap().status == Status::Sent)).await;
    ids
}

/// Each key's messages reached the transport in id order, each once.
fn in_key_order(t: &TestTransport, ids: &[MessageId]) {
    let delivered: Vec<MessageId> = t.delivered().iter().map(|e| e.id).collect();
    for id in ids {
        assert_eq!(t.delivered_count(*id), 1, "message {id} delivered once");
    }
    let mut last: std::collections::HashMap<String, MessageId> = std::collections::HashMap::new();
    for e in t.delivered() {
        let key = e.key.clone().unwrap_or_default();
        if let Some(before) = last.insert(key.clone(), e.id) {
            assert!(before < e.id, "key {key}: {} after {before} ({delivered:?})", e.id);
        }
    }
}

/// A relay over `store` (made `with_push`), started and declared idle.
async fn push_relay(store: &MemoryStore, t: &TestTransport, owner: &str) -> (Running, Arc<RelayStats>) {
    let relay = Relay::builder(store)
        .config(RelayConfig { idle_interval: Duration::from_secs(60), ..config(owner) })
        .destination(
            Destination::new("broker", Arc::new(t.clone())).retry(policy(5, Duration::from_millis(200))),
        )
        .route(Route::new("#", ["broker"]))
        .build()
        .unwrap();
    let stats = relay.stats();
    let running = Running::spawn(relay);
    until("the relay is idle", || stats.idle.load(std::sync::atomic::Ordering::Relaxed)).await;
    (running, stats)
}

/// While a relay whose store pushes is declared idle, every other process's commit wakes it,
/// so a claim by id that takes every id this process committed leaves nothing to look for:
/// the relay stays idle and a trickle costs one claim per message. The claim that looks for
/// due messages still runs at least every `active_scan_interval` (50 ms by default) while the
/// claims by id keep coming; before this, each message cost three claims (by id, the claim
/// after it, the claim once more after declaring idle) and two writes of the idle row.
#[tokio::test(start_paused = true)]
async fn an_idle_relay_with_push_claims_a_trickle_once_per_message() {
    use outbox_relay::ClaimKind;
    let store = MemoryStore::with_push();
    let t = TestTransport::new();
    let (running, stats) = push_relay(&store, &t, "r1").await;
    let claims_before = RelayStats::get(&stats.claims);
    let busy_before = store.declared_busy();

    // 200 messages, one every 2 ms (400 ms), on 10 keys.
    let ids = stream(&store, 200, Duration::from_millis(2), 10).await;
    in_key_order(&t, &ids);
    let by_kind = |kind| stats.claim_kinds().into_iter().find(|k| k.kind == kind).map_or(0, |k| k.claims);
    let claims = RelayStats::get(&stats.claims) - claims_before;
    assert_eq!(by_kind(ClaimKind::ById), 200, "every message claimed by id");
    // One look for due messages per 50 ms of the stream, and the claims their batches' settlements wake.
    assert!(
        claims <= 200 + 2 * (400 / 50 + 2),
        "{claims} claims for 200 messages: {:?}",
        stats.claim_kinds()
    );
    assert_eq!(store.declared_busy(), busy_before, "the relay never declared itself busy");
    assert!(stats.idle.load(std::sync::atomic::Ordering::Relaxed));
    assert_eq!(store.pushes_sent(), 0, "this process's commits push nothing here");
    running.stop().await;
}

/// Between claims by id that leave the relay idle, another process's commit is published at
/// once (its push wakes the relay, and the next claim looks for due messages), not at the
/// scan; a retry that comes due while this process keeps committing is found within the active
/// scan interval, though no wake-up announces it; and a key's message committed while its head
/// is in flight waits for it (guarantee 5).
#[tokio::test(start_paused = true)]
async fn an_idle_relay_with_push_still_finds_foreign_rows_followers_and_retries() {
    let store = MemoryStore::with_push();
    let t = TestTransport::new();
    let (running, stats) = push_relay(&store, &t, "r1").await;

    let producer = {
        let store = store.clone();
        tokio::spawn(async move { stream(&store, 300, Duration::from_millis(2), 3).await })
    };
    // A retry: the first attempt fails, the next is due 200 ms later.
    tokio::time::sleep(Duration::from_millis(40)).await;
    let retried = store.enqueue(&NewMessage::new("orders", "retried").key("r")).unwrap();
    t.fail_message(retried, 1, Outcome::retryable("busy"));
    // Another process's message, committed mid-stream, while the relay is idle.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(stats.idle.load(std::sync::atomic::Ordering::Relaxed), "idle in a trickle");
    let foreign_at = Instant::now();
    let foreign = store.enqueue_unsignalled(&NewMessage::new("orders", "foreign").key("f")).unwrap();
    assert_eq!(store.pushes_sent(), 1, "the foreign commit pushed a wake-up");
    let ids = producer.await.unwrap();
    until("the retry is sent", || store.get(retried).unwrap().status == Status::Sent).await;

    let received = t.received();
    let foreign_sent =
        received.iter().find(|r| r.envelope.id == foreign).expect("the foreign message is published").at;
    assert!(
        foreign_sent - foreign_at <= Duration::from_millis(20),
        "the foreign message waited {:?} (the scan is 60 s)",
        foreign_sent - foreign_at
    );
    let attempts: Vec<Instant> = received.iter().filter(|r| r.envelope.id == retried).map(|r| r.at).collect();
    assert_eq!(attempts.len(), 2, "one failure, one delivery");
    let waited = attempts[1] - attempts[0];
    assert!(
        waited >= Duration::from_millis(200) && waited <= Duration::from_millis(200 + 50 + 20),
        "the retry due 200 ms after its failure was published after {waited:?}"
    );
    in_key_order(&t, &ids);

    // Every publish takes 5 ms now: with commits 2 ms apart on 3 keys, a key's next message is
    // committed while its head is in flight, and a claim by id cannot take it.
    t.set_delay(Duration::from_millis(5));
    let ids = stream(&store, 300, Duration::from_millis(2), 3).await;
    in_key_order(&t, &ids);
    running.stop().await;
}
