//! Bodies of stored messages a queue admitted already paged out while its store records are
//! not durable yet (`StoreSide::admit`): the queue's ready ring holds the shared paged-out
//! message from the start, and the body waits here, oldest first, until the group commit
//! that covers its record; reads meanwhile are served from here, never from the store.
//! Bounded by what one or two group commits carry.

use std::collections::VecDeque;

use bytes::Bytes;
use charon_core::MsgId;

/// One kept body.
#[derive(Debug)]
struct Kept {
    id: MsgId,
    msg: u64,
    body: Bytes,
}

/// Kept bodies in arrival order.
#[derive(Debug, Default)]
pub(super) struct Pending {
    kept: VecDeque<Kept>,
    /// Body bytes kept (counted against the body budget by the owner).
    bytes: u64,
    /// Ids arrived in increasing order since the deque was last empty (lookups by binary
    /// search; otherwise, when publishers raced for ids, by a scan).
    sorted: bool,
}

impl Pending {
    pub(super) fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Body bytes kept.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Keeps `body` of stored message `msg`, the queue's `id`.
    pub(super) fn push(&mut self, id: MsgId, msg: u64, body: Bytes) {
        match self.kept.back() {
            None => self.sorted = true,
            Some(last) if last.id >= id => self.sorted = false,
            Some(_) => {}
        }
        self.bytes += body.len() as u64;
        self.kept.push_back(Kept { id, msg, body });
    }

    /// The store id and body of the queue's `id`, if kept.
    pub(super) fn get(&self, id: MsgId) -> Option<(u64, &Bytes)> {
        let k = if self.sorted {
            let i = self.kept.partition_point(|k| k.id < id);
            self.kept.get(i).filter(|k| k.id == id)
        } else {
            self.kept.iter().find(|k| k.id == id)
        }?;
        Some((k.msg, &k.body))
    }

    /// Drops the kept bodies, from the oldest on, whose records are at or below `durable`;
    /// returns their bytes.
    pub(super) fn drop_durable(&mut self, durable: u64) -> u64 {
        let mut freed = 0;
        while let Some(k) = self.kept.front()
            && k.msg <= durable
        {
            freed += k.body.len() as u64;
            self.kept.pop_front();
        }
        self.bytes -= freed;
        if self.kept.capacity() > 4096 && self.kept.len() * 4 < self.kept.capacity() {
            self.kept.shrink_to(self.kept.len() * 2);
        }
        freed
    }

    /// The store id of the oldest kept body (what the next drop waits for).
    pub(super) fn first_msg(&self) -> Option<u64> {
        self.kept.front().map(|k| k.msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: usize) -> Bytes {
        Bytes::from(vec![7u8; n])
    }

    #[test]
    fn bodies_are_found_until_their_records_are_durable() {
        let mut p = Pending::default();
        p.push(10, 100, body(3));
        p.push(11, 101, body(4));
        p.push(12, 105, body(5));
        assert_eq!(p.bytes(), 12);
        assert_eq!(p.get(11).map(|(m, b)| (m, b.len())), Some((101, 4)));
        assert_eq!(p.get(13), None);
        assert_eq!(p.drop_durable(101), 7);
        assert_eq!(p.get(10), None);
        assert_eq!(p.get(11), None);
        assert_eq!(p.get(12).map(|(m, _)| m), Some(105));
        assert_eq!(p.first_msg(), Some(105));
        assert_eq!(p.drop_durable(104), 0);
        assert_eq!(p.drop_durable(105), 5);
        assert!(p.is_empty());
        assert_eq!(p.bytes(), 0);
    }

    #[test]
    fn ids_out_of_order_are_still_found() {
        let mut p = Pending::default();
        p.push(5, 50, body(1));
        p.push(3, 51, body(2));
        p.push(4, 52, body(3));
        for (id, msg) in [(5, 50), (3, 51), (4, 52)] {
            assert_eq!(p.get(id).map(|(m, _)| m), Some(msg));
        }
        // Records made durable out of order wait behind the oldest.
        assert_eq!(p.drop_durable(52), 6);
        assert!(p.is_empty());
        p.push(9, 60, body(1));
        p.push(10, 61, body(1));
        assert_eq!(p.get(10).map(|(m, _)| m), Some(61));
    }
}
