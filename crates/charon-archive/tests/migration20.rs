//! Migration 20 (twenty-third round, branch `pg9x`): the archiver counts its batches into
//! PostgreSQL's group summary per second (`dead_letter_group_seconds`, migration 19) and the
//! insert trigger steps aside while the batch's flag row is there. A database left at version 19
//! with records (NULL key columns, several seconds, times before 1970) is upgraded; the table
//! stays equal to the records counted per second and group after archiver batches (one by COPY,
//! one a redelivery that half overlaps the archive, inserted row by row), a user's INSERT, a
//! user's UPDATE of the time and a delete. Inside a transaction holding the flag row the trigger
//! adds nothing (the old trigger did). On SQLite the migration is recorded and adds nothing.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/record.rs"]
mod support;

use charon_archive::ops::{self, Selection};
use charon_archive::sql::{Cell, Conn};
use charon_archive::summary::{Keys, key_expr_of};
use charon_archive::{Archive, NewRecord, schema};

fn rec(i: usize) -> NewRecord {
    support::spread("m20", i)
}

fn rows(c: &mut dyn Conn, sql: &str) -> Vec<Vec<Cell>> {
    c.query(sql, &[]).expect(sql)
}

fn seconds(c: &mut dyn Conn) -> Vec<Vec<Cell>> {
    rows(
        c,
        "SELECT second, group_key, records FROM dead_letter_group_seconds ORDER BY 1, 2",
    )
}

fn check_table(c: &mut dyn Conn, when: &str) {
    let have = seconds(c);
    let want = rows(
        c,
        &format!(
            "SELECT FLOOR(created_at / 1000.0)::BIGINT, {}, COUNT(*) FROM dead_letters AS d \
             GROUP BY 1, 2 ORDER BY 1, 2",
            key_expr_of(Keys::V10, "d.")
        ),
    );
    assert!(want.len() > 10, "records in several seconds ({when})");
    assert_eq!(have, want, "summary per second ({when})");
}

fn user_insert(where_: &str) -> String {
    format!(
        "INSERT INTO dead_letters (stable_key, vhost, queue, original_queue, original_exchange, \
         original_routing_keys, reason, death_count, message_id, message_key, properties, headers, \
         amqp_properties, payload, payload_bytes, status, created_at, updated_at) \
         SELECT 'u:' || id || ':' || created_at, '/', 'dlq-9', NULL, NULL, '[]', NULL, 1, NULL, NULL, '{{}}', '{{}}', \
         ''::bytea, ''::bytea, 0, 'PENDING', created_at + 1, created_at + 1 FROM dead_letters WHERE {where_}"
    )
}

#[test]
fn postgres_migration_20_archiver_counts_its_seconds() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let mut old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    schema::migrate_to(&mut old, 19).expect("schema 19");
    let recs: Vec<NewRecord> = (0..300).map(rec).collect();
    ops::insert_batch(&mut old, &recs).expect("batch on schema 19");
    check_table(&mut old, "schema 19");
    drop(old);

    let a = Archive::open(&pg.url).expect("open upgrades");
    a.with(|c| {
        let v20 = rows(c, "SELECT COUNT(*) FROM archive_migrations WHERE version = 20");
        assert_eq!(v20[0][0].int(), 1, "version 20 applied");
        check_table(c, "upgraded");

        // The trigger steps aside while the archiver's flag row is there (the batch counts
        // itself); the old trigger counted these rows.
        let before = seconds(c);
        c.batch("BEGIN").expect("begin");
        c.exec(
            "INSERT INTO archive_counters (name, value) VALUES ('summary_by_archiver', 1)",
            &[],
        )
        .expect("flag");
        c.exec(&user_insert("id % 10 = 1"), &[]).expect("flagged insert");
        let during = seconds(c);
        c.batch("ROLLBACK").expect("rollback");
        assert_eq!(during, before, "the trigger skipped the flagged INSERT");

        // A batch by COPY, then a redelivery overlapping the archive (row-by-row INSERTs, only
        // the new records counted).
        let more: Vec<NewRecord> = (300..500).map(rec).collect();
        assert_eq!(ops::insert_batch(c, &more).expect("batch"), 200);
        check_table(c, "a batch by COPY");
        let again: Vec<NewRecord> = (400..650).map(rec).collect();
        assert_eq!(ops::insert_batch(c, &again).expect("redelivery"), 150);
        check_table(c, "a redelivery");

        // A user's SQL and the archiver's deletes.
        c.exec(&user_insert("id % 13 = 2"), &[]).expect("user insert");
        check_table(c, "a user's INSERT");
        c.exec(
            "UPDATE dead_letters SET created_at = created_at + 2500, status = 'FAILED' WHERE id % 7 = 3",
            &[],
        )
        .expect("user update");
        check_table(c, "a user's UPDATE");
        let del: Vec<i64> = rows(c, "SELECT id FROM dead_letters WHERE id % 5 = 1")
            .iter()
            .map(|r| r[0].int())
            .collect();
        ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
        check_table(c, "a delete");
        let flag = rows(
            c,
            "SELECT COUNT(*) FROM archive_counters WHERE name = 'summary_by_archiver'",
        );
        assert_eq!(flag[0][0].int(), 0, "no flag row left");
    });
}

#[test]
fn sqlite_migration_20_is_recorded_and_adds_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    let mut old = charon_archive::sqlite::Sqlite::open(&path).expect("sqlite");
    schema::migrate_to(&mut old, 19).expect("schema 19");
    let recs: Vec<NewRecord> = (0..50).map(rec).collect();
    ops::insert_batch(&mut old, &recs).expect("batch on schema 19");
    drop(old);
    let a = Archive::open(&path.to_string_lossy()).expect("open upgrades");
    a.with(|c| {
        let v = rows(
            c,
            "SELECT COUNT(*) FROM archive_migrations WHERE version = 20",
        );
        assert_eq!(v[0][0].int(), 1);
        let t = rows(
            c,
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'dead_letter_group_seconds'",
        );
        assert_eq!(t[0][0].int(), 0);
        let more: Vec<NewRecord> = (40..90).map(rec).collect();
        assert_eq!(ops::insert_batch(c, &more).expect("batch"), 40);
        let n = rows(c, "SELECT COUNT(*) FROM dead_letters");
        assert_eq!(n[0][0].int(), 90);
    });
}
