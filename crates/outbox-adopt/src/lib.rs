//! Adopt an existing message table: the legacy application keeps writing its own table, in its
//! own transactions, and `outbox relay` delivers every row it inserts and writes the outcome back
//! into that table's status, retry and reason columns.
//!
//! A [`BridgeConfig`] (one `[[adopt]]` section of the relay's TOML) is checked into a
//! [`Bridge`]; [`install`] puts the bridge's triggers into the legacy database (the SQL is in
//! [`sql`](crate) and printable with [`script`]), takes over the rows already pending once, and
//! records the bridge; [`check`] compares what is installed with the mapping and reports writes
//! to the legacy table by anyone else (a legacy scanner still running); [`remove`] takes it all
//! out again. PostgreSQL and MySQL/MariaDB. The design and its measured cost: docs/adopt.md.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod spec;
mod sql;

use sqlx::{MySqlPool, PgPool};

pub use outbox_store::{Dialect, Tables};
pub use spec::{
    Bridge, BridgeConfig, Ident, Literal, StatusMap, StatusValuesConfig, TopicSource, MAX_BRIDGE_NAME,
};
pub use sql::LegacyColumns;
use sql::Sql;

/// Rows taken over per transaction when a bridge is installed.
const TAKE_OVER_BATCH: u32 = 500;

/// What went wrong, and where.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    /// The mapping is wrong: `key` names the TOML key.
    #[error("{key}: {message}")]
    Config {
        /// The key, e.g. `adopt.legacy.status_values.sent`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// The legacy table does not match the mapping (a missing column, a non-integer id).
    #[error("adopt {bridge}: {message}")]
    Legacy {
        /// The bridge.
        bridge: String,
        /// What the database said is missing or wrong.
        message: String,
    },
    /// A statement failed.
    #[error("adopt {bridge}: {doing}: {source}")]
    Database {
        /// The bridge.
        bridge: String,
        /// What was being done.
        doing: &'static str,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
}

impl AdoptError {
    pub(crate) fn config(key: &str, message: impl Into<String>) -> AdoptError {
        AdoptError::Config { key: key.to_owned(), message: message.into() }
    }
}

/// A connection pool to the legacy database (which also holds the outbox tables).
#[derive(Debug, Clone, Copy)]
pub enum Db<'a> {
    /// PostgreSQL.
    Postgres(&'a PgPool),
    /// MySQL or MariaDB.
    MySql(&'a MySqlPool),
}

impl Db<'_> {
    /// The dialect of the pool.
    pub fn dialect(&self) -> Dialect {
        match self {
            Db::Postgres(_) => Dialect::Postgres,
            Db::MySql(_) => Dialect::MySql,
        }
    }
}

/// What [`install`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallReport {
    /// Legacy rows pending at install time that became messages now (0 on a second install).
    pub taken_over: u64,
    /// The triggers in place.
    pub triggers: Vec<String>,
}

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// Differences between the database and the mapping; empty when the bridge is as mapped.
    pub problems: Vec<String>,
    /// Times the legacy status/retry columns were changed by someone other than the bridge
    /// since it was installed (a legacy scanner or sender still running double-sends).
    pub foreign_writes: i64,
    /// When that last happened (UTC, RFC 3339).
    pub last_foreign_write_at: Option<String>,
    /// Legacy rows taken over at install.
    pub taken_over: i64,
}

impl CheckReport {
    /// True when the bridge is installed as mapped and nobody else writes the legacy table.
    pub fn ok(&self) -> bool {
        self.problems.is_empty() && self.foreign_writes == 0
    }
}

/// `$body` with `$pool` bound to the pool of either database: one text, compiled for each.
macro_rules! on_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            Db::Postgres($pool) => $body,
            Db::MySql($pool) => $body,
        }
    };
}

/// Takes over one batch of pending legacy rows in transaction `$tx`: `$message_id` inserts the
/// message of legacy row `$id` and evaluates to its id; the link follows. Evaluates to how many.
macro_rules! take_over_batch {
    ($tx:ident, $sql:ident, $bridge:ident, $lock:expr, $id:ident => $message_id:expr) => {{
        let ids: Vec<i64> = sqlx::query_scalar(&format!("{}{}", $sql.untaken(TAKE_OVER_BATCH), $lock))
            .fetch_all(&mut *$tx)
            .await
            .map_err(db_err($bridge, "finding the pending legacy rows"))?;
        for $id in &ids {
            let message_id: i64 = $message_id;
            sqlx::query(&$sql.link())
                .bind($id)
                .bind(message_id)
                .execute(&mut *$tx)
                .await
                .map_err(db_err($bridge, "linking"))?;
        }
        ids.len()
    }};
}

fn db_err<'a>(bridge: &'a Bridge, doing: &'static str) -> impl FnOnce(sqlx::Error) -> AdoptError + 'a {
    move |source| AdoptError::Database { bridge: bridge.name.clone(), doing, source }
}

/// Reads the legacy table's columns: every mapped column must exist, the id must be an
/// integer; the reason column's length bounds what is written to it.
pub async fn inspect(db: Db<'_>, bridge: &Bridge) -> Result<LegacyColumns, AdoptError> {
    let schema = bridge.schema.as_ref().map(|s| s.as_str().to_owned());
    let table = bridge.table.as_str();
    let sql = if db.dialect() == Dialect::Postgres {
        "SELECT column_name::text, data_type::text, character_maximum_length::bigint \
         FROM information_schema.columns WHERE table_schema = COALESCE($1, current_schema()) AND table_name = $2"
    } else {
        "SELECT CAST(column_name AS CHAR), CAST(data_type AS CHAR), CAST(character_maximum_length AS SIGNED) \
         FROM information_schema.columns WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?"
    };
    let rows: Vec<(String, String, Option<i64>)> = on_pool!(db, pool => sqlx::query_as(sql)
        .bind(&schema)
        .bind(table)
        .fetch_all(pool)
        .await
        .map_err(db_err(bridge, "reading the legacy table's columns"))?);
    let legacy = |message: String| AdoptError::Legacy { bridge: bridge.name.clone(), message };
    if rows.is_empty() {
        return Err(legacy(format!(
            "table {table} not found (schema {})",
            schema.as_deref().unwrap_or("of the connection")
        )));
    }
    let find = |c: &Ident| rows.iter().find(|(n, _, _)| n == c.as_str());
    let mut mapped = vec![&bridge.id, &bridge.payload];
    if let TopicSource::Column(c) = &bridge.topic {
        mapped.push(c);
    }
    mapped.extend(bridge.key.iter().chain(bridge.tag.iter()));
    if let Some((t, k)) = &bridge.biz {
        mapped.extend([t, k]);
    }
    mapped.extend(bridge.written_columns());
    let mut missing: Vec<&str> = mapped.iter().filter(|c| find(c).is_none()).map(|c| c.as_str()).collect();
    missing.dedup();
    if !missing.is_empty() {
        let mut have: Vec<&str> = rows.iter().map(|(n, _, _)| n.as_str()).collect();
        have.sort_unstable();
        return Err(legacy(format!(
            "table {table} has no column {} (its columns: {})",
            missing.join(", "),
            have.join(", ")
        )));
    }
    let id_type = find(&bridge.id).map(|(_, t, _)| t.to_ascii_lowercase()).unwrap_or_default();
    if !["bigint", "integer", "int", "smallint", "mediumint", "tinyint"].contains(&id_type.as_str()) {
        return Err(legacy(format!("id column {} is {id_type}, not an integer", bridge.id.as_str())));
    }
    let reason_len = bridge
        .reason
        .as_ref()
        .and_then(find)
        .and_then(|(_, _, len)| *len)
        .map(|l| u32::try_from(l).unwrap_or(u32::MAX));
    Ok(LegacyColumns { reason_len })
}

/// The statements [`install`] runs, in order, as one script to review (`outbox adopt --print`).
pub fn script(bridge: &Bridge, dialect: Dialect, tables: &Tables, cols: &LegacyColumns) -> String {
    let sql = Sql { b: bridge, d: dialect, t: tables, cols };
    let mut out = format!(
        "-- outbox adopt {}: legacy table {} ({dialect:?}). Generated by `outbox adopt --print`.\n\
         -- Then every pending legacy row not yet linked is taken over once, oldest first.\n",
        bridge.name,
        sql.legacy()
    );
    let end = if dialect == Dialect::Postgres { ";\n\n" } else { "\n$$\n\n" };
    if dialect == Dialect::MySql {
        out.push_str("DELIMITER $$\n\n");
    }
    for s in sql.shared_tables().iter().chain(&sql.drops()).chain(&sql.triggers()) {
        out.push_str(s);
        out.push_str(end);
    }
    if dialect == Dialect::MySql {
        out.push_str("DELIMITER ;\n");
    }
    out
}

fn definition(sql: &Sql<'_>) -> String {
    sql.triggers().join(";\n")
}

/// Installs (or re-installs, after a mapping change) the bridge, then takes over the legacy
/// rows pending now, oldest first, each once: a row already linked to a message is never taken
/// again. On PostgreSQL all of it is one transaction, and the triggers' lock waits for the
/// legacy transactions in flight, so every row is either captured or taken over, in id order.
/// On MySQL/MariaDB DDL commits by itself; `CREATE TRIGGER` still waits for the transactions
/// that hold the table, so no row is missed, but a row inserted during the take-over may be
/// delivered before an older pending row of the same key (docs/adopt.md).
pub async fn install(db: Db<'_>, tables: &Tables, bridge: &Bridge) -> Result<InstallReport, AdoptError> {
    let cols = inspect(db, bridge).await?;
    let sql = Sql { b: bridge, d: db.dialect(), t: tables, cols: &cols };
    let def = definition(&sql);
    let upsert_pg = format!(
        "INSERT INTO {} (bridge, legacy_table, definition) VALUES ($1, $2, $3) \
         ON CONFLICT (bridge) DO UPDATE SET legacy_table = EXCLUDED.legacy_table, definition = EXCLUDED.definition, \
         installed_at = now()",
        sql.obj("outbox_adopt_bridge")
    );
    let upsert_my = format!(
        "INSERT INTO {} (bridge, legacy_table, definition) VALUES (?, ?, ?) \
         ON DUPLICATE KEY UPDATE legacy_table = VALUES(legacy_table), definition = VALUES(definition), \
         installed_at = UTC_TIMESTAMP(6)",
        sql.obj("outbox_adopt_bridge")
    );
    let statements: Vec<String> =
        sql.shared_tables().into_iter().chain(sql.drops()).chain(sql.triggers()).collect();
    let taken_over = match db {
        Db::Postgres(pool) => {
            let mut tx = quiet_tx(pool, bridge, "beginning the install").await?;
            for s in &statements {
                sqlx::raw_sql(s).execute(&mut *tx).await.map_err(db_err(bridge, "installing the bridge"))?;
            }
            sqlx::query(&upsert_pg)
                .bind(&bridge.name)
                .bind(sql.legacy())
                .bind(&def)
                .execute(&mut *tx)
                .await
                .map_err(db_err(bridge, "recording the bridge"))?;
            let mut n = 0u64;
            loop {
                let taken = take_over_batch!(tx, sql, bridge, "", id => sqlx::query_scalar(&sql.take_over())
                    .bind(id)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db_err(bridge, "taking over a pending legacy row"))?);
                n += taken as u64;
                if taken < TAKE_OVER_BATCH as usize {
                    break;
                }
            }
            tx.commit().await.map_err(db_err(bridge, "committing the install"))?;
            n
        }
        Db::MySql(pool) => {
            for s in &statements {
                sqlx::raw_sql(s).execute(pool).await.map_err(db_err(bridge, "installing the bridge"))?;
            }
            sqlx::query(&upsert_my)
                .bind(&bridge.name)
                .bind(sql.legacy())
                .bind(&def)
                .execute(pool)
                .await
                .map_err(db_err(bridge, "recording the bridge"))?;
            let mut n = 0u64;
            loop {
                let mut tx = pool.begin().await.map_err(db_err(bridge, "beginning the take-over"))?;
                let taken = take_over_batch!(tx, sql, bridge, " FOR UPDATE", id => {
                    let done = sqlx::query(&sql.take_over())
                        .bind(id)
                        .execute(&mut *tx)
                        .await
                        .map_err(db_err(bridge, "taking over a pending legacy row"))?;
                    i64::try_from(done.last_insert_id()).unwrap_or(i64::MAX)
                });
                tx.commit().await.map_err(db_err(bridge, "committing the take-over"))?;
                n += taken as u64;
                if taken < TAKE_OVER_BATCH as usize {
                    break;
                }
            }
            n
        }
    };
    on_pool!(db, pool => sqlx::query(&taken_over_sql(&sql))
        .bind(i64::try_from(taken_over).unwrap_or(i64::MAX))
        .bind(&bridge.name)
        .execute(pool)
        .await
        .map(drop)
        .map_err(db_err(bridge, "recording the take-over"))?);
    Ok(InstallReport { taken_over, triggers: installed_triggers(db, &sql).await? })
}

/// `UPDATE` of the bridge's take-over count by `n` (statement and its two binds).
fn taken_over_sql(sql: &Sql<'_>) -> String {
    let (a, b) = if sql.d == Dialect::Postgres { ("$1", "$2") } else { ("?", "?") };
    format!("UPDATE {} SET taken_over = taken_over + {a} WHERE bridge = {b}", sql.obj("outbox_adopt_bridge"))
}

/// The bridge's triggers present in the database.
async fn installed_triggers(db: Db<'_>, sql: &Sql<'_>) -> Result<Vec<String>, AdoptError> {
    let names = sql.trigger_names();
    let found: Vec<String> = match db {
        Db::Postgres(pool) => sqlx::query_scalar(
            "SELECT tgname::text FROM pg_trigger WHERE NOT tgisinternal AND tgname::text = ANY($1) ORDER BY 1",
        )
        .bind(&names)
        .fetch_all(pool)
        .await,
        Db::MySql(pool) => {
            let list = names.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ");
            sqlx::query_scalar(&format!(
                "SELECT CAST(trigger_name AS CHAR) FROM information_schema.triggers \
                 WHERE trigger_schema = COALESCE(?, DATABASE()) AND trigger_name IN ({list}) ORDER BY 1"
            ))
            .bind(sql.t.schema())
            .fetch_all(pool)
            .await
        }
    }
    .map_err(db_err(sql.b, "listing the bridge's triggers"))?;
    Ok(found)
}

/// Compares the installed bridge with the mapping, and reads the foreign-write counter.
pub async fn check(db: Db<'_>, tables: &Tables, bridge: &Bridge) -> Result<CheckReport, AdoptError> {
    let cols = inspect(db, bridge).await?;
    let sql = Sql { b: bridge, d: db.dialect(), t: tables, cols: &cols };
    let mut problems = Vec::new();
    let exists: i64 = match db {
        Db::Postgres(pool) => sqlx::query_scalar("SELECT CASE WHEN to_regclass($1) IS NULL THEN 0 ELSE 1 END::bigint")
            .bind(sql.obj("outbox_adopt_bridge"))
            .fetch_one(pool)
            .await,
        Db::MySql(pool) => sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?",
        )
        .bind(tables.schema())
        .bind(tables.name("outbox_adopt_bridge").as_ref())
        .fetch_one(pool)
        .await,
    }
    .map_err(db_err(bridge, "looking for the bridge table"))?;
    let mut report =
        CheckReport { problems: Vec::new(), foreign_writes: 0, last_foreign_write_at: None, taken_over: 0 };
    if exists == 0 {
        report.problems.push(format!(
            "bridge {} is not installed (no {} table)",
            bridge.name,
            tables.name("outbox_adopt_bridge")
        ));
        return Ok(report);
    }
    let query = format!(
        "SELECT {}, foreign_writes, {}, taken_over FROM {} WHERE bridge = {}",
        if db.dialect() == Dialect::Postgres { "definition" } else { "CAST(definition AS CHAR)" },
        if db.dialect() == Dialect::Postgres {
            "to_char(last_foreign_write_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
        } else {
            "CAST(DATE_FORMAT(last_foreign_write_at, '%Y-%m-%dT%H:%i:%sZ') AS CHAR)"
        },
        sql.obj("outbox_adopt_bridge"),
        sql.bridge_lit()
    );
    let row: Option<(String, i64, Option<String>, i64)> = on_pool!(db, pool => sqlx::query_as(&query)
        .fetch_optional(pool)
        .await
        .map_err(db_err(bridge, "reading the bridge's record"))?);
    match row {
        None => problems.push(format!("bridge {} is not installed", bridge.name)),
        Some((def, writes, last, taken)) => {
            if def != definition(&sql) {
                problems.push(format!(
                    "bridge {} was installed from another mapping (or the legacy reason column changed length): \
                     run `outbox adopt` again to apply this one",
                    bridge.name
                ));
            }
            report.foreign_writes = writes;
            report.last_foreign_write_at = last;
            report.taken_over = taken;
        }
    }
    let expected: Vec<String> = {
        let mut v: Vec<String> = sql
            .triggers()
            .iter()
            .filter_map(|s| s.strip_prefix("CREATE TRIGGER ").and_then(|r| r.split_whitespace().next()))
            .map(|n| n.rsplit('.').next().unwrap_or(n).trim_matches(|c| c == '"' || c == '`').to_owned())
            .collect();
        v.sort();
        v
    };
    let found = installed_triggers(db, &sql).await?;
    for t in &expected {
        if !found.contains(t) {
            problems.push(format!("trigger {t} is missing"));
        }
    }
    for t in &found {
        if !expected.contains(t) {
            problems.push(format!("trigger {t} is installed but not in this mapping"));
        }
    }
    report.problems = problems;
    Ok(report)
}

/// A PostgreSQL transaction whose `DROP ... IF EXISTS` of what is not there sends no notice to
/// the terminal.
async fn quiet_tx<'c>(
    pool: &'c sqlx::PgPool,
    bridge: &Bridge,
    what: &'static str,
) -> Result<sqlx::Transaction<'c, sqlx::Postgres>, AdoptError> {
    let mut tx = pool.begin().await.map_err(db_err(bridge, what))?;
    sqlx::raw_sql("SET LOCAL client_min_messages = warning")
        .execute(&mut *tx)
        .await
        .map_err(db_err(bridge, what))?;
    Ok(tx)
}

/// Removes the bridge: its triggers, functions, record and links (the messages stay). The
/// shared tables go with the last bridge. The legacy table is not touched.
pub async fn remove(db: Db<'_>, tables: &Tables, bridge: &Bridge) -> Result<(), AdoptError> {
    let cols = LegacyColumns { reason_len: None };
    let sql = Sql { b: bridge, d: db.dialect(), t: tables, cols: &cols };
    let (link, table) = (sql.obj("outbox_adopt_link"), sql.obj("outbox_adopt_bridge"));
    let mut statements = sql.drops();
    statements.extend(sql.shared_tables());
    statements.push(format!("DELETE FROM {link} WHERE bridge = {}", sql.bridge_lit()));
    statements.push(format!("DELETE FROM {table} WHERE bridge = {}", sql.bridge_lit()));
    let left = format!("SELECT COUNT(*) FROM {table}");
    let last = [format!("DROP TABLE IF EXISTS {link}"), format!("DROP TABLE IF EXISTS {table}")];
    // Runs the removal on `$e`; the shared tables go with the last bridge.
    macro_rules! remove_on {
        ($e:expr) => {{
            for s in &statements {
                sqlx::raw_sql(s).execute($e).await.map_err(db_err(bridge, "removing the bridge"))?;
            }
            let n: i64 = sqlx::query_scalar(&left)
                .fetch_one($e)
                .await
                .map_err(db_err(bridge, "counting the bridges left"))?;
            if n == 0 {
                for s in &last {
                    sqlx::raw_sql(s)
                        .execute($e)
                        .await
                        .map_err(db_err(bridge, "dropping the bridge tables"))?;
                }
            }
        }};
    }
    match db {
        // One transaction: the bridge goes whole or not at all, and `DROP ... IF EXISTS` of what
        // is already gone is not worth a notice on the terminal.
        Db::Postgres(pool) => {
            let mut tx = quiet_tx(pool, bridge, "beginning the removal").await?;
            remove_on!(&mut *tx);
            tx.commit().await.map_err(db_err(bridge, "committing the removal"))?;
        }
        // DDL commits by itself on MySQL/MariaDB: statement by statement, each idempotent.
        Db::MySql(pool) => remove_on!(pool),
    }
    Ok(())
}
