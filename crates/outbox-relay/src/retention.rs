//! Retention: finished messages (`sent`, `acked`, `cancelled`) are deleted once they are older
//! than a configured age, in small batches, at a fixed interval, for as long as the service
//! runs. The `outbox relay` daemon runs it per store (`[retention]`); a service that runs its
//! own [`Relay`](crate::Relay) spawns [`Retention::run`] beside it.

use std::time::Duration;

use outbox_store::MessageAdmin;
use tokio_util::sync::CancellationToken;

/// When and how finished messages are deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Finished messages whose last change is older than this are deleted. Defaults to 7 days.
    pub finished_after: Duration,
    /// How often. Defaults to 60 s.
    pub interval: Duration,
    /// Rows per `DELETE` statement, so that no long lock builds up. Defaults to 1,000.
    pub batch: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            finished_after: Duration::from_secs(7 * 86_400),
            interval: Duration::from_secs(60),
            batch: 1000,
        }
    }
}

impl Retention {
    /// Deletes, every `interval` until `stop`, the finished messages of `store` older than
    /// `finished_after`. `name` labels the log lines (the daemon serves several stores). A
    /// failure (the database may be down) is logged and retried at the next tick.
    pub async fn run<S: MessageAdmin>(self, store: S, name: String, stop: CancellationToken) {
        let interval = self.interval.max(Duration::from_millis(1));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
            match store.purge(self.finished_after, self.batch.max(1), None).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(store = %name, deleted = n, "Retention removed finished messages"),
                Err(e) => {
                    tracing::warn!(store = %name, error = %e, "Retention failed; retrying at the next tick")
                }
            }
        }
    }
}
