//! An `error` needle in a time window walked over the copy between the window's ends
//! (`window_walk`, stop 47). On both backends, through the copy scenario (none indexed; indexed;
//! a burst above the watermark; skips, deletes, a user's UPDATE of error texts and INSERT;
//! indexed again), for windows whose ends are records far out of time order (a user's SQL moved
//! their times by 100 s) and whose edges hold records a little out of it:
//! - with an unbounded budget and the ends widened, the walk always answers;
//! - whenever it answers (also without the margin, with chunks of 7 ids and with a budget it
//!   runs out of), its page equals plain SQL's page in that order and its total plain SQL's count
//!   capped at the cap (caps 7, the match count and one under it, and 10,000), pages 1 and 3 of
//!   10, in id and time order both ways;
//! - a record beyond the walk's start whose time ties the page's last one's comes before it in
//!   the order (its id is on the page's side): it is in the page, both ways.

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
use charon_archive::window_walk::{Limits, list_page_within};
use charon_archive::{Archive, NewRecord};

/// `support::strayed_time`'s origin.
const BASE: i64 = 1_700_000_000_000;

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("ww:{i}"),
        queue: format!("dq{}", i % 2),
        original_queue: (!i.is_multiple_of(13)).then(|| format!("q{}", i % 4)),
        payload: Bytes::from(format!("body-{} of {i}", i % 5)),
        error_message: Some(format!("order {i} failed: cause {}", i % 3)),
        // Windows whose first or last record by time is far from the others in id.
        created_at: support::strayed_time(i),
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

/// The windows: inside the records' times; from among the early ones (the first record by time
/// one of them, the records of lower ids strays); up to a time (every early record in it); from
/// a time on (every late record in it, the last by time one of them).
fn windows() -> Vec<Vec<(&'static str, String)>> {
    vec![
        vec![
            ("since", (BASE + 300).to_string()),
            ("until", (BASE + 700).to_string()),
        ],
        vec![
            ("since", (BASE - 100_000 + 200).to_string()),
            ("until", (BASE + 600).to_string()),
        ],
        vec![("until", (BASE + 300).to_string())],
        vec![("since", (BASE + 400).to_string())],
    ]
}

/// The other terms with each window: needles common, one record in three, rare and absent; a
/// key term; a vhost limit.
/// A filter's terms but the window's, and its vhost limit.
type Terms = (
    &'static [(&'static str, &'static str)],
    Option<&'static [&'static str]>,
);

const TERMS: &[Terms] = &[
    (&[("error", "failed")], None),
    (&[("error", "cause 0")], None),
    (&[("error", "order 1")], None),
    (&[("error", "no such text")], None),
    (&[("error", "cause 1"), ("original_queue", "q1")], None),
    (&[("error", "cause 2")], Some(&["/"])),
    (&[("error", "cause 2")], Some(&["elsewhere"])),
];

const LIMITS: &[(Limits, bool)] = &[
    // Unbounded, the ends widened past every id of the test: always an answer.
    (
        Limits {
            budget: u64::MAX,
            first_span: 4_000,
            margin: 1_000,
        },
        true,
    ),
    // No margin (the strays' read), one chunk and chunks of 7 ids.
    (
        Limits {
            budget: u64::MAX,
            first_span: 4_000,
            margin: 0,
        },
        false,
    ),
    (
        Limits {
            budget: u64::MAX,
            first_span: 7,
            margin: 0,
        },
        false,
    ),
    // A budget the walk runs out of for all but the densest needles.
    (
        Limits {
            budget: 60,
            first_span: 7,
            margin: 0,
        },
        false,
    ),
];

fn check(c: &mut dyn Conn, when: &str) {
    let d = c.dialect();
    for window in windows() {
        for (terms, vhosts) in TERMS {
            let mut pairs: Vec<(&str, &str)> = terms.to_vec();
            pairs.extend(window.iter().map(|(k, v)| (*k, v.as_str())));
            let f = Filter::from_pairs(pairs.iter().copied())
                .expect("filter")
                .within(vhosts.map(|v| v.iter().map(|s| s.to_string()).collect()));
            let (cond, p) = f.to_sql(d).expect("cond");
            for sort in [None, Some("id"), Some("-created_at"), Some("created_at")] {
                let order = order_by(sort).expect("order");
                let all = plain_pages::ids(
                    c,
                    &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
                    &p,
                );
                let n = all.len() as u64;
                let what = format!("{pairs:?} {vhosts:?} {sort:?} ({when}, {n} matches)");
                let mut caps = vec![7, n, 10_000];
                if n > 0 {
                    caps.push(n - 1);
                }
                for cap in caps {
                    let want_total = if n > cap {
                        (cap as i64, Relation::Gte)
                    } else {
                        (n as i64, Relation::Eq)
                    };
                    for page in [1_u64, 3] {
                        for (limits, answers) in LIMITS {
                            let got = list_page_within(c, &f, &order, page, 10, Some(cap), *limits)
                                .expect("walk");
                            let Some((recs, total)) = got else {
                                assert!(!answers, "no answer, page {page} cap {cap}: {what}");
                                continue;
                            };
                            let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
                            assert_eq!(
                                have,
                                plain_pages::page_of(&all, page, 10),
                                "page {page} cap {cap} {limits:?}: {what}"
                            );
                            assert_eq!(
                                (total.count, total.relation),
                                want_total,
                                "total page {page} cap {cap} {limits:?}: {what}"
                            );
                        }
                    }
                }
                // Through the list itself (the driving set takes these small windows first; a
                // window it gives up on reaches the walk).
                let (recs, _) = ops::list_capped(c, &f, sort, 3, 10, Some(7)).expect("list");
                let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
                assert_eq!(have, plain_pages::page_of(&all, 3, 10), "list: {what}");
            }
        }
    }
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
    change: &|c| copy_scenario::changes(c, 4, "ww", "error_message = 'rewritten: cause 1'"),
};

#[test]
fn sqlite_window_walks_equal_plain_sql() {
    copy_scenario::on_sqlite(fresh, &STEPS);
}

#[test]
fn postgres_window_walks_equal_plain_sql() {
    copy_scenario::on_postgres(fresh, &STEPS);
}

/// Ties at the page's last time with a record beyond the walk's start (no margin), newest first
/// and oldest first: ids 1–40 ten ms apart but id 40 the window's newest (the walk starts there),
/// id 41 at the time of the page's tenth (id 31); id 42 in neither window; ids 43–82 the same for the oldest first
/// (id 43 at the time of the tenth, id 53, the walk starting at id 44).
fn ties(c: &mut dyn Conn, when: &str) {
    let limits = Limits {
        budget: u64::MAX,
        first_span: 4_000,
        margin: 0,
    };
    let cases = [
        (
            "-created_at",
            BASE,
            BASE + 2_000,
            [40, 39, 38, 37, 36, 35, 34, 33, 32, 41],
        ),
        (
            "created_at",
            BASE + 5_000,
            BASE + 6_000,
            [44, 45, 46, 47, 48, 49, 50, 51, 52, 43],
        ),
    ];
    for (sort, since, until, want) in cases {
        let (since, until) = (since.to_string(), until.to_string());
        let f = Filter::from_pairs([
            ("error", "tied"),
            ("since", since.as_str()),
            ("until", until.as_str()),
        ])
        .expect("filter");
        let (recs, total) = list_page_within(
            c,
            &f,
            &order_by(Some(sort)).expect("order"),
            1,
            10,
            Some(7),
            limits,
        )
        .expect("walk")
        .expect("an answer");
        let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
        assert_eq!(have, want.to_vec(), "{sort} ({when})");
        assert_eq!(
            (total.count, total.relation),
            (7, Relation::Gte),
            "{sort} ({when})"
        );
    }
}

fn tied(id: i64) -> NewRecord {
    let t = match id {
        40 => 1_999,
        41 => 1_000 + 31 * 10,
        42 => 3_000,
        1..=40 => 1_000 + id * 10,
        43 => 5_010 + (53 - 44) * 10,
        _ => 5_010 + (id - 44) * 10,
    };
    NewRecord {
        stable_key: format!("tie:{id}"),
        error_message: Some(format!("tied {id}")),
        created_at: BASE + t,
        ..support::record(id as usize)
    }
}

fn ties_on(url: &str) {
    let a = Archive::open(url).expect("open");
    a.with(|c| {
        let recs: Vec<NewRecord> = (1..=82).map(tied).collect();
        ops::insert_batch(c, &recs).expect("insert");
        let ids = plain_pages::ids(c, "SELECT id FROM dead_letters ORDER BY id", &[]);
        assert_eq!(
            ids,
            (1..=82).collect::<Vec<i64>>(),
            "ids in insertion order"
        );
        ties(c, "none indexed");
    });
    indexer_wait::wait_caught_up(&a);
    a.with(|c| ties(c, "indexed"));
}

#[test]
fn sqlite_a_stray_tied_with_the_pages_last_time_is_in_the_page() {
    let dir = tempfile::tempdir().expect("tmp");
    ties_on(&format!(
        "sqlite://{}",
        dir.path().join("archive.db").display()
    ));
}

#[test]
fn postgres_a_stray_tied_with_the_pages_last_time_is_in_the_page() {
    if let Some(pg) = pg_cluster::PgCluster::start() {
        ties_on(&pg.url);
    }
}
