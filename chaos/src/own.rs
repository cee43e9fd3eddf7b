//! Servers of the run's own: a PostgreSQL cluster, a MariaDB instance, a `nats-server` and a
//! `redis-server`, each on a free port with its data under the run's directory, so that the
//! suite can crash and restart them for real (never the shared servers of the machine).
//!
//! A crash is what an operator would call one: `pg_ctl stop -m immediate` (the postmaster
//! quits without a checkpoint and every backend dies with it; the restart runs crash recovery),
//! and SIGKILL for the others. The restart uses the same data and the same port; nothing is
//! cleaned up in between. Durability is the servers' own, as configured here: PostgreSQL runs
//! with `fsync=off` and MariaDB with its defaults (a process crash keeps what the OS was given;
//! the machine itself does not crash), Redis with `appendfsync always` (its default `everysec`
//! may lose the last second of acknowledged writes, which is Redis' trade, not the outbox's),
//! and JetStream writes a stream's messages in place before it acknowledges them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::process::{Child, Command};

use crate::combo::{Broker, Dialect};

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A PostgreSQL cluster (run as the `postgres` user: the server refuses root).
    Postgres,
    /// A MariaDB instance.
    MariaDb,
    /// `nats-server` with JetStream.
    Nats,
    /// `redis-server` with an append-only file.
    Redis,
}

impl Kind {
    /// The own server for a database of `dialect`.
    pub(crate) fn of_dialect(dialect: Dialect) -> Kind {
        match dialect {
            Dialect::Pg => Kind::Postgres,
            Dialect::My => Kind::MariaDb,
        }
    }

    /// The own server for `broker`, when the suite runs one (RabbitMQ: no, it stays shared and
    /// its outages are the proxy's).
    pub(crate) fn of_broker(broker: Broker) -> Option<Kind> {
        match broker {
            Broker::Nats => Some(Kind::Nats),
            Broker::Redis => Some(Kind::Redis),
            Broker::Rabbit => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Postgres => "postgres",
            Kind::MariaDb => "mariadbd",
            Kind::Nats => "nats-server",
            Kind::Redis => "redis-server",
        }
    }
}

/// One server of the run's own; stopped (immediately) when dropped.
pub(crate) struct OwnServer {
    kind: Kind,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// How many times it was crashed and restarted.
    pub(crate) restarts: u32,
}

impl OwnServer {
    /// Creates its data under `parent` and starts it; returns once it takes connections.
    pub(crate) async fn start(kind: Kind, parent: &Path) -> anyhow::Result<OwnServer> {
        let dir = parent.join(format!("own-{}", kind.name()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = free_port()?;
        let mut server = OwnServer { kind, port, dir, child: None, restarts: 0 };
        server.init().await?;
        server.launch().await?;
        Ok(server)
    }

    /// `host:port` it listens on.
    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The admin URL of a database server (`None` for a broker).
    pub(crate) fn admin_url(&self) -> Option<String> {
        match self.kind {
            Kind::Postgres => Some(format!("postgres://postgres@{}/postgres", self.addr())),
            Kind::MariaDb => Some(format!("mysql://root@{}/mysql", self.addr())),
            Kind::Nats | Kind::Redis => None,
        }
    }

    /// Crashes it and starts it again on the same data and port; returns how long it was down
    /// (until it took connections again).
    pub(crate) async fn crash_and_restart(&mut self) -> anyhow::Result<Duration> {
        let t = Instant::now();
        self.crash().await?;
        self.launch().await?;
        self.restarts += 1;
        Ok(t.elapsed())
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Creates the data directory (the databases' system tables).
    async fn init(&self) -> anyhow::Result<()> {
        let data = self.data();
        match self.kind {
            Kind::Postgres => {
                std::fs::create_dir_all(&data)?;
                run(Command::new("chown").arg("-R").arg("postgres:postgres").arg(&self.dir), "chown").await?;
                run(
                    Command::new("runuser")
                        .args(["-u", "postgres", "--"])
                        .arg(pg_bin("initdb")?)
                        .arg("-D")
                        .arg(&data)
                        .args(["-A", "trust", "-U", "postgres", "--no-sync"]),
                    "initdb",
                )
                .await
            }
            Kind::MariaDb => {
                std::fs::create_dir_all(&data)?;
                run(
                    Command::new("mariadb-install-db")
                        .args([
                            "--no-defaults",
                            "--user=root",
                            "--auth-root-authentication-method=normal",
                            "--skip-test-db",
                        ])
                        .arg(format!("--datadir={}", data.display())),
                    "mariadb-install-db",
                )
                .await
            }
            Kind::Nats => {
                let config = format!(
                    "listen: \"127.0.0.1:{}\"\nlog_file: \"{}\"\njetstream {{ store_dir: \"{}\" }}\n",
                    self.port,
                    self.log().display(),
                    data.display()
                );
                std::fs::write(self.dir.join("nats.conf"), config)?;
                Ok(())
            }
            Kind::Redis => {
                std::fs::create_dir_all(&data)?;
                Ok(())
            }
        }
    }

    /// Starts the process and waits until it takes connections (60 s at most).
    async fn launch(&mut self) -> anyhow::Result<()> {
        let data = self.data();
        let port = self.port.to_string();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log())?;
        let mut cmd = match self.kind {
            Kind::Postgres => {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"])
                    .arg(pg_bin("postgres")?)
                    .arg("-D")
                    .arg(&data)
                    .args(["-p", &port, "-k"])
                    .arg(&self.dir)
                    .args([
                        "-c",
                        "listen_addresses=127.0.0.1",
                        "-c",
                        "fsync=off",
                        "-c",
                        "max_connections=200",
                    ]);
                c
            }
            Kind::MariaDb => {
                let mut c = Command::new("mariadbd");
                c.args(["--no-defaults", "--user=root", "--bind-address=127.0.0.1", "--skip-name-resolve"])
                    .arg(format!("--datadir={}", data.display()))
                    .arg(format!("--port={port}"))
                    .arg(format!("--socket={}", self.dir.join("mysqld.sock").display()))
                    .arg(format!("--pid-file={}", self.dir.join("mysqld.pid").display()))
                    .args(["--innodb-buffer-pool-size=64M", "--innodb-log-file-size=32M"])
                    .args(["--max-connections=300", "--transaction-isolation=REPEATABLE-READ"]);
                c
            }
            Kind::Nats => {
                let program =
                    std::env::var("OUTBOX_TEST_NATS_SERVER").unwrap_or_else(|_| "nats-server".into());
                let mut c = Command::new(program);
                c.arg("-c").arg(self.dir.join("nats.conf"));
                c
            }
            Kind::Redis => {
                let mut c = Command::new("redis-server");
                c.args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
                    .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
                    .arg(&data);
                c
            }
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.kind.name()))?;
        self.child = Some(child);
        self.wait_ready().await
    }

    /// Waits until a client can use it: a query on a database, a port that answers for a
    /// broker (both retry their connections).
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Some(c) = &mut self.child {
                if let Ok(Some(status)) = c.try_wait() {
                    bail!(
                        "{} exited at start ({status}); its log: {}",
                        self.kind.name(),
                        self.log().display()
                    );
                }
            }
            match self.ready().await {
                Ok(()) => return Ok(()),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "{} did not take connections within 60 s ({last}); its log: {}",
            self.kind.name(),
            self.log().display()
        )
    }

    async fn ready(&self) -> anyhow::Result<()> {
        use sqlx::Connection;
        match self.kind {
            Kind::Postgres => {
                let url = self.admin_url().unwrap_or_default();
                sqlx::PgConnection::connect(&url).await?.close().await?;
            }
            Kind::MariaDb => {
                let url = self.admin_url().unwrap_or_default();
                sqlx::MySqlConnection::connect(&url).await?.close().await?;
            }
            Kind::Nats | Kind::Redis => {
                tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
            }
        }
        Ok(())
    }

    /// Stops it at once, without a clean shutdown.
    async fn crash(&mut self) -> anyhow::Result<()> {
        if self.kind == Kind::Postgres {
            // `runuser` is the child we hold; the postmaster is its child. An immediate stop
            // quits the postmaster and every backend without a checkpoint.
            run(
                Command::new("runuser")
                    .args(["-u", "postgres", "--"])
                    .arg(pg_bin("pg_ctl")?)
                    .args(["stop", "-m", "immediate", "-D"])
                    .arg(self.data()),
                "pg_ctl stop -m immediate",
            )
            .await?;
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.start_kill();
            tokio::time::timeout(Duration::from_secs(30), c.wait())
                .await
                .with_context(|| format!("{} did not exit within 30 s of SIGKILL", self.kind.name()))??;
        }
        Ok(())
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        if self.kind == Kind::Postgres && self.child.is_some() {
            if let Ok(pg_ctl) = pg_bin("pg_ctl") {
                let _ = std::process::Command::new("runuser")
                    .args(["-u", "postgres", "--"])
                    .arg(pg_ctl)
                    .args(["stop", "-m", "immediate", "-D"])
                    .arg(self.data())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        if let Some(c) = &mut self.child {
            let _ = c.start_kill();
        }
    }
}

/// A port nothing listens on now.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `tool` of the newest PostgreSQL under `/usr/lib/postgresql`.
fn pg_bin(tool: &str) -> anyhow::Result<PathBuf> {
    let base = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<_> = std::fs::read_dir(base)
        .with_context(|| format!("PostgreSQL's binaries under {}", base.display()))?
        .flatten()
        .map(|e| e.path())
        .collect();
    versions.sort();
    let v = versions.last().with_context(|| format!("no PostgreSQL version under {}", base.display()))?;
    Ok(v.join("bin").join(tool))
}

/// Runs `cmd` to its end; fails with its output when it fails.
async fn run(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let out = cmd.output().await.with_context(|| format!("{what}: cannot run"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
