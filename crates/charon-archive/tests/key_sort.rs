//! Pages sorted by a group-key column (branch `s9a`, docs/archive.md "Twenty-eighth round
//! (branch `s9a`)"): key-term filters walked value by value from the summary (`key_sort`), and
//! `error` filters sorted by a column of the error-text copy (`key_copy::Split::page_ids_sorted`).
//! On both backends, 420 records over two vhosts whose every group key varies (NULLs and
//! upper-case values among them, so byte order and NULL placement matter), some skipped and
//! replayed: for every group key both ways, pages of 7 (the first, pages spanning two values,
//! deep ones, the last and one past it) and the `total` equal plain SQL's `ORDER BY col dir, id
//! dir`, for no filter, key terms, a vhost limit and `error` needles — once indexed and after a
//! burst above the search watermark.

#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use charon_archive::filter::{Filter, order_by};
use charon_archive::sql::Conn;
use charon_archive::{Archive, NewRecord, ops};

const KEYS: &[&str] = &[
    "vhost",
    "queue",
    "original_queue",
    "original_exchange",
    "reason",
    "status",
    "error_fingerprint",
    "content_type",
];

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("ks:{i}"),
        vhost: if i % 5 == 1 { "v2".into() } else { "/".into() },
        queue: format!("dlq-{}", i % 3),
        // Runs of one value (i / 40), so a value's records are many pages long, and NULLs.
        original_queue: (!i.is_multiple_of(9))
            .then(|| ["q1", "Q2", "q10", "q3"][(i / 40) % 4].to_string()),
        original_exchange: (!i.is_multiple_of(11)).then(|| format!("x{}", i % 2)),
        reason: (!i.is_multiple_of(13))
            .then(|| ["rejected", "expired", "maxlen"][i % 3].to_string()),
        error_fingerprint: (!i.is_multiple_of(6)).then(|| format!("f{}", i % 4)),
        content_type: (!i.is_multiple_of(4)).then(|| format!("a/{}", i % 3)),
        error_message: Some(format!("order {i} failed: cause {}", i % 3)),
        headers: format!("{{\"h\":\"v{}\"}}", i % 2),
        death_count: if i % 11 == 5 { 2 } else { 1 },
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: std::ops::Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

/// Pages 1, 2, 5, 6, 17, 30, the last and one past it (of 7) and the total of `f` sorted by
/// every group key both ways equal plain SQL's.
fn assert_key_sorts(c: &mut dyn Conn, f: &Filter, when: &str) {
    for col in KEYS {
        for sort in [col.to_string(), format!("-{col}")] {
            let (cond, p) = f.to_sql(c.dialect()).expect("cond");
            let n = plain_pages::ids(c, &format!("SELECT id FROM dead_letters WHERE {cond}"), &p)
                .len() as u64;
            let last = n / 7 + 1;
            let pages = [1, 2, 5, 6, 17, 30, last, last + 1];
            plain_pages::assert_pages(c, f, Some(&sort), &pages, 7, &format!("{f:?} ({when})"));
        }
    }
}

/// `key_sort` answers a key-term filter sorted by a group key, with plain SQL's page.
fn assert_value_walk(c: &mut dyn Conn, f: &Filter, when: &str) {
    for col in KEYS {
        for sort in [col.to_string(), format!("-{col}")] {
            let (cond, p) = f.to_sql(c.dialect()).expect("cond");
            let order = order_by(Some(&sort)).expect("order");
            let all = plain_pages::ids(
                c,
                &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
                &p,
            );
            for offset in [0_u64, 3, 38, 39, 40, 41, 75, 200] {
                let got = charon_archive::key_sort::page_ids(c, f, &cond, &p, &order, offset, 7)
                    .expect("walk")
                    .expect("a key-term filter sorted by a group key is walked");
                let want: Vec<i64> = all.iter().copied().skip(offset as usize).take(7).collect();
                assert_eq!(got, want, "{f:?} {sort} offset {offset} ({when})");
            }
        }
    }
}

fn filters() -> Vec<Filter> {
    let f = |pairs: &[(&str, &str)]| Filter::from_pairs(pairs.iter().copied()).expect("filter");
    vec![
        f(&[]),
        f(&[("status", "PENDING")]),
        f(&[("status", "SKIPPED")]),
        f(&[("original_queue", "Q2")]),
        f(&[("queue", "dlq-1"), ("reason", "rejected")]),
        f(&[]).within(Some(vec!["/".into()])),
        f(&[("content_type", "a/1")]).within(Some(vec!["v2".into()])),
    ]
}

fn error_filters() -> Vec<Filter> {
    let f = |pairs: &[(&str, &str)]| Filter::from_pairs(pairs.iter().copied()).expect("filter");
    vec![
        f(&[("error", "cause 1")]),
        f(&[("error", "order 1")]),
        f(&[("error", "cause 2"), ("status", "PENDING")]),
        f(&[("error", "cause 0")]).within(Some(vec!["/".into()])),
        // The sorted column one value under the key terms (`queue`, `vhost`): the id order.
        f(&[("error", "cause 1"), ("queue", "dlq-1")]),
        f(&[("body", "body")]).within(Some(vec!["v2".into()])),
    ]
}

/// Header filters (the header's index range, with a key term, with a vhost limit).
fn header_filters() -> Vec<Filter> {
    let f = |pairs: &[(&str, &str)]| Filter::from_pairs(pairs.iter().copied()).expect("filter");
    vec![
        f(&[("header.h", "v1")]),
        f(&[("header.h", "v0"), ("status", "PENDING")]),
        f(&[("header.h", "v1")]).within(Some(vec!["/".into()])),
    ]
}

/// Pages of 7 (as [`assert_key_sorts`]) and the total of `f` sorted by every sparse column both
/// ways (`sparse_sort::driven_ids_query` for a header filter) equal plain SQL's.
fn assert_sparse_sorts(c: &mut dyn Conn, f: &Filter, when: &str) {
    for col in [
        "replay_count",
        "last_replayed_at",
        "death_count",
        "updated_at",
    ] {
        for sort in [col.to_string(), format!("-{col}")] {
            let (cond, p) = f.to_sql(c.dialect()).expect("cond");
            let n = plain_pages::ids(c, &format!("SELECT id FROM dead_letters WHERE {cond}"), &p)
                .len() as u64;
            let last = n / 7 + 1;
            plain_pages::assert_pages(
                c,
                f,
                Some(&sort),
                &[1, 2, 3, 5, 9, 20, last, last + 1],
                7,
                &format!("{f:?} ({when})"),
            );
        }
    }
}

fn scenario(a: &Archive) {
    a.with(|c| {
        insert(c, 0..420);
        // Some records skipped, some replayed (by SQL, as the API's status changes are): the
        // summary's triggers keep each status's count.
        c.exec(
            "UPDATE dead_letters SET status = 'SKIPPED' WHERE id % 7 = 2",
            &[],
        )
        .expect("skip");
        c.exec(
            "UPDATE dead_letters SET status = 'REPLAYED' WHERE id % 10 = 3",
            &[],
        )
        .expect("replay");
        // Replays and edits as the API's move the sparse columns off their insert values.
        c.exec(
            "UPDATE dead_letters SET replay_count = 1 + id % 3, last_replayed_at = created_at + id % 5, \
             updated_at = created_at + 100 + id % 4 WHERE id % 9 = 4",
            &[],
        )
        .expect("replayed");
    });
    indexer_wait::wait_caught_up(a);
    a.with(|c| {
        for f in filters() {
            assert_value_walk(c, &f, "indexed");
            assert_key_sorts(c, &f, "indexed");
        }
        for f in error_filters() {
            assert_key_sorts(c, &f, "indexed");
        }
        for f in header_filters().into_iter().chain(error_filters()) {
            assert_sparse_sorts(c, &f, "indexed");
        }
    });
    // A burst above the watermark: the copy's sort merges the records the copy lacks.
    a.with(|c| {
        insert(c, 420..470);
        for f in error_filters() {
            assert_key_sorts(c, &f, "a burst above the watermark");
        }
        for f in filters() {
            assert_value_walk(c, &f, "a burst");
        }
        for f in header_filters().into_iter().chain(error_filters()) {
            assert_sparse_sorts(c, &f, "a burst above the watermark");
        }
    });
}

#[test]
fn sqlite_pages_sorted_by_a_group_key_are_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a =
        Archive::open(&format!("sqlite://{}", dir.path().join("a.db").display())).expect("open");
    scenario(&a);
}

#[test]
fn postgres_pages_sorted_by_a_group_key_are_exact() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    scenario(&a);
}
