//! PostgreSQL: an archiver batch of 1,000 records or more is copied by two backends at once
//! (docs/archive.md "Eighteenth round"): its first half on a second connection in a transaction
//! of its own, the second half on the writer's connection, ids in the records' order, every
//! record once and the summary exact — also when a half holds a record archived before (both
//! halves rolled back, the batch inserted row by row) and when the second connection was lost.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;

use bytes::Bytes;
use charon_archive::sql::Conn;
use charon_archive::{Archive, NewRecord, ops};

/// Record `i`: 7 original queues, 3 reasons, 5 error messages (groups shared by both halves).
fn rec(i: usize, at: i64) -> NewRecord {
    let error = format!("error {}", i % 5);
    NewRecord {
        stable_key: format!("s:9:{i}"),
        vhost: "/".into(),
        queue: "dlq".into(),
        original_queue: Some(format!("orders-{}", i % 7)),
        original_exchange: Some("orders".into()),
        original_routing_keys: vec![format!("rk-{i}")],
        reason: Some(["rejected", "expired", "maxlen"][i % 3].into()),
        death_count: 1,
        message_id: Some(format!("m-{i}")),
        correlation_id: None,
        key: Some(format!("m-{i}")),
        content_type: Some("application/json".into()),
        properties: "{}".into(),
        headers: format!("{{\"n\":{i}}}"),
        amqp_properties: Bytes::from(vec![0, 0]),
        payload: Bytes::from(vec![b'x'; 100 + i % 50]),
        error_fingerprint: charon_archive::extract::fingerprint(Some(&error), None),
        error_message: Some(error),
        error_stacktrace: None,
        created_at: at + i as i64,
    }
}

fn texts(c: &mut dyn Conn, sql: &str) -> Vec<String> {
    c.query(sql, &[])
        .expect("query")
        .into_iter()
        .map(|r| r[0].text())
        .collect()
}

/// The summary equals a recount of the records (every group: records, bounds, bytes).
fn summary_exact(c: &mut dyn Conn) {
    let key = "concat_ws('|', vhost, queue, original_queue, reason, error_fingerprint, content_type, \
               original_exchange, status";
    let summary = texts(
        c,
        &format!(
            "SELECT {key}, records, oldest, newest, payload_bytes) FROM dead_letter_groups ORDER BY 1"
        ),
    );
    let recount = texts(
        c,
        &format!(
            "SELECT {key}, COUNT(*), MIN(created_at), MAX(created_at), SUM(payload_bytes)) FROM dead_letters \
             GROUP BY vhost, queue, original_queue, reason, error_fingerprint, content_type, original_exchange, status ORDER BY 1"
        ),
    );
    assert!(!summary.is_empty());
    assert_eq!(summary, recount, "summary against a recount");
}

/// Every record of `recs` is stored once, with its key, message id and body, and the ids
/// follow the records' order.
fn stored_in_order(c: &mut dyn Conn, recs: &[NewRecord]) {
    let rows = c
        .query(
            "SELECT stable_key, message_id, payload FROM dead_letters ORDER BY id",
            &[],
        )
        .expect("records");
    let mut want: Vec<&NewRecord> = recs.iter().collect();
    want.sort_by_key(|r| r.created_at);
    assert_eq!(rows.len(), want.len(), "every record once");
    for (row, r) in rows.iter().zip(want) {
        assert_eq!(row[0].text(), r.stable_key, "ids in the records' order");
        assert_eq!(row[1].opt_text(), r.message_id);
        assert_eq!(row[2].bytes(), r.payload.to_vec());
    }
}

/// The distinct `xmin` of the records with ids in the given rank range (ordered by id).
fn xmins_of(c: &mut dyn Conn, from: usize, to: usize) -> Vec<String> {
    let mut x = texts(
        c,
        &format!(
            "SELECT DISTINCT xmin::text FROM (SELECT xmin, id FROM dead_letters ORDER BY id OFFSET {from} LIMIT {}) r",
            to - from
        ),
    );
    x.sort();
    x
}

fn beside_backends(c: &mut dyn Conn) -> i64 {
    c.query(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = 'charon archive copy'",
        &[],
    )
    .expect("pg_stat_activity")[0][0]
        .int()
}

/// A batch of 2,000 new records: the first 1,000 in one transaction (the second connection's,
/// committed on its own), the last 1,000 in another (the writer's savepoint), ids in order,
/// the summary exact; a batch under 1,000 records stays on one connection.
#[test]
fn postgres_batch_split_over_two_backends() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open postgres");
    let now = charon_archive::time::now_ms();
    let recs: Vec<NewRecord> = (0..2000).map(|i| rec(i, now)).collect();
    a.with(|c| {
        assert_eq!(ops::insert_batch(c, &recs).expect("insert"), 2000);
        stored_in_order(c, &recs);
        let first = xmins_of(c, 0, 1000);
        let second = xmins_of(c, 1000, 2000);
        assert_eq!(first.len(), 1, "first half in one transaction: {first:?}");
        assert_eq!(
            second.len(),
            1,
            "second half in one transaction: {second:?}"
        );
        assert_ne!(first, second, "the halves in two transactions");
        assert_eq!(beside_backends(c), 1, "the second connection is kept");
        summary_exact(c);
        // 999 records: one connection, one savepoint.
        let small: Vec<NewRecord> = (2000..2999).map(|i| rec(i, now)).collect();
        assert_eq!(ops::insert_batch(c, &small).expect("insert"), 999);
        assert_eq!(xmins_of(c, 2000, 2999).len(), 1);
        let all: Vec<NewRecord> = (0..2999).map(|i| rec(i, now)).collect();
        stored_in_order(c, &all);
        summary_exact(c);
    });
}

/// A redelivered batch (records archived before in its first half, its second half, or both):
/// both halves are rolled back, the batch goes in row by row, each record once and counted once.
#[test]
fn postgres_split_batch_with_records_archived_before() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open postgres");
    let now = charon_archive::time::now_ms();
    a.with(|c| {
        let mut base = 0;
        // Archived before: in the first half, in the second half, in both.
        for before in [vec![100], vec![1500], vec![3, 1999]] {
            let old: Vec<NewRecord> = before.iter().map(|i| rec(base + i, now)).collect();
            assert_eq!(
                ops::insert_batch(c, &old).expect("insert"),
                old.len() as u64
            );
            let batch: Vec<NewRecord> = (base..base + 2000).map(|i| rec(i, now)).collect();
            assert_eq!(
                ops::insert_batch(c, &batch).expect("insert"),
                2000 - old.len() as u64,
                "archived before: {before:?}"
            );
            base += 2000;
            let count = c
                .query("SELECT COUNT(*) FROM dead_letters", &[])
                .expect("count")[0][0]
                .int();
            assert_eq!(count, base as i64, "every record once");
            summary_exact(c);
        }
        let total = c
            .query(
                "SELECT CAST(SUM(records) AS BIGINT) FROM dead_letter_groups",
                &[],
            )
            .expect("summary")[0][0]
            .int();
        assert_eq!(total, 6000, "each record counted once");
    });
}

/// The second connection lost between batches: the next batch still goes in (by one
/// connection), the one after is split again over a new second connection.
#[test]
fn postgres_split_batch_after_second_connection_lost() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open postgres");
    let now = charon_archive::time::now_ms();
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..6000).map(|i| rec(i, now)).collect();
        assert_eq!(
            ops::insert_batch(c, &recs[..2000]).expect("insert"),
            2000
        );
        assert_eq!(beside_backends(c), 1);
        c.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'charon archive copy'",
            &[],
        )
        .expect("terminate");
        assert_eq!(
            ops::insert_batch(c, &recs[2000..4000]).expect("insert after the loss"),
            2000
        );
        assert_eq!(
            ops::insert_batch(c, &recs[4000..]).expect("insert"),
            2000
        );
        assert_ne!(
            xmins_of(c, 4000, 5000),
            xmins_of(c, 5000, 6000),
            "split again"
        );
        assert_eq!(beside_backends(c), 1);
        stored_in_order(c, &recs);
        summary_exact(c);
    });
}
