//! PostgreSQL 12+.
//!
//! Enqueue is one `INSERT ... ON CONFLICT (biz_type, biz_key) DO UPDATE ... RETURNING` round
//! trip: the no-op update makes a duplicate return the existing row's id even when the first
//! insert is concurrent (it waits for it), and `xmax = 0` tells a fresh row from an existing one.
//! A batch is one `INSERT ... SELECT FROM unnest(...)`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use outbox_core::{Enqueued, Error, MessageId, NewMessage, OutboxMessage, Result};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{PgPool, Postgres, Row};

use crate::common::{decoded_cells, enqueue_args, max_attempts, Cells};
use crate::error::db;
use crate::migrate::{recorded_version, upgrade, Migration, MigrationReport, Migrator, Schema};
use crate::names::{Dialect, Tables};
use crate::outbox::impl_dialect;

/// The shipped migrations, from `migrations/postgres/`.
pub const MIGRATIONS: &[Migration] = crate::migrate::outbox_migrations!("postgres");

const ENQUEUE: &str = "INSERT INTO outbox_message \
    (biz_type, biz_key, topic, msg_key, tag, headers, payload, max_attempts, next_attempt_at, created_by, updated_by) \
    VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, \
            COALESCE($9::timestamptz, now() + COALESCE($10::bigint, 0) * interval '1 microsecond'), $11, $11) \
    ON CONFLICT (biz_type, biz_key) DO UPDATE SET biz_type = EXCLUDED.biz_type \
    RETURNING id, (xmax = 0) AS created";

/// [`ENQUEUE`] for a message without a business key: nothing can conflict (the unique index
/// ignores NULLs), so no `ON CONFLICT`, whose speculative insertion costs an extra check of the
/// arbiter index on every row (measured by `outbox bench --scenario enqueue`).
const ENQUEUE_PLAIN: &str = "INSERT INTO outbox_message \
    (biz_type, biz_key, topic, msg_key, tag, headers, payload, max_attempts, next_attempt_at, created_by, updated_by) \
    VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, \
            COALESCE($9::timestamptz, now() + COALESCE($10::bigint, 0) * interval '1 microsecond'), $11, $11) \
    RETURNING id, true AS created";

const ENQUEUE_BATCH: &str = "INSERT INTO outbox_message \
    (biz_type, biz_key, topic, msg_key, tag, headers, payload, max_attempts, next_attempt_at, created_by, updated_by) \
    SELECT t.biz_type, t.biz_key, t.topic, t.msg_key, t.tag, t.headers::jsonb, t.payload, t.max_attempts, \
           COALESCE(t.deliver_at, now() + COALESCE(t.delay_us, 0) * interval '1 microsecond'), t.created_by, t.created_by \
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], \
                $8::int4[], $9::timestamptz[], $10::int8[], $11::text[]) \
         WITH ORDINALITY AS t(biz_type, biz_key, topic, msg_key, tag, headers, payload, max_attempts, \
                              deliver_at, delay_us, created_by, ord) \
    ORDER BY t.ord \
    ON CONFLICT (biz_type, biz_key) DO UPDATE SET biz_type = EXCLUDED.biz_type \
    RETURNING id, biz_type, biz_key, (xmax = 0) AS created";

/// A time column as read by the relay and the admin queries: clamped into
/// 1970-01-01 .. 9999-12-31, so that a foreign row holding `infinity`, `-infinity` or a year
/// past chrono's range (which the driver's decoder cannot represent, and panicked on) reads as
/// a time at the edge of the range. Schema version 5 refuses such values at INSERT; this keeps
/// rows written before it readable. NULL stays NULL.
macro_rules! pg_time {
    ($m:literal, $col:literal) => {
        concat!(
            "CASE WHEN ",
            $m,
            ".",
            $col,
            " < '1970-01-01 00:00:00+00'::timestamptz THEN '1970-01-01 00:00:00+00'::timestamptz ",
            "WHEN ",
            $m,
            ".",
            $col,
            " > '9999-12-31 00:00:00+00'::timestamptz THEN '9999-12-31 00:00:00+00'::timestamptz ",
            "ELSE ",
            $m,
            ".",
            $col,
            " END AS ",
            $col
        )
    };
}

/// Columns read into an [`OutboxMessage`] from the table or alias `$m`, in [`decode_message`]'s
/// order.
macro_rules! message_columns {
    ($m:literal) => {
        concat!(
            $m,
            ".id, ",
            $m,
            ".biz_type, ",
            $m,
            ".biz_key, ",
            $m,
            ".topic, ",
            $m,
            ".msg_key, ",
            $m,
            ".tag, ",
            $m,
            ".headers::text AS headers, ",
            $m,
            ".payload, ",
            $m,
            ".status, ",
            $m,
            ".attempts, ",
            $m,
            ".max_attempts, ",
            pg_time!($m, "next_attempt_at"),
            ", ",
            pg_time!($m, "last_attempt_at"),
            ", ",
            $m,
            ".last_error, ",
            $m,
            ".lease_owner, ",
            pg_time!($m, "lease_until"),
            ", ",
            $m,
            ".created_by, ",
            $m,
            ".updated_by, ",
            pg_time!($m, "created_at"),
            ", ",
            pg_time!($m, "updated_at")
        )
    };
}

/// Columns read into an [`OutboxMessage`], in [`decode_message`]'s order.
pub(crate) const MESSAGE_COLUMNS: &str = message_columns!("outbox_message");

mod ack;
mod admin;
mod claim_tx;
mod relay;
pub use claim_tx::ClaimTx;
pub(crate) use relay::deliveries_locked;
pub use relay::PgLock;

impl_dialect!(PgConnection, Postgres, Dialect::Postgres, id = "$1", read = decode_message);

/// The migrator of any [`Schema`] (the outbox's, the inbox's): one transaction holding the
/// transaction-scoped advisory lock `schema.pg_lock`, so concurrent migrators serialize and DDL
/// and version rows commit together.
impl Migrator for Postgres {
    async fn migrate_schema(
        pool: &PgPool,
        schema: &'static Schema,
        tables: &Tables,
        migrations: &'static [Migration],
    ) -> Result<MigrationReport> {
        let db = schema.map_error;
        let mut tx = crate::begin::begin(pool).await.map_err(db)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(tables.pg_lock(schema.pg_lock))
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        if let Some(name) = tables.schema() {
            // Created only when missing: CREATE SCHEMA needs the CREATE privilege on the
            // database even with IF NOT EXISTS, which a role owning only its schema lacks.
            let found: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_namespace WHERE nspname = $1")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?;
            if found.is_none() {
                // `name` matched Tables' pattern ([a-z_][a-z0-9_]*): nothing to escape.
                sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS \"{name}\""))
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?;
            }
        }
        let report = upgrade::<Postgres>(&mut tx, schema, tables, Dialect::Postgres, migrations).await?;
        tx.commit().await.map_err(db)?;
        Ok(report)
    }

    async fn version_on(conn: &mut PgConnection, schema: &'static Schema, tables: &Tables) -> Result<i64> {
        // Names matched Tables' pattern: safe inside a literal.
        let table = tables.table(Dialect::Postgres, schema.version_table);
        let exists = format!("SELECT CASE WHEN to_regclass('{table}') IS NULL THEN 0::int8 ELSE 1::int8 END");
        let max = format!("SELECT COALESCE(MAX(version), 0)::int8 FROM {table}");
        recorded_version::<Postgres>(conn, schema, exists, max).await
    }
}

/// [`enqueue`] into the tables named by `tables`.
pub async fn enqueue_in(conn: &mut PgConnection, tables: &Tables, msg: &NewMessage) -> Result<Enqueued> {
    msg.validate()?;
    let sql = if msg.biz.is_some() { ENQUEUE } else { ENQUEUE_PLAIN };
    let args = enqueue_args::<Postgres, _>(msg, msg.deliver_at, msg.delay_micros(), 1)?;
    let row = sqlx::query_with(&tables.render(Dialect::Postgres, sql), args)
        .fetch_one(&mut *conn)
        .await
        .map_err(db)?;
    Ok(Enqueued {
        id: MessageId(row.try_get("id").map_err(db)?),
        created: row.try_get("created").map_err(db)?,
    })
}

/// [`enqueue_batch`] into the tables named by `tables`, in one statement.
pub async fn enqueue_batch_in(
    conn: &mut PgConnection,
    tables: &Tables,
    msgs: &[NewMessage],
) -> Result<Vec<Enqueued>> {
    for m in msgs {
        m.validate()?;
    }
    // A batch may name the same biz pair twice; ON CONFLICT cannot touch a row twice in one
    // statement, so only the first occurrence is sent and later ones point at it.
    let mut first_of: HashMap<(&str, &str), usize> = HashMap::new();
    let mut send: Vec<usize> = Vec::with_capacity(msgs.len());
    let mut alias: Vec<Option<usize>> = vec![None; msgs.len()];
    for (i, m) in msgs.iter().enumerate() {
        if let Some((t, k)) = &m.biz {
            if let Some(&j) = first_of.get(&(t.as_str(), k.as_str())) {
                alias[i] = Some(j);
                continue;
            }
            first_of.insert((t.as_str(), k.as_str()), i);
        }
        send.push(i);
    }
    let col = |f: &dyn Fn(&NewMessage) -> Option<String>| -> Vec<Option<String>> {
        send.iter().map(|&i| f(&msgs[i])).collect()
    };
    let max_attempts: Vec<Option<i32>> =
        send.iter().map(|&i| max_attempts(&msgs[i])).collect::<Result<_>>()?;
    let deliver_at: Vec<Option<DateTime<Utc>>> = send.iter().map(|&i| msgs[i].deliver_at).collect();
    let delay_us: Vec<Option<i64>> = send.iter().map(|&i| msgs[i].delay_micros()).collect();
    let rows = sqlx::query(&tables.render(Dialect::Postgres, ENQUEUE_BATCH))
        .bind(col(&|m| m.biz.as_ref().map(|b| b.0.clone())))
        .bind(col(&|m| m.biz.as_ref().map(|b| b.1.clone())))
        .bind(col(&|m| Some(m.topic.clone())))
        .bind(col(&|m| m.key.clone()))
        .bind(col(&|m| m.tag.clone()))
        .bind(col(&|m| Some(m.headers_json())))
        .bind(col(&|m| Some(m.payload.clone())))
        .bind(max_attempts)
        .bind(deliver_at)
        .bind(delay_us)
        .bind(col(&|m| m.created_by.clone()))
        .fetch_all(&mut *conn)
        .await
        .map_err(db)?;

    let mut by_biz: HashMap<(String, String), Enqueued> = HashMap::new();
    let mut plain: Vec<Enqueued> = Vec::new();
    for row in &rows {
        let e = Enqueued {
            id: MessageId(row.try_get("id").map_err(db)?),
            created: row.try_get("created").map_err(db)?,
        };
        let bt: Option<String> = row.try_get("biz_type").map_err(db)?;
        let bk: Option<String> = row.try_get("biz_key").map_err(db)?;
        match (bt, bk) {
            (Some(t), Some(k)) => {
                by_biz.insert((t, k), e);
            }
            _ => plain.push(e),
        }
    }
    // Rows without a biz key are inserted in input order, so their ids ascend in that order.
    plain.sort_by_key(|e| e.id);
    let mut plain = plain.into_iter();
    let mut out: Vec<Enqueued> = Vec::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        let e = if let Some(j) = alias[i] {
            Enqueued { id: out[j].id, created: false }
        } else if let Some((t, k)) = &m.biz {
            *by_biz
                .get(&(t.clone(), k.clone()))
                .ok_or_else(|| Error::Database("batch insert returned no row for a biz key".into()))?
        } else {
            plain
                .next()
                .ok_or_else(|| Error::Database("batch insert returned fewer rows than sent".into()))?
        };
        out.push(e);
    }
    Ok(out)
}

/// Decodes a row selected with [`MESSAGE_COLUMNS`].
pub(crate) fn decode_message(row: &PgRow) -> Result<OutboxMessage> {
    crate::common::decode_message_with(row, row)
}

impl Cells for PgRow {
    decoded_cells!(
        text: String,
        opt_text: Option<String>,
        time: DateTime<Utc>,
        opt_time: Option<DateTime<Utc>>,
    );
}
