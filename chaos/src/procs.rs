//! Child processes the harness supervises: started, SIGKILLed, stopped with SIGTERM and
//! restarted, each with its log file.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::process::{Child, Command};

/// How a SIGTERM ended.
#[derive(Debug)]
pub(crate) enum Stopped {
    /// It had already exited (or never ran): nothing to judge.
    NotRunning,
    /// It exited with this status.
    Exited(std::process::ExitStatus),
    /// It did not exit in time and was SIGKILLed.
    Hung,
}

/// One supervised process.
pub(crate) struct Proc {
    /// Name in logs and the summary.
    pub(crate) name: String,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    started_at: Option<Instant>,
    /// Restart it when it is down and this instant has passed (`None`: keep it down).
    pub(crate) restart_at: Option<Instant>,
    /// How many times it was started.
    pub(crate) starts: u32,
    /// Exits the harness did not cause (start-up refused during an outage, crashes).
    pub(crate) exits: u32,
    /// The log line that says its start-up is over (`None`: not told apart).
    ready: Option<&'static str>,
    /// Its log's length when it was last started: where that run's lines begin.
    log_from: u64,
    /// Of [`exits`](Self::exits), those after its log said it was ready: not a start-up refused.
    pub(crate) exits_when_ready: u32,
}

impl Proc {
    /// A process that is not started yet.
    pub(crate) fn new(name: impl Into<String>, program: PathBuf, args: Vec<String>, log: PathBuf) -> Proc {
        Proc {
            name: name.into(),
            program,
            args,
            log,
            child: None,
            started_at: None,
            restart_at: None,
            starts: 0,
            exits: 0,
            ready: None,
            log_from: 0,
            exits_when_ready: 0,
        }
    }

    /// Tells its exits apart by whether this line was in its log since it was started.
    pub(crate) fn ready_when_logged(mut self, line: &'static str) -> Proc {
        self.ready = Some(line);
        self
    }

    /// Counts an exit the harness did not cause, of `status`; one after the ready
    /// line is printed with the time it happened, to be found in the process's log.
    fn exited(&mut self, status: std::process::ExitStatus) {
        self.exits += 1;
        if let Some(line) = self.ready {
            if self.logged_since_start(line) {
                self.exits_when_ready += 1;
                let up = self.started_at.map(|t| t.elapsed()).unwrap_or_default();
                println!("   {} exited on its own ({status}) {up:.1?} after its start, its log having said {line:?}", self.name);
            }
        }
    }

    /// Whether `line` is in what it logged since it was last started (not read: false).
    pub(crate) fn logged_since_start(&self, line: &str) -> bool {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(&self.log) else { return false };
        let mut text = Vec::new();
        if f.seek(SeekFrom::Start(self.log_from)).is_err() || f.read_to_end(&mut text).is_err() {
            return false;
        }
        String::from_utf8_lossy(&text).contains(line)
    }

    /// Starts it (appending to its log).
    pub(crate) fn start(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        self.log_from = log.metadata().map(|m| m.len()).unwrap_or(0);
        let child = Command::new(&self.program)
            .args(&self.args)
            .env("RUST_LOG", std::env::var("CHAOS_CHILD_LOG").unwrap_or_else(|_| "info".into()))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} ({})", self.name, self.program.display()))?;
        self.child = Some(child);
        self.started_at = Some(Instant::now());
        self.starts += 1;
        self.restart_at = None;
        Ok(())
    }

    /// Whether it runs now.
    pub(crate) fn running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL, and wait for it to be gone.
    pub(crate) async fn sigkill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// Whether it has been running for at least `d` (its start-up is over).
    pub(crate) fn up_for(&self, d: Duration) -> bool {
        self.child.is_some() && self.started_at.is_some_and(|t| t.elapsed() >= d)
    }

    /// SIGTERM, then wait up to `within`.
    pub(crate) async fn sigterm(&mut self, within: Duration) -> Stopped {
        let Some(mut c) = self.child.take() else { return Stopped::NotRunning };
        if let Ok(Some(status)) = c.try_wait() {
            self.exited(status);
            return Stopped::NotRunning;
        }
        let Some(pid) = c.id() else { return Stopped::NotRunning };
        let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status().await;
        match tokio::time::timeout(within, c.wait()).await {
            Ok(Ok(status)) => Stopped::Exited(status),
            _ => {
                let _ = c.kill().await;
                Stopped::Hung
            }
        }
    }

    /// Notices an exit the harness did not cause and schedules a restart after `delay`; starts
    /// it when its restart time has come. Returns an error only when it cannot be spawned.
    pub(crate) fn supervise(&mut self, delay: Duration) -> anyhow::Result<()> {
        if let Some(c) = &mut self.child {
            if let Ok(Some(status)) = c.try_wait() {
                self.child = None;
                self.exited(status);
                self.restart_at = Some(Instant::now() + delay);
            }
        }
        if self.child.is_none() && self.restart_at.is_some_and(|t| Instant::now() >= t) {
            self.start()?;
        }
        Ok(())
    }

    /// Keeps it up: down without a planned restart, it is restarted at once; then
    /// [`supervise`](Self::supervise).
    pub(crate) fn keep_up(&mut self, delay: Duration) -> anyhow::Result<()> {
        if !self.running() && self.restart_at.is_none() {
            self.restart_at = Some(Instant::now());
        }
        self.supervise(delay)
    }

    /// The log file.
    pub(crate) fn log(&self) -> &PathBuf {
        &self.log
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Waits for `p`'s child to exit (a generous deadline), then lets the supervision notice it
    /// (no restart): it has exited `n` times.
    async fn until_exits(p: &mut Proc, n: u32) {
        let child = p.child.as_mut().expect("started");
        tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .expect("exited within 30 s")
            .unwrap();
        p.supervise(Duration::from_secs(3600)).unwrap();
        assert_eq!(p.exits, n, "{} exited {} times, not {n}", p.name, p.exits);
    }

    /// An exit after the ready line counts as one while ready; an exit without it since the
    /// last start (a start-up refused) does not, even when an earlier run's lines hold it.
    #[tokio::test]
    async fn exits_are_told_apart_by_the_ready_line_since_the_last_start() {
        let dir = std::env::temp_dir().join(format!("outbox-chaos-procs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("p.log");
        std::fs::remove_file(&log).ok();
        let flag = dir.join("second");
        std::fs::remove_file(&flag).ok();
        // The first run logs the ready line and exits 1; the second (once `flag` exists) exits
        // 1 without it.
        let script = format!(
            "if [ -e {f} ]; then echo 'refused: unreachable'; else echo 'INFO Relaying store=a'; fi; exit 1",
            f = flag.display()
        );
        let mut p = Proc::new("p", PathBuf::from("sh"), vec!["-c".into(), script], log.clone())
            .ready_when_logged("Relaying");
        p.start().unwrap();
        until_exits(&mut p, 1).await;
        assert_eq!((p.exits, p.exits_when_ready), (1, 1), "exited after its ready line");

        std::fs::write(&flag, b"").unwrap();
        p.start().unwrap();
        until_exits(&mut p, 2).await;
        assert_eq!((p.exits, p.exits_when_ready), (2, 1), "a start-up refused, the earlier run's line aside");
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("Relaying") && text.contains("refused"), "{text}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
