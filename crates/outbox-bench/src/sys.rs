//! What the process costs: CPU time and peak resident memory, from `/proc/self`.

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

/// CPU time used so far by every process whose command name (`/proc/<pid>/comm`) is one of
/// `names`, with the CPU of the children they have reaped (`cutime + cstime`): PostgreSQL's
/// postmaster reaps its backends, so the CPU of a connection closed meanwhile still counts.
/// Counts whatever else those servers do (other clients, other databases): the bench is meant
/// to run alone on the machine, and `Machine::load_average` tells when it did not.
pub(crate) fn servers_cpu_time(names: &[&str]) -> Duration {
    if names.is_empty() {
        return Duration::ZERO;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else { return Duration::ZERO };
    let mut total = Duration::ZERO;
    for entry in dir.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if names.contains(&stat.get(open + 1..close).unwrap_or_default()) {
            total += stat_cpu(&stat, true);
        }
    }
    total
}

/// The CPU that the processes named `names` have used since [`ServersCpu::start`].
pub(crate) struct ServersCpu {
    names: &'static [&'static str],
    at_start: Duration,
}

impl ServersCpu {
    /// Starts measuring.
    pub(crate) fn start(names: &'static [&'static str]) -> Self {
        ServersCpu { names, at_start: servers_cpu_time(names) }
    }

    /// Seconds of CPU since the start.
    pub(crate) fn seconds(&self) -> f64 {
        servers_cpu_time(self.names).saturating_sub(self.at_start).as_secs_f64()
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
    fn servers_cpu_time_counts_the_named_processes_only() {
        // This test's own process is named after the test binary; a name no process has counts
        // nothing, and an empty list reads nothing.
        assert_eq!(servers_cpu_time(&[]), Duration::ZERO);
        assert_eq!(servers_cpu_time(&["no-such-process-name"]), Duration::ZERO);
        let own = std::fs::read_to_string("/proc/self/comm").unwrap();
        let own = own.trim();
        let before = servers_cpu_time(&[own]);
        let start = std::time::Instant::now();
        let mut x = 0_u64;
        while servers_cpu_time(&[own]) <= before && start.elapsed() < Duration::from_secs(20) {
            for _ in 0..100_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
        }
        assert!(x != 1);
        assert!(servers_cpu_time(&[own]) > before);
    }
}
