//! The [`Inbox`] handle and the [`InboxDatabase`] trait every dialect implements.

use std::borrow::Cow;
use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use outbox_core::{Error, MessageId, Result};
use sqlx::Pool;

use crate::message::InboxMessage;
use crate::migrate::{MigrationReport, Migrator, SCHEMA};
use outbox_store::Tables;

/// Longest consumer group name the table holds.
pub const MAX_GROUP_LEN: usize = 128;
/// Longest message id the table holds.
pub const MAX_MESSAGE_ID_LEN: usize = 191;
/// Largest batch [`Inbox::prune`] deletes in one statement.
pub const MAX_PRUNE_BATCH: u32 = 10_000;

/// A database the inbox runs on: PostgreSQL, MySQL/MariaDB or SQLite (sqlx's database types).
///
/// Library users call these through [`Inbox`].
pub trait InboxDatabase: Migrator {
    outbox_store::schema_methods!(SCHEMA, "inbox");

    /// Inserts `(group, message_id)` on `conn`, inside the caller's transaction: `true` when
    /// the row is new, `false` when it already exists (committed by another transaction, which
    /// this call waits for when it is still in flight). Any other failure is an error.
    fn claim<'a>(
        conn: &'a mut Self::Connection,
        tables: &'a Tables,
        group: &'a str,
        message_id: &'a str,
        topic: Option<&'a str>,
    ) -> impl Future<Output = Result<bool>> + Send + 'a;

    /// Deletes at most `batch` rows processed more than `older_than` ago (by the database's
    /// clock), in its own short transaction; returns how many it deleted.
    fn prune_batch<'a>(
        pool: &'a Pool<Self>,
        tables: &'a Tables,
        older_than: Duration,
        batch: u32,
    ) -> impl Future<Output = Result<u64>> + Send + 'a;
}

/// Implements [`InboxDatabase`] for one dialect from its module's `MIGRATIONS` and SQL: the
/// claim statement `CLAIM_SQL` (group, message id, topic) and the prune statement `PRUNE` (age
/// in the dialect's unit, batch); `age` turns a retention into that age, and `duplicate` says
/// which insert error means "already there" (only dialects without `ON CONFLICT DO NOTHING`
/// see one; the others leave it out).
macro_rules! inbox_database {
    (@duplicate) => {
        |_: &sqlx::Error| false
    };
    (@duplicate $dup:expr) => {
        $dup
    };
    ($db:ty, $conn:ty, $dialect:expr, age: $age:expr $(, duplicate: $dup:expr)? $(,)?) => {
        impl $crate::inbox::InboxDatabase for $db {
            const MIGRATIONS: &'static [$crate::migrate::Migration] = MIGRATIONS;
            const DIALECT: outbox_store::Dialect = $dialect;

            async fn claim<'a>(
                conn: &'a mut $conn,
                tables: &'a outbox_store::Tables,
                group: &'a str,
                message_id: &'a str,
                topic: Option<&'a str>,
            ) -> outbox_core::Result<bool> {
                let sql = tables.render($dialect, CLAIM_SQL);
                let insert = sqlx::query(&sql).bind(group).bind(message_id).bind(topic);
                match insert.execute(&mut *conn).await {
                    Ok(done) => Ok(done.rows_affected() == 1),
                    Err(e) if ($crate::inbox::inbox_database!(@duplicate $($dup)?))(&e) => Ok(false),
                    Err(e) => Err($crate::error::db(e)),
                }
            }

            async fn prune_batch(
                pool: &sqlx::Pool<$db>,
                tables: &outbox_store::Tables,
                older_than: std::time::Duration,
                batch: u32,
            ) -> outbox_core::Result<u64> {
                let sql = tables.render($dialect, PRUNE);
                let delete = sqlx::query(&sql).bind(($age)(older_than)?).bind(i64::from(batch));
                Ok(delete.execute(pool).await.map_err($crate::error::db)?.rows_affected())
            }
        }
    };
}
pub(crate) use inbox_database;

/// What [`Inbox::process`] did with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Processed<T> {
    /// First delivery for this group: the closure ran and returned this value. Commit your
    /// transaction to make the inbox row and the business effect permanent together.
    Done(T),
    /// Already processed by this group (committed by an earlier delivery): the closure did not
    /// run. Acknowledge the message to the broker.
    Duplicate,
}

impl<T> Processed<T> {
    /// True for [`Processed::Duplicate`].
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Processed::Duplicate)
    }

    /// The closure's value, `None` for a duplicate.
    pub fn done(self) -> Option<T> {
        match self {
            Processed::Done(v) => Some(v),
            Processed::Duplicate => None,
        }
    }
}

/// Result of [`Inbox::claim`], the closure-free form of [`Inbox::process`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "run the business effect only for `Claim::New`"]
pub enum Claim {
    /// The inbox row was inserted in your transaction: apply the effect, then commit.
    New,
    /// Already processed by this group: skip the effect.
    Duplicate,
}

/// Something that names a message for the inbox: an [`InboxMessage`] (its id, and its topic
/// from the `outbox-topic` header), a string id (`"42"`, `"shop:42"`), or a [`MessageId`].
pub trait InboxKey {
    /// The deduplication id.
    fn inbox_id(&self) -> Cow<'_, str>;
    /// The topic recorded with the row (informational), if known.
    fn inbox_topic(&self) -> Option<&str> {
        None
    }
}

impl InboxKey for InboxMessage {
    fn inbox_id(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.id)
    }
    fn inbox_topic(&self) -> Option<&str> {
        self.topic()
    }
}

impl InboxKey for str {
    fn inbox_id(&self) -> Cow<'_, str> {
        Cow::Borrowed(self)
    }
}

impl InboxKey for String {
    fn inbox_id(&self) -> Cow<'_, str> {
        Cow::Borrowed(self)
    }
}

impl InboxKey for MessageId {
    fn inbox_id(&self) -> Cow<'_, str> {
        Cow::Owned(self.0.to_string())
    }
}

impl<K: InboxKey + ?Sized> InboxKey for &K {
    fn inbox_id(&self) -> Cow<'_, str> {
        (**self).inbox_id()
    }
    fn inbox_topic(&self) -> Option<&str> {
        (**self).inbox_topic()
    }
}

/// The consumer-side inbox over a sqlx pool: deduplicates deliveries per consumer group, inside
/// the consumer's own transactions. Cheap to clone.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, msg: outbox_inbox::InboxMessage) -> anyhow::Result<()> {
/// use outbox_inbox::{Inbox, Processed};
/// let inbox = Inbox::new(pool.clone());
/// inbox.migrate().await?;
/// let mut tx = pool.begin().await?;
/// let outcome = inbox
///     .process(&mut tx, "billing", &msg, |conn| {
///         Box::pin(async move {
///             sqlx::query("UPDATE accounts SET paid = paid + 1 WHERE id = 1").execute(&mut *conn).await?;
///             Ok::<_, anyhow::Error>(())
///         })
///     })
///     .await?;
/// tx.commit().await?; // then acknowledge the message to the broker
/// # let _ = outcome; Ok(()) }
/// ```
#[derive(Debug)]
pub struct Inbox<DB: InboxDatabase> {
    pool: Pool<DB>,
    tables: Tables,
}

impl<DB: InboxDatabase> Clone for Inbox<DB> {
    fn clone(&self) -> Self {
        Inbox { pool: self.pool.clone(), tables: self.tables.clone() }
    }
}

impl<DB: InboxDatabase> Inbox<DB> {
    /// Wraps a pool (used by [`migrate`](Self::migrate) and [`prune`](Self::prune); messages are
    /// processed on the connections you pass in).
    pub fn new(pool: Pool<DB>) -> Self {
        Inbox { pool, tables: Tables::default() }
    }

    /// This inbox with its tables in another schema and/or with another prefix (the same
    /// [`Tables`] as the outbox's: `outbox_inbox` becomes `<prefix>inbox`, in the schema when
    /// one is set). Fails for a schema on SQLite.
    pub fn with_tables(mut self, tables: Tables) -> Result<Self> {
        tables.check_for(DB::DIALECT)?;
        self.tables = tables;
        Ok(self)
    }

    /// The names of this inbox's tables.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Creates or upgrades the `outbox_inbox` table. Idempotent; safe to run from several
    /// processes at once. A database migrated by a newer build is refused with
    /// [`Error::SchemaTooNew`].
    pub async fn migrate(&self) -> Result<MigrationReport> {
        DB::migrate_in(&self.pool, &self.tables).await
    }

    /// The inbox schema version recorded in the database (0 before [`migrate`](Self::migrate)).
    pub async fn schema_version(&self) -> Result<i64> {
        DB::schema_version_in(&self.pool, &self.tables).await
    }

    /// Processes `message` for consumer `group` exactly once, on `conn`, which must be inside
    /// **your** transaction (a `&mut sqlx::Transaction` coerces to it):
    ///
    /// 1. inserts `(group, message id)` into `outbox_inbox` first;
    /// 2. if the row is new, runs `business` on the same connection and returns
    ///    [`Processed::Done`] with its value; if the row exists (an earlier delivery committed
    ///    it), returns [`Processed::Duplicate`] without running `business`.
    ///
    /// Commit afterwards: the inbox row and the business effect commit or roll back together.
    /// When `business` fails its error is returned: roll back (or drop) the transaction, which
    /// removes the inbox row too, and the redelivered message is processed again.
    ///
    /// Two consumers of one group racing on the same id: the second one's insert waits for the
    /// first one's transaction; it then sees `Duplicate` if the first committed, or becomes the
    /// processor if it rolled back (on MySQL/MariaDB a deadlock error can occur in that
    /// rollback case; on PostgreSQL under `REPEATABLE READ`/`SERIALIZABLE` a serialization
    /// failure can: treat both as retryable and process the delivery again).
    ///
    /// **Why this closure shape.** `business` receives the very connection `process` was given
    /// (with the caller's lifetime `'c`, not a higher-ranked one), so the returned future may
    /// borrow anything that outlives the call, e.g. the message itself; `Box::pin(async move
    /// { ... })` is all it takes. Errors of the inbox itself come back through
    /// `E: From<outbox_core::Error>` (`anyhow::Error`, or your error type with a `From` impl).
    /// If you prefer no closure at all, use [`claim`](Self::claim).
    pub async fn process<'c, K, T, E, F>(
        &self,
        conn: &'c mut DB::Connection,
        group: &str,
        message: &K,
        business: F,
    ) -> std::result::Result<Processed<T>, E>
    where
        K: InboxKey + ?Sized,
        F: FnOnce(&'c mut DB::Connection) -> BoxFuture<'c, std::result::Result<T, E>>,
        E: From<Error>,
    {
        match self.claim(&mut *conn, group, message).await? {
            Claim::New => Ok(Processed::Done(business(conn).await?)),
            Claim::Duplicate => Ok(Processed::Duplicate),
        }
    }

    /// The closure-free form of [`process`](Self::process): inserts `(group, message id)` on
    /// `conn` (inside your transaction) and says whether this delivery is the first. Apply the
    /// business effect on the same transaction only for [`Claim::New`], then commit.
    pub async fn claim<K: InboxKey + ?Sized>(
        &self,
        conn: &mut DB::Connection,
        group: &str,
        message: &K,
    ) -> Result<Claim> {
        let id = message.inbox_id();
        validate(group, &id)?;
        // The topic is informational: an over-long one is cut rather than failing the message.
        let topic =
            message.inbox_topic().filter(|t| !t.is_empty()).map(|t| match t.char_indices().nth(255) {
                Some((end, _)) => &t[..end],
                None => t,
            });
        if DB::claim(conn, &self.tables, group, &id, topic).await? {
            Ok(Claim::New)
        } else {
            Ok(Claim::Duplicate)
        }
    }

    /// Deletes inbox rows processed more than `older_than` ago, `batch` rows per statement
    /// (each in its own short transaction, so pruning never holds many locks), and returns how
    /// many it deleted. Keep the retention longer than the longest time a message can be
    /// redelivered (broker retention, relay retries): a pruned id is processed again if it
    /// comes back.
    pub async fn prune(&self, older_than: Duration, batch: u32) -> Result<u64> {
        let batch = batch.clamp(1, MAX_PRUNE_BATCH);
        let mut total = 0;
        loop {
            let n = DB::prune_batch(&self.pool, &self.tables, older_than, batch).await?;
            total += n;
            if n < u64::from(batch) {
                return Ok(total);
            }
        }
    }
}

fn validate(group: &str, id: &str) -> Result<()> {
    if group.trim().is_empty() {
        return Err(Error::InvalidMessage { field: "consumer_group", reason: "must not be empty".into() });
    }
    if group.chars().count() > MAX_GROUP_LEN {
        return Err(Error::InvalidMessage {
            field: "consumer_group",
            reason: format!("longer than {MAX_GROUP_LEN} characters"),
        });
    }
    if id.is_empty() {
        return Err(Error::InvalidMessage { field: "message_id", reason: "must not be empty".into() });
    }
    if id.chars().count() > MAX_MESSAGE_ID_LEN {
        return Err(Error::InvalidMessage {
            field: "message_id",
            reason: format!("longer than {MAX_MESSAGE_ID_LEN} characters"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_group_and_id() {
        assert!(validate("billing", "shop:42").is_ok());
        assert!(validate("", "1").is_err());
        assert!(validate("g", "").is_err());
        assert!(validate(&"g".repeat(129), "1").is_err());
        assert!(validate("g", &"1".repeat(192)).is_err());
        assert!(validate("g", &"é".repeat(191)).is_ok());
    }

    #[test]
    fn keys() {
        assert_eq!(MessageId(42).inbox_id(), "42");
        assert_eq!("shop:42".inbox_id(), "shop:42");
        let m = InboxMessage {
            id: "7".into(),
            headers: [("outbox-topic".to_owned(), "order.paid".to_owned())].into(),
            payload: Vec::new(),
        };
        assert_eq!(InboxKey::inbox_topic(&&m), Some("order.paid"));
    }
}
