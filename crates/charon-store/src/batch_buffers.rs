//! The pending batch's buffers, kept for reuse and sized to the commits the writer takes.
//!
//! A batch buffer that grows while records are appended is reallocated, and the reallocation
//! copies every record already in it (and faults in the new, larger pages): a 1 KiB backlog's
//! commits are 400 KiB–1 MiB, so a buffer started at 256 KiB was copied one to two times over.
//! Written buffers are kept (a few, and none larger than [`MAX_KEPT`]: what they keep counts
//! in the broker's memory); a new one, or a kept one smaller than the last commit, starts with
//! room for the last commit's largest chunk, rounded up to a power of two.

/// Buffers kept for reuse.
const KEPT: usize = 2;
/// A buffer larger than this is not kept, and no buffer starts larger.
pub(crate) const MAX_KEPT: usize = 2 << 20;
/// The room a buffer starts with before any commit was seen.
const FIRST: usize = 256 << 10;

/// Batch buffers for reuse, and the room a new one starts with.
#[derive(Debug, Default)]
pub(crate) struct BatchBuffers {
    kept: Vec<Vec<u8>>,
    /// The largest chunk of the last written batch, bytes.
    last: usize,
}

impl BatchBuffers {
    /// The room a buffer starts with: the last commit's largest chunk rounded up to a power of
    /// two, at least [`FIRST`] and at most [`MAX_KEPT`].
    pub(crate) fn start_room(&self) -> usize {
        self.last.next_power_of_two().clamp(FIRST, MAX_KEPT)
    }

    /// An empty buffer with at least [`start_room`](Self::start_room): a kept one when it is
    /// large enough (a smaller kept one is freed rather than grown, as growing would copy its
    /// whole allocation).
    pub(crate) fn take(&mut self) -> Vec<u8> {
        let room = self.start_room();
        match self.kept.pop() {
            Some(b) if b.capacity() >= room => b,
            _ => Vec::with_capacity(room),
        }
    }

    /// Takes back the buffers of a written batch.
    pub(crate) fn give_back(&mut self, buffers: impl IntoIterator<Item = Vec<u8>>) {
        let mut largest = 0;
        for mut b in buffers {
            largest = largest.max(b.len());
            if self.kept.len() < KEPT && b.capacity() <= MAX_KEPT {
                b.clear();
                self.kept.push(b);
            }
        }
        self.last = largest;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_buffer_has_room_for_the_last_commit() {
        let mut p = BatchBuffers::default();
        assert_eq!(p.take().capacity(), FIRST);
        // a 700 KiB commit written from a fresh buffer (grown past its start) and a small one
        p.give_back([vec![0u8; 700 << 10], vec![0u8; 10]]);
        assert_eq!(p.start_room(), 1 << 20);
        let a = p.take();
        let b = p.take();
        let c = p.take();
        for x in [&a, &b, &c] {
            assert!(x.is_empty());
            assert!(x.capacity() >= 700 << 10, "capacity {}", x.capacity());
        }
    }

    #[test]
    fn kept_buffers_are_few_and_bounded() {
        let mut p = BatchBuffers::default();
        p.give_back([
            Vec::with_capacity(MAX_KEPT * 2),
            Vec::with_capacity(1 << 10),
            Vec::with_capacity(1 << 10),
            Vec::with_capacity(1 << 10),
        ]);
        assert_eq!(p.kept.len(), KEPT);
        assert!(p.kept.iter().all(|b| b.capacity() <= MAX_KEPT));
        // commits larger than the cap still start at the cap
        p.give_back([vec![0u8; 3 * MAX_KEPT]]);
        assert_eq!(p.start_room(), MAX_KEPT);
    }

    #[test]
    fn a_kept_buffer_is_reused_while_it_is_large_enough() {
        let mut p = BatchBuffers::default();
        let b = p.take();
        let at = b.as_ptr();
        p.give_back([b]);
        let again = p.take();
        assert_eq!(again.as_ptr(), at);
        // after a larger commit the small kept one is not handed out
        p.give_back([again, vec![0u8; 900 << 10]]);
        assert!(p.take().capacity() >= 900 << 10);
    }
}
