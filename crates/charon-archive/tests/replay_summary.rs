//! Replay's status changes counted into the summary per group (`summary_batch`, docs/archive.md
//! "Sixteenth round, writer") on SQLite and on a real PostgreSQL: a replay that takes whole
//! groups, and each group's oldest and newest record, leaves `dead_letter_groups` equal to a
//! recount with plain SQL; SQLite's update trigger is in place afterwards exactly as before (and
//! after a statement that failed and was rolled back), so a user's own UPDATE is still counted.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/record.rs"]
mod record;
#[path = "support/summary_check.rs"]
mod summary_check;

use charon_archive::filter::Filter;
use charon_archive::ops::Selection;
use charon_archive::sql::{Conn, Dialect, transaction};
use charon_archive::summary_batch::update_counted;
use charon_archive::{Archive, NewRecord, jobs, ops};
use serde_json::json;
use summary_check::{check_summary, rows};

/// Record `i`: six original queues, two content types, times out of id order.
fn rec(i: usize, at: i64) -> NewRecord {
    NewRecord {
        stable_key: format!("rs:{i}"),
        original_queue: Some(format!("orders-{}", i % 6)),
        content_type: (!i.is_multiple_of(4)).then(|| "application/json".to_string()),
        error_message: Some(format!("failed {}", i % 3)),
        created_at: at + ((i * 7919) % 500) as i64,
        ..record::record(i)
    }
}

fn trigger_sql(c: &mut dyn Conn) -> Vec<String> {
    match c.dialect() {
        Dialect::Sqlite => rows(
            c,
            "SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'dead_letters'",
        )
        .iter()
        .filter_map(|r| r[0].opt_text())
        .collect(),
        Dialect::Postgres => rows(
            c,
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'dead_letters'::regclass",
        )
        .iter()
        .filter_map(|r| r[0].opt_text())
        .collect(),
    }
}

/// One replay step as the replayer runs it: next, inflight, stored, finish (some failed).
fn replay(c: &mut dyn Conn, sel: Selection, n: u64) {
    let (job, _) = jobs::create(c, &sel, &json!({}), "carol").expect("job");
    let spec = jobs::running(c)
        .expect("running")
        .into_iter()
        .find(|j| j.id == job)
        .expect("spec");
    let ids: Vec<i64> = jobs::next(c, job, n)
        .expect("next")
        .iter()
        .map(|r| r.id)
        .collect();
    assert!(!ids.is_empty());
    jobs::inflight(c, job, &ids, 1).expect("inflight");
    check_summary(c, "inflight");
    let at: Vec<(i64, i64)> = ids.iter().map(|id| (*id, 10 + id)).collect();
    jobs::stored_at(c, job, &at).expect("stored");
    let results: Vec<(i64, Result<(), String>)> = ids
        .iter()
        .map(|id| {
            (
                *id,
                if id % 7 == 0 {
                    Err("NO_ROUTE".into())
                } else {
                    Ok(())
                },
            )
        })
        .collect();
    jobs::finish(c, &spec, &results).expect("finish");
    check_summary(c, "finish");
}

fn exercise(a: &Archive) {
    let now = charon_archive::time::now_ms() - 100_000;
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..600).map(|i| rec(i, now)).collect();
        ops::insert_batch(c, &recs).expect("insert");
        check_summary(c, "insert");
        let triggers = trigger_sql(c);
        assert!(!triggers.is_empty());
        // A whole original queue (its PENDING groups empty and go).
        let f = Filter::from_pairs([("original_queue", "orders-1")]).expect("filter");
        replay(c, Selection::Filter(f), 1000);
        let left = rows(
            c,
            "SELECT COUNT(*) FROM dead_letter_groups WHERE original_queue = 'orders-1' AND status = 'PENDING'",
        )[0][0]
            .int();
        assert_eq!(left, 0, "emptied groups are removed");
        // Each remaining PENDING group's oldest and newest record (bounds looked up again).
        let bounds: Vec<i64> = rows(
            c,
            "SELECT MIN(d.id) FROM dead_letters d JOIN (SELECT original_queue, content_type, MIN(created_at) AS lo, MAX(created_at) AS hi \
             FROM dead_letters WHERE status = 'PENDING' GROUP BY original_queue, content_type) b \
             ON d.original_queue = b.original_queue AND (d.content_type = b.content_type OR (d.content_type IS NULL AND b.content_type IS NULL)) \
             AND (d.created_at = b.lo OR d.created_at = b.hi) WHERE d.status = 'PENDING' GROUP BY d.original_queue, d.content_type, d.created_at",
        )
        .iter()
        .map(|r| r[0].int())
        .collect();
        assert!(bounds.len() > 10);
        replay(c, Selection::Ids(bounds), 1000);
        // A part of what is left, in two steps of one job's size.
        let f = Filter::from_pairs([("status", "PENDING")]).expect("filter");
        replay(c, Selection::Filter(f.clone()), 37);
        replay(c, Selection::Filter(f), 200);
        assert_eq!(trigger_sql(c), triggers, "the triggers as before");
        // A statement that fails inside the batch: rolled back, the trigger still there.
        let failed = transaction(c, |c| {
            update_counted(
                c,
                "UPDATE dead_letters SET status = no_such_column WHERE id IN (1, 2)",
                &[],
                &[1, 2],
            )
        });
        assert!(failed.is_err());
        assert_eq!(trigger_sql(c), triggers, "the triggers after a failure");
        check_summary(c, "a failed statement");
        // A user's own UPDATE is counted by the trigger as before.
        c.exec(
            "UPDATE dead_letters SET status = 'SKIPPED' WHERE id % 3 = 0",
            &[],
        )
        .expect("user update");
        check_summary(c, "a user's update");
    });
}

#[test]
fn sqlite_replay_counts_the_summary_per_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Archive::open(&dir.path().join("archive.db").to_string_lossy()).expect("open");
    exercise(&a);
}

#[test]
fn postgres_replay_keeps_the_summary_exact() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open postgres");
    exercise(&a);
}
