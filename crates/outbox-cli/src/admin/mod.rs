//! The admin listener of `outbox relay` (`[admin]`): health probes, Prometheus metrics and the
//! JSON API under `/api/v1` (docs/admin-api.md). Served by the same hardened connection loop
//! as the ACK endpoint (connection limit, head and request timeouts), so a hostile client
//! cannot starve it; every body, page and filter is bounded; errors are problem+json.

mod api;
mod auth;
mod metrics;
mod problem;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use outbox_core::Transport;
use outbox_relay::RelayStats;
use outbox_store::AnyOutbox;
use tokio_util::sync::CancellationToken;

pub(crate) use auth::Tokens;

/// Largest request body (the actions take small JSON documents or none).
const MAX_BODY: usize = 64 * 1024;

/// One store the relay serves, with its relay's counters.
#[derive(Clone)]
pub(crate) struct StoreHandle {
    pub(crate) name: String,
    pub(crate) outbox: AnyOutbox,
    pub(crate) owner: String,
    pub(crate) stats: Arc<RelayStats>,
}

/// One destination, for the readiness probe.
#[derive(Clone)]
pub(crate) struct DestinationHandle {
    pub(crate) name: String,
    pub(crate) transport: Arc<dyn Transport>,
}

/// What every handler shares. Cheap to clone.
#[derive(Clone)]
pub(crate) struct AdminState {
    stores: Arc<Vec<StoreHandle>>,
    destinations: Arc<Vec<DestinationHandle>>,
    tokens: Option<Tokens>,
    metrics: Arc<metrics::Metrics>,
    probe_timeout: Duration,
}

impl AdminState {
    /// The state for these stores and destinations; `tokens` as configured (`None`: open,
    /// loopback only, checked when the configuration is loaded).
    pub(crate) fn new(
        stores: Vec<StoreHandle>,
        destinations: Vec<DestinationHandle>,
        tokens: Option<Tokens>,
    ) -> Self {
        AdminState {
            stores: Arc::new(stores),
            destinations: Arc::new(destinations),
            tokens,
            metrics: Arc::new(metrics::Metrics::new()),
            probe_timeout: Duration::from_secs(3),
        }
    }

    /// Whether requests need a token.
    pub(crate) fn authenticated(&self) -> bool {
        self.tokens.is_some()
    }

    fn store(&self, name: &str) -> Result<&StoreHandle, problem::Problem> {
        self.stores
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| problem::Problem::not_found(format!("no store named {name:?}")))
    }

    /// Reads the backlog of every store into the metrics every `interval` until `stop`.
    pub(crate) async fn sample_backlog(self, interval: Duration, stop: CancellationToken) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => self.metrics.sample(&self.stores).await,
            }
        }
    }
}

/// The router (tested without a server through `tower::ServiceExt::oneshot`).
pub(crate) fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(api::healthz))
        .route("/readyz", get(api::readyz))
        .route("/metrics", get(metrics::render))
        .route("/api/v1/stats", get(api::stats))
        .route("/api/v1/relays", get(api::relays))
        .route("/api/v1/stores/{store}/messages", get(api::list))
        .route("/api/v1/stores/{store}/messages/{id}", get(api::show))
        .route("/api/v1/stores/{store}/messages/{id}/retry", post(api::retry))
        .route("/api/v1/stores/{store}/messages/{id}/cancel", post(api::cancel))
        .fallback(api::not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::require))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

#[cfg(test)]
mod tests;
