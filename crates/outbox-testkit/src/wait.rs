//! Waiting for an event instead of sleeping for it: a test polls the condition it needs and
//! fails with what it waited for once a generous deadline passes (two busy cores can make
//! anything slow; nothing here is a timing assertion).

use std::future::Future;
use std::time::{Duration, Instant};

/// How long [`eventually`] waits before failing the test.
pub const WAIT: Duration = Duration::from_secs(60);

/// Polls `check` every 20 ms until it holds; panics naming `what` after [`WAIT`].
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_within(WAIT, what, check).await;
}

/// [`eventually`] with its own deadline.
pub async fn eventually_within<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out after {within:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
