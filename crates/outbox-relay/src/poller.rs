//! The claim loop: claims due batches (woken by commits, `NOTIFY` or the scan timer), hands
//! each to [`crate::batch::process`] under a permit, and on shutdown drains and releases.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument as _;

use outbox_store::{ClaimMode, Hold, RelayStore};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::batch::{process, Runs};
use crate::pace::ScanPace;
use crate::relay::Relay;
use crate::stats::{ClaimKind, RelayStats};

/// How often the claim loop re-reads the paused destinations.
const PAUSES_INTERVAL: Duration = Duration::from_secs(1);

/// The most messages a claim by id of an idle relay with push may take and leave the relay
/// idle (see "Claims by id of an idle relay" in the loop). While a relay is declared idle,
/// each writer's commit sends a `NOTIFY`, and PostgreSQL commits notifying transactions one
/// at a time (each holds the notification queue's lock through its commit): commits that do
/// not overlap pay nothing for it, commits that do wait for each other. A claim by id that
/// finds more than one message means commits came closer together than one claim, and the
/// relay declares busy (writers stop notifying) as before. (Measured at 500 and 1,000 msg/s
/// against 4: no difference beyond the noise; docs/benchmarks.md, "Claims by id of an idle
/// relay".)
const IDLE_BY_ID_MAX: usize = 1;

impl<S: RelayStore> Relay<S> {
    /// Runs until `shutdown` is cancelled, then stops claiming, lets in-flight batches finish
    /// (up to `shutdown_timeout`), releases whatever it still leases, and returns.
    pub async fn run(self, shutdown: CancellationToken) {
        let inner = self.inner;
        let cfg = &inner.cfg;
        let listener = match inner.store.listen(inner.signal.clone()).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "Push wake-up unavailable; relying on the scan and in-process signal");
                None
            }
        };
        tracing::info!(owner = %cfg.owner, batch_size = cfg.batch_size, push = listener.as_ref().is_some_and(|l| l.pushes()), "Relay started");
        let presence_stop = CancellationToken::new();
        // Where the listening connection can run the idle relay's statements (PostgreSQL), an
        // idle relay uses nothing of its pool: the keeper ticks and beats on that connection.
        // Not with ACK destinations: overdue ACKs are expired by the claim loop.
        let has_ack = inner.dests.iter().any(|d| d.d.ack.is_some());
        let keeper = listener.as_ref().and_then(|l| l.keeper().cloned());
        let idle_keeper = keeper.clone().filter(|_| !has_ack);
        let presence =
            tokio::spawn(crate::presence::run(inner.clone(), keeper.clone(), presence_stop.clone()));
        let watch = tokio::spawn(crate::watch::run(inner.clone(), keeper.clone(), presence_stop.clone()));
        // Shares of a crowded budget parked after their batches, given back once unused a while.
        let parking_stop = CancellationToken::new();
        let parking = tokio::spawn(crate::relay::attend_parked(inner.clone(), parking_stop.clone()));
        let permits = Arc::new(Semaphore::new(cfg.max_in_flight_batches));
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut idle = false;
        let mut idle_refreshed = Instant::now();
        let idle_ttl = cfg.idle_interval * 3;
        let mut store_backoff = Duration::from_millis(100);
        let mut acks_checked = Instant::now();
        let mut pauses_checked: Option<Instant> = None;
        // The next claim was started by the scan timer, not by a wake-up.
        let mut on_scan = false;
        // The keeper's idle ticks fail (warned once per streak).
        let mut tick_failing = false;
        // A share of the budget kept for the claim after declaring idle.
        let mut carried = None;
        // The loop waits as an idle relay does before its next claim.
        let mut wait_idle = false;
        // Claims started so far, less those that ended saying they left nothing behind (a
        // quiet batch wakes the loop after it settles when a claim that may have held back a
        // younger message of its keys ran while it was in flight: see below). Claims run one
        // at a time, on this loop.
        let claims_unsure = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (mode, mode_name) =
            if cfg.lock_claims { (ClaimMode::Lock, "lock") } else { (ClaimMode::Lease, "lease") };
        let lane_task =
            tokio::spawn(lane(inner.clone(), mode, keeper.clone(), claims_unsure.clone(), shutdown.clone()));
        // Without push (MySQL/MariaDB), another process's commit is found by the idle relay's
        // next look: quicker looks while messages keep coming (see `crate::pace`).
        let pushes = listener.as_ref().is_some_and(|l| l.pushes());
        // The claim about to run was started by the keeper's look (which said something may be due).
        let mut from_look = false;
        // The last claim may have been by id: the next one looks for due messages.
        let mut window_next = false;
        // The next claim is the claim once more after declaring idle, or follows a full batch
        // (for the claims' kinds in the stats).
        let (mut once_more, mut after_full) = (false, false);
        let mut pace =
            ScanPace::new(cfg.idle_interval, cfg.active_scan_interval, idle_keeper.is_some() && !pushes);
        // The loop's last wait ended on a wake-up (not the timer, not a look).
        let mut by_wake = false;
        // The signal's count of wake-ups that did not name their messages, read before the
        // last claim started (see `CommitSignal::unnamed_wakes`).
        let mut unnamed_before_claim: Option<u64> = None;
        // The unnamed wake-ups counted before the last claim that looked for due messages
        // began, and when it began (see "Claims by id of an idle relay" below).
        let mut window_seen: Option<(u64, Instant)> = None;

        'claims: loop {
            if std::mem::take(&mut wait_idle) {
                let woke = loop {
                    let wait = if idle { pace.wait(Instant::now()) } else { cfg.idle_interval };
                    let woke = tokio::select! {
                        _ = shutdown.cancelled() => break 'claims,
                        _ = inner.signal.notified() => true,
                        _ = tokio::time::sleep(wait) => false,
                    };
                    // Idle with a keeper: the scan is one statement on the listening
                    // connection that also keeps the idle row alive; claim only when it
                    // says something may be due (or when it cannot say). The quicker looks
                    // of a store without push only read: the row, written at most once per
                    // idle interval, lives three.
                    let refresh = idle_refreshed.elapsed() >= cfg.idle_interval;
                    match (&idle_keeper, woke || !idle) {
                        (Some(k), false) => match look(k, refresh, &cfg.owner, idle_ttl).await {
                            Ok(false) => {
                                RelayStats::add(&inner.stats.idle_ticks, 1);
                                if refresh {
                                    idle_refreshed = Instant::now();
                                }
                                tick_failing = false;
                                // An operator's pause shows while idle too (metrics, the
                                // admin API), read on the keeper's connection, every beat
                                // (a claim reads them first anyway when it is older than
                                // PAUSES_INTERVAL).
                                if pauses_checked
                                    .is_none_or(|t| t.elapsed() >= crate::presence::BEAT_INTERVAL)
                                {
                                    pauses_checked = Some(Instant::now());
                                    inner.refresh_pauses(Some(k)).await;
                                }
                            }
                            Ok(true) => {
                                RelayStats::add(&inner.stats.idle_ticks, 1);
                                tick_failing = false;
                                if refresh {
                                    idle_refreshed = Instant::now();
                                } else if permits.available_permits() < cfg.max_in_flight_batches {
                                    // A quicker look sees this relay's own batch still in
                                    // flight (its locked rows are still pending): the look
                                    // after it settles finds what is new.
                                    continue;
                                }
                                from_look = true;
                                break false;
                            }
                            Err(e) => {
                                if !tick_failing {
                                    tracing::warn!(error = %e, "Idle tick on the listening connection failed; scanning through the pool");
                                }
                                tick_failing = true;
                                break false;
                            }
                        },
                        _ => break woke,
                    }
                };
                on_scan = !woke;
                by_wake = woke;
                if idle && !woke && idle_refreshed.elapsed() >= cfg.idle_interval {
                    let _ = inner.set_idle(keeper.as_ref(), true, idle_ttl).await;
                    idle_refreshed = Instant::now();
                }
            }
            // A wake-up for this process's commits only, all of whose messages a claim since
            // has taken, starts no claim. Either the claim took their ids from the signal, or
            // it looked for due messages and took the rows after their commit, before this
            // wake-up was read: a claim by id would find them locked by this relay's own
            // batches and look for due messages instead, for nothing (a tenth of all claims
            // at 500 msg/s on PostgreSQL). Any wake-up that may stand for something else
            // (another process's rows, a batch settled, a commit of unknown outcome) has
            // counted itself unnamed before it was given, and one given after this look finds
            // the loop waiting again. (Leased rows are not held in flight: with leases only a
            // wake-up whose ids a claim took is passed over.)
            if std::mem::take(&mut by_wake)
                && !window_next
                && !once_more
                && !after_full
                && unnamed_before_claim == Some(inner.signal.unnamed_wakes())
                && inner.signal.forget_held(|ids| inner.store.held_in_flight(ids))
            {
                RelayStats::add(&inner.stats.wake_ups_held, 1);
                wait_idle = true;
                continue;
            }
            while tasks.try_join_next().is_some() {}
            let permit = tokio::select! {
                _ = shutdown.cancelled() => break,
                p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            };
            if let Some(pause) = inner.pause_left() {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
            // The process-wide budget, when this relay shares one: taken after this relay's own
            // permit (which bounds how many a busy store holds), kept with the batch. A share
            // this relay parked after its last batch comes first (no turn, and its connection
            // is still open), unless another relay waits for one.
            let share = match (carried.take(), &inner.budget) {
                (Some(s), _) => Some(s),
                (None, None) => None,
                (None, Some(b)) => tokio::select! {
                    _ = shutdown.cancelled() => break,
                    s = inner.take_share(b) => match s {
                        Some(s) => Some(s),
                        None => break,
                    },
                },
            };
            // Everything below uses the pool, under the share: a relay over many stores opens
            // at most the budget's size of pooled connections at once, start-up included.
            if share.is_some() && inner.budget.as_ref().is_some_and(|b| b.crowded()) {
                inner.store.shed_connections(false).await;
                inner.ready_to_claim().await;
            }
            // ACK mode: deliveries whose ACK is overdue go back to pending (at most every half
            // scan period; one indexed query).
            if has_ack && acks_checked.elapsed() >= cfg.idle_interval / 2 {
                acks_checked = Instant::now();
                match inner.store.expire_acks(cfg.batch_size).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(
                        expired = n,
                        "Deliveries without an ACK in time will be published again"
                    ),
                    Err(e) => tracing::warn!(error = %e, "Could not expire overdue ACKs"),
                }
            }
            // Destinations paused by an operator for every relay on the store: re-read about
            // once a second (one read of a table of a few rows).
            if pauses_checked.is_none_or(|t| t.elapsed() >= PAUSES_INTERVAL) {
                pauses_checked = Some(Instant::now());
                inner.refresh_pauses(keeper.as_ref()).await;
            }
            claims_unsure.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            // This claim covers every wake-up so far; read first, so that one whose count this
            // read misses has its wake-up stored after it, for the loop's next wait.
            let unnamed_now = inner.signal.unnamed_wakes();
            unnamed_before_claim = Some(unnamed_now);
            inner.signal.claiming();
            let claim_started = Instant::now();
            // Claims by id of an idle relay. While this relay is declared idle, every other
            // process's commit wakes it through the store's push channel (PostgreSQL's
            // `NOTIFY`), and each such wake-up names no ids of this process. So when no
            // unnamed wake-up came since the last claim that looked for due messages began,
            // and that claim is recent (a retry or a delayed message comes due without
            // waking anyone: looked for at least every `active_scan_interval`), the ids this
            // process committed are all that can be new, and a claim by id that takes every
            // one of them needs no claim after it: a stream of them costs one claim per
            // message, where declaring busy, the claim after the one by id, declaring idle and
            // the claim once more cost three and two writes of the idle row. A claim by id of
            // an idle relay that is not covered so (a wake-up it did not look at, or a look
            // too old) still leaves the relay idle; its batch's settlement wakes the claim that
            // looks for due messages.
            let covered = pushes
                && idle
                && window_seen
                    .is_some_and(|(n, at)| n == unnamed_now && at.elapsed() < cfg.active_scan_interval);
            let span = crate::trace::claim(&cfg.owner, mode_name, cfg.batch_size);
            // The messages committed in this process since the last claim: the store claims
            // them by id (PostgreSQL, MySQL/MariaDB), cheaper than looking for due messages, and
            // looks at nothing else. So at most every other claim goes by id: the claim after
            // one that took something by id looks for due messages in due order, which finds
            // what the ids do not name (a retry come due, another process's rows) however
            // steadily this process commits.
            let ids = inner.signal.take_ids();
            let after_by_id = std::mem::take(&mut window_next);
            let committed = if after_by_id {
                RelayStats::add(&inner.stats.ids_left_to_the_window, ids.len());
                Vec::new()
            } else {
                ids
            };
            let by_id = !committed.is_empty();
            let (again, full_before) = (std::mem::take(&mut once_more), std::mem::take(&mut after_full));
            let kind = if again {
                ClaimKind::OnceMore
            } else if by_id {
                ClaimKind::ById
            } else if after_by_id {
                ClaimKind::AfterById
            } else if on_scan || from_look {
                ClaimKind::Scan
            } else if full_before {
                ClaimKind::AfterFull
            } else {
                ClaimKind::Woken
            };
            // A claim under way is not dropped when the shutdown comes: sqlx 0.8 can leave a
            // connection whose statement was dropped mid-flight waiting forever on its way back
            // to the pool (PostgreSQL, MySQL), and the release below needs the pool. Claims are
            // short; one the database does not answer is given up `shutdown_timeout` after the
            // shutdown. What it claimed is not published: handed back below.
            let claimed = tokio::select! {
                r = inner.store.claim_committed(mode, &cfg.owner, &committed, cfg.batch_size, cfg.max_run.min(cfg.batch_size), cfg.lease).instrument(span.clone()) => r,
                () = async {
                    shutdown.cancelled().await;
                    tokio::time::sleep(cfg.shutdown_timeout).await;
                } => break,
            };
            if shutdown.is_cancelled() {
                // Rows a locked claim holds are unlocked by dropping its transaction (rolled
                // back); leased rows are released with the rest below.
                drop(claimed);
                break;
            }
            inner.stats.claim_duration.record(claim_started.elapsed());
            if let Ok(c) = &claimed {
                span.record("claimed", c.messages.len());
            }
            drop(span);
            RelayStats::add(&inner.stats.claims, 1);
            let scanned = std::mem::take(&mut on_scan);
            // Rows held back (nothing could be written for them) are left as they are: a
            // locked claim of nothing else is rolled back, and the loop sleeps as if idle.
            let claimed = claimed.map(|c| claimed_batch(&inner, c));
            if claimed.is_ok() && !by_id {
                window_seen = Some((unnamed_now, claim_started));
            }
            // A claim by id of an idle relay with push that took every id it was given, few
            // enough to stay idle: it held nothing back.
            let idle_by_id = pushes
                && idle
                && by_id
                && claimed.as_ref().is_ok_and(|(batch, _, _, _)| {
                    !batch.is_empty()
                        && batch.len() <= IDLE_BY_ID_MAX
                        && batch.len() == committed.len()
                        && batch.len() < cfg.batch_size
                        && batch.iter().all(|m| committed.contains(&m.id))
                });
            // Such a claim, covered: nothing left behind, no claim owed after it.
            let alone = idle_by_id && covered;
            let claimed =
                claimed.map(|(batch, hold, left_behind, runs)| (batch, hold, left_behind && !alone, runs));
            if let Ok((batch, _, left_behind, _)) = &claimed {
                inner.stats.count_claim(kind, batch.is_empty());
                if !left_behind {
                    // It saw every due message and held none back behind a batch in flight
                    // (an empty claim whose window held only this process's batches, the late
                    // wake-up of a message an idle look had already claimed): no batch needs
                    // to claim again for it once settled.
                    claims_unsure.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                }
            }
            match claimed {
                Err(e) => {
                    drop(permit);
                    from_look = false;
                    inner.give_back(share).await;
                    RelayStats::add(&inner.stats.store_errors, 1);
                    tracing::warn!(error = %e, retry_in = ?store_backoff, "Claim failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(store_backoff) => {}
                    }
                    store_backoff = (store_backoff * 2).min(Duration::from_secs(5));
                }
                Ok((batch, _, _, _)) if batch.is_empty() => {
                    drop(permit);
                    store_backoff = Duration::from_millis(100);
                    // What the look saw is not for this relay (held back, or another relay took
                    // it): the quicker looks stop until a claim finds messages again.
                    if std::mem::take(&mut from_look) {
                        pace.quiet();
                    }
                    // A batch still in flight wakes this loop when it settles, and the claim
                    // after it sees whatever was committed meanwhile: no need to declare idle.
                    // Declaring idle and busy again around every batch of a few hot keys (each
                    // batch leaves the next claim empty until it settles) cost two committed
                    // writes and an extra claim per batch.
                    let in_flight = permits.available_permits() < cfg.max_in_flight_batches;
                    if !idle && !in_flight {
                        // Declare idle, then claim once more: a row committed between the empty
                        // claim and the declaration did not notify.
                        if let Err(e) = inner.set_idle(keeper.as_ref(), true, idle_ttl).await {
                            tracing::debug!(error = %e, "Could not declare the relay idle");
                        }
                        idle = true;
                        inner.stats.idle.store(true, std::sync::atomic::Ordering::Relaxed);
                        idle_refreshed = Instant::now();
                        // The claim once more keeps this share (no second turn in the queue).
                        carried = share;
                        once_more = true;
                        continue;
                    }
                    inner.park_or_give_back(share).await;
                    wait_idle = true;
                }
                Ok((batch, hold, left_behind, runs)) => {
                    let runs_cut = runs.cut;
                    window_next = by_id && !alone;
                    let partial = batch.len() < cfg.batch_size;
                    pace.found(Instant::now());
                    from_look = false;
                    store_backoff = Duration::from_millis(100);
                    // A quiet batch: an idle relay of a crowded budget (one of many stores)
                    // claimed everything claimable, a message or a few. It stays declared idle
                    // (writers keep waking it) and, once the batch is settled, claims again
                    // only if something may have become claimable through it: rows left
                    // behind by the claim (held back behind its keys, or a full batch), a
                    // message not sent, or a claim that ran meanwhile (it may have found a
                    // younger message of the batch's keys held back). So a store with a
                    // message now and then spends one claim and one turn of the budget per
                    // message, where declaring busy, claiming after the batch, declaring idle
                    // and claiming once more cost two writes, three claims and two turns.
                    // A claim by id of an idle relay that stays idle is settled the same way.
                    let quiet = idle_by_id
                        || (idle && partial && inner.budget.as_ref().is_some_and(crate::Budget::crowded));
                    inner.stats.last_claim_ms.store(
                        u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    RelayStats::add(&inner.stats.claimed, batch.len());
                    if scanned {
                        RelayStats::add(&inner.stats.claimed_on_scan, batch.len());
                    }
                    let inner2 = inner.clone();
                    let (started, claims_at) =
                        (claims_unsure.clone(), claims_unsure.load(std::sync::atomic::Ordering::Acquire));
                    tasks.spawn(async move {
                        let all_sent = process(&inner2, batch, hold, runs).await;
                        drop(permit);
                        inner2.park_or_give_back(share).await;
                        // Younger messages with the same keys may be claimable now: a claim
                        // under way, or one that may have held them back, ran meanwhile.
                        let claimed_meanwhile =
                            started.load(std::sync::atomic::Ordering::Acquire) != claims_at;
                        if !quiet || left_behind || !all_sent || claimed_meanwhile {
                            inner2.signal.wake();
                        }
                    });
                    if quiet {
                        // Writers wake an idle relay while its row lives: keep it alive.
                        if idle_refreshed.elapsed() >= cfg.idle_interval {
                            let _ = inner.set_idle(keeper.as_ref(), true, idle_ttl).await;
                            idle_refreshed = Instant::now();
                        }
                        wait_idle = true;
                        continue;
                    }
                    // Declared busy once the batch is on its way, not before: the declaration
                    // is a committed write, which a message claimed by an idle relay would
                    // otherwise wait for before its publish. (It only stops writers' wake-ups,
                    // which a busy relay does not need: a late one costs at most a few.)
                    if idle {
                        let _ = inner.set_idle(keeper.as_ref(), false, idle_ttl).await;
                        idle = false;
                        inner.stats.idle.store(false, std::sync::atomic::Ordering::Relaxed);
                    }
                    // A claim that did not fill its batch took everything claimable: the next
                    // one waits for a wake-up (a commit, a NOTIFY, this batch settling) or the
                    // scan, instead of finding nothing while this batch is out. A store with a
                    // trickle of messages so uses one pooled connection at a time.
                    // Unless a key's run stopped at the run's length: a claim now continues it
                    // behind this batch (published once this one has delivered the key's).
                    after_full = !partial;
                    if partial && !runs_cut {
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            _ = inner.signal.notified() => by_wake = true,
                            _ = tokio::time::sleep(cfg.idle_interval) => on_scan = true,
                        }
                    }
                }
            }
        }

        if let Some(l) = listener {
            l.abort();
        }
        let drained =
            tokio::time::timeout(cfg.shutdown_timeout, async { while tasks.join_next().await.is_some() {} })
                .await
                .is_ok();
        if !drained {
            tracing::warn!(timeout = ?cfg.shutdown_timeout, "In-flight batches did not finish; abandoning them");
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
        // The lane stops on the same shutdown and drains its own batches, as long at most.
        let _ = lane_task.await;
        // Nothing parks a share any more: the ones parked go back.
        parking_stop.cancel();
        let _ = parking.await;
        match inner.store.release(&cfg.owner).await {
            Ok(n) => tracing::info!(released = n, "Relay stopped; leases released"),
            Err(e) => {
                tracing::warn!(error = %e, "Could not release leases; they expire after the lease time")
            }
        }
        let _ = inner.store.set_idle(&cfg.owner, false, idle_ttl).await;
        presence_stop.cancel();
        let _ = presence.await;
        let _ = watch.await;
        crate::presence::leave(&inner).await;
    }
}

/// Lane batches at once: one claiming or publishing while the one before it settles.
const LANE_BATCHES: usize = 2;

/// The lane's looks for other processes' commits, while a hot key's batches are in flight: the
/// first this long after the lane opens or after a look that found messages to claim, each one
/// that found none twice as long after the last, at most [`LANE_LOOK_MAX`].
const LANE_LOOK: Duration = Duration::from_millis(4);
/// The most commits of this process the lane remembers between two looks.
const OWN_MAX: usize = 65_536;
/// The longest wait between two looks of the lane.
const LANE_LOOK_MAX: Duration = Duration::from_millis(32);

/// A claim's batch for [`process`], once the messages held back are out of it (see
/// `Inner::without_held_back`): the batch, what holds it (a lease when nothing is left of a
/// locked claim: dropping its transaction unlocks its rows, as they were), whether due
/// messages may remain, and its runs. Counts the messages claimed as runs continued.
fn claimed_batch<S: RelayStore>(
    inner: &crate::relay::Inner<S>,
    c: outbox_store::Claimed<S::Lock>,
) -> (Vec<outbox_core::OutboxMessage>, Hold<S::Lock>, bool, Runs) {
    let n = c.messages.len();
    let (batch, blocked) = inner.without_held_back(c.messages);
    if !c.after.is_empty() {
        let keys: std::collections::HashSet<&str> = c.after.iter().map(|a| a.key()).collect();
        let continued = batch.iter().filter(|m| m.key.as_deref().is_some_and(|k| keys.contains(k)));
        RelayStats::add(&inner.stats.runs_continued, continued.count());
    }
    let runs = Runs { after: c.after, told: c.told, blocked, cut: c.runs_cut };
    if batch.is_empty() && n > 0 {
        (batch, Hold::Lease, true, runs)
    } else {
        (batch, c.hold, c.left_behind, runs)
    }
}

/// The lane: while batches of a hot key's runs are in flight (runs cut at their length, or
/// continuing a batch in front; see [`crate::relay::Chains`]), new messages of other keys are
/// claimed by id here, beside the claim loop, whose claims then run back to back (each a
/// continued run's, which may take milliseconds on a deep backlog) and whose permits are held
/// by those batches, one of them waiting for the other's word. So a hot key's backlog holds up
/// the other keys' new messages for a claim and a publish, not for a batch's run.
///
/// It finds them two ways: this process's commits, named by its commit signal, at once; and
/// any process's, by a look at the messages committed since the last look
/// ([`outbox_store::Claims::newer_than`], one read of the primary key; the first look of an
/// opening reads back from where the messages end, and names those committed in the last
/// [`outbox_store::LOOK_BACK`], which the claim loop may otherwise reach only after a slow
/// claim on a deep backlog), every [`LANE_LOOK`]
/// while looks find messages to claim, less often (up to [`LANE_LOOK_MAX`]) while they find
/// none: a writer in another process (`outbox relay` beside other languages' services) gets
/// no in-process wake-up, and a busy relay no `NOTIFY`. It goes on for [`LANE_LINGER`] after
/// the last such batch ended (the claim loop's next claim may take long on a deep backlog);
/// otherwise nothing changes without such batches: the lane neither looks nor claims. Its claims take only heads of their keys, by id
/// ([`outbox_store::Claims::claim_ids`]), and continue no run, so their batches publish at
/// once; at most [`LANE_BATCHES`] are in flight, and only while the pool has a connection to
/// spare and, under a budget of batches in flight (`outbox relay`'s), a share is free. Under a
/// crowded budget (more stores than shares: their pools keep no connection between turns) its
/// looks run on the store's keeper (`keeper`, the connection an idle relay already holds), so
/// they open none, and each of its claims opens one: it runs there only with a keeper and on a
/// store whose connections are cheap to open (MySQL/MariaDB; not PostgreSQL, which forks a
/// process for each: measured slower). Only
/// with locked claims (continued runs, and so such batches, need them). It stops on `shutdown`
/// and lets its batches finish, at most `shutdown_timeout`.
async fn lane<S: RelayStore>(
    inner: Arc<crate::relay::Inner<S>>,
    mode: ClaimMode,
    keeper: Option<outbox_store::Keeper>,
    claims_unsure: Arc<std::sync::atomic::AtomicU64>,
    shutdown: CancellationToken,
) {
    if mode != ClaimMode::Lock {
        // Never open with leases (see `lane_turn`).
        return;
    }
    // Under a crowded budget: looks on the keeper, and a new connection for each claim.
    let crowded_ok = keeper.is_some() && inner.store.cheap_connections();
    let permits = Arc::new(Semaphore::new(LANE_BATCHES));
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut look = Look::new();
    let again = Again::default();
    let limit = inner.cfg.batch_size;
    loop {
        let (permit, turn) = tokio::select! {
            _ = shutdown.cancelled() => break,
            t = lane_turn(&inner, crowded_ok, &permits, &mut look) => t,
        };
        while tasks.try_join_next().is_some() {}
        let fresh: Vec<Named> = match turn {
            Turn::Commits => {
                let ids = inner.signal.take_ids();
                look.mine(&ids);
                ids.into_iter().map(named).collect()
            }
            Turn::Look => {
                RelayStats::add(&inner.stats.lane_looks, 1);
                let gaps = look.gaps();
                // Under a crowded budget the pool keeps no connection between turns: the look
                // runs on the keeper's (which `lane_turn` requires then).
                let on_keeper =
                    keeper.as_ref().filter(|_| inner.budget.as_ref().is_some_and(crate::Budget::crowded));
                let seen = tokio::select! {
                    _ = shutdown.cancelled() => break,
                    r = async {
                        match on_keeper {
                            Some(k) => k.newer_than(look.after, &gaps, limit).await,
                            None => inner.store.newer_than(look.after, &gaps, limit).await,
                        }
                    } => r,
                };
                match seen {
                    Ok(seen) => {
                        // The first look of an opening finds where the messages end, and
                        // what was committed just before it (`outbox_store::LOOK_BACK`).
                        let first = look.after.is_none();
                        look.saw(&seen);
                        // This process's commits signalled meanwhile go with this claim.
                        let mine = inner.signal.take_ids();
                        look.mine(&mine);
                        let found = look.found(&seen.due, inner.store.held_in_flight(&seen.due));
                        look.done(first || !found.is_empty());
                        // What the first look found was committed before the lane opened:
                        // named once (a hot key's newest messages, most often, which only the
                        // claim loop's runs take).
                        let found = found.into_iter().map(if first { named_once } else { named });
                        found.chain(mine.into_iter().map(named)).collect()
                    }
                    Err(e) => {
                        look.done(false);
                        RelayStats::add(&inner.stats.store_errors, 1);
                        tracing::warn!(error = %e, "The lane's look for new messages failed; the claim loop finds them");
                        continue;
                    }
                }
            }
        };
        // Checked against this process's batches once more, with the ids named again: a look's
        // found ids were checked already (`Look::found`: whether the look found anything paces
        // the looks), and a claim loop's batch may have taken one since. An in-memory register.
        let ids = again.with(fresh, limit, |ids| inner.store.held_in_flight(ids));
        RelayStats::add(&inner.stats.lane_left, again.left_to_the_loop());
        if ids.is_empty() {
            continue;
        }
        // Under a budget, a share for the batch, if one is free or parked; else the ids wait to
        // be named again (the claim loop finds them too).
        let share = match &inner.budget {
            None => None,
            Some(_) => match inner.share_beside().await {
                Some(s) => Some(s),
                None => {
                    again.left(&ids, &Default::default());
                    continue;
                }
            },
        };
        // Under a crowded budget the pool may be shedding (this relay held no share a moment
        // ago): it keeps this claim's connection for the batch's share (parked after it).
        if share.is_some() && inner.budget.as_ref().is_some_and(crate::Budget::crowded) {
            inner.store.shed_connections(false).await;
        }
        RelayStats::add(&inner.stats.claims_beside, 1);
        // A claim ran: a quiet batch of the loop settling meanwhile wakes it.
        claims_unsure.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        tasks.spawn(claim_beside(inner.clone(), ids, again.clone(), (permit, share), shutdown.clone()));
    }
    let timeout = inner.cfg.shutdown_timeout;
    let drained = tokio::time::timeout(timeout, async { while tasks.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
}

/// How long the lane keeps naming again, at its next turns, a message it named and could not
/// take (its key's older message in a batch about to settle, most often); then the claim loop
/// finds it.
const LANE_AGAIN_FOR: Duration = Duration::from_secs(1);

/// A message the lane named, and since when it could not take it (`None`: named for the first
/// time).
type Named = (outbox_core::MessageId, Option<Instant>);

/// A message named for the first time: named again at the lane's next turns if not taken.
fn named(id: outbox_core::MessageId) -> Named {
    (id, None)
}

/// A message named once: left to the claim loop if not taken (as if it had not been taken for
/// [`LANE_AGAIN_FOR`] already).
fn named_once(id: outbox_core::MessageId) -> Named {
    (id, Instant::now().checked_sub(LANE_AGAIN_FOR))
}

/// The messages the lane named and could not take, to be named again at its next turns (for at
/// most [`LANE_AGAIN_FOR`], at most a batch at a time), and how many it left to the claim loop
/// since the lane last counted them. Shared by the lane and its claims.
#[derive(Clone, Default)]
struct Again {
    named: Arc<std::sync::Mutex<Vec<Named>>>,
    left: Arc<std::sync::atomic::AtomicUsize>,
}

impl Again {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Named>> {
        self.named.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Messages left to the claim loop since the last call: named and not taken for
    /// [`LANE_AGAIN_FOR`], or beyond a claim's `limit` when named for the first time.
    fn left_to_the_loop(&self) -> usize {
        self.left.swap(0, std::sync::atomic::Ordering::AcqRel)
    }

    fn leave(&self, n: usize) {
        self.left.fetch_add(n, std::sync::atomic::Ordering::AcqRel);
    }

    /// Whether messages wait to be named again.
    #[cfg(test)]
    fn waiting(&self) -> bool {
        !self.lock().is_empty()
    }

    /// The next claim's messages: `fresh` ones, then those waiting to be named again, minus
    /// those a batch of this process holds (`held`), each once, at most `limit`; the rest of
    /// those waiting keep waiting.
    fn with(
        &self,
        fresh: Vec<Named>,
        limit: usize,
        held: impl Fn(&[outbox_core::MessageId]) -> Vec<bool>,
    ) -> Vec<Named> {
        let mut ids = fresh;
        ids.append(&mut self.lock());
        let held = held(&ids.iter().map(|(id, _)| *id).collect::<Vec<_>>());
        let mut seen = std::collections::HashSet::new();
        let mut ids: Vec<Named> = ids
            .into_iter()
            .zip(held)
            .filter(|((id, _), held)| !held && seen.insert(*id))
            .map(|(x, _)| x)
            .collect();
        if ids.len() > limit {
            let (again, fresh): (Vec<Named>, Vec<Named>) =
                ids.split_off(limit).into_iter().partition(|(_, since)| since.is_some());
            self.leave(fresh.len());
            self.lock().extend(again);
        }
        ids
    }

    /// A claim that named `named` took `taken`: the others wait to be named again, unless they
    /// could not be taken for [`LANE_AGAIN_FOR`] already.
    fn left(&self, named: &[Named], taken: &std::collections::HashSet<outbox_core::MessageId>) {
        let now = Instant::now();
        let (again, expired): (Vec<Named>, Vec<Named>) = named
            .iter()
            .filter(|(id, _)| !taken.contains(id))
            .map(|(id, since)| (*id, Some(since.unwrap_or(now))))
            .partition(|(_, since)| since.is_some_and(|since| now.duration_since(since) < LANE_AGAIN_FOR));
        self.leave(expired.len());
        self.lock().extend(again);
    }
}

/// What the lane does with its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Claims this process's commits, named by its commit signal.
    Commits,
    /// Looks for what any process committed since the last look, and claims it.
    Look,
}

/// How long the lane's looks read again an id that an earlier look did not see although a
/// newer one was there (a transaction not committed yet, most often; or rolled back).
const LANE_GAP_FOR: Duration = Duration::from_secs(1);
/// The most such ids the lane reads again; a wider gap (a sequence that jumped) is not read again.
const LANE_GAPS: usize = 256;
/// How long the lane goes on after the last hot key's batch ended ([`Look::lingers`]); as long
/// as its looks' position is kept ([`Look::reopen`]).
const LANE_LINGER: Duration = LANE_GAP_FOR;

/// When the lane looks next, and from where.
struct Look {
    /// The newest id the last look saw (`None`: the next look finds it, reading the newest
    /// messages backwards: those committed in the last [`outbox_store::LOOK_BACK`] are named).
    after: Option<outbox_core::MessageId>,
    /// Ids below `after` no look has seen yet, and since when: read again by the next looks.
    gaps: std::collections::BTreeMap<outbox_core::MessageId, Instant>,
    /// The wait before the next look.
    every: Duration,
    /// When the next look is due.
    next: Instant,
    /// Whether a hot key's batch was in flight at the last turn.
    open: bool,
    /// Since when no hot key's batch is in flight, if one was before.
    closed: Option<Instant>,
    /// This process's commits signalled to the lane (claimed at once) that no look has passed
    /// yet: not counted as found by the look that sees them.
    own: std::collections::HashSet<outbox_core::MessageId>,
}

impl Look {
    fn new() -> Self {
        Look {
            after: None,
            gaps: Default::default(),
            every: LANE_LOOK,
            next: Instant::now(),
            open: false,
            closed: None,
            own: Default::default(),
        }
    }

    /// This process's commits, signalled to the lane. Forgotten when the looks start afresh or
    /// do not move on (failing) for [`OWN_MAX`] of them: the rest is the claim loop's.
    fn mine(&mut self, ids: &[outbox_core::MessageId]) {
        if self.after.is_none() || self.own.len() > OWN_MAX {
            self.own.clear();
        }
        self.own.extend(ids.iter().copied());
    }

    /// What the last look found (after [`Look::saw`]): the `due` messages of other processes
    /// that no batch of this process holds (`held`, by position). This process's commits up to
    /// the look's end are forgotten: every one of them has been seen.
    fn found(&mut self, due: &[outbox_core::MessageId], held: Vec<bool>) -> Vec<outbox_core::MessageId> {
        let found = due
            .iter()
            .zip(held)
            .filter(|(id, held)| !held && !self.own.contains(id))
            .map(|(id, _)| *id)
            .collect();
        let after = self.after;
        self.own.retain(|id| after.is_none_or(|after| *id > after));
        found
    }

    /// No hot key's batch is in flight (since the first call).
    fn close(&mut self) {
        if std::mem::take(&mut self.open) {
            self.closed = Some(Instant::now());
        }
    }

    /// Whether the lane, closed, goes on looking and claiming: for [`LANE_LINGER`] after the
    /// last hot key's batch ended. Runs pause between two batches, and the claim loop's next
    /// claim, continuing no run, reads the backlog's window and every key's head: 50-150 ms on
    /// MariaDB beside 300,000 messages on 10 hot keys, during which other keys' new messages
    /// would otherwise wait for it.
    fn lingers(&self) -> bool {
        !self.open && self.closed.is_some_and(|closed| closed.elapsed() < LANE_LINGER)
    }

    /// A hot key's batch is in flight again. After a short closing (runs often pause between two
    /// batches; the lane lingers meanwhile) the looks go on from where they were, so that what
    /// was committed meanwhile is seen; after a long one they start afresh, with a look at where
    /// the messages end, at once.
    fn reopen(&mut self) {
        if let Some(closed) = self.closed.take() {
            if closed.elapsed() >= LANE_GAP_FOR {
                *self = Look::new();
            }
        }
        self.open = true;
    }

    /// The ids the next look reads again.
    fn gaps(&self) -> Vec<outbox_core::MessageId> {
        self.gaps.keys().copied().collect()
    }

    /// A look saw `seen`: the next starts after its newest id; the ids it skipped between its
    /// start and there, and the `pending` ones it saw that were not due yet by its clock (a
    /// message committed while the look began has a time past that clock), are read again by
    /// the next looks, for [`LANE_GAP_FOR`] from the first look that missed them.
    fn saw(&mut self, seen: &outbox_store::Newer) {
        let now = Instant::now();
        let later: Vec<(outbox_core::MessageId, Instant)> =
            seen.later.iter().map(|id| (*id, self.gaps.get(id).copied().unwrap_or(now))).collect();
        for id in &seen.seen {
            self.gaps.remove(id);
        }
        for (id, since) in later {
            if self.gaps.len() < LANE_GAPS {
                self.gaps.insert(id, since);
            }
        }
        self.gaps.retain(|_, since| now.duration_since(*since) < LANE_GAP_FOR);
        if let (Some(from), Some(to)) = (self.after, seen.newest) {
            let above: std::collections::HashSet<i64> =
                seen.seen.iter().map(|id| id.0).filter(|id| *id > from.0 && *id < to.0).collect();
            // Ids come from the table: any values, bounded here without overflow.
            let missing =
                to.0.saturating_sub(from.0)
                    .saturating_sub(1)
                    .saturating_sub(i64::try_from(above.len()).unwrap_or(i64::MAX));
            if missing > 0 && usize::try_from(missing).is_ok_and(|m| self.gaps.len() + m <= LANE_GAPS) {
                for id in (from.0 + 1..to.0).filter(|id| !above.contains(id)) {
                    self.gaps.insert(outbox_core::MessageId(id), now);
                }
            }
        }
        self.after = seen.newest.or(self.after);
    }

    /// A look ended, having `found` messages to claim or not.
    fn done(&mut self, found: bool) {
        self.every = if found { LANE_LOOK } else { (self.every * 2).min(LANE_LOOK_MAX) };
        self.next = Instant::now() + self.every;
    }
}

/// The lane's turn: a permit of its own, once a hot key's batch is in flight (or was, less than
/// [`LANE_LINGER`] ago), this process has
/// committed messages to claim or a look is due, claims are not paused after failed
/// settlements, the store's pool has a connection to spare, and under a budget
/// ([`crate::Budget`], which `outbox relay` always gives its relays), the budget has a share
/// free: each of the lane's batches takes one, without queueing for it (the budget bounds every
/// batch the process has in flight). A crowded budget, with more stores than shares, keeps its
/// stores' pools empty between their turns: a lane runs under it only when `crowded_ok`, with a
/// keeper to look on and a store whose connections are cheap to open
/// ([`outbox_store::Wakeups::cheap_connections`]: its claims, under their shares, open one
/// each). Waits on
/// wake-ups of its own (`Chains::started`, `CommitSignal::next_commit`) and the look's time: it
/// takes none of the claim loop's.
async fn lane_turn<S: RelayStore>(
    inner: &crate::relay::Inner<S>,
    crowded_ok: bool,
    permits: &Arc<Semaphore>,
    look: &mut Look,
) -> (tokio::sync::OwnedSemaphorePermit, Turn) {
    // Open while a hot key's batches are in flight, and for a while after (see `Look::lingers`).
    let open = |look: &Look| {
        (inner.chains.any() || look.lingers())
            && inner.pause_left().is_none()
            && inner.store.spare_connection()
            && inner.budget.as_ref().is_none_or(|b| inner.share_at_hand() && (crowded_ok || !b.crowded()))
    };
    let turn = |look: &Look| {
        if inner.signal.has_ids() {
            Some(Turn::Commits)
        } else if Instant::now() >= look.next {
            Some(Turn::Look)
        } else {
            None
        }
    };
    loop {
        let started = inner.chains.started();
        tokio::pin!(started);
        started.as_mut().enable();
        let commit = inner.signal.next_commit();
        tokio::pin!(commit);
        commit.as_mut().enable();
        if inner.chains.any() {
            look.reopen();
        } else {
            look.close();
        }
        if open(look) && turn(look).is_some() {
            match permits.clone().acquire_owned().await {
                Ok(p) => match turn(look).filter(|_| open(look)) {
                    Some(t) => return (p, t),
                    None => continue,
                },
                Err(_) => return std::future::pending().await,
            }
        }
        if !inner.chains.any() && !look.lingers() {
            started.await;
            continue;
        }
        // Nothing to claim yet, a paused store or a full pool: looked at again at the next
        // commit, at the look's time, or after a while (a pause ends, a connection comes back,
        // without a wake-up).
        let until = look.next.max(Instant::now()).min(Instant::now() + Duration::from_millis(50));
        tokio::select! {
            () = &mut started => {}
            () = &mut commit => {}
            () = tokio::time::sleep_until(until) => {}
        }
    }
}

/// A claim of the lane: by id alone, of messages committed by this process or seen by a look
/// (`ids`), and its batch published and settled, holding the lane's permit and its share of the
/// budget, if any (given back once the batch is settled, or the claim ends). What it does not
/// take (a key held by a batch in flight, a claim that failed) a later claim looks for: every
/// batch's settlement wakes the claim loop.
async fn claim_beside<S: RelayStore>(
    inner: Arc<crate::relay::Inner<S>>,
    named: Vec<Named>,
    again: Again,
    (permit, share): (tokio::sync::OwnedSemaphorePermit, Option<tokio::sync::OwnedSemaphorePermit>),
    shutdown: CancellationToken,
) {
    let cfg = &inner.cfg;
    let started = Instant::now();
    let ids: Vec<_> = named.iter().map(|(id, _)| *id).collect();
    if share.is_some() {
        inner.ready_to_claim().await;
    }
    let claimed = inner.store.claim_ids(ClaimMode::Lock, &cfg.owner, &ids, cfg.batch_size, cfg.lease).await;
    inner.stats.claim_duration.record(started.elapsed());
    RelayStats::add(&inner.stats.claims, 1);
    let c = match claimed {
        Ok(c) => c,
        Err(e) => {
            RelayStats::add(&inner.stats.store_errors, 1);
            tracing::warn!(error = %e, "A claim beside the claim loop failed; the next claim looks for its messages");
            inner.give_back(share).await;
            drop(permit);
            inner.signal.wake();
            return;
        }
    };
    inner.stats.count_claim(crate::stats::ClaimKind::ById, c.messages.is_empty());
    if shutdown.is_cancelled() {
        // Rows a locked claim holds are unlocked by dropping it (rolled back).
        drop(c);
        inner.give_back(share).await;
        return;
    }
    again.left(&named, &c.messages.iter().map(|m| m.id).collect());
    let (batch, hold, _, runs) = claimed_batch(&inner, c);
    if batch.is_empty() {
        drop((hold, runs));
        inner.park_or_give_back(share).await;
        return;
    }
    RelayStats::add(&inner.stats.claimed, batch.len());
    process(&inner, batch, hold, runs).await;
    inner.park_or_give_back(share).await;
    drop(permit);
    // Younger messages of its keys may be claimable now.
    inner.signal.wake();
}

/// The idle relay's look on its keeper's connection: the tick, which also refreshes the idle
/// row, when `refresh`; otherwise a read alone. Answers whether something may be due.
async fn look(
    keeper: &outbox_store::Keeper,
    refresh: bool,
    owner: &str,
    ttl: Duration,
) -> outbox_store::Result<bool> {
    if refresh {
        keeper.idle_tick(owner, ttl).await
    } else {
        keeper.peek().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::MessageId;
    use std::collections::HashSet;

    fn ids(named: &[Named]) -> Vec<i64> {
        named.iter().map(|(id, _)| id.0).collect()
    }

    fn fresh(ids: &[i64]) -> Vec<Named> {
        ids.iter().map(|id| super::named(MessageId(*id))).collect()
    }

    /// The lane names a message it could not take again at its next turns, once per claim,
    /// never one a batch of this process holds, at most a batch at a time, and for at most
    /// `LANE_AGAIN_FOR`.
    #[tokio::test(start_paused = true)]
    async fn the_lane_names_again_what_it_could_not_take_for_a_while() {
        let again = Again::default();
        let none = |ids: &[MessageId]| vec![false; ids.len()];
        let first = again.with(fresh(&[1, 2]), 10, none);
        assert_eq!(ids(&first), vec![1, 2]);
        assert!(!again.waiting());
        // 2 was not taken: named again with the next fresh ones, after them.
        again.left(&first, &HashSet::from([MessageId(1)]));
        assert!(again.waiting());
        let held3 = |ids: &[MessageId]| ids.iter().map(|id| id.0 == 3).collect();
        let second = again.with(fresh(&[3, 4]), 10, held3);
        assert_eq!(ids(&second), vec![4, 2], "3 is held by a batch of this process");
        assert!(!again.waiting());
        // Not taken again: still waiting, since the first time.
        tokio::time::advance(Duration::from_millis(500)).await;
        again.left(&second, &HashSet::from([MessageId(4)]));
        // At most a batch: the fresh ones first; what waited keeps waiting, a fresh one left out
        // is the claim loop's.
        assert_eq!(again.left_to_the_loop(), 0);
        let third = again.with(fresh(&[5, 6, 7]), 2, none);
        assert_eq!(ids(&third), vec![5, 6]);
        assert_eq!(again.left_to_the_loop(), 1, "7 is left to the claim loop");
        let fourth = again.with(Vec::new(), 10, none);
        assert_eq!(ids(&fourth), vec![2]);
        // Not taken for LANE_AGAIN_FOR since the first time: the claim loop's.
        tokio::time::advance(LANE_AGAIN_FOR).await;
        again.left(&fourth, &HashSet::new());
        assert!(!again.waiting());
        assert_eq!(again.left_to_the_loop(), 1, "2 is left to the claim loop");
        assert_eq!(again.left_to_the_loop(), 0, "counted once");
        // Named once (the first look's): not named again when not taken.
        tokio::time::advance(LANE_AGAIN_FOR).await;
        let once = again.with(vec![named_once(MessageId(8)), named(MessageId(9))], 10, none);
        assert_eq!(ids(&once), vec![8, 9]);
        again.left(&once, &HashSet::new());
        assert_eq!(again.left_to_the_loop(), 1, "8 is left to the claim loop at once");
        assert_eq!(ids(&again.with(Vec::new(), 10, none)), vec![9], "9 is named again");
    }

    fn newer(seen: &[i64], newest: Option<i64>) -> outbox_store::Newer {
        outbox_store::Newer {
            due: Vec::new(),
            later: Vec::new(),
            seen: seen.iter().map(|id| MessageId(*id)).collect(),
            newest: newest.map(MessageId),
        }
    }

    /// A `pending` message a look saw that was not due by its clock (committed while the look
    /// began, or scheduled) is read again by the next looks, for `LANE_GAP_FOR` from the first
    /// look that saw it so, not longer.
    #[tokio::test(start_paused = true)]
    async fn the_lanes_looks_read_again_what_was_not_due_yet() {
        let mut look = Look::new();
        look.saw(&newer(&[], Some(10)));
        // A look that saw `seen`, of which `later` were pending and not due by its clock.
        let saw = |seen: &[i64], later: &[i64]| outbox_store::Newer {
            later: later.iter().map(|id| MessageId(*id)).collect(),
            ..newer(seen, seen.iter().max().copied())
        };
        // 11 and 12 seen, 12 not due yet.
        look.saw(&saw(&[11, 12], &[12]));
        assert_eq!(look.gaps(), vec![MessageId(12)]);
        assert_eq!(look.after, Some(MessageId(12)));
        // Read again and due now: no longer read again.
        tokio::time::advance(Duration::from_millis(300)).await;
        look.saw(&saw(&[12], &[]));
        assert!(look.gaps().is_empty());
        // 13 scheduled: read again while not due, for LANE_GAP_FOR from the first time.
        look.saw(&saw(&[13], &[13]));
        tokio::time::advance(Duration::from_millis(600)).await;
        look.saw(&saw(&[13], &[13]));
        assert_eq!(look.gaps(), vec![MessageId(13)]);
        tokio::time::advance(Duration::from_millis(400)).await;
        look.saw(&saw(&[13], &[13]));
        assert!(look.gaps().is_empty(), "the claim loop's after LANE_GAP_FOR");
        assert_eq!(look.after, Some(MessageId(13)));
    }

    /// The first look of an opening names what was committed just before it (the store reads
    /// the newest messages back, `outbox_store::LOOK_BACK`): found as any look's, this process's
    /// own commits and the messages its batches hold left out; those not due yet read again;
    /// the next look starts after the newest.
    #[tokio::test(start_paused = true)]
    async fn the_lanes_first_look_finds_what_was_committed_just_before_it() {
        let mut look = Look::new();
        look.reopen();
        look.mine(&[MessageId(8)]);
        let first = outbox_store::Newer {
            due: [7, 8, 9].map(MessageId).to_vec(),
            later: vec![MessageId(10)],
            ..newer(&[6, 7, 8, 9, 10], Some(10))
        };
        look.saw(&first);
        assert_eq!(look.after, Some(MessageId(10)));
        assert_eq!(look.gaps(), vec![MessageId(10)], "not due yet: read again");
        let found = look.found(&first.due, vec![false, false, true]);
        assert_eq!(found, vec![MessageId(7)], "8 is this process's, 9 held");
    }

    /// The lane's looks read again the ids a look skipped (transactions not committed yet) until
    /// a look sees them or `LANE_GAP_FOR` has passed, and not a gap wider than `LANE_GAPS`.
    #[tokio::test(start_paused = true)]
    async fn the_lanes_looks_read_again_the_ids_they_skipped() {
        let mut look = Look::new();
        look.reopen(); // Open: a hot key's batch is in flight.
        look.saw(&newer(&[], Some(10)));
        assert_eq!(look.after, Some(MessageId(10)));
        assert!(look.gaps().is_empty(), "the first look leaves no gap below where the messages end");
        // 12 and 14 seen, 11 and 13 not (yet).
        look.saw(&newer(&[12, 14], Some(14)));
        assert_eq!(look.gaps(), vec![MessageId(11), MessageId(13)]);
        assert_eq!(look.after, Some(MessageId(14)));
        // 13 committed since; nothing newer: the start stays.
        tokio::time::advance(Duration::from_millis(600)).await;
        look.saw(&newer(&[13], Some(14)));
        assert_eq!(look.gaps(), vec![MessageId(11)]);
        // 16 seen, 15 skipped; 11 read again for LANE_GAP_FOR only.
        tokio::time::advance(Duration::from_millis(500)).await;
        look.saw(&newer(&[16], Some(16)));
        assert_eq!(look.gaps(), vec![MessageId(15)]);
        // Ids at the ends of the range: no overflow, no gap read again.
        let mut odd = Look::new();
        odd.saw(&newer(&[], Some(i64::MIN + 1)));
        odd.saw(&newer(&[i64::MAX], Some(i64::MAX)));
        assert!(odd.gaps().is_empty());
        assert_eq!(odd.after, Some(MessageId(i64::MAX)));
        // A sequence that jumped: its gap is not read again.
        look.saw(&newer(&[100_000], Some(100_000)));
        assert_eq!(look.gaps(), vec![MessageId(15)]);
        assert_eq!(look.after, Some(MessageId(100_000)));
        // Closed briefly: the looks go on from there; closed for long: afresh.
        look.close();
        tokio::time::advance(Duration::from_millis(100)).await;
        look.reopen();
        assert_eq!((look.after, look.gaps()), (Some(MessageId(100_000)), vec![MessageId(15)]));
        look.close();
        tokio::time::advance(LANE_GAP_FOR).await;
        look.reopen();
        assert!(look.gaps().is_empty() && look.after.is_none());
    }

    /// Closed (no hot key's batch in flight), the lane goes on for `LANE_LINGER` from the first
    /// closing, then stops; reopened after that, its looks start afresh.
    #[tokio::test(start_paused = true)]
    async fn the_lane_lingers_a_while_after_the_hot_keys_batches() {
        let mut look = Look::new();
        look.close();
        assert!(!look.lingers(), "never open: nothing to linger after");
        look.reopen();
        assert!(!look.lingers(), "open");
        look.saw(&newer(&[], Some(10)));
        look.close();
        assert!(look.lingers());
        tokio::time::advance(LANE_LINGER - Duration::from_millis(1)).await;
        look.close();
        assert!(look.lingers(), "closed since the first closing");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!look.lingers());
        look.reopen();
        assert!(look.after.is_none() && !look.lingers(), "afresh");
    }

    /// A look finds the due messages of other processes that no batch of this process holds;
    /// this process's commits (claimed as they are signalled) are not found, and are forgotten
    /// once a look has passed them, or when the looks start afresh.
    #[tokio::test(start_paused = true)]
    async fn the_lanes_looks_find_only_other_processes_messages() {
        let mut look = Look::new();
        look.reopen();
        look.saw(&newer(&[], Some(10)));
        look.mine(&[MessageId(12), MessageId(15)]);
        look.saw(&newer(&[11, 12, 13, 14], Some(14)));
        let due = [11, 12, 13, 14].map(MessageId);
        let found = look.found(&due, vec![false, false, true, false]);
        assert_eq!(found, vec![MessageId(11), MessageId(14)], "12 is this process's, 13 held");
        assert_eq!(look.own, HashSet::from([MessageId(15)]), "12 passed, 15 not yet");
        look.saw(&newer(&[15], Some(15)));
        assert_eq!(look.found(&[MessageId(15)], vec![false]), Vec::<MessageId>::new());
        assert!(look.own.is_empty());
        // Closed for long, the looks start afresh: what was remembered is the claim loop's.
        look.mine(&[MessageId(16)]);
        look.close();
        tokio::time::advance(LANE_GAP_FOR).await;
        look.reopen();
        assert!(look.own.is_empty());
    }
}
