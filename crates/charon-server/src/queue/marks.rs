//! A durable queue's *delivered mark* (docs/storage-format.md, "Delivered marks"): instead of a
//! delivery-count record item per first delivery, a FIFO queue keeps one small definition
//! record saying "every stored message of this queue with an id up to `upto`, stored before
//! `before`, has been delivered, except these few", rewritten after each batch that delivers.
//!
//! A FIFO queue delivers in id order, so the ids it has delivered at least once are a prefix of
//! its ids — apart from messages that arrive after higher ids went out (publishers racing for
//! ids, dead letters from other queues): those are the *exceptions* until they are delivered
//! themselves. A queue that does not deliver in id order (priorities, retries) never advances
//! its mark; its first deliveries are written one by one as before (`DeliveryCounts`).
//!
//! What a crash can do: a message whose store record was written before the mark but that had
//! not reached the queue when the mark was written, with an id below `upto`, is taken as
//! delivered after a crash (the queue corrects the mark as soon as the message arrives). Such
//! messages can only be those in flight from publishers at the last group commit before the
//! crash (at most the publishers' unconfirmed windows); `redelivered` is a "may have been
//! delivered" hint, so this is allowed, and never weaker than before: everything delivered
//! before the last completed group commit comes back redelivered.

use std::collections::BTreeSet;

/// A queue's delivered mark as stored (definition kind 5).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Mark {
    /// Ids (store qids) up to this one were delivered...
    pub(crate) upto: u64,
    /// ...when their message's store id is below this one...
    pub(crate) before: u64,
    /// ...except these (ascending).
    pub(crate) except: Vec<u64>,
}

/// Version byte of the stored form.
const VERSION: u8 = 1;

impl Mark {
    /// Whether the member with store qid `qid` of message `msg` counts as delivered.
    pub(crate) fn covers(&self, qid: u64, msg: u64) -> bool {
        qid <= self.upto && msg < self.before && self.except.binary_search(&qid).is_err()
    }

    /// The stored form: version `u8`, `upto: u64`, `before: u64`, `n: u32`, `qid: u64 × n`,
    /// little-endian.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(21 + 8 * self.except.len());
        v.push(VERSION);
        v.extend_from_slice(&self.upto.to_le_bytes());
        v.extend_from_slice(&self.before.to_le_bytes());
        let n = u32::try_from(self.except.len()).unwrap_or(u32::MAX);
        v.extend_from_slice(&n.to_le_bytes());
        for q in self.except.iter().take(n as usize) {
            v.extend_from_slice(&q.to_le_bytes());
        }
        v
    }

    /// Reads the stored form back (`None`: not one this broker wrote; ignored).
    pub(crate) fn decode(b: &[u8]) -> Option<Mark> {
        let (&version, rest) = b.split_first()?;
        if version != VERSION {
            return None;
        }
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(rest.get(at..at + 8)?.try_into().ok()?))
        };
        let upto = u64_at(0)?;
        let before = u64_at(8)?;
        let n = u32::from_le_bytes(rest.get(16..20)?.try_into().ok()?) as usize;
        if rest.len() != 20 + 8 * n {
            return None;
        }
        let mut except: Vec<u64> = (0..n).filter_map(|i| u64_at(20 + 8 * i)).collect();
        except.sort_unstable();
        Some(Mark {
            upto,
            before,
            except,
        })
    }
}

/// The queue's side of its mark (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct DeliveryMarks {
    /// Largest store qid delivered (first deliveries) and covered by the mark (none yet).
    upto: Option<u64>,
    /// Above every store id of a message the queue has received.
    before: u64,
    /// Stored messages with a qid at or below `upto` never delivered.
    except: BTreeSet<u64>,
    /// The mark last written (or recovered): `(upto, before)`.
    written: Option<(u64, u64)>,
    /// The written mark wrongly covers a message that arrived since: write it again.
    dirty: bool,
}

impl DeliveryMarks {
    /// The marks of a queue restored with its recovered mark.
    pub(crate) fn restored(mark: Option<&Mark>) -> Self {
        match mark {
            Some(m) => DeliveryMarks {
                upto: Some(m.upto),
                before: m.before,
                written: Some((m.upto, m.before)),
                ..Self::default()
            },
            None => Self::default(),
        }
    }

    /// Whether a mark was ever written or recovered (a deleted queue forgets it).
    pub(crate) fn any(&self) -> bool {
        self.written.is_some()
    }

    /// A recovered member (store qid `qid`, message `msg`): `delivered` when it comes back
    /// redelivered. One at or below the mark that was not delivered is an exception.
    pub(crate) fn recovered(&mut self, qid: u64, msg: u64, delivered: bool) {
        self.before = self.before.max(msg.saturating_add(1));
        if !delivered && self.upto.is_some_and(|u| qid <= u) {
            self.except.insert(qid);
        }
    }

    /// A stored message (store qid `qid`, message `msg`) entered the queue.
    pub(crate) fn arrived(&mut self, qid: u64, msg: u64) {
        self.before = self.before.max(msg.saturating_add(1));
        if self.upto.is_some_and(|u| qid <= u) {
            self.except.insert(qid);
            if self.written.is_some_and(|(u, b)| qid <= u && msg < b) {
                self.dirty = true;
            }
        }
    }

    /// A stored message left the queue.
    pub(crate) fn left(&mut self, qid: u64) {
        if !self.except.is_empty() {
            self.except.remove(&qid);
        }
    }

    /// Takes the first deliveries (`count == 1`) of `ids` (store qids) that the mark covers
    /// once advanced, leaving in `ids` what must still be written one by one (failed
    /// deliveries, exceptions delivered, any delivery out of id order); `fifo`: the queue
    /// delivers in id order. Returns the mark to write, if it changed.
    pub(crate) fn take(&mut self, ids: &mut Vec<(u64, u32)>, fifo: bool) -> Option<Mark> {
        let mut upto = self.upto;
        let except = &mut self.except;
        ids.retain(|&(q, count)| {
            if count != 1 {
                return true;
            }
            if !except.is_empty() && except.remove(&q) {
                return true;
            }
            if fifo && upto.is_none_or(|u| q > u) {
                upto = Some(q);
                return false;
            }
            true
        });
        let u = upto?;
        if upto == self.upto && !self.dirty {
            return None;
        }
        self.upto = upto;
        self.dirty = false;
        self.written = Some((u, self.before));
        Some(Mark {
            upto: u,
            before: self.before,
            except: self.except.range(..=u).copied().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_form_round_trips_and_foreign_forms_are_ignored() {
        let m = Mark {
            upto: 77,
            before: 1 << 40,
            except: vec![3, 70],
        };
        assert_eq!(Mark::decode(&m.encode()), Some(m.clone()));
        let mut bad = m.encode();
        bad[0] = 9;
        assert_eq!(Mark::decode(&bad), None);
        assert_eq!(Mark::decode(&m.encode()[..20]), None);
        assert!(m.covers(77, 5) && !m.covers(78, 5) && !m.covers(70, 5));
        assert!(!m.covers(10, 1 << 40));
    }

    #[test]
    fn in_order_first_deliveries_advance_the_mark_and_write_nothing_each() {
        let mut d = DeliveryMarks::default();
        for q in 1..=5 {
            d.arrived(q, 100 + q);
        }
        let mut ids = vec![(1, 1), (2, 1), (3, 1)];
        let m = d.take(&mut ids, true);
        assert!(ids.is_empty());
        assert_eq!(
            m,
            Some(Mark {
                upto: 3,
                before: 106,
                except: vec![]
            })
        );
        // A failed delivery is still written one by one; nothing new: no mark.
        let mut ids = vec![(2, 2)];
        assert_eq!(d.take(&mut ids, true), None);
        assert_eq!(ids, vec![(2, 2)]);
    }

    #[test]
    fn a_late_arrival_below_the_mark_is_an_exception_until_delivered() {
        let mut d = DeliveryMarks::default();
        d.arrived(2, 11);
        let mut ids = vec![(2, 1)];
        assert!(d.take(&mut ids, true).is_some());
        // Id 1 was allocated first but its record (10) is older than the mark's bound: the
        // mark covers it wrongly until rewritten with the exception.
        d.arrived(1, 10);
        let m = d.take(&mut Vec::new(), true).expect("rewritten");
        assert_eq!(m.except, vec![1]);
        assert!(!m.covers(1, 10) && m.covers(2, 11));
        // Its first delivery is written alone; the exception stays in the mark until a
        // rewrite, which does not matter (the member has its own count).
        let mut ids = vec![(1, 1), (3, 1)];
        d.arrived(3, 12);
        let m = d.take(&mut ids, true).expect("advanced");
        assert_eq!(ids, vec![(1, 1)]);
        assert_eq!(m.except, Vec::<u64>::new());
        // Out of order (not FIFO): nothing advances.
        d.arrived(4, 13);
        let mut ids = vec![(4, 1)];
        assert_eq!(d.take(&mut ids, false), None);
        assert_eq!(ids, vec![(4, 1)]);
    }

    #[test]
    fn recovered_members_below_the_mark_never_delivered_are_exceptions() {
        let mark = Mark {
            upto: 5,
            before: 50,
            except: vec![4],
        };
        let mut d = DeliveryMarks::restored(Some(&mark));
        for (q, msg) in [(3, 30), (4, 40), (5, 60), (6, 61)] {
            d.recovered(q, msg, mark.covers(q, msg));
        }
        d.arrived(7, 70);
        let mut ids = vec![(4, 1), (6, 1), (7, 1)];
        let m = d.take(&mut ids, true).expect("advanced");
        // 4 was an exception: written alone. 5 (stored after the old bound) stays one.
        assert_eq!(ids, vec![(4, 1)]);
        assert_eq!((m.upto, m.before, m.except), (7, 71, vec![5]));
    }
}
