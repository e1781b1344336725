//! Issue 10: a parked message costs at most 64 bytes more than a queued one. Measured as live
//! heap bytes through a counting global allocator (this test binary's own, like the broker's
//! `alloc_count.rs`): a queue of retry messages as `charon bench --retry-memory` makes them
//! (16-byte bodies, no properties), first all ready, then all parked by a consumer rejecting
//! them 1,000 at a time. Deterministic (no timing); the only test in this binary, so nothing
//! else allocates while it measures.

// The counting allocator forwards to the system's (as `src/alloc_count.rs` does to mimalloc).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use bytes::Bytes;
use charon_core::retry::Retrier;
use charon_core::{ConsumerSpec, Message, QueueArgs, QueueState};
use charon_protocol::{AMQPValue, FieldArray, FieldTable, RawProperties, ShortString};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's contract is System's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// A power of two: the ready ring's capacity is exactly one slot per message.
const N: u64 = 1 << 17;

#[test]
fn a_parked_message_costs_at_most_64_bytes_more_than_a_queued_one() {
    let mut t = FieldTable::default();
    t.insert(
        ShortString::from("x-retry-limit"),
        AMQPValue::LongLongInt(1),
    );
    t.insert(
        ShortString::from("x-retry-delays"),
        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongLongInt(600_000)])),
    );
    let args = QueueArgs::parse(&t, "q", "/").expect("retry arguments");
    let settings = args.retry.clone();
    assert!(settings.is_some());
    let mut q = QueueState::new(Arc::from("q"), args);
    q.add_consumer(
        1,
        ConsumerSpec {
            no_ack: false,
            prefetch: 1000,
            exclusive: false,
        },
    )
    .expect("consumer");
    let mut r = Retrier::default();
    let props = RawProperties::empty();
    let empty = live();
    for i in 0..N {
        let body = Bytes::copy_from_slice(&i.to_le_bytes().repeat(2));
        let m = Message::new("", "q", props.clone(), body);
        q.publish(Arc::new(m), 0);
    }
    let queued = live() - empty;
    assert_eq!(u64::from(q.message_count()), N);
    let mut out = Vec::new();
    let mut ids = Vec::new();
    let mut parked = 0u64;
    loop {
        out.clear();
        q.next_deliveries(0, &mut |_| true, &mut out);
        if out.is_empty() {
            break;
        }
        ids.clear();
        ids.extend(out.iter().map(|d| d.id));
        out.clear();
        parked += r
            .failed(&mut q, settings.as_ref(), &ids, false, 1, &mut || 0)
            .len() as u64;
    }
    drop(out);
    drop(ids);
    assert_eq!(parked, N);
    assert_eq!(r.stats().parked, N);
    assert_eq!(q.message_count(), 0);
    let parked_bytes = live() - empty;
    let queued_per = queued as f64 / N as f64;
    let parked_per = parked_bytes as f64 / N as f64;
    let extra = parked_per - queued_per;
    eprintln!(
        "live heap per message: queued {queued_per:.1} B, parked {parked_per:.1} B, extra {extra:.1} B"
    );
    assert!(
        extra <= 48.0,
        "a parked message costs {extra:.1} bytes more than a queued one \
         (queued {queued_per:.1} B, parked {parked_per:.1} B): the issue allows 64, we keep 48"
    );
    // Nothing was lost: every message comes back when due.
    let mut n = 0u64;
    let released = r.release_due(&mut q, 600_001, &mut || {
        n += 1;
        N + n
    });
    assert_eq!(released.len() as u64, N);
    assert_eq!(u64::from(q.message_count()), N);
}
