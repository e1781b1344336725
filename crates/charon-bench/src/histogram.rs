//! Latency histogram helpers (microseconds, hdrhistogram).

use hdrhistogram::Histogram;

/// Highest trackable latency: 10 minutes in µs.
const MAX_US: u64 = 600_000_000;

/// A fresh latency histogram (3 significant digits).
pub(crate) fn new_latency_histogram() -> Histogram<u64> {
    // Constant, valid bounds: this cannot fail.
    #[allow(clippy::expect_used)]
    Histogram::new_with_bounds(1, MAX_US, 3).expect("constant histogram bounds are valid")
}
