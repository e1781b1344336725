//! Migration 16 (docs/archive.md "Migration 16"): PostgreSQL's `dead_letters_status` rebuilt as
//! `(status, id) INCLUDE (created_at)`, so a time range with a `status` term is counted and
//! paged from the index alone; nothing on SQLite. An archive at version 13 is upgraded on both
//! backends; the lists of such filters equal the plain SQL (total, pages 1 and 2 in id order
//! both ways) before and after skips and a user's UPDATE of `created_at`.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use charon_archive::filter::Filter;
use charon_archive::ops::{self, Selection};
use charon_archive::schema;
use charon_archive::sql::{Conn, Dialect};
use charon_archive::{Archive, NewRecord};

const N: usize = 900;
const T0: i64 = 1_700_000_000_000;

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("s:{i}"),
        queue: format!("dlq-{}", i % 3),
        // Out of id order, with ties.
        created_at: T0 + ((i * 7919) % N / 2) as i64 * 10,
        ..support::record(i)
    }
}

fn version16(c: &mut dyn Conn) -> bool {
    c.query(
        "SELECT COUNT(*) FROM archive_migrations WHERE version = 16",
        &[],
    )
    .expect("versions")[0][0]
        .int()
        == 1
}

/// Every ranged `status` filter's list equals the plain SQL.
fn check(c: &mut dyn Conn, when: &str) {
    let t = |ms: i64| (T0 + ms).to_string();
    for range in [
        vec![("since", t(2000))],
        vec![("until", t(1500))],
        vec![("since", t(1000)), ("until", t(3000))],
        vec![("since", t(99_000))],
    ] {
        for status in ["PENDING", "SKIPPED"] {
            let mut pairs = range.clone();
            pairs.push(("status", status.to_string()));
            let f = Filter::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).expect("f");
            for sort in [None, Some("id")] {
                plain_pages::assert_pages(c, &f, sort, &[1, 2], 25, &format!("{pairs:?} ({when})"));
            }
        }
    }
}

/// A version-13 archive with `N` records, opened by this build (migration 16), checked, changed
/// (skips, a user's UPDATE of `created_at`) and checked again.
fn upgraded(url: &str, mut old: Box<dyn Conn>) -> Archive {
    schema::migrate_to(old.as_mut(), 13).expect("v13");
    assert!(!version16(old.as_mut()));
    let recs: Vec<NewRecord> = (0..N).map(rec).collect();
    ops::insert_batch(old.as_mut(), &recs).expect("insert");
    drop(old);
    let a = Archive::open(url).expect("open v16");
    a.with(|c| {
        assert!(version16(c), "migration 16 applied");
        check(c, "after the upgrade");
        let skip = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 4 = 1", &[]);
        ops::skip(c, &Selection::Ids(skip), "carol", "status time").expect("skip");
        c.exec(
            "UPDATE dead_letters SET created_at = created_at + 777 WHERE id % 11 = 3",
            &[],
        )
        .expect("user update");
        check(c, "after changes");
    });
    a
}

#[test]
fn sqlite_upgrade_to_16_keeps_the_status_index() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("archive.db");
    let old = charon_archive::sqlite::Sqlite::open(&path).expect("open");
    let a = upgraded(&format!("sqlite://{}", path.display()), Box::new(old));
    a.with(|c| {
        assert_eq!(c.dialect(), Dialect::Sqlite);
        let sql = c
            .query(
                "SELECT sql FROM sqlite_master WHERE name = 'dead_letters_status'",
                &[],
            )
            .expect("index")[0][0]
            .text();
        assert_eq!(
            sql,
            "CREATE INDEX dead_letters_status ON dead_letters (status, id)"
        );
    });
}

#[test]
fn postgres_status_index_holds_the_time_and_answers_ranges_alone() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    let a = upgraded(&pg.url, Box::new(old));
    a.with(|c| {
        let def = c
            .query(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'dead_letters_status'",
                &[],
            )
            .expect("index")[0][0]
            .text();
        assert!(
            def.ends_with("(status, id) INCLUDE (created_at)"),
            "index: {def}"
        );
        // With only index-only scans allowed, the count of a ranged status filter reads the
        // status index alone (version 13's `(status, id)` cannot answer it without the heap).
        c.batch("VACUUM ANALYZE dead_letters").expect("vacuum");
        c.batch("SET enable_seqscan = off; SET enable_indexscan = off; SET enable_bitmapscan = off")
            .expect("settings");
        let plan: Vec<String> = c
            .query(
                &format!(
                    "EXPLAIN SELECT COUNT(*) FROM dead_letters WHERE status = 'SKIPPED' AND created_at >= {}",
                    T0 + 2000
                ),
                &[],
            )
            .expect("plan")
            .iter()
            .map(|r| r[0].text())
            .collect();
        assert!(
            plan.iter()
                .any(|l| l.contains("Index Only Scan using dead_letters_status")),
            "plan: {plan:#?}"
        );
        c.batch("RESET enable_seqscan; RESET enable_indexscan; RESET enable_bitmapscan")
            .expect("reset");
    });
}
