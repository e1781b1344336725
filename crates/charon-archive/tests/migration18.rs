//! Migration 18 (docs/archive.md "Migration 18", branch `pg9w`): PostgreSQL's three `(X, status,
//! id)` indexes (queue, original_queue, error_fingerprint) hold only records that are no longer
//! `PENDING` (the archiver's COPY, whose records are all `PENDING`, adds no entry to them); a `status` filter other
//! than `PENDING` carries the index's predicate as a literal, so that the prepared (generic) plan
//! of a `queue` + `status` page may use it. SQLite: nothing. An archive at version 16 is upgraded
//! on both backends; every list of those columns' filters, with and without `status`, equals the plain SQL before and after skips and
//! a user's own UPDATE of statuses.

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

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("s:{i}"),
        queue: format!("dlq-{}", i % 3),
        original_queue: (!i.is_multiple_of(9)).then(|| format!("orders-{}", i % 4)),
        error_fingerprint: (!i.is_multiple_of(11)).then(|| format!("fp-{}", i % 5)),
        ..support::record(i)
    }
}

fn has_version(c: &mut dyn Conn, v: i64) -> bool {
    c.query(
        "SELECT COUNT(*) FROM archive_migrations WHERE version = ?",
        &[v.into()],
    )
    .expect("versions")[0][0]
        .int()
        == 1
}

/// Every `queue`, `original_queue` or `error_fingerprint` filter's list, alone and with a
/// `status`, equals the plain SQL.
fn check(c: &mut dyn Conn, when: &str) {
    let terms = [
        ("queue", "dlq-0"),
        ("queue", "dlq-2"),
        ("queue", "none"),
        ("original_queue", "orders-1"),
        ("original_queue", "none"),
        ("error_fingerprint", "fp-3"),
        ("error_fingerprint", "none"),
    ];
    for (k, v) in terms {
        for status in [
            None,
            Some("PENDING"),
            Some("SKIPPED"),
            Some("FAILED"),
            Some("REPLAYED"),
        ] {
            let mut pairs = vec![(k, v)];
            pairs.extend(status.map(|s| ("status", s)));
            let f = Filter::from_pairs(pairs.iter().copied()).expect("f");
            for sort in [None, Some("id"), Some("-created_at")] {
                plain_pages::assert_pages(c, &f, sort, &[1, 2], 25, &format!("{pairs:?} ({when})"));
            }
        }
    }
}

/// A version-16 archive with `N` records, opened by this build (migration 18), checked, changed
/// (skips, a user's UPDATE of statuses, a delete) and checked again.
fn upgraded(url: &str, mut old: Box<dyn Conn>) -> Archive {
    schema::migrate_to(old.as_mut(), 16).expect("v16");
    assert!(!has_version(old.as_mut(), 18));
    let recs: Vec<NewRecord> = (0..N).map(rec).collect();
    ops::insert_batch(old.as_mut(), &recs).expect("insert");
    let skip = plain_pages::ids(
        old.as_mut(),
        "SELECT id FROM dead_letters WHERE id % 5 = 1",
        &[],
    );
    ops::skip(old.as_mut(), &Selection::Ids(skip), "carol", "before").expect("skip");
    drop(old);
    let a = Archive::open(url).expect("open v18");
    a.with(|c| {
        assert!(has_version(c, 18), "migration 18 applied");
        check(c, "after the upgrade");
        let skip = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 4 = 2", &[]);
        ops::skip(c, &Selection::Ids(skip), "carol", "after").expect("skip");
        c.exec(
            "UPDATE dead_letters SET status = 'FAILED' WHERE id % 7 = 3",
            &[],
        )
        .expect("user update");
        c.exec(
            "UPDATE dead_letters SET status = 'PENDING' WHERE id % 10 = 1",
            &[],
        )
        .expect("back to pending");
        c.exec("DELETE FROM dead_letters WHERE id % 13 = 0", &[])
            .expect("delete");
        let more: Vec<NewRecord> = (N..N + 90).map(rec).collect();
        ops::insert_batch(c, &more).expect("insert after");
        check(c, "after changes");
    });
    a
}

#[test]
fn sqlite_upgrade_to_18_changes_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("archive.db");
    let old = charon_archive::sqlite::Sqlite::open(&path).expect("open");
    let a = upgraded(&format!("sqlite://{}", path.display()), Box::new(old));
    a.with(|c| {
        assert_eq!(c.dialect(), Dialect::Sqlite);
        let sql = c
            .query(
                "SELECT sql FROM sqlite_master WHERE name = 'dead_letters_queue'",
                &[],
            )
            .expect("index")[0][0]
            .text();
        assert_eq!(
            sql,
            "CREATE INDEX dead_letters_queue ON dead_letters (queue, status, id)"
        );
        // The literal is PostgreSQL's only.
        let f = Filter::from_pairs([("queue", "dlq-0"), ("status", "SKIPPED")]).expect("f");
        let (cond, _) = f.to_sql(Dialect::Sqlite).expect("cond");
        assert!(!cond.contains("PENDING"), "{cond}");
    });
}

/// The plan PostgreSQL keeps for the prepared page of `queue` + `status` (a generic plan, as the
/// archive's prepared statements get after five runs).
fn generic_plan(c: &mut dyn Conn, status: &str) -> String {
    let f = Filter::from_pairs([("queue", "dlq-0"), ("status", status)]).expect("f");
    let (cond, p) = f.to_sql(Dialect::Postgres).expect("cond");
    assert_eq!(p.len(), 2, "{cond}");
    let mut n = 0;
    let cond: String = cond
        .chars()
        .map(|ch| {
            if ch == '?' {
                n += 1;
                format!("${n}")
            } else {
                ch.to_string()
            }
        })
        .collect();
    c.batch("DEALLOCATE ALL").expect("deallocate");
    c.batch(&format!(
        "PREPARE page18 (text, text) AS SELECT id FROM dead_letters WHERE {cond} ORDER BY id DESC LIMIT 25"
    ))
    .expect("prepare");
    c.query(
        &format!("EXPLAIN EXECUTE page18 ('dlq-0', '{status}')"),
        &[],
    )
    .expect("plan")
    .iter()
    .map(|r| r[0].text())
    .collect::<Vec<_>>()
    .join("\n")
}

#[test]
fn postgres_queue_status_index_leaves_pending_out_and_serves_the_pages() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    let a = upgraded(&pg.url, Box::new(old));
    a.with(|c| {
        let def = |c: &mut dyn Conn, name: &str| {
            let rows = c
                .query(
                    "SELECT indexdef FROM pg_indexes WHERE indexname = ?",
                    &[name.into()],
                )
                .expect("index");
            rows.first().map(|r| r[0].text()).unwrap_or_default()
        };
        for (name, cols) in [
            ("dead_letters_queue", "queue"),
            ("dead_letters_orig_queue", "original_queue"),
            ("dead_letters_fingerprint", "error_fingerprint"),
        ] {
            let d = def(c, name);
            assert!(
                d.ends_with(&format!("({cols}, status, id) WHERE (status <> 'PENDING'::text)")),
                "index {name}: {d}"
            );
        }
        for (name, cols) in [
            ("dead_letters_queue_id", "queue"),
            ("dead_letters_orig_queue_id", "original_queue"),
            ("dead_letters_fingerprint_id", "error_fingerprint"),
        ] {
            let d = def(c, name);
            assert!(
                d.ends_with(&format!("({cols}, id) INCLUDE (status)")),
                "index {name}: {d}"
            );
        }
        // The index holds exactly the records that are not PENDING.
        c.batch("VACUUM ANALYZE dead_letters").expect("vacuum");
        c.batch("SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexscan = off")
            .expect("settings");
        let plan: String = c
            .query(
                "EXPLAIN SELECT COUNT(*) FROM dead_letters WHERE queue = 'dlq-1' AND status <> 'PENDING'",
                &[],
            )
            .expect("plan")
            .iter()
            .map(|r| r[0].text())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            plan.contains("Index Only Scan using dead_letters_queue on"),
            "{plan}"
        );
        c.batch("RESET enable_indexscan").expect("reset");
        let counted = c
            .query(
                "SELECT COUNT(*) FROM dead_letters WHERE queue = 'dlq-1' AND status <> 'PENDING'",
                &[],
            )
            .expect("count")[0][0]
            .int();
        c.batch("RESET enable_seqscan; RESET enable_bitmapscan")
            .expect("reset");
        let plain = c
            .query(
                "SELECT COUNT(*) FROM dead_letters WHERE queue || '' = 'dlq-1' AND status || '' <> 'PENDING'",
                &[],
            )
            .expect("count")[0][0]
            .int();
        assert_eq!(counted, plain);
        assert!(plain > 0);
        // A status other than PENDING carries the predicate, so the generic plan of the page
        // reads the partial index; PENDING does not (the index cannot serve it).
        c.batch(
            "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off; SET enable_bitmapscan = off",
        )
        .expect("settings");
        let skipped = generic_plan(c, "SKIPPED");
        assert!(
            skipped.contains("using dead_letters_queue on"),
            "SKIPPED: {skipped}"
        );
        let pending = generic_plan(c, "PENDING");
        assert!(
            !pending.contains("using dead_letters_queue on"),
            "PENDING: {pending}"
        );
        c.batch("DEALLOCATE ALL; RESET plan_cache_mode; RESET enable_seqscan; RESET enable_bitmapscan")
            .expect("reset");
    });
}
