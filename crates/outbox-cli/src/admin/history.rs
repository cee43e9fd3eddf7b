//! Throughput and backlog over the last hour, per store: one point per backlog sample
//! (`[admin] backlog_interval`), kept in memory (a restart starts a new hour). The backlog
//! comes from the sample's database counts, the throughput from the relay's counters between
//! two samples.

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
    #[serde(skip)]
    counters: (u64, u64),
}

/// The points of every store.
#[derive(Debug, Default)]
pub(super) struct History(Mutex<BTreeMap<String, VecDeque<Point>>>);

impl History {
    /// Adds a point for `store` from its sampled counts and its relay's counters.
    pub(super) fn record(&self, store: &str, relay: &RelayStats, stats: &Stats, at: DateTime<Utc>) {
        let counters = (RelayStats::get(&relay.delivered), RelayStats::get(&relay.failed));
        let mut all = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let points = all.entry(store.to_owned()).or_default();
        let rate = |prev: &Point, now: u64, before: u64| {
            let secs = (at - prev.at).num_milliseconds() as f64 / 1000.0;
            (secs > 0.0).then(|| now.saturating_sub(before) as f64 / secs)
        };
        let (delivered_per_sec, failed_per_sec) = match points.back() {
            Some(prev) => (rate(prev, counters.0, prev.counters.0), rate(prev, counters.1, prev.counters.1)),
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
        history.record("main", &relay, &stats(10, 0), t0);
        relay.delivered.fetch_add(30, Ordering::Relaxed);
        relay.failed.fetch_add(3, Ordering::Relaxed);
        history.record("main", &relay, &stats(4, 3), t0 + chrono::Duration::seconds(15));
        let p = history.points("main");
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].delivered_per_sec, p[1].delivered_per_sec), (None, Some(2.0)));
        assert_eq!((p[1].failed_per_sec, p[1].pending, p[1].failed), (Some(0.2), 4, 3));
        // Two hours later the first points are outside the window.
        history.record("main", &relay, &stats(0, 3), Utc::now());
        assert_eq!(history.points("main").len(), 1);
        assert!(history.points("other").is_empty());
    }
}
