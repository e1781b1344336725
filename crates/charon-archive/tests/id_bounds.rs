//! A page of a time range with a `status` term in id order on PostgreSQL between id bounds
//! (`id_bounds`, twenty-third round): offered when the plain walk's far side outweighs the
//! matches, and its pages equal the plain sorted query's — with records in time order (the
//! bounds proven, the bounded walk answers) and after a user's UPDATE puts a record's time out
//! of id order (the proof fails inside the statement, the plain walk answers), and after skips
//! and deletes.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use charon_archive::filter::Filter;
use charon_archive::ops::{self, Selection};
use charon_archive::sql::{Cell, Conn};
use charon_archive::{Archive, NewRecord};

const N: usize = 3000;
const T0: i64 = 1_700_000_000_000;

/// Record `i`, archived at `T0 + 10·i` ms: time grows with the id, several records a second.
fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("b:{i}"),
        created_at: T0 + i as i64 * 10,
        ..support::record(i)
    }
}

/// The filters: ranges near either end (the plain walk's far side large) and in the middle,
/// bounds inside a second, with `status`.
fn filters() -> Vec<Vec<(&'static str, String)>> {
    let t = |ms: i64| (T0 + ms).to_string();
    let mut out = Vec::new();
    for range in [
        vec![("until", t(2_000))],
        vec![("until", t(2_345))],
        vec![("since", t(28_000))],
        vec![("since", t(27_655))],
        vec![("since", t(9_000)), ("until", t(10_500))],
        vec![("since", t(14_005)), ("until", t(14_995))],
        vec![("since", t(-5_000)), ("until", t(1_000))],
        vec![("since", t(29_000)), ("until", t(90_000))],
    ] {
        for status in ["PENDING", "SKIPPED"] {
            let mut f = range.clone();
            f.push(("status", status.to_string()));
            out.push(f);
        }
    }
    out
}

/// Every filter's pages (newest first and by id) equal the plain query's; `offered` counts the
/// filters `id_bounds` takes a statement for, `proven` those whose bounds hold in plain SQL.
fn check(c: &mut dyn Conn, when: &str) -> (usize, usize) {
    let (mut offered, mut proven) = (0, 0);
    for pairs in filters() {
        let f = Filter::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).expect("f");
        for sort in [None, Some("id")] {
            plain_pages::assert_pages(c, &f, sort, &[1, 2, 7], 20, &format!("{pairs:?} ({when})"));
        }
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        let total = plain_pages::ids(c, &format!("SELECT id FROM dead_letters WHERE {cond}"), &p)
            .len() as i64;
        let plain = format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY id DESC LIMIT 20");
        let q = charon_archive::id_bounds::query(c, &f, &cond, &p, true, 0, 20, total, &plain)
            .expect("id bounds");
        if let Some((sql, qp)) = q {
            offered += 1;
            // The statement alone is the plain page.
            let want = plain_pages::ids(c, &plain, &p);
            assert_eq!(
                plain_pages::ids(c, &sql, &qp),
                want,
                "bounded {pairs:?} ({when})"
            );
            // Whether the bounds hold: the statement's own proof, in plain SQL.
            let (lo, hi) = charon_archive::id_bounds::candidates(c, &f).expect("candidates");
            let n = plain_pages::ids(c, &format!("SELECT id FROM dead_letters WHERE {cond}"), &p)
                .into_iter()
                .filter(|id| lo.is_none_or(|lo| *id > lo) && hi.is_none_or(|hi| *id < hi))
                .count() as i64;
            if n == total {
                proven += 1;
            }
        }
    }
    (offered, proven)
}

#[test]
fn postgres_status_ranges_between_proven_id_bounds_equal_the_plain_pages() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..N).map(rec).collect();
        ops::insert_batch(c, &recs).expect("insert");
        let skip = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 3 = 1", &[]);
        ops::skip(c, &Selection::Ids(skip), "carol", "bounds").expect("skip");
        let (offered, proven) = check(c, "in time order");
        assert!(offered >= 8, "offered {offered}");
        assert_eq!(proven, offered, "in time order every offer is proven");
        // A user's UPDATE: the newest PENDING record (highest id) moved to the archive's start,
        // inside every `until` range — the bounds no longer hold for those.
        let newest = plain_pages::ids(
            c,
            "SELECT MAX(id) FROM dead_letters WHERE status = 'PENDING'",
            &[],
        )[0];
        c.exec(
            &format!("UPDATE dead_letters SET created_at = {T0} + 5 WHERE id = {newest}"),
            &[],
        )
        .expect("update");
        let (offered, proven) = check(c, "one record out of order");
        assert!(
            offered > proven,
            "some offers not proven: {offered} {proven}"
        );
        let del = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 7 = 2", &[]);
        ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
        check(c, "after deletes");
        // The statement's total is the summary's (`total_query` equals `total`).
        for pairs in filters() {
            let f = Filter::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).expect("f");
            let (sql, p) = charon_archive::summary_seconds::total_query(c, &f)
                .expect("total query")
                .expect("answers");
            let one = c.query(&sql, &p).expect("total")[0][0].clone();
            let total = charon_archive::summary_seconds::total(c, &f)
                .expect("total")
                .expect("answers");
            assert_eq!(Cell::int(&one), total, "total query {pairs:?}");
        }
    });
}
