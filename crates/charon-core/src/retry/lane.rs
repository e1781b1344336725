//! [`Lane`]: a FIFO of parked records in fixed blocks of [`BLOCK`] records. A lane of a
//! million records is 4,000 blocks of 8 KiB: it grows a block at a time and gives blocks back
//! as they empty, where one contiguous ring doubles (copying and faulting in tens of MiB in
//! one go: a 41 ms stall of the queue actor seen while parking a million messages) and
//! shrinks by copying again. Parking and releasing cost the same at every size.

use std::collections::VecDeque;

/// Records per block (8 KiB of 32-byte records).
const BLOCK: usize = 256;

/// A FIFO in blocks of [`BLOCK`] records.
#[derive(Debug)]
pub(super) struct Lane<T> {
    blocks: VecDeque<VecDeque<T>>,
}

impl<T> Lane<T> {
    /// A lane holding `first`.
    pub(super) fn with(first: T) -> Self {
        let mut l = Lane {
            blocks: VecDeque::new(),
        };
        l.push_back(first);
        l
    }

    pub(super) fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    pub(super) fn front(&self) -> Option<&T> {
        self.blocks.front().and_then(|b| b.front())
    }

    pub(super) fn back(&self) -> Option<&T> {
        self.blocks.back().and_then(|b| b.back())
    }

    pub(super) fn push_back(&mut self, v: T) {
        match self.blocks.back_mut() {
            Some(b) if b.len() < BLOCK => b.push_back(v),
            _ => {
                let mut b = VecDeque::with_capacity(BLOCK);
                b.push_back(v);
                self.blocks.push_back(b);
            }
        }
    }

    pub(super) fn pop_front(&mut self) -> Option<T> {
        let b = self.blocks.front_mut()?;
        let v = b.pop_front();
        if b.is_empty() {
            self.blocks.pop_front();
        }
        v
    }
}

impl<T> IntoIterator for Lane<T> {
    type Item = T;
    type IntoIter = std::iter::Flatten<std::collections::vec_deque::IntoIter<VecDeque<T>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.blocks.into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Pushes and pops in any order behave as a `VecDeque` used as a FIFO.
        #[test]
        fn a_lane_is_a_fifo(ops in prop::collection::vec(any::<Option<u16>>(), 0..2000)) {
            let mut lane: Option<Lane<u16>> = None;
            let mut model = VecDeque::new();
            for op in ops {
                match op {
                    Some(v) => {
                        match lane.as_mut() {
                            Some(l) => l.push_back(v),
                            None => lane = Some(Lane::with(v)),
                        }
                        model.push_back(v);
                    }
                    None => prop_assert_eq!(lane.as_mut().and_then(Lane::pop_front), model.pop_front()),
                }
                let l = lane.as_ref();
                prop_assert_eq!(l.and_then(Lane::front), model.front());
                prop_assert_eq!(l.and_then(Lane::back), model.back());
                prop_assert_eq!(l.is_none_or(Lane::is_empty), model.is_empty());
                prop_assert!(l.is_none_or(|l| l.blocks.iter().all(|b| !b.is_empty() && b.len() <= BLOCK)));
            }
            let rest: Vec<u16> = lane.map(|l| l.into_iter().collect()).unwrap_or_default();
            prop_assert_eq!(rest, model.into_iter().collect::<Vec<_>>());
        }
    }
}
