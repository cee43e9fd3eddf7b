//! Live counters of a relay.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of what the relay did, readable while it runs (tests, metrics).
#[derive(Debug, Default)]
pub struct RelayStats {
    /// Claim queries issued.
    pub claims: AtomicU64,
    /// Messages claimed.
    pub claimed: AtomicU64,
    /// Messages claimed by a scan that the `idle_interval` timer started (no wake-up came):
    /// the slow path. The others were claimed on a wake-up (after-commit signal, `NOTIFY`) or
    /// while the relay was busy, so `1 - claimed_on_scan / claimed` is the fast-path share.
    pub claimed_on_scan: AtomicU64,
    /// Envelopes handed to transports.
    pub published: AtomicU64,
    /// Deliveries confirmed.
    pub delivered: AtomicU64,
    /// Failed attempts scheduled for retry.
    pub retried: AtomicU64,
    /// Messages that became `failed`.
    pub failed: AtomicU64,
    /// Deliveries put back because a circuit was open.
    pub deferred: AtomicU64,
    /// Messages whose lease had passed to another relay at settle time.
    pub lost_lease: AtomicU64,
    /// Store errors (claim or settle).
    pub store_errors: AtomicU64,
}

impl RelayStats {
    pub(crate) fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
