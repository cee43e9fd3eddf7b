//! Child processes of a test: killed on drop, the `outbox` binary, the relay daemon, its
//! configuration file and its log, and a `nats-server` of the test's own.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::fs::temp_dir;
use crate::net::{free_port, wait_port};

/// A child process, SIGKILLed and reaped on drop unless it has exited by then (a test that
/// fails midway leaves nothing running).
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    /// SIGKILLs the process (if it still runs) and reaps it.
    pub fn kill(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }

    /// Waits for the process to exit; SIGKILLs it and panics after `within`.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                self.kill();
                panic!("process {} did not exit within {within:?}", self.0.id());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGTERM and waits for the process to exit (see [`wait_exit`](Self::wait_exit)).
    pub fn terminate(&mut self, within: Duration) -> ExitStatus {
        let term = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status().unwrap();
        assert!(term.success(), "kill -TERM {} failed", self.0.id());
        self.wait_exit(within)
    }
}

impl Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `outbox` binary for tests outside the `outbox-cli` crate (inside it, use
/// `env!("CARGO_BIN_EXE_outbox")`): `OUTBOX_BIN`, or built once with cargo.
pub fn outbox_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("OUTBOX_BIN") {
            return PathBuf::from(p);
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--quiet", "-p", "outbox-cli", "--bin", "outbox"])
            .current_dir(&root)
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build -p outbox-cli failed");
        let target =
            std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| root.join("target"));
        target.join("debug").join("outbox")
    })
    .clone()
}

/// The `outbox.toml` of a relay under test: `[relay]` settings, one store named `shop`, its
/// destinations and routes, then any further section. Settings are TOML lines as they stand in
/// the file (indentation and blank lines are dropped).
///
/// ```ignore
/// let config = RelayConfig::new(r#"idle_interval = "200ms""#, "sqlite:/tmp/shop.db")
///     .migrate()
///     .destination("stream", "", r#"type = "redis"
///         url = "redis://127.0.0.1:6379"
///         stream = "s""#)
///     .route("#", &["stream"])
///     .write(&dir.join("outbox.toml"));
/// ```
#[derive(Debug, Clone)]
pub struct RelayConfig {
    relay: String,
    store_url: String,
    migrate: bool,
    destinations: String,
    routes: String,
    sections: String,
}

/// `toml`'s lines, trimmed, without the empty ones; each ends with a newline.
fn toml_lines(toml: &str) -> String {
    toml.lines().map(str::trim).filter(|l| !l.is_empty()).map(|l| format!("{l}\n")).collect()
}

impl RelayConfig {
    /// `[relay]` with `settings`, and the store `shop` at `store_url`.
    pub fn new(settings: &str, store_url: &str) -> RelayConfig {
        RelayConfig {
            relay: toml_lines(settings),
            store_url: store_url.to_owned(),
            migrate: false,
            destinations: String::new(),
            routes: String::new(),
            sections: String::new(),
        }
    }

    /// The daemon creates or upgrades the store's tables at start (`migrate = true`).
    pub fn migrate(mut self) -> RelayConfig {
        self.migrate = true;
        self
    }

    /// `[destinations.<name>]` with `settings` (the table is left out when they are empty) and
    /// `[destinations.<name>.transport]` with `transport`.
    pub fn destination(mut self, name: &str, settings: &str, transport: &str) -> RelayConfig {
        let settings = toml_lines(settings);
        if !settings.is_empty() {
            self.destinations.push_str(&format!("\n[destinations.{name}]\n{settings}"));
        } else {
            self.destinations.push('\n');
        }
        self.destinations.push_str(&format!("[destinations.{name}.transport]\n{}", toml_lines(transport)));
        self
    }

    /// A `[[routes]]` entry: messages of `topic` go to `destinations`.
    pub fn route(mut self, topic: &str, destinations: &[&str]) -> RelayConfig {
        let names: Vec<String> = destinations.iter().map(|d| format!("\"{d}\"")).collect();
        self.routes
            .push_str(&format!("\n[[routes]]\ntopic = \"{topic}\"\ndestinations = [{}]\n", names.join(", ")));
        self
    }

    /// Store `shop` at `store_url`, migrated at start, every topic relayed to the Redis stream
    /// `stream` at `redis_url`; scan every 200 ms, 5 s to shut down.
    pub fn to_redis_stream(store_url: &str, redis_url: &str, stream: &str) -> RelayConfig {
        let transport = format!("type = \"redis\"\nurl = \"{redis_url}\"\nstream = \"{stream}\"");
        RelayConfig::new("idle_interval = \"200ms\"\nshutdown_timeout = \"5s\"", store_url)
            .migrate()
            .destination("stream", "", &transport)
            .route("#", &["stream"])
    }

    /// `[admin]` on `127.0.0.1:<port>` with these tokens, the backlog sampled every second.
    pub fn admin(self, port: u16, read_token: &str, admin_token: &str) -> RelayConfig {
        self.section(&format!(
            "[admin]\nlisten = \"127.0.0.1:{port}\"\nread_token = \"{read_token}\"\n\
             admin_token = \"{admin_token}\"\nbacklog_interval = \"1s\""
        ))
    }

    /// Further sections (`[ack]`, `[retention]`), at the end of the file.
    pub fn section(mut self, toml: &str) -> RelayConfig {
        self.sections.push_str(&format!("\n{}", toml_lines(toml)));
        self
    }

    /// The file's text.
    pub fn text(&self) -> String {
        let migrate = if self.migrate { "migrate = true\n" } else { "" };
        format!(
            "[relay]\n{}\n[[stores]]\nname = \"shop\"\nurl = \"{}\"\n{migrate}{}{}{}",
            self.relay, self.store_url, self.destinations, self.routes, self.sections
        )
    }

    /// Writes the file to `path`; returns `path`.
    pub fn write(&self, path: &Path) -> PathBuf {
        std::fs::write(path, self.text()).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path.to_owned()
    }
}

/// An `outbox relay` process (or any daemon) whose stderr goes to a log file; killed on drop.
pub struct RelayProcess {
    /// The process.
    pub child: KillOnDrop,
    /// Its stderr.
    pub log: PathBuf,
}

impl RelayProcess {
    /// Runs `<bin> relay --config <config>`, its stderr to `log`.
    pub fn start(bin: impl AsRef<Path>, config: &Path, log: &Path) -> RelayProcess {
        let mut cmd = Command::new(bin.as_ref());
        cmd.args(["relay", "--config", config.to_str().unwrap()]);
        Self::spawn(cmd, log)
    }

    /// Runs `cmd` (stdout discarded, stderr to `log`).
    pub fn spawn(mut cmd: Command, log: &Path) -> RelayProcess {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("start outbox relay");
        RelayProcess { child: KillOnDrop(child), log: log.to_owned() }
    }

    /// What the process has logged so far.
    pub fn log_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// Panics, with the log, if the process has exited; `after` says what it had just been
    /// put through.
    pub fn assert_alive(&mut self, after: &str) {
        assert!(
            self.child.try_wait().unwrap().is_none(),
            "the relay died after {after}: {}",
            self.log_text()
        );
    }

    /// Waits until the log contains `needle`; panics if the process dies first or after
    /// `within`.
    pub fn wait_for_log(&mut self, needle: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.log_text().contains(needle) {
            self.assert_alive(&format!("start, waiting for {needle:?}"));
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in the log within {within:?}: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until something accepts connections on `port`; panics if the process dies first
    /// or after `within`.
    pub fn wait_for_port(&mut self, port: u16, within: Duration) {
        let deadline = Instant::now() + within;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            self.assert_alive(&format!("start, waiting for port {port}"));
            assert!(Instant::now() < deadline, "nothing listens on {port}: {}", self.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGTERM and waits up to `within` for the exit; returns its status.
    pub fn terminate(&mut self, within: Duration) -> ExitStatus {
        self.child.terminate(within)
    }
}

/// A `nats-server` of the test's own (`OUTBOX_TEST_NATS_SERVER`, else the one on `PATH`) on a
/// free port; killed on drop.
pub struct NatsServer {
    child: KillOnDrop,
    port: u16,
    dir: PathBuf,
}

impl NatsServer {
    /// Starts it with `args` (authorization flags, say), with JetStream (its store in a
    /// temporary directory) when `jetstream`; waits until it listens. An error when it cannot
    /// be started (not installed).
    pub fn start(jetstream: bool, args: &[&str]) -> std::io::Result<NatsServer> {
        let port = free_port();
        let dir = temp_dir("outbox-nats-server");
        let bin = std::env::var("OUTBOX_TEST_NATS_SERVER").unwrap_or_else(|_| "nats-server".into());
        let mut cmd = Command::new(bin);
        cmd.args(["-a", "127.0.0.1", "-p", &port.to_string()]);
        if jetstream {
            cmd.args(["-js", "-sd", dir.to_str().unwrap()]);
        }
        let child = cmd.args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
        let server = NatsServer { child: KillOnDrop(child), port, dir };
        wait_port(port, Duration::from_secs(30), "nats-server");
        Ok(server)
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.child.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::RelayConfig;

    #[test]
    fn a_relay_config_renders_its_sections_in_order() {
        let text = RelayConfig::new("\n    idle_interval = \"200ms\"\n    lease = \"5s\"\n", "sqlite:/x.db")
            .migrate()
            .destination("a", "max_payload_bytes = 10", "type = \"redis\"\nstream = \"s\"")
            .destination("b", "", "type = \"nats\"")
            .route("x.#", &["a"])
            .route("#", &["a", "b"])
            .section("[ack]\nsecret = \"k\"")
            .text();
        assert_eq!(
            text,
            r##"[relay]
idle_interval = "200ms"
lease = "5s"

[[stores]]
name = "shop"
url = "sqlite:/x.db"
migrate = true

[destinations.a]
max_payload_bytes = 10
[destinations.a.transport]
type = "redis"
stream = "s"

[destinations.b.transport]
type = "nats"

[[routes]]
topic = "x.#"
destinations = ["a"]

[[routes]]
topic = "#"
destinations = ["a", "b"]

[ack]
secret = "k"
"##
        );
    }
}
