//! The outbox relay engine.
//!
//! A [`Relay`] claims due messages from a [`RelayStore`](outbox_store::RelayStore) in batches,
//! under a lease, publishes them through the [`Transport`](outbox_core::Transport)s their topic
//! routes to, and settles the outcome: `sent`, back to `pending` with a backed-off
//! `next_attempt_at`, or `failed` (raising the [`AlertHook`]). It is woken within milliseconds
//! by the application's commit ([`CommitSignal`](outbox_store::CommitSignal)) or by PostgreSQL
//! `LISTEN/NOTIFY`, and scans every `idle_interval` as the safety net.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool, transport: std::sync::Arc<dyn outbox_core::Transport>) {
//! use outbox_relay::{Destination, Relay, Route};
//! use tokio_util::sync::CancellationToken;
//! let outbox = outbox_store::Outbox::new(pool);
//! let relay = Relay::builder(&outbox)
//!     .destination(Destination::new("broker", transport))
//!     .route(Route::new("order.#", ["broker"]))
//!     .build()
//!     .expect("valid relay configuration");
//! let stop = CancellationToken::new();
//! tokio::spawn(relay.run(stop.clone()));
//! // ... on SIGTERM: stop.cancel();
//! # }
//! ```
//!
//! Guarantees and the tests that prove them: `docs/guarantees.md`.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

#[cfg(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
compile_error!("outbox-relay needs a database: enable at least one of its features postgres, mysql, sqlite");

mod ack;
mod alert;
mod batch;
mod breaker;
mod budget;
mod builder;
mod config;
mod decide;
mod destination;
mod dispatch;
#[cfg(test)]
mod fixtures;
mod pace;
mod poller;
mod presence;
mod relay;
mod retention;
mod router;
mod runs;
mod settle;
mod stats;
pub mod testing;
mod trace;
mod watch;

pub use ack::{acknowledge, AckError};
pub use alert::{AlertHook, LogAlert, TransportAlert, ALERT_TOPIC};
pub use breaker::BreakerConfig;
pub use budget::Budget;
pub use builder::{BuildError, RelayBuilder};
pub use config::{AckConfig, RelayConfig};
pub use destination::Destination;
pub use presence::BEAT_INTERVAL;
pub use relay::Relay;
pub use retention::Retention;
pub use router::{matches as topic_matches, validate_pattern, Route};
pub use stats::{
    ClaimKind, ClaimKindCount, DestinationState, Histogram, HistogramSnapshot, RelayStats, BUCKETS,
};
