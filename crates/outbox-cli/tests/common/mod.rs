//! What the `outbox` binary's test targets share: the binary run as an operator would, with
//! none of the caller's `OUTBOX_*` settings leaking in; a relay daemon with its admin listener
//! over a SQLite store and a Redis stream; and messages inserted as a plain-SQL writer would.
//! Each test target uses part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use outbox_testkit::fs::temp_dir;
use outbox_testkit::process::{RelayConfig, RelayProcess};

pub(crate) const OUTBOX: &str = env!("CARGO_BIN_EXE_outbox");
pub(crate) const REDIS: &str = "redis://127.0.0.1:6379";

/// Runs `outbox` with `args`, without the caller's database URL, table names or actor.
pub(crate) fn outbox(args: &[&str]) -> Output {
    Command::new(OUTBOX)
        .args(args)
        .env_remove("OUTBOX_DATABASE_URL")
        .env_remove("OUTBOX_SCHEMA")
        .env_remove("OUTBOX_TABLE_PREFIX")
        .env_remove("OUTBOX_ACTOR")
        .output()
        .expect("run outbox")
}

/// Runs `outbox` and expects success; returns stdout.
pub(crate) fn ok(args: &[&str]) -> String {
    let out = outbox(args);
    assert!(
        out.status.success(),
        "outbox {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Inserts `count` messages with the payloads `{"n":0}`, `{"n":1}`, ... by `sql`, whose one
/// parameter is the payload, as a foreign application writes the table.
pub(crate) async fn insert_numbered<DB: sqlx::Database>(pool: &sqlx::Pool<DB>, sql: &str, count: usize)
where
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'c> &'c mut <DB as sqlx::Database>::Connection: sqlx::Executor<'c, Database = DB>,
{
    for i in 0..count {
        sqlx::query(sql).bind(format!("{{\"n\":{i}}}")).execute(pool).await.unwrap();
    }
}

/// `outbox relay` over a fresh SQLite store, relaying to a Redis stream of its own, with the
/// `[admin]` listener on `port` (already accepting connections).
pub(crate) struct AdminDaemon {
    pub(crate) dir: PathBuf,
    pub(crate) store_url: String,
    pub(crate) stream: String,
    pub(crate) port: u16,
    pub(crate) relay: RelayProcess,
}

impl AdminDaemon {
    /// Starts it in a temporary directory named after `name` (also the stream's prefix).
    pub(crate) fn start(name: &str, read_token: &str, admin_token: &str) -> AdminDaemon {
        let dir = temp_dir(name);
        let store_url = format!("sqlite:{}", dir.join("shop.db").display());
        let stream = format!("{name}-{}", std::process::id());
        let port = outbox_testkit::net::free_port();
        let cfg = RelayConfig::to_redis_stream(&store_url, REDIS, &stream)
            .admin(port, read_token, admin_token)
            .write(&dir.join("outbox.toml"));
        let relay = RelayProcess::start(OUTBOX, &cfg, &dir.join("relay.log"));
        outbox_testkit::net::wait_port(port, Duration::from_secs(60), "the admin listener");
        AdminDaemon { dir, store_url, stream, port, relay }
    }
}
