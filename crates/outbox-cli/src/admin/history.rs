//! Throughput and backlog over the last hour, per store: one point per backlog sample
//! (`[admin] backlog_interval`), kept in memory (a restart starts a new hour). The backlog
//! comes from the sample's database counts, the throughput from the counters of every relay on
//! the store between two samples: this process's live, the others' from their rows in
//! `outbox_relay` (refreshed every 5 s), each relay's own delta summed, so a relay that starts
//! or stops never shows as a burst or a negative rate.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_relay::RelayStats;
use outbox_store::{Stats, Status};
use serde::Serialize;

/// How far back the history goes.
const WINDOW: Duration = Duration::from_secs(3600);
/// Most points kept per store (one per second at the shortest interval).
const MAX_POINTS: usize = 3600;

/// One sample of one store.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Point {
    /// When it was taken.
    at: DateTime<Utc>,
    /// Messages waiting (`pending` and `sending`).
    pending: u64,
    /// Messages in `failed`.
    failed: u64,
    /// Age of the oldest waiting message, in seconds.
    oldest_pending_age_secs: Option<f64>,
    /// Deliveries confirmed per second since the previous point (null on the first).
    delivered_per_sec: Option<f64>,
    /// Messages failed for good per second since the previous point (null on the first).
    failed_per_sec: Option<f64>,
    /// Delivered and failed so far, per relay owner.
    #[serde(skip)]
    counters: BTreeMap<String, (u64, u64)>,
}

/// Delivered and failed so far, per relay owner.
pub(super) type Counters = BTreeMap<String, (u64, u64)>;

/// The counters of this process's relay (`owner`, live) and of the other relays on the store.
pub(super) fn counters(owner: &str, relay: &RelayStats, others: &[outbox_store::RelayPresence]) -> Counters {
    let mut all: Counters = others
        .iter()
        .filter(|r| r.beat.owner != owner)
        .map(|r| (r.beat.owner.clone(), (r.beat.delivered, r.beat.failed)))
        .collect();
    all.insert(owner.to_owned(), (RelayStats::get(&relay.delivered), RelayStats::get(&relay.failed)));
    all
}

/// The points of every store.
#[derive(Debug, Default)]
pub(super) struct History(Mutex<BTreeMap<String, VecDeque<Point>>>);

impl History {
    /// Adds a point for `store` from its sampled counts and its relays' counters.
    pub(super) fn record(&self, store: &str, counters: Counters, stats: &Stats, at: DateTime<Utc>) {
        let mut all = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let points = all.entry(store.to_owned()).or_default();
        let (delivered_per_sec, failed_per_sec) = match points.back() {
            Some(prev) => {
                let secs = (at - prev.at).num_milliseconds() as f64 / 1000.0;
                // Each relay's own progress since the previous point; a relay not there then
                // (just started) counts from this point on.
                let (mut delivered, mut failed) = (0u64, 0u64);
                for (owner, (d, f)) in &counters {
                    if let Some((pd, pf)) = prev.counters.get(owner) {
                        delivered = delivered.saturating_add(d.saturating_sub(*pd));
                        failed = failed.saturating_add(f.saturating_sub(*pf));
                    }
                }
                if secs > 0.0 {
                    (Some(delivered as f64 / secs), Some(failed as f64 / secs))
                } else {
                    (None, None)
                }
            }
            None => (None, None),
        };
        points.push_back(Point {
            at,
            pending: stats.count(Status::Pending) + stats.count(Status::Sending),
            failed: stats.failed,
            oldest_pending_age_secs: stats.oldest_pending_age.map(|d| d.as_secs_f64()),
            delivered_per_sec,
            failed_per_sec,
            counters,
        });
        let cutoff = at - chrono::Duration::from_std(WINDOW).unwrap_or(chrono::Duration::hours(1));
        while points.len() > MAX_POINTS || points.front().is_some_and(|p| p.at < cutoff) {
            points.pop_front();
        }
    }

    /// The points of `store`, oldest first.
    pub(super) fn points(&self, store: &str) -> Vec<Point> {
        let all = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        all.get(store).map(|p| p.iter().cloned().collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod unit {
    use std::sync::atomic::Ordering;

    use outbox_store::StatusCount;

    use super::*;

    fn stats(pending: u64, failed: u64) -> Stats {
        Stats {
            total: pending + failed,
            by_status: vec![
                StatusCount { status: Status::Pending, count: pending },
                StatusCount { status: Status::Failed, count: failed },
            ],
            by_topic: vec![],
            by_destination: vec![],
            oldest_pending_age: None,
            failed,
        }
    }

    #[test]
    fn rates_come_from_counter_deltas_and_old_points_go() {
        let relay = RelayStats::default();
        let history = History::default();
        let t0 = Utc::now() - chrono::Duration::hours(2);
        history.record("main", counters("me", &relay, &[]), &stats(10, 0), t0);
        relay.delivered.fetch_add(30, Ordering::Relaxed);
        relay.failed.fetch_add(3, Ordering::Relaxed);
        history.record("main", counters("me", &relay, &[]), &stats(4, 3), t0 + chrono::Duration::seconds(15));
        let p = history.points("main");
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].delivered_per_sec, p[1].delivered_per_sec), (None, Some(2.0)));
        assert_eq!((p[1].failed_per_sec, p[1].pending, p[1].failed), (Some(0.2), 4, 3));
        // Two hours later the first points are outside the window.
        history.record("main", counters("me", &relay, &[]), &stats(0, 3), Utc::now());
        assert_eq!(history.points("main").len(), 1);
        assert!(history.points("other").is_empty());
    }

    #[test]
    fn every_relays_progress_counts_and_one_that_starts_or_stops_is_no_burst() {
        let history = History::default();
        let t0 = Utc::now();
        let at = |s: i64| t0 + chrono::Duration::seconds(s);
        let c = |pairs: &[(&str, u64)]| -> Counters {
            pairs.iter().map(|(o, d)| ((*o).to_owned(), (*d, 0))).collect()
        };
        history.record("main", c(&[("a", 100), ("b", 50)]), &stats(0, 0), at(0));
        // a +20, b +30 in 10 s: 5/s in all.
        history.record("main", c(&[("a", 120), ("b", 80)]), &stats(0, 0), at(10));
        // b stopped (its row gone), c started with 1,000 already counted: only a's +10 counts.
        history.record("main", c(&[("a", 130), ("c", 1000)]), &stats(0, 0), at(20));
        // c goes on: a +10, c +40.
        history.record("main", c(&[("a", 140), ("c", 1040)]), &stats(0, 0), at(30));
        let rates: Vec<Option<f64>> = history.points("main").iter().map(|p| p.delivered_per_sec).collect();
        assert_eq!(rates, [None, Some(5.0), Some(1.0), Some(5.0)]);
    }
}
