//! The relay's tuning and the ACK settings of a destination.

use std::sync::Arc;
use std::time::Duration;

/// Tuning of one relay instance. Every field has a default.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// This instance's name, recorded as `lease_owner`. Must be unique among the relays of a
    /// database. Defaults to `<hostname>-<pid>-<random>`.
    pub owner: String,
    /// Messages claimed per round trip. Defaults to 500.
    pub batch_size: usize,
    /// How long a claimed message stays leased; a relay that dies holding it loses it after
    /// this. Defaults to 30 s.
    pub lease: Duration,
    /// Longest sleep when there is nothing to do (the scan's period). Defaults to 1 s.
    pub idle_interval: Duration,
    /// Where the store has no push wake-up for another process's commits (MySQL/MariaDB: a
    /// service in another language writing the table), how often an idle relay looks for due
    /// messages during the 10 s after a claim found some, instead of every `idle_interval`: so
    /// a stream of foreign messages waits about this long, not half the idle interval, while a
    /// store that stays quiet still costs one look per `idle_interval`. A look is one read on
    /// the keeper's connection (the idle row is still refreshed once per `idle_interval`).
    /// At most `idle_interval` is used; setting it to `idle_interval` turns the quicker looks
    /// off. Stores with push (PostgreSQL `NOTIFY`) and in-process writers, which wake the
    /// relay at their commit, do not need it. Defaults to 50 ms.
    pub active_scan_interval: Duration,
    /// Batches published concurrently (claiming the next while the previous is in flight).
    /// Defaults to 2.
    pub max_in_flight_batches: usize,
    /// A publish that has not answered after this long counts as the destination being
    /// unavailable. Must be shorter than `lease`. Defaults to 10 s.
    pub publish_timeout: Duration,
    /// On shutdown, how long in-flight batches may take before their leases are released.
    /// Defaults to 10 s.
    pub shutdown_timeout: Duration,
    /// Where the store supports it (PostgreSQL, MySQL/MariaDB), keep a claimed batch's rows
    /// locked in an open transaction until its outcomes are written, instead of writing a
    /// lease first: one row write per message instead of two (see
    /// `docs/adr/0003-relay-claim-order-and-wakeup.md`). Each in-flight batch then holds one
    /// database connection while it publishes. Defaults to true; SQLite always uses leases.
    pub lock_claims: bool,
    /// Most messages of one key in one claim: a key's head and the due messages that follow
    /// it without a gap, published in id order, each once the one before it is delivered (a
    /// failure defers the rest of the run). Lets a few busy keys drain at more than one message
    /// per key per claim. Where the store builds runs (locked claims on PostgreSQL, every claim
    /// on MySQL/MariaDB); elsewhere, and with 1, a claim takes only heads. At most `batch_size`
    /// is used. Defaults to 32.
    pub max_run: usize,
    /// How long a message whose topic no route of this relay matches waits for another relay
    /// that routes it (a rolling deploy: the new routes run on some relays only) before it
    /// fails with "no route". Meanwhile it is put back without spending an attempt, with a
    /// growing delay (at most 5 s). Measured from the message's `created_at`. Defaults to
    /// 10 minutes; zero fails at once.
    pub unrouted_grace: Duration,
    /// Alert ([`crate::AlertHook::destination_down`]) when a destination's circuit has stayed
    /// open this long. Defaults to 5 minutes; `None` never.
    pub alert_circuit_open_after: Option<Duration>,
    /// Alert ([`crate::AlertHook::backlog_overdue`]) when a due message has waited this long
    /// past its due time (the relays fall behind, or cannot claim). Defaults to 15 minutes;
    /// `None` never.
    pub alert_overdue_after: Option<Duration>,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            owner: default_owner(),
            batch_size: 500,
            lease: Duration::from_secs(30),
            idle_interval: Duration::from_secs(1),
            active_scan_interval: Duration::from_millis(50),
            max_in_flight_batches: 2,
            publish_timeout: Duration::from_secs(10),
            shutdown_timeout: Duration::from_secs(10),
            lock_claims: true,
            max_run: 32,
            unrouted_grace: Duration::from_secs(600),
            alert_circuit_open_after: Some(Duration::from_secs(300)),
            alert_overdue_after: Some(Duration::from_secs(900)),
        }
    }
}

fn default_owner() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "relay".into());
    format!("{host}-{}-{:08x}", std::process::id(), rand::random::<u32>())
}

/// ACK mode for a destination: the consumer must confirm each delivery (HTTP `POST /v1/ack/...`
/// with the token the envelope carries, or the inbox's auto-ACK) within `timeout`; otherwise
/// the delivery counts as a failed attempt and is published again (same id), until the
/// destination's `max_attempts`, then `failed`.
#[derive(Clone)]
pub struct AckConfig {
    /// How long the consumer has to confirm.
    pub timeout: Duration,
    /// Key of the ACK tokens (shared with the ACK endpoint). Never logged.
    pub secret: Arc<[u8]>,
    /// The store name bound into the tokens (the daemon serves several databases).
    pub store: String,
    /// How long a token stays valid. Defaults to 7 days.
    pub token_ttl: Duration,
}

impl std::fmt::Debug for AckConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AckConfig")
            .field("timeout", &self.timeout)
            .field("secret", &"***")
            .field("store", &self.store)
            .field("token_ttl", &self.token_ttl)
            .finish()
    }
}

impl AckConfig {
    /// ACK within `timeout`, tokens signed with `secret` for `store`.
    pub fn new(timeout: Duration, secret: impl Into<Vec<u8>>, store: impl Into<String>) -> Self {
        AckConfig {
            timeout,
            secret: Arc::from(secret.into().into_boxed_slice()),
            store: store.into(),
            token_ttl: Duration::from_secs(7 * 86_400),
        }
    }
}
