//! Stop 44's plans for an `error` term with key terms and for `error` pages sorted by
//! `updated_at` (docs/archive.md "Twenty-ninth round"), on both backends through the copy
//! scenario (none indexed; indexed; a burst above the watermark; skips, deletes, a user's UPDATE
//! of error texts and a user's INSERT; indexed again):
//! - SQLite's candidates from a key's index range (`keyed_candidates`) are taken for a key none
//!   of the needle's candidates is in, and not for one most of them are in;
//! - the lists' capped `total`, pages 1–3 in id order and sorted by `updated_at` and
//!   `created_at` both ways (the time walk driving the sparse sort's common records), and
//!   `/groups` by status equal plain SQL's, for keys rare and common among the candidates;
//! - PostgreSQL's copy has migration 26's key columns in its trigram indexes.

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
use charon_archive::sql::{Conn, Dialect};
use charon_archive::total_cap::Relation;
use charon_archive::{Archive, NewRecord};

/// Queue `q3`'s records never say `cause`; the others say `cause 0`, `1` or `2`.
fn rec(i: usize) -> NewRecord {
    let q = i % 4;
    let error = if q == 3 {
        format!("order {i} timed out")
    } else {
        format!("order {i} failed: cause {}", i % 3)
    };
    NewRecord {
        stable_key: format!("kc:{i}"),
        queue: format!("dq{}", i % 2),
        original_queue: Some(format!("q{q}")),
        error_message: Some(error),
        // One content type per original queue: the copy's keys decide it (`newest_groups`).
        content_type: Some(format!("t{q}")),
        payload: Bytes::from(format!("body of {i}")),
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

/// Filters: a key no candidate is in (`q3`), keys most candidates are in, a status none of the
/// needle's records has until the changes skip some, two keys, the needle alone.
const CASES: &[&[(&str, &str)]] = &[
    &[("error", "cause 0"), ("original_queue", "q3")],
    &[("error", "cause 0"), ("original_queue", "q1")],
    &[("error", "failed"), ("queue", "dq0")],
    &[("error", "cause 1"), ("status", "SKIPPED")],
    &[
        ("error", "cause 2"),
        ("original_queue", "q2"),
        ("status", "PENDING"),
    ],
    &[("error", "cause 0")],
    // A time window with the key (stop 47: the key's range still gives the candidates).
    &[
        ("error", "cause 0"),
        ("original_queue", "q3"),
        ("since", "1700000000150"),
    ],
    &[
        ("error", "cause 0"),
        ("original_queue", "q1"),
        ("since", "1700000000100"),
        ("until", "1700000000500"),
    ],
];

fn filter(pairs: &[(&str, &str)]) -> Filter {
    Filter::from_pairs(pairs.iter().copied()).expect("filter")
}

/// Plain SQL's matching ids of `f` in `order`.
fn plain(c: &mut dyn Conn, f: &Filter, order: &str) -> Vec<i64> {
    let (cond, p) = f.to_sql(c.dialect()).expect("cond");
    plain_pages::ids(
        c,
        &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
        &p,
    )
}

fn check(c: &mut dyn Conn, when: &str) {
    for pairs in CASES {
        let f = filter(pairs);
        let n = plain(c, &f, "id").len() as u64;
        let what = format!("{pairs:?} ({when}, {n} matches)");
        let mut caps = vec![7, n];
        if n > 0 {
            caps.push(n - 1);
        }
        for cap in caps {
            let (_, t) = ops::list_capped(c, &f, None, 1, 10, Some(cap)).expect("list");
            let want = if n > cap {
                (cap as i64, Relation::Gte)
            } else {
                (n as i64, Relation::Eq)
            };
            assert_eq!((t.count, t.relation), want, "total at cap {cap}: {what}");
        }
        let (_, t) = ops::list_capped(c, &f, None, 1, 10, None).expect("list");
        assert_eq!(t.count, n as i64, "exact total: {what}");
        for sort in [
            None,
            Some("id"),
            Some("-updated_at"),
            Some("updated_at"),
            Some("-created_at"),
        ] {
            let order = order_by(sort).expect("order");
            let all = plain(c, &f, &order);
            for page in [1_u64, 2, 3] {
                let (recs, _) = ops::list_capped(c, &f, sort, page, 10, Some(7)).expect("list");
                let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
                assert_eq!(
                    have,
                    plain_pages::page_of(&all, page, 10),
                    "page {page} {sort:?}: {what}"
                );
            }
        }
        assert_groups(c, &f, &what);
    }
    // (Right after the upgrade nothing is indexed: no candidates to choose from.)
    if c.dialect() == Dialect::Sqlite && when != "after the upgrade" {
        assert_choice(c, when);
    }
}

/// Exact `/groups` by status equal plain SQL's counts; and by `content_type,status` under a cap
/// over the match count (the newest matches' plan, `newest_groups`, every match grouped: the
/// content type the copy lacks taken from the summary, where one goes with the copy's keys).
fn assert_groups(c: &mut dyn Conn, f: &Filter, what: &str) {
    let (cond, p) = f.to_sql(c.dialect()).expect("cond");
    for (by, cap) in [("status", None), ("content_type,status", Some(100_000))] {
        let mut want: Vec<(String, i64)> = c
            .query(
                &format!(
                    "SELECT COALESCE(content_type, '-') || '/' || status, COUNT(*) FROM dead_letters \
                     WHERE {cond} GROUP BY content_type, status"
                ),
                &p,
            )
            .expect("plain groups")
            .iter()
            .map(|r| (r[0].opt_text().unwrap_or_default(), r[1].int()))
            .collect();
        if by == "status" {
            let mut sums: Vec<(String, i64)> = Vec::new();
            for (k, n) in want {
                let s = k.rsplit('/').next().unwrap_or_default().to_string();
                match sums.iter_mut().find(|(t, _)| *t == s) {
                    Some(e) => e.1 += n,
                    None => sums.push((s, n)),
                }
            }
            want = sums;
        }
        want.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let groups = ops::groups_capped(c, Some(by), f, cap).expect("groups");
        let mut have: Vec<(String, i64)> = groups
            .iter()
            .map(|g| {
                let status = g["status"].as_str().unwrap_or_default();
                let key = match by {
                    "status" => status.to_string(),
                    _ => format!("{}/{status}", g["content_type"].as_str().unwrap_or("-")),
                };
                (key, g["count"].as_i64().unwrap_or(-1))
            })
            .collect();
        have.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        assert_eq!(have, want, "groups by {by}: {what}");
    }
}

/// SQLite takes the key's range for `q3` (none of `cause 0`'s candidates), not for `PENDING`
/// (most records, most candidates among them).
fn assert_choice(c: &mut dyn Conn, when: &str) {
    let choose = |c: &mut dyn Conn, key: (&str, &str)| {
        let f = filter(&[("error", "cause 0"), key]);
        let mut g = f.clone();
        g.terms.remove("error");
        let others = g.to_sql_on(c).expect("others");
        charon_archive::keyed_candidates::within(c, &f, "cause 0", None, &others, Some(10_000))
            .expect("within")
            .is_some()
    };
    assert!(
        choose(c, ("original_queue", "q3")),
        "a key no candidate is in: the range ({when})"
    );
    // With a time window too (stop 47): the key's range alone, the window on the copy's rows.
    let f = filter(&[
        ("error", "cause 0"),
        ("original_queue", "q3"),
        ("since", "1700000000150"),
    ]);
    let mut g = f.clone();
    g.terms.remove("error");
    let others = g.to_sql_on(c).expect("others");
    let range =
        charon_archive::keyed_candidates::within(c, &f, "cause 0", None, &others, Some(10_000))
            .expect("within");
    if c.dialect() == Dialect::Sqlite {
        let (cond, _) = range.expect("the range, windowed");
        assert!(
            !cond.contains("created_at"),
            "the key's range alone: {cond}"
        );
    }
    assert!(
        !choose(c, ("status", "PENDING")),
        "a key of most records and candidates: the candidates ({when})"
    );
}

fn change(c: &mut dyn Conn) {
    copy_scenario::changes(c, 5, "kc", "error_message = 'rewritten: cause 0'");
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
fn sqlite_keyed_candidates_and_time_driven_sorts_equal_plain_sql() {
    copy_scenario::on_sqlite(fresh, &STEPS);
}

#[test]
fn postgres_key_columns_in_the_trigram_indexes_and_lists_equal_plain_sql() {
    let Some(pg) = copy_scenario::on_postgres(fresh, &STEPS) else {
        return;
    };
    let mut c = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    let rows = c
        .query(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'dead_letter_error_text' ORDER BY indexname",
            &[],
        )
        .expect("indexes");
    let defs: Vec<String> = rows.iter().filter_map(|r| r[0].opt_text()).collect();
    let keys = charon_archive::copy_key_gin::KEYS.join(", ");
    // Migration 29's one index over both texts, with migration 26's key columns.
    assert!(
        defs.iter()
            .any(|d| d.contains(&format!("gin (error_grams gin_trgm_ops, {keys})"))),
        "error_grams with the keys: {defs:?}"
    );
    assert_eq!(defs.len(), 2, "the primary key and the GIN index: {defs:?}");
}
