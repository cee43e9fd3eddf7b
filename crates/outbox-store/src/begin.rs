//! Beginning a transaction so that a caller dropped half-way cannot leave one open.
//!
//! sqlx 0.8's begins are not cancel-safe. PostgreSQL's and MySQL's send `BEGIN` and await the
//! server's answer before the connection counts the transaction (PostgreSQL's guard rolls back
//! only a nested one); SQLite's custom `BEGIN IMMEDIATE` awaits once more after its worker thread
//! ran the statement. A caller dropped at that point (a relay's claim cancelled by its shutdown,
//! a settlement abandoned after the shutdown timeout, an application's request handler dropped
//! because its client went away) hands the connection back to the pool inside a transaction
//! nobody will end: PostgreSQL and MySQL then run the next user's autocommit statements in it,
//! uncommitted and holding their row locks; MySQL refuses the next `SET TRANSACTION`; on SQLite
//! it holds the database's one write lock, so every other writer waits out its busy timeout.
//! (Found in CI: a relay's shutdown waited on SQLite's lock; `tests/cancel.rs` drops claims and
//! settlements at every await point on a pool of one connection.)
//!
//! So every transaction the store begins is begun by [`to_the_end`], which runs to the end
//! whether or not anyone still waits for it: it is polled in the caller's task, and if the caller
//! drops it before it is done, what is left of it is moved into a task of its own and finished
//! there ([`Detached`]). A transaction whose caller is gone is dropped in that task, as a whole
//! `Transaction`, which rolls it back before its connection returns to the pool. The common case
//! costs one allocation, not a task: an earlier version spawned every begin into a task, a hop
//! between threads on every transaction (about 40 µs, 9% of a MariaDB business transaction with
//! one client, measured against the same transaction begun inline: docs/benchmarks.md, "Begins
//! in the caller's task").

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A future that completes even if dropped before it is done: its rest then runs in a task of
/// its own (on the current tokio runtime), and its output is dropped there. Made by
/// [`detached`].
///
/// A panic while it is polled drops it (it is not finished elsewhere). Dropped outside a tokio
/// runtime (only when the runtime itself is gone), it is dropped unfinished.
pub(crate) struct Detached<F: Future + Send + 'static> {
    /// `None` once it completed, and while it is being polled.
    work: Option<Pin<Box<F>>>,
}

impl<F: Future + Send + 'static> Future for Detached<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Taken out while polled, so that a panic inside drops it instead of leaving it to
        // `drop` to finish.
        let Some(mut work) = self.work.take() else {
            // Polled after completion: a bug of the caller's (an `await` never does it).
            return Poll::Pending;
        };
        match work.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(out),
            Poll::Pending => {
                self.work = Some(work);
                Poll::Pending
            }
        }
    }
}

impl<F: Future + Send + 'static> Drop for Detached<F> {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    drop(work.await);
                });
            }
        }
    }
}

/// Runs `work` to the end even if the returned future is dropped first (see [`Detached`]).
pub(crate) fn detached<F>(work: F) -> Detached<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Detached { work: Some(Box::pin(work)) }
}

/// Runs `begin` (acquire a connection, perhaps set it up, begin) so that it completes even if
/// this future is dropped (see the module's documentation).
pub(crate) async fn to_the_end<T, F>(begin: F) -> sqlx::Result<T>
where
    T: Send + 'static,
    F: Future<Output = sqlx::Result<T>> + Send + 'static,
{
    detached(begin).await
}

/// `pool.begin()`, safe to drop half-way.
pub(crate) async fn begin<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
) -> sqlx::Result<sqlx::Transaction<'static, DB>> {
    let pool = pool.clone();
    to_the_end(async move { pool.begin().await }).await
}

/// `pool.begin_with(statement)`, safe to drop half-way.
#[cfg(feature = "sqlite")]
pub(crate) async fn begin_with<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    statement: impl Into<std::borrow::Cow<'static, str>>,
) -> sqlx::Result<sqlx::Transaction<'static, DB>> {
    let (pool, statement) = (pool.clone(), statement.into());
    to_the_end(async move { pool.begin_with(statement).await }).await
}

/// Begins a transaction for a relay's claim on an idle connection taken without the pool's ping,
/// safe to drop half-way (see the module's documentation).
///
/// `pool.acquire()` pings an idle connection before handing it out (sqlx's
/// `test_before_acquire`), one round trip on the way from a commit to its publication; and sqlx
/// 0.8 has already pinged it when it came back to the pool (`return_to_pool`). So this takes an
/// idle connection as it is (`Pool::try_acquire`, which also leaves it to tasks already waiting
/// for one) and begins on it; should that fail (the server restarted or ended the session since
/// it was released: the `BEGIN` has done nothing), the connection is dropped (its release ping
/// then fails, and sqlx closes it) and the transaction is begun as `pool.begin()` would, on a
/// connection the pool has tested or opened. Without an idle connection it is `pool.begin()`.
/// The application's own transactions keep the pool's ping: this is for the store's own
/// transactions (MySQL/MariaDB's claims, settlements and admin reads), which an error would only
/// delay. PostgreSQL's claim does the same in `postgres::ClaimTx::begin`, its `BEGIN` travelling
/// with the claim.
///
/// `statement` is the begin statement (`None`: the dialect's own `BEGIN`).
#[cfg(feature = "mysql")]
pub(crate) async fn begin_untested_first<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    statement: Option<std::borrow::Cow<'static, str>>,
) -> sqlx::Result<sqlx::Transaction<'static, DB>> {
    let pool = pool.clone();
    to_the_end(async move {
        if let Some(conn) = pool.try_acquire() {
            match sqlx::Transaction::begin(conn, statement.clone()).await {
                Ok(tx) => return Ok(tx),
                Err(e) => tracing::debug!(error = %e, "an idle connection could not begin: beginning on a tested one"),
            }
        }
        let conn = pool.acquire().await?;
        sqlx::Transaction::begin(conn, statement).await
    })
    .await
}
