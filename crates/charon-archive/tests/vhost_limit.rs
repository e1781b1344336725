//! A vhost limit that leaves out no match (branch `k9b`, docs/archive.md "Twenty-ninth round
//! (branch `k9b`)", `src/vhost_limit.rs`). On both backends, 500 records: queue `q1` only in
//! vhost `/`, `q2` in `/` and `v2`, `q3` only in `v2`, indexed, then 60 more above the search
//! watermark. For users limited to `/`, to `v2`, to both and to none: `leaves_none_out` holds
//! exactly when plain SQL counts the same matches with and without the limit, and it holds for the
//! cases built so; pages (deep ones, both ways, by id, time and a group key) and the `total` of
//! key terms, `error` and header terms equal plain SQL's with the limit. And the counts and the
//! list share one snapshot: a record of another vhost archived after the counts is not read.

#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use charon_archive::filter::Filter;
use charon_archive::sql::{Conn, Param};
use charon_archive::{Archive, NewRecord, ops, vhost_limit};

fn rec(i: usize) -> NewRecord {
    let (vhost, oq) = match i % 4 {
        0 => ("/", "q1"),
        1 => ("/", "q2"),
        2 => ("v2", "q2"),
        _ => ("v2", "q3"),
    };
    NewRecord {
        stable_key: format!("vl:{i}"),
        vhost: vhost.into(),
        original_queue: Some(oq.into()),
        error_message: Some(format!("order {i} failed: cause {}", i % 3)),
        headers: format!("{{\"h\":\"v{}\"}}", i % 2),
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: std::ops::Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

fn scopes() -> Vec<Vec<String>> {
    vec![
        vec!["/".into()],
        vec!["v2".into()],
        vec!["/".into(), "v2".into()],
        vec![],
    ]
}

fn terms() -> Vec<Vec<(&'static str, &'static str)>> {
    vec![
        vec![],
        vec![("original_queue", "q1")],
        vec![("original_queue", "q2")],
        vec![("original_queue", "q3")],
        vec![("original_queue", "q1"), ("status", "SKIPPED")],
        vec![("original_queue", "q1"), ("error", "cause 1")],
        vec![("error", "cause 2")],
        vec![("original_queue", "q3"), ("header.h", "v1")],
    ]
}

/// (terms index, scope index) whose limit leaves out no match.
fn must_hold() -> Vec<(usize, usize)> {
    vec![
        (0, 2),
        (1, 0),
        (1, 2),
        (2, 2),
        (3, 1),
        (4, 0),
        (5, 0),
        (6, 2),
        (7, 1),
    ]
}

fn count(c: &mut dyn Conn, cond: &str, p: &[Param]) -> i64 {
    c.query(
        &format!("SELECT COUNT(*) FROM dead_letters WHERE {cond}"),
        p,
    )
    .expect("count")[0][0]
        .int()
}

fn assert_lists(c: &mut dyn Conn, when: &str) {
    for (t, terms) in terms().iter().enumerate() {
        for (s, scope) in scopes().into_iter().enumerate() {
            let f = Filter::from_pairs(terms.iter().copied())
                .expect("filter")
                .within(Some(scope));
            let holds = vhost_limit::leaves_none_out(c, &f).expect("leaves none out");
            let (lc, lp) = f.to_sql(c.dialect()).expect("cond");
            let (ac, ap) = f.clone().within(None).to_sql(c.dialect()).expect("cond");
            if holds {
                assert_eq!(count(c, &lc, &lp), count(c, &ac, &ap), "{f:?} ({when})");
            }
            assert!(
                holds || !must_hold().contains(&(t, s)),
                "{f:?}: its key terms' records all lie in its vhosts ({when})"
            );
            for sort in [
                None,
                Some("id"),
                Some("created_at"),
                Some("-original_queue"),
            ] {
                plain_pages::assert_pages(
                    c,
                    &f,
                    sort,
                    &[1, 2, 3, 7, 15, 40, 80],
                    3,
                    &format!("{f:?} ({when})"),
                );
            }
        }
    }
}

/// A record of `v2` archived after the counts (on the writer's connection) is not in the count
/// the list reads for a user limited to `/` whose limit was dropped, in the list's one snapshot
/// (`sql::read_snapshot`, as `ops::list_capped` runs it).
fn assert_one_snapshot(a: &Archive) {
    let f = Filter::from_pairs([("original_queue", "q1")])
        .expect("filter")
        .within(Some(vec!["/".into()]));
    let before = a.with(|c| {
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        count(c, &cond, &p)
    });
    let (seen, dropped) = a
        .read(|c| {
            charon_archive::sql::read_snapshot(c, |c| {
                vhost_limit::read(c, &f, |c, g| {
                    a.with(|w| {
                        let late = NewRecord {
                            stable_key: "vl:late".into(),
                            vhost: "v2".into(),
                            original_queue: Some("q1".into()),
                            ..support::record(9999)
                        };
                        ops::insert_batch(w, &[late])
                    })?;
                    let (cond, p) = g.to_sql(c.dialect())?;
                    Ok((count(c, &cond, &p), g.vhosts.is_none()))
                })
            })
        })
        .expect("read");
    assert!(dropped, "the limit of a key term only in `/` is dropped");
    assert_eq!(
        seen, before,
        "the late record of `v2` is outside the snapshot"
    );
}

fn scenario(a: &Archive) {
    a.with(|c| {
        insert(c, 0..500);
        c.exec(
            "UPDATE dead_letters SET status = 'SKIPPED' WHERE id % 5 = 2",
            &[],
        )
        .expect("skip");
    });
    indexer_wait::wait_caught_up(a);
    a.with(|c| {
        assert_lists(c, "indexed");
        insert(c, 500..560);
        assert_lists(c, "60 above the watermark");
    });
    assert_one_snapshot(a);
}

#[test]
fn sqlite_a_vhost_limit_that_leaves_out_no_match_is_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a =
        Archive::open(&format!("sqlite://{}", dir.path().join("a.db").display())).expect("open");
    scenario(&a);
}

#[test]
fn postgres_a_vhost_limit_that_leaves_out_no_match_is_dropped() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    scenario(&a);
}
