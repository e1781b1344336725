//! A text term with another term walked from that term's records (`driving_set`, branch `f9a`,
//! docs/archive.md "Twenty-eighth round"). On both backends, through the copy scenario (right
//! after the records are written, none indexed; indexed; a burst above the watermark; skips,
//! deletes, a user's UPDATE of error texts and a user's INSERT; indexed again), for filters whose
//! driving set is a header's range, a time range or a key column's index:
//! - the walk's first `need` matches equal plain SQL's first `need` in id order, both ways, and it
//!   always answers when its budget holds the whole driving set (exactly `|D|`), with every match
//!   when fewer than `need` match;
//! - with a budget one under `|D|` it answers only with `need` real matches (a needle matching
//!   none of the set's records: no answer, never an empty "every match");
//! - the lists' capped `total` and pages 1–3 equal plain SQL's at caps 7, the match count and one
//!   under it, and the `/groups` of the newest matches equal plain SQL's groups.

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
use charon_archive::driving_set::first_matches_within;
use charon_archive::filter::{Filter, order_by};
use charon_archive::ops;
use charon_archive::sql::{Conn, Dialect};
use charon_archive::total_cap::Relation;
use charon_archive::{Archive, NewRecord};

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("ds:{i}"),
        queue: format!("dq{}", i % 2),
        original_queue: (!i.is_multiple_of(13)).then(|| format!("q{}", i % 4)),
        headers: serde_json::json!({"x-h": format!("v{}", i % 2)}).to_string(),
        payload: Bytes::from(format!("body-{} of {i}", i % 5)),
        error_message: Some(format!("order {i} failed: cause {}", i % 3)),
        created_at: support::strayed_time(i),
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

/// A filter, its driving term alone, and whether SQLite drives it: a key with an index in id
/// order (`queue`, `reason`, `status`), or `original_queue` / `error_fingerprint` (their
/// statuses' ranges merged, stop 46) when the needle is checked on the copy (an `error` term).
struct Case {
    pairs: &'static [(&'static str, &'static str)],
    driver: &'static [(&'static str, &'static str)],
    sqlite: bool,
    vhosts: Option<&'static [&'static str]>,
}

const CASES: &[Case] = &[
    // Key terms: few matches, many, none (the needle absent from the set; the set empty).
    Case {
        pairs: &[("error", "cause 0"), ("original_queue", "q1")],
        driver: &[("original_queue", "q1")],
        sqlite: true,
        vhosts: None,
    },
    // Every record of the value a match (its statuses' ranges merged in id order on SQLite:
    // PENDING, SKIPPED and a user's own status).
    Case {
        pairs: &[("error", "failed"), ("original_queue", "q2")],
        driver: &[("original_queue", "q2")],
        sqlite: true,
        vhosts: None,
    },
    Case {
        pairs: &[("error", "failed"), ("original_queue", "q2")],
        driver: &[("original_queue", "q2")],
        sqlite: true,
        vhosts: Some(&["/"]),
    },
    // Two key terms: the one with fewer records drives (stop 46); with a status, SQLite's merged
    // key and PostgreSQL's partial `(X, status, id)` index read that status's range only.
    Case {
        pairs: &[
            ("error", "cause 0"),
            ("original_queue", "q1"),
            ("status", "SKIPPED"),
        ],
        driver: &[("original_queue", "q1"), ("status", "SKIPPED")],
        sqlite: true,
        vhosts: None,
    },
    Case {
        pairs: &[
            ("error", "failed"),
            ("queue", "dq0"),
            ("original_queue", "q2"),
        ],
        driver: &[("original_queue", "q2")],
        sqlite: true,
        vhosts: None,
    },
    // A `body` term is checked on the records: SQLite leaves `original_queue` to the text plans.
    Case {
        pairs: &[("body", "body-1"), ("original_queue", "q3")],
        driver: &[("original_queue", "q3")],
        sqlite: false,
        vhosts: None,
    },
    Case {
        pairs: &[("error", "cause 1"), ("queue", "dq1")],
        driver: &[("queue", "dq1")],
        sqlite: true,
        vhosts: None,
    },
    Case {
        pairs: &[("error", "no such text"), ("queue", "dq0")],
        driver: &[("queue", "dq0")],
        sqlite: true,
        vhosts: None,
    },
    Case {
        pairs: &[("error", "cause 1"), ("queue", "nonexistent")],
        driver: &[("queue", "nonexistent")],
        sqlite: true,
        vhosts: None,
    },
    Case {
        pairs: &[("body", "body-1"), ("status", "SKIPPED")],
        driver: &[("status", "SKIPPED")],
        sqlite: true,
        vhosts: None,
    },
    // A header's range: on the copy (`error`) and on the records (`body`), with a vhost limit.
    Case {
        pairs: &[("error", "cause 2"), ("header.x-h", "v0")],
        driver: &[("header.x-h", "v0")],
        sqlite: true,
        vhosts: None,
    },
    Case {
        pairs: &[
            ("error", "cause 2"),
            ("header.x-h", "v0"),
            ("status", "PENDING"),
        ],
        driver: &[("header.x-h", "v0")],
        sqlite: true,
        vhosts: Some(&["/"]),
    },
    Case {
        pairs: &[("error", "cause 2"), ("header.x-h", "v0")],
        driver: &[("header.x-h", "v0")],
        sqlite: true,
        vhosts: Some(&["elsewhere"]),
    },
    Case {
        pairs: &[("body", "body-3"), ("header.x-h", "v1")],
        driver: &[("header.x-h", "v1")],
        sqlite: true,
        vhosts: None,
    },
    // Needles every record of the set holds (a few ids of budget prove a page).
    Case {
        pairs: &[("body", " of "), ("header.x-h", "v1")],
        driver: &[("header.x-h", "v1")],
        sqlite: true,
        vhosts: None,
    },
    Case {
        pairs: &[("error", "failed"), ("queue", "dq0")],
        driver: &[("queue", "dq0")],
        sqlite: true,
        vhosts: None,
    },
    // A time range.
    Case {
        pairs: &[("body", "body"), ("since", "1700000000300")],
        driver: &[("since", "1700000000300")],
        sqlite: true,
        vhosts: None,
    },
    Case {
        pairs: &[
            ("error", "cause 0"),
            ("since", "1700000000350"),
            ("status", "PENDING"),
        ],
        driver: &[("since", "1700000000350")],
        sqlite: true,
        vhosts: None,
    },
];

fn filter(pairs: &[(&str, &str)], vhosts: Option<&[&str]>) -> Filter {
    Filter::from_pairs(pairs.iter().copied())
        .expect("filter")
        .within(vhosts.map(|v| v.iter().map(|s| s.to_string()).collect()))
}

/// Plain SQL's matching ids of `f` in id order (`desc`: newest first).
fn plain(c: &mut dyn Conn, f: &Filter, desc: bool) -> Vec<i64> {
    let (cond, p) = f.to_sql(c.dialect()).expect("cond");
    let dir = if desc { "DESC" } else { "ASC" };
    plain_pages::ids(
        c,
        &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY id {dir}"),
        &p,
    )
}

fn check(c: &mut dyn Conn, when: &str) {
    for case in CASES {
        let f = filter(case.pairs, case.vhosts);
        let set = plain(c, &filter(case.driver, None), true).len() as u64;
        let drives = c.dialect() == Dialect::Postgres || case.sqlite;
        for desc in [true, false] {
            let all = plain(c, &f, desc);
            let n = all.len() as u64;
            let what = format!(
                "{:?} {:?} desc {desc} ({when}, {n} matches of {set})",
                case.pairs, case.vhosts
            );
            for need in [1, 7, n.max(1), n + 1, 1_000] {
                let want: Vec<i64> = all.iter().copied().take(need as usize).collect();
                // A budget holding the whole set: always an answer, plain SQL's first `need`.
                for budget in [10_000, set] {
                    let got = first_matches_within(c, &f, desc, need, budget).expect("walk");
                    if drives {
                        assert_eq!(
                            got.as_ref(),
                            Some(&want),
                            "whole set, need {need}, budget {budget}: {what}"
                        );
                    } else {
                        assert_eq!(got, None, "no index to drive: {what}");
                    }
                }
                // One under the set: an answer only with `need` real matches, the first ones.
                if set > 0 {
                    let got = first_matches_within(c, &f, desc, need, set - 1).expect("walk");
                    if let Some(ids) = got {
                        assert_eq!(ids.len() as u64, need, "partial set, need {need}: {what}");
                        assert_eq!(ids, want, "partial set, need {need}: {what}");
                    }
                }
            }
            // A needle every record of the set holds, with a budget of a few ids: the first
            // ones, proven within the budget (not a time range's: over its budget it is left to
            // the other plans whole).
            let ranged = case.driver[0].0 == "since";
            if drives && !ranged && n >= 20 && n == set {
                let got = first_matches_within(c, &f, desc, 10, 15).expect("walk");
                assert_eq!(got.as_ref(), Some(&all[..10].to_vec()), "common: {what}");
            }
        }
        assert_list(c, &f, case, when);
    }
}

/// The list's capped totals and pages 1–3, by id both ways, equal plain SQL's.
fn assert_list(c: &mut dyn Conn, f: &Filter, case: &Case, when: &str) {
    let n = plain(c, f, true).len() as u64;
    let what = format!("{:?} {:?} ({when}, {n} matches)", case.pairs, case.vhosts);
    let mut caps = vec![7, n];
    if n > 0 {
        caps.push(n - 1);
    }
    for cap in caps {
        let want = if n > cap {
            (cap as i64, Relation::Gte)
        } else {
            (n as i64, Relation::Eq)
        };
        // The driving set's own capped count (SQLite; stop 46), as a list in another order than
        // the id's or the time's takes it.
        match charon_archive::driving_set::capped_total(c, f, cap).expect("capped") {
            Some(t) => assert_eq!((t.count, t.relation), want, "driven total {cap}: {what}"),
            None => assert!(
                c.dialect() == Dialect::Postgres || !case.sqlite,
                "SQLite drives: {what}"
            ),
        }
        // In id order, by time and by status (stop 46: the driving set's count for the last two
        // on SQLite).
        for sort in [None, Some("-created_at"), Some("status")] {
            let (_, t) = ops::list_capped(c, f, sort, 1, 10, Some(cap)).expect("list");
            assert_eq!(
                (t.count, t.relation),
                want,
                "total at cap {cap} {sort:?}: {what}"
            );
        }
    }
    for sort in [None, Some("id")] {
        let order = order_by(sort).expect("order");
        let all = plain(c, f, order.starts_with("id DESC"));
        for page in [1_u64, 2, 3] {
            let (recs, _) = ops::list_capped(c, f, sort, page, 10, Some(7)).expect("list");
            let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
            assert_eq!(
                have,
                plain_pages::page_of(&all, page, 10),
                "page {page} {sort:?}: {what}"
            );
        }
    }
    // By a group key (stop 45: a set walked whole, its matches sorted by the key; NULL among
    // `original_queue`'s values), against plain SQL's pages.
    // By time (stop 46: SQLite's driving set proves the page against the time index) and by
    // status.
    for sort in [
        "original_queue",
        "-original_queue",
        "queue",
        "-queue",
        "-created_at",
        "created_at",
        "status",
        "-status",
    ] {
        let order = order_by(Some(sort)).expect("order");
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        let all = plain_pages::ids(
            c,
            &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
            &p,
        );
        for page in [1_u64, 2, 3] {
            let (recs, _) = ops::list_capped(c, f, Some(sort), page, 10, Some(7)).expect("list");
            let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
            assert_eq!(
                have,
                plain_pages::page_of(&all, page, 10),
                "page {page} {sort}: {what}"
            );
        }
    }
    // `/groups` by status of the newest 7 matches (over 7: `gte`), against plain SQL's.
    let groups = ops::groups_capped(c, Some("status"), f, Some(7)).expect("groups");
    let newest: Vec<i64> = plain(c, f, true).into_iter().take(7).collect();
    let mut want: Vec<(String, i64)> = Vec::new();
    for id in &newest {
        let status = c
            .query(
                &format!("SELECT status FROM dead_letters WHERE id = {id}"),
                &[],
            )
            .expect("status")[0][0]
            .opt_text()
            .unwrap_or_default();
        match want.iter_mut().find(|(s, _)| *s == status) {
            Some(g) => g.1 += 1,
            None => want.push((status, 1)),
        }
    }
    want.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let have: Vec<(String, i64)> = groups
        .iter()
        .map(|g| {
            (
                g["status"].as_str().unwrap_or_default().to_string(),
                g["count"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(have, want, "groups by status: {what}");
    let relation = if n > 7 { "gte" } else { "eq" };
    assert!(
        groups.iter().all(|g| g["count_relation"] == relation),
        "groups' relation {relation}: {what}"
    );
}

fn change(c: &mut dyn Conn) {
    copy_scenario::changes(c, 4, "ds", "error_message = 'rewritten: cause 1'");
    // A status of the user's own, written in SQL: SQLite's merged ranges read it from the
    // summary (the five the archive writes are always read).
    c.exec(
        "UPDATE dead_letters SET status = 'ON-HOLD' WHERE id % 11 = 2",
        &[],
    )
    .expect("user status");
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
fn sqlite_driving_set_walks_equal_plain_sql() {
    copy_scenario::on_sqlite(fresh, &STEPS);
}

#[test]
fn postgres_driving_set_walks_equal_plain_sql() {
    copy_scenario::on_postgres(fresh, &STEPS);
}
