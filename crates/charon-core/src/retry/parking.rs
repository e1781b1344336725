//! [`Retrier`]: the retry side of one queue. It owns the parked messages (ordered by due time,
//! then by their id in the queue) and, for `retry-order-key`, the keys that are retrying with
//! the messages held back behind them.
//!
//! Due times are microseconds (wall clock) in memory, so messages parked in the same
//! millisecond still have distinct due times and come back in the order they failed; the store
//! keeps milliseconds ([`ParkedAt::due`], rounded up: after a restart a message comes back at
//! most 1 ms later than it would have, never earlier).
//!
//! A parked message costs one 32-byte record in the [`DueIndex`] (due µs, id, the shared
//! message pointer as delivered, the attempt) — the size of a ready message's slot; it leaves
//! the queue's unacked table, so it costs no more than a queued message. Its `x-retry-count`
//! header is written when it comes back. An order key, when the queue has one, is kept beside
//! it by id ([`Retrier`]'s `keys`). Releasing pops the earliest record while it is due: O(1)
//! for records in a lane (one per distinct delay), O(log n) for the heap (jitter).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use super::due::{DueIndex, Parked};
use super::{RetrySettings, retry_count, with_retry_count};
use crate::message::Message;
use crate::queue::{MsgId, QueueState};
use charon_protocol::RawProperties;

/// A key with a message retrying, and the later messages of that key waiting behind it.
#[derive(Debug, Default)]
struct Hold {
    /// Other messages of this key that failed while it was retrying (they were in flight when
    /// it first failed), in order: each is parked when the one before it is settled, with its
    /// due time (no earlier than that).
    /// Due times in µs.
    waiting: VecDeque<(u64, MsgId, Arc<Message>, u32)>,
    /// Later messages of this key, by their id in the queue (their place when released).
    held: BTreeMap<MsgId, Arc<Message>>,
}

/// A message that was parked: what a store needs to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParkedAt {
    /// Its id in the queue while parked.
    pub id: MsgId,
    /// When it comes back (ms, wall clock; the µs due time rounded up).
    pub due: u64,
    /// Its retry attempt (the `x-retry-count` it comes back with).
    pub attempt: u32,
}

/// What a queue reports about its retries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryStats {
    /// Parked messages (including failed ones waiting for their key's turn).
    pub parked: u64,
    /// Messages held behind a retrying message of the same key.
    pub held: u64,
    /// The earliest due time of a parked message (ms, rounded up).
    pub next_due: Option<u64>,
}

/// The retry side of one queue.
#[derive(Debug, Default)]
pub struct Retrier {
    /// By (due µs, id).
    parked: DueIndex,
    /// The order keys of parked messages that have one, by id.
    keys: HashMap<MsgId, Arc<[u8]>>,
    holds: HashMap<Arc<[u8]>, Hold>,
    /// Retrying messages back in the queue (released, not yet settled), with their key.
    retrying: HashMap<MsgId, Arc<[u8]>>,
    held: u64,
    waiting: u64,
    /// The last `x-retry-count` edit, reused for the next alike message.
    counts: CountCache,
}

/// The properties of the last message given an `x-retry-count` on release, the count, and the
/// properties that edit made. A steady publisher's messages share their properties, so a mass
/// release edits the header table once, not once per message (the edit was a third of the
/// release's cost: docs/retries.md).
#[derive(Debug, Default)]
struct CountCache {
    last: Option<(RawProperties, u32, RawProperties)>,
}

impl CountCache {
    /// `message` with `x-retry-count` = `count` (as [`with_retry_count`]).
    fn apply(&mut self, message: &Message, count: u32) -> Message {
        if let Some((input, c, output)) = &self.last
            && *c == count
            && input.0 == message.properties.0
        {
            let mut m = message.clone();
            m.properties = output.clone();
            return m;
        }
        let m = with_retry_count(message, count);
        self.last = Some((message.properties.clone(), count, m.properties.clone()));
        m
    }
}

impl Retrier {
    /// Whether the owner must report every message that leaves the queue ([`Self::on_gone`]):
    /// with an order key, a retrying message's settlement releases its key.
    pub fn needs_gone(settings: Option<&RetrySettings>) -> bool {
        settings.is_some_and(|s| s.order_key.is_some())
    }

    /// Consumers gave up on unacked messages `ids`: rejected (`requeue=false`) or, when
    /// `requeue`, nacked with `requeue=true`. Without retry settings (or for a requeue without
    /// `retry-on-requeue`) this is the queue's usual reject/requeue. Otherwise each message
    /// below its limit is parked until its delay has passed; one at its limit is dead-lettered
    /// (reason `rejected`). Returns the parked ones.
    pub fn failed(
        &mut self,
        state: &mut QueueState,
        settings: Option<&RetrySettings>,
        ids: &[MsgId],
        requeue: bool,
        now_ms: u64,
        entropy: &mut dyn FnMut() -> u64,
    ) -> Vec<ParkedAt> {
        let now_us = now_ms.saturating_mul(1000);
        self.failed_us(state, settings, ids, requeue, now_us, entropy)
    }

    /// [`Self::failed`] at `now_us` (µs, wall clock): due times keep the µs.
    pub fn failed_us(
        &mut self,
        state: &mut QueueState,
        settings: Option<&RetrySettings>,
        ids: &[MsgId],
        requeue: bool,
        now_us: u64,
        entropy: &mut dyn FnMut() -> u64,
    ) -> Vec<ParkedAt> {
        let Some(s) = settings.filter(|s| !requeue || s.on_requeue) else {
            if requeue {
                state.requeue(ids);
            } else {
                state.reject(ids);
            }
            return Vec::new();
        };
        let mut parked = Vec::new();
        for &id in ids {
            let Some(m) = state.unacked_message(id) else {
                continue;
            };
            let done = retry_count(m);
            if done >= s.limit {
                // Dead-lettered as `rejected`; its key is released when it is reported gone.
                state.reject(&[id]);
                continue;
            }
            let Some(m) = state.take_unacked(id) else {
                continue;
            };
            let attempt = done + 1;
            let delay_us = s.delay(attempt, entropy()).saturating_mul(1000);
            let due = now_us.saturating_add(delay_us);
            let key = s.order_key.as_ref().and_then(|k| k.of(&m));
            let message = m;
            parked.push(ParkedAt {
                id,
                due: ceil_ms(due),
                attempt,
            });
            if let Some(k) = &key
                && !self.block(state, s, id, k)
            {
                if let Some(h) = self.holds.get_mut(k) {
                    h.waiting.push_back((due, id, message, attempt));
                    self.waiting += 1;
                }
                continue;
            }
            self.park(due, id, message, key, attempt);
        }
        parked
    }

    fn park(
        &mut self,
        due: u64,
        id: MsgId,
        message: Arc<Message>,
        key: Option<Arc<[u8]>>,
        attempt: u32,
    ) {
        if let Some(k) = key {
            self.keys.insert(id, k);
        }
        self.parked.insert(Parked {
            due,
            id,
            message,
            attempt,
        });
    }

    /// Message `id` with key `k` failed: true when it is the key's retrying message (now, or
    /// again), false when another message of the key is retrying (it must wait its turn).
    fn block(
        &mut self,
        state: &mut QueueState,
        s: &RetrySettings,
        id: MsgId,
        k: &Arc<[u8]>,
    ) -> bool {
        if self.retrying.remove(&id).is_some() {
            return true; // the key's retrying message failed again
        }
        if self.holds.contains_key(k) {
            return false;
        }
        // First failure of this key: later ready messages of the key wait behind it.
        let mut hold = Hold::default();
        if let Some(order) = s.order_key.as_ref() {
            let taken = state.take_ready_after(id, &mut |m| order.of(m).as_deref() == Some(&**k));
            self.held += taken.len() as u64;
            hold.held.extend(taken);
        }
        self.holds.insert(k.clone(), hold);
        true
    }

    /// A parked message recovered after a restart (its retry `attempt` from the store): parked
    /// until `due` (ms; at once if that passed), holding its key again.
    pub fn restore(
        &mut self,
        state: &mut QueueState,
        settings: Option<&RetrySettings>,
        due: u64,
        id: MsgId,
        message: Arc<Message>,
        attempt: u32,
    ) {
        let due = due.saturating_mul(1000);
        let s = settings.filter(|s| s.order_key.is_some());
        let key = s
            .and_then(|s| s.order_key.as_ref())
            .and_then(|k| k.of(&message));
        if let (Some(s), Some(k)) = (s, &key)
            && !self.block(state, s, id, k)
        {
            if let Some(h) = self.holds.get_mut(k) {
                h.waiting.push_back((due, id, message, attempt));
                self.waiting += 1;
            }
            return;
        }
        self.park(due, id, message, key, attempt);
    }

    /// Whether `message` (id `id` here) must wait behind a retrying message of its key; if so
    /// it is kept here (the caller does not enqueue it).
    pub fn holds(
        &mut self,
        settings: Option<&RetrySettings>,
        id: MsgId,
        message: &Arc<Message>,
    ) -> bool {
        if self.holds.is_empty() {
            return false;
        }
        let Some(order) = settings.and_then(|s| s.order_key.as_ref()) else {
            return false;
        };
        let Some(k) = order.of(message) else {
            return false;
        };
        let Some(hold) = self.holds.get_mut(&k) else {
            return false;
        };
        hold.held.insert(id, message.clone());
        self.held += 1;
        true
    }

    /// Puts parked messages whose time has come at the tail of the queue, each under a new id
    /// from `alloc`. Returns `(parked id, new id)` pairs.
    pub fn release_due(
        &mut self,
        state: &mut QueueState,
        now_ms: u64,
        alloc: &mut dyn FnMut() -> MsgId,
    ) -> Vec<(MsgId, MsgId)> {
        let mut moved = Vec::new();
        let now_us = now_ms.saturating_mul(1000);
        self.release_due_us(state, now_us, usize::MAX, alloc, &mut |_| {}, &mut moved);
        moved
    }

    /// [`Self::release_due`] at `now_us` (µs), releasing at most `max` messages (the rest stay
    /// due: the caller comes back at once) and telling `on_due` the due time (µs) of each
    /// released message (release lateness is measured by the caller). Appends `(parked id,
    /// new id)` pairs to `moved`; returns how many were released.
    pub fn release_due_us(
        &mut self,
        state: &mut QueueState,
        now_us: u64,
        max: usize,
        alloc: &mut dyn FnMut() -> MsgId,
        on_due: &mut dyn FnMut(u64),
        moved: &mut Vec<(MsgId, MsgId)>,
    ) -> usize {
        let now_ms = now_us / 1000;
        let mut n = 0;
        while n < max
            && let Some(p) = self.parked.pop_due(now_us)
        {
            n += 1;
            let old = p.id;
            on_due(p.due);
            let new = alloc();
            if !self.keys.is_empty()
                && let Some(k) = self.keys.remove(&old)
            {
                self.retrying.insert(new, k);
            }
            let message = Arc::new(self.counts.apply(&p.message, p.attempt));
            state.enqueue_at(new, message, now_ms);
            moved.push((old, new));
        }
        n
    }

    /// Messages `ids` left the queue (acked, dead-lettered, expired, dropped, ...): a retrying
    /// one releases its key, and when no message of the key is retrying any more the messages
    /// held behind it go back to their places in the queue, in order.
    pub fn on_gone(&mut self, state: &mut QueueState, ids: &[MsgId], now_ms: u64) {
        if self.retrying.is_empty() {
            return;
        }
        for id in ids {
            let Some(k) = self.retrying.remove(id) else {
                continue;
            };
            let Some(hold) = self.holds.get_mut(&k) else {
                continue;
            };
            if let Some((due, wid, message, attempt)) = hold.waiting.pop_front() {
                // The next failed message of the key takes its turn.
                self.waiting -= 1;
                let key = Some(k.clone());
                let due = due.max(now_ms.saturating_mul(1000));
                self.park(due, wid, message, key, attempt);
                continue;
            }
            if let Some(hold) = self.holds.remove(&k) {
                self.held -= hold.held.len() as u64;
                for (hid, m) in hold.held {
                    state.enqueue_at(hid, m, now_ms);
                }
            }
        }
    }

    /// The order key was turned off: every held message goes back to its place.
    pub fn release_holds(&mut self, state: &mut QueueState, now_ms: u64) {
        for (_, hold) in std::mem::take(&mut self.holds) {
            for (due, wid, message, attempt) in hold.waiting {
                self.park(due, wid, message, None, attempt);
            }
            for (hid, m) in hold.held {
                state.enqueue_at(hid, m, now_ms);
            }
        }
        self.keys = HashMap::new();
        self.retrying.clear();
        self.held = 0;
        self.waiting = 0;
    }

    /// Drops every parked and held message (purge); returns their ids in the queue.
    pub fn purge(&mut self) -> Vec<MsgId> {
        let mut ids: Vec<MsgId> = self.parked.drain().map(|p| p.id).collect();
        for (_, h) in self.holds.drain() {
            ids.extend(h.waiting.into_iter().map(|(_, id, _, _)| id));
            ids.extend(h.held.into_keys());
        }
        self.keys = HashMap::new();
        self.retrying.clear();
        self.held = 0;
        self.waiting = 0;
        ids
    }

    /// The earliest due time of a parked message (ms, rounded up).
    pub fn next_due(&self) -> Option<u64> {
        self.next_due_us().map(ceil_ms)
    }

    /// The earliest due time of a parked message (µs).
    pub fn next_due_us(&self) -> Option<u64> {
        self.parked.first_key().map(|(t, _)| t)
    }

    /// Counts for management.
    pub fn stats(&self) -> RetryStats {
        RetryStats {
            parked: self.parked.len() as u64 + self.waiting,
            held: self.held,
            next_due: self.next_due(),
        }
    }
}

/// µs to ms, rounded up (a due time never moves earlier).
fn ceil_ms(us: u64) -> u64 {
    us.div_ceil(1000)
}

#[cfg(test)]
mod count_cache_tests {
    use super::CountCache;
    use crate::message::Message;
    use crate::retry::{retry_count, with_retry_count};
    use charon_protocol::{AMQPValue, BasicProperties, FieldTable, RawProperties, ShortString};

    fn msg(header: i32) -> Message {
        let mut t = FieldTable::default();
        t.insert(ShortString::from("h"), AMQPValue::LongInt(header));
        let raw = RawProperties::encode(&BasicProperties::default().with_headers(t));
        Message::new("x", "k", raw, bytes::Bytes::from_static(b"body"))
    }

    #[test]
    fn a_cached_edit_is_the_edit_of_each_message() {
        let mut cache = CountCache::default();
        // Alike messages (equal properties, separate buffers), other counts, other properties.
        for (m, count) in [
            (msg(1), 1),
            (msg(1), 1),
            (msg(1), 2),
            (msg(2), 2),
            (msg(1), 2),
        ] {
            let got = cache.apply(&m, count);
            let want = with_retry_count(&m, count);
            assert_eq!(got.properties.decode().ok(), want.properties.decode().ok());
            assert_eq!(retry_count(&got), count);
            assert_eq!(got.body, m.body);
        }
    }
}
