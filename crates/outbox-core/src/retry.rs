//! Retry arithmetic: exponential backoff with jitter, capped, with a maximum number of attempts.
//! Pure: the caller supplies the random number, so schedules are testable.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a destination retries a message whose publication failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Attempts before the message becomes `failed` (1 = no retry). Defaults to 12.
    pub max_attempts: u32,
    /// Delay after the first failure. Defaults to 1 s.
    #[serde(with = "crate::duration")]
    pub initial: Duration,
    /// Longest delay between attempts. Defaults to 10 min.
    #[serde(with = "crate::duration")]
    pub max_delay: Duration,
    /// Growth factor per attempt. Defaults to 2.
    pub multiplier: f64,
    /// Share of each delay that is randomized (0 = none, 1 = full jitter). Defaults to 0.5
    /// ("equal jitter": never less than half the nominal delay).
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 12,
            initial: Duration::from_secs(1),
            max_delay: Duration::from_secs(600),
            multiplier: 2.0,
            jitter: 0.5,
        }
    }
}

impl RetryPolicy {
    /// The delay before the next attempt after `failures` failed attempts (1 = after the first
    /// failure). `random` is uniform in `[0, 1)`.
    pub fn delay(&self, failures: u32, random: f64) -> Duration {
        let exp = failures.saturating_sub(1).min(64) as i32;
        let nominal = (self.initial.as_secs_f64() * self.multiplier.max(1.0).powi(exp))
            .min(self.max_delay.as_secs_f64())
            .max(0.0);
        let jitter = self.jitter.clamp(0.0, 1.0);
        let random = random.clamp(0.0, 1.0);
        let secs = nominal * (1.0 - jitter) + nominal * jitter * random;
        Duration::from_secs_f64(secs)
    }

    /// True when `failures` failed attempts exhaust the policy (or the per-message override).
    pub fn exhausted(&self, failures: u32, per_message_max: Option<u32>) -> bool {
        failures >= per_message_max.unwrap_or(self.max_attempts).max(1)
    }

    /// Checks the values, naming the wrong one.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_attempts == 0 {
            return Err("max_attempts must be at least 1".into());
        }
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            return Err(format!("multiplier must be a number >= 1, got {}", self.multiplier));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(format!("jitter must be between 0 and 1, got {}", self.jitter));
        }
        if self.initial > self.max_delay {
            return Err("initial must not exceed max_delay".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_up_to_the_cap() {
        let p = RetryPolicy { jitter: 0.0, ..RetryPolicy::default() };
        assert_eq!(p.delay(1, 0.3), Duration::from_secs(1));
        assert_eq!(p.delay(2, 0.3), Duration::from_secs(2));
        assert_eq!(p.delay(5, 0.3), Duration::from_secs(16));
        assert_eq!(p.delay(30, 0.3), Duration::from_secs(600));
        assert_eq!(p.delay(u32::MAX, 0.3), Duration::from_secs(600));
    }

    #[test]
    fn equal_jitter_stays_between_half_and_full() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay(3, 0.0), Duration::from_secs(2));
        assert_eq!(p.delay(3, 0.999_999).as_millis(), 3_999);
    }

    #[test]
    fn exhaustion_honours_the_per_message_override() {
        let p = RetryPolicy { max_attempts: 3, ..RetryPolicy::default() };
        assert!(!p.exhausted(2, None));
        assert!(p.exhausted(3, None));
        assert!(p.exhausted(1, Some(1)));
        assert!(!p.exhausted(3, Some(5)));
    }

    #[test]
    fn validation_names_the_problem() {
        let bad = RetryPolicy { max_attempts: 0, ..RetryPolicy::default() };
        assert!(bad.validate().unwrap_err().contains("max_attempts"));
        let bad = RetryPolicy { jitter: 2.0, ..RetryPolicy::default() };
        assert!(bad.validate().unwrap_err().contains("jitter"));
        assert!(RetryPolicy::default().validate().is_ok());
    }
}
