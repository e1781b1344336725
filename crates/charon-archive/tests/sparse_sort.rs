//! Migration 11 (partial indexes over the records not at their insert value) upgrades an archive
//! an older Charon (schema version 10) left, on SQLite and on a real PostgreSQL, and pages sorted
//! by `replay_count`, `last_replayed_at`, `death_count` and `updated_at` (`sparse_sort`: the
//! partial index merged with the other records in id or created_at order) hold exactly the rows,
//! order and total of the plain `ORDER BY` — in both directions, on pages 1, 2 and a deep one,
//! alone and with filters (one served by an index, a time range, a text filter partly above the
//! search indexer's watermark), after replays, edits, skips and users' own UPDATEs.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod record;
#[path = "support/replay_step.rs"]
mod replay_step;

use charon_archive::filter::{Filter, order_by};
use charon_archive::ops::{self, Edit, Selection};
use charon_archive::sql::{Cell, Conn, Dialect};
use charon_archive::{Archive, NewRecord, schema};

const BASE: i64 = 1_700_000_000_000;

/// Record `i`: three queues, rejected or expired, an error text of seven kinds, `death_count`
/// mostly 1 (2 or 3 in one record of eleven), times out of id order with ties.
fn rec(i: usize, tag: &str) -> NewRecord {
    NewRecord {
        stable_key: format!("s11:{tag}:{i}"),
        queue: format!("dlq-{}", i % 3),
        reason: Some(if i % 4 == 1 { "expired" } else { "rejected" }.into()),
        error_message: Some(format!("failed {}", i % 7)),
        death_count: if i % 11 == 5 { 2 + (i % 2) as i64 } else { 1 },
        created_at: BASE + ((i * 7919) % 400 / 2) as i64 * 10,
        ..record::record(i)
    }
}

const SORTS: &[&str] = &[
    "replay_count",
    "-replay_count",
    "last_replayed_at",
    "-last_replayed_at",
    "death_count",
    "-death_count",
    "updated_at",
    "-updated_at",
];

fn filters() -> Vec<Vec<(&'static str, String)>> {
    let since = charon_archive::time::format_ms(BASE + 500);
    let until = charon_archive::time::format_ms(BASE + 1500);
    vec![
        vec![],
        vec![("reason", "rejected".into())],
        vec![("vhost", "/".into())],
        vec![("queue", "dlq-1".into()), ("status", "PENDING".into())],
        vec![("status", "SKIPPED".into())],
        vec![("since", since.clone()), ("until", until)],
        vec![("since", since), ("status", "REPLAYED".into())],
        vec![("error", "failed 3".into())],
        // An `error` term with a key term: the driving set lists the common part (stop 46).
        vec![("error", "failed".into()), ("queue", "dlq-2".into())],
        vec![("error", "failed 3".into()), ("reason", "expired".into())],
        vec![("queue", "nothing".into())],
    ]
}

/// Every sort × filter: total and pages 1, 2 and 9 of 25 against the plain sorted query.
fn check_pages(c: &mut dyn Conn, when: &str) {
    for pairs in filters() {
        let f = Filter::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).expect("filter");
        for sort in SORTS {
            let what = format!("{pairs:?} sort={sort} ({when})");
            plain_pages::assert_pages(c, &f, Some(sort), &[1, 2, 9], 25, &what);
        }
    }
}

/// What replays, edits, skips and users do to the sparse columns.
fn change(c: &mut dyn Conn, round: usize) {
    // A replay job over one queue's records: some replayed, some failed (replay_count only).
    let f = Filter::from_pairs([("queue", format!("dlq-{}", round % 3).as_str())]).expect("f");
    let finished = replay_step::replay_step(c, f, 40, 3);
    assert!(finished > 0);
    // Edits and a skip (updated_at only).
    let ids: Vec<i64> = c
        .query(
            &format!("SELECT id FROM dead_letters WHERE id % 13 = {}", round % 13),
            &[],
        )
        .expect("ids")
        .iter()
        .map(|r| r[0].int())
        .collect();
    for id in ids.iter().take(6) {
        let e = Edit {
            payload: Some(b"fixed".to_vec()),
            headers: None,
            note: Some("fix".into()),
        };
        ops::edit(c, *id, "alice", &e).expect("edit");
    }
    ops::skip(c, &Selection::Ids(ids[6..].to_vec()), "bob", "known").expect("skip");
    // Users' own SQL: values below the insert value, and back to it.
    c.exec(
        &format!(
            "UPDATE dead_letters SET death_count = 0, updated_at = created_at - 7 WHERE id % 17 = {}",
            round % 17
        ),
        &[],
    )
    .expect("user update");
    c.exec(
        &format!(
            "UPDATE dead_letters SET replay_count = 0, last_replayed_at = NULL, updated_at = created_at, death_count = 1 \
             WHERE id % 19 = {}",
            round % 19
        ),
        &[],
    )
    .expect("user reset");
}

fn count(c: &mut dyn Conn, sql: &str) -> i64 {
    c.query(sql, &[]).expect("count")[0][0].int()
}

fn upgrade(url: &str, mut old: Box<dyn Conn>) {
    schema::migrate_to(old.as_mut(), 10).expect("schema 10");
    let first: Vec<NewRecord> = (0..300).map(|i| rec(i, "a")).collect();
    ops::insert_batch(old.as_mut(), &first).expect("batch on schema 10");
    // Records a version-10 broker already replayed or a user changed.
    old.exec(
        "UPDATE dead_letters SET replay_count = 2, last_replayed_at = created_at + 99, updated_at = created_at + 99 \
         WHERE id % 10 = 3",
        &[],
    )
    .expect("old update");
    let snapshot = |c: &mut dyn Conn| -> Vec<Vec<Cell>> {
        c.query(
            "SELECT id, stable_key, death_count, replay_count, last_replayed_at, created_at, updated_at, status \
             FROM dead_letters ORDER BY id",
            &[],
        )
        .expect("snapshot")
    };
    let before = snapshot(old.as_mut());
    drop(old);

    let a = Archive::open(url).expect("open upgrades");
    a.with(|c| {
        assert_eq!(
            count(c, "SELECT MAX(version) FROM archive_migrations"),
            schema::latest()
        );
        assert!(schema::latest() >= 11);
        assert_eq!(snapshot(c), before, "records intact after migration 11");
        let indexes = match c.dialect() {
            Dialect::Sqlite => {
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name IN \
                 ('dead_letters_replayed', 'dead_letters_last_replayed', 'dead_letters_deaths', 'dead_letters_updated')"
            }
            Dialect::Postgres => {
                "SELECT COUNT(*) FROM pg_indexes WHERE indexname IN \
                 ('dead_letters_replayed', 'dead_letters_last_replayed', 'dead_letters_deaths', 'dead_letters_updated')"
            }
        };
        assert_eq!(count(c, indexes), 4);
        check_pages(c, "migration 11");
        // More records (some above the search indexer's watermark: it has not run since).
        let more: Vec<NewRecord> = (300..500).map(|i| rec(i, "b")).collect();
        assert_eq!(ops::insert_batch(c, &more).expect("batch"), 200);
        for round in 0..2 {
            change(c, round);
            check_pages(c, &format!("changes, round {round}"));
        }
        assert!(count(c, "SELECT COUNT(*) FROM dead_letters WHERE replay_count > 1") > 0);
        assert!(count(c, "SELECT COUNT(*) FROM dead_letters WHERE status = 'SKIPPED'") > 0);
        assert!(count(c, "SELECT COUNT(*) FROM dead_letters WHERE death_count = 0") > 0);
        assert!(count(c, "SELECT COUNT(*) FROM dead_letters WHERE updated_at < created_at") > 0);
    });
}

#[test]
fn sqlite_migration_11_sorted_pages_equal_the_plain_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    let old = charon_archive::sqlite::Sqlite::open(&path).expect("sqlite");
    upgrade(&path.to_string_lossy(), Box::new(old));
}

#[test]
fn postgres_migration_11_sorted_pages_equal_the_plain_order() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    upgrade(&pg.url, Box::new(old));
}

/// The sparse sorts read the partial indexes (SQLite: `INDEXED BY`, the plan names them).
#[test]
fn sqlite_sparse_sorts_read_the_partial_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    let a = Archive::open(&path.to_string_lossy()).expect("open");
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..50).map(|i| rec(i, "p")).collect();
        ops::insert_batch(c, &recs).expect("batch");
        let f = Filter::from_pairs([("reason", "rejected")]).expect("f");
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        for (sort, index) in [
            ("-replay_count", "dead_letters_replayed"),
            ("last_replayed_at", "dead_letters_last_replayed"),
            ("-death_count", "dead_letters_deaths"),
            ("-updated_at", "dead_letters_updated"),
        ] {
            let order = order_by(Some(sort)).expect("order");
            let (q, qp) =
                charon_archive::sparse_sort::ids_query(c, &cond, &p, &order, 40, false, 0, 25)
                    .expect("plan")
                    .expect("a sparse sort");
            let plan: Vec<String> = c
                .query(&format!("EXPLAIN QUERY PLAN {q}"), &qp)
                .expect("eqp")
                .iter()
                .map(|r| r.last().map(|d| d.text().to_string()).unwrap_or_default())
                .collect();
            assert!(plan.iter().any(|d| d.contains(index)), "{sort}: {plan:?}");
        }
        let order = order_by(Some("-created_at")).expect("order");
        assert!(
            charon_archive::sparse_sort::ids_query(c, &cond, &p, &order, 40, false, 0, 25)
                .expect("plan")
                .is_none()
        );
    });
}
