//! Deep pages in id order of a user limited to some vhosts (`key_copy::holds_terms`, stop 43,
//! docs/archive.md "Twenty-eighth round (lead)"): the copy's rows walked instead of the records.
//! On both backends, 1,300 records over three vhosts and two statuses, indexed, then 100 more
//! above the search watermark: pages past the 1,000th record, both ways, with and without key
//! terms, and the total, equal plain SQL's for users limited to `/`, to `/` and `b`, and to none.

#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[allow(dead_code)]
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use charon_archive::filter::Filter;
use charon_archive::ops;
use charon_archive::sql::{Conn, Param};
use charon_archive::{Archive, NewRecord};

/// Record `i`: vhost `/`, `a` or `b` by `i % 3` (but every 7th in `/`), original queue `q0`–`q3`.
fn rec(i: usize) -> NewRecord {
    let vhost = if i.is_multiple_of(7) {
        "/"
    } else {
        ["/", "a", "b"][i % 3]
    };
    NewRecord {
        stable_key: format!("vd:{i}"),
        vhost: vhost.into(),
        original_queue: Some(format!("q{}", i % 4)),
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: std::ops::Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

fn filters() -> Vec<Filter> {
    let mut out = Vec::new();
    for terms in [
        vec![],
        vec![("original_queue", "q1")],
        vec![("status", "SKIPPED")],
    ] {
        for scope in [
            vec!["/".to_string()],
            vec!["/".to_string(), "b".to_string()],
            vec![],
        ] {
            let f = Filter::from_pairs(terms.iter().copied()).expect("filter");
            out.push(f.within(Some(scope)));
        }
    }
    out
}

fn check(c: &mut dyn Conn, when: &str) {
    for f in filters() {
        for sort in [None, Some("id"), Some("-id")] {
            let what = format!("{f:?} ({when})");
            plain_pages::assert_pages(c, &f, sort, &[1, 3, 4, 5, 6, 7, 9], 150, &what);
        }
    }
}

fn scenario(a: &Archive) {
    a.with(|c| insert(c, 0..1_300));
    indexer_wait::wait_caught_up(a);
    // A third of the records skipped (the copy follows a status change).
    a.with(|c| {
        c.exec(
            "UPDATE dead_letters SET status = ? WHERE id % 3 = 1",
            &[Param::from("SKIPPED")],
        )
        .expect("skip");
        check(c, "indexed");
    });
    a.with(|c| {
        insert(c, 1_300..1_400);
        check(c, "100 records above the watermark");
    });
}

#[test]
fn sqlite_vhost_limited_deep_pages_are_exact() {
    let dir = tempfile::tempdir().expect("tmp");
    let a =
        Archive::open(&format!("sqlite://{}", dir.path().join("a.db").display())).expect("open");
    scenario(&a);
}

#[test]
fn postgres_vhost_limited_deep_pages_are_exact() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    scenario(&a);
}
