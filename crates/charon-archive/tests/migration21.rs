//! Migration 21 (twenty-fourth round, branch `pg9z`): PostgreSQL's group summary finds a removed
//! bound through the group summary per second and `dead_letters_created`, and the group key's
//! expression index `dead_letters_group_key` is dropped. A database left at version 20 with
//! records (NULL key columns, several records in one second, times before 1970) is upgraded;
//! the summary stays equal to the records counted per group (records, oldest, newest, bytes)
//! after deletes of each group's oldest and of its newest records, of a group's whole first
//! second but one record, of all but one record of a group, and after users' UPDATEs that move
//! records within their second, to another second, and to another group. On SQLite the
//! migration is recorded and changes nothing.

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

fn rec(i: usize) -> NewRecord {
    support::spread("m21", i)
}

fn ids(c: &mut dyn Conn, sql: &str) -> Vec<i64> {
    rows(c, sql).iter().map(|r| r[0].int()).collect()
}

fn delete(c: &mut dyn Conn, sql: &str, when: &str) {
    let del = ids(c, sql);
    assert!(!del.is_empty(), "something to delete ({when})");
    ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
    check_summary(c, when);
}

const GROUP: &str = "vhost, queue, original_queue, reason, error_fingerprint, content_type, original_exchange, status";

#[test]
fn postgres_migration_21_bounds_from_the_seconds() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let mut old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    schema::migrate_to(&mut old, 20).expect("schema 20");
    let recs: Vec<NewRecord> = (0..600).map(rec).collect();
    ops::insert_batch(&mut old, &recs).expect("batch on schema 20");
    check_summary(&mut old, "schema 20");
    drop(old);

    let a = Archive::open(&pg.url).expect("open upgrades");
    a.with(|c| {
        let v = rows(c, "SELECT COUNT(*) FROM archive_migrations WHERE version = 21");
        assert_eq!(v[0][0].int(), 1, "version 21 applied");
        let idx = |c: &mut dyn Conn, name: &str| {
            rows(
                c,
                &format!("SELECT COUNT(*) FROM pg_indexes WHERE indexname = '{name}'"),
            )[0][0]
                .int()
        };
        assert_eq!(idx(c, "dead_letters_group_key"), 0, "expression index dropped");
        assert_eq!(idx(c, "dead_letter_group_seconds_group"), 1, "seconds by group");
        check_summary(c, "upgraded");

        // Each group's oldest record, then each group's newest (groups of one empty).
        let of_group = |edge: &str| {
            format!(
                "SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY {GROUP} ORDER BY created_at {edge}, id) AS n \
                 FROM dead_letters) t WHERE n = 1"
            )
        };
        delete(c, &of_group("ASC"), "each group's oldest deleted");
        delete(c, &of_group("DESC"), "each group's newest deleted");
        // Every record of each group's first second but its last one (the bound moves inside
        // the second), then all of a group's records but one.
        delete(
            c,
            &format!(
                "SELECT id FROM (SELECT id, created_at, \
                 MIN(FLOOR(created_at / 1000.0)) OVER (PARTITION BY {GROUP}) AS s0, \
                 ROW_NUMBER() OVER (PARTITION BY {GROUP}, FLOOR(created_at / 1000.0) ORDER BY created_at DESC, id DESC) AS n \
                 FROM dead_letters) t WHERE FLOOR(created_at / 1000.0) = s0 AND n > 1"
            ),
            "a first second thinned",
        );
        delete(
            c,
            &format!(
                "SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY {GROUP} ORDER BY id) AS n, \
                 COUNT(*) OVER (PARTITION BY {GROUP}) AS k FROM dead_letters) t WHERE k > 3 AND n > 1 AND n % 7 <> 0"
            ),
            "groups thinned to a few",
        );

        // More records, then users' UPDATEs: within the second, to another second (earlier
        // and later), to another group (status), a NULL key column set.
        let more: Vec<NewRecord> = (600..900).map(rec).collect();
        assert_eq!(ops::insert_batch(c, &more).expect("batch"), 300);
        check_summary(c, "a batch");
        for (sql, when) in [
            (
                "UPDATE dead_letters SET created_at = created_at - (((created_at % 1000) + 1000) % 1000) WHERE id % 3 = 0",
                "times moved to their second's start",
            ),
            (
                "UPDATE dead_letters SET created_at = created_at + 7000 WHERE id % 4 = 1",
                "times moved later",
            ),
            (
                "UPDATE dead_letters SET created_at = created_at - 4000000 WHERE id % 9 = 2",
                "times moved earlier",
            ),
            (
                "UPDATE dead_letters SET status = 'FAILED' WHERE id % 5 = 3",
                "status changed",
            ),
            (
                "UPDATE dead_letters SET reason = NULL WHERE id % 6 = 4",
                "a key column set to NULL",
            ),
        ] {
            c.exec(sql, &[]).expect(when);
            check_summary(c, when);
        }
        delete(
            c,
            &of_group("ASC"),
            "each group's oldest deleted after the updates",
        );
        delete(c, &of_group("DESC"), "each group's newest deleted again");
        let left = rows(c, "SELECT COUNT(*) FROM dead_letters")[0][0].int();
        assert!(left > 100, "records left: {left}");
    });
}

#[test]
fn sqlite_migration_21_is_recorded_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    let mut old = charon_archive::sqlite::Sqlite::open(&path).expect("sqlite");
    schema::migrate_to(&mut old, 20).expect("schema 20");
    let recs: Vec<NewRecord> = (0..60).map(rec).collect();
    ops::insert_batch(&mut old, &recs).expect("batch on schema 20");
    let indexes = |c: &mut dyn Conn| {
        rows(
            c,
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'dead_letters' ORDER BY name",
        )
    };
    let before = indexes(&mut old);
    drop(old);
    let a = Archive::open(&path.to_string_lossy()).expect("open upgrades");
    a.with(|c| {
        let v = rows(
            c,
            "SELECT COUNT(*) FROM archive_migrations WHERE version = 21",
        );
        assert_eq!(v[0][0].int(), 1);
        assert_eq!(indexes(c), before, "no index changed");
        let del = ids(c, "SELECT id FROM dead_letters WHERE id % 4 = 1");
        ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
        check_summary(c, "a delete");
    });
}
