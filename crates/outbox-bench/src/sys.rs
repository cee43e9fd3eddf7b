//! What the process and the servers cost: CPU time and peak resident memory, from `/proc`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// User + system CPU time of this process so far (`/proc/self/stat`), or zero when unreadable.
pub(crate) fn cpu_time() -> Duration {
    std::fs::read_to_string("/proc/self/stat").map_or(Duration::ZERO, |stat| stat_cpu(&stat, false))
}

/// The CPU time in a `/proc/<pid>/stat` line: utime + stime, and with `children` the reaped
/// children's cutime + cstime too (zero for what cannot be read).
fn stat_cpu(stat: &str, children: bool) -> Duration {
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return Duration::ZERO };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime, cstime are fields 14 to 17 of the whole line: 11 to 14 after the name.
    let last = if children { 14 } else { 12 };
    let ticks: u64 = (11..=last).filter_map(|i| fields.get(i).and_then(|f| f.parse::<u64>().ok())).sum();
    // The kernel's USER_HZ is 100 on every Linux architecture we run on.
    Duration::from_millis(ticks * 10)
}

/// One process counted by [`ServersCpu`]: its parent, and the CPU it used so far with that of
/// the children it has reaped (`cutime + cstime`: PostgreSQL's postmaster reaps its backends).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Counted {
    ppid: u32,
    cpu: Duration,
}

/// A process, told apart from a later one that reuses its pid by its start time.
type ProcessId = (u32, u64);

/// Every process whose command name (`/proc/<pid>/comm`) is one of `names`, now.
fn servers_snapshot(names: &[&str]) -> HashMap<ProcessId, Counted> {
    let mut out = HashMap::new();
    if names.is_empty() {
        return out;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) =
            name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())).and_then(|n| n.parse().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if !names.contains(&stat.get(open + 1..close).unwrap_or_default()) {
            continue;
        }
        // After the name: state (field 3 of the line), ppid (4), ..., starttime (22).
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        let (Some(ppid), Some(started)) = (field(1).and_then(|p| u32::try_from(p).ok()), field(19)) else {
            continue;
        };
        out.insert((pid, started), Counted { ppid, cpu: stat_cpu(&stat, true) });
    }
    out
}

/// The CPU used between two snapshots: each process's growth, all of a process that started
/// meanwhile, and for a process that ended meanwhile, what it used after the first snapshot
/// when a counted parent reaped it (its whole CPU then shows in the parent's growth, so what it
/// had used before is taken off). A process that ended unreaped by a counted process (a server
/// stopped meanwhile, its parent with it) counts nothing after the first snapshot: summing the
/// processes instead made the total fall, and the difference saturated at zero.
fn cpu_between(start: &HashMap<ProcessId, Counted>, end: &HashMap<ProcessId, Counted>) -> Duration {
    let alive_at_end: HashSet<u32> = end.keys().map(|(pid, _)| *pid).collect();
    let mut total = Duration::ZERO;
    for (id, now) in end {
        total += now.cpu.saturating_sub(start.get(id).map_or(Duration::ZERO, |then| then.cpu));
    }
    for (id, then) in start {
        if !end.contains_key(id) && alive_at_end.contains(&then.ppid) {
            total = total.saturating_sub(then.cpu);
        }
    }
    total
}

/// The CPU that the processes named `names` have used since [`ServersCpu::start`], with the
/// children they reaped meanwhile (the CPU of a connection closed meanwhile still counts).
/// Counts whatever else those servers do (other clients, other databases): the bench is meant
/// to run alone on the machine, and `Machine::load_average` tells when it did not.
pub(crate) struct ServersCpu {
    names: &'static [&'static str],
    at_start: HashMap<ProcessId, Counted>,
}

impl ServersCpu {
    /// Starts measuring.
    pub(crate) fn start(names: &'static [&'static str]) -> Self {
        ServersCpu { names, at_start: servers_snapshot(names) }
    }

    /// Seconds of CPU since the start.
    pub(crate) fn seconds(&self) -> f64 {
        cpu_between(&self.at_start, &servers_snapshot(self.names)).as_secs_f64()
    }
}

/// Resets the peak-RSS counter (`VmHWM`) so the next reading covers one scenario only.
pub(crate) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident memory since the last reset, MiB (0 when unreadable).
pub(crate) fn peak_rss_mib() -> f64 {
    status_kib("VmHWM:") as f64 / 1024.0
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The machine, for the report header.
pub(crate) fn machine(database_version: String) -> crate::Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let load_average = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0);
    crate::Machine {
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        cpu_model,
        memory_gib: mem_kib / 1024.0 / 1024.0,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned(),
        database_version,
        load_average,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        // Busy until the clock ticks (10 ms granularity; a loaded machine may take a while).
        let before = cpu_time();
        let start = std::time::Instant::now();
        let mut x = 0_u64;
        while cpu_time() <= before && start.elapsed() < Duration::from_secs(20) {
            for _ in 0..100_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
        }
        assert!(x != 1);
        assert!(cpu_time() > before);
        assert!(peak_rss_mib() > 0.0);
    }

    #[test]
    fn the_servers_meter_counts_the_named_processes_only() {
        // This test's own process is named after the test binary; a name no process has counts
        // nothing, and an empty list reads nothing.
        assert!(servers_snapshot(&[]).is_empty());
        assert!(servers_snapshot(&["no-such-process-name"]).is_empty());
        let own: &'static str =
            Box::leak(std::fs::read_to_string("/proc/self/comm").unwrap().trim().to_owned().into_boxed_str());
        let names: &'static [&'static str] = Box::leak(vec![own].into_boxed_slice());
        assert!(servers_snapshot(names).keys().any(|(pid, _)| *pid == std::process::id()));
        let meter = ServersCpu::start(names);
        let start = std::time::Instant::now();
        let mut x = 0_u64;
        while meter.seconds() <= 0.0 && start.elapsed() < Duration::from_secs(20) {
            for _ in 0..100_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
        }
        assert!(x != 1);
        assert!(meter.seconds() > 0.0);
    }

    #[test]
    fn a_server_stopped_or_a_connection_closed_meanwhile_is_counted_as_it_should() {
        let ms = Duration::from_millis;
        let p = |ppid, cpu| Counted { ppid, cpu: ms(cpu) };
        // 10: a postmaster; 11: its backend; 20: another server's postmaster; 21: its backend.
        let start =
            [((10, 1), p(1, 100)), ((11, 5), p(10, 400)), ((20, 2), p(1, 300)), ((21, 6), p(20, 900))]
                .into_iter()
                .collect();
        // Meanwhile: 11 used 50 ms more and closed (reaped by 10: 100 + 450); 10 used 5 ms itself;
        // 12 started and used 30 ms; the other server (20, 21) was stopped.
        let end = [((10, 1), p(1, 555)), ((12, 7), p(10, 30))].into_iter().collect();
        assert_eq!(cpu_between(&start, &end), ms(5 + 50 + 30));
        // A pid reused by a new process is a new process.
        let end = [((10, 1), p(1, 100)), ((11, 9), p(10, 20))].into_iter().collect();
        let start = [((10, 1), p(1, 100)), ((11, 5), p(30, 400))].into_iter().collect();
        assert_eq!(cpu_between(&start, &end), ms(20));
    }
}
