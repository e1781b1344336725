//! SQLite's WAL checkpoints run on their own thread (`checkpoint`): committed records reach the
//! database file although the writer's own automatic checkpoint would wait for a 64 MiB WAL.

use bytes::Bytes;
use charon_archive::checkpoint::WRITER_AUTOCHECKPOINT_PAGES;
use charon_archive::{Archive, NewRecord, ops};

#[path = "support/record.rs"]
mod support;

fn rec(i: usize) -> NewRecord {
    NewRecord {
        payload: Bytes::from(vec![b'x'; 4096]),
        ..support::record(i)
    }
}

#[test]
fn committed_records_are_checkpointed_off_the_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("archive.db");
    let a = Archive::open(&db.to_string_lossy()).expect("open");
    let before = std::fs::metadata(&db).expect("db file").len();
    // ~8 MiB of records in four commits: far under the writer's own checkpoint bound.
    const { assert!(8 << 20 < WRITER_AUTOCHECKPOINT_PAGES * 4096) };
    for part in 0..4 {
        let recs: Vec<NewRecord> = (part * 500..(part + 1) * 500).map(rec).collect();
        a.with(|c| ops::insert_batch(c, &recs)).expect("insert");
    }
    // The checkpoint thread copies them into the database file (generous bound: it runs when
    // the machine lets it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut len = before;
    while std::time::Instant::now() < deadline {
        len = std::fs::metadata(&db).expect("db file").len();
        if len > before + (6 << 20) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        len > before + (6 << 20),
        "database file {before} -> {len} bytes: nothing checkpointed"
    );
    let total = a
        .with(|c| c.query("SELECT count(*) FROM dead_letters", &[]))
        .expect("count");
    assert_eq!(total[0][0].int(), 2000);
}
