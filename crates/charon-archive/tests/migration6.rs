//! Migration 6 (the index diet) upgrades an archive an older Charon (schema version 5) left, on
//! SQLite and on a real PostgreSQL: every record intact, the summary exact before and after
//! deletes and updates that remove a group's oldest/newest record (their bounds are looked up
//! through the new index on SQLite), and the `key` filter still finding records by key whether
//! their key is the message id (no `key_header`) or not (a `key_header`, or no key at all).

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/record.rs"]
mod record;
#[path = "support/summary_check.rs"]
mod summary_check;

use charon_archive::filter::Filter;
use charon_archive::ops::{self, Selection};
use charon_archive::sql::{Cell, Conn, Dialect};
use charon_archive::{Archive, NewRecord, schema};
use summary_check::{check_summary, rows};

/// Record `i`: its key is its message id (i % 3 == 0, no `key_header`), a header's value
/// (i % 3 == 1), or absent (i % 3 == 2: a `key_header` the message did not carry); two queues,
/// groups by original queue and reason, times out of id order.
fn rec(i: usize, at: i64) -> NewRecord {
    let message_id = (i % 11 != 10).then(|| format!("m-{i}"));
    let key = match i % 3 {
        0 => message_id.clone(),
        1 => Some(format!("tenant-{}", i % 7)),
        _ => None,
    };
    NewRecord {
        stable_key: format!("s:1:{i}"),
        queue: if i.is_multiple_of(2) {
            "dlq-a"
        } else {
            "dlq-b"
        }
        .into(),
        original_queue: (!i.is_multiple_of(5)).then(|| format!("orders-{}", i % 4)),
        reason: (!i.is_multiple_of(6)).then(|| "rejected".to_string()),
        message_id,
        key,
        created_at: at + ((i * 7919) % 200) as i64,
        ..record::record(i)
    }
}

fn snapshot(c: &mut dyn Conn) -> Vec<Vec<Cell>> {
    rows(
        c,
        "SELECT id, stable_key, queue, original_queue, message_id, message_key, headers, payload, \
         payload_bytes, error_fingerprint, status, created_at FROM dead_letters",
    )
}

/// The ids the `key` filter finds (through the API's list), against a scan of `message_key`.
fn check_key_filter(c: &mut dyn Conn, key: &str, when: &str) {
    let f = Filter::from_pairs([("key", key)]).expect("filter");
    let (page, total) = ops::list(c, &f, None, 1, 500).expect("list");
    let mut have: Vec<i64> = page.iter().map(|r| r.id).collect();
    have.sort_unstable();
    let mut want: Vec<i64> = c
        .query(
            "SELECT id FROM dead_letters WHERE message_key = ?",
            &[key.into()],
        )
        .expect("scan")
        .iter()
        .map(|r| r[0].int())
        .collect();
    want.sort_unstable();
    assert!(!want.is_empty(), "records with key {key} ({when})");
    assert_eq!(have, want, "key={key} ({when})");
    assert_eq!(total, want.len() as i64, "key={key} total ({when})");
    assert!(page.iter().all(|r| r.key.as_deref() == Some(key)));
    // With another filter beside it (the planner must still find the few ids first).
    let f = Filter::from_pairs([("key", key), ("status", "PENDING")]).expect("filter");
    let (page, _) = ops::list(c, &f, None, 1, 500).expect("list");
    let pending = c
        .query(
            "SELECT COUNT(*) FROM dead_letters WHERE message_key = ? AND status = 'PENDING'",
            &[key.into()],
        )
        .expect("scan")[0][0]
        .int();
    assert_eq!(
        page.len() as i64,
        pending,
        "key={key}&status=PENDING ({when})"
    );
}

fn index_sql(c: &mut dyn Conn, name: &str) -> Option<String> {
    let q = match c.dialect() {
        Dialect::Sqlite => {
            format!("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = '{name}'")
        }
        Dialect::Postgres => format!("SELECT indexdef FROM pg_indexes WHERE indexname = '{name}'"),
    };
    rows(c, &q).first().map(|r| r[0].text().to_string())
}

fn upgrade(url: &str, mut old: Box<dyn Conn>) {
    let now = charon_archive::time::now_ms() - 100_000;
    schema::migrate_to(old.as_mut(), 5).expect("schema 5");
    let first: Vec<NewRecord> = (0..150).map(|i| rec(i, now)).collect();
    ops::insert_batch(old.as_mut(), &first).expect("batch on schema 5");
    let version =
        |c: &mut dyn Conn| rows(c, "SELECT MAX(version) FROM archive_migrations")[0][0].int();
    assert_eq!(version(old.as_mut()), 5);
    check_summary(old.as_mut(), "schema 5 inserts");
    let before = snapshot(old.as_mut());
    assert_eq!(before.len(), 150);
    drop(old);

    let a = Archive::open(url).expect("open upgrades");
    a.with(|c| {
        assert_eq!(version(c), schema::latest());
        assert!(schema::latest() >= 6);
        assert_eq!(snapshot(c), before, "records intact after migration 6");
        check_summary(c, "migration 6");
        let key_index = index_sql(c, "dead_letters_key").expect("dead_letters_key");
        assert!(
            key_index.to_lowercase().contains("where"),
            "dead_letters_key is partial: {key_index}"
        );
        if c.dialect() == Dialect::Sqlite {
            assert!(index_sql(c, "dead_letters_group").is_some());
            assert!(index_sql(c, "dead_letters_group_key").is_none());
        }
        for key in ["m-3", "m-0", "tenant-1", "tenant-4"] {
            check_key_filter(c, key, "migration 6");
        }
        // A record whose key differs from its message id is not found by its message id.
        let f = Filter::from_pairs([("key", "m-1")]).expect("filter");
        assert_eq!(ops::list(c, &f, None, 1, 10).expect("list").1, 0);
        // New records on the upgraded database (120..149 again: a redelivery).
        let more: Vec<NewRecord> = (120..300).map(|i| rec(i, now)).collect();
        assert_eq!(ops::insert_batch(c, &more).expect("batch"), 150);
        check_summary(c, "a batch after migration 6");
        for key in ["m-297", "tenant-2"] {
            check_key_filter(c, key, "a batch after migration 6");
        }
        // Remove each group's oldest and newest records (their bounds looked up again), by
        // the API's delete and skip and by a user's own SQL.
        let bounds = |c: &mut dyn Conn, agg: &str| -> Vec<i64> {
            rows(
                c,
                &format!(
                    "SELECT MIN(d.id) FROM dead_letters d JOIN (SELECT queue, original_queue, reason, {agg}(created_at) AS t \
                     FROM dead_letters GROUP BY queue, original_queue, reason) b ON d.queue = b.queue \
                     AND d.created_at = b.t AND (d.original_queue = b.original_queue OR (d.original_queue IS NULL AND b.original_queue IS NULL)) \
                     AND (d.reason = b.reason OR (d.reason IS NULL AND b.reason IS NULL)) GROUP BY d.queue, d.original_queue, d.reason"
                ),
            )
            .iter()
            .map(|r| r[0].int())
            .collect()
        };
        let oldest = bounds(c, "MIN");
        assert!(oldest.len() > 5);
        ops::delete(c, &Selection::Ids(oldest), "dave", None).expect("delete");
        check_summary(c, "deleting every group's oldest");
        let newest = bounds(c, "MAX");
        ops::skip(c, &Selection::Ids(newest), "bob", "known").expect("skip");
        check_summary(c, "skipping every group's newest");
        c.exec("DELETE FROM dead_letters WHERE id % 4 = 1", &[])
            .expect("user delete");
        check_summary(c, "a user's delete");
        c.exec(
            "UPDATE dead_letters SET created_at = created_at + 1000, original_queue = NULL WHERE id % 5 = 2",
            &[],
        )
        .expect("user update");
        check_summary(c, "a user's update");
        check_key_filter(c, "tenant-3", "deletes");
    });
}

#[test]
fn sqlite_migration_6_keeps_records_summary_and_key_filter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    let old = charon_archive::sqlite::Sqlite::open(&path).expect("sqlite");
    upgrade(&path.to_string_lossy(), Box::new(old));
}

#[test]
fn postgres_migration_6_keeps_records_summary_and_key_filter() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    upgrade(&pg.url, Box::new(old));
}
