//! The admin listener of `outbox relay` (`[admin]`): health probes, Prometheus metrics and the
//! JSON API under `/api/v1` (docs/admin-api.md). Served by the same hardened connection loop
//! as the ACK endpoint (connection limit, head and request timeouts), so a hostile client
//! cannot starve it; every body, page and filter is bounded; errors are problem+json.

mod api;
mod auth;
mod history;
mod metrics;
mod problem;
mod ui;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use outbox_core::Transport;
use outbox_relay::RelayStats;
use outbox_store::AnyOutbox;
use tokio_util::sync::CancellationToken;

pub(crate) use auth::Tokens;

/// Largest request body (the actions take small JSON documents or none).
const MAX_BODY: usize = 64 * 1024;
/// Largest body of an edit-and-resend (it may carry a payload).
const MAX_RESEND_BODY: usize = 8 * 1024 * 1024;

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
    /// `[admin] allow_resend`: edit-and-resend is refused (403) unless set.
    resend: bool,
    /// The relays' shared budget of batches in flight, for its metrics.
    budget: Option<outbox_relay::Budget>,
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
            resend: false,
            budget: None,
        }
    }

    /// The budget the relays share (its turns, waits and parked shares in the metrics).
    #[must_use]
    pub(crate) fn budget(mut self, budget: outbox_relay::Budget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Allows edit-and-resend (`[admin] allow_resend`).
    #[must_use]
    pub(crate) fn allow_resend(mut self, allow: bool) -> Self {
        self.resend = allow;
        self
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

/// Every route and its handlers. `docs/openapi.json` documents each one (a test checks it
/// both ways, and checks every response of the tests against the document).
fn routes() -> Vec<(&'static str, MethodRouter<AdminState>)> {
    vec![
        ("/", get(ui::root)),
        ("/ui/", get(ui::index)),
        ("/ui/app.js", get(ui::script)),
        ("/ui/app.css", get(ui::style)),
        ("/healthz", get(api::healthz)),
        ("/readyz", get(api::readyz)),
        ("/metrics", get(metrics::render)),
        ("/api/v1/stats", get(api::stats)),
        ("/api/v1/relays", get(api::relays)),
        ("/api/v1/stores/{store}/messages", get(api::list)),
        ("/api/v1/stores/{store}/messages/{id}", get(api::show)),
        ("/api/v1/stores/{store}/messages/{id}/retry", post(api::retry)),
        ("/api/v1/stores/{store}/messages/{id}/cancel", post(api::cancel)),
        (
            "/api/v1/stores/{store}/messages/{id}/resend",
            post(api::resend).layer(DefaultBodyLimit::max(MAX_RESEND_BODY)),
        ),
        ("/api/v1/stores/{store}/failures", get(api::failures)),
        ("/api/v1/stores/{store}/history", get(api::history)),
        ("/api/v1/stores/{store}/bulk/{action}", post(api::bulk)),
        ("/api/v1/stores/{store}/destinations", get(api::destinations)),
        ("/api/v1/stores/{store}/destinations/{name}/{action}", post(api::pause)),
    ]
}

/// The router (tested without a server through `tower::ServiceExt::oneshot`).
pub(crate) fn router(state: AdminState) -> Router {
    routes()
        .into_iter()
        .fold(Router::new(), |r, (path, handlers)| r.route(path, handlers))
        .fallback(api::not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::require))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

#[cfg(test)]
mod tests;
