//! PostgreSQL: a list of one header term and one group-key term (`header_keys`, docs/archive.md
//! "Twenty-fourth round") — the header's ids minus the key's other values — equals the plain
//! SQL's `total` and pages, for a key almost every record has, one few have, NULL key columns,
//! records above the indexer's watermark and edited ones, after skips, edits, deletes and users'
//! UPDATEs of the key columns; and the plan is chosen exactly when the summary shows at most
//! `MAX_OTHERS` records of other keys.

#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use charon_archive::filter::Filter;
use charon_archive::header_keys;
use charon_archive::ops::{self, Edit, Selection};
use charon_archive::sql::Conn;
use charon_archive::{Archive, NewRecord};

const N: usize = 1500;

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("hk:{i}"),
        // Most records in `dlq`; a few before it and after it in the column's order.
        queue: match i % 50 {
            0 => "alpha".into(),
            1 => "zulu".into(),
            _ => "dlq".into(),
        },
        // NULL key columns (the complement's `IS NULL` range).
        original_queue: (!i.is_multiple_of(40)).then(|| "q".into()),
        reason: (!i.is_multiple_of(7)).then(|| "rejected".into()),
        headers: serde_json::json!({"x-h": format!("v{}", i % 3), "x-n": i % 2}).to_string(),
        ..support::record(i)
    }
}

fn filters() -> Vec<Vec<(&'static str, &'static str)>> {
    let mut out = Vec::new();
    for h in [
        ("header.x-h", "v0"),
        ("header.x-h", "v2"),
        ("header.x-n", "1"),
    ] {
        for k in [
            ("queue", "dlq"),
            ("queue", "alpha"),
            ("queue", "zulu"),
            ("queue", "none"),
            ("original_queue", "q"),
            ("reason", "rejected"),
            ("status", "PENDING"),
            ("status", "SKIPPED"),
        ] {
            out.push(vec![h, k]);
        }
    }
    out
}

fn check(c: &mut dyn Conn, when: &str) {
    let mut chosen = 0;
    for pairs in filters() {
        let f = Filter::from_pairs(pairs.iter().copied()).expect("filter");
        let what = format!("{pairs:?} ({when})");
        // The plan alone equals the plain count, whenever it is offered.
        if let Some(plan) = header_keys::plan(c, &f).expect("plan") {
            chosen += 1;
            let (cond, p) = f.to_sql(c.dialect()).expect("cond");
            let want = plain_pages::ids(
                c,
                &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY id"),
                &p,
            );
            let (ids, p) = plan.ids();
            let have = plain_pages::ids(c, &format!("SELECT id FROM ({ids}) AS m ORDER BY id"), &p);
            assert_eq!(have, want, "plan ids {what}");
        }
        for sort in [None, Some("id"), Some("created_at")] {
            plain_pages::assert_pages(c, &f, sort, &[1, 2, 6], 40, &what);
        }
    }
    assert!(chosen > 0, "the plan was chosen ({when})");
}

/// Chosen when the other keys' records are at most `MAX_OTHERS` by the summary.
fn check_choice(c: &mut dyn Conn) {
    let f = Filter::from_pairs([("queue", "dlq"), ("header.x-h", "v0")]).expect("f");
    let others = c
        .query(
            "SELECT COALESCE(SUM(records), 0)::BIGINT FROM dead_letter_groups WHERE queue IS DISTINCT FROM 'dlq'",
            &[],
        )
        .expect("others")[0][0]
        .int();
    assert!(others > 0 && others <= header_keys::MAX_OTHERS);
    assert!(header_keys::plan(c, &f).expect("plan").is_some());
    let f = Filter::from_pairs([("queue", "dlq"), ("vhost", "/")]).expect("f");
    assert!(header_keys::plan(c, &f).expect("plan").is_none());
}

/// Skips, edits (headers and body), deletes, users' UPDATEs of key columns.
fn change(c: &mut dyn Conn) {
    let skip = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 9 = 1", &[]);
    ops::skip(c, &Selection::Ids(skip), "carol", "hk").expect("skip");
    for id in plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 31 = 2", &[]) {
        let e = Edit {
            headers: Some(serde_json::json!({"x-h": "v2", "x-n": 1})),
            ..Edit::default()
        };
        ops::edit(c, id, "carol", &e).expect("edit");
    }
    let del = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 17 = 3", &[]);
    ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
    c.exec(
        "UPDATE dead_letters SET queue = 'mmm', original_queue = NULL WHERE id % 23 = 4",
        &[],
    )
    .expect("update");
}

#[test]
fn postgres_header_and_key_lists_equal_the_plain_sql() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..N).map(rec).collect();
        ops::insert_batch(c, &recs).expect("insert");
        // Records above the watermark (the indexer runs only while `with` is not held): the
        // plan reads them from `dead_letters` too.
        let (wm, top) = indexer_wait::watermark_of(c);
        assert!(wm < top, "records above the watermark");
        check(c, "inserted");
    });
    // Quiet for the indexer (`wait_caught_up` polls, which keeps its batches short).
    std::thread::sleep(std::time::Duration::from_secs(2));
    indexer_wait::wait_caught_up(&a);
    a.with(|c| {
        check(c, "indexed");
        check_choice(c);
        change(c);
        check(c, "after changes");
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    indexer_wait::wait_caught_up(&a);
    a.with(|c| check(c, "after changes, indexed"));
}
