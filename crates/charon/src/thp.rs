//! Transparent huge pages off for the broker process (docs/archive.md "Seventh round").
//!
//! mimalloc (v3) advises `MADV_HUGEPAGE` on its arenas, so on a kernel whose THP mode is
//! `madvise` (or `always`) the first touch of a fresh 64 KiB allocator page faults in and zeroes
//! a whole 2 MiB page; the purge of freed pages (`purge.rs`, 10 ms) splits it again, and the next
//! burst zeroes another. Profiled while a queue held a burst of 50,000 dead letters: 19 % of the
//! broker's CPU was the kernel zeroing huge folios (`folio_zero_user`). With THP off a fault
//! zeroes the 4 KiB page it touches. `prctl(PR_SET_THP_DISABLE)` applies to the whole process
//! (every mapping, existing ones too) and only to it. `CHARON_ALLOW_THP=1` keeps THP.

/// Turns transparent huge pages off for this process unless `CHARON_ALLOW_THP=1`.
pub(crate) fn init() {
    if std::env::var_os("CHARON_ALLOW_THP").is_some_and(|v| v == "1") {
        tracing::info!("transparent huge pages left as the kernel sets them (CHARON_ALLOW_THP=1)");
        return;
    }
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::warn!(error = %e, "cannot turn transparent huge pages off (prctl PR_SET_THP_DISABLE)");
    }
}
