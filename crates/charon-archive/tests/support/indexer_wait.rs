//! The search indexer's progress, for tests that wait for it (with a generous bound).

use std::time::{Duration, Instant};

use charon_archive::Archive;

/// `(watermark, highest record id)`: the indexer has reached every record when the first is at
/// least the second.
pub(crate) fn watermark(a: &Archive) -> (i64, i64) {
    a.read(|c| Ok(watermark_of(c))).expect("watermark")
}

/// [`watermark`] on a connection the caller holds.
#[allow(dead_code)]
pub(crate) fn watermark_of(c: &mut dyn charon_archive::sql::Conn) -> (i64, i64) {
    let r = c
        .query(
            "SELECT (SELECT watermark FROM dead_letter_search_state), (SELECT COALESCE(MAX(id), 0) FROM dead_letters)",
            &[],
        )
        .expect("watermark");
    (r[0][0].int(), r[0][1].int())
}

/// Waits (up to two minutes) until the indexer has reached every record and re-indexed every
/// edited one (`dead_letter_search_scan` empty). Polled on the archive's read connection: a poll
/// through the writer (`Archive::with`) counts as the writer's activity, which keeps the indexer
/// in its busy mode (3 ms batches, 100 ms pauses) for the whole wait — on a loaded CI machine
/// PostgreSQL's indexer then needed over two minutes for 1,300 records (stop 45,
/// `postgres_vhost_limited_deep_pages_are_exact`).
pub(crate) fn wait_caught_up(a: &Archive) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (wm, top) = watermark(a);
        let edited = a
            .read(|c| Ok(c.query("SELECT COUNT(*) FROM dead_letter_search_scan", &[])?[0][0].int()))
            .expect("scan");
        if wm >= top && edited == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "indexer caught up ({wm} < {top}, {edited} edited)"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
