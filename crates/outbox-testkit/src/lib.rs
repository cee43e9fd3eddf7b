//! Test helpers shared by the outbox crates: a fresh database per test on the real servers.
//!
//! Server addresses come from environment variables with the local defaults:
//! - `OUTBOX_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`)
//! - `OUTBOX_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306/test`)
//!
//! Each `fresh_*` call creates a uniquely named database (`outbox_t_...`) and returns a pool on
//! it; [`TestDb::drop_db`] removes it, and a `TestDb` dropped without it (a test that panicked)
//! removes it too. Databases left by a killed test process are removed by `scripts/test.sh`
//! before the suite starts. A missing server is a test failure with a clear
//! message, never a silent skip.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::pool::PoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, MySql, Pool, Postgres, Sqlite};

pub mod brokers;
pub mod either;
pub mod fs;
pub mod net;
pub mod process;
pub mod proxy;
pub mod tls;
mod wait;

pub use wait::{eventually, eventually_within, WAIT};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A database server the tests create their databases on: PostgreSQL or MySQL/MariaDB.
trait Server: sqlx::Database {
    /// The environment variable naming the server.
    const URL_VAR: &'static str;
    /// Where it is when the variable is not set.
    const DEFAULT_URL: &'static str;
    /// What a failure calls it.
    const LABEL: &'static str;
    /// What `DROP DATABASE <name>` takes after the name.
    const DROP_OPTIONS: &'static str;
}

impl Server for Postgres {
    const URL_VAR: &'static str = "OUTBOX_TEST_PG_URL";
    const DEFAULT_URL: &'static str = "postgres://postgres@127.0.0.1:5432/test";
    const LABEL: &'static str = "PostgreSQL";
    /// The sessions a test left open do not keep its database.
    const DROP_OPTIONS: &'static str = " WITH (FORCE)";
}

impl Server for MySql {
    const URL_VAR: &'static str = "OUTBOX_TEST_MYSQL_URL";
    const DEFAULT_URL: &'static str = "mysql://root@127.0.0.1:3306/test";
    const LABEL: &'static str = "MySQL/MariaDB";
    const DROP_OPTIONS: &'static str = "";
}

fn server_url<DB: Server>() -> String {
    std::env::var(DB::URL_VAR).unwrap_or_else(|_| DB::DEFAULT_URL.into())
}

pub fn pg_url() -> String {
    server_url::<Postgres>()
}

pub fn mysql_url() -> String {
    server_url::<MySql>()
}

fn unique_name() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("outbox_t_{}_{}_{}", std::process::id(), n, rand::random::<u32>())
}

/// A database created for one test.
pub struct TestDb<DB: sqlx::Database> {
    pub pool: Pool<DB>,
    pub name: String,
    /// URL of this database (for child processes such as the Python/Java examples).
    pub url: String,
    admin_url: String,
    /// Set by `drop_db`; otherwise (the test panicked, or forgot) the guard drops it.
    dropped: bool,
}

/// The guard: a test that panics before `drop_db` still leaves no database behind. A server's
/// database is dropped on a thread of its own (a `Drop` cannot await, and may run inside a
/// runtime), best effort; `scripts/test.sh` removes whatever a killed test process left.
impl<DB: sqlx::Database> Drop for TestDb<DB> {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        if DB::NAME == "SQLite" {
            return remove_sqlite_files(&self.admin_url);
        }
        let (name, admin_url) = (self.name.clone(), self.admin_url.clone());
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(remove::<DB>(&name, &admin_url));
        });
    }
}

impl<DB: sqlx::Database> TestDb<DB> {
    /// Closes the pool and removes the database.
    pub async fn drop_db(mut self) {
        self.dropped = true;
        close(&self.pool).await;
        remove::<DB>(&self.name, &self.admin_url).await;
    }
}

/// Removes test database `name`: its files (SQLite), or the database on its server. Best
/// effort: a test's clean-up never fails the test.
async fn remove<DB: sqlx::Database>(name: &str, admin_url: &str) {
    match DB::NAME {
        "PostgreSQL" => drop_on_server::<Postgres>(name, admin_url).await,
        "MySQL" => drop_on_server::<MySql>(name, admin_url).await,
        _ => remove_sqlite_files(admin_url),
    }
}

async fn drop_on_server<DB: Server>(name: &str, admin_url: &str)
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    if let Ok(mut admin) = DB::Connection::connect(admin_url).await {
        let _ = admin.execute(format!("DROP DATABASE IF EXISTS {name}{}", DB::DROP_OPTIONS).as_str()).await;
    }
}

fn remove_sqlite_files(path: &str) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{path}{suffix}"));
    }
}

use outbox_core::url::with_database as with_db;

/// Closes a pool, but never waits more than 10 s for connections a test still holds (a leaked
/// connection must fail loudly elsewhere, not hang the whole suite here).
async fn close<DB: sqlx::Database>(pool: &Pool<DB>) {
    if tokio::time::timeout(std::time::Duration::from_secs(10), pool.close()).await.is_err() {
        eprintln!("outbox-testkit: a connection was still checked out when the test database was dropped");
    }
}

/// A new database on the server `DB` (see the module docs), and a pool on it.
async fn fresh_on<DB: Server>() -> TestDb<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let admin_url = server_url::<DB>();
    let name = unique_name();
    let options = <DB::Connection as Connection>::Options::from_str(&admin_url).expect(DB::URL_VAR);
    let mut admin = options.connect().await.unwrap_or_else(|e| {
        panic!("{} at {admin_url} is not reachable ({e}); start it or set {}", DB::LABEL, DB::URL_VAR)
    });
    admin.execute(format!("CREATE DATABASE {name}").as_str()).await.expect("create database");
    admin.close().await.ok();
    let url = with_db(&admin_url, &name);
    let pool = PoolOptions::<DB>::new().max_connections(16).connect(&url).await.expect("connect to test db");
    TestDb { pool, name, url, admin_url, dropped: false }
}

pub async fn fresh_pg() -> TestDb<Postgres> {
    fresh_on().await
}

pub async fn fresh_mysql() -> TestDb<MySql> {
    fresh_on().await
}

/// A fresh SQLite file in the system temp directory, opened in WAL mode with a busy timeout.
pub async fn fresh_sqlite() -> TestDb<Sqlite> {
    let name = unique_name();
    let path: PathBuf = std::env::temp_dir().join(format!("{name}.db"));
    let url = format!("sqlite://{}", path.display());
    let opts = SqliteConnectOptions::from_str(&url)
        .unwrap()
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(std::time::Duration::from_secs(30))
        .foreign_keys(true);
    let pool = SqlitePoolOptions::new().max_connections(8).connect_with(opts).await.expect("open sqlite");
    TestDb { pool, name, url, admin_url: path.display().to_string(), dropped: false }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use sqlx::postgres::PgConnectOptions;
    use sqlx::ConnectOptions;

    /// A test that panics before `drop_db` leaves no database: the guard removes it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_database_is_removed_even_without_drop_db() {
        async fn exists(name: &str) -> bool {
            let mut admin = PgConnectOptions::from_str(&super::pg_url()).unwrap().connect().await.unwrap();
            let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pg_database WHERE datname = $1")
                .bind(name)
                .fetch_one(&mut admin)
                .await
                .unwrap();
            n == 1
        }
        let db = super::fresh_pg().await;
        let name = db.name.clone();
        assert!(exists(&name).await);
        let panicked = std::thread::spawn(move || {
            let _db = db;
            panic!("a failing test");
        })
        .join();
        assert!(panicked.is_err());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while exists(&name).await {
            assert!(
                std::time::Instant::now() < deadline,
                "{name} still exists a minute after its test panicked"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }

        let file = super::fresh_sqlite().await;
        let path = std::path::PathBuf::from(&file.admin_url);
        sqlx::query("CREATE TABLE t (x INTEGER)").execute(&file.pool).await.unwrap();
        assert!(path.exists());
        drop(file);
        assert!(!path.exists(), "the SQLite file is removed with its guard");
    }
}
