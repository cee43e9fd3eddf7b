//! The crowded daemon's lane and budget, counted (see [`crate::setup::CROWDED`]): its admin
//! listener's `outbox_lane_looks_total` and `outbox_claims_beside_total` for the run's store, and
//! its budget's `outbox_budget_turns_total` and `outbox_budget_parked_reused_total`, read every
//! [`EVERY`] while the run goes on, summed over the daemon's lives (it is SIGKILLed and
//! restarted, and its counters start again at zero each time). What a life counted after the
//! last read before its kill is lost: the tally is a lower bound.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// How often the counters are read.
const EVERY: Duration = Duration::from_millis(500);
/// The most of a `/metrics` answer read (the listener's text is a few KiB per store).
const MAX_ANSWER: u64 = 1 << 20;

/// The lane's counters of the run's store, and the budget's, over the daemon's lives.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaneCounts {
    /// The lane's looks for messages committed since its last.
    pub(crate) looks: u64,
    /// The lane's claims (by id, beside the claim loop).
    pub(crate) claims: u64,
    /// Turns of the daemon's budget (each opens a connection when it is crowded).
    pub(crate) turns: u64,
    /// Parked shares its stores took back (a turn and a connection saved each).
    pub(crate) reused: u64,
    /// How many times the counters were read (none: the tally says nothing).
    pub(crate) reads: u64,
}

/// Sums counters that start again at zero when their process does.
#[derive(Debug, Default)]
struct Summed {
    last: LaneCounts,
    total: LaneCounts,
}

impl Summed {
    /// A read of the live process's counters: what grew since the last read is added; a value
    /// below the last read is a new life, all of it added.
    fn read(&mut self, now: LaneCounts) {
        let grown = |last: u64, now: u64| if now >= last { now - last } else { now };
        self.total.looks += grown(self.last.looks, now.looks);
        self.total.claims += grown(self.last.claims, now.claims);
        self.total.turns += grown(self.last.turns, now.turns);
        self.total.reused += grown(self.last.reused, now.reused);
        self.total.reads += 1;
        self.last = now;
    }
}

/// The tally of one daemon's lane, read by a task of its own until [`LaneTally::stop`].
pub(crate) struct LaneTally {
    summed: Arc<Mutex<Summed>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl LaneTally {
    /// Starts reading `store`'s counters from the admin listener at `127.0.0.1:port`. A read
    /// that fails (the daemon down, starting, or killed mid-answer) is skipped.
    pub(crate) fn start(port: u16, store: &'static str) -> LaneTally {
        let summed = Arc::new(Mutex::new(Summed::default()));
        let stop = CancellationToken::new();
        let (s, st) = (summed.clone(), stop.clone());
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = st.cancelled() => break,
                    () = tokio::time::sleep(EVERY) => {}
                }
                let read = tokio::time::timeout(Duration::from_secs(2), metrics(port)).await;
                if let Ok(Ok(text)) = read {
                    if let Some(now) = parse(&text, store) {
                        s.lock().unwrap_or_else(PoisonError::into_inner).read(now);
                    }
                }
            }
        });
        LaneTally { summed, stop, task }
    }

    /// Stops reading; returns the sums.
    pub(crate) async fn stop(self) -> LaneCounts {
        self.stop.cancel();
        let _ = self.task.await;
        let s = self.summed.lock().unwrap_or_else(PoisonError::into_inner);
        s.total
    }
}

/// `GET /metrics` from the listener at `127.0.0.1:port` (no token: a loopback listener
/// without tokens), bounded.
async fn metrics(port: u16) -> anyhow::Result<String> {
    let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await?;
    let mut body = Vec::new();
    c.take(MAX_ANSWER).read_to_end(&mut body).await?;
    let text = String::from_utf8_lossy(&body);
    anyhow::ensure!(text.starts_with("HTTP/1.1 200"), "the listener did not answer 200");
    Ok(text.into_owned())
}

/// The lane's two counters of `store` and the budget's two in a Prometheus text answer; `None`
/// unless all four are there.
fn parse(text: &str, store: &str) -> Option<LaneCounts> {
    let value = |series: String| {
        text.lines().find_map(|l| l.strip_prefix(series.as_str())).and_then(|v| v.trim().parse::<f64>().ok())
    };
    let of_store = |name: &str| value(format!("{name}{{store=\"{store}\"}} "));
    // Counters are whole numbers, written as such (or as `N.0`).
    let looks = of_store("outbox_lane_looks_total")?;
    let claims = of_store("outbox_claims_beside_total")?;
    let turns = value("outbox_budget_turns_total ".to_owned())?;
    let reused = value("outbox_budget_parked_reused_total ".to_owned())?;
    Some(LaneCounts {
        looks: looks as u64,
        claims: claims as u64,
        turns: turns as u64,
        reused: reused as u64,
        reads: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_over_the_lives_of_the_process() {
        let mut s = Summed::default();
        let read = |looks, claims| LaneCounts { looks, claims, turns: looks * 2, reused: claims, reads: 1 };
        s.read(read(5, 1));
        s.read(read(9, 1));
        // Killed and started again: its counters begin at zero.
        s.read(read(2, 0));
        s.read(read(4, 3));
        assert_eq!(s.total, LaneCounts { looks: 13, claims: 4, turns: 26, reused: 4, reads: 4 });
    }

    #[test]
    fn the_store_series_are_read_and_others_ignored() {
        let text = "# TYPE outbox_lane_looks_total counter\n\
                    outbox_lane_looks_total{store=\"idle0\"} 7\n\
                    outbox_lane_looks_total{store=\"chaos\"} 12\n\
                    outbox_claims_beside_total{store=\"chaos\"} 3\n\
                    outbox_budget_turns_total 40\n\
                    outbox_budget_parked_reused_total 17\n";
        assert_eq!(
            parse(text, "chaos"),
            Some(LaneCounts { looks: 12, claims: 3, turns: 40, reused: 17, reads: 1 })
        );
        assert_eq!(parse(text, "idle0"), None, "idle0 has no claims series here");
        let no_budget = text.replace("outbox_budget_turns_total 40\n", "");
        assert_eq!(parse(&no_budget, "chaos"), None, "the budget's series are needed too");
        assert_eq!(parse("HTTP/1.1 200 OK\r\n\r\n", "chaos"), None);
    }
}
