//! The maintained summary (`dead_letter_groups`, migration 3) stays equal to what counting the
//! records gives, through inserts, edits, skips, replays, deletes, retention and a user's own
//! SQL, on SQLite and on a real PostgreSQL; groups and totals answered from it match a scan.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/record.rs"]
mod record;
#[path = "support/summary_check.rs"]
mod summary_check;

use bytes::Bytes;
use charon_archive::filter::Filter;
use charon_archive::ops::{self, Edit, Selection};
use charon_archive::sql::Conn;
use charon_archive::{Archive, NewRecord, jobs};
use serde_json::json;
use summary_check::{check_summary, rows};

fn rec(i: usize, at: i64) -> NewRecord {
    // Groups with NULLs in every nullable key column, and values that would collide if the key
    // were a plain concatenation ("a|b" + "c" vs "a" + "b|c").
    let oq = match i % 4 {
        0 => None,
        1 => Some("orders".to_string()),
        2 => Some("a|b".to_string()),
        _ => Some("a".to_string()),
    };
    let queue = if i % 4 == 3 { "b|dlq" } else { "dlq" };
    let err = (!i.is_multiple_of(3)).then(|| format!("Order {i} failed: kind {}", i % 5));
    NewRecord {
        vhost: if i.is_multiple_of(7) { "other" } else { "/" }.into(),
        queue: queue.into(),
        original_queue: oq,
        reason: (!i.is_multiple_of(6)).then(|| "rejected".to_string()),
        payload: Bytes::from(vec![b'x'; 10 + i % 13]),
        error_fingerprint: charon_archive::extract::fingerprint(err.as_deref(), None),
        error_message: err,
        created_at: at + (i as i64 % 17) * 1000,
        ..record::record(i)
    }
}

/// The summary equals a count over the records.
fn check(c: &mut dyn Conn, when: &str) {
    check_summary(c, when);
    // Groups and totals through the API's functions agree with a scan.
    for by in [
        "original_queue,reason,error_fingerprint,status",
        "status",
        "vhost,queue",
    ] {
        let g = ops::groups(c, Some(by), &Filter::default()).expect("groups");
        let n: i64 = g.iter().map(|v| v["count"].as_i64().unwrap_or(0)).sum();
        let total = rows(c, "SELECT COUNT(*) FROM dead_letters")[0][0].int();
        assert_eq!(n, total, "groups by {by} after {when}");
        let scan = rows(
            c,
            &format!("SELECT COUNT(*) FROM (SELECT 1 FROM dead_letters GROUP BY {by}) t"),
        );
        assert_eq!(
            g.len() as i64,
            scan[0][0].int(),
            "group rows by {by} after {when}"
        );
    }
    let f = Filter::from_pairs([("status", "PENDING"), ("vhost", "/")]).expect("filter");
    let (_, total) = ops::list(c, &f, None, 1, 1).expect("list");
    let want = rows(
        c,
        "SELECT COUNT(*) FROM dead_letters WHERE status = 'PENDING' AND vhost = '/'",
    )[0][0]
        .int();
    assert_eq!(total, want, "list total after {when}");
}

fn exercise(a: &Archive) {
    let now = charon_archive::time::now_ms();
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..300).map(|i| rec(i, now - 100_000)).collect();
        ops::insert_batch(c, &recs).expect("insert");
        ops::insert_batch(c, &recs[..50]).expect("insert again");
        check(c, "insert");
        let later: Vec<NewRecord> = (300..400).map(|i| rec(i, now)).collect();
        ops::insert_batch(c, &later).expect("insert");
        check(c, "second insert");
        // A batch mixing archived records (a redelivery after a crash) with new ones, across a
        // chunk boundary: only the new ones are inserted and counted.
        let mixed: Vec<NewRecord> = (380..660).map(|i| rec(i, now)).collect();
        assert_eq!(ops::insert_batch(c, &mixed).expect("mixed"), 260);
        check(c, "mixed insert");
        // The archiver's flag never outlives its transaction, and a user's own INSERT is still
        // counted by the trigger.
        assert!(rows(c, "SELECT name FROM archive_counters WHERE name = 'summary_by_archiver'").is_empty());
        c.exec(
            "INSERT INTO dead_letters (stable_key, vhost, queue, original_queue, original_routing_keys, reason, death_count, properties, headers, amqp_properties, payload, payload_bytes, status, created_at, updated_at) \
             SELECT 'user-' || stable_key, vhost, queue, original_queue, original_routing_keys, reason, death_count, properties, headers, amqp_properties, payload, payload_bytes, status, created_at, updated_at FROM dead_letters WHERE id <= 30",
            &[],
        )
        .expect("user insert");
        check(c, "a user's INSERT");
        ops::edit(
            c,
            5,
            "alice",
            &Edit {
                payload: Some(vec![b'y'; 500]),
                ..Edit::default()
            },
        )
        .expect("edit");
        check(c, "edit");
        let sel = Selection::Filter(Filter::from_pairs([("original_queue", "orders")]).expect("f"));
        ops::skip(c, &sel, "bob", "known").expect("skip");
        check(c, "skip");
        let (job, _) = jobs::create(
            c,
            &Selection::Filter(Filter::from_pairs([("status", "PENDING")]).expect("f")),
            &json!({}),
            "carol",
        )
        .expect("job");
        let spec = jobs::running(c)
            .expect("running")
            .into_iter()
            .find(|j| j.id == job)
            .expect("spec");
        let next = jobs::next(c, job, 120).expect("next");
        let ids: Vec<i64> = next.iter().map(|r| r.id).collect();
        jobs::inflight(c, job, &ids, 1).expect("inflight");
        check(c, "inflight");
        let at: Vec<(i64, i64)> = ids.iter().map(|id| (*id, 10 + id)).collect();
        jobs::stored_at(c, job, &at).expect("stored");
        let results: Vec<(i64, Result<(), String>)> = ids
            .iter()
            .map(|id| {
                let r = if id % 5 == 0 {
                    Err(format!("NO_ROUTE {}", id % 2))
                } else {
                    Ok(())
                };
                (*id, r)
            })
            .collect();
        jobs::finish(c, &spec, &results).expect("finish");
        check(c, "finish");
        let failed = rows(
            c,
            "SELECT COUNT(*) FROM replay_items WHERE state = 'FAILED'",
        )[0][0]
            .int();
        assert_eq!(
            failed as usize,
            ids.iter().filter(|id| *id % 5 == 0).count()
        );
        let next = jobs::next(c, job, 10).expect("next");
        let ids: Vec<i64> = next.iter().map(|r| r.id).collect();
        jobs::inflight(c, job, &ids, 5).expect("inflight");
        let half: Vec<(i64, i64)> = ids.iter().take(5).map(|id| (*id, 6)).collect();
        jobs::stored_at(c, job, &half).expect("stored");
        let (done, again) =
            jobs::resolve_inflight(c, Some(6), &Default::default()).expect("resolve");
        assert_eq!((done, again), (5, ids.len() as u64 - 5));
        check(c, "resolve");
        ops::delete(
            c,
            &Selection::Filter(Filter::from_pairs([("vhost", "other")]).expect("f")),
            "dave",
            None,
        )
        .expect("delete");
        check(c, "delete");
        ops::retention(c, Some(now - 95_000), None).expect("retention");
        check(c, "retention");
        ops::retention(c, None, Some(2_000)).expect("cap");
        check(c, "size cap");
        // A user's own SQL keeps it right too.
        c.exec(
            "UPDATE dead_letters SET status = 'SKIPPED', reason = NULL WHERE id % 3 = 0",
            &[],
        )
        .expect("user update");
        check(c, "user update");
        c.exec("DELETE FROM dead_letters WHERE id % 4 = 1", &[])
            .expect("user delete");
        check(c, "user delete");
        c.exec("DELETE FROM dead_letters", &[]).expect("delete all");
        check(c, "everything deleted");
        let n = rows(c, "SELECT COUNT(*) FROM dead_letter_groups")[0][0].int();
        assert_eq!(n, 0, "no empty groups are kept");
    });
}

#[test]
fn sqlite_summary_stays_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Archive::open(&dir.path().join("archive.db").to_string_lossy()).expect("open");
    exercise(&a);
}

#[test]
fn postgres_summary_stays_exact() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open postgres");
    exercise(&a);
}
