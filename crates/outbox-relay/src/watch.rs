//! The relay's own watch for what needs a person although no message failed: a destination
//! whose circuit stays open ([`AlertHook::destination_down`](crate::AlertHook::destination_down))
//! and messages waiting past their due time
//! ([`AlertHook::backlog_overdue`](crate::AlertHook::backlog_overdue)). Checked every
//! [`WATCH_INTERVAL`]; each condition alerts once when it passes its threshold, and again only
//! after it has cleared. Never delays the relay: it runs on a task of its own.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use outbox_store::{Keeper, RelayStore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::relay::Inner;

/// How often the watch looks.
pub(crate) const WATCH_INTERVAL: Duration = Duration::from_secs(10);

/// Runs until `stop`.
///
/// The overdue check runs on `keeper`, the store's listening connection, when there is one (an
/// idle relay keeps no pooled connection open for it), else on the pool.
pub(crate) async fn run<S: RelayStore>(
    inner: Arc<Inner<S>>,
    keeper: Option<Keeper>,
    stop: CancellationToken,
) {
    let cfg = &inner.cfg;
    if cfg.alert_circuit_open_after.is_none() && cfg.alert_overdue_after.is_none() {
        return;
    }
    // Per destination: since when its circuit is open, and whether this outage was alerted.
    let mut open_since: Vec<Option<(Instant, bool)>> = vec![None; inner.dests.len()];
    let mut overdue_alerted = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(WATCH_INTERVAL) => {}
        }
        let now = Instant::now();
        if let Some(after) = cfg.alert_circuit_open_after {
            for (d, state) in inner.dests.iter().zip(open_since.iter_mut()) {
                if !d.flags.circuit_open.load(Ordering::Relaxed) {
                    *state = None;
                    continue;
                }
                let (since, alerted) = state.get_or_insert((now, false));
                let open_for = now - *since;
                if !*alerted && open_for >= after {
                    *alerted = true;
                    inner.alert.destination_down(&d.d.name, open_for).await;
                }
            }
        }
        if let Some(after) = cfg.alert_overdue_after {
            let overdue = match &keeper {
                Some(k) => match k.overdue().await {
                    Err(_) => inner.store.overdue().await,
                    ok => ok,
                },
                None => inner.store.overdue().await,
            };
            match overdue {
                Ok(Some(late)) if late >= after => {
                    if !overdue_alerted {
                        overdue_alerted = true;
                        inner.alert.backlog_overdue(late).await;
                    }
                }
                Ok(_) => overdue_alerted = false,
                Err(e) => tracing::debug!(error = %e, "Could not read how late the backlog is"),
            }
        }
    }
}
