//! The search indexer does not checkpoint the WAL inside its transactions (it holds the archive
//! writer's mutex there): with SQLite's automatic checkpoint at 1000 pages, every indexer batch
//! copied the archiver's latest records into the database file while the archiver waited. The
//! checkpoint thread does it once the writer is quiet (`checkpoint::Policy`); here its quiet time
//! is an hour, so a database file that grows can only mean that somebody else checkpointed.
//! (Its own file: the quiet time is set through the environment before the archive opens.)

#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/record.rs"]
mod support;

use bytes::Bytes;
use charon_archive::{Archive, NewRecord, ops};

/// A record of ~4 KiB, most of it in the properties as received (which the indexer does not
/// index: the test's time goes to writing, not to trigrams).
fn rec(i: usize) -> NewRecord {
    NewRecord {
        amqp_properties: Bytes::from(vec![1u8; 4096]),
        ..support::record(i)
    }
}

#[test]
fn the_indexer_leaves_checkpoints_to_the_checkpoint_thread() {
    // SAFETY: set before any other thread of this test binary (one test) reads the environment.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("CHARON_ARCHIVE_CHECKPOINT_QUIET_MS", "3600000");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("archive.db");
    let a = Archive::open(&db.to_string_lossy()).expect("open");
    let before = std::fs::metadata(&db).expect("db file").len();
    // ~24 MiB of records: well over 1000 pages of 16 KiB in the WAL, under the thread's bound.
    for part in 0..6 {
        let recs: Vec<NewRecord> = (part * 1000..(part + 1) * 1000).map(rec).collect();
        a.with(|c| ops::insert_batch(c, &recs)).expect("insert");
    }
    // The indexer indexes every record (each of its batches a commit of its own).
    indexer_wait::wait_caught_up(&a);
    let after = std::fs::metadata(&db).expect("db file").len();
    assert_eq!(
        after, before,
        "the database file grew while only the indexer and the (busy) writer committed"
    );
    let total = a
        .with(|c| c.query("SELECT count(*) FROM dead_letters", &[]))
        .expect("count");
    assert_eq!(total[0][0].int(), 6000);
}
