//! Test doubles for tests of the relay's logic: [`TestTransport`], an in-process transport that
//! records what it was given and can be told to fail, be down, hang or be slow, and
//! [`MemoryStore`], an in-memory store on tokio's clock (for tests with a paused clock). Not
//! for production; real transports and stores are tested against real brokers and databases.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use outbox_core::{Envelope, MessageId, Outcome, Transport};

mod memory;
pub use memory::MemoryStore;

/// A relay configuration for tests against real databases: `owner`, batches of 50, a 10 s
/// lease, a 100 ms idle scan, 5 s publish and shutdown timeouts, locked claims.
pub fn relay_config(owner: &str) -> crate::RelayConfig {
    crate::RelayConfig {
        owner: owner.into(),
        batch_size: 50,
        lease: Duration::from_secs(10),
        idle_interval: Duration::from_millis(100),
        max_in_flight_batches: 2,
        publish_timeout: Duration::from_secs(5),
        shutdown_timeout: Duration::from_secs(5),
        lock_claims: true,
        ..crate::RelayConfig::default()
    }
}

/// One envelope the transport received, with the outcome it returned.
#[derive(Debug, Clone)]
pub struct Received {
    /// The envelope.
    pub envelope: Envelope,
    /// What the transport answered.
    pub outcome: Outcome,
    /// When it was received.
    pub at: Instant,
}

#[derive(Debug, Default)]
struct State {
    received: Vec<Received>,
    in_flight: HashMap<MessageId, u32>,
    max_in_flight_same_id: u32,
    down: bool,
    hang: bool,
    delay: Duration,
    fail_next: Vec<Outcome>,
    fail_id: HashMap<MessageId, (u32, Outcome)>,
    fail_topic: HashMap<String, Outcome>,
    max_payload: Option<usize>,
    gated: std::collections::HashSet<String>,
}

/// A scriptable, recording transport. Clones share state.
#[derive(Debug, Clone, Default)]
pub struct TestTransport {
    state: Arc<Mutex<State>>,
    /// Woken when the gated keys are let through.
    opened: Arc<tokio::sync::Notify>,
}

struct InFlight {
    state: Arc<Mutex<State>>,
    ids: Vec<MessageId>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut s) = self.state.lock() {
            for id in &self.ids {
                if let Some(n) = s.in_flight.get_mut(id) {
                    *n = n.saturating_sub(1);
                }
            }
        }
    }
}

impl TestTransport {
    /// A transport that delivers everything.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// While `down`, every envelope gets `Unavailable`.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    /// While `hang`, publish never returns (the relay's timeout or a shutdown ends it).
    pub fn set_hang(&self, hang: bool) {
        self.lock().hang = hang;
    }

    /// Every publish call waits this long first.
    pub fn set_delay(&self, delay: Duration) {
        self.lock().delay = delay;
    }

    /// The next envelopes (whatever their id) get these outcomes, in order.
    pub fn fail_next(&self, outcomes: impl IntoIterator<Item = Outcome>) {
        self.lock().fail_next.extend(outcomes);
    }

    /// Message `id` gets `outcome` for its next `times` publications.
    pub fn fail_message(&self, id: MessageId, times: u32, outcome: Outcome) {
        self.lock().fail_id.insert(id, (times, outcome));
    }

    /// Every message of `topic` gets `outcome`.
    pub fn fail_topic(&self, topic: &str, outcome: Outcome) {
        self.lock().fail_topic.insert(topic.to_owned(), outcome);
    }

    /// Publish calls that hold a message with `key` wait inside the call (counted in
    /// [`TestTransport::in_flight`]) until [`TestTransport::open_keys`].
    pub fn gate_key(&self, key: &str) {
        self.lock().gated.insert(key.to_owned());
    }

    /// Lets the calls held by [`TestTransport::gate_key`] go on, and every later one.
    pub fn open_keys(&self) {
        self.lock().gated.clear();
        self.opened.notify_waiters();
    }

    /// Lets the calls held by [`TestTransport::gate_key`] for `key` go on (and every later one
    /// with it), unless they hold a message of another key still gated.
    pub fn open_key(&self, key: &str) {
        self.lock().gated.remove(key);
        self.opened.notify_waiters();
    }

    /// Declares a payload limit.
    pub fn set_max_payload(&self, n: usize) {
        self.lock().max_payload = Some(n);
    }

    /// Everything received, in order.
    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }

    /// Envelopes delivered (outcome `Delivered`), in order.
    pub fn delivered(&self) -> Vec<Envelope> {
        self.lock()
            .received
            .iter()
            .filter(|r| r.outcome == Outcome::Delivered)
            .map(|r| r.envelope.clone())
            .collect()
    }

    /// How many times `id` was delivered.
    pub fn delivered_count(&self, id: MessageId) -> usize {
        self.lock().received.iter().filter(|r| r.envelope.id == id && r.outcome == Outcome::Delivered).count()
    }

    /// How many publish attempts `id` saw, whatever the outcome.
    pub fn attempts(&self, id: MessageId) -> usize {
        self.lock().received.iter().filter(|r| r.envelope.id == id).count()
    }

    /// Messages currently inside a publish call.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight.values().filter(|n| **n > 0).count()
    }

    /// The most publish calls that held the same message id at the same moment (1 = never
    /// published concurrently).
    pub fn max_concurrent_same_id(&self) -> u32 {
        self.lock().max_in_flight_same_id
    }
}

#[async_trait::async_trait]
impl Transport for TestTransport {
    fn kind(&self) -> &'static str {
        "test"
    }

    fn max_payload_bytes(&self) -> Option<usize> {
        self.lock().max_payload
    }

    /// Unhealthy while [`TestTransport::set_down`] holds.
    async fn health(&self) -> Result<(), String> {
        if self.lock().down {
            Err("the test transport is down".into())
        } else {
            Ok(())
        }
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        let (delay, hang) = {
            let mut s = self.lock();
            for e in batch {
                let n = s.in_flight.entry(e.id).or_insert(0);
                *n += 1;
                let n = *n;
                s.max_in_flight_same_id = s.max_in_flight_same_id.max(n);
            }
            (s.delay, s.hang)
        };
        let _guard = InFlight { state: self.state.clone(), ids: batch.iter().map(|e| e.id).collect() };
        loop {
            let opened = self.opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            let gated = {
                let s = self.lock();
                batch.iter().any(|e| e.key.as_ref().is_some_and(|k| s.gated.contains(k)))
            };
            if !gated {
                break;
            }
            opened.await;
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if hang {
            std::future::pending::<()>().await;
        }
        let mut s = self.lock();
        let now = Instant::now();
        batch
            .iter()
            .map(|e| {
                let outcome = if s.down {
                    Outcome::unavailable("test transport is down")
                } else if let Some(o) = s.fail_topic.get(&e.topic).cloned() {
                    o
                } else if let Some((times, o)) = s.fail_id.get_mut(&e.id).filter(|(t, _)| *t > 0) {
                    *times -= 1;
                    o.clone()
                } else if !s.fail_next.is_empty() {
                    s.fail_next.remove(0)
                } else {
                    Outcome::Delivered
                };
                s.received.push(Received { envelope: e.clone(), outcome: outcome.clone(), at: now });
                outcome
            })
            .collect()
    }
}
