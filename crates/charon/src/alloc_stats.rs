//! The global allocator's figures for the memory alarm and the management API: live heap bytes
//! (counted by `alloc_count`) and mimalloc's process-wide statistics (`MiMalloc::stats_json`, the
//! crate's safe API), of which the broker reads the bytes committed from the OS (current and
//! peak) and the address space reserved. Registered with
//! `charon_server::memory::set_allocator_probe` at start.

use std::sync::OnceLock;

use charon_server::memory::AllocatorStats;
use serde_json::Value;

/// Registers [`probe`] as the broker's allocator probe.
pub(crate) fn register() {
    charon_server::memory::set_allocator_probe(probe);
}

/// mimalloc's statistics now (None if it cannot give them).
fn probe() -> Option<AllocatorStats> {
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
        // This test binary allocates through mimalloc too (main.rs's global allocator).
        let before = probe().expect("mimalloc stats");
        assert!(before.name.starts_with("mimalloc "), "{before:?}");
        let block = std::hint::black_box(vec![1u8; 64 << 20]);
        let after = probe().expect("mimalloc stats");
        drop(block);
        assert!(
            after.committed >= before.committed + (64 << 20),
            "{before:?} -> {after:?}"
        );
        assert!(after.reserved >= after.committed, "{after:?}");
    }

    #[test]
    fn parses_mimalloc_json() {
        let s = parse(r#"{"stat_version": 5, "mimalloc_version": 315, "committed": { "total": 9, "peak": 8, "current": 7 }, "reserved": { "total": 1, "peak": 2, "current": 30 }}"#)
            .expect("parse");
        assert_eq!((s.committed, s.committed_peak, s.reserved), (7, 8, 30));
    }
}
