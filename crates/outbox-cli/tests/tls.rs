//! The daemon on TLS end to end: a PostgreSQL and a Redis of the test's own that take TLS only
//! (Redis also requires a client certificate), with certificates the test makes. The relay
//! verifies both servers against the test CA, presents its client certificate to Redis, and
//! delivers what a plain-SQL writer commits. A store or destination it cannot verify stops it
//! at start with an error naming which one and why; the CLI's database commands say the same.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use outbox_testkit::fs::temp_dir;
use outbox_testkit::process::{RelayConfig, RelayProcess};
use outbox_testkit::tls::{self, Pki};

mod common;
use common::{insert_numbered, OUTBOX};

fn store_url(port: u16, ca: &str) -> String {
    format!("postgres://postgres:pgs3cret@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={ca}")
}

fn redis_transport(port: u16, pki: &Pki, ca: &str, stream: &str) -> String {
    format!(
        "type = \"redis\"\nurl = \"rediss://localhost:{port}\"\nstream = \"{stream}\"\n\
         tls_ca_file = \"{ca}\"\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
        pki.path("client.pem"),
        pki.path("client.key"),
    )
}

/// A test's own TLS-only PostgreSQL and Redis (which requires a client certificate), their
/// PKI and a directory for the daemon's files (dropped in this order, the servers first).
struct TlsServers {
    pg: tls::TlsServer,
    redis: tls::TlsServer,
    pki: Pki,
    /// The CA that signed both servers.
    ca: String,
    dir: PathBuf,
}

impl TlsServers {
    fn start(name: &str) -> TlsServers {
        let dir = temp_dir(name);
        let pki = Pki::new();
        let pg = tls::postgres(&pki);
        let redis = tls::redis(&pki, true);
        let ca = pki.path("ca.pem");
        TlsServers { dir, pki, pg, redis, ca }
    }

    /// Starts `outbox relay` from `store_url` to the Redis stream destination `transport`, with
    /// its config and log named after `name`.
    fn relay(&self, name: &str, settings: &str, store_url: &str, transport: &str) -> RelayProcess {
        let cfg = RelayConfig::new(settings, store_url)
            .migrate()
            .destination("stream", "", transport)
            .route("#", &["stream"])
            .write(&self.dir.join(format!("{name}.toml")));
        RelayProcess::start(OUTBOX, &cfg, &self.dir.join(format!("{name}.log")))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_delivers_from_a_tls_database_to_a_tls_broker_with_a_client_certificate() {
    let servers = TlsServers::start("outbox-tls-daemon");
    let TlsServers { pki, pg, redis, ca, .. } = &servers;
    let url = store_url(pg.port(), ca);
    let transport = redis_transport(redis.port(), pki, ca, "orders");
    let settings = "idle_interval = \"200ms\"\nshutdown_timeout = \"5s\"";
    let mut relay = servers.relay("relay", settings, &url, &transport);

    // The writer knows only the table, and connects over TLS too.
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(ssl);
    outbox_testkit::eventually("the daemon migrates the store", || async {
        sqlx::query("SELECT 1 FROM outbox_message LIMIT 1").execute(&pool).await.is_ok()
    })
    .await;
    insert_numbered(&pool, "INSERT INTO outbox_message (topic, payload) VALUES ('order.paid', $1)", 20).await;
    // `sent` is written only after Redis confirmed the XADD, over the verified TLS connection.
    outbox_testkit::eventually("20 messages confirmed by the TLS Redis", || async {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox_message WHERE status = 'sent'")
            .fetch_one(&pool)
            .await
            .unwrap();
        n == 20
    })
    .await;
    relay.assert_alive("delivering over TLS");
    assert!(relay.terminate(Duration::from_secs(30)).success(), "{}", relay.log_text());
    let log = relay.log_text();
    assert!(!log.contains("pgs3cret"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_or_destination_it_cannot_verify_stops_the_relay_naming_it_and_why() {
    let servers = TlsServers::start("outbox-tls-refused");
    let TlsServers { pki, pg, redis, ca, .. } = &servers;
    let other = pki.path("other-ca.pem");

    // The store's CA is not the one that signed the server: the daemon exits at start.
    let transport = redis_transport(redis.port(), pki, ca, "s");
    let mut relay = servers.relay("bad-store", "", &store_url(pg.port(), &other), &transport);
    assert!(!relay.child.wait_exit(Duration::from_secs(60)).success());
    let log = relay.log_text();
    assert!(log.contains("store \"shop\""), "{log}");
    assert!(log.contains("not signed by a CA this client trusts"), "{log}");
    assert!(!log.contains("pgs3cret"), "{log}");

    // The broker's certificate is not valid for 127.0.0.1.
    let transport = transport.replace("rediss://localhost", "rediss://127.0.0.1");
    let mut relay = servers.relay("bad-host", "", &store_url(pg.port(), ca), &transport);
    assert!(!relay.child.wait_exit(Duration::from_secs(60)).success());
    let log = relay.log_text();
    assert!(log.contains("stream"), "names the destination: {log}");
    assert!(log.contains("not valid for the host name"), "{log}");

    // The CLI's database commands explain the same failure.
    let out = Command::new(OUTBOX)
        .args(["status", "--database-url", &store_url(pg.port(), &other)])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("not signed by a CA this client trusts"), "{stderr}");
    assert!(stderr.contains(&format!("localhost:{}", pg.port())) && !stderr.contains("pgs3cret"), "{stderr}");
}
