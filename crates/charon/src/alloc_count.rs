//! The global allocator: mimalloc, counting the bytes it has handed out and not yet been given
//! back (live heap bytes), for the memory alarm's `allocated` figure and the management API.
//!
//! mimalloc's own statistics cannot give that figure in a release build: per-allocation byte
//! counts are compiled out (`MI_STAT=0`), and its `committed` count does not go down when freed
//! pages are returned to the OS on Linux (they are purged with `MADV_DONTNEED` and stay counted),
//! so after a queue drains it reports the high-water mark while RSS is back down. Counting here
//! costs one add per allocation and free on a per-thread counter: each thread owns a slot
//! (single writer: a load and a store, no atomic read-modify-write); threads beyond [`SLOTS`]
//! share one atomic counter. A sum over all slots is the live figure (relaxed: a reading taken
//! while other threads allocate is off by what is in flight, which does not matter for a
//! 500 ms monitor).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

/// Threads with a counter of their own (the runtime's workers and the store's threads start
/// first; later ones share [`SHARED`]).
const SLOTS: usize = 128;

#[repr(align(64))]
struct Slot(AtomicIsize);

static COUNTS: [Slot; SLOTS] = [const { Slot(AtomicIsize::new(0)) }; SLOTS];
static SHARED: AtomicIsize = AtomicIsize::new(0);
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);
const UNASSIGNED: usize = usize::MAX;

thread_local! {
    // `const` and without a destructor: usable from the allocator at any point of a thread's
    // life, including while its other thread-locals are being destroyed.
    static SLOT: Cell<usize> = const { Cell::new(UNASSIGNED) };
}

fn add(delta: isize) {
    let slot = SLOT
        .try_with(|s| {
            let mut i = s.get();
            if i == UNASSIGNED {
                i = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
                s.set(i);
            }
            i
        })
        .unwrap_or(UNASSIGNED);
    match COUNTS.get(slot) {
        // Only this thread writes its slot.
        Some(c) => {
            c.0.store(c.0.load(Ordering::Relaxed) + delta, Ordering::Relaxed)
        }
        None => {
            SHARED.fetch_add(delta, Ordering::Relaxed);
        }
    }
}

/// Bytes allocated through the global allocator and not freed yet.
pub(crate) fn live_bytes() -> u64 {
    let sum: isize = COUNTS
        .iter()
        .map(|c| c.0.load(Ordering::Relaxed))
        .sum::<isize>()
        + SHARED.load(Ordering::Relaxed);
    u64::try_from(sum).unwrap_or(0)
}

/// mimalloc, counting live bytes.
pub(crate) struct CountingMiMalloc;

// SAFETY: every call is forwarded unchanged to mimalloc's `GlobalAlloc`, whose contract is the
// same; the counting touches no memory the caller sees.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingMiMalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) };
        add(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            add(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::live_bytes;

    #[test]
    fn live_bytes_follow_allocations() {
        // This test binary allocates through the counting allocator too (main.rs).
        let before = live_bytes();
        let block = std::hint::black_box(vec![1u8; 32 << 20]);
        let during = live_bytes();
        drop(block);
        let after = live_bytes();
        // Other test threads allocate meanwhile: allow them a few MiB.
        assert!(
            during >= before + (32 << 20) - (4 << 20),
            "{before} -> {during}"
        );
        assert!(after + (28 << 20) <= during, "{during} -> {after}");
    }
}
