//! [`RecoveredList`]: one queue's recovered members, packed (a few bytes each) instead of a
//! `Vec` of 40-byte [`RecoveredEntry`]s: recovery hands the lists out while the whole index is
//! in memory, so at 10M messages the `Vec`s were 381 MiB on top of it (docs/performance.md,
//! "Recovery of 10M").
//!
//! Each entry is varints: the id's distance from the previous id (ids increase), the message
//! id's distance from the previous one (zigzag: compaction may have carried older messages
//! forward), the delivery count shifted left by one with the park flag in bit 0, and when
//! parked, the due time and attempt. A FIFO backlog costs 3 bytes a message.

use crate::types::RecoveredEntry;

/// One queue's live members in queue-local id order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveredList {
    bytes: Vec<u8>,
    len: usize,
    last: Option<(u64, u64)>,
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `put` writes for `v`.
fn put_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn take(bytes: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    while let Some(b) = bytes.get(*at) {
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    v
}

impl RecoveredList {
    /// The entries of `entries` (in increasing id order), in a buffer of exactly their size:
    /// one pass to size it, one to fill it (a list of 10M members grown by doubling left its
    /// smaller copies to the allocator at recovery's peak).
    pub(crate) fn exact<I: Iterator<Item = RecoveredEntry>>(entries: impl Fn() -> I) -> Self {
        let mut bytes = 0usize;
        let (mut prev_id, mut prev_msg) = (0u64, 0u64);
        for e in entries() {
            let d = e.msg.wrapping_sub(prev_msg) as i64;
            bytes += put_len(e.id.wrapping_sub(prev_id))
                + put_len(((d << 1) ^ (d >> 63)) as u64)
                + put_len((u64::from(e.delivery_count) << 1) | 1);
            if let Some((due, attempt)) = e.parked {
                bytes += put_len(due) + put_len(u64::from(attempt));
            }
            (prev_id, prev_msg) = (e.id, e.msg);
        }
        let mut list = RecoveredList {
            bytes: Vec::with_capacity(bytes),
            len: 0,
            last: None,
        };
        for e in entries() {
            list.push(&e);
        }
        list
    }

    /// Appends `e`, whose id is above every id in the list (ids out of order are refused:
    /// `false`; recovery hands them out in order).
    pub fn push(&mut self, e: &RecoveredEntry) -> bool {
        let (prev_id, prev_msg) = self.last.unwrap_or((0, 0));
        if self.last.is_some() && e.id <= prev_id {
            return false;
        }
        put(&mut self.bytes, e.id - prev_id);
        let d = e.msg.wrapping_sub(prev_msg) as i64;
        put(&mut self.bytes, ((d << 1) ^ (d >> 63)) as u64);
        put(
            &mut self.bytes,
            (u64::from(e.delivery_count) << 1) | u64::from(e.parked.is_some()),
        );
        if let Some((due, attempt)) = e.parked {
            put(&mut self.bytes, due);
            put(&mut self.bytes, u64::from(attempt));
        }
        self.len += 1;
        self.last = Some((e.id, e.msg));
        true
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queue-local id of the last member.
    pub fn last_id(&self) -> Option<u64> {
        self.last.map(|(id, _)| id)
    }

    /// The members in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            bytes: &self.bytes,
            at: 0,
            id: 0,
            msg: 0,
            left: self.len,
        }
    }

    /// The first member.
    pub fn first(&self) -> Option<RecoveredEntry> {
        self.iter().next()
    }

    /// The `i`-th member (decodes the ones before it).
    pub fn get(&self, i: usize) -> Option<RecoveredEntry> {
        self.iter().nth(i)
    }

    /// The members as a `Vec` (tests, small lists).
    pub fn to_vec(&self) -> Vec<RecoveredEntry> {
        self.iter().collect()
    }
}

impl FromIterator<RecoveredEntry> for RecoveredList {
    /// Collects members given in increasing id order (others are left out).
    fn from_iter<I: IntoIterator<Item = RecoveredEntry>>(iter: I) -> Self {
        let mut l = RecoveredList::default();
        for e in iter {
            l.push(&e);
        }
        l
    }
}

/// Decodes a [`RecoveredList`].
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    bytes: &'a [u8],
    at: usize,
    id: u64,
    msg: u64,
    left: usize,
}

impl Iterator for Iter<'_> {
    type Item = RecoveredEntry;

    fn next(&mut self) -> Option<RecoveredEntry> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.id = self.id.wrapping_add(take(self.bytes, &mut self.at));
        let z = take(self.bytes, &mut self.at);
        let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
        self.msg = self.msg.wrapping_add(d as u64);
        let c = take(self.bytes, &mut self.at);
        let parked = (c & 1 == 1).then(|| {
            let due = take(self.bytes, &mut self.at);
            let attempt = take(self.bytes, &mut self.at);
            (due, u32::try_from(attempt).unwrap_or(u32::MAX))
        });
        Some(RecoveredEntry {
            id: self.id,
            msg: self.msg,
            delivery_count: u32::try_from(c >> 1).unwrap_or(u32::MAX),
            parked,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a RecoveredList {
    type Item = RecoveredEntry;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry() -> impl Strategy<Value = (u64, u64, u32, Option<(u64, u32)>)> {
        (
            prop_oneof![1u64..3, 1u64..1 << 40],
            any::<u64>(),
            prop_oneof![Just(0u32), any::<u32>()],
            proptest::option::of((any::<u64>(), any::<u32>())),
        )
    }

    proptest! {
        /// What goes in comes out, in order.
        #[test]
        fn a_list_gives_back_its_entries(es in prop::collection::vec(entry(), 0..200)) {
            let mut id = 0u64;
            let mut want = Vec::new();
            for (step, msg, delivery_count, parked) in es {
                id = id.saturating_add(step);
                if want.last().is_some_and(|e: &RecoveredEntry| e.id >= id) {
                    break;
                }
                want.push(RecoveredEntry { id, msg, delivery_count, parked });
            }
            let list: RecoveredList = want.iter().cloned().collect();
            let exact = RecoveredList::exact(|| want.iter().cloned());
            prop_assert_eq!(exact.bytes.capacity(), exact.bytes.len());
            prop_assert_eq!(&exact, &list);
            prop_assert_eq!(list.len(), want.len());
            prop_assert_eq!(list.to_vec(), want.clone());
            prop_assert_eq!(list.last_id(), want.last().map(|e| e.id));
            prop_assert_eq!(list.first(), want.first().cloned());
        }
    }

    #[test]
    fn a_fifo_backlog_costs_three_bytes_a_member() {
        let list: RecoveredList = (0..1000u64)
            .map(|i| RecoveredEntry {
                id: 5 + i,
                msg: 100 + 2 * i,
                delivery_count: 0,
                parked: None,
            })
            .collect();
        // The first message id (100) takes two bytes, every other field one.
        assert_eq!(list.bytes.len(), 3001);
        let mut l = list.clone();
        assert!(!l.push(&RecoveredEntry {
            id: 5,
            msg: 1,
            delivery_count: 0,
            parked: None
        }));
    }
}
