//! The [`Outbox`] handle, the [`OutboxDatabase`] / [`OutboxConnection`] traits every dialect
//! implements, and [`OutboxTransaction`], whose commit wakes the relay.

use std::future::Future;
use std::ops::{Deref, DerefMut};

use outbox_core::{Enqueued, MessageId, NewMessage, OutboxMessage, Result};
use sqlx::{Pool, Transaction};

use crate::error::db;
use crate::migrate::{MigrationReport, Migrator, OUTBOX_SCHEMA};
use crate::names::Tables;
use crate::signal::CommitSignal;

/// A database the outbox runs on: PostgreSQL, MySQL/MariaDB or SQLite (sqlx's database types).
///
/// Library users rarely call these directly: [`Outbox`] and [`OutboxConnection`] wrap them.
pub trait OutboxDatabase: Migrator {
    crate::schema_methods!(OUTBOX_SCHEMA, "outbox");

    /// Inserts one message on `conn` (inside the caller's transaction) in one round trip, or
    /// returns the existing message when its `(biz_type, biz_key)` is already taken.
    fn enqueue<'a>(
        conn: &'a mut Self::Connection,
        msg: &'a NewMessage,
    ) -> impl Future<Output = Result<Enqueued>> + Send + 'a {
        Self::enqueue_in(conn, Tables::canonical(), msg)
    }

    /// [`enqueue`](Self::enqueue) into the tables named by `tables`.
    fn enqueue_in<'a>(
        conn: &'a mut Self::Connection,
        tables: &'a Tables,
        msg: &'a NewMessage,
    ) -> impl Future<Output = Result<Enqueued>> + Send + 'a;

    /// Inserts several messages; results are in the input's order. Duplicates of an existing
    /// `(biz_type, biz_key)`, or of an earlier message in the same batch, return that message.
    fn enqueue_batch<'a>(
        conn: &'a mut Self::Connection,
        msgs: &'a [NewMessage],
    ) -> impl Future<Output = Result<Vec<Enqueued>>> + Send + 'a {
        Self::enqueue_batch_in(conn, Tables::canonical(), msgs)
    }

    /// [`enqueue_batch`](Self::enqueue_batch) into the tables named by `tables`.
    fn enqueue_batch_in<'a>(
        conn: &'a mut Self::Connection,
        tables: &'a Tables,
        msgs: &'a [NewMessage],
    ) -> impl Future<Output = Result<Vec<Enqueued>>> + Send + 'a;

    /// Reads one message.
    fn get<'a>(
        conn: &'a mut Self::Connection,
        id: MessageId,
    ) -> impl Future<Output = Result<Option<OutboxMessage>>> + Send + 'a {
        Self::get_in(conn, Tables::canonical(), id)
    }

    /// [`get`](Self::get) from the tables named by `tables`.
    fn get_in<'a>(
        conn: &'a mut Self::Connection,
        tables: &'a Tables,
        id: MessageId,
    ) -> impl Future<Output = Result<Option<OutboxMessage>>> + Send + 'a;
}

/// Enqueue on a connection you already hold, typically inside your own transaction:
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> outbox_store::Result<()> {
/// use outbox_store::{NewMessage, OutboxConnection};
/// let mut tx = pool.begin().await.map_err(|e| outbox_store::Error::Database(e.into()))?;
/// // ... your business statements on &mut *tx ...
/// let enqueued = tx.enqueue(&NewMessage::new("order.paid", "{}")).await?;
/// tx.commit().await.map_err(|e| outbox_store::Error::Database(e.into()))?;
/// # let _ = enqueued; Ok(()) }
/// ```
///
/// A plain `commit` does not wake an in-process relay (its scan or `LISTEN/NOTIFY` finds the
/// message); use [`Outbox::commit`] or [`OutboxTransaction`] for the after-commit fast path.
///
/// With a schema or table prefix ([`Tables`]), enqueue with [`enqueue_in`](Self::enqueue_in)
/// and the outbox's names: `tx.enqueue_in(outbox.tables(), &msg)`.
pub trait OutboxConnection: Send {
    /// The database this connection belongs to.
    type Database: OutboxDatabase;

    /// See [`OutboxDatabase::enqueue`].
    fn enqueue<'a>(&'a mut self, msg: &'a NewMessage) -> impl Future<Output = Result<Enqueued>> + Send + 'a;

    /// See [`OutboxDatabase::enqueue_batch`].
    fn enqueue_batch<'a>(
        &'a mut self,
        msgs: &'a [NewMessage],
    ) -> impl Future<Output = Result<Vec<Enqueued>>> + Send + 'a;

    /// See [`OutboxDatabase::enqueue_in`].
    fn enqueue_in<'a>(
        &'a mut self,
        tables: &'a Tables,
        msg: &'a NewMessage,
    ) -> impl Future<Output = Result<Enqueued>> + Send + 'a;

    /// See [`OutboxDatabase::enqueue_batch_in`].
    fn enqueue_batch_in<'a>(
        &'a mut self,
        tables: &'a Tables,
        msgs: &'a [NewMessage],
    ) -> impl Future<Output = Result<Vec<Enqueued>>> + Send + 'a;
}

/// `msg` with the current W3C trace context as its `traceparent` header (feature `otel`, when
/// there is a current context and the message has no `traceparent`); borrowed otherwise.
/// Taken when the enqueue is called, in the caller's span.
#[allow(dead_code)]
pub(crate) fn traced(msg: &NewMessage) -> std::borrow::Cow<'_, NewMessage> {
    #[cfg(feature = "otel")]
    if outbox_core::trace::would_inject(&msg.headers) {
        let mut m = msg.clone();
        outbox_core::trace::inject_current(&mut m.headers);
        return std::borrow::Cow::Owned(m);
    }
    std::borrow::Cow::Borrowed(msg)
}

/// [`traced`] for a batch: one copy of the batch when any message takes the context.
#[allow(dead_code)]
pub(crate) fn traced_batch(msgs: &[NewMessage]) -> std::borrow::Cow<'_, [NewMessage]> {
    #[cfg(feature = "otel")]
    if msgs.iter().any(|m| outbox_core::trace::would_inject(&m.headers)) {
        let mut copy = msgs.to_vec();
        for m in &mut copy {
            outbox_core::trace::inject_current(&mut m.headers);
        }
        return std::borrow::Cow::Owned(copy);
    }
    std::borrow::Cow::Borrowed(msgs)
}

/// The items of a dialect trait over [`Migrator`] for the versioned schema `$schema` (the
/// outbox's in [`OutboxDatabase`], the inbox's in `outbox-inbox`): its `MIGRATIONS` and
/// `DIALECT`, and the provided methods `migrate`, `migrate_in`, `schema_version` and
/// `schema_version_in`.
#[doc(hidden)]
#[macro_export]
macro_rules! schema_methods {
    ($schema:expr, $what:literal) => {
        #[doc = concat!("This dialect's shipped migrations of the ", $what, " tables.")]
        const MIGRATIONS: &'static [$crate::Migration];

        /// Which dialect this is (what [`Tables::render`]($crate::Tables::render) renders for).
        const DIALECT: $crate::Dialect;

        #[doc = concat!("Applies the missing ", $what, " migrations (see the `migrate` module docs).")]
        fn migrate(
            pool: &::sqlx::Pool<Self>,
        ) -> impl ::std::future::Future<Output = ::outbox_core::Result<$crate::MigrationReport>> + Send {
            Self::migrate_in(pool, $crate::Tables::canonical())
        }

        /// [`migrate`](Self::migrate) for the object names `tables`.
        fn migrate_in(
            pool: &::sqlx::Pool<Self>,
            tables: &$crate::Tables,
        ) -> impl ::std::future::Future<Output = ::outbox_core::Result<$crate::MigrationReport>> + Send {
            async move {
                tables.check_for(Self::DIALECT)?;
                Self::migrate_schema(pool, &$schema, tables, Self::MIGRATIONS).await
            }
        }

        #[doc = concat!("The ", $what, " schema version recorded in the database (0 when its tables do not exist).")]
        fn schema_version(
            pool: &::sqlx::Pool<Self>,
        ) -> impl ::std::future::Future<Output = ::outbox_core::Result<i64>> + Send {
            Self::schema_version_of(pool, &$schema, $crate::Tables::canonical())
        }

        /// [`schema_version`](Self::schema_version) for the object names `tables`.
        fn schema_version_in(
            pool: &::sqlx::Pool<Self>,
            tables: &$crate::Tables,
        ) -> impl ::std::future::Future<Output = ::outbox_core::Result<i64>> + Send {
            Self::schema_version_of(pool, &$schema, tables)
        }
    };
}

/// Implements [`OutboxDatabase`] for a dialect with the functions of its module (`MIGRATIONS`,
/// `enqueue_in`, `enqueue_batch_in`), [`OutboxConnection`] for its connection, and writes the
/// module's `render` (its SQL for a set of [`Tables`] names), its `get_in` (`MESSAGE_COLUMNS`
/// of the row whose id binds to the placeholder `$id`, decoded by `$read`) and the
/// canonical-names forms `enqueue`, `enqueue_batch` and `get`.
#[allow(unused_macros)]
macro_rules! impl_dialect {
    ($conn:ty, $db:ty, $dialect:expr, id = $id:literal, read = $read:path) => {
        /// `sql` for the names `tables` on this database.
        pub(crate) fn render<'a>(tables: &$crate::Tables, sql: &'a str) -> ::std::borrow::Cow<'a, str> {
            tables.render($dialect, sql)
        }

        /// Enqueues one message on `conn`; see [`OutboxDatabase::enqueue`](crate::OutboxDatabase::enqueue).
        pub async fn enqueue(
            conn: &mut $conn,
            msg: &::outbox_core::NewMessage,
        ) -> ::outbox_core::Result<::outbox_core::Enqueued> {
            enqueue_in(conn, $crate::Tables::canonical(), msg).await
        }

        /// Enqueues several messages; see [`enqueue_batch_in`] and
        /// [`OutboxDatabase::enqueue_batch`](crate::OutboxDatabase::enqueue_batch).
        pub async fn enqueue_batch(
            conn: &mut $conn,
            msgs: &[::outbox_core::NewMessage],
        ) -> ::outbox_core::Result<Vec<::outbox_core::Enqueued>> {
            enqueue_batch_in(conn, $crate::Tables::canonical(), msgs).await
        }

        /// Reads one message by id.
        pub async fn get(
            conn: &mut $conn,
            id: ::outbox_core::MessageId,
        ) -> ::outbox_core::Result<Option<::outbox_core::OutboxMessage>> {
            get_in(conn, $crate::Tables::canonical(), id).await
        }

        /// [`get`] from the tables named by `tables`.
        pub async fn get_in(
            conn: &mut $conn,
            tables: &$crate::Tables,
            id: ::outbox_core::MessageId,
        ) -> ::outbox_core::Result<Option<::outbox_core::OutboxMessage>> {
            let sql = format!(concat!("SELECT {} FROM outbox_message WHERE id = ", $id), MESSAGE_COLUMNS);
            let row = ::sqlx::query(&render(tables, &sql))
                .bind(id.0)
                .fetch_optional(&mut *conn)
                .await
                .map_err($crate::error::db)?;
            row.as_ref().map($read).transpose()
        }

        impl $crate::common::Affected for $db {
            fn rows_affected(done: &<$db as ::sqlx::Database>::QueryResult) -> u64 {
                done.rows_affected()
            }
        }

        impl $crate::OutboxDatabase for $db {
            const MIGRATIONS: &'static [$crate::Migration] = MIGRATIONS;
            const DIALECT: $crate::names::Dialect = $dialect;

            fn enqueue_in<'a>(
                conn: &'a mut $conn,
                tables: &'a $crate::Tables,
                msg: &'a ::outbox_core::NewMessage,
            ) -> impl ::std::future::Future<Output = ::outbox_core::Result<::outbox_core::Enqueued>> + Send + 'a {
                let msg = $crate::outbox::traced(msg);
                async move { enqueue_in(conn, tables, &msg).await }
            }

            fn enqueue_batch_in<'a>(
                conn: &'a mut $conn,
                tables: &'a $crate::Tables,
                msgs: &'a [::outbox_core::NewMessage],
            ) -> impl ::std::future::Future<Output = ::outbox_core::Result<Vec<::outbox_core::Enqueued>>> + Send + 'a {
                let msgs = $crate::outbox::traced_batch(msgs);
                async move { enqueue_batch_in(conn, tables, &msgs).await }
            }

            fn get_in<'a>(
                conn: &'a mut $conn,
                tables: &'a $crate::Tables,
                id: ::outbox_core::MessageId,
            ) -> impl ::std::future::Future<Output = ::outbox_core::Result<Option<::outbox_core::OutboxMessage>>> + Send + 'a {
                get_in(conn, tables, id)
            }
        }

        impl $crate::OutboxConnection for $conn {
            type Database = $db;

            fn enqueue<'a>(
                &'a mut self,
                msg: &'a ::outbox_core::NewMessage,
            ) -> impl ::std::future::Future<Output = ::outbox_core::Result<::outbox_core::Enqueued>> + Send + 'a {
                <$db as $crate::OutboxDatabase>::enqueue(self, msg)
            }

            fn enqueue_batch<'a>(
                &'a mut self,
                msgs: &'a [::outbox_core::NewMessage],
            ) -> impl ::std::future::Future<Output = ::outbox_core::Result<Vec<::outbox_core::Enqueued>>> + Send + 'a {
                <$db as $crate::OutboxDatabase>::enqueue_batch(self, msgs)
            }

            fn enqueue_in<'a>(
                &'a mut self,
                tables: &'a $crate::Tables,
                msg: &'a ::outbox_core::NewMessage,
            ) -> impl ::std::future::Future<Output = ::outbox_core::Result<::outbox_core::Enqueued>> + Send + 'a {
                <$db as $crate::OutboxDatabase>::enqueue_in(self, tables, msg)
            }

            fn enqueue_batch_in<'a>(
                &'a mut self,
                tables: &'a $crate::Tables,
                msgs: &'a [::outbox_core::NewMessage],
            ) -> impl ::std::future::Future<Output = ::outbox_core::Result<Vec<::outbox_core::Enqueued>>> + Send + 'a {
                <$db as $crate::OutboxDatabase>::enqueue_batch_in(self, tables, msgs)
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use impl_dialect;

/// The entry point for a service: a sqlx pool plus the after-commit signal its relay listens
/// to. Cheap to clone.
///
/// ```no_run
/// # async fn demo() -> outbox_store::Result<()> {
/// use outbox_store::{NewMessage, Outbox};
/// let pool = sqlx::PgPool::connect("postgres://localhost/app").await
///     .map_err(|e| outbox_store::Error::Database(e.into()))?;
/// let outbox = Outbox::new(pool);
/// outbox.migrate().await?;
/// let mut tx = outbox.begin().await?;
/// sqlx::query("UPDATE orders SET paid = true WHERE id = $1").bind(42_i64)
///     .execute(&mut *tx).await.map_err(|e| outbox_store::Error::Database(e.into()))?;
/// tx.enqueue(&NewMessage::new("order.paid", r#"{"order":42}"#).biz("order", "42")).await?;
/// tx.commit().await?; // commits, then wakes the relay
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Outbox<DB: OutboxDatabase> {
    pool: Pool<DB>,
    signal: CommitSignal,
    tables: Tables,
    /// While set, connections handed back to the pool are closed (when the pool was built to
    /// ask it: see [`Outbox::shed_connections`]).
    shed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// How many connections the pool has opened, when it was built to count them (see
    /// [`Outbox::connections_opened`]).
    opened: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// Whether the message table is as the migrations left it, checked now and then (see
    /// [`crate::relay::PlainTable`]).
    pub(crate) plain: std::sync::Arc<crate::relay::PlainTable>,
    /// MySQL/MariaDB: set once a locked claim learns that the server has no
    /// `idle_transaction_timeout` (MySQL), so later claims and settlements go straight to
    /// `wait_timeout` instead of trying it first (two round trips per claim and settlement).
    pub(crate) no_idle_transaction_timeout: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// MySQL/MariaDB: set once a locked claim has set `idle_transaction_timeout` (MariaDB), so
    /// later locked claims set it in their `BEGIN`'s round trip instead of in one of its own.
    pub(crate) has_idle_transaction_timeout: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The messages this process's unsettled locked claims hold, which its next claims leave
    /// out (see [`crate::relay::InFlight`]).
    pub(crate) in_flight: std::sync::Arc<crate::relay::InFlight>,
    /// MySQL/MariaDB: the heads of the open keys the claim's last walk found (see
    /// [`crate::relay::HeadMemo`]).
    pub(crate) heads: std::sync::Arc<crate::relay::HeadMemo>,
    /// PostgreSQL: where the locked claim's last window began (see
    /// [`crate::relay::WindowMemo`]).
    pub(crate) window: std::sync::Arc<crate::relay::WindowMemo>,
}

impl<DB: OutboxDatabase> Clone for Outbox<DB> {
    fn clone(&self) -> Self {
        Outbox {
            pool: self.pool.clone(),
            signal: self.signal.clone(),
            tables: self.tables.clone(),
            shed: self.shed.clone(),
            opened: self.opened.clone(),
            plain: self.plain.clone(),
            no_idle_transaction_timeout: self.no_idle_transaction_timeout.clone(),
            has_idle_transaction_timeout: self.has_idle_transaction_timeout.clone(),
            in_flight: self.in_flight.clone(),
            heads: self.heads.clone(),
            window: self.window.clone(),
        }
    }
}

impl<DB: OutboxDatabase> Outbox<DB> {
    /// Wraps a pool. Does not touch the database; call [`migrate`](Self::migrate) or
    /// [`check_schema`](Self::check_schema) at start-up.
    pub fn new(pool: Pool<DB>) -> Self {
        Outbox {
            pool,
            signal: CommitSignal::new(),
            tables: Tables::default(),
            shed: Default::default(),
            opened: None,
            plain: Default::default(),
            no_idle_transaction_timeout: Default::default(),
            has_idle_transaction_timeout: Default::default(),
            in_flight: Default::default(),
            heads: Default::default(),
            window: Default::default(),
        }
    }

    /// Wraps a pool built by [`AnyOutbox::connect`](crate::AnyOutbox::connect): `shed` is the
    /// flag its `after_release` hook reads ([`Outbox::shed_connections`] then closes the
    /// connections handed back), `opened` the count its `after_connect` hook adds to
    /// ([`Outbox::connections_opened`]).
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(dead_code))]
    pub(crate) fn with_pool_hooks(
        mut self,
        shed: std::sync::Arc<std::sync::atomic::AtomicBool>,
        opened: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> Self {
        self.shed = shed;
        self.opened = Some(opened);
        self
    }

    /// How many connections the pool has opened since it was built (the first included), when
    /// it was built by [`AnyOutbox::connect`](crate::AnyOutbox::connect); `None` for a pool of
    /// your own ([`Outbox::new`]), which this outbox cannot count. A relay over many stores on a
    /// crowded budget should open about one per turn of a store (see `outbox_relay::Budget`):
    /// a count that grows with the messages is connection churn (a TLS handshake, a forked
    /// PostgreSQL backend each). `outbox relay` exports it as
    /// `outbox_pool_connections_opened_total`.
    pub fn connections_opened(&self) -> Option<u64> {
        self.opened.as_ref().map(|n| n.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// This outbox with its tables in another schema and/or with another prefix ([`Tables`]):
    /// every statement it runs (migrations, enqueue, the relay's, the admin queries) uses
    /// those names. Fails for a schema on SQLite.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> outbox_store::Result<()> {
    /// use outbox_store::{Outbox, Tables};
    /// let outbox = Outbox::new(pool).with_tables(Tables::new(Some("billing"), "billing_")?)?;
    /// outbox.migrate().await?; // creates "billing".billing_message, ...
    /// # Ok(()) }
    /// ```
    pub fn with_tables(mut self, tables: Tables) -> Result<Self> {
        tables.check_for(DB::DIALECT)?;
        self.tables = tables;
        self.plain = Default::default();
        self.in_flight = Default::default();
        self.heads = Default::default();
        self.window = Default::default();
        Ok(self)
    }

    /// The names of this outbox's tables (for [`OutboxConnection::enqueue_in`] on your own
    /// transaction).
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Whether the pool can hand out a connection now without waiting: one is idle, or it may
    /// open another.
    pub fn spare_connection(&self) -> bool {
        self.pool.num_idle() > 0 || self.pool.size() < self.pool.options().get_max_connections()
    }

    /// While `on`, the pool keeps no connection it is handed back (it closes it; the pool
    /// opens new ones on demand), and the ones it holds unused now are closed. Only for pools
    /// built by [`AnyOutbox::connect`](crate::AnyOutbox::connect) on a database server; others
    /// only close their unused connections now.
    pub async fn shed_connections(&self, on: bool) {
        self.shed.store(on, std::sync::atomic::Ordering::Relaxed);
        if on {
            self.close_idle_connections().await;
        }
    }

    /// Closes connections the pool holds unused, as many as it holds beyond `keep`, then waits
    /// (at most `within`) until the pool holds at most `keep` connections in all, and says
    /// whether it got there. Those within `keep` stay open (a relay's parked share keeps its
    /// connection: see `outbox_relay::Budget`). A connection handed back to a shedding pool
    /// closes in a task of its own and counts against the pool (and the server) until that
    /// close completes: a relay sharing a crowded budget waits for it before handing its share
    /// on, so the next store's connection is opened only once this one is gone. The wait polls
    /// the pool's count every millisecond (sqlx announces no close).
    pub async fn close_down_to(&self, keep: u32, within: std::time::Duration) -> bool {
        poll_pool(within, || async {
            for _ in 0..self.pool.size().saturating_sub(keep) {
                match self.pool.try_acquire() {
                    Some(c) => {
                        let _ = c.close().await;
                    }
                    None => break,
                }
            }
            self.pool.size() <= keep
        })
        .await
    }

    /// Waits (at most `within`) until a statement can run on this pool without it holding more
    /// than `keep` connections: one is unused, or it holds fewer than `keep`; says whether it
    /// got there. A connection on its way back to the pool (sqlx pings it, in a task of its
    /// own, before it can be taken again) or closing counts against the pool and the server
    /// but cannot be taken: a relay under a crowded budget that claims again right after its
    /// batch, on the share it kept (`outbox_relay::Budget`), waits for that connection rather
    /// than opening another beside it. Polls every millisecond, as [`Self::close_down_to`].
    pub async fn room_to_claim(&self, keep: u32, within: std::time::Duration) -> bool {
        poll_pool(within, || async { self.pool.num_idle() > 0 || self.pool.size() < keep }).await
    }

    /// Closes the connections the pool holds unused now (the pool opens new ones on demand).
    /// Returns how many.
    pub async fn close_idle_connections(&self) -> usize {
        let mut closed = 0;
        for _ in 0..self.pool.num_idle() {
            match self.pool.try_acquire() {
                Some(c) => {
                    let _ = c.close().await;
                    closed += 1;
                }
                None => break,
            }
        }
        closed
    }

    /// The after-commit signal; the in-process relay waits on it.
    pub fn signal(&self) -> &CommitSignal {
        &self.signal
    }

    /// Creates or upgrades the outbox tables. Idempotent; safe to run from several processes at
    /// once (they serialize on a database lock).
    pub async fn migrate(&self) -> Result<MigrationReport> {
        DB::migrate_in(&self.pool, &self.tables).await
    }

    /// For tests of MySQL/MariaDB's claim (not API): with `true`, each walk of every key's head
    /// starts from the heads the last walk found whenever it has some (see
    /// `crate::relay::HeadMemo`), whatever a full walk costs; `false` goes back to the measured
    /// choice.
    #[doc(hidden)]
    pub fn __walk_heads_from_memo(&self, always: bool) {
        self.heads.memo.always_from_memo(always);
    }

    /// For tests of PostgreSQL's locked claim (not API): with `true`, each window starts where
    /// the last one began whenever that is remembered (see `crate::relay::WindowMemo`),
    /// however long ago the last full window ran; `false` goes back to the measured choice.
    #[doc(hidden)]
    pub fn __window_from_memo(&self, always: bool) {
        self.window.memo.always_from_memo(always);
    }

    /// Fails with a clear error unless the schema is exactly at this build's version.
    pub async fn check_schema(&self) -> Result<()> {
        let found = DB::schema_version_in(&self.pool, &self.tables).await?;
        crate::migrate::require(found, crate::SCHEMA_VERSION)
    }

    /// Begins a transaction whose [`commit`](OutboxTransaction::commit) wakes the relay.
    pub async fn begin(&self) -> Result<OutboxTransaction<'static, DB>> {
        let tx = crate::begin::begin(&self.pool).await.map_err(db)?;
        Ok(OutboxTransaction {
            tx,
            signal: self.signal.clone(),
            ids: Vec::new(),
            tables: self.tables.clone(),
        })
    }

    /// Commits a transaction you began yourself (with enqueues made through
    /// [`OutboxConnection`]) and wakes the relay.
    pub async fn commit(&self, tx: Transaction<'_, DB>) -> Result<()> {
        tx.commit().await.map_err(db)?;
        self.signal.wake();
        Ok(())
    }

    /// Enqueues one message in a transaction of its own (when there is no business write to
    /// make atomic with it) and wakes the relay.
    pub async fn enqueue(&self, msg: &NewMessage) -> Result<Enqueued> {
        let mut tx = self.begin().await?;
        let enqueued = tx.enqueue(msg).await?;
        tx.commit().await?;
        Ok(enqueued)
    }

    /// Reads one message.
    pub async fn get(&self, id: MessageId) -> Result<Option<OutboxMessage>> {
        let mut conn = self.pool.acquire().await.map_err(db)?;
        DB::get_in(&mut conn, &self.tables, id).await
    }
}

/// A transaction that remembers what it enqueued and, on [`commit`](Self::commit), hands those
/// ids to the relay. Derefs to the database connection, so business statements run on
/// `&mut *tx` exactly as on a sqlx transaction. Dropping it without commit rolls back.
#[derive(Debug)]
pub struct OutboxTransaction<'c, DB: OutboxDatabase> {
    tx: Transaction<'c, DB>,
    signal: CommitSignal,
    ids: Vec<MessageId>,
    tables: Tables,
}

impl<'c, DB: OutboxDatabase> OutboxTransaction<'c, DB> {
    /// Enqueues one message in this transaction.
    pub async fn enqueue(&mut self, msg: &NewMessage) -> Result<Enqueued> {
        let enqueued = DB::enqueue_in(&mut self.tx, &self.tables, msg).await?;
        if enqueued.created {
            self.ids.push(enqueued.id);
        }
        Ok(enqueued)
    }

    /// Enqueues several messages in this transaction.
    pub async fn enqueue_batch(&mut self, msgs: &[NewMessage]) -> Result<Vec<Enqueued>> {
        let out = DB::enqueue_batch_in(&mut self.tx, &self.tables, msgs).await?;
        self.ids.extend(out.iter().filter(|e| e.created).map(|e| e.id));
        Ok(out)
    }

    /// Commits, then signals the relay with the ids enqueued here.
    ///
    /// The ids are announced to the signal before the commit, so that the database's push
    /// notification for them wakes nothing (the signal does). If the commit fails, or this
    /// future is dropped before the commit returns, the relay is woken without ids instead:
    /// the commit may have happened all the same.
    pub async fn commit(self) -> Result<()> {
        let Self { tx, signal, ids, .. } = self;
        signal.announcing(&ids);
        let unsure = WakeUnlessDone(&signal);
        tx.commit().await.map_err(db)?;
        std::mem::forget(unsure);
        signal.committed(&ids);
        Ok(())
    }

    /// Rolls back; nothing enqueued here is ever published.
    pub async fn rollback(self) -> Result<()> {
        self.tx.rollback().await.map_err(db)
    }

    /// The underlying sqlx transaction (its commit will not signal the relay).
    pub fn into_inner(self) -> Transaction<'c, DB> {
        self.tx
    }
}

/// Wakes the relay when dropped: the guard of a commit whose outcome its caller did not learn.
/// Forgotten once the commit returned.
struct WakeUnlessDone<'a>(&'a CommitSignal);

impl Drop for WakeUnlessDone<'_> {
    fn drop(&mut self) {
        self.0.wake();
    }
}

impl<DB: OutboxDatabase> Deref for OutboxTransaction<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl<DB: OutboxDatabase> DerefMut for OutboxTransaction<'_, DB> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

/// Runs `check` until it holds or `within` has passed (at least once), every millisecond: a
/// pool's counts, which sqlx changes without telling (a connection released or closed in a
/// task of its own). Says whether it held.
async fn poll_pool<F, Fut>(within: std::time::Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}
