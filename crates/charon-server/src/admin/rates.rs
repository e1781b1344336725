//! Rates from cumulative counts, computed when asked: each key keeps the last sample; a
//! sample older than [`INTERVAL_MS`] is replaced and the rate over that interval remembered, so
//! rates need no background task and the hot path only counts.

use std::collections::HashMap;
use std::sync::Mutex;

/// Shortest interval a rate is computed over (RabbitMQ samples every 5 s).
pub const INTERVAL_MS: u64 = 5_000;
/// Samples kept before stale ones are swept.
const MAX_KEYS: usize = 10_000;
/// A sample not refreshed for this long is stale.
const STALE_MS: u64 = 600_000;

#[derive(Debug, Clone)]
struct Sample {
    at_ms: u64,
    values: Vec<u64>,
    rates: Vec<f64>,
}

/// Last samples by key (`"overview"`, `"queue:<id>"`, ...).
#[derive(Debug, Default)]
pub struct Rates {
    samples: Mutex<HashMap<String, Sample>>,
}

impl Rates {
    /// Per-second rates of `values` (cumulative counts) under `key`, over the last interval of
    /// at least [`INTERVAL_MS`]; zeros until one has passed.
    pub fn rates(&self, key: &str, values: &[u64], now_ms: u64) -> Vec<f64> {
        let mut map = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > MAX_KEYS {
            // Objects that went away (channels, auto-deleted queues) leave samples behind.
            map.retain(|_, s| now_ms.saturating_sub(s.at_ms) < STALE_MS);
        }
        match map.get_mut(key) {
            None => {
                map.insert(
                    key.to_string(),
                    Sample {
                        at_ms: now_ms,
                        values: values.to_vec(),
                        rates: vec![0.0; values.len()],
                    },
                );
                vec![0.0; values.len()]
            }
            Some(s) => {
                let dt = now_ms.saturating_sub(s.at_ms);
                if dt >= INTERVAL_MS && s.values.len() == values.len() {
                    let secs = dt as f64 / 1000.0;
                    s.rates = values
                        .iter()
                        .zip(&s.values)
                        .map(|(n, o)| n.saturating_sub(*o) as f64 / secs)
                        .collect();
                    s.values = values.to_vec();
                    s.at_ms = now_ms;
                } else if s.values.len() != values.len() {
                    s.values = values.to_vec();
                    s.rates = vec![0.0; values.len()];
                    s.at_ms = now_ms;
                }
                s.rates.clone()
            }
        }
    }

    /// Forgets a key (a deleted queue).
    pub fn forget(&self, key: &str) {
        self.samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_over_the_last_interval() {
        let r = Rates::default();
        assert_eq!(r.rates("k", &[10], 0), vec![0.0]);
        assert_eq!(r.rates("k", &[20], 1_000), vec![0.0]);
        assert_eq!(r.rates("k", &[60], 5_000), vec![10.0]);
        assert_eq!(r.rates("k", &[70], 6_000), vec![10.0]);
        assert_eq!(r.rates("k", &[60], 10_000), vec![0.0]);
    }
}
