//! Pages sorted by time of an `error` needle too rare for a walk (`rare_time_page`, stop 43,
//! docs/archive.md "Twenty-eighth round (lead)"): the count and the page from one read of the
//! matches. On both backends, 1,000 records whose needle `rare thing` is only in 50 of the newest
//! 400 (the walk's probe takes the median of three places, two of which hold none of them), a
//! fifth of them in another vhost,
//! times out of id order: every page sorted by `-created_at` and `created_at` (and, stop 45, by
//! `original_queue` — NULL in every 11th — and `queue`, both ways), and the total at
//! caps 7, 100, 10,000 and none, equal plain SQL's — for an administrator, for a user limited to
//! vhost `/`, with a `status` term, and with matches above the search watermark.

#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[allow(dead_code)]
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use charon_archive::filter::{Filter, order_by};
use charon_archive::ops;
use charon_archive::sql::Conn;
use charon_archive::total_cap::{Relation, Total};
use charon_archive::{Archive, NewRecord};

/// Record `i`: ten ms apart in id order, every 7th 25 earlier and every 13th a day later (far out
/// of id order); `rare thing` in every 8th from the 600th (every 3rd from the 1,000th); vhost
/// `other` for every 5th.
fn rec(i: usize) -> NewRecord {
    let mut t = 1_700_000_000_000 + 10 * i as i64;
    if i.is_multiple_of(7) {
        t -= 25;
    }
    if i.is_multiple_of(13) {
        t += 86_400_000;
    }
    let cause =
        if (600..1_000).contains(&i) && i.is_multiple_of(8) || i >= 1_000 && i.is_multiple_of(3) {
            "rare thing".to_string()
        } else {
            format!("cause {}", i % 3)
        };
    NewRecord {
        stable_key: format!("rt:{i}"),
        vhost: if i % 5 == 3 { "other" } else { "/" }.into(),
        original_queue: (!i.is_multiple_of(11)).then(|| format!("q{}", i % 4)),
        queue: format!("dlq-{}", i % 3),
        error_message: Some(format!("order {i} failed: {cause}")),
        created_at: t,
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: std::ops::Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

/// Every page of 10 (and one past the end) of `f` sorted by `sort`, and its total, at each cap,
/// equal plain SQL's.
fn assert_all_pages(c: &mut dyn Conn, f: &Filter, sort: &str, when: &str) {
    let (cond, p) = f.to_sql(c.dialect()).expect("cond");
    let order = order_by(Some(sort)).expect("order");
    let all = plain_pages::ids(
        c,
        &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
        &p,
    );
    assert!(
        all.len() > 10,
        "{f:?} matches several pages ({when}): {}",
        all.len()
    );
    let n = all.len() as i64;
    let last = all.len() as u64 / 10 + 2;
    for cap in [Some(7_u64), Some(100), Some(10_000), None] {
        for page in 1..=last {
            let (recs, total) = ops::list_capped(c, f, Some(sort), page, 10, cap).expect("list");
            let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
            assert_eq!(
                have,
                plain_pages::page_of(&all, page, 10),
                "{f:?} {sort} page {page} cap {cap:?} ({when})"
            );
            let want_total = match cap {
                Some(cap) => Total::from_capped(n, cap),
                None => Total::exact(n),
            };
            assert_eq!(
                (total.count, total.relation == Relation::Gte),
                (want_total.count, want_total.relation == Relation::Gte),
                "{f:?} {sort} total, page {page} cap {cap:?} ({when})"
            );
        }
    }
}

fn filters() -> Vec<Filter> {
    let error = Filter::from_pairs([("error", "rare thing")]).expect("filter");
    let pending =
        Filter::from_pairs([("error", "rare thing"), ("status", "PENDING")]).expect("filter");
    vec![
        error.clone(),
        error.within(Some(vec!["/".to_string()])),
        pending,
    ]
}

/// By time, and by a group key the copy holds (`rare_time_page::key_page`), NULL among its
/// values, both ways.
const SORTS: [&str; 6] = [
    "-created_at",
    "created_at",
    "original_queue",
    "-original_queue",
    "queue",
    "-queue",
];

fn scenario(a: &Archive) {
    a.with(|c| insert(c, 0..1_000));
    indexer_wait::wait_caught_up(a);
    a.with(|c| {
        for f in filters() {
            for sort in SORTS {
                assert_all_pages(c, &f, sort, "indexed");
            }
        }
    });
    // Matches above the search watermark (the copy does not hold them yet): checked on the
    // records, in the same pass.
    a.with(|c| {
        insert(c, 1_000..1_060);
        for f in filters() {
            for sort in SORTS {
                assert_all_pages(c, &f, sort, "matches above the watermark");
            }
        }
    });
}

#[test]
fn sqlite_rare_needle_pages_by_time_are_exact() {
    let dir = tempfile::tempdir().expect("tmp");
    let a =
        Archive::open(&format!("sqlite://{}", dir.path().join("a.db").display())).expect("open");
    scenario(&a);
}

#[test]
fn postgres_rare_needle_pages_by_time_are_exact() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    scenario(&a);
}
