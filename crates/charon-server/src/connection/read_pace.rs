//! Read pacing: a connection whose client streams to it fast reads in larger pieces.
//!
//! A broker that keeps up with a streaming publisher wakes for every few hundred bytes: each
//! wake-up costs an `epoll_wait`, a `recvfrom` and the ACK that read sends back through
//! loopback (which runs the peer's receive path on the broker's CPU), for two or three
//! publishes. Measured on a quiet machine that was about half of the broker's CPU per message
//! (docs/performance.md, "Read pacing").
//!
//! So once a connection reads more often than `read_pace_min_reads` times a second (measured
//! over a window of [`WINDOW`]), a read that did not fill its buffer is followed by a short
//! pause ([`PAUSE`], rounded up to the timer's millisecond tick) before the socket is read
//! again: the client's bytes gather in the socket meanwhile, and the next read takes them all
//! at once. The pause delays only reading: deliveries, confirms and every other event of the
//! connection go on. A read that fills its buffer is followed by another at once.
//!
//! A steady stream is also paced at a lower read rate: from an eighth of `read_pace_min_reads`
//! reads a second ([`STREAM_READS_DIV`]) when its reads take at least [`STREAM_FRAMES`] frames
//! a second together (a persistent publisher with a confirm window wakes the broker a few
//! thousand times a second for ten to twenty publishes each: docs/performance.md,
//! "Persistent/transient path, part 12"). A fixed-rate publisher of single messages (a@5000:
//! ~15,000 frames a second) stays below that and is never paced.
//!
//! While pacing, each window's pauses must gather at least [`GATHER_MIN`] frames on average
//! (the frames of every read of the window over the reads that were followed by a pause: a
//! read that filled its buffer and the one right after it share a pause); if not (the client
//! stopped, or it waits for the broker: a consumer with a small prefetch acking each message,
//! a publisher with a small confirm window), pacing stops and is not tried again for [`REST`].
//! A window that lasted [`IDLE`] or more is not judged: the client stopped sending for a while
//! (a publisher whose confirm window is full, waiting for a slow commit), and the one read it
//! ends with is the start of the next burst.
//! A client reading less often than the thresholds (an RPC client, a fixed-rate publisher at
//! thousands a second) is never paused.
//!
//! A transient publisher in confirm mode is paced like any other: exempting it (b13v, stop 40)
//! lifted scenario e's publish rate on a loaded machine but, on a quiet one, tripled the
//! broker's CPU a message (1.3 → 4.9–5.2 s for 1M) and lowered the rate (docs/performance.md,
//! part 25 and the lead's stop-40 section); reverted.

use std::time::{Duration, Instant};

/// How long reading pauses after a read while the client streams (the timer rounds it up to
/// its next millisecond tick).
pub(crate) const PAUSE: Duration = Duration::from_micros(500);
/// The window the read rate is measured over.
pub(crate) const WINDOW: Duration = Duration::from_millis(4);
/// Fewest frames a pause must gather on average, over a window, for pacing to go on. A client
/// that sends in bursts (a publisher refilling its confirm window as confirms come) has the
/// first publish of each burst read on its own — its segment wakes the broker before the rest
/// arrive — so such a stream averages about half a burst a pause (docs/performance.md,
/// "Persistent/transient path, part 12"; 128 stopped pacing scenario b's publisher).
pub(crate) const GATHER_MIN: u64 = 64;
/// How long pacing is not tried again after a pause that gathered too little.
pub(crate) const REST: Duration = Duration::from_millis(256);
/// A window this long had the client stop (a read waited for bytes): it does not end pacing.
pub(crate) const IDLE: Duration = Duration::from_millis(16);
/// Frames a second from which a stream is paced at the lower read rate
/// (`read_pace_min_reads / STREAM_READS_DIV`).
pub(crate) const STREAM_FRAMES: u64 = 100_000;
/// A stream of [`STREAM_FRAMES`] is paced from this fraction of `read_pace_min_reads`.
pub(crate) const STREAM_READS_DIV: u64 = 8;

/// Per-connection read pacing state (see the module docs).
#[derive(Debug)]
pub(crate) struct ReadPace {
    /// Reads a second from which reads are paced; 0: never.
    min_reads: u64,
    window_start: Instant,
    window_reads: u64,
    /// Reads of the window that were followed by a pause (each pause's gather ends with one).
    window_pauses: u64,
    window_frames: u64,
    streaming: bool,
    resting_until: Option<Instant>,
}

impl ReadPace {
    /// Pacing from `min_reads` reads a second (0: never).
    pub(crate) fn new(min_reads: u64, now: Instant) -> Self {
        Self {
            min_reads,
            window_start: now,
            window_reads: 0,
            window_pauses: 0,
            window_frames: 0,
            streaming: false,
            resting_until: None,
        }
    }

    /// Records a read of `frames` frames at `now` (`full`: it filled the room it had).
    /// Returns whether reading should pause for [`PAUSE`] before the next read.
    pub(crate) fn after_read(&mut self, frames: u64, full: bool, now: Instant) -> bool {
        if self.min_reads == 0 {
            return false;
        }
        self.window_reads += 1;
        if self.streaming && !full {
            self.window_pauses += 1;
        }
        self.window_frames = self.window_frames.saturating_add(frames);
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed >= WINDOW {
            if self.streaming {
                // A window of IDLE or more had the client stop for a while (a publisher whose
                // confirm window is full waits for a commit): it says nothing about what a
                // pause gathers.
                if elapsed < IDLE
                    && self.window_frames < GATHER_MIN.saturating_mul(self.window_pauses.max(1))
                {
                    self.streaming = false;
                    self.resting_until = Some(now + REST);
                }
            } else if self.resting_until.is_none_or(|t| now >= t) {
                // count / seconds >= rate, without floats: count * 1e6 >= rate * µs
                let micros = u128::from(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
                let at_least = |count: u64, rate: u64| {
                    u128::from(count) * 1_000_000 >= u128::from(rate) * micros
                };
                self.streaming = at_least(self.window_reads, self.min_reads)
                    || (at_least(self.window_reads, self.min_reads / STREAM_READS_DIV)
                        && at_least(self.window_frames, STREAM_FRAMES));
                self.resting_until = None;
            }
            self.window_start = now;
            self.window_reads = 0;
            self.window_pauses = 0;
            self.window_frames = 0;
        }
        self.streaming && !full
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(t0: Instant, micros: u64) -> Instant {
        t0 + Duration::from_micros(micros)
    }

    /// A pacer that just entered pacing: a read every 20 µs (50,000 a second) for 4 ms.
    fn streaming(t0: Instant) -> ReadPace {
        let mut p = ReadPace::new(20_000, t0);
        for i in 1..=199u64 {
            assert!(!p.after_read(3, false, us(t0, 20 * i)));
        }
        // the window (4 ms) is over: the rate is known, from now on reads pause
        assert!(p.after_read(3, false, us(t0, 4_000)));
        p
    }

    #[test]
    fn frequent_reads_pause_after_each_read_that_does_not_fill_the_buffer() {
        let t0 = Instant::now();
        let mut p = streaming(t0);
        // a full read is followed by another at once
        assert!(!p.after_read(GATHER_MIN, true, us(t0, 4_100)));
        // reads that take enough keep pacing on, also at the slower read rate pauses cause
        for i in 1..=40u64 {
            assert!(p.after_read(GATHER_MIN, false, us(t0, 4_100 + 1_000 * i)));
        }
    }

    #[test]
    fn a_client_reading_less_often_is_never_paused() {
        let t0 = Instant::now();
        let mut p = ReadPace::new(20_000, t0);
        // a read every 200 µs = 5,000 a second (a fixed-rate publisher)
        for i in 1..=1000u64 {
            assert!(!p.after_read(3, false, us(t0, 200 * i)));
        }
    }

    #[test]
    fn paced_reads_that_take_too_little_end_pacing_for_a_rest() {
        let t0 = Instant::now();
        let mut p = streaming(t0);
        // the client waits for the broker: one ack a read, a read a millisecond
        let mut t = 4_000;
        let mut paused = Vec::new();
        for _ in 0..10 {
            t += 1_000;
            paused.push(p.after_read(1, false, us(t0, t)));
        }
        // the window that began at 4 ms ends at 8 ms with one frame a read: pacing stops there
        assert!(paused[..3].iter().all(|p| *p), "{paused:?}");
        assert!(paused[3..].iter().all(|p| !p), "{paused:?}");
        let until = 8_000 + u64::try_from(REST.as_micros()).unwrap_or(u64::MAX);
        while t + 20 < until {
            t += 20;
            assert!(!p.after_read(3, false, us(t0, t)), "paused at {t} µs");
        }
        // after the rest, frequent reads are paced again (from the end of the next window)
        let again: Vec<bool> = (1..=200u64)
            .map(|i| p.after_read(3, false, us(t0, t + 20 * i)))
            .collect();
        assert!(again.iter().any(|p| *p));
    }

    #[test]
    fn a_steady_stream_of_many_frames_a_read_is_paced_at_a_lower_read_rate() {
        let t0 = Instant::now();
        let mut p = ReadPace::new(20_000, t0);
        // a read every 200 µs (5,000 a second, a quarter of the read threshold) taking 45
        // frames (fifteen publishes): 225,000 frames a second
        let paused: Vec<bool> = (1..=20u64)
            .map(|i| p.after_read(45, false, us(t0, 200 * i)))
            .collect();
        // the first window (4 ms) is over at the 20th read: paced from there on
        assert!(paused[..19].iter().all(|p| !p), "{paused:?}");
        assert!(paused[19]);
        // each pause (about a millisecond) now gathers a millisecond of the stream
        for i in 1..=20u64 {
            assert!(p.after_read(225, false, us(t0, 4_000 + 1_000 * i)));
        }
        // below an eighth of the read threshold a stream is not paced, whatever it takes
        let mut slow = ReadPace::new(20_000, t0);
        for i in 1..=100u64 {
            assert!(!slow.after_read(1_000, false, us(t0, 1_000 * i)));
        }
    }

    #[test]
    fn a_full_read_and_the_read_after_it_count_as_one_gather() {
        let t0 = Instant::now();
        let mut p = streaming(t0);
        // each pause gathers 150 frames, taken by a read that fills its buffer (100 frames)
        // and the one right after it (50): 75 a read, 150 a pause; pacing goes on
        let mut t = 4_000;
        for _ in 0..20 {
            t += 1_000;
            assert!(!p.after_read(100, true, us(t0, t)));
            t += 5;
            assert!(
                p.after_read(50, false, us(t0, t)),
                "pacing stopped at {t} µs"
            );
        }
    }

    #[test]
    fn a_stream_in_bursts_stays_paced_though_each_burst_starts_with_a_small_read() {
        let t0 = Instant::now();
        let mut p = streaming(t0);
        // every 2 ms a burst of fifty publishes (150 frames): its first publish is read on its
        // own, the rest after the pause that follows
        let mut t = 4_000;
        for _ in 0..20 {
            t += 1_000;
            assert!(p.after_read(3, false, us(t0, t)));
            t += 1_000;
            assert!(
                p.after_read(147, false, us(t0, t)),
                "pacing stopped at {t} µs"
            );
        }
    }

    #[test]
    fn a_stream_that_stops_for_a_while_stays_paced() {
        let t0 = Instant::now();
        let mut p = streaming(t0);
        assert!(p.after_read(200, false, us(t0, 5_000)));
        // the client waits 60 ms for confirms, then its next burst starts with a small read
        assert!(p.after_read(3, false, us(t0, 65_000)));
        assert!(p.after_read(200, false, us(t0, 66_000)));
        for i in 1..=8u64 {
            assert!(p.after_read(200, false, us(t0, 66_000 + 1_000 * i)));
        }
    }

    #[test]
    fn zero_turns_pacing_off() {
        let t0 = Instant::now();
        let mut p = ReadPace::new(0, t0);
        for i in 1..=1000u64 {
            assert!(!p.after_read(GATHER_MIN, false, us(t0, i)));
        }
    }
}
