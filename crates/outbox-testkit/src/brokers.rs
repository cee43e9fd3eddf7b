//! Real Kafka-protocol and RocketMQ-protocol brokers, started per test on free loopback ports.
//!
//! Neither broker runs on the machine as a service: `scripts/brokers.sh` installs them (tansu
//! for Kafka, the rocketmq-rust name server and broker for RocketMQ; see
//! `docs/transports.md`) and exports where their binaries are:
//! - `OUTBOX_TEST_TANSU`: the `tansu` binary;
//! - `OUTBOX_TEST_ROCKETMQ_BIN`: the directory holding `rocketmq-namesrv-rust` and
//!   `rocketmq-broker-rust`.
//!
//! [`require`] decides what a test does when its broker is not installed: it fails when
//! `OUTBOX_REQUIRE_BROKERS=1` (what `scripts/test.sh` sets once it has installed them) and
//! otherwise returns `None`, so a plain `cargo test` on a machine without them still runs the
//! rest of the suite and says which tests did not run.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::fs::{temp_dir, temp_dir_in};
use crate::net::{free_port, wait_port};
use crate::process::KillOnDrop;

/// The value of the environment variable `var`, or `None` (with a note on stderr) when the
/// broker is not installed and not required; panics when it is required.
pub fn require(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            let required = std::env::var("OUTBOX_REQUIRE_BROKERS").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "{what} is required (OUTBOX_REQUIRE_BROKERS=1) but {var} is not set; run scripts/brokers.sh"
            );
            eprintln!(
                "NOT RUN: {what} is not installed ({var} unset; `source scripts/brokers.sh` installs it)"
            );
            None
        }
    }
}

fn log_file(dir: &Path, name: &str) -> Stdio {
    std::fs::File::create(dir.join(name)).map(Stdio::from).unwrap_or_else(|_| Stdio::null())
}

/// Starts `cmd`, a broker's process, and waits up to 90 s for it to listen on `port`.
fn started(cmd: &mut Command, port: u16, what: &str) -> KillOnDrop {
    let child =
        cmd.spawn().unwrap_or_else(|e| panic!("cannot start {what} ({}): {e}", cmd.get_program().display()));
    let child = KillOnDrop(child);
    wait_port(port, Duration::from_secs(90), what);
    child
}

/// A tansu broker (Kafka protocol, in-memory storage) on its own port. Killed on drop.
pub struct Tansu {
    bin: String,
    port: u16,
    /// The port advertised to clients (a proxy in front of the broker, or the broker's own).
    advertised: u16,
    dir: PathBuf,
    child: Option<KillOnDrop>,
}

impl Tansu {
    /// Starts a broker, or returns `None` when tansu is not installed (see [`require`]).
    pub fn start() -> Option<Tansu> {
        let port = free_port();
        Self::start_advertising(port, port)
    }

    /// Starts a broker on `port` that tells clients to connect to `advertised` (a proxy).
    pub fn start_advertising(port: u16, advertised: u16) -> Option<Tansu> {
        let bin = require("OUTBOX_TEST_TANSU", "the Kafka broker (tansu)")?;
        let mut t = Tansu { bin, port, advertised, dir: temp_dir("outbox-tansu"), child: None };
        t.spawn();
        Some(t)
    }

    fn spawn(&mut self) {
        let child = started(
            Command::new(&self.bin)
                .arg("broker")
                .arg("--listener-url")
                .arg(format!("tcp://127.0.0.1:{}", self.port))
                .arg("--advertised-listener-url")
                .arg(format!("tcp://127.0.0.1:{}", self.advertised))
                .arg("--storage-engine")
                .arg("memory://tansu/")
                .env("RUST_LOG", "warn")
                .stdout(log_file(&self.dir, "tansu.out"))
                .stderr(log_file(&self.dir, "tansu.err")),
            self.port,
            "tansu",
        );
        self.child = Some(child);
    }

    /// `127.0.0.1:<port>` of the broker itself.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's own port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the broker (SIGKILL): its in-memory topics are gone.
    pub fn stop(&mut self) {
        self.child = None;
    }

    /// Starts the broker again on the same port (empty: topics must be created again).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        self.child = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where the RocketMQ test brokers keep their files: `OUTBOX_TEST_ROCKETMQ_DIR`, else the
/// RAM-backed `/dev/shm` when it is there, else the temporary directory. rocketmq-rust's store
/// stops accepting writes once the filesystem it sits on passes its disk-usage ratios (seen
/// here: its start rolled back with the disk 82-86% used), and its configuration caps those
/// ratios at 75-90%; a build machine's disk can be that full, a tmpfs almost never is. The files (about 70 MB per broker) live as long as the test.
fn rocketmq_base() -> PathBuf {
    if let Some(d) = std::env::var_os("OUTBOX_TEST_ROCKETMQ_DIR") {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    let writable =
        shm.is_dir() && std::fs::metadata(shm).map(|m| !m.permissions().readonly()).unwrap_or(false);
    if writable {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A RocketMQ name server and one broker (rocketmq-rust), with file storage in a temporary
/// directory, on their own ports. Killed on drop.
pub struct RocketMq {
    bin: PathBuf,
    dir: PathBuf,
    namesrv_port: u16,
    broker_port: u16,
    auto_create_topics: bool,
    namesrv: Option<KillOnDrop>,
    broker: Option<KillOnDrop>,
}

impl RocketMq {
    /// Starts a name server and a broker, or returns `None` when they are not installed (see
    /// [`require`]). `auto_create_topics` is the broker's `autoCreateTopicEnable`.
    pub fn start(auto_create_topics: bool) -> Option<RocketMq> {
        let bin = PathBuf::from(require("OUTBOX_TEST_ROCKETMQ_BIN", "the RocketMQ name server and broker")?);
        // The broker also listens on listenPort - 2 (fast port) and on the HA port.
        let broker_port = loop {
            let p = free_port();
            if p > 1024 + 2 && TcpListener::bind(("127.0.0.1", p - 2)).is_ok() {
                break p;
            }
        };
        let mut r = RocketMq {
            bin,
            dir: temp_dir_in(&rocketmq_base(), "outbox-rocketmq"),
            namesrv_port: free_port(),
            broker_port,
            auto_create_topics,
            namesrv: None,
            broker: None,
        };
        r.write_config();
        r.spawn_namesrv();
        r.spawn_broker();
        Some(r)
    }

    fn write_config(&self) {
        let d = self.dir.display();
        std::fs::create_dir_all(self.dir.join("conf")).unwrap();
        std::fs::create_dir_all(self.dir.join("namesrv")).unwrap();
        std::fs::write(
            self.dir.join("conf/namesrv.toml"),
            format!(
                "rocketmqHome = \"{d}\"\nkvConfigPath = \"{d}/namesrv/kvConfig.json\"\n\
                 configStorePath = \"{d}/namesrv/rocketmq-namesrv.properties\"\n"
            ),
        )
        .unwrap();
        std::fs::write(
            self.dir.join("conf/broker.toml"),
            format!(
                r#"[broker]
namesrvAddr = "127.0.0.1:{ns}"
brokerIp1 = "127.0.0.1"
listenPort = {bp}
storePathRootDir = "{d}/store"
autoCreateTopicEnable = {auto}

[broker.brokerServerConfig]
bindAddress = "127.0.0.1"

[broker.brokerIdentity]
brokerName = "broker-a"
brokerClusterName = "DefaultCluster"
brokerId = 0

[store]
storeType = "LocalFile"
brokerRole = "ASYNC_MASTER"
storePathRootDir = "{d}/store"
haListenAddress = "127.0.0.1"
haListenPort = {ha}
mappedFileSizeCommitLog = 67108864
mappedFileSizeConsumeQueue = 120000
maxHashSlotNum = 50000
maxIndexNum = 200000
"#,
                ns = self.namesrv_port,
                bp = self.broker_port,
                ha = free_port(),
                auto = self.auto_create_topics,
            ),
        )
        .unwrap();
    }

    fn command(&self, name: &str) -> Command {
        let mut c = Command::new(self.bin.join(name));
        c.current_dir(&self.dir)
            .env("ROCKETMQ_HOME", &self.dir)
            .env("ROCKETMQ_SECURITY_PROFILE", "development-insecure-loopback")
            .env("RUST_LOG", "warn")
            .stdout(log_file(&self.dir, &format!("{name}.out")))
            .stderr(log_file(&self.dir, &format!("{name}.err")));
        c
    }

    fn spawn_namesrv(&mut self) {
        let mut cmd = self.command("rocketmq-namesrv-rust");
        cmd.arg("-c").arg(self.dir.join("conf/namesrv.toml")).args(["--bindAddress", "127.0.0.1"]);
        cmd.arg("--listenPort").arg(self.namesrv_port.to_string()).arg("--rocketmqHome").arg(&self.dir);
        self.namesrv = Some(started(&mut cmd, self.namesrv_port, "rocketmq namesrv"));
    }

    fn spawn_broker(&mut self) {
        let mut cmd = self.command("rocketmq-broker-rust");
        cmd.arg("-c").arg(self.dir.join("conf/broker.toml"));
        cmd.arg("-n").arg(format!("127.0.0.1:{}", self.namesrv_port)).args(["--log-filter", "warn"]);
        self.broker = Some(started(&mut cmd, self.broker_port, "rocketmq broker"));
        // Registration with the name server follows the listener within a moment.
        std::thread::sleep(Duration::from_millis(500));
    }

    /// `127.0.0.1:<port>` of the name server.
    pub fn namesrv(&self) -> String {
        format!("127.0.0.1:{}", self.namesrv_port)
    }

    /// Kills the broker (SIGKILL); the name server keeps running. Its store stays on disk.
    pub fn stop_broker(&mut self) {
        self.broker = None;
    }

    /// Starts the broker again with the same store.
    pub fn start_broker(&mut self) {
        self.spawn_broker();
    }
}

impl Drop for RocketMq {
    fn drop(&mut self) {
        self.broker = None;
        self.namesrv = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
