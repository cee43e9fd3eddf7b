//! How long an idle relay waits before it looks for due messages again.
//!
//! On PostgreSQL every commit that adds a message wakes an idle relay (`NOTIFY`), and the
//! library wakes its in-process relay after its own commits, so the scan every
//! `idle_interval` is only the safety net. MySQL/MariaDB have no such channel: a message that
//! another process commits (a service in another language writing the table, the daemon's usual
//! case) is found by the idle relay's next look, half an `idle_interval` later on average
//! (about 0.5 s by default, measured at 0.7-0.8 s p50 beside a busy drain). Looking more often
//! all the time would make every quiet store pay for it. So the pace follows the traffic:
//! during [`ACTIVE_WINDOW`] after a claim found messages the relay looks every
//! `active_scan_interval`, then every `idle_interval` again. A look is one read of the due
//! index on the keeper's connection, which already exists (no pool connection, no write). A
//! claim that a look started and that found nothing (the row the look saw is held back, locked,
//! or taken by another relay) ends the quicker looks, so such a row costs one claim, not one per
//! look; the next claim that finds messages starts them again.

use std::time::Duration;

use tokio::time::Instant;

/// How long after a claim that found messages the relay keeps looking every
/// `active_scan_interval`.
pub(crate) const ACTIVE_WINDOW: Duration = Duration::from_secs(10);

/// The wait between two looks of an idle relay (see the module).
#[derive(Debug)]
pub(crate) struct ScanPace {
    idle: Duration,
    active: Duration,
    last_found: Option<Instant>,
}

impl ScanPace {
    /// Waits `idle` at rest, `active` (at most `idle`) after a claim found messages, or always
    /// `idle` when not `quicker` (the store pushes wake-ups, or has no keeper to look with).
    pub(crate) fn new(idle: Duration, active: Duration, quicker: bool) -> ScanPace {
        ScanPace { idle, active: if quicker { active.min(idle) } else { idle }, last_found: None }
    }

    /// A claim found messages at `now`.
    pub(crate) fn found(&mut self, now: Instant) {
        self.last_found = Some(now);
    }

    /// A claim that a quicker look started found nothing (what the look saw is held back, or
    /// another relay took it): back to the idle pace until a claim finds messages again, so
    /// a due row that no claim takes costs one claim, not one per look.
    pub(crate) fn quiet(&mut self) {
        self.last_found = None;
    }

    /// How long to wait, from `now`, before the next look.
    pub(crate) fn wait(&self, now: Instant) -> Duration {
        match self.last_found {
            Some(at) if now.saturating_duration_since(at) < ACTIVE_WINDOW => self.active,
            _ => self.idle,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(1);
    const ACTIVE: Duration = Duration::from_millis(50);

    #[test]
    fn a_quiet_store_waits_the_idle_interval() {
        let now = Instant::now();
        let pace = ScanPace::new(IDLE, ACTIVE, true);
        assert_eq!(pace.wait(now), IDLE);
        assert_eq!(pace.wait(now + Duration::from_secs(3600)), IDLE);
    }

    #[test]
    fn after_messages_it_looks_quicker_for_the_window_then_slows_down() {
        let t0 = Instant::now();
        let mut pace = ScanPace::new(IDLE, ACTIVE, true);
        pace.found(t0);
        assert_eq!(pace.wait(t0), ACTIVE);
        assert_eq!(pace.wait(t0 + ACTIVE_WINDOW - Duration::from_millis(1)), ACTIVE);
        assert_eq!(pace.wait(t0 + ACTIVE_WINDOW), IDLE);
        // Each claim that finds messages opens the window again.
        pace.found(t0 + ACTIVE_WINDOW);
        assert_eq!(pace.wait(t0 + ACTIVE_WINDOW + Duration::from_secs(9)), ACTIVE);
        assert_eq!(pace.wait(t0 + ACTIVE_WINDOW * 2 + Duration::from_millis(1)), IDLE);
    }

    #[test]
    fn a_look_whose_claim_found_nothing_ends_the_quicker_looks() {
        let t0 = Instant::now();
        let mut pace = ScanPace::new(IDLE, ACTIVE, true);
        pace.found(t0);
        assert_eq!(pace.wait(t0), ACTIVE);
        pace.quiet();
        assert_eq!(pace.wait(t0), IDLE);
        pace.found(t0 + IDLE);
        assert_eq!(pace.wait(t0 + IDLE), ACTIVE);
    }

    #[test]
    fn a_store_with_push_or_a_setting_above_the_idle_interval_never_waits_less() {
        let t0 = Instant::now();
        let mut pushed = ScanPace::new(IDLE, ACTIVE, false);
        pushed.found(t0);
        assert_eq!(pushed.wait(t0), IDLE);
        let mut slow = ScanPace::new(IDLE, Duration::from_secs(5), true);
        slow.found(t0);
        assert_eq!(slow.wait(t0), IDLE);
    }

    #[test]
    fn a_clock_read_before_the_find_does_not_underflow() {
        let t0 = Instant::now();
        let mut pace = ScanPace::new(IDLE, ACTIVE, true);
        pace.found(t0 + Duration::from_secs(1));
        assert_eq!(pace.wait(t0), ACTIVE);
    }
}
