//! Migration 30 (lead, stop 47): PostgreSQL's group summary looks a removed bound up from the
//! group's bound before the statement (`group_bounds::bound_from`), not from the start of its
//! first second. A database left at version 29 with records is upgraded; then, as a replay job
//! does, each group's oldest records are moved to another status in chunks (its oldest bound
//! moves inside a second crowded with records that left the group before), the newest ones
//! likewise, chunks moved back, records moved to another group earlier than its oldest and
//! later than its newest, and deleted: after every statement the summary equals the records
//! counted per group (records, oldest, newest, bytes). On SQLite the migration is recorded and
//! changes nothing.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/summary_check.rs"]
mod summary_check;
#[path = "support/record.rs"]
mod support;

use charon_archive::ops::{self, Selection};
use charon_archive::sql::Conn;
use charon_archive::{Archive, NewRecord, schema};
use summary_check::{check_summary, rows};

/// Three groups (queues), 40 records a second over five seconds, a few ms apart and out of id
/// order within the second.
fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("m30:{i}"),
        queue: format!("dlq-{}", i % 3),
        created_at: 1_700_000_000_000 + (i / 40) as i64 * 1000 + ((i * 7) % 40) as i64 * 20,
        ..support::record(i)
    }
}

fn ids(c: &mut dyn Conn, sql: &str) -> Vec<i64> {
    rows(c, sql).iter().map(|r| r[0].int()).collect()
}

/// The `n` records of status `from` first in `order` (by time, then id), moved to `to` in
/// statements of `chunk` ids, the summary checked after each.
fn move_in_chunks(c: &mut dyn Conn, from: &str, to: &str, order: &str, n: usize, chunk: usize) {
    let mut moving = ids(
        c,
        &format!(
            "SELECT id FROM (SELECT id FROM dead_letters WHERE status = '{from}' ORDER BY {order} LIMIT {n}) AS t"
        ),
    );
    moving.sort_unstable();
    // In the order's sequence, as the job moves them.
    let ordered = rows(
        c,
        &format!(
            "SELECT id, ROW_NUMBER() OVER (ORDER BY {order}) FROM dead_letters WHERE status = '{from}'"
        ),
    );
    let mut seq: Vec<(i64, i64)> = ordered
        .iter()
        .map(|r| (r[1].int(), r[0].int()))
        .filter(|(_, id)| moving.binary_search(id).is_ok())
        .collect();
    seq.sort_unstable();
    for part in seq.chunks(chunk) {
        let list: Vec<String> = part.iter().map(|(_, id)| id.to_string()).collect();
        c.exec(
            &format!(
                "UPDATE dead_letters SET status = '{to}', updated_at = updated_at + 1 WHERE id IN ({})",
                list.join(", ")
            ),
            &[],
        )
        .expect("move");
        check_summary(
            c,
            &format!("{n} {from} → {to} by {order}, chunks of {chunk}"),
        );
    }
}

#[test]
fn postgres_migration_30_bounds_from_the_groups_own() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let mut old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    schema::migrate_to(&mut old, 29).expect("schema 29");
    let recs: Vec<NewRecord> = (0..200).map(rec).collect();
    ops::insert_batch(&mut old, &recs).expect("batch on schema 29");
    check_summary(&mut old, "schema 29");
    drop(old);

    let a = Archive::open(&pg.url).expect("open upgrades");
    a.with(|c| {
        let v = rows(c, "SELECT COUNT(*) FROM archive_migrations WHERE version = 30");
        assert_eq!(v[0][0].int(), 1, "version 30 applied");
        check_summary(c, "upgraded");
        // A replay's steps: the oldest out, to PROCESSING, then on to REPLAYED (each group's
        // oldest bound moving through crowded seconds), and the newest ones.
        move_in_chunks(c, "PENDING", "PROCESSING", "created_at, id", 120, 7);
        move_in_chunks(c, "PROCESSING", "REPLAYED", "created_at, id", 120, 9);
        move_in_chunks(c, "PENDING", "SKIPPED", "created_at DESC, id DESC", 50, 6);
        // Back, so that groups gain records earlier and later than their bounds.
        move_in_chunks(c, "REPLAYED", "PENDING", "id", 40, 11);
        move_in_chunks(c, "SKIPPED", "PENDING", "created_at, id", 20, 3);
        for (sql, when) in [
            (
                "UPDATE dead_letters SET created_at = created_at - 9000 WHERE id % 13 = 4",
                "times moved before every bound",
            ),
            (
                "UPDATE dead_letters SET created_at = created_at + 9000 WHERE id % 11 = 6",
                "times moved after every bound",
            ),
            (
                "UPDATE dead_letters SET queue = 'dlq-0' WHERE id % 7 = 1",
                "records moved to another group",
            ),
        ] {
            c.exec(sql, &[]).expect(when);
            check_summary(c, when);
        }
        let oldest = ids(
            c,
            "SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY queue, status ORDER BY created_at, id) AS n \
             FROM dead_letters) t WHERE n <= 3",
        );
        ops::delete(c, &Selection::Ids(oldest), "carol", None).expect("delete");
        check_summary(c, "each group's three oldest deleted");
        move_in_chunks(c, "PENDING", "REPLAYED", "created_at, id", 60, 5);
    });
}

#[test]
fn sqlite_migration_30_is_recorded_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    let mut old = charon_archive::sqlite::Sqlite::open(&path).expect("sqlite");
    schema::migrate_to(&mut old, 29).expect("schema 29");
    let recs: Vec<NewRecord> = (0..60).map(rec).collect();
    ops::insert_batch(&mut old, &recs).expect("batch on schema 29");
    let objects = |c: &mut dyn Conn| {
        rows(
            c,
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name",
        )
    };
    let before = objects(&mut old);
    drop(old);
    let a = Archive::open(&format!("sqlite://{}", path.display())).expect("open upgrades");
    a.with(|c| {
        let v = rows(
            c,
            "SELECT COUNT(*) FROM archive_migrations WHERE version = 30",
        );
        assert_eq!(v[0][0].int(), 1, "version 30 recorded");
        assert_eq!(objects(c), before, "no schema object changed");
        check_summary(c, "upgraded");
        move_in_chunks(c, "PENDING", "REPLAYED", "created_at, id", 30, 4);
    });
}
