//! The null transport: every envelope is delivered at once, so a bench with it measures the
//! relay's own cost (claim, settle, bookkeeping) with no broker in the way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use outbox_core::{Envelope, Outcome, Transport};
use tokio::sync::mpsc::UnboundedSender;

/// Delivers everything; optionally reports each message id and the instant it was "confirmed"
/// to a consumer channel (the null transport is its own consumer).
#[derive(Debug, Default)]
pub struct NullTransport {
    published: AtomicU64,
    tap: Mutex<Option<UnboundedSender<(i64, Instant)>>>,
}

impl NullTransport {
    /// A null transport.
    pub fn new() -> Self {
        Self::default()
    }

    /// Envelopes published so far.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }

    /// Sends `(message id, now)` for every envelope published from now on to `tx`.
    pub(crate) fn tap(&self, tx: UnboundedSender<(i64, Instant)>) {
        if let Ok(mut t) = self.tap.lock() {
            *t = Some(tx);
        }
    }
}

#[async_trait::async_trait]
impl Transport for NullTransport {
    fn kind(&self) -> &'static str {
        "null"
    }

    async fn publish(&self, batch: &[Envelope]) -> Vec<Outcome> {
        self.published.fetch_add(batch.len() as u64, Ordering::Relaxed);
        if let Ok(t) = self.tap.lock() {
            if let Some(tx) = t.as_ref() {
                let now = Instant::now();
                for e in batch {
                    let _ = tx.send((e.id.0, now));
                }
            }
        }
        vec![Outcome::Delivered; batch.len()]
    }
}
