//! The memory alarm (RabbitMQ's `vm_memory_high_watermark`) and returning freed memory.
//!
//! Owns the watermark setting, the measurement and the purge request the allocator's owner
//! (the binary) answers. Memory is measured from two sources ([`MemorySample`]): the process's
//! resident set (`/proc/self/status`: `VmRSS` and its anonymous/file/shared parts) and the
//! allocator (the binary's global allocator registers a probe with [`set_allocator_probe`]:
//! bytes allocated and not freed, plus mimalloc's own committed/reserved figures). Which one
//! the alarm compares with the mark is RabbitMQ's `vm_memory_calculation_strategy`
//! ([`Strategy`]: `rss` by default, or `allocated`); the mark is relative to RAM from
//! `/proc/meminfo` or the cgroup limit, whichever is lower. With `rss`, the allocator's figure
//! decides whether a resident set over the mark is freed memory the allocator has not returned
//! yet: then the monitor asks for a purge and looks again before raising the alarm. The
//! monitor task
//! ([`crate::broker::Broker::spawn_memory_monitor`]) sets the `memory` alarm above the mark and
//! clears it below; connections treat it like the disk alarm (publishers blocked).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

/// `vm_memory_high_watermark`: relative (a fraction of the memory available) or absolute.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Watermark {
    /// A fraction of RAM or of the cgroup limit (RabbitMQ's default: 0.4).
    Relative(f64),
    /// Bytes with a unit: `"2GiB"`, `"512MB"`, `"1073741824"` (RabbitMQ's `absolute`).
    Absolute(String),
}

impl Default for Watermark {
    fn default() -> Self {
        Self::Relative(0.4)
    }
}

impl Watermark {
    /// Checks the setting: a fraction in (0, 1], or a size that parses.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Self::Relative(f) if *f > 0.0 && *f <= 1.0 => Ok(()),
            Self::Relative(f) => Err(format!(
                "vm_memory_high_watermark {f} must be a fraction in (0, 1] or a size such as \"2GiB\""
            )),
            Self::Absolute(s) => parse_size(s).map(|_| ()).ok_or_else(|| {
                format!("vm_memory_high_watermark \"{s}\" is not a size (e.g. \"2GiB\", \"512MB\")")
            }),
        }
    }

    /// The limit in bytes given the memory available.
    pub fn limit(&self, available: u64) -> u64 {
        match self {
            Self::Relative(f) => (available as f64 * f) as u64,
            Self::Absolute(s) => parse_size(s).unwrap_or(u64::MAX),
        }
    }
}

/// What the memory alarm compares with the mark (RabbitMQ's `vm_memory_calculation_strategy`;
/// its `erlang` and `legacy` have no meaning here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// The process's resident set size (RabbitMQ's default): everything the process holds in
    /// RAM, including memory outside the allocator (code, thread stacks, SQLite's heap).
    #[default]
    Rss,
    /// Bytes the broker has allocated and not freed (live heap), as the global allocator counts
    /// them: not the allocator's free pages, thread stacks, code or SQLite's own heap.
    Allocated,
}

impl Strategy {
    /// RabbitMQ's name (`/api/nodes` `mem_calculation_strategy`).
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Rss => "rss",
            Strategy::Allocated => "allocated",
        }
    }
}

/// What the allocator reports about itself (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Allocator name and version (`mimalloc 3.1.5`).
    pub name: &'static str,
    /// Bytes allocated and not freed yet (live heap).
    pub live: u64,
    /// mimalloc's `committed`: memory it has committed from the OS. On Linux freed pages it
    /// returns (`MADV_DONTNEED`) stay counted, so this is closer to a high-water mark.
    pub committed: u64,
    /// Highest `committed` so far.
    pub committed_peak: u64,
    /// Address space reserved (not necessarily backed by RAM).
    pub reserved: u64,
}

static ALLOCATOR_PROBE: std::sync::OnceLock<fn() -> Option<AllocatorStats>> =
    std::sync::OnceLock::new();

/// Registers how to read the global allocator's statistics (the binary owns the allocator;
/// first registration wins).
pub fn set_allocator_probe(probe: fn() -> Option<AllocatorStats>) {
    let _ = ALLOCATOR_PROBE.set(probe);
}

/// The allocator's statistics now, when a probe is registered and answers.
pub fn allocator_stats() -> Option<AllocatorStats> {
    ALLOCATOR_PROBE.get().and_then(|probe| probe())
}

/// One measurement of the process's memory (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemorySample {
    /// Resident set size (`VmRSS`).
    pub rss: u64,
    /// Anonymous resident memory (`RssAnon`: heap, stacks).
    pub rss_anon: u64,
    /// File-backed resident memory (`RssFile`: the binary's code, mapped files).
    pub rss_file: u64,
    /// Shared resident memory (`RssShmem`).
    pub rss_shmem: u64,
    /// The allocator's statistics (None without a probe).
    pub allocator: Option<AllocatorStats>,
}

impl MemorySample {
    /// Measures now.
    pub fn now() -> Self {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |k: &str| kib_field(&status, k).unwrap_or(0);
        Self {
            rss: field("VmRSS:"),
            rss_anon: field("RssAnon:"),
            rss_file: field("RssFile:"),
            rss_shmem: field("RssShmem:"),
            allocator: allocator_stats(),
        }
    }

    /// Live heap bytes (0 without a probe).
    pub fn allocated(&self) -> u64 {
        self.allocator.map_or(0, |a| a.live)
    }

    /// Resident memory that is not live heap: freed pages the allocator still holds, thread
    /// stacks, code, SQLite's heap (RabbitMQ's `reserved_unallocated` is the like of it).
    pub fn unallocated(&self) -> u64 {
        self.rss.saturating_sub(self.allocated())
    }

    /// The figure the alarm compares with the mark (RabbitMQ's `mem_used`). `allocated`
    /// without an allocator probe falls back to the resident set.
    pub fn used(&self, strategy: Strategy) -> u64 {
        match (strategy, self.allocator) {
            (Strategy::Allocated, Some(a)) => a.live,
            _ => self.rss,
        }
    }
}

/// Parses RabbitMQ's information units: a number with an optional unit (`k`/`kiB`, `KB`,
/// `M`/`MiB`, `MB`, `G`/`GiB`, `GB`, `T`/`TiB`, `TB`; case as RabbitMQ: `kB`/`KB` decimal).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mul: u64 = match unit.trim() {
        "" => 1,
        "k" | "K" | "kiB" | "KiB" => 1 << 10,
        "kB" | "KB" => 1_000,
        "M" | "MiB" => 1 << 20,
        "MB" => 1_000_000,
        "G" | "GiB" => 1 << 30,
        "GB" => 1_000_000_000,
        "T" | "TiB" => 1 << 40,
        "TB" => 1_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(mul)
}

/// Resident set size of this process, bytes (`VmRSS` of `/proc/self/status`).
pub fn resident_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&s, "VmRSS:")
}

fn kib_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Memory the broker may use: RAM, or the cgroup's limit when lower (v2 `memory.max`, v1
/// `memory.limit_in_bytes`).
pub fn available_bytes() -> Option<u64> {
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| kib_field(&s, "MemTotal:"));
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|p| std::fs::read_to_string(p).ok())
    .find_map(|s| s.trim().parse::<u64>().ok());
    match (ram, cgroup) {
        (Some(r), Some(c)) => Some(r.min(c)),
        (r, c) => r.or(c),
    }
}

static PURGE_GENERATION: AtomicU64 = AtomicU64::new(0);
static FORCED_PURGE_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Asks for freed memory to go back to the OS, without holding up the runtime: each runtime
/// thread tidies its own heap on its next park (cheap: pages with live blocks are not
/// visited) and the binary's purge thread, off the runtime, returns the freed pages to the OS
/// (see [`purge_generation`]).
pub fn request_purge() {
    PURGE_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// [`request_purge`], and every runtime thread collects its whole heap on its next park (a
/// forced collection: tens of ms on a large heap, during which tasks queued on that thread
/// wait), for when memory is near the mark (see [`forced_purge_generation`]).
pub fn request_forced_purge() {
    FORCED_PURGE_GENERATION.fetch_add(1, Ordering::Relaxed);
    request_purge();
}

/// Incremented by each [`request_purge`]; a thread purges when it sees a new value.
pub fn purge_generation() -> u64 {
    PURGE_GENERATION.load(Ordering::Relaxed)
}

/// Incremented by each [`request_forced_purge`]; a runtime thread collects its whole heap when
/// it sees a new value.
pub fn forced_purge_generation() -> u64 {
    FORCED_PURGE_GENERATION.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_rabbitmq_units() {
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("512MB"), Some(512_000_000));
        assert_eq!(parse_size("1073741824"), Some(1 << 30));
        assert_eq!(parse_size("10x"), None);
        assert_eq!(Watermark::Relative(0.5).limit(1000), 500);
        assert!(Watermark::Relative(1.5).validate().is_err());
        let w: crate::Config = toml::from_str("vm_memory_high_watermark = \"2GiB\"").expect("toml");
        assert_eq!(w.vm_memory_high_watermark.limit(0), 2 << 30);
        let w: crate::Config = toml::from_str("vm_memory_high_watermark = 0.6").expect("toml");
        assert_eq!(w.vm_memory_high_watermark, Watermark::Relative(0.6));
    }

    #[test]
    fn this_process_has_a_resident_size() {
        assert!(resident_bytes().is_some_and(|b| b > 0));
        assert!(available_bytes().is_some_and(|b| b > 0));
        let s = MemorySample::now();
        assert!(
            s.rss > 0 && s.rss_anon + s.rss_file + s.rss_shmem > 0,
            "{s:?}"
        );
        // No allocator probe in this test binary: `allocated` falls back to the RSS.
        assert_eq!(s.used(Strategy::Allocated), s.rss);
    }

    #[test]
    fn strategy_parses_as_rabbitmq_names() {
        let c: crate::Config =
            toml::from_str("vm_memory_calculation_strategy = \"allocated\"").expect("toml");
        assert_eq!(c.vm_memory_calculation_strategy, Strategy::Allocated);
        assert_eq!(
            crate::Config::default().vm_memory_calculation_strategy,
            Strategy::Rss
        );
        assert!(
            toml::from_str::<crate::Config>("vm_memory_calculation_strategy = \"erlang\"").is_err()
        );
        let s = MemorySample {
            rss: 100,
            allocator: Some(AllocatorStats {
                live: 70,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            (s.used(Strategy::Rss), s.used(Strategy::Allocated)),
            (100, 70)
        );
    }
}
