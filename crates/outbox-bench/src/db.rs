//! One fresh database per scenario, and the bench's own SQL per dialect: set-based backlog
//! generation, the raw claim-and-mark loop, the business table, server counters.

use std::str::FromStr;
use std::time::{Duration, Instant};

use outbox_core::url::with_database;
use outbox_core::{MessageId, NewMessage};
use outbox_store::{AnyOutbox, Dialect};
use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

use crate::{Error, Result};

/// Topic of every bench message.
pub(crate) const TOPIC: &str = "bench.order";
/// Ordering keys are spread over this many values.
pub(crate) const KEYS: u64 = 1_000;
/// Rows of the business table.
pub(crate) const ACCOUNTS: i64 = 1_000;

/// Runs a dialect's set-based insert of the messages `lo..=hi` whose parameters are, in
/// order: the topic, `lo`, `hi`, the status, the number of keys and the note's padding.
async fn insert_series<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    sql: &str,
    (lo, hi): (i64, i64),
    status: &str,
    keys: i64,
    pad: &str,
) -> Result<()>
where
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'c> &'c mut <DB as sqlx::Database>::Connection: sqlx::Executor<'c, Database = DB>,
{
    sqlx::query(sql).bind(TOPIC).bind(lo).bind(hi).bind(status).bind(keys).bind(pad).execute(pool).await?;
    Ok(())
}

/// A database created for one scenario.
pub(crate) struct BenchDb {
    pub(crate) outbox: AnyOutbox,
    pub(crate) dialect: Dialect,
    /// URL of the created database (for extra relays' own pools).
    pub(crate) url: String,
    name: String,
    admin_url: String,
}

/// The payload of message `seq`: a small JSON document of about 200 bytes.
pub(crate) fn payload(seq: u64, keys: u64) -> String {
    format!(
        r#"{{"seq":{seq},"customer":"c-{:04}","amount_cents":{},"currency":"EUR","note":"{}"}}"#,
        seq % keys.max(1),
        (seq * 7919) % 100_000,
        "x".repeat(120)
    )
}

/// The message of business transaction `seq`, its key one of `keys` values.
pub(crate) fn message(seq: u64, keys: u64) -> NewMessage {
    NewMessage::new(TOPIC, payload(seq, keys)).key(format!("k-{}", seq % keys.max(1)))
}

/// Runs one statement on the server of `admin_url` (creating or dropping a database).
async fn on_server(dialect: Dialect, admin_url: &str, sql: &str) -> Result<()> {
    match dialect {
        Dialect::Postgres => {
            let mut admin = PgConnectOptions::from_str(admin_url)?.connect().await?;
            sqlx::query(sql).execute(&mut admin).await?;
            admin.close().await?;
        }
        Dialect::MySql => {
            let mut admin = MySqlConnectOptions::from_str(admin_url)?.connect().await?;
            sqlx::query(sql).execute(&mut admin).await?;
            admin.close().await?;
        }
        Dialect::Sqlite => {}
    }
    Ok(())
}

impl BenchDb {
    /// Creates a database `outbox_bench_<random>` on the server of `store` (or a file for
    /// SQLite), migrates it, and connects a pool of `pool` connections.
    pub(crate) async fn fresh(store: &str, pool: u32) -> Result<BenchDb> {
        let dialect = Dialect::of_url(store)?;
        let name = format!("outbox_bench_{}_{:08x}", std::process::id(), rand::random::<u32>());
        let (url, admin_url) = match dialect {
            Dialect::Postgres | Dialect::MySql => {
                let store = store.replacen("mariadb://", "mysql://", 1);
                on_server(dialect, &store, &format!("CREATE DATABASE {name}")).await?;
                (with_database(&store, &name), store)
            }
            Dialect::Sqlite => {
                let path = std::env::temp_dir().join(format!("{name}.db"));
                (format!("sqlite://{}", path.display()), path.display().to_string())
            }
        };
        let outbox = AnyOutbox::connect(&url, pool).await?;
        outbox.migrate().await?;
        Ok(BenchDb { outbox, dialect, url, name, admin_url })
    }

    /// Closes the pool (its connections go; [`BenchDb::reopened`] connects again). A
    /// connection still on its way back to the pool (a task hands it back) would stay open in
    /// the closed pool: each one is taken and closed first.
    pub(crate) async fn park(&self) {
        async fn park_pool<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) {
            for _ in 0..pool.size() {
                match tokio::time::timeout(Duration::from_secs(2), pool.acquire()).await {
                    Ok(Ok(c)) => {
                        let _ = c.close().await;
                    }
                    _ => break,
                }
            }
            pool.close().await;
        }
        match &self.outbox {
            AnyOutbox::Postgres(o) => park_pool(o.pool()).await,
            AnyOutbox::MySql(o) => park_pool(o.pool()).await,
            AnyOutbox::Sqlite(o) => o.pool().close().await,
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }

    /// A handle on the same database with a pool of its own (`pool` connections), e.g. for a
    /// parked one. Dropping it closes its connections; it does not drop the database.
    pub(crate) async fn reopened(&self, pool: u32) -> Result<BenchDb> {
        Ok(BenchDb {
            outbox: AnyOutbox::connect(&self.url, pool).await?,
            dialect: self.dialect,
            url: self.url.clone(),
            name: self.name.clone(),
            admin_url: self.admin_url.clone(),
        })
    }

    /// Closes the pool and drops the database.
    pub(crate) async fn drop_db(self) {
        self.park().await;
        let drop = match self.dialect {
            Dialect::Postgres => format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            _ => format!("DROP DATABASE IF EXISTS {}", self.name),
        };
        // Best effort: a database left behind is named outbox_bench_* and harmless.
        let _ = on_server(self.dialect, &self.admin_url, &drop).await;
        if matches!(self.dialect, Dialect::Sqlite) {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{}", self.admin_url, suffix));
            }
        }
    }

    /// The server's version string.
    pub(crate) async fn version(&self) -> Result<String> {
        Ok(match &self.outbox {
            AnyOutbox::Postgres(o) => {
                // Autovacuum decides how a deep backlog drains: say whether it ran.
                sqlx::query_scalar("SELECT version() || ', autovacuum ' || current_setting('autovacuum')")
                    .fetch_one(o.pool())
                    .await?
            }
            AnyOutbox::MySql(o) => sqlx::query_scalar("SELECT version()").fetch_one(o.pool()).await?,
            AnyOutbox::Sqlite(o) => {
                let v: String = sqlx::query_scalar("SELECT sqlite_version()").fetch_one(o.pool()).await?;
                format!("SQLite {v}")
            }
            #[allow(unreachable_patterns)]
            _ => String::new(),
        })
    }

    /// Inserts messages `from..from + n` with one set-based statement per million rows:
    /// `status` is `pending` (a backlog) or `sent` (history). Keys spread over `keys` values.
    pub(crate) async fn insert_rows(&self, from: u64, n: u64, status: &str, keys: u64) -> Result<()> {
        const CHUNK: u64 = 1_000_000;
        let mut done = 0;
        while done < n {
            let lo = from + done + 1;
            let hi = from + (done + CHUNK).min(n);
            self.insert_chunk(lo, hi, status, keys).await?;
            done = hi - from;
        }
        Ok(())
    }

    async fn insert_chunk(&self, lo: u64, hi: u64, status: &str, keys: u64) -> Result<()> {
        let pad = "x".repeat(120);
        let (lo, hi) = (i64::try_from(lo).unwrap_or(i64::MAX), i64::try_from(hi).unwrap_or(i64::MAX));
        let keys = i64::try_from(keys.max(1)).unwrap_or(i64::MAX);
        match &self.outbox {
            AnyOutbox::Postgres(o) => {
                let sql = "INSERT INTO outbox_message (topic, msg_key, payload, status) \
                     SELECT $1, 'k-' || (g % $5), \
                       '{\"seq\":' || g || ',\"customer\":\"c-' || lpad((g % $5)::text, 4, '0') || \
                       '\",\"amount_cents\":' || ((g * 7919) % 100000) || ',\"currency\":\"EUR\",\"note\":\"' || $6 || '\"}', \
                       $4 FROM generate_series($2::int8, $3::int8) AS g";
                insert_series(o.pool(), sql, (lo, hi), status, keys, &pad).await?;
            }
            AnyOutbox::MySql(o) => {
                // MariaDB's SEQUENCE engine: seq_<lo>_to_<hi> is a virtual table of integers.
                let sql = format!(
                    "INSERT INTO outbox_message (topic, msg_key, payload, status) \
                     SELECT ?, CONCAT('k-', seq % ?), \
                       CONCAT('{{\"seq\":', seq, ',\"customer\":\"c-', LPAD(seq % ?, 4, '0'), \
                       '\",\"amount_cents\":', (seq * 7919) % 100000, ',\"currency\":\"EUR\",\"note\":\"', ?, '\"}}'), \
                       ? FROM seq_{lo}_to_{hi}"
                );
                sqlx::query(&sql)
                    .bind(TOPIC)
                    .bind(keys)
                    .bind(keys)
                    .bind(&pad)
                    .bind(status)
                    .execute(o.pool())
                    .await?;
            }
            AnyOutbox::Sqlite(o) => {
                let sql = "WITH RECURSIVE s(g) AS (SELECT ?2 UNION ALL SELECT g + 1 FROM s WHERE g < ?3) \
                     INSERT INTO outbox_message (topic, msg_key, payload, status) \
                     SELECT ?1, 'k-' || (g % ?5), \
                       '{\"seq\":' || g || ',\"customer\":\"c-' || printf('%04d', g % ?5) || \
                       '\",\"amount_cents\":' || ((g * 7919) % 100000) || ',\"currency\":\"EUR\",\"note\":\"' || ?6 || '\"}', \
                       ?4 FROM s";
                insert_series(o.pool(), sql, (lo, hi), status, keys, &pad).await?;
            }
            #[allow(unreachable_patterns)]
            _ => {}
        }
        Ok(())
    }

    /// Puts `prefix` in front of every message key (keys of their own for a backlog written by
    /// [`BenchDb::insert_rows`]).
    pub(crate) async fn prefix_keys(&self, prefix: &str) -> Result<()> {
        match &self.outbox {
            AnyOutbox::Postgres(o) => {
                sqlx::query("UPDATE outbox_message SET msg_key = $1 || msg_key WHERE msg_key IS NOT NULL")
                    .bind(prefix)
                    .execute(o.pool())
                    .await?;
            }
            AnyOutbox::MySql(o) => {
                sqlx::query(
                    "UPDATE outbox_message SET msg_key = CONCAT(?, msg_key) WHERE msg_key IS NOT NULL",
                )
                .bind(prefix)
                .execute(o.pool())
                .await?;
            }
            AnyOutbox::Sqlite(o) => {
                sqlx::query("UPDATE outbox_message SET msg_key = ?1 || msg_key WHERE msg_key IS NOT NULL")
                    .bind(prefix)
                    .execute(o.pool())
                    .await?;
            }
            #[allow(unreachable_patterns)]
            _ => {}
        }
        Ok(())
    }

    /// Messages with an id up to `last` not `sent` yet.
    pub(crate) async fn unsent_up_to(&self, last: u64) -> Result<u64> {
        let last = i64::try_from(last).unwrap_or(i64::MAX);
        let n: i64 = match &self.outbox {
            AnyOutbox::Postgres(o) => {
                sqlx::query_scalar("SELECT COUNT(*) FROM outbox_message WHERE id <= $1 AND status <> 'sent'")
                    .bind(last)
                    .fetch_one(o.pool())
                    .await?
            }
            AnyOutbox::MySql(o) => {
                sqlx::query_scalar("SELECT COUNT(*) FROM outbox_message WHERE id <= ? AND status <> 'sent'")
                    .bind(last)
                    .fetch_one(o.pool())
                    .await?
            }
            AnyOutbox::Sqlite(o) => {
                sqlx::query_scalar("SELECT COUNT(*) FROM outbox_message WHERE id <= ?1 AND status <> 'sent'")
                    .bind(last)
                    .fetch_one(o.pool())
                    .await?
            }
            #[allow(unreachable_patterns)]
            _ => 0,
        };
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Refreshes the planner's statistics (what autovacuum would have done by then).
    pub(crate) async fn analyze(&self) -> Result<()> {
        match &self.outbox {
            AnyOutbox::Postgres(o) => {
                sqlx::query("VACUUM ANALYZE outbox_message").execute(o.pool()).await?;
            }
            AnyOutbox::MySql(o) => {
                sqlx::query("ANALYZE TABLE outbox_message").execute(o.pool()).await?;
            }
            AnyOutbox::Sqlite(o) => {
                sqlx::query("ANALYZE").execute(o.pool()).await?;
            }
            #[allow(unreachable_patterns)]
            _ => {}
        }
        Ok(())
    }

    /// Rows with `status`.
    pub(crate) async fn count(&self, status: &str) -> Result<i64> {
        let sql = "SELECT COUNT(*) FROM outbox_message WHERE status = ";
        Ok(match &self.outbox {
            AnyOutbox::Postgres(o) => {
                sqlx::query_scalar(&format!("{sql}$1")).bind(status).fetch_one(o.pool()).await?
            }
            AnyOutbox::MySql(o) => {
                sqlx::query_scalar(&format!("{sql}?")).bind(status).fetch_one(o.pool()).await?
            }
            AnyOutbox::Sqlite(o) => {
                sqlx::query_scalar(&format!("{sql}?")).bind(status).fetch_one(o.pool()).await?
            }
            #[allow(unreachable_patterns)]
            _ => 0,
        })
    }

    /// The raw limit: claims up to `batch` due rows and marks them sent, in the fewest round
    /// trips the dialect allows, until none is left. Returns the rows processed.
    pub(crate) async fn raw_claim_loop(&self, batch: i64) -> Result<u64> {
        let mut total = 0_u64;
        loop {
            let n = match &self.outbox {
                AnyOutbox::Postgres(o) => {
                    // One statement: lock the due rows (skipping locked ones) and mark them.
                    let rows: Vec<(i64, String)> = sqlx::query_as(
                        "WITH c AS (SELECT id FROM outbox_message \
                           WHERE status IN ('pending', 'sending') AND next_attempt_at <= now() \
                           ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED) \
                         UPDATE outbox_message m SET status = 'sent', updated_at = now() \
                         FROM c WHERE m.id = c.id RETURNING m.id, m.payload",
                    )
                    .bind(batch)
                    .fetch_all(o.pool())
                    .await?;
                    rows.len()
                }
                AnyOutbox::MySql(o) => {
                    // No UPDATE ... RETURNING in MariaDB. The fastest shape found (the relay's
                    // own): READ COMMITTED (no gap locks); the due ids by a plain read of the
                    // due index, which passes over the delete-marked entries of rows already
                    // marked cheaply; then a locking read of those ids by primary key and one
                    // UPDATE. A locking range read of the due index instead had to examine every
                    // delete-marked entry the purge had not removed yet, so each batch got
                    // slower (5,818 rows/s over 100,000 rows, below the relay's own drain).
                    let mut conn = o.pool().acquire().await?;
                    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED").execute(&mut *conn).await?;
                    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                    let due: Vec<i64> = sqlx::query_scalar(
                        "SELECT id FROM outbox_message \
                         WHERE status = 'pending' AND next_attempt_at <= UTC_TIMESTAMP(6) \
                         ORDER BY next_attempt_at, id LIMIT ?",
                    )
                    .bind(batch)
                    .fetch_all(&mut *tx)
                    .await?;
                    let n = if due.is_empty() {
                        0
                    } else {
                        let list = due.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
                        // The payload column has a binary collation: read it as bytes.
                        let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as(&format!(
                            "SELECT id, payload FROM outbox_message WHERE id IN ({list}) \
                             AND status = 'pending' FOR UPDATE SKIP LOCKED"
                        ))
                        .fetch_all(&mut *tx)
                        .await?;
                        if !rows.is_empty() {
                            let ids: Vec<String> = rows.iter().map(|r| r.0.to_string()).collect();
                            sqlx::query(&format!(
                                "UPDATE outbox_message SET status = 'sent', updated_at = UTC_TIMESTAMP(6) \
                                 WHERE id IN ({})",
                                ids.join(",")
                            ))
                            .execute(&mut *tx)
                            .await?;
                        }
                        rows.len()
                    };
                    tx.commit().await?;
                    n
                }
                AnyOutbox::Sqlite(o) => {
                    let rows: Vec<(i64, String)> = sqlx::query_as(
                        "UPDATE outbox_message SET status = 'sent' WHERE id IN ( \
                           SELECT id FROM outbox_message WHERE status IN ('pending', 'sending') \
                           AND next_attempt_at <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) \
                           ORDER BY next_attempt_at, id LIMIT ?) RETURNING id, payload",
                    )
                    .bind(batch)
                    .fetch_all(o.pool())
                    .await?;
                    rows.len()
                }
                #[allow(unreachable_patterns)]
                _ => 0,
            };
            if n == 0 {
                return Ok(total);
            }
            total += n as u64;
        }
    }

    /// Creates the business table `bench_account` with [`ACCOUNTS`] rows.
    pub(crate) async fn create_business_table(&self) -> Result<()> {
        let create = "CREATE TABLE bench_account (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)";
        match &self.outbox {
            AnyOutbox::Postgres(o) => {
                sqlx::query(create).execute(o.pool()).await?;
                sqlx::query("INSERT INTO bench_account SELECT g, 0 FROM generate_series(1, $1) g")
                    .bind(ACCOUNTS)
                    .execute(o.pool())
                    .await?;
            }
            AnyOutbox::MySql(o) => {
                sqlx::query(&format!("{create} ENGINE = InnoDB")).execute(o.pool()).await?;
                sqlx::query(&format!("INSERT INTO bench_account SELECT seq, 0 FROM seq_1_to_{ACCOUNTS}"))
                    .execute(o.pool())
                    .await?;
            }
            AnyOutbox::Sqlite(o) => {
                sqlx::query(create).execute(o.pool()).await?;
                sqlx::query(
                    "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ?1) \
                     INSERT INTO bench_account SELECT g, 0 FROM s",
                )
                .bind(ACCOUNTS)
                .execute(o.pool())
                .await?;
            }
            #[allow(unreachable_patterns)]
            _ => {}
        }
        Ok(())
    }

    /// A server-side count of the statements or transactions this database has run, where the
    /// server keeps one: PostgreSQL `xact_commit + xact_rollback` of this database; MariaDB's
    /// global `Questions` (includes other clients of the server). `None` for SQLite.
    pub(crate) async fn server_queries(&self) -> Result<Option<u64>> {
        Ok(match &self.outbox {
            AnyOutbox::Postgres(o) => {
                // Statistics are flushed at most once a second; force a fresh snapshot.
                let mut c = o.pool().acquire().await?;
                sqlx::query("SELECT pg_stat_clear_snapshot()").execute(&mut *c).await?;
                let n: i64 = sqlx::query_scalar(
                    "SELECT (xact_commit + xact_rollback)::int8 FROM pg_stat_database WHERE datname = current_database()",
                )
                .fetch_one(&mut *c)
                .await?;
                Some(u64::try_from(n).unwrap_or(0))
            }
            AnyOutbox::MySql(o) => {
                let v: Option<String> = sqlx::query_scalar(
                    "SELECT CAST(VARIABLE_VALUE AS CHAR) FROM information_schema.GLOBAL_STATUS \
                     WHERE VARIABLE_NAME = 'QUESTIONS'",
                )
                .fetch_optional(o.pool())
                .await?;
                v.and_then(|v| v.parse().ok())
            }
            _ => None,
        })
    }
}

/// One business transaction: updates account `account`, enqueues `msg` when given, and
/// commits through the outbox (so the in-process relay is woken). Returns the message id
/// and the instant the commit returned.
pub(crate) async fn business_tx(
    outbox: &AnyOutbox,
    account: i64,
    msg: Option<&NewMessage>,
) -> Result<(Option<MessageId>, Instant)> {
    macro_rules! tx {
        ($o:expr, $sql:expr) => {{
            let mut tx = $o.begin().await?;
            sqlx::query($sql).bind(account).execute(&mut *tx).await?;
            let id = match msg {
                Some(m) => Some(tx.enqueue(m).await?.id),
                None => None,
            };
            tx.commit().await?;
            (id, Instant::now())
        }};
    }
    Ok(match outbox {
        AnyOutbox::Postgres(o) => tx!(o, "UPDATE bench_account SET balance = balance + 1 WHERE id = $1"),
        AnyOutbox::MySql(o) => tx!(o, "UPDATE bench_account SET balance = balance + 1 WHERE id = ?"),
        AnyOutbox::Sqlite(o) => tx!(o, "UPDATE bench_account SET balance = balance + 1 WHERE id = ?"),
        #[allow(unreachable_patterns)]
        _ => return Err(Error::Config("store not compiled in".into())),
    })
}

/// The business transaction with the same message written by a hand-written `INSERT` (topic,
/// key, payload; everything else the table's defaults), not through the library: the "raw
/// INSERT" that the library's enqueue is compared with.
pub(crate) async fn business_tx_raw_insert(outbox: &AnyOutbox, account: i64, msg: &NewMessage) -> Result<()> {
    macro_rules! tx {
        ($o:expr, $update:expr, $insert:expr) => {{
            let mut tx = $o.pool().begin().await?;
            sqlx::query($update).bind(account).execute(&mut *tx).await?;
            sqlx::query($insert)
                .bind(&msg.topic)
                .bind(msg.key.as_deref())
                .bind(&msg.payload)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }};
    }
    match outbox {
        AnyOutbox::Postgres(o) => tx!(
            o,
            "UPDATE bench_account SET balance = balance + 1 WHERE id = $1",
            "INSERT INTO outbox_message (topic, msg_key, payload) VALUES ($1, $2, $3)"
        ),
        AnyOutbox::MySql(o) => tx!(
            o,
            "UPDATE bench_account SET balance = balance + 1 WHERE id = ?",
            "INSERT INTO outbox_message (topic, msg_key, payload) VALUES (?, ?, ?)"
        ),
        AnyOutbox::Sqlite(o) => tx!(
            o,
            "UPDATE bench_account SET balance = balance + 1 WHERE id = ?",
            "INSERT INTO outbox_message (topic, msg_key, payload) VALUES (?, ?, ?)"
        ),
        #[allow(unreachable_patterns)]
        _ => return Err(Error::Config("store not compiled in".into())),
    }
    Ok(())
}

/// Waits until `f` returns true, polling every `every`, at most `limit`.
pub(crate) async fn wait_until<F, Fut>(limit: Duration, every: Duration, mut f: F) -> Result<bool>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let start = Instant::now();
    loop {
        if f().await? {
            return Ok(true);
        }
        if start.elapsed() >= limit {
            return Ok(false);
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_about_200_bytes_of_json() {
        let p = payload(123_456, KEYS);
        assert!((180..=230).contains(&p.len()), "{} bytes", p.len());
        let v: serde_json::Value = serde_json::from_str(&p).unwrap();
        assert_eq!(v["seq"], 123_456);
    }
}
