//! Live counters of a relay, its latency histograms and the state of its destinations.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Upper bounds, in seconds, of the buckets of every [`Histogram`] (the last bucket, `+Inf`,
/// is implied).
pub const BUCKETS: [f64; 16] =
    [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0];

/// A histogram of durations with the fixed [`BUCKETS`], updated without a lock.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last one is `+Inf`.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

/// A [`Histogram`] read at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Observations at or below each bound of [`BUCKETS`] (cumulative), in order.
    pub cumulative: Vec<u64>,
    /// Every observation.
    pub count: u64,
    /// Their sum, in seconds.
    pub sum_secs: f64,
}

impl Histogram {
    /// Records one duration.
    pub fn record(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BUCKETS.iter().position(|b| secs <= *b).unwrap_or(BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// The histogram as it is now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0;
        let cumulative = self.buckets[..BUCKETS.len()]
            .iter()
            .map(|b| {
                running += b.load(Ordering::Relaxed);
                running
            })
            .collect();
        HistogramSnapshot {
            cumulative,
            count: self.count.load(Ordering::Relaxed),
            sum_secs: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

/// One destination's state, shared by the relay (which sets it) and its stats (which read it).
#[derive(Debug, Default)]
pub(crate) struct DestinationFlags {
    pub(crate) circuit_open: AtomicBool,
    pub(crate) paused: AtomicBool,
}

/// What a relay knows about one destination now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DestinationState {
    /// Its circuit breaker is open or half-open: the destination was found unavailable and is
    /// only probed.
    pub circuit_open: bool,
    /// An operator paused it (`outbox_destination_pause`).
    pub paused: bool,
}

/// Counters of what the relay did, readable while it runs (tests, metrics).
#[derive(Debug, Default)]
pub struct RelayStats {
    /// Claim queries issued.
    pub claims: AtomicU64,
    /// Claims by why they ran, and how many of them found nothing: see
    /// [`RelayStats::claim_kinds`].
    pub(crate) by_kind: [KindCounts; ClaimKind::ALL.len()],
    /// Ids this process committed that a claim found in the signal but did not claim by id,
    /// because it looked for due messages instead (the claim after one by id): its window
    /// finds them with the rest.
    pub ids_left_to_the_window: AtomicU64,
    /// Wake-ups that started no claim: they named only messages this process had committed,
    /// and this relay's batches already held every one of them (a claim that looked for due
    /// messages took them after their commit, before the wake-up was read).
    pub wake_ups_held: AtomicU64,
    /// Idle scans run on the store's listening connection instead of a claim
    /// ([`outbox_store::Keeper::idle_tick`], and the quicker looks of a store without push,
    /// [`outbox_store::Keeper::peek`]), counted when they answered.
    pub idle_ticks: AtomicU64,
    /// Messages claimed.
    pub claimed: AtomicU64,
    /// Messages claimed behind a batch of this relay still in flight that holds the older
    /// messages of their key (a run continued across batches, published once that batch has
    /// delivered the key's: `outbox_store::Claimed::after`).
    pub runs_continued: AtomicU64,
    /// Claims by id made by the lane, beside the claim loop, while batches of a hot key's runs
    /// were in flight (runs going on across batches): they keep such a backlog from holding up
    /// other keys' new messages.
    pub claims_beside: AtomicU64,
    /// The lane's looks for messages committed since its last look by any process
    /// (`outbox_store::Claims::newer_than`), each one read of the primary key: every few
    /// milliseconds while a hot key's batches are in flight, less often while they find
    /// nothing to claim.
    pub lane_looks: AtomicU64,
    /// Messages the lane named and left to the claim loop: not taken for a second of naming
    /// them again (their key's older message still in flight, most often), or beyond a
    /// claim's batch. Many of them beside a hot backlog mean long waits for those messages.
    pub lane_left: AtomicU64,
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
    /// When the relay last claimed messages (Unix milliseconds, relay clock); 0 before the
    /// first.
    pub last_claim_ms: AtomicU64,
    /// True while the relay has nothing to do and waits for a wake-up or its scan.
    pub idle: AtomicBool,
    /// From a message's `created_at` (the commit, by the writer's or database's clock) to
    /// its delivery being confirmed by a destination (by the relay's clock), per delivery.
    pub commit_to_publish: Histogram,
    /// Duration of each claim query.
    pub claim_duration: Histogram,
    /// Duration of each settlement write.
    pub settle_duration: Histogram,
    /// Each destination's flags, by name (set once when the relay is built).
    pub(crate) destinations: Vec<(String, Arc<DestinationFlags>)>,
}

/// Why a claim ran. Each claim has exactly one kind, the first of these that applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimKind {
    /// The claim once more right after declaring the relay idle (a row committed between the
    /// empty claim and the declaration did not wake it).
    OnceMore,
    /// Given the ids this process committed since the last claim: it claims those alone.
    ById,
    /// The claim after one by id that found messages: it looks for due messages in due order
    /// (what the ids do not name: retries come due, other processes' rows).
    AfterById,
    /// Started by the scan timer or by the idle keeper's look, not by a wake-up.
    Scan,
    /// Right after a claim that filled its batch (more may be due).
    AfterFull,
    /// Woken without ids: a batch of this relay settled, a `NOTIFY` came, or a wake-up was
    /// left over from a commit whose id an earlier claim already took.
    Woken,
}

impl ClaimKind {
    /// Every kind, in the order of [`RelayStats::claim_kinds`].
    pub const ALL: [ClaimKind; 6] = [
        ClaimKind::OnceMore,
        ClaimKind::ById,
        ClaimKind::AfterById,
        ClaimKind::Scan,
        ClaimKind::AfterFull,
        ClaimKind::Woken,
    ];

    /// A short name for reports and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            ClaimKind::OnceMore => "once_more",
            ClaimKind::ById => "by_id",
            ClaimKind::AfterById => "after_by_id",
            ClaimKind::Scan => "scan",
            ClaimKind::AfterFull => "after_full",
            ClaimKind::Woken => "woken",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Claims of one kind: how many ran, and how many of them found nothing to publish.
#[derive(Debug, Default)]
pub(crate) struct KindCounts {
    claims: AtomicU64,
    empty: AtomicU64,
}

/// What [`RelayStats::claim_kinds`] reports for one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimKindCount {
    /// Why these claims ran.
    pub kind: ClaimKind,
    /// Claims of this kind that answered (failed claims are in `store_errors`).
    pub claims: u64,
    /// Of those, the claims that found nothing to publish.
    pub empty: u64,
}

impl RelayStats {
    pub(crate) fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts a claim that answered: its kind, and whether it found nothing to publish.
    pub(crate) fn count_claim(&self, kind: ClaimKind, empty: bool) {
        let k = &self.by_kind[kind.index()];
        k.claims.fetch_add(1, Ordering::Relaxed);
        if empty {
            k.empty.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The claims so far by why they ran ([`ClaimKind`]), every kind listed, in
    /// [`ClaimKind::ALL`]'s order. Their sum is `claims` less the claims that failed.
    pub fn claim_kinds(&self) -> Vec<ClaimKindCount> {
        ClaimKind::ALL
            .iter()
            .map(|&kind| {
                let k = &self.by_kind[kind.index()];
                ClaimKindCount {
                    kind,
                    claims: k.claims.load(Ordering::Relaxed),
                    empty: k.empty.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Every destination of the relay and its state, by name.
    pub fn destinations(&self) -> Vec<(String, DestinationState)> {
        let state = |f: &DestinationFlags| DestinationState {
            circuit_open: f.circuit_open.load(Ordering::Relaxed),
            paused: f.paused.load(Ordering::Relaxed),
        };
        self.destinations.iter().map(|(name, f)| (name.clone(), state(f))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_counts_cumulatively_with_an_overflow_bucket() {
        let h = Histogram::default();
        for ms in [0, 1, 3, 700, 120_000] {
            h.record(Duration::from_millis(ms));
        }
        let s = h.snapshot();
        assert_eq!(s.count, 5);
        assert!((s.sum_secs - 120.704).abs() < 1e-9, "{}", s.sum_secs);
        let at = |bound: f64| s.cumulative[BUCKETS.iter().position(|b| *b == bound).unwrap()];
        assert_eq!((at(0.0005), at(0.001), at(0.005), at(1.0), at(60.0)), (1, 2, 3, 4, 4));
    }
}
