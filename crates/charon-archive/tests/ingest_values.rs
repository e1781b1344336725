//! The archiver's batch INSERT stores every value exactly, on SQLite (bound in place without
//! copies, `sqlite_static`) and on a real PostgreSQL: empty and NULL texts, empty and large
//! binary bodies, non-ASCII texts, over full chunks of rows and a shorter last one, and a
//! redelivered batch half archived before.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;

use bytes::Bytes;
use charon_archive::ops;
use charon_archive::sql::Conn;
use charon_archive::{Archive, NewRecord};
use serde_json::json;

/// Record `i` of the test: every fourth one with empty values, every fourth with big ones.
fn rec(i: usize, at: i64) -> NewRecord {
    let key = format!("s:7:{i}");
    let (payload, props, text, stack): (Vec<u8>, Vec<u8>, Option<String>, Option<String>) =
        match i % 4 {
            0 => (Vec::new(), Vec::new(), Some(String::new()), None),
            1 => (
                (0..65_536 + i).map(|b| (b % 256) as u8).collect(),
                vec![0x80, 0, 0xff, (i % 256) as u8],
                Some(format!("Ünïcødé 🙂 {i}")),
                Some("at x\n\tat y ".repeat(100 + i)),
            ),
            2 => (
                format!("body {i}").into_bytes(),
                vec![1, 2, 3],
                None,
                Some(String::new()),
            ),
            _ => (vec![0; 3], vec![9], Some(format!("plain {i}")), None),
        };
    NewRecord {
        stable_key: key.clone(),
        vhost: "/".into(),
        queue: "dlq".into(),
        original_queue: Some(format!("orders-{}", i % 3)),
        original_exchange: text.clone(),
        original_routing_keys: vec![format!("rk-{i}"), String::new()],
        reason: Some("rejected".into()),
        death_count: i as i64,
        message_id: Some(key.clone()),
        correlation_id: text.clone(),
        key: Some(key),
        content_type: text.clone(),
        properties: json!({"priority": i % 10}).to_string(),
        headers: json!({"n": i, "t": text}).to_string(),
        amqp_properties: Bytes::from(props),
        payload: Bytes::from(payload),
        error_message: text.clone(),
        error_stacktrace: stack,
        error_fingerprint: charon_archive::extract::fingerprint(text.as_deref(), None),
        created_at: at + i as i64,
    }
}

/// Every stored record equals what was inserted, field by field.
fn check_all(c: &mut dyn Conn, recs: &[NewRecord]) {
    let ids = c
        .query("SELECT id, stable_key FROM dead_letters ORDER BY id", &[])
        .expect("ids");
    assert_eq!(ids.len(), recs.len(), "one row per record");
    for row in ids {
        let key = row[1].text();
        let want = recs
            .iter()
            .find(|r| r.stable_key == key)
            .expect("a record inserted");
        let got = ops::get(c, row[0].int()).expect("get").expect("the record");
        let ctx = &want.stable_key;
        assert_eq!(got.payload, want.payload.as_ref(), "payload of {ctx}");
        assert_eq!(got.amqp_properties, want.amqp_properties.as_ref(), "{ctx}");
        assert_eq!(got.original_exchange, want.original_exchange, "{ctx}");
        assert_eq!(
            got.original_routing_keys, want.original_routing_keys,
            "{ctx}"
        );
        assert_eq!(got.correlation_id, want.correlation_id, "{ctx}");
        assert_eq!(got.content_type, want.content_type, "{ctx}");
        assert_eq!(got.message_id, want.message_id, "{ctx}");
        assert_eq!(got.key, want.key, "{ctx}");
        assert_eq!(got.error_message, want.error_message, "{ctx}");
        assert_eq!(got.error_stacktrace, want.error_stacktrace, "{ctx}");
        assert_eq!(got.error_fingerprint, want.error_fingerprint, "{ctx}");
        assert_eq!(got.death_count, want.death_count, "{ctx}");
        assert_eq!(got.created_at, want.created_at, "{ctx}");
        assert_eq!(got.updated_at, want.created_at, "{ctx}");
        assert_eq!(got.properties.to_string(), want.properties, "{ctx}");
        let headers: serde_json::Value = serde_json::from_str(&want.headers).expect("json");
        assert_eq!(got.headers, headers, "{ctx}");
        assert_eq!(got.status, "PENDING", "{ctx}");
    }
}

fn exercise(a: &Archive) {
    let now = charon_archive::time::now_ms();
    // 257 records: two full chunks of 100 rows and a chunk of 57.
    let first: Vec<NewRecord> = (0..257).map(|i| rec(i, now)).collect();
    a.with(|c| {
        assert_eq!(ops::insert_batch(c, &first).expect("insert"), 257);
        check_all(c, &first);
        // Redelivered with new ones: 150..256 archived already, 257..456 new.
        let second: Vec<NewRecord> = (150..457).map(|i| rec(i, now)).collect();
        assert_eq!(ops::insert_batch(c, &second).expect("insert"), 200);
        let all: Vec<NewRecord> = (0..457).map(|i| rec(i, now)).collect();
        check_all(c, &all);
        let counted = c
            .query(
                "SELECT CAST(SUM(records) AS BIGINT) FROM dead_letter_groups",
                &[],
            )
            .expect("summary");
        assert_eq!(counted[0][0].int(), 457, "each record counted once");
    });
}

#[test]
fn sqlite_batch_values_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    exercise(&Archive::open(&format!("sqlite://{}", path.display())).expect("open"));
}

#[test]
fn postgres_batch_values_exact() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    exercise(&Archive::open(&pg.url).expect("open postgres"));
}

/// The archiver's commit without the fsync (`wal_sync`): the records are there, the returned
/// sync works, and the connection's later commits are synced again (`synchronous=FULL`).
#[test]
fn sqlite_sync_later_then_full_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    let a = Archive::open(&format!("sqlite://{}", path.display())).expect("open");
    let now = charon_archive::time::now_ms();
    let mut batch = charon_archive::ingest::Batch::default();
    (0..120).for_each(|i| batch.push(rec(i, now)));
    a.with(|c| {
        let (n, sync) =
            charon_archive::ingest::insert_prepared_sync_later(c, &batch).expect("insert");
        assert_eq!(n, 120);
        sync.expect("SQLite returns its WAL sync")
            .sync()
            .expect("sync");
        let mode = c.query("PRAGMA synchronous", &[]).expect("pragma");
        assert_eq!(mode[0][0].int(), 2, "FULL again after the batch");
        let all: Vec<NewRecord> = (0..120).map(|i| rec(i, now)).collect();
        check_all(c, &all);
    });
    // A database whose files are gone has nothing to sync.
    let gone = charon_archive::wal_sync::WalSync::of(&dir.path().join("none.db"));
    gone.sync().expect("nothing to sync");
}

#[test]
fn postgres_sync_later_is_synced_already() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open postgres");
    let mut batch = charon_archive::ingest::Batch::default();
    let now = charon_archive::time::now_ms();
    (0..3).for_each(|i| batch.push(rec(i, now)));
    a.with(|c| {
        let (n, sync) =
            charon_archive::ingest::insert_prepared_sync_later(c, &batch).expect("insert");
        assert_eq!(n, 3);
        assert!(
            sync.is_none(),
            "PostgreSQL commits are durable when they return"
        );
    });
}

/// The distinct `xmin`s (writing transaction or subtransaction) of `sql`'s rows.
fn xmins(c: &mut dyn Conn, sql: &str) -> std::collections::BTreeSet<String> {
    c.query(sql, &[])
        .expect("xmin")
        .into_iter()
        .map(|r| r[0].text())
        .collect()
}

/// PostgreSQL: a batch of new records goes in by one COPY in its own savepoint (the records'
/// `xmin` is that subtransaction, not the batch's transaction that wrote the summary); a
/// redelivered batch whose last record was archived before fails that COPY and goes in by the
/// INSERTs (`xmin`: the batch's transaction). Values and counts stay exact either way.
#[test]
fn postgres_new_batch_copied_redelivered_batch_inserted() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open postgres");
    let now = charon_archive::time::now_ms();
    a.with(|c| {
        // More records than one COPY statement took before the nineteenth round (1,000): one
        // COPY in the one savepoint.
        let first: Vec<NewRecord> = (0..1050).map(|i| rec(i, now)).collect();
        assert_eq!(ops::insert_batch(c, &first).expect("insert"), 1050);
        let copied = xmins(c, "SELECT xmin::text FROM dead_letters");
        let summary = xmins(c, "SELECT xmin::text FROM dead_letter_groups");
        assert_eq!(copied.len(), 1, "one savepoint: {copied:?}");
        assert!(
            copied.is_disjoint(&summary),
            "records {copied:?} written in the savepoint, summary {summary:?} outside it"
        );
        // 1050..2099 new, then record 1049 again: the COPY fails on its last row.
        let second: Vec<NewRecord> = (1050..2100).chain([1049]).map(|i| rec(i, now)).collect();
        assert_eq!(ops::insert_batch(c, &second).expect("insert"), 1050);
        let all: Vec<NewRecord> = (0..2100).map(|i| rec(i, now)).collect();
        check_all(c, &all);
        let inserted: std::collections::BTreeSet<String> =
            xmins(c, "SELECT xmin::text FROM dead_letters")
                .difference(&copied)
                .cloned()
                .collect();
        let summary = xmins(c, "SELECT xmin::text FROM dead_letter_groups");
        assert_eq!(inserted.len(), 1, "one transaction: {inserted:?}");
        assert!(
            inserted.is_subset(&summary),
            "records {inserted:?} inserted by the batch's transaction, as its summary {summary:?}"
        );
        let counted = c
            .query(
                "SELECT CAST(SUM(records) AS BIGINT) FROM dead_letter_groups",
                &[],
            )
            .expect("summary");
        assert_eq!(counted[0][0].int(), 2100, "each record counted once");
    });
}

/// The archiver writes the front of its batch while the rest waits for the store
/// (`Batch::move_front`): the front and the rest, written one after the other, hold every
/// record exactly and in order (ids follow the records), the front rounded down to whole
/// chunks, the rest's chunks intact (a last short one included), the summary counting each once.
fn exercise_move_front(a: &Archive) {
    use charon_archive::ingest::{Batch, insert_prepared};
    let now = charon_archive::time::now_ms();
    let mut rest = Batch::default();
    (0..357).for_each(|i| rest.push(rec(i, now)));
    let mut front = Batch::default();
    // 250 asked: two whole chunks of 100 go, 157 stay (a full chunk and one of 57).
    assert_eq!(rest.move_front(250, &mut front), 2 * Batch::CHUNK);
    assert_eq!((front.len(), rest.len()), (200, 157));
    // More records pushed into the rest after the move: they fill its short chunk first.
    (357..400).for_each(|i| rest.push(rec(i, now)));
    a.with(|c| {
        assert_eq!(insert_prepared(c, &front).expect("front"), 200);
        assert_eq!(insert_prepared(c, &rest).expect("rest"), 200);
        let all: Vec<NewRecord> = (0..400).map(|i| rec(i, now)).collect();
        check_all(c, &all);
        let keys: Vec<String> = c
            .query("SELECT stable_key FROM dead_letters ORDER BY id", &[])
            .expect("keys")
            .iter()
            .map(|r| r[0].text())
            .collect();
        let want: Vec<String> = (0..400).map(|i| format!("s:7:{i}")).collect();
        assert_eq!(keys, want, "ids in the records' order");
        let counted = c
            .query(
                "SELECT CAST(SUM(records) AS BIGINT) FROM dead_letter_groups",
                &[],
            )
            .expect("summary");
        assert_eq!(counted[0][0].int(), 400, "each record counted once");
    });
    // Everything asked: every record goes, a short last chunk included.
    let mut b = Batch::default();
    (0..57).for_each(|i| b.push(rec(1000 + i, now)));
    let mut all = Batch::default();
    assert_eq!(b.move_front(57, &mut all), 57);
    assert!(b.is_empty());
    // Fewer than a chunk asked of a bigger batch: nothing moves.
    (0..150).for_each(|i| b.push(rec(2000 + i, now)));
    assert_eq!(b.move_front(99, &mut all), 0);
    assert_eq!((all.len(), b.len()), (0, 150));
}

#[test]
fn sqlite_batch_front_moved_then_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    exercise_move_front(&Archive::open(&format!("sqlite://{}", path.display())).expect("open"));
}

#[test]
fn postgres_batch_front_moved_then_rest() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    exercise_move_front(&Archive::open(&pg.url).expect("open postgres"));
}
