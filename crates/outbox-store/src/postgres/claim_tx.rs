//! The locked claim's transaction on PostgreSQL, begun by hand so that `BEGIN` and a claim by id
//! travel in one round trip.
//!
//! sqlx 0.8 begins a transaction with its own statement and waits for the answer, dropping any
//! rows (`Transaction::begin`), so a claim made through it costs a round trip for `BEGIN` and
//! its settings and one for the claim statement. On the path from a commit to its publication
//! that second round trip is a third of the claim on a busy machine. Here the claim's `BEGIN`,
//! its `SET LOCAL`s and the claim by id go as one simple query. A simple query is planned on
//! every run, which for the claim by id costs more than the round trip saved (measured with
//! pgbench: 0.47 ms a claim against 0.13 ms prepared), so the claim is a statement prepared
//! once per connection with SQL's `PREPARE` and run with `EXECUTE`, the ids written into the
//! query as integers. A connection that has not prepared it (new, or reset by `DISCARD ALL`)
//! answers `26000`; the claim is then rolled back, prepared and made again in one more round
//! trip.
//!
//! sqlx does not count this transaction, so it must never reach the pool open: [`ClaimTx`]
//! closes its connection when dropped before its commit or rollback (the server then rolls it
//! back at once), and a settlement that needs savepoints takes it up as an sqlx transaction
//! first ([`ClaimTx::counted`]).

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{Executor, PgPool, Postgres};

/// A claim's open transaction, on a connection taken from the pool. Dropped before
/// [`ClaimTx::commit`] or [`ClaimTx::rollback`] completes, the connection is closed instead of
/// going back to the pool, which ends the transaction at once.
pub struct ClaimTx {
    conn: PoolConnection<Postgres>,
    /// Whether the server may hold a transaction open on `conn`.
    open: bool,
}

impl std::fmt::Debug for ClaimTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimTx").field("open", &self.open).finish()
    }
}

impl Drop for ClaimTx {
    fn drop(&mut self) {
        if self.open {
            self.conn.close_on_drop();
        }
    }
}

impl std::ops::Deref for ClaimTx {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for ClaimTx {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

/// A statement prepared once per connection under a name of its own, and one run of it.
pub(crate) struct Prepared<'a> {
    /// `PREPARE name(types) AS ...`.
    pub(crate) prepare: &'a str,
    /// `EXECUTE name(...)`.
    pub(crate) execute: &'a str,
}

impl ClaimTx {
    /// Begins with `begin` (`BEGIN` and its settings, several statements) on an idle connection
    /// taken without the pool's ping, then, with `first` (a statement's `PREPARE` and one
    /// `EXECUTE` of it), runs it in the same round trip and returns its rows (in text format). Should that fail on such a connection
    /// (the server restarted or ended the session since it was released), the connection is
    /// closed and it is done again on one the pool has tested or opened, as
    /// `crate::begin::begin_untested_first` does. Safe to drop half-way (see `crate::begin`).
    pub(crate) async fn begin(
        pool: &PgPool,
        begin: String,
        first: Option<(String, String)>,
    ) -> sqlx::Result<(ClaimTx, Vec<PgRow>)> {
        let pool = pool.clone();
        crate::begin::to_the_end(async move {
            let first = first.as_ref().map(|(prepare, execute)| Prepared { prepare, execute });
            if let Some(conn) = pool.try_acquire() {
                let mut tx = ClaimTx { conn, open: true };
                match start(&mut tx.conn, &begin, first.as_ref()).await {
                    Ok(rows) => return Ok((tx, rows)),
                    Err(e) => {
                        tracing::debug!(error = %e, "an idle connection could not begin: beginning on a tested one");
                    }
                }
            }
            let mut tx = ClaimTx { conn: pool.acquire().await?, open: true };
            let rows = start(&mut tx.conn, &begin, first.as_ref()).await?;
            Ok((tx, rows))
        })
        .await
    }

    /// Commits.
    pub(crate) async fn commit(mut self) -> sqlx::Result<()> {
        self.conn.execute("COMMIT").await?;
        self.open = false;
        Ok(())
    }

    /// Rolls back.
    pub(crate) async fn rollback(mut self) -> sqlx::Result<()> {
        self.conn.execute("ROLLBACK").await?;
        self.open = false;
        Ok(())
    }

    /// This transaction as sqlx's own (one round trip: a savepoint sqlx counts as its `BEGIN`),
    /// so that savepoints begun in it are savepoints. Its commit commits this transaction, after
    /// which [`ClaimTx::ended`] says so; dropped, it rolls everything back.
    pub(crate) async fn counted(&mut self) -> sqlx::Result<sqlx::Transaction<'_, Postgres>> {
        use sqlx::Connection as _;
        // sqlx checks that the statement leaves the connection in a transaction: it does.
        (*self.conn).begin_with("SAVEPOINT outbox_counted").await
    }

    /// The transaction was ended through [`ClaimTx::counted`]: the connection may go back to
    /// the pool.
    pub(crate) fn ended(mut self) {
        self.open = false;
    }
}

/// Runs `begin` on `conn`, and `first` after it in the same round trip (see [`ClaimTx::begin`]).
async fn start(
    conn: &mut PgConnection,
    begin: &str,
    first: Option<&Prepared<'_>>,
) -> sqlx::Result<Vec<PgRow>> {
    let Some(first) = first else {
        conn.execute(begin).await?;
        return Ok(Vec::new());
    };
    let once = format!("{begin}; {}", first.execute);
    // Without arguments, sqlx sends a simple query: several statements, one round trip.
    match conn.fetch_all(once.as_str()).await {
        Err(e) if not_prepared(&e) => {
            // The transaction failed at `EXECUTE`: roll it back and begin again with the
            // statement prepared (which outlives the transaction, rolled back or not).
            let again = format!("ROLLBACK; {begin}; {}; {}", first.prepare, first.execute);
            conn.fetch_all(again.as_str()).await
        }
        done => done,
    }
}

/// PostgreSQL's `invalid_sql_statement_name`: `EXECUTE` of a statement this session has not
/// prepared.
fn not_prepared(e: &sqlx::Error) -> bool {
    e.as_database_error().and_then(|d| d.code()).is_some_and(|c| c == "26000")
}
