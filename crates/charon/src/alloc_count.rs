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

/// The largest alignment every mimalloc block has: block sizes are multiples of the word size
/// and pages start word-aligned (`MI_INTPTR_SIZE`). A request aligned to no more than this
/// takes mimalloc's plain entry points (`mi_malloc`, `mi_zalloc`, `mi_realloc`): the
/// `GlobalAlloc` of the `mimalloc` crate always calls the aligned ones, which cost about twice
/// the instructions of a small allocation (docs/performance.md, part 23).
const PLAIN_ALIGN: usize = std::mem::size_of::<usize>();

/// mimalloc, counting live bytes.
pub(crate) struct CountingMiMalloc;

/// `layout` from mimalloc: its plain entry point when the alignment allows ([`PLAIN_ALIGN`]).
///
/// # Safety
/// `GlobalAlloc::alloc`'s contract.
#[allow(unsafe_code)]
unsafe fn mi_alloc(layout: Layout) -> *mut u8 {
    if layout.align() <= PLAIN_ALIGN {
        // SAFETY: any size is valid for mi_malloc; its blocks are PLAIN_ALIGN-aligned.
        unsafe { libmimalloc_sys::mi_malloc(layout.size()).cast() }
    } else {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
}

// SAFETY: every call is forwarded unchanged to mimalloc's `GlobalAlloc`, whose contract is the
// same; the counting touches no memory the caller sees.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingMiMalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { mi_alloc(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = if layout.align() <= PLAIN_ALIGN {
            // SAFETY: any size is valid for mi_zalloc; its blocks are PLAIN_ALIGN-aligned.
            unsafe { libmimalloc_sys::mi_zalloc(layout.size()).cast() }
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
        };
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
        let p = if layout.align() <= PLAIN_ALIGN {
            // SAFETY: `ptr` came from mimalloc (this allocator); mi_realloc keeps the block
            // PLAIN_ALIGN-aligned and copies min(old, new) bytes.
            unsafe { libmimalloc_sys::mi_realloc(ptr.cast(), new_size).cast() }
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
        };
        if !p.is_null() {
            add(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::{CountingMiMalloc, live_bytes};
    use proptest::prelude::*;
    use std::alloc::{GlobalAlloc, Layout};

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

    proptest! {
        /// Blocks of any size and alignment (plain and aligned entry points) against the model
        /// of what was written: each is aligned as asked, zeroed when asked, keeps its bytes
        /// through a realloc (up to the smaller size) and stays aligned. Fails on the mutation
        /// "`PLAIN_ALIGN` = 16" (mimalloc's 24- and 48-byte blocks are only 8-aligned).
        #[test]
        fn blocks_are_aligned_and_keep_their_bytes(
            reqs in proptest::collection::vec((1usize..600, 0u32..8, 1usize..600, any::<bool>()), 1..40)
        ) {
            let a = CountingMiMalloc;
            let mut live = Vec::new();
            for (i, (size, align_log, new_size, zeroed)) in reqs.into_iter().enumerate() {
                let align = 1usize << align_log;
                let layout = Layout::from_size_align(size, align).expect("a power of two");
                // SAFETY: a non-zero size; every block is freed below with its layout.
                let p = unsafe { if zeroed { a.alloc_zeroed(layout) } else { a.alloc(layout) } };
                prop_assert!(!p.is_null());
                prop_assert_eq!(p as usize % align, 0, "size {} align {}", size, align);
                // SAFETY: `p` is a block of `size` bytes.
                let block = unsafe { std::slice::from_raw_parts_mut(p, size) };
                if zeroed {
                    prop_assert!(block.iter().all(|b| *b == 0));
                }
                let model: Vec<u8> = (0..size).map(|j| (i * 31 + j) as u8).collect();
                block.copy_from_slice(&model);
                // SAFETY: `p` came from this allocator with `layout`; the new size is non-zero.
                let q = unsafe { a.realloc(p, layout, new_size) };
                prop_assert!(!q.is_null());
                prop_assert_eq!(q as usize % align, 0, "realloc to {} align {}", new_size, align);
                let keep = size.min(new_size);
                // SAFETY: `q` is a block of `new_size` >= `keep` bytes.
                let kept = unsafe { std::slice::from_raw_parts(q, keep) };
                prop_assert_eq!(kept, &model[..keep]);
                live.push((q, Layout::from_size_align(new_size, align).expect("a power of two")));
            }
            for (q, layout) in live {
                // SAFETY: allocated above with this layout.
                unsafe { a.dealloc(q, layout) };
            }
        }
    }
}
