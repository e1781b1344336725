//! Returning freed memory to the OS. mimalloc keeps freed pages for reuse and returns them after
//! `purge_delay`, and only when the owning thread comes back to the allocator. So:
//! - at start the delay is set to 1 s (mimalloc v3's default; v2's was 10 ms) ([`init`]). It was
//!   10 ms until stop 27: before the routine purges below existed, a fast publisher's paged-out
//!   bodies piled up as freed-but-resident memory that counted against the memory alarm. With the
//!   routine purges the paging test (`test_harden_paging.py`: a 400 MiB transient backlog under a
//!   200 MiB mark, no alarm) passes at 1 s, and 10 ms made every consume phase unmap and re-fault
//!   its buffers' pages: about a quarter of scenario f's broker CPU (docs/performance.md,
//!   "Persistent write path, part 13");
//! - the broker's memory monitor asks for purges (`charon_server::memory::request_purge`:
//!   periodically and after memory use dropped): each runtime worker answers on its next park
//!   with a normal collection of its own heap (mimalloc's heaps are per thread; a normal one
//!   frees its empty pages and skips full ones), and the purge thread ([`spawn_thread`]), off
//!   the runtime, then forces the purge of every freed page back to the OS (arenas are
//!   process-wide);
//! - near the mark (`request_forced_purge`) each worker forces the collection of its own heap
//!   (every page visited), as before. A forced collection on a worker takes tens of ms on a
//!   large heap and holds up the tasks queued on it: done routinely (every 5 s and all through
//!   a drain) it made the release of parked retries late (docs/retries.md).

use std::cell::Cell;

/// `mi_option_purge_delay` (index 15 in both the v2 and v3 headers of libmimalloc-sys 0.1.49,
/// whose Rust bindings do not name it); checked against the documented defaults before use.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// Documented defaults of `purge_delay`, ms: v2, v3.
const DEFAULT_PURGE_DELAYS: [std::os::raw::c_long; 2] = [10, 1000];
/// The delay used, ms (v3's default; the routine purges return memory sooner when it matters).
const PURGE_DELAY_MS: std::os::raw::c_long = 1000;

thread_local! {
    static SEEN: Cell<u64> = const { Cell::new(0) };
    static SEEN_FORCED: Cell<u64> = const { Cell::new(0) };
}

/// How often the purge thread looks for a request.
const PURGE_THREAD_POLL: std::time::Duration = std::time::Duration::from_millis(100);

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

/// Runtime hook: collects this thread's heap once per purge request (forced for a forced
/// request).
pub(crate) fn on_park() {
    let forced = charon_server::memory::forced_purge_generation();
    let requested = charon_server::memory::purge_generation();
    let force = SEEN_FORCED.with(|s| s.replace(forced)) != forced;
    if SEEN.with(|s| s.replace(requested)) != requested || force {
        collect(force);
    }
}

/// Starts the purge thread (server only): after each purge request, once the workers had a
/// moment to collect their heaps, it forces the purge of the freed pages, off the runtime.
pub(crate) fn spawn_thread() {
    let spawned = std::thread::Builder::new()
        .name("charon-purge".into())
        .spawn(|| {
            let mut seen = charon_server::memory::purge_generation();
            loop {
                std::thread::sleep(PURGE_THREAD_POLL);
                let requested = charon_server::memory::purge_generation();
                if requested != seen {
                    seen = requested;
                    // The workers collect on their next park: give them a poll interval.
                    std::thread::sleep(PURGE_THREAD_POLL);
                    collect(true);
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the allocator purge thread");
    }
}

/// Frees this thread's unused mimalloc pages (all of them when `force`, visiting pages still
/// in use too) and returns freed memory to the OS (all of it when `force`, process-wide).
#[allow(unsafe_code)]
fn collect(force: bool) {
    // SAFETY: `mi_collect` takes no pointers and may be called at any time from any thread.
    unsafe { libmimalloc_sys::mi_collect(force) }
}
