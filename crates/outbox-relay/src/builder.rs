//! Building a [`Relay`]: validation of the configuration, destinations and routes.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use outbox_store::{CommitSignal, RelayStore};

use crate::alert::AlertHook;
use crate::breaker::Breaker;
use crate::budget::Budget;
use crate::config::RelayConfig;
use crate::destination::{DestRuntime, Destination};
use crate::relay::{Health, Inner, Relay};
use crate::router::{validate_pattern, Route, Router};
use crate::stats::DestinationFlags;
use crate::stats::RelayStats;

/// A configuration mistake found by [`RelayBuilder::build`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// A route names a destination that was not added.
    #[error("route {pattern:?} names unknown destination {destination:?}")]
    UnknownDestination {
        /// The route's pattern.
        pattern: String,
        /// The missing destination.
        destination: String,
    },
    /// Something else is wrong; the message says what.
    #[error("invalid relay configuration: {0}")]
    Invalid(String),
}

/// Builds a [`Relay`].
#[derive(Debug)]
pub struct RelayBuilder<S: RelayStore> {
    pub(crate) store: S,
    pub(crate) signal: CommitSignal,
    pub(crate) config: RelayConfig,
    pub(crate) destinations: Vec<Destination>,
    pub(crate) routes: Vec<Route>,
    pub(crate) alert: Arc<dyn AlertHook>,
    pub(crate) budget: Option<Budget>,
}

impl<S: RelayStore> RelayBuilder<S> {
    /// Sets the tuning. Defaults to [`RelayConfig::default`].
    #[must_use]
    pub fn config(mut self, config: RelayConfig) -> Self {
        self.config = config;
        self
    }

    /// Shares `budget` with the other relays given it: together they have at most its size of
    /// batches in flight (see [`Budget`]). Defaults to none (only `max_in_flight_batches`).
    #[must_use]
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Adds a destination.
    #[must_use]
    pub fn destination(mut self, d: Destination) -> Self {
        self.destinations.push(d);
        self
    }

    /// Adds a route.
    #[must_use]
    pub fn route(mut self, r: Route) -> Self {
        self.routes.push(r);
        self
    }

    /// Sets the alert hook. Defaults to [`LogAlert`](crate::LogAlert).
    #[must_use]
    pub fn alert(mut self, hook: Arc<dyn AlertHook>) -> Self {
        self.alert = hook;
        self
    }

    /// Validates and builds.
    pub fn build(self) -> Result<Relay<S>, BuildError> {
        let c = &self.config;
        if c.batch_size == 0 || c.batch_size > 10_000 {
            return Err(BuildError::Invalid(format!("batch_size must be 1..=10000, got {}", c.batch_size)));
        }
        if c.max_run == 0 {
            return Err(BuildError::Invalid("max_run must be at least 1".into()));
        }
        if c.max_in_flight_batches == 0 {
            return Err(BuildError::Invalid("max_in_flight_batches must be at least 1".into()));
        }
        if c.publish_timeout >= c.lease {
            return Err(BuildError::Invalid(format!(
                "publish_timeout ({:?}) must be shorter than lease ({:?}), or a slow publish would outlive its lease",
                c.publish_timeout, c.lease
            )));
        }
        if c.idle_interval.is_zero() {
            return Err(BuildError::Invalid("idle_interval must be positive".into()));
        }
        if c.active_scan_interval.is_zero() {
            return Err(BuildError::Invalid("active_scan_interval must be positive".into()));
        }
        outbox_core::text::check_name(&c.owner, outbox_core::limits::OWNER)
            .map_err(|e| BuildError::Invalid(format!("owner {e}")))?;
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, d) in self.destinations.iter().enumerate() {
            outbox_core::text::check_name(&d.name, outbox_core::limits::DESTINATION)
                .map_err(|e| BuildError::Invalid(format!("destination name {e}")))?;
            if index.insert(d.name.as_str(), i).is_some() {
                return Err(BuildError::Invalid(format!("destination {:?} is defined twice", d.name)));
            }
            d.retry
                .validate()
                .map_err(|e| BuildError::Invalid(format!("destination {:?}: retry: {e}", d.name)))?;
        }
        let mut routes = Vec::new();
        for r in &self.routes {
            validate_pattern(&r.pattern).map_err(BuildError::Invalid)?;
            if r.destinations.is_empty() {
                return Err(BuildError::Invalid(format!("route {:?} has no destinations", r.pattern)));
            }
            let mut idx = Vec::new();
            for name in &r.destinations {
                let i = index.get(name.as_str()).ok_or_else(|| BuildError::UnknownDestination {
                    pattern: r.pattern.clone(),
                    destination: name.clone(),
                })?;
                idx.push(*i);
            }
            routes.push((r.pattern.clone(), idx));
        }
        let flags: Vec<_> = self
            .destinations
            .iter()
            .map(|d| (d.name.clone(), Arc::new(DestinationFlags::default())))
            .collect();
        let dests = self
            .destinations
            .into_iter()
            .zip(&flags)
            .map(|(d, (_, flags))| DestRuntime {
                breaker: Mutex::new(Breaker::new(d.breaker.clone())),
                probes: AtomicU64::new(0),
                flags: flags.clone(),
                d,
            })
            .collect();
        let stats = Arc::new(RelayStats { destinations: flags, ..RelayStats::default() });
        let member = self.budget.as_ref().map(crate::Budget::join);
        Ok(Relay {
            inner: Arc::new(Inner {
                store: self.store,
                signal: self.signal,
                cfg: self.config,
                dests,
                router: Router::new(routes),
                alert: self.alert,
                budget: self.budget,
                shares_held: Default::default(),
                member,
                parked_changed: Default::default(),
                chains: Default::default(),
                stats,
                health: Mutex::new(Health::default()),
            }),
        })
    }
}
