//! `GET /metrics` in the Prometheus text format, rendered by `metrics-exporter-prometheus` from
//! a recorder local to the listener (no process-wide state, so tests run side by side).
//!
//! The relay counters are read from each relay's atomics at scrape time (cheap). The backlog
//! gauges come from the database on a bounded schedule (`[admin] backlog_interval`), never per
//! scrape, so a scraper cannot load the database. Labels are low-cardinality only: store,
//! status, destination; never a message id, key or topic.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Mutex;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use outbox_core::text::printable;
use outbox_relay::{Histogram, RelayStats, BUCKETS};
use outbox_store::MessageAdmin;

use super::history::History;
use super::{AdminState, StoreHandle};

/// The listener's recorder and what the last backlog sample labelled.
pub(super) struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// (store, destination, status) labels set by the previous sample: set to 0 when gone.
    seen: Mutex<BTreeSet<(String, String, String)>>,
    /// The samples of the last hour.
    pub(super) history: History,
}

impl Metrics {
    pub(super) fn new() -> Self {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        Metrics { recorder, handle, seen: Mutex::new(BTreeSet::new()), history: History::default() }
    }

    /// Reads every store's counts into the backlog gauges (a store that fails keeps its last
    /// values and counts an error).
    pub(super) async fn sample(&self, stores: &[StoreHandle]) {
        let mut now_seen = BTreeSet::new();
        for s in stores {
            // Both reads on one connection: a store of a crowded budget keeps none between its
            // turns, and each statement on its own would open one (five per store and sample).
            let (stats, others) = match s.outbox.backlog().await {
                Ok(read) => read,
                Err(e) => {
                    tracing::warn!(store = %s.name, error = %printable(&e.to_string(), 300), "Backlog sample failed");
                    metrics::with_local_recorder(&self.recorder, || {
                        metrics::counter!("outbox_backlog_sample_errors_total", "store" => s.name.clone())
                            .increment(1);
                    });
                    continue;
                }
            };
            // The other relays on the store (their rows in outbox_relay); without them the
            // throughput is this process's alone.
            let others = others.unwrap_or_else(|e| {
                tracing::debug!(store = %s.name, error = %printable(&e.to_string(), 300), "Could not read the relays");
                Vec::new()
            });
            let counters = super::history::counters(&s.owner, &s.stats, &others);
            self.history.record(&s.name, counters, &stats, chrono::Utc::now());
            metrics::with_local_recorder(&self.recorder, || {
                for c in &stats.by_status {
                    metrics::gauge!("outbox_messages", "store" => s.name.clone(), "status" => c.status.as_str())
                        .set(c.count as f64);
                }
                for d in &stats.by_destination {
                    let key = (s.name.clone(), d.destination.clone(), d.status.as_str().to_owned());
                    metrics::gauge!(
                        "outbox_deliveries",
                        "store" => key.0.clone(), "destination" => key.1.clone(), "status" => key.2.clone()
                    )
                    .set(d.count as f64);
                    now_seen.insert(key);
                }
                metrics::gauge!("outbox_oldest_pending_age_seconds", "store" => s.name.clone())
                    .set(stats.oldest_pending_age.map_or(0.0, |d| d.as_secs_f64()));
            });
        }
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        metrics::with_local_recorder(&self.recorder, || {
            for gone in seen.difference(&now_seen) {
                metrics::gauge!(
                    "outbox_deliveries",
                    "store" => gone.0.clone(), "destination" => gone.1.clone(), "status" => gone.2.clone()
                )
                .set(0.0);
            }
        });
        *seen = now_seen;
    }

    /// The relays' counters and destination states, and the pools, as they are now.
    fn record_counters(&self, stores: &[StoreHandle]) {
        metrics::with_local_recorder(&self.recorder, || {
            for s in stores {
                let st = &s.stats;
                for (name, d) in st.destinations() {
                    let flag = |b: bool| if b { 1.0 } else { 0.0 };
                    metrics::gauge!(
                        "outbox_destination_circuit_open", "store" => s.name.clone(), "destination" => name.clone()
                    )
                    .set(flag(d.circuit_open));
                    metrics::gauge!("outbox_destination_paused", "store" => s.name.clone(), "destination" => name)
                        .set(flag(d.paused));
                }
                let (size, idle) = s.outbox.pool_connections();
                metrics::gauge!("outbox_pool_connections", "store" => s.name.clone(), "state" => "idle")
                    .set(idle as f64);
                metrics::gauge!("outbox_pool_connections", "store" => s.name.clone(), "state" => "in_use")
                    .set((size as usize).saturating_sub(idle) as f64);
                if let Some(n) = s.outbox.connections_opened() {
                    metrics::counter!("outbox_pool_connections_opened_total", "store" => s.name.clone())
                        .absolute(n);
                }
                // The shares seed 003 asks for: claimed on a wake-up rather than by the scan
                // (the fast path), and failed for good among the messages finished.
                let claimed = RelayStats::get(&st.claimed);
                let on_scan = RelayStats::get(&st.claimed_on_scan);
                let fast = if claimed == 0 { 1.0 } else { 1.0 - on_scan as f64 / claimed as f64 };
                metrics::gauge!("outbox_fast_path_ratio", "store" => s.name.clone()).set(fast);
                let failed = RelayStats::get(&st.failed);
                let finished = RelayStats::get(&st.delivered) + failed;
                let exhausted = if finished == 0 { 0.0 } else { failed as f64 / finished as f64 };
                metrics::gauge!("outbox_failed_ratio", "store" => s.name.clone()).set(exhausted);
                let counters: [(&'static str, &std::sync::atomic::AtomicU64); 14] = [
                    ("outbox_claims_total", &st.claims),
                    ("outbox_wake_ups_without_claim_total", &st.wake_ups_held),
                    ("outbox_messages_claimed_total", &st.claimed),
                    ("outbox_messages_claimed_on_scan_total", &st.claimed_on_scan),
                    ("outbox_messages_runs_continued_total", &st.runs_continued),
                    ("outbox_claims_beside_total", &st.claims_beside),
                    ("outbox_lane_looks_total", &st.lane_looks),
                    ("outbox_lane_left_total", &st.lane_left),
                    ("outbox_envelopes_published_total", &st.published),
                    ("outbox_deliveries_confirmed_total", &st.delivered),
                    ("outbox_attempts_retried_total", &st.retried),
                    ("outbox_messages_failed_total", &st.failed),
                    ("outbox_deliveries_deferred_total", &st.deferred),
                    ("outbox_store_errors_total", &st.store_errors),
                ];
                for (name, c) in counters {
                    metrics::counter!(name, "store" => s.name.clone()).absolute(RelayStats::get(c));
                }
                // Where the claims go: by why each ran, and how many found nothing.
                for k in st.claim_kinds() {
                    let kind = k.kind.name();
                    metrics::counter!("outbox_claims_by_kind_total", "store" => s.name.clone(), "kind" => kind)
                        .absolute(k.claims);
                    metrics::counter!("outbox_empty_claims_total", "store" => s.name.clone(), "kind" => kind)
                        .absolute(k.empty);
                }
            }
        });
    }

    /// The shared budget of batches in flight (`relay.total_in_flight_batches`), as it is now.
    fn record_budget(&self, b: &outbox_relay::Budget) {
        metrics::with_local_recorder(&self.recorder, || {
            metrics::gauge!("outbox_budget_shares").set(b.size() as f64);
            metrics::gauge!("outbox_budget_shares_taken", "state" => "in_use").set(b.in_use() as f64);
            metrics::gauge!("outbox_budget_shares_taken", "state" => "parked").set(b.parked() as f64);
            metrics::counter!("outbox_budget_turns_total").absolute(b.turns());
            metrics::counter!("outbox_budget_parked_reused_total").absolute(b.reused());
            metrics::counter!("outbox_budget_parked_given_back_total").absolute(b.evicted());
            metrics::gauge!("outbox_budget_wait_seconds_total").set(b.waited().as_secs_f64());
        });
    }
}

/// Which histogram of a relay.
type Which = fn(&RelayStats) -> &Histogram;

/// The relays' histograms: (name, help, which one).
const HISTOGRAMS: [(&str, &str, Which); 3] = [
    (
        "outbox_commit_to_publish_seconds",
        "From a message's created_at to its delivery confirmed by a destination.",
        |s| &s.commit_to_publish,
    ),
    ("outbox_claim_duration_seconds", "Duration of each claim query.", |s| &s.claim_duration),
    ("outbox_settle_duration_seconds", "Duration of each settlement write.", |s| &s.settle_duration),
];

/// A label value escaped for the exposition format (backslash, double quote, line feed).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The relays' histograms in the exposition format, written here: the exporter records
/// single observations, and the relay keeps its buckets itself (lock-free, always on).
fn histograms(stores: &[StoreHandle]) -> String {
    let mut out = String::new();
    for (name, help, which) in HISTOGRAMS {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for s in stores {
            let h = which(&s.stats).snapshot();
            let store = label(&s.name);
            for (bound, n) in BUCKETS.iter().zip(&h.cumulative) {
                let _ = writeln!(out, "{name}_bucket{{store=\"{store}\",le=\"{bound}\"}} {n}");
            }
            let _ = writeln!(out, "{name}_bucket{{store=\"{store}\",le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "{name}_sum{{store=\"{store}\"}} {}", h.sum_secs);
            let _ = writeln!(out, "{name}_count{{store=\"{store}\"}} {}", h.count);
        }
    }
    out
}

/// The exposition text.
pub(super) async fn render(State(state): State<AdminState>) -> Response {
    state.metrics.record_counters(&state.stores);
    if let Some(b) = &state.budget {
        state.metrics.record_budget(b);
    }
    let mut text = state.metrics.handle.render();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&histograms(&state.stores));
    let mut r = text.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    r
}
