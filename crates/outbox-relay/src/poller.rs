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

use crate::batch::process;
use crate::relay::Relay;
use crate::stats::RelayStats;

/// How often the claim loop re-reads the paused destinations.
const PAUSES_INTERVAL: Duration = Duration::from_secs(1);

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
        tracing::info!(owner = %cfg.owner, batch_size = cfg.batch_size, push = listener.is_some(), "Relay started");
        let presence_stop = CancellationToken::new();
        let presence = tokio::spawn(crate::presence::run(inner.clone(), presence_stop.clone()));
        let watch = tokio::spawn(crate::watch::run(inner.clone(), presence_stop.clone()));
        let permits = Arc::new(Semaphore::new(cfg.max_in_flight_batches));
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut idle = false;
        let mut idle_refreshed = Instant::now();
        let idle_ttl = cfg.idle_interval * 3;
        let mut store_backoff = Duration::from_millis(100);
        let has_ack = inner.dests.iter().any(|d| d.d.ack.is_some());
        let mut acks_checked = Instant::now();
        let mut pauses_checked: Option<Instant> = None;
        // The next claim was started by the scan timer, not by a wake-up.
        let mut on_scan = false;
        let (mode, mode_name) =
            if cfg.lock_claims { (ClaimMode::Lock, "lock") } else { (ClaimMode::Lease, "lease") };

        loop {
            while tasks.try_join_next().is_some() {}
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
                inner.refresh_pauses().await;
            }
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
            let claim_started = Instant::now();
            let span = crate::trace::claim(&cfg.owner, mode_name, cfg.batch_size);
            let claimed = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = inner.store.claim_runs(mode, &cfg.owner, cfg.batch_size, cfg.max_run.min(cfg.batch_size), cfg.lease).instrument(span.clone()) => r,
            };
            inner.stats.claim_duration.record(claim_started.elapsed());
            if let Ok(c) = &claimed {
                span.record("claimed", c.messages.len());
            }
            drop(span);
            RelayStats::add(&inner.stats.claims, 1);
            let scanned = std::mem::take(&mut on_scan);
            // Rows held back (nothing could be written for them) are left as they are: a
            // locked claim of nothing else is rolled back, and the loop sleeps as if idle.
            let claimed = claimed.map(|c| {
                let n = c.messages.len();
                let batch = inner.without_held_back(c.messages);
                if batch.is_empty() && n > 0 {
                    (batch, Hold::Lease)
                } else {
                    (batch, c.hold)
                }
            });
            match claimed {
                Err(e) => {
                    drop(permit);
                    RelayStats::add(&inner.stats.store_errors, 1);
                    tracing::warn!(error = %e, retry_in = ?store_backoff, "Claim failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(store_backoff) => {}
                    }
                    store_backoff = (store_backoff * 2).min(Duration::from_secs(5));
                }
                Ok((batch, _)) if batch.is_empty() => {
                    drop(permit);
                    store_backoff = Duration::from_millis(100);
                    // A batch still in flight wakes this loop when it settles, and the claim
                    // after it sees whatever was committed meanwhile: no need to declare idle.
                    // Declaring idle and busy again around every batch of a few hot keys (each
                    // batch leaves the next claim empty until it settles) cost two committed
                    // writes and an extra claim per batch.
                    let in_flight = permits.available_permits() < cfg.max_in_flight_batches;
                    if !idle && !in_flight {
                        // Declare idle, then claim once more: a row committed between the empty
                        // claim and the declaration did not notify.
                        if let Err(e) = inner.store.set_idle(&cfg.owner, true, idle_ttl).await {
                            tracing::debug!(error = %e, "Could not declare the relay idle");
                        }
                        idle = true;
                        inner.stats.idle.store(true, std::sync::atomic::Ordering::Relaxed);
                        idle_refreshed = Instant::now();
                        continue;
                    }
                    let woke = tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = inner.signal.notified() => true,
                        _ = tokio::time::sleep(cfg.idle_interval) => false,
                    };
                    on_scan = !woke;
                    if idle && !woke && idle_refreshed.elapsed() >= cfg.idle_interval {
                        let _ = inner.store.set_idle(&cfg.owner, true, idle_ttl).await;
                        idle_refreshed = Instant::now();
                    }
                }
                Ok((batch, hold)) => {
                    store_backoff = Duration::from_millis(100);
                    if idle {
                        let _ = inner.store.set_idle(&cfg.owner, false, idle_ttl).await;
                        idle = false;
                        inner.stats.idle.store(false, std::sync::atomic::Ordering::Relaxed);
                    }
                    inner.stats.last_claim_ms.store(
                        u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    RelayStats::add(&inner.stats.claimed, batch.len());
                    if scanned {
                        RelayStats::add(&inner.stats.claimed_on_scan, batch.len());
                    }
                    let inner2 = inner.clone();
                    tasks.spawn(async move {
                        process(&inner2, batch, hold).await;
                        drop(permit);
                        // Younger messages with the same keys may be claimable now.
                        inner2.signal.wake();
                    });
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
