//! Returning freed memory to the OS. mimalloc keeps freed pages for reuse; after a queue with a
//! long backlog drains or is deleted that memory would stay resident. The broker's memory
//! monitor asks for a purge (`charon_server::memory::request_purge`); each runtime worker
//! answers when it next parks by collecting its own heap (mimalloc's heaps are per thread).

use std::cell::Cell;

thread_local! {
    static SEEN: Cell<u64> = const { Cell::new(0) };
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
