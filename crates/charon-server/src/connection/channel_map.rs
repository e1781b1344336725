//! A connection's open channels by number ([`ChannelMap`]): what the connection task looks up
//! several times for every frame it handles (a persistent publish with confirms: nine times, from
//! its method frame to its confirm), so the common numbers are found by indexing, not hashing.
//!
//! Clients number their channels from 1 up and use few, so numbers below [`DIRECT`] sit in a
//! vector indexed by number, as long as the highest such number open (boxed: an empty slot costs
//! a pointer, at most `DIRECT` of them a connection); any other number (a client may use any
//! up to `channel_max`) goes to a hash map as before. Iteration order is unspecified, as a hash
//! map's was.

use super::channel::Channel;

/// Channel numbers below this are looked up by index.
const DIRECT: u16 = 256;

/// Open channels by number.
#[derive(Default)]
pub(crate) struct ChannelMap {
    /// Slot `n`: channel `n` (< [`DIRECT`]); no trailing empty slots.
    direct: Vec<Option<Box<Channel>>>,
    /// Channels numbered [`DIRECT`] or above.
    other: foldhash::HashMap<u16, Channel>,
    /// Open channels in `direct`.
    direct_len: usize,
}

impl ChannelMap {
    pub(crate) fn get(&self, n: &u16) -> Option<&Channel> {
        if *n < DIRECT {
            self.direct.get(usize::from(*n))?.as_deref()
        } else {
            self.other.get(n)
        }
    }

    pub(crate) fn get_mut(&mut self, n: &u16) -> Option<&mut Channel> {
        if *n < DIRECT {
            self.direct.get_mut(usize::from(*n))?.as_deref_mut()
        } else {
            self.other.get_mut(n)
        }
    }

    pub(crate) fn contains_key(&self, n: &u16) -> bool {
        self.get(n).is_some()
    }

    /// Opens channel `n` (the channel it replaces, if it was open).
    pub(crate) fn insert(&mut self, n: u16, ch: Channel) -> Option<Channel> {
        if n >= DIRECT {
            return self.other.insert(n, ch);
        }
        let i = usize::from(n);
        if self.direct.len() <= i {
            self.direct.resize_with(i + 1, || None);
        }
        let old = self.direct.get_mut(i)?.replace(Box::new(ch));
        if old.is_none() {
            self.direct_len += 1;
        }
        old.map(|b| *b)
    }

    pub(crate) fn remove(&mut self, n: &u16) -> Option<Channel> {
        if *n >= DIRECT {
            return self.other.remove(n);
        }
        let old = self.direct.get_mut(usize::from(*n))?.take()?;
        self.direct_len -= 1;
        while matches!(self.direct.last(), Some(None)) {
            self.direct.pop();
        }
        Some(*old)
    }

    pub(crate) fn len(&self) -> usize {
        self.direct_len + self.other.len()
    }

    /// Open channels with their numbers.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u16, &Channel)> + '_ {
        let direct = self.direct.iter().enumerate().filter_map(|(i, slot)| {
            let ch = slot.as_deref()?;
            Some((u16::try_from(i).ok()?, ch))
        });
        direct.chain(self.other.iter().map(|(n, ch)| (*n, ch)))
    }

    /// The numbers of the open channels.
    pub(crate) fn keys(&self) -> impl Iterator<Item = u16> + '_ {
        self.iter().map(|(n, _)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map against a `BTreeMap` model over numbers on both sides of `DIRECT`, in an order
    /// that opens, replaces, closes and reopens them.
    #[test]
    fn behaves_as_a_map_on_both_sides_of_the_direct_range() {
        let mut m = ChannelMap::default();
        let mut model = std::collections::BTreeMap::new();
        let numbers = [1u16, 2, 255, 256, 300, 65535, 7, 1, 2047, 0];
        for (step, &n) in numbers.iter().cycle().take(60).enumerate() {
            if step % 3 == 2 {
                assert_eq!(
                    m.remove(&n).is_some(),
                    model.remove(&n).is_some(),
                    "remove {n}"
                );
            } else {
                // Each channel carries its number, to tell whose state a slot holds.
                let ch = Channel {
                    next_tag: u64::from(n),
                    ..Default::default()
                };
                assert_eq!(
                    m.insert(n, ch).is_some(),
                    model.insert(n, ()).is_some(),
                    "insert {n}"
                );
            }
            assert_eq!(m.len(), model.len());
            for k in 0..=300u16 {
                assert_eq!(m.contains_key(&k), model.contains_key(&k), "contains {k}");
            }
            assert_eq!(m.get(&65535).is_some(), model.contains_key(&65535));
            let mut keys: Vec<u16> = m.keys().collect();
            keys.sort_unstable();
            assert_eq!(keys, model.keys().copied().collect::<Vec<_>>());
            for (n, ch) in m.iter() {
                assert_eq!(
                    ch.next_tag,
                    u64::from(n),
                    "channel {n} holds another's state"
                );
            }
        }
        // Closing the highest direct channel drops the empty slots below it too.
        for n in model.keys().copied().collect::<Vec<_>>() {
            m.remove(&n);
        }
        assert_eq!(m.len(), 0);
        assert!(m.direct.is_empty());
    }
}
