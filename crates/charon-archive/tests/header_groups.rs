//! Migration 24 (branch `q9o`, docs/archive.md "Twenty-sixth round"): the header index's rows
//! hold the record's `created_at` too, `/groups` by `status`, `queue`, `original_queue` with one
//! header term (and terms of those columns) is counted from the index range alone, its groups'
//! sample being the message of the group's record with the greatest id (branch `q9p`; the other
//! plans' samples are one message of the group's records). On both backends: an archive at version 23 (its header index
//! filled as version 23's indexer did) is upgraded, and then, right after the upgrade, once the
//! indexer caught up, after a burst above the watermark, after skips, header edits, deletes and
//! users' UPDATEs of the key columns and of `created_at`, and caught up again: every header
//! row's columns equal its record's, the plan is offered for every such request, and the answer
//! of `ops::groups` — groups, counts, oldest, newest, order — equals one computed from plain
//! SQL over the records and each sample is the greatest-id record's message (header plan) or a
//! message of the group (NULL only if the group has none), for the header plan and the others (summary, the
//! summary per second or the group index's ranges, the error-text copy, the plain scan).

#[path = "support/copy_scenario.rs"]
mod copy_scenario;
#[path = "support/groups_reference.rs"]
mod groups_reference;
#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/plain_pages.rs"]
#[allow(dead_code)]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use std::ops::Range;

use charon_archive::filter::Filter;
use charon_archive::ops::{self, Edit, Selection};
use charon_archive::sql::Conn;
use charon_archive::{Archive, NewRecord, header_groups, header_index, schema, summary};
use groups_reference::{Samples, reference, same_groups};
use serde_json::json;

const T0: i64 = 1_700_000_000_000;

/// Records sharing milliseconds (three a ms), some without a message.
fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("hg:{i}"),
        queue: if i.is_multiple_of(10) { "alpha" } else { "dlq" }.into(),
        original_queue: (!i.is_multiple_of(7)).then(|| format!("q{}", i % 3)),
        headers: json!({"x-h": format!("v{}", i % 3), "x-n": i % 2}).to_string(),
        error_message: (!i.is_multiple_of(9)).then(|| format!("e{i}")),
        created_at: T0 + (i / 3) as i64 * 1000,
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

/// Groups of one record each (equal counts: the order's second key decides), values inserted
/// in descending order, one NULL.
fn insert_ties(c: &mut dyn Conn) {
    let recs: Vec<NewRecord> = (0..5)
        .map(|k| NewRecord {
            stable_key: format!("hg:tie:{k}"),
            original_queue: (k != 2).then(|| format!("t{}", 9 - k)),
            headers: json!({"x-t": "1"}).to_string(),
            ..rec(1000 + k)
        })
        .collect();
    ops::insert_batch(c, &recs).expect("insert ties");
}

/// The requests the header plan answers: `(by, filter)`.
fn header_requests() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    let mut out = Vec::new();
    out.push(("original_queue", vec![("header.x-t", "1")]));
    out.push(("queue,original_queue", vec![("header.x-t", "1")]));
    for h in [("header.x-h", "v0"), ("header.x-n", "1")] {
        for by in ["status", "queue", "original_queue", "status,original_queue"] {
            for k in [
                vec![],
                vec![("status", "PENDING")],
                vec![("queue", "dlq")],
                vec![("original_queue", "q1")],
            ] {
                let mut f = vec![h];
                f.extend(k);
                out.push((by, f));
            }
        }
    }
    out
}

/// Requests the other plans answer (the summary, its per-second table or the group index's
/// ranges, the error-text copy, the plain scan).
fn other_requests() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    vec![
        ("status", vec![]),
        ("queue,status", vec![("original_queue", "q1")]),
        ("status", vec![("since", "2023-11-14T22:13:40Z")]),
        (
            "queue",
            vec![("until", "2023-11-14T22:14:00Z"), ("status", "PENDING")],
        ),
        ("status", vec![("error", "e1")]),
        ("status", vec![("header.x-h", "v0"), ("reason", "rejected")]),
        ("reason", vec![("header.x-h", "v1")]),
        ("status", vec![("body", "bod")]),
    ]
}

/// Every header row's columns equal its record's.
fn rows_match(c: &mut dyn Conn, when: &str) {
    let r = c
        .query(
            "SELECT COUNT(*), COALESCE(SUM(CASE WHEN h.status IS NOT DISTINCT FROM d.status \
             AND h.queue IS NOT DISTINCT FROM d.queue \
             AND h.original_queue IS NOT DISTINCT FROM d.original_queue \
             AND h.created_at IS NOT DISTINCT FROM d.created_at THEN 0 ELSE 1 END), 0) \
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
    for (by, pairs) in header_requests() {
        let f = Filter::from_pairs(pairs.iter().copied()).expect("filter");
        let what = format!("by {by} {pairs:?} ({when})");
        let cols: Vec<String> = by.split(',').map(str::to_string).collect();
        let plan = header_groups::plan(c, &f, &cols).expect("plan");
        let plan = plan.unwrap_or_else(|| panic!("plan offered {what}"));
        let (sql, p) = plan.groups();
        let mut have: Vec<_> = c
            .query(&sql, &p)
            .expect("plan groups")
            .iter()
            .map(|r| {
                let n = cols.len();
                let v: Vec<_> = (0..n).map(|i| r[i].opt_text()).collect();
                (v, r[n].int(), r[n + 1].int(), r[n + 2].int())
            })
            .collect();
        have.sort();
        let want = reference(c, by, &f);
        let mut want_rows: Vec<_> = want
            .iter()
            .map(|g| {
                let v: Vec<_> = cols
                    .iter()
                    .map(|col| g.0[col].as_str().map(str::to_string))
                    .collect();
                (v, g.0["count"].as_i64().unwrap_or(-1))
            })
            .collect();
        want_rows.sort();
        let have_rows: Vec<_> = have.iter().map(|(v, n, _, _)| (v.clone(), *n)).collect();
        assert_eq!(have_rows, want_rows, "plan counts {what}");
        let groups = ops::groups(c, Some(by), &f).expect("groups");
        same_groups(&groups, &want, Samples::GreatestId, &what);
    }
    for (by, pairs) in other_requests() {
        let f = Filter::from_pairs(pairs.iter().copied()).expect("filter");
        let what = format!("by {by} {pairs:?} ({when})");
        let want = reference(c, by, &f);
        assert!(!want.is_empty(), "groups exist {what}");
        let groups = ops::groups(c, Some(by), &f).expect("groups");
        let cols: Vec<String> = by.split(',').map(str::to_string).collect();
        let samples = if summary::answers(&f) && summary::groups_by(&cols) {
            Samples::Summary
        } else {
            Samples::OfTheGroup
        };
        same_groups(&groups, &want, samples, &what);
    }
}

/// Skips, header edits, deletes, users' UPDATEs of the key columns and of `created_at` (ties
/// made and broken), a user's INSERT.
fn change(c: &mut dyn Conn) {
    let skip = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 4 = 1", &[]);
    ops::skip(c, &Selection::Ids(skip), "carol", "hg").expect("skip");
    for id in plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 31 = 2", &[]) {
        let e = Edit {
            headers: Some(json!({"x-h": "v0", "x-n": 1})),
            ..Edit::default()
        };
        ops::edit(c, id, "carol", &e).expect("edit");
    }
    let del = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 17 = 3", &[]);
    ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
    for sql in [
        "UPDATE dead_letters SET queue = 'alpha', original_queue = NULL WHERE id % 23 = 4",
        "UPDATE dead_letters SET status = 'SKIPPED', original_queue = 'q0' WHERE id % 13 = 5",
        // Newest of their groups, and tied with each other.
        "UPDATE dead_letters SET created_at = 1800000000000 WHERE id % 19 = 6",
        "UPDATE dead_letters SET created_at = created_at - 500000 WHERE id % 11 = 1",
    ] {
        c.exec(sql, &[]).expect("user update");
    }
    copy_scenario::user_insert(c, r#"{"x-h":"v0","x-n":1}"#);
}

/// An archive at version 23 with 400 records, the first 250 indexed as version 23's indexer
/// does (written here with SQL), a user's `created_at` UPDATE before the upgrade, opened by this
/// build.
fn upgraded(url: &str, mut old: Box<dyn Conn>) -> Archive {
    schema::migrate_to(old.as_mut(), 23).expect("v23");
    insert(old.as_mut(), 0..400);
    insert_ties(old.as_mut());
    let d = old.dialect();
    old.batch(&copy_scenario::search_fill_sql(d, 250))
        .expect("fill the search index");
    old.batch(&header_index::fill_sql_v9(d, "d.id <= 250"))
        .expect("fill the header index");
    old.batch(
        "UPDATE dead_letter_search_header SET \
         status = (SELECT status FROM dead_letters AS d WHERE d.id = dead_letter_search_header.id), \
         queue = (SELECT queue FROM dead_letters AS d WHERE d.id = dead_letter_search_header.id), \
         original_queue = (SELECT original_queue FROM dead_letters AS d WHERE d.id = dead_letter_search_header.id); \
         UPDATE dead_letter_search_state SET watermark = 250; \
         UPDATE dead_letters SET created_at = created_at + 7 WHERE id % 5 = 0",
    )
    .expect("v23 index");
    drop(old);
    let a = Archive::open(url).expect("open v24");
    a.with(|c| {
        copy_scenario::assert_applied(c, 24);
        let r = c
            .query(
                "SELECT COUNT(*), COUNT(h.created_at) FROM dead_letter_search_header AS h \
                 JOIN dead_letters AS d ON d.id = h.id WHERE h.id <= 250 AND h.created_at = d.created_at",
                &[],
            )
            .expect("copied");
        let all = c
            .query(
                "SELECT COUNT(*) FROM dead_letter_search_header WHERE id <= 250",
                &[],
            )
            .expect("rows")[0][0]
            .int();
        assert!(all > 0, "header rows");
        assert_eq!(r[0][0].int(), all, "the upgrade copied created_at");
        copy_scenario::assert_header_vacuumed(c);
    });
    a
}

const STEPS: copy_scenario::Steps<'static> = copy_scenario::Steps {
    check: &check,
    burst: &|c| insert(c, 400..700),
    change: &change,
};

#[test]
fn sqlite_header_groups_from_the_index_rows_sampled_by_greatest_id() {
    copy_scenario::on_sqlite(upgraded, &STEPS);
}

#[test]
fn postgres_header_groups_from_the_index_rows_sampled_by_greatest_id() {
    let Some(pg) = copy_scenario::on_postgres(upgraded, &STEPS) else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    a.with(|c| {
        let def = copy_scenario::header_pkey_def(c);
        assert!(
            def.contains(
                "INCLUDE (status, queue, original_queue, created_at, vhost, original_exchange, \
                 reason, error_fingerprint, content_type)"
            ),
            "{def}"
        );
    });
}
