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
//! So every transaction the store begins is begun by [`to_the_end`]: in a task of its own,
//! which runs to the end whether or not anyone still waits for it. A transaction whose caller
//! is gone is dropped in that task, as a whole `Transaction`, which rolls it back before its
//! connection returns to the pool. The cost is one task spawn per transaction (microseconds,
//! against a round trip to the database).

use std::future::Future;

/// Runs `work` in a task of its own, so it completes even if this future is dropped; its output
/// is then dropped in that task. A panic in `work` is resumed here.
pub(crate) async fn detached<T, F>(work: F) -> sqlx::Result<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    match tokio::spawn(work).await {
        Ok(out) => Ok(out),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only when the runtime itself is shutting down.
        Err(e) => Err(sqlx::Error::Io(std::io::Error::other(format!("its task was cancelled ({e})")))),
    }
}

/// Runs `begin` (acquire a connection, perhaps set it up, begin) in a task of its own, so it
/// completes even if this future is dropped (see the module's documentation).
pub(crate) async fn to_the_end<T, F>(begin: F) -> sqlx::Result<T>
where
    T: Send + 'static,
    F: Future<Output = sqlx::Result<T>> + Send + 'static,
{
    detached(begin).await?
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
