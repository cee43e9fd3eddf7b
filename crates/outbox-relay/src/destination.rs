//! Destinations: what the user configures ([`Destination`]) and what the relay keeps for each
//! while it runs (its circuit breaker).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use outbox_core::{RetryPolicy, Transport};

use crate::breaker::{Breaker, BreakerConfig, Permit};
use crate::config::AckConfig;
use crate::stats::DestinationFlags;

/// A named destination: a transport, its retry policy and breaker settings.
#[derive(Debug, Clone)]
pub struct Destination {
    /// Name used in routes and in `outbox_delivery.destination`.
    pub name: String,
    /// The transport.
    pub transport: Arc<dyn Transport>,
    /// Retry policy. Defaults to [`RetryPolicy::default`].
    pub retry: RetryPolicy,
    /// Circuit breaker. Defaults to [`BreakerConfig::default`].
    pub breaker: BreakerConfig,
    /// Largest payload accepted, in bytes (the smaller of this and the transport's own limit
    /// applies). Defaults to none.
    pub max_payload_bytes: Option<usize>,
    /// Require the consumer's ACK. Defaults to none (broker confirmation is enough).
    pub ack: Option<AckConfig>,
}

impl Destination {
    /// A destination with default policies.
    pub fn new(name: impl Into<String>, transport: Arc<dyn Transport>) -> Self {
        Destination {
            name: name.into(),
            transport,
            retry: RetryPolicy::default(),
            breaker: BreakerConfig::default(),
            max_payload_bytes: None,
            ack: None,
        }
    }

    /// Requires the consumer's ACK.
    #[must_use]
    pub fn ack(mut self, ack: AckConfig) -> Self {
        self.ack = Some(ack);
        self
    }

    /// Sets the retry policy.
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the breaker settings.
    #[must_use]
    pub fn breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = breaker;
        self
    }

    /// Sets the payload limit.
    #[must_use]
    pub fn max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = Some(n);
        self
    }
}

#[derive(Debug)]
pub(crate) struct DestRuntime {
    pub(crate) d: Destination,
    pub(crate) breaker: Mutex<Breaker>,
    /// Probes sent while the circuit was open: the probe rotates over the waiting messages,
    /// so one message the broker chokes on cannot be the only probe forever.
    pub(crate) probes: AtomicU64,
    /// Its circuit state and whether an operator paused it for every relay on the store
    /// (`outbox_destination_pause`, read by the claim loop about once a second: its messages
    /// are then held, no attempt spent); shared with the relay's stats.
    pub(crate) flags: Arc<DestinationFlags>,
}

/// How long a paused destination's messages wait before they are looked at again.
pub(crate) const PAUSED_WAIT: Duration = Duration::from_secs(5);

impl DestRuntime {
    pub(crate) fn payload_limit(&self) -> Option<usize> {
        match (self.d.max_payload_bytes, self.d.transport.max_payload_bytes()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether its circuit breaker is open or half-open.
    pub(crate) fn circuit_open(&self) -> bool {
        self.breaker.lock().map(|b| b.is_open()).unwrap_or(false)
    }

    pub(crate) fn permit(&self, now: Instant) -> Permit {
        if self.flags.paused.load(Ordering::Relaxed) {
            return Permit::Wait(PAUSED_WAIT);
        }
        match self.breaker.lock() {
            Ok(mut b) => b.permit(now),
            Err(_) => Permit::All,
        }
    }
}
