//! Migration 5 upgrades an archive an older Charon (schema version 4) left, on SQLite and on a
//! real PostgreSQL: every record intact, the summary still exact, the new `(queue, id)` index
//! there, and the archiver's batches (which count the summary themselves) exact on top of it.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/summary_check.rs"]
mod summary_check;

use bytes::Bytes;
use charon_archive::filter::Filter;
use charon_archive::ops;
use charon_archive::sql::{Cell, Conn, Dialect, Param};
use charon_archive::{Archive, NewRecord, schema};
use serde_json::json;
use summary_check::{check_summary, rows};

fn rec(i: usize, at: i64) -> NewRecord {
    let err = format!("Order {i} failed: kind {}", i % 3);
    NewRecord {
        stable_key: format!("s:1:{i}"),
        vhost: "/".into(),
        queue: if i.is_multiple_of(2) {
            "dlq-a"
        } else {
            "dlq-b"
        }
        .into(),
        original_queue: (!i.is_multiple_of(5)).then(|| format!("orders-{}", i % 4)),
        original_exchange: Some("orders".into()),
        original_routing_keys: vec![format!("orders-{}", i % 4)],
        reason: Some("rejected".into()),
        death_count: 1,
        message_id: Some(format!("m-{i}")),
        correlation_id: None,
        key: Some(format!("m-{i}")),
        content_type: Some("text/plain".into()),
        properties: json!({"message_id": format!("m-{i}")}).to_string(),
        headers: json!({"x-exception-message": err}).to_string(),
        amqp_properties: Bytes::from(vec![1, 2, 3, i as u8]),
        payload: Bytes::from(format!("body {i} ").repeat(1 + i % 7)),
        error_fingerprint: charon_archive::extract::fingerprint(Some(&err), None),
        error_message: Some(err),
        error_stacktrace: None,
        created_at: at + i as i64,
    }
}

/// As a user (or Charon 4) inserts a record: one plain INSERT, counted by the trigger.
fn insert_plain(c: &mut dyn Conn, r: &NewRecord) {
    let t = |s: &Option<String>| Param::Text(s.clone());
    c.exec(
        "INSERT INTO dead_letters (stable_key, vhost, queue, original_queue, original_exchange, original_routing_keys, reason, death_count, \
         message_id, correlation_id, message_key, content_type, properties, headers, amqp_properties, payload, payload_bytes, \
         error_message, error_stacktrace, error_fingerprint, status, created_at, updated_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'PENDING', ?, ?)",
        &[
            r.stable_key.as_str().into(),
            r.vhost.as_str().into(),
            r.queue.as_str().into(),
            t(&r.original_queue),
            t(&r.original_exchange),
            json!(r.original_routing_keys).to_string().into(),
            t(&r.reason),
            r.death_count.into(),
            t(&r.message_id),
            t(&r.correlation_id),
            t(&r.key),
            t(&r.content_type),
            r.properties.clone().into(),
            r.headers.as_str().into(),
            Param::Shared(r.amqp_properties.clone()),
            Param::Shared(r.payload.clone()),
            (r.payload.len() as i64).into(),
            t(&r.error_message),
            t(&r.error_stacktrace),
            t(&r.error_fingerprint),
            r.created_at.into(),
            r.created_at.into(),
        ],
    )
    .expect("plain insert");
}

/// Every record's columns (for "intact").
fn snapshot(c: &mut dyn Conn) -> Vec<Vec<Cell>> {
    rows(
        c,
        "SELECT id, stable_key, queue, original_queue, message_id, headers, amqp_properties, payload, payload_bytes, \
         error_message, error_fingerprint, status, created_at FROM dead_letters",
    )
}

fn upgrade(url: &str, mut old: Box<dyn Conn>) {
    let now = charon_archive::time::now_ms() - 10_000;
    schema::migrate_to(old.as_mut(), 4).expect("schema 4");
    for i in 0..120 {
        insert_plain(old.as_mut(), &rec(i, now));
    }
    let version =
        |c: &mut dyn Conn| rows(c, "SELECT MAX(version) FROM archive_migrations")[0][0].int();
    assert_eq!(version(old.as_mut()), 4);
    check_summary(old.as_mut(), "schema 4 inserts");
    let before = snapshot(old.as_mut());
    assert_eq!(before.len(), 120);
    drop(old);

    let a = Archive::open(url).expect("open upgrades");
    a.with(|c| {
        assert_eq!(version(c), schema::latest());
        assert!(schema::latest() >= 5);
        assert_eq!(snapshot(c), before, "records intact after migration 5");
        check_summary(c, "migration 5");
        let index = match c.dialect() {
            Dialect::Sqlite => "SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'dead_letters_queue_id'",
            Dialect::Postgres => "SELECT indexname FROM pg_indexes WHERE indexname = 'dead_letters_queue_id'",
        };
        assert_eq!(rows(c, index).len(), 1, "the (queue, id) index");
        if c.dialect() == Dialect::Postgres {
            // Bodies compressed with lz4 (PostgreSQL ≥ 14 with lz4), else kept inline up to 8 KB.
            let lz4 = rows(
                c,
                "SELECT attcompression::text FROM pg_attribute WHERE attrelid = 'dead_letters'::regclass AND attname = 'payload'",
            );
            let inline = rows(
                c,
                "SELECT 1 FROM pg_class WHERE relname = 'dead_letters' AND 'toast_tuple_target=8160' = ANY(reloptions)",
            );
            assert!(
                lz4.first().is_some_and(|r| r[0].text() == "l") || !inline.is_empty(),
                "payload storage after migration 5: {lz4:?}"
            );
        }
        // The archiver's batches on the upgraded database: records 100..119 are there already
        // (a redelivery), 120..399 are new.
        let batch: Vec<NewRecord> = (100..400).map(|i| rec(i, now)).collect();
        assert_eq!(ops::insert_batch(c, &batch).expect("batch"), 280);
        check_summary(c, "a batch after migration 5");
        // A user's own INSERT is still counted by the trigger.
        insert_plain(c, &rec(1000, now));
        check_summary(c, "a plain insert after migration 5");
        // The queue filter, newest first, answers from records of both schema versions.
        let f = Filter::from_pairs([("queue", "dlq-b")]).expect("filter");
        let (page, total) = ops::list(c, &f, None, 1, 5).expect("list");
        assert_eq!(total, 200);
        let ids: Vec<i64> = page.iter().map(|r| r.id).collect();
        let want: Vec<i64> = c
            .query(
                "SELECT id FROM dead_letters WHERE queue = 'dlq-b' ORDER BY id DESC LIMIT 5",
                &[],
            )
            .expect("ids")
            .iter()
            .map(|r| r[0].int())
            .collect();
        assert_eq!(ids, want);
        assert!(page.iter().all(|r| r.queue == "dlq-b"));
        let old_one = ops::get(c, before[0][0].int()).expect("get").expect("an old record");
        assert_eq!(
            old_one.payload,
            before[0][7].bytes(),
            "an old record's body byte-exact"
        );
    });
}

#[test]
fn sqlite_migration_5_keeps_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    let old = charon_archive::sqlite::Sqlite::open(&path).expect("sqlite");
    upgrade(&path.to_string_lossy(), Box::new(old));
}

#[test]
fn postgres_migration_5_keeps_records() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    upgrade(&pg.url, Box::new(old));
}
