//! How much room a connection's read buffer gets before each socket read.
//!
//! An idle connection should cost little (10,000 idle connections are a goal), a busy one
//! should read in large chunks (one syscall for many frames). The sizer starts small, doubles
//! the room whenever a read fills all of it, and halves it after a run of reads that used less
//! than a quarter of it. Memory is reserved only when the buffer has less room than the hint,
//! so a buffer that still holds a partial frame keeps its allocation.

use bytes::BytesMut;

/// Room for the first reads (the handshake and an idle connection's heartbeats).
pub(crate) const MIN: usize = 4 * 1024;
/// The most room one read gets.
pub(crate) const MAX: usize = 64 * 1024;
/// Reads using less than a quarter of the room, in a row, before the room halves.
const SHRINK_AFTER: u32 = 16;

/// Adaptive read size (see the module docs).
#[derive(Debug)]
pub(crate) struct ReadSizer {
    hint: usize,
    room: usize,
    small_reads: u32,
}

impl Default for ReadSizer {
    fn default() -> Self {
        Self {
            hint: MIN,
            room: 0,
            small_reads: 0,
        }
    }
}

impl ReadSizer {
    /// Makes sure `buf` has room for at least the current hint; call before each read.
    pub(crate) fn prepare(&mut self, buf: &mut BytesMut) {
        if buf.capacity() - buf.len() < self.hint {
            buf.reserve(self.hint);
        }
        self.room = buf.capacity() - buf.len();
    }

    /// Records that a read returned `n` bytes.
    pub(crate) fn observe(&mut self, n: usize) {
        if n >= self.room {
            self.hint = (self.hint * 2).min(MAX);
            self.small_reads = 0;
        } else if n < self.hint / 4 {
            self.small_reads += 1;
            if self.small_reads >= SHRINK_AFTER {
                self.hint = (self.hint / 2).max(MIN);
                self.small_reads = 0;
            }
        } else {
            self.small_reads = 0;
        }
    }

    /// The room the next `prepare` asks for.
    #[cfg(test)]
    pub(crate) fn hint(&self) -> usize {
        self.hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_reads_grow_the_room_up_to_the_maximum() {
        let mut s = ReadSizer::default();
        let mut buf = BytesMut::new();
        for _ in 0..10 {
            s.prepare(&mut buf);
            let room = buf.capacity() - buf.len();
            assert!(room >= s.hint());
            s.observe(room);
            buf.clear();
        }
        assert_eq!(s.hint(), MAX);
    }

    #[test]
    fn small_reads_shrink_the_room_back_to_the_minimum() {
        let mut s = ReadSizer::default();
        let mut buf = BytesMut::new();
        for _ in 0..5 {
            s.prepare(&mut buf);
            s.observe(buf.capacity() - buf.len());
        }
        assert!(s.hint() > MIN);
        for _ in 0..(SHRINK_AFTER as usize * 8) {
            s.prepare(&mut buf);
            s.observe(8);
        }
        assert_eq!(s.hint(), MIN);
    }

    #[test]
    fn an_idle_connection_keeps_a_small_buffer() {
        let mut s = ReadSizer::default();
        let mut buf = BytesMut::new();
        s.prepare(&mut buf);
        s.observe(8);
        assert!(buf.capacity() < 2 * MIN, "capacity {}", buf.capacity());
    }
}
