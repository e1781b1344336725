//! Returning freed memory to the OS. mimalloc keeps freed pages for reuse and returns them after
//! `purge_delay`, and only when the owning thread comes back to the allocator; the mimalloc v3
//! built here waits 1 s (v2: 10 ms), long enough for a fast publisher's paged-out bodies to pile
//! up as freed-but-resident memory that counts against the memory alarm. So:
//! - at start the delay is set back to v2's 10 ms ([`init`]);
//! - the broker's memory monitor asks for purges (`charon_server::memory::request_purge`:
//!   periodically, after memory use dropped, and near the mark) and each runtime worker answers
//!   on its next park by collecting its own heap (mimalloc's heaps are per thread).

use std::cell::Cell;

/// `mi_option_purge_delay` (index 15 in both the v2 and v3 headers of libmimalloc-sys 0.1.49,
/// whose Rust bindings do not name it); checked against the documented defaults before use.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// Documented defaults of `purge_delay`, ms: v2, v3.
const DEFAULT_PURGE_DELAYS: [std::os::raw::c_long; 2] = [10, 1000];
/// The delay used, ms (v2's default).
const PURGE_DELAY_MS: std::os::raw::c_long = 10;

thread_local! {
    static SEEN: Cell<u64> = const { Cell::new(0) };
}

/// Sets the purge delay (call once, at start). Leaves the option alone, with a warning, if it
/// does not hold one of the documented defaults (another mimalloc, or `MIMALLOC_PURGE_DELAY`
/// set by the operator).
#[allow(unsafe_code)]
pub(crate) fn init() {
    // SAFETY: reading and setting an option by index; no pointers; options may change any time.
    unsafe {
        let current = libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY);
        if DEFAULT_PURGE_DELAYS.contains(&current) {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
        } else {
            tracing::info!(current, "mimalloc purge_delay left as set");
        }
    }
}

/// Runtime hook: purges this thread's heap once per purge request.
pub(crate) fn on_park() {
    let requested = charon_server::memory::purge_generation();
    if SEEN.with(|s| s.replace(requested)) != requested {
        collect();
    }
}

/// Frees this thread's unused mimalloc pages and segments back to the OS.
#[allow(unsafe_code)]
fn collect() {
    // SAFETY: `mi_collect` takes no pointers and may be called at any time from any thread;
    // with `force` it frees this thread's empty pages and returns abandoned segments.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
