//! The database + broker pairs the suite runs, and what each needs set up: the chaos tables, the
//! outbox and inbox schemas, the broker's stream, queues or consumer groups.

use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Context};
use sqlx::{Connection, Executor};

use crate::db::{on_pool, Db};

/// Which database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// PostgreSQL.
    Pg,
    /// MariaDB / MySQL.
    My,
}

impl Dialect {
    /// The dialect of a database URL: `postgres…` is PostgreSQL, anything else MariaDB.
    pub(crate) fn of_url(url: &str) -> Dialect {
        if url.starts_with("postgres") {
            Dialect::Pg
        } else {
            Dialect::My
        }
    }

    /// `pg` on PostgreSQL, `my` on MariaDB.
    pub(crate) fn pick<T>(self, pg: T, my: T) -> T {
        match self {
            Dialect::Pg => pg,
            Dialect::My => my,
        }
    }

    /// `statement`, written with `?` placeholders, as this dialect wants it: PostgreSQL numbers
    /// them (`$1`, `$2`, …). No statement of the harness has a `?` in a literal.
    pub(crate) fn sql(self, statement: &str) -> String {
        if self == Dialect::My {
            return statement.to_owned();
        }
        let mut out = String::with_capacity(statement.len() + 8);
        for (n, part) in statement.split('?').enumerate() {
            if n > 0 {
                out.push_str(&format!("${n}"));
            }
            out.push_str(part);
        }
        out
    }
}

/// Which broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Broker {
    /// NATS JetStream.
    Nats,
    /// RabbitMQ (AMQP 0-9-1).
    Rabbit,
    /// Redis Streams.
    Redis,
}

/// A database + broker pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Combo {
    /// The database.
    pub(crate) dialect: Dialect,
    /// The broker.
    pub(crate) broker: Broker,
}

impl FromStr for Combo {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Combo> {
        let (dialect, broker) = match s {
            "pg-nats" => (Dialect::Pg, Broker::Nats),
            "pg-rabbitmq" => (Dialect::Pg, Broker::Rabbit),
            "pg-redis" => (Dialect::Pg, Broker::Redis),
            "mariadb-redis" => (Dialect::My, Broker::Redis),
            "mariadb-nats" => (Dialect::My, Broker::Nats),
            "mariadb-rabbitmq" => (Dialect::My, Broker::Rabbit),
            other => bail!(
                "unknown combo {other:?}: pg-nats, pg-rabbitmq, pg-redis, mariadb-redis, mariadb-nats, mariadb-rabbitmq"
            ),
        };
        Ok(Combo { dialect, broker })
    }
}

impl Broker {
    const ALL: [Broker; 3] = [Broker::Nats, Broker::Rabbit, Broker::Redis];

    /// Its name in combos and on the consumer's command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Broker::Nats => "nats",
            Broker::Rabbit => "rabbitmq",
            Broker::Redis => "redis",
        }
    }

    /// The broker of that [`name`](Self::name).
    pub(crate) fn of_name(name: &str) -> Option<Broker> {
        Broker::ALL.into_iter().find(|b| b.name() == name)
    }
}

impl std::fmt::Display for Combo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.dialect.pick("pg", "mariadb"), self.broker.name())
    }
}

/// Server addresses (environment variables with the local defaults).
pub(crate) struct Servers;

/// The run's own servers (see `own`), which replace the shared ones while a combo runs.
#[derive(Debug, Default, Clone)]
struct OwnServers {
    /// The admin URL of the combo's database server.
    db: Option<(Dialect, String)>,
    /// `host:port` of the combo's broker.
    broker: Option<(Broker, String)>,
}

static OWN_SERVERS: std::sync::RwLock<OwnServers> =
    std::sync::RwLock::new(OwnServers { db: None, broker: None });

impl Servers {
    /// From now on, `dialect`'s admin URL is `url` and `broker` is at `addr` (each when given);
    /// [`Servers::shared`] goes back to the machine's servers.
    pub(crate) fn own(db: Option<(Dialect, String)>, broker: Option<(Broker, String)>) {
        *OWN_SERVERS.write().unwrap_or_else(std::sync::PoisonError::into_inner) = OwnServers { db, broker };
    }

    /// Back to the machine's shared servers.
    pub(crate) fn shared() {
        Servers::own(None, None);
    }

    fn own_db(dialect: Dialect) -> Option<String> {
        let own = OWN_SERVERS.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        own.db.as_ref().filter(|(d, _)| *d == dialect).map(|(_, url)| url.clone())
    }

    fn own_broker(broker: Broker) -> Option<String> {
        let own = OWN_SERVERS.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        own.broker.as_ref().filter(|(b, _)| *b == broker).map(|(_, addr)| addr.clone())
    }

    /// The PostgreSQL admin URL (the run's own server, or `OUTBOX_TEST_PG_URL`).
    pub(crate) fn pg() -> String {
        Servers::own_db(Dialect::Pg).unwrap_or_else(|| {
            std::env::var("OUTBOX_TEST_PG_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
        })
    }
    /// The MariaDB admin URL (the run's own server, or `OUTBOX_TEST_MYSQL_URL`).
    pub(crate) fn my() -> String {
        Servers::own_db(Dialect::My).unwrap_or_else(|| {
            std::env::var("OUTBOX_TEST_MYSQL_URL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
        })
    }
    /// The admin URL of the server of `dialect`.
    pub(crate) fn admin(dialect: Dialect) -> String {
        match dialect {
            Dialect::Pg => Servers::pg(),
            Dialect::My => Servers::my(),
        }
    }
    /// `host:port` of the broker.
    pub(crate) fn broker_addr(b: Broker) -> String {
        if let Some(addr) = Servers::own_broker(b) {
            return addr;
        }
        let (var, default) = match b {
            Broker::Nats => ("OUTBOX_TEST_NATS_ADDR", "127.0.0.1:4222"),
            Broker::Rabbit => ("OUTBOX_TEST_RABBITMQ_ADDR", "127.0.0.1:5672"),
            Broker::Redis => ("OUTBOX_TEST_REDIS_ADDR", "127.0.0.1:6379"),
        };
        std::env::var(var).unwrap_or_else(|_| default.into())
    }
    /// A client URL of the broker at `addr`.
    pub(crate) fn broker_url(b: Broker, addr: &str) -> String {
        match b {
            Broker::Nats => format!("nats://{addr}"),
            Broker::Rabbit => format!("amqp://guest:guest@{addr}/%2f"),
            Broker::Redis => format!("redis://{addr}"),
        }
    }
}

/// `scheme://user@host:port/db` → (`host:port`, URL with `host:port` replaced and db `name`).
pub(crate) fn rewrite_url(url: &str, host_port: Option<&str>, db: &str) -> anyhow::Result<(String, String)> {
    let (scheme, rest) = url.split_once("://").context("database URL without scheme")?;
    let (auth_host, _) = rest.split_once('/').unwrap_or((rest, ""));
    let (auth, host) = match auth_host.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h.to_owned()),
        None => (String::new(), auth_host.to_owned()),
    };
    let new_host = host_port.map_or(host.clone(), str::to_owned);
    Ok((host, format!("{scheme}://{auth}{new_host}/{db}")))
}

/// Names of everything one run creates.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// Short unique id of the run (lower-case alphanumeric).
    pub(crate) run: String,
}

impl Names {
    /// The database (prefixed `outbox_t_` so `scripts/test.sh` removes it after a crash).
    pub(crate) fn database(&self) -> String {
        format!("outbox_t_chaos_{}", self.run)
    }
    /// The `i`-th idle store's database (see [`crate::setup::CROWDED`]): an outbox table that
    /// nothing writes to, on the same server.
    pub(crate) fn idle_database(&self, i: usize) -> String {
        format!("outbox_t_chaos_{}_idle{i}", self.run)
    }
    /// The topic every writer enqueues to.
    pub(crate) fn topic(&self) -> String {
        format!("chaos.{}.order", self.run)
    }
    /// The JetStream stream.
    pub(crate) fn stream(&self) -> String {
        format!("CHAOS_{}", self.run.to_uppercase())
    }
    /// The NATS subject prefix (subject = prefix.topic).
    pub(crate) fn subject_prefix(&self) -> String {
        format!("cx{}", self.run)
    }
    /// RabbitMQ queue or Redis stream key of a consumer group.
    pub(crate) fn queue(&self, group: &str) -> String {
        format!("chaos.{}.{group}", self.run)
    }
    /// The Redis stream.
    pub(crate) fn redis_stream(&self) -> String {
        format!("chaos:{}", self.run)
    }
}

/// The harness's own tables. `chaos_biz` holds one row per key (writers lock it, so per-key
/// sequences follow commit order); `chaos_ledger` is written in the same transaction as the
/// message; `chaos_rolledback` after a deliberate rollback, outside it; `chaos_raw` gets every
/// delivery of the raw group; `chaos_effect` the business effect of the inbox group.
const PG_TABLES: &[&str] = &[
    "CREATE TABLE chaos_biz (k INTEGER PRIMARY KEY, seq BIGINT NOT NULL DEFAULT 0)",
    "CREATE TABLE chaos_ledger (msg_id BIGINT PRIMARY KEY, k INTEGER NOT NULL, seq BIGINT NOT NULL, \
     writer TEXT NOT NULL, committed_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    "CREATE TABLE chaos_rolledback (msg_id BIGINT PRIMARY KEY)",
    "CREATE TABLE chaos_raw (n BIGSERIAL PRIMARY KEY, msg_id BIGINT NOT NULL, k INTEGER NOT NULL, \
     seq BIGINT NOT NULL, pos BIGINT, at TIMESTAMPTZ NOT NULL DEFAULT now())",
    "CREATE TABLE chaos_effect (n BIGSERIAL PRIMARY KEY, msg_id BIGINT NOT NULL, k INTEGER NOT NULL, \
     seq BIGINT NOT NULL, pos BIGINT, at TIMESTAMPTZ NOT NULL DEFAULT now())",
];

const MY_TABLES: &[&str] = &[
    "CREATE TABLE chaos_biz (k INT PRIMARY KEY, seq BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
    "CREATE TABLE chaos_ledger (msg_id BIGINT PRIMARY KEY, k INT NOT NULL, seq BIGINT NOT NULL, \
     writer VARCHAR(32) NOT NULL, committed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB",
    "CREATE TABLE chaos_rolledback (msg_id BIGINT PRIMARY KEY) ENGINE=InnoDB",
    "CREATE TABLE chaos_raw (n BIGINT AUTO_INCREMENT PRIMARY KEY, msg_id BIGINT NOT NULL, k INT NOT NULL, \
     seq BIGINT NOT NULL, pos BIGINT NULL, at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB",
    "CREATE TABLE chaos_effect (n BIGINT AUTO_INCREMENT PRIMARY KEY, msg_id BIGINT NOT NULL, k INT NOT NULL, \
     seq BIGINT NOT NULL, pos BIGINT NULL, at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB",
];

/// Runs `statement` on the server of `dialect`, on a connection of its own to its admin URL.
async fn on_server(dialect: Dialect, statement: &str) -> anyhow::Result<()> {
    async fn run<C>(url: &str, server: &str, statement: &str) -> anyhow::Result<()>
    where
        C: Connection,
        for<'c> &'c mut C: Executor<'c, Database = C::Database>,
    {
        let mut c = C::connect(url).await.with_context(|| format!("{server} at {url} is not reachable"))?;
        c.execute(statement).await?;
        c.close().await?;
        Ok(())
    }
    let admin = Servers::admin(dialect);
    match dialect {
        Dialect::Pg => run::<sqlx::PgConnection>(&admin, "PostgreSQL", statement).await,
        Dialect::My => run::<sqlx::MySqlConnection>(&admin, "MariaDB", statement).await,
    }
}

/// Creates the run's database with the outbox, inbox and chaos tables and `keys` business rows,
/// and the idle stores' databases with an outbox table each; returns the first's direct URL.
pub(crate) async fn create_database(dialect: Dialect, names: &Names, keys: u32) -> anyhow::Result<String> {
    let db = names.database();
    on_server(dialect, &format!("CREATE DATABASE {db}")).await?;
    let url = rewrite_url(&Servers::admin(dialect), None, &db)?.1;
    let outbox = outbox_store::AnyOutbox::connect(&url, 2).await?;
    outbox.migrate().await?;
    let pools = Db::connect(&url).await?;
    let insert_key = dialect.sql("INSERT INTO chaos_biz (k) VALUES (?)");
    on_pool!(&pools, pool => {
        outbox_inbox::Inbox::new(pool.clone()).migrate().await?;
        for t in dialect.pick(PG_TABLES, MY_TABLES) {
            sqlx::query(t).execute(pool).await?;
        }
        for k in 0..keys {
            sqlx::query(&insert_key).bind(k as i32).execute(pool).await?;
        }
    });
    pools.close().await;
    for i in 0..crate::setup::IDLE_STORES {
        let idle = names.idle_database(i);
        on_server(dialect, &format!("CREATE DATABASE {idle}")).await?;
        let url = rewrite_url(&Servers::admin(dialect), None, &idle)?.1;
        let outbox = outbox_store::AnyOutbox::connect(&url, 1).await?;
        outbox.migrate().await?;
    }
    Ok(url)
}

/// Drops the run's databases.
pub(crate) async fn drop_database(dialect: Dialect, names: &Names) -> anyhow::Result<()> {
    let force = dialect.pick(" WITH (FORCE)", "");
    for i in 0..crate::setup::IDLE_STORES {
        on_server(dialect, &format!("DROP DATABASE IF EXISTS {}{force}", names.idle_database(i))).await?;
    }
    on_server(dialect, &format!("DROP DATABASE IF EXISTS {}{force}", names.database())).await
}

/// Creates the broker side: the JetStream stream, the RabbitMQ queues bound to the topic, or the
/// Redis stream with both consumer groups.
pub(crate) async fn setup_broker(broker: Broker, names: &Names) -> anyhow::Result<()> {
    let url = Servers::broker_url(broker, &Servers::broker_addr(broker));
    match broker {
        Broker::Nats => {
            let client = async_nats::connect(&url).await.context("connecting to NATS")?;
            let js = async_nats::jetstream::new(client);
            js.create_stream(async_nats::jetstream::stream::Config {
                name: names.stream(),
                subjects: vec![format!("{}.>", names.subject_prefix())],
                storage: async_nats::jetstream::stream::StorageType::File,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow::anyhow!("creating the JetStream stream: {e}"))?;
        }
        Broker::Rabbit => {
            use lapin::options::{QueueBindOptions, QueueDeclareOptions};
            let conn = lapin::Connection::connect(&url, lapin::ConnectionProperties::default()).await?;
            let ch = conn.create_channel().await?;
            for g in ["raw", "inbox"] {
                let q = names.queue(g);
                ch.queue_declare(
                    &q,
                    QueueDeclareOptions { durable: true, ..Default::default() },
                    lapin::types::FieldTable::default(),
                )
                .await?;
                ch.queue_bind(
                    &q,
                    "amq.topic",
                    &names.topic(),
                    QueueBindOptions::default(),
                    lapin::types::FieldTable::default(),
                )
                .await?;
            }
            conn.close(200, "ok").await?;
        }
        Broker::Redis => {
            let client = redis::Client::open(url)?;
            let mut c = client.get_multiplexed_async_connection().await?;
            for g in ["raw", "inbox"] {
                let _: () = redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg(names.redis_stream())
                    .arg(g)
                    .arg("0")
                    .arg("MKSTREAM")
                    .query_async(&mut c)
                    .await?;
            }
        }
    }
    Ok(())
}

/// Removes what [`setup_broker`] created.
pub(crate) async fn teardown_broker(broker: Broker, names: &Names) -> anyhow::Result<()> {
    let url = Servers::broker_url(broker, &Servers::broker_addr(broker));
    match broker {
        Broker::Nats => {
            let js = async_nats::jetstream::new(async_nats::connect(&url).await?);
            js.delete_stream(names.stream()).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        Broker::Rabbit => {
            let conn = lapin::Connection::connect(&url, lapin::ConnectionProperties::default()).await?;
            let ch = conn.create_channel().await?;
            for g in ["raw", "inbox"] {
                ch.queue_delete(&names.queue(g), Default::default()).await?;
            }
            conn.close(200, "ok").await?;
        }
        Broker::Redis => {
            let client = redis::Client::open(url)?;
            let mut c = client.get_multiplexed_async_connection().await?;
            let _: () = redis::cmd("DEL").arg(names.redis_stream()).query_async(&mut c).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_on_postgres_only() {
        let q = "INSERT INTO t (a, b) VALUES (?, ?)";
        assert_eq!(Dialect::Pg.sql(q), "INSERT INTO t (a, b) VALUES ($1, $2)");
        assert_eq!(Dialect::My.sql(q), q);
        assert_eq!(Dialect::Pg.sql("SELECT 1"), "SELECT 1");
    }

    #[test]
    fn broker_names_round_trip() {
        for b in Broker::ALL {
            assert_eq!(Broker::of_name(b.name()), Some(b));
        }
        assert_eq!(Broker::of_name("kafka"), None);
    }
}
