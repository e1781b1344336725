//! Read pacing: a connection whose client streams to it fast reads in larger pieces.
//!
//! A broker that keeps up with a streaming publisher wakes for every few hundred bytes: each
//! wake-up costs an `epoll_wait`, a `recvfrom` and the ACK that read sends back through
//! loopback (which runs the peer's receive path on the broker's CPU), for two or three
//! publishes. Measured on a quiet machine that was about half of the broker's CPU per message
//! (docs/performance.md, "Read pacing").
//!
//! So while a connection receives faster than `read_pace_min_rate` bytes a second (measured over
//! windows of [`WINDOW`]), a read that did not fill its buffer is followed by a short pause
//! ([`PAUSE`], rounded up to the timer's millisecond tick) before the socket is read again: the
//! client's bytes gather in the socket meanwhile, and the next read takes them all at once. The
//! pause delays only reading: deliveries, confirms and every other event of the connection go
//! on. A read that fills its buffer is followed by another at once, and a client below the rate
//! (an RPC client, a fixed-rate publisher, a consumer's acks) is never paused.

use std::time::{Duration, Instant};

/// How long reading pauses after a read while the client streams (the timer rounds it up to
/// its next millisecond tick).
pub(crate) const PAUSE: Duration = Duration::from_micros(500);
/// The window the receive rate is measured over.
pub(crate) const WINDOW: Duration = Duration::from_millis(4);

/// Per-connection receive-rate tracker (see the module docs).
#[derive(Debug)]
pub(crate) struct ReadPace {
    /// Bytes a second above which reads pause; 0: never.
    min_rate: u64,
    window_start: Instant,
    window_bytes: u64,
    streaming: bool,
}

impl ReadPace {
    /// A tracker pausing reads above `min_rate` bytes a second (0: never).
    pub(crate) fn new(min_rate: u64, now: Instant) -> Self {
        Self {
            min_rate,
            window_start: now,
            window_bytes: 0,
            streaming: false,
        }
    }

    /// Records a read of `n` bytes at `now` (`full`: it filled the room it had). Returns
    /// whether reading should pause for [`PAUSE`] before the next read.
    pub(crate) fn after_read(&mut self, n: usize, full: bool, now: Instant) -> bool {
        if self.min_rate == 0 {
            return false;
        }
        self.window_bytes = self.window_bytes.saturating_add(n as u64);
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed >= WINDOW {
            // bytes / seconds >= min_rate, without floats: bytes * 1e6 >= min_rate * µs
            let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
            self.streaming = u128::from(self.window_bytes) * 1_000_000
                >= u128::from(self.min_rate) * u128::from(micros);
            self.window_start = now;
            self.window_bytes = 0;
        }
        self.streaming && !full
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    #[test]
    fn a_fast_stream_pauses_after_reads_that_do_not_fill_the_buffer() {
        let t0 = Instant::now();
        let mut p = ReadPace::new(4 * MB, t0);
        // 300 B every 20 µs = 15 MB/s
        let mut paused = Vec::new();
        for i in 1..=1000u32 {
            paused.push(p.after_read(300, false, t0 + Duration::from_micros(20 * u64::from(i))));
        }
        // the first window (4 ms: 200 reads) measures the rate; from then on every read pauses
        assert!(paused[..199].iter().all(|p| !p));
        assert!(paused[200..].iter().all(|p| *p));
        // a full read is followed by another at once
        assert!(!p.after_read(65536, true, t0 + Duration::from_micros(20_100)));
    }

    #[test]
    fn a_slow_client_is_never_paused() {
        let t0 = Instant::now();
        let mut p = ReadPace::new(4 * MB, t0);
        // 100 B every 200 µs = 0.5 MB/s (5,000 small publishes a second)
        for i in 1..=1000u32 {
            assert!(!p.after_read(100, false, t0 + Duration::from_micros(200 * u64::from(i))));
        }
    }

    #[test]
    fn a_stream_that_stops_is_no_longer_paused() {
        let t0 = Instant::now();
        let mut p = ReadPace::new(4 * MB, t0);
        let mut t = t0;
        for _ in 0..1000 {
            t += Duration::from_micros(20);
            p.after_read(300, false, t);
        }
        assert!(p.after_read(300, false, t + Duration::from_micros(20)));
        // the next read comes after a second of silence
        assert!(!p.after_read(300, false, t + Duration::from_secs(1)));
    }

    #[test]
    fn zero_turns_pacing_off() {
        let t0 = Instant::now();
        let mut p = ReadPace::new(0, t0);
        for i in 1..=1000u32 {
            assert!(!p.after_read(60_000, false, t0 + Duration::from_micros(u64::from(i))));
        }
    }
}
