//! SQLite 3.37+ (STRICT tables, `RETURNING`): the embedded default, for one relay.
//!
//! SQLite has one writer at a time, so claiming needs no `SKIP LOCKED`: a write transaction
//! (`BEGIN IMMEDIATE`) is already exclusive. Timestamps are INTEGER milliseconds since the Unix
//! epoch (UTC). Use [`connect_options`] for a pool: WAL journal, a busy timeout and foreign keys.
//! [`get`] reads text that is not valid UTF-8, which only a foreign writer can store, as U+FFFD.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::{Enqueued, Error, MessageId, NewMessage, OutboxMessage, Result};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteRow, SqliteSynchronous};
use sqlx::{Row, Sqlite, SqlitePool};

use crate::common::{decoded_cells, enqueue_args, enqueued_before, get as cell, At, Cells};
use crate::error::db;
use crate::migrate::{recorded_version, upgrade, Migration, MigrationReport, Migrator, Schema};
use crate::names::{Dialect, Tables};
use crate::outbox::impl_dialect;

/// The shipped migrations, from `migrations/sqlite/`.
pub const MIGRATIONS: &[Migration] = crate::migrate::outbox_migrations!("sqlite");

const ENQUEUE: &str = "INSERT INTO outbox_message \
    (biz_type, biz_key, topic, msg_key, tag, headers, payload, max_attempts, next_attempt_at, created_by, updated_by) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, \
            COALESCE(?9, CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + COALESCE(?10, 0)), ?11, ?11) \
    ON CONFLICT (biz_type, biz_key) DO NOTHING RETURNING id";

const EXISTING: &str = "SELECT id FROM outbox_message WHERE biz_type = ?1 AND biz_key = ?2";

/// Columns read into an [`OutboxMessage`], in [`decode_message`]'s order.
pub(crate) const MESSAGE_COLUMNS: &str = "id, biz_type, biz_key, topic, msg_key, tag, headers, payload, \
    status, attempts, max_attempts, next_attempt_at, last_attempt_at, last_error, lease_owner, \
    lease_until, created_by, updated_by, created_at, updated_at";

/// Connection options for an outbox on SQLite: creates the file if missing, WAL journal (readers
/// never block the writer), `synchronous = NORMAL` (durable at each WAL checkpoint, the usual
/// setting with WAL), a 5 s busy timeout and foreign keys on.
pub fn connect_options(url: &str) -> Result<SqliteConnectOptions> {
    let opts =
        SqliteConnectOptions::from_str(url).map_err(|e| Error::Config(format!("invalid SQLite URL: {e}")))?;
    Ok(opts
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(true))
}

mod admin;
mod relay;

impl_dialect!(SqliteConnection, Sqlite, Dialect::Sqlite, id = "?1", read = read_message);

/// The migrator of any [`Schema`] (the outbox's, the inbox's): one `BEGIN IMMEDIATE`
/// transaction, which takes the write lock at once, so concurrent migrators serialize.
impl Migrator for Sqlite {
    async fn migrate_schema(
        pool: &SqlitePool,
        schema: &'static Schema,
        tables: &Tables,
        migrations: &'static [Migration],
    ) -> Result<MigrationReport> {
        tables.check_for(Dialect::Sqlite)?;
        let db = schema.map_error;
        let mut tx = crate::begin::begin_with(pool, "BEGIN IMMEDIATE").await.map_err(db)?;
        let report = upgrade::<Sqlite>(&mut tx, schema, tables, Dialect::Sqlite, migrations).await?;
        tx.commit().await.map_err(db)?;
        Ok(report)
    }

    async fn version_on(
        conn: &mut SqliteConnection,
        schema: &'static Schema,
        tables: &Tables,
    ) -> Result<i64> {
        tables.check_for(Dialect::Sqlite)?;
        // Names matched Tables' pattern: safe inside a literal.
        let table = tables.name(schema.version_table);
        let exists = format!("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '{table}'");
        let max = format!("SELECT COALESCE(MAX(version), 0) FROM {table}");
        recorded_version::<Sqlite>(conn, schema, exists, max).await
    }
}

/// [`enqueue`] into the tables named by `tables`.
pub async fn enqueue_in(conn: &mut SqliteConnection, tables: &Tables, msg: &NewMessage) -> Result<Enqueued> {
    msg.validate()?;
    let deliver_at = msg.deliver_at.map(|t| t.timestamp_millis());
    let args = enqueue_args::<Sqlite, _>(msg, deliver_at, msg.delay_micros().map(|us| us / 1000), 1)?;
    let id: Option<i64> = sqlx::query_scalar_with(&tables.render(Dialect::Sqlite, ENQUEUE), args)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db)?;
    if let Some(id) = id {
        return Ok(Enqueued { id: MessageId(id), created: true });
    }
    enqueued_before::<Sqlite>(conn, tables, EXISTING, msg).await
}

/// [`enqueue_batch`] into the tables named by `tables`: one in-process statement each (SQLite
/// has no network round trip).
pub async fn enqueue_batch_in(
    conn: &mut SqliteConnection,
    tables: &Tables,
    msgs: &[NewMessage],
) -> Result<Vec<Enqueued>> {
    crate::common::enqueue_each::<Sqlite>(conn, tables, msgs).await
}

/// Milliseconds since the epoch to a UTC instant.
pub(crate) fn from_millis(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

/// How a reader treats a text column that is not valid UTF-8. SQLite stores whatever bytes a
/// writer gives it (`CAST(x'fffe' AS TEXT)`); only a foreign writer can store such a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Utf8 {
    /// The relay: the row cannot be published as it is, so it fails alone with the column named.
    Strict,
    /// People and applications reading a row (`get`, `outbox list` and `show`): the bad bytes
    /// read as U+FFFD, so a row the relay failed can be seen and cancelled.
    Lossy,
}

/// Decodes a row selected with [`MESSAGE_COLUMNS`] for the relay ([`Utf8::Strict`]).
pub(crate) fn decode_message(row: &SqliteRow) -> Result<OutboxMessage> {
    decode_message_as(row, Utf8::Strict)
}

/// Decodes a row selected with [`MESSAGE_COLUMNS`] for a reader ([`Utf8::Lossy`]).
pub(crate) fn read_message(row: &SqliteRow) -> Result<OutboxMessage> {
    decode_message_as(row, Utf8::Lossy)
}

fn decode_message_as(row: &SqliteRow, utf8: Utf8) -> Result<OutboxMessage> {
    crate::common::decode_message_with(row, &Text { row, utf8 })
}

/// A message row's cells with text checked byte by byte: SQLite stores whatever bytes a
/// writer gives it, and a reader may ask for invalid UTF-8 to read as U+FFFD.
struct Text<'r> {
    row: &'r SqliteRow,
    utf8: Utf8,
}

impl Cells for Text<'_> {
    fn text(&self, col: &'static str, at: At) -> Result<String> {
        self.opt_text(col, at)?.ok_or_else(|| at.malformed(format!("{col} is NULL")))
    }

    fn opt_text(&self, col: &'static str, at: At) -> Result<Option<String>> {
        let Some(bytes) = self.row.try_get::<Option<&[u8]>, _>(col).map_err(db)? else {
            return Ok(None);
        };
        match (std::str::from_utf8(bytes), self.utf8) {
            (Ok(s), _) => Ok(Some(s.to_owned())),
            (Err(_), Utf8::Lossy) => Ok(Some(String::from_utf8_lossy(bytes).into_owned())),
            (Err(e), Utf8::Strict) => {
                Err(at.malformed(format!("{col} is not valid UTF-8 (at byte {})", e.valid_up_to())))
            }
        }
    }

    fn time(&self, col: &'static str, at: At) -> Result<DateTime<Utc>> {
        self.row.time(col, at)
    }

    fn opt_time(&self, col: &'static str, at: At) -> Result<Option<DateTime<Utc>>> {
        self.row.opt_time(col, at)
    }
}

impl Cells for SqliteRow {
    decoded_cells!(text: String, opt_text: Option<String>);

    fn time(&self, col: &'static str, at: At) -> Result<DateTime<Utc>> {
        let ms: i64 = cell(self, col)?;
        from_millis(ms).ok_or_else(|| at.malformed(format!("{col} = {ms} is not a valid time")))
    }

    fn opt_time(&self, col: &'static str, at: At) -> Result<Option<DateTime<Utc>>> {
        let ms: Option<i64> = cell(self, col)?;
        ms.map(|ms| from_millis(ms).ok_or_else(|| at.malformed(format!("{col} = {ms} is not a valid time"))))
            .transpose()
    }
}
