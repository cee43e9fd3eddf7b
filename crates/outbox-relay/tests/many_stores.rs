//! One process relaying many databases (`outbox relay` with many `[[stores]]`): relays that
//! share a [`Budget`], on pools built by `AnyOutbox::connect`, against the real servers.
//!
//! What is proved: an idle store holds exactly one connection (its listener/keeper) and
//! nothing of its pool; its scan goes on as ticks on that connection (a delayed message is
//! still found when it falls due, without a claim per interval); a foreign INSERT wakes it
//! (PostgreSQL through `NOTIFY`, MySQL through the tick); and the stores go back to one
//! connection each after their work.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::testing::TestTransport;
use outbox_relay::{Budget, Destination, Relay, RelayConfig, RelayStats, Route};
use outbox_store::AnyOutbox;
use outbox_testkit::eventually;
use sqlx::{ConnectOptions, Connection};
use tokio_util::sync::CancellationToken;

/// The server kind under test.
#[derive(Clone, Copy)]
enum Server {
    Pg,
    My,
}

impl Server {
    /// Connections open to database `name`, whoever opened them.
    async fn connections(self, name: &str) -> i64 {
        match self {
            Server::Pg => {
                let mut c = sqlx::postgres::PgConnectOptions::from_str(&outbox_testkit::pg_url())
                    .unwrap()
                    .connect()
                    .await
                    .unwrap();
                let n = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
                    .bind(name)
                    .fetch_one(&mut c)
                    .await
                    .unwrap();
                c.close().await.unwrap();
                n
            }
            Server::My => {
                let mut c = sqlx::mysql::MySqlConnectOptions::from_str(&outbox_testkit::mysql_url())
                    .unwrap()
                    .connect()
                    .await
                    .unwrap();
                let n =
                    sqlx::query_scalar("SELECT count(*) FROM information_schema.processlist WHERE db = ?")
                        .bind(name)
                        .fetch_one(&mut c)
                        .await
                        .unwrap();
                c.close().await.unwrap();
                n
            }
        }
    }

    /// A foreign application's INSERT on a connection of its own (no in-process signal), due
    /// after `delay`.
    async fn insert(self, url: &str, payload: &str, delay: Duration) {
        let ms = i64::try_from(delay.as_millis()).unwrap();
        match self {
            Server::Pg => {
                let mut c = sqlx::PgConnection::connect(url).await.unwrap();
                sqlx::query(
                    "INSERT INTO outbox_message (topic, payload, next_attempt_at) \
                     VALUES ('t', $1, now() + $2 * interval '1 millisecond')",
                )
                .bind(payload)
                .bind(ms)
                .execute(&mut c)
                .await
                .unwrap();
                c.close().await.unwrap();
            }
            Server::My => {
                let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
                sqlx::query(
                    "INSERT INTO outbox_message (topic, payload, next_attempt_at) \
                     VALUES ('t', ?, UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND)",
                )
                .bind(payload)
                .bind(ms)
                .execute(&mut c)
                .await
                .unwrap();
                c.close().await.unwrap();
            }
        }
    }
}

/// Three stores on `server`, one relay each, sharing a budget of one batch in flight (so the
/// budget is crowded and the pools give their connections back between turns).
async fn idle_stores_hold_only_their_keeper(server: Server) {
    let mut dbs = Vec::new();
    for _ in 0..3 {
        let entry: ((String, String), Either) = match server {
            Server::Pg => {
                let db = outbox_testkit::fresh_pg().await;
                outbox_store::Outbox::new(db.pool.clone()).migrate().await.unwrap();
                park(&db.pool).await;
                ((db.name.clone(), db.url.clone()), Either::Pg(db))
            }
            Server::My => {
                let db = outbox_testkit::fresh_mysql().await;
                outbox_store::Outbox::new(db.pool.clone()).migrate().await.unwrap();
                park(&db.pool).await;
                ((db.name.clone(), db.url.clone()), Either::My(db))
            }
        };
        dbs.push(entry);
    }
    let budget = Budget::new(1);
    let stop = CancellationToken::new();
    let mut handles = Vec::new();
    let mut stats = Vec::new();
    let mut relays = Vec::new();
    let transport = TestTransport::new();
    for (i, ((_, url), _)) in dbs.iter().enumerate() {
        let outbox = AnyOutbox::connect(url, 3).await.unwrap();
        let cfg = RelayConfig {
            owner: format!("many-{i}"),
            idle_interval: Duration::from_millis(100),
            ..RelayConfig::default()
        };
        let relay = Relay::builder(&outbox)
            .config(cfg)
            .budget(budget.clone())
            .destination(Destination::new("d", Arc::new(transport.clone())))
            .route(Route::new("#", ["d"]))
            .build()
            .unwrap();
        stats.push(relay.stats());
        relays.push(relay);
    }
    for r in relays {
        handles.push(tokio::spawn(r.run(stop.clone())));
    }
    let one_each = || async {
        let mut counts = Vec::new();
        for ((name, _), _) in &dbs {
            counts.push(server.connections(name).await);
        }
        if counts.iter().any(|n| *n != 1) {
            eprintln!("connections per store: {counts:?}");
            return false;
        }
        true
    };
    eventually("every idle store holds one connection, its keeper", one_each).await;

    // Idle: the scan goes on as ticks, not claims. (A store waiting for its first share also
    // holds one connection: wait until each has declared itself idle; it claims once more
    // after that, which the bound below allows.)
    eventually("every store idle", || async {
        stats.iter().all(|s| s.idle.load(std::sync::atomic::Ordering::Relaxed))
    })
    .await;
    let (ticks0, claims0): (Vec<u64>, Vec<u64>) =
        stats.iter().map(|s| (RelayStats::get(&s.idle_ticks), RelayStats::get(&s.claims))).unzip();
    eventually("each store ticks", || async {
        stats.iter().zip(&ticks0).all(|(s, t0)| RelayStats::get(&s.idle_ticks) >= t0 + 5)
    })
    .await;
    for (s, c0) in stats.iter().zip(&claims0) {
        assert!(
            RelayStats::get(&s.claims) <= c0 + 1,
            "an idle store with a keeper does not claim per interval"
        );
    }
    assert_eq!(server.connections(&dbs[0].0 .0).await, 1, "ticks use the keeper's connection");

    // A delayed foreign message is found by a tick when it falls due; a plain one at once
    // (PostgreSQL: NOTIFY; MySQL: the next tick).
    server.insert(&dbs[0].0 .1, "later", Duration::from_millis(700)).await;
    server.insert(&dbs[1].0 .1, "now", Duration::ZERO).await;
    eventually("both delivered", || async { transport.delivered().len() == 2 }).await;
    let mut payloads: Vec<String> = transport.delivered().iter().map(|e| e.payload.clone()).collect();
    payloads.sort();
    assert_eq!(payloads, ["later", "now"]);

    // After their work the stores give their pooled connections back.
    eventually("back to one connection each", one_each).await;
    stop.cancel();
    for h in handles {
        h.await.unwrap();
    }
    for (_, db) in dbs {
        db.drop_db().await;
    }
}

/// Closes the test pool's connections (so only the relay's count): each is taken and closed
/// first, since one still on its way back to the pool would stay open in the closed pool.
async fn park<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) {
    for _ in 0..pool.size() {
        match tokio::time::timeout(Duration::from_secs(5), pool.acquire()).await {
            Ok(Ok(c)) => c.close().await.unwrap(),
            _ => break,
        }
    }
    pool.close().await;
}

/// A test database of either server.
enum Either {
    Pg(outbox_testkit::TestDb<sqlx::Postgres>),
    My(outbox_testkit::TestDb<sqlx::MySql>),
}

impl Either {
    async fn drop_db(self) {
        match self {
            Either::Pg(db) => db.drop_db().await,
            Either::My(db) => db.drop_db().await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_idle_stores_hold_only_their_keeper() {
    idle_stores_hold_only_their_keeper(Server::Pg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_idle_stores_hold_only_their_keeper() {
    idle_stores_hold_only_their_keeper(Server::My).await;
}
