//! Release lateness: how late a parked (retry) or delayed message is released compared with its
//! due time, measured at the release point (actual release time − due time, µs). A fixed
//! log-bucket histogram (64 exact buckets below 64 µs, then 32 buckets per power of two, ~3 %
//! resolution up to ~19 h; 4.6 KB, allocated on the first release) per queue and per delayed
//! exchange, read by management (`release_lateness_ms`) and the bench.

use std::time::{SystemTime, UNIX_EPOCH};

/// Exact buckets below this many µs.
const LINEAR: u64 = 64;
/// Buckets per power of two above [`LINEAR`].
const SUB_BITS: u32 = 5;
/// Highest power of two tracked (larger values land in the last bucket).
const MAX_EXP: u32 = 36;
const BUCKETS: usize = LINEAR as usize + (((MAX_EXP - 6 + 1) as usize) << SUB_BITS);

/// Wall-clock microseconds since the epoch.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A lateness histogram (µs).
#[derive(Debug, Default)]
pub struct Lateness {
    counts: Option<Box<[u32; BUCKETS]>>,
    count: u64,
    max_us: u64,
}

/// What management shows: count and p50/p99/max in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatenessSummary {
    /// Messages released.
    pub count: u64,
    /// Median lateness (µs).
    pub p50_us: u64,
    /// 99th percentile (µs).
    pub p99_us: u64,
    /// Largest (µs).
    pub max_us: u64,
}

impl LatenessSummary {
    /// Management's `release_lateness_ms` object: count, p50, p99, max in ms.
    pub fn to_json(&self) -> serde_json::Value {
        let ms = |us: u64| us as f64 / 1000.0;
        serde_json::json!({
            "count": self.count,
            "p50": ms(self.p50_us),
            "p99": ms(self.p99_us),
            "max": ms(self.max_us),
        })
    }
}

fn bucket(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    if e > MAX_EXP {
        return BUCKETS - 1;
    }
    let sub = (v >> (e - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    LINEAR as usize + (((e - 6) as usize) << SUB_BITS) + sub as usize
}

/// The middle of bucket `i` (µs).
fn value(i: usize) -> u64 {
    if i < LINEAR as usize {
        return i as u64;
    }
    let j = i - LINEAR as usize;
    let e = (j >> SUB_BITS) as u32 + 6;
    let sub = (j & ((1 << SUB_BITS) - 1)) as u64;
    let width = 1u64 << (e - SUB_BITS);
    (1u64 << e) + sub * width + width / 2
}

impl Lateness {
    /// A message due at `due_ms` was released at `now_us` (early releases count as 0).
    pub fn record(&mut self, due_ms: u64, now_us: u64) {
        self.record_us(due_ms.saturating_mul(1000), now_us);
    }

    /// A message due at `due_us` was released at `now_us` (early releases count as 0).
    pub fn record_us(&mut self, due_us: u64, now_us: u64) {
        let late = now_us.saturating_sub(due_us);
        let counts = self.counts.get_or_insert_with(|| Box::new([0; BUCKETS]));
        let c = &mut counts[bucket(late)];
        *c = c.saturating_add(1);
        self.count += 1;
        self.max_us = self.max_us.max(late);
    }

    /// Count and percentiles (`None` before the first release).
    pub fn summary(&self) -> Option<LatenessSummary> {
        let counts = self.counts.as_ref()?;
        let at = |q: f64| {
            let rank = ((self.count as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0u64;
            for (i, c) in counts.iter().enumerate() {
                seen += u64::from(*c);
                if seen >= rank {
                    return value(i).min(self.max_us);
                }
            }
            self.max_us
        };
        Some(LatenessSummary {
            count: self.count,
            p50_us: at(0.50),
            p99_us: at(0.99),
            max_us: self.max_us,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_close() {
        let mut last = 0;
        for v in (0..5_000_000u64).step_by(7) {
            let b = bucket(v);
            assert!(b >= last && b < BUCKETS);
            last = b;
            let m = value(b);
            assert!(m.abs_diff(v) <= v / 30 + 1, "{v} -> {m}");
        }
    }

    #[test]
    fn percentiles_of_known_values() {
        let mut l = Lateness::default();
        assert!(l.summary().is_none());
        for i in 0..1000u64 {
            // due 1000 ms, released i ms late
            l.record(1000, 1_000_000 + i * 1000);
        }
        let s = l.summary().unwrap_or_default();
        assert_eq!(s.count, 1000);
        assert!(s.p50_us.abs_diff(499_000) < 16_000, "{s:?}");
        assert!(s.p99_us.abs_diff(989_000) < 32_000, "{s:?}");
        assert_eq!(s.max_us, 999_000);
        l.record(5000, 1);
        assert_eq!(l.summary().map(|s| s.count), Some(1001));
    }
}
