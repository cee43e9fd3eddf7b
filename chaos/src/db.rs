//! The run's database as one type, PostgreSQL or MariaDB: each step on it is written once, with
//! `?` placeholders ([`Dialect::sql`]), and [`on_pool!`] compiles it for the pool of each dialect.

use std::time::Duration;

use sqlx::pool::PoolOptions;

use crate::combo::Dialect;

/// A pool on a PostgreSQL or a MariaDB database.
pub(crate) enum Db {
    /// PostgreSQL.
    Pg(sqlx::PgPool),
    /// MariaDB / MySQL.
    My(sqlx::MySqlPool),
}

/// Evaluates `$body` with `$pool` bound to the pool inside `$db` (a `&Db`), whichever its
/// dialect: the body is written once and compiled for each.
macro_rules! on_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            $crate::db::Db::Pg($pool) => $body,
            $crate::db::Db::My($pool) => $body,
        }
    };
}
pub(crate) use on_pool;

/// sqlx's default pool, or (`max`) the pool of a role process: that many connections, each
/// acquired within 5 s.
fn options<DB: sqlx::Database>(max: Option<u32>) -> PoolOptions<DB> {
    let options = PoolOptions::new();
    match max {
        Some(max) => options.max_connections(max).acquire_timeout(Duration::from_secs(5)),
        None => options,
    }
}

impl Db {
    /// A pool with sqlx's defaults on `url` (its dialect by [`Dialect::of_url`]).
    pub(crate) async fn connect(url: &str) -> anyhow::Result<Db> {
        Db::open(url, None).await
    }

    /// The small pool of a writer or a consumer on `url`: two connections.
    pub(crate) async fn connect_small(url: &str) -> anyhow::Result<Db> {
        Db::open(url, Some(2)).await
    }

    /// The pool of a role process on `url`, of `max` connections.
    pub(crate) async fn connect_sized(url: &str, max: u32) -> anyhow::Result<Db> {
        Db::open(url, Some(max)).await
    }

    async fn open(url: &str, max: Option<u32>) -> anyhow::Result<Db> {
        Ok(match Dialect::of_url(url) {
            Dialect::Pg => Db::Pg(options(max).connect(url).await?),
            Dialect::My => Db::My(options(max).connect(url).await?),
        })
    }

    /// Its dialect.
    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            Db::Pg(_) => Dialect::Pg,
            Db::My(_) => Dialect::My,
        }
    }

    /// `statement` (with `?` placeholders) in this database's dialect.
    pub(crate) fn sql(&self, statement: &str) -> String {
        self.dialect().sql(statement)
    }

    /// Closes the pool.
    pub(crate) async fn close(&self) {
        on_pool!(self, pool => pool.close().await);
    }
}
