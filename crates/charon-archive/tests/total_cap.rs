//! Issue 9's capped `total` (branch `t9o`, docs/archive.md "Twenty-sixth round"): a list of an
//! `error` or `body` filter counts at most the cap's matches (+1 per part) — a header filter
//! without one ten times that (lead, stop 42) — and answers that cap with `Relation::Gte` above it, the exact count with `Relation::Eq` at or under it; without a
//! cap (`exact_total=true`) every match is counted. On both backends, for the `error` filter's
//! paths (alone: the copy and the records above the watermark; with key or header terms: the
//! split over the copy) and the plain one (`body`, `error` with `body`), right after the records
//! are written (all above the watermark), once indexed, after a burst above the watermark, after
//! skips, deletes and a user's SQL, and indexed again: the total against plain SQL at caps under,
//! at and just below each filter's exact count, and every page (1, 2 and one past the cap; newest
//! first, by id, by `created_at`, by death count) equal to the plain sorted query's.

#[allow(dead_code)]
#[path = "support/copy_scenario.rs"]
mod copy_scenario;
#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[allow(dead_code)]
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use std::ops::Range;

use bytes::Bytes;
use charon_archive::filter::{Filter, order_by};
use charon_archive::ops;
use charon_archive::sql::Conn;
use charon_archive::total_cap::Relation;
use charon_archive::{Archive, NewRecord};

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("tc:{i}"),
        original_queue: Some(format!("q{}", i % 4)),
        headers: serde_json::json!({"x-h": format!("v{}", i % 2)}).to_string(),
        payload: Bytes::from(format!("body-{} of {i}", i % 5)),
        error_message: Some(format!("order {i} failed: cause {}", i % 3)),
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

const FILTERS: &[&[(&str, &str)]] = &[
    &[("error", "cause 1")],
    &[("error", "order 12")],
    &[("error", "no such text")],
    &[("error", "cause 2"), ("status", "PENDING")],
    &[("error", "cause 0"), ("original_queue", "q1")],
    &[("error", "cause 1"), ("header.x-h", "v0")],
    &[("body", "body")],
    &[("body", "body-3")],
    &[("body", "body-3"), ("status", "SKIPPED")],
    &[("error", "cause"), ("body", "body-1")],
    // A header term without a text term: capped at ten times the cap (lead, stop 42) — alone
    // (migration 9's range), with key terms (the header rows' columns), with another term (the
    // plain count).
    &[("header.x-h", "v0")],
    &[("header.x-h", "v1"), ("status", "PENDING")],
    &[("header.x-h", "v0"), ("message_id", "m8")],
    // No text or header term: never capped.
    &[("status", "PENDING")],
];

fn check(c: &mut dyn Conn, when: &str) {
    for pairs in FILTERS {
        let f = Filter::from_pairs(pairs.iter().copied()).expect("filter");
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        let n = plain_pages::ids(c, &format!("SELECT id FROM dead_letters WHERE {cond}"), &p).len();
        let text = pairs.iter().any(|(k, _)| *k == "error" || *k == "body");
        let header = pairs.iter().any(|(k, _)| k.starts_with("header."));
        // The cap the list counts with when asked for `cap`.
        let effective = |cap: u64| match (text, header) {
            (true, _) => Some(cap),
            (false, true) => Some(cap * charon_archive::total_cap::HEADER_FACTOR),
            _ => None,
        };
        let what = format!("{pairs:?} ({when}, {n} matches)");
        // Without a cap: exact.
        let (_, t) = ops::list_capped(c, &f, None, 1, 10, None).expect("list");
        assert_eq!(
            (t.count, t.relation),
            (n as i64, Relation::Eq),
            "exact total {what}"
        );
        let mut caps = vec![7_u64, 10_000, n as u64];
        if n > 0 {
            caps.push(n as u64 - 1);
        }
        // A header filter's edge: ten times these is at and just under its count.
        caps.extend([n as u64 / 10, (n as u64 / 10).saturating_sub(1)]);
        for cap in caps {
            let (_, t) = ops::list_capped(c, &f, None, 1, 10, Some(cap)).expect("list");
            let want = match effective(cap) {
                Some(e) if n as u64 > e => (e as i64, Relation::Gte),
                _ => (n as i64, Relation::Eq),
            };
            assert_eq!((t.count, t.relation), want, "total at cap {cap} {what}");
        }
        for sort in [None, Some("id"), Some("created_at"), Some("-death_count")] {
            assert_pages(c, &f, sort, 7, &what);
        }
    }
}

/// Pages 1, 2 and 3 (past the cap of 7 at 10 a page) of a capped list equal the plain query's.
fn assert_pages(c: &mut dyn Conn, f: &Filter, sort: Option<&str>, cap: u64, what: &str) {
    let (cond, p) = f.to_sql(c.dialect()).expect("cond");
    let order = order_by(sort).expect("order");
    let all = plain_pages::ids(
        c,
        &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
        &p,
    );
    for page in [1_u64, 2, 3] {
        let (recs, _) = ops::list_capped(c, f, sort, page, 10, Some(cap)).expect("list");
        let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
        assert_eq!(
            have,
            plain_pages::page_of(&all, page, 10),
            "page {page} {sort:?} {what}"
        );
    }
}

fn change(c: &mut dyn Conn) {
    copy_scenario::changes(
        c,
        4,
        "tc",
        "error_message = 'rewritten: cause 1', death_count = 3",
    );
}

/// A fresh archive of this build with 400 records, none indexed yet.
fn fresh(url: &str, old: Box<dyn Conn>) -> Archive {
    drop(old);
    let a = Archive::open(url).expect("open");
    a.with(|c| insert(c, 0..400));
    a
}

const STEPS: copy_scenario::Steps<'static> = copy_scenario::Steps {
    check: &check,
    burst: &|c| insert(c, 400..700),
    change: &change,
};

#[test]
fn sqlite_text_filter_totals_capped_and_pages_exact() {
    copy_scenario::on_sqlite(fresh, &STEPS);
}

#[test]
fn postgres_text_filter_totals_capped_and_pages_exact() {
    copy_scenario::on_postgres(fresh, &STEPS);
}

/// The walk's budget edge (`text_walk`): 300 records whose body matches `rare` only among the
/// oldest 100 and `every` in all. A walk whose budget misses every match proves nothing (no
/// page, no count over the cap); one whose budget holds the page gives exactly plain SQL's first
/// ids, newest and oldest first and by time; a count proves "over the cap" only with `cap + 1`
/// real matches inside the budget.
fn budget_edge(c: &mut dyn Conn) {
    use charon_archive::text_walk::Source;
    let recs: Vec<NewRecord> = (0..300)
        .map(|i| NewRecord {
            stable_key: format!("edge:{i}"),
            payload: Bytes::from(if i < 100 { "rare every" } else { "every" }),
            ..support::record(i)
        })
        .collect();
    ops::insert_batch(c, &recs).expect("insert");
    let d = c.dialect();
    let source = |needle: &str, budget: u64| {
        let f = Filter::from_pairs([("body", needle)]).expect("filter");
        let (cond, p) = f.to_sql_checks_only(d).expect("cond");
        (f, Source::records(d, cond, p).with_budget(budget))
    };
    // `rare` lies beyond a budget of 150 newest records: nothing proven.
    let (_, mut w) = source("rare", 150);
    assert_eq!(w.page_ids(c, true, 10).expect("page"), None, "rare, newest");
    assert!(!w.count_over(c, 5).expect("count"), "rare count");
    // A budget of 150 oldest records holds `rare`'s first page.
    let (f, w) = source("rare", 150);
    let want = plain_pages::ids(
        c,
        &format!(
            "SELECT id FROM dead_letters WHERE {} ORDER BY id ASC LIMIT 10",
            f.to_sql(d).expect("cond").0
        ),
        &f.to_sql(d).expect("cond").1,
    );
    assert_eq!(
        w.page_ids(c, false, 10).expect("page"),
        Some(want),
        "rare, oldest"
    );
    // `every`: 150 newest hold 150 matches, so 10 of them are the page and a cap of 149 is passed,
    // a cap of 150 is not.
    let (f, mut w) = source("every", 150);
    let (cond, p) = f.to_sql(d).expect("cond");
    for (order, desc) in [("id DESC", true), ("id ASC", false)] {
        let want = plain_pages::ids(
            c,
            &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order} LIMIT 10"),
            &p,
        );
        assert_eq!(
            w.page_ids(c, desc, 10).expect("page"),
            Some(want),
            "every {order}"
        );
    }
    let order = order_by(Some("-created_at")).expect("order");
    let want = plain_pages::ids(
        c,
        &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order} LIMIT 10"),
        &p,
    );
    assert_eq!(
        w.page_ids_in(c, &order, 10).expect("page"),
        Some(want),
        "every by time"
    );
    assert_eq!(
        w.page_ids(c, true, 151).expect("page"),
        None,
        "a page past the budget"
    );
    assert!(
        w.count_over(c, 149).expect("count"),
        "150 matches pass a cap of 149"
    );
    assert!(
        !w.count_over(c, 150).expect("count"),
        "150 matches do not pass a cap of 150"
    );
}

#[test]
fn sqlite_the_walk_proves_nothing_beyond_its_budget() {
    let dir = tempfile::tempdir().expect("tmp");
    let a =
        Archive::open(&format!("sqlite://{}", dir.path().join("a.db").display())).expect("open");
    a.with(budget_edge);
}

#[test]
fn postgres_the_walk_proves_nothing_beyond_its_budget() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    a.with(budget_edge);
}
