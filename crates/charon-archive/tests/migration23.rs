//! Migration 23 (twenty-fifth round, branch `pg9n`): PostgreSQL's search index forgets a DELETE
//! statement's records in one statement trigger instead of one row trigger per record. A
//! version-21 archive with indexed records is upgraded; then records are edited (waiting in
//! `dead_letter_search_scan`), and one DELETE removes indexed records, edited ones, and records
//! above the watermark together. After each step the index's counted bytes equal the bytes of
//! the indexed records recounted, no index or scan row is left for a deleted record, and the
//! one-row `dead_letter_search_state` is still a page or two (the row trigger wrote a version of
//! it per deleted record: 7 pages for this delete). On SQLite the migration is recorded and
//! changes nothing; the same counts hold.

#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/record.rs"]
mod support;

use charon_archive::ops::{self, Edit, Selection};
use charon_archive::sql::{Conn, Dialect};
use charon_archive::{Archive, NewRecord, schema, search_index};
use indexer_wait::{wait_caught_up, watermark_of};

fn rec(i: usize) -> NewRecord {
    NewRecord {
        error_message: Some(format!("Order {i} failed: cause {}", i % 7)),
        headers: format!("{{\"x-n\":{i},\"x-s\":\"v{}\"}}", i % 3),
        ..support::spread("m23", i)
    }
}

fn one(c: &mut dyn Conn, sql: &str) -> i64 {
    c.query(sql, &[]).expect("query")[0][0].int()
}

/// The index's bookkeeping equals the records: bytes counted, rows present, nothing stale.
fn check_index(c: &mut dyn Conn, when: &str) {
    let size = search_index::size_sql(c.dialect(), "");
    let indexed = "id <= (SELECT watermark FROM dead_letter_search_state) \
                   AND id NOT IN (SELECT id FROM dead_letter_search_scan)";
    let want = one(
        c,
        &format!(
            "SELECT CAST(COALESCE(SUM({size}), 0) AS BIGINT) FROM dead_letters WHERE {indexed}"
        ),
    );
    let counted = search_index::counted_bytes(c).expect("counted bytes");
    assert_eq!(counted, want, "indexed bytes ({when})");
    let stale_scan = one(
        c,
        "SELECT COUNT(*) FROM dead_letter_search_scan s WHERE NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.id = s.id)",
    );
    assert_eq!(stale_scan, 0, "scan rows of deleted records ({when})");
    if c.dialect() == Dialect::Postgres {
        let stale = one(
            c,
            "SELECT COUNT(*) FROM dead_letter_search s WHERE NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.id = s.id)",
        );
        assert_eq!(stale, 0, "index rows of deleted records ({when})");
        let rows = one(c, "SELECT COUNT(*) FROM dead_letter_search");
        let live = one(
            c,
            &format!("SELECT COUNT(*) FROM dead_letters WHERE {indexed}"),
        );
        assert_eq!(rows, live, "one index row per indexed record ({when})");
    }
}

fn scenario(url: &str, mut old: Box<dyn Conn>) {
    schema::migrate_to(old.as_mut(), 21).expect("schema 21");
    let recs: Vec<NewRecord> = (0..1000).map(rec).collect();
    ops::insert_batch(old.as_mut(), &recs).expect("records on schema 21");
    drop(old);

    let a = Archive::open(url).expect("open upgrades");
    wait_caught_up(&a);
    a.with(|c| {
        let v = one(
            c,
            "SELECT COUNT(*) FROM archive_migrations WHERE version = 23",
        );
        assert_eq!(v, 1, "version 23 applied");
        check_index(c, "upgraded and indexed");
        // Edited records wait in the scan table; their bytes left the count at the edit.
        for id in [5i64, 6, 7] {
            let e = Edit {
                payload: Some(format!("edited body {id}").into_bytes()),
                headers: None,
                note: None,
            };
            ops::edit(c, id, "carol", &e).expect("edit");
        }
        check_index(c, "edited");
        // Records above the watermark: the indexer cannot run while this closure holds the
        // writer, so they stay unindexed until the delete below.
        let more: Vec<NewRecord> = (1000..1050).map(rec).collect();
        ops::insert_batch(c, &more).expect("records above the watermark");
        let (wm, top) = watermark_of(c);
        assert!(wm < top, "records above the watermark ({wm} < {top})");
        // One DELETE: indexed records, two edited ones, and the new ones above the watermark.
        let mut ids: Vec<i64> = (10..810).collect();
        ids.extend([5, 6]);
        ids.extend(wm + 1..=top);
        let n = ops::delete(c, &Selection::Ids(ids.clone()), "carol", None).expect("delete");
        assert_eq!(n, ids.len() as u64, "deleted");
        check_index(c, "one delete of indexed, edited and unindexed records");
        if c.dialect() == Dialect::Postgres {
            let pages = one(
                c,
                "SELECT pg_relation_size('dead_letter_search_state') / 8192",
            );
            assert!(
                pages <= 2,
                "the state row's table grew to {pages} pages over one delete"
            );
        }
    });
    wait_caught_up(&a);
    a.with(|c| {
        check_index(c, "edits indexed again");
        ops::delete(c, &Selection::Ids((810..900).collect()), "carol", None).expect("delete");
        check_index(c, "a second delete");
    });
}

#[test]
fn postgres_migration_23_forgets_deleted_records_per_statement() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    scenario(&pg.url, Box::new(old));
}

#[test]
fn sqlite_migration_23_is_recorded_and_deletes_stay_exact() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("archive.db");
    let old = charon_archive::sqlite::Sqlite::open(&path).expect("open");
    scenario(&format!("sqlite://{}", path.display()), Box::new(old));
}
