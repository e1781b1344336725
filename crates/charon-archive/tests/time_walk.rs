//! Deep pages sorted by time of an `error` needle (`time_walk`, branch `w9c`, docs/archive.md
//! "Twenty-seventh round (branch `w9c`)"): the copy walked in id order and the page proven
//! against the time index. On both backends, 600 records whose times follow their ids but for a
//! jitter (every 7th record a little earlier than its neighbours): pages sorted by `-created_at`
//! and `created_at`, from the first to past the last, equal plain SQL's once indexed, after one
//! old record is given the newest time, after a burst above the watermark and after another is
//! given the oldest; the walk itself answers where the proof holds (so those pages are the
//! walk's), takes in one stray (the old record with the newest time) and refuses 70.

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
use charon_archive::sql::{Conn, Param};
use charon_archive::text_walk::Source;
use charon_archive::{Archive, NewRecord};

/// The times: ten apart in id order, every 7th 25 earlier (out of order with its two elder
/// neighbours).
fn rec(i: usize) -> NewRecord {
    let mut t = 1_700_000_000_000 + 10 * i as i64;
    if i.is_multiple_of(7) {
        t -= 25;
    }
    NewRecord {
        stable_key: format!("tw:{i}"),
        error_message: Some(format!("order {i} failed: cause {}", i % 3)),
        created_at: t,
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: std::ops::Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

/// Every page of 10 (and one past the end) of `needle` sorted by `sort`, at caps 7 and 10,000,
/// equal plain SQL's.
fn assert_all_pages(c: &mut dyn Conn, needle: &str, sort: &str, when: &str) {
    let f = Filter::from_pairs([("error", needle)]).expect("filter");
    let (cond, p) = f.to_sql(c.dialect()).expect("cond");
    let order = order_by(Some(sort)).expect("order");
    let all = plain_pages::ids(
        c,
        &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
        &p,
    );
    let last = all.len() as u64 / 10 + 2;
    for cap in [7_u64, 10_000] {
        for page in 1..=last {
            let (recs, _) = ops::list_capped(c, &f, Some(sort), page, 10, Some(cap)).expect("list");
            let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
            assert_eq!(
                have,
                plain_pages::page_of(&all, page, 10),
                "{needle} {sort} page {page} cap {cap} ({when})"
            );
        }
    }
}

/// The walk alone: `Some(plain SQL's first reach)` or `None`.
fn walk(c: &mut dyn Conn, needle: &str, desc: bool, reach: u64) -> Option<Vec<i64>> {
    let d = c.dialect();
    let f = Filter::from_pairs([("error", needle)]).expect("filter");
    let (check, p) = charon_archive::error_text::check_on_copy(d, needle).expect("check");
    let mut w = Source::copy(d, check, p);
    let checks = f.to_sql_checks_only(d).expect("checks");
    let got =
        charon_archive::time_walk::page_ids(c, &mut w, &checks, desc, reach, 0).expect("walk");
    if let Some(ids) = &got {
        let (cond, p) = f.to_sql(d).expect("cond");
        let dir = if desc { "DESC" } else { "ASC" };
        let want = plain_pages::ids(
            c,
            &format!(
                "SELECT id FROM dead_letters WHERE {cond} ORDER BY created_at {dir}, id {dir} LIMIT {reach}"
            ),
            &p,
        );
        assert_eq!(
            ids, &want,
            "the walk's page {needle} desc {desc} reach {reach}"
        );
    }
    got
}

/// A user's UPDATE of record `i`'s time (the copy follows it).
fn set_time(c: &mut dyn Conn, i: usize, t: i64) {
    c.exec(
        "UPDATE dead_letters SET created_at = ? WHERE stable_key = ?",
        &[Param::from(t), Param::from(format!("tw:{i}"))],
    )
    .expect("update");
}

/// The copy's matches sorted by its `created_at` (`error_text::page_ids_by_time`, the plan when
/// no walk answers): its first `reach` equal plain SQL's.
fn assert_copy_sorted(c: &mut dyn Conn, needle: &str, when: &str) {
    let d = c.dialect();
    let f = Filter::from_pairs([("error", needle)]).expect("filter");
    let (cond, p) = f.to_sql(d).expect("cond");
    for (desc, dir) in [(true, "DESC"), (false, "ASC")] {
        for reach in [1_u64, 10, 60] {
            let (sql, sp) =
                charon_archive::error_text::page_ids_by_time(d, needle, None, desc, reach)
                    .expect("copy plan");
            let have = plain_pages::ids(
                c,
                &format!(
                    "SELECT id FROM ({sql}) AS m ORDER BY created_at {dir}, id {dir} LIMIT {reach}"
                ),
                &sp,
            );
            let want = plain_pages::ids(
                c,
                &format!(
                    "SELECT id FROM dead_letters WHERE {cond} ORDER BY created_at {dir}, id {dir} LIMIT {reach}"
                ),
                &p,
            );
            assert_eq!(have, want, "copy sorted {needle} {dir} {reach} ({when})");
        }
    }
}

fn scenario(a: &Archive) {
    a.with(|c| insert(c, 0..600));
    indexer_wait::wait_caught_up(a);
    a.with(|c| {
        for sort in ["-created_at", "created_at"] {
            for needle in ["cause 1", "cause 0", "order 5"] {
                assert_all_pages(c, needle, sort, "indexed");
            }
        }
        // The walk proves the pages in both orders, deep ones too, despite the jitter.
        for reach in [10, 100, 150] {
            assert!(
                walk(c, "cause 1", true, reach).is_some(),
                "cause 1 newest {reach}"
            );
            assert!(
                walk(c, "cause 1", false, reach).is_some(),
                "cause 1 oldest {reach}"
            );
        }
    });
    // Record 30 (a match of `cause 0`) given the newest time: newest first, no walk reaches its
    // id; the proof finds it (a stray) and the page takes it in where it matches.
    a.with(|c| {
        set_time(c, 30, 1_800_000_000_000);
        let page = walk(c, "cause 0", true, 10).expect("cause 0 newest, one stray");
        assert_eq!(page.first(), Some(&31), "record 30 first");
        assert!(
            walk(c, "cause 1", true, 10).is_some(),
            "cause 1 newest, one stray"
        );
        assert!(walk(c, "cause 0", false, 10).is_some(), "cause 0 oldest");
        for sort in ["-created_at", "created_at"] {
            for needle in ["cause 1", "cause 0"] {
                assert_all_pages(c, needle, sort, "an old record with the newest time");
            }
        }
    });
    // The 70 oldest given the newest times: more strays than a walk takes in, no walk newest
    // first; the pages are still exact (the copy sorted by time, or the record walk).
    a.with(|c| {
        for i in 0..70 {
            set_time(c, i, 1_800_000_000_000 + i as i64);
        }
        assert_eq!(
            walk(c, "cause 0", true, 10),
            None,
            "cause 0 newest, 70 strays"
        );
        assert_eq!(
            walk(c, "cause 1", true, 10),
            None,
            "cause 1 newest, 70 strays"
        );
        for sort in ["-created_at", "created_at"] {
            for needle in ["cause 1", "cause 0"] {
                assert_all_pages(c, needle, sort, "70 old records with the newest times");
            }
        }
        assert_copy_sorted(c, "cause 0", "70 old records with the newest times");
        for i in 0..70 {
            set_time(c, i, rec(i).created_at);
        }
    });
    // A burst above the watermark (the copy does not hold it yet): the walk pages it too.
    a.with(|c| {
        insert(c, 600..700);
        for sort in ["-created_at", "created_at"] {
            assert_all_pages(c, "cause 1", sort, "a burst above the watermark");
        }
        assert!(
            walk(c, "cause 1", true, 50).is_some(),
            "cause 1 with the burst"
        );
        assert_copy_sorted(c, "cause 1", "a burst above the watermark");
    });
    // Record 31 (a match of `cause 1`) given the oldest time.
    a.with(|c| {
        set_time(c, 31, 1_600_000_000_000);
        for sort in ["-created_at", "created_at"] {
            assert_all_pages(c, "cause 1", sort, "after an update of a time");
        }
    });
}

#[test]
fn sqlite_pages_sorted_by_time_from_the_copy_walk_are_exact() {
    let dir = tempfile::tempdir().expect("tmp");
    let a =
        Archive::open(&format!("sqlite://{}", dir.path().join("a.db").display())).expect("open");
    scenario(&a);
}

#[test]
fn postgres_pages_sorted_by_time_from_the_copy_walk_are_exact() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    scenario(&a);
}
