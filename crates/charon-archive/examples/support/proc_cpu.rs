//! CPU time of a process from `/proc`, shared by the examples that measure (`ingest.rs`,
//! `index_catchup.rs`).

/// utime + stime of this process, in µs.
#[allow(dead_code)]
pub(crate) fn cpu_us() -> u64 {
    cpu_us_of("self")
}

/// utime + stime of process `pid` (clock ticks of 100 Hz on Linux), in µs; 0 when unreadable.
pub(crate) fn cpu_us_of(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)) * 10_000
}
