//! Linux `/proc` sampling: CPU time and memory of a process (the broker, or
//! the tool itself).

use std::fs;

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ, 100 on Linux).
const CLK_TCK: u64 = 100;

/// CPU and memory snapshot of one process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ProcSample {
    /// utime + stime in microseconds.
    pub(crate) cpu_us: u64,
    /// Current resident set size (KiB).
    pub(crate) rss_kib: u64,
    /// Peak resident set size (KiB).
    pub(crate) hwm_kib: u64,
}

fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Parses utime+stime (ticks) out of a `/proc/<pid>/stat` line.
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name may contain spaces: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Samples `pid` ("self" when `None`). Returns `None` if /proc is unreadable.
pub(crate) fn sample(pid: Option<u32>) -> Option<ProcSample> {
    let dir = match pid {
        Some(p) => format!("/proc/{p}"),
        None => "/proc/self".to_string(),
    };
    let stat = fs::read_to_string(format!("{dir}/stat")).ok()?;
    let status = fs::read_to_string(format!("{dir}/status")).ok()?;
    let ticks = stat_cpu_ticks(&stat)?;
    Some(ProcSample {
        cpu_us: ticks * (1_000_000 / CLK_TCK),
        rss_kib: status_kib(&status, "VmRSS:").unwrap_or(0),
        hwm_kib: status_kib(&status, "VmHWM:").unwrap_or(0),
    })
}

/// Resets the peak-RSS watermark (`echo 5 > /proc/<pid>/clear_refs`); best effort.
pub(crate) fn reset_peak_rss(pid: u32) -> bool {
    fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// CPU time (µs) of `pid` with its reaped children (cutime+cstime) and its live children: a
/// database server's work for its clients (PostgreSQL runs a process per connection).
pub(crate) fn tree_cpu_us(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // rest[11..15]: utime, stime, cutime, cstime.
    let mut ticks: u64 = f.get(11..15)?.iter().sum();
    for e in fs::read_dir("/proc").ok()?.flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(st) = fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let Some(close) = st.rfind(')') else { continue };
        let fields: Vec<&str> = st[close + 1..].split_whitespace().collect();
        if fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(pid) {
            ticks += stat_cpu_ticks(&st).unwrap_or(0);
        }
    }
    Some(ticks * (1_000_000 / CLK_TCK))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces() {
        let s = "1234 (beam smp) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        assert_eq!(stat_cpu_ticks(s), Some(300));
    }

    #[test]
    fn samples_self() {
        let s = sample(None);
        assert!(s.is_some_and(|s| s.rss_kib > 0));
    }
}
