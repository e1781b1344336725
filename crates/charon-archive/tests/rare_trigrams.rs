//! The text filters' fast paths of the twelfth round (docs/archive.md) give the plain SQL's
//! answer: SQLite's lookup of a needle's rarest trigrams only (`rare_trigrams`), and list pages
//! of a time range (`since`/`until`) read through `dead_letters_created`. Compared with a scan
//! on both backends: rows, totals, page 2 newest and oldest first, a sort by time, groups; with
//! the index caught up, and with edited records and records above the indexer's watermark
//! (checked while holding the writer's lock, so the indexer cannot move meanwhile).

#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/record.rs"]
mod record;

use indexer_wait::wait_caught_up;

use bytes::Bytes;
use charon_archive::filter::Filter;
use charon_archive::ops::{self, Edit};
use charon_archive::search_index::Field;
use charon_archive::sql::{Conn, Dialect, Param};
use charon_archive::{Archive, NewRecord, rare_trigrams};

/// Record `i`: every one has `cause` (N = (i / 4) % 20 in half of them), a few carry `e 5`
/// without `cause 5` (decoys the rarest trigram finds and the re-check must drop), a few a
/// stack trace.
fn rec(i: usize) -> NewRecord {
    let error_message = match i % 4 {
        0 => Some(format!(
            "Order {i} could not be processed: cause {}",
            (i / 4) % 20
        )),
        1 if i % 40 == 1 => Some("see 5 causes".to_string()),
        1 => Some(format!("cause {} again", (i / 4) % 20)),
        2 if i % 40 == 2 => Some("cause 50 of 5".to_string()),
        2 => Some("because".to_string()),
        _ if i % 8 == 3 => Some("cause unknown".to_string()),
        _ => None,
    };
    NewRecord {
        stable_key: format!("r:{i}"),
        error_message,
        error_stacktrace: (i % 60 == 3).then(|| "\tat cause 5 frame".to_string()),
        payload: Bytes::from(format!("body {i} cause {}", i % 3)),
        // Out of id order for a sort by time.
        created_at: 1_700_000_000_000 + ((i * 7919) % 1000) as i64 * 1000,
        ..record::record(i)
    }
}

fn insert(c: &mut dyn Conn, ids: std::ops::Range<usize>) {
    let recs: Vec<NewRecord> = ids.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

/// Filter pairs, and the scan's SQL condition and parameters.
type Case = (Vec<(&'static str, &'static str)>, String, Vec<Param>);

fn cases(d: Dialect) -> Vec<Case> {
    let err = |n: &'static str| {
        (
            vec![("error", n)],
            format!(
                "({} OR {})",
                d.contains("error_message"),
                d.contains("error_stacktrace")
            ),
            vec![Param::from(n), Param::from(n)],
        )
    };
    let mut out = vec![
        err("cause 5"),
        err("ause 5"),
        err("cause 50 of"),
        err("Order 12"),
        err("could not be"),
        err("nothing such"),
        (
            vec![("body", "cause 2")],
            d.bytes_contain("payload"),
            vec![Param::Bytes(b"cause 2".to_vec())],
        ),
    ];
    // 1,700,000,100,000 .. 1,700,000,400,000 ms: a slice of the time range.
    out.push((
        vec![
            ("since", "2023-11-14T22:15:20Z"),
            ("until", "2023-11-14T22:20:20Z"),
        ],
        "created_at >= ? AND created_at < ?".into(),
        vec![
            Param::from(1_700_000_120_000i64),
            Param::from(1_700_000_420_000i64),
        ],
    ));
    out
}

fn scan(c: &mut dyn Conn, sql: &str, p: &[Param]) -> Vec<(i64, i64)> {
    c.query(sql, p)
        .expect("scan")
        .iter()
        .map(|r| (r[0].int(), r[1].int()))
        .collect()
}

fn check(c: &mut dyn Conn, when: &str) {
    let d = c.dialect();
    let mut matched = 0;
    for (pairs, cond, p) in cases(d) {
        let what = format!("{pairs:?} ({when})");
        let mut want = scan(
            c,
            &format!("SELECT id, created_at FROM dead_letters WHERE {cond} ORDER BY id"),
            &p,
        );
        matched += want.len();
        let f = Filter::from_pairs(pairs.iter().copied()).expect("filter");
        let ids = |page: &[charon_archive::Record]| page.iter().map(|r| r.id).collect::<Vec<_>>();
        let (page, total) = ops::list(c, &f, Some("id"), 1, 1000).expect("list");
        assert_eq!(total, want.len() as i64, "total {what}");
        let all: Vec<i64> = want.iter().map(|w| w.0).collect();
        assert_eq!(ids(&page), all, "rows {what}");
        // Page 2 of 7, newest first (the default) and oldest first.
        let (page, _) = ops::list(c, &f, None, 2, 7).expect("list");
        let newest: Vec<i64> = all.iter().rev().skip(7).take(7).copied().collect();
        assert_eq!(ids(&page), newest, "newest page 2 {what}");
        let (page, _) = ops::list(c, &f, Some("id"), 2, 7).expect("list");
        let oldest: Vec<i64> = all.iter().skip(7).take(7).copied().collect();
        assert_eq!(ids(&page), oldest, "oldest page 2 {what}");
        // By time, newest first (ties by id).
        want.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
        let (page, _) = ops::list(c, &f, Some("-created_at"), 2, 7).expect("list");
        let by_time: Vec<i64> = want.iter().skip(7).take(7).map(|w| w.0).collect();
        assert_eq!(ids(&page), by_time, "time page 2 {what}");
        let groups = ops::groups(c, Some("status"), &f).expect("groups");
        let counted: i64 = groups.iter().filter_map(|g| g["count"].as_i64()).sum();
        assert_eq!(counted, want.len() as i64, "groups {what}");
    }
    assert!(matched > 300, "the cases match records ({when})");
}

fn scenario(url: &str) {
    let a = Archive::open(url).expect("open");
    a.with(|c| insert(c, 0..600));
    wait_caught_up(&a);
    a.with(|c| {
        if c.dialect() == Dialect::Sqlite {
            // `cau`: in every record (estimated from its doclist's ends); `e 5`: under 64
            // (counted exactly), the rarest; `se `: in about 385.
            let q = rare_trigrams::query(c, Field::Error, "cause 5")
                .expect("estimate")
                .unwrap_or_default();
            assert!(q.starts_with("\"e 5\"") && !q.contains("cau"), "{q}");
        }
        check(c, "caught up");
    });
    // Edited records (their index rows gone: scanned until indexed again) and a burst above the
    // watermark, checked under the writer's lock (the indexer waits for it).
    a.with(|c| {
        for id in [5i64, 21, 100, 101] {
            let e = Edit {
                payload: Some(format!("edited cause 2 {id}").into_bytes()),
                headers: None,
                note: None,
            };
            ops::edit(c, id, "tester", &e).expect("edit");
        }
        insert(c, 600..700);
        let r = c
            .query(
                "SELECT (SELECT watermark FROM dead_letter_search_state), (SELECT COUNT(*) FROM dead_letter_search_scan)",
                &[],
            )
            .expect("state");
        assert!(r[0][0].int() <= 600 && r[0][1].int() == 4, "{r:?}");
        check(c, "edited, above the watermark");
    });
    wait_caught_up(&a);
    a.with(|c| check(c, "caught up again"));
}

#[test]
fn sqlite_fast_paths_equal_the_scan() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("archive.db");
    scenario(&format!("sqlite://{}", path.display()));
}

#[test]
fn postgres_fast_paths_equal_the_scan() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    scenario(&pg.url);
}
