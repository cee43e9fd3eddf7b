//! One claimed batch, step by step: read the per-destination state, decide
//! ([`crate::decide`]), gate and publish ([`crate::dispatch`]), plan the writes
//! ([`crate::settle`]), write them back, then alert for what failed.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use tokio::time::Instant;

use outbox_core::{MessageId, OutboxMessage, Outcome, Status};
use outbox_store::{DeliveryState, Hold, RelayStore, RunAfter, RunsTold, SettleReport, Settlement};

use crate::decide::{decide, Decision, Rules};
use crate::dispatch::Item;
use crate::relay::Inner;
use crate::runs::Waves;
use crate::settle::{self, Target, TargetResult};
use crate::stats::RelayStats;

/// The destinations (indexes into `Inner::dests`) of each message of a batch.
type Routes = Vec<Vec<usize>>;

/// Per (message, destination): the result, once known.
type Results = Vec<Vec<Option<TargetResult>>>;

/// What a batch owes the runs of its keys across claims ([`outbox_store::Claimed::after`]).
#[derive(Debug, Default)]
pub(crate) struct Runs {
    /// Keys whose older messages another batch in flight holds: none of the key's messages
    /// here goes out before that batch has delivered all of its own.
    pub(crate) after: Vec<RunAfter>,
    /// Where this batch tells which of its keys it delivered in full.
    pub(crate) told: Option<RunsTold>,
    /// Keys of the claim not delivered in full whatever happens here: messages of them were
    /// taken out of the batch (held back, see `Inner::without_held_back`).
    pub(crate) blocked: HashSet<String>,
    /// The claim's runs stopped at their length (see `outbox_store::Claimed::runs_cut`).
    pub(crate) cut: bool,
}

/// Publishes and settles one claimed batch. A locked claim's transaction is committed by the
/// settlement, or rolled back when this returns early (its rows are then due again).
///
/// True when every message of the batch was written `sent` (none is due again because of it).
pub(crate) async fn process<S: RelayStore>(
    inner: &Inner<S>,
    batch: Vec<OutboxMessage>,
    mut hold: Hold<S::Lock>,
    runs: Runs,
) -> bool {
    let Runs { after, told, blocked, cut } = runs;
    // A hot key's runs go on across batches through this one: the lane claims other keys' new
    // messages beside the claim loop meanwhile.
    let _chain = (cut || !after.is_empty()).then(|| inner.chains.enter());
    let routes: Routes = batch.iter().map(|m| inner.router.resolve(&m.topic)).collect();
    // Dropped untold on every early return: the batches continuing this one's runs then hold
    // them back.
    let Some(prior) = read_state(inner, &batch, &routes, &mut hold).await else { return false };
    let (mut results, to_publish) = decide_all(inner, &batch, &routes, &prior);
    // Runs continued from a batch still in flight wait for its word on their keys; the rest
    // of the batch goes out meanwhile.
    publish_all(inner, &batch, to_publish, &mut results, &blocked, after).await;
    if let Some(told) = told {
        told.tell(delivered_keys(&batch, &results, &blocked));
    }
    let (settlement, alerts) = plan_writes(inner, &batch, &routes, &results);
    let Some(report) = write_back(inner, &batch, &settlement, hold).await else {
        let pause = inner.settle_failed();
        tracing::warn!(pause = ?pause, "Claiming paused after a failed settlement");
        return false;
    };
    inner.settle_succeeded();
    let all_sent = settlement.sent.len() == batch.len()
        && settlement.messages.is_empty()
        && settlement.deliveries.is_empty()
        && report.settled == batch.len();
    after_settle(inner, &batch, &report, alerts).await;
    all_sent
}

/// The keys of `batch` whose every message was delivered to every destination (or found done),
/// leaving out `blocked`.
fn delivered_keys(batch: &[OutboxMessage], results: &Results, blocked: &HashSet<String>) -> HashSet<String> {
    let mut keys: HashMap<&str, bool> = HashMap::new();
    for (mi, m) in batch.iter().enumerate() {
        let Some(k) = m.key.as_deref() else { continue };
        let done = results[mi]
            .iter()
            .all(|r| matches!(r, Some(TargetResult::Delivered { .. } | TargetResult::AlreadyDone)));
        *keys.entry(k).or_insert(true) &= done;
    }
    keys.into_iter().filter(|(k, done)| *done && !blocked.contains(*k)).map(|(k, _)| k.to_owned()).collect()
}

/// Whether a message routed to `route` keeps per-destination rows: it fans out, or one of its
/// destinations wants ACKs.
fn keeps_rows<S: RelayStore>(inner: &Inner<S>, route: &[usize]) -> bool {
    route.len() > 1 || route.iter().any(|&d| inner.dests[d].d.ack.is_some())
}

/// Reads the per-destination rows of the messages that keep them. `None` when the read failed:
/// without them the relay could send again to destinations that are done, so the batch is
/// given up (a leased claim is retried after its lease, a locked one at once: dropping it
/// rolls it back).
async fn read_state<S: RelayStore>(
    inner: &Inner<S>,
    batch: &[OutboxMessage],
    routes: &Routes,
    hold: &mut Hold<S::Lock>,
) -> Option<HashMap<(MessageId, String), DeliveryState>> {
    let ids: Vec<MessageId> =
        batch.iter().zip(routes).filter(|(_, r)| keeps_rows(inner, r)).map(|(m, _)| m.id).collect();
    let mut prior = HashMap::new();
    if ids.is_empty() {
        return Some(prior);
    }
    match inner.store.deliveries_held(hold, &ids).await {
        Ok(rows) => {
            for r in rows {
                prior.insert((r.message_id, r.destination.clone()), r);
            }
            Some(prior)
        }
        Err(e) => {
            RelayStats::add(&inner.stats.store_errors, 1);
            let when =
                if matches!(hold, Hold::Lock(_)) { "at once (rolled back)" } else { "after its lease" };
            tracing::warn!(error = %e, "Could not read delivery state; the batch will be retried {when}");
            None
        }
    }
}

/// Decides every (message, destination): the results known without publishing, and per
/// destination the items to publish.
fn decide_all<S: RelayStore>(
    inner: &Inner<S>,
    batch: &[OutboxMessage],
    routes: &Routes,
    prior: &HashMap<(MessageId, String), DeliveryState>,
) -> (Results, Vec<Vec<Item>>) {
    let mut results: Results = Vec::with_capacity(batch.len());
    let mut to_publish: Vec<Vec<Item>> = vec![Vec::new(); inner.dests.len()];
    for (mi, m) in batch.iter().enumerate() {
        let rows = keeps_rows(inner, &routes[mi]);
        let mut row = Vec::with_capacity(routes[mi].len());
        for (ti, &di) in routes[mi].iter().enumerate() {
            let dest = &inner.dests[di];
            let rules = Rules {
                retry: &dest.d.retry,
                ack: dest.d.ack.is_some(),
                payload_limit: dest.payload_limit(),
            };
            let before = if rows { prior.get(&(m.id, dest.d.name.clone())) } else { None };
            match decide(m, rows, before, rules) {
                Decision::Settle(r) => row.push(Some(r)),
                Decision::Publish { attempts } => {
                    row.push(None);
                    to_publish[di].push((mi, ti, attempts));
                }
            }
        }
        results.push(row);
    }
    (results, to_publish)
}

/// Publishes the batch in waves ([`crate::runs`]): one when it holds one message per key, one
/// per message of its longest run otherwise. A message held back by an older one of its key
/// that was not delivered is put back, not attempted.
async fn publish_all<S: RelayStore>(
    inner: &Inner<S>,
    batch: &[OutboxMessage],
    to_publish: Vec<Vec<Item>>,
    results: &mut Results,
    blocked: &HashSet<String>,
    after: Vec<RunAfter>,
) {
    let mut waves = Waves::new(batch.iter().map(|m| (m.id.0, m.key.as_deref())));
    waves.hold_keys(blocked.iter().map(String::as_str));
    // The word of the batches whose runs this one continues, each awaited at most the lease (a
    // claim's transaction idle longer than that is ended by the database anyway); no word in
    // time counts as not delivered.
    let deadline = Instant::now() + inner.cfg.lease;
    let mut words: FuturesUnordered<_> = after
        .into_iter()
        .filter(|a| waves.wait_for(a.key()))
        .map(|mut a| async move {
            let delivered = a.delivered(deadline.saturating_duration_since(Instant::now())).await;
            (a, delivered)
        })
        .collect();
    if waves.count() <= 1 && blocked.is_empty() && words.is_empty() {
        return publish_wave(inner, batch, to_publish, results).await;
    }
    loop {
        // Word come meanwhile lets its keys join this wave.
        while let Some(Some((a, delivered))) = words.next().now_or_never() {
            waves.heard(a.key(), delivered);
        }
        let go = waves.next_wave();
        if go.is_empty() {
            // Nothing may go until word comes.
            match words.next().await {
                Some((a, delivered)) => {
                    waves.heard(a.key(), delivered);
                    continue;
                }
                None => break,
            }
        }
        let mut in_wave = vec![false; batch.len()];
        for &mi in &go {
            in_wave[mi] = true;
        }
        let wave: Vec<Vec<Item>> = to_publish
            .iter()
            .map(|items| items.iter().filter(|(mi, _, _)| in_wave[*mi]).copied().collect())
            .collect();
        publish_wave(inner, batch, wave, results).await;
        waves.answered(&go, |mi| {
            results[mi]
                .iter()
                .all(|r| matches!(r, Some(TargetResult::Delivered { .. } | TargetResult::AlreadyDone)))
        });
    }
    // What was never handed out is held back behind an older message of its key: put back
    // without spending an attempt.
    for items in &to_publish {
        for &(mi, ti, attempts) in items.iter().filter(|(mi, _, _)| !waves.was_sent(*mi)) {
            results[mi][ti] = Some(TargetResult::Deferred { attempts, wait: Duration::ZERO });
        }
    }
}

/// Gates each destination by its breaker, publishes to all of them concurrently and records
/// the outcomes in `results`.
async fn publish_wave<S: RelayStore>(
    inner: &Inner<S>,
    batch: &[OutboxMessage],
    to_publish: Vec<Vec<Item>>,
    results: &mut Results,
) {
    let now = Instant::now();
    let mut calls = Vec::new();
    for (di, items) in to_publish.into_iter().enumerate() {
        if items.is_empty() {
            continue;
        }
        let gate = inner.dests[di].admit(items, now);
        for (mi, ti, attempts) in gate.defer {
            RelayStats::add(&inner.stats.deferred, 1);
            results[mi][ti] =
                Some(TargetResult::Deferred { attempts, wait: gate.wait.max(Duration::from_millis(100)) });
        }
        if !gate.go.is_empty() {
            calls.push((di, gate.go));
        }
    }
    let timeout = inner.cfg.publish_timeout;
    let answers = futures::future::join_all(calls.iter().map(|(di, items)| {
        RelayStats::add(&inner.stats.published, items.len());
        inner.dests[*di].publish(batch, items, timeout)
    }))
    .await;
    for ((di, items), outcomes) in calls.iter().zip(answers) {
        let dest = &inner.dests[*di];
        dest.observe(&outcomes);
        dest.flags.circuit_open.store(dest.circuit_open(), std::sync::atomic::Ordering::Relaxed);
        let confirmed = chrono::Utc::now();
        for ((mi, ti, attempts), outcome) in items.iter().zip(outcomes) {
            let r = match outcome {
                Outcome::Delivered => {
                    RelayStats::add(&inner.stats.delivered, 1);
                    let latency = (confirmed - batch[*mi].created_at).to_std().unwrap_or(Duration::ZERO);
                    inner.stats.commit_to_publish.record(latency);
                    TargetResult::Delivered { attempts: *attempts }
                }
                Outcome::Failed { kind, reason, retry_after } => {
                    tracing::debug!(message_id = %batch[*mi].id, destination = %dest.d.name, ?kind, %reason, "Publish failed");
                    TargetResult::Failed { attempts: *attempts, kind, reason, retry_after }
                }
            };
            results[*mi][*ti] = Some(r);
        }
    }
}

/// A message that became `failed`: its index in the batch, the reason, its attempts.
type Alert = (usize, String, i32);

/// Plans the rows to write for every message, and the alerts to raise once they are written.
fn plan_writes<S: RelayStore>(
    inner: &Inner<S>,
    batch: &[OutboxMessage],
    routes: &Routes,
    results: &Results,
) -> (Settlement, Vec<Alert>) {
    let mut settlement = Settlement::default();
    let mut alerts = Vec::new();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::from_entropy();
    for (mi, m) in batch.iter().enumerate() {
        let plan = if routes[mi].is_empty() {
            let age = (chrono::Utc::now() - m.created_at).to_std().unwrap_or(Duration::ZERO);
            if age < inner.cfg.unrouted_grace {
                settle::unrouted_wait(m, &inner.cfg.owner, age, inner.cfg.unrouted_grace)
            } else {
                settle::no_route(m)
            }
        } else {
            let targets: Vec<Target<'_>> = routes[mi]
                .iter()
                .zip(results[mi].iter())
                .map(|(&di, r)| Target {
                    destination: &inner.dests[di].d.name,
                    policy: &inner.dests[di].d.retry,
                    ack: inner.dests[di].d.ack.as_ref().map(|a| a.timeout),
                    result: r.clone().unwrap_or(TargetResult::Deferred {
                        attempts: m.attempts,
                        wait: Duration::from_millis(100),
                    }),
                })
                .collect();
            settle::plan(m, &targets, keeps_rows(inner, &routes[mi]), || rand::Rng::gen::<f64>(&mut rng))
        };
        if plan.sent {
            settlement.sent.push(m.id);
        }
        let attempts = plan.message.as_ref().map_or(m.attempts, |w| w.attempts);
        if let Some(w) = plan.message {
            if w.status == Status::Pending && w.attempted {
                RelayStats::add(&inner.stats.retried, 1);
            }
            settlement.messages.push(w);
        }
        settlement.deliveries.extend(plan.deliveries);
        if let Some(reason) = plan.failed {
            alerts.push((mi, reason, attempts));
        }
    }
    (settlement, alerts)
}

/// What follows a written settlement: rows nothing could be written for are held back, rows
/// failed by the store instead of their outcome and rows that failed now are alerted for
/// (unless their lease had passed to another relay).
async fn after_settle<S: RelayStore>(
    inner: &Inner<S>,
    batch: &[OutboxMessage],
    report: &SettleReport,
    mut alerts: Vec<Alert>,
) {
    if !report.unsettled.is_empty() {
        inner.hold_back(report.unsettled.iter().map(|(id, _)| *id));
    }
    for (id, reason) in &report.isolated {
        alerts.retain(|(mi, _, _)| batch[*mi].id != *id);
        if let Some(mi) = batch.iter().position(|m| m.id == *id) {
            alerts.push((mi, reason.clone(), batch[mi].attempts.saturating_add(1)));
        }
    }
    if !report.lost_lease.is_empty() {
        RelayStats::add(&inner.stats.lost_lease, report.lost_lease.len());
        tracing::warn!(ids = ?report.lost_lease, "Leases expired before settling; another relay took these messages over");
    }
    for (mi, reason, attempts) in alerts {
        let m = &batch[mi];
        if report.lost_lease.contains(&m.id) {
            continue;
        }
        RelayStats::add(&inner.stats.failed, 1);
        let mut failed = m.clone();
        failed.status = Status::Failed;
        failed.attempts = attempts;
        failed.last_error = Some(reason.clone());
        inner.alert.message_failed(&failed, &reason).await;
    }
}

/// Writes a batch's settlement. A locked claim commits once (if that fails, the transaction is
/// gone and its rows are `pending` again, so they will be published again: at-least-once). A
/// leased claim retries briefly; if the store stays down, the leases expire and the batch is
/// published again.
async fn write_back<S: RelayStore>(
    inner: &Inner<S>,
    batch: &[OutboxMessage],
    settlement: &Settlement,
    hold: Hold<S::Lock>,
) -> Option<outbox_store::SettleReport> {
    let _spans = crate::trace::settle_spans(batch, settlement);
    if let Hold::Lock(lock) = hold {
        let started = Instant::now();
        let settled = inner.store.settle_held(Hold::Lock(lock), &inner.cfg.owner, settlement).await;
        inner.stats.settle_duration.record(started.elapsed());
        return match settled {
            Ok(report) => Some(report),
            Err(e) => {
                RelayStats::add(&inner.stats.store_errors, 1);
                tracing::error!(
                    error = %e,
                    count = batch.len(),
                    "Could not settle a batch; its transaction rolled back and it will be published again"
                );
                None
            }
        };
    }
    let mut delay = Duration::from_millis(50);
    for attempt in 1..=5 {
        let started = Instant::now();
        let settled = inner.store.settle(&inner.cfg.owner, settlement).await;
        inner.stats.settle_duration.record(started.elapsed());
        match settled {
            Ok(report) => return Some(report),
            Err(e) => {
                RelayStats::add(&inner.stats.store_errors, 1);
                tracing::warn!(error = %e, attempt, ids = ?settle::ids(batch), "Settling a batch failed");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
    }
    tracing::error!(
        count = batch.len(),
        "Could not settle a batch; it will be published again after its lease expires"
    );
    None
}
