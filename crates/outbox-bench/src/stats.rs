//! Latency summaries (HdrHistogram, microsecond resolution, 3 significant digits).

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// The mean, in ms, of what a relay's duration histogram recorded between two readings, each
/// `(count, sum in seconds)` (0 when nothing was recorded).
pub(crate) fn mean_ms_between(before: (u64, f64), after: (u64, f64)) -> f64 {
    let n = after.0.saturating_sub(before.0);
    if n == 0 {
        return 0.0;
    }
    (after.1 - before.1).max(0.0) * 1e3 / n as f64
}

/// Percentiles of a set of durations, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub count: u64,
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// Collects durations.
#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    /// `None` only if HdrHistogram rejected our constant bounds (it does not).
    h: Option<Histogram<u64>>,
}

impl Recorder {
    pub(crate) fn new() -> Recorder {
        // 1 µs to 1 hour, 3 significant digits.
        Recorder { h: Histogram::new_with_bounds(1, 3_600_000_000, 3).ok() }
    }

    pub(crate) fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
        if let Some(h) = &mut self.h {
            h.saturating_record(us);
        }
    }

    pub(crate) fn add(&mut self, other: &Recorder) {
        if let (Some(h), Some(o)) = (&mut self.h, &other.h) {
            let _ = h.add(o);
        }
    }

    pub(crate) fn summary(&self) -> Summary {
        let ms = |us: u64| us as f64 / 1000.0;
        let Some(h) = self.h.as_ref().filter(|h| !h.is_empty()) else { return Summary::default() };
        Summary {
            count: h.len(),
            mean_ms: h.mean() / 1000.0,
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_uniform_set() {
        let mut r = Recorder::new();
        for i in 1..=1000 {
            r.record(Duration::from_micros(i * 10));
        }
        let s = r.summary();
        assert_eq!(s.count, 1000);
        assert!((s.p50_ms - 5.0).abs() < 0.01, "{s:?}");
        assert!((s.p99_ms - 9.9).abs() < 0.02, "{s:?}");
        assert!((s.max_ms - 10.0).abs() < 0.02, "{s:?}");
    }

    #[test]
    fn empty_is_zero() {
        assert_eq!(Recorder::new().summary(), Summary::default());
    }
}
