//! An in-memory store for tests of the relay engine: the same claim, settlement, ACK and lease
//! rules as the SQL stores, on tokio's clock, so that a test run with a paused clock
//! (`#[tokio::test(start_paused = true)]`) sees retries, leases, backoffs and the breaker's
//! cool-downs happen in virtual time, exactly and without waiting. Not for production: it
//! keeps nothing across a restart. The SQL stores are tested against real databases.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::Utc;
use outbox_core::{Error, MessageId, NewMessage, OutboxMessage, Result, Status};
use outbox_store::{
    AckOutcome, Acks, ClaimMode, Claimed, Claims, CommitSignal, DeliveryState, Hold, NoLocks, Pauses,
    SettleReport, Settlement, Signalled, Wakeups,
};
use tokio::time::Instant;

/// One message and its schedule on tokio's clock.
#[derive(Debug, Clone)]
struct Row {
    msg: OutboxMessage,
    due: Instant,
    lease_until: Option<Instant>,
}

/// One destination's delivery of a message.
#[derive(Debug, Clone)]
struct Delivery {
    status: Status,
    attempts: i32,
    due: Instant,
    last_error: Option<String>,
    ack_deadline: Option<Instant>,
}

#[derive(Debug, Default)]
struct Mem {
    next_id: i64,
    rows: BTreeMap<i64, Row>,
    deliveries: BTreeMap<(i64, String), Delivery>,
    refuse_settlements: u32,
    refuse_claims: u32,
    claims: u64,
    settlements: u64,
    paused: std::collections::BTreeSet<String>,
    relays: std::collections::BTreeMap<String, outbox_store::RelayBeat>,
    push: Push,
}

/// The push channel of [`MemoryStore::with_push`]: writers of other processes wake a relay
/// listening while some relay is declared idle, as PostgreSQL's trigger sends its `NOTIFY`.
#[derive(Debug, Default)]
struct Push {
    on: bool,
    idle: std::collections::BTreeSet<String>,
    listeners: Vec<CommitSignal>,
    sent: u64,
    declared_busy: u64,
}

/// A store held in memory. Clones share state.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    mem: Arc<Mutex<Mem>>,
    signal: CommitSignal,
}

/// Spends one of the refusals scripted in `left` (`refuse_claims`, `refuse_settlements`): the
/// error the store returns for this `what`, or `Ok` when none is left.
fn scripted_refusal(left: &mut u32, what: &str) -> Result<()> {
    if *left > 0 {
        *left -= 1;
        return Err(Error::Database(format!("the in-memory store refuses this {what} (scripted)").into()));
    }
    Ok(())
}

fn is_open(s: Status) -> bool {
    matches!(s, Status::Pending | Status::Sending | Status::Failed)
}

fn is_due(row: &Row, now: Instant) -> bool {
    match row.msg.status {
        Status::Pending => row.due <= now,
        Status::Sending => row.lease_until.is_some_and(|t| t <= now),
        _ => false,
    }
}

fn lease_row(row: &mut Row, owner: &str, lease: Duration, now: Instant) -> OutboxMessage {
    row.msg.status = Status::Sending;
    row.msg.lease_owner = Some(owner.to_owned());
    row.lease_until = Some(now + lease);
    row.msg.updated_by = Some(owner.to_owned());
    row.msg.clone()
}

/// The rows of `committed` that are due and head their key, leased to `owner`.
fn claim_by_id(
    mem: &mut Mem,
    committed: &[MessageId],
    owner: &str,
    lease: Duration,
    now: Instant,
) -> Vec<OutboxMessage> {
    let wanted: HashSet<i64> = committed.iter().map(|i| i.0).collect();
    let mut heads: HashMap<String, i64> = HashMap::new();
    for row in mem.rows.values().filter(|r| is_open(r.msg.status)) {
        if let Some(k) = &row.msg.key {
            heads.entry(k.clone()).or_insert(row.msg.id.0);
        }
    }
    let mut out = Vec::new();
    for (id, row) in mem.rows.iter_mut().filter(|(id, _)| wanted.contains(id)) {
        let head = row.msg.key.as_ref().is_none_or(|k| heads.get(k) == Some(id));
        if head && is_due(row, now) {
            out.push(lease_row(row, owner, lease, now));
        }
    }
    out
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store with a push channel, as PostgreSQL's: while some relay is declared
    /// idle ([`Wakeups::set_idle`]), a message written by another process
    /// ([`enqueue_unsignalled`](Self::enqueue_unsignalled)) wakes the relays listening, naming
    /// nothing. This process's commits ([`enqueue`](Self::enqueue)) wake through the commit
    /// signal alone (a relay ignores the notification of its own process's rows).
    pub fn with_push() -> Self {
        let store = Self::default();
        store.mem().push.on = true;
        store
    }

    /// Push wake-ups sent so far (see [`with_push`](Self::with_push)).
    pub fn pushes_sent(&self) -> u64 {
        self.mem().push.sent
    }

    /// How many times a relay declared itself busy after being idle (see
    /// [`with_push`](Self::with_push)).
    pub fn declared_busy(&self) -> u64 {
        self.mem().push.declared_busy
    }

    fn mem(&self) -> MutexGuard<'_, Mem> {
        self.mem.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Pauses or resumes `destination`, as an operator would through the admin API.
    pub fn set_paused(&self, destination: &str, paused: bool) {
        let mut mem = self.mem();
        if paused {
            mem.paused.insert(destination.to_owned());
        } else {
            mem.paused.remove(destination);
        }
    }

    /// Enqueues a message (validated as the SQL stores do) and wakes the relay, as a commit
    /// would.
    pub fn enqueue(&self, m: &NewMessage) -> Result<MessageId> {
        let id = self.insert(m)?;
        self.signal.committed(&[id]);
        Ok(id)
    }

    /// Enqueues a message as another process's writer would: no in-process signal, so the relay
    /// finds it by looking for due messages, or is woken by the push channel of a store made
    /// [`with_push`](Self::with_push) while it is declared idle.
    pub fn enqueue_unsignalled(&self, m: &NewMessage) -> Result<MessageId> {
        let id = self.insert(m)?;
        let wake = {
            let mut mem = self.mem();
            let push = &mut mem.push;
            if push.on && !push.idle.is_empty() {
                push.sent += 1;
                push.listeners.clone()
            } else {
                Vec::new()
            }
        };
        for signal in wake {
            signal.wake();
        }
        Ok(id)
    }

    fn insert(&self, m: &NewMessage) -> Result<MessageId> {
        m.validate()?;
        let now = Utc::now();
        let delay = match m.deliver_at {
            Some(at) => (at - now).to_std().unwrap_or(Duration::ZERO),
            None => m.delay.unwrap_or(Duration::ZERO),
        };
        let id = {
            let mut mem = self.mem();
            mem.next_id += 1;
            let id = mem.next_id;
            let msg = OutboxMessage {
                id: MessageId(id),
                biz_type: m.biz.as_ref().map(|b| b.0.clone()),
                biz_key: m.biz.as_ref().map(|b| b.1.clone()),
                topic: m.topic.clone(),
                key: m.key.clone(),
                tag: m.tag.clone(),
                headers: m.headers.clone(),
                payload: m.payload.clone(),
                status: Status::Pending,
                attempts: 0,
                max_attempts: m.max_attempts.map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
                next_attempt_at: now,
                last_attempt_at: None,
                last_error: None,
                lease_owner: None,
                lease_until: None,
                created_by: m.created_by.clone(),
                updated_by: m.created_by.clone(),
                created_at: now,
                updated_at: now,
            };
            mem.rows.insert(id, Row { msg, due: Instant::now() + delay, lease_until: None });
            MessageId(id)
        };
        Ok(id)
    }

    /// The message as stored now.
    pub fn get(&self, id: MessageId) -> Option<OutboxMessage> {
        self.mem().rows.get(&id.0).map(|r| r.msg.clone())
    }

    /// Every message, in id order.
    pub fn messages(&self) -> Vec<OutboxMessage> {
        self.mem().rows.values().map(|r| r.msg.clone()).collect()
    }

    /// The messages with this status.
    pub fn with_status(&self, status: Status) -> Vec<MessageId> {
        self.mem().rows.values().filter(|r| r.msg.status == status).map(|r| r.msg.id).collect()
    }

    /// The next `n` settlements fail as a database refusing the write would.
    pub fn refuse_settlements(&self, n: u32) {
        self.mem().refuse_settlements = n;
    }

    /// The next `n` claims fail as an unreachable database would.
    pub fn refuse_claims(&self, n: u32) {
        self.mem().refuse_claims = n;
    }

    /// Claims made so far (including refused and empty ones).
    pub fn claims(&self) -> u64 {
        self.mem().claims
    }

    /// Settlements asked for so far (including refused ones).
    pub fn settlements(&self) -> u64 {
        self.mem().settlements
    }
}

impl Signalled for MemoryStore {
    fn commit_signal(&self) -> &CommitSignal {
        &self.signal
    }
}

impl Claims for MemoryStore {
    type Lock = NoLocks;

    /// The committed ids that are due and head their key (no older open message with that
    /// key), leased, as the SQL stores' claims by id take them; nothing else is looked at. When
    /// none can go, or there are more ids than `limit`: due `pending` rows and `sending` rows
    /// whose lease expired, in id order, a key's head (no older open message with that key),
    /// then the due messages that follow it without a gap, up to `run` per key, as the SQL
    /// stores' locked claims build them (with the difference that every key may bring its whole
    /// run while places are left).
    async fn claim_committed(
        &self,
        _mode: ClaimMode,
        owner: &str,
        committed: &[MessageId],
        limit: usize,
        run: usize,
        lease: Duration,
    ) -> Result<Claimed<NoLocks>> {
        let mut mem = self.mem();
        mem.claims += 1;
        scripted_refusal(&mut mem.refuse_claims, "claim")?;
        let now = Instant::now();
        if !committed.is_empty() && committed.len() <= limit {
            let by_id = claim_by_id(&mut mem, committed, owner, lease, now);
            if !by_id.is_empty() {
                return Ok(Claimed::leased(by_id));
            }
        }
        // Per key: messages taken so far, or None once the key's line is broken.
        let mut keys: HashMap<String, Option<usize>> = HashMap::new();
        let mut out = Vec::new();
        for row in mem.rows.values_mut() {
            if out.len() >= limit {
                break;
            }
            if !is_open(row.msg.status) {
                continue;
            }
            let due = is_due(row, now);
            let head = match &row.msg.key {
                Some(k) => {
                    let line = keys.entry(k.clone()).or_insert(Some(0));
                    match line {
                        Some(n) if due && *n < run.max(1) => {
                            *n += 1;
                            true
                        }
                        _ => {
                            *line = None;
                            false
                        }
                    }
                }
                None => true,
            };
            if head && due {
                out.push(lease_row(row, owner, lease, now));
            }
        }
        Ok(Claimed::leased(out))
    }

    async fn deliveries_held(
        &self,
        hold: &mut Hold<NoLocks>,
        ids: &[MessageId],
    ) -> Result<Vec<DeliveryState>> {
        if let Hold::Lock(never) = hold {
            match *never {}
        }
        let mem = self.mem();
        let now = Instant::now();
        let wanted: HashSet<i64> = ids.iter().map(|i| i.0).collect();
        Ok(mem
            .deliveries
            .iter()
            .filter(|((id, _), _)| wanted.contains(id))
            .map(|((id, dest), d)| DeliveryState {
                message_id: MessageId(*id),
                destination: dest.clone(),
                status: d.status,
                attempts: d.attempts,
                wait: d.due.saturating_duration_since(now),
                last_error: d.last_error.clone(),
            })
            .collect())
    }

    /// Written only for the messages `owner` still leases; the others are `lost_lease`.
    async fn settle_held(&self, hold: Hold<NoLocks>, owner: &str, s: &Settlement) -> Result<SettleReport> {
        if let Hold::Lock(never) = hold {
            match never {}
        }
        let s = s.bounded();
        let mut mem = self.mem();
        mem.settlements += 1;
        scripted_refusal(&mut mem.refuse_settlements, "settlement")?;
        let now = Instant::now();
        let held = |mem: &Mem, id: MessageId| {
            mem.rows.get(&id.0).is_some_and(|r| {
                r.msg.status == Status::Sending && r.msg.lease_owner.as_deref() == Some(owner)
            })
        };
        let mut report = SettleReport::default();
        for id in s.ids() {
            if !held(&mem, id) {
                report.lost_lease.push(id);
                continue;
            }
            for d in s.deliveries.iter().filter(|d| d.message_id == id) {
                let prev =
                    mem.deliveries.get(&(id.0, d.destination.clone())).and_then(|p| p.last_error.clone());
                mem.deliveries.insert(
                    (id.0, d.destination.clone()),
                    Delivery {
                        status: d.status,
                        attempts: d.attempts,
                        due: now + d.retry_in,
                        last_error: d.last_error.clone().or(prev),
                        ack_deadline: d.ack_timeout.map(|t| now + t),
                    },
                );
            }
            let Some(row) = mem.rows.get_mut(&id.0) else { continue };
            row.lease_until = None;
            row.msg.lease_owner = None;
            if s.sent.contains(&id) {
                row.msg.status = Status::Sent;
            }
            if let Some(w) = s.messages.iter().find(|w| w.id == id) {
                row.msg.status = w.status;
                row.msg.attempts = w.attempts;
                row.due = now + w.retry_in;
                if w.last_error.is_some() {
                    row.msg.last_error = w.last_error.clone();
                }
                if w.attempted {
                    row.msg.last_attempt_at = Some(Utc::now());
                }
            }
            report.settled += 1;
        }
        Ok(report)
    }

    async fn extend(&self, owner: &str, ids: &[MessageId], lease: Duration) -> Result<u64> {
        let mut mem = self.mem();
        let until = Instant::now() + lease;
        let mut n = 0;
        for id in ids {
            if let Some(r) = mem.rows.get_mut(&id.0) {
                if r.msg.status == Status::Sending && r.msg.lease_owner.as_deref() == Some(owner) {
                    r.lease_until = Some(until);
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    async fn release(&self, owner: &str) -> Result<u64> {
        let mut mem = self.mem();
        let now = Instant::now();
        let mut n = 0;
        for r in mem.rows.values_mut() {
            if r.msg.status == Status::Sending && r.msg.lease_owner.as_deref() == Some(owner) {
                r.msg.status = Status::Pending;
                r.msg.lease_owner = None;
                r.lease_until = None;
                r.due = now;
                n += 1;
            }
        }
        Ok(n)
    }
}

impl Acks for MemoryStore {
    async fn expire_acks(&self, limit: usize) -> Result<u64> {
        let mut mem = self.mem();
        let now = Instant::now();
        let mut expired = Vec::new();
        for ((id, _), d) in mem.deliveries.iter_mut() {
            if expired.len() >= limit {
                break;
            }
            if d.status == Status::Sent && d.ack_deadline.is_some_and(|t| t <= now) {
                d.status = Status::Pending;
                d.attempts += 1;
                d.due = now;
                d.ack_deadline = None;
                d.last_error = Some("no ACK before the deadline".into());
                expired.push(*id);
            }
        }
        for id in &expired {
            if let Some(r) = mem.rows.get_mut(id) {
                if matches!(r.msg.status, Status::Sent | Status::Acked) {
                    r.msg.status = Status::Pending;
                    r.due = now;
                }
            }
        }
        Ok(expired.len() as u64)
    }

    async fn ack(&self, message_id: MessageId, destination: &str) -> Result<AckOutcome> {
        let mut mem = self.mem();
        let Some(d) = mem.deliveries.get_mut(&(message_id.0, destination.to_owned())) else {
            return Ok(AckOutcome::Unknown);
        };
        match d.status {
            Status::Acked => return Ok(AckOutcome::AlreadyAcked),
            Status::Sent if d.ack_deadline.is_some() => {
                d.status = Status::Acked;
                d.ack_deadline = None;
            }
            status => return Ok(AckOutcome::NotAwaiting { status }),
        }
        let message_done = mem
            .deliveries
            .range((message_id.0, String::new())..)
            .take_while(|((id, _), _)| *id == message_id.0)
            .all(|(_, d)| !is_open(d.status) && d.ack_deadline.is_none());
        if message_done {
            if let Some(r) = mem.rows.get_mut(&message_id.0) {
                r.msg.status = Status::Acked;
            }
        }
        Ok(AckOutcome::Acked { message_done })
    }
}

impl Wakeups for MemoryStore {
    /// Without [`MemoryStore::with_push`], no push channel: the relay is woken by the
    /// in-process commit signal and its scan.
    async fn set_idle(&self, owner: &str, idle: bool, _ttl: Duration) -> Result<()> {
        let mut mem = self.mem();
        let push = &mut mem.push;
        if idle {
            push.idle.insert(owner.to_owned());
        } else if push.idle.remove(owner) {
            push.declared_busy += 1;
        }
        Ok(())
    }

    async fn listen(&self, signal: CommitSignal) -> Result<Option<outbox_store::Listening>> {
        let mut mem = self.mem();
        if !mem.push.on {
            return Ok(None);
        }
        mem.push.listeners.push(signal);
        let task = tokio::spawn(std::future::pending::<()>());
        Ok(Some(outbox_store::Listening::new(task, None)))
    }
}

impl Pauses for MemoryStore {
    async fn paused_destinations(&self) -> Result<Vec<String>> {
        Ok(self.mem().paused.iter().cloned().collect())
    }
}

impl outbox_store::Presence for MemoryStore {
    async fn beat(&self, beat: &outbox_store::RelayBeat) -> Result<()> {
        self.mem().relays.insert(beat.owner.clone(), beat.clone());
        Ok(())
    }

    async fn leave(&self, owner: &str) -> Result<()> {
        self.mem().relays.remove(owner);
        Ok(())
    }
}

impl MemoryStore {
    /// The relays registered now ([`outbox_store::Presence`]), by owner.
    pub fn relays(&self) -> Vec<outbox_store::RelayBeat> {
        self.mem().relays.values().cloned().collect()
    }
}

impl outbox_store::Backlog for MemoryStore {
    async fn overdue(&self) -> Result<Option<Duration>> {
        let now = Instant::now();
        let mem = self.mem();
        let earliest = mem
            .rows
            .values()
            .filter(|r| r.msg.status == Status::Pending && r.due <= now)
            .map(|r| r.due)
            .min();
        Ok(earliest.map(|due| now - due))
    }
}
