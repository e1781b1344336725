//! Migration 15 (`pg_collation`, twentieth round): on PostgreSQL the identifier columns take
//! `COLLATE "C"` and every index over them is rebuilt with it; the API's sorts by those columns
//! then follow byte order, as SQLite's `BINARY` collation does. The PostgreSQL case upgrades a
//! database left at version 13 — in `en_US.UTF-8` when the machine has that locale (where the
//! database's own collation sorts `_under` after `alpha` and `Zeta` last), else in the cluster's
//! default — and checks the records intact, the catalogue, the sorts against SQLite's, and a batch
//! and the summary after the upgrade.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/summary_check.rs"]
mod summary_check;
#[path = "support/record.rs"]
mod support;

use charon_archive::filter::Filter;
use charon_archive::ops;
use charon_archive::sql::{Cell, Conn};
use charon_archive::{Archive, NewRecord, pg_collation, schema};

/// Names whose byte order differs from a linguistic one (case, punctuation, accents).
const NAMES: &[&str] = &[
    "alpha", "_under", "Zeta", "ab", "a-b", "Ab", "émile", "zz", "B",
];

fn rec(i: usize) -> NewRecord {
    let n = |k: usize| NAMES[(i + k) % NAMES.len()].to_string();
    NewRecord {
        stable_key: format!("c15:{i}"),
        queue: n(3),
        original_queue: Some(n(0)),
        reason: Some(n(1)),
        error_fingerprint: Some(n(2)),
        message_id: Some(format!("{}-{i}", n(4))),
        content_type: Some(n(5)),
        ..support::record(i)
    }
}

fn rows(c: &mut dyn Conn, sql: &str) -> Vec<Vec<Cell>> {
    c.query(sql, &[]).expect("query")
}

/// The records' `col` values in the order of the API's list sorted by `sort`.
fn listed(c: &mut dyn Conn, sort: &str) -> Vec<String> {
    let all = Filter::from_pairs(Vec::<(&str, &str)>::new()).expect("filter");
    let (recs, total) = ops::list(c, &all, Some(sort), 1, 1000).expect("list");
    assert_eq!(recs.len() as i64, total);
    recs.iter()
        .map(|r| match sort.trim_start_matches('-') {
            "queue" => r.queue.clone(),
            "original_queue" => r.original_queue.clone().unwrap_or_default(),
            s => panic!("sort {s}"),
        })
        .collect()
}

/// Byte order (Rust's `str` order), ascending or descending.
fn bytes_sorted(mut v: Vec<String>, desc: bool) -> Vec<String> {
    v.sort();
    if desc {
        v.reverse();
    }
    v
}

fn check_sorts(c: &mut dyn Conn, when: &str) {
    for sort in ["original_queue", "-original_queue", "queue", "-queue"] {
        let got = listed(c, sort);
        assert_eq!(
            got,
            bytes_sorted(got.clone(), sort.starts_with('-')),
            "{when}: sort={sort}"
        );
    }
}

fn sqlite_sorts() -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Archive::open(&dir.path().join("a.db").to_string_lossy()).expect("sqlite");
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..60).map(rec).collect();
        ops::insert_batch(c, &recs).expect("batch");
        check_sorts(c, "sqlite");
        ["original_queue", "-original_queue", "queue", "-queue"]
            .iter()
            .map(|s| listed(c, s))
            .collect()
    })
}

#[test]
fn sqlite_migration_15_is_recorded_and_sorts_by_bytes() {
    assert!(schema::latest() >= 15);
    sqlite_sorts();
}

#[test]
fn postgres_migration_15_collates_identifiers_in_byte_order() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let mut admin = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    // A database in en_US.UTF-8 where the machine has it (the collation most users' clusters have).
    let url = match admin.batch(
        "CREATE DATABASE m15 TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'en_US.UTF-8' LC_CTYPE 'en_US.UTF-8'",
    ) {
        Ok(()) => match pg.url.rsplit_once('/') {
            Some((server, _)) => format!("{server}/m15"),
            None => pg.url.clone(),
        },
        Err(e) => {
            eprintln!("no en_US.UTF-8 locale ({e}): the cluster's default collation");
            pg.url.clone()
        }
    };
    drop(admin);
    let mut old = charon_archive::postgres::Postgres::connect(&url).expect("postgres");
    schema::migrate_to(&mut old, 13).expect("schema 13");
    let recs: Vec<NewRecord> = (0..40).map(rec).collect();
    ops::insert_batch(&mut old, &recs).expect("batch on schema 13");
    let snapshot = |c: &mut dyn Conn| {
        rows(
            c,
            "SELECT id, vhost, queue, original_queue, reason, error_fingerprint, status, message_id, content_type \
             FROM dead_letters ORDER BY id",
        )
    };
    let before = snapshot(&mut old);
    assert_eq!(before.len(), 40);
    drop(old);

    let a = Archive::open(&url).expect("open upgrades");
    a.with(|c| {
        let version = rows(c, "SELECT MAX(version) FROM archive_migrations")[0][0].int();
        assert_eq!(version, schema::latest());
        assert_eq!(snapshot(c), before, "records intact after migration 15");
        // Every listed column is "C"; stable_key and the free texts keep the database's.
        for (table, cols) in pg_collation::COLUMNS {
            for col in *cols {
                let r = rows(
                    c,
                    &format!(
                        "SELECT COALESCE(collation_name, '') FROM information_schema.columns \
                         WHERE table_name = '{table}' AND column_name = '{col}'"
                    ),
                );
                assert_eq!(r[0][0].text(), "C", "{table}.{col}");
            }
        }
        let r = rows(
            c,
            "SELECT COALESCE(collation_name, '') FROM information_schema.columns \
             WHERE table_name = 'dead_letters' AND column_name IN ('stable_key', 'error_message')",
        );
        assert!(r.iter().all(|r| r[0].text() != "C"), "stable_key and error_message unchanged");
        // Every B-tree index over a changed column was rebuilt with "C" (no column of the
        // database's default collation, oid 100, left in them).
        let stale = rows(
            c,
            "SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid \
             JOIN pg_am am ON am.oid = x.relam WHERE am.amname = 'btree' \
             AND i.indrelid::regclass::text IN ('dead_letters', 'dead_letter_groups', 'dead_letter_search_header') \
             AND 100::oid = ANY (i.indcollation::oid[]) AND i.indexrelid::regclass::text <> 'dead_letters_stable_key_key'",
        );
        assert!(stale.is_empty(), "indexes still in the default collation: {stale:?}");
        let built = rows(
            c,
            "SELECT COUNT(*) FROM pg_index WHERE indrelid = 'dead_letters'::regclass \
             AND 950::oid = ANY (indcollation::oid[]) AND indisvalid",
        );
        assert!(built[0][0].int() >= 7, "dead_letters' identifier indexes in \"C\": {built:?}");
        summary_check::check_summary(c, "migration 15");
        check_sorts(c, "after migration 15");
        // A batch after the upgrade (20 of them redelivered) and the summary still exact.
        let more: Vec<NewRecord> = (20..60).map(rec).collect();
        assert_eq!(ops::insert_batch(c, &more).expect("batch"), 20);
        check_sorts(c, "a batch after migration 15");
        summary_check::check_summary(c, "a batch after migration 15");
        let pg: Vec<Vec<String>> = ["original_queue", "-original_queue", "queue", "-queue"]
            .iter()
            .map(|s| listed(c, s))
            .collect();
        assert_eq!(pg, sqlite_sorts(), "PostgreSQL sorts as SQLite");
    });
}
