//! The relay's row in `outbox_relay` ([`outbox_store::Presence`]): written when it starts,
//! refreshed every [`BEAT_INTERVAL`] with its state, last claim and counters, removed when it
//! stops. One admin listener lists every relay process on the store from it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_store::{Keeper, RelayBeat, RelayState, RelayStore};
use tokio_util::sync::CancellationToken;

use crate::relay::Inner;
use crate::stats::RelayStats;

/// How often a relay refreshes its row. A row silent for 6 intervals is a relay that died
/// without stopping (the admin API reports it as lost).
pub const BEAT_INTERVAL: Duration = Duration::from_secs(5);

/// The machine's name: `HOSTNAME`, else the kernel's, else empty.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// What the relay reports now.
fn beat(owner: &str, host: &str, started_at: DateTime<Utc>, stats: &RelayStats) -> RelayBeat {
    let last_claim = i64::try_from(RelayStats::get(&stats.last_claim_ms)).ok().filter(|ms| *ms > 0);
    RelayBeat {
        owner: owner.to_owned(),
        host: host.to_owned(),
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        state: if stats.idle.load(Ordering::Relaxed) { RelayState::Idle } else { RelayState::Busy },
        started_at,
        last_claim_at: last_claim.and_then(DateTime::from_timestamp_millis),
        claimed: RelayStats::get(&stats.claimed),
        delivered: RelayStats::get(&stats.delivered),
        failed: RelayStats::get(&stats.failed),
    }
}

/// Writes the relay's row now and every [`BEAT_INTERVAL`] until `stop`; a failed write is
/// logged once per failure streak and retried at the next beat (presence never stops a relay).
///
/// The beats go through `keeper`, the store's listening connection, when there is one (a relay
/// with nothing to do keeps no pooled connection open for them), else through the pool.
pub(crate) async fn run<S: RelayStore>(
    inner: Arc<Inner<S>>,
    keeper: Option<Keeper>,
    stop: CancellationToken,
) {
    let host = host_name();
    let started_at = Utc::now();
    let mut failing = false;
    loop {
        let b = beat(&inner.cfg.owner, &host, started_at, &inner.stats);
        let written = match &keeper {
            Some(k) => match k.beat(&b).await {
                Err(_) => inner.store.beat(&b).await,
                ok => ok,
            },
            None => inner.store.beat(&b).await,
        };
        match written {
            Ok(()) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "Could not record this relay in outbox_relay; the admin API will not list it");
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(BEAT_INTERVAL) => {}
        }
    }
}

/// Removes the relay's row (it stops).
pub(crate) async fn leave<S: RelayStore>(inner: &Inner<S>) {
    if let Err(e) = inner.store.leave(&inner.cfg.owner).await {
        tracing::debug!(error = %e, "Could not remove this relay from outbox_relay");
    }
}
