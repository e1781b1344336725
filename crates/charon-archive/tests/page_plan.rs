//! List pages on SQLite that walk their order's index instead of sorting every match
//! (`page_plan`): the walk is taken when the filter matches many records and SQLite would sort,
//! and every page holds exactly the records a full sort gives, in order, for filters and sorts
//! with `created_at` out of id order.

use charon_archive::filter::{Filter, order_by};
use charon_archive::ops::{self, Edit, Selection};
use charon_archive::sql::{Conn, Param};
use charon_archive::{Archive, NewRecord};

#[path = "support/record.rs"]
mod support;

const N: usize = 3000;

fn rec(i: usize) -> NewRecord {
    NewRecord {
        original_queue: Some(format!("q{}", i % 3)),
        // "failed 3" in one record of seven: a filter no index covers (the search index's
        // candidates, then each record's text).
        error_message: Some(format!("failed {}", i % 7)),
        // A permutation of the ids, with ties: created_at is not in id order.
        created_at: 1_700_000_000_000 + ((i * 7919) % N / 2) as i64 * 10,
        ..support::record(i)
    }
}

/// The ids of every match in order, by one plain sorted query.
fn all_ids(c: &mut dyn Conn, f: &Filter, sort: Option<&str>) -> Vec<i64> {
    let (cond, p) = f.to_sql(c.dialect()).expect("cond");
    let order = order_by(sort).expect("order");
    c.query(
        &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
        &p,
    )
    .expect("all")
    .iter()
    .map(|r| r[0].int())
    .collect()
}

/// The page's id query as `page_plan` writes it.
fn plan(c: &mut dyn Conn, f: &Filter, sort: Option<&str>, total: i64, reach: u64) -> String {
    let (cond, p): (String, Vec<Param>) = f.to_sql(c.dialect()).expect("cond");
    let order = order_by(sort).expect("order");
    let inner = format!("SELECT id FROM {{from}} WHERE {{cond}} ORDER BY {order} LIMIT 50");
    charon_archive::page_plan::ids_query(c, &inner, &cond, &p, &order, total, reach).expect("plan")
}

/// The page's id query for a time range sorted by time, as `page_plan` writes it.
fn ranged(c: &mut dyn Conn, f: &Filter, sort: Option<&str>, total: i64, reach: u64) -> String {
    let (cond, p): (String, Vec<Param>) = f.to_sql(c.dialect()).expect("cond");
    let order = order_by(sort).expect("order");
    let inner = format!("SELECT id FROM {{from}} WHERE {{cond}} ORDER BY {order} LIMIT 50");
    charon_archive::page_plan::ranged_ids_query(c, &inner, &cond, &p, &order, total, reach)
        .expect("plan")
}

/// Whether the id query walks `index` testing the filter row by row (`Walk`), testing ids
/// against the filter's ids (`Probe`), or reads the matches and sorts (`Sort`).
#[derive(Debug, PartialEq)]
enum Kind {
    Walk,
    Probe,
    Sort,
}

fn kind(q: &str, index: &str) -> Kind {
    let probe = q.contains("id IN (SELECT id FROM dead_letters WHERE");
    match (q.contains(&format!("INDEXED BY {index}")), probe) {
        (true, true) => Kind::Probe,
        (true, false) => Kind::Walk,
        (false, false) if !q.contains("INDEXED BY") => Kind::Sort,
        _ => panic!("unexpected plan: {q}"),
    }
}

#[test]
fn sqlite_pages_walk_the_order_index_and_match_a_full_sort() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Archive::open(&dir.path().join("archive.db").to_string_lossy()).expect("open");
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..N).map(rec).collect();
        ops::insert_batch(c, &recs).expect("insert");
        // Every tenth record SKIPPED: PENDING matches 90 %, SKIPPED 10 %.
        let ids: Vec<i64> = all_ids(c, &Filter::default(), Some("id"))
            .into_iter()
            .step_by(10)
            .collect();
        ops::skip(c, &Selection::Ids(ids), "test", "plan").expect("skip");

        let pending = Filter::from_pairs([("status", "PENDING")]).expect("f");
        let skipped = Filter::from_pairs([("status", "SKIPPED")]).expect("f");
        let q1 = Filter::from_pairs([("original_queue", "q1")]).expect("f");
        let created = "dead_letters_created";
        // PENDING by created_at: SQLite alone would sort 2,700 matches; the walk reads ~56 rows.
        let p = plan(c, &pending, Some("-created_at"), 2700, 50);
        assert_eq!(kind(&p, created), Kind::Walk, "{p}");
        // original_queue alone newest first: (original_queue, status, id) is not in id order.
        let p = plan(c, &q1, None, 1000, 50);
        assert_eq!(kind(&p, "dead_letters_id"), Kind::Walk, "{p}");
        // PENDING newest first: (status, id) already is in the page's order.
        let p = plan(c, &pending, None, 2700, 50);
        assert_eq!(kind(&p, created), Kind::Sort, "{p}");
        // A rare filter deep into its matches: the walk would visit more rows than it matches,
        // but a tenth of all records match: the index is walked testing ids only.
        let p = plan(c, &skipped, Some("created_at"), 300, 300);
        assert_eq!(kind(&p, created), Kind::Probe, "{p}");
        // Fewer than one record in PROBE_SHARE matches: sorted.
        let few = N as i64 / charon_archive::page_plan::PROBE_SHARE - 1;
        let p = plan(c, &skipped, Some("created_at"), few, 300);
        assert_eq!(kind(&p, created), Kind::Sort, "{p}");
        // The id order is never probed (the filter's own index sorts ids without records).
        let p = plan(c, &skipped, Some("id"), 300, 300);
        assert_eq!(kind(&p, "dead_letters_id"), Kind::Sort, "{p}");

        // 120 edited bodies (their search index rows gone: scanned until indexed again), a
        // filter matching 1 in 25: walked testing ids when sorted by created_at.
        for id in all_ids(c, &Filter::default(), Some("id"))
            .into_iter()
            .step_by(25)
        {
            let e = Edit {
                payload: Some(format!("edited needle {id}").into_bytes()),
                ..Edit::default()
            };
            ops::edit(c, id, "test", &e).expect("edit");
        }
        let edited = Filter::from_pairs([("body", "needle")]).expect("f");
        let p = plan(c, &edited, Some("-created_at"), 120, 100);
        assert_eq!(kind(&p, created), Kind::Probe, "{p}");
        // A time range sorted by time (fifteenth round): the range of `dead_letters_created`
        // walked, never probed (a probe's walk would not be limited to the range).
        let since_pending =
            Filter::from_pairs([("since", "1700000004000"), ("status", "PENDING")]).expect("f");
        let n = ops::list(c, &since_pending, None, 1, 1).expect("list").1;
        assert!(n > 1000, "{n}");
        let p = ranged(c, &since_pending, Some("-created_at"), n, 50);
        assert_eq!(kind(&p, created), Kind::Walk, "{p}");
        // Deep enough that the walk would visit more rows than match: sorted, not probed.
        let since_skipped =
            Filter::from_pairs([("since", "1700000004000"), ("status", "SKIPPED")]).expect("f");
        let n = ops::list(c, &since_skipped, None, 1, 1).expect("list").1;
        let p = ranged(c, &since_skipped, Some("created_at"), n, 150);
        assert_eq!(kind(&p, created), Kind::Sort, "{p}");
        let window = Filter::from_pairs([
            ("since", "1700000003000"),
            ("until", "1700000009000"),
            ("status", "PENDING"),
        ])
        .expect("f");
        let failed = Filter::from_pairs([("error", "failed 3")]).expect("f");
        let q1_skipped =
            Filter::from_pairs([("original_queue", "q1"), ("status", "SKIPPED")]).expect("f");
        for f in [
            &pending,
            &skipped,
            &q1,
            &failed,
            &edited,
            &q1_skipped,
            &since_pending,
            &since_skipped,
            &window,
            &Filter::default(),
        ] {
            for sort in [None, Some("id"), Some("-created_at"), Some("created_at")] {
                let want = all_ids(c, f, sort);
                for page in [1u64, 2, 7, 60] {
                    let (got, total) = ops::list(c, f, sort, page, 50).expect("list");
                    assert_eq!(total as usize, want.len(), "{f:?} {sort:?}");
                    let got: Vec<i64> = got.iter().map(|r| r.id).collect();
                    let from = ((page - 1) * 50) as usize;
                    let exp: Vec<i64> = want.iter().skip(from).take(50).copied().collect();
                    assert_eq!(got, exp, "{f:?} sort {sort:?} page {page}");
                }
            }
        }
    });
}
