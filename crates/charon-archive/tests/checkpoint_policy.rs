//! When the checkpoint thread copies the WAL into the database file (`checkpoint::Policy`): not
//! after every commit while the writer is busy, but once it goes quiet or the WAL is big.
//!
//! Each test writes a real SQLite database in WAL mode with the writer's WAL hook (as the
//! archive's writer connection has it), wakes a `Checkpointer` as the writer does after each
//! commit, and reads the database file's size: it grows only when a checkpoint copied pages in.
//! None depends on the machine's speed: the negative checks use a quiet time of an hour (so
//! nothing but the rule under test can make the thread checkpoint), the positive ones wait for
//! the file to grow with a generous bound.

use std::path::Path;
use std::time::{Duration, Instant};

use charon_archive::checkpoint::{Checkpointer, Policy, take_wal_pages, wal_hook};

/// A database like the archive's (WAL, 16 KiB pages, the writer's WAL hook) with one table.
fn open(path: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(path).expect("open");
    c.pragma_update(None, "page_size", 16384)
        .expect("page size");
    c.pragma_update(None, "journal_mode", "WAL").expect("wal");
    c.wal_hook(Some(wal_hook));
    c.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        .expect("table");
    let _ = take_wal_pages();
    c
}

/// Commits `n` transactions of 100 rows of 4 KiB, waking `ck` after each as the archive's writer
/// does; returns the WAL's pages after the last one.
fn commit_batches(c: &rusqlite::Connection, ck: &Checkpointer, n: usize) -> i64 {
    let body = vec![7u8; 4096];
    let mut pages = 0;
    for _ in 0..n {
        c.execute_batch("BEGIN").expect("begin");
        for _ in 0..100 {
            c.execute("INSERT INTO t (body) VALUES (?)", [&body])
                .expect("insert");
        }
        c.execute_batch("COMMIT").expect("commit");
        pages = take_wal_pages().expect("the WAL hook saw the commit");
        ck.kick(Some(pages));
    }
    pages
}

fn db_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Waits (generously) until the database file is over `bytes`; its last size.
fn wait_db_over(path: &Path, bytes: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut len = db_len(path);
    while len <= bytes && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        len = db_len(path);
    }
    len
}

#[test]
fn commits_of_a_busy_writer_are_not_checkpointed_one_by_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    let c = open(&path);
    let before = db_len(&path);
    let ck = Checkpointer::start_with(
        &path,
        Policy {
            quiet: Duration::from_secs(3600),
            busy_pages: 16384,
        },
    );
    assert!(ck.running());
    // ~4 MiB in ten commits, far under the bound: the thread waits for the writer to go quiet.
    let pages = commit_batches(&c, &ck, 10);
    assert!(pages > 200 && pages < 16384, "{pages} pages in the WAL");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        db_len(&path),
        before,
        "the database file grew: a commit of a busy writer was checkpointed"
    );
    let n: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .expect("count");
    assert_eq!(n, 1000);
}

#[test]
fn a_writer_that_goes_quiet_is_checkpointed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    let c = open(&path);
    let before = db_len(&path);
    let ck = Checkpointer::start_with(
        &path,
        Policy {
            quiet: Duration::from_millis(50),
            busy_pages: 16384,
        },
    );
    commit_batches(&c, &ck, 10);
    // No more commits: after the quiet time the WAL is copied in (~4 MiB).
    let len = wait_db_over(&path, before + (3 << 20));
    assert!(
        len > before + (3 << 20),
        "database file {before} -> {len} bytes: nothing checkpointed once the writer stopped"
    );
}

#[test]
fn a_big_wal_is_checkpointed_while_the_writer_is_busy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    let c = open(&path);
    let before = db_len(&path);
    // The writer never goes quiet (an hour), but the WAL passes the bound.
    let ck = Checkpointer::start_with(
        &path,
        Policy {
            quiet: Duration::from_secs(3600),
            busy_pages: 100,
        },
    );
    let pages = commit_batches(&c, &ck, 10);
    assert!(pages >= 100, "{pages} pages in the WAL");
    let len = wait_db_over(&path, before + (3 << 20));
    assert!(
        len > before + (3 << 20),
        "database file {before} -> {len} bytes: a WAL over the bound was not checkpointed"
    );
}

#[test]
fn after_a_big_wal_every_commit_is_checkpointed_until_the_writer_goes_quiet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    let c = open(&path);
    let ck = Checkpointer::start_with(
        &path,
        Policy {
            quiet: Duration::from_secs(3600),
            busy_pages: 100,
        },
    );
    // Over the bound: checkpointed (as in the test above).
    let before = db_len(&path);
    commit_batches(&c, &ck, 10);
    let first = wait_db_over(&path, before + (3 << 20));
    assert!(first > before + (3 << 20), "{before} -> {first} bytes");
    // Make sure every frame is in the database file (the thread's checkpoint may still run:
    // then ours is busy and is tried again), so that the next write starts the WAL over and its
    // commit leaves far fewer pages than the bound.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (busy, log, done): (i64, i64, i64) = c
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .expect("checkpoint");
        if busy == 0 && log == done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the WAL was never fully checkpointed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let len = db_len(&path);
    let pages = commit_batches(&c, &ck, 1);
    assert!(pages < 100, "{pages} pages: the WAL did not start over");
    // The burst goes on (no quiet time passed): this small commit is checkpointed too.
    let after = wait_db_over(&path, len + (300 << 10));
    assert!(
        after > len + (300 << 10),
        "database file {len} -> {after} bytes: a commit of a burst past the bound was not checkpointed"
    );
}
