//! A circuit breaker per destination.
//!
//! Closed: everything is published. After `failure_threshold` consecutive `Unavailable`
//! outcomes it opens: nothing is published to the destination (claimed messages are put back,
//! attempts untouched) until the cool-down ends; then it is half-open and lets one probe
//! message through. A delivered probe closes it (the backlog drains at full speed); a failed
//! probe re-opens it with a doubled cool-down, up to `max_cooldown`.

use std::time::Duration;

use tokio::time::Instant;

use serde::{Deserialize, Serialize};

/// Breaker settings for one destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    /// Consecutive unavailable outcomes that open the breaker. Defaults to 3.
    pub failure_threshold: u32,
    /// First cool-down. Defaults to 1 s.
    #[serde(with = "outbox_core::duration")]
    pub cooldown: Duration,
    /// Longest cool-down. Defaults to 30 s.
    #[serde(with = "outbox_core::duration")]
    pub max_cooldown: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_threshold: 3,
            cooldown: Duration::from_secs(1),
            max_cooldown: Duration::from_secs(30),
        }
    }
}

/// What the breaker allows right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permit {
    /// Publish everything.
    All,
    /// Publish one message (the probe); defer the rest.
    Probe,
    /// Publish nothing; try again after this long.
    Wait(Duration),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant, cooldown: Duration },
    HalfOpen { cooldown: Duration, probing: bool },
}

/// The breaker of one destination.
#[derive(Debug)]
pub(crate) struct Breaker {
    cfg: BreakerConfig,
    state: State,
}

impl Breaker {
    pub(crate) fn new(cfg: BreakerConfig) -> Self {
        Breaker { cfg, state: State::Closed { failures: 0 } }
    }

    /// What may be published now.
    pub(crate) fn permit(&mut self, now: Instant) -> Permit {
        match self.state.clone() {
            State::Closed { .. } => Permit::All,
            State::Open { until, cooldown } => {
                if now >= until {
                    self.state = State::HalfOpen { cooldown, probing: true };
                    Permit::Probe
                } else {
                    Permit::Wait(until - now)
                }
            }
            State::HalfOpen { cooldown, probing } => {
                if probing {
                    Permit::Wait(cooldown.min(Duration::from_secs(1)))
                } else {
                    self.state = State::HalfOpen { cooldown, probing: true };
                    Permit::Probe
                }
            }
        }
    }

    /// Records a delivery (or any answer that proves the destination is up).
    pub(crate) fn on_success(&mut self) {
        self.state = State::Closed { failures: 0 };
    }

    /// Records an unavailable outcome. Returns true when this opened the breaker.
    pub(crate) fn on_unavailable(&mut self, now: Instant) -> bool {
        match self.state.clone() {
            State::Closed { failures } => {
                let failures = failures + 1;
                if failures >= self.cfg.failure_threshold.max(1) {
                    self.state = State::Open { until: now + self.cfg.cooldown, cooldown: self.cfg.cooldown };
                    true
                } else {
                    self.state = State::Closed { failures };
                    false
                }
            }
            State::HalfOpen { cooldown, .. } => {
                let next = (cooldown * 2).min(self.cfg.max_cooldown);
                self.state = State::Open { until: now + next, cooldown: next };
                false
            }
            State::Open { .. } => false,
        }
    }

    /// True when not closed.
    pub(crate) fn is_open(&self) -> bool {
        !matches!(self.state, State::Closed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_probes_then_closes() {
        let t0 = Instant::now();
        let mut b = Breaker::new(BreakerConfig::default());
        assert_eq!(b.permit(t0), Permit::All);
        assert!(!b.on_unavailable(t0));
        assert!(!b.on_unavailable(t0));
        assert!(b.on_unavailable(t0), "third consecutive failure opens");
        assert_eq!(b.permit(t0 + Duration::from_millis(500)), Permit::Wait(Duration::from_millis(500)));
        assert_eq!(b.permit(t0 + Duration::from_secs(1)), Permit::Probe);
        // While the probe is out, nothing else goes.
        assert!(matches!(b.permit(t0 + Duration::from_secs(1)), Permit::Wait(_)));
        // Probe fails: open again with a doubled cool-down.
        b.on_unavailable(t0 + Duration::from_secs(1));
        assert_eq!(b.permit(t0 + Duration::from_secs(2)), Permit::Wait(Duration::from_secs(1)));
        assert_eq!(b.permit(t0 + Duration::from_secs(3)), Permit::Probe);
        b.on_success();
        assert_eq!(b.permit(t0 + Duration::from_secs(3)), Permit::All);
        assert!(!b.is_open());
    }

    #[test]
    fn success_resets_the_count() {
        let t0 = Instant::now();
        let mut b = Breaker::new(BreakerConfig::default());
        b.on_unavailable(t0);
        b.on_unavailable(t0);
        b.on_success();
        assert!(!b.on_unavailable(t0));
        assert_eq!(b.permit(t0), Permit::All);
    }

    #[test]
    fn cooldown_is_capped() {
        let cfg = BreakerConfig {
            failure_threshold: 1,
            cooldown: Duration::from_secs(20),
            max_cooldown: Duration::from_secs(30),
        };
        let mut b = Breaker::new(cfg);
        let t0 = Instant::now();
        b.on_unavailable(t0);
        let t1 = t0 + Duration::from_secs(20);
        assert_eq!(b.permit(t1), Permit::Probe);
        b.on_unavailable(t1);
        assert_eq!(b.permit(t1), Permit::Wait(Duration::from_secs(30)));
    }
}
