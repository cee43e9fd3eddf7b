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
        }
    }

    /// Starts it (appending to its log).
    pub(crate) fn start(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
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
        if let Ok(Some(_)) = c.try_wait() {
            self.exits += 1;
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
            if let Ok(Some(_)) = c.try_wait() {
                self.child = None;
                self.exits += 1;
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
