//! Migration 22 (branch `q9n`, docs/archive.md "Twenty-fifth round"): the header index's rows
//! hold the record's `status`, `queue` and `original_queue`, and a list of one header term with
//! terms of those columns is counted and paged from the index range alone. On both backends: an
//! archive at version 21 (its header index filled as version 21's indexer did) is upgraded, and
//! then, right after the upgrade, once the indexer caught up, after a burst above the watermark,
//! after skips (status UPDATEs), header edits, deletes and users' UPDATEs of the three columns
//! (to other values and to NULL), and caught up again: every header row's columns equal its
//! record's, the plan is offered for every such filter, and its `total` and pages (newest
//! first, by id, by `created_at`) equal the plain SQL's. On PostgreSQL also the race the fill's
//! `FOR SHARE` closes: a user's status UPDATE in progress while the indexer fills the record.

#[path = "support/copy_scenario.rs"]
mod copy_scenario;
#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use std::ops::Range;
use std::time::Duration;

use charon_archive::filter::Filter;
use charon_archive::ops::{self, Edit, Selection};
use charon_archive::sql::Conn;
use charon_archive::{Archive, NewRecord, header_columns, header_index, schema};

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("hc:{i}"),
        queue: if i.is_multiple_of(10) { "alpha" } else { "dlq" }.into(),
        original_queue: (!i.is_multiple_of(7)).then(|| format!("q{}", i % 3)),
        headers: serde_json::json!({"x-h": format!("v{}", i % 3), "x-n": i % 2}).to_string(),
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

fn filters() -> Vec<Vec<(&'static str, &'static str)>> {
    let mut out = Vec::new();
    for h in [
        ("header.x-h", "v0"),
        ("header.x-h", "v2"),
        ("header.x-n", "1"),
    ] {
        for k in [
            vec![("status", "PENDING")],
            vec![("status", "SKIPPED")],
            vec![("queue", "dlq")],
            vec![("queue", "alpha")],
            vec![("original_queue", "q1")],
            vec![("original_queue", "none")],
            vec![("status", "PENDING"), ("original_queue", "q0")],
            vec![("status", "SKIPPED"), ("queue", "dlq")],
        ] {
            let mut f = vec![h];
            f.extend(k);
            out.push(f);
        }
    }
    out
}

/// Every header row's columns equal its record's.
fn rows_match(c: &mut dyn Conn, when: &str) {
    let r = c
        .query(
            "SELECT COUNT(*), COALESCE(SUM(CASE WHEN h.status IS NOT DISTINCT FROM d.status \
             AND h.queue IS NOT DISTINCT FROM d.queue \
             AND h.original_queue IS NOT DISTINCT FROM d.original_queue THEN 0 ELSE 1 END), 0) \
             FROM dead_letter_search_header AS h JOIN dead_letters AS d ON d.id = h.id",
            &[],
        )
        .expect("rows");
    assert!(r[0][0].int() > 0, "header rows ({when})");
    assert_eq!(
        r[0][1].int(),
        0,
        "header rows whose columns differ ({when})"
    );
}

fn check(c: &mut dyn Conn, when: &str) {
    rows_match(c, when);
    for pairs in filters() {
        let f = Filter::from_pairs(pairs.iter().copied()).expect("filter");
        let what = format!("{pairs:?} ({when})");
        let plan = header_columns::plan(c, &f).expect("plan");
        let plan = plan.unwrap_or_else(|| panic!("plan offered {what}"));
        // The plan's count alone equals the plain count.
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        let want = plain_pages::ids(c, &format!("SELECT id FROM dead_letters WHERE {cond}"), &p);
        let (sql, p) = plan.count();
        let have = c.query(&sql, &p).expect("count")[0][0].int();
        assert_eq!(have, want.len() as i64, "plan count {what}");
        for sort in [None, Some("id"), Some("created_at")] {
            plain_pages::assert_pages(c, &f, sort, &[1, 2, 6], 20, &what);
        }
    }
}

/// Skips (status UPDATEs through the API), header edits, deletes, users' UPDATEs of the three
/// columns, to other values and to NULL; a user's INSERT.
fn change(c: &mut dyn Conn) {
    let skip = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 4 = 1", &[]);
    ops::skip(c, &Selection::Ids(skip), "carol", "hc").expect("skip");
    for id in plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 31 = 2", &[]) {
        let e = Edit {
            headers: Some(serde_json::json!({"x-h": "v2", "x-n": 1})),
            ..Edit::default()
        };
        ops::edit(c, id, "carol", &e).expect("edit");
    }
    let del = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 17 = 3", &[]);
    ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
    for sql in [
        "UPDATE dead_letters SET queue = 'alpha', original_queue = NULL WHERE id % 23 = 4",
        "UPDATE dead_letters SET status = 'SKIPPED', original_queue = 'q0' WHERE id % 13 = 5",
        "UPDATE dead_letters SET status = 'PENDING' WHERE id % 11 = 1",
    ] {
        c.exec(sql, &[]).expect("user update");
    }
    copy_scenario::user_insert(c, r#"{"x-h":"v0","x-n":1}"#);
}

/// An archive at version 21 with 400 records, the first 250 indexed as version 21's indexer
/// does (written here with SQL), opened by this build.
fn upgraded(url: &str, mut old: Box<dyn Conn>) -> Archive {
    schema::migrate_to(old.as_mut(), 21).expect("v21");
    insert(old.as_mut(), 0..400);
    let d = old.dialect();
    old.batch(&copy_scenario::search_fill_sql(d, 250))
        .expect("fill the v21 search index");
    old.batch(&header_index::fill_sql_v9(d, "d.id <= 250"))
        .expect("fill the header index");
    old.batch("UPDATE dead_letter_search_state SET watermark = 250")
        .expect("watermark");
    // A status the upgrade must copy.
    old.batch("UPDATE dead_letters SET status = 'SKIPPED' WHERE id % 5 = 0")
        .expect("status");
    drop(old);
    let a = Archive::open(url).expect("open v22");
    a.with(|c| {
        copy_scenario::assert_applied(c, 22);
        let n = c
            .query(
                "SELECT COUNT(DISTINCT id) FROM dead_letter_search_header WHERE status = 'SKIPPED' AND id <= 250",
                &[],
            )
            .expect("copied")[0][0]
            .int();
        // (The indexer, started by the open, may have indexed records above 250 already.)
        assert_eq!(n, 50, "the upgrade copied the status of the indexed records");
    });
    a
}

const STEPS: copy_scenario::Steps<'static> = copy_scenario::Steps {
    check: &check,
    burst: &|c| insert(c, 400..700),
    change: &change,
};

#[test]
fn sqlite_header_lists_with_key_terms_from_the_index_rows() {
    copy_scenario::on_sqlite(upgraded, &STEPS);
}

#[test]
fn postgres_header_lists_with_key_terms_from_the_index_rows() {
    let Some(pg) = copy_scenario::on_postgres(upgraded, &STEPS) else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    a.with(|c| {
        let def = copy_scenario::header_pkey_def(c);
        // (Migration 24 adds `created_at` after them, migration 25 the other group-key columns.)
        assert!(
            def.contains(
                "INCLUDE (status, queue, original_queue, created_at, vhost, original_exchange, \
                 reason, error_fingerprint, content_type)"
            ),
            "{def}"
        );
        // Byte order, as migration 15 left `name` and `value` and as the record's columns are.
        let r = c
            .query(
                "SELECT column_name, COALESCE(collation_name, '') FROM information_schema.columns \
                 WHERE table_name = 'dead_letter_search_header' AND data_type = 'text'",
                &[],
            )
            .expect("collations");
        assert_eq!(
            r.len(),
            10,
            "text columns (name, value and eight of the record's)"
        );
        for row in &r {
            assert_eq!(row[1].text(), "C", "{}", row[0].text());
        }
    });
}

/// A user's status UPDATE of a record above the watermark, uncommitted while the indexer fills
/// that record: the fill waits for it (`FOR SHARE`) and writes the committed status. Without the
/// lock it wrote the old status, and the UPDATE's trigger had found no row to rewrite.
#[test]
fn postgres_a_users_update_racing_the_indexer_fill() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    indexer_wait::wait_caught_up(&a);
    let top = a.with(|c| {
        insert(c, 0..50);
        indexer_wait::watermark_of(c).1
    });
    let mut user = charon_archive::postgres::Postgres::connect(&pg.url).expect("user");
    user.batch(&format!(
        "BEGIN; UPDATE dead_letters SET status = 'SKIPPED' WHERE id = {top}"
    ))
    .expect("user update");
    // The indexer's batch runs meanwhile (the writer is idle); it reaches the record.
    std::thread::sleep(Duration::from_secs(3));
    user.batch("COMMIT").expect("commit");
    indexer_wait::wait_caught_up(&a);
    a.with(|c| {
        let r = c
            .query(
                &format!("SELECT status FROM dead_letter_search_header WHERE id = {top}"),
                &[],
            )
            .expect("rows");
        assert!(!r.is_empty(), "the record's header rows");
        for row in &r {
            assert_eq!(row[0].opt_text().as_deref(), Some("SKIPPED"), "row status");
        }
        rows_match(c, "after the race");
    });
}
