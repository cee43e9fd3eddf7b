//! The endpoint's log: each kind of event (refused requests, connection pressure, store
//! failures) writes at most one line per interval, counted by reason, with the first example.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The endpoint's log lines, each kind rate-limited.
pub(crate) struct EndpointLog {
    /// Requests refused (4xx): bad tokens, unknown deliveries, malformed requests.
    pub(super) refused: Limited,
    /// Connections refused or closed by the bounds, accept() failures.
    pub(super) pressure: Limited,
    /// ACKs that could not be recorded (store errors).
    pub(super) failed: Limited,
}

impl EndpointLog {
    pub(crate) fn new(interval: Duration) -> Self {
        EndpointLog {
            refused: Limited::new(Level::Warn, "ACK requests refused", interval),
            pressure: Limited::new(Level::Warn, "ACK endpoint under pressure", interval),
            failed: Limited::new(Level::Error, "ACKs could not be recorded", interval),
        }
    }

    /// Writes what was held back: all of it when `force`, else what waited a whole interval.
    pub(super) fn flush(&self, force: bool) {
        for l in [&self.refused, &self.pressure, &self.failed] {
            l.flush(force);
        }
    }
}

#[derive(Clone, Copy)]
enum Level {
    Warn,
    Error,
}

/// A log line written at most once per `interval`: the first event after a quiet interval is
/// written at once; later ones are counted by reason (a fixed set of texts, nothing from a
/// request) and summed up in one line when the interval has passed.
pub(super) struct Limited {
    level: Level,
    what: &'static str,
    interval: Duration,
    window: Mutex<Window>,
}

#[derive(Default)]
struct Window {
    last_line: Option<Instant>,
    counts: Vec<(&'static str, u64)>,
    example: Option<String>,
}

impl Limited {
    fn new(level: Level, what: &'static str, interval: Duration) -> Self {
        Limited { level, what, interval, window: Mutex::new(Window::default()) }
    }

    /// Counts one event of `reason`; `example` (escaped text) describes it if it is the first
    /// of its line.
    pub(super) fn record(&self, reason: &'static str, example: impl FnOnce() -> String) {
        let mut w = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        match w.counts.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += 1,
            None => w.counts.push((reason, 1)),
        }
        if w.example.is_none() {
            let e = example();
            w.example = Some(if e.is_empty() { reason.to_owned() } else { format!("{reason}: {e}") });
        }
        let now = Instant::now();
        if w.last_line.is_none_or(|t| now.duration_since(t) >= self.interval) {
            self.write(&mut w, now);
        }
    }

    fn flush(&self, force: bool) {
        let mut w = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if !w.counts.is_empty()
            && (force || w.last_line.is_none_or(|t| now.duration_since(t) >= self.interval))
        {
            self.write(&mut w, now);
        }
    }

    fn write(&self, w: &mut Window, now: Instant) {
        let total: u64 = w.counts.iter().map(|(_, n)| n).sum();
        let reasons = w.counts.iter().map(|(r, n)| format!("{r}: {n}")).collect::<Vec<_>>().join(", ");
        let first = w.example.take().unwrap_or_default();
        let since = w.last_line.map(|t| now.duration_since(t));
        w.counts.clear();
        w.last_line = Some(now);
        let period = match since {
            Some(d) if d < self.interval * 10 => format!("last {}s", d.as_secs().max(1)),
            _ => "first in a while".to_owned(),
        };
        match self.level {
            Level::Warn => {
                tracing::warn!(count = total, period = %period, reasons = %reasons, first = %first, "{}", self.what)
            }
            Level::Error => {
                tracing::error!(count = total, period = %period, reasons = %reasons, first = %first, "{}", self.what)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::shown;
    use super::*;

    /// Captures what a `tracing` subscriber writes.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn refusals_are_logged_once_per_interval_escaped_and_counted_by_reason() {
        let out = Capture::default();
        let writer = out.clone();
        let subscriber =
            tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
        tracing::subscriber::with_default(subscriber, || {
            let log = Limited::new(Level::Warn, "ACK requests refused", Duration::from_secs(3600));
            let hostile = "shop\r\n2030-01-01 ERROR forged line\u{1b}[31m";
            for i in 0..1000 {
                let reason = if i % 2 == 0 { "malformed token" } else { "unknown store" };
                log.record(reason, || shown(hostile));
            }
            log.flush(false);
            let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
            assert_eq!(text.lines().count(), 1, "{text}");
            assert!(text.contains("count=1 ") && text.contains("forged line\\u{1b}[31m"), "{text}");
            log.flush(true);
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        let last = text.lines().last().unwrap();
        assert!(
            last.contains("count=999")
                && last.contains("malformed token: 499")
                && last.contains("unknown store: 500"),
            "{last}"
        );
        assert!(!text.contains('\r') && !text.contains('\u{1b}'), "{text:?}");
        assert!(!text.lines().any(|l| l.starts_with("2030")), "{text}");
    }
}
