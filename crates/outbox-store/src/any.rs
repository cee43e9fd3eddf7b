//! [`AnyOutbox`]: the database chosen at run time by URL scheme, for the `outbox` command.

pub use outbox_core::redact_url;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{Error, MessageId, Result};

use crate::migrate::MigrationReport;
use crate::outbox::Outbox;
use crate::relay::{
    AckOutcome, Acks, ClaimMode, Claimed, Claims, DeliveryState, Hold, Presence, SettleReport, Settlement,
    Wakeups,
};

/// An outbox on whichever database a URL names: `postgres://` / `postgresql://`, `mysql://` /
/// `mariadb://`, or `sqlite:` (a file path; created if missing).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AnyOutbox {
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(Outbox<sqlx::Postgres>),
    /// MySQL or MariaDB.
    #[cfg(feature = "mysql")]
    MySql(Outbox<sqlx::MySql>),
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(Outbox<sqlx::Sqlite>),
}

/// Which database a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
    /// SQLite.
    Sqlite,
}

impl Dialect {
    /// The dialect of `url`, by scheme.
    pub fn of_url(url: &str) -> Result<Dialect> {
        let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
        match scheme.as_str() {
            "postgres" | "postgresql" => Ok(Dialect::Postgres),
            "mysql" | "mariadb" => Ok(Dialect::MySql),
            "sqlite" => Ok(Dialect::Sqlite),
            // The URL itself is not echoed: without a known scheme nothing says where its
            // password is (`admin:secret@db/shop` reads as scheme `admin`).
            _ if !scheme.is_empty()
                && scheme.len() <= 20
                && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
            {
                // A `scheme://` URL says where its secrets are: shown redacted and bounded.
                let shown = if url.contains("://") {
                    format!(" in {}", outbox_core::text::printable(&redact_url(url), 200))
                } else {
                    String::new()
                };
                Err(Error::Config(format!(
                    "unsupported database URL scheme {scheme:?}{shown}: expected postgres://, mysql://, mariadb:// or sqlite:"
                )))
            }
            _ => Err(Error::Config(
                "the database URL does not start with a scheme: expected postgres://, mysql://, mariadb:// or sqlite:"
                    .to_owned(),
            )),
        }
    }
}

/// sqlx 0.8.6 verifies the host name even in `verify-ca` / `VERIFY_CA`: its verifier ignores
/// only the name-mismatch error rustls gave before 0.23.24 (sqlx issue #3793, fixed in 0.9).
const VERIFY_CA_CHECKS_THE_NAME: &str = " (this build checks the host name even with verify-ca / VERIFY_CA, \
     a known limit of sqlx 0.8 (sqlx issue #3793): connect by a name the certificate lists)";

/// Whether `url` asks for the chain to be verified without the host name.
fn chain_only(url: &str) -> bool {
    let url = url.to_ascii_lowercase();
    url.contains("sslmode=verify-ca")
        || url.contains("ssl-mode=verify_ca")
        || url.contains("sslmode=verify_ca")
}

/// Installs ring as the process's default rustls crypto provider when none is installed, and
/// says whether this call installed it.
///
/// sqlx's `verify-ca` / `VERIFY_CA` verifier (sqlx 0.8) takes the process default provider, and
/// rustls has none to take when a build enables two providers (ring, which sqlx uses, and
/// aws-lc-rs, which reqwest's default brings, as in the `outbox` binary): connecting would then
/// panic. [`AnyOutbox::connect`] calls this first; an application that builds its own sqlx pool
/// with `verify-ca` in such a build calls it (or installs a provider of its choice) once at
/// start. A provider the application installed is kept.
pub fn ensure_crypto_provider() -> bool {
    rustls::crypto::CryptoProvider::get_default().is_none()
        && rustls::crypto::ring::default_provider().install_default().is_ok()
}

/// How long a pooled connection of a database server may sit unused before the pool closes
/// it (the pool checks every this long, so a connection goes within twice this). A store with
/// nothing to do keeps none open (a relay's idle store needs only its listening connection, see
/// [`crate::Keeper`]); one with work reuses its connections batch after batch.
pub const POOL_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A pool of at most `max_connections` that waits at most 10 s for a connection and counts each
/// connection it opens in `opened` (see [`Outbox::connections_opened`]).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
fn pool_options<DB: sqlx::Database>(
    max_connections: u32,
    opened: Arc<AtomicU64>,
) -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .after_connect(move |_conn, _meta| {
            opened.fetch_add(1, Ordering::Relaxed);
            Box::pin(async { Ok(()) })
        })
}

/// [`pool_options`] for a database server: no connection kept open for nothing (none at all
/// once unused for [`POOL_IDLE_TIMEOUT`], and none handed back while `shed` is set: see
/// [`Outbox::shed_connections`]), so many stores on one relay cost what they use.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
fn server_pool_options<DB: sqlx::Database>(
    max_connections: u32,
    shed: Arc<AtomicBool>,
    opened: Arc<AtomicU64>,
) -> sqlx::pool::PoolOptions<DB> {
    pool_options(max_connections, opened)
        .min_connections(0)
        .idle_timeout(Some(POOL_IDLE_TIMEOUT))
        .after_release(move |_conn, _meta| {
            let keep = !shed.load(Ordering::Relaxed);
            Box::pin(async move { Ok(keep) })
        })
}

impl AnyOutbox {
    /// Connects a small pool (`max_connections`) to `url` (over TLS as the URL says; see
    /// [`ensure_crypto_provider`]).
    pub async fn connect(url: &str, max_connections: u32) -> Result<AnyOutbox> {
        ensure_crypto_provider();
        let unreachable = |e: sqlx::Error| {
            let message = format!("cannot connect to {}: {e}", redact_url(url));
            let mut message = outbox_core::tls::with_explanation(message, &e);
            if message.contains("not valid for name") && chain_only(url) {
                message.push_str(VERIFY_CA_CHECKS_THE_NAME);
            }
            Error::Database(message.into())
        };
        // What the pool's hooks share with the outbox (a SQLite pool has no shedding hook: the
        // flag is then read by nothing).
        #[cfg_attr(
            not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
            allow(unused_variables)
        )]
        let (shed, opened) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        match Dialect::of_url(url)? {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => {
                let pool = server_pool_options(max_connections, shed.clone(), opened.clone())
                    .connect(url)
                    .await
                    .map_err(unreachable)?;
                Ok(AnyOutbox::Postgres(Outbox::new(pool).with_pool_hooks(shed, opened)))
            }
            #[cfg(feature = "mysql")]
            Dialect::MySql => {
                let url = url.replacen("mariadb://", "mysql://", 1);
                let pool = server_pool_options(max_connections, shed.clone(), opened.clone())
                    .connect(&url)
                    .await
                    .map_err(unreachable)?;
                Ok(AnyOutbox::MySql(Outbox::new(pool).with_pool_hooks(shed, opened)))
            }
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => {
                let opts = crate::sqlite::connect_options(url)?;
                let pool = pool_options(max_connections, opened.clone())
                    .connect_with(opts)
                    .await
                    .map_err(unreachable)?;
                Ok(AnyOutbox::Sqlite(Outbox::new(pool).with_pool_hooks(shed, opened)))
            }
            #[allow(unreachable_patterns)]
            other => Err(Error::Config(format!("{other:?} support is not compiled into this build"))),
        }
    }
}

macro_rules! each {
    ($self:ident, $o:ident => $body:expr) => {
        match $self {
            #[cfg(feature = "postgres")]
            AnyOutbox::Postgres($o) => $body,
            #[cfg(feature = "mysql")]
            AnyOutbox::MySql($o) => $body,
            #[cfg(feature = "sqlite")]
            AnyOutbox::Sqlite($o) => $body,
        }
    };
}

impl AnyOutbox {
    /// See [`Outbox::migrate`].
    pub async fn migrate(&self) -> Result<MigrationReport> {
        each!(self, o => o.migrate().await)
    }

    /// See [`Outbox::check_schema`].
    pub async fn check_schema(&self) -> Result<()> {
        each!(self, o => o.check_schema().await)
    }

    /// PostgreSQL: whether the server runs autovacuum (`SHOW autovacuum`); `None` on the other
    /// databases, which need nothing of the kind. With it off, nothing reclaims the dead rows
    /// every sent message leaves or refreshes the table's statistics unless an operator runs
    /// `VACUUM (ANALYZE)`: the table and its indexes bloat, and stale statistics once made the
    /// planner re-check every due row in each claim (docs/schema.md, "PostgreSQL maintenance").
    /// The relay warns about it at start.
    pub async fn autovacuum_on(&self) -> Result<Option<bool>> {
        match self {
            #[cfg(feature = "postgres")]
            AnyOutbox::Postgres(o) => {
                let v: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
                    .fetch_one(o.pool())
                    .await
                    .map_err(crate::error::db)?;
                Ok(Some(v == "on"))
            }
            #[allow(unreachable_patterns)]
            _ => Ok(None),
        }
    }

    /// The after-commit signal of the underlying outbox.
    pub fn signal(&self) -> &crate::CommitSignal {
        each!(self, o => o.signal())
    }

    /// The connection pool's size and how many of its connections are idle.
    pub fn pool_connections(&self) -> (u32, usize) {
        each!(self, o => (o.pool().size(), o.pool().num_idle()))
    }

    /// See [`Outbox::connections_opened`].
    pub fn connections_opened(&self) -> Option<u64> {
        each!(self, o => o.connections_opened())
    }

    /// See [`Outbox::get`].
    pub async fn get(&self, id: outbox_core::MessageId) -> Result<Option<outbox_core::OutboxMessage>> {
        each!(self, o => o.get(id).await)
    }
}

/// The row locks of a locked claim of an [`AnyOutbox`]: those of its database.
#[derive(Debug)]
pub enum AnyLock {
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::PgLock),
    /// MySQL / MariaDB.
    #[cfg(feature = "mysql")]
    MySql(crate::mysql::MySqlLock),
}

/// A claim made by one dialect's outbox, as an [`AnyOutbox`] claim.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn lift<L>(c: Claimed<L>, wrap: impl FnOnce(L) -> AnyLock) -> Claimed<AnyLock> {
    let hold = match c.hold {
        Hold::Lease => Hold::Lease,
        Hold::Lock(l) => Hold::Lock(wrap(l)),
    };
    Claimed {
        messages: c.messages,
        hold,
        left_behind: c.left_behind,
        after: c.after,
        told: c.told,
        runs_cut: c.runs_cut,
    }
}

/// The lock held for `$variant`'s outbox, or a lease; returns a `Config` error when the lock is
/// another database's (a claim of one `AnyOutbox` settled on another: a caller's bug).
#[allow(unused_macros)]
macro_rules! unwrap_hold {
    ($hold:expr, $variant:path) => {
        match $hold {
            Hold::Lease => Hold::Lease,
            #[allow(unreachable_patterns)]
            Hold::Lock(lock) => match lock {
                $variant(l) => Hold::Lock(l),
                _ => return Err(outbox_core::Error::Config("a locked claim of another database".into())),
            },
        }
    };
}

impl Claims for AnyOutbox {
    type Lock = AnyLock;

    async fn claim_committed(
        &self,
        mode: ClaimMode,
        owner: &str,
        committed: &[MessageId],
        limit: usize,
        run: usize,
        lease: Duration,
    ) -> Result<Claimed<AnyLock>> {
        Ok(match self {
            #[cfg(feature = "postgres")]
            AnyOutbox::Postgres(o) => {
                lift(o.claim_committed(mode, owner, committed, limit, run, lease).await?, AnyLock::Postgres)
            }
            #[cfg(feature = "mysql")]
            AnyOutbox::MySql(o) => {
                lift(o.claim_committed(mode, owner, committed, limit, run, lease).await?, AnyLock::MySql)
            }
            #[cfg(feature = "sqlite")]
            AnyOutbox::Sqlite(o) => {
                Claimed::leased(o.claim_committed(mode, owner, committed, limit, run, lease).await?.messages)
            }
        })
    }

    async fn claim_ids(
        &self,
        mode: ClaimMode,
        owner: &str,
        ids: &[MessageId],
        limit: usize,
        lease: Duration,
    ) -> Result<Claimed<AnyLock>> {
        Ok(match self {
            #[cfg(feature = "postgres")]
            AnyOutbox::Postgres(o) => {
                lift(o.claim_ids(mode, owner, ids, limit, lease).await?, AnyLock::Postgres)
            }
            #[cfg(feature = "mysql")]
            AnyOutbox::MySql(o) => lift(o.claim_ids(mode, owner, ids, limit, lease).await?, AnyLock::MySql),
            #[cfg(feature = "sqlite")]
            AnyOutbox::Sqlite(o) => {
                Claimed::leased(o.claim_ids(mode, owner, ids, limit, lease).await?.messages)
            }
        })
    }

    async fn newer_than(
        &self,
        after: Option<MessageId>,
        again: &[MessageId],
        limit: usize,
    ) -> Result<crate::relay::Newer> {
        each!(self, o => o.newer_than(after, again, limit).await)
    }

    async fn deliveries_held(
        &self,
        hold: &mut Hold<AnyLock>,
        ids: &[MessageId],
    ) -> Result<Vec<DeliveryState>> {
        // Read through the lock's transaction, whichever outbox it came from.
        match hold {
            Hold::Lease => each!(self, o => o.deliveries(ids).await),
            #[cfg(feature = "postgres")]
            Hold::Lock(AnyLock::Postgres(l)) => crate::postgres::deliveries_locked(l, ids).await,
            #[cfg(feature = "mysql")]
            Hold::Lock(AnyLock::MySql(l)) => crate::mysql::deliveries_locked(l, ids).await,
            #[cfg(not(any(feature = "postgres", feature = "mysql")))]
            Hold::Lock(never) => match *never {},
        }
    }

    async fn settle_held(&self, hold: Hold<AnyLock>, owner: &str, s: &Settlement) -> Result<SettleReport> {
        match self {
            #[cfg(feature = "postgres")]
            AnyOutbox::Postgres(o) => o.settle_held(unwrap_hold!(hold, AnyLock::Postgres), owner, s).await,
            #[cfg(feature = "mysql")]
            AnyOutbox::MySql(o) => o.settle_held(unwrap_hold!(hold, AnyLock::MySql), owner, s).await,
            #[cfg(feature = "sqlite")]
            AnyOutbox::Sqlite(o) => match hold {
                Hold::Lease => o.settle(owner, s).await,
                #[allow(unreachable_patterns)]
                Hold::Lock(_) => Err(outbox_core::Error::Config("a locked claim of another database".into())),
            },
        }
    }

    async fn extend(&self, owner: &str, ids: &[MessageId], lease: Duration) -> Result<u64> {
        each!(self, o => o.extend(owner, ids, lease).await)
    }

    async fn release(&self, owner: &str) -> Result<u64> {
        each!(self, o => o.release(owner).await)
    }

    fn held_in_flight(&self, ids: &[MessageId]) -> Vec<bool> {
        each!(self, o => o.held_in_flight(ids))
    }
}

impl Acks for AnyOutbox {
    async fn expire_acks(&self, limit: usize) -> Result<u64> {
        each!(self, o => o.expire_acks(limit).await)
    }

    async fn ack(&self, message_id: MessageId, destination: &str) -> Result<AckOutcome> {
        each!(self, o => o.ack(message_id, destination).await)
    }
}

impl Wakeups for AnyOutbox {
    async fn set_idle(&self, owner: &str, idle: bool, ttl: Duration) -> Result<()> {
        each!(self, o => o.set_idle(owner, idle, ttl).await)
    }

    async fn listen(&self, signal: crate::CommitSignal) -> Result<Option<crate::relay::Listening>> {
        each!(self, o => o.listen(signal).await)
    }

    fn spare_connection(&self) -> bool {
        each!(self, o => Wakeups::spare_connection(o))
    }

    fn cheap_connections(&self) -> bool {
        each!(self, o => Wakeups::cheap_connections(o))
    }

    async fn shed_connections(&self, on: bool) {
        each!(self, o => Wakeups::shed_connections(o, on).await)
    }

    async fn close_down_to(&self, keep: u32, within: Duration) -> bool {
        each!(self, o => Wakeups::close_down_to(o, keep, within).await)
    }

    async fn room_to_claim(&self, keep: u32, within: Duration) -> bool {
        each!(self, o => Wakeups::room_to_claim(o, keep, within).await)
    }
}

impl crate::relay::Backlog for AnyOutbox {
    async fn overdue(&self) -> Result<Option<Duration>> {
        each!(self, o => crate::relay::Backlog::overdue(o).await)
    }
}

impl Presence for AnyOutbox {
    async fn beat(&self, beat: &crate::relay::RelayBeat) -> Result<()> {
        each!(self, o => o.beat(beat).await)
    }

    async fn leave(&self, owner: &str) -> Result<()> {
        each!(self, o => o.leave(owner).await)
    }
}

impl crate::relay::Pauses for AnyOutbox {
    async fn paused_destinations(&self) -> Result<Vec<String>> {
        each!(self, o => o.paused_destinations().await)
    }
}

impl crate::admin::MessageAdmin for AnyOutbox {
    async fn stats(&self) -> Result<crate::admin::Stats> {
        each!(self, o => o.stats().await)
    }

    async fn list(&self, filter: &crate::admin::ListFilter) -> Result<Vec<outbox_core::OutboxMessage>> {
        each!(self, o => o.list(filter).await)
    }

    async fn relays(&self) -> Result<Vec<crate::admin::RelayPresence>> {
        each!(self, o => o.relays().await)
    }

    async fn backlog(&self) -> Result<(crate::admin::Stats, Result<Vec<crate::admin::RelayPresence>>)> {
        each!(self, o => o.backlog().await)
    }

    async fn show(&self, id: outbox_core::MessageId) -> Result<crate::admin::MessageDetail> {
        each!(self, o => o.show(id).await)
    }

    async fn retry(&self, id: outbox_core::MessageId, actor: &str) -> Result<outbox_core::OutboxMessage> {
        each!(self, o => o.retry(id, actor).await)
    }

    async fn retry_failed(
        &self,
        filter: &crate::admin::ListFilter,
        actor: &str,
        batch: usize,
        progress: crate::admin::Progress<'_>,
    ) -> Result<u64> {
        each!(self, o => o.retry_failed(filter, actor, batch, progress).await)
    }

    async fn cancel(&self, id: outbox_core::MessageId, actor: &str) -> Result<outbox_core::OutboxMessage> {
        each!(self, o => o.cancel(id, actor).await)
    }

    async fn resend(
        &self,
        id: outbox_core::MessageId,
        edit: &crate::admin::MessageEdit,
        actor: &str,
    ) -> Result<crate::admin::Resent> {
        each!(self, o => o.resend(id, edit, actor).await)
    }

    async fn pauses(&self) -> Result<Vec<crate::admin::DestinationPause>> {
        each!(self, o => o.pauses().await)
    }

    async fn pause(&self, destination: &str, actor: &str, reason: Option<&str>) -> Result<bool> {
        each!(self, o => o.pause(destination, actor, reason).await)
    }

    async fn resume(&self, destination: &str, actor: &str) -> Result<bool> {
        each!(self, o => o.resume(destination, actor).await)
    }

    async fn failure_groups(&self, scan: usize) -> Result<crate::admin::FailureReport> {
        each!(self, o => o.failure_groups(scan).await)
    }

    async fn bulk(
        &self,
        action: crate::admin::BulkAction,
        selection: &crate::admin::Selection,
        actor: &str,
        dry_run: bool,
        progress: crate::admin::Progress<'_>,
    ) -> Result<u64> {
        each!(self, o => o.bulk(action, selection, actor, dry_run, progress).await)
    }

    async fn purge(
        &self,
        older_than: std::time::Duration,
        batch: usize,
        progress: crate::admin::Progress<'_>,
    ) -> Result<u64> {
        each!(self, o => o.purge(older_than, batch, progress).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_leave_redact_url() {
        assert_eq!(redact_url("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact_url("mysql://root@h/db"), "mysql://root@h/db");
        assert_eq!(redact_url("sqlite://x.db"), "sqlite://x.db");
        assert_eq!(redact_url("postgres://u:p%40ss@h/db?x=1"), "postgres://u:***@h/db?x=1");
    }

    #[test]
    fn dialect_by_scheme() {
        assert_eq!(Dialect::of_url("postgresql://h/db").unwrap(), Dialect::Postgres);
        assert_eq!(Dialect::of_url("mariadb://h/db").unwrap(), Dialect::MySql);
        assert_eq!(Dialect::of_url("sqlite:demo.db").unwrap(), Dialect::Sqlite);
        let err = Dialect::of_url("oracle://u:pw@h/db").unwrap_err().to_string();
        assert!(err.contains("oracle") && !err.contains("pw"), "{err}");
        // Not a URL: nothing says where its secret is, so none of it is echoed.
        for bad in ["admin:s3cret@db/shop", "s3cret", "\u{1b}[31m:s3cret", &"x".repeat(10_000)] {
            let err = Dialect::of_url(bad).unwrap_err().to_string();
            assert!(!err.contains("s3cret") && !err.contains('\u{1b}') && err.len() < 200, "{err}");
        }
    }
}
