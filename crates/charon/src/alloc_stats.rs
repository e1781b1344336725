//! The global allocator's figures for the memory alarm and the management API: live heap bytes
//! (counted by `alloc_count`) and mimalloc's process-wide statistics (`MiMalloc::stats_json`, the
//! crate's safe API), of which the broker reads the bytes committed from the OS (current and
//! peak) and the address space reserved. Registered with
//! `charon_server::memory::set_allocator_probe` at start.
//!
//! The memory monitor samples every 500 ms, but mimalloc's statistics come as JSON (~1.7 M
//! instructions to print and parse): they are read at most every [`REFRESH`] and reused in
//! between; the live heap bytes (what the alarm compares) are read fresh each time.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use charon_server::memory::AllocatorStats;
use serde_json::Value;

/// Registers [`probe`] as the broker's allocator probe.
pub(crate) fn register() {
    charon_server::memory::set_allocator_probe(probe);
}

/// How long mimalloc's own figures are reused.
const REFRESH: Duration = Duration::from_secs(5);

/// mimalloc's statistics (None if it cannot give them); `live` is read now, the rest is at
/// most [`REFRESH`] old.
fn probe() -> Option<AllocatorStats> {
    static LAST: Mutex<Option<(Instant, AllocatorStats)>> = Mutex::new(None);
    let now = Instant::now();
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let stats = match *last {
        Some((at, s)) if now.duration_since(at) < REFRESH => s,
        _ => {
            let s = read()?;
            *last = Some((now, s));
            s
        }
    };
    Some(AllocatorStats {
        live: crate::alloc_count::live_bytes(),
        ..stats
    })
}

/// mimalloc's statistics now.
fn read() -> Option<AllocatorStats> {
    let json = mimalloc::MiMalloc::stats_json().ok()?;
    let text = json.to_str().ok()?;
    parse(text)
}

fn parse(text: &str) -> Option<AllocatorStats> {
    let v: Value = serde_json::from_str(text).ok()?;
    let count = |name: &str, field: &str| {
        v.get(name)
            .and_then(|c| c.get(field))
            .and_then(Value::as_i64)
            .map_or(0, |n| u64::try_from(n).unwrap_or(0))
    };
    static NAME: OnceLock<String> = OnceLock::new();
    let name = NAME.get_or_init(|| {
        // mimalloc_version is major*100 + minor*10 + patch (e.g. 315 for 3.1.5).
        let n = v
            .get("mimalloc_version")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        format!("mimalloc {}.{}.{}", n / 100, n / 10 % 10, n % 10)
    });
    Some(AllocatorStats {
        name: name.as_str(),
        live: crate::alloc_count::live_bytes(),
        committed: count("committed", "current"),
        committed_peak: count("committed", "peak"),
        reserved: count("reserved", "current"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mimalloc_reports_what_it_has_committed() {
        // This test binary allocates through mimalloc too (main.rs's global allocator). Other
        // tests run at the same time and free memory, so only what this block alone implies
        // is asserted: while it lives, at least its 64 MiB are committed and live.
        let before = read().expect("mimalloc stats");
        assert!(before.name.starts_with("mimalloc "), "{before:?}");
        let block = std::hint::black_box(vec![1u8; 64 << 20]);
        let after = read().expect("mimalloc stats");
        let live = crate::alloc_count::live_bytes();
        drop(block);
        assert!(after.committed >= 64 << 20, "{before:?} -> {after:?}");
        assert!(after.committed_peak >= after.committed, "{after:?}");
        assert!(after.reserved >= after.committed, "{after:?}");
        assert!(live >= 64 << 20, "live {live}");
    }

    #[test]
    fn parses_mimalloc_json() {
        let s = parse(r#"{"stat_version": 5, "mimalloc_version": 315, "committed": { "total": 9, "peak": 8, "current": 7 }, "reserved": { "total": 1, "peak": 2, "current": 30 }}"#)
            .expect("parse");
        assert_eq!((s.committed, s.committed_peak, s.reserved), (7, 8, 30));
    }
}
