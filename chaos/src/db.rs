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

/// sqlx's default pool, or (`small`) the pool of a role process: two connections, each
/// acquired within 5 s.
fn options<DB: sqlx::Database>(small: bool) -> PoolOptions<DB> {
    let options = PoolOptions::new();
    if small {
        options.max_connections(2).acquire_timeout(Duration::from_secs(5))
    } else {
        options
    }
}

impl Db {
    /// A pool with sqlx's defaults on `url` (its dialect by [`Dialect::of_url`]).
    pub(crate) async fn connect(url: &str) -> anyhow::Result<Db> {
        Db::open(url, false).await
    }

    /// The small pool of a writer or a consumer on `url`.
    pub(crate) async fn connect_small(url: &str) -> anyhow::Result<Db> {
        Db::open(url, true).await
    }

    async fn open(url: &str, small: bool) -> anyhow::Result<Db> {
        Ok(match Dialect::of_url(url) {
            Dialect::Pg => Db::Pg(options(small).connect(url).await?),
            Dialect::My => Db::My(options(small).connect(url).await?),
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
